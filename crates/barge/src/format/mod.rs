//! The barge archive format (see docs/FORMAT.md). Version 1: a header, a depth-first stream
//! of entries (`DIR`/`FILE`/`FILE64`, and with the extended flag `SYMLINK`/`HARDLINK`/
//! `SPECIAL`) and `POP`s, records qualifying the entry after them (`PERM`; extended: `TIME`,
//! `OWNER`, `XATTR`, `LINKED`), and an `END` count. Version 2: the same messages in segments
//! (raw or zstd) that each restate where they start, with digests, sparse and chunked files
//! (`EXTFILE`, `EXTENT`), a `ROOT` record, an index and a footer.

mod decode;
pub mod encode;
pub mod index;
mod rewrite;
pub(crate) mod segments;
pub mod sniff;
mod v2;

pub use crate::error::{FormatError, Limit};
pub(crate) use decode::{data_digests_match, decode_each, decode_with, inflated_events};
pub use decode::{decode_all, space, Decoder, Event, Limits, Step};
pub use encode::{EncodeError, Encoder};
pub use rewrite::rewrite_v2;
pub use segments::{SegmentEncoder, CHUNK, SEGMENT_TARGET};
pub use v2::inflate;
pub(crate) use v2::{differs as digest_differs, head as frame_head, Head as FrameHead};

/// The 8-byte header of a version 1 archive with no flags (core tags only).
pub const HEADER: [u8; 8] = *b"BARGE\0\x01\x00";
/// Header flag: extended tags (0x06-0x0C) may appear.
pub const FLAG_EXTENDED: u8 = 0x01;
/// The 8-byte header of a version 1 archive that may hold extended records.
pub const HEADER_EXTENDED: [u8; 8] = *b"BARGE\0\x01\x01";
/// The 8-byte header of a version 2 archive.
pub const HEADER_V2: [u8; 8] = *b"BARGE\0\x02\x00";
/// Tag of a sparse or chunked file, whose data comes in `EXTENT`s (version 2).
pub const TAG_EXTFILE: u8 = 0x0D;
/// Tag of one data extent of the open `EXTFILE` (version 2).
pub const TAG_EXTENT: u8 = 0x0E;
/// Tag of the message that begins every segment body (version 2).
pub const TAG_START: u8 = 0x10;
/// Tag of the root directory's record group (version 2).
pub const TAG_ROOT: u8 = 0x11;
/// Frame tag of a segment (version 2).
pub const TAG_SEGMENT: u8 = 0x20;
/// Frame tag of the index (version 2).
pub const TAG_INDEX: u8 = 0x21;
/// A frame stored as it is.
pub const CODEC_RAW: u8 = 0;
/// A frame stored as one zstd frame.
pub const CODEC_ZSTD: u8 = 1;
/// Largest body of a version 2 frame.
pub const MAX_BODY: u32 = 1 << 26;
/// Largest zstd window (log2) a version 2 frame may need.
pub const MAX_WINDOW_LOG: u32 = 27;
/// Bytes of a version 2 frame head: tag, codec, stored, body, digest.
pub const FRAME_HEAD: usize = 18;
/// Bytes of the version 2 footer.
pub const FOOTER: usize = 37;
/// `START`'s `open` when no `EXTFILE` is open.
pub const NO_FILE: u64 = u64::MAX;

/// The format's digest (XXH3-64, seed 0) of `bytes`.
pub fn digest(bytes: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(bytes)
}

/// The format's [`digest`] of bytes that come in pieces (`Hasher::write`, then `finish`).
pub(crate) type Digester = twox_hash::XxHash3_64;

/// Tag of the end message.
pub const TAG_END: u8 = 0x00;
/// Tag of a file whose size fits in 32 bits.
pub const TAG_FILE: u8 = 0x01;
/// Tag of a directory (created and entered).
pub const TAG_DIR: u8 = 0x02;
/// Tag that leaves the current directory.
pub const TAG_POP: u8 = 0x03;
/// Tag of a file of 2^32 bytes or more.
pub const TAG_FILE64: u8 = 0x04;
/// Tag of the permission record for the next entry.
pub const TAG_PERM: u8 = 0x05;
/// Tag of the modification-time record (extended).
pub const TAG_TIME: u8 = 0x06;
/// Tag of the owner record (extended).
pub const TAG_OWNER: u8 = 0x07;
/// The `XATTR` record's tag and bounds are the model's, which holds extended attributes in
/// archive form ([`Xattrs`](crate::tree::Xattrs)).
pub use crate::tree::{MAX_XATTRS, MAX_XATTR_VALUE, TAG_XATTR};
/// Tag of the record marking a file later hard links name (extended).
pub const TAG_LINKED: u8 = 0x09;
/// Tag of a symlink entry (extended).
pub const TAG_SYMLINK: u8 = 0x0A;
/// Tag of a hard-link entry (extended).
pub const TAG_HARDLINK: u8 = 0x0B;
/// Tag of a special-file entry: fifo, character or block device (extended).
pub const TAG_SPECIAL: u8 = 0x0C;
/// `SPECIAL` type of a fifo.
pub const SPECIAL_FIFO: u8 = 1;
/// `SPECIAL` type of a character device.
pub const SPECIAL_CHAR: u8 = 2;
/// `SPECIAL` type of a block device.
pub const SPECIAL_BLOCK: u8 = 3;
/// Longest symlink target in bytes.
pub const MAX_SYMLINK: usize = 4095;
/// Longest legal name in bytes.
pub const MAX_NAME: usize = 255;
/// Mode of a file without a `PERM` record.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of a directory without a `PERM` record.
pub const DEFAULT_DIR_MODE: u32 = 0o755;
/// Mode of a special file without a `PERM` record.
pub const DEFAULT_SPECIAL_MODE: u32 = 0o644;
/// Bits a `PERM` record may carry (permissions plus setuid, setgid and sticky).
pub const PERM_MASK: u32 = 0o7777;
/// Default nesting limit.
pub const DEFAULT_MAX_DEPTH: usize = 1024;
/// Most entries an unpack accepts unless told otherwise (10 × 1024²): far above real trees,
/// it bounds what a stranger's archive can make a server create and remember.
pub const DEFAULT_MAX_ENTRIES: u64 = 10 << 20;

/// Checks a name against the rules every entry name obeys (1..=255 bytes, no NUL, no `/`,
/// not `.` or `..`).
pub(crate) fn check_name(name: &[u8]) -> Result<(), FormatError> {
    // One pass for both bytes: names are short, and a search per byte costs more.
    let (nul, slash) = (name.iter()).fold((false, false), |(nul, slash), &b| {
        (nul | (b == 0), slash | (b == b'/'))
    });
    match name {
        [] => Err(FormatError::EmptyName),
        b"." | b".." => Err(FormatError::DotName),
        _ if name.len() > MAX_NAME => Err(FormatError::NameTooLong),
        _ if nul => Err(FormatError::NulInName),
        _ if slash => Err(FormatError::SlashInName),
        _ => Ok(()),
    }
}
