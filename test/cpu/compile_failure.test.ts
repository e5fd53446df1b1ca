// A kernel that does not compile fails where it runs, by name, and leaves the CPU device working: it used to stay
// among the programs waiting to compile, so every later batch (any kernel at all) failed with its error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { CpuProgram } from "../../src/engine/cpu_programs.ts";
import { CompileError } from "../../src/runtime/compiler_cache.ts";
import { compileCpu } from "../../src/runtime/cpu.ts";
import { spawnSync } from "node:child_process";

const skip = Device.isAvailable("CPU") ? false : "no working C compiler";

/** `body` with each store's value read from a variable no statement defines. */
const broken = (body: readonly Stmt[]): Stmt[] =>
  body.map((s) =>
    s.kind === "loop"
      ? { ...s, body: broken(s.body) }
      : s.kind === "store"
        ? { ...s, value: { kind: "val", name: "undefined_value", dtype: s.dtype } }
        : s,
  );

test("a kernel that fails to compile does not break the kernels compiled after it", { skip }, () => {
  const x = new Tensor([1, 2, 3], { device: "CPU", dtype: "float32" }).realize();
  const { items } = recordItems(() => x.mul(7).realize());
  const item = items.find((i) => i.kind === "kernel")!;
  assert.ok(item.kind === "kernel");
  const kernel: KernelIR = { ...item.kernel, name: `${item.kernel.name}_broken`, body: broken(item.kernel.body) };
  const bad = new CpuProgram(kernel);
  assert.throws(() => bad.run(item.buffers), CompileError);
  // new kernels compile and run, with the broken program still alive beside them
  assert.deepEqual(new Tensor([3, 4], { device: "CPU" }).mul(3).tolist(), [9, 12]);
  assert.deepEqual(x.add(0.5).tolist(), [1.5, 2.5, 3.5]);
  assert.throws(() => bad.run(item.buffers), CompileError, "running it again names its error again");
});

test("a compile that runs past its limit (a BEAM candidate) is killed, fails alone and leaves no compiler behind", {
  skip,
}, () => {
  const fast = { prelude: "", code: "void tg_kernel(float* b0, int threads) { b0[0] = (float)threads; }" };
  // tens of thousands of dependent statements: gcc -O3 needs far longer than the limit for them
  const body = Array.from(
    { length: 20000 },
    (_, i) => `b0[${i % 97}] = b0[${(i * 7) % 97}] * 1.0001f + b0[${(i * 13) % 97}] + ${i}.0f;`,
  ).join("\n");
  // never in the disk cache: a run without the limit (or a slow machine's) would have left it there
  const unique = `${process.pid}_${Date.now()}`;
  const slow = { prelude: "", code: `void tg_kernel(float* b0, int threads) { /* ${unique} */\n${body}\n}` };
  const start = performance.now();
  const [quick, killed] = compileCpu([fast, slow], { timeoutS: 1 });
  assert.ok(quick && !("error" in quick), "the other function of the batch still compiles");
  assert.ok(killed && "error" in killed, "the slow function fails");
  assert.match(killed.error, /compiling .*\.c failed/);
  // the batch, then the function alone: one limit each
  assert.ok(performance.now() - start < 30_000, `${performance.now() - start} ms`);
  // this process's batches are named batch.<pid>.*
  const left = spawnSync("sh", ["-c", `ps -eo args | grep -c '[c]c1 .*batch\\.${process.pid}\\.' || true`], {
    encoding: "utf8",
  });
  assert.equal(left.stdout.trim(), "0", "no compiler process outlives the limit");
});
