"""Cp: `barge cp -a SRC DEST` (the reference) and `barge cp SRC DEST` against GNU `cp -a`,
`rsync -a SRC/ DEST` and the fast copiers from crates.io, each copying the data set on tmpfs
to a DEST on the same tmpfs that does not exist yet (removed before every run, outside the
timed region), as root. The crates.io peers are installed by this suite with `cargo install
--locked` at pinned versions (xcp 0.24.9, fcp 0.2.2, cpz 3.2.1 from the fuc project) into
lib.PEER_CACHE (BARGE_BENCH_PEERS, default ~/.cache/barge-bench/peers), each run with the
flags closest to `cp -a` it has:

- `xcp -r -o --no-progress`: recursive, owners (-o), no progress bar; it keeps modes, owners,
  symlinks and the mtimes of regular files (not of directories or symlinks), with its
  default 4 workers.
- `fcp` and `cpz` have no such flags: they keep modes and symlinks, no mtimes, owners or
  hard links.
- `rsync -a` keeps modes, mtimes (directories too), owners, symlinks and devices; not hard
  links, xattrs or ACLs (`-HAX`).
- `barge cp` keeps modes, mtimes to the ns (directories and the root too), symlinks and hard
  links; `barge cp -a` and `cp -a` add owners, xattrs (ACLs) and devices.

Every output is compared with the source by scripts/compare-trees (type, mode, owner, mtime
to the ns, size, content, symlink target, device, xattrs, hard-link groups), restricted to
what the tool keeps: barge's after every run, the peers' and the floor's after their warm-up
run. A row whose output differs in what its tool keeps is flagged "copied wrong" (and so are
its targets), not reported as fast.

The `update:` rows run on an unchanged copy (made once with `cp -a`): `barge cp -a --update
SRC PARENT` (the reference of the group), `rsync -a SRC PARENT` and GNU `cp -a --update SRC
PARENT`, each finding every entry unchanged (PARENT/NAME equals SRC; checked as above).

The `cold:` rows (linux only: barge, the floor, `cp -a` and `cpz`, the fastest peer; the
others would make the suite run past 40 minutes) copy within an ext4 file system in an image
file on the disk (lib.DISK), mounted through a loop device: a copy of the set is made there
once, and before every run the previous DEST is removed, then `sync` and `echo 3 >
/proc/sys/vm/drop_caches` (outside the timed region). A run ends when the copier exits; its
dirty pages are written back before the next run, untimed. Threads waiting for the disk count
in the load average, so the cold rows alone push it past 10 on this 2-core machine.

The `big-files` and `one-big` sets (opt-in: `bench/run cp --sets big-files,one-big`) are issue
32's proxies for copying below the directory: 8 files of 128 MiB in one directory, and one file
of 1 GiB. Their rows are `barge cp -j 2` (the reference), `barge cp -j 1` and `cp -a`; the
targets ask -j 1 to take 1.6x (big-files) and 1.5x (one-big) the time of -j 2.

The "floor" rows are bench/floor/cp.c: the same copy with only the syscalls every copier
keeping modes and mtimes must make, relative to directory fds (per file `openat` source +
`fstat` + `openat(O_CREAT|O_EXCL|O_NOFOLLOW)` + `copy_file_range` + `futimens` + `close` x2;
per directory `openat` + `fstat` + `mkdirat` + `openat` + `getdents64` + `futimens` + `close`
x2; symlinks `fstatat` + `readlinkat` + `symlinkat` + `utimensat`), with one thread per core
taking directories from a shared stack ("floor"; on the cold set 8 threads, to keep reads in
flight) or one thread ("floor -j1"). No owners, xattrs or hard links, no checks, no --update.
The barge rows' "time / floor" is what barge's safety and generality cost over the bare work.

Ratios are peer time / barge time of the same round: 2.0x means barge took half the time.
"""

import functools
import importlib.machinery
import importlib.util
import os
import subprocess

import lib

PEERS = ["cp -a", "rsync -a", "xcp -r -o", "fcp", "cpz"]
# Issue 15 targets: (set, case label, minimum median ratio vs the barge row of its group).
TARGETS = (
    [
        (s, label, want)
        for s in ("linux", "tiny-many")
        for label, want in zip(PEERS, (2.0, 4.0, 1.0, 1.0, 1.0))
    ]
    + [("linux", "cold: cp -a", 1.5)]
    + [(s, "update: rsync -a", 3.0) for s in ("linux", "tiny-many")]
)
# Issue 32's proxies: set, and how much longer -j 1 must take than -j 2 (the reference).
WIDE = {"big-files": 1.6, "one-big": 1.5}
TARGETS += [(s, "barge cp -j 1", want) for s, want in WIDE.items()]
CRATES = {"xcp": ("xcp", "0.24.9"), "fcp": ("fcp", "0.2.2"), "cpz": ("cpz", "3.2.1")}
IMAGE = os.path.join(lib.DISK, "cp-ext4.img")
MOUNT = os.path.join(lib.DISK, "cp-ext4")
# The cold rows: a cold run takes 6-15 s, so only the target's peer (cp -a) and the fastest
# crates.io peer join barge and the floor.
COLD = ("barge cp -a", "barge cp", lib.FLOOR, "cp -a", "cpz")
# Threads of the cold floor: enough to keep the disk busy while others wait for it.
COLD_FLOOR_THREADS = 8

# What compare-trees compares (and reports as differences) and what each tool keeps of it.
EVERYTHING = frozenset(
    ("type", "mode", "uid", "gid", "mtime", "size", "content", "target", "rdev", "xattrs", "hard links with")
)
CONTENTS = frozenset(("type", "mode", "size", "content", "target"))
KEEPS = {
    "barge cp -a": EVERYTHING,
    "barge cp": EVERYTHING - {"uid", "gid", "xattrs"},
    "cp -a": EVERYTHING,
    "rsync -a": EVERYTHING - {"xattrs", "hard links with"},
    # "file mtime": mtimes of regular files only.
    "xcp -r -o": CONTENTS | {"uid", "gid", "file mtime"},
    "fcp": CONTENTS,
    "cpz": CONTENTS,
    lib.FLOOR: CONTENTS | {"mtime"},
}
KEEPS["floor -j1"] = KEEPS[lib.FLOOR]


@functools.cache
def compare_trees():
    """scripts/compare-trees as a module (its scan and compare functions)."""
    path = os.path.join(lib.ROOT, "scripts", "compare-trees")
    loader = importlib.machinery.SourceFileLoader("compare_trees", path)
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader("compare_trees", loader))
    loader.exec_module(mod)
    return mod


class Opts:
    """compare-trees' options: compare everything."""

    xattrs = "all"
    ignore_root_times = False
    no_content = False


def differences(want, path, keeps):
    """[(path, what, source value, copy value)] where the tree at `path` differs from the
    records `want` in what `keeps` names (missing and extra entries always count)."""
    ct = compare_trees()
    out = []
    for diff in ct.compare(want, ct.scan(path, True), Opts):
        entry, what = diff[0], diff[1]
        kept = what in ("presence", *keeps) or (
            what == "mtime" and "file mtime" in keeps and want[entry]["type"] == "file"
        )
        if kept:
            out.append(diff)
    return out


def checker(want, path, keeps):
    """A check raising unless the tree at `path` keeps what `keeps` names of `want`."""

    def check():
        diffs = differences(want, path, keeps)
        if diffs:
            kinds = sorted({d[1] for d in diffs})
            p, what, a, b = diffs[0]
            raise RuntimeError(
                f"{len(diffs):,} differences from the source ({', '.join(kinds)}), "
                f"first {p}: {what} {a!r} vs {b!r}"
            )

    return check


def copy_cases(ctx, peers, src, dest, prefix, setup, want, floor_threads, only=None):
    """barge cp -a (the reference), barge cp, the floors and the peers (or those of them
    labelled as in `only`) copying `src` to the absent `dest`; labels start with `prefix`."""
    floor = ctx.floor["cp"]
    argv = {
        "barge cp -a": [ctx.barge, "cp", "-a", src, dest],
        "barge cp": [ctx.barge, "cp", src, dest],
        lib.FLOOR: [floor, "-j", str(floor_threads), src, dest],
        "floor -j1": [floor, src, dest],
        "cp -a": ["cp", "-a", src, dest],
        "rsync -a": ["rsync", "-a", src + "/", dest],
        "xcp -r -o": [peers.get("xcp"), "-r", "-o", "--no-progress", src, dest],
        "fcp": [peers.get("fcp"), src, dest],
        "cpz": [peers.get("cpz"), src, dest],
    }
    cases = []
    for label, a in argv.items():
        if not a[0] or (only and label not in only):
            continue
        check = checker(want, dest, KEEPS[label])
        if not label.startswith("barge"):
            check = lib.once(check)
        cases.append(lib.Case(prefix + label, lib.cmd(*a), setup, check, flag=True))
    return cases


def update_cases(ctx, src, parent, want):
    """`--update` of the unchanged copy `parent`/basename(src) by barge, rsync and cp."""
    copy = os.path.join(parent, os.path.basename(src))
    argv = {
        "barge cp -a --update": [ctx.barge, "cp", "-a", "--update", src, parent],
        "rsync -a": ["rsync", "-a", src, parent],
        "cp -a --update": ["cp", "-a", "--update", src, parent],
    }
    cases = []
    for label, a in argv.items():
        check = checker(want, copy, EVERYTHING if label != "rsync -a" else KEEPS["rsync -a"])
        if not label.startswith("barge"):
            check = lib.once(check)
        cases.append(lib.Case("update: " + label, lib.cmd(*a), None, check, flag=True))
    return cases


def cold_source(ds, want):
    """The copy of `ds` on the loop-mounted ext4 image (made once), or None when not root."""
    size = 3 * ds.bytes + 16384 * (ds.files + ds.dirs) + (1 << 30)

    def fill(mount):
        src = os.path.join(mount, "src", ds.name)
        os.makedirs(os.path.dirname(src))
        subprocess.run(["cp", "-a", ds.root, src], check=True)
        if differences(want, src, EVERYTHING):
            raise RuntimeError(f"cp -a of {ds.root} to {src} differs from it")

    if not lib.ext4_image(IMAGE, MOUNT, f"{ds.name} {ds.meta_digest}\n", size, fill):
        return None
    return os.path.join(MOUNT, "src", ds.name)


def wide_cases(ctx, src, dest, want):
    """barge cp -j 2 (the reference), -j 1 and cp -a copying `src` to the absent `dest`."""
    argv = {
        "barge cp -j 2": [ctx.barge, "cp", "-j", "2", src, dest],
        "barge cp -j 1": [ctx.barge, "cp", "-j", "1", src, dest],
        "cp -a": ["cp", "-a", src, dest],
    }
    cases = []
    for label, a in argv.items():
        check = checker(want, dest, KEEPS["barge cp" if label.startswith("barge") else label])
        if not label.startswith("barge"):
            check = lib.once(check)
        cases.append(lib.Case(label, lib.cmd(*a), lambda: lib.remove(dest), check, flag=True))
    return cases


# Cases run once more under strace, perf trace and perf record (syscalls per file).
TRACED = {"barge cp -a", "barge cp", lib.FLOOR, "cp -a", "update: barge cp -a --update", "update: rsync -a"}


def run(ctx):
    peers = lib.install_crates("cp", CRATES)
    dest = os.path.join(lib.WORK, "cp-dest")
    parent = os.path.join(lib.WORK, "cp-update")
    threads = str(os.cpu_count())
    out = {}
    try:
        for ds in ctx.sets:
            want = compare_trees().scan(ds.root, True)
            if ds.name in WIDE:
                # Few files, but each run takes most of a second: no extra rounds.
                res = lib.measure(wide_cases(ctx, ds.root, dest, want), ctx.pairs, ds.files, trace=False)
                lib.remove(dest)
                out[ds.name] = {"cases": res}
                continue
            pairs = lib.pairs_for(ds, ctx.pairs)
            trace = TRACED if ctx.trace else ()

            def remove(dest=dest):
                lib.remove(dest)

            cases = copy_cases(ctx, peers, ds.root, dest, "", remove, want, threads)
            res = lib.measure(cases, pairs, ds.files, trace=trace)
            lib.remove(dest)
            lib.fresh_dir(parent)
            subprocess.run(["cp", "-a", ds.root, parent], check=True)
            res += lib.measure(update_cases(ctx, ds.root, parent, want), pairs, ds.files, trace=trace)
            lib.remove(parent)
            src = cold_source(ds, want) if ds.name == "linux" else None
            if src:
                cold_dest = os.path.join(MOUNT, "dest")

                def cold_setup(cold_dest=cold_dest):
                    lib.remove(cold_dest)
                    lib.drop_caches()

                cold = copy_cases(
                    ctx, peers, src, cold_dest, "cold: ", cold_setup, want, COLD_FLOOR_THREADS, COLD
                )
                res += lib.measure(cold, pairs, ds.files, trace=False)
                lib.remove(cold_dest)
            out[ds.name] = {"cases": res}
    finally:
        lib.remove(dest)
        lib.remove(parent)
        lib.unmount(MOUNT)
    return out
