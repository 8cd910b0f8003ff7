//! io_uring landing: [`UringLander`] creates the small files of a directory in batches: for each, an
//! `openat` into a fixed-file slot, linked to a `write` of the whole content and a `close`
//! of the slot, so one `io_uring_enter` lands up to [`RING_FILES`] files and no fd is ever
//! installed. Directories and large files go through the wrapped [`SyncLander`].
//!
//! Bounds: [`RING_FILES`] slots, so at most that many files open at once; content is copied
//! into a buffer of at most [`ARENA`] bytes plus one file. A batch is landed before any
//! directory change, so its directory fd (the sync lander's current one) outlives it.

use std::os::fd::{AsRawFd, OwnedFd};

use io_uring::{opcode, squeue::Flags, types};
use rustix::fs::{unlinkat, AtFlags, OFlags};
use rustix::io::Errno;

use super::sync::SyncLander;
use super::{Land, LandSummary};
use crate::error::{Error, Result};
use crate::interrupt::check;
use crate::sys::ring::Ring;
use crate::sys::CREATE_FLAGS;
use crate::tree::{Content, Entry, Meta, Sink};

/// Files per batch (three requests each).
pub const RING_FILES: usize = 64;
/// A batch is landed once its copied names and contents reach this many bytes.
pub const ARENA: usize = 1 << 20;
/// Larger files are written by the sync lander.
const SMALL: u64 = 64 * 1024;

/// A small file waiting in the batch: where its NUL-terminated name and content are in
/// the arena.
struct Queued {
    name: usize,
    name_len: usize,
    data: usize,
    len: usize,
    mode: u32,
}

/// Lands small files through io_uring in batches, everything else through a [`SyncLander`].
pub struct UringLander {
    sync: SyncLander,
    ring: Ring,
    arena: Vec<u8>,
    queued: Vec<Queued>,
    results: Vec<i32>,
    landed: LandSummary,
}

impl UringLander {
    /// A lander creating entries below the directory `root`; fails when io_uring is not
    /// available.
    pub fn new(root: OwnedFd) -> Result<UringLander> {
        let ring = Ring::new(3 * RING_FILES as u32, RING_FILES as u32)
            .map_err(|e| Error::os("io_uring_setup", crate::TreePath::default(), e))?;
        Ok(UringLander {
            sync: SyncLander::new(root),
            ring,
            arena: Vec::with_capacity(ARENA + SMALL as usize + 256),
            queued: Vec::with_capacity(RING_FILES),
            results: Vec::with_capacity(3 * RING_FILES),
            landed: LandSummary::default(),
        })
    }

    /// Lands the batch in the current directory. Every file is tried; the error of the
    /// first that failed is returned, and a file whose content did not all land is removed.
    fn flush(&mut self) -> Result<()> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let dir = types::Fd(self.sync.current().as_raw_fd());
        // A slot is no fd: O_CLOEXEC means nothing there and is refused.
        let flags = CREATE_FLAGS.difference(OFlags::CLOEXEC).bits() as i32;
        let base = self.arena.as_ptr();
        for (k, q) in self.queued.iter().enumerate() {
            let slot = types::Fixed(k as u32);
            let target = types::DestinationSlot::try_from_slot_target(k as u32).expect("small");
            let ud = 3 * k as u64;
            // SAFETY (pointers): offsets inside the arena, which is not touched until the
            // batch completed.
            let (name, data) = unsafe { (base.add(q.name).cast(), base.add(q.data)) };
            let entries = [
                opcode::OpenAt::new(dir, name)
                    .flags(flags)
                    .mode(q.mode)
                    .file_index(Some(target))
                    .build()
                    .flags(Flags::IO_HARDLINK)
                    .user_data(ud),
                opcode::Write::new(slot, data, q.len as u32)
                    .offset(0)
                    .build()
                    .flags(Flags::IO_HARDLINK)
                    .user_data(ud + 1),
                opcode::Close::new(slot).build().user_data(ud + 2),
            ];
            for entry in &entries {
                // SAFETY: the name, content and directory fd outlive the run below.
                unsafe { self.ring.push(entry) };
            }
        }
        let results = self
            .ring
            .run()
            .map_err(|e| Error::io("io_uring_enter", self.sync.path(b""), e))?;
        self.results.clear();
        self.results.extend_from_slice(results);
        if let Err(stop) = check() {
            // The contents were copied before the stop was seen; if it says that the
            // mapped archive shrank, some may be zeros: none of these files counts.
            for (k, q) in self.queued.iter().enumerate() {
                if self.results[3 * k] >= 0 {
                    let name = &self.arena[q.name..q.name + q.name_len];
                    let _ = unlinkat(self.sync.current(), name, AtFlags::empty());
                }
            }
            self.queued.clear();
            self.arena.clear();
            return Err(stop);
        }
        let mut first = None;
        let queued = std::mem::take(&mut self.queued);
        for (k, q) in queued.iter().enumerate() {
            if let Err(e) = self.landed(q, self.results[3 * k], self.results[3 * k + 1]) {
                first.get_or_insert(e);
            }
        }
        self.queued = queued;
        self.queued.clear();
        self.arena.clear();
        first.map_or(Ok(()), Err)
    }

    /// Checks how file `q` landed, given the results of its `openat` and `write`.
    fn landed(&mut self, q: &Queued, opened: i32, wrote: i32) -> Result<()> {
        let name = &self.arena[q.name..q.name + q.name_len];
        if opened == -libc::EEXIST {
            return Err(self.sync.exists(name));
        }
        if opened < 0 {
            let e = Errno::from_raw_os_error(-opened);
            return Err(Error::io("openat", self.sync.path(name), e));
        }
        if wrote as usize == q.len {
            self.landed.files += 1;
            self.landed.bytes += q.len as u64;
            return Ok(());
        }
        unlinkat(self.sync.current(), name, AtFlags::empty()).map_err(|e| {
            Error::io(
                "unlinkat (removing the partial file)",
                self.sync.path(name),
                e,
            )
        })?;
        if wrote < 0 {
            let e = Errno::from_raw_os_error(-wrote);
            return Err(Error::io("write", self.sync.path(name), e));
        }
        // A short write: land the file again the plain way, which resumes short writes. If
        // that fails too, its partial file goes now: the next file of the batch may need
        // the sync lander.
        let data = &self.arena[q.data..q.data + q.len];
        let file = Entry::file(name, Meta::with_mode(q.mode));
        match self.sync.file(&file, Content::Bytes(data)) {
            Ok(()) => Ok(()),
            Err(e) => Err(self.sync.abort(e)),
        }
    }
}

impl Land for UringLander {
    fn enter(&mut self, dir: &Entry<'_>) -> Result<bool> {
        self.flush()?;
        self.sync.enter(dir)
    }

    fn summary(&self) -> LandSummary {
        let sync = self.sync.summary();
        LandSummary {
            dirs: sync.dirs,
            files: sync.files + self.landed.files,
            bytes: sync.bytes + self.landed.bytes,
        }
    }
}

impl Sink for UringLander {
    type Error = Error;

    fn enter_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.enter(dir).map(drop)
    }

    fn empty_dir(&mut self, dir: &Entry<'_>) -> Result<()> {
        self.flush()?;
        self.sync.empty_dir(dir)
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.flush()?;
        self.sync.leave_dir()
    }

    /// Queues a small file whose bytes are all here (also when they could be copied from a
    /// file: the batch writes them from memory); hands any other to the sync lander.
    fn file(&mut self, file: &Entry<'_>, content: Content<'_>) -> Result<()> {
        let data = match content {
            Content::Bytes(data)
            | Content::File {
                mapped: Some(data), ..
            } => data,
            content => {
                self.flush()?;
                return self.sync.file(file, content);
            }
        };
        if data.len() as u64 > SMALL {
            self.flush()?;
            return self.sync.file(file, Content::Bytes(data));
        }
        let (name, at) = (file.name, self.arena.len());
        self.arena.extend_from_slice(name);
        self.arena.push(0);
        self.arena.extend_from_slice(data);
        self.queued.push(Queued {
            name: at,
            name_len: name.len(),
            data: at + name.len() + 1,
            len: data.len(),
            mode: file.meta.mode,
        });
        if self.queued.len() == RING_FILES || self.arena.len() >= ARENA {
            self.flush()?;
        }
        Ok(())
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        self.sync.data(data)
    }

    fn abort(&mut self, cause: Error) -> Error {
        // The batch came before the failure, as with the sync lander it lands first.
        match self.flush() {
            Ok(()) => self.sync.abort(cause),
            Err(e) => e,
        }
    }

    fn finish(&mut self) -> Result<()> {
        self.flush()?;
        self.sync.finish()
    }
}
