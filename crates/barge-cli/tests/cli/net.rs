//! `barge send` / `barge recv` over loopback, real processes: round trips, keys and key
//! files, a wrong key, a relay that flips a byte or cuts the stream, every hostile archive
//! from a malicious sender, setuid bits, `--keep-open` with concurrent senders, strangers
//! flooding recv (its connection limits, the handshake's deadline, a task limit), log lines
//! each written whole (a sender's name escaped), and keys never in a log.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::fidelity::{every_kind, script, set_xattr};

/// A running `barge recv`: its ticket (when it made the key) and address.
struct Recv {
    child: Child,
    ticket: Option<String>,
    address: String,
    stdout: JoinHandle<String>,
    /// What it has written to stderr so far (a thread keeps reading).
    stderr: Arc<Mutex<String>>,
    stderr_reader: JoinHandle<()>,
}

/// What a finished `barge recv` printed.
struct Ended {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Recv {
    /// Starts `barge recv DEST --listen 127.0.0.1:0 ARGS` and reads its first lines.
    fn start(dest: &Path, args: &[&str], env_key: Option<&str>) -> Recv {
        let mut cmd = barge(["recv", "--listen", "127.0.0.1:0"]);
        cmd.arg(dest).args(args);
        if let Some(key) = env_key {
            cmd.env("BARGE_KEY", key);
        }
        Recv::run(cmd, env_key.is_none() && !args.contains(&"--key-file"))
    }

    /// Starts the `barge recv` that `cmd` runs (listening on 127.0.0.1) and reads its first
    /// lines, the ticket among them when it prints one.
    fn run(mut cmd: Command, ticket: bool) -> Recv {
        let mut child = spawn(&mut cmd, Stdio::null());
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut first = String::new();
        err.read_line(&mut first).unwrap();
        let address = first
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split([';', ' ']).next())
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_string();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let ticket = ticket.then(|| {
            let mut line = String::new();
            out.read_line(&mut line).unwrap();
            line.trim_end().to_string()
        });
        let stdout = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = out.read_to_string(&mut text);
            text
        });
        let stderr = Arc::new(Mutex::new(first));
        let filled = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let mut text = filled.lock().unwrap();
                text.push_str(&line);
                text.push('\n');
            }
        });
        Recv {
            child,
            ticket,
            address,
            stdout,
            stderr,
            stderr_reader,
        }
    }

    /// The ticket it printed.
    fn ticket(&self) -> &str {
        self.ticket.as_deref().expect("a ticket")
    }

    /// Waits until it has written `line` to stderr (a hang fails the test).
    fn wait_for_line(&self, line: &str) {
        wait_for(line, || self.stderr.lock().unwrap().contains(line));
    }

    /// Waits for it to end (a hang fails the test).
    fn wait(mut self) -> Ended {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > TIMEOUT {
                let _ = self.child.kill();
                panic!("barge recv still running after {TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.stderr_reader.join().unwrap();
        let stderr = std::mem::take(&mut *self.stderr.lock().unwrap());
        Ended {
            status,
            stdout: self.stdout.join().unwrap(),
            stderr,
        }
    }

    /// Ends a `--keep-open` receiver with SIGTERM and waits for it.
    fn stop(self) -> Ended {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
        self.wait()
    }
}

/// A well-formed key (43 characters of base64url) that no receiver of a test holds.
fn key_nobody_holds() -> String {
    "A".repeat(42) + "Q"
}

/// Runs `barge send ARGS` (stdin from `input`), under the hang timeout.
fn send(args: &[&str], input: Option<&[u8]>) -> std::process::Output {
    run(barge(["send"]).args(args), input)
}

/// The text of an output stream.
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts scripts/compare-trees finds `a` and `b` equal (the roots' times aside: DEST was
/// made by recv).
fn assert_equal_trees(a: &Path, b: &Path, what: &str) {
    let out = script(
        "compare-trees",
        ["--ignore-root-times".as_ref(), a.as_os_str(), b.as_os_str()],
    );
    assert!(
        out.status.success(),
        "{what}: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A tree of every kind of entry but a socket (which no archive holds).
fn tree(root: &Path) {
    fs::create_dir(root).unwrap();
    every_kind(root, is_root());
    fs::remove_file(root.join("special/socket")).unwrap();
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Some files of known content: `n` files of 100 KiB each, for relays to cut into.
fn files(root: &Path, n: usize) {
    fs::create_dir_all(root).unwrap();
    for i in 0..n {
        let data: Vec<u8> = (0..100_000u32).map(|b| (b * 7 + i as u32) as u8).collect();
        file(&root.join(format!("f{i:03}")), &data, 0o644);
    }
}

#[test]
fn a_tree_round_trips_with_and_without_compression() {
    let work = tempdir();
    let src = work.path().join("src");
    tree(&src);
    for (i, extra) in [&[][..], &["--compress"][..]].into_iter().enumerate() {
        let dest = work.path().join(format!("dest{i}"));
        let restore: &[&str] = match is_root() {
            true => &["--same-owner", "--setid"],
            false => &[],
        };
        let recv = Recv::start(&dest, restore, None);
        let mut args = vec![src.to_str().unwrap(), recv.ticket(), "--json"];
        args.extend(extra);
        if is_root() {
            args.push("-a");
        }
        let out = send(&args, None);
        assert!(out.status.success(), "{extra:?}: {}", text(&out.stderr));
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(summary["compressed"], !extra.is_empty(), "{summary}");
        assert!(summary["landed"]["summary"]["files"].as_u64().unwrap() > 10);
        let ended = recv.wait();
        assert!(ended.status.success(), "{}", ended.stderr);
        assert!(ended.stderr.contains(": landed "), "{}", ended.stderr);
        assert_equal_trees(&src, &dest, &format!("round trip {extra:?}"));
    }
}

/// `send --archive` of a version 2 archive, raw or zstd, from a file and from stdin, with
/// and without `--compress`: the receiver detects the format and lands the tree.
#[test]
fn a_version_2_archive_is_sent_as_it_is_and_lands() {
    let work = tempdir();
    let src = work.path().join("src");
    tree(&src);
    for (i, format) in [["--format", "2"], ["--zstd", "--format=2"]]
        .iter()
        .enumerate()
    {
        let archive = work.path().join(format!("a{i}.barge"));
        let all = if is_root() { &["-a"][..] } else { &[][..] };
        run_ok(pack_cmd(&src, &archive).args(format).args(all), None);
        let bytes = std::fs::read(&archive).unwrap();
        for (j, (from, compress)) in [("file", false), ("-", true)].into_iter().enumerate() {
            let what = format!("{format:?} from {from}, compress {compress}");
            let dest = work.path().join(format!("dest{i}{j}"));
            let restore: &[&str] = match is_root() {
                true => &["--same-owner", "--setid"],
                false => &[],
            };
            let recv = Recv::start(&dest, restore, None);
            let path = archive.to_str().unwrap();
            let mut args = vec!["--from-archive", if from == "-" { "-" } else { path }];
            args.push(recv.ticket());
            if compress {
                args.push("--compress");
            }
            let out = send(&args, (from == "-").then_some(&bytes[..]));
            assert!(out.status.success(), "{what}: {}", text(&out.stderr));
            let ended = recv.wait();
            assert!(ended.status.success(), "{what}: {}", ended.stderr);
            assert_equal_trees(&src, &dest, &what);
        }
    }
}

#[test]
fn key_files_and_the_environment_carry_the_key_and_loose_files_are_refused() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 3);
    let key_file = work.path().join("key");
    let key_path = key_file.to_str().unwrap();
    // A key file of its own, readable by its owner only; never made over a file.
    run_ok(&mut barge(["key", key_path]), None);
    assert_eq!(
        fs::metadata(&key_file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let key = fs::read_to_string(&key_file)
        .unwrap()
        .trim_end()
        .to_string();
    assert_eq!(key.len(), 43, "{key}");
    let again = run(&mut barge(["key", key_path]), None);
    assert_clean_failure(&again, &["exists"], "a key file over a file");
    assert_eq!(fs::read_to_string(&key_file).unwrap(), format!("{key}\n"));

    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--key-file", key_path], None);
    assert!(recv.ticket.is_none());
    let out = send(
        &[src.to_str().unwrap(), &recv.address, "--key-file", key_path],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(
        ended.status.success() && ended.stdout.is_empty(),
        "{}",
        ended.stderr
    );
    assert_equal_trees(&src, &dest, "key file");

    // The environment, on both ends.
    let dest = work.path().join("by-env");
    let recv = Recv::start(&dest, &[], Some(&key));
    let out = run(
        barge(["send", src.to_str().unwrap(), &recv.address]).env("BARGE_KEY", &key),
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(recv.wait().status.success());
    assert_equal_trees(&src, &dest, "BARGE_KEY");

    // Readable by others, or not a key: refused on both ends, before any connection.
    fs::set_permissions(&key_file, fs::Permissions::from_mode(0o644)).unwrap();
    let refused = send(
        &[src.to_str().unwrap(), "127.0.0.1:9", "--key-file", key_path],
        None,
    );
    assert_clean_failure(&refused, &["chmod 600"], "0644 key file (send)");
    let refused = run(
        barge(["recv", "--listen", "127.0.0.1:0", "--key-file", key_path])
            .arg(work.path().join("never")),
        None,
    );
    assert_clean_failure(&refused, &["chmod 600"], "0644 key file (recv)");
    fs::write(&key_file, "correct horse battery staple\n").unwrap();
    fs::set_permissions(&key_file, fs::Permissions::from_mode(0o600)).unwrap();
    let refused = send(
        &[src.to_str().unwrap(), "127.0.0.1:9", "--key-file", key_path],
        None,
    );
    assert_clean_failure(&refused, &["not a passphrase"], "a passphrase");
    let no_key = send(&[src.to_str().unwrap(), "127.0.0.1:9"], None);
    assert_clean_failure(&no_key, &["no key"], "no key");
}

#[test]
fn a_sender_with_no_receiver_says_it_could_not_connect() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 1);
    // A port just closed: nothing listens there.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let ticket = format!("127.0.0.1:{port}#{}", key_nobody_holds());
    let out = send(&[src.to_str().unwrap(), &ticket], None);
    let said = format!("127.0.0.1:{port}: connect failed: Connection refused");
    assert_clean_failure(&out, &[&said], "no receiver");
}

#[test]
fn a_wrong_key_lands_nothing_and_the_right_sender_still_gets_through() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 2);
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &[], None);
    let ticket = recv.ticket().to_string();
    let (address, key) = ticket.split_once('#').unwrap();
    // A connection that says nothing (a health check) is logged as that, not as a refusal.
    drop(TcpStream::connect(address).unwrap());
    let wrong = format!("{address}#{}", key_nobody_holds());
    // Over four connections: the later ones open only once the first authenticated.
    let out = send(&[src.to_str().unwrap(), &wrong, "--connections", "4"], None);
    assert_clean_failure(
        &out,
        &["the receiver refused the key, or is not a barge receiver"],
        "wrong key",
    );
    std::thread::sleep(Duration::from_millis(300));
    assert!(names_in(&dest).is_empty(), "landed: {:?}", names_in(&dest));
    let out = send(&[src.to_str().unwrap(), &ticket], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    assert_eq!(
        ended.stderr.matches("refused after").count(),
        1,
        "{}",
        ended.stderr
    );
    let silent = "the connection closed before the handshake, having sent nothing";
    assert!(ended.stderr.contains(silent), "{}", ended.stderr);
    assert_eq!(
        ended.stderr.matches("failed after").count(),
        1,
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("authentication failed"),
        "{}",
        ended.stderr
    );
    for output in [&ended.stderr, &ended.stdout, &text(&out.stderr)] {
        assert!(!output.contains(key), "the key was printed: {output}");
    }
    assert_equal_trees(&src, &dest, "after a wrong key");
}

/// What a [`relay`] does to the sender's direction of its connections.
#[derive(Clone, Copy)]
struct Harm {
    /// The connection harmed, by order of arrival (0: the transfer's first).
    connection: usize,
    /// Harms instead whichever connection from `connection` on reaches `offset` first (how
    /// much each later lane carries depends on when it joined).
    or_later: bool,
    /// Where in its stream.
    offset: u64,
    /// Ends both sides of it there instead of flipping the byte.
    cut: bool,
    /// Forwards the first connection slowly after its first [`FAST_START`] bytes (~30 MB/s),
    /// and every connection at ~3 MB/s until all have carried data, so the sender must
    /// spread the data over its later connections however late a loaded machine opens them.
    slow_first: bool,
    /// Holds what the first connection's sender sends after the handshake's first message
    /// (its HELLO, then data) for that long: the later connections' HELLOs come first.
    hold_first: Option<Duration>,
    /// Holds the receiver's direction of the first connection after its first message (the
    /// handshake's answer) until the sender has sent [`UNANSWERED`] bytes on it.
    hold_answer: bool,
    /// Holds the receiver's first message (the handshake's answer) on every later
    /// connection for that long.
    hold_later: Option<Duration>,
}

/// What [`Harm::slow_first`] forwards at full speed.
const FAST_START: u64 = 512 << 10;
/// Bytes after which a later connection counts as carrying data.
const CARRYING: u64 = 16 << 10;

/// What a sender must send without a word from the receiver after the handshake, in
/// [`Harm::hold_answer`].
const UNANSWERED: u64 = 1 << 20;

impl Harm {
    /// Harms nothing.
    fn none() -> Harm {
        Harm {
            connection: 0,
            or_later: false,
            offset: u64::MAX,
            cut: false,
            slow_first: false,
            hold_first: None,
            hold_answer: false,
            hold_later: None,
        }
    }
}

/// A relay between sender and receiver for `connections` connections, harming one as
/// `harm` says (an offset past the end harms nothing).
fn relay(to: &str, connections: usize, harm: Harm) -> (String, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let to = to.to_string();
    let handle = std::thread::spawn(move || {
        let shared = Arc::new(Shared {
            harmed: AtomicBool::new(false),
            carrying: AtomicUsize::new(0),
            others: connections - 1,
        });
        let forwards: Vec<_> = (0..connections)
            .map(|i| {
                let (from_sender, _) = listener.accept().unwrap();
                let to_receiver = TcpStream::connect(&to).unwrap();
                let shared = shared.clone();
                std::thread::spawn(move || forward(from_sender, to_receiver, i, harm, &shared))
            })
            .collect();
        for forward in forwards {
            forward.join().unwrap();
        }
    });
    (address, handle)
}

/// What a relay's connections share.
struct Shared {
    /// A connection was harmed.
    harmed: AtomicBool,
    /// Later connections that have carried a chunk of data.
    carrying: AtomicUsize,
    /// The later connections expected.
    others: usize,
}

/// Copies one connection both ways, harming the sender's direction of connection `i` as
/// `harm` says, unless another connection was.
fn forward(from_sender: TcpStream, to_receiver: TcpStream, i: usize, harm: Harm, shared: &Shared) {
    let (mut a, mut b) = (
        from_sender.try_clone().unwrap(),
        to_receiver.try_clone().unwrap(),
    );
    // What the sender sent on this connection (u64::MAX once it ended).
    let sent = Arc::new(AtomicU64::new(0));
    let sender_sent = sent.clone();
    let back = std::thread::spawn(move || {
        if let (1.., Some(hold)) = (i, harm.hold_later) {
            std::thread::sleep(hold);
        }
        if i == 0 && harm.hold_answer {
            let mut first = vec![0; 1 << 16];
            let n = b.read(&mut first).unwrap_or(0);
            a.write_all(&first[..n]).unwrap();
            while sender_sent.load(Ordering::SeqCst) < UNANSWERED {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let _ = std::io::copy(&mut b, &mut a);
        let _ = a.shutdown(Shutdown::Write);
    });
    let (mut from, mut to) = (from_sender, to_receiver);
    let mine = i == harm.connection || (harm.or_later && i > harm.connection);
    let offset = if mine { harm.offset } else { u64::MAX };
    let mut seen = 0u64;
    let mut held = false;
    let mut buf = vec![0; 1 << 16];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if harm.slow_first {
            let all = shared.carrying.load(Ordering::SeqCst) >= shared.others;
            match (i, seen) {
                (0, FAST_START..) => {
                    std::thread::sleep(Duration::from_millis(if all { 2 } else { 20 }))
                }
                (1.., CARRYING..) if !all => std::thread::sleep(Duration::from_millis(20)),
                _ => {}
            }
        }
        // Past the handshake and HELLO (some hundred bytes): a chunk of data.
        if i > 0 && seen < CARRYING && seen + n as u64 >= CARRYING {
            shared.carrying.fetch_add(1, Ordering::SeqCst);
        }
        // The handshake's first message came alone (the sender waits for the answer): what
        // follows is its HELLO.
        if let (0, 1.., Some(hold), false) = (i, seen, harm.hold_first, held) {
            held = true;
            std::thread::sleep(hold);
        }
        let range = seen..seen + n as u64;
        if range.contains(&offset) && !shared.harmed.swap(true, Ordering::SeqCst) {
            let at = (offset - seen) as usize;
            if harm.cut {
                let _ = to.write_all(&buf[..at]);
                let _ = to.shutdown(Shutdown::Both);
                let _ = from.shutdown(Shutdown::Both);
                break;
            }
            buf[at] ^= 0x20;
        }
        seen += n as u64;
        sent.store(seen, Ordering::SeqCst);
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    sent.store(u64::MAX, Ordering::SeqCst);
    let _ = to.shutdown(Shutdown::Write);
    let _ = back.join();
}

/// Every file in `dest` is whole: the same bytes as in `src`.
fn assert_whole_files(src: &Path, dest: &Path, what: &str) {
    for name in names_in(dest) {
        assert!(
            same_content(&src.join(&name), &dest.join(&name)),
            "{what}: {name} differs from its source"
        );
    }
}

/// Files of 100 kB sent through a [`relay`]: 40, or over several connections 200 (the
/// first connection's socket buffers can take 4 MiB before the sender must use another).
fn files_for(connections: usize) -> usize {
    match connections {
        1 => 40,
        _ => 200,
    }
}

/// Sends [`files_for`] `connections` files in `work` over `connections` through a
/// [`relay`] that does `harm`: both ends must fail saying `said` (the sender adding how to
/// finish with --update), leaving some of the files landed, each whole; then the same
/// receiver, waiting with its ticket, takes the `send --update` that finishes the tree.
/// Returns SRC, DEST, the names landed before the retry and the retry's summary.
fn through_relay(
    work: &Path,
    connections: usize,
    harm: Harm,
    said: &str,
) -> (PathBuf, PathBuf, Vec<String>, serde_json::Value) {
    let src = work.join("src");
    let n = files_for(connections);
    files(&src, n);
    let dest = work.join("dest");
    let recv = Recv::start(&dest, &[], None);
    let ticket = recv.ticket().to_string();
    let (address, key) = ticket.split_once('#').unwrap();
    let (via, relay) = relay(address, connections, harm);
    let count = connections.to_string();
    let out = send(
        &[
            src.to_str().unwrap(),
            &format!("{via}#{key}"),
            "--connections",
            &count,
        ],
        None,
    );
    let hint = "run the same send again with --update to send the rest";
    assert_clean_failure(&out, &[said, hint], &format!("{said} (sender)"));
    relay.join().unwrap();
    // The receiver's lander may still be landing what came before the cut.
    let waited = "waiting 30 s (--timeout) for a retry with the same key";
    recv.wait_for_line(waited);
    let landed = names_in(&dest);
    assert!(landed.len() < n, "all landed: {landed:?}");
    assert_whole_files(&src, &dest, said);
    // The one-shot receiver still holds its ticket.
    let out = send(
        &[src.to_str().unwrap(), &ticket, "--update", "--json"],
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    for needle in [said, waited, "): landed "] {
        assert!(ended.stderr.contains(needle), "{needle}: {}", ended.stderr);
    }
    assert_equal_trees(&src, &dest, "after --update");
    let summary = serde_json::from_slice(&out.stdout).unwrap();
    (src, dest, landed, summary)
}

/// `harm` on the first of one connection, at `offset`.
fn on_first(offset: u64, cut: bool) -> Harm {
    Harm {
        offset,
        cut,
        ..Harm::none()
    }
}

/// `harm` on whichever later connection of four first carries `offset` bytes, the first
/// slowed so the later ones carry data.
fn on_a_later(offset: u64, cut: bool) -> Harm {
    Harm {
        connection: 1,
        or_later: true,
        offset,
        cut,
        slow_first: true,
        ..Harm::none()
    }
}

#[test]
fn a_flipped_byte_is_tampering_on_both_ends_and_leaves_only_whole_files() {
    // Well after the handshake, inside some file's data.
    through_relay(tempdir().path(), 1, on_first(1_500_000, false), "tampered");
    // On a later connection of the transfer.
    through_relay(tempdir().path(), 4, on_a_later(200_000, false), "tampered");
}

#[test]
fn a_cut_stream_is_truncation_and_update_finishes_it() {
    for (connections, harm) in [
        (1, on_first(2_000_000, true)),
        (4, on_a_later(3_000_000, true)),
    ] {
        let work = tempdir();
        let (src, dest, landed, summary) =
            through_relay(work.path(), connections, harm, "truncated");
        assert!(
            !landed.is_empty(),
            "nothing landed before the cut over {connections}"
        );
        // Only what had not landed whole was sent again, to the same receiver.
        let resent = summary["packed"]["files"].as_u64().unwrap();
        let n = files_for(connections);
        assert_eq!(resent as usize, n - landed.len(), "{summary}");

        // Once more: the tree is as listed, so not even a directory is sent or landed.
        let recv = Recv::start(&dest, &[], None);
        let out = send(
            &[src.to_str().unwrap(), recv.ticket(), "--update", "--json"],
            None,
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ended = recv.wait();
        assert!(
            ended.stderr.contains("landed 0 dirs, 0 files"),
            "{}",
            ended.stderr
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let packed = &summary["packed"];
        let sent = [&packed["dirs"], &packed["files"], &packed["unchanged"]];
        assert_eq!(
            sent.map(|v| v.as_u64().unwrap()),
            [0, 0, n as u64],
            "{summary}"
        );
        assert_equal_trees(&src, &dest, "after a second --update");
    }
}

#[test]
fn a_cut_transfer_nobody_retries_ends_recv_after_its_timeout_and_a_refused_one_at_once() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, files_for(1));
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--timeout", "2"], None);
    let ticket = recv.ticket().to_string();
    let (address, key) = ticket.split_once('#').unwrap();
    let (via, relay) = relay(address, 1, on_first(2_000_000, true));
    let out = send(&[src.to_str().unwrap(), &format!("{via}#{key}")], None);
    assert_clean_failure(&out, &["truncated", "--update"], "cut");
    relay.join().unwrap();
    let ended = recv.wait();
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    let waited = "waiting 2 s (--timeout) for a retry with the same key: on the sending host \
                  run barge send DIR TICKET (the line above) --update";
    assert!(ended.stderr.contains(waited), "{}", ended.stderr);

    // A transfer the receiver refuses would fail again: recv ends with it, and the sender
    // is not told to retry.
    let recv = Recv::start(&dest, &[], None);
    let out = send(
        &["--from-archive", "-", recv.ticket()],
        Some(b"not an archive"),
    );
    assert_clean_failure(&out, &["the receiver"], "refused");
    assert!(
        !text(&out.stderr).contains("--update"),
        "{}",
        text(&out.stderr)
    );
    let ended = recv.wait();
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    assert!(!ended.stderr.contains("waiting"), "{}", ended.stderr);
}

/// recv listens on loopback unless told otherwise, as serve does, and says how to listen
/// for other hosts.
#[test]
fn recv_listens_on_this_host_only_by_default_as_serve_does() {
    for command in ["recv", "serve"] {
        let out = run(&mut barge([command, "--help"]), None);
        let help = text(&out.stdout);
        let listen = &help[help.find("--listen").unwrap()..];
        let default = &listen[listen.find("[default: ").unwrap()..];
        assert!(
            default.starts_with("[default: 127.0.0.1:"),
            "{command}: {default}"
        );
    }
    let recv = Recv::start(&tempdir().path().join("dest"), &[], None);
    let port = recv.address.rsplit(':').next().unwrap().to_string();
    let ended = recv.stop();
    let told = format!("(this host only: --listen 0.0.0.0:{port} receives from other hosts)");
    assert!(ended.stderr.contains(&told), "{}", ended.stderr);
}

#[test]
fn a_dry_run_prints_what_would_be_sent_and_sends_nothing() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src.join("a"), 2);
    file(&src.join("top"), b"top", 0o644);
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let lines = |out: &std::process::Output| {
        assert!(out.status.success(), "{}", text(&out.stderr));
        let mut lines: Vec<String> = text(&out.stdout).lines().map(String::from).collect();
        lines.sort();
        lines
    };

    // Into an empty DEST everything would be sent; the one-shot receiver lands nothing
    // and keeps waiting for the transfer itself.
    let recv = Recv::start(&dest, &[], None);
    let out = send(&[s, recv.ticket(), "--dry-run"], None);
    let all = ["copy a", "copy a/f000", "copy a/f001", "copy top"];
    assert_eq!(lines(&out), all);
    assert!(names_in(&dest).is_empty(), "landed: {:?}", names_in(&dest));
    let out = send(&[s, recv.ticket()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    let said = "dry run, told of 0 entries of DEST";
    assert!(ended.stderr.contains(said), "{}", ended.stderr);
    assert_equal_trees(&src, &dest, "after a dry run and the transfer");

    // An update's dry run names what DEST lacks or has differently, and changes nothing.
    file(&src.join("a/f001"), b"changed", 0o644);
    file(&src.join("a/new"), b"new", 0o644);
    fs::create_dir(src.join("d")).unwrap();
    file(&src.join("d/y"), b"y", 0o644);
    let recv = Recv::start(&dest, &["--json"], None);
    let out = send(&[s, recv.ticket(), "--dry-run", "-u"], None);
    let changed = ["copy a/new", "copy d", "copy d/y", "replace a/f001"];
    assert_eq!(lines(&out), changed);
    let out = send(&[s, recv.ticket(), "--dry-run", "--update", "--json"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let counts = ["dry_run", "files", "unchanged"].map(|k| summary[k].to_string());
    assert_eq!(counts, ["true", "3", "2"], "{summary}");
    assert_eq!(fs::read(dest.join("a/f001")).unwrap().len(), 100_000);
    assert!(!dest.join("a/new").exists() && !dest.join("d").exists());

    let out = send(&[s, recv.ticket(), "--update"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    let logged: Vec<serde_json::Value> = (ended.stdout.lines())
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let dry = logged
        .iter()
        .filter(|l| l["dry_run"] == true && l["listed"] == 3);
    assert_eq!((dry.count(), logged.len()), (2, 3), "{}", ended.stdout);
    assert_equal_trees(&src, &dest, "after the update's dry runs and the update");

    // A file where DEST has a directory: the receiver would refuse it (it removes nothing
    // whole), and the dry run says so; a directory where DEST has a file replaces it.
    fs::remove_dir_all(src.join("d")).unwrap();
    file(&src.join("d"), b"d", 0o644);
    fs::remove_file(src.join("a/new")).unwrap();
    fs::create_dir(src.join("a/new")).unwrap();
    let recv = Recv::start(&dest, &[], None);
    let out = send(&[s, recv.ticket(), "--dry-run", "--update"], None);
    let said = "d: DEST has a directory there, which the receiver refuses to replace";
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains(said), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "replace a/new\n");
    assert!(recv.stop().stderr.contains("dry run, told of 5 entries"));

    // Without the conflict the update lands, the directory in place of the file.
    fs::remove_file(src.join("d")).unwrap();
    fs::create_dir(src.join("d")).unwrap();
    file(&src.join("d/y"), b"y", 0o644);
    let recv = Recv::start(&dest, &[], None);
    let out = send(&[s, recv.ticket(), "--update"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(recv.wait().status.success());
    assert!(dest.join("a/new").is_dir());
    assert_equal_trees(&src, &dest, "after a directory replaced a file");
}

/// `send DIR/` sends DIR's contents to DEST's top, as `send DIR` does; among several DIRs,
/// each of which lands as DEST/NAME, a trailing '/' is refused before anything is sent.
#[test]
fn a_trailing_slash_sends_the_contents_and_is_refused_among_several_dirs() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src.join("a"), 2);
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &[], None);
    let contents = format!("{}/", src.display());
    let other = work.path().join("src/a");
    let out = send(&[&contents, other.to_str().unwrap(), recv.ticket()], None);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let said = "a trailing '/' asks for the directory's contents";
    assert!(text(&out.stderr).contains(said), "{}", text(&out.stderr));
    let out = send(&[&contents, recv.ticket()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(recv.wait().status.success());
    assert_equal_trees(&src, &dest, "SRC/");
}

/// `send --update --delete` removes what DEST has and SRC lacks (a file, a directory with
/// what is below it, a directory where SRC now has a file) before it lands, keeps what
/// `--exclude` matches, and says first what it would remove in a dry run.
#[test]
fn send_delete_removes_what_src_lacks_but_not_excluded_entries() {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src.join("a"), 2);
    fs::create_dir_all(src.join("old/deep")).unwrap();
    file(&src.join("old/deep/f"), b"f", 0o644);
    file(&src.join("gone"), b"gone", 0o644);
    fs::create_dir(src.join("x")).unwrap();
    file(&src.join("x/in"), b"in", 0o644);
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let recv = Recv::start(&dest, &[], None);
    assert!(send(&[s, recv.ticket()], None).status.success());
    assert!(recv.wait().status.success());

    fs::remove_dir_all(src.join("old")).unwrap();
    fs::remove_file(src.join("gone")).unwrap();
    fs::remove_file(src.join("a/f001")).unwrap();
    fs::remove_dir_all(src.join("x")).unwrap();
    file(&src.join("x"), b"now a file", 0o644);
    file(&dest.join("kept.tmp"), b"excluded, in DEST only", 0o644);
    let recv = Recv::start(&dest, &[], None);
    let args = ["-u", "--delete", "--exclude", "*.tmp"];
    let dry: Vec<&str> = [s, recv.ticket(), "--dry-run"].into();
    let out = send(&[&dry[..], &args[..]].concat(), None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    let deletes: Vec<&str> = said.lines().filter(|l| l.starts_with("delete ")).collect();
    assert_eq!(
        deletes,
        ["delete a/f001", "delete gone", "delete old", "delete x"],
        "{said}"
    );
    assert!(said.ends_with("replace x\n"), "{said}");
    assert!(dest.join("gone").exists(), "a dry run removed something");
    let out = send(
        &[&[s, recv.ticket(), "--json"][..], &args[..]].concat(),
        None,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["deleted"], 4, "{summary}");
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    assert!(ended.stderr.contains(", deleted 4 in "), "{}", ended.stderr);
    fs::remove_file(dest.join("kept.tmp")).unwrap();
    assert_equal_trees(&src, &dest, "after --update --delete");
}

/// `send --update --delete` removes the special files DEST has and SRC lacks, as `rsync
/// --delete` does: a fifo and a socket (a directory's and the top's), and with `devices`
/// (as root) a device node; a fifo SRC has too stays.
fn send_delete_removes_special_files(devices: bool) {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    file(&src.join("d/f"), b"f", 0o644);
    mkfifo(&src.join("kept"));
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let restore: &[&str] = if devices { &["--same-owner"] } else { &[] };
    let recv = Recv::start(&dest, restore, None);
    assert!(send(&[s, recv.ticket()], None).status.success());
    assert!(recv.wait().status.success());

    mkfifo(&dest.join("d/fifo"));
    drop(UnixListener::bind(dest.join("socket")).unwrap());
    let mut gone = vec!["delete d/fifo", "delete socket"];
    if devices {
        let dev = rustix::fs::makedev(1, 3);
        let (kind, mode) = (
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o600),
        );
        rustix::fs::mknodat(rustix::fs::CWD, dest.join("d/null"), kind, mode, dev).unwrap();
        gone.insert(1, "delete d/null");
    }
    let recv = Recv::start(&dest, restore, None);
    let out = send(&[s, recv.ticket(), "-u", "--delete", "--dry-run"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert_eq!(said.lines().collect::<Vec<_>>(), gone, "{said}");
    let out = send(&[s, recv.ticket(), "-u", "--delete", "--json"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["deleted"], gone.len(), "{summary}");
    // Nothing else differs: the fifo SRC has is left out, and so is d.
    assert_eq!(summary["packed"]["unchanged"], 2, "{summary}");
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    assert_equal_trees(&src, &dest, "after --update --delete");
}

#[test]
fn send_delete_removes_a_fifo_and_a_socket_src_lacks() {
    send_delete_removes_special_files(false);
}

#[test]
#[ignore = "needs root to make a device node"]
fn send_delete_removes_a_device_node_src_lacks() {
    require_root();
    send_delete_removes_special_files(true);
}

/// `send --update` compares special files as it does the other kinds: a fifo that became
/// a regular file in SRC, one whose mode changed and one left as it was; as root with `-a`,
/// a device whose number changed and one left as it was.
#[test]
fn send_update_replaces_a_special_file_that_changed() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    for name in ["now_a_file", "chmodded", "same"] {
        mkfifo(&src.join(name));
    }
    let root = is_root();
    let mknod = |name: &str, minor: u32| {
        let path = src.join(name);
        let _ = fs::remove_file(&path);
        let (kind, mode) = (
            rustix::fs::FileType::CharacterDevice,
            rustix::fs::Mode::from_raw_mode(0o600),
        );
        let dev = rustix::fs::makedev(1, minor);
        rustix::fs::mknodat(rustix::fs::CWD, &path, kind, mode, dev).unwrap();
        // One time for both numbers: only the number differs.
        let time = rustix::fs::Timespec {
            tv_sec: 1_000_000,
            tv_nsec: 0,
        };
        let times = rustix::fs::Timestamps {
            last_access: time,
            last_modification: time,
        };
        rustix::fs::utimensat(rustix::fs::CWD, &path, &times, rustix::fs::AtFlags::empty())
            .unwrap();
    };
    if root {
        mknod("dev", 3);
        mknod("dev_same", 3);
    }
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let restore: &[&str] = if root { &["--same-owner"] } else { &[] };
    let send_to = |update: &[&str]| {
        let recv = Recv::start(&dest, restore, None);
        let mut args = vec!["--json", s, recv.ticket()];
        args.extend(update);
        if root {
            args.push("-a");
        }
        let out = send(&args, None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ended = recv.wait();
        assert!(ended.status.success(), "{}", ended.stderr);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    send_to(&[]);
    let same = send_to(&["--update"]);
    assert_eq!(same["packed"]["specials"], 0, "{same}");

    fs::remove_file(src.join("now_a_file")).unwrap();
    file(&src.join("now_a_file"), b"regular now", 0o644);
    fs::set_permissions(src.join("chmodded"), fs::Permissions::from_mode(0o600)).unwrap();
    let mut specials = 1;
    if root {
        mknod("dev", 5);
        specials += 1;
    }
    let sent = send_to(&["--update"]);
    let packed = &sent["packed"];
    assert_eq!(
        (&packed["files"], &packed["specials"]),
        (&1.into(), &specials.into()),
        "{sent}"
    );
    assert_eq!(fs::read(dest.join("now_a_file")).unwrap(), b"regular now");
    assert_equal_trees(&src, &dest, "after --update");
}

/// `send -a --update` compares extended attributes too, as `cp --update` does: one changed
/// alone in DEST makes its file sent again, and lands as SRC has it.
#[test]
fn send_update_with_a_finds_an_xattr_changed_alone() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("tagged"), b"tagged", 0o644);
    file(&src.join("same"), b"same", 0o644);
    set_xattr(&src.join("tagged"), "user.tag", b"one");
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let send_to = |update: &[&str]| {
        let recv = Recv::start(&dest, &[], None);
        let mut args = vec!["-a", "--json", s, recv.ticket()];
        args.extend(update);
        let out = send(&args, None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert!(recv.wait().status.success());
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    send_to(&[]);
    let tag = || {
        let mut value = [0u8; 16];
        let n = rustix::fs::lgetxattr(dest.join("tagged"), "user.tag", &mut value).unwrap();
        value[..n].to_vec()
    };
    assert_eq!(tag(), b"one");
    set_xattr(&dest.join("tagged"), "user.tag", b"two");
    let sent = send_to(&["--update"]);
    let packed = &sent["packed"];
    assert_eq!(
        (&packed["files"], &packed["unchanged"]),
        (&1.into(), &1.into()),
        "{sent}"
    );
    assert_eq!(tag(), b"one");
}

/// `cp --update` and `send --update` apply the library's one unchanged rule: a setgid bit
/// set alone (no new mtime) is a change for both, and so, as root with `-a` (and a receiver
/// that keeps owners), is a new owner.
#[test]
fn cp_and_send_updates_agree_that_a_setgid_or_owner_change_is_a_change() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("tool"), b"tool", 0o755);
    file(&src.join("owned"), b"owned", 0o644);
    file(&src.join("same"), b"same", 0o644);
    let root = is_root();
    let archive: &[&str] = if root { &["-a"] } else { &[] };
    let s = src.to_str().unwrap();
    let by_cp = work.path().join("cp");
    fs::create_dir(&by_cp).unwrap();
    let by_send = work.path().join("send");
    let cp = |update: &[&str]| {
        let mut cmd = barge(["cp", "--json"]);
        cmd.args(archive).args(update).arg(&src).arg(&by_cp);
        let out = run(&mut cmd, None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let send_to = |update: &[&str]| {
        let recv = Recv::start(&by_send, &["--setid", "--same-owner"], None);
        let mut args = vec!["--json"];
        args.extend(archive.iter().chain(update).chain(&[s, recv.ticket()]));
        let out = send(&args, None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ended = recv.wait();
        assert!(ended.status.success(), "{}", ended.stderr);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    cp(&[]);
    send_to(&[]);

    let mut changed = vec!["tool"];
    fs::set_permissions(src.join("tool"), fs::Permissions::from_mode(0o2755)).unwrap();
    if root {
        std::os::unix::fs::chown(src.join("owned"), Some(1000), Some(1000)).unwrap();
        changed.push("owned");
    }
    let copied = cp(&["--update"]);
    let sent = send_to(&["--update"]);
    let counts = |files: &serde_json::Value, same: &serde_json::Value| {
        (files.as_u64().unwrap(), same.as_u64().unwrap())
    };
    let want = (changed.len() as u64, 3 - changed.len() as u64);
    assert_eq!(
        counts(&copied["files"], &copied["unchanged"]),
        want,
        "cp: {copied}"
    );
    let packed = &sent["packed"];
    assert_eq!(
        counts(&packed["files"], &packed["unchanged"]),
        want,
        "send: {sent}"
    );
    assert_equal_trees(&src, &by_cp.join("src"), "cp --update");
    assert_equal_trees(&src, &by_send, "send --update");
}

/// Sends [`files_for`] `connections` files over `connections` through a [`relay`] doing
/// `harm` (which must harm no byte), with `--timeout 10`: the transfer must land whole over
/// them all, as one transfer with one log line.
fn lands_through(connections: usize, harm: Harm, what: &str) {
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, files_for(connections));
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--max-connections", "1"], None);
    let ticket = recv.ticket().to_string();
    let (address, key) = ticket.split_once('#').unwrap();
    let (via, relay) = relay(address, connections, harm);
    let to = format!("{via}#{key}");
    let count = connections.to_string();
    let out = send(
        &[
            src.to_str().unwrap(),
            &to,
            "--connections",
            &count,
            "--timeout",
            "10",
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{what}: {}", text(&out.stderr));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["connections"], connections, "{what}: {summary}");
    let ended = recv.wait();
    assert!(ended.status.success(), "{what}: {}", ended.stderr);
    // One transfer, one log line: later connections are not transfers of their own.
    assert_eq!(
        ended.stderr.matches("recv: ").count(),
        2,
        "{what}: {}",
        ended.stderr
    );
    relay.join().unwrap();
    assert_equal_trees(&src, &dest, what);
}

#[test]
fn four_connections_carry_one_transfer_in_order() {
    lands_through(4, on_a_later(u64::MAX, false), "over four connections");
    // The later connections open while the first says HELLO; theirs may come first.
    let early = Harm {
        hold_first: Some(Duration::from_millis(300)),
        ..on_a_later(u64::MAX, false)
    };
    lands_through(4, early, "later connections before the first");
}

#[test]
fn later_connections_slower_than_the_transfer_end_as_lanes() {
    // A small tree's transfer ends before its later connections authenticate: the sender
    // ends them as lanes, so the receiver logs one transfer and no failed connection.
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 3);
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--keep-open", "--json"], None);
    let ticket = recv.ticket().to_string();
    let (address, key) = ticket.split_once('#').unwrap();
    let slow = Harm {
        hold_later: Some(Duration::from_millis(300)),
        ..Harm::none()
    };
    let (via, relay) = relay(address, 4, slow);
    let to = format!("{via}#{key}");
    let out = send(&[src.to_str().unwrap(), &to, "--connections", "4"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    relay.join().unwrap();
    let ended = recv.stop();
    let lines: Vec<serde_json::Value> = (ended.stdout.lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "{}{}", ended.stdout, ended.stderr);
    assert_eq!(lines[0]["ok"], true, "{}", ended.stdout);
    assert_equal_trees(&src, &dest, "a small tree over four connections");
}

#[test]
fn a_plain_transfer_sends_its_data_without_waiting_for_an_answer() {
    // The receiver's direction is held after the handshake until the sender has sent a
    // MiB: a sender waiting for a word from it would time out.
    let held = Harm {
        hold_answer: true,
        ..Harm::none()
    };
    lands_through(1, held, "with the receiver's answers held");
}

#[test]
fn every_hostile_archive_from_a_malicious_sender_is_refused_and_stays_inside() {
    for case in crate::hostile::cases() {
        let what = format!("sent: {}", case.name);
        let work = tempdir();
        let (dest, sentinel) = case.prepare(work.path());
        let before = scan(&dest);
        let recv = Recv::start(&dest, case.args, None);
        let out = send(&["--from-archive", "-", recv.ticket()], Some(&case.archive));
        let ended = recv.wait();
        assert_clean_failure(&out, &["the receiver"], &what);
        assert_eq!(ended.status.code(), Some(1), "{what}: {}", ended.stderr);
        // recv's default --max-bytes (DEST's free space) refuses a huge size first.
        let too_big = ended.stderr.contains("(see --max-bytes) [too-many-bytes]");
        for needle in case.needles {
            assert!(
                too_big || needle.split('|').any(|n| ended.stderr.contains(n)),
                "{what}: the log lacks {needle:?}: {}",
                ended.stderr
            );
        }
        sentinel.assert_unchanged(&what);
        let names = names_in(work.path());
        assert_eq!(names, ["dest", "outside"], "{what}: created next to DEST");
        let after = scan(&dest);
        for (path, node) in &before {
            assert!(
                after.get(path) == Some(node),
                "{what}: {:?} changed",
                name(path)
            );
        }
        crate::hostile::assert_complete_files(&dest, &before, &case.archive, &what);
    }
}

#[test]
fn setid_bits_from_a_sender_land_only_where_their_ids_do() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("suid"), b"x", 0o4755);
    file(&src.join("sgid"), b"y", 0o2755);
    file(&src.join("tool"), b"z", 0o755);
    let root = is_root();
    if root {
        // A user's program, which as root's would run as root.
        std::os::unix::fs::chown(src.join("tool"), Some(1000), Some(1000)).unwrap();
        fs::set_permissions(src.join("tool"), fs::Permissions::from_mode(0o6755)).unwrap();
    }
    let mode = |p: PathBuf| fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777;
    // (name, recv's options, send's, modes of suid, sgid and tool)
    type Way<'a> = (&'a str, &'a [&'a str], &'a [&'a str], [u32; 3]);
    let mut ways: Vec<Way> = vec![("plain", &[], &[], [0o755; 3])];
    if root {
        ways.extend([
            // No owners sent: no bit is where its owner is.
            ("setid", &["--setid"][..], &[][..], [0o755; 3]),
            // Root's own files keep theirs; the user's, landed as root's, does not.
            ("setid-a", &["--setid"], &["-a"], [0o4755, 0o2755, 0o755]),
            (
                "setid-same-owner",
                &["--setid", "--same-owner"],
                &["-a"],
                [0o4755, 0o2755, 0o6755],
            ),
        ] as [Way; 3]);
    }
    for (name, recv_args, send_args, want) in ways {
        let dest = work.path().join(name);
        let recv = Recv::start(&dest, recv_args, None);
        let mut args = send_args.to_vec();
        args.extend([src.to_str().unwrap(), recv.ticket()]);
        assert!(send(&args, None).status.success(), "{name}");
        assert!(recv.wait().status.success(), "{name}");
        let got = ["suid", "sgid", "tool"].map(|f| mode(dest.join(f)));
        assert_eq!(got, want, "{name}");
    }
    if is_root() {
        // Received by nobody, asked: root's files are not given to it with their bits.
        let dest = work.path().join("nobody");
        fs::create_dir(&dest).unwrap();
        rustix::fs::chown(&dest, Some(rustix::process::Uid::from_raw(NOBODY)), None).unwrap();
        fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let bin = copy_bin(work.path());
        let mut cmd = as_nobody();
        cmd.arg(&bin)
            .args(["recv", "--setid", "--listen", "127.0.0.1:0"])
            .arg(&dest);
        let mut child = spawn(&mut cmd, Stdio::null());
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let out = send(&["-a", src.to_str().unwrap(), line.trim_end()], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ended = wait_output(child, TIMEOUT, "recv as nobody");
        assert!(ended.status.success(), "{}", text(&ended.stderr));
        let got = ["suid", "sgid", "tool"].map(|f| mode(dest.join(f)));
        assert_eq!(got, [0o755; 3]);
        assert!(text(&ended.stderr).contains("3 setuid/setgid bits not restored"));
    }
}

#[test]
fn keep_receives_concurrent_senders_and_sigterm_ends_it() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let recv = Recv::start(
        &dest,
        &["--keep-open", "--max-connections", "1", "--json"],
        None,
    );
    let ticket = recv.ticket().to_string();
    let key = ticket.split('#').nth(1).unwrap().to_string();
    let senders: Vec<_> = (0..3)
        .map(|i| {
            let src = work.path().join(format!("s{i}"));
            files(&src.join(format!("from{i}")), 5);
            let ticket = ticket.clone();
            std::thread::spawn(move || send(&[src.to_str().unwrap(), &ticket], None))
        })
        .collect();
    for sender in senders {
        let out = sender.join().unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    let ended = recv.stop();
    let lines: Vec<serde_json::Value> = ended
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", ended.stdout);
    assert!(lines.iter().all(|l| l["ok"] == true), "{}", ended.stdout);
    for i in 0..3 {
        assert_equal_trees(
            &work.path().join(format!("s{i}/from{i}")),
            &dest.join(format!("from{i}")),
            "keep",
        );
    }
    assert!(!ended.stderr.contains(&key) && !ended.stdout.contains(&key));
}

#[test]
fn every_line_recv_logs_is_one_write() {
    // stderr as a datagram socket: each write(2) arrives as a datagram of its own, so a line
    // written in pieces (which a journal, or a log file other processes write too, can split)
    // shows as several.
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 2);
    let (log, stderr) = UnixDatagram::pair().unwrap();
    let mut cmd = barge(["recv", "--listen", "127.0.0.1:0"]);
    cmd.arg(work.path().join("dest"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(OwnedFd::from(stderr));
    let mut child = cmd.spawn().unwrap();
    drop(cmd);
    let mut ticket = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut ticket)
        .unwrap();
    // A connection that says nothing, then a sender: a line each.
    drop(TcpStream::connect(ticket.split_once('#').unwrap().0).unwrap());
    let out = send(&[src.to_str().unwrap(), ticket.trim_end()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = wait_output(child, TIMEOUT, "barge recv");
    assert!(ended.status.success());
    log.set_nonblocking(true).unwrap();
    let mut writes = Vec::new();
    let mut buf = vec![0; 1 << 16];
    while let Ok(n) = log.recv(&mut buf) {
        writes.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(writes.len(), 3, "{writes:?}");
    for (write, what) in
        writes
            .iter()
            .zip(["listening on", "closed before", "landed 0 dirs, 2 files"])
    {
        assert!(
            write.starts_with("barge: recv: ") && write.contains(what),
            "{writes:?}"
        );
        assert!(
            write.ends_with('\n') && write.matches('\n').count() == 1,
            "{writes:?}"
        );
    }
}

/// How often a stranger sends a byte: well within any timeout, so only a deadline ends it.
const TRICKLE: Duration = Duration::from_millis(500);

/// Strangers' connections that never finish the handshake and never fall silent (the red
/// team's trickle): each sends the first two bytes of a frame length (65,535, so the frame
/// never ends), then a byte every [`TRICKLE`].
struct Strangers {
    /// When the receiver closed each connection, from the start, if it did.
    trickle: JoinHandle<Vec<Option<Duration>>>,
}

impl Strangers {
    /// Opens `each` connections to `to` from each of the loopback addresses `from`, in that
    /// order, and trickles on them for at most `limit`, less once the receiver closed all.
    fn start(to: &str, from: &[[u8; 4]], each: usize, limit: Duration) -> Strangers {
        use rustix::net::{AddressFamily, SocketType};
        let to: std::net::SocketAddr = to.parse().unwrap();
        let start = Instant::now();
        let sources = from.iter().flat_map(|&ip| std::iter::repeat_n(ip, each));
        let streams: Vec<TcpStream> = sources
            .map(|ip| {
                let socket =
                    rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
                rustix::net::bind(&socket, &std::net::SocketAddrV4::new(ip.into(), 0)).unwrap();
                rustix::net::connect(&socket, &to).unwrap();
                let mut stream = TcpStream::from(socket);
                stream.write_all(&[0xff, 0xff]).unwrap();
                stream.set_nonblocking(true).unwrap();
                stream
            })
            .collect();
        let trickle = std::thread::spawn(move || {
            let mut closed = vec![None; streams.len()];
            let mut sent = Instant::now();
            while start.elapsed() < limit && closed.contains(&None) {
                let byte = sent.elapsed() >= TRICKLE;
                if byte {
                    sent = Instant::now();
                }
                let open = streams.iter().zip(&mut closed).filter(|(_, c)| c.is_none());
                for (mut stream, closed) in open {
                    let gone = match stream.read(&mut [0; 64]) {
                        Ok(0) => true,
                        Ok(_) => false,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    };
                    if gone || byte && stream.write(&[0]).is_err() {
                        *closed = Some(start.elapsed());
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            closed
        });
        Strangers { trickle }
    }

    /// When the receiver closed each connection, once it closed all or the limit passed.
    fn closed(self) -> Vec<Option<Duration>> {
        self.trickle.join().unwrap()
    }
}

/// The most threads process `pid` has in the next `window` (or until it ends), sampled
/// every 5 ms. (A thread that ended its connection may live a moment longer, so a window
/// where none ends shows how many connections had one.)
fn peak_threads(pid: u32, window: Duration) -> JoinHandle<usize> {
    let start = Instant::now();
    std::thread::spawn(move || {
        let mut most = 0;
        while start.elapsed() < window {
            let Ok(status) = fs::read_to_string(format!("/proc/{pid}/status")) else {
                break;
            };
            let threads = status.lines().find_map(|l| l.strip_prefix("Threads:"));
            most = most.max(threads.map_or(0, |n| n.trim().parse().unwrap()));
            std::thread::sleep(Duration::from_millis(5));
        }
        most
    })
}

#[test]
fn strangers_at_one_address_get_a_share_of_the_handshakes_and_a_keyed_sender_gets_through() {
    // 120 trickling strangers at 127.0.0.2: 16 get a thread, the rest are closed at once, and
    // a sender with the key (at 127.0.0.1) lands well before their handshakes' deadline.
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 2);
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--max-connections", "1"], None);
    let peak = peak_threads(recv.child.id(), TIMEOUT);
    let strangers = Strangers::start(&recv.address, &[[127, 0, 0, 2]], 120, TIMEOUT);
    let start = Instant::now();
    let out = send(&[src.to_str().unwrap(), recv.ticket()], None);
    let took = start.elapsed();
    let ended = recv.wait();
    let most = peak.join().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(ended.status.success(), "{}", ended.stderr);
    // Its main thread, the strangers' share, the sender's.
    assert!(most <= 1 + 16 + 1, "recv had {most} threads");
    assert!(took < Duration::from_secs(5), "the sender took {took:?}");
    let busy = "busy: 16 connections from its address are in their handshake";
    assert_eq!(ended.stderr.matches(busy).count(), 104, "{}", ended.stderr);
    let closed = strangers.closed();
    assert!(closed.iter().all(Option::is_some), "{closed:?}");
    assert_equal_trees(&src, &dest, "past strangers");
}

#[test]
fn strangers_beyond_the_cap_wait_in_the_listen_queue_and_each_handshake_has_a_deadline() {
    // 96 trickling strangers at six addresses (16 each) against --max-connections 1: 65 get
    // a thread, the rest wait in the listen queue with the sender behind them; with
    // --timeout 3 every handshake ends 3 s after it began, though no stranger falls silent.
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 2);
    let dest = work.path().join("dest");
    let args = ["--keep-open", "--max-connections", "1", "--timeout", "3"];
    let recv = Recv::start(&dest, &args, None);
    // Until the first handshakes end: no thread ends meanwhile.
    let peak = peak_threads(recv.child.id(), Duration::from_millis(2500));
    let from: Vec<[u8; 4]> = (3..9).map(|i| [127, 0, 0, i]).collect();
    let strangers = Strangers::start(&recv.address, &from, 16, Duration::from_secs(15));
    let start = Instant::now();
    let out = send(&[src.to_str().unwrap(), recv.ticket()], None);
    let landed = start.elapsed();
    assert!(out.status.success(), "{}", text(&out.stderr));
    let closed = strangers.closed();
    let most = peak.join().unwrap();
    let ended = recv.stop();
    // Its main thread, one transfer and 64 more connections.
    assert!(most <= 1 + 1 + 64, "recv had {most} threads");
    // Accepted only once the first strangers' handshakes ended.
    assert!(
        landed >= Duration::from_millis(2500),
        "landed after {landed:?}"
    );
    // Each stranger was cut by the deadline: the first 65 after 3 s, the rest 3 s later.
    let cut: Vec<Duration> = closed.iter().map(|c| c.expect("never cut")).collect();
    let (first, last) = (cut.iter().min().unwrap(), cut.iter().max().unwrap());
    assert!(*first >= Duration::from_millis(2900), "cut after {first:?}");
    assert!(*last < Duration::from_secs(9), "cut after {last:?}");
    let deadline = "did not finish the handshake within 3 s";
    assert_eq!(
        ended.stderr.matches(deadline).count(),
        96,
        "{}",
        ended.stderr
    );
    assert_equal_trees(&src, &dest, "behind strangers");
}

#[test]
#[ignore = "needs root to run recv as a user of its own under a task limit"]
fn a_thread_recv_cannot_start_turns_one_connection_away_and_recv_goes_on() {
    require_root();
    // recv as a uid of its own (no other process counts against its task limit) with 8
    // tasks at most: most of 40 trickling strangers (within the address share and the cap)
    // find no thread, and are closed; once the others' handshakes ended, a sender lands.
    let work = tempdir();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let bin = copy_bin(work.path());
    let src = work.path().join("src");
    files(&src, 2);
    let dest = work.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let uid = 100_000 + std::process::id();
    rustix::fs::chown(&dest, Some(rustix::process::Uid::from_raw(uid)), None).unwrap();
    let mut cmd = with_task_limit(uid, 8);
    cmd.arg(&bin)
        .args(["recv", "--listen", "127.0.0.1:0", "--timeout", "2"])
        .arg(&dest);
    let mut recv = Recv::run(cmd, true);
    let from: Vec<[u8; 4]> = (2..6).map(|i| [127, 0, 0, i]).collect();
    let closed = Strangers::start(&recv.address, &from, 10, Duration::from_secs(10)).closed();
    assert!(closed.iter().all(Option::is_some), "{closed:?}");
    assert!(recv.child.try_wait().unwrap().is_none(), "recv ended");
    let pid = recv.child.id();
    wait_for("the strangers' threads to end", || {
        fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| s.contains("Threads:\t1\n"))
    });
    let out = send(&[src.to_str().unwrap(), recv.ticket()], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    let refused = ended.stderr.matches("busy: cannot start a thread").count();
    assert!(refused >= 30, "{refused} refused: {}", ended.stderr);
    assert_whole_files(&src, &dest, "under a task limit");
    assert_eq!(names_in(&dest), names_in(&src));
}

#[test]
#[ignore = "needs root to give a sender a host name of its own (unshare --uts)"]
fn a_sender_name_that_forges_log_lines_is_escaped() {
    require_root();
    // A sender with the key names itself in its HELLO by its host name, which any bytes can
    // make: here a line break, a forged log line and a terminal escape.
    let work = tempdir();
    let src = work.path().join("src");
    files(&src, 1);
    let dest = work.path().join("dest");
    let recv = Recv::start(&dest, &["--json"], None);
    let rename = "import os, socket, sys; socket.sethostname(sys.argv[1].encode()); \
                  os.execv(sys.argv[2], sys.argv[2:])";
    let name = "a\nbarge: recv: 10.0.0.1:1: forged\x1b[2J";
    let mut cmd = Command::new("unshare");
    cmd.args(["--uts", "python3", "-c", rename, name])
        .arg(bin())
        .args(["send", src.to_str().unwrap(), recv.ticket()]);
    let out = run(&mut cmd, None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let ended = recv.wait();
    assert!(ended.status.success(), "{}", ended.stderr);
    let shown = "(a\\nbarge: recv: 10.0.0.1:1: forged\\x1b[2J): landed 0 dirs, 1 file";
    assert!(ended.stderr.contains(shown), "{}", ended.stderr);
    assert_eq!(ended.stderr.lines().count(), 2, "{}", ended.stderr);
    // The JSON line carries the name as it came, in JSON's own escapes.
    let logged: serde_json::Value = serde_json::from_str(&ended.stdout).unwrap();
    assert_eq!(logged["sender"], name, "{}", ended.stdout);
}

#[test]
fn send_v_lists_every_path_and_its_dry_run_says_what_cp_says() {
    use crate::paths::{all_copied, listed, many_dirs, shown};
    let work = tempdir();
    let src = work.path().join("src");
    let paths = many_dirs(&src);
    let dest = work.path().join("dest");
    let s = src.to_str().unwrap();
    let recv = Recv::start(&dest, &["--keep-open"], None);

    // The dry run: cp's verbs, sorted, every directory, the same twice; -0 ends with NULs.
    let out = send(&[s, recv.ticket(), "--dry-run"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&all_copied(&paths, b"", false)));
    let again = send(&[s, recv.ticket(), "--dry-run"], None);
    assert_eq!(again.stdout, out.stdout, "a second run");
    let by_cp = run_ok(
        barge(["cp", "--dry-run"])
            .arg(&src)
            .arg(work.path().join("new")),
        None,
    );
    let new = format!(" {}/new/", work.path().to_str().unwrap());
    let by_cp = text(&by_cp.stdout).replace(&new, " ");
    let by_cp = by_cp.split_once('\n').unwrap().1;
    assert_eq!(by_cp, text(&out.stdout));
    let out = send(&[s, recv.ticket(), "--dry-run", "-0"], None);
    assert_eq!(out.stdout, all_copied(&paths, b"", true));

    // -v: every path sent, then the summary on stderr.
    let out = send(&[s, recv.ticket(), "-v"], None);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(listed(&out.stdout, ""), shown(&paths));
    assert!(
        text(&out.stderr).starts_with("sent "),
        "{}",
        text(&out.stderr)
    );
    recv.stop();
}

#[test]
fn recv_v_lists_every_path_it_lands_on_stdout_or_beside_json_on_stderr() {
    use crate::paths::{listed, many_dirs, shown};
    let work = tempdir();
    let src = work.path().join("src");
    let paths = shown(&many_dirs(&src));
    let s = src.to_str().unwrap();
    for json in [false, true] {
        let dest = work.path().join(format!("dest-{json}"));
        let args: &[&str] = if json { &["-v", "--json"] } else { &["-v"] };
        let recv = Recv::start(&dest, args, None);
        let out = send(&[s, recv.ticket()], None);
        assert!(out.status.success(), "{}", text(&out.stderr));
        let ended = recv.wait();
        assert!(ended.status.success(), "{}", ended.stderr);
        let (list, rest) = match json {
            false => (listed(ended.stdout.as_bytes(), ""), ended.stderr),
            true => (
                listed(ended.stderr.as_bytes(), "barge: recv: "),
                ended.stdout,
            ),
        };
        assert_eq!(list, paths, "--json {json}");
        assert!(!rest.contains("d00/link"), "listed twice: {rest}");
    }
}
