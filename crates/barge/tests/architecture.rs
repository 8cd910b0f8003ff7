//! docs/ARCHITECTURE.md's table of the library's modules names every module of
//! `crates/barge/src`, and names nothing that is not there, so the map cannot go stale.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The library's source directory.
fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The first cells of the module table under "## The library": `tree.rs`, `format/`,
/// `land/sync.rs` (a name ending in `/` stands for its whole directory).
fn table_names() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ARCHITECTURE.md");
    let text = fs::read_to_string(&path).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("The library"))
        .expect("ARCHITECTURE.md has a section \"The library\"");
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .map(|rest| rest.split('`').next().unwrap().to_string())
        .collect()
}

/// The names of the `.rs` files and directories in `dir`.
fn entries(dir: &Path) -> Vec<(String, bool)> {
    let mut names: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            (name, entry.file_type().unwrap().is_dir())
        })
        .filter(|(name, is_dir)| *is_dir || name.ends_with(".rs"))
        .collect();
    names.sort();
    names
}

/// Adds to `missing` the files below `dir` (a path below src/, "" for src/ itself) that
/// `named` lacks; a directory is named whole (`format/`) or file by file (`land/sync.rs`).
fn unnamed(named: &BTreeSet<&str>, dir: &str, missing: &mut Vec<String>) {
    for (name, is_dir) in entries(&src().join(dir)) {
        let path = format!("{dir}{name}");
        if is_dir && !named.contains(format!("{path}/").as_str()) {
            unnamed(named, &format!("{path}/"), missing);
        } else if !is_dir && !named.contains(path.as_str()) {
            missing.push(path);
        }
    }
}

#[test]
fn the_module_table_names_every_module_and_only_those() {
    let named = table_names();
    assert!(
        named.len() > 10,
        "the module table was not found: {named:?}"
    );
    let set: BTreeSet<&str> = named.iter().map(String::as_str).collect();
    assert_eq!(set.len(), named.len(), "a module is named twice: {named:?}");

    let mut missing = Vec::new();
    unnamed(&set, "", &mut missing);
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md's module table lacks {missing:?}: add a row for each"
    );

    let stale: Vec<_> = named
        .iter()
        .filter(|name| {
            let path = src().join(name.trim_end_matches('/'));
            if name.ends_with('/') {
                !path.is_dir()
            } else {
                !path.is_file()
            }
        })
        .collect();
    assert!(
        stale.is_empty(),
        "docs/ARCHITECTURE.md's module table names {stale:?}, which crates/barge/src lacks"
    );
}
