//! `serve --quota`: the disk space DEST may take, shared by the uploads landing. Every
//! entry is charged [`barge::format::space`]: at least a 4 KiB block, more for its content
//! and xattrs, so that empty directories and symlinks are not free.

use std::path::Path;
use std::sync::{Arc, Mutex};

use barge::exclude::Exclude;
use barge::threads::Work;

/// What `path` and everything below it take, as the quota counts it (each entry charged as
/// landing charges it, or its allocated size when more; see `barge::du::Totals::space`).
pub(super) fn space_below(path: &Path) -> u64 {
    let threads = Work::Cores.threads();
    crate::du::totals_below(&[path.to_path_buf()], Exclude::default(), threads).space
}

/// What is left of the quota; each landing upload holds a [`Reservation`] of it.
#[derive(Debug)]
pub(super) struct Quota {
    /// The quota, in bytes.
    pub(super) max: u64,
    left: Mutex<u64>,
}

impl Quota {
    /// A quota of `max` bytes, `used` of which DEST holds already.
    pub(super) fn new(max: u64, used: u64) -> Arc<Quota> {
        Arc::new(Quota {
            max,
            left: Mutex::new(max.saturating_sub(used)),
        })
    }

    /// Bytes left, not held by a landing upload.
    pub(super) fn left(&self) -> u64 {
        *self.left.lock().expect("no panic while held")
    }

    /// Holds up to `want` bytes (what is left, when less) for an upload; `None` when
    /// nothing is left.
    pub(super) fn reserve(self: &Arc<Quota>, want: u64) -> Option<Reservation> {
        let mut left = self.left.lock().expect("no panic while held");
        let bytes = want.min(*left);
        if *left == 0 {
            return None;
        }
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
pub(super) struct Reservation {
    quota: Arc<Quota>,
    /// The most the upload may land.
    pub(super) bytes: u64,
    kept: u64,
}

impl Reservation {
    /// Keeps `landed` bytes of the reservation for good: the upload landed them.
    pub(super) fn keep(&mut self, landed: u64) {
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
}
