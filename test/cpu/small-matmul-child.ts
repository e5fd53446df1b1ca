// Run as a child process by beam.test.ts: a small matmul on the CPU device in a fresh process, then
// what it computed and what the kernel caches did, as JSON on stdout.
import { Tensor, dtypes } from "../../src/index.ts";
import { searchStats } from "../../src/engine/search.ts";
import { compileStats } from "../../src/runtime/compiler_cache.ts";

const x = new Tensor(
  Array.from({ length: 4 * 6 }, (_, i) => ((i * 7) % 11) - 5),
  { dtype: dtypes.float32, device: "CPU" },
).reshape([4, 6]);
const w = new Tensor(
  Array.from({ length: 6 * 2 }, (_, i) => ((i * 5) % 7) * 0.25),
  { dtype: dtypes.float32, device: "CPU" },
).reshape([6, 2]);
const values = Array.from(x.matmul(w).add(1).toArray() as Float32Array);
console.log(
  JSON.stringify({
    values,
    searched: searchStats.searched,
    cacheHits: searchStats.cacheHits,
    compiled: compileStats.compiled,
    cached: compileStats.cached,
  }),
);
