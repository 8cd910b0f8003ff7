//! Restoring metadata (docs/FORMAT.md, "Restoring metadata") and tar's choices for existing
//! entries, through every engine, the archive mapped and piped, inside and outside the
//! sandbox, as root and (when the tests run as root) as an unprivileged user; with the
//! hostile cases: links and names that try to lead outside DEST or to what was there.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use barge::format::Encoder;
use barge::tree::{Device, Entry, Kind, Meta, Owner, Timestamp, Xattrs};

use crate::common::*;
use crate::redteam::{make_removable, mode, ways, Way, Work};

/// The owner the archives give their entries.
const OWNER: Owner = Owner {
    uid: 1234,
    gid: 5678,
};

/// A time with nanoseconds, `n` days after 2020-09-13.
fn day(n: i64) -> Timestamp {
    Timestamp {
        sec: 1_600_000_000 + n * 86_400,
        nsec: 123_456_789 + n as u32,
    }
}

fn meta(mode: u32, mtime: Timestamp, owner: Option<Owner>) -> Meta {
    let mut meta = Meta::with_mode(mode);
    meta.mtime = Some(mtime);
    meta.owner = owner;
    meta
}

/// Extended attributes in archive form.
fn xattrs(pairs: &[(&str, &str)]) -> Vec<u8> {
    let mut buf = Vec::new();
    for (name, value) in pairs {
        Xattrs::push(&mut buf, name.as_bytes(), value.as_bytes());
    }
    buf
}

/// The modification time of `path` itself (a symlink's own).
fn mtime(path: &Path) -> Timestamp {
    let meta = fs::symlink_metadata(path).unwrap();
    Timestamp {
        sec: meta.mtime(),
        nsec: meta.mtime_nsec() as u32,
    }
}

/// The value of extended attribute `name` of `path` itself, if it has it.
fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0; 1 << 17];
    let n = rustix::fs::lgetxattr(path, name, &mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// A DEST that the user of `way` owns.
fn dest_for(work: &Work, way: &Way, i: usize) -> std::path::PathBuf {
    let dest = work.path(&format!("dest{i}"));
    fs::create_dir(&dest).unwrap();
    std::os::unix::fs::chown(&dest, Some(way.uid()), Some(way.uid())).unwrap();
    dest
}

/// Unpacks `archive` into `dest` the way `way` says, with `extra` options.
fn unpack(work: &Work, way: &Way, archive: &Path, dest: &Path, extra: &[&str]) -> Output {
    let mut cmd = work.unpack_cmd(way, archive, dest, 0o022);
    cmd.args(extra);
    let input = way.piped.then(|| fs::read(archive).unwrap());
    run(&mut cmd, input.as_deref())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A tree of every kind with times (to the nanosecond), owners, extended attributes of
/// several namespaces, a hard link, a device, setuid with an owner and setgid without one,
/// and a directory whose time is set after its contents.
fn everything() -> Vec<u8> {
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 253) as u8).collect();
    let mut e = Encoder::extended(Vec::new());
    let dir_xattrs = xattrs(&[("user.dir", "1")]);
    let mut d = Entry::dir(b"d", meta(0o750, day(1), Some(OWNER)));
    d.xattrs = Xattrs(&dir_xattrs);
    e.dir_with(&d).unwrap();
    let file_xattrs = xattrs(&[("trusted.t", "x"), ("user.k", "v")]);
    let mut f = Entry::file(b"f", meta(0o640, day(2), Some(OWNER)));
    f.xattrs = Xattrs(&file_xattrs);
    f.link_id = Some(1);
    e.file_with(&f, b"hello").unwrap();
    let s = Entry::new(b"s", Kind::Symlink, meta(0o777, day(3), Some(OWNER)));
    e.symlink(&s, b"f").unwrap();
    e.hard_link(b"h", 1).unwrap();
    let p = Entry::new(b"p", Kind::Fifo, meta(0o600, day(4), None));
    e.special(&p, Device::default()).unwrap();
    let null = Entry::new(b"null", Kind::CharDevice, meta(0o666, day(5), None));
    e.special(&null, Device { major: 1, minor: 3 }).unwrap();
    // An empty directory with an owner: entered and left, also on the threaded engine.
    e.dir_with(&Entry::dir(b"e", meta(0o2700, day(6), Some(OWNER))))
        .unwrap();
    e.pop().unwrap();
    e.file_with(&Entry::file(b"big", meta(0o644, day(7), None)), &big)
        .unwrap();
    e.file_with(
        &Entry::file(b"suid", meta(0o4755, day(8), Some(OWNER))),
        b"#!",
    )
    .unwrap();
    // No owner recorded: its bits could make it anyone's program.
    e.file_with(&Entry::file(b"sgid", meta(0o2755, day(9), None)), b"#!")
        .unwrap();
    e.finish().unwrap()
}

#[test]
fn metadata_lands_exactly_as_root_and_what_others_may_not_restore_is_warned_about() {
    let work = Work::new();
    let archive = work.archive("a.barge", &everything());
    for (i, way) in ways().iter().enumerate() {
        let what = format!("{way:?}");
        let dest = dest_for(&work, way, i);
        let out = unpack(&work, way, &archive, &dest, &[]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let d = dest.join("d");
        let at = |name: &str| d.join(name);
        let root = !way.nobody;

        assert_eq!(fs::read(at("f")).unwrap(), b"hello", "{what}");
        assert_eq!(fs::read(at("big")).unwrap().len(), 300_000, "{what}");
        assert_eq!(fs::read_link(at("s")).unwrap(), Path::new("f"), "{what}");
        let ino = |name: &str| fs::symlink_metadata(at(name)).unwrap().ino();
        assert_eq!(ino("h"), ino("f"), "{what}: h is a hard link to f");
        assert!(fs::symlink_metadata(at("p")).unwrap().file_type().is_fifo());
        let (modes, times) = (
            [("f", 0o640), ("p", 0o600), ("big", 0o644), ("sgid", 0o755)],
            [
                ("f", 2),
                ("s", 3),
                ("p", 4),
                ("e", 6),
                ("big", 7),
                ("suid", 8),
                ("sgid", 9),
            ],
        );
        for (name, want) in modes {
            assert_eq!(mode(&at(name)), want, "{what}: mode of {name}");
        }
        for (name, n) in times {
            assert_eq!(mtime(&at(name)), day(n), "{what}: time of {name}");
        }
        // The directory's own: after its contents landed.
        assert_eq!(mtime(&d), day(1), "{what}: time of d");
        assert_eq!(mode(&d), 0o750, "{what}: mode of d");
        assert_eq!(
            xattr(&at("f"), "user.k").as_deref(),
            Some(&b"v"[..]),
            "{what}"
        );
        assert_eq!(xattr(&d, "user.dir").as_deref(), Some(&b"1"[..]), "{what}");

        let owner = |path: &Path| {
            let meta = fs::symlink_metadata(path).unwrap();
            (meta.uid(), meta.gid())
        };
        let warnings = [
            "5 owners not restored",
            "1 devices not created",
            "3 setuid/setgid bits not restored",
            "1 extended attributes not restored",
        ];
        let err = stderr(&out);
        let warning_lines = err.lines().filter(|l| l.contains("warning")).count();
        if root {
            for path in [d.clone(), at("f"), at("s"), at("e"), at("suid")] {
                assert_eq!(owner(&path), (OWNER.uid, OWNER.gid), "{what}: {path:?}");
            }
            assert_eq!(mode(&at("e")), 0o2700, "{what}");
            assert_eq!(xattr(&at("f"), "trusted.t").as_deref(), Some(&b"x"[..]));
            let null = fs::symlink_metadata(at("null")).unwrap();
            assert!(null.file_type().is_char_device(), "{what}");
            assert_eq!(null.rdev(), libc::makedev(1, 3), "{what}");
            assert_eq!(mode(&at("suid")), 0o4755, "{what}");
            assert!(err.contains("1 setuid/setgid bits not"), "{what}: {err}");
            assert_eq!(warning_lines, 1, "{what}: only sgid's: {err}");
        } else {
            for path in [d.clone(), at("f"), at("s"), at("e")] {
                assert_eq!(owner(&path), (NOBODY, NOBODY), "{what}: {path:?}");
            }
            assert_eq!(mode(&at("e")), 0o700, "{what}");
            assert_eq!(xattr(&at("f"), "trusted.t"), None, "{what}");
            assert!(!at("null").exists(), "{what}: a device created by nobody");
            assert_eq!(mode(&at("suid")), 0o755, "{what}");
            // Owners are recorded on d, f, s, e and suid; setuid or setgid on suid, sgid and e.
            for warning in warnings {
                assert!(err.contains(warning), "{what}: no {warning:?} in {err}");
            }
            assert_eq!(warning_lines, warnings.len(), "{what}: one per kind: {err}");
        }
    }
}

#[test]
#[ignore = "needs root: owners can be restored only by root"]
fn touch_and_no_same_owner_turn_times_and_owners_off_and_what_they_grant() {
    require_root();
    let work = Work::new();
    let archive = work.archive("a.barge", &everything());
    for (i, way) in ways().iter().filter(|w| !w.nobody).enumerate() {
        let what = format!("{way:?}");
        let dest = dest_for(&work, way, i);
        let out = unpack(&work, way, &archive, &dest, &["-m", "--no-same-owner"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        // Only the set-id bits of owners not given (e, suid) and of none (sgid) are lost.
        let err = stderr(&out);
        let warnings: Vec<_> = err.lines().filter(|l| l.contains("warning")).collect();
        assert_eq!(warnings.len(), 1, "{what}: {err}");
        assert!(
            warnings[0].contains("3 setuid/setgid bits not"),
            "{what}: {err}"
        );
        for (name, want) in [("d/e", 0o700), ("d/suid", 0o755), ("d/sgid", 0o755)] {
            assert_eq!(mode(&dest.join(name)), want, "{what}: {name}");
        }
        for name in ["d", "d/f", "d/s", "d/e"] {
            let meta = fs::symlink_metadata(dest.join(name)).unwrap();
            assert_eq!(meta.uid(), 0, "{what}: {name}");
            assert!(
                meta.mtime() > day(100).sec,
                "{what}: {name} kept the archive's time"
            );
        }
    }
}

/// Runs `f` for every way, with a DEST the way's user owns, the sentinel `outside` next to
/// it, and makes DEST removable afterwards.
fn each_way(work: &Work, mut f: impl FnMut(&Way, &Path, &str)) {
    for (i, way) in ways().iter().enumerate() {
        let dest = dest_for(work, way, i);
        f(way, &dest, &format!("{way:?}"));
        make_removable(&dest);
    }
}

#[test]
fn names_taken_by_a_symlink_in_the_archive_never_lead_through_it() {
    let work = Work::new();
    let outside = work.path("outside");
    Sentinel::populate(&outside);
    let sentinel = Sentinel::record(&outside);
    let to = |target: &Path| {
        let mut e = Encoder::extended(Vec::new());
        e.symlink(
            &Entry::new(b"x", Kind::Symlink, Meta::default()),
            target.as_os_str().as_encoded_bytes(),
        )
        .unwrap();
        e
    };
    // A symlink, then a directory of the same name to land through it.
    let mut e = to(&outside);
    e.dir(b"x", 0o755).unwrap();
    e.file(b"secret", 0o644, b"pwned").unwrap();
    let through_dir = work.archive("dir.barge", &e.finish().unwrap());
    // A symlink to /etc, then a file of the same name.
    let mut e = to(Path::new("/etc"));
    e.file(b"x", 0o644, b"pwned").unwrap();
    let over_file = work.archive("file.barge", &e.finish().unwrap());
    each_way(&work, |way, dest, what| {
        for archive in [&through_dir, &over_file] {
            for options in [&[][..], &["--overwrite"], &["--skip-old-files"]] {
                let out = unpack(&work, way, archive, dest, options);
                assert_clean_failure(&out, &["x: duplicate name"], what);
                sentinel.assert_unchanged(what);
                assert!(!Path::new("/etc/secret").exists(), "{what}");
                let _ = fs::remove_file(dest.join("x"));
            }
        }
    });
}

#[test]
fn existing_entries_are_kept_skipped_or_replaced_and_never_written_through() {
    let work = Work::new();
    let outside = work.path("outside");
    Sentinel::populate(&outside);
    let sentinel = Sentinel::record(&outside);
    // "a" large enough to be streamed in pieces when piped, so skipping it drains them.
    let new_a = vec![b'A'; 3 << 20];
    let mut e = Encoder::extended(Vec::new());
    e.file(b"a", 0o644, &new_a).unwrap();
    e.file(b"b", 0o644, b"new b").unwrap();
    e.symlink(&Entry::new(b"l", Kind::Symlink, Meta::default()), b"target")
        .unwrap();
    e.file(b"n", 0o644, b"new n").unwrap();
    let archive = work.archive("a.barge", &e.finish().unwrap());
    each_way(&work, |way, dest, what| {
        let prepare = || {
            for name in ["a", "b", "l", "n"] {
                let _ = fs::remove_file(dest.join(name));
            }
            fs::write(dest.join("a"), b"old a").unwrap();
            symlink(outside.join("secret"), dest.join("b")).unwrap();
            fs::write(dest.join("l"), b"old l").unwrap();
            for name in ["a", "l"] {
                let path = dest.join(name);
                std::os::unix::fs::lchown(path, Some(way.uid()), Some(way.uid())).unwrap();
            }
        };
        prepare();
        let out = unpack(&work, way, &archive, dest, &[]);
        assert_clean_failure(&out, &["a: already exists", "refusing"], what);
        assert_eq!(fs::read(dest.join("a")).unwrap(), b"old a", "{what}");

        prepare();
        let out = unpack(&work, way, &archive, dest, &["--skip-old-files", "--json"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["kept"], 3, "{what}: {summary}");
        assert_eq!(fs::read(dest.join("a")).unwrap(), b"old a", "{what}");
        assert!(fs::symlink_metadata(dest.join("b")).unwrap().is_symlink());
        assert_eq!(fs::read(dest.join("l")).unwrap(), b"old l", "{what}");
        assert_eq!(
            fs::read(dest.join("n")).unwrap(),
            b"new n",
            "{what}: after the skips"
        );

        prepare();
        let out = unpack(&work, way, &archive, dest, &["--overwrite"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(fs::read(dest.join("a")).unwrap() == new_a, "{what}");
        let b = fs::symlink_metadata(dest.join("b")).unwrap();
        assert!(
            b.is_file(),
            "{what}: the symlink b is replaced, not followed"
        );
        assert_eq!(fs::read(dest.join("b")).unwrap(), b"new b", "{what}");
        assert_eq!(fs::read_link(dest.join("l")).unwrap(), Path::new("target"));
        let mut names = names_in(dest);
        names.sort();
        assert_eq!(names, ["a", "b", "l", "n"], "{what}: no temporary left");
        sentinel.assert_unchanged(what);
    });
}

/// A directory that was there keeps its own mode and time, unless entries are overwritten:
/// then it gets the archive's (as tar; an update needs it to match its source).
#[test]
fn existing_directories_get_the_archives_mode_and_time_only_with_overwrite() {
    let work = Work::new();
    let mut e = Encoder::extended(Vec::new());
    e.dir_with(&Entry::dir(b"d", meta(0o750, day(1), None)))
        .unwrap();
    e.dir_with(&Entry::dir(b"e", meta(0o710, day(2), None)))
        .unwrap();
    e.file(b"f", 0o644, b"f").unwrap();
    e.pop().unwrap();
    e.pop().unwrap();
    e.dir_with(&Entry::dir(b"empty", meta(0o705, day(3), None)))
        .unwrap();
    e.pop().unwrap();
    let archive = work.archive("a.barge", &e.finish().unwrap());
    let dirs = [
        ("d", 0o750, day(1)),
        ("d/e", 0o710, day(2)),
        ("empty", 0o705, day(3)),
    ];
    each_way(&work, |way, dest, what| {
        for (options, want_archive) in [(&[][..], false), (&["--overwrite"], true)] {
            for (dir, _, _) in dirs {
                let _ = fs::remove_file(dest.join(dir).join("f"));
                fs::create_dir_all(dest.join(dir)).unwrap();
                fs::set_permissions(dest.join(dir), fs::Permissions::from_mode(0o777)).unwrap();
                std::os::unix::fs::chown(dest.join(dir), Some(way.uid()), Some(way.uid())).unwrap();
            }
            let before: Vec<Timestamp> = dirs.iter().map(|(d, ..)| mtime(&dest.join(d))).collect();
            let out = unpack(&work, way, &archive, dest, options);
            assert!(out.status.success(), "{what} {options:?}: {}", stderr(&out));
            for ((dir, want_mode, want_time), old_time) in dirs.into_iter().zip(before) {
                // (d/e gets a new file: its time is the landing's then.)
                let (want_mode, want_time) = match want_archive {
                    true => (want_mode, want_time),
                    false if dir == "d/e" => (0o777, mtime(&dest.join(dir))),
                    false => (0o777, old_time),
                };
                let got = (mode(&dest.join(dir)), mtime(&dest.join(dir)));
                assert_eq!(got, (want_mode, want_time), "{what} {options:?}: {dir}");
            }
        }
    });
}

#[test]
#[ignore = "needs root: a directory of root's in a DEST of nobody's"]
fn overwrite_lands_into_a_directory_it_does_not_own_with_a_warning() {
    require_root();
    let work = Work::new();
    // `shared/` as DEST has it (1777), then files; an empty one with another mode.
    let mut e = Encoder::extended(Vec::new());
    e.dir_with(&Entry::dir(b"shared", meta(0o1777, day(1), None)))
        .unwrap();
    e.file(b"f", 0o644, b"f").unwrap();
    e.pop().unwrap();
    e.dir_with(&Entry::dir(b"other", meta(0o700, day(2), None)))
        .unwrap();
    e.pop().unwrap();
    e.file(b"after", 0o644, b"a").unwrap();
    let archive = work.archive("a.barge", &e.finish().unwrap());
    for (i, way) in ways().iter().filter(|w| w.nobody).enumerate() {
        let what = format!("{way:?}");
        let dest = dest_for(&work, way, i);
        for dir in ["shared", "other"] {
            fs::create_dir(dest.join(dir)).unwrap();
            fs::set_permissions(dest.join(dir), fs::Permissions::from_mode(0o1777)).unwrap();
        }
        let before = [mtime(&dest.join("shared")), mtime(&dest.join("other"))];
        let out = unpack(&work, way, &archive, &dest, &["--overwrite"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert_eq!(fs::read(dest.join("shared/f")).unwrap(), b"f", "{what}");
        assert_eq!(fs::read(dest.join("after")).unwrap(), b"a", "{what}");
        // Root's directories keep their own mode and time, with one warning for both.
        assert_eq!(mode(&dest.join("other")), 0o1777, "{what}");
        assert_eq!(mtime(&dest.join("other")), before[1], "{what}");
        let err = stderr(&out);
        assert!(
            err.contains("2 directories in DEST kept their own mode or time"),
            "{what}: {err}"
        );
        make_removable(&dest);
    }
}

#[test]
#[ignore = "needs root to mount an ext4 image"]
fn an_xattr_the_file_system_cannot_hold_is_a_warning_for_unpack_and_cp() {
    require_root();
    let work = Work::new();
    let Some(_ext4) = Mount::ext4(&work.path("ext4.img"), &work.path("ext4"), 32) else {
        return skipped("cannot make or mount an ext4 image");
    };
    // 8,000 bytes: more than the one block ext4 gives a file's attributes (ENOSPC).
    let value = "x".repeat(8000);
    let (big, small) = (xattrs(&[("user.big", &value)]), xattrs(&[("user.k", "v")]));
    let mut e = Encoder::extended(Vec::new());
    for (name, xattrs) in [(&b"big"[..], &big), (b"small", &small)] {
        let mut f = Entry::file(name, meta(0o644, day(1), None));
        f.xattrs = Xattrs(xattrs);
        e.file_with(&f, name).unwrap();
    }
    e.file(b"after", 0o644, b"after").unwrap();
    let archive = work.archive("a.barge", &e.finish().unwrap());
    let landed = |dest: &Path, out: &Output, what: &str| {
        assert!(out.status.success(), "{what}: {}", stderr(out));
        for name in ["big", "small", "after"] {
            assert_eq!(
                fs::read(dest.join(name)).unwrap(),
                name.as_bytes(),
                "{what}"
            );
        }
        assert_eq!(
            xattr(&dest.join("small"), "user.k").as_deref(),
            Some(&b"v"[..])
        );
        assert_eq!(xattr(&dest.join("big"), "user.big"), None, "{what}");
        let err = stderr(out);
        assert!(err.contains("1 extended attributes not"), "{what}: {err}");
    };
    for (i, way) in ways().iter().enumerate() {
        let what = format!("{way:?}");
        let dest = work.path(&format!("ext4/u{i}"));
        fs::create_dir(&dest).unwrap();
        std::os::unix::fs::chown(&dest, Some(way.uid()), Some(way.uid())).unwrap();
        landed(&dest, &unpack(&work, way, &archive, &dest, &[]), &what);
    }
    // cp -a from a tmpfs, which holds it, to the ext4.
    let src = work.path("src");
    fs::create_dir(&src).unwrap();
    for name in ["big", "small", "after"] {
        file(&src.join(name), name.as_bytes(), 0o644);
    }
    let set = |name: &str, attribute: &str, value: &[u8]| {
        let flags = rustix::fs::XattrFlags::empty();
        rustix::fs::setxattr(src.join(name), attribute, value, flags).unwrap();
    };
    set("big", "user.big", value.as_bytes());
    set("small", "user.k", b"v");
    let dest = work.path("ext4/cp");
    let out = run(barge(["cp", "-a"]).arg(&src).arg(&dest), None);
    landed(&dest, &out, "cp -a");
}

#[test]
fn overwrite_puts_a_directory_in_place_of_a_file_or_symlink_but_never_a_file_over_a_directory() {
    let work = Work::new();
    let dir_over_file = Archive::header().dir(b"f").file(b"in", b"new").pop();
    let dir_over_file = dir_over_file.dir(b"s").file(b"in", b"new").pop().end(4);
    let dir_over_file = work.archive("d.barge", &dir_over_file);
    let file_over_dir = Archive::header().file(b"d", b"x").end(1);
    let file_over_dir = work.archive("f.barge", &file_over_dir);
    each_way(&work, |way, dest, what| {
        // A file, a directory and a symlink to a directory outside DEST.
        let outside = work.path(&format!("outside-{}", way.uid()));
        let _ = fs::remove_dir_all(&outside);
        fs::create_dir(&outside).unwrap();
        fs::write(dest.join("f"), b"file").unwrap();
        fs::create_dir(dest.join("d")).unwrap();
        fs::write(dest.join("d/inside"), b"inside").unwrap();
        std::os::unix::fs::symlink(&outside, dest.join("s")).unwrap();
        for path in ["f", "d", "d/inside", "s"] {
            std::os::unix::fs::lchown(dest.join(path), Some(way.uid()), None).unwrap();
        }
        let out = unpack(&work, way, &file_over_dir, dest, &["--overwrite"]);
        assert_clean_failure(&out, &["d: already exists", "a directory"], what);
        assert_eq!(fs::read(dest.join("d/inside")).unwrap(), b"inside");
        assert_eq!(fs::read(dest.join("f")).unwrap(), b"file", "{what}");
        // Without --overwrite a file where a directory goes is an error; with it the
        // directory takes the name by rename, and the symlink is replaced, not followed.
        let out = unpack(&work, way, &dir_over_file, dest, &[]);
        assert_clean_failure(&out, &["f: already exists", "a file"], what);
        let out = unpack(&work, way, &dir_over_file, dest, &["--overwrite"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        for name in ["f", "s"] {
            let meta = fs::symlink_metadata(dest.join(name)).unwrap();
            assert!(meta.is_dir(), "{what}: {name} is a directory now");
            assert_eq!(fs::read(dest.join(name).join("in")).unwrap(), b"new");
        }
        assert!(
            names_in(&outside).is_empty(),
            "{what}: written through the symlink"
        );
        assert_eq!(names_in(dest), ["d", "f", "s"], "{what}: no temporary left");
    });
}

#[test]
fn a_hard_link_names_only_a_file_this_unpack_created() {
    let work = Work::new();
    let mut e = Encoder::extended(Vec::new());
    let mut f = Entry::file(b"f", Meta::with_mode(0o644));
    f.link_id = Some(0);
    e.file_with(&f, b"new").unwrap();
    e.hard_link(b"h", 0).unwrap();
    let archive = work.archive("a.barge", &e.finish().unwrap());
    each_way(&work, |way, dest, what| {
        let prepare = || {
            for name in ["f", "h"] {
                let _ = fs::remove_file(dest.join(name));
            }
            // The file that was in DEST, and a second name for it outside DEST.
            let keep = work.path("keep");
            let _ = fs::remove_file(&keep);
            fs::write(dest.join("f"), b"old").unwrap();
            std::os::unix::fs::chown(dest.join("f"), Some(way.uid()), None).unwrap();
            fs::hard_link(dest.join("f"), &keep).unwrap();
            keep
        };
        let nlink = |path: &Path| fs::metadata(path).unwrap().nlink();

        let keep = prepare();
        let out = unpack(&work, way, &archive, dest, &[]);
        assert_clean_failure(&out, &["f: already exists"], what);
        assert!(!dest.join("h").exists(), "{what}");
        assert_eq!(nlink(&keep), 2, "{what}");

        let keep = prepare();
        let out = unpack(&work, way, &archive, dest, &["--skip-old-files"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert!(!dest.join("h").exists(), "{what}: linked to what was there");
        assert_eq!(nlink(&keep), 2, "{what}");
        assert!(stderr(&out).contains("1 hard links not made"), "{what}");

        let keep = prepare();
        let out = unpack(&work, way, &archive, dest, &["--overwrite"]);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let ino = |path: &Path| fs::metadata(path).unwrap().ino();
        assert_eq!(ino(&dest.join("h")), ino(&dest.join("f")), "{what}");
        assert_ne!(ino(&dest.join("h")), ino(&keep), "{what}");
        assert_eq!(fs::read(dest.join("h")).unwrap(), b"new", "{what}");
        assert_eq!(
            (nlink(&keep), fs::read(&keep).unwrap()),
            (1, b"old".to_vec())
        );
    });
}

/// The name a hard link's file was created under is swapped for a symlink to a file outside
/// DEST while the archive is still arriving: the link is made to the symlink itself (or
/// fails), never to the file it points to.
#[test]
fn a_hard_link_does_not_follow_its_files_name_swapped_for_a_symlink() {
    let work = Work::new();
    let outside = work.path("outside");
    Sentinel::populate(&outside);
    let sentinel = Sentinel::record(&outside);
    let mut e = Encoder::extended(Vec::new());
    e.dir(b"a", 0o755).unwrap();
    let mut f = Entry::file(b"f", Meta::with_mode(0o644));
    f.link_id = Some(1);
    e.file_with(&f, b"mine").unwrap();
    e.pop().unwrap();
    e.hard_link(b"h", 1).unwrap();
    let archive = e.finish().unwrap();
    // The HARDLINK (11 bytes) and the END (9) arrive after the swap.
    let (first, rest) = archive.split_at(archive.len() - 20);
    for (i, way) in ways().iter().filter(|w| w.piped).enumerate() {
        let what = format!("{way:?}");
        let dest = dest_for(&work, way, i);
        let mut cmd = work.unpack_cmd(way, Path::new("-"), &dest, 0o022);
        let mut child = spawn(&mut cmd, Stdio::piped());
        let mut input = child.stdin.take().unwrap();
        input.write_all(first).unwrap();
        input.flush().unwrap();
        let f = dest.join("a/f");
        wait_for(&what, || f.exists());
        fs::rename(&f, dest.join("a/moved")).unwrap();
        symlink(outside.join("secret"), &f).unwrap();
        input.write_all(rest).unwrap();
        drop(input);
        let out = wait_output(child, Duration::from_secs(60), &what);
        let h = dest.join("h");
        if out.status.success() {
            let meta = fs::symlink_metadata(&h).unwrap();
            assert!(meta.is_symlink(), "{what}: h followed the swapped name");
        }
        assert_eq!(
            fs::metadata(outside.join("secret")).unwrap().nlink(),
            1,
            "{what}"
        );
        sentinel.assert_unchanged(&what);
        make_removable(&dest);
    }
}

/// Every valid vector lands as its `.json` says (as root, who may restore everything), on
/// every engine, mapped and piped: kinds, 12-bit modes, times, owners, `user.*` and
/// `trusted.*` attributes of files and directories, symlink targets, hard-link groups,
/// device numbers.
#[test]
#[ignore = "needs root: only root may restore every kind of metadata"]
fn every_valid_vector_lands_as_its_description_says() {
    use crate::vectors::{hex, vectors};
    require_root();
    let work = tempdir();
    for (i, (archive, json)) in vectors("valid").iter().enumerate() {
        let entries = json["entries"].as_array().unwrap();
        if json["options"].is_object() {
            continue;
        }
        for (k, engine) in engines().iter().enumerate() {
            for piped in [false, true] {
                let what = format!("{} ({engine}, piped {piped})", archive.display());
                let dest = work.path().join(format!("{i}-{k}-{piped}"));
                let mut cmd = barge(["unpack", "--engine", engine]);
                let out = if piped {
                    run(cmd.arg("-").arg(&dest), Some(&fs::read(archive).unwrap()))
                } else {
                    run(cmd.arg(archive).arg(&dest), None)
                };
                let too_large = |e: &serde_json::Value| {
                    e["major"].as_u64().is_some_and(|n| n > 0xfff)
                        || e["minor"].as_u64().is_some_and(|n| n > 0xf_ffff)
                };
                if entries.iter().any(too_large) {
                    // mknod would drop the high bits and make another device.
                    assert_clean_failure(&out, &["cannot create special file", "too large"], &what);
                    continue;
                }
                assert!(out.status.success(), "{what}: {}", stderr(&out));
                let path =
                    |e: &serde_json::Value| dest.join(name(&hex(e["path_hex"].as_str().unwrap())));
                for e in entries {
                    let at = path(e);
                    let meta = fs::symlink_metadata(&at).unwrap();
                    let kind = e["kind"].as_str().unwrap();
                    let what = format!("{what}: {at:?}");
                    match kind {
                        "dir" => assert!(meta.is_dir(), "{what}"),
                        "file" => {
                            let data = hex(e["data_hex"].as_str().unwrap());
                            assert!(fs::read(&at).unwrap() == data, "{what}");
                        }
                        "symlink" => {
                            let target = fs::read_link(&at).unwrap();
                            assert_eq!(
                                target.as_os_str().as_encoded_bytes(),
                                hex(e["target_hex"].as_str().unwrap()),
                                "{what}"
                            );
                        }
                        "hardlink" => {
                            let file = path(&entries[e["link_index"].as_u64().unwrap() as usize]);
                            assert_eq!(meta.ino(), fs::metadata(file).unwrap().ino(), "{what}");
                        }
                        "fifo" => assert!(meta.file_type().is_fifo(), "{what}"),
                        "char" | "block" => {
                            let ft = meta.file_type();
                            assert!(
                                if kind == "char" {
                                    ft.is_char_device()
                                } else {
                                    ft.is_block_device()
                                },
                                "{what}"
                            );
                            let (major, minor) =
                                (e["major"].as_u64().unwrap(), e["minor"].as_u64().unwrap());
                            assert_eq!(
                                meta.rdev(),
                                libc::makedev(major as u32, minor as u32),
                                "{what}"
                            );
                        }
                        other => panic!("{what}: kind {other}"),
                    }
                    if let Some(mode) = e["mode"].as_u64().filter(|_| kind != "symlink") {
                        // Set-id bits land with an owner (setid.rs).
                        let setid = if e.get("owner").is_some() { 0 } else { 0o6000 };
                        assert_eq!(meta.mode() & 0o7777, mode as u32 & !setid, "{what}: mode");
                    }
                    if let Some(mtime) = e.get("mtime") {
                        let (sec, mut nsec) = (
                            mtime["sec"].as_i64().unwrap(),
                            mtime["nsec"].as_i64().unwrap(),
                        );
                        // The kernel clamps a time to the filesystem's last one.
                        if sec == i64::MAX {
                            nsec = meta.mtime_nsec();
                        }
                        assert_eq!(
                            (meta.mtime(), meta.mtime_nsec()),
                            (sec, nsec),
                            "{what}: mtime"
                        );
                    }
                    if let Some(owner) = e.get("owner") {
                        // 0xffffffff means "unchanged" to chown: root's own then.
                        let id = |key: &str| (owner[key].as_u64().unwrap() as u32) % u32::MAX;
                        assert_eq!(
                            (meta.uid(), meta.gid()),
                            (id("uid"), id("gid")),
                            "{what}: owner"
                        );
                    }
                    let restorable = |n: &str| {
                        (n.starts_with("user.") || n.starts_with("trusted."))
                            && matches!(kind, "file" | "dir")
                    };
                    for x in e["xattrs"].as_array().into_iter().flatten() {
                        let name = String::from_utf8(hex(x["name_hex"].as_str().unwrap())).unwrap();
                        if restorable(&name) {
                            let value = hex(x["value_hex"].as_str().unwrap());
                            let got = xattr(&at, &name);
                            assert!(
                                got == Some(value),
                                "{what}: {name} is {:?}",
                                got.map(|v| v.len())
                            );
                        }
                    }
                }
            }
        }
    }
}
