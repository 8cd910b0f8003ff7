//! `barge du`: sizes and entry counts of trees, like `du -sb` with counts.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Result;
use barge::du::{Du, Subtotal, Totals, Usage};
use barge::exclude::Exclude;
use barge::sys::fds::raise_fd_limit;
use barge::threads::Work;
use serde_json::{json, Map, Value};

use crate::report::{counted, error, exit_status, human_bytes, json_path, note, warn, Exit};

/// The totals of everything below `paths` (each inode once), on up to `threads` threads;
/// what cannot be read counts as nothing.
pub(crate) fn totals_below(paths: &[PathBuf], exclude: Exclude, threads: usize) -> Totals {
    let du = Du::new().threads(threads).exclude(exclude);
    let mut all = Totals::default();
    for usage in du.run(paths).filter_map(|usage| usage.ok()) {
        all.add(&usage.totals);
    }
    all
}

/// Where `barge du` deliberately differs from GNU du (shown by `barge du --help`).
/// (A macro, so that `concat!` can put the exit statuses after it.)
macro_rules! differences {
    () => {
        "\
Output: one line per PATH, SIZE<TAB>N files<TAB>N dirs<TAB>N other<TAB>PATH, and a total line
for several PATHs; SIZE equals `du -sb PATH` (with --disk-usage, `du -s -B1 PATH`), files equal
`find PATH -type f -links 1` plus one per distinct hard-linked inode, dirs count PATH itself.
With -h, SIZE says which it is: `1.5 MiB apparent` (`du -sh --apparent-size`), or with
--disk-usage `1.6 MiB on disk` (`du -sh`).

Differences from GNU du:
  - with several PATHs, every inode is counted once over all of them, as du does, but a PATH
    already counted (inside an earlier PATH) is printed with 0 and named in a note on stderr,
    where du leaves it out;
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
    for usage in du.run(&paths) {
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
        if usage.counted_before && !args.json {
            let path = barge::error::escape_bytes(&usage.subtotals[0].path.0);
            note(format_args!(
                "{path}: counted already, in an earlier PATH (shown as 0)"
            ));
        }
        for e in &usage.errors {
            if named < barge::du::NAMED_ERRORS as u64 {
                warn(e);
                named += 1;
            }
        }
        errors += usage.error_count;
        total.add(&usage.totals);
        if args.json {
            results.push(json_usage(&args, &usage));
        } else {
            print_usage(&args, &usage, &mut stdout)?;
        }
    }
    if errors > named {
        warn(format_args!("{} more entries not measured", errors - named));
    }
    if args.json {
        let mut all = json_totals(&total);
        all.insert("errors".into(), json!(errors));
        writeln!(stdout, "{}", json!({"paths": results, "total": all}))?;
    } else if paths.len() > 1 {
        writeln!(stdout, "{}", line(&args, &total, b"total"))?;
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

/// `SIZE<TAB>N files<TAB>N dirs<TAB>N other<TAB>PATH` (`1 file`, `1 dir`); with -h, SIZE
/// right-aligned and labelled with its basis.
fn line(args: &DuArgs, totals: &Totals, path: &[u8]) -> String {
    let size = size(args, totals);
    let size = match (args.human_readable, args.disk_usage) {
        (false, _) => size.to_string(),
        (true, false) => format!("{:>10} apparent", human_bytes(size)),
        (true, true) => format!("{:>10} on disk", human_bytes(size)),
    };
    format!(
        "{size}\t{}\t{}\t{} other\t{}",
        counted(totals.files, "files"),
        counted(totals.dirs, "dirs"),
        totals.other,
        barge::error::escape_bytes(path)
    )
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

fn print_usage(args: &DuArgs, usage: &Usage, out: &mut impl Write) -> Result<()> {
    for sub in shown(args, usage) {
        writeln!(out, "{}", line(args, &sub.totals, &sub.path.0))?;
    }
    Ok(())
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
