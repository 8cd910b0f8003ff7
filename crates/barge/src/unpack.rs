//! `unpack` and `list` as library operations: [`Unpack`] opens an archive ([`Archive`]: a
//! file or block device mapped, anything else streamed, at an offset), opens and confines the
//! destination, picks the engine and lands. A front end only maps its options onto it and
//! reports.

use std::cell::{Cell, RefCell, RefMut};
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustix::fs::{fstat, open, seek, FileType, Mode, OFlags, SeekFrom};
use rustix::stdio::stdin;

use crate::error::{Error, Result, TreePath};
use crate::format::index::Index;
use crate::format::{Limits, DEFAULT_MAX_ENTRIES};
use crate::indexed::Seekable;
use crate::interrupt::Cancel;
use crate::land::parallel::{self, land_parallel, Decoding, THREADS_FROM};
use crate::land::restore::Policy;
pub use crate::land::restore::{Existing, NotRestored, Restore};
use crate::land::select::Select;
use crate::land::sync::Setup;
use crate::land::sync::SyncLander;
use crate::land::uring::UringLander;
pub use crate::land::LandSummary;
use crate::land::{Driver, Land};
use crate::owners::Owners;
use crate::root::{open_dest, Destination};
pub use crate::shared_unpack::{Landed, SharedUnpack};
use crate::source::{ByteSource, ByteStream, ReadSource};
use crate::sys::map::{populate, Mapped};
use crate::threads::Work;
use crate::tree::{Owner, Sink};
use crate::Progress;

/// The pipe buffer asked for when the archive comes through a pipe (the default is 64 KiB).
const PIPE_BUFFER: usize = 1 << 20;

/// How an unpack lands the tree (serialized by the names in [`Engine::ALL`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Engine {
    /// [`Engine::Threads`], except [`Engine::Sync`] for an archive file under
    /// `THREADS_FROM` bytes (a shorter stream lands on one thread within `Threads`).
    #[default]
    Auto,
    /// One thread making plain system calls.
    Sync,
    /// One thread per core lands, the first also decodes (and reads a stream).
    Threads,
    /// Like `Threads` (one thread for a stream), each lander creating the small files of a
    /// directory in io_uring batches.
    Uring,
}

impl Engine {
    /// Every engine, under the name a front end offers it by.
    pub const ALL: [(&'static str, Engine); 4] = [
        ("auto", Engine::Auto),
        ("sync", Engine::Sync),
        ("threads", Engine::Threads),
        ("uring", Engine::Uring),
    ];
}

/// Where in its input an archive is: from byte `offset`, and `length` bytes long (else to
/// the end of the input, where only zero padding may follow it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    /// The archive's first byte in the input.
    pub offset: Option<u64>,
    /// The archive's length.
    pub length: Option<u64>,
}

/// An unpack (or listing): its engine, limits, confinement, where the archive is, and what
/// it restores.
#[derive(Clone, Debug)]
pub struct Unpack {
    engine: Engine,
    limits: Limits,
    sandbox: bool,
    region: Region,
    restore: Restore,
    /// The process's effective ids when the unpack was made (before any sandbox, in which
    /// anyone is root of their own user namespace).
    me: Owner,
    strip: usize,
    /// The entries taken: member PATHs and `--exclude` patterns.
    select: Select,
    /// Stops the unpack once cancelled.
    cancel: Cancel,
    /// The umask entries are created under, and the mode of a DEST it creates (by default
    /// 0o777 less the umask).
    umask: u32,
    dest_mode: Option<u32>,
    /// The system's users and groups, read by [`Unpack::prepare`] (before any sandbox) where
    /// owners are restored by name from a version 2 archive (version 1 records no names).
    owners: OnceLock<Arc<Owners>>,
}

impl Default for Unpack {
    /// The automatic engine, the sandbox, the default depth limit, at most
    /// [`DEFAULT_MAX_ENTRIES`] entries, and [`Restore::default`] for a process running as
    /// root or not, as the effective user id says now.
    fn default() -> Unpack {
        let me = Owner::of_process();
        Unpack {
            engine: Engine::Auto,
            limits: Limits {
                max_entries: Some(DEFAULT_MAX_ENTRIES),
                ..Limits::default()
            },
            sandbox: true,
            region: Region::default(),
            restore: Restore::default(),
            me,
            strip: 0,
            select: Select::default(),
            cancel: Cancel::new(),
            umask: crate::root::process_umask(),
            dest_mode: None,
            owners: OnceLock::new(),
        }
    }
}

/// An archive opened for reading.
pub struct Archive {
    input: Input,
    /// Zero bytes may follow its end (see [`Limits::zero_padding`]).
    padded: bool,
    /// The first bytes read from a streamed archive (see [`Archive::head`]).
    head: RefCell<Vec<u8>>,
    /// How many bytes at the end of `head` were read ahead ([`Archive::peek`]) and are
    /// still to be read.
    ahead: Cell<usize>,
    /// The fd a source reads from, which a sandbox keeps open (a compressed archive's).
    source_fd: Option<RawFd>,
}

/// What a whole archive compressed by `zstd` (`barge pack | zstd`) starts with.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Reads an archive's fd from `at` to `end`: by `pread` when it is a file, else (a pipe)
/// as the bytes come.
struct FdReader {
    fd: OwnedFd,
    cancel: Cancel,
    at: u64,
    end: u64,
    positioned: bool,
}

impl Read for FdReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = (self.end - self.at).min(buf.len() as u64) as usize;
        let buf = &mut buf[..want];
        let n = crate::interrupt::retry(&self.cancel, || match self.positioned {
            true => rustix::io::pread(&self.fd, &mut *buf, self.at),
            false => rustix::io::read(&self.fd, &mut *buf),
        })?;
        self.at += n as u64;
        Ok(n)
    }
}

/// How many of its first bytes [`Archive::head`] shows: enough for the magic numbers of
/// compressors and for tar's, at byte 257.
const HEAD: usize = 512;

/// Mapped when it is a regular file or block device, streamed otherwise.
enum Input {
    Mapped(Mapped),
    /// A stream (stdin when no fd), of which at most `length` bytes are the archive.
    Stream {
        fd: Option<OwnedFd>,
        length: Option<u64>,
    },
    /// Any other source (a reader, the queue from a confined lander's parent), read once.
    Source(RefCell<Box<dyn ByteSource + Send>>),
}

/// A stream's source that keeps the first [`HEAD`] bytes it reads (see [`Archive::head`]).
struct Recorded<'a, S> {
    source: S,
    head: &'a RefCell<Vec<u8>>,
    /// See [`Archive::ahead`]: served first.
    ahead: &'a Cell<usize>,
}

impl<S: ByteSource> ByteSource for Recorded<'_, S> {
    fn read(&mut self, buf: &mut [u8], offset: u64, cancel: &Cancel) -> Result<usize> {
        let ahead = self.ahead.get();
        if ahead > 0 {
            let head = self.head.borrow();
            let n = ahead.min(buf.len());
            let start = head.len() - ahead;
            buf[..n].copy_from_slice(&head[start..start + n]);
            self.ahead.set(ahead - n);
            return Ok(n);
        }
        let n = self.source.read(buf, offset, cancel)?;
        let mut head = self.head.borrow_mut();
        let room = HEAD.saturating_sub(head.len());
        head.extend_from_slice(&buf[..n.min(room)]);
        Ok(n)
    }

    fn wait(&self, patience: Option<std::time::Duration>, cancel: &Cancel) -> Result<bool> {
        self.source.wait(patience, cancel)
    }
}

/// The source of an [`Input::Source`] archive while a stream reads it.
struct Borrowed<'a>(RefMut<'a, Box<dyn ByteSource + Send>>);

impl ByteSource for Borrowed<'_> {
    fn read(&mut self, buf: &mut [u8], offset: u64, cancel: &Cancel) -> Result<usize> {
        self.0.read(buf, offset, cancel)
    }

    fn wait(&self, patience: Option<std::time::Duration>, cancel: &Cancel) -> Result<bool> {
        self.0.wait(patience, cancel)
    }
}

impl Unpack {
    /// An unpack with the defaults (see [`Unpack::default`]).
    pub fn new() -> Unpack {
        Unpack::default()
    }

    /// Lands with `engine`.
    pub fn engine(mut self, engine: Engine) -> Unpack {
        self.engine = engine;
        self
    }

    /// Refuses archives beyond `limits` (its `zero_padding` is decided by the input).
    pub fn limits(mut self, limits: Limits) -> Unpack {
        self.limits = limits;
        self
    }

    /// Confines the landing to the destination in a user-namespace chroot (the default);
    /// see `open_dest`.
    pub fn sandbox(mut self, sandbox: bool) -> Unpack {
        self.sandbox = sandbox;
        self
    }

    /// Takes only the entries `select` takes: member PATHs (a directory with everything
    /// below it; a PATH that names nothing is an error once the archive ends) less what its
    /// `--exclude` patterns match. A hard link to a file left out is an error
    /// ([`Error::StrippedLink`]).
    pub fn select(mut self, select: Select) -> Unpack {
        self.select = select;
        self
    }

    /// Drops the first `n` components of every path, as tar's `--strip-components`:
    /// entries with no more than `n` components are skipped (never landed or listed), and a
    /// hard link to a skipped file is an error ([`Error::StrippedLink`]).
    pub fn strip_components(mut self, n: usize) -> Unpack {
        self.strip = n;
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels).
    pub fn cancel(mut self, cancel: Cancel) -> Unpack {
        self.cancel = cancel;
        self
    }

    /// Creates entries under `umask`, the process's umask when landing (the default: the
    /// process's when the unpack is made): the modes it gives by `fchmod` (set-id files,
    /// directories once filled) are masked alike. For the archive's modes exactly (tar's
    /// `-p`), clear the process's umask and pass 0, as `barge unpack` does; the library
    /// never changes the umask, which is the process's.
    pub fn umask(mut self, umask: u32) -> Unpack {
        self.umask = umask;
        self
    }

    /// Gives a DEST it creates (and its missing parents) `mode` once landing ends; by
    /// default 0o777 less the umask.
    pub fn dest_mode(mut self, mode: u32) -> Unpack {
        self.dest_mode = Some(mode);
        self
    }

    /// Where in its input the archive is.
    pub fn region(mut self, region: Region) -> Unpack {
        self.region = region;
        self
    }

    /// Restores metadata as `restore` says (docs/FORMAT.md, "Restoring metadata"). Modes
    /// are created under the process's umask: clear it first for exact modes.
    pub fn restore(mut self, restore: Restore) -> Unpack {
        self.restore = restore;
        self
    }

    /// Opens the archive at `path`, or stdin. A regular file or block device is mapped
    /// (pages are read as they are landed), anything else is read as a stream, after
    /// skipping to the region's offset. Zero padding may follow the archive in a region
    /// without a length, and on a block device (a container of a fixed size).
    pub fn open(&self, path: Option<&Path>) -> Result<Archive> {
        let shown = TreePath(path.map_or(b"<stdin>".to_vec(), |p| {
            p.as_os_str().as_encoded_bytes().to_vec()
        }));
        let fail = |op, e| Error::io(op, shown.clone(), e);
        let owned = match path {
            Some(p) => Some(
                open(
                    p,
                    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
                    Mode::empty(),
                )
                .map_err(|e| fail("open the archive", e))?,
            ),
            None => None,
        };
        let fd = owned.as_ref().map_or(stdin(), |f| f.as_fd());
        let stat = fstat(fd).map_err(|e| fail("stat the archive", e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let Region { offset, length } = self.region;
        let padded = length.is_none() && (offset.is_some() || kind == FileType::BlockDevice);
        let offset = offset.unwrap_or(0);
        let at_start = seek(fd, SeekFrom::Current(0)).is_ok_and(|pos| pos == 0);
        let input = match kind {
            FileType::RegularFile | FileType::BlockDevice if at_start => {
                // A block device's size is where its end is (fstat says 0).
                let size = match kind {
                    FileType::RegularFile => stat.st_size as u64,
                    _ => seek(fd, SeekFrom::End(0)).map_err(|e| fail("seek the archive", e))?,
                };
                let len = length.unwrap_or(size.saturating_sub(offset));
                let end = offset.saturating_add(len);
                if end > size {
                    return Err(Error::InputTooShort {
                        needed: end,
                        got: size,
                    });
                }
                let file = match owned {
                    Some(f) => f,
                    None => fd
                        .try_clone_to_owned()
                        .map_err(|e| Error::os("dup stdin", shown.clone(), e))?,
                };
                let mapped = Mapped::new(file, offset, len);
                Input::Mapped(mapped.map_err(|e| Error::io("mmap", shown.clone(), e))?)
            }
            FileType::Directory => {
                let cause = std::io::Error::other("it is a directory");
                return Err(Error::os("read the archive", shown, cause));
            }
            _ => {
                if kind == FileType::Fifo {
                    // A larger pipe buffer means fewer reads and wake-ups on both ends (best
                    // effort: the limit for unprivileged users is /proc/sys/fs/pipe-max-size).
                    let _ = rustix::pipe::fcntl_setpipe_size(fd, PIPE_BUFFER);
                }
                ByteStream::new(fd)
                    .cancel(self.cancel.clone())
                    .skip(offset)?;
                Input::Stream { fd: owned, length }
            }
        };
        let archive = Archive {
            input,
            padded,
            head: RefCell::default(),
            ahead: Cell::new(0),
            source_fd: None,
        };
        archive.inflated(&shown, &self.cancel)
    }

    /// Opens the destination `dest` (creating it when missing) for `archive`, confined when
    /// the sandbox is on, keeping the archive's fd open. The process must be
    /// single-threaded then (see `open_dest`).
    pub fn prepare(&self, dest: &Path, archive: &Archive) -> Result<Destination> {
        let policy = Policy::new(self.restore, self.me, self.umask);
        if policy.owners_by_name() && archive.is_v2(&self.cancel) {
            self.owners.get_or_init(|| Arc::new(Owners::system()));
        }
        let dest_mode = self.dest_mode.unwrap_or(0o777 & !self.umask);
        open_dest(dest, self.sandbox, archive.kept_fd(), dest_mode)
    }

    /// Lands `archive` into `destination`, reporting to `progress`, and finishes the
    /// destination ([`Destination::finish`]): a new one is put in place whole when the
    /// landing succeeded, and removed when it failed.
    pub fn land(
        &self,
        archive: &Archive,
        destination: &mut Destination,
        progress: &Progress,
    ) -> Result<LandSummary> {
        let limits = archive.limits(self.limits);
        let new = destination.is_new();
        let landed = destination
            .root()
            .and_then(|root| self.land_into(root, new, archive, limits, progress));
        let landed = crate::interrupt::unless_archive_shrank(landed);
        let root_mode = landed.as_ref().ok().and_then(|l| l.root_mode);
        let finished = destination.finish(landed.is_ok(), root_mode);
        landed.and_then(|l| finished.map(|()| l))
    }

    /// The engine that lands `archive`.
    fn resolve(&self, archive: &Archive) -> Engine {
        match (self.engine, &archive.input) {
            (Engine::Auto, Input::Mapped(m)) if (m.bytes().len() as u64) < THREADS_FROM => {
                Engine::Sync
            }
            (Engine::Auto, _) => Engine::Threads,
            (engine, _) => engine,
        }
    }

    fn land_into(
        &self,
        root: OwnedFd,
        new_dest: bool,
        archive: &Archive,
        limits: Limits,
        progress: &Progress,
    ) -> Result<LandSummary> {
        let workers = Work::Land.threads();
        let policy = Policy::new(self.restore, self.me, self.umask);
        let setup = Setup {
            new_dest,
            ..Setup::new(policy, self.cancel.clone())
        };
        let owners = self
            .owners
            .get()
            .cloned()
            .filter(|_| policy.owners_by_name());
        let decoding = Decoding {
            limits,
            strip: self.strip,
            select: self.select.clone(),
            owners: owners.clone(),
        };
        match (self.resolve(archive), &archive.input) {
            (Engine::Threads, _) => {
                let sync = |fd, setup| Ok(SyncLander::new(fd, setup));
                let input = archive.parallel(&self.cancel);
                land_parallel(root, input, decoding, workers, setup, sync, progress)
            }
            (Engine::Uring, Input::Mapped(_)) => {
                let input = archive.parallel(&self.cancel);
                let uring = UringLander::new;
                land_parallel(root, input, decoding, workers, setup, uring, progress)
            }
            (Engine::Uring, _) => archive.land(
                UringLander::new(root, setup)?,
                self.driving(limits, owners),
                progress,
            ),
            _ => {
                let driving = self.driving(limits, owners);
                archive.land(SyncLander::new(root, setup), driving, progress)
            }
        }
    }

    /// Drives `sink` with `archive` instead of landing it (a listing): the calls a lander on
    /// one thread gets, an empty directory as [`Sink::empty_dir`].
    pub fn list(&self, archive: &Archive, sink: impl Sink<Error = Error>) -> Result<()> {
        let limits = archive.limits(self.limits);
        let listed = archive.drive(sink, self.driving(limits, None), &Progress::default());
        crate::interrupt::unless_archive_shrank(listed)
    }

    /// [`Unpack::list`] for a sink that needs of each entry only its name, kind and size:
    /// a version 2 archive in a file is listed from its footer and index alone, its body
    /// unread (files come as [`Content::Stream`](crate::tree::Content) without data,
    /// symlinks without a target, devices without numbers, nothing with metadata); any
    /// other archive as by `list`.
    pub fn list_index(&self, archive: &Archive, sink: impl Sink<Error = Error>) -> Result<()> {
        let Some((_, mut index)) = self.index(archive)? else {
            return self.list(archive, sink);
        };
        index.check()?;
        Driver::new(sink, &Progress::default())
            .filter(self.strip, self.select.clone())
            .cancel(self.cancel.clone())
            .run_index(&index)
    }

    /// Drives `sink` with the files the selection takes, as `list` does; of a version 2
    /// archive in a file it reads the footer, the index and only the segments that hold
    /// those files, and passes on only the files ([`Sink::file`], `data`, `hole`).
    pub fn cat(&self, archive: &Archive, sink: impl Sink<Error = Error>) -> Result<()> {
        let Some((src, mut index)) = self.index(archive)? else {
            return self.list(archive, sink);
        };
        let limits = archive.limits(self.limits);
        let how = (self.select.clone(), limits, &self.cancel);
        crate::indexed::cat(&src, &mut index, how, sink)
    }

    /// `archive` to be landed by several processes (`unpack --mpi`, see
    /// [`SharedUnpack`]): a version 2 archive in a file, with its index, every row checked.
    /// Call [`Unpack::prepare`] first: it reads the owners' names where they are restored.
    pub fn shared<'a>(&self, archive: &'a Archive) -> Result<SharedUnpack<'a>> {
        let Some((src, mut index)) = self.index(archive)? else {
            return Err(Error::Argument {
                arg: "--mpi".into(),
                problem: "lands a version 2 archive in a file, by its index (pack --format 2 \
                          writes one): unpack this one without --mpi"
                    .into(),
            });
        };
        index.check()?;
        let policy = Policy::new(self.restore, self.me, self.umask);
        Ok(SharedUnpack {
            src,
            index,
            limits: archive.limits(self.limits),
            policy,
            owners: (self.owners.get().cloned()).filter(|_| policy.owners_by_name()),
            cancel: self.cancel.clone(),
        })
    }

    /// Creates the directory `dest` with its parents, where it is missing, for a shared
    /// unpack (whose processes then [`Unpack::prepare`] it as one that exists): true when
    /// it created `dest`.
    pub fn make_dest(&self, dest: &Path) -> Result<bool> {
        use std::os::unix::fs::DirBuilderExt;
        if std::fs::symlink_metadata(dest).is_ok() {
            return Ok(false);
        }
        let mode = self.dest_mode.unwrap_or(0o777 & !self.umask);
        let path = TreePath(dest.as_os_str().as_encoded_bytes().to_vec());
        (std::fs::DirBuilder::new()
            .recursive(true)
            .mode(mode)
            .create(dest))
        .map_err(|e| Error::os("create destination", path, e))?;
        Ok(true)
    }

    /// The archive in its file and its index (its rows not checked yet: see
    /// [`Index::read_lazily`]), when it is version 2 in a file and ends in a footer.
    fn index<'a>(&self, archive: &'a Archive) -> Result<Option<(Seekable<'a>, Index)>> {
        let Input::Mapped(mapped) = &archive.input else {
            return Ok(None);
        };
        if !archive.is_v2(&self.cancel) {
            return Ok(None);
        }
        let src = Seekable {
            fd: mapped.file(),
            offset: mapped.offset(),
            len: mapped.bytes().len() as u64,
        };
        Ok(src.index(&self.cancel)?.map(|index| (src, index)))
    }
}

impl Archive {
    /// The archive that `reader` yields, from its first byte to the end: a decrypted
    /// channel, an HTTP request body. It is streamed, and can be landed or listed once.
    pub fn from_reader(reader: impl Read + Send + 'static) -> Archive {
        Archive::from_source(ReadSource(reader))
    }

    /// The archive that `source` yields, streamed as by [`Archive::from_reader`].
    pub(crate) fn from_source(source: impl ByteSource + Send + 'static) -> Archive {
        Archive {
            input: Input::Source(RefCell::new(Box::new(source))),
            padded: false,
            head: RefCell::default(),
            ahead: Cell::new(0),
            source_fd: None,
        }
    }

    /// The archive as a stream (not for a mapped one), keeping its first bytes.
    fn stream(&self, cancel: &Cancel) -> ByteStream<'_> {
        let (head, ahead) = (&self.head, &self.ahead);
        match &self.input {
            Input::Stream { fd, length } => {
                let source = fd.as_ref().map_or(stdin(), |f| f.as_fd());
                let recorded = Recorded {
                    source,
                    head,
                    ahead,
                };
                let stream = ByteStream::from_source(recorded).cancel(cancel.clone());
                match length {
                    Some(length) => stream.limit(*length),
                    None => stream,
                }
            }
            Input::Source(source) => {
                let source = Borrowed(source.borrow_mut());
                let recorded = Recorded {
                    source,
                    head,
                    ahead,
                };
                ByteStream::from_source(recorded).cancel(cancel.clone())
            }
            Input::Mapped(_) => unreachable!("a mapped archive is not streamed"),
        }
    }

    /// The first `n` bytes (at most 512, fewer when the archive is shorter), read ahead from
    /// a stream and kept for its reader. It waits for `n` bytes only; what a read brings
    /// beyond them (up to 512) is kept too, so that what the input is can still be named
    /// when decoding fails at its first bytes.
    fn peek(&self, n: usize, cancel: &Cancel) -> Result<Vec<u8>> {
        let n = n.min(HEAD);
        if let Input::Mapped(m) = &self.input {
            return Ok(m.bytes()[..n.min(m.bytes().len())].to_vec());
        }
        let mut stream = self.stream(cancel);
        let mut scratch = [0; HEAD];
        loop {
            let got = self.head.borrow().len();
            if got >= n {
                break;
            }
            let was = self.ahead.get();
            self.ahead.set(0);
            let read = stream.read(&mut scratch[..HEAD - got], got as u64);
            self.ahead.set(was + *read.as_ref().unwrap_or(&0));
            if read? == 0 {
                break;
            }
        }
        let head = self.head.borrow();
        Ok(head[..n.min(head.len())].to_vec())
    }

    /// Whether the archive is in format version 2.
    fn is_v2(&self, cancel: &Cancel) -> bool {
        self.peek(8, cancel)
            .is_ok_and(|head| head.get(6) == Some(&2))
    }

    /// This archive read through zstd, when it starts as a zstd frame does (a whole archive
    /// compressed, as by `barge pack | zstd`); its window is bounded as v2's frames are.
    fn inflated(self, shown: &TreePath, cancel: &Cancel) -> Result<Archive> {
        if self.peek(ZSTD_MAGIC.len(), cancel)? != ZSTD_MAGIC {
            return Ok(self);
        }
        let dup = |fd: std::os::fd::BorrowedFd<'_>| {
            rustix::io::fcntl_dupfd_cloexec(fd, 0)
                .map_err(|e| Error::os("dup the archive", shown.clone(), e.into()))
        };
        let peeked = self.head.borrow().clone();
        let reader = match &self.input {
            Input::Mapped(m) => {
                let (at, len) = (m.offset(), m.bytes().len() as u64);
                let fd = dup(m.file())?;
                let end = at + len;
                FdReader {
                    fd,
                    cancel: cancel.clone(),
                    at,
                    end,
                    positioned: true,
                }
            }
            Input::Stream { fd, length } => {
                let fd = dup(fd.as_ref().map_or(stdin(), |f| f.as_fd()))?;
                let end = length.map_or(u64::MAX, |l| l - peeked.len() as u64);
                FdReader {
                    fd,
                    cancel: cancel.clone(),
                    at: 0,
                    end,
                    positioned: false,
                }
            }
            Input::Source(_) => return Ok(self),
        };
        let source_fd = Some(reader.fd.as_raw_fd());
        let reader: Box<dyn Read + Send> = match reader.positioned {
            true => Box::new(reader),
            false => Box::new(std::io::Cursor::new(peeked).chain(reader)),
        };
        let zstd = |e| Error::os("read the archive through zstd", shown.clone(), e);
        let mut decoder = zstd::stream::read::Decoder::new(reader).map_err(zstd)?;
        decoder
            .window_log_max(crate::format::MAX_WINDOW_LOG)
            .map_err(zstd)?;
        Ok(Archive {
            source_fd,
            ..Archive::from_reader(decoder)
        })
    }

    /// The archive's first bytes (up to 512; of a stream, those read so far): for a front
    /// end to say what the input is when it is not a barge archive.
    pub fn head(&self) -> Vec<u8> {
        match &self.input {
            Input::Mapped(m) => m.bytes()[..m.bytes().len().min(HEAD)].to_vec(),
            _ => self.head.borrow().clone(),
        }
    }

    /// The archive's length, when known before reading it: the mapped size, or the
    /// `--length` of a stream.
    pub fn size(&self) -> Option<u64> {
        match &self.input {
            Input::Mapped(m) => Some(m.bytes().len() as u64),
            Input::Stream { length, .. } => *length,
            Input::Source(_) => None,
        }
    }

    /// `limits` with zero padding as this input allows.
    fn limits(&self, limits: Limits) -> Limits {
        Limits {
            zero_padding: self.padded,
            ..limits
        }
    }

    /// The fd that must stay open in a sandbox (a mapped archive, or a streamed one given by
    /// path).
    fn kept_fd(&self) -> Option<RawFd> {
        match &self.input {
            Input::Mapped(m) => Some(m.file().as_raw_fd()),
            Input::Stream { fd, .. } => fd.as_ref().map(|fd| fd.as_raw_fd()),
            Input::Source(_) => self.source_fd,
        }
    }

    /// The archive as the threaded landing reads it.
    fn parallel(&self, cancel: &Cancel) -> parallel::Input<'_> {
        match &self.input {
            Input::Mapped(m) => parallel::Input::Mapped(m.bytes(), m.file(), m.offset()),
            _ if self.is_v2(cancel) => parallel::Input::Frames(self.stream(cancel)),
            _ => parallel::Input::Stream(self.stream(cancel)),
        }
    }

    /// Lands the archive with one lander on the calling thread.
    fn land<L: Land>(
        &self,
        mut land: L,
        driving: Driving,
        progress: &Progress,
    ) -> Result<LandSummary> {
        if let Input::Mapped(mapped) = &self.input {
            populate(mapped.bytes());
        }
        self.drive(&mut land, driving, progress)?;
        Ok(land.summary())
    }

    /// Drives `sink` with the archive on the calling thread as `driving` says.
    fn drive<S: Sink>(
        &self,
        sink: S,
        driving: Driving,
        progress: &Progress,
    ) -> std::result::Result<(), S::Error> {
        let Driving {
            limits,
            strip,
            select,
            cancel,
            owners,
        } = driving;
        let stream = || self.stream(&cancel);
        let driver = Driver::new(sink, progress)
            .filter(strip, select)
            .cancel(cancel.clone())
            .owners(owners);
        match &self.input {
            Input::Mapped(mapped) => driver.run_bytes(mapped.bytes(), limits),
            _ => driver.run_stream(stream(), limits),
        }
    }
}

/// How an archive is driven on one thread: its limits, the leading path components
/// dropped, the entries taken, what stops it, the table owners are given by name from.
struct Driving {
    limits: Limits,
    strip: usize,
    select: Select,
    cancel: Cancel,
    owners: Option<Arc<Owners>>,
}

impl Unpack {
    /// This unpack's [`Driving`] with `limits` and `owners`.
    fn driving(&self, limits: Limits, owners: Option<Arc<Owners>>) -> Driving {
        Driving {
            limits,
            strip: self.strip,
            select: self.select.clone(),
            cancel: self.cancel.clone(),
            owners,
        }
    }
}
