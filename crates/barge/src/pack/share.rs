//! One version 2 archive packed by several processes (`pack --mpi`), each a [`Share`] of
//! the tree. Every process counts the parts ([`Pack::parts`]), plans its share
//! ([`Pack::plan_share`]: how many entries, which files of several links it names first),
//! learns from the others where its entries start and which of its files of several links
//! were named before it, then packs its share's frames ([`Pack::pack_share`]) into a file
//! of its own, to be copied where the shares before it end. One process writes the
//! [`HEADER`] and, from every share's [`Shared::index`], the index and the footer
//! ([`tail`]). The archive is a valid one whatever the number of processes: its entries in
//! path order, links to earlier entries across shares, segments cut where shares meet.

use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{openat, Mode};

use super::{v2, Format, Pack, PackSummary};
use crate::error::{Error, Result, TreePath};
use crate::format::segments::{share_index, shared_tail, Zstd};
use crate::format::HEADER_V2;
use crate::output::FdWriter;
use crate::share::Share;
use crate::sys::DIR_FLAGS;
use crate::walk::{Quiet, Root};
use crate::Progress;

/// Entry numbers of files of several links, by device and inode.
pub type Links = HashMap<(u64, u64), u64>;

/// The first bytes of the archive, before the first share's.
pub const HEADER: [u8; 8] = HEADER_V2;

/// What planning a share found ([`Pack::plan_share`]).
#[derive(Debug, Default)]
pub struct Planned {
    /// The entries of the share.
    pub entries: u64,
    /// The files of several links that the share names, by device and inode: the number
    /// of the first entry naming each, counted from the share's first.
    pub links: Links,
}

/// What [`Pack::pack_share`] wrote.
#[derive(Debug)]
pub struct Shared {
    /// What the share holds.
    pub summary: PackSummary,
    /// The bytes written: the share's frames.
    pub bytes: u64,
    /// What the index needs of the share, for [`tail`].
    pub index: Vec<u8>,
}

impl Pack<'_> {
    /// The number of parts of the tree split at depth `split` ([`crate::share`]), as a walk
    /// finds them; every process finds the same in a tree that does not change meanwhile.
    pub fn parts(&self, split: usize) -> Result<u64> {
        let (share, prune) = (Share::counting(split), HashSet::new());
        let walk = self.walk(&prune).share(&share);
        walk.run(self.shared_root()?, &mut Quiet::<Error>(PhantomData))?;
        Ok(share.seen())
    }

    /// The depth `processes` split the tree at ([`crate::share::split_depth`]).
    pub fn split_depth(&self, processes: u32) -> Result<usize> {
        Ok(crate::share::split_depth(
            self.shared_root()?.as_fd(),
            processes,
        ))
    }

    /// Plans `share` without reading any file: its entries, and its files of several links.
    pub fn plan_share(&self, share: &Share) -> Result<Planned> {
        let links = HashMap::new();
        let progress = Progress::default();
        let settings = v2::Settings {
            archive: self.archive,
            zstd: None,
            threads: 1,
            target: self.segment_target as usize,
            itself: [None, self.replaced],
            listing: None,
            progress: &progress,
            cancel: self.cancel.clone(),
            sharing: Some(v2::Sharing {
                first: 0,
                links: &links,
                counting: true,
            }),
        };
        let root = self.shared_root()?;
        let prune = HashSet::new();
        let walk = self.walk(&prune).share(share);
        let (entries, links) = v2::plan(settings, |planner| walk.run(root, planner))?;
        Ok(Planned { entries, links })
    }

    /// Packs the frames of `share` into `out`, as planned: its entries numbered from
    /// `first`, `entries` of them, with the files of several links in `links` (by device
    /// and inode) as hard links to those entries (their first names, in earlier shares).
    /// A tree that changed since it was planned (another number of entries) is an error.
    pub fn pack_share(
        mut self,
        share: &Share,
        first: u64,
        entries: u64,
        links: &Links,
        out: BorrowedFd<'_>,
    ) -> Result<Shared> {
        self.format = Format::V2;
        self.shared_root()?;
        let sharing = v2::Sharing {
            first,
            links,
            counting: false,
        };
        let cancel = self.cancel.clone();
        let (summary, written) =
            self.run_shared(FdWriter(out, cancel), None, Some((share, sharing)))?;
        let (segs, rows) = written.expect("a shared pack says what it wrote");
        if rows.count() != entries {
            return Err(Error::Argument {
                arg: "the tree".into(),
                problem: format!(
                    "changed while it was packed: {} entries where {entries} were planned",
                    rows.count()
                ),
            });
        }
        Ok(Shared {
            summary,
            bytes: segs.at(),
            index: share_index(&segs, &rows),
        })
    }

    /// The one directory a shared pack takes (its entries at the top), opened again: a
    /// walk reads it to its end, which a duplicate fd would share.
    fn shared_root(&self) -> Result<OwnedFd> {
        match &self.roots[..] {
            [Root {
                name,
                fd,
                members: None,
            }] if name.is_empty() => openat(fd, c".", DIR_FLAGS, Mode::empty())
                .map_err(|e| Error::io("open directory", TreePath::default(), e)),
            _ => Err(Error::Argument {
                arg: "--mpi".into(),
                problem: "packs one directory (its entries at the top of the archive)".into(),
            }),
        }
    }
}

/// The index and the footer of an archive whose shares' [`Shared::index`] are `shares`,
/// in order, their frames written one after the other after the [`HEADER`]; the index is
/// stored as zstd at `zstd` where that is smaller.
pub fn tail(shares: &[&[u8]], zstd: Option<i32>) -> Result<Vec<u8>> {
    shared_tail(shares, zstd.map(Zstd::new).as_mut()).map_err(|problem| Error::Argument {
        arg: "--mpi".into(),
        problem,
    })
}
