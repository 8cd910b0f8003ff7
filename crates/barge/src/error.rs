//! The one error type of the library: every message names the entry and what went wrong.
//! What can be wrong with an archive ([`FormatError`], [`Limit`]) is here too, below the
//! format that finds it (`crate::format` re-exports both), so that neither module needs
//! the other's.

use std::fmt;
use std::io;

use serde::{Deserialize, Serialize};

/// A path inside a tree, kept as raw bytes and shown with non-UTF-8 bytes escaped.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreePath(pub Vec<u8>);

impl TreePath {
    /// Joins directory names and a final name (which may be empty) with `/`.
    pub fn join<'a>(dirs: impl IntoIterator<Item = &'a [u8]>, name: &'a [u8]) -> TreePath {
        let mut path = Vec::new();
        for part in dirs.into_iter().chain([name]) {
            if !path.is_empty() && !part.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(part);
        }
        TreePath(path)
    }
}

/// Longest path a message shows, in characters: a longer one keeps its last components
/// behind `.../` (a 255-byte name 1,024 levels deep would make a 262 KB line).
const SHOWN_PATH: usize = 300;

impl fmt::Display for TreePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str(".");
        }
        let shown = escape_bytes(&self.0);
        let chars = shown.chars().count();
        if chars <= SHOWN_PATH {
            return f.write_str(&shown);
        }
        let cut = shown
            .char_indices()
            .nth(chars - SHOWN_PATH)
            .map_or(0, |(i, _)| i);
        // From the first component boundary in the tail; a single long name is cut.
        let tail = &shown[cut..];
        let tail = tail.find('/').map_or(tail, |slash| &tail[slash + 1..]);
        let levels = self.0.iter().filter(|&&b| b == b'/').count() + 1;
        write!(f, "({levels} levels) .../{tail}")
    }
}

/// Renders bytes for humans: valid UTF-8 stays as is except control characters,
/// invisible and bidirectional formatting characters (which could make a name look like
/// another) and backslashes; everything else becomes `\xNN` (or `\u{NNNN}`).
pub fn escape_bytes(bytes: &[u8]) -> String {
    escape(bytes, true)
}

/// Renders a peer's message (a receiver's refusal or error) for humans as [`escape_bytes`]
/// does, but with its backslashes as they are: its paths come escaped already.
pub(crate) fn escape_message(text: &str) -> String {
    escape(text.as_bytes(), false)
}

fn escape(bytes: &[u8], backslashes: bool) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' if backslashes => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\t' => out.push_str("\\t"),
                c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
                c if is_invisible_format(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
                c => out.push(c),
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Characters that change how text around them is shown, or show as nothing: bidirectional
/// embeddings, overrides, isolates and marks, zero-width characters, line and paragraph
/// separators, and the byte-order mark.
fn is_invisible_format(c: char) -> bool {
    matches!(c,
        '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}'
        | '\u{2060}'..='\u{2069}' | '\u{feff}')
}

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

    /// The limit of [`Limits`](crate::format::Limits) the archive broke, if that is what is wrong with it.
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

/// One of the [`Limits`](crate::format::Limits) an archive can break: a front end answers each its own way (serve:
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

/// Everything that can go wrong in barge.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed on an entry. The message says it in words ("cannot create the
    /// directory: permission denied"); [`Error::detail`] names the call and the errno.
    /// (The OS error is part of the message, not a `source`, so a chain of causes does not
    /// print it twice.)
    #[error("{path}: {}", io_problem(.op, .cause))]
    Io {
        /// The operation, e.g. `openat` or `sendfile`.
        op: &'static str,
        /// The entry, relative to the root of the tree (or the path given by the user).
        path: TreePath,
        /// The error the kernel returned.
        cause: io::Error,
    },
    /// The archive is malformed or breaks a limit.
    #[error("archive byte {offset}: {path}: {kind} [{code}]", code = .kind.code())]
    Format {
        /// Offset of the first byte of the message in which the problem was found.
        offset: u64,
        /// The entry concerned (the directory for `pop`/`end` problems).
        path: TreePath,
        /// What is wrong.
        kind: FormatError,
    },
    /// An entry exists in the destination where the archive wants to create one.
    #[error("{path}: already exists in the destination (as {found}); refusing to overwrite or follow it")]
    Exists {
        /// The entry.
        path: TreePath,
        /// What is there, e.g. `a symlink`.
        found: &'static str,
    },
    /// A path given by the user is not a directory where one is needed.
    #[error("{path} is {found}, not a directory; refusing to follow or replace it")]
    NotADirectory {
        /// The path.
        path: TreePath,
        /// What is there, e.g. `a symlink`.
        found: &'static str,
    },
    /// An argument of an operation cannot be used (an input's name, an exclude pattern).
    #[error("{arg}: {problem}")]
    Argument {
        /// The argument, as the user gave it.
        arg: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The input holds fewer bytes than `--offset` and `--length` ask for.
    #[error("the input has {got} bytes where {needed} were asked for (see --offset and --length)")]
    InputTooShort {
        /// Bytes asked for.
        needed: u64,
        /// Bytes there are.
        got: u64,
    },
    /// A source file changed while it was being read.
    #[error("{path}: changed size while being read ({expected} bytes at open, {actual} read)")]
    Changed {
        /// The entry.
        path: TreePath,
        /// Size seen by fstat.
        expected: u64,
        /// Bytes actually available.
        actual: u64,
    },
    /// The operation's [`Cancel`](crate::interrupt::Cancel) was cancelled, by a signal (0:
    /// by the program); the file being written was removed. SIGBUS means the mapped
    /// archive file shrank.
    #[error("{}", interrupted(*.signal))]
    Interrupted {
        /// The signal.
        signal: i32,
    },
    /// Input ended in the middle of a file's data; the partial file was removed.
    #[error("archive byte {offset}: {path}: input ended after {written} of {size} bytes [truncated]; the partial file was removed")]
    Short {
        /// Offset of the file's message.
        offset: u64,
        /// The entry.
        path: TreePath,
        /// Bytes written before the input ended.
        written: u64,
        /// Bytes announced.
        size: u64,
    },
    /// A hard link to a file that `--strip-components`, a PATH selection or `--exclude`
    /// left out.
    #[error("{path}: hard link to {target}, which is left out (--strip-components, PATHs or --exclude): nothing to link to")]
    StrippedLink {
        /// The hard link, as the archive names it.
        path: TreePath,
        /// The file it links to, as the archive names it.
        target: TreePath,
    },
    /// A PATH given to select entries names none in the archive.
    #[error("{path}: not found in the archive")]
    NotInArchive {
        /// The PATH as given.
        path: TreePath,
    },
    /// An update listing (see [`crate::listing`]) is malformed or breaks a limit.
    #[error("update listing byte {offset}: {problem}")]
    Listing {
        /// Offset of the first byte of the record in which the problem was found.
        offset: u64,
        /// What is wrong.
        problem: String,
    },
    /// The confined lander (see [`crate::confine`]) failed with this error of its own, or
    /// died without reporting one.
    #[error("{}", .0.message)]
    Confined(Box<Confined>),
    /// A transfer over the network failed (see [`crate::net`]).
    #[error("{message}")]
    Net {
        /// What failed.
        kind: NetError,
        /// What happened, for people; never a key.
        message: String,
    },
}

/// A confined lander's error, as it crossed the process boundary: its kind and the fields a
/// caller decides on, typed, and its message as the child's error showed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Confined {
    /// What failed.
    pub kind: ConfinedKind,
    /// The OS error number, of an `io` error.
    pub errno: Option<i32>,
    /// The entry concerned, where the error names one.
    pub path: Option<TreePath>,
    /// The archive offset of a format error or a short file.
    pub offset: Option<u64>,
    /// A format error's stable code (see [`FormatError::code`]).
    pub code: Option<String>,
    /// The limit a format error says the archive broke.
    pub limit: Option<Limit>,
    /// The child's message, as its error shows it.
    pub message: String,
}

/// What a confined lander's error was: the [`Error`] variant it came from (as
/// [`Error::kind`] names it), or a failure of the child itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum ConfinedKind {
    /// [`Error::Io`].
    Io,
    /// [`Error::Format`].
    Format,
    /// [`Error::Exists`].
    Exists,
    /// [`Error::NotADirectory`].
    NotADirectory,
    /// [`Error::Argument`].
    Argument,
    /// [`Error::InputTooShort`].
    InputTooShort,
    /// [`Error::Changed`].
    Changed,
    /// [`Error::Interrupted`].
    Interrupted,
    /// [`Error::Short`].
    Short,
    /// [`Error::StrippedLink`].
    StrippedLink,
    /// [`Error::NotInArchive`].
    NotInArchive,
    /// [`Error::Listing`].
    Listing,
    /// [`Error::Net`] (a lander has no network: a bug if ever seen).
    Net,
    /// The sandbox was unavailable, and landing unconfined was not allowed.
    Unconfined,
    /// The child did not understand its arguments (a parent of another version).
    Request,
    /// The child ended without a report (a crash, a kill).
    Died,
    /// The child wrote what it never writes on its report channel (a bug, or a child taken
    /// over by its input).
    Garbled,
}

impl Confined {
    /// An error of the child itself, with no entry, offset or errno.
    pub(crate) fn new(kind: ConfinedKind, message: String) -> Confined {
        Confined {
            kind,
            errno: None,
            path: None,
            offset: None,
            code: None,
            limit: None,
            message,
        }
    }
}

impl From<Error> for Confined {
    /// What the child reports of its error.
    fn from(error: Error) -> Confined {
        if let Error::Confined(confined) = error {
            return *confined;
        }
        let kind = match &error {
            Error::Io { .. } => ConfinedKind::Io,
            Error::Format { .. } => ConfinedKind::Format,
            Error::Exists { .. } => ConfinedKind::Exists,
            Error::NotADirectory { .. } => ConfinedKind::NotADirectory,
            Error::Argument { .. } => ConfinedKind::Argument,
            Error::InputTooShort { .. } => ConfinedKind::InputTooShort,
            Error::Changed { .. } => ConfinedKind::Changed,
            Error::Interrupted { .. } => ConfinedKind::Interrupted,
            Error::Short { .. } => ConfinedKind::Short,
            Error::StrippedLink { .. } => ConfinedKind::StrippedLink,
            Error::NotInArchive { .. } => ConfinedKind::NotInArchive,
            Error::Listing { .. } => ConfinedKind::Listing,
            Error::Confined(_) | Error::Net { .. } => ConfinedKind::Net,
        };
        let mut confined = Confined::new(kind, error.to_string());
        match error {
            Error::Io { path, cause, .. } => {
                confined.errno = cause.raw_os_error();
                confined.path = Some(path);
            }
            Error::Format { offset, path, kind } => {
                confined.offset = Some(offset);
                confined.path = Some(path);
                confined.code = Some(kind.code().into());
                confined.limit = kind.limit();
            }
            Error::Short { offset, path, .. } => {
                confined.offset = Some(offset);
                confined.path = Some(path);
            }
            Error::Exists { path, .. }
            | Error::NotADirectory { path, .. }
            | Error::Changed { path, .. }
            | Error::StrippedLink { path, .. }
            | Error::NotInArchive { path } => confined.path = Some(path),
            _ => {}
        }
        confined
    }
}

/// How a network transfer failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NetError {
    /// The peer does not have the key (or is not a barge peer).
    Authentication,
    /// A message failed its authentication check after the handshake: changed, replayed,
    /// reordered or dropped on the way.
    Tampered,
    /// The connection ended before the sender's authenticated end of the stream.
    Truncated,
    /// The peer sent nothing for longer than the timeout.
    Timeout,
    /// An authenticated peer broke the protocol (another version, a bug).
    Protocol,
    /// The receiver refused the transfer or failed to land it (its message says why).
    Remote,
}

impl NetError {
    /// The stable name, as [`Error::kind`] gives it.
    pub fn name(self) -> &'static str {
        match self {
            NetError::Authentication => "authentication",
            NetError::Tampered => "tampered",
            NetError::Truncated => "truncated",
            NetError::Timeout => "timeout",
            NetError::Protocol => "protocol",
            NetError::Remote => "remote",
        }
    }
}

fn interrupted(signal: i32) -> String {
    if signal == 0 {
        return "cancelled; the file being written was removed".into();
    }
    if signal == libc::SIGBUS {
        return "the archive file shrank while it was read (another process truncated or \
                rewrote it); the file being written was removed"
            .into();
    }
    format!("interrupted by {}", signal_name(signal))
}

/// The name of a signal, for messages.
pub(crate) fn signal_name(signal: i32) -> String {
    match signal {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGPIPE => "SIGPIPE".into(),
        libc::SIGBUS => "SIGBUS".into(),
        other => format!("signal {other}"),
    }
}

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in an [`Error::Io`], in words: "cannot create directory: permission
/// denied".
pub(crate) fn io_problem(op: &str, cause: &io::Error) -> String {
    format!("{}: {}", action(op), reason(cause))
}

/// What an [`Error::Io`]'s operation was doing, in words.
fn action(op: &str) -> String {
    // GNU coreutils' words where they have them ("cannot access", "cannot create directory").
    let words = match op {
        "statx" | "fstat" | "fstatat" | "stat" => "cannot access",
        "open directory" | "reopen directory" | "dup directory" => "cannot open directory",
        "open" | "openat" | "dup" => "cannot open",
        "reopen" => "cannot reopen",
        "reopen a replaced file" => "another file took its name while it was copied; not reopened",
        "getdents64" => "cannot read directory",
        "read" | "pread" | "read archive" | "mmap" | "poll" => "cannot read",
        "write" | "pwrite" | "write archive" | "write the archive" => "cannot write",
        "mkdirat" => "cannot create directory",
        "mknodat" => "cannot create special file",
        "symlinkat" => "cannot create symbolic link",
        "linkat" => "cannot create hard link",
        "readlinkat" => "cannot read symbolic link",
        "unlinkat" | "remove" | "unlinkat (removing the partial file)" => "cannot remove",
        "renameat" | "renameat2 (exchange)" | "rename into place" => "cannot move into place",
        "utimensat" => "cannot set times",
        "fchmod" => "cannot set permissions",
        "chown" => "cannot change ownership",
        "setxattr" => "cannot set extended attributes",
        "flistxattr" => "cannot read extended attributes",
        "copy_file_range" | "sendfile" | "share extents (FICLONE)" => "cannot copy data",
        "ftruncate" => "cannot set size",
        "lseek" => "cannot find data",
        "statvfs" => "cannot read free space",
        "open the archive" => "cannot open archive",
        "open destination" | "create destination" | "open the destination's parent" => {
            "cannot open destination"
        }
        other => return format!("{other} failed"),
    };
    words.into()
}

/// The OS error in words, without its number ("Permission denied", as strerror says it).
fn reason(cause: &io::Error) -> String {
    let text = cause.to_string();
    match text.find(" (os error ") {
        Some(end) => text[..end].into(),
        None => text,
    }
}

impl Error {
    /// For an [`Error::Io`], the operation and the errno it failed with (`mkdirat, errno
    /// 13`): what `-v` adds to the message in words.
    pub fn detail(&self) -> Option<String> {
        match self {
            Error::Io { op, cause, .. } => Some(match cause.raw_os_error() {
                Some(errno) => format!("{op}, errno {errno}"),
                None => op.to_string(),
            }),
            _ => None,
        }
    }

    /// Builds an [`Error::Io`] from a rustix errno; a call interrupted by a signal that asked
    /// to stop (see `retry`) is [`Error::Interrupted`].
    pub fn io(op: &'static str, path: TreePath, errno: rustix::io::Errno) -> Error {
        if errno == rustix::io::Errno::INTR {
            if let Some(signal) = crate::sys::signal::stopped_by() {
                return Error::Interrupted { signal };
            }
        }
        Error::Io {
            op,
            path,
            cause: errno.into(),
        }
    }

    /// The variant's stable name, for reports to programs: `io`, `format`, `exists`,
    /// `not-a-directory`, `argument`, `input-too-short`, `changed`, `interrupted`, `short`,
    /// `stripped-link`, `listing`, `confined`, and for network transfers `authentication`,
    /// `tampered`, `truncated`, `timeout`, `protocol` and `remote` (see [`NetError`]).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Io { .. } => "io",
            Error::Format { .. } => "format",
            Error::Exists { .. } => "exists",
            Error::NotADirectory { .. } => "not-a-directory",
            Error::Argument { .. } => "argument",
            Error::InputTooShort { .. } => "input-too-short",
            Error::Changed { .. } => "changed",
            Error::Interrupted { .. } => "interrupted",
            Error::Short { .. } => "short",
            Error::StrippedLink { .. } => "stripped-link",
            Error::NotInArchive { .. } => "not-in-archive",
            Error::Listing { .. } => "listing",
            Error::Confined(_) => "confined",
            Error::Net { kind, .. } => kind.name(),
        }
    }

    /// Builds an [`Error::Net`].
    pub(crate) fn net(kind: NetError, message: impl Into<String>) -> Error {
        Error::Net {
            kind,
            message: message.into(),
        }
    }

    /// Builds an [`Error::Io`] from a std I/O error.
    pub fn os(op: &'static str, path: TreePath, cause: io::Error) -> Error {
        match rustix::io::Errno::from_io_error(&cause) {
            Some(errno) => Error::io(op, path, errno),
            None => Error::Io { op, path, cause },
        }
    }
}
