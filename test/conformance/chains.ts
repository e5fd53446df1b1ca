// Random op chains for the property test (property.test.ts): from a seed, a few float32 inputs of small random
// shapes (sizes 0 and 1 among them) and a chain of ops over them: elementwise ops with broadcasting, the views
// (permute, reshape, expand, shrink, pad, flip), reductions, matmuls and softmaxes. The same seed gives the same
// chain and the same input values, so a chain that fails is replayed from its seed alone.
import type { Tensor } from "../../src/index.ts";
import { cumsum } from "../../src/tensor/index.ts";

export type Unary = "neg" | "tanh" | "sigmoid" | "relu" | "abs" | "square" | "exp" | "sin" | "log1pAbs" | "gelu";
export type Binary = "add" | "sub" | "mul" | "div" | "maximum" | "minimum";
export type Reduce = "sum" | "max" | "min" | "mean";

/** One op of a chain; `other` is the index of the input it takes as a second operand. */
export type Step =
  | { op: "unary"; fn: Unary }
  | { op: "binary"; fn: Binary; other: number }
  | { op: "scalar"; fn: Binary; value: number }
  | { op: "where"; other: number; value: number }
  | { op: "permute"; order: number[] }
  | { op: "reshape"; shape: number[] }
  | { op: "expand"; shape: number[] }
  | { op: "shrink"; bounds: [number, number][] }
  | { op: "pad"; pads: [number, number][]; value: number }
  | { op: "flip"; axes: number[] }
  | { op: "reduce"; fn: Reduce; axis: number; keepdim: boolean }
  | { op: "matmul"; other: number }
  | { op: "softmax"; axis: number }
  | { op: "cumsum"; axis: number }
  | { op: "contiguous" };

export interface Chain {
  seed: number;
  /** The inputs' shapes; input 0 starts the chain, the others are second operands. */
  inputs: number[][];
  steps: Step[];
}

/** mulberry32: a small seeded generator of floats in [0, 1). */
export function random(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const MAX_ELEMENTS = 512;
const numel = (shape: readonly number[]): number => shape.reduce((p, s) => p * s, 1);

class Draw {
  constructor(readonly next: () => number) {}
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
  /** An axis size: 0 now and then, 1 often (broadcasting), else 2..5. */
  size(): number {
    const u = this.next();
    return u < 0.07 ? 0 : u < 0.3 ? 1 : this.int(2, 5);
  }
  shape(ndim: number): number[] {
    return Array.from({ length: ndim }, () => this.size());
  }
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }
}

/** A shape that broadcasts against `shape`: some axes 1, some leading axes dropped. */
function broadcastable(draw: Draw, shape: readonly number[]): number[] {
  const dropped = draw.int(0, shape.length);
  return shape.slice(draw.chance(0.5) ? 0 : dropped).map((s) => (draw.chance(0.3) ? 1 : s));
}

/** NumPy's broadcast of two shapes that broadcast. */
function broadcast(a: readonly number[], b: readonly number[]): number[] {
  const n = Math.max(a.length, b.length);
  const at = (s: readonly number[], i: number): number => s[i - (n - s.length)] ?? 1;
  return Array.from({ length: n }, (_, i) => (at(a, i) === 1 ? at(b, i) : at(a, i)));
}

/** The shapes a reshape may go to: adjacent axes merged or one split, a size-1 axis added or removed. */
function reshapeTarget(draw: Draw, shape: readonly number[]): number[] {
  const s = [...shape];
  const choice = draw.int(0, 3);
  if (choice === 0 && s.length >= 2) {
    const i = draw.int(0, s.length - 2);
    s.splice(i, 2, s[i]! * s[i + 1]!);
  } else if (choice === 1 && s.length >= 1) {
    const i = draw.int(0, s.length - 1);
    const factors = [1, 2, 3, 4, 5].filter((f) => s[i]! % f === 0 && f <= s[i]!);
    const f = s[i] === 0 ? draw.pick([0, 2]) : draw.pick(factors);
    s.splice(i, 1, f, f === 0 ? 3 : s[i]! / f);
  } else if (choice === 2 && s.includes(1)) s.splice(s.indexOf(1), 1);
  else s.splice(draw.int(0, s.length), 0, 1);
  return s;
}

/** Draws the next step for a value of `shape`, adding any new input to `inputs`; its output shape too. */
function nextStep(draw: Draw, shape: number[], inputs: number[][]): [Step, number[]] | null {
  const ndim = shape.length;
  const addInput = (s: number[]): number => inputs.push(s) - 1;
  const kind = draw.pick([
    "unary",
    "unary",
    "binary",
    "binary",
    "scalar",
    "where",
    "permute",
    "reshape",
    "expand",
    "shrink",
    "pad",
    "flip",
    "reduce",
    "matmul",
    "softmax",
    "cumsum",
    "contiguous",
  ] as const);
  switch (kind) {
    case "unary":
      return [
        {
          op: "unary",
          fn: draw.pick(["neg", "tanh", "sigmoid", "relu", "abs", "square", "exp", "sin", "log1pAbs", "gelu"] as const),
        },
        shape,
      ];
    case "binary": {
      // the second operand broadcasts to this shape, or this one to a larger shape (a new axis, a 1 grown)
      const grow = draw.chance(0.3);
      const target = grow ? shape.map((s) => (s === 1 ? draw.size() : s)) : shape;
      if (grow && ndim < 4 && draw.chance(0.5)) target.unshift(draw.size());
      const other = broadcastable(draw, target);
      const fn = draw.pick(["add", "sub", "mul", "div", "maximum", "minimum"] as const);
      return [{ op: "binary", fn, other: addInput(other) }, broadcast(shape, other)];
    }
    case "scalar":
      return [
        {
          op: "scalar",
          fn: draw.pick(["add", "sub", "mul", "div", "maximum", "minimum"] as const),
          value: draw.pick([-1.5, -0.5, 0.25, 2]),
        },
        shape,
      ];
    case "where":
      return [{ op: "where", other: addInput(broadcastable(draw, shape)), value: draw.pick([0, -1, 3]) }, shape];
    case "permute": {
      const order = draw.shuffle(shape.map((_, i) => i));
      return [{ op: "permute", order }, order.map((a) => shape[a]!)];
    }
    case "reshape": {
      const target = reshapeTarget(draw, shape);
      return target.length > 5 ? null : [{ op: "reshape", shape: target }, target];
    }
    case "expand": {
      const target = shape.map((s) => (s === 1 && draw.chance(0.7) ? draw.int(0, 4) : s));
      if (ndim < 4 && draw.chance(0.4)) target.unshift(draw.int(0, 3));
      return [{ op: "expand", shape: target }, target];
    }
    case "shrink": {
      const bounds = shape.map((s): [number, number] => {
        const start = draw.int(0, s);
        return [start, draw.int(start, s)];
      });
      return [{ op: "shrink", bounds }, bounds.map(([s, e]) => e - s)];
    }
    case "pad": {
      const pads = shape.map((): [number, number] => [draw.int(0, 2), draw.int(0, 2)]);
      return [{ op: "pad", pads, value: draw.pick([0, 0, 1.5]) }, shape.map((s, i) => s + pads[i]![0] + pads[i]![1])];
    }
    case "flip": {
      const axes = shape.map((_, i) => i).filter(() => draw.chance(0.5));
      return [{ op: "flip", axes }, shape];
    }
    case "reduce": {
      if (ndim === 0) return null;
      const axis = draw.int(0, ndim - 1);
      const keepdim = draw.chance(0.5);
      // max and min of nothing are errors (as in PyTorch): only sums and means reduce an empty axis
      const fns: Reduce[] = shape[axis] === 0 ? ["sum", "mean"] : ["sum", "max", "min", "mean"];
      const out = keepdim ? shape.map((s, i) => (i === axis ? 1 : s)) : shape.filter((_, i) => i !== axis);
      return [{ op: "reduce", fn: draw.pick(fns), axis: axis - (draw.chance(0.3) ? ndim : 0), keepdim }, out];
    }
    case "matmul": {
      if (ndim === 0) return null;
      const n = draw.size();
      const other =
        ndim === 1
          ? [shape[0]!, n]
          : draw.chance(0.5)
            ? [shape[ndim - 1]!, n]
            : [...shape.slice(0, -2).map((s) => (draw.chance(0.3) ? 1 : s)), shape[ndim - 1]!, n];
      return [{ op: "matmul", other: addInput(other) }, [...shape.slice(0, -1), n]];
    }
    case "softmax": {
      if (ndim === 0) return null;
      const axis = draw.int(0, ndim - 1);
      return shape[axis] === 0 ? null : [{ op: "softmax", axis }, shape];
    }
    case "cumsum":
      return ndim === 0 ? null : [{ op: "cumsum", axis: draw.int(0, ndim - 1) }, shape];
    case "contiguous":
      return [{ op: "contiguous" }, shape];
  }
}

/** The chain a seed names: 1 to 4 starting axes, 2 to 7 steps, every shape at most 512 elements. */
export function generateChain(seed: number): Chain {
  const draw = new Draw(random(seed));
  let shape = draw.shape(draw.int(0, 4));
  const inputs = [shape];
  const steps: Step[] = [];
  const length = draw.int(2, 7);
  for (let tries = 0; steps.length < length && tries < 50; tries++) {
    const before = inputs.length;
    const next = nextStep(draw, shape, inputs);
    if (!next || numel(next[1]) > MAX_ELEMENTS || inputs.slice(before).some((s) => numel(s) > MAX_ELEMENTS)) {
      inputs.length = before;
      continue;
    }
    steps.push(next[0]);
    shape = next[1];
  }
  return { seed, inputs, steps };
}

/** The chain's input values (uniform in [-2, 2)) and the cotangent of its output, from its seed. */
export function chainData(chain: Chain, outShape: readonly number[]): { inputs: number[][]; cotangent: number[] } {
  const next = random(chain.seed ^ 0x5eed);
  const values = (n: number): number[] => Array.from({ length: n }, () => Math.fround(next() * 4 - 2));
  return { inputs: chain.inputs.map((s) => values(numel(s))), cotangent: values(numel(outShape)) };
}

const UNARY: Record<Unary, (x: Tensor) => Tensor> = {
  neg: (x) => x.neg(),
  tanh: (x) => x.tanh(),
  sigmoid: (x) => x.sigmoid(),
  relu: (x) => x.relu(),
  abs: (x) => x.abs(),
  square: (x) => x.square(),
  exp: (x) => x.exp(),
  sin: (x) => x.sin(),
  log1pAbs: (x) => x.abs().log1p(),
  gelu: (x) => x.gelu(),
};

/** Applies one step to `x`; `inputs` are the chain's input tensors. */
export function applyStep(x: Tensor, step: Step, inputs: readonly Tensor[]): Tensor {
  switch (step.op) {
    case "unary":
      return UNARY[step.fn](x);
    case "binary": {
      const other = inputs[step.other]!;
      // a divisor kept away from 0: |y| + 0.5
      return step.fn === "div" ? x.div(other.abs().add(0.5)) : x[step.fn](other);
    }
    case "scalar":
      return x[step.fn](step.value);
    case "where":
      return inputs[step.other]!.gt(0).where(x, step.value);
    case "permute":
      return x.permute(step.order);
    case "reshape":
      return x.reshape(step.shape);
    case "expand":
      return x.expand(step.shape);
    case "shrink":
      return x.shrink(step.bounds);
    case "pad":
      return x.pad(step.pads, step.value);
    case "flip":
      return x.flip(step.axes);
    case "reduce":
      return x[step.fn]({ axis: step.axis, keepdim: step.keepdim });
    case "matmul":
      return x.matmul(inputs[step.other]!);
    case "softmax":
      return x.softmax(step.axis);
    case "cumsum":
      return cumsum(x, step.axis);
    case "contiguous":
      return x.contiguous();
  }
}

/** The chain as TypeScript: its inputs' shapes, then the expression over inputs x0, x1, ... */
export function describeChain(chain: Chain): string {
  const json = (v: unknown): string => JSON.stringify(v);
  const apply = (x: string, step: Step): string => {
    switch (step.op) {
      case "unary":
        return step.fn === "log1pAbs" ? `${x}.abs().log1p()` : `${x}.${step.fn}()`;
      case "binary":
        return step.fn === "div" ? `${x}.div(x${step.other}.abs().add(0.5))` : `${x}.${step.fn}(x${step.other})`;
      case "scalar":
        return `${x}.${step.fn}(${step.value})`;
      case "where":
        return `x${step.other}.gt(0).where(${x}, ${step.value})`;
      case "permute":
        return `${x}.permute(${json(step.order)})`;
      case "reshape":
        return `${x}.reshape(${json(step.shape)})`;
      case "expand":
        return `${x}.expand(${json(step.shape)})`;
      case "shrink":
        return `${x}.shrink(${json(step.bounds)})`;
      case "pad":
        return `${x}.pad(${json(step.pads)}, ${step.value})`;
      case "flip":
        return `${x}.flip(${json(step.axes)})`;
      case "reduce":
        return `${x}.${step.fn}({ axis: ${step.axis}, keepdim: ${step.keepdim} })`;
      case "matmul":
        return `${x}.matmul(x${step.other})`;
      case "softmax":
        return `${x}.softmax(${step.axis})`;
      case "cumsum":
        return `cumsum(${x}, ${step.axis})`;
      case "contiguous":
        return `${x}.contiguous()`;
    }
  };
  const inputs = chain.inputs.map((s, i) => `x${i} ${json(s)}`).join(", ");
  return `seed ${chain.seed}: ${inputs}\n  ${chain.steps.reduce(apply, "x0")}`;
}
