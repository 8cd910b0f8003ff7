"""Format version 2 (issue 30): compressed pack and unpack, list by the index, `cat` of one
file, and the index's size, each against what a tar user runs for the same job.

- pack: `barge pack --zstd DIR -o FILE` (zstd level 3 per segment, on every core) against
  `tar -I 'zstd -T0 -3' -cf` and `barge pack -o - | zstd -T0 -3`; the "floor" row is
  `zstd -T0 -3` of the plain version 2 archive alone (compression without the walk).
  Archive sizes are in the result's `archive_bytes`.
- unpack: `barge unpack` of that archive against `tar -I zstd -xpf` of tar's, both into an
  empty tmpfs directory (checked against the source, modes and mtimes included).
- list: `barge list --names` (what `tar -tf` prints) of the compressed and the plain archive
  (the index, not the body) against `tar -I zstd -tf` and `tar -tf`.
- cat: `barge cat ARCHIVE PATH` of one small file of the plain archive (its time, and in
  `cat_reads` the reads of the archive strace counts) against `tar -xOf ARCHIVE PATH`.
- `index_bytes_per_entry`: the index frame and footer over the entries (from the footer).
- sparse: a 200 MiB file holding 2 bytes packed and landed: `sparse` has the archive's size
  and the landed file's allocated bytes.

Ratios are peer time / barge time of the same round.
"""

import os
import struct
import subprocess

import lib

# Issue 30 targets: (set, case label, minimum median ratio vs barge).
TARGETS = [
    ("linux", "pack: tar -I 'zstd -T0 -3' -cf", 1.25),
    ("linux", "unpack: tar -I zstd -xpf", 1.8),
    ("linux", "list zstd: tar -I zstd -tf", 20.0),
    ("linux", "list: tar -tf", 3.0),
]
ZSTD_TAR = ["tar", "-I", "zstd -T0 -3"]
FOOTER = 37


def index_bytes_per_entry(path):
    """(index frame + footer) bytes / entries, read from the footer."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(size - FOOTER)
        footer = f.read(FOOTER)
    entries, _segments, index_at = struct.unpack_from("<QIQ", footer, 1)
    return (size - index_at) / max(entries, 1)


def small_file(root):
    """A path (relative to `root`) of a small regular file about halfway through the tree."""
    files = []
    for parent, _dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(parent, n)
            if os.path.isfile(p) and not os.path.islink(p) and 0 < os.path.getsize(p) < 8192:
                files.append(os.path.relpath(p, root))
    files.sort()
    return files[len(files) // 2]


def archive_reads(argv, archive):
    """Reads of `archive` by `argv` (read, pread64, readv, preadv on its fd; mmap counted as one)."""
    out = subprocess.run(
        ["strace", "-f", "-y", "-e", "trace=read,pread64,readv,preadv,mmap", *argv],
        capture_output=True, text=True,
    ).stderr
    name = os.path.basename(archive)
    return sum(1 for line in out.splitlines() if name in line and ("read" in line or "mmap" in line))


def sparse_row(barge, work):
    """The archive size and landed allocation of a 200 MiB file with 2 data bytes."""
    src, dest, out = (os.path.join(work, n) for n in ("sparse-src", "sparse-dest", "sparse.barge"))
    lib.fresh_dir(src)
    lib.remove(dest)
    with open(os.path.join(src, "big"), "wb") as f:
        f.truncate(200 << 20)
        f.seek(100 << 20)
        f.write(b"ab")
    lib.run(lib.cmd(barge, "pack", "--format", "2", src, "-o", out))
    lib.run(lib.cmd(barge, "unpack", out, dest))
    landed = os.stat(os.path.join(dest, "big"))
    with open(os.path.join(dest, "big"), "rb") as f:
        f.seek(100 << 20)
        assert f.read(2) == b"ab", "the sparse file's data did not land"
    row = {"archive_bytes": os.path.getsize(out), "landed_blocks_bytes": landed.st_blocks * 512}
    for p in (src, dest, out):
        lib.remove(p)
    return row


def run(ctx):
    work = os.path.join(lib.WORK, "v2")
    dest = os.path.join(work, "dest")
    out = {}
    for ds in ctx.sets:
        lib.fresh_dir(work)
        plain = os.path.join(work, "plain.barge")
        zst = os.path.join(work, "zstd.barge")
        tar = lib.archive(ds, "tar", ctx.barge)
        tar_zst = os.path.join(work, "linux.tar.zst")
        lib.run(lib.cmd(ctx.barge, "pack", "--format", "2", ds.root, "-o", plain))
        lib.run(lib.cmd(*ZSTD_TAR, "-cf", tar_zst, ".", cwd=ds.root))
        packed = os.path.join(work, "packed.out")

        def remove_packed():
            lib.remove(packed)

        def fresh():
            lib.fresh_dir(dest)

        def check_meta(ds=ds):
            lib.verify_tree(dest, ds, meta=True)

        pack = [
            lib.Case("pack: barge pack --zstd", lib.cmd(ctx.barge, "pack", "--zstd", ds.root, "-o", packed), remove_packed),
            lib.Case("pack: tar -I 'zstd -T0 -3' -cf", lib.cmd(*ZSTD_TAR, "-cf", packed, ".", cwd=ds.root), remove_packed),
            lib.Case(
                "pack: barge pack -o - | zstd -T0 -3",
                lib.pipeline([ctx.barge, "pack", "--format", "2", ds.root, "-o", "-"], ["zstd", "-T0", "-3", "-c"], stdout=packed),
                remove_packed,
            ),
            lib.Case("pack: " + lib.FLOOR, lib.cmd("zstd", "-T0", "-3", "-c", plain, stdout=packed), remove_packed),
        ]
        lib.run(pack[0].cmd)
        os.replace(packed, zst)
        sizes = {"barge --format 2": os.path.getsize(plain), "barge --zstd": os.path.getsize(zst),
                 "tar": os.path.getsize(tar), "tar zstd -3": os.path.getsize(tar_zst)}
        lib.run(lib.cmd("zstd", "-T0", "-3", "-c", plain, stdout=packed))
        sizes["zstd -3 of barge --format 2"] = os.path.getsize(packed)
        cases = lib.measure(pack, ctx.pairs, ds.files, trace=False)

        unpack = [
            lib.Case("unpack: barge unpack (zstd)", lib.cmd(ctx.barge, "unpack", zst, dest), fresh, check_meta),
            lib.Case("unpack: tar -I zstd -xpf", lib.cmd("tar", "-I", "zstd", "-xpf", tar_zst, "-C", dest), fresh, lib.once(check_meta)),
        ]
        cases += lib.measure(unpack, ctx.pairs, ds.files, trace=False)
        listing = [
            lib.Case("list zstd: barge list --names (zstd)", lib.cmd(ctx.barge, "list", "--names", zst)),
            lib.Case("list zstd: tar -I zstd -tf", lib.cmd("tar", "-I", "zstd", "-tf", tar_zst)),
        ]
        cases += lib.measure(listing, ctx.pairs, ds.files, trace=False)
        listing = [
            lib.Case("list: barge list --names", lib.cmd(ctx.barge, "list", "--names", plain)),
            lib.Case("list: tar -tf", lib.cmd("tar", "-tf", tar)),
        ]
        cases += lib.measure(listing, ctx.pairs, ds.files, trace=False)
        one = small_file(ds.root)
        cat = [
            lib.Case("cat: barge cat", lib.cmd(ctx.barge, "cat", plain, one)),
            lib.Case("cat: tar -xOf", lib.cmd("tar", "-xOf", tar, "./" + one)),
        ]
        cases += lib.measure(cat, ctx.pairs * 4, ds.files, trace=False)
        sparse = sparse_row(ctx.barge, work)
        facts = {f"archive bytes, {k}": f"{v:,}" for k, v in sizes.items()}
        facts["index bytes per entry"] = f"{index_bytes_per_entry(plain):.1f}"
        if ctx.trace:
            facts[f"reads of the archive by cat {one}"] = archive_reads([ctx.barge, "cat", plain, one], plain)
        facts["sparse 200 MiB file of 2 bytes: archive bytes"] = f"{sparse['archive_bytes']:,}"
        facts["its landed allocation, bytes"] = f"{sparse['landed_blocks_bytes']:,}"
        out[ds.name] = {"facts": facts, "cases": cases}
        lib.remove(work)
    return out
