//! How many worker threads each kind of work gets unless told otherwise, and how many of
//! them create entries in one directory at once: the one place that decides.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

/// A kind of work that runs on worker threads; [`Work::threads`] is its default count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Work {
    /// A parallel walk that copies or measures trees (`cp`, `du`, `cp --verify`): at most
    /// 64. A walk starts one thread per core and adds more only while directories are slow
    /// to read (not cached, a network filesystem), to keep many reads in flight.
    Walk,
    /// Listing a tree for `send --update`, or checking one against a listing: 4, more than
    /// the cores for trees not in the cache, fewer than a walk beside a transfer.
    Listing,
    /// A walk beside the real work that only feeds a display (`cp`'s progress total): 2.
    Background,
    /// Landing an archive (the threaded engines): one per core, 2 when the cores are
    /// unknown (the decoding thread and one lander).
    Land,
    /// Work bound by the CPU: compressing a stream, counting a tree once (serve's quota),
    /// the threads a walk starts with: one per core.
    Cores,
}

impl Work {
    /// The default number of threads for this kind of work.
    pub fn threads(self) -> usize {
        // Asked only where needed: it reads the affinity mask and the cgroup's CPU quota.
        let cores = || std::thread::available_parallelism().map(|n| n.get());
        match self {
            Work::Walk => 64,
            Work::Listing => 4,
            Work::Background => 2,
            Work::Land => cores().unwrap_or(2),
            Work::Cores => cores().unwrap_or(1),
        }
    }
}

/// Threads creating entries in one directory at once, at most: creations in a directory take
/// turns on its lock, so more only contend (docs/BENCHMARKS.md, "Landers per directory").
pub(crate) const PER_DIR: usize = 4;

/// The threads creating entries in one directory now (at most [`PER_DIR`]).
#[derive(Debug, Default)]
pub(crate) struct Crowd(AtomicUsize);

impl Crowd {
    /// Takes a place when one is free.
    fn try_join(&self) -> bool {
        let joined = (self.0).fetch_update(SeqCst, SeqCst, |n| (n < PER_DIR).then_some(n + 1));
        #[cfg(test)]
        if let Ok(n) = joined {
            hooks::MOST.fetch_max(n + 1, SeqCst);
        }
        joined.is_ok()
    }
}

/// Where the threads of one landing or copy wait for a place in a full [`Crowd`].
#[derive(Debug, Default)]
pub(crate) struct Crowds {
    waiting: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
    /// How long a thread keeps a place before it creates (tests: to crowd a directory).
    #[cfg(test)]
    pub(crate) dwell: std::time::Duration,
}

impl Crowds {
    /// A place in `crowd` (the directory's), once fewer than [`PER_DIR`] threads hold one.
    /// A thread holds one place at a time, so none waits for another it holds.
    pub(crate) fn join<'c>(&'c self, crowd: &'c Crowd) -> Place<'c> {
        if !crowd.try_join() {
            // Counted before trying under the lock: a thread leaving after that try sees
            // the count, and wakes this one.
            self.waiting.fetch_add(1, SeqCst);
            let mut held = self.lock.lock().expect("no panics");
            while !crowd.try_join() {
                held = self.freed.wait(held).expect("no panics");
            }
            drop(held);
            self.waiting.fetch_sub(1, SeqCst);
        }
        #[cfg(test)]
        std::thread::sleep(self.dwell);
        Place {
            crowds: self,
            crowd,
        }
    }
}

/// A thread's place in a [`Crowd`], given back when dropped.
#[must_use]
pub(crate) struct Place<'c> {
    crowds: &'c Crowds,
    crowd: &'c Crowd,
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.crowd.0.fetch_sub(1, SeqCst);
        if self.crowds.waiting.load(SeqCst) > 0 {
            let _held = self.crowds.lock.lock().expect("no panics");
            self.crowds.freed.notify_all();
        }
    }
}

#[cfg(test)]
pub(crate) mod hooks {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// The most threads seen in one [`Crowd`](super::Crowd) at once, by any test.
    pub(crate) static MOST: AtomicUsize = AtomicUsize::new(0);
    /// Held by a test that resets and reads [`MOST`].
    pub(crate) static COUNTING: Mutex<()> = Mutex::new(());
}
