//! What a `Copier` does with a regular file: a link to an earlier name's copy, or the
//! content by shared extents, `copy_file_range` or memory; a large one in chunks
//! (`chunked.rs`).

use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use rustix::fs::{
    ftruncate, ioctl_ficlone, linkat, openat, seek, unlinkat, AtFlags, Mode, SeekFrom, Statx,
};
use rustix::io::{pwrite, Errno};

use super::chunked::LARGE;
use super::{Copier, DestFd, Pair};
use crate::compare::inode_key;
use crate::copy::{copy_range, read_chunks};
use crate::cp::Reflink;
use crate::error::{Error, Result, TreePath};
use crate::interrupt::retry;
use crate::land::restore::{Apply, Existing, Target};
use crate::land::sync::{create_at, replace, Made};
use crate::sys::{CREATE_FLAGS, FILE_FLAGS};
use crate::tree::Xattrs;

/// The buffer of a copy through memory.
const BUFFER: usize = 1 << 20;

/// What became of a regular file.
pub(super) enum Filed {
    /// It existed and was skipped.
    Skipped,
    /// Copied (or linked), replacing an entry or not.
    Copied { replaced: bool },
    /// Left to the chunks of a `Chunked` copy, which count and report it.
    Chunked,
}

impl Copier<'_> {
    /// Copies the regular file `at`, or links to the copy of an earlier name of it, or
    /// leaves a large one to chunk jobs (`removed`: a directory was removed for it).
    pub(super) fn copy_file(
        &mut self,
        at: &Pair<'_>,
        dest: &Arc<DestFd>,
        stat: &Statx,
        apply: &Apply,
        existing: Existing,
        removed: bool,
    ) -> Result<Filed> {
        // The links stay locked while a multi-link file is created and filled, so that no
        // other name of it links to a name not yet (or no longer) its.
        let shared = self.shared;
        let links = shared
            .linked(stat)
            .then(|| shared.links.lock().expect("no panics"));
        if let Some(earlier) = links
            .as_ref()
            .and_then(|links| links.get(&inode_key(stat)).cloned())
        {
            drop(links);
            let (dir, name) = earlier;
            let dir = self.here(&dir)?;
            let link = |at: BorrowedFd<'_>, new: &[u8]| {
                linkat(&**dir, &name[..], at, new, AtFlags::empty())
            };
            let made = self.make(at, dest, &Apply::default(), existing, "linkat", link)?;
            self.counts.hard_links += u64::from(made.is_some());
            return Ok(match made {
                None => Filed::Skipped,
                Some(replaced) => Filed::Copied { replaced },
            });
        }
        let src_path = || at.src_path(shared);
        let src = match self.opened.take() {
            Some(opened) => opened,
            None => openat(at.src, at.src_name, FILE_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open", src_path(), e))?,
        };
        let mode = Mode::from_raw_mode(apply.create_mode());
        let path = || at.dest_path(shared);
        let place = at.crowd.map(|crowd| shared.crowds.join(crowd));
        let made = create_at(
            dest.as_fd(),
            at.name,
            existing,
            &mut self.temp,
            "openat",
            path,
            |d, n| openat(d, n, CREATE_FLAGS, mode),
        );
        drop(place);
        let (fd, replacing) = match made? {
            Made::Here(fd) => (fd, false),
            Made::Replacing(fd) => (fd, true),
            Made::Skipped => return Ok(Filed::Skipped),
        };
        if matches!(self.wide, super::wide::Step::Make(_)) {
            let name = if replacing {
                self.temp.clone()
            } else {
                at.name.to_vec()
            };
            if let Err(e) = self.made(&fd, &name, stat, at) {
                let _ = unlinkat(dest.as_fd(), &name[..], AtFlags::empty());
                return Err(e);
            }
            return Ok(Filed::Chunked);
        }
        // A large file with one name (the links stay locked only while one thread fills
        // it) goes to chunk jobs, unless its extents can be shared at once.
        let size = stat.stx_size;
        let chunk = links.is_none() && size >= LARGE;
        let content = match chunk {
            true => self.clone_file(src.as_fd(), fd.as_fd(), size, &path),
            false => self.copy_content(src.as_fd(), fd.as_fd(), stat, &path),
        };
        if chunk && matches!(content, Ok(None)) {
            let name = if replacing { &self.temp[..] } else { at.name };
            let made = (fd, name.to_vec(), replacing || removed);
            return self
                .chunk(at, dest, src, made, stat, apply)
                .map(|()| Filed::Chunked);
        }
        let mut copied = 0;
        let done = content.map(|bytes| bytes.unwrap_or(0)).and_then(|bytes| {
            copied = bytes;
            self.read_xattrs(src.as_fd(), path)
        });
        let done = done.and_then(|()| {
            let xattrs = Xattrs(&self.xattrs.wire);
            let target = Target::Fd(fd.as_fd());
            (self.shared.policy).restore(target, apply, xattrs, &mut self.not_restored, path)
        });
        if let Err(e) = done {
            // No copy that is not whole stays (a replacement leaves the old file in
            // place); one cut short by a kill has no time yet, for `--update` to see.
            let name = if replacing { &self.temp[..] } else { at.name };
            let _ = unlinkat(dest.as_fd(), name, AtFlags::empty());
            return Err(e);
        }
        if replacing {
            replace(dest.as_fd(), &self.temp, at.name, path)?;
        }
        if let Some(mut links) = links {
            links.insert(inode_key(stat), (dest.clone(), at.name.into()));
        }
        #[cfg(test)]
        super::hooks::copied(&path());
        self.counts.files += 1;
        self.counts.bytes += copied;
        self.shared.progress.add_entry(0);
        Ok(Filed::Copied {
            replaced: replacing,
        })
    }

    /// Shares the extents of `src` (`size` bytes) with the new file `dest` where the
    /// filesystem can and [`Reflink`] lets it: `Some(size)` when done, `None` when the
    /// content must be copied.
    fn clone_file(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        size: u64,
        path: &dyn Fn() -> TreePath,
    ) -> Result<Option<u64>> {
        let always = self.cp().reflink == Reflink::Always;
        if !self.shared.no_clone.load(Relaxed) {
            match ioctl_ficlone(dest, src) {
                Ok(()) => {
                    self.shared.progress.add_bytes(size);
                    return Ok(Some(size));
                }
                Err(e) if always => return Err(Error::io("share extents (FICLONE)", path(), e)),
                Err(_) => self.shared.no_clone.store(true, Relaxed),
            }
        } else if always {
            let e = Errno::OPNOTSUPP;
            return Err(Error::io("share extents (FICLONE)", path(), e));
        }
        Ok(None)
    }

    /// Copies the content of `src` into the new file `dest`: shared extents where the
    /// filesystem can and may ([`Reflink`]), else the data ranges (holes stay holes); a
    /// file of size 0 is read to its end (a kernel file in /proc or /sys has content
    /// nonetheless). Returns the bytes copied.
    fn copy_content(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        stat: &Statx,
        path: &dyn Fn() -> TreePath,
    ) -> Result<Option<u64>> {
        let size = stat.stx_size;
        if size == 0 {
            return self.through_memory(src, dest, 0, u64::MAX, path).map(Some);
        }
        if let Some(size) = self.clone_file(src, dest, size, path)? {
            return Ok(Some(size));
        }
        let sparse = sparse(stat);
        self.copy_data(src, dest, 0..size, sparse, path)?;
        if sparse {
            ftruncate(dest, size).map_err(|e| Error::io("ftruncate", path(), e))?;
        }
        Ok(Some(size))
    }

    /// Copies what `src` has in `range` to the same offsets of `dest`; with `sparse`, only
    /// its data (found by `SEEK_DATA`/`SEEK_HOLE`: holes stay holes).
    pub(super) fn copy_data(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        range: Range<u64>,
        sparse: bool,
        path: &dyn Fn() -> TreePath,
    ) -> Result<()> {
        if !sparse {
            return self.copy_range(src, dest, range.start, range.end, path);
        }
        let mut at = range.start;
        while at < range.end {
            let data = match seek(src, SeekFrom::Data(at)) {
                Ok(data) if data < range.end => data,
                Ok(_) | Err(Errno::NXIO) => break,
                Err(e) => return Err(Error::io("lseek", path(), e)),
            };
            let hole =
                seek(src, SeekFrom::Hole(data)).map_err(|e| Error::io("lseek", path(), e))?;
            self.copy_range(src, dest, data, hole.min(range.end), path)?;
            at = hole;
        }
        Ok(())
    }

    /// Copies the bytes `start..end` of `src` to the same offsets of `dest` with
    /// `copy_file_range`, or by `pread` + `pwrite` where the kernel refuses it (between
    /// filesystems) or `--reflink=never` forbids sharing.
    fn copy_range(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        start: u64,
        end: u64,
        path: &dyn Fn() -> TreePath,
    ) -> Result<()> {
        let mut copied = 0;
        if !self.shared.no_range.load(Relaxed) {
            let progress = self.shared.progress;
            let len = end - start;
            let cancel = &self.shared.cp.cancel;
            let ranged = copy_range((src, start), (dest, Some(start)), len, path, cancel, |n| {
                progress.add_bytes(n)
            })?;
            if !ranged.refused {
                // All of it, or the file shrank since it was stated.
                return Ok(());
            }
            self.shared.no_range.store(true, Relaxed);
            copied = ranged.copied;
        }
        self.through_memory(src, dest, start + copied, end - start - copied, path)?;
        Ok(())
    }
}

/// Whether the file stated as `stat` has holes: fewer allocated blocks than its size needs.
pub(super) fn sparse(stat: &Statx) -> bool {
    stat.stx_blocks.saturating_mul(512) < stat.stx_size
}

impl Copier<'_> {
    fn through_memory(
        &mut self,
        src: BorrowedFd<'_>,
        dest: BorrowedFd<'_>,
        from: u64,
        len: u64,
        path: &dyn Fn() -> TreePath,
    ) -> Result<u64> {
        if self.buf.is_empty() {
            self.buf = vec![0; BUFFER];
        }
        let (progress, mut to) = (self.shared.progress, from);
        let cancel = &self.shared.cp.cancel;
        read_chunks(src, from, len, &mut self.buf, &path(), cancel, |chunk| {
            let mut rest = chunk;
            while !rest.is_empty() {
                let n = retry(cancel, || pwrite(dest, rest, to))
                    .map_err(|e| Error::io("write", path(), e))?;
                rest = &rest[n..];
                to += n as u64;
            }
            progress.add_bytes(chunk.len() as u64);
            cancel.check()
        })
    }
}
