//! The `Verify` operation: an archive decoded whole and checked (for version 2 every digest,
//! and the index and footer against the segments) with nothing written; and, given a
//! directory, that directory compared with the archive as `tar -d` compares: for each entry
//! its kind, size, modification time, mode and, as asked, owner (`compare.rs`'s one rule),
//! a file's content byte for byte, a symlink's target, a hard link's file and a device's
//! numbers, each path that differs reported once with all that differs. Entries only the
//! directory has, extended attributes and the root's own metadata are not compared. Below
//! the directory every look is relative to a directory fd and follows no symlink.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::{openat, readlinkat, statx, AtFlags, Mode, OFlags, Statx, CWD};
use rustix::io::{pread, Errno};

use crate::compare::{inode_key, Fact, Facts, InodeKey, Rule, Verified};
use crate::error::{Error, Result, TreePath};
use crate::interrupt::{retry, Cancel};
use crate::sys::{DIR_FLAGS, FILE_FLAGS};
use crate::tree::{Content, Device, DirPath, Entry, Kind, Meta, Sink, STATX_MASK};
use crate::unpack::{Archive, Unpack};

/// How one path of the directory differs from the archive.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The entry's path in the archive (and below the directory).
    pub path: TreePath,
    /// What differs, one phrase each ("content differs at byte 5", "mode 644 here, 600
    /// in the archive").
    pub what: Vec<String>,
}

/// A verification: the archive alone, or against a directory.
pub struct Verify<'a> {
    tree: Option<&'a Path>,
    rule: Rule,
    cancel: Cancel,
}

impl<'a> Verify<'a> {
    /// Checks the archive alone.
    pub fn new() -> Verify<'a> {
        Verify {
            tree: None,
            rule: Rule::default(),
            cancel: Cancel::new(),
        }
    }

    /// Compares the directory `tree` with the archive too.
    pub fn against(mut self, tree: &'a Path) -> Verify<'a> {
        self.tree = Some(tree);
        self
    }

    /// Compares owners too (`-a`).
    pub fn owners(mut self, owners: bool) -> Verify<'a> {
        self.rule.owners = owners;
        self
    }

    /// Stops file comparisons once `cancel` is cancelled (the unpack's token stops the
    /// decoding).
    pub fn cancel(mut self, cancel: Cancel) -> Verify<'a> {
        self.cancel = cancel;
        self
    }

    /// Decodes `archive` as `unpack` lists it (its limits and selection), comparing as set
    /// up; each difference goes to `report` as it is found. Fails at the archive's first
    /// error (a corrupt byte: `bad-digest`, naming the entry), after reporting the
    /// differences found before it.
    pub fn run(
        &self,
        unpack: &Unpack,
        archive: &Archive,
        report: &mut dyn FnMut(Difference),
    ) -> Result<Verified> {
        // The directory named is followed, as a command line's; nothing below it is.
        let named = DIR_FLAGS.difference(OFlags::NOFOLLOW);
        let root = match self.tree {
            Some(tree) => Some(openat(CWD, tree, named, Mode::empty()).map_err(|e| {
                Error::io(
                    "open",
                    TreePath(tree.as_os_str().as_encoded_bytes().into()),
                    e,
                )
            })?),
            None => None,
        };
        let mut checker = Checker {
            dirs: vec![root],
            path: DirPath::default(),
            rule: self.rule,
            cancel: &self.cancel,
            links: HashMap::new(),
            file: None,
            report,
            verified: Verified::default(),
            buf: Vec::new(),
        };
        unpack.list(archive, &mut checker)?;
        Ok(checker.verified)
    }
}

impl Default for Verify<'_> {
    fn default() -> Self {
        Verify::new()
    }
}

/// The file whose content is coming, as compared.
struct Pending {
    difference: Difference,
    /// The directory's file (none: not compared).
    fd: Option<OwnedFd>,
    at: u64,
    size: u64,
    /// Where the content first differs.
    differs: Option<u64>,
}

/// The sink that checks (and counts) what the archive holds against the directory.
struct Checker<'a> {
    /// The directory's fd for the archive's root and each directory entered (none where
    /// it is not there, already reported).
    dirs: Vec<Option<OwnedFd>>,
    path: DirPath,
    rule: Rule,
    cancel: &'a Cancel,
    /// Each linked file by link id: its path, and its inode in the directory.
    links: HashMap<u64, (TreePath, Option<InodeKey>)>,
    file: Option<Pending>,
    report: &'a mut dyn FnMut(Difference),
    verified: Verified,
    buf: Vec<u8>,
}

impl Checker<'_> {
    /// The directory's fd for the current directory, when it is compared and there.
    fn parent(&self) -> Option<BorrowedFd<'_>> {
        self.dirs.last()?.as_ref().map(|fd| fd.as_fd())
    }

    /// Reports `difference` when something differs.
    fn report(&mut self, difference: Difference) {
        if !difference.what.is_empty() {
            self.verified.differences += 1;
            (self.report)(difference);
        }
    }

    /// The directory's `entry` of the kind `kind`, stated without following: its `statx`
    /// and the differences so far (missing, another kind, what the rule finds), or `None`
    /// when not compared. `size` is the archive's (a file's bytes, a target's length).
    fn look(
        &self,
        entry: &Entry<'_>,
        kind: Kind,
        size: u64,
    ) -> Option<(Option<Statx>, Difference)> {
        let parent = self.parent()?;
        let path = self.path.join(entry.name);
        let mut what = Vec::new();
        let stat = match statx(parent, entry.name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => {
                what.push("not in the directory".into());
                None
            }
            Err(e) => {
                what.push(format!("statx: {e}"));
                None
            }
        };
        if let Some(stat) = &stat {
            let mut here = Facts::of_statx(stat);
            // A device's number is compared apart.
            if !matches!(here.kind, Kind::File | Kind::Symlink) {
                here.size = 0;
            }
            let there = Facts::new(kind, size, entry.meta);
            what.extend(
                self.rule
                    .differences(&there, &here)
                    .map(|fact| describe(fact, &there, &here)),
            );
        }
        Some((stat, Difference { path, what }))
    }

    /// Compares the next bytes of the pending file's content.
    fn compare(&mut self, data: &[u8]) -> Result<()> {
        let Some(file) = &mut self.file else {
            return Ok(());
        };
        if let (Some(fd), None) = (&file.fd, file.differs) {
            self.buf.resize(data.len(), 0);
            let mut got = 0;
            while got < data.len() {
                let at = file.at + got as u64;
                let n = retry(self.cancel, || pread(fd, &mut self.buf[got..], at))
                    .map_err(|e| Error::io("read", file.difference.path.clone(), e))?;
                if n == 0 {
                    break;
                }
                got += n;
            }
            let same = data.iter().zip(&self.buf[..got]).position(|(a, b)| a != b);
            file.differs = match same {
                Some(i) => Some(file.at + i as u64),
                None if got < data.len() => Some(file.at + got as u64),
                None => None,
            };
        }
        file.at += data.len() as u64;
        if file.at == file.size {
            let mut file = self.file.take().expect("a pending file");
            if let Some(at) = file.differs {
                file.difference
                    .what
                    .push(format!("content differs at byte {at}"));
            }
            self.report(file.difference);
        }
        Ok(())
    }
}

/// How `fact` differs between the archive's `there` and the directory's `here`.
fn describe(fact: Fact, there: &Facts, here: &Facts) -> String {
    let (a, b) = (&there.meta, &here.meta);
    match fact {
        Fact::Kind => format!(
            "is {} here, {} in the archive",
            here.kind.with_article(),
            there.kind.with_article()
        ),
        Fact::Size => format!("size {} here, {} in the archive", here.size, there.size),
        Fact::Time => match (a.mtime, b.mtime) {
            (Some(t), Some(h)) => format!(
                "mtime {}.{:09} here, {}.{:09} in the archive",
                h.sec, h.nsec, t.sec, t.nsec
            ),
            _ => "mtime not in the archive".into(),
        },
        Fact::Mode => format!("mode {:o} here, {:o} in the archive", b.mode, a.mode),
        Fact::Owner => match (a.owner, b.owner) {
            (Some(t), Some(h)) => format!(
                "owner {}:{} here, {}:{} in the archive",
                h.uid, h.gid, t.uid, t.gid
            ),
            _ => "owner not in the archive".into(),
        },
        // Not compared against an archive (its rule keeps neither).
        Fact::Xattrs => "extended attributes differ".into(),
        Fact::Links => "has other names here".into(),
    }
}

impl Sink for Checker<'_> {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        let mut fd = None;
        if let Some(parent) = self.parent() {
            let path = self.path.join(entry.name);
            let mut what = Vec::new();
            match openat(parent, entry.name, DIR_FLAGS, Mode::empty()) {
                Ok(dir) => {
                    let stat = statx(&dir, "", AtFlags::EMPTY_PATH, STATX_MASK);
                    let stat = stat.map_err(|e| Error::io("statx", path.clone(), e))?;
                    let here = Facts::of_statx(&stat);
                    let there = Facts::new(Kind::Dir, 0, entry.meta);
                    let facts = self.rule.differences(&there, &here);
                    what.extend(facts.map(|fact| describe(fact, &there, &here)));
                    fd = Some(dir);
                }
                Err(Errno::NOENT) => what.push("not in the directory".into()),
                Err(Errno::NOTDIR | Errno::LOOP) => {
                    let stat = statx(parent, entry.name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK);
                    let here = stat.map_or(Kind::Unknown, |s| Kind::of_mode(s.stx_mode.into()));
                    let article = here.with_article();
                    what.push(format!("is {article} here, a directory in the archive"));
                }
                Err(e) => what.push(format!("open: {e}")),
            }
            self.report(Difference { path, what });
        }
        self.dirs.push(fd);
        self.path.enter(entry.name);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.dirs.pop();
        self.path.leave();
        Ok(())
    }

    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
        let (size, first) = match content {
            Content::Bytes(bytes) => (bytes.len() as u64, bytes),
            Content::Stream { size, first } => (size, first),
            // An archive hands content in memory.
            _ => unreachable!("content from an archive is in memory"),
        };
        self.verified.files += 1;
        self.verified.bytes += size;
        let Some((stat, difference)) = self.look(entry, Kind::File, size) else {
            return Ok(());
        };
        let regular = stat.is_some_and(|s| Kind::of_mode(s.stx_mode.into()) == Kind::File);
        if let Some(id) = entry.link_id {
            let inode = stat.filter(|_| regular).map(|s| inode_key(&s));
            self.links.insert(id, (difference.path.clone(), inode));
        }
        let mut difference = difference;
        let fd = match regular {
            true => {
                let parent = self.parent().expect("looked");
                match openat(parent, entry.name, FILE_FLAGS, Mode::empty()) {
                    Ok(fd) => Some(fd),
                    Err(e) => {
                        difference.what.push(format!("open: {e}"));
                        None
                    }
                }
            }
            false => None,
        };
        self.file = Some(Pending {
            difference,
            fd,
            at: 0,
            size,
            differs: None,
        });
        self.cancel.check()?;
        if size == 0 {
            let file = self.file.take().expect("just set");
            self.report(file.difference);
            return Ok(());
        }
        self.compare(first)
    }

    fn data(&mut self, data: &[u8]) -> Result<()> {
        self.compare(data)
    }

    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<()> {
        let Some((stat, mut difference)) = self.look(entry, Kind::Symlink, target.len() as u64)
        else {
            return Ok(());
        };
        if stat.is_some_and(|s| Kind::of_mode(s.stx_mode.into()) == Kind::Symlink) {
            let parent = self.parent().expect("looked");
            match readlinkat(parent, entry.name, Vec::new()) {
                Ok(here) if here.as_bytes() == target => {}
                Ok(here) => difference.what.push(format!(
                    "target {} here, {} in the archive",
                    crate::error::escape_bytes(here.as_bytes()),
                    crate::error::escape_bytes(target)
                )),
                Err(e) => difference.what.push(format!("readlink: {e}")),
            }
        }
        self.report(difference);
        Ok(())
    }

    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<()> {
        let Some(parent) = self.parent() else {
            return Ok(());
        };
        let path = self.path.join(entry.name);
        let here = statx(parent, entry.name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK);
        let (file, inode) = self.links.get(&target).cloned().unwrap_or_default();
        let what = match here {
            Err(Errno::NOENT) => Some("not in the directory".to_string()),
            Err(e) => Some(format!("statx: {e}")),
            Ok(here) if inode.is_some() && Some(inode_key(&here)) == inode => None,
            Ok(_) => Some(format!("not linked to {file}")),
        };
        self.report(Difference {
            path,
            what: what.into_iter().collect(),
        });
        Ok(())
    }

    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        let Some((stat, mut difference)) = self.look(entry, entry.kind, 0) else {
            return Ok(());
        };
        if let Some(stat) = stat.filter(|_| entry.kind != Kind::Fifo) {
            let here = (stat.stx_rdev_major, stat.stx_rdev_minor);
            if Kind::of_mode(stat.stx_mode.into()) == entry.kind
                && here != (device.major, device.minor)
            {
                difference.what.push(format!(
                    "device {},{} here, {},{} in the archive",
                    here.0, here.1, device.major, device.minor
                ));
            }
        }
        self.report(difference);
        Ok(())
    }

    fn root(&mut self, _meta: &Meta, _xattrs: crate::tree::Xattrs<'_>) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_fact_is_described_with_both_sides() {
        let facts = |kind, size, mode, sec| {
            let meta = Meta {
                mode,
                mtime: Some(crate::tree::Timestamp { sec, nsec: 5 }),
                owner: Some(crate::tree::Owner { uid: 1, gid: 2 }),
            };
            Facts::new(kind, size, meta)
        };
        let there = facts(Kind::File, 3, 0o600, 7);
        let here = facts(Kind::Dir, 4, 0o644, 8);
        let said: Vec<String> = Rule {
            owners: true,
            ..Rule::default()
        }
        .differences(&there, &here)
        .map(|fact| describe(fact, &there, &here))
        .collect();
        assert_eq!(
            said,
            [
                "is a directory here, a regular file in the archive",
                "size 4 here, 3 in the archive",
                "mtime 8.000000005 here, 7.000000005 in the archive",
                "mode 644 here, 600 in the archive",
            ]
        );
        let mut unowned = there;
        unowned.meta.owner = None;
        unowned.meta.mtime = None;
        let said: Vec<String> = Rule {
            owners: true,
            ..Rule::default()
        }
        .differences(&unowned, &there)
        .map(|fact| describe(fact, &unowned, &there))
        .collect();
        assert_eq!(
            said,
            ["mtime not in the archive", "owner not in the archive"]
        );
    }
}
