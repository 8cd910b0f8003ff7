//! Helpers shared by the library test binaries: the committed vectors, and decoding an
//! input whole (`decode_all`) or fed to the streaming `Decoder` in chunks, both reduced to
//! the same comparable outcome.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use barge::format::{decode_all, inflate, Decoder, Event, FormatError, Limits, Step};
use barge::tree::{self, Kind};
use barge::{Error, TreePath};

/// One decoded entry with everything the decoder reports about it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// Names from the archive root joined with `/`.
    pub path: Vec<u8>,
    /// `dir`, `file`, `symlink`, `hardlink`, `fifo`, `char` or `block` (the vectors' names).
    pub kind: &'static str,
    /// All twelve mode bits as the decoder reports them (none for symlinks and hard links).
    pub mode: Option<u32>,
    /// Modification time (seconds, nanoseconds).
    pub mtime: Option<(i64, u32)>,
    /// Owner (uid, gid).
    pub owner: Option<(u32, u32)>,
    /// Extended attributes (name, value), in archive order.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// A file that hard links may name (its link id is its own entry number).
    pub linked: bool,
    /// File content.
    pub data: Vec<u8>,
    /// Symlink target.
    pub target: Vec<u8>,
    /// Hard link: the entry number of its file.
    pub link_index: Option<u64>,
    /// Character or block device: (major, minor).
    pub device: Option<(u32, u32)>,
    /// Version 2: the owner's user and group names (empty when none).
    pub names: (Vec<u8>, Vec<u8>),
    /// Version 2 sparse file: its size and extents (offset, data) instead of `data`.
    pub size: Option<u64>,
    pub extents: Vec<(u64, Vec<u8>)>,
}

/// What decoding produced: the entries, or the stable error code and offset.
pub type Outcome = Result<Vec<Entry>, (&'static str, u64)>;

/// The `.barge` files of `testdata/vectors/{kind}`, sorted by name.
pub fn vector_files(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors")
        .join(kind);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "barge"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no vectors in {}", dir.display());
    files
}

/// The vectors' name of a kind.
fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Dir => "dir",
        Kind::File => "file",
        Kind::Symlink => "symlink",
        Kind::Fifo => "fifo",
        Kind::CharDevice => "char",
        Kind::BlockDevice => "block",
        other => panic!("the decoder reported {other:?}"),
    }
}

/// The fields of `entry` (named `name` in the decoder's current directory) every kind has.
fn common(decoder: &Decoder, entry: &tree::Entry<'_>, number: u64) -> Entry {
    let meta = entry.meta;
    Entry {
        path: TreePath::join(decoder.dir_names(), entry.name).0,
        kind: kind_name(entry.kind),
        mode: Some(meta.mode),
        mtime: meta.mtime.map(|t| (t.sec, t.nsec)),
        owner: meta.owner.map(|o| (o.uid, o.gid)),
        xattrs: (entry.xattrs.iter())
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect(),
        linked: entry.link_id.is_some(),
        ..Entry::default()
    }
    .checked_link(entry.link_id, number)
}

impl Entry {
    /// Checks that a linked file's id is its own entry number.
    fn checked_link(self, link_id: Option<u64>, number: u64) -> Entry {
        assert!(
            link_id.is_none_or(|id| id == number),
            "link id {link_id:?} on entry {number}"
        );
        self
    }
}

fn record(entries: &mut Vec<Entry>, decoder: &Decoder, event: Event<'_>) {
    // A root record can only come first.
    let root = entries.first().is_some_and(|e| e.kind == "root");
    let number = (entries.len() - usize::from(root)) as u64;
    let names = decoder.owner_names();
    let names = (names.0.to_vec(), names.1.to_vec());
    let entry = match event {
        Event::Root { meta, xattrs } => Entry {
            kind: "root",
            mode: Some(meta.mode),
            mtime: meta.mtime.map(|t| (t.sec, t.nsec)),
            owner: meta.owner.map(|o| (o.uid, o.gid)),
            xattrs: (xattrs.iter())
                .map(|(n, v)| (n.to_vec(), v.to_vec()))
                .collect(),
            ..Entry::default()
        },
        Event::SparseFile { entry, size, .. } => Entry {
            size: Some(size),
            ..common(decoder, &entry, number)
        },
        Event::Extent { at, data, .. } => {
            let file = entries.last_mut().expect("an extent follows a sparse file");
            return file.extents.push((at, data.to_vec()));
        }
        Event::Dir(dir) => Entry {
            // The decoder has entered it already.
            path: TreePath::join(decoder.dir_names(), b"").0,
            ..common(decoder, &dir, number)
        },
        Event::File { entry, data, .. } => Entry {
            data: data.to_vec(),
            ..common(decoder, &entry, number)
        },
        Event::Symlink { entry, target } => Entry {
            mode: None,
            target: target.to_vec(),
            ..common(decoder, &entry, number)
        },
        Event::HardLink { entry, target } => Entry {
            kind: "hardlink",
            mode: None,
            link_index: Some(target),
            ..common(decoder, &entry, number)
        },
        Event::Special { entry, device } => Entry {
            device: (entry.kind != Kind::Fifo).then_some((device.major, device.minor)),
            ..common(decoder, &entry, number)
        },
        Event::Data(data) => {
            let file = entries.last_mut().expect("data follows a file");
            return match file.extents.last_mut() {
                Some((_, extent)) => extent.extend_from_slice(data),
                None => file.data.extend_from_slice(data),
            };
        }
        Event::Pop | Event::End { .. } | Event::Padding | Event::Segment | Event::Index(_) => {
            return
        }
        other => panic!("an event this test does not know: {other:?}"),
    };
    let names = if entry.owner.is_some() {
        names
    } else {
        Default::default()
    };
    entries.push(Entry { names, ..entry });
}

/// The stable code and offset of a decoder error; any other error kind is a bug.
pub fn code_offset(error: Error) -> (&'static str, u64) {
    match error {
        Error::Format { offset, kind, .. } => (kind.code(), offset),
        other => panic!("the pure decoder returned a non-format error: {other}"),
    }
}

/// Decodes `input` as one complete buffer with `decode_all`.
pub fn decode_whole(input: &[u8], limits: Limits) -> Outcome {
    let mut entries = Vec::new();
    decode_all(input, limits, |d, e| {
        record(&mut entries, d, e);
        Ok(())
    })
    .map_err(code_offset)?;
    Ok(entries)
}

/// Decodes `input` with the streaming decoder, handing it a new chunk of
/// `chunk()` bytes (at least 1) each time it needs more, as a pipe reader would.
pub fn decode_chunked(input: &[u8], limits: Limits, chunk: impl FnMut() -> usize) -> Outcome {
    decode_fed(input, limits, chunk, Decoder::next)
}

/// Like [`decode_chunked`] with `Decoder::next_whole`, which waits for whole files.
pub fn decode_chunked_whole(input: &[u8], limits: Limits, chunk: impl FnMut() -> usize) -> Outcome {
    decode_fed(input, limits, chunk, Decoder::next_whole)
}

type Next = for<'a> fn(&mut Decoder, &'a [u8], bool) -> Result<Step<'a>, Error>;

fn decode_fed(
    input: &[u8],
    limits: Limits,
    mut chunk: impl FnMut() -> usize,
    next: Next,
) -> Outcome {
    let mut decoder = Decoder::new(limits);
    let mut entries = Vec::new();
    let (mut buf, mut start, mut fed) = (Vec::new(), 0, 0);
    loop {
        let eof = fed == input.len();
        match next(&mut decoder, &buf[start..], eof).map_err(code_offset)? {
            Step::Done => return Ok(entries),
            Step::Event(event, n) => {
                start += n;
                record(&mut entries, &decoder, event);
            }
            Step::Inflate {
                consumed,
                stored,
                body,
            } => {
                // The frame's bytes, from what was fed and the rest of the input.
                start += consumed;
                let stored = stored as usize;
                while buf.len() - start < stored && fed < input.len() {
                    let n = chunk().clamp(1, input.len() - fed);
                    buf.extend_from_slice(&input[fed..fed + n]);
                    fed += n;
                }
                let Some(frame) = buf.get(start..start + stored) else {
                    return Err(code_offset(decoder.frame_error(FormatError::Truncated)));
                };
                let mut inflated = Vec::new();
                let made = inflate(frame, body, &mut inflated);
                made.map_err(|kind| code_offset(decoder.frame_error(kind)))?;
                start += stored;
                let mut pos = 0;
                while decoder.inflating() {
                    let step = next(&mut decoder, &inflated[pos..], true).map_err(code_offset)?;
                    let Step::Event(event, n) = step else {
                        panic!("a whole body decodes to events, not {step:?}")
                    };
                    pos += n;
                    record(&mut entries, &decoder, event);
                }
            }
            Step::NeedMore => {
                assert!(!eof, "decoder asked for more input after end of input");
                let n = chunk().clamp(1, input.len() - fed);
                buf.drain(..start);
                start = 0;
                buf.extend_from_slice(&input[fed..fed + n]);
                fed += n;
            }
        }
    }
}
