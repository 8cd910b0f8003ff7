/**
 * XXH3-64 with seed 0 (the digest of format v2), streaming: `update` any number of times,
 * then `digest`. Hand-written because no well-kept npm package offers streaming XXH3-64 for
 * browsers (xxhash-wasm has only XXH32/XXH64) and the package has no runtime dependencies.
 * It follows the reference (xxhash.h, default secret, scalar path); test/xxh3.json holds
 * digests from python3-xxhash that it must reproduce. The per-stripe loop works on 32-bit
 * halves (no BigInt) so long inputs hash at tens of MB/s; the rest uses BigInt.
 */

const M64 = (1n << 64n) - 1n;
const P32_1 = 0x9e3779b1n;
const P64_1 = 0x9e3779b185ebca87n;
const P64_2 = 0xc2b2ae3d27d4eb4fn;
const P64_3 = 0x165667b19e3779f9n;
const SECRET = Uint8Array.from(
  ("b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671fcb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c" +
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364" +
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e").match(/../g)!,
  (h) => parseInt(h, 16),
);
/** Stripes of 64 bytes per block (the secret advances 8 bytes a stripe). */
const STRIPES = 16;
const BUF = 256;

const u32 = (b: Uint8Array, o: number) => (b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)) >>> 0;
const u64 = (b: Uint8Array, o: number) => BigInt(u32(b, o)) | (BigInt(u32(b, o + 4)) << 32n);
const mul = (a: bigint, b: bigint) => (a * b) & M64;
/** The 128-bit product of a and b, its halves xor-ed. */
const fold = (a: bigint, b: bigint) => {
  const p = a * b;
  return (p ^ (p >> 64n)) & M64;
};
const avalanche = (h: bigint) => {
  h = mul(h ^ (h >> 37n), 0x165667919e3779f9n);
  return h ^ (h >> 32n);
};
const mix16 = (b: Uint8Array, o: number, s: number) => fold(u64(b, o) ^ u64(SECRET, s), u64(b, o + 8) ^ u64(SECRET, s + 8));

/** XXH3-64 of inputs of at most 240 bytes (the reference's short paths). */
function short(b: Uint8Array, n: number): bigint {
  if (n > 16) {
    let acc = mul(BigInt(n), P64_1);
    if (n > 128) {
      for (let i = 0; i < 8; i++) acc += mix16(b, 16 * i, 16 * i);
      acc = avalanche(acc & M64);
      for (let i = 8; i < n >> 4; i++) acc += mix16(b, 16 * i, 16 * (i - 8) + 3);
      return avalanche((acc + mix16(b, n - 16, 119)) & M64);
    }
    // 17..128: pairs of 16-byte pieces from both ends, inward.
    for (let i = (n - 1) >> 5; i >= 0; i--) acc += mix16(b, 16 * i, 32 * i) + mix16(b, n - 16 * (i + 1), 32 * i + 16);
    return avalanche(acc & M64);
  }
  if (n > 8) {
    const lo = u64(b, 0) ^ (u64(SECRET, 24) ^ u64(SECRET, 32));
    const hi = u64(b, n - 8) ^ (u64(SECRET, 40) ^ u64(SECRET, 48));
    let swapped = 0n;
    for (let i = 0; i < 8; i++) swapped = (swapped << 8n) | ((lo >> BigInt(8 * i)) & 255n);
    return avalanche((BigInt(n) + swapped + hi + fold(lo, hi)) & M64);
  }
  if (n >= 4) {
    let h = ((BigInt(u32(b, n - 4)) + (BigInt(u32(b, 0)) << 32n)) ^ (u64(SECRET, 8) ^ u64(SECRET, 16))) & M64;
    const rotl = (v: bigint, r: bigint) => ((v << r) | (v >> (64n - r))) & M64;
    h ^= rotl(h, 49n) ^ rotl(h, 24n);
    h = mul(h, 0x9fb21c651e98df25n);
    h = mul(h ^ ((h >> 35n) + BigInt(n)), 0x9fb21c651e98df25n);
    return h ^ (h >> 28n);
  }
  let h: bigint;
  if (n) h = BigInt(((b[0] << 16) | (b[n >> 1] << 24) | b[n - 1] | (n << 8)) >>> 0) ^ BigInt((u32(SECRET, 0) ^ u32(SECRET, 4)) >>> 0);
  else h = u64(SECRET, 56) ^ u64(SECRET, 64);
  // XXH64's avalanche
  h = mul(h ^ (h >> 33n), P64_2);
  h = mul(h ^ (h >> 29n), P64_3);
  return h ^ (h >> 32n);
}

/** Streaming XXH3-64 (seed 0). */
export class Xxh3 {
  /** the 8 accumulator lanes as 32-bit halves: lane i is lo[2i], hi[2i+1] */
  private acc = new Uint32Array(16);
  /** the last bytes not yet consumed as stripes; its tail keeps the bytes before them */
  private buf = new Uint8Array(BUF);
  private len = 0;
  /** stripes consumed in the current block */
  private stripes = 0;
  total = 0;

  constructor() {
    const init = [0xc2b2ae3dn, P64_1, P64_2, P64_3, 0x85ebca77c2b2ae63n, 0x85ebca77n, 0x27d4eb2f165667c5n, P32_1];
    init.forEach((v, i) => set(this.acc, i, v));
  }

  /** Adds bytes to the input. */
  update(data: Uint8Array): this {
    let off = 0;
    let n = data.length;
    this.total += n;
    if (this.len + n <= BUF) {
      this.buf.set(data, this.len);
      this.len += n;
      return this;
    }
    if (this.len) {
      const fill = BUF - this.len;
      this.buf.set(data.subarray(0, fill), this.len);
      this.stripes = consume(this.acc, this.stripes, this.buf, 0, BUF / 64);
      off = fill;
      n -= fill;
      this.len = 0;
    }
    if (n > BUF) {
      do {
        this.stripes = consume(this.acc, this.stripes, data, off, BUF / 64);
        off += BUF;
        n -= BUF;
      } while (n > BUF);
      // The last stripe may overlap consumed bytes: keep the 64 before what stays buffered.
      this.buf.set(data.subarray(off - 64, off), BUF - 64);
    }
    this.buf.set(data.subarray(off), 0);
    this.len = n;
    return this;
  }

  /** The digest of everything added so far (the state is kept: more may be added). */
  digest(): bigint {
    if (this.total <= 240) return short(this.buf, this.total);
    const acc = this.acc.slice();
    const n = this.len;
    let last: Uint8Array;
    if (n >= 64) {
      consume(acc, this.stripes, this.buf, 0, (n - 1) >> 6);
      last = this.buf.subarray(n - 64, n);
    } else {
      last = new Uint8Array(64);
      last.set(this.buf.subarray(BUF - 64 + n), 0);
      last.set(this.buf.subarray(0, n), 64 - n);
    }
    accumulate(acc, last, 0, 192 - 64 - 7);
    let h = mul(BigInt(this.total), P64_1);
    for (let i = 0; i < 8; i += 2) h += fold(lane(acc, i) ^ u64(SECRET, 11 + 8 * i), lane(acc, i + 1) ^ u64(SECRET, 19 + 8 * i));
    return avalanche(h & M64);
  }
}

/** XXH3-64 of bytes. */
export const xxh3 = (data: Uint8Array): bigint => new Xxh3().update(data).digest();

const lane = (acc: Uint32Array, i: number) => BigInt(acc[2 * i]) | (BigInt(acc[2 * i + 1]) << 32n);
function set(acc: Uint32Array, i: number, v: bigint): void {
  acc[2 * i] = Number(v & 0xffffffffn);
  acc[2 * i + 1] = Number(v >> 32n);
}

/** Consumes n stripes of b at off into acc, scrambling at each block's end; returns the stripes now in the block. */
function consume(acc: Uint32Array, done: number, b: Uint8Array, off: number, n: number): number {
  for (let i = 0; i < n; i++, off += 64) {
    accumulate(acc, b, off, 8 * done);
    if (++done == STRIPES) {
      for (let j = 0; j < 8; j++) {
        const v = lane(acc, j);
        set(acc, j, mul(v ^ (v >> 47n) ^ u64(SECRET, 128 + 8 * j), P32_1));
      }
      done = 0;
    }
  }
  return done;
}

/** One 64-byte stripe of b at off into acc, with the secret at s; 32-bit arithmetic only. */
function accumulate(acc: Uint32Array, b: Uint8Array, off: number, s: number): void {
  for (let i = 0; i < 8; i++) {
    const o = off + 8 * i;
    const dl = u32(b, o), dh = u32(b, o + 4);
    // acc[i ^ 1] += data
    const j = 2 * (i ^ 1);
    let lo = acc[j] + dl;
    acc[j] = lo;
    acc[j + 1] += dh + (lo > 0xffffffff ? 1 : 0);
    // acc[i] += lo32(key) * hi32(key), key = data ^ secret
    const a = (dl ^ u32(SECRET, s + 8 * i)) >>> 0, c = (dh ^ u32(SECRET, s + 8 * i + 4)) >>> 0;
    const a0 = a & 0xffff, a1 = a >>> 16, c0 = c & 0xffff, c1 = c >>> 16;
    const m1 = a0 * c1, m2 = a1 * c0;
    const carry = (((a0 * c0) >>> 16) + (m1 & 0xffff) + (m2 & 0xffff)) >>> 16;
    const hi = a1 * c1 + (m1 >>> 16) + (m2 >>> 16) + carry;
    lo = acc[2 * i] + (Math.imul(a, c) >>> 0);
    acc[2 * i] = lo;
    acc[2 * i + 1] += hi + (lo > 0xffffffff ? 1 : 0);
  }
}
