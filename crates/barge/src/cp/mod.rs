//! `barge cp`: a tree copied with no archive in between. The parallel walker
//! ([`WalkParallel`]) lists SRC on every core and drives a landing visitor per thread
//! (`Copier`) whose per-directory state is the copy of that directory (`DestDir`): each
//! entry is stated and opened relative to its directory's fd in SRC and created relative to
//! the copy's fd in DEST, by its single-component name, never following a symlink; file
//! content moves inside the kernel (`FICLONE` where the filesystem shares extents, else
//! `copy_file_range`, holes kept with `SEEK_DATA`/`SEEK_HOLE`).
//!
//! What is restored is the landers' one policy (`land/restore.rs`); existing entries are
//! kept, skipped or replaced by rename as unpack does (`land::sync::create_at`), and with
//! [`Cp::update`] an entry that `compare.rs`'s unchanged rule finds as DEST has it (type,
//! size, mtime, all twelve permission bits; owner too, as root with `-a`) is left alone. A file's
//! time is set last, after its content, so a copy cut short is seen as different by the
//! next `--update`. A directory gets its mode, extended attributes and time when the walker
//! drops its state, which is after everything below it (its subdirectories hold it).
//!
//! Small files go by `copy_file_range` too: one path for every size, since `read` + `write`
//! cost no less per small file on tmpfs (docs/BENCHMARKS.md, "Design measurements"). A file costs the walker's `statx` + `openat` + `openat(O_EXCL)` + the copy +
//! `futimens` + two `close`s, and `-a` adds `flistxattr` (and `fchown` where creating the
//! copy does not give it its owner already): 7 and 8 calls, where GNU `cp -a` makes 17.

mod dest;

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rustix::fs::{
    fchmod, ftruncate, ioctl_ficlone, linkat, makedev, mkdirat, mknodat, openat, readlinkat, seek,
    statx, symlinkat, unlinkat, AtFlags, FileType, Mode, OFlags, SeekFrom, Statx, StatxFlags, CWD,
};
use rustix::io::{pwrite, Errno};

pub use crate::compare::Verified;
pub use dest::targets;

use crate::compare::{inode_key, Compare, Facts, Rule, STATX_MASK};
use crate::copy::{copy_range, read_chunks};
use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::interrupt::{retry, Cancel};
use crate::land::restore::{Apply, Existing, NotRestored, Policy, Restore, Target};
use crate::land::sync::{create_at, exists, replace, replace_by_dir, LinkTarget, Made};
use crate::sys::dir::{dirent_buffer, remove_tree, Listing};
use crate::sys::{CREATE_FLAGS, DIR_FLAGS, FILE_FLAGS};
use crate::threads::Work;
use crate::tree::{Entry, Kind, Meta, Owner, XattrReader, Xattrs};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};
use crate::Progress;

/// The buffer of a copy through memory.
const BUFFER: usize = 1 << 20;

/// Whether a copy's files may share their data extents with the source's (GNU cp's
/// `--reflink`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Reflink {
    /// Share where the filesystem can (`FICLONE`), else copy (`copy_file_range`, which
    /// some filesystems also turn into shared extents).
    #[default]
    Auto,
    /// Share, or fail the file.
    Always,
    /// Never share: every byte is copied (`sendfile`).
    Never,
}

/// What a copy did, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpCounts {
    /// Directories created (or merged into).
    pub dirs: u64,
    /// Regular files copied.
    pub files: u64,
    /// Bytes of file content copied.
    pub bytes: u64,
    /// Symlinks copied.
    pub symlinks: u64,
    /// Hard links made (later names of a file copied once).
    pub hard_links: u64,
    /// Fifos, sockets and devices created.
    pub specials: u64,
    /// Entries left as they were because DEST had them already ([`Cp::update`]).
    pub up_to_date: u64,
    /// Existing entries left alone ([`Existing::Skip`]).
    pub kept: u64,
    /// Existing entries replaced.
    pub replaced: u64,
    /// Entries of DEST removed because SRC lacks them ([`Cp::delete`]).
    pub deleted: u64,
    /// Devices not copied because [`Cp::archive`] was not asked for.
    pub left_out: u64,
    /// Entries that could not be copied (each reported to [`CpReport::error`]).
    pub errors: u64,
}

impl CpCounts {
    fn add(&mut self, other: &CpCounts) {
        self.dirs += other.dirs;
        self.files += other.files;
        self.bytes += other.bytes;
        self.symlinks += other.symlinks;
        self.hard_links += other.hard_links;
        self.specials += other.specials;
        self.up_to_date += other.up_to_date;
        self.kept += other.kept;
        self.replaced += other.replaced;
        self.deleted += other.deleted;
        self.left_out += other.left_out;
        self.errors += other.errors;
    }
}

/// What a copy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CpSummary {
    /// Entries by what was done to them.
    #[serde(flatten)]
    pub counts: CpCounts,
    /// What the process could not restore.
    pub not_restored: NotRestored,
    /// The copy stopped early: DEST could take no more (full, over quota, read-only).
    pub stopped: bool,
}

impl CpSummary {
    /// Adds what `other` did (the copy of another SRC).
    pub fn add(&mut self, other: &CpSummary) {
        self.counts.add(&other.counts);
        self.not_restored.add(&other.not_restored);
        self.stopped |= other.stopped;
    }
}

/// What is done to an entry, as told to [`CpReport::change`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Copied to a name DEST did not have.
    Create,
    /// Copied over an entry DEST had (by rename).
    Replace,
    /// Removed from DEST ([`Cp::delete`]).
    Delete,
}

/// How a copy tells its caller what happens while it runs (the library never prints);
/// called from any walking thread.
pub trait CpReport: Sync {
    /// An entry that could not be copied; the copy goes on.
    fn error(&self, error: Error);

    /// A change to DEST, told only when [`Cp::changes`] asks for them (a dry run's listing);
    /// `path` is the entry's path in DEST.
    fn change(&self, _change: Change, _path: &TreePath) {}
}

/// The copies of files with several links that [`Cp::run_linked`] made, by the source's
/// device and inode: the directory each was created in (held open until this is dropped)
/// and its name, for later names of the file to link to.
#[derive(Debug, Default)]
pub struct Linked(Mutex<HashMap<(u64, u64), LinkTarget>>);

/// A copy of trees (`barge cp`): its options, then [`Cp::run`] per SRC.
#[derive(Clone, Debug)]
pub struct Cp {
    archive: bool,
    restore: Restore,
    update: bool,
    delete: bool,
    dry_run: bool,
    changes: bool,
    reflink: Reflink,
    exclude: Exclude,
    threads: usize,
    cancel: Cancel,
    /// The umask copies are created under.
    umask: u32,
}

impl Default for Cp {
    /// Modes, times, symlinks, hard links, fifos and sockets; existing entries are errors;
    /// at most [`Work::Walk`] threads.
    fn default() -> Cp {
        Cp {
            archive: false,
            restore: Restore::default(),
            update: false,
            delete: false,
            dry_run: false,
            changes: false,
            reflink: Reflink::Auto,
            exclude: Exclude::default(),
            threads: Work::Walk.threads(),
            cancel: Cancel::new(),
            umask: crate::root::process_umask(),
        }
    }
}

impl Cp {
    /// A copy with the defaults (see [`Cp::default`]).
    pub fn new() -> Cp {
        Cp::default()
    }

    /// Also copies owners, extended attributes (ACLs too) and devices, as far as the
    /// process may (`cp -a`).
    pub fn archive(mut self, yes: bool) -> Cp {
        self.archive = yes;
        self
    }

    /// Restores metadata and treats existing entries as `restore` says (its `setid` is
    /// ignored: a copy keeps setuid and setgid bits where it keeps the ids they grant).
    pub fn restore(mut self, restore: Restore) -> Cp {
        self.restore = restore;
        self
    }

    /// Copies only entries whose type, size, mtime or permission bits (all twelve; as root
    /// with [`Cp::archive`], owner) differ from DEST's, replacing those
    /// by rename.
    pub fn update(mut self, yes: bool) -> Cp {
        self.update = yes;
        self
    }

    /// With [`Cp::update`], removes what DEST has and SRC lacks (not what is excluded).
    pub fn delete(mut self, yes: bool) -> Cp {
        self.delete = yes;
        self
    }

    /// Changes nothing: decides and counts what it would do.
    pub fn dry_run(mut self, yes: bool) -> Cp {
        self.dry_run = yes;
        self
    }

    /// Tells every change to [`CpReport::change`].
    pub fn changes(mut self, yes: bool) -> Cp {
        self.changes = yes;
        self
    }

    /// Shares file extents as `reflink` says.
    pub fn reflink(mut self, reflink: Reflink) -> Cp {
        self.reflink = reflink;
        self
    }

    /// Leaves out what `exclude` matches below SRC (and keeps it in DEST with
    /// [`Cp::delete`]).
    pub fn exclude(mut self, exclude: Exclude) -> Cp {
        self.exclude = exclude;
        self
    }

    /// Creates copies under `umask`, the process's umask (the default: the process's when
    /// the copy is made); the modes it sets itself are masked alike (see `Unpack::umask`).
    pub fn umask(mut self, umask: u32) -> Cp {
        self.umask = umask;
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels).
    pub fn cancel(mut self, cancel: Cancel) -> Cp {
        self.cancel = cancel;
        self
    }

    /// Uses at most `threads` threads (see [`WalkParallel::threads`]).
    pub fn threads(mut self, threads: usize) -> Cp {
        self.threads = threads;
        self
    }

    /// Copies `src` (a directory and everything below it, or any other entry, never
    /// followed) as `dest`: created, or merged into when it is a directory. Fails only
    /// when `src` or `dest`'s directory cannot be reached or `dest` is `src` or inside it;
    /// problems with entries go to `report` and are counted in the summary.
    pub fn run(
        &self,
        src: &Path,
        dest: &Path,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<CpSummary> {
        self.run_linked(src, dest, &Linked::default(), progress, report)
    }

    /// [`Cp::run`], with the files of several links copied so far in `linked`: a name of
    /// one of them in `src` becomes a hard link to its copy, as `cp -a A B DEST` keeps the
    /// links between A and B (the copies must be on one filesystem).
    pub fn run_linked(
        &self,
        src: &Path,
        dest: &Path,
        linked: &Linked,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<CpSummary> {
        let src_name = src.as_os_str().as_bytes();
        let dest_name = dest.as_os_str().as_bytes();
        let stat = statx(CWD, src, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
            .map_err(|e| Error::io("statx", TreePath(src_name.to_vec()), e))?;
        let (parent, name) = split(dest)?;
        let parent = open_parent(parent, dest_name)?;
        // `cp DIR/sub DIR`, `cp f f`: a copy onto itself would rewrite its source.
        let there = statx(&parent, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::INO);
        if there.is_ok_and(|there| inode_key(&there) == inode_key(&stat)) {
            return Err(Error::Argument {
                arg: dest.display().to_string(),
                problem: format!("is {} itself: nothing to copy", src.display()),
            });
        }
        let is_dir = Kind::of_mode(stat.stx_mode.into()) == Kind::Dir;
        if is_dir {
            refuse_inside(&stat, parent.as_fd(), src, dest)?;
        }
        let me = Owner::of_process();
        // Without `-a` a copy gives nothing away; with it, as far as the process may.
        let same_owner = match self.archive {
            true => self.restore.same_owner,
            false => Some(false),
        };
        let shared = Shared {
            cp: self,
            policy: Policy::new(
                self.restore.setid(true).same_owner(same_owner),
                me,
                self.umask,
            ),
            root: me.uid == 0,
            me,
            report,
            progress,
            src: src_name.to_vec(),
            dest: dest_name.to_vec(),
            links: &linked.0,
            no_clone: AtomicBool::new(self.reflink == Reflink::Never),
            no_range: AtomicBool::new(self.reflink == Reflink::Never),
            target: Mutex::new(None),
            summary: Mutex::default(),
        };
        let mut copier = Copier::new(&shared);
        let parent = Arc::new(parent);
        let in_setgid = statx(&*parent, "", AtFlags::EMPTY_PATH, StatxFlags::MODE)
            .is_ok_and(|st| st.stx_mode & 0o2000 != 0);
        if is_dir {
            let fd = openat(CWD, src, DIR_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open directory", TreePath(src_name.to_vec()), e))?;
            let root = copier.enter(Some(&parent), in_setgid, name, fd.as_fd(), &stat, b"")?;
            drop(copier);
            WalkParallel::new(fd, src_name)
                .threads(self.threads)
                .exclude(self.exclude.clone())
                .visit(&mut Builder(&shared), root);
        } else {
            let (src_dir, src_entry) = split(src)?;
            let src_dir = open_parent(src_dir, src_name)?;
            let at = Pair {
                src: src_dir.as_fd(),
                src_name: src_entry,
                dest: Some(&parent),
                name,
                setgid: in_setgid,
                path: &Vec::new,
            };
            copier.copy(&at, &stat)?;
            drop(copier);
        }
        self.cancel.check()?;
        Ok(shared.summary.into_inner().expect("no panics"))
    }

    /// Reads back every regular file of the copy of `src` at `dest` and compares it with
    /// its source, byte for byte; a difference or a missing file goes to `report`.
    pub fn verify(&self, src: &Path, dest: &Path, report: &dyn CpReport) -> Result<Verified> {
        Compare::new()
            .threads(self.threads)
            .exclude(self.exclude.clone())
            .cancel(self.cancel.clone())
            .run(src, dest, &|e| report.error(e))
    }
}

/// The directory part of `path` and its last component (`.` and `..` have none).
pub(crate) fn split(path: &Path) -> Result<(&Path, &[u8])> {
    let name = path.file_name().ok_or_else(|| Error::Argument {
        arg: path.display().to_string(),
        problem: "names no entry (a copy needs a last path component)".into(),
    })?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, name.as_bytes()))
}

/// Opens the directory `dir` that holds SRC or DEST (`path` in errors), following symlinks:
/// it is above the roots, as the user named it.
pub(crate) fn open_parent(dir: &Path, path: &[u8]) -> Result<OwnedFd> {
    let flags = OFlags::DIRECTORY | OFlags::CLOEXEC;
    openat(CWD, dir, flags, Mode::empty())
        .map_err(|e| Error::io("open directory", TreePath(path.to_vec()), e))
}

/// Refuses a copy of the directory `src` (stated as `stat`) into `parent` or any directory
/// below it: climbs from `parent` by `..` to the root, comparing device and inode.
fn refuse_inside(stat: &Statx, parent: BorrowedFd<'_>, src: &Path, dest: &Path) -> Result<()> {
    let id = inode_key(stat);
    let mut dir = rustix::io::dup(parent).map_err(|e| Error::io("dup", TreePath::default(), e))?;
    loop {
        let here = statx(&dir, "", AtFlags::EMPTY_PATH, StatxFlags::INO)
            .map_err(|e| Error::io("statx", TreePath(dest.as_os_str().as_bytes().into()), e))?;
        if inode_key(&here) == id {
            return Err(Error::Argument {
                arg: dest.display().to_string(),
                problem: format!(
                    "is inside {}: a directory cannot be copied into itself",
                    src.display()
                ),
            });
        }
        let up = openat(&dir, "..", DIR_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open directory", TreePath(b"..".to_vec()), e))?;
        let above = statx(&up, "", AtFlags::EMPTY_PATH, StatxFlags::INO)
            .map_err(|e| Error::io("statx", TreePath(b"..".to_vec()), e))?;
        if inode_key(&above) == inode_key(&here) {
            return Ok(());
        }
        dir = up;
    }
}

/// What the threads of one [`Cp::run`] share.
struct Shared<'a> {
    cp: &'a Cp,
    policy: Policy,
    root: bool,
    /// The effective user and group.
    me: Owner,
    report: &'a dyn CpReport,
    progress: &'a Progress,
    /// SRC and DEST as given, for paths in messages.
    src: Vec<u8>,
    dest: Vec<u8>,
    /// The copies of multi-link files (see [`Linked`]).
    links: &'a Mutex<HashMap<(u64, u64), LinkTarget>>,
    /// `FICLONE` failed as unsupported (or `--reflink=never`): not tried again.
    no_clone: AtomicBool,
    /// `copy_file_range` failed as unsupported (or `--reflink=never`): not tried again.
    no_range: AtomicBool,
    /// The device and inode of the copy's root directory, which the walk never enters.
    target: Mutex<Option<(u64, u64)>>,
    summary: Mutex<CpSummary>,
}

impl Shared<'_> {
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

struct Builder<'a>(&'a Shared<'a>);

impl<'a> ParallelVisitorBuilder for Builder<'a> {
    type Visitor = Copier<'a>;

    fn build(&mut self) -> Copier<'a> {
        Copier::new(self.0)
    }
}

/// Where an entry is copied from and to.
struct Pair<'p> {
    /// Its directory in SRC.
    src: BorrowedFd<'p>,
    src_name: &'p [u8],
    /// The copy of that directory (`None` in a dry run where it does not exist yet).
    dest: Option<&'p Arc<OwnedFd>>,
    /// Its name in DEST.
    name: &'p [u8],
    /// The copy of its directory is setgid.
    setgid: bool,
    /// Its path below the copy's root (empty for the root), made only for messages.
    path: &'p dyn Fn() -> Vec<u8>,
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
struct DestDir<'a> {
    fd: Option<Arc<OwnedFd>>,
    /// The copy is setgid: what is created in it gets its group, not the process's.
    setgid: bool,
    last: Option<Last>,
    shared: &'a Shared<'a>,
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
    /// one `statx` then saves a `fchmod` and a `utimensat`). An error says no: the
    /// restore that follows names it.
    fn settled(&self, fd: &OwnedFd) -> bool {
        if !self.xattrs.is_empty() {
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
        let (Some(fd), Some(last)) = (&self.fd, self.last.take()) else {
            return;
        };
        let shared = self.shared;
        if shared.cp.update && last.settled(fd) {
            return;
        }
        let mut skipped = NotRestored::default();
        let path = || shared.dest_path(&last.path);
        let policy = &shared.policy;
        let owner = Apply {
            owner: last.apply.owner,
            ..Apply::default()
        };
        let done = policy
            .restore(
                Target::Fd(fd.as_fd()),
                &owner,
                Xattrs::default(),
                &mut skipped,
                path,
            )
            .and_then(|()| match last.mode {
                Some(mode) => fchmod(&**fd, Mode::from_raw_mode(mode))
                    .map_err(|e| Error::io("fchmod", path(), e)),
                None => Ok(()),
            })
            .and_then(|()| {
                let time = Apply {
                    mtime: last.apply.mtime,
                    ..Apply::default()
                };
                let xattrs = Xattrs(&last.xattrs);
                policy.restore(Target::Fd(fd.as_fd()), &time, xattrs, &mut skipped, path)
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
struct Copier<'a> {
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
    fn new(shared: &'a Shared<'a>) -> Copier<'a> {
        Copier {
            shared,
            counts: CpCounts::default(),
            not_restored: NotRestored::default(),
            xattrs: XattrReader::default(),
            temp: Vec::new(),
            target: Vec::new(),
            buf: Vec::new(),
        }
    }

    fn cp(&self) -> &'a Cp {
        self.shared.cp
    }

    /// Counts and reports an entry not copied; stops the walk when a stop was requested.
    /// Stops the copy when DEST can take no more (no entry after it could be copied, and
    /// each would say so), or a stop was requested.
    fn failed(&mut self, error: Error) -> WalkState {
        let full = [Errno::NOSPC, Errno::DQUOT, Errno::ROFS].map(|e| e.raw_os_error());
        let dest_full = matches!(&error, Error::Io { cause, .. }
            if cause.raw_os_error().is_some_and(|e| full.contains(&e)));
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
        if self.cp().changes {
            self.shared
                .report
                .change(change, &at.dest_path(self.shared));
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
        if self.cp().archive {
            self.xattrs
                .read(fd)
                .map_err(|e| Error::io("flistxattr", path(), e))?;
        }
        Ok(())
    }

    /// What DEST has at `at.name`, compared with the source `stat` of kind `kind`.
    fn found(&self, at: &Pair<'_>, stat: &Statx, kind: Kind) -> Result<Found> {
        let Some(dest) = at.dest else {
            return Ok(Found::Nothing);
        };
        match statx(&**dest, at.name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK) {
            Ok(there) => {
                let there_kind = Kind::of_mode(there.stx_mode.into());
                let rule = Rule {
                    owners: self.cp().archive && self.shared.root,
                };
                let same = rule.unchanged(&Facts::of_statx(stat), &Facts::of_statx(&there));
                Ok(if there_kind == Kind::Dir && kind != Kind::Dir {
                    Found::Dir
                } else if same {
                    Found::Same
                } else {
                    Found::Other
                })
            }
            Err(Errno::NOENT) => Ok(Found::Nothing),
            Err(e) => Err(Error::io("statx", at.dest_path(self.shared), e)),
        }
    }

    /// Copies the non-directory `at` (stated as `stat`).
    fn copy(&mut self, at: &Pair<'_>, stat: &Statx) -> Result<()> {
        let kind = Kind::of_mode(stat.stx_mode.into());
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
                    self.counts.up_to_date += 1;
                    let size = if kind == Kind::File { stat.stx_size } else { 0 };
                    self.shared.progress.add_entry(size);
                    if stat.stx_nlink > 1 && kind == Kind::File {
                        if let Some(dest) = at.dest {
                            self.note_link(stat, dest, at.name);
                        }
                    }
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
        let replaced = match kind {
            Kind::File => self.copy_file(at, dest, stat, &apply, existing)?,
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
        dest: &Arc<OwnedFd>,
        apply: &Apply,
        existing: Existing,
        op: &'static str,
        make: impl FnMut(BorrowedFd<'_>, &[u8]) -> rustix::io::Result<()>,
    ) -> Result<Option<bool>> {
        let dir = dest.as_fd();
        let path = || at.dest_path(self.shared);
        let replacing = match create_at(dir, at.name, existing, &mut self.temp, op, path, make)? {
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

    /// Notes the copy of a multi-link file, for its later names to link to.
    fn note_link(&self, stat: &Statx, dest: &Arc<OwnedFd>, name: &[u8]) {
        let mut links = self.shared.links.lock().expect("no panics");
        links
            .entry(inode_key(stat))
            .or_insert((dest.clone(), name.into()));
    }

    /// Copies the regular file `at`, or links to the copy of an earlier name of it; `None`
    /// when it existed and was skipped, else whether it replaced an entry.
    fn copy_file(
        &mut self,
        at: &Pair<'_>,
        dest: &Arc<OwnedFd>,
        stat: &Statx,
        apply: &Apply,
        existing: Existing,
    ) -> Result<Option<bool>> {
        // The links stay locked while a multi-link file is created and filled, so that no
        // other name of it links to a name not yet (or no longer) its.
        let shared = self.shared;
        let links = (stat.stx_nlink > 1).then(|| shared.links.lock().expect("no panics"));
        if let Some(earlier) = links
            .as_ref()
            .and_then(|links| links.get(&inode_key(stat)).cloned())
        {
            drop(links);
            let (dir, name) = earlier;
            let link = |at: BorrowedFd<'_>, new: &[u8]| {
                linkat(&*dir, &name[..], at, new, AtFlags::empty())
            };
            let made = self.make(at, dest, &Apply::default(), existing, "linkat", link)?;
            self.counts.hard_links += u64::from(made.is_some());
            return Ok(made);
        }
        let src_path = || at.src_path(shared);
        let src = openat(at.src, at.src_name, FILE_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open", src_path(), e))?;
        let mode = Mode::from_raw_mode(apply.create_mode());
        let path = || at.dest_path(shared);
        let made = create_at(
            dest.as_fd(),
            at.name,
            existing,
            &mut self.temp,
            "openat",
            path,
            |d, n| openat(d, n, CREATE_FLAGS, mode),
        )?;
        let (fd, replacing) = match made {
            Made::Here(fd) => (fd, false),
            Made::Replacing(fd) => (fd, true),
            Made::Skipped => return Ok(None),
        };
        let mut copied = 0;
        let done = self
            .copy_content(src.as_fd(), fd.as_fd(), stat, &path)
            .and_then(|bytes| {
                copied = bytes;
                self.read_xattrs(src.as_fd(), path)
            });
        let done = done.and_then(|()| {
            let xattrs = Xattrs(&self.xattrs.wire);
            let target = Target::Fd(fd.as_fd());
            (self.shared.policy).restore(target, apply, xattrs, &mut self.not_restored, path)
        });
        if let Err(e) = done {
            // No copy that is not whole stays (a replacement leaves the old file in
            // place); one cut short by a kill has no time yet, for `--update` to see.
            let name = if replacing { &self.temp[..] } else { at.name };
            let _ = unlinkat(dest.as_fd(), name, AtFlags::empty());
            return Err(e);
        }
        if replacing {
            replace(dest.as_fd(), &self.temp, at.name, path)?;
        }
        if let Some(mut links) = links {
            links.insert(inode_key(stat), (dest.clone(), at.name.into()));
        }
        self.counts.files += 1;
        self.counts.bytes += copied;
        self.shared.progress.add_entry(0);
        Ok(Some(replacing))
    }

    /// Copies the content of `src` into the new file `dest`: shared extents where the
    /// filesystem can and may ([`Reflink`]), else the data ranges (holes stay holes); a
    /// file of size 0 is read to its end (a kernel file in /proc or /sys has content
    /// nonetheless). Returns the bytes copied.
    fn copy_content(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        stat: &Statx,
        path: &dyn Fn() -> TreePath,
    ) -> Result<u64> {
        let size = stat.stx_size;
        if size == 0 {
            return self.through_memory(src, dest, 0, u64::MAX, path);
        }
        let always = self.cp().reflink == Reflink::Always;
        if !self.shared.no_clone.load(Relaxed) {
            match ioctl_ficlone(dest, src) {
                Ok(()) => {
                    self.shared.progress.add_bytes(size);
                    return Ok(size);
                }
                Err(e) if always => return Err(Error::io("share extents (FICLONE)", path(), e)),
                Err(_) => self.shared.no_clone.store(true, Relaxed),
            }
        } else if always {
            let e = Errno::OPNOTSUPP;
            return Err(Error::io("share extents (FICLONE)", path(), e));
        }
        // Fewer allocated blocks than the size needs: it has holes.
        if stat.stx_blocks.saturating_mul(512) >= size {
            return self.copy_range(src, dest, 0, size, path).map(|()| size);
        }
        let mut at = 0;
        while at < size {
            let data = match seek(src, SeekFrom::Data(at)) {
                Ok(data) => data,
                Err(Errno::NXIO) => break,
                Err(e) => return Err(Error::io("lseek", path(), e)),
            };
            let hole =
                seek(src, SeekFrom::Hole(data)).map_err(|e| Error::io("lseek", path(), e))?;
            self.copy_range(src, dest, data, hole.min(size), path)?;
            at = hole;
        }
        ftruncate(dest, size).map_err(|e| Error::io("ftruncate", path(), e))?;
        Ok(size)
    }

    /// Copies the bytes `start..end` of `src` to the same offsets of `dest` with
    /// `copy_file_range`, or by `pread` + `pwrite` where the kernel refuses it (between
    /// filesystems) or `--reflink=never` forbids sharing.
    fn copy_range(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        start: u64,
        end: u64,
        path: &dyn Fn() -> TreePath,
    ) -> Result<()> {
        let mut copied = 0;
        if !self.shared.no_range.load(Relaxed) {
            let progress = self.shared.progress;
            let len = end - start;
            let cancel = &self.shared.cp.cancel;
            let ranged = copy_range((src, start), (dest, Some(start)), len, path, cancel, |n| {
                progress.add_bytes(n)
            })?;
            if !ranged.refused {
                // All of it, or the file shrank since it was stated.
                return Ok(());
            }
            self.shared.no_range.store(true, Relaxed);
            copied = ranged.copied;
        }
        self.through_memory(src, dest, start + copied, end - start - copied, path)?;
        Ok(())
    }

    fn through_memory(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        from: u64,
        len: u64,
        path: &dyn Fn() -> TreePath,
    ) -> Result<u64> {
        if self.buf.is_empty() {
            self.buf = vec![0; BUFFER];
        }
        let (progress, mut to) = (self.shared.progress, from);
        let cancel = &self.shared.cp.cancel;
        read_chunks(src, from, len, &mut self.buf, &path(), cancel, |chunk| {
            let mut rest = chunk;
            while !rest.is_empty() {
                let n = retry(cancel, || pwrite(dest, rest, to))
                    .map_err(|e| Error::io("write", path(), e))?;
                rest = &rest[n..];
                to += n as u64;
            }
            progress.add_bytes(chunk.len() as u64);
            cancel.check()
        })
    }

    /// Creates (or merges into) the copy of the directory `name` (open as `src`, stated as
    /// `stat`) in `dest` (setgid when `in_setgid`), and returns its state; with [`Cp::delete`], first removes what the
    /// copy has and the source lacks.
    fn enter(
        &mut self,
        dest: Option<&Arc<OwnedFd>>,
        in_setgid: bool,
        name: &[u8],
        src: BorrowedFd<'_>,
        stat: &Statx,
        path: &[u8],
    ) -> Result<DestDir<'a>> {
        let shared = self.shared;
        let dest_path = || shared.dest_path(path);
        let entry = Entry::dir(name, Meta::of_statx(stat));
        let apply = self.apply(&entry, in_setgid);
        let (create, last_mode) = shared.policy.dir_modes(&apply);
        let Some(dest) = dest else {
            // A dry run below a directory that does not exist yet.
            self.count(Kind::Dir, 0);
            return Ok(DestDir {
                fd: None,
                setgid: false,
                last: None,
                shared,
            });
        };
        let mut created = true;
        if self.cp().dry_run {
            let fd = match openat(&**dest, name, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => Some(Arc::new(fd)),
                Err(Errno::NOENT) => {
                    if self.cp().changes {
                        shared.report.change(Change::Create, &dest_path());
                    }
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
                    Ok(()) => {}
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
        self.read_xattrs(src, dest_path)?;
        let fd = Arc::new(fd);
        self.delete_missing(src, &fd, path)?;
        self.count(Kind::Dir, 0);
        if path.is_empty() {
            *shared.target.lock().expect("no panics") = Some(inode_key(&there));
        }
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
        })
    }

    /// With [`Cp::delete`], removes the entries of the copy `dest` that its source `src`
    /// lacks (unless excluded); a dry run only tells them.
    fn delete_missing(
        &mut self,
        src: BorrowedFd<'_>,
        dest: &Arc<OwnedFd>,
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

impl<'a> ParallelVisitor for Copier<'a> {
    type State = DestDir<'a>;

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
        match self.enter(dest.fd.as_ref(), dest.setgid, entry.name, fd, stat, &path) {
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
        if self.shared.cp.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        let path = || dir.relative(Some(entry.name));
        let at = Pair {
            src: fd,
            src_name: entry.name,
            dest: dir.state().fd.as_ref(),
            name: entry.name,
            setgid: dir.state().setgid,
            path: &path,
        };
        match self.copy(&at, stat) {
            Ok(()) => WalkState::Continue,
            Err(e) => self.failed(e),
        }
    }

    fn error(&mut self, error: Error) -> WalkState {
        self.failed(error)
    }
}
