//! The one restore policy every lander applies (docs/FORMAT.md, "Restoring metadata"): what
//! the caller asked for ([`Restore`]) and what the process may do (root or not), resolved
//! once into a [`Policy`], and the system calls that restore an entry's owner, setuid and
//! setgid bits, extended attributes and time, always on a descriptor or relative to a
//! directory descriptor without following a symlink. What may not be restored is counted
//! in [`NotRestored`], for one warning per kind.

use std::os::fd::BorrowedFd;

use rustix::fs::{
    chownat, fchmod, fchown, fsetxattr, fstat, fstatvfs, futimens, statat, utimensat, AtFlags, Gid,
    Mode, Timespec, Timestamps, Uid, XattrFlags, UTIME_OMIT,
};
use rustix::io::Errno;
use rustix::process::getegid;

use crate::error::{Error, Result, TreePath};
use crate::sys::xattr::setxattrat;
use crate::tree::{Entry, Kind, Owner, Timestamp, Xattrs};

/// Setuid and setgid.
pub(crate) const SETID: u32 = 0o6000;

/// Permission bits the owner needs to fill a directory; added while it is being filled
/// and taken away again when it is left.
const OWNER_RWX: u32 = 0o700;

/// What to do where an entry's name already exists in the destination (tar's choices).
/// Directories are merged into in every case; a directory in the archive where the
/// destination has anything else is always an error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Existing {
    /// Fail, naming it (tar's `--keep-old-files`).
    #[default]
    Keep,
    /// Leave it as it is and skip the entry (`--skip-old-files`); a file's content is read
    /// past, hard links to a skipped file are not made.
    Skip,
    /// Replace it (`--overwrite`): the entry is created under a temporary name in the same
    /// directory and renamed over it, so nothing is written through an existing file or
    /// symlink.
    Overwrite,
}

/// What an unpack restores of the metadata an archive holds, as its caller asks. Modes are
/// restored under the operation's umask (0 in the `barge` command, which clears the
/// process's; see `Unpack::umask`); which
/// of the rest a process may restore is decided with its effective user id when the
/// unpack is set up (docs/FORMAT.md, "Restoring metadata").
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Restore {
    /// Owners: `None` restores them when running as root (counted as not restored
    /// otherwise), `Some(false)` never (tar's `--no-same-owner`), `Some(true)` as `None`
    /// (`--same-owner`: only root may give files away).
    pub same_owner: Option<bool>,
    /// Restore setuid and setgid bits also when not running as root (on files the process
    /// then owns).
    pub setid: bool,
    /// Restore modification times (tar's `-m` turns this off).
    pub times: bool,
    /// What to do with existing entries.
    pub existing: Existing,
    /// Root too restores owners, creates devices and sets `trusted.`/`security.` attributes
    /// only with `same_owner: Some(true)`, and setuid and setgid bits only with `setid`:
    /// for archives from another host (`recv`) or a stranger (`serve`), whose owners and
    /// privileges mean nothing here unless asked for.
    #[serde(default)]
    pub asked_only: bool,
    /// Owners restored get the recorded ids (tar's `--numeric-owner`), not the ids their
    /// recorded user and group names have on this system.
    #[serde(default)]
    pub numeric_owner: bool,
    /// Restore permission bits and ACLs; `false` gives entries the default modes instead,
    /// 0666 (0777 for directories and sockets) less the umask, and no ACL, as GNU
    /// `cp --no-preserve=mode`.
    #[serde(default = "yes")]
    pub modes: bool,
    /// Restore extended attributes other than ACLs (which go with modes, as in GNU cp);
    /// `false` sets none (and counts none as not restored).
    #[serde(default = "yes")]
    pub xattrs: bool,
}

/// A field that is on unless a request says otherwise.
fn yes() -> bool {
    true
}

impl Default for Restore {
    /// Everything the process may restore; existing entries are errors.
    fn default() -> Restore {
        Restore {
            same_owner: None,
            setid: false,
            times: true,
            existing: Existing::Keep,
            asked_only: false,
            numeric_owner: false,
            modes: true,
            xattrs: true,
        }
    }
}

impl Restore {
    /// With owners as `same_owner` says (see [`Restore::same_owner`]).
    pub fn same_owner(mut self, same_owner: Option<bool>) -> Restore {
        self.same_owner = same_owner;
        self
    }

    /// With setuid and setgid restored also when not root, or not.
    pub fn setid(mut self, setid: bool) -> Restore {
        self.setid = setid;
        self
    }

    /// With modification times restored, or not.
    pub fn times(mut self, times: bool) -> Restore {
        self.times = times;
        self
    }

    /// Doing `existing` with existing entries.
    pub fn existing(mut self, existing: Existing) -> Restore {
        self.existing = existing;
        self
    }

    /// With root's privileges used only as asked (see [`Restore::asked_only`]).
    pub fn asked_only(mut self, yes: bool) -> Restore {
        self.asked_only = yes;
        self
    }

    /// With permission bits restored, or the default modes (see [`Restore::modes`]).
    pub fn modes(mut self, yes: bool) -> Restore {
        self.modes = yes;
        self
    }

    /// With extended attributes restored, or none.
    pub fn xattrs(mut self, yes: bool) -> Restore {
        self.xattrs = yes;
        self
    }

    /// With the recorded ids as owners, or (the default) the ids of the recorded names
    /// where this system has them (see [`Restore::numeric_owner`]).
    pub fn numeric_owner(mut self, yes: bool) -> Restore {
        self.numeric_owner = yes;
        self
    }
}

/// Metadata an unpack did not restore because the process may not (or the filesystem
/// would not), by kind; what the caller turned off is not counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct NotRestored {
    /// Entries whose owner was not restored (not root).
    pub owners: u64,
    /// Entries landed without their setuid or setgid bits (not root, no `setid`).
    pub setid: u64,
    /// Character and block devices not created (not root).
    pub devices: u64,
    /// Extended attributes not set: `trusted.*`, `security.*` and `system.*` but ACLs when not
    /// root, and any the filesystem refused (e.g. `user.*` on a symlink).
    pub xattrs: u64,
    /// Hard links not made because the file they name was skipped (it existed).
    pub hard_links: u64,
    /// Directories that were there and kept their own mode or time where `--overwrite`
    /// would give them the archive's: the process is not their owner.
    #[serde(default)]
    pub merged_dirs: u64,
}

impl NotRestored {
    /// Whether anything was left out.
    pub fn any(&self) -> bool {
        *self != NotRestored::default()
    }

    /// Adds `other`'s counts.
    pub(crate) fn add(&mut self, other: &NotRestored) {
        self.owners += other.owners;
        self.setid += other.setid;
        self.devices += other.devices;
        self.xattrs += other.xattrs;
        self.hard_links += other.hard_links;
        self.merged_dirs += other.merged_dirs;
    }
}

/// Whether a process that gives files away (`owners`: root, asked) sets the extended
/// attribute `name`: any, else `user.*` and ACLs (an owner may set its files' ACLs,
/// `setfacl`, as it may their modes).
pub(crate) fn xattr_kept(owners: bool, name: &[u8]) -> bool {
    owners || name.starts_with(b"user.") || name.starts_with(b"system.posix_acl_")
}

/// [`Restore`] resolved for this process: built once per unpack and copied into each
/// lander.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Policy {
    restore: Restore,
    /// Running as root (effective uid 0 when the unpack was set up, before any sandbox).
    root: bool,
    /// Owners are given, devices created and `trusted.`/`security.` attributes set (root,
    /// and asked where it must be).
    owners: bool,
    /// Setuid and setgid bits are kept (where the ids they grant are the recorded ones).
    setid: bool,
    /// The process's effective ids when the unpack was set up (outside any sandbox): the
    /// owner of what it creates without a `chown`.
    me: Owner,
    /// The umask entries are created under (the process's): the modes set later by
    /// `fchmod` are masked alike.
    umask: u32,
}

/// What to restore of one entry, decided by [`Policy::entry`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Apply {
    /// The permission bits to give it (setuid and setgid only when allowed), before the
    /// umask.
    pub(crate) mode: u32,
    /// The owner to give it.
    pub(crate) owner: Option<Owner>,
    /// The modification time to give it.
    pub(crate) mtime: Option<Timestamp>,
    /// A file that needs a `fchmod` after its creation: its setuid or setgid bits do not
    /// survive a `chown`, nor a write by anyone but root, and a setgid bit kept because the
    /// recorded group is the process's is checked against the group the file got.
    pub(crate) chmod: bool,
}

impl Apply {
    /// The mode to create a file with: without setuid and setgid where a `fchmod` gives
    /// them once its owner and group are right.
    pub(crate) fn create_mode(&self) -> u32 {
        match self.chmod {
            true => self.mode & !SETID,
            false => self.mode,
        }
    }
}

/// Where [`Policy::restore`] applies metadata.
#[derive(Clone, Copy)]
pub(crate) enum Target<'a> {
    /// An fd open for reading or writing.
    Fd(BorrowedFd<'a>),
    /// An `O_PATH` fd (a directory handle).
    Handle(BorrowedFd<'a>),
    /// A name in a directory, never followed (a symlink, a special file).
    At(BorrowedFd<'a>, &'a [u8]),
}

impl Policy {
    /// The policy for `restore` in a process whose effective ids are `me` (root or not),
    /// creating entries under `umask`.
    pub(crate) fn new(restore: Restore, me: Owner, umask: u32) -> Policy {
        let root = me.uid == 0;
        let unasked = root && !restore.asked_only;
        Policy {
            restore,
            root,
            owners: root && (unasked || restore.same_owner == Some(true)),
            setid: unasked || restore.setid,
            me,
            umask,
        }
    }

    /// Whether owners are restored.
    pub(crate) fn owners(&self) -> bool {
        self.owners
    }

    /// Whether entries get their recorded owners (where [`Policy::owners`] allows it and
    /// the caller did not turn it off).
    pub(crate) fn restores_owners(&self) -> bool {
        self.owners && self.restore.same_owner != Some(false)
    }

    /// Whether modification times are restored.
    pub(crate) fn times(&self) -> bool {
        self.restore.times
    }

    /// Whether any extended attributes are restored (ACLs or others, where
    /// [`Policy::sets_xattr`] allows).
    pub(crate) fn xattrs(&self) -> bool {
        self.restore.xattrs || self.restore.modes
    }

    /// Whether the caller asked for the extended attribute `name`: an ACL with modes, any
    /// other with [`Restore::xattrs`].
    fn asks_xattr(&self, name: &[u8]) -> bool {
        match name.starts_with(b"system.posix_acl_") {
            true => self.restore.modes,
            false => self.restore.xattrs,
        }
    }

    /// The permission bits an entry of `kind` recorded with `mode` gets: its own (all
    /// twelve, before the umask), or without [`Restore::modes`] the defaults less the umask.
    pub(crate) fn mode_of(&self, kind: Kind, mode: u32) -> u32 {
        match (self.restore.modes, kind) {
            (true, _) => mode & 0o7777,
            (false, Kind::Dir | Kind::Socket) => 0o777 & !self.umask,
            (false, _) => 0o666 & !self.umask,
        }
    }

    /// Whether owners are restored by their recorded names (see [`Restore::numeric_owner`]).
    pub(crate) fn owners_by_name(&self) -> bool {
        self.owners && !self.restore.numeric_owner
    }

    /// What to do with existing entries.
    pub(crate) fn existing(&self) -> Existing {
        self.restore.existing
    }

    /// Whether character and block devices may be created (else they are counted in
    /// `skipped` and not created).
    pub(crate) fn devices(&self, skipped: &mut NotRestored) -> bool {
        if !self.owners {
            skipped.devices += 1;
        }
        self.owners
    }

    /// Whether the extended attribute `name` is restored ([`xattr_kept`]).
    pub(crate) fn sets_xattr(&self, name: &[u8]) -> bool {
        self.asks_xattr(name) && xattr_kept(self.owners, name)
    }

    /// What to restore of `entry`, counting in `skipped` what it may not.
    pub(crate) fn entry(&self, entry: &Entry<'_>, skipped: &mut NotRestored) -> Apply {
        let meta = entry.meta;
        let owner = match (meta.owner, self.restore.same_owner) {
            (None, _) | (_, Some(false)) => None,
            (Some(owner), _) if self.owners => Some(owner),
            // Root not asked to: as `Some(false)`. Others: a file of theirs already has it.
            (Some(owner), _) => {
                skipped.owners += u64::from(!self.root && owner != self.me);
                None
            }
        };
        let mut mode = self.mode_of(entry.kind, meta.mode);
        // Setuid and setgid mean nothing on a special file (and could not be set on it
        // through a descriptor).
        let setid = match entry.kind {
            Kind::File | Kind::Dir => mode & SETID,
            _ => 0,
        };
        let kept = match self.setid {
            true => setid & self.setid_kept(meta.owner, owner),
            false => 0,
        };
        skipped.setid += u64::from(setid != kept);
        mode &= !(SETID & !kept);
        Apply {
            mode,
            owner,
            mtime: meta.mtime.filter(|_| self.restore.times),
            chmod: entry.kind == Kind::File
                && kept != 0
                && (owner.is_some() || !self.root || kept & 0o2000 != 0),
        }
    }

    /// Which of setuid and setgid an entry recorded as owned by `recorded` may keep when it
    /// is given `owner` (or keeps the process's ids): a bit only where the id it grants is
    /// the recorded one, so no archive or copy makes a program run as someone it did not
    /// belong to (libarchive's rule). A setgid bit kept on a file with the process's group
    /// is checked again after its creation (a setgid directory gives its own group).
    fn setid_kept(&self, recorded: Option<Owner>, owner: Option<Owner>) -> u32 {
        let bits = |uid: bool, gid: bool| match (uid, gid) {
            (true, true) => SETID,
            (true, false) => 0o4000,
            (false, true) => 0o2000,
            (false, false) => 0,
        };
        match (owner, recorded) {
            // 0xffffffff: that id was not recorded, the file keeps the process's.
            (Some(owner), _) => bits(owner.uid != u32::MAX, owner.gid != u32::MAX),
            (None, Some(recorded)) => {
                bits(recorded.uid == self.me.uid, recorded.gid == self.me.gid)
            }
            (None, None) => 0,
        }
    }

    /// A directory's creation mode (with owner rwx, so it can be filled; setuid and setgid
    /// are ignored by `mkdir`), and the mode to set with `fchmod` once it is filled, when
    /// that differs under the umask.
    pub(crate) fn dir_modes(&self, apply: &Apply) -> (u32, Option<u32>) {
        let create = (apply.mode & 0o1777) | OWNER_RWX;
        let last = apply.mode & !self.umask;
        (create, (last != create & !self.umask).then_some(last))
    }

    /// The mode a directory gets once filled.
    pub(crate) fn final_dir_mode(&self, apply: &Apply) -> u32 {
        apply.mode & !self.umask
    }

    /// The mode a directory that was there already gets once filled: with
    /// [`Existing::Overwrite`] the archive's (as its time, owner and extended attributes:
    /// what tar does; `cp --update` and `send --update` need it to match the source), else
    /// none (it keeps its own).
    pub(crate) fn merged_dir_mode(&self, apply: &Apply) -> Option<u32> {
        (self.restore.existing == Existing::Overwrite).then_some(apply.mode & !self.umask)
    }

    /// Whether restoring a file's metadata needs its descriptor beyond `futimens` (for a
    /// lander that creates files without one).
    pub(crate) fn needs_fd(&self, apply: &Apply, xattrs: Xattrs<'_>) -> bool {
        apply.owner.is_some() || apply.chmod || !xattrs.is_empty()
    }

    /// Restores on `target` what `apply` says and the extended attributes `xattrs`, in the
    /// order that keeps each: the owner (a `chown` clears setuid and setgid, and file
    /// capabilities), then the mode's setuid and setgid bits (files: [`Target::Fd`]), the
    /// attributes, and last the time. `path` names the entry in errors.
    pub(crate) fn restore(
        &self,
        target: Target<'_>,
        apply: &Apply,
        xattrs: Xattrs<'_>,
        skipped: &mut NotRestored,
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        if let Some(owner) = apply.owner {
            let (uid, gid) = ids(owner);
            match target {
                Target::Fd(fd) => fchown(fd, uid, gid),
                Target::Handle(fd) => chownat(fd, "", uid, gid, AtFlags::EMPTY_PATH),
                Target::At(dir, name) => chownat(dir, name, uid, gid, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(|e| Error::io("chown", path(), e))?;
        }
        if let (true, Target::Fd(fd)) = (apply.chmod, target) {
            let mut mode = apply.mode;
            if apply.owner.is_none() && mode & 0o2000 != 0 {
                // Kept as the process's group: the file may have its directory's instead.
                let stat = fstat(fd).map_err(|e| Error::io("fstat", path(), e))?;
                if stat.st_gid != getegid().as_raw() {
                    mode &= !0o2000;
                    skipped.setid += 1;
                }
            }
            fchmod(fd, Mode::from_raw_mode(mode & !self.umask))
                .map_err(|e| Error::io("fchmod", path(), e))?;
        }
        for (name, value) in xattrs.iter() {
            if !self.sets_xattr(name) {
                skipped.xattrs += u64::from(self.asks_xattr(name));
                continue;
            }
            let set = match target {
                Target::Fd(fd) => fsetxattr(fd, name, value, XattrFlags::empty()),
                Target::Handle(fd) => setxattrat(fd, b"", AtFlags::EMPTY_PATH, name, value),
                Target::At(dir, at) => setxattrat(dir, at, AtFlags::SYMLINK_NOFOLLOW, name, value),
            };
            match set {
                Ok(()) => {}
                // Not allowed here (user.* on a symlink or special file), not supported by
                // the filesystem or the kernel, an unknown namespace, a value the
                // filesystem rejects (a malformed ACL) or cannot hold (ext4 keeps them in
                // one block: ENOSPC with room left on the disk).
                Err(
                    Errno::PERM
                    | Errno::ACCESS
                    | Errno::NOTSUP
                    | Errno::NOSYS
                    | Errno::INVAL
                    | Errno::RANGE
                    | Errno::TOOBIG,
                ) => skipped.xattrs += 1,
                Err(Errno::NOSPC) if !disk_full(target) => skipped.xattrs += 1,
                Err(e) => return Err(Error::io("setxattr", path(), e)),
            }
        }
        if let Some(mtime) = apply.mtime {
            set_time(target, mtime).map_err(|e| Error::io("utimensat", path(), e))?;
        }
        Ok(())
    }

    /// Gives a filled directory its final `mode` (through `target` when it is a
    /// [`Target::Fd`]) and `mtime`. One that was there (`merged`, with `--overwrite`) gets
    /// only what differs, and what it refuses to a process that is not its owner (EPERM)
    /// is counted in `skipped`, not an error: tar warns and goes on.
    pub(crate) fn finish_dir(
        &self,
        target: Target<'_>,
        (mode, mtime): (Option<u32>, Option<Timestamp>),
        merged: bool,
        skipped: &mut NotRestored,
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        let (mut mode, mut mtime) = (mode, mtime);
        if merged {
            let there = match target {
                Target::Fd(fd) | Target::Handle(fd) => fstat(fd),
                Target::At(dir, name) => statat(dir, name, AtFlags::SYMLINK_NOFOLLOW),
            }
            .map_err(|e| Error::io("fstat", path(), e))?;
            mode = mode.filter(|&mode| there.st_mode & 0o7777 != mode);
            let time = |t: &Timestamp| (t.sec, u64::from(t.nsec));
            mtime = mtime.filter(|t| time(t) != (there.st_mtime, there.st_mtime_nsec));
        }
        let chmod = match (mode, target) {
            (Some(mode), Target::Fd(fd)) => {
                fchmod(fd, Mode::from_raw_mode(mode)).map_err(|e| ("fchmod", e))
            }
            _ => Ok(()),
        };
        let done = chmod.and_then(|()| match mtime {
            Some(mtime) => set_time(target, mtime).map_err(|e| ("utimensat", e)),
            None => Ok(()),
        });
        match done {
            Ok(()) => Ok(()),
            Err((_, Errno::PERM)) if merged => {
                skipped.merged_dirs += 1;
                Ok(())
            }
            Err((op, e)) => Err(Error::io(op, path(), e)),
        }
    }
}

/// Whether the filesystem of `target` has no block left for its user (then ENOSPC means a
/// full disk, not an attribute too large for the room the filesystem gives attributes).
fn disk_full(target: Target<'_>) -> bool {
    let (Target::Fd(fd) | Target::Handle(fd) | Target::At(fd, _)) = target;
    fstatvfs(fd).is_ok_and(|fs| fs.f_bavail == 0)
}

/// Sets the modification time of `target` (not its access time).
fn set_time(target: Target<'_>, mtime: Timestamp) -> rustix::io::Result<()> {
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: mtime.sec,
            tv_nsec: mtime.nsec.into(),
        },
    };
    match target {
        Target::Fd(fd) => futimens(fd, &times),
        Target::Handle(fd) => utimensat(fd, "", &times, AtFlags::EMPTY_PATH),
        Target::At(dir, name) => utimensat(dir, name, &times, AtFlags::SYMLINK_NOFOLLOW),
    }
}

/// The ids of `owner` for `chown`; 0xffffffff, which no user has (it means "unchanged"
/// to `chown`), leaves that id as it is.
fn ids(owner: Owner) -> (Option<Uid>, Option<Gid>) {
    (
        (owner.uid != u32::MAX).then(|| Uid::from_raw(owner.uid)),
        (owner.gid != u32::MAX).then(|| Gid::from_raw(owner.gid)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::Meta;

    fn entry(kind: Kind, mode: u32, owner: Option<Owner>) -> Entry<'static> {
        let mut meta = Meta::with_mode(mode);
        meta.owner = owner;
        meta.mtime = Some(Timestamp { sec: -5, nsec: 7 });
        Entry::new(b"x", kind, meta)
    }

    const OWNER: Option<Owner> = Some(Owner { uid: 7, gid: 8 });
    const ROOT: Owner = Owner { uid: 0, gid: 0 };
    const USER: Owner = Owner { uid: 7, gid: 9 };

    #[test]
    fn root_restores_setid_with_the_owner_others_count_them() {
        let (root, user) = (
            Policy::new(Restore::default(), ROOT, 0o022),
            Policy::new(Restore::default(), USER, 0o022),
        );
        let file = entry(Kind::File, 0o6755, OWNER);
        let mut skipped = NotRestored::default();
        let apply = root.entry(&file, &mut skipped);
        assert_eq!(
            (apply.mode, apply.owner, apply.chmod),
            (0o6755, OWNER, true)
        );
        assert_eq!(apply.create_mode(), 0o755, "given once chowned");
        assert!(!skipped.any());
        let apply = user.entry(&file, &mut skipped);
        assert_eq!((apply.mode, apply.owner, apply.chmod), (0o755, None, false));
        assert_eq!((skipped.setid, skipped.owners), (1, 1));
        // Others with --setid: a write by them clears it, so it is set again by fchmod.
        let setid = Policy::new(Restore::default().setid(true), USER, 0o022);
        let apply = setid.entry(&file, &mut skipped);
        assert_eq!((apply.mode, apply.chmod), (0o4755, true), "their uid only");
    }

    #[test]
    fn setid_bits_land_only_where_the_ids_they_grant_are_the_recorded_ones() {
        let landed = |policy: &Policy, owner: Option<Owner>| {
            let mut skipped = NotRestored::default();
            let apply = policy.entry(&entry(Kind::File, 0o6755, owner), &mut skipped);
            assert_eq!(skipped.setid, u64::from(apply.mode & SETID != SETID));
            assert_eq!(skipped.owners, 0, "root, or its own ids");
            (apply.mode, apply.owner, apply.chmod)
        };
        let root = Policy::new(Restore::default(), ROOT, 0o022);
        let users = Some(Owner {
            uid: 1000,
            gid: 1000,
        });
        // No owner recorded (pack without -a): root would make a program root's.
        assert_eq!(landed(&root, None), (0o755, None, false));
        // Not given away (--no-same-owner, or not asked, or --setid asked only for bits):
        // kept only where the file gets the recorded id anyway.
        for restore in [
            Restore::default().same_owner(Some(false)),
            Restore::default().asked_only(true).setid(true),
        ] {
            let policy = Policy::new(restore, ROOT, 0o022);
            assert_eq!(landed(&policy, users), (0o755, None, false));
            assert_eq!(landed(&policy, Some(ROOT)), (0o6755, None, true));
            let group = Some(Owner { uid: 1000, gid: 0 });
            assert_eq!(landed(&policy, group), (0o2755, None, true));
        }
        // An id the archive marks as unknown is not restored, so neither is its bit.
        let unknown_uid = Some(Owner {
            uid: u32::MAX,
            gid: 5,
        });
        assert_eq!(landed(&root, unknown_uid), (0o2755, unknown_uid, true));
        // Non-root with --setid: the same rule, with its own ids.
        let setid = Policy::new(Restore::default().setid(true), USER, 0o022);
        assert_eq!(landed(&setid, Some(USER)), (0o6755, None, true));
        assert_eq!(landed(&setid, None), (0o755, None, false));
    }

    #[test]
    fn asked_only_root_restores_owners_devices_and_setid_only_as_asked() {
        let file = entry(Kind::File, 0o6755, OWNER);
        let mut skipped = NotRestored::default();
        let strict = Policy::new(Restore::default().asked_only(true), ROOT, 0o022);
        let apply = strict.entry(&file, &mut skipped);
        assert_eq!((apply.mode, apply.owner), (0o755, None));
        assert!(!strict.devices(&mut skipped));
        assert_eq!((skipped.setid, skipped.owners, skipped.devices), (1, 0, 1));
        let asked = Restore::default()
            .asked_only(true)
            .same_owner(Some(true))
            .setid(true);
        let asked = Policy::new(asked, ROOT, 0o022);
        let apply = asked.entry(&file, &mut skipped);
        assert_eq!((apply.mode, apply.owner), (0o6755, OWNER));
        assert!(asked.devices(&mut skipped));
    }

    #[test]
    fn asked_off_is_silent_and_special_files_never_get_setid() {
        let policy = Policy::new(
            Restore::default().same_owner(Some(false)).times(false),
            USER,
            0o022,
        );
        let mut skipped = NotRestored::default();
        let apply = policy.entry(&entry(Kind::Dir, 0o755, OWNER), &mut skipped);
        assert_eq!((apply.owner, apply.mtime), (None, None));
        assert!(!skipped.any());
        let root = Policy::new(Restore::default(), ROOT, 0o022);
        let apply = root.entry(&entry(Kind::Fifo, 0o4644, None), &mut skipped);
        assert_eq!(apply.mode, 0o644);
        assert!(!skipped.any(), "meaningless bits are not a loss");
        assert!(root.devices(&mut skipped) && !skipped.any());
        assert!(!Policy::new(Restore::default(), USER, 0o022).devices(&mut skipped));
        assert_eq!(skipped.devices, 1);
    }

    #[test]
    fn directories_are_filled_with_owner_rwx_and_get_the_rest_after() {
        let policy = Policy::new(Restore::default(), ROOT, 0o022);
        let modes = |mode| {
            policy.dir_modes(&Apply {
                mode,
                ..Apply::default()
            })
        };
        assert_eq!(modes(0o755), (0o755, None));
        assert_eq!(modes(0o777), (0o777, None), "the same under the umask");
        assert_eq!(modes(0o555), (0o755, Some(0o555)));
        assert_eq!(modes(0o2775), (0o775, Some(0o2755)));
        assert_eq!(modes(0o1777), (0o1777, None));
    }
}
