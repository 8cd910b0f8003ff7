//! The ordered directory walker, a source of the tree model: getdents64 on directory fds,
//! `openat` relative to the parent, entries sorted by name bytes, no path strings built for
//! syscalls, a [`Sink`] driven.

pub mod parallel;

use std::collections::HashSet;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{
    fstat, major, minor, openat, readlinkat_raw, statat, AtFlags, FileType, Mode, Stat,
};
use rustix::io::Errno;

use crate::error::{Error, TreePath};
use crate::exclude::Exclude;
use crate::format::MAX_SYMLINK;
use crate::sys::dir::{dirent_buffer, Listing};
use crate::sys::DIR_FLAGS;
use crate::tree::{Content, Device, DirPath, Entry, Kind, Meta, Sink, XattrReader, Xattrs};

/// Walks the tree below the directory `root` into `sink` with the default options (see
/// [`Walk::run`]).
pub fn walk<S: Sink>(root: OwnedFd, sink: &mut S) -> std::result::Result<(), S::Error> {
    Walk::new().run(root, sink)
}

/// A walk of directory trees into a [`Sink`], depth first, siblings in name-byte order.
/// Each directory is read once with getdents64 and opened relative to its parent's fd,
/// never following symlinks. The sink gets:
///
/// - directories with their `fstat` metadata ([`Sink::enter_dir`], or [`Sink::empty_dir`]
///   when the listing is empty), and their extended attributes when asked;
/// - regular files [`Content::Unopened`], with no metadata: the sink opens and stats them;
/// - symlinks ([`Sink::symlink`]: one `fstatat` and one `readlinkat`), fifos and devices
///   ([`Sink::special`]: one `fstatat`), with their metadata;
/// - anything else (sockets) through [`Sink::other`];
/// - entries it cannot read through [`Sink::unreadable`]: a directory that cannot be opened
///   or listed is then announced empty, with its metadata when it can be stated.
#[derive(Clone, Copy, Debug, Default)]
pub struct Walk<'a> {
    exclude: Option<&'a Exclude>,
    xattrs: bool,
    prune: Option<&'a HashSet<Box<[u8]>>>,
}

impl<'a> Walk<'a> {
    /// A walk of everything, without extended attributes.
    pub fn new() -> Walk<'a> {
        Walk::default()
    }

    /// Leaves out what `exclude` matches below each root (an excluded directory is not
    /// entered).
    pub fn exclude(mut self, exclude: &'a Exclude) -> Walk<'a> {
        self.exclude = Some(exclude).filter(|e| !e.is_empty());
        self
    }

    /// Leaves out the directories at the paths in `prune` (root names first, as the sink
    /// sees them), with everything below them: neither announced nor opened.
    pub fn prune(mut self, prune: &'a HashSet<Box<[u8]>>) -> Walk<'a> {
        self.prune = Some(prune).filter(|p| !p.is_empty());
        self
    }

    /// Reads the extended attributes of directories (`flistxattr` on the fd the walk opens
    /// anyway); files are the sink's to open.
    pub fn xattrs(mut self, yes: bool) -> Walk<'a> {
        self.xattrs = yes;
        self
    }

    /// Walks the tree below the directory `root` (its entries come at the top: `root`
    /// itself is no entry), then calls [`Sink::finish`], or [`Sink::abort`] on a failure.
    pub fn run<S: Sink>(self, root: OwnedFd, sink: &mut S) -> std::result::Result<(), S::Error> {
        self.run_named(vec![(Vec::new(), root)], sink)
    }

    /// Walks each of `roots` as a directory entry named by its name (entered with its own
    /// metadata, its tree below it) in the order given, then calls [`Sink::finish`], or
    /// [`Sink::abort`] on a failure. An empty name walks that root's entries at the top,
    /// as [`Walk::run`] does.
    pub fn run_named<S: Sink>(
        self,
        roots: Vec<(Vec<u8>, OwnedFd)>,
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        let mut walker = Walker {
            options: self,
            buf: dirent_buffer(),
            pool: Vec::new(),
            name: Vec::with_capacity(256),
            at: DirPath::default(),
            top: 0,
            xattrs: XattrReader::default(),
            target: vec![0; MAX_SYMLINK + 1],
        };
        let walked = roots
            .into_iter()
            .try_for_each(|(name, root)| walker.root(&name, root, sink));
        match walked {
            Ok(()) => sink.finish(),
            Err(e) => Err(sink.abort(e)),
        }
    }
}

struct Frame {
    fd: OwnedFd,
    listing: Listing,
    next: usize,
}

/// A walk under way: its options and reusable buffers.
struct Walker<'a> {
    options: Walk<'a>,
    buf: Vec<MaybeUninit<u8>>,
    pool: Vec<Listing>,
    /// The name of the entry at hand.
    name: Vec<u8>,
    /// Where the walk is, for messages (the root's name first, for a named root).
    at: DirPath,
    /// How many bytes of the paths in `at` name the root (with its `/`), which the paths
    /// exclude patterns see leave out.
    top: usize,
    xattrs: XattrReader,
    /// A symlink's target.
    target: Vec<u8>,
}

impl Walker<'_> {
    /// Walks the root `fd`: as the directory `name`, or its entries at the top when the
    /// name is empty.
    fn root<S: Sink>(
        &mut self,
        name: &[u8],
        fd: OwnedFd,
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        if self.pruned(name) {
            return Ok(());
        }
        let path = || TreePath(name.to_vec());
        let frame = self
            .frame(fd)
            .map_err(|e| Error::io("getdents64", path(), e))?;
        if name.is_empty() {
            self.top = 0;
            return self.walk(frame, sink);
        }
        let stat = fstat(&frame.fd).map_err(|e| Error::io("fstat", path(), e))?;
        let Some(frame) = self.announce_dir(frame, name, &stat, sink)? else {
            return Ok(());
        };
        self.at.enter(name);
        self.top = name.len() + 1;
        self.walk(frame, sink)?;
        self.at.leave();
        sink.leave_dir()
    }

    /// Walks the tree below the listed directory `root`.
    fn walk<S: Sink>(&mut self, root: Frame, sink: &mut S) -> std::result::Result<(), S::Error> {
        let mut stack = vec![root];
        while let Some(frame) = stack.last_mut() {
            if frame.next == frame.listing.len() {
                let done = stack.pop().expect("frame exists");
                self.pool.push(done.listing);
                if !stack.is_empty() {
                    self.at.leave();
                    sink.leave_dir()?;
                }
                continue;
            }
            let (entry, kind) = frame.listing.get(frame.next);
            frame.next += 1;
            self.name.clear();
            self.name.extend_from_slice(entry);
            let parent = frame.fd.as_fd();
            let name = &self.name[..];
            let path = || self.at.join(name);
            // Kinds other than dirs and files are announced with their metadata; an
            // unknown kind is what the stat says.
            let stat = match kind {
                FileType::Directory | FileType::RegularFile => None,
                _ => match statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => Some(stat),
                    Err(e) => {
                        sink.unreadable(Error::io("fstatat", path(), e))?;
                        continue;
                    }
                },
            };
            let kind = stat.map_or(Kind::of(kind), |s| Kind::of_mode(s.st_mode));
            if let Some(exclude) = self.options.exclude {
                let below_root = || path().0.split_off(self.top);
                if exclude.excludes(name, below_root, kind == Kind::Dir) {
                    continue;
                }
            }
            match (kind, stat) {
                (Kind::Dir, _) if self.pruned(name) => {}
                (Kind::Dir, _) => {
                    let name = std::mem::take(&mut self.name);
                    let opened = self.open_dir(parent, &name, sink);
                    self.name = name;
                    if let Some(dir) = opened? {
                        self.at.enter(&self.name);
                        stack.push(dir);
                    }
                }
                (Kind::File, _) => {
                    let entry = Entry::file(name, Meta::default());
                    sink.file(&entry, Content::Unopened { dir: parent })?;
                }
                (Kind::Symlink, Some(stat)) => {
                    // A target that fills the buffer may be longer than the format takes.
                    let target = match readlinkat_raw(parent, name, &mut self.target[..]) {
                        Ok(len) if len <= MAX_SYMLINK => &self.target[..len],
                        read => {
                            let e = read.err().unwrap_or(Errno::NAMETOOLONG);
                            sink.unreadable(Error::io("readlinkat", path(), e))?;
                            continue;
                        }
                    };
                    let entry = Entry::new(name, kind, Meta::of_stat(&stat));
                    sink.symlink(&entry, target)?;
                }
                (Kind::Fifo | Kind::CharDevice | Kind::BlockDevice, Some(stat)) => {
                    let device = match kind {
                        Kind::Fifo => Device::default(),
                        _ => Device {
                            major: major(stat.st_rdev),
                            minor: minor(stat.st_rdev),
                        },
                    };
                    sink.special(&Entry::new(name, kind, Meta::of_stat(&stat)), device)?;
                }
                (kind, stat) => {
                    let meta = stat.as_ref().map_or(Meta::default(), Meta::of_stat);
                    sink.other(&Entry::new(name, kind, meta))?;
                }
            }
        }
        Ok(())
    }

    /// Opens and lists the directory `name` in `parent` and announces it: entered (its
    /// frame returned, to walk), or empty. One that cannot be opened, stated or listed is
    /// reported unreadable and announced empty (as far as it can be stated).
    fn open_dir<S: Sink>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &[u8],
        sink: &mut S,
    ) -> std::result::Result<Option<Frame>, S::Error> {
        let opened = openat(parent, name, DIR_FLAGS, Mode::empty())
            .map_err(|e| ("open directory", e))
            .and_then(|fd| Ok((fstat(&fd).map_err(|e| ("fstat", e))?, fd)))
            .and_then(|(stat, fd)| Ok((self.frame(fd).map_err(|e| ("getdents64", e))?, stat)))
            .map_err(|(op, e)| Error::io(op, self.at.join(name), e));
        let (frame, stat) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                sink.unreadable(e)?;
                if let Ok(stat) = statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    if Kind::of_mode(stat.st_mode) == Kind::Dir {
                        sink.empty_dir(&Entry::dir(name, Meta::of_stat(&stat)))?;
                    }
                }
                return Ok(None);
            }
        };
        self.announce_dir(frame, name, &stat, sink)
    }

    /// Announces the listed directory `name` (stat `stat`) with its extended attributes:
    /// entered (its frame returned, to walk), or empty.
    fn announce_dir<S: Sink>(
        &mut self,
        mut frame: Frame,
        name: &[u8],
        stat: &Stat,
        sink: &mut S,
    ) -> std::result::Result<Option<Frame>, S::Error> {
        self.read_xattrs(frame.fd.as_fd(), name, sink)?;
        let entry = Entry {
            xattrs: Xattrs(&self.xattrs.wire),
            ..Entry::dir(name, Meta::of_stat(stat))
        };
        if frame.listing.is_empty() {
            self.pool.push(std::mem::take(&mut frame.listing));
            sink.empty_dir(&entry)?;
            return Ok(None);
        }
        sink.enter_dir(&entry)?;
        Ok(Some(frame))
    }

    /// Reads the extended attributes of the directory `fd` (named `name` in the current
    /// directory) into `self.xattrs`, when asked; what cannot be read is reported.
    fn read_xattrs<S: Sink>(
        &mut self,
        fd: BorrowedFd<'_>,
        name: &[u8],
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        self.xattrs.wire.clear();
        if !self.options.xattrs {
            return Ok(());
        }
        match self.xattrs.read(fd) {
            Ok(0) => Ok(()),
            Ok(_) => sink.unreadable(too_many_xattrs(self.at.join(name))),
            Err(e) => sink.unreadable(Error::io("flistxattr", self.at.join(name), e)),
        }
    }

    /// True when the directory `name` in the current one is left out ([`Walk::prune`]);
    /// its path is made only when there is something to prune.
    fn pruned(&self, name: &[u8]) -> bool {
        (self.options.prune).is_some_and(|p| p.contains(&self.at.join(name).0[..]))
    }

    /// Reads the listing of the directory `fd`, sorted.
    fn frame(&mut self, fd: OwnedFd) -> rustix::io::Result<Frame> {
        let mut listing = self.pool.pop().unwrap_or_default();
        listing.read(fd.as_fd(), &mut self.buf)?;
        listing.sort();
        Ok(Frame {
            fd,
            listing,
            next: 0,
        })
    }
}

/// The report of an entry whose extended attributes do not all fit in the format's bound
/// (those that fit are kept, in name order).
pub(crate) fn too_many_xattrs(path: TreePath) -> Error {
    Error::io(
        "keep every extended attribute (256 KiB per entry at most)",
        path,
        Errno::TOOBIG,
    )
}

/// For tests: when root, this thread (and threads it starts) continues as uid and gid 65534
/// without supplementary groups, so permission checks apply.
#[cfg(test)]
pub(crate) fn become_nobody_in_this_thread() {
    if rustix::process::geteuid().is_root() {
        use rustix::process::{Gid, Uid};
        use rustix::thread::{set_thread_gid, set_thread_groups, set_thread_uid};
        set_thread_groups(&[]).unwrap();
        set_thread_gid(Gid::from_raw(65534)).unwrap();
        set_thread_uid(Uid::from_raw(65534)).unwrap();
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;

    use rustix::fs::CWD;

    use super::*;
    use crate::tree::{Recorded, Recording};

    fn open(path: &Path) -> OwnedFd {
        openat(CWD, path, DIR_FLAGS, Mode::empty()).unwrap()
    }

    fn meta_of(path: &Path) -> Meta {
        Meta::of_stat(&statat(CWD, path, AtFlags::SYMLINK_NOFOLLOW).unwrap())
    }

    fn file(path: &Path, data: &[u8]) {
        fs::write(path, data).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o644)).unwrap();
    }

    fn dir(path: &Path) {
        fs::create_dir(path).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn entered(name: &str, at: &Path) -> Recorded {
        Recorded::Enter(name.into(), meta_of(at))
    }

    fn listed_file(name: &str, data: &[u8]) -> Recorded {
        Recorded::File(name.into(), Meta::default(), data.to_vec())
    }

    #[test]
    fn every_kind_comes_with_its_metadata_and_excluded_entries_are_left_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for d in ["a", "c", "c/skip", "e", "skip"] {
            dir(&root.join(d));
        }
        file(&root.join("a/f"), b"f\n");
        file(&root.join("a/x.o"), b"object");
        file(&root.join("skip/g"), b"g");
        file(&root.join("c/skip/h"), b"h");
        symlink("f", root.join("a/l")).unwrap();
        let fifo = root.join("a/p");
        rustix::fs::mknodat(CWD, &fifo, FileType::Fifo, Mode::from(0o640), 0).unwrap();
        let _socket = std::os::unix::net::UnixListener::bind(root.join("a/s")).unwrap();

        let exclude = Exclude::new(["*.o", "/skip/"]).unwrap();
        let mut rec = Recording::default();
        Walk::new()
            .exclude(&exclude)
            .run(open(root), &mut rec)
            .unwrap();
        let a = root.join("a");
        assert_eq!(
            rec.calls,
            [
                entered("a", &a),
                listed_file("f", b"f\n"),
                Recorded::Symlink("l".into(), meta_of(&a.join("l")), b"f".to_vec()),
                Recorded::Special("p".into(), Kind::Fifo, meta_of(&fifo), Device::default()),
                Recorded::Other("s".into(), Kind::Socket),
                Recorded::Leave,
                entered("c", &root.join("c")),
                entered("skip", &root.join("c/skip")),
                listed_file("h", b"h"),
                Recorded::Leave,
                Recorded::Leave,
                Recorded::Empty("e".into(), meta_of(&root.join("e"))),
                Recorded::Finish,
            ]
        );
        let meta = meta_of(&a.join("l"));
        assert!(meta.mtime.is_some() && meta.owner.is_some(), "{meta:?}");
    }

    /// Named roots are top-level directories; a directory that cannot be opened is
    /// reported and announced empty with its metadata, and the walk goes on.
    #[test]
    fn named_roots_are_entered_and_an_unreadable_directory_is_reported_and_left_empty() {
        let tmp = tempfile::tempdir().unwrap();
        fs::set_permissions(tmp.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        dir(&one);
        dir(&two);
        file(&one.join("x"), b"x");
        dir(&two.join("locked"));
        file(&two.join("locked/hidden"), b"hidden");
        file(&two.join("ok"), b"ok");
        fs::set_permissions(two.join("locked"), fs::Permissions::from_mode(0o000)).unwrap();
        let roots = vec![(b"one".to_vec(), open(&one)), (b"2".to_vec(), open(&two))];
        let mut rec = Recording::default();
        std::thread::scope(|scope| {
            scope.spawn(|| {
                // Root passes permission checks: walk as nobody in this thread.
                crate::walk::become_nobody_in_this_thread();
                Walk::new().run_named(roots, &mut rec).unwrap();
            });
        });
        let locked = two.join("locked");
        let locked_meta = meta_of(&locked);
        fs::set_permissions(&locked, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            rec.calls,
            [
                entered("one", &one),
                listed_file("x", b"x"),
                Recorded::Leave,
                entered("2", &two),
                Recorded::Unreadable("2/locked: cannot open directory: Permission denied".into()),
                Recorded::Empty("locked".into(), locked_meta),
                listed_file("ok", b"ok"),
                Recorded::Leave,
                Recorded::Finish,
            ]
        );
    }
}
