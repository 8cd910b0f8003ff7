//! The threaded dispatcher. The calling thread decodes the archive (validating every
//! message before it is landed) into batches of consecutive entries and queues them for
//! helper threads; when the queue is full, and once decoding is done, it lands batches
//! itself, so `workers` threads land in all (one per core, not one more). Each lands with
//! its own `Land` below its own duplicate of the root fd, and maps in the pages of a
//! mapped archive's batch before landing it. Helpers get a private fd table and credentials
//! (see [`go_solo`]), so no two threads share them. A batch carries the path of the
//! directory it starts in, which its lander creates or merges into first (an existing
//! directory is accepted, as for any `DIR`), so batches land in any order and on any
//! thread. Batches are cut preferably where the directory changes, so two threads rarely
//! create files in the same directory (the directory's lock serializes creations in it),
//! and at most [`PER_DIR`](crate::threads::PER_DIR) threads create entries in one at once
//! (each holds its directory's [`Crowd`] place while it creates one, others wait). So that
//! landers rarely wait, a helper takes the oldest batch of a directory where fewer than that
//! land batches, else the oldest (see [`Queued::pick`]): with many landers, those over one
//! directory's cap land later directories.
//!
//! A stream is read in segments of up to [`SEGMENT`] bytes, each shared by the batches
//! decoded from it and reused once they have landed; see [`Input::Stream`].
//!
//! Open fds: each lander holds the directories it is in (at most the depth limit) plus what
//! it holds itself; at most [`QUEUE`] batches wait in the queue, or more while their work is
//! under [`QUEUE_COST`].
//! Directories whose mode lacks owner rwx are created with it and get their mode once all
//! threads are done, children before parents, as do their times and setuid and setgid
//! bits (several threads may be in a directory at once, so none can give it those when it
//! leaves). Hard links are made then too, before those, by a lander of the calling thread
//! that walks to each link's directory: the file a link names may land on any thread.
//!
//! Version 2 archives are read frame by frame (see [`frames`]): the landing threads inflate
//! each segment and check its data digests ahead of the calling thread (those of data of
//! [`COPY_FROM`] bytes or more as they land it), which then decodes it (trusting those
//! digests, checking everything else) into batches as above. A file
//! whose extents are in several batches (an `EXTFILE`) is created by the batch holding its
//! entry and written by each batch holding an extent; see [`SharedFiles`].

use std::collections::VecDeque;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rustix::fs::{openat, Mode};

use super::restore::{NotRestored, Policy, Target};
use super::select::Select;
use super::sync::{Links, Setup};
use super::{Land, LandSummary};
use crate::error::{Error, Result, TreePath};
use crate::format::Limits;
use crate::interrupt::Cancel;
use crate::owners::Owners;
use crate::source::ByteStream;
use crate::sys::thread::{go_solo, spawn_elsewhere};
use crate::sys::{DIR_FLAGS, DIR_HANDLE_FLAGS};
use crate::threads::{Claim, Crowd, Crowds};
use crate::tree::{Device, Entry, Kind, Meta, Timestamp, Xattrs};
use crate::Progress;

mod frames;
mod plan;
#[cfg(test)]
mod tests;
mod worker;

use plan::{batch_cost, Parsed, Parser, Plan};
use worker::{copied, open_path, SharedFiles, Worker};

/// Batches waiting for a helper, at most, unless their work is under [`QUEUE_COST`].
pub const QUEUE: usize = 16;
/// Work of the batches waiting for a helper (in units of one entry) under which more than
/// [`QUEUE`] may wait: what `QUEUE` batches of the most work hold. Short batches (of small
/// archives, cut for many landers) then reach several directories ahead, so that landers
/// over a directory's cap land in later ones (see [`Queued::pick`]).
const QUEUE_COST: u64 = QUEUE as u64 * 2 * BATCH_COST;
/// Archive size from which threads pay: below it, starting them costs more than they save
/// (docs/BENCHMARKS.md, "Design measurements").
pub const THREADS_FROM: u64 = 256 << 10;
/// Stream bytes from which helper threads start: a shorter stream arrives about as fast as
/// one thread lands it, so the calling thread lands what arrives until then.
pub const STREAM_THREADS_FROM: usize = 4 << 20;
/// Bytes of a stream held in one segment once helpers land, at most.
pub const SEGMENT: usize = 16 << 20;
/// Bytes of a stream held in one segment before helpers start (as in the sync engine's
/// buffer: a larger file is landed while it is read).
const SEGMENT_ALONE: usize = 1 << 20;
/// A segment being read that has new bytes is landed when the input had nothing more for
/// this long, so a stalled stream lands what arrived.
const PATIENCE: Duration = Duration::from_millis(50);
/// Most work in a batch, in units of one entry; a batch ends at the next directory change
/// once it holds its share (see [`batch_cost`]), and regardless at twice that.
const BATCH_COST: u64 = 256;
/// Least work in a batch.
const MIN_BATCH_COST: u64 = 8;
/// Files of a mapped archive with at least this many bytes are copied from the archive
/// file by the kernel (`copy_file_range`) instead of written from the mapping: their pages
/// are then never mapped in nor torn down at exit. Smaller ones share pages with their
/// neighbours' headers, and one more system call per file would cost more than it saves
/// (docs/BENCHMARKS.md, "Design measurements"). Those of a version 2 archive are read and
/// written instead, their digest checked on the way (`frames::land_checked`).
pub const COPY_FROM: usize = 32 * 1024;
/// Bytes of file content that cost as much as creating one file.
const BYTES_PER_UNIT: u64 = 32 * 1024;

/// A directory name, shared by the batches that start inside the directory.
type Name = Arc<[u8]>;

/// A directory to create (or merge into) and enter: its name, metadata and extended
/// attributes, when it gets a mode or time once landing is done its node in [`Deferred`]
/// (whoever creates it says so), and the landers creating entries in it.
#[derive(Clone)]
struct DirStep {
    name: Name,
    meta: Meta,
    xattrs: Option<Arc<[u8]>>,
    node: Option<usize>,
    crowd: Arc<Crowd>,
}

impl DirStep {
    fn new(dir: &Entry<'_>, node: Option<usize>) -> DirStep {
        DirStep {
            name: dir.name.into(),
            meta: dir.meta,
            xattrs: (!dir.xattrs.is_empty()).then(|| dir.xattrs.0.into()),
            node,
            crowd: Arc::default(),
        }
    }

    fn entry(&self) -> Entry<'_> {
        Entry {
            xattrs: Xattrs(self.xattrs.as_deref().unwrap_or_default()),
            ..Entry::dir(&self.name, self.meta)
        }
    }
}

/// An entry other than a directory: its kind, metadata and link id, and where its name
/// and extended attributes are in its batch's source bytes.
struct Leaf {
    kind: Kind,
    meta: Meta,
    link_id: Option<u64>,
    name: Range<usize>,
    xattrs: Range<usize>,
}

impl Leaf {
    fn entry<'b>(&self, bytes: &'b [u8]) -> Entry<'b> {
        Entry {
            xattrs: Xattrs(&bytes[self.xattrs.clone()]),
            link_id: self.link_id,
            ..Entry::new(&bytes[self.name.clone()], self.kind, self.meta)
        }
    }
}

/// One landing step. Names, contents and targets are ranges of its batch's source bytes.
enum Op {
    /// Create (or merge into) a directory and enter it.
    Enter(DirStep),
    /// Create a directory that stays empty.
    Empty(DirStep),
    /// Leave the directory entered last.
    Leave,
    /// Create a file with all of its content; true when the lander checks its version 2
    /// data digest (see [`Planner::checks_digest`]).
    File(Leaf, Range<usize>, bool),
    /// Create a symlink to a target.
    Symlink(Leaf, Range<usize>),
    /// Create a fifo or device.
    Special(Leaf, Device),
    /// A hard link, made at the end (see `Shared::link`): only its entry index counts here.
    Linked,
    /// Create a file of this size, all hole, whose data comes in this many [`Op::Extent`]s,
    /// under its key in [`SharedFiles`].
    Sparse(Leaf, u64, u32, u64),
    /// Write data at an offset of the file of this key (not an entry); true when the lander
    /// checks its data digest.
    Extent(u64, u64, Range<usize>, bool),
}

/// The bytes batches are decoded from.
#[derive(Clone)]
enum Source<'a> {
    /// A mapped archive, whose pages a lander maps in before landing a batch, and the file
    /// it maps with the file offset of the archive's first byte (large files are copied
    /// from there, see [`COPY_FROM`]).
    Mapped(&'a [u8], Option<(BorrowedFd<'a>, u64)>),
    /// A segment of a stream, kept alive by each batch decoded from it.
    Stream(Arc<Segment>),
}

impl Source<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Source::Mapped(bytes, _) => bytes,
            Source::Stream(segment) => segment.bytes(),
        }
    }
}

/// Consecutive entries of the archive and the directory path where they start.
struct Batch<'a> {
    /// Archive index of the first entry (errors are reported in archive order).
    first: u64,
    /// The directories from the root to where the batch starts.
    at: Vec<DirStep>,
    source: Source<'a>,
    /// The part of the source the batch was decoded from.
    span: Range<usize>,
    ops: Vec<Op>,
    cost: u64,
    /// Its lander's work in its starting directory, from when it was taken from the queue.
    claim: Option<Claim>,
}

impl<'a> Batch<'a> {
    fn new(first: u64, at: &[DirStep], source: &Source<'a>, start: usize) -> Batch<'a> {
        Batch {
            first,
            at: at.to_vec(),
            source: source.clone(),
            span: start..start,
            ops: Vec::new(),
            cost: 0,
            claim: None,
        }
    }

    /// Its work, and one unit for each directory of its path (a step weighs about what an
    /// entry does): the queue's bound counts both, so that batches deep in a tree cannot
    /// make many short ones take memory beyond what the archive's size allows.
    fn queued_cost(&self) -> u64 {
        self.cost + self.at.len() as u64
    }

    /// The landers of the directory it starts in (none: the root).
    fn crowd(&self) -> Option<&Arc<Crowd>> {
        self.at.last().map(|dir| &dir.crowd)
    }
}

/// An error and the archive index of the entry it concerns.
type Failure = (u64, Error);

/// Where `land_parallel` reads an archive.
#[non_exhaustive]
pub enum Input<'a> {
    /// A whole archive in memory: the mapping of a file (or block device), that file, and
    /// the file offset of the archive's first byte. A file of at least [`COPY_FROM`] bytes
    /// is copied from the archive file inside the kernel, so its pages are never mapped
    /// into (or unmapped from) the process.
    Mapped(&'a [u8], BorrowedFd<'a>, u64),
    /// A pipe, socket or file read as a stream. The calling thread reads it into segments
    /// of up to [`SEGMENT`] bytes and decodes each into batches. Until
    /// [`STREAM_THREADS_FROM`] bytes have come it lands them itself as they arrive, like
    /// the sync engine; then helpers start, and it reads the next segment while they have
    /// batches to land. A message cut by a segment's end starts the next one; a file too
    /// large for that (over half a segment) is landed by the calling thread as it reads it,
    /// while the helpers land what came before it. Memory: the segments that batches in
    /// flight were decoded from.
    Stream(ByteStream<'a>),
    /// A version 2 archive read as a stream, frame by frame (see [`frames`]).
    Frames(ByteStream<'a>),
}

/// How an archive is decoded: its limits, how many leading path components are dropped
/// (`--strip-components`), and which entries are taken.
#[derive(Clone)]
pub(crate) struct Decoding {
    pub(crate) limits: Limits,
    pub(crate) strip: usize,
    pub(crate) select: Select,
    /// Owners are given by name from this table (see `Feed::owners`).
    pub(crate) owners: Option<Arc<Owners>>,
}

/// Lands the archive `input` below `root` on `workers` threads (the calling thread and
/// `workers - 1` helpers), each landing through a lander made by `make` from its own
/// duplicate of `root` and `setup` (with the directories' final modes and times left to
/// this engine).
pub(crate) fn land_parallel<L: Land>(
    root: OwnedFd,
    input: Input<'_>,
    decoding: Decoding,
    workers: usize,
    setup: Setup,
    make: impl Fn(OwnedFd, Setup) -> Result<L> + Sync,
    progress: &Progress,
) -> Result<LandSummary> {
    let setup = Setup {
        threaded: true,
        ..setup
    };
    // The lander of the hard links notes where their files are in its own map.
    let linker = |root| {
        let links = Default::default();
        make(
            root,
            Setup {
                links,
                ..setup.clone()
            },
        )
    };
    let make = |root| make(root, setup.clone());
    #[allow(unused_mut)] // set in tests
    let mut shared = Shared::new(&root, progress, setup.cancel.clone(), workers);
    #[cfg(test)]
    {
        shared.crowds.dwell = setup.dwell;
    }
    let mut parser = Parser::new(decoding, setup.policy, setup.cancel.clone());
    parser.listen(progress.listener());
    shared.run(&make, |here| {
        let stop = &shared.stop;
        let landed = match input {
            Input::Mapped(bytes, file, offset) => {
                let source = Source::Mapped(bytes, Some((file, offset)));
                match bytes.get(6) {
                    Some(2) => frames::land_mapped(source, workers, &mut parser, stop, here),
                    _ => land_mapped(source, workers, &mut parser, stop, here),
                }
            }
            Input::Stream(input) => land_stream(input, workers, &mut parser, stop, here),
            Input::Frames(input) => frames::land_stream(input, workers, &mut parser, stop, here),
        };
        if let Err(failure) = landed {
            shared.fail(failure);
        }
    });
    shared.finish(parser, &setup.links, linker, make)
}

/// Decodes the mapped archive `source` into batches, with helpers from the start.
fn land_mapped<'a, L: Land>(
    source: Source<'a>,
    workers: usize,
    parser: &mut Parser,
    stop: &AtomicU64,
    here: &mut Here<'a, '_, L>,
) -> std::result::Result<(), Failure> {
    here.start_helpers(workers - 1);
    let input = source.bytes();
    parser.plan.batch_cost = batch_cost(input.len(), workers);
    parser.land_rest_of(&source, 0, stop, here)
}

/// Reads and decodes the stream `input` segment by segment (see [`Input::Stream`]).
fn land_stream<L: Land>(
    mut input: ByteStream<'_>,
    workers: usize,
    parser: &mut Parser,
    stop: &AtomicU64,
    here: &mut Here<'_, '_, L>,
) -> std::result::Result<(), Failure> {
    let mut cur = Segment::new(SEGMENT_ALONE);
    (cur.refill(&mut input, 0, 0, 0, || true)).map_err(|e| (0, e))?;
    Stream::new(input, cur).land(workers, parser, stop, here)
}

/// The segments of a stream: the one being decoded and spares to read the next into.
struct Stream<'i> {
    input: ByteStream<'i>,
    cur: Arc<Segment>,
    spares: Vec<Arc<Segment>>,
}

impl<'i> Stream<'i> {
    /// The stream `input`, whose first bytes (from where the decoder is) are in `cur`.
    fn new(input: ByteStream<'i>, cur: Segment) -> Stream<'i> {
        Stream {
            input,
            cur: Arc::new(cur),
            spares: Vec::new(),
        }
    }

    /// Decodes and lands the stream to its end, segment by segment, starting helpers once
    /// enough came.
    fn land<L: Land>(
        mut self,
        workers: usize,
        parser: &mut Parser,
        stop: &AtomicU64,
        here: &mut Here<'_, '_, L>,
    ) -> std::result::Result<(), Failure> {
        loop {
            let read = parser.decoder.offset() + self.cur.len as u64;
            if here.helpers == 0 && read >= STREAM_THREADS_FROM as u64 {
                here.start_helpers(workers - 1);
            }
            parser.plan.batch_cost = batch_cost(self.cur.len, here.helpers + 1);
            let source = Source::Stream(self.cur.clone());
            let parsed = parser.run(&source, 0..self.cur.len, stop, here)?;
            drop(source);
            let more = match parsed {
                Parsed::Stopped => false,
                Parsed::NeedMore(used) => self.advance(used, parser, here)?,
                Parsed::Inflate => return Err(parser.cut_frame()),
            };
            if !more {
                return Ok(());
            }
        }
    }

    /// Moves on past the whole messages of the current segment (its first `used` bytes):
    /// reads the next segment, starting with the rest of this one, or lands the message
    /// there on this thread when it is too large to carry, or when the stream ended there
    /// (then answers false: nothing more comes).
    fn advance<L: Land>(
        &mut self,
        used: usize,
        parser: &mut Parser,
        here: &mut Here<'_, '_, L>,
    ) -> std::result::Result<bool, Failure> {
        let input = &mut self.input;
        if self.cur.eof {
            // The end, whole or cut: a cut file is landed and removed as the sync engine
            // does, for the same message.
            parser.land_rest(&self.cur.bytes()[used..], input, &mut [], here)?;
            return Ok(false);
        }
        let alone = here.helpers == 0;
        let size = if alone { SEGMENT_ALONE } else { SEGMENT };
        let kept = self.cur.len - used;
        let wanted = parser.decoder.wanted();
        let offset = parser.decoder.offset() + kept as u64;
        let failed = |e| (parser.decoded(), e);
        // Read until the cut message is whole, and then, with helpers, on while they have
        // batches to land.
        let queue = here.queue;
        let enough = move || alone || queue.is_empty();
        if kept <= size / 2 && self.cur.buf.len() == size {
            if let Some(segment) = Arc::get_mut(&mut self.cur) {
                // No batch holds the segment any more: the rest moves to its front.
                segment.buf.copy_within(used..segment.len, 0);
                segment
                    .refill(input, kept, offset, wanted, enough)
                    .map_err(failed)?;
                return Ok(true);
            }
        }
        let free = |s: &Arc<Segment>| s.buf.len() == size && Arc::strong_count(s) == 1;
        let mut next = match self.spares.iter().position(free) {
            Some(i) => self.spares.swap_remove(i),
            None => Arc::new(Segment::new(size)),
        };
        let buf = Arc::get_mut(&mut next).expect("no batch holds a spare");
        let rest = &self.cur.bytes()[used..];
        let kept = if rest.len() > size / 2 {
            parser.land_rest(rest, input, &mut buf.buf, here)?;
            0
        } else {
            buf.buf[..rest.len()].copy_from_slice(rest);
            rest.len()
        };
        let offset = parser.decoder.offset() + kept as u64;
        buf.refill(input, kept, offset, parser.decoder.wanted(), enough)
            .map_err(|e| (parser.decoded(), e))?;
        let done = std::mem::replace(&mut self.cur, next);
        if done.buf.len() == size {
            self.spares.push(done);
        }
        Ok(true)
    }
}

/// A buffer of stream bytes.
struct Segment {
    buf: Vec<u8>,
    len: usize,
    /// The stream ended after these bytes.
    eof: bool,
}

impl Segment {
    fn new(size: usize) -> Segment {
        Segment::holding(vec![0; size], 0)
    }

    /// A segment of the first `len` bytes of `buf`.
    fn holding(buf: Vec<u8>, len: usize) -> Segment {
        Segment {
            buf,
            len,
            eof: false,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Keeps the first `kept` bytes (the rest of the previous segment) and fills the
    /// segment from `input` (at stream offset `offset`) until it is full or the stream
    /// ends, or, once it has new bytes and at least `wanted` in all (the kept message
    /// whole), until `enough()` says to land them or nothing more comes for [`PATIENCE`].
    fn refill(
        &mut self,
        input: &mut ByteStream<'_>,
        kept: usize,
        offset: u64,
        wanted: usize,
        enough: impl Fn() -> bool,
    ) -> Result<()> {
        self.len = kept;
        while self.len < self.buf.len() && !self.eof {
            let landable = self.len > kept && self.len >= wanted;
            if landable && (enough() || !input.wait(Some(PATIENCE))?) {
                break;
            }
            let at = offset + (self.len - kept) as u64;
            let n = input.read(&mut self.buf[self.len..], at)?;
            self.eof = n == 0;
            self.len += n;
        }
        Ok(())
    }
}

/// A duplicate of the destination's fd `root`.
fn dup(root: &OwnedFd) -> Result<OwnedFd> {
    (root.try_clone()).map_err(|e| Error::os("dup destination", TreePath::default(), e))
}

/// What the landing threads share.
struct Shared<'r> {
    root: &'r OwnedFd,
    progress: &'r Progress,
    /// The archive index of the first failure found so far: entries before it still land,
    /// so the error reported is the one the sync lander would meet first.
    stop: AtomicU64,
    failures: Mutex<Vec<Failure>>,
    /// The [`Deferred`] directories some lander entered: true where it created it.
    entered: Mutex<Vec<(usize, bool)>>,
    /// What the landers landed (but directories, which the planning counts).
    landed: Mutex<LandSummary>,
    /// Stops every lander once cancelled.
    cancel: Cancel,
    /// The files whose extents several batches land.
    files: SharedFiles,
    /// The landers creating entries in the root, and where landers wait for a place in a
    /// directory's crowd.
    top: Crowd,
    crowds: Crowds,
}

impl<'r> Shared<'r> {
    fn new(root: &'r OwnedFd, progress: &'r Progress, cancel: Cancel, workers: usize) -> Self {
        Shared {
            root,
            progress,
            cancel,
            stop: AtomicU64::new(u64::MAX),
            failures: Mutex::new(Vec::new()),
            entered: Mutex::new(Vec::new()),
            landed: Mutex::new(LandSummary::default()),
            files: SharedFiles::default(),
            top: Crowd::default(),
            crowds: Crowds::new(workers, root.as_fd()),
        }
    }

    fn fail(&self, failure: Failure) {
        self.stop.fetch_min(failure.0, Relaxed);
        self.failures.lock().expect("no panics").push(failure);
        self.files.wake();
    }

    /// Runs `produce` on this thread, which sends batches through the [`Here`] it gets and
    /// may start helper threads to land them; then this thread lands what is left and the
    /// helpers end.
    fn run<'a, L: Land>(
        &self,
        make: &(impl Fn(OwnedFd) -> Result<L> + Sync),
        produce: impl FnOnce(&mut Here<'a, '_, L>),
    ) {
        let queue = Queue::<'a>::default();
        std::thread::scope(|scope| {
            let helper = || {
                let land = dup(self.root).and_then(|root| {
                    go_solo();
                    make(root)
                });
                match land {
                    Ok(land) => {
                        let mut worker = Worker::new(land, self);
                        while let Some(job) = queue.take(true, &self.crowds) {
                            match job {
                                Job::Land(batch) => worker.land(&batch),
                                Job::Check(check) => check.run(),
                            }
                        }
                        worker.finish();
                    }
                    Err(e) => self.fail((0, e)),
                }
            };
            let spawn = || spawn_elsewhere(scope, helper).is_ok();
            // Without a lander of its own (it failed, so nothing more lands), this thread
            // drops what it would land.
            let own = match dup(self.root).and_then(make) {
                Ok(land) => Some(Worker::new(land, self)),
                Err(e) => {
                    self.fail((0, e));
                    None
                }
            };
            let mut here = Here {
                queue: &queue,
                crowds: &self.crowds,
                own,
                helpers: 0,
                spawn: &spawn,
            };
            // Should `produce` panic, the helpers still return, so the panic ends the
            // process instead of leaving it waiting for them.
            let close = CloseOnDrop(&queue);
            produce(&mut here);
            while let Some(job) = here.take() {
                here.run(job);
            }
            drop(close);
            if let Some(worker) = here.own {
                worker.finish();
            }
        });
    }

    /// Makes the hard links before the first failure, then returns that failure in
    /// archive order, or else gives the directories their final modes and times and
    /// returns the summary.
    fn finish<L: Land>(
        self,
        parser: Parser,
        created: &Links,
        linker: impl FnOnce(OwnedFd) -> Result<L>,
        make: impl FnOnce(OwnedFd) -> Result<L>,
    ) -> Result<LandSummary> {
        let plan = parser.plan;
        self.remove_unfinished();
        if !plan.links.is_empty() {
            match dup(self.root).and_then(linker) {
                Ok(land) => self.link(land, &plan, created),
                Err(e) => self.fail((0, e)),
            }
        }
        let mut failures = self.failures.into_inner().expect("no panics");
        if let Some(i) = (0..failures.len()).min_by_key(|&i| failures[i].0) {
            return Err(failures.swap_remove(i).1);
        }
        parser.feed.ended()?;
        let entered = self.entered.into_inner().expect("no panics");
        let mut summary = plan.summary;
        let skipped = &mut summary.not_restored;
        plan.deferred
            .apply(self.root, entered, &plan.policy, skipped)?;
        if let Some((meta, xattrs)) = &plan.root {
            // Last, as with the sync lander: what lands in the root changes its time.
            let mut land = dup(self.root).and_then(make)?;
            land.root(meta, Xattrs(xattrs))?;
            land.finish()?;
            let landed = land.summary();
            summary.root_mode = landed.root_mode;
            summary.not_restored.add(&landed.not_restored);
        }
        summary.add_entries(&self.landed.into_inner().expect("no panics"));
        Ok(summary)
    }

    /// Removes the shared files some of whose extents did not land (after a failure), so
    /// that none stays under its name.
    fn remove_unfinished(&self) {
        for (at, file) in self.files.unfinished() {
            let path = || TreePath::join(at.iter().map(|n| &n[..]), file.name());
            let dir = open_path(self.root, &at).map_err(|e| Error::io("open directory", path(), e));
            let removed = dir.and_then(|dir| {
                let dir = dir.as_ref().map_or(self.root.as_fd(), |d| d.as_fd());
                file.remove(dir, path)
            });
            if let Err(e) = removed {
                self.fail((u64::MAX, e));
            }
        }
    }

    /// Makes the hard links of `plan` (those before the first failure) with `land`, which
    /// walks to the directory of each link's file, notes it there (when this unpack
    /// created it: `created` says so), and walks on to the link's directory.
    fn link<L: Land>(&self, land: L, plan: &Plan, created: &Links) {
        let mut worker = Worker::new(land, self);
        let created = created.lock().expect("no panics");
        let mut noted = std::collections::HashSet::new();
        for link in (plan.links.iter()).take_while(|l| l.entry < self.stop.load(Relaxed)) {
            let entry = Entry::new(&link.name, Kind::File, Meta::default());
            let target = link.target;
            let file = plan
                .linked
                .get(&target)
                .filter(|_| created.contains_key(&target));
            let noting = match file {
                Some((at, name)) if noted.insert(target) => worker
                    .walk(at, self)
                    .map(|()| worker.land.link_here(target, name)),
                _ => Ok(()),
            };
            let linked = noting
                .and_then(|()| worker.walk(&link.at, self))
                .and_then(|()| worker.land.hard_link(&entry, target));
            match linked {
                Ok(()) => self.progress.add_entry(0),
                Err(e) => self.fail((link.entry, e)),
            }
        }
        worker.finish();
    }
}

/// The calling thread's side of the landing: where batches go, and its own lander.
struct Here<'a, 's, L: Land> {
    queue: &'s Queue<'a>,
    crowds: &'s Crowds,
    own: Option<Worker<'s, L>>,
    /// Helper threads started.
    helpers: usize,
    /// Starts one; false when no thread can be had.
    spawn: &'s dyn Fn() -> bool,
}

impl<'a, L: Land> Here<'a, '_, L> {
    /// Starts `n` helper threads, which land queued batches until the queue closes; as
    /// many as can be had (with none, this thread lands every batch).
    fn start_helpers(&mut self, n: usize) {
        self.helpers += (0..n).take_while(|_| (self.spawn)()).count();
    }

    /// Queues `batch` for a helper, or lands it here when the queue is full or there are
    /// no helpers.
    fn send(&mut self, batch: Batch<'a>) {
        if self.helpers == 0 {
            return self.land(batch);
        }
        if let Some(batch) = self.queue.offer(batch) {
            self.land(batch);
        }
    }

    fn land(&mut self, batch: Batch<'a>) {
        if let Some(worker) = self.own.as_mut() {
            worker.land(&batch);
        }
    }

    /// A queued job for this thread, if any.
    fn take(&self) -> Option<Job<'a>> {
        self.queue.take(false, self.crowds)
    }

    /// Does `job` on this thread.
    fn run(&mut self, job: Job<'a>) {
        match job {
            Job::Land(batch) => self.land(batch),
            Job::Check(check) => check.run(),
        }
    }

    /// Queues `check` for a helper (without helpers, it runs when its result is needed).
    fn check(&mut self, check: &Arc<frames::Check<'a>>) {
        if self.helpers > 0 {
            self.queue.check(check.clone());
        }
    }
}

/// Closes a [`Queue`] when dropped.
struct CloseOnDrop<'q, 'a>(&'q Queue<'a>);

impl Drop for CloseOnDrop<'_, '_> {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Work for a helper.
enum Job<'a> {
    Land(Batch<'a>),
    /// A version 2 frame to inflate and check ahead of the decoding.
    Check(Arc<frames::Check<'a>>),
}

/// Batches decoded and not yet landed (see [`QUEUE`] and [`QUEUE_COST`]), frames to
/// check, and whether decoding is over.
#[derive(Default)]
struct Queue<'a> {
    state: Mutex<Queued<'a>>,
    ready: Condvar,
}

#[derive(Default)]
struct Queued<'a> {
    /// The batches in archive order, in runs of consecutive ones that start in the same
    /// directory (none empty).
    runs: VecDeque<VecDeque<Batch<'a>>>,
    /// How many batches, and their work (`Batch::queued_cost`).
    batches: usize,
    cost: u64,
    checks: VecDeque<Arc<frames::Check<'a>>>,
    closed: bool,
}

impl<'a> Queue<'a> {
    /// Queues `batch` for a helper, or gives it back when the queue is full.
    fn offer(&self, batch: Batch<'a>) -> Option<Batch<'a>> {
        let mut state = self.state.lock().expect("no panics");
        if state.batches >= QUEUE && state.cost >= QUEUE_COST {
            return Some(batch);
        }
        state.batches += 1;
        state.cost += batch.queued_cost();
        let crowd = |b: &Batch<'_>| b.crowd().map(Arc::as_ptr);
        match state.runs.back_mut() {
            Some(run) if crowd(&run[0]) == crowd(&batch) => run.push_back(batch),
            _ => state.runs.push_back(VecDeque::from([batch])),
        }
        drop(state);
        self.ready.notify_one();
        None
    }

    /// Queues `check` for a helper, before any batch.
    fn check(&self, check: Arc<frames::Check<'a>>) {
        self.state
            .lock()
            .expect("no panics")
            .checks
            .push_back(check);
        self.ready.notify_one();
    }

    /// The oldest check, else a batch (see [`Queued::pick`]); when there is none, waits
    /// for one if `wait` (None once closed).
    fn take(&self, wait: bool, crowds: &Crowds) -> Option<Job<'a>> {
        let mut state = self.state.lock().expect("no panics");
        loop {
            if let Some(check) = state.checks.pop_front() {
                return Some(Job::Check(check));
            }
            if let Some(batch) = state.pick(crowds) {
                return Some(Job::Land(batch));
            }
            if state.closed || !wait {
                return None;
            }
            state = self.ready.wait(state).expect("no panics");
        }
    }

    /// Whether no batch waits (the helpers took them all).
    fn is_empty(&self) -> bool {
        self.state.lock().expect("no panics").batches == 0
    }

    /// No more batches will come: waiting helpers return.
    fn close(&self) {
        self.state.lock().expect("no panics").closed = true;
        self.ready.notify_all();
    }
}

impl<'a> Queued<'a> {
    /// The oldest batch starting in a directory with room for one more lander (see
    /// [`Crowds::has_room`]), else the oldest, claimed for its lander: landers over a
    /// directory's cap land later directories instead of waiting for a place in it.
    /// The batches of one directory are still taken in archive order, so one waiting for
    /// a shared file an earlier batch creates waits for one being landed, or for one that
    /// the landers of a full directory take once they are done with earlier ones.
    fn pick(&mut self, crowds: &Crowds) -> Option<Batch<'a>> {
        let room = |run: &VecDeque<Batch<'_>>| run[0].crowd().is_none_or(|c| crowds.has_room(c));
        let i = self.runs.iter().position(room).unwrap_or(0);
        let run = self.runs.get_mut(i)?;
        let mut batch = run.pop_front().expect("no run is empty");
        if run.is_empty() {
            self.runs.remove(i);
        }
        self.batches -= 1;
        self.cost -= batch.queued_cost();
        batch.claim = batch.crowd().and_then(|c| crowds.claim(c));
        Some(batch)
    }
}

/// A hard link, made once every thread is done: its directory (the path from the root),
/// its name, the link id of its file, and its archive index.
struct Link {
    at: Vec<DirStep>,
    name: Box<[u8]>,
    target: u64,
    entry: u64,
}

/// The final mode (under the umask) and time of a directory, where it gets one.
#[derive(Clone, Copy)]
struct Last {
    /// The mode of a directory this unpack created, when it differs from the one it was
    /// created with.
    created: Option<u32>,
    /// The mode of one that was there ([`Policy::merged_dir_mode`]): with none, it keeps its
    /// mode and time.
    merged: Option<u32>,
    mtime: Option<Timestamp>,
}

/// Directories that get their final mode or time once every thread is done: those whose
/// archive mode lacks owner rwx (created with it so they can be filled) or has setuid or
/// setgid, and those with a time. They are kept as a tree of nodes (each such directory
/// and its parents, each once), so memory grows with the directories, not with their
/// depth.
#[derive(Default)]
struct Deferred {
    /// (parent, depth, name) of each node; the root's children have no parent and depth 1.
    nodes: Vec<(Option<usize>, usize, Name)>,
    /// The directories (node, what they get), children before parents.
    order: Vec<(usize, Last)>,
}

impl Deferred {
    fn add(&mut self, parent: Option<usize>, name: Name) -> usize {
        let depth = parent.map_or(1, |p| self.nodes[p].1 + 1);
        self.nodes.push((parent, depth, name));
        self.nodes.len() - 1
    }

    /// Gives each directory in `entered` its final mode and time (one that was there, the
    /// [`Last::merged`] mode, or none: it keeps its own), children first, as `policy`
    /// restores them. Each is reached one name at a time from `root` without following
    /// symlinks, reusing the directories opened for the previous one; a mode is changed
    /// with `fchmod` on the directory's own fd, a time by `utimensat` relative to its
    /// parent's, without following, so a name swapped for a symlink redirects neither.
    fn apply(
        &self,
        root: &OwnedFd,
        entered: Vec<(usize, bool)>,
        policy: &Policy,
        skipped: &mut NotRestored,
    ) -> Result<()> {
        let mut made = vec![None; self.nodes.len()];
        // Several landers enter a directory whose entries are in several batches: one of
        // them created it, or none.
        for (node, created) in entered {
            made[node] = Some(created || made[node] == Some(true));
        }
        // The open directories (node, fd) from depth 1 down to the last one's parent.
        let mut chain: Vec<(usize, OwnedFd)> = Vec::new();
        for &(node, last) in &self.order {
            let (mode, merged) = match made[node] {
                Some(true) => (last.created, false),
                Some(false) if last.merged.is_some() => (last.merged, true),
                _ => continue,
            };
            let mtime = last.mtime;
            let path = || {
                let mut names = Vec::new();
                let mut at = Some(node);
                while let Some(n) = at {
                    names.push(&self.nodes[n].2[..]);
                    at = self.nodes[n].0;
                }
                names.reverse();
                TreePath::join(names, &[])
            };
            let error = |op, e| Error::io(op, path(), e);
            // The parents to open: up to the deepest one already open.
            let mut parents = Vec::new();
            let mut at = self.nodes[node].0;
            while let Some(n) = at {
                let (parent, depth, _) = &self.nodes[n];
                if chain.get(*depth - 1).is_some_and(|(open, _)| *open == n) {
                    break;
                }
                parents.push(n);
                at = *parent;
            }
            chain.truncate(at.map_or(0, |n| self.nodes[n].1));
            for n in parents.into_iter().rev() {
                let dir = chain.last().map_or(root.as_fd(), |(_, fd)| fd.as_fd());
                let name = &self.nodes[n].2[..];
                let fd = openat(dir, name, DIR_HANDLE_FLAGS, Mode::empty())
                    .map_err(|e| error("open directory", e))?;
                chain.push((n, fd));
            }
            let dir = chain.last().map_or(root.as_fd(), |(_, fd)| fd.as_fd());
            let name = &self.nodes[node].2[..];
            let fd;
            let target = match mode {
                Some(_) => {
                    fd = openat(dir, name, DIR_FLAGS, Mode::empty())
                        .map_err(|e| error("open directory", e))?;
                    Target::Fd(fd.as_fd())
                }
                None => Target::At(dir, name),
            };
            policy.finish_dir(target, (mode, mtime), merged, skipped, path)?;
        }
        Ok(())
    }
}
