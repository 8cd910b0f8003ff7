//! Stable-toolchain mutation testing of the decoder: thousands of random mutations of every
//! vector (bit flips, interesting bytes, inserts, deletes, truncation, repeats, splices
//! between vectors) go through `decode_all` and through the streaming `Decoder` fed random
//! chunk sizes. Neither may panic, both must agree on the outcome, and a decode may never
//! allocate more than the input justifies (a counting global allocator measures it). And
//! mutated version 2 indexes (their digests made right) through a reader that seeks.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use barge::format::{decode_all, Limits};
use support::{decode_chunked, decode_chunked_whole, decode_whole, vector_files};

/// Counts the bytes live on the current thread and their peak.
struct Counting;

thread_local! {
    static LIVE: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn grow(by: usize) {
    let live = LIVE.with(|l| l.get()) + by;
    LIVE.with(|l| l.set(live));
    PEAK.with(|p| p.set(p.get().max(live)));
}

fn shrink(by: usize) {
    LIVE.with(|l| l.set(l.get().saturating_sub(by)));
}

// SAFETY: forwards to the system allocator; the counters are plain thread-local cells.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|a| a.set(a.get() + 1));
        grow(layout.size());
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrink(layout.size());
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // Old and new block coexist during a moving realloc: count the worst case.
        grow(new_size);
        shrink(layout.size());
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Most bytes a decode may have allocated at once for an input of `len` bytes.
fn allowance(len: usize) -> usize {
    64 * len + 64 * 1024
}

/// Peak bytes allocated (above what was live before) while `decode_all` runs on `input`.
fn peak_allocation(input: &[u8], limits: Limits) -> usize {
    peak_and_count(input, limits).0
}

/// Peak bytes allocated and the number of allocations while `decode_all` runs on `input`.
fn peak_and_count(input: &[u8], limits: Limits) -> (usize, usize) {
    let base = LIVE.with(|l| l.get());
    PEAK.with(|p| p.set(base));
    let count = ALLOCATIONS.with(|a| a.get());
    let _ = decode_all(input, limits, |_, _| Ok(()));
    let peak = PEAK.with(|p| p.get()) - base;
    (peak, ALLOCATIONS.with(|a| a.get()) - count)
}

/// xorshift64*: small, fixed-seed, good enough to pick mutations.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform-ish in `0..n` (`n` > 0).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Bytes that mean something to the decoder: tags, NUL, '/', '.', extremes.
const INTERESTING: [u8; 10] = [0, 1, 2, 3, 4, 5, 6, b'/', b'.', 0xff];

/// Applies one to three random mutations to `input`; `other` is another vector to splice in.
fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.below(3) {
        let at = rng.below(out.len() + 1);
        match rng.below(8) {
            0 if at < out.len() => out[at] ^= 1 << rng.below(8),
            1 if at < out.len() => out[at] = INTERESTING[rng.below(INTERESTING.len())],
            2 => out.insert(at, rng.next() as u8),
            3 if at < out.len() => {
                let end = (at + 1 + rng.below(16)).min(out.len());
                out.drain(at..end);
            }
            4 => out.truncate(at),
            5 if at < out.len() => {
                let end = (at + 1 + rng.below(32)).min(out.len());
                let repeat = out[at..end].to_vec();
                for _ in 0..1 + rng.below(8) {
                    out.splice(at..at, repeat.iter().copied());
                }
            }
            6 => {
                let from = rng.below(other.len() + 1);
                out.truncate(at);
                out.extend_from_slice(&other[from..]);
            }
            7 if at + 4 <= out.len() => {
                let big = [u32::MAX, 1 << 31, 1 << 20, 0][rng.below(4)];
                out[at..at + 4].copy_from_slice(&big.to_le_bytes());
            }
            _ => out.push(INTERESTING[rng.below(INTERESTING.len())]),
        }
    }
    out
}

/// Limits the mutants are decoded with: mostly the defaults, sometimes tight ones, so the
/// limit checks are exercised too.
fn limits(rng: &mut Rng) -> Limits {
    match rng.below(4) {
        0 => Limits {
            max_depth: rng.below(4),
            max_entries: Some(rng.below(5) as u64),
            max_bytes: Some(rng.below(100) as u64),
            max_space: Some(rng.below(8) as u64 * 4096),
            zero_padding: rng.below(2) == 0,
        },
        1 => Limits {
            zero_padding: true,
            ..Limits::default()
        },
        _ => Limits::default(),
    }
}

#[test]
fn mutated_vectors_never_panic_agree_streamed_and_stay_within_memory() {
    let vectors: Vec<Vec<u8>> = ["valid", "invalid"]
        .iter()
        .flat_map(|kind| vector_files(kind))
        .map(|path| std::fs::read(path).unwrap())
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut mutants, mut accepted, mut worst) = (0, 0, (0.0f64, 0));
    for (i, vector) in vectors.iter().enumerate() {
        for _ in 0..120 {
            let other = &vectors[rng.below(vectors.len())];
            let input = mutate(&mut rng, vector, other);
            let limits = limits(&mut rng);
            let whole = decode_whole(&input, limits);
            let seed = rng.next();
            let mut chunks = Rng(seed | 1);
            let streamed = decode_chunked(&input, limits, || 1 + chunks.below(64));
            assert_eq!(
                whole, streamed,
                "vector {i}: whole and streamed decoding disagree on {input:02x?}"
            );
            let whole_files = decode_chunked_whole(&input, limits, || 1 + chunks.below(64));
            assert_eq!(
                whole, whole_files,
                "vector {i}: whole and streamed whole-file decoding disagree on {input:02x?}"
            );
            let peak = peak_allocation(&input, limits);
            assert!(
                peak <= allowance(input.len()),
                "vector {i}: decoding {} bytes allocated {peak} bytes",
                input.len()
            );
            let ratio = peak as f64 / (input.len().max(1)) as f64;
            if ratio > worst.0 {
                worst = (ratio, input.len());
            }
            mutants += 1;
            accepted += usize::from(whole.is_ok());
        }
    }
    assert!(mutants >= 10_000, "only {mutants} mutants");
    // Some mutants must still be valid archives, or the mutations only test the header check.
    assert!(
        accepted > 100,
        "only {accepted} of {mutants} mutants decoded"
    );
    println!(
        "{mutants} mutants, {accepted} valid, worst peak {:.1} bytes per input byte (at {} bytes)",
        worst.0, worst.1
    );
}

#[test]
fn deep_nesting_allocates_in_proportion_to_input() {
    // 1024 nested dirs (the default limit), then 100,000 more that must be refused.
    for depth in [1024usize, 100_000] {
        let mut input = barge::format::HEADER.to_vec();
        for _ in 0..depth {
            input.extend_from_slice(b"\x02d\x00");
        }
        let peak = peak_allocation(&input, Limits::default());
        assert!(
            peak <= allowance(input.len()),
            "depth {depth}: {peak} bytes"
        );
        let outcome = decode_whole(&input, Limits::default());
        let expected = if depth > 1024 {
            "too-deep"
        } else {
            "truncated"
        };
        assert_eq!(outcome.unwrap_err().0, expected);
    }
}

/// 200,000 unique short names in shuffled order (the red team's 12 MB stream of short
/// unsorted names took 76 MB): the names a directory remembers cost a few times their
/// messages, and not an allocation each (with its allocator overhead).
#[test]
fn many_unsorted_short_names_allocate_a_few_times_the_input() {
    let mut rng = Rng(0x5eed);
    let mut names: Vec<u32> = (0..200_000).collect();
    for i in (1..names.len()).rev() {
        names.swap(i, rng.below(i + 1));
    }
    let mut input = barge::format::HEADER.to_vec();
    for n in &names {
        input.push(barge::format::TAG_FILE);
        input.extend_from_slice(format!("{n:04x}").as_bytes());
        input.extend_from_slice(&[0, 0, 0, 0, 0]);
    }
    input.push(barge::format::TAG_END);
    input.extend_from_slice(&(names.len() as u64).to_le_bytes());
    assert_eq!(decode_whole(&input, Limits::default()).map(|_| ()), Ok(()));
    let (peak, allocations) = peak_and_count(&input, Limits::default());
    assert!(
        peak <= 4 * input.len(),
        "{peak} bytes allocated for {} bytes of input",
        input.len()
    );
    assert!(
        allocations < 1000,
        "{allocations} allocations for 200,000 names"
    );
}

/// A version 2 archive of many entries in many segments: directories, files, an EXTFILE
/// whose extents span segments, a hard link, a symlink.
fn many_segments() -> Vec<u8> {
    use barge::tree::{Entry, Kind, Meta};
    let meta = Meta::with_mode(0o644);
    let mut encoder = barge::format::SegmentEncoder::new(Vec::new())
        .unwrap()
        .segment_target(64);
    encoder.dir_with(&Entry::dir(b"d", meta)).unwrap();
    let mut linked = Entry::file(b"f", meta);
    linked.link_id = Some(1);
    encoder.file_with(&linked, &[b'f'; 80]).unwrap();
    encoder.ext_file(&Entry::file(b"g", meta), 400, 3).unwrap();
    for at in [0, 150, 300] {
        encoder.extent(at, &[b'g'; 70]).unwrap();
    }
    encoder.pop().unwrap();
    encoder.hard_link(b"h", 1).unwrap();
    encoder
        .symlink(&Entry::new(b"i", Kind::Symlink, meta), b"d")
        .unwrap();
    for i in 0..40 {
        let name = format!("n{i:02}");
        encoder
            .file_with(&Entry::file(name.as_bytes(), meta), &[b'n'; 30])
            .unwrap();
    }
    encoder.finish().unwrap()
}

/// `archive` (raw index) with its index body passed through `edit`, the frame's lengths and
/// digest and the footer made to fit it (its counts possibly edited too), so that the
/// checks behind the digests are what a mutant meets.
fn reindexed(archive: &[u8], rng: &mut Rng) -> Vec<u8> {
    let footer_at = archive.len() - 37;
    let footer = &archive[footer_at..];
    let index_at = u64::from_le_bytes(footer[13..21].try_into().unwrap()) as usize;
    let body = &archive[index_at + 18..footer_at];
    let other = body.to_vec();
    let body = mutate(rng, body, &other);
    let mut out = archive[..index_at].to_vec();
    out.extend_from_slice(&[0x21, 0]);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&barge::format::digest(&body).to_le_bytes());
    out.extend_from_slice(&body);
    let mut tail = vec![0];
    tail.extend_from_slice(&footer[1..13]);
    if rng.below(8) == 0 {
        // The counts the body states, so that a mutant's counts can agree.
        tail[1..9].copy_from_slice(body.get(4..12).unwrap_or(&[0; 8]));
        tail[9..13].copy_from_slice(body.get(..4).unwrap_or(&[0; 4]));
    }
    tail.extend_from_slice(&(index_at as u64).to_le_bytes());
    let check = barge::format::digest(&tail);
    tail.extend_from_slice(&check.to_le_bytes());
    tail.extend_from_slice(&barge::format::HEADER_V2);
    out.extend_from_slice(&tail);
    out
}

/// Mutated indexes (their digests made right) read by a reader that seeks: never a panic or
/// a hang; an index that passes is consistent (every row found by its path at its number),
/// and `cat` of its paths through it ends, in content or an error, as `cat` of the paths of
/// the archive before the mutation does (which checks only the rows it looks up).
#[test]
fn mutated_v2_indexes_never_panic_a_reader_that_seeks() {
    use barge::format::index::{Footer, Index};
    let mut archives: Vec<Vec<u8>> = vector_files("v2/valid")
        .into_iter()
        .map(|path| std::fs::read(path).unwrap())
        .filter(|bytes| !bytes.is_empty())
        .collect();
    archives.push(many_segments());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.barge");
    let mut rng = Rng(0x51ee_7f00_d5ee_d123);
    let (mut mutants, mut passed) = (0, 0);
    let cat = |input: &[u8], paths: &[String]| {
        std::fs::write(&file, input).unwrap();
        let select = barge::Select::new(paths, barge::exclude::Exclude::default());
        let unpack = barge::unpack::Unpack::new().select(select);
        if let Ok(opened) = unpack.open(Some(&file)) {
            let _ = unpack.cat(&opened, &mut barge::tree::Recording::default());
        }
    };
    for archive in &archives {
        let tail = archive[archive.len() - 37..].try_into().unwrap();
        let footer = Footer::find(tail, archive.len() as u64).unwrap().unwrap();
        let frame = archive[footer.index_at as usize..footer.at as usize].to_vec();
        let mut before = Vec::new();
        let index = Index::read(&footer, frame).unwrap();
        let mut rows = index.rows();
        while let Some(row) = rows.next_row() {
            before.push(String::from_utf8_lossy(row.path).into_owned());
        }
        for _ in 0..150 {
            let input = reindexed(archive, &mut rng);
            mutants += 1;
            let at = rng.below(before.len().max(1));
            let picked: Vec<String> = before.iter().skip(at).take(2).cloned().collect();
            cat(&input, &picked);
            let tail = input[input.len() - 37..].try_into().unwrap();
            let Ok(Some(footer)) = Footer::find(tail, input.len() as u64) else {
                continue;
            };
            let frame = input[footer.index_at as usize..footer.at as usize].to_vec();
            let Ok(index) = Index::read(&footer, frame) else {
                continue;
            };
            passed += 1;
            let mut paths = Vec::new();
            let mut rows = index.rows();
            while let Some(row) = rows.next_row() {
                let found = index.find(row.path).map(|f| f.number);
                assert_eq!(found, Some(row.number), "{input:02x?}");
                paths.push(String::from_utf8_lossy(row.path).into_owned());
            }
            index.events(|_| Ok::<_, ()>(())).unwrap();
            cat(&input, &paths[..paths.len().min(3)]);
        }
    }
    assert!(mutants >= 2_000, "only {mutants} mutants");
    assert!(
        passed > 20,
        "only {passed} of {mutants} mutated indexes passed"
    );
    println!("{mutants} mutated indexes, {passed} passed the checks");
}
