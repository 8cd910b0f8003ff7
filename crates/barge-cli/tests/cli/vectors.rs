//! The committed vectors through the CLI: every valid one of the core format unpacks (mapped
//! and from a pipe) to exactly the tree its `.json` describes, `list --json` agrees with every
//! valid one field by field; every invalid one makes `unpack` and `list` fail cleanly with its
//! error and offset.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

pub(crate) fn vectors(kind: &str) -> Vec<(PathBuf, Value)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/vectors")
        .join(kind);
    let mut out: Vec<_> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "barge"))
        .map(|p| {
            let json = fs::read_to_string(p.with_extension("json")).unwrap();
            (p, serde_json::from_str(&json).unwrap())
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() > 10, "vectors missing in {}", dir.display());
    out
}

pub(crate) fn hex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The CLI options for a vector's optional limits.
fn limit_args(json: &Value) -> Vec<String> {
    let options = json["options"].as_object().cloned().unwrap_or_default();
    options
        .iter()
        .flat_map(|(key, value)| [format!("--{}", key.replace('_', "-")), value.to_string()])
        .collect()
}

/// Unpacks `archive` into `dest`, from the file (mapped) or through stdin (streamed).
pub(crate) fn unpack(
    archive: &Path,
    dest: &Path,
    piped: bool,
    extra: &[String],
) -> std::process::Output {
    let mut cmd = barge(["unpack"]);
    cmd.args(extra);
    if piped {
        cmd.arg("-").arg(dest);
        run(&mut cmd, Some(&fs::read(archive).unwrap()))
    } else {
        cmd.arg(archive).arg(dest);
        run(&mut cmd, None)
    }
}

#[test]
fn valid_vectors_unpack_to_their_trees_and_list_agrees() {
    let work = tempdir();
    // `barge unpack` sets the umask aside: modes land as the archive has them.
    let mask = 0;
    for (i, (archive, json)) in vectors("valid").iter().enumerate() {
        let what = archive.display().to_string();
        let entries = json["entries"].as_array().unwrap();
        // What extended archives land as (kinds, times, owners, xattrs) depends on the
        // landers' restore policy, which their own tests check.
        if json["extended"] != true {
            let expected: Vec<(Vec<u8>, Node)> = entries
                .iter()
                .map(|e| {
                    // No owner is recorded, so no set-id bit lands (setid.rs).
                    let mode = e["mode"].as_u64().unwrap() as u32 & !mask & !0o6000;
                    let node = match e["kind"].as_str().unwrap() {
                        "dir" => Node::Dir(mode),
                        _ => Node::File(mode, hex(e["data_hex"].as_str().unwrap())),
                    };
                    (hex(e["path_hex"].as_str().unwrap()), node)
                })
                .collect();
            for piped in [false, true] {
                let dest = work.path().join(format!("{i}-{piped}"));
                let out = unpack(archive, &dest, piped, &[]);
                assert!(
                    out.status.success(),
                    "{what}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                let mut got: Vec<_> = scan(&dest).into_iter().collect();
                let mut want: Vec<_> = expected.iter().map(|(p, n)| (p.clone(), n)).collect();
                want.sort_by(|a, b| a.0.cmp(&b.0));
                got.sort_by(|a, b| a.0.cmp(&b.0));
                assert_eq!(got.len(), want.len(), "{what} (piped {piped}): entry count");
                for ((gp, gn), (wp, wn)) in got.iter().zip(&want) {
                    assert_eq!(gp, wp, "{what}: paths differ");
                    assert!(gn == *wn, "{what}: {:?} landed as {gn:?}", name(gp));
                }
            }
        }
        // `list --json`: one line per entry, in archive order, with the vector's fields.
        let listed = run_ok(
            &mut barge(["list".as_ref(), "--json".as_ref(), archive.as_os_str()]),
            None,
        );
        let lines: Vec<Value> = String::from_utf8(listed.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), entries.len(), "{what}: list line count");
        for (line, entry) in lines.iter().zip(entries) {
            let bytes = |key: &str| match (line[key].as_str(), line[format!("{key}_hex")].as_str())
            {
                (Some(text), None) => Some(text.as_bytes().to_vec()),
                (None, Some(h)) => Some(hex(h)),
                (None, None) => None,
                _ => panic!("{what}: {key} twice in {line}"),
            };
            let from_hex = |key: &str| entry[key].as_str().map(hex);
            assert_eq!(bytes("path"), from_hex("path_hex"), "{what}");
            assert_eq!(bytes("target"), from_hex("target_hex"), "{what}");
            for key in [
                "kind",
                "mode",
                "mtime",
                "owner",
                "xattrs",
                "linked",
                "link_index",
                "major",
                "minor",
            ] {
                assert_eq!(line[key], entry[key], "{what}: {key} of {line}");
            }
            let size = entry["data_hex"].as_str().map_or(0, |d| d.len() / 2);
            assert_eq!(line["size"], size, "{what}");
            if let Some(index) = entry["link_index"].as_u64() {
                let file = &entries[index as usize]["path_hex"];
                assert_eq!(
                    bytes("link"),
                    file.as_str().map(hex),
                    "{what}: link of {line}"
                );
            }
        }
    }
}

/// Words of each error's message, as the CLI prints it.
fn message_of(code: &str) -> &'static str {
    match code {
        "bad-magic" => "bad magic",
        "truncated" => "truncated",
        "bad-version" => "unsupported format version",
        "bad-flags" => "unsupported header flags",
        "unknown-tag" => "unknown message tag",
        "dangling-perm" => "not followed by an entry",
        "end-inside-dir" => "end of archive inside a directory",
        "count-mismatch" => "end count says",
        "trailing-bytes" => "bytes after the end",
        "pop-at-root" => "pop would leave",
        "bad-mode" => "invalid mode",
        "empty-name" => "empty name",
        "name-too-long" => "longer than 255 bytes",
        "slash-in-name" => "contains '/'",
        "dot-name" => "'.' or '..'",
        "noncanonical-file64" => "FILE64 used for a size below",
        "duplicate-name" => "duplicate name",
        "too-deep" => "deeper than the limit",
        "too-many-entries" => "--max-entries",
        "too-many-bytes" => "--max-bytes",
        "too-much-space" => "--max-space",
        "record-order" => "record out of order or repeated",
        "misplaced-record" => "record on an entry that may not carry one",
        "bad-time" => "nanoseconds",
        "bad-xattr" => "extended attribute name",
        "xattr-too-large" => "larger than the format allows",
        "bad-symlink" => "symlink target",
        "bad-link" => "not an earlier linked regular file",
        "bad-special" => "special file of unknown type",
        other => panic!("unknown error code {other}"),
    }
}

#[test]
fn invalid_vectors_fail_cleanly_naming_the_error_and_offset() {
    let work = tempdir();
    for (i, (archive, json)) in vectors("invalid").iter().enumerate() {
        let what = archive.display().to_string();
        let code = json["error"].as_str().unwrap();
        let at = format!("archive byte {}:", json["offset"]);
        let message = message_of(code);
        let limits = limit_args(json);
        for piped in [false, true] {
            let dest = work.path().join(format!("{i}-{piped}"));
            let out = unpack(archive, &dest, piped, &limits);
            let stderr = String::from_utf8_lossy(&out.stderr);
            // Streamed, a file cut short is reported by the lander, which removed it.
            if piped && code == "truncated" && stderr.contains("input ended after") {
                assert_clean_failure(&out, &["the partial file was removed"], &what);
            } else {
                assert_clean_failure(&out, &[&at, message], &format!("{what} (piped {piped})"));
            }
        }
        let mut list = barge(["list"]);
        list.args(&limits).arg(archive);
        assert_clean_failure(
            &run(&mut list, None),
            &[&at, message],
            &format!("list {what}"),
        );
    }
}
