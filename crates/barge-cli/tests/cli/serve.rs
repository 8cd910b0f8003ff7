//! `barge serve` over real sockets: curl over TLS with HTTP/2 and over plain HTTP/1.1, and a
//! raw socket for bodies cut off, stalled or held across a stop signal. Every refused or
//! broken upload must leave DEST exactly as it was (no directory, no hidden staging one),
//! and the token must never show but in the one address line.

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;

const TOKEN: &str = "test-token-0123456789abcdef";

/// A running `barge serve`.
struct Server {
    child: Child,
    port: u16,
    tls: bool,
    stderr: Arc<Mutex<String>>,
    stdout: Arc<Mutex<String>>,
    /// Its XDG_RUNTIME_DIR, where it writes a generated certificate.
    runtime: tempfile::TempDir,
}

impl Server {
    /// Starts `barge serve DEST --listen 127.0.0.1:0 ARGS` with BARGE_TOKEN set to `token`
    /// (none: generated), and waits for its address.
    fn start(dest: &Path, args: &[&str], token: Option<&str>) -> Server {
        Server::start_on("127.0.0.1:0", dest, args, token)
    }

    /// [`Server::start`] listening on `listen`.
    fn start_on(listen: &str, dest: &Path, args: &[&str], token: Option<&str>) -> Server {
        let runtime = tempdir();
        let mut cmd = barge(["serve"]);
        cmd.arg(dest).args(["--listen", listen]).args(args);
        cmd.env("XDG_RUNTIME_DIR", runtime.path());
        cmd.env_remove("BARGE_TOKEN");
        if let Some(token) = token {
            cmd.env("BARGE_TOKEN", token);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (stderr, stdout) = (Arc::default(), Arc::default());
        collect(child.stderr.take().unwrap(), &stderr);
        collect(child.stdout.take().unwrap(), &stdout);
        let mut server = Server {
            child,
            port: 0,
            tls: !args.contains(&"--plain-http"),
            stderr,
            stdout,
            runtime,
        };
        let line = server.wait_for_log("listening on");
        let after = &line[line.find("127.0.0.1:").expect("an address") + 10..];
        server.port = after[..after.find('/').unwrap()].parse().unwrap();
        server
    }

    fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// The first stderr line containing `needle`, waiting up to 30 s for it.
    fn wait_for_log(&self, needle: &str) -> String {
        wait_for_line(&self.stderr, needle)
    }

    /// curl with the token (unless `token` is None), `args`, and the URL of `path`: the
    /// status, the HTTP version and the body. The server's certificate is not checked
    /// unless `args` give `--cacert`.
    fn curl(&self, token: Option<&str>, args: &[&str], path: &str) -> (u16, String, String) {
        let work = tempdir();
        let body = work.path().join("body");
        let mut cmd = Command::new("curl");
        if !args.contains(&"--cacert") {
            cmd.arg("-k");
        }
        cmd.args(["-sS", "--path-as-is", "--max-time", "60", "-o"])
            .arg(&body);
        cmd.args(["-w", "%{http_code} %{http_version}"]);
        if let Some(token) = token {
            cmd.arg("-H").arg(format!("Authorization: Bearer {token}"));
        }
        cmd.args(args).arg(self.url(path));
        let out = run(&mut cmd, None);
        let written = String::from_utf8(out.stdout).unwrap();
        let (status, version) = written.split_once(' ').unwrap();
        let body = fs::read_to_string(&body).unwrap_or_default();
        (status.parse().unwrap(), version.to_owned(), body)
    }

    /// Uploads the archive file `archive` with the token: POST /upload or PUT /upload/NAME.
    fn upload(&self, archive: &Path, name: Option<&str>, extra: &[&str]) -> (u16, String) {
        let data = format!("@{}", archive.display());
        let mut args = vec!["-H", "Content-Type: application/octet-stream"];
        args.extend_from_slice(extra);
        let path = match name {
            Some(name) => {
                args.extend(["-X", "PUT", "--data-binary", &data]);
                format!("/upload/{name}")
            }
            None => {
                args.extend(["--data-binary", &data]);
                "/upload".into()
            }
        };
        let (status, _, body) = self.curl(Some(TOKEN), &args, &path);
        (status, body)
    }

    /// Sends `signal` to the server.
    fn signal(&self, signal: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
    }

    /// Stops the server (SIGTERM) and returns its stdout and stderr.
    fn stop(mut self) -> (String, String) {
        self.signal(rustix::process::Signal::TERM);
        let status = wait_exit(&mut self.child);
        assert_eq!(status.signal(), Some(libc::SIGTERM), "ends by the signal");
        std::thread::sleep(Duration::from_millis(100));
        let out = self.stdout.lock().unwrap().clone();
        let err = self.stderr.lock().unwrap().clone();
        (out, err)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

use std::os::unix::process::ExitStatusExt;

/// Waits up to 30 s for `child` to exit.
fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the server did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first line of the output collected in `text` containing `needle`, waiting up to 30 s
/// for it.
fn wait_for_line(text: &Mutex<String>, needle: &str) -> String {
    let start = Instant::now();
    loop {
        let text = text.lock().unwrap().clone();
        if let Some(line) = text.lines().find(|l| l.contains(needle)) {
            return line.to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no {needle:?} in the server's output: {text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Appends what `pipe` gives to `into`, in a thread.
fn collect(pipe: impl Read + Send + 'static, into: &Arc<Mutex<String>>) {
    let into = into.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            let mut text = into.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
}

/// Waits up to 10 s for `dir` to hold exactly `want` (a cancelled landing cleans up after
/// the answer may have gone).
fn assert_holds(dir: &Path, want: &[&str], what: &str) {
    let start = Instant::now();
    while names_in(dir) != want && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(names_in(dir), want, "{what}: DEST holds something else");
}

/// A tree of files and directories with assorted modes and sizes, and its archive.
fn sample(work: &Path, files: usize) -> (PathBuf, PathBuf) {
    let src = work.join("src");
    fs::create_dir_all(src.join("sub/deeper")).unwrap();
    fs::create_dir(src.join("empty")).unwrap();
    for i in 0..files {
        let dir = ["", "sub", "sub/deeper"][i % 3];
        let data: Vec<u8> = (0..i * 37 % 5000).map(|b| (b * 7 + i) as u8).collect();
        file(
            &src.join(dir).join(format!("f{i}")),
            &data,
            [0o644, 0o600, 0o755][i % 3],
        );
    }
    file(&src.join("big"), &vec![42u8; 3 << 20], 0o644);
    let archive = work.join("tree.barge");
    run_ok(&mut pack_cmd(&src, &archive), None);
    (src, archive)
}

/// A JSON answer's field.
fn field(body: &str, key: &str) -> serde_json::Value {
    let value: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    value[key].clone()
}

#[test]
fn an_archive_lands_identical_over_tls_http2_and_plain_http1() {
    let work = tempdir();
    let (src, archive) = sample(work.path(), 60);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--json"], Some(TOKEN));
    let data = format!("@{}", archive.display());
    let (status, version, body) = server.curl(
        Some(TOKEN),
        &[
            "--http2",
            "-H",
            "Content-Type: application/octet-stream",
            "-X",
            "PUT",
            "--data-binary",
            &data,
        ],
        "/upload/tree",
    );
    assert_eq!((status, version.as_str()), (200, "2"), "{body}");
    assert_eq!(field(&body, "name"), "tree");
    assert_eq!(field(&body, "files"), 61);
    assert_eq!(field(&body, "entries"), 64);
    assert_same_tree(&src, &dest.join("tree"), umask());
    let (out, err) = server.stop();
    assert!(out.contains(r#""name":"tree""#), "--json line: {out}");
    assert!(err.contains("PUT /upload/tree 200"), "log: {err}");

    let dest = work.path().join("plain");
    let server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let (status, version, body) = server.curl(
        Some(TOKEN),
        &[
            "--http1.1",
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &data,
        ],
        "/upload",
    );
    assert_eq!((status, version.as_str()), (200, "1.1"), "{body}");
    let name = field(&body, "name").as_str().unwrap().to_owned();
    assert!(
        name.starts_with("upload-") && name.ends_with("Z-1"),
        "{name}"
    );
    assert_same_tree(&src, &dest.join(&name), umask());
    // A second one gets the next name.
    let (status, body) = server.upload(&archive, None, &[]);
    assert_eq!(status, 200, "{body}");
    assert!(field(&body, "name").as_str().unwrap().ends_with("Z-2"));
}

#[test]
fn a_wrong_or_missing_token_is_401_and_creates_nothing() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &[], Some(TOKEN));
    let data = format!("@{}", archive.display());
    let args = [
        "-H",
        "Content-Type: application/octet-stream",
        "--data-binary",
        &data,
    ];
    for token in [Some("wrong-token-0123456789abcdef"), None, Some("")] {
        let (status, _, body) = server.curl(token, &args, "/upload");
        assert_eq!(status, 401, "{token:?}: {body}");
        assert!(field(&body, "error").as_str().unwrap().contains("token"));
    }
    let (status, _, _) = server.curl(
        None,
        &[
            "-X",
            "PUT",
            "-H",
            "Authorization: Basic dXNlcjpwYXNz",
            "--data-binary",
            &data,
        ],
        "/upload/x",
    );
    assert_eq!(status, 401);
    assert_holds(&dest, &[], "refused tokens");
}

#[test]
fn over_the_limits_is_refused_and_leaves_nothing() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 30);
    let dest = work.path().join("dest");
    let server = Server::start(
        &dest,
        &["--plain-http", "--max-bytes", "1M", "--max-entries", "10"],
        Some(TOKEN),
    );
    // Its length says so: refused before a byte is read.
    let (status, body) = server.upload(&archive, Some("big"), &[]);
    assert_eq!(status, 413, "{body}");
    assert!(
        field(&body, "error").as_str().unwrap().contains("1.0 MiB"),
        "{body}"
    );
    // No length (chunked): refused once over.
    let (status, body) = server.upload(&archive, None, &["-H", "Transfer-Encoding: chunked"]);
    assert_eq!(status, 413, "{body}");
    // Chunked, and the file content fits but the archive around it does not: the body's
    // count says so.
    let fits = work.path().join("fits");
    fs::create_dir(&fits).unwrap();
    file(&fits.join("a"), &vec![1u8; (1 << 20) - 10], 0o644);
    file(&fits.join("b".repeat(200)), b"", 0o644);
    let fits_archive = work.path().join("fits.barge");
    run_ok(&mut pack_cmd(&fits, &fits_archive), None);
    let (status, body) = server.upload(&fits_archive, None, &["-H", "Transfer-Encoding: chunked"]);
    assert_eq!(status, 413, "{body}");
    assert!(
        body.contains("--max-bytes") && !body.contains("archive byte"),
        "{body}"
    );
    // Small but too many entries: the decoder's limit.
    let many = work.path().join("many");
    fs::create_dir(&many).unwrap();
    for i in 0..20 {
        file(&many.join(format!("{i}")), b"x", 0o644);
    }
    let many_archive = work.path().join("many.barge");
    run_ok(&mut pack_cmd(&many, &many_archive), None);
    let (status, body) = server.upload(&many_archive, Some("many"), &[]);
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("limit of 10 (--max-entries)"), "{body}");
    assert!(
        !body.contains(dest.to_str().unwrap()),
        "a server path in {body}"
    );
    assert_holds(&dest, &[], "over the limits");
}

#[test]
fn a_limit_only_the_confined_child_sees_is_answered_as_that_limit() {
    // The body is small, but the FILE it starts with announces more than --max-bytes: only
    // the child's decoder sees that, and its typed error must come back as 413 (not 400).
    let work = tempdir();
    let dest = work.path().join("dest");
    let server = Server::start(
        &dest,
        &["--plain-http", "--max-bytes", "1M", "--json"],
        Some(TOKEN),
    );
    let whole = Archive::header().file(b"big", &vec![7u8; 2 << 20]).end(1);
    let cut = work.path().join("cut.barge");
    fs::write(&cut, &whole[..64 << 10]).unwrap();
    let (status, body) = server.upload(&cut, Some("cut"), &[]);
    assert_eq!(status, 413, "{body}");
    let error = field(&body, "error");
    assert!(
        error
            .as_str()
            .unwrap()
            .contains("limit of 1.0 MiB (--max-bytes)"),
        "{body}"
    );
    // The answer has the error's fields, as every JSON error of barge: the child's typed
    // kind, the decoder's code, the archive offset and the entry.
    assert_eq!(field(&body, "kind"), "format", "{body}");
    assert_eq!(field(&body, "code"), "too-many-bytes", "{body}");
    assert_eq!(field(&body, "path"), "big", "{body}");
    assert!(field(&body, "offset").is_u64(), "{body}");
    // The log has the child's own words: its entry and the decoder's code.
    let line = server.wait_for_log("PUT /upload/cut 413");
    assert!(
        line.contains("big") && line.contains("[too-many-bytes]"),
        "{line}"
    );
    assert_holds(&dest, &[], "over the limit");
    let (out, _) = server.stop();
    let json: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(json["status"], 413, "{out}");
    assert_eq!(json["error"], error, "{out}");
    assert_eq!(json["code"], "too-many-bytes", "{out}");
}

#[test]
fn dest_is_the_directory_prepared_whatever_a_symlink_in_its_parents_says_later() {
    // DEST's parent is a symlink when serve starts; repointed later, it must not move where
    // uploads land: serve resolves DEST once, to the directory it created and opened.
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let (real, other) = (work.path().join("real"), work.path().join("other"));
    fs::create_dir_all(other.join("dest")).unwrap();
    fs::create_dir(&real).unwrap();
    let link = work.path().join("link");
    std::os::unix::fs::symlink(&real, &link).unwrap();
    let server = Server::start(&link.join("dest"), &["--plain-http"], Some(TOKEN));
    assert_holds(&real, &["dest"], "DEST made through the link");
    fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&other, &link).unwrap();
    let (status, body) = server.upload(&archive, Some("up"), &[]);
    assert_eq!(status, 200, "{body}");
    assert_holds(&real.join("dest"), &["up"], "the prepared DEST");
    assert_holds(&other.join("dest"), &[], "where the link points now");
}

#[test]
fn hostile_archives_are_400_and_leave_nothing() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let cases = crate::hostile::archives();
    assert!(cases.len() > 20, "only {} cases", cases.len());
    for (i, (what, archive)) in cases.iter().enumerate() {
        let path = work.path().join("hostile.barge");
        fs::write(&path, archive).unwrap();
        let (status, body) = server.upload(&path, Some(&format!("h{i}")), &[]);
        let error = field(&body, "error");
        let error = error.as_str().unwrap();
        assert!(
            (status == 400 && error.starts_with("bad archive: archive byte"))
                || (status == 413 && error.contains("limit of 4.0 GiB (--max-bytes)")),
            "{what}: {status} {body}"
        );
        assert!(
            !body.contains(work.path().to_str().unwrap()),
            "{what}: a server path in {body}"
        );
        assert_holds(&dest, &[], what);
    }
    let outside = names_in(work.path());
    assert_eq!(outside, ["dest", "hostile.barge"], "written outside DEST");
}

/// Starts a raw HTTP/1.1 upload of `archive` (whole length announced) and sends `sent`
/// bytes of it.
fn partial_upload(server: &Server, name: &str, archive: &[u8], sent: usize) -> TcpStream {
    let mut socket = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "PUT /upload/{name} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        archive.len()
    );
    socket.write_all(head.as_bytes()).unwrap();
    socket.write_all(&archive[..sent]).unwrap();
    socket
}

/// The status of the answer on `socket`.
fn answer(socket: &mut TcpStream) -> (u16, String) {
    let mut text = String::new();
    let _ = socket.read_to_string(&mut text);
    let status = text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, text)
}

#[test]
fn a_body_cut_off_or_stalled_leaves_nothing() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 300);
    let bytes = fs::read(&archive).unwrap();
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http", "--timeout", "2"], Some(TOKEN));
    // Closed half-way, after files landed in the hidden staging directory.
    let socket = partial_upload(&server, "cut", &bytes, bytes.len() / 2);
    std::thread::sleep(Duration::from_millis(500));
    drop(socket);
    server.wait_for_log("PUT /upload/cut 400");
    assert_holds(&dest, &[], "a closed connection");
    // Stalled: 408 after the idle timeout.
    let mut socket = partial_upload(&server, "stall", &bytes, bytes.len() / 3);
    let (status, text) = answer(&mut socket);
    assert_eq!(status, 408, "{text}");
    assert_holds(&dest, &[], "a stalled upload");
    // curl killed mid-way over TLS and HTTP/2: the log line and the JSON line say so.
    let server = Server::start(&dest, &["--json"], Some(TOKEN));
    let data = format!("@{}", archive.display());
    let mut curl = Command::new("curl")
        .args(["-sS", "-k", "--http2", "--limit-rate", "1M", "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .args([
            "-H",
            "Content-Type: application/octet-stream",
            "-X",
            "PUT",
            "--data-binary",
            &data,
        ])
        .arg(server.url("/upload/killed"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    curl.kill().unwrap();
    curl.wait().unwrap();
    server.wait_for_log("PUT /upload/killed closed (the client went away");
    assert_holds(&dest, &[], "curl killed");
    let json = wait_for_line(&server.stdout, "status");
    let closed: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(closed["status"], 499, "{json}");
}

#[test]
fn names_taken_bad_or_unknown_and_wrong_types_are_refused() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    assert_eq!(server.upload(&archive, Some("taken"), &[]).0, 200);
    let (status, body) = server.upload(&archive, Some("taken"), &[]);
    assert_eq!(status, 409, "{body}");
    for bad in ["..", "%2E", "a%2Fb", "a%00b", &"n".repeat(256)] {
        let (status, body) = server.upload(&archive, Some(bad), &[]);
        assert_eq!(status, 400, "{bad}: {body}");
    }
    // Percent-encoded and not UTF-8 are fine.
    assert_eq!(server.upload(&archive, Some("caf%C3%A9%20%FF"), &[]).0, 200);
    let data = format!("@{}", archive.display());
    let (status, _, _) = server.curl(Some(TOKEN), &["--data-binary", &data], "/upload");
    assert_eq!(status, 415, "curl's default form type");
    let (status, _, _) = server.curl(Some(TOKEN), &[], "/nothing");
    assert_eq!(status, 404);
    let (status, _, _) = server.curl(Some(TOKEN), &["-X", "DELETE"], "/upload/taken");
    assert_eq!(status, 405);
    let (status, _, page) = server.curl(None, &[], "/");
    assert!(
        status == 200 && page.contains("webkitdirectory"),
        "{status}"
    );
    let (status, _, bundle) = server.curl(None, &[], "/barge-archive.js");
    assert!(status == 200 && bundle.contains("BargeError"), "{status}");
    assert_eq!(names_in(&dest), ["caf\u{e9} \u{fffd}", "taken"]);
}

/// An upload's name may hold any byte but `/` and NUL; the log line shows it escaped, so a
/// client can neither forge a log line nor send the terminal an escape sequence.
#[test]
fn a_name_with_control_characters_is_logged_escaped() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let forged = "x%0abarge%20serve%3A%20forged%1b%5b2J";
    assert_eq!(server.upload(&archive, Some(forged), &[]).0, 200);
    assert_eq!(names_in(&dest), ["x\nbarge serve: forged\u{1b}[2J"]);
    let (_, log) = server.stop();
    assert!(
        log.contains(r"(x\nbarge serve: forged\x1b[2J: "),
        "the note, escaped: {log}"
    );
    assert!(
        !log.contains('\u{1b}') && !log.lines().any(|l| l.starts_with("barge serve: forged")),
        "{log}"
    );
}

#[test]
fn cors_is_answered_for_the_given_origins_only() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(
        &dest,
        &["--plain-http", "--cors-origin", "https://ok.example"],
        Some(TOKEN),
    );
    let preflight = |origin: &str| {
        let out = run(
            Command::new("curl")
                .args(["-sS", "-i", "-X", "OPTIONS", "-H"])
                .arg(format!("Origin: {origin}"))
                .args([
                    "-H",
                    "Access-Control-Request-Method: PUT",
                    "-H",
                    "Access-Control-Request-Headers: authorization, content-type",
                ])
                .arg(server.url("/upload/x")),
            None,
        );
        String::from_utf8(out.stdout).unwrap().to_ascii_lowercase()
    };
    let allowed = preflight("https://ok.example");
    assert!(allowed.starts_with("http/1.1 204"), "{allowed}");
    assert!(
        allowed.contains("access-control-allow-origin: https://ok.example"),
        "{allowed}"
    );
    assert!(allowed.contains("access-control-allow-headers: authorization, content-type"));
    let refused = preflight("https://evil.example");
    assert!(refused.starts_with("http/1.1 403"), "{refused}");
    assert!(!refused.contains("access-control-allow"), "{refused}");
    // The upload itself carries the header for the allowed origin only.
    let data = format!("@{}", archive.display());
    for (origin, name, allowed) in [
        ("https://ok.example", "a", true),
        ("https://evil.example", "b", false),
    ] {
        let out = run(
            Command::new("curl")
                .args(["-sS", "-i", "-H"])
                .arg(format!("Origin: {origin}"))
                .arg("-H")
                .arg(format!("Authorization: Bearer {TOKEN}"))
                .args([
                    "-H",
                    "Content-Type: application/octet-stream",
                    "-X",
                    "PUT",
                    "--data-binary",
                    &data,
                ])
                .arg(server.url(&format!("/upload/{name}"))),
            None,
        );
        let text = String::from_utf8(out.stdout).unwrap().to_ascii_lowercase();
        assert_eq!(
            text.contains("access-control-allow-origin"),
            allowed,
            "{text}"
        );
    }
}

#[test]
fn the_token_shows_only_in_the_address_line() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &[], None);
    let start = Instant::now();
    let url = loop {
        let out = server.stdout.lock().unwrap().clone();
        if let Some(line) = out.lines().next() {
            break line.to_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no address on stdout"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let prefix = format!("https://127.0.0.1:{}/#token=", server.port);
    let token = url
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{url}"))
        .to_owned();
    assert_eq!(token.len(), 43, "256 bits in base64url");
    let data = format!("@{}", archive.display());
    let args = [
        "-H",
        "Content-Type: application/octet-stream",
        "--data-binary",
        &data,
    ];
    assert_eq!(server.curl(Some(&token), &args, "/upload").0, 200);
    let (status, _, body) = server.curl(Some(&token[1..]), &args, "/upload");
    assert_eq!(status, 401);
    assert!(!body.contains(&token[1..]), "the wrong token echoed");
    let (out, err) = server.stop();
    assert_eq!(out.matches(&token).count(), 1, "{out}");
    assert!(!err.contains(&token) && !err.contains(&token[1..]), "{err}");
    let fingerprint = err.lines().next().unwrap();
    assert!(
        fingerprint.contains("SHA-256 ") && fingerprint.matches(':').count() > 31,
        "{fingerprint}"
    );
}

/// `--quota` bounds what all uploads land together, counting what DEST held at start; an
/// upload past it is 507 and leaves nothing.
#[test]
fn a_quota_bounds_what_all_uploads_land_together() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    // Measured by a first server without a quota: the file bytes of one upload.
    let server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let (status, body) = server.upload(&archive, Some("first"), &[]);
    assert_eq!(status, 200, "{body}");
    let one = field(&body, "bytes").as_u64().unwrap();
    server.stop();
    let start = |quota: u64| {
        let quota = quota.to_string();
        let args = ["--plain-http", "--json", "--quota", &quota];
        let server = Server::start(&dest, &args, Some(TOKEN));
        let line = server.wait_for_log("quota");
        assert!(line.contains("of which DEST holds"), "{line}");
        server
    };
    // Room for one more, with a bit to spare, and no room for a third.
    let server = start(2 * one + one / 2);
    let (status, body) = server.upload(&archive, Some("second"), &[]);
    assert_eq!(status, 200, "{body}");
    for chunked in [false, true] {
        // With its length or without: the landing stops where its share ends.
        let extra: &[&str] = match chunked {
            true => &["-H", "Transfer-Encoding: chunked"],
            false => &[],
        };
        let (status, body) = server.upload(&archive, Some("third"), extra);
        assert_eq!(status, 507, "chunked {chunked}: {body}");
        assert!(
            field(&body, "error").as_str().unwrap().contains("--quota"),
            "{body}"
        );
    }
    assert_holds(&dest, &["first", "second"], "over the quota");
    server.stop();
    // A new server counts what DEST holds: here all of its quota, so nothing starts.
    let server = start(2 * one);
    let (status, body) = server.upload(&archive, Some("fourth"), &[]);
    assert_eq!(status, 507, "{body}");
    assert!(
        field(&body, "error").as_str().unwrap().contains("0 B left"),
        "{body}"
    );
    assert_holds(
        &dest,
        &["first", "second"],
        "over the quota after a restart",
    );
}

/// `--quota` charges every entry its disk space, at least a 4 KiB block: uploads of empty
/// directories and long symlinks (no file content at all) fill it too, the one that would
/// pass it is refused (507) while it lands, and a restart counts DEST the same way.
#[test]
fn a_quota_charges_every_entry_not_only_file_content() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    let target = "t".repeat(4095);
    for i in 0..20 {
        fs::create_dir(src.join(format!("d{i}"))).unwrap();
        std::os::unix::fs::symlink(&target, src.join(format!("l{i}"))).unwrap();
    }
    let archive = work.path().join("empty.barge");
    run_ok(&mut pack_cmd(&src, &archive), None);
    // An upload takes 41 blocks (its directory, 20 directories, 20 symlinks), DEST one: room
    // for two uploads and half of a third.
    let quota = ((1 + 2 * 41 + 20) * 4096).to_string();
    let dest = work.path().join("dest");
    let start = || {
        let args = ["--plain-http", "--quota", &quota];
        Server::start(&dest, &args, Some(TOKEN))
    };
    let server = start();
    let chunked = ["-H", "Transfer-Encoding: chunked"];
    for (name, extra) in [("a", &[][..]), ("b", &chunked[..])] {
        let (status, body) = server.upload(&archive, Some(name), extra);
        assert_eq!((status, field(&body, "bytes")), (200, 0.into()), "{body}");
    }
    for extra in [&[][..], &chunked[..]] {
        let (status, body) = server.upload(&archive, Some("c"), extra);
        assert_eq!(status, 507, "{extra:?}: {body}");
        assert!(body.contains("--quota"), "{body}");
    }
    assert_holds(&dest, &["a", "b"], "over the quota");
    server.stop();
    let server = start();
    let line = server.wait_for_log("of which DEST holds");
    assert!(line.ends_with("DEST holds 332.0 KiB"), "83 blocks: {line}");
    assert_eq!(server.upload(&archive, Some("c"), &[]).0, 507);
    assert_holds(&dest, &["a", "b"], "over the quota after a restart");
}

/// Connections that send nothing (no token needed for that) take the server's connection
/// slots: the next connection waits, unserved, until one of them closes.
#[test]
fn connections_beyond_the_limit_wait_until_one_closes() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let server = Server::start(
        &dest,
        &["--plain-http", "--max-connections", "2"],
        Some(TOKEN),
    );
    let (status, _, _) = server.curl(None, &[], "/");
    assert_eq!(status, 200, "the page, before the slots are taken");
    // From two addresses: one may hold only its share (a quarter, at least one).
    let mut idle: Vec<TcpStream> = ["127.0.0.2", "127.0.0.3"]
        .iter()
        .map(|from| connect_from(from, server.port))
        .collect();
    let (status, _, _) = server.curl(None, &["--max-time", "2"], "/");
    assert_eq!(status, 0, "served beyond --max-connections");
    drop(idle.pop());
    // From another address than the curl that gave up, whose connection the server may
    // still hold (then 127.0.0.1's share) when this one comes.
    let (status, _, _) = server.curl(None, &["--interface", "127.0.0.4"], "/");
    assert_eq!(status, 200, "not served once a slot was free");
}

/// A TCP connection to the server on loopback from the address `from` (127.x.y.z).
fn connect_from(from: &str, port: u16) -> TcpStream {
    use rustix::net::{AddressFamily, SocketType};
    let socket = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    rustix::net::bind(&socket, &from).unwrap();
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    rustix::net::connect(&socket, &to).unwrap();
    TcpStream::from(socket)
}

/// Whether the server closes `socket` within `within` (of silence).
fn closed_within(socket: &mut TcpStream, within: Duration) -> bool {
    socket.set_read_timeout(Some(within)).unwrap();
    match socket.read_to_end(&mut Vec::new()) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

/// A client that speaks HTTP/2 on `stream` and asks nothing: the preface and SETTINGS,
/// then only acknowledgements of the server's SETTINGS and PINGs. Says on `ready` when the
/// server answered, and returns when it closed the connection: after how long, and whether
/// it sent GOAWAY first; `None` when it is still open after 15 s.
fn hold_http2(
    mut stream: impl Read + Write,
    ready: std::sync::mpsc::Sender<()>,
) -> Option<(Duration, bool)> {
    let start = Instant::now();
    // The preface, and SETTINGS with none: 9-byte frame headers (length, type, flags, stream).
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .unwrap();
    let mut goaway = false;
    while start.elapsed() < Duration::from_secs(15) {
        let mut head = [0u8; 9];
        if let Err(e) = stream.read_exact(&mut head) {
            let open = matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            );
            return (!open).then(|| (start.elapsed(), goaway));
        }
        let mut payload = vec![0; u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize];
        if stream.read_exact(&mut payload).is_err() {
            return Some((start.elapsed(), goaway));
        }
        let (kind, ack) = (head[3], head[4] & 1 == 1);
        // (A write can fail once the server closed; the next read says so.)
        let _ = match kind {
            4 if !ack => {
                let _ = ready.send(());
                stream.write_all(&[0, 0, 0, 4, 1, 0, 0, 0, 0])
            }
            6 if !ack => stream.write_all(&[&[0, 0, 8, 6, 1, 0, 0, 0, 0][..], &payload].concat()),
            7 => {
                goaway = true;
                Ok(())
            }
            _ => Ok(()),
        };
    }
    None
}

/// A certificate for 127.0.0.1 in PEM files under `dir`, and a TLS client configuration
/// (HTTP/2 only) that trusts it.
fn tls_pair(dir: &Path) -> (PathBuf, PathBuf, Arc<rustls::ClientConfig>) {
    let made = rcgen::generate_simple_self_signed(vec!["127.0.0.1".into()]).unwrap();
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    fs::write(&cert, made.cert.pem()).unwrap();
    fs::write(&key, made.signing_key.serialize_pem()).unwrap();
    let mut roots = rustls::RootCertStore::empty();
    roots.add(made.cert.der().clone()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    (cert, key, Arc::new(config))
}

/// Clients that speak HTTP/2 and ask nothing (no token needed) no longer hold every slot:
/// a connection with no request in progress is closed after --timeout (GOAWAY first),
/// over TLS and plain HTTP; one that sends nothing at all too, and over TLS a handshake
/// that does not end within it.
#[test]
fn idle_connections_are_closed_after_the_idle_timeout() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let (cert, key, client) = tls_pair(work.path());
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    for tls in [false, true] {
        let mut args = vec!["--max-connections", "4", "--timeout", "2"];
        match tls {
            true => args.extend(["--cert", cert, "--key", key]),
            false => args.push("--plain-http"),
        }
        let server = Server::start(&dest, &args, Some(TOKEN));
        // Four, from four addresses: each may hold a quarter of the slots.
        let (ready, answered) = std::sync::mpsc::channel();
        let holders: Vec<_> = (2..6)
            .map(|i| {
                let socket = connect_from(&format!("127.0.0.{i}"), server.port);
                socket
                    .set_read_timeout(Some(Duration::from_secs(15)))
                    .unwrap();
                let (ready, client) = (ready.clone(), client.clone());
                std::thread::spawn(move || match tls {
                    true => {
                        let name = "127.0.0.1".try_into().unwrap();
                        let tls = rustls::ClientConnection::new(client, name).unwrap();
                        hold_http2(rustls::StreamOwned::new(tls, socket), ready)
                    }
                    false => hold_http2(socket, ready),
                })
            })
            .collect();
        for _ in 0..4 {
            answered
                .recv_timeout(Duration::from_secs(10))
                .expect("served");
        }
        let start = Instant::now();
        let (status, _, _) = server.curl(None, &["--max-time", "15"], "/");
        assert_eq!(
            status, 200,
            "tls {tls}: the page, once an idle slot was freed"
        );
        assert!(
            start.elapsed() > Duration::from_millis(1500),
            "tls {tls}: no wait"
        );
        for holder in holders {
            let held = holder.join().unwrap();
            let (after, goaway) = held.unwrap_or_else(|| panic!("tls {tls}: never closed"));
            assert!(goaway, "tls {tls}: closed without GOAWAY");
            assert!(
                after > Duration::from_millis(1500) && after < Duration::from_secs(8),
                "tls {tls}: closed after {after:?}"
            );
        }
        // Nothing sent at all (plain: not even which HTTP; TLS: no handshake).
        let mut silent = connect_from("127.0.0.2", server.port);
        let start = Instant::now();
        assert!(
            closed_within(&mut silent, Duration::from_secs(6)),
            "tls {tls}: a silent connection stayed open"
        );
        assert!(start.elapsed() > Duration::from_millis(1500), "tls {tls}");
        if tls {
            server.wait_for_log("TLS handshake timed out");
        }
    }
}

/// One address can hold no more than its share of --max-connections (a quarter): its
/// connections beyond that are closed at once, while other addresses are served.
#[test]
fn one_address_holds_at_most_a_quarter_of_the_connections() {
    let work = tempdir();
    let dest = work.path().join("dest");
    let args = ["--plain-http", "--max-connections", "8"];
    let server = Server::start(&dest, &args, Some(TOKEN));
    let _held: Vec<TcpStream> = (0..2)
        .map(|_| connect_from("127.0.0.2", server.port))
        .collect();
    let mut third = connect_from("127.0.0.2", server.port);
    assert!(
        closed_within(&mut third, Duration::from_secs(3)),
        "a third connection of 127.0.0.2 was kept"
    );
    assert!(server
        .wait_for_log("closed: this address holds its share of connections (2)")
        .contains("127.0.0.2"));
    let (status, _, _) = server.curl(None, &["--max-time", "5"], "/");
    assert_eq!(status, 200, "another address is served");
}

#[test]
fn busy_and_stopping_servers_keep_running_uploads_whole_or_not_at_all() {
    let work = tempdir();
    let (src, archive) = sample(work.path(), 30);
    let bytes = fs::read(&archive).unwrap();
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http", "--max-uploads", "1"], Some(TOKEN));
    let mut first = partial_upload(&server, "first", &bytes, bytes.len() / 2);
    // (Its log line comes at its end: time for it to take the one slot.)
    std::thread::sleep(Duration::from_millis(300));
    let (status, body) = server.upload(&archive, Some("second"), &[]);
    assert_eq!(status, 503, "{body}");
    // SIGTERM: no new connection, the running upload finishes and lands.
    server.signal(rustix::process::Signal::TERM);
    server.wait_for_log("stopping");
    first.write_all(&bytes[bytes.len() / 2..]).unwrap();
    let (status, text) = answer(&mut first);
    assert_eq!(status, 200, "{text}");
    assert_same_tree(&src, &dest.join("first"), umask());
    let mut server = server;
    assert_eq!(wait_exit(&mut server.child).signal(), Some(libc::SIGTERM));

    // A second signal cancels the running upload: nothing of it stays.
    let dest = work.path().join("dest2");
    let mut server = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let mut held = partial_upload(&server, "held", &bytes, bytes.len() / 2);
    std::thread::sleep(Duration::from_millis(500));
    server.signal(rustix::process::Signal::TERM);
    server.wait_for_log("stopping");
    server.signal(rustix::process::Signal::INT);
    let (status, text) = answer(&mut held);
    assert_eq!(status, 503, "{text}");
    assert_eq!(wait_exit(&mut server.child).signal(), Some(libc::SIGTERM));
    assert_holds(&dest, &[], "a cancelled upload");
}

#[test]
fn a_token_file_must_be_private_and_a_given_certificate_is_served() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let token_file = work.path().join("token");
    fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    fs::set_permissions(&token_file, fs::Permissions::from_mode(0o640)).unwrap();
    let dest = work.path().join("dest");
    let mut cmd = barge(["serve"]);
    cmd.arg(&dest).arg("--token-file").arg(&token_file);
    let out = run(cmd.args(["--listen", "127.0.0.1:0"]), None);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("chmod 600") && !stderr.contains(TOKEN),
        "{stderr}"
    );
    fs::set_permissions(&token_file, fs::Permissions::from_mode(0o600)).unwrap();
    // A certificate made by openssl: served (curl trusts it alone, and no other), and the
    // fingerprint printed is its own.
    let make_cert = |name: &str| {
        let (cert, key) = (
            work.path().join(format!("{name}.pem")),
            work.path().join(format!("{name}-key.pem")),
        );
        run_ok(
            Command::new("openssl")
                .args([
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:prime256v1",
                ])
                .args(["-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"])
                .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
                .arg(&key)
                .arg("-out")
                .arg(&cert),
            None,
        );
        (cert, key)
    };
    let (cert, key) = make_cert("cert");
    let (other, _) = make_cert("other");
    let openssl = run_ok(
        Command::new("openssl")
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&cert),
        None,
    );
    let fingerprint = String::from_utf8(openssl.stdout).unwrap();
    let fingerprint = fingerprint.trim().rsplit('=').next().unwrap().to_owned();
    let (token, cert, key) = (
        token_file.to_str().unwrap(),
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
    );
    let server = Server::start(
        &dest,
        &["--token-file", token, "--cert", cert, "--key", key],
        None,
    );
    assert!(
        server.wait_for_log("listening").contains(&fingerprint),
        "{fingerprint}"
    );
    let data = format!("@{}", archive.display());
    let (status, version, body) = server.curl(
        Some(TOKEN),
        &[
            "--cacert",
            cert,
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &data,
        ],
        "/upload",
    );
    assert_eq!((status, version.as_str()), (200, "2"), "{body}");
    let other = other.to_str().unwrap();
    let (status, _, _) = server.curl(Some(TOKEN), &["--cacert", other], "/");
    assert_eq!(
        status, 0,
        "a certificate curl was not told to trust was accepted"
    );
}

/// On all interfaces the server prints an address for each, writes the certificate it made
/// for all of them, and curl trusts it with `--cacert FILE` at every address; the file goes
/// when the server stops. Plain HTTP there is warned about.
#[test]
fn on_all_interfaces_every_address_is_printed_and_curl_trusts_the_written_certificate() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start_on("0.0.0.0:0", &dest, &[], None);
    let cert = server
        .runtime
        .path()
        .join(format!("barge/serve-{}.pem", server.port));
    let told = server.wait_for_log("the generated certificate is in");
    assert!(
        told.contains(&format!("{} (curl --cacert", cert.display())),
        "{told}"
    );
    // This host's IPv4 addresses, as `hostname -I` lists them.
    let hostname = run(Command::new("hostname").arg("-I"), None);
    let ips = String::from_utf8(hostname.stdout).unwrap();
    let mut want: Vec<String> = vec!["127.0.0.1".into()];
    want.extend(
        ips.split_whitespace()
            .filter(|ip| !ip.contains(':'))
            .map(String::from),
    );
    let stdout = wait_for_line(&server.stdout, "#token=");
    let token = stdout.rsplit("#token=").next().unwrap().to_owned();
    let urls: Vec<String> = want
        .iter()
        .map(|ip| format!("https://{ip}:{}/", server.port))
        .collect();
    wait_for_line(&server.stdout, &format!("{}#token=", urls.last().unwrap()));
    let printed = server.stdout.lock().unwrap().clone();
    let mut printed: Vec<&str> = printed.lines().collect();
    let mut wanted: Vec<String> = urls
        .iter()
        .map(|url| format!("{url}#token={token}"))
        .collect();
    printed.sort_unstable();
    wanted.sort_unstable();
    assert_eq!(printed, wanted, "one address a line, each with the token");
    let also = server.wait_for_log(if urls.len() > 1 {
        "also listening on"
    } else {
        "listening on"
    });
    assert!(
        urls[1..].iter().all(|url| also.contains(url.as_str())),
        "{also}"
    );
    let data = format!("@{}", archive.display());
    for url in &urls {
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--max-time", "60", "--cacert"]).arg(&cert);
        cmd.args(["-H", &format!("Authorization: Bearer {token}")]);
        cmd.args([
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &data,
        ]);
        let out = run(cmd.arg(format!("{url}upload")), None);
        let body = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{url}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(field(&body, "name").is_string(), "{url}: {body}");
    }
    assert_eq!(names_in(&dest).len(), urls.len());
    let (_, err) = server.stop();
    assert!(!cert.exists(), "the certificate outlived its server");
    assert!(!err.contains("warning"), "{err}");

    let plain = Server::start_on("0.0.0.0:0", &dest, &["--plain-http"], Some(TOKEN));
    plain.wait_for_log("warning: plain HTTP on 0.0.0.0:");
    let (_, err) = plain.stop();
    assert!(
        err.contains("the token and every upload cross the network unencrypted"),
        "{err}"
    );
    let loopback = Server::start(&dest, &["--plain-http"], Some(TOKEN));
    let (_, err) = loopback.stop();
    assert!(!err.contains("warning"), "plain HTTP on loopback: {err}");
}

/// Only an upload that landed takes a number; `GET /upload` tells whether a token is
/// right; the page's icon is served; every log line starts with its time.
#[test]
fn numbers_go_to_landed_uploads_tokens_are_checked_and_log_lines_have_their_time() {
    let work = tempdir();
    let (_, archive) = sample(work.path(), 3);
    let dest = work.path().join("dest");
    let server = Server::start(&dest, &["--plain-http", "--json"], None);
    let address = wait_for_line(&server.stdout, "\"url\"");
    let address: serde_json::Value = serde_json::from_str(&address).unwrap();
    let url = address["url"].as_str().unwrap();
    assert_eq!(address["urls"][0], url, "{address}");
    let token = url.rsplit("#token=").next().unwrap().to_owned();
    let bad = work.path().join("bad");
    fs::write(&bad, b"not an archive").unwrap();
    let upload = |archive: &Path| {
        let data = format!("@{}", archive.display());
        let args = [
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &data,
        ];
        let (status, _, body) = server.curl(Some(&token), &args, "/upload");
        (status, body)
    };
    assert_eq!(upload(&bad).0, 400);
    let (status, body) = upload(&archive);
    assert_eq!(status, 200, "{body}");
    let name = field(&body, "name");
    assert!(
        name.as_str().unwrap().ends_with("Z-1"),
        "{name}: the failed one took none"
    );
    assert_eq!(server.curl(Some(&token), &[], "/upload").0, 204);
    assert_eq!(
        server
            .curl(Some("wrong-token-0123456789"), &[], "/upload")
            .0,
        401
    );
    assert_eq!(server.curl(None, &["-I"], "/upload").0, 401);
    for icon in ["/favicon.ico", "/favicon.svg"] {
        let (status, _, svg) = server.curl(None, &[], icon);
        assert!(status == 200 && svg.starts_with("<svg"), "{icon}: {status}");
    }
    let (_, err) = server.stop();
    let stamped = |line: &str| {
        let (time, rest) = line.split_at_checked(21).unwrap_or(("", line));
        let digits = time.bytes().filter(u8::is_ascii_digit).count();
        let shape = time.len() == 21 && &time[4..5] == "-" && &time[10..11] == "T";
        digits == 14 && shape && time.ends_with("Z ") && rest.starts_with("barge serve: ")
    };
    assert!(err.lines().count() >= 8, "{err}");
    assert!(err.lines().all(stamped), "{err}");
}
