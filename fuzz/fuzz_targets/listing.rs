//! Fuzzes the update listing's reader, which reads what a receiver sends: any input read
//! with the default limits and with tight ones must give a listing or an error, never a
//! panic, a hang or an allocation without bound; a listing read must write back to bytes
//! that read as the same listing.

#![no_main]

use barge::listing::{Listing, ListingLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    // Derived from the length, as the decoder's target does.
    let seed = input.len();
    let tight = ListingLimits {
        max_entries: (seed % 7) as u64,
        max_path: seed % 13,
        max_bytes: (seed % 256) as u64,
    };
    for limits in [ListingLimits::default(), tight] {
        if let Ok(listing) = Listing::read_from(input, limits) {
            let mut again = Vec::new();
            listing.write_to(&mut again).expect("a Vec takes every write");
            let read = Listing::read_from(&again, ListingLimits::default());
            assert_eq!(read.expect("what was read reads again"), listing);
        }
    }
});
