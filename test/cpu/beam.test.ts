// BEAM search and the kernel caches, each run in a fresh process (as a user's second run would be):
// the searched kernel computes the same numbers, and a second run neither searches nor compiles.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { clearKernelCache, searchStats } from "../../src/engine/search.ts";

const hasCpu = Device.isAvailable("CPU");
const CHILD = join(import.meta.dirname, "small-matmul-child.ts");

interface ChildReport {
  values: number[];
  searched: number;
  cacheHits: number;
  compiled: number;
  cached: number;
}

/** Runs the small matmul in a fresh process with `env` and kernel cache folder `cache`. */
function runChild(cache: string, env: Record<string, string>): ChildReport {
  const run = spawnSync(process.execPath, ["--import", "tsx", CHILD], {
    env: { ...process.env, BEAM: "", ...env, TSGRAD_CACHE: cache },
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout) as ChildReport;
}

/** One cache folder, four runs in order: plain twice, then BEAM=1 twice. */
let cache = "";
const runs: Record<"plain" | "plainAgain" | "beam" | "beamAgain", ChildReport> = {} as never;
before(() => {
  if (!hasCpu) return;
  cache = mkdtempSync(join(tmpdir(), "tsgrad-cache-"));
  runs.plain = runChild(cache, {});
  runs.plainAgain = runChild(cache, {});
  runs.beam = runChild(cache, { BEAM: "1" });
  runs.beamAgain = runChild(cache, { BEAM: "1" });
});
after(() => {
  if (cache) rmSync(cache, { recursive: true, force: true });
});

test("a second run compiles nothing: kernels come from the disk cache", { skip: !hasCpu }, () => {
  assert.ok(runs.plain.compiled > 0, "the first run compiles");
  assert.deepEqual(runs.plainAgain.values, runs.plain.values);
  assert.equal(runs.plainAgain.compiled, 0);
  assert.ok(runs.plainAgain.cached > 0);
});

test("a BEAM-searched kernel gives the same numbers as the heuristic one", { skip: !hasCpu }, () => {
  assert.deepEqual(runs.beam.values, runs.plain.values);
  assert.equal(runs.beam.searched, 1, "the matmul kernel was searched");
});

test("a second BEAM run takes the searched options from the disk cache", { skip: !hasCpu }, () => {
  assert.ok(readdirSync(join(cache, "beam")).length > 0, "options written to the cache folder");
  assert.deepEqual(runs.beamAgain.values, runs.beam.values);
  assert.equal(runs.beamAgain.searched, 0, "no new search");
  assert.equal(runs.beamAgain.cacheHits, 1, "the options are read back");
});

test("clearKernelCache({ onDisk: true }) empties the cache folders", { skip: !hasCpu }, () => {
  const saved = process.env.TSGRAD_CACHE;
  process.env.TSGRAD_CACHE = cache;
  try {
    clearKernelCache({ onDisk: true });
  } finally {
    saved === undefined ? delete process.env.TSGRAD_CACHE : (process.env.TSGRAD_CACHE = saved);
  }
  assert.deepEqual(readdirSync(cache), []);
});

test("IGNORE_JIT_FIRST_BEAM: a jitted function's first call runs unsearched, its capture searches", {
  skip: !hasCpu,
}, () => {
  const saved = {
    BEAM: process.env.BEAM,
    IGNORE_JIT_FIRST_BEAM: process.env.IGNORE_JIT_FIRST_BEAM,
    TSGRAD_CACHE: process.env.TSGRAD_CACHE,
  };
  const scratch = mkdtempSync(join(tmpdir(), "tsgrad-cache-"));
  Object.assign(process.env, { BEAM: "1", IGNORE_JIT_FIRST_BEAM: "1", TSGRAD_CACHE: scratch });
  try {
    clearKernelCache();
    const data = (shape: number[]) =>
      new Tensor(
        Array.from({ length: shape[0]! * shape[1]! }, (_, i) => (i % 7) - 3),
        { device: "CPU", dtype: "float32" },
      )
        .reshape(shape)
        .realize();
    const [w, x1, x2] = [data([24, 40]), data([16, 24]), data([16, 24])];
    const f = jit((x: Tensor) => x.matmul(w!).mul(3));
    const before = searchStats.searched + searchStats.cacheHits;
    const first = f(x1!);
    assert.equal(searchStats.searched + searchStats.cacheHits, before, "the first call searched");
    const captured = f(x2!);
    assert.ok(searchStats.searched + searchStats.cacheHits > before, "the capture did not search");
    assert.deepEqual(first.shape, captured.shape);
  } finally {
    for (const [key, value] of Object.entries(saved))
      value === undefined ? delete process.env[key] : (process.env[key] = value);
    clearKernelCache();
    rmSync(scratch, { recursive: true, force: true });
  }
});
