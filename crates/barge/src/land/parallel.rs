//! The threaded dispatcher: the calling thread decodes an archive held in memory
//! (validating every message before it is landed), maps in the pages of each batch of
//! consecutive entries (so the mapping is populated while workers land earlier batches) and
//! hands the batches to worker threads, each landing with its own [`Land`] below its own
//! duplicate of the root fd. A batch carries the path of the directory it starts in, which its worker creates or
//! merges into first (an existing directory is accepted, as for any `DIR`), so batches land
//! in any order and on any worker. Batches are cut preferably where the directory changes,
//! so two workers rarely create files in the same directory (the directory's lock
//! serializes creations in it).
//!
//! Open fds: each worker holds the directories it is in (at most the depth limit) plus what
//! its lander holds; at most [`QUEUE`] batches wait between the decoder and the workers.
//! Directories whose mode lacks owner rwx are created with it and get their mode once all
//! workers are done, children before parents.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Mutex;

use rustix::fs::{fchmod, openat, Mode};

use super::sync::{DIR_HANDLE_FLAGS, OWNER_RWX};
use super::{Land, LandSummary};
use crate::error::{Error, Result, TreePath};
use crate::fds::private_fd_table;
use crate::format::{Decoder, Event, Limits, Step};
use crate::root::populate;
use crate::walk::DIR_FLAGS;
use crate::Progress;

/// Batches waiting for a worker, at most.
pub const QUEUE: usize = 16;
/// Most work in a batch, in units of one entry; a batch ends at the next directory change
/// once it holds its share (see [`batch_cost`]), and regardless at four times that.
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
    ops: Vec<Op<'a>>,
    cost: u64,
}

impl<'a> Batch<'a> {
    fn new(first: u64, at: &[(&'a [u8], u32)]) -> Batch<'a> {
        Batch {
            first,
            at: at.to_vec(),
            ops: Vec::new(),
            cost: 0,
        }
    }
}

/// An error and the archive index of the entry it concerns.
type Failure = (u64, Error);

/// Lands the archive `input` below `root` with `workers` threads, each landing through a
/// lander made by `make` from its own duplicate of `root`.
pub fn land_parallel<L: Land>(
    root: OwnedFd,
    input: &[u8],
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
    let (tx, rx) = sync_channel::<Batch<'_>>(QUEUE);
    let rx = Mutex::new(rx);
    let mut parsed = Parsed::default();
    std::thread::scope(|scope| {
        for _ in 0..workers.max(1) {
            let root = root.try_clone().map_err(|source| Error::Io {
                op: "dup destination",
                path: TreePath::default(),
                source,
            });
            let (rx, stop, fail, make) = (&rx, &stop, &fail, &make);
            scope.spawn(move || {
                match root.and_then(|root| {
                    private_fd_table();
                    make(root)
                }) {
                    Ok(land) => work(land, rx, stop, fail, progress),
                    Err(e) => fail((0, e)),
                }
            });
        }
        let result = parse(input, limits, workers, &stop, |batch| {
            // A send fails only when every worker is gone, which they are after a failure.
            let _ = tx.send(batch);
        });
        drop(tx);
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
        if (boundary && batch.cost >= batch_cost) || batch.cost >= 4 * batch_cost {
            let next = Batch::new(entries - u64::from(held.is_some()), &at);
            populate(&input[sent..pos]);
            sent = pos;
            send(std::mem::replace(&mut batch, next));
        }
    }
    if !batch.ops.is_empty() {
        populate(&input[sent..pos]);
        send(batch);
    }
    Ok(parsed)
}

/// Work per batch for an archive of `len` bytes: small archives are cut finer, so that
/// each worker gets several batches.
fn batch_cost(len: usize, workers: usize) -> u64 {
    let units = len as u64 / 4096;
    (units / (8 * workers as u64)).clamp(MIN_BATCH_COST, BATCH_COST)
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

/// A worker: lands batches until the queue closes or something failed.
fn work<'a, L: Land>(
    mut land: L,
    rx: &Mutex<Receiver<Batch<'a>>>,
    stop: &AtomicU64,
    fail: &impl Fn(Failure),
    progress: &Progress,
) {
    let mut at: Vec<&'a [u8]> = Vec::new();
    loop {
        let Ok(batch) = rx.lock().expect("no panics").recv() else {
            break;
        };
        if batch.first >= stop.load(Relaxed) {
            continue;
        }
        if let Err(failure) = land_batch(&mut land, &mut at, &batch, stop, progress) {
            fail((failure.0, land.abort(failure.1)));
        }
    }
    if let Err(e) = land.finish() {
        fail((u64::MAX, e));
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
