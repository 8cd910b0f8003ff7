//! What a tree already holds, for `send --update`: the receiver lists its destination
//! ([`Listing::of_dir`], one `statx` per entry on the parallel walker), sends the listing
//! ([`Listing::write_to`], the form in docs/FORMAT.md, "Update listing"), and the sender
//! reads it with limits ([`Listing::read_from`]) and packs only what differs
//! ([`crate::pack::Pack::unchanged`]).
//!
//! A listing holds every directory (its mode and time) with its regular files and symlinks:
//! special files are always sent, so nothing else is worth asking about. Before it packs,
//! the sender checks its tree against the listing on the parallel walker
//! (`Listing::unchanged_dirs`), so that the ordered pack leaves out whole directories
//! that are as listed, everything below them included, without a `statx` of their entries.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use rustix::fs::{openat, statx, AtFlags, Mode, Statx};
use rustix::io::Errno;

use crate::compare::{inode_key, Facts, InodeKey, Rule, STATX_MASK};
use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::format::{check_name, MAX_NAME, MAX_SYMLINK};
use crate::sys::DIR_FLAGS;
use crate::tree::{Entry, Kind, Meta, Owner, Timestamp};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};

/// The first bytes of a listing: its magic and version 3; the last byte is its flags.
const HEADER: [u8; 8] = *b"BLIST\x00\x03\x00";
/// The flag that says the lister keeps owners (they are then compared).
const OWNERS_KEPT: u8 = 0x01;
/// Tag of a directory's record.
const DIR: u8 = 0x01;
/// Tag of the end record.
const END: u8 = 0x00;
/// Longest directory path a listing carries (Linux's `PATH_MAX`): [`Listing::write_to`]
/// leaves out deeper directories (their entries are then sent), and it is the default
/// [`ListingLimits::max_path`].
const MAX_PATH: usize = 4096;
/// Bytes of an item besides its name: kind, name length, size, seconds, nanoseconds, mode,
/// links, link group, uid, gid.
const ITEM: usize = 1 + 1 + 8 + 8 + 4 + 2 + 4 + 4 + 4 + 4;

/// A regular file or symlink as a listing describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// [`Kind::File`] or [`Kind::Symlink`].
    pub kind: Kind,
    /// Bytes of content; of a symlink, of its target.
    pub size: u64,
    /// Modification time, to the nanosecond.
    pub mtime: Timestamp,
    /// Permission bits, all twelve (0 for a symlink).
    pub mode: u32,
    /// A file's number of hard links (`st_nlink`, names outside the tree included; 0 for
    /// a symlink).
    pub links: u32,
    /// 0 for a file with one link; else a number shared by the names in the listing of one
    /// inode and no other.
    pub group: u32,
    /// Numeric owner.
    pub owner: Owner,
}

impl Item {
    /// The regular file or symlink `st` describes, as listed (with no link group yet);
    /// `None` for any other kind.
    fn of_statx(st: &Statx) -> Option<Item> {
        let meta = Meta::of_statx(st);
        let (kind, mode, links) = match Kind::of_mode(st.stx_mode.into()) {
            Kind::File => (Kind::File, meta.mode, st.stx_nlink),
            Kind::Symlink => (Kind::Symlink, 0, 0),
            _ => return None,
        };
        Some(Item {
            kind,
            size: st.stx_size,
            mtime: meta.mtime.unwrap_or_default(),
            mode,
            links,
            group: 0,
            owner: meta.owner.unwrap_or_default(),
        })
    }

    /// True when this is still the regular file or symlink `st` describes, by `rule`
    /// (links are the caller's to compare).
    pub(crate) fn matches(&self, st: &Statx, rule: Rule) -> bool {
        let listed = Facts {
            kind: self.kind,
            size: self.size,
            meta: Meta {
                mode: self.mode,
                mtime: Some(self.mtime),
                owner: Some(self.owner),
            },
        };
        rule.unchanged(&Facts::of_statx(st), &listed)
    }
}

/// A directory as a listing describes it: its own permission bits, modification time and
/// owner, and its files and symlinks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct ListedDir {
    meta: DirMeta,
    names: Names,
}

/// The directories of a tree with their files and symlinks: each directory by its path
/// below the root (names joined by `/`, empty for the root, as an archive's paths go), with
/// its mode and time, then each entry by its name in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    dirs: HashMap<Box<[u8]>, ListedDir>,
    /// The lister keeps owners: they are compared where the sender sends them.
    owners: bool,
    entries: u64,
    /// Entries that could not be listed (left out).
    unlisted: u64,
}

/// The entries of one directory, by name.
pub(crate) type Names = HashMap<Box<[u8]>, Item>;

/// Bounds on a listing read from elsewhere ([`Listing::read_from`]): what the peer may make
/// this process hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListingLimits {
    /// Most entries.
    pub max_entries: u64,
    /// Longest directory path, in bytes.
    pub max_path: usize,
    /// Most bytes of listing.
    pub max_bytes: u64,
}

impl Default for ListingLimits {
    /// 4 million entries, paths of 4096 bytes (Linux's `PATH_MAX`), 256 MiB (about 400 MiB
    /// held at most).
    fn default() -> ListingLimits {
        ListingLimits {
            max_entries: 4_000_000,
            max_path: MAX_PATH,
            max_bytes: 256 << 20,
        }
    }
}

impl Listing {
    /// Lists the tree below the directory `root` on up to `threads` threads: each entry
    /// `statx`ed once, relative to its directory's fd, never followed. Entries that cannot
    /// be listed are left out (a sender then sends them) and counted in
    /// [`Listing::unlisted`]. `owners`: the lister restores owners (see
    /// [`Listing::owners`]).
    pub fn of_dir(root: OwnedFd, threads: usize, owners: bool) -> Listing {
        let gather = Gather::default();
        let Ok(stat) = statx(&root, "", AtFlags::EMPTY_PATH, STATX_MASK) else {
            return Listing {
                unlisted: 1,
                owners,
                ..Listing::default()
            };
        };
        WalkParallel::new(root, b"")
            .threads(threads)
            .visit(&mut &gather, Meta::of_statx(&stat));
        let mut listing = gather.listing.into_inner().expect("no panics");
        listing.unlisted += gather.unlisted.into_inner().expect("no panics");
        listing.owners = owners;
        listing
    }

    /// True when the lister keeps owners: a sender that sends them (archive mode) then
    /// counts an owner change as a change.
    pub fn owners(&self) -> bool {
        self.owners
    }

    /// The unchanged rule of a sender with `archive` (owners sent) against this listing.
    pub(crate) fn rule(&self, archive: bool) -> Rule {
        Rule {
            owners: archive && self.owners,
        }
    }

    /// Files and symlinks listed.
    pub fn len(&self) -> u64 {
        self.entries
    }

    /// True when nothing is listed.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Entries [`Listing::of_dir`] could not list.
    pub fn unlisted(&self) -> u64 {
        self.unlisted
    }

    /// The entry at `path` (below the root, names joined by `/`).
    pub fn get(&self, path: &[u8]) -> Option<&Item> {
        let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
            Some(slash) => (&path[..slash], &path[slash + 1..]),
            None => (&path[..0], path),
        };
        self.dir(dir)?.get(name)
    }

    /// The entries of the directory at `path`, if it is listed.
    pub(crate) fn dir(&self, path: &[u8]) -> Option<&Names> {
        self.dirs.get(path).map(|d| &d.names)
    }

    /// Adds the directory `path`, which must not be listed yet.
    fn add_dir(&mut self, path: Box<[u8]>, dir: ListedDir) {
        self.entries += dir.names.len() as u64;
        let old = self.dirs.insert(path, dir);
        debug_assert!(old.is_none(), "each directory is listed once");
    }

    /// Checks the trees `roots` (named as [`crate::pack::Pack::named`] names them; an empty
    /// name puts a root's entries at the top) against the listing on up to `threads`
    /// threads, one `statx` per entry, leaving out what `exclude` matches: the directories
    /// that are as listed, with everything in and below them. Such a directory is listed
    /// with the same permission bits and modification time, and each of its entries is a
    /// directory of the same kind or a file or symlink of one link that the listing shows
    /// as it is here (by `rule`, see [`Item::matches`]). Anything else (a special file, a file with
    /// several links, which the pack decides in order, an entry that cannot be stated, a
    /// directory the listing lacks, which is not looked into) makes its directory and those
    /// above it changed; a failure of the walk itself finds nothing unchanged.
    pub(crate) fn unchanged_dirs(
        &self,
        roots: &[(Vec<u8>, OwnedFd)],
        exclude: &Exclude,
        threads: usize,
        rule: Rule,
    ) -> Unchanged {
        let check = Check {
            listing: self,
            rule,
            dirs: Mutex::default(),
            failed: AtomicBool::new(false),
        };
        for (name, fd) in roots {
            // Opened anew: a duplicate would share the position the pack's listing reads from.
            let root = openat(fd, c".", DIR_FLAGS, Mode::empty())
                .and_then(|fd| Ok((statx(&fd, "", AtFlags::EMPTY_PATH, STATX_MASK)?, fd)));
            let Ok((stat, root)) = root else {
                return Unchanged::default();
            };
            // An unnamed root is no entry: its own mode and time are not sent.
            let meta = (!name.is_empty()).then(|| Meta::of_statx(&stat));
            let Some(state) = check.state(name, meta) else {
                continue;
            };
            WalkParallel::new(root, name)
                .threads(threads)
                .exclude(exclude.clone())
                .visit(&mut &check, state);
        }
        if check.failed.into_inner() {
            return Unchanged::default();
        }
        let checked = check.dirs.into_inner().expect("no panics");
        // A changed directory is entered, and so are those above it.
        let mut entered = HashSet::new();
        for (path, _) in checked.iter().filter(|(_, found)| found.is_none()) {
            let mut path = &path[..];
            while entered.insert(path) {
                match path.iter().rposition(|&b| b == b'/') {
                    Some(slash) => path = &path[..slash],
                    None if !path.is_empty() => path = &path[..0],
                    None => break,
                }
            }
        }
        let mut unchanged = Unchanged::default();
        for (path, found) in &checked {
            if let (false, Some((entries, bytes))) = (entered.contains(&path[..]), found) {
                unchanged.entries += entries;
                unchanged.bytes += bytes;
                unchanged.dirs.insert(path.clone());
            }
        }
        unchanged
    }

    /// Writes the listing to `out` in its wire form (docs/FORMAT.md, "Update listing"),
    /// leaving out directories whose path is longer than 4096 bytes.
    pub fn write_to(&self, out: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(64 << 10, out);
        let flags = if self.owners { OWNERS_KEPT } else { 0 };
        out.write_all(&HEADER[..7])?;
        out.write_all(&[flags])?;
        let mut item = Vec::with_capacity(ITEM + MAX_NAME);
        let (mut dirs, mut entries) = (0u64, 0u64);
        for (path, dir) in self.dirs.iter().filter(|(p, _)| p.len() <= MAX_PATH) {
            dirs += 1;
            entries += dir.names.len() as u64;
            out.write_all(&[DIR])?;
            out.write_all(&(path.len() as u16).to_le_bytes())?;
            out.write_all(path)?;
            let (mode, mtime) = (dir.meta.mode, dir.meta.mtime.unwrap_or_default());
            let owner = dir.meta.owner.unwrap_or_default();
            out.write_all(&(mode as u16).to_le_bytes())?;
            out.write_all(&mtime.sec.to_le_bytes())?;
            out.write_all(&mtime.nsec.to_le_bytes())?;
            out.write_all(&owner.uid.to_le_bytes())?;
            out.write_all(&owner.gid.to_le_bytes())?;
            out.write_all(&(dir.names.len() as u32).to_le_bytes())?;
            for (name, e) in &dir.names {
                item.clear();
                item.push(if e.kind == Kind::Symlink { 2 } else { 1 });
                item.push(name.len() as u8);
                item.extend_from_slice(name);
                item.extend_from_slice(&e.size.to_le_bytes());
                item.extend_from_slice(&e.mtime.sec.to_le_bytes());
                item.extend_from_slice(&e.mtime.nsec.to_le_bytes());
                item.extend_from_slice(&(e.mode as u16).to_le_bytes());
                item.extend_from_slice(&e.links.to_le_bytes());
                item.extend_from_slice(&e.group.to_le_bytes());
                item.extend_from_slice(&e.owner.uid.to_le_bytes());
                item.extend_from_slice(&e.owner.gid.to_le_bytes());
                out.write_all(&item)?;
            }
        }
        out.write_all(&[END])?;
        out.write_all(&dirs.to_le_bytes())?;
        out.write_all(&entries.to_le_bytes())?;
        out.into_inner().map_err(|e| e.into_error())?.flush()
    }

    /// Reads a listing in its wire form from `bytes` (the listing and nothing after its
    /// end record), checking every field and `limits` before it holds anything: a listing
    /// that is malformed, breaks a limit, ends early or has bytes after its end is an
    /// [`Error::Listing`] with the offset of the record at fault (of the field where it
    /// ends early or passes the bytes limit).
    pub fn read_from(bytes: &[u8], limits: ListingLimits) -> Result<Listing> {
        let mut reader = Reader {
            bytes,
            offset: 0,
            limits,
        };
        let listing = reader.read()?;
        match bytes.len() as u64 - reader.offset {
            0 => Ok(listing),
            after => Err(bad(
                reader.offset,
                format!("{after} bytes after the end record"),
            )),
        }
    }
}

/// A listing being read: its bytes, how far into them, and its bounds.
struct Reader<'b> {
    bytes: &'b [u8],
    offset: u64,
    limits: ListingLimits,
}

impl<'b> Reader<'b> {
    /// Reads up to and including the end record.
    fn read(&mut self) -> Result<Listing> {
        let header = self.take(HEADER.len())?;
        if header[..6] != HEADER[..6] {
            return Err(bad(0, "not an update listing (bad magic)".into()));
        }
        if header[6] != HEADER[6] || header[7] & !OWNERS_KEPT != 0 {
            let problem = format!("unsupported listing version {}.{}", header[6], header[7]);
            return Err(bad(0, problem));
        }
        let mut listing = Listing {
            owners: header[7] & OWNERS_KEPT != 0,
            ..Listing::default()
        };
        loop {
            let at = self.offset;
            match self.u8()? {
                DIR => {}
                END => {
                    let dirs = self.u64()?;
                    let entries = self.u64()?;
                    if dirs != listing.dirs.len() as u64 || entries != listing.entries {
                        let problem = format!(
                            "the end record counts {dirs} directories and {entries} entries \
                             where {} and {} came",
                            listing.dirs.len(),
                            listing.entries
                        );
                        return Err(bad(at, problem));
                    }
                    return Ok(listing);
                }
                tag => return Err(bad(at, format!("unknown record tag 0x{tag:02x}"))),
            }
            let len = usize::from(self.u16()?);
            if len > self.limits.max_path {
                let problem = format!(
                    "directory path of {len} bytes, more than the limit of {}",
                    self.limits.max_path
                );
                return Err(bad(at, problem));
            }
            let path = self.take(len)?;
            if len > 0 {
                for name in path.split(|&b| b == b'/') {
                    if let Err(e) = check_name(name) {
                        let problem = format!("directory path {}: {e}", TreePath(path.to_vec()));
                        return Err(bad(at, problem));
                    }
                }
            }
            if listing.dirs.contains_key(path) {
                let problem = format!("directory {} listed twice", TreePath(path.to_vec()));
                return Err(bad(at, problem));
            }
            let mode = u32::from(self.u16()?);
            let sec = self.u64()? as i64;
            let nsec = self.u32()?;
            let owner = self.owner()?;
            if let Some(problem) = bad_time_or_mode(nsec, mode) {
                let problem = format!("directory {}: {problem}", TreePath(path.to_vec()));
                return Err(bad(at, problem));
            }
            let count = u64::from(self.u32()?);
            if listing.entries + count > self.limits.max_entries {
                let problem = format!("more than the limit of {} entries", self.limits.max_entries);
                return Err(bad(at, problem));
            }
            // Each item is at least ITEM + 1 bytes: no more room is taken than the bytes
            // left can fill.
            let left = (self.bytes.len() as u64).min(self.limits.max_bytes) - self.offset;
            let mut names = Names::with_capacity(count.min(left / ITEM as u64) as usize);
            for _ in 0..count {
                let (name, listed) = self.item(path)?;
                if names.insert(name.into(), listed).is_some() {
                    let problem = format!("{}: a name listed twice", TreePath(path.to_vec()));
                    return Err(bad(at, problem));
                }
            }
            let dir = ListedDir {
                meta: Meta {
                    mode,
                    mtime: Some(Timestamp { sec, nsec }),
                    owner: Some(owner),
                },
                names,
            };
            listing.add_dir(path.into(), dir);
        }
    }

    /// One item of the directory `dir`: its name and what it says.
    fn item(&mut self, dir: &[u8]) -> Result<(&'b [u8], Item)> {
        let at = self.offset;
        let kind = match self.u8()? {
            1 => Kind::File,
            2 => Kind::Symlink,
            other => return Err(bad(at, format!("unknown entry kind {other}"))),
        };
        let len = usize::from(self.u8()?);
        let name = self.take(len)?;
        let path = || TreePath::join([dir], name);
        if let Err(e) = check_name(name) {
            return Err(bad(at, format!("{}: {e}", path())));
        }
        let size = self.u64()?;
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        let mode = u32::from(self.u16()?);
        let links = self.u32()?;
        let group = self.u32()?;
        let owner = self.owner()?;
        let problem = if let Some(problem) = bad_time_or_mode(nsec, mode) {
            Some(problem)
        } else if kind == Kind::Symlink && !(1..=MAX_SYMLINK as u64).contains(&size) {
            Some(format!(
                "a symlink target of {size} bytes (1 to {MAX_SYMLINK})"
            ))
        } else if kind == Kind::Symlink && (mode, links, group) != (0, 0, 0) {
            Some("a symlink with a mode, links or a link group".into())
        } else if kind == Kind::File && (links == 0 || (links == 1) != (group == 0)) {
            Some(format!("{links} links in link group {group}"))
        } else {
            None
        };
        if let Some(problem) = problem {
            return Err(bad(at, format!("{}: {problem}", path())));
        }
        let listed = Item {
            kind,
            size,
            mtime: Timestamp { sec, nsec },
            mode,
            links,
            group,
            owner,
        };
        Ok((name, listed))
    }

    /// The next `n` bytes, within the bytes limit.
    fn take(&mut self, n: usize) -> Result<&'b [u8]> {
        let end = self.offset + n as u64;
        if end > self.limits.max_bytes {
            let problem = format!("longer than the limit of {} bytes", self.limits.max_bytes);
            return Err(bad(self.offset, problem));
        }
        let Some(taken) = self.bytes.get(self.offset as usize..end as usize) else {
            return Err(bad(self.offset, "the listing ends early".into()));
        };
        self.offset = end;
        Ok(taken)
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("N bytes"))
    }

    fn u8(&mut self) -> Result<u8> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64> {
        self.array().map(u64::from_le_bytes)
    }

    fn owner(&mut self) -> Result<Owner> {
        Ok(Owner {
            uid: self.u32()?,
            gid: self.u32()?,
        })
    }
}

/// What is wrong with nanoseconds `nsec` and permission bits `mode` read from a listing.
fn bad_time_or_mode(nsec: u32, mode: u32) -> Option<String> {
    if nsec >= 1_000_000_000 {
        Some(format!("nanoseconds {nsec}, not below 10^9"))
    } else if mode > 0o7777 {
        Some(format!("mode 0o{mode:o}, more than 0o7777"))
    } else {
        None
    }
}

/// The error for a listing that is wrong at byte `offset`.
fn bad(offset: u64, problem: String) -> Error {
    Error::Listing { offset, problem }
}

/// A listing being gathered by the walking threads.
#[derive(Default)]
struct Gather {
    listing: Mutex<Listing>,
    /// The link group of each inode with several links met so far.
    groups: Mutex<HashMap<InodeKey, u32>>,
    unlisted: Mutex<u64>,
}

impl Gather {
    /// The link group of the inode `stat` describes.
    fn group(&self, stat: &Statx) -> u32 {
        if stat.stx_nlink < 2 {
            return 0;
        }
        let mut groups = self.groups.lock().expect("no panics");
        let next = groups.len() as u32 + 1;
        *groups.entry(inode_key(stat)).or_insert(next)
    }
}

impl<'a> ParallelVisitorBuilder for &'a Gather {
    type Visitor = Lister<'a>;

    fn build(&mut self) -> Lister<'a> {
        Lister {
            gather: self,
            names: Names::new(),
        }
    }
}

/// One walking thread's visitor: the entries of the directory it lists.
struct Lister<'a> {
    gather: &'a Gather,
    names: Names,
}

/// A directory's permission bits, modification time and owner.
type DirMeta = Meta;

/// What the unchanged rule compares of a directory with `meta`.
fn dir_facts(meta: Meta) -> Facts {
    Facts {
        kind: Kind::Dir,
        size: 0,
        meta,
    }
}

impl ParallelVisitor for Lister<'_> {
    type State = DirMeta;

    fn enter_dir(
        &mut self,
        _parent: &Dir<DirMeta>,
        entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> Result<DirMeta, WalkState> {
        Ok(entry.meta)
    }

    fn entry(
        &mut self,
        _dir: &Dir<DirMeta>,
        _fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState {
        if let Some(mut listed) = Item::of_statx(stat) {
            if listed.kind == Kind::File {
                listed.group = self.gather.group(stat);
            }
            self.names.insert(entry.name.into(), listed);
        }
        WalkState::Continue
    }

    fn unstated(&mut self, _dir: &Dir<DirMeta>, _name: &[u8], _cause: Errno) -> WalkState {
        *self.gather.unlisted.lock().expect("no panics") += 1;
        WalkState::Continue
    }

    fn listed(&mut self, dir: &Dir<DirMeta>) {
        let listed = ListedDir {
            meta: *dir.state(),
            names: std::mem::take(&mut self.names),
        };
        let path = dir.relative(None).into_boxed_slice();
        self.gather
            .listing
            .lock()
            .expect("no panics")
            .add_dir(path, listed);
    }

    /// Leaves the directory out: the sender sends what is below it.
    fn unopened(
        &mut self,
        _parent: &Dir<DirMeta>,
        _name: &[u8],
        _stat: Option<&Statx>,
        _cause: Errno,
    ) -> WalkState {
        *self.gather.unlisted.lock().expect("no panics") += 1;
        WalkState::Continue
    }

    fn error(&mut self, _error: Error) -> WalkState {
        *self.gather.unlisted.lock().expect("no panics") += 1;
        WalkState::Continue
    }
}

/// What [`Listing::unchanged_dirs`] found as listed.
#[derive(Debug, Default)]
pub(crate) struct Unchanged {
    /// The directories as listed with everything in and below them, by path.
    pub(crate) dirs: HashSet<Box<[u8]>>,
    /// Their files and symlinks.
    pub(crate) entries: u64,
    /// The bytes of content of their files.
    pub(crate) bytes: u64,
}

/// What was found in a directory: its files and symlinks and their bytes while it and all
/// its entries are as listed, else `None`.
type Found = Option<(u64, u64)>;

/// A check of trees against a listing under way, shared by the walking threads.
struct Check<'a> {
    listing: &'a Listing,
    /// What counts as unchanged.
    rule: Rule,
    /// Each directory checked, by path, with what was found in it.
    dirs: Mutex<Vec<(Box<[u8]>, Found)>>,
    /// The walk itself failed somewhere.
    failed: AtomicBool,
}

impl<'a> Check<'a> {
    /// The state of the directory `path` (`meta` its own, when it is an entry), or `None`
    /// when the listing lacks it (and so, from a sound listing, all below it).
    fn state(&self, path: &[u8], meta: Option<Meta>) -> Option<Checked<'a>> {
        let listed = self.listing.dirs.get(path)?;
        let same = meta.is_none_or(|meta| {
            let listed = dir_facts(listed.meta);
            self.rule.unchanged(&dir_facts(meta), &listed)
        });
        Some(Checked {
            names: same.then_some(&listed.names),
        })
    }

    /// Records what was found in the directory `dir`.
    fn found(&self, dir: &Dir<Checked<'a>>, found: Found) {
        let path = dir.path(None).0.into_boxed_slice();
        self.dirs.lock().expect("no panics").push((path, found));
    }
}

/// A listed directory being checked (its path is the walk's): the listing's entries of it
/// when it is listed with the same mode and time.
struct Checked<'a> {
    names: Option<&'a Names>,
}

impl<'c, 'a> ParallelVisitorBuilder for &'c Check<'a> {
    type Visitor = Checker<'c, 'a>;

    fn build(&mut self) -> Checker<'c, 'a> {
        Checker {
            check: self,
            found: Some((0, 0)),
        }
    }
}

/// One checking thread's visitor: what it found so far in the directory it lists.
struct Checker<'c, 'a> {
    check: &'c Check<'a>,
    found: Found,
}

impl Checker<'_, '_> {
    /// Counts the file or symlink `st` as listed when `names` shows it so, else notes that
    /// the directory changed.
    fn count(&mut self, names: Option<&Names>, name: &[u8], st: &Statx) {
        let item = names.and_then(|n| n.get(name));
        let rule = self.check.rule;
        let as_listed = item
            .is_some_and(|i| i.matches(st, rule) && (i.kind == Kind::Symlink || st.stx_nlink == 1));
        let bytes = match item {
            Some(i) if i.kind == Kind::File => st.stx_size,
            _ => 0,
        };
        self.found = self
            .found
            .filter(|_| as_listed)
            .map(|(entries, sum)| (entries + 1, sum + bytes));
    }
}

impl<'a> ParallelVisitor for Checker<'_, 'a> {
    type State = Checked<'a>;

    fn enter_dir(
        &mut self,
        parent: &Dir<Checked<'a>>,
        entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> Result<Checked<'a>, WalkState> {
        match self
            .check
            .state(&parent.path(Some(entry.name)).0, Some(entry.meta))
        {
            Some(state) => Ok(state),
            // Not listed: sent whole, without a look inside, and so is its parent.
            None => {
                self.check.found(parent, None);
                Err(WalkState::Skip)
            }
        }
    }

    fn entry(
        &mut self,
        dir: &Dir<Checked<'a>>,
        _fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState {
        match entry.kind {
            Kind::File | Kind::Symlink => self.count(dir.state().names, entry.name, stat),
            _ => self.found = None,
        }
        WalkState::Continue
    }

    fn unstated(&mut self, _dir: &Dir<Checked<'a>>, _name: &[u8], _cause: Errno) -> WalkState {
        self.found = None;
        WalkState::Continue
    }

    fn listed(&mut self, dir: &Dir<Checked<'a>>) {
        let found = self.found.replace((0, 0));
        self.check
            .found(dir, found.filter(|_| dir.state().names.is_some()));
    }

    /// The directory that holds it changed: the pack reports it.
    fn unopened(
        &mut self,
        parent: &Dir<Checked<'a>>,
        _name: &[u8],
        _stat: Option<&Statx>,
        _cause: Errno,
    ) -> WalkState {
        self.check.found(parent, None);
        WalkState::Continue
    }

    fn error(&mut self, _error: Error) -> WalkState {
        self.check.failed.store(true, Relaxed);
        WalkState::Quit
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::Cursor;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;
    use std::process::Command;

    use rustix::fs::{FileType, Mode, OFlags};

    use super::*;
    use crate::format::{decode_all, Event, Limits};
    use crate::pack::{Pack, PackSummary};
    use crate::unpack::{Engine, Existing, Restore, Unpack};

    fn open(path: &Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap()
    }

    fn list(path: &Path) -> Listing {
        let listing = Listing::of_dir(open(path), 4, false);
        assert_eq!(listing.unlisted(), 0);
        listing
    }

    /// Sets the modification time of `path` (not following it) to `sec`.
    fn touch(path: &Path, sec: i64) {
        let time = rustix::fs::Timespec {
            tv_sec: sec,
            tv_nsec: 123_456_789,
        };
        let times = rustix::fs::Timestamps {
            last_access: time,
            last_modification: time,
        };
        rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
    }

    /// A tree with files small and large, a symlink, hard links, an empty file, a fifo and
    /// nested directories.
    fn make_tree(root: &Path) {
        fs::create_dir_all(root.join("d/e/f")).unwrap();
        fs::create_dir_all(root.join("empty")).unwrap();
        for i in 0..40 {
            fs::write(root.join(format!("d/s{i}")), format!("small {i}")).unwrap();
        }
        fs::write(root.join("d/e/big"), vec![7u8; 300_000]).unwrap();
        fs::write(root.join("d/e/f/zero"), b"").unwrap();
        fs::write(root.join("top"), b"top").unwrap();
        fs::set_permissions(root.join("top"), fs::Permissions::from_mode(0o600)).unwrap();
        symlink("d/s1", root.join("link")).unwrap();
        fs::write(root.join("d/linked"), b"linked").unwrap();
        fs::hard_link(root.join("d/linked"), root.join("d/e/linked2")).unwrap();
        fs::hard_link(root.join("d/linked"), root.join("linked3")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo").as_path(),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
    }

    /// The archive of `root`, leaving out what `listing` shows unchanged; `archive` packs
    /// without io_uring (extended attributes are read from fds).
    fn pack(root: &Path, listing: &Listing, archive: bool) -> (Vec<u8>, PackSummary) {
        let mut out = Vec::new();
        let summary = Pack::new(open(root))
            .archive(archive)
            .unchanged(listing)
            .to_writer(&mut out)
            .unwrap();
        (out, summary)
    }

    /// The paths of the entries `archive` holds other than directories, with a mark of
    /// their kind (`=` for a hard link).
    fn sent(archive: &[u8]) -> Vec<String> {
        let mut dirs: Vec<Vec<u8>> = Vec::new();
        let mut sent = Vec::new();
        let mut add = |dirs: &[Vec<u8>], name: &[u8], mark: &str| {
            let path = TreePath::join(dirs.iter().map(|d| &d[..]), name);
            sent.push(format!("{mark}{path}"));
        };
        decode_all(archive, Limits::default(), |_, event| {
            match event {
                Event::Dir(entry) => dirs.push(entry.name.to_vec()),
                Event::Pop => drop(dirs.pop()),
                Event::File { entry, .. } => add(&dirs, entry.name, ""),
                Event::Symlink { entry, .. } => add(&dirs, entry.name, "@"),
                Event::HardLink { entry, .. } => add(&dirs, entry.name, "="),
                Event::Special { entry, .. } => add(&dirs, entry.name, "|"),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        sent.sort();
        sent
    }

    /// Lands `archive` into the existing directory `dest` with `engine`, replacing what is
    /// there.
    fn land(archive: Vec<u8>, dest: &Path, engine: Engine) -> Result<()> {
        let unpack = Unpack::new()
            .sandbox(false)
            .engine(engine)
            .restore(Restore::default().existing(Existing::Overwrite));
        let archive = crate::unpack::Archive::from_reader(Cursor::new(archive));
        let mut destination = unpack.prepare(dest, &archive)?;
        unpack
            .land(&archive, &mut destination, &crate::Progress::default())
            .map(drop)
    }

    /// Lists the differences between the trees `a` and `b` (scripts/compare-trees; the
    /// archive has no record of its root, which keeps its own time).
    fn differences(a: &Path, b: &Path) -> Vec<String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/compare-trees");
        let out = Command::new(script)
            .args(["--max-lines", "1000", "--ignore-root-times"])
            .args([a, b])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        text.lines()
            .filter(|l| l.contains(": ") && !l.contains(" entries compared"))
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn a_listing_holds_files_and_symlinks_with_link_groups_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        make_tree(&root);
        let listing = list(&root);
        // 40 small, big, zero, top, link, linked x3.
        assert_eq!(listing.len(), 47);
        let top = listing.get(b"top").unwrap();
        assert_eq!(
            (top.kind, top.size, top.mode, top.group),
            (Kind::File, 3, 0o600, 0)
        );
        let link = listing.get(b"link").unwrap();
        assert_eq!((link.kind, link.size, link.mode), (Kind::Symlink, 4, 0));
        let group = listing.get(b"d/linked").unwrap().group;
        assert_ne!(group, 0);
        assert_eq!(listing.get(b"d/e/linked2").unwrap().group, group);
        assert_eq!(listing.get(b"linked3").unwrap().group, group);
        assert!(listing.get(b"fifo").is_none() && listing.get(b"d").is_none());
        assert_eq!(listing.get(b"d/e/f/zero").unwrap().size, 0);

        let mut wire = Vec::new();
        listing.write_to(&mut wire).unwrap();
        let again = Listing::read_from(&wire[..], ListingLimits::default()).unwrap();
        assert_eq!(again, listing);
        // Nothing may follow the end record.
        let more = [&wire[..], b"next"].concat();
        let after = (
            wire.len() as u64,
            "4 bytes after the end record".to_string(),
        );
        assert_eq!(problem(&more, ListingLimits::default()), after);
        let empty = Listing::default();
        let mut wire = Vec::new();
        empty.write_to(&mut wire).unwrap();
        assert_eq!(wire.len(), 8 + 17);
        assert_eq!(
            Listing::read_from(&wire[..], ListingLimits::default()).unwrap(),
            empty
        );
    }

    /// A copy of the tree `root` at `copy`, landed from an archive (times to the
    /// nanosecond, hard links as links).
    fn copy_of(root: &Path, copy: &Path) {
        let (archive, _) = pack(root, &Listing::default(), false);
        land(archive, copy, Engine::Sync).unwrap();
        assert_eq!(differences(root, copy), Vec::<String>::new());
    }

    #[test]
    fn a_pack_leaves_out_exactly_what_the_listing_shows_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
        make_tree(&root);
        copy_of(&root, &copy);
        for archive in [false, true] {
            let (packed, summary) = pack(&root, &list(&copy), archive);
            // The fifo and the directories above it and the hard links (d, d/e); d/e/f and
            // empty are left out whole.
            assert_eq!(sent(&packed), ["|fifo"], "archive: {archive}");
            assert_eq!((summary.unchanged, summary.files, summary.dirs), (47, 0, 2));
            assert_eq!(
                summary.unchanged_bytes,
                300_000 + 3 + 6 * 3 + 10 * 7 + 30 * 8
            );
        }

        // A size, a time, a mode, a file become a symlink, a symlink's target of another
        // length and a symlink's time.
        fs::write(root.join("d/s3"), b"longer than before").unwrap();
        touch(&root.join("d/s4"), 1_000_000);
        fs::set_permissions(root.join("d/s5"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::remove_file(root.join("top")).unwrap();
        symlink("d", root.join("top")).unwrap();
        fs::remove_file(root.join("link")).unwrap();
        symlink("d/s10", root.join("link")).unwrap();
        symlink("d/s2", root.join("d/e/link")).unwrap();
        symlink("d/s2", copy.join("d/e/link")).unwrap();
        touch(&root.join("d/e/link"), 2_000_000);
        for archive in [false, true] {
            let (packed, summary) = pack(&root, &list(&copy), archive);
            let expected = [
                "@d/e/link",
                "@link",
                "@top",
                "d/s3",
                "d/s4",
                "d/s5",
                "|fifo",
            ];
            assert_eq!(sent(&packed), expected, "archive: {archive}");
            assert_eq!(
                (summary.unchanged, summary.files, summary.symlinks),
                (42, 3, 3)
            );
        }
        let (packed, _) = pack(&root, &list(&copy), false);
        land(packed, &copy, Engine::Sync).unwrap();
        assert_eq!(differences(&root, &copy), Vec::<String>::new());
    }

    /// The directories `archive` holds, by path.
    fn dirs_sent(archive: &[u8]) -> Vec<String> {
        let mut dirs: Vec<Vec<u8>> = Vec::new();
        let mut sent = Vec::new();
        decode_all(archive, Limits::default(), |_, event| {
            match event {
                Event::Dir(entry) => {
                    let path = TreePath::join(dirs.iter().map(|d| &d[..]), entry.name);
                    sent.push(path.to_string());
                    dirs.push(entry.name.to_vec());
                }
                Event::Pop => drop(dirs.pop()),
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        sent
    }

    #[test]
    fn directories_as_listed_are_left_out_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
        for d in ["a/b/c", "a/x", "y", "z"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }
        for f in ["a/b/c/f", "a/b/g", "a/x/h", "y/i", "z/j", "top"] {
            fs::write(root.join(f), f).unwrap();
        }
        symlink("../top", root.join("a/x/s")).unwrap();
        copy_of(&root, &copy);
        let pack_excluding = |pattern: &str| {
            let mut out = Vec::new();
            let exclude = crate::exclude::Exclude::new([pattern]).unwrap();
            let summary = Pack::new(open(&root))
                .exclude(exclude)
                .unchanged(&list(&copy))
                .to_writer(&mut out)
                .unwrap();
            (out, summary)
        };

        // As listed: not a directory is sent.
        let (packed, summary) = pack(&root, &list(&copy), false);
        assert_eq!((dirs_sent(&packed), sent(&packed)), (vec![], vec![]));
        let bytes = 7 + 5 + 5 + 3 + 3 + 3;
        assert_eq!((summary.unchanged, summary.unchanged_bytes), (7, bytes));
        assert_eq!((summary.dirs, summary.files), (0, 0));

        // A file deep down: the directories above it are sent, their others left out whole.
        fs::write(root.join("a/b/c/f"), "changed").unwrap();
        // A directory's own time, in the copy: it alone is sent.
        touch(&copy.join("y"), 7);
        // A directory the copy lacks, and what is in it.
        fs::create_dir(root.join("a/new")).unwrap();
        fs::write(root.join("a/new/n"), "n").unwrap();
        // A fifo (always sent) and a second name of a file (decided in order).
        let fifo = root.join("a/x/fifo");
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, FileType::Fifo, Mode::RWXU, 0).unwrap();
        fs::hard_link(root.join("z/j"), root.join("z/j2")).unwrap();
        let (packed, summary) = pack(&root, &list(&copy), false);
        let expected_dirs = ["a", "a/b", "a/b/c", "a/new", "a/x", "y", "z"];
        assert_eq!(dirs_sent(&packed), expected_dirs);
        let expected = ["=z/j2", "a/b/c/f", "a/new/n", "z/j", "|a/x/fifo"];
        assert_eq!(sent(&packed), expected);
        // a/b/g, a/x/h, a/x/s, y/i and top, each decided on its own.
        assert_eq!(summary.unchanged, 5);
        land(packed, &copy, Engine::Sync).unwrap();
        assert_eq!(differences(&root, &copy), Vec::<String>::new());

        // What is excluded does not count: y is left out whole.
        fs::write(root.join("y/i"), "excluded change").unwrap();
        let (packed, _) = pack_excluding("i");
        assert_eq!(dirs_sent(&packed), ["a", "a/x", "z"]);
        let (packed, _) = pack_excluding("nothing");
        assert_eq!(dirs_sent(&packed), ["a", "a/x", "y", "z"]);
    }

    #[test]
    fn hard_links_are_left_out_only_as_one_inode_linked_as_often() {
        let dir = tempfile::tempdir().unwrap();
        let (root, copy) = (dir.path().join("t"), dir.path().join("copy"));
        make_tree(&root);
        copy_of(&root, &copy);
        let linked = ["=d/linked", "=linked3", "d/e/linked2", "|fifo"];
        // The first name met is missing: it is sent whole, the others link to it.
        fs::remove_file(copy.join("d/e/linked2")).unwrap();
        let (packed, _) = pack(&root, &list(&copy), false);
        assert_eq!(sent(&packed), linked);
        land(packed, &copy, Engine::Sync).unwrap();
        assert_eq!(differences(&root, &copy), Vec::<String>::new());

        // A later name is missing: the names before it are linked once less there, so all
        // are sent again.
        fs::remove_file(copy.join("linked3")).unwrap();
        let (packed, _) = pack(&root, &list(&copy), true);
        assert_eq!(sent(&packed), linked);
        land(packed, &copy, Engine::Sync).unwrap();
        assert_eq!(differences(&root, &copy), Vec::<String>::new());

        // Linked as often, but not to each other: only the first is left out.
        for name in ["d/linked", "linked3"] {
            fs::remove_file(copy.join(name)).unwrap();
            fs::copy(root.join(name), copy.join(name)).unwrap();
            let meta = fs::metadata(root.join(name)).unwrap();
            let time = filetime(&meta);
            touch_exactly(&copy.join(name), time);
        }
        fs::hard_link(copy.join("d/linked"), copy.join("d/other")).unwrap();
        fs::hard_link(copy.join("linked3"), copy.join("other")).unwrap();
        fs::hard_link(copy.join("linked3"), copy.join("other2")).unwrap();
        // d/e/linked2 has 1 link now, d/linked 2, linked3 3: only linked3 is linked as
        // often, and it is met last, with its inode packed already.
        let (packed, summary) = pack(&root, &list(&copy), false);
        assert_eq!(sent(&packed), linked);
        assert_eq!(summary.unchanged, 44);
    }

    /// The modification time of `meta`.
    fn filetime(meta: &fs::Metadata) -> (i64, i64) {
        use std::os::unix::fs::MetadataExt;
        (meta.mtime(), meta.mtime_nsec())
    }

    /// Sets the modification time of `path` to `time`.
    fn touch_exactly(path: &Path, (sec, nsec): (i64, i64)) {
        let time = rustix::fs::Timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        };
        let times = rustix::fs::Timestamps {
            last_access: time,
            last_modification: time,
        };
        rustix::fs::utimensat(rustix::fs::CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW).unwrap();
    }

    /// A listing in wire form: the header, then `body`.
    fn wire(body: &[&[u8]]) -> Vec<u8> {
        [&HEADER[..]]
            .iter()
            .chain(body)
            .flat_map(|b| b.iter().copied())
            .collect()
    }

    /// An item's bytes.
    fn item(
        kind: u8,
        name: &[u8],
        size: u64,
        nsec: u32,
        mode: u16,
        links: u32,
        group: u32,
    ) -> Vec<u8> {
        let mut b = vec![kind, name.len() as u8];
        b.extend_from_slice(name);
        b.extend_from_slice(&size.to_le_bytes());
        b.extend_from_slice(&5i64.to_le_bytes());
        b.extend_from_slice(&nsec.to_le_bytes());
        b.extend_from_slice(&mode.to_le_bytes());
        b.extend_from_slice(&links.to_le_bytes());
        b.extend_from_slice(&group.to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        b
    }

    /// A directory record's head (mode 0o755, time 5 s).
    fn dir(path: &[u8], count: u32) -> Vec<u8> {
        dir_as(path, 0o755, 0, count)
    }

    /// A directory record's head with the mode `mode` and the time 5 s and `nsec` ns.
    fn dir_as(path: &[u8], mode: u16, nsec: u32, count: u32) -> Vec<u8> {
        let mut b = vec![DIR];
        b.extend_from_slice(&(path.len() as u16).to_le_bytes());
        b.extend_from_slice(path);
        b.extend_from_slice(&mode.to_le_bytes());
        b.extend_from_slice(&5i64.to_le_bytes());
        b.extend_from_slice(&nsec.to_le_bytes());
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&count.to_le_bytes());
        b
    }

    fn end(dirs: u64, entries: u64) -> Vec<u8> {
        let mut b = vec![END];
        b.extend_from_slice(&dirs.to_le_bytes());
        b.extend_from_slice(&entries.to_le_bytes());
        b
    }

    /// The problem and offset reading `bytes` with `limits` fails with.
    fn problem(bytes: &[u8], limits: ListingLimits) -> (u64, String) {
        match Listing::read_from(bytes, limits) {
            Err(Error::Listing { offset, problem }) => (offset, problem),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_malformed_or_oversized_listing_is_refused_at_its_record() {
        let limits = ListingLimits::default();
        let file = |name: &[u8]| item(1, name, 3, 0, 0o644, 1, 0);
        let good = wire(&[
            &dir(b"a/b", 2),
            &file(b"x"),
            &item(2, b"l", 4, 7, 0, 0, 0),
            &end(1, 2),
        ]);
        let listing = Listing::read_from(&good[..], limits).unwrap();
        assert_eq!(
            listing.get(b"a/b/l").unwrap().mtime,
            Timestamp { sec: 5, nsec: 7 }
        );
        // Every cut is an early end, at the offset of what is missing.
        for cut in 0..good.len() {
            let (at, what) = problem(&good[..cut], limits);
            assert_eq!(
                (at <= cut as u64, &what[..]),
                (true, "the listing ends early")
            );
        }
        // Any one byte changed: an error or a listing, never a panic.
        for i in 0..good.len() {
            for flip in [1u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[i] ^= flip;
                let _ = Listing::read_from(&bad[..], limits);
            }
        }
        let d = dir(b"", 1);
        let ends = end(1, 1);
        let cases: Vec<(Vec<u8>, u64, &str)> = vec![
            (b"BARGE\x00\x01\x01".to_vec(), 0, "not an update listing"),
            (
                [&HEADER[..6], &[1, 0]].concat(),
                0,
                "unsupported listing version 1.0",
            ),
            (wire(&[&[7]]), 8, "unknown record tag 0x07"),
            (wire(&[&dir(b"a//b", 0)]), 8, "directory path a//b: "),
            (wire(&[&dir(b"/a", 0)]), 8, "directory path /a: "),
            (wire(&[&dir(b"a/..", 0)]), 8, "directory path a/..: "),
            (
                wire(&[&dir(b"a", 0), &dir(b"a", 0)]),
                38,
                "directory a listed twice",
            ),
            (
                wire(&[&dir_as(b"a", 0o10000, 0, 0)]),
                8,
                "directory a: mode 0o10000",
            ),
            (
                wire(&[&dir_as(b"a", 0o755, 1_000_000_000, 0)]),
                8,
                "directory a: nanoseconds",
            ),
            (wire(&[&d, &file(b"")]), 37, ": "),
            (wire(&[&d, &file(b"a/b")]), 37, "a/b: "),
            (wire(&[&d, &file(b"..")]), 37, "..: "),
            (wire(&[&d, &file(b"n\x00")]), 37, "n\\x00: "),
            (
                wire(&[&dir(b"", 2), &file(b"x"), &file(b"x")]),
                8,
                "a name listed twice",
            ),
            (
                wire(&[&d, &item(3, b"x", 0, 0, 0, 0, 0)]),
                37,
                "unknown entry kind 3",
            ),
            (
                wire(&[&d, &item(1, b"x", 0, 1_000_000_000, 0, 1, 0)]),
                37,
                "x: nanoseconds",
            ),
            (
                wire(&[&d, &item(1, b"x", 0, 0, 0o10000, 1, 0)]),
                37,
                "x: mode 0o10000",
            ),
            (wire(&[&d, &item(1, b"x", 0, 0, 0, 0, 0)]), 37, "x: 0 links"),
            (
                wire(&[&d, &item(1, b"x", 0, 0, 0, 2, 0)]),
                37,
                "x: 2 links in link group 0",
            ),
            (
                wire(&[&d, &item(1, b"x", 0, 0, 0, 1, 4)]),
                37,
                "x: 1 links in link group 4",
            ),
            (
                wire(&[&d, &item(2, b"x", 0, 0, 0, 0, 0)]),
                37,
                "x: a symlink target of 0",
            ),
            (
                wire(&[&d, &item(2, b"x", 4096, 0, 0, 0, 0)]),
                37,
                "x: a symlink target of 4096",
            ),
            (
                wire(&[&d, &item(2, b"x", 1, 0, 0o777, 0, 0)]),
                37,
                "x: a symlink with a mode",
            ),
            (
                wire(&[&d, &file(b"x"), &end(1, 2)]),
                78,
                "the end record counts 1 directories and 2",
            ),
            (
                wire(&[&d, &file(b"x"), &end(2, 1)]),
                78,
                "the end record counts 2",
            ),
            (
                wire(&[&d, &file(b"x"), &ends, &ends]),
                95,
                "17 bytes after the end record",
            ),
        ];
        for (bytes, offset, what) in cases {
            match Listing::read_from(&bytes[..], limits) {
                Ok(_) => panic!("read where {what} was expected"),
                Err(Error::Listing {
                    offset: at,
                    problem,
                }) => {
                    assert!(problem.contains(what), "{problem} lacks {what}");
                    assert_eq!(at, offset, "{problem}");
                }
                Err(other) => panic!("{other}"),
            }
        }
        // Limits, checked before anything is held.
        let few = ListingLimits {
            max_entries: 1,
            ..limits
        };
        let (at, what) = problem(&good, few);
        assert_eq!((at, &what[..]), (8, "more than the limit of 1 entries"));
        let short = ListingLimits {
            max_path: 2,
            ..limits
        };
        let (at, what) = problem(&good, short);
        assert_eq!(
            (at, &what[..]),
            (8, "directory path of 3 bytes, more than the limit of 2")
        );
        let small = ListingLimits {
            max_bytes: 40,
            ..limits
        };
        let (at, what) = problem(&good, small);
        assert_eq!((at, &what[..]), (40, "longer than the limit of 40 bytes"));
        // A count of 4 billion with nothing after it: an early end, not 4 billion slots.
        let (_, what) = problem(
            &wire(&[&dir(b"", u32::MAX)]),
            ListingLimits {
                max_entries: u64::MAX,
                ..limits
            },
        );
        assert_eq!(what, "the listing ends early");
        let error = Listing::read_from(&wire(&[&[9]])[..], limits).unwrap_err();
        assert_eq!(
            error.to_string(),
            "update listing byte 8: unknown record tag 0x09"
        );
        assert_eq!(error.kind(), "listing");
    }

    #[test]
    fn a_named_root_is_the_first_component_of_the_listing_paths() {
        let dir = tempfile::tempdir().unwrap();
        let (root, dest) = (dir.path().join("t"), dir.path().join("dest"));
        make_tree(&root);
        let named = || Pack::named(vec![(b"t".to_vec(), open(&root))]).unwrap();
        let mut archive = Vec::new();
        named().to_writer(&mut archive).unwrap();
        land(archive, &dest, Engine::Sync).unwrap();
        let listing = list(&dest);
        assert!(listing.get(b"t/d/e/big").is_some());
        let mut archive = Vec::new();
        let summary = named().unchanged(&listing).to_writer(&mut archive).unwrap();
        assert_eq!((summary.unchanged, summary.files), (47, 0));
        assert_eq!(sent(&archive), ["|t/fifo"]);
    }

    /// A landing cut off anywhere leaves no file that looks complete and is not: an update
    /// from the listing of what it left makes the copy equal, whatever the engine.
    #[test]
    fn after_a_cut_off_landing_an_update_makes_the_copy_equal() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("t");
        make_tree(&root);
        // Over 4 MiB, so that a stream is landed by several threads.
        fs::write(root.join("d/e/huge"), vec![9u8; 5 << 20]).unwrap();
        for i in 0..300 {
            fs::write(root.join(format!("d/e/f/m{i}")), vec![i as u8; 20_000]).unwrap();
        }
        let (whole, _) = pack(&root, &Listing::default(), false);
        let engines = [Engine::Sync, Engine::Threads, Engine::Uring];
        for (k, cut) in [100, 3_000, 200_000, 4 << 20, 9 << 20, whole.len() - 5]
            .into_iter()
            .enumerate()
        {
            let engine = engines[k % engines.len()];
            let copy = dir.path().join(format!("copy{k}"));
            fs::create_dir(&copy).unwrap();
            let cut_off = land(whole[..cut].to_vec(), &copy, engine);
            assert!(cut_off.is_err(), "{engine:?} at {cut}");
            let listing = list(&copy);
            let (update, summary) = pack(&root, &listing, false);
            assert_eq!(summary.unchanged, listing.len(), "{engine:?} at {cut}");
            land(update, &copy, engine).unwrap();
            assert_eq!(
                differences(&root, &copy),
                Vec::<String>::new(),
                "{engine:?} at {cut}"
            );
        }
    }
}
