//! Member PATHs and `--exclude` on `unpack` and `list`, and `cat`: what tar users reach for.

use std::fs;
use std::path::Path;

use crate::common::*;

/// a/b/x.txt, a/y.o, c/z.txt, and a/ln, a hard link to a/y.o (first in the walk, so the
/// archive holds the file as a/ln and a/y.o as the link).
fn tree(work: &Path) -> std::path::PathBuf {
    let src = work.join("src");
    fs::create_dir_all(src.join("a/b")).unwrap();
    fs::create_dir_all(src.join("c")).unwrap();
    file(&src.join("a/b/x.txt"), b"1\n", 0o644);
    file(&src.join("a/y.o"), b"2\n", 0o644);
    file(&src.join("c/z.txt"), b"3\n", 0o644);
    fs::hard_link(src.join("a/y.o"), src.join("a/ln")).unwrap();
    let archive = work.join("a.barge");
    run_ok(&mut pack_cmd(&src, &archive), None);
    archive
}

fn listed(args: &[&str]) -> Vec<String> {
    let out = run_ok(&mut barge(args), None);
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .map(|l| l.rsplit(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn paths_select_subtrees_with_their_parents_mapped_and_piped() {
    let work = tempdir();
    let archive = tree(work.path());
    let a = archive.to_str().unwrap();
    assert_eq!(
        listed(&["list", a, "./a/b/", "c/z.txt"]),
        ["a/", "a/b/", "a/b/x.txt", "c/", "c/z.txt"]
    );
    for piped in [false, true] {
        let dest = work.path().join(format!("out-{piped}"));
        let mut cmd = barge(["unpack"]);
        let input = if piped {
            cmd.arg("-");
            Some(fs::read(&archive).unwrap())
        } else {
            cmd.arg(&archive);
            None
        };
        run_ok(cmd.arg(&dest).args(["a/b", "c/z.txt"]), input.as_deref());
        let mut found: Vec<_> = scan(&dest)
            .into_keys()
            .map(|p| String::from_utf8(p).unwrap())
            .collect();
        found.sort();
        assert_eq!(
            found,
            ["a", "a/b", "a/b/x.txt", "c", "c/z.txt"],
            "piped {piped}"
        );
    }
}

#[test]
fn exclude_leaves_out_entries_and_a_link_to_them_is_an_error() {
    let work = tempdir();
    let archive = tree(work.path());
    let a = archive.to_str().unwrap();
    let all = listed(&["list", "--exclude", "a/", a]);
    assert_eq!(all, ["c/", "c/z.txt"], "a directory left out whole");
    let dest = work.path().join("out");
    let out = run(
        &mut barge(["unpack", "--exclude", "ln", a, dest.to_str().unwrap()]),
        None,
    );
    assert_clean_failure(
        &out,
        &["a/ln", "a/y.o", "left out"],
        "a hard link to an excluded file",
    );
    let dest = work.path().join("out2");
    run_ok(
        &mut barge([
            "unpack",
            "--exclude",
            "*.o",
            "--exclude",
            "ln",
            a,
            dest.to_str().unwrap(),
        ]),
        None,
    );
    assert!(dest.join("a/b/x.txt").exists() && !dest.join("a/y.o").exists());
}

#[test]
fn cat_writes_the_files_selected_and_a_path_not_there_is_an_error() {
    let work = tempdir();
    let archive = tree(work.path());
    let a = archive.to_str().unwrap();
    let out = run_ok(&mut barge(["cat", a, "a/b/x.txt", "c"]), None);
    assert_eq!(out.stdout, b"1\n3\n");
    let out = run(&mut barge(["cat", a, "nope"]), None);
    assert_clean_failure(
        &out,
        &["nope: not found in the archive"],
        "cat of a missing path",
    );
    let dest = work.path().join("new");
    let out = run(
        &mut barge(["unpack", a, dest.to_str().unwrap(), "a", "nope"]),
        None,
    );
    assert_clean_failure(
        &out,
        &["nope: not found in the archive"],
        "unpack of a missing path",
    );
    assert!(!dest.exists(), "a new DEST is not kept");
    // Version 2 too, through its segments.
    let v2 = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors/v2/valid/two-segments.barge");
    let out = run_ok(
        &mut barge(["cat".as_ref(), v2.as_os_str(), "a/b".as_ref()]),
        None,
    );
    assert_eq!(out.stdout, b"c\nd\n");
}
