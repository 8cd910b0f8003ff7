//! The synchronous lander: `mkdirat` + `openat(O_PATH)` on a stack of directory fds, and
//! `openat(O_CREAT|O_EXCL|O_NOFOLLOW)` + `write` + `futimens` + `close` per file; symlinks,
//! hard links and special files by `symlinkat`, `linkat` and `mknodat`. Metadata is
//! restored as the [`Policy`] says. Nothing is ever followed or written through: an
//! existing entry in the way is an error, skipped, or replaced by renaming a new entry over
//! it (see [`Existing`]).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rustix::fs::{
    fstat, ftruncate, linkat, makedev, mkdirat, mknodat, openat, renameat, renameat_with, seek,
    statat, symlinkat, unlinkat, AtFlags, FileType, Mode, OFlags, RenameFlags, SeekFrom,
};
use rustix::io::{pwrite, write, Errno};

use super::restore::{Apply, Existing, Policy, Target, SETID};
use super::{truncation_offset, Land, LandSummary};
use crate::copy::{copy_range, read_chunks};
use crate::error::{Error, Result, TreePath};
use crate::interrupt::{retry, Cancel, SIGBUS};
use crate::sys::fds::Graveyard;
use crate::sys::{CREATE_FLAGS, DIR_FLAGS, DIR_HANDLE_FLAGS, FILE_FLAGS};
use crate::tree::{Content, Device, Entry, Kind, Meta, Sink, Timestamp, Xattrs};

/// Most bytes one `write` moves: a stop request is seen between two.
const CHUNK: u64 = 64 << 20;

/// Where a file created with a link id (see [`Entry::link_id`]) is: the directory it was
/// created in (its fd, kept open for the hard links to come) and its name.
pub(crate) type LinkTarget = (Arc<OwnedFd>, Box<[u8]>);

/// The files this unpack created with a link id, by that id, shared by its landers: hard
/// links are only ever made to these. A lander of the threaded engine notes only that it
/// created one (`None`: its fds are in its own fd table, see `go_solo`); the engine makes
/// the links.
pub(crate) type Links = Arc<Mutex<HashMap<u64, Option<LinkTarget>>>>;

/// What every lander of one unpack shares.
#[derive(Clone)]
pub(crate) struct Setup {
    /// What to restore.
    pub(crate) policy: Policy,
    /// The files hard links may name.
    pub(crate) links: Links,
    /// Landing on one of several threads (the threaded engine): the final mode and time of
    /// the directories entered are left to the engine (several landers are in a directory
    /// at once), and files with a link id are only noted as created.
    pub(crate) threaded: bool,
    /// Stops the landing once cancelled.
    pub(crate) cancel: Cancel,
    /// The destination is new: the archive's root record applies to it.
    pub(crate) new_dest: bool,
    /// See `threads::Crowds::dwell`.
    #[cfg(test)]
    pub(crate) dwell: std::time::Duration,
}

impl Setup {
    /// Landers of one unpack restoring by `policy`, stopping once `cancel` is cancelled.
    pub(crate) fn new(policy: Policy, cancel: Cancel) -> Setup {
        Setup {
            policy,
            links: Links::default(),
            threaded: false,
            cancel,
            new_dest: false,
            #[cfg(test)]
            dwell: std::time::Duration::ZERO,
        }
    }
}

struct OpenDir {
    fd: Arc<OwnedFd>,
    name: Box<[u8]>,
    /// For a directory this lander created: the mode (when it lacks owner rwx or has
    /// setuid or setgid, see [`Policy::dir_modes`]) and time to give it when leaving.
    /// For one that was there, with `--overwrite`, the archive's (`merged`).
    last: Option<(Option<u32>, Option<Timestamp>)>,
    merged: bool,
}

/// The file being written; its name is in [`SyncLander::file_name`].
struct PartFile {
    fd: OwnedFd,
    size: u64,
    written: u64,
    apply: Apply,
    link_id: Option<u64>,
    /// Written under the temporary name in [`SyncLander::temp`], to replace the existing
    /// entry once complete.
    replacing: bool,
}

/// A file that several landers land (the threaded engine's `EXTFILE` whose extents are in
/// several batches): one creates it at its size, all hole ([`SyncLander::create_shared`]),
/// any writes extents into it after opening it by name in its directory, checked to be the
/// same file ([`SyncLander::open_shared`]), and the one that writes the last extent
/// completes it ([`SyncLander::complete_shared`]). Its fds are never shared: each lander
/// has its own fd table (see `go_solo`).
pub(crate) struct SharedFile {
    name: Box<[u8]>,
    /// The temporary name it is written under when it replaces an existing entry.
    temp: Option<Box<[u8]>>,
    /// Its device and inode.
    id: (u64, u64),
    size: u64,
    apply: Apply,
    xattrs: Box<[u8]>,
    link_id: Option<u64>,
}

impl SharedFile {
    /// The name it is written under.
    fn written_as(&self) -> &[u8] {
        self.temp.as_deref().unwrap_or(&self.name)
    }

    /// Its name.
    pub(crate) fn name(&self) -> &[u8] {
        &self.name
    }

    /// Removes it from `dir`, its directory (its landing failed); `path` names it.
    pub(crate) fn remove(&self, dir: BorrowedFd<'_>, path: impl Fn() -> TreePath) -> Result<()> {
        unlinkat(dir, self.written_as(), AtFlags::empty())
            .map_err(|e| Error::io("unlinkat (removing the partial file)", path(), e))
    }
}

/// How an entry was created, by [`create_at`].
pub(crate) enum Made<T> {
    /// At its name.
    Here(T),
    /// Under the temporary name given, to be renamed over its name.
    Replacing(T),
    /// Not at all: its name existed and the policy says to skip it.
    Skipped,
}

/// Lands a tree with plain system calls, all relative to directory fds it opened itself.
/// The fds of directories it has left are closed in batches (see [`Graveyard`]), so a
/// directory costs `mkdirat` + `openat` and a file `openat` + `write` + `futimens` +
/// `close`.
pub struct SyncLander {
    root: Arc<OwnedFd>,
    /// The time the archive's root record gives a new destination, set once landing ends.
    root_time: Option<Timestamp>,
    dirs: Vec<OpenDir>,
    left: Graveyard,
    setup: Setup,
    file: Option<PartFile>,
    /// The name of `file`, in a buffer reused from file to file.
    file_name: Vec<u8>,
    /// The extended attributes of `file`, in archive form.
    file_xattrs: Vec<u8>,
    /// The temporary name of an entry that replaces an existing one.
    temp: Vec<u8>,
    /// The content to come belongs to a skipped file.
    draining: bool,
    /// `copy_file_range` failed as unsupported: file content is written from memory.
    no_copy: bool,
    summary: LandSummary,
}

/// The error for `name` already existing in the directory `dir`, saying what it is.
pub(crate) fn exists(dir: BorrowedFd<'_>, name: &[u8], path: TreePath) -> Error {
    let found = match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile if st.st_nlink > 1 => "a hard-linked file",
            FileType::RegularFile => "a file",
            other => Kind::of(other).with_article(),
        },
        Err(_) => "an entry",
    };
    Error::Exists { path, found }
}

/// A fresh temporary name (`.barge-PID-N`) in `buf`.
fn temp_name(buf: &mut Vec<u8>) {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Relaxed);
    buf.clear();
    buf.extend_from_slice(format!(".barge-{}-{n}", std::process::id()).as_bytes());
}

/// Creates entry `name` in `dir` with `make`, which fails with `EEXIST` where the name is
/// taken; then does what `existing` says with an existing entry: a replacement is made
/// under a fresh temporary name, left in `temp`, for [`replace`] to rename over `name`.
/// `op` names `make` in errors, `path` the entry.
pub(crate) fn create_at<T>(
    dir: BorrowedFd<'_>,
    name: &[u8],
    existing: Existing,
    temp: &mut Vec<u8>,
    op: &'static str,
    path: impl Fn() -> TreePath,
    mut make: impl FnMut(BorrowedFd<'_>, &[u8]) -> rustix::io::Result<T>,
) -> Result<Made<T>> {
    match make(dir, name) {
        Ok(made) => return Ok(Made::Here(made)),
        Err(Errno::EXIST) => {}
        Err(e) => return Err(Error::io(op, path(), e)),
    }
    match existing {
        Existing::Keep => Err(exists(dir, name, path())),
        Existing::Skip => Ok(Made::Skipped),
        Existing::Overwrite => loop {
            temp_name(temp);
            match make(dir, temp) {
                Ok(made) => return Ok(Made::Replacing(made)),
                Err(Errno::EXIST) => continue,
                Err(e) => return Err(Error::io(op, path(), e)),
            }
        },
    }
}

/// Renames the replacement `temp` in `dir` over `name`, or removes it when that fails (the
/// name is a directory, or it went away).
pub(crate) fn replace(
    dir: BorrowedFd<'_>,
    temp: &[u8],
    name: &[u8],
    path: impl Fn() -> TreePath,
) -> Result<()> {
    match renameat(dir, temp, dir, name) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = unlinkat(dir, temp, AtFlags::empty());
            match e {
                Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => Err(exists(dir, name, path())),
                e => Err(Error::io("renameat", path(), e)),
            }
        }
    }
}

/// Replaces the entry `name` in `dir` (not a directory) by a new directory, by rename: the
/// directory is made under a fresh temporary name (left in `temp`) and exchanged with
/// `name` (`RENAME_EXCHANGE`: the name never goes missing, nothing is followed), then the
/// old entry, now under the temporary name, is removed.
pub(crate) fn replace_by_dir(
    dir: BorrowedFd<'_>,
    name: &[u8],
    mode: Mode,
    temp: &mut Vec<u8>,
    path: impl Fn() -> TreePath,
) -> Result<()> {
    loop {
        temp_name(temp);
        match mkdirat(dir, &temp[..], mode) {
            Ok(()) => break,
            Err(Errno::EXIST) => continue,
            Err(e) => return Err(Error::io("mkdirat", path(), e)),
        }
    }
    if let Err(e) = renameat_with(dir, &temp[..], dir, name, RenameFlags::EXCHANGE) {
        let _ = unlinkat(dir, &temp[..], AtFlags::REMOVEDIR);
        return Err(Error::io("renameat2 (exchange)", path(), e));
    }
    unlinkat(dir, &temp[..], AtFlags::empty()).map_err(|e| Error::io("unlinkat", path(), e))
}

impl SyncLander {
    /// What stops the landing.
    pub(crate) fn cancel(&self) -> &Cancel {
        &self.setup.cancel
    }

    /// A lander creating entries below the directory `root`, restoring what `setup`'s
    /// policy says.
    pub(crate) fn new(root: OwnedFd, setup: Setup) -> SyncLander {
        SyncLander {
            root: Arc::new(root),
            root_time: None,
            dirs: Vec::new(),
            left: Graveyard::new(),
            setup,
            file: None,
            file_name: Vec::new(),
            file_xattrs: Vec::new(),
            temp: Vec::new(),
            draining: false,
            no_copy: false,
            summary: LandSummary::default(),
        }
    }

    /// The directory entered last (the root before any).
    pub fn current(&self) -> BorrowedFd<'_> {
        current_in(&self.root, &self.dirs)
    }

    /// The directory entered last, shared.
    fn current_shared(&self) -> &Arc<OwnedFd> {
        self.dirs.last().map_or(&self.root, |d| &d.fd)
    }

    /// Notes that it created the file `name` with link id `id` in the current directory.
    pub(crate) fn created_linked(&mut self, id: u64, name: &[u8]) {
        let at = (!self.setup.threaded).then(|| (self.current_shared().clone(), name.into()));
        self.setup.links.lock().expect("no panics").insert(id, at);
    }

    /// The directory and name of the file this unpack created with link id `id`, if it did.
    pub(crate) fn link_target(&self, id: u64) -> Option<LinkTarget> {
        let links = self.setup.links.lock().expect("no panics");
        links.get(&id).cloned().flatten()
    }

    /// The path of `name` in the current directory, for messages.
    pub fn path(&self, name: &[u8]) -> TreePath {
        path_in(&self.dirs, name)
    }

    /// The policy this lander restores by.
    pub(crate) fn policy(&self) -> &Policy {
        &self.setup.policy
    }

    /// Creates directory `name`; an existing real directory is accepted (merged into), and
    /// when overwriting anything else there (a file, a symlink: never followed) is replaced,
    /// as tar does. True when it created the directory.
    fn make_dir(&mut self, name: &[u8], mode: u32) -> Result<bool> {
        let mode = Mode::from_raw_mode(mode);
        match mkdirat(self.current(), name, mode) {
            Ok(()) => Ok(true),
            Err(Errno::EXIST) => match statat(self.current(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => Ok(false),
                Ok(_) if self.setup.policy.existing() == Existing::Overwrite => {
                    let dir = current_in(&self.root, &self.dirs);
                    let path = || path_in(&self.dirs, name);
                    replace_by_dir(dir, name, mode, &mut self.temp, path)?;
                    Ok(true)
                }
                _ => Err(self.exists(name)),
            },
            Err(e) => Err(Error::io("mkdirat", self.path(name), e)),
        }
    }

    /// The error for `name` already existing in the current directory, saying what it is.
    pub fn exists(&self, name: &[u8]) -> Error {
        exists(self.current(), name, self.path(name))
    }

    /// Creates entry `name` in the current directory with `make` (see [`create_at`]); counts
    /// a skipped one.
    fn create_at<T>(
        &mut self,
        name: &[u8],
        op: &'static str,
        make: impl FnMut(BorrowedFd<'_>, &[u8]) -> rustix::io::Result<T>,
    ) -> Result<Made<T>> {
        let dir = current_in(&self.root, &self.dirs);
        let existing = self.setup.policy.existing();
        let path = || path_in(&self.dirs, name);
        let made = create_at(dir, name, existing, &mut self.temp, op, path, make)?;
        if let Made::Skipped = made {
            self.summary.kept += 1;
        }
        Ok(made)
    }

    /// Renames the replacement in `temp` over `name` (see [`replace`]).
    fn replace(&mut self, name: &[u8]) -> Result<()> {
        replace(self.current(), &self.temp, name, || self.path(name))
    }

    /// Creates a symlink, a hard link or a special file with `make` and restores its
    /// metadata (by name, never followed); false when it was skipped.
    fn make_other(
        &mut self,
        entry: &Entry<'_>,
        apply: &Apply,
        op: &'static str,
        make: impl FnMut(BorrowedFd<'_>, &[u8]) -> rustix::io::Result<()>,
    ) -> Result<bool> {
        let name = entry.name;
        let replacing = match self.create_at(name, op, make)? {
            Made::Skipped => return Ok(false),
            Made::Here(()) => false,
            Made::Replacing(()) => true,
        };
        let at = if replacing { &self.temp[..] } else { name };
        let dir = current_in(&self.root, &self.dirs);
        let (policy, skipped) = (&self.setup.policy, &mut self.summary.not_restored);
        let restored = policy.restore(Target::At(dir, at), apply, entry.xattrs, skipped, || {
            path_in(&self.dirs, name)
        });
        if let Err(e) = restored {
            if replacing {
                let _ = unlinkat(dir, at, AtFlags::empty());
            }
            return Err(e);
        }
        if replacing {
            self.replace(name)?;
        }
        Ok(true)
    }

    /// Creates file `name` of `size` bytes, to be filled by [`SyncLander::write_all`]; false
    /// when it was skipped (its content is then drained).
    fn create(&mut self, file: &Entry<'_>, size: u64) -> Result<bool> {
        let apply = self
            .setup
            .policy
            .entry(file, &mut self.summary.not_restored);
        let mode = Mode::from_raw_mode(apply.create_mode());
        let made = self.create_at(file.name, "openat", |dir, name| {
            openat(dir, name, CREATE_FLAGS, mode)
        })?;
        let (fd, replacing) = match made {
            Made::Here(fd) => (fd, false),
            Made::Replacing(fd) => (fd, true),
            Made::Skipped => {
                self.draining = true;
                return Ok(false);
            }
        };
        self.file = Some(PartFile {
            fd,
            size,
            written: 0,
            apply,
            link_id: file.link_id,
            replacing,
        });
        self.file_name.clear();
        self.file_name.extend_from_slice(file.name);
        self.file_xattrs.clear();
        self.file_xattrs.extend_from_slice(file.xattrs.0);
        Ok(true)
    }

    /// Copies the content of the file being written from `source`, starting at `offset`,
    /// with `copy_file_range`; returns how many bytes it copied. Where the kernel cannot
    /// copy between these files (another filesystem type, an old kernel), it copies none
    /// and the lander stops trying.
    fn copy_in_kernel(&mut self, source: BorrowedFd<'_>, offset: u64) -> Result<usize> {
        let file = self.file.as_ref().expect("a file is open");
        if !self.no_copy {
            let (to, len) = (file.fd.as_fd(), file.size - file.written);
            let path = || self.path(&self.file_name);
            // Fewer bytes when the archive ended early (cut while mapped): the write from
            // memory meets the same end.
            let cancel = &self.setup.cancel;
            let ranged = copy_range((source, offset), (to, None), len, &path, cancel, |_| {})?;
            self.no_copy = ranged.refused;
            self.file.as_mut().expect("open").written += ranged.copied;
        }
        Ok(self.file.as_ref().expect("open").written as usize)
    }

    /// Writes the rest of the file being written (`len` bytes in all) from the regular file
    /// `from`, whose content starts at `offset`, through memory; a source that ends first is
    /// an error.
    fn write_from(&mut self, from: BorrowedFd<'_>, offset: u64, len: u64) -> Result<()> {
        let written = self.file.as_ref().expect("a file is open").written;
        if written == len {
            // Complete: all copied in the kernel, or empty.
            return self.write_all(&[]);
        }
        let path = self.path(&self.file_name);
        let mut buf = vec![0; (len - written).min(1 << 20) as usize];
        let cancel = self.setup.cancel.clone();
        let read = read_chunks(
            from,
            offset + written,
            len - written,
            &mut buf,
            &path,
            &cancel,
            |chunk| self.write_all(chunk),
        )?;
        if written + read < len {
            return Err(Error::io("read", path, Errno::NODATA));
        }
        Ok(())
    }

    fn write_all(&mut self, mut data: &[u8]) -> Result<()> {
        let file = self.file.as_mut().expect("a file is open");
        while !data.is_empty() {
            let chunk = &data[..data.len().min(CHUNK as usize)];
            match retry(&self.setup.cancel, || write(&file.fd, chunk)) {
                // A stop (or a mapped archive that shrank: its vanished pages read as
                // zeros) is seen before the file counts as complete.
                Ok(n) => {
                    data = &data[n..];
                    file.written += n as u64;
                    self.setup.cancel.check()?;
                }
                // Only a mapped archive's pages can vanish under a write.
                Err(Errno::FAULT) => return Err(Error::Interrupted { signal: SIGBUS }),
                Err(e) => return Err(Error::io("write", self.path(&self.file_name), e)),
            }
        }
        if file.written == file.size {
            self.complete()?;
        }
        Ok(())
    }

    /// Creates (or merges into) the directory `dir` and enters it; true when it created it.
    /// With `last_here`, a directory it created gets its final mode and time when it is
    /// left (else the caller sees to them).
    fn open_dir(&mut self, dir: &Entry<'_>, last_here: bool) -> Result<bool> {
        let name = dir.name;
        let mut skipped = Default::default();
        let apply = self.setup.policy.entry(dir, &mut skipped);
        let (create, last_mode) = self.setup.policy.dir_modes(&apply);
        let created = self.make_dir(name, create)?;
        // What a directory created here gets when it is left; one that was there keeps its
        // own mode, owner and time unless existing entries are overwritten. One whose mode
        // changes then, or that gets extended attributes, is opened for real (`fchmod` and
        // `fsetxattr` need more than `O_PATH`), so that they go through the fd and no
        // swapped name can redirect them.
        let merged_mode = (!created)
            .then(|| self.setup.policy.merged_dir_mode(&apply))
            .flatten();
        let mode = if created { last_mode } else { merged_mode };
        let last = ((created || merged_mode.is_some()) && last_here).then_some((mode, apply.mtime));
        let real = last.is_some_and(|(mode, _)| mode.is_some()) || !dir.xattrs.is_empty();
        let flags = if real { DIR_FLAGS } else { DIR_HANDLE_FLAGS };
        let fd = match openat(self.current(), name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOTDIR | Errno::LOOP) => return Err(self.exists(name)),
            Err(e) => return Err(Error::io("open directory", self.path(name), e)),
        };
        if created || merged_mode.is_some() {
            let target = if real {
                Target::Fd(fd.as_fd())
            } else {
                Target::Handle(fd.as_fd())
            };
            let now = Apply {
                mtime: None,
                ..apply
            };
            let path = || self.path(name);
            self.setup
                .policy
                .restore(target, &now, dir.xattrs, &mut skipped, path)?;
            self.summary.not_restored.add(&skipped);
        }
        self.dirs.push(OpenDir {
            fd: Arc::new(fd),
            name: name.into(),
            last,
            merged: !created,
        });
        self.summary.dirs += 1;
        Ok(created)
    }

    /// Restores the metadata of the file whose content is complete, puts it in place when
    /// it replaces an existing entry, notes it for hard links, and closes it.
    fn complete(&mut self) -> Result<()> {
        let file = self.file.as_ref().expect("a file is open");
        let (policy, skipped) = (&self.setup.policy, &mut self.summary.not_restored);
        let xattrs = Xattrs(&self.file_xattrs);
        let name = &self.file_name;
        let target = Target::Fd(file.fd.as_fd());
        policy.restore(target, &file.apply, xattrs, skipped, || {
            path_in(&self.dirs, name)
        })?;
        if file.replacing {
            let name = std::mem::take(&mut self.file_name);
            let replaced = self.replace(&name);
            self.file_name = name;
            if let Err(e) = replaced {
                // Removed already: nothing for `abort` to remove.
                self.file = None;
                return Err(e);
            }
        }
        let done = self.file.take().expect("a file is open");
        if let Some(id) = done.link_id {
            let name = std::mem::take(&mut self.file_name);
            self.created_linked(id, &name);
            self.file_name = name;
        }
        self.summary.files += 1;
        self.summary.bytes += done.size;
        crate::sys::fds::close_now(done.fd);
        Ok(())
    }
}

/// Files landed by several landers (see [`SharedFile`]), in the current directory.
impl SyncLander {
    /// Creates `file`, of `size` bytes all hole, in the current directory; `None` when it was
    /// skipped (its name existed).
    pub(crate) fn create_shared(
        &mut self,
        file: &Entry<'_>,
        size: u64,
    ) -> Result<Option<(SharedFile, OwnedFd)>> {
        let apply = (self.setup.policy).entry(file, &mut self.summary.not_restored);
        let mode = Mode::from_raw_mode(apply.create_mode());
        let made = self.create_at(file.name, "openat", |dir, name| {
            openat(dir, name, CREATE_FLAGS, mode)
        })?;
        let (fd, temp) = match made {
            Made::Here(fd) => (fd, None),
            Made::Replacing(fd) => (fd, Some(self.temp.clone().into_boxed_slice())),
            Made::Skipped => return Ok(None),
        };
        let mut shared = SharedFile {
            name: file.name.into(),
            temp,
            id: (0, 0),
            size,
            apply,
            xattrs: file.xattrs.0.into(),
            link_id: file.link_id,
        };
        let sized = ftruncate(&fd, size)
            .map_err(|e| ("ftruncate", e))
            .and_then(|()| fstat(&fd).map_err(|e| ("fstat", e)));
        match sized {
            Ok(stat) => {
                shared.id = (stat.st_dev, stat.st_ino);
                Ok(Some((shared, fd)))
            }
            Err((op, e)) => {
                let _ = shared.remove(self.current(), || self.path(file.name));
                Err(Error::io(op, self.path(file.name), e))
            }
        }
    }

    /// Opens `file` for writing: the same file, else it is an error.
    pub(crate) fn open_shared(&self, file: &SharedFile) -> Result<OwnedFd> {
        let path = || self.path(&file.name);
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::CLOEXEC;
        let fd = openat(self.current(), file.written_as(), flags, Mode::empty())
            .map_err(|e| Error::io("openat", path(), e))?;
        let stat = fstat(&fd).map_err(|e| Error::io("fstat", path(), e))?;
        if (stat.st_dev, stat.st_ino) != file.id {
            return Err(Error::io("openat", path(), Errno::STALE));
        }
        Ok(fd)
    }

    /// Writes `data` at offset `at` of `file`, open as `fd`.
    pub(crate) fn write_shared(
        &self,
        (file, fd): (&SharedFile, &OwnedFd),
        at: u64,
        mut data: &[u8],
    ) -> Result<()> {
        let mut at = at;
        while !data.is_empty() {
            let chunk = &data[..data.len().min(CHUNK as usize)];
            match retry(&self.setup.cancel, || pwrite(fd, chunk, at)) {
                Ok(n) => {
                    (data, at) = (&data[n..], at + n as u64);
                    self.setup.cancel.check()?;
                }
                Err(Errno::FAULT) => return Err(Error::Interrupted { signal: SIGBUS }),
                Err(e) => return Err(Error::io("pwrite", self.path(&file.name), e)),
            }
        }
        Ok(())
    }

    /// Completes `file`, open as `fd`, whose last extent was written: restores its metadata,
    /// puts it in place when it replaces an existing entry, notes it for hard links, and
    /// closes it.
    pub(crate) fn complete_shared(&mut self, file: &SharedFile, fd: OwnedFd) -> Result<()> {
        let (policy, skipped) = (&self.setup.policy, &mut self.summary.not_restored);
        let path = || path_in(&self.dirs, &file.name);
        let xattrs = Xattrs(&file.xattrs);
        policy.restore(Target::Fd(fd.as_fd()), &file.apply, xattrs, skipped, path)?;
        if let Some(temp) = &file.temp {
            replace(self.current(), temp, &file.name, path)?;
        }
        if let Some(id) = file.link_id {
            self.created_linked(id, &file.name);
        }
        self.summary.files += 1;
        self.summary.bytes += file.size;
        crate::sys::fds::close_now(fd);
        Ok(())
    }
}

/// The directory `dirs` lead to from `root`: [`SyncLander::current`] for callers that
/// borrow other fields of the lander at the same time.
fn current_in<'a>(root: &'a OwnedFd, dirs: &'a [OpenDir]) -> BorrowedFd<'a> {
    dirs.last().map_or(root.as_fd(), |d| d.fd.as_fd())
}

/// The path of `name` in the directory `dirs` lead to, for messages.
fn path_in(dirs: &[OpenDir], name: &[u8]) -> TreePath {
    TreePath::join(dirs.iter().map(|d| &d.name[..]), name)
}

impl Land for SyncLander {
    fn enter(&mut self, dir: &Entry<'_>) -> Result<bool> {
        self.open_dir(dir, !self.setup.threaded)
    }

    fn link_here(&mut self, id: u64, name: &[u8]) {
        let at = (self.current_shared().clone(), name.into());
        self.setup
            .links
            .lock()
            .expect("no panics")
            .insert(id, Some(at));
    }

    fn summary(&self) -> LandSummary {
        self.summary
    }

    fn sync_lander(&mut self) -> &mut SyncLander {
        self
    }
}

impl Sink for SyncLander {
    type Error = Error;

    fn enter_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.enter(dir).map(drop)
    }

    /// Creates the directory with its mode (even one lacking owner rwx: nothing goes in)
    /// and gives it its time by name; one that needs more (an owner, extended attributes,
    /// setuid or setgid) is entered and left, and gets its final mode and time then (no
    /// other lander enters it, whatever the engine).
    fn empty_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        let mut skipped = Default::default();
        let apply = self.setup.policy.entry(dir, &mut skipped);
        // (One that exists gets the archive's metadata too when entries are overwritten.)
        let merged = self.setup.policy.existing() == Existing::Overwrite;
        if apply.owner.is_some() || !dir.xattrs.is_empty() || apply.mode & SETID != 0 || merged {
            self.open_dir(dir, true)?;
            return self.leave_dir();
        }
        if self.make_dir(dir.name, apply.mode)? {
            let target = Target::At(self.current(), dir.name);
            let path = || self.path(dir.name);
            let policy = &self.setup.policy;
            policy.restore(target, &apply, Xattrs::default(), &mut skipped, path)?;
            self.summary.not_restored.add(&skipped);
        }
        self.summary.dirs += 1;
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        let dir = self.dirs.pop().expect("the decoder never pops the root");
        if let Some(last) = dir.last {
            // Opened for real where it gets a mode.
            let target = match last.0 {
                Some(_) => Target::Fd(dir.fd.as_fd()),
                None => Target::Handle(dir.fd.as_fd()),
            };
            let path = || path_in(&self.dirs, &dir.name);
            let skipped = &mut self.summary.not_restored;
            (self.setup.policy).finish_dir(target, last, dir.merged, skipped, path)?;
        }
        // A directory holding files that hard links may name stays open for them.
        if let Ok(fd) = Arc::try_unwrap(dir.fd) {
            self.left.bury(fd);
        }
        Ok(())
    }

    /// Writes the content from memory, or, for [`Content::File`], copies it inside the
    /// kernel and writes what the kernel could not copy from its mapping, else read from its
    /// fd; a [`Content::Unopened`] file is opened (relative to its directory, not followed)
    /// and landed so.
    fn file(&mut self, file: &Entry<'_>, content: Content<'_>) -> Result<()> {
        self.draining = false;
        match content {
            Content::Bytes(data) => {
                if self.create(file, data.len() as u64)? {
                    self.write_all(data)?;
                }
                Ok(())
            }
            Content::Stream { size, first } => {
                if self.create(file, size)? {
                    self.write_all(first)?;
                }
                Ok(())
            }
            Content::File {
                fd,
                offset,
                len,
                mapped,
            } => {
                if self.create(file, len)? {
                    let copied = self.copy_in_kernel(fd, offset)?;
                    match mapped {
                        Some(data) => self.write_all(&data[copied..])?,
                        None => self.write_from(fd, offset, len)?,
                    }
                }
                Ok(())
            }
            Content::Unopened { dir } => {
                let path = || self.path(file.name);
                let from = openat(dir, file.name, FILE_FLAGS, Mode::empty())
                    .map_err(|e| Error::io("open", path(), e))?;
                let len = fstat(&from)
                    .map_err(|e| Error::io("fstat", path(), e))?
                    .st_size;
                let content = Content::File {
                    fd: from.as_fd(),
                    offset: 0,
                    len: len as u64,
                    mapped: None,
                };
                self.file(file, content)
            }
        }
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        if self.draining {
            return Ok(());
        }
        self.write_all(data)
    }

    /// Seeks past the hole, which the file system leaves unallocated; a file that ends in
    /// one gets its length by `ftruncate`.
    fn hole(&mut self, len: u64) -> Result<()> {
        if self.draining || len == 0 {
            return Ok(());
        }
        let file = self.file.as_mut().expect("a file is open");
        file.written += len;
        let (at, end) = (file.written, file.written == file.size);
        let path = || path_in(&self.dirs, &self.file_name);
        let placed = match end {
            true => ftruncate(&file.fd, at).map_err(|e| Error::io("ftruncate", path(), e)),
            false => (seek(&file.fd, SeekFrom::Start(at)).map(drop))
                .map_err(|e| Error::io("lseek", path(), e)),
        };
        placed?;
        if end {
            self.complete()?;
        }
        Ok(())
    }

    fn symlink(&mut self, link: &Entry<'_>, target: &[u8]) -> Result<()> {
        self.draining = false;
        let apply = self
            .setup
            .policy
            .entry(link, &mut self.summary.not_restored);
        if self.make_other(link, &apply, "symlinkat", |dir, name| {
            symlinkat(target, dir, name)
        })? {
            self.summary.symlinks += 1;
        }
        Ok(())
    }

    /// Links to the file this unpack created for `target`, through the directory fd it
    /// was created in; when that file was skipped (it existed), makes nothing and counts
    /// it.
    fn hard_link(&mut self, link: &Entry<'_>, target: u64) -> Result<()> {
        self.draining = false;
        let Some((dir, name)) = self.link_target(target) else {
            self.summary.not_restored.hard_links += 1;
            return Ok(());
        };
        let make =
            |at: BorrowedFd<'_>, new: &[u8]| linkat(&*dir, &name[..], at, new, AtFlags::empty());
        if self.make_other(link, &Apply::default(), "linkat", make)? {
            self.summary.hard_links += 1;
        }
        Ok(())
    }

    /// Creates a fifo, or a device when the policy allows (else counts it). A device number
    /// Linux cannot hold (a major above 12 bits, a minor above 20: `mknod` would drop the
    /// high bits and make another device) is an error.
    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        self.draining = false;
        let skipped = &mut self.summary.not_restored;
        let file_type = match entry.kind {
            Kind::Fifo => FileType::Fifo,
            Kind::CharDevice if self.setup.policy.devices(skipped) => FileType::CharacterDevice,
            Kind::BlockDevice if self.setup.policy.devices(skipped) => FileType::BlockDevice,
            _ => return Ok(()),
        };
        if device.major > 0xfff || device.minor > 0xf_ffff {
            return Err(Error::io("mknodat", self.path(entry.name), Errno::OVERFLOW));
        }
        let apply = self.setup.policy.entry(entry, skipped);
        let (mode, dev) = (
            Mode::from_raw_mode(apply.mode),
            makedev(device.major, device.minor),
        );
        if self.make_other(entry, &apply, "mknodat", |dir, name| {
            mknodat(dir, name, file_type, mode, dev)
        })? {
            self.summary.specials += 1;
        }
        Ok(())
    }

    /// Removes a partly written file; when the input ended inside it, says so.
    fn abort(&mut self, cause: Error) -> Error {
        let Some(file) = self.file.take() else {
            return cause;
        };
        drop(file.fd);
        let path = self.path(&self.file_name);
        let written = if file.replacing {
            &self.temp
        } else {
            &self.file_name
        };
        if let Err(e) = unlinkat(self.current(), &written[..], AtFlags::empty()) {
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

    /// A new destination gets the root record's owner and extended attributes now, its
    /// time once landing is done, its mode as [`Destination::finish`] puts it in place.
    ///
    /// [`Destination::finish`]: crate::root::Destination::finish
    fn root(&mut self, meta: &Meta, xattrs: Xattrs<'_>) -> Result<()> {
        if !self.setup.new_dest {
            return Ok(());
        }
        let root = Entry {
            xattrs,
            ..Entry::dir(b".", *meta)
        };
        let skipped = &mut self.summary.not_restored;
        let apply = self.setup.policy.entry(&root, skipped);
        let now = Apply {
            mtime: None,
            ..apply
        };
        let target = Target::Fd(self.root.as_fd());
        let path = || TreePath(b".".to_vec());
        self.setup
            .policy
            .restore(target, &now, xattrs, skipped, path)?;
        self.summary.root_mode = Some(self.setup.policy.final_dir_mode(&apply));
        self.root_time = apply.mtime;
        Ok(())
    }

    fn finish(&mut self) -> Result<()> {
        self.left.close_all();
        if let Some(mtime) = self.root_time.take() {
            let (skipped, path) = (&mut self.summary.not_restored, || TreePath(b".".to_vec()));
            let target = Target::Fd(self.root.as_fd());
            (self.setup.policy).finish_dir(target, (None, Some(mtime)), false, skipped, path)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;

    use super::*;
    use crate::land::restore::Restore;
    use crate::land::uring::UringLander;
    use crate::tree::{Meta, Owner};

    fn at(n: i64) -> Timestamp {
        Timestamp {
            sec: 1_000_000_000 + n,
            nsec: n as u32,
        }
    }

    fn timed(mode: u32, n: i64) -> Meta {
        let mut meta = Meta::with_mode(mode);
        meta.mtime = Some(at(n));
        meta
    }

    fn mtime(path: &Path) -> Timestamp {
        let meta = std::fs::symlink_metadata(path).unwrap();
        Timestamp {
            sec: meta.mtime(),
            nsec: meta.mtime_nsec() as u32,
        }
    }

    fn ino(path: &Path) -> u64 {
        std::fs::symlink_metadata(path).unwrap().ino()
    }

    /// A sync and a uring lander below `dest`, skipping existing entries.
    fn landers(dest: &Path) -> Vec<(&'static str, Box<dyn Land>)> {
        let policy = Policy::new(
            Restore::default().existing(Existing::Skip),
            Owner::of_process(),
            crate::root::process_umask(),
        );
        let root = || OwnedFd::from(std::fs::File::open(dest).unwrap());
        vec![
            (
                "sync",
                Box::new(SyncLander::new(root(), Setup::new(policy, Cancel::new()))),
            ),
            (
                "uring",
                Box::new(UringLander::new(root(), Setup::new(policy, Cancel::new())).unwrap()),
            ),
        ]
    }

    /// Both single-thread landers restore times (a directory's after its contents, a
    /// symlink's own), symlinks, fifos and hard links (to a file of the batch being
    /// landed, and to one of an earlier directory).
    #[test]
    fn the_landers_restore_times_kinds_and_hard_links() {
        for i in 0..2 {
            let dest = tempfile::tempdir().unwrap();
            let (what, mut sink) = landers(dest.path()).swap_remove(i);
            sink.enter_dir(&Entry::dir(b"d", timed(0o750, 1))).unwrap();
            let mut f = Entry::file(b"f", timed(0o640, 2));
            f.link_id = Some(7);
            sink.file(&f, Content::Bytes(b"data")).unwrap();
            let s = Entry::new(b"s", Kind::Symlink, timed(0o777, 3));
            sink.symlink(&s, b"f").unwrap();
            let p = Entry::new(b"p", Kind::Fifo, timed(0o600, 4));
            sink.special(&p, Device::default()).unwrap();
            sink.hard_link(&Entry::file(b"h", Meta::default()), 7)
                .unwrap();
            sink.leave_dir().unwrap();
            sink.hard_link(&Entry::file(b"l", Meta::default()), 7)
                .unwrap();
            sink.finish().unwrap();
            let d = dest.path().join("d");
            assert_eq!(mtime(&d), at(1), "{what}: d after its contents");
            assert_eq!(mtime(&d.join("f")), at(2), "{what}");
            assert_eq!(mtime(&d.join("s")), at(3), "{what}: the symlink's own");
            assert_eq!(mtime(&d.join("p")), at(4), "{what}");
            assert_eq!(ino(&d.join("h")), ino(&d.join("f")), "{what}");
            assert_eq!(ino(&dest.path().join("l")), ino(&d.join("f")), "{what}");
            let summary = sink.summary();
            assert_eq!(
                (summary.files, summary.hard_links, summary.symlinks),
                (1, 2, 1)
            );
        }
    }

    /// A file skipped because its name existed is no file of this unpack: a hard link to
    /// it is not made, but counted.
    #[test]
    fn a_hard_link_to_a_skipped_file_is_not_made() {
        for i in 0..2 {
            let dest = tempfile::tempdir().unwrap();
            std::fs::write(dest.path().join("k"), b"was there").unwrap();
            let (what, mut sink) = landers(dest.path()).swap_remove(i);
            let mut k = Entry::file(b"k", Meta::with_mode(0o644));
            k.link_id = Some(0);
            sink.file(&k, Content::Bytes(b"new")).unwrap();
            sink.hard_link(&Entry::file(b"l", Meta::default()), 0)
                .unwrap();
            sink.finish().unwrap();
            assert!(!dest.path().join("l").exists(), "{what}");
            assert_eq!(std::fs::read(dest.path().join("k")).unwrap(), b"was there");
            let summary = sink.summary();
            assert_eq!(
                (summary.kept, summary.not_restored.hard_links),
                (1, 1),
                "{what}"
            );
        }
    }

    /// Both landers take a file's content from an fd without its bytes in memory, at an
    /// offset, and from a directory that names it (a walker's listing): every form of
    /// [`Content`] lands.
    #[test]
    fn the_landers_take_content_from_a_file_and_from_a_listing() {
        let src = tempfile::tempdir().unwrap();
        let big: Vec<u8> = (0..3_000_000u32).map(|i| i as u8).collect();
        std::fs::write(src.path().join("big"), &big).unwrap();
        std::fs::write(src.path().join("empty"), b"").unwrap();
        let file = std::fs::File::open(src.path().join("big")).unwrap();
        let dir = std::fs::File::open(src.path()).unwrap();
        for i in 0..2 {
            let dest = tempfile::tempdir().unwrap();
            let (what, mut sink) = landers(dest.path()).swap_remove(i);
            let content = Content::File {
                fd: file.as_fd(),
                offset: 5,
                len: 1000,
                mapped: None,
            };
            sink.file(&Entry::file(b"part", timed(0o644, 1)), content)
                .unwrap();
            for name in [&b"big"[..], b"empty"] {
                let listed = Content::Unopened { dir: dir.as_fd() };
                sink.file(&Entry::file(name, timed(0o600, 2)), listed)
                    .unwrap();
            }
            sink.finish().unwrap();
            let read = |name: &str| std::fs::read(dest.path().join(name)).unwrap();
            assert_eq!(read("part"), &big[5..1005], "{what}");
            assert!(read("big") == big && read("empty").is_empty(), "{what}");
            assert_eq!(mtime(&dest.path().join("big")), at(2), "{what}");
            assert_eq!(sink.summary().files, 3, "{what}");
        }
    }
}
