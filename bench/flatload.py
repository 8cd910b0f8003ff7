#!/usr/bin/env python3
"""Unpack of flat-million under machine load (issue 17): interleaved rounds of barge's engines
and tar -xf under one load condition, with /usr/bin/time -v context switches.

    bench/flatload.py CONDITION [ROUNDS] [CASES]   conditions: quiet cpu2 mem pin1 rtburst
Writes one JSON line per run to bench/flatload.jsonl (not committed)."""

import json
import os
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lib  # noqa: E402

BARGE = os.environ.get("BARGE", os.path.join(lib.ROOT, "target", "barge"))
A = "/dev/shm/barge-bench/archives/flat-million"
DEST = "/dev/shm/barge-bench/dest-flat"
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flatload.jsonl")

CASES = {
    "auto": [BARGE, "unpack", A + ".barge", DEST],
    "sync": [BARGE, "unpack", "--engine", "sync", A + ".barge", DEST],
    "threads": [BARGE, "unpack", "--engine", "threads", A + ".barge", DEST],
    "uring": [BARGE, "unpack", "--engine", "uring", A + ".barge", DEST],
    "tar": ["tar", "-xf", A + ".tar", "-C", DEST],
}


def steal():
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def load_start(cond):
    procs = []
    if cond == "cpu2":
        procs = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(2)]
    elif cond == "mem":
        with open("/proc/meminfo") as f:
            avail = next(int(l.split()[1]) for l in f if l.startswith("MemAvailable")) * 1024
        hold = avail - int(5.5 * 2**30) - int(3.5 * 2**30)  # dest ~5.5 GiB, 3.5 GiB spare
        code = (
            f"import time\nb=bytearray({hold})\n"
            "while True:\n for i in range(0,len(b),4096): b[i]=(b[i]+1)&255\n"
        )
        procs = [subprocess.Popen(["python3", "-c", code])]
        time.sleep(8)
        print(f"mem: holding {hold / 2**30:.1f} GiB", flush=True)
    elif cond == "rtburst":
        # A SCHED_FIFO hog on CPU 1 running 20 ms of every 40: a vCPU the host takes away.
        code = (
            "import time\nwhile True:\n t=time.perf_counter()+0.02\n"
            " while time.perf_counter()<t: pass\n time.sleep(0.02)\n"
        )
        procs = [subprocess.Popen(["chrt", "-f", "10", "taskset", "-c", "1", "python3", "-c", code])]
    return procs


def one(label, argv, cond):
    lib.fresh_dir(DEST)
    time.sleep(0.5)
    tv = "/dev/shm/barge-bench/tmp/time-v"
    os.makedirs(os.path.dirname(tv), exist_ok=True)
    st0 = steal()
    t0 = time.perf_counter()
    p = subprocess.Popen(["/usr/bin/time", "-v", "-o", tv, *argv])
    if cond == "pin1":
        # After spawn, so barge still sees 2 CPUs and starts its helper: both threads then share
        # CPU 0 (threads made later inherit the affinity; -a covers those made before).
        time.sleep(0.05)
        subprocess.run(["taskset", "-a", "-p", "-c", "0", str(p.pid)], stdout=subprocess.DEVNULL)
        kids = subprocess.run(["pgrep", "-P", str(p.pid)], capture_output=True, text=True).stdout.split()
        for k in kids:
            subprocess.run(["taskset", "-a", "-p", "-c", "0", k], stdout=subprocess.DEVNULL)
    rc = p.wait()
    wall = time.perf_counter() - t0
    st = steal() - st0
    tvt = open(tv).read()

    def field(name):
        for line in tvt.splitlines():
            if line.strip().startswith(name):
                return line.split(":")[-1].strip()

    n = sum(1 for _ in os.scandir(DEST))
    rec = {
        "cond": cond, "case": label, "wall": round(wall, 3), "rc": rc, "files": n,
        "user": float(field("User time")), "sys": float(field("System time")),
        "vcsw": int(field("Voluntary context switches")),
        "ivcsw": int(field("Involuntary context switches")), "steal_ticks": st,
    }
    print(json.dumps(rec), flush=True)
    with open(OUT, "a") as f:
        f.write(json.dumps(rec) + "\n")
    if rc != 0 or n != 1_000_000:
        print("BAD RUN", file=sys.stderr)
    return rec


def main():
    cond = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cases = sys.argv[3].split(",") if len(sys.argv) > 3 else ["auto", "sync", "threads", "uring", "tar"]
    lib.lock()
    procs = load_start(cond)
    try:
        for r in range(rounds):
            order = cases if r % 2 == 0 else cases[::-1]
            for c in order:
                one(c, CASES[c], cond)
    finally:
        for p in procs:
            p.send_signal(signal.SIGKILL)
            p.wait()
        lib.remove(DEST)


if __name__ == "__main__":
    main()
