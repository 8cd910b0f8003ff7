"""The barge benchmark harness (Python 3 standard library only).

Suites live in bench/suites/<name>.py and define ``run(ctx) -> {set name: result}`` where a
result is a dict with at least ``cases`` (the list ``measure`` returns), optional
``TARGETS = [(set, case label, minimum ratio)]`` (a peer's time / barge's),
``LIMITS = [(set, case label, field, maximum)]`` (upper bounds on a case's own ``ratio``, its
time / plain barge's, or ``syscalls_per_file``) and a module docstring that is shown in
docs/BENCHMARKS.md. ``ctx`` is a Ctx: ``barge`` (path of a frozen copy of the release binary),
``sets`` (DataSets the user selected), ``pairs``, ``trace`` (False with --quick: skip strace and
perf), ``engines`` (values of ``barge unpack --engine`` besides auto, [] without the option),
``floor`` ({name: path} of the floor programs bench/floor/<name>.c, built by bench/run:
the bare syscalls of an unpack or a pack, whose case is labelled FLOOR) and ``archive``
(whether ``barge pack`` has -a: the suites' `-a` rows need it).
``bench/run`` builds barge, calls the suites, adds run metadata to each set's result, writes
bench/results/<date>-<suite>.json and regenerates docs/BENCHMARKS.md (bench/report.py).

Stable API (everything else in this module is internal):

Commands and single runs
  Cmd(stages, cwd=None, stdin=None, stdout=None)
      A process, or a pipeline when ``stages`` holds several argv lists; ``stdin`` feeds the
      first stage from a file, ``stdout`` sends the last one to a file (default /dev/null).
      ``cmd(*argv, **kw)`` and ``pipeline(argv1, argv2, **kw)`` build them; ``str(c)`` is the
      shell equivalent shown in the docs.
  Duet(receiver, sender, ready=(), shown=None)
      Two sides of a network transfer: the Cmd ``receiver`` is started before the timed
      region and is ready once every TCP port in ``ready`` listens in its network namespace
      or, when ``ready`` is empty, once it printed its first stdout line; ``sender`` is a Cmd
      or a function of that line returning one (``shown`` is then its text in the docs). The
      time runs from the sender's start until both sides have exited. Every process runs in
      its own process group, killed when the run fails, hangs past DUET_TIMEOUT or is
      interrupted.
  run(cmd) -> Run(wall, user, sys, rss)  one timed run of a Cmd or Duet: posix_spawn +
                                         os.wait4 (seconds; rss: the receiving side's peak
                                         resident KiB, a Duet's receiver or a Cmd's last stage)
  listening(pid, ports) -> bool          whether every TCP port in ports listens in the
                                         network namespace of process pid
  user_sys(cmd) -> (user, sys)          CPU seconds of one run, from rusage (no strace)
  strace_count(cmd) -> (total, {syscall: calls})       one ``strace -c -f`` run
  strace_table(cmd) -> {syscall: (calls, errors, seconds)}  the same run, all columns
  perf_syscalls(cmd) -> {syscall: (calls, msec)} | None one ``perf trace -s`` run (in-kernel
                                                        time per syscall), None without perf
  perf_profile(cmd) -> [(symbol, percent)] | None       one ``perf record`` run: hottest functions

Measurement
  Case(label, cmd, setup=None, check=None, flag=False, rss=False)
                                         also accepted as a (label, setup, cmd) tuple
      ``setup()`` runs before every run, outside the timed region (e.g. ``fresh_dir``);
      ``check()`` runs after a run, outside it, and raises if the output is wrong (which stops
      the suite, or with ``flag`` marks the case ``wrong``). Every timed run starts after a
      ``SETTLE`` pause (see there). With ``rss``, the result has ``recv_mib``: the median
      of the receiving side's peak resident memory (MiB).
  interleave(cases, pairs, ref=0) -> [dict]
      One untimed warm-up run of each case, then ``pairs`` rounds running every case once
      (order reversed every other round: A B B A A B ...). Per case: ``times``, ``median``,
      ``user``, ``sys`` (means: the kernel splits CPU time between them by tick sampling, so
      one short run's split is noise but the mean over runs is not), ``ratios`` (case time /
      reference time of the same round), ``ratio`` (their median; > 1 means the reference,
      normally barge, is faster) and, for a ``flag`` case whose check failed, ``wrong`` (the
      first failure's message; report.py flags the row and its targets).
  measure(cases, pairs, files, ref=0, trace=True) -> [dict]
      ``interleave`` plus, per case (or per case whose label is in ``trace``, when it is a
      collection of labels), one run each of ``strace_count``, ``perf_syscalls`` and
      ``perf_profile`` (fields ``strace``, ``perf_msec``, ``profile``) and per-file figures
      (``syscalls``, ``syscalls_per_file``, ``sys_us_per_file``).
  busy_report(reset=False) -> {"load_max", "busy_procs"}   load seen between runs (bench/run
      stores it with each set and marks the set noisy when compilers, or any other process
      using more than BUSY_CPU seconds of CPU, were running)
  bench_helper(pid)   a process of the suite's own (the net suite's delay relay): not noise

Peers and disks
  install_crates(suite, {binary: crate | (crate, version)}) -> {binary: path}
                                         crates.io peers, installed once into PEER_CACHE
  DISK, ext4_image(image, mount, stamp, size, fill) -> bool
                                         a loop-mounted ext4 image under DISK, (re)made
                                         when its stamp changes; False when not root
  drop_caches(), mounted(path), unmount(path)

Data sets (on /dev/shm/barge-bench, cached, rebuilt when missing)
  SETS                                   default names: "linux", "small", "tiny-many"
  OPT_IN_SETS                            names only run when asked for: "flat-million",
                                         "big-files" (8 x 128 MiB, one dir), "one-big" (1 GiB),
                                         "disks" (linux, for bench/suites/disks.py),
                                         "skewed" (200 dirs of unequal file counts)
  dataset(name) -> DataSet(name, root, files, dirs, bytes, digest, meta_digest)
  FORMATS                                "barge", "tar", "cpio", "bsdtar"; ARCHIVE_FORMATS
                                         "barge -a", "tar --xattrs": everything as root
  archive(ds, fmt, barge) -> path        ds packed as fmt; made once (barge: per binary)
  drop_archives(ds)                      frees a set's archives (tmpfs is RAM, shared)
  pack_cmd(ds, fmt, barge, out) -> Cmd   the command that packs ds into file out as fmt
  file_digest(path) -> str               short content digest of one file
  tree_digest(path, meta=False) -> (digest, files, dirs, bytes)
                                         relative paths, kinds, contents, symlink targets;
                                         meta adds every entry's mode and mtime (to the ns)
  fresh_dir(path), remove(path)          rm -rf PATH && mkdir -p PATH; rm -rf PATH
  verify_tree(path, ds, meta=False)      raises unless tree_digest(path, meta) matches ds
  WORK                                   the work directory (scratch space under it is yours)
  FLOOR                                  label of the floor case ("floor"): report.py adds a
                                         "time / floor" column to a table that has one
  lock()                                 waits for, then holds, the WORK lock (bench/run takes it)

Results
  write_results(suite, sets) -> path     merges {set: result} into bench/results/<date>-<suite>.json
  env_info() -> dict                     kernel, CPU, cores, memory, tool versions
"""

import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import platform
import random
import re
import select
import shlex
import shutil
import signal
import statistics
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench", "results")
WORK = "/dev/shm/barge-bench"
LINUX_TARBALL = "/usr/src/linux-source-6.1.tar.xz"
SETS = ("linux", "small", "tiny-many")
# Sets too large or slow for the default run (`bench/run --sets flat-million`): 1,000,000 files
# take ~5 GiB of tmpfs per copy and a minute per checked run.
OPT_IN_SETS = ("flat-million", "big-files", "one-big", "disks", "skewed")
# Sets that are another set's tree under their own name (for the suites that know them):
# "disks" is linux written to loop-mounted ext4 and xfs images (bench/suites/disks.py).
ALIASES = {"disks": "linux"}
FORMATS = ("barge", "tar", "cpio", "bsdtar")
# Archives of everything root may record (owners, xattrs, ACLs, devices): the `-a` rows,
# whose target is at most 1.3x the time of the default's.
ARCHIVE_FORMATS = ("barge -a", "tar --xattrs")
FLOOR = "floor"
# Bump when a data set's recipe changes, so cached trees are rebuilt.
RECIPE = {
    "linux": 3,
    "small": 2,
    "tiny-many": 2,
    "flat-million": 2,
    "big-files": 1,
    "one-big": 1,
    "skewed": 1,
}
# Bump when tree_digest changes: cached sets then get their digests recomputed (not rebuilt).
DIGEST_VERSION = 2
# Processes whose presence during a run means the machine was busy (other engineers compiling).
BUSY_NAMES = {"rustc", "cargo", "cc", "ld", "clang", "gcc", "cc1", "node", "npm", "chromium"}


# ---------------------------------------------------------------- commands and runs

_lock_fd = None


def lock():
    """Takes an exclusive lock on WORK for the life of this process, first waiting for any other
    holder: two benchmark runs at once share scratch files and measure each other."""
    global _lock_fd
    os.makedirs(WORK, exist_ok=True)
    fd = os.open(os.path.join(WORK, "lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("bench: waiting for another benchmark run to finish (lock on WORK)", flush=True)
        fcntl.flock(fd, fcntl.LOCK_EX)
    _lock_fd = fd


@dataclasses.dataclass
class Ctx:
    """What bench/run hands to a suite's run()."""

    barge: str
    sets: list
    pairs: int
    trace: bool
    engines: list
    floor: dict = dataclasses.field(default_factory=dict)
    archive: bool = True


@dataclasses.dataclass
class Cmd:
    """A process or pipeline with optional input/output files and working directory."""

    stages: list
    cwd: str = None
    stdin: str = None
    stdout: str = None

    def __str__(self):
        s = " | ".join(shlex.join(a) for a in self.stages)
        if self.stdin:
            s += " < " + shlex.quote(self.stdin)
        if self.stdout:
            s += " > " + shlex.quote(self.stdout)
        return f"(cd {shlex.quote(self.cwd)} && {s})" if self.cwd else s


def cmd(*argv, **kw):
    """A one-process Cmd."""
    return Cmd([list(argv)], **kw)


def pipeline(*stages, **kw):
    """A pipeline Cmd: each argument is one stage's argv."""
    return Cmd([list(a) for a in stages], **kw)


@dataclasses.dataclass
class Duet:
    """A receiver started before the timed region and a sender (see the module docstring)."""

    receiver: Cmd
    sender: object
    ready: tuple = ()
    shown: str = None

    def __str__(self):
        return f"{self.receiver} & {self.shown or self.sender}"


@dataclasses.dataclass
class Run:
    """Wall-clock, user and system seconds of one run; the receiving side's peak RSS (KiB)."""

    wall: float
    user: float
    sys: float
    rss: int = 0


def _resolve(argv0):
    path = shutil.which(argv0)
    if not path:
        raise RuntimeError(f"command not found: {argv0}")
    return path


def _spawn(c, prefixes=None, out_fd=None, group=False):
    """Starts all stages of `c` and returns (pids, stderr path); prefixes[i] wraps stage i,
    `out_fd` (instead of c.stdout) becomes the last stage's stdout and with `group` every
    stage leads a process group of its own."""
    os.makedirs(os.path.join(WORK, "tmp"), exist_ok=True)
    err = os.path.join(WORK, "tmp", "stderr")
    pids, prev_read = [], None
    old = os.getcwd()
    if c.cwd:
        os.chdir(c.cwd)
    try:
        for i, argv in enumerate(c.stages):
            argv = (prefixes[i] if prefixes else []) + argv
            acts = [(os.POSIX_SPAWN_OPEN, 2, err, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)]
            if i == 0:
                src = c.stdin or "/dev/null"
                acts.append((os.POSIX_SPAWN_OPEN, 0, src, os.O_RDONLY, 0))
            else:
                acts.append((os.POSIX_SPAWN_DUP2, prev_read, 0))
            write_end = None
            if i == len(c.stages) - 1:
                if out_fd is not None:
                    acts.append((os.POSIX_SPAWN_DUP2, out_fd, 1))
                else:
                    dst = c.stdout or "/dev/null"
                    acts.append(
                        (os.POSIX_SPAWN_OPEN, 1, dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                    )
            else:
                next_read, write_end = os.pipe()
                acts.append((os.POSIX_SPAWN_DUP2, write_end, 1))
            kw = {"setpgroup": 0} if group else {}
            pids.append(os.posix_spawn(_resolve(argv[0]), argv, os.environ, file_actions=acts, **kw))
            if prev_read is not None:
                os.close(prev_read)
            if write_end is not None:
                os.close(write_end)
                prev_read = next_read
    finally:
        os.chdir(old)
    return pids, err


def _wait(c, pids, err, deadline=None):
    """Waits for all pids (until the time.monotonic() `deadline`, if any: then raises
    TimeoutError); returns (user, sys) summed and the last pid's peak RSS (KiB); raises on
    failure with stderr text."""
    user = sys_ = 0.0
    rss = 0
    failed = []
    for pid in pids:
        if deadline is not None:
            fd = os.pidfd_open(pid)
            try:
                if not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
                    raise TimeoutError(f"{c} ran past {DUET_TIMEOUT} s")
            finally:
                os.close(fd)
        _, status, ru = os.wait4(pid, 0)
        user += ru.ru_utime
        sys_ += ru.ru_stime
        rss = ru.ru_maxrss
        if os.waitstatus_to_exitcode(status) != 0:
            failed.append(os.waitstatus_to_exitcode(status))
    if failed:
        with open(err, errors="replace") as f:
            text = f.read()[-2000:]
        raise RuntimeError(f"{c} failed (exit {failed}): {text}")
    return user, sys_, rss


def _clear_stderr():
    path = os.path.join(WORK, "tmp", "stderr")
    if os.path.exists(path):
        os.unlink(path)


# Longest a Duet may take, from its receiver's start to both sides' exit (seconds).
DUET_TIMEOUT = 300


def listening(pid, ports):
    """Whether every TCP port in `ports` listens in the network namespace of process `pid`."""
    found = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A":  # TCP_LISTEN
                    found.add(int(local.rsplit(":", 1)[1], 16))
    return set(ports) <= found


def _ready(d, pid, out, deadline):
    """Waits until Duet `d`'s receiver (first pid `pid`, stdout pipe `out`) is ready; returns
    its first line ("" when `d.ready` names ports)."""
    if d.ready:
        while not listening(pid, d.ready):
            if time.monotonic() > deadline or os.waitpid(pid, os.WNOHANG)[0]:
                raise RuntimeError(f"{d.receiver} did not listen on {d.ready}")
            time.sleep(0.005)
        return ""
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([out], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise TimeoutError(f"{d.receiver} printed no line in {DUET_TIMEOUT} s")
        chunk = os.read(out, 4096)
        if not chunk:
            raise RuntimeError(f"{d.receiver} exited without printing a line")
        line += chunk
    return line.decode().splitlines()[0]


def _run_duet(d):
    deadline = time.monotonic() + DUET_TIMEOUT
    out, out_w = os.pipe()
    pids = []
    try:
        rpids, err = _spawn(d.receiver, out_fd=out_w, group=True)
        pids += rpids
        os.close(out_w)
        out_w = None
        line = _ready(d, rpids[0], out, deadline)
        sender = d.sender(line) if callable(d.sender) else d.sender
        t0 = time.perf_counter()
        spids, _ = _spawn(sender, group=True)
        pids += spids
        # A failure names the sender as shown (its real argv may hold a secret).
        user, sys_, _ = _wait(d.shown or sender, spids, err, deadline)
        # The receiver's later lines (e.g. a --json summary) must not fill the pipe.
        while select.select([out], [], [], max(0.0, deadline - time.monotonic()))[0]:
            if not os.read(out, 65536):
                break
        ruser, rsys, rss = _wait(d.receiver, rpids, err, deadline)
        wall = time.perf_counter() - t0
        pids = []
        return Run(wall, user + ruser, sys_ + rsys, rss)
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        os.close(out)
        if out_w is not None:
            os.close(out_w)


def run(c):
    """Runs `c` (a Cmd or a Duet) once and returns its Run (wall time from spawn, a Duet's
    sender's, to the last wait4)."""
    _clear_stderr()
    if isinstance(c, Duet):
        return _run_duet(c)
    t0 = time.perf_counter()
    pids, err = _spawn(c)
    user, sys_, rss = _wait(c, pids, err)
    return Run(time.perf_counter() - t0, user, sys_, rss)


def user_sys(c):
    """(user, sys) CPU seconds of one run of `c`, from rusage."""
    r = run(c)
    return r.user, r.sys


def _traced(c, tool):
    """Runs `c` with every stage wrapped by tool(out_path); returns the output paths."""
    _clear_stderr()
    outs = [os.path.join(WORK, "tmp", f"trace{i}") for i in range(len(c.stages))]
    pids, err = _spawn(c, [tool(o) for o in outs])
    _wait(c, pids, err)
    return outs


def strace_table(c):
    """{syscall: (calls, errors, seconds)} from one `strace -c -f` run of `c`."""
    table = {}
    for out in _traced(c, lambda o: ["strace", "-c", "-f", "-o", o, "--"]):
        with open(out) as f:
            for line in f:
                parts = line.split()
                if len(parts) < 5 or not parts[0][0].isdigit() or parts[-1] == "total":
                    continue
                secs, calls, name = float(parts[1]), int(parts[3]), parts[-1]
                errors = int(parts[4]) if len(parts) == 6 else 0
                c0, e0, s0 = table.get(name, (0, 0, 0.0))
                table[name] = (c0 + calls, e0 + errors, s0 + secs)
    return table


def strace_count(c):
    """(total syscalls, {syscall: calls}) from one `strace -c -f` run of `c`."""
    calls = {k: v[0] for k, v in strace_table(c).items()}
    return sum(calls.values()), calls


def perf_syscalls(c):
    """{syscall: (calls, msec in the kernel)} from one `perf trace -s` run, or None."""
    if not shutil.which("perf"):
        return None
    table = {}
    for out in _traced(c, lambda o: ["perf", "trace", "-s", "-o", o, "--"]):
        with open(out) as f:
            for line in f:
                m = re.match(r"\s+(\w+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s", line)
                if m:
                    c0, t0 = table.get(m[1], (0, 0.0))
                    table[m[1]] = (c0 + int(m[2]), t0 + float(m[4]))
    return table


def perf_profile(c, top=12):
    """[(symbol, percent)] of the hottest functions (kernel ones start with "[k]") from one
    `perf record` run of `c` (first stage only), or None without perf."""
    if not shutil.which("perf"):
        return None
    data = os.path.join(WORK, "tmp", "perf.data")
    first = Cmd(c.stages[:1], c.cwd, c.stdin, c.stdout if len(c.stages) == 1 else None)
    _traced(first, lambda o: ["perf", "record", "-q", "-o", data, "--"])
    rep = subprocess.run(
        ["perf", "report", "-i", data, "--stdio", "--sort", "sym", "--no-children"],
        capture_output=True, text=True,
    ).stdout
    rows = []
    for line in rep.splitlines():
        m = re.match(r"\s+([\d.]+)%\s+(\[.\]\s+\S+)", line)
        if m and len(rows) < top:
            rows.append((m[2].replace("  ", " "), float(m[1])))
    return rows


# ---------------------------------------------------------------- measurement


@dataclasses.dataclass
class Case:
    """One benchmarked command; setup/check run outside the timed region. With `flag`, a
    check that raises marks the case wrong (its result's ``wrong`` field, shown in the tables)
    instead of stopping the suite; with `rss`, the receiving side's peak memory is reported."""

    label: str
    cmd: object
    setup: object = None
    check: object = None
    flag: bool = False
    rss: bool = False


def _case(c):
    if isinstance(c, Case):
        return c
    label, setup, command = c
    return Case(label, command, setup)


_busy = {"load_max": 0.0, "procs": set(), "ticks": {}, "samples": 0, "helpers": set()}
# CPU seconds another process may use during a suite before the run counts as busy.
BUSY_CPU = 5.0


def _cpu_ticks(pid):
    """(name, user + system clock ticks) of a user-space process, or None (kernel threads,
    which work for the benchmarked commands too, and vanished processes)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[1] in ("0", "2"):  # ppid 2: kthreadd's children
        return None
    return name, int(fields[11]) + int(fields[12])


def bench_helper(pid):
    """Marks the process `pid` as part of what a suite measures (the net suite's link delay
    relay), not as another process that makes a run noisy."""
    _busy["helpers"].add(pid)


def _sample_load():
    """Records the load average, compiler-like processes and the CPU time of every other
    process (another helper's tests take a core without any compiler running)."""
    with open("/proc/loadavg") as f:
        _busy["load_max"] = max(_busy["load_max"], float(f.read().split()[0]))
    me = os.getpid()
    first = _busy["samples"] == 0
    _busy["samples"] += 1
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) in (me, *_busy["helpers"]):
            continue
        got = _cpu_ticks(pid)
        if not got:
            continue
        name, ticks = got
        if name in BUSY_NAMES:
            _busy["procs"].add(name)
        # A process first seen after the first sample started during the suite: all of its
        # CPU time counts.
        base = _busy["ticks"].get(pid, (name, ticks if first else 0))[1]
        _busy["ticks"][pid] = (name, base, ticks)


def busy_report(reset=False):
    """{"load_max", "busy_procs"} seen since the last reset (sampled between runs): compilers,
    and any other process that used more than BUSY_CPU seconds of CPU meanwhile."""
    hz = os.sysconf("SC_CLK_TCK")
    procs = set(_busy["procs"])
    for name, base, ticks in _busy["ticks"].values():
        if (ticks - base) / hz > BUSY_CPU:
            procs.add(f"{name} ({(ticks - base) / hz:.0f} s CPU)")
    out = {"load_max": _busy["load_max"], "busy_procs": sorted(procs)}
    if reset:
        _busy.update(load_max=0.0, procs=set(), ticks={}, samples=0)
    return out


# Idle time before every timed run. Work this process did just before spawning (a check's
# digest, even 5 ms of spinning) made the next run of a 3 ms command ~0.6 ms slower (small,
# 30 rounds x 3, 2026-11-23: 3.1-3.6 ms without a check, 3.9-4.0 with one, 2.9-3.5 with the
# check then 20 ms of sleep). barge's runs are all checked and most peers' are not, so
# without the pause the harness itself made barge look slower.
SETTLE = 0.03


def _once(case, wrong):
    """One timed run of `case`; a flagged case's failed check goes into {label: message}
    `wrong` (the first failure only)."""
    if case.setup:
        case.setup()
    time.sleep(SETTLE)
    r = run(case.cmd)
    if case.check:
        try:
            case.check()
        except Exception as e:
            if not case.flag:
                raise
            print(f"bench: **{case.label} copied wrong: {e}**", flush=True)
            wrong.setdefault(case.label, str(e).splitlines()[0][:200])
    _sample_load()
    return r


def interleave(cases, pairs, ref=0):
    """Interleaved runs of all cases; see the module docstring for the result fields."""
    cases = [_case(c) for c in cases]
    wrong = {}
    for case in cases:
        _once(case, wrong)
    runs = [[] for _ in cases]
    for r in range(pairs):
        order = list(range(len(cases)))
        for i in order if r % 2 == 0 else reversed(order):
            runs[i].append(_once(cases[i], wrong))
    out = []
    for case, rs in zip(cases, runs):
        ratios = [a.wall / b.wall for a, b in zip(rs, runs[ref])]
        res = {
            "label": case.label,
            "cmd": str(case.cmd),
            "times": [round(x.wall, 6) for x in rs],
            "median": statistics.median(x.wall for x in rs),
            "user": statistics.fmean(x.user for x in rs),
            "sys": statistics.fmean(x.sys for x in rs),
            "ratios": [round(x, 4) for x in ratios],
            "ratio": statistics.median(ratios),
        }
        if case.label in wrong:
            res["wrong"] = wrong[case.label]
        if case.rss:
            res["recv_mib"] = statistics.median(x.rss for x in rs) / 1024
        out.append(res)
    return out


def pairs_for(ds, pairs):
    """Rounds for data set `ds`: a run on a set under 1,000 files takes milliseconds, where
    one scheduling hiccup is a large share, so such sets get 20 times `pairs`."""
    return pairs * 20 if ds.files < 1000 else pairs


def measure(cases, pairs, files, ref=0, trace=True):
    """interleave() plus one strace and one perf run per case (``trace`` True; or only the
    cases whose labels ``trace`` holds, when it is a collection) and per-file figures."""
    cases = [_case(c) for c in cases]
    out = interleave(cases, pairs, ref)
    for case, res in zip(cases, out):
        res["sys_us_per_file"] = res["sys"] / files * 1e6
        if trace is not True and (not trace or case.label not in trace):
            continue
        if case.setup:
            case.setup()
        table = strace_table(case.cmd)
        res["syscalls"] = sum(v[0] for v in table.values())
        res["syscalls_per_file"] = res["syscalls"] / files
        res["strace"] = {k: v[0] for k, v in sorted(table.items(), key=lambda kv: -kv[1][0])}
        if case.setup:
            case.setup()
        perf = perf_syscalls(case.cmd)
        if perf:
            res["perf_msec"] = {
                k: [v[0], round(v[1], 3)] for k, v in sorted(perf.items(), key=lambda kv: -kv[1][1])
            }
        if case.setup:
            case.setup()
        res["profile"] = perf_profile(case.cmd)
    return out


# ---------------------------------------------------------------- peers and disks

# Where suites install peers from crates.io (cargo install --root).
PEER_CACHE = os.environ.get("BARGE_BENCH_PEERS", os.path.expanduser("~/.cache/barge-bench/peers"))
# Where loop-mounted images live: a real disk (tmpfs pages survive drop_caches).
DISK = os.environ.get("BARGE_BENCH_DISK", "/var/tmp/barge-bench")


def _version_of(path):
    r = subprocess.run([path, "--version"], capture_output=True, text=True)
    return r.stdout + r.stderr


def install_crates(suite, crates):
    """{binary: path} of peers from crates.io, installed with `cargo install --locked` into
    PEER_CACHE when missing; ``crates`` maps each binary to its crate name or to (crate,
    version): a pinned binary whose `--version` does not name that version is reinstalled.
    A peer whose install fails is left out with a note."""
    print(f"bench {suite}: peers from crates.io are installed with cargo install --locked into {PEER_CACHE}")
    found = {}
    for binary, spec in crates.items():
        crate, version = spec if isinstance(spec, tuple) else (spec, None)
        path = os.path.join(PEER_CACHE, "bin", binary)
        if not os.path.exists(path) or (version and version not in _version_of(path)):
            pin = ["--version", version, "--force"] if version else []
            r = subprocess.run(["cargo", "install", "--locked", "--root", PEER_CACHE, crate, *pin])
            if r.returncode != 0:
                print(f"bench {suite}: **cargo install {crate} FAILED: {binary} is left out of this run**")
                continue
        found[binary] = path
    return found


def mounted(path):
    """Whether something is mounted at `path`."""
    return subprocess.run(["mountpoint", "-q", path]).returncode == 0


def drop_caches():
    """Writes back dirty pages and drops the page, dentry and inode caches (root only)."""
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def ext4_image(image, mount, stamp, size, fill):
    """Mounts the ext4 image file `image` at `mount` through a loop device, first (re)making
    it when its `mount`/stamp.txt does not hold `stamp`: a sparse file of `size` bytes,
    mkfs.ext4, then fill(mount). False (with a note) when not root."""
    if os.geteuid() != 0:
        print("bench: **not root: cannot mount an ext4 image or drop caches; no cold runs**")
        return False
    os.makedirs(mount, exist_ok=True)
    stamp_file = os.path.join(mount, "stamp.txt")
    if os.path.exists(image) and not mounted(mount):
        subprocess.run(["mount", "-o", "loop", image, mount], check=True)
    if not (os.path.exists(stamp_file) and open(stamp_file).read() == stamp):
        if mounted(mount):
            subprocess.run(["umount", mount], check=True)
        print(f"bench: making the ext4 image {image} ({size >> 20} MiB)", flush=True)
        remove(image)
        subprocess.run(["truncate", "-s", str(size), image], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
        subprocess.run(["mount", "-o", "loop", image, mount], check=True)
        fill(mount)
        with open(stamp_file, "w") as f:
            f.write(stamp)
        subprocess.run(["sync"], check=True)
    return True


def unmount(mount):
    """Unmounts `mount` if mounted (errors ignored: a busy mount stays)."""
    if mounted(mount):
        subprocess.run(["umount", mount], check=False)


# ---------------------------------------------------------------- data sets


@dataclasses.dataclass
class DataSet:
    """A prepared source tree on tmpfs and its manifest."""

    name: str
    root: str
    files: int
    dirs: int
    bytes: int
    digest: str
    meta_digest: str


def remove(path):
    """rm -rf PATH."""
    if os.path.lexists(path):
        subprocess.run(["rm", "-rf", "--", path], check=True)


def fresh_dir(path):
    """Removes `path` (recursively) and creates it empty."""
    remove(path)
    os.makedirs(path)


def tree_digest(path, meta=False):
    """(hex digest, files, dirs, bytes) over sorted relative paths, kinds, file contents and
    symlink targets; with `meta`, also every entry's mode (12 bits) and mtime in ns."""
    h = hashlib.blake2b(digest_size=16)
    counts = [0, 0, 0]

    def walk(d, rel):
        with os.scandir(d) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            name = rel + e.name.encode("utf-8", "surrogateescape")
            st = e.stat(follow_symlinks=False)
            if meta:
                h.update(b"m" + (st.st_mode & 0o7777).to_bytes(2, "little"))
                h.update(st.st_mtime_ns.to_bytes(12, "little", signed=True))
            if e.is_dir(follow_symlinks=False):
                counts[1] += 1
                h.update(b"d" + name + b"\0")
                walk(e.path, name + b"/")
            elif e.is_file(follow_symlinks=False):
                counts[0] += 1
                counts[2] += st.st_size
                h.update(b"f" + name + b"\0" + st.st_size.to_bytes(8, "little"))
                with open(e.path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        h.update(chunk)
            elif e.is_symlink():
                h.update(b"l" + name + b"\0" + os.fsencode(os.readlink(e.path)) + b"\0")
            else:
                h.update(b"o" + name + b"\0")

    walk(path, b"")
    return (h.hexdigest(), *counts)


def verify_tree(path, ds, meta=False):
    """Raises unless the tree at `path` has the same digest as data set `ds` (with `meta`:
    the same modes and mtimes too, what `barge unpack` and `tar -xpf` restore)."""
    digest, files, dirs, size = tree_digest(path, meta)
    if digest != (ds.meta_digest if meta else ds.digest):
        raise RuntimeError(
            f"{path} differs from data set {ds.name}{' (modes and mtimes included)' if meta else ''}: "
            f"{files} files, {dirs} dirs, {size} bytes (expected {ds.files}, {ds.dirs}, {ds.bytes})"
        )


def _make_linux(dst):
    src = os.path.join(WORK, "tmp", "linux-extract")
    fresh_dir(src)
    subprocess.run(["tar", "-xJf", LINUX_TARBALL, "-C", src], check=True)
    (top,) = os.listdir(src)
    os.rename(os.path.join(src, top), dst)
    os.rmdir(src)


# A fixed ~100-file subset of the linux tree: two real source directories.
SMALL_DIRS = ("kernel/sched", "fs/ext4")


def _make_small(dst):
    linux = dataset("linux").root
    for d in SMALL_DIRS:
        shutil.copytree(os.path.join(linux, d), os.path.join(dst, d), symlinks=True)


def _make_tiny_many(dst):
    """100,000 files of 1-8 KiB in 1,000 directories (100 each), seed 3."""
    rng = random.Random(3)
    for d in range(1000):
        sub = os.path.join(dst, f"d{d:03}")
        os.makedirs(sub)
        for i in range(100):
            with open(os.path.join(sub, f"f{i:02}"), "wb") as f:
                f.write(rng.randbytes(rng.randint(1024, 8192)))


def _make_skewed(dst):
    """200 directories of unequal file counts (Pareto, shape 1.1, at least 15, at most 4,000:
    17,282 files, the largest directory 2,369), files of 1-2,000 random bytes, seeds 34 and
    35: a tree whose parts hashed to the ranks leave them unequal shares (issue 34's
    stealing)."""
    counts, rng = random.Random(34), random.Random(35)
    for d in range(200):
        sub = os.path.join(dst, f"d{d:03}")
        os.makedirs(sub)
        for i in range(min(4000, int(counts.paretovariate(1.1) * 15))):
            with open(os.path.join(sub, f"f{i}"), "wb") as f:
                f.write(rng.randbytes(1 + (i * 37) % 2000))


def _make_flat_million(dst):
    """1,000,000 files of 100-200 bytes in one directory, seed 5: the shape of an ML image
    data set (issue 17), with contents small enough for tmpfs."""
    rng = random.Random(5)
    os.makedirs(dst)
    for i in range(1_000_000):
        with open(os.path.join(dst, f"{i:07}.jpg"), "wb") as f:
            f.write(rng.randbytes(rng.randint(100, 200)))


def _random_file(path, size, rng):
    """A file of `size` random bytes from `rng`."""
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(rng.randbytes(1 << 20))


def _make_big_files(dst):
    """8 files of 128 MiB of random bytes in one directory, seed 7 (issue 32: the files of one
    directory shared between threads)."""
    rng = random.Random(7)
    os.makedirs(dst)
    for i in range(8):
        _random_file(os.path.join(dst, f"f{i}.bin"), 128 << 20, rng)


def _make_one_big(dst):
    """One file of 1 GiB of random bytes, seed 11 (issue 32: one file copied in chunks)."""
    os.makedirs(dst)
    _random_file(os.path.join(dst, "big.bin"), 1 << 30, random.Random(11))


def _whole_seconds(root):
    """Truncates every mtime below `root` to whole seconds, children before their directory:
    GNU tar's default format keeps no more, and the peers' outputs are checked against the
    set's mtimes as barge's are."""
    for d, dirs, files in os.walk(root, topdown=False):
        for name in files + dirs:
            path = os.path.join(d, name)
            st = os.lstat(path)
            whole = st.st_mtime_ns - st.st_mtime_ns % 1_000_000_000
            os.utime(path, ns=(st.st_atime_ns, whole), follow_symlinks=False)


_MAKERS = {
    "linux": _make_linux,
    "small": _make_small,
    "tiny-many": _make_tiny_many,
    "flat-million": _make_flat_million,
    "big-files": _make_big_files,
    "one-big": _make_one_big,
    "skewed": _make_skewed,
}
_datasets = {}


def dataset(name):
    """The prepared data set `name` (built on first use, then cached with a manifest)."""
    if name in _datasets:
        return _datasets[name]
    if name in ALIASES:
        return dataclasses.replace(dataset(ALIASES[name]), name=name)
    root = os.path.join(WORK, "sets", name)
    manifest = root + ".manifest.json"
    m = None
    if os.path.isdir(root) and os.path.exists(manifest):
        with open(manifest) as f:
            m = json.load(f)
        if m.get("recipe") != RECIPE[name]:
            m = None
    if m is None:
        print(f"bench: preparing data set {name} in {root}", flush=True)
        for p in (manifest, root, root + ".building"):
            remove(p)
        os.makedirs(os.path.dirname(root), exist_ok=True)
        tmp = root + ".building"
        _MAKERS[name](tmp)
        _whole_seconds(tmp)
        os.rename(tmp, root)
    if m is None or m.get("digest_version") != DIGEST_VERSION:
        digest, files, dirs, size = tree_digest(root)
        m = dict(name=name, root=root, files=files, dirs=dirs, bytes=size, digest=digest)
        m.update(meta_digest=tree_digest(root, meta=True)[0])
        with open(manifest, "w") as f:
            json.dump(dict(m, recipe=RECIPE[name], digest_version=DIGEST_VERSION), f, indent=1)
    ds = DataSet(name, root, m["files"], m["dirs"], m["bytes"], m["digest"], m["meta_digest"])
    _datasets[name] = ds
    return ds


def pack_cmd(ds, fmt, barge, out):
    """The command packing data set `ds` into file `out` in format `fmt` (see FORMATS and
    ARCHIVE_FORMATS)."""
    if fmt == "barge":
        return cmd(barge, "pack", ds.root, "-o", out)
    if fmt == "barge -a":
        return cmd(barge, "pack", "-a", ds.root, "-o", out)
    if fmt == "tar":
        return cmd("tar", "-cf", out, ".", cwd=ds.root)
    if fmt == "tar --xattrs":
        return cmd("tar", "--xattrs", "--acls", "-cf", out, ".", cwd=ds.root)
    if fmt == "bsdtar":
        return cmd("bsdtar", "-cf", out, ".", cwd=ds.root)
    if fmt == "cpio":
        # find's pre-order lists every directory before its contents, as `cpio -id` needs.
        return pipeline(["find", "."], ["cpio", "-o", "-H", "newc", "--quiet"], cwd=ds.root, stdout=out)
    raise ValueError(fmt)


def file_digest(path):
    """Short blake2b hex digest of a file's contents."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "blake2b").hexdigest()[:32]


def _archive_name(ds, fmt):
    """The file name of `ds` archived as `fmt` ("linux.barge", "linux.tar-xattrs")."""
    return ds.name + "." + fmt.replace(" ", "").replace("--", "-")


def archive(ds, fmt, barge):
    """Path of data set `ds` archived as `fmt`; made once per data set digest, metadata
    included (and barge binary)."""
    d = os.path.join(WORK, "archives")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, _archive_name(ds, fmt))
    stamp = ds.meta_digest + (file_digest(barge) if fmt.startswith("barge") else "")
    if os.path.exists(path) and os.path.exists(path + ".stamp"):
        with open(path + ".stamp") as f:
            if f.read() == stamp:
                return path
    print(f"bench: archiving {ds.name} as {fmt}", flush=True)
    run(pack_cmd(ds, fmt, barge, path))
    with open(path + ".stamp", "w") as f:
        f.write(stamp)
    return path


def drop_archives(ds):
    """Removes every cached archive of `ds` (the linux ones take 5 GiB of RAM)."""
    d = os.path.join(WORK, "archives")
    for fmt in FORMATS + ARCHIVE_FORMATS:
        name = _archive_name(ds, fmt)
        for p in (name, name + ".stamp"):
            if os.path.exists(os.path.join(d, p)):
                os.unlink(os.path.join(d, p))


# ---------------------------------------------------------------- results


def _first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True).stdout
    except OSError:
        return None
    return out.splitlines()[0] if out else None


def env_info():
    """Machine and tool description stored with every result."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem_kib = int(f.readline().split()[1])
    return {
        "kernel": platform.release(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "mem_gib": round(mem_kib / 2**20, 1),
        "python": platform.python_version(),
        "tools": {
            t: _first_line(a)
            for t, a in {
                "tar": ["tar", "--version"],
                "cpio": ["cpio", "--version"],
                "bsdtar": ["bsdtar", "--version"],
                "strace": ["strace", "-V"],
                "cp": ["cp", "--version"],
                "rsync": ["rsync", "--version"],
            }.items()
        },
    }


def write_results(suite, sets):
    """Merges `sets` ({set name: result}) into bench/results/<date>-<suite>.json; returns the path."""
    os.makedirs(RESULTS, exist_ok=True)
    date = datetime.date.today().isoformat()
    path = os.path.join(RESULTS, f"{date}-{suite}.json")
    doc = {"suite": suite, "date": date, "sets": {}}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc["sets"].update(sets)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    return path


def once(fn):
    """`fn` on the first call only (peers are checked on their warm-up run)."""
    done = []

    def wrapper():
        if not done:
            done.append(True)
            fn()

    return wrapper
