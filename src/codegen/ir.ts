// The low-level kernel form every renderer reads: typed values, loops, loads and stores
// with symbolic indices. One kernel writes one output buffer (slot 0).
import type { DType } from "../dtype.ts";
import type { BinaryOp, ReduceKind, UnaryOp } from "../uop.ts";
import type { Bound, Idx } from "../shape/symbolic.ts";

/** A value a statement reads: a named local or a literal, each with its dtype. */
export type Operand =
  | { readonly kind: "val"; readonly name: string; readonly dtype: DType }
  | { readonly kind: "lit"; readonly value: number; readonly dtype: DType };

export type AluOp = UnaryOp | BinaryOp | "WHERE" | "CAST" | "BITCAST";

export type Expr =
  /** buffer[index] where every bound of `valid` holds, else 0 (never reads out of range) */
  | { readonly op: "LOAD"; readonly buf: number; readonly index: Idx; readonly valid: readonly Bound[] }
  /** 1 where every bound holds, else 0 (a bool) */
  | { readonly op: "VALID"; readonly valid: readonly Bound[] }
  /** the index expression itself as an int32 value */
  | { readonly op: "INDEX"; readonly index: Idx }
  | { readonly op: AluOp; readonly srcs: readonly Operand[] };

export type Stmt =
  | { readonly kind: "def"; readonly name: string; readonly dtype: DType; readonly expr: Expr }
  /**
   * `serial`: a top-level loop whose trips run in order, each splitting the kernel's parallel loops inside it across
   * threads
   */
  | {
      readonly kind: "loop";
      readonly var: string;
      readonly size: number;
      readonly body: Stmt[];
      readonly serial?: boolean;
    }
  | { readonly kind: "acc"; readonly name: string; readonly dtype: DType; readonly op: ReduceKind }
  /**
   * `unfused`: a product added here stays a multiply and an add (a split sum's lanes: gcc vectorises their
   * loop, which it does not with a fused multiply-add in it); otherwise renderers may fuse them (register tiles).
   */
  | {
      readonly kind: "update";
      readonly name: string;
      readonly dtype: DType;
      readonly op: ReduceKind;
      readonly value: Operand;
      readonly unfused?: boolean;
    }
  /** buffer[index] = value, only where every bound of `valid` holds (a scatter's row from a runtime index) */
  | {
      readonly kind: "store";
      readonly buf: number;
      readonly index: Idx;
      readonly value: Operand;
      readonly dtype: DType;
      readonly valid?: readonly Bound[];
    };

export interface KernelBuffer {
  readonly dtype: DType;
  readonly size: number;
}

export interface KernelIR {
  /** e.g. `r_64_32` (r: has a reduce, E: elementwise) with the output shape. */
  readonly name: string;
  /** Slot 0 is the output; the rest are inputs, in the order `Program.run` takes them. */
  readonly buffers: readonly KernelBuffer[];
  readonly body: Stmt[];
  readonly outputShape: readonly number[];
  /** Arithmetic operations the kernel performs, for GFLOP/s. */
  readonly flops: number;
  /** How many leading (perfectly nested) output loops backends with threads split across them; 0: none. */
  readonly parallel: number;
  /** The options the kernel was lowered with (opts.ts `optsKey`); "cat" or "scatter" for those forms. */
  readonly opts: string;
}

/** The identity of each reduce: the accumulator's starting value. */
export const reduceIdentity = (op: ReduceKind): number => (op === "ADD" ? 0 : -Infinity);
