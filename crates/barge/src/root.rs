//! The destination root and its confinement: the lander only ever works below a directory
//! fd it opened itself, and optionally (layer 3) inside a user namespace chrooted to it.

use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use rustix::fs::{open, Mode};
use rustix::process::{chdir, chroot, getgid, getuid};
use rustix::thread::{unshare_unsafe, UnshareFlags};

use crate::error::{Error, Result, TreePath};
use crate::fds::close_range;
use crate::land::sync::DIR_HANDLE_FLAGS;

/// How the destination is confined.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Confinement {
    /// In a new user namespace, chrooted to the destination, with no outside fds open.
    Sandboxed,
    /// The sandbox was asked for but the kernel refused it (the reason); layers 1-2 still hold.
    Unavailable(String),
    /// The sandbox was turned off.
    Off,
}

fn path_of(dest: &Path) -> TreePath {
    TreePath(dest.as_os_str().as_encoded_bytes().to_vec())
}

/// Creates `dest` (and missing parents) and returns an `O_PATH` fd of it. With `sandbox`,
/// first chroots into `dest` (an unprivileged caller first enters a new user namespace in
/// which it is root, as `unshare --map-root-user` does) and closes every fd above 2
/// except `keep`. The process must be single-threaded then;
/// meant for a process that does nothing but land.
pub fn open_dest(
    dest: &Path,
    sandbox: bool,
    keep: Option<RawFd>,
) -> Result<(OwnedFd, Confinement)> {
    fs::create_dir_all(dest).map_err(|source| Error::Io {
        op: "create destination",
        path: path_of(dest),
        source,
    })?;
    if !sandbox {
        let fd = open(dest, DIR_HANDLE_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open destination", path_of(dest), e))?;
        return Ok((fd, Confinement::Off));
    }
    if let Err(reason) = enter_user_namespace() {
        let fd = open(dest, DIR_HANDLE_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open destination", path_of(dest), e))?;
        return Ok((fd, Confinement::Unavailable(reason)));
    }
    chroot(dest).map_err(|e| Error::io("chroot", path_of(dest), e))?;
    chdir("/").map_err(|e| Error::io("chdir", path_of(dest), e))?;
    close_all_but(keep);
    let fd = open("/", DIR_HANDLE_FLAGS, Mode::empty())
        .map_err(|e| Error::io("open destination", path_of(dest), e))?;
    Ok((fd, Confinement::Sandboxed))
}

/// Gains the right to `chroot`: root has it already; anyone else enters a new user
/// namespace that maps only their own ids, to root. Returns why it could not.
fn enter_user_namespace() -> std::result::Result<(), String> {
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    if uid == 0 {
        return Ok(());
    }
    // SAFETY: only CLONE_NEWUSER; it fails (EINVAL) rather than misbehaves when threaded.
    unsafe { unshare_unsafe(UnshareFlags::NEWUSER) }
        .map_err(|e| format!("cannot create a user namespace: {e}"))?;
    let write = |file: &str, text: String| {
        fs::write(file, text).map_err(|e| format!("cannot write {file}: {e}"))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("0 {uid} 1"))?;
    write("/proc/self/gid_map", format!("0 {gid} 1"))
}

/// Closes every fd above stderr except `keep`.
fn close_all_but(keep: Option<RawFd>) {
    match keep {
        Some(fd) if fd > 2 => {
            close_range(3, fd - 1);
            close_range(fd + 1, RawFd::MAX);
        }
        _ => close_range(3, RawFd::MAX),
    }
}

/// An archive held in memory: a read-only private mapping of a regular file, and the file.
pub struct Mapped {
    ptr: *mut std::ffi::c_void,
    len: usize,
    file: OwnedFd,
}

impl Mapped {
    /// Maps all `len` bytes of `file` without reading them: pages are mapped on first use,
    /// or ahead of use by [`populate`]. An empty file maps to an empty slice.
    pub fn new(file: OwnedFd, len: u64, path: &Path) -> Result<Mapped> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        if len == 0 {
            return Ok(Mapped {
                ptr: std::ptr::null_mut(),
                len: 0,
                file,
            });
        }
        let len = usize::try_from(len).expect("64-bit");
        // SAFETY: a fresh private read-only mapping; nothing else aliases it mutably.
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ,
                MapFlags::PRIVATE,
                &file,
                0,
            )
        }
        .map_err(|e| Error::io("mmap", path_of(path), e))?;
        Ok(Mapped { ptr, len, file })
    }

    /// The mapped file.
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The mapped bytes.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }
}

/// Maps the pages holding `bytes`, a part of a file mapping, in one call (page faults one by
/// one inside a later `write` cost about twice as much); does nothing where the kernel lacks
/// `MADV_POPULATE_READ` (before 5.14).
pub fn populate(bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let page = rustix::param::page_size();
    let start = bytes.as_ptr() as usize / page * page;
    let end = bytes.as_ptr() as usize + bytes.len();
    // SAFETY: advice only; the range covers whole pages of a live mapping or allocation
    // (the first page holds `bytes[0]`), and populating for reading changes no contents.
    let _ = unsafe {
        rustix::mm::madvise(
            start as *mut std::ffi::c_void,
            end - start,
            rustix::mm::Advice::LinuxPopulateRead,
        )
    };
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly the mapping this value owns.
            let _ = unsafe { rustix::mm::munmap(self.ptr, self.len) };
        }
    }
}

/// Raises the soft open-file limit to the hard limit, so deep trees do not run out of fds.
pub fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current < limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
}
