//! `barge cp`: a tree copied with no archive in between (the visitor in `copier.rs`, a
//! file's content in `copier/content.rs`). The parallel walker
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
//! size, mtime, all twelve permission bits less the umask; owner as root, extended
//! attributes (a directory's too), which names share a file; with [`Cp::checksum`] content) is left alone. A file's time is set last, after its content, so a copy cut short is seen as
//! different by the next `--update`. A directory gets its mode, extended attributes and time when the walker
//! drops its state, which is after everything below it (its subdirectories hold it).
//!
//! Small files go by `copy_file_range` too: one path for every size, since `read` + `write`
//! cost no less per small file on tmpfs (docs/BENCHMARKS.md, "Design measurements"). A file costs the walker's `statx` + `openat` + `openat(O_EXCL)` + the copy +
//! `futimens` + two `close`s, and [`Cp::archive`] adds `flistxattr` (and `fchown` where
//! creating the copy does not give it its owner already): 7 and 8 calls, where GNU `cp -a`
//! makes 17.

mod copier;
mod dest;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};

use rustix::fs::{openat, statx, AtFlags, Mode, Statx, StatxFlags, CWD};
use twox_hash::XxHash3_64;

pub use crate::compare::Verified;
pub use copier::wide::{WIDE, WIDE_CHUNK};
pub use dest::targets;

use crate::compare::{inode_key, Compare};
use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::interrupt::Cancel;
use crate::land::restore::{NotRestored, Policy, Restore};
use crate::root::{open_parent, split};
use crate::share::{place, Place};
use crate::sys::{DIR_FLAGS, DIR_HANDLE_FLAGS};
use crate::threads::{Crowds, Work};
use crate::tree::{Kind, Owner, STATX_MASK};
use crate::walk::parallel::{WalkParallel, WalkState};
use crate::walk::Members;
use crate::Progress;
use copier::{Builder, Copier, DestFd, Pair, Shared};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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
    pub unchanged: u64,
    /// Existing entries left alone ([`Existing::Skip`](crate::land::restore::Existing::Skip)).
    pub kept: u64,
    /// Existing entries replaced.
    pub replaced: u64,
    /// Entries of DEST removed because SRC lacks them ([`Cp::delete`]).
    pub deleted: u64,
    /// Devices not copied because [`Cp::archive`] was not asked for.
    pub left_out: u64,
    /// Entries that could not be copied (each reported to [`CpReport::error`]).
    pub errors: u64,
    /// Members ([`Cp::members`]) not found in SRC (each reported to [`CpReport::missing`]).
    pub missing: u64,
}

impl CpCounts {
    fn add(&mut self, other: &CpCounts) {
        self.dirs += other.dirs;
        self.files += other.files;
        self.bytes += other.bytes;
        self.symlinks += other.symlinks;
        self.hard_links += other.hard_links;
        self.specials += other.specials;
        self.unchanged += other.unchanged;
        self.kept += other.kept;
        self.replaced += other.replaced;
        self.deleted += other.deleted;
        self.left_out += other.left_out;
        self.errors += other.errors;
        self.missing += other.missing;
    }
}

/// What a copy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
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

    /// A member ([`Cp::members`]) SRC lacks (or that is behind a symlink), and why; the copy
    /// goes on. By default an error.
    fn missing(&self, error: Error) {
        self.error(error);
    }
}

/// The copies of files with several links that [`Cp::run_linked`] made, by the source's
/// device and inode: the directory each was created in (held open until this is dropped)
/// and its name, for later names of the file to link to. With [`Part::Rank`], the names of
/// such files left to [`Cp::run_links`] instead.
#[derive(Debug, Default)]
pub struct Linked {
    copies: Mutex<HashMap<(u64, u64), copier::CopyLink>>,
    deferred: Mutex<Vec<Deferred>>,
    wide: Mutex<Vec<Wide>>,
}

/// A name of a file of several links left by [`Part::Rank`]: the source's device (0: SRC's)
/// and inode, and the name's path below SRC.
pub type Deferred = ((u64, u64), Vec<u8>);

/// A large file left by [`Part::Rank`] to all the processes ([`Cp::make_wide`]): its path
/// below SRC and its size.
pub type Wide = (Vec<u8>, u64);

impl Linked {
    /// The names [`Part::Rank`] left to [`Cp::run_links`] so far.
    pub fn take_deferred(&self) -> Vec<Deferred> {
        std::mem::take(&mut self.deferred.lock().expect("no panics"))
    }

    /// The large files [`Part::Rank`] left to a wide copy so far.
    pub fn take_wide(&self) -> Vec<Wide> {
        std::mem::take(&mut self.wide.lock().expect("no panics"))
    }
}

/// Which part of a copy this process makes, when the processes of a job (the ranks of an MPI
/// job) share one: each takes the entries `split` levels down or higher whose path hashes
/// to it, with everything below them (`split` from [`crate::share::split_depth`], the same
/// on every process).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Part {
    /// All of it (one process).
    #[default]
    Whole,
    /// The share of process `rank` of `ranks`: the directories above the shares are created
    /// (or merged into) but get their metadata from [`Part::Spine`]; the names of files of
    /// several links are left, in [`Linked`], to [`Cp::run_links`] on the process that
    /// [`link_owner`] names.
    Rank {
        /// This process, from 0.
        rank: u32,
        /// How many share the copy.
        ranks: u32,
        /// The depth the tree is split at.
        split: usize,
    },
    /// Only the directories above the shares of a tree split at depth `split`, with their
    /// metadata (and what [`Cp::delete`] removes in them): made once, after every share and
    /// link.
    Spine {
        /// The depth the tree is split at.
        split: usize,
    },
}

/// Which of `ranks` processes owns the part at `path` below SRC ([`Part::Rank`]).
pub fn part_owner(path: &[u8], ranks: u32) -> u32 {
    (XxHash3_64::oneshot(path) % u64::from(ranks)) as u32
}

/// The part directories of a shared copy ([`Part::Rank`] with [`Cp::ledger`]) this process
/// owns, has listed and has not begun, which it may give to a process whose own are done
/// (work stealing), and those it was given: each part is begun by one process, its owner
/// or the one it was given to.
#[derive(Debug, Default)]
pub struct Ledger(Mutex<LedgerParts>);

#[derive(Debug, Default)]
struct LedgerParts {
    /// Listed and not begun: by path, and by when they were listed (the walk begins the
    /// last listed first, so the first are given).
    pending: HashMap<Vec<u8>, u64>,
    by_listing: BTreeMap<u64, Vec<u8>>,
    /// How many were listed so far (the next one's place in `by_listing`).
    listed: u64,
    /// This process's, given away.
    given: HashSet<Vec<u8>>,
    /// Other processes', given to this one.
    received: HashSet<Vec<u8>>,
    /// This process's own walk is over: nothing more is listed.
    closed: bool,
}

impl Ledger {
    fn parts(&self) -> std::sync::MutexGuard<'_, LedgerParts> {
        self.0.lock().expect("no panics")
    }

    /// Notes parts of this process's that its walk listed.
    fn list(&self, paths: impl IntoIterator<Item = Vec<u8>>) {
        let mut parts = self.parts();
        if parts.closed {
            return;
        }
        let parts = &mut *parts;
        for path in paths.into_iter().filter(|path| !parts.given.contains(path)) {
            let at = parts.listed;
            parts.listed += 1;
            parts.by_listing.insert(at, path.clone());
            parts.pending.insert(path, at);
        }
    }

    /// Whether this process begins its own part at `path`: not when it was given away.
    fn begin(&self, path: &[u8]) -> bool {
        let mut parts = self.parts();
        match parts.pending.remove(path) {
            Some(at) => {
                parts.by_listing.remove(&at);
                true
            }
            None => !parts.given.contains(path),
        }
    }

    /// Whether the part at `path`, another process's, was given to this one.
    fn was_given(&self, path: &[u8]) -> bool {
        self.parts().received.contains(path)
    }

    /// Whether this process's own walk goes on (it may list more parts): until
    /// [`Ledger::close`].
    pub fn is_walking(&self) -> bool {
        !self.parts().closed
    }

    /// How many parts this process has listed and not begun (none once it is closed).
    pub fn pending(&self) -> u64 {
        self.parts().pending.len() as u64
    }

    /// Gives away half of the parts not begun (the first listed, rounded up), which this
    /// process will then not copy.
    pub fn give(&self) -> Vec<Vec<u8>> {
        let mut parts = self.parts();
        let half = parts.pending.len().div_ceil(2);
        let mut gone = Vec::with_capacity(half);
        while gone.len() < half {
            let Some((_, path)) = parts.by_listing.pop_first() else {
                break;
            };
            parts.pending.remove(&path);
            parts.given.insert(path.clone());
            gone.push(path);
        }
        gone
    }

    /// How many parts this process gave away, and how many it was given.
    pub fn traded(&self) -> (usize, usize) {
        let parts = self.parts();
        (parts.given.len(), parts.received.len())
    }

    /// Takes another process's parts at `paths`, given to this one, which a copy with
    /// [`Cp::members`] of them then copies.
    pub fn receive(&self, paths: &[Vec<u8>]) {
        self.parts().received.extend(paths.iter().cloned());
    }

    /// Ends this process's own walk: what it listed and has not begun it never will (the
    /// walk stopped), and nothing more is listed.
    pub fn close(&self) {
        let mut parts = self.parts();
        parts.closed = true;
        parts.pending.clear();
        parts.by_listing.clear();
    }
}

/// Which of `ranks` processes links the names of the file of source device and inode `key`
/// (all of them, so that they stay one file).
pub fn link_owner(key: (u64, u64), ranks: u32) -> u32 {
    let mut bytes = [0; 16];
    bytes[..8].copy_from_slice(&key.0.to_le_bytes());
    bytes[8..].copy_from_slice(&key.1.to_le_bytes());
    (XxHash3_64::oneshot(&bytes) % u64::from(ranks)) as u32
}

impl Part {
    /// Whether this process copies the entry at `path` below SRC (`depth` levels down, a
    /// directory when `dir`), with everything below it; the directories above the shares
    /// are walked by every part.
    fn takes(self, path: impl FnOnce() -> Vec<u8>, depth: usize, dir: bool) -> bool {
        match self {
            Part::Whole => true,
            Part::Spine { split } => place(depth, dir, split) != Place::Part,
            Part::Rank { rank, ranks, split } => match place(depth, dir, split) {
                Place::Part => part_owner(&path(), ranks) == rank,
                _ => true,
            },
        }
    }

    /// Whether the directory at `depth` is one above the shares, whose metadata (and
    /// deletions) are left to [`Part::Spine`].
    fn leaves_dir(self, depth: usize) -> bool {
        matches!(self, Part::Rank { split, .. } if depth < split)
    }
}

/// A copy of trees (`barge cp`): its options, then [`Cp::run`] per SRC.
#[derive(Clone, Debug)]
pub struct Cp {
    archive: bool,
    links: bool,
    restore: Restore,
    update: bool,
    checksum: bool,
    delete: bool,
    dry_run: bool,
    changes: bool,
    reflink: Reflink,
    exclude: Exclude,
    threads: usize,
    part: Part,
    ledger: Option<Arc<Ledger>>,
    cancel: Cancel,
    /// The umask copies are created under.
    umask: u32,
    one_file_system: bool,
    members: Option<Members>,
    /// See `threads::Crowds::dwell`; also how long a thread waits before it copies a chunk
    /// (`copier/chunked.rs`' hooks).
    #[cfg(test)]
    pub(crate) dwell: std::time::Duration,
}

impl Default for Cp {
    /// What `cp -a` keeps ([`Cp::archive`]); existing entries are errors; at most
    /// [`Work::Walk`] threads.
    fn default() -> Cp {
        Cp {
            archive: true,
            links: true,
            restore: Restore::default(),
            update: false,
            checksum: false,
            delete: false,
            dry_run: false,
            changes: false,
            reflink: Reflink::Auto,
            exclude: Exclude::default(),
            threads: Work::Walk.threads(),
            part: Part::Whole,
            ledger: None,
            cancel: Cancel::new(),
            umask: crate::root::process_umask(),
            one_file_system: false,
            members: None,
            #[cfg(test)]
            dwell: std::time::Duration::ZERO,
        }
    }
}

impl Cp {
    /// A copy with the defaults (see [`Cp::default`]).
    pub fn new() -> Cp {
        Cp::default()
    }

    /// Copies a directory on another filesystem than its SRC's as an empty directory (a
    /// mount point is kept, its contents are not: `cp -x`).
    pub fn one_file_system(mut self, yes: bool) -> Cp {
        self.one_file_system = yes;
        self
    }

    /// Copies only `members` of a SRC directory (`cp -T LIST`): each with everything below
    /// it, and the directories on the way to one, with their own metadata but only what
    /// leads to a member. A member SRC lacks goes to [`CpReport::missing`].
    pub fn members(mut self, members: Members) -> Cp {
        self.members = Some(members);
        self
    }

    /// Copies owners, extended attributes (ACLs and capabilities too) and devices, as far
    /// as the process may, besides modes, times, symlinks, hard links, fifos and sockets
    /// (`cp -a`; the default). `false`: gives nothing away, no xattrs, no devices.
    pub fn archive(mut self, yes: bool) -> Cp {
        self.archive = yes;
        self
    }

    /// Copies the names of a file of several as hard links of one copy (the default, as
    /// `cp -a`), or (`false`) each name as a file of its own (`--no-preserve=links`).
    pub fn hard_links(mut self, yes: bool) -> Cp {
        self.links = yes;
        self
    }

    /// Restores metadata and treats existing entries as `restore` says (its `setid` is
    /// ignored: a copy keeps setuid and setgid bits where it keeps the ids they grant).
    pub fn restore(mut self, restore: Restore) -> Cp {
        self.restore = restore;
        self
    }

    /// Copies only entries that differ from DEST's by `compare.rs`'s unchanged rule (type,
    /// size, mtime, permission bits (all twelve, less the [`Cp::umask`] the copy is made
    /// under); with [`Cp::archive`] owners (as root) and extended attributes (a directory's
    /// too: one that differs gets SRC's again, without those SRC lacks); which
    /// names share a file), replacing those by rename.
    pub fn update(mut self, yes: bool) -> Cp {
        self.update = yes;
        self
    }

    /// With [`Cp::update`], also compares the content of files the unchanged rule finds
    /// the same (read on both sides, as `rsync -c`): one whose bytes differ is copied again.
    pub fn checksum(mut self, yes: bool) -> Cp {
        self.checksum = yes;
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

    /// Makes only the part `part` of the copy (see [`Part`]).
    pub fn part(mut self, part: Part) -> Cp {
        self.part = part;
        self
    }

    /// With [`Part::Rank`], notes in `ledger` the part directories this process owns as
    /// its walk lists them, and begins only those not given away since, besides those of
    /// other processes given to it (see [`Ledger`]).
    pub fn ledger(mut self, ledger: Arc<Ledger>) -> Cp {
        self.ledger = Some(ledger);
        self
    }

    /// Whether this process copies the entry at `path` below SRC ([`Part::takes`]); a part
    /// directory of a copy with a [`Cp::ledger`] as its ledger says.
    fn takes(&self, path: impl FnOnce() -> Vec<u8>, depth: usize, dir: bool) -> bool {
        match (&self.ledger, self.part) {
            (Some(ledger), Part::Rank { rank, ranks, split })
                if dir && place(depth, dir, split) == Place::Part =>
            {
                let path = path();
                match part_owner(&path, ranks) == rank {
                    true => ledger.begin(&path),
                    false => ledger.was_given(&path),
                }
            }
            _ => self.part.takes(path, depth, dir),
        }
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
        } else if self.members.is_some() {
            return Err(Error::Argument {
                arg: src.display().to_string(),
                problem: "is no directory: listed paths are found below one".into(),
            });
        }
        let me = Owner::of_process();
        let mut shared = self.shared(src, dest, me, linked, progress, report);
        shared.src_dev = inode_key(&stat).0;
        // Creations go below DEST where it is a directory already (a mount point, say).
        let dest_dir = openat(&parent, name, DIR_HANDLE_FLAGS, Mode::empty());
        let into = dest_dir.as_ref().map_or(parent.as_fd(), |d| d.as_fd());
        shared.crowds = Crowds::new(self.threads, into);
        #[cfg(test)]
        {
            shared.crowds.dwell = self.dwell;
        }
        let mut copier = Copier::new(&shared);
        let parent = DestFd::before_walk(parent);
        let in_setgid = statx(&*parent, "", AtFlags::EMPTY_PATH, StatxFlags::MODE)
            .is_ok_and(|st| st.stx_mode & 0o2000 != 0);
        if is_dir {
            let fd = openat(CWD, src, DIR_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open directory", TreePath(src_name.to_vec()), e))?;
            let root = copier.enter(Some(&parent), in_setgid, name, fd.as_fd(), &stat, b"")?;
            drop(copier);
            WalkParallel::new(fd, src_name)
                .threads(self.threads)
                .solo(true)
                .exclude(self.exclude.clone())
                .one_file_system(self.one_file_system)
                .members(self.members.clone())
                .visit(&mut Builder(&shared), root);
            if std::env::var_os("BARGE_WALK_STATS").is_some() {
                let reopened = shared.reopened.load(Relaxed);
                eprintln!("cp: {reopened} copies of directories reopened");
            }
        } else {
            let (src_dir, src_entry) = split(src)?;
            let src_dir = open_parent(src_dir, src_name)?;
            let at = Pair {
                src: src_dir.as_fd(),
                src_name: src_entry,
                dest: Some(&parent),
                crowd: None,
                name,
                setgid: in_setgid,
                path: &Vec::new,
            };
            copier.copy(&at, &stat)?;
            copier.run_chunks(self.threads.min(Work::Cores.threads()));
        }
        self.cancel.check()?;
        Ok(shared.summary.into_inner().expect("no panics"))
    }

    /// Copies the names below `src` in `names` into `dest` (both directories), in that
    /// order: a file of several links is copied at its first name and linked at the others
    /// (the names [`Part::Rank`] left on every process, those [`link_owner`] gives this one,
    /// grouped by file). Problems with names go to `report`, as in [`Cp::run`].
    pub fn run_links(
        &self,
        src: &Path,
        dest: &Path,
        names: &[Vec<u8>],
        linked: &Linked,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<CpSummary> {
        let open = |path: &Path| {
            openat(CWD, path, DIR_FLAGS, Mode::empty()).map_err(|e| {
                Error::io(
                    "open directory",
                    TreePath(path.as_os_str().as_bytes().into()),
                    e,
                )
            })
        };
        let (src_fd, dest_fd) = (open(src)?, open(dest)?);
        let me = Owner::of_process();
        let shared = self.shared(src, dest, me, linked, progress, report);
        let mut copier = Copier::new(&shared);
        for name in names {
            if let Err(e) = copier.copy_below(src_fd.as_fd(), dest_fd.as_fd(), name) {
                if copier.failed(e) == WalkState::Quit {
                    break;
                }
            }
        }
        drop(copier);
        self.cancel.check()?;
        Ok(shared.summary.into_inner().expect("no panics"))
    }

    /// Reads back every regular file of the copy of `src` at `dest` and compares it with
    /// its source, byte for byte; a difference or a missing file goes to `report`.
    pub fn verify(&self, src: &Path, dest: &Path, report: &dyn CpReport) -> Result<Verified> {
        Compare::new()
            .threads(self.threads)
            .exclude(self.exclude.clone())
            .members(self.members.clone())
            .cancel(self.cancel.clone())
            .run(src, dest, &|e| report.error(e))
    }
}

impl Cp {
    /// What the threads of a copy of `src` as `dest` share.
    fn shared<'a>(
        &'a self,
        src: &Path,
        dest: &Path,
        me: Owner,
        linked: &'a Linked,
        progress: &'a Progress,
        report: &'a dyn CpReport,
    ) -> Shared<'a> {
        // Without `-a` a copy gives nothing away; with it, as far as the process may.
        let same_owner = match self.archive {
            true => self.restore.same_owner,
            false => Some(false),
        };
        Shared {
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
            src: src.as_os_str().as_bytes().to_vec(),
            dest: dest.as_os_str().as_bytes().to_vec(),
            links: &linked.copies,
            deferred: &linked.deferred,
            wide: &linked.wide,
            src_dev: 0,
            no_clone: AtomicBool::new(self.reflink == Reflink::Never),
            no_range: AtomicBool::new(self.reflink == Reflink::Never),
            target: Mutex::new(None),
            summary: Mutex::default(),
            crowds: Crowds::default(),
            dest_root: OnceLock::new(),
            reopened: AtomicU64::new(0),
        }
    }
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
