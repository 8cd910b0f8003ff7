//! The version 1 archive encoder as a [`Sink`] (`Packer`), which [`super::Pack`] walks a
//! directory into. Small files are read straight into the output buffer (one
//! large write for many files). A writer thread does the writing, in order, into an
//! `ArchiveWriter`, while the calling thread walks and reads the next files. A large file
//! goes from file to output on the writer thread (`sendfile` of exactly its `fstat` size
//! into an fd), unless the writer is behind (`WRITER_BEHIND` items queued): then the
//! walking thread reads it into the output buffers, so each thread copies the data once
//! instead of the writer twice (on tmpfs, `sendfile` copies into the pipe and again into
//! the file). That keeps both threads busy, which is faster than `sendfile` alone
//! (docs/BENCHMARKS.md, "Design measurements").
//!
//! The walker announces regular files unopened. With io_uring, the files of a directory are
//! taken in runs of up to `RING_FILES`: each is `statx`ed (a plain call: the ring runs
//! `statx` on io-wq threads at a higher CPU cost), then one `io_uring_enter` opens each
//! small file into a fixed-file slot, reads it into its place in the output buffer, checks
//! it did not grow and closes the slot, so no fd and no `close` system call per file: about
//! one system call per file in all (the `statx` also gives the time and link count the
//! archive records). Without io_uring, and with [`Pack::archive`] (extended attributes are
//! read with `flistxattr` on an fd, which a fixed slot is not), each file is opened with
//! `openat`, stated with `fstat` and read with `read`.

use std::collections::HashMap;
use std::ffi::CStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use rustix::fs::{fstat, openat, statx, AtFlags, FileType, Mode, Stat};
use rustix::io::{fcntl_dupfd_cloexec, pread, Errno};

use crate::compare::inode_key;
use crate::error::{Error, Result, TreePath};
use crate::format::encode::{
    push_dir, push_end, push_file_header, push_hard_link, push_pop, push_special, push_symlink,
};
use crate::format::HEADER_EXTENDED;
use crate::interrupt::{retry, Cancel};
use crate::listing::Listing;
use crate::output::ArchiveWriter;
use crate::sys;
use crate::sys::ring::{Read, Ring, ToRead};
use crate::sys::thread::spawn_elsewhere;
use crate::sys::FILE_FLAGS;
use crate::tree::{
    Content, Device, DirPath, Entry, Kind, Meta as TreeMeta, Sink, XattrReader, Xattrs, STATX_MASK,
};
use crate::walk::too_many_xattrs;
use crate::Progress;

use super::{recorded, recorded_meta, PackSummary, Update, Warning};

/// Files read per ring batch (four requests each).
pub(super) const RING_FILES: usize = 64;

/// Files up to this size are copied into the output buffer; larger ones are sent by `sendfile`.
pub(super) const INLINE_MAX: u64 = 64 * 1024;
/// The output buffer is handed to the writer thread when it holds this much.
const FLUSH_AT: usize = 1 << 20;
/// Capacity of an output buffer: a flush, one more small file and its header.
const BUFFER: usize = FLUSH_AT + INLINE_MAX as usize + 512;
/// Output buffers or large files queued for the writer thread, at most.
const BUFFERS: usize = 8;
/// A large file is read into the output buffers by the walking thread instead of sent by
/// the writer thread when this many items wait for the writer already (it is behind).
const WRITER_BEHIND: usize = BUFFERS / 2;

/// Runs `source` on a [`Packer`] that writes to `out` through a writer thread, leaving out
/// the files `itself` (device, inode) and recording owners, extended attributes and devices
/// when `archive`, and the files `listing` shows unchanged; the source calls [`Sink::finish`]
/// to end the archive.
pub(super) fn encode<W: ArchiveWriter>(
    mut out: W,
    itself: [Option<(u64, u64)>; 2],
    archive: bool,
    listing: Option<&Listing>,
    progress: &Progress,
    cancel: Cancel,
    source: impl FnOnce(&mut Packer<'_>) -> Result<()>,
) -> Result<PackSummary> {
    let (tx, rx) = sync_channel(BUFFERS);
    let (spare_tx, spare) = sync_channel(BUFFERS);
    let queued = AtomicUsize::new(0);
    let mut buf = Vec::with_capacity(BUFFER);
    buf.extend_from_slice(&HEADER_EXTENDED);
    let mut packer = Packer {
        tx,
        queued: &queued,
        spare,
        itself,
        archive,
        buf,
        summary: PackSummary::default(),
        progress,
        // Extended attributes are read from an fd, which files read by the ring lack.
        ring: (!archive)
            .then(|| Ring::new(4 * RING_FILES as u32, RING_FILES as u32).ok())
            .flatten(),
        run: Run::default(),
        dir: DirPath::default(),
        update: Update::new(listing, archive),
        streaming: None,
        entries: 0,
        links: HashMap::new(),
        source_links: HashMap::new(),
        xattrs: XattrReader::default(),
        cancel,
    };
    std::thread::scope(|scope| {
        let queued = &queued;
        let written = spawn_elsewhere(scope, move || {
            writer(&mut out, rx, spare_tx, queued, progress)
        })
        .map_err(|e| Error::os("start the archive writer's thread", TreePath::default(), e))?;
        let packed = source(&mut packer);
        drop(packer.tx);
        written.join().expect("the writer does not panic")?;
        packed.map(|()| packer.update.counted(packer.summary))
    })
}

/// The archive encoder: a [`Sink`] that encodes what it receives into buffers for the
/// writer thread. It opens, stats and reads the files a walker announces
/// [`Content::Unopened`] itself, numbers the entries, turns later names of a file with
/// several links into hard links, and is the one place that decides what the archive
/// records (owners, extended attributes and devices only when `archive`).
pub(crate) struct Packer<'a> {
    /// Stops the pack once cancelled.
    cancel: Cancel,
    /// To the writer thread.
    tx: SyncSender<Out>,
    /// Items sent to the writer thread and not written yet.
    queued: &'a AtomicUsize,
    /// Emptied buffers coming back from the writer thread.
    spare: Receiver<Vec<u8>>,
    /// Device and inode of the archive being written and of the file it replaces.
    itself: [Option<(u64, u64)>; 2],
    /// Owners, extended attributes and devices are recorded.
    archive: bool,
    buf: Vec<u8>,
    summary: PackSummary,
    progress: &'a Progress,
    ring: Option<Ring>,
    run: Run,
    /// The path of the directory entered last, for messages.
    dir: DirPath,
    /// What the destination holds: unchanged files and symlinks are left out.
    update: Update<'a>,
    /// The file announced last as [`Content::Stream`]: its name, size and bytes so far.
    streaming: Option<(Vec<u8>, u64, u64)>,
    /// Entries encoded so far (the number of the next one).
    entries: u64,
    /// The entry number of each file with several links packed so far, by device and inode.
    links: HashMap<(u64, u64), u64>,
    /// The entry number of each file a source announced with a link id, by that id.
    source_links: HashMap<u64, u64>,
    xattrs: XattrReader,
}

/// Files of one directory waiting to be read through the ring, in archive order.
#[derive(Default)]
struct Run {
    /// A duplicate of the directory's fd (the walker may close its own before the run ends).
    dir: Option<OwnedFd>,
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
}

/// A small file of the run to read through the ring, as its `statx` described it.
#[derive(Clone, Copy)]
struct Listed {
    /// Its index in the run.
    i: usize,
    meta: TreeMeta,
    size: u64,
    /// Device and inode.
    key: (u64, u64),
    /// It has several links, and this is the first name of it packed.
    linked: bool,
}

/// Longest header of a file read by the ring, without its name: `PERM`, `TIME`, `LINKED`,
/// and `FILE` with its NUL and size.
const RING_HEADER: usize = 3 + 13 + 1 + 1 + 1 + 4;

impl Packer<'_> {
    /// Hands the buffer to the writer thread and continues in a spare one (unless a stop
    /// was requested).
    fn flush(&mut self) -> Result<()> {
        self.cancel.check()?;
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
        retry(&self.cancel, || {
            sys::read_onto(file, &mut self.buf, max, None)
        })
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

    /// Appends exactly `size` bytes of the large `file` ([`Packer::append_region`]), then
    /// checks with a one-byte read that it did not grow.
    fn read_large(
        &mut self,
        file: BorrowedFd<'_>,
        size: u64,
        path: &impl Fn() -> TreePath,
    ) -> Result<()> {
        self.append_region(file, 0, size, path)?;
        let mut probe = [0u8; 1];
        match retry(&self.cancel, || pread(file, &mut probe, size)) {
            Ok(0) => Ok(()),
            Ok(_) => Err(Error::Changed {
                path: path(),
                expected: size,
                actual: size + 1,
            }),
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
pub(super) fn writer_gone() -> Error {
    Error::io("write archive", TreePath::default(), Errno::PIPE)
}

/// What the writer thread puts into the archive, in order.
enum Out {
    /// Encoded messages and small files.
    Bytes(Vec<u8>),
    /// A large file, written from its fd (`sendfile`), of exactly this size.
    File(OwnedFd, u64, TreePath),
}

/// Writes what arrives on `rx` to `out`, returning emptied buffers on `spare`, counting
/// down `queued` after each item and the bytes written in `progress`.
fn writer(
    out: &mut impl ArchiveWriter,
    rx: Receiver<Out>,
    spare: SyncSender<Vec<u8>>,
    queued: &AtomicUsize,
    progress: &Progress,
) -> Result<()> {
    for item in rx {
        match item {
            Out::Bytes(mut buf) => {
                out.write_bytes(&buf, progress)?;
                buf.clear();
                let _ = spare.try_send(buf);
            }
            Out::File(file, size, path) => out.write_file(file.as_fd(), size, &path, progress)?,
        }
        queued.fetch_sub(1, Relaxed);
    }
    out.finish()
}

impl Packer<'_> {
    /// Numbers the entry just encoded (entries are numbered from 0 in archive order).
    fn added(&mut self) -> u64 {
        self.entries += 1;
        self.entries - 1
    }

    /// Packs the opened regular file `entry` (`stat` its `fstat`); a `link_id` says it is
    /// the first name packed of a file with several links, which later names link to.
    fn pack_file(
        &mut self,
        entry: &Entry<'_>,
        file: OwnedFd,
        stat: &Stat,
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        let size = stat.st_size as u64;
        push_file_header(&mut self.buf, entry, size);
        let index = self.added();
        if entry.link_id.is_some() {
            self.links.insert((stat.st_dev, stat.st_ino), index);
        }
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
        self.progress
            .done(self.dir.as_bytes(), entry.name, Kind::File);
        self.counted(size);
        Ok(())
    }

    /// True for the archive being written and the file it replaces.
    fn is_itself(&self, key: (u64, u64)) -> bool {
        self.itself.contains(&Some(key))
    }

    fn counted(&mut self, size: u64) {
        self.summary.files += 1;
        self.summary.bytes += size;
        self.progress.add_entry(size);
    }

    /// Encodes the name `name` of the file packed as entry `target`.
    fn hard_link_to(&mut self, name: &[u8], target: u64) -> Result<()> {
        push_hard_link(&mut self.buf, name, target);
        self.added();
        self.summary.hard_links += 1;
        self.progress.add_entry(0);
        self.progress.done(self.dir.as_bytes(), name, Kind::File);
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
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
    /// sent one by one. A later name of a file with several links becomes a hard link once
    /// the batch holding its first name is read (that name may turn out unreadable).
    fn drain(&mut self, dir: BorrowedFd<'_>) -> Result<()> {
        let n = self.run.starts.len();
        let mut small: Vec<Listed> = Vec::with_capacity(n);
        for i in 0..n {
            let end = self
                .run
                .starts
                .get(i + 1)
                .map_or(self.run.names.len(), |&e| e);
            let name = CStr::from_bytes_with_nul(&self.run.names[self.run.starts[i]..end])
                .expect("names are stored with their NUL");
            let path = || self.dir.join(self.run.name(i));
            let st = match statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK) {
                Ok(st) => st,
                Err(e) => {
                    let warning = Warning::unreadable(Error::io("statx", path(), e));
                    self.summary.warnings.push(warning);
                    continue;
                }
            };
            let kind = FileType::from_raw_mode(u32::from(st.stx_mode));
            let key = inode_key(&st);
            if kind != FileType::RegularFile {
                // Replaced since the listing.
                self.ignore(path(), Kind::of(kind));
                continue;
            }
            if self.is_itself(key) {
                // The archive itself: left out without a word.
                continue;
            }
            let several = st.stx_nlink > 1;
            if several && (self.links.contains_key(&key) || small.iter().any(|f| f.key == key)) {
                self.read_ring(dir, &small)?;
                small.clear();
                if let Some(&target) = self.links.get(&key) {
                    let name = self.run.name(i).to_vec();
                    self.hard_link_to(&name, target)?;
                    continue;
                }
            }
            let there = self.update.listed_here(self.run.name(i));
            let name = self.run.name(i);
            if self.update.unchanged_file(there, &st, false, (dir, name)) {
                continue;
            }
            if st.stx_size <= INLINE_MAX {
                small.push(Listed {
                    i,
                    meta: recorded_meta(TreeMeta::of_statx(&st), self.archive),
                    size: st.stx_size,
                    key,
                    linked: several,
                });
            } else {
                self.read_ring(dir, &small)?;
                small.clear();
                let name = self.run.name(i).to_vec();
                let path = self.dir.join(&name);
                self.open_and_pack(dir, &name, || path.clone())?;
            }
        }
        self.read_ring(dir, &small)?;
        self.run.names.clear();
        self.run.starts.clear();
        Ok(())
    }

    /// Opens the listed file `name` in `dir` with a plain `openat`, stats it and packs it
    /// (as a hard link when a name of it was packed before); one that cannot be opened is
    /// left out with a warning, one replaced since the listing by another kind is ignored.
    fn open_and_pack(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &[u8],
        path: impl Fn() -> TreePath,
    ) -> Result<()> {
        let file = match openat(dir, name, FILE_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(e) => {
                let warning = Warning::unreadable(Error::io("open", path(), e));
                self.summary.warnings.push(warning);
                return Ok(());
            }
        };
        let stat = fstat(&file).map_err(|e| Error::io("fstat", path(), e))?;
        let key = (stat.st_dev, stat.st_ino);
        match Kind::of_mode(stat.st_mode) {
            Kind::File if self.is_itself(key) => return Ok(()),
            Kind::File => {}
            other => {
                self.ignore(path(), other);
                return Ok(());
            }
        }
        let several = stat.st_nlink > 1;
        if let Some(&target) = self.links.get(&key).filter(|_| several) {
            return self.hard_link_to(name, target);
        }
        if self.archive {
            match self.xattrs.read(file.as_fd()) {
                Ok(0) => {}
                Ok(_) => self.warn(too_many_xattrs(path())),
                Err(e) => self.warn(Error::io("flistxattr", path(), e)),
            }
        }
        let xattrs = std::mem::take(&mut self.xattrs.wire);
        let entry = Entry {
            xattrs: Xattrs(&xattrs),
            link_id: several.then_some(self.entries),
            ..Entry::file(name, TreeMeta::of_stat(&stat))
        };
        let entry = recorded(&entry, self.archive);
        let packed = self.pack_file(&entry, file, &stat, path);
        self.xattrs.wire = xattrs;
        packed
    }

    /// Records an entry left out because the archive does not take its kind.
    fn ignore(&mut self, path: TreePath, kind: Kind) {
        self.summary.warnings.push(Warning::ignored(path, kind));
    }

    /// Records something that could not be read.
    fn warn(&mut self, error: Error) {
        self.summary.warnings.push(Warning::unreadable(error));
    }

    /// Appends the small files `files` of the run with one ring batch: each is opened into
    /// slot k, read into its place after its header, probed for growth with a one-byte read
    /// at its size, and closed. (Not one read of size + 1: it would come up short, and
    /// io_uring finishes a short read of a regular file on a slow io-wq thread.) A file that cannot be opened is left out with a warning: the files after
    /// it move down over its place.
    fn read_ring(&mut self, dir: BorrowedFd<'_>, files: &[Listed]) -> Result<()> {
        let Some(ring) = self.ring.as_mut().filter(|_| !files.is_empty()) else {
            return Ok(());
        };
        // The headers, one after the other, and where each ends.
        let mut headers = Vec::with_capacity(files.len() * (RING_HEADER + 32));
        let mut ends = Vec::with_capacity(files.len());
        for f in files {
            let entry = Entry {
                // The number is not written: LINKED only says later entries name it.
                link_id: f.linked.then_some(0),
                ..Entry::file(self.run.name(f.i), f.meta)
            };
            push_file_header(&mut headers, &entry, f.size);
            ends.push(headers.len());
        }
        let names = &self.run.names;
        let to_read: Vec<ToRead<'_>> = (files.iter().zip(&ends))
            .scan(0, |start, (f, &end)| {
                let prefix = &headers[*start..end];
                *start = end;
                let name = CStr::from_bytes_until_nul(&names[self.run.starts[f.i]..]);
                Some(ToRead {
                    name: name.expect("names end with a NUL"),
                    size: f.size,
                    prefix,
                })
            })
            .collect();
        let reads = match ring.read_files(dir, &to_read, &mut self.buf, false) {
            Ok(reads) => reads,
            Err(e) => {
                let path = self.dir.join(self.run.name(files[0].i));
                return Err(Error::io("io_uring_enter", path, e));
            }
        };
        for (f, read) in files.iter().zip(reads) {
            let path = || self.dir.join(self.run.name(f.i));
            match read {
                Read::Whole => {}
                Read::Unopened(e) => {
                    let warning = Warning::unreadable(Error::io("open", path(), e));
                    self.summary.warnings.push(warning);
                    continue;
                }
                Read::Failed(e) => return Err(Error::io("read", path(), e)),
                Read::Changed(actual) => {
                    return Err(Error::Changed {
                        path: path(),
                        expected: f.size,
                        actual,
                    })
                }
            }
            let index = self.added();
            if f.linked {
                self.links.insert(f.key, index);
            }
            self.progress
                .done(self.dir.as_bytes(), self.run.name(f.i), Kind::File);
            self.counted(f.size);
        }
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }
}

impl Packer<'_> {
    /// Packs a file the walker listed in `dir`: into the ring's run, or opened and read
    /// right away without a ring.
    fn listed(&mut self, dir: BorrowedFd<'_>, name: &[u8]) -> Result<()> {
        if self.ring.is_none() {
            if let Some(there) = self.update.listed_here(name) {
                // One more `statx` than without a listing, so that an unchanged file is not
                // opened; `open_and_pack` reports what fails here.
                let st = statx(dir, name, AtFlags::SYMLINK_NOFOLLOW, STATX_MASK);
                if let Ok(st) = st {
                    let packed = self.links.contains_key(&inode_key(&st));
                    if self
                        .update
                        .unchanged_file(Some(there), &st, packed, (dir, name))
                    {
                        return Ok(());
                    }
                }
            }
            // Lent out, so that messages name the file without a copy per file.
            let dir_path = std::mem::take(&mut self.dir);
            let packed = self.open_and_pack(dir, name, || dir_path.join(name));
            self.dir = dir_path;
            return packed;
        }
        if self.run.dir.is_none() {
            let dup = fcntl_dupfd_cloexec(dir, 0)
                .map_err(|e| Error::io("dup directory", self.dir.join(b""), e))?;
            self.run.dir = Some(dup);
        }
        self.run.starts.push(self.run.names.len());
        self.run.names.extend_from_slice(name);
        self.run.names.push(0);
        if self.run.starts.len() == RING_FILES {
            self.drain(dir)?;
        }
        Ok(())
    }

    /// Appends `data` to the buffers, handing full ones to the writer.
    fn append(&mut self, mut data: &[u8]) -> Result<()> {
        loop {
            let n = data.len().min(BUFFER - self.buf.len());
            self.buf.extend_from_slice(&data[..n]);
            data = &data[n..];
            if self.buf.len() >= FLUSH_AT {
                self.flush()?;
            }
            if data.is_empty() {
                return Ok(());
            }
        }
    }

    /// Appends exactly `len` bytes of `fd` from `offset` (`path` in messages) in
    /// buffer-sized reads, handing each full buffer to the writer; [`Error::Changed`] when
    /// the file ends before.
    fn append_region(
        &mut self,
        fd: BorrowedFd<'_>,
        mut offset: u64,
        len: u64,
        path: &impl Fn() -> TreePath,
    ) -> Result<()> {
        let end = offset + len;
        while offset < end {
            let room = self.buf.capacity() - self.buf.len();
            let want = room.min((end - offset) as usize);
            let n = retry(&self.cancel, || {
                sys::read_onto(fd, &mut self.buf, want, Some(offset))
            })
            .map_err(|e| Error::io("read", path(), e))?;
            if n == 0 {
                return Err(Error::Changed {
                    path: path(),
                    expected: len,
                    actual: len - (end - offset),
                });
            }
            offset += n as u64;
            if self.buf.len() >= FLUSH_AT {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Fails when the file announced as a stream got fewer bytes than its size.
    fn stream_ended(&mut self) -> Result<()> {
        match self.streaming.take() {
            Some((name, size, got)) if got != size => Err(Error::Changed {
                path: self.dir.join(&name),
                expected: size,
                actual: got,
            }),
            _ => Ok(()),
        }
    }
}

impl Sink for Packer<'_> {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.cancel.check()?;
        self.stream_ended()?;
        self.end_run()?;
        let entry = recorded(entry, self.archive);
        push_dir(&mut self.buf, &entry);
        self.added();
        self.summary.dirs += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, Kind::Dir);
        self.dir.enter(entry.name);
        self.update.relisted(&self.dir);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.stream_ended()?;
        self.end_run()?;
        push_pop(&mut self.buf);
        self.dir.leave();
        self.update.relisted(&self.dir);
        if self.buf.len() >= FLUSH_AT {
            self.flush()?;
        }
        Ok(())
    }

    /// Encodes a file; one announced [`Content::Unopened`] is opened and read here. A file
    /// with a link id gets `LINKED`, and later [`Sink::hard_link`]s to that id name it.
    fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
        self.stream_ended()?;
        if let Content::Unopened { dir } = content {
            return self.listed(dir, entry.name);
        }
        self.end_run()?;
        let name = entry.name;
        let entry = &recorded(entry, self.archive);
        let size = match content {
            Content::Bytes(data)
            | Content::File {
                mapped: Some(data), ..
            } => data.len() as u64,
            Content::File { len, .. } => len,
            Content::Stream { size, .. } => size,
            Content::Unopened { .. } => unreachable!("packed above"),
        };
        push_file_header(&mut self.buf, entry, size);
        let index = self.added();
        if let Some(id) = entry.link_id {
            self.source_links.insert(id, index);
        }
        match content {
            Content::Bytes(data)
            | Content::File {
                mapped: Some(data), ..
            } => self.append(data)?,
            Content::File { fd, offset, .. } => {
                let dir = std::mem::take(&mut self.dir);
                let appended = self.append_region(fd, offset, size, &|| dir.join(name));
                self.dir = dir;
                appended?;
            }
            Content::Stream { first, .. } => {
                self.append(first)?;
                self.streaming = Some((name.to_vec(), size, first.len() as u64));
            }
            Content::Unopened { .. } => unreachable!("packed above"),
        }
        self.progress.done(self.dir.as_bytes(), name, Kind::File);
        self.counted(size);
        Ok(())
    }

    /// More of the streamed file; bytes beyond its size fail as a changed file.
    fn data(&mut self, data: &[u8]) -> Result<()> {
        let (name, size, got) = self.streaming.as_mut().expect("data follows a stream");
        *got += data.len() as u64;
        if *got > *size {
            return Err(Error::Changed {
                path: self.dir.join(name),
                expected: *size,
                actual: *got,
            });
        }
        self.append(data)
    }

    /// Encodes a symlink, unless the listing shows it unchanged (same target length and
    /// time).
    fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<()> {
        self.stream_ended()?;
        self.end_run()?;
        if self.update.unchanged_symlink(entry, target) {
            return Ok(());
        }
        let entry = recorded(entry, self.archive);
        push_symlink(&mut self.buf, &entry, target);
        self.added();
        self.summary.symlinks += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, Kind::Symlink);
        Ok(())
    }

    /// A hard link to a file a source announced with the link id `target`.
    fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<()> {
        self.stream_ended()?;
        self.end_run()?;
        let Some(&index) = self.source_links.get(&target) else {
            return Err(Error::Argument {
                arg: self.dir.join(entry.name).to_string(),
                problem: format!("hard link to the unknown link id {target}"),
            });
        };
        self.hard_link_to(entry.name, index)
    }

    /// Encodes a fifo, or a device when `archive` (else it is ignored), unless the listing
    /// shows it unchanged.
    fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<()> {
        self.stream_ended()?;
        self.end_run()?;
        if entry.kind != Kind::Fifo && !self.archive {
            self.ignore(self.dir.join(entry.name), entry.kind);
            return Ok(());
        }
        if self.update.unchanged_special(entry, device) {
            return Ok(());
        }
        let entry = recorded(entry, self.archive);
        push_special(&mut self.buf, &entry, device);
        self.added();
        self.summary.specials += 1;
        self.progress.add_entry(0);
        self.progress
            .done(self.dir.as_bytes(), entry.name, entry.kind);
        Ok(())
    }

    /// Ignores the entry (a socket), with a warning.
    fn other(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.stream_ended()?;
        self.ignore(self.dir.join(entry.name), entry.kind);
        Ok(())
    }

    /// Notes the entry as not packed, and goes on.
    fn unreadable(&mut self, error: Error) -> Result<()> {
        self.warn(error);
        Ok(())
    }

    /// Ends the archive.
    fn finish(&mut self) -> Result<()> {
        self.stream_ended()?;
        self.end_run()?;
        push_end(&mut self.buf, self.entries);
        self.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use rustix::fs::OFlags;

    use super::*;
    use crate::format::{decode_all, Event, Limits};
    use crate::output::IoWriter;
    use crate::pack::Pack;
    use crate::tree::Meta;

    fn packed_tree(root: &std::path::Path) -> Vec<u8> {
        std::fs::create_dir_all(root.join("d/e")).unwrap();
        for (i, size) in [0, 5, 70_000, 3_000_000, 100].into_iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|b| (b % 251 + i) as u8).collect();
            std::fs::write(root.join(format!("d/f{i}")), data).unwrap();
        }
        std::fs::write(root.join("d/e/x"), b"x").unwrap();
        let flags = OFlags::DIRECTORY | OFlags::RDONLY;
        let root = rustix::fs::open(root, flags, Mode::empty()).unwrap();
        let mut archive = Vec::new();
        Pack::new(root).to_writer(&mut archive).unwrap();
        archive
    }

    /// Encodes what `source` feeds a packer, into bytes.
    fn encoded(source: impl FnOnce(&mut Packer<'_>) -> Result<()>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        encode(
            IoWriter::new(&mut out, Cancel::new()),
            [None; 2],
            false,
            None,
            &Progress::default(),
            Cancel::new(),
            source,
        )?;
        Ok(out)
    }

    /// Every form of content a source may hand over (bytes, a stream in pieces, a region of
    /// a file) encodes to the bytes the walker's files gave.
    #[test]
    fn a_decoded_archive_encodes_to_the_same_bytes_whatever_the_form_of_content() {
        let dir = tempfile::tempdir().unwrap();
        let archive = packed_tree(&dir.path().join("tree"));
        let mut file = tempfile::tempfile_in(dir.path()).unwrap();
        file.write_all(&archive).unwrap();
        let mut files = 0;
        let again = encoded(|packer| {
            decode_all(&archive, Limits::default(), |_, event| match event {
                Event::Dir(dir) => packer.enter_dir(&dir),
                Event::Pop => packer.leave_dir(),
                Event::File { entry, data, .. } => {
                    let size = data.len() as u64;
                    files += 1;
                    match files % 3 {
                        0 => packer.file(&entry, Content::Bytes(data)),
                        1 => {
                            let (first, rest) = data.split_at(data.len() / 2);
                            let (middle, last) = rest.split_at(rest.len() / 3);
                            packer.file(&entry, Content::Stream { size, first })?;
                            packer.data(middle)?;
                            packer.data(last)
                        }
                        _ => {
                            let offset = data.as_ptr() as u64 - archive.as_ptr() as u64;
                            let (fd, mapped) = (file.as_fd(), None);
                            let content = Content::File {
                                fd,
                                offset,
                                len: size,
                                mapped,
                            };
                            packer.file(&entry, content)
                        }
                    }
                }
                _ => Ok(()),
            })?;
            packer.finish()
        })
        .unwrap();
        assert_eq!(files, 6);
        assert!(
            again == archive,
            "{} against {} bytes",
            again.len(),
            archive.len()
        );
    }

    /// Without io_uring each listed file is opened and read on its own: the same archive.
    #[test]
    fn packing_without_a_ring_gives_the_same_archive() {
        let dir = tempfile::tempdir().unwrap();
        let archive = packed_tree(dir.path());
        let flags = OFlags::DIRECTORY | OFlags::RDONLY;
        let root = rustix::fs::open(dir.path(), flags, Mode::empty()).unwrap();
        let plain = encoded(|packer| {
            packer.ring = None;
            crate::walk::walk(root, packer)
        })
        .unwrap();
        assert!(
            plain == archive,
            "{} against {} bytes",
            plain.len(),
            archive.len()
        );
    }

    #[test]
    fn a_stream_shorter_or_longer_than_announced_fails() {
        let entry = Entry::file(b"s", Meta::with_mode(0o644));
        let short = encoded(|packer| {
            packer.file(
                &entry,
                Content::Stream {
                    size: 10,
                    first: b"abc",
                },
            )?;
            packer.finish()
        });
        assert!(
            matches!(
                short,
                Err(Error::Changed {
                    expected: 10,
                    actual: 3,
                    ..
                })
            ),
            "{short:?}"
        );
        let long = encoded(|packer| {
            packer.file(
                &entry,
                Content::Stream {
                    size: 4,
                    first: b"abc",
                },
            )?;
            packer.data(b"de")
        });
        assert!(
            matches!(
                long,
                Err(Error::Changed {
                    expected: 4,
                    actual: 5,
                    ..
                })
            ),
            "{long:?}"
        );
    }
}
