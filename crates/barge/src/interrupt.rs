//! Stopping cleanly: [`Cancel`], the token every operation takes and checks between system
//! calls ([`Cancel::check`], and `retry` after an interrupted call), so a stopped run
//! removes the file it was writing and returns [`Error::Interrupted`] instead of dying with
//! a short file under its final name. An operation's default token is one nothing cancels.
//!
//! Signals: [`catch_signals`] makes SIGINT, SIGTERM, SIGHUP and SIGPIPE only set the process's
//! stop flag (a handler can only reach a static) and returns the token bound to it, which a
//! front end passes to its operations; it then ends the process by the same signal
//! ([`die_by`]). A program that handles signals itself cancels its own token instead.
//!
//! A mapped archive that another process truncates would end the process with SIGBUS at the
//! first read of a vanished page. [`catch_signals`] also catches that: the page is replaced
//! by zeros, and the signal token is stopped with [`SIGBUS`], which [`Error::Interrupted`]
//! reports as the archive having shrunk. That fact is process-wide (the handler knows no
//! token), so every token's [`Cancel::check`] sees it too; the landers check after every
//! write, before a file counts as complete, so no file of zeros is kept.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicI32, Ordering::Relaxed};
use std::sync::Arc;
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

/// A cancellation token: cheap to clone (clones share one flag), checked by a relaxed load.
/// [`Cancel::new`] makes one only its holders cancel; [`catch_signals`] returns the one the
/// stop signals cancel.
#[derive(Clone, Debug)]
pub struct Cancel(Flag);

#[derive(Clone, Debug)]
enum Flag {
    /// The process's stop flag, which the signal handlers set.
    Signals,
    /// A flag of its own.
    Own(Arc<AtomicI32>),
}

/// What [`Cancel::cancel`] records: no signal, reported as signal 0.
const CANCELLED: i32 = -1;

impl Default for Cancel {
    /// A token nothing cancels but its holders.
    fn default() -> Cancel {
        Cancel::new()
    }
}

impl Cancel {
    /// A token of its own, not cancelled.
    pub fn new() -> Cancel {
        Cancel(Flag::Own(Arc::default()))
    }

    fn flag(&self) -> &AtomicI32 {
        match &self.0 {
            Flag::Signals => sys::signal::stop_flag(),
            Flag::Own(flag) => flag,
        }
    }

    /// Cancels every operation holding this token (or a clone).
    pub fn cancel(&self) {
        self.stop_by(CANCELLED);
    }

    /// Cancels on account of `signal` (kept only if it is the first reason). Lock-free: a
    /// program's own signal handler may call it on the token of [`catch_signals`].
    pub fn stop_by(&self, signal: i32) {
        let _ = self.flag().compare_exchange(0, signal, Relaxed, Relaxed);
    }

    /// Whether the token was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.flag().load(Relaxed) != 0
    }

    /// The signal the token was cancelled by (0: by [`Cancel::cancel`]), if it was.
    pub fn reason(&self) -> Option<i32> {
        match self.flag().load(Relaxed) {
            0 => None,
            CANCELLED => Some(0),
            signal => Some(signal),
        }
    }

    /// Fails with [`Error::Interrupted`] once the token was cancelled, or once a watched
    /// archive mapping lost pages ([`SIGBUS`]).
    pub fn check(&self) -> Result<()> {
        match self.reason() {
            None if sys::signal::archive_shrank() => Err(Error::Interrupted { signal: SIGBUS }),
            None => Ok(()),
            Some(signal) => Err(Error::Interrupted { signal }),
        }
    }
}

/// Runs a system call again when a signal interrupted it (`EINTR`), unless `cancel` was
/// cancelled: then the `EINTR` is returned, which [`Error::io`] reports as the stop.
pub(crate) fn retry<T>(
    cancel: &Cancel,
    mut call: impl FnMut() -> rustix::io::Result<T>,
) -> rustix::io::Result<T> {
    loop {
        match call() {
            Err(Errno::INTR) if cancel.check().is_ok() => {}
            other => return other,
        }
    }
}

/// How long a wait for input goes without looking for a stop request.
const STOP_LATENCY: Duration = Duration::from_millis(100);

/// `result`, unless the mapped archive shrank during the run: then that is the error, whatever
/// the archive's vanished (zeroed) pages made the decoder or a lander say.
pub(crate) fn unless_archive_shrank<T>(result: Result<T>) -> Result<T> {
    match sys::signal::archive_shrank() {
        true => Err(Error::Interrupted { signal: SIGBUS }),
        false => result,
    }
}

/// Waits until `input` has bytes (or its end, or an error) to read, or `wait` has passed
/// (then false), and fails once `cancel` is. A signal that comes just before a blocking
/// `read` would not interrupt it; this wait looks for a stop at least every 100 ms.
pub(crate) fn wait_readable(
    input: BorrowedFd<'_>,
    wait: Option<Duration>,
    cancel: &Cancel,
) -> Result<bool> {
    wait_for(input, PollFlags::IN, wait, cancel).map(|ready| ready.is_some())
}

/// Waits until `fd` is ready for `flags` and returns what `poll` says it is ready for (an
/// error or hang-up too, which the I/O that follows reports), or `None` once `wait` has
/// passed (`None`: no end). Looks at `stop` at least every 100 ms and fails once it is
/// cancelled.
pub(crate) fn wait_for(
    fd: BorrowedFd<'_>,
    flags: PollFlags,
    wait: Option<Duration>,
    stop: &Cancel,
) -> Result<Option<PollFlags>> {
    let mut fds = [PollFd::new(&fd, flags)];
    let waited = wait_for_any(&mut fds, wait, stop, None)?;
    Ok((waited == Waited::Ready).then(|| fds[0].revents()))
}

/// Waits on `condvar` for at most 100 ms, so that a thread waiting for a condition looks
/// for a stop that often (what [`wait_for_any`] does for fds); it fails instead once `stop`
/// is cancelled. A poisoned lock is taken as is.
pub(crate) fn wait_a_slice<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    stop: &Cancel,
) -> Result<MutexGuard<'a, T>> {
    stop.check()?;
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
    /// The `cancelled` token was cancelled.
    Cancelled,
}

/// [`wait_for`] of several descriptors, which also ends (within 100 ms) once `cancelled`
/// is cancelled.
pub(crate) fn wait_for_any(
    fds: &mut [PollFd<'_>],
    wait: Option<Duration>,
    stop: &Cancel,
    cancelled: Option<&Cancel>,
) -> Result<Waited> {
    let start = Instant::now();
    loop {
        stop.check()?;
        if cancelled.is_some_and(Cancel::is_cancelled) {
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

/// Makes [`SIGNALS`] cancel the returned token (the process's one: every call returns it)
/// instead of ending the process, and a SIGBUS in a watched archive mapping too (see
/// `watch_mapping`). The handlers do not ask for `SA_RESTART`, so
/// a blocking read of a stalled pipe returns `EINTR` and sees the stop. They are unblocked
/// in the calling thread: a process started from a worker that keeps them off (a confined
/// lander child of recv's connection threads) would never see a stop.
pub fn catch_signals() -> Cancel {
    sys::signal::catch();
    Cancel(Flag::Signals)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The signal token, without installing the handlers.
    fn signals() -> Cancel {
        Cancel(Flag::Signals)
    }

    #[test]
    fn a_token_of_its_own_is_independent_of_the_signal_token_and_of_others() {
        let (a, b) = (Cancel::new(), Cancel::new());
        a.cancel();
        assert!(a.is_cancelled() && !b.is_cancelled());
        assert!(matches!(a.check(), Err(Error::Interrupted { signal: 0 })));
        assert!(!signals().is_cancelled(), "a token of its own is no signal");
        // A signal stops the signal token (every one of them), and no token of its own.
        signals().stop_by(libc::SIGTERM);
        assert!(!b.is_cancelled() && b.check().is_ok());
        let stopped = signals().check();
        assert!(matches!(
            stopped,
            Err(Error::Interrupted {
                signal: libc::SIGTERM
            })
        ));
        // Clones share their flag, on any thread.
        fn shareable<T: Clone + Send + Sync>(_: &T) {}
        shareable(&b);
        b.clone().cancel();
        assert!(b.is_cancelled());
    }
}
