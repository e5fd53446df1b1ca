// A kernel as the scheduler hands it over, and the facts about it that both the lowering (lower.ts) and the
// choice of its options (heuristics.ts) read: both build on this file, so the heuristics need no lowerer.
import { type ReduceArg, type UOp, isElementwise } from "../uop.ts";
import type { KernelBuffer } from "./ir.ts";

/** A kernel as the scheduler hands it over: what to compute and where its inputs live. */
export interface KernelSpec {
  /** The value to store; for an ASSIGN this is the assigned value. */
  readonly value: UOp;
  /** Slot of each input node: its data is stored contiguously in its own shape. */
  readonly inputs: ReadonlyMap<UOp, number>;
  readonly buffers: readonly KernelBuffer[];
  /**
   * Lower in the host backends' forms (the device's `Backend.hostForms`): scatters, K-blocks, ragged tiles, merged
   * axes.
   */
  readonly host?: boolean;
}

/**
 * The sum a K-blocked kernel runs in blocks, if it has one that can: the kernel's only reduce, a float32 or
 * float64 sum over one axis in the output's own dtype (the output holds the partial sums), with as many
 * elements as the output, reached from what the kernel stores through elementwise ops and reshapes only
 * (so each output element's partial sum sits at its own index).
 */
export function blockedReduce(spec: KernelSpec): UOp | undefined {
  const root = spec.value;
  const out = spec.buffers[0]!.dtype;
  // reduces reached along elementwise ops and reshapes (read where the output is stored), and otherwise
  // (a flip or an expand of the sum would read another element's partial sum, or what the epilogue wrote)
  const direct = new Set<UOp>();
  const elsewhere = new Set<UOp>();
  const walk = (n: UOp, along: boolean): void => {
    const seen = along ? direct : elsewhere;
    if (seen.has(n) || spec.inputs.has(n)) return;
    seen.add(n);
    if (n.op === "REDUCE") return;
    const keeps = along && (isElementwise(n.op) || n.op === "RESHAPE" || n.op === "CONTIGUOUS");
    for (const s of n.src) walk(s, keeps);
  };
  walk(root, true);
  const reduces = [...new Set([...direct, ...elsewhere].filter((n) => n.op === "REDUCE"))];
  const reduce = reduces[0];
  if (reduces.length !== 1 || !reduce || !direct.has(reduce) || elsewhere.has(reduce)) return undefined;
  const { op, axes } = reduce.arg as ReduceArg;
  const float = reduce.dtype.name === "float32" || reduce.dtype.name === "float64";
  if (op !== "ADD" || axes.length !== 1 || !float || reduce.dtype !== out || reduce.numel !== root.numel)
    return undefined;
  return reduce;
}
