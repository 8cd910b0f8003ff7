// unpack(): input kinds, entry data lifetime, messages, early exit, limits.
import assert from "node:assert/strict";
import { test } from "node:test";
import { pack, unpack } from "../dist/index.js";
import { collect, decodeAll, loadVectors } from "./helpers.mjs";

const nested = loadVectors("valid").find((v) => v.name === "nested");
const te = new TextEncoder();

test("accepts Uint8Array, ArrayBuffer, Blob, ReadableStream, async and sync iterables", async () => {
  const want = await decodeAll(nested.bytes);
  const b = nested.bytes;
  async function* asyncChunks() {
    yield b.subarray(0, 10);
    yield b.subarray(10);
  }
  const inputs = [b.slice().buffer, new Blob([b]), new Blob([b]).stream(), asyncChunks(), [b.subarray(0, 3), b.subarray(3)]];
  for (const input of inputs) assert.deepEqual(await decodeAll(input), want);
});

test("file content not consumed is skipped; it cannot be read after the iteration moves on", async () => {
  const archive = await collect(pack([{ path: "a", data: "AAAA" }, { path: "b", data: "BB" }, { path: "c/d", data: "DDD" }]));
  const seen = [];
  let first;
  for await (const e of unpack(archive)) {
    first ??= e;
    seen.push(e.path);
    if (e.path === "c/d") assert.equal(new TextDecoder().decode(await e.bytes()), "DDD");
  }
  assert.deepEqual(seen, ["a", "b", "c", "c/d"]);
  await assert.rejects(first.bytes(), { name: "BargeError", code: "stale-entry", message: /no longer available/ });
});

test("an input that holds no archive is a TypeError coded bad-argument, at the first read", async () => {
  for (const input of ["BARGE", 42, null, { length: 3 }]) {
    const entries = unpack(input);
    await assert.rejects(entries.next(), { name: "TypeError", code: "bad-argument", message: /^unpack: the archive must be a Uint8Array/ }, String(input));
  }
});

test("content can be streamed in chunks, partly, then the rest is skipped", async () => {
  const big = new Uint8Array(300000).map((_, i) => i & 255);
  const input = new Blob([await collect(pack([{ path: "big", data: big }, { path: "z", data: "z" }]))]).stream();
  const got = [];
  for await (const e of unpack(input)) {
    if (e.path === "big") {
      let n = 0;
      for await (const c of e.chunks()) {
        n += c.length;
        if (n > 1000) break;
      }
      got.push(n > 1000);
    } else got.push(new TextDecoder().decode(await e.bytes()));
  }
  assert.deepEqual(got, [true, "z"]);
});

test("entries carry kind, index, 12-bit mode, raw perm, size and offset", async () => {
  const archive = await collect(pack([{ path: "d", dir: true, mode: 0o1750 }, { path: "d/x", data: "xy", mode: 0o4755 }, { path: "d/y", data: "" }]));
  const entries = [];
  for await (const e of unpack(archive)) entries.push({ kind: e.kind, index: e.index, path: e.path, mode: e.mode, perm: e.perm, size: e.size, offset: e.offset });
  assert.deepEqual(entries, [
    { kind: "dir", index: 0, path: "d", mode: 0o1750, perm: 0o1750, size: 0, offset: 11 },
    { kind: "file", index: 1, path: "d/x", mode: 0o4755, perm: 0o4755, size: 2, offset: 17 },
    { kind: "file", index: 2, path: "d/y", mode: 0o644, perm: undefined, size: 0, offset: 26 },
  ]);
});

test("error messages name the path, escaping bytes that are not UTF-8", async () => {
  const dup = loadVectors("invalid").find((v) => v.name === "duplicate-name-nested");
  await assert.rejects(decodeAll(dup.bytes), { code: "duplicate-name", message: /^duplicate-name at offset \d+ in "d\/a": / });
  const bad = new Uint8Array([...te.encode("BARGE\0\x01\0"), 2, 0xff, 0x0a, 0, 1, 0x2e, 0x2e, 0, 0, 0, 0, 0]);
  await assert.rejects(decodeAll(bad), { code: "dot-name", offset: 12, message: /in "\\xff\\x0a\/\.\."/ });
  const pop = new Uint8Array([...te.encode("BARGE\0\x01\0"), 2, 0x61, 0, 3, 3]);
  await assert.rejects(decodeAll(pop), { code: "pop-at-root", offset: 12, message: /^pop-at-root at offset 12: POP at the archive root$/ });
});

test("stopping the iteration early cancels the input stream", async () => {
  let cancelled = false;
  let pulls = 0;
  const b = nested.bytes;
  const input = new ReadableStream({
    pull(ctl) {
      ctl.enqueue(b.subarray(pulls, ++pulls)); // one byte per pull, never closes
    },
    cancel() {
      cancelled = true;
    },
  });
  for await (const e of unpack(input)) if (e.path === "a") break;
  assert.ok(cancelled);
});

test("limits: maxDepth, maxEntries, maxBytes", async () => {
  const deep = await collect(pack([{ path: "a/b/c", dir: true }]));
  await assert.rejects(decodeAll(deep, { maxDepth: 2 }), { code: "too-deep", offset: 14 });
  assert.equal((await decodeAll(deep, { maxDepth: 3 })).length, 3);
  await assert.rejects(decodeAll(deep, { maxEntries: 2 }), { code: "too-many-entries" });
  const files = await collect(pack([{ path: "a", data: "12" }, { path: "b", data: "34" }]));
  await assert.rejects(decodeAll(files, { maxBytes: 3 }), { code: "too-many-bytes", offset: 17 });
  assert.equal((await decodeAll(files, { maxBytes: 4 })).length, 2);
});

test("a truncated file fails after the entry was delivered, never as a short complete file", async () => {
  const archive = await collect(pack([{ path: "f", data: "0123456789" }]));
  const cut = archive.subarray(0, 8 + 7 + 4);
  let delivered;
  await assert.rejects(
    (async () => {
      for await (const e of unpack(cut)) {
        delivered = e.path;
        await e.bytes();
      }
    })(),
    { code: "truncated", offset: 8, message: /in "f": input ends inside the content \(6 of 10 bytes missing\)/ },
  );
  assert.equal(delivered, "f");
});
