//! barge under the system's limits: where no thread can be started (a task limit, `ulimit
//! -u`), a command goes on with the threads it has, or fails saying why; it never panics.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;

use crate::common::*;

/// `barge ARGS` as a uid of its own (no other process counts against its task limit) that
/// may have one task: itself, and no thread more.
fn alone(bin: &Path, uid: u32, args: &[&std::ffi::OsStr]) -> Output {
    run(with_task_limit(uid, 1).arg(bin).args(args), None)
}

#[test]
#[ignore = "needs root to run barge as a user of its own under a task limit"]
fn without_a_thread_to_start_commands_go_on_alone_or_say_why() {
    require_root();
    let work = tempdir();
    fs::set_permissions(work.path(), fs::Permissions::from_mode(0o777)).unwrap();
    let bin = copy_bin(work.path());
    // Enough directories for every walker and engine to want more threads.
    let src = work.path().join("src");
    for d in 0..300 {
        let dir = src.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..4 {
            file(
                &dir.join(format!("f{f}")),
                format!("{d}/{f}").as_bytes(),
                0o644,
            );
        }
    }
    let archive = work.path().join("a.barge");
    run_ok(&mut pack_cmd(&src, &archive), None);
    let uid = 200_000 + std::process::id();
    let at = |name: &str| work.path().join(name);
    let os = |s: &str| std::ffi::OsString::from(s);
    let works: [(&str, Vec<std::ffi::OsString>); 4] = [
        (
            "unpack",
            vec![
                os("unpack"),
                os("--engine"),
                os("threads"),
                archive.clone().into(),
                at("u").into(),
            ],
        ),
        (
            "cp",
            vec![
                os("cp"),
                os("--progress"),
                src.clone().into(),
                at("c").into(),
            ],
        ),
        ("du", vec![os("du"), src.clone().into()]),
        ("list", vec![os("list"), archive.clone().into()]),
    ];
    // An existing DEST: a new one needs a process that removes it if the unpack is cut off.
    fs::create_dir(at("u")).unwrap();
    std::os::unix::fs::chown(at("u"), Some(uid), Some(uid)).unwrap();
    for (what, args) in works {
        let args: Vec<_> = args.iter().map(|a| a.as_os_str()).collect();
        let out = alone(&bin, uid, &args);
        assert!(out.status.success(), "{what}: {out:?}");
        if let Some(dest) = [("unpack", "u"), ("cp", "c")].iter().find(|w| w.0 == what) {
            assert_same_tree(&src, &at(dest.1), 0);
        }
    }
    let out = alone(
        &bin,
        uid,
        &[
            os("unpack").as_os_str(),
            archive.as_os_str(),
            at("new").as_os_str(),
        ],
    );
    assert_clean_failure(
        &out,
        &["new: fork its keeper", "Resource temporarily"],
        "new DEST",
    );
    assert!(!at("new").exists());
    // pack needs its writer's thread: a clear error, nothing written.
    let out = alone(
        &bin,
        uid,
        &[
            os("pack").as_os_str(),
            src.as_os_str(),
            os("-o").as_os_str(),
            at("p").as_os_str(),
        ],
    );
    assert_clean_failure(&out, &["start the archive writer's thread"], "pack");
    assert!(!at("p").exists());
}
