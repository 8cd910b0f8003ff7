// Cross-language round trips against the Rust CLI ($BARGE_BIN): JS pack → barge
// unpack, barge pack → JS unpack, and byte-identical output of both packers.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import { pack, packV2 } from "barge-archive";
import { fromPath } from "barge-archive/node";
import { VECTORS, bargeSupport, collect, decodeTree, expectedTree, kindTree, loadVectors, oddTree, readTree, run, specEntries, withoutSetId, writeTree } from "./helpers.mjs";

const BARGE = process.env.BARGE_BIN;
const skip = BARGE ? false : "BARGE_BIN is not set: set it to the barge binary (./scripts/build; target/barge) to run the cross-language tests";
if (BARGE && !existsSync(BARGE)) throw new Error(`BARGE_BIN=${BARGE} does not exist`);

const tmp = mkdtempSync(join(tmpdir(), "barge-cross-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = (name) => join(tmp, `${name}-${n++}`);

/** Lands a stream or buffer with `barge unpack - DEST` and returns readTree(DEST). */
async function bargeUnpack(input, options) {
  const dest = fresh("dest");
  const r = await run(BARGE, ["unpack", "-", dest], { input });
  assert.equal(r.code, 0, `barge unpack failed: ${r.stderr}`);
  return readTree(dest, options);
}

/**
 * A landed tree with the mtimes the archive recorded only: entries without one
 * get the landing time, and times outside what every Linux filesystem holds
 * (ext4: 1901 to 2446) are clamped by it, so those are not compared.
 */
function recordedTimes(landed, want) {
  const timed = new Set(want.filter((e) => e.mtime && Math.abs(Number(e.mtime.sec)) < 2 ** 31).map((e) => e.path_hex));
  const keep = (tree) => tree.map(({ mtime, ...e }) => (timed.has(e.path_hex) ? { ...e, mtime } : e));
  return [keep(landed), keep(want)];
}

/** Runs `barge pack ARGS... SRC -o -` and returns the archive. */
async function bargePack(src, ...args) {
  const r = await run(BARGE, ["pack", ...args, src, "-o", "-"]);
  assert.equal(r.code, 0, `barge pack failed: ${r.stderr}`);
  return new Uint8Array(r.stdout);
}

const { reads, lands, writes, readsV2 } = BARGE ? await bargeSupport(BARGE) : {};
const needsV2 = skip || (!readsV2 && "the barge at BARGE_BIN does not read format 2: build it from the v2 branch (cargo build --release -p barge-cli)");
const needs = (what, ok) => (skip || ok ? skip : `the barge at BARGE_BIN does not ${what} extended archives (header flags 1): build it from a tree with issue 14 merged`);

describe("cross-language round trips with the Rust CLI", { skip }, () => {
  for (const [label, files] of [["odd names, empty dirs, modes", 0], ["10,000 files", 10000]]) {
    test(`JS pack (core, times: false) → barge unpack: ${label}`, async () => {
      const spec = oddTree(files);
      assert.deepEqual(await bargeUnpack(pack(specEntries(spec), { times: false })), withoutSetId(expectedTree(spec)));
    });

    test(`barge pack → JS unpack, and both packers write the same bytes: ${label}`, { skip: needs("write", writes) }, async () => {
      const src = fresh("src");
      writeTree(src, oddTree(files));
      const archive = await bargePack(src);
      assert.deepEqual(await decodeTree(archive, { times: true }), readTree(src, { times: true }));
      const ours = await collect(pack(fromPath(src)));
      assert.ok(Buffer.from(ours).equals(archive), `JS and Rust archives of the same tree differ (${ours.length} vs ${archive.length} bytes)`);
    });
  }

  test("barge pack → JS unpack, and both packers write the same bytes: every kind fromPath records", { skip: needs("write", writes) }, async () => {
    const src = fresh("src");
    writeTree(src, kindTree());
    const archive = await bargePack(src);
    assert.deepEqual(await decodeTree(archive, { times: true }), readTree(src, { times: true }));
    const ours = await collect(pack(fromPath(src)));
    assert.equal(Buffer.from(ours).toString("hex"), Buffer.from(archive).toString("hex"));
  });

  test("JS pack (every kind, mtimes to the nanosecond) → barge unpack", { skip: needs("land", lands) }, async () => {
    const spec = kindTree();
    const [landed, want] = recordedTimes(await bargeUnpack(pack(specEntries(spec)), { times: true }), withoutSetId(expectedTree(spec, { times: true })));
    assert.deepEqual(landed, want);
  });

  test("JS fromPath → pack → barge unpack reproduces a tree on disk, symlinks, hard links and mtimes included", { skip: needs("land", lands) }, async () => {
    const src = fresh("src");
    const odd = oddTree(200).map((e) => ({ ...e, path: Buffer.concat([Buffer.from("odd/"), Buffer.from(e.path)]) }));
    writeTree(src, [...kindTree(), { path: "odd", dir: true }, ...odd]);
    assert.deepEqual(await bargeUnpack(pack(fromPath(src)), { times: true }), withoutSetId(readTree(src, { times: true })));
  });

  test("barge pack -a → JS unpack of a tree with every kind: owners, xattrs, devices", { skip: needs("write", writes) }, async () => {
    const src = fresh("src");
    writeTree(src, [...kindTree(), { path: "null", device: ["char", 1, 3] }, { path: "loop", device: ["block", 7, 200] }]);
    // barge pack -a reads the xattrs of directories and regular files (not of symlinks).
    const xattrs = [["dir/file", "user.comment", "hello"], ["dir/file", "trusted.t", "root only"], ["dir", "user.a", ""]];
    const script = "import os, sys\nfor p, n, v in zip(*[iter(sys.argv[1:])] * 3): os.setxattr(p, n, v.encode(), follow_symlinks=False)";
    const set = await run("python3", ["-c", script, ...xattrs.flatMap(([p, name, v]) => [join(src, p), name, v])]);
    assert.equal(set.code, 0, set.stderr);
    const archive = await bargePack(src, "-a");
    const tree = readTree(src, { times: true });
    assert.deepEqual(await decodeTree(archive, { times: true }), tree);
    assert.deepEqual(new Set(tree.map((e) => e.kind)), new Set(["dir", "file", "symlink", "fifo", "char", "block"]));
    const { unpack } = await import("barge-archive");
    const seen = [];
    for await (const e of unpack(archive)) {
      if (e.kind !== "hardlink") assert.deepEqual(e.owner, { uid: 0, gid: 0 }, e.path);
      for (const x of e.xattrs ?? []) seen.push([e.path, x.name, new TextDecoder().decode(x.value)]);
    }
    assert.deepEqual(seen.filter(([, name]) => !name.startsWith("security.")).sort(), xattrs.sort());
  });

  test("barge unpack lands every valid vector as its entries say", { skip: needs("land", lands) }, async () => {
    for (const { name, bytes, meta } of loadVectors("valid")) {
      if (meta.entries.some((e) => e.kind === "char" || e.kind === "block" || e.owner || e.xattrs)) continue; // owners, xattrs, devices: a lander's policy
      const spec = meta.entries.map((e) => ({
        path: Buffer.from(e.path_hex, "hex"),
        dir: e.kind === "dir",
        fifo: e.kind === "fifo",
        ...(e.kind === "file" && { data: Buffer.from(e.data_hex, "hex") }),
        ...(e.kind === "symlink" && { symlink: Buffer.from(e.target_hex, "hex") }),
        ...(e.kind === "hardlink" && { link: Buffer.from(meta.entries[e.link_index].path_hex, "hex") }),
        mode: e.mode,
        mtime: e.mtime,
      }));
      const [landed, want] = recordedTimes(await bargeUnpack(bytes, { times: true }), withoutSetId(expectedTree(spec, { times: true })));
      assert.deepEqual(landed, want, name);
    }
  });

  test("JS packV2 (every kind, ns mtimes, a 9 MiB file, a sparse file, root metadata) → barge unpack", { skip: needsV2 }, async () => {
    const big = Buffer.alloc(9 << 20).map((_, i) => i % 253);
    const sparse = Buffer.alloc(12 << 20);
    sparse.fill(7, 5 << 20, 6 << 20), (sparse[sparse.length - 1] = 1);
    const extra = [{ path: "big", data: big }, { path: "sparse", data: sparse }];
    const spec = [...kindTree(), ...extra];
    const entries = [...specEntries(kindTree()), { path: "big", data: big }, { path: "sparse", data: sparse, extents: [{ at: 5 << 20, length: 1 << 20 }, { at: sparse.length - 1, length: 1 }] }];
    const archive = await collect(packV2(entries, { root: { mode: 0o700, mtime: { sec: 978307200, nsec: 5 } } }));
    const file = fresh("archive");
    writeFileSync(file, archive);
    // From the file (mapped) and from a pipe.
    for (const args of [[file], ["-"]]) {
      const dest = fresh("dest");
      const r = await run(BARGE, ["unpack", ...args, dest], { input: archive });
      assert.equal(r.code, 0, `barge unpack ${args.join(" ")} failed: ${r.stderr}`);
      const [landed, want] = recordedTimes(readTree(dest, { times: true }), withoutSetId(expectedTree(spec, { times: true })));
      assert.deepEqual(landed, want);
      // The root's record applies to the destination barge created.
      const st = statSync(dest, { bigint: true });
      assert.deepEqual([Number(st.mode & 0o7777n), st.mtimeNs], [0o700, 978307200000000005n]);
    }
  });

  test("barge lands every v2 valid vector (zstd included) and rejects every invalid one at the JS decoder's offset", { skip: needsV2 }, async () => {
    for (const { name } of loadVectors("v2/valid")) {
      const path = join(VECTORS, "v2/valid", `${name}.barge`);
      for (const args of [[path], ["-"]]) {
        const r = await run(BARGE, ["unpack", ...args, fresh("dest")], { input: readFileSync(path) });
        assert.equal(r.code, 0, `${name} (${args[0]}): ${r.stderr}`);
      }
    }
    for (const { name, meta } of loadVectors("v2/invalid")) {
      const r = await run(BARGE, ["unpack", join(VECTORS, "v2/invalid", `${name}.barge`), fresh("dest")]);
      assert.notEqual(r.code, 0, `${name}: barge unpack accepted it`);
      assert.match(r.stderr, new RegExp(`\\b${meta.offset}\\b.*\\[${meta.error}\\]`), `${name}: ${r.stderr}`);
    }
  });

  test("barge rejects every invalid vector, at the same offset as the JS decoder", { skip: needs("read", reads) }, async () => {
    for (const { name, bytes, meta } of loadVectors("invalid")) {
      const o = meta.options ?? {};
      const limits = [];
      if (o.max_depth) limits.push("--max-depth", String(o.max_depth));
      if (o.max_entries) limits.push("--max-entries", String(o.max_entries));
      if (o.max_bytes) limits.push("--max-bytes", String(o.max_bytes));
      if (o.max_space) limits.push("--max-space", String(o.max_space));
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
