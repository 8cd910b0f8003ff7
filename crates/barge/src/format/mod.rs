//! The barge archive format v1 (see docs/FORMAT.md): a header, a depth-first stream of
//! `DIR`/`FILE`/`FILE64`/`POP` messages with optional `PERM` records, and an `END` count.

mod decode;
pub mod encode;

pub(crate) use decode::decode_each;
pub use decode::{decode_all, Decoder, Event, Limits, Step};
pub use encode::{EncodeError, Encoder};

/// The 8-byte header of a version 1 archive with no flags.
pub const HEADER: [u8; 8] = *b"BARGE\0\x01\x00";
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
/// Longest legal name in bytes.
pub const MAX_NAME: usize = 255;
/// Mode of a file without a `PERM` record.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of a directory without a `PERM` record.
pub const DEFAULT_DIR_MODE: u32 = 0o755;
/// Permission bits that are honoured; setuid, setgid and sticky never are.
pub const MODE_MASK: u32 = 0o777;
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
    #[error("unsupported format version {0} (this barge reads version 1)")]
    BadVersion(u8),
    /// Header flags must be zero.
    #[error("unsupported header flags {0:#04x}")]
    BadFlags(u8),
    /// The input ends inside a message or before the end message.
    #[error("input ends inside the archive (truncated)")]
    Truncated,
    /// A tag outside 0..=5.
    #[error("unknown message tag {0:#04x}")]
    UnknownTag(u8),
    /// A `PERM` record not followed by an entry.
    #[error("permission record is not followed by a dir or file")]
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
        }
    }
}

/// Checks a name against the rules every entry name obeys (1..=255 bytes, no NUL, no `/`,
/// not `.` or `..`).
pub(crate) fn check_name(name: &[u8]) -> Result<(), FormatError> {
    match name {
        [] => Err(FormatError::EmptyName),
        b"." | b".." => Err(FormatError::DotName),
        _ if name.len() > MAX_NAME => Err(FormatError::NameTooLong),
        _ if name.contains(&0) => Err(FormatError::NulInName),
        _ if name.contains(&b'/') => Err(FormatError::SlashInName),
        _ => Ok(()),
    }
}
