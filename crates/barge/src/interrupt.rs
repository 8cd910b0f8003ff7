//! Stopping cleanly on a signal. SIGINT, SIGTERM, SIGHUP and SIGPIPE only set a flag
//! ([`catch_signals`]); the landers and `pack` check it between system calls ([`check`], and
//! `retry` after an interrupted call), so a stopped run removes the file it was writing and
//! returns [`Error::Interrupted`] instead of dying with a short file under its final name.
//! The front end then ends the process by the same signal ([`die_by`]).
//!
//! A mapped archive that another process truncates would end the process with SIGBUS at the
//! first read of a vanished page. [`catch_signals`] also catches that: the page is replaced
//! by zeros, and the stop is requested with [`SIGBUS`], which [`Error::Interrupted`] reports
//! as the archive having shrunk; the landers check for a stop after every write, before a
//! file counts as complete, so no file of zeros is kept.
//!
//! Signals are process-wide, and so is the flag: a program that handles signals itself calls
//! [`request`] from its own handler instead of [`catch_signals`].

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Condvar, MutexGuard};
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;

use crate::error::{Error, Result};
use crate::sys;

/// The signals that stop a run.
pub const SIGNALS: [i32; 4] = sys::signal::SIGNALS;

/// The stop reason of an archive mapping that lost pages (the file was truncated).
pub const SIGBUS: i32 = libc::SIGBUS;

/// Asks every running operation to stop, on account of `signal`. Async-signal-safe: it only
/// stores a number.
pub fn request(signal: i32) {
    sys::signal::request(signal);
}

/// The signal that asked to stop, if one did.
pub fn requested() -> Option<i32> {
    sys::signal::stopped_by()
}

/// Fails with [`Error::Interrupted`] once a stop was requested.
pub fn check() -> Result<()> {
    match requested() {
        None => Ok(()),
        Some(signal) => Err(Error::Interrupted { signal }),
    }
}

/// Runs a system call again when a signal interrupted it (`EINTR`), unless that signal asked
/// to stop: then the `EINTR` is returned, which [`Error::io`] reports as the stop.
pub(crate) fn retry<T>(mut call: impl FnMut() -> rustix::io::Result<T>) -> rustix::io::Result<T> {
    loop {
        match call() {
            Err(Errno::INTR) if requested().is_none() => {}
            other => return other,
        }
    }
}

/// How long a wait for input goes without looking for a stop request.
const STOP_LATENCY: Duration = Duration::from_millis(100);

/// `result`, unless the mapped archive shrank during the run: then that is the error, whatever
/// the archive's vanished (zeroed) pages made the decoder or a lander say.
pub(crate) fn unless_archive_shrank<T>(result: Result<T>) -> Result<T> {
    match requested() {
        Some(SIGBUS) => Err(Error::Interrupted { signal: SIGBUS }),
        _ => result,
    }
}

/// Waits until `input` has bytes (or its end, or an error) to read, or `wait` has passed
/// (then false), and fails once a stop was requested. A signal that comes just before a
/// blocking `read` would not interrupt it; this wait looks for a stop at least every 100 ms.
pub(crate) fn wait_readable(input: BorrowedFd<'_>, wait: Option<Duration>) -> Result<bool> {
    wait_for(input, PollFlags::IN, wait, true).map(|ready| ready.is_some())
}

/// Waits until `fd` is ready for `flags` and returns what `poll` says it is ready for (an
/// error or hang-up too, which the I/O that follows reports), or `None` once `wait` has
/// passed (`None`: no end). Looks for a stop at least every 100 ms and, when `stoppable`,
/// fails on one.
pub(crate) fn wait_for(
    fd: BorrowedFd<'_>,
    flags: PollFlags,
    wait: Option<Duration>,
    stoppable: bool,
) -> Result<Option<PollFlags>> {
    let mut fds = [PollFd::new(&fd, flags)];
    let waited = wait_for_any(&mut fds, wait, stoppable, None)?;
    Ok((waited == Waited::Ready).then(|| fds[0].revents()))
}

/// Waits on `condvar` for at most 100 ms, so that a thread waiting for a condition looks
/// for a stop that often (what [`wait_for_any`] does for fds); when `stoppable`, it fails
/// instead once a stop was requested. A poisoned lock is taken as is.
pub(crate) fn wait_a_slice<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    stoppable: bool,
) -> Result<MutexGuard<'a, T>> {
    if stoppable {
        check()?;
    }
    let waited = condvar.wait_timeout(guard, STOP_LATENCY);
    Ok(waited.map_or_else(|e| e.into_inner().0, |(guard, _)| guard))
}

/// How [`wait_for_any`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Waited {
    /// A descriptor is ready: their `revents` say which.
    Ready,
    /// The wait passed.
    TimedOut,
    /// The `cancelled` flag was set.
    Cancelled,
}

/// [`wait_for`] of several descriptors, which also ends (within 100 ms) once `cancelled`
/// is set.
pub(crate) fn wait_for_any(
    fds: &mut [PollFd<'_>],
    wait: Option<Duration>,
    stoppable: bool,
    cancelled: Option<&AtomicBool>,
) -> Result<Waited> {
    let start = Instant::now();
    loop {
        if stoppable {
            check()?;
        }
        if cancelled.is_some_and(|c| c.load(Relaxed)) {
            return Ok(Waited::Cancelled);
        }
        let left = wait.map_or(STOP_LATENCY, |w| w.saturating_sub(start.elapsed()));
        let slice = left.min(STOP_LATENCY);
        let timeout = Timespec {
            tv_sec: slice.as_secs() as i64,
            tv_nsec: i64::from(slice.subsec_nanos()),
        };
        match poll(fds, Some(&timeout)) {
            Ok(0) if wait.is_some_and(|w| start.elapsed() >= w) => return Ok(Waited::TimedOut),
            Ok(0) | Err(Errno::INTR) => {}
            // Ready, or an error the I/O that follows reports.
            _ => return Ok(Waited::Ready),
        }
    }
}

/// Makes [`SIGNALS`] request a stop instead of ending the process, and a SIGBUS in a watched
/// archive mapping too (see `watch_mapping`). The handlers do not ask for `SA_RESTART`, so
/// a blocking read of a stalled pipe returns `EINTR` and sees the stop. They are unblocked
/// in the calling thread: a process started from a worker that keeps them off (a confined
/// lander child of recv's connection threads) would never see a stop.
pub fn catch_signals() {
    sys::signal::catch();
}

/// Blocks [`SIGNALS`] in the calling thread, so the kernel delivers them to the main thread,
/// whose blocking calls they must interrupt. Every worker thread calls it first.
pub fn keep_signals_off_this_thread() {
    sys::signal::block();
}

/// Ends the process by `signal` with its default action, as if it had not been caught, so
/// the caller (a shell) sees how the process ended (`$?` is 128 + the signal number). Returns
/// only if the default action does not end the process.
pub fn die_by(signal: i32) {
    sys::signal::die_by(signal);
}

/// The name of a signal, for messages.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGBUS => "SIGBUS".into(),
        other => format!("signal {other}"),
    }
}
