// Writes the package's browser API (src/index.ts and what it imports) as ONE minified ES
// module into the barge binary's sources, where `barge serve` serves it to its upload page
// as /barge-archive.js. The output is committed: `cargo build` must not need node. The
// test test/bundle.test.mjs rebuilds it and fails when the committed file is stale.
//
//   node tools/bundle.mjs          (rewrites the file)
import { build } from "esbuild";
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const OUTPUT = fileURLToPath(new URL("../../crates/barge-cli/src/serve/barge-archive.js", import.meta.url));

const BANNER =
  "// barge-archive for browsers, generated from js/src by js/tools/bundle.mjs (do not edit;\n" +
  "// committed so that cargo build needs no node; js/test/bundle.test.mjs checks it is current).";

/** The bundle's text. */
export async function bundle() {
  const out = await build({
    entryPoints: [fileURLToPath(new URL("../src/index.ts", import.meta.url))],
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    platform: "browser",
    banner: { js: BANNER },
    legalComments: "none",
    write: false,
    logLevel: "silent",
  });
  return out.outputFiles[0].text;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = await bundle();
  const before = (() => {
    try {
      return readFileSync(OUTPUT, "utf8");
    } catch {
      return "";
    }
  })();
  writeFileSync(OUTPUT, text);
  console.log(`${OUTPUT}: ${text.length} bytes${before === text ? " (unchanged)" : ""}`);
}
