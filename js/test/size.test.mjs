// The encoder core (src/pack.ts and its imports) stays within its size budget.
import assert from "node:assert/strict";
import { test } from "node:test";
import { BUDGET, encoderSize } from "../tools/size.mjs";

test(`encoder core is at most ${BUDGET} bytes minified+gzipped`, async () => {
  const { minified, gzipped } = await encoderSize();
  assert.ok(gzipped <= BUDGET, `${gzipped} bytes minified+gzipped (${minified} minified)`);
});
