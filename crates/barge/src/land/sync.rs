//! The synchronous lander: `mkdirat` + `openat(O_PATH)` on a stack of directory fds, and
//! `openat(O_CREAT|O_EXCL|O_NOFOLLOW)` + `write` + `close` per file. Nothing is ever
//! followed or overwritten: an existing non-directory in the way is an error.

use std::os::fd::{AsFd, BorrowedFd, IntoRawFd, OwnedFd};

use rustix::fs::{
    copy_file_range, fchmod, mkdirat, openat, statat, unlinkat, AtFlags, FileType, Mode,
};
use rustix::io::{write, Errno};

use super::{truncation_offset, Land, LandSummary};
use crate::error::{Error, Result, TreePath};
use crate::interrupt::{check, retry, SIGBUS};
use crate::root::umask;
use crate::sys::fds::Graveyard;
use crate::sys::{CREATE_FLAGS, DIR_FLAGS, DIR_HANDLE_FLAGS};
use crate::tree::{Content, Entry, Kind, Sink};

/// Most bytes one `write` or `copy_file_range` moves: a stop request is seen between two.
const CHUNK: u64 = 64 << 20;

/// Permission bits the owner needs to fill a directory; added while it is being filled
/// and taken away again when it is left.
pub(crate) const OWNER_RWX: u32 = 0o700;

struct OpenDir {
    fd: OwnedFd,
    name: Box<[u8]>,
    /// The mode to set when leaving, when it lacked owner rwx at creation.
    final_mode: Option<u32>,
}

/// The file being written; its name is in [`SyncLander::file_name`].
struct PartFile {
    fd: OwnedFd,
    size: u64,
    written: u64,
}

/// Lands a tree with plain system calls, all relative to directory fds it opened itself.
/// The fds of directories it has left are closed in batches (see [`Graveyard`]), so a
/// directory costs `mkdirat` + `openat` and a file `openat` + `write` + `close`.
pub struct SyncLander {
    root: OwnedFd,
    dirs: Vec<OpenDir>,
    left: Graveyard,
    file: Option<PartFile>,
    /// The name of `file`, in a buffer reused from file to file.
    file_name: Vec<u8>,
    /// `copy_file_range` failed as unsupported: file content is written from memory.
    no_copy: bool,
    summary: LandSummary,
}

impl SyncLander {
    /// A lander creating entries below the directory `root`.
    pub fn new(root: OwnedFd) -> SyncLander {
        SyncLander {
            root,
            dirs: Vec::new(),
            left: Graveyard::new(),
            file: None,
            file_name: Vec::new(),
            no_copy: false,
            summary: LandSummary::default(),
        }
    }

    /// The directory entered last (the root before any).
    pub fn current(&self) -> BorrowedFd<'_> {
        self.dirs.last().map_or(self.root.as_fd(), |d| d.fd.as_fd())
    }

    /// The path of `name` in the current directory, for messages.
    pub fn path(&self, name: &[u8]) -> TreePath {
        TreePath::join(self.dirs.iter().map(|d| &d.name[..]), name)
    }

    /// Creates directory `name`; an existing real directory is accepted (merged into). True
    /// when it created the directory.
    fn make_dir(&mut self, name: &[u8], mode: u32) -> Result<bool> {
        match mkdirat(self.current(), name, Mode::from_raw_mode(mode)) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => match statat(self.current(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(false),
                _ => Err(self.exists(name)),
            },
            Err(e) => Err(Error::io("mkdirat", self.path(name), e)),
        }
    }

    /// The error for `name` already existing in the current directory, saying what it is.
    pub fn exists(&self, name: &[u8]) -> Error {
        let found = match statat(self.current(), name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::RegularFile if st.st_nlink > 1 => "a hard-linked file",
                FileType::RegularFile => "a file",
                other => Kind::of(other).with_article(),
            },
            Err(_) => "an entry",
        };
        Error::Exists {
            path: self.path(name),
            found,
        }
    }

    /// Creates file `name` of `size` bytes, to be filled by [`SyncLander::write_all`].
    fn create(&mut self, name: &[u8], mode: u32, size: u64) -> Result<()> {
        let fd = match openat(
            self.current(),
            name,
            CREATE_FLAGS,
            Mode::from_raw_mode(mode),
        ) {
            Ok(fd) => fd,
            Err(Errno::EXIST) => return Err(self.exists(name)),
            Err(e) => return Err(Error::io("openat", self.path(name), e)),
        };
        self.file = Some(PartFile {
            fd,
            size,
            written: 0,
        });
        self.file_name.clear();
        self.file_name.extend_from_slice(name);
        Ok(())
    }

    /// Copies the content of the file being written from `source`, starting at `offset`,
    /// with `copy_file_range`; returns how many bytes it copied. Where the kernel cannot
    /// copy between these files (another filesystem type, an old kernel), it copies none
    /// and the lander stops trying.
    fn copy_in_kernel(&mut self, source: BorrowedFd<'_>, offset: u64) -> Result<usize> {
        let file = self.file.as_mut().expect("a file is open");
        let mut from = offset;
        while !self.no_copy && file.written < file.size {
            let rest = (file.size - file.written).min(CHUNK) as usize;
            match retry(|| copy_file_range(source, Some(&mut from), &file.fd, None, rest)) {
                // The archive ended early (cut while mapped): the write from memory
                // meets the same end.
                Ok(0) => break,
                Ok(n) => {
                    file.written += n as u64;
                    if file.written < file.size {
                        check()?;
                    }
                }
                Err(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS) => {
                    self.no_copy = true;
                }
                Err(e) => return Err(Error::io("copy_file_range", self.path(&self.file_name), e)),
            }
        }
        Ok(file.written as usize)
    }

    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        let file = self.file.as_mut().expect("a file is open");
        while !data.is_empty() {
            let chunk = &data[..data.len().min(CHUNK as usize)];
            match retry(|| write(&file.fd, chunk)) {
                // A stop (or a mapped archive that shrank: its vanished pages read as
                // zeros) is seen before the file counts as complete.
                Ok(n) => {
                    data = &data[n..];
                    file.written += n as u64;
                    check()?;
                }
                // Only a mapped archive's pages can vanish under a write.
                Err(Errno::FAULT) => return Err(Error::Interrupted { signal: SIGBUS }),
                Err(e) => return Err(Error::io("write", self.path(&self.file_name), e)),
            }
        }
        if file.written == file.size {
            self.summary.files += 1;
            self.summary.bytes += file.size;
            let done = self.file.take().expect("a file is open");
            // rustix closes with a plain system call, without the cancellation-point
            // bookkeeping libc's close does in a threaded process.
            // SAFETY: the fd is owned here and closed once.
            unsafe { rustix::io::close(done.fd.into_raw_fd()) };
        }
        Ok(())
    }
}

impl Land for SyncLander {
    fn enter(&mut self, dir: &Entry<'_>) -> Result<bool> {
        let (name, mode) = (dir.name, dir.meta.mode);
        let lacks_owner_rwx = mode & OWNER_RWX != OWNER_RWX;
        let created = self.make_dir(
            name,
            if lacks_owner_rwx {
                mode | OWNER_RWX
            } else {
                mode
            },
        )?;
        // A directory created here whose mode lacks owner rwx gets it when it is left, under
        // the umask like any mode (a directory that was there keeps its own). It is opened for
        // real (`fchmod` needs more than `O_PATH`), so the chmod goes through the fd and no
        // swapped name can redirect it.
        let final_mode = (created && lacks_owner_rwx).then(|| mode & !umask());
        let flags = if final_mode.is_some() {
            DIR_FLAGS
        } else {
            DIR_HANDLE_FLAGS
        };
        let fd = match openat(self.current(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOTDIR | Errno::LOOP) => return Err(self.exists(name)),
            Err(e) => return Err(Error::io("open directory", self.path(name), e)),
        };
        self.dirs.push(OpenDir {
            fd,
            name: name.into(),
            final_mode,
        });
        self.summary.dirs += 1;
        Ok(created)
    }

    fn summary(&self) -> LandSummary {
        self.summary
    }
}

impl Sink for SyncLander {
    type Error = Error;

    fn enter_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.enter(dir).map(drop)
    }

    fn empty_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.make_dir(dir.name, dir.meta.mode)?;
        self.summary.dirs += 1;
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        let dir = self.dirs.pop().expect("the decoder never pops the root");
        if let Some(mode) = dir.final_mode {
            fchmod(&dir.fd, Mode::from_raw_mode(mode))
                .map_err(|e| Error::io("fchmod", self.path(&dir.name), e))?;
        }
        self.left.bury(dir.fd);
        Ok(())
    }

    /// Writes the content from memory, or, for [`Content::File`], copies it inside the
    /// kernel and writes from its mapping what the kernel could not copy.
    fn file(&mut self, file: &Entry<'_>, content: Content<'_>) -> Result<()> {
        let (name, mode) = (file.name, file.meta.mode);
        match content {
            Content::Bytes(data) => {
                self.create(name, mode, data.len() as u64)?;
                self.write_all(data)
            }
            Content::Stream { size, first } => {
                self.create(name, mode, size)?;
                self.write_all(first)
            }
            Content::File {
                fd,
                offset,
                len,
                mapped: Some(data),
            } => {
                self.create(name, mode, len)?;
                let copied = self.copy_in_kernel(fd, offset)?;
                self.write_all(&data[copied..])
            }
            // Only a copier hands these over; it is to come.
            Content::File { mapped: None, .. } | Content::Unopened { .. } => Err(Error::io(
                "land a file from an fd without its bytes",
                self.path(name),
                Errno::NOTSUP,
            )),
        }
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        self.write_all(data)
    }

    /// Removes a partly written file; when the input ended inside it, says so.
    fn abort(&mut self, cause: Error) -> Error {
        let Some(file) = self.file.take() else {
            return cause;
        };
        drop(file.fd);
        let path = self.path(&self.file_name);
        if let Err(e) = unlinkat(self.current(), &self.file_name[..], AtFlags::empty()) {
            return Error::io("unlinkat (removing the partial file)", path, e);
        }
        let Some(offset) = truncation_offset(&cause) else {
            return cause;
        };
        Error::Short {
            offset,
            path,
            written: file.written,
            size: file.size,
        }
    }

    fn finish(&mut self) -> Result<()> {
        self.left.close_all();
        Ok(())
    }
}
