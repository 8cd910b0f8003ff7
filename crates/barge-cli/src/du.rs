//! `barge du`: sizes and entry counts of trees, like `du -sb` with counts.

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use barge::du::{Du, Subtotal, Totals, Usage};
use barge::exclude::Exclude;
use barge::sys::fds::raise_fd_limit;
use barge::threads::Work;
use serde_json::{json, Map, Value};

use crate::report::{counted, error, exit_status, human_bytes, json_path, shown_path, warn, Exit};

/// The totals of everything below `paths` (each inode once), on up to `threads` threads;
/// what cannot be read counts as nothing.
pub(crate) fn totals_below(paths: &[PathBuf], exclude: Exclude, threads: usize) -> Totals {
    let du = Du::new().threads(threads).exclude(exclude);
    let mut all = Totals::default();
    for usage in du.run(paths).filter_map(|usage| usage.ok()) {
        if !usage.counted_before {
            all.add(&usage.totals);
        }
    }
    all
}

/// Where `barge du` deliberately differs from GNU du (shown by `barge du --help`).
/// (A macro, so that `concat!` can put the exit statuses after it.)
macro_rules! differences {
    () => {
        "\
Output: one line per PATH in aligned columns, SIZE  N files  N dirs  N other  PATH, and a
total line for several PATHs; SIZE equals `du -sb PATH` (with --disk-usage, `du -s -B1 PATH`),
files equal `find PATH -type f -links 1` plus one per distinct hard-linked inode, dirs count
PATH itself. With -h, SIZE says which it is: `1.5 MiB apparent` (`du -sh --apparent-size`), or
with --disk-usage `1.6 MiB on disk` (`du -sh`). For scripts, --json.

Differences from GNU du:
  - with several PATHs, every inode is counted once over all of them, as du does, but a PATH
    inside an earlier one is shown with its own size and marked `(inside EARLIER, counted
    there)`, not added to the total again, where du leaves it out;
  - with --depth, a file hard-linked from two directories counts in whichever the parallel
    walk reaches first (du: the first in its own order); totals are the same;
  - -h prints binary units with one decimal (`1.5 MiB`);
  - entries that cannot be measured give exit status 2 (du: 1), a PATH that cannot be
    measured at all 1.

"
    };
}

/// Options of `barge du`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = concat!(differences!(), exit_status!()))]
pub struct DuArgs {
    /// Trees to measure (default: the current directory). Symlinks among them are measured,
    /// not followed.
    paths: Vec<PathBuf>,
    /// Print sizes in binary units (KiB, MiB, ...), labelled `apparent` or `on disk`.
    #[arg(short = 'h', long)]
    human_readable: bool,
    /// Print one JSON object: apparent and disk bytes, counts and errors per PATH and in total.
    #[arg(long)]
    json: bool,
    /// Show allocated sizes (st_blocks * 512, like `du -B1`) instead of apparent sizes.
    #[arg(long)]
    disk_usage: bool,
    /// Skip entries on other filesystems than the PATH's.
    #[arg(short = 'x', long)]
    one_file_system: bool,
    /// Also show every directory down to N levels below each PATH, largest first.
    #[arg(long, value_name = "N")]
    depth: Option<usize>,
    /// Leave out entries matching PATTERN (repeatable), as `barge pack --exclude` does:
    /// without a '/', a glob on names at any depth; with one, on the end of the path below
    /// PATH (a leading '/' anchors it); a trailing '/' matches directories only.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Most worker threads: one per core on a cached tree, more (up to N) while directories
    /// are slow to read, to keep many reads in flight on a cold cache.
    #[arg(short = 'j', long, value_name = "N", default_value_t = Work::Walk.threads())]
    threads: usize,
    /// Print help.
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
}

impl DuArgs {
    /// Whether the output is JSON.
    pub fn json(&self) -> bool {
        self.json
    }
}

/// `barge du [PATH...]`: one line (or JSON object) per PATH, a total when there are several.
/// Exits 1 when a PATH could not be measured, else 2 when some entry below one could not.
pub fn du(args: DuArgs) -> Result<Exit> {
    raise_fd_limit();
    let paths = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let du = Du::new()
        .one_file_system(args.one_file_system)
        .depth(args.depth.unwrap_or(0))
        .threads(args.threads)
        .exclude(Exclude::new(&args.exclude)?);
    let mut stdout = std::io::stdout().lock();
    let mut total = Totals::default();
    // Errors counted, and errors printed (all PATH errors, the first few below them).
    let (mut errors, mut named) = (0u64, 0u64);
    let mut failed = false;
    let mut results = Vec::new();
    // The text lines' columns, aligned once all are known.
    let mut rows = Vec::new();
    for (i, usage) in du.run(&paths).enumerate() {
        let usage = match usage {
            Ok(usage) => usage,
            Err(e) => {
                error(e);
                errors += 1;
                named += 1;
                failed = true;
                continue;
            }
        };
        for e in &usage.errors {
            if named < barge::du::NAMED_ERRORS as u64 {
                warn(e);
                named += 1;
            }
        }
        errors += usage.error_count;
        let within = match usage.counted_before {
            true => Some(earlier(&paths[..i], &usage)),
            false => {
                total.add(&usage.totals);
                None
            }
        };
        if args.json {
            results.push(json_usage(&args, &usage));
        } else {
            for sub in shown(&args, &usage) {
                let mark = within
                    .as_ref()
                    .filter(|_| sub.path == usage.subtotals[0].path);
                rows.push(row(
                    &args,
                    &sub.totals,
                    &sub.path.0,
                    mark.map(String::as_str),
                ));
            }
        }
    }
    if errors > named {
        warn(format_args!("{} more entries not measured", errors - named));
    }
    if args.json {
        let mut all = json_totals(&total);
        all.insert("errors".into(), json!(errors));
        writeln!(stdout, "{}", json!({"paths": results, "total": all}))?;
    } else {
        if paths.len() > 1 {
            rows.push(row(&args, &total, b"total", None));
        }
        for line in aligned(&rows) {
            writeln!(stdout, "{line}")?;
        }
    }
    Ok(match (failed, errors) {
        (true, _) => Exit::Error,
        (false, 0) => Exit::Success,
        (false, _) => Exit::Partial,
    })
}

/// The measured size: apparent or allocated.
fn size(args: &DuArgs, totals: &Totals) -> u64 {
    if args.disk_usage {
        totals.disk_bytes
    } else {
        totals.bytes
    }
}

/// The columns of a line: SIZE, N and `files`, N and `dirs`, N and `other`, PATH (and,
/// inside an earlier PATH, which); with -h, SIZE labelled with its basis.
fn row(args: &DuArgs, totals: &Totals, path: &[u8], within: Option<&str>) -> [String; 8] {
    let size = size(args, totals);
    let size = match (args.human_readable, args.disk_usage) {
        (false, _) => size.to_string(),
        (true, false) => format!("{} apparent", human_bytes(size)),
        (true, true) => format!("{} on disk", human_bytes(size)),
    };
    let noun = |n: u64, plural: &str| counted(n, plural).split_once(' ').unwrap().1.to_string();
    let mut path = barge::error::escape_bytes(path);
    if let Some(earlier) = within {
        path.push_str(&format!("  (inside {earlier}, counted there)"));
    }
    [
        size,
        totals.files.to_string(),
        noun(totals.files, "files"),
        totals.dirs.to_string(),
        noun(totals.dirs, "dirs"),
        totals.other.to_string(),
        "other".into(),
        path,
    ]
}

/// The lines of `rows`, their columns aligned: numbers to the right, words to the left, two
/// spaces between columns (one between a count and its word), the path last, unpadded.
fn aligned(rows: &[[String; 8]]) -> Vec<String> {
    let width = |i: usize| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..8).map(width).collect();
    let w = |i: usize| widths[i];
    rows.iter()
        .map(|r| {
            format!(
                "{:>a$}  {:>b$} {:<c$}  {:>d$} {:<e$}  {:>f$} {}  {}",
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                r[6],
                r[7],
                a = w(0),
                b = w(1),
                c = w(2),
                d = w(3),
                e = w(4),
                f = w(5),
            )
        })
        .collect()
}

/// The PATH among `earlier` that `usage`'s PATH, counted already, lies inside: the first
/// whose real path is its own or above it (as the user named it), else `an earlier PATH`.
fn earlier(earlier: &[PathBuf], usage: &Usage) -> String {
    let path = Path::new(std::ffi::OsStr::from_bytes(&usage.subtotals[0].path.0));
    let real = path.canonicalize().ok();
    (earlier.iter())
        .find(|p| {
            (real.as_ref()).is_some_and(|real| p.canonicalize().is_ok_and(|a| real.starts_with(a)))
        })
        .map_or("an earlier PATH".into(), |p| shown_path(p))
}

/// The subtotals to show: the PATH alone, or with `--depth` every directory, largest first.
fn shown<'a>(args: &DuArgs, usage: &'a Usage) -> Vec<&'a Subtotal> {
    let mut shown: Vec<&Subtotal> = usage.subtotals.iter().collect();
    shown.sort_by(|a, b| {
        size(args, &b.totals)
            .cmp(&size(args, &a.totals))
            .then_with(|| a.path.0.cmp(&b.path.0))
    });
    shown
}

fn json_totals(totals: &Totals) -> Map<String, Value> {
    let mut fields = Map::new();
    fields.insert("bytes".into(), json!(totals.bytes));
    fields.insert("disk_bytes".into(), json!(totals.disk_bytes));
    fields.insert("files".into(), json!(totals.files));
    fields.insert("dirs".into(), json!(totals.dirs));
    fields.insert("other".into(), json!(totals.other));
    fields
}

fn json_usage(args: &DuArgs, usage: &Usage) -> Value {
    let subtotal = |sub: &Subtotal| {
        let mut fields = Map::new();
        json_path(&mut fields, "path", &sub.path.0);
        fields.extend(json_totals(&sub.totals));
        fields
    };
    let mut fields = subtotal(&usage.subtotals[0]);
    fields.insert("errors".into(), json!(usage.error_count));
    fields.insert("counted_before".into(), json!(usage.counted_before));
    if args.depth.is_some() {
        let dirs: Vec<Value> = shown(args, usage)
            .into_iter()
            .map(|s| Value::Object(subtotal(s)))
            .collect();
        fields.insert("subtotals".into(), json!(dirs));
    }
    Value::Object(fields)
}
