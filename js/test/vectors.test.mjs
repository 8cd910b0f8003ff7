// Every committed vector (testdata/vectors/): valid ones encode byte-exactly and
// decode to their entries (every field of the vector schema: kinds, 12-bit modes,
// times, owners, xattrs, links, targets, devices); invalid ones fail with the
// expected code and offset.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, test } from "node:test";
import { BargeError, pack, unpack } from "../dist/index.js";
import { chunked, collect, decodeAll, loadVectors, rootOf, unhex, vectorEntries } from "./helpers.mjs";

const valid = loadVectors("valid");
const invalid = loadVectors("invalid");
const valid2 = loadVectors("v2/valid");
const invalid2 = loadVectors("v2/invalid");

/** Vector entries without the text `path` (decodeAll compares path_hex). */
const strip = (entries) => entries.map(({ path, ...rest }) => rest);

/** pack's options for a vector: times (and so the extended header) exactly when the vector is extended. */
const packOptions = (meta) => ({ times: meta.extended === true });

const limits = (options) =>
  options && {
    maxDepth: options.max_depth,
    maxEntries: options.max_entries,
    maxBytes: options.max_bytes,
    maxSpace: options.max_space,
  };

async function decodeError(input, options) {
  try {
    // A sparse file's extents, not its content with the holes as zeros (200 MiB in sparse-200mib).
    for await (const e of unpack(input, limits(options))) {
      if (e.extentCount === undefined) await e.bytes();
      else for await (const x of e.extents()) await x.bytes();
    }
  } catch (err) {
    return err;
  }
  assert.fail("decoding succeeded");
}

/** A test that every proper prefix of the archive `bytes` fails as truncated at or before its end. */
function testPrefixesTruncated(name, bytes) {
  test(`${name}: every proper prefix fails as truncated at or before its end`, async () => {
    for (let n = 0; n < bytes.length; n++) {
      const err = await decodeError(bytes.subarray(0, n));
      assert.equal(err.code, "truncated", `prefix of ${n} bytes: ${err.message}`);
      assert.ok(err.offset <= n, `prefix of ${n} bytes: offset ${err.offset}`);
    }
  });
}

describe("valid vectors", () => {
  for (const { name, bytes, meta } of valid) {
    test(`${name}: pack reproduces the archive byte for byte`, async () => {
      assert.deepEqual(await collect(pack(vectorEntries(meta.entries), packOptions(meta))), bytes);
    });
    test(`${name}: pack of the entries in reverse order gives the same bytes`, async () => {
      assert.deepEqual(await collect(pack(vectorEntries(meta.entries).reverse(), packOptions(meta))), bytes);
    });
    test(`${name}: unpack gives the entries`, async () => {
      assert.deepEqual(await decodeAll(bytes), strip(meta.entries));
      for (const e of meta.entries) if (e.path === undefined) assert.throws(() => new TextDecoder("utf-8", { fatal: true }).decode(unhex(e.path_hex)));
    });
    test(`${name}: unpack from 7-byte chunks gives the same entries`, async () => {
      assert.deepEqual(await decodeAll(chunked(bytes, 7)), strip(meta.entries));
    });
    if (bytes.length < 4096) testPrefixesTruncated(name, bytes);
  }
});

describe("invalid vectors", () => {
  for (const { name, bytes, meta } of invalid) {
    test(`${name}: ${meta.error} at ${meta.offset}`, async () => {
      for (const input of [bytes, chunked(bytes, 1), chunked(bytes, 300)]) {
        const err = await decodeError(input, meta.options);
        assert.ok(err instanceof BargeError, String(err));
        assert.equal(err.code, meta.error, err.message);
        assert.equal(err.offset, meta.offset, err.message);
        assert.match(err.message, new RegExp(`^${meta.error} at offset ${meta.offset}\\b`));
      }
    });
  }
});

// Version 2. This decoder has no zstd: a zstd frame (codec 1) is `unsupported-codec` at the
// frame, once the frame head's own checks (`bad-frame`: codec, lengths, `stored` < `body`)
// have passed, since those need only the head. `bad-zstd` needs a decompressor, so where a
// vector expects it (zstd-window, zstd-bomb) this decoder reports `unsupported-codec` at the
// same offset; zstd-not-smaller stays `bad-frame`, and the valid zstd-segment fails at its
// first frame (offset 8).
const ZSTD = { "zstd-segment": 8 };
/** What this decoder reports for a vector's expected error. */
const expected2 = (meta) => (meta.error == "bad-zstd" ? { ...meta, error: "unsupported-codec" } : meta);

describe("v2 valid vectors", () => {
  for (const { name, bytes, meta } of valid2) {
    if (name in ZSTD) {
      test(`${name}: a zstd segment is unsupported-codec at its frame (${ZSTD[name]})`, async () => {
        for (const input of [bytes, chunked(bytes, 7)]) {
          const err = await decodeError(input);
          assert.equal(err.code, "unsupported-codec", err.message);
          assert.equal(err.offset, ZSTD[name]);
        }
      });
      continue;
    }
    const decode = async (input) => {
      const roots = [];
      const entries = await decodeAll(input, { onRoot: (r) => roots.push(rootOf(r)) });
      return { entries, root: roots.length ? roots : undefined };
    };
    const want = { entries: strip(meta.entries), root: meta.root && [meta.root] };
    test(`${name}: unpack gives the entries and the root`, async () => {
      assert.deepEqual(await decode(bytes), want);
    });
    test(`${name}: unpack from 1- and 7-byte chunks gives the same`, async () => {
      assert.deepEqual(await decode(chunked(bytes, 7)), want);
      if (bytes.length < 4096) assert.deepEqual(await decode(chunked(bytes, 1)), want);
    });
    if (bytes.length < 4096) testPrefixesTruncated(name, bytes);
  }
});

describe("v2 invalid vectors", () => {
  for (const { name, bytes, meta } of invalid2) {
    const { error, offset } = expected2(meta);
    test(`${name}: ${error} at ${offset}`, async () => {
      for (const input of [bytes, chunked(bytes, 1), chunked(bytes, 300)]) {
        const err = await decodeError(input, meta.options);
        assert.ok(err instanceof BargeError, String(err));
        assert.equal(err.code, error, err.message);
        assert.equal(err.offset, offset, err.message);
        assert.match(err.message, new RegExp(`^${error} at offset ${offset}\\b`));
      }
    });
  }
});

test("the vectors cover every error code of docs/FORMAT.md", () => {
  // unsupported-codec is what this decoder reports for the zstd vectors (see above).
  const codes = new Set([...invalid, ...invalid2].map((v) => v.meta.error).concat("unsupported-codec"));
  // The rows of the spec's table of codes: | `code` | meaning | offset |
  const spec = readFileSync(new URL("../../docs/FORMAT.md", import.meta.url), "utf8");
  const documented = [...spec.matchAll(/^\| `([a-z0-9-]+)` \|/gm)].map((m) => m[1]);
  assert.ok(documented.length >= 28, `only ${documented.length} codes found in docs/FORMAT.md`);
  assert.deepEqual([...codes].sort(), documented.sort());
});
