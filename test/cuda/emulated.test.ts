// The CUDA backend end to end on a CPU emulator of the GPU (emu/): kernels rendered as for a GPU, compiled
// and loaded through the runtime's NVRTC and driver paths, run with block barriers, warp shuffles and
// warp-wide tensor-core products emulated. This checks what the renderer's CUDA C computes (tensor-core
// tiles, group reduces) where no GPU is; what it cannot check is the GPU's compiler and hardware.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { assertClose } from "../close.ts";
import { scratchDir } from "../scratch.ts";
import { buildCudaEmulator, emulatorEnv } from "./emu/build.ts";

const work = scratchDir("cuda-emu");
const library = buildCudaEmulator(work);
// the runtime reads these when it first loads the driver and the compiler
if (library) Object.assign(process.env, emulatorEnv(library, work), { TG_EMU_DEVICES: "3" });

const { Device, Tensor, dtypes } = await import("../../src/index.ts");
const { recordItems } = await import("../../src/engine/realize.ts");
const { cudaForm, renderCudaForm } = await import("../../src/codegen/cuda_forms.ts");
const { groupSize } = await import("../../src/renderer/cuda.ts");
const { TILE_SHAPES, WGMMA_TILE_SHAPES, tileCandidates, tileName } = await import("../../src/renderer/cuda_matmul.ts");
type T = InstanceType<typeof Tensor>;

/** Whether a kernel's CUDA form stores vectors (several upcast lanes at once). */
const vectorStores = (kernel: Parameters<typeof cudaForm>[0]): boolean =>
  renderCudaForm(cudaForm(kernel), "k", true).code.includes("tg_st;");

/**
 * Runs `build` on CUDA and on JS from the same random inputs: the largest |cuda - js| / (1 + |js|), and the forms of
 * the CUDA kernels.
 */
function compare(
  shapes: number[][],
  dtype: (typeof dtypes)[keyof typeof dtypes],
  build: (...xs: T[]) => T,
): { error: number; forms: string[] } {
  const inputs = shapes.map((shape) => Tensor.rand(shape, { device: "JS" }).sub(0.5).cast(dtype).realize());
  const js = Array.from(
    build(...inputs)
      .cast(dtypes.float32)
      .toArray() as Float32Array,
  );
  const { result, items } = recordItems(
    () =>
      build(...inputs.map((t) => t.to("CUDA")))
        .cast(dtypes.float32)
        .toArray() as Float32Array,
  );
  const forms = items.flatMap((item) => {
    if (item.kind !== "kernel") return [];
    const form = cudaForm(item.kernel);
    if (form.kind !== "tensorCores")
      return [
        form.rows
          ? "warp rows"
          : groupSize(form.kernel) > 0
            ? "group"
            : vectorStores(item.kernel)
              ? "loops, vector stores"
              : "loops",
      ];
    return [renderCudaForm(form, "k", true).launch.workspace ? "tensor cores, split k" : "tensor cores"];
  });
  assert.equal(result.length, js.length);
  const error = Array.from(result).reduce(
    (worst, g, i) => Math.max(worst, Math.abs(g - js[i]!) / (1 + Math.abs(js[i]!))),
    0,
  );
  return { error, forms };
}

if (library) {
  test("the emulator stands in for the GPU", () => {
    assert.ok(Device.isAvailable("CUDA"));
    assert.deepEqual(new Tensor([1, 2, 3], { device: "CUDA" }).mul(2).tolist(), [2, 4, 6]);
  });

  const tensorCoreCases: [string, number[][], "float16" | "bfloat16", (...xs: T[]) => T][] = [
    [
      "partial tiles",
      [
        [257, 200],
        [200, 385],
      ],
      "float16",
      (a, b) => a.matmul(b),
    ],
    [
      "both factors across k (a weight gradient)",
      [
        [200, 257],
        [200, 385],
      ],
      "float16",
      (a, b) => a.T.matmul(b),
    ],
    [
      "a transposed factor, aligned",
      [
        [200, 256],
        [200, 384],
      ],
      "float16",
      (a, b) => a.T.matmul(b),
    ],
    [
      "both factors along k (q @ k.T)",
      [
        [136, 200],
        [264, 200],
      ],
      "float16",
      (a, b) => a.matmul(b.T),
    ],
    [
      "a computed factor and an epilogue",
      [[3, 130, 64], [64]],
      "float16",
      (x, bias) => {
        const q = x.add(bias);
        return q.matmul(q.transpose(-1, -2)).gelu();
      },
    ],
    [
      "bfloat16, batched",
      [
        [4, 136, 72],
        [4, 72, 144],
      ],
      "bfloat16",
      (a, b) => a.matmul(b),
    ],
    [
      "k split across blocks (a weight gradient over many tokens)",
      [
        [1000, 136],
        [1000, 200],
      ],
      "float16",
      (a, b) => a.T.matmul(b),
    ],
    [
      "k split across blocks, batched, epilogue",
      [
        [2, 136, 1024],
        [2, 1024, 64],
      ],
      "float16",
      (a, b) => a.matmul(b).relu(),
    ],
  ];
  for (const [name, shapes, dtype, build] of tensorCoreCases) {
    test(`tensor-core matmul matches the JS device: ${name}`, () => {
      const { error, forms } = compare(shapes, dtypes[dtype], build);
      const expected = name.startsWith("k split") ? "tensor cores, split k" : "tensor cores";
      assert.ok(forms.includes(expected), `no ${expected} kernel ran: ${forms.join(", ")}`);
      // float32 sums in another order, then one 16-bit rounding
      assert.ok(error <= (dtype === "bfloat16" ? 2e-2 : 4e-3), `max relative error ${error}`);
    });
  }

  // the device picks the default tile at 4 stages here (an H100's shared memory); a 4090 gets 2 stages,
  // TC_STAGES any depth, TC_TILE (and BEAM) other tiles: every tile shape, mma.sync's at depths 2 and 3 as
  // well, wgmma's (the emulator is an sm_90 GPU) at 3 and 4 as well as their deepest, in children
  const variants = [
    { TC_TILE: "128x128x32:2x4", TC_STAGES: "2" },
    { TC_TILE: "128x128x32:2x2", TC_STAGES: "3" },
    { TC_TILE: "128x256x32:2x4" },
    { TC_TILE: "128x128x64:2x2", TC_STAGES: "2" },
    { TC_TILE: "128x128x64:2x4", TC_STAGES: "3" },
    { TC_TILE: "128x128x32:wgmma" },
    { TC_TILE: "128x128x64:wgmma", TC_STAGES: "4" },
    { TC_TILE: "128x256x32:wgmma", TC_STAGES: "3" },
    { TC_TILE: "128x256x64:wgmma" },
  ];
  const pipelinedCases = "aligned|along k|k split across blocks|bfloat16, batched";
  test("the pipelined tensor-core kernels are right at every tile shape BEAM may choose, and at 2 and 3 stages", {
    skip: process.env.TC_STAGES || process.env.TC_TILE ? "runs inside itself" : false,
  }, () => {
    assert.deepEqual(
      new Set(variants.map((v) => v.TC_TILE)),
      new Set([...TILE_SHAPES, ...WGMMA_TILE_SHAPES].map(tileName)),
    );
    for (const variant of variants) {
      const { NODE_TEST_CONTEXT: _, ...env } = process.env;
      // the widest wgmma tile also takes every case through registers (computed, unaligned or partial factors)
      const all = variant.TC_TILE === "128x256x64:wgmma";
      const run = spawnSync(
        process.execPath,
        [
          "--import",
          "tsx",
          "--test",
          "--test-reporter=spec",
          `--test-name-pattern=${all ? "tensor-core matmul matches" : pipelinedCases}`,
          import.meta.filename,
        ],
        {
          env: { ...env, ...variant },
          encoding: "utf8",
        },
      );
      const what = JSON.stringify(variant);
      assert.equal(run.status, 0, `${what}:\n${run.stdout.slice(-3000)}\n${run.stderr.slice(-2000)}`);
      const expected = all ? tensorCoreCases.length : 5;
      assert.match(
        run.stdout,
        new RegExp(`ℹ pass ${expected}\\b`),
        `${what}: not the ${expected} cases\n${run.stdout.slice(-2000)}`,
      );
    }
  });

  test("BEAM times a tensor-core kernel at every tile and keeps the fastest, cached on disk for the next run", () => {
    const cache = scratchDir("beam-tiles");
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const child = (...args: string[]) => {
      const run = spawnSync(
        process.execPath,
        ["--import", "tsx", join(import.meta.dirname, "beam-tile-child.ts"), ...args],
        {
          env: { ...env, BEAM: "1", TSGRAD_CACHE: cache, DEBUG: "2" },
          encoding: "utf8",
        },
      );
      assert.equal(run.status, 0, run.stderr.slice(-3000));
      return { ...(JSON.parse(run.stdout) as { error: number; searched: number; cacheHits: number }), log: run.stderr };
    };
    const first = child();
    assert.equal(first.searched, 1);
    assert.ok(first.error <= 4e-3, `max relative error ${first.error}`);
    const line = /BEAM r_256_320: (\S+) [\d.]+ us of (\d+) choices/.exec(first.log);
    assert.ok(line, `no search reported:\n${first.log.slice(-2000)}`);
    // the emulator is an H100 (sm_90, 228 KB of shared memory a multiprocessor): wgmma tiles too
    const candidates = tileCandidates(233472, undefined, "sm_90");
    assert.ok(candidates.some((t) => t.wgmma));
    assert.equal(Number(line[2]), candidates.length);
    // the cache holds the choice and every tile's time
    const entries = readdirSync(join(cache, "beam")).map(
      (f) =>
        JSON.parse(readFileSync(join(cache, "beam", f), "utf8")) as {
          choice?: string;
          seconds?: Record<string, number>;
        },
    );
    const entry = entries.find((e) => e.choice === line[1]);
    assert.ok(
      entry &&
        Object.values(entry.seconds!).length === candidates.length &&
        Object.values(entry.seconds!).every((t) => t > 0 && Number.isFinite(t)),
      JSON.stringify(entries),
    );
    const second = child();
    assert.deepEqual([second.searched, second.cacheHits], [0, 1]);
    assert.ok(second.error <= 4e-3, `max relative error ${second.error}`);
    // a computed factor: the default tile with ~180 registers a thread, or capped for two blocks a
    // multiprocessor, or (an sm_90 GPU) a 128 x 128 x 32 wgmma tile, its computed tiles stored into core matrices
    const computed = child("computed");
    assert.match(computed.log, /BEAM r_256_320: (128x128x32:2x4:s2(:b2)?|128x128x32:wgmma:s2) [\d.]+ us of 3 choices/);
    assert.ok(computed.error <= 4e-3, `max relative error ${computed.error}`);
  });

  test("a split-k matmul gives the same result launch after launch (each leaves its tile counters at zero)", () => {
    const [a, b] = [
      Tensor.rand([1000, 136], { device: "CUDA" }).cast(dtypes.float16),
      Tensor.rand([1000, 200], { device: "CUDA" }).cast(dtypes.float16),
    ].map((t) => t.realize());
    const run = (scale: number) =>
      Array.from(a!.T.matmul(b!.mul(scale).realize()).cast(dtypes.float32).toArray() as Float32Array);
    // scaling a factor by a power of two scales every sum exactly; a stale output would not follow
    const first = run(1);
    assert.deepEqual(
      run(2),
      first.map((x) => 2 * x),
    );
    assert.deepEqual(
      run(4),
      first.map((x) => 4 * x),
    );
  });

  test("an embedding's gradient (a one-hot sum) runs on tensor cores and matches the JS device", () => {
    const ids = Tensor.randint([4, 64], 0, 300, { device: "JS" }).realize();
    const weight = Tensor.rand([300, 136], { device: "JS" }).cast(dtypes.float16).realize();
    const upstream = Tensor.rand([4, 64, 136], { device: "JS" }).realize();
    const grad = (device: string) => {
      const w = weight.to(device).detach();
      w.requiresGrad = true;
      Tensor.embedding(ids.to(device), w).cast(dtypes.float32).mul(upstream.to(device)).sum().backward();
      return w.grad!;
    };
    const js = Array.from(grad("JS").cast(dtypes.float32).toArray() as Float32Array);
    const { result, items } = recordItems(() =>
      Array.from(grad("CUDA").cast(dtypes.float32).toArray() as Float32Array),
    );
    assert.ok(
      items.some((item) => item.kind === "kernel" && cudaForm(item.kernel).kind === "tensorCores"),
      "no tensor-core kernel ran",
    );
    const error = result.reduce((worst, g, i) => Math.max(worst, Math.abs(g - js[i]!) / (1 + Math.abs(js[i]!))), 0);
    assert.ok(error <= 4e-3, `max relative error ${error}`);
  });

  test("a jitted step replays as one CUDA graph, with the numbers of plain calls, its inputs copied in", async () => {
    const { jit } = await import("../../src/tensor/index.ts");
    const koffi = (await import("koffi")).default;
    const graphLaunches = koffi.load(library).func("int tg_emu_graph_launches(void)") as () => number;
    const w = Tensor.rand([64, 32], { device: "CUDA" }).realize();
    const step = (x: T) => {
      const y = x.matmul(w).relu().sum({ axis: 1 });
      w.assign(w.mul(0.5));
      return y;
    };
    const xs = [1, 2, 3, 4].map(() => Tensor.rand([8, 64], { device: "CUDA" }).realize());
    const plain = (() => {
      const w0 = w.toArray().slice();
      const outs = xs.map((x) => Array.from(step(x).realize().toArray() as Float32Array));
      w.assign(new Tensor(Array.from(w0 as Float32Array), { device: "CUDA" }).reshape([64, 32])).realize();
      return outs;
    })();
    const jitted = jit(step);
    const before = graphLaunches();
    const outs = xs.map((x) => Array.from(jitted(x).toArray() as Float32Array));
    assert.deepEqual(outs, plain);
    // call 1 runs, call 2 captures, calls 3 and 4 replay the graph
    assert.equal(graphLaunches() - before, 2);
  });

  test("data parallelism over two emulated GPUs: the batch sharded, peer copies, graphs per device, each kernel on its own GPU, the numbers of one JS device", async () => {
    const { jit } = await import("../../src/tensor/index.ts");
    const koffi = (await import("koffi")).default;
    const peerCopies = koffi.load(library).func("int tg_emu_peer_copies(void)") as () => number;
    const graphLaunches = koffi.load(library).func("int tg_emu_graph_launches(void)") as () => number;
    const foreignLaunches = koffi.load(library).func("int tg_emu_foreign_launches(void)") as () => number;
    const batch = (i: number, shape: number[]) =>
      new Tensor(
        Array.from({ length: shape.reduce((a, b) => a * b, 1) }, (_, j) => Math.sin(j * 0.37 + i)),
        { device: "JS", dtype: "float32" },
      ).reshape(shape);
    const train = (devices: string[]) => {
      const place = (t: T) => (devices.length > 1 ? t.shard(devices, 0) : t);
      const params = [batch(100, [16, 32]), batch(101, [32]), batch(102, [32, 4])].map((t) => {
        const p = (devices.length > 1 ? t.to(devices) : t).realize();
        p.requiresGrad = true;
        return p;
      });
      const [w1, b1, w2] = params as [T, T, T];
      const step = jit((x: T, y: T): T => {
        const loss = x.matmul(w1).add(b1).gelu().matmul(w2).sub(y).square().mean();
        for (const p of params) p.grad = null;
        loss.backward();
        for (const p of params) p.assign(p.sub(p.grad!.mul(0.05)));
        return loss;
      });
      const losses = [0, 1, 2, 3].map((i) => step(place(batch(i, [8, 16])), place(batch(i + 10, [8, 4]))).item());
      return { losses, weights: params.map((p) => Array.from(p.toArray() as Float32Array)) };
    };
    const one = train(["JS"]);
    const [copiesBefore, graphsBefore, foreignBefore] = [peerCopies(), graphLaunches(), foreignLaunches()];
    const two = train(["CUDA", "CUDA:1"]);
    // each kernel ran on the GPU that holds its buffers (CUDA:1's were once launched on CUDA:0, reading over the link)
    assert.equal(foreignLaunches() - foreignBefore, 0, "kernels launched on a GPU other than their buffers'");
    assert.ok(peerCopies() - copiesBefore > 0, "the all-reduce copied between the GPUs peer to peer");
    // replays (calls 3 and 4) launch each device's runs of kernels between copies as CUDA graphs
    assert.ok(graphLaunches() - graphsBefore >= 4, `${graphLaunches() - graphsBefore} graph launches`);
    assertClose(two.losses, one.losses, { atol: 1e-5, rtol: 1e-5, what: "loss per step" });
    assertClose(two.weights, one.weights, { atol: 1e-5, rtol: 0, what: "weights (tensor, element)" });
  });

  test("a ring all-reduce over three emulated GPUs (each step's copies queued between waits) sums exactly, on every GPU", async () => {
    const { recordItems } = await import("../../src/engine/realize.ts");
    const devices = ["CUDA", "CUDA:1", "CUDA:2"];
    // big enough for the ring (over 256 KB), an odd length: uneven chunks
    const n = 100_003;
    const parts = devices.map((_, d) => Array.from({ length: n }, (_, i) => ((i * 7 + d * 13) % 17) - 8));
    const x = new Tensor(parts.flat(), { device: "JS", dtype: dtypes.float32 }).reshape([3, n]).shard(devices, 0);
    const { result: total, items } = recordItems(() => x.sum({ axis: 0 }).realize());
    // 2(n-1) = 4 ring steps of 3 copies, and each device's share gathered for the replicated result
    assert.ok(
      items.filter((item) => item.kind === "copy").length >= 12,
      `${items.filter((item) => item.kind === "copy").length} copies`,
    );
    const expected = Array.from({ length: n }, (_, i) => parts[0]![i]! + parts[1]![i]! + parts[2]![i]!);
    const shards = (total.node as unknown as { shards: unknown[] }).shards;
    assert.equal(shards.length, 3);
    shards.forEach((shard, d) =>
      assert.deepEqual(Array.from(new Tensor(shard as never).toArray() as Float32Array), expected, `CUDA:${d}`),
    );
  });

  test("a convolution and its gradients (a matmul over a view of the windows, float16) match the JS device", () => {
    const run = (device: string) => {
      const x = Tensor.rand([2, 16, 12, 12], { device: "JS" }).sub(0.5).cast(dtypes.float16).to(device).realize();
      const w = Tensor.rand([32, 16, 3, 3], { device: "JS" }).sub(0.5).cast(dtypes.float16).to(device).realize();
      for (const t of [x, w]) t.requiresGrad = true;
      const y = x.conv2d(w, { padding: 1, stride: 2 }).maxPool2d({ kernel: 2 });
      y.float().square().sum().backward();
      return [y, x.grad!, w.grad!].map((t) => Array.from(t.cast(dtypes.float32).toArray() as Float32Array));
    };
    Tensor.manualSeed(7);
    const js = run("JS");
    Tensor.manualSeed(7);
    const cuda = run("CUDA");
    ["output", "input gradient", "weight gradient"].forEach((what, i) => {
      const error = cuda[i]!.reduce(
        (worst, g, j) => Math.max(worst, Math.abs(g - js[i]![j]!) / (1 + Math.abs(js[i]![j]!))),
        0,
      );
      assert.ok(error <= 1e-2, `${what}: max relative error ${error}`);
    });
  });

  test("a copy between GPUs is queued, after the writes it reads and before the source's later writes (the emulator runs queued work only when something waits for it)", async () => {
    const koffi = (await import("koffi")).default;
    const queued = koffi.load(library).func("int tg_emu_queued(void)") as () => number;
    const expected = Array.from({ length: 4096 }, (_, i) => 2 * i);
    for (const readFirst of ["destination", "source"]) {
      const src = Tensor.arange(0, 4096, 1, { device: "CUDA:1" }).float().mul(2).realize();
      const dst = src.to("CUDA").realize();
      assert.ok(queued() > 0, "the copy made the host wait for the GPUs");
      src.assign(src.add(1)).realize();
      // reading one side runs its stream's queue and, through the waits, what it depends on of the other
      const read = (t: T): number[] => Array.from(t.toArray() as Float32Array);
      const [d, s] =
        readFirst === "destination"
          ? [read(dst), read(src)]
          : ([read(src), read(dst)].reverse() as [number[], number[]]);
      assert.deepEqual(d, expected, `the copy read the source too early or too late (reading the ${readFirst} first)`);
      assert.deepEqual(
        s,
        expected.map((v) => v + 1),
      );
    }
  });

  // big enough that each thread takes 4 (or 2) neighbours: vector loads and stores
  const vectorCases: [string, number[][], "float16" | "float32", (...xs: T[]) => T][] = [
    [
      "float16, a broadcast bias and row scale",
      [[512, 1024], [1024], [512, 1]],
      "float16",
      (a, bias, scale) => a.add(bias).mul(scale).relu(),
    ],
    ["float32, 2 lanes where 4 do not divide", [[2, 1024, 130], [130]], "float32", (a, b) => a.exp().add(b)],
    ["a bool output, then read back as a vector", [[512, 1024]], "float16", (a) => a.gt(0).realize().where(a, a.neg())],
    ["a transposed copy (scalar loads, vector stores)", [[1024, 512]], "float16", (a) => a.T.contiguous()],
  ];
  for (const [name, shapes, dtype, build] of vectorCases) {
    test(`vectorised elementwise kernels match the JS device: ${name}`, () => {
      const { error, forms } = compare(shapes, dtypes[dtype], build);
      assert.ok(forms.includes("loops, vector stores"), `no vector stores: ${forms.join(", ")}`);
      assert.ok(error <= 1e-6, `max relative error ${error}`);
    });
  }

  test("an in-place update with vector lanes (the output is an input) matches the JS device", () => {
    const init = Array.from(Tensor.rand([512 * 1024], { device: "JS" }).toArray() as Float32Array);
    const x = Tensor.rand([512, 1024], { device: "JS" }).realize();
    const update = (device: string) => {
      const w = new Tensor(init, { device }).reshape([512, 1024]).contiguous().realize();
      w.assign(w.mul(0.5).add(x.to(device))).realize();
      return Array.from(w.toArray() as Float32Array);
    };
    const js = update("JS");
    const { result, items } = recordItems(() => update("CUDA"));
    assert.ok(
      items.some((item) => item.kind === "kernel" && vectorStores(item.kernel)),
      "no vector stores",
    );
    assert.deepEqual(result, js);
  });

  test("group reduces (a block per row, warp shuffles) match the JS device", () => {
    const rows = compare([[3, 5000]], dtypes.float32, (x) => x.max({ axis: 1 }).add(x.sum({ axis: 1 })));
    assert.ok(rows.forms.includes("group"), `forms: ${rows.forms.join(", ")}`);
    // 5000 float32 terms summed in another order
    assert.ok(rows.error < 1e-4, `max relative error ${rows.error}`);
    const softmax = compare([[4, 700]], dtypes.float32, (x) => x.softmax(-1));
    assert.ok(softmax.error < 1e-6, `softmax: max relative error ${softmax.error}`);
  });

  test("warp-per-row reduces (many rows of their own: a softmax, a layer norm) match the JS device", () => {
    // 4100 rows: the last block's warps past the end leave; float16 rows of 512 as the BERT step has them
    // (4 neighbours a step, one vector load), float32 rows of 200 (one element a step)
    const softmax = compare([[4100, 512]], dtypes.float16, (x) => x.softmax(-1));
    assert.ok(softmax.forms.includes("warp rows"), `forms: ${softmax.forms.join(", ")}`);
    assert.ok(softmax.error < 1e-3, `softmax: max relative error ${softmax.error}`);
    const norm = compare([[4100, 200]], dtypes.float32, (x) => {
      const centered = x.sub(x.mean({ axis: -1, keepdim: true }));
      return centered.div(centered.square().mean({ axis: -1, keepdim: true }).add(1e-5).sqrt());
    });
    assert.ok(norm.forms.includes("warp rows"), `forms: ${norm.forms.join(", ")}`);
    assert.ok(norm.error < 1e-4, `layer norm: max relative error ${norm.error}`);
  });

  test("int32 argmin and argmax (wrong on an H200, see issue 8) are right here", () => {
    const t = new Tensor(
      [
        [1, 5, 5, 0],
        [7, 2, 7, -1],
      ],
      { device: "CUDA", dtype: dtypes.int32 },
    );
    assert.deepEqual(t.neg().max({ axis: 1 }).tolist(), [0, 1]);
    assert.deepEqual(t.argmin({ axis: 1 }).tolist(), [3, 3]);
    assert.deepEqual(t.argmax({ axis: 1 }).tolist(), [1, 0]);
  });

  test("the op suite and the PyTorch conformance suite pass on the emulated GPU", { timeout: 600_000 }, () => {
    const files = [
      "elementwise",
      "nn_ops",
      "reduce_movement",
      "regressions",
      "jit",
      "conv",
      "activations",
      "einsum",
      "scan",
      "sort",
      "upsample",
    ]
      .map((t) => `test/core/${t}.test.ts`)
      .concat("test/conformance/torch.test.ts");
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    // no CPU device: the op tests run on CUDA and JS only
    const run = spawnSync(process.execPath, ["--import", "tsx", "--test", "--test-reporter=spec", ...files], {
      env: { ...env, ...emulatorEnv(library, work), CC: "/nonexistent/cc" },
      encoding: "utf8",
    });
    const passed = run.stdout.match(/^ℹ pass (\d+)/m)?.[1];
    assert.equal(
      run.status,
      0,
      `${run.stdout
        .split("\n")
        .filter((l) => /✖|Error|expected|actual/.test(l))
        .slice(0, 40)
        .join("\n")}\n${run.stderr.slice(-2000)}`,
    );
    assert.match(run.stdout, /reductions on CUDA/);
    assert.match(run.stdout, /PyTorch conformance on CUDA/);
    assert.ok(Number(passed) > 150, `only ${passed} op tests passed`);
  });
}
