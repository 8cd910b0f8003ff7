//! How many worker threads each kind of work gets unless told otherwise, and how many of
//! them create entries in one directory at once: the one place that decides.

use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};

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

/// Threads creating entries in an ext4 file system at once, at most, wherever in it: with 16
/// creating, 14 cores spun on its locks and the copy took twice one thread's time
/// (docs/BENCHMARKS.md, "Sixteen cores"). The others read, copy data and restore meanwhile.
pub(crate) const EXT4: usize = 2;

/// `statfs`'s type of ext2, ext3 and ext4.
const EXT4_MAGIC: rustix::fs::FsWord = 0xef53;

/// The threads creating entries in one directory now (at most [`PER_DIR`]), those waiting
/// for a place in it, and those holding work in it (see [`Crowds::claim`]).
#[derive(Debug, Default)]
pub(crate) struct Crowd {
    inside: AtomicUsize,
    waiting: AtomicUsize,
    claims: AtomicUsize,
    lock: Mutex<()>,
    freed: Condvar,
}

impl Crowd {
    /// Takes a place when fewer than `cap` are taken.
    fn try_join(&self, cap: usize) -> bool {
        let joined = (self.inside).fetch_update(SeqCst, SeqCst, |n| (n < cap).then_some(n + 1));
        #[cfg(test)]
        if let Ok(n) = joined {
            hooks::MOST.fetch_max(n + 1, SeqCst);
            if n == 0 {
                let crowded = hooks::CROWDED.fetch_add(1, SeqCst) + 1;
                hooks::MOST_CROWDED.fetch_max(crowded, SeqCst);
            }
        }
        joined.is_ok()
    }
}

/// How the threads of one landing or copy take places in crowds: one per directory, at
/// most [`PER_DIR`] in each, or, into ext4, one for the whole file system, at most [`EXT4`];
/// counted only when there are more threads than that (fewer cannot fill a crowd).
#[derive(Debug, Default)]
pub(crate) struct Crowds {
    /// The most threads in a crowd, 0 when places are not counted.
    cap: usize,
    /// The one crowd of every creation, into ext4.
    whole: Option<Crowd>,
    /// How long a thread keeps a place before it creates (tests: to crowd a directory).
    #[cfg(test)]
    pub(crate) dwell: std::time::Duration,
}

impl Crowds {
    /// For `threads` threads at most, creating entries below the directory `dest`.
    pub(crate) fn new(threads: usize, dest: BorrowedFd<'_>) -> Crowds {
        let ext4 = rustix::fs::fstatfs(dest).is_ok_and(|fs| fs.f_type == EXT4_MAGIC);
        Crowds::with(threads, ext4.then_some(EXT4))
    }

    /// Per directory ([`PER_DIR`]), or one crowd of `whole` places for every creation.
    fn with(threads: usize, whole: Option<usize>) -> Crowds {
        let cap = whole.unwrap_or(PER_DIR);
        Crowds {
            cap: if threads > cap { cap } else { 0 },
            whole: whole.map(|_| Crowd::default()),
            #[cfg(test)]
            dwell: std::time::Duration::ZERO,
        }
    }

    /// Whether `crowd` has room for one more thread's work (a batch to land): fewer claims
    /// on it than places; always where places are not counted per directory. A thread
    /// that would wait for a place does better to take work in another directory first.
    pub(crate) fn has_room(&self, crowd: &Crowd) -> bool {
        !self.per_dir() || crowd.claims.load(SeqCst) < self.cap
    }

    /// Notes one more thread's work in `crowd` (even over its places) until the [`Claim`]
    /// is dropped; none where places are not counted per directory.
    pub(crate) fn claim(&self, crowd: &Arc<Crowd>) -> Option<Claim> {
        self.per_dir().then(|| {
            crowd.claims.fetch_add(1, SeqCst);
            Claim(crowd.clone())
        })
    }

    /// Whether places are counted per directory.
    fn per_dir(&self) -> bool {
        self.cap != 0 && self.whole.is_none()
    }

    /// A place in `crowd` (the directory's; into ext4 the whole file system's), once there
    /// is one free. A thread holds one place at a time, so none waits for another it holds.
    pub(crate) fn join<'c>(&'c self, crowd: &'c Crowd) -> Place<'c> {
        if self.cap == 0 {
            return Place(None);
        }
        let crowd = self.whole.as_ref().unwrap_or(crowd);
        if !crowd.try_join(self.cap) {
            // Counted before trying under the lock: a thread leaving after that try sees
            // the count and, taking the lock, wakes one waiter once this one waits.
            crowd.waiting.fetch_add(1, SeqCst);
            let mut held = crowd.lock.lock().expect("no panics");
            while !crowd.try_join(self.cap) {
                held = crowd.freed.wait(held).expect("no panics");
            }
            drop(held);
            crowd.waiting.fetch_sub(1, SeqCst);
        }
        #[cfg(test)]
        std::thread::sleep(self.dwell);
        Place(Some(crowd))
    }
}

/// A thread's place in a [`Crowd`] (none when places are not counted), given back when
/// dropped: one place freed wakes one waiter of that directory, not every waiting thread.
#[must_use]
pub(crate) struct Place<'c>(Option<&'c Crowd>);

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let Some(crowd) = self.0 else { return };
        let _was = crowd.inside.fetch_sub(1, SeqCst);
        #[cfg(test)]
        if _was == 1 {
            hooks::CROWDED.fetch_sub(1, SeqCst);
        }
        if crowd.waiting.load(SeqCst) > 0 {
            let _held = crowd.lock.lock().expect("no panics");
            crowd.freed.notify_one();
        }
    }
}

/// A thread's work in a [`Crowd`] (see [`Crowds::claim`]), done when dropped.
#[must_use]
pub(crate) struct Claim(Arc<Crowd>);

impl Drop for Claim {
    fn drop(&mut self) {
        self.0.claims.fetch_sub(1, SeqCst);
    }
}

#[cfg(test)]
pub(crate) mod hooks {
    use std::sync::atomic::AtomicUsize;
    use std::sync::Mutex;

    /// The most threads seen in one [`Crowd`](super::Crowd) at once, by any test.
    pub(crate) static MOST: AtomicUsize = AtomicUsize::new(0);
    /// The crowds with a thread inside now, and the most at once, by any test.
    pub(crate) static CROWDED: AtomicUsize = AtomicUsize::new(0);
    pub(crate) static MOST_CROWDED: AtomicUsize = AtomicUsize::new(0);
    /// Held by a test that resets and reads [`MOST`].
    pub(crate) static COUNTING: Mutex<()> = Mutex::new(());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Threads taking and giving back places in one crowd over and over: never more than
    /// [`PER_DIR`] inside, and every give-back wakes a waiter (a lost wake-up hangs here).
    #[test]
    fn a_crowd_holds_at_most_per_dir_and_wakes_its_waiters() {
        let _counting = hooks::COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        hooks::MOST.store(0, SeqCst);
        let (crowds, crowd) = (Crowds::with(16, None), Crowd::default());
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..16 {
                s.spawn(|| {
                    for _ in 0..2000 {
                        let _place = crowds.join(&crowd);
                        std::hint::spin_loop();
                        done.fetch_add(1, SeqCst);
                    }
                });
            }
        });
        assert_eq!(done.load(SeqCst), 16 * 2000);
        assert!((1..=PER_DIR).contains(&hooks::MOST.load(SeqCst)));
        assert_eq!(crowd.inside.load(SeqCst), 0);
        assert_eq!(crowd.waiting.load(SeqCst), 0);
    }

    /// With no more threads than [`PER_DIR`] no place is counted.
    #[test]
    fn few_threads_count_no_places() {
        let (crowds, crowd) = (Crowds::with(PER_DIR, None), Crowd::default());
        let _place = crowds.join(&crowd);
        assert_eq!(crowd.inside.load(SeqCst), 0);
    }

    /// Into ext4 one crowd of [`EXT4`] places holds the creations of every directory.
    #[test]
    fn into_ext4_at_most_ext4_create_anywhere() {
        let _counting = hooks::COUNTING.lock().unwrap_or_else(|e| e.into_inner());
        hooks::MOST.store(0, SeqCst);
        let crowds = Crowds::with(16, Some(EXT4));
        let dirs: Vec<Crowd> = (0..16).map(|_| Crowd::default()).collect();
        std::thread::scope(|s| {
            for dir in &dirs {
                let crowds = &crowds;
                s.spawn(move || {
                    for _ in 0..200 {
                        let _place = crowds.join(dir);
                        std::thread::sleep(std::time::Duration::from_micros(20));
                    }
                });
            }
        });
        assert!((1..=EXT4).contains(&hooks::MOST.load(SeqCst)));
        assert!(dirs.iter().all(|d| d.inside.load(SeqCst) == 0));
    }
}
