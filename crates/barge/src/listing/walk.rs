//! The walking threads' visitors: the lister of a destination and the check of a tree
//! against a listing.

use std::collections::{HashMap, HashSet};
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use rustix::fs::Statx;
use rustix::io::Errno;

use crate::compare::{inode_key, Facts, InodeKey, Rule};
use crate::error::{Error, Result};
use crate::tree::{Entry, Kind, Meta, XattrReader};
use crate::walk::parallel::{Dir, ParallelVisitor, ParallelVisitorBuilder, WalkState};

use super::*;

/// A listing being gathered by the walking threads.
#[derive(Default)]
pub(super) struct Gather {
    pub(super) listing: Mutex<Listing>,
    /// The link group of each inode with several links met so far.
    pub(super) groups: Mutex<HashMap<InodeKey, u32>>,
    pub(super) unlisted: Mutex<u64>,
    /// The lister keeps owners (and so every extended attribute).
    pub(super) owners: bool,
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
            xattrs: XattrReader::default(),
        }
    }
}

/// One walking thread's visitor: the entries of the directory it lists.
pub(super) struct Lister<'a> {
    gather: &'a Gather,
    names: Names,
    xattrs: XattrReader,
}

/// A directory's permission bits, modification time and owner.
pub(super) type DirMeta = Meta;

/// What the unchanged rule compares of a directory with `meta`.
fn dir_facts(meta: Meta) -> Facts {
    Facts::new(Kind::Dir, 0, meta)
}

impl ParallelVisitor for Lister<'_> {
    type State = DirMeta;
    type Job = std::convert::Infallible;

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
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState {
        if let Some(mut listed) = Item::of_statx(stat) {
            if listed.kind == Kind::File {
                listed.group = self.gather.group(stat);
                // Unreadable: 0, which no digest is, so the sender sends the file.
                let owners = self.gather.owners;
                listed.xattrs = digest_of(&mut self.xattrs, fd, entry.name, owners).unwrap_or(0);
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
pub(super) type Found = Option<(u64, u64)>;

/// A check of trees against a listing under way, shared by the walking threads.
pub(super) struct Check<'a> {
    pub(super) listing: &'a Listing,
    /// What counts as unchanged.
    pub(super) rule: Rule,
    /// Each directory checked, by path, with what was found in it.
    pub(super) dirs: Mutex<Vec<(Box<[u8]>, Found)>>,
    /// The walk itself failed somewhere.
    pub(super) failed: AtomicBool,
}

impl<'a> Check<'a> {
    /// The state of the directory `path` (`meta` its own, when it is an entry), or `None`
    /// when the listing lacks it (and so, from a sound listing, all below it).
    pub(super) fn state(&self, path: &[u8], meta: Option<Meta>) -> Option<Checked<'a>> {
        let listed = self.listing.dirs.get(path)?;
        // A listing carries no directory's extended attributes.
        let rule = self.rule.but_xattrs();
        let same = meta.is_none_or(|meta| {
            let listed = dir_facts(listed.meta);
            rule.unchanged(&dir_facts(meta), &listed)
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
pub(super) struct Checked<'a> {
    names: Option<&'a Names>,
}

impl<'c, 'a> ParallelVisitorBuilder for &'c Check<'a> {
    type Visitor = Checker<'c, 'a>;

    fn build(&mut self) -> Checker<'c, 'a> {
        Checker {
            check: self,
            found: Some((0, 0)),
            xattrs: XattrReader::default(),
        }
    }
}

/// One checking thread's visitor: what it found so far in the directory it lists.
pub(super) struct Checker<'c, 'a> {
    check: &'c Check<'a>,
    found: Found,
    xattrs: XattrReader,
}

impl Checker<'_, '_> {
    /// Counts the file, symlink or special file `st` (`name` in `dir`) as listed when
    /// `names` shows it so, else notes that the directory changed.
    fn count(&mut self, names: Option<&Names>, dir: BorrowedFd<'_>, name: &[u8], st: &Statx) {
        let item = names.and_then(|n| n.get(name));
        let (rule, listing) = (self.check.rule, self.check.listing);
        let xattrs = || listing.xattrs_of(&mut self.xattrs, dir, name);
        let as_listed = item.is_some_and(|i| {
            (i.kind != Kind::File || st.stx_nlink == 1) && i.matches(st, rule, xattrs)
        });
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
    type Job = std::convert::Infallible;

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
        fd: BorrowedFd<'_>,
        entry: &Entry<'_>,
        stat: &Statx,
    ) -> WalkState {
        match entry.kind {
            // A socket is never sent: its directory is.
            Kind::Dir | Kind::Socket | Kind::Unknown => self.found = None,
            _ => self.count(dir.state().names, fd, entry.name, stat),
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
