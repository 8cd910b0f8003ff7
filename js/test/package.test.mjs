// The package as npm publishes it: `npm pack`, installed into a fresh project,
// imported (and type-checked) there; its metadata and README links. Checks that
// compare with the rest of the repository skip when js/ is not inside it.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";
import { documentedCodes } from "./helpers.mjs";

const PKG = fileURLToPath(new URL("..", import.meta.url));
const REPO = join(PKG, "..");
const inRepo = existsSync(join(REPO, "Cargo.toml")) && existsSync(join(REPO, "docs"));
const outsideRepo = inRepo ? false : "js/ is not inside the barge repository";
const manifest = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));
const tmp = mkdtempSync(join(tmpdir(), "barge-package-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

// The package as users get it: packed (`npm test` has just built dist/, so the prepack build
// is skipped) and installed offline into a fresh project (no runtime dependencies: no registry).
const [packed] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", tmp], PKG));
const project = join(tmp, "project");
mkdirSync(project);
writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true }));
npm(["install", "--offline", "--no-audit", "--no-fund", join(tmp, packed.filename)], project);

test("npm pack ships dist (the .js and .d.ts of every source), the README, both licenses, and nothing else: no sources, no maps", () => {
  const sources = readdirSync(join(PKG, "src")).filter((f) => f.endsWith(".ts"));
  const want = [...sources.flatMap((f) => [`dist/${f.slice(0, -3)}.js`, `dist/${f.slice(0, -3)}.d.ts`]), "LICENSE-APACHE", "LICENSE-MIT", "README.md", "package.json"];
  assert.ok(want.includes("dist/land.js") && want.includes("dist/node.d.ts"));
  assert.deepEqual(packed.files.map((f) => f.path).sort(), want.sort());
});

test("installed from the tarball, require (CommonJS) and import (ES modules) load both entries, which pack, unpack and throw coded errors", () => {
  // The same script body for both: what a user of either module system writes.
  const body = (load) => `${load}
async function main() {
  const bytes = new Uint8Array(await new Response(pack([{ path: "d/f", data: "hi" }], { times: false })).arrayBuffer());
  const got = [];
  for await (const e of unpack(bytes)) got.push(e.kind + " " + e.path);
  const codes = [];
  try { for await (const e of unpack(bytes.subarray(0, 12))) void e; } catch (e) { codes.push(e instanceof BargeError && e.code); }
  await landWithBarge(bytes, "x", { barge: "/nonexistent/barge" }).catch((e) => codes.push(e instanceof LandError && e instanceof BargeError && e.code));
  await landWithBarge(bytes, "x", { existing: "replace" }).catch((e) => codes.push(e instanceof TypeError && e.code));
  console.log(JSON.stringify({ got, codes, fromPath: typeof fromPath }));
}
main();
`;
  writeFileSync(join(project, "use.cjs"), body(`const { pack, unpack, BargeError } = require("barge-archive");\nconst { fromPath, landWithBarge, LandError } = require("barge-archive/node");`));
  writeFileSync(join(project, "use.mjs"), body(`import { pack, unpack, BargeError } from "barge-archive";\nimport { fromPath, landWithBarge, LandError } from "barge-archive/node";`));
  for (const script of ["use.cjs", "use.mjs"]) {
    const out = JSON.parse(execFileSync(process.execPath, [script], { cwd: project, encoding: "utf8" }));
    assert.deepEqual(out, { got: ["dir d", "file d/f"], codes: ["truncated", "barge-not-found", "bad-option"], fromPath: "function" }, script);
  }
});

test("the declarations type-check from an ES module and from a CommonJS module, the summary in camelCase", () => {
  const use = `import { pack, BargeError, type Entry } from "barge-archive";
import { landWithBarge, LandError, type LandOptions, type LandSummary } from "barge-archive/node";
const entries: Entry[] = [{ path: "f", data: "x" }];
const options: LandOptions = { maxBytes: "1M", existing: "skip", times: false };
const summary: Promise<LandSummary> = landWithBarge(pack(entries), "dest", options);
summary.then((s) => s.notRestored.mergedDirs + (s.rootMode ?? 0));
summary.catch((e: unknown) => e instanceof LandError && e.status);
const code: string = new BargeError("bad-entry", "x").code;
// @ts-expect-error: not a choice
const bad: LandOptions = { existing: "replace" };
// @ts-expect-error: the summary's keys are camelCase
summary.then((s) => s.not_restored);
`;
  // The declarations resolve through "exports" as a TypeScript user's would; a .cts file's
  // imports are require()s.
  writeFileSync(join(project, "use.mts"), use);
  writeFileSync(join(project, "use.cts"), use);
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, lib: ["ES2022", "DOM"], types: [] }, files: ["use.mts", "use.cts"] }),
  );
  execFileSync(process.execPath, [join(PKG, "node_modules/typescript/bin/tsc"), "-p", project], { encoding: "utf8" });
});

test("every error code the sources raise is in the README's Errors (unpack's: in docs/FORMAT.md's table)", { skip: outsideRepo }, () => {
  const documented = documentedCodes();
  const raised = new Set();
  for (const f of readdirSync(join(PKG, "src"))) {
    const text = readFileSync(join(PKG, "src", f), "utf8");
    // A code is the first argument of a call that makes an error, or a literal of a `const code =`.
    for (const [, code] of text.matchAll(/\b(?:fail|BargeError|LandError|argumentError)\(\s*"([a-z0-9-]+)"/g)) raised.add(code);
    for (const [, expr] of text.matchAll(/\bconst code =([^;]+);/g)) for (const [, code] of expr.matchAll(/"([a-z0-9-]+)"/g)) raised.add(code);
  }
  for (const code of ["bad-entry", "dot-name", "truncated", "stale-entry", "bad-option", "barge-not-found", "source-failed", "aborted"]) assert.ok(raised.has(code), `${code} not found in src/`);
  assert.deepEqual([...raised].filter((code) => !documented.has(code)), []);
});

test("the browser entry imports nothing from Node", () => {
  const seen = new Set();
  const visit = (file) => {
    if (seen.has(file)) return;
    seen.add(file);
    for (const [, spec] of readFileSync(join(PKG, "dist", file), "utf8").matchAll(/(?:import|export)[^"']*?from\s*["']([^"']+)["']/g)) {
      assert.ok(spec.startsWith("./"), `dist/${file} imports ${spec}`);
      visit(spec.slice(2));
    }
  };
  visit("index.js");
  assert.ok(seen.has("pack.js") && !seen.has("node.js") && !seen.has("land.js"));
});

test("repository, homepage and bugs name the project home that the root README and Cargo.toml give", { skip: outsideRepo }, () => {
  const home = "https://github.com/barge-rs/barge";
  assert.deepEqual(manifest.repository, { type: "git", url: `git+${home}.git`, directory: "js" });
  assert.equal(manifest.homepage, `${home}/tree/main/js#readme`);
  assert.deepEqual(manifest.bugs, { url: `${home}/issues` });
  const cargo = readFileSync(join(REPO, "Cargo.toml"), "utf8");
  assert.match(cargo, new RegExp(`^repository = "${home}"$`, "m"));
  assert.match(cargo, new RegExp(`^homepage = "${home}"$`, "m"));
  assert.match(readFileSync(join(REPO, "README.md"), "utf8"), new RegExp(`## Project home\\n\\n${home} `));
});

test("the package's license files are the repository's", { skip: outsideRepo }, () => {
  assert.equal(manifest.license, "MIT OR Apache-2.0");
  for (const f of ["LICENSE-MIT", "LICENSE-APACHE"]) assert.ok(readFileSync(join(PKG, f)).equals(readFileSync(join(REPO, f))), `js/${f} differs from ${f}`);
});

/** GitHub's anchor for a Markdown heading. */
const slug = (heading) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, "")
    .replace(/\s/g, "-");
const anchors = (markdown) => new Set([...markdown.matchAll(/^#{1,6} (.+)$/gm)].map(([, h]) => slug(h)));

test("every README link works on the registry: absolute, to a file of the repository and a heading that exist", { skip: outsideRepo }, () => {
  const readme = readFileSync(join(PKG, "README.md"), "utf8");
  const links = [...readme.matchAll(/\]\(([^)\s]+)\)/g)].map(([, l]) => l);
  assert.ok(links.length >= 5, `only ${links.length} links`);
  const prefix = /^https:\/\/github\.com\/barge-rs\/barge\/(?:blob|tree)\/main\/([^#]*)(?:#(.+))?$/;
  for (const link of links) {
    if (link.startsWith("#")) {
      assert.ok(anchors(readme).has(link.slice(1)), `no heading for ${link}`);
      continue;
    }
    const m = prefix.exec(link);
    if (!m) {
      assert.match(link, /^https:\/\//, `${link}: a relative link does not work on the registry`);
      continue;
    }
    const [, path, anchor] = m;
    assert.ok(existsSync(join(REPO, path)), `${link}: ${path} is not in the repository`);
    if (anchor) assert.ok(anchors(readFileSync(join(REPO, path), "utf8")).has(anchor), `${link}: ${path} has no heading #${anchor}`);
  }
});
