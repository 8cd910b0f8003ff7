//! The conventions tar users expect (issue 14): no wait for an archive typed on a terminal, a
//! forgotten DEST named as such, quiet ends when a reader goes away, one style of messages,
//! a new DEST that appears whole or not at all, size units, a progress line, a hint for tar
//! and compressed files, a manual page and completions, documented exit statuses, and JSON
//! errors.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A pseudo-terminal: its controlling side, and its terminal side (to give a child as stdin
/// or stderr).
fn terminal() -> (File, File) {
    // SAFETY: plain libc calls on fds this function owns; each result is checked.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        assert!(master >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(master), 0, "grantpt");
        assert_eq!(libc::unlockpt(master), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let side = libc::open(
            name.as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        assert!(side >= 0, "open the terminal side");
        (File::from_raw_fd(master), File::from_raw_fd(side))
    }
}

/// Reads the controlling side of a terminal until the other side is closed everywhere.
fn read_terminal(mut master: File) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The read fails (EIO) once no process holds the terminal side.
        while let Ok(n @ 1..) = master.read(&mut buf) {
            seen.extend_from_slice(&buf[..n]);
        }
        seen
    })
}

/// A directory that a run may fill, with an archive of a small tree in it (`a.barge`) and
/// that tree (`src`).
struct Work {
    dir: tempfile::TempDir,
}

impl Work {
    fn new() -> Work {
        let dir = tempdir();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let src = dir.path().join("src");
        fs::create_dir_all(src.join("sub")).unwrap();
        file(&src.join("one"), b"one\n", 0o644);
        file(&src.join("sub/two"), &[2u8; 5000], 0o600);
        pack_to(&src, dir.path().join("a.barge"));
        Work { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The names in the directory, but the archive and its tree.
    fn created(&self) -> Vec<String> {
        let mut names = names_in(self.dir.path());
        names.retain(|n| n != "a.barge" && n != "src");
        names
    }
}

/// Stderr of `out`, as text.
fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn an_archive_is_not_awaited_from_a_terminal_and_dest_is_not_created() {
    let work = Work::new();
    let cases: [&[&str]; 4] = [
        &["unpack", "-", "new1"],
        &["unpack", "new2"],
        &["list"],
        &["list", "-"],
    ];
    for args in cases {
        let what = format!("{args:?} on a terminal");
        let (_master, tty) = terminal();
        let mut cmd = barge(args);
        cmd.current_dir(work.dir.path());
        // Before: waited for input forever (and unpack had created DEST).
        let out = wait_output(spawn(&mut cmd, Stdio::from(tty)), TIMEOUT, &what);
        let needles = [
            "refusing to read an archive from a terminal",
            &format!("usage: barge {} [ARCHIVE|-]", args[0]),
        ];
        assert_clean_failure(&out, &needles, &what);
        assert_eq!(work.created(), Vec::<String>::new(), "{what}");
    }
}

#[test]
fn a_forgotten_dest_is_said_to_be_missing() {
    let work = Work::new();
    let archive = work.path("a.barge");
    // Stdin a terminal, a pipe, or nothing: the one path given is a file, not a DEST.
    let (_master, tty) = terminal();
    for (stdin, how) in [
        (Stdio::from(tty), "terminal"),
        (Stdio::piped(), "pipe"),
        (Stdio::null(), "null"),
    ] {
        let what = format!("unpack a.barge, stdin a {how}");
        let mut cmd = barge(["unpack".as_ref(), archive.as_os_str()]);
        let out = wait_output(spawn(&mut cmd, stdin), TIMEOUT, &what);
        let needles = [
            "missing DEST",
            "a.barge is a regular file, not a directory to unpack into",
            "usage: barge unpack [ARCHIVE|-] DEST",
        ];
        assert_clean_failure(&out, &needles, &what);
        assert!(!stderr(&out).contains("exists"), "{what}: {}", stderr(&out));
        assert_eq!(work.created(), Vec::<String>::new(), "{what}");
    }
}

/// `--` ends the options as anywhere else: paths after it may start with '-'.
#[test]
fn paths_after_a_double_dash_are_the_archive_and_dest() {
    let work = Work::new();
    let src = work.path("src");
    file(&src.join("f"), b"f\n", 0o644);
    run_ok(&mut pack_cmd(&src, work.path("-a.barge")), None);
    // Relative names that start with '-', in the work directory.
    let unpack = |args: &[&str], stdin: Option<&[u8]>| {
        run_ok(
            barge(["unpack"].iter().chain(args)).current_dir(work.path("")),
            stdin,
        );
    };
    unpack(&["--", "-a.barge", "-dest"], None);
    assert_eq!(fs::read(work.path("-dest/f")).unwrap(), b"f\n");
    // DEST alone after `--`: the archive comes from stdin.
    let archive = fs::read(work.path("-a.barge")).unwrap();
    unpack(&["--", "-from-stdin"], Some(&archive));
    assert_eq!(fs::read(work.path("-from-stdin/f")).unwrap(), b"f\n");
}

/// Starts `cmd`, reads `bytes` bytes of its stdout, closes it, and returns how it ended.
fn read_then_close(cmd: &mut Command, bytes: usize, what: &str) -> Output {
    let mut child: Child = spawn(cmd, Stdio::null());
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_exact(&mut vec![0u8; bytes]).unwrap();
    drop(stdout);
    wait_output(child, TIMEOUT, what)
}

#[test]
fn a_reader_that_goes_away_ends_a_listing_quietly_with_0() {
    let work = Work::new();
    let mut a = Archive::header();
    for i in 0..20_000 {
        a = a.file(format!("file-with-a-long-name-{i:06}").as_bytes(), b"");
    }
    let many = work.path("many.barge");
    fs::write(&many, a.end(20_000)).unwrap();
    let tree = work.path("tree");
    for i in 0..3000 {
        fs::create_dir_all(tree.join(format!("directory-with-a-long-name-{i:05}"))).unwrap();
    }
    let cases: [(&str, Vec<&std::ffi::OsStr>); 4] = [
        ("list", vec!["list".as_ref(), many.as_os_str()]),
        (
            "list --json",
            vec!["list".as_ref(), "--json".as_ref(), many.as_os_str()],
        ),
        (
            "du --depth 1",
            vec![
                "du".as_ref(),
                "--depth".as_ref(),
                "1".as_ref(),
                tree.as_os_str(),
            ],
        ),
        ("completions", vec!["completions".as_ref(), "bash".as_ref()]),
    ];
    for (what, args) in cases {
        let mut cmd = barge(args);
        // Before: "barge: error: ... Broken pipe (os error 32)", exit 1 (list: SIGPIPE).
        let out = read_then_close(&mut cmd, 10, what);
        assert_eq!(out.status.code(), Some(0), "{what}: {:?}", out.status);
        assert_eq!(stderr(&out), "", "{what}");
    }
}

/// Asserts every line of `text` that speaks for barge has one of its two prefixes, and that
/// the OS error and each of `once` appear at most once.
fn assert_one_style(text: &str, once: &[&str], what: &str) {
    for line in text
        .lines()
        .filter(|l| l.starts_with("barge") || l.starts_with("error"))
    {
        assert!(
            line.starts_with("barge: error: ") || line.starts_with("barge: warning: "),
            "{what}: {line}"
        );
    }
    assert!(
        !text.contains("os error"),
        "{what}: the errno only with -v: {text}"
    );
    for needle in once {
        assert_eq!(
            text.matches(needle).count(),
            1,
            "{what}: {needle} in {text}"
        );
    }
}

#[test]
fn every_message_has_one_style_and_says_things_once() {
    let work = Work::new();
    let archive = work.path("a.barge");
    let archive = archive.to_str().unwrap();
    let cases: [(&[&str], &str, &[&str]); 8] = [
        (
            &["unpack", archive, "/proc/1/none/x"],
            "No such file",
            &["/proc/1/none/x"],
        ),
        (&["list", "/none.barge"], "No such file", &["/none.barge"]),
        (&["du", "/none"], "No such file", &["/none"]),
        (
            &["pack", "/none", "-o", "/tmp/x.barge"],
            "No such file",
            &["/none"],
        ),
        (
            &["unpack", "--max-bytes", "1X", archive, "d"],
            "'1X' is not a size",
            &[],
        ),
        (&["unpack"], "required arguments were not provided", &[]),
        (&["frobnicate"], "unrecognized subcommand", &[]),
        (&["list", "--bogus"], "unexpected argument '--bogus'", &[]),
    ];
    for (args, needle, once) in cases {
        let what = format!("{args:?}");
        let out = run(&mut barge(args), None);
        // Command-line errors too: 1 (clap's 2 would say "entries were left out").
        assert_clean_failure(&out, &[needle], &what);
        assert!(stderr(&out).starts_with("barge: error: "), "{what}");
        assert_one_style(&stderr(&out), once, &what);
    }
    // unpack's usage names its arguments.
    let help = run_ok(&mut barge(["unpack", "--help"]), None).stdout;
    let help = String::from_utf8_lossy(&help);
    assert!(
        help.contains("barge unpack [OPTIONS] [ARCHIVE|-] <DEST>"),
        "{help}"
    );
    assert!(!help.contains("<PATH>"), "{help}");
}

/// As nobody, a new DEST in a directory it may not write: one clean error that names DEST
/// once.
#[test]
#[ignore = "needs root to run as nobody"]
fn as_nobody_a_dest_it_may_not_create_is_one_clean_error() {
    require_root();
    let work = Work::new();
    let archive = work.path("a.barge");
    let archive = archive.to_str().unwrap();
    let closed = work.path("closed");
    fs::create_dir(&closed).unwrap();
    fs::set_permissions(&closed, fs::Permissions::from_mode(0o755)).unwrap();
    let dest = closed.join("dest");
    let out = run(
        as_nobody().arg(bin()).args(["unpack", archive]).arg(&dest),
        None,
    );
    let what = "as nobody";
    assert_clean_failure(&out, &["Permission denied"], what);
    assert_one_style(&stderr(&out), &[dest.to_str().unwrap()], what);
}

/// The names in `dir` that a staged DEST has while it lands.
fn staged_in(dir: &Path) -> Vec<String> {
    let mut names = names_in(dir);
    names.retain(|n| n.starts_with('.') && n.contains(".barge-"));
    names
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// An archive that fails half-way: a restricted directory (0o500, with a file) lands, then a
/// file is cut short.
fn failing_archive() -> Vec<u8> {
    let whole = Archive::header()
        .raw(&[barge::format::TAG_PERM])
        .raw(&0o500u16.to_le_bytes())
        .dir(b"ro")
        .file(b"x", b"inside a read-only directory")
        .pop()
        .file(b"big", &[7u8; 100_000])
        .end(3);
    whole[..whole.len() - 50_000].to_vec()
}

#[test]
fn a_failed_unpack_into_a_new_dest_leaves_nothing() {
    let work = Work::new();
    let bad = work.path("bad.barge");
    fs::write(&bad, failing_archive()).unwrap();
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o644)).unwrap();
    let mut ways = vec![];
    for engine in ["sync", "threads", "uring"] {
        for sandbox in [true, false] {
            for piped in [false, true] {
                ways.push((engine, sandbox, piped, false));
            }
        }
    }
    if is_root() {
        ways.push(("threads", true, false, true));
        ways.push(("sync", false, true, true));
    }
    let out_dir = work.path("out");
    fs::create_dir(&out_dir).unwrap();
    fs::set_permissions(&out_dir, fs::Permissions::from_mode(0o777)).unwrap();
    for (i, &(engine, sandbox, piped, nobody)) in ways.iter().enumerate() {
        let what = format!("{engine}, sandbox {sandbox}, piped {piped}, nobody {nobody}");
        // DEST, and a DEST whose parents are missing too.
        for dest in [
            out_dir.join(format!("d{i}")),
            out_dir.join(format!("p{i}/q/d")),
        ] {
            let mut cmd = match nobody {
                true => as_nobody(),
                false => Command::new("env"),
            };
            cmd.arg(bin()).args(["unpack", "--engine", engine]);
            if !sandbox {
                cmd.arg("--no-sandbox");
            }
            let input = fs::read(&bad).unwrap();
            let out = match piped {
                true => run(cmd.arg("-").arg(&dest), Some(&input)),
                false => run(cmd.arg(&bad).arg(&dest), None),
            };
            let shown = dest.display().to_string();
            let needles = ["was not created", shown.as_str()];
            assert_clean_failure(&out, &needles, &what);
            assert_eq!(names_in(&out_dir), Vec::<String>::new(), "{what}: {shown}");
        }
    }
    // The same archive into an existing DEST keeps what landed before the failure.
    let dest = work.path("existing");
    fs::create_dir(&dest).unwrap();
    let out = run(
        &mut barge(["unpack".as_ref(), bad.as_os_str(), dest.as_os_str()]),
        None,
    );
    assert_clean_failure(&out, &["stopped"], "existing DEST");
    assert_eq!(
        fs::read(dest.join("ro/x")).unwrap(),
        b"inside a read-only directory"
    );
    assert!(!dest.join("big").exists());
    fs::set_permissions(dest.join("ro"), fs::Permissions::from_mode(0o700)).unwrap();
}

/// Starts `barge unpack - DEST` (with `extra` options), writes `first` into it, and waits
/// until a staged DEST holds `landed` (a path below it).
fn start_stalled(extra: &[&str], dest: &Path, first: &[u8], landed: &str) -> (Child, File) {
    let mut cmd = barge(["unpack"]);
    cmd.args(extra).arg("-").arg(dest);
    let mut child = spawn(&mut cmd, Stdio::piped());
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(first).unwrap();
    let parent = dest.parent().unwrap();
    let start = Instant::now();
    loop {
        let staged = staged_in(parent);
        if staged.iter().any(|s| parent.join(s).join(landed).exists()) {
            break;
        }
        assert!(start.elapsed() < TIMEOUT, "{landed} never landed");
        std::thread::sleep(Duration::from_millis(5));
    }
    (child, File::from(std::os::fd::OwnedFd::from(stdin)))
}

/// An archive of two files, and where to cut it so that the first lands and the second
/// waits for its data.
fn two_files() -> (Vec<u8>, usize) {
    let all = Archive::header()
        .file(b"first", b"1")
        .file(b"second", &[2u8; 100_000])
        .end(2);
    (all.clone(), all.len() - 60_000)
}

#[test]
fn a_new_dest_appears_whole_and_never_over_one_made_meanwhile() {
    let work = Work::new();
    let (all, cut) = two_files();
    for sandbox in [true, false] {
        let what = format!("sandbox {sandbox}");
        let extra: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
        let dest = work.path(&format!("whole-{sandbox}"));
        let (child, mut stdin) = start_stalled(extra, &dest, &all[..cut], "first");
        // Half landed: DEST is not there yet; its tree is hidden and private.
        assert!(!dest.exists(), "{what}: DEST appeared half-landed");
        let staged = staged_in(work.dir.path());
        assert_eq!(staged.len(), 1, "{what}: {staged:?}");
        assert_eq!(mode(&work.path(&staged[0])), 0o700, "{what}");
        stdin.write_all(&all[cut..]).unwrap();
        drop(stdin);
        let out = wait_output(child, TIMEOUT, &what);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        assert_eq!(fs::read(dest.join("second")).unwrap(), [2u8; 100_000]);
        assert_eq!(mode(&dest), 0o777 & !umask(), "{what}: DEST's mode");
        assert_eq!(staged_in(work.dir.path()), Vec::<String>::new(), "{what}");

        // Someone makes DEST while the unpack runs: theirs stays, ours goes.
        let dest = work.path(&format!("raced-{sandbox}"));
        let (child, mut stdin) = start_stalled(extra, &dest, &all[..cut], "first");
        fs::create_dir(&dest).unwrap();
        file(&dest.join("theirs"), b"mine", 0o644);
        stdin.write_all(&all[cut..]).unwrap();
        drop(stdin);
        let out = wait_output(child, TIMEOUT, &what);
        let needles = ["cannot move into place", "File exists", "was not created"];
        assert_clean_failure(&out, &needles, &what);
        assert_eq!(names_in(&dest), ["theirs"], "{what}");
        assert_eq!(staged_in(work.dir.path()), Vec::<String>::new(), "{what}");
    }
}

#[test]
fn a_new_dest_goes_when_the_sandboxed_lander_is_killed() {
    let work = Work::new();
    let (all, cut) = two_files();
    let dest = work.path("dest");
    let (mut child, _stdin) = start_stalled(&[], &dest, &all[..cut], "first");
    child.kill().unwrap();
    child.wait().unwrap();
    // The keeper saw the lander die (its pipe ended) and removed the staged tree.
    let start = Instant::now();
    while !staged_in(work.dir.path()).is_empty() {
        assert!(start.elapsed() < TIMEOUT, "the staged tree stayed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(!dest.exists());
}

#[test]
fn sizes_take_units_of_1024_and_bad_ones_are_named() {
    let work = Work::new();
    let archive = work.path("a.barge");
    // 5004 bytes of content.
    let refused = run(
        barge(["unpack", "--max-bytes", "4K"])
            .arg(&archive)
            .arg(work.path("d1")),
        None,
    );
    assert_clean_failure(&refused, &["--max-bytes", "[too-many-bytes]"], "4K");
    for fits in ["5K", "5KiB", "1m", "1G", "5004"] {
        let out = barge(["unpack", "--max-bytes", fits])
            .arg(&archive)
            .arg(work.path(&format!("d-{fits}")))
            .output()
            .unwrap();
        assert!(out.status.success(), "{fits}: {}", stderr(&out));
    }
    for bad in ["1KB", "1.5G", "10Q", "1 K", "K"] {
        let out = run(barge(["list", "--max-bytes", bad]).arg(&archive), None);
        let needles = [
            format!("invalid value '{bad}' for '--max-bytes <N>'"),
            format!("'{bad}' is not a size: use a whole number, with K, M, G or T"),
        ];
        let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
        assert_clean_failure(&out, &needles, bad);
    }
    // --offset takes them too: an archive after 1 KiB of something else.
    let mut padded = vec![0xeeu8; 1024];
    padded.extend(fs::read(&archive).unwrap());
    let listed = run_ok(&mut barge(["list", "--offset", "1K", "-"]), Some(&padded));
    assert!(String::from_utf8_lossy(&listed.stdout).contains("sub/two"));
}

#[test]
fn a_progress_line_shows_how_far_and_how_long() {
    let work = Work::new();
    let (all, cut) = two_files();
    let length = all.len().to_string();
    // With the total known (--length), and stderr not a terminal: only with --progress, a
    // line each second.
    let cases: [(&[&str], bool, bool); 4] = [
        (&["--progress", "--length", &length], false, true),
        (&["--length", &length], false, false),
        (&["--length", &length], true, true),
        (&["--length", &length, "--no-progress"], true, false),
    ];
    for (i, (extra, on_terminal, shown)) in cases.into_iter().enumerate() {
        let what = format!("{extra:?}, terminal {on_terminal}");
        let dest = work.path(&format!("d{i}"));
        let mut cmd = barge(["unpack"]);
        cmd.args(extra).arg("-").arg(&dest);
        let (master, tty) = terminal();
        let mut child = match on_terminal {
            true => cmd
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::from(tty))
                .spawn()
                .unwrap(),
            false => {
                drop(tty);
                spawn(&mut cmd, Stdio::piped())
            }
        };
        drop(cmd);
        let seen = read_terminal(master);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&all[..cut]).unwrap();
        std::thread::sleep(Duration::from_millis(2500));
        stdin.write_all(&all[cut..]).unwrap();
        drop(stdin);
        let out = wait_output(child, TIMEOUT, &what);
        assert!(out.status.success(), "{what}: {}", stderr(&out));
        let text = match on_terminal {
            true => String::from_utf8_lossy(&seen.join().unwrap()).into_owned(),
            false => stderr(&out),
        };
        // `0% 1 entries, 40.0 KiB (20.0 KiB/s), 0:02 left`: 100 KiB to land, stalled.
        for needle in ["0% ", " entries, ", "/s), ", " left"] {
            assert_eq!(text.contains(needle), shown, "{what}: {needle} in {text:?}");
        }
        if shown {
            let erased = text.contains("\r\x1b[K");
            assert_eq!(
                erased, on_terminal,
                "{what}: redrawn in place on a terminal only"
            );
        }
    }
}

#[test]
fn a_tar_or_compressed_file_is_named_as_such() {
    let work = Work::new();
    let mut tar = vec![0u8; 1024];
    tar[..4].copy_from_slice(b"src/");
    tar[257..263].copy_from_slice(b"ustar\0");
    // A zstd-compressed file is read through zstd: inside it, the tar is named.
    let tar_zst = zstd::encode_all(&tar[..], 3).unwrap();
    let cases: [(&str, Vec<u8>, &str); 5] = [
        ("a.tar", tar, "a tar archive"),
        (
            "a.tar.gz",
            b"\x1f\x8b\x08\x00rest".to_vec(),
            "a gzip-compressed file",
        ),
        ("a.tar.zst", tar_zst, "a tar archive"),
        (
            "a.tar.xz",
            b"\xfd7zXZ\0rest".to_vec(),
            "an xz-compressed file",
        ),
        (
            "a.tar.bz2",
            b"BZh91AY&SYrest".to_vec(),
            "a bzip2-compressed file",
        ),
    ];
    for (name, bytes, what) in cases {
        let path = work.path(name);
        fs::write(&path, &bytes).unwrap();
        let looks = format!("{name} looks like {what}, not a barge archive");
        let needles = [looks.as_str(), "`barge pack`", "[bad-magic]"];
        let out = run(&mut barge(["list".as_ref(), path.as_os_str()]), None);
        assert_clean_failure(&out, &needles, name);
        // From a pipe too, and nothing is created.
        let dest = work.path("dest");
        let out = run(
            &mut barge(["unpack".as_ref(), "-".as_ref(), dest.as_os_str()]),
            Some(&bytes),
        );
        let looks = format!("stdin looks like {what}");
        assert_clean_failure(&out, &[looks.as_str(), "was not created"], name);
        assert!(!dest.exists(), "{name}");
    }
}

#[test]
fn a_manual_page_and_completions_come_from_the_command_line_definition() {
    let work = Work::new();
    let page = run_ok(&mut barge(["man"]), None).stdout;
    let page = String::from_utf8_lossy(&page);
    assert!(page.contains(".TH barge 1"), "{page}");
    // GNU's sections; SEE ALSO names only pages that `man --dir` writes.
    for needle in [
        "barge\\-unpack",
        ".SH \"EXIT STATUS\"\n0: done.",
        "2: done, but some entries",
        ".SH \"SEE ALSO\"\nbarge\\-pack(1), barge\\-unpack(1)",
    ] {
        assert!(page.contains(needle), "{needle} not in the page");
    }
    assert!(
        !page.contains("EXTRA") && !page.contains("barge\\-help"),
        "{page}"
    );
    let dir = work.path("man");
    fs::create_dir(&dir).unwrap();
    run_ok(barge(["man", "--dir"]).arg(&dir), None);
    let pages = [
        "barge-cat.1",
        "barge-completions.1",
        "barge-cp.1",
        "barge-du.1",
        "barge-key.1",
        "barge-list.1",
        "barge-man.1",
        "barge-pack.1",
        "barge-recv.1",
        "barge-send.1",
        "barge-serve.1",
        "barge-unpack.1",
        "barge-verify.1",
        "barge.1",
    ];
    assert_eq!(names_in(&dir), pages);
    let unpack = fs::read_to_string(dir.join("barge-unpack.1")).unwrap();
    assert!(unpack.contains("\\-\\-max\\-bytes"), "{unpack}");
    let cp = fs::read_to_string(dir.join("barge-cp.1")).unwrap();
    for needle in [
        ".SH \"NOTES\"\nDestination:",
        ".SH \"EXIT STATUS\"",
        ".SH \"SEE ALSO\"\nbarge(1)",
    ] {
        assert!(cp.contains(needle), "{needle} not in {cp}");
    }
    for (shell, needle) in [
        ("bash", "complete -F _barge"),
        ("zsh", "#compdef barge"),
        ("fish", "complete -c barge"),
    ] {
        let script = run_ok(&mut barge(["completions", shell]), None).stdout;
        let script = String::from_utf8_lossy(&script);
        assert!(script.contains(needle), "{shell}: {script}");
        assert!(script.contains("max-bytes"), "{shell}: options");
    }
    // Listed in the help, with every other command in the tagline.
    let help = run_ok(&mut barge(["--help"]), None).stdout;
    let help = String::from_utf8_lossy(&help);
    assert!(
        help.contains("  completions") && help.contains("  man"),
        "{help}"
    );
    let tagline = help.lines().next().unwrap();
    for command in [
        "pack", "unpack", "list", "cat", "verify", "copy", "measure", "send",
    ] {
        assert!(tagline.contains(command), "{command} not in {tagline}");
    }
}

#[test]
fn exit_statuses_are_documented_in_every_help() {
    for command in [
        &["--help"][..],
        &["pack", "--help"],
        &["unpack", "--help"],
        &["list", "--help"],
        &["du", "--help"],
    ] {
        let help = run_ok(&mut barge(command), None).stdout;
        let help = String::from_utf8_lossy(&help);
        for needle in [
            "Exit status:",
            "0: done.",
            "1: an error stopped",
            "2: done, but some entries",
        ] {
            assert!(help.contains(needle), "{command:?}: {needle}");
        }
    }
}

#[test]
fn json_runs_report_their_errors_as_json() {
    let work = Work::new();
    let bad = work.path("bad.barge");
    fs::write(&bad, b"PK\x03\x04 not barge").unwrap();
    let json_of = |text: &[u8]| -> Value {
        let text = String::from_utf8_lossy(text);
        let line = text.lines().last().unwrap_or_default();
        serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {text}"))
    };
    let out = run(
        barge(["unpack", "--json"]).arg(&bad).arg(work.path("d")),
        None,
    );
    assert_clean_failure(&out, &["looks like a zip archive"], "unpack --json");
    let error = json_of(&out.stdout);
    assert_eq!(error["kind"], "format", "{error}");
    assert_eq!(error["code"], "bad-magic", "{error}");
    assert_eq!(error["offset"], 0, "{error}");
    assert!(
        error["error"].as_str().unwrap().contains("zip archive"),
        "{error}"
    );

    // list --json: the entries, then the error as the last line.
    let whole = fs::read(work.path("a.barge")).unwrap();
    let cut = &whole[..whole.len() - 100];
    let out = run(&mut barge(["list", "--json", "-"]), Some(cut));
    assert_clean_failure(&out, &["[truncated]"], "list --json");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().next().unwrap().contains("\"path\""),
        "{stdout}"
    );
    assert_eq!(json_of(&out.stdout)["code"], "truncated", "{stdout}");

    // pack --json: on stdout, or on stderr when stdout carries the archive.
    let out = run(
        barge(["pack", "--json", "/none", "-o"]).arg(work.path("x.barge")),
        None,
    );
    assert_clean_failure(&out, &["/none"], "pack --json -o");
    assert!(json_of(&out.stdout)["error"]
        .as_str()
        .unwrap()
        .contains("/none"));
    let out = run(&mut barge(["pack", "--json", "/none"]), None);
    assert_clean_failure(&out, &["/none"], "pack --json to stdout");
    assert!(out.stdout.is_empty());
    assert!(json_of(&out.stderr)["error"]
        .as_str()
        .unwrap()
        .contains("/none"));
    // As nobody an OS error has its errno.
    if is_root() {
        let closed = work.path("closed");
        fs::create_dir(&closed).unwrap();
        chown(&closed, Some(0), Some(0)).unwrap();
        let out = run(
            as_nobody()
                .arg(bin())
                .args(["unpack", "--json"])
                .arg(work.path("a.barge"))
                .arg(closed.join("d")),
            None,
        );
        let error = json_of(&out.stdout);
        assert_eq!(
            (&error["kind"], &error["errno"]),
            (&"io".into(), &13.into()),
            "{error}"
        );
    }
    // A signal still ends the process by it: checked elsewhere; a clean run has no error.
    let ok = run_ok(
        barge(["unpack", "--json"])
            .arg(work.path("a.barge"))
            .arg(work.path("fine")),
        None,
    );
    assert!(json_of(&ok.stdout).get("error").is_none());
    assert_eq!(ok.status.signal(), None);
}

/// One JSON summary schema (issue 33): pack, unpack and cp of one tree report each count
/// under the same key with the same value (`hard_links`, never `links`; `unchanged` for
/// what `--update` leaves as it is), and say how the landing was confined the same way.
#[test]
fn json_summaries_give_one_count_one_key() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    file(&src.join("d/a"), b"hello", 0o644);
    fs::hard_link(src.join("d/a"), src.join("b")).unwrap();
    std::os::unix::fs::symlink("a", src.join("d/l")).unwrap();
    mkfifo(&src.join("p"));
    let archive = work.path().join("a.barge");
    let pack = run_ok(
        barge(["pack", "--json", "-o"]).arg(&archive).arg(&src),
        None,
    );
    let unpacked = work.path().join("unpacked");
    let unpack = run_ok(
        barge(["unpack", "--json"]).arg(&archive).arg(&unpacked),
        None,
    );
    let copied = work.path().join("copied");
    let cp = run_ok(barge(["cp", "--json"]).arg(&src).arg(&copied), None);
    let src_contents = src.join(".");
    let mut again = barge(["cp", "-u", "--json"]);
    let again = run_ok(again.arg(&src_contents).arg(&copied), None);
    let json_of = |out: &Output| -> Value { serde_json::from_slice(&out.stdout).unwrap() };
    let (pack, unpack, cp) = (json_of(&pack), json_of(&unpack), json_of(&cp));
    for key in ["files", "bytes", "symlinks", "hard_links", "specials"] {
        let counts = [&pack[key], &unpack[key], &cp[key]];
        assert!(counts[0].is_u64(), "pack has no {key}: {pack}");
        assert!(counts.iter().all(|c| c == &counts[0]), "{key}: {counts:?}");
    }
    assert_eq!(
        (&pack["hard_links"], &pack["specials"]),
        (&1.into(), &1.into())
    );
    for summary in [&pack, &unpack, &cp] {
        assert!(summary.get("links").is_none() && summary.get("up_to_date").is_none());
    }
    assert_eq!(unpack["not_restored"], cp["not_restored"]);
    assert!(unpack["confinement"].is_string() || unpack["confinement"].is_object());
    let again = json_of(&again);
    assert_eq!(again["unchanged"], 4, "{again}");
}

/// Errors in plain words (issue 33): what could not be done and why, as GNU tools say it;
/// the system call and errno only with `-v` (and in the JSON error as `operation` and
/// `errno`). A SRC cp cannot read is counted in its JSON summary's `errors`.
#[test]
fn errors_are_plain_words_and_the_call_shows_with_v() {
    let work = tempdir();
    let missing = work.path().join("missing");
    let dest = work.path().join("dest");
    let plain = run(barge(["cp"]).arg(&missing).arg(&dest), None);
    let plain = String::from_utf8_lossy(&plain.stderr).into_owned();
    assert!(
        plain.contains("missing: cannot access: No such file or directory"),
        "{plain}"
    );
    assert!(
        !plain.contains("errno") && !plain.contains("statx"),
        "{plain}"
    );
    let verbose = run(barge(["cp", "-v"]).arg(&missing).arg(&dest), None);
    let verbose = String::from_utf8_lossy(&verbose.stderr).into_owned();
    assert!(verbose.contains("(statx, errno 2)"), "{verbose}");
    let json = run(barge(["cp", "--json"]).arg(&missing).arg(&dest), None);
    assert_eq!(json.status.code(), Some(1));
    let summary: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(summary["errors"], 1, "{summary}");
    let unpack = run(&mut barge(["unpack", "--json", "/none.barge", "d"]), None);
    let error: Value = serde_json::from_slice(&unpack.stdout).unwrap();
    assert_eq!(
        (&error["errno"], &error["kind"]),
        (&2.into(), &"io".into()),
        "{error}"
    );
    assert!(error["operation"].is_string(), "{error}");
    assert!(
        !error["error"].as_str().unwrap().contains("os error"),
        "{error}"
    );
}

/// `-q` means no warnings in every command, not only pack's (issue 33): cp as nobody warns
/// that a setuid bit was dropped, and says nothing with -q; the exit status is the same.
#[test]
#[ignore = "needs root to run as nobody"]
fn quiet_hides_the_warnings_of_every_command() {
    require_root();
    let work = tempdir();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("tool"), b"#!/bin/sh\n", 0o4755);
    let copy = |flags: &[&str], to: &str| {
        let mut cmd = as_nobody();
        cmd.arg(bin()).arg("cp").args(flags);
        run(cmd.arg(&src).arg(work.path().join(to)), None)
    };
    let loud = copy(&[], "loud");
    assert_eq!(loud.status.code(), Some(0), "{}", stderr(&loud));
    assert!(
        stderr(&loud).contains("barge: warning: 1 setuid"),
        "{}",
        stderr(&loud)
    );
    let quiet = copy(&["-q"], "quiet");
    assert_eq!(quiet.status.code(), Some(0), "{}", stderr(&quiet));
    assert_eq!(stderr(&quiet), "");
}

/// The plain build has `--mpi` too (one help, one flag table), and says which binary runs it.
#[cfg(not(feature = "mpi"))]
#[test]
fn mpi_in_the_plain_build_names_the_mpi_binary() {
    use std::ffi::OsStr;
    let work = tempdir();
    let (src, dest) = (work.path().join("src"), work.path().join("dest"));
    fs::create_dir(&src).unwrap();
    let archive = work.path().join("a.barge");
    for args in [
        vec![OsStr::new("cp"), src.as_os_str(), dest.as_os_str()],
        vec![
            "pack".as_ref(),
            src.as_os_str(),
            "-o".as_ref(),
            archive.as_os_str(),
        ],
        vec!["unpack".as_ref(), archive.as_os_str(), dest.as_os_str()],
    ] {
        let out = barge(&args[..1])
            .arg("--mpi")
            .args(&args[1..])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let text = stderr(&out);
        assert!(
            text.contains("built without MPI: run target/barge-mpi"),
            "{args:?}: {text}"
        );
        assert!(
            !dest.exists() && !archive.exists(),
            "{args:?}: nothing made"
        );
    }
}
