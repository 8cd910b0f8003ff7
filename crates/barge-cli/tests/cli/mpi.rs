//! `barge cp --mpi` under `mpiexec -n 4` (the `mpi` feature, MPICH from `scripts/deps --mpi`):
//! the ranks' copy equals the plain `barge cp` copy by scripts/compare-trees (hard links
//! across the ranks' parts, xattrs, times, modes), and a job with one rank killed mid-copy
//! is finished by `--update` into the same tree, the part done before kept. `barge pack
//! --mpi` makes one valid archive (`barge verify`) that lists and unpacks as a plain pack
//! of the same tree does, raw and zstd, hard links across the ranks' shares kept.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::common::{
    as_nobody, barge, bin, file, is_root, require_root, run, run_ok, skipped, spawn, tempdir,
    wait_output,
};
use crate::cp::assert_equal_trees;
use crate::fidelity::{every_kind, set_xattr};

/// The ranks of each job, as CI runs them (MPICH oversubscribes a small machine).
const RANKS: &str = "4";

/// `mpiexec -n 4 barge cp --mpi ARGS` (the binary under test has the `mpi` feature).
fn mpi_cp(args: &[&Path], extra: &[&str]) -> Command {
    mpi_cp_by(Command::new("mpiexec"), args, extra)
}

/// [`mpi_cp`] run by `cmd` (`mpiexec` or a command that runs it).
fn mpi_cp_by(cmd: Command, args: &[&Path], extra: &[&str]) -> Command {
    mpi_by(cmd, "cp", args, extra)
}

/// `mpiexec -n 4 barge COMMAND --mpi --json EXTRA ARGS` run by `cmd`.
fn mpi_by(cmd: Command, command: &str, args: &[&Path], extra: &[&str]) -> Command {
    mpi_on(RANKS, cmd, command, args, extra)
}

/// [`mpi_by`] with `ranks` ranks.
fn mpi_on(ranks: &str, mut cmd: Command, command: &str, args: &[&Path], extra: &[&str]) -> Command {
    cmd.args(["-n", ranks])
        .arg(bin())
        .args([command, "--mpi", "--json"]);
    cmd.args(extra).args(args);
    cmd
}

/// Runs `cmd` to success; returns its JSON summary.
fn summary(cmd: &mut Command) -> Value {
    let out: Output = run_ok(cmd, None);
    let text = String::from_utf8_lossy(&out.stdout);
    // Rank 0 alone prints it: one line.
    assert_eq!(text.lines().count(), 1, "one summary: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// A tree the ranks split several ways: [`every_kind`], then directories on the levels the
/// parts are cut at and below, each with files, xattrs and nanosecond times, and hard links
/// whose names lie in different parts (so on different ranks). Returns its file count.
fn wide_tree(root: &Path, files_per_dir: usize) -> usize {
    every_kind(&root.join("kinds"), is_root());
    let mut files = 0;
    for a in 0..6 {
        for b in 0..4 {
            let dir = root.join(format!("p{a}/q{b}/r/s"));
            fs::create_dir_all(&dir).unwrap();
            for f in 0..files_per_dir {
                let data = format!("{a}/{b}/{f}\n").repeat(f % 7 + 1);
                file(&dir.join(format!("f{f}")), data.as_bytes(), 0o640);
                file(
                    &root.join(format!("p{a}/q{b}/g{f}")),
                    b"near the top",
                    0o604,
                );
                files += 2;
            }
            set_xattr(&dir.join("f0"), "user.part", format!("{a}{b}").as_bytes());
        }
    }
    file(&root.join("p0/q0/r/s/big"), &vec![7u8; 3 << 20], 0o644);
    for (i, name) in ["p1/linked", "p2/q1/linked", "p5/q3/r/linked", "top-linked"]
        .iter()
        .enumerate()
    {
        fs::hard_link(root.join("p0/q0/r/s/f1"), root.join(name)).unwrap();
        fs::hard_link(root.join("p3/q2/r/s/f2"), root.join(format!("{name}-{i}"))).unwrap();
    }
    // Times last: creating entries changed their directories'.
    for (n, dir) in ["p0", "p1/q1", "p4/q3/r", "p2/q0/r/s"].iter().enumerate() {
        crate::common::set_mtime(&root.join(dir), 1_000_000_000 + n as i64, 123_456_789);
    }
    files + 1
}

#[test]
fn mpi_copy_equals_the_plain_copy() {
    let work = tempdir();
    let src = work.path().join("src");
    wide_tree(&src, 5);
    let plain = work.path().join("plain");
    run_ok(barge(["cp", "-a"]).arg(&src).arg(&plain), None);
    let ranks = work.path().join("ranks");
    let done = summary(&mut mpi_cp(&[&src, &ranks], &["-a"]));
    assert_equal_trees(&plain, &ranks, "cp --mpi -a vs cp -a");
    let linked = fs::metadata(ranks.join("p0/q0/r/s/f1")).unwrap();
    assert_eq!(linked.nlink(), 5, "one file across the ranks' parts");
    assert_eq!(done["errors"], 0, "{done}");
    // The counts are every rank's, summed: as the plain copy's.
    let plain_done: Value = serde_json::from_slice(
        &run_ok(
            barge(["cp", "-a", "--json"])
                .arg(&src)
                .arg(work.path().join("again")),
            None,
        )
        .stdout,
    )
    .unwrap();
    for field in [
        "dirs",
        "files",
        "bytes",
        "symlinks",
        "hard_links",
        "specials",
    ] {
        assert_eq!(
            done[field], plain_done[field],
            "{field}: {done} vs {plain_done}"
        );
    }
    // A rerun with --update finds everything as it is.
    let again = summary(&mut mpi_cp(&[&src.join(""), &ranks], &["-a", "-u"]));
    assert_eq!(again["files"], 0, "{again}");
    assert_eq!(again["errors"], 0, "{again}");
    assert_equal_trees(&plain, &ranks, "after cp --mpi -a -u");
}

/// A tree whose files lie two levels down (as tiny-many's), in enough top directories (32
/// a rank) that the ranks split it at the top: files, an xattr, hard links across the top
/// directories, directory times.
fn shallow_tree(root: &Path) {
    for d in 0..160 {
        let dir = root.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..3 {
            file(
                &dir.join(format!("f{f}")),
                format!("{d}/{f}\n").as_bytes(),
                0o640,
            );
        }
    }
    file(&root.join("top"), b"at the top", 0o600);
    set_xattr(&root.join("d007/f1"), "user.part", b"7");
    for name in ["d001/linked", "d150/linked", "linked"] {
        fs::hard_link(root.join("d000/f0"), root.join(name)).unwrap();
    }
    for (n, dir) in ["d003", "d099", ""].iter().enumerate() {
        crate::common::set_mtime(&root.join(dir), 1_000_000_000 + n as i64, 123_456_789);
    }
}

#[test]
fn a_tree_split_at_the_top_is_copied_whole() {
    let work = tempdir();
    let src = work.path().join("src");
    shallow_tree(&src);
    let plain = work.path().join("plain");
    let plain_done = summary(barge(["cp", "-a", "--json"]).arg(&src).arg(&plain));
    let ranks = work.path().join("ranks");
    let done = summary(&mut mpi_cp(&[&src, &ranks], &["-a"]));
    assert_eq!(done["errors"], 0, "{done}");
    for field in ["dirs", "files", "hard_links"] {
        assert_eq!(
            done[field], plain_done[field],
            "{field}: {done} vs {plain_done}"
        );
    }
    assert_equal_trees(&plain, &ranks, "cp --mpi -a vs cp -a, split at the top");
    let linked = fs::metadata(ranks.join("d000/f0")).unwrap();
    assert_eq!(linked.nlink(), 4, "one file across the ranks' parts");
    let again = summary(&mut mpi_cp(&[&src.join(""), &ranks], &["-a", "-u"]));
    assert_eq!(again["files"], 0, "{again}");
    assert_equal_trees(&plain, &ranks, "after cp --mpi -a -u");
}

#[test]
fn several_srcs_are_copied_as_by_the_plain_copy() {
    let work = tempdir();
    let (tree, flat) = (work.path().join("tree"), work.path().join("flat"));
    shallow_tree(&tree);
    fs::create_dir(&flat).unwrap();
    file(&flat.join("inside"), b"contents only", 0o644);
    // One file of names in two SRCs: the copies stay linked, as with cp -a A B DEST.
    fs::hard_link(tree.join("d000/f0"), flat.join("linked")).unwrap();
    let single = work.path().join("single");
    file(&single, b"a file SRC", 0o600);
    // File SRCs with another name in a directory SRC: each stays one file too, whichever
    // rank links that name.
    let pairs: Vec<PathBuf> = (0..6)
        .map(|i| work.path().join(format!("pair{i}")))
        .collect();
    for (i, pair) in pairs.iter().enumerate() {
        file(pair, format!("pair {i}").as_bytes(), 0o644);
        fs::hard_link(pair, flat.join(format!("pair{i}-too"))).unwrap();
    }
    let missing = work.path().join("missing");
    let mut srcs = vec![tree.clone(), flat.join(""), single.clone()];
    srcs.extend(pairs.iter().cloned());
    srcs.push(missing);
    let copy = |cmd: &mut Command, dest: &Path| {
        fs::create_dir(dest).unwrap();
        let out = run(cmd.args(&srcs).arg(dest), None);
        assert_eq!(out.status.code(), Some(1), "{cmd:?}: {out:?}");
        let told = String::from_utf8_lossy(&out.stderr).into_owned();
        let text = String::from_utf8_lossy(&out.stdout);
        (serde_json::from_str::<Value>(&text).unwrap(), told)
    };
    let plain = work.path().join("plain");
    let (plain_done, _) = copy(&mut barge(["cp", "-a", "--json"]), &plain);
    let ranks = work.path().join("ranks");
    let (done, told) = copy(&mut mpi_cp(&[], &["-a"]), &ranks);
    // DEST's own time is when the last SRC went in.
    for dest in [&plain, &ranks] {
        crate::common::set_mtime(dest, 1_000_000_000, 0);
    }
    assert_equal_trees(&plain, &ranks, "cp --mpi SRC... vs cp SRC...");
    assert_eq!(
        told.matches("missing").count(),
        1,
        "the missing SRC named once: {told}"
    );
    assert_eq!(done["errors"], 1, "{done}");
    for field in ["dirs", "files", "bytes", "hard_links"] {
        assert_eq!(
            done[field], plain_done[field],
            "{field}: {done} vs {plain_done}"
        );
    }
    assert!(ranks.join("inside").is_file() && ranks.join("single").is_file());
    let linked = fs::metadata(ranks.join("linked")).unwrap();
    assert_eq!(linked.nlink(), 5, "one file across the SRCs and the ranks");
    for i in 0..pairs.len() {
        let (a, b) = (
            ranks.join(format!("pair{i}")),
            ranks.join(format!("pair{i}-too")),
        );
        let (a, b) = (fs::metadata(a).unwrap(), fs::metadata(b).unwrap());
        assert_eq!(
            (a.ino(), a.nlink()),
            (b.ino(), 2),
            "pair{i} and pair{i}-too"
        );
    }
}

/// The processes below `pid` whose name is `name`.
fn descendants(pid: u32, name: &str) -> Vec<u32> {
    let mut found = Vec::new();
    let mut parents = vec![pid];
    while let Some(parent) = parents.pop() {
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // pid (comm) state ppid ...: comm may hold spaces, so split after its ')'.
            let (comm, rest) = stat.rsplit_once(')').unwrap_or_default();
            let ppid = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok());
            if ppid == Some(parent) {
                parents.push(child);
                if comm.ends_with(&format!("({name}")) {
                    found.push(child);
                }
            }
        }
    }
    found
}

/// Regular files below `dir`.
fn files_below(dir: &Path) -> usize {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => files_below(&e.path()),
            Ok(t) if t.is_file() => 1,
            _ => 0,
        })
        .sum()
}

#[test]
fn a_job_with_a_rank_killed_is_finished_by_update() {
    let work = tempdir();
    let src = work.path().join("src");
    let total = wide_tree(&src, 150);
    let dest = work.path().join("dest");
    // Kill one rank once a tenth of the files are there: the others stop with it.
    let out = killed_job(&src, &dest, Duration::from_millis(1), || {
        files_below(&dest) >= total / 10
    });
    if out.status.success() {
        return skipped("the job finished before one of its ranks could be killed");
    }
    let left = files_below(&dest);
    let redo = summary(&mut mpi_cp(&[&src.join(""), &dest], &["-a", "-u"]));
    let plain = work.path().join("plain");
    run_ok(barge(["cp", "-a"]).arg(&src).arg(&plain), None);
    assert_equal_trees(&plain, &dest, "killed, then cp --mpi -a -u");
    // Only the unfinished part was redone: what was whole before is unchanged.
    let copied = redo["files"].as_u64().unwrap() + redo["hard_links"].as_u64().unwrap();
    let unchanged = redo["unchanged"].as_u64().unwrap();
    assert!(
        unchanged > 0,
        "nothing kept from the killed job ({left} files were there): {redo}"
    );
    assert!(copied < total as u64, "all copied again: {redo}");
}

/// `cp --mpi -a SRC DEST` with one rank killed (SIGKILL) once `ready` holds, checked every
/// `poll`; what the job printed.
fn killed_job(src: &Path, dest: &Path, poll: Duration, ready: impl Fn() -> bool) -> Output {
    let mut job = mpi_cp(&[src, dest], &["-a"]);
    let child = spawn(job.stdout(Stdio::null()), Stdio::null());
    let mut killed = false;
    while !killed && child_running(child.id()) {
        if ready() {
            if let Some(&rank) = descendants(child.id(), "barge").first() {
                rustix::process::kill_process(
                    rustix::process::Pid::from_raw(rank as i32).unwrap(),
                    rustix::process::Signal::KILL,
                )
                .unwrap();
                killed = true;
            }
        }
        std::thread::sleep(poll);
    }
    wait_output(child, crate::common::TIMEOUT, "the killed job")
}

/// Whether the process `pid` (a child of this one) has not exited yet.
fn child_running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
    })
}

#[test]
#[ignore = "needs root (to run the job as nobody)"]
fn a_read_only_directory_takes_its_linked_name_without_root() {
    require_root();
    let work = tempdir();
    let src = work.path().join("src");
    // A directory below the parts, finished (read-only) before the links are made.
    let deep = src.join("a/b/c/d");
    fs::create_dir_all(&deep).unwrap();
    fs::create_dir_all(src.join("x")).unwrap();
    file(&src.join("x/f"), b"two names", 0o644);
    fs::hard_link(src.join("x/f"), deep.join("g")).unwrap();
    fs::set_permissions(&deep, fs::Permissions::from_mode(0o555)).unwrap();
    std::os::unix::fs::chown(work.path(), Some(65534), Some(65534)).unwrap();
    let dest = work.path().join("dest");
    let mut nobody = as_nobody();
    nobody.arg("mpiexec");
    let done = summary(&mut mpi_cp_by(nobody, &[&src, &dest], &[]));
    assert_eq!(done["errors"], 0, "{done}");
    let copy = fs::metadata(dest.join("a/b/c/d/g")).unwrap();
    assert_eq!(copy.ino(), fs::metadata(dest.join("x/f")).unwrap().ino());
    assert_eq!(
        fs::metadata(dest.join("a/b/c/d")).unwrap().mode() & 0o7777,
        0o555
    );
}

/// `barge list -l ARCHIVE`'s lines, sorted (every entry with its mode, size and link).
fn listing(archive: &Path) -> String {
    let out = run_ok(barge(["list", "-l"]).arg(archive), None);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn mpi_pack_is_an_archive_of_the_tree() {
    let work = tempdir();
    let (wide, shallow) = (work.path().join("wide"), work.path().join("shallow"));
    wide_tree(&wide, 5);
    shallow_tree(&shallow);
    // Split three levels down, and at the top.
    let cases = [
        (&wide, &["-a"][..], "raw", "p0/q0/r/s/f1"),
        (&wide, &["-a", "--zstd"][..], "zstd", "p0/q0/r/s/f1"),
        (&shallow, &["-a"][..], "shallow", "d000/f0"),
    ];
    for (src, options, name, linked) in cases {
        let plain = work.path().join(format!("plain-{name}.barge"));
        let mut pack = barge(["pack", "--format", "2", "--json"]);
        let plain_out = run_ok(pack.args(options).arg(src).arg("-o").arg(&plain), None);
        let plain_done: Value = serde_json::from_slice(&plain_out.stdout).unwrap();
        let shared = work.path().join(format!("ranks-{name}.barge"));
        let mut pack = mpi_by(Command::new("mpiexec"), "pack", &[src], options);
        let done = summary(pack.arg("-o").arg(&shared));
        // Every rank's counts, summed: the plain pack's.
        for field in [
            "dirs",
            "files",
            "bytes",
            "symlinks",
            "hard_links",
            "specials",
        ] {
            assert_eq!(
                done[field], plain_done[field],
                "{field}: {done} vs {plain_done}"
            );
        }
        assert_eq!(done["archive_bytes"], fs::metadata(&shared).unwrap().len());
        run_ok(barge(["verify"]).arg(&shared), None);
        assert_eq!(listing(&plain), listing(&shared), "pack --mpi {name}");
        let (from_plain, from_ranks) = (work.path().join("u-plain"), work.path().join("u-ranks"));
        for (archive, dest) in [(&plain, &from_plain), (&shared, &from_ranks)] {
            let _ = fs::remove_dir_all(dest);
            run_ok(barge(["unpack"]).arg(archive).arg(dest), None);
        }
        assert_equal_trees(&from_plain, &from_ranks, "unpacked: pack --mpi vs pack");
        let nlink = fs::metadata(src.join(linked)).unwrap().nlink();
        let linked = fs::metadata(from_ranks.join(linked)).unwrap();
        assert_eq!(linked.nlink(), nlink, "one file across the ranks' shares");
    }
}

/// An archive written into the tree it packs leaves itself out: the ranks write it there
/// (under a temporary name) while they walk, and plan without it too.
#[test]
fn mpi_pack_into_its_own_tree_leaves_the_archive_out() {
    let work = tempdir();
    let src = work.path().join("src");
    shallow_tree(&src);
    let plain = work.path().join("plain.barge");
    run_ok(
        barge(["pack", "--format", "2"])
            .arg(&src)
            .arg("-o")
            .arg(&plain),
        None,
    );
    // The second pack replaces the first's archive, which it leaves out too.
    let shared = src.join("ranks.barge");
    for options in [&[][..], &["--zstd"][..]] {
        let mut pack = mpi_by(Command::new("mpiexec"), "pack", &[&src], options);
        summary(pack.arg("-o").arg(&shared));
        run_ok(barge(["verify"]).arg(&shared), None);
        assert_eq!(listing(&plain), listing(&shared), "{options:?}");
        let left: Vec<_> = fs::read_dir(&src)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            !left
                .iter()
                .any(|n| n.to_string_lossy().contains("barge-mpi")),
            "{left:?}"
        );
    }
}

/// The ranks' shares are cut by weight, not by count of parts: a tree whose first part
/// holds as many bytes as 64 of the others (split at the top, 130 parts) leaves that part
/// to rank 0 alone, and the ranks' frames (`BARGE_SHARE_STATS`) come within a quarter of
/// the most even cut possible, the mean or that part. Cut by count, rank 0 held it and 31
/// more (1.5 times it). No rank stats a file again: the plans' stats reach the ranks that
/// pack the files.
#[test]
fn ranks_whose_parts_are_done_take_parts_another_has_not_begun() {
    let work = tempdir();
    let src = work.path().join("src");
    // Split at the top (32 directories a rank); rank 0's parts hold nearly every file.
    for d in 0..130 {
        let name = format!("d{d:03}");
        let files = match barge::cp::part_owner(name.as_bytes(), 4) {
            0 => 300,
            _ => 1,
        };
        let dir = src.join(&name);
        fs::create_dir_all(&dir).unwrap();
        for f in 0..files {
            file(
                &dir.join(format!("f{f}")),
                format!("{d}/{f}\n").as_bytes(),
                0o640,
            );
        }
    }
    let plain = work.path().join("plain");
    let plain_done = summary(barge(["cp", "-a", "--json"]).arg(&src).arg(&plain));
    let ranks = work.path().join("ranks");
    let mut cp = mpi_cp(&[&src, &ranks], &["-a"]);
    let out = run_ok(cp.env("BARGE_SHARE_STATS", "1"), None);
    let stats = String::from_utf8_lossy(&out.stderr);
    let traded = |rank: usize| -> (u64, u64) {
        let line = (stats.lines())
            .find_map(|line| line.strip_prefix(&format!("share: rank {rank}: gave ")))
            .unwrap_or_else(|| panic!("no line of rank {rank}: {stats}"));
        let (gave, given) = line.split_once(" parts, was given ").unwrap();
        (gave.parse().unwrap(), given.parse().unwrap())
    };
    let (gave, _) = traded(0);
    let given: u64 = (1..4).map(|rank| traded(rank).1).sum();
    assert!(gave > 0 && given == gave, "{stats}");
    let done: Value = serde_json::from_slice(&out.stdout).unwrap();
    for field in ["dirs", "files", "bytes"] {
        assert_eq!(done[field], plain_done[field], "{field}: {done}");
    }
    assert_equal_trees(&plain, &ranks, "cp --mpi -a with parts given away vs cp -a");
    let again = summary(&mut mpi_cp(&[&src.join(""), &ranks], &["-a", "-u"]));
    assert_eq!(again["files"], 0, "{again}");
}

#[test]
fn mpi_pack_shares_are_cut_by_weight() {
    let work = tempdir();
    let src = work.path().join("src");
    const FILE: usize = 64 << 10;
    let data = vec![b'x'; FILE];
    for d in 0..130 {
        let dir = src.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..if d == 0 { 64 } else { 1 } {
            fs::write(dir.join(format!("f{f}")), &data).unwrap();
        }
    }
    let archive = work.path().join("ranks.barge");
    let mut pack = mpi_by(Command::new("mpiexec"), "pack", &[&src], &[]);
    pack.env("BARGE_SHARE_STATS", "1").arg("-o").arg(&archive);
    let out = run_ok(&mut pack, None);
    let stats = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = (stats.lines())
        .filter_map(|line| line.strip_prefix("share: rank "))
        .collect();
    let field = |line: &str, after: &str| -> u64 {
        let field = line.split(", ").find(|f| f.ends_with(after)).unwrap();
        field.trim_end_matches(after).parse().unwrap()
    };
    let frames: Vec<u64> = lines.iter().map(|l| field(l, " bytes of frames")).collect();
    let stated: Vec<u64> = lines
        .iter()
        .map(|l| field(l, " files stat'ed again"))
        .collect();
    assert_eq!(stated, [0; 4], "{stats}");
    assert_eq!(frames.len(), 4, "a line a rank: {stats}");
    let (all, most) = (frames.iter().sum::<u64>(), *frames.iter().max().unwrap());
    let best = (all / 4).max(64 * FILE as u64);
    assert!(
        most <= best + best / 4,
        "{most} of {all} on a rank: {stats}"
    );
    run_ok(barge(["verify"]).arg(&archive), None);
}

#[test]
fn mpi_pack_refuses_stdout() {
    let work = tempdir();
    let out = mpi_by(
        Command::new("mpiexec"),
        "pack",
        &[work.path()],
        &["-o", "-"],
    )
    .output()
    .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    // Told once, by one rank.
    assert_eq!(text.matches("not to stdout").count(), 1, "{text}");
}

/// Writes at `path` a file of `size` bytes: holes, and at each of `at` a MiB of bytes that
/// depend on the offset (so that a range copied to the wrong place shows).
fn large(path: &Path, size: u64, at: &[u64]) {
    let f = fs::File::create(path).unwrap();
    f.set_len(size).unwrap();
    let pattern: Vec<u8> = (0..(1 << 20) + 251).map(|i| (i % 251) as u8).collect();
    for &offset in at {
        let from = (offset % 251) as usize;
        let data = &pattern[from..from + (1 << 20)];
        std::os::unix::fs::FileExt::write_at(&f, data, offset).unwrap();
    }
}

#[test]
fn a_large_file_is_copied_by_the_ranks_with_its_holes_and_metadata() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(src.join("d")).unwrap();
    // 5 ranges of 64 MiB: dealt to 4 ranks, each range holding data and holes.
    let big = src.join("d/big.img");
    let size = 300 << 20;
    large(
        &big,
        size,
        &[0, (64 << 20) - 7, 150 << 20, 200 << 20, size - (1 << 20)],
    );
    fs::set_permissions(&big, fs::Permissions::from_mode(0o640)).unwrap();
    set_xattr(&big, "user.part", b"wide");
    file(&src.join("d/small"), b"small", 0o644);
    crate::common::set_mtime(&big, 1_000_000_000, 123_456_789);
    crate::common::set_mtime(&src.join("d"), 1_000_000_001, 1);
    let dest = work.path().join("dest");
    let done = summary(&mut mpi_cp(&[&src, &dest], &["-a"]));
    assert_eq!(
        (done["errors"].as_u64(), done["files"].as_u64()),
        (Some(0), Some(2)),
        "{done}"
    );
    assert_eq!(done["bytes"].as_u64(), Some(size + 5), "{done}");
    let plain = work.path().join("plain");
    run_ok(barge(["cp", "-a"]).arg(&src).arg(&plain), None);
    assert_equal_trees(&plain, &dest, "cp --mpi -a vs cp -a");
    let (was, is) = (
        fs::metadata(&big).unwrap(),
        fs::metadata(dest.join("d/big.img")).unwrap(),
    );
    assert!(
        is.blocks() <= 2 * was.blocks(),
        "holes kept: {} blocks",
        is.blocks()
    );
    // Unchanged, it is found so by --update and left alone.
    let again = summary(&mut mpi_cp(&[&src.join(""), &dest], &["-a", "-u"]));
    assert_eq!(
        (again["files"].as_u64(), again["errors"].as_u64()),
        (Some(0), Some(0)),
        "{again}"
    );
}

#[test]
fn a_job_with_a_rank_killed_in_a_large_file_is_finished_by_update() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir_all(&src).unwrap();
    // Data in every MiB: copying takes long enough to be cut.
    let size: u64 = 200 << 20;
    let every: Vec<u64> = (0..size >> 20).map(|m| m << 20).collect();
    for name in ["one", "two"] {
        large(&src.join(name), size, &every);
    }
    let dest = work.path().join("dest");
    // Kill one rank once a large file is made (its ranges being copied).
    let out = killed_job(&src, &dest, Duration::from_micros(200), || {
        dest.join("one").exists() || dest.join("two").exists()
    });
    if out.status.success() {
        return skipped("the job finished before one of its ranks could be killed");
    }
    let redo = summary(&mut mpi_cp(&[&src.join(""), &dest], &["-a", "-u"]));
    assert_eq!(redo["errors"], 0, "{redo}");
    let plain = work.path().join("plain");
    run_ok(barge(["cp", "-a"]).arg(&src).arg(&plain), None);
    assert_equal_trees(&plain, &dest, "killed in a large file, then cp --mpi -a -u");
}

/// `mpiexec -n 4 barge unpack --mpi` of a plain `pack --format 2` archive (a segment or
/// two) and of a `pack --mpi` one (a run of segments per rank), raw and zstd, lands the
/// tree the plain unpack lands: hard links across the ranks' segments, xattrs, times and
/// modes of the directories (given by rank 0 once all are done), the summed counts; so does
/// one rank whose threads share the segments.
#[test]
fn mpi_unpack_equals_the_plain_unpack() {
    let work = tempdir();
    let src = work.path().join("src");
    wide_tree(&src, 5);
    for (options, name) in [(&["-a"][..], "raw"), (&["-a", "--zstd"][..], "zstd")] {
        let plain = work.path().join(format!("plain-{name}.barge"));
        let mut pack = barge(["pack", "--format", "2"]);
        run_ok(pack.args(options).arg(&src).arg("-o").arg(&plain), None);
        let shared = work.path().join(format!("ranks-{name}.barge"));
        let mut pack = mpi_by(Command::new("mpiexec"), "pack", &[&src], options);
        run_ok(pack.arg("-o").arg(&shared), None);
        let expected = work.path().join(format!("expected-{name}"));
        let mut unpack = barge(["unpack", "--json"]);
        let plain_out = run_ok(unpack.arg(&plain).arg(&expected), None);
        let plain_done: Value = serde_json::from_slice(&plain_out.stdout).unwrap();
        // One rank too: its threads (one a core) share its segments as ranks do.
        for (archive, ranks) in [(&plain, RANKS), (&shared, RANKS), (&shared, "1")] {
            let dest = work.path().join(format!("ranks-{name}"));
            let _ = fs::remove_dir_all(&dest);
            let mpiexec = Command::new("mpiexec");
            let mut unpack = mpi_on(ranks, mpiexec, "unpack", &[archive, &dest], &[]);
            let done = summary(&mut unpack);
            let what = format!("unpack --mpi {} vs unpack ({unpack:?})", archive.display());
            assert_equal_trees(&expected, &dest, &what);
            let linked = fs::metadata(dest.join("p0/q0/r/s/f1")).unwrap();
            assert_eq!(linked.nlink(), 5, "one file across the ranks' segments");
            for field in [
                "dirs",
                "files",
                "bytes",
                "symlinks",
                "hard_links",
                "specials",
            ] {
                assert_eq!(
                    done[field], plain_done[field],
                    "{field}: {done} vs {plain_done}"
                );
            }
        }
    }
}

/// A version 1 archive has no index to share its segments by: refused, told once.
#[test]
fn mpi_unpack_refuses_a_version_1_archive() {
    let work = tempdir();
    let src = work.path().join("src");
    fs::create_dir(&src).unwrap();
    file(&src.join("a"), b"a", 0o644);
    let archive = work.path().join("v1.barge");
    run_ok(barge(["pack"]).arg(&src).arg("-o").arg(&archive), None);
    let dest = work.path().join("dest");
    let out = mpi_by(Command::new("mpiexec"), "unpack", &[&archive, &dest], &[])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        text.matches("unpack this one without --mpi").count(),
        1,
        "{text}"
    );
}
