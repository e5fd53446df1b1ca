// BEAM search: the searched kernel computes the same numbers, and a second run reads the choice from disk.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { clearKernelCache, searchStats } from "../../src/engine/search.ts";
import { compileStats } from "../../src/runtime/compiler_cache.ts";

const hasCpu = Device.isAvailable("CPU");

/** Runs `body` with environment variables set (and a fresh kernel cache folder), restoring them after. */
function withEnv(vars: Record<string, string>, body: (cache: string) => void): void {
  const cache = mkdtempSync(join(tmpdir(), "tsgrad-beam-"));
  const saved = Object.fromEntries(Object.keys({ ...vars, TSGRAD_CACHE: "" }).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars, { TSGRAD_CACHE: cache });
  try {
    body(cache);
  } finally {
    for (const [k, v] of Object.entries(saved)) v === undefined ? delete process.env[k] : (process.env[k] = v);
    clearKernelCache();
    rmSync(cache, { recursive: true, force: true });
  }
}

/** A small matmul plus bias on fresh input buffers (fresh buffers: nothing is reused from an earlier realize). */
function smallMatmul(): number[] {
  const x = new Tensor(Array.from({ length: 4 * 6 }, (_, i) => ((i * 7) % 11) - 5), { dtype: dtypes.float32, device: "CPU" }).reshape([4, 6]);
  const w = new Tensor(Array.from({ length: 6 * 2 }, (_, i) => ((i * 5) % 7) * 0.25), { dtype: dtypes.float32, device: "CPU" }).reshape([6, 2]);
  return Array.from(x.matmul(w).add(1).toArray() as Float32Array);
}

test("a BEAM-searched kernel gives the same numbers as the heuristic one", { skip: !hasCpu }, () => {
  const plain = smallMatmul();
  withEnv({ BEAM: "1" }, () => {
    const before = searchStats.searched;
    assert.deepEqual(smallMatmul(), plain);
    assert.ok(searchStats.searched > before, "the kernel was searched");
  });
});

test("the second run takes the searched options from the disk cache", { skip: !hasCpu }, () => {
  withEnv({ BEAM: "1" }, (cache) => {
    const first = smallMatmul();
    assert.ok(readdirSync(join(cache, "beam")).length > 0, "options written to the cache folder");
    clearKernelCache(); // forget what is in memory, as a new process would
    const searched = searchStats.searched;
    const hits = searchStats.cacheHits;
    assert.deepEqual(smallMatmul(), first);
    assert.equal(searchStats.searched, searched, "no new search");
    assert.ok(searchStats.cacheHits > hits, "options read back");
  });
});

test("compiled kernels are reused from the disk cache", { skip: !hasCpu }, () => {
  withEnv({}, () => {
    const compiledBefore = compileStats.compiled;
    const first = smallMatmul();
    const compiled = compileStats.compiled;
    assert.ok(compiled > compiledBefore, "the first run compiles");
    const cachedBefore = compileStats.cached;
    assert.deepEqual(smallMatmul(), first);
    assert.equal(compileStats.compiled, compiled, "the second run compiles nothing");
    assert.ok(compileStats.cached > cachedBefore, "it finds the libraries in the cache");
  });
});

test("clearKernelCache({ onDisk: true }) empties the cache folders", { skip: !hasCpu }, () => {
  withEnv({ BEAM: "1" }, (cache) => {
    smallMatmul();
    clearKernelCache({ onDisk: true });
    assert.deepEqual(readdirSync(cache), []);
  });
});
