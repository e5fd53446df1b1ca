// The quick form of bench/fault_injection.ts (issue 35's acceptance): one try of each fault (kills of
// preprocessing, training and checkpoint writing; flipped bytes and truncated shards and checkpoints; two trainers
// in one folder) with the real commands on tiny data. Nothing may be lost, and no damage may pass silently.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CASES, formatTable, runFaultInjection } from "../../bench/fault_injection.ts";

test("every injected fault ends resumed-identical or in a named error: nothing lost, nothing silent", {
  timeout: 300_000,
}, async () => {
  const results = await runFaultInjection({ tries: 1, seed: 35 });
  console.log(formatTable(results));
  assert.deepEqual(
    results.map((r) => r.name),
    Object.keys(CASES),
  );
  for (const result of results) {
    assert.deepEqual(result.problems, [], result.name);
    assert.equal(result.counts["data-lost"] + result.counts["silent-success"], 0, result.name);
  }
});
