//! The confined lander child (`barge::confine`), driven through the library as a server
//! would, with the built `barge` binary (or a shell wrapper that execs it) as the child: it
//! lands every engine's tree while the parent keeps its root and working directory; hostile
//! archives and destinations come back as the library's errors with nothing written outside;
//! while it waits for input it is chrooted to DEST and holds only its input, its report and
//! fds inside DEST, as root and as uid 65534; without user namespaces it refuses unless allowed
//! (and then lists what it lands, as a confined one for `recv -v`); a child that dies is an error and a dropped one is killed and reaped.

use std::fs;
use std::io::Write;
use std::os::unix::fs::{symlink, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use barge::confine::{ConfinedUnpack, Landed};
use barge::format::Limits;
use barge::root::Confinement;
use barge::tree::Kind;
use barge::unpack::Engine;

use crate::common::*;
use crate::sandbox::{deepest_userns, nested_userns, unprivileged_userns, Setup};

/// Lands `archive` through a child of `landing`.
fn land(landing: ConfinedUnpack, archive: &[u8]) -> barge::Result<Landed> {
    let mut child = landing.spawn()?;
    // A child that stops reading early breaks the pipe; its report says why.
    let _ = child.input().write_all(archive);
    child.wait()
}

/// The kind (by its name in the child's report) and message of a child's error.
fn confined_error(result: barge::Result<Landed>, what: &str) -> (String, String) {
    match result {
        Err(barge::Error::Confined(confined)) => {
            let kind = serde_json::to_value(confined.kind).unwrap();
            (kind.as_str().unwrap().to_string(), confined.message)
        }
        other => panic!("{what}: want the child's error, got {other:?}"),
    }
}

/// An executable script in `setup`'s work dir that runs `body` and then execs the binary
/// with the child's arguments (`prefix` goes before the binary).
fn wrapper(setup: &Setup, body: &str, prefix: &str) -> PathBuf {
    let script = setup.work.path().join("lander.sh");
    let text = format!(
        "#!/bin/sh\n{body}\nexec {prefix} \"{}\" \"$@\"\n",
        setup.bin.display()
    );
    executable(&script, text.as_bytes());
    script
}

#[test]
fn every_engine_lands_through_the_child_and_the_parent_stays_put() {
    let setup = Setup::new();
    let archive = fs::read(&setup.archive).unwrap();
    let before = (
        fs::read_link("/proc/self/root").unwrap(),
        std::env::current_dir().unwrap(),
    );
    // What the one-shot `barge unpack` reports for the same archive.
    let cli_dest = setup.work.path().join("dest-cli");
    let out = run_ok(
        barge(["unpack", "--json"])
            .arg(&setup.archive)
            .arg(&cli_dest),
        None,
    );
    let cli: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for (name, engine) in Engine::ALL {
        // A DEST the child creates, and gives its final mode once landed.
        let dest = setup.work.path().join(format!("new/dest-{name}"));
        let landing = ConfinedUnpack::new(&dest)
            .executable(&setup.bin)
            .engine(engine);
        let landed = land(landing, &archive).unwrap_or_else(|e| panic!("{name}: {e}"));
        let summary = serde_json::to_value(landed.summary).unwrap();
        for field in ["dirs", "files", "bytes"] {
            assert_eq!(summary[field], cli[field], "{name}: {field}");
        }
        if is_root() {
            assert_eq!(landed.confinement, Confinement::Sandboxed, "{name}");
        }
        assert_same_tree(&setup.src, &dest, umask());
        let mode = fs::metadata(&dest).unwrap().mode() & 0o7777;
        assert_eq!(mode, 0o777 & !umask(), "{name}: DEST's mode");
    }
    let after = (
        fs::read_link("/proc/self/root").unwrap(),
        std::env::current_dir().unwrap(),
    );
    assert_eq!(
        before, after,
        "the parent's root or working directory changed"
    );
}

/// What a hostile case lands, where, with which limits, and the error kind and message
/// parts it must fail with.
type Case<'a> = (
    &'a str,
    Vec<u8>,
    PathBuf,
    Option<Limits>,
    &'a str,
    &'a [&'a str],
);

#[test]
fn hostile_archives_and_destinations_fail_with_the_childs_error_and_stay_inside() {
    let setup = Setup::new();
    let outside = setup.work.path().join("outside");
    Sentinel::populate(&outside);
    let sentinel = Sentinel::record(&outside);
    let h = Archive::header;
    let good = fs::read(&setup.archive).unwrap();
    let whole = h().dir(b"a").file(b"f", &[b'x'; 100]).pop().end(2);
    let few = Limits {
        max_entries: Some(2),
        ..Limits::default()
    };
    let symlink_dest = setup.work.path().join("dest-symlink");
    symlink(&outside, &symlink_dest).unwrap();
    let trap_dest = setup.work.path().join("dest-trap");
    fs::create_dir(&trap_dest).unwrap();
    symlink(outside.join("secret"), trap_dest.join("f")).unwrap();
    let plain = |name: &str| setup.work.path().join(name);
    let cases: [Case; 5] = [
        (
            "dir '..' then a file",
            h().dir(b"..").file(b"escaped", b"x").pop().end(2),
            plain("dest-dots"),
            None,
            "format",
            &["name is '.' or '..'", "[dot-name]"],
        ),
        (
            "a symlink at DEST",
            good.clone(),
            symlink_dest,
            None,
            "not-a-directory",
            &["is a symlink, not a directory"],
        ),
        (
            "a symlink in DEST named like a file",
            h().file(b"f", b"x").end(1),
            trap_dest,
            None,
            "exists",
            &["f: already exists in the destination (as a symlink)"],
        ),
        (
            "more entries than the parent's limit",
            good,
            plain("dest-limit"),
            Some(few),
            "format",
            &["more than 2 entries", "[too-many-entries]"],
        ),
        (
            "input ending inside a file",
            whole[..whole.len() - 60].to_vec(),
            plain("dest-short"),
            None,
            "short",
            &["a/f: input ended after", "the partial file was removed"],
        ),
    ];
    for (what, archive, dest, limits, want_kind, needles) in cases {
        let next_to_dest = || {
            let mut names = names_in(setup.work.path());
            names.retain(|name| !dest.ends_with(name));
            names
        };
        let names = next_to_dest();
        let mut landing = ConfinedUnpack::new(&dest).executable(&setup.bin);
        if let Some(limits) = limits {
            landing = landing.limits(limits);
        }
        let (kind, message) = confined_error(land(landing, &archive), what);
        assert_eq!(kind, want_kind, "{what}: {message}");
        for needle in needles {
            assert!(message.contains(needle), "{what}: {message}");
        }
        sentinel.assert_unchanged(what);
        assert_eq!(
            next_to_dest(),
            names,
            "{what}: something was created next to DEST"
        );
    }
    assert!(!setup.work.path().join("escaped").exists());
    for new in ["dest-dots", "dest-limit", "dest-short"] {
        let dest = setup.work.path().join(new);
        assert!(!dest.exists(), "{new}: a failed landing left its new DEST");
    }
}

/// Starts a child through a wrapper that leaks an outside directory to it as fd 7 and runs
/// it behind `prefix` (as `owner`), feeds it half a file, and inspects it in /proc while it
/// waits for the rest: chrooted to DEST unless `unconfined` (then allowed to land so), and
/// holding its input's bell, its report pipe, the parent's stderr and fds inside DEST only.
fn inspect_waiting_child(prefix: &str, owner: u32, unconfined: bool) {
    let setup = Setup::new();
    let dest = setup.dest("dest", owner);
    let outside = setup.work.path().join("outside");
    Sentinel::populate(&outside);
    let leak = format!("exec 7<\"{}\"", outside.display());
    // The sync engine writes a file as its bytes arrive, so the partial file shows that
    // the child is landing and waits for input.
    let landing = ConfinedUnpack::new(&dest)
        .executable(wrapper(&setup, &leak, prefix))
        .engine(Engine::Sync)
        .allow_unconfined(unconfined);
    let mut child = landing.spawn().unwrap();
    let all = Archive::header()
        .dir(b"a")
        .file(b"f", &[b'x'; 100])
        .pop()
        .end(2);
    let cut = all.len() - 60; // inside the data of a/f
    child.input().write_all(&all[..cut]).unwrap();
    child.input().flush().unwrap();

    let proc = PathBuf::from(format!("/proc/{}", child.id()));
    let dest_real = dest.canonicalize().unwrap();
    wait_for("the partial file", || dest.join("a/f").exists());
    let root = if unconfined {
        Path::new("/")
    } else {
        &dest_real
    };
    assert_eq!(fs::read_link(proc.join("root")).unwrap(), root, "root");
    let our_stderr = fs::read_link("/proc/self/fd/2").unwrap();
    let mut inside = 0;
    for fd in fs::read_dir(proc.join("fd")).unwrap() {
        let fd = fd.unwrap();
        let target = fs::read_link(fd.path()).unwrap_or_default();
        let n: u32 = fd.file_name().to_str().unwrap().parse().unwrap();
        let text = target.to_string_lossy().into_owned();
        match n {
            // The input queue's bell (the queue itself is mapped, its fd closed).
            0 => assert!(text.starts_with("socket:"), "fd 0 is {text}"),
            1 => assert!(text.starts_with("pipe:"), "fd 1 is {text}"),
            2 => assert_eq!(target, our_stderr, "fd 2 is not the parent's stderr"),
            _ => {
                assert!(
                    Path::new(&text).starts_with(&dest_real),
                    "fd {n} open outside DEST: {text}"
                );
                inside += 1;
            }
        }
    }
    // The root handle, the handle of `a` and the file being written.
    assert_eq!(inside, 3, "unexpected fds inside DEST");

    child.input().write_all(&all[cut..]).unwrap();
    let landed = child.wait().unwrap();
    assert_eq!(
        landed.confinement == Confinement::Sandboxed,
        !unconfined,
        "{:?}",
        landed.confinement
    );
    assert_eq!((landed.summary.dirs, landed.summary.files), (1, 1));
    assert_eq!(fs::read(dest.join("a/f")).unwrap(), [b'x'; 100]);
    assert_eq!(fs::metadata(dest.join("a/f")).unwrap().uid(), owner);
}

#[test]
#[ignore = "needs root: the root sandbox needs root"]
fn a_child_as_root_is_a_chroot_holding_only_its_input_and_report() {
    require_root();
    inspect_waiting_child("", 0, false);
}

#[test]
#[ignore = "needs root (for setpriv)"]
fn a_child_as_user_is_a_chroot_holding_only_its_input_and_report() {
    require_root();
    if !unprivileged_userns() {
        skipped("no unprivileged user namespaces here");
        return;
    }
    let setpriv = "setpriv --reuid 65534 --regid 65534 --clear-groups";
    inspect_waiting_child(setpriv, NOBODY, false);
}

/// The command prefix that runs a child where its own `unshare` fails (see
/// [`deepest_userns`]), if this machine can simulate that.
fn without_userns() -> Option<String> {
    let nest = nested_userns(deepest_userns()?);
    let words = [nest.get_program()].into_iter().chain(nest.get_args());
    Some(
        words
            .map(|w| w.to_str().unwrap())
            .collect::<Vec<_>>()
            .join(" "),
    )
}

#[test]
fn an_unconfined_child_still_holds_only_its_input_and_report() {
    let Some(prefix) = without_userns() else {
        skipped("cannot nest user namespaces here");
        return;
    };
    inspect_waiting_child(&prefix, 0, true);
}

#[test]
fn without_user_namespaces_the_child_refuses_unless_allowed_to_land_unconfined() {
    let Some(prefix) = without_userns() else {
        skipped("cannot nest user namespaces here to simulate their absence");
        return;
    };
    let setup = Setup::new();
    let archive = fs::read(&setup.archive).unwrap();
    let executable = wrapper(&setup, "", &prefix);

    let dest = setup.dest("refused", 0);
    let landing = ConfinedUnpack::new(&dest).executable(&executable);
    let (kind, message) = confined_error(land(landing, &archive), "refused");
    assert_eq!(kind, "unconfined", "{message}");
    assert!(
        message.starts_with("sandbox unavailable (cannot create a user namespace")
            && message.ends_with("refusing to land unconfined"),
        "{message}"
    );
    assert!(names_in(&dest).is_empty(), "something landed unconfined");

    let dest = setup.dest("allowed", 0);
    let landing = ConfinedUnpack::new(&dest)
        .executable(&executable)
        .allow_unconfined(true);
    let landed = land(landing, &archive).unwrap();
    match landed.confinement {
        Confinement::Unavailable(reason) => {
            assert!(
                reason.starts_with("cannot create a user namespace"),
                "{reason}"
            )
        }
        other => panic!("want the sandbox unavailable, got {other:?}"),
    }
    assert_same_tree(&setup.src, &dest, umask());

    // Unconfined, it lists what it lands too (a name not UTF-8 included).
    let dest = setup.dest("listed", 0);
    let told = Arc::new(Mutex::new(Vec::new()));
    let seen = told.clone();
    let landing = ConfinedUnpack::new(&dest)
        .executable(&executable)
        .allow_unconfined(true)
        .listing(move |done| {
            let path = barge::TreePath::join([done.dir], done.name);
            seen.lock().unwrap().push((path.0, done.kind));
        });
    let archive = Archive::header().dir(b"d").file(b"n\n\xff", b"x").pop();
    let landed = land(landing, &archive.end(2)).unwrap();
    assert!(matches!(landed.confinement, Confinement::Unavailable(_)));
    assert_eq!(
        *told.lock().unwrap(),
        [
            (b"d".to_vec(), Kind::Dir),
            (b"d/n\n\xff".to_vec(), Kind::File)
        ]
    );
}

#[test]
fn a_child_that_dies_is_an_error_and_a_dropped_one_is_killed_and_reaped() {
    let setup = Setup::new();
    let gone = |pid: u32| !Path::new(&format!("/proc/{pid}")).exists();

    // Into an existing DEST: a kill between making a new DEST's hidden directory and forking
    // its keeper (below) would leave that directory behind.
    let existing = setup.dest("existing", 0);
    let child = ConfinedUnpack::new(&existing)
        .executable(&setup.bin)
        .spawn()
        .unwrap();
    let pid = child.id();
    let killed = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
    killed.unwrap();
    let (kind, message) = confined_error(child.wait(), "killed");
    assert_eq!(kind, "died", "{message}");
    assert_eq!(
        message,
        format!(
            "the confined lander (pid {pid}) was killed by signal 9 without reporting a result"
        )
    );
    assert!(gone(pid), "the killed child was not reaped");

    let dest = setup.work.path().join("dest");
    let landing = ConfinedUnpack::new(&dest).executable(&setup.bin);
    let mut child = landing.spawn().unwrap();
    let pid = child.id();
    child.input().write_all(&Archive::header().0).unwrap();
    // A new DEST lands hidden beside it until it is whole.
    let staged = || {
        names_in(setup.work.path())
            .iter()
            .any(|n| n.starts_with(".dest.barge-"))
    };
    // Chrooted there means its keeper runs (forked just before).
    let chrooted = || {
        fs::read_link(format!("/proc/{pid}/root"))
            .is_ok_and(|root| root.to_string_lossy().contains("/.dest.barge-"))
    };
    wait_for("the child chrooted to its staged DEST", chrooted);
    assert!(staged());
    drop(child);
    assert!(gone(pid), "the dropped child still runs or was not reaped");
    // Its keeper saw the child die, and removed what it had landed.
    wait_for("the staged DEST to go", || !staged());
    assert!(!dest.exists());
}

#[test]
fn a_compressed_input_is_decompressed_in_the_child_within_its_limits() {
    let setup = Setup::new();
    let compressed = |archive: &[u8]| zstd::encode_all(archive, 1).unwrap();
    let child = |name: &str| {
        let dest = setup.work.path().join(name);
        let landing = ConfinedUnpack::new(&dest)
            .executable(&setup.bin)
            .compressed(true);
        (landing, dest)
    };

    let (landing, dest) = child("whole");
    let archive = fs::read(&setup.archive).unwrap();
    land(landing, &compressed(&archive)).unwrap();
    assert_same_tree(&setup.src, &dest, umask());

    // Bytes that are not zstd: the child's error, nothing landed.
    let (landing, dest) = child("garbage");
    let (kind, message) = confined_error(land(landing, &archive), "not zstd");
    let want = "cannot read: zstd: Unknown frame descriptor";
    assert!(message.ends_with(want), "{kind}: {message}");
    assert!(!dest.exists(), "{message}");

    // A zstd stream cut short: the archive ends early, nothing landed.
    let (landing, dest) = child("cut");
    let whole = compressed(&archive);
    let (kind, message) = confined_error(land(landing, &whole[..whole.len() / 2]), "cut");
    assert!(
        message.ends_with("zstd: incomplete frame"),
        "{kind}: {message}"
    );
    assert!(!dest.exists(), "{message}");

    // 64 MiB of zeros in some KiB: the limits count what the decompressor gives.
    let (landing, dest) = child("bomb");
    let bomb = Archive::header().file(b"zeros", &vec![0; 64 << 20]).end(1);
    let small = compressed(&bomb);
    assert!(small.len() < 64 << 10, "{} bytes", small.len());
    let limits = Limits {
        max_bytes: Some(1 << 20),
        ..Limits::default()
    };
    let (kind, message) = confined_error(land(landing.limits(limits), &small), "bomb");
    assert!(message.contains("[too-many-bytes]"), "{kind}: {message}");
    assert!(!dest.exists(), "{message}");
}
