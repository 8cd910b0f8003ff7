//! Version 2 archives on the threaded engine. The calling thread finds the frames ahead of
//! the decoder (hopping over a mapping by their stored lengths, or reading a stream frame
//! by frame) and queues a [`Check`] of each for the helpers: a zstd frame is inflated, and
//! every data digest of a segment is checked (`format::data_digests_match`), but for data
//! the landers read from the archive file, which they check as they write it
//! ([`land_checked`]): so it is read once. It decodes the
//! frames in order, each once its check is done (doing the check itself when no helper has
//! taken it), trusting the data digests the check found right (`Decoder::trust_data`) and
//! checking everything else as the sync engine does, so that errors are the same: where a
//! check failed, the decoder checks the data digests itself and reports the first wrong
//! one. What is not a whole frame (the footer, a frame cut short or with a bad head) is
//! decoded as the rest of the input.
//!
//! Memory: the frames ahead of the decoder, up to [`AHEAD`] bytes of bodies (and at least
//! one frame), and the bodies the batches in flight were decoded from.

use std::collections::VecDeque;
use std::hash::Hasher;
use std::ops::Range;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::AcqRel, Ordering::Acquire};
use std::sync::{Arc, Condvar, Mutex};

use super::{batch_cost, Failure, Here, Parsed, Parser, Segment, Source, Stream};
use super::{copied, SEGMENT, STREAM_THREADS_FROM};
use crate::copy::{copy_range, read_chunks};
use rustix::io::Errno;

use crate::error::{Error, Result, TreePath};
use crate::format::{data_digests_match, digest, digest_differs, frame_head, inflate, Digester};
use crate::format::{FormatError, FrameHead, CODEC_ZSTD, FRAME_HEAD, HEADER_V2};
use crate::format::{TAG_INDEX, TAG_SEGMENT};
use crate::interrupt::Cancel;
use crate::land::sync::{SharedFile, SyncLander};
use crate::land::Land;
use crate::source::ByteStream;
use crate::sys::map::populate;
use crate::tree::{Content, Entry};

/// Bytes of frame bodies found ahead of the decoder, at most (but one frame of any size);
/// also the most bytes of buffers kept for reuse.
const AHEAD: usize = 64 << 20;

/// A frame's inflating and data-digest check, done once by whoever takes it first.
pub(super) struct Check<'a> {
    stored: Stored<'a>,
    head: FrameHead,
    /// Where its body goes.
    buffers: Arc<Buffers>,
    taken: AtomicBool,
    result: Mutex<Option<Checked>>,
    done: Condvar,
}

/// Where a frame's stored bytes are.
enum Stored<'a> {
    /// In the mapped archive, and where they are in the archive file, when it is one.
    Mapped(&'a [u8], Option<(BorrowedFd<'a>, u64)>),
    /// Read from a stream, into part of this buffer.
    Read(Arc<Segment>, Range<usize>),
}

/// What a [`Check`] found.
struct Checked {
    /// A zstd frame's body, or why it does not inflate.
    body: Option<std::result::Result<Arc<Segment>, FormatError>>,
    /// Every data digest of the segment's body is right.
    verified: bool,
}

impl<'a> Check<'a> {
    fn new(stored: Stored<'a>, head: FrameHead, buffers: &Arc<Buffers>) -> Arc<Check<'a>> {
        Arc::new(Check {
            stored,
            head,
            buffers: buffers.clone(),
            taken: AtomicBool::new(false),
            result: Mutex::new(None),
            done: Condvar::new(),
        })
    }

    /// Does the check, unless someone took it already.
    pub(super) fn run(&self) {
        if self.taken.swap(true, AcqRel) {
            return;
        }
        let checked = self.check();
        *self.result.lock().expect("no panics") = Some(checked);
        self.done.notify_all();
    }

    fn check(&self) -> Checked {
        let (stored, file) = match &self.stored {
            Stored::Mapped(bytes, file) => (*bytes, *file),
            Stored::Read(buffer, range) => (&buffer.bytes()[range.clone()], None),
        };
        let segment = self.head.tag == TAG_SEGMENT;
        let hashed = segment && !unchecked();
        let verify = |body: &[u8], file: Option<_>| {
            // Data a lander copies from the file is checked by it (see `checks_digest`).
            let matches = |range: Range<usize>, stated| {
                (file.is_some() && copied(&range)) || !digest_differs(digest(&body[range]), stated)
            };
            segment && (!hashed || data_digests_match(body, matches))
        };
        if self.head.codec != CODEC_ZSTD {
            let verified = verify(stored, file);
            return Checked {
                body: None,
                verified,
            };
        }
        if file.is_some() {
            // Read whole: mapped in at once, not page by page.
            populate(stored);
        }
        let mut body = self.buffers.take(self.body_len());
        match inflate(stored, self.head.body, &mut body.buf) {
            Ok(()) => {
                let verified = verify(&body.buf, None);
                body.len = body.buf.len();
                let body = Some(Ok(self.buffers.keep(body)));
                Checked { body, verified }
            }
            Err(kind) => Checked {
                body: Some(Err(kind)),
                verified: false,
            },
        }
    }

    /// Whether its result is there.
    fn done(&self) -> bool {
        self.result.lock().expect("no panics").is_some()
    }

    /// What the check found, once done (here, when no one took it).
    fn wait(&self) -> Checked {
        self.run();
        let mut result = self.result.lock().expect("no panics");
        loop {
            if let Some(checked) = result.take() {
                return checked;
            }
            result = self.done.wait(result).expect("no panics");
        }
    }

    /// Bytes of the frame's body.
    fn body_len(&self) -> usize {
        self.head.body as usize
    }
}

/// Bytes read at once from the archive file for [`read_checked`].
const PIECE: usize = 256 << 10;

/// Lands `file` from its `len` bytes at `from` (the archive file and the data's offset in
/// it), checked as [`read_checked`] does; a mismatch is `bad-digest` at `message`. This
/// check replaces the one ahead of the decoder for data the kernel would copy: the data is
/// read once.
pub(super) fn land_checked<L: Land>(
    land: &mut L,
    file: &Entry<'_>,
    (from, len, stated): ((BorrowedFd<'_>, u64), u64, u64),
    message: u64,
    piece: &mut Vec<u8>,
) -> Result<()> {
    land.file(
        file,
        Content::Stream {
            size: len,
            first: &[],
        },
    )?;
    let path = land.sync_lander().path(file.name);
    let cancel = land.sync_lander().cancel().clone();
    let check = Some(("file", message, stated));
    read_checked(from, len, piece, &path, &cancel, check, |chunk| {
        land.data(chunk)
    })
}

/// Writes at `at` of the shared `file` the extent of `len` bytes at `from` (the archive
/// file and the data's offset in it): checked as [`read_checked`] does where `check` gives
/// the `EXTENT`'s offset and stated digest; else copied inside the kernel.
pub(super) fn write_extent(
    lander: &SyncLander,
    (file, fd): (&SharedFile, &OwnedFd),
    at: u64,
    ((from, offset), len): ((BorrowedFd<'_>, u64), u64),
    check: Option<(u64, u64)>,
    piece: &mut Vec<u8>,
) -> Result<()> {
    let path = || lander.path(file.name());
    let cancel = lander.cancel();
    let mut done = 0;
    if check.is_none() {
        let to = (fd.as_fd(), Some(at));
        done = copy_range((from, offset), to, len, &path, cancel, |_| {})?.copied;
    }
    // What the kernel could not copy, or all of it to check, through memory.
    let check = check.map(|(message, stated)| ("extent", message, stated));
    let from = (from, offset + done);
    read_checked(from, len - done, piece, &path(), cancel, check, |chunk| {
        lander.write_shared((file, fd), at + done, chunk)?;
        done += chunk.len() as u64;
        Ok(())
    })
}

/// Reads `len` bytes at `from` (the archive file and an offset in it) in pieces through
/// `piece`, handing each to `write`; with `check` (what, its message's offset, the stated
/// digest) each piece is hashed first and the last one handed on only once the digest
/// matched, so that wrong data is never written whole (the lander's failure then removes
/// it). A file that ends first is an error naming `path`.
fn read_checked(
    (from, offset): (BorrowedFd<'_>, u64),
    len: u64,
    piece: &mut Vec<u8>,
    path: &TreePath,
    cancel: &Cancel,
    check: Option<(&'static str, u64, u64)>,
    mut write: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    piece.resize(PIECE, 0);
    let (mut digester, mut done) = (Digester::default(), 0);
    read_chunks(from, offset, len, piece, path, cancel, |chunk| {
        done += chunk.len() as u64;
        if let Some((what, message, stated)) = check {
            digester.write(chunk);
            if done == len && digest_differs(digester.finish(), stated) {
                return Err(bad_digest(what, message, path.clone()));
            }
        }
        write(chunk)
    })?;
    if done < len {
        // The archive file shrank since it was mapped.
        return Err(Error::io("read", path.clone(), Errno::NODATA));
    }
    Ok(())
}

/// The error for data of a `FILE` or `EXTENT` (`what`) at `message` of the archive that
/// differs from its digest: the decoder's.
pub(super) fn bad_digest(what: &'static str, message: u64, path: TreePath) -> Error {
    Error::Format {
        offset: message,
        path,
        kind: FormatError::BadDigest(what),
    }
}

/// Whether the data digests go unchecked (and the decoder trusts them): only in a build
/// with the `bench` feature, with `BARGE_BENCH_NO_DIGESTS` set, to measure what checking
/// them costs (docs/BENCHMARKS.md).
pub(super) fn unchecked() -> bool {
    cfg!(feature = "bench") && std::env::var_os("BARGE_BENCH_NO_DIGESTS").is_some()
}

/// A whole frame found ahead of the decoder.
struct Frame<'a> {
    /// What the decoder reads of it: its head (after the archive header, for the first
    /// frame), with a raw frame's body.
    lead: Source<'a>,
    span: Range<usize>,
    check: Arc<Check<'a>>,
}

/// Where the frames come from.
trait Frames<'a> {
    /// The next whole frame, or `None` where the input holds none (the footer after the
    /// index, a frame cut short or with a bad head).
    fn next(&mut self) -> Result<Option<Frame<'a>>>;
    /// Bytes read so far.
    fn read(&self) -> u64;
}

/// Lands the mapped version 2 archive `source`, with helpers from the start.
pub(super) fn land_mapped<'a, L: Land>(
    source: Source<'a>,
    workers: usize,
    parser: &mut Parser,
    stop: &AtomicU64,
    here: &mut Here<'a, '_, L>,
) -> std::result::Result<(), Failure> {
    here.start_helpers(workers - 1);
    let Source::Mapped(bytes, _) = source else {
        unreachable!("a mapped archive");
    };
    parser.plan.batch_cost = batch_cost(bytes.len(), workers);
    let mut hops = Hops {
        source: source.clone(),
        bytes,
        pos: 0,
        ended: false,
        buffers: Arc::default(),
    };
    if land_frames(&mut hops, workers, parser, stop, here)? {
        parser.land_rest_of(&source, hops.pos, stop, here)?;
    }
    Ok(())
}

/// Lands the version 2 archive `input`, read frame by frame; helpers start once
/// [`STREAM_THREADS_FROM`] bytes came.
pub(super) fn land_stream<L: Land>(
    input: ByteStream<'_>,
    workers: usize,
    parser: &mut Parser,
    stop: &AtomicU64,
    here: &mut Here<'_, '_, L>,
) -> std::result::Result<(), Failure> {
    parser.plan.batch_cost = batch_cost(SEGMENT, workers);
    let mut reads = Reads {
        input,
        read: 0,
        rest: Vec::new(),
        eof: false,
        ended: false,
        buffers: Arc::default(),
    };
    if !land_frames(&mut reads, workers, parser, stop, here)? {
        return Ok(());
    }
    let len = reads.rest.len();
    let mut rest = Segment::holding(std::mem::take(&mut reads.rest), len);
    rest.eof = reads.eof;
    Stream::new(reads.input, rest).land(workers, parser, stop, here)
}

/// Decodes and lands the whole frames of `frames`, checked ahead on the helpers; false when
/// a failure stopped it.
fn land_frames<'a, L: Land>(
    frames: &mut impl Frames<'a>,
    workers: usize,
    parser: &mut Parser,
    stop: &AtomicU64,
    here: &mut Here<'a, '_, L>,
) -> std::result::Result<bool, Failure> {
    let mut ahead: VecDeque<Frame<'a>> = VecDeque::new();
    let (mut bytes, mut more) = (0, true);
    loop {
        while more && ahead.len() < 2 * (here.helpers + 1) && (ahead.is_empty() || bytes < AHEAD) {
            if here.helpers == 0 && frames.read() >= STREAM_THREADS_FROM as u64 {
                here.start_helpers(workers - 1);
            }
            match frames.next().map_err(|e| (parser.decoded(), e))? {
                Some(frame) => {
                    bytes += frame.check.body_len();
                    here.check(&frame.check);
                    ahead.push_back(frame);
                }
                None => more = false,
            }
        }
        let Some(frame) = ahead.pop_front() else {
            return Ok(true);
        };
        bytes -= frame.check.body_len();
        // While a helper checks the frame, this thread does what else there is.
        while frame.check.taken.load(Acquire) && !frame.check.done() {
            match here.take() {
                Some(job) => here.run(job),
                None => break,
            }
        }
        if let Parsed::Stopped = parser.land_frame(frame, stop, here)? {
            return Ok(false);
        }
    }
}

impl Parser {
    /// Decodes `frame` into batches once it is checked, trusting the data digests the check
    /// found right.
    fn land_frame<'a, L: Land>(
        &mut self,
        frame: Frame<'a>,
        stop: &AtomicU64,
        here: &mut Here<'a, '_, L>,
    ) -> std::result::Result<Parsed, Failure> {
        let checked = frame.check.wait();
        self.decoder.trust_data(checked.verified);
        let parsed = self.decode_frame(&frame, checked.body, stop, here);
        self.decoder.trust_data(false);
        parsed
    }

    fn decode_frame<'a, L: Land>(
        &mut self,
        frame: &Frame<'a>,
        body: Option<std::result::Result<Arc<Segment>, FormatError>>,
        stop: &AtomicU64,
        here: &mut Here<'a, '_, L>,
    ) -> std::result::Result<Parsed, Failure> {
        let end = frame.span.end;
        match self.run(&frame.lead, frame.span.clone(), stop, here)? {
            Parsed::Inflate => {}
            Parsed::NeedMore(at) if at < end => {
                // Only an error keeps the decoder inside a whole frame.
                self.end(&frame.lead.bytes()[at..end])?;
                return Err(self.cut_frame());
            }
            parsed => return Ok(parsed),
        }
        let body = match body.expect("a zstd frame is inflated") {
            Ok(body) => body,
            Err(kind) => return Err((self.decoded(), self.decoder.frame_error(kind))),
        };
        let len = body.len;
        let parsed = self.run(&Source::Stream(body), 0..len, stop, here)?;
        // A whole body decodes to its end, or fails.
        debug_assert!(!matches!(parsed, Parsed::Inflate));
        Ok(parsed)
    }
}

/// The frames of a mapped archive, found by their heads.
struct Hops<'a> {
    source: Source<'a>,
    bytes: &'a [u8],
    /// Where the next frame is (0: the header first).
    pos: usize,
    /// The index came: the footer is next.
    ended: bool,
    buffers: Arc<Buffers>,
}

impl<'a> Frames<'a> for Hops<'a> {
    fn next(&mut self) -> Result<Option<Frame<'a>>> {
        let bytes = self.bytes;
        let at = match self.pos {
            0 if bytes.starts_with(&HEADER_V2) => HEADER_V2.len(),
            0 => return Ok(None),
            pos => pos,
        };
        let Some(head) = (!self.ended).then(|| whole_head(&bytes[at..])).flatten() else {
            return Ok(None);
        };
        let stored = at + FRAME_HEAD..at + FRAME_HEAD + head.stored as usize;
        if stored.end > bytes.len() {
            return Ok(None);
        }
        let lead = match head.codec {
            CODEC_ZSTD => self.pos..stored.start,
            _ => self.pos..stored.end,
        };
        self.pos = stored.end;
        self.ended = head.tag == TAG_INDEX;
        let Source::Mapped(_, file) = self.source else {
            unreachable!("a mapped archive");
        };
        let file = file.map(|(fd, base)| (fd, base + stored.start as u64));
        let check = Check::new(Stored::Mapped(&bytes[stored], file), head, &self.buffers);
        Ok(Some(Frame {
            lead: self.source.clone(),
            span: lead,
            check,
        }))
    }

    fn read(&self) -> u64 {
        self.pos as u64
    }
}

/// The head of the segment or index frame `bytes` start with, if it is a valid one.
fn whole_head(bytes: &[u8]) -> Option<FrameHead> {
    let head: &[u8; FRAME_HEAD] = bytes.get(..FRAME_HEAD)?.try_into().ok()?;
    let frame = matches!(head[0], TAG_SEGMENT | TAG_INDEX);
    frame_head(head).ok().filter(|_| frame)
}

/// The frames of a stream, read one after another.
struct Reads<'i> {
    input: ByteStream<'i>,
    /// Bytes read so far.
    read: u64,
    /// Bytes read that are not a whole frame: the start of the rest of the input.
    rest: Vec<u8>,
    /// The input ended (inside `rest`).
    eof: bool,
    /// The index came: the footer is next.
    ended: bool,
    buffers: Arc<Buffers>,
}

impl<'a> Frames<'a> for Reads<'_> {
    fn next(&mut self) -> Result<Option<Frame<'a>>> {
        if self.ended || self.eof {
            return Ok(None);
        }
        let lead = match self.read {
            0 => HEADER_V2.len() + FRAME_HEAD,
            _ => FRAME_HEAD,
        };
        let mut head = [0; HEADER_V2.len() + FRAME_HEAD];
        let got = self.fill(&mut head[..lead])?;
        let valid = got == lead && (lead == FRAME_HEAD || head.starts_with(&HEADER_V2));
        let Some(frame) = valid
            .then(|| whole_head(&head[lead - FRAME_HEAD..]))
            .flatten()
        else {
            self.rest.extend_from_slice(&head[..got]);
            return Ok(None);
        };
        self.ended = frame.tag == TAG_INDEX;
        let stored = frame.stored as usize;
        let (whole, stored_at) = match frame.codec {
            CODEC_ZSTD => (lead, 0),
            _ => (lead + stored, lead),
        };
        let mut buffer = self.buffers.zeroed(whole);
        buffer.buf[..lead].copy_from_slice(&head[..lead]);
        let mut zstd = (frame.codec == CODEC_ZSTD).then(|| self.buffers.zeroed(stored));
        let into = zstd.as_mut().unwrap_or(&mut buffer);
        let got = self.fill(&mut into.buf[stored_at..stored_at + stored])?;
        if got < stored {
            self.rest.extend_from_slice(&buffer.buf[..lead]);
            if let Some(zstd) = &zstd {
                self.rest.extend_from_slice(&zstd.buf[..got]);
            } else {
                self.rest.extend_from_slice(&buffer.buf[lead..lead + got]);
            }
            return Ok(None);
        }
        let lead_buffer = self.buffers.keep(buffer);
        let check = match zstd {
            Some(zstd) => Stored::Read(self.buffers.keep(zstd), 0..stored),
            None => Stored::Read(lead_buffer.clone(), lead..whole),
        };
        Ok(Some(Frame {
            lead: Source::Stream(lead_buffer),
            span: 0..whole,
            check: Check::new(check, frame, &self.buffers),
        }))
    }

    fn read(&self) -> u64 {
        self.read
    }
}

impl Reads<'_> {
    /// Reads into all of `buf` unless the input ends first; how many bytes it read.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut got = 0;
        while got < buf.len() {
            let n = self.input.read(&mut buf[got..], self.read)?;
            if n == 0 {
                self.eof = true;
                break;
            }
            (got, self.read) = (got + n, self.read + n as u64);
        }
        Ok(got)
    }
}

/// Buffers for frames and bodies, shared by the threads: each is kept for reuse once no
/// batch holds it (at most [`AHEAD`] bytes of them), so that frame after frame lands in
/// memory already mapped, not in fresh pages.
#[derive(Default)]
struct Buffers(Mutex<Vec<Arc<Segment>>>);

impl Buffers {
    /// An empty buffer with room for `len` bytes where a kept one has it.
    fn take(&self, len: usize) -> Segment {
        let mut kept = self.0.lock().expect("no panics");
        let free = |s: &Arc<Segment>| Arc::strong_count(s) == 1 && s.buf.capacity() >= len;
        let mut buffer = match kept.iter().position(free) {
            Some(i) => Arc::into_inner(kept.swap_remove(i)).expect("no batch holds it"),
            None => Segment::holding(Vec::with_capacity(len), 0),
        };
        buffer.buf.clear();
        buffer
    }

    /// A buffer of `len` bytes (zeros, or what it held before).
    fn zeroed(&self, len: usize) -> Segment {
        let mut buffer = self.take(len);
        buffer.buf.resize(len, 0);
        buffer.len = len;
        buffer
    }

    /// `buffer`, shared, and kept for reuse; the buffers no batch holds beyond [`AHEAD`]
    /// bytes of them go.
    fn keep(&self, buffer: Segment) -> Arc<Segment> {
        let buffer = Arc::new(buffer);
        let mut kept = self.0.lock().expect("no panics");
        let mut free = 0;
        kept.retain(|s| {
            let held = Arc::strong_count(s) > 1;
            free += if held { 0 } else { s.buf.capacity() };
            held || free <= AHEAD
        });
        kept.push(buffer.clone());
        buffer
    }
}
