"""Pack: `barge pack DIR -o FILE` against `tar -cf`, `find . | cpio -o -H newc` (the walk is part
of cpio's pipeline, as a user would run it) and `bsdtar -cf`, each writing its archive of the
tree to the same file on tmpfs (removed before every run, outside the timed region). Each barge
archive must be byte-identical to the first one, which is unpacked once and compared with the
source digest.

The "floor" row is bench/floor/pack.c: it walks the tree (`getdents64`, `openat` relative to
the parent), reads every file (no `stat`: a short read ends a file) into a ring of 256 KiB
buffers which a second thread writes to the output, one `write` each: the byte volume of the
barge archive, not a valid archive. No sorting, no checks; its output's size is checked once.
The barge row's "time / floor" is what barge costs over that bare work (see "The floor").

Ratios are peer time / barge time of the same round: 2.0x means barge took half the time.
"""

import os

import lib

# Issue 3 targets: (set, case label, minimum median ratio vs barge).
TARGETS = [("linux", "tar -cf", 2.0)]
# Issue 13 targets: (set, maximum median barge time / floor time).
FLOOR_TARGETS = [("linux", 1.2), ("tiny-many", 1.2)]

LABELS = {
    "barge": "barge pack",
    "tar": "tar -cf",
    "cpio": "find | cpio -o",
    "bsdtar": "bsdtar -cf",
}


def stream_bytes(ds):
    """Bytes the pack floor writes for `ds`: its barge archive's size without PERM messages."""
    n = 8 + 9
    for parent, dirs, files in os.walk(ds.root):
        n += sum(len(os.fsencode(d)) + 3 for d in dirs)
        n += sum(len(os.fsencode(f)) + 6 + os.path.getsize(os.path.join(parent, f)) for f in files)
    return n


def run(ctx):
    outdir = os.path.join(lib.WORK, "out")
    dest = os.path.join(lib.WORK, "dest")
    out = {}
    for ds in ctx.sets:
        lib.fresh_dir(outdir)
        # One output path for every case: only one archive of the set exists at a time.
        path = os.path.join(outdir, "pack.out")
        first = []

        def setup():
            lib.remove(path)

        def check_barge(ds=ds):
            digest = lib.file_digest(path)
            if not first:
                lib.fresh_dir(dest)
                lib.run(lib.cmd(ctx.barge, "unpack", path, dest))
                lib.verify_tree(dest, ds)
                lib.remove(dest)
                first.append(digest)
            elif digest != first[0]:
                raise RuntimeError(f"barge pack of {ds.name} is not deterministic")

        cases = [
            lib.Case(
                LABELS[f],
                lib.pack_cmd(ds, f, ctx.barge, path),
                setup,
                check_barge if f == "barge" else None,
            )
            for f in lib.FORMATS
        ]
        if "pack" in ctx.floor:
            want, checked = stream_bytes(ds), []

            def check_floor(want=want, checked=checked):
                if not checked and os.path.getsize(path) != want:
                    raise RuntimeError(f"floor-pack wrote {os.path.getsize(path)} bytes, not {want}")
                checked.append(True)

            cases.insert(1, lib.Case(lib.FLOOR, lib.cmd(ctx.floor["pack"], ds.root, path), setup, check_floor))
        out[ds.name] = {"cases": lib.measure(cases, lib.pairs_for(ds, ctx.pairs), ds.files, trace=ctx.trace)}
        lib.remove(outdir)
    return out
