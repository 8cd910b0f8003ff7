//! The threaded dispatcher for an archive held in memory. The calling thread decodes it
//! (validating every message before it is landed) into batches of consecutive entries and
//! queues them for helper threads; when the queue is full, and once decoding is done, it
//! lands batches itself, so `workers` threads land in all (one per core, not one more).
//! Each lands with its own [`Land`] below its own duplicate of the root fd, and maps in the
//! pages of a batch before landing it. Helpers get a private fd table and credentials (see
//! [`go_solo`]), so no two threads share them. A batch carries the path of the
//! directory it starts in, which its lander creates or merges into first (an existing
//! directory is accepted, as for any `DIR`), so batches land in any order and on any
//! thread. Batches are cut preferably where the directory changes, so two threads rarely
//! create files in the same directory (the directory's lock serializes creations in it).
//!
//! Open fds: each lander holds the directories it is in (at most the depth limit) plus what
//! it holds itself; at most [`QUEUE`] batches wait in the queue.
//! Directories whose mode lacks owner rwx are created with it and get their mode once all
//! threads are done, children before parents.

use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};

use rustix::fs::{fchmod, openat, Mode};

use super::sync::{DIR_HANDLE_FLAGS, OWNER_RWX};
use super::{Land, LandSummary};
use crate::error::{Error, Result, TreePath};
use crate::format::{Decoder, Event, Limits, Step};
use crate::root::populate;
use crate::solo::go_solo;
use crate::walk::DIR_FLAGS;
use crate::Progress;

/// Batches waiting for a helper, at most.
pub const QUEUE: usize = 16;
/// Most work in a batch, in units of one entry; a batch ends at the next directory change
/// once it holds its share (see [`batch_cost`]), and regardless at twice that.
const BATCH_COST: u64 = 256;
/// Least work in a batch.
const MIN_BATCH_COST: u64 = 8;
/// Bytes of file content that cost as much as creating one file.
const BYTES_PER_UNIT: u64 = 32 * 1024;

/// One landing step, borrowing names and content from the archive.
enum Op<'a> {
    /// Create (or merge into) a directory and enter it.
    Enter(&'a [u8], u32),
    /// Create a directory that stays empty.
    Empty(&'a [u8], u32),
    /// Leave the directory entered last.
    Leave,
    /// Create a file with all of its content.
    File(&'a [u8], u32, &'a [u8]),
}

/// Consecutive entries of the archive and the directory path where they start.
struct Batch<'a> {
    /// Archive index of the first entry (errors are reported in archive order).
    first: u64,
    /// Directories (name, creation mode) from the root to where the batch starts.
    at: Vec<(&'a [u8], u32)>,
    /// The archive bytes the batch was decoded from.
    input: &'a [u8],
    ops: Vec<Op<'a>>,
    cost: u64,
}

impl<'a> Batch<'a> {
    fn new(first: u64, at: &[(&'a [u8], u32)]) -> Batch<'a> {
        Batch {
            first,
            at: at.to_vec(),
            input: &[],
            ops: Vec::new(),
            cost: 0,
        }
    }
}

/// An error and the archive index of the entry it concerns.
type Failure = (u64, Error);

/// Lands the archive `input` below `root` on `workers` threads (the calling thread and
/// `workers - 1` helpers), each landing through a lander made by `make` from its own
/// duplicate of `root`.
pub fn land_parallel<'a, L: Land>(
    root: OwnedFd,
    input: &'a [u8],
    limits: Limits,
    workers: usize,
    make: impl Fn(OwnedFd) -> Result<L> + Sync,
    progress: &Progress,
) -> Result<LandSummary> {
    // The archive index of the first failure found so far: entries before it still land,
    // so the error reported is the one the sync lander would meet first.
    let stop = AtomicU64::new(u64::MAX);
    let failures = Mutex::new(Vec::<Failure>::new());
    let fail = |failure: Failure| {
        stop.fetch_min(failure.0, Relaxed);
        failures.lock().expect("no panics").push(failure);
    };
    let dup = || {
        root.try_clone().map_err(|source| Error::Io {
            op: "dup destination",
            path: TreePath::default(),
            source,
        })
    };
    let queue = Queue::<'a>::default();
    let mut parsed = Parsed::default();
    std::thread::scope(|scope| {
        for _ in 1..workers.max(1) {
            let root = dup();
            let (queue, stop, fail, make) = (&queue, &stop, &fail, &make);
            scope.spawn(move || {
                let land = root.and_then(|root| {
                    go_solo();
                    make(root)
                });
                match land {
                    Ok(land) => {
                        let mut worker = Worker::new(land, stop, fail, progress);
                        while let Some(batch) = queue.take(true) {
                            worker.land(&batch);
                        }
                        worker.finish();
                    }
                    Err(e) => fail((0, e)),
                }
            });
        }
        // This thread decodes, lands a batch itself whenever the queue is full, and helps
        // to empty the queue once decoding is done. Without a lander of its own (it
        // failed, so nothing more lands), it drops what it would land.
        let mut own = match dup().and_then(&make) {
            Ok(land) => Some(Worker::new(land, &stop, &fail, progress)),
            Err(e) => {
                fail((0, e));
                None
            }
        };
        let mut land_here = |batch: Batch<'a>| {
            if let Some(worker) = own.as_mut() {
                worker.land(&batch);
            }
        };
        let result = parse(input, limits, workers, &stop, |batch| {
            if let Some(batch) = queue.offer(batch) {
                land_here(batch);
            }
        });
        while let Some(batch) = queue.take(false) {
            land_here(batch);
        }
        queue.close();
        if let Some(worker) = own {
            worker.finish();
        }
        match result {
            Ok(p) => parsed = p,
            Err(failure) => fail(failure),
        }
    });
    let mut failures = failures.into_inner().expect("no panics");
    if let Some(i) = (0..failures.len()).min_by_key(|&i| failures[i].0) {
        return Err(failures.swap_remove(i).1);
    }
    restrict_modes(&root, &parsed.restricted)?;
    Ok(parsed.summary)
}

/// Batches decoded and not yet landed, at most [`QUEUE`], and whether decoding is over.
#[derive(Default)]
struct Queue<'a> {
    state: Mutex<(VecDeque<Batch<'a>>, bool)>,
    ready: Condvar,
}

impl<'a> Queue<'a> {
    /// Queues `batch` for a helper, or gives it back when the queue is full.
    fn offer(&self, batch: Batch<'a>) -> Option<Batch<'a>> {
        let mut state = self.state.lock().expect("no panics");
        if state.0.len() >= QUEUE {
            return Some(batch);
        }
        state.0.push_back(batch);
        drop(state);
        self.ready.notify_one();
        None
    }

    /// The oldest batch; when there is none, waits for one if `wait` (None once closed).
    fn take(&self, wait: bool) -> Option<Batch<'a>> {
        let mut state = self.state.lock().expect("no panics");
        loop {
            if let Some(batch) = state.0.pop_front() {
                return Some(batch);
            }
            if state.1 || !wait {
                return None;
            }
            state = self.ready.wait(state).expect("no panics");
        }
    }

    /// No more batches will come: waiting helpers return.
    fn close(&self) {
        self.state.lock().expect("no panics").1 = true;
        self.ready.notify_all();
    }
}

/// What the decoding pass found besides the batches.
#[derive(Default)]
struct Parsed<'a> {
    summary: LandSummary,
    /// Directories to set to a mode without owner rwx (path, mode), children first.
    restricted: Vec<(Vec<&'a [u8]>, u32)>,
}

/// Decodes `input`, sending batches to `send`; stops early at a failure's index `stop`.
fn parse<'a>(
    input: &'a [u8],
    limits: Limits,
    workers: usize,
    stop: &AtomicU64,
    mut send: impl FnMut(Batch<'a>),
) -> std::result::Result<Parsed<'a>, Failure> {
    let mut decoder = Decoder::new(limits);
    let mut parsed = Parsed::default();
    let mut at: Vec<(&'a [u8], u32)> = Vec::new();
    let mut modes: Vec<u32> = Vec::new();
    let mut held: Option<(&'a [u8], u32)> = None;
    let mut entries = 0u64;
    let mut batch = Batch::new(0, &at);
    let batch_cost = batch_cost(input.len(), workers);
    // Input before `sent` belongs to batches already sent.
    let (mut pos, mut sent) = (0, 0);
    loop {
        let (event, n) = match decoder.next(&input[pos..], true) {
            Ok(Step::Event(event, n)) => (event, n),
            Ok(Step::Done) => break,
            Ok(Step::NeedMore) => unreachable!("complete input never needs more"),
            Err(e) => return Err((entries, e)),
        };
        pos += n;
        if entries >= stop.load(Relaxed) {
            return Ok(parsed);
        }
        let boundary = match event {
            Event::Dir { name, mode } => {
                if let Some((held, mode)) = held.take() {
                    enter(&mut batch, &mut at, &mut modes, held, mode);
                }
                held = Some((name, mode));
                parsed.summary.dirs += 1;
                entries += 1;
                true
            }
            Event::Pop => {
                match held.take() {
                    Some((name, mode)) => batch.ops.push(Op::Empty(name, mode)),
                    None => {
                        batch.ops.push(Op::Leave);
                        let mode = modes.pop().expect("the decoder checks nesting");
                        if mode & OWNER_RWX != OWNER_RWX {
                            let path = at.iter().map(|(name, _)| *name).collect();
                            parsed.restricted.push((path, mode));
                        }
                        at.pop();
                    }
                }
                batch.cost += 1;
                true
            }
            Event::File {
                name, mode, data, ..
            } => {
                if let Some((held, mode)) = held.take() {
                    enter(&mut batch, &mut at, &mut modes, held, mode);
                }
                batch.ops.push(Op::File(name, mode, data));
                batch.cost += 1 + data.len() as u64 / BYTES_PER_UNIT;
                parsed.summary.files += 1;
                parsed.summary.bytes += data.len() as u64;
                entries += 1;
                false
            }
            Event::Data(_) => unreachable!("complete input gives whole files"),
            Event::End { .. } => false,
        };
        if (boundary && batch.cost >= batch_cost) || batch.cost >= 2 * batch_cost {
            let next = Batch::new(entries - u64::from(held.is_some()), &at);
            batch.input = &input[sent..pos];
            sent = pos;
            send(std::mem::replace(&mut batch, next));
        }
    }
    if !batch.ops.is_empty() {
        batch.input = &input[sent..pos];
        send(batch);
    }
    Ok(parsed)
}

/// Work per batch for an archive of `len` bytes: an eighth of each worker's share of the
/// estimated work (one entry per 16 KiB of archive plus its bytes), so that even a small
/// archive is cut into several batches per worker.
fn batch_cost(len: usize, workers: usize) -> u64 {
    let estimate = len as u64 / (16 * 1024) + len as u64 / BYTES_PER_UNIT;
    (estimate / (8 * workers as u64)).clamp(MIN_BATCH_COST, BATCH_COST)
}

/// Adds entering directory `name` to the batch; a mode lacking owner rwx is created with
/// it (the final mode is set at the end).
fn enter<'a>(
    batch: &mut Batch<'a>,
    at: &mut Vec<(&'a [u8], u32)>,
    modes: &mut Vec<u32>,
    name: &'a [u8],
    mode: u32,
) {
    batch.ops.push(Op::Enter(name, mode | OWNER_RWX));
    batch.cost += 1;
    at.push((name, mode | OWNER_RWX));
    modes.push(mode);
}

/// A lander and the directories it is in, landing batch after batch.
struct Worker<'a, 's, L: Land, F: Fn(Failure)> {
    land: L,
    at: Vec<&'a [u8]>,
    stop: &'s AtomicU64,
    fail: &'s F,
    progress: &'s Progress,
}

impl<'a, 's, L: Land, F: Fn(Failure)> Worker<'a, 's, L, F> {
    fn new(land: L, stop: &'s AtomicU64, fail: &'s F, progress: &'s Progress) -> Self {
        Worker {
            land,
            at: Vec::new(),
            stop,
            fail,
            progress,
        }
    }

    /// Lands `batch` unless it starts after a failure.
    fn land(&mut self, batch: &Batch<'a>) {
        if batch.first >= self.stop.load(Relaxed) {
            return;
        }
        if let Err(failure) = land_batch(
            &mut self.land,
            &mut self.at,
            batch,
            self.stop,
            self.progress,
        ) {
            (self.fail)((failure.0, self.land.abort(failure.1)));
        }
    }

    /// Completes the lander's pending work.
    fn finish(mut self) {
        if let Err(e) = self.land.finish() {
            (self.fail)((u64::MAX, e));
        }
    }
}

/// Moves to the batch's starting directory, then lands its entries.
fn land_batch<'a, L: Land>(
    land: &mut L,
    at: &mut Vec<&'a [u8]>,
    batch: &Batch<'a>,
    stop: &AtomicU64,
    progress: &Progress,
) -> std::result::Result<(), Failure> {
    populate(batch.input);
    let mut entry = batch.first;
    let fail = |entry: u64| move |e: Error| (entry, e);
    let common = at
        .iter()
        .zip(&batch.at)
        .take_while(|(a, (b, _))| *a == b)
        .count();
    while at.len() > common {
        land.leave_dir().map_err(fail(entry))?;
        at.pop();
    }
    for &(name, mode) in &batch.at[common..] {
        land.enter_dir(name, mode).map_err(fail(entry))?;
        at.push(name);
    }
    for op in &batch.ops {
        if entry >= stop.load(Relaxed) {
            return Ok(());
        }
        match *op {
            Op::Enter(name, mode) => {
                land.enter_dir(name, mode).map_err(fail(entry))?;
                at.push(name);
                progress.add_entry(0);
                entry += 1;
            }
            Op::Empty(name, mode) => {
                land.empty_dir(name, mode).map_err(fail(entry))?;
                progress.add_entry(0);
                entry += 1;
            }
            Op::Leave => {
                land.leave_dir().map_err(fail(entry))?;
                at.pop();
            }
            Op::File(name, mode, data) => {
                land.file(name, mode, data.len() as u64, data)
                    .map_err(fail(entry))?;
                progress.add_entry(data.len() as u64);
                entry += 1;
            }
        }
    }
    Ok(())
}

/// Gives directories their final mode lacking owner rwx, children first. Each is reached
/// one name at a time without following symlinks and changed with `fchmod` on its own fd,
/// so a name swapped for a symlink cannot redirect the change.
fn restrict_modes(root: &OwnedFd, dirs: &[(Vec<&[u8]>, u32)]) -> Result<()> {
    for (path, mode) in dirs {
        let error = |op, e| Error::io(op, TreePath::join(path.iter().copied(), &[]), e);
        let mut dir: Option<OwnedFd> = None;
        for (depth, name) in path.iter().enumerate() {
            let at = dir.as_ref().map_or(root.as_fd(), |d| d.as_fd());
            let flags = if depth + 1 == path.len() {
                DIR_FLAGS
            } else {
                DIR_HANDLE_FLAGS
            };
            let next =
                openat(at, *name, flags, Mode::empty()).map_err(|e| error("open directory", e))?;
            dir = Some(next);
        }
        let dir = dir.expect("a directory below the root");
        fchmod(&dir, Mode::from_raw_mode(*mode)).map_err(|e| error("fchmod", e))?;
    }
    Ok(())
}
