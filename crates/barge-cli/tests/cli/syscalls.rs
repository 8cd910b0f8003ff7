//! Counts the system calls of `pack` (at most 2.5 per file, recording everything tar does
//! by default) and of `unpack` with `strace -f -c` on a generated tree of 200 dirs x
//! 25 small files and holds them to the design budget: per file `openat` + `write` + `close`,
//! and `futimens` when the archive has times (tar's default fidelity: modes go in the
//! create call), per directory `mkdirat` + `openat(O_PATH)` (+ `utimensat` with times; the
//! fds of directories left are closed in batches by `close_range`), plus a fixed start-up
//! cost; and that the large files of a mapped archive are copied by the kernel (one
//! `copy_file_range` each), or written from the mapping where the kernel refuses to copy
//! across filesystems; and that `cat` of a small file from a version 2 archive in a file
//! reads the archive at most four times (footer, index, segment).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use barge::tree::Recorded;

use crate::common::*;

const DIRS: u64 = 200;
const FILES_PER_DIR: u64 = 25;
const FILES: u64 = DIRS * FILES_PER_DIR;

/// Syscalls a run makes besides its entries, with margin. Measured on Debian 12 / kernel 6.x:
/// 94 without and 80 with the sandbox (root; an unprivileged caller adds `unshare` and three
/// writes to /proc/self/{setgroups,uid_map,gid_map}). They are: the dynamic loader (~30:
/// mapping libc and libgcc_s), the Rust runtime (~15: sigaltstack, signal handlers,
/// /proc/self/maps for the stack guard), cgroup files read by `available_parallelism` (~15),
/// opening and mapping the archive and the destination (~10), exit. 200 leaves room for
/// another libc or kernel without letting even 0.04 extra syscalls per entry through.
const STARTUP: u64 = 200;

/// `strace -c` summary: syscall name → (calls, calls that failed).
fn summary(path: &Path) -> BTreeMap<String, (u64, u64)> {
    let text = fs::read_to_string(path).unwrap();
    text.lines()
        .filter_map(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // % time, seconds, usecs/call, calls, [errors,] syscall
            let calls = cols.get(3)?.parse().ok()?;
            let errors = if cols.len() == 6 {
                cols[4].parse().ok()?
            } else {
                0
            };
            let name = cols.last()?;
            (cols.len() >= 5 && *name != "total").then(|| (name.to_string(), (calls, errors)))
        })
        .collect()
}

/// Whether strace can trace here (ptrace may be forbidden in a container).
fn strace_works() -> bool {
    Command::new("strace")
        .args(["-f", "-c", "-o", "/dev/null", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The tree of [`unpack_costs_at_most_four_syscalls_per_file_and_three_per_dir`] as an
/// archive with a time on every entry (what `barge pack` records by default).
fn timed_archive() -> Vec<u8> {
    use barge::tree::{Entry, Meta, Timestamp};
    let meta = |mode, n: u64| {
        let mut meta = Meta::with_mode(mode);
        meta.mtime = Some(Timestamp {
            sec: 1_500_000_000 + n as i64,
            nsec: n as u32,
        });
        meta
    };
    let mut e = barge::format::Encoder::extended(Vec::new());
    for d in 0..DIRS {
        let name = format!("d{d:03}");
        e.dir_with(&Entry::dir(name.as_bytes(), meta(0o755, d)))
            .unwrap();
        for f in 0..FILES_PER_DIR {
            let (name, data) = (format!("f{f:02}"), format!("{d} {f}\n"));
            let file = Entry::file(name.as_bytes(), meta(0o644, f));
            e.file_with(&file, data.as_bytes()).unwrap();
        }
        e.pop().unwrap();
    }
    e.finish().unwrap()
}

/// Writes [`DIRS`] directories of [`FILES_PER_DIR`] small files below `src`, and calls
/// `more` on each directory.
fn small_files(src: &Path, more: impl Fn(&Path)) {
    for d in 0..DIRS {
        let dir = src.join(format!("d{d:03}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..FILES_PER_DIR {
            fs::write(dir.join(format!("f{f:02}")), format!("{d} {f}\n")).unwrap();
        }
        more(&dir);
    }
}

#[test]
fn unpack_costs_at_most_four_syscalls_per_file_and_three_per_dir() {
    if !strace_works() {
        return skipped("syscall count: strace cannot trace here (no ptrace?)");
    }
    let work = tempdir();
    let src = work.path().join("src");
    small_files(&src, |_| ());
    let packed = work.path().join("a.barge");
    pack_to(&src, &packed);
    let timed = work.path().join("timed.barge");
    fs::write(&timed, timed_archive()).unwrap();

    for (sandbox, archive) in [
        (false, &packed),
        (true, &packed),
        (false, &timed),
        (true, &timed),
    ] {
        let times = archive == &timed;
        // An existing DEST, as the benchmarks use: a new one adds its staging (a mkdirat,
        // a rename, and with the sandbox a keeper process).
        let dest = work.path().join(format!("dest-{sandbox}-{times}"));
        fs::create_dir(&dest).unwrap();
        let trace = work.path().join(format!("strace-{sandbox}-{times}"));
        let options: &[&str] = if sandbox { &[] } else { &["--no-sandbox"] };
        let calls = traced_unpack(options, archive, &dest, &trace);
        assert_same_tree(&src, &dest, 0);
        if times {
            use std::os::unix::fs::MetadataExt;
            let meta = fs::metadata(dest.join("d007/f03")).unwrap();
            assert_eq!((meta.mtime(), meta.mtime_nsec()), (1_500_000_003, 3));
            let meta = fs::metadata(dest.join("d007")).unwrap();
            assert_eq!((meta.mtime(), meta.mtime_nsec()), (1_500_000_007, 7));
        }

        let mut calls: BTreeMap<String, u64> =
            calls.into_iter().map(|(name, (n, _))| (name, n)).collect();
        // A debug build's std checks each fd it closes with fcntl(F_GETFD) (a debug
        // assertion in OwnedFd::drop); a release build makes none of these calls.
        if cfg!(debug_assertions) {
            calls.remove("fcntl");
        }
        let count = |name: &str| calls.get(name).copied().unwrap_or(0);
        let total: u64 = calls.values().sum();
        let what = format!("sandbox {sandbox}, times {times}: {calls:?}");
        eprintln!(
            "syscalls (sandbox {sandbox}, times {times}): total {total} for {FILES} files, \
             {DIRS} dirs"
        );

        assert_eq!(count("write"), FILES, "{what}: one write per file");
        assert_eq!(count("mkdirat"), DIRS, "{what}: one mkdirat per dir");
        // openat: one per file and one O_PATH handle per non-empty dir, plus start-up.
        assert!(count("openat") <= FILES + DIRS + 20, "{what}: openat");
        // close: one per file; directory fds go in a few batched close_range calls.
        assert!(count("close") <= FILES + 20, "{what}: close");
        assert!(count("close_range") <= 10, "{what}: close_range");
        // utimensat (futimens is one too): one per file and one per dir with times (which
        // `barge pack` records or not: the timed archive has them).
        let timed = count("utimensat") > 0;
        assert!(timed || !times, "{what}: no times restored");
        let utimensat = if timed { FILES + DIRS } else { 0 };
        assert_eq!(count("utimensat"), utimensat, "{what}: utimensat");
        let per_file = (count("write") + count("openat") + count("close") - DIRS) as f64
            + (utimensat - if timed { DIRS } else { 0 }) as f64;
        let most = if timed { 4.1 } else { 3.1 };
        assert!(
            per_file / FILES as f64 <= most,
            "{what}: per file {per_file}"
        );
        // The budget of the design: 3.1 per file (4.1 with times), 2 per dir (3 with
        // times), a fixed start-up.
        let budget = (most * FILES as f64) as u64 + (2 + u64::from(timed)) * DIRS + STARTUP;
        assert!(
            total <= budget,
            "{what}: {total} syscalls > budget {budget}"
        );
    }
}

/// Runs `barge unpack OPTIONS ARCHIVE DEST` under `strace -f -c` (summary in `trace`);
/// returns syscall → (calls, errors).
fn traced_unpack(
    options: &[&str],
    archive: &Path,
    dest: &Path,
    trace: &Path,
) -> BTreeMap<String, (u64, u64)> {
    let mut cmd = Command::new("strace");
    // cargo's LD_LIBRARY_PATH makes the loader probe dozens of dirs for libc: not ours.
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(["-f", "-c", "-o"])
        .arg(trace)
        .arg(bin())
        .arg("unpack");
    run_ok(cmd.args(options).arg(archive).arg(dest), None);
    summary(trace)
}

#[test]
fn large_files_of_a_mapped_archive_are_copied_by_the_kernel() {
    if !strace_works() {
        return skipped("copy_file_range count: strace cannot trace here (no ptrace?)");
    }
    const LARGE: u64 = 24;
    const SMALL: u64 = 60;
    let work = tempdir();
    let src = work.path().join("src");
    for d in 0..4 {
        let dir = src.join(format!("d{d}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..LARGE / 4 {
            let data: Vec<u8> = (0..100_000u32)
                .map(|i| (i * 7 + f as u32 + d) as u8)
                .collect();
            fs::write(dir.join(format!("large{f}")), data).unwrap();
        }
        for f in 0..SMALL / 4 {
            fs::write(dir.join(format!("small{f}")), vec![f as u8; 3000]).unwrap();
        }
    }
    // Over the threads engine's threshold (256 KiB), so `auto` lands it with threads.
    let archive = work.path().join("a.barge");
    pack_to(&src, &archive);

    let dest = work.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let calls = traced_unpack(&[], &archive, &dest, &work.path().join("trace"));
    assert_same_tree(&src, &dest, 0);
    let count = |name: &str| calls.get(name).map_or(0, |c| c.0);
    assert_eq!(
        count("copy_file_range"),
        LARGE,
        "{calls:?}: one copy per large file"
    );
    assert_eq!(count("write"), SMALL, "{calls:?}: one write per small file");

    // DEST on another filesystem type than the archive (tmpfs and the disk): the kernel
    // may refuse to copy across; each lander then writes from the mapping for good.
    let other = tempfile::Builder::new()
        .prefix("barge-test-")
        .tempdir()
        .unwrap();
    let dest = other.path().join("dest");
    fs::create_dir(&dest).unwrap();
    let calls = traced_unpack(&[], &archive, &dest, &work.path().join("trace2"));
    assert_same_tree(&src, &dest, 0);
    let (copies, refused) = calls.get("copy_file_range").copied().unwrap_or((0, 0));
    let count = |name: &str| calls.get(name).map_or(0, |c| c.0);
    if refused == 0 {
        assert_eq!(copies, LARGE, "{calls:?}: copied across filesystems");
    } else {
        let landers = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
        assert!(refused <= landers, "{calls:?}: each lander tries once");
        assert_eq!(copies, refused, "{calls:?}: no copy after a refusal");
        assert_eq!(count("write"), LARGE + SMALL, "{calls:?}: all written");
    }
}

/// `pack` of 200 dirs x 25 small files with a symlink and a hard-link pair in each dir,
/// recording modes, times, symlinks and hard links (the default): one `statx` per file
/// (mode, size, times, links) with its open, read and close in the ring's batches (one
/// `io_uring_enter` per directory here), one `newfstatat` and one `readlinkat` per
/// symlink, and per directory its `openat`, `fstat`, `getdents64` and `close` (and the
/// run's `dup` of it): at most 2.5 system calls per file in all, start-up included.
#[test]
fn pack_records_everything_in_at_most_two_and_a_half_syscalls_per_file() {
    if !strace_works() {
        return skipped("syscall count: strace cannot trace here (no ptrace?)");
    }
    let work = tempdir();
    let src = work.path().join("src");
    small_files(&src, |dir| {
        fs::hard_link(dir.join("f00"), dir.join("link")).unwrap();
        std::os::unix::fs::symlink("f01", dir.join("sym")).unwrap();
    });
    let archive = work.path().join("a.barge");
    let trace = work.path().join("trace");
    let mut cmd = Command::new("strace");
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd.args(["-f", "-c", "-o"])
        .arg(&trace)
        .arg(bin())
        .arg("pack");
    run_ok(cmd.arg(&src).arg("-o").arg(&archive), None);
    let mut calls: BTreeMap<String, u64> = summary(&trace)
        .into_iter()
        .map(|(name, (n, _))| (name, n))
        .collect();
    // A debug build's std checks each fd it closes with fcntl(F_GETFD).
    if cfg!(debug_assertions) {
        calls.remove("fcntl");
    }
    let count = |name: &str| calls.get(name).copied().unwrap_or(0);
    let total: u64 = calls.values().sum();
    let files = FILES + DIRS;
    eprintln!("pack syscalls: total {total} for {files} files, {DIRS} dirs, {DIRS} symlinks");

    let listed = recorded(&archive);
    let hard_links = listed
        .iter()
        .filter(|call| matches!(call, Recorded::HardLink(..)))
        .count() as u64;
    let symlinks = listed
        .iter()
        .filter(|call| matches!(call, Recorded::Symlink(..)))
        .count() as u64;
    assert_eq!((hard_links, symlinks), (DIRS, DIRS));
    assert_eq!(count("statx"), files, "{calls:?}: one statx per file");
    assert_eq!(
        count("readlinkat"),
        DIRS,
        "{calls:?}: one readlink per symlink"
    );
    assert!(
        total as f64 <= 2.5 * files as f64,
        "{calls:?}: {total} syscalls for {files} files"
    );
}

#[test]
fn cat_of_a_small_file_reads_a_v2_archive_at_most_four_times() {
    if !strace_works() {
        return skipped("read count: strace cannot trace here (no ptrace?)");
    }
    let work = tempdir();
    let src = work.path().join("src");
    small_files(&src, |_| ());
    let archive = work.path().join("a.barge");
    pack_v2(&src, &archive, 16 << 10, Some(3));
    let trace = work.path().join("strace");
    let out = Command::new("strace")
        .args(["-f", "-y", "-e", "trace=pread64,read,readv,preadv", "-o"])
        .arg(&trace)
        .arg(bin())
        .arg("cat")
        .arg(&archive)
        .arg("d150/f07")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.stdout, b"150 7\n");
    let shown = format!("<{}>", archive.display());
    let text = fs::read_to_string(&trace).unwrap();
    let reads: Vec<&str> = text.lines().filter(|l| l.contains(&shown)).collect();
    assert!(
        (1..=4).contains(&reads.len()),
        "{} reads of the archive: {reads:#?}",
        reads.len()
    );
}
