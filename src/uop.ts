// The lazy graph: immutable UOps (op, dtype, sources, arg) with their shape and device,
// deduplicated so that equal computations are one node.
import { dtypes, type DType } from "./dtype.ts";
import { TsgradError, arraysEqual, fmtShape, prod } from "./helpers.ts";
import type { Buffer } from "./device.ts";

export type UnaryOp = "NEG" | "RECIP" | "SQRT" | "EXP2" | "LOG2" | "SIN" | "TRUNC";
export type BinaryOp =
  | "ADD"
  | "MUL"
  | "IDIV"
  | "MOD"
  | "MAX"
  | "CMPLT"
  | "CMPNE"
  | "AND"
  | "OR"
  | "XOR"
  | "SHL"
  | "SHR";
/** DETACH: the identity view, where gradients stop. */
export type MovementOp = "RESHAPE" | "PERMUTE" | "EXPAND" | "PAD" | "SHRINK" | "FLIP" | "DETACH";
export type ReduceKind = "ADD" | "MAX";
export type Op =
  | "BUFFER"
  | "CONST"
  | "INDEX"
  | UnaryOp
  | BinaryOp
  | "WHERE"
  | "CAST"
  | "BITCAST"
  | "REDUCE"
  | MovementOp
  | "CONTIGUOUS"
  | "COPY"
  | "ASSIGN";

export const UNARY_OPS: ReadonlySet<Op> = new Set<Op>(["NEG", "RECIP", "SQRT", "EXP2", "LOG2", "SIN", "TRUNC"]);
export const BINARY_OPS: ReadonlySet<Op> = new Set<Op>([
  "ADD",
  "MUL",
  "IDIV",
  "MOD",
  "MAX",
  "CMPLT",
  "CMPNE",
  "AND",
  "OR",
  "XOR",
  "SHL",
  "SHR",
]);
export const MOVEMENT_OPS: ReadonlySet<Op> = new Set<Op>([
  "RESHAPE",
  "PERMUTE",
  "EXPAND",
  "PAD",
  "SHRINK",
  "FLIP",
  "DETACH",
]);
export const isElementwise = (op: Op): boolean =>
  UNARY_OPS.has(op) || BINARY_OPS.has(op) || op === "WHERE" || op === "CAST" || op === "BITCAST";

/** The argument each op carries. */
export interface ReduceArg {
  op: ReduceKind;
  axes: number[];
}
export type Pads = [number, number][];

let nextId = 0;
const live = new Map<string, WeakRef<UOp>>();
const collected = new FinalizationRegistry<string>((key) => {
  const ref = live.get(key);
  if (ref && ref.deref() === undefined) live.delete(key);
});

/** One node of the lazy graph. Build them with `UOp.make` (or the helpers below) so equal nodes are shared. */
export class UOp {
  readonly id = nextId++;
  private constructor(
    readonly op: Op,
    readonly dtype: DType,
    readonly src: readonly UOp[],
    readonly arg: unknown,
    readonly shape: readonly number[],
    readonly device: string,
  ) {}

  get numel(): number {
    return prod(this.shape as number[]);
  }

  static make(op: Op, dtype: DType, src: readonly UOp[], arg: unknown, shape: readonly number[], device: string): UOp {
    const key = `${op}|${dtype.name}|${device}|${src.map((s) => s.id).join(",")}|${argKey(arg)}|${shape.join(",")}`;
    const hit = live.get(key)?.deref();
    if (hit) return hit;
    const node = new UOp(op, dtype, src, arg, shape, device);
    live.set(key, new WeakRef(node));
    collected.register(node, key);
    return node;
  }

  static buffer(buffer: Buffer): UOp {
    return UOp.make("BUFFER", buffer.dtype, [], buffer, [buffer.size], buffer.device);
  }

  static const(value: number, dtype: DType, device: string): UOp {
    return UOp.make("CONST", dtype, [], value, [], device);
  }

  /** [0, 1, ..., n-1] as int32, computed in the kernel that reads it (arange, RNG counters, one-hot). */
  static index(n: number, device: string): UOp {
    return UOp.make("INDEX", dtypes.int32, [], undefined, [n], device);
  }

  alu(op: UnaryOp | BinaryOp | "WHERE", ...others: UOp[]): UOp {
    for (const other of others) {
      if (!arraysEqual(other.shape, this.shape))
        throw new TsgradError(`${op}: shapes ${fmtShape(this.shape)} and ${fmtShape(other.shape)} differ`);
      if (other.device !== this.device)
        throw new TsgradError(`${op}: devices ${this.device} and ${other.device} differ; copy with to()`);
    }
    // comparisons give bool; WHERE takes its dtype from the values; everything else keeps the operands' dtype
    const dtype = op === "CMPLT" || op === "CMPNE" ? dtypes.bool : op === "WHERE" ? others[0]!.dtype : this.dtype;
    return UOp.make(op, dtype, [this, ...others], undefined, this.shape, this.device);
  }

  cast(dtype: DType): UOp {
    if (dtype === this.dtype) return this;
    return undoWidening(this, dtype) ?? UOp.make("CAST", dtype, [this], undefined, this.shape, this.device);
  }

  bitcast(dtype: DType): UOp {
    if (dtype.itemsize !== this.dtype.itemsize)
      throw new TsgradError(`bitcast from ${this.dtype.name} to ${dtype.name}: item sizes differ`);
    return dtype === this.dtype ? this : UOp.make("BITCAST", dtype, [this], undefined, this.shape, this.device);
  }

  reduce(op: ReduceKind, axes: number[]): UOp {
    const sorted = [...new Set(axes)].filter((a) => this.shape[a] !== 1).sort((a, b) => a - b);
    if (sorted.length === 0) return this;
    const shape = this.shape.map((s, i) => (sorted.includes(i) ? 1 : s));
    return UOp.make("REDUCE", this.dtype, [this], { op, axes: sorted } satisfies ReduceArg, shape, this.device);
  }

  reshape(shape: readonly number[]): UOp {
    if (arraysEqual(shape, this.shape)) return this;
    if (prod(shape as number[]) !== this.numel)
      throw new TsgradError(`reshape from ${fmtShape(this.shape)} to ${fmtShape(shape)}: element counts differ`);
    // reshapes are not merged here: a reshaped tensor may be a gradient target in its own right
    return UOp.make("RESHAPE", this.dtype, [this], [...shape], shape, this.device);
  }

  permute(order: readonly number[]): UOp {
    if (order.every((a, i) => a === i)) return this;
    return UOp.make(
      "PERMUTE",
      this.dtype,
      [this],
      [...order],
      order.map((a) => this.shape[a]!),
      this.device,
    );
  }

  expand(shape: readonly number[]): UOp {
    if (arraysEqual(shape, this.shape)) return this;
    return UOp.make("EXPAND", this.dtype, [this], [...shape], shape, this.device);
  }

  pad(pads: Pads): UOp {
    if (pads.every(([b, a]) => b === 0 && a === 0)) return this;
    return UOp.make(
      "PAD",
      this.dtype,
      [this],
      pads,
      this.shape.map((s, i) => s + pads[i]![0] + pads[i]![1]),
      this.device,
    );
  }

  shrink(bounds: Pads): UOp {
    if (bounds.every(([b, e], i) => b === 0 && e === this.shape[i])) return this;
    return UOp.make(
      "SHRINK",
      this.dtype,
      [this],
      bounds,
      bounds.map(([b, e]) => e - b),
      this.device,
    );
  }

  flip(axes: readonly boolean[]): UOp {
    if (!axes.some(Boolean)) return this;
    return UOp.make("FLIP", this.dtype, [this], [...axes], this.shape, this.device);
  }

  /** The same values, a node of its own that gradients do not pass (a view: no copy, no kernel). */
  detach(): UOp {
    return UOp.make("DETACH", this.dtype, [this], undefined, this.shape, this.device);
  }

  contiguous(tag?: number): UOp {
    return UOp.make("CONTIGUOUS", this.dtype, [this], tag, this.shape, this.device);
  }

  copyTo(device: string): UOp {
    return device === this.device ? this : UOp.make("COPY", this.dtype, [this], device, this.shape, device);
  }

  /** Writes `value` into this node's buffer; this must be a realized buffer (optionally reshaped). */
  assign(value: UOp): UOp {
    return UOp.make("ASSIGN", this.dtype, [this, value], undefined, this.shape, this.device);
  }

  /** The buffer behind this node when it is a buffer or a reshape of one. */
  get baseBuffer(): Buffer | undefined {
    let base: UOp = this;
    while (base.op === "RESHAPE" || base.op === "DETACH") base = base.src[0]!;
    return base.op === "BUFFER" ? (base.arg as Buffer) : undefined;
  }

  /** Every node reachable from `roots`, sources before users. */
  static toposort(roots: readonly UOp[], stopAt?: (u: UOp) => boolean): UOp[] {
    const order: UOp[] = [];
    const seen = new Set<UOp>();
    const stack: [UOp, boolean][] = roots.map((r) => [r, false]);
    while (stack.length) {
      const [node, expanded] = stack.pop()!;
      if (expanded) {
        order.push(node);
        continue;
      }
      if (seen.has(node)) continue;
      seen.add(node);
      stack.push([node, true]);
      if (stopAt?.(node)) continue;
      for (let i = node.src.length - 1; i >= 0; i--) if (!seen.has(node.src[i]!)) stack.push([node.src[i]!, false]);
    }
    return order;
  }

  /**
   * This graph with each node of `replacements` swapped for its replacement, rebuilt only along the paths that
   * reach one (shared nodes once); below this node, the walk stops at nodes `keep` holds (a kernel's inputs),
   * which stay as they are.
   */
  replaceNodes(replacements: ReadonlyMap<UOp, UOp>, keep: (u: UOp) => boolean): UOp {
    const rebuilt = new Map<UOp, UOp>();
    const rebuild = (n: UOp, top: boolean): UOp => {
      if (!top && keep(n)) return n;
      const replacement = replacements.get(n);
      if (replacement) return replacement;
      let done = rebuilt.get(n);
      if (!done) {
        const src = n.src.map((s) => rebuild(s, false));
        done = src.every((s, i) => s === n.src[i]) ? n : UOp.make(n.op, n.dtype, src, n.arg, n.shape, n.device);
        rebuilt.set(n, done);
      }
      return done;
    };
    return rebuild(this, true);
  }

  toString(): string {
    return `UOp(${this.op} ${this.dtype.name} ${fmtShape(this.shape)} on ${this.device})`;
  }
}

function argKey(arg: unknown): string {
  if (arg === undefined) return "";
  if (typeof arg === "object" && arg !== null && "version" in arg) {
    const buffer = arg as Buffer;
    return `buf${buffer.id}v${buffer.version}`;
  }
  if (typeof arg === "number") return Object.is(arg, -0) ? "-0" : String(arg);
  return JSON.stringify(arg);
}

/**
 * `u` cast to `target` without the cast, where `u` is a float widened from `target` (a 16-bit value in a
 * float32 sum), seen through views: widening a float is exact, so casting back is the identity (the
 * gradient of a float32 accumulation of 16-bit products comes back to 16 bits this way).
 */
function undoWidening(u: UOp, target: DType): UOp | undefined {
  if (MOVEMENT_OPS.has(u.op)) {
    const inner = undoWidening(u.src[0]!, target);
    return inner && UOp.make(u.op, target, [inner], u.arg, u.shape, u.device);
  }
  return isWideningFloatCast(u) && u.src[0]!.dtype === target ? u.src[0] : undefined;
}

/** A cast from a float to a wider float (exact). */
export const isWideningFloatCast = (n: UOp): boolean =>
  n.op === "CAST" &&
  n.dtype.kind === "float" &&
  n.src[0]!.dtype.kind === "float" &&
  n.dtype.itemsize > n.src[0]!.dtype.itemsize;

/** `n` under any casts. */
export const skipCasts = (n: UOp): UOp => (n.op === "CAST" ? skipCasts(n.src[0]!) : n);

/** A product of two broadcast operands (through casts): what a matmul sums, and each term of its gradient. */
export const isBroadcastProduct = (n: UOp): boolean => {
  const product = skipCasts(n);
  return product.op === "MUL" && product.src.every((s) => skipCasts(s).op === "EXPAND");
};

/** A sum of products of two broadcast operands (through casts): a matmul. */
export const isMatmul = (reduce: UOp): boolean =>
  (reduce.arg as ReduceArg).op === "ADD" && isBroadcastProduct(reduce.src[0]!);

/** A cast from a float to a narrower float (rounds). */
export const isNarrowingFloatCast = (n: UOp): boolean =>
  n.op === "CAST" &&
  n.dtype.kind === "float" &&
  n.src[0]!.dtype.kind === "float" &&
  n.dtype.itemsize < n.src[0]!.dtype.itemsize;
