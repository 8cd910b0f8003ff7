//! What a landing thread does with a batch: walks to its directory, lands its entries
//! (checking the digests of version 2 data it reads from the archive file), and the files
//! several batches land ([`SharedFiles`]).

use std::collections::HashMap;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};

use rustix::fs::{openat, Mode};

use super::{frames, Batch, DirStep, Failure, Name, Op, Shared, Source, COPY_FROM};
use crate::error::{Error, Result};
use crate::format::{digest, digest_differs};
use crate::land::sync::SharedFile;
use crate::land::Land;
use crate::sys::map::populate;
use crate::sys::DIR_HANDLE_FLAGS;
use crate::threads::Crowd;
use crate::tree::{Content, Entry};

/// A lander and the directories it is in, landing batch after batch.
pub(super) struct Worker<'s, L: Land> {
    pub(super) land: L,
    pub(super) at: Vec<Name>,
    pub(super) shared: &'s Shared<'s>,
    /// The shared file it has open, by key, while it lands a batch.
    pub(super) open: Option<(u64, Arc<SharedFile>, OwnedFd)>,
    /// Where file data read from the archive file goes (see `frames::land_checked`).
    pub(super) piece: Vec<u8>,
    /// The first entry whose work its lander holds back (the io_uring lander's queued
    /// creations): a failure a later call reports may be that entry's.
    held: Option<u64>,
}

impl<'s, L: Land> Worker<'s, L> {
    pub(super) fn new(land: L, shared: &'s Shared<'s>) -> Self {
        Worker {
            land,
            at: Vec::new(),
            shared,
            open: None,
            piece: Vec::new(),
            held: None,
        }
    }

    /// Lands `batch` unless it starts after a failure.
    pub(super) fn land(&mut self, batch: &Batch<'_>) {
        if batch.first >= self.shared.stop.load(Relaxed) {
            return;
        }
        let landed = land_batch(self, batch);
        self.open = None;
        if let Err(failure) = landed {
            self.shared.fail((failure.0, self.land.abort(failure.1)));
        }
    }

    /// Creates the file `key` (in the current directory) of `size` bytes, whose data comes
    /// in `extents` extents; a file without any is complete at once.
    fn create(&mut self, key: u64, file: &Entry<'_>, size: u64, extents: u32) -> Result<()> {
        let files = &self.shared.files;
        let created = self.land.sync_lander().create_shared(file, size);
        let (file, fd) = match created {
            Ok(Some(made)) => made,
            Ok(None) => {
                files.gone(key);
                return Ok(());
            }
            Err(e) => {
                files.gone(key);
                return Err(e);
            }
        };
        if extents == 0 {
            return self.complete(&file, fd);
        }
        let file = Arc::new(file);
        files.created(key, &file, &self.at, extents);
        self.open = Some((key, file, fd));
        Ok(())
    }

    /// Writes `data` at offset `at` of the file `key` (in the current directory), once its
    /// batch created it, and completes the file after its last extent; writes nothing when
    /// the file is not landed (it was skipped, or a failure came before `entry`).
    /// Writes the extent `data` at `at` of the shared file `key` (from the archive file
    /// where `from` gives its place there), checking its digest where `check` gives its
    /// message's offset and stated digest.
    fn extent(
        &mut self,
        key: u64,
        at: u64,
        data: &[u8],
        from: Option<(BorrowedFd<'_>, u64)>,
        check: Option<(u64, u64)>,
        entry: u64,
    ) -> Result<()> {
        if self.open.as_ref().is_none_or(|(open, ..)| *open != key) {
            self.open = None;
            let shared = self.shared;
            let Some(file) = shared.files.wait(key, entry, &shared.stop) else {
                return Ok(());
            };
            let fd = self.land.sync_lander().open_shared(&file)?;
            self.open = Some((key, file, fd));
        }
        let (_, file, fd) = self.open.as_ref().expect("opened above");
        let lander = self.land.sync_lander();
        if let Some(from) = from {
            let data = (from, data.len() as u64);
            frames::write_extent(lander, (file, fd), at, data, check, &mut self.piece)?;
        } else {
            if let Some((message, stated)) = check {
                if digest_differs(digest(data), stated) {
                    let path = lander.path(file.name());
                    return Err(frames::bad_digest("extent", message, path));
                }
            }
            lander.write_shared((file, fd), at, data)?;
        }
        if !self.shared.files.landed(key) {
            return Ok(());
        }
        let (_, file, fd) = self.open.take().expect("opened above");
        self.complete(&file, fd)
    }

    /// Completes `file`, removing it when that fails.
    fn complete(&mut self, file: &SharedFile, fd: OwnedFd) -> Result<()> {
        let land = self.land.sync_lander();
        let completed = land.complete_shared(file, fd);
        if completed.is_err() {
            let _ = file.remove(land.current(), || land.path(file.name()));
        }
        completed
    }

    /// Moves from the directory it is in to the end of `to` (the path from the root),
    /// leaving directories and creating (or merging into) others.
    pub(super) fn walk(&mut self, to: &[DirStep], shared: &Shared<'_>) -> Result<()> {
        let common = (self.at.iter().zip(to))
            .take_while(|(a, b)| **a == b.name)
            .count();
        while self.at.len() > common {
            self.land.leave_dir()?;
            self.at.pop();
        }
        for (i, dir) in to.iter().enumerate().skip(common) {
            let parent = i.checked_sub(1).map(|p| &to[p]);
            let _place = shared.crowds.join(crowd(parent, shared));
            enter(&mut self.land, dir, shared)?;
            self.at.push(dir.name.clone());
        }
        Ok(())
    }

    /// Notes whether the lander holds back work after `entry`'s (see `held`).
    fn note_held(&mut self, entry: u64) {
        match self.land.holds_back() {
            true => _ = self.held.get_or_insert(entry),
            false => self.held = None,
        }
    }

    /// Completes the lander's pending work and adds what it landed to the summary.
    pub(super) fn finish(mut self) {
        if let Err(e) = self.land.finish() {
            self.shared.fail((self.held.unwrap_or(u64::MAX), e));
        }
        let landed = self.land.summary();
        (self.shared.landed.lock().expect("no panics")).add_entries(&landed);
    }
}

/// The landers creating entries in `dir` (none: the root).
pub(super) fn crowd<'a>(dir: Option<&'a DirStep>, shared: &'a Shared<'_>) -> &'a Crowd {
    dir.map_or(&shared.top, |d| &d.crowd)
}

/// Creates (or merges into) the directory `dir` and enters it, noting it when it gets its
/// final mode or time at the end.
fn enter<L: Land>(land: &mut L, dir: &DirStep, shared: &Shared<'_>) -> Result<()> {
    let created = land.enter(&dir.entry())?;
    if let Some(node) = dir.node {
        shared
            .entered
            .lock()
            .expect("no panics")
            .push((node, created));
    }
    Ok(())
}

/// Moves to the batch's starting directory, then lands its entries.
fn land_batch<L: Land>(
    worker: &mut Worker<'_, L>,
    batch: &Batch<'_>,
) -> std::result::Result<(), Failure> {
    let shared = worker.shared;
    let (stop, progress) = (&shared.stop, shared.progress);
    let copy_from = match batch.source {
        Source::Mapped(mapped, Some(file)) => {
            populate_all_but_copied(mapped, batch);
            Some(file)
        }
        Source::Mapped(mapped, None) => {
            populate(&mapped[batch.span.clone()]);
            None
        }
        Source::Stream(_) => None,
    };
    let bytes = batch.source.bytes();
    let mut entry = batch.first;
    let fail = |entry: u64| move |e: Error| (entry, e);
    let walked = worker.walk(&batch.at, shared);
    walked.map_err(fail(worker.held.unwrap_or(entry)))?;
    worker.note_held(entry);
    // The directories from the root to the one the worker is in.
    let mut dirs: Vec<&DirStep> = batch.at.iter().collect();
    for op in &batch.ops {
        if entry >= stop.load(Relaxed) {
            return Ok(());
        }
        // What fails now is this entry's, or one the lander held back since `held`.
        let owner = worker.held.unwrap_or(entry);
        shared.cancel.check().map_err(fail(owner))?;
        // What creates an entry holds a place in its directory's crowd while it does.
        let creates = !matches!(op, Op::Leave | Op::Linked | Op::Extent(..));
        let _place = creates.then(|| shared.crowds.join(crowd(dirs.last().copied(), shared)));
        let land = &mut worker.land;
        let landed = match op {
            Op::Enter(dir) => {
                enter(land, dir, shared).map_err(fail(owner))?;
                worker.at.push(dir.name.clone());
                dirs.push(dir);
                Ok(0)
            }
            Op::Empty(dir) => land.empty_dir(&dir.entry()).map(|()| 0),
            Op::Leave => {
                land.leave_dir().map_err(fail(owner))?;
                worker.at.pop();
                dirs.pop();
                worker.note_held(entry);
                continue;
            }
            Op::Sparse(leaf, size, extents, key) => {
                (worker.create(*key, &leaf.entry(bytes), *size, *extents)).map(|()| 0)
            }
            // Not an entry: only its bytes count.
            Op::Extent(key, at, range, check) => {
                let data = &bytes[range.clone()];
                let from = copy_from.filter(|_| copied(range));
                let from = from.map(|(fd, base)| (fd, base + range.start as u64));
                // `EXTENT`, at, len: 13 bytes before the data.
                let check = check.then(|| (range.start as u64 - 13, stated_digest(bytes, range)));
                (worker.extent(*key, *at, data, from, check, entry)).map_err(fail(owner))?;
                progress.add_bytes(data.len() as u64);
                worker.note_held(entry);
                continue;
            }
            Op::File(leaf, range, check) => {
                let data = &bytes[range.clone()];
                let file = leaf.entry(bytes);
                let landed = match (copy_from.filter(|_| copied(range)), check) {
                    (Some(from), true) => {
                        // `FILE`, name, 0, size: 6 bytes and the name before the data.
                        let message = (range.start - 6 - file.name.len()) as u64;
                        let from = (from.0, from.1 + range.start as u64);
                        let data = (from, data.len() as u64, stated_digest(bytes, range));
                        frames::land_checked(land, &file, data, message, &mut worker.piece)
                    }
                    (Some((fd, base)), false) => {
                        let content = Content::File {
                            fd,
                            offset: base + range.start as u64,
                            len: data.len() as u64,
                            mapped: Some(data),
                        };
                        land.file(&file, content)
                    }
                    (None, _) => land.file(&file, Content::Bytes(data)),
                };
                landed.map(|()| data.len() as u64)
            }
            Op::Symlink(leaf, target) => {
                (land.symlink(&leaf.entry(bytes), &bytes[target.clone()])).map(|()| 0)
            }
            Op::Special(leaf, device) => land.special(&leaf.entry(bytes), *device).map(|()| 0),
            // Made at the end (see `Shared::link`), where it is counted.
            Op::Linked => {
                entry += 1;
                continue;
            }
        };
        progress.add_entry(landed.map_err(fail(owner))?);
        worker.note_held(entry);
        entry += 1;
    }
    Ok(())
}

/// The files several batches land (see [`SharedFile`]), by key (the planner's number of
/// the entry): a batch with an extent of one waits until the batch with its entry created
/// it (that one is being landed already, or is taken once earlier ones are: see
/// `Queued::pick`), and the lander that lands its last extent completes it.
#[derive(Default)]
pub(super) struct SharedFiles {
    files: Mutex<HashMap<u64, Landing>>,
    changed: Condvar,
}

/// A shared file's landing.
pub(super) enum Landing {
    /// Created in the directory at `at` (names from the root), with `left` extents to land.
    Open {
        file: Arc<SharedFile>,
        at: Vec<Name>,
        left: u32,
    },
    /// Not landed (its name existed and is kept, or its creation failed).
    Gone,
}

impl SharedFiles {
    pub(super) fn created(&self, key: u64, file: &Arc<SharedFile>, at: &[Name], left: u32) {
        let (file, at) = (file.clone(), at.to_vec());
        self.set(key, Landing::Open { file, at, left });
    }

    pub(super) fn gone(&self, key: u64) {
        self.set(key, Landing::Gone);
    }

    fn set(&self, key: u64, landing: Landing) {
        self.files.lock().expect("no panics").insert(key, landing);
        self.changed.notify_all();
    }

    /// The file `key` once created; `None` when it is not landed, or once a failure at or
    /// before `entry` (the extent's) stops landing.
    pub(super) fn wait(&self, key: u64, entry: u64, stop: &AtomicU64) -> Option<Arc<SharedFile>> {
        let mut files = self.files.lock().expect("no panics");
        loop {
            if entry >= stop.load(Relaxed) {
                return None;
            }
            match files.get(&key) {
                Some(Landing::Open { file, .. }) => return Some(file.clone()),
                Some(Landing::Gone) => return None,
                None => files = self.changed.wait(files).expect("no panics"),
            }
        }
    }

    /// One more extent of the file `key` landed: true when it was the last one.
    pub(super) fn landed(&self, key: u64) -> bool {
        let mut files = self.files.lock().expect("no panics");
        let Some(Landing::Open { left, .. }) = files.get_mut(&key) else {
            unreachable!("an extent lands in an open file");
        };
        *left -= 1;
        let last = *left == 0;
        if last {
            files.remove(&key);
        }
        last
    }

    /// A failure came: the waiting landers look at the stop again.
    pub(super) fn wake(&self) {
        let _held = self.files.lock().expect("no panics");
        self.changed.notify_all();
    }

    /// The files created and not completed, with their directories.
    pub(super) fn unfinished(&self) -> Vec<(Vec<Name>, Arc<SharedFile>)> {
        let files = self.files.lock().expect("no panics");
        (files.values())
            .filter_map(|landing| match landing {
                Landing::Open { file, at, .. } => Some((at.clone(), file.clone())),
                Landing::Gone => None,
            })
            .collect()
    }
}

/// The directory at `names` below `root` (`None`: the root), each opened without following
/// a symlink.
pub(super) fn open_path(root: &OwnedFd, names: &[Name]) -> rustix::io::Result<Option<OwnedFd>> {
    let mut dir: Option<OwnedFd> = None;
    for name in names {
        let at = dir.as_ref().map_or(root.as_fd(), |d| d.as_fd());
        dir = Some(openat(at, &name[..], DIR_HANDLE_FLAGS, Mode::empty())?);
    }
    Ok(dir)
}

/// Whether a file with content at `range` of a mapped archive is copied from the archive
/// file (see [`COPY_FROM`]).
pub(super) fn copied(range: &Range<usize>) -> bool {
    range.len() >= COPY_FROM
}

/// The digest a version 2 `FILE` or `EXTENT` states for its data at `range` of `bytes`:
/// the 8 bytes after it.
fn stated_digest(bytes: &[u8], range: &Range<usize>) -> u64 {
    let stated = &bytes[range.end..range.end + 8];
    u64::from_le_bytes(stated.try_into().expect("8 bytes"))
}

/// Maps in the pages of `batch`, a part of the mapped archive `mapped`, except the content
/// of files copied from the archive file: one `madvise` per stretch between two of them.
fn populate_all_but_copied(mapped: &[u8], batch: &Batch<'_>) {
    let mut from = batch.span.start;
    for op in &batch.ops {
        if let Op::File(_, range, _) | Op::Extent(_, _, range, _) = op {
            if copied(range) {
                populate(&mapped[from..range.start]);
                from = range.end;
            }
        }
    }
    populate(&mapped[from..batch.span.end]);
}
