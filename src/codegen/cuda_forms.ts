// How a kernel is shaped for a GPU: the tensor-core form when its plain lowering is a 16-bit matmul
// (TC=0 turns that off), else the loop IR lowered again with GPU options. The CPU heuristics' register
// tiles (up to 128 lanes) starve a GPU of threads; here a reduce with many outputs gets at most 4 x 4
// lanes and only while 2^16 threads remain, a big elementwise kernel 4 (or 2) neighbours a thread along
// the axis it stores along, and a group reduce (few outputs, or rows of their own) 4 neighbours a step
// along its rows: in each case so that neighbours load and store as one vector.
import { getenv } from "../helpers.ts";
import type { KernelIR, Stmt } from "./ir.ts";
import type { KernelSpec } from "./kernel_spec.ts";
import { kernelSpecOf, lowerKernel } from "./lower.ts";
import { NO_OPTS, type Upcast } from "./opts.ts";
import { axisFacts, countStmts, hasUnitTerm } from "./heuristics.ts";
import { mergeNestedLoops } from "./merge_loops.ts";
import {
  type CudaKernelSource,
  type Restrict,
  WARP_ROWS,
  groupSize,
  renderCuda,
  splitOutputLoops,
  warpPerRow,
} from "../renderer/cuda.ts";
import {
  type MatmulPattern,
  type TensorCoreTile,
  matchMatmul,
  renderMatmulTC,
  worthTensorCores,
} from "../renderer/cuda_matmul.ts";

/** What the CUDA backend renders for one kernel. */
export type CudaForm =
  /** `tile`: where BEAM chose one; else the device's (tensorCoreTile). */
  | { readonly kind: "tensorCores"; readonly pattern: MatmulPattern; readonly tile?: TensorCoreTile }
  /**
   * `group`: threads a block splits each output's reduce over, where not `groupSize(kernel)`; `rows`: outputs
   * a block computes, a warp each (group 32), where many rows of their own are reduced (warpPerRow).
   */
  | { readonly kind: "loops"; readonly kernel: KernelIR; readonly group?: number; readonly rows?: number };

/** Reduce steps each thread of a group takes at once (neighbours: one vector load). */
const GROUP_UNROLL = 4;

/** Threads that must remain after upcasting for the GPU to stay busy. */
const MIN_THREADS = 1 << 16;

/** A kernel's plain lowering (no options), before and after nested loops merge; hand-made IR stands as it is. */
export interface PlainLowering {
  readonly spec: KernelSpec | undefined;
  readonly unmerged: KernelIR;
  readonly plain: KernelIR;
}

export function plainLowering(kernel: KernelIR): PlainLowering {
  const spec = kernelSpecOf(kernel);
  const unmerged = spec ? lowerKernel(spec, NO_OPTS) : kernel;
  return { spec, unmerged, plain: mergeNestedLoops(unmerged) };
}

/** The form of `kernel` on CUDA. Kernels without a spec (hand-made IR) keep their loops as they are. */
export function cudaForm(kernel: KernelIR): CudaForm {
  const lowered = plainLowering(kernel);
  if (getenv("TC", 1) !== 0) {
    const pattern = matchMatmul(lowered.plain);
    if (pattern && worthTensorCores(pattern)) return { kind: "tensorCores", pattern };
  }
  return gpuLoopForm(kernel, lowered);
}

/**
 * A kernel as GPU-shaped loops, whatever it computes (another GPU's matrix units take its matmuls: amd_forms.ts),
 * from its plain lowering.
 */
export function gpuLoopForm(
  kernel: KernelIR,
  { spec, unmerged, plain }: PlainLowering = plainLowering(kernel),
): CudaForm & { readonly kind: "loops" } {
  if (!spec) return { kind: "loops", kernel };
  // many rows of their own, read along the row (not a column sum: its warps would read across rows): a warp a row
  const rows = warpPerRow(plain) && readsAlongReduce(plain) ? WARP_ROWS : undefined;
  if (groupSize(plain) > 0 && readsAlongReduce(plain)) {
    // a group's threads each take 4 neighbours a step: aligned, they load as one vector. As many threads
    // as without (a row of 512 or 1024: one step each), so that the block keeps as many loads in flight
    const unrolled = mergeNestedLoops(lowerKernel(spec, { ...NO_OPTS, unroll: GROUP_UNROLL }));
    if (groupSize(unrolled) > 0 && countStmts(unrolled.body) <= LANES_BUDGET)
      return { kind: "loops", kernel: unrolled, group: rows ? 32 : groupSize(plain), rows };
  }
  if (rows) return { kind: "loops", kernel: plain, group: 32, rows };
  return {
    kind: "loops",
    kernel: mergeNestedLoops(lowerKernel(spec, { ...NO_OPTS, upcast: gpuUpcasts(plain, unmerged) })),
  };
}

/** Statements a kernel may hold after its lanes are copied (registers and compile time). */
const LANES_BUDGET = 1024;

/**
 * Vector lanes for elementwise kernels: 4 (or 2) neighbours along the innermost output axis that the store
 * steps along by one, so that each thread stores (and loads, where its inputs are contiguous there too) one
 * 8- or 16-byte vector instead of several 2- or 4-byte scalars, while 2^16 threads remain.
 */
function elementwiseUpcast(plain: KernelIR): Upcast[] {
  const { loops, body } = splitOutputLoops(plain);
  const store =
    body.length > 0 && body.every((s) => s.kind !== "loop") ? body.find((s) => s.kind === "store") : undefined;
  if (store?.kind !== "store") return [];
  const threads = loops.reduce((n, l) => n * l.size, 1);
  for (let axis = plain.outputShape.length - 1; axis >= 0; axis--) {
    const size = plain.outputShape[axis]!;
    if (size === 1) continue;
    if (!hasUnitTerm(store.index, `i${axis}`)) return [];
    const amount = [4, 2].find(
      (n) => size % n === 0 && threads / n >= MIN_THREADS && n * countStmts(body) <= LANES_BUDGET,
    );
    return amount ? [{ axis, amount }] : [];
  }
  return [];
}

/** Whether some load inside the reduce loops steps by one element along its loop (neighbours a vector could load). */
function readsAlongReduce(plain: KernelIR): boolean {
  const along = (stmts: readonly Stmt[], loopVar?: string): boolean =>
    stmts.some((s) =>
      s.kind === "loop"
        ? along(s.body, s.var)
        : s.kind === "def" && s.expr.op === "LOAD" && loopVar !== undefined && hasUnitTerm(s.expr.index, loopVar),
    );
  return along(splitOutputLoops(plain).body);
}

/** Register tiles for reduces with many outputs: the axes whose loads are shared or contiguous, 4 (or 2) lanes each. */
function gpuUpcasts(plain: KernelIR, unmerged: KernelIR): Upcast[] {
  if (plain.name.startsWith("E")) return elementwiseUpcast(unmerged);
  if (!plain.name.startsWith("r") || groupSize(plain) > 0) return [];
  let threads = splitOutputLoops(plain).loops.reduce((n, l) => n * l.size, 1);
  const ranked = axisFacts(plain)
    .filter((f) => f.reuse > 0 || f.contiguous > 0)
    .sort((a, b) => 2 * b.reuse + b.contiguous - (2 * a.reuse + a.contiguous) || b.axis - a.axis);
  const upcast: Upcast[] = [];
  for (const f of ranked.slice(0, 2)) {
    const amount = [4, 2].find((n) => f.size % n === 0 && threads / n >= MIN_THREADS);
    if (!amount) continue;
    upcast.push({ axis: f.axis, amount });
    threads /= amount;
  }
  return upcast;
}

/**
 * Renders a form as the kernel `fnName`; tensor cores take the form's tile, else `tile` (the device's), else the
 * default.
 */
export function renderCudaForm(
  form: CudaForm,
  fnName: string,
  restrict: Restrict,
  tile?: TensorCoreTile,
): CudaKernelSource {
  return form.kind === "tensorCores"
    ? renderMatmulTC(form.pattern, fnName, restrict, form.tile ?? tile)
    : renderCuda(form.kernel, fnName, { restrict, group: form.group, rows: form.rows });
}
