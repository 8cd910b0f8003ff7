//! What a tree already holds, for `send --update`: the receiver lists its destination
//! ([`Listing::of_dir`], one `statx` per entry on the parallel walker), sends the listing
//! ([`Listing::write_to`], the form in docs/FORMAT.md, "Update listing"), and the sender
//! reads it with limits ([`Listing::read_from`]) and packs only what differs
//! ([`crate::pack::Pack::unchanged`]).
//!
//! A listing holds every directory (its mode and time) with its other entries: regular
//! files, symlinks and special files (so that `send --delete` removes those too). Before it packs,
//! the sender checks its tree against the listing on the parallel walker
//! (`Listing::unchanged_dirs`), so that the ordered pack leaves out whole directories
//! that are as listed, everything below them included, without a `statx` of their entries.

mod read;
mod walk;

use read::{bad, Reader};
pub(crate) use walk::Unchanged;
use walk::{Check, DirMeta, Gather};

use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

use rustix::fs::{openat, statx, AtFlags, Mode, Statx, StatxFlags};
use rustix::io::Errno;

use crate::compare::{xattr_digest, Facts, Rule};
use crate::error::{Result, TreePath};
use crate::exclude::Exclude;
use crate::format::MAX_NAME;
use crate::land::restore::xattr_kept;
use crate::sys::DIR_FLAGS;
use crate::tree::{Kind, Meta, Owner, Timestamp, XattrReader, Xattrs, XattrsOf, STATX_MASK};
use crate::walk::parallel::WalkParallel;
use crate::walk::Root;

/// The first bytes of a listing: its magic and version 5; the last byte is its flags.
const HEADER: [u8; 8] = *b"BLIST\x00\x05\x00";
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
/// links, link group, uid, gid, extended attributes' digest.
const ITEM: usize = 1 + 1 + 8 + 8 + 4 + 2 + 4 + 4 + 4 + 4 + 8;

/// The kinds a listing's items may be, by their number in the wire form.
const KINDS: [(u8, Kind); 6] = [
    (1, Kind::File),
    (2, Kind::Symlink),
    (3, Kind::Fifo),
    (4, Kind::CharDevice),
    (5, Kind::BlockDevice),
    (6, Kind::Socket),
];

/// An entry other than a directory as a listing describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// [`Kind::File`], [`Kind::Symlink`], or a special file: [`Kind::Fifo`],
    /// [`Kind::CharDevice`], [`Kind::BlockDevice`], [`Kind::Socket`].
    pub kind: Kind,
    /// Bytes of content; of a symlink, of its target; of a device, its number (the major
    /// number in the high 32 bits, the minor in the low); of a fifo or socket, 0.
    pub size: u64,
    /// Modification time, to the nanosecond.
    pub mtime: Timestamp,
    /// Permission bits, all twelve (0 for a symlink).
    pub mode: u32,
    /// A file's number of hard links (`st_nlink`, names outside the tree included; 0 for
    /// any other kind).
    pub links: u32,
    /// 0 for a file with one link; else a number shared by the names in the listing of one
    /// inode and no other.
    pub group: u32,
    /// Numeric owner.
    pub owner: Owner,
    /// A file's extended attributes, those the lister keeps (as it restores them: all
    /// with [`Listing::owners`], else `user.*` and ACLs), as their digest
    /// (`compare::xattr_digest`; 0 for any other kind).
    pub xattrs: u64,
}

impl Item {
    /// The entry `st` describes, as listed (with no link group yet); `None` for a
    /// directory.
    fn of_statx(st: &Statx) -> Option<Item> {
        let facts = Facts::of_statx(st);
        let (mode, links) = match facts.kind {
            Kind::Dir | Kind::Unknown => return None,
            Kind::File => (facts.meta.mode, st.stx_nlink),
            Kind::Symlink => (0, 0),
            _ => (facts.meta.mode, 0),
        };
        Some(Item {
            kind: facts.kind,
            size: facts.size,
            mtime: facts.meta.mtime.unwrap_or_default(),
            mode,
            links,
            group: 0,
            owner: facts.meta.owner.unwrap_or_default(),
            xattrs: 0,
        })
    }

    /// What the unchanged rule compares of it.
    pub(crate) fn facts(&self) -> Facts {
        let meta = Meta {
            mode: self.mode,
            mtime: Some(self.mtime),
            owner: Some(self.owner),
        };
        Facts {
            links: self.links,
            xattrs: Some(self.xattrs),
            ..Facts::new(self.kind, self.size, meta)
        }
    }

    /// True when this is still the entry `st` describes, by `rule` (links are the caller's
    /// to compare; extended attributes only where the rule keeps them, of a file, through
    /// `xattrs`, which reads them only then).
    pub(crate) fn matches(
        &self,
        st: &Statx,
        rule: Rule,
        xattrs: impl FnOnce() -> Option<u64>,
    ) -> bool {
        let listed = self.facts();
        let mut here = Facts::of_statx(st);
        if !rule.but_xattrs().unchanged(&here, &listed) {
            return false;
        }
        if !rule.xattrs || self.kind != Kind::File {
            return true;
        }
        here.xattrs = xattrs();
        rule.unchanged(&here, &listed)
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
        let gather = Gather {
            owners,
            ..Gather::default()
        };
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

    /// The unchanged rule of a sender with `archive` (owners and extended attributes sent)
    /// against this listing.
    pub(crate) fn rule(&self, archive: bool) -> Rule {
        Rule {
            owners: archive && self.owners,
            xattrs: archive,
            links: true,
            newer: false,
        }
    }

    /// The digest of the extended attributes of the file `name` in `dir` that the lister
    /// keeps, read into `reader` (`None` where they cannot be read: then it differs).
    pub(crate) fn xattrs_of(
        &self,
        reader: &mut XattrReader,
        dir: BorrowedFd<'_>,
        name: &[u8],
    ) -> Option<u64> {
        digest_of(reader, dir, name, self.owners)
    }

    /// Entries listed besides directories.
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
        let (dir, name) = split_path(path)?;
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
        roots: &[Root],
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
        // A root of members is not checked: its directories are not taken whole.
        for Root { name, fd, .. } in roots.iter().filter(|r| r.members.is_none()) {
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

    /// What the trees `roots` (named as [`Listing::unchanged_dirs`] takes them) lack of what
    /// the listing shows, for `send --delete`: the paths (in DEST, sorted) of the listed
    /// files, symlinks and directories whose name the trees' directory does not hold, and
    /// of the listed directories where the trees hold something else (removed so that it
    /// can take their place); never one inside another. What `exclude` matches is not
    /// looked at, nor is anything below it; with named roots, only their own directories
    /// are (DEST's other top-level entries stay); a directory that cannot be read removes
    /// nothing.
    pub(crate) fn missing(&self, roots: &[Root], exclude: &Exclude) -> Vec<Box<[u8]>> {
        let mut subdirs: HashMap<&[u8], Vec<&[u8]>> = HashMap::new();
        for (parent, name) in self.dirs.keys().filter_map(|path| split_path(path)) {
            subdirs.entry(parent).or_default().push(name);
        }
        let mut gone: Vec<Box<[u8]>> = Vec::new();
        for (path, listed) in &self.dirs {
            let Some(dir) = below_roots(roots, path, exclude) else {
                continue;
            };
            let entries = listed.names.keys().map(|name| (&name[..], false));
            let dirs = subdirs.get(&path[..]).into_iter().flatten();
            for (name, is_dir) in entries.chain(dirs.map(|&name| (name, true))) {
                let below = || below_root(roots, path, name);
                if exclude.excludes(name, below, is_dir) {
                    continue;
                }
                let kind = statx(&dir, name, AtFlags::SYMLINK_NOFOLLOW, StatxFlags::TYPE)
                    .map(|st| Kind::of_mode(st.stx_mode.into()));
                let lacks = match kind {
                    Err(Errno::NOENT) => true,
                    Ok(kind) => is_dir && kind != Kind::Dir,
                    Err(_) => false,
                };
                if lacks {
                    gone.push(TreePath::join([&path[..]], name).0.into());
                }
            }
        }
        gone.sort_unstable();
        // A directory removed takes what is below it.
        let dirs: HashSet<&[u8]> = gone.iter().map(|p| &p[..]).collect();
        let inside = |path: &[u8]| {
            (path.iter().enumerate()).any(|(i, &b)| b == b'/' && dirs.contains(&path[..i]))
        };
        let keep: Vec<bool> = gone.iter().map(|p| !inside(p)).collect();
        let mut keep = keep.into_iter();
        gone.retain(|_| keep.next().expect("one per path"));
        gone
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
                let kind = KINDS.iter().find(|(_, kind)| *kind == e.kind);
                item.push(kind.expect("a listed kind").0);
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
                item.extend_from_slice(&e.xattrs.to_le_bytes());
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
    /// [`Error::Listing`](crate::Error::Listing) with the offset of the record at fault (of the field where it
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

/// The digest of the extended attributes of the file `name` in `dir` that a lister keeping
/// owners or not keeps.
fn digest_of(
    reader: &mut XattrReader,
    dir: BorrowedFd<'_>,
    name: &[u8],
    owners: bool,
) -> Option<u64> {
    reader.read_from(XattrsOf::Name(dir, name)).ok()?;
    Some(xattr_digest(Xattrs(&reader.wire), |name| {
        xattr_kept(owners, name)
    }))
}

/// A path's directory and last name (`None` for the root, the empty path).
fn split_path(path: &[u8]) -> Option<(&[u8], &[u8])> {
    match path.iter().rposition(|&b| b == b'/') {
        Some(slash) => Some((&path[..slash], &path[slash + 1..])),
        None if path.is_empty() => None,
        None => Some((&path[..0], path)),
    }
}

/// The path below its root of `name` in the directory `dir` (a path in DEST, where named
/// roots are top-level entries), as `--exclude` matches it.
fn below_root(roots: &[Root], dir: &[u8], name: &[u8]) -> Vec<u8> {
    let path = TreePath::join([dir], name).0;
    match roots {
        [root] if root.name.is_empty() => path,
        _ => match path.iter().position(|&b| b == b'/') {
            Some(slash) => path[slash + 1..].to_vec(),
            None => Vec::new(),
        },
    }
}

/// The trees' directory at `path` (a path in DEST), opened one name at a time without
/// following a symlink; `None` where the trees lack it, it is no directory, or it or a
/// directory above it is excluded. With named roots DEST's top level is none of theirs. A
/// root of members (`pack -T`, files) is no tree to compare with: `None` below it.
fn below_roots(roots: &[Root], path: &[u8], exclude: &Exclude) -> Option<OwnedFd> {
    let mut names = path.split(|&b| b == b'/').filter(|name| !name.is_empty());
    let root = match roots {
        [root] if root.name.is_empty() => root,
        _ => {
            let top = names.next()?;
            roots.iter().find(|root| root.name[..] == *top)?
        }
    };
    if root.members.is_some() {
        return None;
    }
    let mut dir = openat(&root.fd, c".", DIR_FLAGS, Mode::empty()).ok()?;
    let mut below = Vec::new();
    for name in names {
        if !below.is_empty() {
            below.push(b'/');
        }
        below.extend_from_slice(name);
        if exclude.excludes(name, || below.clone(), true) {
            return None;
        }
        dir = openat(&dir, name, DIR_FLAGS, Mode::empty()).ok()?;
    }
    Some(dir)
}

#[cfg(test)]
pub(crate) mod tests;
