//! How the processes of one job (the ranks of an MPI job) split a tree: every process walks
//! the top levels, down to the depth [`split_depth`] picks for the tree (at most [`SPINE`]),
//! and the entries there (the parts) are the units handed out, each with everything below
//! it. `cp --mpi` hands a part to the process its path
//! hashes to ([`crate::cp::Part`]); `pack --mpi` hands each process a run of consecutive
//! parts ([`Share`]), since each process writes one stretch of the archive, whose entries
//! are in path order.

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use rustix::fs::{openat, statat, AtFlags, FileType, Mode};

use crate::sys::dir::{dirent_buffer, Listing};
use crate::sys::DIR_FLAGS;

/// The deepest the processes of a shared job split a tree: the entries at the split depth
/// and above (directories: at that depth) are the parts handed out. Three levels give a
/// source tree's hundreds of directories, and listing them on every process costs little.
pub const SPINE: usize = 3;

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

/// The share of one process of a pack that several write together (`pack --mpi`): the
/// parts numbered `parts` (in walk order, which is archive order), and the entries above
/// the parts (directories entered and left) that come after the part before its first and
/// up to its last part (after the last part of all, for the process that has it). The
/// shares of processes 0, 1, ... follow each other in the archive. A walk given a share
/// ([`crate::walk::Walk::share`]) announces only those, and counts the parts it passes.
#[derive(Debug)]
pub struct Share {
    /// The depth the tree is split at ([`split_depth`]).
    split: usize,
    parts: Range<u64>,
    /// The counts of parts begun before a directory above the parts is entered or left, at
    /// which this process announces it.
    glue: Range<u64>,
    /// Parts begun so far in the walk.
    seen: AtomicU64,
}

impl Share {
    /// The share of process `rank` of `ranks` of a tree split at depth `split` into
    /// `parts` parts: a run of about `parts / ranks` of them (none, where there are fewer
    /// parts than processes).
    pub fn new(rank: u32, ranks: u32, split: usize, parts: u64) -> Share {
        let at = |r: u32| u64::from(r) * parts / u64::from(ranks.max(1));
        let (first, end) = (at(rank), at(rank + 1));
        // The last part's owner writes what follows it; process 0 all of a tree without parts.
        let last = end == parts && (first < end || (parts == 0 && rank == 0));
        Share {
            split,
            parts: first..end,
            glue: first..end + u64::from(last),
            seen: AtomicU64::new(0),
        }
    }

    /// A share of no part of a tree split at depth `split`: a walk with it only counts the
    /// parts ([`Share::seen`]).
    pub fn counting(split: usize) -> Share {
        Share {
            split,
            parts: 0..0,
            glue: 0..0,
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

    /// Whether this share begins the archive (and writes its root's records).
    pub fn first(&self) -> bool {
        self.glue.contains(&0)
    }

    /// A walk begins: no part passed yet (one walk at a time takes a share).
    pub(crate) fn restart(&self) {
        self.seen.store(0, Relaxed);
    }

    /// A part begins: whether it is this share's.
    pub(crate) fn takes_next(&self) -> bool {
        self.parts.contains(&self.seen.fetch_add(1, Relaxed))
    }

    /// Whether a directory above the parts, entered or left now, is this share's to
    /// announce.
    pub(crate) fn tells_spine(&self) -> bool {
        self.glue.contains(&self.seen())
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use rustix::fs::CWD;

    use super::*;

    #[test]
    fn parts_are_split_in_runs_that_follow_each_other() {
        let shares = |ranks: u32, parts: u64| -> Vec<(Range<u64>, Range<u64>)> {
            (0..ranks)
                .map(|r| Share::new(r, ranks, SPINE, parts))
                .map(|s| (s.parts, s.glue))
                .collect()
        };
        assert_eq!(shares(2, 5), [(0..2, 0..2), (2..5, 2..6)]);
        // Fewer parts than processes: some have none, and no glue.
        assert_eq!(
            shares(4, 2),
            [(0..0, 0..0), (0..1, 0..1), (1..1, 1..1), (1..2, 1..3)]
        );
        // No part at all: process 0 writes everything.
        assert_eq!(shares(3, 0), [(0..0, 0..1), (0..0, 0..0), (0..0, 0..0)]);
        assert_eq!(shares(1, 7), [(0..7, 0..8)]);
        assert_eq!(place(1, true, SPINE), Place::Spine);
        assert_eq!(place(SPINE, true, SPINE), Place::Part);
        assert_eq!(place(1, false, SPINE), Place::Part);
        assert_eq!(place(SPINE + 1, true, SPINE), Place::Below);
        // Split at 1: the top directories are the parts.
        assert_eq!(place(1, true, 1), Place::Part);
        assert_eq!(place(2, false, 1), Place::Below);
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
