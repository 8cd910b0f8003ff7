// The browser bundle `barge serve` ships (crates/barge-cli/src/serve/barge-archive.js) is
// generated from src/ by tools/bundle.mjs and committed; it must be what src/ gives now.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { bundle, OUTPUT } from "../tools/bundle.mjs";

test("the committed browser bundle is current (else: node tools/bundle.mjs)", async () => {
  const fresh = await bundle();
  assert.ok(readFileSync(OUTPUT, "utf8") === fresh, `${OUTPUT} is stale: run node tools/bundle.mjs in js/ and commit it`);
  assert.match(fresh, /export\{/, "one ES module with exports");
  // A sanity bound, not a budget (tools/size.mjs keeps the one of pack): format 2 (its
  // decoder, packV2 and XXH3) took the bundle from 13 KB to 27.5 KB.
  assert.ok(fresh.length < 32000, `${fresh.length} bytes`);
});
