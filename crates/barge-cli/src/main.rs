//! The `barge` command: pack, unpack and list barge archives.

#[cfg(any(target_env = "musl", test))]
mod alloc;
mod archive;
mod cp;
mod du;
mod list;
mod manual;
#[cfg(feature = "mpi")]
mod mpi;
#[cfg(not(feature = "mpi"))]
#[path = "no_mpi.rs"]
mod mpi;
mod net;
mod report;
mod serve;
#[cfg(test)]
mod vocabulary;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use barge::interrupt::Cancel;
use barge::unpack::Unpack;
use clap::{CommandFactory, Parser, Subcommand};
use report::{exit_status, Exit};

/// On musl only, where it was measured to pay (see `alloc.rs`); glibc's malloc is fine.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOCATOR: alloc::Allocator = alloc::Allocator::new();

/// Move whole file trees with the fewest syscalls, never writing outside the destination.
#[derive(Parser, Debug)]
#[command(name = "barge", version, about, long_about = None, propagate_version = true)]
#[command(after_help = exit_status!())]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Limits on an untrusted archive.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LimitArgs {
    /// Refuse archives nested deeper than this many directories.
    #[arg(long, value_name = "N", default_value_t = barge::format::DEFAULT_MAX_DEPTH)]
    max_depth: usize,
    /// Refuse archives with more than N entries (dirs + files); 'none' for no limit. The
    /// default bounds what a stranger's archive can make a server create and remember.
    #[arg(long, value_name = "N", default_value = "10M", value_parser = parse_limit)]
    max_entries: Limit,
    /// Refuse archives with more than N bytes of file content, e.g. 500M or 2G (K, M, G
    /// and T, or KiB, MiB, GiB and TiB, count in 1024s); 'none' for no limit (the default,
    /// except for recv: the space free on DEST's filesystem when it starts).
    #[arg(long, value_name = "N", value_parser = parse_limit)]
    max_bytes: Option<Limit>,
    /// Refuse archives that would take more than N of disk space, each entry charged its
    /// content (a symlink its target) and extended attributes in 4 KiB blocks, and at least
    /// one block: empty files and directories are not free ('none', the default: no limit).
    #[arg(long, value_name = "N", default_value = "none", value_parser = parse_limit)]
    max_space: Limit,
}

/// Where in the input the archive is: for an archive stored in a block device or inside a
/// larger file (a browser's upload written to a device padded to a fixed size).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct Region {
    /// The archive starts at byte N of the input (any N: a file, a block device such as
    /// /dev/loop0 or /dev/pmem0, or stdin, whose first N bytes are read and dropped). Unless
    /// --length is given, only zero bytes (padding) may follow the archive's end, as on a
    /// block device. N takes the units of --max-bytes (e.g. 4K).
    #[arg(long, value_name = "N", value_parser = parse_size)]
    offset: Option<u64>,
    /// Exactly L bytes (from the offset) are the archive: nothing may follow its end
    /// within them, and nothing after them is read. L takes the units of --max-bytes.
    #[arg(long, value_name = "L", value_parser = parse_size)]
    length: Option<u64>,
}

/// The operation `list`, `cat` and `verify` read an archive with: its limits, its region,
/// the process's cancel token.
fn reading(limits: LimitArgs, region: Region, cancel: &Cancel) -> Unpack {
    Unpack::new()
        .limits(limits.limits())
        .region(region.into())
        .cancel(cancel.clone())
}

impl From<Region> for barge::unpack::Region {
    fn from(region: Region) -> barge::unpack::Region {
        barge::unpack::Region {
            offset: region.offset,
            length: region.length,
        }
    }
}

/// The engines `--engine` offers (and `--help` lists): the library's.
fn engine_parser() -> impl clap::builder::TypedValueParser<Value = barge::unpack::Engine> {
    use barge::unpack::Engine;
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(Engine::ALL.map(|(name, _)| name)).map(|name| {
        let known = Engine::ALL.iter().find(|(known, _)| *known == name);
        known.expect("clap offers only these").1
    })
}

/// Parses a number of bytes, with a unit (see [`parse_limit`]).
fn parse_size(text: &str) -> Result<u64, String> {
    match parse_limit(text)? {
        Limit(Some(n)) => Ok(n),
        Limit(None) => Err("a number of bytes is needed here".into()),
    }
}

/// A limit, or none.
#[derive(Debug, Clone, Copy)]
pub struct Limit(Option<u64>);

/// Parses `none`, or a whole number with an optional unit: K, M, G or T (or KiB, MiB, GiB,
/// TiB), powers of 1024 as for tar and du; upper or lower case. (KB, MB, ... are refused: in
/// du they mean powers of 1000, elsewhere 1024.)
fn parse_limit(text: &str) -> Result<Limit, String> {
    if text == "none" {
        return Ok(Limit(None));
    }
    let bad = || {
        format!(
            "'{text}' is not a size: use a whole number, with K, M, G or T (or KiB, MiB, GiB, \
             TiB) for powers of 1024, or 'none'"
        )
    };
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let power = match unit.to_ascii_uppercase().as_str() {
        "" => 0,
        "K" | "KIB" => 1,
        "M" | "MIB" => 2,
        "G" | "GIB" => 3,
        "T" | "TIB" => 4,
        _ => return Err(bad()),
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    n.checked_mul(1 << (10 * power))
        .map(|n| Limit(Some(n)))
        .ok_or_else(|| format!("'{text}' is too large"))
}

impl LimitArgs {
    fn limits(self) -> barge::format::Limits {
        self.limits_or(None)
    }

    /// The limits, with `max_bytes` unless --max-bytes was given.
    fn limits_or(self, max_bytes: Option<u64>) -> barge::format::Limits {
        barge::format::Limits {
            max_depth: self.max_depth,
            max_entries: self.max_entries.0,
            max_bytes: self.max_bytes.map_or(max_bytes, |limit| limit.0),
            max_space: self.max_space.0,
            zero_padding: false,
        }
    }
}

/// What unpack restores, and what it does with existing entries (tar's options).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct RestoreArgs {
    /// Fail on an entry whose name exists in DEST (the default); existing directories are
    /// merged into.
    #[arg(short = 'k', long, group = "old")]
    keep_old_files: bool,
    /// Leave entries that exist in DEST as they are and skip them (counted in the summary;
    /// a hard link to a skipped file is not made).
    #[arg(short = 'n', long, group = "old")]
    skip_old_files: bool,
    /// Replace entries that exist in DEST: each is written under a temporary name in the
    /// same directory and renamed over the old one, so nothing is written through an
    /// existing file or symlink. Existing directories are merged into and get the archive's
    /// mode and time (and owner, where restored), as with tar. A file or symlink where the
    /// archive has a directory is replaced by it (exchanged by rename, never followed), as
    /// tar replaces it; a directory where the archive has anything else is still an error
    /// (nothing is removed whole).
    #[arg(long, group = "old")]
    overwrite: bool,
    /// Give entries their owner (uid/gid) from the archive: the default as root; others
    /// cannot give files away.
    #[arg(long, conflicts_with = "no_same_owner")]
    same_owner: bool,
    /// Do not restore owners: entries belong to the user running unpack (the default for
    /// others than root, with a warning when the archive has owners).
    #[arg(long)]
    no_same_owner: bool,
    /// Give restored owners the uid and gid the archive records, not (the default, as tar)
    /// the ids its recorded user and group names have on this system where they exist.
    #[arg(long)]
    numeric_owner: bool,
    /// Apply the umask to the archive's modes (by default it is set aside, so modes land
    /// exactly, as `tar -p`).
    #[arg(long)]
    no_same_permissions: bool,
    /// Restore setuid and setgid bits also when not running as root. Root or not, a bit
    /// lands only on a file given the owner (setuid) or group (setgid) the archive records.
    #[arg(long)]
    setid: bool,
    /// Do not restore modification times: entries get the time they are landed.
    #[arg(short = 'm', long)]
    touch: bool,
}

impl RestoreArgs {
    fn restore(self) -> barge::unpack::Restore {
        let existing = existing(self.skip_old_files, self.overwrite);
        let same_owner = match (self.same_owner, self.no_same_owner) {
            (true, _) => Some(true),
            (_, true) => Some(false),
            _ => None,
        };
        barge::unpack::Restore::default()
            .same_owner(same_owner)
            .numeric_owner(self.numeric_owner)
            .setid(self.setid)
            .times(!self.touch)
            .existing(existing)
    }
}

/// What `--skip-old-files` and `--overwrite` (unpack, recv, cp) ask for existing entries:
/// by default, an error.
fn existing(skip: bool, overwrite: bool) -> barge::unpack::Existing {
    use barge::unpack::Existing;
    match (skip, overwrite) {
        (true, _) => Existing::Skip,
        (_, true) => Existing::Overwrite,
        _ => Existing::Keep,
    }
}

/// The paths listed in `list` ('-': stdin) for -T (pack, cp): one per line, or each ended
/// by a NUL byte when `null`; empty ones are skipped.
fn read_list(list: &std::path::Path, null: bool) -> anyhow::Result<Vec<Vec<u8>>> {
    let text = match list.as_os_str() == "-" {
        true => {
            let mut text = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut text)
                .context("cannot read the -T list from stdin")?;
            text
        }
        false => std::fs::read(list)
            .with_context(|| format!("cannot read the -T list {}", report::shown_path(list)))?,
    };
    let end = if null { b'\0' } else { b'\n' };
    Ok((text.split(|&b| b == end))
        .filter(|p| !p.is_empty())
        .map(<[u8]>::to_vec)
        .collect())
}

/// Output options shared by the commands.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct OutputArgs {
    /// List each path as it is done (pack, unpack, cp, send, recv), as tar, cp and rsync -v do:
    /// on stdout, or on stderr where stdout carries the archive or the --json summary; then
    /// a summary (entries, bytes, time) on stderr.
    #[arg(short, long)]
    verbose: bool,
    /// Print the summary as one JSON object when done: on stdout (on stderr when stdout
    /// carries the archive).
    #[arg(long)]
    json: bool,
    /// Print no warnings (the exit status still tells) and never the progress line (shown
    /// only on a terminal, after one second); errors are still printed.
    #[arg(short, long)]
    quiet: bool,
    /// Show the progress line even when stderr is not a terminal (then as a new line each
    /// second, for logs, starting with the time elapsed: `[1:05]`).
    #[arg(long, overrides_with = "no_progress")]
    progress: bool,
    /// Never show the progress line.
    #[arg(long)]
    pub(crate) no_progress: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Pack the tree below DIR (or a file, several PATHs, or the paths -T lists) into an
    /// archive.
    ///
    /// Records directories, regular files, symlinks, hard links and fifos with all their
    /// permission bits (setuid, setgid, sticky too) and modification times to the
    /// nanosecond; -a adds owners, extended attributes and devices. Sockets are left out
    /// with a warning. An entry that cannot be read is left out with a warning (a directory
    /// is packed empty) and the pack goes on, then exits with status 2; with --format 2 so
    /// is a file that changes size while it is read, which is stored at the size it had
    /// (cut, or padded with zeros), as tar does. Entries are sorted by name, so the same
    /// tree always gives the same archive. The archive never holds itself or the file it
    /// replaces.
    Pack(archive::PackArgs),
    /// Unpack an archive (a file, or '-' for stdin) into DEST.
    ///
    /// DEST is created when missing (with its parents), and then appears whole when the unpack
    /// succeeds and not at all when it fails: the tree lands hidden beside it and is renamed
    /// into place at the end. An existing DEST may already hold files: nothing in it is ever
    /// written through or followed (an existing file, symlink, fifo or device named like an
    /// entry is an error, unless --skip-old-files or --overwrite); existing directories are
    /// merged into, and what landed before an error stays. By default the landing runs in a
    /// user namespace chrooted to DEST, so even a bug cannot write outside it.
    ///
    /// Restores what the archive holds and the process may: modes exactly (the umask is set
    /// aside), times to the nanosecond, symlinks, hard links, fifos; as root also owners,
    /// setuid/setgid, devices and trusted/security/system extended attributes. What it may
    /// not restore is skipped with one warning per kind, and the exit status stays 0.
    #[command(after_help = exit_status!())]
    #[command(override_usage = "barge unpack [OPTIONS] [ARCHIVE|-] <DEST> [PATH]...")]
    Unpack {
        /// The archive: a file, a block device, or '-' for stdin. Given alone it is DEST,
        /// and the archive comes from stdin.
        #[arg(value_name = "ARCHIVE|-")]
        archive: PathBuf,
        /// The directory to unpack into.
        // Not an optional ARCHIVE before a required DEST: clap's `--` would then skip to DEST.
        dest: Option<PathBuf>,
        /// Do not enter the user-namespace chroot (containment then rests on layers 1-2).
        #[arg(long)]
        no_sandbox: bool,
        /// How to land: sync (one thread), threads (one thread per core lands, the first
        /// also decodes and reads a stream), uring (like threads, each creating the small
        /// files of a directory in io_uring batches; one thread for a stream), auto (threads,
        /// except sync for archive files under 256 KiB; a stream that short lands on one
        /// thread).
        #[arg(long, default_value = "auto", value_parser = engine_parser())]
        engine: barge::unpack::Engine,
        /// Drop the first N components of every path, as tar does: entries with N or fewer
        /// components are skipped; a hard link to a skipped file is an error.
        #[arg(long, value_name = "N", default_value_t = 0)]
        strip_components: usize,
        #[command(flatten)]
        select: archive::SelectArgs,
        #[command(flatten)]
        restore: RestoreArgs,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        region: Region,
        /// Share the unpack among the ranks of the MPI job this runs in (`mpiexec -n N
        /// barge-mpi unpack --mpi FILE DEST`, or srun): each rank lands a run of the
        /// segments of a version 2 FILE (with its index) that every rank sees; hard links
        /// across ranks and the directories' metadata are made once all are done. DEST is
        /// created when missing, and what landed before an error stays; see docs/SCALE.md.
        #[arg(long, conflicts_with_all = ["strip_components", "paths", "exclude"])]
        mpi: bool,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// List the entries of an archive (a file, or '-' for stdin), like `tar -tv`.
    #[command(after_help = exit_status!())]
    List {
        /// The archive: a file, a block device, or '-' (the default) for stdin.
        #[arg(value_name = "ARCHIVE|-")]
        archive: Option<PathBuf>,
        /// One JSON object per line: path (or path_hex when not UTF-8), kind, size, mode,
        /// and as recorded mtime {sec, nsec}, owner {uid, gid}, xattrs [{name_hex,
        /// value_hex}], linked, target (symlinks), link and link_index (hard links), major
        /// and minor (devices).
        #[arg(long, conflicts_with_all = ["long", "names"])]
        json: bool,
        /// Show owner (uid/gid) and modification time (UTC) too, as `tar -tv`.
        #[arg(short, long, conflicts_with = "names")]
        long: bool,
        /// Show only the paths (a directory's ending in '/'), as `tar -tf`. A version 2
        /// archive in a file is then listed from its index, without reading its body.
        #[arg(long)]
        names: bool,
        /// Drop the first N components of every path, as tar does: entries with N or fewer
        /// components are skipped; a hard link to a skipped file is an error.
        #[arg(long, value_name = "N", default_value_t = 0)]
        strip_components: usize,
        #[command(flatten)]
        select: archive::SelectArgs,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        region: Region,
    },
    /// Write the content of files in an archive to stdout, as `tar -xOf`.
    ///
    /// Each PATH is a file, or a directory whose files are written one after another in
    /// archive order; a PATH that names nothing is an error.
    #[command(after_help = exit_status!())]
    Cat {
        /// The archive: a file, a block device, or '-' for stdin.
        #[arg(value_name = "ARCHIVE|-")]
        archive: PathBuf,
        /// Paths in the archive, as `barge list` shows them.
        #[arg(value_name = "PATH", required = true)]
        paths: Vec<PathBuf>,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        region: Region,
    },
    /// Check an archive whole, writing nothing; with DIR, compare DIR with it, as `tar -d`.
    ///
    /// Every entry is decoded and, in a version 2 archive, every digest checked (version 1
    /// holds none: its structure is checked and a warning says so); the first error names
    /// the entry. With DIR, each path of the archive that differs in DIR gets one line on
    /// stdout saying what differs: missing, kind, size, content (the first byte that
    /// differs), mode, modification time, symlink target, hard link, device numbers, and
    /// with -a owner. Entries only DIR has, extended attributes and DIR's own mode and time
    /// are not compared; nothing in DIR is followed. Exit status 1 when anything differs.
    #[command(after_help = exit_status!())]
    Verify {
        /// The archive: a file, a block device, or '-' for stdin.
        #[arg(value_name = "ARCHIVE|-")]
        archive: PathBuf,
        /// The directory to compare with the archive (as unpacked into DIR).
        #[arg(value_name = "DIR")]
        dir: Option<PathBuf>,
        /// Compare owners (uid and gid) too, as recorded by `pack -a`.
        #[arg(short = 'a', long = "archive")]
        owners: bool,
        #[command(flatten)]
        limits: LimitArgs,
        #[command(flatten)]
        region: Region,
        #[command(flatten)]
        out: OutputArgs,
    },
    /// Copy trees (or any entries) to DEST, keeping what `cp -a` keeps, on every core.
    ///
    /// DEST absent: the one SRC is copied as DEST; DEST a directory: each SRC is copied
    /// into it under its own name, or with a trailing '/' (SRC/) its contents, as rsync.
    /// Keeps what `cp -a` keeps with no flag: modes, times, symlinks, hard links, fifos,
    /// sockets, and as far as the process may owners, extended attributes (ACLs,
    /// capabilities) and devices, with one warning per kind it cannot keep. Below SRC and DEST
    /// nothing is followed or written through: new entries are created exclusively and an
    /// existing one is an error unless --update, --overwrite or --skip-old-files; an entry
    /// that cannot be copied is named and the copy goes on (exit status 1 at the end).
    Cp(cp::CpArgs),
    /// Receive uploads over HTTPS (or HTTP): each body, a barge archive, lands in a new
    /// directory under DEST.
    ///
    /// Serves an upload page for browsers (pick or drop a folder; it is packed in the page
    /// and streamed up) and an API for programs (curl). Every upload needs the bearer token;
    /// each lands in its own confined child process, within limits, and appears whole or
    /// not at all. TLS by default, with a certificate given or made at start.
    Serve(serve::ServeArgs),
    /// Apparent bytes, files, directories and other entries of each PATH, like `du -sb`.
    ///
    /// Hard-linked files are counted once, symlinks are never followed, unreadable entries
    /// are named on stderr without stopping the walk (exit status 2; a PATH that cannot be
    /// measured at all: 1).
    #[command(disable_help_flag = true)]
    Du(du::DuArgs),
    /// Send trees (or an archive) to a `barge recv`, authenticated and encrypted.
    #[command(after_help = exit_status!())]
    Send(net::SendArgs),
    /// Receive trees from `barge send` into DEST: prints a ticket to give the sender.
    #[command(after_long_help = concat!(net::recv_help!(), exit_status!()))]
    // A sender's ids and privileges mean nothing here unless asked for, even as root.
    #[command(mut_arg("same_owner", |a| a.help(
        "Give entries their owner (uid/gid) from the sender, and create its devices: as root \
         only, and never unless asked (unlike unpack)")))]
    #[command(mut_arg("no_same_owner", |a| a.help(
        "Do not restore owners: entries belong to the user running recv (the default)")))]
    #[command(mut_arg("setid", |a| a.help(
        "Restore the sender's setuid and setgid bits (never unless asked, even as root)")))]
    Recv(net::RecvArgs),
    /// Make a new key file for `recv --key-file` and `send --key-file` (32 random bytes in
    /// base64url, readable by its owner only; an existing FILE is refused). Give it to the
    /// sending host by a channel you trust.
    Key(net::KeyArgs),
    /// Print the manual page (roff: `barge man | man -l -`), or write one page per command
    /// into DIR (barge.1, barge-pack.1, ...), as a package installs them.
    Man {
        /// Write the pages into DIR.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
    /// Print the completion script for SHELL, e.g. into
    /// /usr/share/bash-completion/completions/barge.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// The signal a write to a pipe without a reader raises.
const SIGPIPE: i32 = rustix::process::Signal::PIPE.as_raw();

fn main() -> ExitCode {
    // A server spawning `barge` as its confined lander (see `barge::confine`) gets the child
    // mode here, before any argument is parsed.
    barge::confine::run_child_if_requested();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return command_line_error(e),
    };
    // What a listing writes is read by people and filters, which may stop early (`| head`).
    let listing = !matches!(
        cli.command,
        Command::Pack(_)
            | Command::Unpack { .. }
            | Command::Cp(_)
            | Command::Serve(_)
            | Command::Send(_)
            | Command::Recv(_)
    );
    // Commands that write stop cleanly on a signal; the others only read, and die as usual.
    // serve handles its signals itself.
    // What stops the operations: the stop signals, where caught; serve records the signal
    // it stopped by in a token of its own.
    let reading = matches!(cli.command, Command::List { .. } | Command::Verify { .. });
    let cancel = match (!listing || reading) && !matches!(cli.command, Command::Serve(_)) {
        true => barge::interrupt::catch_signals(),
        false => Cancel::new(),
    };
    let json = cli.command.json();
    report::show_details(cli.command.verbose());
    report::hide_warnings(cli.command.quiet());
    let result = run(cli.command, &cancel);
    let stopped_by = cancel.reason().filter(|&signal| signal > 0);
    let pipe_closed = |e: &anyhow::Error| stopped_by == Some(SIGPIPE) || report::is_broken_pipe(e);
    let exit = match result {
        Ok(exit) => exit,
        // Not an error, and nothing to say: as rg does. (An archive cut short is an error.)
        Err(e) if listing && pipe_closed(&e) => Exit::Success,
        Err(e) => {
            report::failure(&e);
            if let Some(stdout_is_data) = json {
                report::json_error(&e, stdout_is_data);
            }
            Exit::Error
        }
    };
    // A SIGPIPE is no reason to end by it: a listing's or a summary's reader went away, or
    // the archive's, which the error says.
    let fatal = |s: &i32| ![barge::interrupt::SIGBUS, SIGPIPE].contains(s);
    if let Some(signal) = stopped_by.filter(fatal) {
        barge::interrupt::die_by(signal);
    }
    exit.into()
}

impl Command {
    /// The output options, for the commands that have them.
    fn out(&self) -> Option<OutputArgs> {
        match self {
            Command::Pack(args) => Some(args.out()),
            Command::Unpack { out, .. } | Command::Verify { out, .. } => Some(*out),
            Command::Cp(args) => Some(args.out()),
            Command::Send(args) => Some(args.out()),
            Command::Recv(args) => Some(args.out()),
            _ => None,
        }
    }

    /// Whether `-v` was given.
    fn verbose(&self) -> bool {
        self.out().is_some_and(|out| out.verbose)
    }

    /// Whether `-q` was given.
    fn quiet(&self) -> bool {
        self.out().is_some_and(|out| out.quiet)
    }

    /// With `--json`: whether stdout carries the archive (then the JSON goes to stderr).
    fn json(&self) -> Option<bool> {
        match self {
            Command::Pack(args) => args.json(),
            Command::Unpack { out, .. } => out.json.then_some(false),
            Command::List { json, .. } => json.then_some(false),
            Command::Verify { out, .. } => out.json.then_some(false),
            Command::Du(args) => args.json().then_some(false),
            Command::Cp(args) => args.json().then_some(false),
            Command::Serve(args) => args.json().then_some(false),
            Command::Send(args) => args.json().then_some(false),
            Command::Recv(args) => args.json().then_some(false),
            Command::Key(_) | Command::Cat { .. } => None,
            Command::Man { .. } | Command::Completions { .. } => None,
        }
    }
}

/// Runs the command.
fn run(command: Command, cancel: &Cancel) -> anyhow::Result<Exit> {
    match command {
        Command::Pack(args) => archive::pack(args, cancel),
        Command::Unpack {
            archive,
            dest,
            no_sandbox,
            engine,
            strip_components,
            select,
            restore,
            limits,
            region,
            mpi,
            out,
        } => {
            let mut operation = Unpack::new();
            if !restore.no_same_permissions {
                let before = clear_umask();
                operation = operation.umask(0).dest_mode(0o777 & !before);
            }
            let operation = operation
                .engine(engine)
                .limits(limits.limits())
                .region(region.into())
                .sandbox(!no_sandbox)
                .strip_components(strip_components)
                .select(select.select()?)
                .restore(restore.restore())
                .cancel(cancel.clone());
            let (archive, dest) = match &dest {
                Some(dest) => (Some(archive.as_path()), dest),
                None => (None, &archive),
            };
            if mpi {
                return mpi::unpack(archive, dest, &operation, out);
            }
            archive::unpack(archive, dest, operation, out)
        }
        Command::List {
            archive,
            json,
            long,
            names,
            strip_components,
            select,
            limits,
            region,
        } => {
            let operation = reading(limits, region, cancel)
                .strip_components(strip_components)
                .select(select.select()?);
            let format = match (json, long, names) {
                (true, ..) => list::Format::Json,
                (_, true, _) => list::Format::Long,
                (.., true) => list::Format::Names,
                _ => list::Format::Short,
            };
            archive::list(archive.as_deref(), format, operation)
        }
        Command::Cat {
            archive,
            paths,
            limits,
            region,
        } => {
            let select = archive::SelectArgs {
                paths,
                exclude: Vec::new(),
            };
            let operation = reading(limits, region, cancel).select(select.select()?);
            archive::cat(&archive, operation)
        }
        Command::Verify {
            archive,
            dir,
            owners,
            limits,
            region,
            out,
        } => {
            let operation = reading(limits, region, cancel);
            archive::verify(&archive, dir.as_deref(), owners, operation, out)
        }
        Command::Du(args) => du::du(args),
        Command::Cp(args) => cp::cp(args, cancel),
        Command::Serve(args) => serve::serve(args, cancel),
        Command::Send(args) => net::send(args, cancel),
        Command::Recv(args) => net::recv(args, cancel),
        Command::Key(args) => net::key(args),
        Command::Man { dir: Some(dir) } => {
            let shown = report::shown_path(&dir);
            for (name, page) in manual::pages()? {
                std::fs::write(dir.join(&name), page)
                    .with_context(|| format!("cannot write the manual page {shown}/{name}"))?;
            }
            Ok(Exit::Success)
        }
        Command::Man { dir: None } => {
            let (_, page) = manual::pages()?.swap_remove(0);
            print(&page)
        }
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "barge", &mut script);
            print(&script)
        }
    }
}

/// Clears the process's umask, so that what barge creates gets exactly the modes it asks
/// for (as `tar -p`), and returns the umask the process had (a DEST barge creates still
/// gets 0o777 under it). A process decision: call it while single-threaded.
fn clear_umask() -> u32 {
    rustix::process::umask(rustix::fs::Mode::empty()).bits()
}

/// Writes `bytes` to stdout.
fn print(bytes: &[u8]) -> anyhow::Result<Exit> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(bytes).and_then(|()| stdout.flush())?;
    Ok(Exit::Success)
}

/// Prints `--help` or `--version` (status 0), or a command-line error in barge's style
/// (status 1: 2 means entries were left out).
fn command_line_error(e: clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // A reader that went away (`barge --help | head`) is no error either.
        let _ = e.print();
        return Exit::Success.into();
    }
    let text = e.render().to_string();
    match text.strip_prefix("error: ") {
        Some(rest) => report::to_stderr(&format!("barge: error: {rest}")),
        None => report::to_stderr(&text),
    }
    Exit::Error.into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn limits_take_units_and_none() {
        let parse = |s| parse_limit(s).map(|l| l.0);
        assert_eq!(parse("none"), Ok(None));
        assert_eq!(parse("1500"), Ok(Some(1500)));
        assert_eq!(parse("10M"), Ok(Some(10 << 20)));
        assert_eq!(parse("2g"), Ok(Some(2 << 30)));
        assert_eq!(parse("1T"), Ok(Some(1 << 40)));
        assert_eq!(parse("3KiB"), Ok(Some(3 << 10)));
        assert_eq!(parse("5gib"), Ok(Some(5 << 30)));
        for bad in [
            "",
            "M",
            "1.5G",
            "10Q",
            "-1",
            "99999999999T",
            "1KB",
            "1 M",
            "1MiBs",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
