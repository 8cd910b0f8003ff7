//! Fuzzes the pure decoder: any input, decoded whole by `decode_all` and fed to the
//! streaming `Decoder` in varying chunk sizes, must give the same outcome (the same entries,
//! or the same error code at the same offset), with the default limits and with tight ones,
//! and never panic, hang or allocate without bound; and its footer and index, read as a
//! reader that seeks reads them, never panic either.

#![no_main]

use barge::format::index::{Footer, Index};
use barge::format::{Limits, FOOTER};
use libfuzzer_sys::fuzz_target;

// The same whole-vs-chunked comparison the stable mutation test uses.
#[path = "../../crates/barge/tests/support/mod.rs"]
mod support;

fuzz_target!(|input: &[u8]| {
    // Derived from the length, so the committed vectors work unchanged as a seed corpus.
    let seed = input.len();
    let tight = Limits {
        max_depth: seed % 5,
        max_entries: Some((seed % 7) as u64),
        max_bytes: Some((seed % 64) as u64),
        max_space: Some((seed % 8) as u64 * 4096),
        zero_padding: seed % 2 == 0,
    };
    for limits in [Limits::default(), tight] {
        let whole = support::decode_whole(input, limits);
        let mut state = seed;
        let chunked = support::decode_chunked(input, limits, || {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            1 + (state >> 33) % 97
        });
        assert_eq!(whole, chunked, "whole and chunked decoding disagree");
    }
    // A reader that seeks: the footer and index alone; an index that passes its checks
    // finds each of its rows by its path.
    let Some(tail) = input.len().checked_sub(FOOTER).map(|at| &input[at..]) else {
        return;
    };
    let tail = tail.try_into().expect("a footer's length");
    if let Ok(Some(footer)) = Footer::find(tail, input.len() as u64) {
        let frame = input[footer.index_at as usize..footer.at as usize].to_vec();
        if let Ok(index) = Index::read(&footer, frame) {
            let mut rows = index.rows();
            while let Some(row) = rows.next_row() {
                assert_eq!(index.find(row.path).map(|f| f.number), Some(row.number));
            }
        }
    }
});
