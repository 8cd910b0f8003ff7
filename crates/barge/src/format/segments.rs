//! Writing version 2 archives: [`Body`] builds one segment body (its bytes, its skeleton
//! digest and the index rows of its entries), [`IndexBuilder`] collects the segments and
//! rows in order and writes the index and footer, and [`SegmentEncoder`] drives both over
//! any `Write` for programs and tests that build archives from memory.

use std::hash::Hasher;
use std::io::Write;

use twox_hash::XxHash3_64;

use super::encode::{
    push_hard_link, push_named, push_records_named, push_special_message, push_symlink_message,
    symlink_records, EncodeError,
};
use super::v2::{self, push_varint};
use super::{
    check_name, digest, FormatError, CODEC_RAW, CODEC_ZSTD, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE,
    DEFAULT_SPECIAL_MODE, HEADER_V2, MAX_BODY, MAX_SYMLINK, NO_FILE, TAG_DIR, TAG_END, TAG_EXTENT,
    TAG_EXTFILE, TAG_FILE, TAG_INDEX, TAG_POP, TAG_ROOT, TAG_SEGMENT, TAG_START,
};
use crate::tree::{Device, Entry, Kind, Meta, Xattrs};

/// Where `barge pack` closes a segment: after the first group that brings its body to this.
pub const SEGMENT_TARGET: usize = 4 << 20;
/// Files without holes up to this size are `FILE`s; larger ones are cut into extents here.
pub const CHUNK: u64 = 4 << 20;

/// One index row, its segment number left to the writer.
struct Row {
    path: Vec<u8>,
    kind: u8,
    size: u64,
    offset: u64,
}

/// A segment body being built: `START`, then groups; file data is left out of its digest.
pub struct Body {
    /// Where `START` ends.
    start: usize,
    bytes: Vec<u8>,
    skeleton: XxHash3_64,
    first: u64,
    rows: Vec<Row>,
}

impl Body {
    /// A body starting after `first` entries, in the directory `dirs` (names from the root),
    /// with the extents of `open` (an `EXTFILE`'s entry number) to come first.
    pub fn new<'d>(
        first: u64,
        open: Option<u64>,
        dirs: impl ExactSizeIterator<Item = &'d [u8]>,
    ) -> Body {
        let mut bytes = vec![TAG_START];
        bytes.extend_from_slice(&first.to_le_bytes());
        bytes.extend_from_slice(&open.unwrap_or(NO_FILE).to_le_bytes());
        bytes.extend_from_slice(&(dirs.len() as u16).to_le_bytes());
        for dir in dirs {
            bytes.extend_from_slice(dir);
            bytes.push(0);
        }
        let mut skeleton = XxHash3_64::default();
        skeleton.write(&bytes);
        Body {
            start: bytes.len(),
            bytes,
            skeleton,
            first,
            rows: Vec::new(),
        }
    }

    /// Bytes so far.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether nothing follows `START`.
    pub fn is_empty(&self) -> bool {
        self.bytes.len() == self.start
    }

    /// Appends bytes the digest covers.
    fn skeleton(&mut self, bytes: &[u8]) {
        self.skeleton.write(bytes);
        self.bytes.extend_from_slice(bytes);
    }

    /// Appends file data and its digest.
    fn data(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        self.skeleton(&digest(data).to_le_bytes());
    }

    /// The group `group` (records and entry, up to any data) of the entry at `path`.
    fn group(&mut self, group: &[u8], path: Vec<u8>, (kind, size): (u8, u64)) {
        let offset = self.bytes.len() as u64;
        self.rows.push(Row {
            path,
            kind,
            size,
            offset,
        });
        self.skeleton(group);
    }
}

/// The segments and rows of an archive, in order: what its index says.
#[derive(Default)]
pub struct IndexBuilder {
    segs: Vec<u8>,
    rows: Vec<u8>,
    restarts: Vec<u8>,
    count: u64,
    previous: Vec<u8>,
    previous_segment: u64,
    segments: u32,
}

impl IndexBuilder {
    /// Takes in the rows of `body`, written as segment `self.segments` at `at`.
    fn segment(&mut self, at: u64, stored: u32, body: &Body, digest: u64) {
        self.segs.extend_from_slice(&at.to_le_bytes());
        self.segs.extend_from_slice(&stored.to_le_bytes());
        self.segs
            .extend_from_slice(&(body.bytes.len() as u32).to_le_bytes());
        self.segs.extend_from_slice(&body.first.to_le_bytes());
        self.segs.extend_from_slice(&digest.to_le_bytes());
        let segment = u64::from(self.segments);
        for row in &body.rows {
            let shared = match self.count % 16 {
                0 => {
                    self.restarts
                        .extend_from_slice(&(self.rows.len() as u32).to_le_bytes());
                    0
                }
                _ => (row.path.iter().zip(&self.previous))
                    .take_while(|(a, b)| a == b)
                    .count(),
            };
            push_varint(&mut self.rows, shared as u64);
            push_varint(&mut self.rows, (row.path.len() - shared) as u64);
            self.rows.extend_from_slice(&row.path[shared..]);
            self.rows.push(row.kind);
            push_varint(&mut self.rows, row.size);
            push_varint(&mut self.rows, segment - self.previous_segment);
            push_varint(&mut self.rows, row.offset);
            self.previous.clone_from(&row.path);
            self.previous_segment = segment;
            self.count += 1;
        }
        self.segments += 1;
    }

    /// The index body.
    fn body(&self) -> Vec<u8> {
        let mut body =
            Vec::with_capacity(12 + self.segs.len() + self.rows.len() + self.restarts.len());
        body.extend_from_slice(&self.segments.to_le_bytes());
        body.extend_from_slice(&self.count.to_le_bytes());
        body.extend_from_slice(&self.segs);
        body.extend_from_slice(&self.rows);
        body.extend_from_slice(&self.restarts);
        body
    }
}

/// A frame: head and stored bytes, zstd at `level` where that is smaller.
fn frame(tag: u8, body: &[u8], skeleton: u64, level: Option<i32>) -> Result<Vec<u8>, EncodeError> {
    let compressed = match level {
        Some(level) => Some(zstd::bulk::compress(body, level)?),
        None => None,
    };
    let (codec, stored) = match &compressed {
        Some(c) if c.len() < body.len() => (CODEC_ZSTD, &c[..]),
        _ => (CODEC_RAW, body),
    };
    let mut out = Vec::with_capacity(18 + stored.len());
    out.push(tag);
    out.push(codec);
    out.extend_from_slice(&(stored.len() as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&skeleton.to_le_bytes());
    out.extend_from_slice(stored);
    Ok(out)
}

/// A version 2 archive writer over any `Write` that rejects invalid names, unsorted
/// siblings and bad nesting; segments close at [`SEGMENT_TARGET`] or where asked.
pub struct SegmentEncoder<W: Write> {
    out: W,
    written: u64,
    level: Option<i32>,
    target: usize,
    body: Body,
    index: IndexBuilder,
    /// Open directories, and the last name used in each (the root's last).
    dirs: Vec<Vec<u8>>,
    last: Vec<Vec<u8>>,
    entries: u64,
    /// The `EXTFILE` whose extents are still to come: entry number, extents left, end.
    open: Option<(u64, u32, u64, u64)>,
    /// The user and group names of the next entry's `OWNER`.
    names: (Vec<u8>, Vec<u8>),
    scratch: Vec<u8>,
}

impl<W: Write> SegmentEncoder<W> {
    /// Starts a raw archive (the header is written at once).
    pub fn new(mut out: W) -> Result<SegmentEncoder<W>, EncodeError> {
        out.write_all(&HEADER_V2)?;
        Ok(SegmentEncoder {
            out,
            written: HEADER_V2.len() as u64,
            level: None,
            target: SEGMENT_TARGET,
            body: Body::new(0, None, std::iter::empty()),
            index: IndexBuilder::default(),
            dirs: Vec::new(),
            last: vec![Vec::new()],
            entries: 0,
            open: None,
            names: Default::default(),
            scratch: Vec::new(),
        })
    }

    /// Stores segments and the index as zstd frames at `level` where that is smaller.
    pub fn zstd(mut self, level: i32) -> Self {
        self.level = Some(level);
        self
    }

    /// Closes segments once their body reaches `target` bytes instead.
    pub fn segment_target(mut self, target: usize) -> Self {
        self.target = target.clamp(1, MAX_BODY as usize / 2);
        self
    }

    /// Gives the next entry's `OWNER` these user and group names.
    pub fn owner_names(&mut self, user: &[u8], group: &[u8]) {
        self.names = (user.to_vec(), group.to_vec());
    }

    /// The root directory's records (first, before any entry).
    pub fn root(&mut self, meta: Meta, xattrs: Xattrs<'_>) -> Result<(), EncodeError> {
        if self.index.segments > 0 || !self.body.is_empty() {
            return Err(FormatError::MisplacedRoot.into());
        }
        let entry = Entry {
            xattrs,
            ..Entry::dir(b"root", meta)
        };
        self.records(&entry, DEFAULT_DIR_MODE);
        self.scratch.push(TAG_ROOT);
        let group = std::mem::take(&mut self.scratch);
        self.body.skeleton(&group);
        self.scratch = group;
        self.group_done()
    }

    /// Creates the directory `entry` and enters it.
    pub fn dir_with(&mut self, entry: &Entry<'_>) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        self.records(entry, DEFAULT_DIR_MODE);
        push_named(&mut self.scratch, TAG_DIR, entry.name);
        self.add(entry, (v2::KIND_DIR, 0))?;
        self.dirs.push(entry.name.to_vec());
        self.last.push(Vec::new());
        self.group_done()
    }

    /// Adds the file `entry` with `data` (a `FILE`: no holes, at most what a body holds).
    pub fn file_with(&mut self, entry: &Entry<'_>, data: &[u8]) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        let size = u32::try_from(data.len()).map_err(|_| FormatError::BadFrame)?;
        self.records(entry, DEFAULT_FILE_MODE);
        push_named(&mut self.scratch, TAG_FILE, entry.name);
        self.scratch.extend_from_slice(&size.to_le_bytes());
        self.add(
            entry,
            (kind_linked(v2::KIND_FILE, entry), data.len() as u64),
        )?;
        self.body.data(data);
        self.group_done()
    }

    /// Adds the file `entry` of `size` bytes whose data comes in `extents` calls of
    /// [`SegmentEncoder::extent`] (an `EXTFILE`: sparse or large).
    pub fn ext_file(
        &mut self,
        entry: &Entry<'_>,
        size: u64,
        extents: u32,
    ) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        self.records(entry, DEFAULT_FILE_MODE);
        push_named(&mut self.scratch, TAG_EXTFILE, entry.name);
        self.scratch.extend_from_slice(&size.to_le_bytes());
        self.scratch.extend_from_slice(&extents.to_le_bytes());
        let number = self.entries;
        self.add(entry, (kind_linked(v2::KIND_EXTFILE, entry), size))?;
        self.open = (extents > 0).then_some((number, extents, 0, size));
        self.group_done()
    }

    /// The next extent of the open `EXTFILE`: `data` at offset `at`.
    pub fn extent(&mut self, at: u64, data: &[u8]) -> Result<(), EncodeError> {
        let Some((number, left, end, size)) = self.open else {
            return Err(FormatError::BadExtent.into());
        };
        let inside = at.checked_add(data.len() as u64).is_some_and(|e| e <= size);
        if data.is_empty() || at < end || !inside {
            return Err(FormatError::BadExtent.into());
        }
        self.scratch.clear();
        self.scratch.push(TAG_EXTENT);
        self.scratch.extend_from_slice(&at.to_le_bytes());
        self.scratch
            .extend_from_slice(&(data.len() as u32).to_le_bytes());
        let head = std::mem::take(&mut self.scratch);
        self.body.skeleton(&head);
        self.scratch = head;
        self.body.data(data);
        let end = at + data.len() as u64;
        self.open = (left > 1).then_some((number, left - 1, end, size));
        self.group_done()
    }

    /// Adds a symlink to `target`.
    pub fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        if target.is_empty() || target.len() > MAX_SYMLINK || target.contains(&0) {
            return Err(FormatError::BadSymlink.into());
        }
        self.records(&symlink_records(entry), DEFAULT_FILE_MODE);
        push_symlink_message(&mut self.scratch, entry.name, target);
        self.add(entry, (v2::KIND_SYMLINK, target.len() as u64))?;
        self.group_done()
    }

    /// Adds a hard link `name` to the entry numbered `target`, a file added with a
    /// `link_id`.
    pub fn hard_link(&mut self, name: &[u8], target: u64) -> Result<(), EncodeError> {
        self.check(name)?;
        self.scratch.clear();
        push_hard_link(&mut self.scratch, name, target);
        let entry = Entry::new(name, Kind::File, Meta::default());
        self.add(&entry, (v2::KIND_HARDLINK, target))?;
        self.group_done()
    }

    /// Adds a fifo or device (`entry.kind`).
    pub fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        self.records(entry, DEFAULT_SPECIAL_MODE);
        push_special_message(&mut self.scratch, entry, device);
        self.add(entry, (v2::kind_special(entry.kind), 0))?;
        self.group_done()
    }

    /// Leaves the current directory.
    pub fn pop(&mut self) -> Result<(), EncodeError> {
        if self.dirs.pop().is_none() {
            return Err(FormatError::PopAtRoot.into());
        }
        self.last.pop();
        self.body.skeleton(&[TAG_POP]);
        self.group_done()
    }

    /// Closes the current segment here (if it holds anything).
    pub fn cut(&mut self) -> Result<(), EncodeError> {
        if self.body.is_empty() {
            return Ok(());
        }
        let open = self.open.map(|(number, ..)| number);
        let dirs = self.dirs.iter().map(|d| &d[..]).collect::<Vec<_>>();
        let next = Body::new(self.entries, open, dirs.into_iter());
        let body = std::mem::replace(&mut self.body, next);
        let skeleton = body.skeleton.finish();
        let frame = frame(TAG_SEGMENT, &body.bytes, skeleton, self.level)?;
        self.index
            .segment(self.written, (frame.len() - 18) as u32, &body, skeleton);
        self.out.write_all(&frame)?;
        self.written += frame.len() as u64;
        Ok(())
    }

    /// Closes every open directory and the last segment, writes the index and the footer,
    /// and returns the writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        if self.open.is_some() {
            return Err(FormatError::BadExtent.into());
        }
        while !self.dirs.is_empty() {
            self.pop()?;
        }
        self.cut()?;
        let body = self.index.body();
        let index_at = self.written;
        let index = frame(TAG_INDEX, &body, digest(&body), self.level)?;
        self.out.write_all(&index)?;
        let mut footer = vec![TAG_END];
        footer.extend_from_slice(&self.entries.to_le_bytes());
        footer.extend_from_slice(&self.index.segments.to_le_bytes());
        footer.extend_from_slice(&index_at.to_le_bytes());
        let check = digest(&footer);
        footer.extend_from_slice(&check.to_le_bytes());
        footer.extend_from_slice(&HEADER_V2);
        self.out.write_all(&footer)?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Starts a group in `scratch` with `entry`'s records (its `OWNER` with the names given
    /// last).
    fn records(&mut self, entry: &Entry<'_>, default: u32) {
        self.scratch.clear();
        let (user, group) = std::mem::take(&mut self.names);
        push_records_named(&mut self.scratch, entry, default, Some((&user, &group)));
    }

    /// Checks `name` is valid, above the last in its directory, and no extent is due.
    fn check(&mut self, name: &[u8]) -> Result<(), EncodeError> {
        check_name(name)?;
        if self.open.is_some() {
            return Err(FormatError::BadExtent.into());
        }
        let last = self.last.last().expect("the root's last name");
        if !last.is_empty() && name <= &last[..] {
            let kind = match name == &last[..] {
                true => FormatError::DuplicateName,
                false => FormatError::Unsorted,
            };
            return Err(kind.into());
        }
        Ok(())
    }

    /// Puts the group in `scratch` (entry `entry`, index `kind` and size) into the body.
    fn add(&mut self, entry: &Entry<'_>, kind: (u8, u64)) -> Result<(), EncodeError> {
        let mut path = Vec::new();
        for dir in &self.dirs {
            path.extend_from_slice(dir);
            path.push(b'/');
        }
        path.extend_from_slice(entry.name);
        let group = std::mem::take(&mut self.scratch);
        self.body.group(&group, path, kind);
        self.scratch = group;
        let last = self.last.last_mut().expect("the root's last name");
        last.clear();
        last.extend_from_slice(entry.name);
        self.entries += 1;
        Ok(())
    }

    /// After a group: closes the segment once it reaches the target (unless extents are
    /// due mid-file, which may span segments too).
    fn group_done(&mut self) -> Result<(), EncodeError> {
        if self.body.len() >= self.target {
            self.cut()?;
        }
        Ok(())
    }
}

/// `kind` with the `LINKED` bit when `entry` carries a link id.
fn kind_linked(kind: u8, entry: &Entry<'_>) -> u8 {
    kind | if entry.link_id.is_some() {
        v2::KIND_LINKED
    } else {
        0
    }
}
