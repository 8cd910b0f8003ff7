//! GNU cp's destination rules: what each SRC of `cp SRC... DEST` is copied as. DEST a
//! directory: each SRC into `DEST/NAME` (merged into what is there), a directory named with
//! a trailing `/` into DEST itself (its contents, as rsync takes `SRC/`); DEST absent or not
//! a directory: the one SRC as DEST (a directory never replaces a non-directory).

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::io::Errno;

use crate::error::{Error, Result, TreePath};
use crate::tree::Kind;

/// What DEST is, as the rules see it (through a symlink, as cp does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DestIs {
    Dir,
    Other,
    Missing,
}

/// Each SRC and the path it is copied as, by GNU cp's rules.
pub fn targets(srcs: &[PathBuf], dest: &Path) -> Result<Vec<(PathBuf, PathBuf)>> {
    let is = match rustix::fs::stat(dest) {
        Ok(st) if Kind::of_mode(st.st_mode) == Kind::Dir => DestIs::Dir,
        Ok(_) => DestIs::Other,
        Err(Errno::NOENT) => DestIs::Missing,
        Err(e) => return Err(Error::io("stat", shown(dest), e)),
    };
    // A SRC merged into DEST needs DEST by a name (`.` has none).
    let merged = || std::fs::canonicalize(dest).unwrap_or_else(|_| dest.to_path_buf());
    plan(srcs, dest, is, is_dir, merged)
}

/// The rules on what DEST is and what `is_dir` says of a SRC; `merged` names DEST for a SRC
/// whose content is merged into it.
fn plan(
    srcs: &[PathBuf],
    dest: &Path,
    is: DestIs,
    is_dir: impl Fn(&Path) -> bool,
    merged: impl Fn() -> PathBuf,
) -> Result<Vec<(PathBuf, PathBuf)>> {
    let refuse = |problem: &str| {
        Err(Error::Argument {
            arg: shown(dest).to_string(),
            problem: problem.into(),
        })
    };
    match is {
        DestIs::Dir => Ok(srcs
            .iter()
            .map(|src| {
                // `DIR/.`, `..` and `/` name no entry, and `DIR/` asks for DIR's contents
                // (rsync): their content is merged into DEST.
                let raw = src.as_os_str().as_bytes();
                let contents = raw.ends_with(b"/") && is_dir(src);
                let target = match src.file_name() {
                    Some(name) if !(raw == b"." || raw.ends_with(b"/.") || contents) => {
                        dest.join(name)
                    }
                    _ => merged(),
                };
                (src.clone(), target)
            })
            .collect()),
        DestIs::Other if srcs.len() > 1 => {
            refuse("not a directory, and several SRCs are copied into a directory")
        }
        DestIs::Other if is_dir(&srcs[0]) => refuse(&format!(
            "not a directory, and cannot be replaced with the directory {}",
            shown(&srcs[0])
        )),
        DestIs::Missing if srcs.len() > 1 => {
            refuse("does not exist, and several SRCs are copied into an existing directory")
        }
        DestIs::Other | DestIs::Missing => Ok(vec![(srcs[0].clone(), dest.to_path_buf())]),
    }
}

/// Whether `path` is a directory (not following a symlink, but for a trailing `/`, which
/// the kernel follows).
fn is_dir(path: &Path) -> bool {
    rustix::fs::lstat(path).is_ok_and(|st| Kind::of_mode(st.st_mode) == Kind::Dir)
}

fn shown(path: &Path) -> TreePath {
    TreePath(path.as_os_str().as_bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The targets of `srcs` (a SRC ending in `dir` is a directory) into `dest`, which is
    /// `is`; a merged SRC goes to `/abs/dest`.
    fn plan_of(srcs: &[&str], dest: &str, is: DestIs) -> Result<Vec<(PathBuf, PathBuf)>> {
        let srcs: Vec<PathBuf> = srcs.iter().map(PathBuf::from).collect();
        let is_dir = |p: &Path| p.to_str().unwrap().trim_end_matches('/').ends_with("dir");
        plan(&srcs, Path::new(dest), is, is_dir, || "/abs/dest".into())
    }

    fn targets_of(srcs: &[&str], dest: &str, is: DestIs) -> Vec<String> {
        let planned = plan_of(srcs, dest, is).unwrap();
        let shown = |(src, target): (PathBuf, PathBuf)| format!("{src:?} {target:?}");
        planned.into_iter().map(shown).collect()
    }

    #[test]
    fn into_a_directory_each_src_goes_under_its_last_component() {
        assert_eq!(
            targets_of(&["a/b", "c/dir", "/x/f", "y/f/"], "d", DestIs::Dir),
            [
                r#""a/b" "d/b""#,
                r#""c/dir" "d/dir""#,
                r#""/x/f" "d/f""#,
                r#""y/f/" "d/f""#
            ]
        );
    }

    #[test]
    fn a_directory_with_a_trailing_slash_gives_its_contents() {
        assert_eq!(
            targets_of(&["c/dir/", "e/dir//"], "d", DestIs::Dir),
            [r#""c/dir/" "/abs/dest""#, r#""e/dir//" "/abs/dest""#]
        );
        assert_eq!(
            targets_of(&["c/dir/"], "new", DestIs::Missing),
            [r#""c/dir/" "new""#]
        );
    }

    #[test]
    fn a_src_naming_no_entry_is_merged_into_the_directory() {
        for src in [".", "a/.", "..", "/", "a/.."] {
            let got = plan_of(&[src], "d", DestIs::Dir).unwrap();
            assert_eq!(got[0].1, Path::new("/abs/dest"), "{src}");
        }
    }

    #[test]
    fn one_src_is_copied_as_dest_when_dest_is_missing_or_a_file() {
        assert_eq!(
            targets_of(&["a/dir"], "new", DestIs::Missing),
            [r#""a/dir" "new""#]
        );
        assert_eq!(
            targets_of(&["a/f"], "file", DestIs::Other),
            [r#""a/f" "file""#]
        );
    }

    #[test]
    fn what_cannot_be_done_is_refused() {
        let refused = |srcs: &[&str], is| plan_of(srcs, "d", is).unwrap_err().to_string();
        let several = refused(&["a", "b"], DestIs::Other);
        assert!(
            several.starts_with("d: not a directory, and several"),
            "{several}"
        );
        let dir = refused(&["a/dir"], DestIs::Other);
        assert!(dir.ends_with("the directory a/dir"), "{dir}");
        let missing = refused(&["a", "b"], DestIs::Missing);
        assert!(missing.starts_with("d: does not exist"), "{missing}");
    }
}
