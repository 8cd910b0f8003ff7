//! Process and socket calls without a safe rustix form: `fork` of a single-threaded
//! process, `_exit`, entering a new user namespace, a TCP connection's round trip.

use rustix::io::Errno;
use rustix::process::Pid;
use rustix::thread::{unshare_unsafe, UnshareFlags};

/// Forks the process, which must be single-threaded (checked in `/proc/self/task`, else
/// `EAGAIN`): the child goes on running Rust code, which another thread's locks would
/// hang. Returns the child's pid in the parent, `None` in the child.
pub(crate) fn fork_single_threaded() -> rustix::io::Result<Option<Pid>> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count());
    if threads != 1 {
        return Err(Errno::AGAIN);
    }
    // SAFETY: the process has one thread (checked above), so the child's copy of memory
    // holds no lock another thread had.
    match unsafe { libc::fork() } {
        -1 => Err(Errno::from_io_error(&std::io::Error::last_os_error()).unwrap_or(Errno::AGAIN)),
        0 => Ok(None),
        pid => Ok(Some(
            Pid::from_raw(pid).expect("fork returns a positive pid"),
        )),
    }
}

/// Ends the process at once with `status`, without exit handlers or flushing buffers (a
/// forked child's copies of its parent's).
pub(crate) fn exit_now(status: i32) -> ! {
    // SAFETY: `_exit` is a plain system call that never returns.
    unsafe { libc::_exit(status) }
}

/// Enters a new user namespace (`unshare(CLONE_NEWUSER)`).
pub(crate) fn unshare_user() -> rustix::io::Result<()> {
    // SAFETY: only CLONE_NEWUSER, which shares no memory or fd state differently; it fails
    // (EINVAL) rather than misbehaves in a threaded process.
    unsafe { unshare_unsafe(UnshareFlags::NEWUSER) }
}

/// The connection's smoothed round trip as the kernel measured it (`TCP_INFO`), when it
/// says.
pub(crate) fn tcp_round_trip(socket: std::os::fd::BorrowedFd<'_>) -> Option<std::time::Duration> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain integers, for which zero is a value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes into `info`, which has them.
    let got = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    (got == 0).then(|| std::time::Duration::from_micros(info.tcpi_rtt.into()))
}

/// Takes fd 0 as an owned fd (a confined child's input bell), once per process: `None`
/// after the first call. The caller must use no other handle to stdin (`std::io::stdin`).
pub(crate) fn take_stdin() -> Option<std::os::fd::OwnedFd> {
    static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if TAKEN.swap(true, std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    // SAFETY: fd 0 gets one owner (the guard above), and the child mode reads stdin only
    // through it.
    Some(unsafe { rustix::stdio::take_stdin() })
}
