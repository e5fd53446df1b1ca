// RDNA3's WMMA tiles (renderer/hip_wmma.ts) run on the CPU emulator (test/cuda/emu/hip_emu.h emulates the wave32
// instructions from AMD's published register layout, and stops where a wave's halves disagree): 16-bit matmuls of
// ragged, batched, transposed and computed factors, with what follows them fused, equal the JS device's results up
// to the order of float32 additions. What it cannot check is AMD's compiler and hardware (test/amd/compile.test.ts
// checks the same tiles compile to v_wmma instructions without spills).
import { test } from "node:test";
import assert from "node:assert/strict";
import { scratchDir } from "../scratch.ts";
import { amdEmulatorEnv, buildCudaEmulator } from "../cuda/emu/build.ts";

const work = scratchDir("amd-wmma");
const library = buildCudaEmulator(work);
if (library) Object.assign(process.env, amdEmulatorEnv(library, work), { TSGRAD_LIBCUDA: "/nonexistent/libcuda.so.1" });

const { Tensor, dtypes } = await import("../../src/index.ts");
const { recordItems } = await import("../../src/engine/realize.ts");
const { amdForm } = await import("../../src/codegen/amd_forms.ts");
type T = InstanceType<typeof Tensor>;
type DType = (typeof dtypes)["float16"];
const skip = library ? false : "no C++ compiler to build the emulator";

/**
 * Runs `build` on AMD and on JS from the same 16-bit inputs: the largest |amd - js| / (1 + |js|) and how many of
 * the AMD kernels were WMMA tiles.
 */
function compare(shapes: number[][], dtype: DType, build: (...xs: T[]) => T): { error: number; wmma: number } {
  const inputs = shapes.map((shape) => Tensor.rand(shape, { device: "JS" }).sub(0.5).cast(dtype).realize());
  const js = Array.from(
    build(...inputs)
      .cast(dtypes.float32)
      .toArray() as Float32Array,
  );
  const { result, items } = recordItems(
    () =>
      build(...inputs.map((t) => t.to("AMD")))
        .cast(dtypes.float32)
        .toArray() as Float32Array,
  );
  const wmma = items.filter((i) => i.kind === "kernel" && amdForm(i.kernel, "gfx1100").kind === "wmma").length;
  assert.equal(result.length, js.length);
  let error = 0;
  for (let i = 0; i < js.length; i++) error = Math.max(error, Math.abs(result[i]! - js[i]!) / (1 + Math.abs(js[i]!)));
  return { error, wmma };
}

// float16 results round to 11 bits; two float32 sums in different orders may land either side of a rounding
const TOLERANCE = { float16: 2e-3, bfloat16: 1.6e-2 } as const;

for (const dtype of [dtypes.float16, dtypes.bfloat16]) {
  const tolerance = TOLERANCE[dtype.name as keyof typeof TOLERANCE];

  test(`${dtype.name}: a matmul of ragged sizes (not multiples of the 64 x 64 x 16 tile) runs as WMMA`, {
    skip,
  }, () => {
    const { error, wmma } = compare(
      [
        [150, 200],
        [200, 90],
      ],
      dtype,
      (a, b) => a.matmul(b),
    );
    assert.equal(wmma, 1);
    assert.ok(error < tolerance, `error ${error}`);
  });

  test(`${dtype.name}: batched products with a transposed factor (attention's q k^T) run as WMMA`, { skip }, () => {
    const { error, wmma } = compare(
      [
        [4, 96, 64],
        [4, 128, 64],
      ],
      dtype,
      (q, k) => q.matmul(k.transpose(-1, -2)),
    );
    assert.equal(wmma, 1);
    assert.ok(error < tolerance, `error ${error}`);
  });

  test(`${dtype.name}: a computed factor and a fused epilogue (bias, GELU) match the JS device`, { skip }, () => {
    const { error, wmma } = compare([[128, 160], [160], [160, 112], [112]], dtype, (x, shift, w, bias) =>
      x.add(shift).matmul(w).add(bias).gelu(),
    );
    assert.equal(wmma, 1);
    assert.ok(error < tolerance, `error ${error}`);
  });
}

test("a linear layer's backward pass takes WMMA tiles for both gradients", { skip }, () => {
  const x = Tensor.rand([192, 128], { device: "JS" }).sub(0.5).cast(dtypes.float16).realize();
  const w = Tensor.rand([128, 96], { device: "JS" }).sub(0.5).cast(dtypes.float16).realize();
  const gradients = (device: string): Float32Array[] => {
    const [xs, ws] = [x.to(device), w.to(device)];
    xs.requiresGrad = ws.requiresGrad = true;
    xs.matmul(ws).relu().cast(dtypes.float32).sum().backward();
    return [xs.grad!, ws.grad!].map((g) => g.cast(dtypes.float32).toArray() as Float32Array);
  };
  const js = gradients("JS");
  const { result: amd, items } = recordItems(() => gradients("AMD"));
  const wmma = items.filter((i) => i.kind === "kernel" && amdForm(i.kernel, "gfx1100").kind === "wmma").length;
  assert.ok(wmma >= 2, `${wmma} WMMA kernels in the forward and backward pass`);
  for (const [i, g] of amd.entries())
    for (let j = 0; j < g.length; j++)
      assert.ok(Math.abs(g[j]! - js[i]![j]!) <= 2e-3 * (1 + Math.abs(js[i]![j]!)), `gradient ${i}[${j}]`);
});
