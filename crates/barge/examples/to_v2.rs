//! Rewrites an archive (version 1 or 2) as version 2 with `format::SegmentEncoder`, for the
//! benchmarks until `barge pack` writes version 2: `to_v2 IN OUT [ZSTD_LEVEL]`. Files above
//! `format::CHUNK` become EXTFILEs of CHUNK-sized extents.

use std::io::BufWriter;

use barge::format::{decode_all, Event, Limits, SegmentEncoder, CHUNK};
use barge::tree::{Entry, Kind, Xattrs};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let input = std::fs::read(&args[1]).expect("read IN");
    let out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&args[2]).expect("OUT"));
    let mut encoder = SegmentEncoder::new(out).expect("header");
    if let Some(level) = args.get(3) {
        encoder = encoder.zstd(level.parse().expect("a zstd level"));
    }
    // The file whose data is being gathered: name, meta, xattrs, link id, size, data.
    let mut file = None;
    decode_all(&input, Limits::default(), |_, event| {
        match event {
            Event::Dir(entry) => encoder.dir_with(&entry).unwrap(),
            Event::Pop => encoder.pop().unwrap(),
            Event::File { entry, size, data } => {
                let owned = (entry.name.to_vec(), entry.meta, entry.xattrs.0.to_vec());
                file = Some((owned, entry.link_id, size, data.to_vec()));
            }
            Event::Data(data) => file.as_mut().expect("a file").3.extend_from_slice(data),
            Event::Symlink { entry, target } => encoder.symlink(&entry, target).unwrap(),
            Event::HardLink { entry, target } => encoder.hard_link(entry.name, target).unwrap(),
            Event::Special { entry, device } => encoder.special(&entry, device).unwrap(),
            _ => {}
        }
        if let Some(((name, meta, xattrs), link_id, size, data)) =
            file.take_if(|f| f.3.len() as u64 == f.2)
        {
            let mut entry = Entry::new(&name, Kind::File, meta);
            (entry.xattrs, entry.link_id) = (Xattrs(&xattrs), link_id);
            if size <= CHUNK {
                encoder.file_with(&entry, &data).unwrap();
            } else {
                let chunks = data.chunks(CHUNK as usize);
                encoder.ext_file(&entry, size, chunks.len() as u32).unwrap();
                for (i, chunk) in data.chunks(CHUNK as usize).enumerate() {
                    encoder.extent(i as u64 * CHUNK, chunk).unwrap();
                }
            }
        }
        Ok(())
    })
    .expect("decode IN");
    encoder.finish().expect("write OUT");
}
