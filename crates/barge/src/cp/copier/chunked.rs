//! A large file copied in chunks by at most [`WRITERS`] threads at once: created and sized
//! once, each of its jobs taking the next chunk and copying it at its own offsets until none
//! is left; the last reference to go (the last job to finish) restores the metadata, once,
//! after all data, or removes the copy when a chunk failed or the copy stopped before every
//! chunk ran.
//!
//! A job may run on any thread: one whose fd table lacks the first writer's fds (see
//! `sys::thread::go_solo`) opens the source and the copy by name from its own fds of their
//! directories, never following a symlink, and writes only when each is the file the first
//! writer opened (same device and inode).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use rustix::fs::{fchmod, ftruncate, statx, unlinkat, AtFlags, Mode, OFlags, Statx, StatxFlags};
use rustix::io::Errno;

use super::content::sparse;
use super::{dest_full, Copier, DestFd, Here, Job, Pair, Shared};
use crate::compare::{inode_key, InodeKey};
use crate::cp::Change;
use crate::error::{Error, Result, TreePath};
use crate::land::restore::{Apply, NotRestored, Target};
use crate::land::sync::replace;
use crate::sys::thread::ThreadFd;
use crate::sys::{reopen, CREATE_FLAGS, FILE_FLAGS};
use crate::tree::Xattrs;
use crate::walk::parallel::WalkState;

/// Files of this size or more are copied in chunks (docs/BENCHMARKS.md, "cp below the
/// directory").
pub(super) const LARGE: u64 = 128 << 20;
/// The size of a chunk.
pub(super) const CHUNK: u64 = 64 << 20;
/// Threads copying chunks of one file at once, at most: the file system holds the file's
/// inode lock while it writes, so more only wait on it (docs/BENCHMARKS.md, "cp below the
/// directory").
pub(crate) const WRITERS: u64 = 2;

/// Opens the copy again for writing: never through a symlink.
const WRITE_FLAGS: OFlags = CREATE_FLAGS.difference(OFlags::CREATE.union(OFlags::EXCL));

/// A file being copied in chunks.
pub(crate) struct Chunked<'a> {
    shared: &'a Shared<'a>,
    /// The source and the copy, open on the first writer's thread; their inodes, and the
    /// source's name in the directory its jobs run in and its path.
    src: ThreadFd,
    file: ThreadFd,
    src_key: InodeKey,
    file_key: InodeKey,
    src_name: Vec<u8>,
    src_path: TreePath,
    /// The copy's directory, its name there (a replacement's temporary name) and its final
    /// name.
    dir: Arc<DestFd>,
    name: Vec<u8>,
    final_name: Vec<u8>,
    /// It replaces an entry.
    replaced: bool,
    path: TreePath,
    apply: Apply,
    xattrs: Vec<u8>,
    size: u64,
    sparse: bool,
    /// The next chunk a job takes.
    next: AtomicU64,
    /// Chunks not copied yet.
    left: AtomicU64,
    /// Threads copying a chunk of it now.
    #[cfg(test)]
    writing: std::sync::atomic::AtomicUsize,
    /// The first failure of a chunk.
    failed: Mutex<Option<Error>>,
}

impl Copier<'_> {
    /// Sizes the new file `made` (its fd, its name in `dest`, whether it replaces an entry)
    /// as the source `src` of `at` (stated as `stat`) and leaves [`WRITERS`] jobs (fewer for
    /// fewer chunks) that copy its chunks.
    pub(super) fn chunk(
        &mut self,
        at: &Pair<'_>,
        dest: &Arc<DestFd>,
        src: OwnedFd,
        (file, name, replaced): (OwnedFd, Vec<u8>, bool),
        stat: &Statx,
        apply: &Apply,
    ) -> Result<()> {
        let path = at.dest_path(self.shared);
        let mut apply = *apply;
        let sized = ftruncate(&file, stat.stx_size)
            .map_err(|e| Error::io("ftruncate", path.clone(), e))
            .and_then(|()| writable(&file, &mut apply, || path.clone()))
            .and_then(|()| self.read_xattrs(src.as_fd(), || path.clone()));
        let file_key = sized.and_then(|()| {
            statx(&file, "", AtFlags::EMPTY_PATH, StatxFlags::INO)
                .map(|st| inode_key(&st))
                .map_err(|e| Error::io("statx", path.clone(), e))
        });
        let file_key = match file_key {
            Ok(key) => key,
            Err(e) => {
                let _ = unlinkat(&**dest, &name[..], AtFlags::empty());
                return Err(e);
            }
        };
        let chunks = stat.stx_size.div_ceil(CHUNK);
        let file = Arc::new(Chunked {
            shared: self.shared,
            src: ThreadFd::new(src),
            file: ThreadFd::new(file),
            src_key: inode_key(stat),
            file_key,
            src_name: at.src_name.to_vec(),
            src_path: at.src_path(self.shared),
            dir: dest.clone(),
            name,
            final_name: at.name.to_vec(),
            replaced,
            path,
            apply,
            xattrs: self.xattrs.wire.clone(),
            size: stat.stx_size,
            sparse: sparse(stat),
            next: AtomicU64::new(0),
            left: AtomicU64::new(chunks),
            #[cfg(test)]
            writing: Default::default(),
            failed: Mutex::new(None),
        });
        let jobs = chunks.min(WRITERS);
        // A job's cost: the bytes it copies if the jobs share the chunks evenly.
        let cost = super::job_cost(stat.stx_size.div_ceil(jobs));
        for _ in 0..jobs {
            self.jobs.push((Job::Chunks(file.clone()), cost));
        }
        Ok(())
    }

    /// Copies the next chunk of `file` not taken yet, and the next, until none is left (or
    /// one failed, or the copy is stopping). `src_dir` is the source's directory, where the
    /// source is opened again by a thread without the first writer's fds.
    pub(super) fn copy_chunks(
        &mut self,
        file: &Chunked<'_>,
        src_dir: Option<BorrowedFd<'_>>,
    ) -> WalkState {
        let cancel = &self.shared.cp.cancel;
        let mut fds = None;
        loop {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            if file.failed.lock().expect("no panics").is_some() {
                return WalkState::Continue;
            }
            let start = file.next.fetch_add(1, Relaxed).saturating_mul(CHUNK);
            if start >= file.size {
                return WalkState::Continue;
            }
            let range = start..(start + CHUNK).min(file.size);
            let copied = match &fds {
                Some(fds) => Ok(fds),
                None => file.here(self, src_dir).map(|opened| &*fds.insert(opened)),
            }
            .and_then(|(src, dest)| self.copy_chunk(file, src.as_fd(), dest.as_fd(), range));
            let Err(e) = copied else {
                file.left.fetch_sub(1, AcqRel);
                continue;
            };
            let full = dest_full(&e);
            file.failed.lock().expect("no panics").get_or_insert(e);
            if full {
                self.shared.summary.lock().expect("no panics").stopped = true;
            }
            return match full || cancel.is_cancelled() {
                true => WalkState::Quit,
                false => WalkState::Continue,
            };
        }
    }

    /// Copies the chunk `range` of `file` from `src` into `dest`, its fds here.
    fn copy_chunk(
        &mut self,
        file: &Chunked<'_>,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        range: std::ops::Range<u64>,
    ) -> Result<()> {
        #[cfg(test)]
        let _writing = hooks::Writing::new(&file.writing, self.shared.cp.dwell);
        let path = || file.path.clone();
        #[cfg(test)]
        let injected = hooks::injected(&file.path, &range);
        let copied = self.copy_data(src, dest, range, file.sparse, &path);
        #[cfg(test)]
        let copied = copied.and(injected);
        #[cfg(test)]
        if copied.is_ok() {
            hooks::copied(&file.path);
        }
        copied
    }
}

/// `fd` where the calling thread may use it, else the file `key` opened here as `name` in
/// `dir` with `flags` (`ESTALE`: another file has that name now); errors name `path`.
fn here<'f>(
    fd: &'f ThreadFd,
    dir: Option<BorrowedFd<'_>>,
    (name, flags, key): (&[u8], OFlags, InodeKey),
    path: &TreePath,
) -> Result<Here<'f>> {
    if let Some(fd) = fd.get() {
        return Ok(Here::Theirs(fd));
    }
    let dir = dir.ok_or_else(|| Error::io("reopen", path.clone(), Errno::BADF))?;
    match reopen(dir, name, flags, |stat| inode_key(stat) == key) {
        Ok(fd) => Ok(Here::Mine(fd)),
        Err(Errno::STALE) => Err(Error::io(
            "reopen a replaced file",
            path.clone(),
            Errno::STALE,
        )),
        Err(e) => Err(Error::io("reopen", path.clone(), e)),
    }
}

/// Makes the copy (created with the source's mode) a file its owner may open for writing
/// again on another thread, until the last writer gives it its mode (`apply.chmod`).
fn writable(file: &OwnedFd, apply: &mut Apply, path: impl Fn() -> TreePath) -> Result<()> {
    if apply.create_mode() & 0o200 != 0 {
        return Ok(());
    }
    apply.chmod = true;
    fchmod(file, Mode::from_raw_mode(0o600)).map_err(|e| Error::io("fchmod", path(), e))
}

impl Chunked<'_> {
    /// The source (in `src_dir`) and the copy as the calling thread may use them.
    fn here<'f>(
        &'f self,
        copier: &mut Copier<'_>,
        src_dir: Option<BorrowedFd<'_>>,
    ) -> Result<(Here<'f>, Here<'f>)> {
        let src = (&self.src_name[..], FILE_FLAGS, self.src_key);
        let src = here(&self.src, src_dir, src, &self.src_path)?;
        let dest = (&self.name[..], WRITE_FLAGS, self.file_key);
        let file = match self.file.get() {
            Some(fd) => Here::Theirs(fd),
            None => {
                let dir = copier.here(&self.dir)?;
                #[cfg(test)]
                hooks::swap(dir.as_fd(), &self.name, &self.path);
                here(&self.file, Some(dir.as_fd()), dest, &self.path)?
            }
        };
        Ok((src, file))
    }

    /// The copy's directory as the calling thread may use it.
    fn dir_here(&self) -> Result<Here<'_>> {
        (self.dir.here()).map_err(|e| Error::io("reopen directory", self.path.clone(), e))
    }

    /// Restores the metadata of the whole copy and gives it its final name.
    fn finish(&self, skipped: &mut NotRestored) -> Result<()> {
        let path = || self.path.clone();
        let dir = self.dir_here()?;
        let dest = (&self.name[..], WRITE_FLAGS, self.file_key);
        let file = here(&self.file, Some(dir.as_fd()), dest, &self.path)?;
        let target = Target::Fd(file.as_fd());
        let xattrs = Xattrs(&self.xattrs);
        (self.shared.policy).restore(target, &self.apply, xattrs, skipped, path)?;
        if self.name != self.final_name {
            replace(dir.as_fd(), &self.name, &self.final_name, path)?;
        }
        Ok(())
    }
}

impl Drop for Chunked<'_> {
    fn drop(&mut self) {
        let shared = self.shared;
        let failed = self.failed.get_mut().expect("no panics").take();
        let mut skipped = NotRestored::default();
        let done = match failed {
            Some(e) => Err(Some(e)),
            None if self.left.load(Acquire) > 0 => Err(None),
            None => self.finish(&mut skipped).map_err(Some),
        };
        let mut summary = shared.summary.lock().expect("no panics");
        summary.not_restored.add(&skipped);
        match done {
            Ok(()) => {
                summary.counts.files += 1;
                summary.counts.bytes += self.size;
                summary.counts.replaced += u64::from(self.replaced);
                drop(summary);
                shared.progress.add_entry(0);
                if shared.cp.changes {
                    let change = match self.replaced {
                        true => Change::Replace,
                        false => Change::Create,
                    };
                    shared.report.change(change, &self.path);
                }
            }
            // No copy that is not whole stays under its name (nor its temporary one).
            Err(error) => {
                drop(summary);
                // Only while the name is still the copy's (another file may have taken it).
                if let Ok(dir) = self.dir_here() {
                    let stat = statx(
                        &dir,
                        &self.name[..],
                        AtFlags::SYMLINK_NOFOLLOW,
                        StatxFlags::INO,
                    );
                    if stat.is_ok_and(|st| inode_key(&st) == self.file_key) {
                        let _ = unlinkat(&dir, &self.name[..], AtFlags::empty());
                    }
                }
                if let Some(e) = error {
                    shared.error(e);
                }
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod hooks {
    use std::ops::Range;
    use std::os::fd::BorrowedFd;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Mutex;
    use std::thread::ThreadId;

    use rustix::fs::{openat, renameat, Mode};
    use rustix::io::Errno;

    use crate::error::{Error, Result, TreePath};
    use crate::interrupt::Cancel;

    pub(crate) use super::WRITERS;

    /// A copy whose path ends with the name fails, as on a full file system, in the chunk
    /// that holds the offset (after copying it), or cancels the token there.
    pub(crate) static FAIL_AT: Mutex<Vec<(&str, u64, Option<Cancel>)>> = Mutex::new(Vec::new());

    /// The paths of the files (and chunks) copied, with the threads that copied them.
    pub(crate) static COPIED_BY: Mutex<Vec<(String, ThreadId)>> = Mutex::new(Vec::new());

    /// The most threads seen copying chunks of one file at once, by any test.
    pub(crate) static MOST_WRITERS: AtomicUsize = AtomicUsize::new(0);

    /// A thread copying a chunk of a file (counted in its `writing`) until dropped; it keeps
    /// its place `dwell` first (a test: so that writers would pile up without the cap).
    pub(super) struct Writing<'w>(&'w AtomicUsize);

    impl<'w> Writing<'w> {
        pub(super) fn new(writing: &'w AtomicUsize, dwell: std::time::Duration) -> Self {
            let n = writing.fetch_add(1, SeqCst) + 1;
            MOST_WRITERS.fetch_max(n, SeqCst);
            std::thread::sleep(dwell);
            Writing(writing)
        }
    }

    impl Drop for Writing<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, SeqCst);
        }
    }

    /// A file of this name, once copied, waits (10 s at most) until another thread has
    /// copied a file of its directory: a test of who copies what needs no race.
    pub(crate) const HELD: &str = "held-for-another-thread";

    /// Notes that this thread copied `path` (or a chunk of it).
    pub(crate) fn copied(path: &TreePath) {
        let by = std::thread::current().id();
        let path = path.to_string();
        COPIED_BY.lock().unwrap().push((path.clone(), by));
        let Some(dir) = path.strip_suffix(HELD) else {
            return;
        };
        let other = |(p, t): &(String, ThreadId)| p.starts_with(dir) && *t != by;
        for _ in 0..10_000 {
            if COPIED_BY.lock().unwrap().iter().any(other) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A copy whose path ends with the name has another file (of this content) renamed over
    /// it just before a thread without the first writer's fds opens it by name; noted in
    /// [`COPIED_BY`] as that thread's (so that a [`HELD`] file waits no longer).
    pub(crate) static SWAP_AT: Mutex<Vec<&str>> = Mutex::new(Vec::new());

    /// The content of a file [`SWAP_AT`] renames over a copy.
    pub(crate) const SWAPPED_IN: &[u8] = b"swapped in";

    /// Does what [`SWAP_AT`] asks for the copy `name` in `dir`, at `path`.
    pub(super) fn swap(dir: BorrowedFd<'_>, name: &[u8], path: &TreePath) {
        let at = SWAP_AT.lock().unwrap();
        if !at.iter().any(|n| path.0.ends_with(n.as_bytes())) {
            return;
        }
        let mode = Mode::from_raw_mode(0o644);
        let new = openat(dir, "swapped-in", crate::sys::CREATE_FLAGS, mode).unwrap();
        rustix::io::pwrite(&new, SWAPPED_IN, 0).unwrap();
        renameat(dir, "swapped-in", dir, name).unwrap();
        let by = std::thread::current().id();
        COPIED_BY.lock().unwrap().push((path.to_string(), by));
    }

    /// The failure [`FAIL_AT`] asks for in the chunk `range` of `path`, if any.
    pub(super) fn injected(path: &TreePath, range: &Range<u64>) -> Result<()> {
        let at = FAIL_AT.lock().unwrap();
        let hit = at
            .iter()
            .find(|(name, offset, _)| path.0.ends_with(name.as_bytes()) && range.contains(offset));
        match hit {
            Some((_, _, Some(cancel))) => {
                cancel.cancel();
                Ok(())
            }
            Some((_, _, None)) => Err(Error::io("copy_file_range", path.clone(), Errno::NOSPC)),
            None => Ok(()),
        }
    }
}
