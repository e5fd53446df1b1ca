// Tensor-core matmul for CUDA: a kernel whose plain lowering is one float32 sum over k of products of two
// float16 (or two bfloat16) factors, A at (m, k) and B at (n, k), is rendered as a tiled `mma.sync`
// (m16n8k16, float32 accumulation) kernel, or on an H100/H200 as warpgroup products (wgmma.mma_async,
// TC_TILE=...:wgmma or BEAM's choice). A factor that is one load with an affine index travels by
// cp.async, 16 bytes at a time along its unit stride (k or rows), and reaches mma fragments by ldmatrix
// (transposed where stored k-major); when both do, k tiles pipeline through 2-4 stages of dynamic shared
// memory, with the block and warp tile of a TensorCoreTile (a default, TC_TILE, or BEAM's choice among
// TILE_SHAPES). A computed factor (a bias added first) is evaluated per element through registers and
// rounded to 16 bits there, where the loop kernel would keep it in float32, through two stages (the
// default tile, or a 128 x 128 x 32 wgmma tile on an H100/H200). Few output tiles with a long k split k
// across blocks (split-K, partials through a workspace). Whatever follows the reduce (casts, bias,
// activation) runs per output element on the accumulators, as the plain kernel would.
// test/cuda/emulated.test.ts checks all of it on a CPU emulator.
import type { KernelIR, Operand as Value, Stmt } from "../codegen/ir.ts";
import { TsgradError, getenv } from "../helpers.ts";
import { type Idx, varsOf } from "../shape/symbolic.ts";
import {
  CUDA,
  type CudaKernelSource,
  type Restrict,
  WGMMA_WIDTHS,
  indexType,
  kernelParams,
  outputIndices,
  renderBlock,
  splitOutputLoops,
  storageType,
} from "./cuda.ts";
import { cIndex, toStorage } from "./cstyle.ts";

interface Loop {
  readonly var: string;
  readonly size: number;
}

/** An index as constant + sum of coefficient * variable (undefined when it divides or takes a modulo). */
export interface Affine {
  readonly constant: number;
  readonly coef: ReadonlyMap<string, number>;
}

type Def = Stmt & { kind: "def" };

/**
 * One factor of the product: the reduce loop's statements that compute it (one 16-bit load, or elementwise ops on
 * loads).
 */
interface Operand {
  /** Its statements in loop order, the factor last. */
  readonly defs: readonly Def[];
  /** Set when the factor is one unguarded load: tiles copy it directly (16 bytes at a time when aligned). */
  readonly load?: { readonly buf: number; readonly affine: Affine };
  /** The loop variables its loads read. */
  readonly vars: ReadonlySet<string>;
}

/** A kernel that tensor cores can compute: C[batch, m, n] = epilogue(sum_k A(batch, m, k) * B(batch, n, k)). */
export interface MatmulPattern {
  readonly kernel: KernelIR;
  readonly input: "f16" | "bf16";
  readonly a: Operand;
  readonly b: Operand;
  readonly m: Loop;
  readonly n: Loop;
  readonly k: Loop;
  /** Every other output loop, each a slice of the grid's z dimension. */
  readonly batch: readonly Loop[];
  readonly acc: string;
  /** The statements after the reduce loop, reading the accumulator. */
  readonly epilogue: readonly Stmt[];
}

export function affine(e: Idx): Affine | undefined {
  const coef = new Map<string, number>();
  let constant = 0;
  for (const t of e.kind === "sum" ? e.terms : [e]) {
    if (t.kind === "const") constant += t.value;
    else if (t.kind === "var") coef.set(t.name, (coef.get(t.name) ?? 0) + 1);
    else if (t.kind === "mul" && t.a.kind === "var") coef.set(t.a.name, (coef.get(t.a.name) ?? 0) + t.c);
    else return undefined;
  }
  return { constant, coef };
}

const SIXTEEN_BIT = new Set(["float16", "bfloat16"]);

/**
 * The pattern in a plain lowering (no upcasts): output loops around [acc (float32), loop k { statements
 * computing two 16-bit factors from loads, their product, optional widening casts, the update }, epilogue].
 * Each factor's loads may read k, the batch loops and its own output loop (m or n), not the other's.
 * Undefined when the kernel is anything else.
 */
export function matchMatmul(kernel: KernelIR, why: (reason: string) => void = () => {}): MatmulPattern | undefined {
  const no = (reason: string): undefined => void why(reason);
  const { loops, body } = splitOutputLoops(kernel);
  const [accStmt, loopStmt, ...epilogue] = body;
  // a 16-bit sum (a gradient's) accumulates in float32 on the GPU as well, as tensor cores do
  if (accStmt?.kind !== "acc" || accStmt.op !== "ADD" || accStmt.dtype.kind !== "float" || accStmt.dtype.itemsize < 2)
    return no("the accumulator is not a float sum");
  if (loopStmt?.kind !== "loop" || epilogue.some((s) => s.kind === "loop" || s.kind === "acc" || s.kind === "update"))
    return no("not one reduce loop followed by an epilogue");
  const defs = new Map<string, Def>();
  const updates = loopStmt.body.filter((s) => s.kind === "update");
  for (const s of loopStmt.body) if (s.kind === "def") defs.set(s.name, s);
  const update = updates[0];
  if (updates.length !== 1 || update?.kind !== "update" || update.name !== accStmt.name || update.value.kind !== "val")
    return no("the loop does not update the accumulator once with a value");
  if (loopStmt.body.some((s) => s.kind !== "def" && s !== update))
    return no("the reduce loop holds more than definitions");
  // back through widening casts (exact: products of 16-bit floats fit float32), remembering them
  const casts = new Set<string>();
  const widened = (name: string): string => {
    const d = defs.get(name);
    const src = d?.expr.op === "CAST" ? d.expr.srcs[0] : undefined;
    if (src?.kind !== "val" || d!.dtype.name !== "float32" || src.dtype.kind !== "float") return name;
    casts.add(name);
    return widened(src.name);
  };
  const product = defs.get(widened(update.value.name));
  const factors =
    product && productFactors(product)?.map((o) => (o.kind === "val" ? defs.get(widened(o.name)) : undefined));
  if (!product || !factors) return no("the summed value is not a product");
  // a select's condition is the factor 0 or 1, exact in 16 bits (a one-hot sum: an embedding's gradient)
  const value = factors[1];
  if (
    !factors[0] ||
    !value ||
    !SIXTEEN_BIT.has(value.dtype.name) ||
    (factors[0].dtype !== value.dtype && product.expr.op !== "WHERE")
  )
    return no("the factors are not both float16 or both bfloat16");
  const k = { var: loopStmt.var, size: loopStmt.size };
  const known = new Set([k.var, ...loops.map((l) => l.var)]);
  const [a, b] = factors.map((f) => operand(f!, defs, known));
  // statements both factors read (a bias over k) are computed in each tile's copy
  if (!a || !b) return no("a factor reads something other than the output and reduce loops");
  // every statement of the loop feeds one factor, or is the product or a cast around it
  const used = new Set([...a.defs, ...b.defs].map((d) => d.name).concat(product.name, ...casts));
  if (defs.size !== used.size || !a.vars.has(k.var) || !b.vars.has(k.var))
    return no("the loop computes more than the two factors, or a factor ignores k");
  // m: read by the first factor only; n: by the second only; the biggest such loop of each
  const only = (mine: Operand, other: Operand) =>
    loops.filter((l) => mine.vars.has(l.var) && !other.vars.has(l.var)).sort((x, y) => y.size - x.size)[0];
  const m = only(a, b),
    n = only(b, a);
  if (!m || !n) return no("no output loop is read by one factor alone");
  return {
    kernel,
    input: value.dtype.name === "float16" ? "f16" : "bf16",
    a,
    b,
    m,
    n,
    k,
    batch: loops.filter((l) => l !== m && l !== n),
    acc: accStmt.name,
    epilogue,
  };
}

/**
 * The two factors of a product, or of `where(c, x, 0)` read as c * x (which differs only where x is not
 * finite: NaN instead of 0 beside an infinity, still non-finite for overflow checks); undefined for anything else.
 */
function productFactors(d: Def): readonly Value[] | undefined {
  const e = d.expr;
  if (e.op === "MUL") return e.srcs;
  const zero = e.op === "WHERE" ? e.srcs[2] : undefined;
  if (
    e.op === "WHERE" &&
    zero?.kind === "lit" &&
    zero.value === 0 &&
    !Object.is(zero.value, -0) &&
    e.srcs[0]!.dtype.name === "bool"
  )
    return e.srcs.slice(0, 2);
  return undefined;
}

/**
 * The statements computing `factor` inside the loop, when all are defined there and their loads read known loops (or
 * their own values).
 */
function operand(factor: Def, defs: ReadonlyMap<string, Def>, known: ReadonlySet<string>): Operand | undefined {
  const chain = new Set<Def>();
  const visit = (d: Def): boolean => {
    if (chain.has(d)) return true;
    chain.add(d);
    const e = d.expr;
    if (e.op === "LOAD" || e.op === "INDEX" || e.op === "VALID") return true;
    return e.srcs.every((o) => o.kind === "lit" || (defs.has(o.name) && visit(defs.get(o.name)!)));
  };
  if (!visit(factor)) return undefined;
  const own = new Set([...chain].map((d) => d.name));
  const vars = new Set<string>();
  for (const d of chain) {
    const e = d.expr;
    const indices = e.op === "LOAD" || e.op === "INDEX" ? [e.index] : [];
    const bounds = e.op === "LOAD" || e.op === "VALID" ? e.valid.map((v) => v.expr) : [];
    for (const index of [...indices, ...bounds])
      for (const v of varsOf(index)) {
        if (known.has(v)) vars.add(v);
        else if (!own.has(v)) return undefined;
      }
  }
  const ordered = [...defs.values()].filter((d) => chain.has(d));
  const e = factor.expr;
  const direct = e.op === "LOAD" && e.valid.length === 0 ? affine(e.index) : undefined;
  return { defs: ordered, vars, load: direct && e.op === "LOAD" ? { buf: e.buf, affine: direct } : undefined };
}

/**
 * How a tensor-core kernel tiles its work: a block computes bm x bn outputs, bk of k a step, with warpsM x
 * warpsN warps, each a (bm / warpsM) x (bn / warpsN) tile of 16 x 8 mma tiles; `stages` k tiles pipeline
 * through shared memory where both factors travel by cp.async.
 */
export interface TensorCoreTile {
  readonly bm: number;
  readonly bn: number;
  readonly bk: number;
  readonly warpsM: number;
  readonly warpsN: number;
  /**
   * Hopper's warpgroup products (wgmma.mma_async, sm_90 only) instead of mma.sync: each warpgroup of four
   * warps multiplies 64 rows by all bn columns straight from shared memory (no ldmatrix, no fragment
   * registers); warpsM is then bm / 16 (a warp's accumulators are 16 rows, as mma.sync lays them out) and warpsN 1.
   */
  readonly wgmma?: boolean;
  readonly stages: number;
  /** Blocks a multiprocessor must hold at once (the compiler then caps registers to fit, spilling if it must). */
  readonly minBlocks?: number;
}
export type TileShape = Omit<TensorCoreTile, "stages" | "minBlocks">;

/** 128 x 128 outputs, 32 of k a step, 8 warps as 2 x 4 (each 64 x 32): the default. */
export const DEFAULT_TILE_SHAPE: TileShape = { bm: 128, bn: 128, bk: 32, warpsM: 2, warpsN: 4 };
/**
 * The shapes BEAM times for each tensor-core kernel whose factors both travel by cp.async (and
 * bench/gpu/gemm.ts --tiles): warp tiles of 64 x 32 and 64 x 64 (fewer shared-memory reads per mma, more
 * registers: up to 255, none spilled on sm_90), 128- and 256-wide blocks, 32 or 64 of k a step. A kernel
 * with a computed factor keeps the default shape at two stages: its tiles pass through registers, which a
 * bigger tile would spill.
 */
export const TILE_SHAPES: readonly TileShape[] = [
  DEFAULT_TILE_SHAPE,
  { bm: 128, bn: 128, bk: 32, warpsM: 2, warpsN: 2 },
  { bm: 128, bn: 256, bk: 32, warpsM: 2, warpsN: 4 },
  { bm: 128, bn: 128, bk: 64, warpsM: 2, warpsN: 2 },
  { bm: 128, bn: 128, bk: 64, warpsM: 2, warpsN: 4 },
];

/** A wgmma tile of bm x bn x bk: bm / 64 warpgroups stacked along m. */
const wgmmaShape = (bm: number, bn: number, bk: number): TileShape => ({
  bm,
  bn,
  bk,
  warpsM: bm / 16,
  warpsN: 1,
  wgmma: true,
});
/**
 * The wgmma shapes BEAM also times on an sm_90 GPU (H100, H200): two warpgroups, 128- or 256-wide blocks,
 * 32 or 64 of k a step.
 */
export const WGMMA_TILE_SHAPES: readonly TileShape[] = [
  wgmmaShape(128, 128, 32),
  wgmmaShape(128, 128, 64),
  wgmmaShape(128, 256, 32),
  wgmmaShape(128, 256, 64),
];
/** The architecture whose GPUs run wgmma (compiled for its "a" variant, sm_90a). */
export const WGMMA_ARCH = "sm_90";

/**
 * "128x128x32:2x4" (block m x n x k : warps along m x n), or "128x128x64:wgmma" (warpgroups along m), with
 * ":s4" for the pipeline's depth.
 */
export const tileName = (t: TileShape | TensorCoreTile): string =>
  `${t.bm}x${t.bn}x${t.bk}:${t.wgmma ? "wgmma" : `${t.warpsM}x${t.warpsN}`}${"stages" in t ? `:s${t.stages}` : ""}${"minBlocks" in t && t.minBlocks ? `:b${t.minBlocks}` : ""}`;

/** Why a tile shape cannot be rendered, or undefined when it can. */
function tileProblem(t: TileShape): string | undefined {
  const threads = threadsOf(t);
  if (t.wgmma) {
    if (t.bm % 64 !== 0 || t.warpsM !== t.bm / 16 || t.warpsN !== 1)
      return `a wgmma tile's rows (bm) must be a multiple of 64, a warpgroup's 64 rows each`;
    if (!WGMMA_WIDTHS.includes(t.bn)) return `a wgmma tile's columns (bn) must be one of ${WGMMA_WIDTHS.join(", ")}`;
    // k tiles copy in 16-byte chunks that a warp's four phases spread over four 8 x 8 core matrices
    if (t.bk % 32 !== 0) return `a wgmma tile's bk must be a multiple of 32`;
  }
  if (t.bm % (16 * t.warpsM) !== 0) return `a warp's rows (bm / warpsM) must be a multiple of 16`;
  if (t.bn % (16 * t.warpsN) !== 0) return `a warp's columns (bn / warpsN) must be a multiple of 16`;
  if (t.bk % 16 !== 0) return `bk must be a multiple of 16`;
  if (threads > 1024) return `${threads} threads a block (at most 1024)`;
  if (accumulators(t) > 128) return `${accumulators(t)} float32 accumulators a thread (at most 128)`;
  // each thread copies whole 8-element chunks of both tiles, and as many elements through registers
  if (((t.bm * t.bk) / 8) % threads !== 0 || ((t.bn * t.bk) / 8) % threads !== 0)
    return `the tiles' 16-byte chunks do not divide among ${threads} threads`;
  return undefined;
}

/** Threads a block of this tile runs: 32 a warp. */
const threadsOf = (t: TileShape): number => 32 * t.warpsM * t.warpsN;
/** Float32 accumulators each thread holds: its warp tile's share. */
const accumulators = (t: TileShape): number => (t.bm * t.bn) / threadsOf(t);
/** A warp's mma tiles: mi of 16 rows by nj of 8 columns. */
const mmaTiles = (t: TileShape): { mi: number; nj: number } => ({ mi: t.bm / t.warpsM / 16, nj: t.bn / t.warpsN / 8 });
/** Whether a factor of `p` goes through registers (computed): then the default tile, at two stages. */
const throughRegisters = (p: MatmulPattern): boolean =>
  tilePath(p.a, p.m, p.k) === "registers" || tilePath(p.b, p.n, p.k) === "registers";

/**
 * Parses `TC_TILE`'s form, "128x256x32:2x4" (block m x n x k : warps along m x n) or "128x256x64:wgmma"
 * (Hopper's warpgroup products); a clear error otherwise.
 */
export function parseTileShape(text: string, what = "TC_TILE"): TileShape {
  const wgmma = /^(\d+)x(\d+)x(\d+):wgmma$/.exec(text.trim());
  const match = /^(\d+)x(\d+)x(\d+):(\d+)x(\d+)$/.exec(text.trim());
  if (!match && !wgmma)
    throw new TsgradError(
      `${what}=${text}: expected BMxBNxBK:WARPS_MxWARPS_N or BMxBNxBK:wgmma, e.g. ${tileName(DEFAULT_TILE_SHAPE)}`,
    );
  const [bm, bn, bk, warpsM, warpsN] = (match ?? wgmma)!.slice(1).map(Number) as [
    number,
    number,
    number,
    number,
    number,
  ];
  const shape = wgmma ? wgmmaShape(bm, bn, bk) : { bm, bn, bk, warpsM, warpsN };
  const problem = tileProblem(shape);
  if (problem) throw new TsgradError(`${what}=${text}: ${problem}`);
  return shape;
}

/**
 * What BEAM times for a tensor-core kernel: every shape of TILE_SHAPES (and on an sm_90 GPU, `arch`, of
 * WGMMA_TILE_SHAPES) at the depth the GPU's shared memory allows, and one stage shallower (more blocks'
 * loads in flight against fewer of each block's). A kernel `p` with a computed factor has the default
 * tile at ~180 registers a thread (one block a multiprocessor) or capped for two blocks (ptxas spills a
 * few words on sm_90), and on sm_90 a 128 x 128 x 32 wgmma tile: which is faster is for the GPU to say.
 */
export function tileCandidates(sharedPerMultiprocessor: number, p?: MatmulPattern, arch = ""): TensorCoreTile[] {
  if (p && throughRegisters(p)) {
    const tile = { ...DEFAULT_TILE_SHAPE, stages: 2 };
    // on sm_90 also wgmma, its computed tiles stored into core matrices (renderMatmulTC narrows it to 128 x 128 x 32)
    return [
      tile,
      { ...tile, minBlocks: 2 },
      ...(arch === WGMMA_ARCH ? [{ ...wgmmaShape(128, 128, 32), stages: 2 }] : []),
    ];
  }
  const shapes = arch === WGMMA_ARCH ? [...TILE_SHAPES, ...WGMMA_TILE_SHAPES] : TILE_SHAPES;
  return shapes.flatMap((shape) => {
    const tile = tensorCoreTile(sharedPerMultiprocessor, shape, arch);
    if (process.env.TC_STAGES) return tile.wgmma && tile.stages < MIN_WGMMA_STAGES ? [] : [tile];
    // a wgmma tile that two blocks a multiprocessor could share also runs alone, as deep as one block allows
    const alone = deepest(sharedPerMultiprocessor, shape, 1);
    if (tile.wgmma && alone > tile.stages) return [tile, { ...tile, stages: alone }];
    return tile.stages > (tile.wgmma ? MIN_WGMMA_STAGES : 2) ? [tile, { ...tile, stages: tile.stages - 1 }] : [tile];
  });
}

/**
 * Shared tiles carry 8 halves of padding per row: the 8 row addresses of each ldmatrix phase then fall in
 * 8 different 16-byte bank groups (pitches of 80, 144, 272 and 528 bytes), so fragment loads are conflict-free.
 */
const PAD = 8;
/**
 * Bytes of one pipeline stage at most: both factors' tiles, row-major (k-major tiles take less; wgmma's are unpadded).
 */
const stageBytes = (t: TileShape): number => (t.bm + t.bn) * (t.bk + (t.wgmma ? 0 : PAD)) * 2;

/** Whether 8 neighbours along `along` (unit stride) always start 16-byte aligned: one vector load reads them. */
export const vectorAlong = (af: Affine, along: Loop): boolean =>
  af.coef.get(along.var) === 1 &&
  along.size % 8 === 0 &&
  af.constant % 8 === 0 &&
  [...af.coef].every(([v, c]) => v === along.var || c % 8 === 0);

/** The deepest pipeline tried: four k tiles in flight (mma.sync), six (wgmma, which keeps two stages busy). */
const MAX_STAGES = 4,
  MAX_WGMMA_STAGES = 6;
/** wgmma tiles pipeline at least three stages: one multiplied, one being released, one loading. */
const MIN_WGMMA_STAGES = 3;
/** Shared memory the driver keeps per block (1 KB on sm_80 and later). */
const RESERVED_SHARED = 1024;

/**
 * How many shared-memory stages tensor-core kernels whose factors both travel by cp.async pipeline: the
 * most (2 to 4; wgmma tiles 3 to 6) with which the blocks a multiprocessor's registers hold (two for
 * tiles of up to 64 accumulators a thread, else one) fit its shared memory. The default tile: 4 on an
 * H100/H200 (228 KB), 2 on a 4090 (100 KB). `TC_STAGES` overrides. Unknown (0): the most.
 */
export function tensorCoreStages(sharedPerMultiprocessor: number, shape: TileShape = DEFAULT_TILE_SHAPE): number {
  const forced = getenv("TC_STAGES", 0);
  if (forced !== 0 && !(Number.isInteger(forced) && forced >= 2 && forced <= 8)) {
    throw new TsgradError(`TC_STAGES=${process.env.TC_STAGES}: expected a whole number of pipeline stages from 2 to 8`);
  }
  if (forced) return forced;
  return deepest(sharedPerMultiprocessor, shape, accumulators(shape) <= 64 ? 2 : 1);
}

/**
 * The most stages (within the tile kind's range) with which `blocks` blocks of `shape` fit a multiprocessor's shared
 * memory.
 */
function deepest(sharedPerMultiprocessor: number, shape: TileShape, blocks: number): number {
  const [fewest, most] = shape.wgmma ? [MIN_WGMMA_STAGES, MAX_WGMMA_STAGES] : [2, MAX_STAGES];
  if (sharedPerMultiprocessor <= 0) return most;
  let stages = most;
  while (stages > fewest && blocks * (stages * stageBytes(shape) + RESERVED_SHARED) > sharedPerMultiprocessor) stages--;
  return stages;
}

/**
 * The tile tensor-core kernels take on a GPU of architecture `arch` with this much shared memory a
 * multiprocessor: `shape`, else `TC_TILE`'s, else the default, with its pipeline depth (tensorCoreStages).
 * A wgmma tile asked for where the GPU has none is an error.
 */
export function tensorCoreTile(sharedPerMultiprocessor: number, shape?: TileShape, arch?: string): TensorCoreTile {
  const chosen = shape ?? (process.env.TC_TILE ? parseTileShape(process.env.TC_TILE) : DEFAULT_TILE_SHAPE);
  if (chosen.wgmma && arch !== undefined && arch !== WGMMA_ARCH) {
    throw new TsgradError(
      `tensor-core tile ${tileName(chosen)}${shape ? "" : ` (TC_TILE)`}: wgmma runs on ${WGMMA_ARCH} GPUs (H100, H200) only, this one is ${arch}`,
    );
  }
  return { ...chosen, stages: tensorCoreStages(sharedPerMultiprocessor, chosen) };
}

/**
 * Renders the tensor-core kernel for a matched pattern, tiled as `requested`. Fragments come from shared
 * memory by ldmatrix (transposing where a tile is stored k-major), then mma.sync accumulates in float32
 * registers. Factors that both travel by cp.async pipeline `stages` k tiles through dynamic shared memory;
 * a computed factor goes through registers, with the default tile at two stages.
 */
export function renderMatmulTC(
  p: MatmulPattern,
  fnName: string,
  restrict: Restrict,
  requested: TensorCoreTile = tensorCoreTile(0),
): CudaKernelSource {
  const problem = tileProblem(requested);
  if (problem) throw new TsgradError(`tensor-core tile ${tileName(requested)}: ${problem}`);
  const { kernel, m, n, k, batch } = p;
  const pipelined = !throughRegisters(p);
  // a computed factor passes through registers: two stages, the default tile, or for a wgmma request 128
  // rows by at most 128 columns (more accumulators beside the staged tiles would spill)
  const tile = pipelined
    ? fitWidth(requested, p)
    : requested.wgmma
      ? fitWidth({ ...wgmmaShape(128, Math.min(128, requested.bn), 32), stages: 2 }, p)
      : { ...DEFAULT_TILE_SHAPE, stages: 2, minBlocks: requested.minBlocks };
  const { bm, bn, stages } = tile;
  if (pipelined && tile.wgmma && stages < MIN_WGMMA_STAGES)
    throw new TsgradError(
      `tensor-core tile ${tileName(tile)}: wgmma tiles pipeline at least ${MIN_WGMMA_STAGES} stages`,
    );
  const threads = threadsOf(tile);
  const copyA = tileCopy("As", "ra", p.a, m, p, bm, tile),
    copyB = tileCopy("Bs", "rb", p.b, n, p, bn, tile);
  const batches = batch.reduce((s, l) => s * l.size, 1);
  const tiles = Math.ceil(n.size / bn) * Math.ceil(m.size / bm) * batches;
  const { splits, span } = splitK(tiles, k.size, tile.bk);
  // wgmma's descriptors address dynamic shared memory (the emulator's too)
  const dynamic = pipelined || tile.wgmma;
  const sharedBytes = dynamic ? stages * (copyA.stageBytes + copyB.stageBytes) : 0;
  const { mi, nj } = mmaTiles(tile);
  const lines = [
    `extern "C" __global__ void __launch_bounds__(${threads}${tile.minBlocks ? `, ${tile.minBlocks}` : ""}) ${fnName}(${kernelParams(kernel, restrict)}${splits > 1 ? ", unsigned* __restrict__ tg_ws" : ""}) {`,
    ...(dynamic
      ? [
          `  TG_DYNAMIC_SHARED(tg_smem);`,
          `  typedef unsigned short TileA${copyA.shape}; typedef unsigned short TileB${copyB.shape};`,
          `  TileA* As = (TileA*)tg_smem; TileB* Bs = (TileB*)(tg_smem + ${stages * copyA.stageBytes});`,
        ]
      : [
          `  __shared__ __align__(16) unsigned short As[2]${copyA.shape};`,
          `  __shared__ __align__(16) unsigned short Bs[2]${copyB.shape};`,
        ]),
    `  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;`,
    `  const int wm = (warp / ${tile.warpsN}) * ${bm / tile.warpsM}, wn = (warp % ${tile.warpsN}) * ${bn / tile.warpsN};`,
    `  const int m0 = blockIdx.y * ${bm}, n0 = blockIdx.x * ${bn};`,
    ...outputIndices(batch, "int", splits > 1 ? `((int)blockIdx.z / ${splits})` : "(int)blockIdx.z", "  "),
    // this block's share of k (all of it without a split)
    splits > 1
      ? `  const int kBegin = ((int)blockIdx.z % ${splits}) * ${span}, kEnd = min(${k.size}, kBegin + ${span});`
      : `  const int kBegin = 0, kEnd = ${k.size};`,
    `  float c[${mi}][${nj}][4] = {};`,
    ...(!pipelined
      ? registerLoop(copyA, copyB, tile)
      : tile.wgmma
        ? wgmmaLoop(copyA, copyB, tile, p.input)
        : pipelinedLoop(copyA, copyB, tile)
    ).flatMap((line) =>
      line !== MULTIPLY
        ? [line]
        : tile.wgmma
          ? wgmmaProducts(copyA, copyB, tile, p.input, 0)
          : multiplyStage(copyA, copyB, p.input, tile),
    ),
    ...(splits > 1 ? combineSplits(splits, tiles, tile) : []),
    ...epilogue(p, mi, nj),
    "}",
  ];
  return {
    code: lines.join("\n"),
    launch: {
      grid: [Math.ceil(n.size / bn), Math.ceil(m.size / bm), batches * splits],
      block: [threads, 1, 1],
      sharedBytes,
      ...(splits > 1
        ? { workspace: { bytes: counterBytes(tiles) + tiles * splits * bm * bn * 4, zeroedBytes: counterBytes(tiles) } }
        : {}),
    },
  };
}

/**
 * A wgmma tile no wider than the problem needs: where n is narrower than bn (an attention's values, 64
 * wide), the narrowest wgmma width that covers it, so that no warpgroup multiplies columns that are not there.
 */
function fitWidth(tile: TensorCoreTile, p: MatmulPattern): TensorCoreTile {
  if (!tile.wgmma || p.n.size >= tile.bn) return tile;
  const bn = WGMMA_WIDTHS.find((w) => w >= p.n.size && w <= tile.bn) ?? tile.bn;
  return bn === tile.bn || tileProblem({ ...tile, bn }) ? tile : { ...tile, bn };
}

/** The vector type of two neighbouring outputs, by storage type. */
const PAIR_TYPES: Readonly<Record<string, string>> = { "unsigned short": "ushort2", float: "float2" };

/**
 * Whatever follows the reduce, per output element, from the accumulators: accumulator e of tile (i, j) is
 * row g (+8 for e >= 2), columns 2t and 2t + 1. Where the output is stored along n with unit stride from
 * an even element, each thread stores its two neighbouring columns as one 4- or 8-byte vector (half the
 * store instructions; whole 32-bit words), else element by element.
 */
function epilogue(p: MatmulPattern, mi: number, nj: number): string[] {
  const { kernel, m, n } = p;
  const last = p.epilogue.at(-1);
  const store =
    last?.kind === "store" && p.epilogue.filter((st) => st.kind === "store").length === 1 ? last : undefined;
  const stored = store && storageType(kernel.buffers[store.buf]!.dtype);
  const af = store && affine(store.index);
  const pairType =
    stored &&
    af &&
    af.coef.get(n.var) === 1 &&
    af.constant % 2 === 0 &&
    [...af.coef].every(([v, c]) => v === n.var || c % 2 === 0)
      ? PAIR_TYPES[stored]
      : undefined;
  // rows g and g + 8 (h), columns 2t and 2t + 1 (q)
  const lines = [
    `  #pragma unroll`,
    `  for (int i = 0; i < ${mi}; i++)`,
    `    #pragma unroll`,
    `    for (int j = 0; j < ${nj}; j++)`,
    `      #pragma unroll`,
    `      for (int h = 0; h < 2; h++) {`,
    `        const int ${m.var} = m0 + wm + i * 16 + g + h * 8, tg_n = n0 + wn + j * 8 + t * 2;`,
    `        if (${m.var} >= ${m.size} || tg_n >= ${n.size}) continue;`,
    ...(pairType ? [`        ${stored} tg_out[2];`] : []),
    `        #pragma unroll`,
    `        for (int q = 0; q < 2; q++) {`,
    `          const int ${n.var} = tg_n + q;`,
    `          if (${n.var} >= ${n.size}) break;`,
    `          float ${p.acc} = c[i][j][h * 2 + q];`,
  ];
  renderBlock(pairType ? p.epilogue.slice(0, -1) : p.epilogue, lines, "          ", {
    kernel,
    products: new Map(),
    group: 0,
  });
  if (!pairType || !store) return [...lines, `        }`, `      }`];
  const at = `b${store.buf}[${cIndex(store.index)}]`;
  return [
    ...lines,
    `          tg_out[q] = ${toStorage(CUDA.operand(store.value), store.dtype)};`,
    `        }`,
    `        const int ${n.var} = tg_n;`,
    // the last column of an odd n stands alone
    `        if (tg_n + 1 < ${n.size}) { ${pairType} tg_st; tg_st.x = tg_out[0]; tg_st.y = tg_out[1]; *(${pairType}*)&${at} = tg_st; }`,
    `        else ${at} = tg_out[0];`,
    `      }`,
  ];
}

/** Where the k loop multiplies the current stage's tiles (multiplyStage's lines). */
const MULTIPLY = "<multiply>";

/** The warps' products of one stage: per 16 of k, fragments by ldmatrix, then the warp tile's mma tiles. */
function multiplyStage(copyA: TileCopy, copyB: TileCopy, input: "f16" | "bf16", tile: TensorCoreTile): string[] {
  const { mi, nj } = mmaTiles(tile);
  return [
    `    #pragma unroll`,
    `    for (int kk = 0; kk < ${tile.bk}; kk += 16) {`,
    `      unsigned a[${mi}][4], b[${nj}][2];`,
    `      #pragma unroll`,
    `      for (int i = 0; i < ${mi}; i++) ${copyA.fragmentA("a[i]", "wm + i * 16")}`,
    `      #pragma unroll`,
    `      for (int j = 0; j < ${nj}; j += 2) ${copyB.fragmentB("b[j]", "b[j + 1]", "wn + j * 8")}`,
    `      #pragma unroll`,
    `      for (int i = 0; i < ${mi}; i++)`,
    `        #pragma unroll`,
    `        for (int j = 0; j < ${nj}; j++)`,
    `          tg_mma_${input}(c[i][j], a[i], b[j]);`,
    `    }`,
  ];
}

/** The first `count` k tiles' copies into stages 0.. before the k loop, a group each. */
const prefetch = (copyA: TileCopy, copyB: TileCopy, count: number, bk: number): string[] => [
  `  #pragma unroll`,
  `  for (int s = 0; s < ${count}; s++) {`,
  `    if (kBegin + s * ${bk} < kEnd) {`,
  ...copyA.fetch(`kBegin + s * ${bk}`, "s"),
  ...copyB.fetch(`kBegin + s * ${bk}`, "s"),
  `    }`,
  // a group per tile, empty past the end, so that the count of groups still in flight stays exact
  `    tg_cp_async_commit();`,
  `  }`,
];

/**
 * The k loop when both factors travel by cp.async: `stages` - 1 tiles in flight while the warps multiply
 * one. One barrier a step both publishes the landed tile and frees the stage multiplied the step before,
 * which the next fetch then fills.
 */
function pipelinedLoop(copyA: TileCopy, copyB: TileCopy, { stages, bk }: TensorCoreTile): string[] {
  return [
    ...prefetch(copyA, copyB, stages - 1, bk),
    `  for (int k0 = kBegin, stage = 0; k0 < kEnd; k0 += ${bk}, stage = stage == ${stages - 1} ? 0 : stage + 1) {`,
    // this tile's group has landed in this thread; after the barrier, in every thread, and every warp is
    // done with the stage multiplied last step
    `    tg_cp_async_wait<${stages - 2}>();`,
    `    __syncthreads();`,
    `    if (k0 + ${(stages - 1) * bk} < kEnd) {`,
    `      const int next = stage == 0 ? ${stages - 1} : stage - 1;`,
    ...copyA.fetch(`k0 + ${(stages - 1) * bk}`, "next"),
    ...copyB.fetch(`k0 + ${(stages - 1) * bk}`, "next"),
    `    }`,
    `    tg_cp_async_commit();`,
    MULTIPLY,
    `  }`,
  ];
}

/**
 * The k loop of a wgmma tile: `stages` - 2 tiles loading while each warpgroup multiplies one with
 * wgmma.mma_async straight from shared memory and the previous stage's products may still run (one
 * group in flight). The barrier of a step publishes the landed tile (after each thread's own copies are
 * made visible to the tensor cores' async proxy) and, every thread having waited for all but its newest
 * products, frees the stage multiplied two steps before, which the step's fetch then fills. After the last
 * products, a fence on every accumulator keeps the epilogue's reads behind the final wait.
 */
function wgmmaLoop(copyA: TileCopy, copyB: TileCopy, tile: TensorCoreTile, input: "f16" | "bf16"): string[] {
  const { stages, bk } = tile;
  const ahead = stages - 2;
  return [
    ...prefetch(copyA, copyB, ahead, bk),
    `  for (int k0 = kBegin, stage = 0; k0 < kEnd; k0 += ${bk}, stage = stage == ${stages - 1} ? 0 : stage + 1) {`,
    `    tg_cp_async_wait<${ahead - 1}>();`,
    `    tg_fence_proxy_async();`,
    `    __syncthreads();`,
    `    if (k0 + ${ahead * bk} < kEnd) {`,
    `      const int next = stage >= ${stages - ahead} ? stage - ${stages - ahead} : stage + ${ahead};`,
    ...copyA.fetch(`k0 + ${ahead * bk}`, "next"),
    ...copyB.fetch(`k0 + ${ahead * bk}`, "next"),
    `    }`,
    `    tg_cp_async_commit();`,
    ...wgmmaProducts(copyA, copyB, tile, input, 1),
    `  }`,
    ...accumulatorFences(tile),
  ];
}

/**
 * Each warpgroup's products of the current stage, issued as one group, then a wait until at most
 * `inFlight` groups remain. Each 8 x 8 core matrix is 128 contiguous bytes: 16 of k is two of them along
 * k; a warpgroup's 64 rows, eight along the rows.
 */
function wgmmaProducts(
  copyA: TileCopy,
  copyB: TileCopy,
  { bk, bn }: TensorCoreTile,
  input: "f16" | "bf16",
  inFlight: number,
): string[] {
  const desc = (copy: TileCopy, offset: string) => `tg_wgmma_desc(&${copy.name}[stage][${offset}], 128, ${bk * 16})`;
  return [
    `    tg_wgmma_fence();`,
    `    #pragma unroll`,
    `    for (int kk = 0; kk < ${bk}; kk += 16) tg_wgmma_${input}_n${bn}<${copyA.transposed ? 1 : 0}, ${copyB.transposed ? 1 : 0}>(&c[0][0][0], ${desc(copyA, `(warp >> 2) * ${64 * bk} + kk * 8`)}, ${desc(copyB, "kk * 8")});`,
    `    tg_wgmma_commit();`,
    `    tg_wgmma_wait<${inFlight}>();`,
  ];
}

/**
 * After the last products: every group waited for, and a fence on every accumulator keeps the epilogue's reads behind
 * it.
 */
const accumulatorFences = ({ bn }: TensorCoreTile): string[] => [
  `  tg_wgmma_wait<0>();`,
  `  #pragma unroll`,
  `  for (int q = 0; q < ${bn / 2}; q++) tg_fence_reg(c[0][q >> 2][q & 3]);`,
];

/**
 * The k loop when a factor goes through registers (computed factors): two stages; the next tile's loads
 * are issued before the multiply and stored into the other stage after it.
 */
function registerLoop(copyA: TileCopy, copyB: TileCopy, tile: TensorCoreTile): string[] {
  const { bk, wgmma } = tile;
  return [
    `  ${copyA.registers} ${copyB.registers}`,
    ...copyA.fetch("kBegin", "0"),
    ...copyB.fetch("kBegin", "0"),
    `  tg_cp_async_commit();`,
    ...copyA.store("0"),
    ...copyB.store("0"),
    `  for (int k0 = kBegin, stage = 0; k0 < kEnd; k0 += ${bk}, stage ^= 1) {`,
    `    const bool more = k0 + ${bk} < kEnd;`,
    `    if (more) {`,
    ...copyA.fetch(`k0 + ${bk}`, "stage ^ 1"),
    ...copyB.fetch(`k0 + ${bk}`, "stage ^ 1"),
    `    }`,
    `    tg_cp_async_commit();`,
    // every copy but the group just issued (the next tile's) has landed, in every thread (and, for wgmma,
    // is visible to its async proxy, as are the computed tiles stored the step before)
    `    tg_cp_async_wait<1>();`,
    ...(wgmma ? [`    tg_fence_proxy_async();`] : []),
    `    __syncthreads();`,
    MULTIPLY,
    // the other stage was last read before the previous barrier: computed tiles can go there now
    `    if (more) {`,
    ...copyA.store("stage ^ 1"),
    ...copyB.store("stage ^ 1"),
    `    }`,
    `    __syncthreads();`,
    `  }`,
    ...(wgmma ? accumulatorFences(tile) : []),
  ];
}

/** Blocks that keep every multiprocessor of a big GPU (132 on an H100/H200, 128 on a 4090) busy about twice over. */
const TARGET_BLOCKS = 256;
/** The fewest k steps a split keeps (below, the pipeline's start and the combine cost more than the split gains). */
const MIN_SPLIT_STEPS = 8;

/**
 * Split-K for matmuls with few output tiles and a long k (weight gradients: 1024 x 1024 outputs summed over
 * batch x sequence): `splits` blocks per tile, each summing `span` (a multiple of bk) of k.
 */
export function splitK(tiles: number, kSize: number, bk = DEFAULT_TILE_SHAPE.bk): { splits: number; span: number } {
  const steps = Math.ceil(kSize / bk);
  let splits = 1;
  while (tiles * splits < TARGET_BLOCKS && steps / (splits * 2) >= MIN_SPLIT_STEPS) splits *= 2;
  const span = Math.ceil(steps / splits) * bk;
  return { splits: Math.ceil(kSize / span), span };
}

/** A tile counter per output tile, at the start of the workspace, padded to 256 bytes. */
const counterBytes = (tiles: number): number => Math.ceil((tiles * 4) / 256) * 256;

/**
 * After its share of k, each block of a split tile writes its accumulators to the workspace (coalesced: one
 * float per thread per accumulator) and takes a ticket; the last of the tile's blocks sums every split's
 * partials in split order (the same result whichever block comes last), resets the counter for the next
 * launch and goes on to the epilogue; the others are done.
 */
function combineSplits(splits: number, tiles: number, tile: TensorCoreTile): string[] {
  const threads = threadsOf(tile),
    acc = accumulators(tile),
    { nj } = mmaTiles(tile);
  return [
    `  {`,
    `    __shared__ unsigned tg_ticket;`,
    `    const int tile = (((int)blockIdx.z / ${splits}) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;`,
    `    float* part = (float*)(tg_ws + ${counterBytes(tiles) / 4}) + (size_t)tile * ${splits * tile.bm * tile.bn};`,
    `    #pragma unroll`,
    `    for (int q = 0; q < ${acc}; q++) part[(((int)blockIdx.z % ${splits}) * ${acc} + q) * ${threads} + tid] = c[q / ${4 * nj}][(q / 4) % ${nj}][q % 4];`,
    `    __threadfence();`,
    `    __syncthreads();`,
    `    if (tid == 0) tg_ticket = atomicAdd(&tg_ws[tile], 1u);`,
    `    __syncthreads();`,
    `    if (tg_ticket != ${splits - 1}) return;`,
    `    __threadfence();`,
    `    #pragma unroll`,
    `    for (int q = 0; q < ${acc}; q++) {`,
    `      float sum = 0;`,
    // the splits' loop stays a loop: unrolled inside the unrolled accumulators' loop, it takes ptxas many seconds
    `      #pragma unroll 1`,
    `      for (int s = 0; s < ${splits}; s++) sum += __ldcg(&part[(s * ${acc} + q) * ${threads} + tid]);`,
    `      c[q / ${4 * nj}][(q / 4) % ${nj}][q % 4] = sum;`,
    `    }`,
    `    if (tid == 0) tg_ws[tile] = 0;`,
    `  }`,
  ];
}

/**
 * How one factor's tile moves from global to shared memory and into mma fragments. `fetch` starts the copy
 * of the tile at k offset `k0` (into stage `stage` for cp.async, into registers otherwise), `store` puts
 * register-held tiles into a stage; `fragmentA` / `fragmentB` load the fragments at k `kk` of the current stage.
 */
interface TileCopy {
  /** The shared array's name ("As", "Bs"). */
  readonly name: string;
  /** The shared array's dimensions after the stage, e.g. "[128][40]". */
  readonly shape: string;
  /** Stored with its rows contiguous (k-major, for wgmma MN-major: transposed on the way in). */
  readonly transposed: boolean;
  /** Bytes of one stage. */
  readonly stageBytes: number;
  /** Whether the tile travels by cp.async alone (no registers). */
  readonly async: boolean;
  readonly registers: string;
  fetch(k0: string, stage: string): string[];
  store(stage: string): string[];
  /** One 16 x 16 A fragment (4 registers) of rows `row0`... */
  fragmentA(regs: string, row0: string): string;
  /** Two 16 x 8 B fragments (2 registers each) of columns `col0`... */
  fragmentB(first: string, second: string, col0: string): string;
}

/** How a factor's tiles reach shared memory (see tileCopy). */
type TilePath = "cp.async, k contiguous" | "cp.async, rows contiguous" | "registers";

function tilePath(o: Operand, row: Loop, k: Loop): TilePath {
  if (o.load && vectorAlong(o.load.affine, k)) return "cp.async, k contiguous";
  if (o.load && vectorAlong(o.load.affine, row)) return "cp.async, rows contiguous";
  return "registers";
}

/** How the kernel for `p` moves its tiles and splits k, for reports (bench/gpu/forms.ts). */
export function describeTensorCoreKernel(
  p: MatmulPattern,
  tile: TileShape = DEFAULT_TILE_SHAPE,
): { a: TilePath; b: TilePath; splits: number } {
  const tiles = Math.ceil(p.n.size / tile.bn) * Math.ceil(p.m.size / tile.bm) * p.batch.reduce((s, l) => s * l.size, 1);
  return { a: tilePath(p.a, p.m, p.k), b: tilePath(p.b, p.n, p.k), splits: splitK(tiles, p.k.size, tile.bk).splits };
}

/**
 * The copy of one factor's tile: rows along `row` (m or n), bk columns along k, zero outside. A factor that
 * is one load whose rows or k run along 8-aligned unit strides goes by cp.async, 16 bytes at a time,
 * stored as it lies in memory (row-major: [row][k]; k-major: [k][row], read back transposed by
 * ldmatrix.trans); any other factor goes through registers element by element (a computed one rounded to
 * 16 bits there) and is stored [row][k].
 */
function tileCopy(
  tile: string,
  regs: string,
  o: Operand,
  row: Loop,
  p: MatmulPattern,
  rows: number,
  shape: TileShape,
): TileCopy {
  const { k } = p;
  const { bk } = shape,
    threads = threadsOf(shape);
  const start = row === p.m ? "m0" : "n0";
  const inside = `gr < ${row.size} && gk < ${k.size}`;
  // each thread handles elements (or 8-element chunks) e = tid + j * threads
  const each = (count: number, index: string, body: string[]): string[] => [
    `    #pragma unroll`,
    `    for (int j = 0; j < ${count}; j++) {`,
    `      const int e = tid + j * ${threads}, ${index};`,
    ...body,
    `    }`,
  ];
  const scalars = (rows * bk) / threads,
    chunks = scalars / 8;
  // [row][k] fragments: lanes 0-15 address rows at k, lanes 16-31 the same rows at k + 8
  const rowMajor = {
    name: tile,
    shape: `[${rows}][${bk + PAD}]`,
    stageBytes: rows * (bk + PAD) * 2,
    transposed: false,
    fragmentA: (r: string, row0: string) =>
      `tg_ldsm_x4(${r}, &${tile}[stage][${row0} + (lane & 15)][kk + (lane >> 4) * 8]);`,
    fragmentB: (first: string, second: string, col0: string) =>
      `{ unsigned q[4]; tg_ldsm_x4(q, &${tile}[stage][${col0} + (lane & 7) + (lane >> 4) * 8][kk + ((lane >> 3) & 1) * 8]); ${first}[0] = q[0]; ${first}[1] = q[1]; ${second}[0] = q[2]; ${second}[1] = q[3]; }`,
  };
  const path = tilePath(o, row, k);
  if (o.load && path !== "registers") {
    const af = o.load.affine;
    const base = [
      String(af.constant),
      ...[...af.coef].filter(([v]) => v !== row.var && v !== k.var).map(([v, c]) => `${v} * ${c}`),
    ].join(" + ");
    const address = `b${o.load.buf} + ${base} + gr * ${af.coef.get(row.var) ?? 0} + gk * ${af.coef.get(k.var)!}`;
    const copy = (stage: string, index: string) =>
      `      tg_cp_async16(&${tile}[${stage}]${index}, ${inside} ? ${address} : b${o.load!.buf}, ${inside} ? 16 : 0);`;
    if (shape.wgmma)
      return wgmmaTileCopy(tile, path, rows, bk, start, (stage, offset) => copy(stage, `[${offset}]`), each, chunks);
    if (path === "cp.async, k contiguous") {
      return {
        ...rowMajor,
        registers: "",
        async: true,
        fetch: (k0, stage) =>
          each(chunks, `r = e / ${bk / 8}, kk = (e % ${bk / 8}) * 8, gr = ${start} + r, gk = ${k0} + kk`, [
            copy(stage, "[r][kk]"),
          ]),
        store: () => [],
      };
    }
    // k-major: [k][row]; ldmatrix.trans hands each lane the (row, k) pairs mma wants
    return {
      name: tile,
      shape: `[${bk}][${rows + PAD}]`,
      stageBytes: bk * (rows + PAD) * 2,
      transposed: true,
      registers: "",
      async: true,
      fetch: (k0, stage) =>
        each(chunks, `kk = e / ${rows / 8}, r = (e % ${rows / 8}) * 8, gr = ${start} + r, gk = ${k0} + kk`, [
          copy(stage, "[kk][r]"),
        ]),
      store: () => [],
      fragmentA: (r, row0) =>
        `tg_ldsm_x4_trans(${r}, &${tile}[stage][kk + (lane & 7) + (lane >> 4) * 8][${row0} + ((lane >> 3) & 1) * 8]);`,
      fragmentB: (first, second, col0) =>
        `{ unsigned q[4]; tg_ldsm_x4_trans(q, &${tile}[stage][kk + (lane & 7) + ((lane >> 3) & 1) * 8][${col0} + (lane >> 4) * 8]); ${first}[0] = q[0]; ${first}[1] = q[1]; ${second}[0] = q[2]; ${second}[1] = q[3]; }`,
    };
  }
  // element by element through registers: rows fastest where the factor's loads run along rows and none
  // along k (coalesced reads of a transposed or computed factor), else k fastest
  const loads = o.defs.flatMap((d) => (d.expr.op === "LOAD" ? [affine(d.expr.index)] : []));
  const alongRows = loads.some((af) => af?.coef.get(row.var) === 1) && !loads.some((af) => af?.coef.get(k.var) === 1);
  const index = alongRows ? `r = e % ${rows}, kk = e / ${rows}` : `r = e / ${bk}, kk = e % ${bk}`;
  const body = [`      ${regs}[j] = 0;`, `      if (${inside}) {`, `        const int ${row.var} = gr, ${k.var} = gk;`];
  renderBlock(o.defs, body, "        ", { kernel: p.kernel, products: new Map(), group: 0 });
  body.push(
    `        ${regs}[j] = ${p.input === "f16" ? "tg_f2h" : "tg_f2b"}(${o.defs[o.defs.length - 1]!.name});`,
    `      }`,
  );
  // wgmma: K-major core matrices (see wgmmaTileCopy), element by element
  const at = shape.wgmma ? `[((r >> 3) * ${bk / 8} + (kk >> 3)) * 64 + (r & 7) * 8 + (kk & 7)]` : "[r][kk]";
  return {
    ...rowMajor,
    async: false,
    ...(shape.wgmma ? { shape: `[${rows * bk}]`, stageBytes: rows * bk * 2 } : {}),
    registers: `unsigned short ${regs}[${scalars}];`,
    fetch: (k0) => each(scalars, `${index}, gr = ${start} + r, gk = ${k0} + kk`, body),
    store: (stage) => each(scalars, index, [`      ${tile}[${stage}]${at} = ${regs}[j];`]),
  };
}

/**
 * A wgmma tile's copy, in the layout wgmma reads without swizzling: 8 x 8 core matrices of 128 contiguous
 * bytes, those along k adjacent (128 bytes apart: the descriptors' leading offset), those along the rows
 * bk * 16 bytes apart (the stride offset). A k-contiguous factor's core matrix holds 8 rows of 8 k (K-major);
 * a rows-contiguous one's, 8 k of 8 rows (MN-major, which wgmma transposes). Each 8 neighbouring threads
 * write the 8 16-byte lines of one core matrix (one conflict-free 128-byte shared-memory access) while a
 * warp reads whole 32-byte sectors of global memory: 64 bytes of each of 8 rows (K-major), or of each of
 * 8 k (MN-major).
 */
function wgmmaTileCopy(
  tile: string,
  path: TilePath,
  rows: number,
  bk: number,
  start: string,
  copy: (stage: string, offset: string) => string,
  each: (count: number, index: string, body: string[]) => string[],
  chunks: number,
): TileCopy {
  const k8 = bk / 8;
  const noFragments = (): string => {
    throw new TsgradError("wgmma tiles have no mma.sync fragments");
  };
  const common = {
    name: tile,
    shape: `[${rows * bk}]`,
    stageBytes: rows * bk * 2,
    registers: "",
    async: true,
    store: () => [],
    fragmentA: noFragments,
    fragmentB: noFragments,
  };
  if (path === "cp.async, k contiguous") {
    // chunk e is the e-th 16 bytes of the stage: core matrix e / 8 (rows e / 8 / k8, k e / 8 % k8), row e % 8
    return {
      ...common,
      transposed: false,
      fetch: (k0, stage) =>
        each(
          chunks,
          `r = ((e >> 3) / ${k8}) * 8 + (e & 7), kk = ((e >> 3) % ${k8}) * 8, gr = ${start} + r, gk = ${k0} + kk`,
          [copy(stage, "e * 8")],
        ),
    };
  }
  // k e % 8 of row chunk rc = 4 (e / 32 / k8) + e / 8 % 4, in core matrix (rc, e / 32 % k8)
  return {
    ...common,
    transposed: true,
    fetch: (k0, stage) =>
      each(
        chunks,
        `rc = ((e >> 5) / ${k8}) * 4 + ((e >> 3) & 3), kc = (e >> 5) % ${k8}, r = rc * 8, kk = kc * 8 + (e & 7), gr = ${start} + r, gk = ${k0} + kk`,
        [copy(stage, `(rc * ${k8} + kc) * 64 + (e & 7) * 8`)],
      ),
  };
}

/** Work below which the tiled kernel's fixed costs are not worth it. */
const MIN_FLOPS = 2 ** 22;

/**
 * Whether a pattern is big enough for tensor cores (every dimension at least one mma tile) and fits the grid's y and z
 * limits.
 */
export function worthTensorCores(p: MatmulPattern): boolean {
  const batches = p.batch.reduce((s, l) => s * l.size, 1);
  // 32-bit indices throughout, and the batch and row tiles within the grid's z and y limits
  const fits =
    indexType(p.kernel) === "int" && batches <= 65535 && Math.ceil(p.m.size / DEFAULT_TILE_SHAPE.bm) <= 65535;
  return (
    fits &&
    p.m.size >= 16 &&
    p.n.size >= 8 &&
    p.k.size >= 16 &&
    2 * p.m.size * p.n.size * p.k.size * batches >= MIN_FLOPS
  );
}
