//! Reading the extended attributes of an open file into their archive form
//! ([`crate::tree::Xattrs`]): `flistxattr`, then `fgetxattr` per name, names ascending.

use std::os::fd::{AsRawFd, BorrowedFd};

use rustix::fs::{fgetxattr, flistxattr, AtFlags};
use rustix::io::Errno;

use crate::format::{MAX_XATTRS, MAX_XATTR_VALUE};
use crate::tree::Xattrs;

/// Buffers reused from one file to the next.
#[derive(Debug, Default)]
pub(crate) struct XattrReader {
    names: Vec<u8>,
    value: Vec<u8>,
    /// The attributes of the file read last, in archive form.
    pub(crate) wire: Vec<u8>,
}

impl XattrReader {
    /// Reads the attributes of `fd` (every namespace the process may read) into `wire`, in
    /// name order; one that would take the entry's records past the format's bound is left
    /// out, and the number of those is returned. Costs one `flistxattr` for a file without
    /// attributes; a filesystem without them gives none; on an error none are kept.
    pub(crate) fn read(&mut self, fd: BorrowedFd<'_>) -> rustix::io::Result<usize> {
        self.wire.clear();
        self.list(fd)?;
        let mut names: Vec<&[u8]> = self
            .names
            .split(|&b| b == 0)
            .filter(|name| !name.is_empty())
            .collect();
        names.sort_unstable();
        let (mut left_out, mut total) = (0, 0);
        self.value.resize(MAX_XATTR_VALUE, 0);
        for name in names {
            let value = match fgetxattr(fd, name, &mut self.value[..]) {
                Ok(n) => &self.value[..n],
                // Removed since the listing.
                Err(Errno::NODATA) => continue,
                Err(e) => {
                    self.wire.clear();
                    return Err(e);
                }
            };
            // Tag, name length, name, value size, value.
            let record = 1 + 1 + name.len() + 4 + value.len();
            if total + record > MAX_XATTRS {
                left_out += 1;
                continue;
            }
            total += record;
            Xattrs::push(&mut self.wire, name, value);
        }
        Ok(left_out)
    }

    /// The NUL-separated names of `fd`'s attributes into `names`.
    fn list(&mut self, fd: BorrowedFd<'_>) -> rustix::io::Result<()> {
        self.names.resize(self.names.capacity().max(4096), 0);
        loop {
            match flistxattr(fd, &mut self.names[..]) {
                Ok(n) => {
                    self.names.truncate(n);
                    return Ok(());
                }
                Err(Errno::NOTSUP) => {
                    self.names.clear();
                    return Ok(());
                }
                // Grown since asked: ask for the size again.
                Err(Errno::RANGE) => {
                    let size = flistxattr(fd, &mut [0u8; 0][..])?;
                    self.names.resize(size.max(self.names.len() * 2), 0);
                }
                Err(e) => return Err(e),
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Names come out sorted, and attributes past the format's bound are left out and
    /// counted (tmpfs holds that many; a filesystem that does not skips the test).
    #[test]
    fn attributes_come_sorted_and_those_past_the_bound_are_left_out() {
        let Ok(file) = tempfile::tempfile_in("/dev/shm") else {
            return;
        };
        let set = |name: &str, value: &[u8]| {
            rustix::fs::fsetxattr(&file, name, value, rustix::fs::XattrFlags::empty())
        };
        set("user.b", b"2").unwrap();
        set("user.a", b"1").unwrap();
        let mut reader = XattrReader::default();
        assert_eq!(reader.read(std::os::fd::AsFd::as_fd(&file)), Ok(0));
        let mut want = Vec::new();
        Xattrs::push(&mut want, b"user.a", b"1");
        Xattrs::push(&mut want, b"user.b", b"2");
        assert_eq!(reader.wire, want);

        let big = vec![7u8; MAX_XATTR_VALUE];
        for i in 0..5 {
            if set(&format!("user.big{i}"), &big).is_err() {
                return;
            }
        }
        // Each big record takes 65,552 bytes: three fit beside the small ones, not four.
        assert_eq!(reader.read(std::os::fd::AsFd::as_fd(&file)), Ok(2));
        let names: Vec<&[u8]> = Xattrs(&reader.wire).iter().map(|(name, _)| name).collect();
        let want: [&[u8]; 5] = [
            b"user.a",
            b"user.b",
            b"user.big0",
            b"user.big1",
            b"user.big2",
        ];
        assert_eq!(names, want);
        assert!(reader.wire.len() <= MAX_XATTRS);
    }
}
