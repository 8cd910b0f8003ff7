//! `barge du` against GNU `du` and `find` on the same trees: hard links, symlinks, empty
//! directories, sparse files, fifos, sockets, unreadable directories, 300 levels of nesting.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::common::{barge, file, mkfifo, name, run, run_ok, tempdir};

/// Output of a shell pipeline that must succeed.
fn sh(script: &str, path: &Path) -> String {
    let out = run_ok(
        Command::new("sh").args(["-c", script, "sh"]).arg(path),
        None,
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The first number of a command's output (`du` prints `SIZE<TAB>PATH`).
fn first_number(text: &str) -> u64 {
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// A tree with every kind of entry; `cross_links` adds hard links between directories
/// (whose subtotals then depend on which link a walk meets first).
fn make_tree(root: &Path, cross_links: bool) {
    for dir in ["a/b/c", "empty", "nested/empty/deeper", "big"] {
        fs::create_dir_all(root.join(dir)).unwrap();
    }
    for (i, size) in [0usize, 1, 511, 4095, 4096, 4097, 100_000]
        .iter()
        .enumerate()
    {
        let data: Vec<u8> = (0..*size).map(|j| (i * 7 + j) as u8).collect();
        file(&root.join(format!("a/file{i}")), &data, 0o644);
        file(
            &root.join(format!("a/b/c/file{i}")),
            &data[..size / 2],
            0o600,
        );
    }
    for i in 0..300 {
        file(&root.join(format!("big/{i:04}")), &[i as u8; 300], 0o644);
    }
    let sparse = fs::File::create(root.join("a/sparse")).unwrap();
    sparse.set_len(64 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"x", 8 << 20).unwrap();
    // Hard links: three names of one file in one directory, and a pair across directories.
    file(&root.join("a/linked"), &[7; 12_345], 0o644);
    fs::hard_link(root.join("a/linked"), root.join("a/linked2")).unwrap();
    fs::hard_link(root.join("a/linked"), root.join("a/linked3")).unwrap();
    if cross_links {
        fs::hard_link(root.join("a/file6"), root.join("nested/file6-link")).unwrap();
        fs::hard_link(root.join("a/linked"), root.join("a/b/linked4")).unwrap();
    }
    symlink("file1", root.join("a/to-file")).unwrap();
    symlink("../a", root.join("nested/to-dir")).unwrap();
    symlink("/nowhere/at/all/dangling", root.join("dangling")).unwrap();
    symlink("x".repeat(900), root.join("a/b/long-target")).unwrap();
    mkfifo(&root.join("a/fifo"));
    drop(UnixListener::bind(root.join("nested/socket")).unwrap());
    file(&root.join(name(b"a/not-utf8-\xff\xfe")), b"bytes", 0o644);
    file(&root.join("a/new\nline"), b"newline", 0o644);
}

/// 300 nested directories, each with a file and an empty side directory (so walks keep
/// many directories half-done at once).
fn make_deep(root: &Path, levels: usize) {
    let mut dir = root.to_path_buf();
    for i in 0..levels {
        dir.push("level");
        fs::create_dir_all(dir.join("side")).unwrap();
        file(&dir.join("f"), &vec![1; i % 50], 0o644);
    }
}

/// What GNU du and find say about `path`: (apparent bytes, disk bytes, files, dirs, other).
fn gnu(path: &Path) -> [u64; 5] {
    let count = |script: &str| first_number(&sh(script, path));
    [
        count(r#"du -sb "$1""#),
        count(r#"du -s -B1 "$1""#),
        count(
            r#"{ find "$1" -type f -links 1 -printf 'x\n'; find "$1" -type f -links +1 -printf '%D %i\n' | sort -u; } | wc -l"#,
        ),
        count(r#"find "$1" -type d -printf 'x\n' | wc -l"#),
        count(r#"find "$1" ! -type f ! -type d -printf '%D %i\n' | sort -u | wc -l"#),
    ]
}

/// `barge du --json` on `paths`, with `extra` options: the parsed object and the exit code.
fn barge_json(paths: &[&Path], extra: &[&str]) -> (Value, Option<i32>, String) {
    let out = run(barge(["du", "--json"]).args(extra).args(paths), None);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}; stderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (json, out.status.code(), stderr)
}

fn numbers(totals: &Value) -> [u64; 5] {
    ["bytes", "disk_bytes", "files", "dirs", "other"].map(|k| totals[k].as_u64().unwrap())
}

/// Asserts `barge du` agrees with GNU du and find on `path`, with 1, 2 and 64 threads.
fn assert_agrees(path: &Path) {
    let want = gnu(path);
    for threads in ["1", "2", "64"] {
        let (json, code, stderr) = barge_json(&[path], &["--threads", threads]);
        assert_eq!(code, Some(0), "stderr: {stderr}");
        assert_eq!(numbers(&json["total"]), want, "threads {threads}: {json}");
        assert_eq!(numbers(&json["paths"][0]), want);
    }
}

#[test]
fn agrees_with_du_and_find_on_tmpfs_and_on_disk() {
    let shm = tempdir();
    make_tree(shm.path(), true);
    make_deep(&shm.path().join("deep"), 300);
    assert_agrees(shm.path());
    // The default temporary directory is normally a disk filesystem (sizes of directories
    // and of allocated blocks differ from tmpfs).
    let disk = tempfile::tempdir().unwrap();
    make_tree(disk.path(), true);
    assert_agrees(disk.path());
}

#[test]
fn deeper_than_the_fd_limit() {
    let dir = tempdir();
    make_deep(dir.path(), 300);
    let want = gnu(dir.path());
    for threads in ["1", "2"] {
        let out = run_ok(
            Command::new("prlimit")
                .arg("--nofile=24:24")
                .arg(crate::common::bin())
                .args(["du", "--json", "--threads", threads])
                .arg(dir.path()),
            None,
        );
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(numbers(&json["total"]), want, "threads {threads}");
    }
}

#[test]
fn depth_subtotals_match_du_d() {
    let dir = tempdir();
    make_tree(dir.path(), false);
    make_deep(&dir.path().join("deep"), 5);
    for depth in ["0", "1", "3"] {
        let du = sh(&format!(r#"du -b -d {depth} "$1""#), dir.path());
        let want = parse_du(&du);
        let out = run_ok(barge(["du", "--depth", depth]).arg(dir.path()), None);
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<(u64, &str)> = text
            .lines()
            .map(|l| {
                let (size, path) = columns(l);
                (size.parse().unwrap(), path)
            })
            .collect();
        assert!(
            lines.windows(2).all(|w| w[0].0 >= w[1].0),
            "not largest first: {text}"
        );
        let got: BTreeMap<&str, u64> = lines.iter().map(|&(size, path)| (path, size)).collect();
        assert_eq!(got, want, "--depth {depth}");
    }
}

#[test]
fn disk_usage_and_human_readable_text() {
    let dir = tempdir();
    make_tree(dir.path(), true);
    let want = first_number(&sh(r#"du -s -B1 "$1""#, dir.path()));
    let out = run_ok(barge(["du", "--disk-usage"]).arg(dir.path()), None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(first_number(&text), want, "{text}");
    let [_, _, files, dirs, other] = gnu(dir.path());
    let expected_tail = format!(
        "  {files} files  {dirs} dirs  {other} other  {}\n",
        dir.path().display()
    );
    assert!(text.ends_with(&expected_tail), "{text}");
    // -h labels its basis.
    let out = run_ok(barge(["du", "-h"]).arg(dir.path()), None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("64.") && text.contains(" MiB apparent  "),
        "{text}"
    );
    let out = run_ok(barge(["du", "-h", "--disk-usage"]).arg(dir.path()), None);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains(" MiB on disk  "), "{text}");
}

/// One file and one directory are said in the singular.
#[test]
fn one_file_and_one_dir_are_singular() {
    let dir = tempdir();
    fs::write(dir.path().join("f"), b"12345").unwrap();
    let out = run_ok(barge(["du"]).arg(dir.path()), None);
    let text = String::from_utf8(out.stdout).unwrap();
    let want = format!("  1 file  1 dir  0 other  {}\n", dir.path().display());
    assert!(text.ends_with(&want), "{text}");
}

#[test]
fn several_paths_count_each_inode_once_like_du() {
    let dir = tempdir();
    make_tree(dir.path(), true);
    let (a, nested, sub) = (
        dir.path().join("a"),
        dir.path().join("nested"),
        dir.path().join("a/b"),
    );
    let paths = [a.as_path(), nested.as_path(), sub.as_path(), a.as_path()];
    let (json, code, stderr) = barge_json(&paths, &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut du = Command::new("du");
    du.arg("-sbc").args(paths);
    let du = String::from_utf8(run_ok(&mut du, None).stdout).unwrap();
    // du leaves out the PATHs it has already counted; barge shows them with their own
    // sizes, out of the total.
    let du = parse_du(&du);
    assert_eq!(json["total"]["bytes"].as_u64(), Some(du["total"]));
    let per_path: Vec<u64> = (0..4)
        .map(|i| json["paths"][i]["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(per_path[0], du[a.to_str().unwrap()]);
    assert_eq!(per_path[1], du[nested.to_str().unwrap()]);
    assert_eq!(per_path[2], first_number(&sh(r#"du -sb "$1""#, &sub)));
    assert_eq!(per_path[3], per_path[0]);
    let before: Vec<bool> = (0..4)
        .map(|i| json["paths"][i]["counted_before"].as_bool().unwrap())
        .collect();
    assert_eq!(before, [false, false, true, true]);
    // In text, each PATH counted already names the PATH it lies in.
    let out = run_ok(barge(["du"]).args(paths), None);
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let a = a.to_str().unwrap();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(!lines[1].contains("inside"), "{text}");
    let inside = format!("  (inside {a}, counted there)");
    assert!(
        lines[2].ends_with(&format!("{}{inside}", sub.display())),
        "{text}"
    );
    assert!(lines[3].ends_with(&format!("{a}{inside}")), "{text}");
    assert_eq!(
        columns(lines[4]),
        (du["total"].to_string().as_str(), "total")
    );
}

/// A nested PATH (today's complaint: `barge du a a/b` printed "0 0 files") is measured on
/// its own, marked, and left out of the total; the columns line up.
#[test]
fn a_nested_path_shows_its_own_size_marked_and_the_columns_align() {
    let dir = tempdir();
    let a = dir.path().join("a");
    fs::create_dir_all(a.join("b")).unwrap();
    fs::write(a.join("b/big"), vec![7u8; 123_456]).unwrap();
    fs::write(a.join("f"), b"12345").unwrap();
    let out = run_ok(
        barge(["du"]).current_dir(dir.path()).args(["a", "a/b"]),
        None,
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    let b = first_number(&sh(r#"du -sb "$1""#, &a.join("b")));
    let all = first_number(&sh(r#"du -sb "$1""#, &a));
    let want = format!(
        "{all:>6}  2 files  2 dirs  0 other  a\n\
         {b:>6}  1 file   1 dir   0 other  a/b  (inside a, counted there)\n\
         {all:>6}  2 files  2 dirs  0 other  total\n"
    );
    assert_eq!(text, want, "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}
#[test]
fn symlink_and_file_paths_are_measured_not_followed() {
    let dir = tempdir();
    make_tree(dir.path(), true);
    for entry in ["nested/to-dir", "a/file6", "dangling", "a/fifo"] {
        let path = dir.path().join(entry);
        assert_agrees(&path);
    }
}

#[test]
fn missing_path_is_an_error_and_other_paths_still_count() {
    let dir = tempdir();
    make_tree(dir.path(), false);
    let missing = dir.path().join("missing");
    let (json, code, stderr) = barge_json(&[&missing, dir.path()], &[]);
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("missing") && stderr.contains("No such file"),
        "{stderr}"
    );
    assert_eq!(json["total"]["errors"].as_u64(), Some(1));
    assert_eq!(
        json["total"]["bytes"].as_u64(),
        Some(first_number(&sh(r#"du -sb "$1""#, dir.path())))
    );
}

#[test]
fn unreadable_directories_are_counted_named_and_exit_2() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to switch to an unprivileged user with setpriv");
        return;
    }
    let dir = tempdir();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    make_tree(dir.path(), true);
    for (locked, mode) in [("a/b", 0o000), ("nested/empty", 0o300), ("big", 0o644)] {
        fs::set_permissions(dir.path().join(locked), fs::Permissions::from_mode(mode)).unwrap();
    }
    let nobody = |program: &Path, args: &[&str]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(program)
            .args(args)
            .arg(dir.path());
        run(&mut cmd, None)
    };
    let du = nobody(Path::new("du"), &["-sb"]);
    assert_eq!(du.status.code(), Some(1), "du as nobody should fail too");
    let want = first_number(&String::from_utf8(du.stdout).unwrap());
    let out = nobody(&crate::common::bin(), &["du", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Measured, with entries left out: 2 (du says 1, as for a PATH it cannot measure).
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["total"]["bytes"].as_u64(), Some(want), "{stderr}");
    // a/b cannot be opened, nested/empty cannot be read, the 300 entries of big cannot be
    // measured: 302 errors, the first few named (which ones depends on the walk's order).
    assert_eq!(json["total"]["errors"].as_u64(), Some(302), "{stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 9, "{stderr}");
    assert_eq!(lines[8], "barge: warning: 294 more entries not measured");
    for line in &lines[..8] {
        assert!(line.starts_with("barge: warning: "), "{line}");
        let named = [
            "a/b: cannot open directory",
            "nested/empty: cannot open directory",
        ]
        .iter()
        .any(|n| line.contains(n));
        assert!(
            named || (line.contains("/big/") && line.contains("cannot access")),
            "{line}"
        );
    }
    for locked in ["a/b", "nested/empty", "big"] {
        fs::set_permissions(dir.path().join(locked), fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn one_file_system_skips_mounts_like_du_x() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root to mount a tmpfs inside the tree");
        return;
    }
    // The tree on disk, a tmpfs with files mounted inside it.
    let dir = tempfile::tempdir().unwrap();
    make_tree(dir.path(), true);
    let mnt = dir.path().join("a/b/mnt");
    fs::create_dir(&mnt).unwrap();
    run_ok(
        Command::new("mount").args(["-t", "tmpfs", "barge-test", mnt.to_str().unwrap()]),
        None,
    );
    make_tree(&mnt, false);
    let all = first_number(&sh(r#"du -sb "$1""#, dir.path()));
    let same_fs = first_number(&sh(r#"du -sbx "$1""#, dir.path()));
    let (whole, _, _) = barge_json(&[dir.path()], &[]);
    let (x, _, stderr) = barge_json(&[dir.path()], &["-x"]);
    run_ok(Command::new("umount").arg(&mnt), None);
    assert!(
        all > same_fs + (64 << 20),
        "the mount holds a 64 MiB sparse file"
    );
    assert_eq!(whole["total"]["bytes"].as_u64(), Some(all));
    assert_eq!(x["total"]["bytes"].as_u64(), Some(same_fs), "{stderr}");
}

/// The SIZE and PATH columns of a `barge du` line (`SIZE  N files  N dirs  N other  PATH`).
fn columns(line: &str) -> (&str, &str) {
    let size = line.split_whitespace().next().unwrap();
    (size, line.split_once(" other  ").unwrap().1)
}

/// Parses du's `SIZE<TAB>PATH` lines into a map from path to size.
fn parse_du(text: &str) -> BTreeMap<&str, u64> {
    text.lines()
        .map(|l| {
            let (size, path) = l.split_once('\t').unwrap();
            (path, size.parse().unwrap())
        })
        .collect()
}
