//! What the user sees besides the work itself: the exit status, error and warning lines, a
//! progress line on a terminal, and the closing summary (human or JSON).

use std::fmt::Display;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use barge::du::Du;
use barge::exclude::Exclude;
use barge::{Progress, TreePath};
use serde_json::{json, Map, Value};

use crate::OutputArgs;

/// The exit status table, for `--help` (a macro, so `concat!` can add it to other texts). A
/// blank line after each status keeps them apart in the manual page, which fills lines.
macro_rules! exit_status {
    () => {
        "Exit status:

0: done.

1: an error stopped the command, or the command line was wrong. An unpack into a new DEST
leaves no DEST; a pack to -o FILE leaves FILE as it was. cp goes on past an entry it cannot
copy (each is named) and exits with 1 at the end, as cp does.

2: done, but some entries were left out, each named in a warning (files that pack could not
read, entries du could not measure).

A reader that goes away early (`barge list A | head`) ends list and du quietly with 0, as rg
does; pack says that the archive it was writing is incomplete, with 1."
    };
}
pub(crate) use exit_status;

/// How a command ended: the exit statuses `barge` documents ([`exit_status!`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Done.
    Success = 0,
    /// Stopped by an error, or a wrong command line.
    Error = 1,
    /// Done, but some entries were left out (each named in a warning).
    Partial = 2,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
    }
}

/// Prints a line on stderr in one `write` (`eprintln!` writes each piece of its format on its
/// own), so that the lines of concurrent connections, or of processes sharing the stream (a
/// journal, a log file), stay whole.
macro_rules! log_line {
    ($($arg:tt)*) => {
        $crate::report::to_stderr(&format!("{}\n", format_args!($($arg)*)))
    };
}
pub(crate) use log_line;

/// Writes `text` on stderr in one `write`; an error there has nowhere to be reported.
pub(crate) fn to_stderr(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

/// Whether [`warn`] prints nothing (`-q`).
static QUIET: AtomicBool = AtomicBool::new(false);

/// Asks [`warn`] to print nothing (`-q`: the exit status still tells).
pub fn hide_warnings(hide: bool) {
    QUIET.store(hide, Ordering::Relaxed);
}

/// Prints `barge: warning: MESSAGE` on stderr, unless `-q`.
pub fn warn(message: impl Display) {
    if QUIET.load(Ordering::Relaxed) {
        return;
    }
    let text = message.to_string();
    match DETAILS.load(Ordering::Relaxed) {
        true => log_line!("barge: warning: {text}"),
        false => log_line!("barge: warning: {}", without_errno(&text)),
    }
}

/// `n` and the noun `plural`, in the singular for one (`1 dir`, `2 dirs`, `1 entry`).
pub fn counted(n: u64, plural: &str) -> String {
    match (n, plural.strip_suffix("ies")) {
        (1, Some(stem)) => format!("1 {stem}y"),
        (1, None) => format!("1 {}", plural.strip_suffix('s').unwrap_or(plural)),
        _ => format!("{n} {plural}"),
    }
}

/// Prints `barge: note: MESSAGE` on stderr: worth knowing, not a problem.
pub fn note(message: impl Display) {
    log_line!("barge: note: {message}");
}

/// Whether [`failure`] adds the failed call and its errno (`-v`).
static DETAILS: AtomicBool = AtomicBool::new(false);

/// Asks [`failure`] for the failed call and its errno after the message (`-v`).
pub fn show_details(show: bool) {
    DETAILS.store(show, Ordering::Relaxed);
}

/// Prints `barge: error: MESSAGE` for an error chain, its causes after colons; with `-v`
/// (see [`show_details`]) the failed system call and errno in parentheses.
pub fn failure(error: &anyhow::Error) {
    let cause = error.chain().find_map(|c| c.downcast_ref::<barge::Error>());
    let text = format!("{error:#}");
    match DETAILS.load(Ordering::Relaxed) {
        true => match cause.and_then(barge::Error::detail) {
            Some(detail) => log_line!("barge: error: {text} ({detail})"),
            None => log_line!("barge: error: {text}"),
        },
        false => log_line!("barge: error: {}", without_errno(&text)),
    }
}

/// `text` less the " (os error N)" that Rust's OS errors end in: `-v` keeps it.
fn without_errno(text: &str) -> String {
    let mut rest = text;
    let mut plain = String::new();
    while let Some(start) = rest.find(" (os error ") {
        plain += &rest[..start];
        rest = &rest[start..];
        let end = rest.find(')').map_or(rest.len(), |end| end + 1);
        rest = &rest[end..];
    }
    plain + rest
}

/// Prints `barge: error: MESSAGE` on stderr (an error chain with its causes after colons).
pub fn error(message: impl Display) {
    log_line!("barge: error: {message:#}");
}

/// With `--json`: the error as one JSON object (see [`error_fields`]), where the summary
/// would have gone.
pub fn json_error(error: &anyhow::Error, stdout_is_data: bool) {
    let cause = error.chain().find_map(|c| c.downcast_ref::<barge::Error>());
    let fields = error_fields(&without_errno(&format!("{error:#}")), cause);
    print_json(&Value::Object(fields), stdout_is_data);
}

/// The one shape of a JSON error, in every command's output and serve's answers: `error`
/// (the message, in words), and from the library's error its `kind` (`io`, `format`, `exists`, ...;
/// a confined lander's error by its own), the `code` and archive `offset` of a format
/// error, the `errno` and `operation` (the call) of an OS error, and a confined lander's entry as `path`.
pub fn error_fields(message: &str, cause: Option<&barge::Error>) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("error".into(), json!(message));
    let Some(cause) = cause else {
        return fields;
    };
    let kind = match cause {
        barge::Error::Confined(confined) => json!(confined.kind),
        cause => json!(cause.kind()),
    };
    fields.insert("kind".into(), kind);
    match cause {
        barge::Error::Format { offset, kind, .. } => {
            fields.insert("code".into(), json!(kind.code()));
            fields.insert("offset".into(), json!(offset));
        }
        barge::Error::Io { cause, op, .. } => {
            fields.insert("errno".into(), json!(cause.raw_os_error()));
            fields.insert("operation".into(), json!(op));
        }
        barge::Error::Confined(confined) => {
            let given = [
                ("code", confined.code.as_ref().map(|code| json!(code))),
                ("offset", confined.offset.map(|offset| json!(offset))),
                ("errno", confined.errno.map(|errno| json!(errno))),
            ];
            for (key, value) in given {
                if let Some(value) = value {
                    fields.insert(key.into(), value);
                }
            }
            if let Some(path) = &confined.path {
                json_path(&mut fields, "path", &path.0);
            }
        }
        _ => {}
    }
    fields
}

/// Prints one JSON value as a line on stdout, or on stderr when stdout carries an archive.
fn print_json(value: &Value, stdout_is_data: bool) {
    // A reader that went away is not told.
    let _ = match stdout_is_data {
        true => writeln!(std::io::stderr().lock(), "{value}"),
        false => writeln!(std::io::stdout().lock(), "{value}"),
    };
}

/// Whether `error` is a write to a pipe (or socket) whose reader went away.
pub fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        let io = match cause.downcast_ref::<barge::Error>() {
            Some(barge::Error::Io { cause, .. }) => cause,
            _ => match cause.downcast_ref::<std::io::Error>() {
                Some(io) => io,
                None => return false,
            },
        };
        io.kind() == std::io::ErrorKind::BrokenPipe
    })
}

/// Runs `work` while a progress line is refreshed on stderr, once the work has run for a
/// second: on a terminal (or anywhere with `--progress`: then a new line each second, for
/// logs, starting with the time elapsed), and never with `--no-progress` or `-q`. With the
/// `total` bytes known (asked each time, as a concurrent count may find it) it shows how
/// far along the work is and how long the rest should take; while that count is under way,
/// as an estimate (`~`) from what it counted so far. Returns the result and the elapsed
/// time.
pub fn with_progress<T>(
    out: OutputArgs,
    progress: &Progress,
    total: impl Fn() -> Option<Known> + Sync,
    work: impl FnOnce() -> T,
) -> (T, Duration) {
    let start = Instant::now();
    if !shows_progress(out) {
        return (work(), start.elapsed());
    }
    let terminal = std::io::stderr().is_terminal();
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        // Without a thread to be had (a task limit), the work goes on without the line.
        let _ = std::thread::Builder::new().spawn_scoped(scope, || {
            barge::interrupt::keep_signals_off_this_thread();
            let mut shown = false;
            let mut next = Duration::from_secs(1);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                let elapsed = start.elapsed();
                if elapsed < next || done.load(Ordering::Relaxed) {
                    continue;
                }
                let line = progress_line(progress.entries(), progress.bytes(), total(), elapsed);
                match terminal {
                    true => to_stderr(&format!("\r\x1b[K{line}")),
                    false => log_line!("[{}] {line}", clock(elapsed.as_secs())),
                }
                shown = true;
                next = match terminal {
                    true => elapsed,
                    false => elapsed + Duration::from_secs(1),
                };
            }
            if shown && terminal {
                to_stderr("\r\x1b[K");
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        result
    });
    (result, start.elapsed())
}

/// What a progress line knows of the total bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Known {
    /// All of them (an archive's size, a finished count).
    Exact(u64),
    /// At least these (a count under way).
    AtLeast(u64),
}

/// A progress line's total for cp, send and pack: the bytes below the sources, counted by a
/// `du` on a thread of its own ([`Total::count`]) while they work, and known as far as it
/// has counted.
#[derive(Debug, Default)]
pub struct Total {
    counted: Arc<Progress>,
    done: AtomicBool,
}

impl Total {
    /// Counts the bytes below `srcs` (each inode once), leaving out what `exclude` matches
    /// and, with `one_file_system`, what lies on other filesystems than each SRC's.
    pub fn count(&self, srcs: &[PathBuf], exclude: Exclude, one_file_system: bool) {
        barge::interrupt::keep_signals_off_this_thread();
        let du = Du::new()
            .threads(barge::threads::Work::Background.threads())
            .exclude(exclude)
            .one_file_system(one_file_system)
            .tally(self.counted.clone());
        du.run(srcs).for_each(drop);
        self.done.store(true, Ordering::Relaxed);
    }

    /// What is known of the total so far (nothing before the count found a byte).
    pub fn known(&self) -> Option<Known> {
        let bytes = self.counted.bytes();
        match self.done.load(Ordering::Relaxed) {
            true => Some(Known::Exact(bytes)),
            false => Some(Known::AtLeast(bytes)),
        }
        .filter(|_| bytes > 0)
    }
}

/// Whether [`with_progress`] shows a progress line: not on a terminal where `-v` lists
/// paths, unless `--progress` asks for both.
pub fn shows_progress(out: OutputArgs) -> bool {
    let terminal = std::io::stderr().is_terminal() && !out.verbose;
    !(out.quiet || out.no_progress) && (out.progress || terminal)
}

/// Whether `-v`'s list of paths goes to stderr: where stdout carries the archive
/// (`pack -o -`, as `tar -cvf -`) or the `--json` summary; else it goes to stdout.
pub fn lists_on_stderr(out: OutputArgs, stdout_is_data: bool) -> bool {
    stdout_is_data || out.json
}

/// Writes one line of `-v`'s list (see [`lists_on_stderr`]) in one `write`, so that the
/// lines of several threads stay whole; a reader that went away is not told.
pub fn list_line(line: &[u8], on_stderr: bool) {
    let _ = match on_stderr {
        true => std::io::stderr().lock().write_all(line),
        false => std::io::stdout().lock().write_all(line),
    };
}

/// The counters of a command's work; with `-v` they also list each entry as it is done,
/// by its path below the root as `barge list --names` shows it (a directory's ending in
/// '/'), where [`lists_on_stderr`] says. Without `-v` nothing is built per entry.
pub fn progress(out: OutputArgs, stdout_is_data: bool) -> Progress {
    match lister(out, stdout_is_data) {
        Some(lister) => Progress::listing(lister),
        None => Progress::default(),
    }
}

/// With `-v`, what lists each entry done for [`progress`] (and recv's landings).
pub fn lister(
    out: OutputArgs,
    stdout_is_data: bool,
) -> Option<impl Fn(barge::Done<'_>) + Send + Sync + 'static> {
    let on_stderr = lists_on_stderr(out, stdout_is_data);
    out.verbose.then_some(move |done: barge::Done<'_>| {
        let path = barge::TreePath::join([done.dir], done.name);
        let mut line = barge::error::escape_bytes(&path.0);
        if done.kind == barge::tree::Kind::Dir {
            line.push('/');
        }
        line.push('\n');
        list_line(line.as_bytes(), on_stderr);
    })
}

/// `42% 1234 entries, 1.2 GiB (150.0 MiB/s), 0:11 left` (without a `total`, from the
/// entries on; with a total under count, `~42%` and `~0:11 left`, and nothing once the work
/// has passed what was counted). The total is an archive's size, which holds a little more
/// than the content counted, or the content, so the line says 99% at most.
fn progress_line(entries: u64, bytes: u64, total: Option<Known>, elapsed: Duration) -> String {
    let rate = bytes as f64 / elapsed.as_secs_f64();
    let line = format!(
        "{entries} entries, {} ({}/s)",
        human_bytes(bytes),
        human_bytes(rate as u64)
    );
    let (total, about) = match total {
        Some(Known::Exact(total)) if total > 0 => (total, ""),
        Some(Known::AtLeast(total)) if total > bytes => (total, "~"),
        _ => return line,
    };
    let percent = (bytes.saturating_mul(100) / total).min(99);
    let left = match rate > 0.0 {
        true => {
            let seconds = (total.saturating_sub(bytes) as f64 / rate).ceil() as u64;
            format!("{about}{} left", clock(seconds))
        }
        false => "time left unknown".into(),
    };
    let percent = format!("{about}{percent}%");
    format!("{percent:>3} {line}, {left}")
}

/// `M:SS`, or `H:MM:SS` from an hour on.
fn clock(seconds: u64) -> String {
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match h {
        0 => format!("{m}:{s:02}"),
        h => format!("{h}:{m:02}:{s:02}"),
    }
}

/// Formats a byte count with binary units (`1.5 MiB`).
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Prints the closing summary: `done` and `extra` fields as one JSON object with `--json`
/// (on stdout, or on stderr when stdout carries the archive), or `line` on stderr with
/// `--verbose`.
pub fn summary(
    out: OutputArgs,
    line: &str,
    done: &impl serde::Serialize,
    extra: Map<String, Value>,
    elapsed: Duration,
    stdout_is_data: bool,
) {
    if out.json {
        let mut fields = match serde_json::to_value(done) {
            Ok(Value::Object(fields)) => fields,
            _ => Map::new(),
        };
        fields.extend(extra);
        fields.insert("seconds".into(), json!(elapsed.as_secs_f64()));
        print_json(&Value::Object(fields), stdout_is_data);
    } else if out.verbose {
        log_line!("{line} in {:.3} s", elapsed.as_secs_f64());
    }
}

/// A dry run's changes (cp's and send's), in their one vocabulary: `copy` (DEST lacks it),
/// `replace` (DEST has it, differently), `delete` (DEST has it, the source not), each as
/// `VERB PATH` on stdout, sorted by PATH (name by name, as `barge list` orders a tree), so
/// that two runs print the same; with `null`, each ends in a NUL and PATH is not escaped.
pub fn print_planned(mut planned: Vec<(barge::cp::Change, TreePath)>, null: bool) -> Result<()> {
    use barge::cp::Change;
    let names = |path: &TreePath| -> Vec<Vec<u8>> {
        path.0.split(|&b| b == b'/').map(<[u8]>::to_vec).collect()
    };
    // A path removed and then copied anew (a directory where SRC has a file): delete first.
    let order = |change: &Change| !matches!(change, Change::Delete);
    planned.sort_by_cached_key(|(change, path)| (names(path), order(change), *change as u8));
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for (change, path) in &planned {
        let verb = match change {
            Change::Create => "copy",
            Change::Replace => "replace",
            Change::Delete => "delete",
        };
        match null {
            true => out.write_all(&[verb.as_bytes(), b" ", &path.0, b"\0"].concat()),
            false => writeln!(out, "{verb} {path}"),
        }
        .context("cannot write the dry run's list")?;
    }
    out.flush().context("cannot write the dry run's list")
}

/// A path given on the command line, as messages show it (escaped like entry names).
pub fn shown_path(path: &std::path::Path) -> String {
    barge::error::escape_bytes(path.as_os_str().as_encoded_bytes())
}

/// A JSON value for a path: a string when it is UTF-8, else its bytes in hex under a
/// `_hex` key, so no byte is lost.
pub fn json_path(fields: &mut Map<String, Value>, key: &str, path: &[u8]) {
    match std::str::from_utf8(path) {
        Ok(text) => fields.insert(key.into(), json!(text)),
        Err(_) => {
            let hex: String = path.iter().map(|b| format!("{b:02x}")).collect();
            fields.insert(format!("{key}_hex"), json!(hex))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_total_under_count_is_an_estimate_until_the_work_passes_it() {
        let second = Duration::from_secs(1);
        let exact = progress_line(3, 25, Some(Known::Exact(100)), second);
        assert_eq!(exact, "25% 3 entries, 25 B (25 B/s), 0:03 left");
        let early = progress_line(3, 25, Some(Known::AtLeast(50)), second);
        assert_eq!(early, "~50% 3 entries, 25 B (25 B/s), ~0:01 left");
        let early = progress_line(3, 2, Some(Known::AtLeast(50)), second);
        assert_eq!(early, "~4% 3 entries, 2 B (2 B/s), ~0:24 left");
        let passed = progress_line(3, 25, Some(Known::AtLeast(20)), second);
        assert_eq!(passed, "3 entries, 25 B (25 B/s)");
        assert_eq!(clock(3725), "1:02:05");
    }

    #[test]
    fn one_is_said_in_the_singular() {
        assert_eq!(counted(1, "dirs"), "1 dir");
        assert_eq!(counted(1, "hard links"), "1 hard link");
        assert_eq!(counted(1, "entries"), "1 entry");
        assert_eq!(counted(0, "files"), "0 files");
        assert_eq!(counted(2, "entries"), "2 entries");
    }
}
