//! What the user sees besides the work itself: a progress line on a terminal, warnings,
//! and the closing summary (human or JSON).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use barge::Progress;
use serde_json::{json, Map, Value};

use crate::OutputArgs;

/// Runs `work` while a progress line is refreshed on stderr (on a terminal only, and only
/// once the work has run for a second). Returns the result and the elapsed time.
pub fn with_progress<T>(
    out: OutputArgs,
    progress: &Progress,
    work: impl FnOnce() -> T,
) -> (T, Duration) {
    let start = Instant::now();
    if out.quiet || !std::io::stderr().is_terminal() {
        return (work(), start.elapsed());
    }
    let done = AtomicBool::new(false);
    let result = std::thread::scope(|scope| {
        scope.spawn(|| {
            barge::interrupt::keep_signals_off_this_thread();
            let mut shown = false;
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(100));
                if start.elapsed() < Duration::from_secs(1) || done.load(Ordering::Relaxed) {
                    continue;
                }
                let rate = progress.bytes() as f64 / start.elapsed().as_secs_f64();
                eprint!(
                    "\r\x1b[K{} entries, {} ({}/s)",
                    progress.entries(),
                    human_bytes(progress.bytes()),
                    human_bytes(rate as u64)
                );
                shown = true;
            }
            if shown {
                eprint!("\r\x1b[K");
            }
        });
        let result = work();
        done.store(true, Ordering::Relaxed);
        result
    });
    (result, start.elapsed())
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
        let text = Value::Object(fields).to_string();
        let _ = match stdout_is_data {
            true => writeln!(std::io::stderr().lock(), "{text}"),
            false => writeln!(std::io::stdout().lock(), "{text}"),
        };
    } else if out.verbose {
        eprintln!("{line} in {:.3} s", elapsed.as_secs_f64());
    }
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
