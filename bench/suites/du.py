"""Du: `barge du PATH` (apparent bytes and counts) against `du -sb`, diskus, pdu, dua, dust and
gdu, each asked for the apparent size of the whole tree. Warm: the data set on tmpfs. Cold
(labels starting with `cold:`): a copy of the data set on ext4 in an image file on the disk,
mounted through a loop device, with `echo 3 > /proc/sys/vm/drop_caches` before every run
(outside the timed region). diskus, pdu, dua and dust are installed by this suite with
`cargo install --locked` into its own cache (lib.PEER_CACHE: BARGE_BENCH_PEERS, default
~/.cache/barge-bench/peers); a peer whose install fails is left out with a note. barge's output
is checked against `du -sb` after every run.

Ratios are peer time / barge time of the same round (cold cases against barge cold): 2.0x
means barge took half the time. Here the per-file columns count every entry (files and
directories), since du has to stat both.
"""

import os
import shutil
import subprocess

import lib

# Issue 5 targets on the linux tree: 2x du -sb warm, 3x cold, faster than every peer in both.
PEERS = ["du -sb", "diskus -b", "pdu", "dua", "dust", "gdu"]
TARGETS = (
    [("linux", "du -sb", 2.0), ("linux", "cold: du -sb", 3.0)]
    + [("linux", p, 1.0) for p in PEERS[1:]]
    + [("linux", "cold: " + p, 1.0) for p in PEERS[1:]]
)

CRATES = {"diskus": "diskus", "pdu": "parallel-disk-usage", "dua": "dua-cli", "dust": "du-dust"}
IMAGE = os.path.join(lib.DISK, "du-ext4.img")
MOUNT = os.path.join(lib.DISK, "du-ext4")


def install_peers():
    """{binary name: path} of the peers: crates.io ones and gdu from Debian."""
    found = lib.install_crates("du", CRATES)
    if shutil.which("gdu") is None:
        subprocess.run(["apt-get", "update", "-qq"], check=False)
        subprocess.run(["apt-get", "install", "-y", "-qq", "gdu"], check=False)
    if shutil.which("gdu"):
        found["gdu"] = shutil.which("gdu")
    else:
        print("bench du: **gdu could not be installed from Debian: left out of this run**")
    return found


def peer_cmds(peers, path):
    """(label, Cmd) of every available peer measuring the apparent size of `path`."""
    argv = {
        "du -sb": ["du", "-sb", path],
        "diskus -b": [peers.get("diskus"), "-b", path],
        "pdu": [peers.get("pdu"), "--quantity=apparent-size", "--max-depth=1", path],
        "dua": [peers.get("dua"), "--apparent-size", "aggregate", path],
        "dust": [peers.get("dust"), "--apparent-size", "--depth=0", "--no-colors", path],
        "gdu": [peers.get("gdu"), "-n", "-s", "-a", "-p", path],
    }
    return [(label, lib.cmd(*a)) for label, a in argv.items() if a[0]]


def cold_copies(sets):
    """{set name: copy on the loop-mounted ext4 image}, made once; None when not possible."""
    stamp = "\n".join(f"{ds.name} {ds.digest}" for ds in sets) + "\n"
    size = sum(ds.bytes + 8192 * (ds.files + ds.dirs) for ds in sets) * 3 // 2 + (1 << 30)

    def fill(mount):
        for ds in sets:
            subprocess.run(["cp", "-a", ds.root, os.path.join(mount, ds.name)], check=True)

    if not lib.ext4_image(IMAGE, MOUNT, stamp, size, fill):
        return None
    return {ds.name: os.path.join(MOUNT, ds.name) for ds in sets}


def cases(ctx, peers, path, prefix, setup):
    """barge first (checked against du -sb), then the peers."""
    want = subprocess.run(["du", "-sb", path], capture_output=True, text=True, check=True)
    want = int(want.stdout.split()[0])
    out = os.path.join(lib.WORK, "tmp", "du.out")

    def check():
        with open(out) as f:
            got = int(f.read().split()[0])
        if got != want:
            raise RuntimeError(f"barge du {path}: {got} bytes, du -sb says {want}")

    barge = lib.Case(prefix + "barge du", lib.cmd(ctx.barge, "du", path, stdout=out), setup, check)
    return [barge] + [lib.Case(prefix + label, c, setup) for label, c in peer_cmds(peers, path)]


def run(ctx):
    peers = install_peers()
    cold = cold_copies(ctx.sets)
    results = {}
    try:
        for ds in ctx.sets:
            entries = ds.files + ds.dirs
            warm = lib.measure(cases(ctx, peers, ds.root, "", None), ctx.pairs, entries, trace=ctx.trace)
            results[ds.name] = {"cases": warm}
            if cold:
                c = cases(ctx, peers, cold[ds.name], "cold: ", lib.drop_caches)
                results[ds.name]["cases"] += lib.measure(c, ctx.pairs, entries, trace=ctx.trace)
    finally:
        lib.unmount(MOUNT)
    return results
