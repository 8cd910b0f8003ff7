//! Byte sources: where an archive read as a stream comes from. A [`ByteSource`] is a file
//! descriptor (pipe, socket, file, stdin) or any [`Read`] (a decrypted socket, an HTTP body);
//! [`ByteStream`] adds what every stream needs on top: a length limit (`--length`), skipping
//! to an offset (`--offset`), and stop-aware waits. The other form of input, a mapped region
//! of a file or block device, is random access and lives in [`crate::sys::map::Mapped`].

use std::io::{ErrorKind, Read};
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::io::read;

use crate::error::{Error, Result, TreePath};
use crate::format::{inflated_events, Decoder, Event, FormatError, Limits, Step};
use crate::interrupt::{retry, wait_readable, Cancel};
use crate::sys::queue::{Broken, QueueReader};

/// Bytes that arrive in order.
pub trait ByteSource {
    /// Reads what comes next into `buf` (at least one byte, or 0 at the end), waiting for it
    /// when none is there yet. `offset` is where the stream is, for messages. Fails once
    /// `cancel` is cancelled.
    fn read(&mut self, buf: &mut [u8], offset: u64, cancel: &Cancel) -> Result<usize>;

    /// Waits until [`ByteSource::read`] has something to return or `patience` has passed
    /// (then false); fails when `cancel` is cancelled meanwhile. A source that cannot tell
    /// answers true at once (the threaded engine then reads on instead of landing early).
    fn wait(&self, _patience: Option<Duration>, _cancel: &Cancel) -> Result<bool> {
        Ok(true)
    }
}

/// The stream position `offset`, as the "path" of a read error.
pub(crate) fn input_at(offset: u64) -> TreePath {
    TreePath(format!("<input at byte {offset}>").into_bytes())
}

/// A pipe, socket or file descriptor, read with `read(2)`; its waits see stop requests.
impl ByteSource for BorrowedFd<'_> {
    fn read(&mut self, buf: &mut [u8], offset: u64, cancel: &Cancel) -> Result<usize> {
        self.wait(None, cancel)?;
        retry(cancel, || read(*self, &mut *buf))
            .map_err(|e| Error::io("read archive", input_at(offset), e))
    }

    fn wait(&self, patience: Option<Duration>, cancel: &Cancel) -> Result<bool> {
        wait_readable(*self, patience, cancel)
    }
}

/// Any [`Read`]: a decrypting channel, an HTTP request body, a decompressor. Its blocking
/// reads are its own: a stop request is seen between them.
#[derive(Debug)]
pub struct ReadSource<R>(pub R);

impl<R: Read> ByteSource for ReadSource<R> {
    fn read(&mut self, buf: &mut [u8], offset: u64, cancel: &Cancel) -> Result<usize> {
        loop {
            cancel.check()?;
            match self.0.read(buf) {
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                other => return other.map_err(|e| Error::os("read archive", input_at(offset), e)),
            }
        }
    }
}

/// The queue in shared memory from a confined lander's parent (`sys::queue`); its waits see
/// stop requests.
impl ByteSource for QueueReader {
    fn read(&mut self, buf: &mut [u8], _offset: u64, cancel: &Cancel) -> Result<usize> {
        loop {
            if let Some(n) = self.take(buf)? {
                return Ok(n);
            }
            ByteSource::wait(self, None, cancel)?;
        }
    }

    fn wait(&self, patience: Option<Duration>, cancel: &Cancel) -> Result<bool> {
        self.wait_with(patience, |bell, patience| {
            wait_readable(bell, patience, cancel)
        })
    }
}

impl From<Broken> for Error {
    fn from(_: Broken) -> Error {
        let cause = std::io::Error::other("the queue's writer broke its protocol");
        Error::os("read archive", TreePath(b"<input queue>".to_vec()), cause)
    }
}

/// A [`ByteSource`] as an [`io::Read`](Read) (for a decompressor over it), stopping once
/// `cancel` is cancelled; its errors are I/O errors.
pub(crate) struct SourceReader<S> {
    source: S,
    cancel: Cancel,
    offset: u64,
}

impl<S> SourceReader<S> {
    pub(crate) fn new(source: S, cancel: Cancel) -> SourceReader<S> {
        SourceReader {
            source,
            cancel,
            offset: 0,
        }
    }
}

impl<S: ByteSource> Read for SourceReader<S> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let read = self.source.read(buf, self.offset, &self.cancel);
        let n = read.map_err(std::io::Error::other)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// An archive read as a stream from a [`ByteSource`], of which only a given number of bytes
/// may belong to the archive (`unpack --length`): what follows them is never read.
pub struct ByteStream<'a> {
    source: Box<dyn ByteSource + 'a>,
    /// Bytes of the archive not read yet, at most.
    left: u64,
    /// How many bytes the archive has, when that was given.
    length: Option<u64>,
    /// Ends reads and waits once cancelled.
    cancel: Cancel,
}

impl std::fmt::Debug for ByteStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteStream")
            .field("left", &self.left)
            .field("length", &self.length)
            .finish_non_exhaustive()
    }
}

impl<'a> ByteStream<'a> {
    /// The rest of the file descriptor `fd`, to its end.
    pub fn new(fd: BorrowedFd<'a>) -> ByteStream<'a> {
        ByteStream::from_source(fd)
    }

    /// The rest of `source`, to its end.
    pub fn from_source(source: impl ByteSource + 'a) -> ByteStream<'a> {
        ByteStream {
            source: Box::new(source),
            left: u64::MAX,
            length: None,
            cancel: Cancel::new(),
        }
    }

    /// Fails reads and waits once `cancel` is cancelled.
    pub fn cancel(self, cancel: Cancel) -> ByteStream<'a> {
        ByteStream { cancel, ..self }
    }

    /// The next `length` bytes are the archive: no more is read, and an input that ends
    /// before them is an error.
    pub fn limit(self, length: u64) -> ByteStream<'a> {
        ByteStream {
            left: length,
            length: Some(length),
            ..self
        }
    }

    /// Reads and drops the next `n` bytes (the archive starts after them: `--offset`).
    pub fn skip(&mut self, n: u64) -> Result<()> {
        let mut scratch = vec![0u8; n.min(1 << 16) as usize];
        let mut skipped = 0;
        while skipped < n {
            let want = (n - skipped).min(scratch.len() as u64) as usize;
            match self.read(&mut scratch[..want], skipped)? {
                0 => {
                    return Err(Error::InputTooShort {
                        needed: n,
                        got: skipped,
                    })
                }
                got => skipped += got as u64,
            }
        }
        Ok(())
    }

    /// Waits until the next read has something to return (bytes, or the end) or `patience`
    /// has passed (then false); fails when a stop is requested meanwhile.
    pub(crate) fn wait(&self, patience: Option<Duration>) -> Result<bool> {
        if self.left == 0 {
            return Ok(true);
        }
        self.source.wait(patience, &self.cancel)
    }

    /// Reads what comes next, up to `buf.len()` bytes (0 at the end); `offset` is where the
    /// stream is, for messages.
    pub(crate) fn read(&mut self, buf: &mut [u8], offset: u64) -> Result<usize> {
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.source.read(&mut buf[..want], offset, &self.cancel)?;
        if let (0, Some(length)) = (n, self.length) {
            let got = length - self.left;
            return Err(Error::InputTooShort {
                needed: length,
                got,
            });
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Decodes an archive read from `input` (a pipe, socket or file) with one buffer of
/// memory, calling `on_event` for each event; returns the number of entries.
pub fn read_events<E: From<Error>>(
    mut input: ByteStream<'_>,
    limits: Limits,
    mut on_event: impl FnMut(&Decoder, Event<'_>) -> std::result::Result<(), E>,
) -> std::result::Result<u64, E> {
    const BUFFER: usize = 1 << 20;
    let mut decoder = Decoder::new(limits);
    let mut buf = vec![0u8; BUFFER];
    let (mut start, mut end, mut eof, mut ended) = (0, 0, false, None);
    loop {
        match decoder.next(&buf[start..end], eof)? {
            Step::Event(event, n) => {
                start += n;
                match event {
                    Event::End { entries } => ended = Some(entries),
                    Event::Padding => {}
                    event => on_event(&decoder, event)?,
                }
            }
            Step::NeedMore => {
                // What is left is at most one incomplete group (records, an entry header, a
                // symlink target: under 270 KB, see docs/FORMAT.md), which the buffer holds.
                // It is decoded again once the bytes it is known to take are there.
                buf.copy_within(start..end, 0);
                (start, end) = (0, end - start);
                let wanted = decoder.wanted().clamp(end + 1, buf.len());
                while end < wanted && !eof {
                    let at = decoder.offset() + end as u64;
                    let n = input.read(&mut buf[end..], at)?;
                    eof = n == 0;
                    end += n;
                }
            }
            Step::Done => return Ok(ended.expect("Done only after the end")),
            Step::Inflate {
                consumed,
                stored,
                body: len,
            } => {
                // A zstd frame (version 2): its bytes, then its body, decoded whole.
                start += consumed;
                let mut frame = Vec::with_capacity(stored as usize);
                let held = (end - start).min(stored as usize);
                frame.extend_from_slice(&buf[start..start + held]);
                start += held;
                while frame.len() < stored as usize {
                    let want = (stored as usize - frame.len()).min(buf.len());
                    let n = input.read(&mut buf[..want], decoder.offset())?;
                    if n == 0 {
                        return Err(decoder.frame_error(FormatError::Truncated).into());
                    }
                    frame.extend_from_slice(&buf[..n]);
                    (start, end) = (0, 0);
                }
                let mut body = Vec::new();
                let inflated = crate::format::inflate(&frame, len, &mut body);
                inflated.map_err(|kind| decoder.frame_error(kind))?;
                inflated_events(&mut decoder, &body, |decoder, event| {
                    on_event(decoder, event)
                })?;
            }
        }
    }
}
