"""Unpack: `barge unpack` (every engine the binary offers) against GNU tar, cpio and bsdtar
extracting the same tree from their own archive into an empty tmpfs directory. Every barge
output is compared with the source digest, and each peer's warm-up output too. The two
"piped" rows read the archive from `cat ARCHIVE |` (a stream, not a mapped file): compare
them with each other.

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

# Issue 3 targets: (set, case label, minimum median ratio vs barge).
TARGETS = [
    ("linux", "tar -xf", 2.5),
    ("linux", "cpio -idm", 3.0),
    ("tiny-many", "tar -xf", 2.5),
    ("small", "tar -xf", 2.0),
]
# Issue 13 targets: (set, maximum median barge time / floor time).
FLOOR_TARGETS = [("linux", 1.15), ("tiny-many", 1.15)]


def once(fn):
    """`fn` on the first call only (peers' outputs are checked on their warm-up run)."""
    done = []

    def wrapper():
        if not done:
            done.append(fn())

    return wrapper


def run(ctx):
    dest = os.path.join(lib.WORK, "dest")
    out = {}
    for ds in ctx.sets:
        a = {f: lib.archive(ds, f, ctx.barge) for f in lib.FORMATS}

        def setup():
            lib.fresh_dir(dest)

        def check(ds=ds):
            lib.verify_tree(dest, ds)

        barge = [
            lib.Case("barge", lib.cmd(ctx.barge, "unpack", a["barge"], dest), setup, check)
        ] + [
            lib.Case(
                f"barge --engine {e}",
                lib.cmd(ctx.barge, "unpack", "--engine", e, a["barge"], dest),
                setup,
                check,
            )
            for e in ctx.engines
        ]
        if "unpack" in ctx.floor:
            plan = subprocess.run(
                [ctx.floor["unpack"], "--plan", a["barge"]], capture_output=True, check=True
            ).stdout.decode(errors="surrogateescape")
            offset, path = plan.rstrip("\n").split(" ", 1)
            floor = lib.cmd(ctx.floor["unpack"], a["barge"], dest, offset, path)
            barge.append(lib.Case(lib.FLOOR, floor, setup, once(check)))
        peers = [
            ("tar -xf", lib.cmd("tar", "-xf", a["tar"], "-C", dest)),
            (
                "tar -x --no-same-owner -m --no-same-permissions",
                lib.cmd(
                    "tar", "-x", "--no-same-owner", "-m", "--no-same-permissions",
                    "-f", a["tar"], "-C", dest,
                ),
            ),
            ("cpio -idm", lib.cmd("cpio", "-idm", "--quiet", stdin=a["cpio"], cwd=dest)),
            ("bsdtar -xf", lib.cmd("bsdtar", "-xf", a["bsdtar"], "-C", dest)),
        ]
        piped = [
            lib.Case(
                "barge, piped",
                lib.pipeline(["cat", a["barge"]], [ctx.barge, "unpack", "-", dest]),
                setup,
                check,
            ),
            lib.Case(
                "tar -xf -, piped",
                lib.pipeline(["cat", a["tar"]], ["tar", "-xf", "-", "-C", dest]),
                setup,
                once(check),
            ),
        ]
        cases = barge + [lib.Case(label, c, setup, once(check)) for label, c in peers] + piped
        out[ds.name] = {
            "archive_bytes": {f: os.path.getsize(p) for f, p in a.items()},
            "cases": lib.measure(cases, lib.pairs_for(ds, ctx.pairs), ds.files, trace=ctx.trace),
        }
        lib.drop_archives(ds)
    lib.remove(dest)
    return out
