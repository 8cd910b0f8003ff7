//! The committed vectors (testdata/vectors) against the library decoder and encoder: every
//! valid vector decodes to exactly its `.json` tree and re-encodes byte for byte; every
//! invalid one fails with its `.json` error code at its offset. Each is decoded both whole
//! and fed one byte at a time to the streaming decoder.

mod support;

use std::path::Path;

use barge::format::index::{Footer, Index};
use barge::format::{rewrite_v2, Encoder, Limits, SegmentEncoder, FOOTER};
use barge::tree::{self, Device, Kind, Meta, Owner, Timestamp, Xattrs};
use serde_json::Value;
use support::{decode_chunked, decode_whole, vector_files, Entry, Outcome};

fn json_of(barge: &Path) -> Value {
    let path = barge.with_extension("json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path:?}: {e}"))
}

fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex"))
        .collect()
}

/// The limits of a vector's optional `options` object (defaults otherwise).
fn limits_of(json: &Value) -> Limits {
    let option = |key| json["options"][key].as_u64();
    let mut limits = Limits::default();
    if let Some(depth) = option("max_depth") {
        limits.max_depth = depth as usize;
    }
    limits.max_entries = option("max_entries");
    limits.max_bytes = option("max_bytes");
    limits.max_space = option("max_space");
    limits
}

/// The keys an entry of a valid vector may have (docs in testdata/vectors/README.md).
const ENTRY_KEYS: [&str; 16] = [
    "size",
    "extents",
    "path",
    "path_hex",
    "kind",
    "mode",
    "perm",
    "mtime",
    "owner",
    "xattrs",
    "linked",
    "data_hex",
    "target_hex",
    "link_index",
    "major",
    "minor",
];

/// The vectors' kind names, as the support module spells them.
const KINDS: [&str; 7] = [
    "dir", "file", "symlink", "hardlink", "fifo", "char", "block",
];

/// The entries a valid vector's `.json` lists.
fn expected_entries(json: &Value) -> Vec<Entry> {
    let entries = json["entries"].as_array().expect("entries array");
    entries.iter().map(expected_entry).collect()
}

fn expected_entry(e: &Value) -> Entry {
    for key in e.as_object().expect("an entry is an object").keys() {
        assert!(
            ENTRY_KEYS.contains(&key.as_str()),
            "unknown key {key} in {e}"
        );
    }
    let kind = KINDS
        .into_iter()
        .find(|k| e["kind"] == *k)
        .unwrap_or_else(|| panic!("kind of {e}"));
    let number = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("a number in {e}"));
    let mode = e.get("mode").map(|m| number(m) as u32);
    if let Some(perm) = e.get("perm") {
        assert_eq!(
            Some(number(perm) as u32),
            mode,
            "perm and mode differ in {e}"
        );
    }
    let bytes = |key: &str| {
        e.get(key)
            .map_or(Vec::new(), |v| hex(v.as_str().expect(key)))
    };
    let xattrs = e.get("xattrs").map_or(Vec::new(), |list| {
        let list = list.as_array().expect("xattrs array");
        let hex_of = |x: &Value, key: &str| hex(x[key].as_str().expect(key));
        list.iter()
            .map(|x| (hex_of(x, "name_hex"), hex_of(x, "value_hex")))
            .collect()
    });
    let device = match (e.get("major"), e.get("minor")) {
        (Some(major), Some(minor)) => Some((number(major) as u32, number(minor) as u32)),
        (None, None) => None,
        _ => panic!("major without minor in {e}"),
    };
    Entry {
        path: bytes("path_hex"),
        kind,
        mode,
        mtime: e.get("mtime").map(|t| {
            let sec = t["sec"].as_i64().expect("mtime.sec");
            (sec, number(&t["nsec"]) as u32)
        }),
        owner: (e.get("owner")).map(|o| (number(&o["uid"]) as u32, number(&o["gid"]) as u32)),
        names: e.get("owner").map_or_else(Default::default, |o| {
            let name = |key: &str| {
                o.get(key)
                    .map_or(Vec::new(), |v| hex(v.as_str().expect(key)))
            };
            (name("user_hex"), name("group_hex"))
        }),
        size: e.get("size").map(number),
        extents: e.get("extents").map_or(Vec::new(), |list| {
            let list = list.as_array().expect("extents array");
            let extent = |x: &Value| (number(&x["at"]), hex(x["data_hex"].as_str().expect("data")));
            list.iter().map(extent).collect()
        }),
        xattrs,
        linked: e
            .get("linked")
            .is_some_and(|l| l.as_bool().expect("linked")),
        data: bytes("data_hex"),
        target: bytes("target_hex"),
        link_index: e.get("link_index").map(number),
        device,
    }
}

/// Decodes whole and byte by byte; both must agree.
fn decode_both(input: &[u8], limits: Limits, name: &str) -> Outcome {
    let whole = decode_whole(input, limits);
    let streamed = decode_chunked(input, limits, || 1);
    assert_eq!(
        whole, streamed,
        "{name}: decode_all and 1-byte streaming disagree"
    );
    whole
}

/// Rebuilds the archive from a pre-order entry list with the library encoder (the
/// extended one when `extended`).
fn encode(entries: &[Entry], extended: bool) -> Vec<u8> {
    let mut encoder = match extended {
        true => Encoder::extended(Vec::new()),
        false => Encoder::new(Vec::new()),
    };
    let mut open: Vec<&[u8]> = Vec::new();
    for (number, entry) in entries.iter().enumerate() {
        let (parent, name) = match entry.path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&entry.path[..i], &entry.path[i + 1..]),
            None => (&entry.path[..0], &entry.path[..]),
        };
        while open.last().is_some_and(|dir| *dir != parent) {
            open.pop();
            encoder.pop().unwrap();
        }
        let mut meta = Meta::with_mode(entry.mode.unwrap_or(0));
        meta.mtime = entry.mtime.map(|(sec, nsec)| Timestamp { sec, nsec });
        meta.owner = entry.owner.map(|(uid, gid)| Owner { uid, gid });
        let mut xattrs = Vec::new();
        for (name, value) in &entry.xattrs {
            Xattrs::push(&mut xattrs, name, value);
        }
        let kind = match entry.kind {
            "dir" => Kind::Dir,
            "symlink" => Kind::Symlink,
            "fifo" => Kind::Fifo,
            "char" => Kind::CharDevice,
            "block" => Kind::BlockDevice,
            _ => Kind::File,
        };
        let mut with = tree::Entry::new(name, kind, meta);
        with.xattrs = Xattrs(&xattrs);
        with.link_id = entry.linked.then_some(number as u64);
        let (major, minor) = entry.device.unwrap_or_default();
        match entry.kind {
            "dir" => {
                encoder.dir_with(&with).unwrap();
                open.push(&entry.path);
            }
            "file" => encoder.file_with(&with, &entry.data).unwrap(),
            "symlink" => encoder.symlink(&with, &entry.target).unwrap(),
            "hardlink" => encoder.hard_link(name, entry.link_index.unwrap()).unwrap(),
            _ => encoder.special(&with, Device { major, minor }).unwrap(),
        }
    }
    encoder.finish().unwrap()
}

#[test]
fn valid_vectors_decode_to_their_trees_and_reencode_byte_exactly() {
    for file in vector_files("valid") {
        let name = file.display().to_string();
        let json = json_of(&file);
        let input = std::fs::read(&file).unwrap();
        let entries = expected_entries(&json);
        match decode_both(&input, Limits::default(), &name) {
            Ok(decoded) => assert_eq!(decoded, entries, "{name}: decoded tree differs"),
            Err(e) => panic!("{name}: valid vector fails with {e:?}"),
        }
        let extended = json.get("extended").is_some_and(|x| x == true);
        assert_eq!(
            input[7] == 1,
            extended,
            "{name}: \"extended\" and the header differ"
        );
        assert!(
            encode(&entries, extended) == input,
            "{name}: encoder output differs"
        );
    }
}

/// Every invalid vector in `kind` fails with its code at its offset, whole and streamed.
fn assert_invalid_vectors_fail(kind: &str) {
    for file in vector_files(kind) {
        let name = file.display().to_string();
        let json = json_of(&file);
        let input = std::fs::read(&file).unwrap();
        let code = json["error"].as_str().expect("error");
        let offset = json["offset"].as_u64().expect("offset");
        match decode_both(&input, limits_of(&json), &name) {
            Ok(_) => panic!("{name}: invalid vector decodes without error"),
            Err(got) => assert_eq!(got, (code, offset), "{name}: wrong error"),
        }
    }
}

#[test]
fn invalid_vectors_fail_with_their_code_at_their_offset() {
    assert_invalid_vectors_fail("invalid");
}

#[test]
fn limits_are_what_make_the_limit_vectors_invalid() {
    for file in vector_files("invalid") {
        let json = json_of(&file);
        if json["options"].is_null() || json["error"] == "truncated" {
            continue;
        }
        let input = std::fs::read(&file).unwrap();
        let unlimited = decode_whole(&input, Limits::default());
        assert_ne!(
            unlimited.map_err(|e| e.0),
            Err(json["error"].as_str().unwrap()),
            "{}: fails the same way without its limits",
            file.display()
        );
    }
}

/// A v2 vector's root record as the support module records it (kind "root").
fn expected_root(json: &Value) -> Option<Entry> {
    let root = json.get("root")?;
    let mut fields = root.as_object().expect("root is an object").clone();
    fields.insert("kind".into(), "dir".into());
    let mut entry = expected_entry(&Value::Object(fields));
    entry.kind = "root";
    Some(entry)
}

#[test]
fn v2_valid_vectors_decode_to_their_trees_whole_streamed_and_whole_files() {
    for file in vector_files("v2/valid") {
        let name = file.display().to_string();
        let json = json_of(&file);
        let input = std::fs::read(&file).unwrap();
        let mut entries: Vec<Entry> = expected_root(&json).into_iter().collect();
        entries.extend(expected_entries(&json));
        match decode_both(&input, Limits::default(), &name) {
            Ok(decoded) => assert_eq!(decoded, entries, "{name}: decoded tree differs"),
            Err(e) => panic!("{name}: valid vector fails with {e:?}"),
        }
        let whole = support::decode_chunked_whole(&input, Limits::default(), || 7);
        assert_eq!(
            whole,
            Ok(entries),
            "{name}: next_whole in 7-byte chunks differs"
        );
    }
}

#[test]
fn v2_invalid_vectors_fail_with_their_code_at_their_offset() {
    assert_invalid_vectors_fail("v2/invalid");
}

#[test]
fn v2_valid_vectors_reencode_byte_exactly() {
    for file in vector_files("v2/valid") {
        let name = file.display().to_string();
        if name.contains("zstd") {
            continue; // its frame was written by hand, not by the zstd library
        }
        let input = std::fs::read(&file).unwrap();
        assert!(
            rewrite_v2(&input, SegmentEncoder::new(Vec::new()).unwrap()).unwrap() == input,
            "{name}: encoder output differs"
        );
    }
}

/// What the segment encoder writes, raw or zstd, cut into many small segments (extents
/// across them), decodes to what it was given, whole and streamed.
#[test]
fn segment_encoder_round_trips_raw_and_zstd_in_many_segments() {
    let content: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 251) as u8).collect();
    for level in [None, Some(3)] {
        let mut encoder = SegmentEncoder::new(Vec::new())
            .unwrap()
            .segment_target(1000);
        if let Some(level) = level {
            encoder = encoder.zstd(level);
        }
        encoder
            .root(Meta::with_mode(0o700), Xattrs::default())
            .unwrap();
        encoder
            .dir_with(&tree::Entry::dir(b"d", Meta::with_mode(0o755)))
            .unwrap();
        for i in 0..50u32 {
            let name = format!("f{i:03}");
            let file = tree::Entry::file(name.as_bytes(), Meta::with_mode(0o644));
            encoder
                .file_with(&file, &content[..(i as usize * 37) % 3000])
                .unwrap();
        }
        let sparse = tree::Entry::file(b"sparse", Meta::with_mode(0o600));
        encoder.ext_file(&sparse, 1 << 30, 3).unwrap();
        for (i, at) in [0u64, 5000, (1 << 30) - 10].into_iter().enumerate() {
            encoder
                .extent(
                    at,
                    &content[i * 10..i * 10 + 2500.min((1 << 30) - at as usize)],
                )
                .unwrap();
        }
        encoder.pop().unwrap();
        let archive = encoder.finish().unwrap();
        let name = format!("round trip, zstd {level:?}");
        let decoded = decode_both(&archive, Limits::default(), &name).unwrap();
        assert_eq!(decoded[0].kind, "root");
        assert_eq!(decoded[0].mode, Some(0o700));
        assert_eq!(decoded.len(), 1 + 1 + 50 + 1, "{name}");
        for (i, file) in decoded[2..52].iter().enumerate() {
            assert_eq!(file.data, &content[..(i * 37) % 3000], "{name}: file {i}");
        }
        let sparse = &decoded[52];
        assert_eq!(sparse.size, Some(1 << 30));
        let ats: Vec<u64> = sparse.extents.iter().map(|(at, _)| *at).collect();
        assert_eq!(ats, [0, 5000, (1 << 30) - 10], "{name}");
        assert_eq!(sparse.extents[2].1.len(), 10);
        let segments = archive
            .windows(2)
            .filter(|w| w == &[0x20, level.map_or(0, |_| 1)])
            .count();
        assert!(segments > 20, "{name}: {segments} segments");
    }
}

/// The footer and index of `input` read as a reader that seeks does (`None`: no footer).
fn read_index(input: &[u8]) -> Result<Option<Index>, (&'static str, u64)> {
    let tail = input.len().checked_sub(FOOTER).map(|at| &input[at..]);
    let tail = tail.map(|t| t.try_into().unwrap()).unwrap_or(&[0; FOOTER]);
    let read = Footer::find(tail, input.len() as u64).and_then(|footer| match footer {
        Some(footer) => {
            let frame = input[footer.index_at as usize..footer.at as usize].to_vec();
            Index::read(&footer, frame).map(Some)
        }
        None => Ok(None),
    });
    read.map_err(|e| match e {
        barge::Error::Format { kind, offset, .. } => (kind.code(), offset),
        e => panic!("not a format error: {e}"),
    })
}

/// Every valid v2 vector's index lists its entries (paths, in order, each found by its
/// path); each invalid vector whose fault is in its index or footer fails, read without
/// its body, with the vector's error (but `index-path`, whose one row disagrees with its
/// segment only: a reader of the index alone cannot tell).
#[test]
fn v2_vectors_read_through_their_index_as_decoded() {
    for file in vector_files("v2/valid") {
        let name = file.display().to_string();
        let input = std::fs::read(&file).unwrap();
        let index = read_index(&input).unwrap().expect(&name);
        let mut paths = Vec::new();
        let mut rows = index.rows();
        while let Some(row) = rows.next_row() {
            paths.push(row.path.to_vec());
            assert_eq!(index.find(row.path).map(|f| f.number), Some(row.number));
        }
        let expected: Vec<Vec<u8>> = expected_entries(&json_of(&file))
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(paths, expected, "{name}");
    }
    let mut checked = 0;
    for file in vector_files("v2/invalid") {
        let stem = file.file_stem().unwrap().to_str().unwrap();
        let json = json_of(&file);
        let input = std::fs::read(&file).unwrap();
        let read = read_index(&input);
        let index_fault = stem.starts_with("index-") || stem.starts_with("footer-");
        if !index_fault || stem == "index-path" {
            continue;
        }
        let want = (
            json["error"].as_str().unwrap(),
            json["offset"].as_u64().unwrap(),
        );
        assert_eq!(read.map(|_| ()), Err(want), "{stem}");
        checked += 1;
    }
    assert_eq!(checked, 14);
}
