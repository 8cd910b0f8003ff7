//! `pack`: the [`Pack`] operation, which walks a directory into the archive encoder
//! (version 1: `packer::Packer`, a [`Sink`](crate::tree::Sink); version 2: `v2`), and what a
//! pack reports.

mod packer;
pub mod share;
mod v2;

use packer::{encode, writer_gone};

use std::collections::{HashMap, HashSet};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{fstat, FileType, Statx};
use rustix::io::fcntl_dupfd_cloexec;

use crate::compare::{inode_key, Facts, Rule};
use crate::error::{Error, Result, TreePath};
use crate::exclude::Exclude;
use crate::format::check_name;
use crate::interrupt::Cancel;
use crate::listing::{Item, Listing, Names, Unchanged};
use crate::output::{ArchiveWriter, FdWriter, IoWriter, Output};
use crate::share::Share;
use crate::threads::Work;
use crate::tree::{Device, DirPath, Entry, Kind, Meta as TreeMeta, XattrReader, Xattrs};
use crate::walk::{Newer, Root, Walk};
use crate::Progress;

/// What a pack did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PackSummary {
    /// Directories packed (the root not included).
    pub dirs: u64,
    /// Regular files packed (hard links not included).
    pub files: u64,
    /// Symlinks packed.
    pub symlinks: u64,
    /// Hard links packed (names of a file packed before).
    pub hard_links: u64,
    /// Fifos and devices packed.
    pub specials: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Bytes of archive written.
    pub archive_bytes: u64,
    /// Files, symlinks and special files left out as unchanged (see [`Pack::unchanged`]).
    pub unchanged: u64,
    /// Bytes of content of the files left out as unchanged.
    pub unchanged_bytes: u64,
    /// What was left out, and why (how many, in a serialized summary).
    #[serde(serialize_with = "count")]
    pub warnings: Vec<Warning>,
}

impl PackSummary {
    /// True when something the archive should hold is missing from it (an entry that could
    /// not be read; tar exits with status 2 then), not only kinds it never holds.
    pub fn lost_any(&self) -> bool {
        self.warnings.iter().any(|w| w.lost)
    }
}

fn count<S: serde::Serializer, T>(items: &[T], to: S) -> std::result::Result<S::Ok, S::Error> {
    to.serialize_u64(items.len() as u64)
}

/// An entry a pack left out, or packed without some of its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The entry.
    pub path: TreePath,
    /// What happened: `socket ignored`, `cannot open: Permission denied`.
    pub problem: String,
    /// True when the archive lacks something it should hold (the entry could not be read);
    /// false for a kind it does not take (a socket; a device, unless [`Pack::archive`]).
    pub lost: bool,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.problem)
    }
}

impl Warning {
    /// The warning of an entry that could not be read.
    fn unreadable(error: Error) -> Warning {
        let (path, problem) = match error {
            Error::Io { op, path, cause } => (path, crate::error::io_problem(op, &cause)),
            Error::Argument { arg, problem } => (TreePath(arg.into_bytes()), problem),
            other => (TreePath::default(), other.to_string()),
        };
        Warning {
            path,
            problem,
            lost: true,
        }
    }

    /// The warning of an entry of a kind the archive does not take.
    fn ignored(path: TreePath, kind: Kind) -> Warning {
        Warning {
            path,
            problem: format!("{} ignored", kind.name()),
            lost: false,
        }
    }
}

/// Packs directory trees into an archive:
/// `Pack::new(root).progress(&progress).to_fd(out)`. Records each entry's kind, all twelve
/// mode bits and modification time, symlinks, hard links (files with several links, once
/// per inode) and fifos; with [`Pack::archive`] also owners, extended attributes and
/// devices. Entries that cannot be read are left out and reported in
/// [`PackSummary::warnings`], as are sockets. The archive never packs itself: the file it
/// is written to (when a regular file) and the file it replaces are left out without a
/// word.
#[derive(Debug)]
pub struct Pack<'a> {
    /// The directories to walk, with the names of their top-level entries (empty: the
    /// directory's entries at the top, or only its members).
    roots: Vec<Root>,
    newer: Option<Newer>,
    one_file_system: bool,
    progress: Option<&'a Progress>,
    /// Device and inode of the file the archive replaces.
    replaced: Option<(u64, u64)>,
    /// Device and inode of the file a shared pack's archive is written to
    /// ([`Pack::written_to`]).
    written: Option<(u64, u64)>,
    archive: bool,
    exclude: Exclude,
    unchanged: Option<&'a Listing>,
    cancel: Cancel,
    format: Format,
    /// The zstd level of a version 2 pack's segments (0: stored raw).
    zstd: i32,
    /// Worker threads of a version 2 pack (0: one per core).
    threads: u32,
    segment_target: u32,
}

/// The archive format a pack writes (docs/FORMAT.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Version 1: one stream, written by one thread (`send` writes this).
    #[default]
    V1,
    /// Version 2: segments with digests, sealed (and compressed) on every core, and an
    /// index.
    V2,
}

impl<'a> Pack<'a> {
    /// A pack of the tree below the directory `root` (opened for reading): its entries at
    /// the top of the archive.
    pub fn new(root: OwnedFd) -> Pack<'a> {
        Pack::of(vec![Root::tree(Vec::new(), root)])
    }

    fn of(roots: Vec<Root>) -> Pack<'a> {
        Pack {
            roots,
            newer: None,
            one_file_system: false,
            progress: None,
            replaced: None,
            written: None,
            archive: false,
            exclude: Exclude::default(),
            unchanged: None,
            cancel: Cancel::new(),
            format: Format::V1,
            zstd: 0,
            threads: 0,
            segment_target: crate::format::SEGMENT_TARGET as u32,
        }
    }

    /// A pack of several directories, each a top-level directory of the archive named by
    /// its name (`tar -c A B` keeps `A/...` and `B/...`), in the order given (version 2:
    /// sorted by name, as every directory's entries are). A name that is no valid entry
    /// name, or given twice, is an [`Error::Argument`].
    pub fn named(roots: Vec<(Vec<u8>, OwnedFd)>) -> Result<Pack<'a>> {
        let roots = roots.into_iter().map(|(name, fd)| Root::tree(name, fd));
        Pack::inputs(roots.collect())
    }

    /// A pack of `roots`: directory trees, each a top-level directory named by its name (or
    /// its entries at the top, when unnamed), and members of directories (a file named on
    /// the command line, `pack -T`), each at the top under its path. A top-level name that
    /// is no valid entry name, or that two roots would both give, is an
    /// [`Error::Argument`]; so are roots whose top-level names interleave (version 2 sorts
    /// the roots by name, and each root's entries come together).
    pub fn inputs(roots: Vec<Root>) -> Result<Pack<'a>> {
        if let [root] = &roots[..] {
            if root.name.is_empty() {
                return Ok(Pack::of(roots));
            }
        }
        let mut sorted: Vec<Vec<&[u8]>> = roots.iter().map(Root::top_names).collect();
        sorted.sort();
        let mut last: Option<&[u8]> = None;
        for name in sorted.into_iter().flatten() {
            let bad = |problem: String| Error::Argument {
                arg: crate::error::escape_bytes(name),
                problem,
            };
            check_name(name).map_err(|e| bad(format!("cannot name a top-level entry: {e}")))?;
            if last >= Some(name) {
                return Err(bad(match last == Some(name) {
                    true => "two inputs would be the same top-level entry".into(),
                    false => "inputs would interleave at the top of the archive".into(),
                }));
            }
            last = Some(name);
        }
        Ok(Pack::of(roots))
    }

    /// Leaves out every entry but directories that `newer` does not keep (`pack --newer`:
    /// directories are packed whatever their times, as tar packs them).
    pub fn newer(mut self, newer: Newer) -> Pack<'a> {
        self.newer = Some(newer);
        self
    }

    /// Packs a directory on another filesystem than its root's as an empty directory (a
    /// mount point is kept, its contents are not: `tar --one-file-system`).
    pub fn one_file_system(mut self, yes: bool) -> Pack<'a> {
        self.one_file_system = yes;
        self
    }

    /// Counts entries, content bytes and archive bytes written in `progress` as it goes.
    pub fn progress(mut self, progress: &'a Progress) -> Pack<'a> {
        self.progress = Some(progress);
        self
    }

    /// Stops once `cancel` is cancelled (the default: a token of its own, which nothing
    /// cancels).
    pub fn cancel(mut self, cancel: Cancel) -> Pack<'a> {
        self.cancel = cancel;
        self
    }

    /// Also records owners (numeric), extended attributes of directories and regular files
    /// (every namespace the process may read: `user.*`, POSIX ACLs as `system.posix_acl_*`,
    /// ...; not of symlinks and special files, which have no fd to read them from without
    /// opening or following them) and character and block devices, as `tar -p --xattrs
    /// --acls` does (`barge pack -a`).
    pub fn archive(mut self, yes: bool) -> Pack<'a> {
        self.archive = yes;
        self
    }

    /// Leaves out what `exclude` matches below each root.
    pub fn exclude(mut self, exclude: Exclude) -> Pack<'a> {
        self.exclude = exclude;
        self
    }

    /// Leaves out the regular files and symlinks that `listing` (what the destination
    /// holds, with a named root's name as the first component of its paths) shows as they
    /// are here: same path and kind, same size (of a symlink, target length), modification
    /// time to the nanosecond and, for a file, permission bits; with [`Pack::archive`] the
    /// owner (where the listing says the destination keeps them) and a file's extended
    /// attributes (those the destination keeps, read by name once the rest matched): by
    /// `compare.rs`'s one rule, before the file is opened; so are special files of the same
    /// kind, device number, time, mode and owner (where compared). Counted in
    /// [`PackSummary::unchanged`]. Directories and anything not in the listing are packed
    /// as always (a lander merges into existing directories and, with
    /// `Existing::Overwrite`, replaces changed entries).
    ///
    /// Hard links: a file is left out only where the listing's has as many links. Once a
    /// name of an inode with several is left out, each later name of it is compared on its
    /// own and left out only in the same link group of the listing (so the names left out
    /// are one inode there too); a later name that differs is packed as a whole file, and
    /// the names after it link to it (the destination then has one link fewer there, so
    /// the next update sends the inode whole again, linked). Names of an inode that was
    /// packed link to it. Links from outside the tree count, so a file linked from outside
    /// is sent every time unless the destination's is linked as often.
    pub fn unchanged(mut self, listing: &'a Listing) -> Pack<'a> {
        self.unchanged = Some(listing);
        self
    }

    /// What `listing` (of the destination) shows and this pack's trees lack, not excluded:
    /// the paths `send --delete` removes (see [`Listing::missing`]).
    pub(crate) fn missing_in(&self, listing: &Listing) -> Vec<Box<[u8]>> {
        listing.missing(&self.roots, &self.exclude)
    }

    /// Writes this version of the format (the default: [`Format::V1`]). Version 2 is
    /// sealed on [`Pack::threads`] threads, and adds the root directory's records.
    pub fn format(mut self, format: Format) -> Pack<'a> {
        self.format = format;
        self
    }

    /// Stores each segment as a zstd frame at `level` (1 to 19; `barge pack --zstd` uses 3)
    /// where that is smaller; implies [`Format::V2`].
    pub fn zstd(mut self, level: i32) -> Pack<'a> {
        self.zstd = level.clamp(1, 19);
        self.format = Format::V2;
        self
    }

    /// Seals version 2 segments on `threads` worker threads (at least 1; the default: one
    /// per core). The archive is the same whatever their number.
    pub fn threads(mut self, threads: usize) -> Pack<'a> {
        self.threads = threads.clamp(1, u32::MAX as usize) as u32;
        self
    }

    /// Closes version 2 segments at `target` bytes instead (tests: many segments from a
    /// small tree).
    #[cfg(test)]
    pub(crate) fn segment_target(mut self, target: u32) -> Pack<'a> {
        self.segment_target = target;
        self
    }
    /// Writes the archive to `out` (a file, pipe, socket or device) by `write`, and large
    /// files by `sendfile`.
    pub fn to_fd(self, out: BorrowedFd<'_>) -> Result<PackSummary> {
        let stat =
            fstat(out).map_err(|e| Error::io("fstat", TreePath(b"<archive>".to_vec()), e))?;
        let archive = (FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile)
            .then_some((stat.st_dev, stat.st_ino));
        let cancel = self.cancel.clone();
        self.run(FdWriter(out, cancel), archive)
    }

    /// Writes the archive to `-o PATH` (see [`Output`]) and puts it in place when it is
    /// complete; a failed pack leaves PATH as it was (a device or fifo holds what was
    /// written).
    pub fn to_output(mut self, out: Output) -> Result<PackSummary> {
        self.replaced = out.replaced();
        let packed = self.to_fd(out.as_fd())?;
        out.finish()?;
        Ok(packed)
    }

    /// Writes the archive through `out` (an encrypting socket, a `Vec<u8>`); large files
    /// are read and written through it, and it is flushed at the end. Nothing is left
    /// out: `out` must not write into the tree.
    pub fn to_writer(self, out: impl io::Write + Send) -> Result<PackSummary> {
        let cancel = self.cancel.clone();
        self.run(IoWriter::new(out, cancel), None)
    }

    /// Walks the trees into a [`Packer`] writing to `out`; `archive` is the file `out`
    /// writes.
    fn run(self, out: impl ArchiveWriter, archive: Option<(u64, u64)>) -> Result<PackSummary> {
        self.run_shared(out, archive, None)
            .map(|(summary, _)| summary)
    }

    /// The walk this pack makes, leaving out the directories `prune`.
    fn walk<'w>(&'w self, prune: &'w HashSet<Box<[u8]>>) -> Walk<'w> {
        Walk::new()
            .exclude(&self.exclude)
            .xattrs(self.archive)
            .prune(prune)
            .newer(self.newer)
            .one_file_system(self.one_file_system)
    }

    /// As [`Pack::run`]; with `sharing`, only that share of a version 2 archive (see
    /// [`share`]).
    fn run_shared(
        mut self,
        out: impl ArchiveWriter,
        archive: Option<(u64, u64)>,
        sharing: Option<(&Share, v2::Sharing<'_>)>,
    ) -> Result<(PackSummary, Option<v2::Written>)> {
        let local = Progress::default();
        let progress = self.progress.unwrap_or(&local);
        let itself = [archive, self.replaced];
        // Whole directories as listed are left out before the ordered walk starts.
        let unchanged = match self.unchanged {
            Some(listing) => {
                let rule = listing.rule(self.archive);
                let threads = Work::Listing.threads();
                listing.unchanged_dirs(&self.roots, &self.exclude, threads, rule)
            }
            None => Unchanged::default(),
        };
        let roots = std::mem::take(&mut self.roots);
        let mut walk = self.walk(&unchanged.dirs);
        if let Some((share, _)) = sharing {
            walk = walk.share(share);
        }
        let packed = match self.format {
            Format::V1 => encode(
                out,
                itself,
                self.archive,
                self.unchanged,
                progress,
                self.cancel.clone(),
                |packer| walk.run_named(roots, packer),
            )
            .map(|summary| (summary, None)),
            Format::V2 => {
                // Version 2 sorts the entries of every directory, the roots too (by name:
                // `Pack::inputs` checks that they do not interleave). A single root's own records, from a duplicate
                // of its fd (the walk takes the fd); several named roots are entries of
                // their own, and a root of members is no entry.
                let mut roots = roots;
                roots.sort_by(|a, b| a.top_names().cmp(&b.top_names()));
                let root = match &roots[..] {
                    [Root {
                        name,
                        fd,
                        members: None,
                    }] if name.is_empty() && sharing.is_none_or(|(s, _)| s.first()) => Some(
                        fcntl_dupfd_cloexec(fd, 0)
                            .map_err(|e| Error::io("dup directory", TreePath::default(), e))?,
                    ),
                    _ => None,
                };
                let settings = v2::Settings {
                    archive: self.archive,
                    zstd: (self.zstd > 0).then_some(self.zstd),
                    threads: match self.threads {
                        0 => Work::Cores.threads(),
                        n => n as usize,
                    },
                    target: self.segment_target as usize,
                    itself,
                    listing: self.unchanged,
                    progress,
                    cancel: self.cancel.clone(),
                    sharing: sharing.map(|(_, sharing)| sharing),
                };
                v2::encode(out, settings, root, |planner| {
                    walk.run_named(roots, planner)
                })
            }
        };
        packed.map(|(summary, written)| {
            let summary = PackSummary {
                unchanged: summary.unchanged + unchanged.entries,
                unchanged_bytes: summary.unchanged_bytes + unchanged.bytes,
                ..summary
            };
            (summary, written)
        })
    }
}

/// `meta` as an archive records it: owners only when `archive`.
fn recorded_meta(meta: TreeMeta, archive: bool) -> TreeMeta {
    TreeMeta {
        owner: meta.owner.filter(|_| archive),
        ..meta
    }
}

/// `entry` as an archive records it: owners and extended attributes only when `archive`.
fn recorded<'e>(entry: &Entry<'e>, archive: bool) -> Entry<'e> {
    Entry {
        meta: recorded_meta(entry.meta, archive),
        xattrs: if archive {
            entry.xattrs
        } else {
            Xattrs::default()
        },
        ..*entry
    }
}

/// What [`Pack::unchanged`] leaves out as a walk goes: the listing of what the destination
/// holds, its entries of the current directory, and what was left out.
struct Update<'a> {
    listing: Option<&'a Listing>,
    rule: Rule,
    /// The listing's entries of the current directory.
    here: Option<&'a Names>,
    /// The listing's link group of each inode with several links a name of which was left
    /// out, by device and inode.
    left_out: HashMap<(u64, u64), u32>,
    /// Files and symlinks left out, and the bytes of the files.
    unchanged: u64,
    unchanged_bytes: u64,
    /// The extended attributes of files compared.
    xattrs: XattrReader,
}

impl<'a> Update<'a> {
    /// Leaves out what `listing` shows unchanged (comparing owners when `archive`).
    fn new(listing: Option<&'a Listing>, archive: bool) -> Update<'a> {
        Update {
            listing,
            rule: listing.map(|l| l.rule(archive)).unwrap_or_default(),
            here: listing.and_then(|l| l.dir(b"")),
            left_out: HashMap::new(),
            unchanged: 0,
            unchanged_bytes: 0,
            xattrs: XattrReader::default(),
        }
    }

    /// What the listing shows at `name` in the current directory.
    fn listed_here(&self, name: &[u8]) -> Option<&'a Item> {
        self.here?.get(name)
    }

    /// Points [`Update::here`] at the listing's entries of the directory `dir`.
    fn relisted(&mut self, dir: &DirPath) {
        self.here = self.listing.and_then(|l| l.dir(dir.as_bytes()));
    }

    /// True when `there` (what the listing shows at the name) is the regular file `st`
    /// describes (`name` in `dir`), under the rules of [`Pack::unchanged`] (`packed`: a
    /// name of its inode is packed already): it is left out, and counted.
    fn unchanged_file(
        &mut self,
        there: Option<&Item>,
        st: &Statx,
        packed: bool,
        (dir, name): (BorrowedFd<'_>, &[u8]),
    ) -> bool {
        let (Some(there), Some(listing)) = (there, self.listing) else {
            return false;
        };
        let xattrs = || listing.xattrs_of(&mut self.xattrs, dir, name);
        if !there.matches(st, self.rule, xattrs) {
            return false;
        }
        // An archive links a name only to a name it holds: every name of the inode must be
        // in the copy as it is here.
        let same_links = there.links == st.stx_nlink
            && if st.stx_nlink > 1 {
                // A name of an inode packed already becomes a hard link to it.
                !packed
                    && there.group != 0
                    && *self.left_out.entry(inode_key(st)).or_insert(there.group) == there.group
            } else {
                there.group == 0
            };
        if same_links {
            self.unchanged += 1;
            self.unchanged_bytes += st.stx_size;
        }
        same_links
    }

    /// True when the listing shows the symlink `entry` to `target` unchanged (same target
    /// length and time): it is left out, and counted.
    fn unchanged_symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> bool {
        let same = self.listed_here(entry.name).is_some_and(|t| {
            t.kind == Kind::Symlink
                && t.size == target.len() as u64
                && Some(t.mtime) == entry.meta.mtime
        });
        self.unchanged += u64::from(same);
        same
    }

    /// True when the listing shows the special file `entry` (of the device `device`)
    /// unchanged by the rule (kind, device number, time, mode, owner where compared): it
    /// is left out, and counted.
    fn unchanged_special(&mut self, entry: &Entry<'_>, device: Device) -> bool {
        let here = Facts::new(entry.kind, device.number(), entry.meta);
        let rule = self.rule.but_xattrs();
        let same = (self.listed_here(entry.name))
            .is_some_and(|there| rule.unchanged(&here, &there.facts()));
        self.unchanged += u64::from(same);
        same
    }

    /// `summary` with what was left out counted in.
    fn counted(&self, summary: PackSummary) -> PackSummary {
        PackSummary {
            unchanged: summary.unchanged + self.unchanged,
            unchanged_bytes: summary.unchanged_bytes + self.unchanged_bytes,
            ..summary
        }
    }
}
