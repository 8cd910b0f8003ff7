//! The `mpi` feature: `cp --mpi`, `pack --mpi` and `unpack --mpi`, the ranks of an MPI job
//! sharing one copy or one archive.
//!
//! `barge cp --mpi`: the ranks of an MPI job share one copy, one SRC after another. Each rank
//! copies the parts of SRC that hash to it ([`Part::Rank`]), then parts other ranks have
//! not begun, which they give it on request ([`Market`]); then every rank's names of
//! files of several links are gathered, and each such file is copied and linked by the one
//! rank its device and inode hash to ([`link_owner`]), so that its names stay one file;
//! then rank 0 gives the directories above the parts their metadata ([`Part::Spine`]).
//! The counts are summed on every rank (one exit status for the job); rank 0 shows the
//! progress and the summary. Only the main thread calls MPI.
//!
//! `barge unpack --mpi`: see [`unpack`].
//!
//! `barge pack --mpi`: each rank plans the parts dealt to it (every rank-th), each apart:
//! entries, length stored raw and files of several links; the plans are gathered on every
//! rank, and each takes the run of parts that [`cut_runs`] gives it, runs of about equal
//! weight, whose plans sum to its own ([`barge::pack::share`]); the lengths of the runs'
//! frames, summed by `MPI_Exscan`, say where each rank writes its own into the archive that
//! rank 0 created with the header (with zstd, whose lengths are known only once
//! compressed, each rank packs into a file of its own, copied into place once the lengths
//! are summed); rank 0 then writes the index and the footer (from every rank's segments and
//! rows, gathered) and renames the archive into place.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use barge::cp::{
    link_owner, Change, Cp, CpReport, CpSummary, Deferred, Ledger, Linked, Part, Verified, Wide,
    WIDE_CHUNK,
};
use barge::interrupt::Cancel;
use barge::pack::share::{plan_run, tail, FileStats, PartPlan, HEADER};
use barge::pack::{Pack, PackSummary};
use barge::share::{cut_runs, split_depth, Share, SPINE};
use barge::threads::Work;
use barge::walk::Members;
use barge::Progress;
use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::environment::Threading;
use mpi::request::{Request, Scope};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use rustix::fs::{copy_file_range, fdatasync, seek, Mode, OFlags, SeekFrom, CWD};
use serde_json::Value;

use barge::root::Confinement;
use barge::unpack::{LandSummary, Unpack};

use crate::archive::{shared_pack, told_packed, told_unpacked, PackArgs, SharedPack};
use crate::cp::{plan, report, CpArgs, Plan, Printer};
use crate::report::{failure, shown_path, shows_progress, warn, with_progress, Exit, Known, Total};
use crate::OutputArgs;

/// The longest the ranks wait between two sums of their progress while their work goes on
/// ([`together`]; docs/BENCHMARKS.md, "cp --mpi against dcp").
const TICK: Duration = Duration::from_millis(20);

/// The longest a rank sleeps between two tests of a collective call it waits for
/// ([`settle`]): how late it sees the last rank come, at most.
const NAP: Duration = Duration::from_millis(1);

/// `mpiexec -n N barge-mpi cp --mpi SRC... DEST`: the SRCs one after the other, as a plain
/// copy takes them, the ranks sharing each.
pub fn cp(args: &CpArgs, cancel: &Cancel) -> Result<Exit> {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or_else(|| anyhow!("MPI was initialized already"))?;
    let world = universe.world();
    let rank = world.rank() as u32;
    // Every rank plans alike; an error is told once.
    let Some(planned) = whole(&world, plan(args, cancel)) else {
        return Ok(Exit::Error);
    };
    let Plan {
        cp,
        targets,
        exclude,
        printer,
        counted,
    } = planned;
    let (progress, summed) = (Progress::default(), Progress::default());
    // Names of one file in several SRCs stay linked, as with cp -a.
    let linked = Linked::default();
    let job = Job {
        world: &world,
        cp: &cp,
        linked: &linked,
        progress: &progress,
        summed: &summed,
        printer: &printer,
    };
    let mut copied = Vec::new();
    let copy = || {
        let mut done = CpSummary::default();
        for (src, dest) in &targets {
            let one = job.copy(src, dest);
            let failed = one.is_none();
            // A SRC that failed as a whole (unreachable, DEST refused) counts one error;
            // the others are still copied, unless the job was interrupted.
            let mut mine = one.unwrap_or_default();
            mine.counts.errors += u64::from(failed && rank == 0);
            let all = sum(&world, &mine);
            done.add(&all);
            if !failed {
                copied.push((src, dest));
            }
            if all.stopped || (failed && any(&world, cancel.is_cancelled())) {
                break;
            }
        }
        done
    };
    let mut out = args.out();
    out.no_progress |= rank != 0;
    let total = Total::default();
    let (done, elapsed) = std::thread::scope(|scope| {
        if shows_progress(out) {
            let _ = std::thread::Builder::new().spawn_scoped(scope, || {
                total.count(&counted, exclude, args.one_file_system)
            });
        }
        with_progress(out, &summed, || total.known(), copy)
    });
    // Rank 0 reads the copies back; every rank learns whether it found a difference.
    let verified = (args.verify && rank == 0 && !done.stopped).then(|| {
        copied
            .iter()
            .try_fold(Verified::default(), |mut all, (src, dest)| {
                let checked = cp.verify(src, dest, &printer)?;
                all.files += checked.files;
                all.bytes += checked.bytes;
                all.differences += checked.differences;
                anyhow::Ok(all)
            })
    });
    let differs = verified
        .as_ref()
        .is_some_and(|v| v.as_ref().map_or(true, |v| v.differences > 0));
    let any_differs = any(&world, differs);
    if rank != 0 {
        let fine = done.counts.errors == 0 && !any_differs && !done.stopped;
        return Ok(if fine { Exit::Success } else { Exit::Error });
    }
    let verified = verified.transpose()?.unwrap_or_default();
    if let (true, Some((_, dest))) = (done.stopped, copied.last()) {
        bail!(
            "copy into {} stopped: it can take no more",
            shown_path(dest)
        );
    }
    Ok(report(args, &done, &verified, elapsed))
}

/// What the steps of each SRC's copy share on a rank.
struct Job<'a> {
    world: &'a SimpleCommunicator,
    cp: &'a Cp,
    linked: &'a Linked,
    /// This rank's progress, and every rank's summed (what rank 0 shows).
    progress: &'a Progress,
    summed: &'a Progress,
    printer: &'a Printer,
}

impl Job<'_> {
    /// Copies `src` as `dest`, the ranks sharing it: each copies the parts that hash to it
    /// and those others give it once its own are done, then the files of several links by
    /// their owners, then the large files by ranges, then rank 0 the directories above the
    /// parts. This rank's summary, or `None` on every
    /// rank where it failed as a whole on any (told once).
    fn copy(&self, src: &Path, dest: &Path) -> Option<CpSummary> {
        let (world, cp, linked, printer) = (self.world, self.cp, self.linked, self.printer);
        let (rank, ranks) = (world.rank() as u32, world.size() as u32);
        let run = |part: Part| {
            cp.clone()
                .part(part)
                .run_linked(src, dest, linked, self.progress, printer)
        };
        let on = |by: u32, part| match rank == by {
            true => run(part),
            false => Ok(CpSummary::default()),
        };
        let meta = std::fs::symlink_metadata(src);
        if !meta.as_ref().is_ok_and(|meta| meta.is_dir()) {
            // A file of several links is copied by the rank that links its names in the
            // directory SRCs (as in their step for such files), so that they stay one file.
            let by = match meta {
                Ok(meta) if meta.is_file() && meta.nlink() > 1 => {
                    link_owner((0, meta.ino()), ranks)
                }
                _ => 0,
            };
            return whole(world, self.step(|| on(by, Part::Whole)));
        }
        // SRC unopened splits anywhere: the copy says why.
        let split = agreed_split(world, || {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            rustix::fs::openat(CWD, src, flags, Mode::empty())
                .map_or(SPINE, |root| split_depth(root.as_fd(), ranks))
        });
        // Each rank its own parts, then parts other ranks have not begun, given on request.
        let ledger = Arc::new(Ledger::default());
        let market = Market::new(&ledger);
        let mine = (cp.clone())
            .part(Part::Rank { rank, ranks, split })
            .ledger(ledger.clone());
        let share = together(world, self.progress, self.summed, Some(&market), || {
            let own = mine.run_linked(src, dest, linked, self.progress, printer);
            ledger.close();
            let mut done = own?;
            while let Some(parts) = market.more() {
                let given = mine.clone().members(Members::new(&parts)?);
                done.add(&given.run_linked(src, dest, linked, self.progress, &Given(printer))?);
            }
            Ok::<_, barge::Error>(done)
        });
        if std::env::var_os("BARGE_SHARE_STATS").is_some() {
            let (gave, given) = ledger.traded();
            let line = format!("share: rank {rank}: gave {gave} parts, was given {given}\n");
            // One write, so that the ranks' lines do not interleave on a shared stderr.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        }
        let mut done = whole(world, share)?;
        // No rank with names of files of several links: no step for them.
        if let Some(names) = my_links(world, linked.take_deferred(), rank, ranks, &mut done) {
            let links =
                self.step(|| cp.run_links(src, dest, &names, linked, self.progress, printer));
            done.add(&whole(world, links)?);
        }
        let files = all_wide(world, linked.take_wide());
        if !files.is_empty() {
            done.add(&wide(
                world,
                &files,
                |work: &(dyn Fn() -> CpSummary + Sync)| self.step(work),
                |i| (i % ranks as usize) as u32 == rank,
                cp,
                src,
                dest,
                linked,
                self.progress,
                printer,
            ));
        }
        let spine = self.step(|| on(0, Part::Spine { split }));
        done.add(&whole(world, spine)?);
        Some(done)
    }

    /// Runs `work` on every rank together ([`together`]).
    fn step<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        together(self.world, self.progress, self.summed, None, work)
    }
}

/// Whether `yes` on any rank, on every rank.
fn any(world: &SimpleCommunicator, yes: bool) -> bool {
    let (mine, mut sum) = (u64::from(yes), 0u64);
    mpi::request::scope(|scope| {
        let op = SystemOperation::sum();
        settle(world.immediate_all_reduce_into(scope, &mine, &mut sum, op));
    });
    sum > 0
}

/// The depth every rank splits the tree at ([`barge::share::split_depth`]): rank 0's
/// `count`, told to the others, so that they agree even if the top of the tree changes
/// meanwhile (a rank splitting elsewhere would copy parts twice or never).
fn agreed_split(world: &SimpleCommunicator, count: impl FnOnce() -> usize) -> usize {
    let mut split = match world.rank() {
        0 => count() as u64,
        _ => 0,
    };
    let root = world.process_at_rank(0);
    mpi::request::scope(|scope| settle(root.immediate_broadcast_into(scope, &mut split)));
    split as usize
}

/// What one step of the job did on this rank, or `None` on every rank where it failed as a
/// whole on any (SRC or DEST unreachable: the job goes no further). The error is told
/// by the lowest rank that has one: the ranks fail alike.
fn whole<T, E: Into<anyhow::Error>>(
    world: &SimpleCommunicator,
    done: std::result::Result<T, E>,
) -> Option<T> {
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

/// Runs `work` on a thread of its own while this thread gathers every rank's progress,
/// summed into `summed` (what rank 0 shows), until the work of every rank is done: a
/// barrier that keeps the progress line going. A rank whose work is done gathers again at
/// once and waits in that gather, so that the last rank's end is seen when it comes, not a
/// tick later. With a `market`, this thread also trades parts for the work meanwhile.
fn together<T: Send>(
    world: &SimpleCommunicator,
    progress: &Progress,
    summed: &Progress,
    market: Option<&Market>,
    work: impl FnOnce() -> T + Send,
) -> T {
    let done = AtomicBool::new(false);
    let ranks = world.size() as usize;
    let main = std::thread::current();
    let mut trader = market.map(Trader::new);
    let waits = || market.is_some_and(|market| market.wants.load(Relaxed));
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = work();
            done.store(true, Relaxed);
            main.unpark();
            result
        });
        loop {
            let ledger = market.map(|market| market.ledger);
            let walking = ledger.is_some_and(Ledger::is_walking);
            let pending = ledger.map_or(0, Ledger::pending);
            let mine = [
                progress.entries(),
                progress.bytes(),
                u64::from(done.load(Relaxed)),
                u64::from(walking),
                pending,
                u64::from(waits()),
            ];
            let mut all = vec![0u64; mine.len() * ranks];
            mpi::request::scope(|scope| {
                let mut request = world.immediate_all_gather_into(scope, &mine[..], &mut all[..]);
                let mut nap = Duration::from_micros(10);
                loop {
                    if let Some(trader) = &mut trader {
                        trader.trade(world);
                    }
                    match request.test() {
                        Ok(_) => break,
                        Err(waiting) => request = waiting,
                    }
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(NAP);
                }
            });
            let ranks: Vec<&[u64]> = all.chunks(mine.len()).collect();
            let total = |field: usize| ranks.iter().map(|rank| rank[field]).sum::<u64>();
            summed.set(total(0), total(1));
            if total(2) == ranks.len() as u64 {
                break;
            }
            let next = std::time::Instant::now() + TICK;
            if let Some(trader) = &mut trader {
                trader.gathered(&ranks, world.rank() as usize);
            }
            // A worker that waits for parts waits, as a done one, in the next gather: the
            // end of the last walk is seen when it comes.
            while !done.load(Relaxed) && !waits() {
                let left = next.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                // Woken early by the work's end or wish (or spuriously). Asks are looked
                // for every millisecond while another rank wants parts, else at the gathers.
                match &mut trader {
                    Some(trader) if trader.asked_for => {
                        trader.trade(world);
                        std::thread::park_timeout(left.min(NAP));
                    }
                    _ => std::thread::park_timeout(left),
                }
            }
        }
        worker
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The report of a copy of parts another rank gave: one gone since that rank listed it is
/// told as an error of the copy, as a directory gone between its listing and its opening
/// is, not as a `-T` member missing.
struct Given<'a>(&'a Printer);

impl CpReport for Given<'_> {
    fn error(&self, error: barge::Error) {
        self.0.error(error);
    }

    fn change(&self, change: Change, path: &barge::TreePath) {
        self.0.change(change, path);
    }

    fn missing(&self, error: barge::Error) {
        self.0.error(error);
    }
}

/// Tags of the messages by which a rank whose own parts are done asks another for parts
/// that one has listed and not begun, and by which it gets them.
const ASK: mpi::Tag = 1;
const GIVE: mpi::Tag = 2;

/// Work stealing during a share ([`Ledger`]): the worker of a rank whose own parts are
/// done asks for more ([`Market::more`]); its main thread ([`Trader`]) asks the rank with
/// the most parts listed and not begun, which gives half of them.
struct Market<'a> {
    ledger: &'a Ledger,
    main: std::thread::Thread,
    /// The worker waits for parts.
    wants: AtomicBool,
    /// What the main thread handed it: parts, or `None` when no rank will have any.
    handed: std::sync::Mutex<Option<Option<Vec<Vec<u8>>>>>,
    ready: std::sync::Condvar,
}

impl<'a> Market<'a> {
    /// A market for the worker of this thread's [`together`].
    fn new(ledger: &'a Ledger) -> Market<'a> {
        Market {
            ledger,
            main: std::thread::current(),
            wants: AtomicBool::new(false),
            handed: std::sync::Mutex::new(None),
            ready: std::sync::Condvar::new(),
        }
    }

    /// Waits for parts of other ranks given to this one (taken in the ledger), or `None`
    /// when no rank lists parts any more and none were left to give.
    fn more(&self) -> Option<Vec<Vec<u8>>> {
        self.wants.store(true, Relaxed);
        self.main.unpark();
        let handed = self.handed.lock().expect("no panics");
        let mut handed = (self.ready)
            .wait_while(handed, |handed| handed.is_none())
            .expect("no panics");
        handed.take().expect("handed")
    }

    fn hand(&self, parts: Option<Vec<Vec<u8>>>) {
        self.wants.store(false, Relaxed);
        *self.handed.lock().expect("no panics") = Some(parts);
        self.ready.notify_one();
    }
}

/// The main thread's side of a [`Market`].
struct Trader<'m, 'a> {
    market: &'m Market<'a>,
    /// The rank asked, until it answers.
    asked: Option<mpi::Rank>,
    /// An answer since the last gather was empty (its numbers are out of date): asked again
    /// after the next.
    stale: bool,
    /// Each rank's `[walking, pending]` at the last gather.
    ranks: Vec<[u64; 2]>,
    /// Another rank wanted parts at the last gather.
    asked_for: bool,
}

impl<'m, 'a> Trader<'m, 'a> {
    fn new(market: &'m Market<'a>) -> Trader<'m, 'a> {
        Trader {
            market,
            asked: None,
            stale: false,
            ranks: Vec::new(),
            asked_for: false,
        }
    }

    /// Takes each rank's `[.., walking, pending, wants]` as gathered (`me`: this rank).
    fn gathered(&mut self, ranks: &[&[u64]], me: usize) {
        self.ranks = ranks.iter().map(|rank| [rank[3], rank[4]]).collect();
        self.asked_for = (ranks.iter().enumerate()).any(|(r, rank)| r != me && rank[5] > 0);
        self.stale = false;
    }

    /// Answers the asks of other ranks, takes the answer to this one's, and asks when the
    /// worker wants parts. A rank that gives parts is walking and asks no one, and a rank
    /// that asks gives none (its own walk is over): an answer's blocking send waits for no
    /// send of the asker's.
    fn trade(&mut self, world: &SimpleCommunicator) {
        let ledger = self.market.ledger;
        while let Some(ask) = world.any_process().immediate_matched_probe_with_tag(ASK) {
            let (_, from) = ask.matched_receive_vec::<u8>();
            let parts = paths_bytes(&ledger.give());
            (world.process_at_rank(from.source_rank())).send_with_tag(&parts[..], GIVE);
        }
        if let Some(asked) = self.asked {
            let rank = world.process_at_rank(asked);
            if let Some(answer) = rank.immediate_matched_probe_with_tag(GIVE) {
                self.asked = None;
                let parts = paths_of(&answer.matched_receive_vec::<u8>().0);
                self.stale = parts.is_empty();
                if !parts.is_empty() {
                    ledger.receive(&parts);
                    self.market.hand(Some(parts));
                }
            }
        }
        if !self.market.wants.load(Relaxed) || self.asked.is_some() || self.stale {
            return;
        }
        let me = world.rank() as usize;
        let others = || (0..self.ranks.len()).filter(|&r| r != me);
        match others().max_by_key(|&r| self.ranks[r][1]) {
            Some(most) if self.ranks[most][1] > 0 => {
                world
                    .process_at_rank(most as mpi::Rank)
                    .send_with_tag(&[0u8][..], ASK);
                self.asked = Some(most as mpi::Rank);
            }
            // None walks: no rank will list parts again.
            _ if !self.ranks.is_empty() && others().all(|r| self.ranks[r][0] == 0) => {
                self.market.hand(None)
            }
            _ => {}
        }
    }
}

/// `paths`, each after its length, in one buffer.
fn paths_bytes(paths: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for path in paths {
        put_sized(&mut bytes, path);
    }
    bytes
}

/// The paths of [`paths_bytes`]'s buffer.
fn paths_of(mut rest: &[u8]) -> Vec<Vec<u8>> {
    let mut paths = Vec::new();
    while !rest.is_empty() {
        paths.push(sized(&mut rest).to_vec());
    }
    paths
}

/// Waits for `request` to complete, asleep between tests: MPICH's blocking calls poll on
/// their core until every rank has come, taking it from the workers of this rank, or of
/// another on the same node, that are still at work (docs/BENCHMARKS.md, "cp --mpi against
/// dcp").
fn settle<'a, D: ?Sized, S: Scope<'a>>(mut request: Request<'a, D, S>) {
    let mut nap = Duration::from_micros(10);
    while let Err(waiting) = request.test() {
        request = waiting;
        std::thread::sleep(nap);
        nap = (nap * 2).min(NAP);
    }
}

/// The names of files of several links that this rank copies and links: every rank's
/// `deferred` names, gathered, those of the files [`link_owner`] gives this rank, by file;
/// `None` on every rank where no rank has any. Names that cannot be sent (over 2 GiB of
/// them on one rank) are counted in `done` as errors.
fn my_links(
    world: &SimpleCommunicator,
    deferred: Vec<Deferred>,
    rank: u32,
    ranks: u32,
    done: &mut CpSummary,
) -> Option<Vec<Vec<u8>>> {
    let mut bytes = Vec::new();
    for ((dev, ino), path) in &deferred {
        for n in [*dev, *ino] {
            bytes.extend(n.to_le_bytes());
        }
        put_sized(&mut bytes, path);
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
    if all.is_empty() {
        return None;
    }
    let mut mine = Vec::new();
    let mut rest = &all[..];
    while !rest.is_empty() {
        let key = (number(&mut rest), number(&mut rest));
        let path = sized(&mut rest);
        if link_owner(key, ranks) == rank {
            mine.push((key, path.to_vec()));
        }
    }
    mine.sort_unstable();
    Some(mine.into_iter().map(|(_, path)| path).collect())
}

/// Every rank's large files left to the wide copy, on every rank, in one order.
fn all_wide(world: &SimpleCommunicator, mine: Vec<Wide>) -> Vec<Wide> {
    let mut bytes = Vec::new();
    for (path, size) in &mine {
        bytes.extend(size.to_le_bytes());
        put_sized(&mut bytes, path);
    }
    let all = all_bytes(world, &bytes);
    let mut rest = &all[..];
    let mut files = Vec::new();
    while !rest.is_empty() {
        let size = number(&mut rest);
        files.push((sized(&mut rest).to_vec(), size));
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
    cp: &Cp,
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
        put_sized(&mut bytes, &name);
    }
    let all = all_bytes(world, &bytes);
    let mut names = vec![None; files.len()];
    let mut rest = &all[..];
    while !rest.is_empty() {
        let i = number(&mut rest) as usize;
        names[i] = Some(sized(&mut rest).to_vec());
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
    let mut all = vec![0u8; counts.iter().map(|&n| n as usize).sum()];
    let starts = starts(&counts);
    world.all_gather_varcount_into(bytes, &mut PartitionMut::new(&mut all[..], counts, starts));
    all
}

/// The little-endian u64 at the start of `rest`, taken off it.
fn number(rest: &mut &[u8]) -> u64 {
    let (n, after) = rest.split_at(8);
    *rest = after;
    u64::from_le_bytes(n.try_into().expect("8 bytes"))
}

/// Appends `bytes` after their length (a little-endian u64), as [`sized`] reads them.
fn put_sized(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend((bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The bytes after their length at the start of `rest` ([`put_sized`]), taken off it.
fn sized<'b>(rest: &mut &'b [u8]) -> &'b [u8] {
    let len = number(rest) as usize;
    let (bytes, after) = rest.split_at(len);
    *rest = after;
    bytes
}

/// Where each of the pieces `counts` long starts, one after the other.
fn starts(counts: &[i32]) -> Vec<i32> {
    (counts.iter())
        .scan(0, |at, &n| {
            let start = *at;
            *at += n;
            Some(start)
        })
        .collect()
}

/// `done` summed over every rank, on every rank: its counts flattened in one order (the
/// fields of its JSON form), added by one reduction, put back.
fn sum<T: serde::Serialize + serde::de::DeserializeOwned>(
    world: &SimpleCommunicator,
    done: &T,
) -> T {
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

/// `mpiexec -n N barge-mpi unpack --mpi FILE DEST`: rank 0 creates DEST where it is
/// missing, then every rank opens FILE and DEST and lands its run of the segments
/// ([`barge::unpack::SharedUnpack`]); once all are done each makes its hard links to
/// files of other ranks, then rank 0 gives the directories their metadata from what every
/// rank recorded. The counts are summed on rank 0, which tells them.
pub fn unpack(
    archive: Option<&Path>,
    dest: &Path,
    operation: &Unpack,
    out: OutputArgs,
) -> Result<Exit> {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or_else(|| anyhow!("MPI was initialized already"))?;
    // No user-namespace chroot: the MPI library's own files and sockets must stay in
    // reach (a confined rank is killed). The landers' fd-relative landing contains it.
    let operation = &operation.clone().sandbox(false);
    let world = universe.world();
    let (rank, ranks) = (world.rank() as u32, world.size() as u32);
    let made = match rank {
        0 => operation.make_dest(dest),
        _ => Ok(false),
    };
    // A barrier too: DEST is there before any other rank opens it.
    let Some(new) = whole(&world, made) else {
        return Ok(Exit::Error);
    };
    let opened = || -> Result<_> {
        let Some(file) = archive.filter(|p| p.as_os_str() != "-") else {
            bail!(
                "--mpi reads the archive from a file every rank sees: unpack stdin without --mpi"
            );
        };
        let input = operation.open(Some(file))?;
        let mut destination = operation.prepare(dest, &input)?;
        let root = destination.root()?;
        Ok((input, destination.confinement.clone(), root))
    };
    let Some((input, confinement, root)) = whole(&world, opened()) else {
        return Ok(Exit::Error);
    };
    let Some(shared) = whole(&world, operation.shared(&input)) else {
        return Ok(Exit::Error);
    };
    if let (0, Confinement::Unavailable(reason)) = (rank, &confinement) {
        warn(format_args!(
            "sandbox unavailable ({reason}); containment rests on fd-relative landing"
        ));
    }
    let (progress, summed) = (Progress::default(), Progress::default());
    let mut out = out;
    out.no_progress |= rank != 0;
    let size = input.size();
    let work = || -> Option<LandSummary> {
        let threads = cores_of_mine(&world) as u32;
        let landed = together(&world, &progress, &summed, None, || {
            anyhow::Ok(shared.land_on(&root, (rank, ranks), threads, &progress)?)
        });
        let mut landed = whole(&world, landed)?;
        landed.summary.hard_links += whole(&world, shared.link(&root, &landed))?;
        let finished = match gathered_at_0(&world, &landed.dirs) {
            Some(records) => shared.finish_dirs(&root, &records, new).map(Some),
            None => Ok(None),
        };
        if let Some(skipped) = whole(&world, finished)? {
            landed.summary.not_restored.merged_dirs += skipped.merged_dirs;
            landed.summary.not_restored.owners += skipped.owners;
            landed.summary.not_restored.setid += skipped.setid;
            landed.summary.not_restored.xattrs += skipped.xattrs;
        }
        Some(landed.summary)
    };
    let (landed, elapsed) = with_progress(out, &summed, || size.map(Known::Exact), work);
    let Some(landed) = landed else {
        return Ok(Exit::Error);
    };
    let mut landed = sum(&world, &landed);
    // A mode, not a count: rank 0 gave the root its own (summing would say 0).
    landed.root_mode = None;
    if rank == 0 {
        told_unpacked(out, &landed, &confinement, elapsed);
    }
    Ok(Exit::Success)
}

/// This rank's share of its node's cores (the ranks on one node split them evenly; at
/// least one): the threads it plans a pack's parts or lands its segments on.
fn cores_of_mine(world: &SimpleCommunicator) -> usize {
    (Work::Cores.threads() / world.split_shared(0).size().max(1) as usize).max(1)
}

/// NFS's `f_type` in statfs(2) (`NFS_SUPER_MAGIC`).
const NFS_SUPER_MAGIC: i64 = 0x6969;

/// Refuses an archive in `dir` where the file system's type `f_type` is NFS: its clients
/// cache writes by page and write whole pages back, so writes at offsets from several
/// machines can undo each other (as mpifileutils' dtar documents).
fn refuse_nfs(dir: &Path, f_type: i64) -> Result<()> {
    if f_type == NFS_SUPER_MAGIC {
        bail!(
            "{} is on NFS, where ranks on several machines writing one file at offsets can \
             overwrite each other's data: write the archive to a parallel file system \
             (Lustre, GPFS, BeeGFS) or pack without --mpi",
            shown_path(dir)
        );
    }
    Ok(())
}

/// `mpiexec -n N barge-mpi pack --mpi DIR -o FILE`.
pub fn pack(args: &PackArgs, cancel: &Cancel) -> Result<Exit> {
    let (universe, _) = mpi::initialize_with_threading(Threading::Funneled)
        .ok_or_else(|| anyhow!("MPI was initialized already"))?;
    let world = universe.world();
    let rank = world.rank() as u32;
    let prepared = shared_pack(args, cancel).and_then(|shared| {
        let dir = match shared.output.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let fs = rustix::fs::statfs(&dir).with_context(|| {
            format!("cannot reach the archive's directory {}", shown_path(&dir))
        })?;
        refuse_nfs(&dir, fs.f_type as i64)?;
        Ok((shared, dir))
    });
    let Some((shared, dir)) = whole(&world, prepared) else {
        return Ok(Exit::Error);
    };
    let SharedPack {
        pack,
        output,
        source,
        exclude,
        zstd,
        one_file_system,
    } = shared;
    let progress = Progress::default();
    let summed = Progress::default();
    let pack = pack.progress(&progress);
    let mut out = args.out();
    out.no_progress |= rank != 0;
    let total = Total::default();
    let (packed, elapsed) = std::thread::scope(|scope| {
        if shows_progress(out) {
            let _ = std::thread::Builder::new().spawn_scoped(scope, || {
                total.count(std::slice::from_ref(&source), exclude, one_file_system)
            });
        }
        let work = || pack_shared(&world, pack, &progress, &summed, &output, &dir, zstd);
        with_progress(out, &summed, || total.known(), work)
    });
    let Some((mine, archive_bytes)) = packed else {
        return Ok(Exit::Error);
    };
    for warning in &mine.warnings {
        warn(format_args!("{warning}"));
    }
    let lost = mine.warnings.iter().filter(|w| w.lost).count() as u64;
    let mine = [
        mine.dirs,
        mine.files,
        mine.symlinks,
        mine.hard_links,
        mine.specials,
        mine.bytes,
        lost,
    ];
    let mut sums = [0u64; 7];
    world.all_reduce_into(&mine[..], &mut sums[..], SystemOperation::sum());
    let [dirs, files, symlinks, hard_links, specials, bytes, lost] = sums;
    let done = PackSummary {
        dirs,
        files,
        symlinks,
        hard_links,
        specials,
        bytes,
        archive_bytes,
        ..PackSummary::default()
    };
    if rank != 0 {
        return Ok(if lost > 0 {
            Exit::Partial
        } else {
            Exit::Success
        });
    }
    Ok(told_packed(args, &done, lost as usize, elapsed, false))
}

/// The steps of `pack --mpi` after the checks: this rank's summary and, on rank 0, the
/// archive's size; `None` where a step failed on any rank (told by one).
fn pack_shared(
    world: &SimpleCommunicator,
    pack: Pack<'_>,
    progress: &Progress,
    summed: &Progress,
    output: &Path,
    dir: &Path,
    zstd: Option<i32>,
) -> Option<(PackSummary, u64)> {
    let rank = world.rank() as u32;
    // Rank 0 makes the archive (its header) before the tree is walked, so that every rank
    // leaves it out of the walks where it is in the tree; every rank writes it by a fd
    // of its own.
    let temporary = temporary_path(output);
    let gone = || {
        if rank == 0 {
            let _ = std::fs::remove_file(&temporary);
        }
    };
    let made = match rank {
        0 => make_archive(&temporary),
        _ => Ok(()),
    };
    let opened = || {
        let archive = open_archive(&temporary)?;
        // A regular file at the output's path (not followed) is the one it replaces.
        let replaced = std::fs::symlink_metadata(output)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| (m.dev(), m.ino()));
        let pack = pack.written_to(archive.as_fd(), replaced)?;
        anyhow::Ok((archive, pack))
    };
    let packed = whole(world, made)
        .and_then(|()| whole(world, opened()))
        .and_then(|(archive, pack)| {
            pack_into(world, pack, progress, summed, &archive, dir, zstd.is_none())
        });
    let Some((summary, index, end)) = packed else {
        gone();
        return None;
    };
    // Rank 0 ends the archive with the index and the footer, and puts it in place.
    let indexes = gathered_at_0(world, &index);
    let ended = indexes.map(|indexes| {
        let indexes: Vec<&[u8]> = indexes.iter().map(|i| &i[..]).collect();
        let tail = tail(&indexes, zstd)?;
        let len = end_archive(&temporary, end, &tail)?;
        std::fs::rename(&temporary, output).with_context(|| {
            format!(
                "cannot rename {} to {}",
                shown_path(&temporary),
                shown_path(output)
            )
        })?;
        anyhow::Ok(len)
    });
    let Some(archive_bytes) = whole(world, ended.transpose()) else {
        gone();
        return None;
    };
    Some((summary, archive_bytes.unwrap_or(0)))
}

/// Packs this rank's share of the tree into `archive` at its place, and syncs it: its
/// summary, what the index needs of it, and where the frames of all shares end. Frames
/// stored raw go straight where the lengths planned by the ranks before put them; zstd
/// frames, whose lengths are known only once compressed, go to a file of this rank's own
/// first, copied into place once every rank has packed.
fn pack_into(
    world: &SimpleCommunicator,
    pack: Pack<'_>,
    progress: &Progress,
    summed: &Progress,
    archive: &OwnedFd,
    dir: &Path,
    raw: bool,
) -> Option<(PackSummary, Vec<u8>, u64)> {
    let (rank, ranks) = (world.rank() as u32, world.size() as u32);
    // Every rank walks the top levels: they must find the same parts.
    // A tree unopened splits anywhere: counting its parts says why.
    let split = agreed_split(world, || pack.split_depth(ranks).unwrap_or(SPINE));
    let threads = cores_of_mine(world);
    let planned = whole(world, pack.plan_parts(split, rank, ranks, threads))?;
    let (parts, mine, stats) = planned;
    let (parts, plans) = whole(world, all_plans(world, parts, &mine))?;
    let weights: Vec<u64> = plans
        .iter()
        .take(parts as usize)
        .map(PartPlan::weight)
        .collect();
    let runs = cut_runs(&weights, ranks);
    // The stats of the files this rank planned go to the ranks that pack them.
    let known = run_stats(world, &runs, &stats);
    drop(stats);
    let share = Share::new(rank, split, &runs);
    let units = share.units();
    let run = plan_run(&plans, units.start as usize..units.end as usize, raw);
    // A part that names first a file of several links that one before it names too has
    // shorter frames than planned (a hard link there): the run is planned again.
    let planned = whole(world, pack.plan_share_of(&share, &run, &known))?;
    let (first, links) = (run.first, run.earlier);
    // Where the shares' frames go (this rank's and the end of all), by their lengths.
    let placed = |bytes: u64| {
        let mut all = 0u64;
        world.all_reduce_into(&bytes, &mut all, SystemOperation::sum());
        let at = HEADER.len() as u64 + exclusive_sum(world, bytes);
        (at, HEADER.len() as u64 + all)
    };
    let planned_place = planned.bytes.map(placed);
    let spool = match planned_place {
        Some((at, _)) => seek(archive, SeekFrom::Start(at))
            .map(|_| None)
            .context("cannot seek in the archive"),
        None => spool_in(dir).map(Some),
    };
    let spool = whole(world, spool)?;
    let out = spool.as_ref().unwrap_or(archive);
    let shared = together(world, progress, summed, None, || {
        pack.pack_share(&share, (first, &planned), &links, &known, out.as_fd())
    });
    let shared = whole(world, shared)?;
    if std::env::var_os("BARGE_SHARE_STATS").is_some() {
        let (first, end) = (runs[rank as usize], runs[rank as usize + 1]);
        let weight: u64 = weights[first as usize..end as usize].iter().sum();
        let total: u64 = weights.iter().sum();
        let (bytes, stated) = (shared.bytes, shared.stated);
        // One write, so that the ranks' lines do not interleave on a shared stderr.
        let line = format!(
            "share: rank {rank}: parts {first}..{end} of {parts}, weight {weight} of {total}, \
             {bytes} bytes of frames, {stated} files stat'ed again\n"
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
    }
    let (at, end) = planned_place.unwrap_or_else(|| placed(shared.bytes));
    if let Some(spool) = &spool {
        whole(world, copy_into(spool, shared.bytes, archive, at))?;
    }
    let synced = fdatasync(archive).context("cannot sync this rank's segments in the archive");
    whole(world, synced)?;
    Some((shared.summary, shared.index, end))
}

/// Every rank's count of the tree's parts and its plans of those dealt to it (`mine`: rank r
/// plans parts r, r + ranks, ...), gathered: the number of parts and all their plans (one
/// for a tree without parts), in order, on every rank; an error on every rank where the
/// ranks counted different numbers of parts (the top levels changed meanwhile).
fn all_plans(
    world: &SimpleCommunicator,
    parts: u64,
    mine: &[PartPlan],
) -> Result<(u64, Vec<PartPlan>)> {
    let mut bytes = parts.to_le_bytes().to_vec();
    for plan in mine {
        for n in [plan.entries, plan.bytes, plan.links.len() as u64] {
            bytes.extend(n.to_le_bytes());
        }
        for &((dev, ino), number) in &plan.links {
            bytes.extend([dev, ino, number].iter().flat_map(|n| n.to_le_bytes()));
        }
    }
    // Every rank learns whether they fit in one gather (under 2 GiB), or none gathers.
    let mut total = 0u64;
    world.all_reduce_into(&(bytes.len() as u64), &mut total, SystemOperation::sum());
    if i32::try_from(total).is_err() {
        bail!("the plans of the tree's parts ({total} bytes) are too large to share in one gather");
    }
    let all = all_bytes(world, &bytes);
    let (ranks, mut rest, mut counted) = (world.size() as u64, &all[..], Vec::new());
    let mut dealt: Vec<std::vec::IntoIter<PartPlan>> = (0..ranks)
        .map(|r| {
            // Each rank's plans are as many as its own count deals it.
            let parts = number(&mut rest);
            counted.push(parts);
            let count = parts.max(1).saturating_sub(r).div_ceil(ranks);
            let plans: Vec<PartPlan> = (0..count)
                .map(|_| {
                    let (entries, bytes, links) =
                        (number(&mut rest), number(&mut rest), number(&mut rest));
                    let links = (0..links)
                        .map(|_| ((number(&mut rest), number(&mut rest)), number(&mut rest)))
                        .collect();
                    PartPlan {
                        entries,
                        bytes,
                        links,
                    }
                })
                .collect();
            plans.into_iter()
        })
        .collect();
    if counted.iter().any(|&n| n != parts) {
        bail!("the top levels of the tree changed while the ranks listed them");
    }
    let plans = (0..parts.max(1))
        .map(|i| dealt[(i % ranks) as usize].next().expect("dealt"))
        .collect();
    Ok((parts, plans))
}

/// The metadata of the files of this rank's run ([`FileStats`]), in the order of its parts,
/// from the ranks that planned them: each rank's `stats` (of the parts dealt to it: rank r
/// planned r, r + ranks, ...) go, each after its part's number and length, to the rank
/// whose run holds the part (`runs`, [`cut_runs`]); none where that would take over 2 GiB
/// on a rank (then its files are stat'ed again).
fn run_stats(world: &SimpleCommunicator, runs: &[u64], stats: &[FileStats]) -> FileStats {
    let (rank, ranks) = (world.rank() as u64, world.size() as usize);
    // This rank's parts ascend, and so do the runs: the bytes for each rank follow those
    // for the ranks before it.
    let size = stats.iter().map(|s| 16 + s.as_bytes().len()).sum();
    let (mut sending, mut counts) = (Vec::with_capacity(size), vec![0u64; ranks]);
    for (k, part) in stats.iter().enumerate() {
        let at = rank + k as u64 * ranks as u64;
        // A tree without parts has one unit, no rank's run: its files are stat'ed again.
        if let Some(owner) = (0..ranks).find(|&r| (runs[r]..runs[r + 1]).contains(&at)) {
            let bytes = part.as_bytes();
            sending.extend(at.to_le_bytes());
            put_sized(&mut sending, bytes);
            counts[owner] += 16 + bytes.len() as u64;
        }
    }
    let mut coming = vec![0u64; ranks];
    world.all_to_all_into(&counts[..], &mut coming[..]);
    let most = counts.iter().sum::<u64>().max(coming.iter().sum());
    let mut largest = 0u64;
    world.all_reduce_into(&most, &mut largest, SystemOperation::max());
    if i32::try_from(largest).is_err() {
        return FileStats::default();
    }
    let counts: Vec<i32> = counts.iter().map(|&n| n as i32).collect();
    let coming: Vec<i32> = coming.iter().map(|&n| n as i32).collect();
    let mut received = vec![0u8; coming.iter().map(|&n| n as usize).sum()];
    let (send_starts, receive_starts) = (starts(&counts), starts(&coming));
    world.all_to_all_varcount_into(
        &Partition::new(&sending[..], counts, send_starts),
        &mut PartitionMut::new(&mut received[..], coming, receive_starts),
    );
    let (mut rest, mut parts) = (&received[..], Vec::new());
    while !rest.is_empty() {
        let at = number(&mut rest);
        parts.push((at, sized(&mut rest)));
    }
    parts.sort_unstable_by_key(|&(at, _)| at);
    FileStats::joined(parts.into_iter().map(|(_, part)| part))
}

/// The sum of `n` over the ranks before this one (`MPI_Exscan`).
fn exclusive_sum(world: &SimpleCommunicator, n: u64) -> u64 {
    let mut sum = 0u64;
    world.exclusive_scan_into(&n, &mut sum, SystemOperation::sum());
    // Rank 0's is left undefined.
    match world.rank() {
        0 => 0,
        _ => sum,
    }
}

/// Every rank's `bytes`, on rank 0 (`None` elsewhere).
fn gathered_at_0(world: &SimpleCommunicator, bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let root = world.process_at_rank(0);
    let len = bytes.len() as i32;
    if world.rank() != 0 {
        root.gather_into(&len);
        root.gather_varcount_into(bytes);
        return None;
    }
    let mut counts = vec![0i32; world.size() as usize];
    root.gather_into_root(&len, &mut counts[..]);
    let mut all = vec![0u8; counts.iter().map(|&n| n as usize).sum()];
    let starts = starts(&counts);
    let pieces: Vec<(usize, usize)> = (starts.iter().zip(&counts))
        .map(|(&start, &n)| (start as usize, n as usize))
        .collect();
    root.gather_varcount_into_root(bytes, &mut PartitionMut::new(&mut all[..], counts, starts));
    Some(
        pieces
            .into_iter()
            .map(|(at, n)| all[at..at + n].to_vec())
            .collect(),
    )
}

/// Where rank 0 makes the archive before it is complete: `.NAME.barge-mpi` beside it.
fn temporary_path(output: &Path) -> PathBuf {
    let mut name = std::ffi::OsString::from(".");
    name.push(output.file_name().unwrap_or_default());
    name.push(".barge-mpi");
    output.with_file_name(name)
}

/// Makes the archive file `path`, empty but for the header.
fn make_archive(path: &Path) -> Result<()> {
    let made = || std::fs::File::create(path)?.write_all_at(&HEADER, 0);
    made().with_context(|| format!("cannot write {}", shown_path(path)))
}

/// The archive file `path`, for writing.
fn open_archive(path: &Path) -> Result<OwnedFd> {
    let file = std::fs::OpenOptions::new().write(true).open(path);
    let file = file.with_context(|| format!("cannot open {}", shown_path(path)))?;
    Ok(file.into())
}

/// A file of this rank's own in `dir`, gone when closed.
fn spool_in(dir: &Path) -> Result<OwnedFd> {
    let flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    let spool = rustix::fs::openat(CWD, dir, flags, Mode::from_raw_mode(0o600));
    spool.with_context(|| format!("cannot make a temporary file in {}", shown_path(dir)))
}

/// Ends the archive file `path` with `tail` (index and footer) at `end`, and syncs it;
/// returns its length.
fn end_archive(path: &Path, end: u64, tail: &[u8]) -> Result<u64> {
    let ended = || -> std::io::Result<u64> {
        let file = std::fs::OpenOptions::new().write(true).open(path)?;
        file.write_all_at(tail, end)?;
        file.sync_data()?;
        Ok(end + tail.len() as u64)
    };
    ended().with_context(|| format!("cannot write {}", shown_path(path)))
}

/// Copies the `len` bytes of `spool` into `archive` at `at`.
fn copy_into(spool: &OwnedFd, len: u64, archive: &OwnedFd, at: u64) -> Result<()> {
    let (mut from, mut to) = (0u64, at);
    while from < len {
        let left = usize::try_from(len - from).unwrap_or(usize::MAX);
        let n = copy_file_range(spool, Some(&mut from), archive, Some(&mut to), left)
            .context("cannot write this rank's segments into the archive")?;
        if n == 0 {
            bail!("this rank's segments were cut short before they were copied");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archive_on_nfs_is_refused() {
        let dir = Path::new("/mnt/home");
        let refused = refuse_nfs(dir, 0x6969).unwrap_err().to_string();
        assert!(refused.contains("is on NFS"), "{refused}");
        // tmpfs, ext4, Lustre.
        for f_type in [0x0102_1994, 0xef53, 0x0bd0_0bd0] {
            assert!(refuse_nfs(dir, f_type).is_ok(), "{f_type:x}");
        }
    }
}
