//! Hostile input: malformed archives and destinations booby-trapped with symlinks, fifos and
//! hardlinks. Every case must end in a clean failure (exit 1, a message naming the problem,
//! no panic, no hang) and leave everything outside DEST untouched; each runs mapped and
//! streamed without the sandbox (layers 1-2 alone) and mapped inside it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use barge::format::{TAG_FILE64, TAG_PERM};

use crate::common::*;

/// One hostile case.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    /// Prepares DEST (created empty before) with the sentinel dir `outside` next to it.
    pub(crate) setup: fn(&Path, &Path),
    pub(crate) archive: Vec<u8>,
    pub(crate) args: &'static [&'static str],
    /// Each must appear in stderr; `a|b` accepts either.
    pub(crate) needles: &'static [&'static str],
}

impl Case {
    /// Makes `work`/dest (empty) and the sentinel tree `work`/outside, prepares them as the
    /// case says, and returns DEST and the sentinel's record.
    pub(crate) fn prepare(&self, work: &Path) -> (PathBuf, Sentinel) {
        let (dest, outside) = (work.join("dest"), work.join("outside"));
        fs::create_dir(&dest).unwrap();
        Sentinel::populate(&outside);
        (self.setup)(&dest, &outside);
        (dest, Sentinel::record(&outside))
    }
}

fn no_setup(_: &Path, _: &Path) {}

/// The hostile archives that are refused for what they hold alone (no DEST prepared, no
/// option given), by case name: what a stranger could upload to a server.
pub(crate) fn archives() -> Vec<(&'static str, Vec<u8>)> {
    let work = tempdir();
    cases()
        .into_iter()
        .filter(|case| {
            let (dest, outside) = (work.path().join(case.name), work.path().join("outside"));
            fs::create_dir_all(&dest).unwrap();
            if !outside.exists() {
                Sentinel::populate(&outside);
            }
            (case.setup)(&dest, &outside);
            case.args.is_empty() && fs::read_dir(&dest).unwrap().next().is_none()
        })
        .map(|case| (case.name, case.archive))
        .collect()
}

fn file64(name: &[u8], size: u64) -> Vec<u8> {
    let mut out = vec![TAG_FILE64];
    out.extend_from_slice(name);
    out.push(0);
    out.extend_from_slice(&size.to_le_bytes());
    out
}

/// Header plus DIR "d" nested `depth` times (no POPs, no END: the depth check comes first).
fn nested(depth: usize) -> Vec<u8> {
    let mut a = Archive::header();
    for _ in 0..depth {
        a = a.dir(b"d");
    }
    a.0
}

pub(crate) fn cases() -> Vec<Case> {
    let h = Archive::header;
    let long = vec![b'n'; 256];
    vec![
        Case {
            name: "slash in a file name",
            setup: no_setup,
            archive: h().file(b"a/b", b"x").end(1),
            args: &[],
            needles: &["archive byte 8:", "contains '/'"],
        },
        Case {
            name: "absolute dir name",
            setup: no_setup,
            archive: h().dir(b"/etc").file(b"passwd", b"x").pop().end(2),
            args: &[],
            needles: &["contains '/'"],
        },
        Case {
            name: "name '.'",
            setup: no_setup,
            archive: h().dir(b".").file(b"x", b"x").pop().end(2),
            args: &[],
            needles: &["'.' or '..'"],
        },
        Case {
            name: "dir '..' then a file (traversal)",
            setup: no_setup,
            archive: h().dir(b"..").file(b"escaped", b"x").pop().end(2),
            args: &[],
            needles: &["'.' or '..'"],
        },
        Case {
            name: "file '..'",
            setup: no_setup,
            archive: h().file(b"..", b"x").end(1),
            args: &[],
            needles: &["'.' or '..'"],
        },
        Case {
            name: "traversal nested below a real dir",
            setup: no_setup,
            archive: h().dir(b"a").dir(b"..").dir(b"..").file(b"x", b"").end(4),
            args: &[],
            needles: &["archive byte 11:", "a: name is '.' or '..'"],
        },
        Case {
            name: "empty name",
            setup: no_setup,
            archive: h().file(b"", b"x").end(1),
            args: &[],
            needles: &["empty name"],
        },
        Case {
            name: "256-byte name",
            setup: no_setup,
            archive: h().file(&long, b"x").end(1),
            args: &[],
            needles: &["longer than 255 bytes"],
        },
        Case {
            name: "NUL inside a name",
            setup: no_setup,
            archive: h().raw(b"\x01ev\0il\0\x01\0\0\0x").end(1),
            args: &[],
            needles: &["ev: input ends|ev: input ended after"],
        },
        Case {
            name: "size past the end",
            setup: no_setup,
            archive: h().raw(b"\x01f\0\xe8\x03\0\0only ten b").end(1),
            args: &[],
            needles: &["truncated|input ended after"],
        },
        Case {
            name: "huge size, no data",
            setup: no_setup,
            archive: h().raw(b"\x01f\0\xff\xff\xff\xff").0,
            args: &[],
            needles: &["truncated|input ended after 0 of 4294967295"],
        },
        Case {
            name: "huge FILE64 size, no data",
            setup: no_setup,
            archive: h().raw(&file64(b"f", u64::MAX)).0,
            args: &[],
            needles: &["truncated|input ended after 0 of 18446744073709551615"],
        },
        Case {
            name: "depth 100,000",
            setup: no_setup,
            archive: nested(100_000),
            args: &[],
            needles: &["deeper than the limit of 1024", "archive byte 3080:"],
        },
        Case {
            name: "symlink in DEST to an outside dir, named like a dir",
            setup: |dest, outside| symlink(outside, dest.join("link")).unwrap(),
            archive: h().dir(b"link").file(b"pwned", b"x").pop().end(2),
            args: &[],
            needles: &["link: already exists", "symlink"],
        },
        Case {
            name: "symlink in DEST to an outside file, named like a file",
            setup: |dest, outside| symlink(outside.join("secret"), dest.join("f")).unwrap(),
            archive: h().file(b"f", b"overwritten").end(1),
            args: &[],
            needles: &["f: already exists", "symlink"],
        },
        Case {
            name: "dangling symlink in DEST to an outside path, named like a file",
            setup: |dest, outside| symlink(outside.join("new"), dest.join("f")).unwrap(),
            archive: h().file(b"f", b"created").end(1),
            args: &[],
            needles: &["f: already exists", "symlink"],
        },
        Case {
            name: "symlink to outside one level down",
            setup: |dest, outside| {
                fs::create_dir(dest.join("sub")).unwrap();
                symlink(outside, dest.join("sub/link")).unwrap();
            },
            archive: h()
                .dir(b"sub")
                .dir(b"link")
                .file(b"x", b"x")
                .pop()
                .pop()
                .end(3),
            args: &[],
            needles: &["sub/link: already exists"],
        },
        Case {
            name: "fifo in DEST named like a file (must not hang)",
            setup: |dest, _| mkfifo(&dest.join("f")),
            archive: h().file(b"f", b"x").end(1),
            args: &[],
            needles: &["f: already exists", "fifo"],
        },
        Case {
            name: "fifo in DEST named like a dir",
            setup: |dest, _| mkfifo(&dest.join("d")),
            archive: h().dir(b"d").file(b"x", b"x").pop().end(2),
            args: &[],
            needles: &["d: already exists", "fifo"],
        },
        Case {
            name: "hardlink in DEST to an outside file",
            setup: |dest, outside| fs::hard_link(outside.join("secret"), dest.join("f")).unwrap(),
            archive: h().file(b"f", b"overwritten").end(1),
            args: &[],
            needles: &["f: already exists", "hard-linked"],
        },
        Case {
            name: "regular file in DEST named like a file",
            setup: |dest, _| file(&dest.join("f"), b"mine", 0o644),
            archive: h().file(b"f", b"theirs").end(1),
            args: &[],
            needles: &["f: already exists", "file"],
        },
        Case {
            name: "regular file in DEST named like a dir",
            setup: |dest, _| file(&dest.join("d"), b"mine", 0o644),
            archive: h().dir(b"d").file(b"x", b"x").pop().end(2),
            args: &[],
            needles: &["d: already exists"],
        },
        Case {
            name: "duplicate file names",
            setup: no_setup,
            archive: h().file(b"x", b"1").file(b"x", b"2").end(2),
            args: &[],
            needles: &["archive byte 16:", "x: duplicate name"],
        },
        Case {
            name: "duplicate dir names",
            setup: no_setup,
            archive: h().dir(b"x").pop().dir(b"x").pop().end(2),
            args: &[],
            needles: &["duplicate name"],
        },
        Case {
            name: "dir then file with the same name",
            setup: no_setup,
            archive: h().dir(b"x").pop().file(b"x", b"1").end(2),
            args: &[],
            needles: &["archive byte 12:", "duplicate name"],
        },
        Case {
            name: "file then dir with the same name",
            setup: no_setup,
            archive: h().file(b"x", b"1").dir(b"x").pop().end(2),
            args: &[],
            needles: &["duplicate name"],
        },
        Case {
            name: "pop at the root",
            setup: no_setup,
            archive: h().pop().end(0),
            args: &[],
            needles: &["archive byte 8:", "pop would leave"],
        },
        Case {
            name: "pop below the root after a dir",
            setup: no_setup,
            archive: h().dir(b"a").pop().pop().end(1),
            args: &[],
            needles: &["archive byte 12:", "pop would leave"],
        },
        Case {
            name: "trailing garbage",
            setup: no_setup,
            archive: [h().file(b"f", b"x").end(1), b"garbage".to_vec()].concat(),
            args: &[],
            needles: &["bytes after the end"],
        },
        Case {
            name: "unknown tag 0x06",
            setup: no_setup,
            archive: h().raw(b"\x06").end(0),
            args: &[],
            needles: &["unknown message tag 0x06"],
        },
        Case {
            name: "unknown tag 0xff inside a dir",
            setup: no_setup,
            archive: h().dir(b"a").raw(b"\xff").pop().end(1),
            args: &[],
            needles: &["archive byte 11:", "unknown message tag 0xff"],
        },
        Case {
            name: "dangling PERM before POP",
            setup: no_setup,
            archive: h().dir(b"a").raw(&[TAG_PERM, 0xc0, 0x01]).pop().end(1),
            args: &[],
            needles: &["archive byte 14:", "not followed by an entry"],
        },
        Case {
            name: "dangling PERM before END",
            setup: no_setup,
            archive: h().raw(&[TAG_PERM, 0xc0, 0x01]).end(0),
            args: &[],
            needles: &["not followed by an entry"],
        },
        Case {
            name: "bad mode",
            setup: no_setup,
            archive: h().raw(&[TAG_PERM, 0x00, 0x10]).file(b"f", b"").end(1),
            args: &[],
            needles: &["invalid mode 0o10000"],
        },
        Case {
            name: "bad magic (a zip file)",
            setup: no_setup,
            archive: b"PK\x03\x04\x14\0\0\0\0\0".to_vec(),
            args: &[],
            needles: &["not a barge archive"],
        },
        Case {
            name: "bad version",
            setup: no_setup,
            archive: [&b"BARGE\0\x03\0"[..], &[0; 9]].concat(),
            args: &[],
            needles: &["unsupported format version 3"],
        },
        Case {
            name: "empty input",
            setup: no_setup,
            archive: Vec::new(),
            args: &[],
            needles: &["truncated"],
        },
        Case {
            name: "count too high",
            setup: no_setup,
            archive: h().file(b"f", b"x").end(2),
            args: &[],
            needles: &["end count says 2 entries but the archive has 1"],
        },
        Case {
            name: "count too low (missing entries)",
            setup: no_setup,
            archive: h().file(b"f", b"x").file(b"g", b"y").end(1),
            args: &[],
            needles: &["end count says 1"],
        },
        Case {
            name: "end inside a dir",
            setup: no_setup,
            archive: h().dir(b"a").end(1),
            args: &[],
            needles: &["end of archive inside a directory"],
        },
        Case {
            name: "noncanonical FILE64",
            setup: no_setup,
            archive: h().raw(&file64(b"f", 1)).raw(b"x").end(1),
            args: &[],
            needles: &["FILE64 used"],
        },
        Case {
            name: "--max-entries",
            setup: no_setup,
            archive: h().file(b"a", b"").file(b"b", b"").file(b"c", b"").end(3),
            args: &["--max-entries", "2"],
            needles: &["c: more than 2 entries"],
        },
        Case {
            name: "--max-bytes",
            setup: no_setup,
            archive: h().file(b"a", b"12345").file(b"b", b"678901").end(2),
            args: &["--max-bytes", "10"],
            needles: &["b: more than 10 bytes"],
        },
        Case {
            name: "--max-depth",
            setup: no_setup,
            archive: h().dir(b"1").dir(b"2").dir(b"3").dir(b"4").end(4),
            args: &["--max-depth", "3"],
            needles: &["1/2/3/4: nesting deeper than the limit of 3"],
        },
    ]
}

/// The ways each case is run: input mapped or piped, sandbox on or off, lander engine.
const WAYS: [(bool, bool, &str); 4] = [
    (false, false, "sync"),
    (true, false, "sync"),
    (false, true, "sync"),
    (false, false, "threads"),
];

/// Runs `case` one way and checks everything a failure must (and must not) leave.
fn run_case(case: &Case, piped: bool, sandbox: bool, engine: &str) {
    let what = format!("{} (piped {piped}, sandbox {sandbox}, {engine})", case.name);
    let work = tempdir();
    let (dest, sentinel) = case.prepare(work.path());
    let archive = work.path().join("a.barge");
    fs::write(&archive, &case.archive).unwrap();
    let before_dest = scan(&dest);

    let mut cmd = barge(["unpack", "--engine", engine]);
    cmd.args(case.args);
    if !sandbox {
        cmd.arg("--no-sandbox");
    }
    let out = if piped {
        run(cmd.arg("-").arg(&dest), Some(&case.archive))
    } else {
        run(cmd.arg(&archive).arg(&dest), None)
    };

    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_clean_failure(&out, &[], &what);
    for needle in case.needles {
        assert!(
            needle.split('|').any(|n| stderr.contains(n)),
            "{what}: stderr lacks {needle:?}: {stderr}"
        );
    }
    // One error line (plus the sandbox warning where user namespaces are unavailable).
    let lines = stderr
        .lines()
        .filter(|l| !l.starts_with("barge: warning: sandbox unavailable"));
    assert_eq!(lines.count(), 1, "{what}: not one line: {stderr}");
    sentinel.assert_unchanged(&what);
    let mut names: Vec<_> = fs::read_dir(work.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["a.barge", "dest", "outside"],
        "{what}: created next to DEST"
    );
    // What was in DEST before is still there, unchanged (a failed unpack never overwrites).
    let after_dest = scan(&dest);
    for (path, node) in &before_dest {
        assert!(
            after_dest.get(path) == Some(node),
            "{what}: {:?} changed",
            name(path)
        );
    }
    assert_complete_files(&dest, &before_dest, &case.archive, &what);
}

/// Every file an unpack created has exactly the content the archive gives it: a failed
/// unpack never leaves a short file behind that looks complete.
pub(crate) fn assert_complete_files(
    dest: &Path,
    before: &BTreeMap<Vec<u8>, Node>,
    archive: &[u8],
    what: &str,
) {
    for (path, node) in scan(dest) {
        if let (Node::File(_, data), None) = (node, before.get(&path)) {
            let name = path.rsplit(|&b| b == b'/').next().unwrap();
            let mut message = vec![barge::format::TAG_FILE];
            message.extend_from_slice(name);
            message.push(0);
            message.extend_from_slice(&(data.len() as u32).to_le_bytes());
            message.extend_from_slice(&data);
            let found = archive.windows(message.len()).any(|w| w == message);
            assert!(
                found,
                "{what}: {path:?} is not a complete file of the archive"
            );
        }
    }
}

#[test]
fn hostile_archives_and_destinations_fail_cleanly_and_stay_inside() {
    let cases = cases();
    assert!(cases.len() >= 30, "only {} cases", cases.len());
    for case in &cases {
        for (piped, sandbox, engine) in WAYS {
            run_case(case, piped, sandbox, engine);
        }
    }
}

/// A small archive with dirs, an empty dir, PERM records, an empty file and data, cut at
/// every byte offset: each cut fails cleanly, read mapped and from a pipe, and whatever
/// landed is a prefix of the tree with every file complete (a cut file is removed).
#[test]
fn truncation_at_every_offset_fails_cleanly_and_leaves_no_short_file() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("a/empty")).unwrap();
    file(&src.join("a/hello"), b"hello, world\n", 0o644);
    file(&src.join("a/run"), b"#!/bin/sh\necho hi\n", 0o755);
    file(&src.join("b"), &[7u8; 100], 0o600);
    file(&src.join("c-empty"), b"", 0o644);
    let archive = pack_to(&src, "-");
    assert!(archive.len() > 150, "archive unexpectedly small");
    let whole = work.path().join("whole.barge");
    for cut in 0..archive.len() {
        let part = &archive[..cut];
        fs::write(&whole, part).unwrap();
        for (piped, engine) in [(false, "sync"), (true, "sync"), (false, "threads")] {
            let what = format!("cut at {cut} (piped {piped}, {engine})");
            let dest = work.path().join(format!("d{cut}-{piped}"));
            // A new DEST appears whole or not at all; an existing one keeps what landed.
            let new = !piped && engine == "sync";
            if !new {
                fs::create_dir(&dest).unwrap();
            }
            let mut cmd = barge(["unpack", "--no-sandbox", "--engine", engine]);
            let out = if piped {
                run(cmd.arg("-").arg(&dest), Some(part))
            } else {
                run(cmd.arg(&whole).arg(&dest), None)
            };
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_clean_failure(&out, &[], &what);
            assert!(
                stderr.contains("truncated") || stderr.contains("the partial file was removed"),
                "{what}: {stderr}"
            );
            if new {
                assert!(!dest.exists(), "{what}: a failed unpack left its new DEST");
                let left = names_in(work.path());
                assert!(left.iter().all(|n| !n.starts_with('.')), "{what}: {left:?}");
                continue;
            }
            // Whatever landed is a prefix of the tree, every file complete.
            for (path, node) in scan(&dest) {
                let original = src.join(name(&path));
                match node {
                    Node::File(_, data) => {
                        assert_eq!(
                            data,
                            fs::read(&original).unwrap(),
                            "{what}: {:?} short",
                            name(&path)
                        )
                    }
                    Node::Dir(_) => assert!(original.is_dir(), "{what}"),
                    other => panic!("{what}: {other:?}"),
                }
            }
            fs::remove_dir_all(&dest).unwrap();
        }
    }
}

#[test]
fn archive_that_is_a_directory_or_missing_is_a_clean_error() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let out = run(
        &mut barge(["unpack".as_ref(), work.path().as_os_str(), dest.as_os_str()]),
        None,
    );
    assert_clean_failure(&out, &["is a directory"], "archive is a directory");
    let missing = work.path().join("missing.barge");
    let out = run(
        &mut barge(["unpack".as_ref(), missing.as_os_str(), dest.as_os_str()]),
        None,
    );
    assert_clean_failure(
        &out,
        &["missing.barge: cannot open archive"],
        "missing archive",
    );
}
