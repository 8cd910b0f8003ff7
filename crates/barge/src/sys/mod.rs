//! The system-call layer, the bottom one: what the sources and sinks share below their own
//! logic (like xcp's libfs), knowing no type of the crate above it. Open-flag presets,
//! directory listing with getdents64, memory maps of archive regions, the io_uring ring,
//! the byte queue in shared memory to a confined lander, fd hygiene (checked `close_range`,
//! batched closes, the fd limit), worker-thread placement, `setxattrat`, signal handlers
//! and masks, and the process calls rustix has no safe form of. Every `unsafe` block of
//! the library is here, each with its reason, behind safe functions.

pub(crate) mod dir;
pub mod fds;
pub(crate) mod map;
pub(crate) mod process;
pub mod queue;
pub(crate) mod ring;
pub(crate) mod signal;
pub(crate) mod thread;
pub(crate) mod users;
pub(crate) mod xattr;

use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::fs::{openat, statx, AtFlags, Mode, OFlags, Statx, StatxFlags};
use rustix::io::{pread, read, Errno};

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

/// Opens `name` in `dir` with `flags` (no `CREATE`) again, for a thread that may not use
/// the fd another thread holds of it: `ESTALE` unless the inode found there is still the
/// one `same` expects (a name may have been given to another file meanwhile).
pub(crate) fn reopen(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: OFlags,
    same: impl FnOnce(&Statx) -> bool,
) -> rustix::io::Result<OwnedFd> {
    let fd = openat(dir, name, flags, Mode::empty())?;
    match same(&statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::INO)?) {
        true => Ok(fd),
        false => Err(Errno::STALE),
    }
}

/// Reads at most `max` bytes of `fd` (at `offset`, or at its file position) onto the end of
/// `buf`, which has room for them; returns how many (0 at its end).
pub(crate) fn read_onto(
    fd: BorrowedFd<'_>,
    buf: &mut Vec<u8>,
    max: usize,
    offset: Option<u64>,
) -> rustix::io::Result<usize> {
    let spare = &mut buf.spare_capacity_mut()[..max];
    let n = match offset {
        None => read(fd, spare)?.0.len(),
        Some(offset) => pread(fd, spare, offset)?.0.len(),
    };
    // SAFETY: the read initialized the first `n` spare bytes.
    unsafe { buf.set_len(buf.len() + n) };
    Ok(n)
}

/// A `statx` result with every field 0, to fill in from a record of one.
pub(crate) fn blank_statx() -> Statx {
    // SAFETY: `Statx` is a C struct of integers and arrays of them: all zeros is a value.
    unsafe { std::mem::zeroed() }
}
