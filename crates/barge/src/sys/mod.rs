//! The system-call layer: what the sources and sinks share below their own logic (like xcp's
//! libfs). Open-flag presets, directory listing with getdents64, memory maps of archive
//! regions, the io_uring ring, the byte queue in shared memory to a confined lander, kernel
//! copies with a read/write fallback, fd hygiene (checked `close_range`, batched closes, the
//! fd limit), worker-thread placement and extended attributes. The one EINTR helper is
//! `retry`, since a retry must first look for a stop request.

pub(crate) mod copy;
pub(crate) mod dir;
pub mod fds;
pub(crate) mod map;
pub mod queue;
pub(crate) mod ring;
pub(crate) mod thread;
pub(crate) mod xattr;

use rustix::fs::OFlags;

/// Opens a directory to read its entries (and to be the dirfd of `*at` calls).
pub(crate) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Opens a regular file for reading; `NONBLOCK` keeps a fifo swapped in after the listing
/// from blocking, `NOCTTY` a terminal from becoming the controlling one.
pub(crate) const FILE_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::NOFOLLOW)
    .union(OFlags::NONBLOCK)
    .union(OFlags::NOCTTY)
    .union(OFlags::CLOEXEC);

/// Opens a directory of a tree being created as a handle for `*at` calls only.
pub(crate) const DIR_HANDLE_FLAGS: OFlags = OFlags::PATH
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// Creates a file: never an existing one, never through a symlink.
pub(crate) const CREATE_FLAGS: OFlags = OFlags::WRONLY
    .union(OFlags::CREATE)
    .union(OFlags::EXCL)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);
