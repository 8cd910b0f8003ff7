//! Memory maps: an archive region of a regular file or block device, at any offset.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// An archive held in memory: a read-only private mapping of (a region of) a regular file
/// or block device, and the file.
pub struct Mapped {
    ptr: *mut std::ffi::c_void,
    /// Bytes mapped: the archive and the bytes before it on its first page.
    len: usize,
    /// Bytes mapped before the archive (mappings start on a page boundary).
    skip: usize,
    /// The file offset of the archive's first byte.
    offset: u64,
    file: OwnedFd,
}

impl Mapped {
    /// Maps the `len` bytes of `file` from `offset` on (any offset) without reading them:
    /// pages are mapped on first use, or ahead of use by [`populate`]. An empty region maps
    /// to an empty slice.
    pub fn new(file: OwnedFd, offset: u64, len: u64) -> rustix::io::Result<Mapped> {
        use rustix::mm::{mmap, MapFlags, ProtFlags};
        let page = rustix::param::page_size() as u64;
        let skip = offset % page;
        let mut mapped = Mapped {
            ptr: std::ptr::null_mut(),
            len: 0,
            skip: skip as usize,
            offset,
            file,
        };
        if len == 0 {
            mapped.skip = 0;
            return Ok(mapped);
        }
        mapped.len = usize::try_from(skip + len).expect("64-bit");
        // SAFETY: a fresh private read-only mapping; nothing else aliases it mutably. If the
        // file shrinks while mapped, reading a vanished page raises SIGBUS, which
        // `interrupt::catch_signals` turns into a stop (the page reads as zeros).
        mapped.ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                mapped.len,
                ProtFlags::READ,
                MapFlags::PRIVATE,
                &mapped.file,
                offset - skip,
            )
        }
        .inspect_err(|_| mapped.len = 0)?;
        super::signal::watch_mapping(mapped.bytes());
        Ok(mapped)
    }

    /// The mapped file.
    pub fn file(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The file offset of the archive's first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The archive's bytes.
    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`.
        let all = unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) };
        &all[self.skip..]
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
