//! `pack`, `unpack`, `list`, `cat` and `verify`.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use barge::exclude::Exclude;
use barge::format::sniff::{sniff, Foreign};
use barge::format::FormatError;
use barge::interrupt::Cancel;
use barge::output::{Kind, Output};
use barge::pack::{Format as PackFormat, Pack, PackSummary};
use barge::root::Confinement;
use barge::sys::fds::raise_fd_limit;
use barge::tree;
use barge::unpack::{Archive, NotRestored, Unpack};
use barge::verify::{Difference, Verify};
use barge::walk::{Members, Newer, Root};
use rustix::fs::{open, openat, statat, AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;
use serde_json::{json, Map};

use crate::list::{Format, Printer};
use crate::report::{
    counted, human_bytes, json_path, note, shown_path, shows_progress, summary, warn,
    with_progress, Exit, Known, Total,
};
use crate::OutputArgs;

/// How inputs are opened: directories, following a symlink the user named.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

fn is_stdio(path: Option<&Path>) -> bool {
    path.is_none_or(|p| p.as_os_str() == "-")
}

/// What `barge pack` takes.
#[derive(clap::Args, Debug)]
#[command(after_help = crate::report::exit_status!())]
pub struct PackArgs {
    /// What to pack: a directory (its entries at the top of the archive; a symlink to one
    /// is followed), or anything else (a file, a symlink to no directory, a fifo, ...) as
    /// it is, at the top under its name, as `tar -c FILE` stores it. With several, each
    /// becomes a top-level entry named by its last component, as tar does (in the order
    /// given; with --format 2 sorted by name).
    #[arg(required_unless_present = "files_from", value_name = "PATH")]
    dirs: Vec<PathBuf>,
    /// Pack the paths listed in FILE ('-': stdin), one per line (with --null, each ended
    /// by a NUL byte), as `tar -T`: each with everything below it, never following a
    /// symlink, found in -C's directory (else the current one) and stored under the path
    /// given (`./a/b` as `a/b`). The directories on the way to one are packed too, with
    /// their own mode and time but only what leads to a listed path. A path with '..', or
    /// an absolute one beside relative ones or with -C, is refused; absolute ones alone
    /// are found from '/' and stored without it, as tar does. A listed path that is
    /// missing is a warning (exit status 2). Entries come in name order, each once. Not with
    /// PATH arguments.
    #[arg(short = 'T', long, value_name = "FILE|-")]
    files_from: Option<PathBuf>,
    /// With -T, the names in FILE end with a NUL byte, not a newline (`find -print0`).
    #[arg(short = '0', long, requires = "files_from")]
    null: bool,
    /// Pack only entries changed at or after DATE (their modification or status change
    /// time, as `tar --newer`), and every directory, for the structure, whatever its
    /// times. DATE: `2026-11-27`, `2026-11-27 14:30`, `2026-11-27T14:30:00+01:00` (local
    /// time unless a zone is given), `@SECONDS` (since the epoch), or a file whose
    /// modification time is the date: a path starting with '/' or '.' (`./stamp`), as tar
    /// takes one.
    #[arg(short = 'N', long, value_name = "DATE|FILE", group = "since")]
    newer: Option<String>,
    /// As --newer, looking at modification times only (`tar --newer-mtime`).
    #[arg(long, value_name = "DATE|FILE", group = "since")]
    newer_mtime: Option<String>,
    /// Stay on each PATH's filesystem: a directory on another (a mount point) is packed
    /// empty, its contents are not, as `tar --one-file-system` does (with -T: on -C's).
    #[arg(short = 'x', long)]
    one_file_system: bool,
    /// Where to write the archive ('-' for stdout, the default when it is not a terminal).
    ///
    /// A new file in FILE's directory takes the archive and is renamed over FILE only
    /// when the pack succeeded: a failed pack leaves FILE as it was. A symlink at FILE
    /// is replaced itself; its target is never written. A device or fifo at FILE, or a
    /// symlink to one (such as /dev/stdout), is written in place and never removed. A
    /// directory or socket is refused. FILE is relative to the current directory, not to
    /// -C's.
    #[arg(short, long, value_name = "FILE|-")]
    output: Option<PathBuf>,
    /// Find the PATHs (and -T's paths) in this directory (tar's -C; the archive stays
    /// where -o says).
    #[arg(short = 'C', long = "directory", value_name = "DIR")]
    directory: Option<PathBuf>,
    /// Also record owners (numeric; with --format 2 their user and group names too, which
    /// unpack restores by name where they exist, as tar does), extended attributes of
    /// directories and files (all namespaces readable: user.*, POSIX ACLs, security.*, ...)
    /// and character and block devices.
    #[arg(short, long)]
    archive: bool,
    /// Leave out entries matching PATTERN (repeatable): without a '/', a glob on names at
    /// any depth ('*.o', 'target'); with one, on the end of the path below DIR ('build/*.o';
    /// a leading '/' anchors it to DIR); a trailing '/' matches directories only. '*' never
    /// matches '/', '**' matches any directories.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// The archive format: 1 (one stream, the default) or 2 (segments packed on every core,
    /// a digest of every file, an index, sparse files kept sparse and the packed
    /// directory's own mode and time). Every barge reading version 2 reads both.
    #[arg(long, value_name = "VERSION", value_parser = clap::value_parser!(u8).range(1..=2))]
    format: Option<u8>,
    /// Compress each segment with zstd at LEVEL (1-19, default 3) on every core: implies
    /// --format 2. unpack, list and cat read the archive as they read any other.
    #[arg(
        long,
        value_name = "LEVEL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "3",
        value_parser = clap::value_parser!(i32).range(1..=19)
    )]
    zstd: Option<i32>,
    /// Threads that read and compress segments with --format 2 (default: one per core).
    /// The archive is the same whatever their number.
    #[arg(short = 'j', long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    threads: Option<u32>,
    /// Share the pack among the ranks of the MPI job this runs in (`mpiexec -n N barge-mpi
    /// pack --mpi DIR -o FILE`, or srun): one version 2 archive, each rank packing a run of
    /// DIR's parts and writing its segments where they go in FILE. One DIR; FILE on a file
    /// system every rank sees that takes writes at offsets from several machines (not NFS);
    /// -j N is the threads of each rank; see docs/SCALE.md.
    #[arg(long, conflicts_with_all = ["files_from", "format"])]
    pub(crate) mpi: bool,
    #[command(flatten)]
    out: OutputArgs,
}

impl PackArgs {
    /// With `--json`: whether stdout carries the archive (then the JSON goes to stderr).
    pub fn json(&self) -> Option<bool> {
        self.out.json.then(|| is_stdio(self.output.as_deref()))
    }

    /// The output options.
    pub fn out(&self) -> OutputArgs {
        self.out
    }
}

/// The format `args` ask for.
fn pack_format(args: &PackArgs) -> Result<PackFormat> {
    Ok(match (args.format, args.zstd) {
        (Some(1), Some(_)) => {
            bail!("--zstd compresses version 2 segments: it cannot go with --format 1")
        }
        (None | Some(1), None) => PackFormat::V1,
        _ => PackFormat::V2,
    })
}

/// The date of `--newer` or `--newer-mtime`.
fn pack_newer(args: &PackArgs) -> Result<Option<Newer>> {
    Ok(match (&args.newer, &args.newer_mtime) {
        (Some(date), _) => Some(newer(date, false)?),
        (_, Some(date)) => Some(newer(date, true)?),
        _ => None,
    })
}

/// `pack` with the options of `args` that shape the archive (what is recorded and left
/// out, the format, zstd, threads), `exclude` and the date of `newer`.
pub fn pack_options<'a>(
    pack: Pack<'a>,
    args: &PackArgs,
    format: PackFormat,
    exclude: Exclude,
    newer: Option<Newer>,
) -> Pack<'a> {
    let mut pack = pack.archive(args.archive).exclude(exclude).format(format);
    if let Some(level) = args.zstd {
        pack = pack.zstd(level);
    }
    if let Some(threads) = args.threads {
        pack = pack.threads(threads as usize);
    }
    if let Some(newer) = newer {
        pack = pack.newer(newer);
    }
    pack.one_file_system(args.one_file_system)
}

/// What `pack --mpi` takes from its arguments.
#[cfg(feature = "mpi")]
pub(crate) struct SharedPack {
    /// The pack of its one DIR, with its options.
    pub pack: Pack<'static>,
    /// The archive's path.
    pub output: PathBuf,
    /// DIR's path, for the progress line's count, with the exclusions and -x.
    pub source: PathBuf,
    pub exclude: Exclude,
    pub one_file_system: bool,
    /// --zstd's level.
    pub zstd: Option<i32>,
}

/// What `pack --mpi` takes from `args`.
#[cfg(feature = "mpi")]
pub(crate) fn shared_pack(args: &PackArgs, cancel: &Cancel) -> Result<SharedPack> {
    let output = match args.output.as_deref() {
        Some(path) if !is_stdio(Some(path)) => path.to_path_buf(),
        _ => bail!("--mpi writes the archive to a file every rank sees (-o FILE), not to stdout"),
    };
    let [dir] = &args.dirs[..] else {
        bail!("--mpi packs one DIR (pack the others in jobs of their own)");
    };
    let exclude = Exclude::new(&args.exclude)?;
    let directory = args.directory.as_deref();
    let pack = open_pack(std::slice::from_ref(dir), directory, cancel)?;
    let pack = pack_options(
        pack,
        args,
        PackFormat::V2,
        exclude.clone(),
        pack_newer(args)?,
    );
    Ok(SharedPack {
        pack,
        output,
        source: in_directory(directory, dir),
        exclude,
        one_file_system: args.one_file_system,
        zstd: args.zstd,
    })
}

/// `barge pack DIR... [-o FILE|-]`.
pub fn pack(args: PackArgs, cancel: &Cancel) -> Result<Exit> {
    raise_fd_limit();
    if args.mpi {
        return crate::mpi::pack(&args, cancel);
    }
    let format = pack_format(&args)?;
    let exclude = Exclude::new(&args.exclude)?;
    let newer = pack_newer(&args)?;
    if args.files_from.is_some() && !args.dirs.is_empty() {
        bail!("give the paths to pack either as arguments or in -T's list, not both");
    }
    let directory = args.directory.as_deref();
    // What a count of the inputs' bytes walks, for the progress line.
    let (pack, sources): (_, Vec<PathBuf>) = match &args.files_from {
        Some(list) => {
            let (root, base, paths) = files_from(list, args.null, directory)?;
            let sources = paths.iter().map(|p| base.join(bytes_path(p))).collect();
            (Pack::inputs(vec![root])?.cancel(cancel.clone()), sources)
        }
        None => {
            let sources = args
                .dirs
                .iter()
                .map(|d| in_directory(directory, d))
                .collect();
            (open_pack(&args.dirs, directory, cancel)?, sources)
        }
    };
    let output = args.output.as_deref();
    let stdout = std::io::stdout();
    let file = match output {
        Some(path) if !is_stdio(Some(path)) => Some(Output::open(path)?),
        None if stdout.is_terminal() => {
            bail!("refusing to write an archive to a terminal: use -o FILE or redirect stdout")
        }
        _ => None,
    };
    let kind = file.as_ref().map(Output::kind);
    let progress = crate::report::progress(args.out, kind.is_none());
    let exclude_again = exclude.clone();
    let pack = pack_options(pack.progress(&progress), &args, format, exclude, newer);
    let total = Total::default();
    let (result, elapsed) = std::thread::scope(|scope| {
        // Not with --newer, which leaves out what the count cannot tell; without a thread
        // to be had, progress has no total.
        if newer.is_none() && shows_progress(args.out) {
            let count = || total.count(&sources, exclude_again, args.one_file_system);
            let _ = std::thread::Builder::new().spawn_scoped(scope, count);
        }
        with_progress(
            args.out,
            &progress,
            || total.known(),
            || match file {
                Some(file) => pack.to_output(file),
                None => pack.to_fd(stdout.as_fd()),
            },
        )
    });
    let inputs = match &args.files_from {
        Some(list) => vec![format!("-T {}", shown_path(list))],
        None => args.dirs.iter().map(|d| shown_path(d)).collect(),
    };
    let packed = result
        .with_context(|| pack_failed(&inputs.join(", "), output, kind, progress.written()))?;
    for warning in &packed.warnings {
        warn(format_args!("{warning}"));
    }
    let lost = packed.warnings.iter().filter(|w| w.lost).count();
    Ok(told_packed(&args, &packed, lost, elapsed, kind.is_none()))
}

/// Tells what `packed` holds, with `lost` entries that could not be read (already named),
/// after `elapsed`; `to_stdout`: the archive went to stdout.
pub fn told_packed(
    args: &PackArgs,
    packed: &PackSummary,
    lost: usize,
    elapsed: Duration,
    to_stdout: bool,
) -> Exit {
    if lost > 0 {
        warn(format_args!(
            "the archive lacks {lost} entries, or parts of them, that could not be read \
             (exit status 2)"
        ));
    }
    let (dirs, files) = (counted(packed.dirs, "dirs"), counted(packed.files, "files"));
    let mut line = format!("packed {dirs}, {files}");
    for (n, what) in [
        (packed.symlinks, "symlinks"),
        (packed.hard_links, "hard links"),
        (packed.specials, "special files"),
    ] {
        if n > 0 {
            line.push_str(&format!(", {}", counted(n, what)));
        }
    }
    line.push_str(&format!(
        ", {} ({} archive)",
        human_bytes(packed.bytes),
        human_bytes(packed.archive_bytes)
    ));
    summary(args.out, &line, packed, Map::new(), elapsed, to_stdout);
    match lost {
        0 => Exit::Success,
        _ => Exit::Partial,
    }
}

/// The pack of `paths` (found in `directory`, tar's -C): one directory's entries at the
/// top, or each of several as a top-level directory named by its last component; a path
/// that is no directory (nor a symlink to one) is an entry of its parent, at the top under
/// its name.
pub fn open_pack<'a>(
    paths: &[PathBuf],
    directory: Option<&Path>,
    cancel: &Cancel,
) -> Result<Pack<'a>> {
    let base = match directory {
        Some(dir) => Some(open_directory(dir)?),
        None => None,
    };
    let base = base.as_ref().map_or(CWD, |fd| fd.as_fd());
    let pack = match paths {
        [path] => match open_input(base, path)? {
            Input::Dir(fd) => Pack::new(fd),
            Input::Entry(root) => Pack::inputs(vec![root])?,
        },
        paths => {
            let roots = paths
                .iter()
                .map(|path| match open_input(base, path)? {
                    Input::Dir(fd) => Ok(Root::tree(top_name(path)?, fd)),
                    Input::Entry(root) => Ok(root),
                })
                .collect::<Result<_>>()?;
            Pack::inputs(roots)?
        }
    };
    Ok(pack.cancel(cancel.clone()))
}

/// A path to pack, opened.
enum Input {
    /// A directory (or a symlink to one), open.
    Dir(OwnedFd),
    /// Anything else: its parent, with it as the one member.
    Entry(Root),
}

/// Opens `path` (relative to `base`) as a directory, following a symlink the user named; a
/// path that is something else is taken as it is, an entry of its parent.
fn open_input(base: BorrowedFd<'_>, path: &Path) -> Result<Input> {
    let opened = openat(base, path, DIR_FLAGS, Mode::empty());
    let not_dir = |e| {
        let stat = statat(base, path, AtFlags::SYMLINK_NOFOLLOW).ok()?;
        (e == Errno::NOTDIR || FileType::from_raw_mode(stat.st_mode) == FileType::Symlink)
            .then_some(())
    };
    match opened {
        Ok(fd) => Ok(Input::Dir(fd)),
        Err(e) if not_dir(e).is_some() => {
            let name = top_name(path)?;
            let parent = match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent,
                _ => Path::new("."),
            };
            let fd = openat(base, parent, DIR_FLAGS, Mode::empty())
                .with_context(|| format!("cannot open directory {}", shown_path(parent)))?;
            Ok(Input::Entry(Root::members(fd, Members::new([name])?)))
        }
        Err(e) => Err(anyhow::Error::new(std::io::Error::from(e)))
            .with_context(|| format!("cannot open {}", shown_path(path))),
    }
}

/// Opens -C's directory.
fn open_directory(dir: &Path) -> Result<OwnedFd> {
    open(dir, DIR_FLAGS, Mode::empty())
        .with_context(|| format!("cannot change to directory {}", shown_path(dir)))
}

/// `path` as -C finds it.
fn in_directory(directory: Option<&Path>, path: &Path) -> PathBuf {
    directory.map_or_else(|| path.to_path_buf(), |dir| dir.join(path))
}

/// A path from a -T list.
fn bytes_path(path: &[u8]) -> &Path {
    Path::new(std::ffi::OsStr::from_bytes(path))
}

/// The root `pack -T LIST` packs (the paths in LIST below -C's directory, or below '/' when
/// every one is absolute), that directory's path, and the paths as listed relative to it.
fn files_from(
    list: &Path,
    null: bool,
    directory: Option<&Path>,
) -> Result<(Root, PathBuf, Vec<Vec<u8>>)> {
    let mut paths = crate::read_list(list, null)?;
    let absolute = paths.iter().filter(|p| p.starts_with(b"/")).count();
    let base = match (absolute, directory) {
        (0, directory) => directory.unwrap_or(Path::new(".")).to_path_buf(),
        (n, None) if n == paths.len() => {
            note("removing the leading '/' from the listed paths, as tar does");
            for path in &mut paths {
                let slashes = path.iter().take_while(|&&b| b == b'/').count();
                path.drain(..slashes);
            }
            PathBuf::from("/")
        }
        (_, Some(_)) => bail!("-T lists absolute paths: they cannot be found in -C's directory"),
        _ => bail!(
            "-T lists both absolute and relative paths: list them all from one directory \
             (-C DIR and paths relative to it)"
        ),
    };
    let fd = match directory.is_some() || absolute > 0 {
        true => open_directory(&base)?,
        false => {
            open(".", DIR_FLAGS, Mode::empty()).context("cannot open the current directory")?
        }
    };
    let members = Members::new(&paths).context("in the -T list")?;
    Ok((Root::members(fd, members), base, paths))
}

/// `--newer DATE|FILE`: what it keeps. FILE is a path starting with '/' or '.', whose
/// modification time is the date (tar's rule).
fn newer(date: &str, mtime_only: bool) -> Result<Newer> {
    let since = if date.starts_with(['/', '.']) {
        let meta = std::fs::metadata(date)
            .with_context(|| format!("cannot read the modification time of {date}"))?;
        let time = meta.modified()?;
        jiff::Timestamp::try_from(time)?
    } else if let Some(seconds) = date.strip_prefix('@') {
        let seconds: i64 = seconds
            .parse()
            .with_context(|| format!("{date}: not a number of seconds after '@'"))?;
        jiff::Timestamp::from_second(seconds)?
    } else {
        parse_date(date).with_context(|| {
            format!(
                "{date}: not a date (2026-11-27, 2026-11-27 14:30, 2026-11-27T14:30:00Z, \
                 @SECONDS) nor a file (name a file by a path starting with '/' or '.')"
            )
        })?
    };
    Ok(Newer {
        since: tree::Timestamp {
            sec: since.as_second(),
            nsec: since.subsec_nanosecond() as u32,
        },
        mtime_only,
    })
}

/// A date with a zone or offset (RFC 3339, RFC 9557), or a civil date and time in the
/// local zone (a date alone: its midnight).
fn parse_date(text: &str) -> Result<jiff::Timestamp> {
    if let Ok(time) = text.parse::<jiff::Timestamp>() {
        return Ok(time);
    }
    if let Ok(zoned) = text.parse::<jiff::ZonedDateTime>() {
        return Ok(zoned.timestamp());
    }
    let zone = jiff::tz::TimeZone::system();
    let zoned = match text.parse::<jiff::civil::DateTime>() {
        Ok(civil) => civil.to_zoned_datetime(zone)?,
        Err(_) => text.parse::<jiff::civil::Date>()?.to_zoned_datetime(zone)?,
    };
    Ok(zoned.timestamp())
}

/// The name of the top-level entry an input directory becomes: its last component.
fn top_name(dir: &Path) -> Result<Vec<u8>> {
    match dir.file_name() {
        Some(name) => Ok(name.as_encoded_bytes().to_vec()),
        None => bail!(
            "{}: has no last component to name its top-level entry by; name the directory \
             itself (-C helps: barge pack -C PARENT NAME ...)",
            shown_path(dir)
        ),
    }
}

/// What a failed pack says it left: a file is untouched, a stream or device holds an
/// incomplete archive.
fn pack_failed(dir: &str, output: Option<&Path>, kind: Option<Kind>, written: u64) -> String {
    let name = match (kind, output) {
        (Some(_), Some(path)) => shown_path(path),
        _ => "stdout".into(),
    };
    match kind {
        Some(Kind::Create) => format!("pack {dir} failed; {name} was not written"),
        Some(Kind::Replace) => format!("pack {dir} failed; {name} left as it was"),
        _ if written == 0 => format!("pack {dir} failed; nothing was written to {name}"),
        _ => format!(
            "pack {dir} failed after writing {written} bytes to {name}; that archive is \
             incomplete (it has no end record, so unpack and list reject it)"
        ),
    }
}

/// Opens the archive at `path` ('-' or none: stdin) for `operation`; an error that does not
/// name the archive gets its name. Refuses to wait for an archive typed on a terminal, as tar
/// does (`usage` says how to name one).
fn open_archive(operation: &Unpack, path: Option<&Path>, usage: &str) -> Result<Archive> {
    let path = path.filter(|p| !is_stdio(Some(p)));
    if path.is_none() && std::io::stdin().is_terminal() {
        bail!(
            "refusing to read an archive from a terminal: name the archive, or pipe one into \
             stdin (usage: {usage})"
        );
    }
    operation.open(path).map_err(|e| match e {
        e @ barge::Error::InputTooShort { .. } => {
            let name = path.map_or("stdin".into(), shown_path);
            anyhow::Error::new(e).context(format!("cannot read archive {name}"))
        }
        e => e.into(),
    })
}

/// `barge unpack [ARCHIVE|-] DEST`.
pub fn unpack(
    archive: Option<&Path>,
    dest: &Path,
    operation: Unpack,
    out: OutputArgs,
) -> Result<Exit> {
    const USAGE: &str = "barge unpack [ARCHIVE|-] DEST";
    let shown = shown_path(dest);
    if archive.is_none() {
        // The one path given is DEST; a file there means DEST was forgotten.
        if let Some(found) = not_a_directory(dest) {
            bail!(
                "missing DEST: {shown} is {found}, not a directory to unpack into (usage: {USAGE})"
            );
        }
    }
    let input = open_archive(&operation, archive, USAGE)?;
    raise_fd_limit();
    // Its errors name DEST.
    let mut destination = operation.prepare(dest, &input)?;
    let confinement = destination.confinement.clone();
    let new = destination.is_new();
    if let Confinement::Unavailable(reason) = &confinement {
        warn(format_args!(
            "sandbox unavailable ({reason}); containment rests on fd-relative landing"
        ));
    }
    let progress = crate::report::progress(out, false);
    let size = input.size();
    let (result, elapsed) = with_progress(
        out,
        &progress,
        || size.map(Known::Exact),
        || operation.land(&input, &mut destination, &progress),
    );
    let landed = result
        .map_err(|e| explain(e, &input, archive))
        .with_context(|| match new {
            true => format!("unpack into {shown} failed; {shown} was not created"),
            // What landed before the error stays.
            false => format!("unpack into {shown} stopped"),
        })?;
    told_unpacked(out, &landed, &confinement, elapsed);
    // The mapping is released by the exit; unmapping it first only costs time.
    std::mem::forget(input);
    Ok(Exit::Success)
}

/// Tells what an unpack landed: the warnings for what it could not restore, the summary.
pub(crate) fn told_unpacked(
    out: OutputArgs,
    landed: &barge::unpack::LandSummary,
    confinement: &Confinement,
    elapsed: Duration,
) {
    warn_not_restored(&landed.not_restored);
    let mut line = format!(
        "unpacked {}, {}, {}",
        counted(landed.dirs, "dirs"),
        counted(landed.files, "files"),
        human_bytes(landed.bytes)
    );
    for (n, what) in [
        (landed.symlinks, "symlinks"),
        (landed.hard_links, "hard links"),
        (landed.specials, "special files"),
        (landed.kept, "existing entries skipped"),
    ] {
        if n > 0 {
            line += &format!(", {}", counted(n, what));
        }
    }
    let mut confined = Map::new();
    confined.insert("confinement".into(), json!(confinement));
    summary(out, &line, landed, confined, elapsed, false);
}

/// `error`, or, when the input is not a barge archive but a known format (a tar or gzip
/// file), an error that says so.
fn explain(error: barge::Error, input: &Archive, path: Option<&Path>) -> anyhow::Error {
    let bad_magic = matches!(
        error,
        barge::Error::Format {
            kind: FormatError::BadMagic,
            ..
        }
    );
    match sniff(&input.head()).filter(|_| bad_magic) {
        Some(Foreign { what, tool }) => {
            let name = path
                .filter(|p| !is_stdio(Some(p)))
                .map_or("stdin".into(), shown_path);
            anyhow::Error::new(error).context(format!(
                "{name} looks like {what}, not a barge archive (barge reads the archives \
                 `barge pack` makes; this one is for {tool})"
            ))
        }
        None => error.into(),
    }
}

/// What is at `path` (through symlinks) when it exists and is not a directory, as "a file".
fn not_a_directory(path: &Path) -> Option<&'static str> {
    let stat = rustix::fs::stat(path).ok()?;
    let kind = tree::Kind::of_mode(stat.st_mode);
    (kind != tree::Kind::Dir).then(|| kind.with_article())
}

/// One warning per kind of metadata the unpack could not restore.
pub fn warn_not_restored(skipped: &NotRestored) {
    for (n, what) in [
        (
            skipped.owners,
            "owners not restored (not root; --no-same-owner silences this)",
        ),
        (
            skipped.setid,
            "setuid/setgid bits not restored (kept only on a file given the owner or group the \
             archive records: pack -a records them; not root, or recv: --setid too)",
        ),
        (
            skipped.devices,
            "devices not created (they need root, and recv --same-owner)",
        ),
        (
            skipped.xattrs,
            "extended attributes not restored (trusted.*, security.* and system.* but ACLs need root; \
             the filesystem refused the others, e.g. user.* on symlinks)",
        ),
        (
            skipped.hard_links,
            "hard links not made (their file existed in DEST and was skipped)",
        ),
        (
            skipped.merged_dirs,
            "directories in DEST kept their own mode or time (--overwrite: not their owner)",
        ),
    ] {
        if n > 0 {
            warn(format_args!("{n} {what}"));
        }
    }
}

/// `barge list [ARCHIVE|-]`.
pub fn list(archive: Option<&Path>, format: Format, operation: Unpack) -> Result<Exit> {
    let input = open_archive(&operation, archive, "barge list [ARCHIVE|-]")?;
    let stdout = std::io::stdout();
    let out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut printer = Printer::new(out, format);
    let result = match format {
        Format::Names => operation.list_index(&input, &mut printer),
        _ => operation.list(&input, &mut printer),
    };
    let flushed = printer.out.flush();
    result
        .map_err(|e| explain(e, &input, archive))
        .context("list stopped")?;
    flushed.context("cannot write the listing")?;
    Ok(Exit::Success)
}

/// Which entries `unpack` and `list` take: member PATHs and `--exclude` patterns.
#[derive(clap::Args, Debug)]
pub struct SelectArgs {
    /// Take only these paths of the archive (as `barge list` shows them): a directory with
    /// everything below it, and the directories above each; a PATH that names nothing is
    /// an error.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Leave out entries matching PATTERN (repeatable), as pack's --exclude does, on the
    /// archive's paths: without a '/', a glob on names at any depth; with one, on the end
    /// of the path (a leading '/' anchors it to the archive's top); a trailing '/' matches
    /// directories only. A directory left out is left out whole.
    #[arg(long, value_name = "PATTERN")]
    pub exclude: Vec<String>,
}

impl SelectArgs {
    /// The library's selection.
    pub fn select(&self) -> Result<barge::Select> {
        use std::os::unix::ffi::OsStrExt;
        let exclude = Exclude::new(&self.exclude)?;
        let paths = self.paths.iter().map(|p| p.as_os_str().as_bytes());
        Ok(barge::Select::new(paths, exclude))
    }
}

/// `barge cat ARCHIVE PATH...`.
pub fn cat(archive: &Path, operation: Unpack) -> Result<Exit> {
    let input = open_archive(&operation, Some(archive), "barge cat ARCHIVE|- PATH...")?;
    let stdout = std::io::stdout();
    let mut out = Cat(std::io::BufWriter::with_capacity(1 << 16, stdout.lock()));
    let result = operation.cat(&input, &mut out);
    let flushed = out.0.flush();
    result
        .map_err(|e| explain(e, &input, Some(archive)))
        .context("cat stopped")?;
    flushed.context("cannot write to stdout")?;
    Ok(Exit::Success)
}

/// Writes the content of every file it is given.
struct Cat<W: Write>(W);

impl<W: Write> Cat<W> {
    fn write(&mut self, data: &[u8]) -> barge::Result<()> {
        self.0.write_all(data).map_err(|e| {
            barge::Error::os("write to stdout", barge::TreePath(b"<stdout>".to_vec()), e)
        })
    }
}

impl<W: Write> tree::Sink for Cat<W> {
    type Error = barge::Error;

    fn enter_dir(&mut self, _: &tree::Entry<'_>) -> barge::Result<()> {
        Ok(())
    }

    fn leave_dir(&mut self) -> barge::Result<()> {
        Ok(())
    }

    fn file(&mut self, _: &tree::Entry<'_>, content: tree::Content<'_>) -> barge::Result<()> {
        match content {
            tree::Content::Bytes(data) | tree::Content::Stream { first: data, .. } => {
                self.write(data)
            }
            // A listing is driven by the decoder, which hands content in memory.
            _ => unreachable!("content from an archive is in memory"),
        }
    }

    fn data(&mut self, data: &[u8]) -> barge::Result<()> {
        self.write(data)
    }
}

/// `barge verify ARCHIVE [DIR]`: each path that differs as a line on stdout (a JSON object
/// with `--json`), exit status 1 when one does.
pub fn verify(
    archive: &Path,
    dir: Option<&Path>,
    owners: bool,
    operation: Unpack,
    out: OutputArgs,
) -> Result<Exit> {
    let input = open_archive(&operation, Some(archive), "barge verify ARCHIVE|- [DIR]")?;
    let mut verify = Verify::new().owners(owners);
    if let Some(dir) = dir {
        verify = verify.against(dir);
    }
    let stdout = std::io::stdout();
    let mut lines = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut written = Ok(());
    let mut report = |difference: Difference| {
        let line = match out.json {
            true => {
                let mut fields = Map::new();
                json_path(&mut fields, "path", &difference.path.0);
                fields.insert("differences".into(), json!(difference.what));
                serde_json::Value::Object(fields).to_string()
            }
            false => format!("{}: {}", difference.path, difference.what.join("; ")),
        };
        if written.is_ok() {
            written = writeln!(lines, "{line}");
        }
    };
    let start = std::time::Instant::now();
    let result = verify.run(&operation, &input, &mut report);
    let flushed = written.and_then(|()| lines.flush());
    let verified = result
        .map_err(|e| explain(e, &input, Some(archive)))
        .context("verify stopped")?;
    flushed.context("cannot write the differences")?;
    if input.head().get(6) == Some(&1) {
        warn("a version 1 archive holds no digests: its structure was checked, not its content");
    }
    let line = format!(
        "verified {} files, {}; {} entries differ",
        verified.files,
        human_bytes(verified.bytes),
        verified.differences
    );
    summary(out, &line, &verified, Map::new(), start.elapsed(), false);
    if verified.differences > 0 {
        let what = dir.map_or("the directory".into(), shown_path);
        crate::report::error(format_args!(
            "{} entries of {what} differ from the archive",
            verified.differences
        ));
        return Ok(Exit::Error);
    }
    Ok(Exit::Success)
}
