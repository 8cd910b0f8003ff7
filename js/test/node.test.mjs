// barge-archive/node: fromPath walks a real tree.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, truncateSync, appendFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { pack, unpack } from "barge-archive";
import { fromPath } from "barge-archive/node";
import { collect, expectedTree, hex, oddTree, writeTree } from "./helpers.mjs";

const tmp = mkdtempSync(join(tmpdir(), "barge-node-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

test("fromPath → pack → unpack gives the tree: odd names, empty dirs, modes", async () => {
  const root = join(tmp, "odd");
  const spec = oddTree(500);
  writeTree(root, spec);
  const got = [];
  for await (const e of unpack(pack(fromPath(root)))) {
    const entry = { path_hex: hex(e.pathBytes), kind: e.kind, mode: e.mode };
    if (e.kind === "file") entry.sha = (await import("node:crypto")).createHash("sha256").update(await e.bytes()).digest("hex");
    got.push(entry);
  }
  got.sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
  assert.deepEqual(got, expectedTree(spec));
});

test("fromPath gives string paths when UTF-8, bytes otherwise, and modes", async () => {
  const root = join(tmp, "paths");
  writeTree(root, [{ path: "é", dir: true, mode: 0o700 }, { path: Buffer.from([0x78, 0xff]), data: "x", mode: 0o755 }]);
  const entries = [];
  for await (const e of fromPath(root)) entries.push(e);
  entries.sort((a, b) => (hex(Buffer.from(a.path)) < hex(Buffer.from(b.path)) ? -1 : 1));
  assert.deepEqual(entries.map((e) => [e.path, e.mode, e.dir ?? e.size]), [
    [new Uint8Array([0x78, 0xff]), 0o755, 1],
    ["é", 0o700, true],
  ]);
});

test("symlinks and fifos are skipped with a warning", async () => {
  const root = join(tmp, "special");
  writeTree(root, [{ path: "real", data: "r" }]);
  symlinkSync("real", join(root, "link"));
  symlinkSync("/etc", join(root, "dirlink"));
  execFileSync("mkfifo", [join(root, "fifo")]);
  const warnings = [];
  const paths = [];
  for await (const e of fromPath(root, { onWarning: (w) => warnings.push(`${w.kind} ${w.path}`) })) paths.push(e.path);
  assert.deepEqual(paths, ["real"]);
  assert.deepEqual(warnings.sort(), ["fifo fifo", "symlink dirlink", "symlink link"]);
});

test("a file that changes size after the walk fails the pack, naming it", async () => {
  for (const change of [(p) => appendFileSync(p, "more"), (p) => truncateSync(p, 1)]) {
    const root = join(tmp, `changing-${Math.random()}`);
    writeTree(root, [{ path: "f", data: "0123456789" }]);
    const entries = [];
    for await (const e of fromPath(root)) entries.push(e);
    change(join(root, "f"));
    await assert.rejects(collect(pack(entries)), { code: "size-mismatch", message: /"f"/ });
  }
});

test("an unreadable directory is an error naming it", async () => {
  await assert.rejects(collect(pack(fromPath(join(tmp, "does-not-exist")))), /ENOENT.*does-not-exist/);
});
