use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::mpsc;

use super::*;
use crate::format::{Encoder, SegmentEncoder};
use crate::land::restore::{Existing, Restore};
use crate::land::sync::SyncLander;
use crate::source::ReadSource;
use crate::tree::Owner;

/// Landing threads of the end-to-end tests: the calling thread and two helpers.
const WORKERS: usize = 3;

fn policy(existing: Existing) -> Policy {
    Policy::new(
        Restore::default().existing(existing),
        Owner::of_process(),
        0,
    )
}

fn decoding() -> Decoding {
    Decoding {
        limits: Limits::default(),
        strip: 0,
        select: Select::default(),
        owners: None,
    }
}

/// The batches the planner cuts `archive` (mapped) into at `most` work per batch, none
/// landed: a helper that never starts leaves them in the queue (at most [`QUEUE`]).
fn batches(archive: &[u8], most: u64) -> Vec<Batch<'_>> {
    let mut parser = Parser::new(decoding(), policy(Existing::Keep), Cancel::new());
    parser.plan.batch_cost = most;
    let queue = Queue::default();
    let crowds = Crowds::default();
    let mut here = Here::<SyncLander> {
        queue: &queue,
        crowds: &crowds,
        own: None,
        helpers: 1,
        spawn: &|| false,
    };
    let stop = AtomicU64::new(u64::MAX);
    let source = Source::Mapped(archive, None);
    (parser.land_rest_of(&source, 0, &stop, &mut here)).unwrap_or_else(|(_, e)| panic!("{e}"));
    std::iter::from_fn(|| match here.take() {
        Some(Job::Land(batch)) => Some(batch),
        _ => None,
    })
    .collect()
}

/// The names of the directories a batch starts in.
fn names(at: &[DirStep]) -> Vec<&[u8]> {
    at.iter().map(|d| &d.name[..]).collect()
}

/// Whether `op` creates an entry (what a batch's `first` counts).
fn is_entry(op: &Op) -> bool {
    !matches!(op, Op::Leave | Op::Extent(..))
}

/// Checks that each batch starts where the one before it ended: in the directories its
/// `Enter`s and `Leave`s left, at the entry after its last one.
fn assert_contiguous(batches: &[Batch<'_>]) {
    let (mut at, mut entries) = (Vec::<Vec<u8>>::new(), 0);
    for (i, batch) in batches.iter().enumerate() {
        assert_eq!(
            names(&batch.at),
            at,
            "batch {i} starts where the last ended"
        );
        assert_eq!(batch.first, entries, "batch {i}'s first entry");
        for op in &batch.ops {
            match op {
                Op::Enter(dir) => at.push(dir.name.to_vec()),
                Op::Leave => drop(at.pop()),
                _ => {}
            }
            entries += u64::from(is_entry(op));
        }
    }
}

/// `dirs` directories `d0`, `d1`, ... each holding `files` small files.
fn dirs_of_files(dirs: usize, files: usize) -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new());
    for d in 0..dirs {
        encoder.dir(format!("d{d}").as_bytes(), 0o755).unwrap();
        for f in 0..files {
            let name = format!("f{f:02}");
            encoder
                .file(name.as_bytes(), 0o644, name.as_bytes())
                .unwrap();
        }
        encoder.pop().unwrap();
    }
    encoder.finish().unwrap()
}

/// A batch that holds its share ends where the directory changes, not inside one: every
/// batch but the last ends by leaving a directory, having reached `most`.
#[test]
fn a_batch_that_holds_its_share_ends_where_the_directory_changes() {
    let archive = dirs_of_files(6, 10);
    let batches = batches(&archive, 8);
    assert_contiguous(&batches);
    assert_eq!(batches.len(), 6, "one batch per directory");
    for (i, batch) in batches.iter().enumerate() {
        assert!(matches!(batch.ops.last(), Some(Op::Leave)), "batch {i}");
        assert!(batch.cost >= 8, "batch {i}: {}", batch.cost);
        assert_eq!(names(&batch.at), Vec::<&[u8]>::new(), "batch {i}");
    }
}

/// A directory of more than twice the share is cut inside: the next batch starts in it,
/// at its next entry, and no batch holds more than twice the share.
#[test]
fn a_long_directory_is_cut_at_twice_the_share_and_the_next_batch_starts_in_it() {
    let mut encoder = Encoder::new(Vec::new());
    encoder.dir(b"a", 0o755).unwrap();
    encoder.dir(b"b", 0o755).unwrap();
    for f in 0..40 {
        encoder
            .file(format!("f{f:02}").as_bytes(), 0o644, b"x")
            .unwrap();
    }
    let archive = encoder.finish().unwrap();
    let batches = batches(&archive, 8);
    assert_contiguous(&batches);
    assert!(batches.len() >= 3, "{} batches", batches.len());
    for batch in &batches {
        assert!(batch.cost <= 16, "{}", batch.cost);
    }
    assert_eq!(names(&batches[1].at), [&b"a"[..], &b"b"[..]]);
    let Op::File(leaf, ..) = &batches[1].ops[0] else {
        panic!("the second batch starts with a file");
    };
    let first = leaf.entry(batches[1].source.bytes());
    // Entries 0 and 1 are the directories.
    assert_eq!(
        first.name,
        format!("f{:02}", batches[1].first - 2).as_bytes()
    );
}

/// An `EXTFILE` of this many extents, each of [`EXTENT`] bytes and one every
/// [`STRIDE`] bytes (holes between them), in segments of about [`SEGMENT_TARGET`] bytes.
const EXTENTS: u64 = 40;
const EXTENT: usize = 100;
const STRIDE: u64 = 300;
const SEGMENT_TARGET: usize = 1000;

/// Extent `i`'s bytes.
fn extent(i: u64) -> Vec<u8> {
    vec![b'A' + i as u8; EXTENT]
}

/// A version 2 archive (zstd at `level` where smaller): `a/` holding `f` (linked), `big`
/// (an `EXTFILE` of [`EXTENTS`] extents), `z/` holding `g` and a hard link `l` to `a/f`.
fn sparse_archive(level: Option<i32>) -> Vec<u8> {
    let mut encoder = SegmentEncoder::new(Vec::new()).unwrap();
    encoder = encoder.segment_target(SEGMENT_TARGET);
    if let Some(level) = level {
        encoder = encoder.zstd(level);
    }
    let meta = Meta::with_mode(0o644);
    encoder.dir_with(&Entry::dir(b"a", meta)).unwrap();
    let linked = Entry {
        link_id: Some(1),
        ..Entry::file(b"f", meta)
    };
    encoder.file_with(&linked, b"linked").unwrap();
    encoder.pop().unwrap();
    let big = Entry::file(b"big", meta);
    encoder
        .ext_file(&big, EXTENTS * STRIDE, EXTENTS as u32)
        .unwrap();
    for i in 0..EXTENTS {
        encoder.extent(i * STRIDE + 50, &extent(i)).unwrap();
    }
    encoder.dir_with(&Entry::dir(b"z", meta)).unwrap();
    encoder.file_with(&Entry::file(b"g", meta), b"g").unwrap();
    encoder.hard_link(b"l", 1).unwrap();
    encoder.finish().unwrap()
}

/// What `big` of [`sparse_archive`] holds.
fn big() -> Vec<u8> {
    let mut big = vec![0; (EXTENTS * STRIDE) as usize];
    for i in 0..EXTENTS {
        let at = (i * STRIDE + 50) as usize;
        big[at..at + EXTENT].copy_from_slice(&extent(i));
    }
    big
}

/// The extents of a file several batches hold are planned under its entry's key, each at
/// its offset past the holes, the file created once (with their count) by the first.
#[test]
fn the_extents_of_a_file_in_several_batches_go_to_its_key_at_their_offsets() {
    let archive = sparse_archive(None);
    let batches = batches(&archive, 8);
    assert_contiguous(&batches);
    let mut sparse = Vec::new();
    let mut extents = Vec::new();
    for (i, batch) in batches.iter().enumerate() {
        for op in &batch.ops {
            match op {
                Op::Sparse(leaf, size, count, key) => {
                    let name = leaf.entry(batch.source.bytes()).name.to_vec();
                    sparse.push((i, name, *size, *count, *key));
                }
                Op::Extent(key, at, range, _) => {
                    extents.push((i, *key, *at, batch.source.bytes()[range.clone()].to_vec()))
                }
                _ => {}
            }
        }
    }
    // `big` is entry 2, after `a` and `a/f`.
    assert_eq!(sparse, [(0, b"big".to_vec(), EXTENTS * STRIDE, 40, 2)]);
    let planned: Vec<_> = extents
        .iter()
        .map(|(_, k, at, d)| (*k, *at, d.clone()))
        .collect();
    let expected: Vec<_> = (0..EXTENTS)
        .map(|i| (2, i * STRIDE + 50, extent(i)))
        .collect();
    assert_eq!(planned, expected);
    let last = extents.last().unwrap().0;
    assert!(last >= 2, "the extents span batches 0 to {last}");
}

/// A mapped archive and its file, as the threads engine gets them.
struct Mapped {
    _dir: tempfile::TempDir,
    file: std::fs::File,
    bytes: Vec<u8>,
}

impl Mapped {
    fn new(archive: &[u8]) -> Mapped {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.barge");
        std::fs::write(&path, archive).unwrap();
        Mapped {
            file: std::fs::File::open(&path).unwrap(),
            bytes: archive.to_vec(),
            _dir: dir,
        }
    }

    fn input(&self) -> Input<'_> {
        Input::Mapped(&self.bytes, self.file.as_fd(), 0)
    }
}

/// Lands `input` below `dest` on [`WORKERS`] threads with sync landers.
fn land(input: Input<'_>, dest: &Path, existing: Existing, cancel: Cancel) -> Result<LandSummary> {
    let setup = Setup::new(policy(existing), cancel);
    land_on(WORKERS, input, dest, setup)
}

/// Lands `input` below `dest` on `workers` threads with sync landers set up by `setup`.
fn land_on(workers: usize, input: Input<'_>, dest: &Path, setup: Setup) -> Result<LandSummary> {
    let root = OwnedFd::from(std::fs::File::open(dest).unwrap());
    let make = |fd, setup| Ok(SyncLander::new(fd, setup));
    land_parallel(
        root,
        input,
        decoding(),
        workers,
        setup,
        make,
        &Progress::default(),
    )
}

/// A directory for a crowding test, on tmpfs: into ext4 one crowd holds every creation (see
/// `threads::EXT4`), so no directory's crowd would be counted.
fn tmpfs_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").expect("a tmpfs at /dev/shm")
}

/// Sixteen landers on one crowded directory (tiny files, so batches are short and several
/// land in it at once, each keeping its place a while): never more than `PER_DIR` create
/// entries in it at once, and every file lands.
#[test]
fn at_most_per_dir_landers_create_in_one_directory_at_once() {
    use crate::threads::{hooks, PER_DIR};
    let archive = dirs_of_files(2, 1000);
    let mapped = Mapped::new(&archive);
    let _counting = hooks::COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    hooks::MOST.store(0, Relaxed);
    let dest = tmpfs_dir();
    let setup = Setup {
        dwell: std::time::Duration::from_micros(200),
        ..Setup::new(policy(Existing::Keep), Cancel::new())
    };
    let summary = land_on(16, mapped.input(), dest.path(), setup);
    assert_eq!(summary.unwrap().files, 2000);
    let most = hooks::MOST.load(Relaxed);
    assert!(
        (1..=PER_DIR).contains(&most),
        "{most} landers in one directory"
    );
}

/// Sixteen landers on six crowded directories, each too long for the landers to reach the
/// next one through the queue in archive order: those over a directory's cap land later
/// directories instead of waiting for a place, so four directories (16 / `PER_DIR`) are
/// landed at once, never more than `PER_DIR` landers creating in one.
#[test]
fn landers_over_a_directorys_cap_land_later_directories() {
    use crate::threads::{hooks, PER_DIR};
    let archive = dirs_of_files(6, 1000);
    let mapped = Mapped::new(&archive);
    let _counting = hooks::COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    hooks::MOST.store(0, Relaxed);
    hooks::MOST_CROWDED.store(0, Relaxed);
    let dest = tmpfs_dir();
    let setup = Setup {
        dwell: std::time::Duration::from_micros(200),
        ..Setup::new(policy(Existing::Keep), Cancel::new())
    };
    let summary = land_on(16, mapped.input(), dest.path(), setup);
    assert_eq!(summary.unwrap().files, 6 * 1000);
    let (most, dirs) = (hooks::MOST.load(Relaxed), hooks::MOST_CROWDED.load(Relaxed));
    assert!(
        (1..=PER_DIR).contains(&most),
        "{most} landers in one directory"
    );
    assert!(dirs >= 16 / PER_DIR, "{dirs} directories landed at once");
}

/// A stream of `bytes` as a [`ByteStream`].
fn stream(bytes: Vec<u8>) -> ByteStream<'static> {
    ByteStream::from_source(ReadSource(std::io::Cursor::new(bytes)))
}

/// Every name below `dir`, as paths relative to it, sorted.
fn paths(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(at) = todo.pop() {
        for entry in std::fs::read_dir(&at).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().display().to_string());
            if path.symlink_metadata().unwrap().is_dir() {
                todo.push(path);
            }
        }
    }
    found.sort();
    found
}

/// On several threads, from a mapping and frame by frame from a stream, raw and zstd: the
/// file whose extents several batches land is whole, and the hard link made at the end,
/// in another batch's directory, is to the file another batch landed.
#[test]
fn a_file_of_several_batches_and_a_hard_link_across_batches_land_whole() {
    for level in [None, Some(3)] {
        let archive = sparse_archive(level);
        let mapped = Mapped::new(&archive);
        let inputs = [mapped.input(), Input::Frames(stream(archive.clone()))];
        for (i, input) in inputs.into_iter().enumerate() {
            let dest = tempfile::tempdir().unwrap();
            let summary = land(input, dest.path(), Existing::Keep, Cancel::new());
            let summary = summary.unwrap_or_else(|e| panic!("{level:?} {i}: {e}"));
            let d = dest.path();
            assert_eq!(
                std::fs::read(d.join("big")).unwrap(),
                big(),
                "{level:?} {i}"
            );
            let ino = |p: &str| d.join(p).metadata().unwrap().ino();
            assert_eq!(ino("z/l"), ino("a/f"), "{level:?} {i}");
            assert_eq!((summary.files, summary.hard_links), (3, 1), "{level:?} {i}");
        }
    }
}

/// A file whose extents several batches land is removed when a later extent's data digest
/// is wrong: nothing of it stays under its name, and the error names it. The entries
/// before it stay.
#[test]
fn a_file_of_several_batches_with_a_bad_extent_is_removed() {
    let mut archive = sparse_archive(None);
    let wrong = extent(EXTENTS - 2);
    let at = (archive.windows(EXTENT)).position(|w| w == wrong).unwrap();
    archive[at] ^= 1;
    let mapped = Mapped::new(&archive);
    for (i, input) in [mapped.input(), Input::Frames(stream(archive.clone()))]
        .into_iter()
        .enumerate()
    {
        let dest = tempfile::tempdir().unwrap();
        let error = land(input, dest.path(), Existing::Keep, Cancel::new()).unwrap_err();
        let Error::Format { kind, path, .. } = &error else {
            panic!("{i}: {error}");
        };
        assert_eq!(
            (kind.code(), &path.0[..]),
            ("bad-digest", &b"big"[..]),
            "{i}"
        );
        assert_eq!(paths(dest.path()), ["a", "a/f"], "{i}");
    }
}

/// The error reported is the first in archive order (the cut end fails too), what comes
/// before it lands, and a hard link before it is made, one after it is not (though its
/// file landed).
#[test]
fn the_first_failure_in_archive_order_stops_what_follows_it() {
    let mut encoder = Encoder::extended(Vec::new());
    encoder.dir(b"a", 0o755).unwrap();
    let linked = Entry {
        link_id: Some(1),
        ..Entry::file(b"f", Meta::with_mode(0o644))
    };
    encoder.file_with(&linked, b"linked").unwrap();
    encoder.hard_link(b"before", 1).unwrap();
    for f in 0..40 {
        encoder
            .file(format!("f{f:02}").as_bytes(), 0o644, b"x")
            .unwrap();
    }
    encoder.pop().unwrap();
    encoder.dir(b"taken", 0o755).unwrap();
    encoder.file(b"in", 0o644, b"x").unwrap();
    encoder.pop().unwrap();
    encoder.hard_link(b"after", 1).unwrap();
    encoder.dir(b"later", 0o755).unwrap();
    for f in 0..40 {
        encoder
            .file(format!("f{f:02}").as_bytes(), 0o644, b"x")
            .unwrap();
    }
    let mut archive = encoder.finish().unwrap();
    // A cut archive: the decoder fails at its end too, after the landing failed.
    archive.truncate(archive.len() - 3);
    let mapped = Mapped::new(&archive);
    let dest = tempfile::tempdir().unwrap();
    std::fs::write(dest.path().join("taken"), b"a file").unwrap();
    let error = land(mapped.input(), dest.path(), Existing::Keep, Cancel::new()).unwrap_err();
    assert!(
        matches!(&error, Error::Exists { path, .. } if path.0 == b"taken"),
        "{error}"
    );
    let d = dest.path();
    assert_eq!(
        d.join("a/before").metadata().unwrap().ino(),
        d.join("a/f").metadata().unwrap().ino()
    );
    assert!(d.join("a/f39").exists());
    assert!(!d.join("after").exists());
}

/// Directories filled by several batches get their mode (one without owner write) and
/// time once every batch landed, a parent's after its child's.
#[test]
fn directories_get_their_modes_and_times_once_every_batch_landed() {
    let mut encoder = Encoder::extended(Vec::new());
    let timed = |mode, sec| Meta {
        mtime: Some(Timestamp { sec, nsec: 7 }),
        ..Meta::with_mode(mode)
    };
    encoder
        .dir_with(&Entry::dir(b"ro", timed(0o555, 1_000_000)))
        .unwrap();
    for f in 0..30 {
        encoder
            .file(format!("f{f:02}").as_bytes(), 0o644, b"x")
            .unwrap();
    }
    encoder
        .dir_with(&Entry::dir(b"inner", timed(0o500, 2_000_000)))
        .unwrap();
    for f in 0..30 {
        encoder
            .file(format!("f{f:02}").as_bytes(), 0o644, b"x")
            .unwrap();
    }
    let archive = encoder.finish().unwrap();
    let mapped = Mapped::new(&archive);
    let dest = tempfile::tempdir().unwrap();
    land(mapped.input(), dest.path(), Existing::Keep, Cancel::new()).unwrap();
    for (path, mode, sec) in [("ro", 0o555, 1_000_000), ("ro/inner", 0o500, 2_000_000)] {
        let meta = dest.path().join(path).metadata().unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{path}");
        assert_eq!((meta.mtime(), meta.mtime_nsec()), (sec, 7), "{path}");
    }
    assert_eq!(paths(&dest.path().join("ro/inner")).len(), 30);
    for path in ["ro", "ro/inner"] {
        let dir = dest.path().join(path);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// A stream longer than a segment, its messages cut by segment ends, with files larger
/// than half a segment (landed by the calling thread as it is read), lands whole, before
/// and after the helpers start.
#[test]
fn a_stream_of_several_segments_lands_whole() {
    let content =
        |seed: usize, len: usize| -> Vec<u8> { (0..len).map(|i| (i * 31 + seed) as u8).collect() };
    let sizes = [
        300_000, 300_000, 300_000, 1_500_000, 300_000, 10, 0, 700_000, 2_000_000, 300_000,
    ];
    let mut encoder = Encoder::new(Vec::new());
    for (i, size) in sizes.iter().enumerate() {
        encoder
            .file(format!("f{i}").as_bytes(), 0o644, &content(i, *size))
            .unwrap();
    }
    let archive = encoder.finish().unwrap();
    let dest = tempfile::tempdir().unwrap();
    let summary = land(
        Input::Stream(stream(archive)),
        dest.path(),
        Existing::Keep,
        Cancel::new(),
    );
    assert_eq!(summary.unwrap().files, sizes.len() as u64);
    for (i, size) in sizes.iter().enumerate() {
        let landed = std::fs::read(dest.path().join(format!("f{i}"))).unwrap();
        assert!(landed == content(i, *size), "f{i}");
    }
}

/// A reader of `bytes` that cancels `cancel` once it has given `at` bytes.
struct CancelAt {
    bytes: std::io::Cursor<Vec<u8>>,
    cancel: Cancel,
    at: u64,
}

impl std::io::Read for CancelAt {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let most = buf.len().min(64 << 10);
        let n = self.bytes.read(&mut buf[..most])?;
        if self.bytes.position() >= self.at {
            self.cancel.cancel();
        }
        Ok(n)
    }
}

/// A landing cancelled while the calling thread writes a file larger than a segment stops
/// and removes that file: no file stays under its name with part of its content, and
/// nothing after it lands.
#[test]
fn a_cancelled_landing_leaves_no_partial_file() {
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let mut encoder = Encoder::new(Vec::new());
    encoder.file(b"a", 0o644, b"first").unwrap();
    encoder.file(b"big", 0o644, &big).unwrap();
    encoder.file(b"z", 0o644, b"last").unwrap();
    let archive = encoder.finish().unwrap();
    let cancel = Cancel::new();
    let reader = CancelAt {
        bytes: std::io::Cursor::new(archive),
        cancel: cancel.clone(),
        at: 2_000_000,
    };
    let input = ByteStream::from_source(ReadSource(reader));
    let dest = tempfile::tempdir().unwrap();
    let error = land(Input::Stream(input), dest.path(), Existing::Keep, cancel).unwrap_err();
    assert!(matches!(error, Error::Interrupted { signal: 0 }), "{error}");
    let left = paths(dest.path());
    assert!(!left.iter().any(|p| p == "big" || p == "z"), "{left:?}");
    for path in left {
        assert_eq!(
            std::fs::read(dest.path().join(&path)).unwrap(),
            b"first",
            "{path}"
        );
    }
}

/// A lander waiting for a shared file another batch creates gets it once created, and
/// gives up (instead of waiting for ever) once a failure before its extent stops landing;
/// only the last of its extents completes it, and only files created and not completed are
/// unfinished.
#[test]
fn a_shared_file_is_waited_for_until_created_or_a_failure_stops_landing() {
    let files = Arc::new(SharedFiles::default());
    let stop = Arc::new(AtomicU64::new(u64::MAX));
    // A waiter on a thread of its own, so that one that never returns fails the test (after
    // a minute: a guard against a hang, not a timing) instead of hanging it.
    let wait = |key| {
        let (files, stop, (sent, got)) = (files.clone(), stop.clone(), mpsc::channel());
        std::thread::spawn(move || sent.send(files.wait(key, 20, &stop).is_some()));
        move || got.recv_timeout(Duration::from_secs(60))
    };
    let dest = tempfile::tempdir().unwrap();
    let root = OwnedFd::from(std::fs::File::open(dest.path()).unwrap());
    let mut lander = SyncLander::new(root, Setup::new(policy(Existing::Keep), Cancel::new()));
    let entry = Entry::file(b"s", Meta::with_mode(0o644));
    let (file, _fd) = lander.create_shared(&entry, 10).unwrap().unwrap();
    let waited = wait(7);
    files.created(7, &Arc::new(file), &[], 2);
    assert_eq!(waited(), Ok(true), "created: the waiter gets it");
    let waited = wait(8);
    stop.fetch_min(15, Relaxed);
    files.wake();
    assert_eq!(
        waited(),
        Ok(false),
        "a failure before the extent ends the wait"
    );
    files.gone(9);
    assert_eq!(files.unfinished().len(), 1, "7 is open, 9 gone");
    assert!(!files.landed(7), "one of two extents");
    assert!(files.landed(7), "the last");
    assert!(files.unfinished().is_empty());
}

/// A segment is refilled after the bytes it keeps until it holds the message they start
/// (`wanted` bytes) and has new bytes: then, when `enough` says so, it stops before it is
/// full.
#[test]
fn a_segment_refills_until_the_kept_message_is_whole() {
    let bytes: Vec<u8> = (0..100u8).collect();
    // Seven bytes a read.
    struct Sevens<R>(R);
    impl<R: std::io::Read> std::io::Read for Sevens<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = buf.len().min(7);
            self.0.read(&mut buf[..n])
        }
    }
    let mut input =
        ByteStream::from_source(ReadSource(Sevens(std::io::Cursor::new(bytes.clone()))));
    let mut segment = Segment::holding(vec![0xff; 64], 0);
    segment.buf[..3].copy_from_slice(b"old");
    segment.refill(&mut input, 3, 0, 20, || true).unwrap();
    assert_eq!(&segment.bytes()[..3], b"old");
    assert_eq!(segment.len, 3 + 21, "three reads of seven, to at least 20");
    assert_eq!(&segment.bytes()[3..], &bytes[..21]);
    segment.refill(&mut input, 0, 21, 0, || false).unwrap();
    assert_eq!((segment.len, segment.eof), (64, false), "full");
    assert_eq!(segment.bytes(), &bytes[21..85]);
    segment.refill(&mut input, 0, 85, 0, || false).unwrap();
    assert_eq!((segment.bytes(), segment.eof), (&bytes[85..], true));
}
