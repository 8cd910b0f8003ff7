//! `barge cp SRC... DEST`: GNU cp's destination rules over the library's [`Cp`], with a
//! progress line whose total comes from a concurrent `du` of the sources.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use barge::cp::{Change, Cp, CpReport, CpSummary, Linked, Reflink, Verified};
use barge::exclude::Exclude;
use barge::interrupt::Cancel;
use barge::sys::fds::raise_fd_limit;
use barge::threads::Work;
use barge::unpack::Restore;
use barge::walk::Members;
use barge::{Error, Progress, TreePath};
use serde_json::{json, Map};

use crate::archive::warn_not_restored;
use crate::report::{
    counted, error, exit_status, human_bytes, list_line, lists_on_stderr, print_planned,
    shown_path, shows_progress, summary, warn, with_progress, Exit, Total,
};
use crate::OutputArgs;

/// How `barge cp` differs from `cp -a` (shown by `barge cp --help`).
macro_rules! differences {
    () => {
        "\
Destination: DEST absent: the one SRC is copied as DEST; DEST a directory: each SRC is copied
into DEST/NAME (NAME being the SRC's last component), merged into a directory already there.

Keeps what `cp -a` keeps (-a, -r, -R and -p are accepted and change nothing): modes
(all 12 bits; setuid/setgid only where the copy has the owner or group they grant),
modification times to the nanosecond (directories too), owners (as root), extended
attributes (ACLs and file capabilities among them), symlinks (never followed, also a SRC),
hard links within the copy, fifos, sockets and devices (as root). What the process may not
keep is named in one warning per kind. --no-preserve leaves out what it names.

Differences from GNU cp -a:
  - an entry DEST already has is an error (the copy goes on; exit status 1), unless
    --update, --overwrite or --skip-old-files says what to do; nothing is ever written
    through an existing file or symlink: a replacement is a new file renamed over it;
  - below SRC and DEST every call is relative to an open directory and never follows a
    symlink, so a tree changing during the copy cannot redirect it outside DEST;
  - it runs on every core.

"
    };
}

/// Options of `barge cp`.
#[derive(clap::Args, Debug)]
#[command(after_long_help = concat!(differences!(), exit_status!()))]
#[command(group = clap::ArgGroup::new("null_for").args(["dry_run", "files_from"]).multiple(true))]
pub struct CpArgs {
    /// The trees (or files, symlinks, ...) to copy, then where to.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DEST")]
    paths: Vec<PathBuf>,
    /// As GNU cp's -a (archive), -R/-r (recursive) and -p (preserve) ask: barge cp always
    /// copies whole trees and keeps what `cp -a` keeps. Accepted, changes nothing.
    #[arg(short = 'a', long = "archive", visible_short_aliases = ['R', 'r', 'p'], visible_alias = "recursive")]
    _as_cp_a: bool,
    /// Copy only entries that differ from DEST's in anything the copy keeps (type, size,
    /// modification time, permissions (all twelve bits), owner (as root), extended
    /// attributes, hard links), each replaced by rename (a copy cut short is finished by
    /// running it again with --update). What --no-preserve leaves out is not compared,
    /// except times: without them an entry whose source is newer than its copy is copied
    /// again (GNU cp -u's rule; --checksum finds other changes of content).
    #[arg(short, long)]
    update: bool,
    /// With --update, also compare the content of files that are the same in everything
    /// else (read on both sides, as rsync -c): one whose bytes differ is copied again.
    #[arg(short = 'c', long, requires = "update")]
    checksum: bool,
    /// With --update, also remove what DEST has and SRC lacks (not excluded entries).
    #[arg(long, requires = "update", conflicts_with = "files_from")]
    delete: bool,
    /// Do not keep the attributes ATTR_LIST names, comma-separated as GNU cp's: mode (files get 0666,
    /// directories 0777, less the umask, and no ACL), ownership (entries belong to the user
    /// copying, also as root), timestamps (entries get the time they are copied), links
    /// (each name of a file of several names becomes a file of its own), xattr (no extended
    /// attributes but ACLs: file capabilities neither), all.
    #[arg(long, value_name = "ATTR_LIST", value_delimiter = ',', value_enum)]
    no_preserve: Vec<Attr>,
    /// Leave entries DEST already has as they are.
    #[arg(short = 'n', long, visible_alias = "no-clobber", group = "old")]
    skip_old_files: bool,
    /// Replace entries DEST already has, each by a new entry renamed over it.
    #[arg(long, group = "old")]
    overwrite: bool,
    /// Leave out entries matching PATTERN (repeatable), as `barge pack --exclude` does:
    /// without a '/', a glob on names at any depth; with one, on the end of the path below
    /// SRC (a leading '/' anchors it); a trailing '/' matches directories only.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Stay on SRC's filesystem: a directory on another (a mount point) is copied empty,
    /// its contents are not, as `cp -x` does.
    #[arg(short = 'x', long)]
    pub(crate) one_file_system: bool,
    /// Change nothing: print what would be copied (`copy`), replaced (`replace`) and
    /// removed (`delete`), one `VERB PATH` per line, sorted by PATH (its path in DEST; every
    /// directory that would be made is listed too).
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: end each `VERB PATH` with a NUL instead of a newline, and print
    /// PATH's bytes as they are (not escaped), as `find -print0`, for `xargs -0`. With -T,
    /// the names in FILE end with a NUL byte, not a newline.
    #[arg(short = '0', long, requires = "null_for")]
    null: bool,
    /// Copy only the paths listed in FILE ('-': stdin), one per line (with --null, each
    /// ended by a NUL byte), found below the one SRC directory, whose copy DEST is (created,
    /// or merged into when it exists), as `rsync -a --files-from=FILE SRC/ DEST/`. Unlike
    /// rsync's, a listed directory is copied with everything below it (as `tar -T`); the
    /// directories on the way to a path are copied too, with their own metadata but only
    /// what leads to a listed path. A path with '..' or an absolute one is refused; a listed
    /// path SRC lacks is a warning (exit status 2). Several processes may copy parts of one
    /// list into one DEST at once (job arrays: docs/SCALE.md). Not with --delete or --mpi.
    #[arg(short = 'T', long, value_name = "FILE|-")]
    files_from: Option<PathBuf>,
    /// After copying, read every file back on both sides and compare; a difference is an
    /// error. With --update, what differs is copied again (its content compared, as with
    /// --checksum) and checked once more.
    #[arg(long)]
    pub(crate) verify: bool,
    /// Share data extents with the source where the filesystem can (auto), always (fail
    /// where it cannot), or never.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = ["auto", "always", "never"])]
    reflink: String,
    /// Most worker threads: one per core on a cached tree, more (up to N) while directories
    /// are slow to read.
    #[arg(short = 'j', long, value_name = "N", default_value_t = Work::Walk.threads())]
    threads: usize,
    /// Share the copy among the ranks of the MPI job this runs in (`mpiexec -n N barge-mpi
    /// cp --mpi SRC... DEST`, or srun): each SRC in turn, its parts dealt to the ranks by
    /// hash, a rank whose own are done taking parts another has not begun; see
    /// docs/SCALE.md.
    #[arg(long, conflicts_with_all = ["dry_run", "files_from"])]
    pub(crate) mpi: bool,
    #[command(flatten)]
    out: OutputArgs,
}

impl CpArgs {
    /// Whether the output is JSON.
    pub fn json(&self) -> bool {
        self.out.json
    }

    /// The output options.
    pub fn out(&self) -> OutputArgs {
        self.out
    }
}

/// What `--no-preserve` may name.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Attr {
    Mode,
    Ownership,
    Timestamps,
    Links,
    Xattr,
    All,
}

impl CpArgs {
    /// Whether `--no-preserve` leaves `attr` out.
    fn drops(&self, attr: Attr) -> bool {
        self.no_preserve
            .iter()
            .any(|&a| a == attr || a == Attr::All)
    }
}

/// Prints what a copy reports: errors as they come; with -v each entry copied, replaced or
/// deleted as it is done, by its path in DEST; a dry run's changes kept, to be printed
/// sorted at the end.
pub(crate) struct Printer {
    planned: Option<Mutex<Vec<(Change, TreePath)>>>,
    /// Where -v's list goes (see `report::lists_on_stderr`).
    on_stderr: bool,
    /// What `--verify` finds is copied again (`--update`): a warning, not an error.
    repairs: bool,
}

impl CpReport for Printer {
    fn error(&self, e: Error) {
        match self.repairs {
            true => warn(format_args!("{e}; copied again")),
            false => crate::report::failure(&e.into()),
        }
    }

    fn missing(&self, e: Error) {
        warn(format_args!("in the -T list: {e}; not copied"));
    }

    fn change(&self, change: Change, path: &TreePath) {
        match &self.planned {
            Some(planned) => (planned.lock().expect("no panics")).push((change, path.clone())),
            None => list_line(format!("{path}\n").as_bytes(), self.on_stderr),
        }
    }
}

/// The copy `args` ask for, each SRC with the path it is copied as, the patterns it leaves
/// out, its printer, and what a count of what it copies walks.
pub(crate) struct Plan {
    pub(crate) cp: Cp,
    pub(crate) targets: Vec<(PathBuf, PathBuf)>,
    pub(crate) exclude: Exclude,
    pub(crate) printer: Printer,
    pub(crate) counted: Vec<PathBuf>,
}

/// What `args` ask for (with the process's umask cleared and fd limit raised, as a copy
/// wants them).
pub(crate) fn plan(args: &CpArgs, cancel: &Cancel) -> Result<Plan> {
    let umask = crate::clear_umask();
    raise_fd_limit();
    let (dest, srcs) = args.paths.split_last().expect("clap asks for two");
    let targets = match (&args.files_from, srcs) {
        (None, srcs) => barge::cp::targets(srcs, dest)?,
        // DEST is SRC's copy, as the rule for `SRC/` has it, whatever is there already.
        (Some(_), [src]) => barge::cp::targets(&[contents(src)], dest)?,
        (Some(_), _) => bail!("-T takes one SRC, the directory the listed paths are in"),
    };
    let existing = crate::existing(args.skip_old_files, args.overwrite);
    let reflink = match args.reflink.as_str() {
        "always" => Reflink::Always,
        "never" => Reflink::Never,
        _ => Reflink::Auto,
    };
    let exclude = Exclude::new(&args.exclude)?;
    let restore = Restore::default()
        .existing(existing)
        .modes(!args.drops(Attr::Mode))
        .same_owner(args.drops(Attr::Ownership).then_some(false))
        .times(!args.drops(Attr::Timestamps))
        .xattrs(!args.drops(Attr::Xattr));
    let mut cp = Cp::new()
        .restore(restore)
        .hard_links(!args.drops(Attr::Links))
        .update(args.update)
        .checksum(args.checksum)
        .delete(args.delete)
        .dry_run(args.dry_run)
        .changes((args.dry_run && !args.out.json) || (args.out.verbose && !args.dry_run))
        .reflink(reflink)
        .exclude(exclude.clone())
        .threads(args.threads)
        .one_file_system(args.one_file_system)
        // Modes kept land exactly; default modes get the user's umask.
        .umask(match args.drops(Attr::Mode) {
            true => umask,
            false => 0,
        })
        .cancel(cancel.clone());
    let mut counted = srcs.to_vec();
    if let Some(list) = &args.files_from {
        let paths = crate::read_list(list, args.null)?;
        cp = cp.members(Members::new(&paths).context("in the -T list")?);
        let in_src = |path: &Vec<u8>| srcs[0].join(std::ffi::OsStr::from_bytes(path));
        counted = paths.iter().map(in_src).collect();
    }
    let printer = Printer {
        planned: args.dry_run.then(Mutex::default),
        on_stderr: lists_on_stderr(args.out, false),
        repairs: false,
    };
    Ok(Plan {
        cp,
        targets,
        exclude,
        printer,
        counted,
    })
}

/// `src` ending with a '/': its contents, for GNU cp's rules (as rsync's).
fn contents(src: &Path) -> PathBuf {
    let mut path = src.as_os_str().to_owned();
    if !path.as_bytes().ends_with(b"/") {
        path.push("/");
    }
    PathBuf::from(path)
}

/// `barge cp SRC... DEST`.
pub fn cp(args: CpArgs, cancel: &Cancel) -> Result<Exit> {
    if args.mpi {
        return crate::mpi::cp(&args, cancel);
    }
    let Plan {
        cp,
        targets,
        exclude,
        printer,
        counted,
    } = plan(&args, cancel)?;
    let progress = Progress::default();
    // Names of one file in several SRCs stay linked, as with cp -a.
    let linked = Linked::default();
    let total = Total::default();
    let mut done = CpSummary::default();
    let mut verified = Verified::default();
    // SRCs that could not be copied at all (each named); the others still are.
    let mut failed = 0;
    let (result, elapsed) = std::thread::scope(|scope| {
        if shows_progress(args.out) {
            // Without a thread to be had, progress has no total.
            let _ = std::thread::Builder::new().spawn_scoped(scope, || {
                total.count(&counted, exclude, args.one_file_system)
            });
        }
        with_progress(
            args.out,
            &progress,
            || total.known(),
            || {
                for (src, target) in &targets {
                    let copied = match cp.run_linked(src, target, &linked, &progress, &printer) {
                        Ok(copied) => copied,
                        Err(e @ Error::Interrupted { .. }) => return Err(e.into()),
                        Err(e) => {
                            crate::report::failure(&e.into());
                            failed += 1;
                            continue;
                        }
                    };
                    done.add(&copied);
                    if copied.stopped {
                        bail!(
                            "copy into {} stopped: it can take no more",
                            shown_path(target)
                        );
                    }
                    if args.verify && !args.dry_run {
                        let finder = Printer {
                            planned: None,
                            on_stderr: printer.on_stderr,
                            repairs: args.update,
                        };
                        let mut checked = cp.verify(src, target, &finder)?;
                        if args.update && checked.differences > 0 {
                            let repair = cp.clone().checksum(true);
                            let mut again =
                                repair.run_linked(src, target, &linked, &progress, &printer)?;
                            // What the repair adds: its copies, not what it found as it was.
                            again.counts.dirs = 0;
                            again.counts.unchanged = 0;
                            done.add(&again);
                            checked = cp.verify(src, target, &printer)?;
                        }
                        verified.files += checked.files;
                        verified.bytes += checked.bytes;
                        verified.differences += checked.differences;
                    }
                }
                Ok(())
            },
        )
    });
    result?;
    done.counts.errors += failed;
    if let Some(planned) = printer.planned {
        print_planned(planned.into_inner().expect("no panics"), args.null)?;
    }
    Ok(report(&args, &done, &verified, elapsed))
}

/// Tells what a copy did (`done`, `verified`, in `elapsed`): warnings, the summary line, the
/// exit status.
pub(crate) fn report(
    args: &CpArgs,
    done: &CpSummary,
    verified: &Verified,
    elapsed: std::time::Duration,
) -> Exit {
    let mut skipped = done.not_restored;
    for (n, what) in [
        (
            std::mem::take(&mut skipped.owners),
            "owners not kept (only root may give files away)",
        ),
        (
            std::mem::take(&mut skipped.setid),
            "setuid/setgid bits dropped (kept only where the copy keeps the owner or group)",
        ),
    ] {
        if n > 0 {
            warn(format_args!("{n} {what}"));
        }
    }
    warn_not_restored(&skipped);
    let c = &done.counts;
    let verb = if args.dry_run { "would copy" } else { "copied" };
    let mut line = format!(
        "{verb} {}, {}, {}",
        counted(c.dirs, "dirs"),
        counted(c.files, "files"),
        human_bytes(c.bytes)
    );
    for (n, what) in [
        (c.symlinks, "symlinks"),
        (c.hard_links, "hard links"),
        (c.specials, "special files"),
        (c.unchanged, "unchanged"),
        (c.kept, "existing entries skipped"),
        (c.replaced, "replaced"),
        (c.deleted, "deleted"),
        (c.errors, "not copied (errors)"),
        (c.missing, "listed paths missing"),
    ] {
        if n > 0 {
            line += &format!(", {}", counted(n, what));
        }
    }
    if args.verify {
        line += &format!(
            "; verified {} files, {}",
            verified.files,
            human_bytes(verified.bytes)
        );
    }
    let mut extra = Map::new();
    extra.insert("dry_run".into(), json!(args.dry_run));
    if args.verify {
        extra.insert("verified".into(), json!(verified));
    }
    summary(args.out, &line, done, extra, elapsed, false);
    if c.errors > 0 || verified.differences > 0 {
        if verified.differences > 0 {
            error(format_args!(
                "{} entries of the copy differ from SRC",
                verified.differences
            ));
        }
        return Exit::Error;
    }
    if c.missing > 0 {
        return Exit::Partial;
    }
    // Metadata the process may not restore is warned about, as by unpack: the entries are
    // all there.
    Exit::Success
}
