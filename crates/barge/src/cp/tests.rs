//! `Cp` driven through the library: the copy of a generated tree compared with its source
//! (`compare.rs`'s [`Compare`]), and each rule of an update, a delete, a dry run and a
//! cancel, asserted on the trees they leave.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::sync::Mutex;

use rustix::io::Errno;

use super::*;
use crate::land::restore::Existing;
use crate::listing::tests::touch;
use crate::share::SPINE;

/// What a copy told: its errors and (with [`Cp::changes`]) its changes, as text.
#[derive(Default)]
struct Told {
    errors: Mutex<Vec<String>>,
    changes: Mutex<Vec<(Change, String)>>,
}

impl CpReport for Told {
    fn error(&self, error: Error) {
        self.errors.lock().unwrap().push(error.to_string());
    }

    fn change(&self, change: Change, path: &TreePath) {
        self.changes
            .lock()
            .unwrap()
            .push((change, path.to_string()));
    }
}

impl Told {
    fn errors(&self) -> Vec<String> {
        self.errors.lock().unwrap().clone()
    }

    /// The changes told, sorted, with `prefix` taken off their paths.
    fn changes(&self, prefix: &Path) -> Vec<(Change, String)> {
        let prefix = format!("{}/", prefix.display());
        let mut changes: Vec<_> = (self.changes.lock().unwrap().iter())
            .map(|(change, path)| (*change, path.replacen(&prefix, "", 1)))
            .collect();
        changes.sort_by(|a, b| a.1.cmp(&b.1));
        changes
    }
}

/// A copy on two threads, under the process's umask (which a test may not change: the
/// other tests share it), as the library's default says.
fn cp() -> Cp {
    Cp::new().threads(2)
}

/// The process's umask.
fn umask() -> u32 {
    crate::root::process_umask()
}

/// Runs `cp` from `src` to `dest`; its result and what it told.
fn run(cp: &Cp, src: &Path, dest: &Path) -> (Result<CpSummary>, Told) {
    let told = Told::default();
    let result = cp.run(src, dest, &Progress::default(), &told);
    (result, told)
}

/// Runs `cp`, which must succeed without an error told.
fn copied(cp: &Cp, src: &Path, dest: &Path) -> CpSummary {
    let (result, told) = run(cp, src, dest);
    let summary = result.unwrap();
    assert_eq!(told.errors(), Vec::<String>::new());
    summary
}

/// The differences between `src` and its copy `dest` (kinds, contents, symlink targets, all
/// mode bits less the umask, entries only the copy has), as text.
fn differences(src: &Path, dest: &Path) -> Vec<String> {
    let found = Mutex::new(Vec::new());
    let compare = Compare::new().threads(2).modes(umask()).whole();
    (compare.run(src, dest, &|e| found.lock().unwrap().push(e.to_string()))).unwrap();
    found.into_inner().unwrap()
}

/// Gives `path` the permission bits `mode` less the umask: a tree whose copies have its
/// modes exactly, so that an update finds them unchanged.
fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode & !umask())).unwrap();
}

fn write(path: &Path, bytes: &[u8], mode: u32) {
    fs::write(path, bytes).unwrap();
    chmod(path, mode);
}

fn mkdir(path: &Path, mode: u32) {
    fs::create_dir(path).unwrap();
    chmod(path, mode);
}

/// A tree of every kind `cp` copies without privileges: files (empty, small, big, sparse,
/// setuid), directories (one setgid), symlinks (one dangling), a fifo and two names of one
/// file.
fn tree(root: &Path) {
    mkdir(root, 0o755);
    write(&root.join("a.txt"), b"hello\n", 0o664);
    write(&root.join("empty"), b"", 0o640);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write(&root.join("big"), &big, 0o600);
    let sparse = fs::File::create(root.join("sparse")).unwrap();
    sparse.set_len(4 << 20).unwrap();
    std::os::unix::fs::FileExt::write_at(&sparse, b"tail", (4 << 20) - 4).unwrap();
    write(&root.join("exe"), b"#!/bin/sh\n", 0o4775);
    mkdir(&root.join("sub"), 0o750);
    symlink("../a.txt", root.join("sub/link")).unwrap();
    mkdir(&root.join("sub/deep"), 0o700);
    write(&root.join("sub/deep/f"), b"deep", 0o644);
    write(&root.join("hard1"), b"linked", 0o644);
    fs::hard_link(root.join("hard1"), root.join("sub/hard2")).unwrap();
    symlink("nowhere", root.join("dangling")).unwrap();
    rustix::fs::mknodat(
        CWD,
        root.join("fifo"),
        rustix::fs::FileType::Fifo,
        Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    chmod(&root.join("fifo"), 0o644);
    mkdir(&root.join("shared"), 0o2775);
    write(&root.join("shared/g"), b"g", 0o644);
    age(root);
}

/// Gives every entry below `root`, and `root`, a time of its own in the past: a copy made
/// at once would otherwise get the same coarse clock tick as its source.
fn age(root: &Path) {
    let paths = snapshot(root).into_keys().map(|path| root.join(path));
    for (i, path) in paths.chain([root.to_path_buf()]).enumerate() {
        touch(&path, 1_000_000_000 + i as i64);
    }
}

/// Each entry below `root` (not followed): inode, mode, mtime and size, by path.
fn snapshot(root: &Path) -> BTreeMap<String, (u64, u32, i64, i64, u64)> {
    let mut found = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                dirs.push(path.clone());
            }
            let facts = (
                meta.ino(),
                meta.mode(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.size(),
            );
            let name = path.strip_prefix(root).unwrap().display().to_string();
            found.insert(name, facts);
        }
    }
    found
}

fn ino(path: &Path) -> u64 {
    fs::symlink_metadata(path).unwrap().ino()
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn a_copy_of_a_tree_equals_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    let summary = copied(&cp(), &src, &dest);
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    let counts = summary.counts;
    assert_eq!(
        (counts.dirs, counts.files, counts.hard_links),
        (4, 8, 1),
        "{counts:?}"
    );
    assert_eq!((counts.symlinks, counts.specials), (2, 1), "{counts:?}");
    assert_eq!(counts.bytes, 6 + 300_000 + (4 << 20) + 10 + 4 + 6 + 1);
    // Times are kept, a directory's too (set after what is below it).
    for path in ["big", "sub", "sub/deep", "sub/link", ""] {
        let (a, b) = (src.join(path), dest.join(path));
        let time = |p: &Path| {
            let meta = fs::symlink_metadata(p).unwrap();
            (meta.mtime(), meta.mtime_nsec())
        };
        assert_eq!(time(&a), time(&b), "{path}");
    }
    assert_eq!(mode(&dest), 0o755 & !umask());
    // Two names of one file stay two names of one file.
    assert_eq!(ino(&dest.join("hard1")), ino(&dest.join("sub/hard2")));
    assert_eq!(fs::metadata(dest.join("hard1")).unwrap().nlink(), 2);
    // Holes stay holes: 4 MiB of size, a block or two of data.
    let sparse = fs::metadata(dest.join("sparse")).unwrap();
    assert!(
        sparse.blocks() * 512 < 1 << 20,
        "{} blocks",
        sparse.blocks()
    );
}

#[test]
fn a_copy_masks_modes_with_the_umask_also_where_it_sets_them_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    fs::create_dir(&src).unwrap();
    // Set by chmod, which no umask masks: each as SRC has it.
    let exact = |path: &Path, mode| fs::set_permissions(path, fs::Permissions::from_mode(mode));
    fs::write(src.join("plain"), b"").unwrap();
    exact(&src.join("plain"), 0o666).unwrap();
    fs::write(src.join("setgid"), b"").unwrap();
    exact(&src.join("setgid"), 0o2777).unwrap();
    fs::create_dir(src.join("dir")).unwrap();
    exact(&src.join("dir"), 0o2777).unwrap();
    exact(&src, 0o777).unwrap();
    copied(&cp(), &src, &dest);
    // Created with their modes (the kernel masks them), or given them by `fchmod` after
    // their content or owner (the copy masks them).
    for (path, want) in [
        ("plain", 0o666),
        ("setgid", 0o2777),
        ("dir", 0o2777),
        ("", 0o777),
    ] {
        assert_eq!(mode(&dest.join(path)), want & !umask(), "{path:?}");
    }
}

#[test]
fn an_existing_entry_is_an_error_skipped_or_replaced_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    mkdir(&dest, 0o755);
    write(&dest.join("a.txt"), b"theirs", 0o644);
    let (result, told) = run(&cp(), &src, &dest);
    assert_eq!(result.unwrap().counts.errors, 1);
    let errors = told.errors();
    assert!(errors[0].ends_with("a.txt: already exists in the destination (as a file); refusing to overwrite or follow it"), "{errors:?}");
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"theirs");

    let skip = cp().restore(Restore::default().existing(Existing::Skip));
    let summary = copied(&skip, &src, &dest);
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"theirs");
    // a.txt, and every entry the first run copied.
    assert_eq!(summary.counts.kept, 12, "{:?}", summary.counts);

    let overwrite = cp().restore(Restore::default().existing(Existing::Overwrite));
    let before = ino(&dest.join("a.txt"));
    let summary = copied(&overwrite, &src, &dest);
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"hello\n");
    assert_ne!(ino(&dest.join("a.txt")), before, "replaced by rename");
    assert_eq!(summary.counts.replaced, 12, "{:?}", summary.counts);
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

#[test]
fn an_update_leaves_unchanged_files_alone_and_replaces_changed_ones() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    copied(&cp(), &src, &dest);
    let before = snapshot(&dest);
    // Another content and size; only the setgid bit; only the mode.
    write(&src.join("big"), b"shorter now", 0o600);
    chmod(&src.join("empty"), 0o2640);
    chmod(&src.join("sub/deep/f"), 0o600);
    let update = cp().update(true);
    let summary = copied(&update, &src, &dest);
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    assert_eq!(summary.counts.replaced, 3, "{:?}", summary.counts);
    assert_eq!(summary.counts.files, 3, "{:?}", summary.counts);
    let after = snapshot(&dest);
    let changed: Vec<&String> = (before.iter())
        .filter(|(path, facts)| after.get(*path).map(|a| a.0) != Some(facts.0))
        .map(|(path, _)| path)
        .collect();
    assert_eq!(changed, ["big", "empty", "sub/deep/f"]);
    assert_eq!(mode(&dest.join("empty")), 0o2640 & !umask());
    // Nothing changed since: nothing copied.
    let again = copied(&update, &src, &dest);
    assert_eq!(again.counts.files + again.counts.replaced, 0);
    assert_eq!(again.counts.unchanged, 12, "{:?}", again.counts);
    assert_eq!(snapshot(&dest), after);
}

/// A copy made under the umask is what an update under it would make again: a source whose
/// modes the umask masks (group- and world-writable) is found unchanged. (Under a umask of
/// 0 there is nothing to mask, and this shows nothing.)
#[test]
fn an_update_finds_a_copy_made_under_the_umask_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    let exact = |path: &Path, mode| fs::set_permissions(path, fs::Permissions::from_mode(mode));
    fs::create_dir(&src).unwrap();
    fs::create_dir(src.join("shared")).unwrap();
    fs::write(src.join("shared/f"), b"f").unwrap();
    exact(&src.join("shared/f"), 0o666).unwrap();
    exact(&src.join("shared"), 0o777).unwrap();
    let update = cp().update(true);
    copied(&update, &src, &dest);
    assert_eq!(mode(&dest.join("shared/f")), 0o666 & !umask());
    let again = copied(&update, &src, &dest);
    assert_eq!(
        again.counts.files + again.counts.replaced,
        0,
        "{:?}",
        again.counts
    );
    assert_eq!(again.counts.unchanged, 1, "{:?}", again.counts);
}

#[test]
fn a_delete_removes_what_src_lacks_and_keeps_what_is_excluded() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    copied(&cp(), &src, &dest);
    write(&dest.join("extra.txt"), b"x", 0o644);
    fs::create_dir_all(dest.join("sub/extra/x/y")).unwrap();
    write(&dest.join("sub/extra/x/y/z"), b"z", 0o644);
    write(&dest.join("keep.log"), b"log", 0o644);
    write(&dest.join("sub/deep/also.log"), b"log", 0o644);
    let exclude = Exclude::new(["*.log"]).unwrap();
    let update = cp().update(true).exclude(exclude);
    // Without delete, the extras stay.
    let summary = copied(&update, &src, &dest);
    assert_eq!(summary.counts.deleted, 0);
    assert!(dest.join("extra.txt").exists());

    let summary = copied(&update.clone().delete(true), &src, &dest);
    assert_eq!(summary.counts.deleted, 2, "{:?}", summary.counts);
    assert!(!dest.join("extra.txt").exists());
    assert!(!dest.join("sub/extra").exists());
    assert!(dest.join("keep.log").exists());
    assert!(dest.join("sub/deep/also.log").exists());
    fs::remove_file(dest.join("keep.log")).unwrap();
    fs::remove_file(dest.join("sub/deep/also.log")).unwrap();
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

#[test]
fn an_update_replaces_a_file_by_a_directory_and_with_delete_the_reverse() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    write(&src.join("x"), b"a file now", 0o644);
    fs::create_dir_all(src.join("y/z")).unwrap();
    write(&src.join("y/z/f"), b"f", 0o644);
    mkdir(&dest, 0o755);
    fs::create_dir_all(dest.join("x/inside")).unwrap();
    write(&dest.join("x/inside/old"), b"old", 0o644);
    write(&dest.join("y"), b"a file before", 0o644);
    // Without delete a directory is not removed for a file, but a file is for a directory.
    let (result, told) = run(&cp().update(true), &src, &dest);
    assert_eq!(result.unwrap().counts.errors, 1);
    let errors = told.errors();
    assert!(errors[0].contains("/x: already exists"), "{errors:?}");
    assert!(dest.join("x/inside/old").exists());
    assert_eq!(fs::read(dest.join("y/z/f")).unwrap(), b"f");

    let summary = copied(&cp().update(true).delete(true), &src, &dest);
    assert_eq!(summary.counts.replaced, 1, "{:?}", summary.counts);
    assert_eq!(fs::read(dest.join("x")).unwrap(), b"a file now");
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

#[test]
fn hard_links_across_sources_stay_links_with_one_linked() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, dest) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("dest"),
    );
    mkdir(&a, 0o755);
    mkdir(&b, 0o755);
    mkdir(&dest, 0o755);
    write(&a.join("one"), b"shared", 0o644);
    fs::hard_link(a.join("one"), b.join("two")).unwrap();
    let (linked, told) = (Linked::default(), Told::default());
    let progress = Progress::default();
    let cp = cp();
    for src in [&a, &b] {
        let target = dest.join(src.file_name().unwrap());
        cp.run_linked(src, &target, &linked, &progress, &told)
            .unwrap();
    }
    assert_eq!(told.errors(), Vec::<String>::new());
    assert_eq!(ino(&dest.join("a/one")), ino(&dest.join("b/two")));
    // Without the shared `Linked`, two files.
    let other = dir.path().join("other");
    copied(&cp, &b, &other);
    assert_ne!(ino(&other.join("two")), ino(&dest.join("a/one")));
}

#[test]
fn dest_in_src_or_src_itself_is_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    tree(&src);
    let before = snapshot(&src);
    symlink(&src, dir.path().join("via")).unwrap();
    for (dest, problem) in [
        (src.join("sub/copy"), "is inside"),
        (src.join("copy"), "is inside"),
        // DEST's directory named through a symlink into SRC: its inode says where it is.
        (dir.path().join("via/sub/copy"), "is inside"),
        (src.clone(), "itself"),
    ] {
        let (result, _) = run(&cp(), &src, &dest);
        let error = result.unwrap_err().to_string();
        assert!(error.contains(problem), "{}: {error}", dest.display());
    }
    let (result, _) = run(&cp(), &src.join("a.txt"), &src.join("a.txt"));
    assert!(result.unwrap_err().to_string().contains("itself"));
    assert_eq!(snapshot(&src), before, "nothing made");
}

#[test]
fn a_symlink_where_dest_has_an_entry_is_replaced_never_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest, outside) = (
        dir.path().join("src"),
        dir.path().join("dest"),
        dir.path().join("outside"),
    );
    tree(&src);
    mkdir(&outside, 0o755);
    write(&outside.join("victim"), b"orig", 0o644);
    let untouched = snapshot(&outside);
    // DEST itself a symlink to a directory: refused, or replaced by an update.
    symlink(&outside, &dest).unwrap();
    let (result, _) = run(&cp(), &src, &dest);
    let error = result.unwrap_err().to_string();
    assert!(error.contains("already exists"), "{error}");
    assert_eq!(snapshot(&outside), untouched);
    copied(&cp().update(true), &src, &dest);
    assert!(fs::symlink_metadata(&dest).unwrap().is_dir());
    assert_eq!(snapshot(&outside), untouched);
    // Symlinks in the copy where SRC has a directory and a file, for each way of replacing.
    for existing in [Existing::Keep, Existing::Overwrite] {
        for (name, target) in [("sub", outside.clone()), ("a.txt", outside.join("victim"))] {
            let path = dest.join(name);
            match fs::symlink_metadata(&path).unwrap().is_dir() {
                true => fs::remove_dir_all(&path).unwrap(),
                false => fs::remove_file(&path).unwrap(),
            }
            symlink(target, path).unwrap();
        }
        let restore = Restore::default().existing(existing);
        let update = existing == Existing::Keep;
        let (result, told) = run(&cp().restore(restore).update(update), &src, &dest);
        result.unwrap();
        assert_eq!(told.errors(), Vec::<String>::new(), "{existing:?}");
        assert!(fs::symlink_metadata(dest.join("sub")).unwrap().is_dir());
        assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"hello\n");
        assert_eq!(snapshot(&outside), untouched, "{existing:?}");
    }
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

#[test]
fn a_dry_run_writes_nothing_and_tells_what_a_copy_would_do() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    // Into a new DEST: nothing made, each entry told as created.
    let dry = cp().dry_run(true).changes(true);
    let (result, told) = run(&dry, &src, &dest);
    let planned = result.unwrap().counts;
    assert!(fs::symlink_metadata(&dest).is_err(), "DEST made");
    let creates = told.changes(&dest);
    let creates_told = creates.clone();
    assert!(creates.iter().all(|(change, _)| *change == Change::Create));
    let mut told_paths: Vec<String> = creates.into_iter().map(|(_, path)| path).collect();
    told_paths.sort();
    let mut paths: Vec<String> = snapshot(&src).into_keys().collect();
    paths.push(dest.display().to_string());
    paths.sort();
    assert_eq!(
        told_paths, paths,
        "every entry a copy would create, DEST first"
    );
    // The copy itself tells the same creations, its directories' too.
    let (result, told) = run(&cp().changes(true), &src, &dest);
    let done = result.unwrap().counts;
    assert_eq!(
        told.changes(&dest),
        creates_told,
        "a copy tells what its dry run told"
    );
    assert_eq!(
        (
            planned.dirs,
            planned.files,
            planned.symlinks,
            planned.specials
        ),
        (
            done.dirs,
            done.files + done.hard_links,
            done.symlinks,
            done.specials
        )
    );
    // Over an existing DEST with update and delete: told, not done.
    write(&src.join("big"), b"changed", 0o600);
    write(&dest.join("extra"), b"x", 0o644);
    fs::create_dir(dest.join("sub/extra")).unwrap();
    let before = snapshot(&dest);
    let dry = dry.update(true).delete(true);
    let (result, told) = run(&dry, &src, &dest);
    let planned = result.unwrap().counts;
    assert_eq!(told.errors(), Vec::<String>::new());
    assert_eq!(snapshot(&dest), before);
    assert_eq!((planned.deleted, planned.files), (2, 1), "{planned:?}");
    assert_eq!(
        told.changes(&dest),
        [
            (Change::Replace, "big".into()),
            (Change::Delete, "extra".into()),
            (Change::Delete, "sub/extra".into()),
        ]
    );
}

#[test]
fn a_cancelled_copy_stops_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    tree(&src);
    let cancel = Cancel::new();
    cancel.cancel();
    let (result, _) = run(&cp().cancel(cancel), &src, &dest);
    assert!(
        matches!(result, Err(Error::Interrupted { signal: 0 })),
        "{result:?}"
    );
    // DEST's directory may be made before the walk, which copies nothing below it.
    assert_eq!(fs::read_dir(&dest).map_or(0, Iterator::count), 0);
}

#[test]
fn a_single_entry_is_copied_as_dest() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    tree(&src);
    for name in ["big", "sub/link", "fifo"] {
        let dest = dir.path().join(name.replace('/', "-"));
        let summary = copied(&cp(), &src.join(name), &dest);
        assert_eq!(summary.counts.dirs, 0);
        assert_eq!(differences(&src.join(name), &dest), Vec::<String>::new());
        assert_eq!(mode(&src.join(name)), mode(&dest), "{name}");
    }
    assert_eq!(
        fs::read_link(dir.path().join("sub-link")).unwrap(),
        Path::new("../a.txt")
    );
}

/// Writes a sparse file of 200 MiB at `path` (past `chunked::LARGE`: copied in four
/// chunks) with data at several offsets, one across a chunk boundary, and an old time.
fn big_sparse(path: &Path) {
    let file = fs::File::create(path).unwrap();
    file.set_len(200 << 20).unwrap();
    let pattern: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let data: [(u64, &[u8]); 4] = [
        (0, b"head"),
        ((64 << 20) - 3, b"across a chunk boundary"),
        (100 << 20, &pattern),
        ((200 << 20) - 4, b"tail"),
    ];
    for (at, bytes) in data {
        std::os::unix::fs::FileExt::write_at(&file, bytes, at).unwrap();
    }
    chmod(path, 0o640);
    touch(path, 1_000_000_000);
}

/// The threads that copied `path` (or its chunks), once per file or chunk.
fn copied_by(path: &Path) -> Vec<std::thread::ThreadId> {
    let path = path.display().to_string();
    let by = copier::hooks::COPIED_BY.lock().unwrap();
    by.iter()
        .filter(|(p, _)| *p == path)
        .map(|(_, t)| *t)
        .collect()
}

/// The copy of a [`big_sparse`] file at `copy` (metadata `is`; the source's `was`) kept its
/// holes, and its `user.barge` attribute where the source's could be set.
fn holes_and_xattr_kept(was: &fs::Metadata, is: &fs::Metadata, copy: &Path, xattr: bool) {
    assert!(
        is.blocks() <= 2 * was.blocks(),
        "holes kept: {} blocks",
        is.blocks()
    );
    if xattr {
        let mut value = [0; 16];
        let n = rustix::fs::getxattr(copy, "user.barge", &mut value).unwrap();
        assert_eq!(&value[..n], b"kept");
    }
}

#[test]
fn a_large_sparse_file_is_copied_in_chunks_with_its_holes_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    let big = src.join("big.img");
    big_sparse(&big);
    let xattr = rustix::fs::setxattr(&big, "user.barge", b"kept", rustix::fs::XattrFlags::empty());
    copied(&cp().archive(true), &src, &dest);
    let copy = dest.join("big.img");
    assert_eq!(copied_by(&copy).len(), 4, "one per chunk");
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    let (was, is) = (fs::metadata(&big).unwrap(), fs::metadata(&copy).unwrap());
    assert_eq!((is.len(), is.mode()), (was.len(), was.mode()));
    assert_eq!(
        (is.mtime(), is.mtime_nsec()),
        (was.mtime(), was.mtime_nsec())
    );
    holes_and_xattr_kept(&was, &is, &copy, xattr.is_ok());
}

/// The chunks of one large file, copied on two threads: the thread that takes the second
/// job has its own fd table, without the first writer's fds, so it opens the source and
/// the copy itself (by name, checked by inode).
#[test]
fn two_threads_copy_the_chunks_of_one_file_each_with_its_own_fd_table() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    // Its first writer waits, after a chunk, until another thread has copied one.
    let name = format!("chunks-{}", copier::hooks::HELD);
    big_sparse(&src.join(&name));
    copied(&cp(), &src, &dest);
    let mut threads = copied_by(&dest.join(&name));
    assert_eq!(threads.len(), 4, "one per chunk");
    threads.sort_by_key(|t| format!("{t:?}"));
    threads.dedup();
    assert_eq!(threads.len(), 2, "one thread copied every chunk");
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    assert_eq!(times_and_modes(&src), times_and_modes(&dest));
}

/// The copy of a large file is replaced by another file (renamed over its name) before
/// the second thread opens it: that thread writes nothing, the copy fails naming the
/// entry, and the file that took the name is left as it is.
#[test]
fn a_copy_replaced_before_its_second_writer_opens_it_fails_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    let name = format!("swapped-{}", copier::hooks::HELD);
    big_sparse(&src.join(&name));
    let hook: &'static str = Box::leak(name.clone().into_boxed_str());
    copier::hooks::SWAP_AT.lock().unwrap().push(hook);
    let (result, told) = run(&cp(), &src, &dest);
    result.unwrap();
    let errors = told.errors();
    let copy = dest.join(&name).display().to_string();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].starts_with(&format!("{copy}: another file took its name")),
        "{errors:?}"
    );
    assert_eq!(
        fs::read(dest.join(&name)).unwrap(),
        copier::hooks::SWAPPED_IN
    );
    assert_eq!(fs::read_dir(&dest).unwrap().count(), 1);
}

#[test]
fn a_chunk_that_fails_leaves_no_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    big_sparse(&src.join("fails.img"));
    copier::hooks::FAIL_AT
        .lock()
        .unwrap()
        .push(("fails.img", 100 << 20, None));
    let (result, told) = run(&cp(), &src, &dest);
    assert!(result.unwrap().stopped);
    let name = dest.join("fails.img").display().to_string();
    let errors = told.errors();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].starts_with(&format!("{name}: ")), "{errors:?}");
    let left: Vec<_> = fs::read_dir(&dest).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
    // A replacement that fails leaves the file it was to replace, and no temporary one.
    write(&dest.join("fails.img"), b"before", 0o644);
    let overwrite = Restore::default().existing(Existing::Overwrite);
    let (result, told) = run(&cp().restore(overwrite), &src, &dest);
    assert!(result.unwrap().stopped);
    assert_eq!(told.errors().len(), 1);
    assert_eq!(fs::read(dest.join("fails.img")).unwrap(), b"before");
    assert_eq!(fs::read_dir(&dest).unwrap().count(), 1);
}

#[test]
fn a_large_file_cancelled_in_a_chunk_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("cancelled.img");
    big_sparse(&src);
    let cancel = Cancel::new();
    let hook = ("cancelled-copy", 0, Some(cancel.clone()));
    copier::hooks::FAIL_AT.lock().unwrap().push(hook);
    // One thread: the chunks after the first are not started.
    let dest = dir.path().join("cancelled-copy");
    let (result, _) = run(&Cp::new().threads(1).cancel(cancel), &src, &dest);
    assert!(
        matches!(result, Err(Error::Interrupted { .. })),
        "{result:?}"
    );
    assert!(!dest.exists());
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn the_files_of_one_directory_are_copied_by_several_threads() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    // Every name but one: the thread that copies that one waits for another to copy one.
    let names: Vec<_> = (1..64)
        .map(|i| format!("f{i}"))
        .chain([copier::hooks::HELD.to_string()])
        .collect();
    for name in &names {
        write(&src.join(name), &[7; 256 << 10], 0o644);
    }
    copied(&cp(), &src, &dest);
    let mut threads: Vec<_> = (names.iter())
        .flat_map(|name| copied_by(&dest.join(name)))
        .collect();
    assert_eq!(threads.len(), 64, "each file copied once");
    threads.sort_by_key(|t| format!("{t:?}"));
    threads.dedup();
    assert!(threads.len() > 1, "one thread copied them all");
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

/// Sixteen threads on a crowded directory (files past `SPREAD`, jobs for any thread, each
/// keeping its place a while, so that more threads start and pile up): never more than
/// `PER_DIR` create entries in it at once, and every file is copied.
#[test]
fn at_most_per_dir_threads_create_in_one_directory_at_once() {
    use crate::threads::{hooks, PER_DIR};
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    for i in 0..200 {
        write(&src.join(format!("f{i}")), &[7; 64 << 10], 0o644);
    }
    let _counting = hooks::COUNTING.lock().unwrap_or_else(|e| e.into_inner());
    hooks::MOST.store(0, std::sync::atomic::Ordering::Relaxed);
    let cp = Cp {
        dwell: std::time::Duration::from_millis(2),
        ..Cp::new().threads(16)
    };
    assert_eq!(copied(&cp, &src, &dest).counts.files, 200);
    let most = hooks::MOST.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        (1..=PER_DIR).contains(&most),
        "{most} threads in one directory"
    );
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

/// Sixteen threads on several large files (each copied in four chunks, each chunk's copier
/// keeping its place a while, so that without the cap more would pile up on one file):
/// never more than `WRITERS` copy chunks of one file at once, and every file is copied.
#[test]
fn at_most_writers_threads_copy_chunks_of_one_file_at_once() {
    use copier::hooks::{MOST_WRITERS, WRITERS};
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    for i in 0..4 {
        big_sparse(&src.join(format!("big{i}")));
    }
    MOST_WRITERS.store(0, Relaxed);
    let cp = Cp {
        dwell: std::time::Duration::from_millis(20),
        ..Cp::new().threads(16)
    };
    assert_eq!(copied(&cp, &src, &dest).counts.files, 4);
    let most = MOST_WRITERS.load(Relaxed);
    assert!(
        (1..=WRITERS as usize).contains(&most),
        "{most} threads copying chunks of one file"
    );
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

/// Every path below `root`, and its snapshot's fields but the inode, for comparing copies.
fn times_and_modes(root: &Path) -> BTreeMap<String, (u32, i64, i64, u64)> {
    (snapshot(root).into_iter())
        .map(|(path, (_, mode, sec, nsec, size))| (path, (mode, sec, nsec, size)))
        .collect()
}

#[test]
fn three_parts_then_their_links_then_the_top_make_the_whole_copy() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    tree(&src);
    // Deeper than the parts are cut, links from near the top to the bottom.
    mkdir(&src.join("sub/deep/er"), 0o755);
    mkdir(&src.join("sub/deep/er/est"), 0o755);
    write(&src.join("sub/deep/er/est/f"), b"bottom", 0o640);
    fs::hard_link(src.join("sub/deep/er/est/f"), src.join("top-f")).unwrap();
    fs::hard_link(src.join("hard1"), src.join("sub/deep/er/hard3")).unwrap();
    age(&src);
    // Split at each depth: the parts are the top entries, those two levels down, or three.
    for split in 1..=SPINE {
        let dest = dir.path().join(format!("dest-{split}"));
        let ranks = 3;
        let mut done = CpSummary::default();
        // Step 1: each process its part; the names of linked files are left.
        let mut deferred = Vec::new();
        for rank in 0..ranks {
            let linked = Linked::default();
            let (result, told) = {
                let told = Told::default();
                let cp = cp().part(Part::Rank { rank, ranks, split });
                let result = cp.run_linked(&src, &dest, &linked, &Progress::default(), &told);
                (result, told)
            };
            done.add(&result.unwrap());
            assert_eq!(told.errors(), Vec::<String>::new());
            deferred.extend(linked.take_deferred());
        }
        assert_eq!(deferred.len(), 5, "{deferred:?}");
        assert!(!dest.join("hard1").exists(), "linked files wait for step 2");
        // Step 2: each process the files link_owner gives it, by file.
        deferred.sort();
        for rank in 0..ranks {
            let names: Vec<Vec<u8>> = (deferred.iter())
                .filter(|(key, _)| link_owner(*key, ranks) == rank)
                .map(|(_, path)| path.clone())
                .collect();
            let told = Told::default();
            let linked = Linked::default();
            let links = cp().run_links(&src, &dest, &names, &linked, &Progress::default(), &told);
            done.add(&links.unwrap());
            assert_eq!(told.errors(), Vec::<String>::new());
        }
        // Step 3: the directories above the parts, once.
        done.add(&copied(&cp().part(Part::Spine { split }), &src, &dest));
        assert_eq!(differences(&src, &dest), Vec::<String>::new());
        assert_eq!(times_and_modes(&src), times_and_modes(&dest));
        assert_eq!(
            ino(&dest.join("hard1")),
            ino(&dest.join("sub/deep/er/hard3"))
        );
        assert_eq!(
            ino(&dest.join("top-f")),
            ino(&dest.join("sub/deep/er/est/f"))
        );
        // Counted once each, as one process's copy counts them.
        let whole = copied(&cp(), &src, &dir.path().join(format!("whole-{split}")));
        assert_eq!(done.counts, whole.counts);
    }
}

#[test]
fn a_ledger_gives_the_first_listed_half_and_nothing_once_closed() {
    let ledger = Ledger::default();
    let path = |name: &str| name.as_bytes().to_vec();
    ledger.list(["p0", "p1", "p2", "p3", "p4"].map(path));
    assert!(ledger.begin(b"p4"));
    assert_eq!(
        ledger.give(),
        [path("p0"), path("p1")],
        "half of 4, first listed"
    );
    assert!(!ledger.begin(b"p0"), "given away");
    ledger.list([path("p1")]);
    assert_eq!(ledger.pending(), 2, "a part given away stays given");
    assert!(ledger.begin(b"p9"), "a part never listed is begun");
    assert!(ledger.is_walking());
    ledger.close();
    assert_eq!((ledger.pending(), ledger.is_walking()), (0, false));
    ledger.list([path("q")]);
    assert!(ledger.give().is_empty(), "nothing listed once closed");
    ledger.receive(&[path("r")]);
    assert!(ledger.was_given(b"r") && !ledger.was_given(b"p2"));
    assert_eq!(ledger.traded(), (2, 1));
}

#[test]
fn parts_given_away_are_copied_once_by_the_process_given_them() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    for i in 0..12 {
        let part = src.join(format!("d{i}"));
        mkdir(&part, 0o755);
        mkdir(&part.join("sub"), 0o750);
        write(&part.join("sub/f"), format!("{i}").as_bytes(), 0o640);
    }
    write(&src.join("top"), b"top", 0o644);
    age(&src);
    let (ranks, split) = (2, 1);
    let share = |rank, ledger: &Arc<Ledger>| {
        cp().part(Part::Rank { rank, ranks, split })
            .ledger(ledger.clone())
    };
    let mut done = CpSummary::default();
    // Process 1 listed its parts and gives half of them away before it begins them.
    let (mine, given) = (Arc::new(Ledger::default()), Arc::new(Ledger::default()));
    let parts = (0..12).map(|i| format!("d{i}").into_bytes());
    given.list(parts.filter(|path| part_owner(path, ranks) == 1));
    let listed = given.pending();
    let away = given.give();
    assert_eq!(away.len() as u64, listed.div_ceil(2), "{listed} listed");
    assert!(!away.is_empty() && given.pending() == listed - away.len() as u64);
    done.add(&copied(&share(1, &given), &src, &dest));
    given.close();
    assert_eq!(given.pending(), 0);
    for path in &away {
        let path = Path::new(std::ffi::OsStr::from_bytes(path));
        assert!(!dest.join(path).exists(), "{path:?} was given away");
    }
    // Process 0 copies its own parts, then those it was given, then the top.
    done.add(&copied(&share(0, &mine), &src, &dest));
    mine.close();
    mine.receive(&away);
    let members = Members::new(&away).unwrap();
    done.add(&copied(&share(0, &mine).members(members), &src, &dest));
    done.add(&copied(&cp().part(Part::Spine { split }), &src, &dest));
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    assert_eq!(times_and_modes(&src), times_and_modes(&dest));
    let whole = copied(&cp(), &src, &dir.path().join("whole"));
    assert_eq!(done.counts, whole.counts, "each entry counted once");
}

/// An update compares a directory's extended attributes as it does a file's: a directory
/// whose attribute differs in DEST gets SRC's again, one holding an attribute SRC lacks
/// loses it, and one that matches is not touched (its change time stays).
#[test]
fn an_update_compares_directories_extended_attributes() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    for name in ["tagged", "same", "bare"] {
        mkdir(&src.join(name), 0o755);
    }
    let set = |path: &Path, name: &str, value: &[u8]| {
        rustix::fs::setxattr(path, name, value, rustix::fs::XattrFlags::empty()).unwrap()
    };
    let get = |path: &Path, name: &str| {
        let mut value = [0; 16];
        let n = rustix::fs::getxattr(path, name, &mut value);
        n.map(|n| value[..n].to_vec())
    };
    set(&src.join("tagged"), "user.tag", b"one");
    set(&src.join("same"), "user.tag", b"same");
    let archive = cp().archive(true);
    copied(&archive, &src, &dest);
    set(&dest.join("tagged"), "user.tag", b"two");
    set(&dest.join("bare"), "user.extra", b"DEST only");
    let changed = |path: &Path| {
        let meta = fs::symlink_metadata(path).unwrap();
        (meta.ctime(), meta.ctime_nsec())
    };
    let same = changed(&dest.join("same"));
    copied(&archive.clone().update(true), &src, &dest);
    assert_eq!(get(&dest.join("tagged"), "user.tag"), Ok(b"one".to_vec()));
    assert_eq!(get(&dest.join("bare"), "user.extra"), Err(Errno::NODATA));
    assert_eq!(get(&dest.join("same"), "user.tag"), Ok(b"same".to_vec()));
    assert_eq!(
        changed(&dest.join("same")),
        same,
        "a matching directory was touched"
    );
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
}

#[test]
fn a_large_file_left_by_the_parts_is_made_once_copied_by_each_and_finished_once() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    mkdir(&src.join("a"), 0o755);
    let big = src.join("a/big.img");
    big_sparse(&big);
    let xattr = rustix::fs::setxattr(&big, "user.barge", b"kept", rustix::fs::XattrFlags::empty());
    age(&src);
    let (ranks, progress, told) = (2, Progress::default(), Told::default());
    // Step 1: the parts leave the large file, with its size, to all the processes.
    let mut wide = Vec::new();
    for rank in 0..ranks {
        let linked = Linked::default();
        let cp = cp().part(Part::Rank {
            rank,
            ranks,
            split: SPINE,
        });
        cp.run_linked(&src, &dest, &linked, &progress, &told)
            .unwrap();
        wide.extend(linked.take_wide());
    }
    assert_eq!(wide, vec![(b"a/big.img".to_vec(), 200 << 20)]);
    assert!(!dest.join("a/big.img").exists(), "the large file waits");
    // Step 2: one process makes it, sized, with no data and not its time yet.
    let linked = Linked::default();
    let path = &wide[0].0[..];
    let (made, _) = cp()
        .make_wide(&src, &dest, path, &linked, &progress, &told)
        .unwrap();
    let made = made.expect("made");
    let copy = dest.join("a/big.img");
    assert_eq!(fs::metadata(&copy).unwrap().len(), 200 << 20);
    assert_ne!(fs::metadata(&copy).unwrap().mtime(), 1_000_000_000);
    // Step 3: the processes copy their ranges (here: every other one each).
    let ranges: Vec<_> = (0..(200u64 << 20).div_ceil(WIDE_CHUNK))
        .map(|c| c * WIDE_CHUNK..((c + 1) * WIDE_CHUNK).min(200 << 20))
        .collect();
    for rank in 0..ranks as usize {
        for range in ranges.iter().skip(rank).step_by(ranks as usize) {
            cp().copy_wide(&src, &dest, (path, &made), range.clone(), &progress, &told)
                .unwrap();
        }
    }
    // Step 4: the one that made it finishes it; the directories above get their metadata.
    let done = cp().finish_wide(&src, &dest, (path, &made), true, &linked, &progress, &told);
    assert_eq!(done.unwrap().counts.files, 1);
    copied(&cp().part(Part::Spine { split: SPINE }), &src, &dest);
    assert_eq!(told.errors(), Vec::<String>::new());
    assert_eq!(differences(&src, &dest), Vec::<String>::new());
    assert_eq!(times_and_modes(&src), times_and_modes(&dest));
    let (was, is) = (fs::metadata(&big).unwrap(), fs::metadata(&copy).unwrap());
    holes_and_xattr_kept(&was, &is, &copy, xattr.is_ok());
}

#[test]
fn a_wide_copy_with_a_failed_range_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dest) = (dir.path().join("src"), dir.path().join("dest"));
    mkdir(&src, 0o755);
    big_sparse(&src.join("big.img"));
    mkdir(&dest, 0o755);
    let (progress, told, linked) = (Progress::default(), Told::default(), Linked::default());
    let (made, _) = cp()
        .make_wide(&src, &dest, b"big.img", &linked, &progress, &told)
        .unwrap();
    let made = made.expect("made");
    assert!(dest.join("big.img").exists());
    let done = cp().finish_wide(
        &src,
        &dest,
        (b"big.img", &made),
        false,
        &linked,
        &progress,
        &told,
    );
    assert_eq!(done.unwrap().counts.files, 0);
    assert!(
        !dest.join("big.img").exists(),
        "no copy that is not whole stays"
    );
}

#[test]
fn the_copy_of_a_directory_of_another_thread_is_reopened_by_name_and_inode_only() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    fs::create_dir_all(dir.path().join("x/y")).unwrap();
    fs::create_dir_all(outside.path().join("y")).unwrap();
    let open = |at: BorrowedFd<'_>, name: &str| openat(at, name, DIR_FLAGS, Mode::empty());
    let root = DestFd::before_walk(open(CWD, dir.path().to_str().unwrap()).unwrap());
    let ino = fs::metadata(dir.path().join("x/y")).unwrap().ino();
    // Opened by a thread with its own fd table, as a walk's helper opens it.
    let y = std::thread::scope(|scope| {
        let solo = scope.spawn(|| {
            crate::sys::thread::go_solo();
            let x = open(root.as_fd(), "x").unwrap();
            DestFd::new(open(x.as_fd(), "y").unwrap(), Some(&root), b"x/y", ino)
        });
        solo.join().unwrap()
    });
    let fd = y.reopen().unwrap();
    let here = statx(&fd, "", AtFlags::EMPTY_PATH, StatxFlags::INO).unwrap();
    assert_eq!(here.stx_ino, ino);
    // `x` swapped for another directory since: stale, not the other `y`.
    fs::rename(dir.path().join("x"), dir.path().join("x.old")).unwrap();
    fs::create_dir_all(dir.path().join("x/y")).unwrap();
    assert_eq!(y.reopen().err(), Some(Errno::STALE));
    // For a symlink to a tree outside: not followed.
    fs::remove_dir_all(dir.path().join("x")).unwrap();
    symlink(outside.path(), dir.path().join("x")).unwrap();
    let error = y.reopen().err();
    assert!(
        matches!(error, Some(Errno::LOOP | Errno::NOTDIR)),
        "{error:?}"
    );
}
