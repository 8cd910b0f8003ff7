// Every committed vector (testdata/vectors/): valid ones encode byte-exactly and
// decode to their entries; invalid ones fail with the expected code and offset.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { BargeError, pack, unpack } from "../dist/index.js";
import { chunked, collect, decodeAll, loadVectors, unhex } from "./helpers.mjs";

const valid = loadVectors("valid");
const invalid = loadVectors("invalid");

/** The vector's entries as `pack` input; the raw PERM (if any) is the mode. */
const packEntries = (entries) =>
  entries.map((e) => {
    const base = { path: e.path ?? unhex(e.path_hex), mode: e.perm ?? e.mode };
    return e.kind === "dir" ? { ...base, dir: true } : { ...base, data: unhex(e.data_hex) };
  });

/** Vector entries without the text `path` (decodeAll compares path_hex). */
const strip = (entries) => entries.map(({ path, ...rest }) => rest);

const limits = (options) =>
  options && { maxDepth: options.max_depth, maxEntries: options.max_entries, maxBytes: options.max_bytes };

async function decodeError(input, options) {
  try {
    for await (const e of unpack(input, limits(options))) await e.bytes();
  } catch (err) {
    return err;
  }
  assert.fail("decoding succeeded");
}

describe("valid vectors", () => {
  for (const { name, bytes, meta } of valid) {
    test(`${name}: pack reproduces the archive byte for byte`, async () => {
      assert.deepEqual(await collect(pack(packEntries(meta.entries))), bytes);
    });
    test(`${name}: pack of the entries in reverse order gives the same bytes`, async () => {
      assert.deepEqual(await collect(pack(packEntries(meta.entries).reverse())), bytes);
    });
    test(`${name}: unpack gives the entries`, async () => {
      assert.deepEqual(await decodeAll(bytes), strip(meta.entries));
      for (const e of meta.entries) if (e.path === undefined) assert.throws(() => new TextDecoder("utf-8", { fatal: true }).decode(unhex(e.path_hex)));
    });
    test(`${name}: unpack from 7-byte chunks gives the same entries`, async () => {
      assert.deepEqual(await decodeAll(chunked(bytes, 7)), strip(meta.entries));
    });
    if (bytes.length < 4096) {
      test(`${name}: every proper prefix fails as truncated at or before its end`, async () => {
        for (let n = 0; n < bytes.length; n++) {
          const err = await decodeError(bytes.subarray(0, n));
          assert.equal(err.code, "truncated", `prefix of ${n} bytes: ${err.message}`);
          assert.ok(err.offset <= n, `prefix of ${n} bytes: offset ${err.offset}`);
        }
      });
    }
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

test("the vectors cover every error code of docs/FORMAT.md", () => {
  const codes = new Set(invalid.map((v) => v.meta.error));
  const documented = [
    "bad-magic", "truncated", "bad-version", "bad-flags", "unknown-tag", "dangling-perm", "end-inside-dir",
    "count-mismatch", "trailing-bytes", "pop-at-root", "bad-mode", "empty-name", "name-too-long", "slash-in-name",
    "dot-name", "noncanonical-file64", "duplicate-name", "too-deep", "too-many-entries", "too-many-bytes",
  ];
  assert.deepEqual([...codes].sort(), documented.sort());
});
