//! Comparing entries: the one rule that says an entry is unchanged since it was copied
//! (`cp --update`, `send --update`'s listing and the pack that reads it), and the one key of
//! an inode (hard links, du's counted inodes, DEST inside SRC).

use rustix::fs::{makedev, Statx, StatxFlags};

use crate::tree::{Kind, Meta};

/// What every `statx` of an entry asks for, by every walker and operation: everything they
/// use, all of it filled from the inode by local filesystems at no extra cost.
pub(crate) const STATX_MASK: StatxFlags = StatxFlags::TYPE
    .union(StatxFlags::MODE)
    .union(StatxFlags::SIZE)
    .union(StatxFlags::BLOCKS)
    .union(StatxFlags::MTIME)
    .union(StatxFlags::UID)
    .union(StatxFlags::GID)
    .union(StatxFlags::INO)
    .union(StatxFlags::NLINK);

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
    /// A file's bytes; a symlink's target length.
    pub(crate) size: u64,
    /// Permission bits (all twelve), modification time, owner.
    pub(crate) meta: Meta,
}

impl Facts {
    /// What `stat` (asked with [`STATX_MASK`]) says.
    pub(crate) fn of_statx(stat: &Statx) -> Facts {
        Facts {
            kind: Kind::of_mode(stat.stx_mode.into()),
            size: stat.stx_size,
            meta: Meta::of_statx(stat),
        }
    }
}

/// The unchanged rule: an entry is unchanged when its kind, size, modification time (to the
/// nanosecond) and all twelve permission bits are the same (a symlink's bits are not: Linux
/// fixes them), and its owner too where the copy keeps owners. Hard links and extended
/// attributes are for the callers that keep them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Owners are kept (archive mode, by a process that may give files away).
    pub(crate) owners: bool,
}

impl Rule {
    /// True when `copy` is still what `source` is.
    pub(crate) fn unchanged(self, source: &Facts, copy: &Facts) -> bool {
        let (a, b) = (&source.meta, &copy.meta);
        source.kind == copy.kind
            && source.size == copy.size
            && a.mtime.is_some()
            && a.mtime == b.mtime
            && (source.kind == Kind::Symlink || a.mode == b.mode)
            && (!self.owners || (a.owner.is_some() && a.owner == b.owner))
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
            kind,
            size: 3,
            meta,
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
        assert!(!Rule { owners: true }.unchanged(&given_away, &file));
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
}
