//! Helpers shared by the library test binaries: the committed vectors, and decoding an
//! input whole (`decode_all`) or fed to the streaming `Decoder` in chunks, both reduced to
//! the same comparable outcome.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};

use barge::format::{decode_all, Decoder, Event, Limits, Step};
use barge::{Error, TreePath};

/// One decoded entry: full path bytes, kind, effective mode and content.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Names from the archive root joined with `/`.
    pub path: Vec<u8>,
    /// A directory (else a regular file).
    pub dir: bool,
    /// Permission bits as the decoder reports them.
    pub mode: u32,
    /// File content (empty for dirs).
    pub data: Vec<u8>,
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

fn record(entries: &mut Vec<Entry>, decoder: &Decoder, event: Event<'_>) {
    match event {
        Event::Dir { mode, .. } => entries.push(Entry {
            path: TreePath::join(decoder.dir_names(), b"").0,
            dir: true,
            mode,
            data: Vec::new(),
        }),
        Event::File {
            name, mode, data, ..
        } => entries.push(Entry {
            path: TreePath::join(decoder.dir_names(), name).0,
            dir: false,
            mode,
            data: data.to_vec(),
        }),
        Event::Data(data) => entries
            .last_mut()
            .expect("data follows a file")
            .data
            .extend_from_slice(data),
        Event::Pop | Event::End { .. } | Event::Padding => {}
        other => panic!("an event this test does not know: {other:?}"),
    }
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
