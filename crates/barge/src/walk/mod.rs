//! The ordered directory walker, a source of the tree model: getdents64 on directory fds,
//! `openat` relative to the parent, entries sorted by name bytes, no path strings built for
//! syscalls, a [`Sink`] driven.

pub mod parallel;

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{
    fstat, major, minor, openat, readlinkat_raw, statat, statx, AtFlags, FileType, Mode, Stat,
    StatxFlags,
};
use rustix::io::{fcntl_dupfd_cloexec, Errno};

use crate::error::{Error, TreePath};
use crate::exclude::Exclude;
use crate::format::MAX_SYMLINK;
use crate::share::{Place, Share, FILES_A_PART};
use crate::sys::dir::{dirent_buffer, Listing};
use crate::sys::DIR_FLAGS;
use crate::tree::{
    Content, Device, DirPath, Entry, Kind, Meta, Sink, Timestamp, XattrReader, Xattrs,
};

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
    newer: Option<Newer>,
    one_file_system: bool,
    share: Option<&'a Share>,
}

/// A root of a walk: a directory, and what of it the walk takes.
#[derive(Debug)]
pub struct Root {
    /// The name of the directory entry it is announced as (empty: its entries at the top,
    /// and it no entry itself).
    pub(crate) name: Vec<u8>,
    /// The directory, open for reading.
    pub(crate) fd: OwnedFd,
    /// Only these paths below it (with an empty name); none: everything.
    pub(crate) members: Option<Members>,
}

impl Root {
    /// The whole tree below `fd`, announced as the directory `name` (empty: its entries at
    /// the top).
    pub fn tree(name: Vec<u8>, fd: OwnedFd) -> Root {
        Root {
            name,
            fd,
            members: None,
        }
    }

    /// The entries `members` below `fd`, at the top.
    pub fn members(fd: OwnedFd, members: Members) -> Root {
        Root {
            name: Vec::new(),
            fd,
            members: Some(members),
        }
    }

    /// The names of the top-level entries the walk can announce from it, sorted.
    pub fn top_names(&self) -> Vec<&[u8]> {
        match &self.members {
            Some(members) => members.top_names(),
            None => vec![&self.name[..]],
        }
    }
}

/// What a walk takes below a root when not everything (`pack -T`, a file named on the
/// command line): each member with everything below it, and the directories on the way to
/// one, entered with their own metadata but holding only what leads to a member (tar
/// records no such directories; barge's archives name every entry by its directories).
#[derive(Clone, Debug, Default)]
pub struct Members {
    /// The members by path below the root, none below another, each with whether the walk
    /// reached it.
    taken: HashMap<Box<[u8]>, bool>,
    /// The proper ancestors of the members.
    above: HashSet<Box<[u8]>>,
    /// A member is the root itself (`.`): everything is taken.
    everything: bool,
}

impl Members {
    /// The paths `paths` below the root: `/`-separated, with `.` components and repeated
    /// or trailing slashes ignored (`./a//b/` is `a/b`). A path that climbs (`..`) or is
    /// absolute is an [`Error::Argument`]; one given twice or inside another is taken once.
    pub fn new<P: AsRef<[u8]>>(paths: impl IntoIterator<Item = P>) -> Result<Members, Error> {
        let mut normal = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let bad = |problem: &str| Error::Argument {
                arg: crate::error::escape_bytes(path),
                problem: problem.into(),
            };
            if path.first() == Some(&b'/') {
                return Err(bad(
                    "is absolute; name it relative to the directory the paths are found in",
                ));
            }
            let mut parts = Vec::new();
            for part in path.split(|&b| b == b'/') {
                match part {
                    b"" | b"." => {}
                    b".." => {
                        return Err(bad("climbs out with '..' of the directory it is found in"))
                    }
                    part => parts.push(part),
                }
            }
            normal.push(parts.join(&b'/'));
        }
        normal.sort();
        normal.dedup();
        let mut members = Members::default();
        let mut last: Option<&[u8]> = None;
        for path in &normal {
            if path.is_empty() {
                members.everything = true;
                continue;
            }
            // Sorted, so a member's tree follows it: a path inside the last member is in it.
            if last.is_some_and(|l| path.starts_with(l) && path.get(l.len()) == Some(&b'/')) {
                continue;
            }
            last = Some(path);
            members.taken.insert(path[..].into(), false);
            for (i, _) in path.iter().enumerate().filter(|(_, &b)| b == b'/') {
                members.above.insert(path[..i].into());
            }
        }
        Ok(members)
    }

    /// The first components of the members, sorted (an empty one when everything is
    /// taken: the root's entries are all at the top).
    fn top_names(&self) -> Vec<&[u8]> {
        if self.everything {
            return vec![b""];
        }
        let mut names: Vec<&[u8]> = (self.taken.keys())
            .map(|path| path.split(|&b| b == b'/').next().unwrap_or(path))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// What the walk does with the entry at `path`: takes it whole (noting that it reached
    /// it), enters it for what leads to a member, or leaves it out.
    fn take(&mut self, path: &[u8]) -> Take {
        if let Some(reached) = self.taken.get_mut(path) {
            *reached = true;
            Take::Whole
        } else if self.above.contains(path) {
            Take::Above
        } else {
            Take::No
        }
    }

    /// The members the walk did not reach, sorted.
    fn unreached(&self) -> Vec<&[u8]> {
        let mut paths: Vec<&[u8]> = (self.taken.iter())
            .filter(|(_, &reached)| !reached)
            .map(|(path, _)| &path[..])
            .collect();
        paths.sort();
        paths
    }

    /// Why each member the walk did not reach below `base` is not there: missing, or behind
    /// a symlink or a mount point the walk does not cross.
    fn unreached_errors(&self, base: BorrowedFd<'_>) -> Vec<Error> {
        let why = |path: &[u8]| match statat(base, path, AtFlags::SYMLINK_NOFOLLOW) {
            Err(e) => Error::io("stat", TreePath(path.to_vec()), e),
            Ok(_) => Error::Argument {
                arg: crate::error::escape_bytes(path),
                problem: "not reached: a symlink (never followed) or another filesystem is \
                          on its way"
                    .into(),
            },
        };
        self.unreached().into_iter().map(why).collect()
    }
}

/// What [`Members::take`] says of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Take {
    Whole,
    Above,
    No,
}

/// What `pack --newer` keeps besides directories: entries changed at or after `since`, by
/// their modification time or, unless `mtime_only`, their status change time (GNU tar's
/// `--newer`, and `--newer-mtime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Newer {
    /// The date.
    pub since: Timestamp,
    /// Looks at modification times alone.
    pub mtime_only: bool,
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

    /// Leaves out every entry but directories that `newer` does not keep (one more `statx`
    /// per entry that is no directory).
    pub fn newer(mut self, newer: Option<Newer>) -> Walk<'a> {
        self.newer = newer;
        self
    }

    /// Announces a directory on another filesystem than its root's empty (a mount point is
    /// kept, its contents are not: `tar --one-file-system`).
    pub fn one_file_system(mut self, yes: bool) -> Walk<'a> {
        self.one_file_system = yes;
        self
    }

    /// Walks only `share` of the tree: its parts, and the directories above the parts it
    /// announces; the others are walked unannounced. Before each entry it announces after
    /// entries it did not, [`Sink::resume`] says which directory the walk is in, and before
    /// the first entry of each part, [`Sink::part_begins`] says so.
    pub fn share(mut self, share: &'a Share) -> Walk<'a> {
        self.share = Some(share);
        self
    }

    /// Walks the tree below the directory `root` (its entries come at the top: `root`
    /// itself is no entry), then calls [`Sink::finish`], or [`Sink::abort`] on a failure.
    pub fn run<S: Sink>(self, root: OwnedFd, sink: &mut S) -> std::result::Result<(), S::Error> {
        self.run_named(vec![Root::tree(Vec::new(), root)], sink)
    }

    /// Walks each of `roots` as a directory entry named by its name (entered with its own
    /// metadata, its tree below it) in the order given, then calls [`Sink::finish`], or
    /// [`Sink::abort`] on a failure. An empty name walks that root's entries at the top,
    /// as [`Walk::run`] does (only its members, when it has some; each member it does not
    /// reach is reported through [`Sink::unreadable`]).
    pub fn run_named<S: Sink>(
        self,
        roots: Vec<Root>,
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        if let Some(share) = self.share {
            share.restart();
        }
        let mut walker = Walker {
            options: self,
            buf: dirent_buffer(),
            pool: Vec::new(),
            name: Vec::with_capacity(256),
            at: DirPath::default(),
            top: 0,
            xattrs: XattrReader::default(),
            target: vec![0; MAX_SYMLINK + 1],
            members: None,
            dev: 0,
            announcer: Announcer {
                share: self.share,
                announcing: false,
                joining: 0,
                taking: false,
            },
        };
        let walked = roots
            .into_iter()
            .try_for_each(|root| walker.root(root, sink));
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
    /// Everything in it is taken (else only what [`Members::take`] takes).
    whole: bool,
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
    /// The current root's members, if it has some.
    members: Option<Members>,
    /// The current root's device (`--one-file-system`).
    dev: u64,
    announcer: Announcer<'a>,
}

impl Walker<'_> {
    /// Where the entry `depth` levels down (a directory when `dir`) is in the share's split;
    /// without a share, where it is matters not (everything is announced).
    fn place(&self, depth: usize, dir: bool) -> Place {
        self.options
            .share
            .map_or(Place::Below, |share| share.place(depth, dir))
    }

    /// Walks the root `fd`: as the directory `name`, or its entries at the top when the
    /// name is empty.
    fn root<S: Sink>(&mut self, root: Root, sink: &mut S) -> std::result::Result<(), S::Error> {
        let name = &root.name[..];
        if self.pruned(name) {
            return Ok(());
        }
        let path = || TreePath(name.to_vec());
        let stat = fstat(&root.fd).map_err(|e| Error::io("fstat", path(), e))?;
        self.dev = stat.st_dev;
        self.members = root.members.filter(|m| !m.everything);
        // A duplicate, to look for the members the walk did not reach once it is done.
        let base = match self.members.is_some() {
            true => {
                Some(fcntl_dupfd_cloexec(&root.fd, 0).map_err(|e| Error::io("dup", path(), e))?)
            }
            false => None,
        };
        let mut frame = self
            .frame(root.fd)
            .map_err(|e| Error::io("getdents64", path(), e))?;
        frame.whole = self.members.is_none();
        if name.is_empty() {
            self.top = 0;
            self.walk(frame, sink)?;
            return match base {
                Some(base) => self.unreached(base.as_fd(), sink),
                None => Ok(()),
            };
        }
        let Some(frame) = self.announce_dir(frame, name, &stat, sink)? else {
            return Ok(());
        };
        self.at.enter(name);
        self.top = name.len() + 1;
        self.walk(frame, sink)?;
        self.at.leave();
        sink.leave_dir()
    }

    /// Reports each member the walk did not reach below `base`: missing, or behind a
    /// symlink or a mount point it does not cross.
    fn unreached<S: Sink>(
        &mut self,
        base: BorrowedFd<'_>,
        sink: &mut S,
    ) -> std::result::Result<(), S::Error> {
        let Some(members) = self.members.take() else {
            return Ok(());
        };
        for error in members.unreached_errors(base) {
            sink.unreadable(error)?;
        }
        Ok(())
    }

    /// Walks the tree below the listed directory `root`.
    fn walk<S: Sink>(&mut self, root: Frame, sink: &mut S) -> std::result::Result<(), S::Error> {
        let mut stack = vec![root];
        loop {
            // The depth of the entries of the directory at the top of the stack.
            let depth = stack.len();
            let Some(frame) = stack.last_mut() else {
                break;
            };
            if frame.next == frame.listing.len() {
                let done = stack.pop().expect("frame exists");
                self.pool.push(done.listing);
                self.announcer.joining = 0;
                if !stack.is_empty() {
                    // A share may resume inside the directory, to leave it.
                    let place = self.place(depth - 1, true);
                    let tells = self.announcer.tells(&self.at, place, sink)?;
                    self.at.leave();
                    if tells {
                        sink.leave_dir()?;
                    }
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
            // Where an entry that could not be stated is reported, with a share.
            let lost = match self.place(depth, true) {
                Place::Below => Place::Below,
                _ => Place::Spine,
            };
            // Kinds other than dirs and files are announced with their metadata; an
            // unknown kind is what the stat says.
            let stat = match kind {
                FileType::Directory | FileType::RegularFile => None,
                _ => match statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(stat) => Some(stat),
                    Err(e) => {
                        if self.announcer.tells(&self.at, lost, sink)? {
                            sink.unreadable(Error::io("fstatat", path(), e))?;
                        }
                        continue;
                    }
                },
            };
            let kind = stat.map_or(Kind::of(kind), |s| Kind::of_mode(s.st_mode));
            let take = match (&mut self.members, frame.whole) {
                (Some(members), false) => members.take(&path().0[self.top..]),
                _ => Take::Whole,
            };
            if take == Take::No || (take == Take::Above && kind != Kind::Dir) {
                continue;
            }
            if let Some(exclude) = self.options.exclude {
                let below_root = || path().0.split_off(self.top);
                if exclude.excludes(name, below_root, kind == Kind::Dir) {
                    continue;
                }
            }
            if let (Some(newer), false) = (self.options.newer, kind == Kind::Dir) {
                let times = StatxFlags::MTIME | StatxFlags::CTIME;
                match statx(parent, name, AtFlags::SYMLINK_NOFOLLOW, times) {
                    Ok(st) if !newer.keeps(&st) => continue,
                    Ok(_) => {}
                    Err(e) => {
                        if self.announcer.tells(&self.at, lost, sink)? {
                            sink.unreadable(Error::io("statx", path(), e))?;
                        }
                        continue;
                    }
                }
            }
            let whole = frame.whole || take == Take::Whole;
            let place = self.place(depth, kind == Kind::Dir);
            let Some(begins) = self.announcer.part(place, kind == Kind::Dir) else {
                continue;
            };
            let tells = self.announcer.tells(&self.at, place, sink)?;
            if begins {
                sink.part_begins()?;
            }
            match (kind, stat) {
                (Kind::Dir, _) if self.pruned(name) => {}
                (Kind::Dir, _) => {
                    let name = std::mem::take(&mut self.name);
                    let opened = match tells {
                        true => self.open_dir(parent, &name, whole, sink),
                        false => {
                            self.open_dir(parent, &name, whole, &mut Quiet::<S::Error>(PhantomData))
                        }
                    };
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
    /// `whole`: everything below it is taken. With [`Walk::one_file_system`], a directory on
    /// another filesystem is announced empty, unlisted.
    fn open_dir<S: Sink>(
        &mut self,
        parent: BorrowedFd<'_>,
        name: &[u8],
        whole: bool,
        sink: &mut S,
    ) -> std::result::Result<Option<Frame>, S::Error> {
        let opened = openat(parent, name, DIR_FLAGS, Mode::empty())
            .map_err(|e| ("open directory", e))
            .and_then(|fd| Ok((fstat(&fd).map_err(|e| ("fstat", e))?, fd)))
            .and_then(|(stat, fd)| {
                let frame = match self.options.one_file_system && stat.st_dev != self.dev {
                    true => Ok(Frame::unlisted(fd)),
                    false => self.frame(fd),
                };
                Ok((frame.map_err(|e| ("getdents64", e))?, stat))
            })
            .map_err(|(op, e)| Error::io(op, self.at.join(name), e));
        let (frame, stat) = match opened {
            Ok((frame, stat)) => (Frame { whole, ..frame }, stat),
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
            whole: true,
        })
    }
}

impl Frame {
    /// The frame of a directory that is not listed: announced empty.
    fn unlisted(fd: OwnedFd) -> Frame {
        Frame {
            fd,
            listing: Listing::default(),
            next: 0,
            whole: true,
        }
    }
}

impl Newer {
    /// True when the entry `st` (its times) is kept.
    fn keeps(&self, st: &rustix::fs::Statx) -> bool {
        let time = |t: rustix::fs::StatxTimestamp| Timestamp {
            sec: t.tv_sec,
            nsec: t.tv_nsec,
        };
        time(st.stx_mtime) >= self.since || (!self.mtime_only && time(st.stx_ctime) >= self.since)
    }
}

/// Which entries a walk announces: with a `share`, its parts, and the entries above the
/// parts only where the share says so (see [`Share`]); one announced after one that was
/// not is preceded by [`Sink::resume`].
struct Announcer<'a> {
    share: Option<&'a Share>,
    /// The last entry was announced.
    announcing: bool,
    /// How many more entries other than directories may join the part the last one began
    /// ([`FILES_A_PART`]), and whether that part is the share's.
    joining: usize,
    taking: bool,
}

impl Announcer<'_> {
    /// At an entry at `place` (a directory when `dir`): `None` where it is in a part that is
    /// not the share's (a directory then not walked), else whether it begins a part. Up to
    /// [`FILES_A_PART`] entries other than directories in a row are one part; a directory
    /// ends such a run.
    fn part(&mut self, place: Place, dir: bool) -> Option<bool> {
        let share = match (place, self.share) {
            (Place::Part, Some(share)) => share,
            _ => {
                if dir {
                    self.joining = 0;
                }
                return Some(false);
            }
        };
        let begins = dir || self.joining == 0;
        if begins {
            self.taking = share.takes_next();
            self.joining = if dir { 0 } else { FILES_A_PART };
        }
        self.joining = self.joining.saturating_sub(1);
        if !self.taking {
            self.announcing = false;
            return None;
        }
        Some(begins)
    }

    /// Whether an entry at `place` in the directory `at` is announced.
    fn tells<S: Sink>(
        &mut self,
        at: &DirPath,
        place: Place,
        sink: &mut S,
    ) -> std::result::Result<bool, S::Error> {
        let Some(share) = self.share else {
            return Ok(true);
        };
        let tells = place != Place::Spine || share.tells_spine();
        if tells && !self.announcing {
            sink.resume(at)?;
        }
        self.announcing = tells;
        Ok(tells)
    }
}

/// A sink that ignores everything it is told, for a directory walked unannounced (above
/// the parts of a share, not its own, or a walk that only counts parts), with the errors
/// `E` of the walk's sink.
pub(crate) struct Quiet<E>(pub(crate) PhantomData<E>);

impl<E: From<Error>> Sink for Quiet<E> {
    type Error = E;

    fn enter_dir(&mut self, _: &Entry<'_>) -> std::result::Result<(), E> {
        Ok(())
    }
    fn leave_dir(&mut self) -> std::result::Result<(), E> {
        Ok(())
    }
    fn file(&mut self, _: &Entry<'_>, _: Content<'_>) -> std::result::Result<(), E> {
        Ok(())
    }
    fn unreadable(&mut self, _: Error) -> std::result::Result<(), E> {
        Ok(())
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
        let roots = vec![
            Root::tree(b"one".to_vec(), open(&one)),
            Root::tree(b"2".to_vec(), open(&two)),
        ];
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

    /// Members: each with its tree, the directories on the way entered with only what
    /// leads to one, a path inside another taken once, and one the walk does not reach
    /// reported; `..` and absolute paths refused.
    #[test]
    fn members_are_walked_with_the_directories_on_their_way() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for d in ["a", "a/b", "c", "c/d"] {
            dir(&root.join(d));
        }
        file(&root.join("a/b/f"), b"f");
        file(&root.join("a/g"), b"g");
        file(&root.join("c/d/h"), b"h");
        file(&root.join("top"), b"t");
        let paths = ["./a//b/f/", "c", "c/d/h", "top", "missing"];
        let members = Members::new(paths).unwrap();
        let mut rec = Recording::default();
        let roots = vec![Root::members(open(root), members)];
        Walk::new().run_named(roots, &mut rec).unwrap();
        assert_eq!(
            rec.calls,
            [
                entered("a", &root.join("a")),
                entered("b", &root.join("a/b")),
                listed_file("f", b"f"),
                Recorded::Leave,
                Recorded::Leave,
                entered("c", &root.join("c")),
                entered("d", &root.join("c/d")),
                listed_file("h", b"h"),
                Recorded::Leave,
                Recorded::Leave,
                listed_file("top", b"t"),
                Recorded::Unreadable("missing: cannot access: No such file or directory".into()),
                Recorded::Finish,
            ]
        );
        for bad in ["a/../..", "/etc"] {
            assert!(
                matches!(Members::new([bad]), Err(Error::Argument { .. })),
                "{bad}"
            );
        }
    }
}
