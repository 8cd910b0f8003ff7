#!/usr/bin/env python3
"""Generate the barge format v1 test vectors (testdata/vectors/).

Every byte is written by hand from docs/FORMAT.md with the standard library
only; no barge implementation is involved, so the vectors can judge them all.

    python3 testdata/vectors/generate.py          # (re)write valid/ and invalid/
    python3 testdata/vectors/generate.py --check  # exit 1 if the committed files differ
"""

import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- messages --

MAGIC = b"BARGE\x00"
POP = b"\x03"
DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
DEFAULT_SPECIAL_MODE = 0o644
MAX_SYMLINK = 4095
MAX_XATTR_VALUE = 65536
MAX_XATTRS = 262144
SPECIAL_TYPES = {"fifo": 1, "char": 2, "block": 3}


def header(version=1, flags=0):
    return MAGIC + bytes([version, flags])


def file_msg(name, data=b"", size=None):
    return b"\x01" + name + b"\x00" + struct.pack("<I", len(data) if size is None else size) + data


def file64_msg(name, data=b"", size=None):
    return b"\x04" + name + b"\x00" + struct.pack("<Q", len(data) if size is None else size) + data


def dir_msg(name):
    return b"\x02" + name + b"\x00"


def perm_msg(mode):
    return b"\x05" + struct.pack("<H", mode)


def time_msg(sec, nsec):
    return b"\x06" + struct.pack("<qI", sec, nsec)


def owner_msg(uid, gid):
    return b"\x07" + struct.pack("<II", uid, gid)


def xattr_msg(name, value, size=None):
    return b"\x08" + bytes([len(name)]) + name + struct.pack("<I", len(value) if size is None else size) + value


LINKED = b"\x09"


def symlink_msg(name, target, length=None):
    return b"\x0a" + name + b"\x00" + struct.pack("<H", len(target) if length is None else length) + target


def hardlink_msg(name, index):
    return b"\x0b" + name + b"\x00" + struct.pack("<Q", index)


def special_msg(name, type_, major=0, minor=0):
    return b"\x0c" + name + b"\x00" + struct.pack("<BII", type_, major, minor)


def end_msg(count):
    return b"\x00" + struct.pack("<Q", count)


HDR = header()
XHDR = header(flags=1)

# ------------------------------------------------------------ valid vectors --
# A valid vector is a list of operations; the archive bytes and the expected
# entry list are both derived from it by the two small functions below.
#   D(name, perm=None, **records)             DIR
#   F(name, data, perm=None, **records)       FILE
#   S(name, target, **records)                SYMLINK
#   H(name, index)                            HARDLINK to entry number `index`
#   X(kind, name, major, minor, perm, **rec)  SPECIAL: kind "fifo", "char" or "block"
#   P                                         POP
# records (extended archives only): mtime=(sec, nsec), owner=(uid, gid),
# xattrs=[(name, value), ...], linked=True (files only).


def op(kind, name, perm=None, **fields):
    return dict(kind=kind, name=name, perm=perm, **fields)


def D(name, perm=None, **records):
    return op("dir", name, perm, **records)


def F(name, data=b"", perm=None, **records):
    return op("file", name, perm, data=data, **records)


def S(name, target, **records):
    return op("symlink", name, target=target, **records)


def H(name, index):
    return op("hardlink", name, index=index)


def X(kind, name, major=0, minor=0, perm=None, **records):
    assert kind in SPECIAL_TYPES
    return op(kind, name, perm, major=major, minor=minor, **records)


P = {"kind": "pop"}


def records_bytes(o):
    """The records before an entry, in tag order."""
    out = b""
    if o.get("perm") is not None:
        out += perm_msg(o["perm"])
    if "mtime" in o:
        out += time_msg(*o["mtime"])
    if "owner" in o:
        out += owner_msg(*o["owner"])
    for name, value in o.get("xattrs", []):
        out += xattr_msg(name, value)
    if o.get("linked"):
        out += LINKED
    return out


def entry_bytes(o):
    """An entry's records and message (a file's data included)."""
    kind, name = o["kind"], o["name"]
    body = {
        "dir": lambda: dir_msg(name),
        "file": lambda: file_msg(name, o["data"]),
        "symlink": lambda: symlink_msg(name, o["target"]),
        "hardlink": lambda: hardlink_msg(name, o["index"]),
    }.get(kind, lambda: special_msg(name, SPECIAL_TYPES[kind], o["major"], o["minor"]))()
    return records_bytes(o) + body


def encode_ops(ops, extended=False):
    out = bytearray(XHDR if extended else HDR)
    count = 0
    for o in ops:
        if o["kind"] == "pop":
            out += POP
            continue
        out += entry_bytes(o)
        count += 1
    out += end_msg(count)
    return bytes(out)


def check_canonical(o, number, linked, extended):
    """Asserts `o` is what a correct packer writes (records in bounds, PERM only when
    it differs from the default, LINKED on files, links to earlier LINKED files)."""
    kind = o["kind"]
    records = [k for k in ("mtime", "owner", "xattrs", "linked") if k in o]
    assert extended or not records, "records in a core archive"
    assert extended or kind in ("dir", "file"), "%s in a core archive" % kind
    default = {"dir": DEFAULT_DIR_MODE, "file": DEFAULT_FILE_MODE}.get(kind, DEFAULT_SPECIAL_MODE)
    assert o.get("perm") != default, "a packer never writes PERM equal to the default"
    if kind in ("symlink", "hardlink"):
        assert o.get("perm") is None, "no PERM on a %s" % kind
    if kind == "hardlink":
        assert not records, "no records on a hard link"
        assert o["index"] in linked, "hard link to an entry that is not a linked file"
    if o.get("linked"):
        assert kind == "file"
        linked.add(number)
    if "mtime" in o:
        assert 0 <= o["mtime"][1] < 10**9 and -(2**63) <= o["mtime"][0] < 2**63
    names = [n for n, _ in o.get("xattrs", [])]
    assert names == sorted(set(names)), "xattr names must be strictly ascending"
    assert all(0 < len(n) < 256 and b"\x00" not in n for n in names)
    assert all(len(v) <= MAX_XATTR_VALUE for _, v in o.get("xattrs", []))
    assert sum(len(xattr_msg(n, v)) for n, v in o.get("xattrs", [])) <= MAX_XATTRS
    if kind == "symlink":
        assert 0 < len(o["target"]) <= MAX_SYMLINK and b"\x00" not in o["target"]
    if kind == "fifo":
        assert o["major"] == o["minor"] == 0


def expected_entry(o, full, default):
    """The JSON entry of `o`, whose path is `full`."""
    kind = o["kind"]
    entry = {}
    try:
        entry["path"] = full.decode("utf-8")
    except UnicodeDecodeError:
        pass
    entry["path_hex"] = full.hex()
    entry["kind"] = kind
    if kind not in ("symlink", "hardlink"):
        entry["mode"] = default if o.get("perm") is None else o["perm"]
    if o.get("perm") is not None:
        entry["perm"] = o["perm"]
    if "mtime" in o:
        entry["mtime"] = {"sec": o["mtime"][0], "nsec": o["mtime"][1]}
    if "owner" in o:
        entry["owner"] = {"uid": o["owner"][0], "gid": o["owner"][1]}
    if "xattrs" in o:
        entry["xattrs"] = [{"name_hex": n.hex(), "value_hex": v.hex()} for n, v in o["xattrs"]]
    if o.get("linked"):
        entry["linked"] = True
    if kind == "file":
        entry["data_hex"] = o["data"].hex()
    if kind == "symlink":
        entry["target_hex"] = o["target"].hex()
    if kind == "hardlink":
        entry["link_index"] = o["index"]
    if kind in ("char", "block"):
        entry["major"] = o["major"]
        entry["minor"] = o["minor"]
    return entry


def expected_entries(ops, extended=False):
    """Pre-order entry list; also asserts the ops are canonical (what a
    correct packer emits): siblings strictly increasing by name bytes, records
    as check_canonical wants them, balanced POPs."""
    stack = [[]]  # names seen so far in each open directory
    path = []
    entries = []
    linked = set()
    for o in ops:
        kind, name = o["kind"], o.get("name")
        if kind == "pop":
            assert path, "unbalanced POP in a valid vector"
            path.pop()
            stack.pop()
            continue
        siblings = stack[-1]
        assert not siblings or siblings[-1] < name, "siblings not sorted: %r" % name
        siblings.append(name)
        check_canonical(o, len(entries), linked, extended)
        default = {"dir": DEFAULT_DIR_MODE, "file": DEFAULT_FILE_MODE}.get(kind, DEFAULT_SPECIAL_MODE)
        entries.append(expected_entry(o, b"/".join(path + [name]), default))
        if kind == "dir":
            path.append(name)
            stack.append([])
    assert not path, "valid vector leaves directories open"
    return entries


def nested(depth, name=b"d"):
    return [D(name)] * depth + [P] * depth


ALL_BYTES = bytes(range(256))
PATTERN = bytes((i * 31 + (i >> 8)) & 0xFF for i in range(70000))

VALID = [
    ("empty", "no entries: header and END with count 0", []),
    ("empty-file", "one empty file", [F(b"empty")]),
    ("file-with-data", "one file with a short text", [F(b"hello.txt", b"Hello, barge!\n")]),
    ("file-all-byte-values", "one file holding every byte value 0x00..0xff", [F(b"bytes.bin", ALL_BYTES)]),
    ("file-70000-bytes", "one 70000-byte file (larger than typical stream chunks)", [F(b"big.bin", PATTERN)]),
    ("empty-dir", "one empty directory", [D(b"empty"), P]),
    ("nested", "nested directories with files at several levels", [
        D(b"a"), D(b"b"), F(b"c.txt", b"c\n"), P, F(b"d.txt", b"d\n"), P, F(b"e.txt", b"e\n"),
    ]),
    ("siblings-sorted", "siblings of mixed kinds ordered by name bytes (uppercase < '_' < lowercase < non-ASCII)", [
        F(b"B"), F(b"Z", b"z"), F(b"_"), D(b"a"), P, F(b"a.txt", b"a"), D(b"a0"), F(b"x"), P,
        F(b"ab"), F("\u00e9".encode()),
    ]),
    ("same-name-different-dirs", "the same name in different directories is not a duplicate", [
        D(b"x"), D(b"x"), F(b"x", b"1"), P, F(b"y", b"2"), P, D(b"y"), F(b"x", b"3"), P,
    ]),
    ("perm-file-755", "PERM 0o755 on a file (an executable)", [F(b"run.sh", b"#!/bin/sh\necho hi\n", 0o755)]),
    ("perm-dir-700", "PERM 0o700 on a directory with a file in it", [D(b"private", 0o700), F(b"key", b"k"), P]),
    ("perm-empty-dir-700", "PERM 0o700 on an empty directory (DIR directly followed by POP)", [D(b"locked", 0o700), P]),
    ("perm-setuid", "PERM 0o4755 on a file: the decoder reports all twelve bits (a lander's policy decides which apply)", [F(b"suid", b"x", 0o4755)]),
    ("perm-sticky-dir", "PERM 0o1777 on a directory (sticky)", [D(b"tmp", 0o1777), P]),
    ("perm-zero", "PERM 0o000 on a file", [F(b"nothing", b"", 0o000)]),
    ("perm-mixed", "PERM on some entries, defaults on others", [
        D(b"bin"), F(b"tool", b"\x7fELF", 0o755), P, D(b"etc", 0o750), F(b"conf", b"k=v\n", 0o600), P,
        F(b"readme", b"hi\n"),
    ]),
    ("name-non-utf8", "a name that is not UTF-8 (bytes ff fe)", [F(b"\xff\xfe", b"not utf-8")]),
    ("name-non-utf8-dir", "a non-UTF-8 directory name (latin-1 'caf\\xe9') with a child", [
        D(b"caf\xe9"), F(b"menu", b"m"), P,
    ]),
    ("name-control-chars", "names with newline, tab, CR, 0x01, ESC and DEL", [
        D(b"dir\nwith newline"), F(b"\x01\x1b[31m\x7f", b"ctl"), P, F(b"line\nbreak\ttab\r", b"nl"),
    ]),
    ("name-255-bytes", "a name of exactly 255 bytes (the maximum)", [F(b"n" * 255, b"long")]),
    ("name-255-bytes-utf8", "a name of 255 bytes made of 85 three-byte UTF-8 characters", [
        D(("\u65e5" * 85).encode()), P,
    ]),
    ("name-utf8-multibyte", "UTF-8 names with 2-, 3- and 4-byte characters", [
        F("caf\u00e9.txt".encode(), "\u00e9".encode()), D("\u65e5\u672c\u8a9e".encode()),
        F("\U0001f980.rs".encode(), b"crab"), P,
    ]),
    ("name-spaces-and-dots", "names that only look special: ' ', '...', '.hidden', '-', '~'", [
        F(b" "), F(b"-"), F(b"..."), F(b".hidden", b"h"), F(b"~"),
    ]),
    ("depth-1024", "exactly 1024 nested directories (the default max depth)", nested(1024)),
]

# Extended archives (header flag 1): the fourth element marks them.
T0 = (1700000000, 123456789)
XV = [(b"user.a", b""), (b"user.b", b"\x00\x01binary\xff"), (b"user.comment", "caf\u00e9".encode())]
BIG_XATTRS = [(b"user.0", b"\x00" * 65536), (b"user.1", b"\x01" * 65536), (b"user.2", b"\x02" * 65536),
              (b"user.3", b"\x03" * 65488)]  # 4 records of 12 + value bytes: exactly 262144 bytes
assert sum(len(xattr_msg(n, v)) for n, v in BIG_XATTRS) == MAX_XATTRS

EXTENDED = [
    ("ext-empty", "header flag 1 and no records or entries (a decoder accepts the flag alone)", [], "extended"),
    ("ext-no-records", "header flag 1, a directory and a file without any record", [
        D(b"d"), F(b"f", b"x"), P,
    ], "extended"),
    ("ext-perm-only", "header flag 1 with PERM records only", [D(b"d", 0o700), F(b"f", b"x", 0o600), P], "extended"),
    ("symlink-relative", "a file and a relative symlink to it", [
        F(b"a.txt", b"a"), S(b"link", b"a.txt"),
    ], "extended"),
    ("symlink-absolute", "a symlink to an absolute path, stored as it is", [S(b"passwd", b"/etc/passwd")], "extended"),
    ("symlink-dotdot", "a symlink pointing outside the tree (never followed by a lander)", [
        D(b"d"), S(b"up", b"../../../outside"), P,
    ], "extended"),
    ("symlink-target-4095", "a symlink with a target of 4095 bytes (the maximum)", [
        S(b"long", b"t/" * 2047 + b"t"),
    ], "extended"),
    ("symlink-target-non-utf8", "a symlink whose target is not UTF-8 and holds a newline", [
        S(b"odd", b"\xff\xfe\nx"),
    ], "extended"),
    ("symlink-records", "a symlink with TIME, OWNER and an XATTR (never PERM)", [
        S(b"link", b"target", mtime=T0, owner=(1000, 100), xattrs=[(b"user.x", b"1")]),
    ], "extended"),
    ("ext-links", "a file with TIME and LINKED, a hard link to it and a symlink to it (docs/FORMAT.md's example)", [
        F(b"a", b"hi\n", mtime=(1700000000, 0), linked=True), H(b"b", 0), S(b"c", b"a"),
    ], "extended"),
    ("hardlink-pair", "a LINKED file and a hard link to it (entry 0)", [
        F(b"a", b"shared", linked=True), H(b"b", 0),
    ], "extended"),
    ("hardlink-groups", "two groups of hard links across directories, interleaved", [
        D(b"d"), F(b"one", b"1", linked=True), F(b"two", b"2", 0o600, linked=True), H(b"uno", 1), P,
        D(b"e"), H(b"deux", 2), H(b"eins", 1), P, H(b"top", 2),
    ], "extended"),
    ("hardlink-empty-file", "an empty LINKED file and two hard links to it", [
        F(b"a", linked=True), H(b"b", 0), H(b"c", 0),
    ], "extended"),
    ("linked-without-links", "a LINKED file whose other links are outside the tree", [
        F(b"f", b"x", linked=True),
    ], "extended"),
    ("fifo", "a fifo (SPECIAL type 1) with the default mode", [X("fifo", b"pipe")], "extended"),
    ("devices", "character and block devices with modes and owners", [
        X("block", b"loop0", 7, 0, 0o660, owner=(0, 6)), X("char", b"null", 1, 3, 0o666, owner=(0, 0)),
        X("char", b"tty", 5, 0, 0o620, mtime=T0, owner=(0, 5)),
    ], "extended"),
    ("device-max-numbers", "a block device with major and minor 0xffffffff", [
        X("block", b"max", 0xFFFFFFFF, 0xFFFFFFFF),
    ], "extended"),
    ("special-records", "a fifo with PERM, TIME, OWNER and XATTRs", [
        X("fifo", b"p", perm=0o600, mtime=T0, owner=(1, 2), xattrs=XV),
    ], "extended"),
    ("time-every-kind", "TIME on a directory, a file, a symlink and a fifo", [
        D(b"d", mtime=(1, 0)), F(b"f", b"x", mtime=(2, 1)), S(b"l", b"f", mtime=(3, 2)),
        X("fifo", b"p", mtime=(4, 3)), P,
    ], "extended"),
    ("time-negative", "times before 1970: -1 s + 999999999 ns, and the smallest i64", [
        F(b"a", mtime=(-1, 999999999)), F(b"b", mtime=(-(2**63), 0)),
    ], "extended"),
    ("time-extremes", "time 0, the largest i64 seconds and the largest nanoseconds", [
        F(b"a", mtime=(0, 0)), F(b"b", mtime=(2**63 - 1, 999999999)), F(b"c", mtime=T0),
    ], "extended"),
    ("owner", "owners root, nobody and 0xffffffff", [
        F(b"a", owner=(0, 0)), F(b"b", owner=(65534, 65534)), F(b"c", owner=(0xFFFFFFFF, 0xFFFFFFFF)),
    ], "extended"),
    ("xattrs-several", "several xattrs of different namespaces on a file and a directory", [
        D(b"d", xattrs=[(b"system.posix_acl_default", b"\x02\x00\x00\x00"), (b"user.d", b"dir")]),
        F(b"f", b"x", xattrs=[(b"security.selinux", b"system_u:object_r:etc_t:s0\x00"),
                              (b"trusted.t", b"t")] + XV), P,
    ], "extended"),
    ("xattr-name-255", "an xattr name of 255 bytes and an empty value", [
        F(b"f", xattrs=[(b"user." + b"n" * 250, b"")]),
    ], "extended"),
    ("xattrs-at-bound", "XATTR records of exactly 262144 bytes (tags included), values up to 65536", [
        F(b"f", xattrs=BIG_XATTRS),
    ], "extended"),
    ("all-records", "PERM, TIME, OWNER, XATTRs and LINKED on one file, then a hard link to it", [
        F(b"all", b"content", 0o4755, mtime=T0, owner=(1000, 1000), xattrs=XV, linked=True), H(b"also", 0),
    ], "extended"),
    ("ext-mixed-tree", "every kind in one tree, siblings sorted across kinds", [
        D(b"bin", mtime=T0), F(b"sh", b"#!", 0o755, mtime=T0, linked=True), S(b"shell", b"sh"), P,
        D(b"dev"), X("char", b"null", 1, 3, 0o666), X("fifo", b"pipe"), P,
        H(b"rsh", 1), F(b"z", b"z", owner=(1, 1)),
    ], "extended"),
]

# ---------------------------------------------------------- invalid vectors --


class At(bytes):
    """Marks the part of an invalid vector at whose first byte decoding fails."""


def invalid(parts):
    """Concatenate parts; the error offset is where the At() part starts."""
    out = bytearray()
    offset = None
    for part in parts:
        if isinstance(part, At):
            assert offset is None
            offset = len(out)
        out += part
    assert offset is not None
    return bytes(out), offset


def deep_dirs(n):
    """n nested DIR "d": the last one is the At() part."""
    return [dir_msg(b"d")] * (n - 1) + [At(dir_msg(b"d"))] + [POP] * n


f1 = file_msg(b"f", b"1")

# name, description, error, parts, options (decoder limits to apply, if any)
INVALID = [
    ("bad-magic", "wrong magic 'BARGF'", "bad-magic", [At(b"BARGF\x00\x01\x00"), end_msg(0)], None),
    ("bad-magic-zip", "a ZIP local header", "bad-magic", [At(b"PK\x03\x04\x14\x00\x00\x00"), end_msg(0)], None),
    ("bad-magic-short", "3 bytes that already differ from the magic", "bad-magic", [At(b"BAX")], None),
    ("truncated-empty-input", "empty input", "truncated", [At(b"")], None),
    ("truncated-in-header", "only 'BARGE' of the header", "truncated", [At(b"BARGE")], None),
    ("truncated-in-header-7", "7 header bytes; the version byte 2 is not checked before the length",
     "truncated", [At(b"BARGE\x00\x02")], None),
    ("truncated-at-tag", "header only, no END", "truncated", [HDR, At(b"")], None),
    ("truncated-at-tag-after-file", "input ends after a complete FILE, no END", "truncated", [HDR, f1, At(b"")], None),
    ("truncated-at-tag-after-perm", "input ends after a PERM", "truncated", [HDR, perm_msg(0o755), At(b"")], None),
    ("truncated-in-name", "input ends inside a name", "truncated", [HDR, At(b"\x01na")], None),
    ("truncated-after-tag", "input ends right after a DIR tag", "truncated", [HDR, At(b"\x02")], None),
    ("truncated-name-255-no-nul", "255 name bytes and no NUL before the end: truncated, not too long",
     "truncated", [HDR, At(b"\x01" + b"n" * 255)], None),
    ("truncated-in-name-slash", "input ends in a name holding '/': truncated is checked first",
     "truncated", [HDR, At(b"\x01a/b")], None),
    ("truncated-in-size", "FILE with 2 of its 4 size bytes", "truncated", [HDR, At(b"\x01f\x00\x05\x00")], None),
    ("truncated-in-size64", "FILE64 with 4 of its 8 size bytes", "truncated", [HDR, At(b"\x04f\x00\x00\x00\x00\x00")], None),
    ("truncated-in-data", "FILE of size 5 with 3 data bytes", "truncated", [HDR, At(b"\x01f\x00\x05\x00\x00\x00abc")], None),
    ("truncated-size-past-end", "FILE claiming 0xffffffff bytes followed by an END",
     "truncated", [HDR, At(file_msg(b"f", b"", 0xFFFFFFFF)), end_msg(1)], None),
    ("truncated-in-data64", "FILE64 of size 2^32 with 2 data bytes",
     "truncated", [HDR, At(file64_msg(b"f", b"ab", 1 << 32))], None),
    ("truncated-size64-max-after-file", "a 2-byte FILE, then a FILE64 claiming 2^64-1 bytes followed by an "
     "END: the file bytes add up past 2^64, which a decoder must not overflow (found by fuzzing)",
     "truncated", [HDR, file_msg(b"a", b"hi"), At(file64_msg(b"b", b"", (1 << 64) - 1)), end_msg(2)], None),
    ("truncated-in-count", "END with 4 of its 8 count bytes", "truncated", [HDR, At(b"\x00\x00\x00\x00\x00")], None),
    ("truncated-in-perm", "PERM with 1 of its 2 mode bytes", "truncated", [HDR, At(b"\x05\xed")], None),
    ("bad-version-3", "version 3 (versions 1 and 2 exist)", "bad-version", [At(header(version=3)), end_msg(0)], None),
    ("bad-version-0", "version 0", "bad-version", [At(header(version=0)), end_msg(0)], None),
    ("bad-flags", "flags 0x02", "bad-flags", [At(header(flags=2)), end_msg(0)], None),
    ("bad-flags-ff", "flags 0xff", "bad-flags", [At(header(flags=0xFF)), end_msg(0)], None),
    ("unknown-tag-06", "extended tag 0x06 (TIME) in an archive with flags 0", "unknown-tag",
     [HDR, f1, At(b"\x06\x00\x00"), end_msg(1)], None),
    ("unknown-tag-0f", "reserved tag 0x0f in an archive with flags 0", "unknown-tag", [HDR, At(b"\x0f"), end_msg(0)], None),
    ("unknown-tag-ff", "tag 0xff inside a directory", "unknown-tag", [HDR, dir_msg(b"d"), At(b"\xff"), POP, end_msg(1)], None),
    ("unknown-tag-after-perm", "PERM followed by tag 0x06 in an archive with flags 0: unknown-tag is checked first",
     "unknown-tag", [HDR, perm_msg(0o755), At(b"\x06"), end_msg(0)], None),
    ("dangling-perm-pop", "PERM followed by POP", "dangling-perm",
     [HDR, dir_msg(b"d"), perm_msg(0o700), At(POP), end_msg(1)], None),
    ("dangling-perm-pop-at-root", "PERM then POP at depth 0: dangling-perm is checked before pop-at-root",
     "dangling-perm", [HDR, perm_msg(0o700), At(POP), end_msg(0)], None),
    ("dangling-perm-end", "PERM followed by END", "dangling-perm", [HDR, perm_msg(0o755), At(end_msg(0))], None),
    ("dangling-perm-end-truncated", "PERM followed by a truncated END: dangling-perm is checked first",
     "dangling-perm", [HDR, perm_msg(0o755), At(b"\x00\x00")], None),
    ("record-order-perm-perm", "PERM followed by PERM: a repeated record", "record-order",
     [HDR, perm_msg(0o755), At(perm_msg(0o700)), f1, end_msg(1)], None),
    ("end-inside-dir", "END at depth 1", "end-inside-dir", [HDR, dir_msg(b"d"), At(end_msg(1))], None),
    ("end-inside-dir-before-count", "END at depth 1 with a wrong count: end-inside-dir is checked first",
     "end-inside-dir", [HDR, dir_msg(b"d"), At(end_msg(7))], None),
    ("count-mismatch-high", "END count 2 for 1 entry", "count-mismatch", [HDR, f1, At(end_msg(2))], None),
    ("count-mismatch-low", "END count 1 for 3 entries (POP is not counted)", "count-mismatch",
     [HDR, dir_msg(b"d"), f1, POP, file_msg(b"g"), At(end_msg(1))], None),
    ("count-mismatch-before-trailing", "wrong count and trailing bytes: count-mismatch is checked first",
     "count-mismatch", [HDR, At(end_msg(1)), b"junk"], None),
    ("trailing-bytes", "one 0x00 byte after END", "trailing-bytes", [HDR, end_msg(0), At(b"\x00")], None),
    ("trailing-bytes-archive", "a second archive appended", "trailing-bytes",
     [HDR, f1, end_msg(1), At(HDR), end_msg(0)], None),
    ("pop-at-root", "POP at depth 0", "pop-at-root", [HDR, At(POP), end_msg(0)], None),
    ("pop-below-root", "one POP more than DIRs", "pop-at-root", [HDR, dir_msg(b"d"), POP, At(POP), end_msg(1)], None),
    ("bad-mode-10000", "PERM 0o10000 (just above 0o7777)", "bad-mode", [HDR, At(perm_msg(0o10000)), f1, end_msg(1)], None),
    ("bad-mode-ffff", "PERM 0xffff", "bad-mode", [HDR, At(perm_msg(0xFFFF)), dir_msg(b"d"), POP, end_msg(1)], None),
    ("empty-name-file", "FILE with an empty name", "empty-name", [HDR, At(file_msg(b"", b"x")), end_msg(1)], None),
    ("empty-name-dir", "DIR with an empty name", "empty-name", [HDR, At(dir_msg(b"")), POP, end_msg(1)], None),
    ("empty-name-truncated", "empty name, then input ends: empty-name is checked first",
     "empty-name", [HDR, At(b"\x01\x00")], None),
    ("name-too-long", "FILE with a 256-byte name", "name-too-long", [HDR, At(file_msg(b"n" * 256, b"x")), end_msg(1)], None),
    ("name-too-long-dir", "DIR with a 256-byte name", "name-too-long", [HDR, At(dir_msg(b"n" * 256)), POP, end_msg(1)], None),
    ("name-too-long-no-nul", "256 name bytes then end of input: too long, not truncated",
     "name-too-long", [HDR, At(b"\x02" + b"n" * 256)], None),
    ("name-too-long-with-slash", "a 300-byte name holding '/': name-too-long is checked first",
     "name-too-long", [HDR, At(dir_msg(b"a/" * 150)), POP, end_msg(1)], None),
    ("slash-in-name", "FILE named 'a/b'", "slash-in-name", [HDR, At(file_msg(b"a/b", b"x")), end_msg(1)], None),
    ("slash-in-name-dir", "DIR named '../etc'", "slash-in-name", [HDR, At(dir_msg(b"../etc")), POP, end_msg(1)], None),
    ("slash-only-name", "FILE named '/'", "slash-in-name", [HDR, At(file_msg(b"/", b"x")), end_msg(1)], None),
    ("dot-name-dot", "DIR named '.'", "dot-name", [HDR, At(dir_msg(b".")), POP, end_msg(1)], None),
    ("dot-name-dotdot", "DIR named '..'", "dot-name", [HDR, At(dir_msg(b"..")), POP, end_msg(1)], None),
    ("dot-name-file", "FILE named '..' inside a directory", "dot-name",
     [HDR, dir_msg(b"d"), At(file_msg(b"..", b"x")), POP, end_msg(2)], None),
    ("noncanonical-file64", "FILE64 with size 5", "noncanonical-file64", [HDR, At(file64_msg(b"f", b"hello")), end_msg(1)], None),
    ("noncanonical-file64-max", "FILE64 with size 2^32-1 (fits FILE)", "noncanonical-file64",
     [HDR, At(file64_msg(b"f", b"", 0xFFFFFFFF)), end_msg(1)], None),
    ("duplicate-name-file-file", "two files named 'x'", "duplicate-name",
     [HDR, file_msg(b"x", b"1"), At(file_msg(b"x", b"2")), end_msg(2)], None),
    ("duplicate-name-dir-file", "a dir 'x' then a file 'x'", "duplicate-name",
     [HDR, dir_msg(b"x"), POP, At(file_msg(b"x", b"2")), end_msg(2)], None),
    ("duplicate-name-file-dir", "a file 'x' then a dir 'x'", "duplicate-name",
     [HDR, file_msg(b"x", b"1"), At(dir_msg(b"x")), POP, end_msg(2)], None),
    ("duplicate-name-dir-dir", "a dir 'x' twice (no merging)", "duplicate-name",
     [HDR, dir_msg(b"x"), POP, At(dir_msg(b"x")), POP, end_msg(2)], None),
    ("duplicate-name-nested", "a duplicate inside a subdirectory, after other entries", "duplicate-name",
     [HDR, dir_msg(b"d"), file_msg(b"a"), dir_msg(b"b"), POP, At(file_msg(b"a")), POP, end_msg(4)], None),
    ("duplicate-name-non-utf8", "two files named with bytes ff fe", "duplicate-name",
     [HDR, file_msg(b"\xff\xfe"), At(file_msg(b"\xff\xfe")), end_msg(2)], None),
    ("duplicate-before-truncated-data", "duplicate name with truncated data: duplicate-name is checked first",
     "duplicate-name", [HDR, f1, At(b"\x01f\x00\x09\x00\x00\x00ab")], None),
    ("too-deep", "1025 nested directories (default max depth 1024)", "too-deep",
     [HDR] + deep_dirs(1025) + [end_msg(1025)], None),
    ("too-deep-limit-2", "3 nested directories with max_depth 2", "too-deep",
     [HDR] + deep_dirs(3) + [end_msg(3)], {"max_depth": 2}),
    ("too-many-entries", "3 entries with max_entries 2", "too-many-entries",
     [HDR, dir_msg(b"a"), POP, file_msg(b"b"), At(file_msg(b"c")), end_msg(3)], {"max_entries": 2}),
    ("too-many-bytes", "7 + 4 file bytes with max_bytes 10", "too-many-bytes",
     [HDR, file_msg(b"a", b"1234567"), At(file_msg(b"b", b"1234")), end_msg(2)], {"max_bytes": 10}),
    ("too-many-bytes-before-truncated", "size past the end and over max_bytes: too-many-bytes is checked first",
     "too-many-bytes", [HDR, At(file_msg(b"a", b"", 0xFFFFFFFF))], {"max_bytes": 1 << 20}),
    ("too-much-space", "an empty dir, an empty file and a 1-byte file (a 4 KiB block each) with max_space 8192",
     "too-much-space", [HDR, dir_msg(b"a"), POP, file_msg(b"b"), At(file_msg(b"c", b"1")), end_msg(3)],
     {"max_space": 8192}),
]

# Invalid extended archives (header flag 1 unless the name says otherwise).
fl = hardlink_msg  # short names keep the table readable
T = time_msg(1, 0)
O = owner_msg(0, 0)
XA = xattr_msg(b"user.a", b"1")
XB = xattr_msg(b"user.b", b"2")
sl = symlink_msg(b"l", b"t")
fifo = special_msg(b"p", 1)
# XATTR records one byte above the bound: BIG_XATTRS with one more value byte in the last.
OVER = [xattr_msg(n, v) for n, v in BIG_XATTRS[:3]]
OVER_LAST = xattr_msg(b"user.3", b"\x03" * 65489)
assert sum(map(len, OVER)) + len(OVER_LAST) == MAX_XATTRS + 1

INVALID += [
    # Tags of the extended set in a core archive, and the reserved ones in an extended one.
    ("unknown-tag-linked-core", "LINKED (0x09) in an archive with flags 0", "unknown-tag",
     [HDR, At(LINKED), f1, end_msg(1)], None),
    ("unknown-tag-symlink-core", "SYMLINK (0x0a) in an archive with flags 0", "unknown-tag",
     [HDR, At(sl), end_msg(1)], None),
    ("unknown-tag-special-core", "SPECIAL (0x0c) after a PERM in an archive with flags 0", "unknown-tag",
     [HDR, perm_msg(0o600), At(fifo), end_msg(1)], None),
    ("unknown-tag-0d-extended", "reserved tag 0x0d in an extended archive", "unknown-tag",
     [XHDR, At(b"\x0d"), end_msg(0)], None),
    ("unknown-tag-0f-extended", "reserved tag 0x0f after a TIME in an extended archive", "unknown-tag",
     [XHDR, T, At(b"\x0f"), end_msg(0)], None),
    # Record order.
    ("record-order-perm-after-time", "PERM after TIME", "record-order", [XHDR, T, At(perm_msg(0o600)), f1, end_msg(1)], None),
    ("record-order-time-twice", "TIME twice", "record-order", [XHDR, T, At(T), f1, end_msg(1)], None),
    ("record-order-owner-after-xattr", "OWNER after XATTR", "record-order", [XHDR, XA, At(O), f1, end_msg(1)], None),
    ("record-order-xattr-after-linked", "XATTR after LINKED", "record-order", [XHDR, LINKED, At(XA), f1, end_msg(1)], None),
    ("record-order-linked-twice", "LINKED twice", "record-order", [XHDR, LINKED, At(LINKED), f1, end_msg(1)], None),
    ("record-order-xattr-same-name", "two XATTRs named user.a", "record-order", [XHDR, XA, At(XA), f1, end_msg(1)], None),
    ("record-order-xattr-descending", "XATTR user.b then user.a", "record-order", [XHDR, XB, At(XA), f1, end_msg(1)], None),
    ("record-order-xattr-prefix", "XATTR user.ab then user.a (a prefix is lower)", "record-order",
     [XHDR, xattr_msg(b"user.ab", b""), At(XA), f1, end_msg(1)], None),
    ("record-order-before-bad-time", "a second TIME with nanoseconds 10^9: record-order is checked first",
     "record-order", [XHDR, T, At(time_msg(1, 10**9)), f1, end_msg(1)], None),
    ("record-order-before-truncated", "PERM after TIME, cut after its tag: record-order is checked first",
     "record-order", [XHDR, T, At(b"\x05")], None),
    ("record-order-xattr-empty-after-xattr", "an XATTR with an empty name after another: record-order before bad-xattr",
     "record-order", [XHDR, XA, At(xattr_msg(b"", b"")), f1, end_msg(1)], None),
    # Record contents.
    ("bad-time-1e9", "TIME with nanoseconds 10^9", "bad-time", [XHDR, At(time_msg(0, 10**9)), f1, end_msg(1)], None),
    ("bad-time-ffffffff", "TIME with nanoseconds 0xffffffff on a directory", "bad-time",
     [XHDR, At(time_msg(-5, 0xFFFFFFFF)), dir_msg(b"d"), POP, end_msg(1)], None),
    ("bad-time-before-dangling", "a bad TIME followed by POP: bad-time is checked first", "bad-time",
     [XHDR, dir_msg(b"d"), At(time_msg(0, 10**9)), POP, end_msg(1)], None),
    ("bad-mode-extended", "PERM 0o10000 in an extended archive, before a TIME", "bad-mode",
     [XHDR, At(perm_msg(0o10000)), T, f1, end_msg(1)], None),
    ("bad-xattr-empty-name", "an XATTR with an empty name", "bad-xattr", [XHDR, At(xattr_msg(b"", b"v")), f1, end_msg(1)], None),
    ("bad-xattr-nul-in-name", "an XATTR name holding NUL", "bad-xattr",
     [XHDR, At(xattr_msg(b"user.\x00a", b"v")), f1, end_msg(1)], None),
    ("bad-xattr-before-truncated", "an XATTR with an empty name, then the input ends: bad-xattr is checked first",
     "bad-xattr", [XHDR, At(b"\x08\x00")], None),
    ("xattr-too-large-value", "an XATTR value of 65537 bytes", "xattr-too-large",
     [XHDR, At(xattr_msg(b"user.big", b"v" * 65537)), f1, end_msg(1)], None),
    ("xattr-too-large-before-truncated", "an XATTR announcing 0xffffffff value bytes, then the input ends: "
     "the size is checked before the value is awaited", "xattr-too-large",
     [XHDR, At(xattr_msg(b"user.big", b"", 0xFFFFFFFF))], None),
    ("xattr-too-large-total", "XATTR records of 262145 bytes in all (one above the bound): the last one fails",
     "xattr-too-large", [XHDR] + OVER + [At(OVER_LAST), f1, end_msg(1)], None),
    # Cut inside each record.
    ("truncated-in-time", "TIME with 5 of its 12 bytes", "truncated", [XHDR, At(time_msg(1, 2)[:6])], None),
    ("truncated-in-owner", "OWNER with 7 of its 8 bytes", "truncated", [XHDR, T, At(O[:8])], None),
    ("truncated-in-xattr-length", "XATTR tag only", "truncated", [XHDR, At(b"\x08")], None),
    ("truncated-in-xattr-name", "XATTR with 3 of its 6 name bytes", "truncated", [XHDR, At(XA[:5])], None),
    ("truncated-in-xattr-size", "XATTR with 2 of its 4 size bytes", "truncated", [XHDR, At(XA[:10])], None),
    ("truncated-in-xattr-value", "XATTR with none of its value", "truncated", [XHDR, XB, At(xattr_msg(b"user.c", b"")[:-4] + b"\x05\x00\x00\x00ab")], None),
    ("truncated-at-tag-after-linked", "input ends after LINKED", "truncated", [XHDR, LINKED, At(b"")], None),
    ("truncated-in-symlink-length", "SYMLINK with 1 of its 2 length bytes", "truncated", [XHDR, At(b"\x0al\x00\x01")], None),
    ("truncated-in-symlink-target", "SYMLINK with 3 of its 10 target bytes", "truncated",
     [XHDR, At(b"\x0al\x00\x0a\x00abc")], None),
    ("truncated-in-symlink-target-nul", "SYMLINK target holding NUL, cut: truncated is checked before the NUL",
     "truncated", [XHDR, At(b"\x0al\x00\x0a\x00a\x00c")], None),
    ("truncated-in-hardlink-index", "HARDLINK with 7 of its 8 index bytes", "truncated",
     [XHDR, file_msg(b"f"), At(fl(b"h", 0)[:-1])], None),
    ("truncated-in-special", "SPECIAL with its type and 4 of its 8 device bytes", "truncated",
     [XHDR, At(special_msg(b"c", 2, 1, 3)[:-4])], None),
    ("truncated-in-symlink-name", "input ends inside a SYMLINK's name after TIME", "truncated",
     [XHDR, T, At(b"\x0ana")], None),
    # Records and entries.
    ("dangling-perm-time-pop", "TIME followed by POP", "dangling-perm", [XHDR, dir_msg(b"d"), T, At(POP), end_msg(1)], None),
    ("dangling-perm-linked-end", "LINKED followed by END", "dangling-perm", [XHDR, LINKED, At(end_msg(0))], None),
    ("misplaced-perm-symlink", "PERM on a SYMLINK", "misplaced-record", [XHDR, perm_msg(0o600), At(sl), end_msg(1)], None),
    ("misplaced-perm-symlink-bad-name", "PERM on a SYMLINK with an empty name: misplaced-record is checked first",
     "misplaced-record", [XHDR, perm_msg(0o600), At(symlink_msg(b"", b"t")), end_msg(1)], None),
    ("misplaced-linked-dir", "LINKED on a DIR", "misplaced-record", [XHDR, LINKED, At(dir_msg(b"d")), POP, end_msg(1)], None),
    ("misplaced-linked-symlink", "TIME and LINKED on a SYMLINK", "misplaced-record", [XHDR, T, LINKED, At(sl), end_msg(1)], None),
    ("misplaced-linked-special", "LINKED on a fifo", "misplaced-record", [XHDR, LINKED, At(fifo), end_msg(1)], None),
    ("misplaced-time-hardlink", "TIME on a HARDLINK", "misplaced-record",
     [XHDR, LINKED, file_msg(b"f"), T, At(fl(b"h", 0)), end_msg(2)], None),
    ("misplaced-xattr-hardlink", "an XATTR on a HARDLINK", "misplaced-record",
     [XHDR, LINKED, file_msg(b"f"), XA, At(fl(b"h", 0)), end_msg(2)], None),
    ("misplaced-perm-hardlink", "PERM on a HARDLINK to a missing entry: misplaced-record is checked before bad-link",
     "misplaced-record", [XHDR, perm_msg(0o600), At(fl(b"h", 7)), end_msg(1)], None),
    # Symlinks.
    ("bad-symlink-empty", "a SYMLINK with an empty target", "bad-symlink", [XHDR, At(symlink_msg(b"l", b"")), end_msg(1)], None),
    ("bad-symlink-4096", "a SYMLINK target of 4096 bytes", "bad-symlink",
     [XHDR, At(symlink_msg(b"l", b"t" * 4096)), end_msg(1)], None),
    ("bad-symlink-length-before-truncated", "a SYMLINK announcing 65535 bytes, then the input ends: "
     "bad-symlink is checked first", "bad-symlink", [XHDR, At(b"\x0al\x00\xff\xff")], None),
    ("bad-symlink-nul", "a SYMLINK target holding NUL", "bad-symlink", [XHDR, At(symlink_msg(b"l", b"a\x00b")), end_msg(1)], None),
    ("bad-symlink-before-duplicate", "a SYMLINK named like an earlier file with an empty target: bad-symlink first",
     "bad-symlink", [XHDR, file_msg(b"l"), At(symlink_msg(b"l", b"")), end_msg(2)], None),
    ("empty-name-symlink", "a SYMLINK with an empty name", "empty-name", [XHDR, At(symlink_msg(b"", b"t")), end_msg(1)], None),
    ("slash-in-name-hardlink", "a HARDLINK named 'a/b'", "slash-in-name",
     [XHDR, LINKED, file_msg(b"f"), At(fl(b"a/b", 0)), end_msg(2)], None),
    ("dot-name-special", "a SPECIAL named '..'", "dot-name", [XHDR, At(special_msg(b"..", 1)), end_msg(1)], None),
    ("duplicate-name-symlink", "a SYMLINK named like an earlier file", "duplicate-name",
     [XHDR, file_msg(b"l"), At(sl), end_msg(2)], None),
    ("duplicate-name-hardlink", "a HARDLINK named like the file it links to", "duplicate-name",
     [XHDR, LINKED, file_msg(b"f"), At(fl(b"f", 0)), end_msg(2)], None),
    ("duplicate-name-special-dir", "a SPECIAL named like an earlier directory", "duplicate-name",
     [XHDR, dir_msg(b"p"), POP, At(fifo), end_msg(2)], None),
    # Hard links.
    ("bad-link-later", "a HARDLINK to a later entry", "bad-link",
     [XHDR, At(fl(b"a", 1)), LINKED, file_msg(b"b"), end_msg(2)], None),
    ("bad-link-self", "a HARDLINK to its own entry number", "bad-link",
     [XHDR, LINKED, file_msg(b"f"), At(fl(b"h", 1)), end_msg(2)], None),
    ("bad-link-dir", "a HARDLINK to a directory", "bad-link", [XHDR, dir_msg(b"d"), POP, At(fl(b"h", 0)), end_msg(2)], None),
    ("bad-link-not-linked", "a HARDLINK to a file without LINKED", "bad-link",
     [XHDR, file_msg(b"f"), At(fl(b"h", 0)), end_msg(2)], None),
    ("bad-link-symlink", "a HARDLINK to a symlink", "bad-link", [XHDR, sl, At(fl(b"h", 0)), end_msg(2)], None),
    ("bad-link-special", "a HARDLINK to a fifo", "bad-link", [XHDR, fifo, At(fl(b"h", 0)), end_msg(2)], None),
    ("bad-link-hardlink", "a HARDLINK to another HARDLINK", "bad-link",
     [XHDR, LINKED, file_msg(b"f"), fl(b"g", 0), At(fl(b"h", 1)), end_msg(3)], None),
    ("bad-link-max-index", "a HARDLINK to entry 2^64-1", "bad-link",
     [XHDR, LINKED, file_msg(b"f"), At(fl(b"h", 2**64 - 1)), end_msg(2)], None),
    ("bad-link-before-duplicate", "a HARDLINK named like an earlier entry, to nothing: bad-link is checked first",
     "bad-link", [XHDR, file_msg(b"f"), At(fl(b"f", 0)), end_msg(2)], None),
    # Special files.
    ("bad-special-type-0", "SPECIAL type 0", "bad-special", [XHDR, At(special_msg(b"s", 0)), end_msg(1)], None),
    ("bad-special-type-4", "SPECIAL type 4", "bad-special", [XHDR, At(special_msg(b"s", 4, 1, 1)), end_msg(1)], None),
    ("bad-special-fifo-major", "a fifo with major 1", "bad-special", [XHDR, At(special_msg(b"p", 1, 1, 0)), end_msg(1)], None),
    ("bad-special-fifo-minor", "a fifo with minor 1", "bad-special", [XHDR, At(special_msg(b"p", 1, 0, 1)), end_msg(1)], None),
    ("bad-special-before-duplicate", "a SPECIAL of type 9 named like an earlier file: bad-special first",
     "bad-special", [XHDR, file_msg(b"s"), At(special_msg(b"s", 9)), end_msg(2)], None),
    # Counts and limits over the new entries.
    ("count-mismatch-extended", "END count 2 for a file, a symlink and a hard link", "count-mismatch",
     [XHDR, LINKED, file_msg(b"f"), fl(b"h", 0), sl, At(end_msg(2))], None),
    ("too-many-entries-symlink", "a file and a symlink with max_entries 1", "too-many-entries",
     [XHDR, file_msg(b"f"), At(sl), end_msg(2)], {"max_entries": 1}),
    ("too-deep-after-records", "a DIR with TIME beyond max_depth 1: the offset is the DIR's", "too-deep",
     [XHDR, dir_msg(b"d"), T, At(dir_msg(b"e")), POP, POP, end_msg(2)], {"max_depth": 1}),
]

# ------------------------------------------------------------------ output --


def dump_json(obj):
    """Stable JSON: one entry per line so large vectors stay diffable."""
    lines = ["{"]
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "entries" and value:
            lines.append('  "entries": [')
            for j, entry in enumerate(value):
                tail = "," if j < len(value) - 1 else ""
                lines.append("    " + json.dumps(entry, ensure_ascii=False) + tail)
            lines.append("  ]" + comma)
        else:
            lines.append("  %s: %s%s" % (json.dumps(key), json.dumps(value, ensure_ascii=False), comma))
    lines.append("}")
    return ("\n".join(lines) + "\n").encode("utf-8")


def build():
    """Return {relative path: bytes} for every generated file."""
    files = {}
    names = set()
    for name, description, ops, *flags in VALID + EXTENDED:
        assert name not in names
        names.add(name)
        extended = flags == ["extended"]
        files["valid/%s.barge" % name] = encode_ops(ops, extended)
        meta = {"description": description}
        if extended:
            meta["extended"] = True
        meta["entries"] = expected_entries(ops, extended)
        files["valid/%s.json" % name] = dump_json(meta)
    for name, description, error, parts, options in INVALID:
        assert name not in names
        names.add(name)
        data, offset = invalid(parts)
        files["invalid/%s.barge" % name] = data
        meta = {"description": description, "error": error, "offset": offset}
        if options:
            meta["options"] = options
        files["invalid/%s.json" % name] = dump_json(meta)
    return files


def existing(root=HERE):
    found = {}
    for sub in ("valid", "invalid"):
        folder = os.path.join(root, sub)
        if os.path.isdir(folder):
            for entry in sorted(os.listdir(folder)):
                with open(os.path.join(folder, entry), "rb") as fh:
                    found["%s/%s" % (sub, entry)] = fh.read()
    return found


def write_or_check(argv, want, root, usage, counts):
    """Writes the files `want` under `root` (removing others), or with --check says which
    committed files differ; `counts` is (valid, invalid) for the summary."""
    if argv not in ([], ["--check"]):
        sys.stderr.write("usage: %s [--check]\n" % usage)
        return 2
    have = existing(root)
    if argv == ["--check"]:
        bad = sorted(p for p in set(want) | set(have) if want.get(p) != have.get(p))
        for path in bad:
            state = "missing" if path not in have else "unexpected" if path not in want else "differs"
            print("%s: %s" % (path, state))
        print("%d files checked, %d differ" % (len(want), len(bad)))
        return 1 if bad else 0
    for path in sorted(set(have) - set(want)):
        os.remove(os.path.join(root, path))
    for path, data in sorted(want.items()):
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(data)
    print("wrote %d files (%d valid, %d invalid vectors)" % ((len(want),) + counts))
    return 0


def main(argv):
    counts = (len(VALID) + len(EXTENDED), len(INVALID))
    return write_or_check(argv, build(), HERE, "generate.py", counts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
