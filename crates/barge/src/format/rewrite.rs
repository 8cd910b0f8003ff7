//! Rewriting an archive (version 1 or 2, in memory) as version 2 with a [`SegmentEncoder`]:
//! the benchmarks' and tests' version 2 archives until `barge pack` writes them. Segments
//! are cut where the input's are and where the encoder's target says; a file above
//! [`CHUNK`] becomes an `EXTFILE` of `CHUNK`-sized extents, a sparse file stays one.

use std::io::Write;

use super::{decode_all, EncodeError, Event, Limits, SegmentEncoder, CHUNK};
use crate::error::Error;
use crate::tree::{Entry, Kind, Meta, Xattrs};

/// A file's own: name, metadata, extended attributes, link id.
struct File {
    name: Vec<u8>,
    meta: Meta,
    xattrs: Vec<u8>,
    link_id: Option<u64>,
}

/// A file's or extent's data gathered until whole.
struct Gathering {
    /// The file (none for an extent).
    file: Option<File>,
    /// An extent's offset.
    at: u64,
    size: u64,
    data: Vec<u8>,
}

/// Writes the archive `input` with `encoder` and returns the encoder's writer.
pub fn rewrite_v2<W: Write>(input: &[u8], mut encoder: SegmentEncoder<W>) -> Result<W, Error> {
    let mut segments = 0;
    let mut pending: Option<Gathering> = None;
    let mut failed: Option<EncodeError> = None;
    decode_all(input, Limits::default(), |decoder, event| {
        let (user, group) = decoder.owner_names();
        encoder.owner_names(user, group);
        let written = match event {
            Event::Segment => {
                segments += 1;
                match segments {
                    1 => Ok(()),
                    _ => encoder.cut(),
                }
            }
            Event::Root { meta, xattrs } => encoder.root(meta, xattrs),
            Event::Dir(entry) => encoder.dir_with(&entry),
            Event::Pop => encoder.pop(),
            Event::File { entry, size, data } => {
                let file = File {
                    name: entry.name.to_vec(),
                    meta: entry.meta,
                    xattrs: entry.xattrs.0.to_vec(),
                    link_id: entry.link_id,
                };
                pending = Some(Gathering {
                    file: Some(file),
                    at: 0,
                    size,
                    data: data.to_vec(),
                });
                Ok(())
            }
            Event::SparseFile {
                entry,
                size,
                extents,
            } => encoder.ext_file(&entry, size, extents),
            Event::Extent { at, len, data } => {
                pending = Some(Gathering {
                    file: None,
                    at,
                    size: len,
                    data: data.to_vec(),
                });
                Ok(())
            }
            Event::Data(data) => {
                let gathering = pending.as_mut().expect("data of a file or extent");
                gathering.data.extend_from_slice(data);
                Ok(())
            }
            Event::Symlink { entry, target } => encoder.symlink(&entry, target),
            Event::HardLink { entry, target } => encoder.hard_link(entry.name, target),
            Event::Special { entry, device } => encoder.special(&entry, device),
            _ => Ok(()),
        };
        let whole = pending.take_if(|g| g.data.len() as u64 == g.size);
        let written = written.and_then(|()| match whole {
            Some(gathered) => put(&mut encoder, gathered),
            None => Ok(()),
        });
        if let Err(e) = written {
            failed.get_or_insert(e);
        }
        Ok(())
    })?;
    match failed {
        Some(e) => Err(encoded(e)),
        None => encoder.finish().map_err(encoded),
    }
}

/// Writes a whole file (a `FILE`, or above `CHUNK` an `EXTFILE` of chunks) or extent.
fn put<W: Write>(encoder: &mut SegmentEncoder<W>, gathered: Gathering) -> Result<(), EncodeError> {
    let Some(file) = gathered.file else {
        return encoder.extent(gathered.at, &gathered.data);
    };
    let mut entry = Entry::new(&file.name, Kind::File, file.meta);
    (entry.xattrs, entry.link_id) = (Xattrs(&file.xattrs), file.link_id);
    if gathered.size <= CHUNK {
        return encoder.file_with(&entry, &gathered.data);
    }
    let chunks = gathered.data.chunks(CHUNK as usize);
    encoder.ext_file(&entry, gathered.size, chunks.len() as u32)?;
    for (i, chunk) in chunks.enumerate() {
        encoder.extent(i as u64 * CHUNK, chunk)?;
    }
    Ok(())
}

/// An encoder's error as the library's.
fn encoded(e: EncodeError) -> Error {
    match e {
        EncodeError::Format(kind) => Error::Format {
            offset: 0,
            path: Default::default(),
            kind,
        },
        EncodeError::Io(e) => Error::os("write the archive", Default::default(), e),
    }
}
