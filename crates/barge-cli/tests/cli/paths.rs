//! What commands print per path: `-v` lists every entry as it is done (pack, unpack, cp;
//! send in `net.rs`), on stdout or, where stdout carries the archive or the JSON summary, on
//! stderr; dry runs print `VERB PATH` sorted by path, every new directory included, the same
//! over two runs, and NUL-separated with `-0`.

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use barge::error::escape_bytes;

use crate::common::*;

/// A tree of many directories (some empty, some nested three deep), files, a symlink, a
/// hard link, a fifo and names with a newline and a non-UTF-8 byte; returns every path
/// below `root`, directories ending in '/', sorted name by name.
pub(crate) fn many_dirs(root: &Path) -> Vec<Vec<u8>> {
    for i in 0..40 {
        for j in 0..6 {
            let dir = root.join(format!("d{i:02}/e{j}"));
            fs::create_dir_all(dir.join("f")).unwrap();
            file(&dir.join("f/x"), b"x", 0o644);
        }
        fs::create_dir_all(root.join(format!("d{i:02}/empty"))).unwrap();
    }
    file(&root.join("top"), b"top", 0o644);
    file(&root.join(name(b"new\nline\xff")), b"odd", 0o644);
    fs::hard_link(root.join("top"), root.join("d00/link")).unwrap();
    std::os::unix::fs::symlink("top", root.join("sym")).unwrap();
    mkfifo(&root.join("d01/fifo"));
    let mut paths = Vec::new();
    walk(root, b"", &mut paths);
    paths.sort_by(|a, b| by_names(a).cmp(&by_names(b)));
    paths
}

/// Every path below `dir` (`at` its path), a directory's ending in '/'.
fn walk(dir: &Path, at: &[u8], paths: &mut Vec<Vec<u8>>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let path = match at {
            b"" => name.as_bytes().to_vec(),
            at => [at, b"/", name.as_bytes()].concat(),
        };
        if entry.file_type().unwrap().is_dir() {
            paths.push([&path[..], b"/"].concat());
            walk(&entry.path(), &path, paths);
        } else {
            paths.push(path);
        }
    }
}

/// A path's names, for sorting as `barge list` orders a tree.
fn by_names(path: &[u8]) -> Vec<&[u8]> {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    path.split(|&b| b == b'/').collect()
}

/// The paths as `-v` prints them (escaped as `barge list` does), sorted as text.
pub(crate) fn shown(paths: &[Vec<u8>]) -> Vec<String> {
    let mut shown: Vec<String> = paths
        .iter()
        .map(|p| match p.strip_suffix(b"/") {
            Some(dir) => escape_bytes(dir) + "/",
            None => escape_bytes(p),
        })
        .collect();
    shown.sort();
    shown
}

/// The lines of `out`, less the summary (`-v`'s last line on stderr), sorted.
pub(crate) fn listed(out: &[u8], summary: &str) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .filter(|l| summary.is_empty() || !l.starts_with(summary))
        .map(String::from)
        .collect();
    lines.sort();
    lines
}

#[test]
fn pack_v_lists_every_path_on_stdout_or_beside_the_archive_on_stderr() {
    let work = tempdir();
    let src = work.path().join("src");
    let paths = shown(&many_dirs(&src));
    for format in ["1", "2"] {
        let archive = work.path().join(format!("a{format}.barge"));
        let mut cmd = barge(["pack", "-v", "--format", format]);
        let out = run_ok(cmd.arg(&src).arg("-o").arg(&archive), None);
        assert_eq!(listed(&out.stdout, ""), paths, "format {format}");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.starts_with("packed "), "format {format}: {said}");

        // The archive on stdout: the list goes to stderr, the archive stays whole.
        let out = run_ok(barge(["pack", "-v", "--format", format]).arg(&src), None);
        assert_eq!(listed(&out.stderr, "packed "), paths, "format {format}");
        assert_eq!(out.stdout, fs::read(&archive).unwrap(), "format {format}");

        // Without -v nothing is listed.
        let out = run_ok(barge(["pack", "--format", format]).arg(&src), None);
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn unpack_v_lists_every_path_and_json_keeps_stdout_one_object() {
    let work = tempdir();
    let src = work.path().join("src");
    let paths = shown(&many_dirs(&src));
    for format in ["1", "2"] {
        let archive = work.path().join(format!("a{format}.barge"));
        run_ok(
            barge(["pack", "--format", format])
                .arg(&src)
                .arg("-o")
                .arg(&archive),
            None,
        );
        for engine in engines() {
            let what = format!("format {format}, engine {engine}");
            let dest = work.path().join(format!("v{format}-{engine}"));
            let mut cmd = barge(["unpack", "-v", "--engine", &engine]);
            let out = run_ok(cmd.arg(&archive).arg(&dest), None);
            assert_eq!(listed(&out.stdout, ""), paths, "{what}");

            let dest = work.path().join(format!("j{format}-{engine}"));
            let mut cmd = barge(["unpack", "-v", "--json", "--engine", &engine]);
            let out = run_ok(cmd.arg(&archive).arg(&dest), None);
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(summary["files"], 242, "{what}: {summary}");
            assert_eq!(listed(&out.stderr, ""), paths, "{what}");
        }
    }
}

#[test]
fn cp_v_lists_every_path_of_the_copy() {
    let work = tempdir();
    let src = work.path().join("src");
    let paths = many_dirs(&src);
    let dest = work.path().join("dest");
    let out = run_ok(barge(["cp", "-v"]).arg(&src).arg(&dest), None);
    // Paths in DEST, the new DEST itself first of all.
    let d = dest.as_os_str().as_bytes();
    let mut want: Vec<String> = paths
        .iter()
        .map(|p| escape_bytes(&[d, b"/", p.strip_suffix(b"/").unwrap_or(p)].concat()))
        .collect();
    want.push(escape_bytes(d));
    want.sort();
    assert_eq!(listed(&out.stdout, ""), want);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("copied "));
}

/// `barge cp --dry-run ARGS SRC DEST`'s stdout.
fn cp_dry_run(args: &[&str], src: &Path, dest: &Path) -> Vec<u8> {
    let mut cmd = barge(["cp", "--dry-run"]);
    run_ok(cmd.args(args).arg(src).arg(dest), None).stdout
}

/// What a dry run into a new DEST (`dest`, `/` after it when not empty) says of `paths`:
/// `copy PATH`, sorted by PATH; raw and NUL-ended with `null`.
pub(crate) fn all_copied(paths: &[Vec<u8>], dest: &[u8], null: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for p in paths {
        let path = [dest, p.strip_suffix(b"/").unwrap_or(p)].concat();
        match null {
            true => out.extend_from_slice(&[b"copy ", &path[..], b"\0"].concat()),
            false => out.extend_from_slice(format!("copy {}\n", escape_bytes(&path)).as_bytes()),
        }
    }
    out
}

#[test]
fn cp_dry_run_lists_every_new_directory_sorted_and_the_same_each_time() {
    let work = tempdir();
    let src = work.path().join("src");
    let paths = many_dirs(&src);
    let dest = work.path().join("dest");
    let d = dest.as_os_str().as_bytes();
    let mut want = format!("copy {}\n", escape_bytes(d)).into_bytes();
    want.extend(all_copied(&paths, &[d, b"/"].concat(), false));
    let first = cp_dry_run(&[], &src, &dest);
    assert_eq!(
        String::from_utf8_lossy(&first),
        String::from_utf8_lossy(&want)
    );
    assert_eq!(cp_dry_run(&[], &src, &dest), first, "a second run");
    assert!(!dest.exists());

    // -0: NUL-ended, the names' bytes as they are.
    let mut want = [b"copy ", d, b"\0"].concat();
    want.extend(all_copied(&paths, &[d, b"/"].concat(), true));
    assert_eq!(cp_dry_run(&["-0"], &src, &dest), want);
    let out = run(barge(["cp", "-0"]).arg(&src).arg(&dest), None);
    assert_eq!(out.status.code(), Some(1), "-0 without --dry-run");
}

#[test]
fn cp_dry_run_says_copy_replace_and_delete() {
    let work = tempdir();
    let src = work.path().join("src");
    let dest = work.path().join("dest");
    for (tree, names) in [(&src, ["a", "b"]), (&dest, ["b", "c"])] {
        fs::create_dir_all(tree).unwrap();
        for n in names {
            file(&tree.join(n), tree.as_os_str().as_bytes(), 0o644);
        }
    }
    let d = dest.to_str().unwrap();
    let out = cp_dry_run(&["-u", "--delete", "-0"], &src.join("."), &dest);
    let want = format!("copy {d}/a\0replace {d}/b\0delete {d}/c\0");
    assert_eq!(String::from_utf8_lossy(&out), want);
}
