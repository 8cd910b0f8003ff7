/**
 * The format 2 encoder (docs/FORMAT.md, "v2 canonical archives"): the tree of `pack`, with
 * ROOT, FILE digests, EXTFILEs for sparse files and files above 4 MiB, segments cut at 4 MiB
 * bodies (stored raw: this package has no zstd), the index and the footer. A separate entry
 * from `pack` so that a page writing format 1 does not ship it (and its XXH3).
 */
import { IndexRows, KINDS } from "./index2.js";
import { build, bytes, content, fail, lazy, le, records, uint, walk } from "./tree.js";
import type { AnyEntry, Names, Node } from "./tree.js";
import type { Entry, FileEntry, Meta, PackOptions } from "./types.js";
import { Xxh3 } from "./xxh3.js";

export interface PackV2Options extends PackOptions {
  /** The root directory's metadata, written as ROOT before everything (mode default 0o755). */
  root?: Meta & { mode?: number };
}

/** Bodies are cut after the group that brings them to this; files and extents hold at most this. */
const CUT = 4 << 20;
const MAGIC = [66, 65, 82, 71, 69, 0, 2, 0];
const NO_FILE = (1n << 64n) - 1n;

/** OWNER's names (format 2): 0..255 bytes each. */
const names: Names = (a, o, path) => {
  for (const n of [o.user ?? "", o.group ?? ""].map(bytes)) {
    if (n.length > 255) fail("bad-entry", "owner name above 255 bytes", path);
    a.push(n.length, ...n);
  }
};

/** Whether c is all zeros (a plain loop: some() with a callback is ten times slower). */
function zero(c: Uint8Array): boolean {
  for (let i = 0; i < c.length; i++) if (c[i]) return false;
  return true;
}

/** A file's data regions as [at, length], adjacent ones merged; undefined when it has no holes. */
function regions(f: Node): [number, number][] | undefined {
  const { extents, path } = f.e as FileEntry;
  if (!extents || !f.s) return;
  const out: [number, number][] = [];
  let end = 0;
  for (const { at, length } of extents) {
    if (!uint(at, f.s) || !uint(length, f.s - at) || !length || at < end) fail("bad-entry", "extents must ascend without overlap, each 1 byte or more inside the file", path);
    if (out.length && at == end) out[out.length - 1][1] += length;
    else out.push([at, length]);
    end = at + length;
  }
  return out.length == 1 && out[0][1] == f.s ? undefined : out;
}

/** Regions cut at every multiple of 4 MiB: a FILE's or EXTENT's data is at most 4 MiB. */
function cut(rs: [number, number][]): [number, number][] {
  const out: [number, number][] = [];
  for (let [at, n] of rs)
    for (let m; n; at += m, n -= m) out.push([at, (m = Math.min(n, CUT - (at % CUT)))]);
  return out;
}

/** Reads exact runs of bytes from chunks. */
class Pull {
  private rest: Uint8Array = new Uint8Array(0);
  constructor(private it: AsyncIterator<Uint8Array>) {}
  /** The next n bytes, in pieces. */
  async *take(n: number): AsyncGenerator<Uint8Array> {
    while (n > 0) {
      if (!this.rest.length) {
        const r = await this.it.next();
        if (r.done) return; // content() has failed the pack as size-mismatch by now
        this.rest = r.value;
      }
      const c = this.rest.subarray(0, n);
      this.rest = this.rest.subarray(c.length);
      n -= c.length;
      yield c;
    }
  }
}

/**
 * Encodes entries (in any order) as a format 2 archive, as `pack` does format 1 (same
 * entries, validation, laziness and errors): raw segments, canonical. Each segment (a 4 MiB
 * body and one group at most) is held until it is whole, since its head states its length
 * and digest; the index (about 20 bytes per entry) until the end.
 */
export function packV2(entries: Iterable<Entry> | AsyncIterable<Entry>, options: PackV2Options = {}): ReadableStream<Uint8Array> {
  async function* generate(): AsyncGenerator<Uint8Array> {
    const times = options.times != false;
    const [root, count, total] = await build(entries, times, names);
    const rootRecords = options.root && records({ ...options.root, path: "" } as AnyEntry, 2, times, names);
    const files = new Map<Node, [number, number][] | undefined>();
    /** Every file's regions, checked before the first byte. */
    const check = (d: Node): void => d.c!.forEach((x) => (x.c ? check(x) : x.t == 1 && files.set(x, regions(x))));
    check(root);

    const sections: number[][] = [[], [], []];
    const index = new IndexRows((s, b) => sections[s].push(...b));
    let offset = 8;
    let done = 0;
    let written = 0;
    const progress = () => options.onProgress?.({ entries: done, totalEntries: count, bytes: written, totalBytes: total });
    /** the directories entered, root first, and their paths */
    const dirs: Uint8Array[] = [];
    const paths: Uint8Array[] = [new Uint8Array(0)];
    /** the EXTFILE whose extents are being written */
    let open = NO_FILE;
    // The segment being built: its pieces, their length, the digest of its skeleton.
    let body: Uint8Array[] = [];
    let size = 0;
    let skel = new Xxh3();
    let first = 0;
    const put = (b: Uint8Array | number[], data?: boolean) => {
      const u = b instanceof Uint8Array ? b : Uint8Array.from(b);
      body.push(u);
      size += u.length;
      if (!data) skel.update(u);
    };
    const start = () => {
      const a = [0x10];
      le(a, (first = done), 8), le(a, open, 8), le(a, dirs.length, 2);
      for (const n of dirs) a.push(...n, 0);
      (body = []), (size = 0), (skel = new Xxh3());
      put(a);
    };
    /** The segment as its frame, unless it holds only START. */
    const frame = (): Uint8Array | undefined => {
      if (body.length < 2) return;
      const digest = skel.digest();
      const out = new Uint8Array(18 + size);
      const h = [0x20, 0];
      le(h, size, 4), le(h, size, 4), le(h, digest, 8);
      out.set(h);
      let o = 18;
      for (const b of body) out.set(b, o), (o += b.length);
      index.segment(offset, size, size, first, digest);
      offset += out.length;
      return out;
    };
    /** After a group: a body of 4 MiB or more is closed and a new one begun. */
    async function* group(): AsyncGenerator<Uint8Array> {
      if (size < CUT) return;
      yield frame()!;
      start();
    }
    /** Data (digested) and its digest. */
    async function* data(pieces: AsyncIterable<Uint8Array>): AsyncGenerator<never> {
      const h = new Xxh3();
      for await (const c of pieces) put(c, true), h.update(c), (written += c.length), progress();
      const a: number[] = [];
      le(a, h.digest(), 8);
      put(a);
    }

    yield Uint8Array.from(MAGIC);
    start();
    if (rootRecords) put([...rootRecords, 0x11]), yield* group();
    for (const w of walk(root)) {
      if (!w) {
        put([3]);
        dirs.pop(), paths.pop();
        yield* group();
        continue;
      }
      const [x, t, f, r] = w;
      const at = size;
      put(r);
      const path = x.n;
      const full = paths.length > 1 ? Uint8Array.from([...paths[paths.length - 1], 47, ...path]) : path;
      const h = [t, ...path, 0];
      // walk() gives a hard-link group's first member as the file (tag 1), with LINKED.
      const linked = t == 1 && x.g ? 0x10 : 0;
      const rs = files.get(f);
      const sparse = t == 1 && (rs || f.s > CUT);
      const kind = t == 2 ? "dir" : t == 10 ? "symlink" : t == 11 ? "hardlink" : t == 12 ? ["fifo", "char", "block"][x.d![0] - 1] : sparse ? "extfile" : "file";
      let rowSize = 0;
      const extents = sparse ? cut(rs ?? [[0, f.s]]) : [];
      if (t == 11) le(h, (rowSize = x.g!.i!), 8);
      else if (sparse) (h[0] = 13), le(h, (rowSize = f.s), 8), le(h, extents.length, 4);
      else if (t == 1) le(h, (rowSize = f.s), 4);
      else if (t > 2) h.push(...x.d!), (rowSize = t == 10 ? x.d!.length - 2 : 0);
      put(h);
      index.row(full, KINDS[kind] | linked, rowSize, index.segments, at);
      const number = done++;
      if (t == 2) dirs.push(path), paths.push(full);
      if (t == 1 && !sparse) yield* data(content(f));
      yield* group();
      if (sparse) {
        // The extents, each a group of its own; the bytes between them are holes.
        const src = new Pull(content(f)[Symbol.asyncIterator]());
        let pos = 0;
        open = BigInt(number);
        /** The hole up to byte `to`: read, and checked to be zeros. */
        const hole = async (to: number) => {
          for await (const c of src.take(to - pos)) {
            if (!zero(c)) fail("bad-entry", `non-zero bytes outside the extents after byte ${pos}`, (f.e as FileEntry).path);
            (pos += c.length), (written += c.length);
          }
        };
        for (const [i, [xat, n]] of extents.entries()) {
          await hole(xat);
          const a = [0x0e];
          le(a, xat, 8), le(a, n, 4);
          put(a);
          yield* data(src.take(n));
          pos = xat + n;
          if (i == extents.length - 1) open = NO_FILE;
          yield* group();
        }
        await hole(f.s);
        for await (const _ of src.take(1)); // the source's end, where content() checks its size
      }
      progress();
    }
    const last = frame();
    if (last) yield last;
    // The index: counts, segments, rows, restarts; then the footer.
    const head: number[] = [];
    le(head, index.segments, 4), le(head, done, 8);
    const ix = Uint8Array.from([...head, ...sections[0], ...sections[1], ...sections[2]]);
    const f = [0x21, 0];
    le(f, ix.length, 4), le(f, ix.length, 4), le(f, new Xxh3().update(ix).digest(), 8);
    yield Uint8Array.from(f);
    yield ix;
    const foot = [0];
    le(foot, done, 8), le(foot, index.segments, 4), le(foot, offset, 8);
    le(foot, new Xxh3().update(Uint8Array.from(foot)).digest(), 8);
    yield Uint8Array.from([...foot, ...MAGIC]);
  }

  return lazy(generate());
}
