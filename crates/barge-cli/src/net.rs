//! `barge send` and `barge recv`: the front ends of the library's [`barge::net`].

use std::fs::File;
use std::io::{IsTerminal, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use barge::cp::Change;
use barge::error::{escape_bytes, NetError};
use barge::exclude::Exclude;
use barge::interrupt::Cancel;
use barge::net::server::{Done, Ended, Report};
use barge::net::{Key, Payload, Planned, Receive, Receiver, Send, Sent, Ticket, DEFAULT_PORT};
use barge::sys::fds::raise_fd_limit;
use barge::tree::Kind;
use serde_json::{json, Map, Value};

use crate::archive::{open_pack, warn_not_restored};
use crate::report::{
    counted, error_fields, human_bytes, log_line, print_planned, shown_path, shows_progress,
    summary, warn, with_progress, Exit, Total,
};
use crate::{LimitArgs, OutputArgs, RestoreArgs};

/// The environment variable that may hold the key (its text form).
const KEY_VAR: &str = "BARGE_KEY";

/// What `barge recv --help` adds.
macro_rules! recv_help {
    () => {
        "\
Keys: without --key-file or BARGE_KEY, a fresh 256-bit key is made and the ticket
HOST:PORT#KEY printed on stdout: give it to the sender (barge send DIR TICKET) by a channel
you trust; anyone holding it can write into DEST. A key file holds the 43-character key
(`barge recv` prints one in its ticket; any 32 random bytes in base64url) and must not be
readable by others (chmod 600).

Security: the handshake (Noise NNpsk2) shows each end that the other has the key without
sending it; everything after it is encrypted and authenticated, and a stream cut short or
changed on the way is detected. A connection that fails authentication lands nothing. Each
transfer lands through its own confined lander (a user-namespace chroot to DEST), with the
limits of unpack (--max-bytes defaults to the space free on DEST's filesystem).

Metadata: modes and times as unpack; the sender's owners and devices only as root with
--same-owner, its setuid/setgid bits only with --setid (even as root).

Unlike unpack, DEST is created at the start and stays: what a cut-off transfer landed is
kept (every file in it complete: the file being written is removed), and `barge send
--update` sends the rest: a one-shot recv keeps its ticket for it for --timeout seconds.

"
    };
}
pub(crate) use recv_help;

/// What `barge send` takes.
#[derive(clap::Args, Debug)]
pub struct SendArgs {
    /// The directories to send (one, with or without a trailing '/': its contents land at
    /// DEST's top; several: each as DEST/NAME, NAME its last component), then the receiver: the ticket
    /// `barge recv` printed (HOST:PORT#KEY), or HOST:PORT with the key from --key-file or
    /// BARGE_KEY.
    #[arg(required = true, value_name = "DIR... TICKET")]
    args: Vec<PathBuf>,
    /// Send the bytes of an existing archive (a file, or '-' for stdin) as they are,
    /// instead of packing DIRs.
    #[arg(long, value_name = "FILE|-")]
    from_archive: Option<PathBuf>,
    /// Also send owners, extended attributes and devices, as `pack -a` (the receiver
    /// restores them only as root).
    #[arg(short, long, alias = "all-metadata", conflicts_with = "from_archive")]
    archive: bool,
    /// Leave out entries matching PATTERN (repeatable), as `barge pack --exclude`.
    #[arg(long, value_name = "PATTERN", conflicts_with = "from_archive")]
    exclude: Vec<String>,
    /// Compress the stream (zstd): for links slower than the disks.
    #[arg(long)]
    compress: bool,
    /// Send only what DEST lacks or has differently (the receiver lists DEST first: type,
    /// size, mtime, mode, links), replacing changed entries by rename: a transfer that was
    /// cut off finishes without resending its whole files.
    #[arg(short, long)]
    update: bool,
    /// With --update, also have the receiver remove what DEST has and the DIRs lack (not
    /// excluded entries; special files too), before it lands anything: DEST becomes a copy
    /// of DIR, as with cp --update --delete.
    #[arg(long, requires = "update", conflicts_with = "from_archive")]
    delete: bool,
    /// Send nothing: connect and authenticate, with --update ask the receiver what DEST
    /// has, and print what the transfer would send, one `VERB PATH` per line (PATH in DEST),
    /// sorted by PATH, as `cp --dry-run` does: `copy` (DEST lacks it), `replace` (DEST has
    /// it differently; directories DEST has are not shown) or `delete` (with --delete); a
    /// file or symlink where DEST has a directory is named in a warning (the receiver
    /// replaces a directory only with --delete) and the exit status is 1. The receiver lands
    /// nothing, and a one-shot `barge recv` keeps waiting. The files that would be sent
    /// are read, as for the transfer.
    #[arg(long, conflicts_with = "from_archive")]
    dry_run: bool,
    /// With --dry-run: end each `VERB PATH` with a NUL instead of a newline, and print
    /// PATH's bytes as they are (not escaped), as `find -print0`, for `xargs -0`.
    #[arg(short = '0', long, requires = "dry_run")]
    null: bool,
    /// Spread the transfer over up to N TCP connections. By default one, or 4 when the
    /// round trip to the receiver is 5 ms or more: one connection carries at most its
    /// window per round trip (with Linux's default buffers about half of 1 Gbit/s at
    /// 40 ms), N connections N windows.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    connections: Option<u32>,
    /// Read the key from FILE (mode 600) instead of the ticket.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Give up when connecting takes longer, or the receiver sends or takes nothing for
    /// that many seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
    #[command(flatten)]
    out: OutputArgs,
}

impl SendArgs {
    /// Whether the output is JSON.
    pub fn json(&self) -> bool {
        self.out.json
    }

    /// The output options.
    pub fn out(&self) -> OutputArgs {
        self.out
    }
}

/// What `barge recv` takes.
#[derive(clap::Args, Debug)]
pub struct RecvArgs {
    /// The directory to land into (created when missing, with its parents).
    dest: PathBuf,
    /// The address and port to listen on (port 0: one the kernel chooses). By default this
    /// host only, as `barge serve`: `0.0.0.0:7361` (or `[::]:7361`) receives from other hosts.
    #[arg(long, value_name = "ADDR:PORT", default_value_t = SocketAddr::from(([127, 0, 0, 1], DEFAULT_PORT)))]
    listen: SocketAddr,
    /// The host name the ticket gives senders (by default the listen address, or this
    /// host's name when listening on all addresses).
    #[arg(long, value_name = "HOST")]
    advertise: Option<String>,
    /// Read the key from FILE (mode 600; or set BARGE_KEY) instead of making one: no
    /// ticket is printed.
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Keep receiving (one transfer after another, or several at once) until SIGTERM or
    /// SIGINT, which end it once the running transfers are done: for a service. Without
    /// it, recv exits after the first sender that authenticates, with its status; after a
    /// transfer that was cut off it keeps its ticket for a retry (`barge send --update`),
    /// and exits with 1 when no sender came for --timeout seconds.
    #[arg(long, alias = "keep")]
    keep_open: bool,
    /// Transfers landing at once, at most (with --keep-open); another sender waits for one to end
    /// (up to --timeout). A transfer's extra connections (send --connections) count as none.
    /// Beyond them recv takes 64 connections at once (in their handshake, or waiting), of
    /// which one address (an IPv6 /64) may have 16 in their handshake (more are closed at
    /// once); the rest wait in the listen queue. A connection must show the key within 10 s
    /// (or --timeout when shorter), however often it sends.
    #[arg(long, value_name = "N", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    max_connections: u32,
    /// Drop a connection whose sender sends nothing for that many seconds, or has not
    /// shown the key that long after it was taken (at most 10 s); without --keep-open, wait as
    /// long for a retry after a transfer that was cut off.
    #[arg(long, value_name = "SECONDS", default_value_t = 30)]
    timeout: u64,
    #[command(flatten)]
    restore: RestoreArgs,
    #[command(flatten)]
    limits: LimitArgs,
    #[command(flatten)]
    out: OutputArgs,
}

impl RecvArgs {
    /// Whether the output is JSON.
    pub fn json(&self) -> bool {
        self.out.json
    }

    /// The output options.
    pub fn out(&self) -> OutputArgs {
        self.out
    }
}

/// The key from `--key-file` or [`KEY_VAR`], if either was given.
fn given_key(file: Option<&Path>) -> Result<Option<Key>> {
    if let Some(file) = file {
        return Ok(Some(Key::from_file(file)?));
    }
    match std::env::var(KEY_VAR) {
        Ok(text) => Ok(Some(
            Key::from_text(text.trim_end()).with_context(|| format!("in {KEY_VAR}"))?,
        )),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(_) => bail!("{KEY_VAR} is not text"),
    }
}

/// What `barge key` takes.
#[derive(clap::Args, Debug)]
pub struct KeyArgs {
    /// The key file to make (refused when FILE exists).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

/// `barge key FILE`: a new random key, created exclusively with mode 600.
pub fn key(args: KeyArgs) -> Result<Exit> {
    use std::os::unix::fs::OpenOptionsExt;
    let shown = shown_path(&args.file);
    let key = Key::generate()?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&args.file)
        .with_context(|| format!("cannot make the key file {shown}"))?;
    writeln!(file, "{}", key.to_text())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("cannot write the key file {shown}"))?;
    Ok(Exit::Success)
}

/// `barge send DIR... TICKET`.
pub fn send(args: SendArgs, cancel: &Cancel) -> Result<Exit> {
    raise_fd_limit();
    let (ticket, dirs) = args.args.split_last().expect("clap asks for one");
    let ticket = Ticket::parse(&ticket.to_string_lossy())?;
    let key = match (ticket.key.clone(), given_key(args.key_file.as_deref())?) {
        (Some(_), Some(_)) => {
            bail!("two keys: the ticket has one, and so has --key-file or {KEY_VAR}; give one")
        }
        (Some(key), None) | (None, Some(key)) => key,
        (None, None) => bail!(
            "no key: give the ticket `barge recv` printed (HOST:PORT#KEY), or HOST:PORT with \
             --key-file FILE or {KEY_VAR}"
        ),
    };
    match (&args.from_archive, dirs.len()) {
        (None, 2..) => refuse_contents(dirs)?,
        (Some(_), 0) | (None, 1..) => {}
        (Some(_), _) => bail!("--from-archive sends an archive, not DIRs: give only the ticket"),
        (None, 0) => {
            bail!("nothing to send: give DIR... before the ticket (or --from-archive FILE)")
        }
    }
    let address = ticket.address();
    let operation = Send::new(&address, key)
        .timeout(Duration::from_secs(args.timeout))
        .compress(args.compress)
        .update(args.update)
        .delete(args.delete)
        .connections(args.connections)
        .cancel(cancel.clone());
    let progress = crate::report::progress(args.out, false);
    let total = Total::default();
    let exclude = Exclude::new(&args.exclude)?;
    if args.dry_run {
        return dry_run(&args, dirs, &operation, exclude, &address, cancel);
    }
    let (result, elapsed) = std::thread::scope(|scope| {
        if args.from_archive.is_none() && shows_progress(args.out) {
            let exclude = exclude.clone();
            // Without a thread to be had, progress has no total.
            let counting = || total.count(dirs, exclude, false);
            let _ = std::thread::Builder::new().spawn_scoped(scope, counting);
        }
        with_progress(
            args.out,
            &progress,
            || total.known(),
            || -> Result<Sent> {
                let sent = match &args.from_archive {
                    Some(path) => {
                        let mut input = open_archive(path)?;
                        operation.run(Payload::Archive(&mut *input), &progress)
                    }
                    None => {
                        let pack = open_pack(dirs, None, cancel)?
                            .progress(&progress)
                            .archive(args.archive)
                            .exclude(exclude.clone());
                        operation.run(Payload::Pack(Box::new(pack)), &progress)
                    }
                };
                sent.map_err(|e| retry_hint(e, &address))
            },
        )
    });
    let sent = result?;
    let mut exit = Exit::Success;
    if let Some(packed) = &sent.packed {
        for warning in &packed.warnings {
            warn(format_args!("{warning}"));
        }
        if packed.lost_any() {
            exit = Exit::Partial;
        }
    }
    let landed = &sent.landed.summary;
    let line = format!(
        "sent {} ({}{}) to {address}, which landed {}, {}, {}",
        human_bytes(progress.bytes()),
        human_bytes(sent.sent_bytes),
        if sent.compressed {
            " compressed"
        } else {
            " archive"
        },
        counted(landed.dirs, "dirs"),
        counted(landed.files, "files"),
        human_bytes(landed.bytes)
    );
    let line = match sent.deleted {
        0 => line,
        n => format!("{line}, and deleted {n}"),
    };
    summary(args.out, &line, &sent, Map::new(), elapsed, false);
    Ok(exit)
}

/// The error of a failed send; one cut off adds how to finish it: what landed stays, and a
/// one-shot `barge recv` waits for the retry.
fn retry_hint(error: barge::Error, address: &str) -> anyhow::Error {
    let cut = [NetError::Truncated, NetError::Tampered, NetError::Timeout];
    let retry = matches!(&error, barge::Error::Net { kind, .. } if cut.contains(kind));
    match retry {
        true => anyhow::Error::new(error).context(format!(
            "send to {address} failed (what landed stays: run the same send again with \
             --update to send the rest)"
        )),
        false => anyhow::Error::new(error).context(format!("send to {address} failed")),
    }
}

/// Refuses a DIR with a trailing `/` (its contents, as rsync takes it) among several DIRs,
/// each of which lands as DEST/NAME: only a single DIR lands its contents at DEST's top.
fn refuse_contents(dirs: &[PathBuf]) -> Result<()> {
    match dirs
        .iter()
        .find(|dir| dir.as_os_str().as_encoded_bytes().ends_with(b"/"))
    {
        Some(dir) => bail!(
            "{}: a trailing '/' asks for the directory's contents, which only a single DIR \
             sends (its entries land at DEST's top); with several DIRs each lands as DEST/NAME: \
             name it without the '/'",
            shown_path(dir)
        ),
        None => Ok(()),
    }
}

/// The archive to send: a file, or stdin (never a terminal).
fn open_archive(path: &Path) -> Result<Box<dyn Read>> {
    if path.as_os_str() == "-" {
        if std::io::stdin().is_terminal() {
            bail!("refusing to read an archive from a terminal: pipe one into stdin");
        }
        return Ok(Box::new(std::io::stdin().lock()));
    }
    let file = File::open(path).with_context(|| format!("cannot open {}", shown_path(path)))?;
    Ok(Box::new(file))
}

/// `barge send --dry-run`: what the transfer would send, printed (without --json), and its
/// summary.
fn dry_run(
    args: &SendArgs,
    dirs: &[PathBuf],
    operation: &Send,
    exclude: Exclude,
    address: &str,
    cancel: &Cancel,
) -> Result<Exit> {
    let start = Instant::now();
    let pack = open_pack(dirs, None, cancel)?
        .archive(args.archive)
        .exclude(exclude);
    // A non-directory where DEST has a directory: the receiver refuses to replace it (it
    // removes nothing whole), and the transfer would stop there.
    let mut conflicts = Vec::new();
    let mut changes = Vec::new();
    let print = |planned: Planned<'_>| {
        if planned.delete {
            if !args.out.json {
                changes.push((Change::Delete, planned.path.clone()));
            }
            return;
        }
        // With --delete the directory is removed first.
        if planned.there == Some(Kind::Dir) && planned.kind != Kind::Dir && !args.delete {
            return conflicts.push(planned.path.clone());
        }
        if args.out.json || (planned.kind, planned.there) == (Kind::Dir, Some(Kind::Dir)) {
            return;
        }
        let change = match planned.there {
            Some(_) => Change::Replace,
            None => Change::Create,
        };
        changes.push((change, planned.path.clone()));
    };
    let packed = operation
        .dry_run(pack, print)
        .with_context(|| format!("dry run of a send to {address} failed"))?;
    print_planned(changes, args.null)?;
    for warning in &packed.warnings {
        warn(format_args!("{warning}"));
    }
    for path in &conflicts {
        warn(format_args!(
            "{path}: DEST has a directory there, which the receiver refuses to replace: the \
             transfer would stop at it"
        ));
    }
    let unchanged = match args.update {
        true => format!(", leaving out {} unchanged", packed.unchanged),
        false => String::new(),
    };
    let line = format!(
        "would send {}, {}, {} to {address}{unchanged} (sent nothing)",
        counted(packed.dirs, "dirs"),
        counted(packed.files, "files"),
        human_bytes(packed.bytes)
    );
    let mut extra = Map::new();
    extra.insert("dry_run".into(), json!(true));
    summary(args.out, &line, &packed, extra, start.elapsed(), false);
    Ok(match (conflicts.is_empty(), packed.lost_any()) {
        (false, _) => Exit::Error,
        (true, true) => Exit::Partial,
        (true, false) => Exit::Success,
    })
}

/// `barge recv DEST`.
pub fn recv(args: RecvArgs, cancel: &Cancel) -> Result<Exit> {
    // The confined landers inherit the umask: cleared, they give the archive's modes.
    let umask = match args.restore.no_same_permissions {
        true => barge::root::process_umask(),
        false => crate::clear_umask(),
    };
    let shown = shown_path(&args.dest);
    let prepared = barge::root::prepare_dest(&args.dest, umask);
    let dest = prepared.with_context(|| format!("cannot prepare {shown}"))?;
    let (key, made) = match given_key(args.key_file.as_deref())? {
        Some(key) => (key, false),
        None => (Key::generate()?, true),
    };
    let listener = TcpListener::bind(args.listen)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let local = listener.local_addr()?;
    let host = match (&args.advertise, local.ip()) {
        (Some(host), _) => host.clone(),
        (None, ip) if ip.is_unspecified() => barge::net::host_name(),
        (None, ip) => ip.to_string(),
    };
    let ticket = Ticket {
        host,
        port: local.port(),
        key: made.then(|| key.clone()),
    };
    // Loopback: say how to receive from other hosts.
    let reach = match local.ip().is_loopback() {
        true => format!(
            " (this host only: --listen {} receives from other hosts)",
            SocketAddr::from(([0, 0, 0, 0], local.port()))
        ),
        false => String::new(),
    };
    let send_line = match made {
        true => "barge send DIR TICKET (the line above)".to_string(),
        false => format!("barge send DIR {} --key-file FILE", ticket.address()),
    };
    if made {
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "{}", ticket.to_text()).and_then(|()| stdout.flush())?;
    }
    log_line!("barge: recv: listening on {local}{reach}; on the sending host run: {send_line}");
    let receive = Receive::new(dest.path, key)
        .limits(args.limits.limits_or(Some(dest.free)))
        .restore(args.restore.restore())
        .timeout(Duration::from_secs(args.timeout))
        // With --keep-open, only the timeout ends a running connection.
        .cancel(match args.keep_open {
            true => Cancel::new(),
            false => cancel.clone(),
        })
        .max_transfers(args.max_connections as usize);
    let receive = match crate::report::lister(args.out, false) {
        Some(lister) => receive.listing(lister),
        None => receive,
    };
    let retry = Duration::from_secs(args.timeout);
    let receiver = Receiver::new(listener, receive)
        .keep(args.keep_open)
        .retry_for(retry)
        .cancel(cancel.clone());
    let ended = receiver.run(|report| match report {
        Report::Ended(done) => {
            log(done, args.out.json);
            if done.retryable() && !args.keep_open {
                log_line!(
                    "barge: recv: waiting {} s (--timeout) for a retry with the same key: on the \
                     sending host run {} --update",
                    retry.as_secs(),
                    send_line
                );
            }
        }
        Report::AcceptFailed(e) => warn(format_args!("recv: accept failed: {e}")),
    })?;
    Ok(match ended.map(|done| done.result) {
        Some(Err(_)) => Exit::Error,
        Some(Ok(_)) | None => Exit::Success,
    })
}

/// Logs how a connection ended: one line on stderr, and with `json` one object on stdout.
fn log(done: &Done, json: bool) {
    let peer = done.peer;
    let seconds = done.elapsed.as_secs_f64();
    // The name the sender gives itself: any bytes, escaped as every name from outside.
    let shown = |name: &str| escape_bytes(name.as_bytes());
    let mut fields = Map::new();
    fields.insert("peer".into(), json!(peer.to_string()));
    match &done.result {
        Ok(Ended::DryRun(dry_run)) => {
            log_line!(
                "barge: recv: {peer} ({}): dry run, told of {} entries of DEST in {seconds:.2} \
                 s, landed nothing",
                shown(&dry_run.sender),
                dry_run.listed
            );
            if let Ok(Value::Object(more)) = serde_json::to_value(dry_run) {
                fields.extend(more);
            }
            fields.insert("dry_run".into(), json!(true));
            fields.insert("ok".into(), json!(true));
        }
        Ok(Ended::Landed(received)) => {
            let l = &received.landed.summary;
            let deleted = match received.deleted {
                0 => String::new(),
                n => format!(", deleted {n}"),
            };
            log_line!(
                "barge: recv: {peer} ({}): landed {}, {}, {}{deleted} in {seconds:.2} s",
                shown(&received.sender),
                counted(l.dirs, "dirs"),
                counted(l.files, "files"),
                human_bytes(l.bytes)
            );
            warn_not_restored(&l.not_restored);
            if let Ok(Value::Object(more)) = serde_json::to_value(received) {
                fields.extend(more);
            }
            fields.insert("ok".into(), json!(true));
        }
        Err(failed) => {
            let from = failed
                .sender
                .as_ref()
                .map_or(String::new(), |name| format!(" ({})", shown(name)));
            let what = match &failed.error {
                barge::Error::Net {
                    kind: NetError::Authentication,
                    ..
                } => "refused",
                _ => "failed",
            };
            log_line!(
                "barge: recv: {peer}{from}: {what} after {seconds:.2} s: {}",
                failed.error
            );
            fields.insert("ok".into(), json!(false));
            fields.insert("authenticated".into(), json!(failed.authenticated));
            fields.extend(error_fields(&failed.error.to_string(), Some(&failed.error)));
            if let Some(name) = &failed.sender {
                fields.insert("sender".into(), json!(name));
            }
        }
    }
    if json {
        fields.insert("seconds".into(), json!(seconds));
        let _ = writeln!(std::io::stdout().lock(), "{}", Value::Object(fields));
    }
}
