// Lowers one scheduled kernel (a root UOp whose inputs are buffers) into the loop IR.
// Movement ops become index arithmetic; each reduce becomes a loop with an accumulator.
import { dtypes, type DType } from "../dtype.ts";
import {
  type Bound, type Idx, andBound, condKey, flatIndex, iadd, iconst, imul, ivar, unflatIndex,
} from "../shape/symbolic.ts";
import { type Pads, type ReduceArg, type UOp, isElementwise } from "../uop.ts";
import type { AluOp, Expr, KernelBuffer, KernelIR, Operand, Stmt } from "./ir.ts";

/** A kernel as the scheduler hands it over: what to compute and where its inputs live. */
export interface KernelSpec {
  /** The value to store; for an ASSIGN this is the assigned value. */
  readonly value: UOp;
  /** Slot of each input node: its data is stored contiguously in its own shape. */
  readonly inputs: ReadonlyMap<UOp, number>;
  readonly buffers: readonly KernelBuffer[];
}

export function lowerKernel(spec: KernelSpec): KernelIR {
  return new Lowerer(spec).run();
}

class Lowerer {
  private names = 0;
  private loops = 0;
  private scopes: { stmts: Stmt[]; cache: Map<string, Operand>; trips: number }[] = [];
  private flops = 0;
  private hasReduce = false;

  constructor(private readonly spec: KernelSpec) {}

  run(): KernelIR {
    const root = this.spec.value;
    const body: Stmt[] = [];
    this.scopes.push({ stmts: body, cache: new Map(), trips: 1 });
    const idx = root.shape.map((size, d) => {
      if (size === 1) return iconst(0);
      const name = `i${d}`;
      const loop: Stmt = { kind: "loop", var: name, size, body: [] };
      this.emit(loop);
      this.scopes.push({ stmts: loop.body, cache: new Map(), trips: this.top.trips * size });
      return ivar(name, size);
    });
    const value = this.gen(root, idx, []);
    this.emit({ kind: "store", buf: 0, index: flatIndex(idx, root.shape), value, dtype: this.spec.buffers[0]!.dtype });
    const kind = this.hasReduce ? "r" : "E";
    return {
      name: [kind, ...root.shape.filter((s) => s !== 1)].join("_"),
      buffers: this.spec.buffers,
      body,
      outputShape: root.shape,
      flops: this.flops,
      parallel: parallelLoops(root.shape.filter((n) => n !== 1), this.flops + root.numel),
    };
  }

  private get top() {
    return this.scopes[this.scopes.length - 1]!;
  }

  private emit(stmt: Stmt): void {
    this.top.stmts.push(stmt);
  }

  private lookup(key: string): Operand | undefined {
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const hit = this.scopes[i]!.cache.get(key);
      if (hit) return hit;
    }
    return undefined;
  }

  private define(dtype: DType, expr: Expr, key: string): Operand {
    const name = `v${this.names++}`;
    this.emit({ kind: "def", name, dtype, expr });
    const operand: Operand = { kind: "val", name, dtype };
    this.top.cache.set(key, operand);
    if (expr.op !== "LOAD" && expr.op !== "VALID" && expr.op !== "INDEX" && expr.op !== "CAST" && expr.op !== "BITCAST") this.flops += this.top.trips;
    return operand;
  }

  /** The value of `node` at per-axis index `idx`, where `valid` holds (null: never valid, so 0). */
  private gen(node: UOp, idx: readonly Idx[], valid: readonly Bound[] | null): Operand {
    if (valid === null) return { kind: "lit", value: 0, dtype: node.dtype };
    const slot = this.spec.inputs.get(node);
    if (node.op === "CONST") return { kind: "lit", value: node.arg as number, dtype: node.dtype };
    const key = `${node.id}|${idx.map((i) => i.key).join(",")}|${condKey(valid)}`;
    const hit = this.lookup(key);
    if (hit) return hit;

    if (node.op === "INDEX") return this.define(node.dtype, { op: "INDEX", index: idx[0]! }, key);
    if (slot !== undefined) {
      return this.define(node.dtype, { op: "LOAD", buf: slot, index: flatIndex(idx, node.shape), valid }, key);
    }
    if (isElementwise(node.op)) {
      const srcs = node.src.map((s) => this.gen(s, idx, valid));
      return this.define(node.dtype, { op: node.op as AluOp, srcs }, key);
    }
    const src = node.src[0]!;
    switch (node.op) {
      case "RESHAPE":
        return this.gen(src, unflatIndex(flatIndex(idx, node.shape), src.shape), valid);
      case "PERMUTE": {
        const order = node.arg as number[];
        const srcIdx = new Array<Idx>(order.length);
        order.forEach((from, to) => (srcIdx[from] = idx[to]!));
        return this.gen(src, srcIdx, valid);
      }
      case "EXPAND":
        return this.gen(src, idx.map((i, d) => (src.shape[d] === 1 ? iconst(0) : i)), valid);
      case "SHRINK":
        return this.gen(src, idx.map((i, d) => iadd(i, iconst((node.arg as Pads)[d]![0]))), valid);
      case "FLIP":
        return this.gen(src, idx.map((i, d) => ((node.arg as boolean[])[d] ? iadd(iconst(src.shape[d]! - 1), imul(i, -1)) : i)), valid);
      case "PAD": {
        const pads = node.arg as Pads;
        let inside: Bound[] | null = [];
        const srcIdx = idx.map((i, d) => {
          const shifted = iadd(i, iconst(-pads[d]![0]));
          inside = andBound(inside, shifted, 0, src.shape[d]!);
          return shifted;
        });
        if (inside === null) return { kind: "lit", value: 0, dtype: node.dtype };
        const both = inside.length ? [...valid, ...(inside as Bound[])] : valid;
        const value = this.gen(src, srcIdx, both);
        if ((inside as Bound[]).length === 0) return value;
        // outside the source the padded value is 0: select with the bounds as a bool
        const isInside = this.boundsToBool(inside, key);
        return this.define(node.dtype, { op: "WHERE", srcs: [isInside, value, { kind: "lit", value: 0, dtype: node.dtype }] }, key);
      }
      case "REDUCE":
        return this.reduce(node, idx, valid, key);
      case "CONTIGUOUS":
        return this.gen(src, idx, valid);
      default:
        throw new Error(`lowerKernel: ${node.op} must be scheduled as its own step, not fused`);
    }
  }

  private reduce(node: UOp, idx: readonly Idx[], valid: readonly Bound[], key: string): Operand {
    this.hasReduce = true;
    const { op, axes } = node.arg as ReduceArg;
    const src = node.src[0]!;
    const acc = `acc${this.names++}`;
    this.emit({ kind: "acc", name: acc, dtype: node.dtype, op });
    const srcIdx = [...idx];
    const outer = this.scopes.length;
    for (const axis of axes) {
      const name = `r${this.loops++}`;
      const loop: Stmt = { kind: "loop", var: name, size: src.shape[axis]!, body: [] };
      this.emit(loop);
      this.scopes.push({ stmts: loop.body, cache: new Map(), trips: this.top.trips * src.shape[axis]! });
      srcIdx[axis] = ivar(name, src.shape[axis]!);
    }
    const value = this.gen(src, srcIdx, valid);
    this.emit({ kind: "update", name: acc, dtype: node.dtype, op, value });
    this.flops += this.top.trips;
    this.scopes.length = outer;
    const result: Operand = { kind: "val", name: acc, dtype: node.dtype };
    this.top.cache.set(key, result);
    return result;
  }

  /** lo <= e < hi for every bound, as a bool value. */
  private boundsToBool(bounds: readonly Bound[], key: string): Operand {
    return this.define(dtypes.bool, { op: "VALID", valid: bounds }, `${key}|inside`);
  }
}

/** Threads pay off above this much work (operations plus elements written). */
const PARALLEL_MIN_WORK = 1 << 16;

/** How many leading output loops to split across threads: enough for several chunks per thread. */
function parallelLoops(loopSizes: readonly number[], work: number): number {
  if (work < PARALLEL_MIN_WORK) return 0;
  let chunks = 1;
  for (let n = 0; n < loopSizes.length; n++) {
    chunks *= loopSizes[n]!;
    if (chunks >= 64) return n + 1;
  }
  return loopSizes.length;
}

/** Bytes a kernel reads and writes (each buffer once). */
export const estimateBytes = (k: KernelIR): number => k.buffers.reduce((s, b) => s + b.size * b.dtype.itemsize, 0);
