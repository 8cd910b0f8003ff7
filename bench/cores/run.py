#!/usr/bin/env python3
"""The many-cores rows (issue 32) in one run on a lent machine: no compiler, no network there.

    OUT=DIR [SCALE=1] [REPS=3] [LIMIT_S=450] [ROWS=unpack,cp,du,pack,net,cores,disk]
        [DISK_SYNC=1] [SAMPLE=1] python3 bench/cores/run.py

Takes the static binaries in bench/cores/kit (bench/cores/prepare puts them there: barge,
floor-cp, cpz, fcp, diskus, xcp, and barge-base, an earlier barge to compare with in the main
rows, when given; carry that folder to the machine), generates the sets on a tmpfs it mounts (a linux-like tree of 78,000
files in 4,700 dirs, tiny-many: 100,000 files of 0-63 bytes in 100 dirs, big: 8 x 512 MiB in
one dir), and runs every row of issue 32 with its peers, interleaved, then the disk rows on
the machine's own disk (/var/tmp), caches dropped before each run. Each run's wall time and
CPU time (user + system of everything it started) go to $OUT/results.json, rewritten after
every row so that a run cut short still leaves what it measured; $OUT/log.txt has the table.
SCALE=0.02 REPS=1 runs it all in seconds, to try a change here before spending machine time.
ROWS picks the groups of rows to run (all by default), DISK_SYNC=0 leaves out the disk rows
that time `sync`: a shorter run for a machine lent for less time.

The disk rows also compare the barges built with another ext4 creator cap (prepare's
EXT4_CAPS: kit/barge-ext4-N), copy first into new directories beside the old ones (space
never written; the other rows reuse the space the last run freed), record the file system's facts
($OUT/disk-facts.json: mount options, journal, discard, groups never used) and sample where
the threads of the first round of each case wait or spin (sample.py: $OUT/samples/*.json and
$OUT/samples.txt; SAMPLE=0: none). ROWS=loop (not in the default) runs fewer of them in a
journaled ext4 in an image file on the same disk.
"""
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time

import sample

KIT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kit")
OUT = os.environ.get("OUT", "/tmp/cores-out")
SCALE = float(os.environ.get("SCALE", "1"))
REPS = int(os.environ.get("REPS", "3"))
LIMIT = float(os.environ.get("LIMIT_S", "450"))
W = os.environ.get("WORK", "/mnt/cores")
DISK = os.environ.get("DISK_DIR", "/var/tmp/barge-cores")
ROWS = set(os.environ.get("ROWS", "unpack,cp,du,pack,net,cores,disk").split(","))
DISK_SYNC = os.environ.get("DISK_SYNC", "1") != "0"
SAMPLE = os.environ.get("SAMPLE", "1") != "0"
T0 = time.time()
results = []
os.makedirs(OUT, exist_ok=True)
log = open(os.path.join(OUT, "log.txt"), "w")


def say(*words):
    line = " ".join(str(w) for w in words)
    print(line, flush=True)
    log.write(line + "\n")
    log.flush()


def sh(cmd, timeout=120, check=False):
    r = subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{cmd}: status {r.returncode}: {r.stderr[-300:]}")
    return r


def tool(name):
    path = os.path.join(KIT, name)
    return path if os.path.exists(path) else None


def children_cpu():
    u = resource.getrusage(resource.RUSAGE_CHILDREN)
    return u.ru_utime + u.ru_stime


def timed_once(cmd, sampler=None, label=None):
    """(wall seconds, CPU seconds) of one run of `cmd`, or None when it failed; with a
    sampler, where its threads spent the time goes to $OUT/samples."""
    if sampler:
        cpu = children_cpu()
        wall, _, summary = sampler.run(cmd)
        cpu = children_cpu() - cpu
        os.makedirs(f"{OUT}/samples", exist_ok=True)
        with open(f"{OUT}/samples/{label.replace(' ', '_').replace('/', '_')}.json", "w") as f:
            json.dump(summary, f, indent=1)
        with open(f"{OUT}/samples.txt", "a") as f:
            f.write(sample.table(label, summary) + "\n\n")
        if wall is None:
            say(f"  FAILED {cmd}: {summary.get('failed')}")
            return None
        return wall, cpu
    cpu = children_cpu()
    start = time.perf_counter()
    try:
        r = sh(cmd)
    except subprocess.TimeoutExpired:
        say(f"  TIMEOUT {cmd}")
        return None
    wall = time.perf_counter() - start
    if r.returncode != 0:
        say(f"  FAILED ({r.returncode}) {cmd}: {r.stderr.strip()[-300:]}")
        return None
    return wall, children_cpu() - cpu


def row(op, setname, cases, reps=REPS, cpus=None, sampler=None):
    """cases: (name, prepare, command); every case once per round, order reversed every other
    round; `cpus` pins the commands with taskset; `sampler` samples each case's first round."""
    got = {name: [] for name, _, _ in cases}
    for rnd in range(reps):
        for name, prep, cmd in cases if rnd % 2 == 0 else cases[::-1]:
            if time.time() - T0 > LIMIT:
                say(f"  time limit: skipped {op} {setname} {name}")
                continue
            if prep:
                sh(prep, timeout=300)
            t = timed_once(f"taskset -c {cpus} {cmd}" if cpus else cmd,
                           sampler if rnd == 0 else None, f"{op} {setname} {name}")
            if t:
                got[name].append(t)
    for name, runs in got.items():
        if not runs:
            continue
        walls = sorted(w for w, _ in runs)
        med = walls[len(walls) // 2]
        cpu = sorted(c for _, c in runs)[len(runs) // 2]
        results.append({"op": op, "set": setname, "case": name, "cpus": cpus or "all",
                        "wall": [w for w, _ in runs], "cpu": [c for _, c in runs],
                        "median": med, "cpu_median": cpu})
        say(f"{op:12s} {setname:6s} {name:34s} cpus={cpus or 'all':5s} "
            f"median {med:7.3f} s  min {walls[0]:7.3f}  cpu {cpu:7.2f} s  n={len(runs)}")
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump({"scale": SCALE, "reps": REPS, "nproc": os.cpu_count(), "rows": results}, f, indent=1)


def gen_tree(root, nfiles, ndirs, size, seed):
    """A tree of `ndirs` directories (mostly near each other, as in a source tree) holding
    `nfiles` files of random content and sizes from `size`, and 50 symlinks."""
    rnd = random.Random(seed)
    data = memoryview(os.urandom(4 << 20))
    dirs = [root]
    os.makedirs(root)
    for i in range(ndirs):
        parent = rnd.choice(dirs[-200:]) if rnd.random() < 0.7 else rnd.choice(dirs)
        dirs.append(os.path.join(parent, f"d{i}"))
        os.mkdir(dirs[-1])
    total = 0
    for i in range(nfiles):
        n = size(rnd)
        off = rnd.randrange(0, len(data) - n)
        fd = os.open(os.path.join(rnd.choice(dirs), f"f{i}.c"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, data[off:off + n])
        os.close(fd)
        total += n
    for i in range(50):
        os.symlink(f"f{i}.c", os.path.join(rnd.choice(dirs), f"l{i}"))
    return total


def main():
    global W
    say(f"nproc {os.cpu_count()} | {sh('uname -r').stdout.strip()} | {sh('free -g | sed -n 2p').stdout.strip()}")
    say(sh("tar --version | head -1; cp --version | head -1; du --version | head -1").stdout.strip())
    os.makedirs(W, exist_ok=True)
    if sh(f"mount -t tmpfs -o size=90g tmpfs {W}").returncode != 0:
        W = "/dev/shm/barge-cores"
        say(f"no tmpfs mounted; using {W}")
        shutil.rmtree(W, ignore_errors=True)
        os.makedirs(W)
    B = tool("barge")
    # an earlier barge to compare with, in the same run (prepare's BARGE_BASE)
    base = tool("barge-base")
    floor = tool("floor-cp")
    peers = {p: tool(p) for p in ("cpz", "fcp", "diskus", "xcp") if tool(p)}
    say(f"barge {sh(B + ' --version').stdout.strip()}; floor-cp {bool(floor)}; peers {sorted(peers)}")
    lin, tiny, big, D = f"{W}/linux", f"{W}/tiny", f"{W}/big", f"{W}/dest"
    clean = f"rm -rf {D}"
    made = time.time()
    n = gen_tree(lin, int(78000 * SCALE), int(4700 * SCALE) + 1,
                 lambda r: min(int(r.lognormvariate(8.3, 1.6)), 1 << 20), 1)
    n2 = gen_tree(tiny, int(100000 * SCALE), 100, lambda r: r.randrange(0, 64), 2)
    os.makedirs(big)
    block = os.urandom(64 << 20)
    files, blocks = (8, 8) if SCALE >= 1 else (2, 1)
    for i in range(files):
        with open(f"{big}/b{i}", "wb") as f:
            for _ in range(blocks):
                f.write(block)
    for name, src in (("linux", lin), ("tiny", tiny)):
        sh(f"{B} pack {src} -o {W}/{name}.barge", check=True)
        sh(f"tar -C {src} -cf {W}/{name}.tar .", check=True)
    say(f"sets: linux-like {n / 1e9:.2f} GB, tiny-many {n2} bytes, big {files} files; made in {time.time() - made:.1f} s")

    def based(name, argv):
        """The case `name` (barge's), and the same with the base barge when there is one."""
        cases = [(f"barge {name}", clean, f"{B} {argv}")]
        return cases + ([(f"barge-base {name}", clean, f"{base} {argv}")] if base else [])

    def cps(src, extra=()):
        cases = [*based("cp", f"cp {src} {D}"), *extra, ("cp -a", clean, f"cp -a {src} {D}")]
        if floor:
            cases.append(("floor-cp -j 16", clean, f"{floor} -j 16 {src} {D}"))
        for name, argv in (("cpz", "{} {} {}"), ("fcp", "{} {} {}"), ("xcp -r", "{} -r {} {}")):
            if name.split()[0] in peers:
                cases.append((name, clean, argv.format(peers[name.split()[0]], src, D)))
        return cases

    # tmpfs rows, the table in its order
    for name in ("linux", "tiny") if "unpack" in ROWS else ():
        row("unpack", name, [
            *based("unpack", f"unpack {W}/{name}.barge {D}"),
            ("barge unpack --engine threads", clean, f"{B} unpack --engine threads {W}/{name}.barge {D}"),
            ("tar -xf", f"{clean} && mkdir {D}", f"tar -xf {W}/{name}.tar -C {D}"),
        ])
    if "cp" in ROWS:
        row("cp", "linux", cps(lin, [(f"barge cp -j {j}", clean, f"{B} cp -j {j} {lin} {D}") for j in (8, 16, 32)]))
        row("cp", "tiny", cps(tiny))
        row("cp", "big", cps(big), reps=2)
    if "du" in ROWS:
        dus = [*based("du", f"du {lin}"), ("du -sb", None, f"du -sb {lin}")]
        if "diskus" in peers:
            dus.append(("diskus", None, f"{peers['diskus']} {lin}"))
        row("du", "linux", dus, reps=5)
    if "pack" in ROWS:
        row("pack", "linux", [("barge pack", f"rm -f {W}/o", f"{B} pack {lin} -o {W}/o"),
                              ("tar -cf", f"rm -f {W}/o", f"tar -C {lin} -cf {W}/o .")], reps=2)
    if "net" in ROWS:
        net(B, lin, D, clean)
    # how each scales with cores (taskset): the 16-core target is at most the 4-core time
    for k in (1, 2, 4, 8, 16) if "cores" in ROWS else ():
        if k > (os.cpu_count() or 1):
            continue
        cpus = f"0-{k - 1}"
        row("unpack", "tiny", based("unpack", f"unpack {W}/tiny.barge {D}"), reps=2, cpus=cpus)
        row("cp", "linux", based("cp", f"cp {lin} {D}")
            + ([(f"floor-cp -j {k}", clean, f"{floor} -j {k} {lin} {D}")] if floor else []), reps=1, cpus=cpus)
        row("du", "linux", based("du", f"du {lin}"), reps=2, cpus=cpus)
    if "disk" in ROWS:
        disk(B, base, lin, peers)
    if "loop" in ROWS:
        loop_disk(B, base, lin, peers)
    say(f"done in {time.time() - T0:.0f} s")
    sh(f"umount {W}")


def net(B, src, D, clean):
    """send to a one-shot recv on loopback (the sender's wall time, recv finished), against the
    pack | unpack pipe and tar | tar."""
    walls = []
    for rep in range(REPS):
        sh(clean)
        port = 47100 + rep
        recv = subprocess.Popen(f"exec {B} recv --listen 127.0.0.1:{port} {D}", shell=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        ticket = recv.stdout.readline().split()
        ticket = next((w for w in ticket if f":{port}#" in w), None)
        if not ticket:
            say("  recv printed no ticket")
            recv.kill()
            break
        t = timed_once(f"{B} send {src} {ticket}")
        recv.wait(timeout=60)
        if t and recv.returncode == 0:
            walls.append(t)
    if walls:
        w = sorted(x for x, _ in walls)
        results.append({"op": "net", "set": "linux", "case": "barge send | recv (loopback)", "cpus": "all",
                        "wall": [x for x, _ in walls], "median": w[len(w) // 2]})
        say(f"{'net':12s} {'linux':6s} {'barge send | recv (loopback)':34s} cpus=all   median {w[len(w) // 2]:7.3f} s")
    row("net", "linux", [
        ("barge pack | unpack", clean, f"{B} pack {src} -o - | {B} unpack - {D}"),
        ("tar | tar", f"{clean} && mkdir {D}", f"tar -C {src} -cf - . | tar -xf - -C {D}"),
    ], reps=2)


def disk(B, base, lin, peers, dd=DISK, tag="disk", short=False):
    """cp from tmpfs onto the disk below `dd`, first into new directories (space never
    written, the usual case), then cp and unpack with the copy removed, synced and the
    caches dropped before each run (each run reuses the space the last one freed, as a copy
    made soon after a large delete does: ext4 without a journal skips the inodes freed in
    the last minute), with and without `sync` in the timing. `short`: fewer cases (the
    journaled loop image)."""
    drop = f"rm -rf {dd} && sync && echo 3 > /proc/sys/vm/drop_caches"
    parent = os.path.dirname(dd)
    say(sh(f"mkdir -p {parent} && df -hT {parent} | tail -1").stdout.strip())
    facts = {"before": sample.facts(parent)}
    f, sb = facts["before"], facts["before"].get("superblock") or {}
    say(f"{tag}: {f['mount']}; ext4 {' '.join(f.get('ext4_options') or [])}; journal {f.get('has_journal')}; "
        f"groups {sb.get('groups')} {sb.get('group_flags')}; queue {f.get('queue')}")
    sampler = sample.Sampler(dd) if SAMPLE else None
    # barges built with another creator cap into ext4 (prepare's EXT4_CAPS): all in the
    # copies into new directories, 1 and none (64) in the others
    caps = sorted((n for n in os.listdir(KIT) if n.startswith("barge-ext4-")), key=lambda n: int(n.split("-")[-1]))
    few = [c for c in caps if c.endswith(("-1", "-64"))]

    def cps(into, prep, variants, suffix=""):
        """The default (2 threads creating into ext4), other thread counts and caps, cp -a."""
        return [("barge cp", prep, f"{B} cp {lin} {into}{suffix}"),
                *([("barge-base cp", prep, f"{base} cp {lin} {into}{suffix}")] if base and not short else []),
                *[(f"barge cp -j {j}", prep, f"{B} cp -j {j} {lin} {into}{suffix}") for j in ((1,) if short else (1, 2))],
                *[(f"{c} cp", prep, f"{KIT}/{c} cp {lin} {into}{suffix}") for c in variants],
                ("cp -a", prep, f"cp -a {lin} {into}{suffix}")]

    # Space never written, first: each copy into a new directory, the old ones kept. Nothing
    # was deleted before them; once something is, ext4 may put new directories in the groups
    # it freed (they hold no directories), and the copies would reuse space after all.
    fresh = f"{dd}-fresh"
    cases = cps(f"{fresh}/$(ls {fresh} | wc -l)", "sync && echo 3 > /proc/sys/vm/drop_caches", few if short else caps)
    room, need = shutil.disk_usage(parent).free, 2 * len(cases) * 1.2e9 * SCALE * 1.3 + 0.5e9
    if room < need:
        say(f"  {tag}: {room / 1e9:.1f} GB free of the {need / 1e9:.1f} needed: no copies into new directories")
    else:
        os.makedirs(fresh)
        row(f"cp {tag}-fresh", "linux", cases, reps=2, sampler=sampler)
    sh(f"rm -rf {fresh}", timeout=600)
    for suffix, op in (("", tag), (" && sync", f"{tag}+sync"))[:2 if DISK_SYNC else 1]:
        row(f"cp {op}", "linux", cps(dd, drop, few, suffix)
            + ([("cpz", drop, f"{peers['cpz']} {lin} {dd}{suffix}")] if "cpz" in peers and suffix else []),
            reps=2, sampler=sampler)
        row(f"unpack {op}", "linux", [
            ("barge unpack", drop, f"{B} unpack {W}/linux.barge {dd}{suffix}"),
            *([("barge-base unpack", drop, f"{base} unpack {W}/linux.barge {dd}{suffix}")] if base and not short else []),
            ("barge unpack --engine sync", drop, f"{B} unpack --engine sync {W}/linux.barge {dd}{suffix}"),
            *[(f"{c} unpack", drop, f"{KIT}/{c} unpack {W}/linux.barge {dd}{suffix}") for c in few[:1]],
            ("tar -xf", f"{drop} && mkdir {dd}", f"tar -xf {W}/linux.tar -C {dd}{suffix}"),
        ], reps=2, sampler=sampler)
    sh(f"rm -rf {dd}")
    facts["after"] = sample.facts(parent)
    with open(f"{OUT}/{tag}-facts.json", "w") as out:
        json.dump(facts, out, indent=1)


def loop_disk(B, base, lin, peers):
    """The disk rows, fewer cases, in a journaled ext4 (mkfs.ext4's defaults) in an image
    file on the machine's disk: the usual ext4, where the machine's own may differ."""
    img, mnt = f"{DISK}-j.img", f"{DISK}-j"
    sh(f"umount {mnt}; rm -f {img}")
    os.makedirs(mnt, exist_ok=True)
    made = sh(f"truncate -s {max(4, int(24 * SCALE))}G {img} && mkfs.ext4 -q -F {img} && mount -o loop {img} {mnt}")
    if made.returncode != 0:
        say(f"  no loop image: {made.stderr.strip()[-300:]}")
        return
    try:
        disk(B, base, lin, peers, dd=f"{mnt}/dest", tag="loop-ext4", short=True)
    finally:
        sh(f"umount {mnt} && rm -f {img}")


if __name__ == "__main__":
    sys.exit(main())
