//! docs/ARCHITECTURE.md's table of the library's modules names every module of
//! `crates/barge/src`, and names nothing that is not there, so the map cannot go stale; and
//! the modules form the layers it shows, with no cycle.

use std::collections::{BTreeMap, BTreeSet};
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

/// The top-level modules of the library (`format` for `format/` and its files), each with
/// the top-level modules its code names (`crate::format::...`, or a root re-export such
/// as `crate::Error`): doc comments, `tests.rs` files and `mod tests` blocks left out.
fn uses() -> BTreeMap<String, BTreeSet<String>> {
    let lib = fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut reexports = BTreeMap::new();
    for line in lib.lines() {
        let Some(rest) = line.strip_prefix("pub use ") else {
            continue;
        };
        let module = rest.split("::").next().unwrap().to_string();
        let names = rest.rsplit("::").next().unwrap();
        for name in names.trim_matches(|c| "{};".contains(c)).split(", ") {
            reexports.insert(name.to_string(), module.clone());
        }
    }
    let modules: BTreeSet<String> = entries(&src())
        .into_iter()
        .map(|(name, _)| name.trim_end_matches(".rs").to_string())
        .filter(|name| name != "lib")
        .collect();
    let mut uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for module in &modules {
        let mut files = Vec::new();
        let mut todo = vec![src().join(module), src().join(format!("{module}.rs"))];
        while let Some(path) = todo.pop() {
            if path.is_dir() {
                todo.extend(fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            } else if path.is_file() && !path.ends_with("tests.rs") {
                files.push(path);
            }
        }
        let named = uses.entry(module.clone()).or_default();
        for file in files {
            let text = fs::read_to_string(&file).unwrap();
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for (_, rest) in line
                    .match_indices("crate::")
                    .map(|(i, _)| line.split_at(i + 7))
                {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    let target = match reexports.get(&name) {
                        Some(module) => module.clone(),
                        None => name,
                    };
                    if modules.contains(&target) && target != *module {
                        named.insert(target);
                    }
                }
            }
        }
    }
    uses
}

/// The layers of docs/ARCHITECTURE.md hold: no two modules use each other, directly or
/// through others, and `sys/` at the bottom uses no other.
#[test]
fn the_modules_form_layers_without_a_cycle() {
    let uses = uses();
    assert!(
        uses["land"].contains("format"),
        "the scan finds uses: {uses:?}"
    );
    assert!(uses["sys"].is_empty(), "sys/ uses {:?}", uses["sys"]);
    // Repeatedly take away the modules that use none left: what stays is in a cycle.
    let mut left = uses.clone();
    while let Some(bottom) = left
        .iter()
        .find(|(_, used)| used.iter().all(|u| !left.contains_key(u)))
        .map(|(module, _)| module.clone())
    {
        left.remove(&bottom);
    }
    assert!(
        left.is_empty(),
        "these modules use each other in a cycle: {left:?}"
    );
}
