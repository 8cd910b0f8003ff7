//! Extended attributes relative to a directory fd: `setxattrat`, `getxattrat` and
//! `listxattrat`, which have no rustix form yet.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::AtFlags;
use rustix::io::Errno;

/// The kernel's `struct xattr_args`: a value's address and size.
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

impl XattrArgs {
    /// The value at `address`, `size` bytes long (at most 64 KiB, the kernel's limit).
    fn new(address: *const u8, size: usize) -> XattrArgs {
        XattrArgs {
            value: address as u64,
            size: size as u32,
            flags: 0,
        }
    }
}

/// The numbers every architecture but alpha gives the calls (Linux 6.13; new system calls
/// share one table).
const SYS_SETXATTRAT: libc::c_long = 463;
const SYS_GETXATTRAT: libc::c_long = 464;
const SYS_LISTXATTRAT: libc::c_long = 465;

/// A name for the kernel: a NUL inside it is `EINVAL`.
fn c_string(bytes: &[u8]) -> rustix::io::Result<std::ffi::CString> {
    std::ffi::CString::new(bytes).map_err(|_| Errno::INVAL)
}

/// `setxattrat(dir, name, flags, attribute, value)` (Linux 6.13): sets an extended
/// attribute relative to a directory fd, on a symlink itself with `SYMLINK_NOFOLLOW`.
/// Older kernels answer `ENOSYS` (the attribute is then counted as not restored).
pub(crate) fn setxattrat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: AtFlags,
    attribute: &[u8],
    value: &[u8],
) -> rustix::io::Result<()> {
    let (name, attribute) = (c_string(name)?, c_string(attribute)?);
    let args = XattrArgs::new(value.as_ptr(), value.len());
    // SAFETY: the strings and the value outlive the call, `args` is the kernel's
    // `struct xattr_args` and its size is passed.
    sized(unsafe {
        libc::syscall(
            SYS_SETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            flags.bits(),
            attribute.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    })
    .map(drop)
}

/// The result of a system call that returns a size or -1.
fn sized(r: libc::c_long) -> rustix::io::Result<usize> {
    match usize::try_from(r) {
        Ok(n) => Ok(n),
        Err(_) => Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO)),
    }
}

/// `listxattrat(dir, name, flags, list)` (Linux 6.13): the NUL-separated names of the
/// extended attributes of `name` in `dir` (of a symlink itself with `SYMLINK_NOFOLLOW`) into
/// `list`, their length returned (with an empty `list`: the length needed). Older kernels
/// answer `ENOSYS`.
pub(crate) fn listxattrat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: AtFlags,
    list: &mut [u8],
) -> rustix::io::Result<usize> {
    let name = c_string(name)?;
    // SAFETY: the name outlives the call, and the kernel writes at most `list.len()` bytes
    // into `list`.
    sized(unsafe {
        libc::syscall(
            SYS_LISTXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            flags.bits(),
            list.as_mut_ptr(),
            list.len(),
        )
    })
}

/// `getxattrat(dir, name, flags, attribute, value)` (Linux 6.13): the value of the extended
/// attribute `attribute` of `name` in `dir` (of a symlink itself with `SYMLINK_NOFOLLOW`)
/// into `value`, its length returned. Older kernels answer `ENOSYS`.
pub(crate) fn getxattrat(
    dir: BorrowedFd<'_>,
    name: &[u8],
    flags: AtFlags,
    attribute: &[u8],
    value: &mut [u8],
) -> rustix::io::Result<usize> {
    let (name, attribute) = (c_string(name)?, c_string(attribute)?);
    let args = XattrArgs::new(value.as_mut_ptr(), value.len());
    // SAFETY: the strings outlive the call, `args` is the kernel's `struct xattr_args` (its
    // size passed), and the kernel writes at most `value.len()` bytes into `value`.
    sized(unsafe {
        libc::syscall(
            SYS_GETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            flags.bits(),
            attribute.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    })
}
