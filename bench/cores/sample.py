"""Where the threads of a timed command wait or spin, without perf (issue 32, the disk rows).

    summary = Sampler(dest_dir).run(cmd)     # wall and CPU seconds, and where the time went
    facts(dest_dir)                          # the file system's settings and its groups' state

Each source is used where the machine has it:
- /proc, every PERIOD_MS (5): each thread of the command's process tree: its state (R, D,
  S), wchan, syscall and, as root, kernel stack (for a thread on a CPU, where it last left
  one), and its user and system time.
- tracefs, as root, in an instance of its own: the stack of every timer tick that interrupts
  one of those threads (a profile of where the CPU time goes; kernel frames) and of every
  lock contention (lock:contention_begin); jbd2's per-commit statistics and ext4's block
  allocations (counts) on the destination's device.
- Counters before and after: /proc/vmstat (dirty, writeback), the destination's journal
  (/proc/fs/jbd2/DEV-8/info), its allocator (/proc/fs/ext4/DEV/mb_stats, turned on),
  /proc/lock_stat where the kernel has it.
run.py samples the disk rows (SAMPLE=0 turns it off) and writes each summary as JSON and a
short table (`table`).
"""
import collections
import os
import re
import struct
import subprocess
import threading
import time

PERIOD = float(os.environ.get("PERIOD_MS", "5")) / 1000
# Lock contentions whose stack is recorded, at most (all are counted).
CONTENTION_STACKS = int(os.environ.get("CONTENTION_STACKS", "20000"))
TRACING = "/sys/kernel/tracing"
# Frames that say only that a thread waits or spins, not where: the frame after them does.
GENERIC = re.compile(
    r"^(__schedule|schedule.*|io_schedule.*|preempt_schedule.*|_?_cond_resched|"
    r"bit_wait.*|__wait_on_bit.*|out_of_line_wait_on_bit.*|folio_wait_bit.*|"
    r"rwsem_down_.*|__mutex_lock.*|mutex_lock.*|down_read.*|down_write.*|rwsem_.*|osq_lock|"
    r"mutex_spin_on_owner|_raw_spin_lock.*|_raw_read_lock.*|_raw_write_lock.*|"
    r"(native|__pv)_queued_spin_lock_slowpath|queued_(read|write)_lock_slowpath|"
    r"do_raw_spin_lock|pv_.*|kvm_wait|__lock_buffer|__wait_on_buffer|do_nanosleep|"
    r"trace_.*|__traceiter_.*|__trace_.*)$")
FS = re.compile(r"^(__)?(ext4|jbd2|mb_|xfs|__ext4|ext4_mb|__jbd2)")
SYSCALL = re.compile(r"^(__x64_sys_|__do_sys_|__se_sys_|do_sys_|ksys_)")
# x86-64 syscall numbers of what a copy or a landing calls (/proc/TID/syscall gives numbers).
SYSCALLS = {0: "read", 1: "write", 3: "close", 8: "lseek", 17: "pread64", 18: "pwrite64",
            40: "sendfile", 72: "fcntl", 74: "fsync", 91: "fchmod", 93: "fchown",
            162: "sync", 188: "setxattr", 190: "fsetxattr", 202: "futex", 217: "getdents64",
            257: "openat", 258: "mkdirat", 260: "fchownat", 262: "newfstatat",
            263: "unlinkat", 265: "linkat", 266: "symlinkat", 268: "fchmodat",
            280: "utimensat", 306: "syncfs", 326: "copy_file_range", 332: "statx",
            437: "openat2", 61: "wait4", 7: "poll", 232: "epoll_wait", 230: "clock_nanosleep"}


def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default


def device(path):
    """The block device name of the file system holding `path` (vda1, loop0), or None."""
    st = os.stat(path)
    link = f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    return os.path.basename(os.path.realpath(link)) if os.path.exists(link) else None


def numbers(text):
    """{key: number} of a file of `key: number` lines (sections prefix their keys)."""
    out, sections = {}, []
    for line in text.splitlines():
        m = re.match(r"^(\s*)([^:]+):\s*(-?\d+)?\s*$", line)
        if not m:
            continue
        depth = len(m.group(1).expandtabs(1))
        sections = [(d, name) for d, name in sections if d < depth]
        if m.group(3) is None:
            sections.append((depth, m.group(2).strip()))
        else:
            out[".".join([name for _, name in sections[1:]] + [m.group(2).strip()])] = int(m.group(3))
    return out


def jbd2(dev):
    """The journal's cumulative figures: transactions and its averages (ms, us, counts)."""
    text = read(f"/proc/fs/jbd2/{dev}-8/info")
    if not text:
        return None
    out = {"transactions": int(re.search(r"(\d+) transactions", text).group(1))}
    for value, what in re.findall(r"^\s+(\d+)(?:ms|us)? (.+)$", text, re.M):
        out[what.strip()] = int(value)
    return out


def jbd2_delta(before, after):
    """The averages of the transactions committed between two `jbd2` readings."""
    if not before or not after:
        return None
    n = after["transactions"] - before["transactions"]
    out = {"transactions": n}
    for key, value in after.items():
        # the commit time is a moving average, not a cumulative one
        if key not in ("transactions", "average transaction commit time") and key in before and n > 0:
            out[key] = round((value * after["transactions"] - before[key] * before["transactions"]) / n, 1)
    return out


def counters(dev):
    """What the run changes: vmstat's writeback figures, the journal, the allocator."""
    vm = numbers(read("/proc/vmstat").replace(" ", ": "))
    keep = ("nr_dirty", "nr_writeback", "nr_dirtied", "nr_written", "pgpgin", "pgpgout")
    out = {"vmstat": {k: vm.get(k) for k in keep}}
    if dev:
        out["jbd2"] = jbd2(dev)
        out["mb_stats"] = numbers(read(f"/proc/fs/ext4/{dev}/mb_stats"))
        out["lifetime_write_kbytes"] = int(read(f"/sys/fs/ext4/{dev}/lifetime_write_kbytes", "0") or 0)
    return out


def delta(before, after):
    out = {"vmstat": {k: (after["vmstat"][k] or 0) - (before["vmstat"][k] or 0)
                      for k in after["vmstat"] if k not in ("nr_dirty", "nr_writeback")}}
    out["vmstat"]["nr_dirty_end"] = after["vmstat"]["nr_dirty"]
    if "jbd2" in after:
        out["jbd2"] = jbd2_delta(before["jbd2"], after["jbd2"])
        out["mb_stats"] = {k: v - before["mb_stats"].get(k, 0) for k, v in after["mb_stats"].items()
                           if v != before["mb_stats"].get(k, 0)}
        out["write_kbytes"] = after["lifetime_write_kbytes"] - before["lifetime_write_kbytes"]
    return out


class Tasks:
    """The threads of a process tree, found by ppid (no /proc/PID/task/TID/children here)."""

    def __init__(self, root):
        self.root, self.procs, self.foreign, self.last_scan = root, {root}, set(), 0.0

    def scan(self):
        self.last_scan = time.monotonic()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in self.procs or int(name) in self.foreign:
                continue
            stat = read(f"/proc/{name}/stat")
            if not stat:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            (self.procs if ppid in self.procs else self.foreign).add(int(name))
        # a process seen before its parent was known is looked at again next time
        self.foreign = {p for p in self.foreign if p < self.root}

    def threads(self):
        if time.monotonic() - self.last_scan > 0.05:
            self.scan()
        for pid in list(self.procs):
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                yield pid, int(tid)


def frame_names(stack):
    return [line.split()[1].split("+")[0] for line in stack.splitlines() if len(line.split()) > 1]


def where(frames):
    """(first frame that names a place, first file system frame, the syscall) of a stack,
    innermost first."""
    places = [f for f in frames if not GENERIC.match(f)]
    fs = next((f for f in frames if FS.match(f)), "-")
    sys = next((SYSCALL.sub("", f) for f in frames if SYSCALL.match(f)), "-")
    return (places[0] if places else (frames[0] if frames else "-")), fs, sys


class Tracer:
    """Timer-tick and lock-contention stacks of one process tree, and jbd2's and ext4's
    per-event figures for one device, in a tracefs instance of its own (root only)."""

    def __init__(self, dev_t):
        self.dir = None
        if not os.path.isdir(f"{TRACING}/instances"):
            subprocess.run(["mount", "-t", "tracefs", "nodev", TRACING], capture_output=True)
        if not os.path.isdir(f"{TRACING}/instances"):
            return
        self.dev_t = dev_t
        self.dir = f"{TRACING}/instances/barge-sample"
        self.fsdir = f"{TRACING}/instances/barge-sample-fs"
        try:
            for d in (self.dir, self.fsdir):
                if os.path.isdir(d):
                    os.rmdir(d)
                os.mkdir(d)
        except OSError:
            self.dir = None

    def put(self, path, text):
        try:
            with open(path, "w") as f:
                f.write(text)
            return True
        except OSError:
            return False

    def start(self):
        if not self.dir:
            return
        d, fs = self.dir, self.fsdir
        # per CPU: room for a few seconds of spinning's contention events besides the ticks
        self.put(f"{d}/buffer_size_kb", "16384")
        self.put(f"{d}/options/event-fork", "1")
        # this thread's children (the command) and theirs, not the sampling thread
        self.put(f"{d}/set_event_pid", str(os.getpid()))
        # every tick's stack; the stacks of the first contentions only: each costs microseconds
        self.events = []
        for e, trigger in (("irq_vectors/local_timer_entry", "stacktrace"),
                           ("lock/contention_begin", f"stacktrace:{CONTENTION_STACKS}")):
            if self.put(f"{d}/events/{e}/trigger", trigger) and self.put(f"{d}/events/{e}/enable", "1"):
                self.events.append(e)
        self.put(f"{fs}/buffer_size_kb", "8192")
        self.fsevents = []
        for e in ("jbd2/jbd2_run_stats", "jbd2/jbd2_checkpoint_stats", "jbd2/jbd2_lock_buffer_stall",
                  "ext4/ext4_mballoc_alloc", "ext4/ext4_discard_blocks"):
            if os.path.isdir(f"{fs}/events/{e}"):
                self.put(f"{fs}/events/{e}/filter", f"dev == {self.dev_t}")
                if self.put(f"{fs}/events/{e}/enable", "1"):
                    self.fsevents.append(e)

    def stop(self):
        """The events as {"ticks": stacks, "contention": [(flags, stack)], "fs": {...}}."""
        if not self.dir:
            return None
        for d, evs in ((self.dir, self.events), (self.fsdir, self.fsevents)):
            for e in evs:
                self.put(f"{d}/events/{e}/enable", "0")
        for e in self.events:
            self.put(f"{self.dir}/events/{e}/trigger", "!stacktrace")
            self.put(f"{self.dir}/events/{e}/trigger", "!stacktrace:0")
        me = os.getpid()
        ticks, contention, flags, lost = [], [], collections.Counter(), 0
        event, stack = None, None
        for line in read(f"{self.dir}/trace").splitlines() + ["end"]:
            if line.startswith("#"):
                m = re.search(r"entries-in-buffer/entries-written: (\d+)/(\d+)", line)
                lost += int(m.group(2)) - int(m.group(1)) if m else 0
            elif line.startswith(" => "):
                if stack is not None:
                    stack.append(line[4:].split("+")[0].strip())
                continue
            if stack is not None and event:
                self._keep(event, stack, ticks, contention)
                event, stack = None, None
            if line.endswith("<stack trace>"):
                stack = []
                continue
            m = re.match(r"^\s*(.+)-(\d+)\s+\[\d+\].*?: (\S+): ?(.*)$", line)
            if m and int(m.group(2)) != me:
                event = (m.group(3), m.group(4))
                if event[0] == "contention_begin":
                    flags[(re.findall(r"flags=(\S+)\)", event[1]) or ["?"])[0]] += 1
        fsstats = self._fs_stats()
        for d in (self.dir, self.fsdir):
            os.rmdir(d)
        return {"ticks": ticks, "contention": contention, "contention_flags": dict(flags), "lost": lost,
                "fs": fsstats}

    @staticmethod
    def _keep(event, stack, ticks, contention):
        # a stack is told by its tracepoint: an event in an interrupt can come between
        # another event and its stack
        if stack and stack[0] == "trace_event_raw_event_contention_begin":
            flags = re.search(r"flags=(\S+)\)", event[1]) if event[0] == "contention_begin" else None
            contention.append((flags.group(1) if flags else "?", stack[1:]))
        elif any("apic_timer_interrupt" in f for f in stack):
            # the frames below the interrupt's entry are the interrupted code; none: user space
            cut = max(i for i, f in enumerate(stack) if "apic_timer_interrupt" in f)
            ticks.append(stack[cut + 1:])

    def _fs_stats(self):
        """Sums and counts of the jbd2 and ext4 events' numeric fields."""
        sums = collections.defaultdict(lambda: collections.Counter())
        for line in read(f"{self.fsdir}/trace").splitlines():
            m = re.match(r"^\s*.+-\d+\s+\[\d+\].*?: (\w+): (.*)$", line)
            if not m:
                continue
            s = sums[m.group(1)]
            s["events"] += 1
            for key, value in re.findall(r"(\w+) (-?\d+)\b", m.group(2)):
                if key not in ("dev", "ino", "inode", "tid", "pid"):
                    s[key] += int(value)
        return {k: dict(v) for k, v in sums.items()}


class Sampler:
    """Runs commands whose threads it samples; `dest`: the directory they write below."""

    def __init__(self, dest, trace=True):
        parent = dest
        while not os.path.exists(parent):
            parent = os.path.dirname(parent)
        self.dev = device(parent)
        self.dev_t = (os.major(os.stat(parent).st_dev) << 20) | os.minor(os.stat(parent).st_dev)
        self.trace = trace and os.geteuid() == 0
        self.mb_stats = f"/sys/fs/ext4/{self.dev}/mb_stats"
        if self.dev and os.path.exists(self.mb_stats):
            try:
                with open(self.mb_stats, "w") as f:
                    f.write("1")
            except OSError:
                pass

    def run(self, cmd, timeout=300):
        """(wall s, cpu s, summary) of `cmd` run by sh, or (None, None, summary) if it failed."""
        before = counters(self.dev)
        has_lock_stat = os.path.exists("/proc/lock_stat")
        if has_lock_stat:
            open("/proc/lock_stat", "w").write("0\n")
        tracer = Tracer(self.dev_t) if self.trace else None
        if tracer:
            tracer.start()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        samples, cpu, stop = [], {}, threading.Event()
        thread = threading.Thread(target=self._sample, args=(proc.pid, samples, cpu, stop))
        thread.start()
        try:
            _, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        wall = time.perf_counter() - t0
        stop.set()
        thread.join()
        traced = tracer.stop() if tracer else None
        after = counters(self.dev)
        summary = summarise(samples, traced)
        summary["counters"] = delta(before, after)
        summary["cpu_user_s"] = round(sum(u for u, _ in cpu.values()), 2)
        summary["cpu_sys_s"] = round(sum(s for _, s in cpu.values()), 2)
        if has_lock_stat:
            summary["lock_stat"] = read("/proc/lock_stat").splitlines()[:80]
        summary["wall_s"] = round(wall, 3)
        if proc.returncode != 0:
            summary["failed"] = f"status {proc.returncode}: {err.decode(errors='replace')[-300:]}"
            return None, None, summary
        return wall, summary["cpu_user_s"] + summary["cpu_sys_s"], summary

    def _sample(self, root, samples, cpu, stop):
        tasks, tick = Tasks(root), os.sysconf("SC_CLK_TCK")
        while not stop.is_set():
            now = time.perf_counter()
            for pid, tid in tasks.threads():
                base = f"/proc/{pid}/task/{tid}"
                stat = read(f"{base}/stat")
                if not stat:
                    continue
                comm = stat[stat.index("(") + 1:stat.rindex(")")]
                f = stat.rsplit(")", 1)[1].split()
                cpu[tid] = (int(f[11]) / tick, int(f[12]) / tick)
                state = f[0]
                if state in "SI" and comm == "sh":
                    continue  # the shell that waits for the command
                sc = read(f"{base}/syscall").split()
                sysname = sc[0] if sc else "?"
                if sysname.isdigit():
                    sysname = SYSCALLS.get(int(sysname), sysname)
                frames = frame_names(read(f"{base}/stack")) if state in "RD" else []
                samples.append((comm, state, read(f"{base}/wchan") or "-", sysname, tuple(frames[:12])))
            stop.wait(max(0.0, PERIOD - (time.perf_counter() - now)))


def top(counter, n, total):
    return [(k, v, round(100 * v / total, 1)) for k, v in counter.most_common(n)] if total else []


def summarise(samples, traced):
    """Counts of the /proc samples and of the traced stacks, most frequent first."""
    states = collections.Counter(s for _, s, _, _, _ in samples)
    waits = collections.Counter(f"{s} {w} [{sc}]" for _, s, w, sc, _ in samples if s not in "R")
    stacks = collections.Counter()
    for _, s, _, sc, frames in samples:
        if s in "RD" and frames:
            place, fs, sys = where(frames)
            stacks[f"{s} {place} < {fs} < {sys}"] += 1
    out = {"samples": len(samples), "states": dict(states),
           "proc_waits": top(waits, 12, len(samples)), "proc_stacks": top(stacks, 12, len(samples))}
    if traced:
        ticks = traced["ticks"]
        leaf, place, fs, calls = (collections.Counter() for _ in range(4))
        for st in ticks:
            if not st:
                leaf["[user]"] += 1
                calls["[user]"] += 1
                continue
            p, f, sys = where(st)
            leaf[st[0]] += 1
            calls[sys] += 1
            place[f"{p} < {f} < {sys}"] += 1
            fs[f] += 1
        cont = collections.Counter()
        for flags, st in traced["contention"]:
            p, f, sys = where(st)
            cont[f"{flags} {p} < {f} < {sys}"] += 1
        out.update({"ticks": len(ticks), "tick_leaf": top(leaf, 12, len(ticks)),
                    "tick_place": top(place, 15, len(ticks)), "tick_fs": top(fs, 10, len(ticks)),
                    "tick_syscall": top(calls, 10, len(ticks)),
                    "contentions": sum(traced["contention_flags"].values()),
                    "contention_flags": traced["contention_flags"], "contention_stacks": len(traced["contention"]),
                    "trace_lost": traced["lost"],
                    "contention": top(cont, 12, len(traced["contention"])), "fs_events": traced["fs"]})
    return out


def table(label, s):
    """A short text table of one summary."""
    lines = [f"== {label}: wall {s.get('wall_s')} s, user {s.get('cpu_user_s')} s, sys {s.get('cpu_sys_s')} s, "
             f"/proc samples {s['samples']} {s['states']}"]
    for key, title in (("tick_syscall", "ticks by syscall"), ("tick_place", "ticks (where the CPU time goes)"),
                       ("tick_leaf", "ticks, innermost frame"),
                       ("contention", "lock contentions"), ("proc_stacks", "/proc stacks of R and D threads"),
                       ("proc_waits", "/proc wchan of waiting threads")):
        if s.get(key):
            extra = f" of {s.get('ticks')}" if key.startswith("tick") else (
                f" ({s.get('contention_stacks')} stacks of {s.get('contentions')} {s.get('contention_flags')})"
                if key == "contention" else "")
            lines.append(f"  {title}{extra}:")
            lines += [f"    {pct:5.1f}% {n:7d}  {what}" for what, n, pct in s[key][:8]]
    c = s.get("counters", {})
    lines.append(f"  vmstat: {c.get('vmstat')}")
    if c.get("jbd2"):
        lines.append(f"  jbd2: {c['jbd2']}")
    if c.get("mb_stats"):
        lines.append(f"  mb_stats: {c['mb_stats']}")
    for ev, st in (s.get("fs_events") or {}).items():
        lines.append(f"  {ev}: {st}")
    return "\n".join(lines)


# ---------------------------------------------------------------- the file system's facts


def superblock(dev):
    """ext4 superblock facts and its groups' flags, read from the device (root), or None."""
    try:
        with open(f"/dev/{dev}", "rb") as f:
            sb = f.read(2048)[1024:]
            magic = struct.unpack_from("<H", sb, 0x38)[0]
            if magic != 0xEF53:
                return None
            inodes, blocks_lo, _, free_lo, free_inodes, first, log_bs = struct.unpack_from("<7I", sb, 0)
            per_group, = struct.unpack_from("<I", sb, 0x20)
            compat, incompat, ro_compat = struct.unpack_from("<3I", sb, 0x5C)
            blocks = blocks_lo | (struct.unpack_from("<I", sb, 0x150)[0] << 32 if incompat & 0x80 else 0)
            desc = struct.unpack_from("<H", sb, 0xFE)[0] if incompat & 0x80 else 32
            bs = 1024 << log_bs
            groups = (blocks - first + per_group - 1) // per_group
            f.seek((first + 1) * bs)
            gdt = f.read(groups * desc)
    except (OSError, struct.error):
        return None
    flags = collections.Counter()
    for g in range(groups):
        bg = struct.unpack_from("<H", gdt, g * desc + 0x12)[0]
        flags["inode_uninit"] += bool(bg & 1)
        flags["block_uninit"] += bool(bg & 2)
        flags["itable_not_zeroed"] += not bg & 4
    return {"inodes": inodes, "free_inodes": free_inodes, "blocks": blocks, "free_blocks_lo": free_lo,
            "block_size": bs, "groups": groups, "has_journal": bool(compat & 4),
            "flex_bg": bool(incompat & 0x200), "metadata_csum": bool(ro_compat & 0x400),
            "uninit_bg": bool(ro_compat & 0x10), "mkfs_time": struct.unpack_from("<I", sb, 0x108)[0],
            "group_flags": dict(flags)}


def facts(path):
    """What decides how ext4 behaves under `path`: the mount, its options, the device's queue,
    the superblock and how many groups were never used (lazy init), the writeback settings."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    dev = device(path)
    out = {"path": path, "device": dev}
    r = subprocess.run(["findmnt", "-no", "TARGET,SOURCE,FSTYPE,OPTIONS", "-T", path], capture_output=True, text=True)
    out["findmnt"] = r.stdout.strip() if r.returncode == 0 else None
    mounts = [line.split() for line in read("/proc/mounts").splitlines()]
    best = max((m for m in mounts if path.startswith(m[1])), key=lambda m: len(m[1]), default=None)
    out["mount"] = " ".join(best) if best else None
    if dev:
        out["ext4_options"] = read(f"/proc/fs/ext4/{dev}/options").split()
        sysfs = f"/sys/fs/ext4/{dev}"
        out["ext4_sysfs"] = {n: read(f"{sysfs}/{n}").strip() for n in sorted(os.listdir(sysfs))
                             if not n.startswith(("trigger", "simulate"))} if os.path.isdir(sysfs) else None
        out["mb_structs_summary"] = read(f"/proc/fs/ext4/{dev}/mb_structs_summary")[:2000] or None
        out["journal"] = read(f"/proc/fs/jbd2/{dev}-8/info") or None
        disk = os.path.basename(os.path.dirname(os.path.realpath(f"/sys/class/block/{dev}")))
        queue = f"/sys/block/{dev}/queue" if os.path.isdir(f"/sys/block/{dev}/queue") else f"/sys/block/{disk}/queue"
        out["queue"] = {n: read(f"{queue}/{n}").strip() for n in (
            "rotational", "scheduler", "discard_max_bytes", "discard_granularity", "nr_requests",
            "write_cache", "max_sectors_kb") if os.path.exists(f"{queue}/{n}")}
        out["loop_backing"] = read(f"/sys/block/{dev}/loop/backing_file").strip() or None
        out["superblock"] = superblock(dev)
        # without a journal ext4 skips inodes deleted in the last minute when it allocates
        task = (out["ext4_sysfs"] or {}).get("journal_task")
        out["has_journal"] = out["superblock"]["has_journal"] if out["superblock"] else (
            None if task is None else task != "<none>")
    out["vm"] = {n: read(f"/proc/sys/vm/{n}").strip() for n in (
        "dirty_ratio", "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes",
        "dirty_expire_centisecs", "dirty_writeback_centisecs")}
    out["ext4lazyinit_running"] = any(read(f"/proc/{p}/comm").strip() == "ext4lazyinit"
                                      for p in os.listdir("/proc") if p.isdigit())
    return out


if __name__ == "__main__":
    # python3 bench/cores/sample.py DEST CMD...: one sampled run of CMD, which writes below DEST
    import json
    import sys
    wall, cpu, summary = Sampler(sys.argv[1]).run(" ".join(sys.argv[2:]))
    print(table(" ".join(sys.argv[2:]), summary))
    if os.environ.get("JSON"):
        with open(os.environ["JSON"], "w") as f:
            json.dump({"summary": summary, "facts": facts(sys.argv[1])}, f, indent=1)
