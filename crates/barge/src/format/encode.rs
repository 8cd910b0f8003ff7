//! Writing archives: message serializers into a byte buffer, and a small [`Encoder`] over any
//! `Write` that checks names and nesting.

use std::io::{self, Write};

use super::{
    check_name, FormatError, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, HEADER, PERM_MASK, TAG_DIR,
    TAG_END, TAG_FILE, TAG_FILE64, TAG_PERM, TAG_POP,
};

/// Appends a `PERM` record when `mode` differs from `default`. Setuid, setgid and sticky
/// are recorded as they are (landers never apply them), so the vectors re-encode exactly.
fn push_perm(buf: &mut Vec<u8>, mode: u32, default: u32) {
    let mode = mode & PERM_MASK;
    if mode != default {
        buf.push(TAG_PERM);
        buf.extend_from_slice(&(mode as u16).to_le_bytes());
    }
}

/// Appends a `DIR` message (with `PERM` when needed). The name must be valid.
pub(crate) fn push_dir(buf: &mut Vec<u8>, name: &[u8], mode: u32) {
    push_perm(buf, mode, DEFAULT_DIR_MODE);
    buf.push(TAG_DIR);
    buf.extend_from_slice(name);
    buf.push(0);
}

/// Appends a `FILE` or `FILE64` header (with `PERM` when needed); `size` data bytes must follow.
pub(crate) fn push_file_header(buf: &mut Vec<u8>, name: &[u8], mode: u32, size: u64) {
    push_perm(buf, mode, DEFAULT_FILE_MODE);
    match u32::try_from(size) {
        Ok(small) => {
            buf.push(TAG_FILE);
            buf.extend_from_slice(name);
            buf.push(0);
            buf.extend_from_slice(&small.to_le_bytes());
        }
        Err(_) => {
            buf.push(TAG_FILE64);
            buf.extend_from_slice(name);
            buf.push(0);
            buf.extend_from_slice(&size.to_le_bytes());
        }
    }
}

/// Appends a `POP` message.
pub(crate) fn push_pop(buf: &mut Vec<u8>) {
    buf.push(TAG_POP);
}

/// Appends the end message.
pub(crate) fn push_end(buf: &mut Vec<u8>, entries: u64) {
    buf.push(TAG_END);
    buf.extend_from_slice(&entries.to_le_bytes());
}

/// An archive writer over any `Write` that rejects invalid names and nesting, for tests,
/// tools and programs that build archives from memory.
pub struct Encoder<W: Write> {
    out: W,
    buf: Vec<u8>,
    depth: usize,
    entries: u64,
}

/// Errors of [`Encoder`]: bad input or a failed write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The entry breaks a format rule.
    #[error("{0}")]
    Format(#[from] FormatError),
    /// The writer failed.
    #[error("write failed: {0}")]
    Io(#[from] io::Error),
}

impl<W: Write> Encoder<W> {
    /// Starts an archive (the header is written with the first flush).
    pub fn new(out: W) -> Encoder<W> {
        Encoder {
            out,
            buf: HEADER.to_vec(),
            depth: 0,
            entries: 0,
        }
    }

    /// Creates directory `name` and enters it.
    pub fn dir(&mut self, name: &[u8], mode: u32) -> Result<(), EncodeError> {
        check_name(name)?;
        push_dir(&mut self.buf, name, mode);
        self.depth += 1;
        self.entries += 1;
        self.flush_if_large()
    }

    /// Adds a file with the given content.
    pub fn file(&mut self, name: &[u8], mode: u32, data: &[u8]) -> Result<(), EncodeError> {
        check_name(name)?;
        push_file_header(&mut self.buf, name, mode, data.len() as u64);
        self.buf.extend_from_slice(data);
        self.entries += 1;
        self.flush_if_large()
    }

    /// Leaves the current directory.
    pub fn pop(&mut self) -> Result<(), EncodeError> {
        if self.depth == 0 {
            return Err(FormatError::PopAtRoot.into());
        }
        self.depth -= 1;
        push_pop(&mut self.buf);
        self.flush_if_large()
    }

    /// Closes every open directory, writes the end message and returns the writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        while self.depth > 0 {
            self.pop()?;
        }
        push_end(&mut self.buf, self.entries);
        self.out.write_all(&self.buf)?;
        self.out.flush()?;
        Ok(self.out)
    }

    fn flush_if_large(&mut self) -> Result<(), EncodeError> {
        if self.buf.len() >= 1 << 16 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }
}
