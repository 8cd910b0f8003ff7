//! How barge's worker threads start: away from the CPU of the thread that starts them
//! ([`spawn_elsewhere`]), and, for threads that open and create many files, with private
//! copies of what threads share by default ([`go_solo`]); the fds of such a thread's own
//! table ([`ThreadFd`]); how long a thread waited for a CPU ([`Queued`]).

use std::cell::OnceCell;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
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
/// Only for threads that never pass fds they open to other threads (but as [`ThreadFd`]s)
/// and use only fds that existed when they called this. Each step that fails leaves that
/// part shared.
pub fn go_solo() {
    // SAFETY: callers keep the fds they open to themselves (see above); the fds they
    // inherited stay valid in their copy.
    let unshared = unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::FILES) };
    if unshared.is_ok() {
        TABLE.with(|table| table.set(Solo(Arc::new(Table::new()))).is_ok());
    }
    // Setting PR_SET_KEEPCAPS to its current value changes nothing but commits a fresh
    // copy of the credentials for this thread alone.
    if let Ok(keep) = rustix::thread::get_keep_capabilities() {
        let _ = rustix::thread::set_keep_capabilities(keep);
    }
}

/// An fd table: fds of it that other threads dropped, for its own threads to close.
#[derive(Debug)]
struct Table {
    /// `None` once its thread ended (and with it the table).
    orphans: Mutex<Option<Vec<OwnedFd>>>,
    any: AtomicBool,
}

impl Table {
    const fn new() -> Table {
        Table {
            orphans: Mutex::new(Some(Vec::new())),
            any: AtomicBool::new(false),
        }
    }
}

/// The process's fd table, which every thread that did not [`go_solo`] shares.
static MAIN: Table = Table::new();

/// A solo thread's own table; its fds that others dropped close with it when it ends.
struct Solo(Arc<Table>);

impl Drop for Solo {
    fn drop(&mut self) {
        self.0.orphans.lock().expect("no panics").take();
    }
}

thread_local! {
    /// The calling thread's own table, when it went solo (else it uses [`MAIN`]).
    static TABLE: OnceCell<Solo> = const { OnceCell::new() };
}

/// The calling thread's table (`None`: the process's).
fn current() -> Option<Arc<Table>> {
    TABLE.with(|table| table.get().map(|solo| solo.0.clone()))
}

/// Whether `table` is the calling thread's.
fn is_current(table: &Option<Arc<Table>>) -> bool {
    TABLE.with(|here| match (table, here.get()) {
        (None, None) => true,
        (Some(table), Some(here)) => Arc::ptr_eq(table, &here.0),
        _ => false,
    })
}

/// Closes the fds of the calling thread's table that other threads dropped.
pub(crate) fn reap() {
    TABLE.with(|here| {
        let table = here.get().map_or(&MAIN, |solo| &*solo.0);
        if table.any.load(Relaxed) && table.any.swap(false, Relaxed) {
            let orphans = table
                .orphans
                .lock()
                .expect("no panics")
                .as_mut()
                .map(std::mem::take);
            drop(orphans);
        }
    });
}

/// An fd of one thread's table (or of every walker thread's, see [`ThreadFd::everywhere`]):
/// usable on the threads of that table only, where the same number may name another file or
/// none. Dropped on another thread it is closed later by its own ([`reap`]), or with its
/// table when that thread has ended.
#[derive(Debug)]
pub(crate) struct ThreadFd {
    fd: ManuallyDrop<OwnedFd>,
    /// `None`: the process's table.
    table: Option<Arc<Table>>,
    everywhere: bool,
}

impl ThreadFd {
    /// `fd`, just opened by the calling thread.
    pub(crate) fn new(fd: OwnedFd) -> ThreadFd {
        ThreadFd {
            fd: ManuallyDrop::new(fd),
            table: current(),
            everywhere: false,
        }
    }

    /// `fd`, opened by a thread that did not go solo before it starts the threads that use
    /// it, and kept open while they run: each of them has it in its copy of the table.
    pub(crate) fn everywhere(fd: OwnedFd) -> ThreadFd {
        ThreadFd {
            fd: ManuallyDrop::new(fd),
            table: current(),
            everywhere: true,
        }
    }

    /// The fd, where the calling thread may use it.
    pub(crate) fn get(&self) -> Option<BorrowedFd<'_>> {
        (self.everywhere || is_current(&self.table)).then(|| self.fd.as_fd())
    }
}

impl AsFd for ThreadFd {
    /// The fd; only for a thread that may use it (else a bug: it panics).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.get().expect("an fd of another thread's table")
    }
}

impl Drop for ThreadFd {
    fn drop(&mut self) {
        if is_current(&self.table) {
            // SAFETY: dropped once, here.
            return unsafe { ManuallyDrop::drop(&mut self.fd) };
        }
        let table = self.table.as_deref().unwrap_or(&MAIN);
        // SAFETY: taken once, here; the fd is not used again on this thread.
        let fd = unsafe { ManuallyDrop::take(&mut self.fd) };
        match &mut *table.orphans.lock().expect("no panics") {
            Some(orphans) => {
                orphans.push(fd);
                table.any.store(true, Relaxed);
            }
            // Its table is gone, and the fd with it.
            None => std::mem::forget(fd),
        }
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

    /// Whether `number` is an open fd in the calling thread's table.
    fn is_open(number: i32) -> bool {
        // SAFETY: only asks whether the number is an open fd here.
        fcntl_getfd(unsafe { BorrowedFd::borrow_raw(number) }).is_ok()
    }

    #[test]
    fn a_thread_fd_serves_its_own_table_and_is_closed_there_when_dropped_elsewhere() {
        let root = || open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let everywhere = super::ThreadFd::everywhere(root());
        let (to_main, from_solo) = std::sync::mpsc::channel();
        let (to_solo, dropped) = std::sync::mpsc::channel::<()>();
        let (everywhere, root) = (&everywhere, &root);
        std::thread::scope(|scope| {
            scope.spawn(move || {
                super::go_solo();
                assert!(everywhere.get().is_some());
                // A number far above what the tests running alongside open.
                let fd = super::ThreadFd::new(fcntl_dupfd_cloexec(root(), 920).unwrap());
                let number = fd.fd.as_raw_fd();
                assert!(fd.get().is_some());
                to_main.send((fd, number)).unwrap();
                dropped.recv().unwrap();
                // Dropped on the main thread: still open here until this thread reaps it.
                assert!(is_open(number));
                super::reap();
                assert!(!is_open(number), "fd {number} not closed by its own thread");
            });
            let (fd, number) = from_solo.recv().unwrap();
            assert!(fd.get().is_none(), "another table's fd is usable here");
            assert!(!is_open(number));
            drop(fd);
            to_solo.send(()).unwrap();
        });
    }
}
