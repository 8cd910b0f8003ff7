#!/usr/bin/env python3
"""Interleaved A/B pairs of unpacks of the linux set: barge (default engine) of a version 1
archive, its version 2 rewrite and a zstd one, against tar of the same tree; and the cost of
the threads engine's digest check (a `--features bench` build with and without
BARGE_BENCH_NO_DIGESTS). Medians of the times and of the per-pair ratios; the first of a
pair alternates. Until bench/run knows version 2:
    barge pack SET -o D/lx1.barge; to_v2 D/lx1.barge D/lx2.barge; to_v2 D/lx1.barge D/lx2z.barge 3
    tar -C SET -cf D/lx.tar .; zstd -T0 -3 D/lx.tar -o D/lx.tar.zst
    python3 bench/unpack_v2_ab.py BARGE BARGE_BENCH D [PAIRS]
"""
import os, shutil, statistics, subprocess, sys, time

barge, bench, d = sys.argv[1:4]
pairs = int(sys.argv[4]) if len(sys.argv) > 4 else 7
dest = os.path.join(d, 'abdest')


def timed(cmd, env=None):
    shutil.rmtree(dest, ignore_errors=True)
    os.makedirs(dest)
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def unpack(binary, archive):
    # Into a new DEST, as a user would.
    return [binary, 'unpack', os.path.join(d, archive), os.path.join(dest, 'x')]


tar = ['tar', '-C', dest, '-xpf', os.path.join(d, 'lx.tar')]
tar_zst = ['tar', '-C', dest, '-I', 'zstd', '-xf', os.path.join(d, 'lx.tar.zst')]
off = dict(os.environ, BARGE_BENCH_NO_DIGESTS='1')
rows = [
    ('v1 unpack / tar -xpf', (unpack(barge, 'lx1.barge'), None), (tar, None)),
    ('v2 unpack / tar -xpf', (unpack(barge, 'lx2.barge'), None), (tar, None)),
    ('v2 zstd unpack / tar -I zstd -xf', (unpack(barge, 'lx2z.barge'), None), (tar_zst, None)),
    ('v2 unpack / v1 unpack', (unpack(barge, 'lx2.barge'), None), (unpack(barge, 'lx1.barge'), None)),
    ('v2 digests on / off', (unpack(bench, 'lx2.barge'), None), (unpack(bench, 'lx2.barge'), off)),
    ('v2 zstd digests on / off', (unpack(bench, 'lx2z.barge'), None), (unpack(bench, 'lx2z.barge'), off)),
]
for name, a, b in rows:
    timed(*a), timed(*b)
    ta, tb, ratios = [], [], []
    for i in range(pairs):
        if i % 2 == 0:
            x = timed(*a)
            y = timed(*b)
        else:
            y = timed(*b)
            x = timed(*a)
        ta.append(x), tb.append(y), ratios.append(x / y)
    print(f"{name}: {statistics.median(ta) * 1000:.0f} ms / {statistics.median(tb) * 1000:.0f} ms,"
          f" median of per-pair ratios {statistics.median(ratios):.3f} ({pairs} pairs)", flush=True)
shutil.rmtree(dest, ignore_errors=True)
