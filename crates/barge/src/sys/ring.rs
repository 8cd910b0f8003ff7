//! io_uring: [`Ring`], a ring that runs batches of requests to completion (the uring
//! lander's file creation, pack's batched reads). Requests borrow what they point to for
//! the batch ([`Op`]), so their callers need no `unsafe`.

use std::ffi::CStr;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, BorrowedFd};

use io_uring::squeue::Flags;
use io_uring::types::{DestinationSlot, Fd, Fixed};
use io_uring::{opcode, squeue, IoUring};
use rustix::fs::OFlags;
use rustix::io::Errno;

/// One request of a batch; what it names is borrowed until the batch completed.
pub(crate) enum Op<'a> {
    /// `openat(dir, path, flags, mode)` into the fixed-file slot `slot` (no fd).
    OpenAt {
        dir: BorrowedFd<'a>,
        path: &'a CStr,
        flags: OFlags,
        mode: u32,
        slot: u32,
    },
    /// Writes `data` to the fixed file `slot` at `offset`.
    Write {
        slot: u32,
        data: &'a [u8],
        offset: u64,
    },
    /// Closes the fixed file `slot`.
    Close { slot: u32 },
    /// `symlinkat(target, dir, path)`.
    SymlinkAt {
        target: &'a CStr,
        dir: BorrowedFd<'a>,
        path: &'a CStr,
    },
    /// `linkat(from_dir, from, dir, path)`.
    LinkAt {
        from_dir: BorrowedFd<'a>,
        from: &'a CStr,
        dir: BorrowedFd<'a>,
        path: &'a CStr,
    },
}

impl Op<'_> {
    /// The request; `linked`: the next one runs only if this one succeeds.
    fn entry(&self, linked: bool) -> squeue::Entry {
        let fd = |dir: &BorrowedFd<'_>| Fd(dir.as_raw_fd());
        let entry = match self {
            Op::OpenAt {
                dir,
                path,
                flags,
                mode,
                slot,
            } => {
                let target = DestinationSlot::try_from_slot_target(*slot).expect("small");
                // A slot is no fd: O_CLOEXEC means nothing there and is refused.
                opcode::OpenAt::new(fd(dir), path.as_ptr())
                    .flags(flags.difference(OFlags::CLOEXEC).bits() as i32)
                    .mode(*mode)
                    .file_index(Some(target))
                    .build()
            }
            Op::Write { slot, data, offset } => {
                opcode::Write::new(Fixed(*slot), data.as_ptr(), data.len() as u32)
                    .offset(*offset)
                    .build()
            }
            Op::Close { slot } => opcode::Close::new(Fixed(*slot)).build(),
            Op::SymlinkAt { target, dir, path } => {
                opcode::SymlinkAt::new(fd(dir), target.as_ptr(), path.as_ptr()).build()
            }
            Op::LinkAt {
                from_dir,
                from,
                dir,
                path,
            } => opcode::LinkAt::new(fd(from_dir), from.as_ptr(), fd(dir), path.as_ptr()).build(),
        };
        match linked {
            true => entry.flags(Flags::IO_HARDLINK),
            false => entry,
        }
    }
}

/// A file for [`Ring::read_files`]: `name` in the directory, `size` bytes expected, its
/// bytes to go after `prefix`.
pub(crate) struct ToRead<'a> {
    pub(crate) name: &'a CStr,
    pub(crate) size: u64,
    pub(crate) prefix: &'a [u8],
}

/// How a [`Ring::read_files`] file went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Read {
    /// Its prefix and exactly `size` bytes were appended.
    Whole,
    /// It could not be opened; nothing was appended.
    Unopened(Errno),
    /// Reading it failed; nothing was appended.
    Failed(Errno),
    /// It had another size (this many bytes, or more: the size + 1); nothing appended.
    Changed(u64),
}

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

    /// Runs `ops` (each with whether the next one runs only if it succeeds) as one batch
    /// and returns their results, in order: what the call returned, or `-errno`.
    pub(crate) fn submit(&mut self, ops: &[(Op<'_>, bool)]) -> rustix::io::Result<&[i32]> {
        for (i, (op, linked)) in ops.iter().enumerate() {
            // SAFETY: what `op` points to is borrowed for this call, which returns once the
            // batch completed.
            unsafe { self.push(&op.entry(*linked).user_data(i as u64)) };
        }
        self.run()
    }

    /// Appends to `out`, for each of `files` in `dir`, its prefix and its bytes, read
    /// (exactly `size`, then one more to see that it did not grow) as one batch: per file
    /// an open into a fixed slot, a read, the probe and a close, linked. Files that were
    /// not read whole are left out, the later ones moved down over their place; with
    /// `keep`, they keep their place instead, as zeros after their prefix.
    pub(crate) fn read_files(
        &mut self,
        dir: BorrowedFd<'_>,
        files: &[ToRead<'_>],
        out: &mut Vec<u8>,
        keep: bool,
    ) -> rustix::io::Result<Vec<Read>> {
        let total: usize = files.iter().map(|f| f.prefix.len() + f.size as usize).sum();
        out.reserve(total);
        let start = out.len();
        let spare = &mut out.spare_capacity_mut()[..total];
        let mut probes = vec![0u8; files.len()];
        let mut spans = Vec::with_capacity(files.len());
        let mut at = 0;
        for (k, (f, probe)) in files.iter().zip(probes.chunks_mut(1)).enumerate() {
            for (to, from) in spare[at..].iter_mut().zip(f.prefix) {
                to.write(*from);
            }
            spans.push((at, f.prefix.len() + f.size as usize));
            at += f.prefix.len();
            let slot = k as u32;
            let into = &mut spare[at..at + f.size as usize];
            let open = Op::OpenAt {
                dir,
                path: f.name,
                flags: super::FILE_FLAGS,
                mode: 0,
                slot,
            };
            let ud = 4 * k as u64;
            let entries = [
                open.entry(true).user_data(ud),
                read_into(slot, into, 0)
                    .flags(Flags::IO_HARDLINK)
                    .user_data(ud + 1),
                opcode::Read::new(Fixed(slot), probe.as_mut_ptr(), 1)
                    .offset(f.size)
                    .build()
                    .flags(Flags::IO_HARDLINK)
                    .user_data(ud + 2),
                opcode::Close::new(Fixed(slot)).build().user_data(ud + 3),
            ];
            for entry in &entries {
                // SAFETY: the names, `probes` and `out`'s reserved bytes outlive the run
                // below, and nothing else touches them meanwhile.
                unsafe { self.push(entry) };
            }
            at += f.size as usize;
        }
        let results = self.run()?;
        let mut kept = 0;
        let mut reads = Vec::with_capacity(files.len());
        for (k, (f, &(from, len))) in files.iter().zip(&spans).enumerate() {
            let result = |j: usize| match results[4 * k + j] {
                r if r < 0 => Err(Errno::from_raw_os_error(-r)),
                r => Ok(r as u64),
            };
            let read = match (result(0), result(1), result(2)) {
                (Err(e), ..) => Read::Unopened(e),
                (_, Err(e), _) | (_, _, Err(e)) => Read::Failed(e),
                (_, Ok(got), Ok(more)) if got != f.size || more != 0 => Read::Changed(got + more),
                _ => Read::Whole,
            };
            if read == Read::Whole {
                // Only after a file left out: musl's `memmove` copies even onto itself,
                // backwards and slowly.
                if from != kept {
                    spare.copy_within(from..from + len, kept);
                }
                kept += len;
            } else if keep {
                // Nothing moved yet: `kept` is `from`.
                for byte in &mut spare[from + f.prefix.len()..from + len] {
                    byte.write(0);
                }
                kept += len;
            }
            reads.push(read);
        }
        // SAFETY: every byte up to `kept` was moved there from a prefix or from file data
        // the kernel read (exactly its size), or zeroed.
        unsafe { out.set_len(start + kept) };
        Ok(reads)
    }

    /// Queues `entry`, whose result will be `results()[user_data]`.
    ///
    /// # Safety
    /// Every buffer and path `entry` points to must stay valid until [`Ring::run`] returns.
    unsafe fn push(&mut self, entry: &squeue::Entry) {
        assert!(self.queued < self.capacity(), "batch larger than the ring");
        // SAFETY: the caller keeps what `entry` points to alive until `run` returns, and the
        // queue has room: at most `capacity` requests are queued between two runs.
        unsafe { self.ring.submission().push(entry) }.expect("room checked above");
        self.queued += 1;
    }

    /// Submits what was queued and waits until every request completed.
    fn run(&mut self) -> rustix::io::Result<&[i32]> {
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

/// A read of the fixed file `slot` at `offset` into `into`.
fn read_into(slot: u32, into: &mut [MaybeUninit<u8>], offset: u64) -> squeue::Entry {
    opcode::Read::new(Fixed(slot), into.as_mut_ptr().cast(), into.len() as u32)
        .offset(offset)
        .build()
}
