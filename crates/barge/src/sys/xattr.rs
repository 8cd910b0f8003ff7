//! Extended attributes: `setxattrat`, which has no rustix form yet.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::AtFlags;
use rustix::io::Errno;

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
    /// The number every architecture but alpha gives it (new system calls share one table).
    const SYS_SETXATTRAT: libc::c_long = 463;
    #[repr(C)]
    struct XattrArgs {
        value: u64,
        size: u32,
        flags: u32,
    }
    let cstr = |bytes: &[u8]| std::ffi::CString::new(bytes).map_err(|_| Errno::INVAL);
    let (name, attribute) = (cstr(name)?, cstr(attribute)?);
    let args = XattrArgs {
        value: value.as_ptr() as u64,
        size: value.len() as u32,
        flags: 0,
    };
    // SAFETY: the strings and the value outlive the call, `args` is the kernel's
    // `struct xattr_args` and its size is passed.
    let r = unsafe {
        libc::syscall(
            SYS_SETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            flags.bits(),
            attribute.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    };
    if r < 0 {
        return Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::IO));
    }
    Ok(())
}
