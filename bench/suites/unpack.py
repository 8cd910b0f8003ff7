"""Unpack: `barge unpack` (every engine the binary offers) against GNU tar, cpio and bsdtar
extracting the same tree from their own archive into an empty tmpfs directory, as root. Both
sides restore the same metadata: barge's default (modes, mtimes to the nanosecond, symlinks,
hard links) against `tar -xpf` (what tar -xf does as root: modes, mtimes, owners). Every
barge output is compared with the source digest, modes and mtimes included, and each peer's
warm-up output too (tar -xpf's with modes and mtimes; the others' by paths, kinds, contents
and symlink targets). The two "piped" rows read the archive from `cat ARCHIVE |` (a stream, not
a mapped file): compare them with each other.

The `-a` rows land archives of everything root may record (`barge pack -a`, `tar --xattrs
--acls -cf`: owners, xattrs, ACLs, devices), with `barge unpack` (which restores what the
archive holds) and `tar --xattrs --acls -xpf`; the target is at most 1.3x the time of the
default's (the "barge -a" row's time / barge ratio). The "tar -x --no-same-owner -m
--no-same-permissions" row is tar restoring neither owners, modes nor times: what tar's
metadata costs it.

The "floor" row is bench/floor/unpack.c: it lands the same barge archive with only the syscalls
every lander must make (per directory `mkdirat` + `openat(O_PATH)`, per file
`openat(O_CREAT|O_EXCL|O_NOFOLLOW)` + `write` or, from 32 KiB, `copy_file_range` + `close`,
relative to directory fds), on two threads split at a point the harness computes outside the
timed region (`floor-unpack --plan`). It validates nothing and has no sandbox, no containment,
no limits and no error reporting; its output is checked once. The barge row's "time / floor"
is the cost of barge's safety and generality over the bare work (see "The floor").

Ratios are peer time / barge time of the same round: 3.0x means barge took a third of the time.
"""

import os
import subprocess

import lib

# Issue 3 and 14 targets: (set, case label, minimum median ratio vs barge).
TARGETS = [
    ("linux", "tar -xpf", 2.5),
    ("linux", "cpio -idm", 3.0),
    ("tiny-many", "tar -xpf", 2.5),
    ("small", "tar -xpf", 2.0),
]
# Issue 14 limits: (set, case label, field, maximum): -a within 1.3x of the default's time,
# at most 4 syscalls per file (create, write, times, close).
LIMITS = [
    ("linux", "barge -a", "ratio", 1.3),
    ("tiny-many", "barge -a", "ratio", 1.3),
    ("linux", "barge", "syscalls_per_file", 4.0),
    ("tiny-many", "barge", "syscalls_per_file", 4.0),
]
# Issue 13 targets: (set, maximum median barge time / floor time).
FLOOR_TARGETS = [("linux", 1.15), ("tiny-many", 1.15)]


def run(ctx):
    dest = os.path.join(lib.WORK, "dest")
    out = {}
    for ds in ctx.sets:
        formats = lib.FORMATS + (lib.ARCHIVE_FORMATS if ctx.archive else ("tar --xattrs",))
        a = {f: lib.archive(ds, f, ctx.barge) for f in formats}

        def setup():
            lib.fresh_dir(dest)

        def check(ds=ds):
            lib.verify_tree(dest, ds)

        def check_meta(ds=ds):
            lib.verify_tree(dest, ds, meta=True)

        def barge_case(label, archive, *flags):
            return lib.Case(label, lib.cmd(ctx.barge, "unpack", *flags, archive, dest), setup, check_meta)

        barge = [barge_case("barge", a["barge"])] + [
            barge_case(f"barge --engine {e}", a["barge"], "--engine", e) for e in ctx.engines
        ]
        if "unpack" in ctx.floor:
            plan = subprocess.run(
                [ctx.floor["unpack"], "--plan", a["barge"]], capture_output=True, check=True
            ).stdout.decode(errors="surrogateescape")
            offset, path = plan.rstrip("\n").split(" ", 1)
            floor = lib.cmd(ctx.floor["unpack"], a["barge"], dest, offset, path)
            # Contents only: the directories open at the floor's split keep their landing times.
            barge.append(lib.Case(lib.FLOOR, floor, setup, lib.once(check)))
        if ctx.archive:
            barge.append(barge_case("barge -a", a["barge -a"]))
        tar_x = ["tar", "--xattrs", "--acls", "-xpf"]
        peers = [
            ("tar -xpf", lib.cmd("tar", "-xpf", a["tar"], "-C", dest), check_meta),
            ("tar --xattrs --acls -xpf", lib.cmd(*tar_x, a["tar --xattrs"], "-C", dest), check_meta),
            (
                "tar -x --no-same-owner -m --no-same-permissions",
                lib.cmd(
                    "tar", "-x", "--no-same-owner", "-m", "--no-same-permissions",
                    "-f", a["tar"], "-C", dest,
                ),
                check,
            ),
            ("cpio -idm", lib.cmd("cpio", "-idm", "--quiet", stdin=a["cpio"], cwd=dest), check),
            ("bsdtar -xf", lib.cmd("bsdtar", "-xf", a["bsdtar"], "-C", dest), check),
        ]
        piped = [
            lib.Case(
                "barge, piped",
                lib.pipeline(["cat", a["barge"]], [ctx.barge, "unpack", "-", dest]),
                setup,
                check_meta,
            ),
            lib.Case(
                "tar -xpf -, piped",
                lib.pipeline(["cat", a["tar"]], ["tar", "-xpf", "-", "-C", dest]),
                setup,
                lib.once(check_meta),
            ),
        ]
        cases = barge + [lib.Case(label, c, setup, lib.once(ck)) for label, c, ck in peers] + piped
        out[ds.name] = {
            "archive_bytes": {f: os.path.getsize(p) for f, p in a.items()},
            "cases": lib.measure(cases, lib.pairs_for(ds, ctx.pairs), ds.files, trace=ctx.trace),
        }
        lib.drop_archives(ds)
    lib.remove(dest)
    return out
