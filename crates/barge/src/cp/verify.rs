//! `barge cp --verify`: the copy read back and compared with its source. The parallel walker
//! lists SRC again; each directory's state is its copy's fd, each regular file is read on
//! both sides and compared byte for byte (a comparison of content hashes would read the
//! same bytes and prove less), each symlink's target and each other entry's type checked.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use rustix::fs::{openat, readlinkat, statx, AtFlags, Mode, Statx, StatxFlags, CWD};
use rustix::io::{pread, Errno};

use super::{open_parent, split, Cp, CpReport};
use crate::error::{Error, Result, TreePath};
use crate::interrupt::{retry, Cancel};
use crate::sys::{DIR_FLAGS, FILE_FLAGS};
use crate::tree::{Entry, Kind};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};

/// What each read compares.
const BLOCK: usize = 1 << 20;

const MASK: StatxFlags = StatxFlags::TYPE.union(StatxFlags::SIZE);

/// What a verification compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// Regular files compared.
    pub files: u64,
    /// Bytes compared (on each side).
    pub bytes: u64,
    /// Entries that differ or are missing from the copy (each reported).
    pub differences: u64,
}

/// See [`Cp::verify`].
pub(super) fn verify(cp: &Cp, src: &Path, dest: &Path, report: &dyn CpReport) -> Result<Verified> {
    let src_name = src.as_os_str().as_bytes();
    let open = |path: &Path, flags| {
        openat(CWD, path, flags, Mode::empty())
            .map_err(|e| Error::io("open", TreePath(path.as_os_str().as_bytes().into()), e))
    };
    let stat = statx(CWD, src, AtFlags::SYMLINK_NOFOLLOW, MASK)
        .map_err(|e| Error::io("statx", TreePath(src_name.to_vec()), e))?;
    let shared = Shared {
        report,
        dest: dest.as_os_str().as_bytes().to_vec(),
        totals: Default::default(),
        cancel: &cp.cancel,
    };
    let mut checker = Checker::new(&shared);
    if Kind::of_mode(stat.stx_mode.into()) == Kind::Dir {
        let (src_fd, dest_fd) = (open(src, DIR_FLAGS)?, open(dest, DIR_FLAGS)?);
        drop(checker);
        WalkParallel::new(src_fd, src_name)
            .threads(cp.threads)
            .exclude(cp.exclude.clone())
            .visit(&mut Builder(&shared), Some(dest_fd));
    } else {
        let ((src_dir, name), (dest_dir, dest_name)) = (split(src)?, split(dest)?);
        let src_dir = open_parent(src_dir, src_name)?;
        let dest_dir = open_parent(dest_dir, dest.as_os_str().as_bytes())?;
        checker.check(
            src_dir.as_fd(),
            name,
            dest_dir.as_fd(),
            dest_name,
            &stat,
            b"",
        );
        // Its counts go to the totals when it is dropped.
        drop(checker);
    }
    let totals = *shared.totals.lock().expect("no panics");
    Ok(totals)
}

struct Shared<'a> {
    report: &'a dyn CpReport,
    dest: Vec<u8>,
    totals: std::sync::Mutex<Verified>,
    cancel: &'a Cancel,
}

struct Builder<'a>(&'a Shared<'a>);

impl<'a> ParallelVisitorBuilder for Builder<'a> {
    type Visitor = Checker<'a>;

    fn build(&mut self) -> Checker<'a> {
        Checker::new(self.0)
    }
}

/// The comparing visitor of one thread.
struct Checker<'a> {
    shared: &'a Shared<'a>,
    totals: Verified,
    bufs: (Vec<u8>, Vec<u8>),
}

impl Drop for Checker<'_> {
    fn drop(&mut self) {
        let mut totals = self.shared.totals.lock().expect("no panics");
        totals.files += self.totals.files;
        totals.bytes += self.totals.bytes;
        totals.differences += self.totals.differences;
    }
}

impl<'a> Checker<'a> {
    fn new(shared: &'a Shared<'a>) -> Checker<'a> {
        Checker {
            shared,
            totals: Verified::default(),
            bufs: (vec![0; BLOCK], vec![0; BLOCK]),
        }
    }

    fn differs(&mut self, path: &[u8], problem: String) {
        self.totals.differences += 1;
        self.shared.report.error(Error::Argument {
            arg: TreePath::join([&self.shared.dest[..]], path).to_string(),
            problem,
        });
    }

    /// Compares the entry `name` of `src` (stated as `stat`) with `dest_name` in `dest`.
    fn check(
        &mut self,
        src: BorrowedFd<'_>,
        name: &[u8],
        dest: BorrowedFd<'_>,
        dest_name: &[u8],
        stat: &Statx,
        path: &[u8],
    ) {
        let kind = Kind::of_mode(stat.stx_mode.into());
        let copy = match statx(dest, dest_name, AtFlags::SYMLINK_NOFOLLOW, MASK) {
            Ok(copy) => copy,
            Err(e) => return self.differs(path, format!("not in the copy ({e})")),
        };
        let copy_kind = Kind::of_mode(copy.stx_mode.into());
        if copy_kind != kind {
            let found = copy_kind.with_article();
            return self.differs(
                path,
                format!("is {found} in the copy, {} in SRC", kind.with_article()),
            );
        }
        let compared = match kind {
            Kind::File if copy.stx_size != stat.stx_size => Err(format!(
                "has {} bytes in the copy, {} in SRC",
                copy.stx_size, stat.stx_size
            )),
            Kind::File => self.compare_files(src, name, dest, dest_name),
            Kind::Symlink => match (
                readlinkat(src, name, Vec::new()),
                readlinkat(dest, dest_name, Vec::new()),
            ) {
                (Ok(a), Ok(b)) if a == b => Ok(()),
                (Ok(_), Ok(_)) => Err("points elsewhere in the copy".into()),
                (Err(e), _) | (_, Err(e)) => Err(format!("readlink: {e}")),
            },
            _ => Ok(()),
        };
        if let Err(problem) = compared {
            self.differs(path, problem);
        }
    }

    /// Reads both files in blocks to their ends (not only as far as their size says: a
    /// kernel file says 0 and holds more) and compares them.
    fn compare_files(
        &mut self,
        src: BorrowedFd<'_>,
        name: &[u8],
        dest: BorrowedFd<'_>,
        dest_name: &[u8],
    ) -> std::result::Result<(), String> {
        let open = |dir, name| openat(dir, name, FILE_FLAGS, Mode::empty());
        let (a, b): (OwnedFd, OwnedFd) = match (open(src, name), open(dest, dest_name)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Err(format!("open: {e}")),
        };
        let mut at = 0u64;
        loop {
            let cancel = self.shared.cancel;
            let read = |fd: &OwnedFd, buf: &mut [u8]| retry(cancel, || pread(fd, &mut buf[..], at));
            let (x, y) = match (read(&a, &mut self.bufs.0), read(&b, &mut self.bufs.1)) {
                (Ok(x), Ok(y)) => (x, y),
                (Err(e), _) | (_, Err(e)) => return Err(format!("read: {e}")),
            };
            if x != y || self.bufs.0[..x] != self.bufs.1[..y] {
                let first = self.bufs.0[..x.min(y)]
                    .iter()
                    .zip(&self.bufs.1[..x.min(y)])
                    .position(|(p, q)| p != q)
                    .unwrap_or(x.min(y));
                return Err(format!(
                    "content differs from SRC at byte {}",
                    at + first as u64
                ));
            }
            if x == 0 {
                break;
            }
            at += x as u64;
        }
        self.totals.files += 1;
        self.totals.bytes += at;
        Ok(())
    }
}

impl<'a> ParallelVisitor for Checker<'a> {
    /// The copy of the directory (`None`: missing, already reported).
    type State = Option<OwnedFd>;

    fn enter_dir(
        &mut self,
        parent: &Dir<Option<OwnedFd>>,
        entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> std::result::Result<Option<OwnedFd>, WalkState> {
        let Some(dest) = parent.state() else {
            return Err(WalkState::Skip);
        };
        match openat(dest, entry.name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => Ok(Some(fd)),
            Err(e) => {
                let what = match e {
                    Errno::NOENT => "not in the copy".into(),
                    Errno::NOTDIR | Errno::LOOP => "not a directory in the copy".into(),
                    e => format!("open: {e}"),
                };
                self.differs(&parent.relative(Some(entry.name)), what);
                Err(WalkState::Skip)
            }
        }
    }

    fn entry(
        &mut self,
        dir: &Dir<Option<OwnedFd>>,
        fd: BorrowedFd<'_>,
        entry: &mut Entry<'_>,
    ) -> WalkState {
        let Some(dest) = dir.state() else {
            return WalkState::Continue;
        };
        match statx(fd, entry.name, AtFlags::SYMLINK_NOFOLLOW, MASK) {
            Ok(stat) if Kind::of_mode(stat.stx_mode.into()) == Kind::Dir => entry.kind = Kind::Dir,
            Ok(stat) => {
                let path = dir.relative(Some(entry.name));
                self.check(fd, entry.name, dest.as_fd(), entry.name, &stat, &path);
            }
            // Gone from SRC since the copy: nothing to compare.
            Err(Errno::NOENT) => {}
            Err(e) => self.differs(
                &dir.relative(Some(entry.name)),
                format!("statx in SRC: {e}"),
            ),
        }
        WalkState::Continue
    }

    fn error(&mut self, error: Error) -> WalkState {
        self.totals.differences += 1;
        self.shared.report.error(error);
        WalkState::Continue
    }
}
