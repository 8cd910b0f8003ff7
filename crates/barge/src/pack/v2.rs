//! Version 2 pack on every core. The calling thread walks the tree and plans the archive
//! (a [`Planner`], the walk's sink): one `statx` per file fixes its size, records and entry
//! number, files with several links become hard links to their first name, files above
//! [`CHUNK`] or with holes become `EXTFILE`s of chunk-sized extents, and a [`Layout`] cuts
//! the groups into segment bodies whose file data is still in the files. Worker threads
//! take the bodies as jobs, read the files into them (`openat` relative to a duplicate of
//! the directory's fd, never following symlinks), compute the digests and compress; one
//! writer thread writes the frames in job order, then the index and the footer.
//!
//! Everything but the file data is fixed by the plan, so the archive does not depend on
//! the number of threads or their timing. A file that changed after it was planned is
//! stored at its planned size, as tar does: cut where it grew, padded with zeros where it
//! shrank or could not be read, with a warning naming it.

use std::collections::{BTreeMap, HashMap};
use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};

use rustix::fs::{
    accessat, fstat, openat, seek, statx, Access, AtFlags, FileType, Mode, SeekFrom, Statx,
};
use rustix::io::{fcntl_dupfd_cloexec, Errno};

use super::packer::{INLINE_MAX, RING_FILES};
use super::share::{FileStats, KnownStats, Links, PartPlan, Planned};
use super::{recorded, writer_gone, PackSummary, Update, Warning};
use crate::compare::inode_key;
use crate::error::{Error, Result, TreePath};
use crate::format::segments::{tail, Body, Layout, Names, Part, Rows, Sealed, Segs, Zstd};
use crate::format::{CHUNK, HEADER_V2};
use crate::interrupt::{retry, Cancel};
use crate::listing::Listing;
use crate::output::ArchiveWriter;
use crate::owners::Owners;
use crate::sys::ring::{Read, Ring, ToRead};
use crate::sys::thread::spawn_elsewhere;
use crate::sys::{self, FILE_FLAGS};
use crate::tree::{
    Content, Device, DirPath, Entry, Kind, Meta, Sink, XattrReader, Xattrs, STATX_MASK,
};
use crate::walk::too_many_xattrs;
use crate::Progress;

/// An `EXTFILE` with at most this much data is read while planning, so that bodies of many
/// small sparse files hold no open files.
const READ_WHEN_PLANNED: u64 = 64 << 10;
/// Jobs in flight (planned, in a worker or waiting for the writer) per worker, at most.
const JOBS_PER_WORKER: usize = 3;
/// Buffers kept for reuse between the writer and the workers.
const SPARE_BUFFERS: usize = 8;

/// How a version 2 pack runs.
pub(super) struct Settings<'a> {
    /// Owners, extended attributes and devices are recorded.
    pub archive: bool,
    /// Bodies are stored as zstd frames at this level where smaller.
    pub zstd: Option<i32>,
    /// Worker threads.
    pub threads: usize,
    /// Where bodies close.
    pub target: usize,
    /// Device and inode of the archive being written and of the file it replaces.
    pub itself: [Option<(u64, u64)>; 2],
    /// What the destination holds: unchanged files and symlinks are left out.
    pub listing: Option<&'a Listing>,
    pub progress: &'a Progress,
    pub cancel: Cancel,
    /// Only a share of the archive is packed (`pack --mpi`): its frames, without the
    /// header, index and footer.
    pub sharing: Option<Sharing<'a>>,
}

/// What a pack of one share of an archive needs to know of the others.
#[derive(Clone, Copy)]
pub(super) struct Sharing<'a> {
    /// The number of the share's first entry.
    pub first: u64,
    /// The first names of files of several links that come before the share: their entry
    /// numbers by device and inode.
    pub links: &'a Links,
    /// Only count the entries and note the files of several links ([`plan`]).
    pub counting: bool,
    /// The metadata of files that a plan read ([`FileStats`]): not read again.
    pub known: Option<&'a FileStats>,
}

/// What [`encode`] wrote of a share: the segments as the index lists them (from offset 0
/// of what was written), the index rows of its entries, and how many files it stat'ed
/// (those [`Sharing::known`] lacked).
pub(super) type Written = (Segs, Rows, u64);

/// What the writer wrote: its bytes, the warnings of the files it read, and with a share
/// what the index needs of it.
type Wrote = (u64, Vec<Warning>, Option<(Segs, Rows)>);

/// Where the data of a piece of a body comes from.
enum Source {
    /// The regular file at the end of `path` in `dir`, whole.
    File { dir: Arc<OwnedFd>, path: FilePath },
    /// `at` onwards of an open file; `last`: its last extent, after which it should end.
    Region {
        file: Arc<Opened>,
        at: u64,
        last: bool,
    },
    /// Data read while planning.
    Bytes(Vec<u8>),
}

/// A file's path from the root, stored with a NUL after it so that its name is a C string.
struct FilePath(Box<[u8]>);

impl FilePath {
    /// The path of `name` in `dir`.
    fn new(dir: &DirPath, name: &[u8]) -> FilePath {
        let mut path = dir.join(name).0;
        path.push(0);
        FilePath(path.into())
    }

    /// The last name.
    fn name(&self) -> &CStr {
        let start = self.0.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
        CStr::from_bytes_with_nul(&self.0[start..]).expect("names hold no NUL")
    }

    /// The path, for messages.
    fn tree_path(&self) -> TreePath {
        TreePath(self.0[..self.0.len() - 1].to_vec())
    }
}

/// How a regular file is stored.
enum Stored {
    /// As a `FILE`: no holes, at most a chunk.
    File,
    /// As an `EXTFILE` of these extents (offset, length), open.
    Extents(OwnedFd, Vec<(u64, u64)>),
}

/// A file opened while planning, read by extents.
struct Opened {
    fd: OwnedFd,
    path: TreePath,
    size: u64,
}

/// A body to seal, numbered in archive order.
type Job = (u64, Body<Source>);

/// What reaches the writer.
enum Done {
    /// Job `n` sealed, with the warnings of its files.
    Frame(u64, Result<(Sealed, Vec<Warning>)>),
    /// The plan is complete: `jobs` jobs, and the index rows.
    End(u64, Rows),
}

/// Buffers going back from the writer to the workers.
#[derive(Default)]
struct Spare(Mutex<Vec<Vec<u8>>>);

impl Spare {
    fn take(&self) -> Vec<u8> {
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        spare.pop().unwrap_or_default()
    }

    fn give(&self, buf: Vec<u8>) {
        let mut spare = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if spare.len() < SPARE_BUFFERS {
            spare.push(buf);
        }
    }
}

/// Packs what `source` (a walk) feeds a [`Planner`] into a version 2 archive written to
/// `out`, with the records of the root directory `root` first when given.
/// With [`Settings::sharing`], only the frames of a share, and what the index needs of them.
pub(super) fn encode<W: ArchiveWriter>(
    mut out: W,
    settings: Settings<'_>,
    root: Option<OwnedFd>,
    source: impl FnOnce(&mut Planner<'_>) -> Result<()>,
) -> Result<(PackSummary, Option<Written>)> {
    let threads = settings.threads.max(1);
    let (jobs_tx, jobs_rx) = channel::<Job>();
    let jobs_rx = Mutex::new(jobs_rx);
    let (done_tx, done_rx) = channel();
    let in_flight = JOBS_PER_WORKER * threads;
    let (tokens_tx, tokens) = sync_channel(in_flight);
    for _ in 0..in_flight {
        tokens_tx.send(()).expect("room for every token");
    }
    let spare = Spare::default();
    let (progress, cancel, level) = (settings.progress, settings.cancel.clone(), settings.zstd);
    let shared = settings.sharing.is_some();
    std::thread::scope(|scope| {
        let start = |e| Error::os("start the pack's threads", TreePath::default(), e);
        let (spare, jobs_rx) = (&spare, &jobs_rx);
        let written = spawn_elsewhere(scope, move || {
            write(&mut out, done_rx, tokens_tx, spare, progress, level, shared)
        })
        .map_err(start)?;
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            let (done, cancel) = (done_tx.clone(), cancel.clone());
            match spawn_elsewhere(scope, move || work(jobs_rx, done, spare, level, &cancel)) {
                Ok(worker) => workers.push(worker),
                // Fewer workers where the system runs out of threads.
                Err(_) if !workers.is_empty() => break,
                Err(e) => return Err(start(e)),
            }
        }
        let mut planner = Planner::new(&settings, jobs_tx, tokens, done_tx);
        let planned = root
            .map_or(Ok(()), |root| planner.root(root))
            .and_then(|()| source(&mut planner))
            .and_then(|()| planner.end());
        let summary = std::mem::take(&mut planner.summary);
        let update = planner.update.counted(PackSummary::default());
        let stated = planner.stated;
        drop(planner);
        let written = written.join().expect("the writer does not panic");
        for worker in workers {
            worker.join().expect("workers do not panic");
        }
        // The writer's failure is the cause of the planner's, if both failed.
        let written = written?;
        planned?;
        let (archive_bytes, warnings, share) = written.ok_or_else(writer_gone)?;
        let mut summary = PackSummary {
            archive_bytes,
            unchanged: update.unchanged,
            unchanged_bytes: update.unchanged_bytes,
            ..summary
        };
        summary.warnings.extend(warnings);
        Ok((summary, share.map(|(segs, rows)| (segs, rows, stated))))
    })
}

/// Plans a share of an archive without packing it (`sharing.counting`), with the records of
/// the root directory `root` first when given: see [`Planned`].
pub(super) fn plan(
    settings: Settings<'_>,
    root: Option<OwnedFd>,
    source: impl FnOnce(&mut Planner<'_>) -> Result<()>,
) -> Result<Planned> {
    let (jobs, _) = channel();
    let (_, tokens) = sync_channel(0);
    let (done, _) = channel();
    let mut planner = Planner::new(&settings, jobs, tokens, done);
    root.map_or(Ok(()), |root| planner.root(root))
        .and_then(|()| source(&mut planner))?;
    let first = settings.sharing.map_or(0, |s| s.first);
    let entries = planner.layout.entries() - first;
    planner.end()?;
    Ok(Planned {
        entries,
        links: planner.links,
        // A zstd frame's length is known once it is compressed.
        bytes: settings.zstd.is_none().then_some(planner.bytes),
    })
}

/// Plans the parts a walk of a dealt share announces ([`crate::share::Share::dealt`]) each
/// apart, as if each began a share ([`PartPlan`]), with the records of the root directory
/// `root` first when given (the first part's); with each, the metadata of its files, up to
/// `stats` bytes of them in all (the files after are stat'ed again by their pack).
pub(super) fn plan_parts(
    settings: Settings<'_>,
    root: Option<OwnedFd>,
    stats: usize,
    source: impl FnOnce(&mut Planner<'_>) -> Result<()>,
) -> Result<Vec<(PartPlan, FileStats)>> {
    let (jobs, _) = channel();
    let (_, tokens) = sync_channel(0);
    let (done, _) = channel();
    let mut planner = Planner::new(&settings, jobs, tokens, done);
    planner.parts = Some(Parts {
        room: stats,
        ..Parts::default()
    });
    // The first part begins with the root's records; a part is open once the walk resumed.
    let rooted = root.is_some();
    root.map_or(Ok(()), |root| planner.root(root))
        .and_then(|()| source(&mut planner))?;
    if rooted || planner.parts.as_ref().is_some_and(|p| p.resumed) {
        planner.close_part()?;
    }
    let parts = planner.parts.take().unwrap_or_default();
    Ok(parts.plans.into_iter().zip(parts.stats).collect())
}

/// Writes the frames of the jobs in order as they come, handing back a token for each,
/// then the index and the footer; returns the bytes written and the warnings of the jobs
/// (one per file), or `None` when the plan stopped before its end. A `shared` pack writes
/// only the frames, and returns what the index needs of them.
fn write(
    out: &mut impl ArchiveWriter,
    done: Receiver<Done>,
    tokens: SyncSender<()>,
    spare: &Spare,
    progress: &Progress,
    level: Option<i32>,
    shared: bool,
) -> Result<Option<Wrote>> {
    let mut segs = Segs::starting(0);
    if !shared {
        out.write_bytes(&HEADER_V2, progress)?;
        segs = Segs::default();
    }
    let mut waiting: BTreeMap<u64, (Sealed, Vec<Warning>)> = BTreeMap::new();
    let (mut next, mut end) = (0, None);
    let mut warnings: Vec<Warning> = Vec::new();
    loop {
        while let Some((sealed, found)) = waiting.remove(&next) {
            out.write_bytes(&sealed.frame, progress)?;
            segs.add(&sealed);
            spare.give(sealed.frame);
            for warning in found {
                // Each extent of a changed file may say so: once is enough.
                if warnings.last().is_none_or(|w| w.path != warning.path) {
                    warnings.push(warning);
                }
            }
            // The planner may have stopped: then nobody needs the token.
            let _ = tokens.send(());
            next += 1;
        }
        if let Some((jobs, rows)) = &mut end {
            if next == *jobs {
                if shared {
                    out.finish()?;
                    let (rows, at) = (std::mem::take(rows), segs.at());
                    return Ok(Some((at, warnings, Some((segs, rows)))));
                }
                let tail = tail(&segs, rows, level.map(Zstd::new).as_mut());
                out.write_bytes(&tail, progress)?;
                out.finish()?;
                return Ok(Some((segs.at() + tail.len() as u64, warnings, None)));
            }
        }
        match done.recv() {
            Ok(Done::Frame(n, sealed)) => {
                waiting.insert(n, sealed?);
            }
            Ok(Done::End(jobs, rows)) => end = Some((jobs, rows)),
            Err(_) => return Ok(None),
        }
    }
}

/// Seals the jobs it takes until there are no more (or nobody takes the frames).
fn work(
    jobs: &Mutex<Receiver<Job>>,
    done: Sender<Done>,
    spare: &Spare,
    level: Option<i32>,
    cancel: &Cancel,
) {
    let mut zstd = level.map(Zstd::new);
    // Files of one directory are read in io_uring batches where the kernel allows.
    let mut ring = Ring::new(4 * RING_FILES as u32, RING_FILES as u32).ok();
    loop {
        let job = jobs.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok((n, body)) = job else {
            return;
        };
        let mut warnings = Vec::new();
        let sealed = cancel.check().and_then(|()| {
            let fill = |parts: &mut dyn Iterator<Item = Part<'_, Source>>, buf: &mut Vec<u8>| {
                fill_parts(parts, buf, ring.as_mut(), &mut warnings, cancel)
            };
            body.seal(spare.take(), fill, zstd.as_mut())
        });
        if done
            .send(Done::Frame(n, sealed.map(|s| (s, warnings))))
            .is_err()
        {
            return;
        }
    }
}

/// Appends `parts` to `buf`: each run of small files of one directory with one `ring` batch
/// (larger reads would go to io_uring's slower worker threads), the rest (and a file a batch
/// did not read whole) one by one.
fn fill_parts(
    parts: &mut dyn Iterator<Item = Part<'_, Source>>,
    buf: &mut Vec<u8>,
    mut ring: Option<&mut Ring>,
    warnings: &mut Vec<Warning>,
    cancel: &Cancel,
) -> Result<()> {
    let mut parts = parts.peekable();
    while let Some(part) = parts.next() {
        let (ring, dir, path) = match (ring.as_deref_mut(), part.source) {
            (Some(ring), Source::File { dir, path }) if part.len as u64 <= INLINE_MAX => {
                (ring, dir, path)
            }
            (_, source) => {
                buf.extend_from_slice(part.prefix);
                fill(source, buf, part.len, warnings, cancel)?;
                continue;
            }
        };
        let mut run = vec![(part.prefix, part.len, path)];
        let in_dir = |p: &Part<'_, Source>| match &p.source {
            Source::File { dir: d, .. } => Arc::ptr_eq(d, &dir) && p.len as u64 <= INLINE_MAX,
            _ => false,
        };
        while run.len() < RING_FILES {
            let Some(Part {
                prefix,
                len,
                source: Source::File { path, .. },
            }) = parts.next_if(in_dir)
            else {
                break;
            };
            run.push((prefix, len, path));
        }
        read_run(ring, &dir, run, buf, warnings, cancel)?;
    }
    Ok(())
}

/// Appends the files `run` (prefix, length, path) of the directory `dir`, each after its
/// prefix, read with one `ring` batch; a file the batch did not read whole is read again on
/// its own.
fn read_run(
    ring: &mut Ring,
    dir: &Arc<OwnedFd>,
    run: Vec<(&[u8], usize, FilePath)>,
    buf: &mut Vec<u8>,
    warnings: &mut Vec<Warning>,
    cancel: &Cancel,
) -> Result<()> {
    let to_read: Vec<ToRead<'_>> = (run.iter())
        .map(|(prefix, len, path)| ToRead {
            name: path.name(),
            size: *len as u64,
            prefix,
        })
        .collect();
    let mut at = buf.len();
    let reads = (ring.read_files(dir.as_fd(), &to_read, buf, true))
        .map_err(|e| Error::io("io_uring_enter", run[0].2.tree_path(), e))?;
    for ((prefix, len, path), read) in run.into_iter().zip(reads) {
        at += prefix.len();
        if read != Read::Whole {
            let mut again = Vec::with_capacity(len + 1);
            let source = Source::File {
                dir: dir.clone(),
                path,
            };
            fill(source, &mut again, len, warnings, cancel)?;
            buf[at..at + len].copy_from_slice(&again);
        }
        at += len;
    }
    Ok(())
}

/// Appends the `len` bytes of `source` to `buf`: as planned, whatever the file holds now
/// (with a warning in `warnings` where that differs).
fn fill(
    source: Source,
    buf: &mut Vec<u8>,
    len: usize,
    warnings: &mut Vec<Warning>,
    cancel: &Cancel,
) -> Result<()> {
    match source {
        Source::Bytes(bytes) => buf.extend_from_slice(&bytes),
        Source::File { dir, path } => match openat(&*dir, path.name(), FILE_FLAGS, Mode::empty()) {
            Ok(file) => read_planned(file.as_fd(), 0, len, Some(len as u64), buf, cancel)?
                .warn(&path.tree_path(), warnings),
            Err(e) => {
                buf.resize(buf.len() + len, 0);
                warnings.push(Warning {
                    path: path.tree_path(),
                    problem: format!("open failed: {e}; stored as {len} zero bytes"),
                    lost: true,
                });
            }
        },
        Source::Region { file, at, last } => {
            let end = last.then_some(file.size);
            read_planned(file.fd.as_fd(), at, len, end, buf, cancel)?.warn(&file.path, warnings)
        }
    }
    Ok(())
}

/// How a planned read went.
#[derive(Debug, PartialEq, Eq)]
enum Got {
    /// As planned.
    Planned,
    /// The file ended this many bytes early (padded with zeros).
    Shrank(usize),
    /// The file goes on after its planned end.
    Grew,
    /// Reading failed after this many bytes (the rest padded with zeros).
    Failed(usize, Errno),
}

impl Got {
    /// Adds the warning for the file `path`, unless it went as planned.
    fn warn(self, path: &TreePath, warnings: &mut Vec<Warning>) {
        let problem = match self {
            Got::Planned => return,
            Got::Shrank(by) => format!("file shrank by {by} bytes; padding with zeros"),
            Got::Grew => "file changed as we read it".to_string(),
            Got::Failed(at, e) => format!("read failed at byte {at}: {e}; padding with zeros"),
        };
        warnings.push(Warning {
            path: path.clone(),
            problem,
            lost: true,
        });
    }
}

/// Appends exactly `len` bytes of `file` from `at` to `buf` (which has room for one more):
/// zeros for what it lacks. With `end` (the file's planned size), also checks that nothing
/// follows it: a read of one byte more when the range ends there, else a read at `end`.
fn read_planned(
    file: BorrowedFd<'_>,
    at: u64,
    len: usize,
    end: Option<u64>,
    buf: &mut Vec<u8>,
    cancel: &Cancel,
) -> Result<Got> {
    let start = buf.len();
    let probe_here = end == Some(at + len as u64);
    let wanted = len + usize::from(probe_here);
    let mut got = Got::Planned;
    loop {
        let have = buf.len() - start;
        let ask = wanted - have;
        if ask == 0 {
            break;
        }
        match retry(cancel, || {
            sys::read_onto(file, buf, ask, Some(at + have as u64))
        }) {
            // A short read of a regular file ends it; one ending at `len` needs no probe.
            Ok(n) if n == 0 || (n < ask && buf.len() - start == len) => break,
            Ok(_) => {}
            Err(e) => {
                cancel.check()?;
                got = Got::Failed(buf.len() - start, e);
                break;
            }
        }
    }
    let have = buf.len() - start;
    if have > len {
        buf.truncate(start + len);
        got = Got::Grew;
    } else if have < len && got == Got::Planned {
        got = Got::Shrank(len - have);
    }
    buf.resize(start + len, 0);
    if let (Some(end), false, Got::Planned) = (end, probe_here, &got) {
        let mut probe = [0u8; 1];
        if retry(cancel, || rustix::io::pread(file, &mut probe, end)).is_ok_and(|n| n > 0) {
            got = Got::Grew;
        }
    }
    Ok(got)
}

/// The walk's sink: plans the archive and hands each body to the workers as it closes.
pub(super) struct Planner<'a> {
    layout: Layout<Source>,
    jobs: Sender<Job>,
    /// One per job that may be started.
    tokens: Receiver<()>,
    /// To the writer, for the end of the plan.
    done: Sender<Done>,
    /// Jobs handed out.
    started: u64,
    /// Owners, extended attributes and devices are recorded.
    archive: bool,
    itself: [Option<(u64, u64)>; 2],
    /// Files are checked readable before they are planned (the process is not root).
    check_access: bool,
    /// The current directory: its path, and a duplicate of its fd once a file in it is
    /// planned, with the walker's fd it duplicates (top-level files of several roots of
    /// members come from several directories without an `enter_dir` between them).
    dir: DirPath,
    dir_fd: Option<(RawFd, Arc<OwnedFd>)>,
    /// The entry number of each file with several links planned so far, by device and inode.
    links: HashMap<(u64, u64), u64>,
    update: Update<'a>,
    summary: PackSummary,
    progress: &'a Progress,
    cancel: Cancel,
    xattrs: XattrReader,
    /// The names of users and groups, when owners are recorded.
    owners: Owners,
    /// Only counting (a share's plan): bodies are dropped, their frames' lengths (stored
    /// raw) summed in `bytes`.
    counting: bool,
    bytes: u64,
    /// A share stored raw: bodies are cut where parts begin, so that the frames of each
    /// part have a length of their own ([`PartPlan`]).
    cut_parts: bool,
    /// Planning parts apart ([`plan_parts`]).
    parts: Option<Parts>,
    /// Files whose metadata a plan read ([`Sharing::known`]), and the path of the file
    /// being planned, from the root, to find it there or keep it with its parts' stats.
    known: Option<KnownStats<'a>>,
    path: Vec<u8>,
    /// Files stat'ed.
    stated: u64,
}

/// The parts planned apart so far, and the one being planned.
#[derive(Default)]
struct Parts {
    plans: Vec<PartPlan>,
    /// The metadata of the files of each part planned, and of the one being planned; the
    /// bytes they may take yet.
    stats: Vec<FileStats>,
    planning: FileStats,
    room: usize,
    /// The walk resumed before: a part is being planned, which the next resuming ends.
    resumed: bool,
    /// Its part began (before: the directories above the parts before it).
    begun: bool,
}

/// The user and group names an `OWNER` of `entry` carries: its ids' names here, where they
/// have one.
fn names<'o>(owners: &'o Owners, entry: &Entry<'_>) -> Names<'o> {
    let Some(owner) = entry.meta.owner else {
        return (b"", b"");
    };
    let user = owners.user_name(owner.uid).unwrap_or_default();
    (user, owners.group_name(owner.gid).unwrap_or_default())
}

impl<'a> Planner<'a> {
    fn new(
        settings: &Settings<'a>,
        jobs: Sender<Job>,
        tokens: Receiver<()>,
        done: Sender<Done>,
    ) -> Planner<'a> {
        let mut layout = Layout::new(settings.target);
        if let Some(sharing) = settings.sharing {
            layout.resume(sharing.first, b"");
        }
        Planner {
            layout,
            jobs,
            tokens,
            done,
            started: 0,
            archive: settings.archive,
            itself: settings.itself,
            check_access: !rustix::process::geteuid().is_root(),
            dir: DirPath::default(),
            dir_fd: None,
            links: settings
                .sharing
                .map(|s| s.links.clone())
                .unwrap_or_default(),
            update: Update::new(settings.listing, settings.archive),
            summary: PackSummary::default(),
            progress: settings.progress,
            cancel: settings.cancel.clone(),
            xattrs: XattrReader::default(),
            owners: match settings.archive {
                true => Owners::system(),
                false => Owners::default(),
            },
            counting: settings.sharing.is_some_and(|s| s.counting),
            bytes: 0,
            cut_parts: settings.sharing.is_some() && settings.zstd.is_none(),
            parts: None,
            known: (settings.sharing.and_then(|s| s.known)).map(KnownStats::new),
            path: Vec::new(),
            stated: 0,
        }
    }

    /// Ends the part planned apart ([`plan_parts`]) with its last body, and begins the next
    /// in a layout of its own, its entries numbered from 0.
    fn close_part(&mut self) -> Result<()> {
        let anew = self.layout.anew();
        let layout = std::mem::replace(&mut self.layout, anew);
        let entries = layout.entries();
        self.start(layout.finish().0)?;
        let mut links: Vec<_> = self.links.drain().collect();
        links.sort_unstable();
        let plan = PartPlan {
            entries,
            bytes: std::mem::take(&mut self.bytes),
            links,
        };
        let parts = self.parts.as_mut().expect("parts planned");
        parts.plans.push(plan);
        let stats = std::mem::take(&mut parts.planning);
        parts.room = parts.room.saturating_sub(stats.as_bytes().len());
        parts.stats.push(stats);
        Ok(())
    }

    /// The records of the root directory `fd`: its metadata, and its extended attributes
    /// when `archive`.
    fn root(&mut self, fd: OwnedFd) -> Result<()> {
        let stat = fstat(&fd).map_err(|e| Error::io("fstat", TreePath::default(), e))?;
        self.xattrs.wire.clear();
        if self.archive {
            match self.xattrs.read(fd.as_fd()) {
                Ok(0) => {}
                Ok(_) => self.warn(too_many_xattrs(TreePath::default()))?,
                Err(e) => self.warn(Error::io("flistxattr", TreePath::default(), e))?,
            }
        }
        let xattrs = std::mem::take(&mut self.xattrs.wire);
        let entry = Entry {
            xattrs: Xattrs(&xattrs),
            ..Entry::dir(b".", Meta::of_stat(&stat))
        };
        let entry = recorded(&entry, self.archive);
        let full = self.layout.root(&entry, names(&self.owners, &entry));
        self.xattrs.wire = xattrs;
        self.start(full)
    }

    /// Closes the last body and tells the writer how many jobs there are.
    fn end(&mut self) -> Result<()> {
        let layout = std::mem::replace(&mut self.layout, Layout::new(0));
        let (full, rows) = layout.finish();
        self.start(full)?;
        if self.counting {
            return Ok(());
        }
        let end = Done::End(self.started, rows);
        self.done.send(end).map_err(|_| writer_gone())
    }

    /// Hands the body `full` closed, if any, to the workers once a job may start.
    fn start(&mut self, full: Option<Body<Source>>) -> Result<()> {
        let Some(body) = full else {
            return Ok(());
        };
        self.cancel.check()?;
        if self.counting {
            self.bytes += body.raw_frame_len();
            return Ok(());
        }
        self.tokens.recv().map_err(|_| writer_gone())?;
        self.jobs
            .send((self.started, body))
            .map_err(|_| writer_gone())?;
        self.started += 1;
        Ok(())
    }

    /// Plans the regular file `name` in `dir`: left out, a hard link, a `FILE` or an
    /// `EXTFILE`.
    fn file(&mut self, dir: BorrowedFd<'_>, name: &[u8]) -> Result<()> {
        // Its path from the root, by which a plan's stats are kept and found.
        if self.known.is_some() || self.parts.is_some() {
            self.path.clear();
            self.path.extend_from_slice(self.dir.as_bytes());
            if !self.path.is_empty() {
                self.path.push(b'/');
            }
            self.path.extend_from_slice(name);
        }
        let known = (self.known.as_mut()).and_then(|known| known.take(&self.path));
        let st = match known.map_or_else(
            || {
                self.stated += 1;
                statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
            },
            Ok,
        ) {
            Ok(st) => st,
            Err(e) => return self.warn(Error::io("statx", self.dir.join(name), e)),
        };
        if let Some(parts) = self
            .parts
            .as_mut()
            .filter(|p| p.planning.as_bytes().len() < p.room)
        {
            parts.planning.push(&self.path, &st);
        }
        let kind = FileType::from_raw_mode(st.stx_mode.into());
        if kind != FileType::RegularFile {
            // Replaced since the directory was listed.
            self.ignore(self.dir.join(name), Kind::of(kind));
            return Ok(());
        }
        let key = inode_key(&st);
        if self.itself.contains(&Some(key)) {
            return Ok(());
        }
        let several = st.stx_nlink > 1;
        if let Some(&target) = self.links.get(&key).filter(|_| several) {
            let full = self.layout.hard_link(name, target);
            self.summary.hard_links += 1;
            self.progress.add_entry(0);
            self.progress.done(self.dir.as_bytes(), name, Kind::File);
            return self.start(full);
        }
        let there = self.update.listed_here(name);
        if self.update.unchanged_file(there, &st, false, (dir, name)) {
            return Ok(());
        }
        let Some(opened) = self.opened(dir, name, &st)? else {
            return Ok(());
        };
        let size = st.stx_size;
        let number = self.layout.entries();
        let xattrs = std::mem::take(&mut self.xattrs.wire);
        let entry = Entry {
            xattrs: Xattrs(&xattrs),
            link_id: several.then_some(number),
            ..Entry::file(name, Meta::of_statx(&st))
        };
        let entry = recorded(&entry, self.archive);
        let planned = match opened {
            Stored::Extents(fd, extents) => self.ext_file(&entry, fd, size, &extents),
            Stored::File => {
                let dir = match &self.dir_fd {
                    Some((raw, fd)) if *raw == dir.as_raw_fd() => fd.clone(),
                    _ => {
                        let dup = fcntl_dupfd_cloexec(dir, 0)
                            .map_err(|e| Error::io("dup directory", self.dir.join(b""), e))?;
                        let dup = Arc::new(dup);
                        self.dir_fd = Some((dir.as_raw_fd(), dup.clone()));
                        dup
                    }
                };
                let path = FilePath::new(&self.dir, name);
                let full = self.layout.file(
                    &entry,
                    size as u32,
                    Source::File { dir, path },
                    names(&self.owners, &entry),
                );
                self.start(full)
            }
        };
        self.xattrs.wire = xattrs;
        planned?;
        if several {
            self.links.insert(key, number);
        }
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.add_entry(size);
        self.progress.done(self.dir.as_bytes(), name, Kind::File);
        Ok(())
    }

    /// How the regular file `name` in `dir` (as `st` describes it) is stored, once checked
    /// readable (`None`, with a warning, where it is not), its extended attributes read
    /// when `archive`.
    fn opened(&mut self, dir: BorrowedFd<'_>, name: &[u8], st: &Statx) -> Result<Option<Stored>> {
        let size = st.stx_size;
        // Only a file with fewer blocks than its size can have holes.
        let holes = st.stx_blocks.saturating_mul(512) < size;
        self.xattrs.wire.clear();
        if !(self.archive || holes || size > CHUNK) {
            let flags = AtFlags::EACCESS | AtFlags::SYMLINK_NOFOLLOW;
            let readable = match self.check_access {
                true => accessat(dir, name, Access::READ_OK, flags),
                false => Ok(()),
            };
            return match readable {
                Ok(()) => Ok(Some(Stored::File)),
                Err(e) => self
                    .warn(Error::io("open", self.dir.join(name), e))
                    .map(|()| None),
            };
        }
        let file = match openat(dir, name, FILE_FLAGS, Mode::empty()) {
            Ok(file) => file,
            Err(e) => {
                return self
                    .warn(Error::io("open", self.dir.join(name), e))
                    .map(|()| None)
            }
        };
        if self.archive {
            match self.xattrs.read(file.as_fd()) {
                Ok(0) => {}
                Ok(_) => self.warn(too_many_xattrs(self.dir.join(name)))?,
                Err(e) => self.warn(Error::io("flistxattr", self.dir.join(name), e))?,
            }
        }
        let regions = match holes {
            true => data_regions(file.as_fd(), size),
            false => vec![(0, size)],
        };
        let extents = chunks(&regions);
        let whole = size <= CHUNK && (size == 0 || extents == [(0, size)]);
        Ok(Some(match whole {
            true => Stored::File,
            false => Stored::Extents(file, extents),
        }))
    }

    /// Plans the `EXTFILE` `entry` of `size` bytes open as `fd`, with `extents` (offset,
    /// length): read now when they are small, else by the workers.
    fn ext_file(
        &mut self,
        entry: &Entry<'_>,
        fd: OwnedFd,
        size: u64,
        extents: &[(u64, u64)],
    ) -> Result<()> {
        let count = extents.len() as u32;
        let full = (self.layout).ext_file(entry, size, count, names(&self.owners, entry));
        self.start(full)?;
        let path = self.dir.join(entry.name);
        let file = Arc::new(Opened { fd, path, size });
        let data: u64 = extents.iter().map(|(_, len)| len).sum();
        let mut warnings = Vec::new();
        for (i, &(at, len)) in extents.iter().enumerate() {
            let last = i + 1 == extents.len();
            let source = match data <= READ_WHEN_PLANNED {
                true => {
                    let mut bytes = Vec::with_capacity(len as usize + 1);
                    let end = last.then_some(size);
                    let got = read_planned(
                        file.fd.as_fd(),
                        at,
                        len as usize,
                        end,
                        &mut bytes,
                        &self.cancel,
                    )?;
                    got.warn(&file.path, &mut warnings);
                    Source::Bytes(bytes)
                }
                false => Source::Region {
                    file: file.clone(),
                    at,
                    last,
                },
            };
            let full = self.layout.extent(at, len as u32, source);
            self.start(full)?;
        }
        if let Some(warning) = warnings.into_iter().next() {
            self.summary.warnings.push(warning);
        }
        Ok(())
    }

    /// Records something that could not be read, and goes on.
    fn warn(&mut self, error: Error) -> Result<()> {
        self.summary.warnings.push(Warning::unreadable(error));
        Ok(())
    }

    /// Records an entry left out because the archive does not take its kind.
    fn ignore(&mut self, path: TreePath, kind: Kind) {
        self.summary.warnings.push(Warning::ignored(path, kind));
    }
}

/// The data regions (offset, length) of the file `fd` of `size` bytes, by `SEEK_DATA` and
/// `SEEK_HOLE`; the whole file where the file system cannot tell.
fn data_regions(fd: BorrowedFd<'_>, size: u64) -> Vec<(u64, u64)> {
    let mut regions = Vec::new();
    let mut at = 0;
    while at < size {
        let start = match seek(fd, SeekFrom::Data(at)) {
            Ok(start) => start,
            Err(Errno::NXIO) => break,
            Err(_) => return vec![(0, size)],
        };
        let Ok(end) = seek(fd, SeekFrom::Hole(start)) else {
            return vec![(0, size)];
        };
        let end = end.min(size);
        if start >= end {
            break;
        }
        regions.push((start, end - start));
        at = end;
    }
    regions
}

/// `regions` cut at every multiple of [`CHUNK`], empty ones left out.
fn chunks(regions: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut extents = Vec::new();
    for &(mut at, len) in regions {
        let end = at + len;
        while at < end {
            let next = end.min((at / CHUNK + 1) * CHUNK);
            extents.push((at, next - at));
            at = next;
        }
    }
    extents
}

impl Sink for Planner<'_> {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.cancel.check()?;
        let entry = &recorded(entry, self.archive);
        let full = self.layout.dir(entry, names(&self.owners, entry));
        self.summary.dirs += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, Kind::Dir);
        self.dir.enter(entry.name);
        self.dir_fd = None;
        self.update.relisted(&self.dir);
        self.start(full)
    }

    fn leave_dir(&mut self) -> Result<()> {
        let full = self.layout.pop();
        self.dir.leave();
        self.dir_fd = None;
        self.update.relisted(&self.dir);
        self.start(full)
    }

    /// Plans a file the walker announced unopened (it announces no other content).
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
        match content {
            Content::Unopened { dir } => self.file(dir, entry.name),
            _ => Err(Error::Argument {
                arg: self.dir.join(entry.name).to_string(),
                problem: "only files of a walked tree are packed as version 2".into(),
            }),
        }
    }

    /// Plans a symlink, unless the listing shows it unchanged.
    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<()> {
        if self.update.unchanged_symlink(entry, target) {
            return Ok(());
        }
        let entry = &recorded(entry, self.archive);
        let full = (self.layout).symlink(entry, target, names(&self.owners, entry));
        self.summary.symlinks += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, Kind::Symlink);
        self.start(full)
    }

    /// Plans a fifo, or a device when `archive` (else it is ignored), unless the listing
    /// shows it unchanged.
    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        if entry.kind != Kind::Fifo && !self.archive {
            self.ignore(self.dir.join(entry.name), entry.kind);
            return Ok(());
        }
        if self.update.unchanged_special(entry, device) {
            return Ok(());
        }
        let entry = recorded(entry, self.archive);
        let full = (self.layout).special(&entry, device, names(&self.owners, &entry));
        self.summary.specials += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, entry.kind);
        self.start(full)
    }

    /// Ignores the entry (a socket), with a warning.
    fn other(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.ignore(self.dir.join(entry.name), entry.kind);
        Ok(())
    }

    /// Notes the entry as not packed, and goes on.
    fn unreadable(&mut self, error: Error) -> Result<()> {
        self.warn(error)
    }

    /// Goes on in `dir`, as a share of the archive that begins there; planning parts apart,
    /// with the next part.
    fn resume(&mut self, dir: &DirPath) -> Result<()> {
        if let Some(parts) = &mut self.parts {
            parts.begun = false;
            if std::mem::replace(&mut parts.resumed, true) {
                self.close_part()?;
            }
        }
        let first = self.layout.entries();
        self.layout.resume(first, dir.as_bytes());
        self.dir = dir.clone();
        self.update.relisted(&self.dir);
        Ok(())
    }

    /// Cuts the body where a part begins (stored raw); planning parts apart, ends the part
    /// before unless what came before is this part's (the directories above it).
    fn part_begins(&mut self) -> Result<()> {
        if self.cut_parts {
            let full = self.layout.cut();
            self.start(full)?;
        }
        let Some(parts) = &mut self.parts else {
            return Ok(());
        };
        if std::mem::replace(&mut parts.begun, true) {
            self.close_part()?;
            self.layout.resume(0, self.dir.as_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::Path;

    use rustix::fs::{open, OFlags, CWD};

    use super::*;
    use crate::format::{decode_all, Event, Limits, SEGMENT_TARGET};
    use crate::pack::{Format, Pack};
    use crate::tree::Recording;
    use crate::unpack::{Archive, Unpack};

    #[test]
    fn regions_are_cut_at_every_multiple_of_a_chunk() {
        let c = CHUNK;
        assert_eq!(chunks(&[(0, 0)]), []);
        assert_eq!(chunks(&[(0, c)]), [(0, c)]);
        assert_eq!(chunks(&[(0, 2 * c + 1)]), [(0, c), (c, c), (2 * c, 1)]);
        assert_eq!(
            chunks(&[(5, 10), (c - 1, 2)]),
            [(5, 10), (c - 1, 1), (c, 1)]
        );
    }

    /// A planned read gets exactly the planned bytes: a file that shrank is padded with
    /// zeros, one that grew is cut, and each says so; a read that fails is padded too.
    #[test]
    fn a_file_that_changed_since_it_was_planned_is_stored_as_planned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        fs::write(&path, b"0123456789").unwrap();
        let file = open(&path, OFlags::RDONLY, Mode::empty()).unwrap();
        let cancel = Cancel::new();
        let read = |at: u64, len: usize, end: Option<u64>| {
            let mut buf = Vec::with_capacity(len + 1);
            let got = read_planned(file.as_fd(), at, len, end, &mut buf, &cancel).unwrap();
            (got, buf)
        };
        assert_eq!(
            read(0, 10, Some(10)),
            (Got::Planned, b"0123456789".to_vec())
        );
        assert_eq!(
            read(0, 12, Some(12)),
            (Got::Shrank(2), b"0123456789\0\0".to_vec())
        );
        assert_eq!(read(0, 8, Some(8)), (Got::Grew, b"01234567".to_vec()));
        // An extent in the middle, and a last one before a hole at the end.
        assert_eq!(read(2, 3, None), (Got::Planned, b"234".to_vec()));
        assert_eq!(read(2, 3, Some(10)), (Got::Planned, b"234".to_vec()));
        assert_eq!(read(2, 3, Some(9)), (Got::Grew, b"234".to_vec()));
        assert_eq!(read(8, 4, None), (Got::Shrank(2), b"89\0\0".to_vec()));
        let not_a_file = open(dir.path(), OFlags::RDONLY, Mode::empty()).unwrap();
        let mut buf = Vec::with_capacity(5);
        let got = read_planned(not_a_file.as_fd(), 0, 4, Some(4), &mut buf, &cancel);
        assert_eq!(got.unwrap(), Got::Failed(0, Errno::ISDIR));
        assert_eq!(buf, [0; 4]);
        let mut warnings = Vec::new();
        Got::Shrank(2).warn(&TreePath(b"d/f".to_vec()), &mut warnings);
        assert_eq!(
            warnings[0].to_string(),
            "d/f: file shrank by 2 bytes; padding with zeros"
        );
        assert!(warnings[0].lost);
    }

    /// Files read in a ring batch that are not as planned (shrank, grew, gone) keep their
    /// place and are read again alone: the same bytes and warnings as without a ring.
    #[test]
    fn a_batch_reads_again_the_files_it_could_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        for (name, data) in [("a", "aaaaa"), ("b", "bb"), ("c", "ccc")] {
            fs::write(dir.path().join(name), data).unwrap();
        }
        let fd = open(
            dir.path(),
            OFlags::DIRECTORY | OFlags::RDONLY,
            Mode::empty(),
        )
        .unwrap();
        let fd = Arc::new(fd);
        let seal = |ring: Option<&mut Ring>| {
            let mut layout = Layout::new(1 << 20);
            for (name, size) in [("a", 5), ("b", 4), ("c", 2), ("gone", 3)] {
                let entry = Entry::file(name.as_bytes(), Meta::with_mode(0o644));
                let path = FilePath::new(&DirPath::default(), name.as_bytes());
                let source = Source::File {
                    dir: fd.clone(),
                    path,
                };
                assert!(layout.file(&entry, size, source, (b"", b"")).is_none());
            }
            let (body, _) = layout.finish();
            let mut warnings = Vec::new();
            let cancel = Cancel::new();
            let fill = |parts: &mut dyn Iterator<Item = Part<'_, Source>>, buf: &mut Vec<u8>| {
                fill_parts(parts, buf, ring, &mut warnings, &cancel)
            };
            let sealed = body.unwrap().seal(Vec::new(), fill, None).unwrap();
            let warnings: Vec<String> = warnings.iter().map(|w| w.to_string()).collect();
            (sealed.frame, warnings)
        };
        let Ok(mut ring) = Ring::new(4 * RING_FILES as u32, RING_FILES as u32) else {
            return; // no io_uring here: the batch path is not taken either
        };
        let (batched, warnings) = seal(Some(&mut ring));
        assert_eq!((&batched, &warnings), (&seal(None).0, &seal(None).1));
        assert_eq!(
            warnings[..2],
            [
                "b: file shrank by 2 bytes; padding with zeros",
                "c: file changed as we read it",
            ]
        );
        assert!(warnings[2].starts_with("gone: open failed"), "{warnings:?}");
        let has = |data: &[u8]| batched.windows(data.len()).any(|w| w == data);
        assert!(has(b"aaaaa") && has(b"bb\0\0") && has(b"\0\0\0"));
    }

    /// A stop request and a failing writer end the pack with their error, whatever the
    /// threads were doing, and nothing hangs.
    #[test]
    fn a_stop_or_a_failed_write_ends_the_pack_with_its_error() {
        struct Failing(usize);
        impl std::io::Write for Failing {
            fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
                self.0 += data.len();
                match self.0 > 100_000 {
                    true => Err(std::io::Error::other("disk on fire")),
                    false => Ok(data.len()),
                }
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let fd = || {
            open(
                dir.path(),
                OFlags::DIRECTORY | OFlags::RDONLY,
                Mode::empty(),
            )
            .unwrap()
        };
        for threads in [1, 3] {
            let pack = Pack::new(fd()).format(Format::V2).threads(threads);
            let failed = pack.segment_target(4096).to_writer(Failing(0));
            assert!(
                failed
                    .as_ref()
                    .is_err_and(|e| e.to_string().contains("disk on fire")),
                "{failed:?}"
            );
            let cancel = Cancel::new();
            cancel.cancel();
            let pack = Pack::new(fd())
                .format(Format::V2)
                .threads(threads)
                .cancel(cancel);
            let stopped = pack.to_writer(Vec::new());
            assert!(
                matches!(stopped, Err(Error::Interrupted { .. })),
                "{stopped:?}"
            );
        }
    }

    /// A tree of many small files in nested directories, a file of several chunks, hard
    /// links far apart, a sparse file, an empty one, a symlink and a fifo.
    fn tree(root: &Path) {
        for d in ["a/b", "a/c", "z"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        for i in 0..120 {
            let dir = ["a", "a/b", "a/c", "z"][i % 4];
            let data: Vec<u8> = (0..i * 97).map(|b| (b * 13 + i) as u8).collect();
            fs::write(root.join(format!("{dir}/f{i:03}")), data).unwrap();
        }
        let big: Vec<u8> = (0..CHUNK as usize * 2 + 12_345)
            .map(|b| (b % 251) as u8)
            .collect();
        fs::write(root.join("a/big"), big).unwrap();
        fs::hard_link(root.join("a/b/f001"), root.join("z/link")).unwrap();
        fs::hard_link(root.join("a/big"), root.join("z/big-link")).unwrap();
        let sparse = fs::File::create(root.join("a/sparse")).unwrap();
        sparse.set_len(50 << 20).unwrap();
        rustix::io::pwrite(&sparse, b"A", 0).unwrap();
        rustix::io::pwrite(&sparse, b"Z", (50 << 20) - 1).unwrap();
        fs::write(root.join("a/empty"), b"").unwrap();
        std::os::unix::fs::symlink("a/big", root.join("link")).unwrap();
        rustix::fs::mknodat(
            CWD,
            root.join("z/fifo"),
            FileType::Fifo,
            Mode::from(0o600),
            0,
        )
        .unwrap();
        fs::set_permissions(root, fs::Permissions::from_mode(0o700)).unwrap();
    }

    fn packed(root: &Path, pack: impl FnOnce(Pack<'_>) -> Pack<'_>) -> (Vec<u8>, PackSummary) {
        let fd = open(root, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap();
        let mut archive = Vec::new();
        let summary = pack(Pack::new(fd)).to_writer(&mut archive).unwrap();
        (archive, summary)
    }

    /// Every event of `archive`, decoded alone; and the number of segments.
    fn decoded(archive: &[u8]) -> (Vec<String>, usize) {
        let (mut events, mut segments) = (Vec::new(), 0);
        decode_all(archive, Limits::default(), |_, event| {
            match event {
                Event::Segment => segments += 1,
                Event::Index(_) => {}
                event => events.push(format!("{event:?}")),
            }
            Ok(())
        })
        .unwrap();
        (events, segments)
    }

    /// What a listing of `archive` sees (root record aside).
    fn listed(archive: Vec<u8>) -> Vec<crate::tree::Recorded> {
        let mut recording = Recording::default();
        let input = Archive::from_reader(std::io::Cursor::new(archive));
        Unpack::new().list(&input, &mut recording).unwrap();
        recording.normalized()
    }

    /// Shares packed apart and put one after the other (as `pack --mpi` does on MPI ranks)
    /// make one valid archive, every row and segment as the bodies say, that lists as the
    /// plain pack does: for 1 to 4 shares, raw or zstd, with hard links across shares. Raw,
    /// each share's frames are as long as planned (planned again where it names first a
    /// file of several links that an earlier share names).
    #[test]
    fn shares_put_together_are_an_archive_of_the_tree() {
        use crate::pack::share::{plan_run, tail, HEADER};
        use crate::share::{cut_runs, Share, SPINE};
        use std::io::{Read, Seek};
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        fs::create_dir_all(dir.path().join("a/b/deep/er")).unwrap();
        fs::write(dir.path().join("a/b/deep/er/x"), b"x").unwrap();
        fs::hard_link(dir.path().join("z/f003"), dir.path().join("a/b/deep/er/y")).unwrap();
        fs::create_dir(dir.path().join("many")).unwrap();
        for i in 0..150 {
            fs::write(dir.path().join(format!("many/{i:03}")), [i as u8; 3]).unwrap();
        }
        let plain = packed(dir.path(), |p| p.format(Format::V2)).0;
        // 33 shares: some begin inside a directory above the parts, which they leave
        // first. Split at the top, the parts are the root's entries.
        let cases = [(1, None), (3, Some(3)), (4, None), (33, None)];
        let mut replanned = 0;
        for (split, (ranks, zstd)) in [SPINE, 1]
            .into_iter()
            .flat_map(|split| cases.map(|case| (split, case)))
        {
            let pack = || {
                let fd = open(
                    dir.path(),
                    OFlags::DIRECTORY | OFlags::RDONLY,
                    Mode::empty(),
                );
                let pack = Pack::new(fd.unwrap()).segment_target(4096);
                match zstd {
                    Some(level) => pack.zstd(level),
                    None => pack,
                }
            };
            let (parts, plans, stats) = pack().plan_parts(split, 0, 1, 2).unwrap();
            // Split at 3: a/big, a's other files, a/b/deep, a/b's files, a/c's, link, many's
            // in 3 parts of at most 64 and z's (files in a row are parts of up to 64).
            // At the top: a, link, many and z.
            let want = match split {
                SPINE => 10,
                _ => 4,
            };
            assert_eq!((parts, plans.len() as u64), (want, want));
            let weights: Vec<u64> = plans.iter().map(PartPlan::weight).collect();
            let runs = cut_runs(&weights, ranks);
            let (mut archive, mut indexes, mut entries) = (HEADER.to_vec(), Vec::new(), 0);
            for rank in 0..ranks {
                let share = Share::new(rank, split, &runs);
                // One pack for the three steps, as pack --mpi has.
                let pack = pack();
                let (again, mine, _) = pack.plan_parts(split, rank, ranks, 1).unwrap();
                assert_eq!(again, parts);
                let dealt = plans.iter().skip(rank as usize).step_by(ranks as usize);
                assert!(
                    mine.iter().eq(dealt),
                    "rank {rank} of {ranks} plans its own"
                );
                let units = share.units();
                let run = units.start as usize..units.end as usize;
                // Half the ranks plan and pack with their files' metadata from the plans.
                let known = match rank % 2 {
                    0 => FileStats::joined(stats[run.clone()].iter().map(FileStats::as_bytes)),
                    _ => FileStats::default(),
                };
                let plan = plan_run(&plans, run, zstd.is_none());
                assert_eq!(
                    plan.first, entries,
                    "share {rank} of {ranks} begins where the last ends"
                );
                replanned += u32::from(!plan.holds);
                let planned = pack.plan_share_of(&share, &plan, &known).unwrap();
                let (first, links) = (plan.first, plan.earlier);
                let mut spool = tempfile::tempfile().unwrap();
                let planned = (first, &planned);
                let shared = pack.pack_share(&share, planned, &links, &known, spool.as_fd());
                let (shared, planned) = (shared.unwrap(), planned.1);
                // With their plans' stats, no file is stat'ed again.
                assert_eq!(
                    shared.stated == 0,
                    rank % 2 == 0 || shared.summary.files == 0,
                    "share {rank} of {ranks}: {} of {} files stat'ed",
                    shared.stated,
                    shared.summary.files
                );
                let raw = zstd.is_none().then_some(shared.bytes);
                assert_eq!(
                    planned.bytes, raw,
                    "share {rank} of {ranks}, split at {split}"
                );
                spool.rewind().unwrap();
                assert_eq!(
                    spool.read_to_end(&mut archive).unwrap() as u64,
                    shared.bytes
                );
                indexes.push(shared.index);
                entries += planned.entries;
            }
            let indexes: Vec<&[u8]> = indexes.iter().map(|i| &i[..]).collect();
            archive.extend(tail(&indexes, zstd).unwrap());
            decoded(&archive);
            assert!(
                listed(plain.clone()) == listed(archive),
                "{ranks} shares split at {split} differ from one pack (zstd {zstd:?})"
            );
        }
        assert!(
            replanned > 0,
            "a share names first a file an earlier share names"
        );
    }

    /// A pack of the directory `dir`.
    fn pack_of(dir: &Path) -> Pack<'static> {
        Pack::new(open(dir, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap())
    }

    /// The share of one process of all `dir` (`pack --mpi -n 1`), and its plan.
    fn whole_share(dir: &Path) -> (crate::share::Share, Planned) {
        let parts = pack_of(dir).plan_parts(1, 0, 1, 1).unwrap().0;
        let share = crate::share::Share::new(0, 1, &[0, parts]);
        let none = (0, &Links::new());
        let planned = pack_of(dir)
            .plan_share(&share, none, &FileStats::default())
            .unwrap();
        (share, planned)
    }

    /// A file that grew between the plan of its share and the pack, as the same number of
    /// entries, fails the pack: its frames no longer fit where the plan put them; unless the
    /// pack takes its metadata from the plan of its part ([`FileStats`]).
    #[test]
    fn a_share_whose_file_grew_since_its_plan_fails() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), b"before").unwrap();
        let pack = || pack_of(dir.path());
        let (share, planned) = whole_share(dir.path());
        let spool = tempfile::tempfile().unwrap();
        let links = Links::new();
        let none = FileStats::default();
        let same = pack().pack_share(&share, (0, &planned), &links, &none, spool.as_fd());
        assert_eq!(same.unwrap().bytes, planned.bytes.unwrap());
        fs::write(dir.path().join("f"), b"after, longer").unwrap();
        let grown = pack().pack_share(&share, (0, &planned), &links, &none, spool.as_fd());
        let error = grown.unwrap_err().to_string();
        assert!(
            error.contains("a file changed size since it was planned"),
            "{error}"
        );
        // Packed with the metadata its plan read, it is stored as planned, with a warning.
        fs::write(dir.path().join("f"), b"before").unwrap();
        let (share, planned) = whole_share(dir.path());
        let (_, _, stats) = pack().plan_parts(1, 0, 1, 1).unwrap();
        fs::write(dir.path().join("f"), b"after, longer").unwrap();
        let known = FileStats::joined(stats.iter().map(FileStats::as_bytes));
        let packed = pack().pack_share(&share, (0, &planned), &links, &known, spool.as_fd());
        let packed = packed.unwrap();
        assert_eq!(packed.bytes, planned.bytes.unwrap());
        let warnings: Vec<String> = packed
            .summary
            .warnings
            .iter()
            .map(|w| w.to_string())
            .collect();
        assert!(
            warnings.iter().any(|w| w.contains("changed as we read it")),
            "{warnings:?}"
        );
    }

    /// A part that appears at the top between the cut and the plan, or the plan and the
    /// pack, would be no share's: both fail. So does an entry that appears in a run
    /// planned again.
    #[test]
    fn a_part_that_appeared_since_the_cut_fails_the_share() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), b"first").unwrap();
        let pack = || pack_of(dir.path());
        let (share, planned) = whole_share(dir.path());
        fs::create_dir(dir.path().join("g")).unwrap();
        let spool = tempfile::tempfile().unwrap();
        let none = FileStats::default();
        let packed = pack().pack_share(&share, (0, &planned), &Links::new(), &none, spool.as_fd());
        let replanned = pack().plan_share(&share, (0, &Links::new()), &none);
        for error in [packed.err(), replanned.err()] {
            let error = error.expect("an error").to_string();
            assert!(error.contains("2 parts where 1 were counted"), "{error}");
        }
        // A file that joins a part (files in a row) since its plan: the run planned again
        // has another number of entries than its parts' plans said.
        fs::remove_dir(dir.path().join("g")).unwrap();
        fs::write(dir.path().join("h"), b"joins f's part").unwrap();
        let run = crate::pack::share::RunPlan {
            first: 0,
            earlier: Links::new(),
            planned,
            holds: false,
        };
        let error = pack()
            .plan_share_of(&share, &run, &none)
            .unwrap_err()
            .to_string();
        assert!(error.contains("2 entries where 1 were planned"), "{error}");
    }

    /// Small segments: many of them, extents of the large file across them, hard links to
    /// entries of earlier segments; the same bytes on 1 and 4 threads, raw or zstd; the same
    /// tree as version 1 holds.
    #[test]
    fn many_segments_are_the_same_whatever_the_threads() {
        let dir = tempfile::tempdir().unwrap();
        tree(dir.path());
        let v1 = packed(dir.path(), |p| p).0;
        let mut raw = Vec::new();
        for zstd in [None, Some(3)] {
            let mut archives = Vec::new();
            for threads in [1, 4] {
                let (archive, summary) = packed(dir.path(), |p| {
                    let p = p.format(Format::V2).threads(threads).segment_target(4096);
                    match zstd {
                        Some(level) => p.zstd(level),
                        None => p,
                    }
                });
                assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
                assert_eq!((summary.files, summary.hard_links), (123, 2));
                assert_eq!(summary.archive_bytes, archive.len() as u64);
                archives.push(archive);
            }
            assert!(
                archives[0] == archives[1],
                "1 and 4 threads differ (zstd {zstd:?})"
            );
            let (events, segments) = decoded(&archives[0]);
            assert!(segments > 30, "{segments} segments");
            let extents = events.iter().filter(|e| e.starts_with("Extent")).count();
            // The large file in three chunks, the sparse one's two data blocks.
            assert_eq!(extents, 3 + 2, "{events:#?}");
            assert!(
                listed(v1.clone()) == listed(archives[0].clone()),
                "v1 and v2 differ"
            );
            match zstd {
                None => raw = archives.swap_remove(0),
                Some(_) => assert!(archives[0].len() < raw.len() / 2),
            }
        }
        // With the default target, big files still spread over segments.
        let (archive, _) = packed(dir.path(), |p| p.format(Format::V2));
        let (_, segments) = decoded(&archive);
        assert!(
            segments >= (2 * CHUNK as usize) / SEGMENT_TARGET,
            "{segments}"
        );
    }

    /// Landed into a new DEST, the archive gives back the tree: contents, modes, the root's
    /// mode and time, hard links as links, the sparse file sparse; with owners (as root)
    /// the names come along.
    #[test]
    fn a_landed_archive_is_the_tree_it_was_packed_from() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        fs::create_dir(&src).unwrap();
        tree(&src);
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec::default(),
            last_modification: rustix::fs::Timespec {
                tv_sec: 978_307_200,
                tv_nsec: 0,
            },
        };
        rustix::fs::utimensat(CWD, &src, &times, AtFlags::empty()).unwrap();
        let (archive, _) = packed(&src, |p| p.zstd(3).archive(true).segment_target(1 << 16));
        let file = dir.path().join("a.barge");
        fs::write(&file, &archive).unwrap();
        let dest = dir.path().join("new/dest");
        let unpack = Unpack::new().sandbox(false).umask(0);
        let opened = unpack.open(Some(&file)).unwrap();
        let mut destination = unpack.prepare(&dest, &opened).unwrap();
        unpack
            .land(&opened, &mut destination, &Progress::default())
            .unwrap();
        let differences = Mutex::new(Vec::new());
        let report = |e: Error| differences.lock().unwrap().push(e.to_string());
        crate::compare::Compare::new()
            .modes(0)
            .whole()
            .run(&src, &dest, &report)
            .unwrap();
        assert_eq!(differences.into_inner().unwrap(), Vec::<String>::new());
        let root = fs::metadata(&dest).unwrap();
        assert_eq!((root.mode() & 0o7777, root.mtime()), (0o700, 978_307_200));
        let inode = |path: &str| fs::metadata(dest.join(path)).unwrap().ino();
        assert_eq!(inode("a/b/f001"), inode("z/link"));
        assert_eq!(inode("a/big"), inode("z/big-link"));
        let sparse = fs::metadata(dest.join("a/sparse")).unwrap();
        assert!(
            sparse.blocks() * 512 < 1 << 20,
            "{} blocks",
            sparse.blocks()
        );
        if rustix::process::geteuid().is_root() {
            let mut names = Vec::new();
            decode_all(&archive, Limits::default(), |decoder, event| {
                if let Event::Dir(entry) = event {
                    names.push((entry.name.to_vec(), decoder.owner_names().0.to_vec()));
                }
                Ok(())
            })
            .unwrap();
            assert!(names.iter().all(|(_, user)| user == b"root"), "{names:?}");
        }
    }
}
