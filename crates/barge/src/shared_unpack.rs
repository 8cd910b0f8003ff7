//! One version 2 archive landed by several processes (`unpack --mpi`), each a run of its
//! segments ([`SharedUnpack::share`], cut only where no `EXTFILE` runs on, as the index
//! tells). Each process decodes its run from the first segment's `START` (a resumed
//! decoder), its lander first entering (creating, or merging into) the directories that
//! `START` names; it lands everything as one lander does, but that directories get only a
//! mode that lets every process fill them, and hard links whose file is in another
//! process's run wait. Once every process is done, each makes its waiting links by the
//! index's paths ([`SharedUnpack::link`]), and one gives every directory its metadata,
//! children first, from what each process recorded ([`SharedUnpack::finish_dirs`]).

use std::collections::HashSet;
use std::ops::Range;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{linkat, openat, AtFlags, Mode};
use rustix::io::fcntl_dupfd_cloexec;

use crate::error::{Error, Result, TreePath};
use crate::format::index::{Index, RowKind};
use crate::format::{decode_with, Decoder, Event, FormatError, Limits};
use crate::indexed::Seekable;
use crate::interrupt::Cancel;
use crate::land::restore::{Apply, Existing, NotRestored, Policy, Target};
use crate::land::sync::{Setup, SyncLander};
use crate::land::{count, Feed, Land, LandSummary};
use crate::owners::Owners;
use crate::sys::map::populate;
use crate::sys::{DIR_FLAGS, DIR_HANDLE_FLAGS};
use crate::tree::{Content, Device, Entry, Meta, Owner, Sink, Timestamp, Xattrs};
use crate::Progress;

/// A version 2 archive in a file, with its index, to be landed by several processes.
pub struct SharedUnpack<'a> {
    pub(crate) src: Seekable<'a>,
    pub(crate) index: Index,
    pub(crate) limits: Limits,
    pub(crate) policy: Policy,
    pub(crate) owners: Option<std::sync::Arc<Owners>>,
    pub(crate) cancel: Cancel,
}

/// What one process landed ([`SharedUnpack::land_on`]).
#[derive(Debug, Default)]
pub struct Landed {
    /// Its counts (its waiting hard links not yet among them).
    pub summary: LandSummary,
    /// The directories it created and the metadata of those it decoded (the archive's
    /// root's included), for [`SharedUnpack::finish_dirs`] on one process.
    pub dirs: Vec<u8>,
    /// Its hard links whose file another process lands.
    links: Vec<Waiting>,
}

/// A hard link that waits for its file: its directory (names from the root), its name,
/// the link id (entry number) of its file.
type Waiting = (Vec<Box<[u8]>>, Box<[u8]>, u64);

impl SharedUnpack<'_> {
    /// The segments of process `rank` of `ranks`: a run of about an equal share of the
    /// archive's bytes, each run starting at a segment no `EXTFILE` runs into.
    pub fn share(&self, rank: u32, ranks: u32) -> Range<usize> {
        let segs = self.index.segments();
        let Some(last) = segs.last() else {
            return 0..0;
        };
        // Segments an EXTFILE's extents may run into: after its own, up to the next entry's.
        let mut open = vec![false; segs.len()];
        let mut rows = self.index.rows();
        let mut extfile: Option<usize> = None;
        while let Some(row) = rows.next_row() {
            let segment = row.segment as usize;
            if let Some(from) = extfile.take() {
                open[from + 1..=segment].iter_mut().for_each(|o| *o = true);
            }
            extfile = (row.kind == RowKind::ExtFile).then_some(segment);
        }
        if let Some(from) = extfile {
            open[from + 1..].iter_mut().for_each(|o| *o = true);
        }
        let starts: Vec<u64> = segs.iter().map(|seg| seg.at).collect();
        run(
            &starts,
            last.at + last.frame_len() as u64,
            &open,
            rank,
            ranks,
        )
    }

    /// Lands the segments of process `rank` of `ranks` below `root` (the destination,
    /// which every process opened) on `threads` threads, each landing a run of its own as
    /// if `ranks * threads` processes shared the archive; reports to `progress`.
    pub fn land_on(
        &self,
        root: &OwnedFd,
        (rank, ranks): (u32, u32),
        threads: u32,
        progress: &Progress,
    ) -> Result<Landed> {
        let threads = threads.max(1);
        let landed: Vec<Result<Landed>> = std::thread::scope(|scope| {
            let landers: Vec<_> = (0..threads)
                .map(|t| {
                    let segments = self.share(rank * threads + t, ranks * threads);
                    let root = fcntl_dupfd_cloexec(root, 0)
                        .map_err(|e| Error::io("dup directory", TreePath::default(), e));
                    scope.spawn(move || self.land(root?, segments, progress))
                })
                .collect();
            landers
                .into_iter()
                .map(|lander| lander.join().expect("no panics"))
                .collect()
        });
        let mut all = Landed::default();
        for landed in landed {
            let landed = landed?;
            all.summary.add(&landed.summary);
            all.dirs.extend(landed.dirs);
            all.links.extend(landed.links);
        }
        Ok(all)
    }

    /// Lands the `segments` below `root` (the destination, which every process opened),
    /// reporting to `progress`.
    fn land(&self, root: OwnedFd, segments: Range<usize>, progress: &Progress) -> Result<Landed> {
        let setup = Setup::new(self.policy, self.cancel.clone());
        let mut sink = Ranked {
            land: SyncLander::new(root, setup),
            at: Vec::new(),
            positioned: 0,
            landed: Landed::default(),
        };
        if segments.is_empty() {
            return Ok(sink.landed);
        }
        let mut feed = Feed::new(0, self.cancel.clone())
            .owners(self.owners.clone())
            .listener(progress.listener());
        let segs = self.index.segments();
        let seg = segs[segments.start];
        let linked = self.index.linked();
        let mut decoder = Decoder::resume(
            self.limits,
            seg.at,
            segments.start as u32,
            seg.first,
            linked,
        );
        let mut started = false;
        let mut run = || -> Result<()> {
            // The share's frames, mapped in at once (plain unpack maps its archive too).
            let last = segs[segments.end - 1];
            let start = seg.at;
            let mapped = self.src.map(start..last.at + last.frame_len() as u64)?;
            populate(mapped.bytes());
            for seg in &segs[segments.clone()] {
                let at = (seg.at - start) as usize;
                let frame = &mapped.bytes()[at..at + seg.frame_len()];
                let used = decode_with(&mut decoder, frame, false, |decoder, event| {
                    if !started && matches!(event, Event::Segment) {
                        started = true;
                        for name in decoder.dir_names() {
                            sink.enter(name)?;
                            sink.positioned += 1;
                        }
                    }
                    count(progress, &event);
                    feed.event(event, decoder.owner_names(), &mut sink)
                })?;
                if used != frame.len() {
                    return Err(decoder.frame_error(FormatError::Truncated));
                }
            }
            // A directory whose entries the next process lands.
            if feed.holding() {
                feed.enter_held(&mut sink)?;
            }
            feed.ended()
        };
        match run() {
            Ok(()) => sink.finish()?,
            Err(e) => return Err(sink.abort(e)),
        }
        sink.landed.summary = sink.land.summary();
        sink.landed.summary.dirs -= sink.positioned;
        Ok(sink.landed)
    }

    /// Makes the hard links of `landed` that waited for another process's file, below
    /// `root`, once every process has landed; how many it made.
    pub fn link(&self, root: &OwnedFd, landed: &Landed) -> Result<u64> {
        for (dir, name, target) in &landed.links {
            let mut rows = self.index.rows_at(*target);
            let row = rows.next_row().ok_or_else(|| self.bad_index())?;
            let mut names: Vec<Box<[u8]>> = row.path.split(|&b| b == b'/').map(Box::from).collect();
            let file = names.pop().expect("a path has a name");
            let path = || TreePath::join(dir.iter().map(|n| &n[..]), name);
            let error = |op, e| Error::io(op, path(), e);
            let from = open_path(root, &names).map_err(|e| error("open directory", e))?;
            let to = open_path(root, dir).map_err(|e| error("open directory", e))?;
            let (from, to) = (fd_or(root, &from), fd_or(root, &to));
            linkat(from, &file[..], to, &name[..], AtFlags::empty())
                .map_err(|e| error("linkat", e))?;
        }
        Ok(landed.links.len() as u64)
    }

    /// Gives the directories below `root` their metadata once every process has landed:
    /// `records` are every process's [`Landed::dirs`]. A directory gets the archive's
    /// metadata where some process created it (or, with `--overwrite`, where it was there),
    /// the root where the destination is `new`; children before parents.
    pub fn finish_dirs(
        &self,
        root: &OwnedFd,
        records: &[Vec<u8>],
        new: bool,
    ) -> Result<NotRestored> {
        let mut created = HashSet::new();
        let mut dirs = Vec::new();
        for bytes in records {
            read_records(bytes, &mut created, &mut dirs).ok_or_else(|| Error::Argument {
                arg: "--mpi".into(),
                problem: "a process sent directory records that do not read".into(),
            })?;
        }
        // Path order, reversed: children before parents, the root last.
        dirs.sort_by(|a, b| b.0.cmp(&a.0));
        let mut skipped = NotRestored::default();
        for (names, meta, xattrs) in &dirs {
            let merged = !created.contains(names) && !names.is_empty();
            let apply = match (names.is_empty(), merged) {
                (true, _) => new,
                (false, true) => self.policy.existing() == Existing::Overwrite,
                (false, false) => true,
            };
            if !apply {
                continue;
            }
            let (parent, name) = names.split_at(names.len().saturating_sub(1));
            let path = || TreePath::join(names.iter().map(|n| &n[..]), &[]);
            let error = |op, e| Error::io(op, path(), e);
            let dir = match name.first() {
                None => None,
                Some(name) => {
                    let parent = open_path(root, parent).map_err(|e| error("open directory", e))?;
                    let at = fd_or(root, &parent);
                    Some(
                        openat(at, &name[..], DIR_FLAGS, Mode::empty())
                            .map_err(|e| error("open directory", e))?,
                    )
                }
            };
            let fd = fd_or(root, &dir);
            let entry = Entry {
                xattrs: Xattrs(xattrs),
                ..Entry::dir(name.first().map_or(b".", |n| &n[..]), *meta)
            };
            let apply = self.policy.entry(&entry, &mut skipped);
            let now = Apply {
                mtime: None,
                ..apply
            };
            self.policy
                .restore(Target::Fd(fd), &now, entry.xattrs, &mut skipped, path)?;
            let mode = match merged {
                true => self.policy.merged_dir_mode(&apply),
                false => Some(self.policy.final_dir_mode(&apply)),
            };
            self.policy.finish_dir(
                Target::Fd(fd),
                (mode, apply.mtime),
                merged,
                &mut skipped,
                path,
            )?;
        }
        Ok(skipped)
    }

    fn bad_index(&self) -> Error {
        Error::Format {
            offset: self.index.at(),
            path: TreePath::default(),
            kind: FormatError::BadIndex,
        }
    }
}

/// The run of segments of process `rank` of `ranks`, of segments starting at `starts`
/// (the last ending at `end`), where those `open` may not begin a run: each run starts at
/// the first segment at or past the process's share of the bytes that may.
fn run(starts: &[u64], end: u64, open: &[bool], rank: u32, ranks: u32) -> Range<usize> {
    let total = end - starts[0];
    let start = |r: u32| match r {
        0 => 0,
        r => {
            let at = starts[0] + total * u64::from(r) / u64::from(ranks);
            (0..starts.len())
                .find(|&k| starts[k] >= at && !open[k])
                .unwrap_or(starts.len())
        }
    };
    let last = if rank + 1 >= ranks {
        starts.len()
    } else {
        start(rank + 1)
    };
    start(rank).min(last)..last
}

/// The directory `names` below `root`, opened one name at a time without following
/// symlinks (`None`: the root itself).
fn open_path(root: &OwnedFd, names: &[Box<[u8]>]) -> rustix::io::Result<Option<OwnedFd>> {
    let mut dir: Option<OwnedFd> = None;
    for name in names {
        let at = fd_or(root, &dir);
        dir = Some(openat(at, &name[..], DIR_HANDLE_FLAGS, Mode::empty())?);
    }
    Ok(dir)
}

fn fd_or<'a>(root: &'a OwnedFd, dir: &'a Option<OwnedFd>) -> std::os::fd::BorrowedFd<'a> {
    dir.as_ref().map_or(root.as_fd(), |d| d.as_fd())
}

/// A process's lander in a shared unpack: a [`SyncLander`] whose directories are created
/// with a mode that lets every process fill them, and which records what
/// [`SharedUnpack::finish_dirs`] and [`SharedUnpack::link`] need.
struct Ranked {
    land: SyncLander,
    /// The names of the directories the lander is in, from the root.
    at: Vec<Box<[u8]>>,
    /// Directories entered where the first segment's `START` says (not entries of its own).
    positioned: u64,
    landed: Landed,
}

/// Record tags in [`Landed::dirs`].
const CREATED: u8 = 0;
const META: u8 = 1;

impl Ranked {
    /// Enters (creating, or merging into) the directory `name`, owner rwx only for now.
    fn enter(&mut self, name: &[u8]) -> Result<()> {
        let created = self.land.enter(&Entry::dir(name, Meta::with_mode(0o700)))?;
        self.at.push(name.into());
        if created {
            self.record(CREATED);
        }
        Ok(())
    }

    /// Records the current directory's path, tagged `tag`.
    fn record(&mut self, tag: u8) {
        let path = TreePath::join(self.at.iter().map(|n| &n[..]), &[]).0;
        let out = &mut self.landed.dirs;
        out.push(tag);
        out.extend((path.len() as u32).to_le_bytes());
        out.extend(path);
    }

    /// Records the metadata of the directory at the current path.
    fn record_meta(&mut self, meta: &Meta, xattrs: Xattrs<'_>) {
        self.record(META);
        let out = &mut self.landed.dirs;
        out.extend(meta.mode.to_le_bytes());
        let time = meta.mtime.map(|t| (t.sec, t.nsec));
        let owner = meta.owner.map(|o| (o.uid, o.gid));
        out.push(u8::from(time.is_some()) | u8::from(owner.is_some()) << 1);
        let (sec, nsec) = time.unwrap_or_default();
        let (uid, gid) = owner.unwrap_or_default();
        out.extend(sec.to_le_bytes());
        for n in [nsec, uid, gid, xattrs.0.len() as u32] {
            out.extend(n.to_le_bytes());
        }
        out.extend(xattrs.0);
    }
}

/// A directory's path (names), metadata and extended attributes, as recorded.
type DirRecord = (Vec<Box<[u8]>>, Meta, Vec<u8>);

/// Reads [`Landed::dirs`] into the paths of directories `created` and the `dirs` with
/// metadata; `None` where the bytes are not such records.
fn read_records(
    mut bytes: &[u8],
    created: &mut HashSet<Vec<Box<[u8]>>>,
    dirs: &mut Vec<DirRecord>,
) -> Option<()> {
    fn take<'b>(bytes: &mut &'b [u8], n: usize) -> Option<&'b [u8]> {
        let (head, rest) = (bytes.get(..n)?, bytes.get(n..)?);
        *bytes = rest;
        Some(head)
    }
    let u32_of = |bytes: &mut &[u8]| Some(u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?));
    while let Some(&tag) = bytes.first() {
        bytes = &bytes[1..];
        let len = u32_of(&mut bytes)? as usize;
        let path = take(&mut bytes, len)?;
        let names: Vec<Box<[u8]>> = match path.is_empty() {
            true => Vec::new(),
            false => path.split(|&b| b == b'/').map(Box::from).collect(),
        };
        if tag == CREATED {
            created.insert(names);
            continue;
        }
        let mode = u32_of(&mut bytes)?;
        let has = *take(&mut bytes, 1)?.first()?;
        let sec = i64::from_le_bytes(take(&mut bytes, 8)?.try_into().ok()?);
        let [nsec, uid, gid, xlen] = [(); 4].map(|()| u32_of(&mut bytes));
        let xattrs = take(&mut bytes, xlen? as usize)?.to_vec();
        let meta = Meta {
            mode,
            mtime: (has & 1 != 0).then_some(Timestamp { sec, nsec: nsec? }),
            owner: (has & 2 != 0).then_some(Owner {
                uid: uid?,
                gid: gid?,
            }),
        };
        dirs.push((names, meta, xattrs));
    }
    Some(())
}

impl Sink for Ranked {
    type Error = Error;

    fn enter_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.enter(dir.name)?;
        self.record_meta(&dir.meta, dir.xattrs);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.at.pop();
        self.land.leave_dir()
    }

    /// An empty directory gets its metadata at once: no process lands anything in it.
    fn empty_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.land.empty_dir(dir)
    }

    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
        self.land.file(entry, content)
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        self.land.data(data)
    }

    fn hole(&mut self, len: u64) -> Result<()> {
        self.land.hole(len)
    }

    /// The archive's root's metadata, for the destination.
    fn root(&mut self, meta: &Meta, xattrs: Xattrs<'_>) -> Result<()> {
        self.record_meta(meta, xattrs);
        Ok(())
    }

    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<()> {
        self.land.symlink(entry, target)
    }

    /// A link to a file this lander made is made now; to one of another process, later.
    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<()> {
        if self.land.link_target(target).is_some() {
            return self.land.hard_link(entry, target);
        }
        let link = (self.at.clone(), entry.name.into(), target);
        self.landed.links.push(link);
        Ok(())
    }

    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        self.land.special(entry, device)
    }

    fn abort(&mut self, cause: Error) -> Error {
        self.land.abort(cause)
    }

    /// Leaves the directories it is in (their metadata comes later).
    fn finish(&mut self) -> Result<()> {
        while !self.at.is_empty() {
            self.leave_dir()?;
        }
        self.land.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_follow_each_other_by_bytes_and_begin_where_no_extents_run_on() {
        let runs = |starts: &[u64], end, open: &[bool], ranks| -> Vec<Range<usize>> {
            (0..ranks)
                .map(|r| run(starts, end, open, r, ranks))
                .collect()
        };
        let even = [8, 108, 208, 308];
        assert_eq!(runs(&even, 408, &[false; 4], 2), [0..2, 2..4]);
        assert_eq!(runs(&even, 408, &[false; 4], 4), [0..1, 1..2, 2..3, 3..4]);
        // A sparse file's extents run into segment 2: it goes with the run before.
        let open = [false, false, true, false];
        assert_eq!(runs(&even, 408, &open, 2), [0..3, 3..4]);
        // By bytes: a big first segment is a run of its own.
        assert_eq!(runs(&[8, 900, 910, 920], 930, &[false; 4], 2), [0..1, 1..4]);
        // More processes than segments: some have none.
        assert_eq!(
            runs(&[8, 108], 208, &[false; 2], 4),
            [0..1, 1..1, 1..2, 2..2]
        );
        assert_eq!(run(&even, 408, &[false; 4], 0, 1), 0..4);
    }
}
