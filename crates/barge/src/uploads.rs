//! An upload server's policy (serve's), apart from its HTTP: each upload lands as a new
//! directory under DEST, named by the client (one path component) or by the server, the
//! name reserved while it lands; with a quota, each landing holds a share of what DEST may
//! still take, and gives back what it did not use.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::format::{check_name, space, FormatError};

/// Why an upload's name was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Not one path component: what is wrong with it (`is empty`, `has a /`, ...).
    BadName(&'static str),
    /// DEST has an entry of that name, or an upload of that name is landing.
    Taken,
}

/// Names the uploads under one DEST.
#[derive(Debug)]
pub struct Uploads {
    dest: PathBuf,
    landing: Arc<Mutex<Landing>>,
}

/// The uploads landing now, and the numbers of the server's names.
#[derive(Debug, Default)]
struct Landing {
    /// Their names (their directories do not exist yet).
    names: HashSet<Vec<u8>>,
    /// The numbers of those the server named.
    numbers: HashSet<u64>,
    /// The highest number of a server-named upload that landed: a failed one's number
    /// goes to the next.
    landed: u64,
}

/// An upload's name, reserved until dropped.
#[derive(Debug)]
pub struct Reserved {
    /// The name, one path component.
    pub name: Vec<u8>,
    /// DEST/name, where the upload lands.
    pub target: PathBuf,
    /// The number in a name the server chose.
    number: Option<u64>,
    landing: Arc<Mutex<Landing>>,
}

impl Reserved {
    /// Tells that the upload landed: the number in its name is used up.
    pub fn landed(&self) {
        if let (Some(n), Ok(mut landing)) = (self.number, self.landing.lock()) {
            landing.landed = landing.landed.max(n);
        }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if let Ok(mut landing) = self.landing.lock() {
            landing.names.remove(&self.name);
            if let Some(n) = self.number {
                landing.numbers.remove(&n);
            }
        }
    }
}

impl Uploads {
    /// Uploads landing under `dest` (see [`crate::root::prepare_dest`]).
    pub fn new(dest: PathBuf) -> Uploads {
        Uploads {
            dest,
            landing: Arc::default(),
        }
    }

    /// Reserves `name`, or without one the next free `upload-{stamp}Z-N` (`stamp` the time
    /// as `YYYYMMDDTHHMMSS`): a name that neither exists under DEST nor is landing now, N
    /// the first number after the last upload that landed ([`Reserved::landed`]) that no
    /// landing upload holds.
    pub fn reserve(&self, name: Option<Vec<u8>>, stamp: &str) -> Result<Reserved, Refused> {
        if let Some(name) = &name {
            one_component(name)?;
        }
        let mut landing = self.landing.lock().expect("no panic while held");
        let free = |landing: &Landing, name: &[u8]| {
            !landing.names.contains(name)
                && std::fs::symlink_metadata(self.dest.join(OsStr::from_bytes(name))).is_err()
        };
        let (name, number) = match name {
            Some(name) if free(&landing, &name) => (name, None),
            Some(_) => return Err(Refused::Taken),
            None => (landing.landed + 1..)
                .filter(|n| !landing.numbers.contains(n))
                .map(|n| (format!("upload-{stamp}Z-{n}").into_bytes(), Some(n)))
                .find(|(name, _)| free(&landing, name))
                .expect("a free number"),
        };
        landing.names.insert(name.clone());
        landing.numbers.extend(number);
        Ok(Reserved {
            target: self.dest.join(OsStr::from_bytes(&name)),
            name,
            number,
            landing: self.landing.clone(),
        })
    }
}

/// Checks that a client's `name` is one path component (by the rule of an archive's
/// names), saying what is wrong with it otherwise.
pub fn one_component(name: &[u8]) -> Result<(), Refused> {
    check_name(name).map_err(|error| {
        Refused::BadName(match error {
            FormatError::EmptyName => "is empty",
            FormatError::DotName => "is . or ..",
            FormatError::NameTooLong => "is longer than 255 bytes",
            FormatError::SlashInName => "has a /",
            _ => "has a NUL byte",
        })
    })
}

/// The most disk space one byte of an archive can be charged: every entry takes at least 4
/// bytes of it (a DIR with a one-byte name, and its POP) and is charged at most one 4 KiB
/// block more than the content and xattr bytes it carries.
const SPACE_PER_BYTE: u64 = 1024;

/// The space an upload's own directory is charged.
const UPLOAD_DIR: u64 = space(0, 0);

/// What is left of a quota on DEST's space (as [`crate::format::space`] charges entries);
/// each landing upload holds a [`Reservation`] of it.
#[derive(Debug)]
pub struct Quota {
    /// The quota, in bytes.
    pub max: u64,
    left: Mutex<u64>,
}

impl Quota {
    /// A quota of `max` bytes, `used` of which DEST holds already.
    pub fn new(max: u64, used: u64) -> Arc<Quota> {
        Arc::new(Quota {
            max,
            left: Mutex::new(max.saturating_sub(used)),
        })
    }

    /// Bytes left, not held by a landing upload.
    pub fn left(&self) -> u64 {
        *self.left.lock().expect("no panic while held")
    }

    /// The share of an upload whose body has at most `body` bytes (unknown: all that is
    /// left): no more than such a body can be charged, and its own directory; `None` when
    /// not even its directory fits.
    pub fn share(self: &Arc<Quota>, body: Option<u64>) -> Option<Reservation> {
        let want = body.map_or(u64::MAX, |n| n.saturating_mul(SPACE_PER_BYTE));
        let share = self.reserve(want.saturating_add(UPLOAD_DIR))?;
        (share.bytes >= UPLOAD_DIR).then_some(share)
    }

    /// Holds up to `want` bytes (what is left, when less); `None` when nothing is left.
    fn reserve(self: &Arc<Quota>, want: u64) -> Option<Reservation> {
        let mut left = self.left.lock().expect("no panic while held");
        if *left == 0 {
            return None;
        }
        let bytes = want.min(*left);
        *left -= bytes;
        Some(Reservation {
            quota: self.clone(),
            bytes,
            kept: 0,
        })
    }
}

/// Bytes of the quota held by one upload; what it did not keep goes back when dropped.
#[derive(Debug)]
pub struct Reservation {
    quota: Arc<Quota>,
    /// The most the upload may land, its own directory included.
    pub bytes: u64,
    kept: u64,
}

impl Reservation {
    /// The `max_space` limit of the upload's landing: the share, less its own directory.
    pub fn max_space(&self) -> u64 {
        self.bytes.saturating_sub(UPLOAD_DIR)
    }

    /// Keeps `landed` bytes of the reservation for good: the upload landed them.
    pub fn keep(&mut self, landed: u64) {
        self.kept = landed.min(self.bytes);
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        *self.quota.left.lock().expect("no panic while held") += self.bytes - self.kept;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_share_the_quota_and_return_what_they_did_not_keep() {
        let quota = Quota::new(100, 30);
        let mut first = quota.reserve(50).unwrap();
        let second = quota.reserve(50).unwrap();
        assert_eq!((first.bytes, second.bytes, quota.left()), (50, 20, 0));
        assert!(quota.reserve(1).is_none(), "nothing left");
        drop(second);
        assert_eq!(quota.left(), 20);
        first.keep(45);
        drop(first);
        assert_eq!(quota.left(), 25);
        assert!(
            Quota::new(10, 20).reserve(1).is_none(),
            "DEST holds more already"
        );
    }

    #[test]
    fn a_share_covers_the_body_at_its_worst_and_the_uploads_directory() {
        let quota = Quota::new(1 << 30, 0);
        let share = quota.share(Some(10)).unwrap();
        assert_eq!(share.bytes, 10 * SPACE_PER_BYTE + UPLOAD_DIR);
        assert_eq!(share.max_space(), 10 * SPACE_PER_BYTE);
        let rest = quota.share(None).unwrap();
        assert_eq!(quota.left(), 0, "no length: all that is left");
        drop(rest);
        let small = Quota::new(UPLOAD_DIR - 1, 0);
        assert!(
            small.share(Some(1)).is_none(),
            "not even its directory fits"
        );
        assert_eq!(small.left(), UPLOAD_DIR - 1, "given back");
    }

    #[test]
    fn names_are_one_component_and_taken_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("there")).unwrap();
        let uploads = Uploads::new(dir.path().into());
        let reserve = |name: &[u8]| uploads.reserve(Some(name.to_vec()), "T");
        for (bad, why) in [
            (&b""[..], "is empty"),
            (b"..", "is . or .."),
            (b"a/b", "has a /"),
            (b"a\0", "has a NUL byte"),
            (&[b'n'; 256], "is longer than 255 bytes"),
        ] {
            assert_eq!(reserve(bad).unwrap_err(), Refused::BadName(why));
        }
        assert_eq!(reserve(b"there").unwrap_err(), Refused::Taken, "exists");
        let held = reserve(b"new").unwrap();
        assert_eq!(held.target, dir.path().join("new"));
        assert!(!held.target.exists(), "nothing is created");
        assert_eq!(reserve(b"new").unwrap_err(), Refused::Taken, "landing");
        drop(held);
        assert!(reserve(b"new").is_ok(), "given back");
    }

    #[test]
    fn the_server_chooses_the_next_free_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("upload-20261124T101500Z-2")).unwrap();
        let uploads = Uploads::new(dir.path().into());
        let name = |r: &Reserved| String::from_utf8(r.name.clone()).unwrap();
        let first = uploads.reserve(None, "20261124T101500").unwrap();
        let second = uploads.reserve(None, "20261124T101500").unwrap();
        assert_eq!(name(&first), "upload-20261124T101500Z-1");
        assert_eq!(name(&second), "upload-20261124T101500Z-3", "2 exists");
        // Numbers count the uploads that landed: a failed one's goes to the next.
        drop(second);
        let third = uploads.reserve(None, "20261124T101501").unwrap();
        assert_eq!(name(&third), "upload-20261124T101501Z-2", "1 is landing");
        first.landed();
        drop((first, third));
        let fourth = uploads.reserve(None, "20261124T101502").unwrap();
        assert_eq!(
            name(&fourth),
            "upload-20261124T101502Z-2",
            "1 landed, 2 failed"
        );
    }
}
