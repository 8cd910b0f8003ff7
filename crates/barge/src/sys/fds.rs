//! Closing many fds with few system calls.

use std::os::fd::{IntoRawFd, OwnedFd, RawFd};

use rustix::process::{getrlimit, Resource};

/// Closes the fds `first..=last` with one `close_range`. It fails only where the kernel
/// lacks the call (before 5.9) or a seccomp filter refuses it.
pub(crate) fn close_range(first: RawFd, last: RawFd) -> rustix::io::Result<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: a plain syscall on integers; callers own every fd in the range.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first as u32, last as u32, 0u32) };
    if r < 0 {
        return Err(rustix::io::Errno::from_raw_os_error(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOSYS),
        ));
    }
    Ok(())
}

/// Closes `fd` with a plain system call (rustix's), without the cancellation-point
/// bookkeeping libc's `close` does in a threaded process.
pub(crate) fn close_now(fd: OwnedFd) {
    // SAFETY: `fd` is owned here and closed once.
    unsafe { rustix::io::close(fd.into_raw_fd()) };
}

/// Fds that are no longer used, closed in batches: each run of consecutive fd numbers
/// goes in one `close_range`. Only fds handed to it are ever closed, so fds owned by
/// anyone else (even inside a run's span) are never touched.
#[derive(Debug)]
pub(crate) struct Graveyard {
    fds: Vec<RawFd>,
    limit: usize,
}

impl Default for Graveyard {
    fn default() -> Self {
        Self::new()
    }
}

impl Graveyard {
    /// A graveyard holding at most a quarter of the soft fd limit (16..=4096) before it closes them.
    pub fn new() -> Graveyard {
        let soft = getrlimit(Resource::Nofile).current.unwrap_or(1024);
        let limit = (soft / 4).clamp(16, 4096) as usize;
        Graveyard {
            fds: Vec::with_capacity(limit),
            limit,
        }
    }

    /// Takes `fd` to be closed later.
    pub(crate) fn bury(&mut self, fd: OwnedFd) {
        self.fds.push(fd.into_raw_fd());
        if self.fds.len() >= self.limit {
            self.close_all();
        }
    }

    /// Closes every fd held, one `close_range` per run of consecutive numbers.
    pub(crate) fn close_all(&mut self) {
        self.fds.sort_unstable();
        let mut runs = self.fds.chunk_by(|a, b| a + 1 == *b);
        for run in &mut runs {
            if close_range(run[0], run[run.len() - 1]).is_err() {
                for &fd in run {
                    // SAFETY: buried fds are owned here and closed once.
                    unsafe { rustix::io::close(fd) };
                }
            }
        }
        self.fds.clear();
    }
}

impl Drop for Graveyard {
    fn drop(&mut self) {
        self.close_all();
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsRawFd, BorrowedFd};

    fn is_open(fd: RawFd) -> bool {
        // SAFETY: only probes the fd number with fcntl(F_GETFD).
        rustix::io::fcntl_getfd(unsafe { BorrowedFd::borrow_raw(fd) }).is_ok()
    }

    #[test]
    fn closes_buried_fds_in_runs_and_nothing_else() {
        let open = || std::fs::File::open("/dev/null").map(OwnedFd::from).unwrap();
        let fds: Vec<OwnedFd> = (0..6).map(|_| open()).collect();
        let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
        let mut graveyard = Graveyard::new();
        let mut kept = Vec::new();
        for (i, fd) in fds.into_iter().enumerate() {
            // Keep the third fd: it sits inside the span of the buried ones.
            if i == 2 {
                kept.push(fd);
            } else {
                graveyard.bury(fd);
            }
        }
        assert!(raw.iter().all(|&fd| is_open(fd)));
        graveyard.close_all();
        for (i, &fd) in raw.iter().enumerate() {
            assert_eq!(is_open(fd), i == 2, "fd {fd} (index {i})");
        }
    }
}
