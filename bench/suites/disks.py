"""Disks (opt-in: `bench/run disks --sets disks`, the linux set): `barge cp` against GNU
`cp -a`, and `barge unpack` against `tar -xpf`, writing into an ext4 and an xfs file system
in image files on the disk (lib.DISK), each mounted through a loop device (issue 32, item 4).
barge cp runs at -j 1, -j 2 and its default thread count, barge unpack with its default
engine (one lander per core) and with `--engine sync` (one thread); each row once ending when
the tool exits and once with `sync` timed after it (the dirty pages written out). Before every run the
previous copy is removed, then `sync` and `echo 3 > /proc/sys/vm/drop_caches`, untimed; the
source tree and the archives are on tmpfs. The reference of each group is barge at its
default thread count; ratios are the peer's time / barge's of the same round.

Outputs are checked by their digest and modes and mtimes (lib.verify_tree) on the first run
of each case.
"""

import os
import subprocess

import lib

FILESYSTEMS = {"ext4": ["mkfs.ext4", "-q", "-F"], "xfs": ["mkfs.xfs", "-q", "-f"]}
# (label, barge's thread flags): the default first, the reference of its group.
CP_THREADS = [("", []), (" -j 1", ["-j", "1"]), (" -j 2", ["-j", "2"])]
UNPACK_THREADS = [("", []), (" --engine sync", ["--engine", "sync"])]


def image(fs, size):
    """The mount point of a fresh `fs` file system in an image of `size` bytes under
    lib.DISK (made anew: an aged one would differ run to run)."""
    img = os.path.join(lib.DISK, f"disks-{fs}.img")
    mount = os.path.join(lib.DISK, f"disks-{fs}")
    lib.unmount(mount)
    lib.remove(img)
    os.makedirs(mount, exist_ok=True)
    subprocess.run(["truncate", "-s", str(size), img], check=True)
    subprocess.run([*FILESYSTEMS[fs], img], check=True)
    subprocess.run(["mount", "-o", "loop", img, mount], check=True)
    return mount


def synced(argv):
    """`argv`, then `sync`, as one timed command."""
    return lib.cmd("sh", "-c", '"$@" && sync', "sh", *argv)


def groups(ctx, ds, fs, dest, archives):
    """The cases, in groups led by their reference: cp, then unpack, each without and with
    `sync`."""

    def setup():
        lib.remove(dest)
        lib.drop_caches()

    def check():
        lib.verify_tree(dest, ds, meta=True)

    tar = f'mkdir "$1" && tar -xpf {archives["tar"]} -C "$1"'
    for tail, sync in (("", False), (", sync", True)):
        cp = [(f"{fs}: barge cp{t}{tail}", [ctx.barge, "cp", *j, ds.root, dest]) for t, j in CP_THREADS]
        cp.append((f"{fs}: cp -a{tail}", ["cp", "-a", ds.root, dest]))
        unpack = [
            (f"{fs}: barge unpack{t}{tail}", [ctx.barge, "unpack", *j, archives["barge"], dest])
            for t, j in UNPACK_THREADS
        ]
        unpack.append((f"{fs}: tar -xpf{tail}", ["sh", "-c", tar, "sh", dest]))
        for group in (cp, unpack):
            yield [
                lib.Case(label, synced(argv) if sync else lib.cmd(*argv), setup, lib.once(check), flag=True)
                for label, argv in group
            ]


def run(ctx):
    out = {}
    for ds in ctx.sets:
        if ds.name != "disks":
            continue
        if os.geteuid() != 0:
            print("bench: **not root: no loop images; the disks set is left out**")
            continue
        archives = {f: lib.archive(ds, f, ctx.barge) for f in ("barge", "tar")}
        res = []
        size = 3 * ds.bytes + 16384 * (ds.files + ds.dirs) + (1 << 30)
        for fs in FILESYSTEMS:
            mount = image(fs, size)
            try:
                dest = os.path.join(mount, "dest")
                for group in groups(ctx, ds, fs, dest, archives):
                    # Every run takes seconds: at most 3 rounds.
                    res += lib.measure(group, min(ctx.pairs, 3), ds.files, trace=False)
            finally:
                lib.unmount(mount)
                lib.remove(os.path.join(lib.DISK, f"disks-{fs}.img"))
        out[ds.name] = {"cases": res}
        lib.drop_archives(ds)
    return out
