//! `pack`: walk a directory and encode it. Small files are read straight into the output
//! buffer (one large `write` for many files). A writer thread does the writing, in order,
//! while the calling thread walks and reads the next files. A large file goes from file to
//! output by `sendfile` of exactly its `fstat` size on the writer thread, unless the writer
//! is behind ([`WRITER_BEHIND`] items queued): then the walking thread reads it into the
//! output buffers, so each thread copies the data once instead of the writer twice (on
//! tmpfs, `sendfile` copies into the pipe and again into the file). On the linux tree that
//! keeps both threads busy: 593 ms against 620 ms with `sendfile` only.
//!
//! With io_uring, the files of a directory are taken in runs of up to [`RING_FILES`]: each
//! is `statx`ed (a plain call: the ring runs `statx` on io-wq threads at a higher CPU cost),
//! then one `io_uring_enter` opens each small file into a fixed-file slot, reads it into its
//! place in the output buffer, checks it did not grow and closes the slot, so no fd and no
//! `close` system call per file: about one system call per file in all. Without io_uring
//! the walker opens each file and it is read with `read`.

use std::ffi::CStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use io_uring::{opcode, squeue::Flags, types};
use rustix::fs::{
    fstat, openat, sendfile, statx, AtFlags, FileType, Mode, OFlags, Stat, StatxFlags,
};
use rustix::io::{fcntl_dupfd_cloexec, read, write, Errno};

use crate::error::{Error, Result, TreePath};
use crate::format::encode::{push_dir, push_end, push_file_header, push_pop};
use crate::format::HEADER;
use crate::interrupt::{check, retry};
use crate::land::uring::Ring;
use crate::solo::spawn_elsewhere;
use crate::walk::{walk, Location, Visitor, FILE_FLAGS};
use crate::Progress;

/// Files read per ring batch (four requests each).
const RING_FILES: usize = 64;

/// Files up to this size are copied into the output buffer; larger ones are sent by `sendfile`.
const INLINE_MAX: u64 = 64 * 1024;
/// The output buffer is handed to the writer thread when it holds this much.
const FLUSH_AT: usize = 1 << 20;
/// Capacity of an output buffer: a flush, one more small file and its header.
const BUFFER: usize = FLUSH_AT + INLINE_MAX as usize + 512;
/// Output buffers or large files queued for the writer thread, at most.
const BUFFERS: usize = 8;
/// A large file is read into the output buffers by the walking thread instead of sent by
/// the writer thread when this many items wait for the writer already (it is behind).
const WRITER_BEHIND: usize = BUFFERS / 2;

/// What a pack did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PackSummary {
    /// Directories packed (the root not included).
    pub dirs: u64,
    /// Regular files packed.
    pub files: u64,
    /// Bytes of file content.
    pub bytes: u64,
    /// Bytes of archive written.
    pub archive_bytes: u64,
    /// Entries skipped because they are not dirs or regular files, with their kind (how
    /// many, in a serialized summary).
    #[serde(serialize_with = "count")]
    pub skipped: Vec<(TreePath, &'static str)>,
}

fn count<S: serde::Serializer, T>(items: &[T], to: S) -> std::result::Result<S::Ok, S::Error> {
    to.serialize_u64(items.len() as u64)
}

/// Packs the tree below the directory `root` into `out` (a file, pipe or socket). The
/// archive never packs itself: a file with the device and inode of `out` (when a regular
/// file) or `replaced` (the file the archive is to replace) is left out without a word.
pub fn pack(
    root: OwnedFd,
    out: BorrowedFd<'_>,
    replaced: Option<(u64, u64)>,
    progress: &Progress,
) -> Result<PackSummary> {
    let out_stat =
        fstat(out).map_err(|e| Error::io("fstat", TreePath(b"<archive>".to_vec()), e))?;
    let archive = (FileType::from_raw_mode(out_stat.st_mode) == FileType::RegularFile)
        .then_some((out_stat.st_dev, out_stat.st_ino));
    let (tx, rx) = sync_channel(BUFFERS);
    let (spare_tx, spare) = sync_channel(BUFFERS);
    let queued = AtomicUsize::new(0);
    let mut packer = Packer {
        tx,
        queued: &queued,
        spare,
        itself: [archive, replaced],
        buf: Vec::with_capacity(BUFFER),
        summary: PackSummary::default(),
        progress,
        ring: Ring::new(4 * RING_FILES as u32, RING_FILES as u32).ok(),
        run: Run::default(),
    };
    std::thread::scope(|scope| {
        let queued = &queued;
        let written = spawn_elsewhere(scope, move || writer(out, rx, spare_tx, queued, progress));
        let packed = packer.pack(root);
        drop(packer.tx);
        written.join().expect("the writer does not panic")?;
        packed.map(|()| packer.summary)
    })
}

impl Packer<'_> {
    fn pack(&mut self, root: OwnedFd) -> Result<()> {
        self.buf.extend_from_slice(&HEADER);
        walk(root, self)?;
        self.end_run()?;
        let entries = self.summary.dirs + self.summary.files;
        push_end(&mut self.buf, entries);
        self.flush()
    }
}

struct Packer<'a> {
    /// To the writer thread.
    tx: SyncSender<Out>,
    /// Items sent to the writer thread and not written yet.
    queued: &'a AtomicUsize,
    /// Emptied buffers coming back from the writer thread.
    spare: Receiver<Vec<u8>>,
    /// Device and inode of the archive being written and of the file it replaces.
    itself: [Option<(u64, u64)>; 2],
    buf: Vec<u8>,
    summary: PackSummary,
    progress: &'a Progress,
    ring: Option<Ring>,
    run: Run,
}

/// Files of one directory waiting to be read through the ring, in archive order.
#[derive(Default)]
struct Run {
    /// A duplicate of the directory's fd (the walker may close its own before the run ends).
    dir: Option<OwnedFd>,
    /// The directory's path, for messages.
    path: Vec<u8>,
    /// The names, each followed by a NUL.
    names: Vec<u8>,
    /// Where each name starts in `names`.
    starts: Vec<usize>,
}

impl Run {
    fn name(&self, i: usize) -> &[u8] {
        let end = self.starts.get(i + 1).map_or(self.names.len(), |&e| e) - 1;
        &self.names[self.starts[i]..end]
    }

    fn path(&self, i: usize) -> TreePath {
        TreePath::join([&self.path[..]], self.name(i))
    }
}

/// What `statx` says of a listed file.
#[derive(Clone, Copy)]
struct Meta {
    mode: u32,
    size: u64,
}

impl Packer<'_> {
    /// Hands the buffer to the writer thread and continues in a spare one (unless a stop
    /// was requested).
    fn flush(&mut self) -> Result<()> {
        check()?;
        if self.buf.is_empty() {
            return Ok(());
        }
        let spare = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(BUFFER));
        let full = std::mem::replace(&mut self.buf, spare);
        self.summary.archive_bytes += full.len() as u64;
        self.queued.fetch_add(1, Relaxed);
        self.tx.send(Out::Bytes(full)).map_err(|_| writer_gone())
    }

    /// Reads at most `max` bytes of `file` onto the end of the buffer, which has room for
    /// them; returns how many (0 at end of file).
    fn read_more(&mut self, file: BorrowedFd<'_>, max: usize) -> rustix::io::Result<usize> {
        let spare = &mut self.buf.spare_capacity_mut()[..max];
        let n = retry(|| read(file, &mut *spare).map(|(filled, _)| filled.len()))?;
        // SAFETY: `read` initialized the first `n` spare bytes.
        unsafe { self.buf.set_len(self.buf.len() + n) };
        Ok(n)
    }

    /// Appends exactly `size` bytes of `file` to the buffer, failing if the file is shorter
    /// or longer than that. Reads one byte more than expected, so that growth shows in the
    /// same `read` that normally ends the file.
    fn read_inline(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &impl Fn() -> TreePath,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        let size = size as usize;
        let start = self.buf.len();
        self.buf.reserve(size + 1);
        loop {
            let wanted = size + 1 - (self.buf.len() - start);
            let n = self
                .read_more(file, wanted)
                .map_err(|e| Error::io("read", path(), e))?;
            let got = self.buf.len() - start;
            // Stop at end of file, at growth, or at a short read ending at the size.
            if n == 0 || got > size || (got == size && n < wanted) {
                break;
            }
        }
        let actual = (self.buf.len() - start) as u64;
        if actual == size as u64 {
            return Ok(());
        }
        Err(Error::Changed {
            path: path(),
            expected: size as u64,
            actual,
        })
    }

    /// Appends exactly `size` bytes of the large `file` in buffer-sized reads, handing each
    /// full buffer to the writer, then checks with a one-byte read that it did not grow.
    fn read_large(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &impl Fn() -> TreePath,
    ) -> Result<()> {
        let changed = |actual| Error::Changed {
            path: path(),
            expected: size,
            actual,
        };
        let mut copied = 0u64;
        while copied < size {
            if self.buf.len() >= FLUSH_AT {
                self.flush()?;
            }
            let room = self.buf.capacity() - self.buf.len();
            let wanted = room.min((size - copied) as usize);
            match self.read_more(file, wanted) {
                Ok(0) => return Err(changed(copied)),
                Ok(n) => copied += n as u64,
                Err(e) => return Err(Error::io("read", path(), e)),
            }
        }
        let mut probe = [0u8; 1];
        match retry(|| read(file, &mut probe)) {
            Ok(0) => Ok(()),
            Ok(_) => Err(changed(size + 1)),
            Err(e) => Err(Error::io("read", path(), e)),
        }
    }

    /// Has the writer thread send the large file `file` of `size` bytes after what was
    /// buffered.
    fn send(&mut self, file: OwnedFd, size: u64, path: TreePath) -> Result<()> {
        self.flush()?;
        self.summary.archive_bytes += size;
        self.queued.fetch_add(1, Relaxed);
        self.tx
            .send(Out::File(file, size, path))
            .map_err(|_| writer_gone())
    }
}

/// The error a send to a writer thread that stopped gets; the writer's own error replaces it.
fn writer_gone() -> Error {
    Error::io("write archive", TreePath::default(), Errno::PIPE)
}

/// What the writer thread puts into the archive, in order.
enum Out {
    /// Encoded messages and small files.
    Bytes(Vec<u8>),
    /// A large file, sent by `sendfile`, of exactly this size.
    File(OwnedFd, u64, TreePath),
}

/// Writes what arrives on `rx` to `out`, returning emptied buffers on `spare`, counting
/// down `queued` after each item and the bytes written in `progress`.
fn writer(
    out: BorrowedFd<'_>,
    rx: Receiver<Out>,
    spare: SyncSender<Vec<u8>>,
    queued: &AtomicUsize,
    progress: &Progress,
) -> Result<()> {
    for item in rx {
        match item {
            Out::Bytes(mut buf) => {
                write_all(out, &buf, progress)?;
                buf.clear();
                let _ = spare.try_send(buf);
            }
            Out::File(file, size, path) => send_file(out, file.as_fd(), size, &path, progress)?,
        }
        queued.fetch_sub(1, Relaxed);
    }
    Ok(())
}

fn write_all(out: BorrowedFd<'_>, mut rest: &[u8], progress: &Progress) -> Result<()> {
    while !rest.is_empty() {
        match retry(|| write(out, rest)) {
            Ok(n) => {
                rest = &rest[n..];
                progress.add_written(n as u64);
            }
            Err(e) => return Err(Error::io("write archive", TreePath::default(), e)),
        }
    }
    Ok(())
}

/// Sends exactly `size` bytes of `file` to `out`, then checks it did not grow.
fn send_file(
    out: BorrowedFd<'_>,
    file: BorrowedFd<'_>,
    size: u64,
    path: &TreePath,
    progress: &Progress,
) -> Result<()> {
    let changed = |actual| Error::Changed {
        path: path.clone(),
        expected: size,
        actual,
    };
    let mut offset = 0u64;
    while offset < size {
        let chunk = (size - offset).min(1 << 30) as usize;
        match retry(|| sendfile(out, file, Some(&mut offset), chunk)) {
            Ok(0) => return Err(changed(offset)),
            Ok(n) => {
                progress.add_written(n as u64);
                check()?;
            }
            Err(e) => return Err(Error::io("sendfile", path.clone(), e)),
        }
    }
    let now = fstat(file).map_err(|e| Error::io("fstat", path.clone(), e))?;
    if now.st_size as u64 != size {
        return Err(changed(now.st_size as u64));
    }
    Ok(())
}

impl Packer<'_> {
    /// Packs one opened regular file.
    fn pack_file(
        &mut self,
        name: &[u8],
        file: OwnedFd,
        stat: &Stat,
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        if self.is_itself(stat.st_dev, stat.st_ino) {
            return Ok(());
        }
        let size = stat.st_size as u64;
        push_file_header(&mut self.buf, name, stat.st_mode, size);
        if size <= INLINE_MAX {
            self.read_inline(file.as_fd(), size, &path)?;
            if self.buf.len() >= FLUSH_AT {
                self.flush()?;
            }
        } else if self.queued.load(Relaxed) >= WRITER_BEHIND {
            // `sendfile` would copy twice on the writer thread, which is behind already;
            // reading here copies once on each thread.
            self.read_large(file.as_fd(), size, &path)?;
        } else {
            self.send(file, size, path())?;
        }
        self.counted(size);
        Ok(())
    }

    /// True for the archive being written and the file it replaces.
    fn is_itself(&self, dev: u64, ino: u64) -> bool {
        self.itself.contains(&Some((dev, ino)))
    }

    fn counted(&mut self, size: u64) {
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.add_entry(size);
    }

    /// Packs the files of the run and forgets its directory.
    fn end_run(&mut self) -> Result<()> {
        if let Some(dir) = self.run.dir.take() {
            self.drain(dir.as_fd())?;
        }
        Ok(())
    }

    /// Packs the files of the run, in the directory `dir`, in order: each is `statx`ed,
    /// each stretch of small files is read with one ring batch, larger files are opened and
    /// sent one by one.
    fn drain(&mut self, dir: BorrowedFd<'_>) -> Result<()> {
        let n = self.run.starts.len();
        let mut small: Vec<(usize, Meta)> = Vec::with_capacity(n);
        for i in 0..n {
            let end = self
                .run
                .starts
                .get(i + 1)
                .map_or(self.run.names.len(), |&e| e);
            let name = CStr::from_bytes_with_nul(&self.run.names[self.run.starts[i]..end])
                .expect("names are stored with their NUL");
            let mask = StatxFlags::TYPE | StatxFlags::MODE | StatxFlags::SIZE | StatxFlags::INO;
            let st = statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, mask)
                .map_err(|e| Error::io("statx", self.run.path(i), e))?;
            let kind = FileType::from_raw_mode(u32::from(st.stx_mode));
            let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
            if kind != FileType::RegularFile {
                self.skip(self.run.path(i), crate::walk::kind_name(kind));
            } else if self.is_itself(dev, st.stx_ino) {
                // The archive itself: left out without a word.
            } else if st.stx_size <= INLINE_MAX {
                let meta = Meta {
                    mode: u32::from(st.stx_mode),
                    size: st.stx_size,
                };
                small.push((i, meta));
            } else {
                self.read_ring(dir, &small)?;
                small.clear();
                self.open_and_pack(dir, i)?;
            }
        }
        self.read_ring(dir, &small)?;
        self.run.names.clear();
        self.run.starts.clear();
        Ok(())
    }

    /// Opens file `i` of the run with a plain `openat` and packs it.
    fn open_and_pack(&mut self, dir: BorrowedFd<'_>, i: usize) -> Result<()> {
        let name = self.run.name(i).to_vec();
        let file = openat(dir, &name[..], FILE_FLAGS, Mode::empty())
            .map_err(|e| Error::io("open", self.run.path(i), e))?;
        let stat = fstat(&file).map_err(|e| Error::io("fstat", self.run.path(i), e))?;
        let kind = FileType::from_raw_mode(stat.st_mode);
        if kind != FileType::RegularFile {
            self.skip(self.run.path(i), crate::walk::kind_name(kind));
            return Ok(());
        }
        let path = self.run.path(i);
        self.pack_file(&name, file, &stat, || path.clone())
    }

    /// Appends the small files `files` of the run (index, statx) with one ring batch: each
    /// is opened into slot k, read into its place after its header, probed for growth with
    /// a one-byte read at its size, and closed. (One read of size + 1 would come up short,
    /// and io_uring finishes a short read of a regular file on an io-wq thread: linux pack
    /// 887 against 702 ms.)
    fn read_ring(&mut self, dir: BorrowedFd<'_>, files: &[(usize, Meta)]) -> Result<()> {
        let Some(ring) = self.ring.as_mut().filter(|_| !files.is_empty()) else {
            return Ok(());
        };
        let dir = types::Fd(dir.as_raw_fd());
        let total: usize = files
            .iter()
            .map(|&(i, m)| self.run.name(i).len() + 16 + m.size as usize)
            .sum();
        self.buf.reserve(total);
        let start = self.buf.len();
        let base = self.buf.as_mut_ptr();
        let mut header = Vec::with_capacity(512);
        let mut probes = vec![0u8; files.len()];
        let mut at = start;
        let link = Flags::IO_HARDLINK;
        for (k, &(i, meta)) in files.iter().enumerate() {
            header.clear();
            push_file_header(&mut header, self.run.name(i), meta.mode, meta.size);
            // SAFETY: `total` bytes were reserved past `start`; nothing reallocates `buf`
            // before `set_len` below.
            unsafe { std::ptr::copy_nonoverlapping(header.as_ptr(), base.add(at), header.len()) };
            at += header.len();
            let slot = types::Fixed(k as u32);
            let target = types::DestinationSlot::try_from_slot_target(k as u32).expect("small");
            let name = self.run.names[self.run.starts[i]..].as_ptr().cast();
            // A fixed-file slot is no fd: O_CLOEXEC is meaningless there and refused.
            let flags = FILE_FLAGS.difference(OFlags::CLOEXEC).bits() as i32;
            let ud = 4 * k as u64;
            let entries = [
                opcode::OpenAt::new(dir, name)
                    .flags(flags)
                    .file_index(Some(target))
                    .build()
                    .flags(link)
                    .user_data(ud),
                // SAFETY (pointer): `size` reserved bytes at `at`.
                opcode::Read::new(slot, unsafe { base.add(at) }, meta.size as u32)
                    .build()
                    .flags(link)
                    .user_data(ud + 1),
                opcode::Read::new(slot, probes[k..].as_mut_ptr(), 1)
                    .offset(meta.size)
                    .build()
                    .flags(link)
                    .user_data(ud + 2),
                opcode::Close::new(slot).build().user_data(ud + 3),
            ];
            for entry in &entries {
                // SAFETY: names, `probes` and the reserved buffer outlive the run below.
                unsafe { ring.push(entry) };
            }
            at += meta.size as usize;
        }
        let results = ring
            .run()
            .map_err(|e| Error::io("io_uring_enter", self.run.path(files[0].0), e))?;
        for (k, &(i, meta)) in files.iter().enumerate() {
            let result = |j: usize| match results[4 * k + j] {
                r if r < 0 => Err(Errno::from_raw_os_error(-r)),
                r => Ok(r as u64),
            };
            let path = || self.run.path(i);
            result(0).map_err(|e| Error::io("open", path(), e))?;
            let got = result(1).map_err(|e| Error::io("read", path(), e))?;
            let more = result(2).map_err(|e| Error::io("read", path(), e))?;
            if got != meta.size || more != 0 {
                return Err(Error::Changed {
                    path: path(),
                    expected: meta.size,
                    actual: got + more,
                });
            }
        }
        // SAFETY: every byte up to `at` is a header copied above or file data the kernel
        // read (each read returned exactly its size).
        unsafe { self.buf.set_len(at) };
        for &(_, meta) in files {
            self.counted(meta.size);
        }
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }
}

impl Visitor for Packer<'_> {
    fn enter_dir(&mut self, name: &[u8], stat: &Stat, _at: &Location) -> Result<()> {
        check()?;
        self.end_run()?;
        push_dir(&mut self.buf, name, stat.st_mode);
        self.summary.dirs += 1;
        self.progress.add_entry(0);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.end_run()?;
        push_pop(&mut self.buf);
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    fn file(&mut self, name: &[u8], file: OwnedFd, stat: &Stat, at: &Location) -> Result<()> {
        self.pack_file(name, file, stat, || at.path(name))
    }

    fn skip(&mut self, path: TreePath, kind: &'static str) {
        self.summary.skipped.push((path, kind));
    }

    fn listed_file(&mut self, dir: BorrowedFd<'_>, name: &[u8], at: &Location) -> Result<bool> {
        if self.ring.is_none() {
            return Ok(false);
        }
        if self.run.dir.is_none() {
            let dup = fcntl_dupfd_cloexec(dir, 0)
                .map_err(|e| Error::io("dup directory", at.path(b""), e))?;
            self.run.dir = Some(dup);
            self.run.path = at.path(b"").0;
        }
        self.run.starts.push(self.run.names.len());
        self.run.names.extend_from_slice(name);
        self.run.names.push(0);
        if self.run.starts.len() == RING_FILES {
            self.drain(dir)?;
        }
        Ok(true)
    }
}
