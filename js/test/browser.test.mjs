// Real-browser tests: Debian's Chromium (/usr/bin/chromium) driven by playwright-core
// opens the upload page of `$BARGE_BIN serve` (the page and the package's bundle are in the
// binary), over HTTPS with HTTP/2 (where the page streams the archive) and over plain
// HTTP/1.1 (where it uploads a built Blob). Without BARGE_BIN these are skipped; without
// Chromium they fail, unless BARGE_SKIP_BROWSER=1.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { readTree, run, writeTree } from "./helpers.mjs";

const CHROMIUM = "/usr/bin/chromium";
const FLAGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];
const BARGE = process.env.BARGE_BIN;
const TOKEN = "browser-test-token-0123456789";
const skip =
  process.env.BARGE_SKIP_BROWSER === "1"
    ? "BARGE_SKIP_BROWSER=1"
    : !BARGE
      ? "BARGE_BIN is not set: set it to the barge binary (./scripts/build; target/barge) to run the browser tests against barge serve"
      : false;
if (!skip && !existsSync(CHROMIUM)) {
  throw new Error(`${CHROMIUM} is missing: apt-get install -y chromium (or set BARGE_SKIP_BROWSER=1 to skip the browser tests)`);
}

/**
 * Starts `barge serve DEST --listen 127.0.0.1:0 ...args` with the test token; resolves
 * { url, dest, log() (its stderr so far), close() } once it listens.
 */
function serve(dest, args = []) {
  const child = spawn(BARGE, ["serve", dest, "--listen", "127.0.0.1:0", ...args], {
    env: { ...process.env, BARGE_TOKEN: TOKEN },
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`barge serve did not start: ${stderr}`)), 20000);
    child.stderr.on("data", (chunk) => {
      stderr += chunk;
      const url = /listening on (\S+)/.exec(stderr)?.[1];
      if (url && timer) {
        clearTimeout(timer);
        resolve({
          url,
          dest,
          log: () => stderr,
          close: () => new Promise((done) => (child.exitCode !== null ? done() : (child.once("exit", done), child.kill("SIGTERM")))),
        });
      }
    });
    child.on("error", reject);
  });
}

/** The names in `dir`, hidden ones too. */
const names = (dir) => (existsSync(dir) ? readdirSync(dir).sort() : []);

/** Waits up to 10 s for `dir` to hold exactly `want` (a cancelled landing cleans up after). */
async function assertHolds(dir, want, what) {
  for (let i = 0; i < 200 && JSON.stringify(names(dir)) !== JSON.stringify(want); i++) await new Promise((r) => setTimeout(r, 50));
  assert.deepEqual(names(dir), want, `${what}: DEST holds something else`);
}

/** Small files in nested directories (none empty: browsers list files only; all 0644: a
 * browser's File has no mode), a larger one and a non-ASCII name. */
function manyFiles(count) {
  const spec = [];
  for (let d = 0; d < 20; d++) {
    spec.push({ path: `d${d}`, dir: true });
    for (let s = 0; s < 5; s++) spec.push({ path: `d${d}/s${s}`, dir: true });
  }
  for (let i = 0; i < count; i++) {
    const dir = `d${i % 20}/s${(i >> 5) % 5}`;
    spec.push({ path: `${dir}/file-${i}.txt`, data: `file ${i}\n`.repeat(i % 50) });
  }
  spec.push({ path: "big.bin", data: Buffer.alloc(5 << 20, 7) });
  spec.push({ path: "ünïcödé 日本.txt", data: "crab 🦀" });
  return spec;
}

describe("the upload page of barge serve, in Chromium", { skip }, () => {
  let tmp, context;

  before(async () => {
    const { chromium } = await import("playwright-core");
    tmp = mkdtempSync(join(tmpdir(), "barge-browser-"));
    context = await chromium.launchPersistentContext(join(tmp, "profile"), {
      executablePath: CHROMIUM,
      headless: true,
      args: FLAGS,
      ignoreHTTPSErrors: true,
    });
  });

  after(async () => {
    await context?.close();
    if (tmp) rmSync(tmp, { recursive: true, force: true });
  });

  /** A new page at the server's address with `token` in its fragment. */
  async function open(server, token = TOKEN) {
    const page = await context.newPage();
    page.on("pageerror", (err) => console.error("page error:", err));
    await page.goto(`${server.url}#token=${token}`);
    await page.waitForFunction(() => typeof window.bargeUpload === "function");
    return page;
  }

  /** Picks `folder` with the directory input, clicks Upload, and waits for the outcome. */
  async function uploadThroughPage(page, folder) {
    await page.setInputFiles("#folder", folder);
    await page.waitForFunction(() => !document.getElementById("upload").disabled);
    await page.evaluate(() => delete window.lastUpload);
    await page.click("#upload");
    await page.waitForFunction(() => window.lastUpload, null, { timeout: 120000 });
    return page.evaluate(() => ({
      ...window.lastUpload,
      result: window.lastUpload.result,
      shown: document.getElementById("result").textContent,
      error: document.getElementById("error").textContent,
    }));
  }

  test("a folder of thousands of files, picked and streamed over HTTP/2, lands identical", async () => {
    const fixture = join(tmp, "fixture");
    writeTree(fixture, manyFiles(3000));
    const server = await serve(join(tmp, "uploads"));
    try {
      const page = await open(server);
      // The token came from the fragment, which left the address bar.
      assert.equal(await page.inputValue("#token"), TOKEN);
      assert.ok(!page.url().includes(TOKEN), page.url());
      const r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 200, JSON.stringify(r));
      assert.equal(r.mode, "stream", "Chromium on HTTP/2 streams the request body");
      assert.equal(r.result.files, 3002);
      assert.match(r.shown, new RegExp(`^Uploaded 3002 files .* as “${r.result.name}”\\.$`));
      assert.equal(r.error, "");
      assert.ok(!/\/tmp|uploads/.test(r.shown), "no server path shown");
      // webkitRelativePath starts with the picked folder's name.
      assert.deepEqual(readTree(join(server.dest, r.result.name, "fixture")), readTree(fixture));
      // The progress followed the bytes sent, to the end.
      const [value, max] = await page.evaluate(() => [document.getElementById("progress").value, document.getElementById("progress").max]);
      assert.ok(value === max && max > 5 << 20, `${value} of ${max}`);
      assert.match(await page.textContent("#rate"), /^[\d.]+ MiB sent in [\d.]+ s, .*\/s$/);
      assert.ok(!server.log().includes(TOKEN), "the token in the log");
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("a wrong token and an upload over the limit are refused, said so, and leave nothing", async () => {
    const fixture = join(tmp, "small");
    writeTree(fixture, [{ path: "a.txt", data: "a" }, { path: "big.bin", data: Buffer.alloc(2 << 20, 1) }]);
    const dest = join(tmp, "refused");
    const server = await serve(dest, ["--max-bytes", "1M"]);
    try {
      const page = await open(server, "not-the-token-0123456789");
      let r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 401);
      assert.match(r.error, /refused the token/);
      await page.fill("#token", TOKEN);
      r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 413, JSON.stringify(r));
      assert.match(r.error, /^Too large: .*limit of 1\.0 MiB.*Nothing was kept\.$/);
      assert.ok(!r.error.includes(dest), "no server path shown");
      await assertHolds(dest, [], "refused uploads");
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("a wrong token is refused before packing; the page counts folders, fills the bar, offers another upload", async () => {
    const fixture = join(tmp, "counted");
    writeTree(fixture, [
      { path: "a", dir: true },
      { path: "a/b", dir: true },
      { path: "a/b/y.txt", data: "y" },
      { path: "a/x.txt", data: "x" },
      { path: "c", dir: true },
      { path: "c/z.txt", data: "z".repeat(5000) },
      { path: "empty", dir: true },
    ]);
    const dest = join(tmp, "counted-uploads");
    const server = await serve(dest);
    try {
      const page = await open(server, "not-the-token-0123456789");
      const bar = () => page.evaluate(() => [document.getElementById("progress").value, document.getElementById("progress").max, document.getElementById("rate").textContent]);
      let r = await uploadThroughPage(page, fixture);
      // The selection: the picked folder, a, a/b and c; the empty one is not listed, and said so.
      assert.equal(await page.textContent("#selection"), "Picked: 3 files in 4 folders, 4.9 KiB.");
      assert.match(await page.textContent("#skipped"), /^Empty folders are left out/);
      assert.equal(r.status, 401, JSON.stringify(r));
      assert.equal(r.mode, "check", "refused before packing");
      assert.match(r.error, /refused the token/);
      assert.match(server.log(), /GET \/upload 401 /);
      assert.doesNotMatch(server.log(), /POST \/upload/, "nothing was sent");
      assert.deepEqual(await bar(), [0, 1, ""], "the bar is empty again");

      await page.fill("#token", TOKEN);
      r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 200, JSON.stringify(r));
      const [value, max, rate] = await bar();
      assert.ok(value === max && max > 5000, `full at the end: ${value} of ${max}`);
      assert.match(rate, /sent in [\d.]+ s/);
      assert.doesNotMatch(rate, /left/);
      assert.ok(await page.isVisible("#again"), "Upload another is offered");
      assert.ok(await page.isDisabled("#upload"), "the same folder is not sent twice by a click");
      await page.click("#again");
      assert.equal(await page.textContent("#selection"), "Nothing selected.");
      assert.deepEqual(await bar(), [0, 1, ""]);
      assert.equal(await page.textContent("#result"), "");
      assert.ok(await page.isHidden("#again"));
      assert.equal(await page.inputValue("#token"), TOKEN, "the token stays");
      // Another folder, picked anew, goes up under the next number.
      r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 200, JSON.stringify(r));
      assert.deepEqual(names(dest).map((n) => n.replace(/.*-/, "")), ["1", "2"]);

      // The page's icon is served (no 404 in the log for it).
      const icon = await page.evaluate(() => fetch(document.querySelector("link[rel=icon]").href).then((res) => [res.status, res.headers.get("content-type")]));
      assert.deepEqual(icon, [200, "image/svg+xml"]);
      const favicon = await page.evaluate(() => fetch("/favicon.ico").then((res) => res.status));
      assert.equal(favicon, 200);
      assert.doesNotMatch(server.log(), / 404 /);
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("a real drag of a folder tree and a file is counted with its empty folders and lands identical", async () => {
    const fixture = join(tmp, "to-drag");
    const tree = [
      { path: "tree", dir: true },
      { path: "tree/a.txt", data: "a" },
      { path: "tree/empty", dir: true },
      { path: "tree/sub", dir: true },
      { path: "tree/sub/ünïcödé 日本.txt", data: "crab 🦀" },
    ];
    writeTree(fixture, [...tree, { path: "loose.txt", data: "loose" }]);
    const dest = join(tmp, "dragged-uploads");
    const server = await serve(dest);
    try {
      const page = await open(server);
      // Chromium's own drag and drop, as from the desktop: the page's drop handler gets the
      // browser's FileSystemEntry objects for these paths on disk.
      const box = await page.locator("#drop").boundingBox();
      const at = { x: box.x + box.width / 2, y: box.y + box.height / 2 };
      const data = { items: [], files: [join(fixture, "tree"), join(fixture, "loose.txt")], dragOperationsMask: 1 };
      const cdp = await context.newCDPSession(page);
      for (const type of ["dragEnter", "dragOver", "drop"]) await cdp.send("Input.dispatchDragEvent", { type, ...at, data });
      await page.waitForFunction(() => !document.getElementById("upload").disabled);
      assert.equal(await page.textContent("#selection"), "Dropped: 3 files in 3 folders, 15 B.");
      assert.equal(await page.textContent("#skipped"), "");
      await page.evaluate(() => delete window.lastUpload);
      await page.click("#upload");
      await page.waitForFunction(() => window.lastUpload);
      const r = await page.evaluate(() => window.lastUpload);
      assert.equal(r.status, 200, JSON.stringify(r));
      assert.deepEqual(readTree(join(dest, r.result.name)), readTree(fixture));
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("a drop is counted with its empty folders; what cannot be uploaded is left out and named", async () => {
    const dest = join(tmp, "dropped-uploads");
    const server = await serve(dest);
    try {
      const page = await open(server);
      // A drop of duck-typed entries, for what a real drag (above) cannot bring here: an
      // entry neither file nor folder, and a file that fails to read (the tests run as root,
      // who reads any file). Also a folder with a file and an empty folder.
      await page.evaluate(() => {
        const file = (name, text) => ({ name, isFile: true, isDirectory: false, file: (ok) => ok(new File([text], name)) });
        const broken = (name) => ({ name, isFile: true, isDirectory: false, file: (ok, err) => err(new DOMException("gone", "NotFoundError")) });
        const dir = (name, children) => ({
          name,
          isFile: false,
          isDirectory: true,
          createReader() {
            let done = false;
            return { readEntries: (ok) => setTimeout(() => ok(done ? [] : ((done = true), children))) };
          },
        });
        const other = { name: "socket", isFile: false, isDirectory: false };
        const tree = dir("tree", [file("a.txt", "a"), dir("empty", []), other, dir("only-broken", [broken("lost.txt")])]);
        const ev = new Event("drop", { cancelable: true });
        Object.defineProperty(ev, "dataTransfer", { value: { items: [tree, file("loose.txt", "loose")] } });
        document.getElementById("drop").dispatchEvent(ev);
      });
      await page.waitForFunction(() => !document.getElementById("upload").disabled);
      assert.equal(await page.textContent("#selection"), "Dropped: 2 files in 3 folders, 6 B.");
      assert.equal(
        await page.textContent("#skipped"),
        "Left out: tree/socket (neither a file nor a folder), tree/only-broken/lost.txt (cannot be read: gone).",
      );
      await page.evaluate(() => delete window.lastUpload);
      await page.click("#upload");
      await page.waitForFunction(() => window.lastUpload);
      const r = await page.evaluate(() => window.lastUpload);
      assert.equal(r.status, 200, JSON.stringify(r));
      const want = join(tmp, "want-dropped");
      writeTree(want, [
        { path: "loose.txt", data: "loose" },
        { path: "tree", dir: true },
        { path: "tree/a.txt", data: "a" },
        { path: "tree/empty", dir: true },
        { path: "tree/only-broken", dir: true },
      ]);
      assert.deepEqual(readTree(join(dest, r.result.name)), readTree(want));
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("an upload cut off (cancelled, or its page closed) is said so and leaves nothing", async () => {
    const fixture = join(tmp, "slow");
    writeTree(fixture, [{ path: "big.bin", data: Buffer.alloc(24 << 20, 3) }]);
    const dest = join(tmp, "cut");
    const server = await serve(dest);
    try {
      for (const how of ["cancel", "close"]) {
        const page = await open(server);
        // 4 MB/s: the upload takes seconds, long enough to cut it half-way.
        const cdp = await context.newCDPSession(page);
        await cdp.send("Network.emulateNetworkConditions", { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: 4 << 20 });
        await page.setInputFiles("#folder", fixture);
        await page.waitForFunction(() => !document.getElementById("upload").disabled);
        await page.click("#upload");
        await page.waitForFunction(() => document.getElementById("progress").value > 4 << 20);
        if (how === "cancel") {
          await page.click("#cancel");
          await page.waitForFunction(() => window.lastUpload);
          assert.match(await page.textContent("#error"), /^Upload cancelled\. The server keeps nothing/);
        }
        await page.close();
        await assertHolds(dest, [], `an upload cut off by ${how}`);
      }
      assert.doesNotMatch(server.log(), /(PUT|POST) \/upload\S* 200 /, "nothing landed");
      const cut = server.log().match(/POST \/upload (400|closed) /g) ?? [];
      assert.equal(cut.length, 2, `both cut off mid-way: ${server.log()}`);
    } finally {
      await server.close();
    }
  });

  test("over plain HTTP/1.1 the page uploads a Blob, which lands identical", async () => {
    const fixture = join(tmp, "plain-fixture");
    writeTree(fixture, manyFiles(200));
    const server = await serve(join(tmp, "plain"), ["--plain-http"]);
    try {
      const page = await open(server);
      const r = await uploadThroughPage(page, fixture);
      assert.equal(r.status, 200, JSON.stringify(r));
      assert.equal(r.mode, "blob");
      assert.deepEqual(readTree(join(server.dest, r.result.name, "plain-fixture")), readTree(fixture));
      await page.close();
    } finally {
      await server.close();
    }
  });

  test("the package in the page: directory handles, dropped entries, unpack, invalid input", async () => {
    const dest = join(tmp, "api");
    const server = await serve(dest);
    try {
      const page = await open(server);
      // fromDirectoryHandle on OPFS, with an empty directory.
      let r = await page.evaluate(async () => {
        const { fromDirectoryHandle } = await import("/barge-archive.js");
        const opfs = await navigator.storage.getDirectory();
        await opfs.removeEntry("tree", { recursive: true }).catch(() => {});
        const tree = await opfs.getDirectoryHandle("tree", { create: true });
        const write = async (dir, name, text) => {
          const w = await (await dir.getFileHandle(name, { create: true })).createWritable();
          await w.write(text);
          await w.close();
        };
        await write(tree, "top.txt", "top");
        const sub = await tree.getDirectoryHandle("sub", { create: true });
        await write(sub, "inner.txt", "inner ".repeat(1000));
        await sub.getDirectoryHandle("empty", { create: true });
        return window.bargeUpload(fromDirectoryHandle(tree), { name: "opfs" });
      });
      assert.equal(r.status, 200, JSON.stringify(r));
      const want = join(tmp, "want-opfs");
      writeTree(want, [
        { path: "sub", dir: true },
        { path: "sub/empty", dir: true },
        { path: "sub/inner.txt", data: "inner ".repeat(1000) },
        { path: "top.txt", data: "top" },
      ]);
      assert.deepEqual(readTree(join(dest, "opfs")), readTree(want));

      // fromDataTransfer on a duck-typed 250-entry directory (readEntries gives at most 100 per call).
      r = await page.evaluate(async () => {
        const { fromDataTransfer } = await import("/barge-archive.js");
        let calls = 0;
        const file = (name, text) => ({ name, isFile: true, isDirectory: false, file: (ok) => ok(new File([text], name)) });
        const dir = (name, children) => ({
          name,
          isFile: false,
          isDirectory: true,
          createReader() {
            let pos = 0;
            return {
              readEntries(ok) {
                calls++;
                const batch = children.slice(pos, pos + 100);
                pos += batch.length;
                setTimeout(() => ok(batch));
              },
            };
          },
        });
        const children = Array.from({ length: 249 }, (_, i) => file(`f${String(i).padStart(3, "0")}.txt`, `file ${i}\n`));
        children.push(dir("nested", [file("x.txt", "x"), dir("empty", [])]));
        const items = [{ webkitGetAsEntry: () => dir("dropped", children) }, { webkitGetAsEntry: () => file("loose.txt", "loose") }];
        return { ...(await window.bargeUpload(fromDataTransfer(items), { name: "dropped" })), calls };
      });
      assert.equal(r.status, 200, JSON.stringify(r));
      assert.equal(r.calls, 4 + 2 + 1, "readEntries calls: 3 batches + 1 empty for the root, 2 for nested, 1 for empty");
      const got = readTree(join(dest, "dropped"));
      assert.equal(got.filter((e) => e.kind === "file").length, 251);

      // unpack decodes an archive barge made (served to the page by the test).
      const fixture = join(tmp, "fixture");
      const packed = await run(BARGE, ["pack", fixture, "-o", "-"]);
      assert.equal(packed.code, 0, packed.stderr);
      await page.route("**/test-archive", (route) => route.fulfill({ body: packed.stdout, contentType: "application/octet-stream" }));
      const listing = await page.evaluate(async () => {
        const { unpack } = await import("/barge-archive.js");
        const out = [];
        for await (const e of unpack((await fetch("/test-archive")).body)) {
          const entry = { path_hex: [...e.pathBytes].map((b) => b.toString(16).padStart(2, "0")).join(""), kind: e.kind, mode: e.mode };
          if (e.kind === "file") {
            const digest = await crypto.subtle.digest("SHA-256", await e.bytes());
            entry.sha = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
          }
          out.push(entry);
        }
        return out;
      });
      listing.sort((a, b) => (a.path_hex < b.path_hex ? -1 : 1));
      assert.deepEqual(listing, readTree(fixture));

      // An invalid selection is refused before any byte is produced, and nothing lands.
      const before = names(dest);
      const bad = await page.evaluate(async () => {
        const { pack } = await import("/barge-archive.js");
        const entries = () => [{ path: "ok.txt", data: "x" }, { path: "a/../b", data: "y" }];
        const first = await pack(entries()).getReader().read().then((c) => `produced ${c.value?.length} bytes`, (e) => `${e.name} ${e.code}: ${e.message}`);
        const upload = await window.bargeUpload(entries(), { name: "bad" }).then((u) => JSON.stringify(u), (e) => `rejected: ${e.message}`);
        return { first, upload };
      });
      assert.equal(bad.first, 'BargeError dot-name: invalid name in path: "a/../b"');
      assert.match(bad.upload, /^rejected: /);
      await assertHolds(dest, before, "an invalid selection");
      await page.close();
    } finally {
      await server.close();
    }
  });
});
