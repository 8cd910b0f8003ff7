//! The pure decoder: bytes in, events out, no I/O. It validates everything the format
//! promises (names, nesting, records, links, counts, limits) before an event reaches a sink.

use std::hash::{BuildHasher, Hasher, RandomState};

use hashbrown::HashTable;
use twox_hash::XxHash3_64;

use super::v2::{self, Expect, Head, IndexCheck, OpenFile, INDEX_COUNTS};
use super::{
    FormatError, CODEC_ZSTD, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, DEFAULT_MAX_DEPTH,
    DEFAULT_SPECIAL_MODE, FLAG_EXTENDED, FOOTER, FRAME_HEAD, HEADER, MAX_NAME, MAX_SYMLINK,
    MAX_XATTRS, MAX_XATTR_VALUE, NO_FILE, PERM_MASK, SPECIAL_BLOCK, SPECIAL_CHAR, SPECIAL_FIFO,
    TAG_DIR, TAG_END, TAG_EXTENT, TAG_EXTFILE, TAG_FILE, TAG_FILE64, TAG_HARDLINK, TAG_INDEX,
    TAG_LINKED, TAG_OWNER, TAG_PERM, TAG_POP, TAG_ROOT, TAG_SEGMENT, TAG_SPECIAL, TAG_START,
    TAG_SYMLINK, TAG_TIME, TAG_XATTR,
};
use crate::error::{Error, TreePath};
use crate::tree::{Device, Entry, Kind, Meta, Owner, Timestamp, Xattrs};

/// Limits a decoder enforces on untrusted input.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    /// Deepest directory nesting allowed (the root is depth 0).
    pub max_depth: usize,
    /// Most entries (of any kind) allowed.
    pub max_entries: Option<u64>,
    /// Most bytes of file data allowed.
    pub max_bytes: Option<u64>,
    /// Most bytes of disk space the entries may take, each estimated by [`space`].
    pub max_space: Option<u64>,
    /// Zero bytes may follow the end message: the archive sits in a container of a fixed
    /// size (a block device, a region of a file). Any other byte there is still
    /// `trailing-bytes`.
    pub zero_padding: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_depth: DEFAULT_MAX_DEPTH,
            max_entries: None,
            max_bytes: None,
            max_space: None,
            zero_padding: false,
        }
    }
}

/// The disk space an entry is charged against [`Limits::max_space`]: its `content` (a
/// file's bytes, a symlink's target) and `xattrs` (their bytes in the archive) rounded up to
/// 4 KiB blocks, and at least one block (its inode and its name in a directory), so that
/// empty entries are not free.
pub const fn space(content: u64, xattrs: u64) -> u64 {
    const BLOCK: u64 = 4096;
    let blocks = content.saturating_add(xattrs).div_ceil(BLOCK);
    if blocks == 0 {
        BLOCK
    } else {
        blocks.saturating_mul(BLOCK)
    }
}

/// One decoded message. Names, targets and extended attributes borrow from the input given
/// to [`Decoder::next`]; an entry's [`Meta::mode`] has all twelve bits of its `PERM` (or
/// the default), which of them to apply is the lander's policy.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event<'a> {
    /// Create directory `entry` in the current directory and enter it.
    Dir(Entry<'a>),
    /// Create regular file `entry` with `size` bytes; `data` is the part of them already in
    /// the input (all of them when the input was complete), the rest follows as
    /// [`Event::Data`]. A file that later hard links name has [`Entry::link_id`] set to its
    /// own entry number.
    File {
        /// The file (kind [`Kind::File`]).
        entry: Entry<'a>,
        /// Announced size.
        size: u64,
        /// The first bytes of the content.
        data: &'a [u8],
    },
    /// More content of the current file.
    Data(&'a [u8]),
    /// Create symlink `entry` (mode 0o777) pointing to `target`.
    Symlink {
        /// The symlink (kind [`Kind::Symlink`]).
        entry: Entry<'a>,
        /// 1 to 4095 bytes, no NUL, as stored.
        target: &'a [u8],
    },
    /// Create `entry` as a hard link to the earlier file whose [`Entry::link_id`] is
    /// `target` (the decoder checked there is one).
    HardLink {
        /// The link: kind [`Kind::File`], no metadata of its own (mode 0).
        entry: Entry<'a>,
        /// The entry number of the file.
        target: u64,
    },
    /// Create the fifo, character or block device `entry` ([`Entry::kind`]).
    Special {
        /// The special file.
        entry: Entry<'a>,
        /// Its device number (0, 0 for a fifo).
        device: Device,
    },
    /// Leave the current directory.
    Pop,
    /// The archive ended correctly after this many entries.
    End {
        /// Number of entries.
        entries: u64,
    },
    /// Zero bytes after the end, allowed by [`Limits::zero_padding`].
    Padding,
    /// Version 2: the root directory's metadata, for a destination the lander creates.
    Root {
        /// Its mode (all twelve bits, or 0o755), time and owner as recorded.
        meta: Meta,
        /// Its extended attributes.
        xattrs: Xattrs<'a>,
    },
    /// Version 2: create regular file `entry` of `size` bytes, zeros except where its
    /// `extents` [`Event::Extent`]s (and the [`Event::Data`] after each) put data.
    SparseFile {
        /// The file (kind [`Kind::File`]).
        entry: Entry<'a>,
        /// Its length.
        size: u64,
        /// How many extents follow.
        extents: u32,
    },
    /// Version 2: the next extent of the current sparse file: `len` bytes at offset `at`,
    /// `data` the first of them; the rest follows as [`Event::Data`].
    Extent {
        /// Where in the file.
        at: u64,
        /// How many bytes.
        len: u64,
        /// The first bytes.
        data: &'a [u8],
    },
    /// Version 2: a segment begins (its `START` checked); nothing to land.
    Segment,
    /// Version 2: bytes of the index, which the decoder checks; nothing to land.
    Index(&'a [u8]),
}

/// What [`Decoder::next`] found. (Deliberately exhaustive: a caller handles exactly these three answers; another would
/// change the protocol, not extend it.)
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'a> {
    /// An event, and how many input bytes it consumed.
    Event(Event<'a>, usize),
    /// The input holds no complete message: call again with more bytes.
    NeedMore,
    /// The archive ended and nothing follows it.
    Done,
    /// Version 2: a zstd frame of `stored` bytes follows the `consumed` bytes (its head):
    /// the caller decompresses them (see [`super::inflate`]) into a `body` of exactly that
    /// many bytes and passes it to [`Decoder::next`] (with `eof`) while
    /// [`Decoder::inflating`] says so, then goes on with the archive after the frame.
    Inflate {
        /// Bytes of the input the frame head took.
        consumed: usize,
        /// Bytes of the zstd frame after it.
        stored: u32,
        /// Bytes it decompresses to.
        body: u32,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Header,
    Messages,
    Data {
        remaining: u64,
    },
    /// Version 2: between frames (after the index: before the footer).
    Frames,
    /// Version 2: inside the index body.
    Index {
        left: u64,
    },
    Ended,
}

/// What a [`Decoder`] keeps for a version 2 archive.
#[derive(Default)]
struct Segments {
    /// The current frame's head and where it is.
    head: Option<Head>,
    frame_at: u64,
    /// The body comes decompressed: errors are placed at the frame, and the archive goes on
    /// at `resume_at`.
    inflated: bool,
    resume_at: u64,
    /// Bytes of the body not yet decoded, and bytes decoded.
    body_left: u64,
    body_pos: u64,
    /// An inflated body's `START` is still to come.
    at_start: bool,
    /// Digest of the body without file data, and of the current file's or extent's data.
    skeleton: XxHash3_64,
    data: XxHash3_64,
    /// The `FILE` or `EXTENT` whose data is coming: where, its entry's name, which kind.
    data_at: u64,
    data_name: Vec<u8>,
    extent: bool,
    /// The `EXTFILE` whose extents are still to come.
    open: Option<OpenFile>,
    segments: u32,
    /// No group came yet (`ROOT` may come).
    first_group: bool,
    /// Resumed at a segment ([`Decoder::resume`]): its first `START` is still to come, to be
    /// taken as where the stream is; and no INDEX is checked (the decoder stops there).
    resuming: bool,
    resumed: bool,
    /// One group of a raw body decoded alone ([`Decoder::at_group`]): the body's digest,
    /// which covers all of it, is not checked.
    alone: bool,
    /// The index frame: where, and its check once its counts came.
    index_at: Option<u64>,
    index: Option<IndexCheck>,
    expect: Expect,
    /// The user and group names of the last entry's `OWNER`.
    names: (Vec<u8>, Vec<u8>),
    /// The digest bytes the last group's data ended with (0 or 8).
    tail: usize,
}

impl std::fmt::Debug for Segments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segments")
            .field("segments", &self.segments)
            .field("frame_at", &self.frame_at)
            .field("body_left", &self.body_left)
            .finish_non_exhaustive()
    }
}

/// Of `remaining` bytes of data and their 8-byte digest, with `available` bytes there: how
/// many to pass on now and whether that completes them (with the digest there too). The
/// last byte waits for the digest, so that no sink sees a file whole before it is checked.
fn data_take(available: u64, remaining: u64) -> (u64, bool) {
    if available >= remaining.saturating_add(8) {
        return (remaining, true);
    }
    let take = available.min(remaining);
    (take - u64::from(take == remaining && take > 0), false)
}

/// A streaming, validating decoder of barge archives. Feed it the unconsumed input each
/// time; it never copies file data and never allocates more than the names it has seen
/// and one number per file that hard links may name.
#[derive(Debug)]
pub struct Decoder {
    limits: Limits,
    state: State,
    /// The header's extended flag: tags up to `SPECIAL` are allowed.
    extended: bool,
    /// Offset of the first byte not yet consumed.
    offset: u64,
    /// Offset of the message being decoded (for errors).
    message_offset: u64,
    /// Names of the open directories, outermost first.
    path: Vec<Box<[u8]>>,
    /// Names already used in the root and in each open directory.
    seen: Vec<Names>,
    /// Emptied [`Names`] of closed directories, reused for the next ones.
    spare: Vec<Names>,
    /// Entry numbers of the files that carried `LINKED`, ascending.
    linked: Vec<u64>,
    entries: u64,
    /// The file sizes announced so far (saturating).
    bytes: u64,
    /// The entries' [`space`] (saturating).
    space: u64,
    /// See [`Decoder::wanted`].
    wanted: usize,
    /// Set for a version 2 archive.
    v2: Option<Box<Segments>>,
    /// The data digests of the frame being decoded were checked by the caller.
    trusted: bool,
}

/// The names used in one directory, one after another in one buffer. While they arrive in
/// strictly increasing byte order (as `barge pack` writes them), a new name can only repeat
/// the last one, so nothing is hashed; the first name out of order builds a hash table of
/// them, which holds only where each name is in the buffer (8 bytes a slot), so an archive
/// of many short unsorted names takes memory in proportion to its size.
#[derive(Debug, Default)]
struct Names {
    /// The names, one after another.
    bytes: Vec<u8>,
    /// Where each name in `bytes` ends.
    ends: Vec<usize>,
    /// The names by (seeded) hash, once one came out of order, as [`span`]s of `bytes`.
    /// Boxed: one `Names` exists per open directory, mostly never hashed.
    table: Option<Box<(HashTable<u64>, RandomState)>>,
}

/// A name's place in [`Names::bytes`]: its start above its length (names have 1 to 255
/// bytes).
fn span(start: usize, end: usize) -> u64 {
    ((start as u64) << 8) | (end - start) as u64
}

/// The name at `span` in `bytes`.
fn at(bytes: &[u8], span: u64) -> &[u8] {
    let start = (span >> 8) as usize;
    &bytes[start..start + (span & 0xff) as usize]
}

impl Names {
    /// True when `name` was added before.
    fn contains(&mut self, name: &[u8]) -> bool {
        if self.table.is_none() {
            match self.last() {
                None => return false,
                Some(last) if name > last => return false,
                Some(last) if name == last => return true,
                Some(_) => self.build_table(),
            }
        }
        let (table, hasher) = &**self.table.as_ref().expect("built above");
        let bytes = &self.bytes;
        (table.find(hasher.hash_one(name), |&s| at(bytes, s) == name)).is_some()
    }

    /// Hashes every name so far.
    fn build_table(&mut self) {
        let hasher = RandomState::new();
        let mut table = HashTable::with_capacity(self.ends.len() + 1);
        let mut start = 0;
        let bytes = &self.bytes;
        let hash = |&s: &u64| hasher.hash_one(at(bytes, s));
        for &end in &self.ends {
            let name = span(start, end);
            table.insert_unique(hash(&name), name, hash);
            start = end;
        }
        self.ends = Vec::new();
        self.table = Some(Box::new((table, hasher)));
    }

    /// Remembers `name` (checked with [`Names::contains`] first).
    fn add(&mut self, name: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(name);
        match &mut self.table {
            Some(table) => {
                let (table, hasher) = &mut **table;
                let bytes = &self.bytes;
                let hash = |&s: &u64| hasher.hash_one(at(bytes, s));
                let name = span(start, bytes.len());
                table.insert_unique(hash(&name), name, hash);
            }
            None => self.ends.push(self.bytes.len()),
        }
    }

    /// The name added last while in order.
    fn last(&self) -> Option<&[u8]> {
        let end = *self.ends.last()?;
        let start = self.ends.len().checked_sub(2).map_or(0, |i| self.ends[i]);
        Some(&self.bytes[start..end])
    }

    /// Forgets every name, keeping the buffers.
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.table = None;
    }
}

/// Mode of a symlink (its permission bits mean nothing on Linux; `lstat` shows these).
const SYMLINK_MODE: u32 = 0o777;

/// The records before an entry, as far as they came.
#[derive(Default)]
struct Records<'a> {
    /// Tag of the last record (0: none yet).
    last: u8,
    perm: Option<u32>,
    mtime: Option<Timestamp>,
    owner: Option<Owner>,
    /// Where the `XATTR` records are in the input (tags included: the form of [`Xattrs`]).
    xattrs: std::ops::Range<usize>,
    /// Name of the last `XATTR`.
    xattr_name: &'a [u8],
    linked: bool,
    /// Version 2 `OWNER`'s user and group names.
    names: (&'a [u8], &'a [u8]),
}

impl Records<'_> {
    /// The first record (in tag order) that an entry with `tag` may not carry.
    fn misplaced(&self, tag: u8) -> Option<&'static str> {
        let (perm, meta, linked) = match tag {
            TAG_FILE | TAG_FILE64 | TAG_EXTFILE => (true, true, true),
            TAG_DIR | TAG_SPECIAL | TAG_ROOT => (true, true, false),
            TAG_SYMLINK => (false, true, false),
            _ => (false, false, false),
        };
        [
            (self.perm.is_some() && !perm, "PERM"),
            (self.mtime.is_some() && !meta, "TIME"),
            (self.owner.is_some() && !meta, "OWNER"),
            (!self.xattrs.is_empty() && !meta, "XATTR"),
            (self.linked && !linked, "LINKED"),
        ]
        .into_iter()
        .find_map(|(bad, record)| bad.then_some(record))
    }
}

/// The message a group ends with.
enum Message<'a> {
    End {
        count: u64,
    },
    Pop,
    Entry(Parsed<'a>),
    /// Version 2.
    Root(Records<'a>, usize),
    Extent {
        at: u64,
        len: u64,
        head: usize,
    },
}

/// A whole entry group, checked as far as its bytes alone tell.
struct Parsed<'a> {
    records: Records<'a>,
    name: &'a [u8],
    fields: Fields<'a>,
    /// Bytes of the group, up to a file's data.
    len: usize,
}

/// What an entry holds after its name (a file's data aside).
enum Fields<'a> {
    Dir,
    File { size: u64 },
    ExtFile { size: u64, extents: u32 },
    Symlink { target: &'a [u8] },
    HardLink { target: u64 },
    Special { kind: Kind, device: Device },
}

/// A whole group at the input's start: records, then the message they qualify, checked as
/// far as the bytes alone tell (steps 2 to 9 of the decoding rules).
struct Group<'a> {
    /// Where the message starts in the input.
    at: usize,
    message: Message<'a>,
}

/// Why the group at the input's start was not decoded.
enum Stop<'a> {
    /// The input ends inside it, in the record or message at `at`; the group takes at
    /// least `wanted` bytes.
    Short { at: usize, wanted: usize },
    /// It breaks a rule, found in the record or message at `at` (in the entry `name`, once
    /// its name is known).
    Invalid {
        kind: FormatError,
        at: usize,
        name: Option<&'a [u8]>,
    },
}

fn invalid<'a>(kind: FormatError, at: usize) -> Stop<'a> {
    Stop::Invalid {
        kind,
        at,
        name: None,
    }
}

/// Reads the fields of a group one after another.
struct Cursor<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// The next `n` bytes, or [`Stop::Short`] in the record or message at `at`.
    fn take(&mut self, n: usize, at: usize) -> Result<&'a [u8], Stop<'a>> {
        let end = self.pos.saturating_add(n);
        let bytes = (self.input.get(self.pos..end)).ok_or(Stop::Short { at, wanted: end })?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, at: usize) -> Result<[u8; N], Stop<'a>> {
        Ok(self.take(N, at)?.try_into().expect("N bytes"))
    }
}

/// Which messages a group may hold.
#[derive(Clone, Copy)]
struct Grammar {
    /// Version 1 with the extended flag: tags up to `SPECIAL`.
    extended: bool,
    /// Version 2: body messages, `FILE64` and `END` excluded.
    v2: bool,
    /// Version 2: an `EXTFILE`'s extents are pending, so only an `EXTENT` may come.
    extent_due: bool,
    /// Version 2: an `EXTENT` may come (it is due, or continues a resumed decoder's file).
    extent_may: bool,
}

impl Grammar {
    fn knows(self, tag: u8) -> bool {
        match (self.v2, self.extended) {
            (true, _) => matches!(tag, 0x01..=0x03 | 0x05..=0x0E | TAG_START | TAG_ROOT),
            (false, true) => tag <= TAG_SPECIAL,
            (false, false) => tag <= TAG_PERM,
        }
    }
}

/// Parses the group at the start of `input`; `linked` holds the entry numbers of the files
/// hard links may name, ascending (`None`: any number, for a caller that does not check).
fn parse_group<'a>(
    input: &'a [u8],
    grammar: Grammar,
    linked: Option<&[u64]>,
) -> Result<Group<'a>, Stop<'a>> {
    let mut c = Cursor { input, pos: 0 };
    let mut records = Records::default();
    let (tag, at) = loop {
        let at = c.pos;
        let [tag] = c.array(at)?;
        if !grammar.knows(tag) {
            return Err(invalid(FormatError::UnknownTag(tag), at));
        }
        if grammar.extent_due && tag != TAG_EXTENT {
            return Err(invalid(FormatError::BadExtent, at));
        }
        if !(TAG_PERM..=TAG_LINKED).contains(&tag) {
            break (tag, at);
        }
        record(&mut c, &mut records, tag, at, grammar.v2)?;
    };
    if records.last != 0 {
        if matches!(tag, TAG_END | TAG_POP | TAG_START | TAG_EXTENT) {
            return Err(invalid(FormatError::DanglingPerm, at));
        }
        if let Some(record) = records.misplaced(tag) {
            return Err(invalid(FormatError::MisplacedRecord(record), at));
        }
    }
    let message = match tag {
        TAG_END => Message::End {
            count: u64::from_le_bytes(c.array(at)?),
        },
        TAG_POP => Message::Pop,
        TAG_START => return Err(invalid(FormatError::BadStart, at)),
        TAG_ROOT => Message::Root(records, c.pos),
        TAG_EXTENT => {
            if !grammar.extent_may {
                return Err(invalid(FormatError::BadExtent, at));
            }
            let [a0, a1, a2, a3, a4, a5, a6, a7, l0, l1, l2, l3] = c.array(at)?;
            Message::Extent {
                at: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
                len: u64::from(u32::from_le_bytes([l0, l1, l2, l3])),
                head: c.pos,
            }
        }
        _ => {
            let name = parse_name(&mut c, at)?;
            let fields = match parse_fields(&mut c, tag, at, linked) {
                Err(Stop::Invalid { kind, at, .. }) => {
                    let name = Some(name);
                    return Err(Stop::Invalid { kind, at, name });
                }
                fields => fields?,
            };
            Message::Entry(Parsed {
                records,
                name,
                fields,
                len: c.pos,
            })
        }
    };
    Ok(Group { at, message })
}

/// Parses the record `tag` at `at` (its tag read) into `records`.
fn record<'a>(
    c: &mut Cursor<'a>,
    records: &mut Records<'a>,
    tag: u8,
    at: usize,
    v2: bool,
) -> Result<(), Stop<'a>> {
    let check = |ok: bool, kind| if ok { Ok(()) } else { Err(invalid(kind, at)) };
    let xattr_again = tag == TAG_XATTR && records.last == TAG_XATTR;
    check(tag > records.last || xattr_again, FormatError::RecordOrder)?;
    match tag {
        TAG_PERM => {
            let mode = u16::from_le_bytes(c.array(at)?);
            check(u32::from(mode) <= PERM_MASK, FormatError::BadMode(mode))?;
            records.perm = Some(u32::from(mode));
        }
        TAG_TIME => {
            let [sec @ .., n0, n1, n2, n3] = c.array::<12>(at)?;
            let nsec = u32::from_le_bytes([n0, n1, n2, n3]);
            check(nsec < 1_000_000_000, FormatError::BadTime(nsec))?;
            let sec = i64::from_le_bytes(sec);
            records.mtime = Some(Timestamp { sec, nsec });
        }
        TAG_OWNER => {
            let [u0, u1, u2, u3, g0, g1, g2, g3] = c.array(at)?;
            let (uid, gid) = ([u0, u1, u2, u3], [g0, g1, g2, g3]);
            records.owner = Some(Owner {
                uid: u32::from_le_bytes(uid),
                gid: u32::from_le_bytes(gid),
            });
            if v2 {
                let [len] = c.array(at)?;
                let user = c.take(usize::from(len), at)?;
                let [len] = c.array(at)?;
                records.names = (user, c.take(usize::from(len), at)?);
            }
        }
        TAG_XATTR => {
            let [len] = c.array(at)?;
            let name = c.take(usize::from(len), at)?;
            check(
                !xattr_again || name > records.xattr_name,
                FormatError::RecordOrder,
            )?;
            check(
                !name.is_empty() && !name.contains(&0),
                FormatError::BadXattr,
            )?;
            let size = u32::from_le_bytes(c.array(at)?) as usize;
            let start = if xattr_again {
                records.xattrs.start
            } else {
                at
            };
            let total = (c.pos - start).saturating_add(size);
            let fits = size <= MAX_XATTR_VALUE && total <= MAX_XATTRS;
            check(fits, FormatError::XattrTooLarge)?;
            c.take(size, at)?;
            records.xattrs = start..c.pos;
            records.xattr_name = name;
        }
        _ => records.linked = true,
    }
    records.last = tag;
    Ok(())
}

/// Parses a NUL-terminated entry name (of the entry at `at`).
fn parse_name<'a>(c: &mut Cursor<'a>, at: usize) -> Result<&'a [u8], Stop<'a>> {
    let rest = &c.input[c.pos..];
    let window = &rest[..rest.len().min(MAX_NAME + 1)];
    match window.iter().position(|&b| b == 0) {
        Some(len) => {
            let name = &rest[..len];
            super::check_name(name).map_err(|kind| invalid(kind, at))?;
            c.pos += len + 1;
            Ok(name)
        }
        None if window.len() > MAX_NAME => Err(invalid(FormatError::NameTooLong, at)),
        None => {
            let wanted = c.pos + window.len() + 1;
            Err(Stop::Short { at, wanted })
        }
    }
}

/// Parses what the entry `tag` at `at` holds after its name.
fn parse_fields<'a>(
    c: &mut Cursor<'a>,
    tag: u8,
    at: usize,
    linked: Option<&[u64]>,
) -> Result<Fields<'a>, Stop<'a>> {
    let check = |ok: bool, kind| if ok { Ok(()) } else { Err(invalid(kind, at)) };
    Ok(match tag {
        TAG_DIR => Fields::Dir,
        TAG_FILE => Fields::File {
            size: u64::from(u32::from_le_bytes(c.array(at)?)),
        },
        TAG_FILE64 => {
            let size = u64::from_le_bytes(c.array(at)?);
            check(size >= 1 << 32, FormatError::NoncanonicalFile64)?;
            Fields::File { size }
        }
        TAG_EXTFILE => {
            let [s0, s1, s2, s3, s4, s5, s6, s7, e0, e1, e2, e3] = c.array(at)?;
            Fields::ExtFile {
                size: u64::from_le_bytes([s0, s1, s2, s3, s4, s5, s6, s7]),
                extents: u32::from_le_bytes([e0, e1, e2, e3]),
            }
        }
        TAG_SYMLINK => {
            let len = usize::from(u16::from_le_bytes(c.array(at)?));
            check((1..=MAX_SYMLINK).contains(&len), FormatError::BadSymlink)?;
            let target = c.take(len, at)?;
            check(!target.contains(&0), FormatError::BadSymlink)?;
            Fields::Symlink { target }
        }
        TAG_HARDLINK => {
            let target = u64::from_le_bytes(c.array(at)?);
            let found = linked.is_none_or(|linked| linked.binary_search(&target).is_ok());
            check(found, FormatError::BadLink(target))?;
            Fields::HardLink { target }
        }
        _ => {
            let [kind, m0, m1, m2, m3, n0, n1, n2, n3] = c.array(at)?;
            let device = Device {
                major: u32::from_le_bytes([m0, m1, m2, m3]),
                minor: u32::from_le_bytes([n0, n1, n2, n3]),
            };
            let kind = match kind {
                SPECIAL_FIFO if device == Device::default() => Kind::Fifo,
                SPECIAL_CHAR => Kind::CharDevice,
                SPECIAL_BLOCK => Kind::BlockDevice,
                _ => return Err(invalid(FormatError::BadSpecial, at)),
            };
            Fields::Special { kind, device }
        }
    })
}

impl Decoder {
    /// A decoder that enforces `limits`.
    pub fn new(limits: Limits) -> Decoder {
        Decoder {
            limits,
            state: State::Header,
            extended: false,
            offset: 0,
            message_offset: 0,
            path: Vec::new(),
            seen: vec![Names::default()],
            spare: Vec::new(),
            linked: Vec::new(),
            entries: 0,
            bytes: 0,
            space: 0,
            wanted: 0,
            v2: None,
            trusted: false,
        }
    }

    /// A decoder of a version 2 archive's segments from segment number `segment`, whose
    /// frame is at archive offset `at` and holds entries from number `first` on (as the
    /// index says; `START` must say so too), with `linked` the files before it that hard
    /// links may name (ascending). Its `START` is taken as where the stream is: its
    /// directory, and its open `EXTFILE`, whose remaining extents are passed on as
    /// [`Event::Extent`]s until another message comes. Fed the frames from there on, it
    /// decodes and checks them as a decoder from the start would; it ends
    /// ([`Step::Done`]) at the INDEX, which it cannot check.
    pub fn resume(limits: Limits, at: u64, segment: u32, first: u64, linked: &[u64]) -> Decoder {
        let mut decoder = Decoder::new(limits);
        (decoder.state, decoder.offset, decoder.entries) = (State::Frames, at, first);
        decoder.linked = linked.iter().copied().take_while(|&n| n < first).collect();
        decoder.v2 = Some(Box::new(Segments {
            first_group: segment == 0,
            segments: segment,
            resuming: true,
            resumed: true,
            ..Segments::default()
        }));
        decoder
    }

    /// A decoder of one group of a version 2 raw segment body alone (as a reader that seeks
    /// finds it by its index row): the group at archive offset `at`, `left` bytes before
    /// the end of segment `segment`'s body, the group of entry `number` in the directory
    /// `dirs` (names, outermost first). Fed the bytes from there (see
    /// [`Decoder::next_whole`]), it checks the group as a decoder from the start would, a
    /// `FILE`'s data digest included, but not the segment's digest, which covers the whole
    /// body; what it decodes after the group is not to be used.
    pub(crate) fn at_group(
        limits: Limits,
        (at, left): (u64, u64),
        (segment, number): (u32, u64),
        dirs: Vec<Box<[u8]>>,
    ) -> Decoder {
        let mut decoder = Decoder::new(limits);
        (decoder.state, decoder.offset, decoder.entries) = (State::Messages, at, number);
        decoder.seen = (0..=dirs.len()).map(|_| Names::default()).collect();
        decoder.path = dirs;
        decoder.v2 = Some(Box::new(Segments {
            body_left: left,
            segments: segment + 1,
            resumed: true,
            alone: true,
            ..Segments::default()
        }));
        decoder
    }

    /// Entries decoded so far (with a resumed decoder's `first`): one more than the number
    /// of the entry an entry event is for.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The entry number of the `EXTFILE` whose extents are still to come (version 2).
    pub fn open_file(&self) -> Option<u64> {
        self.v2.as_ref()?.open.map(|file| file.number)
    }

    /// Version 2: takes the `FILE` and `EXTENT` data digests of the frames to come as
    /// checked by the caller (with [`data_digests_match`] on their bodies, on other
    /// threads), so that their data is not hashed again here, or no longer. Everything
    /// else is checked as always, the segments' own digests included.
    pub(crate) fn trust_data(&mut self, yes: bool) {
        self.trusted = yes;
    }

    /// Whether it takes the data digests as checked (see [`Decoder::trust_data`]).
    pub(crate) fn trusts_data(&self) -> bool {
        self.trusted
    }

    /// True while the body of a zstd frame is to be passed in (see [`Step::Inflate`]).
    pub fn inflating(&self) -> bool {
        self.v2.as_ref().is_some_and(|v2| v2.inflated)
    }

    /// The error `kind` (`truncated`, or what [`super::inflate`] found) at the zstd frame
    /// whose [`Step::Inflate`] came last.
    pub fn frame_error(&self, kind: FormatError) -> Error {
        self.error(kind, None)
    }

    /// The user and group names of the last entry's `OWNER` (version 2; empty when none).
    pub fn owner_names(&self) -> (&[u8], &[u8]) {
        match &self.v2 {
            Some(v2) => (&v2.names.0, &v2.names.1),
            None => (&[], &[]),
        }
    }

    /// Current directory depth (0 at the root).
    pub fn depth(&self) -> usize {
        self.path.len()
    }

    /// Names of the open directories, outermost first.
    pub fn dir_names(&self) -> impl Iterator<Item = &[u8]> {
        self.path.iter().map(|n| &n[..])
    }

    /// Offset of the first unconsumed input byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Bytes of the current file still to come (0 outside file data).
    pub(crate) fn remaining_data(&self) -> u64 {
        match self.state {
            State::Data { remaining } => remaining,
            _ => 0,
        }
    }

    /// Tells the decoder that the caller consumed `n` bytes of the current file's data
    /// itself (for example by splicing them from the input to the file).
    pub(crate) fn skip_data(&mut self, n: u64) {
        let remaining = self.remaining_data();
        assert!(n <= remaining, "skip_data past the end of the file");
        self.offset += n;
        self.state = match remaining - n {
            0 => State::Messages,
            remaining => State::Data { remaining },
        };
    }

    /// Decodes the next event from `input`, the bytes after everything consumed so far.
    /// `eof` says no more bytes will follow.
    pub fn next<'a>(&mut self, input: &'a [u8], eof: bool) -> Result<Step<'a>, Error> {
        self.step(input, eof, false)
    }

    /// Like [`Decoder::next`], but a file comes only with all of its content: while some of
    /// it is missing (and `eof` is false), nothing is consumed and the answer is
    /// [`Step::NeedMore`].
    pub fn next_whole<'a>(&mut self, input: &'a [u8], eof: bool) -> Result<Step<'a>, Error> {
        self.step(input, eof, true)
    }

    /// The bytes the group at the input's start takes at least, when the last call
    /// answered [`Step::NeedMore`] for lack of them (after a [`Decoder::next_whole`], a
    /// file's data counts too); else 0. A reader grows its buffer to hold that much.
    pub(crate) fn wanted(&self) -> usize {
        self.wanted
    }

    fn step<'a>(&mut self, input: &'a [u8], eof: bool, whole: bool) -> Result<Step<'a>, Error> {
        self.wanted = 0;
        match self.state {
            State::Header => self.header(input, eof, whole),
            State::Messages if self.v2.is_some() => self.body(input, eof, whole),
            State::Messages => self.message(input, eof, whole),
            State::Data { remaining } if self.v2.is_some() => {
                let (input, eof) = self.in_body(input, eof);
                self.data(input, eof, remaining)
            }
            State::Frames => self.frame(input, eof),
            State::Index { left } => self.index(input, eof, left),
            State::Data { remaining } => {
                if input.is_empty() {
                    return self.need_more(eof, &[]);
                }
                let n = remaining.min(input.len() as u64) as usize;
                self.skip_data(n as u64);
                Ok(Step::Event(Event::Data(&input[..n]), n))
            }
            State::Ended if input.is_empty() && eof => Ok(Step::Done),
            State::Ended if input.is_empty() => Ok(Step::NeedMore),
            State::Ended => {
                let zeros = match self.limits.zero_padding {
                    true => input.iter().position(|&b| b != 0).unwrap_or(input.len()),
                    false => 0,
                };
                self.offset += zeros as u64;
                if zeros == 0 {
                    self.message_offset = self.offset;
                    return Err(self.error(FormatError::TrailingBytes, None));
                }
                Ok(Step::Event(Event::Padding, zeros))
            }
        }
    }
    fn header<'a>(&mut self, input: &'a [u8], eof: bool, whole: bool) -> Result<Step<'a>, Error> {
        let magic = &HEADER[..6];
        let n = input.len().min(6);
        if input[..n] != magic[..n] {
            return Err(self.error(FormatError::BadMagic, None));
        }
        if input.len() < HEADER.len() {
            return self.need_more(eof, &[]);
        }
        if input[6] == 2 {
            if input[7] != 0 {
                return Err(self.error(FormatError::BadFlags(input[7]), None));
            }
            return self.header_v2(input, eof);
        }
        if input[6] != HEADER[6] {
            return Err(self.error(FormatError::BadVersion(input[6]), None));
        }
        if input[7] > FLAG_EXTENDED {
            return Err(self.error(FormatError::BadFlags(input[7]), None));
        }
        self.extended = input[7] == FLAG_EXTENDED;
        self.offset = HEADER.len() as u64;
        self.state = State::Messages;
        match self.message(&input[HEADER.len()..], eof, whole)? {
            Step::Event(event, n) => Ok(Step::Event(event, n + HEADER.len())),
            _ => {
                // Nothing is consumed until the first whole message is there.
                self.offset = 0;
                self.state = State::Header;
                if self.wanted > 0 {
                    self.wanted = self.wanted.saturating_add(HEADER.len());
                }
                Ok(Step::NeedMore)
            }
        }
    }

    /// The version 2 header at the start of `input`, with the first frame head after it.
    fn header_v2<'a>(&mut self, input: &'a [u8], eof: bool) -> Result<Step<'a>, Error> {
        let n = HEADER.len();
        self.v2 = Some(Box::new(Segments {
            first_group: true,
            ..Segments::default()
        }));
        (self.offset, self.state) = (n as u64, State::Frames);
        let step = self.frame(&input[n..], eof);
        match step {
            Ok(Step::Event(event, m)) => Ok(Step::Event(event, m + n)),
            Ok(Step::Inflate {
                consumed,
                stored,
                body,
            }) => Ok(Step::Inflate {
                consumed: consumed + n,
                stored,
                body,
            }),
            Ok(_) => {
                (self.offset, self.state, self.v2) = (0, State::Header, None);
                if self.wanted > 0 {
                    self.wanted = self.wanted.saturating_add(n);
                }
                Ok(Step::NeedMore)
            }
            Err(e) => Err(e),
        }
    }

    fn v2(&mut self) -> &mut Segments {
        self.v2.as_mut().expect("a version 2 archive")
    }

    /// `input` cut at the end of the current body, and whether the body ends in it.
    fn in_body<'a>(&self, input: &'a [u8], eof: bool) -> (&'a [u8], bool) {
        let left = self.v2.as_ref().expect("a version 2 archive").body_left;
        match usize::try_from(left) {
            Ok(left) if left <= input.len() => (&input[..left], true),
            _ => (input, eof),
        }
    }

    /// A frame head (and a raw segment's `START`), or the footer.
    fn frame<'a>(&mut self, input: &'a [u8], eof: bool) -> Result<Step<'a>, Error> {
        self.message_offset = self.offset;
        let Some(&tag) = input.first() else {
            return self.need_more(eof, &[]);
        };
        let index_seen = self.v2().index_at.is_some();
        if tag == TAG_INDEX && self.v2().resumed {
            // A resumed decoder has not seen the segments the index counts.
            self.state = State::Ended;
            return Ok(Step::Done);
        }
        match tag {
            TAG_SEGMENT | TAG_INDEX if !index_seen => {}
            TAG_END if index_seen => return self.footer(input, eof),
            _ => return Err(self.error(FormatError::UnknownTag(tag), None)),
        }
        let Some(bytes) = input.get(..FRAME_HEAD) else {
            self.wanted = FRAME_HEAD;
            return self.need_more(eof, &[]);
        };
        let head = v2::head(bytes.try_into().expect("a frame head"));
        let head = head.map_err(|kind| self.error(kind, None))?;
        if tag == TAG_INDEX {
            if !self.path.is_empty() {
                return Err(self.error(FormatError::EndInsideDir(self.path.len()), None));
            }
            if self.v2().open.is_some() || head.body < INDEX_COUNTS as u32 {
                let kind = match self.v2().open {
                    Some(_) => FormatError::BadExtent,
                    None => FormatError::BadIndex,
                };
                return Err(self.error(kind, None));
            }
            let at = self.offset;
            self.v2().index_at = Some(at);
            self.state = State::Index {
                left: u64::from(head.body),
            };
            return Ok(self.begin_frame(head, Event::Index(&[])));
        }
        if head.codec == CODEC_ZSTD {
            return Ok(self.begin_frame(head, Event::Segment));
        }
        // A raw segment: its head and START are one step.
        let end = FRAME_HEAD + head.body as usize;
        let (body, body_eof) = match input.get(FRAME_HEAD..end) {
            Some(body) => (body, true),
            None => (&input[FRAME_HEAD..], eof),
        };
        let start = match self.parse_start(body) {
            Ok(n) => n,
            Err(Stop::Short { at, wanted }) => {
                self.message_offset = self.offset + (FRAME_HEAD + at) as u64;
                self.wanted = FRAME_HEAD + wanted;
                return self.need_more(body_eof, &[]);
            }
            Err(Stop::Invalid { kind, at, .. }) => {
                self.message_offset = self.offset + (FRAME_HEAD + at) as u64;
                return Err(self.error(kind, None));
            }
        };
        let Step::Event(event, _) = self.begin_frame(head, Event::Segment) else {
            unreachable!("a raw frame")
        };
        self.start(&body[..start])?;
        Ok(Step::Event(event, FRAME_HEAD + start))
    }

    /// Enters the frame whose head `self.offset` is at: a segment's body or the index.
    fn begin_frame<'a>(&mut self, head: Head, event: Event<'a>) -> Step<'a> {
        let (at, entries) = (self.offset, self.entries);
        let segment = head.tag == TAG_SEGMENT;
        let v2 = self.v2();
        v2.head = Some(head);
        v2.frame_at = at;
        v2.body_left = u64::from(head.body);
        v2.body_pos = 0;
        v2.skeleton = XxHash3_64::default();
        if segment {
            v2.expect.segment(at, &head, entries);
            v2.segments += 1;
            self.state = State::Messages;
        }
        self.offset += FRAME_HEAD as u64;
        if head.codec != CODEC_ZSTD {
            return Step::Event(event, FRAME_HEAD);
        }
        let v2 = self.v2();
        v2.inflated = true;
        v2.at_start = segment;
        v2.resume_at = at + (FRAME_HEAD as u64) + u64::from(head.stored);
        Step::Inflate {
            consumed: FRAME_HEAD,
            stored: head.stored,
            body: head.body,
        }
    }

    /// Checks the `START` at the start of `body` against where the archive is; its length.
    fn parse_start<'a>(&self, body: &'a [u8]) -> Result<usize, Stop<'a>> {
        let mut c = Cursor {
            input: body,
            pos: 0,
        };
        let bad = || invalid(FormatError::BadStart, 0);
        let [tag] = c.array(0)?;
        if tag != TAG_START {
            return Err(bad());
        }
        let [f0, f1, f2, f3, f4, f5, f6, f7, o0, o1, o2, o3, o4, o5, o6, o7, d0, d1] =
            c.array(0)?;
        let first = u64::from_le_bytes([f0, f1, f2, f3, f4, f5, f6, f7]);
        let open = u64::from_le_bytes([o0, o1, o2, o3, o4, o5, o6, o7]);
        let depth = usize::from(u16::from_le_bytes([d0, d1]));
        let v2 = self.v2.as_ref().expect("a version 2 archive");
        let now_open = v2.open.map_or(NO_FILE, |file| file.number);
        // A resumed decoder takes the directory and open file as stated; the file it took
        // so, whose extents it does not count, may have ended with the last body.
        let resuming = v2.resuming;
        let uncounted = v2.open.is_some_and(|file| file.left.is_none());
        let stated = match resuming {
            true => open == NO_FILE || open < first,
            false => {
                (open == now_open || (uncounted && open == NO_FILE)) && depth == self.path.len()
            }
        };
        if first != self.entries || !stated {
            return Err(bad());
        }
        if depth > self.limits.max_depth {
            return Err(invalid(FormatError::TooDeep(self.limits.max_depth), 0));
        }
        for i in 0..depth {
            let rest = &body[c.pos..];
            let window = &rest[..rest.len().min(MAX_NAME + 1)];
            match window.iter().position(|&b| b == 0) {
                Some(len) => {
                    let name = &rest[..len];
                    let right = match resuming {
                        true => super::check_name(name).is_ok(),
                        false => name == &*self.path[i],
                    };
                    if !right {
                        return Err(bad());
                    }
                    c.pos += len + 1;
                }
                None if window.len() > MAX_NAME => return Err(bad()),
                None => {
                    let wanted = c.pos + window.len() + 1;
                    return Err(Stop::Short { at: 0, wanted });
                }
            }
        }
        Ok(c.pos)
    }

    /// Takes in the checked `START` bytes of the current body (a resumed decoder's first: as
    /// where the stream is).
    fn start(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let open = u64::from_le_bytes(bytes[9..17].try_into().expect("8 bytes"));
        if open == NO_FILE {
            self.v2().open = None;
        }
        if std::mem::take(&mut self.v2().resuming) {
            let names = bytes[19..].split(|&b| b == 0);
            self.path = names.take_while(|n| !n.is_empty()).map(Box::from).collect();
            self.seen = (0..=self.path.len()).map(|_| Names::default()).collect();
            self.v2().open = (open != NO_FILE).then_some(OpenFile {
                number: open,
                left: None,
                end: 0,
                size: u64::MAX,
            });
        }
        self.v2().at_start = false;
        self.offset += bytes.len() as u64;
        self.consumed(bytes, bytes.len())
    }

    /// `bytes` of the current body were decoded (`skeleton` of them go into its digest):
    /// at the end of the body its digest is checked and the frames go on.
    fn consumed(&mut self, skeleton: &[u8], n: usize) -> Result<(), Error> {
        let v2 = self.v2();
        v2.skeleton.write(skeleton);
        v2.body_left -= n as u64;
        v2.body_pos += n as u64;
        if v2.body_left > 0 {
            return Ok(());
        }
        let (digest, frame_at) = (v2.skeleton.finish(), v2.frame_at);
        let stated = match v2.alone {
            true => digest,
            false => v2.head.expect("inside a frame").digest,
        };
        if v2::differs(digest, stated) {
            self.message_offset = frame_at;
            return Err(self.error(FormatError::BadDigest("segment"), None));
        }
        self.end_frame();
        self.state = State::Frames;
        Ok(())
    }

    /// Leaves the body of the current frame.
    fn end_frame(&mut self) {
        let v2 = self.v2();
        if std::mem::take(&mut v2.inflated) {
            let resume = v2.resume_at;
            self.offset = resume;
        }
    }

    /// The next message of a segment body (an inflated body's `START` first).
    fn body<'a>(&mut self, input: &'a [u8], eof: bool, whole: bool) -> Result<Step<'a>, Error> {
        let (input, eof) = self.in_body(input, eof);
        if self.v2().at_start {
            self.message_offset = self.offset;
            let start = match self.parse_start(input) {
                Ok(n) => n,
                Err(Stop::Short { wanted, .. }) => {
                    self.wanted = wanted;
                    return self.need_more(eof, &[]);
                }
                Err(Stop::Invalid { kind, .. }) => return Err(self.error(kind, None)),
            };
            self.start(&input[..start])?;
            return Ok(Step::Event(Event::Segment, start));
        }
        let step = self.message(input, eof, whole)?;
        if let Step::Event(event, n) = &step {
            let n = *n;
            let data = match event {
                Event::File { data, .. } | Event::Extent { data, .. } => data.len(),
                _ => 0,
            };
            // The skeleton: the group without the data, with the digest after it if it came.
            let v2 = self.v2();
            let tail = std::mem::take(&mut v2.tail);
            v2.skeleton.write(&input[..n - data - tail]);
            v2.first_group = false;
            self.consumed(&input[n - tail..n], n)?;
        }
        Ok(step)
    }

    /// A `FILE`'s or `EXTENT`'s data in the state `Data`: passed on whole only with its
    /// digest, which is checked first; else all but its last byte.
    fn data<'a>(&mut self, input: &'a [u8], eof: bool, remaining: u64) -> Result<Step<'a>, Error> {
        let (take, complete) = data_take(input.len() as u64, remaining);
        if !complete && eof {
            // The input, or the segment's body, ends inside the data.
            let name = std::mem::take(&mut self.v2().data_name);
            return Err(self.error(FormatError::Truncated, Some(&name)));
        }
        if take == 0 && !complete {
            self.wanted = (remaining + 8) as usize;
            return Ok(Step::NeedMore);
        }
        let data = &input[..take as usize];
        if !self.trusted {
            self.v2().data.write(data);
        }
        let n = take as usize + if complete { 8 } else { 0 };
        self.offset += n as u64;
        if complete {
            self.check_data(&input[data.len()..n])?;
            self.state = State::Messages;
        } else {
            self.state = State::Data {
                remaining: remaining - take,
            };
        }
        self.consumed(&input[data.len()..n], n)?;
        Ok(Step::Event(Event::Data(data), n))
    }

    /// Compares the data digest so far with the 8 bytes `stated`, and ends the data.
    fn check_data(&mut self, stated: &[u8]) -> Result<(), Error> {
        let trusted = self.trusted;
        let v2 = self.v2();
        let stated = u64::from_le_bytes(stated.try_into().expect("8 digest bytes"));
        let ok = trusted || !v2::differs(v2.data.finish(), stated);
        let what = if v2.extent { "extent" } else { "file" };
        if v2.extent {
            let open = v2.open.as_mut().expect("an extent of an open file");
            if let Some(left) = &mut open.left {
                *left -= 1;
                if *left == 0 {
                    v2.open = None;
                }
            }
        }
        if ok {
            return Ok(());
        }
        self.message_offset = v2.data_at;
        let name = std::mem::take(&mut self.v2().data_name);
        Err(self.error(FormatError::BadDigest(what), Some(&name)))
    }

    /// The index body (its counts whole first), checked at its end.
    fn index<'a>(&mut self, input: &'a [u8], eof: bool, left: u64) -> Result<Step<'a>, Error> {
        let v2 = self.v2.as_mut().expect("a version 2 archive");
        let (at, segments, entries) = (
            v2.index_at.expect("in the index"),
            v2.segments,
            self.entries,
        );
        let (input, eof) = match usize::try_from(left) {
            Ok(left) if left <= input.len() => (&input[..left], true),
            _ => (input, eof),
        };
        self.message_offset = at;
        let n = match &mut v2.index {
            Some(_) if input.is_empty() => return self.need_more(eof, &[]),
            Some(check) => {
                check.feed(input);
                input.len()
            }
            None => {
                let Some(counts) = input.get(..INDEX_COUNTS) else {
                    self.wanted = INDEX_COUNTS;
                    return self.need_more(eof, &[]);
                };
                let head = v2.head.expect("the index head");
                let counts = counts.try_into().expect("12 bytes");
                let check = IndexCheck::new(&head, counts, segments, entries);
                let check = check.map_err(|kind| self.error(kind, None))?;
                self.v2().index = Some(check);
                INDEX_COUNTS
            }
        };
        let v2 = self.v2.as_mut().expect("a version 2 archive");
        v2.body_pos += n as u64;
        let left = left - n as u64;
        if !v2.inflated {
            self.offset += n as u64;
        }
        self.state = State::Index { left };
        if left == 0 {
            let v2 = self.v2.as_ref().expect("a version 2 archive");
            let checked = v2.index.as_ref().expect("counts read").finish(&v2.expect);
            checked.map_err(|kind| self.error(kind, None))?;
            self.end_frame();
            self.state = State::Frames;
        }
        Ok(Step::Event(Event::Index(&input[..n]), n))
    }

    /// The footer at the start of `input`.
    fn footer<'a>(&mut self, input: &'a [u8], eof: bool) -> Result<Step<'a>, Error> {
        let Some(bytes) = input.get(..FOOTER) else {
            self.wanted = FOOTER;
            return self.need_more(eof, &[]);
        };
        let footer = v2::footer(bytes.try_into().expect("a footer"));
        let footer = footer.map_err(|kind| self.error(kind, None))?;
        let v2 = self.v2.as_ref().expect("a version 2 archive");
        let agrees = footer.entries == self.entries
            && footer.segments == v2.segments
            && Some(footer.index_at) == v2.index_at;
        if !agrees {
            return Err(self.error(FormatError::BadFooter, None));
        }
        self.offset += FOOTER as u64;
        self.state = State::Ended;
        let entries = self.entries;
        Ok(Step::Event(Event::End { entries }, FOOTER))
    }

    fn need_more<'a>(&self, eof: bool, name: &[u8]) -> Result<Step<'a>, Error> {
        if eof {
            Err(self.error(FormatError::Truncated, Some(name)))
        } else {
            Ok(Step::NeedMore)
        }
    }

    /// Decodes the group at the input's start whole (nothing is consumed before), with a
    /// file's data as far as it is there.
    fn message<'a>(&mut self, input: &'a [u8], eof: bool, whole: bool) -> Result<Step<'a>, Error> {
        let open = self.v2.as_ref().and_then(|v2| v2.open);
        let grammar = Grammar {
            extended: self.extended,
            v2: self.v2.is_some(),
            extent_due: open.is_some_and(|file| file.left.is_some()),
            extent_may: open.is_some(),
        };
        let group = match parse_group(input, grammar, Some(&self.linked)) {
            Ok(group) => group,
            Err(Stop::Short { at, wanted }) => {
                self.message_offset = self.offset + at as u64;
                self.wanted = wanted;
                return self.need_more(eof, &[]);
            }
            Err(Stop::Invalid { kind, at, name }) => {
                self.message_offset = self.offset + at as u64;
                return Err(self.error(kind, name));
            }
        };
        self.message_offset = self.offset + group.at as u64;
        let extent = matches!(group.message, Message::Extent { .. });
        if open.is_some_and(|file| file.left.is_none()) && !extent {
            // A resumed decoder's open file ended where another message came.
            self.v2().open = None;
        }
        match group.message {
            Message::End { count } => {
                if !self.path.is_empty() {
                    return Err(self.error(FormatError::EndInsideDir(self.path.len()), None));
                }
                if count != self.entries {
                    let kind = FormatError::CountMismatch {
                        expected: count,
                        actual: self.entries,
                    };
                    return Err(self.error(kind, None));
                }
                self.offset += 9;
                self.state = State::Ended;
                let entries = self.entries;
                Ok(Step::Event(Event::End { entries }, 9))
            }
            Message::Pop => {
                if self.path.pop().is_none() {
                    return Err(self.error(FormatError::PopAtRoot, None));
                }
                let mut names = self.seen.pop().expect("one per open directory");
                names.clear();
                self.spare.push(names);
                self.offset += 1;
                Ok(Step::Event(Event::Pop, 1))
            }
            Message::Entry(parsed) => self.entry(input, eof, whole, parsed),
            Message::Root(records, len) => {
                if !self.v2().first_group || self.v2().segments != 1 {
                    return Err(self.error(FormatError::MisplacedRoot, None));
                }
                self.v2().names = (records.names.0.to_vec(), records.names.1.to_vec());
                self.offset += len as u64;
                let meta = Meta {
                    mode: records.perm.unwrap_or(DEFAULT_DIR_MODE),
                    mtime: records.mtime,
                    owner: records.owner,
                };
                let xattrs = Xattrs(&input[records.xattrs]);
                Ok(Step::Event(Event::Root { meta, xattrs }, len))
            }
            Message::Extent { at, len, head } => self.extent(input, eof, whole, (at, len), head),
        }
    }

    /// An `EXTENT` of `len` bytes at `at` of the open `EXTFILE`, whose fields end at `head`.
    fn extent<'a>(
        &mut self,
        input: &'a [u8],
        eof: bool,
        whole: bool,
        (at, len): (u64, u64),
        head: usize,
    ) -> Result<Step<'a>, Error> {
        let open = self.v2().open.expect("an extent is due");
        let inside = at.checked_add(len).is_some_and(|end| end <= open.size);
        let name = std::mem::take(&mut self.v2().data_name);
        if len == 0 || at < open.end || !inside {
            return Err(self.error(FormatError::BadExtent, Some(&name)));
        }
        let bytes = self.bytes.saturating_add(len);
        if let Some(max) = self.limits.max_bytes.filter(|&max| bytes > max) {
            return Err(self.error(FormatError::TooManyBytes(max), Some(&name)));
        }
        let taken = (self.space).saturating_add(len.div_ceil(4096).saturating_mul(4096));
        if let Some(max) = self.limits.max_space.filter(|&max| taken > max) {
            return Err(self.error(FormatError::TooMuchSpace(max), Some(&name)));
        }
        self.v2().data_name = name;
        let Some((take, n)) = self.first_data(input, eof, whole, head, len, true)? else {
            return Ok(Step::NeedMore);
        };
        (self.bytes, self.space) = (bytes, taken);
        if let Some(open) = &mut self.v2().open {
            open.end = at + len;
        }
        let data = &input[head..head + take];
        Ok(Step::Event(Event::Extent { at, len, data }, n))
    }

    /// The first data of a `FILE` or `EXTENT` of `size` bytes, after `head` bytes of its group
    /// at the start of `input`: how many bytes of data to pass on and of input to consume,
    /// or `None` to wait for more input. Whole data comes only with its digest, checked.
    fn first_data(
        &mut self,
        input: &[u8],
        eof: bool,
        whole: bool,
        head: usize,
        size: u64,
        extent: bool,
    ) -> Result<Option<(usize, usize)>, Error> {
        let available = (input.len() - head) as u64;
        if available < size.saturating_add(8) {
            if eof {
                let name = self.v2().data_name.clone();
                return Err(self.error(FormatError::Truncated, Some(&name)));
            }
            if whole || size == 0 {
                let wanted = (head as u64).saturating_add(size).saturating_add(8);
                self.wanted = usize::try_from(wanted).unwrap_or(usize::MAX);
                return Ok(None);
            }
        }
        let (take, complete) = data_take(available, size);
        let take = take as usize;
        // The `FILE` or `EXTENT` itself, after the records of its group.
        let v2 = self.v2.as_ref().expect("version 2");
        let tag = if extent { 13 } else { 6 + v2.data_name.len() };
        let (at, trusted) = (self.offset + (head - tag) as u64, self.trusted);
        let v2 = self.v2();
        (v2.extent, v2.data_at) = (extent, at);
        v2.data = XxHash3_64::default();
        if !trusted {
            v2.data.write(&input[head..head + take]);
        }
        let mut n = head + take;
        if complete {
            self.check_data(&input[n..n + 8])?;
            self.v2().tail = 8;
            n += 8;
            self.state = State::Messages;
        } else {
            self.state = State::Data {
                remaining: size - take as u64,
            };
        }
        self.offset += n as u64;
        Ok(Some((take, n)))
    }

    /// Checks an entry against the tree and the limits (steps 10 to 14 of the decoding
    /// rules) and passes it on; its group starts `input`.
    fn entry<'a>(
        &mut self,
        input: &'a [u8],
        eof: bool,
        whole: bool,
        parsed: Parsed<'a>,
    ) -> Result<Step<'a>, Error> {
        let Parsed {
            records,
            name,
            fields,
            len,
        } = parsed;
        let seen = self.seen.last_mut().expect("root set always present");
        if self.v2.is_some() {
            match seen.last() {
                Some(last) if name == last => {
                    return Err(self.error(FormatError::DuplicateName, Some(name)))
                }
                Some(last) if name < last => {
                    return Err(self.error(FormatError::Unsorted, Some(name)))
                }
                _ => {}
            }
        } else if seen.contains(name) {
            return Err(self.error(FormatError::DuplicateName, Some(name)));
        }
        let dir = matches!(fields, Fields::Dir);
        if dir && self.path.len() >= self.limits.max_depth {
            return Err(self.error(FormatError::TooDeep(self.limits.max_depth), Some(name)));
        }
        if let Some(max) = self.limits.max_entries {
            if self.entries >= max {
                return Err(self.error(FormatError::TooManyEntries(max), Some(name)));
            }
        }
        let size = match fields {
            Fields::File { size } => size,
            _ => 0,
        };
        let v2 = self.v2.is_some();
        // Sizes are announced before their data, up to 2^64-1 each, so the totals saturate
        // (they only meet the limits); data the input does not hold is `truncated` later.
        let bytes = self.bytes.saturating_add(size);
        if let Some(max) = self.limits.max_bytes {
            if bytes > max {
                return Err(self.error(FormatError::TooManyBytes(max), Some(name)));
            }
        }
        let content = match fields {
            Fields::Symlink { target } => target.len() as u64,
            _ => size,
        };
        let taken = self
            .space
            .saturating_add(space(content, records.xattrs.len() as u64));
        if let Some(max) = self.limits.max_space {
            if taken > max {
                return Err(self.error(FormatError::TooMuchSpace(max), Some(name)));
            }
        }
        let available = (input.len() - len) as u64;
        if available < size && !v2 {
            if eof {
                return Err(self.error(FormatError::Truncated, Some(name)));
            }
            if whole {
                let message = (len as u64).saturating_add(size);
                self.wanted = usize::try_from(message).unwrap_or(usize::MAX);
                return Ok(Step::NeedMore);
            }
        }
        // Version 2: whole data comes only with its digest (see `first_data`).
        let file_v2 = v2 && matches!(fields, Fields::File { .. });
        if file_v2 && available < size.saturating_add(8) && (eof || whole || size == 0) {
            if eof {
                return Err(self.error(FormatError::Truncated, Some(name)));
            }
            let wanted = (len as u64).saturating_add(size).saturating_add(8);
            self.wanted = usize::try_from(wanted).unwrap_or(usize::MAX);
            return Ok(Step::NeedMore);
        }
        self.seen
            .last_mut()
            .expect("root set always present")
            .add(name);
        let number = self.entries;
        self.entries += 1;
        self.bytes = bytes;
        self.space = taken;
        if v2 {
            self.row(name, &fields, records.linked, records.names);
        }
        self.offset += len as u64;
        let entry = |kind, default| Entry {
            name,
            kind,
            meta: Meta {
                mode: records.perm.unwrap_or(default),
                mtime: records.mtime,
                owner: records.owner,
            },
            xattrs: Xattrs(&input[records.xattrs.clone()]),
            link_id: None,
        };
        let event = match fields {
            Fields::Dir => {
                self.path.push(name.into());
                let names = self.spare.pop().unwrap_or_default();
                self.seen.push(names);
                Event::Dir(entry(Kind::Dir, DEFAULT_DIR_MODE))
            }
            Fields::File { size } => {
                let mut entry = entry(Kind::File, DEFAULT_FILE_MODE);
                if records.linked {
                    entry.link_id = Some(number);
                    self.linked.push(number);
                }
                if v2 {
                    self.offset -= len as u64;
                    self.v2().data_name = name.to_vec();
                    let (take, n) = (self.first_data(input, eof, whole, len, size, false)?)
                        .expect("the digest's bytes were awaited above");
                    let data = &input[len..len + take];
                    return Ok(Step::Event(Event::File { entry, size, data }, n));
                }
                let take = size.min(available) as usize;
                self.state = State::Data { remaining: size };
                self.skip_data(take as u64);
                let data = &input[len..len + take];
                return Ok(Step::Event(Event::File { entry, size, data }, len + take));
            }
            Fields::ExtFile { size, extents } => {
                let mut entry = entry(Kind::File, DEFAULT_FILE_MODE);
                if records.linked {
                    entry.link_id = Some(number);
                    self.linked.push(number);
                }
                let v2 = self.v2();
                v2.data_name = name.to_vec();
                v2.open = (extents > 0).then_some(OpenFile {
                    number,
                    left: Some(extents),
                    end: 0,
                    size,
                });
                Event::SparseFile {
                    entry,
                    size,
                    extents,
                }
            }
            Fields::Symlink { target } => Event::Symlink {
                entry: entry(Kind::Symlink, SYMLINK_MODE),
                target,
            },
            Fields::HardLink { target } => Event::HardLink {
                entry: Entry::new(name, Kind::File, Meta::default()),
                target,
            },
            Fields::Special { kind, device } => Event::Special {
                entry: entry(kind, DEFAULT_SPECIAL_MODE),
                device,
            },
        };
        Ok(Step::Event(event, len))
    }

    /// Adds the index row of the entry `name` (its group at the body's current position).
    fn row(&mut self, name: &[u8], fields: &Fields<'_>, linked: bool, names: (&[u8], &[u8])) {
        let kind = match *fields {
            Fields::Dir => (v2::KIND_DIR, 0),
            Fields::File { size } => (v2::KIND_FILE, size),
            Fields::ExtFile { size, .. } => (v2::KIND_EXTFILE, size),
            Fields::Symlink { target } => (v2::KIND_SYMLINK, target.len() as u64),
            Fields::HardLink { target } => (v2::KIND_HARDLINK, target),
            Fields::Special { kind, .. } => (v2::kind_special(kind), 0),
        };
        let kind = (kind.0 | if linked { v2::KIND_LINKED } else { 0 }, kind.1);
        let v2 = self.v2.as_mut().expect("a version 2 archive");
        let place = (u64::from(v2.segments - 1), v2.body_pos);
        let dirs = self.path.iter().map(|dir| &dir[..]);
        v2.expect.row(dirs, name, kind, place);
        v2.names.0.clear();
        v2.names.0.extend_from_slice(names.0);
        v2.names.1.clear();
        v2.names.1.extend_from_slice(names.1);
    }

    fn error(&self, kind: FormatError, name: Option<&[u8]>) -> Error {
        let inflated = self.v2.as_ref().filter(|v2| v2.inflated);
        Error::Format {
            offset: inflated.map_or(self.message_offset, |v2| v2.frame_at),
            path: TreePath::join(self.dir_names(), name.unwrap_or_default()),
            kind,
        }
    }
}

/// Decodes a complete archive held in memory, calling `on_event` for each event.
pub fn decode_all(
    input: &[u8],
    limits: Limits,
    on_event: impl FnMut(&Decoder, Event<'_>) -> Result<(), Error>,
) -> Result<u64, Error> {
    decode_each(input, limits, on_event)
}

/// [`decode_all`] for a caller whose errors are of another type (a sink's).
pub(crate) fn decode_each<E: From<Error>>(
    input: &[u8],
    limits: Limits,
    mut on_event: impl FnMut(&Decoder, Event<'_>) -> Result<(), E>,
) -> Result<u64, E> {
    let mut decoder = Decoder::new(limits);
    let mut ended = None;
    decode_with(&mut decoder, input, true, |decoder, event| match event {
        Event::End { entries } => {
            ended = Some(entries);
            Ok(())
        }
        Event::Padding => Ok(()),
        event => on_event(decoder, event),
    })?;
    Ok(ended.expect("Done only after the end"))
}

/// Decodes `input` with `decoder`, calling `on_event` for each event (zstd frames
/// inflated), until the archive ends or, unless `eof`, the input holds no whole message
/// more; returns the bytes consumed.
pub(crate) fn decode_with<E: From<Error>>(
    decoder: &mut Decoder,
    input: &[u8],
    eof: bool,
    mut on_event: impl FnMut(&Decoder, Event<'_>) -> Result<(), E>,
) -> Result<usize, E> {
    let (mut pos, mut body) = (0, Vec::new());
    loop {
        match decoder.next(&input[pos..], eof)? {
            Step::Event(event, n) => {
                pos += n;
                on_event(decoder, event)?;
            }
            Step::Done | Step::NeedMore => return Ok(pos),
            Step::Inflate {
                consumed,
                stored,
                body: len,
            } => {
                pos += consumed;
                let frame = input.get(pos..pos + stored as usize);
                let frame = frame.ok_or_else(|| decoder.frame_error(FormatError::Truncated))?;
                let inflated = super::inflate(frame, len, &mut body);
                inflated.map_err(|kind| decoder.frame_error(kind))?;
                pos += frame.len();
                inflated_events(decoder, &body, |decoder, event| on_event(decoder, event))?;
            }
        }
    }
}

/// Decodes the inflated `body` of the frame a [`Step::Inflate`] announced, calling
/// `on_event` for each event.
pub(crate) fn inflated_events<E: From<Error>>(
    decoder: &mut Decoder,
    body: &[u8],
    mut on_event: impl FnMut(&Decoder, Event<'_>) -> Result<(), E>,
) -> Result<(), E> {
    let mut pos = 0;
    while decoder.inflating() {
        match decoder.next(&body[pos..], true)? {
            Step::Event(event, n) => {
                pos += n;
                on_event(decoder, event)?;
            }
            _ => unreachable!("a whole body decodes to events"),
        }
    }
    Ok(())
}

/// Whether every `FILE` and `EXTENT` of the version 2 segment body `body` has the data its
/// digest says, its messages read as [`Decoder`] reads them (hard links to any entry), each
/// range of data and its stated digest judged by `matches`. False also where they do not
/// read so: the decoder then checks for itself, and fails. For the threaded engine, which
/// runs it on the landing threads and lets the decoding thread trust the data
/// ([`Decoder::trust_data`]): wherever that decoder reads data without failing first, it
/// reads the same messages as this.
pub(crate) fn data_digests_match(
    body: &[u8],
    mut matches: impl FnMut(std::ops::Range<usize>, u64) -> bool,
) -> bool {
    // `START`: tag, first, open, depth, then `depth` names.
    let start = || {
        let depth = u16::from_le_bytes(body.get(17..19)?.try_into().ok()?);
        let mut pos = 19;
        for _ in 0..depth {
            pos += body.get(pos..)?.iter().position(|&b| b == 0)? + 1;
        }
        (body[0] == TAG_START).then_some(pos)
    };
    let Some(mut pos) = start() else {
        return false;
    };
    while pos < body.len() {
        let grammar = Grammar {
            extended: false,
            v2: true,
            extent_due: body[pos] == TAG_EXTENT,
            extent_may: body[pos] == TAG_EXTENT,
        };
        let Ok(group) = parse_group(&body[pos..], grammar, None) else {
            return false;
        };
        // Where the data starts in the group, and its length.
        let (head, len) = match group.message {
            Message::Entry(Parsed {
                fields: Fields::File { size },
                len,
                ..
            }) => (len, size),
            Message::Extent { len, head, .. } => (head, len),
            Message::Entry(Parsed { len, .. }) | Message::Root(_, len) => {
                pos += len;
                continue;
            }
            Message::Pop => {
                pos += group.at + 1;
                continue;
            }
            Message::End { .. } => return false,
        };
        let data = pos + head;
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|len| data.checked_add(len))
        else {
            return false;
        };
        let Some(stated) = body.get(end..end + 8) else {
            return false;
        };
        let stated = u64::from_le_bytes(stated.try_into().expect("8 bytes"));
        if !matches(data..end, stated) {
            return false;
        }
        pos = end + 8;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::{space, Decoder, Event, Names, Step};
    use crate::format::encode::{push_end, push_file_header};
    use crate::format::{Encoder, FormatError, Limits, HEADER};
    use crate::tree::{Device, Entry, Kind, Meta, Owner, Timestamp, Xattrs};

    fn file(name: &[u8]) -> Entry<'_> {
        Entry::file(name, Meta::with_mode(0o644))
    }

    /// An extended archive: a directory `d`, then a file with every record (one of its
    /// extended attributes 10,000 bytes), a symlink with a long target, a hard link and a
    /// character device; and where each group after `d` ends.
    fn extended() -> (Vec<u8>, Vec<usize>) {
        let mut xattrs = Vec::new();
        Xattrs::push(&mut xattrs, b"user.a", b"1");
        Xattrs::push(&mut xattrs, b"user.big", &[7; 10_000]);
        let meta = Meta {
            mode: 0o4750,
            mtime: Some(Timestamp { sec: -3, nsec: 9 }),
            owner: Some(Owner { uid: 1, gid: 2 }),
        };
        let mut full = Entry::file(b"f", meta);
        full.xattrs = Xattrs(&xattrs);
        full.link_id = Some(1);
        let mut encoder = Encoder::extended(Vec::new());
        encoder.dir(b"d", 0o755).unwrap();
        encoder.file_with(&full, b"").unwrap();
        let link = Entry::new(b"l", Kind::Symlink, meta);
        encoder.symlink(&link, &[b'x'; 4000]).unwrap();
        encoder.hard_link(b"h", 1).unwrap();
        let null = Entry::new(b"null", Kind::CharDevice, Meta::with_mode(0o666));
        let device = Device { major: 1, minor: 3 };
        encoder.special(&null, device).unwrap();
        let archive = encoder.finish().unwrap();
        let mut ends = Vec::new();
        let mut decoder = Decoder::new(Limits::default());
        let mut pos = 0;
        while let Step::Event(event, n) = decoder.next(&archive[pos..], true).unwrap() {
            pos += n;
            if !matches!(event, Event::Dir(_) | Event::Pop | Event::End { .. }) {
                ends.push(pos);
            }
        }
        (archive, ends)
    }

    /// A group (records, entry header, symlink target) is consumed only once it is whole;
    /// until then `wanted` says how much of it is known to come, never less than what is
    /// there, and never past its end.
    #[test]
    fn a_group_is_consumed_whole_and_wanted_grows_toward_its_end() {
        let (archive, ends) = extended();
        let mut start = HEADER.len() + 3; // after DIR "d"
        for &end in &ends {
            let group = &archive[start..end];
            let (mut decoder, mut pos) = (Decoder::new(Limits::default()), 0);
            while pos < start {
                let Step::Event(_, n) = decoder.next(&archive[pos..start], false).unwrap() else {
                    panic!("the groups before are whole");
                };
                pos += n;
            }
            let mut last = 0;
            for cut in 0..group.len() {
                let step = decoder.next(&group[..cut], false).unwrap();
                assert_eq!(step, Step::NeedMore, "group at {start} cut at {cut}");
                let wanted = decoder.wanted();
                assert!(wanted > cut && wanted <= group.len(), "{wanted} at {cut}");
                assert!(wanted >= last, "wanted shrank at {cut}");
                last = wanted;
            }
            match decoder.next(group, false).unwrap() {
                Step::Event(_, n) => assert_eq!(n, group.len(), "group at {start}"),
                other => panic!("group at {start}: {other:?}"),
            }
            start = end;
        }
    }

    /// The events carry what the records said: all twelve mode bits, time, owner, the
    /// extended attributes as they are in the input, the file's own number as its link id.
    #[test]
    fn events_carry_the_records_and_borrow_the_xattrs() {
        let (archive, _) = extended();
        let mut events = Vec::new();
        let input = &archive[..];
        super::decode_all(input, Limits::default(), |_, event| {
            events.push(format!("{event:?}"));
            match event {
                Event::File { entry, .. } => {
                    assert_eq!(entry.meta.mode, 0o4750);
                    assert_eq!(entry.meta.mtime, Some(Timestamp { sec: -3, nsec: 9 }));
                    assert_eq!(entry.meta.owner, Some(Owner { uid: 1, gid: 2 }));
                    assert_eq!(entry.link_id, Some(1));
                    let names: Vec<_> = entry.xattrs.iter().map(|(n, v)| (n, v.len())).collect();
                    assert_eq!(names, [(&b"user.a"[..], 1), (b"user.big", 10_000)]);
                    let at = entry.xattrs.0.as_ptr() as usize - input.as_ptr() as usize;
                    assert!(at < input.len(), "xattrs copied");
                }
                Event::Symlink { entry, target } => {
                    assert_eq!(
                        (entry.kind, entry.meta.mode, target.len()),
                        (Kind::Symlink, 0o777, 4000)
                    );
                    assert!(entry.meta.mtime.is_some() && entry.link_id.is_none());
                }
                Event::HardLink { entry, target } => {
                    assert_eq!(
                        (entry.name, target, entry.meta),
                        (&b"h"[..], 1, Meta::default())
                    );
                }
                Event::Special { entry, device } => {
                    assert_eq!((entry.kind, entry.meta.mode), (Kind::CharDevice, 0o666));
                    assert_eq!(device, Device { major: 1, minor: 3 });
                }
                _ => {}
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(events.len(), 6, "{events:#?}");
    }

    /// `next_whole` consumes nothing until a file's content is all there and says how long
    /// its message is, in the first message (after the archive header) as in later ones.
    #[test]
    fn next_whole_waits_for_whole_files_and_says_how_much() {
        let mut archive = HEADER.to_vec();
        let mut ends = Vec::new();
        for (name, size) in [(&b"a"[..], 300usize), (b"b", 5)] {
            push_file_header(&mut archive, &file(name), size as u64);
            archive.resize(archive.len() + size, b'x');
            ends.push(archive.len());
        }
        push_end(&mut archive, 2);
        let first_end = ends[0];
        let mut decoder = Decoder::new(Limits::default());
        let mut pos = 0;
        for (cut, wanted) in [(20, first_end), (first_end - 1, first_end)] {
            let step = decoder.next_whole(&archive[..cut], false).unwrap();
            assert_eq!(step, Step::NeedMore, "cut at {cut}");
            assert_eq!(decoder.wanted(), wanted, "cut at {cut}");
        }
        let Ok(Step::Event(_, n)) = decoder.next_whole(&archive[..first_end], false) else {
            panic!("the first file is whole");
        };
        assert_eq!(n, first_end);
        let step = decoder.next_whole(&archive[n..ends[1] - 1], false).unwrap();
        assert_eq!(step, Step::NeedMore, "the second file cut");
        assert_eq!(decoder.wanted(), ends[1] - ends[0]);
        pos += n;
        while let Step::Event(event, n) = decoder.next_whole(&archive[pos..], false).unwrap() {
            if let Event::File { size, data, .. } = event {
                assert_eq!(data.len() as u64, size, "a whole file");
            }
            pos += n;
        }
        assert_eq!(pos, archive.len(), "everything decoded");
        assert_eq!(decoder.wanted(), 0, "nothing wanted after the end");

        // An announced size near 2^64 wants everything, without overflowing.
        let mut huge = HEADER.to_vec();
        push_file_header(&mut huge, &file(b"f"), u64::MAX);
        let mut decoder = Decoder::new(Limits::default());
        assert_eq!(decoder.next_whole(&huge, false).unwrap(), Step::NeedMore);
        assert_eq!(decoder.wanted(), usize::MAX);
    }

    /// With zero padding allowed, zeros after the end are consumed in any chunks and the
    /// first other byte is `trailing-bytes` at its own offset; without, the first byte is.
    #[test]
    fn zero_padding_after_the_end_is_consumed_and_anything_else_is_trailing() {
        let mut archive = HEADER.to_vec();
        push_end(&mut archive, 0);
        let end = archive.len();
        archive.extend_from_slice(&[0; 10_000]);
        let padded = Limits {
            zero_padding: true,
            ..Limits::default()
        };
        let run = |input: &[u8], limits: Limits, chunk: usize| {
            let mut decoder = Decoder::new(limits);
            let (mut pos, mut fed) = (0, chunk.min(input.len()));
            loop {
                match decoder.next(&input[pos..fed], fed == input.len()) {
                    Ok(Step::Done) => return Ok(decoder.offset()),
                    Ok(Step::Event(_, n)) => pos += n,
                    Ok(Step::NeedMore) => fed = (fed + chunk).min(input.len()),
                    Err(crate::Error::Format { offset, kind, .. }) => return Err((kind, offset)),
                    Err(e) => panic!("{e}"),
                    Ok(Step::Inflate { .. }) => unreachable!("version 1"),
                }
            }
        };
        for chunk in [1, 7, 4096, usize::MAX] {
            assert_eq!(run(&archive, padded, chunk), Ok(archive.len() as u64));
            let trailing = Err((FormatError::TrailingBytes, end as u64));
            assert_eq!(run(&archive, Limits::default(), chunk), trailing);
            let mut garbage = archive.clone();
            garbage.push(b'x');
            let at = Err((FormatError::TrailingBytes, archive.len() as u64));
            assert_eq!(run(&garbage, padded, chunk), at, "chunk {chunk}");
        }
    }

    /// `max_space` charges every entry at least a 4 KiB block (content and xattrs rounded up
    /// to blocks), once however the input is cut, and refuses the entry that passes it.
    #[test]
    fn every_entry_is_charged_its_space_once() {
        assert_eq!(
            [space(0, 0), space(4096, 0), space(4096, 1)],
            [4096, 4096, 8192]
        );
        assert_eq!(space(u64::MAX, 1), u64::MAX, "saturates");
        let (archive, _) = extended();
        // d, l (4,000 bytes of target), h and null: a block each; f: its xattrs, 3 blocks.
        let all = 7 * 4096;
        let run = |max: u64, chunk: usize| {
            let limits = Limits {
                max_space: Some(max),
                ..Limits::default()
            };
            let mut decoder = Decoder::new(limits);
            let (mut pos, mut fed) = (0, chunk.min(archive.len()));
            loop {
                match decoder.next(&archive[pos..fed], fed == archive.len()) {
                    Ok(Step::Done) => return Ok(()),
                    Ok(Step::Event(_, n)) => pos += n,
                    Ok(Step::NeedMore) => fed = (fed + chunk).min(archive.len()),
                    Err(crate::Error::Format { path, kind, .. }) => return Err((kind, path)),
                    Err(e) => panic!("{e}"),
                    Ok(Step::Inflate { .. }) => unreachable!("version 1"),
                }
            }
        };
        for chunk in [1, 100, usize::MAX] {
            assert_eq!(run(all, chunk), Ok(()), "chunk {chunk}");
            let (kind, path) = run(all - 1, chunk).unwrap_err();
            assert_eq!(kind, FormatError::TooMuchSpace(all - 1));
            assert_eq!(path.to_string(), "d/null");
        }
    }

    /// Adds each name unless seen; returns the index of the first repeat.
    fn first_repeat(names: &mut Names, list: &[&str]) -> Option<usize> {
        for (i, name) in list.iter().enumerate() {
            if names.contains(name.as_bytes()) {
                return Some(i);
            }
            names.add(name.as_bytes());
        }
        None
    }

    #[test]
    fn names_find_repeats_in_order_and_out_of_order() {
        let cases: [(&[&str], Option<usize>); 7] = [
            (&["a", "b", "c"], None),
            (&["a", "a"], Some(1)),
            (&["a", "ab", "b"], None),
            (&["c", "a", "b"], None),
            (&["c", "a", "c"], Some(2)),
            (&["a", "b", "c", "b"], Some(3)),
            (&["b", "c", "a", "d", "a"], Some(4)),
        ];
        for (list, want) in cases {
            let mut names = Names::default();
            assert_eq!(first_repeat(&mut names, list), want, "{list:?}");
            names.clear();
            assert_eq!(
                first_repeat(&mut names, &["x", "a"]),
                None,
                "{list:?} then cleared"
            );
        }
    }
}
