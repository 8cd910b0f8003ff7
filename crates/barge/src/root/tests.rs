//! The destination's rules driven through `open_dest` and `prepare_dest`: a new DEST (and its
//! missing parents) appears whole or not at all, an existing one is merged into, a symlink
//! or a file in its place is refused, and nothing is ever created through a symlink.

use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// Creates the file `name` in the directory `dir`.
fn create(dir: &OwnedFd, name: &str) {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC;
    openat(dir, name, flags, Mode::from_raw_mode(0o644)).unwrap();
}

#[test]
fn a_new_dest_lands_hidden_and_is_renamed_into_place_when_finished() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("new");
    let mut destination = open_dest(&dest, false, None, 0o751).unwrap();
    assert!(destination.is_new());
    assert_eq!(destination.confinement, Confinement::Off);
    let root = destination.root().unwrap();
    create(&root, "f");
    // While it lands: a private hidden sibling, not DEST.
    let hidden = names(parent.path());
    assert_eq!(hidden.len(), 1, "{hidden:?}");
    assert!(hidden[0].starts_with(".new.barge-"), "{hidden:?}");
    assert_eq!(mode(&parent.path().join(&hidden[0])), 0o700);
    destination.finish(true, None).unwrap();
    assert_eq!(names(parent.path()), ["new"]);
    assert_eq!(names(&dest), ["f"]);
    assert_eq!(mode(&dest), 0o751);
}

#[test]
fn a_landing_that_failed_or_was_dropped_leaves_nothing() {
    for dest in ["new", "a/b/c"] {
        let parent = tempfile::tempdir().unwrap();
        let dest = parent.path().join(dest);
        let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
        create(&destination.root().unwrap(), "f");
        destination.finish(false, None).unwrap();
        assert_eq!(names(parent.path()), Vec::<String>::new(), "finished");

        let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
        create(&destination.root().unwrap(), "f");
        drop(destination);
        assert_eq!(names(parent.path()), Vec::<String>::new(), "dropped");
    }
}

#[test]
fn missing_parents_are_staged_with_dest_and_get_the_usual_mode() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("a/b/c");
    let mut destination = open_dest(&dest, false, None, 0o750).unwrap();
    create(&destination.root().unwrap(), "f");
    let hidden = names(parent.path());
    assert!(
        hidden.len() == 1 && hidden[0].starts_with(".a.barge-"),
        "{hidden:?}"
    );
    // The archive's root mode is DEST's; the parents keep the usual one.
    destination.finish(true, Some(0o711)).unwrap();
    assert_eq!(names(parent.path()), ["a"]);
    assert_eq!(names(&dest), ["f"]);
    assert_eq!(mode(&parent.path().join("a")), 0o750);
    // Made by mkdirat under the process's umask, as `mkdir -p` makes it.
    assert_eq!(mode(&parent.path().join("a/b")), 0o750 & !process_umask());
    assert_eq!(mode(&dest), 0o711);
}

#[test]
fn an_archives_root_mode_replaces_a_new_dests_mode_and_leaves_an_existing_one() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("new");
    let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
    destination.finish(true, Some(0o701)).unwrap();
    assert_eq!(mode(&dest), 0o701);
    fs::set_permissions(&dest, fs::Permissions::from_mode(0o705)).unwrap();
    let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
    destination.finish(true, Some(0o711)).unwrap();
    assert_eq!(mode(&dest), 0o705);
}

#[test]
fn an_existing_dest_is_merged_into_and_handed_out_once() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("there");
    fs::create_dir(&dest).unwrap();
    fs::write(dest.join("old"), b"old").unwrap();
    // A trailing slash names the same directory.
    let mut slashed = dest.clone().into_os_string();
    slashed.push("/");
    let mut destination = open_dest(Path::new(&slashed), false, None, 0o755).unwrap();
    assert!(!destination.is_new());
    let root = destination.root().unwrap();
    assert!(statat(&root, "old", AtFlags::SYMLINK_NOFOLLOW).is_ok());
    create(&root, "new");
    assert!(destination.root().is_err(), "a second lander");
    destination.finish(true, None).unwrap();
    assert_eq!(names(parent.path()), ["there"]);
    assert_eq!(names(&dest), ["new", "old"]);
}

#[test]
fn a_dest_that_is_a_symlink_or_a_file_is_refused_and_nothing_is_made_through_it() {
    let parent = tempfile::tempdir().unwrap();
    let p = |name: &str| parent.path().join(name);
    fs::create_dir(p("target")).unwrap();
    fs::write(p("file"), b"").unwrap();
    symlink(p("target"), p("link")).unwrap();
    symlink(p("missing"), p("dangling")).unwrap();
    let refused = |dest: PathBuf| {
        let error = open_dest(&dest, false, None, 0o755).unwrap_err();
        match &error {
            Error::NotADirectory { found, .. } => *found,
            _ => panic!("{}: {error}", dest.display()),
        }
    };
    assert_eq!(refused(p("link")), "a symlink");
    // A trailing slash would have the kernel follow it.
    assert_eq!(refused(p("link/")), "a symlink");
    assert_eq!(refused(p("dangling")), "a symlink");
    assert_eq!(refused(p("file")), "a regular file");
    let shown = open_dest(&p("link"), false, None, 0o755)
        .unwrap_err()
        .to_string();
    assert!(
        shown.ends_with("link is a symlink, not a directory; refusing to follow or replace it"),
        "{shown}"
    );
    // Below a file: no directory can be made there.
    let below = open_dest(&p("file/sub"), false, None, 0o755).unwrap_err();
    assert!(below.to_string().contains("not a directory"), "{below}");
    assert_eq!(names(parent.path()), ["dangling", "file", "link", "target"]);
    assert_eq!(names(&p("target")), Vec::<String>::new());
}

#[test]
fn dot_dot_below_a_missing_directory_is_refused() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("missing/../x");
    let error = open_dest(&dest, false, None, 0o755)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("'..' follows a directory that does not exist"),
        "{error}"
    );
    assert_eq!(names(parent.path()), Vec::<String>::new());
}

#[test]
fn a_name_taken_while_landing_is_never_replaced() {
    let parent = tempfile::tempdir().unwrap();
    let dest = parent.path().join("new");
    // An empty directory too: a plain rename would replace it.
    for taken in ["empty directory", "file"] {
        let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
        create(&destination.root().unwrap(), "landed");
        match taken {
            "file" => fs::write(&dest, b"theirs").unwrap(),
            _ => fs::create_dir(&dest).unwrap(),
        }
        let error = destination.finish(true, None).unwrap_err().to_string();
        assert!(error.contains("cannot move into place"), "{taken}: {error}");
        assert_eq!(
            names(parent.path()),
            ["new"],
            "{taken}: the staged tree is removed"
        );
        match taken {
            "file" => {
                assert_eq!(fs::read(&dest).unwrap(), b"theirs");
                fs::remove_file(&dest).unwrap();
            }
            _ => {
                assert_eq!(names(&dest), Vec::<String>::new());
                fs::remove_dir(&dest).unwrap();
            }
        }
    }
}

#[test]
fn a_staged_name_stays_within_a_names_length() {
    let parent = tempfile::tempdir().unwrap();
    let long = "n".repeat(255);
    let dest = parent.path().join(&long);
    let mut destination = open_dest(&dest, false, None, 0o755).unwrap();
    destination.finish(true, None).unwrap();
    assert_eq!(names(parent.path()), [long]);
}

#[test]
fn a_keeper_that_cannot_start_leaves_no_staged_tree() {
    // Another thread is alive, so the keeper's fork is refused (a forked child of a
    // threaded process could hang on another thread's lock): the sandbox is never entered.
    let (hold, release) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || release.recv());
    let parent = tempfile::tempdir().unwrap();
    let error = open_dest(&parent.path().join("a/new"), true, None, 0o755).unwrap_err();
    drop(hold);
    let _ = other.join();
    assert!(error.to_string().contains("fork its keeper"), "{error}");
    assert_eq!(names(parent.path()), Vec::<String>::new());
}

#[test]
fn a_servers_dest_is_made_with_its_parents_and_named_without_symlinks() {
    let parent = tempfile::tempdir().unwrap();
    let real = parent.path().canonicalize().unwrap().join("real");
    fs::create_dir(&real).unwrap();
    symlink(&real, parent.path().join("via")).unwrap();
    let prepared = prepare_dest(&parent.path().join("via/a/b/c"), 0o027).unwrap();
    assert_eq!(prepared.path, real.join("a/b/c"));
    assert!(prepared.free > 0);
    assert_eq!(mode(&real.join("a")), 0o750);
    assert_eq!(mode(&real.join("a/b")), 0o750 & !process_umask());
    assert_eq!(mode(&real.join("a/b/c")), 0o750);
    // Prepared again: kept as it is.
    fs::write(real.join("a/b/c/kept"), b"").unwrap();
    let again = prepare_dest(&parent.path().join("via/a/b/c"), 0o022).unwrap();
    assert_eq!(again.path, prepared.path);
    assert_eq!(names(&real.join("a/b/c")), ["kept"]);
    assert_eq!(mode(&real.join("a/b/c")), 0o750);
    let link = parent.path().join("link");
    symlink(&real, &link).unwrap();
    assert!(matches!(
        prepare_dest(&link, 0o022),
        Err(Error::NotADirectory { .. })
    ));
}

#[test]
fn split_gives_a_paths_directory_and_last_component() {
    let split_of = |path: &str| {
        split(Path::new(path)).map(|(dir, name)| {
            (
                dir.display().to_string(),
                String::from_utf8(name.to_vec()).unwrap(),
            )
        })
    };
    assert_eq!(split_of("a").unwrap(), (".".into(), "a".into()));
    assert_eq!(split_of("a/").unwrap(), (".".into(), "a".into()));
    assert_eq!(split_of("/x/y").unwrap(), ("/x".into(), "y".into()));
    assert_eq!(split_of("x/y/z").unwrap(), ("x/y".into(), "z".into()));
    for none in [".", "..", "/", "a/.."] {
        let error = split_of(none).unwrap_err().to_string();
        assert!(error.contains("names no entry"), "{none}: {error}");
    }
}
