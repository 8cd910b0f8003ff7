//! One version 2 archive packed by several processes (`pack --mpi`), each a [`Share`] of
//! the tree. Every process counts the parts and plans those dealt to it, each apart
//! ([`Pack::plan_parts`]: its entries, the files of several links it names, and the length
//! of its frames stored raw, which are cut where parts begin so that a part's length is its
//! own wherever it lands), learns every part's plan from the others and cuts the runs by
//! their weights ([`crate::share::cut_runs`]); the parts before its run say where its
//! entries start and which of its files of several links were named before it, and its
//! parts sum to its plan ([`plan_run`]; planned again where a part names first a file a
//! part before it names too: [`Pack::plan_share_of`]). Then it packs its share's frames
//! ([`Pack::pack_share`], with the stats its parts' plans read: [`FileStats`]) where the
//! shares before it end: straight into the archive when
//! their lengths were planned, else (zstd) into a file of its own, copied there after. One
//! process writes the [`HEADER`] and, from every share's [`Shared::index`], the index and
//! the footer ([`tail`]). The archive is a valid one whatever the number of processes: its
//! entries in path order, links to earlier entries across shares.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{fstat, openat, Mode, Statx};

use super::{v2, Format, Pack, PackSummary};
use crate::error::{Error, Result, TreePath};
use crate::format::segments::{share_index, shared_tail, Zstd};
use crate::format::HEADER_V2;
use crate::output::FdWriter;
use crate::share::Share;
use crate::sys::{blank_statx, DIR_FLAGS};
use crate::walk::Root;
use crate::Progress;

/// Entry numbers of files of several links, by device and inode.
pub type Links = HashMap<(u64, u64), u64>;

/// The first bytes of the archive, before the first share's.
pub const HEADER: [u8; 8] = HEADER_V2;

/// What planning a share found ([`Pack::plan_share`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// What planning one part apart found ([`Pack::plan_parts`]): the part with the directories
/// above the parts that follow it up to the next part (the first part also with the
/// root's records and what comes before it), as it would be planned at the start of a
/// share. Its frames, stored raw, are cut where it begins and where the next begins, so
/// their length is its own wherever it lands; only a file of several links that a part
/// before it names too makes them shorter (a hard link there).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartPlan {
    /// Its entries.
    pub entries: u64,
    /// The length of its frames stored raw.
    pub bytes: u64,
    /// The files of several links it names, by device and inode, with the number of the
    /// first entry naming each (counted from 0 for the part's first).
    pub links: Vec<((u64, u64), u64)>,
}

impl PartPlan {
    /// What packing the part costs, to cut the runs by ([`crate::share::cut_runs`]): its
    /// frames' bytes, and 16 KiB an entry.
    pub fn weight(&self) -> u64 {
        self.bytes
            .saturating_add(self.entries.saturating_mul(ENTRY_WEIGHT))
    }
}

/// The metadata (`statx`) of the regular files a plan of parts read, in walk order with
/// their paths from the root, so that the pack of those files does not read it again
/// ([`Pack::pack_share`]): one stat a file, as dtar packs from the list its walk made.
/// Records that concatenate: the stats of the parts of a run, in order, are one value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileStats(Vec<u8>);

/// The most bytes of [`FileStats`] a process keeps from its plans: about 2.5 million
/// files' worth (the files after are stat'ed again by their pack).
const STATS_KEPT: usize = 256 << 20;

/// The bytes of a [`FileStats`] record after its path.
const STAT_RECORD: usize = 2 + 4 * 3 + 8 * 3 + 4 * 2 + 8 + 4;

impl FileStats {
    /// Its records, to send to the process that packs the files.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The stats of all `parts` (each as [`FileStats::as_bytes`] gave it), in order, as one
    /// value.
    pub fn joined<'p>(parts: impl IntoIterator<Item = &'p [u8]>) -> FileStats {
        let mut all = Vec::new();
        for part in parts {
            all.extend_from_slice(part);
        }
        FileStats(all)
    }

    /// Adds the file at `path` (from the root) as `st` describes it.
    pub(crate) fn push(&mut self, path: &[u8], st: &Statx) {
        let Ok(len) = u16::try_from(path.len()) else {
            // A path that long is stat'ed again by the pack.
            return;
        };
        let out = &mut self.0;
        out.extend(len.to_le_bytes());
        out.extend_from_slice(path);
        out.extend(st.stx_mode.to_le_bytes());
        for n in [st.stx_nlink, st.stx_uid, st.stx_gid] {
            out.extend(n.to_le_bytes());
        }
        for n in [st.stx_size, st.stx_blocks, st.stx_ino] {
            out.extend(n.to_le_bytes());
        }
        for n in [st.stx_dev_major, st.stx_dev_minor] {
            out.extend(n.to_le_bytes());
        }
        out.extend(st.stx_mtime.tv_sec.to_le_bytes());
        out.extend(st.stx_mtime.tv_nsec.to_le_bytes());
    }
}

/// The records of a [`FileStats`] not taken yet, taken in walk order
/// ([`KnownStats::take`]).
pub(crate) struct KnownStats<'s> {
    rest: &'s [u8],
}

impl<'s> KnownStats<'s> {
    pub(crate) fn new(stats: &'s FileStats) -> KnownStats<'s> {
        KnownStats { rest: &stats.0 }
    }

    /// The stat of the file at `path` (from the root), when the records have it next;
    /// records of files a walk passed without finding them (removed since) are dropped. A
    /// record cut short (which no [`FileStats::push`] writes) ends them.
    pub(crate) fn take(&mut self, path: &[u8]) -> Option<Statx> {
        let components = |p: &'s [u8]| p.split(|&b| b == b'/');
        loop {
            let (len, after) = self.rest.split_first_chunk::<2>()?;
            let len = usize::from(u16::from_le_bytes(*len));
            if after.len() < len + STAT_RECORD {
                self.rest = &[];
                return None;
            }
            let (next, record) = after.split_at(len);
            // Walk order: the entries of a directory by name, each directory's before the
            // next name.
            match components(next).cmp(path.split(|&b| b == b'/')) {
                std::cmp::Ordering::Less => self.rest = &record[STAT_RECORD..],
                std::cmp::Ordering::Greater => return None,
                std::cmp::Ordering::Equal => {
                    self.rest = &record[STAT_RECORD..];
                    return Some(stat_of(&record[..STAT_RECORD]));
                }
            }
        }
    }
}

/// The `statx` a record (after its path) holds: the fields a pack uses, the others 0.
fn stat_of(mut record: &[u8]) -> Statx {
    // The record's next N bytes (a record is STAT_RECORD long).
    fn next<const N: usize>(record: &mut &[u8]) -> [u8; N] {
        let (bytes, rest) = record.split_first_chunk::<N>().expect("a whole record");
        *record = rest;
        *bytes
    }
    let mut st = blank_statx();
    st.stx_mode = u16::from_le_bytes(next(&mut record));
    for field in [&mut st.stx_nlink, &mut st.stx_uid, &mut st.stx_gid] {
        *field = u32::from_le_bytes(next(&mut record));
    }
    for field in [&mut st.stx_size, &mut st.stx_blocks, &mut st.stx_ino] {
        *field = u64::from_le_bytes(next(&mut record));
    }
    for field in [&mut st.stx_dev_major, &mut st.stx_dev_minor] {
        *field = u32::from_le_bytes(next(&mut record));
    }
    st.stx_mtime.tv_sec = i64::from_le_bytes(next(&mut record));
    st.stx_mtime.tv_nsec = u32::from_le_bytes(next(&mut record));
    st
}

/// The plan of a run of parts, from its parts' ([`plan_run`]).
#[derive(Debug, PartialEq, Eq)]
pub struct RunPlan {
    /// The number of its first entry.
    pub first: u64,
    /// The files of several links named before it: their entry numbers by device and inode.
    pub earlier: Links,
    /// The sum of its parts' plans.
    pub planned: Planned,
    /// Whether that is its plan: not where, stored raw, a part names first a file of several
    /// links that one before it names too (a hard link there: shorter frames).
    pub holds: bool,
}

/// The plan of the run of parts `run` in a tree whose parts were planned as `plans` (in
/// order, [`Pack::plan_parts`]; one for a tree without parts), stored `raw` or not.
pub fn plan_run(plans: &[PartPlan], run: Range<usize>, raw: bool) -> RunPlan {
    let (mut first, mut earlier, mut named) = (0, Links::new(), Links::new());
    let (mut entries, mut bytes, mut holds) = (0, 0, true);
    for (at, part) in plans.iter().enumerate().take(run.end) {
        let mine = run.contains(&at);
        for &(key, number) in &part.links {
            match earlier.contains_key(&key) || (mine && named.contains_key(&key)) {
                true => holds &= !mine,
                false if mine => _ = named.insert(key, entries + number),
                false => _ = earlier.insert(key, first + number),
            }
        }
        match mine {
            true => (entries, bytes) = (entries + part.entries, bytes + part.bytes),
            false => first += part.entries,
        }
    }
    let planned = Planned {
        entries,
        links: named,
        bytes: raw.then_some(bytes),
    };
    RunPlan {
        first,
        earlier,
        planned,
        holds: holds || !raw,
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
    /// The files whose metadata the pack read: those its stats lacked.
    pub stated: u64,
}

impl Pack<'_> {
    /// The tree's parts, split at depth `split` ([`crate::share`]), as a walk finds them
    /// (every process finds the same in a tree that does not change meanwhile), and the
    /// plans of those numbered `process`, `process + processes`, ... in that order, each
    /// planned apart ([`PartPlan`]; with the root's records and what comes before the first
    /// part, the first), with the metadata of each one's files ([`FileStats`]), on
    /// `threads` threads that each walk every `threads`-th of them. No file is read (but
    /// sparse ones of at most 64 KiB).
    pub fn plan_parts(
        &self,
        split: usize,
        process: u32,
        processes: u32,
        threads: usize,
    ) -> Result<(u64, Vec<PartPlan>, Vec<FileStats>)> {
        let (processes, threads) = (u64::from(processes.max(1)), threads.max(1) as u64);
        let prune = HashSet::new();
        type Planned = (u64, Vec<(PartPlan, FileStats)>);
        let planned: Vec<Result<Planned>> = std::thread::scope(|scope| {
            let walks: Vec<_> = (0..threads)
                .map(|thread| {
                    let walk = self.walk(&prune);
                    scope.spawn(move || {
                        let offset = u64::from(process) + processes * thread;
                        let share = Share::dealt(split, offset, processes * threads);
                        let root_records = share.first().then(|| self.shared_root());
                        let (root, progress) = (self.shared_root()?, Progress::default());
                        let none = Links::new();
                        let settings = self.plan_settings(&progress, 0, &none, None);
                        let root_records = root_records.transpose()?;
                        let room = STATS_KEPT / threads as usize;
                        let plans = v2::plan_parts(settings, root_records, room, |p| {
                            walk.share(&share).run(root, p)
                        })?;
                        Ok((share.seen(), plans))
                    })
                })
                .collect();
            walks
                .into_iter()
                .map(|w| w.join().expect("a planning walk"))
                .collect()
        });
        let planned = planned.into_iter().collect::<Result<Vec<_>>>()?;
        let parts = planned[0].0;
        // A tree without parts is one unit ([`Share`]).
        let units = parts.max(1);
        let dealt = |offset: u64| units.saturating_sub(offset).div_ceil(processes * threads);
        let changed = planned.iter().enumerate().any(|(thread, (p, plans))| {
            let offset = u64::from(process) + processes * thread as u64;
            *p != parts || plans.len() as u64 != dealt(offset)
        });
        if changed {
            return Err(Error::Argument {
                arg: "the tree".into(),
                problem: "its top levels changed while they were walked".into(),
            });
        }
        // Thread t planned this process's parts t, t + threads, ...: dealt back in order.
        let mut planned: Vec<_> = planned.into_iter().map(|(_, p)| p.into_iter()).collect();
        let mine = units.saturating_sub(u64::from(process)).div_ceil(processes);
        let (plans, stats) = (0..mine)
            .map(|k| planned[(k % threads) as usize].next().expect("counted"))
            .unzip();
        Ok((parts, plans, stats))
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
    /// links (see [`Pack::pack_share`]; a first plan knows none: 0 and no links), the files
    /// in `stats` as a plan of their parts found them.
    pub fn plan_share(
        &self,
        share: &Share,
        (first, links): (u64, &Links),
        stats: &FileStats,
    ) -> Result<Planned> {
        let progress = Progress::default();
        let settings = self.plan_settings(&progress, first, links, Some(stats));
        // The first share carries the root directory's records, as packed.
        let root_records = share.first().then(|| self.shared_root()).transpose()?;
        let root = self.shared_root()?;
        let prune = HashSet::new();
        let walk = self.walk(&prune).share(share);
        let planned = v2::plan(settings, root_records, |planner| walk.run(root, planner))?;
        share.passed_all()?;
        Ok(planned)
    }

    /// The plan of `share`, the run of parts `run` sums: `run`'s where it holds, else the
    /// share planned again; an error where the tree changed since its parts were planned
    /// (another number of entries, which would number the next shares' wrongly).
    /// `stats`: of the files of the run's parts ([`Pack::pack_share`]).
    pub fn plan_share_of(
        &self,
        share: &Share,
        run: &RunPlan,
        stats: &FileStats,
    ) -> Result<Planned> {
        if run.holds {
            return Ok(run.planned.clone());
        }
        let planned = self.plan_share(share, (run.first, &run.earlier), stats)?;
        match planned.entries == run.planned.entries {
            true => Ok(planned),
            false => Err(Error::Argument {
                arg: "the tree".into(),
                problem: format!(
                    "changed while it was packed: {} entries where {} were planned",
                    planned.entries, run.planned.entries
                ),
            }),
        }
    }

    /// How a share of this pack is planned: its entries numbered from `first`, the files of
    /// several links in `links` hard links, the files in `known` as their stats say.
    fn plan_settings<'s>(
        &self,
        progress: &'s Progress,
        first: u64,
        links: &'s Links,
        known: Option<&'s FileStats>,
    ) -> v2::Settings<'s> {
        v2::Settings {
            archive: self.archive,
            zstd: (self.zstd > 0).then_some(self.zstd),
            threads: 1,
            target: self.segment_target as usize,
            itself: [self.written, self.replaced],
            listing: None,
            progress,
            cancel: self.cancel.clone(),
            sharing: Some(v2::Sharing {
                first,
                links,
                counting: true,
                known,
            }),
        }
    }

    /// Packs the frames of `share` into `out` (at its offset), as `planned`: its entries
    /// numbered from `first`, with the files of several links in `links` (by device and
    /// inode) as hard links to those entries (their first names, in earlier shares), the
    /// files in `stats` as their plan found them (their metadata not read again: a file
    /// changed since is packed with that metadata, and its size as planned).
    /// A tree that changed since it was planned (another number of entries, or other
    /// frames' lengths where they were planned) is an error: then `out` holds frames that
    /// do not fit where the plan put them, maybe past `planned.bytes`.
    pub fn pack_share(
        mut self,
        share: &Share,
        (first, planned): (u64, &Planned),
        links: &Links,
        stats: &FileStats,
        out: BorrowedFd<'_>,
    ) -> Result<Shared> {
        self.format = Format::V2;
        self.shared_root()?;
        let sharing = v2::Sharing {
            first,
            links,
            counting: false,
            known: Some(stats),
        };
        let (cancel, written) = (self.cancel.clone(), self.written);
        let (summary, wrote) =
            self.run_shared(FdWriter(out, cancel), written, Some((share, sharing)))?;
        let (segs, rows, stated) = wrote.expect("a shared pack says what it wrote");
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
            stated,
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

#[cfg(test)]
mod tests {
    use rustix::fs::CWD;

    use super::*;

    #[test]
    fn parts_are_planned_apart() {
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
        // Split at the top: the parts a, b, c and d (the first with the root's records).
        let (parts, all, stats) = pack().plan_parts(1, 0, 1, 1).unwrap();
        let entries: Vec<u64> = all.iter().map(|p| p.entries).collect();
        assert_eq!((parts, entries), (4, vec![3, 1, 1, 3]));
        // With each part, the metadata of its files, in walk order.
        let paths = |stats: &FileStats| {
            let (mut rest, mut paths) = (stats.as_bytes(), Vec::new());
            while let Some((len, after)) = rest.split_first_chunk::<2>() {
                let (path, record) = after.split_at(usize::from(u16::from_le_bytes(*len)));
                paths.push(String::from_utf8(path.to_vec()).unwrap());
                rest = &record[STAT_RECORD..];
            }
            paths
        };
        let want = [&["a/deeper/f"][..], &[], &["c"], &["d/g", "d/sparse"]];
        assert_eq!(stats.iter().map(paths).collect::<Vec<_>>(), want);
        let mut known = KnownStats::new(&stats[2]);
        let c = known.take(b"c").unwrap();
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::symlink_metadata(root.join("c")).unwrap();
        assert_eq!(
            (c.stx_size, c.stx_ino, c.stx_mode),
            (5000, meta.ino(), meta.mode() as u16)
        );
        let mtime = (c.stx_mtime.tv_sec, c.stx_mtime.tv_nsec as i64);
        assert_eq!(mtime, (meta.mtime(), meta.mtime_nsec()));
        // Taken in walk order: a file the walk passes without finding is dropped, one it
        // has not come to is kept.
        let mut known = KnownStats::new(&stats[3]);
        assert!(known.take(b"d/f").is_none());
        assert!(known.take(b"d/sparse").is_some());
        assert!(known.take(b"d/g").is_none());
        let planned = |r: (u64, Vec<PartPlan>, Vec<FileStats>)| (r.0, r.1);
        // A file's bytes are in its part's frames; a sparse file's holes are not.
        assert!((5000..6000).contains(&all[2].bytes), "{all:?}");
        assert!(all[3].bytes < 1000, "{all:?}");
        assert!(all[2].weight() > all[1].weight() + 5000);
        // On threads, or dealt to 3 processes: the same plans.
        assert_eq!(
            planned(pack().plan_parts(1, 0, 1, 3).unwrap()),
            (4, all.clone())
        );
        let dealt = planned(pack().plan_parts(1, 0, 3, 2).unwrap());
        assert_eq!(dealt, (4, vec![all[0].clone(), all[3].clone()]));
        assert_eq!(
            planned(pack().plan_parts(1, 2, 3, 1).unwrap()),
            (4, vec![all[2].clone()])
        );
        assert_eq!(planned(pack().plan_parts(1, 5, 3, 1).unwrap()), (4, vec![]));
        // Their frames are those of the whole share, stored raw.
        let share = Share::new(0, 1, &[0, 4]);
        let none = (0, &Links::new());
        let whole = pack()
            .plan_share(&share, none, &FileStats::default())
            .unwrap();
        let sum: u64 = all.iter().map(|p| p.bytes).sum();
        assert_eq!((whole.entries, whole.bytes), (8, Some(sum)));
        // A tree without parts is one, the root's records.
        let empty = tempfile::tempdir().unwrap();
        let pack = Pack::new(openat(CWD, empty.path(), DIR_FLAGS, Mode::empty()).unwrap());
        let (parts, plans, _) = pack.plan_parts(1, 0, 2, 1).unwrap();
        assert_eq!((parts, plans.len(), plans[0].entries), (0, 1, 0));
        assert!(plans[0].bytes > 0);
    }

    #[test]
    fn a_run_begins_where_the_parts_before_end() {
        let (k1, k2) = ((1, 10), (1, 20));
        let part = |entries, bytes, links: &[((u64, u64), u64)]| PartPlan {
            entries,
            bytes,
            links: links.to_vec(),
        };
        let plans = [
            part(3, 100, &[(k1, 1)]),
            part(2, 50, &[]),
            part(4, 70, &[(k1, 0), (k2, 2)]),
            part(1, 10, &[(k2, 0)]),
        ];
        let planned = |entries, bytes, links: &[((u64, u64), u64)]| Planned {
            entries,
            bytes,
            links: links.iter().copied().collect(),
        };
        let run = |run, raw| {
            let plan = plan_run(&plans, run, raw);
            let mut earlier: Vec<_> = plan.earlier.into_iter().collect();
            earlier.sort();
            (plan.first, earlier, plan.holds.then_some(plan.planned))
        };
        assert_eq!(
            run(0..2, true),
            (0, vec![], Some(planned(5, Some(150), &[(k1, 1)])))
        );
        assert_eq!(
            run(1..2, true),
            (3, vec![(k1, 1)], Some(planned(2, Some(50), &[])))
        );
        // A part names first a file named before the run: planned again.
        assert_eq!(run(2..4, true), (5, vec![(k1, 1)], None));
        assert_eq!(run(3..4, true), (9, vec![(k1, 1), (k2, 7)], None));
        // Or one an earlier part of the run names: the frames are shorter, raw.
        let twice = [part(1, 10, &[(k1, 0)]), part(1, 10, &[(k1, 0)])];
        assert!(!plan_run(&twice, 0..2, true).holds);
        assert_eq!(
            plan_run(&twice, 0..1, true).planned,
            planned(1, Some(10), &[(k1, 0)])
        );
        // As zstd, no frame's length is planned: the plan holds.
        assert_eq!(run(2..4, false).2, Some(planned(5, None, &[(k2, 2)])));
        assert_eq!(
            run(4..4, true),
            (10, vec![(k1, 1), (k2, 7)], Some(planned(0, Some(0), &[])))
        );
    }
}
