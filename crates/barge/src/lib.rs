//! barge: move whole file trees with the fewest syscalls and containment by construction.
//!
//! Every command is a source of tree entries driving a sink, in one model ([`tree`]: an
//! `Entry`, its `Meta` and `Content`, the push-model `Sink`). Sources: the ordered
//! [`walk`]er, the parallel walker ([`walk::parallel`]) and the archive decoder
//! ([`format`](mod@format)) over a byte source. Sinks: the landers, the encoder ([`pack`]),
//! du's counter ([`du`]) and `list`'s printer. The operations [`pack::Pack`],
//! [`unpack::Unpack`] and [`du::Du`] compose them; [`confine`] runs a landing in a confined
//! child process. The decoder is pure (bytes in, events out), and every syscall below a
//! root is relative to a directory fd with a single-component name ([`sys`]).

#![warn(missing_docs)]

pub mod compare;
pub mod confine;
pub(crate) mod copy;
pub mod cp;
pub mod du;
pub mod error;
pub mod exclude;
/// Which entries of an archive are taken (member PATHs, `--exclude`).
pub use land::select::Select;
pub mod format;
pub(crate) mod indexed;
pub mod interrupt;
pub(crate) mod land;
pub mod listing;
pub mod net;
pub mod output;
pub mod owners;
pub mod pack;
pub mod root;
pub(crate) mod source;
pub mod sys;
pub mod threads;
pub mod tree;
pub mod unpack;
pub mod uploads;
pub mod verify;
pub mod walk;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

pub use error::{Error, Result, TreePath};

/// Counters a long operation updates as it goes, for a progress display on another thread.
#[derive(Debug, Default)]
pub struct Progress {
    entries: AtomicU64,
    bytes: AtomicU64,
    written: AtomicU64,
}

impl Progress {
    /// Counts one entry with `bytes` bytes of content.
    pub(crate) fn add_entry(&self, bytes: u64) {
        self.entries.fetch_add(1, Relaxed);
        self.add_bytes(bytes);
    }

    /// Counts content bytes.
    pub(crate) fn add_bytes(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Entries so far.
    pub fn entries(&self) -> u64 {
        self.entries.load(Relaxed)
    }

    /// Content bytes so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Relaxed)
    }

    /// Counts bytes of output written (what a failed `pack` already sent).
    pub(crate) fn add_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Relaxed);
    }

    /// Output bytes written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Relaxed)
    }
}
