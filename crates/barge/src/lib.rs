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
pub mod share;
pub(crate) mod shared_unpack;
pub(crate) mod source;
pub mod sys;
pub mod threads;
pub mod tree;
pub mod unpack;
pub mod uploads;
pub mod verify;
pub mod walk;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

pub use error::{Error, Result, TreePath};

/// Counters a long operation updates as it goes, for a progress display on another thread,
/// and, when it has one, the [`Listener`] told each entry done (`-v`).
#[derive(Debug, Default)]
pub struct Progress {
    entries: AtomicU64,
    bytes: AtomicU64,
    written: AtomicU64,
    listener: Option<Listener>,
}

/// One entry an operation has done (packed, landed), as told to a [`Listener`].
#[derive(Clone, Copy, Debug)]
pub struct Done<'a> {
    /// The path of its directory below the root, names joined by `/` (empty at the top).
    pub dir: &'a [u8],
    /// Its name in that directory.
    pub name: &'a [u8],
    /// What it is.
    pub kind: tree::Kind,
}

/// What [`Progress::listing`] calls for each entry done, from any thread of the operation.
#[derive(Clone)]
pub struct Listener(Arc<dyn Fn(Done<'_>) + Send + Sync>);

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Listener")
    }
}

impl Progress {
    /// Counters that also tell `listener` each entry done. Without one (the default)
    /// nothing is built per entry.
    pub fn listing(listener: impl Fn(Done<'_>) + Send + Sync + 'static) -> Progress {
        Progress {
            listener: Some(Listener(Arc::new(listener))),
            ..Progress::default()
        }
    }

    /// The listener, for a part of the operation that tells entries itself.
    pub(crate) fn listener(&self) -> Option<Listener> {
        self.listener.clone()
    }

    /// Tells the listener, if any, that the entry `name` of `kind` in `dir` is done.
    pub(crate) fn done(&self, dir: &[u8], name: &[u8], kind: tree::Kind) {
        if let Some(listener) = &self.listener {
            listener.tell(dir, name, kind);
        }
    }

    /// Counts one entry with `bytes` bytes of content.
    pub(crate) fn add_entry(&self, bytes: u64) {
        self.entries.fetch_add(1, Relaxed);
        self.add_bytes(bytes);
    }

    /// Sets the counts to `entries` and `bytes` (what the processes sharing an operation
    /// did together, shown by one of them).
    pub fn set(&self, entries: u64, bytes: u64) {
        self.entries.store(entries, Relaxed);
        self.bytes.store(bytes, Relaxed);
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

impl Listener {
    /// Tells the entry `name` of `kind` in `dir`.
    pub(crate) fn tell(&self, dir: &[u8], name: &[u8], kind: tree::Kind) {
        (self.0)(Done { dir, name, kind });
    }
}
