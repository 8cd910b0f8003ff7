//! Rewrites an archive (version 1 or 2) as version 2 with `format::rewrite_v2`, for the
//! benchmarks until `barge pack` writes version 2: `to_v2 IN OUT [ZSTD_LEVEL]`. Files above
//! `format::CHUNK` become EXTFILEs of CHUNK-sized extents.

use std::io::BufWriter;

use barge::format::{rewrite_v2, SegmentEncoder};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let input = std::fs::read(&args[1]).expect("read IN");
    let out = BufWriter::with_capacity(1 << 20, std::fs::File::create(&args[2]).expect("OUT"));
    let mut encoder = SegmentEncoder::new(out).expect("header");
    if let Some(level) = args.get(3) {
        encoder = encoder.zstd(level.parse().expect("a zstd level"));
    }
    rewrite_v2(&input, encoder).expect("rewrite IN as OUT");
}
