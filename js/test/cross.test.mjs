// Cross-language round trips against the Rust CLI ($BARGE_BIN): JS pack → barge
// unpack, barge pack → JS unpack, and byte-identical output of both packers.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { pack, unpack } from "barge-archive";
import { fromPath } from "barge-archive/node";
import { VECTORS, collect, expectedTree, hex, loadVectors, oddTree, readTree, run, specEntries, writeTree } from "./helpers.mjs";

const BARGE = process.env.BARGE_BIN;
const skip = BARGE ? false : "BARGE_BIN is not set: set it to the barge binary (./scripts/build; target/barge) to run the cross-language tests";
if (BARGE && !existsSync(BARGE)) throw new Error(`BARGE_BIN=${BARGE} does not exist`);

const tmp = mkdtempSync(join(tmpdir(), "barge-cross-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = (name) => join(tmp, `${name}-${n++}`);

/** JS-decodes an archive into the readTree() shape, as if landed with umask 022. */
async function decodeTree(input) {
  const out = [];
  for await (const e of unpack(input)) {
    const entry = { path_hex: hex(e.pathBytes), kind: e.kind, mode: e.mode & ~0o022 };
    if (e.kind === "file") entry.sha = createHash("sha256").update(await e.bytes()).digest("hex");
    out.push(entry);
  }
  return out.sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
}

/** Lands a stream or buffer with `barge unpack - DEST` and returns readTree(DEST). */
async function bargeUnpack(input) {
  const dest = fresh("dest");
  const r = await run(BARGE, ["unpack", "-", dest], { input });
  assert.equal(r.code, 0, `barge unpack failed: ${r.stderr}`);
  return readTree(dest);
}

describe("cross-language round trips with the Rust CLI", { skip }, () => {
  for (const [label, files] of [["odd names, empty dirs, modes", 0], ["10,000 files", 10000]]) {
    test(`JS pack → barge unpack: ${label}`, async () => {
      const spec = oddTree(files);
      assert.deepEqual(await bargeUnpack(pack(specEntries(spec))), expectedTree(spec, 0o022));
    });

    test(`barge pack → JS unpack, and both packers write the same bytes: ${label}`, async () => {
      const src = fresh("src");
      const spec = oddTree(files);
      writeTree(src, spec);
      const r = await run(BARGE, ["pack", src, "-o", "-"]);
      assert.equal(r.code, 0, `barge pack failed: ${r.stderr}`);
      const archive = new Uint8Array(r.stdout);
      assert.deepEqual(await decodeTree(archive), expectedTree(spec, 0o022));
      const ours = await collect(pack(fromPath(src)));
      assert.ok(Buffer.from(ours).equals(r.stdout), `JS and Rust archives of the same tree differ (${ours.length} vs ${r.stdout.length} bytes)`);
    });
  }

  test("JS fromPath → pack → barge unpack reproduces a tree on disk", async () => {
    const src = fresh("src");
    const spec = oddTree(200);
    writeTree(src, spec);
    assert.deepEqual(await bargeUnpack(pack(fromPath(src))), readTree(src));
  });

  test("barge unpack lands every valid vector as its entries say", async () => {
    for (const { name, bytes, meta } of loadVectors("valid")) {
      const want = meta.entries
        .map((e) => ({
          path_hex: e.path_hex,
          kind: e.kind,
          mode: e.mode & ~0o022,
          ...(e.kind === "file" ? { sha: createHash("sha256").update(Buffer.from(e.data_hex, "hex")).digest("hex") } : {}),
        }))
        .sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
      assert.deepEqual(await bargeUnpack(bytes), want, name);
    }
  });

  test("barge rejects every invalid vector, at the same offset as the JS decoder", async () => {
    for (const { name, bytes, meta } of loadVectors("invalid")) {
      const o = meta.options ?? {};
      const limits = [];
      if (o.max_depth) limits.push("--max-depth", String(o.max_depth));
      if (o.max_entries) limits.push("--max-entries", String(o.max_entries));
      if (o.max_bytes) limits.push("--max-bytes", String(o.max_bytes));
      // From the file (mapped): the message gives the offset (the CLI does not print the code).
      const mapped = await run(BARGE, ["unpack", ...limits, join(VECTORS, "invalid", `${name}.barge`), fresh("dest")]);
      assert.notEqual(mapped.code, 0, `${name}: barge unpack accepted it`);
      assert.match(mapped.stderr, new RegExp(`\\b${meta.offset}\\b`), `${name}: stderr does not give offset ${meta.offset}`);
      // From a pipe (streamed): rejected too.
      const piped = await run(BARGE, ["unpack", ...limits, "-", fresh("dest")], { input: bytes });
      assert.notEqual(piped.code, 0, `${name}: barge unpack - accepted it`);
      assert.match(piped.stderr, /^barge: error: .+$/m, `${name}: no error line`);
    }
  });
});
