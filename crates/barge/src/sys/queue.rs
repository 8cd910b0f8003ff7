//! A byte queue in shared memory from a process to the confined lander child it feeds.
//!
//! A pipe costs, per write, a kernel copy in, page allocations, a kernel copy out and a
//! wake-up on each side. Here the bytes cross with one plain copy on each side, the ring's
//! pages are allocated once, and no system call is made while both ends keep up
//! (docs/BENCHMARKS.md, "Design measurements"). (Written by hand: the crates for queues between processes
//! want a named shared file or bring a framework; this is one ring of bytes and two
//! counters.)
//!
//! The queue is a memfd mapped by both ends: a header with the writer's `head` and the
//! reader's `tail` (bytes published and consumed since the start), then a ring of
//! `capacity` bytes (a power of two). Waits go through a Unix socket pair, the **bell**: a
//! side that finds the queue empty (or full) says what it waits for, looks again, and sleeps
//! in `poll` on its end; the other side, having moved its counter that far, rings (one
//! byte). The bell also carries both ends' lives, as a pipe does: the writer
//! dropping its end is the end of the input (after what is queued), and a reader gone fails
//! the writer with `BrokenPipe`. The memfd crosses the bell once, as `SCM_RIGHTS`.
//!
//! The writer (the unconfined parent) reads nothing of the mapping but `tail`, checked
//! against the ring's bounds, and never reads back the bytes it wrote; the memfd is sealed
//! against resizing, so a reader cannot make the writer's accesses fault.

use std::io::{self, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::fs::{fcntl_add_seals, fstat, ftruncate, memfd_create, MemfdFlags, SealFlags};
use rustix::mm::{mmap, munmap, MapFlags, ProtFlags};
use rustix::net::{
    recv, recvmsg, send, sendmsg, socketpair, AddressFamily, RecvAncillaryBuffer,
    RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
    SocketFlags, SocketType,
};

/// Where the ring starts in the mapping: the header takes a page.
const HEADER: usize = 4096;

/// A counter on a cache line of its own, so that the two ends do not share one.
#[repr(C, align(64))]
struct Line<T>(T);

/// The start of the mapping.
#[repr(C)]
struct Header {
    /// Bytes the writer has published.
    head: Line<AtomicU64>,
    /// Bytes the reader has consumed.
    tail: Line<AtomicU64>,
    /// Set by a reader about to sleep: the `head` at which to ring it (0: it does not wait).
    reader_wants: Line<AtomicU64>,
    /// Set by a writer about to sleep on a full queue.
    writer_waits: Line<AtomicU32>,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);

/// The shared mapping of a queue, unmapped when dropped.
struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; its shared parts are atomics, and each end writes only
// its own part of the ring (what the protocol gives it), from one thread at a time (`&mut`).
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mapping> {
        let prot = ProtFlags::READ | ProtFlags::WRITE;
        // SAFETY: a new mapping of `len` bytes of the memfd, at an address the kernel picks.
        let base = unsafe { mmap(std::ptr::null_mut(), len, prot, MapFlags::SHARED, fd, 0) }?;
        let base = NonNull::new(base.cast()).expect("mmap does not return null");
        Ok(Mapping { base, len })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a page-aligned `Header`, zeroed by the memfd.
        unsafe { self.base.cast::<Header>().as_ref() }
    }

    fn capacity(&self) -> usize {
        self.len - HEADER
    }

    /// Copies `bytes` into the ring at stream position `at` (wrapping around its end).
    fn put(&mut self, at: u64, bytes: &[u8]) {
        let (start, first) = self.span(at, bytes.len());
        // SAFETY: both spans lie within the ring (`span`); the writer owns these bytes until
        // it publishes them.
        unsafe {
            let ring = self.base.as_ptr().add(HEADER);
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), ring.add(start), first);
            std::ptr::copy_nonoverlapping(bytes[first..].as_ptr(), ring, bytes.len() - first);
        }
    }

    /// Copies the ring's bytes at stream position `at` into `buf`.
    fn get(&self, at: u64, buf: &mut [u8]) {
        let (start, first) = self.span(at, buf.len());
        // SAFETY: as in `put`; the writer published these bytes and does not touch them
        // until the reader moves `tail` past them.
        unsafe {
            let ring = self.base.as_ptr().add(HEADER);
            std::ptr::copy_nonoverlapping(ring.add(start), buf.as_mut_ptr(), first);
            let rest = buf.len() - first;
            std::ptr::copy_nonoverlapping(ring, buf[first..].as_mut_ptr(), rest);
        }
    }

    /// Where stream position `at` is in the ring, and how many of `len` bytes fit before
    /// its end (`len` is at most the capacity).
    fn span(&self, at: u64, len: usize) -> (usize, usize) {
        let start = at as usize & (self.capacity() - 1);
        (start, len.min(self.capacity() - start))
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`; nothing borrows it any more.
        let _ = unsafe { munmap(self.base.as_ptr().cast(), self.len) };
    }
}

/// Rings the other end's bell. A full socket means it has a ring pending anyway; a closed one
/// is seen by the next wait.
fn ring(bell: BorrowedFd<'_>) {
    let _ = send(bell, &[1], SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
}

/// Takes the rings waiting on `bell`; false once the other end has closed it.
fn take_rings(bell: BorrowedFd<'_>) -> bool {
    let mut buf = [0u8; 64];
    loop {
        match recv(bell, &mut buf[..], RecvFlags::DONTWAIT) {
            Ok((0, _)) => return false,
            // A stream socket gives what it holds: a short read took every ring.
            Ok((n, _)) if n < buf.len() => return true,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return true,
            Err(_) => return false,
        }
    }
}

/// The memfd the writer sent first on `bell`.
fn receive_memfd(bell: &OwnedFd, stopped: impl Fn() -> bool) -> io::Result<OwnedFd> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let flags = RecvFlags::CMSG_CLOEXEC;
    loop {
        match recvmsg(bell, &mut [IoSliceMut::new(&mut byte)], &mut control, flags) {
            Err(rustix::io::Errno::INTR) if !stopped() => {}
            received => break received.map(drop)?,
        }
    }
    let memfd = control.drain().find_map(|message| match message {
        RecvAncillaryMessage::ScmRights(mut fds) => fds.next(),
        _ => None,
    });
    memfd.ok_or_else(|| io::Error::other("no queue came with the input"))
}

/// The writing end, in the parent: an [`io::Write`] whose bytes the child's archive reads.
/// Dropping it ends the input.
pub struct QueueWriter {
    map: Mapping,
    bell: OwnedFd,
    /// Bytes published so far.
    head: u64,
}

impl std::fmt::Debug for QueueWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueWriter")
            .field("capacity", &self.map.capacity())
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl QueueWriter {
    /// A queue of `capacity` bytes (a power of two), and the reader's end of its bell, for
    /// the child (as its stdin), which takes the queue with [`QueueReader::open`].
    pub(crate) fn new(capacity: usize) -> io::Result<(QueueWriter, OwnedFd)> {
        assert!(capacity.is_power_of_two());
        let memfd = memfd_create(
            "barge-queue",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )?;
        ftruncate(&memfd, (HEADER + capacity) as u64)?;
        let seals = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
        fcntl_add_seals(&memfd, seals)?;
        let map = Mapping::new(memfd.as_fd(), HEADER + capacity)?;
        let flags = SocketFlags::CLOEXEC;
        let (bell, theirs) = socketpair(AddressFamily::UNIX, SocketType::STREAM, flags, None)?;
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        let fds = [memfd.as_fd()];
        control.push(SendAncillaryMessage::ScmRights(&fds));
        sendmsg(
            &bell,
            &[IoSlice::new(&[0])],
            &mut control,
            SendFlags::NOSIGNAL,
        )?;
        let writer = QueueWriter { map, bell, head: 0 };
        Ok((writer, theirs))
    }

    /// Bytes the ring can take now. A `tail` out of bounds is a reader that broke the
    /// protocol: the writer stops as if it had gone.
    fn room(&self) -> io::Result<usize> {
        let used = self
            .head
            .wrapping_sub(self.map.header().tail.0.load(SeqCst));
        let capacity = self.map.capacity();
        match usize::try_from(used) {
            Ok(used) if used <= capacity => Ok(capacity - used),
            _ => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the confined lander broke the queue's protocol",
            )),
        }
    }

    /// Sleeps until the reader rings; `BrokenPipe` when it has gone. As a write into a full
    /// pipe, it waits for the reader whatever signal comes: the caller stops the reader.
    fn sleep(&self) -> io::Result<()> {
        let mut fds = [PollFd::new(&self.bell, PollFlags::IN)];
        rustix::io::retry_on_intr(|| poll(&mut fds, None))?;
        match take_rings(self.bell.as_fd()) {
            true => Ok(()),
            false => Err(io::ErrorKind::BrokenPipe.into()),
        }
    }
}

impl Write for QueueWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        if bytes.is_empty() {
            return Ok(0);
        }
        loop {
            let room = self.room()?;
            if room > 0 {
                let n = room.min(bytes.len());
                self.map.put(self.head, &bytes[..n]);
                self.head += n as u64;
                let header = self.map.header();
                header.head.0.store(self.head, SeqCst);
                let wants = header.reader_wants.0.load(SeqCst);
                if wants != 0
                    && self.head >= wants
                    && (header.reader_wants.0)
                        .compare_exchange(wants, 0, SeqCst, SeqCst)
                        .is_ok()
                {
                    ring(self.bell.as_fd());
                }
                return Ok(n);
            }
            self.map.header().writer_waits.0.store(1, SeqCst);
            if self.room()? == 0 {
                self.sleep()?;
            }
        }
    }

    /// Published bytes are the reader's at once: nothing to flush.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The reading end, in the child: the archive's source.
pub(crate) struct QueueReader {
    map: Mapping,
    bell: OwnedFd,
    /// Bytes consumed so far.
    tail: u64,
    /// The writer has closed its end: what is queued is the rest.
    ended: std::cell::Cell<bool>,
}

/// The queue's writer broke its protocol (published more than the ring holds).
#[derive(Debug)]
pub(crate) struct Broken;

impl QueueReader {
    /// Takes the queue whose memfd the writer sent on `bell`; the wait for it ends on a
    /// signal once `stopped` says so.
    pub(crate) fn open(bell: OwnedFd, stopped: impl Fn() -> bool) -> io::Result<QueueReader> {
        let memfd = receive_memfd(&bell, stopped)?;
        let len = usize::try_from(fstat(&memfd)?.st_size).unwrap_or(0);
        if len <= HEADER || !(len - HEADER).is_power_of_two() {
            return Err(io::Error::other(format!("a queue of {len} bytes")));
        }
        let map = Mapping::new(memfd.as_fd(), len)?;
        Ok(QueueReader {
            map,
            bell,
            tail: 0,
            ended: Default::default(),
        })
    }

    /// Bytes published and not consumed yet.
    fn queued(&self) -> Result<usize, Broken> {
        let queued = self
            .map
            .header()
            .head
            .0
            .load(SeqCst)
            .wrapping_sub(self.tail);
        match usize::try_from(queued) {
            Ok(queued) if queued <= self.map.capacity() => Ok(queued),
            _ => Err(Broken),
        }
    }
}

impl QueueReader {
    /// Moves up to `buf.len()` queued bytes into `buf`: `Some(n)`, with `Some(0)` at the
    /// end (the writer closed its end and everything was read), `None` while nothing is
    /// queued.
    pub(crate) fn take(&mut self, buf: &mut [u8]) -> Result<Option<usize>, Broken> {
        let queued = self.queued()?;
        if queued > 0 {
            let n = queued.min(buf.len());
            self.map.get(self.tail, &mut buf[..n]);
            self.tail += n as u64;
            let header = self.map.header();
            header.tail.0.store(self.tail, SeqCst);
            if header.writer_waits.0.swap(0, SeqCst) != 0 {
                ring(self.bell.as_fd());
            }
            return Ok(Some(n));
        }
        Ok(self.ended.get().then_some(0))
    }

    /// Waits until [`QueueReader::take`] has something to return or `patience` has passed
    /// (then false), through `wait_readable` (a wait for the bell, which may give up on a
    /// stop). With patience, the reader has bytes to work on meanwhile (the threaded
    /// engine's segment), so it is woken only once half the ring is queued, or at the end,
    /// or after the patience: fewer wake-ups than one per message.
    pub(crate) fn wait_with<E: From<Broken>>(
        &self,
        patience: Option<Duration>,
        wait_readable: impl FnOnce(BorrowedFd<'_>, Option<Duration>) -> Result<bool, E>,
    ) -> Result<bool, E> {
        let wanted = match patience {
            Some(_) => self.map.capacity() / 2,
            None => 1,
        };
        if self.ended.get() || self.queued()? >= wanted {
            return Ok(true);
        }
        let header = self.map.header();
        header
            .reader_wants
            .0
            .store(self.tail + wanted as u64, SeqCst);
        if self.queued()? >= wanted {
            header.reader_wants.0.store(0, SeqCst);
            return Ok(true);
        }
        let rung = wait_readable(self.bell.as_fd(), patience)?;
        header.reader_wants.0.store(0, SeqCst);
        if rung && !take_rings(self.bell.as_fd()) {
            self.ended.set(true);
        }
        Ok(rung || self.queued()? > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interrupt::Cancel;
    use crate::source::ByteSource;

    /// Writes `data` from another thread in pieces of `piece` bytes, reading it back through
    /// a queue of `capacity` bytes with reads of `read` bytes.
    fn round_trip(data: &[u8], capacity: usize, piece: usize, read: usize) -> Vec<u8> {
        let (mut writer, bell) = QueueWriter::new(capacity).unwrap();
        let mut reader = QueueReader::open(bell, || false).unwrap();
        std::thread::scope(|s| {
            s.spawn(move || {
                for part in data.chunks(piece) {
                    writer.write_all(part).unwrap();
                }
            });
            let mut out = Vec::new();
            let mut buf = vec![0; read];
            loop {
                match reader
                    .read(&mut buf, out.len() as u64, &Cancel::new())
                    .unwrap()
                {
                    0 => break out,
                    n => out.extend_from_slice(&buf[..n]),
                }
            }
        })
    }

    #[test]
    fn bytes_cross_in_order_through_a_ring_smaller_than_they_are() {
        let data: Vec<u8> = (0..300_007u32).map(|i| (i ^ (i >> 8)) as u8).collect();
        for (capacity, piece, read) in [(4096, 1000, 777), (4096, 5000, 4096), (1 << 16, 65535, 3)]
        {
            let got = round_trip(&data, capacity, piece, read);
            assert!(
                got == data,
                "capacity {capacity}, pieces {piece}, reads {read}"
            );
        }
    }

    #[test]
    fn a_writer_gone_is_the_end_after_what_it_queued() {
        let (mut writer, bell) = QueueWriter::new(4096).unwrap();
        let mut reader = QueueReader::open(bell, || false).unwrap();
        writer.write_all(b"last words").unwrap();
        drop(writer);
        let mut buf = [0; 64];
        assert_eq!(reader.read(&mut buf, 0, &Cancel::new()).unwrap(), 10);
        assert_eq!(&buf[..10], b"last words");
        assert_eq!(reader.read(&mut buf, 10, &Cancel::new()).unwrap(), 0);
        assert!(reader.wait(Some(Duration::ZERO), &Cancel::new()).unwrap());
    }

    #[test]
    fn a_reader_gone_fails_a_writer_that_waits_for_room() {
        let (mut writer, bell) = QueueWriter::new(4096).unwrap();
        let reader = QueueReader::open(bell, || false).unwrap();
        writer.write_all(&[1; 4096]).unwrap();
        drop(reader);
        let e = writer.write_all(b"more").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_reader_waits_with_patience_and_sees_bytes_that_come() {
        let (mut writer, bell) = QueueWriter::new(4096).unwrap();
        let reader = QueueReader::open(bell, || false).unwrap();
        assert!(!reader
            .wait(Some(Duration::from_millis(20)), &Cancel::new())
            .unwrap());
        writer.write_all(b"x").unwrap();
        assert!(reader
            .wait(Some(Duration::from_millis(20)), &Cancel::new())
            .unwrap());
    }

    #[test]
    fn a_patient_reader_is_woken_by_half_the_ring_not_by_less() {
        let (mut writer, bell) = QueueWriter::new(4096).unwrap();
        let reader = QueueReader::open(bell, || false).unwrap();
        writer.write_all(&[1; 100]).unwrap();
        let start = std::time::Instant::now();
        assert!(reader
            .wait(Some(Duration::from_millis(200)), &Cancel::new())
            .unwrap());
        assert!(
            start.elapsed() >= Duration::from_millis(200),
            "woken for 100 bytes"
        );
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                writer.write_all(&[2; 1948]).unwrap();
            });
            let start = std::time::Instant::now();
            assert!(reader
                .wait(Some(Duration::from_secs(20)), &Cancel::new())
                .unwrap());
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "not woken by 2048 bytes"
            );
        });
    }

    #[test]
    fn a_tail_out_of_bounds_stops_the_writer() {
        let (mut writer, bell) = QueueWriter::new(4096).unwrap();
        let reader = QueueReader::open(bell, || false).unwrap();
        reader.map.header().tail.0.store(1 << 40, SeqCst);
        let e = writer.write(b"x").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn the_memfd_cannot_be_resized_by_the_reader() {
        let (_writer, bell) = QueueWriter::new(4096).unwrap();
        let memfd = receive_memfd(&bell, || false).unwrap();
        assert_eq!(ftruncate(&memfd, 0), Err(rustix::io::Errno::PERM));
        assert_eq!(ftruncate(&memfd, 1 << 30), Err(rustix::io::Errno::PERM));
    }
}
