use std::fs;
use std::io::Cursor;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use rustix::fs::{FileType, Mode, OFlags};

use super::*;
use crate::error::{Error, TreePath};
use crate::format::{decode_all, Event, Limits};
use crate::pack::{Format, Pack, PackSummary};
use crate::unpack::{Engine, Existing, Restore, Unpack};

fn open(path: &Path) -> OwnedFd {
    rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap()
}

fn list(path: &Path) -> Listing {
    let listing = Listing::of_dir(open(path), 4, false);
    assert_eq!(listing.unlisted(), 0);
    listing
}

/// Sets the modification time of `path` (not following it) to `sec`.123456789.
pub(crate) fn touch(path: &Path, sec: i64) {
    let time = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: 123_456_789,
    };
    let times = rustix::fs::Timestamps {
        last_access: time,
        last_modification: time,
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// A tree with files small and large, a symlink, hard links, an empty file, a fifo and
/// nested directories.
fn make_tree(root: &Path) {
    fs::create_dir_all(root.join("d/e/f")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
    for i in 0..40 {
        fs::write(root.join(format!("d/s{i}")), format!("small {i}")).unwrap();
    }
    fs::write(root.join("d/e/big"), vec![7u8; 300_000]).unwrap();
    fs::write(root.join("d/e/f/zero"), b"").unwrap();
    fs::write(root.join("top"), b"top").unwrap();
    fs::set_permissions(root.join("top"), fs::Permissions::from_mode(0o600)).unwrap();
    symlink("d/s1", root.join("link")).unwrap();
    fs::write(root.join("d/linked"), b"linked").unwrap();
    fs::hard_link(root.join("d/linked"), root.join("d/e/linked2")).unwrap();
    fs::hard_link(root.join("d/linked"), root.join("linked3")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        root.join("fifo").as_path(),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// The archive of `root`, leaving out what `listing` shows unchanged; `archive` packs
/// without io_uring (extended attributes are read from fds). A version 2 pack must leave
/// out the same.
fn pack(root: &Path, listing: &Listing, archive: bool) -> (Vec<u8>, PackSummary) {
    let packed = |format| {
        let mut out = Vec::new();
        let summary = Pack::new(open(root))
            .archive(archive)
            .unchanged(listing)
            .format(format)
            .to_writer(&mut out)
            .unwrap();
        (out, summary)
    };
    let (out, summary) = packed(Format::V1);
    let (v2, v2_summary) = packed(Format::V2);
    assert_eq!((sent(&v2), dirs_sent(&v2)), (sent(&out), dirs_sent(&out)));
    let bytes = summary.archive_bytes;
    assert_eq!(
        PackSummary {
            archive_bytes: bytes,
            ..v2_summary
        },
        summary
    );
    (out, summary)
}

/// The paths of the entries `archive` holds other than directories, with a mark of
/// their kind (`=` for a hard link).
fn sent(archive: &[u8]) -> Vec<String> {
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut sent = Vec::new();
    let mut add = |dirs: &[Vec<u8>], name: &[u8], mark: &str| {
        let path = TreePath::join(dirs.iter().map(|d| &d[..]), name);
        sent.push(format!("{mark}{path}"));
    };
    decode_all(archive, Limits::default(), |_, event| {
        match event {
            Event::Dir(entry) => dirs.push(entry.name.to_vec()),
            Event::Pop => drop(dirs.pop()),
            Event::File { entry, .. } | Event::SparseFile { entry, .. } => {
                add(&dirs, entry.name, "")
            }
            Event::Symlink { entry, .. } => add(&dirs, entry.name, "@"),
            Event::HardLink { entry, .. } => add(&dirs, entry.name, "="),
            Event::Special { entry, .. } => add(&dirs, entry.name, "|"),
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    sent.sort();
    sent
}

/// Lands `archive` into the existing directory `dest` with `engine`, replacing what is
/// there.
fn land(archive: Vec<u8>, dest: &Path, engine: Engine) -> Result<()> {
    let unpack = Unpack::new()
        .sandbox(false)
        .engine(engine)
        .restore(Restore::default().existing(Existing::Overwrite));
    let archive = crate::unpack::Archive::from_reader(Cursor::new(archive));
    let mut destination = unpack.prepare(dest, &archive)?;
    unpack
        .land(&archive, &mut destination, &crate::Progress::default())
        .map(drop)
}

/// Lists the differences between the trees `a` and `b` (scripts/compare-trees; the
/// archive has no record of its root, which keeps its own time).
fn differences(a: &Path, b: &Path) -> Vec<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/compare-trees");
    let out = Command::new(script)
        .args(["--max-lines", "1000", "--ignore-root-times"])
        .args([a, b])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .filter(|l| l.contains(": ") && !l.contains(" entries compared"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_listing_holds_files_and_symlinks_with_link_groups_and_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    make_tree(&root);
    let listing = list(&root);
    // 40 small, big, zero, top, link, linked x3, fifo.
    assert_eq!(listing.len(), 48);
    let top = listing.get(b"top").unwrap();
    assert_eq!(
        (top.kind, top.size, top.mode, top.group),
        (Kind::File, 3, 0o600, 0)
    );
    let link = listing.get(b"link").unwrap();
    assert_eq!((link.kind, link.size, link.mode), (Kind::Symlink, 4, 0));
    let group = listing.get(b"d/linked").unwrap().group;
    assert_ne!(group, 0);
    assert_eq!(listing.get(b"d/e/linked2").unwrap().group, group);
    assert_eq!(listing.get(b"linked3").unwrap().group, group);
    let fifo = listing.get(b"fifo").unwrap();
    assert_eq!(
        (fifo.kind, fifo.size, fifo.mode, fifo.links),
        (Kind::Fifo, 0, 0o644, 0)
    );
    assert!(listing.get(b"d").is_none());
    assert_eq!(listing.get(b"d/e/f/zero").unwrap().size, 0);

    let mut wire = Vec::new();
    listing.write_to(&mut wire).unwrap();
    let again = Listing::read_from(&wire[..], ListingLimits::default()).unwrap();
    assert_eq!(again, listing);
    // Nothing may follow the end record.
    let more = [&wire[..], b"next"].concat();
    let after = (
        wire.len() as u64,
        "4 bytes after the end record".to_string(),
    );
    assert_eq!(problem(&more, ListingLimits::default()), after);
    let empty = Listing::default();
    let mut wire = Vec::new();
    empty.write_to(&mut wire).unwrap();
    assert_eq!(wire.len(), 8 + 17);
    assert_eq!(
        Listing::read_from(&wire[..], ListingLimits::default()).unwrap(),
        empty
    );
}

/// A copy of the tree `root` at `copy`, landed from an archive (times to the
/// nanosecond, hard links as links).
fn copy_of(root: &Path, copy: &Path) {
    let (archive, _) = pack(root, &Listing::default(), false);
    land(archive, copy, Engine::Sync).unwrap();
    assert_eq!(differences(root, copy), Vec::<String>::new());
}

#[test]
fn a_pack_leaves_out_exactly_what_the_listing_shows_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
    make_tree(&root);
    copy_of(&root, &copy);
    for archive in [false, true] {
        let (packed, summary) = pack(&root, &list(&copy), archive);
        // The directories above the hard links (d, d/e); d/e/f and empty are left out
        // whole, and so is the fifo.
        assert_eq!(sent(&packed), Vec::<String>::new(), "archive: {archive}");
        assert_eq!((summary.unchanged, summary.files, summary.dirs), (48, 0, 2));
        assert_eq!(
            summary.unchanged_bytes,
            300_000 + 3 + 6 * 3 + 10 * 7 + 30 * 8
        );
    }

    // A size, a time, a mode, a file become a symlink, a symlink's target of another
    // length, a symlink's time and a fifo's mode.
    fs::write(root.join("d/s3"), b"longer than before").unwrap();
    touch(&root.join("d/s4"), 1_000_000);
    fs::set_permissions(root.join("d/s5"), fs::Permissions::from_mode(0o640)).unwrap();
    fs::remove_file(root.join("top")).unwrap();
    symlink("d", root.join("top")).unwrap();
    fs::remove_file(root.join("link")).unwrap();
    symlink("d/s10", root.join("link")).unwrap();
    symlink("d/s2", root.join("d/e/link")).unwrap();
    symlink("d/s2", copy.join("d/e/link")).unwrap();
    touch(&root.join("d/e/link"), 2_000_000);
    fs::set_permissions(root.join("fifo"), fs::Permissions::from_mode(0o600)).unwrap();
    for archive in [false, true] {
        let (packed, summary) = pack(&root, &list(&copy), archive);
        let expected = [
            "@d/e/link",
            "@link",
            "@top",
            "d/s3",
            "d/s4",
            "d/s5",
            "|fifo",
        ];
        assert_eq!(sent(&packed), expected, "archive: {archive}");
        assert_eq!(
            (summary.unchanged, summary.files, summary.symlinks),
            (42, 3, 3)
        );
    }
    let (packed, _) = pack(&root, &list(&copy), false);
    land(packed, &copy, Engine::Sync).unwrap();
    assert_eq!(differences(&root, &copy), Vec::<String>::new());
}

/// The directories `archive` holds, by path.
fn dirs_sent(archive: &[u8]) -> Vec<String> {
    let mut dirs: Vec<Vec<u8>> = Vec::new();
    let mut sent = Vec::new();
    decode_all(archive, Limits::default(), |_, event| {
        match event {
            Event::Dir(entry) => {
                let path = TreePath::join(dirs.iter().map(|d| &d[..]), entry.name);
                sent.push(path.to_string());
                dirs.push(entry.name.to_vec());
            }
            Event::Pop => drop(dirs.pop()),
            _ => {}
        }
        Ok(())
    })
    .unwrap();
    sent
}

#[test]
fn directories_as_listed_are_left_out_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
    for d in ["a/b/c", "a/x", "y", "z"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for f in ["a/b/c/f", "a/b/g", "a/x/h", "y/i", "z/j", "top"] {
        fs::write(root.join(f), f).unwrap();
    }
    symlink("../top", root.join("a/x/s")).unwrap();
    copy_of(&root, &copy);
    let pack_excluding = |pattern: &str| {
        let mut out = Vec::new();
        let exclude = crate::exclude::Exclude::new([pattern]).unwrap();
        let summary = Pack::new(open(&root))
            .exclude(exclude)
            .unchanged(&list(&copy))
            .to_writer(&mut out)
            .unwrap();
        (out, summary)
    };

    // As listed: not a directory is sent.
    let (packed, summary) = pack(&root, &list(&copy), false);
    assert_eq!((dirs_sent(&packed), sent(&packed)), (vec![], vec![]));
    let bytes = 7 + 5 + 5 + 3 + 3 + 3;
    assert_eq!((summary.unchanged, summary.unchanged_bytes), (7, bytes));
    assert_eq!((summary.dirs, summary.files), (0, 0));

    // A file deep down: the directories above it are sent, their others left out whole.
    fs::write(root.join("a/b/c/f"), "changed").unwrap();
    // A directory's own time, in the copy: it alone is sent.
    touch(&copy.join("y"), 7);
    // A directory the copy lacks, and what is in it.
    fs::create_dir(root.join("a/new")).unwrap();
    fs::write(root.join("a/new/n"), "n").unwrap();
    // A fifo the copy lacks and a second name of a file (decided in order).
    let fifo = root.join("a/x/fifo");
    rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::RWXU, 0).unwrap();
    fs::hard_link(root.join("z/j"), root.join("z/j2")).unwrap();
    let (packed, summary) = pack(&root, &list(&copy), false);
    let expected_dirs = ["a", "a/b", "a/b/c", "a/new", "a/x", "y", "z"];
    assert_eq!(dirs_sent(&packed), expected_dirs);
    let expected = ["=z/j2", "a/b/c/f", "a/new/n", "z/j", "|a/x/fifo"];
    assert_eq!(sent(&packed), expected);
    // a/b/g, a/x/h, a/x/s, y/i and top, each decided on its own.
    assert_eq!(summary.unchanged, 5);
    land(packed, &copy, Engine::Sync).unwrap();
    assert_eq!(differences(&root, &copy), Vec::<String>::new());

    // What is excluded does not count: y is left out whole (and a, its fifo as listed).
    fs::write(root.join("y/i"), "excluded change").unwrap();
    let (packed, _) = pack_excluding("i");
    assert_eq!(dirs_sent(&packed), ["z"]);
    let (packed, _) = pack_excluding("nothing");
    assert_eq!(dirs_sent(&packed), ["y", "z"]);
}

#[test]
fn hard_links_are_left_out_only_as_one_inode_linked_as_often() {
    let dir = tempfile::tempdir().unwrap();
    let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
    make_tree(&root);
    copy_of(&root, &copy);
    let linked = ["=d/linked", "=linked3", "d/e/linked2"];
    // The first name met is missing: it is sent whole, the others link to it.
    fs::remove_file(copy.join("d/e/linked2")).unwrap();
    let (packed, _) = pack(&root, &list(&copy), false);
    assert_eq!(sent(&packed), linked);
    land(packed, &copy, Engine::Sync).unwrap();
    assert_eq!(differences(&root, &copy), Vec::<String>::new());

    // A later name is missing: the names before it are linked once less there, so all
    // are sent again.
    fs::remove_file(copy.join("linked3")).unwrap();
    let (packed, _) = pack(&root, &list(&copy), true);
    assert_eq!(sent(&packed), linked);
    land(packed, &copy, Engine::Sync).unwrap();
    assert_eq!(differences(&root, &copy), Vec::<String>::new());

    // Linked as often, but not to each other: only the first is left out.
    for name in ["d/linked", "linked3"] {
        fs::remove_file(copy.join(name)).unwrap();
        fs::copy(root.join(name), copy.join(name)).unwrap();
        let meta = fs::metadata(root.join(name)).unwrap();
        let time = filetime(&meta);
        touch_exactly(&copy.join(name), time);
    }
    fs::hard_link(copy.join("d/linked"), copy.join("d/other")).unwrap();
    fs::hard_link(copy.join("linked3"), copy.join("other")).unwrap();
    fs::hard_link(copy.join("linked3"), copy.join("other2")).unwrap();
    // d/e/linked2 has 1 link now, d/linked 2, linked3 3: only linked3 is linked as
    // often, and it is met last, with its inode packed already.
    let (packed, summary) = pack(&root, &list(&copy), false);
    assert_eq!(sent(&packed), linked);
    assert_eq!(summary.unchanged, 45);
}

/// The modification time of `meta`.
fn filetime(meta: &fs::Metadata) -> (i64, i64) {
    use std::os::unix::fs::MetadataExt;
    (meta.mtime(), meta.mtime_nsec())
}

/// Sets the modification time of `path` to `time`.
fn touch_exactly(path: &Path, (sec, nsec): (i64, i64)) {
    let time = rustix::fs::Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = rustix::fs::Timestamps {
        last_access: time,
        last_modification: time,
    };
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// A listing in wire form: the header, then `body`.
fn wire(body: &[&[u8]]) -> Vec<u8> {
    [&HEADER[..]]
        .iter()
        .chain(body)
        .flat_map(|b| b.iter().copied())
        .collect()
}

/// An item's bytes.
fn item(kind: u8, name: &[u8], size: u64, nsec: u32, mode: u16, links: u32, group: u32) -> Vec<u8> {
    let mut b = vec![kind, name.len() as u8];
    b.extend_from_slice(name);
    b.extend_from_slice(&size.to_le_bytes());
    b.extend_from_slice(&5i64.to_le_bytes());
    b.extend_from_slice(&nsec.to_le_bytes());
    b.extend_from_slice(&mode.to_le_bytes());
    b.extend_from_slice(&links.to_le_bytes());
    b.extend_from_slice(&group.to_le_bytes());
    // Owner, extended attributes.
    b.extend_from_slice(&[0; 16]);
    b
}

/// A directory record's head (mode 0o755, time 5 s).
fn dir(path: &[u8], count: u32) -> Vec<u8> {
    dir_as(path, 0o755, 0, count)
}

/// A directory record's head with the mode `mode` and the time 5 s and `nsec` ns.
fn dir_as(path: &[u8], mode: u16, nsec: u32, count: u32) -> Vec<u8> {
    let mut b = vec![DIR];
    b.extend_from_slice(&(path.len() as u16).to_le_bytes());
    b.extend_from_slice(path);
    b.extend_from_slice(&mode.to_le_bytes());
    b.extend_from_slice(&5i64.to_le_bytes());
    b.extend_from_slice(&nsec.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&count.to_le_bytes());
    b
}

fn end(dirs: u64, entries: u64) -> Vec<u8> {
    let mut b = vec![END];
    b.extend_from_slice(&dirs.to_le_bytes());
    b.extend_from_slice(&entries.to_le_bytes());
    b
}

/// The problem and offset reading `bytes` with `limits` fails with.
fn problem(bytes: &[u8], limits: ListingLimits) -> (u64, String) {
    match Listing::read_from(bytes, limits) {
        Err(Error::Listing { offset, problem }) => (offset, problem),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_malformed_or_oversized_listing_is_refused_at_its_record() {
    let limits = ListingLimits::default();
    let file = |name: &[u8]| item(1, name, 3, 0, 0o644, 1, 0);
    let good = wire(&[
        &dir(b"a/b", 2),
        &file(b"x"),
        &item(2, b"l", 4, 7, 0, 0, 0),
        &end(1, 2),
    ]);
    let listing = Listing::read_from(&good[..], limits).unwrap();
    assert_eq!(
        listing.get(b"a/b/l").unwrap().mtime,
        Timestamp { sec: 5, nsec: 7 }
    );
    // Special files of each kind, a device with its number.
    let specials = wire(&[
        &dir(b"", 4),
        &item(3, b"p", 0, 0, 0o644, 0, 0),
        &item(4, b"c", 1 << 32 | 3, 0, 0o600, 0, 0),
        &item(5, b"b", 8 << 32, 0, 0o7660, 0, 0),
        &item(6, b"s", 0, 0, 0o755, 0, 0),
        &end(1, 4),
    ]);
    let listing = Listing::read_from(&specials[..], limits).unwrap();
    let found: Vec<_> = [&b"p"[..], b"c", b"b", b"s"]
        .iter()
        .map(|name| listing.get(name).map(|i| (i.kind, i.size, i.mode)))
        .collect();
    let expected = [
        (Kind::Fifo, 0, 0o644),
        (Kind::CharDevice, 1 << 32 | 3, 0o600),
        (Kind::BlockDevice, 8 << 32, 0o7660),
        (Kind::Socket, 0, 0o755),
    ];
    assert_eq!(found, expected.map(Some));
    let mut again = Vec::new();
    listing.write_to(&mut again).unwrap();
    assert_eq!(Listing::read_from(&again[..], limits).unwrap(), listing);
    for good in [&good, &specials] {
        // Every cut is an early end, at the offset of what is missing.
        for cut in 0..good.len() {
            let (at, what) = problem(&good[..cut], limits);
            assert_eq!(
                (at <= cut as u64, &what[..]),
                (true, "the listing ends early")
            );
        }
        // Any one byte changed: an error or a listing, never a panic.
        for i in 0..good.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[i] ^= flip;
                let _ = Listing::read_from(&bad[..], limits);
            }
        }
    }
    let d = dir(b"", 1);
    let ends = end(1, 1);
    let cases: Vec<(Vec<u8>, u64, &str)> = vec![
        (b"BARGE\x00\x01\x01".to_vec(), 0, "not an update listing"),
        (
            [&HEADER[..6], &[4, 0]].concat(),
            0,
            "listing version 4, where this barge reads version 5 (the two barges' versions \
             differ)",
        ),
        (
            [&HEADER[..7], &[2]].concat(),
            0,
            "unknown listing flags 0x02",
        ),
        (wire(&[&[7]]), 8, "unknown record tag 0x07"),
        (wire(&[&dir(b"a//b", 0)]), 8, "directory path a//b: "),
        (wire(&[&dir(b"/a", 0)]), 8, "directory path /a: "),
        (wire(&[&dir(b"a/..", 0)]), 8, "directory path a/..: "),
        (
            wire(&[&dir(b"a", 0), &dir(b"a", 0)]),
            38,
            "directory a listed twice",
        ),
        (
            wire(&[&dir_as(b"a", 0o10000, 0, 0)]),
            8,
            "directory a: mode 0o10000",
        ),
        (
            wire(&[&dir_as(b"a", 0o755, 1_000_000_000, 0)]),
            8,
            "directory a: nanoseconds",
        ),
        (wire(&[&d, &file(b"")]), 37, ": "),
        (wire(&[&d, &file(b"a/b")]), 37, "a/b: "),
        (wire(&[&d, &file(b"..")]), 37, "..: "),
        (wire(&[&d, &file(b"n\x00")]), 37, "n\\x00: "),
        (
            wire(&[&dir(b"", 2), &file(b"x"), &file(b"x")]),
            8,
            "a name listed twice",
        ),
        (
            wire(&[&d, &item(7, b"x", 0, 0, 0, 0, 0)]),
            37,
            "unknown entry kind 7",
        ),
        (
            wire(&[&d, &item(0, b"x", 0, 0, 0, 0, 0)]),
            37,
            "unknown entry kind 0",
        ),
        (
            wire(&[&d, &item(3, b"x", 1, 0, 0o644, 0, 0)]),
            37,
            "x: a fifo with a size or device number",
        ),
        (
            wire(&[&d, &item(6, b"x", 1 << 32, 0, 0o755, 0, 0)]),
            37,
            "x: a socket with a size or device number",
        ),
        (
            wire(&[&d, &item(4, b"x", 0, 0, 0o10000, 0, 0)]),
            37,
            "x: mode 0o10000",
        ),
        (
            wire(&[&d, &item(5, b"x", 0, 0, 0o600, 1, 0)]),
            37,
            "x: a block device with links, a link group or extended attributes",
        ),
        (
            wire(&[&d, &item(3, b"x", 0, 0, 0o600, 0, 2)]),
            37,
            "x: a fifo with links, a link group or extended attributes",
        ),
        (
            wire(&[&d, &item(1, b"x", 0, 1_000_000_000, 0, 1, 0)]),
            37,
            "x: nanoseconds",
        ),
        (
            wire(&[&d, &item(1, b"x", 0, 0, 0o10000, 1, 0)]),
            37,
            "x: mode 0o10000",
        ),
        (wire(&[&d, &item(1, b"x", 0, 0, 0, 0, 0)]), 37, "x: 0 links"),
        (
            wire(&[&d, &item(1, b"x", 0, 0, 0, 2, 0)]),
            37,
            "x: 2 links in link group 0",
        ),
        (
            wire(&[&d, &item(1, b"x", 0, 0, 0, 1, 4)]),
            37,
            "x: 1 links in link group 4",
        ),
        (
            wire(&[&d, &item(2, b"x", 0, 0, 0, 0, 0)]),
            37,
            "x: a symlink target of 0",
        ),
        (
            wire(&[&d, &item(2, b"x", 4096, 0, 0, 0, 0)]),
            37,
            "x: a symlink target of 4096",
        ),
        (
            wire(&[&d, &item(2, b"x", 1, 0, 0o777, 0, 0)]),
            37,
            "x: a symlink with a mode, links, a link group or extended attributes",
        ),
        (
            wire(&[&d, &file(b"x"), &end(1, 2)]),
            86,
            "the end record counts 1 directories and 2",
        ),
        (
            wire(&[&d, &file(b"x"), &end(2, 1)]),
            86,
            "the end record counts 2",
        ),
        (
            wire(&[&d, &file(b"x"), &ends, &ends]),
            103,
            "17 bytes after the end record",
        ),
    ];
    for (bytes, offset, what) in cases {
        match Listing::read_from(&bytes[..], limits) {
            Ok(_) => panic!("read where {what} was expected"),
            Err(Error::Listing {
                offset: at,
                problem,
            }) => {
                assert!(problem.contains(what), "{problem} lacks {what}");
                assert_eq!(at, offset, "{problem}");
            }
            Err(other) => panic!("{other}"),
        }
    }
    // Limits, checked before anything is held.
    let few = ListingLimits {
        max_entries: 1,
        ..limits
    };
    let (at, what) = problem(&good, few);
    assert_eq!((at, &what[..]), (8, "more than the limit of 1 entries"));
    let short = ListingLimits {
        max_path: 2,
        ..limits
    };
    let (at, what) = problem(&good, short);
    assert_eq!(
        (at, &what[..]),
        (8, "directory path of 3 bytes, more than the limit of 2")
    );
    let small = ListingLimits {
        max_bytes: 40,
        ..limits
    };
    let (at, what) = problem(&good, small);
    assert_eq!((at, &what[..]), (40, "longer than the limit of 40 bytes"));
    // A count of 4 billion with nothing after it: an early end, not 4 billion slots.
    let (_, what) = problem(
        &wire(&[&dir(b"", u32::MAX)]),
        ListingLimits {
            max_entries: u64::MAX,
            ..limits
        },
    );
    assert_eq!(what, "the listing ends early");
    let error = Listing::read_from(&wire(&[&[9]])[..], limits).unwrap_err();
    assert_eq!(
        error.to_string(),
        "update listing byte 8: unknown record tag 0x09"
    );
    assert_eq!(error.kind(), "listing");
}

#[test]
fn a_named_root_is_the_first_component_of_the_listing_paths() {
    let dir = tempfile::tempdir().unwrap();
    let (root, dest) = (dir.path().join("t"), dir.path().join("dest"));
    make_tree(&root);
    let named = || Pack::named(vec![(b"t".to_vec(), open(&root))]).unwrap();
    let mut archive = Vec::new();
    named().to_writer(&mut archive).unwrap();
    land(archive, &dest, Engine::Sync).unwrap();
    let listing = list(&dest);
    assert!(listing.get(b"t/d/e/big").is_some());
    let mut archive = Vec::new();
    let summary = named().unchanged(&listing).to_writer(&mut archive).unwrap();
    assert_eq!((summary.unchanged, summary.files), (48, 0));
    assert_eq!(sent(&archive), Vec::<String>::new());
}

/// A landing cut off anywhere leaves no file that looks complete and is not: an update
/// from the listing of what it left makes the copy equal, whatever the engine.
#[test]
fn after_a_cut_off_landing_an_update_makes_the_copy_equal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    make_tree(&root);
    // Over 4 MiB, so that a stream is landed by several threads.
    fs::write(root.join("d/e/huge"), vec![9u8; 5 << 20]).unwrap();
    for i in 0..300 {
        fs::write(root.join(format!("d/e/f/m{i}")), vec![i as u8; 20_000]).unwrap();
    }
    let (whole, _) = pack(&root, &Listing::default(), false);
    let engines = [Engine::Sync, Engine::Threads, Engine::Uring];
    for (k, cut) in [100, 3_000, 200_000, 4 << 20, 9 << 20, whole.len() - 5]
        .into_iter()
        .enumerate()
    {
        let engine = engines[k % engines.len()];
        let copy = dir.path().join(format!("copy{k}"));
        fs::create_dir(&copy).unwrap();
        let cut_off = land(whole[..cut].to_vec(), &copy, engine);
        assert!(cut_off.is_err(), "{engine:?} at {cut}");
        let listing = list(&copy);
        let (update, summary) = pack(&root, &listing, false);
        assert_eq!(summary.unchanged, listing.len(), "{engine:?} at {cut}");
        land(update, &copy, engine).unwrap();
        assert_eq!(
            differences(&root, &copy),
            Vec::<String>::new(),
            "{engine:?} at {cut}"
        );
    }
}

/// What `send --delete` removes: below named roots only what their own trees lack (a
/// directory whole, once; a directory where the tree has a file), never DEST's other
/// top-level entries nor what is excluded, or below an excluded directory.
#[test]
fn what_the_trees_lack_is_found_below_their_roots_only() {
    let dir = tempfile::tempdir().unwrap();
    let (root, dest) = (dir.path().join("t"), dir.path().join("dest"));
    for tree in [&root, &dest.join("t")] {
        fs::create_dir_all(tree.join("d/sub")).unwrap();
        fs::create_dir_all(tree.join("skip")).unwrap();
        fs::write(tree.join("d/kept"), b"k").unwrap();
    }
    fs::create_dir_all(dest.join("other")).unwrap();
    fs::create_dir_all(dest.join("t/gone/deeper")).unwrap();
    fs::write(dest.join("t/gone/deeper/f"), b"f").unwrap();
    fs::write(dest.join("t/d/old"), b"o").unwrap();
    fs::write(dest.join("t/d/x.tmp"), b"x").unwrap();
    fs::write(dest.join("t/skip/below"), b"b").unwrap();
    fs::remove_dir(root.join("d/sub")).unwrap();
    fs::write(root.join("d/sub"), b"now a file").unwrap();
    let roots = vec![crate::walk::Root::tree(b"t".to_vec(), open(&root))];
    let exclude = Exclude::new(["*.tmp", "skip/"]).unwrap();
    let gone = list(&dest).missing(&roots, &exclude);
    let gone: Vec<&[u8]> = gone.iter().map(|p| &p[..]).collect();
    assert_eq!(gone, [&b"t/d/old"[..], b"t/d/sub", b"t/gone"]);
}

/// An extended attribute changed alone in the copy: a pack that sends them (`archive`)
/// sends the file again, and the directories above it; one that does not leaves it out.
#[test]
fn an_xattr_changed_alone_is_a_change_where_the_pack_sends_them() {
    let dir = tempfile::tempdir().unwrap();
    let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
    make_tree(&root);
    copy_of(&root, &copy);
    let set = |path: &Path, value: &[u8]| {
        rustix::fs::lsetxattr(path, "user.tag", value, rustix::fs::XattrFlags::empty()).unwrap()
    };
    set(&root.join("d/e/f/zero"), b"one");
    set(&copy.join("d/e/f/zero"), b"two");
    let none = Vec::<String>::new();
    let (packed, _) = pack(&root, &list(&copy), false);
    assert_eq!(sent(&packed), none);
    let (packed, _) = pack(&root, &list(&copy), true);
    assert_eq!(sent(&packed), ["d/e/f/zero"]);
    set(&copy.join("d/e/f/zero"), b"one");
    let (packed, _) = pack(&root, &list(&copy), true);
    assert_eq!(sent(&packed), none);
}
