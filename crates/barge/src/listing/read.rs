//! Reading a listing with limits: every record checked before it is believed.

use crate::error::{Error, Result, TreePath};
use crate::format::{check_name, MAX_SYMLINK};
use crate::tree::{Kind, Meta, Owner, Timestamp};

use super::*;

/// A listing being read: its bytes, how far into them, and its bounds.
pub(super) struct Reader<'b> {
    pub(super) bytes: &'b [u8],
    pub(super) offset: u64,
    pub(super) limits: ListingLimits,
}

impl<'b> Reader<'b> {
    /// Reads up to and including the end record.
    pub(super) fn read(&mut self) -> Result<Listing> {
        let header = self.take(HEADER.len())?;
        if header[..6] != HEADER[..6] {
            return Err(bad(0, "not an update listing (bad magic)".into()));
        }
        if header[6] != HEADER[6] {
            let problem = format!(
                "listing version {}, where this barge reads version {} (the two barges' \
                 versions differ)",
                header[6], HEADER[6]
            );
            return Err(bad(0, problem));
        }
        if header[7] & !OWNERS_KEPT != 0 {
            return Err(bad(0, format!("unknown listing flags 0x{:02x}", header[7])));
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
        let number = self.u8()?;
        let Some(&(_, kind)) = KINDS.iter().find(|(n, _)| *n == number) else {
            return Err(bad(at, format!("unknown entry kind {number}")));
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
        let xattrs = self.u64()?;
        let problem = if let Some(problem) = bad_time_or_mode(nsec, mode) {
            Some(problem)
        } else if kind == Kind::Symlink && !(1..=MAX_SYMLINK as u64).contains(&size) {
            Some(format!(
                "a symlink target of {size} bytes (1 to {MAX_SYMLINK})"
            ))
        } else if kind == Kind::Symlink && (mode, links, group, xattrs) != (0, 0, 0, 0) {
            Some("a symlink with a mode, links, a link group or extended attributes".into())
        } else if kind == Kind::File && (links == 0 || (links == 1) != (group == 0)) {
            Some(format!("{links} links in link group {group}"))
        } else if !matches!(kind, Kind::File | Kind::Symlink) && (links, group, xattrs) != (0, 0, 0)
        {
            Some(format!(
                "{} with links, a link group or extended attributes",
                kind.with_article()
            ))
        } else if matches!(kind, Kind::Fifo | Kind::Socket) && size != 0 {
            Some(format!(
                "{} with a size or device number",
                kind.with_article()
            ))
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
            xattrs,
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
pub(super) fn bad(offset: u64, problem: String) -> Error {
    Error::Listing { offset, problem }
}
