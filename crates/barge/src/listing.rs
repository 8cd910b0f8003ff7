//! What a tree already holds, for `send --update`: the receiver lists its destination
//! ([`Listing::of_dir`], one `statx` per entry on the parallel walker), sends the listing
//! ([`Listing::write_to`], the form in docs/FORMAT.md, "Update listing"), and the sender
//! reads it with limits ([`Listing::read_from`]) and packs only what differs
//! ([`crate::pack::Pack::unchanged`]).
//!
//! A listing holds regular files and symlinks only: the sender always sends directories
//! (they carry the structure and their metadata) and special files, so nothing else is
//! worth asking about.

use std::collections::HashMap;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Mutex;

use rustix::fs::{makedev, statx, AtFlags, FileType, Statx, StatxFlags};

use crate::error::{Error, Result, TreePath};
use crate::format::{check_name, MAX_NAME, MAX_SYMLINK};
use crate::tree::{Entry, Kind, Timestamp};
use crate::walk::parallel::{
    Dir, ParallelVisitor, ParallelVisitorBuilder, WalkParallel, WalkState,
};

/// The first bytes of a listing: its magic and version 1.
const HEADER: [u8; 8] = *b"BLIST\x00\x01\x00";
/// Tag of a directory's record.
const DIR: u8 = 0x01;
/// Tag of the end record.
const END: u8 = 0x00;
/// Longest directory path a listing carries (Linux's `PATH_MAX`): [`Listing::write_to`]
/// leaves out deeper directories (their entries are then sent), and it is the default
/// [`ListingLimits::max_path`].
const MAX_PATH: usize = 4096;
/// Bytes of an item besides its name: kind, name length, size, seconds, nanoseconds, mode,
/// links, link group.
const ITEM: usize = 1 + 1 + 8 + 8 + 4 + 2 + 4 + 4;

/// What `statx` asks of each entry.
const MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::NLINK)
    .union(StatxFlags::INO);

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
}

/// The files and symlinks of a tree, by directory: each directory's path below the root
/// (names joined by `/`, empty for the root, as an archive's paths go), then each entry's
/// name in it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    dirs: HashMap<Box<[u8]>, Names>,
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
    /// [`Listing::unlisted`].
    pub fn of_dir(root: OwnedFd, threads: usize) -> Listing {
        let gather = Gather::default();
        WalkParallel::new(root, b"")
            .threads(threads)
            .stat_mask(StatxFlags::TYPE)
            .visit(&mut &gather, ());
        let mut listing = gather.listing.into_inner().expect("no panics");
        listing.unlisted += gather.unlisted.into_inner().expect("no panics");
        listing
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

    /// The entries of the directory at `path`, if it has any.
    pub(crate) fn dir(&self, path: &[u8]) -> Option<&Names> {
        self.dirs.get(path)
    }

    /// Adds the entries of the directory `path`, which must not be listed yet.
    fn add_dir(&mut self, path: Box<[u8]>, names: Names) {
        self.entries += names.len() as u64;
        let old = self.dirs.insert(path, names);
        debug_assert!(old.is_none(), "each directory is listed once");
    }

    /// Writes the listing to `out` in its wire form (docs/FORMAT.md, "Update listing"),
    /// leaving out directories whose path is longer than 4096 bytes.
    pub fn write_to(&self, out: impl Write) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(64 << 10, out);
        out.write_all(&HEADER)?;
        let mut item = Vec::with_capacity(ITEM + MAX_NAME);
        let (mut dirs, mut entries) = (0u64, 0u64);
        for (path, names) in self.dirs.iter().filter(|(p, _)| p.len() <= MAX_PATH) {
            dirs += 1;
            entries += names.len() as u64;
            out.write_all(&[DIR])?;
            out.write_all(&(path.len() as u16).to_le_bytes())?;
            out.write_all(path)?;
            out.write_all(&(names.len() as u32).to_le_bytes())?;
            for (name, e) in names {
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
                out.write_all(&item)?;
            }
        }
        out.write_all(&[END])?;
        out.write_all(&dirs.to_le_bytes())?;
        out.write_all(&entries.to_le_bytes())?;
        out.into_inner().map_err(|e| e.into_error())?.flush()
    }

    /// Reads a listing in its wire form from `input` up to and including its end record
    /// (nothing after it is read), checking every field and `limits` before it holds
    /// anything: a listing that is malformed, breaks a limit or ends early is an
    /// [`Error::Listing`] with the offset of the record at fault.
    pub fn read_from(input: impl Read, limits: ListingLimits) -> Result<Listing> {
        let mut reader = Reader {
            input: BufReader::with_capacity(64 << 10, input),
            offset: 0,
            limits,
        };
        reader.read()
    }
}

/// A listing being read: the input, how far into it, and its bounds.
struct Reader<R> {
    input: BufReader<R>,
    offset: u64,
    limits: ListingLimits,
}

impl<R: Read> Reader<R> {
    fn read(&mut self) -> Result<Listing> {
        let mut header = [0; HEADER.len()];
        self.bytes(&mut header)?;
        if header[..6] != HEADER[..6] {
            return Err(bad(0, "not an update listing (bad magic)".into()));
        }
        if header[6..] != HEADER[6..] {
            let problem = format!("unsupported listing version {}.{}", header[6], header[7]);
            return Err(bad(0, problem));
        }
        let mut listing = Listing::default();
        let mut path = Vec::new();
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
            path.resize(len, 0);
            self.bytes(&mut path)?;
            if len > 0 {
                for name in path.split(|&b| b == b'/') {
                    if let Err(e) = check_name(name) {
                        let problem = format!("directory path {}: {e}", TreePath(path.clone()));
                        return Err(bad(at, problem));
                    }
                }
            }
            if listing.dirs.contains_key(&path[..]) {
                let problem = format!("directory {} listed twice", TreePath(path.clone()));
                return Err(bad(at, problem));
            }
            let count = u64::from(self.u32()?);
            if listing.entries + count > self.limits.max_entries {
                let problem = format!("more than the limit of {} entries", self.limits.max_entries);
                return Err(bad(at, problem));
            }
            // Each item is at least ITEM + 1 bytes: no more room is taken than the bytes
            // limit lets come.
            let room = count.min(self.limits.max_bytes.saturating_sub(self.offset) / ITEM as u64);
            let mut names = Names::with_capacity(room as usize);
            for _ in 0..count {
                let (name, listed) = self.item(&path)?;
                if names.insert(name, listed).is_some() {
                    return Err(bad(at, format!("{}: a name listed twice", TreePath(path))));
                }
            }
            listing.add_dir(path.as_slice().into(), names);
        }
    }

    /// One item of the directory `dir`.
    fn item(&mut self, dir: &[u8]) -> Result<(Box<[u8]>, Item)> {
        let at = self.offset;
        let kind = match self.u8()? {
            1 => Kind::File,
            2 => Kind::Symlink,
            other => return Err(bad(at, format!("unknown entry kind {other}"))),
        };
        let mut name = vec![0; usize::from(self.u8()?)];
        self.bytes(&mut name)?;
        let path = || TreePath::join([dir], &name);
        if let Err(e) = check_name(&name) {
            return Err(bad(at, format!("{}: {e}", path())));
        }
        let size = self.u64()?;
        let sec = self.u64()? as i64;
        let nsec = self.u32()?;
        let mode = u32::from(self.u16()?);
        let links = self.u32()?;
        let group = self.u32()?;
        let problem = if nsec >= 1_000_000_000 {
            Some(format!("nanoseconds {nsec}, not below 10^9"))
        } else if mode > 0o7777 {
            Some(format!("mode 0o{mode:o}, more than 0o7777"))
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
        };
        Ok((name.into(), listed))
    }

    /// Fills `buf` from the input, within the bytes limit.
    fn bytes(&mut self, buf: &mut [u8]) -> Result<()> {
        let end = self.offset + buf.len() as u64;
        if end > self.limits.max_bytes {
            let problem = format!("longer than the limit of {} bytes", self.limits.max_bytes);
            return Err(bad(self.offset, problem));
        }
        match self.input.read_exact(buf) {
            Ok(()) => {
                self.offset = end;
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                Err(bad(self.offset, "the listing ends early".into()))
            }
            Err(e) => Err(Error::os("read", TreePath(b"<listing>".to_vec()), e)),
        }
    }

    fn u8(&mut self) -> Result<u8> {
        let mut b = [0; 1];
        self.bytes(&mut b)?;
        Ok(b[0])
    }

    fn u16(&mut self) -> Result<u16> {
        let mut b = [0; 2];
        self.bytes(&mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    fn u32(&mut self) -> Result<u32> {
        let mut b = [0; 4];
        self.bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0; 8];
        self.bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
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
    /// The link group of each inode with several links met so far, by device and inode.
    groups: Mutex<HashMap<(u64, u64), u32>>,
    unlisted: Mutex<u64>,
}

impl Gather {
    /// The link group of the inode `stat` describes.
    fn group(&self, stat: &Statx) -> u32 {
        if stat.stx_nlink < 2 {
            return 0;
        }
        let key = (
            makedev(stat.stx_dev_major, stat.stx_dev_minor),
            stat.stx_ino,
        );
        let mut groups = self.groups.lock().expect("no panics");
        let next = groups.len() as u32 + 1;
        *groups.entry(key).or_insert(next)
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

impl ParallelVisitor for Lister<'_> {
    type State = ();

    fn enter_dir(
        &mut self,
        _parent: &Dir<()>,
        _entry: &Entry<'_>,
        _fd: BorrowedFd<'_>,
        _stat: &Statx,
    ) -> Result<(), WalkState> {
        Ok(())
    }

    fn entry(&mut self, _dir: &Dir<()>, fd: BorrowedFd<'_>, entry: &mut Entry<'_>) -> WalkState {
        if !matches!(entry.kind, Kind::File | Kind::Symlink | Kind::Unknown) {
            return WalkState::Continue;
        }
        let stat = match statx(fd, entry.name, AtFlags::SYMLINK_NOFOLLOW, MASK) {
            Ok(stat) => stat,
            Err(_) => {
                *self.gather.unlisted.lock().expect("no panics") += 1;
                return WalkState::Continue;
            }
        };
        let mtime = Timestamp {
            sec: stat.stx_mtime.tv_sec,
            nsec: stat.stx_mtime.tv_nsec,
        };
        let (kind, mode, links, group) = match FileType::from_raw_mode(u32::from(stat.stx_mode)) {
            FileType::RegularFile => {
                let mode = u32::from(stat.stx_mode) & 0o7777;
                (Kind::File, mode, stat.stx_nlink, self.gather.group(&stat))
            }
            FileType::Symlink => (Kind::Symlink, 0, 0, 0),
            // A directory without a d_type, or swapped in since the listing.
            FileType::Directory => {
                entry.kind = Kind::Dir;
                return WalkState::Continue;
            }
            _ => return WalkState::Continue,
        };
        let listed = Item {
            kind,
            size: stat.stx_size,
            mtime,
            mode,
            links,
            group,
        };
        self.names.insert(entry.name.into(), listed);
        WalkState::Continue
    }

    fn listed(&mut self, dir: &Dir<()>) {
        if self.names.is_empty() {
            return;
        }
        let names = std::mem::take(&mut self.names);
        let path = dir.relative(None).into_boxed_slice();
        self.gather
            .listing
            .lock()
            .expect("no panics")
            .add_dir(path, names);
    }

    /// Leaves the directory out: the sender sends what is below it.
    fn unopened(
        &mut self,
        _parent: &Dir<()>,
        _fd: BorrowedFd<'_>,
        _name: &[u8],
        _cause: rustix::io::Errno,
    ) -> WalkState {
        *self.gather.unlisted.lock().expect("no panics") += 1;
        WalkState::Continue
    }

    fn error(&mut self, _error: Error) -> WalkState {
        *self.gather.unlisted.lock().expect("no panics") += 1;
        WalkState::Continue
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::io::Cursor;
    use std::os::unix::fs::{symlink, PermissionsExt};
    use std::path::Path;
    use std::process::Command;

    use rustix::fs::{Mode, OFlags};

    use super::*;
    use crate::format::{decode_all, Event, Limits};
    use crate::pack::{Pack, PackSummary};
    use crate::unpack::{Engine, Existing, Restore, Unpack};

    fn open(path: &Path) -> OwnedFd {
        rustix::fs::open(path, OFlags::DIRECTORY | OFlags::RDONLY, Mode::empty()).unwrap()
    }

    fn list(path: &Path) -> Listing {
        let listing = Listing::of_dir(open(path), 4);
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

    /// Lists the differences between the trees `a` and `b` (scripts/compare-trees), other
    /// than the times of directories: a lander merging into an existing directory leaves
    /// its time (and mode) as they were.
    fn differences(a: &Path, b: &Path) -> Vec<String> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/compare-trees");
        let out = Command::new(script)
            .args(["--max-lines", "1000"])
            .args([a, b])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        let dirs = dirs_in(a, "");
        text.lines()
            .filter(|l| l.contains(": ") && !l.contains(" entries compared"))
            .filter(|l| {
                let path = l.split(": ").next().unwrap();
                !(l.contains(": mtime: ") && dirs.iter().any(|d| d == path))
            })
            .map(str::to_owned)
            .collect()
    }

    /// The directories of the tree `root`, as compare-trees names them (`.` for the root).
    fn dirs_in(root: &Path, at: &str) -> Vec<String> {
        let mut dirs = vec![if at.is_empty() {
            ".".into()
        } else {
            at.to_owned()
        }];
        for entry in fs::read_dir(root.join(at)).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                let name = entry.file_name().into_string().unwrap();
                let below = if at.is_empty() {
                    name
                } else {
                    format!("{at}/{name}")
                };
                dirs.extend(dirs_in(root, &below));
            }
        }
        dirs
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
        // Nothing after the end record is read.
        let mut more = Cursor::new([&wire[..], b"next"].concat());
        Listing::read_from(&mut more, ListingLimits::default()).unwrap();
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
            // Directories and the fifo only.
            assert_eq!(sent(&packed), ["|fifo"], "archive: {archive}");
            assert_eq!((summary.unchanged, summary.files, summary.dirs), (47, 0, 4));
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
}
