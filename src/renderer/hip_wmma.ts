// 16-bit matmuls on RDNA3's matrix instructions (WMMA): a kernel that cuda_matmul.ts's matchMatmul reads as
// C[batch, m, n] = epilogue(sum_k A(m, k) * B(n, k)), with float16 or bfloat16 factors, rendered as HIP C++ whose
// waves of 32 multiply 16 x 16 x 16 tiles with float32 accumulators (v_wmma_f32_16x16x16_f16 / _bf16).
//
// A block of four waves (2 x 2) computes 64 x 64 outputs, each wave 32 x 32 (2 x 2 WMMA tiles), 16 of k a step (at
// 32, gfx1100's code of most of BERT's WMMA kernels spilled registers: test/amd/compile.test.ts counts spills).
// A factor stored along k or along its rows (8-aligned) is copied 16 bytes a thread; any other passes element by
// element (its statements evaluated as the plain kernel would, rounded to 16 bits: exact for loads, as CUDA's
// register path rounds a computed factor). Tiles go to two stages of shared memory stored [row][k], so that each
// lane's fragment (one row of A or one column of B: 16 k) is 32 contiguous bytes; the next k tile is copied into
// the other stage before the current one's products (one barrier a step). Whatever follows the reduce (casts,
// bias, activation) runs per accumulator, as in the plain kernel: accumulator v of lane l is row 2v + l / 16,
// column l % 16 of its 16 x 16 tile.
// Not yet: deeper pipelines, split-K, tile search (no RDNA3 GPU was at hand to tune on). test/amd/ checks the
// kernels on the CPU emulator and that their gfx1100 code holds WMMA.
import type { KernelIR } from "../codegen/ir.ts";
import { TsgradError } from "../helpers.ts";
import { type MatmulPattern, affine, vectorAlong, worthTensorCores } from "./cuda_matmul.ts";
import { type CudaKernelSource, type Restrict, kernelParams, outputIndices, renderBlock } from "./cuda.ts";

/** Outputs a block computes along m and n, k a step, and waves along m and n. */
export const WMMA_TILE = { bm: 64, bn: 64, bk: 16, wavesM: 2, wavesN: 2 } as const;
const { bm, bn, bk, wavesM, wavesN } = WMMA_TILE;
const THREADS = 32 * wavesM * wavesN;
/** WMMA tiles a wave computes along m and n. */
const TM = bm / wavesM / 16,
  TN = bn / wavesN / 16;
/** Halves of padding after each shared row: rows stay 16-byte aligned (80 bytes) and spread over banks. */
const PAD = 8;

type Operand = MatmulPattern["a"];
type Loop = MatmulPattern["m"];

/** Whether `p` is worth WMMA tiles (big enough, 32-bit indices: as for CUDA's tensor cores). */
export function worthWmma(p: MatmulPattern): boolean {
  return worthTensorCores(p) && p.n.size >= 16;
}

/** The WMMA kernel for `p`, named `fnName`. */
export function renderMatmulWmma(p: MatmulPattern, fnName: string, restrict: Restrict): CudaKernelSource {
  const { kernel, m, n, batch } = p;
  if (!worthWmma(p)) throw new TsgradError(`${kernel.name}: too small or too large for WMMA tiles`);
  const copyA = tileCopy("As", p.a, m, "m0", p, bm),
    copyB = tileCopy("Bs", p.b, n, "n0", p, bn);
  const vector = p.input === "f16" ? "tg_half16" : "tg_short16";
  const batches = batch.reduce((s, l) => s * l.size, 1);
  const lines = [
    `extern "C" __global__ void __launch_bounds__(${THREADS}) ${fnName}(${kernelParams(kernel, restrict)}) {`,
    `  __shared__ __attribute__((aligned(16))) unsigned short As[2][${bm}][${bk + PAD}];`,
    `  __shared__ __attribute__((aligned(16))) unsigned short Bs[2][${bn}][${bk + PAD}];`,
    `  const int tid = threadIdx.x, wave = tid >> 5, lane = tid & 31;`,
    `  const int wm = (wave / ${wavesN}) * ${bm / wavesM}, wn = (wave % ${wavesN}) * ${bn / wavesN};`,
    `  const int m0 = blockIdx.y * ${bm}, n0 = blockIdx.x * ${bn};`,
    ...outputIndices(batch, "int", "(int)blockIdx.z", "  "),
    `  tg_float8 c[${TM}][${TN}] = {};`,
    ...copyA.copy("0", "0"),
    ...copyB.copy("0", "0"),
    `  __syncthreads();`,
    // a k loop unrolled whole (a constant trip count) would hoist every tile's loads: registers spill by hundreds
    `  #pragma unroll 1`,
    `  for (int k0 = 0, stage = 0; k0 < ${p.k.size}; k0 += ${bk}, stage ^= 1) {`,
    // the next tile goes to the other stage, last read before the previous barrier
    `    if (k0 + ${bk} < ${p.k.size}) {`,
    ...copyA.copy(`k0 + ${bk}`, "stage ^ 1"),
    ...copyB.copy(`k0 + ${bk}`, "stage ^ 1"),
    `    }`,
    `    #pragma unroll`,
    `    for (int kk = 0; kk < ${bk}; kk += 16) {`,
    `      ${vector} a[${TM}], b[${TN}];`,
    // lanes 16-31 hold the same rows (columns) as lanes 0-15, as WMMA on wave32 wants
    `      #pragma unroll`,
    `      for (int i = 0; i < ${TM}; i++) __builtin_memcpy(&a[i], &As[stage][wm + i * 16 + (lane & 15)][kk], 32);`,
    `      #pragma unroll`,
    `      for (int j = 0; j < ${TN}; j++) __builtin_memcpy(&b[j], &Bs[stage][wn + j * 16 + (lane & 15)][kk], 32);`,
    `      #pragma unroll`,
    `      for (int i = 0; i < ${TM}; i++)`,
    `        #pragma unroll`,
    `        for (int j = 0; j < ${TN}; j++) c[i][j] = tg_wmma_${p.input}(a[i], b[j], c[i][j]);`,
    `    }`,
    `    __syncthreads();`,
    `  }`,
    ...epilogue(p),
    "}",
  ];
  return {
    code: lines.join("\n"),
    launch: {
      grid: [Math.ceil(n.size / bn), Math.ceil(m.size / bm), batches],
      block: [THREADS, 1, 1],
      sharedBytes: 0,
    },
  };
}

/** Whatever follows the reduce, per accumulator: v of tile (i, j) is row 2v + lane / 16, column lane % 16. */
function epilogue(p: MatmulPattern): string[] {
  const { kernel, m, n } = p;
  const lines = [
    `  #pragma unroll`,
    `  for (int i = 0; i < ${TM}; i++)`,
    `    #pragma unroll`,
    `    for (int j = 0; j < ${TN}; j++)`,
    `      #pragma unroll`,
    `      for (int v = 0; v < 8; v++) {`,
    `        const int ${m.var} = m0 + wm + i * 16 + v * 2 + (lane >> 4), ${n.var} = n0 + wn + j * 16 + (lane & 15);`,
    `        if (${m.var} >= ${m.size} || ${n.var} >= ${n.size}) continue;`,
    `        float ${p.acc} = c[i][j][v];`,
  ];
  renderBlock(p.epilogue, lines, "        ", { kernel, products: new Map(), group: 0 });
  return [...lines, `      }`];
}

interface TileCopy {
  /** Evaluates k tile k0's elements (zero outside the matrix) into a stage of shared memory. */
  copy(k0: string, stage: string): string[];
}

/**
 * One factor's tile: `rows` rows along `row` (m or n) by bk of k, element e = tid + j * threads of the thread's
 * share, stored as soon as computed (values held in registers across the products spilled on gfx1100). Rows
 * fastest where the factor's loads run along rows and none along k (coalesced reads of a transposed factor), else
 * k fastest.
 */
function tileCopy(tile: string, o: Operand, row: Loop, start: string, p: MatmulPattern, rows: number): TileCopy {
  const vector = vectorCopy(tile, o, row, start, p, rows);
  if (vector) return vector;
  const count = (rows * bk) / THREADS;
  const loads = o.defs.flatMap((d) => (d.expr.op === "LOAD" ? [affine(d.expr.index)] : []));
  const alongRows = loads.some((af) => af?.coef.get(row.var) === 1) && !loads.some((af) => af?.coef.get(p.k.var) === 1);
  const index = alongRows ? `r = e % ${rows}, kk = e / ${rows}` : `r = e / ${bk}, kk = e % ${bk}`;
  return {
    copy: (k0, stage) => {
      const lines = [
        `    #pragma unroll`,
        `    for (int j = 0; j < ${count}; j++) {`,
        `      const int e = tid + j * ${THREADS}, ${index}, gr = ${start} + r, gk = ${k0} + kk;`,
        `      unsigned short tg_v = 0;`,
        `      if (gr < ${row.size} && gk < ${p.k.size}) {`,
        `        const int ${row.var} = gr, ${p.k.var} = gk;`,
      ];
      renderBlock(o.defs, lines, "        ", { kernel: p.kernel as KernelIR, products: new Map(), group: 0 });
      lines.push(
        `        tg_v = ${p.input === "f16" ? "tg_f2h" : "tg_f2b"}(${o.defs.at(-1)!.name});`,
        `      }`,
        `      ${tile}[${stage}][r][kk] = tg_v;`,
        `    }`,
      );
      return lines;
    },
  };
}

/**
 * A factor that is one load of 16-bit values of the input's kind with 8-aligned unit strides along k, or along the
 * rows (a k-major factor: a weight gradient's), 16 bytes a thread at a time without conversions: 8 of k stored as
 * they are, or 8 rows at one k spread over the tile's rows. Zeros past the matrix: the strided length is a multiple
 * of 8, so a chunk is all in or all out.
 */
function vectorCopy(
  tile: string,
  o: Operand,
  row: Loop,
  start: string,
  p: MatmulPattern,
  rows: number,
): TileCopy | undefined {
  const load = o.load;
  const stored = load && p.kernel.buffers[load.buf]!.dtype.name;
  if (!load || stored !== (p.input === "f16" ? "float16" : "bfloat16")) return undefined;
  const { affine: af } = load;
  const alongK = vectorAlong(af, p.k);
  if (!alongK && !vectorAlong(af, row)) return undefined;
  const base = [
    String(af.constant),
    ...[...af.coef].filter(([v]) => v !== row.var && v !== p.k.var).map(([v, c]) => `${v} * ${c}`),
  ].join(" + ");
  const address = `b${load.buf} + ${base} + gr * ${af.coef.get(row.var) ?? 0} + gk * ${af.coef.get(p.k.var) ?? 0}`;
  const chunks = (rows * bk) / 8 / THREADS;
  const index = alongK
    ? `r = e / ${bk / 8}, kk = (e % ${bk / 8}) * 8`
    : `kk = e / ${rows / 8}, r = (e % ${rows / 8}) * 8`;
  return {
    copy: (k0, stage) => [
      `    #pragma unroll`,
      `    for (int j = 0; j < ${chunks}; j++) {`,
      `      const int e = tid + j * ${THREADS}, ${index}, gr = ${start} + r, gk = ${k0} + kk;`,
      `      uint4 tg_v = make_uint4(0, 0, 0, 0);`,
      `      if (gr < ${row.size} && gk < ${p.k.size}) tg_v = *(const uint4*)(${address});`,
      ...(alongK
        ? [`      *(uint4*)&${tile}[${stage}][r][kk] = tg_v;`]
        : [
            `      unsigned short tg_h[8];`,
            `      __builtin_memcpy(tg_h, &tg_v, 16);`,
            `      #pragma unroll`,
            `      for (int q = 0; q < 8; q++) ${tile}[${stage}][r + q][kk] = tg_h[q];`,
          ]),
      `    }`,
    ],
  };
}
