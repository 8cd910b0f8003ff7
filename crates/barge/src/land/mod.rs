//! Landing: turning decoded events into a tree under a root directory fd. The driver here
//! feeds a [`Land`] sink from an in-memory archive or a stream; [`sync`] is the plain
//! system-call lander.

pub mod parallel;
pub mod sync;
pub mod uring;

use std::os::fd::BorrowedFd;

use rustix::io::read;

use crate::error::{Error, Result, TreePath};
use crate::format::{Decoder, Event, FormatError, Limits, Step};
use crate::interrupt::{retry, wait_readable};
use crate::Progress;

/// A sink that creates a tree. Every method acts relative to the directory entered last.
pub trait Land {
    /// Creates directory `name` and enters it; true when it created it, false when it merged
    /// into a directory that was there (whose mode it then leaves alone).
    fn enter_dir(&mut self, name: &[u8], mode: u32) -> Result<bool>;
    /// Creates directory `name`, which stays empty, without entering it.
    fn empty_dir(&mut self, name: &[u8], mode: u32) -> Result<()>;
    /// Leaves the directory entered last.
    fn leave_dir(&mut self) -> Result<()>;
    /// Creates file `name` of `size` bytes starting with `data`; when `data` is shorter
    /// than `size`, the rest arrives through [`Land::data`].
    fn file(&mut self, name: &[u8], mode: u32, size: u64, data: &[u8]) -> Result<()>;
    /// Creates file `name` with the content `data`, which is also the bytes at `offset` of
    /// the regular file `source`, so a lander may copy them from there inside the kernel
    /// instead of from memory. By default, [`Land::file`] with `data`.
    fn file_at(
        &mut self,
        name: &[u8],
        mode: u32,
        data: &[u8],
        _source: BorrowedFd<'_>,
        _offset: u64,
    ) -> Result<()> {
        self.file(name, mode, data.len() as u64, data)
    }
    /// More content of the file being written.
    fn data(&mut self, data: &[u8]) -> Result<()>;
    /// The input failed: removes a partly written file and returns the error to report.
    fn abort(&mut self, cause: Error) -> Error;
    /// Completes all pending work and returns what was landed.
    fn finish(&mut self) -> Result<LandSummary>;
}

/// What an unpack created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LandSummary {
    /// Directories created (or merged into when they already existed).
    pub dirs: u64,
    /// Files created.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
}

/// Feeds events to a [`Land`], holding back each `DIR` until the next event shows whether
/// the directory stays empty (then it is created but never opened).
pub struct Driver<'p, L: Land> {
    land: L,
    pending: Vec<u8>,
    pending_mode: Option<u32>,
    progress: &'p Progress,
}

impl<'p, L: Land> Driver<'p, L> {
    /// Wraps `land`, reporting to `progress`.
    pub fn new(land: L, progress: &'p Progress) -> Self {
        Driver {
            land,
            pending: Vec::with_capacity(256),
            pending_mode: None,
            progress,
        }
    }

    fn enter_pending(&mut self) -> Result<()> {
        match self.pending_mode.take() {
            Some(mode) => self.land.enter_dir(&self.pending, mode).map(drop),
            None => Ok(()),
        }
    }

    /// Handles one event (unless a stop was requested).
    pub fn event(&mut self, event: Event<'_>) -> Result<()> {
        crate::interrupt::check()?;
        match event {
            Event::Dir { name, mode } => {
                self.enter_pending()?;
                self.pending.clear();
                self.pending.extend_from_slice(name);
                self.pending_mode = Some(mode);
                self.progress.add_entry(0);
                Ok(())
            }
            Event::Pop => match self.pending_mode.take() {
                Some(mode) => self.land.empty_dir(&self.pending, mode),
                None => self.land.leave_dir(),
            },
            Event::File {
                name,
                mode,
                size,
                data,
            } => {
                self.enter_pending()?;
                self.progress.add_entry(data.len() as u64);
                self.land.file(name, mode, size, data)
            }
            Event::Data(data) => {
                self.progress.add_bytes(data.len() as u64);
                self.land.data(data)
            }
            Event::End { .. } | Event::Padding => Ok(()),
        }
    }

    /// Lands a complete archive held in memory.
    pub fn run_bytes(mut self, input: &[u8], limits: Limits) -> Result<LandSummary> {
        let result = crate::format::decode_all(input, limits, |_, event| self.event(event));
        self.close(result)
    }

    /// Lands an archive read from `input` (a pipe, socket or file), holding at most one
    /// buffer of it in memory.
    pub fn run_stream(mut self, input: ByteStream<'_>, limits: Limits) -> Result<LandSummary> {
        let result = read_events(input, limits, |_, event| self.event(event));
        self.close(result)
    }

    fn close(mut self, result: Result<u64>) -> Result<LandSummary> {
        match result {
            Ok(_) => self.land.finish(),
            Err(e) => Err(self.land.abort(e)),
        }
    }
}

/// Decodes an archive read from `input` (a pipe, socket or file) with one buffer of
/// memory, calling `on_event` for each event; returns the number of entries.
pub fn read_events(
    mut input: ByteStream<'_>,
    limits: Limits,
    mut on_event: impl FnMut(&Decoder, Event<'_>) -> Result<()>,
) -> Result<u64> {
    const BUFFER: usize = 1 << 20;
    let mut decoder = Decoder::new(limits);
    let mut buf = vec![0u8; BUFFER];
    let (mut start, mut end, mut eof, mut ended) = (0, 0, false, None);
    loop {
        match decoder.next(&buf[start..end], eof)? {
            Step::Event(event, n) => {
                start += n;
                match event {
                    Event::End { entries } => ended = Some(entries),
                    Event::Padding => {}
                    event => on_event(&decoder, event)?,
                }
            }
            Step::NeedMore => {
                // What is left is at most one incomplete message header: cheap to move.
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
                let n = input.read(&mut buf[end..], decoder.offset())?;
                eof = n == 0;
                end += n;
            }
            Step::Done => return Ok(ended.expect("Done only after the end")),
        }
    }
}

/// An archive read as a stream (a pipe, socket or file), of which only a given number of
/// bytes may belong to the archive (`unpack --length`): what follows them is never read.
#[derive(Debug)]
pub struct ByteStream<'a> {
    fd: BorrowedFd<'a>,
    /// Bytes of the archive not read yet, at most.
    left: u64,
    /// How many bytes the archive has, when that was given.
    length: Option<u64>,
}

impl<'a> ByteStream<'a> {
    /// The rest of `fd`, to its end.
    pub fn new(fd: BorrowedFd<'a>) -> ByteStream<'a> {
        ByteStream {
            fd,
            left: u64::MAX,
            length: None,
        }
    }

    /// The next `length` bytes are the archive: no more is read, and an input that ends
    /// before them is an error.
    pub fn limit(self, length: u64) -> ByteStream<'a> {
        ByteStream {
            left: length,
            length: Some(length),
            ..self
        }
    }

    /// Reads and drops the next `n` bytes (the archive starts after them: `--offset`).
    pub fn skip(&mut self, n: u64) -> Result<()> {
        let mut scratch = vec![0u8; n.min(1 << 16) as usize];
        let mut skipped = 0;
        while skipped < n {
            let want = (n - skipped).min(scratch.len() as u64) as usize;
            match self.read(&mut scratch[..want], skipped)? {
                0 => {
                    return Err(Error::InputTooShort {
                        needed: n,
                        got: skipped,
                    })
                }
                got => skipped += got as u64,
            }
        }
        Ok(())
    }

    /// Waits until the next read has something to return (bytes, or the end) or `patience`
    /// has passed (then false); fails when a stop is requested meanwhile.
    pub(crate) fn wait(&self, patience: Option<std::time::Duration>) -> Result<bool> {
        if self.left == 0 {
            return Ok(true);
        }
        wait_readable(self.fd, patience)
    }

    /// Reads what comes next, up to `buf.len()` bytes (0 at the end); `offset` is where the
    /// stream is, for messages.
    pub(crate) fn read(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        self.wait(None)?;
        let n = retry(|| read(self.fd, &mut buf[..want])).map_err(|e| {
            let at = TreePath(format!("<input at byte {offset}>").into_bytes());
            Error::io("read archive", at, e)
        })?;
        if let (0, Some(length)) = (n, self.length) {
            let got = length - self.left;
            return Err(Error::InputTooShort {
                needed: length,
                got,
            });
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// The offset of the message the input ended in, when `error` means the input ended early.
pub fn truncation_offset(error: &Error) -> Option<u64> {
    match error {
        Error::Format {
            kind: FormatError::Truncated,
            offset,
            ..
        } => Some(*offset),
        _ => None,
    }
}
