//! `pack` reads files in batches (statx, then open + read through io_uring per 64 files,
//! `sendfile` past 64 KiB): every size on both sides of those limits round-trips, what
//! cannot be stored (symlinks, fifos) is skipped with a warning, and the archive being
//! written is left out silently.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;

use crate::common::*;

#[test]
fn every_file_size_round_trips_and_unstorable_entries_are_skipped() {
    let work = tempdir();
    let src = work.path().join("src");
    let many = src.join("many");
    fs::create_dir_all(&many).unwrap();
    // 150 files: more than one ring batch, sizes around the page and the 64 KiB limit.
    let sizes = [0usize, 1, 4095, 4096, 4097, 65535, 65536, 65537, 200_000];
    for i in 0..150 {
        let size = sizes[i % sizes.len()];
        let data: Vec<u8> = (0..size).map(|b| (b * 7 + i) as u8).collect();
        file(&many.join(format!("f{i:03}")), &data, 0o644);
    }
    file(&src.join("a-first"), b"before the others", 0o600);
    symlink("a-first", src.join("link")).unwrap();
    mkfifo(&src.join("pipe"));
    let archive = src.join("zz-self.barge");
    let out = run_ok(
        &mut barge([
            "pack".as_ref(),
            src.as_os_str(),
            "-o".as_ref(),
            archive.as_os_str(),
        ]),
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    for skipped in ["skipped symlink link", "skipped fifo pipe"] {
        assert!(stderr.contains(skipped), "lacks {skipped:?}: {stderr}");
    }
    assert!(
        !stderr.contains("zz-self"),
        "the archive itself is named: {stderr}"
    );

    let dest = work.path().join("dest");
    run_ok(
        &mut barge(["unpack".as_ref(), archive.as_os_str(), dest.as_os_str()]),
        None,
    );
    let stored = |(path, node): &(Vec<u8>, Node)| {
        matches!(node, Node::Dir(_) | Node::File(..)) && path != b"zz-self.barge"
    };
    let expect: BTreeMap<_, _> = scan(&src).into_iter().filter(stored).collect();
    let got = scan(&dest);
    assert_eq!(expect.len(), 152, "source entries");
    assert_eq!(got.len(), expect.len(), "entries landed");
    for (path, node) in &expect {
        let Node::File(_, data) = node else { continue };
        match got.get(path) {
            Some(Node::File(_, landed)) => assert!(landed == data, "{:?} differs", name(path)),
            other => panic!("{:?}: {other:?}", name(path)),
        }
    }
}

/// A file whose size is not what `statx` said when it is read fails the pack, naming it:
/// /proc/sys files say 0 bytes and hold more (growth must show in the read that ends the
/// file), sysfs attributes say 4096 and hold less.
#[test]
fn a_file_whose_size_changes_while_read_fails_the_pack() {
    let work = tempdir();
    for (dir, shows) in [
        ("/proc/sys/kernel", "(0 bytes at open, 1 read)"),
        (
            "/sys/kernel/mm/transparent_hugepage",
            "(4096 bytes at open,",
        ),
    ] {
        let archive = work.path().join("out.barge");
        let out = run(
            &mut barge([
                "pack".as_ref(),
                dir.as_ref(),
                "-o".as_ref(),
                archive.as_os_str(),
            ]),
            None,
        );
        assert_clean_failure(&out, &["changed size while being read", shows], dir);
    }
}
