// What the CUDA renderer makes of typical kernels: the launch form it picks, and what the compiled PTX
// must contain (tensor-core mma, warp shuffles, exact half conversions, no contracted multiply-adds,
// vector loads). The kernels come from tensor ops run on the JS backend, scheduled as for a GPU.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, dtypes } from "../../src/index.ts";
import { jsBackend } from "../../src/backends.ts";
import { registerBackend } from "../../src/engine/backend.ts";
import type { DType } from "../../src/dtype.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { groupSize } from "../../src/renderer/cuda.ts";
import {
  DEFAULT_TILE_SHAPE,
  TILE_SHAPES,
  WGMMA_TILE_SHAPES,
  parseTileShape,
  tensorCoreStages,
  tensorCoreTile,
  tileCandidates,
  tileName,
} from "../../src/renderer/cuda_matmul.ts";
import { CUDA_PRELUDE } from "../../src/renderer/cuda.ts";
import { compileArch } from "../../src/engine/cuda_programs.ts";
import { type CudaForm, cudaForm, renderCudaForm } from "../../src/codegen/cuda_forms.ts";
import { findNvcc } from "../../src/runtime/cuda_compile.ts";
import { compileKernels } from "./nvcc.ts";

/** The kernels `build` runs on JS (its inputs realized first, so that only its own kernels count). */
function kernelsOf(inputs: Tensor[], build: (...xs: Tensor[]) => Tensor): KernelIR[] {
  inputs.forEach((t) => t.realize());
  return recordItems(() => build(...inputs).realize()).items.flatMap((item) =>
    item.kind === "kernel" ? [item.kernel] : [],
  );
}

// scheduled as for a GPU: the JS backend without the host forms (packed matmul operands, scatters, K-blocks)
registerBackend("GPUJS", () => ({ ...jsBackend(), name: "GPUJS", hostForms: false }));
const rand = (shape: number[], dtype: DType = dtypes.float32) => Tensor.rand(shape, { device: "GPUJS" }).cast(dtype);
const lastForm = (inputs: Tensor[], build: (...xs: Tensor[]) => Tensor): CudaForm =>
  cudaForm(kernelsOf(inputs, build).at(-1)!);

const forms = {
  halfMatmul: lastForm([rand([256, 512], dtypes.float16), rand([512, 384], dtypes.float16)], (a, b) => a.matmul(b)),
  weightGradient: lastForm([rand([4096, 256], dtypes.float16), rand([4096, 384], dtypes.float16)], (x, dy) =>
    x.T.matmul(dy),
  ),
  bf16Batched: lastForm([rand([4, 128, 64], dtypes.bfloat16), rand([4, 64, 128], dtypes.bfloat16)], (a, b) =>
    a.matmul(b),
  ),
  rowMax: lastForm([rand([64, 1024])], (x) => x.max({ axis: 1 })),
  manyRowsMax: lastForm([rand([4100, 512], dtypes.float16)], (x) => x.max({ axis: 1 })),
  halfAdd: lastForm([rand([1000], dtypes.float16), rand([1000], dtypes.float16)], (a, b) => a.add(b)),
  mulAdd: lastForm([rand([1000]), rand([1000]), rand([1000])], (a, b, c) => a.mul(b).add(c)),
  floatMatmul: lastForm([rand([1024, 256]), rand([256, 1024])], (a, b) => a.matmul(b)),
  halfBiasRelu: lastForm([rand([512, 1024], dtypes.float16), rand([1024], dtypes.float16)], (a, b) => a.add(b).relu()),
  boolMask: lastForm([rand([512, 1024])], (a) => a.gt(0.5)),
  biasedMatmul: lastForm([rand([2, 128, 64], dtypes.float16), rand([64], dtypes.float16)], (x, bias) => {
    const q = x.add(bias);
    return q.matmul(q.transpose(-1, -2));
  }),
};

test("a float16 matmul runs on tensor cores, 128 x 128 output tiles a block", () => {
  assert.equal(forms.halfMatmul.kind, "tensorCores");
  // 6 tiles for 100+ multiprocessors: k (16 steps of 32) is split in two, each half a block
  assert.deepEqual(renderCudaForm(forms.halfMatmul, "k", true).launch.grid, [3, 2, 2]);
});

test("tensor-core factors that both travel by cp.async pipeline k tiles through dynamic shared memory, as deep as two blocks a multiprocessor allow", () => {
  // an H100/H200 (228 KB a multiprocessor): 4 stages; an A100 (164 KB): 4; a 4090 (100 KB): 2
  assert.deepEqual(
    [233472, 167936, 102400].map((shared) => tensorCoreStages(shared)),
    [4, 4, 2],
  );
  try {
    process.env.TC_STAGES = "3";
    assert.equal(tensorCoreStages(102400), 3);
    process.env.TC_STAGES = "1";
    assert.throws(
      () => tensorCoreStages(102400),
      /TC_STAGES=1: expected a whole number of pipeline stages from 2 to 8/,
    );
  } finally {
    delete process.env.TC_STAGES;
  }
  for (const stages of [2, 3, 4]) {
    const { launch, code } = renderCudaForm(forms.halfMatmul, "k", true, { ...DEFAULT_TILE_SHAPE, stages });
    // per stage: A as [128 rows][32 k + 8] halves, B (rows contiguous in memory) as [32 k][128 + 8]
    assert.equal(launch.sharedBytes, stages * (128 * 40 + 32 * 136) * 2);
    assert.match(code, /TG_DYNAMIC_SHARED\(tg_smem\)/);
    assert.ok(code.includes(`tg_cp_async_wait<${stages - 2}>()`), `no wait for ${stages} stages`);
  }
  // a computed factor goes through registers: two static stages
  const computed = renderCudaForm(forms.biasedMatmul, "k", true, { ...DEFAULT_TILE_SHAPE, stages: 4 });
  assert.equal(computed.launch.sharedBytes, 0);
  assert.match(computed.code, /__shared__ __align__\(16\) unsigned short As\[2\]/);
});

test("tensor-core tiles: TC_TILE's form, its checks, each shape's depth and launch", () => {
  assert.deepEqual(parseTileShape("128x256x32:2x4"), { bm: 128, bn: 256, bk: 32, warpsM: 2, warpsN: 4 });
  assert.throws(
    () => parseTileShape("128x128"),
    /TC_TILE=128x128: expected BMxBNxBK:WARPS_MxWARPS_N or BMxBNxBK:wgmma, e.g. 128x128x32:2x4/,
  );
  assert.throws(
    () => parseTileShape("128x128x32:2x16"),
    /TC_TILE=128x128x32:2x16: a warp's columns \(bn \/ warpsN\) must be a multiple of 16/,
  );
  assert.throws(() => parseTileShape("256x256x32:2x2"), /512 float32 accumulators a thread \(at most 128\)/);
  assert.throws(() => parseTileShape("128x128x24:2x4"), /bk must be a multiple of 16/);
  // warp tiles of 64 x 64 (128 accumulators a thread) leave room for one block a multiprocessor: deeper pipelines
  assert.deepEqual(tensorCoreTile(233472, parseTileShape("128x256x32:2x4")), {
    bm: 128,
    bn: 256,
    bk: 32,
    warpsM: 2,
    warpsN: 4,
    stages: 4,
  });
  assert.equal(tensorCoreTile(102400, parseTileShape("128x256x32:2x4")).stages, 3);
  assert.equal(tensorCoreTile(102400).stages, 2);
  try {
    process.env.TC_TILE = "128x256x32:2x4";
    assert.equal(tileName(tensorCoreTile(233472)), "128x256x32:2x4:s4");
    // a computed factor keeps the default tile (its tiles pass through registers)
    assert.match(
      renderCudaForm(forms.biasedMatmul, "k", true, tensorCoreTile(233472)).code,
      /__launch_bounds__\(256\)[\s\S]*float c\[4\]\[4\]\[4\]/,
    );
    // ... BEAM's only choice for it: ~180 registers a thread, or capped for two blocks a multiprocessor
    const registerPath =
      forms.biasedMatmul.kind === "tensorCores" ? tileCandidates(233472, forms.biasedMatmul.pattern) : [];
    assert.deepEqual(registerPath.map(tileName), ["128x128x32:2x4:s2", "128x128x32:2x4:s2:b2"]);
    assert.match(renderCudaForm(forms.biasedMatmul, "k", true, registerPath[1]).code, /__launch_bounds__\(256, 2\)/);
    process.env.TC_TILE = "256x128x32:4x";
    assert.throws(() => tensorCoreTile(233472), /TC_TILE=256x128x32:4x: expected/);
  } finally {
    delete process.env.TC_TILE;
  }
  // BEAM's list: every shape at its depth and one shallower
  assert.equal(tileCandidates(233472).length, 2 * TILE_SHAPES.length);
  for (const shape of TILE_SHAPES) {
    const tile = tensorCoreTile(233472, shape);
    const threads = 32 * shape.warpsM * shape.warpsN;
    const { launch, code } = renderCudaForm(forms.halfMatmul, "k", true, tile);
    assert.deepEqual(launch.block, [threads, 1, 1], tileName(tile));
    assert.deepEqual(launch.grid.slice(0, 2), [Math.ceil(384 / shape.bn), Math.ceil(256 / shape.bm)], tileName(tile));
    assert.match(
      code,
      new RegExp(`float c\\[${shape.bm / shape.warpsM / 16}\\]\\[${shape.bn / shape.warpsN / 8}\\]\\[4\\]`),
      tileName(tile),
    );
    // A [bm][bk + 8], B (rows contiguous) [bk][bn + 8], per stage
    assert.equal(
      launch.sharedBytes,
      tile.stages * (shape.bm * (shape.bk + 8) + shape.bk * (shape.bn + 8)) * 2,
      tileName(tile),
    );
  }
});

test("wgmma tiles (Hopper): TC_TILE's form and checks, offered on sm_90 only, their depths, launch and layout", () => {
  assert.deepEqual(parseTileShape("128x256x64:wgmma"), { bm: 128, bn: 256, bk: 64, warpsM: 8, warpsN: 1, wgmma: true });
  assert.equal(tileName(parseTileShape("128x256x64:wgmma")), "128x256x64:wgmma");
  assert.throws(
    () => parseTileShape("96x128x32:wgmma"),
    /TC_TILE=96x128x32:wgmma: a wgmma tile's rows \(bm\) must be a multiple of 64/,
  );
  assert.throws(() => parseTileShape("128x96x32:wgmma"), /a wgmma tile's columns \(bn\) must be one of 64, 128, 256/);
  assert.throws(() => parseTileShape("128x128x16:wgmma"), /a wgmma tile's bk must be a multiple of 32/);
  // four warpgroups (512 threads) stack along m
  assert.equal(parseTileShape("256x256x32:wgmma").warpsM, 16);
  // asked for where there is no wgmma: a clear error; BEAM offers wgmma tiles on sm_90 only
  assert.throws(
    () => tensorCoreTile(102400, parseTileShape("128x128x32:wgmma"), "sm_89"),
    /wgmma runs on sm_90 GPUs \(H100, H200\) only, this one is sm_89/,
  );
  assert.ok(!tileCandidates(233472, undefined, "sm_89").some((t) => t.wgmma));
  const hopper = tileCandidates(233472, undefined, "sm_90").filter((t) => t.wgmma);
  // 64 accumulators a thread: two blocks a multiprocessor, or one block as deep as it fits; else the deepest and one
  // shallower
  assert.deepEqual(hopper.map(tileName), [
    "128x128x32:wgmma:s6",
    "128x128x32:wgmma:s5",
    "128x128x64:wgmma:s3",
    "128x128x64:wgmma:s6",
    "128x256x32:wgmma:s6",
    "128x256x32:wgmma:s5",
    "128x256x64:wgmma:s4",
    "128x256x64:wgmma:s3",
  ]);
  assert.throws(
    () => renderCudaForm(forms.halfMatmul, "k", true, { ...WGMMA_TILE_SHAPES[0]!, stages: 2 }),
    /wgmma tiles pipeline at least 3 stages/,
  );
  for (const tile of hopper) {
    const { launch, code } = renderCudaForm(forms.halfMatmul, "k", true, tile);
    // two warpgroups, each 64 rows by all bn columns; unpadded core-matrix tiles, bm + bn rows of bk a stage
    assert.deepEqual(launch.block, [256, 1, 1], tileName(tile));
    assert.deepEqual(launch.grid.slice(0, 2), [Math.ceil(384 / tile.bn), Math.ceil(256 / tile.bm)], tileName(tile));
    assert.equal(launch.sharedBytes, tile.stages * (tile.bm + tile.bn) * tile.bk * 2, tileName(tile));
    assert.match(code, new RegExp(`float c\\[1\\]\\[${tile.bn / 8}\\]\\[4\\]`), tileName(tile));
    // A is k-contiguous (K-major), B rows-contiguous (MN-major, transposed by wgmma); core matrices along k 128 bytes
    // apart, along rows bk * 16
    assert.ok(
      code.includes(
        `tg_wgmma_f16_n${tile.bn}<0, 1>(&c[0][0][0], tg_wgmma_desc(&As[stage][(warp >> 2) * ${64 * tile.bk} + kk * 8], 128, ${tile.bk * 16})`,
      ),
      tileName(tile),
    );
    assert.ok(
      code.includes(`tg_cp_async_wait<${tile.stages - 3}>()`) && code.includes("tg_wgmma_wait<1>()"),
      tileName(tile),
    );
  }
  // a problem narrower than the tile (an attention's values, 64 wide) takes the narrowest wgmma width that covers it
  const narrow = lastForm([rand([256, 512], dtypes.float16), rand([512, 64], dtypes.float16)], (a, b) => a.matmul(b));
  const fitted = renderCudaForm(narrow, "k", true, tensorCoreTile(233472, parseTileShape("128x256x64:wgmma"), "sm_90"));
  assert.match(fitted.code, /tg_wgmma_f16_n64<0, 1>/);
  assert.match(fitted.code, /float c\[1\]\[8\]\[4\]/);
  assert.equal(fitted.launch.grid[0], 1);
  // modules with a wgmma kernel compile for sm_90a (code for that GPU alone), the rest as before
  const wgmmaCode = renderCudaForm(forms.halfMatmul, "k", true, hopper[0]).code,
    mmaCode = renderCudaForm(forms.halfMatmul, "k", true).code;
  assert.equal(compileArch("sm_90", `${CUDA_PRELUDE}\n${wgmmaCode}`), "sm_90a");
  assert.equal(compileArch("sm_90", `${CUDA_PRELUDE}\n${mmaCode}`), "sm_90");
  assert.equal(compileArch("sm_89", `${CUDA_PRELUDE}\n${mmaCode}`), "sm_89");
});

test("a weight gradient with few output tiles and a long k splits k across blocks, combined through a workspace", () => {
  assert.equal(forms.weightGradient.kind, "tensorCores");
  const { launch, code } = renderCudaForm(forms.weightGradient, "k", true);
  // 6 tiles x 16 splits of 256 (8 steps each, the fewest a split keeps)
  assert.deepEqual(launch.grid, [3, 2, 16]);
  assert.deepEqual(launch.workspace, { bytes: 256 + 6 * 16 * 128 * 128 * 4, zeroedBytes: 256 });
  assert.match(code, /atomicAdd\(&tg_ws\[tile\], 1u\)/);
  const noSplit = renderCudaForm(forms.bf16Batched, "k", true);
  assert.equal(noSplit.launch.workspace, undefined);
  assert.doesNotMatch(noSplit.code, /tg_ws/);
});

test("a batched bfloat16 matmul runs on tensor cores with the batch on the grid's z axis", () => {
  assert.equal(forms.bf16Batched.kind, "tensorCores");
  assert.deepEqual(renderCudaForm(forms.bf16Batched, "k", true).launch.grid, [1, 1, 4]);
});

test("a matmul of computed 16-bit factors (a bias added first) runs on tensor cores, computing them while staging tiles", () => {
  assert.equal(forms.biasedMatmul.kind, "tensorCores");
  assert.match(renderCudaForm(forms.biasedMatmul, "k", true).code, /\[j\] = tg_f2h\(v\d+\);/);
});

test("a float32 matmul stays on loops with 4 x 4 register tiles", () => {
  assert.equal(forms.floatMatmul.kind, "loops");
  if (forms.floatMatmul.kind === "loops") assert.match(forms.floatMatmul.kernel.opts, /^u\dx4,\dx4\|/);
});

test("a long reduce to one value runs as 256 partial sums, a block each, then one block adds them up", () => {
  const kernels = kernelsOf([rand([1 << 16])], (x) => x.sum());
  const launches = kernels.map((k) => renderCudaForm(cudaForm(k), "k", true).launch);
  assert.equal(launches.length, 2);
  assert.deepEqual(launches[0]!.grid, [256, 1, 1]);
  assert.deepEqual(launches[1]!.grid, [1, 1, 1]);
  assert.ok(
    launches.every((l) => l.block[0] >= 32),
    `group reduces: ${JSON.stringify(launches)}`,
  );
});

test("a long row reduce with few outputs runs one block per row; a matmul one thread per output", () => {
  assert.ok(forms.rowMax.kind === "loops" && groupSize(forms.rowMax.kernel) > 0);
  assert.ok(forms.floatMatmul.kind === "loops" && groupSize(forms.floatMatmul.kernel) === 0);
  // each of the group's threads takes 4 neighbours of the row a step, as one float4
  assert.match(
    renderCudaForm(forms.rowMax, "k", true).code,
    /float4 vec_\w+ = \*\(const float4\*\)\(b1 \+ \(i0\*1024 \+ r0\*4\)\)/,
  );
});

test("many rows of their own (a softmax over 512 keys) reduce a warp a row, 8 rows a block, combined by shuffles alone", () => {
  assert.ok(forms.manyRowsMax.kind === "loops" && forms.manyRowsMax.rows === 8);
  const { code, launch } = renderCudaForm(forms.manyRowsMax, "k", true);
  assert.deepEqual(
    [launch.grid, launch.block],
    [
      [Math.ceil(4100 / 8), 1, 1],
      [256, 1, 1],
    ],
  );
  assert.match(code, /int gid = \(int\)blockIdx\.x \* 8 \+ \(threadIdx\.x >> 5\);\n {2}if \(gid >= 4100\) return;/);
  // each lane takes 4 neighbours a step (one 8-byte load), lane 0 stores
  assert.match(code, /for \(int r0 = \(threadIdx\.x & 31\); r0 < 128; r0 \+= 32\)/);
  assert.match(code, /ushort4 vec_/);
  assert.match(code, /if \(\(threadIdx\.x & 31\) == 0\) b0\[/);
  assert.doesNotMatch(code, /__syncthreads|tg_partial/);
  // few rows keep a block a row
  assert.ok(forms.rowMax.kind === "loops" && !forms.rowMax.rows);
});

test("elementwise kernels over many elements take 4 neighbours a thread, loaded and stored as vectors", () => {
  const { code, launch } = renderCudaForm(forms.halfBiasRelu, "k", true);
  assert.equal(launch.grid[0] * launch.block[0], (512 * 1024) / 4);
  assert.match(code, /ushort4 vec_\w+ = \*\(const ushort4\*\)\(b1 \+/);
  assert.match(code, /\*\(ushort4\*\)\(b0 \+ .*\) = tg_st;/);
  // a small kernel keeps one element a thread: every thread is needed
  assert.doesNotMatch(renderCudaForm(forms.halfAdd, "k", true).code, /tg_st/);
});

test("an in-place update's variant leaves only its aliased slots without __restrict__", () => {
  const params = (restrict: boolean | ReadonlySet<number>): string[] =>
    /tg_kernel\((.*)\) \{/.exec(renderCudaForm(forms.halfAdd, "tg_kernel", restrict).code)![1]!.split(", ");
  assert.deepEqual(
    params(new Set([0, 1])).map((p) => p.includes("__restrict__")),
    [false, false, true],
  );
  assert.deepEqual(
    params(true).map((p) => p.includes("__restrict__")),
    [true, true, true],
  );
  assert.deepEqual(
    params(false).map((p) => p.includes("__restrict__")),
    [false, false, false],
  );
  // tensor-core kernels too
  const tc = /tg_kernel\((.*?)\) \{/
    .exec(renderCudaForm(forms.halfMatmul, "tg_kernel", new Set([0, 2])).code)![1]!
    .split(", ");
  assert.deepEqual(
    tc.slice(0, 3).map((p) => p.includes("__restrict__")),
    [false, true, false],
  );
});

const nvcc = findNvcc();
const names = Object.keys(forms) as (keyof typeof forms)[];
const ptx = new Map<string, string>();
if (nvcc) {
  const report = await compileKernels(
    nvcc,
    names.map((name) => ({ name, code: renderCudaForm(forms[name], name, true).code })),
    ["sm_90"],
    { files: 1, mode: "-ptx" },
  );
  if (report.errors) throw new Error(`the renderer tests' kernels do not compile:\n${report.errors}`);
  // each kernel's PTX runs from its .entry to the next one
  for (const [, name, body] of report.outputs[0]!.matchAll(/\.entry (\w+)\(([\s\S]*?)(?=\.entry |$)/g))
    ptx.set(name!, body!);
}
const skip = nvcc ? false : "nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)";

test("tensor-core kernels issue m16n8k16 mma with float32 accumulation, f16 and bf16", { skip }, () => {
  assert.match(ptx.get("halfMatmul")!, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32/);
  assert.match(ptx.get("bf16Batched")!, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32/);
  assert.match(ptx.get("biasedMatmul")!, /mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.f16\.f16\.f32/);
});

test("tensor-core tiles of plain loads travel by cp.async and reach fragments by ldmatrix (transposed where stored k-major)", {
  skip,
}, () => {
  assert.match(ptx.get("halfMatmul")!, /cp\.async\.cg\.shared\.global/);
  assert.match(ptx.get("halfMatmul")!, /ldmatrix\.sync\.aligned\.m8n8\.x4\.shared\.b16/);
  assert.match(ptx.get("weightGradient")!, /ldmatrix\.sync\.aligned\.m8n8\.x4\.trans\.shared\.b16/);
  assert.match(ptx.get("weightGradient")!, /atom\.global\.add\.u32|red\.global\.add|atom\.add/);
});

test("group reduces combine with warp shuffles", { skip }, () => {
  assert.match(ptx.get("rowMax")!, /shfl\.sync\.bfly/);
  assert.match(ptx.get("manyRowsMax")!, /shfl\.sync\.bfly/);
  assert.doesNotMatch(ptx.get("manyRowsMax")!, /bar\.sync/);
});

test("float16 values are read exactly and stored rounded to nearest even", { skip }, () => {
  assert.match(ptx.get("halfAdd")!, /cvt\.f32\.f16/);
  assert.match(ptx.get("halfAdd")!, /cvt\.rn\.f16\.f32/);
});

test("a multiply then an add stay two roundings, as in the reference", { skip }, () => {
  assert.match(ptx.get("mulAdd")!, /mul\.rn\.f32/);
  assert.doesNotMatch(ptx.get("mulAdd")!, /fma\.rn\.f32/);
});

test("matmul accumulation fuses multiply and add, and neighbouring lanes load as vectors", { skip }, () => {
  assert.match(ptx.get("floatMatmul")!, /fma\.rn\.f32/);
  assert.match(ptx.get("floatMatmul")!, /ld\.global\.nc\.v4\.f32/);
});

test("elementwise lanes load and store 8-byte (16-bit floats) and 4-byte (bools) vectors", { skip }, () => {
  assert.match(ptx.get("halfBiasRelu")!, /ld\.global\.nc\.v4\.u16/);
  assert.match(ptx.get("halfBiasRelu")!, /st\.global\.v4\.u16/);
  assert.match(ptx.get("boolMask")!, /st\.global\.v4\.u8/);
});

test("the tensor-core pipeline waits for all but the tiles still in flight", { skip }, () => {
  assert.match(ptx.get("halfMatmul")!, /cp\.async\.wait_group 2;/);
});

test("tensor-core outputs go out two neighbouring columns a store", { skip }, () => {
  assert.match(ptx.get("halfMatmul")!, /st\.global\.v2\.u16/);
  assert.match(renderCudaForm(forms.halfMatmul, "k", true).code, /\*\(ushort2\*\)&b0\[/);
});

test("every tensor-core tile shape BEAM may choose assembles for sm_90 without spilling registers", {
  skip,
}, async () => {
  // a split-k weight gradient (k-major tiles, and the most registers: the splits' combine), each shape at an H100's
  // depth
  const kernels = TILE_SHAPES.map((shape) => tensorCoreTile(233472, shape)).map((tile, t) => ({
    name: `k${t}`,
    tile,
    code: renderCudaForm(forms.weightGradient, `k${t}`, true, tile).code,
  }));
  const report = await compileKernels(nvcc!, kernels, ["sm_90"], {
    files: 2,
    mode: "-cubin",
    flags: ["-Xptxas", "-v"],
  });
  assert.equal(report.errors, "");
  // ptxas reports each function's registers and spills
  const log = report.logs.join("\n");
  for (const { name, tile } of kernels) {
    const usage = new RegExp(
      `Compiling entry function '${name}'[\\s\\S]*?(\\d+) bytes spill stores[\\s\\S]*?Used (\\d+) registers`,
    ).exec(log);
    assert.ok(usage, `no ptxas report for ${name}`);
    assert.equal(Number(usage[1]), 0, `${tileName(tile)} (${name}) spills registers`);
    assert.ok(Number(usage[2]) <= 255, `${tileName(tile)}: ${usage[2]} registers`);
  }
});

test("every wgmma tile shape assembles for sm_90a without spilling, its products wgmma.mma_async from shared memory", {
  skip,
}, async () => {
  // a split-k weight gradient (both factors transposed, the splits' combine), a plain float16 matmul and bfloat16
  const cases = [
    ...WGMMA_TILE_SHAPES.map((shape) => ({ form: forms.weightGradient, tile: tensorCoreTile(233472, shape, "sm_90") })),
    { form: forms.halfMatmul, tile: tensorCoreTile(233472, WGMMA_TILE_SHAPES[0], "sm_90") },
    { form: forms.bf16Batched, tile: tensorCoreTile(233472, WGMMA_TILE_SHAPES[2], "sm_90") },
    // a computed factor through registers, stored into core matrices (two stages, at most 128 wide)
    { form: forms.biasedMatmul, tile: tensorCoreTile(233472, WGMMA_TILE_SHAPES[3], "sm_90") },
  ];
  const kernels = cases.map(({ form, tile }, i) => ({
    name: `w${i}`,
    tile,
    code: renderCudaForm(form, `w${i}`, true, tile).code,
  }));
  const report = await compileKernels(nvcc!, kernels, ["sm_90a"], {
    files: 2,
    mode: "-cubin",
    flags: ["-Xptxas", "-v"],
  });
  assert.equal(report.errors, "");
  const log = report.logs.join("\n");
  // ptxas warns where it must serialise wgmma (accumulators moved while products are in flight)
  assert.doesNotMatch(log, /warning/i);
  for (const { name, tile } of kernels) {
    const usage = new RegExp(
      `Compiling entry function '${name}'[\\s\\S]*?(\\d+) bytes spill stores[\\s\\S]*?Used (\\d+) registers`,
    ).exec(log);
    assert.ok(usage, `no ptxas report for ${name}`);
    assert.equal(Number(usage[1]), 0, `${tileName(tile)} (${name}) spills registers`);
  }
  // 128x128x32 and 128x256x64 on the weight gradient (n = 384), and bfloat16 (n = 128: the 256-wide tile fits it)
  const text = (
    await compileKernels(nvcc!, [kernels[0]!, kernels[3]!, kernels.at(-2)!], ["sm_90a"], { files: 1, mode: "-ptx" })
  ).outputs[0]!;
  assert.match(text, /wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.f16\.f16/);
  assert.match(text, /wgmma\.mma_async\.sync\.aligned\.m64n256k16\.f32\.f16\.f16/);
  assert.match(text, /wgmma\.mma_async\.sync\.aligned\.m64n128k16\.f32\.bf16\.bf16/);
  assert.match(text, /fence\.proxy\.async\.shared::cta/);
  assert.match(text, /wgmma\.wait_group\.sync\.aligned 1;/);
});

test("tensor-core kernels assemble for sm_89 and sm_90", { skip }, async () => {
  const tensorCore = names.filter((name) => forms[name].kind === "tensorCores");
  // and a computed factor's kernel capped for two blocks a multiprocessor (BEAM's other choice for it)
  const twoBlocks =
    forms.biasedMatmul.kind === "tensorCores"
      ? tileCandidates(233472, forms.biasedMatmul.pattern).find((t) => t.minBlocks === 2)
      : undefined;
  const kernels = [
    ...tensorCore.map((name) => ({ name, code: renderCudaForm(forms[name], name, true).code })),
    { name: "twoBlocks", code: renderCudaForm(forms.biasedMatmul, "twoBlocks", true, twoBlocks).code },
  ];
  const report = await compileKernels(nvcc!, kernels, ["sm_89", "sm_90"], { files: 1 });
  assert.equal(report.errors, "");
});
