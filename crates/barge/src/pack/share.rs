//! One version 2 archive packed by several processes (`pack --mpi`), each a [`Share`] of
//! the tree. Every process counts the parts and weighs those dealt to it ([`Pack::weigh`]),
//! learns every part's weight from the others and cuts the runs
//! ([`crate::share::cut_runs`]), plans its share ([`Pack::plan_share`]: how many entries,
//! which files of several links it names first, and, stored raw, how many bytes its frames
//! take), learns from the others where its entries start and which of its files of several
//! links were named before it, then packs its share's frames ([`Pack::pack_share`]) where
//! the shares before it end: straight into the archive when their lengths were planned,
//! else (zstd) into a file of its own, copied there after. One process writes the
//! [`HEADER`] and, from every share's [`Shared::index`], the index and the footer
//! ([`tail`]). The archive is a valid one whatever the number of processes: its entries in
//! path order, links to earlier entries across shares, segments cut where shares meet.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{fstat, openat, statat, AtFlags, Mode};

use super::{v2, Format, Pack, PackSummary};
use crate::error::{Error, Result, TreePath};
use crate::format::segments::{share_index, shared_tail, Zstd};
use crate::format::HEADER_V2;
use crate::output::FdWriter;
use crate::share::Share;
use crate::sys::DIR_FLAGS;
use crate::tree::{Content, Device, Entry, Sink};
use crate::walk::Root;
use crate::Progress;

/// Entry numbers of files of several links, by device and inode.
pub type Links = HashMap<(u64, u64), u64>;

/// The first bytes of the archive, before the first share's.
pub const HEADER: [u8; 8] = HEADER_V2;

/// What planning a share found ([`Pack::plan_share`]).
#[derive(Debug, Default)]
pub struct Planned {
    /// The entries of the share.
    pub entries: u64,
    /// The files of several links that the share names, by device and inode: the number
    /// of the first entry naming each (counted from 0 for the share's first), and the
    /// earlier ones it was planned with.
    pub links: Links,
    /// The length of the share's frames where they are stored raw (no zstd): every body's
    /// length is fixed by the plan, its data read later.
    pub bytes: Option<u64>,
}

impl Planned {
    /// Whether the share's frames are as long as planned once `earlier` (the files of
    /// several links named before the share) is known: not where the share names one of
    /// them first, which becomes a hard link.
    pub fn holds_with(&self, earlier: &Links) -> bool {
        !self.links.keys().any(|key| earlier.contains_key(key))
    }
}

/// What [`Pack::pack_share`] wrote.
#[derive(Debug)]
pub struct Shared {
    /// What the share holds.
    pub summary: PackSummary,
    /// The bytes written: the share's frames.
    pub bytes: u64,
    /// What the index needs of the share, for [`tail`].
    pub index: Vec<u8>,
}

impl Pack<'_> {
    /// The tree's parts, split at depth `split` ([`crate::share`]), as a walk finds them
    /// (every process finds the same in a tree that does not change meanwhile), and the
    /// weights (bytes and entries) of those numbered `process`, `process + processes`, ... in
    /// that order, weighed on `threads` threads that each walk every `threads`-th of them.
    pub fn weigh(
        &self,
        split: usize,
        process: u32,
        processes: u32,
        threads: usize,
    ) -> Result<(u64, Vec<u64>)> {
        let (processes, threads) = (u64::from(processes.max(1)), threads.max(1) as u64);
        let prune = HashSet::new();
        let weighed: Vec<Result<(u64, Vec<u64>)>> = std::thread::scope(|scope| {
            let walks: Vec<_> = (0..threads)
                .map(|thread| {
                    let walk = self.walk(&prune);
                    let root = self.shared_root();
                    scope.spawn(move || {
                        let offset = u64::from(process) + processes * thread;
                        let share = Share::dealt(split, offset, processes * threads);
                        let mut weigher = Weigher {
                            share: &share,
                            offset,
                            step: processes * threads,
                            weights: Vec::new(),
                        };
                        walk.share(&share).run(root?, &mut weigher)?;
                        Ok((share.seen(), weigher.weights))
                    })
                })
                .collect();
            walks
                .into_iter()
                .map(|w| w.join().expect("a weighing walk"))
                .collect()
        });
        let weighed = weighed.into_iter().collect::<Result<Vec<_>>>()?;
        let parts = weighed[0].0;
        if weighed.iter().any(|(p, _)| *p != parts) {
            return Err(Error::Argument {
                arg: "the tree".into(),
                problem: "its top levels changed while they were walked".into(),
            });
        }
        // Thread t weighed this process's parts t, t + threads, ...: dealt back in order.
        let mine = parts.saturating_sub(u64::from(process)).div_ceil(processes);
        let weights = (0..mine)
            .map(|k| {
                let (thread, nth) = ((k % threads) as usize, (k / threads) as usize);
                weighed[thread].1.get(nth).copied().unwrap_or(0)
            })
            .collect();
        Ok((parts, weights))
    }

    /// The depth `processes` split the tree at ([`crate::share::split_depth`]).
    pub fn split_depth(&self, processes: u32) -> Result<usize> {
        Ok(crate::share::split_depth(
            self.shared_root()?.as_fd(),
            processes,
        ))
    }

    /// Plans `share` without reading any file (but sparse ones of at most 64 KiB): its
    /// entries numbered from `first`, with the files of several links in `links` as hard
    /// links (see [`Pack::pack_share`]; a first plan knows none: 0 and no links).
    pub fn plan_share(&self, share: &Share, first: u64, links: &Links) -> Result<Planned> {
        let progress = Progress::default();
        let settings = v2::Settings {
            archive: self.archive,
            zstd: (self.zstd > 0).then_some(self.zstd),
            threads: 1,
            target: self.segment_target as usize,
            itself: [self.written, self.replaced],
            listing: None,
            progress: &progress,
            cancel: self.cancel.clone(),
            sharing: Some(v2::Sharing {
                first,
                links,
                counting: true,
            }),
        };
        // The first share carries the root directory's records, as packed.
        let root_records = share.first().then(|| self.shared_root()).transpose()?;
        let root = self.shared_root()?;
        let prune = HashSet::new();
        let walk = self.walk(&prune).share(share);
        let planned = v2::plan(settings, root_records, |planner| walk.run(root, planner))?;
        share.passed_all()?;
        Ok(planned)
    }

    /// Packs the frames of `share` into `out` (at its offset), as `planned`: its entries
    /// numbered from `first`, with the files of several links in `links` (by device and
    /// inode) as hard links to those entries (their first names, in earlier shares).
    /// A tree that changed since it was planned (another number of entries, or other
    /// frames' lengths where they were planned) is an error: then `out` holds frames that
    /// do not fit where the plan put them, maybe past `planned.bytes`.
    pub fn pack_share(
        mut self,
        share: &Share,
        first: u64,
        planned: &Planned,
        links: &Links,
        out: BorrowedFd<'_>,
    ) -> Result<Shared> {
        self.format = Format::V2;
        self.shared_root()?;
        let sharing = v2::Sharing {
            first,
            links,
            counting: false,
        };
        let (cancel, written) = (self.cancel.clone(), self.written);
        let (summary, wrote) =
            self.run_shared(FdWriter(out, cancel), written, Some((share, sharing)))?;
        let (segs, rows) = wrote.expect("a shared pack says what it wrote");
        share.passed_all()?;
        let changed = |what: String| Error::Argument {
            arg: "the tree".into(),
            problem: format!("changed while it was packed: {what}"),
        };
        if rows.count() != planned.entries {
            let (got, want) = (rows.count(), planned.entries);
            return Err(changed(format!("{got} entries where {want} were planned")));
        }
        if let Some(want) = planned.bytes.filter(|&b| b != segs.at()) {
            return Err(changed(format!(
                "a file changed size since it was planned: its share's segments take {} \
                 bytes where {want} were planned",
                segs.at()
            )));
        }
        Ok(Shared {
            summary,
            bytes: segs.at(),
            index: share_index(&segs, &rows),
        })
    }

    /// Leaves out of the tree the file `archive` (the archive every process writes) and
    /// `replaced` (device and inode of the file it will be renamed over), as a plain pack
    /// leaves out the file it replaces.
    pub fn written_to(
        mut self,
        archive: BorrowedFd<'_>,
        replaced: Option<(u64, u64)>,
    ) -> Result<Self> {
        let stat = fstat(archive).map_err(|e| Error::io("fstat", TreePath::default(), e))?;
        self.written = Some((stat.st_dev, stat.st_ino));
        self.replaced = replaced;
        Ok(self)
    }

    /// The one directory a shared pack takes (its entries at the top), opened again: a
    /// walk reads it to its end, which a duplicate fd would share.
    fn shared_root(&self) -> Result<OwnedFd> {
        match &self.roots[..] {
            [Root {
                name,
                fd,
                members: None,
            }] if name.is_empty() => openat(fd, c".", DIR_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open directory", TreePath::default(), e)),
            _ => Err(Error::Argument {
                arg: "--mpi".into(),
                problem: "packs one directory (its entries at the top of the archive)".into(),
            }),
        }
    }
}

/// The index and the footer of an archive whose shares' [`Shared::index`] are `shares`,
/// in order, their frames written one after the other after the [`HEADER`]; the index is
/// stored as zstd at `zstd` where that is smaller.
pub fn tail(shares: &[&[u8]], zstd: Option<i32>) -> Result<Vec<u8>> {
    shared_tail(shares, zstd.map(Zstd::new).as_mut()).map_err(|problem| Error::Argument {
        arg: "--mpi".into(),
        problem,
    })
}

/// What packing an entry costs beyond its bytes, in bytes, so that a part of many small
/// files weighs more than their bytes: `pack --mpi -n 1` on tmpfs took 15 us an entry
/// (50,000 empty files) against 1.03 ns a byte (one 1 GiB file).
const ENTRY_WEIGHT: u64 = 16 << 10;

/// A sink that weighs the parts a walk with a dealt [`Share`] announces: the bytes of their
/// files (their sizes) and [`ENTRY_WEIGHT`] an entry, a weight for each part dealt, in
/// order (one that announced nothing weighs 0).
struct Weigher<'a> {
    share: &'a Share,
    /// The share's parts are numbered `offset`, `offset + step`, ...
    offset: u64,
    step: u64,
    weights: Vec<u64>,
}

impl Weigher<'_> {
    /// Adds an entry of `bytes` to the part the walk is in.
    fn add(&mut self, bytes: u64) -> Result<()> {
        let nth = ((self.share.seen() - 1 - self.offset) / self.step) as usize;
        if self.weights.len() <= nth {
            self.weights.resize(nth + 1, 0);
        }
        self.weights[nth] = self.weights[nth].saturating_add(ENTRY_WEIGHT + bytes);
        Ok(())
    }
}

impl Sink for Weigher<'_> {
    type Error = Error;

    fn enter_dir(&mut self, _: &Entry<'_>) -> Result<()> {
        self.add(0)
    }
    fn leave_dir(&mut self) -> Result<()> {
        Ok(())
    }
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
        // The bytes it holds (a sparse file's holes cost nothing to pack); a file gone
        // since it was listed weighs as an entry.
        let size = match content {
            Content::Unopened { dir } => statat(dir, entry.name, AtFlags::SYMLINK_NOFOLLOW)
                .map_or(0, |stat| {
                    (stat.st_size as u64).min(stat.st_blocks as u64 * 512)
                }),
            _ => 0,
        };
        self.add(size)
    }
    fn symlink(&mut self, _: &Entry<'_>, _: &[u8]) -> Result<()> {
        self.add(0)
    }
    fn special(&mut self, _: &Entry<'_>, _: Device) -> Result<()> {
        self.add(0)
    }
    // What cannot be read is the plan's to report.
    fn unreadable(&mut self, _: Error) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use rustix::fs::CWD;

    use super::*;

    #[test]
    fn a_part_weighs_its_bytes_and_its_entries() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for dir in ["a/deeper", "b", "d"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("a/deeper/f"), [1; 100]).unwrap();
        std::fs::write(root.join("c"), [2; 5000]).unwrap();
        std::fs::write(root.join("d/g"), b"").unwrap();
        let sparse = std::fs::File::create(root.join("d/sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let pack = || Pack::new(openat(CWD, root, DIR_FLAGS, Mode::empty()).unwrap());
        // Split at the top: the parts a, b, c and d; a sparse file weighs what it holds.
        let e = ENTRY_WEIGHT;
        let all = [3 * e + 100, e, e + 5000, 3 * e];
        for threads in [1, 3] {
            assert_eq!(pack().weigh(1, 0, 1, threads).unwrap(), (4, all.to_vec()));
        }
        // Dealt to 3 processes: the first weighs a and d, the third c.
        assert_eq!(pack().weigh(1, 0, 3, 2).unwrap(), (4, vec![all[0], all[3]]));
        assert_eq!(pack().weigh(1, 2, 3, 1).unwrap(), (4, vec![all[2]]));
        assert_eq!(pack().weigh(1, 5, 3, 1).unwrap(), (4, vec![]));
    }
}
