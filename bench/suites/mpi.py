"""MPI: `mpiexec -n 2 barge-mpi cp -a --mpi SRC DEST` (the reference; barge-mpi is
`scripts/build --mpi`'s target/barge-mpi) against mpifileutils' `mpiexec -n 2 dcp -p -X all
SRC DEST`
(v0.12 with libcircle v0.3, lwgrp v1.0.6 and dtcmp v1.1.5, built from source by
bench/mpifileutils/build into BARGE_BENCH_MPIFILEUTILS, default
~/.cache/barge-bench/mpifileutils), on the same tmpfs, DEST absent (removed before every run,
outside the timed region), as root, MPICH from Debian. Issue 34's peer: the same ranks, the
same data; on this 2-core VM `-n 2` is one rank per core.

- `dcp -p -X all` keeps modes, owners, times and xattrs; a second name of a file becomes a copy of
  its own (hard links lost). Every output is compared with the source by
  scripts/compare-trees in what its tool keeps, and what each copy of a small tree of hard
  links, xattrs and nanosecond times loses is listed in the set's facts ("fidelity of").
- `barge cp -a --mpi` keeps everything `cp -a` keeps (modes, owners, times to the ns, xattrs,
  hard links across ranks).
- `barge cp -a --mpi -n 1` and `barge-mpi cp -a` (the same binary without MPI: no
  mpiexec, no MPI_Init, one process walking everything) show what MPI and a rank add
  (linux and big-files only).

Every output is checked once, after its warm-up run (a check of 100,000 files takes 10 s
on this VM, which would push a set's run past 5 minutes).

The `pack:` rows (tiny-many and linux): `mpiexec -n 2 dtar -c -f FILE DIR` against
`mpiexec -n 2 barge-mpi pack --mpi DIR -o FILE` when that barge-mpi has `pack --mpi` (else
`barge-mpi pack DIR -o FILE`, one process, in a group of its own, "pack, one process:"),
the archive removed before every run.

The `big-files` set (8 x 128 MiB, opt-in: `bench/run mpi --sets big-files,tiny-many,linux`)
is issue 34's "big files" row.

Ratios are peer time / barge time of the same round: 2.0x means barge took half the time.
"""

import os
import shutil
import subprocess

import lib
from report import group
from suites import cp as cpsuite

PREFIX = os.environ.get(
    "BARGE_BENCH_MPIFILEUTILS", os.path.expanduser("~/.cache/barge-bench/mpifileutils")
)
RANKS = "2"
REF = "barge cp -a --mpi -n 2"
DCP = "dcp -p -X all -n 2"
TARGETS = [("tiny-many", DCP, 2.0), ("linux", DCP, 1.5), ("big-files", DCP, 1.0)] + [
    (s, "pack: dtar -c -n 2", 2.0) for s in ("tiny-many", "linux")
]
# What each copier keeps, for the check after a run (compare-trees' names).
KEEPS = {
    REF: cpsuite.EVERYTHING,
    "barge cp -a --mpi -n 1": cpsuite.EVERYTHING,
    "barge-mpi cp -a (no MPI)": cpsuite.EVERYTHING,
    DCP: cpsuite.EVERYTHING - {"hard links with"},
}


def build():
    """(barge-mpi, dcp, dtar): barge-mpi built by scripts/build --mpi (or the binary
    BARGE_BENCH_MPI names) frozen in WORK/bin (others may rebuild target/), mpifileutils
    built once into PREFIX."""
    built = os.environ.get("BARGE_BENCH_MPI")
    if not built:
        subprocess.run([os.path.join(lib.ROOT, "scripts", "build"), "--mpi"], check=True)
        built = os.path.join(lib.ROOT, "target", "barge-mpi")
    frozen = os.path.join(lib.WORK, "bin", "barge-mpi")
    shutil.copy2(built, frozen)
    subprocess.run([os.path.join(lib.ROOT, "bench", "mpifileutils", "build"), PREFIX], check=True)
    return frozen, os.path.join(PREFIX, "bin", "dcp"), os.path.join(PREFIX, "bin", "dtar")


def has_pack_mpi(barge_mpi):
    """Whether this barge-mpi has `pack --mpi` (built on another branch)."""
    text = subprocess.run([barge_mpi, "pack", "--help"], capture_output=True, text=True).stdout
    return "--mpi" in text


def mpi(*argv):
    return ["mpiexec", "-n", RANKS, *argv]


def fidelity(barge_mpi, dcp):
    """{tool: what its copy of a small tree of hard links, xattrs and ns times loses}."""
    src = os.path.join(lib.WORK, "mpi-fidelity")
    lib.fresh_dir(src)
    os.makedirs(os.path.join(src, "a", "b"))
    for i in range(20):
        path = os.path.join(src, "a", "b" if i % 2 else "", f"f{i}")
        with open(path, "w") as f:
            f.write(f"file {i}\n")
        os.setxattr(path, "user.barge", f"x{i}".encode())
    os.link(os.path.join(src, "a", "f0"), os.path.join(src, "a", "b", "link-to-f0"))
    os.link(os.path.join(src, "a", "f0"), os.path.join(src, "link-to-f0"))
    for d, dirs, files in os.walk(src, topdown=False):
        for name in files + dirs:
            os.utime(os.path.join(d, name), ns=(1, 1_000_000_000_123_456_789))
    want = cpsuite.compare_trees().scan(src, True)
    out = {}
    for label, argv in {
        DCP: mpi(dcp, "-p", "-X", "all", src, "DEST"),
        REF: mpi(barge_mpi, "cp", "-a", "--mpi", src, "DEST"),
    }.items():
        dest = os.path.join(lib.WORK, "mpi-fidelity-copy")
        lib.remove(dest)
        subprocess.run([a.replace("DEST", dest) for a in argv], check=True, capture_output=True)
        diffs = cpsuite.differences(want, dest, cpsuite.EVERYTHING)
        out[f"fidelity of {label}"] = "everything kept"
        if diffs:
            path, what, was, copy = diffs[0]
            out[f"fidelity of {label}"] = (
                f"{len(diffs)} differences ({', '.join(sorted({d[1] for d in diffs}))}), "
                f"first {path}: {what} {was} in the source, {copy} in the copy"
            )
        lib.remove(dest)
    lib.remove(src)
    return out


# Sets with the rows of what MPI and a rank add (the others: barge and dcp only, to keep a
# set's run within 5 minutes on this VM).
COST_SETS = ("linux", "big-files")


def copy_cases(ctx, barge_mpi, dcp, ds, dest, want):
    src = ds.root
    argv = {
        REF: mpi(barge_mpi, "cp", "-a", "--mpi", src, dest),
        DCP: mpi(dcp, "-p", "-X", "all", src, dest),
        "barge cp -a --mpi -n 1": ["mpiexec", "-n", "1", barge_mpi, "cp", "-a", "--mpi", src, dest],
        "barge-mpi cp -a (no MPI)": [barge_mpi, "cp", "-a", src, dest],
    }
    if ds.name not in COST_SETS:
        argv = {label: a for label, a in argv.items() if label in (REF, DCP)}
    cases = []
    for label, a in argv.items():
        # Checked once, on the warm-up run: a check of 100,000 files takes 10 s here.
        check = lib.once(cpsuite.checker(want, dest, KEEPS[label]))
        cases.append(lib.Case(label, lib.cmd(*a), lambda: lib.remove(dest), check, flag=True))
    return cases


def pack_cases(ctx, barge_mpi, dtar, ds, out):
    parent, name = os.path.dirname(ds.root), os.path.basename(ds.root)
    if has_pack_mpi(barge_mpi):
        argv = {"pack: barge pack --mpi -n 2": mpi(barge_mpi, "pack", "--mpi", name, "-o", out)}
    else:
        # Another group: issue 34's target is pack --mpi's, not one process's.
        argv = {"pack, one process: barge pack": [barge_mpi, "pack", name, "-o", out]}
    argv[group(next(iter(argv))) + "dtar -c -n 2"] = mpi(dtar, "-c", "-f", out, name)
    return [
        lib.Case(label, lib.cmd(*a, cwd=parent), lambda: lib.remove(out)) for label, a in argv.items()
    ]


def run(ctx):
    barge_mpi, dcp, dtar = build()
    dest = os.path.join(lib.WORK, "mpi-dest")
    out_file = os.path.join(lib.WORK, "mpi-pack.tar")
    facts = fidelity(barge_mpi, dcp)
    out = {}
    try:
        for ds in ctx.sets:
            want = cpsuite.compare_trees().scan(ds.root, True)
            res = lib.measure(copy_cases(ctx, barge_mpi, dcp, ds, dest, want), ctx.pairs, ds.files, trace=False)
            lib.remove(dest)
            if ds.name != "big-files":
                res += lib.measure(pack_cases(ctx, barge_mpi, dtar, ds, out_file), ctx.pairs, ds.files, trace=False)
                lib.remove(out_file)
            out[ds.name] = {"cases": res, "facts": facts}
    finally:
        lib.remove(dest)
        lib.remove(out_file)
    return out
