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

/// What is wrong with an archive. Each kind has a stable [`code`](FormatError::code) shared
/// with the JavaScript decoder and the test vectors.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The input does not start with `BARGE\0`.
    #[error("not a barge archive (bad magic)")]
    BadMagic,
    /// Unsupported format version.
    #[error("unsupported format version {0} (this barge reads versions 1 and 2)")]
    BadVersion(u8),
    /// Header flags must be 0 or 1 (version 1), 0 (version 2).
    #[error("unsupported header flags {0:#04x}")]
    BadFlags(u8),
    /// The input ends inside a message or before the end message.
    #[error("input ends inside the archive (truncated)")]
    Truncated,
    /// A tag outside 0..=5, or outside 0..=0x0c in an extended archive.
    #[error("unknown message tag {0:#04x}")]
    UnknownTag(u8),
    /// Records not followed by an entry.
    #[error("records (PERM, TIME, ...) not followed by an entry")]
    DanglingPerm,
    /// The end message inside a directory.
    #[error("end of archive inside a directory ({0} levels deep)")]
    EndInsideDir(usize),
    /// The end count differs from the number of entries.
    #[error("end count says {expected} entries but the archive has {actual}")]
    CountMismatch {
        /// Count stored in the end message.
        expected: u64,
        /// Entries actually decoded.
        actual: u64,
    },
    /// Bytes after the end message.
    #[error("bytes after the end of the archive")]
    TrailingBytes,
    /// `POP` at the root.
    #[error("pop would leave the destination root")]
    PopAtRoot,
    /// A `PERM` mode above 0o7777.
    #[error("invalid mode {0:#o}")]
    BadMode(u16),
    /// A zero-length name.
    #[error("empty name")]
    EmptyName,
    /// A name longer than 255 bytes.
    #[error("name longer than 255 bytes")]
    NameTooLong,
    /// A name containing a NUL byte (only an encoder can meet one).
    #[error("name contains a NUL byte")]
    NulInName,
    /// A name containing `/`.
    #[error("name contains '/'")]
    SlashInName,
    /// A name that is `.` or `..`.
    #[error("name is '.' or '..'")]
    DotName,
    /// `FILE64` used for a size that fits `FILE`.
    #[error("FILE64 used for a size below 2^32")]
    NoncanonicalFile64,
    /// A name used twice in one directory.
    #[error("duplicate name in this directory")]
    DuplicateName,
    /// Nesting deeper than the limit.
    #[error("nesting deeper than the limit of {0} (see --max-depth)")]
    TooDeep(usize),
    /// More entries than the limit.
    #[error("more than {0} entries (see --max-entries)")]
    TooManyEntries(u64),
    /// More file bytes than the limit.
    #[error("more than {0} bytes of file data (see --max-bytes)")]
    TooManyBytes(u64),
    /// Entries estimated to take more disk space than the limit.
    #[error("entries taking more than {0} bytes of disk space (--max-space; serve's --quota)")]
    TooMuchSpace(u64),
    /// A record out of order or repeated.
    #[error("record out of order or repeated (PERM, TIME, OWNER, XATTR by name, LINKED)")]
    RecordOrder,
    /// A record the entry after it may not carry.
    #[error("{0} record on an entry that may not carry one")]
    MisplacedRecord(&'static str),
    /// `TIME` nanoseconds of 10^9 or more.
    #[error("time with {0} nanoseconds")]
    BadTime(u32),
    /// An `XATTR` name that is empty or holds a NUL.
    #[error("extended attribute name is empty or contains NUL")]
    BadXattr,
    /// An `XATTR` value, or an entry's attributes together, above the bounds.
    #[error("extended attributes larger than the format allows")]
    XattrTooLarge,
    /// A `SYMLINK` target that is empty, too long or holds a NUL.
    #[error("symlink target is empty, longer than 4095 bytes or contains NUL")]
    BadSymlink,
    /// A `HARDLINK` whose index names no earlier `LINKED` file.
    #[error("hard link to entry {0}, which is not an earlier linked regular file")]
    BadLink(u64),
    /// A `SPECIAL` of an unknown type, or a fifo with a device number.
    #[error("special file of unknown type or a fifo with a device number")]
    BadSpecial,
    /// A frame head with an unknown codec or impossible lengths.
    #[error("segment or index frame with an unknown codec or bad lengths")]
    BadFrame,
    /// A zstd frame that is not one frame decompressing to exactly its body.
    #[error("zstd frame does not decompress to its stated body ({0})")]
    BadZstd(String),
    /// A zstd frame given to a decoder without zstd.
    #[error("zstd-compressed segment, which this decoder cannot read")]
    UnsupportedCodec,
    /// A digest that does not match the bytes it covers.
    #[error("{0} digest does not match its bytes: the archive is corrupt")]
    BadDigest(&'static str),
    /// A segment's `START` that does not restate where the archive is.
    #[error("segment start does not restate where the archive is")]
    BadStart,
    /// `ROOT` anywhere but as the first group of the first segment.
    #[error("root record anywhere but first")]
    MisplacedRoot,
    /// A name below the previous name of its directory (version 2 sorts them).
    #[error("name below the previous one in this directory")]
    Unsorted,
    /// An `EXTENT` out of order, empty, past its file, without a file, or missing.
    #[error("file extent out of order, empty, past the file's size, unexpected or missing")]
    BadExtent,
    /// An index that is malformed or disagrees with the segments.
    #[error("index malformed or disagreeing with the segments")]
    BadIndex,
    /// A footer whose counts or index offset disagree with the archive.
    #[error("footer disagrees with the archive")]
    BadFooter,
}

impl FormatError {
    /// The stable code of this error, as used by the test vectors and the JS decoder.
    pub fn code(&self) -> &'static str {
        match self {
            FormatError::BadMagic => "bad-magic",
            FormatError::BadVersion(_) => "bad-version",
            FormatError::BadFlags(_) => "bad-flags",
            FormatError::Truncated => "truncated",
            FormatError::UnknownTag(_) => "unknown-tag",
            FormatError::DanglingPerm => "dangling-perm",
            FormatError::EndInsideDir(_) => "end-inside-dir",
            FormatError::CountMismatch { .. } => "count-mismatch",
            FormatError::TrailingBytes => "trailing-bytes",
            FormatError::PopAtRoot => "pop-at-root",
            FormatError::BadMode(_) => "bad-mode",
            FormatError::EmptyName => "empty-name",
            FormatError::NameTooLong => "name-too-long",
            FormatError::NulInName => "nul-in-name",
            FormatError::SlashInName => "slash-in-name",
            FormatError::DotName => "dot-name",
            FormatError::NoncanonicalFile64 => "noncanonical-file64",
            FormatError::DuplicateName => "duplicate-name",
            FormatError::TooDeep(_) => "too-deep",
            FormatError::TooManyEntries(_) => "too-many-entries",
            FormatError::TooManyBytes(_) => "too-many-bytes",
            FormatError::TooMuchSpace(_) => "too-much-space",
            FormatError::RecordOrder => "record-order",
            FormatError::MisplacedRecord(_) => "misplaced-record",
            FormatError::BadTime(_) => "bad-time",
            FormatError::BadXattr => "bad-xattr",
            FormatError::XattrTooLarge => "xattr-too-large",
            FormatError::BadSymlink => "bad-symlink",
            FormatError::BadLink(_) => "bad-link",
            FormatError::BadSpecial => "bad-special",
            FormatError::BadFrame => "bad-frame",
            FormatError::BadZstd(_) => "bad-zstd",
            FormatError::UnsupportedCodec => "unsupported-codec",
            FormatError::BadDigest(_) => "bad-digest",
            FormatError::BadStart => "bad-start",
            FormatError::MisplacedRoot => "misplaced-root",
            FormatError::Unsorted => "unsorted",
            FormatError::BadExtent => "bad-extent",
            FormatError::BadIndex => "bad-index",
            FormatError::BadFooter => "bad-footer",
        }
    }

    /// The limit of [`Limits`] the archive broke, if that is what is wrong with it.
    pub fn limit(&self) -> Option<Limit> {
        match self {
            FormatError::TooDeep(_) => Some(Limit::Depth),
            FormatError::TooManyEntries(_) => Some(Limit::Entries),
            FormatError::TooManyBytes(_) => Some(Limit::Bytes),
            FormatError::TooMuchSpace(_) => Some(Limit::Space),
            _ => None,
        }
    }
}

/// One of the [`Limits`] an archive can break: a front end answers each its own way (serve:
/// 413 for bytes and entries, 507 for its quota's space).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Limit {
    /// `max_depth`.
    Depth,
    /// `max_entries`.
    Entries,
    /// `max_bytes`.
    Bytes,
    /// `max_space`.
    Space,
}

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
