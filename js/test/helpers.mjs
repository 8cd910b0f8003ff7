// Shared test helpers: vectors, stream collection, and on-disk trees.
import { execFileSync, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { unpack } from "../dist/index.js";

export const VECTORS = fileURLToPath(new URL("../../testdata/vectors/", import.meta.url));

/**
 * Every vector of a kind ("valid" or "invalid"): { name, bytes, meta }. TIME
 * seconds beyond ±2^53 are read exactly, as bigints (the decoder's form).
 */
export function loadVectors(kind) {
  const dir = join(VECTORS, kind);
  const names = readdirSync(dir).filter((f) => f.endsWith(".barge")).map((f) => f.slice(0, -6)).sort();
  if (!names.length) throw new Error(`no vectors in ${dir}`);
  return names.map((name) => {
    const text = readFileSync(join(dir, `${name}.json`), "utf8").replace(/("sec"\s*:\s*)(-?\d{16,})/g, '$1"$2"');
    const meta = JSON.parse(text, (k, v) => (k === "sec" && typeof v === "string" ? exactSec(BigInt(v)) : v));
    return { name, bytes: new Uint8Array(readFileSync(join(dir, `${name}.barge`))), meta };
  });
}

/** Seconds as the decoder gives them: a number when exact, else the bigint. */
const exactSec = (big) => (Number.isSafeInteger(Number(big)) ? Number(big) : big);

export const hex = (bytes) => Buffer.from(bytes).toString("hex");
export const unhex = (s) => new Uint8Array(Buffer.from(s, "hex"));

/** Concatenates everything a ReadableStream (or async iterable) produces. */
export async function collect(stream) {
  const parts = [];
  for await (const c of stream) parts.push(c);
  return new Uint8Array(Buffer.concat(parts));
}

/**
 * Decodes an archive fully into vector-style entries (testdata/vectors/README.md:
 * data, names, values and targets as hex), checking on the way that the entry
 * numbers, hard-link paths and millisecond times agree with the rest.
 */
export async function decodeAll(input, options) {
  const out = [];
  for await (const e of unpack(input, options)) {
    if (e.index !== out.length) throw new Error(`entry ${out.length} has index ${e.index}`);
    const entry = { path_hex: hex(e.pathBytes), kind: e.kind };
    if (e.mode !== undefined) entry.mode = e.mode;
    if (e.perm !== undefined) entry.perm = e.perm;
    if (e.mtime) {
      entry.mtime = e.mtime;
      if (e.mtimeMs !== Number(e.mtime.sec) * 1000 + Math.floor(e.mtime.nsec / 1e6)) throw new Error(`mtimeMs ${e.mtimeMs} of ${entry.path_hex}`);
    }
    if (e.owner) entry.owner = owner(e.owner);
    if (e.xattrs) entry.xattrs = e.xattrs.map((x) => ({ name_hex: hex(x.nameBytes), value_hex: hex(x.value) }));
    if (e.linked) entry.linked = true;
    if (e.kind === "symlink") entry.target_hex = hex(e.targetBytes);
    if (e.kind === "hardlink") {
      entry.link_index = e.linkIndex;
      if (hex(e.linkPathBytes) !== out[e.linkIndex]?.path_hex) throw new Error(`hard link ${entry.path_hex} names ${hex(e.linkPathBytes)}`);
    }
    if (e.device) Object.assign(entry, e.device);
    if (e.extentCount !== undefined) {
      // A version 2 EXTFILE: its size and extents, as the vectors list them.
      entry.size = e.size;
      entry.extents = [];
      for await (const x of e.extents()) entry.extents.push({ at: x.at, data_hex: hex(await x.bytes()) });
      if (entry.extents.length !== e.extentCount) throw new Error(`${entry.path_hex}: ${entry.extents.length} extents of ${e.extentCount}`);
    } else if (e.kind === "file") entry.data_hex = hex(await e.bytes());
    out.push(entry);
  }
  return out;
}

/** A decoded owner in vector form: ids, and the names (version 2) in hex when there are any. */
export function owner(o) {
  return { uid: o.uid, gid: o.gid, ...(o.userBytes && { user_hex: hex(o.userBytes) }), ...(o.groupBytes && { group_hex: hex(o.groupBytes) }) };
}

/** A decoded root (version 2's ROOT, given to `onRoot`) in vector form. */
export function rootOf(r) {
  const out = { mode: r.mode };
  if (r.perm !== undefined) out.perm = r.perm;
  if (r.mtime) out.mtime = r.mtime;
  if (r.owner) out.owner = owner(r.owner);
  if (r.xattrs) out.xattrs = r.xattrs.map((x) => ({ name_hex: hex(x.nameBytes), value_hex: hex(x.value) }));
  return out;
}

/**
 * The `pack` input that gives a vector's archive: its entries in vector form
 * (decodeAll's), the raw PERM (if any) as the mode, hard links by the path of
 * the entry they name.
 */
export function vectorEntries(entries) {
  return entries.map((e) => {
    const path = unhex(e.path_hex);
    if (e.kind === "hardlink") return { path, link: unhex(entries[e.link_index].path_hex) };
    const meta = { path };
    if (e.mtime) meta.mtime = e.mtime;
    if (e.owner) meta.owner = { uid: e.owner.uid, gid: e.owner.gid, user: unhex(e.owner.user_hex ?? ""), group: unhex(e.owner.group_hex ?? "") };
    if (e.xattrs) meta.xattrs = e.xattrs.map((x) => ({ name: unhex(x.name_hex), value: unhex(x.value_hex) }));
    if (e.kind === "symlink") return { ...meta, symlink: unhex(e.target_hex) };
    meta.mode = e.perm ?? e.mode;
    if (e.kind === "dir") return { ...meta, dir: true };
    if (e.extents) {
      // A v2 EXTFILE: the whole content (zeros but in the extents), made as it is read.
      const extents = e.extents.map((x) => ({ at: x.at, data: unhex(x.data_hex) }));
      const stream = () => sparseContent(e.size, extents);
      return { ...meta, size: e.size, stream, linked: e.linked, extents: extents.map((x) => ({ at: x.at, length: x.data.length })) };
    }
    if (e.kind === "file") return { ...meta, data: unhex(e.data_hex), linked: e.linked };
    return { ...meta, special: e.kind, major: e.major, minor: e.minor };
  });
}

/** A file of `size` bytes, zeros but the extents ([{ at, data }]), in chunks of at most 1 MiB. */
export async function* sparseContent(size, extents) {
  for (let pos = 0; pos < size; ) {
    const chunk = new Uint8Array(Math.min(size - pos, 1 << 20));
    for (const { at, data } of extents) {
      const from = Math.max(at, pos), to = Math.min(at + data.length, pos + chunk.length);
      if (from < to) chunk.set(data.subarray(from - at, to - at), from - pos);
    }
    yield chunk;
    pos += chunk.length;
  }
}

/** Little-endian bytes of an integer (number or bigint; negative in two's complement). */
export function le(v, n) {
  let b = BigInt.asUintN(n * 8, BigInt(v));
  return Array.from({ length: n }, () => {
    const byte = Number(b & 255n);
    b >>= 8n;
    return byte;
  });
}

const utf8 = new TextEncoder();
const raw = (s) => [...(typeof s === "string" ? utf8.encode(s) : s)];
const named = (tag, name) => [tag, ...raw(name), 0];

/**
 * Archive bytes by hand, straight from docs/FORMAT.md's grammar, for what the
 * vectors do not cover: `archive(flags, ...messages)` puts the header first.
 */
export const msg = {
  file: (name, data = "") => [...named(1, name), ...le(raw(data).length, 4), ...raw(data)],
  dir: (name) => named(2, name),
  pop: [3],
  perm: (mode) => [5, ...le(mode, 2)],
  time: (sec, nsec) => [6, ...le(sec, 8), ...le(nsec, 4)],
  owner: (uid, gid) => [7, ...le(uid, 4), ...le(gid, 4)],
  xattr: (name, value = "", size = raw(value).length) => [8, raw(name).length, ...raw(name), ...le(size, 4), ...raw(value)],
  linked: [9],
  symlink: (name, target, len = raw(target).length) => [...named(10, name), ...le(len, 2), ...raw(target)],
  hardlink: (name, index) => [...named(11, name), ...le(index, 8)],
  special: (name, type, major = 0, minor = 0) => [...named(12, name), type, ...le(major, 4), ...le(minor, 4)],
  end: (count) => [0, ...le(count, 8)],
};
export const archive = (flags, ...messages) => new Uint8Array([66, 65, 82, 71, 69, 0, 1, flags, ...messages.flat()]);

/** A ReadableStream giving `bytes` in chunks of `size` bytes. */
export function chunked(bytes, size) {
  let pos = 0;
  return new ReadableStream({
    pull(ctl) {
      if (pos >= bytes.length) return ctl.close();
      ctl.enqueue(bytes.slice(pos, (pos += size)));
    },
  });
}

/** A small deterministic PRNG (mulberry32). */
export function rng(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * Writes a tree described as [{ path: string|Buffer, dir?, data?, mode?, symlink?,
 * link?, fifo?, device?: [type, major, minor], mtime?: { sec, nsec } }] under root
 * (parents first; `link` names an earlier file of the spec). Paths may be Buffers
 * for non-UTF-8 names (not with `fifo`, `device` or `mtime`, which go through commands).
 */
export function writeTree(root, spec) {
  mkdirSync(root, { recursive: true });
  const at = (path) => Buffer.concat([Buffer.from(root + "/"), Buffer.from(path)]);
  for (const e of spec) {
    const p = at(e.path);
    if (e.dir) mkdirSync(p);
    else if (e.symlink !== undefined) symlinkSync(Buffer.from(e.symlink), p);
    else if (e.link !== undefined) linkSync(at(e.link), p);
    else if (e.fifo) execFileSync("mkfifo", [p.toString()]);
    else if (e.device) execFileSync("mknod", [p.toString(), e.device[0] === "char" ? "c" : "b", String(e.device[1]), String(e.device[2])]);
    else writeFileSync(p, e.data ?? "");
  }
  // Modes, then times, last and children first (so that restrictive dirs do not
  // block their own children and creating children does not change a dir's time);
  // modes always, so that the process umask does not matter.
  const last = [...spec].reverse();
  for (const e of last) if (e.symlink === undefined && e.link === undefined) chmodSync(at(e.path), modeOf(e));
  for (const e of last) if (e.mtime && e.link === undefined) execFileSync("touch", ["-h", "-m", "-d", `@${decimal(e.mtime)}`, at(e.path).toString()]);
}

/** A time as exact decimal seconds, e.g. { sec: -1, nsec: 5e8 } as "-0.500000000" (Node's utimes takes doubles). */
function decimal({ sec, nsec }) {
  const ns = BigInt(sec) * 1000000000n + BigInt(nsec);
  const abs = ns < 0n ? -ns : ns;
  return `${ns < 0n ? "-" : ""}${abs / 1000000000n}.${String(abs % 1000000000n).padStart(9, "0")}`;
}

/** A spec entry's mode: given or the default. */
const modeOf = (e) => e.mode ?? (e.dir ? 0o755 : 0o644);

/** The kind readTree() reports for an lstat result. */
function kindOf(st) {
  for (const [kind, is] of Object.entries({ dir: "isDirectory", file: "isFile", symlink: "isSymbolicLink", fifo: "isFIFO", char: "isCharacterDevice", block: "isBlockDevice" })) {
    if (st[is]()) return kind;
  }
  return "other";
}

/** Sorts tree listings by path bytes. */
const byPath = (a, b) => (a.path_hex < b.path_hex ? -1 : 1);

/** Gives the members of each hard-link group the group's first path as `link`. */
function markLinks(entries, groupOf) {
  const groups = new Map();
  for (const e of entries) {
    const g = groupOf(e);
    if (g !== undefined) groups.set(g, [...(groups.get(g) ?? []), e]);
  }
  for (const members of groups.values()) {
    if (members.length > 1) for (const e of members) e.link = members.map((m) => m.path_hex).sort()[0];
  }
  return entries;
}

/**
 * Reads a tree into a sorted list of { path_hex, kind, mode (12 bits; not for
 * symlinks), sha (files), target_hex (symlinks), link (files with other links in
 * the tree: the group's first path), major/minor (devices), mtime (with
 * `times`: { sec, nsec } to the nanosecond) }.
 */
export function readTree(root, { times = false } = {}) {
  const out = [];
  const inodes = new Map();
  const walk = (abs, rel) => {
    for (const name of readdirSync(abs, { encoding: "buffer" })) {
      const a = Buffer.concat([abs, Buffer.from("/"), name]);
      const r = rel ? Buffer.concat([rel, Buffer.from("/"), name]) : name;
      const st = lstatSync(a, { bigint: true });
      const entry = { path_hex: r.toString("hex"), kind: kindOf(st) };
      if (entry.kind !== "symlink") entry.mode = Number(st.mode & 0o7777n);
      if (entry.kind === "file") entry.sha = createHash("sha256").update(readFileSync(a)).digest("hex");
      if (entry.kind === "symlink") entry.target_hex = readlinkSync(a, { encoding: "buffer" }).toString("hex");
      if (entry.kind === "char" || entry.kind === "block") Object.assign(entry, deviceOf(st.rdev));
      if (times) entry.mtime = timeOf(st.mtimeNs);
      if (entry.kind === "file" && st.nlink > 1n) inodes.set(entry, st.ino);
      out.push(entry);
      if (st.isDirectory()) walk(a, r);
    }
  };
  walk(Buffer.from(root), null);
  return markLinks(out, (e) => inodes.get(e)).sort(byPath);
}

/** Nanoseconds since the epoch as { sec, nsec } (seconds rounded down, also before 1970). */
export function timeOf(ns) {
  const nsec = ((ns % 1000000000n) + 1000000000n) % 1000000000n;
  return { sec: Number((ns - nsec) / 1000000000n), nsec: Number(nsec) };
}

/** Linux's major and minor numbers of a dev_t. */
const deviceOf = (rdev) => ({
  major: Number(((rdev >> 8n) & 0xfffn) | ((rdev >> 32n) & ~0xfffn)),
  minor: Number((rdev & 0xffn) | ((rdev >> 12n) & ~0xffn)),
});

/**
 * A tree as barge lands it from an archive without owners (the JS packer's): no
 * setuid or setgid bit, as the set-id rule of docs/SECURITY.md says.
 */
export const withoutSetId = (tree) => tree.map((e) => (e.mode === undefined ? e : { ...e, mode: e.mode & ~0o6000 }));

/** The readTree() listing a spec should produce (with `times`, its mtimes). */
export function expectedTree(spec, { times = false } = {}) {
  const byKey = new Map(spec.map((e) => [hex(Buffer.from(e.path)), e]));
  const entries = spec.map((e) => {
    const path_hex = hex(Buffer.from(e.path));
    const s = e.link === undefined ? e : byKey.get(hex(Buffer.from(e.link)));
    const kind = s.dir ? "dir" : s.symlink !== undefined ? "symlink" : s.fifo ? "fifo" : s.device ? s.device[0] : "file";
    const entry = { path_hex, kind };
    if (kind !== "symlink") entry.mode = modeOf(s);
    if (kind === "file") entry.sha = createHash("sha256").update(s.data ?? "").digest("hex");
    if (kind === "symlink") entry.target_hex = hex(Buffer.from(s.symlink));
    if (s.device) Object.assign(entry, { major: s.device[1], minor: s.device[2] });
    if (times && s.mtime) entry.mtime = s.mtime;
    return entry;
  });
  const group = new Map(spec.map((e) => [hex(Buffer.from(e.path)), e.link === undefined ? undefined : hex(Buffer.from(e.link))]));
  const linked = new Set(group.values());
  return markLinks(entries, (e) => group.get(e.path_hex) ?? (linked.has(e.path_hex) ? e.path_hex : undefined)).sort(byPath);
}

/**
 * JS-decodes an archive into the readTree() listing of the tree it lands as
 * (hard links as files of their group, with `times` the recorded mtimes).
 */
export async function decodeTree(input, { times = false } = {}) {
  const out = [];
  const group = new Map();
  for await (const e of unpack(input)) {
    let entry = { path_hex: hex(e.pathBytes), kind: e.kind };
    if (e.kind === "hardlink") {
      entry = { ...out[e.linkIndex], path_hex: entry.path_hex };
      group.set(entry, e.linkIndex);
    } else {
      if (e.mode !== undefined) entry.mode = e.mode;
      if (e.kind === "file") entry.sha = createHash("sha256").update(await e.bytes()).digest("hex");
      if (e.kind === "symlink") entry.target_hex = hex(e.targetBytes);
      if (e.device) Object.assign(entry, e.device);
      if (times && e.mtime) entry.mtime = { sec: Number(e.mtime.sec), nsec: e.mtime.nsec };
      if (e.linked) group.set(entry, e.index);
    }
    out.push(entry);
  }
  return markLinks(out, (e) => group.get(e)).sort(byPath);
}

/** Entries for `pack` from a tree spec (what fromPath would give, without the disk). */
export function specEntries(spec) {
  return spec.map((e) => {
    const path = new Uint8Array(Buffer.from(e.path));
    if (e.link !== undefined) return { path, link: new Uint8Array(Buffer.from(e.link)) };
    const meta = { path, mtime: e.mtime };
    if (e.symlink !== undefined) return { ...meta, symlink: new Uint8Array(Buffer.from(e.symlink)) };
    if (e.dir) return { ...meta, dir: true, mode: e.mode };
    if (e.fifo) return { ...meta, special: "fifo", mode: e.mode };
    return { ...meta, data: new Uint8Array(Buffer.from(e.data ?? "")), mode: e.mode };
  });
}

/**
 * A tree with the awkward cases: non-UTF-8, newline and control characters,
 * 255-byte names, multi-byte UTF-8, empty files and dirs, modes, and `files`
 * small files spread over nested directories.
 */
export function oddTree(files = 0) {
  const random = rng(42);
  const spec = [
    { path: "empty-dir", dir: true },
    { path: "empty-dir/nested-empty", dir: true },
    { path: "bin", dir: true },
    { path: "bin/run.sh", data: "#!/bin/sh\necho hi\n", mode: 0o755 },
    { path: "private", dir: true, mode: 0o700 },
    { path: "private/secret", data: "s3cret", mode: 0o600 },
    { path: Buffer.from([0xff, 0xfe, 0x41]), data: "not utf-8" },
    { path: Buffer.from("caf\xe9-latin1", "latin1"), dir: true },
    { path: Buffer.concat([Buffer.from("caf\xe9-latin1", "latin1"), Buffer.from("/x")]), data: "x" },
    { path: "line\nbreak\ttab\r\x01\x1b\x7f", data: "control" },
    { path: "n".repeat(255), data: "long name" },
    { path: "日".repeat(85), dir: true },
    { path: "日".repeat(85) + "/🦀.rs", data: "fn main() {}\n" },
    { path: " leading space", data: "" },
    { path: "-dash", data: "" },
    { path: ".hidden", data: "h" },
    { path: "...", data: "dots" },
    { path: "empty-file", data: "" },
    { path: "binary.bin", data: Buffer.from(Array.from({ length: 200000 }, (_, i) => (i * 7919) & 255)) },
  ];
  if (files) {
    spec.push({ path: "many", dir: true });
    const dirs = 100;
    for (let d = 0; d < dirs; d++) spec.push({ path: `many/d${d}`, dir: true });
    for (let i = 0; i < files; i++) {
      const size = Math.floor(random() * 64);
      spec.push({ path: `many/d${i % dirs}/f${i}`, data: Buffer.from(Array.from({ length: size }, () => Math.floor(random() * 256))) });
    }
  }
  return spec;
}

/**
 * A tree with every kind `fromPath` and the JS encoder record, with mtimes (to the
 * nanosecond, before and after 1970): symlinks (relative, absolute, dangling, to a
 * directory, non-UTF-8 target), a hard-link group of three across directories
 * (first in archive order is not the first in the spec), a fifo, setuid and
 * sticky modes, a directory without write permission.
 */
export function kindTree() {
  const t = (sec, nsec = 0) => ({ sec, nsec });
  return [
    { path: "dir", dir: true, mtime: t(1700000000, 123456789) },
    { path: "dir/file", data: "content", mtime: t(1600000000, 5) },
    { path: "dir/setuid", data: "#!/bin/sh\n", mode: 0o4755, mtime: t(1, 999999999) },
    { path: "sticky", dir: true, mode: 0o1777, mtime: t(-1, 500000000) },
    { path: "sticky/old", data: "1960", mtime: t(-315619200, 250000000) },
    { path: "readonly", dir: true, mode: 0o555, mtime: t(1234567890) },
    { path: "readonly/inside", data: "in a 0o555 dir", mode: 0o444, mtime: t(1234567890, 1) },
    { path: "links", dir: true },
    { path: "links/relative", symlink: "../dir/file", mtime: t(1500000000, 42) },
    { path: "links/absolute", symlink: "/etc/hostname" },
    { path: "links/dangling", symlink: "does/not/exist", mtime: t(0, 0) },
    { path: "links/to-dir", symlink: "../dir" },
    { path: "links/odd-target", symlink: Buffer.from([0xff, 0x2f, 0x41, 0x0a]) },
    { path: "z-group", data: "shared by three names", mode: 0o640, mtime: t(1650000000, 777) },
    { path: "dir/hard-1", link: "z-group" },
    { path: "links/hard-2", link: "z-group" },
    { path: "pipe", fifo: true, mode: 0o600, mtime: t(1400000000, 9) },
  ];
}

/**
 * Runs a command; resolves { code, stdout (Buffer), stderr (string) }. `input`
 * may be a Buffer or a ReadableStream piped to stdin. The process gets umask 022.
 */
export function run(cmd, args, { input, timeout = 120000 } = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn("/bin/sh", ["-c", 'umask 022 && exec "$0" "$@"', cmd, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    const out = [];
    let err = "";
    const timer = setTimeout(() => child.kill("SIGKILL"), timeout);
    child.stdout.on("data", (c) => out.push(c));
    child.stderr.on("data", (c) => (err += c));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      resolve({ code: signal ? `signal ${signal}` : code, stdout: Buffer.concat(out), stderr: err });
    });
    child.stdin.on("error", () => {}); // the child may exit before reading everything
    if (input instanceof ReadableStream) {
      (async () => {
        try {
          for await (const c of input) if (!child.stdin.write(c)) await new Promise((r) => child.stdin.once("drain", r));
        } finally {
          child.stdin.end();
        }
      })().catch(reject);
    } else child.stdin.end(input ?? undefined);
  });
}

/**
 * What a barge binary does of issue 14's extended records: its unpack reads an
 * archive with header flags 1 (`reads`) and lands a symlink and a file's mtime
 * from one (`lands`), its pack writes one (`writes`); and whether it reads format 2 (`readsV2`).
 */
export async function bargeSupport(barge) {
  const tmp = mkdtempSync(join(tmpdir(), "barge-probe-"));
  try {
    const dest = join(tmp, "dest");
    const input = archive(1, msg.time(1234, 5678), msg.file("f", "x"), msg.symlink("l", "f"), msg.end(2));
    const unpacked = await run(barge, ["unpack", "-", dest], { input });
    const landed = unpacked.code === 0 && readTree(dest, { times: true });
    writeTree(join(tmp, "src"), [{ path: "f", data: "" }]);
    const packed = await run(barge, ["pack", join(tmp, "src"), "-o", "-"]);
    const v2 = await run(barge, ["unpack", "-", join(tmp, "dest2")], { input: readFileSync(join(VECTORS, "v2/valid/file.barge")) });
    return {
      readsV2: v2.code === 0,
      reads: unpacked.code === 0,
      lands: !!landed && landed[0].mtime.nsec === 5678 && landed[1].kind === "symlink",
      writes: packed.code === 0 && packed.stdout[7] === 1,
    };
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

/**
 * The error codes users are told of: the first column of README.md's "Errors" table, and the
 * codes of docs/FORMAT.md's table (what `unpack` and barge report for an invalid archive).
 */
export function documentedCodes() {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const errors = readme.slice(readme.indexOf("\n## Errors\n")).split("\n## ")[1];
  const codes = errors
    .split("\n")
    .filter((l) => l.startsWith("| `"))
    .flatMap((l) => [...l.split(" | ")[0].matchAll(/`([a-z0-9-]+)`/g)].map((m) => m[1]));
  const spec = readFileSync(new URL("../../docs/FORMAT.md", import.meta.url), "utf8");
  return new Set([...codes, ...[...spec.matchAll(/^\| `([a-z0-9-]+)` \|/gm)].map((m) => m[1])]);
}
