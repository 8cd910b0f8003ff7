//! Tree sizes like `du -sb`: a counting visitor on the [`WalkParallel`] walker, every entry
//! measured from the one `statx` the walker makes relative to its directory's fd, and
//! [`Du`], the operation a front end runs.
//!
//! Directories are measured with the `statx` the walker makes on the fd opened to read them,
//! so every entry costs exactly one stat (du needs the size of directories too, so none can
//! be skipped). Hard-linked files are counted once by device and inode. Errors (unreadable
//! directories, entries that vanished during the walk) are counted and collected, never
//! abort the walk. Symlinks are never followed.
//!
//! Plain `statx` calls beat `IORING_OP_STATX` batches: the kernel always runs io_uring statx
//! on io-wq worker threads, which costs more CPU time on a warm tree and, on a cold one, lags
//! behind simply running more threads of plain calls (docs/BENCHMARKS.md, "Design
//! measurements").

use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rustix::fs::{openat, statx, AtFlags, FileType, Mode, Statx, CWD};
use rustix::io::Errno;

use crate::compare::{inode_key, InodeKey};
use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::format;
use crate::interrupt::Cancel;
use crate::sys::DIR_FLAGS;
use crate::threads::Work;
use crate::tree::{Entry, STATX_MASK};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};
use crate::Progress;

/// How many errors a [`Usage`] keeps in full (the others are only counted).
pub const NAMED_ERRORS: usize = 8;

/// Sizes and entry counts of a tree.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Sum of apparent sizes (`st_size`), directories and symlinks included.
    pub bytes: u64,
    /// Sum of allocated sizes (`st_blocks * 512`).
    pub disk_bytes: u64,
    /// What a space limit charges: each entry [`format::space`] of its size as
    /// [`Limits::max_space`](format::Limits::max_space) charges it landing, or its allocated
    /// size when more (blocks that hold what the walk does not read, such as xattrs).
    pub space: u64,
    /// Regular files.
    pub files: u64,
    /// Directories, the PATH itself included.
    pub dirs: u64,
    /// Other entries: symlinks, fifos, sockets, devices.
    pub other: u64,
}

impl Totals {
    /// Adds the counts of `other`.
    pub fn add(&mut self, other: &Totals) {
        self.bytes += other.bytes;
        self.disk_bytes += other.disk_bytes;
        self.space += other.space;
        self.files += other.files;
        self.dirs += other.dirs;
        self.other += other.other;
    }

    fn count(&mut self, stat: &Statx) {
        self.bytes += stat.stx_size;
        self.disk_bytes += stat.stx_blocks * 512;
        self.space += format::space(stat.stx_size, 0).max(stat.stx_blocks * 512);
        match kind(stat) {
            FileType::RegularFile => self.files += 1,
            FileType::Directory => self.dirs += 1,
            _ => self.other += 1,
        }
    }
}

/// The totals of one directory and everything below it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Subtotal {
    /// The directory: the measured PATH, joined with the names below it.
    pub path: TreePath,
    /// Its totals.
    pub totals: Totals,
}

/// The result of measuring one PATH.
#[derive(Debug, Default)]
pub struct Usage {
    /// Everything below the PATH, the PATH included.
    pub totals: Totals,
    /// The PATH (always there) and every directory down to [`Du::depth`] below it,
    /// PATH first, parents before their children.
    pub subtotals: Vec<Subtotal>,
    /// The first [`NAMED_ERRORS`] errors.
    pub errors: Vec<Error>,
    /// How many entries could not be measured or read.
    pub error_count: u64,
    /// The PATH is a directory counted already, inside an earlier PATH (or the same one
    /// given twice): its totals are its own, measured apart, and belong to no total over
    /// the PATHs.
    pub counted_before: bool,
}

/// A measurement of trees (`barge du`): its options, then [`Du::run`] over PATHs.
#[derive(Clone, Debug)]
pub struct Du {
    one_file_system: bool,
    depth: usize,
    threads: usize,
    exclude: Exclude,
    cancel: Cancel,
    tally: Option<Arc<Progress>>,
}

impl Default for Du {
    /// Every filesystem, no subtotals below the PATH, at most [`Work::Walk`] threads.
    fn default() -> Du {
        Du {
            one_file_system: false,
            depth: 0,
            threads: Work::Walk.threads(),
            exclude: Exclude::default(),
            cancel: Cancel::new(),
            tally: None,
        }
    }
}

impl Du {
    /// A measurement with the defaults (see [`Du::default`]).
    pub fn new() -> Du {
        Du::default()
    }

    /// Neither counts nor enters entries on another filesystem than the PATH's (`du -x`).
    pub fn one_file_system(mut self, yes: bool) -> Du {
        self.one_file_system = yes;
        self
    }

    /// Keeps subtotals for directories down to `levels` below the PATH (`du -d N`).
    pub fn depth(mut self, levels: usize) -> Du {
        self.depth = levels;
        self
    }

    /// Neither counts nor enters what `exclude` matches below each PATH.
    pub fn exclude(mut self, exclude: Exclude) -> Du {
        self.exclude = exclude;
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels): the PATH being measured fails with [`Error::Interrupted`].
    pub fn cancel(mut self, cancel: Cancel) -> Du {
        self.cancel = cancel;
        self
    }

    /// Adds the bytes it counts to `tally` as it goes (each directory's once it is listed):
    /// a progress line's total while the count is under way.
    pub fn tally(mut self, tally: Arc<Progress>) -> Du {
        self.tally = Some(tally);
        self
    }

    /// Uses at most `threads` worker threads (see [`WalkParallel::threads`]).
    pub fn threads(mut self, threads: usize) -> Du {
        self.threads = threads;
        self
    }

    /// Measures each of `paths` in turn (symlinks are measured, not followed). With several
    /// PATHs every inode is counted once over all of them, as du does (a directory PATH
    /// counted already is measured apart: [`Usage::counted_before`]); with one, only files
    /// with several links are remembered. A PATH's result fails only when the PATH itself
    /// cannot be reached; problems below it are reported in its [`Usage`].
    pub fn run<'a, P: AsRef<Path>>(
        &'a self,
        paths: &'a [P],
    ) -> impl Iterator<Item = Result<Usage>> + 'a {
        let seen = Seen {
            all: paths.len() > 1,
            inodes: Mutex::default(),
        };
        paths
            .iter()
            .map(move |path| self.measure(path.as_ref(), &seen))
    }

    /// Measures the tree at `path`.
    fn measure(&self, path: &Path, seen: &Seen) -> Result<Usage> {
        let name = path.as_os_str().as_bytes();
        let whole = |e| Error::io("statx", TreePath(name.to_vec()), e);
        let apart = Seen::default();
        let mut counted_before = false;
        let count = match openat(CWD, path, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => {
                let stat = statx(&fd, "", AtFlags::EMPTY_PATH, STATX_MASK).map_err(whole)?;
                // A directory counted already (inside an earlier PATH) is measured on its
                // own, apart from the inodes counted over all PATHs.
                counted_before = !seen.counts_dir(inode_key(&stat));
                let count = Count::new(self, if counted_before { &apart } else { seen }, &stat);
                let slot = count.slot(0, name.to_vec());
                let mut totals = Totals::default();
                totals.count(&stat);
                count.add(slot, &totals);
                WalkParallel::new(fd, name)
                    .threads(self.threads)
                    .exclude(self.exclude.clone())
                    .solo(true)
                    .visit(&mut &count, slot);
                count
            }
            Err(open) => {
                let stat =
                    statx(CWD, path, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK).map_err(whole)?;
                let count = Count::new(self, seen, &stat);
                let mut totals = Totals::default();
                count.count(&mut totals, &[(inode_key(&stat), stat)]);
                count.add(count.slot(0, name.to_vec()), &totals);
                if kind(&stat) == FileType::Directory {
                    count.error(Error::io("open directory", TreePath(name.to_vec()), open));
                }
                count
            }
        };
        self.cancel.check()?;
        Ok(Usage {
            counted_before,
            ..count.finish()
        })
    }
}

/// The inodes counted so far in one [`Du::run`] (or in one PATH measured apart).
#[derive(Default)]
struct Seen {
    /// Every inode is remembered (several PATHs), not only those with several links.
    all: bool,
    inodes: Mutex<HashSet<InodeKey>>,
}

impl Seen {
    /// True when the directory `key` is to be measured: always with one PATH, the first
    /// time it is seen with several.
    fn counts_dir(&self, key: InodeKey) -> bool {
        !self.all || self.inodes.lock().expect("no panics").insert(key)
    }
}

fn kind(stat: &Statx) -> FileType {
    FileType::from_raw_mode(stat.stx_mode.into())
}

/// A subtotal being summed: its parent slot, its path and what was counted directly in it.
struct Slot {
    parent: usize,
    path: Vec<u8>,
    totals: Totals,
}

/// The measurement of one PATH, shared by its walking threads; it makes their
/// [`Counter`]s.
struct Count<'a> {
    du: &'a Du,
    seen: &'a Seen,
    root_dev: u64,
    slots: Mutex<Vec<Slot>>,
    errors: Mutex<(Vec<Error>, u64)>,
}

impl<'a> Count<'a> {
    fn new(du: &'a Du, seen: &'a Seen, root: &Statx) -> Count<'a> {
        Count {
            du,
            seen,
            root_dev: inode_key(root).0,
            slots: Mutex::default(),
            errors: Mutex::default(),
        }
    }

    /// True when `-x` excludes the entry.
    fn excluded(&self, stat: &Statx) -> bool {
        self.du.one_file_system && inode_key(stat).0 != self.root_dev
    }

    /// Counts `linked` entries whose inode was not seen before.
    fn count(&self, totals: &mut Totals, linked: &[(InodeKey, Statx)]) {
        if linked.is_empty() {
            return;
        }
        let mut seen = self.seen.inodes.lock().expect("no panics");
        for (key, stat) in linked {
            if seen.insert(*key) {
                totals.count(stat);
            }
        }
    }

    /// The slot the subdirectory `name` of `parent` is counted in: its own when it is
    /// shallow enough, else its parent's.
    fn own_slot(&self, parent: &Dir<usize>, name: &[u8]) -> usize {
        if parent.depth() < self.du.depth {
            self.slot(*parent.state(), parent.path(Some(name)).0)
        } else {
            *parent.state()
        }
    }

    /// A new subtotal slot.
    fn slot(&self, parent: usize, path: Vec<u8>) -> usize {
        let mut slots = self.slots.lock().expect("no panics");
        slots.push(Slot {
            parent,
            path,
            totals: Totals::default(),
        });
        slots.len() - 1
    }

    fn add(&self, slot: usize, totals: &Totals) {
        if let Some(tally) = &self.du.tally {
            tally.add_bytes(totals.bytes);
        }
        self.slots.lock().expect("no panics")[slot]
            .totals
            .add(totals);
    }

    fn error(&self, error: Error) {
        let mut errors = self.errors.lock().expect("no panics");
        errors.1 += 1;
        if errors.0.len() < NAMED_ERRORS {
            errors.0.push(error);
        }
    }

    /// Sums the slots into their parents.
    fn finish(self) -> Usage {
        let mut slots = self.slots.into_inner().expect("no panics");
        for i in (1..slots.len()).rev() {
            let (parent, totals) = (slots[i].parent, slots[i].totals);
            slots[parent].totals.add(&totals);
        }
        let (errors, error_count) = self.errors.into_inner().expect("no panics");
        Usage {
            totals: slots.first().map(|s| s.totals).unwrap_or_default(),
            subtotals: slots
                .into_iter()
                .map(|s| Subtotal {
                    path: TreePath(s.path),
                    totals: s.totals,
                })
                .collect(),
            errors,
            error_count,
            counted_before: false,
        }
    }
}

impl<'a> ParallelVisitorBuilder for &'a Count<'a> {
    type Visitor = Counter<'a>;

    fn build(&mut self) -> Counter<'a> {
        Counter {
            count: self,
            totals: Totals::default(),
            linked: Vec::new(),
        }
    }
}

/// One thread's counting visitor: what it counted in the directory it lists, added to the
/// directory's slot once the listing is done.
struct Counter<'a> {
    count: &'a Count<'a>,
    totals: Totals,
    /// Entries that may be hard links to something already counted.
    linked: Vec<(InodeKey, Statx)>,
}

impl ParallelVisitor for Counter<'_> {
    /// The directory's subtotal slot.
    type State = usize;
    type Job = std::convert::Infallible;

    fn enter_dir(
        &mut self,
        parent: &Dir<usize>,
        entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        stat: &Statx,
    ) -> Result<usize, WalkState> {
        if self.count.du.cancel.is_cancelled() {
            return Err(WalkState::Quit);
        }
        if self.count.excluded(stat) || !self.count.seen.counts_dir(inode_key(stat)) {
            return Err(WalkState::Skip);
        }
        let slot = self.count.own_slot(parent, entry.name);
        self.totals.count(stat);
        Ok(slot)
    }

    fn entry(
        &mut self,
        _dir: &Dir<usize>,
        _fd: BorrowedFd<'_>,
        _entry: &Entry<'_>,
        st: &Statx,
    ) -> WalkState {
        if self.count.excluded(st) {
            return WalkState::Continue;
        }
        if st.stx_nlink > 1 || self.count.seen.all {
            self.linked.push((inode_key(st), *st));
        } else {
            self.totals.count(st);
        }
        WalkState::Continue
    }

    /// Reported, as every error of the walk: du counts what it cannot state.
    fn unstated(&mut self, dir: &Dir<usize>, name: &[u8], cause: Errno) -> WalkState {
        self.error(Error::io("statx", dir.path(Some(name)), cause))
    }

    fn listed(&mut self, dir: &Dir<usize>) {
        let mut totals = std::mem::take(&mut self.totals);
        self.count.count(&mut totals, &self.linked);
        self.linked.clear();
        self.count.add(*dir.state(), &totals);
    }

    /// Counts it as du does when it cannot be read: measured from the parent.
    fn unopened(
        &mut self,
        parent: &Dir<usize>,
        name: &[u8],
        stat: Option<&Statx>,
        cause: Errno,
    ) -> WalkState {
        let mut totals = Totals::default();
        match stat {
            Some(stat) if !self.count.excluded(stat) => {
                self.count.count(&mut totals, &[(inode_key(stat), *stat)]);
                if kind(stat) == FileType::Directory {
                    let path = parent.path(Some(name));
                    self.count.error(Error::io("open directory", path, cause));
                }
            }
            Some(_) => {}
            None => self
                .count
                .error(Error::io("open directory", parent.path(Some(name)), cause)),
        }
        if totals.dirs > 0 {
            self.count.add(self.count.own_slot(parent, name), &totals);
        } else {
            self.count.add(*parent.state(), &totals);
        }
        WalkState::Continue
    }

    fn error(&mut self, error: Error) -> WalkState {
        self.count.error(error);
        WalkState::Continue
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn counts_hard_links_once_keeps_subtotals_and_measures_paths_seen_apart() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        fs::create_dir_all(root.join("d/e")).unwrap();
        fs::write(root.join("f"), b"12345").unwrap();
        fs::write(root.join("d/g"), b"123").unwrap();
        fs::hard_link(root.join("f"), root.join("d/e/h")).unwrap();
        std::os::unix::fs::symlink("f", root.join("d/link")).unwrap();
        let sub = root.join("d");
        let usages: Vec<Usage> = Du::new()
            .depth(1)
            .threads(4)
            .run(&[root.to_path_buf(), sub.clone()])
            .collect::<Result<_>>()
            .unwrap();
        let whole = &usages[0];
        let counts = |t: &Totals| (t.files, t.dirs, t.other);
        assert_eq!(counts(&whole.totals), (2, 3, 1));
        assert_eq!(whole.error_count, 0);
        let paths: Vec<&[u8]> = whole.subtotals.iter().map(|s| &s.path.0[..]).collect();
        assert_eq!(
            paths,
            [root.as_os_str().as_bytes(), sub.as_os_str().as_bytes()]
        );
        // d holds g, e and the symlink: h is f, counted with the root, listed before d.
        assert_eq!(counts(&whole.subtotals[1].totals), (1, 2, 1));
        // d again: counted with the first PATH, so measured apart, h with the rest.
        assert!(usages[1].counted_before && !whole.counted_before);
        assert_eq!(counts(&usages[1].totals), (2, 2, 1));
        assert_eq!(usages[1].subtotals[0].path.0, sub.as_os_str().as_bytes());
    }
}
