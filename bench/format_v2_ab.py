#!/usr/bin/env python3
"""Interleaved A/B of a version 1 archive and its version 2 rewrite (examples/to_v2): unpack
on the sync engine and list, medians of per-pair ratios. Until bench/run knows version 2:
    barge pack SET -o /dev/shm/lx1.barge; cargo run --release --example to_v2 /dev/shm/lx1.barge /dev/shm/lx2.barge
    python3 bench/format_v2_ab.py target/barge [PAIRS]
"""
import subprocess, time, shutil, os, statistics, sys
B = sys.argv[1]
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 5
def t(cmd):
    shutil.rmtree('/dev/shm/abdest', ignore_errors=True)
    s = time.perf_counter(); subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL); return time.perf_counter() - s
rows = {'unpack sync': ([B,'unpack','--engine','sync','/dev/shm/lx1.barge','/dev/shm/abdest'], [B,'unpack','--engine','sync','/dev/shm/lx2.barge','/dev/shm/abdest']),
        'list': ([B,'list','/dev/shm/lx1.barge'], [B,'list','/dev/shm/lx2.barge'])}
for name, (v1, v2) in rows.items():
    r1, r2, ratios = [], [], []
    t(v1); t(v2)
    for i in range(pairs):
        a, b = (t(v1), t(v2)) if i % 2 == 0 else tuple(reversed((t(v2), t(v1))))
        r1.append(a); r2.append(b); ratios.append(b / a)
    print(f"{name}: v1 median {statistics.median(r1)*1000:.0f} ms, v2 median {statistics.median(r2)*1000:.0f} ms, v2/v1 median of per-pair ratios {statistics.median(ratios):.3f} ({pairs} pairs)")
