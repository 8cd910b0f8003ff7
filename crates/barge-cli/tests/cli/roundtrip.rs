//! pack → unpack round trips on generated trees, through a file (mmap), captured stdout fed
//! to stdin, and a real `pack -o - | unpack -` pipe; the trees must compare equal byte for
//! byte and mode for mode.

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;

/// A tree with every awkward thing a name, a mode or a shape can be.
fn awkward_tree(root: &Path) {
    fs::create_dir(root.join("empty-dir")).unwrap();
    file(&root.join("empty-file"), b"", 0o644);
    file(&root.join("hello"), b"hello\n", 0o644);
    // 200 levels of nesting, a file at the bottom.
    let mut deep = root.join("deep");
    for _ in 0..200 {
        deep.push("d");
    }
    fs::create_dir_all(&deep).unwrap();
    file(&deep.join("bottom"), b"at the bottom", 0o644);
    // 255-byte names, ASCII and multi-byte UTF-8.
    file(&root.join("n".repeat(255)), b"long", 0o644);
    let utf8 = format!("{}x", "é".repeat(127));
    assert_eq!(utf8.len(), 255);
    fs::create_dir(root.join(&utf8)).unwrap();
    file(&root.join(&utf8).join("inside"), b"i", 0o644);
    // Non-UTF-8, newline and control-character names.
    for raw in [
        &b"\xff\xfe"[..],
        b"caf\xe9",
        b"new\nline",
        b"\x01\x02\x1f\x7f",
        b"tab\there",
        b" leading space",
        b"-dash",
        b"back\\slash",
        b"..dots..",
    ] {
        file(&root.join(name(raw)), raw, 0o644);
    }
    fs::create_dir(root.join(name(b"dir\xc3("))).unwrap();
    file(
        &root.join(name(b"dir\xc3(")).join(name(b"\x80")),
        b"x",
        0o644,
    );
    // Modes: executable, private, read-only dir with content, sticky (setuid and setgid
    // need recorded owners: setid.rs).
    file(&root.join("exec"), b"#!/bin/sh\n", 0o755);
    file(&root.join("private-file"), b"p", 0o600);
    file(&root.join("sticky"), b"s", 0o1755);
    fs::create_dir(root.join("private-dir")).unwrap();
    file(&root.join("private-dir/key"), b"k", 0o644);
    fs::set_permissions(root.join("private-dir"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::create_dir(root.join("read-only-dir")).unwrap();
    file(&root.join("read-only-dir/ro"), b"r", 0o644);
    fs::create_dir(root.join("read-only-dir/sub")).unwrap();
    fs::set_permissions(
        root.join("read-only-dir"),
        fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    // Data larger than one read buffer (1 MiB) and than the inline limit (64 KiB).
    let big: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    file(&root.join("big"), &big, 0o644);
}

/// `pack -o FILE`, `pack -o -` and `pack | unpack` of `src`; each copy must equal `src`.
fn round_trip_all_ways(src: &Path, work: &Path) {
    // `barge unpack` sets the umask aside.
    let mask = 0;
    let archive = work.join("a.barge");
    pack_to(src, &archive);
    let packed = fs::read(&archive).unwrap();

    // Archive file: mapped input; with and without the sandbox, with each engine.
    for (dest, extra) in [
        ("by-file", &[][..]),
        ("by-file-no-sandbox", &["--no-sandbox"][..]),
        ("by-file-sync", &["--engine", "sync"][..]),
        ("by-file-threads", &["--engine", "threads"][..]),
    ] {
        let dest = work.join(dest);
        let mut cmd = barge(["unpack"]);
        cmd.args(extra).arg(&archive).arg(&dest);
        run_ok(&mut cmd, None);
        assert_same_tree(src, &dest, mask);
    }

    // `pack -o -` to captured stdout: same bytes (deterministic); fed to `unpack -` on stdin.
    let out = pack_to(src, "-");
    assert!(out == packed, "pack to stdout differs from pack to a file");
    let dest = work.join("by-stdin");
    run_ok(
        &mut barge(["unpack".as_ref(), "-".as_ref(), dest.as_os_str()]),
        Some(&out),
    );
    assert_same_tree(src, &dest, mask);

    // A real pipe between the two processes, archive never stored.
    let dest = work.join("by-pipe");
    pipe_pack_unpack(src, &dest, TIMEOUT);
    assert_same_tree(src, &dest, mask);

    // Packing the copy gives the same archive: nothing was lost or reordered.
    let again = pack_to(&dest, "-");
    assert!(again == packed, "re-packing the copy gives another archive");
}

/// Starts `barge pack SRC -o -` with stdout and stderr piped.
fn spawn_pack(src: &Path) -> std::process::Child {
    barge([
        "pack".as_ref(),
        src.as_os_str(),
        "-o".as_ref(),
        "-".as_ref(),
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap()
}

/// Runs `barge pack SRC -o - | barge unpack - DEST` with a real pipe, within `timeout`.
fn pipe_pack_unpack(src: &Path, dest: &Path, timeout: Duration) {
    let mut pack = spawn_pack(src);
    let pipe = pack.stdout.take().unwrap();
    let unpack = barge(["unpack".as_ref(), "-".as_ref(), dest.as_os_str()])
        .stdin(pipe)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let unpacked = wait_output(unpack, timeout, "unpack from pipe");
    let packed = wait_output(pack, timeout, "pack to pipe");
    for (what, out) in [("pack", packed), ("unpack", unpacked)] {
        assert!(
            out.status.success(),
            "{what} in a pipe failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn awkward_names_modes_and_shapes_round_trip_every_way() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    awkward_tree(&src);
    round_trip_all_ways(&src, work.path());
}

#[test]
fn ten_thousand_entries_round_trip_and_list_counts_them() {
    let work = tempdir();
    let src = work.path().join("src");
    for d in 0..100 {
        let dir = src.join(format!("dir{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..100 {
            fs::write(dir.join(format!("f{f:03}")), format!("{d}/{f}\n")).unwrap();
        }
    }
    round_trip_all_ways(&src, work.path());
    let listed = run_ok(
        &mut barge([
            "list".as_ref(),
            "--json".as_ref(),
            work.path().join("a.barge").as_os_str(),
        ]),
        None,
    );
    let lines = String::from_utf8(listed.stdout).unwrap();
    assert_eq!(lines.lines().count(), 10_100);
    assert_eq!(
        lines
            .lines()
            .filter(|l| l.contains(r#""kind":"dir""#))
            .count(),
        100
    );
}

#[test]
fn modes_land_exactly_unless_asked_and_set_id_bits_never_without_an_owner() {
    let work = tempdir();
    let archive = Archive::header()
        .raw(&[barge::format::TAG_PERM, 0xff, 0x01]) // 0o777
        .file(b"all", b"a")
        .raw(&[barge::format::TAG_PERM, 0xed, 0x0f]) // 0o7755: setuid, setgid, sticky
        .dir(b"special")
        .pop()
        .raw(&[barge::format::TAG_PERM, 0xed, 0x0d]) // 0o6755: setuid, setgid
        .file(b"setid", b"s")
        .end(3);
    fs::write(work.path().join("a.barge"), &archive).unwrap();
    // No owner is recorded, so no set-id bit lands, whoever asks (setid.rs has the rest).
    // (shell umask, options, as nobody, modes of all, special, setid)
    let mut cases = vec![
        ("077", &[][..], false, [0o777, 0o1755, 0o755]),
        (
            "077",
            &["--no-same-permissions"][..],
            false,
            [0o700, 0o1700, 0o700],
        ),
        ("077", &["--setid"][..], false, [0o777, 0o1755, 0o755]),
    ];
    if is_root() {
        cases.push(("000", &[][..], true, [0o777, 0o1755, 0o755]));
        cases.push(("000", &["--setid"][..], true, [0o777, 0o1755, 0o755]));
    }
    for (i, (mask, options, nobody, modes)) in cases.into_iter().enumerate() {
        let dest = work.path().join(format!("{i}"));
        if nobody {
            fs::create_dir(&dest).unwrap();
            std::os::unix::fs::chown(&dest, Some(NOBODY), Some(NOBODY)).unwrap();
        }
        let script = format!("umask {mask} && exec \"$0\" unpack \"$@\"");
        let mut cmd = if nobody {
            let mut cmd = as_nobody();
            cmd.arg("sh");
            cmd
        } else {
            std::process::Command::new("sh")
        };
        cmd.args(["-c", &script]).arg(bin()).args(options);
        let out = run_ok(cmd.arg(work.path().join("a.barge")).arg(&dest), None);
        let mode = |n| {
            fs::symlink_metadata(dest.join(n))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        let what = format!("umask {mask} {options:?} nobody {nobody}");
        let got = [mode("all"), mode("special"), mode("setid")];
        assert_eq!(got, modes, "{what}");
        let warned =
            String::from_utf8_lossy(&out.stderr).contains("2 setuid/setgid bits not restored");
        assert!(warned, "{what}: {out:?}");
    }
}

/// Size of the FILE64 test file: exactly 2^32 bytes.
const FOUR_GIB: u64 = 1 << 32;

#[test]
fn file_of_exactly_4_gib_goes_through_as_file64() {
    let _big = one_big_writer();
    let work = roomy_tempdir(FOUR_GIB);
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let big = src.join("big");
    // Sparse: costs no memory; marks at the start, around 2^32 - 1 MiB and at the last byte.
    let f = fs::File::create(&big).unwrap();
    f.set_len(FOUR_GIB).unwrap();
    for (at, mark) in [
        (0, &b"first"[..]),
        (FOUR_GIB - (1 << 20) - 3, b"mid"),
        (FOUR_GIB - 1, b"!"),
    ] {
        f.write_all_at(mark, at).unwrap();
    }
    drop(f);

    // The archive starts with a FILE64 (tag 0x04) for "big" with size 2^32, after its TIME
    // record (tag 0x06, 12 bytes), and `list` reports the size; the stream is read by
    // `list` without being stored.
    let mut pack = spawn_pack(&src);
    let mut stream = pack.stdout.take().unwrap();
    let mut head = [0u8; 34];
    stream.read_exact(&mut head).unwrap();
    assert_eq!(&head[..8], &barge::format::HEADER_EXTENDED);
    assert_eq!(head[8], barge::format::TAG_TIME);
    assert_eq!(&head[21..26], b"\x04big\0", "not a FILE64 message");
    assert_eq!(
        u64::from_le_bytes(head[26..34].try_into().unwrap()),
        FOUR_GIB
    );
    let mut list = barge(["list", "--json", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut to_list = list.stdin.take().unwrap();
    to_list.write_all(&head).unwrap();
    std::io::copy(&mut stream, &mut to_list).unwrap();
    drop(to_list);
    assert!(pack.wait().unwrap().success());
    let listed = wait_output(list, 5 * TIMEOUT, "list of the 4 GiB archive");
    assert!(listed.status.success());
    let line: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(
        (&line["kind"], &line["path"], &line["size"]),
        (&"file".into(), &"big".into(), &FOUR_GIB.into()),
        "{line}"
    );

    // pack | unpack, then a streaming comparison; the copy is deleted right away.
    let dest = work.path().join("dest");
    // Slow disks get longer: 4 GiB may have to be written to one.
    pipe_pack_unpack(&src, &dest, 5 * TIMEOUT);
    let copy = dest.join("big");
    assert_eq!(fs::metadata(&copy).unwrap().len(), FOUR_GIB);
    let same = same_content(&big, &copy);
    fs::remove_file(&copy).unwrap();
    assert!(same, "the 4 GiB copy differs");
}

#[test]
fn tree_comparison_notices_every_kind_of_difference() {
    let work = tempdir();
    let (a, b) = (work.path().join("a"), work.path().join("b"));
    let build = |root: &Path| {
        fs::create_dir_all(root.join("d")).unwrap();
        file(&root.join("d/f"), b"data", 0o644);
        file(&root.join(name(b"\xff")), b"", 0o755);
    };
    build(&a);
    type Change = fn(&Path);
    let differences: [(&str, Change); 5] = [
        ("content", |b| fs::write(b.join("d/f"), b"datA").unwrap()),
        ("mode", |b| file(&b.join("d/f"), b"data", 0o600)),
        ("extra entry", |b| fs::create_dir(b.join("extra")).unwrap()),
        ("name bytes", |b| {
            fs::rename(b.join(name(b"\xff")), b.join(name(b"\xfe"))).unwrap()
        }),
        ("kind", |b| {
            fs::remove_file(b.join("d/f")).unwrap();
            fs::create_dir(b.join("d/f")).unwrap();
        }),
    ];
    for (what, change) in differences {
        let _ = fs::remove_dir_all(&b);
        build(&b);
        assert_same_tree(&a, &b, umask());
        change(&b);
        let caught = std::panic::catch_unwind(|| assert_same_tree(&a, &b, umask()));
        assert!(caught.is_err(), "a difference in {what} went unnoticed");
    }
}
