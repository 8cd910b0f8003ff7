//! The set-id rule (issue 29; docs/SECURITY.md, "Modes, umask, setuid"): a setuid bit lands
//! only on a file given the owner its source records, a setgid bit only on one given its
//! group, whoever runs barge and whatever it is asked (`--setid` cannot widen it). For
//! pack/unpack (every engine, mapped and piped, in and out of the sandbox) and cp, as root
//! and as uid 65534; recv in `net.rs::setid_bits_from_a_sender_land_only_where_their_ids_do`.

use std::fs;
use std::os::unix::fs::{chown, MetadataExt};
use std::path::Path;
use std::process::Command;

use crate::common::*;
use crate::redteam::{ways, Work};

/// A group that is neither root's nor nobody's (Debian's `utmp`).
const UTMP: u32 = 43;

/// Set-id files of four owners: (name, mode, uid, gid).
const FILES: [(&str, u32, u32, u32); 4] = [
    // A user's program: as root's it would run as root.
    ("tool", 0o6755, 1000, 1000),
    // Like /usr/lib/x86_64-linux-gnu/utempter/utempter.
    ("utempter", 0o2755, 0, UTMP),
    ("own", 0o4755, 0, 0),
    ("nobodys", 0o6755, NOBODY, NOBODY),
];

/// `work/src` holding [`FILES`] (as root: it gives them away).
fn source(work: &Work) -> std::path::PathBuf {
    let src = work.path("src");
    fs::create_dir(&src).unwrap();
    for (name, mode, uid, gid) in FILES {
        let path = src.join(name);
        file(&path, b"#!/bin/true\n", 0o644);
        chown(&path, Some(uid), Some(gid)).unwrap();
        // After the chown, which clears them.
        file_mode(&path, mode);
    }
    src
}

fn file_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// What each of [`FILES`] is under `dir`: (mode, uid, gid).
fn landed(dir: &Path) -> Vec<(u32, u32, u32)> {
    FILES
        .iter()
        .map(|(name, ..)| {
            let meta = fs::symlink_metadata(dir.join(name)).unwrap();
            (meta.mode() & 0o7777, meta.uid(), meta.gid())
        })
        .collect()
}

/// A barge command run as the user of `way` (root or nobody).
fn as_user(nobody: bool, bin: &Path) -> Command {
    match nobody {
        true => {
            let mut cmd = as_nobody();
            cmd.arg(bin);
            cmd
        }
        false => Command::new(bin),
    }
}

fn warned(out: &std::process::Output, n: usize) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = format!("{n} setuid/setgid bits not restored");
    match n {
        0 => !err.contains("setuid/setgid"),
        _ => err.contains(&warning),
    }
}

#[test]
#[ignore = "needs root: only root can make files of other owners to pack"]
fn unpack_lands_a_set_id_bit_only_with_the_recorded_owner_or_group() {
    require_root();
    let work = Work::new();
    let src = source(&work);
    let pack = |name: &str, extra: &[&str]| {
        let out = work.path(name);
        let mut cmd = barge(["pack"]);
        run_ok(cmd.args(extra).arg(&src).arg("-o").arg(&out), None);
        fs::set_permissions(&out, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        out
    };
    let (plain, all) = (pack("plain.barge", &[]), pack("all.barge", &["-a"]));
    // (archive, options, as root, as nobody: each file's (mode, uid, gid) by FILES).
    let me = |nobody: bool| if nobody { NOBODY } else { 0 };
    type Want = fn(u32) -> [(u32, u32, u32); 4];
    let cases: [(&Path, &[&str], Want); 4] = [
        // No owners recorded: no bit can be the recorded owner's.
        (&plain, &[], |me| [(0o755, me, me); 4]),
        (&plain, &["--setid"], |me| [(0o755, me, me); 4]),
        // Owners recorded: root gives them and keeps the bits; nobody keeps its own.
        (&all, &["--setid"], |me| match me {
            0 => [
                (0o6755, 1000, 1000),
                (0o2755, 0, UTMP),
                (0o4755, 0, 0),
                (0o6755, NOBODY, NOBODY),
            ],
            _ => [
                (0o755, me, me),
                (0o755, me, me),
                (0o755, me, me),
                (0o6755, me, me),
            ],
        }),
        // Not given away: only where the ids are root's own.
        (&all, &["--no-same-owner", "--setid"], |me| match me {
            0 => [(0o755, 0, 0), (0o755, 0, 0), (0o4755, 0, 0), (0o755, 0, 0)],
            _ => [
                (0o755, me, me),
                (0o755, me, me),
                (0o755, me, me),
                (0o6755, me, me),
            ],
        }),
    ];
    for (i, way) in ways().iter().enumerate() {
        for (j, (archive, options, want)) in cases.iter().enumerate() {
            let what = format!("{way:?} {archive:?} {options:?}");
            let dest = work.path(&format!("d{i}-{j}"));
            fs::create_dir(&dest).unwrap();
            chown(&dest, Some(way.uid()), Some(way.uid())).unwrap();
            let mut cmd = work.unpack_cmd(way, archive, &dest, 0o022);
            // The unpack command ends with ARCHIVE DEST; options go anywhere.
            cmd.args(*options);
            let input = way.piped.then(|| fs::read(archive).unwrap());
            let out = run(&mut cmd, input.as_deref());
            assert!(out.status.success(), "{what}: {out:?}");
            let want = want(me(way.nobody));
            assert_eq!(landed(&dest), want, "{what}");
            let dropped = FILES
                .iter()
                .zip(&want)
                .filter(|((_, mode, ..), (got, ..))| mode & 0o6000 != got & 0o6000)
                .count();
            assert!(warned(&out, dropped), "{what}: {out:?}");
        }
    }
}

#[test]
#[ignore = "needs root: needs a setgid directory of another group"]
fn a_setgid_bit_kept_as_the_process_group_is_checked_against_the_group_the_file_got() {
    require_root();
    let work = Work::new();
    let src = work.path("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("g"), b"g", 0o644);
    file_mode(&src.join("g"), 0o6755);
    let archive = work.path("a.barge");
    run_ok(
        barge(["pack", "-a"]).arg(&src).arg("-o").arg(&archive),
        None,
    );
    let setgid_dir = |name: &str| {
        let dir = work.path(name);
        fs::create_dir(&dir).unwrap();
        chown(&dir, Some(0), Some(UTMP)).unwrap();
        file_mode(&dir, 0o2775);
        dir
    };
    let mode_and_group = |path: &Path| {
        let meta = fs::symlink_metadata(path).unwrap();
        (meta.mode() & 0o7777, meta.gid())
    };
    // Recorded 0:0, landed by root without giving owners, in a directory that gives
    // its group: the file's group is utmp's, so no setgid bit.
    for (i, way) in ways().iter().filter(|w| !w.nobody).enumerate() {
        let dest = setgid_dir(&format!("d{i}"));
        let mut cmd = work.unpack_cmd(way, &archive, &dest, 0o022);
        cmd.arg("--no-same-owner");
        let input = way.piped.then(|| fs::read(&archive).unwrap());
        let out = run(&mut cmd, input.as_deref());
        assert!(out.status.success(), "{way:?}: {out:?}");
        let g = dest.join("g");
        assert_eq!(mode_and_group(&g), (0o4755, UTMP), "{way:?}");
        assert!(warned(&out, 1), "{way:?}: {out:?}");
    }
    // cp keeps owners (it is `cp -a`): the file keeps its group, and so its setgid bit.
    let dest = setgid_dir("cp");
    let out = run(barge(["cp"]).arg(&src).arg(&dest), None);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(mode_and_group(&dest.join("src/g")), (0o6755, 0));
}

#[test]
#[ignore = "needs root: only root can make files of other owners to copy"]
fn cp_keeps_a_set_id_bit_only_where_the_copy_has_the_ids_it_grants() {
    require_root();
    let work = Work::new();
    let src = source(&work);
    let bin = copy_bin(&work.path(""));
    let all_kept = [
        (0o6755, 1000, 1000),
        (0o2755, 0, UTMP),
        (0o4755, 0, 0),
        (0o6755, NOBODY, NOBODY),
    ];
    let mine = |me: u32, kept: usize| {
        let mut want = [(0o755, me, me); 4];
        want[kept].0 = FILES[kept].1;
        want
    };
    // (as nobody, -a, what lands): -a changes nothing, cp keeps what `cp -a` keeps.
    let cases = [
        (false, false, all_kept),
        (false, true, all_kept),
        (true, false, mine(NOBODY, 3)),
        (true, true, mine(NOBODY, 3)),
    ];
    for (i, (nobody, archive, want)) in cases.into_iter().enumerate() {
        let what = format!("as nobody {nobody}, -a {archive}");
        let dest = work.path(&format!("c{i}"));
        let mut cmd = as_user(nobody, &bin);
        cmd.arg("cp");
        if archive {
            cmd.arg("-a");
        }
        let out = run(cmd.arg(&src).arg(&dest), None);
        assert!(out.status.success(), "{what}: {out:?}");
        assert_eq!(landed(&dest), want, "{what}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            err.contains("setuid/setgid bits dropped"),
            want != all_kept,
            "{what}: {err}"
        );
    }
}
