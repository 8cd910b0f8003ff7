//! Where `pack` writes an archive named by a path (`-o PATH`), so that a failed pack never
//! destroys what PATH named:
//!
//! - nothing, a regular file, or a symlink that leads to neither a device nor a fifo: the
//!   archive goes to a new file in PATH's directory (unnamed with `O_TMPFILE`, else a hidden
//!   `.barge-PID-N.tmp`), renamed over PATH only by [`Output::finish`]. A symlink is
//!   replaced itself: its target is never opened.
//! - a character or block device or a fifo, or a symlink to one (`/dev/stdout`): opened
//!   without `O_CREAT` or `O_TRUNC`, written in place and never removed.
//! - a directory or a socket, or a symlink to one: refused.
//!
//! Every call is relative to an `O_PATH` fd of PATH's directory, with PATH's last name.
//!
//! What pack's writer thread writes into: an `ArchiveWriter`, either an fd (`FdWriter`:
//! `write`, and `sendfile` for large files) or any [`io::Write`] (`IoWriter`: large files
//! read and written through it, for an encrypting socket).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{
    fstat, linkat, openat, renameat, statat, unlinkat, AtFlags, FileType, Mode, OFlags, Stat, CWD,
};
use rustix::io::{pread, Errno};

use crate::copy::{read_chunks, send_file, write_all};
use crate::error::{Error, Result, TreePath};
use crate::interrupt::{retry, Cancel};
use crate::Progress;

/// Hidden temporary names tried before giving up (each taken one is skipped).
const TEMP_TRIES: u32 = 100;

/// What writing to an [`Output`] does to PATH.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// A device or fifo: written in place, so what was written stays written on failure.
    InPlace,
    /// Nothing was there: PATH appears when the pack succeeded.
    Create,
    /// A file or symlink was there: replaced when the pack succeeded, else left as it was.
    Replace,
}

/// An archive being written to `-o PATH`. Dropped without [`Output::finish`], it leaves
/// PATH as it was and removes the file it created.
#[derive(Debug)]
pub struct Output {
    fd: OwnedFd,
    kind: Kind,
    /// Device and inode of the regular file at PATH that the archive replaces.
    replaced: Option<(u64, u64)>,
    dir: OwnedFd,
    name: Vec<u8>,
    /// The new file's name in `dir`, once it has one.
    temp: Option<Vec<u8>>,
    path: TreePath,
}

impl AsFd for Output {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Output {
    /// Opens `path` for writing an archive (see the module documentation).
    pub fn open(path: &Path) -> Result<Output> {
        Output::open_with(path, true)
    }

    /// [`Output::open`], trying `O_TMPFILE` only when `unnamed` (tests use the fallback).
    fn open_with(path: &Path, unnamed: bool) -> Result<Output> {
        let bytes = path.as_os_str().as_bytes();
        let shown = TreePath(bytes.to_vec());
        let fail = |op, e| Error::io(op, shown.clone(), e);
        let refuse = |why: io::Error| Error::Io {
            op: "write the archive",
            path: shown.clone(),
            cause: why,
        };
        let Some((parent, name)) = split(bytes) else {
            let errno = if bytes.is_empty() {
                Errno::NOENT
            } else {
                Errno::ISDIR
            };
            return Err(refuse(errno.into()));
        };
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir = openat(CWD, parent, flags, Mode::empty())
            .map_err(|e| Error::io("open directory", TreePath(parent.to_vec()), e))?;
        let found = match statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => None,
            Err(e) => return Err(fail("stat", e)),
        };
        let kind_of = |stat: Stat| FileType::from_raw_mode(stat.st_mode);
        let link = found.map(kind_of) == Some(FileType::Symlink);
        // What PATH leads to: a symlink's target, when it has one.
        let leads_to = if link {
            statat(&dir, name, AtFlags::empty()).ok().map(kind_of)
        } else {
            found.map(kind_of)
        };
        let file = found.filter(|&s| kind_of(s) == FileType::RegularFile);
        let (fd, kind, temp) = match leads_to {
            Some(FileType::Directory) => return Err(refuse(Errno::ISDIR.into())),
            Some(FileType::Socket) => return Err(refuse(io::Error::other("it is a socket"))),
            Some(FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo) => {
                let fd = open_in_place(&dir, name, link).map_err(|e| fail("open", e))?;
                (fd, Kind::InPlace, None)
            }
            _ => {
                // A replaced file keeps its permission bits (a 0o600 archive stays private).
                let mode = Mode::from_raw_mode(file.map_or(0o666, |s| s.st_mode & 0o777));
                let (fd, temp) = create(&dir, mode, unnamed).map_err(|e| fail("create", e))?;
                let kind = if found.is_some() {
                    Kind::Replace
                } else {
                    Kind::Create
                };
                (fd, kind, temp)
            }
        };
        Ok(Output {
            fd,
            kind,
            replaced: file.map(|s| (s.st_dev, s.st_ino)),
            dir,
            name: name.to_vec(),
            temp,
            path: shown,
        })
    }

    /// What writing does to PATH.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Device and inode of the regular file the archive replaces (the pack leaves it out).
    pub fn replaced(&self) -> Option<(u64, u64)> {
        self.replaced
    }

    /// Puts a complete archive in place: the new file gets a name (when it had none yet)
    /// and is renamed over PATH. Nothing to do for a device or fifo.
    pub fn finish(mut self) -> Result<()> {
        if self.kind == Kind::InPlace {
            return Ok(());
        }
        if self.temp.is_none() {
            self.temp = Some(self.link().map_err(|e| self.error("link", e))?);
        }
        let temp = self.temp.as_deref().expect("named above");
        renameat(&self.dir, temp, &self.dir, &self.name[..])
            .map_err(|e| self.error("rename", e))?;
        self.temp = None;
        Ok(())
    }

    /// Gives the unnamed file a hidden name: by `AT_EMPTY_PATH` where permitted, else
    /// through `/proc/self/fd`.
    fn link(&self) -> rustix::io::Result<Vec<u8>> {
        let proc = format!("/proc/self/fd/{}", self.fd.as_raw_fd());
        let ((), temp) = with_temp_name(b".barge-", b".tmp", |temp| {
            match linkat(&self.fd, c"", &self.dir, temp, AtFlags::EMPTY_PATH) {
                Err(Errno::NOENT | Errno::PERM) => {
                    linkat(CWD, &proc[..], &self.dir, temp, AtFlags::SYMLINK_FOLLOW)
                }
                linked => linked,
            }
        })?;
        Ok(temp)
    }

    fn error(&self, op: &'static str, errno: Errno) -> Error {
        Error::io(op, self.path.clone(), errno)
    }
}

impl Drop for Output {
    /// Removes the new file's name unless it was renamed over PATH, and only while the name
    /// is still that file.
    fn drop(&mut self) {
        let Some(temp) = self.temp.take() else { return };
        let id = |s: Stat| (s.st_dev, s.st_ino);
        let named = statat(&self.dir, &temp[..], AtFlags::SYMLINK_NOFOLLOW).map(id);
        if named.is_ok() && named == fstat(&self.fd).map(id) {
            let _ = unlinkat(&self.dir, &temp[..], AtFlags::empty());
        }
    }
}

/// Opens the device or fifo `name` in `dir` (through a symlink when `follow`) for writing.
fn open_in_place(dir: &OwnedFd, name: &[u8], follow: bool) -> rustix::io::Result<OwnedFd> {
    let mut flags = OFlags::WRONLY | OFlags::NOCTTY | OFlags::CLOEXEC;
    flags.set(OFlags::NOFOLLOW, !follow);
    let fd = openat(dir, name, flags, Mode::empty())?;
    match FileType::from_raw_mode(fstat(&fd)?.st_mode) {
        FileType::CharacterDevice | FileType::BlockDevice | FileType::Fifo => Ok(fd),
        // Swapped since the stat (try again): never write into a file without truncating it.
        _ => Err(Errno::AGAIN),
    }
}

/// Creates a new file in `dir`: unnamed where the filesystem allows `O_TMPFILE`, else under
/// a hidden name (`O_EXCL|O_NOFOLLOW`), returned with it.
fn create(
    dir: &OwnedFd,
    mode: Mode,
    unnamed: bool,
) -> rustix::io::Result<(OwnedFd, Option<Vec<u8>>)> {
    if unnamed {
        let flags = OFlags::TMPFILE | OFlags::WRONLY | OFlags::CLOEXEC;
        match openat(dir, c".", flags, mode) {
            Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {}
            opened => return opened.map(|fd| (fd, None)),
        }
    }
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let (fd, temp) = with_temp_name(b".barge-", b".tmp", |temp| openat(dir, temp, flags, mode))?;
    Ok((fd, Some(temp)))
}

/// Calls `make` with names `PREFIX` + `PID-N` + `SUFFIX` until one is not taken (`prefix` and
/// `suffix` hold no NUL).
pub(crate) fn with_temp_name<T>(
    prefix: &[u8],
    suffix: &[u8],
    mut make: impl FnMut(&CStr) -> rustix::io::Result<T>,
) -> rustix::io::Result<(T, Vec<u8>)> {
    let mut n = 0;
    loop {
        let unique = format!("{}-{n}", std::process::id());
        let temp = [prefix, unique.as_bytes(), suffix, b"\0"].concat();
        let name = CStr::from_bytes_with_nul(&temp).expect("one NUL, at the end");
        match make(name) {
            Ok(made) => return Ok((made, name.to_bytes().to_vec())),
            Err(Errno::EXIST) if n + 1 < TEMP_TRIES => n += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Splits a path into its directory and last name; `None` when the last name is empty,
/// `.` or `..` (the path names a directory).
fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let (parent, name) = match path.iter().rposition(|&b| b == b'/') {
        Some(0) => (&b"/"[..], &path[1..]),
        Some(slash) => (&path[..slash], &path[slash + 1..]),
        None => (&b"."[..], path),
    };
    (!matches!(name, b"" | b"." | b"..")).then_some((parent, name))
}

/// Where pack's writer thread puts an archive, in order.
pub(crate) trait ArchiveWriter: Send {
    /// Writes all of `bytes`, counting what was written in `progress`.
    fn write_bytes(&mut self, bytes: &[u8], progress: &Progress) -> Result<()>;

    /// Writes exactly the first `size` bytes of the regular file `file` (`path` in
    /// messages), counting them in `progress`; [`Error::Changed`] when it is shorter or grew.
    fn write_file(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &TreePath,
        progress: &Progress,
    ) -> Result<()>;

    /// After the last write: pushes out what is buffered.
    fn finish(&mut self) -> Result<()> {
        Ok(())
    }
}

/// The chunks in which [`IoWriter`] reads large files.
const FILE_CHUNK: usize = 1 << 20;

/// The error of a failed archive write.
fn write_failed(cause: io::Error) -> Error {
    Error::os("write archive", TreePath::default(), cause)
}

/// Writes to a file descriptor (a file, pipe, socket or device): `write`, and `sendfile`
/// for large files; stops once its token is cancelled.
pub(crate) struct FdWriter<'fd>(pub(crate) BorrowedFd<'fd>, pub(crate) Cancel);

impl ArchiveWriter for FdWriter<'_> {
    fn write_bytes(&mut self, bytes: &[u8], progress: &Progress) -> Result<()> {
        write_all(self.0, bytes, &self.1, |n| {
            progress.add_written(n);
            Ok(())
        })
    }

    /// Sends the file inside the kernel ([`send_file`]), then checks with `fstat` that it
    /// did not grow.
    fn write_file(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &TreePath,
        progress: &Progress,
    ) -> Result<()> {
        let sent = send_file(self.0, file, size, path, &self.1, |n| {
            progress.add_written(n);
            self.1.check()
        })?;
        if sent < size {
            return Err(changed(path, size, sent));
        }
        let now = fstat(file).map_err(|e| Error::io("fstat", path.clone(), e))?;
        if now.st_size as u64 != size {
            return Err(changed(path, size, now.st_size as u64));
        }
        Ok(())
    }
}

/// Writes through any [`io::Write`]; large files are read (`pread`) in chunks into a buffer
/// kept for the next one, and written through it.
pub(crate) struct IoWriter<W> {
    out: W,
    buf: Vec<u8>,
    cancel: Cancel,
}

impl<W> IoWriter<W> {
    /// Writes to `out`, stopping once `cancel` is cancelled.
    pub(crate) fn new(out: W, cancel: Cancel) -> IoWriter<W> {
        IoWriter {
            out,
            buf: Vec::new(),
            cancel,
        }
    }
}

impl<W: io::Write + Send> IoWriter<W> {
    /// Reads `size` bytes of `file` in `buf`-sized chunks and writes them, then probes one
    /// byte more.
    fn copy(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        buf: &mut [u8],
        path: &TreePath,
        progress: &Progress,
    ) -> Result<()> {
        let cancel = self.cancel.clone();
        let read = read_chunks(file, 0, size, buf, path, &cancel, |chunk| {
            self.write_bytes(chunk, progress)?;
            cancel.check()
        })?;
        if read < size {
            return Err(changed(path, size, read));
        }
        match retry(&cancel, || pread(file, &mut buf[..1], size)) {
            Ok(0) => Ok(()),
            Ok(_) => Err(changed(path, size, size + 1)),
            Err(e) => Err(Error::io("read", path.clone(), e)),
        }
    }
}

impl<W: io::Write + Send> ArchiveWriter for IoWriter<W> {
    fn write_bytes(&mut self, mut rest: &[u8], progress: &Progress) -> Result<()> {
        while !rest.is_empty() {
            match self.out.write(rest) {
                Ok(0) => return Err(write_failed(io::ErrorKind::WriteZero.into())),
                Ok(n) => {
                    rest = &rest[n..];
                    progress.add_written(n as u64);
                }
                // Retried as `retry` does: unless a stop was asked for.
                Err(e) if e.kind() == io::ErrorKind::Interrupted && !self.cancel.is_cancelled() => {
                }
                Err(e) => return Err(write_failed(e)),
            }
        }
        Ok(())
    }

    /// Reads the file in chunks, then checks with a one-byte read at its size that it did
    /// not grow.
    fn write_file(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &TreePath,
        progress: &Progress,
    ) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(FILE_CHUNK, 0);
        let copied = self.copy(file, size, &mut buf, path, progress);
        self.buf = buf;
        copied
    }

    fn finish(&mut self) -> Result<()> {
        self.out.flush().map_err(write_failed)
    }
}

/// A file of `size` bytes found to have `actual` bytes while it was written.
fn changed(path: &TreePath, expected: u64, actual: u64) -> Error {
    Error::Changed {
        path: path.clone(),
        expected,
        actual,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io::Write;
    use std::os::unix::fs::PermissionsExt;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    fn write(output: &Output, data: &[u8]) {
        let fd = output.as_fd().try_clone_to_owned().unwrap();
        fs::File::from(fd).write_all(data).unwrap();
    }

    /// The hidden-name fallback (for filesystems without `O_TMPFILE`): dropped, it leaves
    /// nothing; finished, it replaces PATH and keeps its permission bits.
    #[test]
    fn the_named_fallback_leaves_nothing_behind_and_replaces_on_finish() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        fs::write(&path, b"old").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();

        let output = Output::open_with(&path, false).unwrap();
        assert_eq!(output.kind(), Kind::Replace);
        assert_eq!(names(dir.path()).len(), 2, "the hidden file, while writing");
        write(&output, b"new");
        drop(output);
        assert_eq!(names(dir.path()), ["out"]);
        assert_eq!(fs::read(&path).unwrap(), b"old");

        let output = Output::open_with(&path, false).unwrap();
        write(&output, b"new");
        output.finish().unwrap();
        assert_eq!(names(dir.path()), ["out"]);
        assert_eq!(fs::read(&path).unwrap(), b"new");
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    /// A large file goes through the `Write` whole, and one that is shorter or longer
    /// than its announced size fails with what was found.
    #[test]
    fn the_write_form_copies_large_files_and_notices_a_changed_size() {
        let data: Vec<u8> = (0..FILE_CHUNK * 2 + 5).map(|i| (i % 253) as u8).collect();
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&data).unwrap();
        let (path, progress) = (TreePath(b"big".to_vec()), Progress::default());
        let mut out = Vec::new();
        let mut writer = IoWriter::new(&mut out, Cancel::new());
        let size = data.len() as u64;
        writer
            .write_file(file.as_fd(), size, &path, &progress)
            .unwrap();
        for (announced, found) in [(size + 1, size), (size - 1, size)] {
            let failed = writer.write_file(file.as_fd(), announced, &path, &progress);
            assert!(
                matches!(failed, Err(Error::Changed { expected, actual, .. })
                    if expected == announced && actual == found),
                "{failed:?}"
            );
        }
        assert!(out[..data.len()] == data[..]);
        assert_eq!(progress.written(), out.len() as u64);
    }

    #[test]
    fn split_finds_the_directory_and_last_name() {
        assert_eq!(split(b"out"), Some((&b"."[..], &b"out"[..])));
        assert_eq!(split(b"/out"), Some((&b"/"[..], &b"out"[..])));
        assert_eq!(split(b"a//b"), Some((&b"a/"[..], &b"b"[..])));
        for dir in [&b""[..], b"/", b"a/", b".", b"a/..", b"a/."] {
            assert_eq!(split(dir), None, "{dir:?}");
        }
    }
}
