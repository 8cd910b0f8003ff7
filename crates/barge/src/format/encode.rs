//! Writing archives: message serializers into a byte buffer, and a small [`Encoder`] over any
//! `Write` that checks names and nesting.

use std::io::{self, Write};

use super::{
    check_name, FormatError, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, DEFAULT_SPECIAL_MODE, HEADER,
    HEADER_EXTENDED, MAX_SYMLINK, PERM_MASK, SPECIAL_BLOCK, SPECIAL_CHAR, SPECIAL_FIFO, TAG_DIR,
    TAG_END, TAG_FILE, TAG_FILE64, TAG_HARDLINK, TAG_LINKED, TAG_OWNER, TAG_PERM, TAG_POP,
    TAG_SPECIAL, TAG_SYMLINK, TAG_TIME,
};
use crate::tree::{Device, Entry, Kind, Meta, Owner, Timestamp};

/// Appends the records of `entry`: `PERM` when its mode differs from `default` (all twelve
/// bits, as they are: landers decide which to apply), then `TIME`, `OWNER`, its `XATTR`s
/// and `LINKED` as far as it has them. Only an archive with the extended header flag may
/// hold more than `PERM`.
pub(crate) fn push_records(buf: &mut Vec<u8>, entry: &Entry<'_>, default: u32) {
    push_records_named(buf, entry, default, None);
}

/// [`push_records`], with a version 2 `OWNER` when `names` (user and group) are given.
pub(super) fn push_records_named(
    buf: &mut Vec<u8>,
    entry: &Entry<'_>,
    default: u32,
    names: Option<(&[u8], &[u8])>,
) {
    let mode = entry.meta.mode & PERM_MASK;
    if mode != default {
        buf.push(TAG_PERM);
        buf.extend_from_slice(&(mode as u16).to_le_bytes());
    }
    if let Some(Timestamp { sec, nsec }) = entry.meta.mtime {
        buf.push(TAG_TIME);
        buf.extend_from_slice(&sec.to_le_bytes());
        buf.extend_from_slice(&nsec.to_le_bytes());
    }
    if let Some(Owner { uid, gid }) = entry.meta.owner {
        buf.push(TAG_OWNER);
        buf.extend_from_slice(&uid.to_le_bytes());
        buf.extend_from_slice(&gid.to_le_bytes());
        if let Some((user, group)) = names {
            for name in [user, group] {
                let name = &name[..name.len().min(255)];
                buf.push(name.len() as u8);
                buf.extend_from_slice(name);
            }
        }
    }
    buf.extend_from_slice(entry.xattrs.0);
    if entry.link_id.is_some() {
        buf.push(TAG_LINKED);
    }
}

/// Appends a tag, a name and its NUL.
pub(super) fn push_named(buf: &mut Vec<u8>, tag: u8, name: &[u8]) {
    buf.push(tag);
    buf.extend_from_slice(name);
    buf.push(0);
}

/// Appends a `DIR` message with its records. The name must be valid.
pub(crate) fn push_dir(buf: &mut Vec<u8>, entry: &Entry<'_>) {
    push_records(buf, entry, DEFAULT_DIR_MODE);
    push_named(buf, TAG_DIR, entry.name);
}

/// Appends a `FILE` or `FILE64` header with its records; `size` data bytes must follow.
pub(crate) fn push_file_header(buf: &mut Vec<u8>, entry: &Entry<'_>, size: u64) {
    push_records(buf, entry, DEFAULT_FILE_MODE);
    match u32::try_from(size) {
        Ok(small) => {
            push_named(buf, TAG_FILE, entry.name);
            buf.extend_from_slice(&small.to_le_bytes());
        }
        Err(_) => {
            push_named(buf, TAG_FILE64, entry.name);
            buf.extend_from_slice(&size.to_le_bytes());
        }
    }
}

/// Appends a `SYMLINK` with its records (`PERM` never: a symlink has no mode of its own).
/// The target must be 1 to 4095 bytes without NUL.
pub(crate) fn push_symlink(buf: &mut Vec<u8>, entry: &Entry<'_>, target: &[u8]) {
    push_records(buf, &symlink_records(entry), DEFAULT_FILE_MODE);
    push_symlink_message(buf, entry.name, target);
}

/// What of `entry` a symlink's records hold: no mode, no link.
pub(super) fn symlink_records<'a>(entry: &Entry<'a>) -> Entry<'a> {
    Entry {
        meta: Meta {
            mode: DEFAULT_FILE_MODE,
            ..entry.meta
        },
        link_id: None,
        ..*entry
    }
}

/// Appends a `SYMLINK` message (its records written before).
pub(super) fn push_symlink_message(buf: &mut Vec<u8>, name: &[u8], target: &[u8]) {
    push_named(buf, TAG_SYMLINK, name);
    buf.extend_from_slice(&(target.len() as u16).to_le_bytes());
    buf.extend_from_slice(target);
}

/// Appends a `HARDLINK` to the entry numbered `target` (no records: the link shares them).
pub(crate) fn push_hard_link(buf: &mut Vec<u8>, name: &[u8], target: u64) {
    push_named(buf, TAG_HARDLINK, name);
    buf.extend_from_slice(&target.to_le_bytes());
}

/// Appends a `SPECIAL` for a fifo, character or block device (`entry.kind`) with its
/// records.
pub(crate) fn push_special(buf: &mut Vec<u8>, entry: &Entry<'_>, device: Device) {
    push_records(buf, entry, DEFAULT_SPECIAL_MODE);
    push_special_message(buf, entry, device);
}

/// Appends a `SPECIAL` message (its records written before).
pub(super) fn push_special_message(buf: &mut Vec<u8>, entry: &Entry<'_>, device: Device) {
    push_named(buf, TAG_SPECIAL, entry.name);
    buf.push(match entry.kind {
        Kind::Fifo => SPECIAL_FIFO,
        Kind::CharDevice => SPECIAL_CHAR,
        _ => SPECIAL_BLOCK,
    });
    buf.extend_from_slice(&device.major.to_le_bytes());
    buf.extend_from_slice(&device.minor.to_le_bytes());
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
    extended: bool,
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
    /// Starts an archive of core tags only (the header is written with the first flush).
    pub fn new(out: W) -> Encoder<W> {
        Encoder {
            out,
            buf: HEADER.to_vec(),
            extended: false,
            depth: 0,
            entries: 0,
        }
    }

    /// Starts an archive that may hold extended records (times, owners, extended
    /// attributes, symlinks, hard links, special files).
    pub fn extended(out: W) -> Encoder<W> {
        Encoder {
            buf: HEADER_EXTENDED.to_vec(),
            extended: true,
            ..Encoder::new(out)
        }
    }

    /// Creates directory `name` and enters it.
    pub fn dir(&mut self, name: &[u8], mode: u32) -> Result<(), EncodeError> {
        self.dir_with(&Entry::dir(name, Meta::with_mode(mode)))
    }

    /// Creates the directory `entry` with its metadata and enters it.
    pub fn dir_with(&mut self, entry: &Entry<'_>) -> Result<(), EncodeError> {
        self.check(entry)?;
        push_dir(&mut self.buf, entry);
        self.depth += 1;
        self.added()
    }

    /// Adds a file with the given content.
    pub fn file(&mut self, name: &[u8], mode: u32, data: &[u8]) -> Result<(), EncodeError> {
        self.file_with(&Entry::file(name, Meta::with_mode(mode)), data)
    }

    /// Adds the file `entry` with its metadata and the given content.
    pub fn file_with(&mut self, entry: &Entry<'_>, data: &[u8]) -> Result<(), EncodeError> {
        self.check(entry)?;
        push_file_header(&mut self.buf, entry, data.len() as u64);
        self.buf.extend_from_slice(data);
        self.added()
    }

    /// Adds a symlink to `target` (extended archives only).
    pub fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<(), EncodeError> {
        self.check_extended(entry)?;
        if target.is_empty() || target.len() > MAX_SYMLINK || target.contains(&0) {
            return Err(FormatError::BadSymlink.into());
        }
        push_symlink(&mut self.buf, entry, target);
        self.added()
    }

    /// Adds a hard link `name` to the entry numbered `target`, a file added with a
    /// `link_id` (extended archives only).
    pub fn hard_link(&mut self, name: &[u8], target: u64) -> Result<(), EncodeError> {
        self.check_extended(&Entry::new(name, Kind::File, Meta::default()))?;
        push_hard_link(&mut self.buf, name, target);
        self.added()
    }

    /// Adds a fifo or device (`entry.kind`; extended archives only).
    pub fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<(), EncodeError> {
        self.check_extended(entry)?;
        push_special(&mut self.buf, entry, device);
        self.added()
    }

    /// Checks what every entry must satisfy: a valid name, and records only in an
    /// extended archive.
    fn check(&self, entry: &Entry<'_>) -> Result<(), EncodeError> {
        check_name(entry.name)?;
        let meta = entry.meta;
        let records = meta.mtime.is_some() || meta.owner.is_some() || !entry.xattrs.is_empty();
        if (records || entry.link_id.is_some()) && !self.extended {
            return Err(FormatError::UnknownTag(TAG_TIME).into());
        }
        Ok(())
    }

    fn check_extended(&self, entry: &Entry<'_>) -> Result<(), EncodeError> {
        if !self.extended {
            return Err(FormatError::UnknownTag(TAG_SYMLINK).into());
        }
        self.check(entry)
    }

    fn added(&mut self) -> Result<(), EncodeError> {
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
