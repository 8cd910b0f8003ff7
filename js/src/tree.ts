/**
 * What both encoders (pack.ts: format v1, pack2.ts: format v2) share: the tree of the
 * entries, validated (build), its records, and its archive order (walk, which pack.ts
 * inlines). Kept small: it is part of what a web page ships. Internal fields have one-letter
 * names for the same reason.
 */
import { BargeError } from "./error.js";
import { read } from "./source.js";
import type { ArchivePath, Entry, FileEntry, Owner, SpecialEntry, Timestamp } from "./types.js";

/** A node of the tree being packed. */
export interface Node {
  /** name bytes */
  n: Uint8Array;
  /** sort/lookup key: the name bytes as a latin-1 string, so `<` orders by bytes */
  k: string;
  /** tag: 1 file, 2 dir, 10 symlink, 11 hard link, 12 special file */
  t: number;
  /** children (directories only) */
  c?: Map<string, Node>;
  /** the entry (absent for implicit directories) */
  e?: Entry;
  /** file data given as bytes; the fields of a symlink (length, target) or special file (type, major, minor) */
  d?: Uint8Array | number[];
  /** size in bytes (files only) */
  s: number;
  /** the records (PERM, TIME, OWNER, XATTR) to write before the entry */
  r?: number[];
  /** hard-link group: the file holding the content, and the number of the entry written for it */
  g?: { f: Node; i?: number };
}

/** Format 2: appends OWNER's user and group names (o's) to the record a. */
export type Names = (a: number[], o: Owner, path: ArchivePath) => void;

/** Any entry, seen through the fields of every kind. */
export type AnyEntry = Omit<FileEntry, "dir"> & Partial<Omit<SpecialEntry, "path">> & { dir?: boolean };

export const MAX_CHUNK = 65536;
export const TWO32 = 2 ** 32;
const U32 = TWO32 - 1;
const SPECIALS = ["fifo", "char", "block"];
const enc = new TextEncoder();
export const bytes = (v: string | Uint8Array) => (typeof v == "string" ? enc.encode(v) : v);
/** The bytes as a latin-1 string, so that `<` and Map keys work on bytes. */
const key = (b: Uint8Array) => String.fromCharCode(...b);
/** Whether v is an integer 0..max. */
export const uint = (v: unknown, max: number) => Number.isInteger(v) && (v as number) >= 0 && (v as number) <= max;

/** Appends v (a number or bigint; negative ones in two's complement) as n little-endian bytes. */
export function le(a: number[], v: number | bigint, n: number): void {
  for (let b = BigInt.asUintN(64, BigInt(v)); n--; b >>= 8n) a.push(Number(b & 255n));
}

/** Throws a BargeError naming the entry's path. */
export function fail(code: string, what: string, path: ArchivePath): never {
  throw new BargeError(code, `${what}: ${JSON.stringify(typeof path == "string" ? path : new TextDecoder().decode(path))}`);
}

/** The records (but LINKED) of an entry with tag t (not a hard link), validated; v2: OWNER with names. */
export function records(e: AnyEntry, t: number, times: boolean, names?: Names): number[] {
  const a: number[] = [];
  const { mode: m, mtime, owner: o, xattrs, path } = e;
  if (m != null && !uint(m, 0o7777)) fail("bad-mode", "mode must be an integer 0..0o7777", path);
  if (t != 10 && m != null && m != (t == 2 ? 0o755 : 0o644)) a.push(5), le(a, m, 2);
  const time = mtime ?? (e.file as File | undefined)?.lastModified;
  if (times && time != null) {
    let { sec, nsec } = time as Timestamp;
    if (typeof time == "number") (sec = Math.floor(time / 1000)), (nsec = Math.min(999999999, Math.round((time - sec * 1000) * 1e6)));
    if (!(uint(nsec, 999999999) && (typeof sec == "bigint" ? BigInt.asIntN(64, sec) == sec : Number.isSafeInteger(sec)))) fail("bad-time", "bad mtime", path);
    a.push(6), le(a, sec, 8), le(a, nsec, 4);
  }
  if (o) {
    if (!(uint(o.uid, U32) && uint(o.gid, U32))) fail("bad-entry", "bad owner", path);
    a.push(7), le(a, o.uid, 4), le(a, o.gid, 4);
    names?.(a, o, path);
  }
  if (xattrs?.length) {
    let last = "";
    let size = 0;
    for (const [n, v] of xattrs.map((x) => [bytes(x.name), bytes(x.value)]).sort((x, y) => (key(x[0]) < key(y[0]) ? -1 : 1))) {
      // Sorted, so a repeated name equals the last one; the first name is above "" unless empty.
      if (key(n) <= last || n.length > 255 || n.includes(0)) fail("bad-xattr", "xattr name empty, too long, repeated or with NUL", path);
      if (v.length > MAX_CHUNK || (size += 6 + n.length + v.length) > 262144) fail("xattr-too-large", "xattrs too large", path);
      last = key(n);
      a.push(8, n.length, ...n), le(a, v.length, 4);
      for (const c of v) a.push(c);
    }
  }
  return a;
}

/** Builds the tree, validating every path and entry; returns the root, entry count, total size and whether the archive is extended. */
export async function build(entries: Iterable<Entry> | AsyncIterable<Entry>, times: boolean, names?: Names): Promise<[Node, number, number, boolean]> {
  const root: Node = { n: new Uint8Array(), k: "", t: 2, c: new Map(), s: 0 };
  const links: Node[] = [];
  let count = 0;
  let total = 0;
  let ext = times;
  /** The node at path b, if any. */
  const find = (b: Uint8Array) => {
    let x: Node | undefined = root;
    for (const n of key(b).split("/")) x = x?.c?.get(n);
    return x;
  };
  for await (const e of entries) {
    const path = e.path;
    const b = bytes(path);
    const f = e as AnyEntry;
    const t = f.dir ? 2 : "symlink" in e ? 10 : "link" in e ? 11 : "special" in e ? 12 : 1;
    let dir = root;
    for (let i = 0, start = 0; i <= b.length; i++) {
      if (i < b.length && b[i] != 47) continue;
      const n = b.subarray(start, i);
      start = i + 1;
      const code = !n.length
        ? "empty-name"
        : n.length > 255
          ? "name-too-long"
          : n.includes(0)
            ? "nul-in-name"
            : n.length < 3 && n[0] == 46 && n[n.length - 1] == 46
              ? "dot-name"
              : "";
      if (code) fail(code, "invalid name in path", path);
      const k = key(n);
      let x = dir.c!.get(k);
      if (i < b.length || t == 2) {
        if (!x) (x = { n, k, t: 2, c: new Map(), s: 0 }), count++;
        else if (!x.c) fail("duplicate-name", "a file is in the way of", path);
      } else {
        if (x) fail("duplicate-name", "path given twice or used as a directory", path);
        x = { n, k, t, s: 0 };
        count++;
        if (t == 1) {
          const d = f.data == null ? f.data : bytes(f.data);
          const s = f.file ? f.file.size : d ? d.length : f.size!;
          if (!(f.file || d || f.stream)) fail("bad-entry", "file entry without file, data or stream", path);
          if (!uint(s, Number.MAX_SAFE_INTEGER)) fail("bad-entry", "missing or invalid size", path);
          x.d = d;
          x.s = s;
          total += s;
          if (f.linked) x.g = { f: x };
        } else if (t == 10) {
          const d = bytes((e as { symlink: string | Uint8Array }).symlink);
          if (!d.length || d.length > 4095 || d.includes(0)) fail("bad-symlink", "symlink target must be 1..4095 bytes without NUL", path);
          le((x.d = []), d.length, 2);
          x.d.push(...d);
        } else if (t == 11) links.push(x);
        else if (t == 12) {
          const { special: s, major = 0, minor = 0 } = f;
          const type = SPECIALS.indexOf(s!) + 1;
          if (!type || !uint(major, U32) || !uint(minor, U32) || (type == 1 && major + minor)) fail("bad-special", "bad special file", path);
          x.d = [type];
          le(x.d, major, 4), le(x.d, minor, 4);
        }
      }
      if (i == b.length) {
        x.e = e;
        if (t != 11) x.r = records(f, t, times, names);
        // Anything but PERM and TIME needs the extended header (TIME comes only with it).
        ext ||= t > 2 || !!(f.owner || f.xattrs?.length || f.linked);
      }
      dir.c!.set(k, x);
      dir = x;
    }
  }
  for (const x of links) {
    let to: Node | undefined = x;
    for (let n = 0; to?.t == 11 && n <= links.length; n++) to = find(bytes((to.e as { link: ArchivePath }).link));
    if (to?.t != 1) fail("bad-link", "hard link to no file of this pack", x.e!.path);
    x.g = to.g ??= { f: to };
  }
  return [root, count, total, ext];
}

/** Children of d in descending key order, so pop() yields them ascending. */
export const children = (d: Node) => [...d.c!.values()].sort((a, b) => (a.k < b.k ? 1 : -1));

/** The content of the file node f, which must be its size; read only as it is pulled. */
export async function* content(f: Node): AsyncGenerator<Uint8Array> {
  const e = f.e as FileEntry;
  const src = e.file ? e.file.stream() : f.d ? [f.d as Uint8Array] : typeof e.stream == "function" ? e.stream() : e.stream!;
  let got = 0;
  for await (const c of read(src)) {
    if ((got += c.length) > f.s) break;
    yield c;
  }
  if (got != f.s) fail("size-mismatch", `expected ${f.s} bytes, the source gave ${got > f.s ? "more" : got}`, e.path);
}

/**
 * The tree in archive order: each entry as [node, tag (1 file, 11 hard link, ...), the node
 * holding its content and records, its records], a POP as undefined. The first member of a hard-link
 * group met is the file, with the file's records and LINKED; the others link to it.
 */
export function* walk(root: Node): Generator<[Node, number, Node, number[]] | undefined> {
  const stack = [children(root)];
  for (let i = 0; stack.length; ) {
    const x = stack[stack.length - 1].pop();
    if (!x) {
      stack.pop();
      if (stack.length) yield;
      continue;
    }
    const g = x.g;
    const f = g ? g.f : x;
    const link = g && g.i != null;
    if (g && !link) g.i = i;
    yield [x, link ? 11 : g ? 1 : x.t, f, link ? [] : g ? [...f.r!, 9] : x.r ?? []];
    i++;
    if (x.c) stack.push(children(x));
  }
}


/**
 * The output stream of an encoder's generator `it`, one piece per read; `it` runs only when
 * read (a generator's body starts at its first next()). Cancelling the stream stops it.
 */
export function lazy(it: AsyncGenerator<Uint8Array>): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>(
    {
      async pull(ctl) {
        const r = await it.next();
        if (r.done) ctl.close();
        else ctl.enqueue(r.value);
      },
      cancel() {
        // Not awaited: a read in progress may never finish; the generator stops (and
        // cancels its source) as soon as it gets control back.
        it.return(undefined).catch(() => {});
      },
    },
    { highWaterMark: 0 },
  );
}
