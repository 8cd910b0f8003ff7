//! How the processes of one job (the ranks of an MPI job) split a tree: every process walks
//! the top levels, down to the depth [`split_depth`] picks for the tree (at most [`SPINE`]),
//! and the entries there (the parts) are the units handed out, each with everything below
//! it. `cp --mpi` hands a part to the process its path
//! hashes to ([`crate::cp::Part`]); `pack --mpi` hands each process a run of consecutive
//! parts ([`Share`]), since each process writes one stretch of the archive, whose entries
//! are in path order, the runs cut where the parts' weights say ([`cut_runs`]).

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rustix::fs::{openat, statat, AtFlags, FileType, Mode};

use crate::error::{Error, Result};
use crate::sys::dir::{dirent_buffer, Listing};
use crate::sys::DIR_FLAGS;

/// The deepest the processes of a shared job split a tree: the entries at the split depth
/// and above (directories: at that depth) are the parts handed out. Three levels give a
/// source tree's hundreds of directories, and listing them on every process costs little.
pub const SPINE: usize = 3;

/// The most entries other than directories, one after the other in a directory at or
/// above the split depth, that are one part of a [`Share`] (each is a part of its own for
/// `cp --mpi`): `pack --mpi` cuts a segment where a part begins, and a segment of one small
/// file costs a job of its own (linux at depth 2: 1,116 of 1,724 parts were files).
pub const FILES_A_PART: usize = 64;

/// The directories a process that [`split_depth`] wants at the split depth: parts hashed
/// to processes even out only where each gets many (a linux tree's 24 top directories,
/// drivers/ a third of its files, would leave one of two processes far more than half).
const PARTS_PER_PROCESS: usize = 32;

/// The depth, from 1 to [`SPINE`], at which `processes` split the tree below the directory
/// `root`: the shallowest with 32 directories a process (a tree whose
/// files lie two levels down, in thousands of directories, splits at 1, so that no
/// process lists and states the whole tree). Counted level by level, listing only the
/// directories above the depth returned; one that cannot be listed counts as empty. Every
/// process of a job must split at the same depth: one decides and tells the others.
pub fn split_depth(root: BorrowedFd<'_>, processes: u32) -> usize {
    let wanted = PARTS_PER_PROCESS * processes as usize;
    let (mut listing, mut buf) = (Listing::default(), dirent_buffer());
    let mut dirs = |dir: BorrowedFd<'_>| -> Vec<Vec<u8>> {
        if listing.read(dir, &mut buf).is_err() {
            return Vec::new();
        }
        (0..listing.len())
            .map(|i| listing.get(i))
            .filter(|&(name, kind)| is_dir(dir, name, kind))
            .map(|(name, _)| name.to_vec())
            .collect()
    };
    // SPINE is 3: levels 1 and 2 are counted, and a split at neither is at SPINE.
    let top = dirs(root);
    if top.len() >= wanted {
        return 1;
    }
    let mut second = 0;
    for name in top {
        if let Ok(dir) = openat(root, name, DIR_FLAGS, Mode::empty()) {
            second += dirs(dir.as_fd()).len();
            if second >= wanted {
                return 2;
            }
        }
    }
    SPINE
}

/// Whether the entry `name` of `dir`, of getdents64 type `kind`, is a directory.
fn is_dir(dir: BorrowedFd<'_>, name: &[u8], kind: FileType) -> bool {
    match kind {
        FileType::Unknown => statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|s| FileType::from_raw_mode(s.st_mode) == FileType::Directory),
        kind => kind == FileType::Directory,
    }
}

/// Where an entry `depth` levels below the root is in the split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// A directory above the parts, walked by every process.
    Spine,
    /// A part: a directory at the split depth, or anything else at most that deep.
    Part,
    /// Inside a part.
    Below,
}

/// Where the entry `depth` levels down (a directory when `dir`) is, in a tree split at
/// depth `split`.
pub(crate) fn place(depth: usize, dir: bool, split: usize) -> Place {
    match depth {
        d if d > split => Place::Below,
        d if dir && d < split => Place::Spine,
        _ => Place::Part,
    }
}

/// Where `processes` cut the parts weighing `weights` (in walk order) into runs of about
/// equal weight: the first part of each process's run, then the number of parts. Each run
/// in turn takes the parts whose middle falls within its even share of the weight left
/// (so that a part heavier than a share leaves the others shares of the rest); every part
/// weighs at least 1, so that parts weighed as nothing are dealt by count.
pub fn cut_runs(weights: &[u64], processes: u32) -> Vec<u64> {
    let weight = |at: usize| u128::from(weights[at].max(1));
    let mut left: u128 = (0..weights.len()).map(weight).sum();
    let (mut runs, mut at) = (vec![0], 0);
    for others in (1..processes).rev() {
        // Halves, to stay whole: the part's middle against the weight left over the runs
        // still to cut (this one and `others`).
        let mut run = 0;
        while at < weights.len() && (2 * run + weight(at)) * u128::from(others + 1) < 2 * left {
            run += weight(at);
            at += 1;
        }
        left -= run;
        runs.push(at as u64);
    }
    runs.push(weights.len() as u64);
    runs
}

/// The share of one process of a pack that several write together (`pack --mpi`). The
/// tree's parts (in walk order, which is archive order; up to [`FILES_A_PART`] entries
/// other than directories in a row one part) are the units of the shares: each
/// with the directories above the parts (entered and left) that follow it up to the next
/// part, the first part also with those before it (the whole tree is one unit where it
/// has no parts). A share takes the units numbered `units` (the parts [`cut_runs`] gives
/// a process, whose shares follow each other in the archive) or, to plan them
/// ([`crate::pack::Pack::plan_parts`]), every `step`-th of them. A walk given a share
/// ([`crate::walk::Walk::share`]) announces only those, and counts the parts it passes.
#[derive(Debug)]
pub struct Share {
    /// The depth the tree is split at ([`split_depth`]).
    split: usize,
    units: Range<u64>,
    /// The units taken in `units` are those whose number is `offset` modulo `step`.
    step: u64,
    offset: u64,
    /// The number of parts the tree was cut into (that a walk must pass).
    total: u64,
    /// Parts begun so far in the walk.
    seen: AtomicU64,
}

impl Share {
    /// The share of process `rank` of a tree split at depth `split` into runs of parts
    /// that begin at `runs` (one a process, then the number of parts: [`cut_runs`]).
    pub fn new(rank: u32, split: usize, runs: &[u64]) -> Share {
        let (first, end) = (runs[rank as usize], runs[rank as usize + 1]);
        let total = *runs.last().expect("runs end with the number of parts");
        // A tree without parts is one unit, process 0's.
        let units = match (total, rank) {
            (0, 0) => 0..1,
            _ => first..end,
        };
        Share {
            split,
            units,
            step: 1,
            offset: 0,
            total,
            seen: AtomicU64::new(0),
        }
    }

    /// The units numbered `offset`, `offset + step`, ... of a tree split at depth `split`:
    /// to plan them apart ([`crate::pack::Pack::plan_parts`]).
    pub(crate) fn dealt(split: usize, offset: u64, step: u64) -> Share {
        Share {
            split,
            units: 0..u64::MAX,
            step,
            offset,
            total: u64::MAX,
            seen: AtomicU64::new(0),
        }
    }

    /// Where the entry `depth` levels down (a directory when `dir`) is in the split.
    pub(crate) fn place(&self, depth: usize, dir: bool) -> Place {
        place(depth, dir, self.split)
    }

    /// How many parts the walk given this share has passed.
    pub fn seen(&self) -> u64 {
        self.seen.load(Relaxed)
    }

    /// After a walk: an error unless it passed as many parts as the tree was cut into (a
    /// part that appeared or went since would be no process's, or two processes').
    pub(crate) fn passed_all(&self) -> Result<()> {
        match self.seen() == self.total {
            true => Ok(()),
            false => Err(Error::Argument {
                arg: "the tree".into(),
                problem: format!(
                    "changed while it was packed: its top levels have {} parts where {} \
                     were counted",
                    self.seen(),
                    self.total
                ),
            }),
        }
    }

    /// The units (parts) it takes, those of its run.
    pub fn units(&self) -> Range<u64> {
        self.units.clone()
    }

    /// Whether the unit numbered `unit` is this share's.
    fn takes(&self, unit: u64) -> bool {
        self.units.contains(&unit) && unit % self.step == self.offset
    }

    /// Whether this share begins the archive (and writes its root's records).
    pub fn first(&self) -> bool {
        self.takes(0)
    }

    /// A walk begins: no part passed yet (one walk at a time takes a share).
    pub(crate) fn restart(&self) {
        self.seen.store(0, Relaxed);
    }

    /// A part begins: whether it is this share's.
    pub(crate) fn takes_next(&self) -> bool {
        self.takes(self.seen.fetch_add(1, Relaxed))
    }

    /// Whether a directory above the parts, entered or left now, is this share's to
    /// announce: whether the unit of the last part begun (the first, before any) is.
    pub(crate) fn tells_spine(&self) -> bool {
        self.takes(self.seen().saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use rustix::fs::CWD;

    use super::*;

    /// What `share` takes of a walk of `parts` parts with a directory above the parts
    /// entered or left before each and after the last: the parts, and the number of
    /// parts begun at each of those it announces.
    fn taken(share: &Share, parts: u64) -> (Vec<u64>, Vec<u64>) {
        let (mut taken, mut spine) = (Vec::new(), Vec::new());
        share.restart();
        for part in 0..=parts {
            if share.tells_spine() {
                spine.push(share.seen());
            }
            if part < parts && share.takes_next() {
                taken.push(part);
            }
        }
        (taken, spine)
    }

    #[test]
    fn parts_are_split_in_runs_that_follow_each_other() {
        // Parts of equal weight, cut by weight: by count. Each run has what is above the
        // parts after each of its parts, the first also what comes before the first part.
        let shares = |ranks: u32, parts: usize| -> Vec<(Vec<u64>, Vec<u64>)> {
            let runs = cut_runs(&vec![7; parts], ranks);
            (0..ranks)
                .map(|r| taken(&Share::new(r, SPINE, &runs), parts as u64))
                .collect()
        };
        let none = (vec![], vec![]);
        assert_eq!(
            shares(2, 5),
            [(vec![0, 1], vec![0, 1, 2]), (vec![2, 3, 4], vec![3, 4, 5])]
        );
        // Fewer parts than processes: some have none.
        assert_eq!(
            shares(4, 2),
            [
                none.clone(),
                (vec![0], vec![0, 1]),
                none.clone(),
                (vec![1], vec![2])
            ]
        );
        // No part at all: process 0 writes everything.
        assert_eq!(
            shares(3, 0),
            [(vec![], vec![0]), none.clone(), none.clone()]
        );
        assert_eq!(shares(1, 3), [(vec![0, 1, 2], vec![0, 1, 2, 3])]);
        // An empty run after the last part: what follows it is the run before's.
        let runs = [0, 2, 2];
        assert_eq!(
            taken(&Share::new(0, SPINE, &runs), 2),
            (vec![0, 1], vec![0, 1, 2])
        );
        assert_eq!(taken(&Share::new(1, SPINE, &runs), 2), none);
        assert!(Share::new(0, SPINE, &runs).first() && !Share::new(1, SPINE, &runs).first());
        assert_eq!(place(1, true, SPINE), Place::Spine);
        assert_eq!(place(SPINE, true, SPINE), Place::Part);
        assert_eq!(place(1, false, SPINE), Place::Part);
        assert_eq!(place(SPINE + 1, true, SPINE), Place::Below);
        // Split at 1: the top directories are the parts.
        assert_eq!(place(1, true, 1), Place::Part);
        assert_eq!(place(2, false, 1), Place::Below);
    }

    #[test]
    fn runs_are_cut_by_weight() {
        // One heavy part first: it is a run alone, the light ones share the rest.
        let mut weights = vec![300];
        weights.extend([10; 30]);
        assert_eq!(cut_runs(&weights, 2), [0, 1, 31]);
        assert_eq!(cut_runs(&weights, 3), [0, 1, 16, 31]);
        // Heavy and last: the light ones are shared before it.
        weights.rotate_left(1);
        assert_eq!(cut_runs(&weights, 3), [0, 20, 30, 31]);
        // More processes than the weight spreads over: some runs are empty.
        assert_eq!(cut_runs(&[1, 1000, 1], 4), [0, 1, 1, 2, 3]);
        // Parts weighed as nothing go by count; one process takes everything.
        assert_eq!(cut_runs(&[0; 6], 3), [0, 2, 4, 6]);
        assert_eq!(cut_runs(&[5, 9], 1), [0, 2]);
        assert_eq!(cut_runs(&[], 2), [0, 0, 0]);
        // A weight near u64::MAX does not overflow the sums.
        assert_eq!(cut_runs(&[u64::MAX, u64::MAX, 1], 2), [0, 1, 3]);
        // Rank r's run follows rank r - 1's, whatever the weights.
        let weights: Vec<u64> = (0..200u64).map(|i| (i * 7919) % 1013).collect();
        for processes in 1..40 {
            let runs = cut_runs(&weights, processes);
            assert_eq!(runs.len(), processes as usize + 1);
            assert!(runs.windows(2).all(|w| w[0] <= w[1]), "{runs:?}");
            assert_eq!((runs[0], runs[processes as usize]), (0, 200));
        }
    }

    #[test]
    fn a_dealt_share_takes_every_step_th_unit() {
        let share = Share::dealt(SPINE, 1, 3);
        assert_eq!(taken(&share, 8), (vec![1, 4, 7], vec![2, 5, 8]));
        assert!(!share.first());
        // The first unit has what comes before the first part; in a tree without parts,
        // all of it.
        let share = Share::dealt(SPINE, 0, 2);
        assert_eq!(taken(&share, 3), (vec![0, 2], vec![0, 1, 3]));
        assert_eq!(taken(&share, 0), (vec![], vec![0]));
        assert!(share.first());
    }

    /// Makes `count` directories `name0`, `name1`, ... in `dir`, each with a file.
    fn dirs(dir: &Path, name: &str, count: usize) {
        for i in 0..count {
            let d = dir.join(format!("{name}{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("f"), b"x").unwrap();
        }
    }

    /// [`split_depth`] of the directory `root`.
    fn split(root: &Path, processes: u32) -> usize {
        let fd = openat(CWD, root, DIR_FLAGS, Mode::empty()).unwrap();
        split_depth(fd.as_fd(), processes)
    }

    #[test]
    fn a_tree_splits_at_the_first_level_with_enough_directories() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        // Files two levels down, 64 directories: enough for 2 processes at depth 1.
        dirs(root, "d", 64);
        std::fs::write(root.join("top"), b"a file is no part to share").unwrap();
        assert_eq!(split(root, 1), 1);
        assert_eq!(split(root, 2), 1);
        // Not for 3 (96 wanted), with no directory two levels down.
        assert_eq!(split(root, 3), SPINE);
        for i in 0..4 {
            dirs(&root.join(format!("d{i}")), "e", 30);
        }
        // 120 directories two levels down: enough for 3 processes at depth 2.
        assert_eq!(split(root, 3), 2);
        assert_eq!(split(root, 4), SPINE);
        // A directory that cannot be listed counts as empty.
        if !rustix::process::geteuid().is_root() {
            let mode = |mode| std::fs::Permissions::from_mode(mode);
            std::fs::set_permissions(root.join("d0"), mode(0)).unwrap();
            assert_eq!(split(root, 3), SPINE, "d0's 30 are not counted");
            std::fs::set_permissions(root.join("d0"), mode(0o755)).unwrap();
        }
    }
}
