//! `pack`, `unpack` and `list`.

use std::io::{IsTerminal, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use barge::error::escape_bytes;
use barge::format::{Event, Limits};
use barge::land::parallel::{self, land_parallel, THREADS_FROM};
use barge::land::sync::SyncLander;
use barge::land::uring::UringLander;
use barge::land::{read_events, ByteStream, Driver, Land, LandSummary};
use barge::output::{Kind, Output};
use barge::root::{open_dest, populate, raise_fd_limit, Confinement, Mapped};
use barge::{Progress, TreePath};
use rustix::fs::{fstat, open, seek, FileType, Mode, OFlags, SeekFrom};
use serde_json::{json, Map};

use crate::report::{human_bytes, json_path, shown_path, summary, with_progress};
use crate::{OutputArgs, Region};

/// Skipped entries named one by one before the rest are only counted.
const SKIPS_NAMED: usize = 10;

fn is_stdio(path: Option<&Path>) -> bool {
    path.is_none_or(|p| p.as_os_str() == "-")
}

/// `barge pack DIR [-o FILE|-]`.
pub fn pack(dir: &Path, output: Option<&Path>, out: OutputArgs) -> Result<ExitCode> {
    raise_fd_limit();
    let root = open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .with_context(|| format!("cannot open directory {}", shown_path(dir)))?;
    let stdout = std::io::stdout();
    let file = match output {
        Some(path) if !is_stdio(Some(path)) => Some(Output::open(path)?),
        None if stdout.is_terminal() => {
            bail!("refusing to write an archive to a terminal: use -o FILE or redirect stdout")
        }
        _ => None,
    };
    let sink = file.as_ref().map_or(stdout.as_fd(), |f| f.as_fd());
    let kind = file.as_ref().map(Output::kind);
    let replaced = file.as_ref().and_then(Output::replaced);
    let progress = Progress::default();
    let (result, elapsed) = with_progress(out, &progress, || {
        barge::pack::pack(root, sink, replaced, &progress)
    });
    // Dropping an unfinished output removes its new file.
    let finished = result.and_then(|packed| file.map_or(Ok(()), Output::finish).map(|()| packed));
    let packed = finished.with_context(|| pack_failed(dir, output, kind, progress.written()))?;
    warn_skipped(&packed.skipped);
    let line = format!(
        "packed {} dirs, {} files, {} ({} archive)",
        packed.dirs,
        packed.files,
        human_bytes(packed.bytes),
        human_bytes(packed.archive_bytes)
    );
    let mut fields = Map::new();
    fields.insert("dirs".into(), json!(packed.dirs));
    fields.insert("files".into(), json!(packed.files));
    fields.insert("bytes".into(), json!(packed.bytes));
    fields.insert("archive_bytes".into(), json!(packed.archive_bytes));
    fields.insert("skipped".into(), json!(packed.skipped.len()));
    summary(out, &line, fields, elapsed);
    Ok(ExitCode::SUCCESS)
}

/// What a failed pack says it left: a file is untouched, a stream or device holds an
/// incomplete archive.
fn pack_failed(dir: &Path, output: Option<&Path>, kind: Option<Kind>, written: u64) -> String {
    let dir = shown_path(dir);
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

fn warn_skipped(skipped: &[(TreePath, &'static str)]) {
    for (path, kind) in skipped.iter().take(SKIPS_NAMED) {
        eprintln!("barge: warning: skipped {kind} {path}");
    }
    if skipped.len() > SKIPS_NAMED {
        eprintln!(
            "barge: warning: ... and {} more",
            skipped.len() - SKIPS_NAMED
        );
    }
    if !skipped.is_empty() {
        eprintln!(
            "barge: skipped {} entries that are neither regular files nor directories",
            skipped.len()
        );
    }
}

/// The pipe buffer asked for when the archive comes through a pipe (the default is 64 KiB).
const PIPE_BUFFER: usize = 1 << 20;

/// An archive to read: mapped when it is a regular file or block device, streamed otherwise.
enum Input {
    Mapped(Mapped),
    /// A stream (stdin when no fd), of which at most `length` bytes are the archive.
    Stream {
        fd: Option<OwnedFd>,
        length: Option<u64>,
    },
}

impl Input {
    /// Opens the archive at `path` (stdin when none), in the part `region` says. Also
    /// answers whether zero bytes may follow its end: in a region without a length, or on a
    /// block device (a fixed-size container).
    fn open(path: Option<&Path>, region: Region) -> Result<(Input, bool)> {
        let name = path.map_or("stdin".into(), shown_path);
        let owned = match path {
            Some(p) if !is_stdio(Some(p)) => Some(
                open(
                    p,
                    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY,
                    Mode::empty(),
                )
                .with_context(|| format!("cannot open archive {name}"))?,
            ),
            _ => None,
        };
        let stdin = std::io::stdin();
        let fd = owned.as_ref().map_or(stdin.as_fd(), |f| f.as_fd());
        let stat = fstat(fd).with_context(|| format!("cannot stat archive {name}"))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        let padded =
            region.length.is_none() && (region.offset.is_some() || kind == FileType::BlockDevice);
        let offset = region.offset.unwrap_or(0);
        let at_start = seek(fd, SeekFrom::Current(0)).is_ok_and(|pos| pos == 0);
        if matches!(kind, FileType::RegularFile | FileType::BlockDevice) && at_start {
            // A block device's size is where its end is (fstat says 0).
            let size = match kind {
                FileType::RegularFile => stat.st_size as u64,
                _ => seek(fd, SeekFrom::End(0))
                    .with_context(|| format!("cannot find the size of {name}"))?,
            };
            let end = offset.saturating_add(region.length.unwrap_or(size.saturating_sub(offset)));
            if end > size {
                return Err(barge::Error::InputTooShort {
                    needed: end,
                    got: size,
                })
                .with_context(|| format!("cannot read archive {name}"));
            }
            let owned = match owned {
                Some(f) => f,
                None => fd.try_clone_to_owned().context("cannot dup stdin")?,
            };
            let mapped = Mapped::new(owned, offset, end - offset, Path::new(&name))?;
            return Ok((Input::Mapped(mapped), padded));
        }
        if kind == FileType::Directory {
            bail!("archive {name} is a directory");
        }
        if kind == FileType::Fifo {
            // A larger pipe buffer means fewer reads and wake-ups on both ends (best effort:
            // the limit for unprivileged users is /proc/sys/fs/pipe-max-size).
            let _ = rustix::pipe::fcntl_setpipe_size(fd, PIPE_BUFFER);
        }
        ByteStream::new(fd)
            .skip(offset)
            .with_context(|| format!("cannot read archive {name}"))?;
        let length = region.length;
        Ok((Input::Stream { fd: owned, length }, padded))
    }

    /// The fd that must stay open (a mapped archive, or a streamed one given by path).
    fn kept_fd(&self) -> Option<i32> {
        match self {
            Input::Mapped(m) => Some(m.file().as_raw_fd()),
            Input::Stream { fd, .. } => fd.as_ref().map(|fd| fd.as_raw_fd()),
        }
    }

    /// The stream of a streamed archive.
    fn stream(fd: &Option<OwnedFd>, length: Option<u64>) -> ByteStream<'_> {
        // SAFETY: stdin stays open for the life of the process.
        let stdin = unsafe { BorrowedFd::borrow_raw(0) };
        let stream = ByteStream::new(fd.as_ref().map_or(stdin, |f| f.as_fd()));
        match length {
            Some(length) => stream.limit(length),
            None => stream,
        }
    }

    /// The archive as the threaded landing reads it.
    fn parallel(&self) -> parallel::Input<'_> {
        match self {
            Input::Mapped(m) => parallel::Input::Mapped(m.bytes(), m.file(), m.offset()),
            Input::Stream { fd, length } => parallel::Input::Stream(Input::stream(fd, *length)),
        }
    }
}

/// How `unpack` lands the tree. (Plain comments on the variants keep `--help` listing them
/// as `[possible values: ...]`, which the bench harness reads.)
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Engine {
    // `threads`, except `sync` for an archive file under `THREADS_FROM` bytes (a shorter
    // stream lands on one thread within `threads`).
    #[default]
    Auto,
    // One thread making plain system calls.
    Sync,
    // One thread per core lands, the first also decodes (and reads a stream).
    Threads,
    // Like `threads` (one thread for a stream), each lander creating the small files of a
    // directory in io_uring batches.
    Uring,
}

impl Engine {
    /// The engine that lands `input`.
    fn resolve(self, input: &Input) -> Engine {
        match (self, input) {
            (Engine::Uring, _) => Engine::Uring,
            (Engine::Auto, Input::Mapped(m)) if (m.bytes().len() as u64) < THREADS_FROM => {
                Engine::Sync
            }
            (Engine::Auto, _) => Engine::Threads,
            (engine, _) => engine,
        }
    }

    /// Lands `input` below `root`.
    fn land(
        self,
        root: OwnedFd,
        input: &Input,
        limits: Limits,
        progress: &Progress,
    ) -> barge::Result<LandSummary> {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        match (self.resolve(input), input) {
            (Engine::Threads, input) => {
                let sync = |fd| Ok(SyncLander::new(fd));
                land_parallel(root, input.parallel(), limits, workers, sync, progress)
            }
            (Engine::Uring, Input::Mapped(_)) => land_parallel(
                root,
                input.parallel(),
                limits,
                workers,
                UringLander::new,
                progress,
            ),
            (Engine::Uring, _) => drive(UringLander::new(root)?, input, limits, progress),
            _ => drive(SyncLander::new(root), input, limits, progress),
        }
    }
}

/// Lands `input` with one lander on the calling thread.
fn drive<L: Land>(
    land: L,
    input: &Input,
    limits: Limits,
    progress: &Progress,
) -> barge::Result<LandSummary> {
    let driver = Driver::new(land, progress);
    match input {
        Input::Mapped(mapped) => {
            populate(mapped.bytes());
            driver.run_bytes(mapped.bytes(), limits)
        }
        Input::Stream { fd, length } => driver.run_stream(Input::stream(fd, *length), limits),
    }
}

/// `barge unpack [ARCHIVE|-] DEST`.
pub fn unpack(
    archive: Option<&Path>,
    dest: &Path,
    sandbox: bool,
    engine: Engine,
    mut limits: Limits,
    region: Region,
    out: OutputArgs,
) -> Result<ExitCode> {
    let (input, padded) = Input::open(archive, region)?;
    limits.zero_padding = padded;
    raise_fd_limit();
    let shown = shown_path(dest);
    let mut destination = open_dest(dest, sandbox, input.kept_fd())
        .with_context(|| format!("cannot prepare destination {shown}"))?;
    let confinement = destination.confinement.clone();
    if let Confinement::Unavailable(reason) = &confinement {
        eprintln!("barge: notice: sandbox unavailable ({reason}); containment rests on fd-relative landing");
    }
    let progress = Progress::default();
    let (result, elapsed) = with_progress(out, &progress, || {
        engine.land(destination.root()?, &input, limits, &progress)
    });
    let finished = destination.finish();
    let landed = barge::interrupt::unless_archive_shrank(result)
        .and_then(|landed| finished.map(|()| landed))
        .with_context(|| format!("unpack into {shown} stopped"))?;
    let line = format!(
        "unpacked {} dirs, {} files, {}",
        landed.dirs,
        landed.files,
        human_bytes(landed.bytes)
    );
    let mut fields = Map::new();
    fields.insert("dirs".into(), json!(landed.dirs));
    fields.insert("files".into(), json!(landed.files));
    fields.insert("bytes".into(), json!(landed.bytes));
    fields.insert(
        "sandboxed".into(),
        json!(confinement == Confinement::Sandboxed),
    );
    summary(out, &line, fields, elapsed);
    // The mapping is released by the exit; unmapping it first only costs time.
    std::mem::forget(input);
    Ok(ExitCode::SUCCESS)
}

/// `barge list [ARCHIVE|-]`.
pub fn list(
    archive: Option<&Path>,
    json: bool,
    mut limits: Limits,
    region: Region,
) -> Result<ExitCode> {
    let (input, padded) = Input::open(archive, region)?;
    limits.zero_padding = padded;
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let mut print = |decoder: &barge::format::Decoder, event: Event<'_>| -> barge::Result<()> {
        let (name, kind, size, mode): (&[u8], _, _, _) = match event {
            Event::Dir { mode, .. } => (b"", FileType::Directory, 0, mode),
            Event::File {
                name, size, mode, ..
            } => (name, FileType::RegularFile, size, mode),
            _ => return Ok(()),
        };
        let path = TreePath::join(decoder.dir_names(), name);
        let line = if json {
            let mut fields = Map::new();
            json_path(&mut fields, "path", &path.0);
            fields.insert(
                "kind".into(),
                json!(if kind == FileType::Directory {
                    "dir"
                } else {
                    "file"
                }),
            );
            fields.insert("size".into(), json!(size));
            fields.insert("mode".into(), json!(mode));
            serde_json::Value::Object(fields).to_string()
        } else {
            let slash = if kind == FileType::Directory { "/" } else { "" };
            format!(
                "{} {size:>12} {}{slash}",
                mode_string(kind, mode),
                escape_bytes(&path.0)
            )
        };
        writeln!(w, "{line}")
            .map_err(|e| barge::Error::os("write listing", TreePath(b"<stdout>".to_vec()), e))
    };
    let result = match &input {
        Input::Mapped(mapped) => barge::format::decode_all(mapped.bytes(), limits, &mut print),
        Input::Stream { fd, length } => read_events(Input::stream(fd, *length), limits, &mut print),
    };
    let flushed = w.flush();
    barge::interrupt::unless_archive_shrank(result).context("list stopped")?;
    flushed.context("cannot write the listing")?;
    Ok(ExitCode::SUCCESS)
}

/// `drwxr-xr-x`-style rendering of a kind and mode.
fn mode_string(kind: FileType, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(if kind == FileType::Directory {
        'd'
    } else {
        '-'
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}
