// Reports the minified + gzipped size of the encoder core (src/pack.ts and what it
// imports), the part a web page ships to create archives. Exits 1 over the budget.
import { build } from "esbuild";
import { gzipSync } from "node:zlib";
import { fileURLToPath } from "node:url";

export const BUDGET = 2560;

export async function encoderSize() {
  const out = await build({
    entryPoints: [fileURLToPath(new URL("../src/pack.ts", import.meta.url))],
    bundle: true,
    minify: true,
    format: "esm",
    target: "es2022",
    write: false,
    logLevel: "silent",
  });
  const code = out.outputFiles[0].contents;
  return { minified: code.length, gzipped: gzipSync(code, { level: 9 }).length };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const { minified, gzipped } = await encoderSize();
  console.log(`encoder core (pack): ${minified} bytes minified, ${gzipped} bytes minified+gzipped (budget ${BUDGET})`);
  if (gzipped > BUDGET) process.exit(1);
}
