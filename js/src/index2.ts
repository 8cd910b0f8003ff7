/**
 * The index of a version 2 archive (docs/FORMAT.md, "The index"): the rows an encoder writes
 * and the decoder recomputes from the entries as they come. Rows are kept only as digests,
 * so a stream's index is checked in constant memory.
 */
import { Xxh3 } from "./xxh3.js";

/** Index `kind` codes by entry kind; LINKED adds 0x10. */
export const KINDS: Record<string, number> = { dir: 1, file: 2, extfile: 3, symlink: 4, hardlink: 5, fifo: 6, char: 7, block: 8 };

/** Appends v (a number or bigint, unsigned) as a canonical LEB128 varint. */
export function varint(out: number[], v: number | bigint): void {
  let b = BigInt(v);
  for (; b >= 128n; b >>= 7n) out.push(Number(b & 127n) | 128);
  out.push(Number(b));
}

/** Appends v as n little-endian bytes. */
export function le(out: number[], v: number | bigint, n: number): void {
  for (let b = BigInt.asUintN(64, BigInt(v)); n--; b >>= 8n) out.push(Number(b & 255n));
}

/**
 * Builds the index body's three sections (seg records, rows, restarts) as they are added;
 * `sink` receives each piece (an encoder writes them, a decoder hashes them).
 */
export class IndexRows {
  segments = 0;
  rows = 0;
  /** bytes of the rows so far */
  rowsLen = 0;
  private prev: Uint8Array = new Uint8Array(0);
  private prevSeg = 0;
  constructor(private sink: (section: number, bytes: number[]) => void) {}

  /** A segment's record: where its frame is, its lengths, first entry and digest. */
  segment(at: number, stored: number, body: number, first: number, digest: bigint): void {
    const a: number[] = [];
    le(a, at, 8), le(a, stored, 4), le(a, body, 4), le(a, first, 8), le(a, digest, 8);
    this.sink(0, a);
    this.segments++;
  }

  /** The next entry's row: full path, kind code, size, segment number and group offset in its body. */
  row(path: Uint8Array, kind: number, size: number | bigint, segment: number, offset: number): void {
    let shared = 0;
    if (this.rows % 16) while (shared < path.length && shared < this.prev.length && path[shared] == this.prev[shared]) shared++;
    else {
      const r: number[] = [];
      le(r, this.rowsLen, 4);
      this.sink(2, r);
    }
    const a: number[] = [];
    varint(a, shared), varint(a, path.length - shared);
    for (let i = shared; i < path.length; i++) a.push(path[i]);
    a.push(kind), varint(a, size), varint(a, segment - this.prevSeg), varint(a, offset);
    this.sink(1, a);
    this.rows++;
    this.rowsLen += a.length;
    this.prev = path;
    this.prevSeg = segment;
  }
}

/** The index a decoder expects, as digests of its sections. */
export class ExpectedIndex extends IndexRows {
  readonly digests: Xxh3[];
  constructor() {
    const digests = [new Xxh3(), new Xxh3(), new Xxh3()];
    super((s, bytes) => digests[s].update(Uint8Array.from(bytes)));
    this.digests = digests;
  }
}
