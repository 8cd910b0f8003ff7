//! Version 2 archives through every engine, from a file (mapped) and from a reader
//! (streamed): every valid vector lands alike and every invalid one fails with its code at
//! its offset; an archive of many small segments (extents and hard links across them, zstd
//! or raw) lands on the threaded engine as on one thread, and so does a selection; a bad
//! digest in a later segment names its entry and leaves no file of it, a segment that does
//! not start where the one before ended fails as on one thread, a zstd bomb stops at
//! `max_bytes` before it is written, a cancelled unpack leaves no partial file, and owner
//! names give owners the ids they have here.

mod support;

use std::fs;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use barge::exclude::Exclude;
use barge::format::{digest, Limits, SegmentEncoder};
use barge::interrupt::Cancel;
use barge::tree::{Device, Entry, Kind, Meta, Owner, Timestamp, Xattrs};
use barge::unpack::{Archive, Engine, Existing, LandSummary, Restore, Unpack};
use barge::{Progress, Select};
use support::vector_files;

/// The engines that land an archive themselves.
const ENGINES: [Engine; 3] = [Engine::Sync, Engine::Threads, Engine::Uring];

/// How the archive reaches the unpack.
#[derive(Clone, Copy, Debug, PartialEq)]
enum From {
    /// A file, mapped.
    File,
    /// A reader giving it in uneven pieces, streamed.
    Reader,
}

/// A reader of `bytes` in pieces of 1 to 65,536 bytes, cancelling `cancel` (when given)
/// once `at` bytes were read.
struct Pieces {
    bytes: Vec<u8>,
    read: usize,
    calls: usize,
    cancel: Option<(Cancel, usize)>,
}

impl Read for Pieces {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some((cancel, at)) = &self.cancel {
            if self.read >= *at {
                cancel.cancel();
            }
        }
        self.calls += 1;
        let piece = 1 + self.calls * 7919 % 65_536;
        let n = buf.len().min(self.bytes.len() - self.read).min(piece);
        buf[..n].copy_from_slice(&self.bytes[self.read..self.read + n]);
        self.read += n;
        Ok(n)
    }
}

/// Lands `archive` into `dest` with `engine` as `operation` says (no sandbox), the archive
/// read from a file beside `dest` or from a reader.
fn land(
    operation: &Unpack,
    engine: Engine,
    from: From,
    archive: &[u8],
    dest: &Path,
) -> barge::Result<LandSummary> {
    let operation = operation.clone().sandbox(false).engine(engine);
    let opened = match from {
        From::File => {
            let file = dest.with_extension("barge");
            fs::write(&file, archive).unwrap();
            operation.open(Some(&file))?
        }
        From::Reader => Archive::from_reader(Pieces {
            bytes: archive.to_vec(),
            read: 0,
            calls: 0,
            cancel: None,
        }),
    };
    let mut destination = operation.prepare(dest, &opened)?;
    operation.land(&opened, &mut destination, &Progress::default())
}

/// Every way to land: each engine, from a file and from a reader.
fn ways() -> Vec<(Engine, From)> {
    let froms = [From::File, From::Reader];
    ENGINES
        .into_iter()
        .flat_map(|e| froms.map(|f| (e, f)))
        .collect()
}

/// What landed below `dest` (and `dest`'s own mode and time), one line per entry in path
/// order: kind, mode, time, owner, extended attributes, and a file's size, allocation (a
/// sparse one has fewer blocks than bytes), content digest and which earlier path it is a
/// hard link of; a symlink's target; a device's number.
/// Times from `since` on (those of entries without a recorded time) read as "now".
fn tree(dest: &Path, since: SystemTime) -> Vec<String> {
    let mut lines = Vec::new();
    let mut inodes = std::collections::HashMap::new();
    let since = since
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    describe(dest, dest, since, &mut inodes, &mut lines);
    lines
}

fn describe(
    root: &Path,
    path: &Path,
    since: i64,
    inodes: &mut std::collections::HashMap<u64, String>,
    lines: &mut Vec<String>,
) {
    let meta = fs::symlink_metadata(path).unwrap();
    let rel = path.strip_prefix(root).unwrap().display().to_string();
    let mut xattrs: Vec<_> = rustix_xattrs(path);
    xattrs.sort();
    let time = match meta.mtime() >= since {
        true => "now".to_string(),
        false => format!("{}.{}", meta.mtime(), meta.mtime_nsec()),
    };
    let common = format!(
        "{rel} {:o} {time} {}:{} {xattrs:?}",
        meta.mode(),
        meta.uid(),
        meta.gid()
    );
    let kind = meta.file_type();
    let line = if kind.is_dir() {
        format!("{common} dir")
    } else if kind.is_symlink() {
        let target = fs::read_link(path).unwrap();
        format!("{common} -> {}", target.display())
    } else if kind.is_file() {
        let data = fs::read(path).unwrap();
        let sparse = (meta.blocks() * 512) < meta.len();
        let first = inodes.entry(meta.ino()).or_insert_with(|| rel.clone());
        let size = meta.len();
        format!(
            "{common} file {size} sparse {sparse} {:x} first {first}",
            digest(&data)
        )
    } else {
        let kind = if kind.is_fifo() { "fifo" } else { "device" };
        format!("{common} {kind} {:x}", meta.rdev())
    };
    lines.push(line);
    if kind.is_dir() {
        let mut children: Vec<_> = fs::read_dir(path)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        children.sort();
        for child in children {
            describe(root, &child, since, inodes, lines);
        }
    }
}

/// The extended attributes of `path` (not followed), names and values.
fn rustix_xattrs(path: &Path) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut names = vec![0u8; 65_536];
    let n = rustix::fs::llistxattr(path, &mut names[..]).unwrap_or(0);
    names[..n]
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| {
            let mut value = vec![0u8; 65_536];
            let name_c = std::ffi::CString::new(name).unwrap();
            let len = rustix::fs::lgetxattr(path, name_c.as_c_str(), &mut value[..]).unwrap();
            (name.to_vec(), value[..len].to_vec())
        })
        .collect()
}

/// The stable code and offset of a landing's error (a file cut short is `truncated` at the
/// offset the lander names).
fn code_offset(error: &barge::Error) -> (&'static str, u64) {
    match error {
        barge::Error::Format { kind, offset, .. } => (kind.code(), *offset),
        barge::Error::Short { offset, .. } => ("truncated", *offset),
        other => panic!("not an archive error: {other}"),
    }
}

fn json_of(barge: &Path) -> serde_json::Value {
    let text = fs::read_to_string(barge.with_extension("json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn every_engine_lands_every_valid_vector_alike() {
    let (work, since) = (tempfile::tempdir().unwrap(), SystemTime::now());
    for (i, file) in vector_files("v2/valid").iter().enumerate() {
        let name = file.display().to_string();
        let archive = fs::read(file).unwrap();
        let entries = json_of(file)["entries"].as_array().unwrap().len();
        let mut reference = None;
        for (engine, from) in ways() {
            let dest = work.path().join(format!("{i}-{engine:?}-{from:?}"));
            let landed = land(&Unpack::new(), engine, from, &archive, &dest);
            landed.unwrap_or_else(|e| panic!("{name} {engine:?} {from:?}: {e}"));
            let landed = tree(&dest, since);
            let reference = reference.get_or_insert_with(|| landed.clone());
            assert_eq!(landed.len(), 1 + entries, "{name}: {landed:#?}");
            assert_eq!(&landed, reference, "{name}: {engine:?} {from:?}");
        }
    }
}

#[test]
fn every_engine_fails_every_invalid_vector_with_its_code_at_its_offset() {
    let work = tempfile::tempdir().unwrap();
    for (i, file) in vector_files("v2/invalid").iter().enumerate() {
        let name = file.display().to_string();
        let json = json_of(file);
        let want = (
            json["error"].as_str().unwrap(),
            json["offset"].as_u64().unwrap(),
        );
        let option = |key| json["options"][key].as_u64();
        let limits = Limits {
            max_entries: option("max_entries"),
            max_bytes: option("max_bytes"),
            max_space: option("max_space"),
            max_depth: option("max_depth").map_or(Limits::default().max_depth, |d| d as usize),
            ..Limits::default()
        };
        let archive = fs::read(file).unwrap();
        for (engine, from) in ways() {
            let dest = work.path().join(format!("{i}-{engine:?}-{from:?}"));
            let operation = Unpack::new().limits(limits);
            let error = land(&operation, engine, from, &archive, &dest).unwrap_err();
            assert_eq!(
                code_offset(&error),
                want,
                "{name}: {engine:?} {from:?}: {error}"
            );
            assert!(
                !dest.exists(),
                "{name}: {engine:?} {from:?}: a new DEST stayed"
            );
        }
    }
}

/// Content of `len` bytes, different for each `seed`.
fn content(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13 ^ seed) as u8)
        .collect()
}

fn timed(mode: u32, sec: i64) -> Meta {
    let mut meta = Meta::with_mode(mode);
    meta.mtime = Some(Timestamp { sec, nsec: 7 });
    meta
}

/// The entry number of `big` in [`segmented`], and of `a/f00`.
const BIG: u64 = 43;
const F00: u64 = 1;
/// `big`'s extents: `EXTENTS` of `EXTENT` bytes (large enough for the threaded engine to
/// copy them from a mapped archive's file), one every `STRIDE`.
const EXTENTS: u64 = 9;
const EXTENT: usize = 40_000;
const STRIDE: u64 = 100_000;
const BIG_SIZE: u64 = 1_000_000;

/// A version 2 archive of segments of about 2 KiB (zstd at `level` where it is smaller): a
/// root record; `a/` (0o750) holding 40 files (`f00` linked) and `sub/` (0o500, a file);
/// `big`, linked, of 1,000,000 bytes in 9 extents with holes between, each in its own
/// segment; `links/` holding hard links to `big` and `a/f00`; `z/` holding a fifo and a
/// symlink.
fn segmented(level: Option<i32>) -> Vec<u8> {
    let mut encoder = SegmentEncoder::new(Vec::new())
        .unwrap()
        .segment_target(2048);
    if let Some(level) = level {
        encoder = encoder.zstd(level);
    }
    encoder.root(timed(0o751, 1), Xattrs::default()).unwrap();
    encoder
        .dir_with(&Entry::dir(b"a", timed(0o750, 2)))
        .unwrap();
    for i in 0..40u32 {
        let name = format!("f{i:02}");
        let mut file = Entry::file(name.as_bytes(), timed(0o640, 3));
        file.link_id = (i == 0).then_some(F00);
        let data = content(i, (i as usize * 97) % 2000);
        encoder.file_with(&file, &data).unwrap();
    }
    encoder
        .dir_with(&Entry::dir(b"sub", timed(0o500, 4)))
        .unwrap();
    (encoder.file_with(&Entry::file(b"inner", timed(0o600, 5)), b"inner\n")).unwrap();
    encoder.pop().unwrap();
    encoder.pop().unwrap();
    let mut big = Entry::file(b"big", timed(0o644, 6));
    big.link_id = Some(BIG);
    encoder.ext_file(&big, BIG_SIZE, EXTENTS as u32).unwrap();
    for i in 0..EXTENTS {
        (encoder.extent(i * STRIDE, &content(100 + i as u32, EXTENT))).unwrap();
    }
    encoder
        .dir_with(&Entry::dir(b"links", timed(0o755, 8)))
        .unwrap();
    encoder.hard_link(b"to-big", BIG).unwrap();
    encoder.hard_link(b"to-f00", F00).unwrap();
    encoder.pop().unwrap();
    encoder
        .dir_with(&Entry::dir(b"z", timed(0o755, 9)))
        .unwrap();
    let fifo = Entry::new(b"p", Kind::Fifo, timed(0o600, 10));
    encoder.special(&fifo, Device::default()).unwrap();
    let symlink = Entry::new(b"s", Kind::Symlink, timed(0o777, 11));
    encoder.symlink(&symlink, b"../big").unwrap();
    encoder.finish().unwrap()
}

/// `big` as it must land.
fn big() -> Vec<u8> {
    let mut data = vec![0; BIG_SIZE as usize];
    for i in 0..EXTENTS {
        let at = (i * STRIDE) as usize;
        data[at..at + EXTENT].copy_from_slice(&content(100 + i as u32, EXTENT));
    }
    data
}

#[test]
fn a_many_segment_archive_lands_on_every_core_as_on_one() {
    let (work, since) = (tempfile::tempdir().unwrap(), SystemTime::now());
    for level in [None, Some(3)] {
        let archive = segmented(level);
        let segments = archive.windows(2).filter(|w| w[0] == 0x20 && w[1] <= 1);
        assert!(segments.count() > 20, "zstd {level:?}: few segments");
        let mut reference = None;
        for (engine, from) in ways() {
            let dest = work.path().join(format!("{level:?}-{engine:?}-{from:?}"));
            let what = format!("zstd {level:?} {engine:?} {from:?}");
            let landed = land(&Unpack::new(), engine, from, &archive, &dest);
            let summary = landed.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!((summary.files, summary.hard_links), (42, 2), "{what}");
            assert_eq!(fs::read(dest.join("big")).unwrap(), big(), "{what}");
            let big = fs::metadata(dest.join("big")).unwrap();
            assert_eq!(
                big.ino(),
                fs::metadata(dest.join("links/to-big")).unwrap().ino()
            );
            assert_eq!(big.mtime(), 6, "{what}: big gets its time once complete");
            let f00 = fs::metadata(dest.join("a/f00")).unwrap().ino();
            assert_eq!(f00, fs::metadata(dest.join("links/to-f00")).unwrap().ino());
            let landed = tree(&dest, since);
            assert_eq!(
                &landed,
                reference.get_or_insert_with(|| landed.clone()),
                "{what}"
            );
        }
    }
}

/// Existing files named `big` (whose extents lie in several batches) and `a/f05` are kept,
/// skipped or overwritten alike on every engine.
#[test]
fn existing_entries_are_kept_skipped_or_overwritten_alike() {
    let (work, since) = (tempfile::tempdir().unwrap(), SystemTime::now());
    let archive = segmented(None);
    let existing = |dest: &Path| {
        fs::create_dir_all(dest.join("a")).unwrap();
        fs::write(dest.join("big"), b"old big").unwrap();
        fs::write(dest.join("a/f05"), b"old f05").unwrap();
    };
    for existing_entries in [Existing::Skip, Existing::Overwrite] {
        let operation = Unpack::new().restore(Restore::default().existing(existing_entries));
        let mut reference = None;
        for (engine, from) in ways() {
            let what = format!("{existing_entries:?} {engine:?} {from:?}");
            let dest = work.path().join(what.replace(' ', "-"));
            existing(&dest);
            let landed = land(&operation, engine, from, &archive, &dest);
            let summary = landed.unwrap_or_else(|e| panic!("{what}: {e}"));
            let big = fs::read(dest.join("big")).unwrap();
            match existing_entries {
                Existing::Skip => {
                    assert_eq!((big, summary.kept), (b"old big".to_vec(), 2), "{what}");
                    assert!(!dest.join("links/to-big").exists(), "{what}");
                }
                _ => assert!(big == self::big(), "{what}"),
            }
            let landed = tree(&dest, since);
            assert_eq!(
                &landed,
                reference.get_or_insert_with(|| landed.clone()),
                "{what}"
            );
        }
    }
    let dest = work.path().join("keep");
    let operation = Unpack::new();
    let ways_existing = ways().into_iter().map(|(engine, from)| {
        let dest = dest.join(format!("{engine:?}-{from:?}"));
        existing(&dest);
        (engine, from, dest)
    });
    let mut reference: Option<String> = None;
    for (engine, from, dest) in ways_existing.collect::<Vec<_>>() {
        let error = land(&operation, engine, from, &archive, &dest)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("a/f05: already exists"),
            "{engine:?} {from:?} {error}"
        );
        assert_eq!(
            &error,
            reference.get_or_insert_with(|| error.clone()),
            "{engine:?} {from:?}"
        );
        assert_eq!(fs::read(dest.join("big")).unwrap(), b"old big");
    }
}

/// Lands `archive` in every way, each into a directory below `dest` that exists (so that
/// what a failure leaves stays), expecting each to fail as the sync engine does from a
/// file; each way's name, error and directory.
fn fails_alike(
    archive: &[u8],
    operation: &Unpack,
    dest: &Path,
) -> Vec<(String, barge::Error, PathBuf)> {
    let mut reference: Option<String> = None;
    let mut failed = Vec::new();
    for (engine, from) in ways() {
        let way = format!("{engine:?} {from:?}");
        let dest = dest.join(way.replace(' ', "-"));
        fs::create_dir_all(&dest).unwrap();
        let error = land(operation, engine, from, archive, &dest).unwrap_err();
        let message = error.to_string();
        assert_eq!(
            &message,
            reference.get_or_insert_with(|| message.clone()),
            "{way}"
        );
        failed.push((way, error, dest));
    }
    failed
}

#[test]
fn a_bad_digest_in_a_later_segment_names_its_entry_and_leaves_no_file() {
    let work = tempfile::tempdir().unwrap();
    let archive = segmented(None);
    for (what, needle, path) in [
        ("file", content(35, 35 * 97 % 2000), "a/f35"),
        ("extent", content(107, EXTENT), "big"),
    ] {
        let mut bad = archive.clone();
        let at = bad.windows(needle.len()).position(|w| w == needle).unwrap();
        bad[at + 100] ^= 1;
        for (way, error, dest) in fails_alike(&bad, &Unpack::new(), &work.path().join(what)) {
            let message = error.to_string();
            assert!(message.contains(path), "{what} {way}: {message}");
            assert_eq!(code_offset(&error).0, "bad-digest", "{message}");
            assert!(!dest.join(path).exists(), "{what} {way}: it stayed");
            assert!(
                dest.join("a/f34").exists(),
                "{what} {way}: what came before landed"
            );
        }
    }
}

/// The offset of the `START` of the `n`th frame of a raw archive.
fn start_of_frame(archive: &[u8], n: usize) -> usize {
    let mut at = 8;
    for _ in 0..n {
        let stored = u32::from_le_bytes(archive[at + 2..at + 6].try_into().unwrap());
        at += 18 + stored as usize;
    }
    assert_eq!(archive[at], 0x20, "a segment");
    at + 18
}

#[test]
fn a_segment_that_does_not_start_where_the_last_ended_fails_as_on_one_thread() {
    let work = tempfile::tempdir().unwrap();
    let archive = segmented(None);
    for (field, at) in [("first", 1), ("open", 9)] {
        let mut bad = archive.clone();
        let start = start_of_frame(&bad, 12);
        bad[start + at] ^= 1;
        let (_, error, _) =
            fails_alike(&bad, &Unpack::new(), &work.path().join(field)).swap_remove(0);
        assert_eq!(code_offset(&error), ("bad-start", start as u64), "{error}");
    }
}

#[test]
fn a_zstd_bomb_stops_at_max_bytes_before_it_is_written() {
    let work = tempfile::tempdir().unwrap();
    let mut encoder = SegmentEncoder::new(Vec::new()).unwrap().zstd(3);
    let zeros = vec![0u8; 4 << 20];
    for i in 0..8 {
        let name = format!("zeros{i}");
        let file = Entry::file(name.as_bytes(), Meta::with_mode(0o644));
        encoder.file_with(&file, &zeros).unwrap();
    }
    let bomb = encoder.finish().unwrap();
    assert!(bomb.len() < 64 << 10, "{} bytes", bomb.len());
    let limits = Limits {
        max_bytes: Some(6 << 20),
        ..Limits::default()
    };
    let operation = Unpack::new().limits(limits);
    for (way, error, dest) in fails_alike(&bomb, &operation, &work.path().join("bomb")) {
        assert_eq!(code_offset(&error).0, "too-many-bytes", "{error}");
        assert!(error.to_string().contains("zeros1"), "{error}");
        let names: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["zeros0"], "{way}");
    }
}

#[test]
fn a_cancelled_unpack_leaves_no_partial_file() {
    let work = tempfile::tempdir().unwrap();
    let mut encoder = SegmentEncoder::new(Vec::new())
        .unwrap()
        .segment_target(64 << 10);
    let chunks = 64;
    let big = Entry::file(b"big", Meta::with_mode(0o644));
    encoder
        .ext_file(&big, chunks * 65_536, chunks as u32)
        .unwrap();
    for i in 0..chunks {
        encoder
            .extent(i * 65_536, &content(i as u32, 65_536))
            .unwrap();
    }
    let last = Entry::file(b"last", Meta::with_mode(0o644));
    encoder.file_with(&last, b"last\n").unwrap();
    let archive = encoder.finish().unwrap();
    for engine in ENGINES {
        let cancel = Cancel::new();
        let reader = Pieces {
            bytes: archive.clone(),
            read: 0,
            calls: 0,
            cancel: Some((cancel.clone(), archive.len() / 2)),
        };
        let operation = (Unpack::new().sandbox(false).engine(engine)).cancel(cancel.clone());
        let opened = Archive::from_reader(reader);
        let dest = work.path().join(format!("{engine:?}"));
        fs::create_dir(&dest).unwrap();
        let mut destination = operation.prepare(&dest, &opened).unwrap();
        let error = operation.land(&opened, &mut destination, &Progress::default());
        let error = error.unwrap_err();
        assert!(
            matches!(error, barge::Error::Interrupted { signal: 0 }),
            "{engine:?}: {error}"
        );
        let left: Vec<_> = fs::read_dir(&dest).unwrap().collect();
        assert!(left.is_empty(), "{engine:?}: {left:?}");
    }
}

#[test]
fn a_selection_of_a_many_segment_archive_lands_alike() {
    let (work, since) = (tempfile::tempdir().unwrap(), SystemTime::now());
    let archive = segmented(Some(3));
    let exclude = Exclude::new(["f1*"]).unwrap();
    let select = Select::new(["a", "big"], exclude);
    let operation = Unpack::new().select(select);
    let mut reference = None;
    for (engine, from) in ways() {
        let dest = work.path().join(format!("{engine:?}-{from:?}"));
        let landed = land(&operation, engine, from, &archive, &dest);
        landed.unwrap_or_else(|e| panic!("{engine:?} {from:?}: {e}"));
        assert_eq!(fs::read(dest.join("big")).unwrap(), big());
        assert!(dest.join("a/f09").exists() && !dest.join("a/f10").exists());
        assert!(!dest.join("links").exists() && !dest.join("z").exists());
        let landed = tree(&dest, since);
        assert_eq!(
            &landed,
            reference.get_or_insert_with(|| landed.clone()),
            "{engine:?}"
        );
    }
    // One component stripped: `links/to-big` stays, and its file `big` does not.
    let stripped = Unpack::new().strip_components(1);
    fails_alike(&archive, &stripped, &work.path().join("stripped"));
}

/// A file named "root" (uid and gid 12345), one named by users that do not exist (4242,
/// 4343), and one without names (777, 778).
fn named_owners() -> Vec<u8> {
    let mut encoder = SegmentEncoder::new(Vec::new()).unwrap();
    let owned = |uid, gid| {
        let mut meta = Meta::with_mode(0o644);
        meta.owner = Some(Owner { uid, gid });
        meta
    };
    encoder.owner_names(b"root", b"root");
    (encoder.file_with(&Entry::file(b"named", owned(12345, 12345)), b"n")).unwrap();
    encoder.owner_names(b"nobody-barge-test", b"nogroup-barge-test");
    (encoder.file_with(&Entry::file(b"unknown", owned(4242, 4343)), b"u")).unwrap();
    (encoder.file_with(&Entry::file(b"unnamed", owned(777, 778)), b"-")).unwrap();
    encoder.finish().unwrap()
}

#[test]
#[ignore = "needs root: only root gives files owners"]
fn owner_names_give_the_ids_they_have_here_unless_numeric() {
    assert_eq!(rustix::process::geteuid().as_raw(), 0, "run as root");
    let work = tempfile::tempdir().unwrap();
    let archive = named_owners();
    for numeric in [false, true] {
        let operation = Unpack::new().restore(Restore::default().numeric_owner(numeric));
        for (engine, from) in ways() {
            let dest = work.path().join(format!("{numeric}-{engine:?}-{from:?}"));
            let landed = land(&operation, engine, from, &archive, &dest);
            landed.unwrap_or_else(|e| panic!("{engine:?} {from:?}: {e}"));
            let owner = |name: &str| {
                let meta = fs::metadata(dest.join(name)).unwrap();
                (meta.uid(), meta.gid())
            };
            let named = if numeric { (12345, 12345) } else { (0, 0) };
            assert_eq!(
                owner("named"),
                named,
                "numeric {numeric} {engine:?} {from:?}"
            );
            assert_eq!(owner("unknown"), (4242, 4343));
            assert_eq!(owner("unnamed"), (777, 778));
        }
    }
}
