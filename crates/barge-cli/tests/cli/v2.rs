//! Format version 2 through the CLI: the committed v2 vectors land alike on every engine
//! and list (mapped and from a pipe) or fail cleanly with their code and offset; an archive
//! of many small segments lands on every engine, sandboxed or not, as nobody, and through
//! the confined child; a corrupted byte is an error that leaves no file; the root record
//! gives a new DEST its mode and time; sparse files land sparse; a whole archive compressed
//! by zstd is read through it; a corrupted large file is the same error on every engine.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use barge::format::SegmentEncoder;
use barge::tree::{Entry, Meta};

use crate::common::*;
use crate::vectors::vectors;

/// Unpacks `archive` into `dest`, from the file or through stdin.
fn unpack(archive: &Path, dest: &Path, piped: bool) -> std::process::Output {
    crate::vectors::unpack(archive, dest, piped, &[])
}

/// Checks that `got` is what `first` holds, or makes it the first.
fn same_as_first<T: PartialEq + std::fmt::Debug>(first: &mut Option<T>, got: T, what: String) {
    match first {
        Some(first) => assert!(got == *first, "{what}: {got:?}"),
        None => *first = Some(got),
    }
}

/// Unpacks `archive` into `dest` with `engine`, from the file or through stdin, with
/// `extra` options.
fn unpack_with(
    engine: &str,
    archive: &Path,
    dest: &Path,
    piped: bool,
    extra: &[&str],
) -> std::process::Output {
    let mut args = vec!["--engine".to_string(), engine.to_string()];
    args.extend(extra.iter().map(|s| s.to_string()));
    crate::vectors::unpack(archive, dest, piped, &args)
}

#[test]
fn v2_vectors_land_alike_on_every_engine_and_list_or_fail_cleanly() {
    let work = tempdir();
    for (i, (archive, json)) in vectors("v2/valid").iter().enumerate() {
        let what = archive.display().to_string();
        let entries = json["entries"].as_array().unwrap();
        let listed = run_ok(&mut barge(["list".as_ref(), archive.as_os_str()]), None);
        let lines = String::from_utf8(listed.stdout).unwrap().lines().count();
        assert_eq!(lines, entries.len(), "{what}: list line count");
        let mut reference = None;
        for engine in engines() {
            for piped in [false, true] {
                let dest = work.path().join(format!("v{i}-{engine}-{piped}"));
                let out = unpack_with(&engine, archive, &dest, piped, &[]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(out.status.success(), "{what} {engine}: {stderr}");
                let landed = scan(&dest);
                assert_eq!(
                    landed.len(),
                    entries.len(),
                    "{what} {engine} (piped {piped})"
                );
                same_as_first(
                    &mut reference,
                    landed,
                    format!("{what} {engine} (piped {piped})"),
                );
            }
        }
    }
    for (i, (archive, json)) in vectors("v2/invalid").iter().enumerate() {
        let what = archive.display().to_string();
        let code = format!("[{}]", json["error"].as_str().unwrap());
        let at = format!("archive byte {}:", json["offset"]);
        for engine in engines() {
            for piped in [false, true] {
                let dest = work.path().join(format!("i{i}-{engine}-{piped}"));
                let out = unpack_with(&engine, archive, &dest, piped, &[]);
                let what = format!("{what} {engine} (piped {piped})");
                assert_clean_failure(&out, &[&at, &code], &what);
            }
        }
        let out = run(&mut barge(["list".as_ref(), archive.as_os_str()]), None);
        assert_clean_failure(&out, &[&at, &code], &format!("list {what}"));
    }
}

/// Four bytes flipped inside a file's content: `list` and `unpack` fail naming the file,
/// and the file is not left under its name, in a new DEST or an existing one.
#[test]
fn a_corrupted_file_is_an_error_that_leaves_nothing() {
    let work = tempdir();
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/v2/valid/file.barge");
    let mut bytes = fs::read(&good).unwrap();
    let at = bytes.windows(5).position(|w| w == b"Hello").unwrap();
    bytes[at + 1..at + 5].copy_from_slice(b"JUNK");
    let bad = work.path().join("bad.barge");
    fs::write(&bad, &bytes).unwrap();
    let out = run(&mut barge(["list".as_ref(), bad.as_os_str()]), None);
    assert_clean_failure(&out, &["hello.txt", "[bad-digest]"], "list");
    for piped in [false, true] {
        let new = work.path().join(format!("new-{piped}"));
        let out = unpack(&bad, &new, piped);
        assert_clean_failure(
            &out,
            &["hello.txt", "[bad-digest]"],
            "unpack into a new DEST",
        );
        assert!(!new.exists(), "a new DEST stays absent");
        let existing = work.path().join(format!("existing-{piped}"));
        fs::create_dir(&existing).unwrap();
        let out = unpack(&bad, &existing, piped);
        assert_clean_failure(&out, &["hello.txt", "[bad-digest]"], "unpack into DEST");
        assert_eq!(
            names_in(&existing),
            Vec::<String>::new(),
            "nothing left (piped {piped})"
        );
    }
}

/// `len` bytes that repeat nowhere (xorshift), different for each `seed`.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut bytes = Vec::with_capacity(len + 8);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// A byte flipped in the middle of a file large enough to be copied from the archive file
/// (200 KiB), or of a file cut into extents (9 MiB): every engine, from the file and from a
/// pipe, fails with the same `bad-digest` naming it, and leaves no DEST.
#[test]
fn a_corrupted_large_file_or_extent_is_the_same_error_on_every_engine() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    fs::write(src.join("d/small"), b"small").unwrap();
    let files = [("big", 200 << 10, 1), ("huge", 9 << 20, 2)];
    for (name, len, seed) in files {
        fs::write(src.join("d").join(name), noise(len, seed)).unwrap();
    }
    let good = pack_v2(&src, &work.path().join("good.barge"), &["--format", "2"]);
    for (name, len, seed) in files {
        let probe = &noise(len, seed)[len / 2..len / 2 + 64];
        let at = good.windows(64).position(|w| w == probe).unwrap() + 32;
        let mut bytes = good.clone();
        bytes[at] ^= 0x40;
        let bad = work.path().join(format!("{name}.barge"));
        fs::write(&bad, &bytes).unwrap();
        let path = format!("d/{name}");
        let mut error = None;
        for engine in engines() {
            for piped in [false, true] {
                let dest = work.path().join(format!("{name}-{engine}-{piped}"));
                let out = unpack_with(&engine, &bad, &dest, piped, &[]);
                let what = format!("{name}: {engine} (piped {piped})");
                assert_clean_failure(&out, &[&path, "[bad-digest]"], &what);
                assert!(!dest.exists(), "{what}: a new DEST stays absent");
                let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
                let at = stderr
                    .find("archive byte")
                    .map(|at| stderr[at..].to_owned());
                same_as_first(&mut error, at, what);
            }
        }
    }
}

/// The root record (PERM 0o700, TIME 2001-01-01) lands on a DEST the unpack creates, also
/// below missing parents (which get the usual mode), never on one that was there.
#[test]
fn the_root_record_gives_a_new_dest_its_mode_and_time() {
    let work = tempdir();
    let archive =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/vectors/v2/valid/nested.barge");
    for sandbox in [true, false] {
        let flag: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
        let dest = work.path().join(format!("new-{sandbox}"));
        let deep = work.path().join(format!("parent-{sandbox}/dest"));
        for dest in [&dest, &deep] {
            let mut cmd = barge(["unpack"]);
            run_ok(cmd.args(flag).arg(&archive).arg(dest), None);
            let meta = fs::metadata(dest).unwrap();
            assert_eq!(
                meta.permissions().mode() & 0o7777,
                0o700,
                "{}",
                dest.display()
            );
            assert_eq!(meta.mtime(), 978_307_200, "{}", dest.display());
            assert!(dest.join("a/b/c.txt").exists());
        }
        let parent = fs::metadata(deep.parent().unwrap()).unwrap();
        assert_eq!(
            parent.permissions().mode() & 0o777,
            0o777 & !umask(),
            "a new parent"
        );
        // Missing parents between the top one and DEST: as `mkdir -p` makes them.
        let deeper = work.path().join(format!("top-{sandbox}/middle/dest"));
        let mut cmd = barge(["unpack"]);
        run_ok(cmd.args(flag).arg(&archive).arg(&deeper), None);
        for dir in [
            deeper.parent().unwrap(),
            deeper.parent().unwrap().parent().unwrap(),
        ] {
            let mode = fs::metadata(dir).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o777 & !umask(), "{}", dir.display());
        }
        let existing = work.path().join(format!("existing-{sandbox}"));
        fs::create_dir(&existing).unwrap();
        fs::set_permissions(&existing, fs::Permissions::from_mode(0o751)).unwrap();
        set_mtime(&existing, 1_000_000_000, 0);
        let mut cmd = barge(["unpack"]);
        run_ok(cmd.args(flag).arg(&archive).arg(&existing), None);
        let meta = fs::metadata(&existing).unwrap();
        assert_eq!(
            meta.permissions().mode() & 0o7777,
            0o751,
            "an existing DEST keeps its mode"
        );
    }
}

/// A 200 MiB file with two data bytes lands sparse, from a file and from a pipe.
#[test]
fn a_sparse_file_lands_sparse() {
    let work = tempdir();
    let archive = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors/v2/valid/sparse-200mib.barge");
    assert!(
        fs::metadata(&archive).unwrap().len() < 64 << 10,
        "the archive is small"
    );
    for piped in [false, true] {
        let dest = work.path().join(format!("{piped}"));
        let out = unpack(&archive, &dest, piped);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let file = dest.join("sparse");
        let meta = fs::metadata(&file).unwrap();
        assert_eq!(meta.len(), 200 << 20);
        assert!(
            meta.blocks() * 512 < 1 << 20,
            "{} bytes allocated",
            meta.blocks() * 512
        );
        let data = fs::read(&file).unwrap();
        assert_eq!((data[0], data[(200 << 20) - 1]), (b'A', b'Z'));
        assert!(data[1..(200 << 20) - 1].iter().all(|&b| b == 0));
    }
}

/// `barge pack DIR | zstd > a.zst`: unpack and list read it through zstd, file or pipe.
#[test]
fn an_archive_compressed_whole_by_zstd_is_read_through_it() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    file(&src.join("d/f"), b"compressed whole\n", 0o640);
    let archive = pack_to(&src, "-");
    let compressed = zstd::encode_all(&archive[..], 3).unwrap();
    let zst = work.path().join("a.barge.zst");
    fs::write(&zst, compressed).unwrap();
    let listed = run_ok(&mut barge(["list".as_ref(), zst.as_os_str()]), None);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("d/f"));
    for piped in [false, true] {
        let dest = work.path().join(format!("out-{piped}"));
        let out = unpack(&zst, &dest, piped);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::read(dest.join("d/f")).unwrap(), b"compressed whole\n");
    }
}

/// A version 2 archive of segments of about 4 KiB (zstd where smaller, when `zstd`):
/// `a/` (0o500) holding 60 files, the first linked; `big`, linked, of 1 MiB in 12 extents
/// of 20,000 bytes with holes between, each extent in its own segment; `links/` holding
/// hard links to both.
fn segmented(zstd: bool) -> Vec<u8> {
    let mut encoder = SegmentEncoder::new(Vec::new())
        .unwrap()
        .segment_target(4096);
    if zstd {
        encoder = encoder.zstd(3);
    }
    let bytes = |seed: u64, len: usize| -> Vec<u8> {
        (0..len as u64)
            .map(|i| ((i * 2_654_435_761) >> 11 ^ seed) as u8)
            .collect()
    };
    encoder
        .dir_with(&Entry::dir(b"a", Meta::with_mode(0o500)))
        .unwrap();
    for i in 0..60u64 {
        let name = format!("f{i:02}");
        let mut file = Entry::file(name.as_bytes(), Meta::with_mode(0o640));
        file.link_id = (i == 0).then_some(1);
        encoder
            .file_with(&file, &bytes(i, (i as usize * 61) % 3000))
            .unwrap();
    }
    encoder.pop().unwrap();
    let mut big = Entry::file(b"big", Meta::with_mode(0o600));
    big.link_id = Some(61);
    encoder.ext_file(&big, 1 << 20, 12).unwrap();
    for i in 0..12 {
        encoder.extent(i * 80_000, &bytes(100 + i, 20_000)).unwrap();
    }
    encoder
        .dir_with(&Entry::dir(b"links", Meta::with_mode(0o755)))
        .unwrap();
    encoder.hard_link(b"to-big", 61).unwrap();
    encoder.hard_link(b"to-f00", 1).unwrap();
    encoder.finish().unwrap()
}

/// What [`scan`] sees of `dest`, with which entries are one file.
fn landed(dest: &Path) -> (BTreeMap<Vec<u8>, Node>, bool) {
    let ino = |path: &str| fs::metadata(dest.join(path)).unwrap().ino();
    let linked = ino("big") == ino("links/to-big") && ino("a/f00") == ino("links/to-f00");
    let tree = scan(dest);
    fs::set_permissions(dest.join("a"), fs::Permissions::from_mode(0o755)).unwrap();
    (tree, linked)
}

#[test]
fn a_many_segment_archive_lands_on_every_engine_sandboxed_or_not() {
    let work = tempdir();
    for zstd in [false, true] {
        let archive = work.path().join(format!("segmented-{zstd}.barge"));
        fs::write(&archive, segmented(zstd)).unwrap();
        let mut reference = None;
        for engine in engines() {
            for (piped, sandbox) in [(false, true), (false, false), (true, true), (true, false)] {
                let what = format!("zstd {zstd} {engine} piped {piped} sandbox {sandbox}");
                let dest = work.path().join(what.replace(' ', "-"));
                let extra: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
                let out = unpack_with(&engine, &archive, &dest, piped, extra);
                assert!(
                    out.status.success(),
                    "{what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let (tree, linked) = landed(&dest);
                assert!(linked, "{what}: the hard links");
                same_as_first(&mut reference, tree, what.clone());
            }
        }
    }
}

#[test]
#[ignore = "needs root to switch to uid 65534 (nobody) with setpriv"]
fn an_unprivileged_user_lands_a_many_segment_archive_on_every_core() {
    require_root();
    let setup = crate::sandbox::Setup::new();
    let archive = setup.work.path().join("segmented.barge");
    fs::write(&archive, segmented(true)).unwrap();
    fs::set_permissions(&archive, fs::Permissions::from_mode(0o644)).unwrap();
    let mut reference = None;
    for (name, piped) in [("file", false), ("pipe", true)] {
        let dest = setup.dest(name, NOBODY);
        let mut cmd = as_nobody();
        cmd.arg(&setup.bin).args(["unpack", "--engine", "threads"]);
        let out = match piped {
            true => run(cmd.arg("-").arg(&dest), Some(&fs::read(&archive).unwrap())),
            false => run(cmd.arg(&archive).arg(&dest), None),
        };
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(fs::metadata(dest.join("big")).unwrap().uid(), NOBODY);
        let (tree, linked) = landed(&dest);
        assert!(linked, "{name}: the hard links");
        same_as_first(&mut reference, tree, name.to_string());
    }
}

#[test]
fn a_many_segment_archive_lands_through_the_confined_child() {
    use barge::confine::ConfinedUnpack;
    use barge::unpack::Engine;
    let work = tempdir();
    let archive = segmented(true);
    let mut reference = None;
    for (name, engine) in Engine::ALL {
        let dest = work.path().join(format!("new/{name}"));
        let mut child = ConfinedUnpack::new(&dest)
            .executable(bin())
            .engine(engine)
            .allow_unconfined(true)
            .spawn()
            .unwrap();
        child.input().write_all(&archive).unwrap();
        let landed_summary = child.wait().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(landed_summary.summary.hard_links, 2, "{name}");
        let (tree, linked) = landed(&dest);
        assert!(linked, "{name}: the hard links");
        same_as_first(&mut reference, tree, name.to_string());
    }
}

/// As root, a file recorded as user and group "root" with ids 12345 lands as 0:0, one
/// recorded with names this system lacks keeps its ids; `--numeric-owner` keeps the ids.
#[test]
#[ignore = "needs root: only root gives files owners"]
fn owner_names_give_the_ids_they_have_here_unless_numeric_owner() {
    require_root();
    let work = tempdir();
    let mut encoder = SegmentEncoder::new(Vec::new()).unwrap();
    let owned = |uid, gid| {
        let mut meta = Meta::with_mode(0o644);
        meta.owner = Some(barge::tree::Owner { uid, gid });
        meta
    };
    encoder.owner_names(b"root", b"root");
    let named = Entry::file(b"named", owned(12345, 12345));
    encoder.file_with(&named, b"n").unwrap();
    encoder.owner_names(b"no-such-user-here", b"no-such-group-here");
    let unknown = Entry::file(b"unknown", owned(4242, 4343));
    encoder.file_with(&unknown, b"u").unwrap();
    let archive = work.path().join("owners.barge");
    fs::write(&archive, encoder.finish().unwrap()).unwrap();
    for (numeric, named) in [(false, (0, 0)), (true, (12345, 12345))] {
        let dest = work.path().join(format!("numeric-{numeric}"));
        let mut cmd = barge(["unpack"]);
        if numeric {
            cmd.arg("--numeric-owner");
        }
        run_ok(cmd.arg(&archive).arg(&dest), None);
        let owner = |name: &str| {
            let meta = fs::metadata(dest.join(name)).unwrap();
            (meta.uid(), meta.gid())
        };
        assert_eq!(owner("named"), named, "--numeric-owner {numeric}");
        assert_eq!(owner("unknown"), (4242, 4343), "--numeric-owner {numeric}");
    }
}

/// A tree for `pack --format 2`: many files in nested directories (several segments), one
/// of three chunks (its extents across segments), hard links in directories far apart, a
/// 200 MiB sparse file with two data bytes, an empty directory, a symlink and a fifo; the
/// root 0700 with a time in 2001.
fn v2_tree(src: &Path) {
    for dir in ["a/b", "a/empty", "m", "z"] {
        fs::create_dir_all(src.join(dir)).unwrap();
    }
    for i in 0..400usize {
        let dir = ["a", "a/b", "m", "z"][i % 4];
        let data: Vec<u8> = (0..i * 131).map(|b| (b * 7 + i) as u8).collect();
        file(
            &src.join(format!("{dir}/f{i:03}")),
            &data,
            0o640 | (i as u32 % 2),
        );
    }
    let big: Vec<u8> = (0..(9 << 20) + 77).map(|b| (b % 253) as u8).collect();
    file(&src.join("m/big"), &big, 0o644);
    fs::hard_link(src.join("a/f000"), src.join("z/link")).unwrap();
    fs::hard_link(src.join("m/big"), src.join("z/big-link")).unwrap();
    let sparse = fs::File::create(src.join("m/sparse")).unwrap();
    sparse.set_len(200 << 20).unwrap();
    rustix::io::pwrite(&sparse, b"A", 0).unwrap();
    rustix::io::pwrite(&sparse, b"Z", (200 << 20) - 1).unwrap();
    std::os::unix::fs::symlink("m/big", src.join("link")).unwrap();
    mkfifo(&src.join("z/fifo"));
    fs::set_permissions(src, fs::Permissions::from_mode(0o700)).unwrap();
    set_mtime(src, 978_307_200, 0);
}

/// Packs `src` with `options` into `archive`; the archive must decode on its own.
fn pack_v2(src: &Path, archive: &Path, options: &[&str]) -> Vec<u8> {
    run_ok(pack_cmd(src, archive).args(options), None);
    let bytes = fs::read(archive).unwrap();
    let decoded = barge::format::decode_all(&bytes, Default::default(), |_, _| Ok(()));
    decoded.unwrap_or_else(|e| panic!("{options:?}: {e}"));
    bytes
}

/// `pack --format 2` and `--zstd` land the tree they packed into a new DEST (from the file
/// and from a pipe): contents, modes, the root's mode and time, hard links, the sparse file
/// sparse. The archive is the same bytes on 1 and 4 threads and on stdout; zstd is smaller.
#[test]
fn a_version_2_pack_lands_the_tree_it_packed_whatever_the_threads() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    v2_tree(&src);
    let mut sizes = Vec::new();
    for (i, options) in [["--format", "2"], ["--zstd", "--format=2"]]
        .iter()
        .enumerate()
    {
        let one = pack_v2(
            &src,
            &work.path().join("one.barge"),
            &[&options[..], &["-j", "1"]].concat(),
        );
        let four = pack_v2(
            &src,
            &work.path().join("four.barge"),
            &[&options[..], &["-j", "4"]].concat(),
        );
        assert!(one == four, "{options:?}: 1 and 4 threads differ");
        let piped = run_ok(pack_cmd(&src, "-").args(options), None).stdout;
        assert!(piped == one, "{options:?}: stdout differs");
        let segments = one.windows(2).filter(|w| w[0] == 0x20 && w[1] <= 1).count();
        assert!(segments >= 3, "{options:?}: {segments} segments");
        sizes.push(one.len());
        for piped in [false, true] {
            let dest = work.path().join(format!("new-{i}-{piped}/dest"));
            let out = unpack(&work.path().join("one.barge"), &dest, piped);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert_same_tree(&src, &dest, 0);
            let root = fs::metadata(&dest).unwrap();
            assert_eq!(
                (root.permissions().mode() & 0o7777, root.mtime()),
                (0o700, 978_307_200)
            );
            let ino = |path: &str| fs::metadata(dest.join(path)).unwrap().ino();
            assert_eq!(ino("a/f000"), ino("z/link"));
            assert_eq!(ino("m/big"), ino("z/big-link"));
            let sparse = fs::metadata(dest.join("m/sparse")).unwrap();
            assert!(
                sparse.blocks() * 512 < 1 << 20,
                "{} blocks",
                sparse.blocks()
            );
        }
    }
    assert!(
        sizes[1] < sizes[0] / 2,
        "zstd {} against raw {}",
        sizes[1],
        sizes[0]
    );
}

/// A 200 MiB file with two data bytes packs to less than 64 KiB, and lands sparse.
#[test]
fn a_sparse_file_packs_small_and_lands_sparse() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let sparse = fs::File::create(src.join("sparse")).unwrap();
    sparse.set_len(200 << 20).unwrap();
    rustix::io::pwrite(&sparse, b"A", 0).unwrap();
    rustix::io::pwrite(&sparse, b"Z", (200 << 20) - 1).unwrap();
    let archive = work.path().join("a.barge");
    let bytes = pack_v2(&src, &archive, &["--format", "2"]);
    assert!(bytes.len() < 64 << 10, "{} bytes", bytes.len());
    let dest = work.path().join("dest");
    let out = unpack(&archive, &dest, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta = fs::metadata(dest.join("sparse")).unwrap();
    assert_eq!(meta.len(), 200 << 20);
    assert!(meta.blocks() * 512 < 1 << 20, "{} blocks", meta.blocks());
    assert!(same_content(&src.join("sparse"), &dest.join("sparse")));
}

/// `--zstd` needs version 2, and its level is 1 to 19: anything else is refused before a
/// byte is written.
#[test]
fn zstd_with_format_1_or_a_bad_level_is_refused() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let archive = work.path().join("a.barge");
    for (options, says) in [
        (
            &["--zstd", "--format", "1"][..],
            "--zstd compresses version 2 segments",
        ),
        (&["--zstd=0"][..], "--zstd"),
        (&["--zstd=20"][..], "--zstd"),
        (&["--format", "3"][..], "--format"),
    ] {
        let out = run(pack_cmd(&src, &archive).args(options), None);
        assert_clean_failure(&out, &[says], &format!("{options:?}"));
        assert!(!archive.exists(), "{options:?}");
    }
}

/// Files that change size between the plan and the read are stored at their planned size,
/// as tar does: /proc/sys files say 0 bytes and hold more (cut: "changed as we read it"),
/// sysfs attributes say 4096 and hold less (padded with zeros); each is named, the archive
/// is whole and the status is 2.
#[test]
fn a_file_that_changes_size_while_packed_is_stored_as_planned_with_a_warning() {
    let work = tempdir();
    for (dir, says) in [
        (
            "/proc/sys/kernel/random",
            "boot_id: file changed as we read it",
        ),
        (
            "/sys/kernel/mm/transparent_hugepage",
            "enabled: file shrank by",
        ),
    ] {
        let archive = work.path().join("out.barge");
        let out = run(pack_cmd(dir, &archive).args(["--format", "2"]), None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{dir}: {stderr}");
        assert!(stderr.contains(says), "{dir}: {stderr}");
        let bytes = fs::read(&archive).unwrap();
        barge::format::decode_all(&bytes, Default::default(), |_, _| Ok(())).unwrap();
    }
}
