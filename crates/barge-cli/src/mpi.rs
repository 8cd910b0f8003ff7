//! `barge cp --mpi` (the `mpi` feature): the ranks of an MPI job share one copy. Each rank
//! copies the parts of SRC that hash to it ([`Part::Rank`]); then every rank's names of
//! files of several links are gathered, and each such file is copied and linked by the one
//! rank its device and inode hash to ([`link_owner`]), so that its names stay one file;
//! then rank 0 gives the directories above the parts their metadata ([`Part::Spine`]).
//! The counts are summed on every rank (one exit status for the job); rank 0 shows the
//! progress and the summary. Only the main thread calls MPI.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use barge::cp::{link_owner, CpReport, CpSummary, Deferred, Linked, Part, Wide, WIDE_CHUNK};
use barge::interrupt::Cancel;
use barge::threads::Work;
use barge::Progress;
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Threading;
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use serde_json::Value;

use crate::cp::{plan, report, CpArgs, Plan};
use crate::report::{failure, shown_path, shows_progress, with_progress, Exit, Total};

/// The longest the ranks wait between two sums of their progress (they start at a
/// millisecond, so that a small copy does not wait for the sum that ends it): a step's end
/// is seen this late at most, on each of the copy's steps (docs/BENCHMARKS.md, "cp --mpi
/// against dcp").
const TICK: Duration = Duration::from_millis(20);

/// `mpiexec -n N barge-mpi cp --mpi SRC DEST`.
pub fn cp(args: &CpArgs, cancel: &Cancel) -> Result<Exit> {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or_else(|| anyhow!("MPI was initialized already"))?;
    let world = universe.world();
    let (rank, ranks) = (world.rank() as u32, world.size() as u32);
    let planned = plan(args, cancel).and_then(|plan| match plan.targets.len() {
        1 => Ok(plan),
        _ => bail!("--mpi copies one SRC (copy the others in jobs of their own)"),
    });
    // Every rank plans alike; an error is told once, by rank 0 where it has it too.
    let mut failed = vec![0u64; ranks as usize];
    world.all_gather_into(&u64::from(planned.is_err()), &mut failed[..]);
    let planned = match planned {
        Err(e) if rank == 0 || failed[0] == 0 => return Err(e),
        Err(_) => return Ok(Exit::Error),
        Ok(_) if failed.iter().any(|&f| f > 0) => return Ok(Exit::Error),
        Ok(plan) => plan,
    };
    let Plan {
        cp,
        targets,
        exclude,
        printer,
    } = planned;
    let (src, dest) = &targets[0];
    let progress = Progress::default();
    let summed = Progress::default();
    let linked = Linked::default();
    let run = |part: Part| {
        cp.clone()
            .part(part)
            .run_linked(src, dest, &linked, &progress, &printer)
    };
    let copy = || -> Option<CpSummary> {
        let on_0 = |part| match rank {
            0 => run(part),
            _ => Ok(CpSummary::default()),
        };
        if !std::fs::symlink_metadata(src).is_ok_and(|meta| meta.is_dir()) {
            return whole(
                &world,
                together(&world, &progress, &summed, || on_0(Part::Whole)),
            );
        }
        let share = together(&world, &progress, &summed, || {
            run(Part::Rank { rank, ranks })
        });
        let mut done = whole(&world, share)?;
        let names = my_links(&world, linked.take_deferred(), rank, ranks, &mut done);
        let links = together(&world, &progress, &summed, || {
            cp.run_links(src, dest, &names, &linked, &progress, &printer)
        });
        done.add(&whole(&world, links)?);
        let files = all_wide(&world, linked.take_wide());
        if !files.is_empty() {
            let step =
                |work: &(dyn Fn() -> CpSummary + Sync)| together(&world, &progress, &summed, work);
            done.add(&wide(
                &world,
                &files,
                step,
                |i| (i % ranks as usize) as u32 == rank,
                &cp,
                src,
                dest,
                &linked,
                &progress,
                &printer,
            ));
        }
        let spine = together(&world, &progress, &summed, || on_0(Part::Spine));
        done.add(&whole(&world, spine)?);
        Some(done)
    };
    let mut out = args.out();
    out.no_progress |= rank != 0;
    let total = Total::default();
    let (done, elapsed) = std::thread::scope(|scope| {
        if shows_progress(out) {
            let _ = std::thread::Builder::new().spawn_scoped(scope, || {
                total.count(std::slice::from_ref(src), exclude, args.one_file_system)
            });
        }
        with_progress(out, &summed, || total.known(), copy)
    });
    // A copy that failed as a whole (SRC or DEST unreachable) counts one error.
    let done = done.unwrap_or_else(|| {
        let mut failed = CpSummary::default();
        failed.counts.errors = u64::from(rank == 0);
        failed
    });
    let done = sum(&world, &done);
    // Rank 0 reads the copy back; every rank learns whether it found a difference.
    let verified = (args.verify && rank == 0 && !done.stopped)
        .then(|| cp.verify(src, dest, &printer))
        .transpose();
    let differs = verified
        .as_ref()
        .map_or(true, |v| v.is_some_and(|v| v.differences > 0));
    let mut any_differs = 0u64;
    world.all_reduce_into(
        &u64::from(differs),
        &mut any_differs,
        SystemOperation::sum(),
    );
    if rank != 0 {
        let fine = done.counts.errors == 0 && any_differs == 0 && !done.stopped;
        return Ok(if fine { Exit::Success } else { Exit::Error });
    }
    let verified = verified?.unwrap_or_default();
    if done.stopped {
        bail!(
            "copy into {} stopped: it can take no more",
            shown_path(dest)
        );
    }
    Ok(report(args, &done, &verified, elapsed))
}

/// What one step of the copy did on this rank, or `None` on every rank where it failed as a
/// whole on any (SRC or DEST unreachable: the copy goes no further). The error is told
/// by the lowest rank that has one: the ranks fail alike.
fn whole(world: &SimpleCommunicator, done: barge::Result<CpSummary>) -> Option<CpSummary> {
    let mut failed = vec![0u64; world.size() as usize];
    world.all_gather_into(&u64::from(done.is_err()), &mut failed[..]);
    match (done, failed.iter().position(|&f| f > 0)) {
        (Ok(done), None) => Some(done),
        (Err(e), Some(first)) if first == world.rank() as usize => {
            failure(&e.into());
            None
        }
        _ => None,
    }
}

/// Runs `work` on a thread of its own while this thread sums every rank's progress into
/// `summed` (what rank 0 shows), until the work of every rank is done: a barrier that
/// keeps the progress line going.
fn together<T: Send>(
    world: &SimpleCommunicator,
    progress: &Progress,
    summed: &Progress,
    work: impl FnOnce() -> T + Send,
) -> T {
    let done = AtomicBool::new(false);
    let ranks = world.size() as u64;
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = work();
            done.store(true, Relaxed);
            result
        });
        let mut tick = Duration::from_millis(1);
        loop {
            let mine = [
                progress.entries(),
                progress.bytes(),
                u64::from(done.load(Relaxed)),
            ];
            let mut sums = [0u64; 3];
            world.all_reduce_into(&mine[..], &mut sums[..], SystemOperation::sum());
            summed.set(sums[0], sums[1]);
            if sums[2] == ranks {
                break;
            }
            std::thread::sleep(tick);
            tick = (tick * 2).min(TICK);
        }
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The names of files of several links that this rank copies and links: every rank's
/// `deferred` names, gathered, those of the files [`link_owner`] gives this rank, by file.
/// Names that cannot be sent (over 2 GiB of them on one rank) are counted in `done` as
/// errors.
fn my_links(
    world: &SimpleCommunicator,
    deferred: Vec<Deferred>,
    rank: u32,
    ranks: u32,
    done: &mut CpSummary,
) -> Vec<Vec<u8>> {
    let mut bytes = Vec::new();
    for ((dev, ino), path) in &deferred {
        for n in [*dev, *ino, path.len() as u64] {
            bytes.extend(n.to_le_bytes());
        }
        bytes.extend(path);
    }
    if i32::try_from(bytes.len()).is_err() {
        failure(&anyhow!(
            "{} names of hard-linked files: too many to share",
            deferred.len()
        ));
        done.counts.errors += deferred.len() as u64;
        bytes.clear();
    }
    let all = all_bytes(world, &bytes);
    let mut mine = Vec::new();
    let mut rest = &all[..];
    while !rest.is_empty() {
        let key = (number(&mut rest), number(&mut rest));
        let len = number(&mut rest) as usize;
        let (path, after) = rest.split_at(len);
        rest = after;
        if link_owner(key, ranks) == rank {
            mine.push((key, path.to_vec()));
        }
    }
    mine.sort_unstable();
    mine.into_iter().map(|(_, path)| path).collect()
}

/// Every rank's large files left to the wide copy, on every rank, in one order.
fn all_wide(world: &SimpleCommunicator, mine: Vec<Wide>) -> Vec<Wide> {
    let mut bytes = Vec::new();
    for (path, size) in &mine {
        bytes.extend(size.to_le_bytes());
        bytes.extend((path.len() as u64).to_le_bytes());
        bytes.extend(path);
    }
    let all = all_bytes(world, &bytes);
    let mut rest = &all[..];
    let mut files = Vec::new();
    while !rest.is_empty() {
        let size = number(&mut rest);
        let len = number(&mut rest) as usize;
        let (path, after) = rest.split_at(len);
        rest = after;
        files.push((path.to_vec(), size));
    }
    files.sort_unstable();
    files
}

/// The wide copy of `files` (every rank's, [`all_wide`]): the rank `mine` gives each file
/// to makes it; every rank copies its share of the ranges of all of them (dealt in turn,
/// [`WIDE_CHUNK`] bytes each, the files' first ranges first); the rank that made a file finishes it, or removes it when a
/// range failed on any rank. `step` runs each step on every rank together.
#[allow(clippy::too_many_arguments)]
fn wide(
    world: &SimpleCommunicator,
    files: &[Wide],
    step: impl Fn(&(dyn Fn() -> CpSummary + Sync)) -> CpSummary,
    mine: impl Fn(usize) -> bool + Sync,
    cp: &barge::cp::Cp,
    src: &std::path::Path,
    dest: &std::path::Path,
    linked: &Linked,
    progress: &Progress,
    printer: &dyn CpReport,
) -> CpSummary {
    let failed = |e: barge::Error, done: &mut CpSummary| {
        printer.error(e);
        done.counts.errors += 1;
    };
    let made = std::sync::Mutex::new(Vec::new());
    let mut done = step(&|| {
        let mut done = CpSummary::default();
        for (i, (path, _)) in files.iter().enumerate().filter(|(i, _)| mine(*i)) {
            match cp.make_wide(src, dest, path, linked, progress, printer) {
                Ok((name, made_here)) => {
                    done.add(&made_here);
                    made.lock()
                        .expect("no panics")
                        .extend(name.map(|name| (i, name)));
                }
                Err(e) => failed(e, &mut done),
            }
        }
        done
    });
    // Which name each file was made under, on every rank.
    let mut bytes = Vec::new();
    for (i, name) in made.into_inner().expect("no panics") {
        bytes.extend((i as u64).to_le_bytes());
        bytes.extend((name.len() as u64).to_le_bytes());
        bytes.extend(name);
    }
    let all = all_bytes(world, &bytes);
    let mut names = vec![None; files.len()];
    let mut rest = &all[..];
    while !rest.is_empty() {
        let i = number(&mut rest) as usize;
        let len = number(&mut rest) as usize;
        let (name, after) = rest.split_at(len);
        rest = after;
        names[i] = Some(name.to_vec());
    }
    let (rank, ranks) = (world.rank() as u64, world.size() as u64);
    let broken = std::sync::Mutex::new(vec![0u64; files.len()]);
    done.add(&step(&|| {
        // The first range of every file, then the second...: ranks and threads at work at
        // once write different files (writes to one file wait for each other on tmpfs).
        let chunks = |size: u64| size.div_ceil(WIDE_CHUNK);
        let most = files
            .iter()
            .map(|(_, size)| chunks(*size))
            .max()
            .unwrap_or(0);
        let ranges = (0..most).flat_map(|c| {
            let named = files.iter().zip(&names).enumerate();
            named.filter_map(move |(i, ((path, size), name))| {
                let range = c * WIDE_CHUNK..((c + 1) * WIDE_CHUNK).min(*size);
                Some((i, path, name.as_ref()?, range)).filter(|_| c < chunks(*size))
            })
        });
        let mine: Vec<_> = (ranges.enumerate())
            .filter(|(k, _)| *k as u64 % ranks == rank)
            .collect();
        // On as many threads as the cores (a rank is a node's on a cluster).
        let threads = Work::Cores.threads().min(mine.len());
        let next = std::sync::Mutex::new(mine.into_iter());
        let done = std::sync::Mutex::new(CpSummary::default());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let Some((_, (i, path, name, range))) = next.lock().expect("no panics").next()
                    else {
                        return;
                    };
                    if let Err(e) = cp.copy_wide(src, dest, (path, name), range, progress, printer)
                    {
                        failed(e, &mut done.lock().expect("no panics"));
                        broken.lock().expect("no panics")[i] = 1;
                    }
                });
            }
        });
        done.into_inner().expect("no panics")
    }));
    let broken = broken.into_inner().expect("no panics");
    let mut anywhere = vec![0u64; files.len()];
    world.all_reduce_into(&broken[..], &mut anywhere[..], SystemOperation::sum());
    done.add(&step(&|| {
        let mut done = CpSummary::default();
        for (i, (path, _)) in files.iter().enumerate().filter(|(i, _)| mine(*i)) {
            let Some(name) = &names[i] else { continue };
            let whole = anywhere[i] == 0;
            match cp.finish_wide(src, dest, (path, name), whole, linked, progress, printer) {
                Ok(finished) => done.add(&finished),
                Err(e) => failed(e, &mut done),
            }
        }
        done
    }));
    done
}

/// Every rank's `bytes`, one after another in rank order, on every rank.
fn all_bytes(world: &SimpleCommunicator, bytes: &[u8]) -> Vec<u8> {
    let len = i32::try_from(bytes.len())
        .expect("under 2 GiB: hard-link names are checked, large files are few");
    let mut counts = vec![0i32; world.size() as usize];
    world.all_gather_into(&len, &mut counts[..]);
    let starts: Vec<i32> = (counts.iter())
        .scan(0, |at, &n| {
            let start = *at;
            *at += n;
            Some(start)
        })
        .collect();
    let mut all = vec![0u8; counts.iter().map(|&n| n as usize).sum()];
    world.all_gather_varcount_into(bytes, &mut PartitionMut::new(&mut all[..], counts, starts));
    all
}

/// The little-endian u64 at the start of `rest`, taken off it.
fn number(rest: &mut &[u8]) -> u64 {
    let (n, after) = rest.split_at(8);
    *rest = after;
    u64::from_le_bytes(n.try_into().expect("8 bytes"))
}

/// `done` summed over every rank, on every rank: its counts flattened in one order (the
/// fields of its JSON form), added by one reduction, put back.
fn sum(world: &SimpleCommunicator, done: &CpSummary) -> CpSummary {
    let mut value = serde_json::to_value(done).expect("plain data");
    let mut numbers = Vec::new();
    leaves(&mut value, &mut |leaf| {
        numbers.push(match leaf {
            Value::Bool(yes) => u64::from(*yes),
            other => other.as_u64().unwrap_or(0),
        })
    });
    let mut sums = vec![0u64; numbers.len()];
    world.all_reduce_into(&numbers[..], &mut sums[..], SystemOperation::sum());
    let mut sums = sums.into_iter();
    leaves(&mut value, &mut |leaf| {
        let n = sums.next().expect("as many");
        *leaf = match leaf {
            Value::Bool(_) => Value::Bool(n > 0),
            _ => n.into(),
        }
    });
    serde_json::from_value(value).expect("the same shape")
}

/// Calls `f` on each value in `value` that is not an object, in order.
fn leaves(value: &mut Value, f: &mut impl FnMut(&mut Value)) {
    match value {
        Value::Object(fields) => fields.values_mut().for_each(|v| leaves(v, f)),
        leaf => f(leaf),
    }
}
