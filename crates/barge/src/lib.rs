//! barge: move whole file trees with the fewest syscalls and containment by construction.
//!
//! Every command is a source of tree events joined to a sink: the directory [`walk`]er and
//! the archive [`format`] decoder are sources; the [`land`]ers, the archive encoder
//! ([`pack`]) are sinks. The decoder is pure (bytes in, events out) and every lander
//! syscall is relative to a directory fd it opened itself.

#![warn(missing_docs)]

pub mod confine;
pub mod du;
pub mod error;
pub mod format;
pub mod interrupt;
pub mod land;
pub mod output;
pub mod pack;
pub mod root;
pub mod source;
pub mod sys;
pub mod tree;
pub mod unpack;
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
    pub fn add_entry(&self, bytes: u64) {
        self.entries.fetch_add(1, Relaxed);
        self.add_bytes(bytes);
    }

    /// Counts content bytes.
    pub fn add_bytes(&self, bytes: u64) {
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
    pub fn add_written(&self, bytes: u64) {
        self.written.fetch_add(bytes, Relaxed);
    }

    /// Output bytes written so far.
    pub fn written(&self) -> u64 {
        self.written.load(Relaxed)
    }
}
