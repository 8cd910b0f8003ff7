// The package as npm publishes it: `npm pack`, installed into a fresh project,
// imported (and type-checked) there; its metadata and README links. Checks that
// compare with the rest of the repository skip when js/ is not inside it.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, test } from "node:test";

const PKG = fileURLToPath(new URL("..", import.meta.url));
const REPO = join(PKG, "..");
const inRepo = existsSync(join(REPO, "Cargo.toml")) && existsSync(join(REPO, "docs"));
const outsideRepo = inRepo ? false : "js/ is not inside the barge repository";
const manifest = JSON.parse(readFileSync(join(PKG, "package.json"), "utf8"));
const tmp = mkdtempSync(join(tmpdir(), "barge-package-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const npm = (args, cwd) => execFileSync("npm", args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

test("npm pack ships dist, the sources, the README and both licenses, and nothing else; installed in a project, both entries import and type-check", async () => {
  // `npm test` has just built dist/, so the prepack build is skipped here.
  const [packed] = JSON.parse(npm(["pack", "--json", "--ignore-scripts", "--pack-destination", tmp], PKG));
  const files = packed.files.map((f) => f.path).sort();
  for (const f of ["LICENSE-APACHE", "LICENSE-MIT", "README.md", "package.json", "dist/index.js", "dist/index.d.ts", "dist/node.js", "dist/node.d.ts", "dist/land.js", "dist/land.d.ts"])
    assert.ok(files.includes(f), `${f} is not in the package: ${files.join(" ")}`);
  assert.deepEqual(files.filter((f) => !/^(dist\/.+\.(js|d\.ts)|src\/.+\.ts|README\.md|LICENSE-(MIT|APACHE)|package\.json)$/.test(f)), []);

  const project = join(tmp, "project");
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "consumer", private: true, type: "module" }));
  // No runtime dependencies: installing the tarball needs no registry.
  npm(["install", "--offline", "--no-audit", "--no-fund", join(tmp, packed.filename)], project);
  writeFileSync(
    join(project, "use.mjs"),
    `import { pack, unpack, BargeError } from "barge-archive";
import { fromPath, landWithBarge, LandError } from "barge-archive/node";
const bytes = new Uint8Array(await new Response(pack([{ path: "d/f", data: "hi" }], { times: false })).arrayBuffer());
const got = [];
for await (const e of unpack(bytes)) got.push(e.kind + " " + e.path);
console.log(JSON.stringify({ got, types: [typeof fromPath, typeof landWithBarge, typeof LandError, typeof BargeError] }));
`,
  );
  const out = JSON.parse(execFileSync(process.execPath, ["use.mjs"], { cwd: project, encoding: "utf8" }));
  assert.deepEqual(out, { got: ["dir d", "file d/f"], types: ["function", "function", "function", "function"] });

  // The declarations resolve through "exports" as a TypeScript user's would.
  writeFileSync(
    join(project, "use.ts"),
    `import { pack, type Entry } from "barge-archive";
import { landWithBarge, LandError, type LandOptions, type LandSummary } from "barge-archive/node";
const entries: Entry[] = [{ path: "f", data: "x" }];
const options: LandOptions = { maxBytes: "1M", existing: "skip", times: false };
const summary: Promise<LandSummary> = landWithBarge(pack(entries), "dest", options);
summary.catch((e: unknown) => e instanceof LandError && e.status);
// @ts-expect-error: not a choice
const bad: LandOptions = { existing: "replace" };
`,
  );
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({ compilerOptions: { module: "NodeNext", moduleResolution: "NodeNext", target: "ES2022", strict: true, noEmit: true, lib: ["ES2022", "DOM"], types: [] }, files: ["use.ts"] }),
  );
  execFileSync(process.execPath, [join(PKG, "node_modules/typescript/bin/tsc"), "-p", project], { encoding: "utf8" });
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
