//! What the decoder keeps for version 2 archives: the frame being read, the digests being
//! computed, the open `EXTFILE`, and the index it expects (recomputed from the entries as they
//! come, so that a stream's index is checked in constant memory); and the zstd step.

use std::hash::Hasher;

use twox_hash::XxHash3_64;

use super::{FormatError, CODEC_RAW, CODEC_ZSTD, FRAME_HEAD, MAX_BODY, MAX_WINDOW_LOG};

/// Whether a computed digest differs from the stated one. Fuzzing builds take every digest
/// as right, so that the fuzzer reaches what lies behind them.
pub(crate) fn differs(computed: u64, stated: u64) -> bool {
    !cfg!(fuzzing) && computed != stated
}

/// A version 2 frame head.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Head {
    pub tag: u8,
    pub codec: u8,
    pub stored: u32,
    pub body: u32,
    pub digest: u64,
}

/// Parses and checks the 18-byte frame head at the start of `bytes` (the tag is known).
pub(crate) fn head(bytes: &[u8; FRAME_HEAD]) -> Result<Head, FormatError> {
    let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().expect("4 bytes"));
    let head = Head {
        tag: bytes[0],
        codec: bytes[1],
        stored: u32_at(2),
        body: u32_at(6),
        digest: u64::from_le_bytes(bytes[10..18].try_into().expect("8 bytes")),
    };
    let lengths = match head.codec {
        CODEC_RAW => head.stored == head.body,
        CODEC_ZSTD => head.stored < head.body,
        _ => false,
    };
    if !lengths || head.body == 0 || head.body > MAX_BODY {
        return Err(FormatError::BadFrame);
    }
    Ok(head)
}

/// Decompresses the zstd frame `stored` into `out`, which then holds exactly `body` bytes:
/// one frame, all of `stored`, a window of at most 2^27, never more output than `body`.
/// The frame decompresses straight into `out`, which grows as it does (unless its capacity
/// is enough already), so a frame that claims a large body and makes little costs little.
pub fn inflate(stored: &[u8], body: u32, out: &mut Vec<u8>) -> Result<(), FormatError> {
    use zstd::stream::raw::{Decoder, InBuffer, Operation, OutBuffer};
    use zstd::zstd_safe::DParameter;
    let bad = |why: &str| FormatError::BadZstd(why.to_string());
    let mut decoder = Decoder::new().map_err(|e| bad(&e.to_string()))?;
    decoder
        .set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))
        .map_err(|e| bad(&e.to_string()))?;
    let body = body as usize;
    out.clear();
    let mut input = InBuffer::around(stored);
    loop {
        // Room up to one byte past the body, which shows a frame that makes more.
        if out.len() == out.capacity() {
            let more = out.capacity().max(1 << 20).min(body + 1 - out.len());
            out.reserve_exact(more);
        }
        let (used, made) = (input.pos(), out.len());
        let mut output = OutBuffer::around_pos(&mut *out, made);
        let hint = decoder
            .run(&mut input, &mut output)
            .map_err(|e| bad(&e.to_string()))?;
        if out.len() > body {
            return Err(bad("more bytes than its body"));
        }
        if hint == 0 {
            break;
        }
        if out.len() == made && input.pos() == used {
            return Err(bad("the frame is cut short"));
        }
    }
    if input.pos() != stored.len() {
        return Err(bad("bytes after the frame"));
    }
    if out.len() != body {
        return Err(bad("fewer bytes than its body"));
    }
    Ok(())
}

/// A little-endian base-128 varint, as the index stores numbers.
pub(super) fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push(n as u8 | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Index `kind` of a `DIR`.
pub(super) const KIND_DIR: u8 = 1;
/// Index `kind` of a `FILE`.
pub(super) const KIND_FILE: u8 = 2;
/// Index `kind` of an `EXTFILE`.
pub(super) const KIND_EXTFILE: u8 = 3;
/// Index `kind` of a `SYMLINK`.
pub(super) const KIND_SYMLINK: u8 = 4;
/// Index `kind` of a `HARDLINK`.
pub(super) const KIND_HARDLINK: u8 = 5;
/// Index `kind` bit of a file that carries `LINKED`.
pub(super) const KIND_LINKED: u8 = 0x10;

/// Index `kind` of a special file.
pub(super) fn kind_special(kind: crate::tree::Kind) -> u8 {
    use crate::tree::Kind;
    match kind {
        Kind::Fifo => 6,
        Kind::CharDevice => 7,
        _ => 8,
    }
}

/// The `EXTFILE` whose extents are still to come.
#[derive(Clone, Copy, Debug)]
pub(super) struct OpenFile {
    /// Its entry number.
    pub number: u64,
    /// Extents still to come; `None` for the file a resumed decoder's `START` names, whose
    /// extents go on until another message comes.
    pub left: Option<u32>,
    /// Where the last extent ended.
    pub end: u64,
    /// The file's size.
    pub size: u64,
}

/// The index the entries decoded so far call for, as digests of its three sections (the
/// `seg` records, the rows, the restarts), built as the segments and entries come.
#[derive(Default)]
pub(super) struct Expect {
    segs: XxHash3_64,
    rows: XxHash3_64,
    restarts: XxHash3_64,
    rows_len: u64,
    rows_count: u64,
    previous: Vec<u8>,
    previous_segment: u64,
    /// The row being built, and the current path.
    row: Vec<u8>,
    path: Vec<u8>,
}

impl Expect {
    /// Segment `seg`'s record: at, stored, body, first, digest.
    pub fn segment(&mut self, at: u64, head: &Head, first: u64) {
        let mut record = [0u8; 32];
        record[..8].copy_from_slice(&at.to_le_bytes());
        record[8..12].copy_from_slice(&head.stored.to_le_bytes());
        record[12..16].copy_from_slice(&head.body.to_le_bytes());
        record[16..24].copy_from_slice(&first.to_le_bytes());
        record[24..].copy_from_slice(&head.digest.to_le_bytes());
        self.segs.write(&record);
    }

    /// The next entry's row: its path (directory names, then its name), kind, size, and
    /// where its group is.
    pub fn row<'n>(
        &mut self,
        dirs: impl Iterator<Item = &'n [u8]>,
        name: &[u8],
        (kind, size): (u8, u64),
        (segment, offset): (u64, u64),
    ) {
        self.path.clear();
        for dir in dirs {
            self.path.extend_from_slice(dir);
            self.path.push(b'/');
        }
        self.path.extend_from_slice(name);
        let shared = match self.rows_count % 16 {
            0 => {
                self.restarts.write(&(self.rows_len as u32).to_le_bytes());
                0
            }
            _ => (self.path.iter().zip(&self.previous))
                .take_while(|(a, b)| a == b)
                .count(),
        };
        self.row.clear();
        push_varint(&mut self.row, shared as u64);
        push_varint(&mut self.row, (self.path.len() - shared) as u64);
        self.row.extend_from_slice(&self.path[shared..]);
        self.row.push(kind);
        push_varint(&mut self.row, size);
        push_varint(&mut self.row, segment - self.previous_segment);
        push_varint(&mut self.row, offset);
        self.rows.write(&self.row);
        self.rows_len += self.row.len() as u64;
        self.rows_count += 1;
        self.previous_segment = segment;
        std::mem::swap(&mut self.previous, &mut self.path);
    }
}

/// The index body as it is read: its whole digest and its sections' digests, compared at
/// its end with the frame's digest and with what the entries called for.
pub(super) struct IndexCheck {
    stated: u64,
    pos: u64,
    /// Where the `seg` records end and where the rows end.
    segs_end: u64,
    rows_end: u64,
    whole: XxHash3_64,
    sections: [XxHash3_64; 3],
}

/// Bytes of the index body's counts (segments, entries).
pub(super) const INDEX_COUNTS: usize = 12;

impl IndexCheck {
    /// Checks the counts at the start of an index body of `len` bytes against the archive
    /// (`segments`, `entries`) and prepares to read the rest.
    pub fn new(
        head: &Head,
        counts: &[u8; INDEX_COUNTS],
        segments: u32,
        entries: u64,
    ) -> Result<IndexCheck, FormatError> {
        let stated_segments = u32::from_le_bytes(counts[..4].try_into().expect("4 bytes"));
        let stated_entries = u64::from_le_bytes(counts[4..].try_into().expect("8 bytes"));
        let len = u64::from(head.body);
        let segs_end = INDEX_COUNTS as u64 + 32 * u64::from(segments);
        let restarts = 4 * entries.div_ceil(16);
        let fits = segs_end + restarts <= len;
        if stated_segments != segments || stated_entries != entries || !fits {
            return Err(FormatError::BadIndex);
        }
        let mut whole = XxHash3_64::default();
        whole.write(counts);
        Ok(IndexCheck {
            stated: head.digest,
            pos: INDEX_COUNTS as u64,
            segs_end,
            rows_end: len - restarts,
            whole,
            sections: Default::default(),
        })
    }

    /// The next bytes of the body.
    pub fn feed(&mut self, mut bytes: &[u8]) {
        self.whole.write(bytes);
        while !bytes.is_empty() {
            let (section, end) = match self.pos {
                p if p < self.segs_end => (0, self.segs_end),
                p if p < self.rows_end => (1, self.rows_end),
                _ => (2, u64::MAX),
            };
            let n = (end - self.pos).min(bytes.len() as u64) as usize;
            self.sections[section].write(&bytes[..n]);
            self.pos += n as u64;
            bytes = &bytes[n..];
        }
    }

    /// Checks the whole body: its digest, then each section against `expect`.
    pub fn finish(&self, expect: &Expect) -> Result<(), FormatError> {
        if differs(self.whole.finish(), self.stated) {
            return Err(FormatError::BadDigest("index"));
        }
        let wanted = [&expect.segs, &expect.rows, &expect.restarts].map(|h| h.finish());
        let rows_len = self.rows_end - self.segs_end;
        if wanted != self.sections.each_ref().map(|h| h.finish()) || rows_len != expect.rows_len {
            return Err(FormatError::BadIndex);
        }
        Ok(())
    }
}

/// The footer's fields after its tag: entries, segments, index offset.
pub(super) struct Footer {
    pub entries: u64,
    pub segments: u32,
    pub index_at: u64,
}

/// Parses and checks the 37-byte footer (digest, then magic).
pub(super) fn footer(bytes: &[u8; super::FOOTER]) -> Result<Footer, FormatError> {
    let digest = u64::from_le_bytes(bytes[21..29].try_into().expect("8 bytes"));
    if differs(super::digest(&bytes[..21]), digest) {
        return Err(FormatError::BadDigest("footer"));
    }
    if bytes[29..] != super::HEADER_V2 {
        return Err(FormatError::BadFooter);
    }
    Ok(Footer {
        entries: u64::from_le_bytes(bytes[1..9].try_into().expect("8 bytes")),
        segments: u32::from_le_bytes(bytes[9..13].try_into().expect("4 bytes")),
        index_at: u64::from_le_bytes(bytes[13..21].try_into().expect("8 bytes")),
    })
}
