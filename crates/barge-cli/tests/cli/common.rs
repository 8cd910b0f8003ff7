//! Helpers of the CLI tests: running `barge` with a timeout, building trees and archives,
//! comparing trees byte for byte and mode for mode, and snapshotting what must not change.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Longest any single `barge` run in these tests may take before it counts as a hang.
/// (Generous: the machine may be shared with builds and benchmarks.)
pub const TIMEOUT: Duration = Duration::from_secs(60);

/// The `barge` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_barge"))
}

/// A `barge` command with the given arguments.
pub fn barge<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(bin());
    cmd.args(args);
    cmd
}

/// A temporary directory on tmpfs (/dev/shm) when there is one, else in the default place.
pub fn tempdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let builder = tempfile::Builder::new().prefix("barge-test-").to_owned();
    if shm.is_dir() {
        builder.tempdir_in(shm).unwrap()
    } else {
        builder.tempdir().unwrap()
    }
}

/// Held by each test that writes gigabytes, so that no two of them need that room at once
/// (the suite runs tests in parallel, and the disk may not hold two).
pub fn one_big_writer() -> std::sync::MutexGuard<'static, ()> {
    static BIG_WRITER: std::sync::Mutex<()> = std::sync::Mutex::new(());
    BIG_WRITER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A temporary directory with room for `bytes` more: on tmpfs when it has twice that free
/// (so the test does not squeeze the machine's memory), else in the default place (disk).
pub fn roomy_tempdir(bytes: u64) -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    let free = rustix::fs::statvfs(shm).map_or(0, |s| s.f_bavail * s.f_frsize);
    if free > 2 * bytes {
        return tempdir();
    }
    tempfile::Builder::new()
        .prefix("barge-test-")
        .tempdir()
        .unwrap()
}

/// Waits for `child`, collecting its piped stdout and stderr, killing it after `timeout`;
/// panics on a hang.
pub fn wait_output(mut child: Child, timeout: Duration, what: &str) -> Output {
    fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    }
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {timeout:?} (hang)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Starts `cmd` with `stdin`, its stdout and stderr piped (for [`wait_output`]).
pub fn spawn(cmd: &mut Command, stdin: Stdio) -> Child {
    cmd.stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Copies the binary under test into `dir`, executable by everyone (the build directory may
/// be closed to an unprivileged user), and returns its path.
pub fn copy_bin(dir: &Path) -> PathBuf {
    let copy = dir.join("barge");
    run_ok(
        Command::new("install").arg("-m755").arg(bin()).arg(&copy),
        None,
    );
    copy
}

/// Creates the executable `path` (mode 0o755) holding `data`. Like [`copy_bin`], it leaves
/// the writing to `install`, a process of its own: a file this multi-threaded process held
/// open for writing would be inherited by whatever another test forks at that moment, and
/// running it would fail with ETXTBSY ("Text file busy") until that fork's exec.
pub fn executable(path: &Path, data: &[u8]) {
    run_ok(
        Command::new("install")
            .arg("-m755")
            .arg("/dev/stdin")
            .arg(path),
        Some(data),
    );
}

/// Waits until `check` holds, polling every 2 ms, for at most [`TIMEOUT`].
pub fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let start = Instant::now();
    while !check() {
        assert!(start.elapsed() < TIMEOUT, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Runs `cmd` with `stdin` as its input (empty when `None`), output captured, under [`TIMEOUT`].
pub fn run(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let what = format!("{cmd:?}");
    let mut child = spawn(cmd, Stdio::piped());
    let input = stdin.unwrap_or_default().to_vec();
    let mut pipe = child.stdin.take().unwrap();
    // A writer thread, so a child that stops reading cannot block the test.
    let writer = std::thread::spawn(move || {
        let _ = pipe.write_all(&input);
    });
    let out = wait_output(child, TIMEOUT, &what);
    writer.join().unwrap();
    out
}

/// Runs `cmd` and asserts it succeeded; returns its output.
pub fn run_ok(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    let out = run(cmd, stdin);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({:?}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The engines `barge unpack --engine` offers (`auto` included): the library's list, from
/// which the CLI builds its choices.
pub fn engines() -> Vec<String> {
    let engines = barge::unpack::Engine::ALL.map(|(name, _)| name.to_string());
    let help = run_ok(&mut barge(["unpack", "--help"]), None).stdout;
    let offered = format!("[possible values: {}]", engines.join(", "));
    assert!(
        String::from_utf8_lossy(&help).contains(&offered),
        "--help lacks {offered}"
    );
    engines.to_vec()
}

/// The unprivileged user the tests run as.
pub const NOBODY: u32 = 65534;

/// Whether the tests run as root (then they also run `barge` as [`NOBODY`]).
pub fn is_root() -> bool {
    fs::metadata("/proc/self").unwrap().uid() == 0
}

/// `setpriv` arguments that drop to [`NOBODY`].
pub fn as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"]);
    cmd
}

/// `setpriv` as `uid` and its group, under a task limit of `tasks` (threads count as tasks):
/// for a uid of the test's own, no other process counts against it.
pub fn with_task_limit(uid: u32, tasks: u32) -> Command {
    let uid = uid.to_string();
    let mut cmd = Command::new("prlimit");
    cmd.arg(format!("--nproc={tasks}")).args([
        "setpriv",
        "--reuid",
        &uid,
        "--regid",
        &uid,
        "--clear-groups",
    ]);
    cmd
}

/// `barge pack`'s archive formats, as options: tests of what every pack does run with each.
pub const FORMATS: [&str; 2] = ["--format=1", "--format=2"];

/// The command `barge pack SRC -o OUT` (OUT may be `-`).
pub fn pack_cmd(src: impl AsRef<OsStr>, out: impl AsRef<OsStr>) -> Command {
    barge(["pack".as_ref(), src.as_ref(), "-o".as_ref(), out.as_ref()])
}

/// Runs `barge pack SRC -o OUT` (OUT may be `-`) and returns what it wrote on stdout.
pub fn pack_to(src: &Path, out: impl AsRef<OsStr>) -> Vec<u8> {
    run_ok(&mut pack_cmd(src, out), None).stdout
}

/// A tree whose pack fails before a byte of archive is written: /proc/sys files say 0
/// bytes at open and hold more.
pub const FAILING_TREE: &str = "/proc/sys/kernel/random";

/// Runs `work` while a thread reads the fifo `path` to its end; returns what `work` returned
/// and what was read. A reader still waiting for a writer once `work` is done is released.
pub fn read_fifo_during<T>(path: &Path, work: impl FnOnce() -> T) -> (T, Vec<u8>) {
    let reader = {
        let path = path.to_path_buf();
        std::thread::spawn(move || {
            let mut data = Vec::new();
            fs::File::open(path)
                .unwrap()
                .read_to_end(&mut data)
                .unwrap();
            data
        })
    };
    let result = work();
    while !reader.is_finished() {
        // Opening for writing without blocking succeeds once the reader waits in its open.
        let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::NONBLOCK;
        let _ = rustix::fs::open(path, flags, rustix::fs::Mode::empty());
        std::thread::sleep(Duration::from_millis(10));
    }
    (result, reader.join().unwrap())
}

/// The names in `dir` (hidden ones too), sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Creates a fifo (mode 0o644) at `path`.
pub fn mkfifo(path: &Path) {
    rustix::fs::mknodat(
        rustix::fs::CWD,
        path,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
}

/// Asserts `out` is a clean failure: exit code 1 (not a signal, not a panic's 101), and
/// stderr holds one `barge: error:` line naming the problem with each of `needles`.
pub fn assert_clean_failure(out: &Output, needles: &[&str], what: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what}: want exit 1, got {:?}; stderr: {stderr}",
        out.status
    );
    assert!(!stderr.contains("panicked"), "{what}: panic: {stderr}");
    assert!(stderr.contains("barge: error:"), "{what}: {stderr}");
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "{what}: stderr lacks {needle:?}: {stderr}"
        );
    }
}

/// The process umask (read from /proc, which does not change it).
pub fn umask() -> u32 {
    let status = fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line[6..].trim(), 8).unwrap()
}

/// A name from raw bytes.
pub fn name(bytes: &[u8]) -> &OsStr {
    OsStr::from_bytes(bytes)
}

/// Writes `data` to `path` and sets its permission bits.
pub fn file(path: &Path, data: &[u8], mode: u32) {
    fs::write(path, data).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// What a tree walk sees of one entry: kind, permission bits (with setuid & co.) and content.
#[derive(Debug, PartialEq, Eq)]
pub enum Node {
    /// A directory and its mode.
    Dir(u32),
    /// A regular file, its mode and content.
    File(u32, Vec<u8>),
    /// A symlink and its target.
    Link(Vec<u8>),
    /// Anything else (fifo, socket, device) and its mode.
    Other(u32),
}

/// Every entry below `root`, keyed by its path bytes relative to `root` (without following
/// symlinks). Names are compared as raw bytes, so non-UTF-8 names count exactly.
pub fn scan(root: &Path) -> BTreeMap<Vec<u8>, Node> {
    let mut out = BTreeMap::new();
    scan_into(root, Vec::new(), &mut out);
    out
}

fn scan_into(dir: &Path, prefix: Vec<u8>, out: &mut BTreeMap<Vec<u8>, Node>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let mut rel = prefix.clone();
        if !rel.is_empty() {
            rel.push(b'/');
        }
        rel.extend_from_slice(entry.file_name().as_bytes());
        let path = entry.path();
        let meta = fs::symlink_metadata(&path).unwrap();
        let mode = meta.mode() & 0o7777;
        let node = if meta.is_dir() {
            scan_into(&path, rel.clone(), out);
            Node::Dir(mode)
        } else if meta.is_file() {
            Node::File(mode, fs::read(&path).unwrap())
        } else if meta.file_type().is_symlink() {
            Node::Link(
                fs::read_link(&path)
                    .unwrap()
                    .as_os_str()
                    .as_bytes()
                    .to_vec(),
            )
        } else {
            Node::Other(mode)
        };
        out.insert(rel, node);
    }
}

/// Asserts the tree under `copy` is what landing the tree under `source` must give: the same
/// paths, kinds, contents and symlink targets, the permission bits (all twelve: the tests run
/// as root) minus `umask` (0 for the `barge` command, which sets its umask aside), and
/// nothing else: the library's tree comparison (`cp --verify`'s), asked for modes and for
/// entries only the copy has.
pub fn assert_same_tree(source: &Path, copy: &Path, umask: u32) {
    let found = std::sync::Mutex::new(Vec::new());
    let compared = barge::compare::Compare::new()
        .modes(umask)
        .whole()
        .run(source, copy, &|e| found.lock().unwrap().push(e.to_string()));
    let found = found.into_inner().unwrap();
    let compared = compared.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        found.is_empty(),
        "{} vs {}: {found:#?}",
        source.display(),
        copy.display()
    );
    assert_eq!(compared.differences, 0);
}

/// Modification and change times, to the nanosecond.
type Stamp = (i64, i64, i64, i64);

fn stamp(meta: &fs::Metadata) -> Stamp {
    (
        meta.mtime(),
        meta.mtime_nsec(),
        meta.ctime(),
        meta.ctime_nsec(),
    )
}

/// A tree next to the destination that must not change (hostile archives aim symlinks and
/// hardlinks in the destination at it): any create, write, chmod or removal shows up.
pub struct Sentinel {
    dir: PathBuf,
    before: BTreeMap<Vec<u8>, (Node, Stamp)>,
}

impl Sentinel {
    /// Fills `dir` with files and a subdirectory for hostile archives to aim at.
    pub fn populate(dir: &Path) {
        fs::create_dir_all(dir.join("inner")).unwrap();
        file(&dir.join("secret"), b"do not touch\n", 0o644);
        file(&dir.join("inner/deep"), b"deep\n", 0o600);
    }

    /// Records the current state of `dir`.
    pub fn record(dir: &Path) -> Sentinel {
        let mut sentinel = Sentinel {
            dir: dir.to_path_buf(),
            before: BTreeMap::new(),
        };
        sentinel.before = sentinel.state();
        sentinel
    }

    fn state(&self) -> BTreeMap<Vec<u8>, (Node, Stamp)> {
        let mut state: BTreeMap<_, _> = scan(&self.dir)
            .into_iter()
            .map(|(path, node)| {
                let meta = fs::symlink_metadata(self.dir.join(name(&path))).unwrap();
                (path, (node, stamp(&meta)))
            })
            .collect();
        let meta = fs::symlink_metadata(&self.dir).unwrap();
        state.insert(Vec::new(), (Node::Dir(meta.mode()), stamp(&meta)));
        state
    }

    /// Asserts nothing in the sentinel was created, removed, modified or re-moded.
    pub fn assert_unchanged(&self, what: &str) {
        assert!(
            self.before == self.state(),
            "{what}: the outside tree changed"
        );
    }
}

/// Builds archives by hand, including invalid ones, with the library's message writers.
#[derive(Clone)]
pub struct Archive(pub Vec<u8>);

impl Archive {
    /// A header and nothing else.
    pub fn header() -> Archive {
        Archive(barge::format::HEADER.to_vec())
    }
    /// Appends a DIR message with a raw name (not validated).
    pub fn dir(mut self, name: &[u8]) -> Archive {
        self.0.push(barge::format::TAG_DIR);
        self.0.extend_from_slice(name);
        self.0.push(0);
        self
    }
    /// Appends a FILE message with a raw name and this content.
    pub fn file(mut self, name: &[u8], data: &[u8]) -> Archive {
        self.0.push(barge::format::TAG_FILE);
        self.0.extend_from_slice(name);
        self.0.push(0);
        self.0.extend_from_slice(&(data.len() as u32).to_le_bytes());
        self.0.extend_from_slice(data);
        self
    }
    /// Appends a POP.
    pub fn pop(mut self) -> Archive {
        self.0.push(barge::format::TAG_POP);
        self
    }
    /// Appends raw bytes.
    pub fn raw(mut self, bytes: &[u8]) -> Archive {
        self.0.extend_from_slice(bytes);
        self
    }
    /// Appends END with this count.
    pub fn end(mut self, count: u64) -> Vec<u8> {
        self.0.push(barge::format::TAG_END);
        self.0.extend_from_slice(&count.to_le_bytes());
        self.0
    }
}

/// Reads `path` fully in chunks and compares it to `other` without holding either in memory.
pub fn same_content(path: &Path, other: &Path) -> bool {
    let (mut a, mut b) = (
        fs::File::open(path).unwrap(),
        fs::File::open(other).unwrap(),
    );
    let (mut x, mut y) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = read_full(&mut a, &mut x);
        let m = read_full(&mut b, &mut y);
        if n != m || x[..n] != y[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
    }
}

fn read_full(file: &mut fs::File, buf: &mut [u8]) -> usize {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]).unwrap() {
            0 => break,
            n => filled += n,
        }
    }
    filled
}

/// Fails unless the tests run as root. For the tests marked `#[ignore = "needs root: ..."]`:
/// `cargo test` lists them as ignored where it does not run as root, and `scripts/test` runs
/// them as root (CI) with `--include-ignored`.
pub fn require_root() {
    assert!(
        is_root(),
        "this test needs root: run it as root (scripts/test does, with --include-ignored)"
    );
}

/// The file where [`skipped`] records each test that could not run (`scripts/test` lists
/// it after the tests, and removes it before them).
pub const SKIPPED_LOG: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/skipped-tests");

/// Ends a test that cannot run here for a reason known only at run time (no ptrace, no
/// loop device, no nested user namespaces, a mount that failed): the test passes, but the
/// skip is recorded, test name and reason, in [`SKIPPED_LOG`], which `scripts/test` lists
/// and counts (libtest cannot mark a test ignored at run time). With `BARGE_TEST_NO_SKIP`
/// set the skip fails the test instead, for a machine that must run everything.
pub fn skipped(reason: impl std::fmt::Display) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    assert!(
        std::env::var_os("BARGE_TEST_NO_SKIP").is_none(),
        "{test} cannot run here (BARGE_TEST_NO_SKIP is set): {reason}"
    );
    eprintln!("\n*** SKIPPED: {reason} ***\n");
    let mut log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(SKIPPED_LOG)
        .unwrap();
    log.write_all(format!("{test}: {reason}\n").as_bytes())
        .unwrap();
}

/// The calls the archive at `path` makes on a [`barge::tree::Recording`] (what `barge list`
/// sees, with every record).
pub fn recorded(path: &Path) -> Vec<barge::tree::Recorded> {
    let operation = barge::unpack::Unpack::new();
    let input = operation.open(Some(path)).unwrap();
    let mut recording = barge::tree::Recording::default();
    operation.list(&input, &mut recording).unwrap();
    recording.calls
}

/// The metadata `barge pack` records of `path` without `-a`: all mode bits and the
/// modification time (no owner).
pub fn packed_meta(path: &Path) -> barge::tree::Meta {
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    let mut meta =
        barge::tree::Meta::of_stat(&rustix::fs::statat(rustix::fs::CWD, path, flags).unwrap());
    meta.owner = None;
    meta
}

/// Sets the modification time of `path` (not following a symlink) to `sec`.`nsec`.
pub fn set_mtime(path: &Path, sec: i64, nsec: i64) {
    use rustix::fs::{Timespec, Timestamps, UTIME_OMIT};
    let times = Timestamps {
        last_access: Timespec {
            tv_sec: 0,
            tv_nsec: UTIME_OMIT,
        },
        last_modification: Timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        },
    };
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
    rustix::fs::utimensat(rustix::fs::CWD, path, &times, flags).unwrap();
}

/// A file system mounted at `path` (created) for as long as it lives (root only).
pub struct Mount(PathBuf);

impl Mount {
    /// A tmpfs of `size` (as mount's `size=` takes it).
    pub fn tmpfs(path: &Path, size: &str) -> Option<Mount> {
        fs::create_dir(path).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size}"))
            .arg("tmpfs")
            .arg(path)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Mount(path.to_path_buf()))
    }

    /// An ext4 of `mib` MiB made by mkfs.ext4 in the image file `image`, as Debian makes
    /// one (extended attributes in one block, no `ea_inode`), mounted through a loop device.
    pub fn ext4(image: &Path, path: &Path, mib: u64) -> Option<Mount> {
        fs::File::create(image).unwrap().set_len(mib << 20).unwrap();
        fs::create_dir(path).unwrap();
        let ok = |cmd: &mut Command| cmd.status().is_ok_and(|s| s.success());
        let made = ok(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(image));
        (made
            && ok(Command::new("mount")
                .args(["-o", "loop"])
                .arg(image)
                .arg(path)))
        .then(|| Mount(path.to_path_buf()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Packs `src` (with `barge pack`) into a version 2 archive at `out`, in segments closed at
/// `target` bytes, zstd at `level` where given, and returns its bytes.
pub fn pack_v2(src: &Path, out: &Path, target: usize, level: Option<i32>) -> Vec<u8> {
    let v1 = pack_to(src, "-");
    let mut encoder = barge::format::SegmentEncoder::new(Vec::new())
        .unwrap()
        .segment_target(target);
    if let Some(level) = level {
        encoder = encoder.zstd(level);
    }
    let v2 = barge::format::rewrite_v2(&v1, encoder).unwrap();
    fs::write(out, &v2).unwrap();
    v2
}
