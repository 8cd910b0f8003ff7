//! Writing version 2 archives. [`Layout`] lays the groups of an archive out in segment
//! bodies cut at the target size and in the index rows ([`Rows`]); a [`Body`] holds a body
//! without its file data, only where each piece goes and where it comes from, so it is
//! small and its length is known before any file is read. [`Body::seal`] puts the data in,
//! computes the digests and frames the body (zstd where that is smaller); [`Segs`] and
//! [`tail`] write the index and the footer. [`SegmentEncoder`] drives them over any `Write`
//! for programs and tests that build archives from memory; `pack` drives them from a walk
//! and seals the bodies on every core.

use std::convert::Infallible;
use std::io::{Cursor, Write};

use zstd::zstd_safe::{CCtx, CParameter};

use super::encode::{
    push_hard_link, push_named, push_records_named, push_special_message, push_symlink_message,
    symlink_records, EncodeError,
};
use super::index::varint;
use super::v2::{self, push_varint, OpenFile};
use super::{
    check_name, digest, FormatError, CODEC_RAW, CODEC_ZSTD, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE,
    DEFAULT_SPECIAL_MODE, FRAME_HEAD, HEADER_V2, MAX_BODY, MAX_SYMLINK, NO_FILE, TAG_DIR, TAG_END,
    TAG_EXTENT, TAG_EXTFILE, TAG_FILE, TAG_INDEX, TAG_POP, TAG_ROOT, TAG_SEGMENT, TAG_START,
};
use crate::tree::{Device, Entry, Meta, Xattrs};

/// Where `barge pack` closes a segment: after the first group that brings its body to this.
pub const SEGMENT_TARGET: usize = 4 << 20;
/// Files without holes up to this size are `FILE`s; larger ones are cut into extents here.
pub const CHUNK: u64 = 4 << 20;

/// The user and group names an `OWNER` carries (empty: none).
pub(crate) type Names<'a> = (&'a [u8], &'a [u8]);

/// File data of a body: `len` bytes from `source`, to go before the digest slot at `slot`
/// of the skeleton.
struct Piece<D> {
    slot: usize,
    len: usize,
    source: D,
}

/// A segment body as laid out: its skeleton (the body without file data, with an 8-byte slot
/// for each piece's digest) and its pieces of file data, still at their sources.
pub(crate) struct Body<D> {
    first: u64,
    skeleton: Vec<u8>,
    /// Where `START` ends.
    start: usize,
    pieces: Vec<Piece<D>>,
    /// The body's length, data included.
    len: usize,
}

/// A piece of file data as [`Body::seal`] hands it out: the skeleton bytes that go before
/// it, how long it is, and where it comes from.
pub(crate) struct Part<'b, D> {
    pub(crate) prefix: &'b [u8],
    pub(crate) len: usize,
    pub(crate) source: D,
}

/// A framed segment: its head and stored bytes, and what the index says of it.
pub(crate) struct Sealed {
    pub(crate) frame: Vec<u8>,
    body: u32,
    first: u64,
    digest: u64,
}

impl<D> Body<D> {
    /// A body starting after `first` entries, in the directory `path` (its names from the
    /// root, each followed by `/`), with the extents of `open` (an `EXTFILE`'s entry number)
    /// to come first.
    fn new(first: u64, open: Option<u64>, path: &[u8]) -> Body<D> {
        let mut skeleton = vec![TAG_START];
        skeleton.extend_from_slice(&first.to_le_bytes());
        skeleton.extend_from_slice(&open.unwrap_or(NO_FILE).to_le_bytes());
        let depth = path.iter().filter(|&&b| b == b'/').count() as u16;
        skeleton.extend_from_slice(&depth.to_le_bytes());
        skeleton.extend(path.iter().map(|&b| if b == b'/' { 0 } else { b }));
        Body {
            first,
            start: skeleton.len(),
            len: skeleton.len(),
            skeleton,
            pieces: Vec::new(),
        }
    }

    /// The length of this body's frame stored raw (`seal` without zstd).
    pub(crate) fn raw_frame_len(&self) -> u64 {
        (FRAME_HEAD + self.len) as u64
    }

    /// Whether nothing follows `START`.
    fn is_empty(&self) -> bool {
        self.skeleton.len() == self.start
    }

    /// Appends message bytes.
    fn push(&mut self, bytes: &[u8]) {
        self.skeleton.extend_from_slice(bytes);
        self.len += bytes.len();
    }

    /// Appends `len` bytes of file data from `source` and their digest.
    fn piece(&mut self, len: usize, source: D) {
        let slot = self.skeleton.len();
        self.pieces.push(Piece { slot, len, source });
        self.skeleton.extend_from_slice(&[0; 8]);
        self.len += len + 8;
    }

    /// The frame of this body, built in `buf`: `fill` appends each [`Part`] in order (its
    /// prefix, then exactly its `len` bytes), then the digests of the pieces and of the
    /// skeleton are computed, and the body is stored as zstd by `zstd` where that is smaller.
    /// `buf` has room for the body; after each piece comes its digest's place, so a `fill`
    /// may read one byte past a piece there (a probe for growth).
    pub(crate) fn seal<E>(
        mut self,
        mut buf: Vec<u8>,
        fill: impl FnOnce(&mut dyn Iterator<Item = Part<'_, D>>, &mut Vec<u8>) -> Result<(), E>,
        zstd: Option<&mut Zstd>,
    ) -> Result<Sealed, E> {
        buf.clear();
        buf.reserve(FRAME_HEAD + self.len);
        buf.resize(FRAME_HEAD, 0);
        let pieces = std::mem::take(&mut self.pieces);
        let places: Vec<(usize, usize)> = pieces.iter().map(|p| (p.slot, p.len)).collect();
        let mut from = 0;
        let skeleton = &self.skeleton;
        let mut parts = pieces.into_iter().map(|Piece { slot, len, source }| {
            let prefix = &skeleton[from..slot];
            from = slot;
            Part {
                prefix,
                len,
                source,
            }
        });
        fill(&mut parts, &mut buf)?;
        assert!(parts.next().is_none(), "every piece is filled");
        drop(parts);
        let last = places.last().map_or(0, |&(slot, _)| slot);
        buf.extend_from_slice(&self.skeleton[last..]);
        assert_eq!(
            buf.len(),
            FRAME_HEAD + self.len,
            "pieces as long as laid out"
        );
        // Each piece's data is at its slot, after the data of the pieces before it.
        let mut before = FRAME_HEAD;
        for (slot, len) in places {
            let at = slot + before;
            let data = digest(&buf[at..at + len]).to_le_bytes();
            buf[at + len..at + len + 8].copy_from_slice(&data);
            self.skeleton[slot..slot + 8].copy_from_slice(&data);
            before += len;
        }
        let skeleton = digest(&self.skeleton);
        Ok(Sealed {
            body: self.len as u32,
            first: self.first,
            digest: skeleton,
            frame: framed(TAG_SEGMENT, buf, skeleton, zstd),
        })
    }
}

/// A zstd compressor at one level, with a buffer to compress into.
pub(crate) struct Zstd {
    cctx: CCtx<'static>,
    spare: Vec<u8>,
}

impl Zstd {
    /// A compressor at `level` (zstd clamps it to its range).
    pub(crate) fn new(level: i32) -> Zstd {
        let mut cctx = CCtx::create();
        // Only an unknown parameter fails; levels out of range are clamped.
        let _ = cctx.set_parameter(CParameter::CompressionLevel(level));
        Zstd {
            cctx,
            spare: Vec::new(),
        }
    }
}

/// Frames the body in `out` (after `FRAME_HEAD` bytes reserved for the head) whose digest
/// is `digest`: stored as zstd where `zstd` makes it smaller, else raw.
fn framed(tag: u8, mut out: Vec<u8>, digest: u64, zstd: Option<&mut Zstd>) -> Vec<u8> {
    let body = out.len() - FRAME_HEAD;
    let mut codec = CODEC_RAW;
    if let Some(zstd) = zstd {
        let mut packed = std::mem::take(&mut zstd.spare);
        packed.clear();
        // Room for a frame smaller than the body; one that does not fit is not kept.
        packed.reserve(FRAME_HEAD + body - 1);
        packed.resize(FRAME_HEAD, 0);
        let mut cursor = Cursor::new(packed);
        cursor.set_position(FRAME_HEAD as u64);
        let made = zstd.cctx.compress2(&mut cursor, &out[FRAME_HEAD..]);
        let packed = cursor.into_inner();
        if made.is_ok_and(|n| n < body) {
            zstd.spare = std::mem::replace(&mut out, packed);
            codec = CODEC_ZSTD;
        } else {
            zstd.spare = packed;
        }
    }
    let stored = (out.len() - FRAME_HEAD) as u32;
    let mut head = [tag, codec].to_vec();
    head.extend_from_slice(&stored.to_le_bytes());
    head.extend_from_slice(&(body as u32).to_le_bytes());
    head.extend_from_slice(&digest.to_le_bytes());
    out[..FRAME_HEAD].copy_from_slice(&head);
    out
}

/// The index rows of an archive's entries, in order.
#[derive(Default)]
pub(crate) struct Rows {
    bytes: Vec<u8>,
    restarts: Vec<u8>,
    count: u64,
    previous: Vec<u8>,
    previous_segment: u64,
}

impl Rows {
    /// How many rows there are.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The row of the entry `name` in the directory `dir` (its path with a trailing `/`, or
    /// empty), in segment `segment` at `offset`.
    fn push(&mut self, (dir, name): (&[u8], &[u8]), kind: (u8, u64), segment: u64, offset: u64) {
        let shared = match self.count % 16 {
            0 => {
                let at = self.bytes.len() as u32;
                self.restarts.extend_from_slice(&at.to_le_bytes());
                0
            }
            _ => (dir.iter().chain(name).zip(&self.previous))
                .take_while(|(a, b)| a == b)
                .count(),
        };
        push_varint(&mut self.bytes, shared as u64);
        push_varint(&mut self.bytes, (dir.len() + name.len() - shared) as u64);
        match shared.checked_sub(dir.len()) {
            Some(in_name) => self.bytes.extend_from_slice(&name[in_name..]),
            None => {
                self.bytes.extend_from_slice(&dir[shared..]);
                self.bytes.extend_from_slice(name);
            }
        }
        self.bytes.push(kind.0);
        push_varint(&mut self.bytes, kind.1);
        push_varint(&mut self.bytes, segment - self.previous_segment);
        push_varint(&mut self.bytes, offset);
        self.previous.clear();
        self.previous.extend_from_slice(dir);
        self.previous.extend_from_slice(name);
        self.previous_segment = segment;
        self.count += 1;
    }
}

/// The segments written so far, as the index lists them, and where the next one goes.
pub(crate) struct Segs {
    bytes: Vec<u8>,
    count: u32,
    at: u64,
}

impl Default for Segs {
    fn default() -> Segs {
        Segs {
            bytes: Vec::new(),
            count: 0,
            at: HEADER_V2.len() as u64,
        }
    }
}

impl Segs {
    /// None yet, the next at `at`.
    pub(crate) fn starting(at: u64) -> Segs {
        Segs {
            at,
            ..Segs::default()
        }
    }

    /// Where the next frame goes.
    pub(crate) fn at(&self) -> u64 {
        self.at
    }

    /// Lists `sealed`, written at the end of the archive.
    pub(crate) fn add(&mut self, sealed: &Sealed) {
        let stored = (sealed.frame.len() - FRAME_HEAD) as u32;
        self.bytes.extend_from_slice(&self.at.to_le_bytes());
        self.bytes.extend_from_slice(&stored.to_le_bytes());
        self.bytes.extend_from_slice(&sealed.body.to_le_bytes());
        self.bytes.extend_from_slice(&sealed.first.to_le_bytes());
        self.bytes.extend_from_slice(&sealed.digest.to_le_bytes());
        self.at += sealed.frame.len() as u64;
        self.count += 1;
    }
}

/// What follows the segments `segs`: the index of them and of the entries `rows` (framed by
/// `zstd` where smaller), and the footer.
pub(crate) fn tail(segs: &Segs, rows: &Rows, zstd: Option<&mut Zstd>) -> Vec<u8> {
    let parts = [&segs.bytes, &rows.bytes, &rows.restarts];
    let mut body =
        Vec::with_capacity(FRAME_HEAD + 12 + parts.iter().map(|p| p.len()).sum::<usize>());
    body.resize(FRAME_HEAD, 0);
    body.extend_from_slice(&segs.count.to_le_bytes());
    body.extend_from_slice(&rows.count.to_le_bytes());
    for part in parts {
        body.extend_from_slice(part);
    }
    let check = digest(&body[FRAME_HEAD..]);
    let mut out = framed(TAG_INDEX, body, check, zstd);
    let footer = out.len();
    out.push(TAG_END);
    out.extend_from_slice(&rows.count.to_le_bytes());
    out.extend_from_slice(&segs.count.to_le_bytes());
    out.extend_from_slice(&segs.at.to_le_bytes());
    let check = digest(&out[footer..]);
    out.extend_from_slice(&check.to_le_bytes());
    out.extend_from_slice(&HEADER_V2);
    out
}

/// What the index needs of a share of an archive (`pack --mpi`) whose frames `segs` lists
/// from offset 0 and whose entries `rows` lists: one byte string, for the process that
/// writes the index ([`shared_tail`]).
pub(crate) fn share_index(segs: &Segs, rows: &Rows) -> Vec<u8> {
    let mut out = Vec::with_capacity(28 + segs.bytes.len() + rows.bytes.len());
    out.extend_from_slice(&segs.at.to_le_bytes());
    out.extend_from_slice(&segs.count.to_le_bytes());
    out.extend_from_slice(&rows.count.to_le_bytes());
    out.extend_from_slice(&(segs.bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(&segs.bytes);
    out.extend_from_slice(&rows.bytes);
    out
}

/// The index and footer of the archive made of the header and the shares whose
/// [`share_index`] are `shares`, written one after the other in this order (a share's
/// segments are numbered and placed after those of the shares before it; its rows are
/// coded again after theirs), or what is wrong with a share's bytes.
pub(crate) fn shared_tail(shares: &[&[u8]], zstd: Option<&mut Zstd>) -> Result<Vec<u8>, String> {
    let mut segs = Segs::default();
    let mut rows = Rows::default();
    for (n, share) in shares.iter().enumerate() {
        let bad = || format!("the index of share {n} is malformed");
        let u64_at = |at: usize| -> Result<u64, String> {
            let bytes = share.get(at..at + 8).ok_or_else(bad)?;
            Ok(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
        };
        let (len, rows_count, segs_len) = (u64_at(0)?, u64_at(12)?, u64_at(20)? as usize);
        let count = u32::from_le_bytes(share.get(8..12).ok_or_else(bad)?.try_into().expect("4"));
        let records = share.get(28..28 + segs_len).ok_or_else(bad)?;
        if records.len() != count as usize * 32 {
            return Err(bad());
        }
        // Each segment's offset moves by where the share goes.
        let (base, segment_base) = (segs.at, u64::from(segs.count));
        for record in records.chunks_exact(32) {
            let at = u64::from_le_bytes(record[..8].try_into().expect("8 bytes")) + base;
            segs.bytes.extend_from_slice(&at.to_le_bytes());
            segs.bytes.extend_from_slice(&record[8..]);
        }
        segs.count += count;
        segs.at += len;
        // Rows: the path from the previous one's `shared` bytes and the suffix; the
        // segment numbered after the earlier shares'.
        let coded = &share[28 + segs_len..];
        let (mut pos, mut path, mut segment) = (0, Vec::new(), 0);
        for _ in 0..rows_count {
            let mut next = || varint(coded, &mut pos).ok_or_else(bad);
            let (shared, added) = (next()? as usize, next()? as usize);
            path.truncate(shared);
            path.extend_from_slice(coded.get(pos..pos + added).ok_or_else(bad)?);
            pos += added;
            let kind = *coded.get(pos).ok_or_else(bad)?;
            pos += 1;
            let mut next = || varint(coded, &mut pos).ok_or_else(bad);
            let (size, delta, offset) = (next()?, next()?, next()?);
            segment += delta;
            rows.push((b"", &path), (kind, size), segment_base + segment, offset);
        }
        if pos != coded.len() {
            return Err(bad());
        }
    }
    Ok(tail(&segs, &rows, zstd))
}

/// The groups of an archive laid out in bodies, each closed after the first group or
/// `EXTENT` that brings it to the target, and in index rows. Each method returns the body
/// it closed, if any. It checks nothing: its callers give it a valid archive.
pub(crate) struct Layout<D> {
    body: Body<D>,
    rows: Rows,
    /// The number of `body`'s segment.
    segment: u64,
    /// The current directory's names from the root, each followed by `/`.
    path: Vec<u8>,
    /// Where the name of each open directory starts in `path`.
    dirs: Vec<usize>,
    entries: u64,
    open: Option<OpenFile>,
    target: usize,
    /// The group being built.
    group: Vec<u8>,
}

impl<D> Layout<D> {
    /// An archive whose bodies close at `target` bytes.
    pub(crate) fn new(target: usize) -> Layout<D> {
        Layout {
            body: Body::new(0, None, b""),
            rows: Rows::default(),
            segment: 0,
            path: Vec::new(),
            dirs: Vec::new(),
            entries: 0,
            open: None,
            target,
            group: Vec::new(),
        }
    }

    /// An empty layout, closing bodies where this one does.
    pub(crate) fn anew(&self) -> Layout<D> {
        Layout::new(self.target)
    }

    /// Goes on from where others left the archive (a share of it, `pack --mpi`): after
    /// `first` entries, in the directory `dir` (its names joined by `/`). Before anything
    /// but the root's records.
    pub(crate) fn resume(&mut self, first: u64, dir: &[u8]) {
        assert!(
            self.dirs.is_empty() && self.rows.count == 0,
            "nothing laid out yet"
        );
        self.entries = first;
        for name in dir.split(|&b| b == b'/').filter(|name| !name.is_empty()) {
            self.dirs.push(self.path.len());
            self.path.extend_from_slice(name);
            self.path.push(b'/');
        }
        if self.body.is_empty() {
            self.body = Body::new(first, None, &self.path);
        }
    }

    /// The number the next entry gets.
    pub(crate) fn entries(&self) -> u64 {
        self.entries
    }

    /// The root directory's records (`entry`'s), first, before any entry.
    pub(crate) fn root(&mut self, entry: &Entry<'_>, names: Names<'_>) -> Option<Body<D>> {
        self.records(entry, DEFAULT_DIR_MODE, names);
        self.group.push(TAG_ROOT);
        self.body.push(&self.group);
        self.done()
    }

    /// Creates the directory `entry` and enters it.
    pub(crate) fn dir(&mut self, entry: &Entry<'_>, names: Names<'_>) -> Option<Body<D>> {
        self.records(entry, DEFAULT_DIR_MODE, names);
        push_named(&mut self.group, TAG_DIR, entry.name);
        self.add(entry.name, (v2::KIND_DIR, 0));
        self.dirs.push(self.path.len());
        self.path.extend_from_slice(entry.name);
        self.path.push(b'/');
        self.done()
    }

    /// Adds the file `entry` of `size` bytes (at most what a body holds) from `source`.
    pub(crate) fn file(
        &mut self,
        entry: &Entry<'_>,
        size: u32,
        source: D,
        names: Names<'_>,
    ) -> Option<Body<D>> {
        self.records(entry, DEFAULT_FILE_MODE, names);
        push_named(&mut self.group, TAG_FILE, entry.name);
        self.group.extend_from_slice(&size.to_le_bytes());
        self.add(entry.name, (kind_linked(v2::KIND_FILE, entry), size.into()));
        self.body.piece(size as usize, source);
        self.done()
    }

    /// Adds the file `entry` of `size` bytes whose data comes in the next `extents` extents.
    pub(crate) fn ext_file(
        &mut self,
        entry: &Entry<'_>,
        size: u64,
        extents: u32,
        names: Names<'_>,
    ) -> Option<Body<D>> {
        self.records(entry, DEFAULT_FILE_MODE, names);
        push_named(&mut self.group, TAG_EXTFILE, entry.name);
        self.group.extend_from_slice(&size.to_le_bytes());
        self.group.extend_from_slice(&extents.to_le_bytes());
        let number = self.entries;
        self.add(entry.name, (kind_linked(v2::KIND_EXTFILE, entry), size));
        self.open = (extents > 0).then_some(OpenFile {
            number,
            left: Some(extents),
            end: 0,
            size,
        });
        self.done()
    }

    /// The next extent of the open `EXTFILE`: `len` bytes at `at` from `source`.
    pub(crate) fn extent(&mut self, at: u64, len: u32, source: D) -> Option<Body<D>> {
        let mut head = [TAG_EXTENT; 13];
        head[1..9].copy_from_slice(&at.to_le_bytes());
        head[9..].copy_from_slice(&len.to_le_bytes());
        self.body.push(&head);
        self.body.piece(len as usize, source);
        self.open = self.open.filter(|o| o.left > Some(1)).map(|o| OpenFile {
            left: o.left.map(|left| left - 1),
            end: at + u64::from(len),
            ..o
        });
        self.done()
    }

    /// Adds a symlink to `target`.
    pub(crate) fn symlink(
        &mut self,
        entry: &Entry<'_>,
        target: &[u8],
        names: Names<'_>,
    ) -> Option<Body<D>> {
        self.records(&symlink_records(entry), DEFAULT_FILE_MODE, names);
        push_symlink_message(&mut self.group, entry.name, target);
        self.add(entry.name, (v2::KIND_SYMLINK, target.len() as u64));
        self.done()
    }

    /// Adds a hard link `name` to the entry numbered `target`.
    pub(crate) fn hard_link(&mut self, name: &[u8], target: u64) -> Option<Body<D>> {
        self.group.clear();
        push_hard_link(&mut self.group, name, target);
        self.add(name, (v2::KIND_HARDLINK, target));
        self.done()
    }

    /// Adds a fifo or device (`entry.kind`).
    pub(crate) fn special(
        &mut self,
        entry: &Entry<'_>,
        device: Device,
        names: Names<'_>,
    ) -> Option<Body<D>> {
        self.records(entry, DEFAULT_SPECIAL_MODE, names);
        push_special_message(&mut self.group, entry, device);
        self.add(entry.name, (v2::kind_special(entry.kind), 0));
        self.done()
    }

    /// Leaves the current directory (there is one).
    pub(crate) fn pop(&mut self) -> Option<Body<D>> {
        let start = self.dirs.pop().expect("a directory to leave");
        self.path.truncate(start);
        self.body.push(&[TAG_POP]);
        self.done()
    }

    /// Closes the current body here, unless it holds nothing.
    pub(crate) fn cut(&mut self) -> Option<Body<D>> {
        if self.body.is_empty() {
            return None;
        }
        let open = self.open.map(|o| o.number);
        let next = Body::new(self.entries, open, &self.path);
        self.segment += 1;
        Some(std::mem::replace(&mut self.body, next))
    }

    /// The last body and the rows, at depth 0 with no extent due.
    pub(crate) fn finish(mut self) -> (Option<Body<D>>, Rows) {
        (self.cut(), self.rows)
    }

    /// Starts a group with `entry`'s records (its `OWNER` with `names`).
    fn records(&mut self, entry: &Entry<'_>, default: u32, names: Names<'_>) {
        self.group.clear();
        push_records_named(&mut self.group, entry, default, Some(names));
    }

    /// Puts the group (entry `name`, index `kind` and size) into the body and the rows.
    fn add(&mut self, name: &[u8], kind: (u8, u64)) {
        let offset = self.body.len as u64;
        self.rows
            .push((&self.path, name), kind, self.segment, offset);
        self.body.push(&self.group);
        self.entries += 1;
    }

    /// After a group: closes the body once it reaches the target (also where extents are
    /// due: they may span bodies).
    fn done(&mut self) -> Option<Body<D>> {
        match self.body.len >= self.target {
            true => self.cut(),
            false => None,
        }
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

/// A version 2 archive writer over any `Write` that rejects invalid names, unsorted
/// siblings and bad nesting; segments close at [`SEGMENT_TARGET`] or where asked.
pub struct SegmentEncoder<W: Write> {
    out: W,
    layout: Layout<Vec<u8>>,
    segs: Segs,
    zstd: Option<Zstd>,
    /// The last name used in each open directory (the root's first).
    last: Vec<Vec<u8>>,
    /// The user and group names of the next entry's `OWNER`.
    names: (Vec<u8>, Vec<u8>),
}

impl<W: Write> SegmentEncoder<W> {
    /// Starts a raw archive (the header is written at once).
    pub fn new(mut out: W) -> Result<SegmentEncoder<W>, EncodeError> {
        out.write_all(&HEADER_V2)?;
        Ok(SegmentEncoder {
            out,
            layout: Layout::new(SEGMENT_TARGET),
            segs: Segs::default(),
            zstd: None,
            last: vec![Vec::new()],
            names: Default::default(),
        })
    }

    /// Stores segments and the index as zstd frames at `level` where that is smaller.
    pub fn zstd(mut self, level: i32) -> Self {
        self.zstd = Some(Zstd::new(level));
        self
    }

    /// Closes segments once their body reaches `target` bytes instead.
    pub fn segment_target(mut self, target: usize) -> Self {
        self.layout.target = target.clamp(1, MAX_BODY as usize / 2);
        self
    }

    /// Gives the next entry's `OWNER` these user and group names.
    pub fn owner_names(&mut self, user: &[u8], group: &[u8]) {
        self.names = (user.to_vec(), group.to_vec());
    }

    /// The root directory's records (first, before any entry).
    pub fn root(&mut self, meta: Meta, xattrs: Xattrs<'_>) -> Result<(), EncodeError> {
        if self.layout.segment > 0 || !self.layout.body.is_empty() {
            return Err(FormatError::MisplacedRoot.into());
        }
        let entry = Entry {
            xattrs,
            ..Entry::dir(b"root", meta)
        };
        let (user, group) = std::mem::take(&mut self.names);
        let full = self.layout.root(&entry, (&user, &group));
        self.write(full)
    }

    /// Creates the directory `entry` and enters it.
    pub fn dir_with(&mut self, entry: &Entry<'_>) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        let (user, group) = std::mem::take(&mut self.names);
        let full = self.layout.dir(entry, (&user, &group));
        self.last.push(Vec::new());
        self.write(full)
    }

    /// Adds the file `entry` with `data` (a `FILE`: no holes, at most what a body holds).
    pub fn file_with(&mut self, entry: &Entry<'_>, data: &[u8]) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        let size = u32::try_from(data.len()).map_err(|_| FormatError::BadFrame)?;
        let (user, group) = std::mem::take(&mut self.names);
        let full = self
            .layout
            .file(entry, size, data.to_vec(), (&user, &group));
        self.write(full)
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
        let (user, group) = std::mem::take(&mut self.names);
        let full = self.layout.ext_file(entry, size, extents, (&user, &group));
        self.write(full)
    }

    /// The next extent of the open `EXTFILE`: `data` at offset `at`.
    pub fn extent(&mut self, at: u64, data: &[u8]) -> Result<(), EncodeError> {
        let Some(open) = self.layout.open else {
            return Err(FormatError::BadExtent.into());
        };
        let inside = at
            .checked_add(data.len() as u64)
            .is_some_and(|e| e <= open.size);
        let len = u32::try_from(data.len()).map_err(|_| FormatError::BadExtent)?;
        if data.is_empty() || at < open.end || !inside {
            return Err(FormatError::BadExtent.into());
        }
        let full = self.layout.extent(at, len, data.to_vec());
        self.write(full)
    }

    /// Adds a symlink to `target`.
    pub fn symlink(&mut self, entry: &Entry<'_>, target: &[u8]) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        if target.is_empty() || target.len() > MAX_SYMLINK || target.contains(&0) {
            return Err(FormatError::BadSymlink.into());
        }
        let (user, group) = std::mem::take(&mut self.names);
        let full = self.layout.symlink(entry, target, (&user, &group));
        self.write(full)
    }

    /// Adds a hard link `name` to the entry numbered `target`, a file added with a
    /// `link_id`.
    pub fn hard_link(&mut self, name: &[u8], target: u64) -> Result<(), EncodeError> {
        self.check(name)?;
        let full = self.layout.hard_link(name, target);
        self.write(full)
    }

    /// Adds a fifo or device (`entry.kind`).
    pub fn special(&mut self, entry: &Entry<'_>, device: Device) -> Result<(), EncodeError> {
        self.check(entry.name)?;
        let (user, group) = std::mem::take(&mut self.names);
        let full = self.layout.special(entry, device, (&user, &group));
        self.write(full)
    }

    /// Leaves the current directory.
    pub fn pop(&mut self) -> Result<(), EncodeError> {
        if self.layout.dirs.is_empty() {
            return Err(FormatError::PopAtRoot.into());
        }
        self.last.pop();
        let full = self.layout.pop();
        self.write(full)
    }

    /// Closes the current segment here (if it holds anything).
    pub fn cut(&mut self) -> Result<(), EncodeError> {
        let full = self.layout.cut();
        self.write(full)
    }

    /// Closes every open directory and the last segment, writes the index and the footer,
    /// and returns the writer.
    pub fn finish(mut self) -> Result<W, EncodeError> {
        if self.layout.open.is_some() {
            return Err(FormatError::BadExtent.into());
        }
        while !self.layout.dirs.is_empty() {
            self.pop()?;
        }
        let (full, rows) = self.layout.finish();
        self.layout = Layout::new(SEGMENT_TARGET);
        self.write(full)?;
        self.out
            .write_all(&tail(&self.segs, &rows, self.zstd.as_mut()))?;
        self.out.flush()?;
        Ok(self.out)
    }

    /// Writes the body `full` closed, if any.
    fn write(&mut self, full: Option<Body<Vec<u8>>>) -> Result<(), EncodeError> {
        let Some(body) = full else {
            return Ok(());
        };
        let fill = |parts: &mut dyn Iterator<Item = Part<'_, Vec<u8>>>, buf: &mut Vec<u8>| {
            for part in parts {
                buf.extend_from_slice(part.prefix);
                buf.extend_from_slice(&part.source);
            }
            Ok::<(), Infallible>(())
        };
        let Ok(sealed) = body.seal(Vec::new(), fill, self.zstd.as_mut());
        self.out.write_all(&sealed.frame)?;
        self.segs.add(&sealed);
        Ok(())
    }

    /// Checks `name` is valid, above the last in its directory, and no extent is due.
    fn check(&mut self, name: &[u8]) -> Result<(), EncodeError> {
        check_name(name)?;
        if self.layout.open.is_some() {
            return Err(FormatError::BadExtent.into());
        }
        let last = self.last.last_mut().expect("the root's last name");
        if !last.is_empty() && name <= &last[..] {
            let kind = match name == &last[..] {
                true => FormatError::DuplicateName,
                false => FormatError::Unsorted,
            };
            return Err(kind.into());
        }
        last.clear();
        last.extend_from_slice(name);
        Ok(())
    }
}
