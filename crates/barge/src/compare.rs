//! Comparing entries and trees: the one rule that says an entry is unchanged since it was
//! copied (`cp --update`, `send --update`'s listing and the pack that reads it), the one key
//! of an inode (hard links, du's counted inodes, DEST inside SRC), and the one comparison of
//! a tree with its copy ([`Compare`]: `cp --verify`, the tests' tree assertions).

use std::hash::Hasher;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

use rustix::fs::{makedev, openat, readlinkat, statx, AtFlags, Mode, Statx, StatxFlags, CWD};
use rustix::io::{pread, Errno};

use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::interrupt::{retry, Cancel};
use crate::root::{open_parent, split};
use crate::sys::{DIR_FLAGS, FILE_FLAGS};
use crate::threads::Work;
use crate::tree::{Device, Entry, Kind, Meta, Xattrs, STATX_MASK};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};
use crate::walk::Members;

/// An inode: its device (`makedev` of the device numbers) and inode number.
pub(crate) type InodeKey = (u64, u64);

/// The inode `stat` describes.
pub(crate) fn inode_key(stat: &Statx) -> InodeKey {
    (
        makedev(stat.stx_dev_major, stat.stx_dev_minor),
        stat.stx_ino,
    )
}

/// What the unchanged rule looks at of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) kind: Kind,
    /// A file's bytes; a symlink's target length; a device's number ([`Device::number`]);
    /// else 0.
    pub(crate) size: u64,
    /// Permission bits (all twelve), modification time, owner.
    pub(crate) meta: Meta,
    /// A regular file's names (`st_nlink`; 0 where not known).
    pub(crate) links: u32,
    /// A digest of the extended attributes in archive form ([`xattr_digest`]; `None` where
    /// they were not read).
    pub(crate) xattrs: Option<u64>,
}

impl Facts {
    /// `kind`, `size` and `meta`, links and extended attributes not known.
    pub(crate) fn new(kind: Kind, size: u64, meta: Meta) -> Facts {
        Facts {
            kind,
            size,
            meta,
            links: 0,
            xattrs: None,
        }
    }

    /// What `stat` (asked with [`STATX_MASK`]) says.
    pub(crate) fn of_statx(stat: &Statx) -> Facts {
        let kind = Kind::of_mode(stat.stx_mode.into());
        let size = match kind {
            Kind::File | Kind::Symlink => stat.stx_size,
            Kind::CharDevice | Kind::BlockDevice => Device::of_statx(stat).number(),
            _ => 0,
        };
        Facts {
            links: if kind == Kind::File {
                stat.stx_nlink
            } else {
                0
            },
            ..Facts::new(kind, size, Meta::of_statx(stat))
        }
    }
}

/// The digest [`Facts::xattrs`] holds of the extended attributes `xattrs` (as
/// `XattrReader` reads them: sorted by name) that `kept` says a copy keeps.
pub(crate) fn xattr_digest(xattrs: Xattrs<'_>, kept: impl Fn(&[u8]) -> bool) -> u64 {
    let mut digest = twox_hash::XxHash3_64::new();
    for (name, value) in xattrs.iter().filter(|(name, _)| kept(name)) {
        for bytes in [name, value] {
            digest.write(&(bytes.len() as u64).to_le_bytes());
            digest.write(bytes);
        }
    }
    digest.finish()
}

/// Two buffers of [`BLOCK`] bytes for [`first_difference`] (allocated by its first call).
pub(crate) type Buffers = (Vec<u8>, Vec<u8>);

/// Reads the files `a` and `b` in blocks to their ends (not only as far as their size
/// says: a kernel file says 0 and holds more) and compares them: `Ok(Err(at))`, the first
/// byte that differs, or `Ok(Ok(bytes))`, the length of both when they are the same.
pub(crate) fn first_difference(
    a: BorrowedFd<'_>,
    b: BorrowedFd<'_>,
    bufs: &mut Buffers,
    cancel: &Cancel,
) -> rustix::io::Result<std::result::Result<u64, u64>> {
    for buf in [&mut bufs.0, &mut bufs.1] {
        buf.resize(BLOCK, 0);
    }
    let mut at = 0u64;
    loop {
        let x = retry(cancel, || pread(a, &mut bufs.0[..], at))?;
        let y = retry(cancel, || pread(b, &mut bufs.1[..], at))?;
        if x != y || bufs.0[..x] != bufs.1[..y] {
            let first = bufs.0[..x.min(y)]
                .iter()
                .zip(&bufs.1[..x.min(y)])
                .position(|(p, q)| p != q)
                .unwrap_or(x.min(y));
            return Ok(Err(at + first as u64));
        }
        if x == 0 {
            return Ok(Ok(at));
        }
        at += x as u64;
    }
}

/// The unchanged rule: an entry is unchanged when its kind, size, modification time (to the
/// nanosecond) and all twelve permission bits are the same (a symlink's bits are not: Linux
/// fixes them), and, where the copy keeps them, its owner, its extended attributes and its
/// links: a file of one name has one in the copy (a copy with more shares its inode with
/// another name, which writing it would change). Which names of a file of several share
/// its copy is for the callers, which see the names.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Owners are kept (archive mode, by a process that may give files away).
    pub(crate) owners: bool,
    /// Extended attributes are kept (both sides' [`Facts::xattrs`] read).
    pub(crate) xattrs: bool,
    /// Hard links are kept.
    pub(crate) links: bool,
    /// Times are not kept: a time differs only where the source's is later than the copy's
    /// (GNU `cp -u`'s rule), the copy's being when it was made.
    pub(crate) newer: bool,
}

/// A fact the unchanged rule compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fact {
    Kind,
    Size,
    /// The modification time (different where the source records none).
    Time,
    Mode,
    /// The owner (where kept; different where the source records none).
    Owner,
    /// The extended attributes (where kept).
    Xattrs,
    /// A file of one name has several in the copy (where links are kept).
    Links,
}

impl Rule {
    /// This rule with extended attributes left out (where they were not read).
    pub(crate) fn but_xattrs(self) -> Rule {
        Rule {
            xattrs: false,
            ..self
        }
    }

    /// True when `copy` is still what `source` is.
    pub(crate) fn unchanged(self, source: &Facts, copy: &Facts) -> bool {
        self.differences(source, copy).next().is_none()
    }

    /// What makes `copy` differ from `source`, in the order of [`Fact`].
    pub(crate) fn differences(self, source: &Facts, copy: &Facts) -> impl Iterator<Item = Fact> {
        let (a, b) = (&source.meta, &copy.meta);
        [
            (source.kind != copy.kind, Fact::Kind),
            (source.size != copy.size, Fact::Size),
            (
                match self.newer {
                    false => a.mtime.is_none() || a.mtime != b.mtime,
                    true => a.mtime.is_none() || a.mtime > b.mtime,
                },
                Fact::Time,
            ),
            (source.kind != Kind::Symlink && a.mode != b.mode, Fact::Mode),
            (
                self.owners && (a.owner.is_none() || a.owner != b.owner),
                Fact::Owner,
            ),
            (
                self.xattrs && (source.xattrs.is_none() || source.xattrs != copy.xattrs),
                Fact::Xattrs,
            ),
            (
                self.links && source.links == 1 && copy.links != 1,
                Fact::Links,
            ),
        ]
        .into_iter()
        .filter_map(|(differs, fact)| differs.then_some(fact))
    }
}

/// What each read of a tree comparison compares.
const BLOCK: usize = 1 << 20;

/// What a tree comparison compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Verified {
    /// Regular files compared.
    pub files: u64,
    /// Bytes compared (on each side).
    pub bytes: u64,
    /// Entries that differ or are missing from the copy (each reported).
    pub differences: u64,
}

/// A comparison of a tree with its copy on the parallel walker, which walks the source: each
/// entry's kind, each regular file read on both sides and compared byte for byte (a
/// comparison of content hashes would read the same bytes and prove less), each symlink's
/// target; as asked, permission bits and entries only the copy has.
#[derive(Clone, Debug)]
pub struct Compare {
    threads: usize,
    exclude: Exclude,
    /// Permission bits are compared, the copy's lacking these.
    umask: Option<u32>,
    /// Entries only the copy has are differences.
    whole: bool,
    cancel: Cancel,
    /// Only these paths of the source, when not all.
    members: Option<Members>,
}

impl Default for Compare {
    fn default() -> Compare {
        Compare::new()
    }
}

impl Compare {
    /// Kinds, contents and symlink targets of the source's entries, on a walk's threads
    /// ([`Work::Walk`]).
    pub fn new() -> Compare {
        Compare {
            threads: Work::Walk.threads(),
            exclude: Exclude::default(),
            umask: None,
            whole: false,
            cancel: Cancel::new(),
            members: None,
        }
    }

    /// On up to `threads` threads.
    pub fn threads(mut self, threads: usize) -> Compare {
        self.threads = threads;
        self
    }

    /// Leaves out of the source what `exclude` matches.
    pub fn exclude(mut self, exclude: Exclude) -> Compare {
        self.exclude = exclude;
        self
    }

    /// Compares only `members` of a source directory (none: all of it), as
    /// [`Cp::members`](crate::cp::Cp::members) copies them; members the source lacks are
    /// no differences.
    pub fn members(mut self, members: Option<Members>) -> Compare {
        self.members = members;
        self
    }

    /// Compares all twelve permission bits too (not of symlinks): the copy's must be the
    /// source's less `umask`.
    pub fn modes(mut self, umask: u32) -> Compare {
        self.umask = Some(umask);
        self
    }

    /// Counts what the copy holds and the source lacks as one more difference (a second
    /// walk, of the copy, counts its entries).
    pub fn whole(mut self) -> Compare {
        self.whole = true;
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels): [`Compare::run`] then fails with [`Error::Interrupted`].
    pub fn cancel(mut self, cancel: Cancel) -> Compare {
        self.cancel = cancel;
        self
    }

    /// Compares the tree (or single entry) `src` with `copy`: each difference, and each
    /// failure to look, goes to `report` as an error naming the entry in the copy.
    pub fn run(
        &self,
        src: &Path,
        copy: &Path,
        report: &(dyn Fn(Error) + Sync),
    ) -> Result<Verified> {
        let src_name = src.as_os_str().as_bytes();
        let open = |path: &Path| {
            openat(CWD, path, DIR_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open", TreePath(path.as_os_str().as_bytes().into()), e))
        };
        let stat = statx(CWD, src, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK)
            .map_err(|e| Error::io("statx", TreePath(src_name.to_vec()), e))?;
        let shared = Shared {
            compare: self,
            report,
            copy: copy.as_os_str().as_bytes().to_vec(),
            totals: Mutex::default(),
            matched: AtomicU64::new(0),
        };
        let mut entries = 1;
        if Kind::of_mode(stat.stx_mode.into()) == Kind::Dir {
            let (src_fd, copy_fd) = (open(src)?, open(copy)?);
            WalkParallel::new(src_fd, src_name)
                .threads(self.threads)
                .exclude(self.exclude.clone())
                .members(self.members.clone())
                .visit(&mut &shared, Some(copy_fd));
            if self.whole {
                let counter = Counter::default();
                WalkParallel::new(open(copy)?, copy.as_os_str().as_bytes())
                    .threads(self.threads)
                    .visit(&mut &counter, ());
                entries = counter.entries.into_inner();
            }
        } else {
            let ((src_dir, name), (copy_dir, copy_name)) = (split(src)?, split(copy)?);
            let src_dir = open_parent(src_dir, src_name)?;
            let copy_dir = open_parent(copy_dir, copy.as_os_str().as_bytes())?;
            let entry = Entry::new(
                name,
                Kind::of_mode(stat.stx_mode.into()),
                Meta::of_statx(&stat),
            );
            let mut checker = (&shared).build();
            checker.check(src_dir.as_fd(), &entry, copy_dir.as_fd(), copy_name, b"");
        }
        self.cancel.check()?;
        let matched = shared.matched.load(Relaxed);
        let mut totals = *shared.totals.lock().expect("no panics");
        if self.whole && entries > matched {
            totals.differences += 1;
            report(Error::Argument {
                arg: TreePath(shared.copy.clone()).to_string(),
                problem: format!("holds {} entries that SRC lacks", entries - matched),
            });
        }
        Ok(totals)
    }
}

/// A tree comparison under way, shared by its walking threads.
struct Shared<'a> {
    compare: &'a Compare,
    report: &'a (dyn Fn(Error) + Sync),
    /// The copy's path, for messages.
    copy: Vec<u8>,
    totals: Mutex<Verified>,
    /// Entries of the source found in the copy.
    matched: AtomicU64,
}

impl<'a> ParallelVisitorBuilder for &'a Shared<'a> {
    type Visitor = Checker<'a>;

    fn build(&mut self) -> Checker<'a> {
        Checker {
            shared: self,
            totals: Verified::default(),
            bufs: Buffers::default(),
        }
    }
}

/// The comparing visitor of one thread.
struct Checker<'a> {
    shared: &'a Shared<'a>,
    totals: Verified,
    bufs: Buffers,
}

impl Drop for Checker<'_> {
    fn drop(&mut self) {
        let mut totals = self.shared.totals.lock().expect("no panics");
        totals.files += self.totals.files;
        totals.bytes += self.totals.bytes;
        totals.differences += self.totals.differences;
    }
}

impl Checker<'_> {
    fn differs(&mut self, path: &[u8], problem: String) {
        self.totals.differences += 1;
        (self.shared.report)(Error::Argument {
            arg: TreePath::join([&self.shared.copy[..]], path).to_string(),
            problem,
        });
    }

    /// Whether the permission bits `copy` of the copy of an entry with `meta` are as
    /// asked; says how they differ where they do not.
    fn modes(&mut self, path: &[u8], kind: Kind, meta: &Meta, copy: u32) {
        match self.shared.compare.umask {
            Some(umask) if kind != Kind::Symlink && copy & 0o7777 != meta.mode & !umask => {
                let want = meta.mode & !umask;
                self.differs(
                    path,
                    format!("has mode {:o} in the copy, {want:o} wanted", copy & 0o7777),
                );
            }
            _ => {}
        }
    }

    /// Compares the source's `entry` of `src` with `copy_name` in `copy`.
    fn check(
        &mut self,
        src: BorrowedFd<'_>,
        entry: &Entry<'_>,
        copy: BorrowedFd<'_>,
        copy_name: &[u8],
        path: &[u8],
    ) {
        let there = match statx(copy, copy_name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK) {
            Ok(there) => there,
            Err(e) => return self.differs(path, format!("not in the copy ({e})")),
        };
        self.shared.matched.fetch_add(1, Relaxed);
        let (kind, copy_kind) = (entry.kind, Kind::of_mode(there.stx_mode.into()));
        if copy_kind != kind {
            let found = copy_kind.with_article();
            return self.differs(
                path,
                format!("is {found} in the copy, {} in SRC", kind.with_article()),
            );
        }
        self.modes(path, kind, &entry.meta, there.stx_mode.into());
        let compared = match kind {
            Kind::File => self.compare_files(src, entry.name, copy, copy_name),
            Kind::Symlink => match (
                readlinkat(src, entry.name, Vec::new()),
                readlinkat(copy, copy_name, Vec::new()),
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

    /// Compares the content of the file `name` of `src` with `copy_name` of `copy`.
    fn compare_files(
        &mut self,
        src: BorrowedFd<'_>,
        name: &[u8],
        copy: BorrowedFd<'_>,
        copy_name: &[u8],
    ) -> std::result::Result<(), String> {
        let open = |dir, name| openat(dir, name, FILE_FLAGS, Mode::empty());
        let (a, b): (OwnedFd, OwnedFd) = match (open(src, name), open(copy, copy_name)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => return Err(format!("open: {e}")),
        };
        let cancel = &self.shared.compare.cancel;
        match first_difference(a.as_fd(), b.as_fd(), &mut self.bufs, cancel) {
            Ok(Ok(bytes)) => {
                self.totals.files += 1;
                self.totals.bytes += bytes;
                Ok(())
            }
            Ok(Err(at)) => Err(format!("content differs from SRC at byte {at}")),
            Err(e) => Err(format!("read: {e}")),
        }
    }
}

impl ParallelVisitor for Checker<'_> {
    /// The copy of the directory (`None`: missing, already reported).
    type State = Option<OwnedFd>;
    type Job = std::convert::Infallible;

    fn enter_dir(
        &mut self,
        parent: &Dir<Option<OwnedFd>>,
        entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> std::result::Result<Option<OwnedFd>, WalkState> {
        if self.shared.compare.cancel.is_cancelled() {
            return Err(WalkState::Quit);
        }
        let Some(copy) = parent.state() else {
            return Err(WalkState::Skip);
        };
        let path = || parent.relative(Some(entry.name));
        let fd = match openat(copy, entry.name, DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let what = match e {
                    Errno::NOENT => "not in the copy".into(),
                    Errno::NOTDIR | Errno::LOOP => {
                        self.shared.matched.fetch_add(1, Relaxed);
                        "not a directory in the copy".into()
                    }
                    e => format!("open: {e}"),
                };
                self.differs(&path(), what);
                return Err(WalkState::Skip);
            }
        };
        self.shared.matched.fetch_add(1, Relaxed);
        if self.shared.compare.umask.is_some() {
            match statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::MODE) {
                Ok(there) => self.modes(&path(), Kind::Dir, &entry.meta, there.stx_mode.into()),
                Err(e) => self.differs(&path(), format!("statx: {e}")),
            }
        }
        Ok(Some(fd))
    }

    fn entry(
        &mut self,
        dir: &Dir<Option<OwnedFd>>,
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        _stat: &Statx,
    ) -> WalkState {
        if self.shared.compare.cancel.is_cancelled() {
            return WalkState::Quit;
        }
        if let Some(copy) = dir.state() {
            let path = dir.relative(Some(entry.name));
            self.check(fd, entry, copy.as_fd(), entry.name, &path);
        }
        WalkState::Continue
    }

    /// Gone from SRC since the copy: nothing to compare.
    fn unstated(&mut self, dir: &Dir<Option<OwnedFd>>, name: &[u8], cause: Errno) -> WalkState {
        if cause != Errno::NOENT {
            self.differs(&dir.relative(Some(name)), format!("statx in SRC: {cause}"));
        }
        WalkState::Continue
    }

    fn error(&mut self, error: Error) -> WalkState {
        self.totals.differences += 1;
        (self.shared.report)(error);
        WalkState::Continue
    }

    /// Missing from SRC: nothing to compare (the copy said so).
    fn unreached(&mut self, _error: Error) {}
}

/// Counts the entries of a tree (the copy, for [`Compare::whole`]).
#[derive(Default)]
struct Counter {
    entries: AtomicU64,
}

impl<'a> ParallelVisitorBuilder for &'a Counter {
    type Visitor = &'a Counter;

    fn build(&mut self) -> &'a Counter {
        self
    }
}

impl ParallelVisitor for &Counter {
    type State = ();
    type Job = std::convert::Infallible;

    fn enter_dir(
        &mut self,
        _parent: &Dir<()>,
        _entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> std::result::Result<(), WalkState> {
        self.entries.fetch_add(1, Relaxed);
        Ok(())
    }

    fn entry(
        &mut self,
        _dir: &Dir<()>,
        _fd: BorrowedFd<'_>,
        _entry: &Entry<'_>,
        _stat: &Statx,
    ) -> WalkState {
        self.entries.fetch_add(1, Relaxed);
        WalkState::Continue
    }

    /// Counted: it is there.
    fn unopened(
        &mut self,
        _parent: &Dir<()>,
        _name: &[u8],
        _stat: Option<&Statx>,
        _cause: Errno,
    ) -> WalkState {
        self.entries.fetch_add(1, Relaxed);
        WalkState::Continue
    }

    fn error(&mut self, _error: Error) -> WalkState {
        WalkState::Continue
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{Owner, Timestamp};

    fn facts(kind: Kind, mode: u32, uid: u32) -> Facts {
        let meta = Meta {
            mode,
            mtime: Some(Timestamp { sec: 5, nsec: 7 }),
            owner: Some(Owner { uid, gid: 0 }),
        };
        Facts {
            links: 1,
            xattrs: Some(xattr_digest(Xattrs::default(), |_| true)),
            ..Facts::new(kind, 3, meta)
        }
    }

    #[test]
    fn every_mode_bit_counts_and_owners_only_where_kept() {
        let rule = Rule::default();
        let file = facts(Kind::File, 0o644, 0);
        assert!(rule.unchanged(&file, &file));
        for bit in [0o4000, 0o2000, 0o1000, 0o400, 0o1] {
            let changed = facts(Kind::File, 0o644 ^ bit, 0);
            assert!(!rule.unchanged(&changed, &file), "{bit:o}");
        }
        let given_away = facts(Kind::File, 0o644, 1000);
        assert!(rule.unchanged(&given_away, &file));
        let owners = Rule {
            owners: true,
            ..Rule::default()
        };
        assert!(!owners.unchanged(&given_away, &file));
    }

    #[test]
    fn xattrs_and_links_count_only_where_kept() {
        let kept = Rule {
            xattrs: true,
            links: true,
            ..Rule::default()
        };
        let file = facts(Kind::File, 0o644, 0);
        let mut tagged = file;
        let mut wire = Vec::new();
        Xattrs::push(&mut wire, b"user.x", b"1");
        tagged.xattrs = Some(xattr_digest(Xattrs(&wire), |_| true));
        assert_eq!(
            xattr_digest(Xattrs(&wire), |name| name != b"user.x"),
            file.xattrs.unwrap(),
            "only what the copy keeps counts"
        );
        assert!(Rule::default().unchanged(&tagged, &file));
        assert_eq!(
            kept.differences(&tagged, &file).collect::<Vec<_>>(),
            [Fact::Xattrs]
        );
        let mut linked = file;
        linked.links = 2;
        assert!(Rule::default().unchanged(&file, &linked));
        assert_eq!(
            kept.differences(&file, &linked).collect::<Vec<_>>(),
            [Fact::Links]
        );
        // A source of several names may have one in the copy (its others outside SRC).
        assert!(kept.unchanged(&linked, &file));
    }

    #[test]
    fn without_times_kept_only_a_newer_source_differs_in_time() {
        let newer = Rule {
            newer: true,
            ..Rule::default()
        };
        let source = facts(Kind::File, 0o644, 0);
        let mut copy = source;
        copy.meta.mtime = Some(Timestamp { sec: 9, nsec: 0 });
        assert!(newer.unchanged(&source, &copy), "a copy made later");
        assert!(!Rule::default().unchanged(&source, &copy));
        copy.meta.mtime = Some(Timestamp { sec: 5, nsec: 6 });
        assert_eq!(
            newer.differences(&source, &copy).collect::<Vec<_>>(),
            [Fact::Time]
        );
        let mut untimed = source;
        untimed.meta.mtime = None;
        assert!(
            !newer.unchanged(&untimed, &source),
            "a source without a time"
        );
    }

    #[test]
    fn kind_size_and_time_to_the_nanosecond_count_and_a_symlinks_mode_does_not() {
        let rule = Rule::default();
        let file = facts(Kind::File, 0o644, 0);
        let mut later = file;
        later.meta.mtime = Some(Timestamp { sec: 5, nsec: 8 });
        assert!(!rule.unchanged(&later, &file));
        let mut longer = file;
        longer.size += 1;
        assert!(!rule.unchanged(&longer, &file));
        assert!(!rule.unchanged(&facts(Kind::Symlink, 0o644, 0), &file));
        let link = facts(Kind::Symlink, 0o777, 0);
        assert!(rule.unchanged(&link, &facts(Kind::Symlink, 0, 0)));
        let mut untimed = file;
        untimed.meta.mtime = None;
        assert!(!rule.unchanged(&untimed, &untimed), "no time, no proof");
    }

    /// Compares `a` with `b` with every check: the differences' messages, less the path of
    /// `b`.
    fn differences(a: &std::path::Path, b: &std::path::Path) -> Vec<String> {
        let found = Mutex::new(Vec::new());
        let compare = Compare::new().threads(2).modes(0).whole();
        let verified = compare
            .run(a, b, &|e| found.lock().unwrap().push(e.to_string()))
            .unwrap();
        let found = found.into_inner().unwrap();
        assert_eq!(verified.differences, found.len() as u64);
        let prefix = format!("{}/", b.display());
        found.iter().map(|f| f.replace(&prefix, "")).collect()
    }

    #[test]
    fn a_tree_comparison_finds_each_kind_of_difference_and_nothing_in_a_true_copy() {
        use std::fs;
        use std::os::unix::fs::{symlink, PermissionsExt};
        let dir = tempfile::tempdir().unwrap();
        let build = |root: &std::path::Path| {
            fs::create_dir_all(root.join("d/e")).unwrap();
            fs::write(root.join("d/f"), b"data").unwrap();
            fs::write(root.join("d/e/g"), vec![7; 3 << 20]).unwrap();
            fs::set_permissions(root.join("d/f"), fs::Permissions::from_mode(0o2644)).unwrap();
            symlink("f", root.join("d/l")).unwrap();
        };
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        build(&a);
        build(&b);
        assert_eq!(differences(&a, &b), Vec::<String>::new());
        let mut big = vec![7; 3 << 20];
        big[(2 << 20) + 5] = 8;
        fs::write(b.join("d/e/g"), big).unwrap();
        fs::set_permissions(b.join("d/f"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::remove_file(b.join("d/l")).unwrap();
        symlink("g", b.join("d/l")).unwrap();
        fs::create_dir(b.join("extra")).unwrap();
        fs::remove_dir(b.join("d/e")).unwrap_err();
        let mut found = differences(&a, &b);
        found.sort();
        assert_eq!(
            found,
            [
                format!("{}: holds 1 entries that SRC lacks", b.display()),
                "d/e/g: content differs from SRC at byte 2097157".into(),
                "d/f: has mode 644 in the copy, 2644 wanted".into(),
                "d/l: points elsewhere in the copy".into(),
            ]
        );
        fs::remove_dir_all(b.join("d/e")).unwrap();
        fs::write(b.join("d/e"), b"").unwrap();
        let found = differences(&a, &b);
        assert!(
            found.contains(&"d/e: not a directory in the copy".into()),
            "{found:?}"
        );
    }
}
