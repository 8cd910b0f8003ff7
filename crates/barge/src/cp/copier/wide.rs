//! A large file copied by several processes ([`Part::Rank`] leaves it to them, see
//! [`Cp::make_wide`]): one makes it (created and sized once, or found unchanged by
//! `--update`), each copies its ranges into it by name, then the one that made it restores
//! its metadata once, after all ranges, and gives it its final name (or removes it when a
//! range failed). A copy cut short keeps no time of its source, for `--update` to redo it.

use std::ffi::OsStr;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{ftruncate, openat, statx, unlinkat, AtFlags, Mode, OFlags, Statx};

use super::content::sparse;
use super::{Copier, Pair};
use crate::cp::{Cp, CpReport, CpSummary, Linked, Part};
use crate::error::{Error, Result, TreePath};
use crate::land::sync::replace;
use crate::sys::FILE_FLAGS;
use crate::tree::{Entry, Kind, Meta, Xattrs, STATX_MASK};
use crate::Progress;

/// Files of this size or more are copied by several processes (a large file, as one
/// process copies in chunks), in ranges of [`WIDE_CHUNK`] bytes.
pub const WIDE: u64 = super::chunked::LARGE;
/// The size of a range of a wide copy.
pub const WIDE_CHUNK: u64 = super::chunked::CHUNK;

/// What a [`Copier`] does with a large file it meets in a step of a wide copy.
#[derive(Default)]
pub(crate) enum Step {
    /// Copies it as always.
    #[default]
    Whole,
    /// Creates and sizes it; notes the name it was created under.
    Make(Option<Vec<u8>>),
    /// Restores its metadata on the copy made under this name (whole: every range was
    /// copied), then renames it to its own name; or removes it.
    Finish(Vec<u8>, bool),
}

impl Copier<'_> {
    /// Whether [`Part::Rank`] leaves the file stated as `stat` to a wide copy: it does with
    /// a file of one name of [`WIDE`] bytes or more, when there is more than one process.
    pub(super) fn leaves_wide(&self, at: &Pair<'_>, stat: &Statx) -> bool {
        let wide = matches!(self.cp().part, Part::Rank { ranks, .. } if ranks > 1)
            && stat.stx_nlink == 1
            && stat.stx_size >= WIDE;
        if wide {
            let name = ((at.path)(), stat.stx_size);
            self.shared.wide.lock().expect("no panics").push(name);
        }
        wide
    }

    /// [`Step::Make`]: sizes the new file `file` (named `name` in its directory).
    pub(super) fn made(
        &mut self,
        file: &OwnedFd,
        name: &[u8],
        stat: &Statx,
        at: &Pair<'_>,
    ) -> Result<()> {
        let path = || at.dest_path(self.shared);
        ftruncate(file, stat.stx_size).map_err(|e| Error::io("ftruncate", path(), e))?;
        self.wide = Step::Make(Some(name.to_vec()));
        Ok(())
    }

    /// [`Step::Finish`] of the copy of `at` (stated as `stat`) made as `name`.
    pub(super) fn finish_wide(
        &mut self,
        at: &Pair<'_>,
        stat: &Statx,
        name: &[u8],
        whole: bool,
    ) -> Result<()> {
        let (dest, shared) = (at.dest.expect("not a dry run"), self.shared);
        let path = || at.dest_path(shared);
        let finished = whole.then(|| {
            let src = openat(at.src, at.src_name, FILE_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open", at.src_path(shared), e))?;
            let file = openat(&**dest, name, FILE_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open", path(), e))?;
            self.read_xattrs(src.as_fd(), path)?;
            let entry = Entry::new(at.name, Kind::File, Meta::of_statx(stat));
            let apply = self.apply(&entry, at.setgid);
            let xattrs = Xattrs(&self.xattrs.wire);
            let target = crate::land::restore::Target::Fd(file.as_fd());
            (self.shared.policy).restore(target, &apply, xattrs, &mut self.not_restored, path)?;
            if name != at.name {
                replace(dest.as_fd(), name, at.name, path)?;
            }
            Ok(())
        });
        match finished {
            Some(Ok(())) => {
                self.counts.files += 1;
                self.counts.bytes += stat.stx_size;
                self.counts.replaced += u64::from(name != at.name);
                self.shared.progress.add_entry(0);
                Ok(())
            }
            // No copy that is not whole stays under its name (nor its temporary one); the
            // range that failed was told by the process that copied it.
            failed => {
                let _ = unlinkat(&**dest, name, AtFlags::empty());
                failed.unwrap_or(Ok(()))
            }
        }
    }
}

impl Cp {
    /// Makes the copy of the large file at `path` below `src` (one of those
    /// [`Linked::take_wide`] gives) in `dest`: created and sized, its data left to
    /// [`Cp::copy_wide`] on every process; the name it was made under (a replacement's is
    /// temporary), or `None` where `--update` found it unchanged (counted here).
    #[allow(clippy::too_many_arguments)]
    pub fn make_wide(
        &self,
        src: &Path,
        dest: &Path,
        path: &[u8],
        linked: &Linked,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<(Option<Vec<u8>>, CpSummary)> {
        let mut made = None;
        let done = self.on_name(
            src,
            dest,
            path,
            linked,
            progress,
            report,
            Step::Make(None),
            &mut made,
        )?;
        Ok((made, done))
    }

    /// Copies the bytes `range` of the large file at `path` below `src` into its copy made
    /// as `name` (in the same directory below `dest`) by [`Cp::make_wide`].
    pub fn copy_wide(
        &self,
        src: &Path,
        dest: &Path,
        (path, name): (&[u8], &[u8]),
        range: std::ops::Range<u64>,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<()> {
        let linked = Linked::default();
        let shared = self.shared(
            src,
            dest,
            crate::tree::Owner::of_process(),
            &linked,
            progress,
            report,
        );
        let mut copier = Copier::new(&shared);
        let (dir, file) = split_path(path);
        let shown = || shared.dest_path(path);
        let src_dir = open_below(&shared.src, dir, || shared.src_path(dir))?;
        let dest_dir = open_below(&shared.dest, dir, || shared.dest_path(dir))?;
        let src_fd = openat(&src_dir, file, FILE_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open", shared.src_path(path), e))?;
        let stat = statx(&src_fd, "", AtFlags::EMPTY_PATH, STATX_MASK)
            .map_err(|e| Error::io("statx", shared.src_path(path), e))?;
        let flags = OFlags::WRONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dest_fd = openat(&dest_dir, name, flags, Mode::empty())
            .map_err(|e| Error::io("open", shown(), e))?;
        copier.copy_data(
            src_fd.as_fd(),
            dest_fd.as_fd(),
            range,
            sparse(&stat),
            &shown,
        )
    }

    /// Finishes the copy of the large file at `path` below `src` made as `name` by
    /// [`Cp::make_wide`]: its metadata restored and its own name given, when `whole` (every
    /// range copied); else removed.
    #[allow(clippy::too_many_arguments)]
    pub fn finish_wide(
        &self,
        src: &Path,
        dest: &Path,
        (path, name): (&[u8], &[u8]),
        whole: bool,
        linked: &Linked,
        progress: &Progress,
        report: &dyn CpReport,
    ) -> Result<CpSummary> {
        let step = Step::Finish(name.to_vec(), whole);
        self.on_name(src, dest, path, linked, progress, report, step, &mut None)
    }

    /// Takes `step` on the file at `path` below `src`, as [`Cp::run_links`] copies a name;
    /// the name [`Step::Make`] made goes to `made`.
    #[allow(clippy::too_many_arguments)]
    fn on_name(
        &self,
        src: &Path,
        dest: &Path,
        path: &[u8],
        linked: &Linked,
        progress: &Progress,
        report: &dyn CpReport,
        step: Step,
        made: &mut Option<Vec<u8>>,
    ) -> Result<CpSummary> {
        let shared = self.shared(
            src,
            dest,
            crate::tree::Owner::of_process(),
            linked,
            progress,
            report,
        );
        let mut copier = Copier::new(&shared);
        copier.wide = step;
        let src_fd = open_below(&shared.src, b"", || shared.src_path(b""))?;
        let dest_fd = open_below(&shared.dest, b"", || shared.dest_path(b""))?;
        if let Err(e) = copier.copy_below(src_fd.as_fd(), dest_fd.as_fd(), path) {
            copier.failed(e);
        }
        if let Step::Make(name) = std::mem::take(&mut copier.wide) {
            *made = name;
        }
        drop(copier);
        Ok(shared.summary.into_inner().expect("no panics"))
    }
}

/// `path`'s directory part and its last name.
fn split_path(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    }
}

/// The directory `dir` below `root` (a path as given), opened name by name, never following
/// a symlink below the root.
fn open_below(root: &[u8], dir: &[u8], shown: impl Fn() -> TreePath) -> Result<OwnedFd> {
    let error = |e| Error::io("open directory", shown(), e);
    let root = OsStr::from_bytes(root);
    let mut fd =
        openat(rustix::fs::CWD, root, crate::sys::DIR_FLAGS, Mode::empty()).map_err(error)?;
    for part in dir.split(|&b| b == b'/').filter(|part| !part.is_empty()) {
        fd = openat(&fd, part, crate::sys::DIR_FLAGS, Mode::empty()).map_err(error)?;
    }
    Ok(fd)
}
