//! The committed vectors (testdata/vectors) against the library decoder and encoder: every
//! valid vector decodes to exactly its `.json` tree and re-encodes byte for byte; every
//! invalid one fails with its `.json` error code at its offset. Each is decoded both whole
//! and fed one byte at a time to the streaming decoder.

mod support;

use std::path::Path;

use barge::format::{Encoder, Limits};
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
    limits
}

/// The entries a valid vector's `.json` lists, and the mode to hand an encoder (`perm ?? mode`).
fn expected_entries(json: &Value) -> Vec<(Entry, u32)> {
    let entries = json["entries"].as_array().expect("entries array");
    entries
        .iter()
        .map(|e| {
            let mode = e["mode"].as_u64().expect("mode") as u32;
            let entry = Entry {
                path: hex(e["path_hex"].as_str().expect("path_hex")),
                dir: e["kind"] == "dir",
                mode,
                data: hex(e["data_hex"].as_str().unwrap_or("")),
            };
            let perm = e["perm"].as_u64().map_or(mode, |p| p as u32);
            (entry, perm)
        })
        .collect()
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

/// Rebuilds the archive from a pre-order entry list with the library encoder.
fn encode(entries: &[(Entry, u32)]) -> Vec<u8> {
    let mut encoder = Encoder::new(Vec::new());
    let mut open: Vec<&[u8]> = Vec::new();
    for (entry, mode) in entries {
        let (parent, name) = match entry.path.iter().rposition(|&b| b == b'/') {
            Some(i) => (&entry.path[..i], &entry.path[i + 1..]),
            None => (&entry.path[..0], &entry.path[..]),
        };
        while open.last().is_some_and(|dir| *dir != parent) {
            open.pop();
            encoder.pop().unwrap();
        }
        if entry.dir {
            encoder.dir(name, *mode).unwrap();
            open.push(&entry.path);
        } else {
            encoder.file(name, *mode, &entry.data).unwrap();
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
        let expected = expected_entries(&json);
        let entries: Vec<Entry> = expected.iter().map(|(e, _)| e.clone()).collect();
        match decode_both(&input, Limits::default(), &name) {
            Ok(decoded) => assert_eq!(decoded, entries, "{name}: decoded tree differs"),
            Err(e) => panic!("{name}: valid vector fails with {e:?}"),
        }
        assert!(encode(&expected) == input, "{name}: encoder output differs");
    }
}

#[test]
fn invalid_vectors_fail_with_their_code_at_their_offset() {
    for file in vector_files("invalid") {
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
