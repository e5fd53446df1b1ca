// The hand-written kernel options: register tiles for matmul, nothing that blows up code size, threads for big kernels.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, UOp } from "../../src/index.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";

/** The kernels that would compute `t`, lowered with the default options. */
function kernelsFor(t: Tensor): KernelIR[] {
  assert.ok(t.node instanceof UOp);
  return createSchedule([t.node]).items.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
}

/** Upcast amounts by axis from a kernel's options key (`u1x8,0x4|r1|p1`). */
const upcasts = (k: KernelIR): number[] => (k.opts.split("|")[0]!.slice(1) || "").split(",").filter(Boolean).map((u) => Number(u.split("x")[1]));

test("a matmul is tiled in registers along both output axes", () => {
  const a = Tensor.empty([64, 32], { device: "JS" });
  const b = Tensor.empty([32, 48], { device: "JS" });
  const [kernel] = kernelsFor(a.matmul(b));
  assert.deepEqual(upcasts(kernel!), [16, 8]);
});

test("a reduce over a long fused expression is upcast little", () => {
  let a = Tensor.empty([64, 32], { device: "JS" });
  for (let i = 0; i < 40; i++) a = a.mul(1.5).add(0.25);
  const [kernel] = kernelsFor(a.matmul(Tensor.empty([32, 48], { device: "JS" })));
  assert.ok(upcasts(kernel!).reduce((w, u) => w * u, 1) <= 4, kernel!.opts);
});

test("elementwise kernels are not upcast, and big ones run on threads", () => {
  const [big] = kernelsFor(Tensor.empty([512, 512], { device: "JS" }).mul(2));
  assert.equal(big!.opts, "u|r1|p1");
  const [small] = kernelsFor(Tensor.empty([8, 8], { device: "JS" }).mul(2));
  assert.equal(small!.opts, "u|r1|p0");
});
