// Format 2 decoding beyond the vectors: archives built by hand from docs/FORMAT.md's v2
// grammar for check orders the vectors do not pin, and the content API of sparse files.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { packV2, unpack } from "../dist/index.js";
import { Xxh3 } from "../dist/xxh3.js";
import { chunked, collect, le, loadVectors } from "./helpers.mjs";

const NONE = (1n << 64n) - 1n;
const raw = (s) => [...(typeof s == "string" ? new TextEncoder().encode(s) : s)];
const digest = (bytes) => le(new Xxh3().update(Uint8Array.from(bytes)).digest(), 8);
/** Body pieces: [bytes, isData]; the segment digest skips the data. */
const start = (first = 0, open = NONE, names = []) => [[0x10, ...le(first, 8), ...le(open, 8), ...le(names.length, 2), ...names.flatMap((n) => [...raw(n), 0])], false];
const msg = (...bytes) => [bytes, false];
const file = (name, data) => [msg(1, ...raw(name), 0, ...le(raw(data).length, 4)), [raw(data), true], msg(...digest(raw(data)))];
const extfile = (name, size, n) => msg(0x0d, ...raw(name), 0, ...le(size, 8), ...le(n, 4));
const extent = (at, data) => [msg(0x0e, ...le(at, 8), ...le(raw(data).length, 4)), [raw(data), true], msg(...digest(raw(data)))];
/** A raw SEGMENT frame of the pieces. */
function segment(...pieces) {
  const flat = pieces.flat(pieces.some((p) => Array.isArray(p[0]?.[0])) ? 1 : 0);
  const body = flat.flatMap(([b]) => b);
  const skel = flat.filter(([, data]) => !data).flatMap(([b]) => b);
  return [0x20, 0, ...le(body.length, 4), ...le(body.length, 4), ...digest(skel), ...body];
}
const archive = (...frames) => Uint8Array.from([66, 65, 82, 71, 69, 0, 2, 0, ...frames.flat()]);
/** Offsets: header 8, frame head 18, START (depth 0) 19: the first message is at 45. */
const FIRST = 45;

async function error(bytes, options) {
  for (const input of [bytes, chunked(bytes, 1)]) {
    try {
      for await (const e of unpack(input, options)) for await (const _ of e.extents());
    } catch (err) {
      if (input !== bytes) return err;
      continue;
    }
    assert.fail("decoding succeeded");
  }
}

describe("v2 check orders the vectors do not pin", () => {
  const cases = [
    ["a body ending after a record is truncated at its end", archive(segment(start(), msg(5, 0xc0, 1))), {}, "truncated", FIRST + 3],
    ["END inside a body is an unknown tag", archive(segment(start(), msg(0, ...le(0, 8)))), {}, "unknown-tag", FIRST],
    ["the reserved tag 0x0F is unknown", archive(segment(start(), msg(0x0f))), {}, "unknown-tag", FIRST],
    ["the reserved tag 0x12 is unknown", archive(segment(start(), msg(0x12))), {}, "unknown-tag", FIRST],
    ["a record where an EXTENT is due is bad-extent", archive(segment(start(), extfile("x", 8, 1), msg(5, 0xc0, 1))), {}, "bad-extent", FIRST + 15],
    ["records before an EXTENT with no EXTFILE open dangle", archive(segment(start(), msg(5, 0xc0, 1), ...extent(0, "a"))), {}, "dangling-perm", FIRST + 3],
    ["a START inside a body is bad-start", archive(segment(start(), ...file("a", "x"), start(1))), {}, "bad-start", FIRST + 16],
    ["LINKED on ROOT is misplaced-record", archive(segment(start(), msg(9), msg(0x11))), {}, "misplaced-record", FIRST + 1],
    ["ROOT in a second segment after an empty one is misplaced-root", archive(segment(start()), segment(start(), msg(0x11))), {}, "misplaced-root", FIRST + 18 + 19],
    ["a frame tag 0x00 before the index is unknown", archive(segment(start(), ...file("a", "x")), [0, ...le(1, 8)]), {}, "unknown-tag", FIRST + 16],
    ["an EXTENT's length counts against maxBytes, not the EXTFILE's size", archive(segment(start(), extfile("x", 1e9, 1), ...extent(5, "0123456789"))), { maxBytes: 5 }, "too-many-bytes", FIRST + 15],
    ["a zstd INDEX frame is unsupported-codec", archive(segment(start(), ...file("a", "x")), [0x21, 1, ...le(12, 4), ...le(40, 4), ...le(0, 8)]), {}, "unsupported-codec", FIRST + 16],
    ["the index while a directory is open is end-inside-dir, checked before the codec", archive(segment(start(), msg(2, 100, 0)), [0x21, 1, ...le(12, 4), ...le(40, 4), ...le(0, 8)]), {}, "end-inside-dir", FIRST + 3],
  ];
  for (const [what, bytes, options, code, offset] of cases) {
    test(what, async () => {
      const err = await error(bytes, options);
      assert.equal(err.code, code, err.message);
      assert.equal(err.offset, offset, err.message);
    });
  }
});

describe("the content of v2 files", () => {
  test("a sparse file reads as zeros in its holes through chunks() and bytes(), as extents through extents()", async () => {
    const size = 300000;
    const extents = [{ at: 70000, data: "abc" }, { at: size - 2, data: "yz" }];
    const full = new Uint8Array(size);
    for (const { at, data } of extents) full.set(raw(data), at);
    const bytes = await collect(packV2([{ path: "s", data: full, extents: extents.map((x) => ({ at: x.at, length: x.data.length })) }]));
    for await (const e of unpack(bytes)) assert.deepEqual(await e.bytes(), full);
    for await (const e of unpack(chunked(bytes, 5))) {
      let n = 0;
      for await (const c of e.chunks()) assert.ok(c.length <= 65536), (n += c.length);
      assert.equal(n, size);
    }
    for await (const e of unpack(bytes)) {
      const got = [];
      for await (const x of e.extents()) got.push({ at: x.at, data: new TextDecoder().decode(await x.bytes()) });
      assert.deepEqual([e.size, e.extentCount, got], [size, 2, extents]);
    }
  });

  test("a file without holes is one extent; content is gone once the iteration moves on", async () => {
    const bytes = await collect(packV2([{ path: "a", data: "hello" }, { path: "b", data: "" }]));
    const seen = [];
    let first;
    for await (const e of unpack(bytes)) {
      first ??= e;
      const xs = [];
      for await (const x of e.extents()) xs.push([x.at, x.length, new TextDecoder().decode(await x.bytes())]);
      seen.push([e.path, xs]);
    }
    assert.deepEqual(seen, [["a", [[0, 5, "hello"]]], ["b", []]]);
    await assert.rejects(first.bytes(), /no longer available/);
  });

  test("a FILE whose digest fails gives none of its data when it arrives whole", async () => {
    const [{ bytes }] = loadVectors("v2/invalid").filter((v) => v.name == "file-digest");
    const got = [];
    await assert.rejects(
      (async () => {
        for await (const e of unpack(bytes)) for await (const c of e.chunks()) got.push(c);
      })(),
      (e) => e.code == "bad-digest" && /"a"/.test(e.message),
    );
    assert.deepEqual(got, []);
  });
});
