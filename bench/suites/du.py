"""Du: `barge du PATH` (apparent bytes and counts) against `du -sb`, diskus, pdu, dua, dust and
gdu, each asked for the apparent size of the whole tree. Warm: the data set on tmpfs. Cold
(labels starting with `cold:`): a copy of the data set on ext4 in an image file on the disk,
mounted through a loop device, with `echo 3 > /proc/sys/vm/drop_caches` before every run
(outside the timed region). diskus, pdu, dua and dust are installed by this suite with
`cargo install --locked` into its own cache (BARGE_BENCH_PEERS, default
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

PEER_CACHE = os.environ.get("BARGE_BENCH_PEERS", os.path.expanduser("~/.cache/barge-bench/peers"))
CRATES = {"diskus": "diskus", "pdu": "parallel-disk-usage", "dua": "dua-cli", "dust": "du-dust"}
# The image must live on a real disk (tmpfs pages survive drop_caches).
DISK = os.environ.get("BARGE_BENCH_DISK", "/var/tmp/barge-bench")
IMAGE = os.path.join(DISK, "du-ext4.img")
MOUNT = os.path.join(DISK, "du-ext4")


def install_peers():
    """{binary name: path} of the crates.io peers, installed once into PEER_CACHE."""
    print(f"bench du: peers from crates.io are installed with cargo install --locked into {PEER_CACHE}")
    found = {}
    for binary, crate in CRATES.items():
        path = os.path.join(PEER_CACHE, "bin", binary)
        if not os.path.exists(path):
            r = subprocess.run(["cargo", "install", "--locked", "--root", PEER_CACHE, crate])
            if r.returncode != 0:
                print(f"bench du: **cargo install {crate} FAILED: {binary} is left out of this run**")
                continue
        found[binary] = path
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


def mounted():
    return subprocess.run(["mountpoint", "-q", MOUNT]).returncode == 0


def cold_copies(sets):
    """{set name: copy on the loop-mounted ext4 image}, made once; None when not possible."""
    if os.geteuid() != 0:
        print("bench du: **not root: cannot mount the ext4 image or drop caches; no cold runs**")
        return None
    os.makedirs(MOUNT, exist_ok=True)
    stamp = os.path.join(MOUNT, "sets.txt")
    want = "\n".join(f"{ds.name} {ds.digest}" for ds in sets) + "\n"
    if os.path.exists(IMAGE) and not mounted():
        subprocess.run(["mount", "-o", "loop", IMAGE, MOUNT], check=True)
    if not (os.path.exists(stamp) and open(stamp).read() == want):
        if mounted():
            subprocess.run(["umount", MOUNT], check=True)
        size = sum(ds.bytes + 8192 * (ds.files + ds.dirs) for ds in sets) * 3 // 2 + (1 << 30)
        print(f"bench du: making the ext4 image {IMAGE} ({size >> 20} MiB)", flush=True)
        lib.remove(IMAGE)
        subprocess.run(["truncate", "-s", str(size), IMAGE], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", IMAGE], check=True)
        subprocess.run(["mount", "-o", "loop", IMAGE, MOUNT], check=True)
        for ds in sets:
            subprocess.run(["cp", "-a", ds.root, os.path.join(MOUNT, ds.name)], check=True)
        with open(stamp, "w") as f:
            f.write(want)
        subprocess.run(["sync"], check=True)
    return {ds.name: os.path.join(MOUNT, ds.name) for ds in sets}


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


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
                c = cases(ctx, peers, cold[ds.name], "cold: ", drop_caches)
                results[ds.name]["cases"] += lib.measure(c, ctx.pairs, entries, trace=ctx.trace)
    finally:
        if cold and mounted():
            subprocess.run(["umount", MOUNT], check=False)
    return results
