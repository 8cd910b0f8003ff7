//! io_uring landing: [`UringLander`] creates the small files, symlinks and hard links of a
//! directory in batches: for a file an `openat` into a fixed-file slot, linked to a
//! `write` of the whole content and a `close` of the slot; a `symlinkat`; a `linkat`. One
//! `io_uring_enter` lands up to [`RING_FILES`] entries and no file fd is ever installed.
//! io_uring has no request that sets times, so the entries of a batch that carry one get
//! it by `utimensat(dirfd, name, AT_SYMLINK_NOFOLLOW)` once the batch is done.
//! Directories, large files, special files and entries with more metadata than a mode and
//! a time (an owner, extended attributes, setuid or setgid that a write or `chown` would
//! clear) go through the wrapped [`SyncLander`], as does an entry whose name turns out to
//! exist (which the policy may skip or replace).
//!
//! Bounds: [`RING_FILES`] slots, so at most that many files open at once; names, contents
//! and targets are copied into a buffer of at most [`ARENA`] bytes plus one file. A batch
//! is landed before any directory change, so its directory fd (the sync lander's current
//! one) outlives it.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use rustix::fs::{unlinkat, AtFlags};
use rustix::io::Errno;

use super::restore::{Existing, Target};
use super::sync::{Setup, SyncLander};
use super::{Land, LandSummary};
use crate::error::{Error, Result};
use crate::sys::ring::{Op, Ring};
use crate::sys::CREATE_FLAGS;
use crate::tree::{Content, Device, Entry, Kind, Meta, Sink, Xattrs};

/// Entries per batch (at most three requests each).
pub const RING_FILES: usize = 64;
/// A batch is landed once its copied names and contents reach this many bytes.
pub const ARENA: usize = 1 << 20;
/// Larger files are written by the sync lander.
const SMALL: u64 = 64 * 1024;

/// What a queued entry is; its bytes are in the arena.
enum What {
    /// A file, its content at `data` (`len` bytes).
    File { data: usize, len: usize },
    /// A symlink to the NUL-terminated target at `target`.
    Symlink { target: usize, len: usize },
    /// A hard link to the file with link id `id`, named by the NUL-terminated name at
    /// `target`, in the directory `dir`.
    Link {
        dir: Arc<OwnedFd>,
        target: usize,
        id: u64,
    },
}

/// An entry waiting in the batch: its NUL-terminated name at `name` in the arena, its
/// metadata (`meta`, `link_id`, as its source gave them), and the user data of its first
/// request.
struct Queued {
    name: usize,
    name_len: usize,
    what: What,
    kind: Kind,
    meta: Meta,
    /// The mode to create a file with.
    mode: u32,
    link_id: Option<u64>,
    first: u64,
}

/// Lands small files, symlinks and hard links through io_uring in batches, everything
/// else through a [`SyncLander`].
pub struct UringLander {
    sync: SyncLander,
    ring: Ring,
    arena: Vec<u8>,
    queued: Vec<Queued>,
    /// The link ids of the files in the batch (a hard link to one waits for the batch).
    batch_links: Vec<u64>,
    requests: u64,
    results: Vec<i32>,
    landed: LandSummary,
}

impl UringLander {
    /// A lander creating entries below the directory `root`, as `setup` says; fails when
    /// io_uring is not available.
    pub(crate) fn new(root: OwnedFd, setup: Setup) -> Result<UringLander> {
        let ring = Ring::new(3 * RING_FILES as u32, RING_FILES as u32)
            .map_err(|e| Error::os("io_uring_setup", crate::TreePath::default(), e))?;
        Ok(UringLander {
            sync: SyncLander::new(root, setup),
            ring,
            arena: Vec::with_capacity(ARENA + SMALL as usize + 256),
            queued: Vec::with_capacity(RING_FILES),
            batch_links: Vec::new(),
            requests: 0,
            results: Vec::with_capacity(3 * RING_FILES),
            landed: LandSummary::default(),
        })
    }

    /// Copies `bytes` and a NUL into the arena; returns where they start.
    fn copy(&mut self, bytes: &[u8]) -> usize {
        let at = self.arena.len();
        self.arena.extend_from_slice(bytes);
        self.arena.push(0);
        at
    }

    /// Queues `entry`, whose name is at `name` in the arena, as `what` (`requests`
    /// requests), and lands the batch when it is full.
    fn queue(&mut self, entry: &Entry<'_>, name: usize, what: What, requests: u64) -> Result<()> {
        let mode = self
            .sync
            .policy()
            .entry(entry, &mut Default::default())
            .mode;
        if let Some(id) = entry.link_id {
            self.batch_links.push(id);
        }
        self.queued.push(Queued {
            name,
            name_len: entry.name.len(),
            what,
            kind: entry.kind,
            meta: entry.meta,
            mode,
            link_id: entry.link_id,
            first: self.requests,
        });
        self.requests += requests;
        if self.queued.len() == RING_FILES || self.arena.len() >= ARENA {
            self.flush()?;
        }
        Ok(())
    }

    /// Whether `entry` needs the sync lander for its metadata.
    fn needs_sync(&self, entry: &Entry<'_>) -> bool {
        let policy = self.sync.policy();
        policy.needs_fd(&policy.entry(entry, &mut Default::default()), entry.xattrs)
    }

    /// Lands the batch in the current directory. Every entry is tried; the error of the
    /// first that failed is returned, and a file whose content did not all land is removed.
    fn flush(&mut self) -> Result<()> {
        if self.queued.is_empty() {
            return Ok(());
        }
        let dir = self.sync.current();
        let arena = &self.arena;
        let c = |at: usize| CStr::from_bytes_until_nul(&arena[at..]).expect("NUL-terminated");
        let mut ops = Vec::with_capacity(self.requests as usize);
        for (k, q) in self.queued.iter().enumerate() {
            let path = c(q.name);
            match &q.what {
                What::File { data, len } => {
                    let slot = k as u32;
                    let open = Op::OpenAt {
                        dir,
                        path,
                        flags: CREATE_FLAGS,
                        mode: q.mode,
                        slot,
                    };
                    ops.push((open, true));
                    let data = &arena[*data..*data + *len];
                    ops.push((
                        Op::Write {
                            slot,
                            data,
                            offset: 0,
                        },
                        true,
                    ));
                    ops.push((Op::Close { slot }, false));
                }
                What::Symlink { target, .. } => {
                    let target = c(*target);
                    ops.push((Op::SymlinkAt { target, dir, path }, false));
                }
                What::Link {
                    dir: from_dir,
                    target,
                    ..
                } => {
                    let (from_dir, from) = (from_dir.as_fd(), c(*target));
                    ops.push((
                        Op::LinkAt {
                            from_dir,
                            from,
                            dir,
                            path,
                        },
                        false,
                    ));
                }
            }
        }
        let results = self
            .ring
            .submit(&ops)
            .map_err(|e| Error::io("io_uring_enter", self.sync.path(b""), e))?;
        self.results.clear();
        self.results.extend_from_slice(results);
        self.requests = 0;
        self.batch_links.clear();
        let queued = std::mem::take(&mut self.queued);
        if let Err(stop) = self.sync.cancel().check() {
            // The contents were copied before the stop was seen; if it says that the
            // mapped archive shrank, some may be zeros: none of these files counts.
            for q in queued
                .iter()
                .filter(|q| matches!(q.what, What::File { .. }))
            {
                if self.results[q.first as usize] >= 0 {
                    let name = &self.arena[q.name..q.name + q.name_len];
                    let _ = unlinkat(self.sync.current(), name, AtFlags::empty());
                }
            }
            self.arena.clear();
            return Err(stop);
        }
        let mut first = None;
        for q in &queued {
            if let Err(e) = self.landed(q) {
                first.get_or_insert(e);
            }
        }
        self.queued = queued;
        self.queued.clear();
        self.arena.clear();
        first.map_or(Ok(()), Err)
    }

    /// Checks how `q` landed and completes it: its time, its link id.
    fn landed(&mut self, q: &Queued) -> Result<()> {
        let name = &self.arena[q.name..q.name + q.name_len];
        let entry = Entry {
            link_id: q.link_id,
            ..Entry::new(name, q.kind, q.meta)
        };
        let done = self.results[q.first as usize];
        if done == -libc::EEXIST && self.sync.policy().existing() != Existing::Keep {
            // The sync lander skips or replaces it.
            return again(&mut self.sync, &self.arena, q, &entry);
        }
        if done == -libc::EEXIST {
            return Err(self.sync.exists(name));
        }
        if done < 0 {
            let op = match q.what {
                What::File { .. } => "openat",
                What::Symlink { .. } => "symlinkat",
                What::Link { .. } => "linkat",
            };
            let e = Errno::from_raw_os_error(-done);
            return Err(Error::io(op, self.sync.path(name), e));
        }
        if let What::File { len, .. } = q.what {
            let wrote = self.results[q.first as usize + 1];
            if wrote as usize != len {
                unlinkat(self.sync.current(), name, AtFlags::empty()).map_err(|e| {
                    let path = self.sync.path(name);
                    Error::io("unlinkat (removing the partial file)", path, e)
                })?;
                if wrote < 0 {
                    let e = Errno::from_raw_os_error(-wrote);
                    return Err(Error::io("write", self.sync.path(name), e));
                }
                // A short write: land the file again the plain way, which resumes short
                // writes.
                return again(&mut self.sync, &self.arena, q, &entry);
            }
        }
        let policy = *self.sync.policy();
        let apply = policy.entry(&entry, &mut self.landed.not_restored);
        let skipped = &mut self.landed.not_restored;
        let target = Target::At(self.sync.current(), name);
        let path = || self.sync.path(name);
        policy.restore(target, &apply, Xattrs::default(), skipped, path)?;
        match q.what {
            What::File { len, .. } => {
                self.landed.files += 1;
                self.landed.bytes += len as u64;
                if let Some(id) = q.link_id {
                    self.sync.created_linked(id, name);
                }
            }
            What::Symlink { .. } => self.landed.symlinks += 1,
            What::Link { .. } => self.landed.hard_links += 1,
        }
        Ok(())
    }
}

/// Lands `q` again through the sync lander `sync` (a file that was written short, or an
/// entry whose name exists), its bytes in `arena`; if that fails too, a partial file goes
/// now: the next entry of the batch may need the sync lander.
fn again(sync: &mut SyncLander, arena: &[u8], q: &Queued, entry: &Entry<'_>) -> Result<()> {
    let landed = match &q.what {
        What::File { data, len } => sync.file(entry, Content::Bytes(&arena[*data..*data + *len])),
        What::Symlink { target, len } => sync.symlink(entry, &arena[*target..*target + *len]),
        What::Link { id, .. } => sync.hard_link(entry, *id),
    };
    landed.map_err(|e| sync.abort(e))
}

impl Land for UringLander {
    fn enter(&mut self, dir: &Entry<'_>) -> Result<bool> {
        self.flush()?;
        self.sync.enter(dir)
    }

    fn link_here(&mut self, id: u64, name: &[u8]) {
        self.sync.link_here(id, name)
    }

    fn summary(&self) -> LandSummary {
        let mut summary = self.sync.summary();
        summary.add_entries(&self.landed);
        summary
    }

    fn sync_lander(&mut self) -> &mut SyncLander {
        &mut self.sync
    }

    fn holds_back(&self) -> bool {
        !self.queued.is_empty()
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
            } if data.len() as u64 <= SMALL && !self.needs_sync(file) => data,
            content => {
                self.flush()?;
                return self.sync.file(file, content);
            }
        };
        let name = self.copy(file.name);
        let what = What::File {
            data: self.arena.len(),
            len: data.len(),
        };
        self.arena.extend_from_slice(data);
        self.queue(file, name, what, 3)
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        self.sync.data(data)
    }

    fn hole(&mut self, len: u64) -> Result<()> {
        self.sync.hole(len)
    }

    fn root(&mut self, meta: &Meta, xattrs: Xattrs<'_>) -> Result<()> {
        self.sync.root(meta, xattrs)
    }

    fn symlink(&mut self, link: &Entry<'_>, target: &[u8]) -> Result<()> {
        if self.needs_sync(link) {
            self.flush()?;
            return self.sync.symlink(link, target);
        }
        let name = self.copy(link.name);
        let what = What::Symlink {
            target: self.copy(target),
            len: target.len(),
        };
        self.queue(link, name, what, 1)
    }

    /// Queues a link to a file landed before this batch (else the batch lands first); a
    /// link to a skipped file goes to the sync lander, which counts it.
    fn hard_link(&mut self, link: &Entry<'_>, target: u64) -> Result<()> {
        if self.batch_links.contains(&target) {
            self.flush()?;
        }
        let Some((dir, name)) = self.sync.link_target(target) else {
            return self.sync.hard_link(link, target);
        };
        let at = self.copy(link.name);
        let what = What::Link {
            dir,
            target: self.copy(&name),
            id: target,
        };
        self.queue(link, at, what, 1)
    }

    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        self.flush()?;
        self.sync.special(entry, device)
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
