//! Which entries of an archive an unpack, list or cat takes: member PATHs as tar takes them
//! (a directory selects its subtree; the directories above a PATH are entered) and
//! `--exclude` patterns (a directory excluded is skipped whole).

use crate::error::TreePath;
use crate::exclude::Exclude;

/// PATHs to take (all when none) and patterns to leave out.
#[derive(Clone, Debug, Default)]
pub struct Select {
    paths: Vec<Vec<u8>>,
    exclude: Exclude,
}

/// What a [`Select`] says of an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Taken (a directory: with everything below it but what is excluded).
    Take,
    /// A directory above a selected PATH: entered, its other entries left out.
    Enter,
    /// Left out (a directory: with everything below it).
    Leave,
}

impl Select {
    /// Takes `paths` (archive paths, as `list` shows them; a leading `/` or `./` and a
    /// trailing `/` are ignored, as tar does) and leaves out what `exclude` matches.
    pub fn new<P: AsRef<[u8]>>(paths: impl IntoIterator<Item = P>, exclude: Exclude) -> Select {
        let paths = paths.into_iter().map(|p| normalized(p.as_ref())).collect();
        Select { paths, exclude }
    }

    /// Whether it takes every entry.
    pub(crate) fn is_all(&self) -> bool {
        self.paths.is_empty() && self.exclude.is_empty()
    }

    /// The PATHs it takes, when it takes nothing else and leaves nothing out below them
    /// (no `--exclude`).
    pub(crate) fn only_paths(&self) -> Option<&[Vec<u8>]> {
        (self.exclude.is_empty() && !self.paths.is_empty()).then_some(&self.paths)
    }

    /// How many PATHs it was given.
    pub(crate) fn len(&self) -> usize {
        self.paths.len()
    }

    /// The entry `name` at archive path `path` (a directory when `dir`), inside a
    /// directory taken whole when `within`; marks in `matched` the PATHs it matches.
    pub(crate) fn decide(
        &self,
        path: &[u8],
        dir: bool,
        within: bool,
        matched: &mut [bool],
    ) -> Decision {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if self.exclude.excludes(name, || path.to_vec(), dir) {
            return Decision::Leave;
        }
        if self.paths.is_empty() {
            return Decision::Take;
        }
        // Inside a directory taken whole, a PATH below it is matched too (`c c/h`).
        let mut decision = match within {
            true => Decision::Take,
            false => Decision::Leave,
        };
        for (i, selected) in self.paths.iter().enumerate() {
            if below_or_at(path, selected) {
                matched[i] = true;
                decision = Decision::Take;
            } else if dir && decision == Decision::Leave && below_or_at(selected, path) {
                decision = Decision::Enter;
            }
        }
        decision
    }

    /// The first PATH `matched` says nothing matched.
    pub(crate) fn unmatched(&self, matched: &[bool]) -> Option<TreePath> {
        let i = matched.iter().position(|&m| !m)?;
        Some(TreePath(self.paths[i].clone()))
    }
}

/// Whether `path` is `top` or below it.
fn below_or_at(path: &[u8], top: &[u8]) -> bool {
    path.strip_prefix(top)
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// `path` without leading `/` and `./`, repeated slashes and a trailing `/`.
fn normalized(path: &[u8]) -> Vec<u8> {
    let names = path
        .split(|&b| b == b'/')
        .filter(|n| !n.is_empty() && *n != b".");
    names.collect::<Vec<_>>().join(&b'/')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(select: &Select, path: &str, dir: bool) -> (Decision, Vec<bool>) {
        let mut matched = vec![false; select.len()];
        let decision = select.decide(path.as_bytes(), dir, false, &mut matched);
        (decision, matched)
    }

    #[test]
    fn paths_take_their_subtrees_and_enter_the_directories_above() {
        let select = Select::new(["./a/b/", "/c"], Exclude::default());
        assert_eq!(
            decide(&select, "a", true),
            (Decision::Enter, vec![false, false])
        );
        assert_eq!(
            decide(&select, "a/b", true),
            (Decision::Take, vec![true, false])
        );
        assert_eq!(
            decide(&select, "a/b/x", false),
            (Decision::Take, vec![true, false])
        );
        assert_eq!(
            decide(&select, "a/bb", true),
            (Decision::Leave, vec![false, false])
        );
        assert_eq!(
            decide(&select, "a/x", false),
            (Decision::Leave, vec![false, false])
        );
        assert_eq!(
            decide(&select, "c", false),
            (Decision::Take, vec![false, true])
        );
        assert_eq!(
            decide(&select, "c", true),
            (Decision::Take, vec![false, true])
        );
        assert_eq!(
            decide(&select, "d", true),
            (Decision::Leave, vec![false, false])
        );
        assert_eq!(
            select.unmatched(&[true, false]),
            Some(TreePath(b"c".to_vec()))
        );
    }

    #[test]
    fn a_path_inside_a_directory_taken_whole_is_matched_too() {
        let select = Select::new(["c", "c/h"], Exclude::default());
        let mut matched = vec![false; 2];
        assert_eq!(
            select.decide(b"c", true, false, &mut matched),
            Decision::Take
        );
        assert_eq!(
            select.decide(b"c/h", false, true, &mut matched),
            Decision::Take
        );
        assert_eq!(select.unmatched(&matched), None);
    }

    #[test]
    fn exclusions_apply_inside_taken_directories() {
        let select = Select::new(["src"], Exclude::new(["*.o"]).unwrap());
        let mut matched = vec![false];
        assert_eq!(
            select.decide(b"src/x.o", false, true, &mut matched),
            Decision::Leave
        );
        assert_eq!(
            select.decide(b"src/x.c", false, true, &mut matched),
            Decision::Take
        );
        let all = Select::new::<&str>([], Exclude::new(["target/"]).unwrap());
        assert_eq!(
            all.decide(b"a/target", true, false, &mut []),
            Decision::Leave
        );
        assert_eq!(
            all.decide(b"a/target", false, false, &mut []),
            Decision::Take
        );
        assert!(Select::default().is_all());
    }
}
