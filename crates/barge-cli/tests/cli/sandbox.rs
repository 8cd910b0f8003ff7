//! Layer 3, the sandbox: an unprivileged user lands inside a user namespace chrooted to DEST;
//! without user namespaces the unpack falls back with a warning and still lands; inside the
//! sandbox no fd of the outside world stays open (observed in /proc while the process waits
//! for more input).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::*;

/// A world-readable work dir holding a copy of the binary, a small tree and its archive,
/// and an empty DEST owned by `owner`.
pub struct Setup {
    pub work: tempfile::TempDir,
    pub bin: PathBuf,
    pub src: PathBuf,
    pub archive: PathBuf,
}

impl Setup {
    pub fn new() -> Setup {
        let work = tempdir();
        fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let copy = copy_bin(work.path());
        let src = work.path().join("src");
        fs::create_dir_all(src.join("dir/sub")).unwrap();
        file(&src.join("dir/file"), b"content\n", 0o644);
        file(&src.join("exec"), b"#!/bin/sh\n", 0o755);
        fs::create_dir(src.join("empty")).unwrap();
        let archive = work.path().join("a.barge");
        pack_to(&src, &archive);
        Setup {
            work,
            bin: copy,
            src,
            archive,
        }
    }

    pub fn dest(&self, name: &str, owner: u32) -> PathBuf {
        let dest = self.work.path().join(name);
        fs::create_dir(&dest).unwrap();
        chown(&dest, Some(owner), Some(owner)).unwrap();
        dest
    }
}

/// The `--json` summary line of a run.
fn summary_json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let stderr = String::from_utf8_lossy(&out.stderr);
    serde_json::from_str(line).unwrap_or_else(|e| panic!("no JSON summary ({e}): {stderr}"))
}

/// Whether an unprivileged user may create a user namespace here.
pub fn unprivileged_userns() -> bool {
    as_nobody()
        .args(["unshare", "--user", "--map-root-user", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
#[ignore = "needs root to switch to uid 65534 (nobody) with setpriv"]
fn unprivileged_user_unpacks_inside_the_sandbox() {
    require_root();
    let setup = Setup::new();
    let userns = unprivileged_userns();
    for (name, extra, piped) in [
        ("sandboxed", None, false),
        ("sandboxed-pipe", None, true),
        ("unsandboxed", Some("--no-sandbox"), false),
    ] {
        let dest = setup.dest(name, NOBODY);
        let mut cmd = as_nobody();
        cmd.arg(&setup.bin).args(["unpack", "--json"]).args(extra);
        let out = if piped {
            run(
                cmd.arg("-").arg(&dest),
                Some(&fs::read(&setup.archive).unwrap()),
            )
        } else {
            run(cmd.arg(&setup.archive).arg(&dest), None)
        };
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        let sandboxed = extra.is_none() && userns;
        let confinement = &summary_json(&out)["confinement"];
        assert_eq!(confinement == "sandboxed", sandboxed, "{name}: {stderr}");
        if extra.is_none() && !userns {
            eprintln!("\n*** user namespaces are unavailable: checked the fallback only ***\n");
            assert!(
                stderr.contains("barge: warning: sandbox unavailable"),
                "{stderr}"
            );
        }
        assert_same_tree(&setup.src, &dest, umask());
        // Files belong to the caller (mapped back from root in the namespace).
        assert_eq!(fs::metadata(dest.join("dir/file")).unwrap().uid(), NOBODY);
    }
}

/// `unshare` prefixes nesting user namespaces `levels` deep (each mapping root to its parent's
/// root), then one more mapping [`NOBODY`], so the command runs as a non-root user in a
/// namespace that may not nest any further.
pub fn nested_userns(levels: usize) -> Command {
    let mut args: Vec<&str> = Vec::new();
    for _ in 0..levels {
        args.extend(["unshare", "--user", "--map-root-user"]);
    }
    args.extend(["unshare", "--user", "--map-user=65534", "--map-group=65534"]);
    let mut cmd = Command::new(args[0]);
    cmd.args(&args[1..]);
    cmd
}

/// The deepest [`nested_userns`] that can run a command, if any: in it, barge's own
/// `unshare` fails as where user namespaces are unavailable (the kernel nests at most 32).
pub fn deepest_userns() -> Option<usize> {
    (0..40)
        .rev()
        .find(|&n| {
            nested_userns(n)
                .arg("true")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .filter(|&n| n > 0)
}

#[test]
fn without_user_namespaces_the_fallback_warns_and_lands() {
    // Simulated with the kernel's nesting limit: barge runs as uid 65534 in the deepest
    // namespace that can be created, so its own unshare fails.
    let Some(levels) = deepest_userns() else {
        skipped("cannot nest user namespaces here to simulate their absence");
        return;
    };
    let setup = Setup::new();
    let dest = setup.dest("dest", 0);
    let mut cmd = nested_userns(levels);
    cmd.arg(&setup.bin)
        .args(["unpack", "--json"])
        .arg(&setup.archive)
        .arg(&dest);
    let out = run_ok(&mut cmd, None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("barge: warning: sandbox unavailable (cannot create a user namespace"),
        "{stderr}"
    );
    let confinement = &summary_json(&out)["confinement"];
    assert!(confinement["unavailable"].is_string(), "{confinement}");
    assert_same_tree(&setup.src, &dest, umask());
}

/// Starts `unpack -` with an outside directory leaked to it as fd 7 (not close-on-exec),
/// feeds it half a file, and inspects it in /proc while it waits for the rest.
fn inspect_waiting_unpack(as_user: bool) {
    let setup = Setup::new();
    let owner = if as_user { NOBODY } else { 0 };
    let dest = setup.dest(if as_user { "dest-user" } else { "dest-root" }, owner);
    let outside = setup.work.path().join("outside");
    Sentinel::populate(&outside);
    let prefix = if as_user {
        "exec setpriv --reuid 65534 --regid 65534 --clear-groups "
    } else {
        "exec "
    };
    // The sync engine writes a file as its bytes arrive (the threaded one lands whole
    // files), so the partial file shows that it is waiting.
    let script = format!("exec 7<\"$0\"; {prefix}\"$1\" unpack --engine sync - \"$2\"");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .arg(&outside)
        .arg(&setup.bin)
        .arg(&dest)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let all = Archive::header()
        .dir(b"a")
        .file(b"f", &[b'x'; 100])
        .pop()
        .end(2);
    let cut = all.len() - 60; // inside the data of a/f
    stdin.write_all(&all[..cut]).unwrap();
    stdin.flush().unwrap();

    let proc = PathBuf::from(format!("/proc/{}", child.id()));
    let dest_real = dest.canonicalize().unwrap();
    wait_for("the partial file", || dest.join("a/f").exists());
    assert_eq!(
        fs::read_link(proc.join("root")).unwrap(),
        dest_real,
        "not chrooted to DEST"
    );
    let mut inside = 0;
    for fd in fs::read_dir(proc.join("fd")).unwrap() {
        let fd = fd.unwrap();
        let target = fs::read_link(fd.path()).unwrap_or_default();
        let n: u32 = fd.file_name().to_str().unwrap().parse().unwrap();
        let text = target.to_string_lossy().into_owned();
        if n <= 2 {
            assert!(text.starts_with("pipe:"), "fd {n} is {text}");
        } else {
            assert!(
                Path::new(&text).starts_with(&dest_real),
                "fd {n} open outside DEST: {text}"
            );
            inside += 1;
        }
    }
    // The root handle, the handle of `a` and the file being written.
    assert_eq!(inside, 3, "unexpected fds inside DEST");

    stdin.write_all(&all[cut..]).unwrap();
    drop(stdin);
    let out = wait_output(child, TIMEOUT, "unpack after inspection");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(fs::read(dest.join("a/f")).unwrap(), [b'x'; 100]);
}

#[test]
#[ignore = "needs root: the root sandbox needs root"]
fn sandbox_as_root_is_a_chroot_holding_no_outside_fd() {
    require_root();
    inspect_waiting_unpack(false);
}

#[test]
#[ignore = "needs root (for setpriv)"]
fn sandbox_as_user_is_a_chroot_holding_no_outside_fd() {
    require_root();
    if !unprivileged_userns() {
        skipped("no unprivileged user namespaces here");
        return;
    }
    inspect_waiting_unpack(true);
}
