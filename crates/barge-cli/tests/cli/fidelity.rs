//! Fidelity against tar (issue 14): `scripts/fidelity` copies a tree with
//! `tar --xattrs --acls -cpf - | tar --xattrs --acls -xpf -` and with `barge pack` +
//! `barge unpack`, and `scripts/compare-trees` compares the copies entry by entry (type, mode,
//! owner, mtime to the nanosecond, contents, symlink targets, hard-link groups, xattrs,
//! devices). Run on trees every Debian 12 has and on a generated tree holding every kind of
//! entry and metadata; two controls show the checker itself is right: a "barge" made of tar
//! passes, and a tree with one difference of each kind fails on each.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::{lchown, symlink, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rustix::fs::{lsetxattr, makedev, mknodat, utimensat, AtFlags, FileType, Mode, CWD};
use rustix::fs::{Timespec, Timestamps, XattrFlags};

use crate::common::*;

/// Longest one `scripts/fidelity` run may take (/usr/lib is gigabytes on some machines).
const FIDELITY_TIMEOUT: Duration = Duration::from_secs(600);

/// The repository's scripts/ directory.
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts")
}

/// Runs `scripts/NAME ARGS` (piped output, under [`FIDELITY_TIMEOUT`]).
pub(crate) fn script<S: AsRef<OsStr>>(name: &str, args: impl IntoIterator<Item = S>) -> Output {
    let mut cmd = Command::new(scripts().join(name));
    cmd.args(args);
    let what = format!("{cmd:?}");
    wait_output(spawn(&mut cmd, Stdio::null()), FIDELITY_TIMEOUT, &what)
}

/// Runs `scripts/fidelity --barge BARGE ARGS`; asserts every tree's copies were equal and
/// returns the output (stdout).
fn assert_faithful<S: AsRef<OsStr>>(barge: &Path, args: impl IntoIterator<Item = S>) -> String {
    let mut all: Vec<&OsStr> = vec!["--barge".as_ref(), barge.as_os_str()];
    let args: Vec<S> = args.into_iter().collect();
    all.extend(args.iter().map(AsRef::as_ref));
    let out = script("fidelity", &all);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "barge's copy differs from tar's ({:?}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let trees = stdout.lines().filter(|l| l.starts_with("== ")).count();
    let equal = stdout.matches("entries compared: equal").count();
    assert!(
        trees > 0 && equal == trees,
        "not every tree compared:\n{stdout}"
    );
    stdout
}

/// The entry count of the one comparison in `stdout` ("1,234 entries compared: ...").
fn compared(stdout: &str) -> usize {
    let line = stdout
        .lines()
        .find(|l| l.contains(" entries compared: "))
        .unwrap_or_else(|| panic!("no comparison in:\n{stdout}"));
    line.split(' ')
        .next()
        .unwrap()
        .replace(',', "")
        .parse()
        .unwrap()
}

/// A file system time, to the nanosecond.
fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    let t = Timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    };
    let times = Timestamps {
        last_access: t,
        last_modification: t,
    };
    utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
}

/// A POSIX ACL in its xattr form (version 2, then tag/perm/id entries sorted by tag).
pub(crate) fn acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

/// Sets the extended attribute `name` of `path` itself (a symlink is not followed).
pub(crate) fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    lsetxattr(path, name, value, XattrFlags::empty()).unwrap();
}

/// `ACL_UNDEFINED_ID`, the id of the entries that name no user or group.
pub(crate) const NO_ID: u32 = u32::MAX;

/// Fills `root` with every kind of entry and metadata tar and barge move: directories of
/// each mode (0555, 0700, sticky), files (setuid, setgid, read-only, empty, large, non-UTF-8
/// and newline names), symlinks (absolute, relative, dangling, to a directory, a loop),
/// hard-link groups within and across directories, a fifo, a socket (both tools skip it),
/// user xattrs (binary values too) and distinct nanosecond mtimes on every entry, one before
/// 1970 and one after 2100. `privileged` adds what only root can make or restore: other
/// owners (a file, a directory, a symlink), character and block devices, trusted xattrs and
/// POSIX ACLs (access and default). Returns the number of entries a copy has (the root
/// included, the socket not).
/// Makes in `dir` what an owner may give POSIX ACLs to (root or not): a file `acl` with an
/// access ACL (its mode's group bits are the mask: 0640), a directory `inherits` with a
/// default ACL, which entries created in it inherit.
pub(crate) fn acls(dir: &Path) {
    file(&dir.join("acl"), b"acl\n", 0o640);
    // user::rw- user:1234:r-- group::r-- mask::r-- other::---
    let access = acl(&[
        (0x01, 6, NO_ID),
        (0x02, 4, 1234),
        (0x04, 4, NO_ID),
        (0x10, 4, NO_ID),
        (0x20, 0, NO_ID),
    ]);
    set_xattr(&dir.join("acl"), "system.posix_acl_access", &access);
    fs::create_dir(dir.join("inherits")).unwrap();
    let default = acl(&[(0x01, 7, NO_ID), (0x04, 5, NO_ID), (0x20, 5, NO_ID)]);
    set_xattr(&dir.join("inherits"), "system.posix_acl_default", &default);
}

pub(crate) fn every_kind(root: &Path, privileged: bool) -> usize {
    for d in [
        "dirs/plain",
        "dirs/private",
        "dirs/read-only",
        "dirs/sticky",
        "dirs/empty",
    ] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    for d in ["files", "names", "links", "hard/sub", "special", "times"] {
        fs::create_dir_all(root.join(d)).unwrap();
    }
    file(
        &root.join("dirs/read-only/inside"),
        b"in a 0555 dir\n",
        0o644,
    );
    file(&root.join("dirs/private/key"), b"k", 0o600);
    file(&root.join("files/plain"), b"plain\n", 0o644);
    file(&root.join("files/exec"), b"#!/bin/sh\n", 0o755);
    file(&root.join("files/private"), b"p", 0o600);
    file(&root.join("files/read-only"), b"r", 0o444);
    file(&root.join("files/empty"), b"", 0o644);
    file(&root.join("files/setuid"), b"u", 0o4755);
    file(&root.join("files/setgid"), b"g", 0o2755);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 13 + i / 509) as u8).collect();
    file(&root.join("files/big"), &big, 0o644);
    file(&root.join("names").join(name(b"\xff\xfe")), b"raw", 0o644);
    file(&root.join("names").join("new\nline"), b"nl", 0o644);
    for (link, target) in [
        ("absolute", "/etc/passwd"),
        ("relative", "../files/plain"),
        ("dangling", "nowhere/at/all"),
        ("to-dir", "../dirs"),
        ("loop", "loop"),
    ] {
        symlink(target, root.join("links").join(link)).unwrap();
    }
    // Groups: three names in two directories, and a file linked from another top directory.
    file(&root.join("hard/a"), b"group of three", 0o640);
    fs::hard_link(root.join("hard/a"), root.join("hard/b")).unwrap();
    fs::hard_link(root.join("hard/a"), root.join("hard/sub/c")).unwrap();
    fs::hard_link(root.join("files/plain"), root.join("hard/plain-too")).unwrap();
    mkfifo(&root.join("special/fifo"));
    drop(UnixListener::bind(root.join("special/socket")).unwrap());
    for (path, name, value) in [
        ("files/plain", "user.comment", &b"hello"[..]),
        ("files/plain", "user.binary", b"\x00\x01\xff\x00"),
        ("dirs/plain", "user.dir", b"on a directory"),
        ("hard/a", "user.linked", b"shared by the group"),
    ] {
        set_xattr(&root.join(path), name, value);
    }
    if privileged {
        fs::create_dir(root.join("owned")).unwrap();
        file(&root.join("owned/file"), b"theirs", 0o640);
        fs::create_dir(root.join("owned/dir")).unwrap();
        symlink("file", root.join("owned/link")).unwrap();
        lchown(root.join("owned/file"), Some(1234), Some(5678)).unwrap();
        lchown(root.join("owned/dir"), Some(4321), Some(8765)).unwrap();
        lchown(root.join("owned/link"), Some(1111), Some(2222)).unwrap();
        for (name, kind, dev) in [
            ("null", FileType::CharacterDevice, makedev(1, 3)),
            ("loop", FileType::BlockDevice, makedev(7, 0)),
        ] {
            let path = root.join("special").join(name);
            mknodat(CWD, &path, kind, Mode::from_raw_mode(0o660), dev).unwrap();
        }
        set_xattr(&root.join("files/exec"), "trusted.origin", b"root only");
        fs::create_dir(root.join("acl")).unwrap();
        acls(&root.join("acl"));
        file(&root.join("acl/inherits/child"), b"c", 0o644);
    }
    // Modes that would stop the filling above come last.
    fs::set_permissions(
        root.join("dirs/read-only"),
        fs::Permissions::from_mode(0o555),
    )
    .unwrap();
    fs::set_permissions(root.join("dirs/private"), fs::Permissions::from_mode(0o700)).unwrap();
    fs::set_permissions(root.join("dirs/sticky"), fs::Permissions::from_mode(0o1777)).unwrap();
    // Times last, children before their directory (reversed path order), each distinct.
    file(&root.join("times/before-1970"), b"old", 0o644);
    set_mtime(&root.join("times/before-1970"), -86_400 * 365, 999_999_999);
    file(&root.join("times/after-2100"), b"new", 0o644);
    let paths: Vec<Vec<u8>> = scan(root).into_keys().collect();
    for (i, rel) in paths.iter().rev().enumerate() {
        let i = i as i64;
        let (sec, nsec) = match &rel[..] {
            b"times/before-1970" => (-86_400 * 365, 999_999_999),
            b"times/after-2100" => (4_200_000_000, 1),
            b"times" => (-1_000_000_000, 123_456_789),
            _ => (1_600_000_000 + i * 3_601, i * 7_919_111 + 1),
        };
        set_mtime(&root.join(name(rel)), sec, nsec);
    }
    set_mtime(root, 1_500_000_000, 5);
    // Every entry and the root, but the socket.
    paths.len()
}

/// A tree of [`every_kind`] (unprivileged) owned by [`NOBODY`], in a directory it may enter.
fn nobodys_tree(dir: &Path) -> PathBuf {
    let tree = dir.join("tree");
    fs::create_dir(&tree).unwrap();
    every_kind(&tree, false);
    for rel in scan(&tree).into_keys() {
        lchown(tree.join(name(&rel)), Some(NOBODY), Some(NOBODY)).unwrap();
    }
    for path in [dir, &tree] {
        lchown(path, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    tree
}

/// A stand-in for barge that copies with tar, for the controls: `pack [-a] SRC -o OUT` and
/// `unpack ARCHIVE DEST`, the only forms scripts/fidelity uses.
fn tar_as_barge(dir: &Path) -> PathBuf {
    let path = dir.join("tar-as-barge");
    let text = r#"#!/bin/sh
set -e
case "$1" in
  pack) [ "$2" = -a ] && shift; exec tar --xattrs --acls -cpf "$4" -C "$2" . ;;
  unpack) mkdir "$3"; exec tar --xattrs --acls -xpf "$2" -C "$3" ;;
esac
exit 64
"#;
    executable(&path, text.as_bytes());
    path
}

#[test]
fn usr_share_doc_as_tar_copies_it() {
    assert_faithful(&bin(), ["/usr/share/doc"]);
}

#[test]
#[ignore = "needs root: /etc holds files only root may read"]
fn etc_with_archive_flag_as_tar_copies_it() {
    require_root();
    assert_faithful(&bin(), ["-a", "/etc"]);
}

#[test]
#[ignore = "needs root: owners of /usr/lib are restored only by root"]
fn usr_lib_with_archive_flag_as_tar_copies_it() {
    // /usr/lib can be gigabytes: contents are compared by size only (this test is about
    // metadata; the round-trip tests compare contents byte for byte) and barge's copy goes
    // through a pipe (no archive file; the other trees cover the mapped archive). Where the
    // disk has no room for a copy, the script leaves out the largest directories and says so.
    require_root();
    let _big = one_big_writer();
    assert_faithful(&bin(), ["--no-content", "--pipe", "-a", "/usr/lib"]);
}

#[test]
#[ignore = "needs root: not root: cannot run the tools as nobody"]
fn usr_share_doc_as_nobody_as_tar_copies_it() {
    require_root();
    assert_faithful(&bin(), ["--as", "nobody", "/usr/share/doc"]);
}

#[test]
fn every_kind_of_entry_as_tar_copies_it() {
    let dir = tempdir();
    let tree = dir.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let count = every_kind(&tree, is_root());
    let out = assert_faithful(&bin(), [OsStr::new("-a"), tree.as_os_str()]);
    assert_eq!(compared(&out), count, "{out}");
}

#[test]
#[ignore = "needs root: not root: cannot run the tools as nobody"]
fn every_kind_of_entry_as_nobody_as_tar_copies_it() {
    require_root();
    assert_faithful_as_nobody(&bin());
}

/// [`assert_faithful`] run as nobody on a tree of every kind nobody may copy.
fn assert_faithful_as_nobody(barge: &Path) {
    let dir = tempdir();
    let tree = nobodys_tree(dir.path());
    let args = [
        OsStr::new("--as"),
        "nobody".as_ref(),
        "-a".as_ref(),
        tree.as_os_str(),
    ];
    assert_faithful(barge, args);
}

/// The control: tar's copy of the generated tree equals the tree itself (so every kind of
/// metadata in it is one tar keeps, and barge is held to it), and tar against itself is
/// equal on the trees above (so whatever these tests find is barge's).
#[test]
fn checker_passes_tar_against_itself() {
    let dir = tempdir();
    let tar = tar_as_barge(dir.path());
    let tree = dir.path().join("tree");
    fs::create_dir(&tree).unwrap();
    let count = every_kind(&tree, is_root());
    let copy = dir.path().join("copy");
    let archive = dir.path().join("tree.tar");
    run_ok(
        Command::new(&tar)
            .arg("pack")
            .arg(&tree)
            .arg("-o")
            .arg(&archive),
        None,
    );
    run_ok(
        Command::new(&tar).arg("unpack").arg(&archive).arg(&copy),
        None,
    );
    let xattrs = "--xattrs=user,system.posix_acl_";
    let out = script(
        "compare-trees",
        [xattrs.as_ref(), tree.as_os_str(), copy.as_os_str()],
    );
    // Everything but the socket, which tar skips (as barge does).
    let want = format!(
        "special/socket: presence: A 'socket' vs B (none)\n\
         {} entries compared: 1 difference (presence 1)\n",
        count + 1
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    let out = assert_faithful(&tar, [OsStr::new("-a"), tree.as_os_str()]);
    assert_eq!(compared(&out), count, "{out}");
    if is_root() {
        assert_faithful_as_nobody(&tar);
    }
    assert_faithful(&tar, ["/usr/share/doc"]);
}

/// The other control: one difference of each kind in an otherwise equal pair of trees, each
/// reported with its path and both values, from the trees and from a saved manifest alike.
#[test]
fn checker_reports_each_kind_of_difference() {
    let dir = tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for root in [&a, &b] {
        fs::create_dir_all(root.join("d")).unwrap();
        for f in ["mode", "uid", "size", "content", "xattr", "mtime", "linked"] {
            file(&root.join(f), b"same", 0o644);
        }
        symlink("target", root.join("symlink")).unwrap();
        mkfifo(&root.join("type"));
        fs::hard_link(root.join("linked"), root.join("d/link")).unwrap();
        if is_root() {
            let dev = makedev(1, if root == &a { 3 } else { 5 });
            let kind = FileType::CharacterDevice;
            mknodat(
                CWD,
                root.join("rdev"),
                kind,
                Mode::from_raw_mode(0o600),
                dev,
            )
            .unwrap();
        }
    }
    file(&a.join("only-in-a"), b"", 0o644);
    fs::set_permissions(b.join("mode"), fs::Permissions::from_mode(0o4600)).unwrap();
    if is_root() {
        lchown(b.join("uid"), Some(1), None).unwrap();
    }
    file(&b.join("size"), b"longer", 0o644);
    file(&b.join("content"), b"SAME", 0o644);
    set_xattr(&b.join("xattr"), "user.k", b"v");
    fs::remove_file(b.join("symlink")).unwrap();
    symlink("other", b.join("symlink")).unwrap();
    fs::remove_file(b.join("type")).unwrap();
    file(&b.join("type"), b"", 0o644);
    fs::remove_file(b.join("d/link")).unwrap();
    file(&b.join("d/link"), b"same", 0o644);
    // The same times everywhere but on `mtime`.
    for root in [&a, &b] {
        for rel in scan(root).into_keys().rev() {
            set_mtime(&root.join(name(&rel)), 1_000_000, 0);
        }
        set_mtime(root, 1_000_000, 0);
    }
    set_mtime(&b.join("mtime"), 1, 1);
    let mut expect = vec![
        "only-in-a: presence: A 'file' vs B (none)",
        "mode: mode: A 0644 vs B 4600",
        "size: size: A 4 vs B 6",
        "content: content: A '",
        "xattr: xattrs: A {} vs B {user.k=v}",
        "mtime: mtime: A 1000000.000000000 vs B 1.000000001",
        "symlink: target: A 'target' vs B 'other'",
        "type: type: A 'fifo' vs B 'file'",
        "d/link: hard links with: A ['linked'] vs B []",
    ];
    if is_root() {
        expect.extend(["uid: uid: A 0 vs B 1", "rdev: rdev: A '1:3' vs B '1:5'"]);
    }
    let manifest = dir.path().join("a.json");
    let saved = script(
        "compare-trees",
        [OsStr::new("--save"), manifest.as_os_str(), a.as_os_str()],
    );
    assert!(saved.status.success(), "{saved:?}");
    let from_tree = script("compare-trees", [&a, &b]);
    let from_manifest = script("compare-trees", [&manifest, &b]);
    for out in [&from_tree, &from_manifest] {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{stdout}");
        for line in &expect {
            assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
        }
        // Hard links: `linked` and `d/link` are one group, reported once.
        assert_eq!(stdout.matches("hard links with").count(), 2, "{stdout}");
    }
    assert_eq!(from_tree.stdout, from_manifest.stdout);
    let same = script("compare-trees", [&manifest, &a]);
    let stdout = String::from_utf8_lossy(&same.stdout);
    assert!(same.status.success(), "{stdout}");
    assert!(stdout.contains(" entries compared: equal"), "{stdout}");
}
