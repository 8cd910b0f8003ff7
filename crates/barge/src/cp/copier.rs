//! The landing visitor of `cp`: one `Copier` per walking thread, the copy of each directory
//! as the walk's per-directory state (`DestDir`), and what the threads share. A file of
//! [`SPREAD`] bytes or more is left as a job for any thread (so the files of one directory
//! are copied by several), one of `chunked::LARGE` or more as chunk jobs.
//!
//! The walk's helper threads have their own fd tables (`WalkParallel::solo`): the copy of a
//! directory is open on the thread that made it ([`DestFd`]), and another thread reopens it
//! by name from the copy's root ([`Copier::here`]); a chunk job there opens its file's
//! source and copy by name (`chunked.rs`).

mod chunked;
mod content;
pub(crate) mod wide;

#[cfg(test)]
pub(super) use chunked::hooks;

use std::borrow::Cow;
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::{
    fchmod, fremovexattr, makedev, mkdirat, mknodat, openat, readlinkat, statx, symlinkat,
    unlinkat, AtFlags, FileType, Mode, Statx, StatxFlags,
};
use rustix::io::Errno;

use super::{part_owner, Change, Cp, CpCounts, CpReport, CpSummary, Deferred, Part};
use crate::compare::{first_difference, inode_key, xattr_digest, Buffers, Facts, Rule};
use crate::error::{Error, Result, TreePath};
use crate::land::restore::{Apply, Existing, NotRestored, Policy, Target};
use crate::land::sync::{create_at, exists, replace, replace_by_dir, Made};
use crate::sys::dir::{dirent_buffer, remove_tree, Listing};
use crate::sys::thread::{spawn_elsewhere, ThreadFd};
use crate::sys::{reopen, DIR_FLAGS, FILE_FLAGS};
use crate::threads::{Crowd, Crowds};
use crate::tree::{Entry, Kind, Meta, Owner, XattrReader, Xattrs, XattrsOf, STATX_MASK};
use crate::walk::parallel::{Dir, ParallelVisitor, ParallelVisitorBuilder, WalkState};
use crate::Progress;
use chunked::Chunked;
use content::Filed;

/// Files of this size or more are copied by whichever thread takes them, not by the one
/// that listed their directory: below it a copy costs little more than its create, which
/// serializes on the directory anyway, and a job (about 300 bytes held until it runs)
/// would cost more memory than the file has bytes in a directory of millions.
const SPREAD: u64 = 64 << 10;

/// What a job of `bytes` costs, in entries listed (a listed entry takes a microsecond or
/// two, copying 16 KiB on tmpfs about as long).
fn job_cost(bytes: u64) -> u64 {
    1 + (bytes >> 14)
}

/// Whether `error` says DEST can take no more (full, over quota, read-only).
fn dest_full(error: &Error) -> bool {
    let full = [Errno::NOSPC, Errno::DQUOT, Errno::ROFS].map(|e| e.raw_os_error());
    matches!(error, Error::Io { cause, .. }
        if cause.raw_os_error().is_some_and(|e| full.contains(&e)))
}

/// The copy of a directory, open on the thread that made it (or on every thread, for a
/// root), and what another thread needs to reopen it.
#[derive(Debug)]
pub(crate) struct DestFd {
    fd: ThreadFd,
    /// The copy's root (`None`: this is one, open on every thread).
    root: Option<Arc<DestFd>>,
    /// Its path below the root.
    path: Box<[u8]>,
    ino: u64,
}

impl DestFd {
    /// A directory opened by a thread that is not a walk's, before the walk (the copy's
    /// root, DEST's directory): every thread of the walk has it.
    pub(super) fn before_walk(fd: OwnedFd) -> Arc<DestFd> {
        Arc::new(DestFd {
            fd: ThreadFd::everywhere(fd),
            root: None,
            path: Box::default(),
            ino: 0,
        })
    }

    /// The directory at `path` below `root`, just opened as `fd` by the calling thread.
    pub(super) fn new(fd: OwnedFd, root: Option<&Arc<DestFd>>, path: &[u8], ino: u64) -> DestFd {
        DestFd {
            fd: ThreadFd::new(fd),
            root: root.cloned(),
            path: path.into(),
            ino,
        }
    }

    /// The directory as the calling thread may use it: its fd, or opened again here.
    pub(super) fn here(&self) -> rustix::io::Result<Here<'_>> {
        match self.fd.get() {
            Some(fd) => Ok(Here::Theirs(fd)),
            None => self.reopen().map(Here::Mine),
        }
    }

    /// Opens the directory again on the calling thread: by name from the root, never
    /// following a symlink; `ESTALE` when its path leads to another directory now.
    pub(super) fn reopen(&self) -> rustix::io::Result<OwnedFd> {
        let root = self.root.as_deref().unwrap_or(self);
        let base = root.fd.get().ok_or(Errno::BADF)?;
        let mut names = self.path.split(|&b| b == b'/').filter(|n| !n.is_empty());
        let last = names.next_back().ok_or(Errno::STALE)?;
        let mut fd: Option<OwnedFd> = None;
        for name in names {
            let at = fd.as_ref().map_or(base, |fd| fd.as_fd());
            fd = Some(openat(at, name, DIR_FLAGS, Mode::empty())?);
        }
        let at = fd.as_ref().map_or(base, |fd| fd.as_fd());
        reopen(at, last, DIR_FLAGS, |stat| stat.stx_ino == self.ino)
    }
}

impl AsFd for DestFd {
    /// See [`ThreadFd::as_fd`]: only on a thread it is open on.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// An fd of another thread's table, or one opened here.
pub(super) enum Here<'f> {
    Theirs(BorrowedFd<'f>),
    Mine(OwnedFd),
}

impl AsFd for Here<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Here::Theirs(fd) => *fd,
            Here::Mine(fd) => fd.as_fd(),
        }
    }
}

/// The copy of a file of several links, for its later names: its directory and its name.
pub(crate) type CopyLink = (Arc<DestFd>, Box<[u8]>);

/// Work a `Copier` leaves for any thread.
pub(super) enum Job<'a> {
    /// A file of the directory the job was left in.
    File { name: Box<[u8]>, stat: Box<Statx> },
    /// One of the (at most `chunked::WRITERS`) copiers of a large file's chunks.
    Chunks(Arc<Chunked<'a>>),
}

/// What the threads of one [`Cp::run`] share.
pub(super) struct Shared<'a> {
    pub(super) cp: &'a Cp,
    pub(super) policy: Policy,
    pub(super) root: bool,
    /// The effective user and group.
    pub(super) me: Owner,
    pub(super) report: &'a dyn CpReport,
    pub(super) progress: &'a Progress,
    /// SRC and DEST as given, for paths in messages.
    pub(super) src: Vec<u8>,
    pub(super) dest: Vec<u8>,
    /// The copies of multi-link files (see [`Linked`]).
    pub(super) links: &'a Mutex<HashMap<(u64, u64), CopyLink>>,
    /// The names of multi-link files [`Part::Rank`] leaves to [`Cp::run_links`].
    pub(super) deferred: &'a Mutex<Vec<Deferred>>,
    /// The large files [`Part::Rank`] leaves to a wide copy ([`Cp::make_wide`]).
    pub(super) wide: &'a Mutex<Vec<super::Wide>>,
    /// SRC's device: noted as 0 in `deferred`, where other machines, which may number a
    /// shared filesystem's device otherwise, must find the same key.
    pub(super) src_dev: u64,
    /// `FICLONE` failed as unsupported (or `--reflink=never`): not tried again.
    pub(super) no_clone: AtomicBool,
    /// `copy_file_range` failed as unsupported (or `--reflink=never`): not tried again.
    pub(super) no_range: AtomicBool,
    /// The device and inode of the copy's root directory, which the walk never enters.
    pub(super) target: Mutex<Option<(u64, u64)>>,
    pub(super) summary: Mutex<CpSummary>,
    /// Where threads wait for a place in a copy's directory (see [`DestDir::crowd`]).
    pub(super) crowds: Crowds,
    /// The copy's root, which every thread of the walk has open.
    pub(super) dest_root: OnceLock<Arc<DestFd>>,
    /// Copies of directories reopened on another thread than theirs (`BARGE_WALK_STATS`).
    pub(super) reopened: AtomicU64,
}

impl Shared<'_> {
    /// Whether `stat` is a file of several names that the copy links as one.
    pub(super) fn linked(&self, stat: &Statx) -> bool {
        self.cp.links && stat.stx_nlink > 1
    }

    /// Whether the copy reads and sets extended attributes.
    fn xattrs(&self) -> bool {
        self.cp.archive && self.policy.xattrs()
    }

    /// The path in DEST of `relative` (a path below the copy's root).
    fn dest_path(&self, relative: &[u8]) -> TreePath {
        TreePath::join([&self.dest[..]], relative)
    }

    /// The path in SRC of `relative`.
    fn src_path(&self, relative: &[u8]) -> TreePath {
        TreePath::join([&self.src[..]], relative)
    }

    /// Reports an error that was not counted by a visitor.
    fn error(&self, error: Error) {
        self.summary.lock().expect("no panics").counts.errors += 1;
        self.report.error(error);
    }
}

pub(super) struct Builder<'a>(pub(super) &'a Shared<'a>);

impl<'a> ParallelVisitorBuilder for Builder<'a> {
    type Visitor = Copier<'a>;

    fn build(&mut self) -> Copier<'a> {
        Copier::new(self.0)
    }
}

/// Where an entry is copied from and to.
pub(super) struct Pair<'p> {
    /// Its directory in SRC.
    pub(super) src: BorrowedFd<'p>,
    pub(super) src_name: &'p [u8],
    /// The copy of that directory (`None` in a dry run where it does not exist yet), open
    /// on the calling thread.
    pub(super) dest: Option<&'p Arc<DestFd>>,
    /// The threads creating entries there (`None` outside a walk: one thread).
    pub(super) crowd: Option<&'p Crowd>,
    /// Its name in DEST.
    pub(super) name: &'p [u8],
    /// The copy of its directory is setgid.
    pub(super) setgid: bool,
    /// Its path below the copy's root (empty for the root), made only for messages.
    pub(super) path: &'p dyn Fn() -> Vec<u8>,
}

impl Pair<'_> {
    fn dest_path(&self, shared: &Shared<'_>) -> TreePath {
        shared.dest_path(&(self.path)())
    }

    fn src_path(&self, shared: &Shared<'_>) -> TreePath {
        shared.src_path(&(self.path)())
    }
}

/// The state of a directory of the walk: its copy, and what the copy gets once everything
/// below it is copied (when the walker drops it).
pub(super) struct DestDir<'a> {
    fd: Option<Arc<DestFd>>,
    /// The copy is setgid: what is created in it gets its group, not the process's.
    setgid: bool,
    last: Option<Last>,
    shared: &'a Shared<'a>,
    /// The threads creating entries in the copy: at most `threads::PER_DIR` at once.
    crowd: Crowd,
}

/// A directory's metadata, set after its content.
struct Last {
    /// Its mode, when it differs from the one it was created with.
    mode: Option<u32>,
    /// Owner (of a directory merged into; a new one got it when created) and time.
    apply: Apply,
    /// Its extended attributes, in archive form (a default ACL set before would change the
    /// modes of what is created in it).
    xattrs: Vec<u8>,
    /// Its path below the copy's root.
    path: Vec<u8>,
}

impl Last {
    /// Whether the directory `fd` has this metadata already (as most have on a `--update`:
    /// one `statx` then saves a `fchmod` and a `utimensat`), given whether its extended
    /// attributes are the same (`same_xattrs`). An error says no: the restore that follows
    /// names it.
    fn settled(&self, fd: BorrowedFd<'_>, same_xattrs: bool) -> bool {
        if !same_xattrs {
            return false;
        }
        let mask = StatxFlags::MODE | StatxFlags::UID | StatxFlags::GID | StatxFlags::MTIME;
        let Ok(there) = statx(fd, "", AtFlags::EMPTY_PATH, mask) else {
            return false;
        };
        let mode = self
            .mode
            .is_none_or(|mode| u32::from(there.stx_mode) & 0o7777 == mode);
        let owner = self.apply.owner.is_none_or(|owner| {
            (owner.uid == u32::MAX || owner.uid == there.stx_uid)
                && (owner.gid == u32::MAX || owner.gid == there.stx_gid)
        });
        let time = self.apply.mtime.is_none_or(|time| {
            (time.sec, time.nsec) == (there.stx_mtime.tv_sec, there.stx_mtime.tv_nsec)
        });
        mode && owner && time
    }
}

impl Drop for DestDir<'_> {
    fn drop(&mut self) {
        let (Some(dest), Some(last)) = (&self.fd, self.last.take()) else {
            return;
        };
        let shared = self.shared;
        // The last thread to leave it may not be the one that made it.
        let here = match dest.here() {
            Ok(here) => here,
            Err(e) => {
                let path = shared.dest_path(&last.path);
                return shared.error(Error::io("reopen directory", path, e));
            }
        };
        if let Here::Mine(_) = here {
            shared.reopened.fetch_add(1, Relaxed);
        }
        let fd = here.as_fd();
        let policy = &shared.policy;
        let kept = |name: &[u8]| policy.sets_xattr(name);
        let src = Xattrs(&last.xattrs);
        // An update in archive mode compares DEST's extended attributes with SRC's as it
        // does a file's, and removes those SRC lacks (`None`: none compared or removed).
        let compared = shared.cp.update && shared.cp.archive;
        let mut reader = XattrReader::default();
        let there = compared
            .then(|| reader.read(fd.as_fd()).ok().map(|_| Xattrs(&reader.wire)))
            .flatten();
        let same_xattrs = match there {
            Some(there) => xattr_digest(there, kept) == xattr_digest(src, kept),
            None => !compared && src.is_empty(),
        };
        if shared.cp.update && last.settled(fd, same_xattrs) {
            return;
        }
        let mut skipped = NotRestored::default();
        let path = || shared.dest_path(&last.path);
        let owner = Apply {
            owner: last.apply.owner,
            ..Apply::default()
        };
        let mut stale = (there.iter().flat_map(|there| there.iter()))
            .filter(|(name, _)| kept(name) && !src.iter().any(|(had, _)| had == *name));
        let done = stale
            .try_for_each(|(name, _)| match fremovexattr(fd, name) {
                Ok(()) | Err(Errno::NODATA) => Ok(()),
                Err(e) => Err(Error::io("removexattr", path(), e)),
            })
            .and_then(|()| {
                policy.restore(
                    Target::Fd(fd.as_fd()),
                    &owner,
                    Xattrs::default(),
                    &mut skipped,
                    path,
                )
            })
            .and_then(|()| match last.mode {
                Some(mode) => fchmod(fd, Mode::from_raw_mode(mode))
                    .map_err(|e| Error::io("fchmod", path(), e)),
                None => Ok(()),
            })
            .and_then(|()| {
                let time = Apply {
                    mtime: last.apply.mtime,
                    ..Apply::default()
                };
                policy.restore(Target::Fd(fd.as_fd()), &time, src, &mut skipped, path)
            });
        shared
            .summary
            .lock()
            .expect("no panics")
            .not_restored
            .add(&skipped);
        if let Err(e) = done {
            shared.error(e);
        }
    }
}

/// The landing visitor of one walking thread.
pub(super) struct Copier<'a> {
    shared: &'a Shared<'a>,
    counts: CpCounts,
    not_restored: NotRestored,
    xattrs: XattrReader,
    /// The temporary name of a replacement.
    temp: Vec<u8>,
    /// A symlink's target.
    target: Vec<u8>,
    /// Content copied through memory ([`Copier::copy_range`]'s fallback).
    buf: Vec<u8>,
    /// Contents compared ([`Cp::checksum`]).
    bufs: Buffers,
    /// Jobs left for the walker to share, with their costs.
    jobs: Vec<(Job<'a>, u64)>,
    /// What it does with a large file, in a step of a wide copy.
    wide: wide::Step,
    /// The last copy of a directory of another thread reopened on this one, and its fd here.
    reopened: Option<(Arc<DestFd>, Arc<DestFd>)>,
    /// The source file the walk opened to state it, while that entry is copied.
    opened: Option<OwnedFd>,
}

impl Drop for Copier<'_> {
    fn drop(&mut self) {
        let mut summary = self.shared.summary.lock().expect("no panics");
        summary.counts.add(&self.counts);
        summary.not_restored.add(&self.not_restored);
    }
}

/// What DEST has at an entry's name, with [`Cp::update`].
enum Found {
    Nothing,
    /// The same type, size, mtime, permission bits (and owner, where kept): left alone.
    Same,
    /// Something else of the same kind (a file, a symlink, ...): replaced by rename.
    Other,
    /// A directory where SRC has something else.
    Dir,
}

impl<'a> Copier<'a> {
    pub(super) fn new(shared: &'a Shared<'a>) -> Copier<'a> {
        Copier {
            shared,
            counts: CpCounts::default(),
            not_restored: NotRestored::default(),
            xattrs: XattrReader::default(),
            temp: Vec::new(),
            target: Vec::new(),
            buf: Vec::new(),
            bufs: Buffers::default(),
            jobs: Vec::new(),
            wide: wide::Step::Whole,
            reopened: None,
            opened: None,
        }
    }

    /// The copy of a directory `dir` as this thread may use it: itself, or reopened here
    /// (see [`DestFd::reopen`]; the last one is kept for the next call).
    pub(super) fn here<'d>(&mut self, dir: &'d Arc<DestFd>) -> Result<Cow<'d, Arc<DestFd>>> {
        if dir.fd.get().is_some() {
            return Ok(Cow::Borrowed(dir));
        }
        if let Some((theirs, mine)) = &self.reopened {
            if Arc::ptr_eq(theirs, dir) {
                return Ok(Cow::Owned(mine.clone()));
            }
        }
        let shared = self.shared;
        let fd = (dir.reopen())
            .map_err(|e| Error::io("reopen directory", shared.dest_path(&dir.path), e))?;
        shared.reopened.fetch_add(1, Relaxed);
        let mine = Arc::new(DestFd::new(fd, dir.root.as_ref(), &dir.path, dir.ino));
        self.reopened = Some((dir.clone(), mine.clone()));
        Ok(Cow::Owned(mine))
    }

    fn cp(&self) -> &'a Cp {
        self.shared.cp
    }

    /// Counts and reports an entry not copied; stops the walk when a stop was requested.
    /// Stops the copy when DEST can take no more (no entry after it could be copied, and
    /// each would say so), or a stop was requested.
    pub(super) fn failed(&mut self, error: Error) -> WalkState {
        let dest_full = dest_full(&error);
        self.counts.errors += 1;
        self.shared.report.error(error);
        if dest_full {
            self.shared.summary.lock().expect("no panics").stopped = true;
        }
        match dest_full || self.shared.cp.cancel.is_cancelled() {
            true => WalkState::Quit,
            false => WalkState::Continue,
        }
    }

    fn change(&self, change: Change, at: &Pair<'_>) {
        self.tell(change, || at.dest_path(self.shared));
    }

    /// Tells `change` to the entry at `path` in DEST, when [`Cp::changes`] asks for them.
    fn tell(&self, change: Change, path: impl FnOnce() -> TreePath) {
        if self.cp().changes {
            self.shared.report.change(change, &path());
        }
    }

    /// What a copy restores of the source `entry`: what the one policy decides (setuid and
    /// setgid where the copy keeps the ids they grant), less the `chown` where creating it
    /// in a directory that is not setgid (`in_setgid`) gives the owner already.
    fn apply(&mut self, entry: &Entry<'_>, in_setgid: bool) -> Apply {
        let mut apply = self.shared.policy.entry(entry, &mut self.not_restored);
        if apply.owner == Some(self.shared.me) && !in_setgid {
            apply.owner = None;
        }
        apply
    }

    /// The extended attributes of the open source entry `fd` with [`Cp::archive`], in
    /// archive form (in `self.xattrs.wire`).
    fn read_xattrs(&mut self, fd: BorrowedFd<'_>, path: impl Fn() -> TreePath) -> Result<()> {
        self.xattrs.wire.clear();
        if self.shared.xattrs() {
            self.xattrs
                .read(fd)
                .map_err(|e| Error::io("flistxattr", path(), e))?;
        }
        Ok(())
    }

    /// What DEST has at `at.name`, compared with the source `stat` of kind `kind` by the
    /// unchanged rule: what the copy keeps (owners as root, extended attributes of files,
    /// hard links), the content too with [`Cp::checksum`].
    fn found(&mut self, at: &Pair<'_>, stat: &Statx, kind: Kind) -> Result<Found> {
        let Some(dest) = at.dest else {
            return Ok(Found::Nothing);
        };
        let there = match statx(&**dest, at.name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK) {
            Ok(there) => there,
            Err(Errno::NOENT) => return Ok(Found::Nothing),
            Err(e) => return Err(Error::io("statx", at.dest_path(self.shared), e)),
        };
        if Kind::of_mode(there.stx_mode.into()) == Kind::Dir && kind != Kind::Dir {
            return Ok(Found::Dir);
        }
        let policy = self.shared.policy;
        let rule = Rule {
            owners: policy.restores_owners(),
            xattrs: false,
            links: self.cp().links,
            newer: !policy.times(),
        };
        // The copy it would make: the source's mode (or the default) less the umask it is
        // made under.
        let mut source = Facts::of_statx(stat);
        source.meta.mode = policy.mode_of(kind, source.meta.mode) & !self.cp().umask;
        let mut copy = Facts::of_statx(&there);
        if !rule.unchanged(&source, &copy) {
            return Ok(Found::Other);
        }
        if kind != Kind::File {
            return Ok(Found::Same);
        }
        // A file's extended attributes and content cost more calls: looked at only when
        // the rest is the same.
        if self.shared.xattrs() {
            let (src, copied) = (
                self.xattr_digest(at.src, at.src_name),
                self.xattr_digest(dest.as_fd(), at.name),
            );
            // Attributes that cannot be read are replaced (the copy names the source's
            // error).
            let (Ok(src), Ok(copied)) = (src, copied) else {
                return Ok(Found::Other);
            };
            (source.xattrs, copy.xattrs) = (Some(src), Some(copied));
            let rule = Rule {
                xattrs: true,
                ..rule
            };
            if !rule.unchanged(&source, &copy) {
                return Ok(Found::Other);
            }
        }
        if self.cp().checksum {
            let open = |dir, name| openat(dir, name, FILE_FLAGS, Mode::empty());
            let src = open(at.src, at.src_name)
                .map_err(|e| Error::io("open", at.src_path(self.shared), e))?;
            // A copy that cannot be read is replaced.
            let Ok(copied) = open(dest.as_fd(), at.name) else {
                return Ok(Found::Other);
            };
            let cancel = &self.cp().cancel;
            let same = first_difference(src.as_fd(), copied.as_fd(), &mut self.bufs, cancel);
            if !matches!(same, Ok(Ok(_))) {
                return Ok(Found::Other);
            }
        }
        if self.shared.linked(stat) && !self.links_to_earlier(stat, &there, dest, at.name) {
            return Ok(Found::Other);
        }
        Ok(Found::Same)
    }

    /// The digest of the extended attributes the copy keeps of the file `name` in `dir`
    /// ([`xattr_digest`]).
    fn xattr_digest(&mut self, dir: BorrowedFd<'_>, name: &[u8]) -> rustix::io::Result<u64> {
        self.xattrs.read_from(XattrsOf::Name(dir, name))?;
        let policy = self.shared.policy;
        let xattrs = Xattrs(&self.xattrs.wire);
        Ok(xattr_digest(xattrs, |name| policy.sets_xattr(name)))
    }

    /// Whether the copy `there` (named `name` in `dest`) of a file of several names
    /// (`stat`) is the copy an earlier name of it has, as its hard link; the first name
    /// seen notes its copy for the later ones.
    fn links_to_earlier(
        &mut self,
        stat: &Statx,
        there: &Statx,
        dest: &Arc<DestFd>,
        name: &[u8],
    ) -> bool {
        let shared = self.shared;
        let mut links = shared.links.lock().expect("no panics");
        match links.get(&inode_key(stat)) {
            Some((dir, earlier)) => self.here(dir).is_ok_and(|dir| {
                statx(
                    &**dir,
                    &earlier[..],
                    AtFlags::SYMLINK_NOFOLLOW,
                    StatxFlags::INO,
                )
                .is_ok_and(|earlier| inode_key(&earlier) == inode_key(there))
            }),
            None => {
                links.insert(inode_key(stat), (dest.clone(), name.into()));
                true
            }
        }
    }

    /// Copies the non-directory `at` (stated as `stat`).
    pub(super) fn copy(&mut self, at: &Pair<'_>, stat: &Statx) -> Result<()> {
        let kind = Kind::of_mode(stat.stx_mode.into());
        let ranked = matches!(self.cp().part, Part::Rank { .. });
        if kind == Kind::File && self.shared.linked(stat) && ranked {
            let (dev, ino) = inode_key(stat);
            let dev = if dev == self.shared.src_dev { 0 } else { dev };
            let name = ((dev, ino), (at.path)());
            self.shared.deferred.lock().expect("no panics").push(name);
            return Ok(());
        }
        if let wide::Step::Finish(name, whole) = &self.wide {
            let (name, whole) = (name.clone(), *whole);
            return self.finish_wide(at, stat, &name, whole);
        }
        if kind == Kind::File && self.leaves_wide(at, stat) {
            return Ok(());
        }
        let (update, delete) = (self.cp().update, self.cp().delete);
        let mut existing = self.shared.policy.existing();
        let mut change = Change::Create;
        if update || self.cp().dry_run {
            let exists_error = || {
                let dest = at.dest.expect("found in it");
                exists(dest.as_fd(), at.name, at.dest_path(self.shared))
            };
            match self.found(at, stat, kind)? {
                Found::Nothing => {}
                Found::Same if update => {
                    self.counts.unchanged += 1;
                    let size = if kind == Kind::File { stat.stx_size } else { 0 };
                    self.shared.progress.add_entry(size);
                    return Ok(());
                }
                Found::Dir if update && delete => {
                    change = Change::Replace;
                    if !self.cp().dry_run {
                        let dest = at.dest.expect("found in it");
                        remove(dest.as_fd(), at.name, || at.dest_path(self.shared))?;
                    }
                }
                Found::Dir => return Err(exists_error()),
                // Only a dry run gets here without `update`: it says what the copy would.
                Found::Same | Found::Other => match (update, existing) {
                    (false, Existing::Keep) => return Err(exists_error()),
                    (false, Existing::Skip) => {
                        self.counts.kept += 1;
                        return Ok(());
                    }
                    _ => {
                        change = Change::Replace;
                        existing = Existing::Overwrite;
                    }
                },
            }
        }
        if self.cp().dry_run {
            self.change(change, at);
            self.count(kind, stat.stx_size);
            return Ok(());
        }
        let dest = at.dest.expect("not a dry run");
        let entry = Entry::new(at.name, kind, Meta::of_statx(stat));
        let apply = self.apply(&entry, at.setgid);
        let removed = change == Change::Replace;
        let replaced = match kind {
            Kind::File => match self.copy_file(at, dest, stat, &apply, existing, removed)? {
                Filed::Skipped => None,
                Filed::Copied { replaced } => Some(replaced),
                Filed::Chunked => return Ok(()),
            },
            Kind::Symlink => {
                let target = readlinkat(at.src, at.src_name, std::mem::take(&mut self.target))
                    .map_err(|e| Error::io("readlinkat", at.src_path(self.shared), e))?;
                let made = self.make(at, dest, &apply, existing, "symlinkat", |dir, name| {
                    symlinkat(target.as_c_str(), dir, name)
                });
                self.target = target.into_bytes();
                made?
            }
            Kind::Fifo | Kind::Socket => {
                let file_type = match kind {
                    Kind::Fifo => FileType::Fifo,
                    _ => FileType::Socket,
                };
                self.make(at, dest, &apply, existing, "mknodat", |dir, name| {
                    mknodat(dir, name, file_type, Mode::from_raw_mode(apply.mode), 0)
                })?
            }
            Kind::CharDevice | Kind::BlockDevice => {
                if !self.cp().archive {
                    self.counts.left_out += 1;
                    return Ok(());
                }
                if !self.shared.policy.devices(&mut self.not_restored) {
                    return Ok(());
                }
                let file_type = match kind {
                    Kind::CharDevice => FileType::CharacterDevice,
                    _ => FileType::BlockDevice,
                };
                let device = makedev(stat.stx_rdev_major, stat.stx_rdev_minor);
                self.make(at, dest, &apply, existing, "mknodat", |dir, name| {
                    mknodat(
                        dir,
                        name,
                        file_type,
                        Mode::from_raw_mode(apply.mode),
                        device,
                    )
                })?
            }
            Kind::Dir | Kind::Unknown => return Ok(()),
        };
        match replaced {
            None => self.counts.kept += 1,
            Some(replaced) => {
                // A directory removed for it (`Found::Dir`) was replaced too.
                let replaced = replaced || removed;
                if kind != Kind::File {
                    self.count(kind, 0);
                }
                self.counts.replaced += u64::from(replaced);
                self.change(
                    if replaced {
                        Change::Replace
                    } else {
                        Change::Create
                    },
                    at,
                );
            }
        }
        Ok(())
    }

    /// Counts an entry of `kind` copied.
    fn count(&mut self, kind: Kind, size: u64) {
        match kind {
            Kind::File => {
                self.counts.files += 1;
                self.counts.bytes += size;
            }
            Kind::Symlink => self.counts.symlinks += 1,
            Kind::Dir => self.counts.dirs += 1,
            _ => self.counts.specials += 1,
        }
        self.shared
            .progress
            .add_entry(if kind == Kind::File { size } else { 0 });
    }

    /// Creates a symlink, special file or hard link with `make` and restores its metadata
    /// by name;
    /// `None` when it existed and was skipped, else whether it replaced an entry.
    fn make(
        &mut self,
        at: &Pair<'_>,
        dest: &Arc<DestFd>,
        apply: &Apply,
        existing: Existing,
        op: &'static str,
        make: impl FnMut(BorrowedFd<'_>, &[u8]) -> rustix::io::Result<()>,
    ) -> Result<Option<bool>> {
        let dir = dest.as_fd();
        let path = || at.dest_path(self.shared);
        let place = at.crowd.map(|crowd| self.shared.crowds.join(crowd));
        let made = create_at(dir, at.name, existing, &mut self.temp, op, path, make);
        drop(place);
        let replacing = match made? {
            Made::Skipped => return Ok(None),
            Made::Here(()) => false,
            Made::Replacing(()) => true,
        };
        let name = if replacing { &self.temp[..] } else { at.name };
        let path = || at.dest_path(self.shared);
        let restored = self.shared.policy.restore(
            Target::At(dir, name),
            apply,
            Xattrs::default(),
            &mut self.not_restored,
            path,
        );
        if let Err(e) = restored {
            if replacing {
                let _ = unlinkat(dir, name, AtFlags::empty());
            }
            return Err(e);
        }
        if replacing {
            replace(dir, &self.temp, at.name, path)?;
        }
        Ok(Some(replacing))
    }

    /// Creates (or merges into) the copy of the directory `name` (open as `src`, stated as
    /// `stat`) in `dest` (setgid when `in_setgid`), and returns its state; with [`Cp::delete`], first removes what the
    /// copy has and the source lacks.
    pub(super) fn enter(
        &mut self,
        dest: Option<&Arc<DestFd>>,
        in_setgid: bool,
        name: &[u8],
        src: BorrowedFd<'_>,
        stat: &Statx,
        path: &[u8],
    ) -> Result<DestDir<'a>> {
        let shared = self.shared;
        let dest_path = || shared.dest_path(path);
        let depth = match path.is_empty() {
            true => 0,
            false => 1 + path.iter().filter(|&&b| b == b'/').count(),
        };
        let leaves = self.cp().part.leaves_dir(depth);
        let entry = Entry::dir(name, Meta::of_statx(stat));
        let apply = self.apply(&entry, in_setgid);
        let (create, last_mode) = shared.policy.dir_modes(&apply);
        // The root is entered before the walk starts, and every thread of it has its fd.
        let made = |fd: OwnedFd, ino: u64| match path.is_empty() {
            true => shared
                .dest_root
                .get_or_init(|| DestFd::before_walk(fd))
                .clone(),
            false => Arc::new(DestFd::new(fd, shared.dest_root.get(), path, ino)),
        };
        let Some(dest) = dest else {
            // A dry run below a directory that does not exist yet: this one would be made too.
            self.tell(Change::Create, dest_path);
            self.count(Kind::Dir, 0);
            return Ok(DestDir {
                fd: None,
                setgid: false,
                last: None,
                shared,
                crowd: Crowd::default(),
            });
        };
        let mut created = true;
        if self.cp().dry_run {
            let fd = match openat(&**dest, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => {
                    let there = statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::INO)
                        .map_err(|e| Error::io("statx", dest_path(), e))?;
                    Some(made(fd, there.stx_ino))
                }
                Err(Errno::NOENT) => {
                    self.tell(Change::Create, dest_path);
                    None
                }
                Err(Errno::NOTDIR | Errno::LOOP) if self.cp().update => None,
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    return Err(exists(dest.as_fd(), name, dest_path()))
                }
                Err(e) => return Err(Error::io("open directory", dest_path(), e)),
            };
            self.count(Kind::Dir, 0);
            if let Some(fd) = &fd {
                self.delete_missing(src, fd, path)?;
            }
            return Ok(DestDir {
                fd,
                setgid: false,
                last: None,
                shared,
                crowd: Crowd::default(),
            });
        }
        // With --update most directories are there already: open first, create only when
        // missing (two syscalls fewer per directory).
        let existing = match self.cp().update {
            true => match openat(&**dest, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => Some(fd),
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => None,
                Err(e) => return Err(Error::io("open directory", dest_path(), e)),
            },
            false => None,
        };
        let fd = match existing {
            Some(fd) => {
                created = false;
                fd
            }
            None => {
                match mkdirat(&**dest, name, Mode::from_raw_mode(create)) {
                    Ok(()) => self.tell(Change::Create, dest_path),
                    Err(Errno::EXIST) => {
                        let there =
                            statx(&**dest, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE)
                                .map_err(|e| Error::io("statx", dest_path(), e))?;
                        if Kind::of_mode(there.stx_mode.into()) == Kind::Dir {
                            created = false;
                        } else if self.cp().update
                            || shared.policy.existing() == Existing::Overwrite
                        {
                            let mode = Mode::from_raw_mode(create);
                            replace_by_dir(dest.as_fd(), name, mode, &mut self.temp, dest_path)?;
                            self.counts.replaced += 1;
                            self.tell(Change::Replace, dest_path);
                        } else {
                            return Err(exists(dest.as_fd(), name, dest_path()));
                        }
                    }
                    Err(e) => return Err(Error::io("mkdirat", dest_path(), e)),
                }
                match openat(&**dest, name, DIR_FLAGS, Mode::empty()) {
                    Ok(fd) => fd,
                    // Swapped for something else since.
                    Err(Errno::NOTDIR | Errno::LOOP) => {
                        return Err(exists(dest.as_fd(), name, dest_path()))
                    }
                    Err(e) => return Err(Error::io("open directory", dest_path(), e)),
                }
            }
        };
        if created {
            let owner = Apply {
                owner: apply.owner,
                ..Apply::default()
            };
            let target = Target::Fd(fd.as_fd());
            (shared.policy).restore(
                target,
                &owner,
                Xattrs::default(),
                &mut self.not_restored,
                dest_path,
            )?;
        }
        let there = statx(
            &fd,
            "",
            AtFlags::EMPTY_PATH,
            StatxFlags::MODE | StatxFlags::INO,
        )
        .map_err(|e| Error::io("statx", dest_path(), e))?;
        let mode = u32::from(there.stx_mode) & 0o7777;
        // Merging into a directory that does not let its owner in: let it, for now.
        if !created && !shared.root && mode & 0o700 != 0o700 {
            fchmod(&fd, Mode::from_raw_mode(mode | 0o700))
                .map_err(|e| Error::io("fchmod", dest_path(), e))?;
        }
        if path.is_empty() {
            *shared.target.lock().expect("no panics") = Some(inode_key(&there));
        }
        let fd = made(fd, there.stx_ino);
        if leaves {
            // Counted, cleaned and given its metadata once, by `Part::Spine`.
            return Ok(DestDir {
                fd: Some(fd),
                setgid: mode & 0o2000 != 0,
                last: None,
                shared,
                crowd: Crowd::default(),
            });
        }
        self.read_xattrs(src, dest_path)?;
        self.delete_missing(src, &fd, path)?;
        self.count(Kind::Dir, 0);
        let last = Last {
            mode: match created {
                true => last_mode,
                false => Some(apply.mode & !shared.cp.umask),
            },
            apply: Apply {
                owner: apply.owner.filter(|_| !created),
                ..apply
            },
            xattrs: self.xattrs.wire.clone(),
            path: path.to_vec(),
        };
        Ok(DestDir {
            fd: Some(fd),
            setgid: mode & 0o2000 != 0,
            last: Some(last),
            shared,
            crowd: Crowd::default(),
        })
    }

    /// With [`Cp::delete`], removes the entries of the copy `dest` that its source `src`
    /// lacks (unless excluded); a dry run only tells them.
    fn delete_missing(
        &mut self,
        src: BorrowedFd<'_>,
        dest: &Arc<DestFd>,
        path: &[u8],
    ) -> Result<()> {
        if !self.cp().delete {
            return Ok(());
        }
        let dest_path = |name: &[u8]| self.shared.dest_path(&TreePath::join([path], name).0);
        let mut listing = Listing::default();
        listing
            .read(dest.as_fd(), &mut dirent_buffer())
            .map_err(|e| Error::io("getdents64", dest_path(b""), e))?;
        for i in 0..listing.len() {
            let (name, file_type) = listing.get(i);
            let below_root = || TreePath::join([path], name).0;
            let is_dir = file_type == FileType::Directory;
            if self.cp().exclude.excludes(name, below_root, is_dir) {
                continue;
            }
            match statx(src, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE) {
                Err(Errno::NOENT) => {}
                _ => continue,
            }
            if self.cp().changes {
                self.shared.report.change(Change::Delete, &dest_path(name));
            }
            if !self.cp().dry_run {
                remove(dest.as_fd(), name, || dest_path(name))?;
            }
            self.counts.deleted += 1;
        }
        Ok(())
    }
}

/// Removes the entry `name` of `dir` and everything below it.
fn remove(dir: BorrowedFd<'_>, name: &[u8], path: impl Fn() -> TreePath) -> Result<()> {
    remove_tree(dir, name, &mut dirent_buffer()).map_err(|e| Error::io("remove", path(), e))
}

impl<'a> Copier<'a> {
    /// Runs the chunk jobs the copy of a large file outside a walk (SRC itself) left, on
    /// this thread and up to `threads - 1` more.
    pub(super) fn run_chunks(mut self, threads: usize) {
        let jobs = Mutex::new(std::mem::take(&mut self.jobs));
        let work = |copier: &mut Copier<'_>| loop {
            let Some((job, _)) = jobs.lock().expect("no panics").pop() else {
                return;
            };
            // Only a walk's listing leaves files as jobs.
            let Job::Chunks(file) = job else {
                unreachable!("a file job outside a walk")
            };
            if copier.copy_chunks(&file, None) == WalkState::Quit {
                drop(file);
                jobs.lock().expect("no panics").clear();
            }
        };
        let shared = self.shared;
        let helpers = jobs
            .lock()
            .expect("no panics")
            .len()
            .min(threads)
            .saturating_sub(1);
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                let _ = spawn_elsewhere(scope, || work(&mut Copier::new(shared)));
            }
            work(&mut self);
        });
    }

    /// Copies the entry at `path` below SRC (open as `src`) into the copy (`dest`), its
    /// directories opened by name from those, never following a symlink; then gives the
    /// copy's directory the source's time again (what [`Cp::run_links`] does per name).
    pub(super) fn copy_below(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        path: &[u8],
    ) -> Result<()> {
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&path[..i], &path[i + 1..]),
            None => (&b""[..], path),
        };
        let shared = self.shared;
        let open = |root: BorrowedFd<'_>, shown: TreePath| -> Result<OwnedFd> {
            let error = |e| Error::io("open directory", shown.clone(), e);
            let mut fd = rustix::io::fcntl_dupfd_cloexec(root, 0).map_err(error)?;
            for part in dir.split(|&b| b == b'/').filter(|part| !part.is_empty()) {
                fd = openat(&fd, part, DIR_FLAGS, Mode::empty()).map_err(error)?;
            }
            Ok(fd)
        };
        let src_dir = open(src, shared.src_path(dir))?;
        let dest_dir = DestFd::before_walk(open(dest, shared.dest_path(dir))?);
        let stat = statx(&src_dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
            .map_err(|e| Error::io("statx", shared.src_path(path), e))?;
        let dir_stat = statx(&src_dir, "", AtFlags::EMPTY_PATH, STATX_MASK)
            .map_err(|e| Error::io("statx", shared.src_path(dir), e))?;
        let mode = statx(&*dest_dir, "", AtFlags::EMPTY_PATH, StatxFlags::MODE)
            .map_err(|e| Error::io("statx", shared.dest_path(dir), e))?
            .stx_mode as u32
            & 0o7777;
        // A directory finished read-only before (its source's mode) takes the name all the
        // same, as the walk's copy would have made it before finishing the directory.
        let locked = !shared.root && mode & 0o300 != 0o300;
        let chmod = |mode| {
            fchmod(&*dest_dir, Mode::from_raw_mode(mode))
                .map_err(|e| Error::io("fchmod", shared.dest_path(dir), e))
        };
        if locked {
            chmod(mode | 0o300)?;
        }
        let below = || path.to_vec();
        let at = Pair {
            src: src_dir.as_fd(),
            src_name: name,
            dest: Some(&dest_dir),
            crowd: None,
            name,
            setgid: mode & 0o2000 != 0,
            path: &below,
        };
        let copied = self.copy(&at, &stat);
        if locked {
            chmod(mode)?;
        }
        copied?;
        let time = Apply {
            mtime: Meta::of_statx(&dir_stat).mtime,
            ..Apply::default()
        };
        let target = Target::Fd(dest_dir.as_fd());
        let shown = || shared.dest_path(dir);
        (shared.policy).restore(
            target,
            &time,
            Xattrs::default(),
            &mut self.not_restored,
            shown,
        )
    }

    /// Copies the entry `name` (stated as `stat`) of `dir`, open as `fd`.
    fn copy_entry(
        &mut self,
        dir: &Dir<DestDir<'a>>,
        fd: BorrowedFd<'_>,
        name: &[u8],
        stat: &Statx,
    ) -> WalkState {
        if self.shared.cp.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        let path = || dir.relative(Some(name));
        let dest = match dir.state().fd.as_ref().map(|d| self.here(d)).transpose() {
            Ok(dest) => dest,
            Err(e) => return self.failed(e),
        };
        let at = Pair {
            src: fd,
            src_name: name,
            dest: dest.as_deref(),
            crowd: Some(&dir.state().crowd),
            name,
            setgid: dir.state().setgid,
            path: &path,
        };
        match self.copy(&at, stat) {
            Ok(()) => WalkState::Continue,
            Err(e) => self.failed(e),
        }
    }
}

impl<'a> ParallelVisitor for Copier<'a> {
    type State = DestDir<'a>;
    type Job = Job<'a>;

    fn enter_dir(
        &mut self,
        parent: &Dir<DestDir<'a>>,
        entry: &Entry<'_>,
        fd: BorrowedFd<'_>,
        stat: &Statx,
    ) -> std::result::Result<DestDir<'a>, WalkState> {
        if self.shared.cp.cancel.is_cancelled() {
            return Err(WalkState::Quit);
        }
        let path = parent.relative(Some(entry.name));
        if !self.cp().takes(|| path.clone(), parent.depth() + 1, true) {
            return Err(WalkState::Skip);
        }
        if *self.shared.target.lock().expect("no panics") == Some(inode_key(stat)) {
            let error = Error::Argument {
                arg: parent.path(Some(entry.name)).to_string(),
                problem: "is the copy itself (DEST is inside SRC); not copied into itself".into(),
            };
            return Err(match self.failed(error) {
                WalkState::Continue => WalkState::Skip,
                state => state,
            });
        }
        let dest = parent.state();
        let entered = dest
            .fd
            .as_ref()
            .map(|d| self.here(d))
            .transpose()
            .and_then(|into| {
                // Held while the copy is made (or merged into) and made ready to fill.
                let _place = self.shared.crowds.join(&dest.crowd);
                self.enter(into.as_deref(), dest.setgid, entry.name, fd, stat, &path)
            });
        match entered {
            Ok(state) => Ok(state),
            Err(e) => Err(match self.failed(e) {
                WalkState::Continue => WalkState::Skip,
                state => state,
            }),
        }
    }

    fn entry(
        &mut self,
        dir: &Dir<DestDir<'a>>,
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState {
        let path = || dir.relative(Some(entry.name));
        if !self.cp().takes(path, dir.depth() + 1, false) {
            return WalkState::Continue;
        }
        if entry.kind == Kind::File && stat.stx_size >= SPREAD && !self.cp().dry_run {
            let cost = job_cost(stat.stx_size);
            let job = Job::File {
                name: entry.name.into(),
                stat: Box::new(*stat),
            };
            self.jobs.push((job, cost));
            return WalkState::Continue;
        }
        self.copy_entry(dir, fd, entry.name, stat)
    }

    /// A copy that writes files opens them anyway; `--update` and a dry run open fewer.
    fn opens_files(&self) -> bool {
        !(self.cp().update || self.cp().dry_run)
    }

    fn opened_file(
        &mut self,
        dir: &Dir<DestDir<'a>>,
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
        file: OwnedFd,
    ) -> WalkState {
        self.opened = Some(file);
        let state = self.entry(dir, fd, entry, stat);
        // Unused where the entry was left to a job, linked or skipped.
        self.opened = None;
        state
    }

    fn will_enter(&mut self, dir: &Dir<DestDir<'a>>, subdirs: &[(&[u8], bool)]) {
        let cp = self.cp();
        if let (Some(ledger), Part::Rank { rank, ranks, split }) = (&cp.ledger, cp.part) {
            if dir.depth() + 1 == split {
                // Those taken whole: the others only lead to members, their owner's to walk.
                let parts = subdirs.iter().filter(|(_, whole)| *whole);
                let paths = parts.map(|(name, _)| dir.relative(Some(name)));
                ledger.list(paths.filter(|path| part_owner(path, ranks) == rank));
            }
        }
    }

    fn error(&mut self, error: Error) -> WalkState {
        self.failed(error)
    }

    fn unreached(&mut self, error: Error) {
        self.counts.missing += 1;
        self.shared.report.missing(error);
    }

    fn take_jobs(&mut self, jobs: &mut Vec<(Job<'a>, u64)>) {
        jobs.append(&mut self.jobs);
    }

    fn run(&mut self, dir: &Dir<DestDir<'a>>, fd: BorrowedFd<'_>, job: Job<'a>) -> WalkState {
        match job {
            Job::File { name, stat } => self.copy_entry(dir, fd, &name, &stat),
            Job::Chunks(file) => self.copy_chunks(&file, Some(fd)),
        }
    }
}
