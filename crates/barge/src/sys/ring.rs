//! io_uring: [`Ring`], a ring that runs batches of requests to completion (the uring
//! lander's file creation, pack's batched reads).

use std::io;

use io_uring::{squeue, IoUring};

/// A ring that runs batches: queue requests with [`Ring::push`], then [`Ring::run`] submits
/// them and waits for all of them; the result of the request queued with user data `i` is
/// `results()[i]`. Files opened into the registered table ([`Ring::new`]'s `files` slots)
/// never occupy an fd, so they need no `close` system call either.
pub(crate) struct Ring {
    ring: IoUring,
    queued: usize,
    results: Vec<i32>,
}

impl Ring {
    /// A ring for batches of up to `entries` requests, with `files` sparse fixed-file slots.
    /// Asks for single-issuer deferred task running (completions are only processed in
    /// `io_uring_enter`, on this thread) and falls back to a plain ring on older kernels.
    pub(crate) fn new(entries: u32, files: u32) -> io::Result<Ring> {
        let ring = IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_coop_taskrun()
            .build(entries)
            .or_else(|_| IoUring::new(entries))?;
        if files > 0 {
            ring.submitter().register_files_sparse(files)?;
        }
        Ok(Ring {
            ring,
            queued: 0,
            results: Vec::new(),
        })
    }

    /// How many requests fit in one batch.
    pub(crate) fn capacity(&self) -> usize {
        self.ring.params().sq_entries() as usize
    }

    /// Queues `entry`, whose result will be `results()[user_data]`.
    ///
    /// # Safety
    /// Every buffer and path `entry` points to must stay valid until [`Ring::run`] returns.
    pub(crate) unsafe fn push(&mut self, entry: &squeue::Entry) {
        assert!(self.queued < self.capacity(), "batch larger than the ring");
        // SAFETY: the caller keeps what `entry` points to alive until `run` returns, and the
        // queue has room: at most `capacity` requests are queued between two runs.
        unsafe { self.ring.submission().push(entry) }.expect("room checked above");
        self.queued += 1;
    }

    /// Submits what was queued and waits until every request completed.
    pub(crate) fn run(&mut self) -> rustix::io::Result<&[i32]> {
        self.results.clear();
        self.results.resize(self.queued, 0);
        let mut left = self.queued;
        self.queued = 0;
        while left > 0 {
            match self.ring.submit_and_wait(left) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) => {
                    return Err(
                        rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO)
                    )
                }
            }
            for cqe in self.ring.completion() {
                self.results[cqe.user_data() as usize] = cqe.result();
                left -= 1;
            }
        }
        Ok(&self.results)
    }
}
