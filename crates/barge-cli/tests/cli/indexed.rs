//! A version 2 archive in a file read through its index: `list --names` from the footer and
//! index alone, selecting as a listing of the stream does; `cat` from the segments holding
//! its files (a file in a later segment, a file whose extents run over several segments),
//! giving what `cat` of the stream gives.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;

use crate::common::*;

/// A tree of directories, small files, a 9 MiB file (three extents), a symlink and a hard
/// link.
fn tree(root: &Path) {
    fs::create_dir_all(root.join("src/deep/er")).unwrap();
    for i in 0..40 {
        let dir = if i % 2 == 0 { "src" } else { "src/deep" };
        fs::write(
            root.join(format!("{dir}/f{i:02}.c")),
            format!("file {i}\n").repeat(i),
        )
        .unwrap();
    }
    fs::write(root.join("src/deep/er/last"), b"the last one\n").unwrap();
    let big: Vec<u8> = (0..9u32 << 20).map(|i| (i % 251) as u8).collect();
    fs::write(root.join("big"), big).unwrap();
    symlink("src", root.join("link")).unwrap();
    fs::hard_link(root.join("src/f00.c"), root.join("zz")).unwrap();
    fs::write(root.join("zzz"), b"z\n").unwrap();
}

/// The stdout of `barge ARGS ARCHIVE`, which must succeed.
fn output(args: &[&str], archive: &Path) -> Vec<u8> {
    run_ok(barge(args).arg(archive), None).stdout
}

#[test]
fn list_names_of_a_v2_file_comes_from_its_index_and_selects_as_the_stream_does() {
    let work = tempdir();
    let src = work.path().join("t");
    tree(&src);
    for level in [None, Some(3)] {
        let archive = work.path().join(format!("t-{level:?}.barge"));
        let bytes = pack_v2(&src, &archive, 4096, level);
        // (options, PATHs)
        let selections: [(&[&str], &[&str]); 5] = [
            (&[], &[]),
            (&[], &["src/deep", "zzz"]),
            (&["--exclude", "*1.c"], &[]),
            (&["--strip-components", "1"], &[]),
            (&["--exclude", "deep/"], &["src"]),
        ];
        for (options, paths) in selections {
            let run = |piped: bool| {
                let mut cmd = barge(["list", "--names"]);
                cmd.args(options);
                match piped {
                    true => run_ok(cmd.arg("-").args(paths), Some(&bytes)).stdout,
                    false => run_ok(cmd.arg(&archive).args(paths), None).stdout,
                }
            };
            let (by_index, streamed) = (run(false), run(true));
            assert_eq!(
                String::from_utf8_lossy(&by_index),
                String::from_utf8_lossy(&streamed),
                "{options:?} {paths:?}, zstd {level:?}"
            );
            assert!(!by_index.is_empty());
        }
        let names = String::from_utf8(output(&["list", "--names"], &archive)).unwrap();
        assert!(names.starts_with("big\nlink\nsrc/\nsrc/deep/\n"), "{names}");
        assert!(names.ends_with("src/f38.c\nzz\nzzz\n"), "{names}");
        // The body is not read: a byte flipped in it goes unseen, where `list` finds it.
        let corrupt = work.path().join("corrupt.barge");
        if level.is_none() {
            let at = bytes.windows(13).position(|w| w == b"the last one\n");
            let mut bad = bytes.clone();
            bad[at.unwrap()] ^= 1;
            fs::write(&corrupt, &bad).unwrap();
            assert_eq!(output(&["list", "--names"], &corrupt).len(), names.len());
            let out = run(&mut barge(["list".as_ref(), corrupt.as_os_str()]), None);
            assert_clean_failure(&out, &["src/deep/er/last", "[bad-digest]"], "list");
        }
        // The footer is: its digest differs.
        let mut bad = bytes.clone();
        let footer = bytes.len() - 37;
        bad[footer + 1] ^= 1;
        fs::write(&corrupt, &bad).unwrap();
        let out = run(
            &mut barge(["list".as_ref(), "--names".as_ref(), corrupt.as_os_str()]),
            None,
        );
        let at = format!("archive byte {footer}:");
        assert_clean_failure(&out, &[&at, "[bad-digest]"], "list --names, footer");
    }
}

#[test]
fn cat_of_a_v2_file_gives_its_files_from_the_segments_holding_them() {
    let work = tempdir();
    let src = work.path().join("t");
    tree(&src);
    for level in [None, Some(3)] {
        let archive = work.path().join("t.barge");
        pack_v2(&src, &archive, 1 << 20, level);
        for paths in [
            &["src/deep/er/last"][..],
            &["big"],
            &["src/deep"],
            &["zzz", "src/f02.c"],
        ] {
            let cat = |piped: bool| {
                let mut cmd = barge(["cat"]);
                match piped {
                    true => {
                        let bytes = fs::read(&archive).unwrap();
                        run_ok(cmd.arg("-").args(paths), Some(&bytes)).stdout
                    }
                    false => run_ok(cmd.arg(&archive).args(paths), None).stdout,
                }
            };
            let by_index = cat(false);
            assert!(by_index == cat(true), "{paths:?}, zstd {level:?}");
            let first = fs::read(src.join(paths.iter().min().unwrap()));
            if let Ok(first) = first {
                assert!(by_index.starts_with(&first), "{paths:?}");
            }
        }
        let big = run_ok(
            &mut barge(["cat".as_ref(), archive.as_os_str(), "big".as_ref()]),
            None,
        );
        assert!(big.stdout == fs::read(src.join("big")).unwrap());
        let out = run(
            &mut barge(["cat".as_ref(), archive.as_os_str(), "src/nope".as_ref()]),
            None,
        );
        assert_clean_failure(
            &out,
            &["src/nope: not found in the archive"],
            "cat of nothing",
        );
    }
}
