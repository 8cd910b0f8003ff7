//! Planning batches: the [`Parser`] decodes the archive through the [`Feed`] into a
//! [`Planner`], which turns the entries into the operations of batches for the landers.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::worker::crowd;
use super::{copied, frames, Batch, Decoding, Deferred, DirStep, Failure, Here, Last, Leaf};
use super::{Link, Name, Op, Source, Worker, BATCH_COST, BYTES_PER_UNIT, MIN_BATCH_COST};
use crate::error::{Error, Result};
use crate::format::{Decoder, Event, FormatError, Step};
use crate::interrupt::Cancel;
use crate::land::restore::Policy;
use crate::land::{Feed, Land, LandSummary};
use crate::source::ByteStream;
use crate::tree::{Content, Device, Entry, Meta, Sink, Xattrs};

/// Where a [`Parser::run`] over the input it was given stopped.
pub(super) enum Parsed {
    /// An earlier failure stopped it.
    Stopped,
    /// At this offset, where the input holds no whole message (a cut one, the archive's
    /// end, or nothing).
    NeedMore(usize),
    /// At a zstd frame's head: its body comes next.
    Inflate,
}

/// Decodes an archive into batches, keeping its place between the segments of a stream:
/// the decoder's events go through the [`Feed`] (the held-directory policy every landing
/// shares) into a [`Planner`].
pub(super) struct Parser {
    pub(super) decoder: Decoder,
    pub(super) feed: Feed,
    pub(super) plan: Plan,
}

/// What the planning of batches knows between runs.
pub(super) struct Plan {
    /// What the landers restore.
    pub(super) policy: Policy,
    /// The directories (the landers count the rest).
    pub(super) summary: LandSummary,
    /// Directories to give a mode or time once landing is done.
    pub(super) deferred: Deferred,
    /// The hard links, made once landing is done.
    pub(super) links: Vec<Link>,
    /// Where the files with a link id are: their directory (from the root) and name.
    pub(super) linked: HashMap<u64, (Vec<DirStep>, Box<[u8]>)>,
    /// The directories from the root to the current one.
    at: Vec<DirStep>,
    /// What the directories in `at` get once landing is done, and their nodes in
    /// `deferred` (once a directory at or below them needed one).
    lasts: Vec<(Option<Last>, Option<usize>)>,
    /// Entries passed on by the feed so far.
    entries: u64,
    /// Work per batch (see [`batch_cost`]), set for the input at hand before each `run`.
    pub(super) batch_cost: u64,
    /// The sparse file whose extents come (its key), and where its next data goes.
    sparse: Option<(u64, u64)>,
    /// The root record (version 2): the destination's metadata and extended attributes.
    pub(super) root: Option<(Meta, Box<[u8]>)>,
}

impl Plan {
    /// Entries decoded so far (the directory `feed` holds too): the archive index errors of
    /// the decoder are reported at.
    pub(super) fn decoded(&self, feed: &Feed) -> u64 {
        self.entries + u64::from(feed.holding())
    }
}

impl Parser {
    pub(super) fn new(decoding: Decoding, policy: Policy, cancel: Cancel) -> Parser {
        Parser {
            decoder: Decoder::new(decoding.limits),
            feed: (Feed::new(decoding.strip, cancel).select(decoding.select))
                .owners(decoding.owners),
            plan: Plan {
                policy,
                summary: LandSummary::default(),
                deferred: Deferred::default(),
                links: Vec::new(),
                linked: HashMap::new(),
                at: Vec::new(),
                lasts: Vec::new(),
                entries: 0,
                batch_cost: 0,
                sparse: None,
                root: None,
            },
        }
    }

    /// Tells `listener` each entry the feed passes on (`-v`).
    pub(super) fn listen(&mut self, listener: Option<crate::Listener>) {
        self.feed = std::mem::take(&mut self.feed).listener(listener);
    }

    /// See [`Plan::decoded`].
    pub(super) fn decoded(&self) -> u64 {
        self.plan.decoded(&self.feed)
    }

    /// Decodes the whole messages of `span` of `source` into batches for `here`; stops
    /// early at a failure's index `stop`, and at a zstd frame.
    pub(super) fn run<'a, L: Land>(
        &mut self,
        source: &Source<'a>,
        span: Range<usize>,
        stop: &AtomicU64,
        here: &mut Here<'a, '_, L>,
    ) -> std::result::Result<Parsed, Failure> {
        let input = &source.bytes()[..span.end];
        let batch = Batch::new(self.plan.entries, &self.plan.at, source, span.start);
        let mut planner = Planner::<L>::new(&mut self.plan, input, batch, None);
        let from_file = matches!(source, Source::Mapped(_, Some(_)));
        planner.trusted = self.decoder.trusts_data() && from_file && !frames::unchecked();
        let mut pos = span.start;
        let outcome = loop {
            let decoded = planner.plan.decoded(&self.feed);
            if decoded >= stop.load(Relaxed) {
                break Parsed::Stopped;
            }
            let (event, n) = match self.decoder.next_whole(&input[pos..], false) {
                Ok(Step::Event(event, n)) => (event, n),
                Ok(Step::NeedMore | Step::Done) => break Parsed::NeedMore(pos),
                Ok(Step::Inflate { .. }) => break Parsed::Inflate,
                Err(e) => return Err((decoded, e)),
            };
            pos += n;
            let boundary = matches!(event, Event::Dir(_) | Event::Pop);
            if let Event::SparseFile { extents, .. } = event {
                planner.extents = extents;
            }
            let names = self.decoder.owner_names();
            (self.feed.event(event, names, &mut planner)).map_err(|e| (decoded, e))?;
            let (cost, most) = (planner.batch.cost, planner.plan.batch_cost);
            if (boundary && cost >= most) || cost >= 2 * most {
                let next = Batch::new(planner.plan.entries, &planner.plan.at, source, pos);
                let mut batch = std::mem::replace(&mut planner.batch, next);
                batch.span.end = pos;
                here.send(batch);
            }
        };
        if !planner.batch.ops.is_empty() {
            let mut batch = planner.batch;
            batch.span.end = pos;
            here.send(batch);
        }
        Ok(outcome)
    }

    /// Decodes and lands `source` from `from` to its end, which is the archive's.
    pub(super) fn land_rest_of<'a, L: Land>(
        &mut self,
        source: &Source<'a>,
        from: usize,
        stop: &AtomicU64,
        here: &mut Here<'a, '_, L>,
    ) -> std::result::Result<(), Failure> {
        let input = source.bytes();
        match self.run(source, from..input.len(), stop, here)? {
            Parsed::NeedMore(used) => self.end(&input[used..]),
            Parsed::Stopped => Ok(()),
            Parsed::Inflate => Err(self.cut_frame()),
        }
    }

    /// The error for a zstd frame whose stored bytes the input ends inside.
    pub(super) fn cut_frame(&self) -> Failure {
        let error = self.decoder.frame_error(FormatError::Truncated);
        (self.decoded(), error)
    }

    /// Decodes `rest`, the input after the last whole message, as the end of the input: the
    /// archive must have ended there.
    pub(super) fn end(&mut self, mut rest: &[u8]) -> std::result::Result<(), Failure> {
        loop {
            match self.decoder.next(rest, true) {
                Ok(Step::Done) => return Ok(()),
                Ok(Step::Event(Event::Padding, n)) => rest = &rest[n..],
                Ok(_) => unreachable!("run() decodes every whole message"),
                Err(e) => return Err((self.decoded(), e)),
            }
        }
    }

    /// Lands on this thread the file whose message starts `rest` and continues in `input`,
    /// reading the rest of its content through `buf`, so that no more than that is held at
    /// once. When `rest` is not the start of a file (the input ends inside a message
    /// header, or after the end), the input must have ended there.
    pub(super) fn land_rest<L: Land>(
        &mut self,
        rest: &[u8],
        input: &mut ByteStream<'_>,
        buf: &mut [u8],
        here: &mut Here<'_, '_, L>,
    ) -> std::result::Result<(), Failure> {
        let entry = self.decoded();
        let event = match self.decoder.next(rest, false) {
            Ok(Step::Event(event @ Event::File { .. }, _)) => event,
            Ok(_) => return self.end(rest),
            Err(e) => return Err((entry, e)),
        };
        let source = Source::Mapped(&[], None);
        let batch = Batch::new(self.plan.entries, &self.plan.at, &source, 0);
        let mut planner = Planner::new(&mut self.plan, &[], batch, Some(here.own.as_mut()));
        let fed = (self.feed).event(event, self.decoder.owner_names(), &mut planner);
        // Without a lander (or after a failure before this file) nothing more lands; the
        // next `run` stops before decoding.
        if !planner.landing || fed.is_err() {
            return fed.map_err(|e| (entry, planner.abort(e)));
        }
        while self.decoder.remaining_data() > 0 {
            let want = self.decoder.remaining_data().min(buf.len() as u64) as usize;
            let fed = input
                .read(&mut buf[..want], self.decoder.offset())
                .and_then(|n| {
                    let Step::Event(event, _) = self.decoder.next(&buf[..n], n == 0)? else {
                        unreachable!("file content follows its header")
                    };
                    self.feed.event(event, (&[], &[]), &mut planner)
                });
            fed.map_err(|e| (entry, planner.abort(e)))?;
        }
        Ok(())
    }
}

/// The sink the [`Feed`] drives while batches are planned: entries become the operations of
/// the current batch, a file streamed past a segment (`Parser::land_rest`) is landed at once
/// by this thread's own worker.
pub(super) struct Planner<'p, 'a, 'w, 's, L: Land> {
    pub(super) plan: &'p mut Plan,
    /// Where the input the names and contents are in starts.
    base: usize,
    batch: Batch<'a>,
    /// Set while `Parser::land_rest` feeds a file to land on this thread: this thread's
    /// worker, if it has one.
    here: Option<Option<&'w mut Worker<'s, L>>>,
    /// A streamed file is being landed (false: there is no worker, or a failure came
    /// before it).
    landing: bool,
    /// The extents of the sparse file the feed passes on next.
    extents: u32,
    /// The data digests are trusted, where the input is mapped from a file.
    trusted: bool,
}

impl<'p, 'a, 'w, 's, L: Land> Planner<'p, 'a, 'w, 's, L> {
    pub(super) fn new(
        plan: &'p mut Plan,
        input: &[u8],
        batch: Batch<'a>,
        here: Option<Option<&'w mut Worker<'s, L>>>,
    ) -> Self {
        Planner {
            plan,
            base: input.as_ptr() as usize,
            batch,
            here,
            landing: false,
            extents: 0,
            trusted: false,
        }
    }

    /// Whether the lander checks the digest of data at `range`: data it reads from the
    /// archive file, which the check ahead of the decoder leaves to it (see
    /// `frames::Check`) and the decoder trusts.
    fn checks_digest(&self, range: &Range<usize>) -> bool {
        self.trusted && copied(range)
    }

    /// Where `part`, a slice of the input, is in it (nowhere when empty: an empty slice
    /// may be anywhere).
    fn range(&self, part: &[u8]) -> Range<usize> {
        if part.is_empty() {
            return 0..0;
        }
        let start = part.as_ptr() as usize - self.base;
        start..start + part.len()
    }

    /// `entry`, a decoded entry other than a directory, by ranges of the input.
    fn leaf(&self, entry: &Entry<'_>) -> Leaf {
        Leaf {
            kind: entry.kind,
            meta: entry.meta,
            link_id: entry.link_id,
            name: self.range(entry.name),
            xattrs: self.range(entry.xattrs.0),
        }
    }

    /// Adds `op`, costing `cost`, for one more entry.
    fn push(&mut self, op: Op, cost: u64) {
        self.batch.ops.push(op);
        self.batch.cost += cost;
        self.plan.entries += 1;
    }

    /// The [`Deferred`] node of directory `name` in the current one (the last in `lasts`),
    /// adding it and the nodes of its parents that have none yet.
    fn node_of_current(&mut self, name: &Name) -> usize {
        let plan = &mut *self.plan;
        let depth = plan.lasts.len();
        // The directories with a node are the outermost ones: find the first without.
        let first = (0..depth)
            .rev()
            .find(|&i| plan.lasts[i].1.is_some())
            .map_or(0, |i| i + 1);
        for i in first..depth {
            let parent = i.checked_sub(1).and_then(|p| plan.lasts[p].1);
            let name = if i + 1 == depth {
                name.clone()
            } else {
                plan.at[i].name.clone()
            };
            plan.lasts[i].1 = Some(plan.deferred.add(parent, name));
        }
        plan.lasts[depth - 1].1.expect("just added")
    }
}

impl<L: Land> Sink for Planner<'_, '_, '_, '_, L> {
    type Error = Error;

    /// Adds entering the directory to the batch; a mode lacking owner rwx is created with
    /// it, and the final mode (also with setuid or setgid) and time are set at the end.
    fn enter_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        let policy = self.plan.policy;
        let apply = policy.entry(dir, &mut Default::default());
        let (_, mode) = policy.dir_modes(&apply);
        let merged = policy.merged_dir_mode(&apply);
        let last = (mode.is_some() || merged.is_some() || apply.mtime.is_some()).then_some(Last {
            created: mode,
            merged,
            mtime: apply.mtime,
        });
        self.plan.lasts.push((last, None));
        let node = last.map(|_| self.node_of_current(&dir.name.into()));
        let step = DirStep::new(dir, node);
        self.push(Op::Enter(step.clone()), 1);
        self.plan.at.push(step);
        self.plan.summary.dirs += 1;
        Ok(())
    }

    fn empty_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.push(Op::Empty(DirStep::new(dir, None)), 1);
        self.plan.summary.dirs += 1;
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.batch.ops.push(Op::Leave);
        self.batch.cost += 1;
        let (last, _) = self.plan.lasts.pop().expect("the decoder checks nesting");
        let dir = self.plan.at.pop().expect("one per directory");
        if let (Some(node), Some(last)) = (dir.node, last) {
            self.plan.deferred.order.push((node, last));
        }
        Ok(())
    }

    fn file(&mut self, file: &Entry<'_>, content: Content<'_>) -> Result<()> {
        let (size, first) = match content {
            Content::Bytes(data) => (data.len() as u64, data),
            Content::Stream { size, first } => (size, first),
            _ => unreachable!("the decoder gives bytes or a stream"),
        };
        if let Some(id) = file.link_id {
            let at = (self.plan.at.clone(), file.name.into());
            self.plan.linked.insert(id, at);
        }
        let Some(here) = self.here.as_mut() else {
            // `run` decodes whole files only, and sparse ones, whose extents come next.
            let op = match content {
                Content::Stream { .. } => {
                    let key = self.plan.entries;
                    self.plan.sparse = Some((key, 0));
                    Op::Sparse(self.leaf(file), size, self.extents, key)
                }
                _ => {
                    let range = self.range(first);
                    let check = self.checks_digest(&range);
                    Op::File(self.leaf(file), range, check)
                }
            };
            self.push(op, 1 + size.min(first.len() as u64) / BYTES_PER_UNIT);
            return Ok(());
        };
        self.plan.entries += 1;
        match here {
            Some(worker) if self.batch.first < worker.shared.stop.load(Relaxed) => {
                worker.land(&self.batch);
                self.landing = true;
                let shared = worker.shared;
                let place = shared.crowds.join(crowd(self.plan.at.last(), shared));
                worker.land.file(file, content)?;
                drop(place);
                worker.shared.progress.add_entry(first.len() as u64);
                Ok(())
            }
            _ => Ok(()),
        }
    }

    fn symlink(&mut self, link: &Entry<'_>, target: &[u8]) -> Result<()> {
        self.push(Op::Symlink(self.leaf(link), self.range(target)), 1);
        Ok(())
    }

    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        self.push(Op::Special(self.leaf(entry), device), 1);
        Ok(())
    }

    /// Notes the link, to be made once every thread is done (its file may land on any).
    fn hard_link(&mut self, link: &Entry<'_>, target: u64) -> Result<()> {
        self.plan.links.push(Link {
            at: self.plan.at.clone(),
            name: link.name.into(),
            target,
            entry: self.plan.entries,
        });
        self.push(Op::Linked, 0);
        Ok(())
    }

    /// In a batch: an extent of the sparse file (its data, at where its holes led).
    fn data(&mut self, data: &[u8]) -> Result<()> {
        if let (None, Some((key, at))) = (&self.here, self.plan.sparse) {
            let range = self.range(data);
            let op = Op::Extent(key, at, range.clone(), self.checks_digest(&range));
            self.batch.ops.push(op);
            self.batch.cost += 1 + data.len() as u64 / BYTES_PER_UNIT;
            self.plan.sparse = Some((key, at + data.len() as u64));
            return Ok(());
        }
        if let Some(Some(worker)) = self.here.as_mut().filter(|_| self.landing) {
            worker.land.data(data)?;
            worker.shared.progress.add_bytes(data.len() as u64);
        }
        Ok(())
    }

    /// A sparse file's hole: the file was created at its size.
    fn hole(&mut self, len: u64) -> Result<()> {
        if let Some((_, at)) = &mut self.plan.sparse {
            *at += len;
        }
        Ok(())
    }

    /// Kept for the end (see `Shared::finish`).
    fn root(&mut self, meta: &Meta, xattrs: Xattrs<'_>) -> Result<()> {
        self.plan.root = Some((*meta, xattrs.0.into()));
        Ok(())
    }

    fn abort(&mut self, cause: Error) -> Error {
        match self.here.as_mut().filter(|_| self.landing) {
            Some(Some(worker)) => worker.land.abort(cause),
            _ => cause,
        }
    }
}

/// Work per batch for an archive of `len` bytes: an eighth of each worker's share of the
/// estimated work (one entry per 16 KiB of archive plus its bytes), so that even a small
/// archive is cut into several batches per worker.
pub(super) fn batch_cost(len: usize, workers: usize) -> u64 {
    let estimate = len as u64 / (16 * 1024) + len as u64 / BYTES_PER_UNIT;
    (estimate / (8 * workers as u64)).clamp(MIN_BATCH_COST, BATCH_COST)
}
