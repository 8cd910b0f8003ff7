//! How the processes of one job (the ranks of an MPI job) split a tree: every process walks
//! the top [`SPINE`] levels, and the entries there (the parts) are the units handed
//! out, each with everything below it. `cp --mpi` hands a part to the process its path
//! hashes to ([`crate::cp::Part`]); `pack --mpi` hands each process a run of consecutive
//! parts ([`Share`]), since each process writes one stretch of the archive, whose entries
//! are in path order.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// How many levels below the root the processes of a shared job split it: the entries at
/// this depth and above (directories: at this depth) are the parts handed out. Three levels
/// give a source tree's hundreds of directories, and listing them on every process costs
/// little.
pub const SPINE: usize = 3;

/// Where an entry `depth` levels below the root is in the split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// A directory above the parts, walked by every process.
    Spine,
    /// A part: a directory [`SPINE`] levels down, or anything else at most that deep.
    Part,
    /// Inside a part.
    Below,
}

/// Where the entry `depth` levels down (a directory when `dir`) is.
pub(crate) fn place(depth: usize, dir: bool) -> Place {
    match depth {
        d if d > SPINE => Place::Below,
        d if dir && d < SPINE => Place::Spine,
        _ => Place::Part,
    }
}

/// The share of one process of a pack that several write together (`pack --mpi`): the
/// parts numbered `parts` (in walk order, which is archive order), and the entries above
/// the parts (directories entered and left) that come after the part before its first and
/// up to its last part (after the last part of all, for the process that has it). The
/// shares of processes 0, 1, ... follow each other in the archive. A walk given a share
/// ([`crate::walk::Walk::share`]) announces only those, and counts the parts it passes.
#[derive(Debug, Default)]
pub struct Share {
    parts: Range<u64>,
    /// The counts of parts begun before a directory above the parts is entered or left, at
    /// which this process announces it.
    glue: Range<u64>,
    /// Parts begun so far in the walk.
    seen: AtomicU64,
}

impl Share {
    /// The share of process `rank` of `ranks` of a tree of `parts` parts: a run of about
    /// `parts / ranks` of them (none, where there are fewer parts than processes).
    pub fn new(rank: u32, ranks: u32, parts: u64) -> Share {
        let at = |r: u32| u64::from(r) * parts / u64::from(ranks.max(1));
        let (first, end) = (at(rank), at(rank + 1));
        // The last part's owner writes what follows it; process 0 all of a tree without parts.
        let last = end == parts && (first < end || (parts == 0 && rank == 0));
        Share {
            parts: first..end,
            glue: first..end + u64::from(last),
            seen: AtomicU64::new(0),
        }
    }

    /// A share of no part: a walk with it only counts the parts ([`Share::seen`]).
    pub fn counting() -> Share {
        Share::default()
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
    use super::*;

    #[test]
    fn parts_are_split_in_runs_that_follow_each_other() {
        let shares = |ranks: u32, parts: u64| -> Vec<(Range<u64>, Range<u64>)> {
            (0..ranks)
                .map(|r| Share::new(r, ranks, parts))
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
        assert_eq!(place(1, true), Place::Spine);
        assert_eq!(place(SPINE, true), Place::Part);
        assert_eq!(place(1, false), Place::Part);
        assert_eq!(place(SPINE + 1, true), Place::Below);
    }
}
