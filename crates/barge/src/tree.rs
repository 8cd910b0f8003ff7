//! The one tree model every source and sink shares: an [`Entry`] (name, [`Kind`], [`Meta`]),
//! its [`Content`], and the push-model [`Sink`] that sources drive.
//!
//! Sources: the archive decoder (through `land::Driver`), the ordered walker (`walk`), and
//! per directory the parallel walker. Sinks: the landers, the encoder (`pack`), du's
//! counter, `list`'s printer, and [`Recording`] for tests.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{FileType, Stat, Statx, StatxFlags};

use rustix::fs::{fgetxattr, flistxattr, AtFlags};
use rustix::io::Errno;

use crate::error::{Error, TreePath};
use crate::sys::xattr::{getxattrat, listxattrat};
use crate::sys::FILE_FLAGS;

/// What every `statx` of an entry asks for, by every walker and operation: everything they
/// use, all of it filled from the inode by local filesystems at no extra cost.
pub(crate) const STATX_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::BLOCKS)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::UID)
    .union(StatxFlags::GID)
    .union(StatxFlags::INO)
    .union(StatxFlags::NLINK);

/// What kind of entry a name is.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device.
    CharDevice,
    /// A block device.
    BlockDevice,
    /// A unix socket.
    Socket,
    /// What the directory listing did not say (and nobody asked the inode yet).
    Unknown,
}

impl Kind {
    /// The kind of a directory listing's or a stat's file type.
    pub fn of(file_type: FileType) -> Kind {
        match file_type {
            FileType::Directory => Kind::Dir,
            FileType::RegularFile => Kind::File,
            FileType::Symlink => Kind::Symlink,
            FileType::Fifo => Kind::Fifo,
            FileType::CharacterDevice => Kind::CharDevice,
            FileType::BlockDevice => Kind::BlockDevice,
            FileType::Socket => Kind::Socket,
            FileType::Unknown => Kind::Unknown,
        }
    }

    /// The kind of a `st_mode`.
    pub fn of_mode(st_mode: u32) -> Kind {
        Kind::of(FileType::from_raw_mode(st_mode))
    }

    /// Its name for messages ("symlink").
    pub fn name(self) -> &'static str {
        self.with_article()
            .split_once(' ')
            .map_or("", |(_, name)| name)
    }

    /// Its name with its article, for messages ("a symlink", "an entry of unknown type").
    pub fn with_article(self) -> &'static str {
        match self {
            Kind::Dir => "a directory",
            Kind::File => "a regular file",
            Kind::Symlink => "a symlink",
            Kind::Fifo => "a fifo",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Socket => "a socket",
            Kind::Unknown => "an entry of unknown type",
        }
    }
}

/// A point in time: seconds since the Unix epoch (negative before it) and nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Whole seconds since 1970-01-01 00:00:00 UTC.
    pub sec: i64,
    /// Nanoseconds, below 1,000,000,000.
    pub nsec: u32,
}

/// Numeric owner and group.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Owner {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

impl Owner {
    /// The running process's effective ids: the owner of what it creates.
    pub(crate) fn of_process() -> Owner {
        Owner {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
        }
    }
}

/// The device number of a character or block device (0, 0 for a fifo).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Device {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl Device {
    /// The device number `stat` names (0, 0 for anything but a device).
    pub(crate) fn of_statx(stat: &Statx) -> Device {
        Device {
            major: stat.stx_rdev_major,
            minor: stat.stx_rdev_minor,
        }
    }

    /// As one number: the major number in the high 32 bits, the minor in the low.
    pub(crate) fn number(self) -> u64 {
        u64::from(self.major) << 32 | u64::from(self.minor)
    }
}

/// What an entry carries besides its name, kind and extended attributes: permission bits,
/// modification time and owner, each as far as the source knows it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits, all twelve (`st_mode & 0o7777`: setuid, setgid and sticky too);
    /// which of them a lander restores is its policy's choice.
    pub mode: u32,
    /// Modification time, when recorded.
    pub mtime: Option<Timestamp>,
    /// Numeric owner, when recorded.
    pub owner: Option<Owner>,
}

impl Meta {
    /// Metadata with permission bits `mode` and nothing else.
    pub fn with_mode(mode: u32) -> Meta {
        Meta {
            mode,
            ..Meta::default()
        }
    }

    /// The permission bits, modification time and owner a `stat` gives.
    pub fn of_stat(stat: &Stat) -> Meta {
        Meta {
            mode: stat.st_mode & 0o7777,
            mtime: Some(Timestamp {
                sec: stat.st_mtime,
                nsec: stat.st_mtime_nsec as u32,
            }),
            owner: Some(Owner {
                uid: stat.st_uid,
                gid: stat.st_gid,
            }),
        }
    }

    /// The permission bits, modification time and owner a `statx` gives (asked with
    /// `MODE`, `MTIME`, `UID` and `GID`).
    pub fn of_statx(stat: &Statx) -> Meta {
        Meta {
            mode: u32::from(stat.stx_mode) & 0o7777,
            mtime: Some(Timestamp {
                sec: stat.stx_mtime.tv_sec,
                nsec: stat.stx_mtime.tv_nsec,
            }),
            owner: Some(Owner {
                uid: stat.stx_uid,
                gid: stat.stx_gid,
            }),
        }
    }
}

/// Tag of an extended-attribute record (extended).
pub const TAG_XATTR: u8 = 0x08;
/// Largest extended-attribute value in bytes (Linux's `XATTR_SIZE_MAX`).
pub const MAX_XATTR_VALUE: usize = 65536;
/// Most bytes the `XATTR` records of one entry may take, tags included.
pub const MAX_XATTRS: usize = 262_144;

/// Extended attributes in their archive form (docs/FORMAT.md): the entry's `XATTR` records
/// one after another, each `0x08 name_len:u8 name value_len:u32le value`, names strictly
/// ascending. The same bytes serve a decoded archive (borrowed from it), a walker (read
/// with `flistxattr`, built with [`Xattrs::push`]) and the encoder (written as they are).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Xattrs<'a>(pub &'a [u8]);

impl<'a> Xattrs<'a> {
    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each `(name, value)`. The bytes must be well formed (a decoder or
    /// [`Xattrs::push`] made them); a malformed tail ends the iteration.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> {
        let mut rest = self.0;
        std::iter::from_fn(move || {
            let (&len, tail) = rest.get(1..)?.split_first()?;
            let name = tail.get(..usize::from(len))?;
            let tail = &tail[usize::from(len)..];
            let size = u32::from_le_bytes(tail.get(..4)?.try_into().ok()?) as usize;
            let value = tail.get(4..4 + size)?;
            rest = &tail[4 + size..];
            Some((name, value))
        })
    }

    /// Appends one attribute in archive form (an `XATTR` record) to `buf`; the caller
    /// keeps names ascending and within the format's bounds.
    pub fn push(buf: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        buf.push(TAG_XATTR);
        buf.push(name.len() as u8);
        buf.extend_from_slice(name);
        buf.extend_from_slice(&(value.len() as u32).to_le_bytes());
        buf.extend_from_slice(value);
    }
}

/// Whose extended attributes an [`XattrReader`] reads.
#[derive(Clone, Copy, Debug)]
pub(crate) enum XattrsOf<'a> {
    /// An open file's.
    Fd(BorrowedFd<'a>),
    /// The entry of that name in the directory, not followed.
    Name(BorrowedFd<'a>, &'a [u8]),
}

impl XattrsOf<'_> {
    fn list(self, names: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            XattrsOf::Fd(fd) => flistxattr(fd, names),
            XattrsOf::Name(dir, name) => listxattrat(dir, name, AtFlags::SYMLINK_NOFOLLOW, names),
        }
    }

    fn get(self, attribute: &[u8], value: &mut [u8]) -> rustix::io::Result<usize> {
        match self {
            XattrsOf::Fd(fd) => fgetxattr(fd, attribute, value),
            XattrsOf::Name(dir, name) => {
                getxattrat(dir, name, AtFlags::SYMLINK_NOFOLLOW, attribute, value)
            }
        }
    }
}

/// Reads the extended attributes of an open file into their archive form ([`Xattrs`]):
/// `flistxattr`, then `fgetxattr` per name, names ascending; buffers reused from one file
/// to the next.
#[derive(Debug, Default)]
pub(crate) struct XattrReader {
    names: Vec<u8>,
    value: Vec<u8>,
    /// The attributes of the file read last, in archive form.
    pub(crate) wire: Vec<u8>,
}

impl XattrReader {
    /// Reads the attributes of `fd` (every namespace the process may read) into `wire`, in
    /// name order; one that would take the entry's records past the format's bound is left
    /// out, and the number of those is returned. Costs one `flistxattr` for a file without
    /// attributes; a filesystem without them gives none; on an error none are kept.
    pub(crate) fn read(&mut self, fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
        self.read_from(XattrsOf::Fd(fd))
    }

    /// [`XattrReader::read`] of the file `of`: for a name by `listxattrat` and
    /// `getxattrat`, or where the kernel has none (before Linux 6.13) through an fd opened
    /// for it.
    pub(crate) fn read_from(&mut self, of: XattrsOf<'_>) -> rustix::io::Result<usize> {
        match (self.read_as(of), of) {
            (Err(Errno::NOSYS), XattrsOf::Name(dir, name)) => {
                let fd = rustix::fs::openat(dir, name, FILE_FLAGS, rustix::fs::Mode::empty())?;
                self.read_as(XattrsOf::Fd(fd.as_fd()))
            }
            (read, _) => read,
        }
    }

    fn read_as(&mut self, of: XattrsOf<'_>) -> rustix::io::Result<usize> {
        self.wire.clear();
        self.list(of)?;
        let mut names: Vec<&[u8]> = self
            .names
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .collect();
        names.sort_unstable();
        let (mut left_out, mut total) = (0, 0);
        self.value.resize(MAX_XATTR_VALUE, 0);
        for name in names {
            let value = match of.get(name, &mut self.value[..]) {
                Ok(n) => &self.value[..n],
                // Removed since the listing.
                Err(Errno::NODATA) => continue,
                Err(e) => {
                    self.wire.clear();
                    return Err(e);
                }
            };
            // Tag, name length, name, value size, value.
            let record = 1 + 1 + name.len() + 4 + value.len();
            if total + record > MAX_XATTRS {
                left_out += 1;
                continue;
            }
            total += record;
            Xattrs::push(&mut self.wire, name, value);
        }
        Ok(left_out)
    }

    /// The NUL-separated names of the attributes of `of` into `names`.
    fn list(&mut self, of: XattrsOf<'_>) -> rustix::io::Result<()> {
        self.names.resize(self.names.capacity().max(4096), 0);
        loop {
            match of.list(&mut self.names[..]) {
                Ok(n) => {
                    self.names.truncate(n);
                    return Ok(());
                }
                Err(Errno::NOTSUP) => {
                    self.names.clear();
                    return Ok(());
                }
                // Grown since asked: ask for the size again.
                Err(Errno::RANGE) => {
                    let size = of.list(&mut [0u8; 0][..])?;
                    self.names.resize(size.max(self.names.len() * 2), 0);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// One entry of a tree, as a source announces it: a single-component name in the
/// directory entered last.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The name: one path component, never `.`, `..`, empty, or with a `/` or NUL.
    pub name: &'a [u8],
    /// What it is.
    pub kind: Kind,
    /// Its metadata (mode 0 when the source does not know it yet).
    pub meta: Meta,
    /// Its extended attributes, when recorded.
    pub xattrs: Xattrs<'a>,
    /// On a regular file that later entries hard-link to: the id they name it by (in an
    /// archive, its entry index; see [`Sink::hard_link`]).
    pub link_id: Option<u64>,
}

impl<'a> Entry<'a> {
    /// An entry of `kind` with `meta` and nothing else.
    pub fn new(name: &'a [u8], kind: Kind, meta: Meta) -> Entry<'a> {
        Entry {
            name,
            kind,
            meta,
            xattrs: Xattrs::default(),
            link_id: None,
        }
    }

    /// A directory entry.
    pub fn dir(name: &'a [u8], meta: Meta) -> Entry<'a> {
        Entry::new(name, Kind::Dir, meta)
    }

    /// A regular file entry.
    pub fn file(name: &'a [u8], meta: Meta) -> Entry<'a> {
        Entry::new(name, Kind::File, meta)
    }
}

/// The content of a regular file, in the form its source has it.
#[non_exhaustive]
#[derive(Clone, Copy, Debug)]
pub enum Content<'a> {
    /// All of it, in memory.
    Bytes(&'a [u8]),
    /// `size` bytes of which the first ones are here; the rest follows through
    /// [`Sink::data`] (an archive read as a stream).
    Stream {
        /// The whole size.
        size: u64,
        /// What arrived so far.
        first: &'a [u8],
    },
    /// `len` bytes at `offset` of the regular file `fd`, which a sink may move inside the
    /// kernel (`copy_file_range`, `sendfile`); `mapped` holds the same bytes when the source
    /// has them in memory (a mapped archive).
    File {
        /// The file holding the bytes.
        fd: BorrowedFd<'a>,
        /// Where they start in it.
        offset: u64,
        /// How many.
        len: u64,
        /// The same bytes, when mapped.
        mapped: Option<&'a [u8]>,
    },
    /// Not opened yet: the entry is named in the directory `dir` (a walker's listing). A
    /// sink opens it itself (relative to `dir`, not following symlinks), which lets it
    /// batch opens and reads (io_uring) or skip files it does not need.
    Unopened {
        /// The directory listing the entry.
        dir: BorrowedFd<'a>,
    },
}

/// Receives a tree, depth first: each entry is in the directory entered last. Sources call
/// it; sinks implement it. Modelled on ripgrep's `grep_searcher::Sink`: an associated error
/// any library error converts into, default methods for what a sink may ignore, and an
/// implementation for `&mut S`.
pub trait Sink {
    /// What a failing sink returns; a source's own errors convert into it.
    type Error: From<Error>;

    /// A directory, entered: entries up to the matching [`Sink::leave_dir`] are in it.
    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<(), Self::Error>;

    /// The end of the directory entered last.
    fn leave_dir(&mut self) -> Result<(), Self::Error>;

    /// A directory the source knows to be empty; by default entered and left.
    fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<(), Self::Error> {
        self.enter_dir(entry)?;
        self.leave_dir()
    }

    /// A regular file and its content.
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<(), Self::Error>;

    /// More content of the file announced last as [`Content::Stream`]; ignored by default.
    fn data(&mut self, _data: &[u8]) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The metadata of the tree's root directory (an archive's `ROOT` record), before its
    /// first entry; ignored by default (a lander applies it only to a destination it
    /// created).
    fn root(&mut self, _meta: &Meta, _xattrs: Xattrs<'_>) -> Result<(), Self::Error> {
        Ok(())
    }

    /// `len` zero bytes of that file that need not be written (a hole of a sparse file); by
    /// default passed to [`Sink::data`] as zeros.
    fn hole(&mut self, mut len: u64) -> Result<(), Self::Error> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        while len > 0 {
            let n = len.min(ZEROS.len() as u64) as usize;
            self.data(&ZEROS[..n])?;
            len -= n as u64;
        }
        Ok(())
    }

    /// A symbolic link to `target` (1 to 4095 bytes, no NUL; never followed by anyone);
    /// ignored by default.
    fn symlink(&mut self, _entry: &Entry<'_>, _target: &[u8]) -> Result<(), Self::Error> {
        Ok(())
    }

    /// A hard link `entry.name` to the regular file announced earlier with
    /// [`Entry::link_id`] `Some(target)` (a source guarantees one did); ignored by default.
    fn hard_link(&mut self, _entry: &Entry<'_>, _target: u64) -> Result<(), Self::Error> {
        Ok(())
    }

    /// A fifo ([`Kind::Fifo`], `device` 0, 0) or a character or block device;
    /// ignored by default.
    fn special(&mut self, _entry: &Entry<'_>, _device: Device) -> Result<(), Self::Error> {
        Ok(())
    }

    /// An entry no archive can hold (a socket, or one of unknown type); ignored by default.
    fn other(&mut self, _entry: &Entry<'_>) -> Result<(), Self::Error> {
        Ok(())
    }

    /// An entry the source could not read (`error` names it and says why): by default the
    /// source fails with it; a sink that takes what it can (pack, as tar does) notes it and
    /// lets the source go on without the entry.
    fn unreadable(&mut self, error: Error) -> Result<(), Self::Error> {
        Err(error.into())
    }

    /// The source failed with `cause`: undo what is half done (a partly written file) and
    /// return the error to report. By default, `cause`.
    fn abort(&mut self, cause: Self::Error) -> Self::Error {
        cause
    }

    /// The source ended: complete pending work.
    fn finish(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The entries that follow are in the directory `dir`, which others announced (a walk
    /// of one share of a tree, [`crate::share::Share`]): before the first entry announced
    /// after entries that were not; ignored by default.
    fn resume(&mut self, _dir: &DirPath) -> Result<(), Self::Error> {
        Ok(())
    }

    /// The entry that follows begins a part of the share's split (a walk of one share of
    /// a tree); ignored by default.
    fn part_begins(&mut self) -> Result<(), Self::Error> {
        Ok(())
    }
}

impl<S: Sink + ?Sized> Sink for &mut S {
    type Error = S::Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<(), S::Error> {
        (**self).enter_dir(entry)
    }
    fn leave_dir(&mut self) -> Result<(), S::Error> {
        (**self).leave_dir()
    }
    fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<(), S::Error> {
        (**self).empty_dir(entry)
    }
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<(), S::Error> {
        (**self).file(entry, content)
    }
    fn data(&mut self, data: &[u8]) -> Result<(), S::Error> {
        (**self).data(data)
    }
    fn hole(&mut self, len: u64) -> Result<(), S::Error> {
        (**self).hole(len)
    }
    fn root(&mut self, meta: &Meta, xattrs: Xattrs<'_>) -> Result<(), S::Error> {
        (**self).root(meta, xattrs)
    }
    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<(), S::Error> {
        (**self).symlink(entry, target)
    }
    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<(), S::Error> {
        (**self).hard_link(entry, target)
    }
    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<(), S::Error> {
        (**self).special(entry, device)
    }
    fn other(&mut self, entry: &Entry<'_>) -> Result<(), S::Error> {
        (**self).other(entry)
    }
    fn unreadable(&mut self, error: Error) -> Result<(), S::Error> {
        (**self).unreadable(error)
    }
    fn abort(&mut self, cause: S::Error) -> S::Error {
        (**self).abort(cause)
    }
    fn finish(&mut self) -> Result<(), S::Error> {
        (**self).finish()
    }
    fn resume(&mut self, dir: &DirPath) -> Result<(), S::Error> {
        (**self).resume(dir)
    }
    fn part_begins(&mut self) -> Result<(), S::Error> {
        (**self).part_begins()
    }
}

/// Where a sink is: the path of the directory entered last, kept from the
/// [`Sink::enter_dir`] and [`Sink::leave_dir`] calls it gets, for messages and listings.
#[derive(Clone, Debug, Default)]
pub struct DirPath {
    path: Vec<u8>,
    /// Where in `path` the name of each directory entered starts.
    starts: Vec<usize>,
}

impl DirPath {
    /// Into the directory `name`.
    pub fn enter(&mut self, name: &[u8]) {
        self.starts.push(self.path.len());
        if !self.path.is_empty() {
            self.path.push(b'/');
        }
        self.path.extend_from_slice(name);
    }

    /// Back to the parent.
    pub fn leave(&mut self) {
        let start = self.starts.pop().expect("a directory was entered");
        self.path.truncate(start);
    }

    /// The current directory's path: its names joined by `/` (empty at the top).
    pub fn as_bytes(&self) -> &[u8] {
        &self.path
    }

    /// The path of `name` in the current directory (of the directory itself when empty).
    pub fn join(&self, name: &[u8]) -> TreePath {
        TreePath::join([&self.path[..]], name)
    }
}

/// One call a [`Recording`] received, with owned names and content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// [`Sink::enter_dir`].
    Enter(Vec<u8>, Meta),
    /// [`Sink::leave_dir`].
    Leave,
    /// [`Sink::empty_dir`].
    Empty(Vec<u8>, Meta),
    /// [`Sink::file`], with all of its content (read from the fd or file for the
    /// [`Content::File`] and [`Content::Unopened`] forms; streamed data appended).
    File(Vec<u8>, Meta, Vec<u8>),
    /// [`Sink::symlink`]: name, metadata, target.
    Symlink(Vec<u8>, Meta, Vec<u8>),
    /// [`Sink::hard_link`]: name, target id.
    HardLink(Vec<u8>, u64),
    /// [`Sink::special`]: name, kind, metadata, device.
    Special(Vec<u8>, Kind, Meta, Device),
    /// [`Sink::other`].
    Other(Vec<u8>, Kind),
    /// The extended attributes (archive form) of the entry recorded next.
    Xattrs(Vec<u8>),
    /// The [`Entry::link_id`] of the file recorded next.
    LinkId(u64),
    /// [`Sink::unreadable`]: the error's message (a recording goes on).
    Unreadable(String),
    /// [`Sink::finish`].
    Finish,
}

/// A sink that records every call, for tests of sources, drivers and walkers.
#[derive(Debug, Default)]
pub struct Recording {
    /// The calls, in order.
    pub calls: Vec<Recorded>,
}

impl Recording {
    /// The calls with every [`Recorded::Empty`] spelled as `Enter` + `Leave`, so that
    /// sources that know empty directories and sources that do not compare equal.
    pub fn normalized(&self) -> Vec<Recorded> {
        let mut calls = Vec::with_capacity(self.calls.len());
        for call in &self.calls {
            match call {
                Recorded::Empty(name, meta) => {
                    calls.push(Recorded::Enter(name.clone(), *meta));
                    calls.push(Recorded::Leave);
                }
                call => calls.push(call.clone()),
            }
        }
        calls
    }
}

impl Recording {
    /// Records what an entry carries besides name and metadata, before the entry itself.
    fn extras(&mut self, entry: &Entry<'_>) {
        if !entry.xattrs.is_empty() {
            self.calls.push(Recorded::Xattrs(entry.xattrs.0.to_vec()));
        }
        if let Some(id) = entry.link_id {
            self.calls.push(Recorded::LinkId(id));
        }
    }
}

impl Sink for Recording {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<(), Error> {
        self.extras(entry);
        self.calls
            .push(Recorded::Enter(entry.name.to_vec(), entry.meta));
        Ok(())
    }
    fn leave_dir(&mut self) -> Result<(), Error> {
        self.calls.push(Recorded::Leave);
        Ok(())
    }
    fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<(), Error> {
        self.extras(entry);
        self.calls
            .push(Recorded::Empty(entry.name.to_vec(), entry.meta));
        Ok(())
    }
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<(), Error> {
        let bytes = read_content(entry, content)?;
        self.extras(entry);
        self.calls
            .push(Recorded::File(entry.name.to_vec(), entry.meta, bytes));
        Ok(())
    }
    fn data(&mut self, data: &[u8]) -> Result<(), Error> {
        match self.calls.last_mut() {
            Some(Recorded::File(_, _, bytes)) => {
                bytes.extend_from_slice(data);
                Ok(())
            }
            _ => panic!("data without a file"),
        }
    }
    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<(), Error> {
        self.extras(entry);
        let (name, meta) = (entry.name.to_vec(), entry.meta);
        self.calls
            .push(Recorded::Symlink(name, meta, target.to_vec()));
        Ok(())
    }
    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<(), Error> {
        self.calls
            .push(Recorded::HardLink(entry.name.to_vec(), target));
        Ok(())
    }
    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<(), Error> {
        self.extras(entry);
        let (name, meta) = (entry.name.to_vec(), entry.meta);
        self.calls
            .push(Recorded::Special(name, entry.kind, meta, device));
        Ok(())
    }
    fn other(&mut self, entry: &Entry<'_>) -> Result<(), Error> {
        self.calls
            .push(Recorded::Other(entry.name.to_vec(), entry.kind));
        Ok(())
    }
    fn unreadable(&mut self, error: Error) -> Result<(), Error> {
        self.calls.push(Recorded::Unreadable(error.to_string()));
        Ok(())
    }
    fn finish(&mut self) -> Result<(), Error> {
        self.calls.push(Recorded::Finish);
        Ok(())
    }
}

/// All of a file's content as bytes (reads [`Content::File`] and [`Content::Unopened`]).
fn read_content(entry: &Entry<'_>, content: Content<'_>) -> Result<Vec<u8>, Error> {
    use rustix::fs::{openat, Mode};
    let path = TreePath(entry.name.to_vec());
    let read_all = |fd: BorrowedFd<'_>, offset: u64, len: u64| {
        let mut bytes = vec![0u8; 1 << 16];
        let mut read = 0;
        while (read as u64) < len {
            if read == bytes.len() {
                bytes.resize(2 * read, 0);
            }
            let want = (len - read as u64).min((bytes.len() - read) as u64) as usize;
            let at = offset + read as u64;
            let n = rustix::io::retry_on_intr(|| {
                rustix::io::pread(fd, &mut bytes[read..read + want], at)
            })
            .map_err(|e| Error::io("read", path.clone(), e))?;
            if n == 0 {
                break;
            }
            read += n;
        }
        bytes.truncate(read);
        Ok(bytes)
    };
    match content {
        Content::Bytes(bytes) => Ok(bytes.to_vec()),
        Content::Stream { first, .. } => Ok(first.to_vec()),
        Content::File {
            fd, offset, len, ..
        } => read_all(fd, offset, len),
        Content::Unopened { dir } => {
            let fd = openat(dir, entry.name, FILE_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open", path.clone(), e))?;
            read_all(std::os::fd::AsFd::as_fd(&fd), 0, u64::MAX)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By name (`listxattrat`, `getxattrat`) a file's attributes read as through its fd,
    /// in name order, and a symlink's are its own (none), not its target's.
    #[test]
    fn xattrs_read_by_name_are_those_read_through_an_fd() {
        use rustix::fs::{lsetxattr, openat, Mode, XattrFlags, CWD};
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"").unwrap();
        for (name, value) in [("user.b", &b"2"[..]), ("user.a", b"1")] {
            lsetxattr(&file, name, value, XattrFlags::empty()).unwrap();
        }
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let at = openat(CWD, dir.path(), crate::sys::DIR_FLAGS, Mode::empty()).unwrap();
        let fd = openat(&at, "f", FILE_FLAGS, Mode::empty()).unwrap();
        let mut reader = XattrReader::default();
        reader.read(fd.as_fd()).unwrap();
        let by_fd = reader.wire.clone();
        let names: Vec<&[u8]> = Xattrs(&by_fd).iter().map(|(name, _)| name).collect();
        assert_eq!(names, [&b"user.a"[..], b"user.b"]);
        assert_eq!(reader.read_from(XattrsOf::Name(at.as_fd(), b"f")), Ok(0));
        assert_eq!(reader.wire, by_fd);
        // Before Linux 6.13 a symlink's are not read (no fd can be opened for it).
        if reader.read_from(XattrsOf::Name(at.as_fd(), b"l")).is_ok() {
            assert!(reader.wire.is_empty(), "the symlink followed");
        }
    }

    #[test]
    fn kind_names_drop_the_article() {
        assert_eq!(Kind::Symlink.name(), "symlink");
        assert_eq!(Kind::Unknown.name(), "entry of unknown type");
        assert_eq!(Kind::File.with_article(), "a regular file");
    }

    #[test]
    fn dir_path_follows_enter_and_leave() {
        let mut at = DirPath::default();
        assert_eq!(at.join(b"").to_string(), ".");
        at.enter(b"a");
        at.enter(b"bb");
        assert_eq!(at.join(b"c").0, b"a/bb/c");
        at.leave();
        assert_eq!(at.join(b"x").0, b"a/x");
        at.leave();
        assert_eq!(at.join(b"top").0, b"top");
    }

    #[test]
    fn normalized_spells_empty_dirs_as_enter_and_leave() {
        let mut rec = Recording::default();
        let meta = Meta::with_mode(0o755);
        rec.empty_dir(&Entry::dir(b"e", meta)).unwrap();
        rec.file(&Entry::file(b"f", meta), Content::Bytes(b"x"))
            .unwrap();
        assert_eq!(
            rec.normalized(),
            vec![
                Recorded::Enter(b"e".to_vec(), meta),
                Recorded::Leave,
                Recorded::File(b"f".to_vec(), meta, b"x".to_vec()),
            ]
        );
    }

    /// Names come out sorted, and attributes past the format's bound are left out and
    /// counted (tmpfs holds that many; a filesystem that does not skips the test).
    #[test]
    fn attributes_come_sorted_and_those_past_the_bound_are_left_out() {
        let Ok(file) = tempfile::tempfile_in("/dev/shm") else {
            return;
        };
        let set = |name: &str, value: &[u8]| {
            rustix::fs::fsetxattr(&file, name, value, rustix::fs::XattrFlags::empty())
        };
        set("user.b", b"2").unwrap();
        set("user.a", b"1").unwrap();
        let mut reader = XattrReader::default();
        assert_eq!(reader.read(std::os::fd::AsFd::as_fd(&file)), Ok(0));
        let mut want = Vec::new();
        Xattrs::push(&mut want, b"user.a", b"1");
        Xattrs::push(&mut want, b"user.b", b"2");
        assert_eq!(reader.wire, want);

        let big = vec![7u8; MAX_XATTR_VALUE];
        for i in 0..5 {
            if set(&format!("user.big{i}"), &big).is_err() {
                return;
            }
        }
        // Each big record takes 65,552 bytes: three fit beside the small ones, not four.
        assert_eq!(reader.read(std::os::fd::AsFd::as_fd(&file)), Ok(2));
        let names: Vec<&[u8]> = Xattrs(&reader.wire).iter().map(|(name, _)| name).collect();
        let want: [&[u8]; 5] = [
            b"user.a",
            b"user.b",
            b"user.big0",
            b"user.big1",
            b"user.big2",
        ];
        assert_eq!(names, want);
        assert!(reader.wire.len() <= MAX_XATTRS);
    }
}
