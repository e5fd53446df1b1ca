// bench/beam_fuzz.ts on a slice of a BERT-tiny step: option sets one BEAM step away from the heuristics' lower,
// compile and compute what the heuristics' kernels compute (BEAM drops a candidate that does not compile
// without a word, so a codegen bug only an option set reaches would hide there). The full sweep (every kernel,
// two steps away) is a bench run; this keeps a sample of it in CI.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device } from "../../src/index.ts";

const SCRIPT = join(import.meta.dirname, "..", "..", "bench", "beam_fuzz.ts");

test("BEAM's option sets near the heuristics' lower, compile and agree with them on 40 kernels of a BERT-tiny step", {
  skip: !Device.isAvailable("CPU") && "no C compiler",
}, () => {
  const cache = mkdtempSync(join(tmpdir(), "tsgrad-fuzz-"));
  try {
    const run = spawnSync(
      process.execPath,
      ["--import", "tsx", SCRIPT, "--depth", "1", "--per-kernel", "6", "--kernels", "40"],
      { env: { ...process.env, TSGRAD_CACHE: cache, BEAM: "" }, encoding: "utf8" },
    );
    const report = JSON.parse(run.stdout) as {
      kernels: number;
      variants_checked: number;
      failures: number;
      details: unknown[];
    };
    assert.equal(report.kernels, 40);
    assert.ok(report.variants_checked >= 100, `only ${report.variants_checked} variants checked`);
    assert.deepEqual(report.details, []);
    assert.equal(run.status, 0, run.stderr);
  } finally {
    rmSync(cache, { recursive: true, force: true });
  }
});
