// packV2(): format 2 as docs/FORMAT.md's "v2 canonical archives" says. It reproduces the v2
// vectors of one segment byte for byte (the others cut segments by hand), round-trips every
// vector through unpack, cuts 4 MiB bodies and extents, and refuses bad input by name.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { BargeError, packV2, unpack } from "../dist/index.js";
import { collect, decodeAll, loadVectors, rootOf, vectorEntries } from "./helpers.mjs";

const valid = loadVectors("v2/valid");
const MiB = 1 << 20;

/** The segments an archive's footer counts. */
const segments = (bytes) => new DataView(bytes.buffer, bytes.byteOffset + bytes.length - 37 + 9, 4).getUint32(0, true);
/** packV2's options for a vector: its root record as the root's metadata. */
const rootOptions = (root) => root && { mode: root.perm ?? root.mode, mtime: root.mtime, owner: root.owner && vectorEntries([{ path_hex: "72", kind: "dir", owner: root.owner }])[0].owner };
const decode = async (bytes) => {
  const roots = [];
  const entries = await decodeAll(bytes, { onRoot: (r) => roots.push(rootOf(r)) });
  return { entries, root: roots[0] };
};
const strip = (entries) => entries.map(({ path, ...rest }) => rest);
/**
 * Entries as packV2 writes them: an EXTFILE whose extents leave no hole and that fits 4 MiB
 * is a FILE (extfile-across-segments cuts one into three extents by hand).
 */
const canonical = (entries) =>
  entries.map(({ size, extents, ...e }) => {
    const data = extents?.map((x) => x.data_hex).join("");
    if (!extents || data.length / 2 != size || size > 4 * MiB || extents.some((x, i) => i && x.at != extents[i - 1].at + extents[i - 1].data_hex.length / 2)) return extents ? { ...e, size, extents } : e;
    return { ...e, data_hex: data };
  });

describe("packV2 and the v2 vectors", () => {
  for (const { name, bytes, meta } of valid) {
    const options = { root: rootOptions(meta.root) };
    if (segments(bytes) <= 1) {
      test(`${name}: packV2 reproduces the archive byte for byte`, async () => {
        assert.deepEqual(await collect(packV2(vectorEntries(meta.entries), options)), bytes);
        assert.deepEqual(await collect(packV2(vectorEntries(meta.entries).reverse(), options)), bytes);
      });
    }
    test(`${name}: unpack(packV2(entries)) gives the entries and the root`, async () => {
      assert.deepEqual(await decode(await collect(packV2(vectorEntries(meta.entries), options))), { entries: canonical(strip(meta.entries)), root: meta.root });
    });
  }
});

test("bodies are cut after the group that brings them to 4 MiB; files above 4 MiB are EXTFILEs cut at 4 MiB", async () => {
  const big = new Uint8Array(9 * MiB + 5).map((_, i) => i % 251);
  const files = [
    { path: "a", data: new Uint8Array(3 * MiB).fill(1) },
    { path: "b", data: new Uint8Array(3 * MiB).fill(2) }, // the body reaches 6 MiB: cut
    { path: "c", data: new Uint8Array(4 * MiB).fill(3) }, // exactly 4 MiB: still a FILE
    { path: "d/big", data: big }, // three extents, a segment each
    { path: "e", data: "after" },
  ];
  const bytes = await collect(packV2(files));
  assert.equal(segments(bytes), 5); // a+b | c | d, big, its first extent | the second | the third, POP, e
  const got = [];
  for await (const e of unpack(bytes)) {
    const extents = [];
    for await (const x of e.extents()) {
      extents.push([x.at, x.length]);
      if (e.path == "d/big") assert.ok(Buffer.from(await x.bytes()).equals(big.subarray(x.at, x.at + x.length)));
    }
    got.push([e.path, e.extentCount, extents]);
  }
  assert.deepEqual(got, [
    ["a", undefined, [[0, 3 * MiB]]],
    ["b", undefined, [[0, 3 * MiB]]],
    ["c", undefined, [[0, 4 * MiB]]],
    ["d", undefined, []],
    ["d/big", 3, [[0, 4 * MiB], [4 * MiB, 4 * MiB], [8 * MiB, MiB + 5]]],
    ["e", undefined, [[0, 5]]],
  ]);
});

test("a sparse file's extents are merged when adjacent, cut at multiples of 4 MiB, its holes left out", async () => {
  const size = 10 * MiB;
  const extents = [{ at: 3 * MiB, data: new Uint8Array(MiB).fill(7) }, { at: 4 * MiB, data: new Uint8Array(MiB).fill(8) }, { at: size - 1, data: Uint8Array.of(9) }];
  const entry = { path: "s", size, stream: () => sparseOf(size, extents), extents: extents.map((x) => ({ at: x.at, length: x.data.length })) };
  const bytes = await collect(packV2([entry]));
  assert.ok(bytes.length < 3 * MiB, `${bytes.length} bytes`);
  for await (const e of unpack(bytes)) {
    assert.equal(e.extentCount, 3);
    const got = [];
    for await (const x of e.extents()) got.push([x.at, x.length]);
    assert.deepEqual(got, [[3 * MiB, MiB], [4 * MiB, MiB], [size - 1, 1]]);
  }
});

async function* sparseOf(size, extents) {
  const { sparseContent } = await import("./helpers.mjs");
  yield* sparseContent(size, extents);
}

describe("packV2 refuses bad input, naming the entry, before any byte", () => {
  const cases = [
    ["extents out of order", { path: "x", data: "abcd", extents: [{ at: 2, length: 1 }, { at: 0, length: 1 }] }, "bad-entry", /"x"/],
    ["an extent past the end", { path: "x", data: "abcd", extents: [{ at: 2, length: 3 }] }, "bad-entry", /"x"/],
    ["an empty extent", { path: "x", data: "abcd", extents: [{ at: 1, length: 0 }] }, "bad-entry", /"x"/],
    ["an owner name above 255 bytes", { path: "o", data: "", owner: { uid: 1, gid: 1, user: "u".repeat(256) } }, "bad-entry", /"o"/],
  ];
  for (const [what, entry, code, message] of cases) {
    test(what, async () => {
      const reader = packV2([entry]).getReader();
      await assert.rejects(reader.read(), (e) => e instanceof BargeError && e.code == code && message.test(e.message));
    });
  }
  test("non-zero bytes in a hole fail the pack as the file is reached", async () => {
    await assert.rejects(collect(packV2([{ path: "h", data: "ab", extents: [{ at: 0, length: 1 }] }])), (e) => e.code == "bad-entry" && /"h"/.test(e.message));
  });
  test("a source giving fewer bytes than its size fails as size-mismatch", async () => {
    await assert.rejects(collect(packV2([{ path: "f", size: 5, stream: [new Uint8Array(3)] }])), (e) => e.code == "size-mismatch");
    await assert.rejects(collect(packV2([{ path: "f", size: 5 * MiB, stream: [new Uint8Array(3)], extents: [{ at: 0, length: 1 }] }])), (e) => e.code == "size-mismatch");
  });
});
