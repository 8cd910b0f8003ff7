//! `--exclude` patterns, one matcher for every walker (pack's ordered walker, du's parallel
//! one, cp's): globs on an entry's name and on its path below the walked directory,
//! with the rules tar and rsync users expect.
//!
//! - `*`, `?`, `[abc]`, `{a,b}` as in a shell; `*` and `?` never match `/`; `**` matches
//!   any number of directories.
//! - A pattern without a `/` matches an entry's name at any depth: `*.o`, `target`, `.git`.
//! - A pattern with a `/` matches the end of the entry's path below the walked directory:
//!   `build/*.o` leaves out `build/x.o` and `src/build/x.o`; a leading `/` anchors it to the
//!   walked directory (`/build` is only the top one).
//! - A trailing `/` matches directories only (`cache/`).
//!
//! An excluded directory is not walked at all; nothing of an excluded entry is read or
//! stated beyond what the directory listing said.

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

/// A set of exclude patterns (see the [module docs](self)); empty by default.
#[derive(Clone, Debug, Default)]
pub struct Exclude {
    /// Patterns without a `/`, matched against names: of any entry, of directories.
    names: [GlobSet; 2],
    /// Patterns with a `/`, matched against paths: of any entry, of directories.
    paths: [GlobSet; 2],
}

impl Exclude {
    /// Compiles `patterns`; an invalid one is an [`Error::Argument`] naming it.
    pub fn new<S: AsRef<str>>(patterns: impl IntoIterator<Item = S>) -> Result<Exclude> {
        let mut sets: [GlobSetBuilder; 4] = std::array::from_fn(|_| GlobSetBuilder::new());
        let mut any = false;
        for pattern in patterns {
            let pattern = pattern.as_ref();
            let bad = |problem: String| Error::Argument {
                arg: format!("--exclude {pattern}"),
                problem,
            };
            let (glob, dir_only) = match pattern.strip_suffix('/') {
                Some(glob) => (glob, 1),
                None => (pattern, 0),
            };
            let (glob, set) = match glob.strip_prefix('/') {
                Some(anchored) => (anchored.to_string(), 2),
                None if glob.contains('/') => (format!("**/{glob}"), 2),
                None => (glob.to_string(), 0),
            };
            if glob.is_empty() || glob.split('/').any(|part| part.is_empty()) {
                return Err(bad("an empty path component matches nothing".into()));
            }
            let glob = GlobBuilder::new(&glob)
                .literal_separator(true)
                .build()
                .map_err(|e| bad(e.kind().to_string()))?;
            sets[set + dir_only].add(glob);
            any = true;
        }
        if !any {
            return Ok(Exclude::default());
        }
        let build = |set: &GlobSetBuilder| set.build().expect("each glob compiled alone");
        Ok(Exclude {
            names: [build(&sets[0]), build(&sets[1])],
            paths: [build(&sets[2]), build(&sets[3])],
        })
    }

    /// True when there are no patterns (nothing is ever excluded).
    pub fn is_empty(&self) -> bool {
        self.names.iter().chain(&self.paths).all(GlobSet::is_empty)
    }

    /// True when the entry `name`, a directory when `dir`, at the path `path()` below the
    /// walked directory, is excluded; `path` is called only when a pattern needs it.
    pub(crate) fn excludes(&self, name: &[u8], path: impl FnOnce() -> Vec<u8>, dir: bool) -> bool {
        let kinds = if dir { 2 } else { 1 };
        let name = Candidate::from_bytes(name);
        if self.names[..kinds]
            .iter()
            .any(|set| set.is_match_candidate(&name))
        {
            return true;
        }
        let paths = &self.paths[..kinds];
        if paths.iter().all(GlobSet::is_empty) {
            return false;
        }
        let path = path();
        let path = Candidate::from_bytes(&path);
        paths.iter().any(|set| set.is_match_candidate(&path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn excluded(patterns: &[&str], path: &str, dir: bool) -> bool {
        let exclude = Exclude::new(patterns).unwrap();
        let name = path.rsplit('/').next().unwrap();
        exclude.excludes(name.as_bytes(), || path.as_bytes().to_vec(), dir)
    }

    #[test]
    fn names_match_at_any_depth_and_paths_at_the_end_unless_anchored() {
        assert!(excluded(&["*.o"], "a/b/x.o", false));
        assert!(!excluded(&["*.o"], "a/x.o/y", false));
        assert!(excluded(&["target"], "deep/target", true));
        assert!(excluded(&["build/*.o"], "build/x.o", false));
        assert!(excluded(&["build/*.o"], "src/build/x.o", false));
        assert!(!excluded(&["build/*.o"], "build/sub/x.o", false));
        assert!(excluded(&["build/**/*.o"], "build/sub/x.o", false));
        assert!(excluded(&["/build"], "build", true));
        assert!(!excluded(&["/build"], "src/build", true));
        assert!(excluded(&["{a,b}?"], "b1", false));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        assert!(excluded(&["cache/"], "x/cache", true));
        assert!(!excluded(&["cache/"], "x/cache", false));
        assert!(excluded(&["x/cache/"], "x/cache", true));
        assert!(!excluded(&["x/cache/"], "x/cache", false));
    }

    #[test]
    fn no_patterns_exclude_nothing_and_bad_ones_are_named() {
        let none = Exclude::new(Vec::<String>::new()).unwrap();
        assert!(none.is_empty());
        assert!(!none.excludes(b"x", || unreachable!("no path needed"), false));
        // A name pattern never builds the path.
        let names = Exclude::new(["x"]).unwrap();
        assert!(!names.excludes(b"y", || unreachable!("no path needed"), true));
        for bad in ["a[", "/", "a//b", ""] {
            let e = Exclude::new([bad]).unwrap_err().to_string();
            assert!(e.starts_with(&format!("--exclude {bad}: ")), "{e}");
        }
    }
}
