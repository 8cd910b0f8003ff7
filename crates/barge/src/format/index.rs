//! Reading a version 2 archive through its footer and index, without its body: the footer
//! in the archive's last 37 bytes, the INDEX frame checked whole (digest, segment table,
//! every row) before any row is used, then the rows in path order, a path found by binary
//! search over the restart rows, and the entries as the events the index can tell of them.
//! A reader that looks up a few paths may check only the rows it reads (`Index::lookup`).
//! Pure: the caller reads the bytes (`indexed.rs` does, by `pread`).

use std::cmp::Ordering;

use super::v2::{self, KIND_DIR, KIND_EXTFILE, KIND_FILE, KIND_HARDLINK, KIND_LINKED};
use super::v2::{INDEX_COUNTS, KIND_SYMLINK};
use super::{
    check_name, digest, Event, FormatError, CODEC_ZSTD, FOOTER, FRAME_HEAD, HEADER_V2, MAX_BODY,
    MAX_SYMLINK, TAG_INDEX,
};
use crate::error::{Error, TreePath};
use crate::tree::{Device, Entry, Kind, Meta};

/// The most bytes an INDEX frame takes: its head and a body of at most 2^26 bytes.
const INDEX_FRAME: u64 = FRAME_HEAD as u64 + MAX_BODY as u64;

/// Bytes of a `START` without names: the least a segment body holds before its first group.
const START_LEN: u64 = 19;

/// The error `kind` at archive offset `offset`.
fn error(kind: FormatError, offset: u64) -> Error {
    Error::Format {
        offset,
        path: TreePath::default(),
        kind,
    }
}

/// A version 2 footer, checked: where the index is and what it must count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Footer {
    /// Entries in the archive.
    pub entries: u64,
    /// Segments in the archive.
    pub segments: u32,
    /// Where the INDEX frame starts.
    pub index_at: u64,
    /// Where the footer starts (the INDEX frame ends there).
    pub at: u64,
}

impl Footer {
    /// The footer of a version 2 archive of `len` bytes whose last 37 bytes are `tail`.
    /// `None` when they are not one (they do not end with the magic): the archive was cut,
    /// is padded, or is no version 2 archive, and a reader decodes it from its start, which
    /// says what is wrong. Else its digest (`bad-digest`) and that `index_at` leaves room
    /// for an INDEX frame head before the footer and no more than an INDEX frame takes
    /// (`bad-footer`), at the footer.
    pub fn find(tail: &[u8; FOOTER], len: u64) -> Result<Option<Footer>, Error> {
        if tail[0] != 0 || tail[29..] != HEADER_V2 || len < (HEADER_V2.len() + FOOTER) as u64 {
            return Ok(None);
        }
        let at = len - FOOTER as u64;
        let footer = v2::footer(tail).map_err(|kind| error(kind, at))?;
        let frame = at.checked_sub(footer.index_at);
        let inside = footer.index_at >= HEADER_V2.len() as u64
            && frame.is_some_and(|len| (FRAME_HEAD as u64..=INDEX_FRAME).contains(&len));
        if !inside {
            return Err(error(FormatError::BadFooter, at));
        }
        Ok(Some(Footer {
            entries: footer.entries,
            segments: footer.segments,
            index_at: footer.index_at,
            at,
        }))
    }

    /// Bytes of the INDEX frame (head and stored bytes), from `index_at` to the footer.
    pub fn index_len(&self) -> usize {
        (self.at - self.index_at) as usize
    }
}

/// One segment as the index lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Seg {
    /// Where its frame starts in the archive.
    pub at: u64,
    /// Bytes of its frame after the head.
    pub stored: u32,
    /// Bytes of its body.
    pub body: u32,
    /// Entries in earlier segments.
    pub first: u64,
    /// Its skeleton's digest.
    pub digest: u64,
}

impl Seg {
    /// Bytes of its whole frame, head included.
    pub fn frame_len(&self) -> usize {
        FRAME_HEAD + self.stored as usize
    }
}

/// What an index row says an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKind {
    /// `DIR`.
    Dir,
    /// `FILE`.
    File,
    /// `EXTFILE`: a sparse or chunked file.
    ExtFile,
    /// `SYMLINK`.
    Symlink,
    /// `HARDLINK`.
    HardLink,
    /// A `SPECIAL` of this kind (fifo, character or block device).
    Special(Kind),
}

impl RowKind {
    /// The kind of the row `kind` byte (without the `LINKED` bit), if it is one.
    fn of(kind: u8) -> Option<RowKind> {
        Some(match kind {
            KIND_DIR => RowKind::Dir,
            KIND_FILE => RowKind::File,
            KIND_EXTFILE => RowKind::ExtFile,
            KIND_SYMLINK => RowKind::Symlink,
            KIND_HARDLINK => RowKind::HardLink,
            6 => RowKind::Special(Kind::Fifo),
            7 => RowKind::Special(Kind::CharDevice),
            8 => RowKind::Special(Kind::BlockDevice),
            _ => return None,
        })
    }

    /// Whether the entry is a regular file (`FILE` or `EXTFILE`).
    pub fn is_file(self) -> bool {
        matches!(self, RowKind::File | RowKind::ExtFile)
    }
}

/// One entry as the index lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row<'a> {
    /// Its entry number.
    pub number: u64,
    /// Its full path: names from the root joined by `/`.
    pub path: &'a [u8],
    /// What it is.
    pub kind: RowKind,
    /// A file that carries `LINKED` (hard links may name it).
    pub linked: bool,
    /// A file's size, a symlink's target length, a hard link's target entry, else 0.
    pub size: u64,
    /// The segment holding its group.
    pub segment: u32,
    /// Where in that segment's body its group starts.
    pub offset: u64,
}

/// A row's fields as stored (the path as what it adds to the previous one).
struct RawRow {
    shared: u64,
    suffix: std::ops::Range<usize>,
    kind: u8,
    size: u64,
    delta: u64,
    offset: u64,
}

/// A canonical LEB128 varint at `rows[*pos..]` (at most 10 bytes, no redundant zero group,
/// within 64 bits), advancing `pos`.
#[inline]
pub(crate) fn varint(rows: &[u8], pos: &mut usize) -> Option<u64> {
    let first = *rows.get(*pos)?;
    *pos += 1;
    if first < 0x80 {
        return Some(u64::from(first));
    }
    let mut value = u64::from(first & 0x7f);
    for i in 1..10 {
        let byte = *rows.get(*pos)?;
        *pos += 1;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte < 0x80 {
            let canonical = byte != 0 && (i < 9 || byte == 1);
            return canonical.then_some(value);
        }
    }
    None
}

/// The row at `rows[*pos..]`, advancing `pos`.
#[inline]
fn raw_row(rows: &[u8], pos: &mut usize) -> Option<RawRow> {
    let shared = varint(rows, pos)?;
    let added = varint(rows, pos)?;
    let start = *pos;
    let stop = usize::try_from(added).ok()?.checked_add(start)?;
    let kind = *rows.get(stop)?;
    *pos = stop + 1;
    Some(RawRow {
        shared,
        suffix: start..stop,
        kind,
        size: varint(rows, pos)?,
        delta: varint(rows, pos)?,
        offset: varint(rows, pos)?,
    })
}

/// Checks the names of `path` from byte `from` (where a name starts) by the one name rule;
/// returns where its last name starts.
fn check_names(path: &[u8], from: usize) -> Option<usize> {
    let mut start = from;
    loop {
        let slash = path[start..].iter().position(|&b| b == b'/');
        let end = slash.map_or(path.len(), |len| start + len);
        check_name(&path[start..end]).ok()?;
        match slash {
            Some(_) => start = end + 1,
            None => return Some(start),
        }
    }
}

/// Compares two paths in path order: name by name, each by its bytes (byte order with `/`
/// below every byte).
fn path_order(a: &[u8], b: &[u8]) -> Ordering {
    let same = common(a, b);
    order_after(a.get(same).copied(), b.get(same).copied())
}

/// The path order of two paths by the bytes after their common prefix (none: it ends).
fn order_after(a: Option<u8>, b: Option<u8>) -> Ordering {
    let key = |byte: u8| if byte == b'/' { 0 } else { u16::from(byte) + 1 };
    match (a, b) {
        (Some(x), Some(y)) => key(x).cmp(&key(y)),
        (x, y) => x.is_some().cmp(&y.is_some()),
    }
}

/// Bytes two paths have in common at their start.
fn common(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// A version 2 archive's index, checked whole (or read for lookups: `Index::read_lazily`).
#[derive(Debug)]
pub struct Index {
    /// The body (after a raw frame's head): counts, segment records, rows, restarts.
    bytes: Vec<u8>,
    entries: u64,
    segs: Vec<Seg>,
    /// Where the rows and the restarts start in `bytes`.
    rows: usize,
    restarts: usize,
    /// Entry numbers of the files hard links may name, ascending.
    linked: Vec<u64>,
    /// Every row is checked (else only what [`Index::lookup`] read).
    whole: bool,
    /// Where the INDEX frame is.
    at: u64,
}

/// What checking a row takes from the rows before it.
#[derive(Default)]
struct Before {
    /// Every row before was checked: the checks that look back are made (a row's parent
    /// directory, a hard link's target linked, a block's first row against the last).
    whole: bool,
    /// The last row's path, and on a restart row the one before it.
    path: Vec<u8>,
    previous: Vec<u8>,
    /// The lengths of the directory paths that are ancestors of (or are) the last row.
    dirs: Vec<usize>,
    linked: Vec<u64>,
    segment: u64,
    offset: u64,
}

impl Index {
    /// Reads the INDEX `frame` (head and stored bytes, as `footer` places it) and checks it
    /// in this order: that it is an INDEX frame ending where the footer starts
    /// (`bad-footer`, at the footer), its head (`bad-frame`), a body of at least 12 bytes
    /// (`bad-index`), its zstd (`bad-zstd`), its digest (`bad-digest`), its segments and
    /// rows (`bad-index`), all at the INDEX; then that its counts are the footer's
    /// (`bad-footer`).
    pub fn read(footer: &Footer, frame: Vec<u8>) -> Result<Index, Error> {
        Index::read_with(footer, frame, true)
    }

    /// [`Index::read`] but for the rows, which a reader that looks up some paths checks as
    /// it reads them ([`Index::lookup`]); until [`Index::check`] no other method reads rows.
    pub(crate) fn read_lazily(footer: &Footer, frame: Vec<u8>) -> Result<Index, Error> {
        Index::read_with(footer, frame, false)
    }

    fn read_with(footer: &Footer, frame: Vec<u8>, whole: bool) -> Result<Index, Error> {
        let at = footer.index_at;
        let stored = frame
            .get(2..6)
            .map(|s| u32::from_le_bytes(s.try_into().expect("4")));
        let ends = stored.is_some_and(|s| FRAME_HEAD + s as usize == footer.index_len());
        if frame.first() != Some(&TAG_INDEX) || !ends || frame.len() != footer.index_len() {
            return Err(error(FormatError::BadFooter, footer.at));
        }
        let head = v2::head(frame[..FRAME_HEAD].try_into().expect("a frame head"));
        let head = head.map_err(|kind| error(kind, at))?;
        if head.body < INDEX_COUNTS as u32 {
            return Err(error(FormatError::BadIndex, at));
        }
        let (bytes, base) = match head.codec {
            CODEC_ZSTD => {
                let mut body = Vec::new();
                super::inflate(&frame[FRAME_HEAD..], head.body, &mut body)
                    .map_err(|kind| error(kind, at))?;
                (body, 0)
            }
            _ => (frame, FRAME_HEAD),
        };
        if v2::differs(digest(&bytes[base..]), head.digest) {
            return Err(error(FormatError::BadDigest("index"), at));
        }
        let mut index =
            Index::parse(bytes, base, footer).ok_or(error(FormatError::BadIndex, at))?;
        if whole {
            index.check()?;
        }
        if index.entries != footer.entries || index.segs.len() != footer.segments as usize {
            return Err(error(FormatError::BadFooter, footer.at));
        }
        Ok(index)
    }

    /// The index of the body at `bytes[base..]`, its layout and segments checked (its rows
    /// not), or `None` where they are malformed.
    fn parse(bytes: Vec<u8>, base: usize, footer: &Footer) -> Option<Index> {
        let body = &bytes[base..];
        let segments = u32::from_le_bytes(body[..4].try_into().expect("4 bytes"));
        let entries = u64::from_le_bytes(body[4..12].try_into().expect("8 bytes"));
        let rows = INDEX_COUNTS.checked_add(32usize.checked_mul(segments as usize)?)?;
        let restarts = body
            .len()
            .checked_sub(usize::try_from(entries.div_ceil(16)).ok()?.checked_mul(4)?)?;
        if rows > restarts {
            return None;
        }
        let segs = Index::seg_table(&body[INDEX_COUNTS..rows], entries, footer.index_at)?;
        Some(Index {
            bytes,
            entries,
            segs,
            rows: base + rows,
            restarts: base + restarts,
            linked: Vec::new(),
            whole: false,
            at: footer.index_at,
        })
    }

    /// Checks the rows not checked yet (all of them: `bad-index` at the INDEX).
    pub(crate) fn check(&mut self) -> Result<(), Error> {
        if !self.whole {
            self.linked = self
                .check_rows()
                .ok_or(error(FormatError::BadIndex, self.at))?;
            self.whole = true;
        }
        Ok(())
    }

    /// The segment records in `table`: each frame right after the one before it from the
    /// header on, the last ending at `index_at`; lengths a frame head allows; `first`
    /// starting at 0 and ascending up to `entries`.
    fn seg_table(table: &[u8], entries: u64, index_at: u64) -> Option<Vec<Seg>> {
        let mut segs = Vec::with_capacity(table.len() / 32);
        let mut next = HEADER_V2.len() as u64;
        let mut first = 0;
        for record in table.chunks_exact(32) {
            let u32_at = |i: usize| u32::from_le_bytes(record[i..i + 4].try_into().expect("4"));
            let u64_at = |i: usize| u64::from_le_bytes(record[i..i + 8].try_into().expect("8"));
            let seg = Seg {
                at: u64_at(0),
                stored: u32_at(8),
                body: u32_at(12),
                first: u64_at(16),
                digest: u64_at(24),
            };
            let lengths = seg.stored <= seg.body && (1..=MAX_BODY).contains(&seg.body);
            let ascends = seg.first >= first && seg.first <= entries;
            let starts = if segs.is_empty() {
                seg.first == 0
            } else {
                true
            };
            if seg.at != next || !lengths || !ascends || !starts {
                return None;
            }
            next = seg.at + seg.frame_len() as u64;
            first = seg.first;
            segs.push(seg);
        }
        (next == index_at).then_some(segs)
    }

    /// Checks every row: canonical front coding, valid names, strictly ascending paths whose
    /// parent is an earlier directory, known kinds with sizes they allow, hard links to
    /// earlier linked files, places inside the segments, restarts where the rows are.
    /// Returns the linked files.
    fn check_rows(&self) -> Option<Vec<u64>> {
        let mut before = Before {
            whole: true,
            ..Before::default()
        };
        let mut end = 0;
        for k in 0..self.entries.div_ceil(16) {
            if self.restart(k) != end as u64 {
                return None;
            }
            end = self.check_block(k, &mut before)? - self.rows;
        }
        (self.rows + end == self.restarts).then_some(before.linked)
    }

    /// Checks block `k` (rows 16k to 16k+15, from restart `k`) after the rows `before`
    /// tells of, as [`Index::check_rows`] does where they are all the rows before it, else
    /// with what the block alone tells (a hard link's target only an earlier entry);
    /// returns where the block ends.
    fn check_block(&self, k: u64, before: &mut Before) -> Option<usize> {
        let rows = &self.bytes[..self.restarts];
        let mut pos = self
            .rows
            .checked_add(usize::try_from(self.restart(k)).ok()?)?;
        let Before { path, previous, .. } = before;
        for number in 16 * k..(16 * k + 16).min(self.entries) {
            let restart = number % 16 == 0;
            // A block's first row read alone has no row before it to be compared with.
            let first = number == 0 || (restart && !before.whole);
            let row = raw_row(rows, &mut pos)?;
            let shared = usize::try_from(row.shared).ok()?;
            if (restart && shared != 0) || shared > path.len() {
                return None;
            }
            if restart {
                previous.clone_from(path);
            }
            // The last path's byte after the part this one shares, before it is cut there.
            let cut = path.get(shared).copied();
            path.truncate(shared);
            path.extend_from_slice(&rows[row.suffix]);
            // `shared` is the common prefix: the bytes after it differ, or a path ends.
            let (same, cut) = match restart {
                true => {
                    let same = common(path, previous);
                    (same, previous.get(same).copied())
                }
                false => (shared, cut),
            };
            let after = path.get(same).copied();
            let ordered = first || order_after(cut, after) == Ordering::Less;
            if path.is_empty() || !ordered || (!first && cut.is_some() && cut == after) {
                return None;
            }
            // The names from the one the suffix begins in.
            let from = path[..shared]
                .iter()
                .rposition(|&b| b == b'/')
                .map_or(0, |i| i + 1);
            let last = check_names(path, from)?;
            if before.whole {
                let dirs = &mut before.dirs;
                while let Some(&dir) = dirs.last() {
                    if dir <= same && dir < path.len() && path[dir] == b'/' {
                        break;
                    }
                    dirs.pop();
                }
                let parent = last.saturating_sub(1);
                if dirs.last().copied().unwrap_or(0) != parent {
                    return None;
                }
            }
            let kind = RowKind::of(row.kind & !KIND_LINKED)?;
            let is_linked = row.kind & KIND_LINKED != 0;
            let size_ok = match kind {
                RowKind::Dir | RowKind::Special(_) => row.size == 0,
                RowKind::File => row.size <= u64::from(MAX_BODY),
                RowKind::ExtFile => true,
                RowKind::Symlink => (1..=MAX_SYMLINK as u64).contains(&row.size),
                RowKind::HardLink if before.whole => before.linked.binary_search(&row.size).is_ok(),
                RowKind::HardLink => row.size < number,
            };
            if !size_ok || (is_linked && !kind.is_file()) {
                return None;
            }
            let moved = row.delta > 0;
            before.segment = match first && number > 0 {
                // Its delta is from a row not read: its segment is the one holding it.
                true => self.segment_of(number),
                false => before.segment.checked_add(row.delta)?,
            };
            let seg = *self.segs.get(usize::try_from(before.segment).ok()?)?;
            let next_first = self
                .segs
                .get(before.segment as usize + 1)
                .map_or(u64::MAX, |s| s.first);
            let in_segment = seg.first <= number && number < next_first;
            let placed = (moved || first || row.offset > before.offset) && row.offset >= START_LEN;
            if !in_segment || !placed || row.offset >= u64::from(seg.body) {
                return None;
            }
            before.offset = row.offset;
            if kind == RowKind::Dir && before.whole {
                before.dirs.push(path.len());
            }
            if is_linked {
                before.linked.push(number);
            }
        }
        Some(pos)
    }

    /// Restart `k`: where row 16k starts, from the first row.
    fn restart(&self, k: u64) -> u64 {
        let at = self.restarts + 4 * k as usize;
        u64::from(u32::from_le_bytes(
            self.bytes[at..at + 4].try_into().expect("4 bytes"),
        ))
    }

    /// Entries in the archive.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// The segments, in order.
    pub fn segments(&self) -> &[Seg] {
        &self.segs
    }

    /// The entry numbers of the files hard links may name, ascending.
    pub fn linked(&self) -> &[u64] {
        assert!(self.whole, "rows read before they were checked");
        &self.linked
    }

    /// Where the INDEX frame is in the archive (where its errors are placed).
    pub fn at(&self) -> u64 {
        self.at
    }

    /// The rows in order (entry order, which is path order).
    pub fn rows(&self) -> Rows<'_> {
        self.rows_at(0)
    }

    /// The rows from entry `number` on.
    pub fn rows_at(&self, number: u64) -> Rows<'_> {
        assert!(self.whole, "rows read before they were checked");
        let mut rows = self.rows_from(number / 16);
        for _ in 0..number % 16 {
            rows.next_row();
        }
        rows
    }

    /// The rows from restart `k` (row 16k) on.
    fn rows_from(&self, k: u64) -> Rows<'_> {
        // An index of no entries has no restarts.
        let start = match 16 * k < self.entries {
            true => self.restart(k) as usize,
            false => 0,
        };
        Rows {
            index: self,
            pos: self.rows + start,
            number: 16 * k,
            path: Vec::new(),
            segment: (k == 0).then_some(0),
        }
    }

    /// The segment holding entry `number`: the last whose `first` is not above it.
    fn segment_of(&self, number: u64) -> u64 {
        let after = self.segs.partition_point(|seg| seg.first <= number);
        after.saturating_sub(1) as u64
    }

    /// The row of the entry at `path` (names joined by `/`, no leading or trailing `/`):
    /// a binary search over the restart rows, then at most 15 rows.
    pub fn find(&self, path: &[u8]) -> Option<Found> {
        assert!(self.whole, "rows read before they were checked");
        let k = self.block_of(path).expect("checked rows")?;
        self.in_block(k, path)
    }

    /// [`Index::find`] in an index read lazily: the rows it reads are checked first, the
    /// restart rows of the binary search as rows, the block of 16 rows it ends in by what
    /// the block alone tells ([`Index::check_block`]); `bad-index` at the INDEX where they
    /// fail. A path not found there is looked for again with every row checked, so that a
    /// bad index is not taken for one that lacks the path.
    pub(crate) fn lookup(&mut self, path: &[u8]) -> Result<Option<Found>, Error> {
        if !self.whole {
            let bad = || error(FormatError::BadIndex, self.at);
            if let Some(k) = self.block_of(path).ok_or_else(bad)? {
                self.check_block(k, &mut Before::default())
                    .ok_or_else(bad)?;
                if let Some(found) = self.in_block(k, path) {
                    return Ok(Some(found));
                }
            }
            self.check()?;
        }
        Ok(self.find(path))
    }

    /// The block whose rows `path` would be among: the one before the first restart row
    /// above it (none: `path` is before the first row), by binary search; `None` where a
    /// restart row it reads is no row.
    fn block_of(&self, path: &[u8]) -> Option<Option<u64>> {
        let (mut low, mut high) = (0, self.entries.div_ceil(16));
        while low < high {
            let mid = low + (high - low) / 2;
            match path_order(self.restart_path(mid)?, path) {
                Ordering::Greater => high = mid,
                _ => low = mid + 1,
            }
        }
        Some(low.checked_sub(1))
    }

    /// The path of restart row `k`, or `None` where it is no restart row.
    fn restart_path(&self, k: u64) -> Option<&[u8]> {
        let rows = &self.bytes[..self.restarts];
        let mut pos = self
            .rows
            .checked_add(usize::try_from(self.restart(k)).ok()?)?;
        let row = raw_row(rows, &mut pos)?;
        (row.shared == 0).then(|| &rows[row.suffix])
    }

    /// The row at `path` among the rows of block `k`, which are checked.
    fn in_block(&self, k: u64, path: &[u8]) -> Option<Found> {
        let mut rows = self.rows_from(k);
        for _ in 0..16 {
            let row = rows.next_row()?;
            match path_order(row.path, path) {
                Ordering::Less => continue,
                Ordering::Equal => return Some(Found::of(&row)),
                Ordering::Greater => return None,
            }
        }
        None
    }

    /// Passes the entries to `on_event` as the events a decoder would give for them, with
    /// what the index holds of each: names, kinds, a file's size (as [`Event::File`] with
    /// no data, whether it is a `FILE` or an `EXTFILE`), a hard link's target; no metadata
    /// (modes and times are 0 and absent), no symlink target, no device numbers; a `POP`
    /// after each directory's entries.
    pub fn events<E>(&self, mut on_event: impl FnMut(Event<'_>) -> Result<(), E>) -> Result<(), E> {
        let mut rows = self.rows();
        let mut depth = 0;
        while let Some(row) = rows.next_row() {
            let slashes = row.path.iter().filter(|&&b| b == b'/').count();
            for _ in slashes..depth {
                on_event(Event::Pop)?;
            }
            depth = slashes;
            let name = row.path.rsplit(|&b| b == b'/').next().expect("a name");
            let meta = Meta::default();
            let link_id = row.linked.then_some(row.number);
            let event = match row.kind {
                RowKind::Dir => {
                    depth += 1;
                    Event::Dir(Entry::dir(name, meta))
                }
                RowKind::File | RowKind::ExtFile => Event::File {
                    entry: Entry {
                        link_id,
                        ..Entry::file(name, meta)
                    },
                    size: row.size,
                    data: &[],
                },
                RowKind::Symlink => Event::Symlink {
                    entry: Entry::new(name, Kind::Symlink, meta),
                    target: &[],
                },
                RowKind::HardLink => Event::HardLink {
                    entry: Entry::new(name, Kind::File, meta),
                    target: row.size,
                },
                RowKind::Special(kind) => Event::Special {
                    entry: Entry::new(name, kind, meta),
                    device: Device::default(),
                },
            };
            on_event(event)?;
        }
        for _ in 0..depth {
            on_event(Event::Pop)?;
        }
        Ok(())
    }
}

/// A row found by [`Index::find`], without its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Found {
    /// Its entry number.
    pub number: u64,
    /// What it is.
    pub kind: RowKind,
    /// See [`Row::size`].
    pub size: u64,
    /// The segment holding its group.
    pub segment: u32,
    /// See [`Row::offset`].
    pub offset: u64,
}

impl Found {
    /// The row `row` without its path.
    pub(crate) fn of(row: &Row<'_>) -> Found {
        Found {
            number: row.number,
            kind: row.kind,
            size: row.size,
            segment: row.segment,
            offset: row.offset,
        }
    }
}

/// The rows of an [`Index`], one after another.
pub struct Rows<'a> {
    index: &'a Index,
    pos: usize,
    number: u64,
    path: Vec<u8>,
    /// The segment of the last row (none yet when started at a later restart row, whose
    /// segment is then found from the segment table).
    segment: Option<u64>,
}

impl Rows<'_> {
    /// The next row, or `None` after the last.
    pub fn next_row(&mut self) -> Option<Row<'_>> {
        let index = self.index;
        if self.number >= index.entries {
            return None;
        }
        let rows = &index.bytes[..index.restarts];
        let row = raw_row(rows, &mut self.pos).expect("checked rows");
        self.path.truncate(row.shared as usize);
        self.path.extend_from_slice(&rows[row.suffix]);
        let segment = match self.segment {
            Some(segment) => segment + row.delta,
            None => index.segment_of(self.number),
        };
        self.segment = Some(segment);
        let number = self.number;
        self.number += 1;
        let kind = RowKind::of(row.kind & !KIND_LINKED).expect("checked rows");
        Some(Row {
            number,
            path: &self.path,
            kind,
            linked: row.kind & KIND_LINKED != 0,
            size: row.size,
            segment: segment as u32,
            offset: row.offset,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::format::v2::push_varint;
    use crate::format::{Limits, SegmentEncoder};
    use crate::tree::Xattrs;

    /// A row as the tests write it: path, kind byte, size, segment, offset.
    pub(crate) type Plain = (Vec<u8>, u8, u64, u64, u64);

    /// An archive of `d/`, `d/e/`, `d/e/f` (linked), `d/g` (an EXTFILE whose extents span
    /// three segments), `h` (a hard link to `d/e/f`), `i -> d`, and `n00`..`n19`, in
    /// segments of about 40 bytes, raw or zstd.
    fn archive(level: Option<i32>) -> Vec<u8> {
        let mut encoder = SegmentEncoder::new(Vec::new()).unwrap().segment_target(40);
        if let Some(level) = level {
            encoder = encoder.zstd(level);
        }
        let meta = Meta::with_mode(0o644);
        encoder.dir_with(&Entry::dir(b"d", meta)).unwrap();
        encoder.dir_with(&Entry::dir(b"e", meta)).unwrap();
        let linked = Entry {
            link_id: Some(2),
            ..Entry::file(b"f", meta)
        };
        encoder.file_with(&linked, &[b'f'; 100]).unwrap();
        encoder.pop().unwrap();
        encoder.ext_file(&Entry::file(b"g", meta), 300, 3).unwrap();
        for at in [0, 100, 200] {
            encoder.extent(at, &[b'g'; 60]).unwrap();
        }
        encoder.pop().unwrap();
        encoder.hard_link(b"h", 2).unwrap();
        let link = Entry::new(b"i", Kind::Symlink, meta);
        encoder.symlink(&link, b"d").unwrap();
        for i in 0..20 {
            let name = format!("n{i:02}");
            encoder
                .file_with(&Entry::file(name.as_bytes(), meta), b"x")
                .unwrap();
        }
        let _ = Xattrs::default();
        encoder.finish().unwrap()
    }

    /// The footer and index of `archive`.
    fn open(archive: &[u8]) -> Result<Option<Index>, Error> {
        let len = archive.len() as u64;
        let tail = archive[archive.len() - FOOTER..].try_into().unwrap();
        let Some(footer) = Footer::find(tail, len)? else {
            return Ok(None);
        };
        let frame = archive[footer.index_at as usize..footer.at as usize].to_vec();
        Index::read(&footer, frame).map(Some)
    }

    /// The code and offset of what `open` says of `archive`.
    fn fault(archive: &[u8]) -> (&'static str, u64) {
        match open(archive) {
            Err(Error::Format { kind, offset, .. }) => (kind.code(), offset),
            other => panic!("not a format error: {other:?}"),
        }
    }

    /// The segment records and rows of a raw archive's index.
    pub(crate) fn parts(archive: &[u8]) -> (Vec<Seg>, Vec<Plain>) {
        let index = open(archive).unwrap().unwrap();
        let mut rows = Vec::new();
        let mut cursor = index.rows();
        while let Some(row) = cursor.next_row() {
            let kind = match row.kind {
                RowKind::Dir => 1,
                RowKind::File => 2,
                RowKind::ExtFile => 3,
                RowKind::Symlink => 4,
                RowKind::HardLink => 5,
                RowKind::Special(kind) => v2::kind_special(kind),
            } | if row.linked { KIND_LINKED } else { 0 };
            let place = (u64::from(row.segment), row.offset);
            rows.push((row.path.to_vec(), kind, row.size, place.0, place.1));
        }
        (index.segs.clone(), rows)
    }

    /// An index body of `segs` and `rows`, front coded as the format says.
    pub(crate) fn body(segs: &[Seg], rows: &[Plain]) -> Vec<u8> {
        body_sharing(segs, rows, |_, shared| shared)
    }

    /// [`body`] with the `shared` of row `i` (the common prefix) replaced by `shared(i, it)`.
    fn body_sharing(
        segs: &[Seg],
        rows: &[Plain],
        shared: impl Fn(usize, usize) -> usize,
    ) -> Vec<u8> {
        let mut out = (segs.len() as u32).to_le_bytes().to_vec();
        out.extend_from_slice(&(rows.len() as u64).to_le_bytes());
        for seg in segs {
            out.extend_from_slice(&seg.at.to_le_bytes());
            out.extend_from_slice(&seg.stored.to_le_bytes());
            out.extend_from_slice(&seg.body.to_le_bytes());
            out.extend_from_slice(&seg.first.to_le_bytes());
            out.extend_from_slice(&seg.digest.to_le_bytes());
        }
        let (start, mut restarts) = (out.len(), Vec::new());
        let (mut previous, mut previous_segment): (&[u8], u64) = (b"", 0);
        for (i, (path, kind, size, segment, offset)) in rows.iter().enumerate() {
            let shared = match i % 16 {
                0 => {
                    restarts.push((out.len() - start) as u32);
                    0
                }
                _ => shared(i, common(path, previous)),
            };
            push_varint(&mut out, shared as u64);
            push_varint(&mut out, (path.len() - shared) as u64);
            out.extend_from_slice(&path[shared..]);
            out.push(*kind);
            push_varint(&mut out, *size);
            push_varint(&mut out, segment - previous_segment);
            push_varint(&mut out, *offset);
            (previous, previous_segment) = (path, *segment);
        }
        for restart in restarts {
            out.extend_from_slice(&restart.to_le_bytes());
        }
        out
    }

    /// `archive` (raw) with its index body replaced by `body`, the frame head's lengths and
    /// digest and the footer made to fit, `entries` counted in the footer.
    pub(crate) fn with_body(archive: &[u8], body: &[u8], entries: u64) -> Vec<u8> {
        let tail: &[u8; FOOTER] = archive[archive.len() - FOOTER..].try_into().unwrap();
        let footer = Footer::find(tail, archive.len() as u64).unwrap().unwrap();
        let segments = u32::from_le_bytes(tail[9..13].try_into().unwrap());
        let mut out = archive[..footer.index_at as usize].to_vec();
        out.extend_from_slice(&[TAG_INDEX, 0]);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&digest(body).to_le_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&footer_bytes(entries, segments, footer.index_at));
        out
    }

    /// A footer with a right digest.
    fn footer_bytes(entries: u64, segments: u32, index_at: u64) -> Vec<u8> {
        let mut out = vec![0];
        out.extend_from_slice(&entries.to_le_bytes());
        out.extend_from_slice(&segments.to_le_bytes());
        out.extend_from_slice(&index_at.to_le_bytes());
        out.extend_from_slice(&digest(&out).to_le_bytes());
        out.extend_from_slice(&HEADER_V2);
        out
    }

    #[test]
    fn rows_come_in_path_order_with_their_places_and_find_finds_each() {
        for level in [None, Some(3)] {
            let archive = archive(level);
            let index = open(&archive).unwrap().unwrap();
            assert_eq!(index.entries(), 26);
            assert!(index.segments().len() > 5, "{:?}", index.segments());
            let mut rows = index.rows();
            let mut seen = Vec::new();
            while let Some(row) = rows.next_row() {
                let seg = index.segments()[row.segment as usize];
                assert!(seg.first <= row.number && row.offset < u64::from(seg.body));
                seen.push((row.path.to_vec(), row.kind, row.size));
            }
            let expected: Vec<(&[u8], RowKind, u64)> = vec![
                (b"d", RowKind::Dir, 0),
                (b"d/e", RowKind::Dir, 0),
                (b"d/e/f", RowKind::File, 100),
                (b"d/g", RowKind::ExtFile, 300),
                (b"h", RowKind::HardLink, 2),
                (b"i", RowKind::Symlink, 1),
            ];
            for (i, (path, kind, size)) in expected.into_iter().enumerate() {
                assert_eq!(seen[i], (path.to_vec(), kind, size), "row {i}");
            }
            assert_eq!(seen.len(), 26);
            assert_eq!(index.linked(), [2]);
            for (number, (path, kind, size)) in seen.iter().enumerate() {
                let found = index.find(path).unwrap_or_else(|| panic!("{path:?}"));
                assert_eq!(
                    (found.number, found.kind, found.size),
                    (number as u64, *kind, *size)
                );
                // Between rows, and beyond them, there is nothing.
                let mut after = path.clone();
                after.push(b'0');
                if after != b"n0" {
                    assert_eq!(index.find(&after), None, "{after:?}");
                }
            }
            for absent in [&b"a"[..], b"d/e/f/x", b"d/f", b"z", b"d/", b"n20", b"m"] {
                assert_eq!(index.find(absent), None, "{absent:?}");
            }
            // From a later restart row, the segment is found from the entry number.
            let mut from = index.rows_from(1);
            let row = from.next_row().unwrap();
            assert_eq!(row.number, 16);
            let whole = index.rows().nth_row(16);
            assert_eq!(row.segment, whole);
        }
    }

    impl Rows<'_> {
        fn nth_row(mut self, n: u64) -> u32 {
            for _ in 0..n {
                self.next_row();
            }
            self.next_row().unwrap().segment
        }
    }

    #[test]
    fn events_are_the_tree_in_order_with_a_pop_after_each_directory() {
        let index = open(&archive(None)).unwrap().unwrap();
        let mut shown = Vec::new();
        index
            .events(|event| {
                shown.push(match event {
                    Event::Dir(e) => format!("dir {}", String::from_utf8_lossy(e.name)),
                    Event::File { entry, size, .. } => format!(
                        "file {} {size} {:?}",
                        String::from_utf8_lossy(entry.name),
                        entry.link_id
                    ),
                    Event::Pop => "pop".into(),
                    Event::HardLink { entry, target } => {
                        format!("link {} {target}", String::from_utf8_lossy(entry.name))
                    }
                    Event::Symlink { entry, .. } => {
                        format!("symlink {}", String::from_utf8_lossy(entry.name))
                    }
                    other => panic!("{other:?}"),
                });
                Ok::<_, ()>(())
            })
            .unwrap();
        assert_eq!(
            shown[..9],
            [
                "dir d",
                "dir e",
                "file f 100 Some(2)",
                "pop",
                "file g 300 None",
                "pop",
                "link h 2",
                "symlink i",
                "file n00 1 None",
            ]
        );
        assert_eq!(shown.len(), 9 + 19);
    }

    #[test]
    fn a_footer_is_found_only_where_its_magic_is() {
        let archive = archive(None);
        // Cut, or padded with zeros: no footer, the stream says what is wrong.
        assert!(open(&archive[..archive.len() - 1]).unwrap().is_none());
        let mut padded = archive.clone();
        padded.extend_from_slice(&[0; 512]);
        assert!(open(&padded).unwrap().is_none());
        assert!(open(&archive[..40]).unwrap().is_none());
    }

    #[test]
    fn every_footer_fault_is_an_error_at_the_footer() {
        let archive = archive(None);
        let at = (archive.len() - FOOTER) as u64;
        let tail = &archive[at as usize..];
        let (entries, segments) = (
            u64::from_le_bytes(tail[1..9].try_into().unwrap()),
            u32::from_le_bytes(tail[9..13].try_into().unwrap()),
        );
        let index_at = u64::from_le_bytes(tail[13..21].try_into().unwrap());
        let refooted = |entries, segments, index_at| {
            let mut out = archive[..at as usize].to_vec();
            out.extend_from_slice(&footer_bytes(entries, segments, index_at));
            out
        };
        let mut bad_digest = archive.clone();
        bad_digest[at as usize + 21] ^= 1;
        assert_eq!(fault(&bad_digest), ("bad-digest", at));
        // The index outside the archive, or where the footer is, or not at an INDEX.
        for outside in [0, 7, at, at - 17, u64::MAX, index_at - 1, index_at + 1] {
            let faulty = refooted(entries, segments, outside);
            assert_eq!(fault(&faulty), ("bad-footer", at), "index_at {outside}");
        }
        // An index further from the footer than an INDEX frame reaches (a reader would
        // otherwise read gigabytes for it).
        let far = footer_bytes(entries, segments, 8);
        let huge = 1u64 << 40;
        match Footer::find(far[..].try_into().unwrap(), huge) {
            Err(Error::Format { kind, offset, .. }) => {
                assert_eq!(
                    (kind, offset),
                    (FormatError::BadFooter, huge - FOOTER as u64)
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fault(&refooted(entries + 1, segments, index_at)),
            ("bad-footer", at)
        );
        assert_eq!(
            fault(&refooted(entries, segments - 1, index_at)),
            ("bad-footer", at)
        );
    }

    #[test]
    fn every_index_frame_fault_is_an_error_at_the_index() {
        let archive = archive(None);
        let at = u64::from_le_bytes(archive[archive.len() - 24..][..8].try_into().unwrap());
        let i = at as usize;
        let mut codec = archive.clone();
        codec[i + 1] = 2;
        assert_eq!(fault(&codec), ("bad-frame", at));
        let mut digest_off = archive.clone();
        digest_off[i + 10] ^= 1;
        assert_eq!(fault(&digest_off), ("bad-digest", at));
        let mut row_byte = archive.clone();
        row_byte[i + 18 + 12 + 32 * 3] ^= 1;
        assert_eq!(fault(&row_byte), ("bad-digest", at));
        // A body shorter than its counts.
        let (segs, rows) = parts(&archive);
        let short = with_body(&archive, &[0; 11], 26);
        assert_eq!(fault(&short), ("bad-index", at));
        assert!(open(&with_body(&archive, &body(&segs, &rows), 26)).is_ok());
        // A zstd index whose frame is not one.
        let zstd = super::tests::archive(Some(3));
        let at = u64::from_le_bytes(zstd[zstd.len() - 24..][..8].try_into().unwrap());
        let mut broken = zstd.clone();
        broken[at as usize + 18 + 4] ^= 0xff;
        assert_eq!(fault(&broken).0, "bad-zstd");
        assert_eq!(fault(&broken).1, at);
    }

    #[test]
    fn every_malformed_index_body_is_bad_index_at_the_index() {
        let archive = archive(None);
        let at = u64::from_le_bytes(archive[archive.len() - 24..][..8].try_into().unwrap());
        let (segs, rows) = parts(&archive);
        let n = rows.len() as u64;
        let check = |what: &str, body: Vec<u8>, entries: u64| {
            let faulty = with_body(&archive, &body, entries);
            assert_eq!(fault(&faulty), ("bad-index", at), "{what}");
        };
        let seg_fault = |what, edit: &dyn Fn(&mut Vec<Seg>)| {
            let mut segs = segs.clone();
            edit(&mut segs);
            check(what, body(&segs, &rows), n);
        };
        seg_fault("segments overlap", &|s| s[1].at -= 1);
        seg_fault("a gap between segments", &|s| s[1].at += 1);
        seg_fault("the first not after the header", &|s| s[0].at = 9);
        seg_fault("the last not ending at the index", &|s| {
            let last = s.len() - 1;
            s[last].stored -= 1;
        });
        seg_fault("a segment missing", &|s| {
            s.pop();
        });
        seg_fault("first descending", &|s| s[3].first = s[2].first - 1);
        seg_fault("first of segment 0 not 0", &|s| s[0].first = 1);
        seg_fault("first past the entries", &|s| {
            let last = s.len() - 1;
            s[last].first = 27;
        });
        seg_fault("an empty body", &|s| s[0].body = 0);
        seg_fault("stored above body", &|s| s[0].body = s[0].stored - 1);
        let row_fault = |what, edit: &dyn Fn(&mut Vec<Plain>)| {
            let mut rows = rows.clone();
            edit(&mut rows);
            let entries = rows.len() as u64;
            check(what, body(&segs, &rows), entries);
        };
        row_fault("a path twice", &|r| r[21].0 = r[20].0.clone());
        row_fault("paths out of order", &|r| {
            let (a, b) = (r[19].0.clone(), r[20].0.clone());
            (r[19].0, r[20].0) = (b, a);
        });
        row_fault("a row without its directory", &|r| r[1].0 = b"c/e".to_vec());
        row_fault("a row whose parent is a file", &|r| {
            r[3].0 = b"d/e/f/g".to_vec()
        });
        row_fault("a dot name", &|r| r[3].0 = b"d/..".to_vec());
        row_fault("an empty name", &|r| r[3].0 = b"d//g".to_vec());
        row_fault("a trailing slash", &|r| r[3].0 = b"d/g/".to_vec());
        // Names only their own check refuses (the order and the parents hold).
        row_fault("a NUL in a name", &|r| r[4].0 = b"h\0".to_vec());
        row_fault("a name of 256 bytes", &|r| {
            r[6].0.extend_from_slice(&[b'x'; 253])
        });
        row_fault("an unknown kind", &|r| r[6].1 = 9);
        row_fault("LINKED on a directory", &|r| r[0].1 = 0x11);
        row_fault("a directory with a size", &|r| r[0].2 = 1);
        row_fault("an empty symlink", &|r| r[5].2 = 0);
        row_fault("a FILE larger than a body", &|r| {
            r[6].2 = u64::from(MAX_BODY) + 1
        });
        row_fault("a hard link to a file not linked", &|r| r[4].2 = 3);
        row_fault("a hard link to a later entry", &|r| r[4].2 = 5);
        row_fault("a segment past the last", &|r| r[25].3 = 99);
        row_fault("an entry in a segment that holds no such entry", &|r| {
            (r[7].3, r[7].4) = (4, 50);
        });
        row_fault("an offset past its body", &|r| r[25].4 = 10_000);
        row_fault("an offset inside START", &|r| r[0].4 = 18);
        row_fault("offsets not ascending in a segment", &|r| r[24].4 = r[23].4);
        // Counts and layout.
        let mut more = body(&segs, &rows);
        more[4..12].copy_from_slice(&(n + 1).to_le_bytes());
        check("one entry more than rows", more, n + 1);
        let mut fewer = body(&segs, &rows);
        fewer[4..12].copy_from_slice(&(n - 1).to_le_bytes());
        check("one entry fewer than rows", fewer, n - 1);
        let mut trailing = body(&segs, &rows);
        let restarts = trailing.split_off(trailing.len() - 8);
        trailing.push(0);
        trailing.extend_from_slice(&restarts);
        check("a byte after the rows", trailing, n);
        let mut restart = body(&segs, &rows);
        let last = restart.len() - 4;
        restart[last] += 1;
        check("a restart elsewhere", restart, n);
        // Front coding: shared not the longest, shared on a restart row, varints.
        let shorter = body_sharing(&segs, &rows, |i, shared| shared - usize::from(i == 1));
        check("shared below the common prefix", shorter, n);
        let plain = body(&segs, &rows);
        let mut restart_shared = plain.clone();
        restart_shared[12 + 32 * segs.len()] = 1;
        check("shared on a restart row", restart_shared, n);
        let second = 12 + 32 * segs.len() + 7; // after row 0: 0, 1, "d", 1, 0, 0, 19
        assert_eq!(plain[second], 1, "row 1 shares 'd'");
        let mut long = plain[..second].to_vec();
        long.extend_from_slice(&[0x81, 0x00]);
        long.extend_from_slice(&plain[second + 1..]);
        check("a varint with a redundant zero group", long, n);
        let mut huge = plain[..second].to_vec();
        huge.extend_from_slice(&[0xff; 10]);
        huge.extend_from_slice(&plain[second + 1..]);
        check("a varint above 64 bits", huge, n);
    }

    /// The events of `input` from `decoder` on, each with the decoder's directory.
    fn events_of(decoder: &mut crate::format::Decoder, input: &[u8]) -> Vec<String> {
        let mut seen = Vec::new();
        let used = crate::format::decode_with(decoder, input, false, |decoder, event| {
            let dirs: Vec<_> = decoder.dir_names().map(String::from_utf8_lossy).collect();
            seen.push(format!("{} {event:?}", dirs.join("/")));
            Ok::<_, Error>(())
        })
        .unwrap();
        assert_eq!(used, input.len());
        seen
    }

    #[test]
    fn a_decoder_resumed_at_any_segment_decodes_what_one_from_the_start_does() {
        for level in [None, Some(3)] {
            let archive = archive(level);
            let index = open(&archive).unwrap().unwrap();
            let end = index.at() as usize;
            let mut whole = crate::format::Decoder::new(Limits::default());
            let all = events_of(&mut whole, &archive[..end]);
            let starts: Vec<usize> = (all.iter().enumerate())
                .filter(|(_, e)| e.ends_with(" Segment"))
                .map(|(i, _)| i)
                .collect();
            for (k, seg) in index.segments().iter().enumerate() {
                let mut resumed = crate::format::Decoder::resume(
                    Limits::default(),
                    seg.at,
                    k as u32,
                    seg.first,
                    index.linked(),
                );
                let tail = events_of(&mut resumed, &archive[seg.at as usize..end]);
                assert_eq!(tail, all[starts[k]..], "segment {k}, zstd {level:?}");
                // At the INDEX, which it cannot check, it stops.
                let step = resumed.next(&archive[end..], true).unwrap();
                assert_eq!(step, crate::format::Step::Done);
            }
            // Told the wrong first entry, it refuses the START.
            let seg = index.segments()[1];
            let mut wrong = crate::format::Decoder::resume(
                Limits::default(),
                seg.at,
                1,
                seg.first + 1,
                index.linked(),
            );
            let input = &archive[seg.at as usize..end];
            let error = crate::format::decode_with(&mut wrong, input, false, |_, _| Ok(()));
            match error {
                Err(Error::Format { kind, offset, .. }) => {
                    assert_eq!(kind, FormatError::BadStart);
                    let at_start = seg.at + FRAME_HEAD as u64;
                    assert_eq!(offset, if level.is_some() { seg.at } else { at_start });
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn varints_are_canonical_and_bounded() {
        let read = |bytes: &[u8]| {
            let mut pos = 0;
            varint(bytes, &mut pos).map(|v| (v, pos))
        };
        assert_eq!(read(&[0]), Some((0, 1)));
        assert_eq!(read(&[0x7f]), Some((127, 1)));
        assert_eq!(read(&[0x80, 0x01]), Some((128, 2)));
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(read(&max), Some((u64::MAX, 10)));
        max[9] = 0x02;
        assert_eq!(read(&max), None);
        assert_eq!(read(&[0x80, 0x00]), None);
        assert_eq!(read(&[0x80]), None);
        assert_eq!(read(&[0x80; 11]), None);
        for n in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            let mut bytes = Vec::new();
            push_varint(&mut bytes, n);
            assert_eq!(read(&bytes), Some((n, bytes.len())));
        }
    }

    #[test]
    fn path_order_puts_a_directory_before_its_entries_and_siblings_after() {
        let order = path_order;
        assert_eq!(order(b"a", b"a/b"), Ordering::Less);
        assert_eq!(order(b"a/z", b"a-b"), Ordering::Less);
        assert_eq!(order(b"a/z", b"ab"), Ordering::Less);
        assert_eq!(order(b"a", b"a"), Ordering::Equal);
        assert_eq!(order(b"b", b"a/z"), Ordering::Greater);
    }
}
