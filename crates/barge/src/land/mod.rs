//! Landing: turning decoded events into a tree under a root directory fd. The driver here
//! feeds a [`Land`] sink from an in-memory archive or a stream; [`sync`] is the plain
//! system-call lander.

pub mod parallel;
pub mod sync;
pub mod uring;

use std::os::fd::BorrowedFd;

use crate::error::{Error, Result};
use crate::format::{Event, FormatError, Limits};
use crate::source::{read_events, ByteStream};
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
