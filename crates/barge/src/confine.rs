//! Confinement at a process boundary, for a process that must outlive its landings (a
//! server): each archive lands in a **confined lander child** that keeps only its input and
//! its report.
//!
//! The sandbox of `open_dest` (user namespace, `chroot` to DEST, every other
//! fd closed) confines the whole process, so a long-running, multi-threaded parent cannot
//! apply it to itself, nor `fork` without `exec`. Instead [`ConfinedUnpack::spawn`] starts an
//! executable (by default the running one) in child mode, and the parent writes the archive's
//! bytes into [`ConfinedChild::input`] (a socket's decrypted data, an HTTP body) and collects
//! the result with [`ConfinedChild::wait`].
//!
//! The child mode is entered by [`run_child_if_requested`], which any binary embedding the
//! library calls first thing in `main` (the `barge` command does). The protocol between the
//! two is private to this module: argv is `[exe, marker, DEST, request as JSON]`; the
//! archive comes through a queue in shared memory (`sys/queue.rs`, cheaper than a pipe)
//! whose bell is stdin; stdout carries one JSON line per entry landed when the parent asked
//! for a list (`{"done":{"path":HEX,"kind":KIND}}`, the path's bytes in hex), then one JSON
//! report (the [`Landed`] result or the error), read by a thread of the parent while it
//! lands when entries are listed, else at its end; stderr is the parent's. The child closes every fd above 2, maps the queue, opens DEST by
//! the rules of `open_dest` (created when missing, never followed if a symlink), confines
//! itself there and lands with [`Unpack`] streaming from the queue. Where the sandbox is
//! unavailable it fails closed, unless the parent allowed it to land unconfined.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;

use serde::{Deserialize, Serialize};

use crate::error::{Confined, ConfinedKind, Error, Result, TreePath};
use crate::format::Limits;
use crate::land::LandSummary;
use crate::root::Confinement;
use crate::source::SourceReader;
use crate::sys::fds::close_range;
use crate::sys::fds::raise_fd_limit;
use crate::sys::queue::{QueueReader, QueueWriter};
use crate::tree::Kind;
use crate::unpack::{Archive, Engine, Restore, Unpack};
use crate::{Done, Listener, Progress};

/// The bytes of the queue between parent and child. Its pages are the first touched of a
/// transfer, and half of it is what wakes a patient reader: the smallest size as fast as
/// larger ones on large and small trees (docs/BENCHMARKS.md, "Design measurements").
const QUEUE: usize = 512 << 10;

/// How long [`ConfinedChild::cancel`] lets a child clean up before it kills it.
const CANCEL_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The longest line the child may write on stdout (a report with a long path and message
/// is far shorter): a longer one is garbled.
const MAX_LINE: u64 = 1 << 20;

/// The first argument that asks an executable for the child mode.
const CHILD_MODE: &str = "--barge-confined-lander";

/// A landing to run in a confined child (see the [module](self) documentation).
#[derive(Clone, Debug)]
pub struct ConfinedUnpack {
    dest: PathBuf,
    executable: Option<PathBuf>,
    request: Request,
    /// Told each entry the child lands (with `request.list`).
    listener: Option<Listener>,
}

/// What the parent asks of the child, as the second argument after the marker.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Request {
    /// The engine.
    engine: Engine,
    /// The limits, or [`Unpack`]'s defaults.
    limits: Option<Limits>,
    /// What to restore.
    #[serde(default)]
    restore: Restore,
    /// Land even where the sandbox is unavailable.
    allow_unconfined: bool,
    /// Leading path components to drop (see [`Unpack::strip_components`]).
    #[serde(default)]
    strip_components: usize,
    /// The input is zstd frames.
    #[serde(default)]
    compressed: bool,
    /// Report each entry landed, before the result.
    #[serde(default)]
    list: bool,
}

/// An entry landed, as the child reports it.
#[derive(Debug, Serialize, Deserialize)]
struct Entry {
    /// Its path below DEST, its bytes in hex (a name need not be UTF-8).
    path: String,
    kind: Kind,
}

/// What a confined landing did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Landed {
    /// What it created.
    pub summary: LandSummary,
    /// How it was confined: [`Confinement::Sandboxed`], or [`Confinement::Unavailable`]
    /// when the parent allowed that.
    pub confinement: Confinement,
}

/// A line of the child on stdout: entries landed (when asked), then the result.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Report {
    /// An entry landed.
    Done(Entry),
    Landed(Landed),
    /// The error, typed, that becomes [`Error::Confined`] in the parent.
    Failed(Confined),
}

impl ConfinedUnpack {
    /// A landing into `dest` (resolved from the parent's working directory) by the running
    /// executable, with [`Unpack`]'s default engine and limits, failing where the sandbox
    /// is unavailable.
    pub fn new(dest: impl Into<PathBuf>) -> ConfinedUnpack {
        ConfinedUnpack {
            dest: dest.into(),
            executable: None,
            request: Request {
                engine: Engine::default(),
                limits: None,
                restore: Restore::default(),
                allow_unconfined: false,
                strip_components: 0,
                compressed: false,
                list: false,
            },
            listener: None,
        }
    }

    /// Runs `path` as the child instead of the running executable; it must call
    /// [`run_child_if_requested`] first (the `barge` binary does).
    pub fn executable(mut self, path: impl Into<PathBuf>) -> ConfinedUnpack {
        self.executable = Some(path.into());
        self
    }

    /// Lands with `engine`.
    pub fn engine(mut self, engine: Engine) -> ConfinedUnpack {
        self.request.engine = engine;
        self
    }

    /// Refuses archives beyond `limits` (see [`Unpack::limits`]).
    pub fn limits(mut self, limits: Limits) -> ConfinedUnpack {
        self.request.limits = Some(limits);
        self
    }

    /// Restores metadata as `restore` says (see [`Unpack::restore`]; the child's umask is
    /// the parent's).
    pub fn restore(mut self, restore: Restore) -> ConfinedUnpack {
        self.request.restore = restore;
        self
    }

    /// Drops the first `n` components of every path (see [`Unpack::strip_components`]).
    pub fn strip_components(mut self, n: usize) -> ConfinedUnpack {
        self.request.strip_components = n;
        self
    }

    /// The input is zstd frames (`send --compress`), which the child decompresses: the
    /// decompressor, C code, then sees the sender's bytes confined too.
    pub fn compressed(mut self, yes: bool) -> ConfinedUnpack {
        self.request.compressed = yes;
        self
    }

    /// Tells `listener` each entry the child lands, as it lands it (from a thread of the
    /// parent that reads the child's reports), as [`Progress::listing`] does.
    pub fn listing(self, listener: impl Fn(Done<'_>) + Send + Sync + 'static) -> Self {
        self.listener(Listener(std::sync::Arc::new(listener)))
    }

    /// Tells `listener` each entry the child lands (see [`ConfinedUnpack::listing`]).
    pub(crate) fn listener(mut self, listener: Listener) -> Self {
        self.request.list = true;
        self.listener = Some(listener);
        self
    }

    /// Lets the child land where the sandbox is unavailable (containment then rests on
    /// fd-relative landing; [`Landed::confinement`] says so). Off by default: the child
    /// fails with the kind `unconfined`.
    pub fn allow_unconfined(mut self, allow: bool) -> ConfinedUnpack {
        self.request.allow_unconfined = allow;
        self
    }

    /// Starts the child, which waits for the archive on [`ConfinedChild::input`]. Safe to
    /// call from any thread of a multi-threaded process (a `fork` + `exec`).
    pub fn spawn(&self) -> Result<ConfinedChild> {
        let executable = match &self.executable {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| Error::os("find the running executable", TreePath::default(), e))?,
        };
        let request = serde_json::to_string(&self.request).expect("plain data");
        let (input, bell) = QueueWriter::new(QUEUE)
            .map_err(|e| Error::os("make the confined lander's input", TreePath::default(), e))?;
        let mut child = Command::new(&executable)
            .arg(CHILD_MODE)
            .arg(&self.dest)
            .arg(request)
            .stdin(bell)
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| {
                let path = TreePath(executable.as_os_str().as_bytes().to_vec());
                Error::os("start the confined lander", path, e)
            })?;
        let stdout = child.stdout.take().expect("piped");
        // Entries come while the input goes in: a thread reads them (else the child could
        // block on a full pipe while the parent waits for room in the queue).
        let reader = match self.listener.clone() {
            Some(listener) => std::thread::Builder::new()
                .name("barge-lander-report".into())
                .spawn(move || read_reports(BufReader::new(stdout), Some(&listener)))
                .map(Reader::Thread)
                .map_err(|e| Error::os("start a thread for", shown(&child), e))?,
            None => Reader::AtEnd(stdout),
        };
        Ok(ConfinedChild {
            input: Some(input),
            reader: Some(reader),
            child,
        })
    }
}

/// A running confined lander. Dropping it before [`ConfinedChild::wait`] kills the child
/// (SIGKILL: a file it was writing may stay, short) and reaps it.
#[derive(Debug)]
pub struct ConfinedChild {
    child: Child,
    /// The archive's way in, until [`ConfinedChild::wait`] closes it (or it is taken).
    input: Option<QueueWriter>,
    /// Reads the child's stdout, until [`ConfinedChild::wait`].
    reader: Option<Reader>,
}

/// Where the child's reports are read.
#[derive(Debug)]
enum Reader {
    /// By a thread, which tells the entries as they come and returns the result.
    Thread(JoinHandle<Reports>),
    /// By [`ConfinedChild::wait`], from the pipe (no entries asked for).
    AtEnd(ChildStdout),
}

/// What the child's stdout said: its result, if it gave one, or how it was garbled.
type Reports = std::result::Result<Option<Report>, String>;

/// Reads the child's lines from `out` until its end (telling `listener` each entry), and
/// returns the result reported; a line that is not one the child writes ends the reading
/// (closing `out`, so that the child cannot block on it).
fn read_reports(mut out: impl BufRead, listener: Option<&Listener>) -> Reports {
    let mut result = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        (&mut out)
            .take(MAX_LINE)
            .read_until(b'\n', &mut line)
            .map_err(|e| format!("cannot be read: {e}"))?;
        if line.last() != Some(&b'\n') {
            // The end (a child killed mid-line died), or a line too long.
            return match line.len() as u64 >= MAX_LINE {
                true => Err(format!("has a line over {MAX_LINE} bytes")),
                false => Ok(result),
            };
        }
        if result.is_some() {
            return Err("goes on after its result".into());
        }
        let report = serde_json::from_slice(&line).map_err(|e| format!("has a bad line: {e}"))?;
        match (report, listener) {
            (Report::Done(entry), Some(listener)) => {
                let path = from_hex(&entry.path).ok_or("names a path not in hex")?;
                let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
                    Some(slash) => (&path[..slash], &path[slash + 1..]),
                    None => (&path[..0], &path[..]),
                };
                listener.tell(dir, name, entry.kind);
            }
            (Report::Done(_), None) => return Err("lists an entry nobody asked for".into()),
            (report, _) => result = Some(report),
        }
    }
}

/// The bytes of `hex` (two lowercase or uppercase digits each), if it is hex.
fn from_hex(hex: &str) -> Option<Vec<u8>> {
    let digits = hex.as_bytes().chunks(2);
    digits
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .filter(|bytes| bytes.len() * 2 == hex.len())
}

/// `bytes` in lowercase hex.
fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// How a child is named in messages.
fn shown(child: &Child) -> TreePath {
    TreePath(format!("<confined lander {}>", child.id()).into_bytes())
}

impl ConfinedChild {
    /// Where the archive's bytes go. A write failing with `BrokenPipe` means the child
    /// stopped reading (a bad archive, a full disk): [`ConfinedChild::wait`] says why.
    pub fn input(&mut self) -> &mut QueueWriter {
        self.input.as_mut().expect("open until taken or waited for")
    }

    /// Takes the input, for a writer elsewhere: the archive then ends when that drops it,
    /// and [`ConfinedChild::cancel`] stops the child while it is held.
    pub fn take_input(&mut self) -> QueueWriter {
        self.input.take().expect("taken once, before wait")
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Stops a landing whose input failed (a cut connection, a bad upload): SIGTERM while
    /// its input stays open, so it cannot take what it has for the archive's end; it removes
    /// the file it was writing (or the tree it staged) and reports. One that has not stopped
    /// after 10 s is killed (its keeper then removes a staged tree). Returns what
    /// [`ConfinedChild::wait`] does.
    pub fn cancel(self) -> Result<Landed> {
        use rustix::process::{kill_process, waitid, Pid, Signal, WaitId, WaitIdOptions};
        let pid = Pid::from_raw(self.child.id() as i32).expect("a child's pid is positive");
        let _ = kill_process(pid, Signal::TERM);
        let start = std::time::Instant::now();
        let exited = WaitIdOptions::EXITED | WaitIdOptions::NOWAIT | WaitIdOptions::NOHANG;
        while let Ok(None) = waitid(WaitId::Pid(pid), exited) {
            if start.elapsed() > CANCEL_GRACE {
                let _ = kill_process(pid, Signal::KILL);
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.wait()
    }

    /// Ends the input (so what was written is the whole archive), waits for the child and
    /// returns what it landed, or its error as [`Error::Confined`] (of the kind `died` when
    /// it ended without a report: a crash, a kill).
    pub fn wait(mut self) -> Result<Landed> {
        drop(self.input.take());
        let reports = match self.reader.take().expect("taken once, by wait") {
            Reader::Thread(thread) => thread.join().unwrap_or_else(|_| Err("panicked".into())),
            Reader::AtEnd(pipe) => read_reports(BufReader::new(pipe), None),
        };
        if reports.is_err() {
            // A child that garbles its reports is not trusted to finish.
            let _ = self.child.kill();
        }
        let status = self.child.wait();
        let status = status.map_err(|e| Error::os("wait for", shown(&self.child), e))?;
        match reports {
            Ok(Some(Report::Landed(landed))) => Ok(landed),
            Ok(Some(Report::Failed(confined))) => Err(Error::Confined(Box::new(confined))),
            Err(why) => {
                let message = format!(
                    "the confined lander's report (pid {}) {why}",
                    self.child.id()
                );
                Err(Error::Confined(Box::new(Confined::new(
                    ConfinedKind::Garbled,
                    message,
                ))))
            }
            Ok(_) => {
                let message = format!(
                    "the confined lander (pid {}) {} without reporting a result",
                    self.child.id(),
                    ended(status)
                );
                Err(Error::Confined(Box::new(Confined::new(
                    ConfinedKind::Died,
                    message,
                ))))
            }
        }
    }
}

/// How a process ended, for messages.
fn ended(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (_, Some(signal)) => format!("was killed by {}", crate::error::signal_name(signal)),
        _ => format!("ended ({status})"),
    }
}

impl Drop for ConfinedChild {
    fn drop(&mut self) {
        // Both do nothing once `wait` has reaped the child.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The child mode: when the process was started by [`ConfinedUnpack::spawn`], lands the
/// archive of its input queue, reports on stdout and exits (status 0 when it landed, 1 when
/// not); otherwise returns at once. Call it first in `main`, before parsing arguments,
/// starting threads or opening files.
pub fn run_child_if_requested() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(OsStr::new(CHILD_MODE)) {
        return;
    }
    let (report, status) = match land_confined(args) {
        Ok(landed) => (Report::Landed(landed), 0),
        Err(failure) => (Report::Failed(failure), 1),
    };
    let line = serde_json::to_string(&report).expect("plain data");
    // A parent that went away reads no report; there is no one else to tell.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    std::process::exit(status)
}

/// Lands the archive of the input queue into the DEST of `args` (DEST, then the request),
/// confined.
fn land_confined(mut args: impl Iterator<Item = OsString>) -> Result<Landed, Confined> {
    let (Some(dest), Some(request), None) = (args.next(), args.next(), args.next()) else {
        return Err(bad_request("want DEST and a request"));
    };
    let request: Request = serde_json::from_slice(request.as_bytes()).map_err(bad_request)?;
    // The parent stops the child by SIGTERM.
    let cancel = crate::interrupt::catch_signals();
    // Whatever the parent leaked (a fd without close-on-exec) goes before any input is
    // read. The sandbox closes again and fails where this fails.
    let _ = close_range(3, i32::MAX);
    let mut operation = Unpack::new()
        .engine(request.engine)
        .restore(request.restore)
        .strip_components(request.strip_components)
        .cancel(cancel.clone());
    if let Some(limits) = request.limits {
        operation = operation.limits(limits);
    }
    let queue = crate::sys::process::take_stdin()
        .ok_or_else(|| std::io::Error::other("stdin was taken before"))
        .and_then(|bell| QueueReader::open(bell, || cancel.is_cancelled()))
        .map_err(|e| Error::os("open the input queue", TreePath::default(), e))?;
    let archive = match request.compressed {
        true => Archive::from_reader(Decompressing(
            zstd::stream::read::Decoder::new(SourceReader::new(queue, cancel))
                .map_err(|e| Error::os("start zstd", TreePath::default(), e))?,
        )),
        false => Archive::from_source(queue),
    };
    raise_fd_limit();
    let mut destination = operation.prepare(Path::new(&dest), &archive)?;
    if let Confinement::Unavailable(reason) = &destination.confinement {
        if !request.allow_unconfined {
            // Dropped, the destination removes what it created.
            let why = format!("sandbox unavailable ({reason}); refusing to land unconfined");
            return Err(Confined::new(ConfinedKind::Unconfined, why));
        }
    }
    let progress = match request.list {
        true => Progress::listing(report_done),
        false => Progress::default(),
    };
    let summary = operation.land(&archive, &mut destination, &progress)?;
    Ok(Landed {
        summary,
        confinement: destination.confinement.clone(),
    })
}

/// Reports an entry landed to the parent, as one line (written whole: the landing's threads
/// share stdout); a parent that went away is not told.
fn report_done(done: Done<'_>) {
    let path = TreePath::join([done.dir], done.name);
    let entry = Entry {
        path: to_hex(&path.0),
        kind: done.kind,
    };
    let mut line = serde_json::to_string(&Report::Done(entry)).expect("plain data");
    line.push('\n');
    let _ = std::io::stdout().lock().write_all(line.as_bytes());
}

/// A decompressor whose errors say so.
struct Decompressing<R>(R);

impl<R: Read> Read for Decompressing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (self.0.read(buf)).map_err(|e| std::io::Error::new(e.kind(), format!("zstd: {e}")))
    }
}

/// A request the child does not understand (a parent of another version).
fn bad_request(why: impl std::fmt::Display) -> Confined {
    let message = format!("the confined lander's request is invalid: {why}");
    Confined::new(ConfinedKind::Request, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unpack::NotRestored;

    /// The report as the parent reads it back.
    fn round_trip(error: Error) -> Confined {
        let text = serde_json::to_string(&Report::Failed(error.into())).unwrap();
        match serde_json::from_str(&text).unwrap() {
            Report::Failed(failure) => failure,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_reported_error_keeps_its_kind_errno_and_message() {
        let error = Error::io(
            "openat",
            TreePath(b"a/\xff".to_vec()),
            rustix::io::Errno::NOSPC,
        );
        let message = error.to_string();
        let failure = round_trip(error);
        assert_eq!(failure.kind, ConfinedKind::Io);
        assert_eq!(failure.errno, Some(libc::ENOSPC));
        assert_eq!(failure.path, Some(TreePath(b"a/\xff".to_vec())));
        assert_eq!(failure.message, message);
        assert!(
            message.starts_with("a/\\xff: cannot open: No space left on device"),
            "{message}"
        );
        let failure = round_trip(Error::Interrupted {
            signal: libc::SIGTERM,
        });
        assert_eq!(
            (failure.kind, failure.errno),
            (ConfinedKind::Interrupted, None)
        );
        assert_eq!(failure.message, "interrupted by SIGTERM");
    }

    #[test]
    fn a_broken_limit_comes_back_typed_with_its_entry_and_offset() {
        let error = Error::Format {
            offset: 4096,
            path: TreePath(b"d/big".to_vec()),
            kind: crate::format::FormatError::TooManyBytes(10),
        };
        let failure = round_trip(error);
        assert_eq!(failure.kind, ConfinedKind::Format);
        assert_eq!(failure.limit, Some(crate::format::Limit::Bytes));
        assert_eq!(failure.code.as_deref(), Some("too-many-bytes"));
        assert_eq!(failure.offset, Some(4096));
        assert_eq!(failure.path, Some(TreePath(b"d/big".to_vec())));
        let bad = round_trip(Error::Format {
            offset: 0,
            path: TreePath::default(),
            kind: crate::format::FormatError::BadMagic,
        });
        assert_eq!((bad.limit, bad.code.as_deref()), (None, Some("bad-magic")));
    }

    #[test]
    fn a_request_round_trips_and_names_every_engine() {
        for (name, engine) in Engine::ALL {
            let landing = ConfinedUnpack::new("d").engine(engine).limits(Limits {
                max_entries: Some(7),
                ..Limits::default()
            });
            let text = serde_json::to_string(&landing.request).unwrap();
            assert!(text.contains(&format!(r#""engine":"{name}""#)), "{text}");
            let back: Request = serde_json::from_str(&text).unwrap();
            assert_eq!(back.engine, engine);
            assert_eq!(back.limits.map(|l| l.max_entries), Some(Some(7)));
            assert!(!back.allow_unconfined);
        }
    }

    #[test]
    fn entries_are_told_and_a_garbled_report_is_an_error() {
        let told = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = told.clone();
        let listener = Listener(std::sync::Arc::new(move |done: Done<'_>| {
            let entry = (done.dir.to_vec(), done.name.to_vec(), done.kind);
            seen.lock().unwrap().push(entry);
        }));
        let read = |text: &[u8]| read_reports(text, Some(&listener));
        let landed = serde_json::to_string(&Report::Landed(Landed {
            summary: LandSummary::default(),
            confinement: Confinement::Sandboxed,
        }))
        .unwrap();
        let good = format!(
            "{{\"done\":{{\"path\":\"{}\",\"kind\":\"dir\"}}}}\n\
             {{\"done\":{{\"path\":\"{}\",\"kind\":\"file\"}}}}\n{landed}\n",
            to_hex(b"d"),
            to_hex(b"d/n\n\xff"),
        );
        assert!(matches!(read(good.as_bytes()), Ok(Some(Report::Landed(_)))));
        assert_eq!(
            *told.lock().unwrap(),
            [
                (b"".to_vec(), b"d".to_vec(), Kind::Dir),
                (b"d".to_vec(), b"n\n\xff".to_vec(), Kind::File)
            ]
        );
        // Cut mid-line (a child killed) or silent: no result, as a child that died.
        assert!(matches!(read(&good.as_bytes()[..30]), Ok(None)));
        assert!(matches!(read(b""), Ok(None)));
        let garbled: [&[u8]; 7] = [
            b"{\"done\":{\"path\":\"6g\",\"kind\":\"file\"}}\n",
            b"{\"done\":{\"path\":\"616\",\"kind\":\"file\"}}\n",
            b"{\"done\":{\"path\":\"61\",\"kind\":\"elf\"}}\n",
            b"{\"done\":\"61\"}\n",
            b"not json\n",
            b"\xff\xfe\n",
            &[landed.as_bytes(), b"\n", landed.as_bytes(), b"\n"].concat(),
        ];
        for text in garbled {
            let shown = String::from_utf8_lossy(text);
            assert!(read(text).is_err(), "{shown}");
        }
        let long = [&b"{\"done\":\""[..], &vec![b'6'; MAX_LINE as usize]].concat();
        let err = read(&long).err().unwrap();
        assert_eq!(err, format!("has a line over {MAX_LINE} bytes"));
        let unasked = b"{\"done\":{\"path\":\"61\",\"kind\":\"file\"}}\n";
        let err = read_reports(&unasked[..], None).err().unwrap();
        assert_eq!(err, "lists an entry nobody asked for");
        assert_eq!(told.lock().unwrap().len(), 2, "a garbled line was told");
    }

    #[test]
    fn a_landing_reports_its_summary_and_confinement() {
        let landed = Landed {
            summary: LandSummary {
                dirs: 2,
                files: 3,
                bytes: 4,
                not_restored: NotRestored {
                    owners: 5,
                    ..NotRestored::default()
                },
                ..LandSummary::default()
            },
            confinement: Confinement::Unavailable("no user namespace".into()),
        };
        let text = serde_json::to_string(&Report::Landed(landed.clone())).unwrap();
        match serde_json::from_str(&text).unwrap() {
            Report::Landed(back) => assert_eq!(back, landed),
            other => panic!("{other:?}"),
        }
    }
}
