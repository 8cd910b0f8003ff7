"""Pack: `barge pack DIR -o FILE` against `tar -cf`, `find . | cpio -o -H newc` (the walk is part
of cpio's pipeline, as a user would run it) and `bsdtar -cf`, each writing its archive of the
tree to the same file on tmpfs (removed before every run, outside the timed region). Each barge
archive must be byte-identical to the first one, which is unpacked once and compared with the
source digest.

Ratios are peer time / barge time of the same round: 2.0x means barge took half the time.
"""

import os

import lib

# Issue 3 targets: (set, case label, minimum median ratio vs barge).
TARGETS = [("linux", "tar -cf", 2.0)]

LABELS = {
    "barge": "barge pack",
    "tar": "tar -cf",
    "cpio": "find | cpio -o",
    "bsdtar": "bsdtar -cf",
}


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
        out[ds.name] = {"cases": lib.measure(cases, lib.pairs_for(ds, ctx.pairs), ds.files, trace=ctx.trace)}
        lib.remove(outdir)
    return out
