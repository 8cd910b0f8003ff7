// The hand-written XXH3-64 (src/xxh3.ts) against digests from python3-xxhash (test/xxh3.json):
// every length 0..300 (the 0, 1-3, 4-8, 9-16, 17-128, 129-240 and long paths) and larger ones
// around the stripe (64), buffer (256) and block (1024) boundaries, whole and fed in pieces.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { Xxh3, xxh3 } from "../dist/xxh3.js";

const { digests } = JSON.parse(readFileSync(new URL("xxh3.json", import.meta.url), "utf8"));
const lengths = Object.keys(digests).map(Number);
const data = Uint8Array.from({ length: Math.max(...lengths) }, (_, i) => (31 * i + (i >> 7)) & 255);
const hex = (v) => v.toString(16).padStart(16, "0");

test("xxh3 of whole inputs matches python3-xxhash", () => {
  for (const n of lengths) assert.equal(hex(xxh3(data.subarray(0, n))), digests[n], `length ${n}`);
});

test("xxh3 fed in pieces (1, 7, 63, 64, 65, 255, 256, 257, 4096 bytes) matches", () => {
  for (const piece of [1, 7, 63, 64, 65, 255, 256, 257, 4096]) {
    for (const n of lengths) {
      if (piece == 1 && n > 70000) continue;
      const h = new Xxh3();
      for (let o = 0; o < n; o += piece) h.update(data.subarray(o, Math.min(n, o + piece)));
      assert.equal(hex(h.digest()), digests[n], `length ${n} in pieces of ${piece}`);
    }
  }
});

test("digest keeps the state: more input may follow", () => {
  const h = new Xxh3();
  for (const n of [0, 100, 240, 241, 1025, 5000]) {
    h.update(data.subarray(h.total, n));
    assert.equal(hex(h.digest()), digests[n] ?? hex(xxh3(data.subarray(0, n))));
  }
});

test("xxh3 hashes at least a few MB/s", () => {
  const big = new Uint8Array(8 << 20);
  const t = performance.now();
  xxh3(big);
  const mbs = 8 / ((performance.now() - t) / 1000);
  assert.ok(mbs > 4, `${mbs.toFixed(1)} MB/s`);
});
