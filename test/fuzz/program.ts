// A fuzz program: a small tensor graph as plain JSON (nodes in order, the last one the output), the rules that
// give each node's shape and dtype (tsgrad's documented semantics, written out independently of tsgrad), and
// the seeded generator that builds random ones. tsgrad (runner.ts) and numpy (numpy_ref.py) both run this JSON.

export type DT = "bool" | "int32" | "float16" | "float32";

export type BinaryFn = "add" | "sub" | "mul" | "div" | "maximum" | "minimum" | "lt" | "eq";
export type UnaryFn = "exp" | "logAbs1" | "sqrtAbs" | "neg";
export type ReduceFn = "sum" | "max" | "min" | "mean";
/** Tensor.pad's modes other than "constant" (numpy's reflect, edge and wrap). */
export type PadMode = "reflect" | "replicate" | "circular";
/** Activation methods of Tensor (`param`: softplus's beta, elu's alpha, leakyRelu's slope, hardtanh's [min, max]). */
export type ActFn =
  | "sigmoid"
  | "tanh"
  | "relu"
  | "silu"
  | "gelu"
  | "geluTanh"
  | "softplus"
  | "elu"
  | "selu"
  | "leakyRelu"
  | "relu6"
  | "hardtanh"
  | "hardsigmoid"
  | "hardswish"
  | "mish"
  | "logsigmoid";
export type InterpolateMode = "nearest" | "linear" | "bilinear";
/** One entry of Tensor.index: a number picks, [start, stop, step] slices (null: default), null adds an axis. */
export type IndexEntry = number | [number | null, number | null, number | null] | null;

export type Node =
  | { op: "input"; data: number[]; shape: number[]; dtype: DT }
  | { op: "binary"; fn: BinaryFn; args: number[]; scalar?: number; operand: DT; shape: number[]; dtype: DT }
  /** args: [cond, a?, b?]; a branch given as a number sits in `a` or `b` instead. */
  | { op: "where"; args: number[]; a?: number; b?: number; shape: number[]; dtype: DT }
  | { op: "unary"; fn: UnaryFn; args: number[]; shape: number[]; dtype: DT }
  | { op: "cast"; args: number[]; shape: number[]; dtype: DT }
  | { op: "reshape"; args: number[]; to: number[]; shape: number[]; dtype: DT }
  | { op: "permute"; args: number[]; order: number[]; shape: number[]; dtype: DT }
  | { op: "transpose"; args: number[]; dims: [number, number]; shape: number[]; dtype: DT }
  | { op: "expand"; args: number[]; to: number[]; shape: number[]; dtype: DT }
  /** `mode` absent: constant `value` (negative pads crop); a mode: pieces of the tensor laid around it (value 0). */
  | { op: "pad"; args: number[]; pads: [number, number][]; value: number; mode?: PadMode; shape: number[]; dtype: DT }
  | { op: "shrink"; args: number[]; bounds: [number, number][]; shape: number[]; dtype: DT }
  | { op: "flip"; args: number[]; axes: number[]; shape: number[]; dtype: DT }
  | { op: "index"; args: number[]; spec: IndexEntry[]; shape: number[]; dtype: DT }
  | { op: "cat"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "stack"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "repeat"; args: number[]; reps: number[]; shape: number[]; dtype: DT }
  | { op: "reduce"; fn: ReduceFn; args: number[]; axis: number[] | null; keepdim: boolean; shape: number[]; dtype: DT }
  | { op: "matmul"; args: number[]; shape: number[]; dtype: DT }
  | { op: "cumsum"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "gather"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "cummax"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "softmax"; fn: "softmax" | "logSoftmax"; args: number[]; axis: number; shape: number[]; dtype: DT }
  | { op: "logsumexp"; args: number[]; axis: number | number[] | null; keepdim: boolean; shape: number[]; dtype: DT }
  /** sort(): its values or its indices (stable: ties lowest index first, descending too). */
  | {
      op: "sort";
      args: number[];
      axis: number;
      descending: boolean;
      take: "values" | "indices";
      shape: number[];
      dtype: DT;
    }
  | { op: "argsort"; args: number[]; axis: number; descending: boolean; shape: number[]; dtype: DT }
  | {
      op: "topk";
      args: number[];
      k: number;
      axis: number;
      largest: boolean;
      take: "values" | "indices";
      shape: number[];
      dtype: DT;
    }
  /** Tensor.einsum(formula, a, b) with two operands (args: [a, b]). */
  | { op: "einsum"; args: number[]; formula: string; shape: number[]; dtype: DT }
  | { op: "act"; fn: ActFn; args: number[]; param?: number | [number, number]; shape: number[]; dtype: DT }
  /** x.interpolate({ mode, size | scaleFactor, alignCorners }) over x's axes from the third on. */
  | {
      op: "interpolate";
      args: number[];
      mode: InterpolateMode;
      size?: number | number[];
      scaleFactor?: number | number[];
      alignCorners?: boolean;
      shape: number[];
      dtype: DT;
    }
  /** x.conv2d(w, { bias, stride, padding, dilation, groups }); args: [x, w] or [x, w, bias]. */
  | {
      op: "conv2d";
      args: number[];
      stride: number | [number, number];
      padding: number | [number, number];
      dilation: number | [number, number];
      groups: number;
      shape: number[];
      dtype: DT;
    }
  | { op: "contiguous"; args: number[]; shape: number[]; dtype: DT }
  /** `realize()` on the tensor mid-program: it becomes a view of its buffer, and later ops read that. */
  | { op: "realize"; args: number[]; shape: number[]; dtype: DT };

export type Op = Node["op"];

export interface Program {
  seed: number;
  /** Gradient mode: float32 inputs require grad and the loss is sum(out * weights). */
  grad: boolean;
  nodes: Node[];
  /** Grid values of the output's shape (gradient mode only). */
  weights?: number[];
}

export const argsOf = (n: Node): number[] => (n.op === "input" ? [] : n.args);
export const outputOf = (p: Program): Node => p.nodes[p.nodes.length - 1]!;
export const numel = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);
export const isFloatDT = (d: DT): boolean => d === "float16" || d === "float32";

// ---------------------------------------------------------------- tsgrad's dtype and shape rules

const ORDER: readonly DT[] = ["bool", "int32", "float16", "float32"];
/** numpy's promotion restricted to these four: bool < int32 < float16 < float32. */
export const promote = (...ds: DT[]): DT => ds.reduce((a, b) => (ORDER.indexOf(a) >= ORDER.indexOf(b) ? a : b));
/** What `float()` gives: floats stay, the rest become float32. */
export const floatOf = (d: DT): DT => (isFloatDT(d) ? d : "float32");
/** What `sum` (and cumsum, matmul) give: bool and ints accumulate in int32, 16-bit floats come back as themselves. */
export const sumOf = (d: DT): DT => (d === "bool" ? "int32" : d);
/**
 * A JS number beside a tensor: the tensor's dtype, unless an integer tensor needs a float (bool beside a number:
 * int32).
 */
export function scalarDtype(tensor: DT, value: number): DT {
  if (!isFloatDT(tensor) && !Number.isInteger(value)) return "float32";
  return tensor === "bool" ? "int32" : tensor;
}
/**
 * `where(cond, a, b)` with one branch a number: the tensor branch's dtype, or float32 for an integer tensor and a
 * fraction.
 */
export const whereScalarDtype = (tensor: DT, value: number): DT =>
  !isFloatDT(tensor) && !Number.isInteger(value) ? "float32" : tensor;

export function broadcast(a: readonly number[], b: readonly number[]): number[] | null {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1,
      y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1) return null;
    out.push(x === 1 ? y : x);
  }
  return out;
}

/** Python's slice.indices and length: what numpy's `a[start:stop:step]` keeps of an axis of `size`. */
export function sliceLength(size: number, [start, stop, step]: [number | null, number | null, number | null]): number {
  const s = step ?? 1;
  const clamp = (v: number | null, fallback: number, lo: number, hi: number): number => {
    if (v === null) return fallback;
    const w = v < 0 ? v + size : v;
    return Math.min(hi, Math.max(lo, w));
  };
  const [lo, hi] = s > 0 ? [0, size] : [-1, size - 1];
  const b = clamp(start, s > 0 ? 0 : size - 1, lo, hi);
  const e = clamp(stop, s > 0 ? size : -1, lo, hi);
  return s > 0 ? Math.max(0, Math.ceil((e - b) / s)) : Math.max(0, Math.ceil((b - e) / -s));
}

// ---------------------------------------------------------------- the generator

/** mulberry32: a small deterministic PRNG (one seed, one program). */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = (seed * 0x9e3779b1 + 0x6d2b79f5) >>> 0;
  }
  next(): number {
    let t = (this.state = (this.state + 0x6d2b79f5) >>> 0);
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
  weighted<T>(table: readonly (readonly [T, number])[]): T {
    let r = this.next() * table.reduce((s, [, w]) => s + w, 0);
    for (const [item, w] of table) if ((r -= w) < 0) return item;
    return table[table.length - 1]![0];
  }
  shuffle<T>(items: T[]): T[] {
    for (let i = items.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [items[i], items[j]] = [items[j]!, items[i]!];
    }
    return items;
  }
}

/**
 * Bugs this fuzzer found that are not fixed yet. The generator steers around them (so that other bugs show)
 * unless asked to include them (`--include-known`); delete an entry once its bug is fixed.
 */
export const KNOWN_BUGS = {
  // fixed (the generator makes these patterns again): x.sub(-c) rendering --c; abs of a bool; gather of a bool;
  // cat(...).contiguous() read back; the CPU miscompile (gcc 12.2); a one-hot sum's gradient through a transpose;
  // sigmoid's (and tanh's, silu's) NaN gradient far below zero, where exp(-x) overflowed; topk with k >= 49 (a cat of
  // more reduces than a kernel takes inputs failed to lower); interpolate spreading NaN from a non-finite input
  negNegativeConstant: false,
  absOfBool: false,
  gatherOfBool: false,
  contiguousOfCat: false,
  /**
   * By design, not a bug: `y.realize()` swaps y's graph for its buffer, so gradients do not flow through y
   * (`loss.realize(); loss.backward()` is refused by name); the gradient mode keeps realize() out.
   */
  realizeCutsGradient: true,
  catOfManyReduces: false,
};

export interface GenerateOptions {
  /** Gradient mode: float32 and no float16, inputs off the grid, a float32 output, weights for the loss. */
  grad?: boolean;
  /** Generate the patterns of KNOWN_BUGS too. */
  includeKnown?: boolean;
  /** Largest axis of a new input (7: the sizes 1-7 the fuzzer is specified for; more reaches other kernel forms). */
  maxSize?: number;
  /**
   * The first generator's op families only (no pad modes, softmax, sorts, einsum, activations, interpolate, conv2d):
   * with it a seed gives the very program it gave before those were added (graph_fuzz.test.ts's bug seeds).
   */
  classic?: boolean;
}

/**
 * Largest node the generator builds, and largest input (finite differences cost four runs an input element), at axes up
 * to 7.
 */
const MAX_NUMEL = 512;
const MAX_INPUT = { forward: 128, grad: 48 };
const DEFAULT_MAX_SIZE = 7;

type Maker = (g: ProgramBuilder) => number | null;

/** Whether a node's float result is rounded from grid values (sums and products of a few grid values are exact). */
function roundsItself(n: Node): boolean {
  switch (n.op) {
    case "unary":
      return n.fn !== "neg";
    case "binary":
      return n.fn === "div";
    case "reduce":
      return n.fn === "mean";
    case "softmax":
    case "logsumexp":
      return true;
    case "act":
      return !["relu", "relu6", "hardtanh"].includes(n.fn);
    case "interpolate":
      return n.mode !== "nearest";
    default:
      return false;
  }
}

/** Which op families a chain step picks from, and how often: the first generator's (`classic`). */
const CLASSIC_STEPS: readonly (readonly [Maker, number])[] = [
  [(g) => g.binary(), 22],
  [(g) => g.where(), 6],
  [(g) => g.unary(), 10],
  [(g) => g.cast(), 6],
  [(g) => g.reshape(), 6],
  [(g) => g.permute(), 4],
  [(g) => g.transpose(), 3],
  [(g) => g.expand(), 4],
  [(g) => g.pad(), 5],
  [(g) => g.shrink(), 4],
  [(g) => g.flip(), 3],
  [(g) => g.index(), 4],
  [(g) => g.cat(), 4],
  [(g) => g.stack(), 3],
  [(g) => g.repeat(), 3],
  [(g) => g.reduce(), 10],
  [(g) => g.matmul(), 6],
  [(g) => g.cumsum(), 3],
  [(g) => g.gather(), 3],
  [(g) => g.contiguous(), 6],
  [(g) => g.realize(), 3],
];

/**
 * The classic families and the newer composite ops (src/tensor/scan.ts, sort.ts, einsum.ts, upsample.ts, windows.ts).
 */
const STEPS: readonly (readonly [Maker, number])[] = [
  ...CLASSIC_STEPS,
  [(g) => g.padMode(), 4],
  [(g) => g.softmax(), 3],
  [(g) => g.logsumexp(), 2],
  [(g) => g.cummax(), 2],
  [(g) => g.sort(), 3],
  [(g) => g.topk(), 2],
  [(g) => g.einsum(), 4],
  [(g) => g.act(), 8],
  [(g) => g.interpolate(), 2],
  [(g) => g.conv2d(), 3],
];

class ProgramBuilder {
  readonly nodes: Node[] = [];
  /**
   * Nodes whose float16 values tsgrad may or may not have rounded (a 16-bit result computed in float32 is rounded
   * only where it is stored, and kernel boundaries are the scheduler's choice): compared with a 16-bit tolerance,
   * and never fed to a comparison or an integer cast, where a rounding would flip the answer.
   */
  readonly fuzzy = new Set<number>();
  /**
   * Float nodes whose values carry rounding that depends on the order of operations (a transcendental, a division, a
   * softmax; in gradient mode every float, its inputs being off the grid): values equal in exact arithmetic may differ
   * by an ulp, differently in tsgrad and numpy, so sort and topk indices (which order ties by position) never read
   * them.
   */
  readonly inexact = new Set<number>();
  cur = 0;

  /** Size limits scale with the square of the largest axis. */
  readonly scale: number;

  constructor(
    readonly rng: Rng,
    readonly grad: boolean,
    readonly includeKnown: boolean,
    readonly maxSize: number,
  ) {
    this.scale = Math.max(1, (maxSize / DEFAULT_MAX_SIZE) ** 2);
  }

  /** Whether to steer around a known bug. */
  avoid(bug: keyof typeof KNOWN_BUGS): boolean {
    return KNOWN_BUGS[bug] && !this.includeKnown;
  }

  get node(): Node {
    return this.nodes[this.cur]!;
  }

  push(node: Node, fuzzy = false): number | null {
    if (numel(node.shape) > (this.grad ? MAX_NUMEL / 2 : MAX_NUMEL) * this.scale || node.shape.length > 4) return null;
    this.nodes.push(node);
    const id = this.nodes.length - 1;
    const args = argsOf(node);
    if (fuzzy || args.some((a) => this.fuzzy.has(a))) this.fuzzy.add(id);
    if (isFloatDT(node.dtype) && (this.grad || roundsItself(node) || args.some((a) => this.inexact.has(a))))
      this.inexact.add(id);
    return id;
  }

  /** Pushes `node`; a float16 result of arithmetic is fuzzy (see `fuzzy`). */
  pushArith(node: Node): number | null {
    return this.push(node, node.dtype === "float16");
  }

  randomDtype(): DT {
    return this.grad
      ? this.rng.weighted<DT>([
          ["float32", 7],
          ["int32", 2],
          ["bool", 1],
        ])
      : this.rng.weighted<DT>([
          ["float32", 5],
          ["int32", 2],
          ["bool", 1],
          ["float16", 2],
        ]);
  }

  randomShape(): number[] {
    const rank = this.rng.int(1, 4);
    for (;;) {
      const shape = Array.from({ length: rank }, () => (this.rng.chance(0.25) ? 1 : this.rng.int(1, this.maxSize)));
      if (numel(shape) <= (this.grad ? MAX_INPUT.grad : MAX_INPUT.forward) * this.scale) return shape;
    }
  }

  /** A float from the 1/8 grid (exact in float16, and sums and products of a few stay exact in float32). */
  gridValue(nonzero = false): number {
    for (;;) {
      const v = this.rng.int(-24, 24) / 8;
      if (!nonzero || v !== 0) return v;
    }
  }

  value(dtype: DT, nonzero = false): number {
    if (dtype === "bool") return nonzero ? 1 : this.rng.int(0, 1);
    if (dtype === "int32") {
      for (;;) {
        const v = this.rng.int(-5, 5);
        if (!nonzero || v !== 0) return v;
      }
    }
    // gradient mode draws off the grid so that ties (max, abs at 0) have probability zero
    if (this.grad) {
      for (;;) {
        const v = Math.fround(this.rng.next() * 4 - 2);
        if (!nonzero || Math.abs(v) > 0.05) return v;
      }
    }
    return this.gridValue(nonzero);
  }

  input(shape: readonly number[], dtype: DT, nonzero = false): number {
    const n = numel(shape);
    const data = Array.from({ length: n }, () => this.value(dtype, nonzero));
    this.nodes.push({ op: "input", data, shape: [...shape], dtype });
    return this.nodes.length - 1;
  }

  /** A shape that broadcasts with `shape`: trailing axes, each kept or 1 (rarely a size where `shape` has 1). */
  partnerShape(shape: readonly number[]): number[] {
    const rank = this.rng.int(Math.min(1, shape.length), shape.length);
    return shape.slice(shape.length - rank).map((s) => {
      if (s === 1 && this.rng.chance(0.15)) return this.rng.int(2, 4);
      return this.rng.chance(0.3) ? 1 : s;
    });
  }

  /** An earlier node satisfying `ok`, or undefined. */
  fromPool(ok: (n: Node, id: number) => boolean): number | undefined {
    const candidates = this.nodes.flatMap((n, id) => (ok(n, id) ? [id] : []));
    return candidates.length > 0 ? this.rng.pick(candidates) : undefined;
  }

  /**
   * A second operand broadcastable with the current node: an earlier node (a diamond) or a new input (`nonzero`:
   * without zeros, for a divisor; an earlier node may hold some, and numpy skips a program where x / 0 decides).
   */
  partner(dtypeHint: DT, { nonzero = false, exact = false } = {}): number {
    const shape = this.node.shape;
    if (this.rng.chance(0.35)) {
      const id = this.fromPool(
        (n, i) =>
          broadcast(n.shape, shape) !== null &&
          numel(broadcast(n.shape, shape)!) <= MAX_NUMEL * this.scale &&
          !(exact && this.fuzzy.has(i)),
      );
      if (id !== undefined) return id;
    }
    const dtype = this.rng.chance(0.6) ? dtypeHint : this.randomDtype();
    return this.input(this.partnerShape(shape), dtype === "float16" && this.grad ? "float32" : dtype, nonzero);
  }

  // ---- elementwise

  binary(): number | null {
    const fn = this.rng.weighted<BinaryFn>([
      ["add", 4],
      ["sub", 3],
      ["mul", 4],
      ["div", 2],
      ["maximum", 2],
      ["minimum", 2],
      ["lt", 2],
      ["eq", 1],
    ]);
    const a = this.cur,
      an = this.node;
    const compare = fn === "lt" || fn === "eq";
    if (compare && this.fuzzy.has(a)) return null;
    const resultDtype = (operand: DT): DT => (compare ? "bool" : fn === "div" ? floatOf(operand) : operand);
    if (this.rng.chance(0.3)) {
      // a JS number: integers beside integer tensors mostly, fractions sometimes (then the result is float)
      let scalar =
        isFloatDT(an.dtype) || this.rng.chance(0.2) ? this.gridValue(fn === "div") : this.value("int32", fn === "div");
      if (an.dtype === "bool" && fn === "sub") return null;
      if ((fn === "sub" || fn === "minimum") && scalar < 0 && this.avoid("negNegativeConstant")) scalar = -scalar;
      const operand = promote(an.dtype, scalarDtype(an.dtype, scalar));
      return this.pushArith({
        op: "binary",
        fn,
        args: [a],
        scalar,
        operand,
        shape: [...an.shape],
        dtype: resultDtype(operand),
      });
    }
    const b = this.partner(an.dtype, { nonzero: fn === "div", exact: compare });
    const bn = this.nodes[b]!;
    const operand = promote(an.dtype, bn.dtype);
    // bool - bool is not subtraction in numpy (an error) nor tsgrad (a | !b)
    if (fn === "sub" && operand === "bool") return null;
    const shape = broadcast(an.shape, bn.shape);
    if (!shape) return null;
    return this.pushArith({ op: "binary", fn, args: [a, b], operand, shape, dtype: resultDtype(operand) });
  }

  where(): number | null {
    const an = this.node;
    const branch = (): { id?: number; value?: number } => {
      if (this.rng.chance(0.3))
        return {
          value:
            an.dtype === "bool"
              ? this.rng.int(0, 1)
              : this.value(isFloatDT(an.dtype) ? an.dtype : this.rng.pick<DT>(["int32", "float32"])),
        };
      return { id: this.partner(an.dtype) };
    };
    let cond: number, x: { id?: number; value?: number }, y: { id?: number; value?: number };
    if (this.rng.chance(0.4) && !this.fuzzy.has(this.cur)) {
      cond = this.cur;
      [x, y] = [branch(), branch()];
      if (x.id === undefined && y.id === undefined) x = { id: this.cur };
    } else {
      cond = this.rng.chance(0.5)
        ? this.input(this.partnerShape(an.shape), "bool")
        : this.partner("bool", { exact: true });
      x = { id: this.cur };
      y = branch();
      if (this.rng.chance(0.5)) [x, y] = [y, x];
    }
    const ids = [cond, x.id, y.id].filter((i): i is number => i !== undefined);
    const shape = ids.reduce<number[] | null>((s, i) => (s ? broadcast(s, this.nodes[i]!.shape) : null), []);
    if (!shape || this.fuzzy.has(cond)) return null;
    const [xd, yd] = [x, y].map((v) => (v.id !== undefined ? this.nodes[v.id]!.dtype : undefined));
    const dtype = xd && yd ? promote(xd, yd) : xd ? whereScalarDtype(xd, y.value!) : whereScalarDtype(yd!, x.value!);
    // a number beside a bool branch is cast to bool: 0 or 1 only, so that the cast does not hide in a wider value
    if (dtype === "bool" && [x.value, y.value].some((v) => v !== undefined && v !== 0 && v !== 1)) return null;
    return this.push({ op: "where", args: ids, a: x.value, b: y.value, shape, dtype });
  }

  unary(): number | null {
    const fn = this.rng.weighted<UnaryFn>([
      ["exp", 3],
      ["logAbs1", 3],
      ["sqrtAbs", 3],
      ["neg", 3],
    ]);
    const an = this.node;
    if ((fn === "logAbs1" || fn === "sqrtAbs") && an.dtype === "bool" && this.avoid("absOfBool")) return null;
    const dtype = fn === "neg" ? an.dtype : floatOf(an.dtype);
    const node: Node = { op: "unary", fn, args: [this.cur], shape: [...an.shape], dtype };
    return fn === "neg" ? this.push(node) : this.pushArith(node);
  }

  cast(): number | null {
    const an = this.node;
    const to = this.rng.pick<DT>(this.grad ? ["float32", "int32", "bool"] : ["float32", "int32", "float16", "bool"]);
    if (to === an.dtype) return null;
    if (isFloatDT(an.dtype) && !isFloatDT(to) && this.fuzzy.has(this.cur)) return null;
    return this.push({ op: "cast", args: [this.cur], shape: [...an.shape], dtype: to });
  }

  // ---- movement

  reshape(): number | null {
    const an = this.node;
    let rest = numel(an.shape);
    const rank = this.rng.int(1, 4);
    const to: number[] = [];
    for (let i = 0; i < rank - 1; i++) {
      const divisors = Array.from({ length: rest }, (_, d) => d + 1).filter((d) => rest % d === 0 && d <= 8);
      const d = this.rng.pick(divisors);
      to.push(d);
      rest /= d;
    }
    to.push(rest);
    this.rng.shuffle(to);
    // -1 for one axis now and then: tsgrad works it out
    const spec = this.rng.chance(0.2) ? to.map((s, i) => (i === 0 ? -1 : s)) : to;
    if (spec.includes(-1) && numel(to) === 0) return null;
    return this.push({ op: "reshape", args: [this.cur], to: spec, shape: to, dtype: an.dtype });
  }

  permute(): number | null {
    const an = this.node;
    if (an.shape.length < 2) return null;
    const order = this.rng.shuffle(an.shape.map((_, i) => i));
    return this.push({
      op: "permute",
      args: [this.cur],
      order,
      shape: order.map((i) => an.shape[i]!),
      dtype: an.dtype,
    });
  }

  transpose(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r < 2) return null;
    const d0 = this.rng.int(0, r - 1);
    let d1 = this.rng.int(0, r - 2);
    if (d1 >= d0) d1++;
    const shape = [...an.shape];
    [shape[d0], shape[d1]] = [shape[d1]!, shape[d0]!];
    // negative axes half the time
    const dims: [number, number] = this.rng.chance(0.5) ? [d0 - r, d1 - r] : [d0, d1];
    return this.push({ op: "transpose", args: [this.cur], dims, shape, dtype: an.dtype });
  }

  expand(): number | null {
    const an = this.node;
    const lead = this.rng.int(0, Math.max(0, 4 - an.shape.length) > 0 ? 1 : 0);
    const ones = an.shape.some((s) => s === 1);
    if (!ones && lead === 0) return null;
    const shape = [
      ...Array<number>(lead)
        .fill(0)
        .map(() => this.rng.int(1, 4)),
      ...an.shape.map((s) => (s === 1 && this.rng.chance(0.7) ? this.rng.int(2, 5) : s)),
    ];
    // -1 keeps an axis as it is
    const to = shape.map((s, i) => (i >= lead && s === an.shape[i - lead] && this.rng.chance(0.2) ? -1 : s));
    return this.push({ op: "expand", args: [this.cur], to, shape, dtype: an.dtype });
  }

  pad(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const pads = an.shape.map((s): [number, number] => {
      if (!this.rng.chance(0.6)) return [0, 0];
      // a negative pad crops (never the whole axis)
      const before = this.rng.int(s > 1 ? -1 : 0, 2);
      const after = this.rng.int(s - Math.max(0, -before) > 1 ? -1 : 0, 2);
      return [before, after];
    });
    const value = this.rng.chance(0.3)
      ? 0
      : an.dtype === "bool"
        ? this.rng.int(0, 1)
        : this.value(isFloatDT(an.dtype) || this.rng.chance(0.15) ? "float32" : "int32");
    const shape = an.shape.map((s, i) => s + pads[i]![0] + pads[i]![1]);
    if (shape.some((s) => s < 1)) return null;
    // pad(value) is where(inside, x, value): an integer tensor and a fraction give float32
    const dtype = value === 0 ? an.dtype : whereScalarDtype(an.dtype, value);
    return this.push({ op: "pad", args: [this.cur], pads, value, shape, dtype });
  }

  shrink(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const bounds = an.shape.map((s): [number, number] => {
      const start = this.rng.int(0, s - 1);
      return [start, this.rng.int(start + 1, s)];
    });
    return this.push({ op: "shrink", args: [this.cur], bounds, shape: bounds.map(([s, e]) => e - s), dtype: an.dtype });
  }

  flip(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const axes = an.shape.map((_, i) => i).filter(() => this.rng.chance(0.5));
    if (axes.length === 0) axes.push(this.rng.int(0, an.shape.length - 1));
    return this.push({ op: "flip", args: [this.cur], axes, shape: [...an.shape], dtype: an.dtype });
  }

  /** numpy-style indexing: slices with steps (negative too), a picked index, a new axis. */
  index(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const spec: IndexEntry[] = [];
    const shape: number[] = [];
    for (const size of an.shape) {
      if (this.rng.chance(0.15) && shape.length < 3) {
        spec.push(null);
        shape.push(1);
      }
      if (this.rng.chance(0.15)) {
        spec.push(this.rng.int(-size, size - 1));
        continue;
      }
      const bound = (): number | null => (this.rng.chance(0.3) ? null : this.rng.int(-size - 1, size + 1));
      const step = this.rng.chance(0.4) ? null : this.rng.pick([-3, -2, -1, 1, 2, 3]);
      const entry: [number | null, number | null, number | null] = [bound(), bound(), step];
      const n = sliceLength(size, entry);
      if (n === 0) return null;
      spec.push(entry);
      shape.push(n);
    }
    return this.push({ op: "index", args: [this.cur], spec, shape, dtype: an.dtype });
  }

  cat(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0) return null;
    const axis = this.rng.int(0, r - 1);
    const others: number[] = [];
    for (let k = this.rng.int(1, 2); k > 0; k--) {
      const id = this.rng.chance(0.3)
        ? this.fromPool((n) => n.shape.length === r && n.shape.every((s, i) => i === axis || s === an.shape[i]))
        : undefined;
      others.push(
        id ??
          this.input(
            an.shape.map((s, i) => (i === axis ? this.rng.int(1, 4) : s)),
            this.rng.chance(0.7) ? an.dtype : this.randomDtype(),
          ),
      );
    }
    const args = this.rng.shuffle([this.cur, ...others]);
    const shape = an.shape.map((s, i) =>
      i === axis ? args.reduce((t, id) => t + this.nodes[id]!.shape[axis]!, 0) : s,
    );
    const dtype = promote(...args.map((id) => this.nodes[id]!.dtype));
    return this.push({ op: "cat", args, axis: this.rng.chance(0.3) ? axis - r : axis, shape, dtype });
  }

  stack(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r >= 4) return null;
    const others = Array.from({ length: this.rng.int(1, 2) }, () => {
      if (this.rng.chance(0.3)) return this.cur;
      return (
        this.fromPool(
          (n) => n.shape.length === r && n.shape.every((s, i) => s === an.shape[i]) && this.rng.chance(0.5),
        ) ?? this.input(an.shape, this.rng.chance(0.7) ? an.dtype : this.randomDtype())
      );
    });
    const args = this.rng.shuffle([this.cur, ...others]);
    const axis = this.rng.int(0, r);
    const shape = [...an.shape.slice(0, axis), args.length, ...an.shape.slice(axis)];
    return this.push({ op: "stack", args, axis, shape, dtype: promote(...args.map((id) => this.nodes[id]!.dtype)) });
  }

  repeat(): number | null {
    const an = this.node;
    const lead = an.shape.length < 4 && this.rng.chance(0.3) ? 1 : 0;
    const reps = Array.from({ length: an.shape.length + lead }, () =>
      this.rng.weighted([
        [1, 3],
        [2, 2],
        [3, 1],
      ] as const),
    );
    const full = [...Array<number>(lead).fill(1), ...an.shape];
    return this.push({
      op: "repeat",
      args: [this.cur],
      reps,
      shape: full.map((s, i) => s * reps[i]!),
      dtype: an.dtype,
    });
  }

  contiguous(): number | null {
    const an = this.node;
    if (this.avoid("contiguousOfCat") && this.catUnder(this.cur)) return null;
    return this.push({ op: "contiguous", args: [this.cur], shape: [...an.shape], dtype: an.dtype });
  }

  /** Whether node `id` is a cat or stack, under reshapes and contiguous() (what catPieces looks through). */
  catUnder(id: number): boolean {
    const n = this.nodes[id]!;
    if (n.op === "reshape" || n.op === "contiguous") return this.catUnder(n.args[0]!);
    return n.op === "cat" || n.op === "stack";
  }

  realize(): number | null {
    const an = this.node;
    if (this.grad && this.avoid("realizeCutsGradient")) return null;
    return this.push({ op: "realize", args: [this.cur], shape: [...an.shape], dtype: an.dtype });
  }

  // ---- reductions and friends

  reduce(): number | null {
    const an = this.node,
      r = an.shape.length;
    const fn = this.rng.weighted<ReduceFn>([
      ["sum", 4],
      ["max", 3],
      ["min", 2],
      ["mean", 2],
    ]);
    const all = this.rng.chance(0.15);
    const axes = all ? null : an.shape.map((_, i) => i).filter(() => this.rng.chance(0.5));
    if (axes && axes.length === 0 && r > 0) axes.push(this.rng.int(0, r - 1));
    const keepdim = this.rng.chance(0.4);
    const reduced = axes ?? an.shape.map((_, i) => i);
    const shape = keepdim
      ? an.shape.map((s, i) => (reduced.includes(i) ? 1 : s))
      : an.shape.filter((_, i) => !reduced.includes(i));
    const dtype = fn === "sum" ? sumOf(an.dtype) : fn === "mean" ? floatOf(an.dtype) : an.dtype;
    const axis = axes && this.rng.chance(0.3) ? axes.map((a) => a - r) : axes;
    const node: Node = { op: "reduce", fn, args: [this.cur], axis, keepdim, shape, dtype };
    return fn === "sum" || fn === "mean" ? this.pushArith(node) : this.push(node);
  }

  matmul(): number | null {
    const an = this.node,
      r = an.shape.length;
    // bool @ bool would count in tsgrad (a sum of ANDs as int32) and OR in numpy
    if (r === 0 || an.dtype === "bool") return null;
    const k = an.shape[r - 1]!;
    const dtype = this.rng.chance(0.8)
      ? an.dtype
      : this.rng.pick<DT>(this.grad ? ["float32", "int32"] : ["float32", "int32", "float16"]);
    let b: number, shape: number[];
    if (r >= 2 && this.rng.chance(0.25)) {
      // x @ x^T: the same node read twice, one side transposed
      const t = this.push({
        op: "transpose",
        args: [this.cur],
        dims: [-1, -2],
        shape: [...an.shape.slice(0, -2), k, an.shape[r - 2]!],
        dtype: an.dtype,
      });
      if (t === null) return null;
      b = t;
      shape = [...an.shape.slice(0, -1), an.shape[r - 2]!];
    } else if (this.rng.chance(0.15)) {
      b = this.input([k], dtype); // a vector: the last axis contracted away
      shape = an.shape.slice(0, -1);
    } else {
      const n = this.rng.int(1, 6);
      const batch =
        r >= 3 && this.rng.chance(0.5) ? an.shape.slice(0, -2).map((s) => (this.rng.chance(0.3) ? 1 : s)) : [];
      b = this.input([...batch, k, n], dtype);
      const lead = r === 1 ? batch : broadcast(an.shape.slice(0, -2), batch)!;
      shape = r === 1 ? [...lead, n] : [...lead, an.shape[r - 2]!, n];
    }
    const node: Node = {
      op: "matmul",
      args: [this.cur, b],
      shape,
      dtype: sumOf(promote(an.dtype, this.nodes[b]!.dtype)),
    };
    return this.pushArith(node);
  }

  cumsum(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const axis = this.rng.int(-an.shape.length, an.shape.length - 1);
    return this.pushArith({ op: "cumsum", args: [this.cur], axis, shape: [...an.shape], dtype: sumOf(an.dtype) });
  }

  gather(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0 || (an.dtype === "bool" && this.avoid("gatherOfBool"))) return null;
    const axis = this.rng.int(0, r - 1);
    const shape = an.shape.map((s, i) => (i === axis ? this.rng.int(1, 6) : this.rng.int(1, s)));
    const data = Array.from({ length: numel(shape) }, () => this.rng.int(0, an.shape[axis]! - 1));
    this.nodes.push({ op: "input", data, shape, dtype: "int32" });
    const index = this.nodes.length - 1;
    return this.push({
      op: "gather",
      args: [this.cur, index],
      axis: this.rng.chance(0.3) ? axis - r : axis,
      shape,
      dtype: an.dtype,
    });
  }

  // ---- newer composite ops: pad modes, softmax, scans, sorts, einsum, activations, interpolation, convolution

  /** An axis of the current node, negative now and then. */
  axisOf(r: number): number {
    const a = this.rng.int(0, r - 1);
    return this.rng.chance(0.3) ? a - r : a;
  }

  /**
   * Pad by mode: reflect at most size - 1 a side, circular at most size, replicate any (tsgrad's documented limits).
   */
  padMode(): number | null {
    const an = this.node;
    if (an.shape.length === 0) return null;
    const mode = this.rng.weighted<PadMode>([
      ["reflect", 3],
      ["replicate", 2],
      ["circular", 2],
    ]);
    const pads = an.shape.map((s): [number, number] => {
      if (!this.rng.chance(0.6)) return [0, 0];
      const limit = mode === "reflect" ? s - 1 : mode === "circular" ? s : 3;
      return [this.rng.int(0, Math.min(limit, 3)), this.rng.int(0, Math.min(limit, 3))];
    });
    const shape = an.shape.map((s, i) => s + pads[i]![0] + pads[i]![1]);
    return this.push({ op: "pad", args: [this.cur], pads, value: 0, mode, shape, dtype: an.dtype });
  }

  softmax(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0) return null;
    const fn = this.rng.pick(["softmax", "logSoftmax"] as const);
    return this.pushArith({
      op: "softmax",
      fn,
      args: [this.cur],
      axis: this.axisOf(r),
      shape: [...an.shape],
      dtype: floatOf(an.dtype),
    });
  }

  logsumexp(): number | null {
    const an = this.node,
      r = an.shape.length;
    const all = r === 0 || this.rng.chance(0.15);
    const axes = all ? null : an.shape.map((_, i) => i).filter(() => this.rng.chance(0.5));
    if (axes && axes.length === 0) axes.push(this.rng.int(0, r - 1));
    const keepdim = this.rng.chance(0.4);
    const reduced = axes ?? an.shape.map((_, i) => i);
    const shape = keepdim
      ? an.shape.map((s, i) => (reduced.includes(i) ? 1 : s))
      : an.shape.filter((_, i) => !reduced.includes(i));
    // negative axes now and then, and one axis as a plain number
    const signed = axes && this.rng.chance(0.3) ? axes.map((a) => a - r) : axes;
    const axis = signed && signed.length === 1 && this.rng.chance(0.5) ? signed[0]! : signed;
    return this.pushArith({ op: "logsumexp", args: [this.cur], axis, keepdim, shape, dtype: floatOf(an.dtype) });
  }

  cummax(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0) return null;
    return this.push({ op: "cummax", args: [this.cur], axis: this.axisOf(r), shape: [...an.shape], dtype: an.dtype });
  }

  /**
   * sort's values or indices, or argsort. Indices are defined for ties too (stable), but not for values a rounding may
   * reorder: a float16 one (fuzzy) or one that is exact only in exact arithmetic (inexact).
   */
  sort(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0) return null;
    const kind = this.rng.weighted([
      ["values", 3],
      ["indices", 1],
      ["argsort", 1],
    ] as const);
    if (kind !== "values" && (this.fuzzy.has(this.cur) || this.inexact.has(this.cur))) return null;
    const axis = this.axisOf(r),
      descending = this.rng.chance(0.5);
    if (kind === "argsort")
      return this.push({ op: "argsort", args: [this.cur], axis, descending, shape: [...an.shape], dtype: "int32" });
    return this.push({
      op: "sort",
      args: [this.cur],
      axis,
      descending,
      take: kind,
      shape: [...an.shape],
      dtype: kind === "values" ? an.dtype : "int32",
    });
  }

  topk(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0) return null;
    const take = this.rng.chance(0.75) ? "values" : "indices";
    if (take === "indices" && (this.fuzzy.has(this.cur) || this.inexact.has(this.cur))) return null;
    const axis = this.axisOf(r),
      a = (axis + r) % r;
    const k = this.rng.int(1, this.avoid("catOfManyReduces") ? Math.min(an.shape[a]!, 48) : an.shape[a]!);
    const shape = an.shape.map((s, i) => (i === a ? k : s));
    return this.push({
      op: "topk",
      args: [this.cur],
      k,
      axis,
      largest: this.rng.chance(0.6),
      take,
      shape,
      dtype: take === "values" ? an.dtype : "int32",
    });
  }

  /**
   * einsum of the current node and a second operand (a new input, or the node itself under other letters): letters
   * shared (contracted or kept), repeated within a term (a diagonal), only in one term, broadcast from size 1; "..."
   * now and then; the output implicit (numpy's rule) or explicit in any order.
   */
  einsum(): number | null {
    const an = this.node,
      ra = an.shape.length;
    const size = new Map<string, number>();
    const pool = this.rng.shuffle([..."abcdefghijXYZ"]);
    const fresh = (s: number): string => {
      const l = pool.pop()!;
      size.set(l, s);
      return l;
    };
    /**
     * A term's letters for `shape`: a letter of `from` of the same size (chance `share`), one of its own repeated, or
     * new.
     */
    const letters = (shape: readonly number[], from: readonly string[], share: number): string[] => {
      const term: string[] = [];
      for (const s of shape) {
        const same = from.filter((l) => size.get(l) === s && (!term.includes(l) || this.rng.chance(0.3)));
        const own = term.filter((l) => size.get(l) === s);
        if (same.length > 0 && this.rng.chance(share)) term.push(this.rng.pick(same));
        else if (own.length > 0 && this.rng.chance(0.15)) term.push(this.rng.pick(own));
        else term.push(fresh(s));
      }
      return term;
    };
    const ellA = ra > 0 && this.rng.chance(0.15) ? this.rng.int(1, ra) : 0;
    const termA = letters(an.shape.slice(ellA), [], 0);
    let b: number, termB: string[], ellB: number;
    if (ra > 0 && this.rng.chance(0.2)) {
      // the same node twice: x @ x-like products, traces, Gram matrices
      b = this.cur;
      ellB = ellA;
      termB = letters(an.shape.slice(ellB), termA, 0.6);
    } else {
      const rank = this.rng.int(ra === 0 ? 1 : 0, 3);
      const shape: number[] = [];
      // "...": a broadcast partner of A's (right-aligned), or axes of B's own
      ellB =
        ellA > 0 && this.rng.chance(0.6)
          ? this.rng.int(0, ellA)
          : ellA === 0 && this.rng.chance(0.08)
            ? this.rng.int(1, 2)
            : 0;
      const ellShape =
        ellA > 0
          ? an.shape.slice(ellA - ellB, ellA).map((s) => (this.rng.chance(0.2) ? 1 : s))
          : Array.from({ length: ellB }, () => this.rng.int(1, 4));
      termB = [];
      for (let i = 0; i < rank; i++) {
        const shared = termA.filter((l) => !termB.includes(l));
        if (shared.length > 0 && this.rng.chance(0.6)) {
          const l = this.rng.pick(shared);
          termB.push(l);
          // size 1 broadcasts against the other operand's size, either way round
          shape.push(
            this.rng.chance(0.1) ? 1 : size.get(l) === 1 && this.rng.chance(0.3) ? this.rng.int(2, 3) : size.get(l)!,
          );
        } else if (termB.some((l) => !termA.includes(l)) && this.rng.chance(0.1)) {
          // a diagonal of B's own
          const l = this.rng.pick(termB.filter((x) => !termA.includes(x)));
          termB.push(l);
          shape.push(size.get(l)!);
        } else {
          const s = this.rng.int(1, 5);
          termB.push(fresh(s));
          shape.push(s);
        }
      }
      const dtype = this.rng.chance(0.7) ? an.dtype : this.randomDtype();
      b = this.input([...ellShape, ...shape], this.grad && dtype === "float16" ? "float32" : dtype);
    }
    const bn = this.nodes[b]!;
    const ellShape = broadcast(an.shape.slice(0, ellA), bn.shape.slice(0, ellB));
    if (!ellShape) return null;
    // every label's size (1 broadcasts): what the output's axes are, and a bound on the product's size
    const full = new Map<string, number>();
    [
      [termA, an.shape.slice(ellA)],
      [termB, bn.shape.slice(ellB)],
    ].forEach(([term, shape]) =>
      (term as string[]).forEach((l, i) => full.set(l, Math.max(full.get(l) ?? 1, (shape as number[])[i]!))),
    );
    if (numel([...ellShape, ...full.values()]) > 4096 * this.scale) return null;
    const used = [...full.keys()];
    const all = [...termA, ...termB];
    let out: string[], explicit: boolean;
    if (this.rng.chance(0.35)) {
      explicit = false;
      out = used.filter((l) => all.indexOf(l) === all.lastIndexOf(l)).sort();
    } else {
      explicit = true;
      out = this.rng.shuffle(used.filter(() => this.rng.chance(0.5)));
    }
    const withDots = (term: string[], e: number): string => (e > 0 ? "..." : "") + term.join("");
    const ellipsis = ellA > 0 || ellB > 0;
    const outTerm = !explicit
      ? ""
      : (() => {
          const at = this.rng.int(0, out.length);
          return ellipsis ? [...out.slice(0, at), "...", ...out.slice(at)].join("") : out.join("");
        })();
    const formula = `${withDots(termA, ellA)},${withDots(termB, ellB)}${explicit ? `->${outTerm}` : ""}`;
    const outLabels: (string | null)[] = explicit
      ? [...outTerm.replace("...", ".")].map((c) => (c === "." ? null : c))
      : [...(ellipsis ? [null] : []), ...out];
    const shape = outLabels.flatMap((l) => (l === null ? ellShape : [full.get(l)!]));
    // a letter left out of the output is summed: bools and ints accumulate in int32; a product alone keeps the dtype
    const summed = used.some((l) => !out.includes(l));
    const operand = promote(an.dtype, bn.dtype);
    return this.pushArith({
      op: "einsum",
      args: [this.cur, b],
      formula,
      shape,
      dtype: summed ? sumOf(operand) : operand,
    });
  }

  act(): number | null {
    const an = this.node;
    if (an.dtype === "bool") return null; // bool.neg() is logical not: sigmoid and friends of a bool are not the math
    const fn = this.rng.weighted<ActFn>([
      ["sigmoid", 1],
      ["tanh", 1],
      ["relu", 1],
      ["silu", 2],
      ["gelu", 2],
      ["geluTanh", 2],
      ["softplus", 2],
      ["elu", 2],
      ["selu", 1],
      ["leakyRelu", 2],
      ["relu6", 2],
      ["hardtanh", 1],
      ["hardsigmoid", 1],
      ["hardswish", 2],
      ["mish", 2],
      ["logsigmoid", 2],
    ]);
    let param: number | [number, number] | undefined;
    if (fn === "softplus" && this.rng.chance(0.5)) param = this.rng.pick([0.5, 2, 3]);
    if (fn === "elu" && this.rng.chance(0.5)) param = this.rng.pick([0.5, 1.5, 2]);
    if (fn === "leakyRelu" && this.rng.chance(0.5)) param = this.rng.pick([0.1, 0.2, 0.25]);
    if (fn === "hardtanh" && this.rng.chance(0.6))
      param = this.rng.pick<[number, number]>([
        [-2, 2],
        [-0.5, 1.5],
        [0, 3],
        [-1.25, 0.75],
      ]);
    // maximum/minimum with integer bounds keep an int32 tensor int32; everything else computes in floats
    const intKept =
      fn === "relu" ||
      fn === "relu6" ||
      (fn === "hardtanh" && (param === undefined || (param as number[]).every(Number.isInteger)));
    const dtype = an.dtype === "int32" && intKept ? "int32" : floatOf(an.dtype);
    return this.pushArith({
      op: "act",
      fn,
      args: [this.cur],
      ...(param === undefined ? {} : { param }),
      shape: [...an.shape],
      dtype,
    });
  }

  /** A view of the current node with two leading axes of 1 where it has fewer than `rank` axes (a batch, a channel). */
  withLeadingOnes(rank: number): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r >= rank) return this.cur;
    const to = [...Array<number>(rank - r).fill(1), ...an.shape];
    return this.push({ op: "reshape", args: [this.cur], to, shape: to, dtype: an.dtype });
  }

  /** PyTorch's F.interpolate, align_corners false (default) or true, sized by `size` or by `scaleFactor`. */
  interpolate(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0 || r > 4 || an.dtype === "bool") return null;
    const linear = isFloatDT(an.dtype) && this.rng.chance(0.6);
    const x = this.withLeadingOnes(r <= 2 ? r + 2 : r);
    if (x === null) return null;
    const xn = this.nodes[x]!,
      spatial = xn.shape.length - 2;
    const ins = xn.shape.slice(2);
    const mode: InterpolateMode = !linear ? "nearest" : spatial === 1 ? "linear" : "bilinear";
    let outs: number[];
    const node: Extract<Node, { op: "interpolate" }> = {
      op: "interpolate",
      args: [x],
      mode,
      shape: [],
      dtype: xn.dtype,
    };
    if (this.rng.chance(0.5)) {
      outs = ins.map((n) => this.rng.int(1, Math.min(2 * n + 1, 9)));
      node.size = spatial === 1 && this.rng.chance(0.5) ? outs[0]! : outs;
    } else {
      const factors = [0.5, 0.75, 1, 1.2, 1.5, 2, 2.5, 3];
      const one = this.rng.chance(0.5);
      const common = this.rng.pick(factors);
      const scales = ins.map(() => (one ? common : this.rng.pick(factors)));
      outs = ins.map((n, d) => Math.floor(n * scales[d]!));
      if (outs.some((o) => o < 1)) return null;
      node.scaleFactor = one ? scales[0]! : scales;
    }
    if (linear && this.rng.chance(0.5)) node.alignCorners = this.rng.chance(0.5);
    node.shape = [...xn.shape.slice(0, 2), ...outs];
    return this.pushArith(node);
  }

  /** A tiny conv2d: stride 1-2, padding 0-1, kernel 1-3, dilation and groups now and then, a bias sometimes. */
  conv2d(): number | null {
    const an = this.node,
      r = an.shape.length;
    if (r === 0 || an.dtype === "bool") return null;
    const x = this.withLeadingOnes(4);
    if (x === null) return null;
    const xn = this.nodes[x]!;
    const [batch, channels, h, w] = xn.shape as [number, number, number, number];
    const divisors = Array.from({ length: channels }, (_, i) => i + 1).filter((d) => channels % d === 0 && d > 1);
    const groups = divisors.length > 0 && this.rng.chance(0.2) ? this.rng.pick(divisors) : 1;
    const filters = groups * this.rng.int(1, groups > 1 ? 2 : 3);
    const pair = (lo: number, hi: number): [number, number] => [this.rng.int(lo, hi), this.rng.int(lo, hi)];
    const stride = pair(1, 2),
      padding = pair(0, 1),
      dilation: [number, number] = this.rng.chance(0.15) ? pair(1, 2) : [1, 1];
    const kernel = [h, w].map((n, d) => {
      const fits = [1, 2, 3].filter((k) => dilation[d]! * (k - 1) + 1 <= n + 2 * padding[d]!);
      return this.rng.pick(fits);
    });
    const outs = [h, w].map(
      (n, d) => Math.floor((n + 2 * padding[d]! - dilation[d]! * (kernel[d]! - 1) - 1) / stride[d]!) + 1,
    );
    const wdtype = this.rng.chance(0.8)
      ? xn.dtype
      : this.rng.pick<DT>(this.grad ? ["float32", "int32"] : ["float32", "int32", "float16"]);
    const weight = this.input([filters, channels / groups, ...kernel], wdtype);
    const args = [x, weight];
    let dtype = sumOf(promote(xn.dtype, wdtype));
    if (this.rng.chance(0.3)) {
      const bdtype = this.rng.chance(0.8) ? dtype : this.grad ? "float32" : "float16";
      args.push(this.input([filters], bdtype));
      dtype = promote(dtype, bdtype);
    }
    // each option as one number where both axes agree, half the time
    const compact = (p: [number, number]): number | [number, number] =>
      p[0] === p[1] && this.rng.chance(0.5) ? p[0] : p;
    const node: Node = {
      op: "conv2d",
      args,
      stride: compact(stride),
      padding: compact(padding),
      dilation: compact(dilation),
      groups,
      shape: [batch, filters, ...outs],
      dtype,
    };
    return this.pushArith(node);
  }
}

/** The program of `seed`: an input, then a chain of 3-8 ops (each may bring more inputs). */
export function generateProgram(
  seed: number,
  { grad = false, includeKnown = false, maxSize = DEFAULT_MAX_SIZE, classic = false }: GenerateOptions = {},
): Program {
  const rng = new Rng(seed);
  const g = new ProgramBuilder(rng, grad, includeKnown, maxSize);
  g.cur = g.input(g.randomShape(), g.randomDtype());
  const depth = rng.int(3, 8);
  const steps = classic ? CLASSIC_STEPS : STEPS;
  for (let step = 0, tries = 0; step < depth && tries < 200; tries++) {
    const id = rng.weighted(steps)(g);
    if (id === null) continue;
    g.cur = id;
    step++;
  }
  if (grad && g.node.dtype !== "float32")
    g.cur = g.push({ op: "cast", args: [g.cur], shape: [...g.node.shape], dtype: "float32" })!;
  const nodes = pruneTo(g.nodes, g.cur);
  const program: Program = { seed, grad, nodes };
  if (grad) program.weights = Array.from({ length: numel(outputOf(program).shape) }, () => g.gridValue(true));
  return program;
}

/** The nodes `out` depends on, renumbered in order, `out` last. */
export function pruneTo(nodes: readonly Node[], out: number): Node[] {
  const keep = new Set<number>();
  const visit = (id: number): void => {
    if (keep.has(id)) return;
    keep.add(id);
    argsOf(nodes[id]!).forEach(visit);
  };
  visit(out);
  const ids = [...keep].filter((id) => id !== out).sort((a, b) => a - b);
  ids.push(out);
  const renumber = new Map(ids.map((id, i) => [id, i]));
  return ids.map((id) => {
    const n = nodes[id]!;
    return n.op === "input" ? n : { ...n, args: n.args.map((a) => renumber.get(a)!) };
  });
}
