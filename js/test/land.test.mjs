// barge-archive/node's landWithBarge against the real barge ($BARGE_BIN); the
// tests of a missing or unrunnable barge run without it.
import assert from "node:assert/strict";
import { chmodSync, createReadStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Readable } from "node:stream";
import { after, describe, test } from "node:test";
import { BargeError, pack } from "barge-archive";
import { fromPath, landWithBarge, LandError } from "barge-archive/node";
import { archive, collect, documentedCodes, expectedTree, kindTree, msg, oddTree, readTree, withoutSetId, writeTree } from "./helpers.mjs";

const BARGE = process.env.BARGE_BIN;
const skip = BARGE ? false : "BARGE_BIN is not set: set it to the barge binary (./scripts/build; target/barge) to land with it";
if (BARGE && !existsSync(BARGE)) throw new Error(`BARGE_BIN=${BARGE} does not exist`);

const tmp = mkdtempSync(join(tmpdir(), "barge-land-"));
after(() => rmSync(tmp, { recursive: true, force: true }));
let n = 0;
const fresh = (name) => join(tmp, `${name}-${n++}`);

/** Runs `f` with process.env changed as `env` says (undefined deletes), then restores it. */
async function withEnv(env, f) {
  const saved = Object.fromEntries(Object.keys(env).map((k) => [k, process.env[k]]));
  const set = (vars) => Object.entries(vars).forEach(([k, v]) => (v === undefined ? delete process.env[k] : (process.env[k] = v)));
  set(env);
  try {
    return await f();
  } finally {
    set(saved);
  }
}

const DOCUMENTED = documentedCodes();

/**
 * Asserts that `promise` rejects with a LandError (a BargeError) whose message matches
 * `message` and whose code is `code`, listed in the README; returns the error.
 */
async function refused(promise, message, code) {
  const error = await promise.then(
    () => assert.fail("landWithBarge resolved"),
    (e) => e,
  );
  assert.ok(error instanceof LandError && error instanceof BargeError, `not a LandError: ${error?.stack}`);
  assert.match(error.message, message);
  assert.equal(error.code, code, error.message);
  assert.ok(DOCUMENTED.has(code), `${code} is not in the README's "Errors"`);
  return error;
}

describe("landWithBarge cannot run barge", () => {
  const archiveBytes = archive(0, msg.file("f", "x"), msg.end(1));

  test("not on PATH: says how to fix it", async () => {
    const empty = fresh("empty-path");
    mkdirSync(empty);
    const error = await withEnv({ PATH: empty, BARGE_BIN: undefined }, () => refused(landWithBarge(archiveBytes, fresh("dest")), /^barge was not found on PATH; install it or set BARGE_BIN$/, "barge-not-found"));
    assert.equal(error.cause.code, "ENOENT");
  });

  test("missing where BARGE_BIN or the option says", async () => {
    await withEnv({ BARGE_BIN: "/nonexistent/barge" }, () => refused(landWithBarge(archiveBytes, fresh("dest")), /^barge was not found at \/nonexistent\/barge \(from BARGE_BIN\)$/, "barge-not-found"));
    await refused(landWithBarge(archiveBytes, fresh("dest"), { barge: "/nonexistent/b" }), /^barge was not found at \/nonexistent\/b \(from the barge option\)$/, "barge-not-found");
  });

  test("not executable, or a directory", async () => {
    const file = fresh("not-exec");
    writeFileSync(file, "#!/bin/sh\n");
    chmodSync(file, 0o644);
    await refused(landWithBarge(archiveBytes, fresh("dest"), { barge: file }), /is not runnable: permission denied/, "barge-not-runnable");
    await refused(landWithBarge(archiveBytes, fresh("dest"), { barge: tmp }), /is not runnable: permission denied/, "barge-not-runnable");
  });

  test("a program that is not barge: its exit status and what it said, or that it printed no summary", async () => {
    const fails = fresh("fails");
    writeFileSync(fails, "#!/bin/sh\necho 'no such command: unpack' >&2\nexit 3\n", { mode: 0o755 });
    const error = await refused(landWithBarge(archiveBytes, fresh("dest"), { barge: fails }), /exited with status 3: no such command: unpack$/, "barge-failed");
    assert.equal(error.status, 3);
    await refused(landWithBarge(archiveBytes, fresh("dest"), { barge: "true" }), /^true \(from the barge option\) printed no JSON summary; is it barge\?/, "not-barge");
  });

  test("bad options and arguments are refused before anything runs, as coded TypeErrors", async () => {
    const opts = { barge: "/nonexistent/barge" };
    const option = (message) => ({ name: "TypeError", code: "bad-option", message });
    await assert.rejects(landWithBarge(archiveBytes, fresh("dest"), { ...opts, maxBytes: "1M --overwrite" }), option(/maxBytes must be/));
    await assert.rejects(landWithBarge(archiveBytes, fresh("dest"), { ...opts, maxEntries: -1 }), option(/maxEntries must be/));
    await assert.rejects(landWithBarge(archiveBytes, fresh("dest"), { ...opts, existing: "replace" }), option(/existing must be one of keep, skip, overwrite/));
    await assert.rejects(landWithBarge("text", fresh("dest"), opts), { name: "TypeError", code: "bad-argument", message: /the archive must be/ });
    await assert.rejects(landWithBarge(archiveBytes, "", opts), { name: "TypeError", code: "bad-argument", message: /dir must be/ });
  });
});

describe("landWithBarge lands with barge", { skip }, () => {
  const opts = { barge: BARGE };

  test("every input kind lands the tree, and the summary is barge's, its keys in camelCase", async () => {
    const src = fresh("src");
    const spec = oddTree(300);
    writeTree(src, spec);
    const bytes = await collect(pack(fromPath(src)));
    const file = fresh("archive");
    writeFileSync(file, bytes);
    const inputs = {
      "web ReadableStream": () => pack(fromPath(src)),
      Uint8Array: () => bytes,
      ArrayBuffer: () => bytes.slice().buffer,
      Blob: () => new Blob([bytes]),
      "Node Readable": () => createReadStream(file, { highWaterMark: 4096 }),
      "async iterable": () =>
        (async function* () {
          for (let i = 0; i < bytes.length; i += 1000) yield bytes.subarray(i, i + 1000);
        })(),
    };
    const files = spec.filter((e) => e.data !== undefined).length;
    for (const [label, input] of Object.entries(inputs)) {
      const dest = fresh("dest");
      const summary = await landWithBarge(input(), dest, opts);
      assert.deepEqual(readTree(dest), withoutSetId(expectedTree(spec)), label);
      assert.equal(summary.files, files, label);
      assert.ok(summary.confinement == "sandboxed" || typeof summary.confinement.unavailable == "string", label);
      assert.deepEqual(Object.keys(summary).sort(), ["bytes", "confinement", "dirs", "files", "hardLinks", "kept", "notRestored", "rootMode", "seconds", "specials", "symlinks"], label);
      assert.deepEqual(summary.notRestored, { devices: 0, hardLinks: 0, mergedDirs: 0, owners: 0, setid: 0, xattrs: 0 }, label);
    }
  });

  test("symlinks, hard links, fifos and ns mtimes land as barge lands them, setuid not without an owner", async () => {
    const src = fresh("kinds");
    writeTree(src, kindTree());
    const dest = fresh("dest");
    const summary = await landWithBarge(pack(fromPath(src)), dest, { ...opts, setid: true });
    assert.deepEqual(readTree(dest, { times: true }), withoutSetId(readTree(src, { times: true })));
    assert.ok(summary.symlinks > 0 && summary.hardLinks > 0 && summary.specials > 0);
    assert.equal(summary.notRestored.setid, 1);
  });

  test("a hostile archive is refused with barge's message, status and code, and a new DIR is not created", async () => {
    const dest = fresh("dest");
    const dotdot = archive(0, msg.dir(".."), msg.file("escaped", "x"), msg.pop, msg.end(2));
    const error = await refused(landWithBarge(dotdot, dest, opts), /^barge unpack exited with status 1: unpack into .+ failed; .+ was not created: archive byte 8: .*dot-name/, "dot-name");
    assert.deepEqual([error.status, error.kind, error.code, error.offset], [1, "format", "dot-name", 8]);
    assert.match(error.stderr, /^barge: error: /m);
    // A symlink out of DEST, then a file below it.
    const through = archive(1, msg.symlink("l", tmp), msg.dir("l"), msg.file("x", "x"), msg.pop, msg.end(3));
    await refused(landWithBarge(through, dest, opts), /duplicate-name/, "duplicate-name");
    assert.equal(existsSync(dest), false);
    // Cut inside a file's content: "short" to barge, truncated as unpack says it.
    const cut = archive(0, msg.file("a", "x".repeat(100)), msg.end(1)).subarray(0, 50);
    const e3 = await refused(landWithBarge(cut, dest, opts), /input ended after/, "truncated");
    assert.equal(e3.kind, "short");
    assert.equal(existsSync(dest), false);
    assert.deepEqual(
      readdirSync(tmp).filter((f) => f === "x" || f.startsWith(".")),
      [],
      "nothing landed beside DEST",
    );
  });

  test("limits are passed as flags: an archive over maxBytes or maxEntries is refused", async () => {
    const bytes = archive(0, msg.file("a", "x".repeat(100)), msg.file("b", "y"), msg.end(2));
    const dest = fresh("dest");
    const e1 = await refused(landWithBarge(bytes, dest, { ...opts, maxBytes: 50 }), /more than 50 bytes of file data \(see --max-bytes\)/, "too-many-bytes");
    assert.equal(e1.kind, "format");
    const e2 = await refused(landWithBarge(bytes, dest, { ...opts, maxEntries: 1 }), /--max-entries/, "too-many-entries");
    assert.equal(e2.kind, "format");
    const e3 = await refused(landWithBarge(bytes, dest, { ...opts, maxSpace: 4096 }), /--max-space/, "too-much-space");
    assert.equal(e3.kind, "format");
    assert.equal(existsSync(dest), false);
    assert.equal((await landWithBarge(bytes, dest, { ...opts, maxBytes: "1K", maxEntries: 2 })).bytes, 101);
  });

  test("existing entries: kept by default (an error coded exists), skipped or overwritten when asked; times: false", async () => {
    const dest = fresh("dest");
    await landWithBarge(archive(0, msg.file("a", "old"), msg.end(1)), dest, opts);
    const next = () => archive(1, msg.time(1000, 0), msg.file("a", "new"), msg.time(1000, 0), msg.file("b", "b"), msg.end(2));
    const e = await refused(landWithBarge(next(), dest, opts), /stopped: a: already exists/, "exists");
    assert.equal(e.kind, "exists");
    assert.equal((await landWithBarge(next(), dest, { ...opts, existing: "skip" })).kept, 1);
    assert.equal(readFileSync(join(dest, "a"), "utf8"), "old");
    await landWithBarge(next(), dest, { ...opts, existing: "overwrite", times: false });
    assert.equal(readFileSync(join(dest, "a"), "utf8"), "new");
    assert.ok(statSync(join(dest, "a")).mtimeMs > 1e12, "times: false leaves the landing time");
  });

  test("the archive is streamed with back-pressure: a stalled barge stalls the source", async () => {
    // A wrapper that starts the real barge only after a pause, so nothing reads stdin meanwhile.
    const slow = fresh("slow-barge");
    writeFileSync(slow, `#!/bin/sh\nsleep 1.5\nexec "${BARGE}" "$@"\n`, { mode: 0o755 });
    const size = 64 << 20;
    let pulled = 0;
    const source = new ReadableStream({
      pull(ctl) {
        const chunk = new Uint8Array(Math.min(1 << 16, size - pulled));
        pulled += chunk.length;
        ctl.enqueue(chunk);
        if (pulled === size) ctl.close();
      },
    }, { highWaterMark: 0 });
    const dest = fresh("dest");
    const landing = landWithBarge(pack([{ path: "big", stream: source, size }]), dest, { barge: slow });
    await new Promise((r) => setTimeout(r, 1000));
    assert.ok(pulled < 4 << 20, `${pulled} bytes pulled while nothing read them`);
    assert.equal((await landing).bytes, size);
    assert.equal(statSync(join(dest, "big")).size, size);
  });

  test("a source that fails: its error, barge's refusal of the cut-off archive, and no DIR", async () => {
    const dest = fresh("dest");
    const whole = archive(0, msg.file("a", "x".repeat(10000)), msg.end(1));
    const boom = new Error("disk on fire");
    const input = (async function* () {
      yield whole.subarray(0, 5000);
      throw boom;
    })();
    const error = await refused(landWithBarge(input, dest, opts), /^reading the archive failed: disk on fire \(barge exited with status 1: .*truncated/, "source-failed");
    assert.equal(error.cause, boom);
    assert.equal(existsSync(dest), false);
  });

  test("an abort cuts the archive off: rejects as aborted, the signal's reason as cause, and lands nothing", async () => {
    const dest = fresh("dest");
    const controller = new AbortController();
    const input = Readable.from(
      (async function* () {
        yield archive(0, msg.file("a", "x".repeat(10)));
        controller.abort();
        await new Promise((r) => setTimeout(r, 50));
        yield new Uint8Array(10);
      })(),
    );
    const error = await refused(landWithBarge(input, dest, { ...opts, signal: controller.signal }), /^landing into .+ aborted: AbortError/, "aborted");
    assert.equal(error.cause, controller.signal.reason);
    assert.equal(existsSync(dest), false);
    const reason = new Error("shutting down");
    const early = await refused(landWithBarge(new Uint8Array(), fresh("dest"), { ...opts, signal: AbortSignal.abort(reason) }), /aborted: Error: shutting down$/, "aborted");
    assert.equal(early.cause, reason);
  });
});
