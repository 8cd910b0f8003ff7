//! `barge verify A`: an archive checked whole, nothing written (a corrupted byte is exit 1
//! naming the entry; version 1 is checked for structure, with a warning that it holds no
//! digests); `barge verify A DIR`: DIR compared with the archive as `tar -d` does, one line
//! per path that differs and what differs, exit 1 when any does, from a file or a pipe,
//! never following a symlink in DIR.

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Output;

use crate::common::*;

/// A tree with each kind verify compares: files (one of 3 MiB), a directory, a symlink, a
/// hard link, a fifo.
fn tree(root: &Path) {
    fs::create_dir_all(root.join("d/e")).unwrap();
    file(&root.join("d/f"), b"data\n", 0o640);
    let big: Vec<u8> = (0..3u32 << 20).map(|i| (i % 253) as u8).collect();
    fs::write(root.join("d/e/big"), big).unwrap();
    fs::write(root.join("g"), b"gee\n").unwrap();
    fs::write(root.join("h"), b"aitch\n").unwrap();
    fs::hard_link(root.join("h"), root.join("hh")).unwrap();
    symlink("d/f", root.join("l")).unwrap();
    mkfifo(&root.join("p"));
    fs::create_dir(root.join("q")).unwrap();
    fs::write(root.join("q/r"), b"r\n").unwrap();
}

/// Runs `barge verify ARGS`, the archive piped in when `piped` (its path is then `-`).
fn verify(args: &[&Path], archive: &Path, piped: bool) -> Output {
    let mut cmd = barge(["verify"]);
    match piped {
        true => {
            cmd.arg("-").args(args);
            run(&mut cmd, Some(&fs::read(archive).unwrap()))
        }
        false => run(cmd.arg(archive).args(args), None),
    }
}

#[test]
fn verify_of_a_sound_archive_says_nothing_and_a_corrupted_byte_names_its_file() {
    let work = tempdir();
    let src = work.path().join("t");
    tree(&src);
    let v1 = work.path().join("t1.barge");
    pack_to(&src, &v1);
    let v2 = work.path().join("t2.barge");
    let bytes = pack_v2(&src, &v2, 1 << 20, None);
    for piped in [false, true] {
        let out = verify(&[], &v2, piped);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!((&out.stdout[..], &out.stderr[..]), (&b""[..], &b""[..]));
        let out = verify(&[], &v1, piped);
        assert!(out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("holds no digests"), "{stderr}");
    }
    // One byte of the big file's second chunk, in a later segment.
    let mut bad = bytes.clone();
    let at = (0..bad.len() - 4)
        .rev()
        .find(|&i| bad[i..i + 4] == [0, 1, 2, 3])
        .unwrap();
    bad[at + 1] ^= 0x40;
    let corrupt = work.path().join("bad.barge");
    fs::write(&corrupt, &bad).unwrap();
    for piped in [false, true] {
        let out = verify(&[], &corrupt, piped);
        assert_clean_failure(&out, &["d/e/big", "[bad-digest]"], "verify");
        // With DIR the error stops the comparison the same way.
        let out = verify(&[&src], &corrupt, piped);
        assert_clean_failure(&out, &["d/e/big", "[bad-digest]"], "verify DIR");
    }
}

/// The lines of `out` (a verify that found differences), sorted.
fn differences(out: &Output) -> Vec<String> {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<String> = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

#[test]
fn verify_of_a_directory_reports_each_difference_once_per_path() {
    let work = tempdir();
    let src = work.path().join("t");
    tree(&src);
    let v2 = work.path().join("t.barge");
    pack_v2(&src, &v2, 1 << 20, Some(3));
    let dest = work.path().join("dest");
    run_ok(
        &mut barge(["unpack".as_ref(), v2.as_os_str(), dest.as_os_str()]),
        None,
    );
    // DIR itself is followed when it is a symlink, as a command line's path.
    let named = work.path().join("named");
    symlink(&dest, &named).unwrap();
    for (piped, dir) in [(false, &dest), (true, &dest), (false, &named)] {
        let out = verify(&[dir], &v2, piped);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        assert!(out.stdout.is_empty());
    }
    // Every kind of difference, each keeping the rest of the entry as it was.
    let keep_time = |path: &Path, edit: &dyn Fn(&Path)| {
        let meta = fs::symlink_metadata(path).unwrap();
        edit(path);
        use std::os::unix::fs::MetadataExt;
        set_mtime(path, meta.mtime(), meta.mtime_nsec());
    };
    let mut big = fs::read(dest.join("d/e/big")).unwrap();
    big[(2 << 20) + 7] ^= 1;
    keep_time(&dest.join("d/e/big"), &|p| fs::write(p, &big).unwrap());
    keep_time(&dest.join("d/f"), &|p| {
        fs::set_permissions(p, fs::Permissions::from_mode(0o644)).unwrap()
    });
    keep_time(&dest.join("g"), &|p| fs::write(p, b"gee!\n").unwrap());
    set_mtime(&dest.join("h"), 1_000_000_000, 5);
    fs::remove_file(dest.join("hh")).unwrap();
    fs::write(dest.join("hh"), b"aitch\n").unwrap();
    set_mtime(&dest.join("hh"), 1_000_000_000, 5);
    keep_time(&dest.join("l"), &|p| {
        fs::remove_file(p).unwrap();
        symlink("d/e", p).unwrap();
    });
    fs::remove_file(dest.join("p")).unwrap();
    // A symlink where a directory was: reported, never followed into.
    fs::rename(dest.join("q"), work.path().join("q")).unwrap();
    symlink(work.path().join("q"), dest.join("q")).unwrap();
    let expected = [
        "d/e/big: content differs at byte 2097159",
        "d/f: mode 644 here, 640 in the archive",
        "g: size 5 here, 4 in the archive; content differs at byte 3",
        "h: mtime 1000000000.000000005 here",
        "hh: not linked to h",
        "l: target d/e here, d/f in the archive",
        "p: not in the directory",
        "q: is a symlink here, a directory in the archive",
    ];
    for piped in [false, true] {
        let found = differences(&verify(&[&dest], &v2, piped));
        assert_eq!(found.len(), expected.len(), "{found:#?}");
        for (line, want) in found.iter().zip(expected) {
            assert!(line.starts_with(want), "{line:?} is not {want:?}");
        }
    }
    let out = verify(&[&dest], &v2, false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("8 entries of"), "{stderr}");
    // --json: one object per path, then the summary.
    let mut cmd = barge(["verify", "--json"]);
    let out = run(cmd.arg(&v2).arg(&dest), None);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), expected.len() + 1);
    assert_eq!(lines[0]["path"], "d/e/big");
    assert_eq!(
        lines[0]["differences"][0],
        "content differs at byte 2097159"
    );
    assert_eq!(lines[expected.len()]["differences"], 8);
    assert_eq!(lines[expected.len()]["files"], 5);
}

#[test]
fn verify_with_a_compares_owners() {
    let work = tempdir();
    let src = work.path().join("t");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("f"), b"f\n").unwrap();
    let plain = work.path().join("plain.barge");
    pack_to(&src, &plain);
    let owned = work.path().join("owned.barge");
    run_ok(barge(["pack", "-a"]).arg(&src).arg("-o").arg(&owned), None);
    // Without -a owners are not compared; with it, an archive without them cannot agree.
    assert!(verify(&[&src], &plain, false).status.success());
    let mut cmd = barge(["verify", "-a"]);
    let found = differences(&run(cmd.arg(&plain).arg(&src), None));
    assert_eq!(found, ["f: owner not in the archive"]);
    let mut cmd = barge(["verify", "-a"]);
    let out = run(cmd.arg(&owned).arg(&src), None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    if is_root() {
        rustix::fs::chown(src.join("f"), Some(rustix::fs::Uid::from_raw(1)), None).unwrap();
        let mut cmd = barge(["verify", "-a"]);
        let found = differences(&run(cmd.arg(&owned).arg(&src), None));
        assert_eq!(found.len(), 1);
        assert!(found[0].starts_with("f: owner 1:"), "{found:?}");
    }
}
