//! The directory walker: getdents64 on directory fds, `openat` relative to the parent,
//! entries sorted by name bytes, no path strings built for syscalls.

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{fstat, openat, statat, AtFlags, FileType, Mode, OFlags, RawDir, Stat};
use rustix::io::Errno;

use crate::error::{Error, Result, TreePath};

/// Size of the getdents64 buffer.
const DIRENT_BUFFER: usize = 64 * 1024;

/// Flags to open a directory for reading its entries.
pub const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Flags to open a regular file for reading; `NONBLOCK` keeps a fifo swapped in after the
/// listing from blocking the walk.
pub const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// The entries of one directory: names in one buffer, with their getdents64 types.
#[derive(Default, Debug)]
pub struct Listing {
    names: Vec<u8>,
    entries: Vec<(u32, u8, FileType)>,
}

impl Listing {
    /// Replaces the contents with the entries of the directory `dir` (without `.` and `..`).
    pub fn read(
        &mut self,
        dir: BorrowedFd<'_>,
        buf: &mut [MaybeUninit<u8>],
    ) -> rustix::io::Result<()> {
        self.names.clear();
        self.entries.clear();
        let mut raw = RawDir::new(dir, buf);
        while let Some(entry) = raw.next() {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            self.entries
                .push((self.names.len() as u32, name.len() as u8, entry.file_type()));
            self.names.extend_from_slice(name);
        }
        Ok(())
    }

    /// Sorts the entries by name bytes.
    pub fn sort(&mut self) {
        let names = &self.names;
        self.entries.sort_unstable_by(|a, b| {
            let name = |(start, len, _): &(u32, u8, FileType)| {
                &names[*start as usize..*start as usize + *len as usize]
            };
            name(a).cmp(name(b))
        });
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the directory has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The name and type of entry `i`.
    pub fn get(&self, i: usize) -> (&[u8], FileType) {
        let (start, len, kind) = self.entries[i];
        (
            &self.names[start as usize..start as usize + len as usize],
            kind,
        )
    }
}

/// A getdents64 buffer of the walker's size.
pub fn dirent_buffer() -> Vec<MaybeUninit<u8>> {
    vec![MaybeUninit::uninit(); DIRENT_BUFFER]
}

/// Receives the tree from [`walk`], depth first, siblings in name-byte order.
pub trait Visitor {
    /// A directory, about to be entered.
    fn enter_dir(&mut self, name: &[u8], stat: &Stat, at: &Location) -> Result<()>;
    /// The end of the directory entered last.
    fn leave_dir(&mut self) -> Result<()>;
    /// A regular file, opened for reading, with its `fstat`.
    fn file(&mut self, name: &[u8], file: OwnedFd, stat: &Stat, at: &Location) -> Result<()>;
    /// An entry that is neither a directory nor a regular file (symlink, device, fifo, socket).
    fn skip(&mut self, path: TreePath, kind: &'static str);
    /// A regular file as listed in the directory `dir`, before the walker opens it: a
    /// visitor that opens and reads it itself returns `true`, and the walker moves on.
    fn listed_file(&mut self, _dir: BorrowedFd<'_>, _name: &[u8], _at: &Location) -> Result<bool> {
        Ok(false)
    }
}

/// Where the walk is: the names of the directories above the current entry.
#[derive(Default, Debug)]
pub struct Location {
    dirs: Vec<Box<[u8]>>,
}

impl Location {
    /// The path of `name` in the current directory.
    pub fn path(&self, name: &[u8]) -> TreePath {
        TreePath::join(self.dirs.iter().map(|d| &d[..]), name)
    }
}

/// Describes a file type for messages.
pub fn kind_name(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "fifo",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        FileType::Unknown => "unknown file type",
    }
}

/// Describes a file type with its article, for messages (`a symlink`, `an unknown ...`).
pub fn kind_with_article(kind: FileType) -> &'static str {
    match kind {
        FileType::RegularFile => "a regular file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a fifo",
        FileType::Socket => "a socket",
        FileType::CharacterDevice => "a character device",
        FileType::BlockDevice => "a block device",
        FileType::Unknown => "an entry of unknown type",
    }
}

struct Frame {
    fd: OwnedFd,
    listing: Listing,
    next: usize,
}

/// Walks the tree below the directory `root`, calling `visitor` for every entry. Reads
/// each directory once with getdents64 and opens every entry relative to its parent's fd,
/// never following symlinks.
pub fn walk(root: OwnedFd, visitor: &mut impl Visitor) -> Result<()> {
    let mut buf = dirent_buffer();
    let mut at = Location::default();
    let mut pool: Vec<Listing> = Vec::new();
    let mut name = Vec::with_capacity(256);
    let mut stack = vec![open_frame(root, &mut buf, &mut pool, || at.path(b""))?];
    while let Some(frame) = stack.last_mut() {
        if frame.next == frame.listing.len() {
            let done = stack.pop().expect("frame exists");
            pool.push(done.listing);
            if !stack.is_empty() {
                at.dirs.pop();
                visitor.leave_dir()?;
            }
            continue;
        }
        let (entry, mut kind) = frame.listing.get(frame.next);
        frame.next += 1;
        name.clear();
        name.extend_from_slice(entry);
        let parent = frame.fd.as_fd();
        if kind == FileType::Unknown {
            let stat = statat(parent, &name[..], AtFlags::SYMLINK_NOFOLLOW)
                .map_err(|e| Error::io("fstatat", at.path(&name), e))?;
            kind = FileType::from_raw_mode(stat.st_mode);
        }
        match kind {
            FileType::Directory => {
                let fd = openat(parent, &name[..], DIR_FLAGS, Mode::empty())
                    .map_err(|e| Error::io("open directory", at.path(&name), e))?;
                let stat = fstat(&fd).map_err(|e| Error::io("fstat", at.path(&name), e))?;
                visitor.enter_dir(&name, &stat, &at)?;
                at.dirs.push(name.as_slice().into());
                let frame = open_frame(fd, &mut buf, &mut pool, || at.path(b""))?;
                stack.push(frame);
            }
            FileType::RegularFile if visitor.listed_file(parent, &name, &at)? => {}
            FileType::RegularFile => {
                let fd = match openat(parent, &name[..], FILE_FLAGS, Mode::empty()) {
                    Ok(fd) => fd,
                    // Replaced by a symlink since the listing.
                    Err(Errno::LOOP) => {
                        visitor.skip(at.path(&name), kind_name(FileType::Symlink));
                        continue;
                    }
                    Err(e) => return Err(Error::io("open", at.path(&name), e)),
                };
                let stat = fstat(&fd).map_err(|e| Error::io("fstat", at.path(&name), e))?;
                match FileType::from_raw_mode(stat.st_mode) {
                    FileType::RegularFile => visitor.file(&name, fd, &stat, &at)?,
                    other => visitor.skip(at.path(&name), kind_name(other)),
                }
            }
            other => visitor.skip(at.path(&name), kind_name(other)),
        }
    }
    Ok(())
}

fn open_frame(
    fd: OwnedFd,
    buf: &mut [MaybeUninit<u8>],
    pool: &mut Vec<Listing>,
    path: impl Fn() -> TreePath,
) -> Result<Frame> {
    let mut listing = pool.pop().unwrap_or_default();
    listing
        .read(fd.as_fd(), buf)
        .map_err(|e| Error::io("getdents64", path(), e))?;
    listing.sort();
    Ok(Frame {
        fd,
        listing,
        next: 0,
    })
}
