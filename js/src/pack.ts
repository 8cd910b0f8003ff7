/**
 * The barge encoder (format v1, docs/FORMAT.md). Kept small: it is the part a
 * web page ships. Internal fields have one-letter names for the same reason.
 */
import { BargeError } from "./error.js";
import { read } from "./source.js";
import type { ArchivePath, Entry, FileEntry, PackOptions } from "./types.js";

/** A node of the tree being packed. */
interface Node {
  /** name bytes */
  n: Uint8Array;
  /** sort/lookup key: the name bytes as a latin-1 string, so `<` orders by bytes */
  k: string;
  /** children (directories only) */
  c?: Map<string, Node>;
  /** the entry (files only) */
  e?: FileEntry;
  /** data given as bytes */
  d?: Uint8Array;
  /** size in bytes (files only) */
  s: number;
  /** mode, if given */
  m?: number;
}

const MAX_CHUNK = 65536;
const TWO32 = 2 ** 32;
const enc = new TextEncoder();

/** Throws a BargeError naming the entry's path. */
function fail(code: string, what: string, path: ArchivePath): never {
  throw new BargeError(code, `${what}: ${JSON.stringify(typeof path == "string" ? path : new TextDecoder().decode(path))}`);
}

/** Builds the tree, validating every path and mode; returns the root, entry count and total size. */
async function build(entries: Iterable<Entry> | AsyncIterable<Entry>): Promise<[Node, number, number]> {
  const root: Node = { n: new Uint8Array(), k: "", c: new Map(), s: 0 };
  let count = 0;
  let total = 0;
  for await (const e of entries) {
    const path = e.path;
    const b = typeof path == "string" ? enc.encode(path) : path;
    const m = e.mode;
    if (m != null && m !== (m & 0o7777)) fail("bad-mode", "mode must be an integer 0..0o7777", path);
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
      const k = String.fromCharCode(...n);
      let x = dir.c!.get(k);
      if (i == b.length && !e.dir) {
        if (x) fail("duplicate-name", "path given twice or used as a directory", path);
        const f = e as FileEntry;
        const d = typeof f.data == "string" ? enc.encode(f.data) : f.data;
        const s = f.file ? f.file.size : d ? d.length : f.size!;
        if (!(f.file || d || f.stream)) fail("bad-entry", "file entry without file, data or stream", path);
        if (!(s >= 0 && s <= Number.MAX_SAFE_INTEGER && s % 1 == 0)) fail("bad-entry", "missing or invalid size", path);
        x = { n, k, e: f, d, s, m };
        total += s;
        count++;
      } else if (!x) {
        x = { n, k, c: new Map(), s: 0 };
        count++;
      } else if (!x.c) fail("duplicate-name", "a file is in the way of", path);
      if (i == b.length && m != null) x.m = m;
      dir.c!.set(k, x);
      dir = x;
    }
  }
  return [root, count, total];
}

/**
 * Encodes entries (in any order) as a barge archive. The stream is lazy: the
 * entries are read and validated on the first pull, before any byte is
 * produced, and each file's content only when the output reaches it.
 * Cancelling the stream cancels the file being read and stops.
 */
export function pack(entries: Iterable<Entry> | AsyncIterable<Entry>, options: PackOptions = {}): ReadableStream<Uint8Array> {
  async function* generate(): AsyncGenerator<Uint8Array> {
    const [root, count, total] = await build(entries);
    let parts: Uint8Array[] = [];
    let pending = 0;
    let done = 0;
    let bytes = 0;
    const put = (b: Uint8Array) => {
      parts.push(b);
      pending += b.length;
    };
    const flush = () => {
      const out = new Uint8Array(pending);
      let o = 0;
      for (const b of parts) out.set(b, o), (o += b.length);
      parts = [];
      pending = 0;
      return out;
    };
    const progress = () => options.onProgress?.({ entries: done, totalEntries: count, bytes, totalBytes: total });
    /** Children in descending key order, so pop() yields them ascending. */
    const children = (d: Node) => [...d.c!.values()].sort((a, b) => (a.k < b.k ? 1 : -1));

    put(new Uint8Array([66, 65, 82, 71, 69, 0, 1, 0]));
    const stack = [children(root)];
    while (stack.length) {
      const x = stack[stack.length - 1].pop();
      if (!x) {
        stack.pop();
        if (stack.length) put(new Uint8Array([3]));
        continue;
      }
      const n = x.n.length;
      if (x.m != null && x.m != (x.c ? 0o755 : 0o644)) put(new Uint8Array([5, x.m & 255, x.m >> 8]));
      const big = x.s >= TWO32;
      const h = new Uint8Array(n + (x.c ? 2 : big ? 10 : 6));
      h[0] = x.c ? 2 : big ? 4 : 1;
      h.set(x.n, 1);
      put(h);
      if (x.c) {
        stack.push(children(x));
      } else {
        const v = new DataView(h.buffer, n + 2);
        v.setUint32(0, x.s, true);
        if (big) v.setUint32(4, x.s / TWO32, true);
        const e = x.e!;
        const src = e.file ? e.file.stream() : x.d ? [x.d] : typeof e.stream == "function" ? e.stream() : e.stream!;
        let got = 0;
        for await (const c of read(src)) {
          got += c.length;
          if (got > x.s) break;
          bytes += c.length;
          if (c.length < MAX_CHUNK) put(c);
          else {
            if (pending) yield flush();
            yield c;
          }
          if (pending >= MAX_CHUNK) yield flush();
          progress();
        }
        if (got != x.s) fail("size-mismatch", `expected ${x.s} bytes, the source gave ${got > x.s ? "more" : got}`, e.path);
      }
      done++;
      progress();
      if (pending >= MAX_CHUNK) yield flush();
    }
    const end = new Uint8Array(9);
    new DataView(end.buffer).setUint32(1, count, true);
    put(end);
    yield flush();
  }

  let it: AsyncGenerator<Uint8Array> | undefined;
  return new ReadableStream<Uint8Array>(
    {
      async pull(ctl) {
        const r = await (it ||= generate()).next();
        if (r.done) ctl.close();
        else ctl.enqueue(r.value);
      },
      cancel() {
        // Not awaited: a read in progress may never finish; the generator stops (and
        // cancels its source) as soon as it gets control back.
        it?.return(undefined).catch(() => {});
      },
    },
    { highWaterMark: 0 },
  );
}
