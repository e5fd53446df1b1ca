// Every kernel the op tests run, rendered for CUDA in each launch form the backend can give it, compiles
// with nvcc for sm_89 (RTX 4090) and sm_90 (H100/H200). The kernels are captured from a run of the op test
// files on the JS device (capture_kernels.ts). Left out for time: autograd_assign.test.ts (its finite
// differences take ~20 s here; its kernels are gradients like nn_ops') and multi.test.ts (the same
// elementwise kernels on shards, ~150 of them).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findNvcc } from "../../src/runtime/cuda_compile.ts";
import { compileHipAll, findHipcc } from "../../src/runtime/hip_compile.ts";
import { HIP_PRELUDE } from "../../src/renderer/hip.ts";
import { type NamedKernel, compileKernels } from "./nvcc.ts";
import { scratchDir } from "../scratch.ts";
import type { CapturedKernel } from "./capture_kernels.ts";

const OP_TESTS = [
  "elementwise",
  "nn_ops",
  "reduce_movement",
  "fusion",
  "regressions",
  "jit",
  "conv",
  "activations",
  "einsum",
  "scan",
  "sort",
  "upsample",
];
const nvcc = findNvcc();

/** Runs the op tests with the capture hook; the distinct kernels they executed, rendered for CUDA. */
function captureOpKernels(): CapturedKernel[] {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-capture-"));
  try {
    // a test runner of its own (not a child reporting to ours), on JS only: no C compiles, no GPU
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    spawnSync(
      process.execPath,
      [
        "--import",
        "tsx",
        "--import",
        "./test/cuda/capture_kernels.ts",
        "--test",
        ...OP_TESTS.map((t) => `test/core/${t}.test.ts`),
      ],
      {
        env: { ...env, TSGRAD_CAPTURE_DIR: dir, CC: "/nonexistent/cc", TSGRAD_LIBCUDA: "/nonexistent/libcuda.so" },
        stdio: "ignore",
      },
    );
    const lines = new Set(
      readdirSync(dir).flatMap((f) => readFileSync(join(dir, f), "utf8").split("\n").filter(Boolean)),
    );
    const byCode = new Map([...lines].map((l) => JSON.parse(l) as CapturedKernel).map((k) => [k.chosen, k]));
    return [...byCode.values()];
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `code` with its function named `name`. */
const named = (code: string, name: string): NamedKernel => ({ name, code: code.replace(/\btg_kernel\b/, name) });

/** Aliased forms differ only in __restrict__: a few of them are enough. */
const ALIASED_SAMPLE = 16;
/** Reduces in the other launch mode: a sample (every third), to keep the file under a minute on two cores. */
const OTHER_MODE_EVERY = 3;

/** The forms a kernel may take besides the chosen one. */
const otherForms = (k: CapturedKernel, n: number): NamedKernel[] => [
  ...(n < ALIASED_SAMPLE ? [named(k.aliased, `k${n}_aliased`)] : []),
  ...(k.otherMode && n % OTHER_MODE_EVERY === 0 ? [named(k.otherMode, `k${n}_mode`)] : []),
  ...(k.tensorCores ? [named(k.tensorCores, `k${n}_tc`)] : []),
];

const skip = nvcc ? false : "nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)";
const hipcc = findHipcc();
// gfx1100 code objects land in a cache of this file's own
process.env.TSGRAD_CACHE = join(scratchDir("op-kernels-hip"), "cache");
const skipHip = hipcc ? false : "hipcc not found (test/setup/ensure-hip.sh installs Debian's hipcc as root)";
const kernels = nvcc || hipcc ? captureOpKernels() : [];

test("the op tests run a few hundred distinct kernels", { skip: skip && skipHip }, () => {
  assert.ok(kernels.length > 200, `the op tests ran only ${kernels.length} distinct kernels`);
});

test("every kernel the op tests run compiles for sm_89 and sm_90 as CUDA launches it, and in its other forms", {
  skip,
  timeout: 180_000,
}, async () => {
  // the other forms only as PTX (no ptxas): the same C++ and inline assembly, half the time
  const [chosen, others] = await Promise.all([
    compileKernels(
      nvcc!,
      kernels.map((k, n) => named(k.chosen, `k${n}`)),
      ["sm_89", "sm_90"],
      { files: 2 },
    ),
    compileKernels(nvcc!, kernels.flatMap(otherForms), ["sm_90"], { files: 1, mode: "-ptx" }),
  ]);
  assert.equal(chosen.errors, "", `kernels failing: ${chosen.failing.join(", ")}`);
  assert.equal(others.errors, "", `kernel forms failing: ${others.failing.join(", ")}`);
});

test("every kernel the op tests run compiles for gfx1100 as the AMD backend launches it", {
  skip: skipHip,
  timeout: 240_000,
}, async (t) => {
  const sources = [...new Set(kernels.map((k) => k.amd))];
  const perModule = 100;
  const modules = [];
  for (let start = 0; start < sources.length; start += perModule) {
    const chunk = sources.slice(start, start + perModule).map((code, i) => named(code, `k${start + i}`).code);
    modules.push({ source: `${HIP_PRELUDE}\n${chunk.join("\n\n")}\n`, what: `op kernels ${start}-` });
  }
  const codes = await compileHipAll(modules, "gfx1100");
  const bytes = codes.reduce((s, c) => s + c.length, 0);
  t.diagnostic(`${sources.length} distinct HIP kernels in ${modules.length} gfx1100 code objects of ${bytes} bytes`);
  assert.ok(sources.length > 200, `only ${sources.length} distinct HIP kernels`);
});
