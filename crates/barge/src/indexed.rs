//! A version 2 archive in a file, read through its index: the footer and the index by
//! `pread` (checked whole by `format::index`), then only what is wanted. `list --names`
//! reads no segment; `cat` reads a `FILE` of a raw segment alone (its group, where its row
//! places it) and its other files from the segments holding them, each decoded by a
//! decoder resumed at it (an `EXTFILE` goes on into the segments its extents run into).

use std::ops::Range;
use std::os::fd::BorrowedFd;

use rustix::buffer::spare_capacity;
use rustix::io::{fcntl_dupfd_cloexec, pread};

use crate::error::{Error, Result, TreePath};
use crate::format::index::{Footer, Found, Index, RowKind};
use crate::format::{decode_with, Decoder, Event, FormatError, Limits, Step, FOOTER, FRAME_HEAD};
use crate::interrupt::{retry, Cancel};
use crate::land::select::Select;
use crate::land::{Driver, Feed};
use crate::source::input_at;
use crate::sys::map::Mapped;
use crate::tree::{Content, DirPath, Entry, Sink};
use crate::Progress;

/// An archive in a file (or block device): `len` bytes from byte `offset` of `fd`.
pub(crate) struct Seekable<'a> {
    pub(crate) fd: BorrowedFd<'a>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
}

impl Seekable<'_> {
    /// The `len` bytes at archive offset `at`, by `pread`; fewer there (the file shrank)
    /// is `truncated` at `at`.
    pub(crate) fn read(&self, at: u64, len: usize, cancel: &Cancel) -> Result<Vec<u8>> {
        // Read into the spare capacity: megabytes need not be zeroed first.
        let mut buf = Vec::with_capacity(len);
        while buf.len() < len {
            let from = at + buf.len() as u64;
            let into = || pread(self.fd, spare_capacity(&mut buf), self.offset + from);
            let n =
                retry(cancel, into).map_err(|e| Error::io("read archive", input_at(from), e))?;
            if n == 0 {
                let kind = FormatError::Truncated;
                let path = TreePath::default();
                return Err(Error::Format {
                    offset: at,
                    path,
                    kind,
                });
            }
        }
        // The capacity may be more than was asked for.
        buf.truncate(len);
        Ok(buf)
    }

    /// The bytes from archive offset `range.start` to `range.end`, mapped (not read: a
    /// process landing a share of a large archive copies none of it into buffers); an
    /// archive that ends before `range.end` is `truncated` there.
    pub(crate) fn map(&self, range: Range<u64>) -> Result<Mapped> {
        if range.end > self.len {
            return Err(Error::Format {
                offset: self.len,
                path: TreePath::default(),
                kind: FormatError::Truncated,
            });
        }
        let at = input_at(range.start);
        let dup =
            fcntl_dupfd_cloexec(self.fd, 0).map_err(|e| Error::io("dup archive", at.clone(), e))?;
        let len = range.end - range.start;
        Mapped::new(dup, self.offset + range.start, len).map_err(|e| Error::io("mmap", at, e))
    }

    /// Its footer and index, checked but for the rows ([`Index::read_lazily`]); `None`
    /// where its last bytes are no footer (the archive is then decoded from its start,
    /// which says what is wrong).
    pub(crate) fn index(&self, cancel: &Cancel) -> Result<Option<Index>> {
        let Some(tail_at) = self.len.checked_sub(FOOTER as u64) else {
            return Ok(None);
        };
        let tail = self.read(tail_at, FOOTER, cancel)?;
        let tail = tail[..].try_into().expect("a footer's bytes");
        let Some(footer) = Footer::find(tail, self.len)? else {
            return Ok(None);
        };
        let frame = self.read(footer.index_at, footer.index_len(), cancel)?;
        Index::read_lazily(&footer, frame).map(Some)
    }
}

/// What a selection takes of an index: the files, by path, in order.
#[derive(Default)]
struct Taken {
    dir: DirPath,
    files: Vec<TreePath>,
}

impl Sink for Taken {
    type Error = Error;

    fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
        self.dir.enter(entry.name);
        Ok(())
    }

    fn leave_dir(&mut self) -> Result<()> {
        self.dir.leave();
        Ok(())
    }

    fn empty_dir(&mut self, _entry: &Entry<'_>) -> Result<()> {
        Ok(())
    }

    fn file(&mut self, entry: &Entry<'_>, _content: Content<'_>) -> Result<()> {
        self.files.push(self.dir.join(entry.name));
        Ok(())
    }
}

/// A file to read: its row (where its group is), its path.
struct Wanted {
    row: Found,
    path: TreePath,
}

impl Wanted {
    fn segment(&self) -> usize {
        self.row.segment as usize
    }
}

/// Passes to `sink` (as [`Sink::file`], [`Sink::data`] and [`Sink::hole`]) the content of
/// the files `select` takes from the archive `src` indexed by `index`, in archive order:
/// which files, by the index ([`taken`]); their content from the segments holding them,
/// decoded and checked (digests, and that each entry is where its row says).
pub(crate) fn cat<S: Sink>(
    src: &Seekable<'_>,
    index: &mut Index,
    (select, limits, cancel): (Select, Limits, &Cancel),
    mut sink: S,
) -> std::result::Result<(), S::Error> {
    let read = taken(index, select, cancel).map_err(S::Error::from);
    let read = read.and_then(|wanted| read_files(src, index, &wanted, (limits, cancel), &mut sink));
    match read {
        Ok(()) => sink.finish(),
        Err(e) => Err(sink.abort(e)),
    }
}

/// The files `select` takes from `index`, in order, as a listing would take them (the
/// same errors: a hard link whose file is left out, then a PATH that names nothing). PATHs
/// alone are looked up by binary search, a directory's entries being the rows after it
/// below its path; with `--exclude` the feed decides, over every row. Only where each is a
/// file to be read alone ([`alone`]) are the index's other rows left unchecked.
fn taken(index: &mut Index, select: Select, cancel: &Cancel) -> Result<Vec<Wanted>> {
    let Some(paths) = select.only_paths() else {
        index.check()?;
        let mut taken = Taken::default();
        let progress = Progress::default();
        Driver::new(&mut taken, &progress)
            .filter(0, select)
            .cancel(cancel.clone())
            .run_index(index)?;
        let wanted = taken.files.into_iter().map(|path| Wanted {
            row: index.find(&path.0).expect("a path of the index"),
            path,
        });
        return Ok(wanted.collect());
    };
    let (mut ranges, mut missing) = (Vec::new(), None);
    for path in paths {
        let Some(found) = index.lookup(path)? else {
            missing = missing.or(Some(path));
            continue;
        };
        if !found.kind.is_file() {
            // A directory's rows below it, a hard link's target: rows the lookup did not check.
            index.check()?;
        }
        let mut end = found.number + 1;
        if found.kind == RowKind::Dir {
            let mut rows = index.rows_at(end);
            while rows.next_row().is_some_and(|row| below(row.path, path)) {
                end += 1;
            }
        }
        ranges.push((found.number..end, found, path));
    }
    ranges.sort_by_key(|(range, ..)| range.start);
    let taken = |n: &u64| ranges.iter().any(|(range, ..)| range.contains(n));
    let mut wanted = Vec::new();
    // Rows before `next` were taken already (ranges nest when PATHs do).
    let mut next = 0;
    for (range, found, path) in &ranges {
        let start = range.start.max(next);
        if found.kind.is_file() {
            if start < range.end {
                let path = TreePath(path.to_vec());
                wanted.push(Wanted { row: *found, path });
            }
            next = next.max(range.end);
            continue;
        }
        let mut rows = index.rows_at(start);
        for _ in start..range.end {
            let row = rows.next_row().expect("a row of the range");
            let path = TreePath(row.path.to_vec());
            match row.kind {
                kind if kind.is_file() => wanted.push(Wanted {
                    row: Found::of(&row),
                    path,
                }),
                RowKind::HardLink if !taken(&row.size) => {
                    let mut file = index.rows_at(row.size);
                    let target = TreePath(file.next_row().expect("a linked file").path.to_vec());
                    return Err(Error::StrippedLink { path, target });
                }
                _ => {}
            }
        }
        next = next.max(range.end);
    }
    if let Some(path) = missing {
        return Err(Error::NotInArchive {
            path: TreePath(path.clone()),
        });
    }
    if !wanted.iter().all(|file| alone(index, file)) {
        // Their segments are decoded, against the index's linked files.
        index.check()?;
    }
    Ok(wanted)
}

/// Whether `file` is read alone: a `FILE` of a raw segment.
fn alone(index: &Index, file: &Wanted) -> bool {
    let seg = index.segments()[file.segment()];
    file.row.kind == RowKind::File && seg.stored == seg.body
}

/// Whether `path` is below the directory `dir`.
fn below(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// Passes the content of the `wanted` files (in entry order) to `sink` through a feed
/// (which makes holes of a sparse file's gaps): a `FILE` of a raw segment read alone from
/// its row's place ([`read_alone`]), else from the segments holding it, decoded from their
/// `START`s.
fn read_files<S: Sink>(
    src: &Seekable<'_>,
    index: &mut Index,
    wanted: &[Wanted],
    (limits, cancel): (Limits, &Cancel),
    sink: &mut S,
) -> std::result::Result<(), S::Error> {
    let mut feed = Feed::new(0, cancel.clone());
    let mut next = 0;
    while let Some(first) = wanted.get(next) {
        let mut at = first.segment();
        if alone(index, first) && read_alone(src, index, first, (limits, cancel), &mut feed, sink)?
        {
            next += 1;
            continue;
        }
        // Decoding needs the linked files: every row checked (done already, unless a file
        // to be read alone did not decode).
        index.check()?;
        let (segs, seg) = (index.segments(), index.segments()[at]);
        let mut decoder = Decoder::resume(limits, seg.at, at as u32, seg.first, index.linked());
        // The events are of a wanted file.
        let mut current = false;
        loop {
            let seg = segs[at];
            let frame = src.read(seg.at, seg.frame_len(), cancel)?;
            let used = decode_with(&mut decoder, &frame, false, |decoder, event| {
                let entry = match &event {
                    Event::File { entry, .. } | Event::SparseFile { entry, .. } => Some(entry),
                    Event::Dir(entry)
                    | Event::Symlink { entry, .. }
                    | Event::HardLink { entry, .. }
                    | Event::Special { entry, .. } => Some(entry),
                    _ => None,
                };
                if let Some(entry) = entry {
                    let number = decoder.entries() - 1;
                    current = wanted.get(next).is_some_and(|w| w.row.number == number);
                    if current {
                        let path = TreePath::join(decoder.dir_names(), entry.name);
                        if path != wanted[next].path {
                            return Err(bad_index(index).into());
                        }
                        next += 1;
                    }
                }
                let content = matches!(
                    event,
                    Event::File { .. }
                        | Event::SparseFile { .. }
                        | Event::Extent { .. }
                        | Event::Data(_)
                );
                match current && content {
                    true => feed.event(event, (&[], &[]), sink),
                    false => Ok(()),
                }
            })?;
            if used != frame.len() {
                return Err(decoder.frame_error(FormatError::Truncated).into());
            }
            at += 1;
            // A wanted entry the index places in a segment read, and not found there.
            if wanted.get(next).is_some_and(|w| w.segment() < at) {
                return Err(bad_index(index).into());
            }
            let extents_due = current && decoder.open_file().is_some();
            let next_here = wanted.get(next).is_some_and(|w| w.segment() == at);
            if !(extents_due || next_here) {
                break;
            }
            if at == segs.len() {
                // The last segment ended with extents due: what the INDEX frame is not after.
                return Err(Error::Format {
                    offset: index.at(),
                    path: TreePath::default(),
                    kind: FormatError::BadExtent,
                }
                .into());
            }
        }
    }
    Ok(())
}

/// Bytes read past a `FILE`'s name, size, data and digest for the records before it, so
/// that one read mostly takes its group whole.
const RECORDS_GUESS: u64 = 1024;

/// Passes `sink` the content of the `FILE` `file` of a raw segment, read alone from where
/// its row places it: its group (records, the entry, data, data digest) decoded and
/// checked as a decoder from the segment's start would (the segment's digest aside), and
/// that it is the file the row says (name, size: `bad-index` at the INDEX). `false`,
/// with nothing passed, where the group does not decode: the caller then decodes the
/// segment from its `START`, which tells what is wrong (the segment, or the index).
fn read_alone<S: Sink>(
    src: &Seekable<'_>,
    index: &Index,
    file: &Wanted,
    (limits, cancel): (Limits, &Cancel),
    feed: &mut Feed,
    sink: &mut S,
) -> std::result::Result<bool, S::Error> {
    let (row, seg) = (file.row, index.segments()[file.segment()]);
    let at = seg.at + FRAME_HEAD as u64 + row.offset;
    let left = u64::from(seg.body) - row.offset;
    let mut names: Vec<Box<[u8]>> = file.path.0.split(|&b| b == b'/').map(Box::from).collect();
    let name = names.pop().expect("a path has a name");
    let place = (row.segment, row.number);
    let mut decoder = Decoder::at_group(limits, (at, left), place, names);
    let group = row.size + name.len() as u64 + 14;
    let mut len = group.saturating_add(RECORDS_GUESS).min(left);
    loop {
        let bytes = src.read(at, len as usize, cancel)?;
        let Ok(step) = decoder.next_whole(&bytes, len == left) else {
            return Ok(false);
        };
        match step {
            Step::Event(event, _) => {
                let is_row = match &event {
                    Event::File { entry, size, .. } => *entry.name == *name && *size == row.size,
                    _ => false,
                };
                if !is_row {
                    return Err(bad_index(index).into());
                }
                return feed.event(event, (&[], &[]), sink).map(|()| true);
            }
            Step::NeedMore => len = (decoder.wanted() as u64).max(2 * len).min(left),
            Step::Done | Step::Inflate { .. } => return Err(bad_index(index).into()),
        }
    }
}

/// The index disagrees with the segments.
fn bad_index(index: &Index) -> Error {
    Error::Format {
        offset: index.at(),
        path: TreePath::default(),
        kind: FormatError::BadIndex,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exclude::Exclude;
    use crate::format::index::tests::{body, parts, with_body, Plain};
    use crate::format::index::{Footer, Index};
    use crate::format::SegmentEncoder;
    use crate::tree::{Meta, Xattrs};
    use crate::unpack::Unpack;

    /// `a/` holding `f` (in the first segment), `b` (an EXTFILE of four extents, one per
    /// segment, with a hole), `c/` holding `g` and `h`, a hard link `l` to `a/f`, and `z`
    /// (each file in a segment of its own), raw or zstd.
    fn archive(level: Option<i32>) -> Vec<u8> {
        let mut encoder = SegmentEncoder::new(Vec::new()).unwrap().segment_target(100);
        if let Some(level) = level {
            encoder = encoder.zstd(level);
        }
        let meta = Meta::with_mode(0o644);
        encoder.dir_with(&Entry::dir(b"a", meta)).unwrap();
        let linked = Entry {
            link_id: Some(1),
            ..Entry::file(b"f", meta)
        };
        encoder.file_with(&linked, &[b'f'; 150]).unwrap();
        encoder.pop().unwrap();
        encoder.ext_file(&Entry::file(b"b", meta), 1000, 4).unwrap();
        for (i, at) in [0u64, 200, 400, 900].into_iter().enumerate() {
            encoder.extent(at, &[b'0' + i as u8; 100]).unwrap();
        }
        encoder.dir_with(&Entry::dir(b"c", meta)).unwrap();
        encoder
            .file_with(&Entry::file(b"g", meta), &[b'g'; 120])
            .unwrap();
        encoder.file_with(&Entry::file(b"h", meta), b"h").unwrap();
        encoder.pop().unwrap();
        encoder.hard_link(b"l", 1).unwrap();
        encoder
            .file_with(&Entry::file(b"z", meta), &[b'z'; 130])
            .unwrap();
        encoder.finish().unwrap()
    }

    /// The content of `b`: its extents, zeros between them.
    fn content_of_b() -> Vec<u8> {
        let mut b = vec![0; 1000];
        for (i, at) in [0, 200, 400, 900].into_iter().enumerate() {
            b[at..at + 100].fill(b'0' + i as u8);
        }
        b
    }

    /// Writes the content of each file it is given, after its name.
    #[derive(Default)]
    struct Out(Vec<u8>);

    impl Sink for Out {
        type Error = Error;
        fn enter_dir(&mut self, _: &Entry<'_>) -> Result<()> {
            Ok(())
        }
        fn leave_dir(&mut self) -> Result<()> {
            Ok(())
        }
        fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
            self.0.extend_from_slice(entry.name);
            self.0.push(b':');
            match content {
                Content::Bytes(data) | Content::Stream { first: data, .. } => self.data(data),
                _ => unreachable!(),
            }
        }
        fn data(&mut self, data: &[u8]) -> Result<()> {
            self.0.extend_from_slice(data);
            Ok(())
        }
    }

    /// `barge cat` of `paths` from `archive` (written to a file), by the index or (when
    /// `piped`) from a stream.
    fn cat_of(archive: &[u8], paths: &[&str], piped: bool) -> Result<Vec<u8>> {
        cat_but(archive, paths, &[], piped)
    }

    /// [`cat_of`] leaving out what `exclude` matches.
    fn cat_but(archive: &[u8], paths: &[&str], exclude: &[&str], piped: bool) -> Result<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.barge");
        std::fs::write(&file, archive).unwrap();
        let exclude = Exclude::new(exclude).unwrap();
        let unpack = Unpack::new().select(Select::new(paths, exclude));
        let mut out = Out::default();
        match piped {
            true => {
                let archive =
                    crate::unpack::Archive::from_reader(std::io::Cursor::new(archive.to_vec()));
                unpack.cat(&archive, &mut out)?;
            }
            false => unpack.cat(&unpack.open(Some(&file))?, &mut out)?,
        }
        Ok(out.0)
    }

    /// `archive` with byte `at` flipped.
    fn flipped(archive: &[u8], at: usize) -> Vec<u8> {
        let mut bad = archive.to_vec();
        bad[at] ^= 1;
        bad
    }

    /// The index of `archive`.
    fn index_of(archive: &[u8]) -> Index {
        let tail = archive[archive.len() - FOOTER..].try_into().unwrap();
        let footer = Footer::find(tail, archive.len() as u64).unwrap().unwrap();
        let frame = archive[footer.index_at as usize..footer.at as usize].to_vec();
        Index::read(&footer, frame).unwrap()
    }

    #[test]
    fn cat_by_the_index_gives_what_the_stream_gives() {
        let mut b = b"b:".to_vec();
        b.extend_from_slice(&content_of_b());
        for level in [None, Some(3)] {
            let archive = archive(level);
            assert!(index_of(&archive).segments().len() >= 7);
            for (paths, want) in [
                (&["z"][..], [&b"z:"[..], &[b'z'; 130]].concat()),
                (&["b"], b.clone()),
                (&["c"], [&b"g:"[..], &[b'g'; 120], b"h:h"].concat()),
                (
                    &["/c/h", "a/f"],
                    [&b"f:"[..], &[b'f'; 150], b"h:h"].concat(),
                ),
                (&["a", "l"], [&b"f:"[..], &[b'f'; 150]].concat()),
                (
                    &["c/h", "c", "a/f", "a"],
                    [&b"f:"[..], &[b'f'; 150], b"g:", &[b'g'; 120], b"h:h"].concat(),
                ),
            ] {
                for piped in [false, true] {
                    let got = cat_of(&archive, paths, piped).unwrap();
                    assert!(got == want, "{paths:?} zstd {level:?} piped {piped}");
                }
            }
            // With --exclude the feed selects.
            for piped in [false, true] {
                let got = cat_but(&archive, &["c", "z"], &["h"], piped).unwrap();
                assert_eq!(
                    got,
                    [&b"g:"[..], &[b'g'; 120], b"z:", &[b'z'; 130]].concat()
                );
            }
            // A hard link without its file is an error either way.
            for piped in [false, true] {
                let lone = cat_of(&archive, &["l"], piped);
                assert!(matches!(lone, Err(Error::StrippedLink { .. })), "{lone:?}");
            }
        }
    }

    #[test]
    fn a_mapped_range_is_the_archive_s_bytes_and_one_past_its_end_is_truncated() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let archive = archive(None);
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(b"before").unwrap();
        file.write_all(&archive).unwrap();
        let src = Seekable {
            fd: file.as_fd(),
            offset: 6,
            len: archive.len() as u64,
        };
        let index = index_of(&archive);
        let segs = index.segments();
        let (at, end) = (segs[1].at, segs[2].at + segs[2].frame_len() as u64);
        let mapped = src.map(at..end).unwrap();
        assert_eq!(mapped.bytes(), &archive[at as usize..end as usize]);
        match src.map(at..archive.len() as u64 + 1) {
            Err(Error::Format { kind, offset, .. }) => {
                assert_eq!(
                    (kind, offset),
                    (FormatError::Truncated, archive.len() as u64)
                );
            }
            other => panic!("{:?}", other.map(|m| m.bytes().len())),
        }
    }

    #[test]
    fn cat_by_the_index_reads_only_the_segments_of_its_files() {
        let archive = archive(None);
        let index = index_of(&archive);
        let segs = index.segments();
        let z = index.find(b"z").unwrap().segment as usize;
        let b = index.find(b"b").unwrap().segment as usize;
        // A byte flipped in each other segment's body: z's content still comes.
        let mut bad = archive.clone();
        for (i, seg) in segs.iter().enumerate() {
            if i != z {
                bad[seg.at as usize + seg.frame_len() - 9] ^= 1;
            }
        }
        assert_eq!(cat_of(&bad, &["z"], false).unwrap()[..3], *b"z:z");
        // In the segments b's extents run into, the flip is found, naming b.
        for seg in &segs[b..b + 4] {
            let bad = flipped(&archive, seg.at as usize + seg.frame_len() - 20);
            match cat_of(&bad, &["b"], false) {
                Err(Error::Format { kind, path, .. }) => {
                    assert_eq!(kind, FormatError::BadDigest("extent"));
                    assert_eq!(path.0, b"b");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn cat_of_a_file_of_a_raw_segment_reads_its_group_alone() {
        let archive = archive(None);
        let index = index_of(&archive);
        let g = index.find(b"c/g").unwrap();
        let seg = index.segments()[g.segment as usize];
        let want = [&b"g:"[..], &[b'g'; 120]].concat();
        // Its segment's START garbled: decoded from there, c/g would not come.
        let start = seg.at as usize + FRAME_HEAD + 1;
        let bad_start = flipped(&archive, start);
        assert_eq!(cat_of(&bad_start, &["c/g"], false).unwrap(), want);
        assert!(cat_of(&bad_start, &["c/g"], true).is_err());
        // A byte of its data flipped: its digest fails, naming it.
        let data = archive.windows(120).position(|w| w == [b'g'; 120]).unwrap();
        match cat_of(&flipped(&archive, data + 60), &["c/g"], false) {
            Err(Error::Format { kind, path, .. }) => {
                assert_eq!(kind, FormatError::BadDigest("file"));
                assert_eq!(path.0, b"c/g");
            }
            other => panic!("{other:?}"),
        }
        // Records longer than one read guesses: the group is read on.
        let mut encoder = SegmentEncoder::new(Vec::new()).unwrap();
        let mut xattrs = Vec::new();
        Xattrs::push(&mut xattrs, b"user.big", &[b'x'; 3000]);
        let entry = Entry {
            xattrs: Xattrs(&xattrs),
            ..Entry::file(b"x", Meta::with_mode(0o600))
        };
        encoder.file_with(&entry, b"content").unwrap();
        let archive = encoder.finish().unwrap();
        assert_eq!(cat_of(&archive, &["x"], false).unwrap(), b"x:content");
    }

    #[test]
    fn cat_of_a_file_read_alone_checks_it_against_its_row() {
        let archive = archive(None);
        let bad_index = |archive: &[u8], path: &str| match cat_of(archive, &[path], false) {
            Err(Error::Format { kind, offset, .. }) => {
                assert_eq!(
                    (kind, offset),
                    (FormatError::BadIndex, index_of(archive).at())
                );
            }
            other => panic!("{other:?}"),
        };
        let (segs, rows) = parts(&archive);
        let z = rows.iter().position(|r| r.0 == b"z").unwrap();
        // A row whose size, or name, is not its group's.
        let mut larger = rows.clone();
        larger[z].2 += 1;
        bad_index(
            &with_body(&archive, &body(&segs, &larger), rows.len() as u64),
            "z",
        );
        let mut renamed = rows.clone();
        renamed[z].0 = b"y".to_vec();
        bad_index(
            &with_body(&archive, &body(&segs, &renamed), rows.len() as u64),
            "y",
        );
    }

    /// A raw archive of the files `f00` to `f39`: three blocks of index rows.
    fn forty_files() -> Vec<u8> {
        let mut encoder = SegmentEncoder::new(Vec::new()).unwrap();
        for i in 0..40 {
            let name = format!("f{i:02}");
            let entry = Entry::file(name.as_bytes(), Meta::with_mode(0o644));
            encoder.file_with(&entry, name.as_bytes()).unwrap();
        }
        encoder.finish().unwrap()
    }

    #[test]
    fn cat_checks_the_rows_it_looks_up_and_the_others_where_it_needs_them() {
        let archive = forty_files();
        let (segs, rows) = parts(&archive);
        let edited = |edit: &dyn Fn(&mut Vec<Plain>)| {
            let mut rows = rows.clone();
            edit(&mut rows);
            with_body(&archive, &body(&segs, &rows), rows.len() as u64)
        };
        let is_bad_index = |result: Result<Vec<u8>>, archive: &[u8]| {
            let tail = archive[archive.len() - FOOTER..].try_into().unwrap();
            let footer = Footer::find(tail, archive.len() as u64).unwrap().unwrap();
            match result {
                Err(Error::Format { kind, offset, .. }) => {
                    assert_eq!((kind, offset), (FormatError::BadIndex, footer.index_at));
                }
                other => panic!("{other:?}"),
            }
        };
        let listed = |archive: &[u8]| {
            let dir = tempfile::tempdir().unwrap();
            let file = dir.path().join("a.barge");
            std::fs::write(&file, archive).unwrap();
            let unpack = Unpack::new();
            let opened = unpack.open(Some(&file))?;
            unpack
                .list_index(&opened, &mut Out::default())
                .map(|()| Vec::new())
        };
        assert_eq!(cat_of(&archive, &["f05"], false).unwrap(), b"f05:f05");
        // A row of another block of an unknown kind, or below a file (which only the rows
        // before it tell): cat of f05 does not read it, a listing and a lookup that
        // misses do.
        let unknown = edited(&|r| r[35].1 = 9);
        let below_a_file = edited(&|r| r[35].0 = b"f34/x".to_vec());
        for bad in [&unknown, &below_a_file] {
            assert_eq!(cat_of(bad, &["f05"], false).unwrap(), b"f05:f05");
            is_bad_index(listed(bad), bad);
            is_bad_index(cat_of(bad, &["f06", "none"], false), bad);
        }
        // The block cat reads is checked.
        is_bad_index(cat_of(&unknown, &["f36"], false), &unknown);
        let unordered = edited(&|r| r.swap(3, 4));
        is_bad_index(cat_of(&unordered, &["f05"], false), &unordered);
        assert_eq!(cat_of(&unordered, &["f25"], false).unwrap(), b"f25:f25");
    }

    #[test]
    fn cat_by_the_index_of_a_path_it_lacks_or_names_elsewhere_fails() {
        let archive = archive(None);
        match cat_of(&archive, &["c/x", "z"], false) {
            Err(Error::NotInArchive { path }) => assert_eq!(path.0, b"c/x"),
            other => panic!("{other:?}"),
        }
        // The vector whose one row names "b" where its segment has "a".
        let vector = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../testdata/vectors/v2/invalid/index-path.barge"
        );
        let vector = std::fs::read(vector).unwrap();
        let bad_index = |result: Result<Vec<u8>>, at: u64| match result {
            Err(Error::Format { kind, offset, .. }) => {
                assert_eq!((kind, offset), (FormatError::BadIndex, at));
            }
            other => panic!("{other:?}"),
        };
        bad_index(cat_of(&vector, &["b"], false), index_of(&vector).at());
        // An index that places `c/h` in the segment before its own (which holds no such
        // entry: the segment table agreeing, the segments' STARTs would not).
        let (mut segs, mut rows) = parts(&archive);
        let h = rows.iter().position(|r| r.0 == b"c/h").unwrap();
        let own = rows[h].3 as usize;
        assert_eq!(segs[own].first, h as u64, "c/h begins its segment");
        segs[own].first += 1;
        (rows[h].3, rows[h].4) = (own as u64 - 1, u64::from(segs[own - 1].body) - 1);
        let moved = with_body(&archive, &body(&segs, &rows), rows.len() as u64);
        bad_index(cat_of(&moved, &["c/h"], false), index_of(&moved).at());
    }

    /// The paths and kinds a listing hands `sink`.
    #[derive(Default)]
    struct Paths {
        dir: DirPath,
        seen: Vec<String>,
    }

    impl Paths {
        fn add(&mut self, entry: &Entry<'_>, what: &str) -> Result<()> {
            let path = self.dir.join(entry.name);
            self.seen.push(format!("{what} {path}"));
            Ok(())
        }
    }

    impl Sink for Paths {
        type Error = Error;
        fn enter_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
            self.add(entry, "dir")?;
            self.dir.enter(entry.name);
            Ok(())
        }
        fn leave_dir(&mut self) -> Result<()> {
            self.dir.leave();
            Ok(())
        }
        fn empty_dir(&mut self, entry: &Entry<'_>) -> Result<()> {
            self.add(entry, "empty")
        }
        fn file(&mut self, entry: &Entry<'_>, content: Content<'_>) -> Result<()> {
            let size = match content {
                Content::Bytes(data) => data.len() as u64,
                Content::Stream { size, .. } => size,
                _ => unreachable!(),
            };
            self.add(entry, &format!("file {size} {:?}", entry.link_id))
        }
        fn hard_link(&mut self, entry: &Entry<'_>, target: u64) -> Result<()> {
            self.add(entry, &format!("link {target}"))
        }
        fn symlink(&mut self, entry: &Entry<'_>, _target: &[u8]) -> Result<()> {
            self.add(entry, "symlink")
        }
    }

    #[test]
    fn a_listing_by_the_index_selects_as_the_stream_does() {
        let archive = archive(Some(3));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.barge");
        std::fs::write(&file, &archive).unwrap();
        let selections: [(&[&str], &[&str], usize); 5] = [
            (&[], &[], 0),
            (&["c", "z", "a/f"], &[], 0),
            (&[], &["h", "c/", "*b"], 0),
            (&[], &[], 1),
            (&["c/g"], &[], 1),
        ];
        for (paths, exclude, strip) in selections {
            let unpack = Unpack::new()
                .select(Select::new(paths, Exclude::new(exclude).unwrap()))
                .strip_components(strip);
            let (mut by_index, mut decoded) = (Paths::default(), Paths::default());
            let opened = unpack.open(Some(&file)).unwrap();
            unpack.list_index(&opened, &mut by_index).unwrap();
            unpack.list(&opened, &mut decoded).unwrap();
            assert_eq!(by_index.seen, decoded.seen, "{paths:?} {exclude:?} {strip}");
            assert!(!by_index.seen.is_empty());
        }
        // A hard link kept whose file is left out is an error either way.
        let unpack = Unpack::new().select(Select::new(["l"], Exclude::default()));
        let opened = unpack.open(Some(&file)).unwrap();
        let by_index = unpack.list_index(&opened, &mut Paths::default());
        let decoded = unpack.list(&opened, &mut Paths::default());
        assert!(
            matches!(by_index, Err(Error::StrippedLink { .. })),
            "{by_index:?}"
        );
        assert_eq!(
            by_index.unwrap_err().to_string(),
            decoded.unwrap_err().to_string()
        );
        // The body is not read: a flipped byte in it goes unseen.
        let index_at = index_of(&archive).at() as usize;
        std::fs::write(&file, flipped(&archive, index_at - 30)).unwrap();
        let unpack = Unpack::new();
        let opened = unpack.open(Some(&file)).unwrap();
        unpack.list_index(&opened, &mut Paths::default()).unwrap();
        assert!(unpack.list(&opened, &mut Paths::default()).is_err());
    }
}
