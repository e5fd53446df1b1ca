// The WEBGPU device here: Dawn on SwiftShader (npm test installs libvulkan1 and Chromium, whose SwiftShader it
// uses). The op suites run on it through testDevices(); these check what is its own: that it is there at all
// (never skipped), its storage of narrow elements in 32-bit words, exact 16-bit float conversions, in-place
// updates, and the clear errors for what WGSL cannot do.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor, dtypes, jit } from "../../src/index.ts";
import { webGpuDevice, webGpuFailure } from "../../src/runtime/webgpu.ts";
import { f32ToF16Bits } from "../../src/dtype.ts";
import { searchStats } from "../../src/engine/search.ts";
import { assertClose } from "../close.ts";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

test("a WebGPU adapter answers (Dawn on this machine's Vulkan driver)", (t) => {
  const device = webGpuDevice();
  assert.ok(device, `WEBGPU is not available: ${webGpuFailure()}`);
  t.diagnostic(
    `adapter: ${device.info.adapter}; ${device.info.maxStorageBuffersPerShaderStage} storage buffers a shader`,
  );
  assert.ok(Device.isAvailable("WEBGPU"));
});

test("bytes written by many invocations at once land each in its place (bool, int8, float16)", () => {
  const n = 10_007; // not a multiple of 4: the last word is partly outside the tensor
  const values = Float32Array.from({ length: n }, (_, i) => ((i * 7919) % 211) - 105);
  const x = new Tensor(values, { device: "WEBGPU" });
  const y = new Tensor(values, { device: "JS" });
  for (const make of [
    (t: Tensor) => t.lt(3),
    (t: Tensor) => t.cast(dtypes.int8),
    (t: Tensor) => t.div(7).cast(dtypes.float16),
    (t: Tensor) => t.cast(dtypes.uint8).add(200),
  ])
    assert.deepEqual(make(x).toArray(), make(y).toArray());
});

test("float32 to float16 and back rounds as the reference does, at ties, subnormals, overflow and NaN", () => {
  const tricky = [
    0,
    -0,
    1,
    65504,
    65519.99,
    65520,
    1e6,
    -1e6,
    6.1035156e-5,
    6.0975552e-5,
    5.9604645e-8,
    2.9802322e-8,
    2.9802326e-8,
    1.0009765625,
    1.00048828125,
    1.00146484375,
    -2.00048828125,
    3.4028235e38,
    Number.POSITIVE_INFINITY,
    Number.NEGATIVE_INFINITY,
    Number.NaN,
    1e-40,
  ];
  const random = Array.from({ length: 2000 }, (_, i) => Math.sin(i * 12.9898) * 10 ** ((i % 13) - 8));
  const inputs = Float32Array.from([...tricky, ...random]);
  const bits = new Tensor(inputs, { device: "WEBGPU" }).cast(dtypes.float16).bitcast(dtypes.uint16).toArray();
  const expected = Uint16Array.from(inputs, (v) => f32ToF16Bits(v));
  assert.deepEqual(bits, expected);
  const back = new Tensor(expected, { device: "WEBGPU" }).bitcast(dtypes.float16).cast(dtypes.float32).toArray();
  assert.deepEqual(back, new Tensor(expected, { device: "JS" }).bitcast(dtypes.float16).cast(dtypes.float32).toArray());
});

test("an in-place update binds its buffer once and a jitted step replays on new inputs", () => {
  const w = new Tensor(Float32Array.of(1, 2, 3, 4), { device: "WEBGPU" }).contiguous().realize();
  const step = jit((g: Tensor) => w.assign(w.sub(g.mul(0.5))).realize());
  for (let i = 0; i < 3; i++) step(new Tensor(Float32Array.of(2, 2, 2, 2), { device: "WEBGPU" }));
  assert.deepEqual(w.toArray(), Float32Array.from([-2, -1, 0, 1]));
});

test("64-bit dtypes, which WGSL has no type for, are refused naming the dtype", () => {
  const x = new Tensor(BigInt64Array.from([1n, 2n]), { device: "WEBGPU" });
  assert.throws(() => x.add(1).toArray(), /WEBGPU: .* uses int64, which WGSL has no type for/);
  const y = new Tensor(Float64Array.from([1, 2]), { device: "WEBGPU", dtype: dtypes.float64 });
  assert.throws(() => y.mul(2).toArray(), /uses float64/);
  // copies in and out need no kernel: they work
  assert.deepEqual(x.toArray(), BigInt64Array.from([1n, 2n]));
});

test("BEAM searches WEBGPU kernels, timing candidates on the device, and keeps the values", () => {
  const before = { beam: process.env.BEAM, cache: process.env.TSGRAD_CACHE };
  process.env.BEAM = "1";
  process.env.TSGRAD_CACHE = mkdtempSync(join(tmpdir(), "tsgrad-webgpu-beam-"));
  try {
    const [a, b] = [
      [12, 20],
      [20, 16],
    ].map(([m, n], s) => Float32Array.from({ length: m! * n! }, (_, i) => Math.sin(i * 1.7 + s)));
    const product = (device: string) =>
      new Tensor(a!, { device })
        .reshape([12, 20])
        .matmul(new Tensor(b!, { device }).reshape([20, 16]))
        .toArray();
    const searched = searchStats.searched;
    const values = product("WEBGPU");
    assert.ok(searchStats.searched > searched, "BEAM searched the WEBGPU kernels");
    assertClose(Array.from(values as Float32Array), Array.from(product("JS") as Float32Array), { atol: 1e-5 });
  } finally {
    rmSync(process.env.TSGRAD_CACHE!, { recursive: true, force: true });
    for (const [name, value] of [
      ["BEAM", before.beam],
      ["TSGRAD_CACHE", before.cache],
    ] as const)
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
  }
});
