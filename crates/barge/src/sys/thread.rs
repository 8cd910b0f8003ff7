//! How barge's worker threads start: away from the CPU of the thread that starts them
//! ([`spawn_elsewhere`]), and, for threads that create many files, with private copies of
//! what threads share by default ([`go_solo`]); how long a thread waited for a CPU
//! ([`Queued`]).

use std::os::fd::OwnedFd;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Duration;

use rustix::fs::{open, Mode, OFlags};
use rustix::io::pread;

use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity};

/// Starts `work` on a new scoped thread that begins on another CPU than the calling
/// thread's, then is free to run anywhere again. It blocks the stop signals (see
/// [`crate::interrupt`]): they must interrupt the main thread.
///
/// The scheduler puts a new thread on its creator's CPU, where it either preempts the
/// creator or waits behind it, and moves one of the two to an idle CPU only at a later
/// balancing pass, so for a short job the second thread gains nothing. So the new thread
/// moves itself off the creator's CPU first, and the creator yields once so that a new
/// thread waiting behind it gets to do that at once (docs/BENCHMARKS.md, "Design
/// measurements").
///
/// Fails where no thread can be started (a task limit, `ulimit -u`): the caller goes on
/// with the threads it has, or says so.
pub fn spawn_elsewhere<'scope, T: Send + 'scope>(
    scope: &'scope Scope<'scope, '_>,
    work: impl FnOnce() -> T + Send + 'scope,
) -> std::io::Result<ScopedJoinHandle<'scope, T>> {
    let cpu = sched_getcpu();
    let handle = std::thread::Builder::new().spawn_scoped(scope, move || {
        super::signal::block();
        leave_cpu(cpu);
        work()
    })?;
    rustix::thread::sched_yield();
    Ok(handle)
}

/// How long the thread that opened it has waited for a CPU while it could run, from the
/// scheduler's account (`/proc/thread-self/schedstat`, whose time on a CPU lags by up to a
/// tick: `CLOCK_THREAD_CPUTIME_ID` is the one to ask for that).
pub(crate) struct Queued(Option<OwnedFd>);

impl Queued {
    /// The calling thread's account (none where /proc is not mounted or the kernel keeps no
    /// such account: then the wait reads as zero).
    pub(crate) fn mine() -> Queued {
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        Queued(open("/proc/thread-self/schedstat", flags, Mode::empty()).ok())
    }

    /// The thread's time waiting for a CPU so far.
    pub(crate) fn now(&self) -> Duration {
        let mut buf = [0u8; 96];
        let Some(n) = (self.0.as_ref()).and_then(|fd| pread(fd, &mut buf, 0).ok()) else {
            return Duration::ZERO;
        };
        // "<ns on a CPU> <ns waiting for one> <timeslices>\n"
        let waited = buf[..n].split(|&b| b == b' ').nth(1);
        let text = waited.and_then(|w| std::str::from_utf8(w).ok());
        Duration::from_nanos(text.and_then(|t| t.parse().ok()).unwrap_or(0))
    }
}

/// Moves the calling thread to another CPU than `cpu` when it may run on one, then restores
/// its affinity (the move stays until the scheduler has a reason to undo it).
fn leave_cpu(cpu: usize) {
    let Ok(allowed) = sched_getaffinity(None) else {
        return;
    };
    if !allowed.is_set(cpu) || allowed.count() < 2 {
        return;
    }
    let mut others = allowed;
    others.unset(cpu);
    if sched_setaffinity(None, &others).is_ok() {
        let _ = sched_setaffinity(None, &allowed);
    }
}

/// Gives the calling thread its own copy of the process's fd table and of its credentials.
///
/// Every file a thread opens takes a reference on its credentials (`f_cred`) and drops it
/// when closed, and with a shared fd table every `openat`/`close` takes the table's lock and
/// every use of an fd is reference-counted. Two threads creating files then keep bouncing
/// the same cache lines between cores; with private copies they do not (docs/BENCHMARKS.md,
/// "Design measurements").
///
/// Only for threads that never pass fds they open to other threads and use only fds that
/// existed when they called this. Each step that fails leaves that part shared.
pub fn go_solo() {
    // SAFETY: callers keep the fds they open to themselves (see above); the fds they
    // inherited stay valid in their copy.
    let _ = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FILES) };
    // Setting PR_SET_KEEPCAPS to its current value changes nothing but commits a fresh
    // copy of the credentials for this thread alone.
    if let Ok(keep) = rustix::thread::get_keep_capabilities() {
        let _ = rustix::thread::set_keep_capabilities(keep);
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsRawFd, BorrowedFd};

    use rustix::fs::{open, Mode, OFlags};
    use rustix::io::{fcntl_dupfd_cloexec, fcntl_getfd, Errno};
    use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};

    #[test]
    fn leaving_a_cpu_keeps_the_affinity() {
        std::thread::spawn(|| {
            let before = sched_getaffinity(None).unwrap();
            super::leave_cpu(sched_getcpu());
            assert_eq!(sched_getaffinity(None).unwrap(), before);
            // A thread allowed on one CPU only stays there.
            let mut one = CpuSet::new();
            let cpu = sched_getcpu();
            one.set(cpu);
            sched_setaffinity(None, &one).unwrap();
            super::leave_cpu(cpu);
            assert_eq!(sched_getaffinity(None).unwrap(), one);
            assert_eq!(sched_getcpu(), cpu);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn leaving_a_cpu_moves_the_thread_to_another() {
        let allowed = sched_getaffinity(None).unwrap();
        if allowed.count() < 2 {
            return;
        }
        std::thread::spawn(|| {
            let cpu = sched_getcpu();
            super::leave_cpu(cpu);
            assert_ne!(sched_getcpu(), cpu, "still on the CPU it left");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn fds_opened_after_going_solo_stay_in_the_thread() {
        let number = std::thread::spawn(|| {
            super::go_solo();
            let fd = open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
            // A number far above what the tests running alongside open.
            let fd = fcntl_dupfd_cloexec(&fd, 900).unwrap();
            let number = fd.as_raw_fd();
            std::mem::forget(fd);
            number
        })
        .join()
        .unwrap();
        // SAFETY: only asks whether the number is an open fd here.
        let here = fcntl_getfd(unsafe { BorrowedFd::borrow_raw(number) });
        assert_eq!(
            here.err(),
            Some(Errno::BADF),
            "fd {number} leaked into the main table"
        );
    }
}
