//! Signals: the handlers that turn the stop signals into a flag (the process's stop flag,
//! which `interrupt` reads), the SIGBUS handler of a watched archive mapping, and the signal
//! masks. Everything here is a plain system call or an atomic: a handler only touches
//! statics.

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering::Relaxed};

/// The signals that stop a run.
pub(crate) const SIGNALS: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE];

/// The first stop signal that came, or 0.
static STOP: AtomicI32 = AtomicI32::new(0);

/// Whether the watched archive mapping lost pages: process-wide, as the SIGBUS handler can
/// only reach statics.
static SHRANK: AtomicBool = AtomicBool::new(false);

/// The archive mapping watched for SIGBUS: start, length, and the page size.
static MAPPING: [AtomicUsize; 3] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// The process's stop flag: the first stop signal that came, 0 before.
pub(crate) fn stop_flag() -> &'static AtomicI32 {
    &STOP
}

/// Whether the watched archive mapping lost pages (another process truncated its file).
pub(crate) fn archive_shrank() -> bool {
    SHRANK.load(Relaxed)
}

/// Records `signal` as the reason to stop, unless one was recorded before. Async-signal-safe.
pub(crate) fn request(signal: i32) {
    let _ = STOP.compare_exchange(0, signal, Relaxed, Relaxed);
}

/// The stop signal that came, if one did.
pub(crate) fn stopped_by() -> Option<i32> {
    match STOP.load(Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// Makes a SIGBUS at an address in `bytes` (a mapping of an archive file) a stop by
/// SIGBUS, its page read as zeros, instead of the end of the process. One mapping at a time.
pub(crate) fn watch_mapping(bytes: &[u8]) {
    MAPPING[2].store(rustix::param::page_size(), Relaxed);
    MAPPING[1].store(bytes.len(), Relaxed);
    MAPPING[0].store(bytes.as_ptr() as usize, Relaxed);
}

extern "C" fn on_bus(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let (start, len, page) = (
        MAPPING[0].load(Relaxed),
        MAPPING[1].load(Relaxed),
        MAPPING[2].load(Relaxed),
    );
    if page == 0 || addr < start || addr >= start + len {
        // Not the archive: fault again with the default action, which ends the process.
        // SAFETY: restoring the default disposition is async-signal-safe.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
        return;
    }
    SHRANK.store(true, Relaxed);
    request(libc::SIGBUS);
    let at = addr / page * page;
    // SAFETY: replaces one page of the archive mapping, whose file page is gone, with a
    // zero page; mmap is a plain system call.
    unsafe {
        libc::mmap(
            at as *mut libc::c_void,
            page,
            libc::PROT_READ,
            libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
    }
}

extern "C" fn on_signal(signal: libc::c_int) {
    request(signal);
}

/// Makes [`SIGNALS`] set the stop flag instead of ending the process, and a SIGBUS in the
/// watched mapping too. No `SA_RESTART`: a blocking read of a stalled pipe returns `EINTR`.
/// Unblocks them in the calling thread (a process inherits the mask of the thread that
/// started it).
pub(crate) fn catch() {
    type Bus = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);
    // SAFETY: zeroed sigactions with handlers that only store integers (and map a page) are
    // valid.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut action.sa_mask);
        for signal in SIGNALS {
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
        action.sa_sigaction = on_bus as Bus as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
    }
    mask(libc::SIG_UNBLOCK);
}

/// Makes [`SIGNALS`] ignored by the process (a keeper that only its parent may stop).
pub(crate) fn ignore() {
    for signal in SIGNALS {
        // SAFETY: setting a disposition to "ignore" is a plain system call.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
}

/// Blocks [`SIGNALS`] in the calling thread, so that the kernel delivers them elsewhere.
pub(crate) fn block() {
    mask(libc::SIG_BLOCK);
}

/// Blocks or unblocks (`how`) [`SIGNALS`] in the calling thread.
fn mask(how: libc::c_int) {
    // SAFETY: plain signal-mask calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in SIGNALS {
            libc::sigaddset(&mut set, signal);
        }
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Ends the process by `signal` with its default action, as if it had not been caught.
/// Returns only if the default action does not end the process.
pub(crate) fn die_by(signal: i32) {
    // SAFETY: restoring the default action and raising a signal in the calling thread.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
}
