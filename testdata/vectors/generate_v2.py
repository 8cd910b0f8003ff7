#!/usr/bin/env python3
"""Generate the barge format v2 test vectors (testdata/vectors/v2/).

Every byte is written from docs/FORMAT.md ("Version 2") with the standard library and
python3-xxhash (the digest, XXH3-64); zstd frames are written by hand from RFC 8878 (raw and
RLE blocks), so no barge implementation and no compressor is involved.

    python3 testdata/vectors/generate_v2.py          # (re)write v2/valid and v2/invalid
    python3 testdata/vectors/generate_v2.py --check  # exit 1 if the committed files differ
"""

import os
import struct
import sys

try:
    import xxhash
except ImportError:
    sys.exit("generate_v2.py needs the xxhash module: apt-get install python3-xxhash (or pip install xxhash)")

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from generate import (  # noqa: E402  (v1's message writers and entry ops)
    D, F, H, P, S, X, POP, DEFAULT_DIR_MODE, DEFAULT_FILE_MODE, DEFAULT_SPECIAL_MODE, LINKED,
    SPECIAL_TYPES, dir_msg, dump_json, hardlink_msg, perm_msg, special_msg, symlink_msg, time_msg,
    write_or_check, xattr_msg,
)

OUT = os.path.join(HERE, "v2")
NONE = 2**64 - 1
MAX_BODY = 1 << 26


def digest(data):
    return xxhash.xxh3_64_intdigest(data)


def varint(n):
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def owner_v2(uid, gid, user=b"", group=b""):
    return b"\x07" + struct.pack("<II", uid, gid) + bytes([len(user)]) + user + bytes([len(group)]) + group


def start_msg(first, open_, path):
    return b"\x10" + struct.pack("<QQH", first, open_, len(path)) + b"".join(n + b"\x00" for n in path)


def frame_head(tag, codec, stored, body, dig):
    return bytes([tag, codec]) + struct.pack("<IIQ", stored, body, dig)


def runs(body):
    """`body` as zstd blocks: runs of 16 or more equal bytes as RLE blocks, the rest raw."""
    blocks, i, raw = [], 0, 0
    while i < len(body):
        j = i
        while j < len(body) and body[j] == body[i] and j - i < 65536:
            j += 1
        if j - i >= 16:
            if raw < i:
                blocks.append((0, i - raw, body[raw:i]))
            blocks.append((1, j - i, body[i:i + 1]))
            raw = i = j
        else:
            i += 1
    if raw < len(body) or not blocks:
        blocks.append((0, len(body) - raw, body[raw:]))
    return blocks


def zstd_frame(body, window_exp=7, blocks=None):
    """One zstd frame (RFC 8878) holding `body` in raw and RLE blocks, or of the given
    (type, size, payload) blocks; no content size, no checksum. The window is
    2^(10 + window_exp) bytes; blocks are at most 128 KiB."""
    out = bytearray(struct.pack("<I", 0xFD2FB528)) + bytes([0x00, window_exp << 3])
    if blocks is None:
        blocks = runs(body)
    for i, (kind, size, payload) in enumerate(blocks):
        last = 1 if i == len(blocks) - 1 else 0
        out += struct.pack("<I", last | kind << 1 | size << 3)[:3] + payload
    return bytes(out)


# ------------------------------------------------------------------- ops --
# v1's D, F, S, H, X, P, plus:
#   XF(name, size, count, **records)   EXTFILE of `size` bytes with `count` extents
#   EXT(at, data)                      the next EXTENT of the open EXTFILE
#   CUT                                end the current segment here
# Records: perm, mtime=(sec, nsec), owner=(uid, gid[, user, group]), xattrs, linked.


def XF(name, size, count, perm=None, **records):
    return dict(kind="extfile", name=name, perm=perm, size=size, count=count, **records)


def EXT(at, data):
    return {"kind": "extent", "at": at, "data": data}


CUT = {"kind": "cut"}


def records_v2(o):
    out = b""
    if o.get("perm") is not None:
        out += perm_msg(o["perm"])
    if "mtime" in o:
        out += time_msg(*o["mtime"])
    if "owner" in o:
        out += owner_v2(*o["owner"])
    for name, value in o.get("xattrs", []):
        out += xattr_msg(name, value)
    if o.get("linked"):
        out += LINKED
    return out


KIND_CODE = {"dir": 1, "file": 2, "extfile": 3, "symlink": 4, "hardlink": 5, "fifo": 6, "char": 7, "block": 8}


class Archive:
    """Encodes ops as a v2 archive, recording where things are (for error offsets)."""

    def __init__(self, ops, root=None, codecs=(), tamper=None):
        self.tamper = tamper or {}
        self.out = bytearray(b"BARGE\x00\x02" + bytes([self.tamper.get("flags", 0)]))
        self.at = {}  # label -> archive offset
        self.segs = []  # (at, stored, body, first, digest)
        self.rows = []  # (path, kind, size, segment, offset)
        self.path, self.entries, self.open, self.pending = [], 0, NONE, 0
        self.codecs = list(codecs)
        self.new_segment()
        if root is not None:
            self.piece(records_v2(root) + b"\x11")
        for o in ops:
            self.op(o)
        self.close_segment()
        self.index()
        self.footer()

    # A body is a list of (bytes, is_data); its skeleton leaves the data out.
    def new_segment(self):
        start = self.tamper.get("start", {}).get(len(self.segs))
        first, open_, path = start if start else (self.entries, self.open, list(self.path))
        self.body = [(start_msg(first, open_, path), False)]
        self.seg_first = first

    def piece(self, data, is_data=False):
        self.body.append((data, is_data))

    def body_len(self):
        return sum(len(b) for b, _ in self.body)

    def op(self, o):
        kind = o["kind"]
        if kind == "cut":
            self.close_segment()
            self.new_segment()
            return
        if kind == "pop":
            self.piece(POP)
            self.path.pop()
            return
        if kind == "extent":
            self.label(o)
            data = o["data"]
            self.piece(b"\x0e" + struct.pack("<QI", o["at"], len(data)))
            self.piece(data, True)
            self.piece(struct.pack("<Q", o.get("digest", digest(data))))
            self.pending -= 1
            if self.pending == 0:
                self.open = NONE
            return
        name = o["name"]
        offset = self.body_len()
        self.piece(records_v2(o))
        self.label(o)
        size = 0
        if kind == "dir":
            self.piece(dir_msg(name))
        elif kind == "file":
            data = o["data"]
            size = len(data)
            self.piece(b"\x01" + name + b"\x00" + struct.pack("<I", size))
            self.piece(data, True)
            self.piece(struct.pack("<Q", o.get("digest", digest(data))))
        elif kind == "extfile":
            size = o["size"]
            self.piece(b"\x0d" + name + b"\x00" + struct.pack("<QI", size, o["count"]))
        elif kind == "symlink":
            size = len(o["target"])
            self.piece(symlink_msg(name, o["target"]))
        elif kind == "hardlink":
            size = o["index"]
            self.piece(hardlink_msg(name, o["index"]))
        else:
            self.piece(special_msg(name, SPECIAL_TYPES[kind], o["major"], o["minor"]))
        code = KIND_CODE[kind] | (0x10 if o.get("linked") else 0)
        self.rows.append((b"/".join(self.path + [name]), code, size, len(self.segs), offset))
        if kind == "dir":
            self.path.append(name)
        if kind == "extfile" and o["count"]:
            self.open, self.pending = self.entries, o["count"]
        self.entries += 1

    def label(self, o):
        if "label" in o:
            # Offsets into raw bodies only: frame head (18 bytes) + body so far.
            self.at[o["label"]] = len(self.out) + 18 + self.body_len()

    def close_segment(self):
        body = b"".join(b for b, _ in self.body)
        skeleton = b"".join(b for b, is_data in self.body if not is_data)
        if len(self.body) == 1:
            return  # nothing after START: an encoder writes no empty segment
        i = len(self.segs)
        dig = self.tamper.get("seg_digest", {}).get(i, digest(skeleton))
        codec = self.codecs[i] if i < len(self.codecs) else 0
        stored = body if codec == 0 else zstd_frame(body)
        stored = self.tamper.get("stored", {}).get(i, stored)
        head = frame_head(0x20, codec, len(stored), self.tamper.get("body_len", {}).get(i, len(body)), dig)
        self.at["seg%d" % i] = len(self.out)
        self.at["start%d" % i] = len(self.out) + 18
        self.segs.append((len(self.out), len(stored), len(body), self.seg_first, dig))
        self.out += head + stored

    def index(self):
        rows = self.tamper.get("rows", lambda r: r)(list(self.rows))
        segs = self.tamper.get("segs", lambda s: s)(list(self.segs))
        out = bytearray(struct.pack("<IQ", len(segs), self.tamper.get("index_entries", len(rows))))
        for at, stored, body, first, dig in segs:
            out += struct.pack("<QIIQQ", at, stored, body, first, dig)
        restarts, start, prev, prev_seg = [], len(out), b"", 0
        for i, (path, code, size, seg, offset) in enumerate(rows):
            shared = 0
            if i % 16:
                while shared < min(len(path), len(prev)) and path[shared] == prev[shared]:
                    shared += 1
            else:
                restarts.append(len(out) - start)
            out += varint(shared) + varint(len(path) - shared) + path[shared:] + bytes([code])
            out += varint(size) + varint(seg - prev_seg) + varint(offset)
            prev, prev_seg = path, seg
        for r in restarts:
            out += struct.pack("<I", r)
        body = self.tamper.get("index_body", lambda b: b)(bytes(out))
        self.at["index"] = len(self.out)
        self.index_at = len(self.out)
        dig = self.tamper.get("index_digest", digest(body))
        self.out += frame_head(0x21, 0, len(body), len(body), dig) + body

    def footer(self):
        fields = [self.entries, len(self.segs), self.index_at]
        fields = self.tamper.get("footer", lambda f: f)(fields)
        head = b"\x00" + struct.pack("<QIQ", *fields)
        self.at["footer"] = len(self.out)
        dig = self.tamper.get("footer_digest", digest(head))
        self.out += head + struct.pack("<Q", dig) + self.tamper.get("magic", b"BARGE\x00\x02\x00")

    def bytes(self):
        return bytes(self.out) + self.tamper.get("after", b"")


# ------------------------------------------------------------ expectations --


def expected(ops, root):
    """The JSON of a valid vector: v1's entry fields, plus owner names, EXTFILEs as
    `size` and `extents`, and the root's records."""
    entries, path, current = [], [], None
    for o in ops:
        kind = o["kind"]
        if kind == "cut":
            continue
        if kind == "pop":
            path.pop()
            continue
        if kind == "extent":
            current["extents"].append({"at": o["at"], "data_hex": o["data"].hex()})
            continue
        name = o["name"]
        full = b"/".join(path + [name])
        entry = {}
        try:
            entry["path"] = full.decode("utf-8")
        except UnicodeDecodeError:
            pass
        entry["path_hex"] = full.hex()
        entry["kind"] = "file" if kind == "extfile" else kind
        default = {"dir": DEFAULT_DIR_MODE, "file": DEFAULT_FILE_MODE, "extfile": DEFAULT_FILE_MODE}
        if kind not in ("symlink", "hardlink"):
            entry["mode"] = default.get(kind, DEFAULT_SPECIAL_MODE) if o.get("perm") is None else o["perm"]
        entry.update(record_fields(o))
        if kind == "file":
            entry["data_hex"] = o["data"].hex()
        if kind == "extfile":
            entry["size"] = o["size"]
            entry["extents"] = []
            current = entry
        if kind == "symlink":
            entry["target_hex"] = o["target"].hex()
        if kind == "hardlink":
            entry["link_index"] = o["index"]
        if kind in ("char", "block"):
            entry["major"], entry["minor"] = o["major"], o["minor"]
        entries.append(entry)
        if kind == "dir":
            path.append(name)
    meta = {"version": 2}
    if root is not None:
        meta["root"] = dict({"mode": root.get("perm", DEFAULT_DIR_MODE)}, **record_fields(root))
    meta["entries"] = entries
    return meta


def record_fields(o):
    out = {}
    if o.get("perm") is not None:
        out["perm"] = o["perm"]
    if "mtime" in o:
        out["mtime"] = {"sec": o["mtime"][0], "nsec": o["mtime"][1]}
    if "owner" in o:
        uid, gid, *names = o["owner"]
        out["owner"] = {"uid": uid, "gid": gid}
        for key, value in zip(("user_hex", "group_hex"), names):
            if value:
                out["owner"][key] = value.hex()
    if "xattrs" in o:
        out["xattrs"] = [{"name_hex": n.hex(), "value_hex": v.hex()} for n, v in o["xattrs"]]
    if o.get("linked"):
        out["linked"] = True
    return out


# ------------------------------------------------------------------ vectors --

T0 = (1700000000, 123456789)
ROOT = {"perm": 0o700, "mtime": (978307200, 0)}
TREE = [D(b"a"), D(b"b"), F(b"c.txt", b"c\n"), P, F(b"d.txt", b"d\n"), P, F(b"e.txt", b"e\n")]
MANY = [F(b"f%02d" % i, b"%d" % i) for i in range(20)]  # 20 rows: a restart at row 16
MiB = 1 << 20

VALID = [
    ("empty", "no segment: header, an index of nothing, the footer", [], None, {}),
    ("root-only", "one segment holding only ROOT with PERM 0o700 and TIME (an empty directory packed)",
     [], ROOT, {}),
    ("file", "one file, its digest after its data", [F(b"hello.txt", b"Hello, barge!\n")], None, {}),
    ("nested", "the tree of v1's nested example, with a root record", TREE, ROOT, {}),
    ("rows-restart", "20 files: the index restarts front coding at row 16", MANY, None, {}),
    ("two-segments", "a tree cut into two segments inside a/b: the second START restates depth 2",
     [D(b"a"), D(b"b"), F(b"c.txt", b"c\n"), CUT, F(b"d.txt", b"d\n"), P, P, F(b"e.txt", b"e\n")], None, {}),
    ("cut-at-root", "two segments cut between top-level entries", [F(b"a", b"1"), CUT, F(b"b", b"2")], None, {}),
    ("hardlink-across-segments", "a LINKED file in segment 0, a hard link to it (entry 1) in segment 1",
     [D(b"d"), F(b"f", b"shared", linked=True), P, CUT, H(b"g", 1)], None, {}),
    ("sparse-200mib", "a 200 MiB file with two data bytes: an EXTFILE with two one-byte extents",
     [XF(b"sparse", 200 * MiB, 2), EXT(0, b"A"), EXT(200 * MiB - 1, b"Z")], None, {}),
    ("extfile-across-segments", "an EXTFILE whose three extents span three segments (START names it open)",
     [D(b"d"), XF(b"big", 12, 3, perm=0o600, linked=True), EXT(0, b"0123"), CUT, EXT(4, b"4567"), CUT,
      EXT(8, b"89ab"), F(b"z", b"after"), P, H(b"link", 1)], None, {}),
    ("extfile-holes-only", "an EXTFILE with no extents: all holes", [XF(b"hole", 4096, 0)], None, {}),
    ("owner-names", "OWNER with user and group names, and one without names",
     [F(b"a", owner=(1000, 1000, b"alice", b"staff")), F(b"b", owner=(0, 0, b"root", b"")),
      F(b"c", owner=(4242, 4242))], dict(ROOT, owner=(0, 0, b"root", b"root")), {}),
    ("every-kind", "every kind with records, sorted siblings",
     [D(b"bin", mtime=T0), F(b"sh", b"#!", 0o755, mtime=T0, linked=True), S(b"shell", b"sh"), P,
      D(b"dev"), X("char", b"null", 1, 3, 0o666), X("fifo", b"pipe"), P, H(b"rsh", 1),
      F(b"z", b"z", xattrs=[(b"user.a", b"1")])], ROOT, {}),
    ("zstd-segment", "a zstd segment (one frame of raw and RLE blocks) then a raw one",
     [F(b"a", b"x" * 1000), CUT, F(b"b", b"raw")], None, {"codecs": (1, 0)}),
]


def bad(name, description, code, where, ops, root=None, **kw):
    return (name, description, code, where, ops, root, kw)


# `where` is a label set on an op (label=...), "seg0", "index", "footer", or an int.
def L(o, label):
    return dict(o, label=label)


RLE_BOMB = [(1, 1 << 17, b"\x00")] * 600  # 75 MiB of zeros from 1.8 KB
INVALID = [
    bad("flags-1", "v2 with header flags 1", "bad-flags", 0, [F(b"a")], tamper={"flags": 1}),
    bad("file64", "FILE64 does not exist in v2", "unknown-tag", "f",
        [F(b"a")]),  # the FILE64 is written in build_invalid
    bad("codec-2", "a segment with codec 2", "bad-frame", "seg0", [F(b"a")]),
    bad("raw-stored-differs", "a raw segment whose stored length differs from its body length", "bad-frame",
        "seg0", [F(b"a")]),
    bad("body-too-large", "a segment announcing a body above 2^26 bytes", "bad-frame", "seg0", [F(b"a")]),
    bad("file-digest", "one byte of a file's data differs from its digest", "bad-digest", "f",
        [L(F(b"a", b"data", digest=digest(b"datA")), "f")]),
    bad("segment-digest", "the segment digest does not match its skeleton", "bad-digest", "seg0",
        [F(b"a", b"x")], tamper={"seg_digest": {0: 1}}),
    bad("extent-digest", "an extent's digest does not match", "bad-digest", "e",
        [XF(b"x", 8, 1), L(EXT(0, b"abcd"), "e") | {"digest": 7}]),
    bad("start-first", "the second START states the wrong first entry", "bad-start", "start1",
        [F(b"a"), CUT, F(b"b")], tamper={"start": {1: (0, NONE, [])}}),
    bad("start-path", "the second START restates another directory", "bad-start", "start1",
        [D(b"d"), F(b"a"), CUT, F(b"b"), P], tamper={"start": {1: (2, NONE, [b"e"])}}),
    bad("start-open", "the second START omits the open EXTFILE", "bad-start", "start1",
        [XF(b"x", 8, 2), EXT(0, b"ab"), CUT, EXT(4, b"cd")], tamper={"start": {1: (1, NONE, [])}}),
    bad("root-not-first", "ROOT after an entry", "misplaced-root", "r", [F(b"a")]),
    bad("unsorted", "a name below its predecessor", "unsorted", "b", [F(b"b"), L(F(b"a"), "b")]),
    bad("duplicate", "the same name twice", "duplicate-name", "b", [F(b"a"), L(F(b"a"), "b")]),
    bad("extent-overlap", "an extent starting inside the previous one", "bad-extent", "e",
        [XF(b"x", 8, 2), EXT(0, b"abcd"), L(EXT(2, b"ef"), "e")]),
    bad("extent-past-size", "an extent ending past its file's size", "bad-extent", "e",
        [XF(b"x", 4, 1), L(EXT(2, b"abc"), "e")]),
    bad("extent-missing", "a DIR where the EXTFILE's second extent belongs", "bad-extent", "d",
        [XF(b"x", 8, 2), EXT(0, b"ab"), L(D(b"y"), "d"), P]),
    bad("extent-unexpected", "an EXTENT with no EXTFILE open", "bad-extent", "e", [F(b"a"), L(EXT(0, b"x"), "e")]),
    bad("index-count", "the index states one entry more", "bad-index", "index", [F(b"a")],
        tamper={"index_entries": 2}),
    bad("index-path", "an index row names another path", "bad-index", "index", [F(b"a")],
        tamper={"rows": lambda r: [(b"b",) + r[0][1:]]}),
    bad("index-segment-at", "the index places segment 0 at the wrong offset", "bad-index", "index", [F(b"a")],
        tamper={"segs": lambda s: [(9,) + s[0][1:]]}),
    bad("index-digest", "the index digest does not match", "bad-digest", "index", [F(b"a")],
        tamper={"index_digest": 5}),
    bad("index-segments-overlap", "the index places segment 1 one byte inside segment 0", "bad-index", "index",
        [F(b"a"), CUT, F(b"b")], tamper={"segs": lambda s: [s[0], (s[1][0] - 1,) + s[1][1:]]}),
    bad("index-path-twice", "two index rows name the same path", "bad-index", "index", [F(b"a"), F(b"b")],
        tamper={"rows": lambda r: [r[0], (b"a",) + r[1][1:]]}),
    bad("index-unsorted", "index rows out of path order", "bad-index", "index", [F(b"a"), F(b"b")],
        tamper={"rows": lambda r: [(b"b",) + r[0][1:], (b"a",) + r[1][1:]]}),
    bad("index-parent-file", "an index row below a row that is no directory", "bad-index", "index",
        [F(b"a"), F(b"b")], tamper={"rows": lambda r: [r[0], (b"a/b",) + r[1][1:]]}),
    bad("index-varint", "an index row's offset as a varint with a redundant zero group", "bad-index", "index",
        [F(b"a")], tamper={"index_body": lambda b: b[:-5] + bytes([b[-5] | 0x80, 0]) + b[-4:]}),
    bad("index-restart", "the index's second restart is one byte off its row", "bad-index", "index", MANY,
        tamper={"index_body": lambda b: b[:-4] + struct.pack("<I", struct.unpack("<I", b[-4:])[0] + 1)}),
    bad("index-trailing-byte", "a byte after the index's restarts", "bad-index", "index", [F(b"a")],
        tamper={"index_body": lambda b: b + b"\x00"}),
    bad("footer-count", "the footer counts two entries", "bad-footer", "footer", [F(b"a")],
        tamper={"footer": lambda f: [2, f[1], f[2]]}),
    bad("footer-index-at", "the footer points 1 byte before the index", "bad-footer", "footer", [F(b"a")],
        tamper={"footer": lambda f: [f[0], f[1], f[2] - 1]}),
    bad("footer-index-outside", "the footer places the index past the archive's end", "bad-footer", "footer",
        [F(b"a")], tamper={"footer": lambda f: [f[0], f[1], 1 << 40]}),
    bad("footer-digest", "the footer digest does not match", "bad-digest", "footer", [F(b"a")],
        tamper={"footer_digest": 3}),
    bad("zstd-window", "a zstd frame asking for a 2^28-byte window", "bad-zstd", "seg0", [F(b"a", b"x" * 64)]),
    bad("zstd-bomb", "a zstd frame of RLE blocks producing 75 MiB for a 4096-byte body", "bad-zstd", "seg0",
        [F(b"a", b"x")]),
    bad("zstd-not-smaller", "a zstd frame no smaller than its body", "bad-frame", "seg0", [F(b"a", b"xy")],
        codecs=(1,)),
    bad("end-inside-dir", "the last segment ends inside a directory", "end-inside-dir", "index", [D(b"d"), F(b"a")]),
    bad("truncated-no-index", "the archive ends after its segment", "truncated", "index", [F(b"a")]),
    bad("file-past-body", "a FILE whose data runs past its segment's body (found by fuzzing: streamed, the "
        "decoder went on after the body)", "truncated", "f", [F(b"a")]),
]


def build_invalid(name, ops, root, kw):
    tamper = dict(kw.get("tamper", {}))
    codecs = kw.get("codecs", ())
    arch = Archive(ops, root, codecs, tamper)
    data = arch.bytes()
    seg0 = arch.at.get("seg0")
    # Cases that edit bytes after encoding (each keeps every digest right but the one at fault).
    if name == "file64":
        body = start_msg(0, NONE, []) + b"\x04a\x00" + struct.pack("<Q", 1 << 32)
        data = data[:8] + frame_head(0x20, 0, len(body), len(body), digest(body)) + body
        arch.at["f"] = 8 + 18 + len(start_msg(0, NONE, []))
    elif name == "codec-2":
        data = data[:seg0 + 1] + b"\x02" + data[seg0 + 2:]
    elif name == "raw-stored-differs":
        data = data[:seg0 + 6] + struct.pack("<I", arch.segs[0][2] + 1) + data[seg0 + 10:]
    elif name == "body-too-large":
        data = data[:seg0 + 2] + struct.pack("<II", MAX_BODY + 1, MAX_BODY + 1) + data[seg0 + 10:]
    elif name == "root-not-first":
        body = start_msg(0, NONE, []) + b"\x01a\x00" + struct.pack("<I", 0) + struct.pack("<Q", digest(b"")) + b"\x11"
        skeleton = body
        arch.at["r"] = 8 + 18 + len(body) - 1
        data = data[:8] + frame_head(0x20, 0, len(body), len(body), digest(skeleton)) + body
    elif name in ("zstd-window", "zstd-bomb"):
        body_len = arch.segs[0][2] if name == "zstd-window" else 4096
        frame = zstd_frame(b"", window_exp=18, blocks=[(1, body_len, b"\x00")]) if name == "zstd-window" \
            else zstd_frame(b"", blocks=RLE_BOMB)
        data = data[:8] + frame_head(0x20, 1, len(frame), body_len, arch.segs[0][4]) + frame
        arch.at["index"] = len(data)
    elif name == "file-past-body":
        body = start_msg(0, NONE, []) + b"\x01a\x00" + struct.pack("<I", 100) + b"xyz"
        data = data[:8] + frame_head(0x20, 0, len(body), len(body), digest(body)) + body + arch.bytes()[8 + 18 + arch.segs[0][2]:]
        arch.at["f"] = 8 + 18 + len(start_msg(0, NONE, []))
    elif name == "truncated-no-index":
        data = data[:arch.at["index"]]
    where = kw["where"]
    return data, where if isinstance(where, int) else arch.at[where]


def build():
    files, names = {}, set()
    for name, description, ops, root, kw in VALID:
        assert name not in names
        names.add(name)
        arch = Archive(ops, root, kw.get("codecs", ()))
        files["valid/%s.barge" % name] = arch.bytes()
        meta = {"description": description}
        meta.update(expected(ops, root))
        files["valid/%s.json" % name] = dump_json(meta)
    for name, description, code, where, ops, root, kw in INVALID:
        assert name not in names
        names.add(name)
        kw = dict(kw, where=where)
        data, offset = build_invalid(name, ops, root, kw)
        files["invalid/%s.barge" % name] = data
        files["invalid/%s.json" % name] = dump_json({"description": description, "error": code, "offset": offset})
    return files


def main(argv):
    return write_or_check(argv, build(), OUT, "generate_v2.py", (len(VALID), len(INVALID)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
