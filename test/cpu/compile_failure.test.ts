// A kernel that does not compile fails where it runs, by name, and leaves the CPU device working: it used to stay
// among the programs waiting to compile, so every later batch (any kernel at all) failed with its error.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import type { KernelIR, Stmt } from "../../src/codegen/ir.ts";
import { CpuProgram } from "../../src/engine/cpu_programs.ts";
import { CompileError } from "../../src/runtime/compiler_cache.ts";

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
