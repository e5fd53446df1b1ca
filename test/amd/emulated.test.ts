// The AMD backend end to end on the CPU emulator of a GPU (test/cuda/emu, through its HIP and hiprtc entry points):
// kernels rendered as HIP for a gfx1100, compiled and loaded through the runtime's hiprtc and HIP paths, run with
// barriers and wave32 shuffles emulated. This checks the runtime, the engine's glue and what the HIP kernels
// compute where no AMD GPU is; what it cannot check is AMD's compiler and hardware.
import { test } from "node:test";
import assert from "node:assert/strict";
import koffi from "koffi";
import { scratchDir } from "../scratch.ts";
import { amdEmulatorEnv, buildCudaEmulator } from "../cuda/emu/build.ts";

const work = scratchDir("amd-emu");
const library = buildCudaEmulator(work);
// the runtime reads these when it first loads HIP and hiprtc; no CUDA, so that AMD is the GPU here
if (library)
  Object.assign(process.env, amdEmulatorEnv(library, work), {
    TG_EMU_DEVICES: "3",
    TSGRAD_LIBCUDA: "/nonexistent/libcuda.so.1",
  });

const { Device, Tensor, dtypes } = await import("../../src/index.ts");
const { recordItems } = await import("../../src/engine/realize.ts");
const { amdForm } = await import("../../src/codegen/amd_forms.ts");
const { groupSize } = await import("../../src/renderer/cuda.ts");
const { amdDevice } = await import("../../src/runtime/hip.ts");
type T = InstanceType<typeof Tensor>;
const skip = library ? false : "no C++ compiler to build the emulator";
const emulator = (signature: string) => koffi.load(library!).func(signature) as () => number;

/**
 * Runs `build` on AMD and on JS from the same inputs: the largest |amd - js| / (1 + |js|), and each AMD kernel's form
 * ("group" for a group reduce, else "loops").
 */
function compare(shapes: number[][], build: (...xs: T[]) => T): { error: number; forms: string[] } {
  const inputs = shapes.map((shape) => Tensor.rand(shape, { device: "JS" }).sub(0.5).realize());
  const js = Array.from(build(...inputs).toArray() as Float32Array);
  const { result, items } = recordItems(() => build(...inputs.map((t) => t.to("AMD"))).toArray() as Float32Array);
  const forms = items.flatMap((item) => {
    if (item.kind !== "kernel") return [];
    const form = amdForm(item.kernel, "gfx1100");
    return [form.kind === "loops" && groupSize(form.kernel) > 0 ? "group" : form.kind];
  });
  assert.equal(result.length, js.length);
  const error = Array.from(result).reduce(
    (worst, g, i) => Math.max(worst, Math.abs(g - js[i]!) / (1 + Math.abs(js[i]!))),
    0,
  );
  return { error, forms };
}

test("the emulator stands in for an AMD GPU: a gfx1100, the default device where no CUDA GPU answers", { skip }, () => {
  assert.ok(Device.isAvailable("AMD"));
  assert.equal(Device.DEFAULT, "AMD");
  assert.equal(amdDevice(0).arch, "gfx1100");
  assert.deepEqual(new Tensor([1, 2, 3], { device: "AMD" }).mul(2).tolist(), [2, 4, 6]);
});

test("data of every width copied into AMD memory and back is unchanged", { skip }, () => {
  for (const [dtype, values] of [
    [dtypes.float32, [1.5, -2, 1e30, -0]],
    [dtypes.float16, [1.5, -2, 65504, 0.000061]],
    [dtypes.int32, [1, -2, 2 ** 31 - 1, -(2 ** 31)]],
    [dtypes.uint8, [0, 1, 128, 255]],
  ] as const) {
    const host = new Tensor([...values], { device: "JS", dtype });
    assert.deepEqual(new Tensor([...values], { device: "AMD", dtype }).tolist(), host.tolist(), dtype.name);
  }
});

test("elementwise kernels match the JS device", { skip }, () => {
  const { error, forms } = compare([[33, 65], [65]], (x, y) => x.mul(y).add(1).exp().sqrt().where(x.gt(0), x.neg()));
  assert.ok(error < 1e-5, `error ${error}`);
  assert.deepEqual(forms, ["loops"]);
});

test("a float32 matmul (many outputs, each reduced by its thread) matches the JS device", { skip }, () => {
  const shapes = [
    [200, 48],
    [48, 160],
  ];
  const { error, forms } = compare(shapes, (x, w) => x.matmul(w).relu());
  assert.ok(error < 1e-5, `error ${error}`);
  assert.deepEqual(forms, ["loops"]);
});

test("group reduces (a long sum, softmax rows) combine their threads' partial sums with wave shuffles", {
  skip,
}, () => {
  const sum = compare([[5, 20000]], (x) => x.sum({ axis: 1 }));
  assert.ok(sum.error < 1e-5, `error ${sum.error}`);
  assert.deepEqual(sum.forms, ["group"]);
  const softmax = compare([[8, 3000]], (x) => x.mul(4).softmax(-1).mul(1000));
  assert.ok(softmax.error < 1e-4, `error ${softmax.error}`);
  assert.ok(softmax.forms.includes("group"), softmax.forms.join(", "));
});

test("a jitted step replays as one HIP graph, with the numbers of plain calls", { skip }, async () => {
  const { jit } = await import("../../src/tensor/index.ts");
  const graphLaunches = emulator("int tg_emu_graph_launches(void)");
  const w = Tensor.rand([64, 32], { device: "AMD" }).realize();
  const step = (x: T) => {
    const y = x.matmul(w).relu().sum({ axis: 1 });
    w.assign(w.mul(0.5));
    return y;
  };
  const xs = [1, 2, 3, 4].map(() => Tensor.rand([8, 64], { device: "AMD" }).realize());
  const w0 = Array.from(w.toArray() as Float32Array);
  const plain = xs.map((x) => Array.from(step(x).realize().toArray() as Float32Array));
  w.assign(new Tensor(w0, { device: "AMD" }).reshape([64, 32])).realize();
  const jitted = jit(step);
  const before = graphLaunches();
  const outs = xs.map((x) => Array.from(jitted(x).toArray() as Float32Array));
  assert.deepEqual(outs, plain);
  // call 1 runs, call 2 captures, calls 3 and 4 replay the graph
  assert.equal(graphLaunches() - before, 2);
});

test("a copy between two AMD GPUs goes peer to peer, and through host memory where they have no peer access", {
  skip,
}, () => {
  const peerCopies = emulator("int tg_emu_peer_copies(void)");
  const x = Tensor.rand([1000], { device: "AMD" }).realize();
  const expected = Array.from(x.mul(2).toArray() as Float32Array);
  const before = peerCopies();
  assert.deepEqual(Array.from(x.to("AMD:1").mul(2).toArray() as Float32Array), expected);
  assert.equal(peerCopies() - before, 1);
  // GPUs on separate PCIe root complexes: no peer access (asked once per pair: AMD:2 has not asked about AMD:0)
  process.env.TG_EMU_PEER = "0";
  try {
    assert.deepEqual(Array.from(x.to("AMD:2").mul(2).toArray() as Float32Array), expected);
    assert.equal(peerCopies() - before, 1);
  } finally {
    delete process.env.TG_EMU_PEER;
  }
});

test("a model's step sharded over two AMD GPUs matches one JS device", { skip }, () => {
  const data = Tensor.rand([8, 16], { device: "JS" }).realize();
  const w = Tensor.rand([16, 4], { device: "JS" }).realize();
  const loss = (x: T, weight: T) => x.matmul(weight).gelu().square().mean();
  const js = loss(data, w).item();
  const sharded = loss(data.shard(["AMD", "AMD:1"], 0), w.to(["AMD", "AMD:1"])).item();
  assert.ok(Math.abs(sharded - js) < 1e-5 * (1 + Math.abs(js)), `${sharded} vs ${js}`);
});
