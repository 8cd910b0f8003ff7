//! How many worker threads each kind of work gets unless told otherwise: the one place that
//! decides.

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
