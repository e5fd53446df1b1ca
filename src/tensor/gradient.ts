// Reverse-mode autodiff over the lazy graph: one gradient rule per primitive, next to each other.
// Gradients are UOps too, so a whole backward pass stays lazy (and one JIT can capture it).
import { type DType, dtypes, isFloat } from "../dtype.ts";
import { reduceInTwo, splitReduce } from "./split_reduce.ts";
import { type Pads, type ReduceArg, UOp, isBroadcastProduct } from "../uop.ts";

const full = (like: UOp, value: number, dtype: DType = like.dtype): UOp =>
  UOp.const(value, dtype, like.device)
    .reshape(like.shape.map(() => 1))
    .expand(like.shape);

const eq = (a: UOp, b: UOp): UOp => a.alu("CMPNE", b).alu("NEG");

/** d(out)/d(src_i) * g for each source of `node` (undefined where none flows). */
function rule(node: UOp, g: UOp): (UOp | undefined)[] {
  const [a, b] = node.src as [UOp, UOp];
  switch (node.op) {
    case "ADD":
      return [g, g];
    case "MUL":
      return [g.alu("MUL", b), g.alu("MUL", a)];
    case "NEG":
      return [g.alu("NEG")];
    case "RECIP":
      return [g.alu("MUL", node.alu("MUL", node)).alu("NEG")];
    case "SQRT":
      return [g.alu("MUL", node.alu("MUL", full(node, 2)).alu("RECIP"))];
    case "EXP2":
      return [g.alu("MUL", node.alu("MUL", full(node, Math.LN2)))];
    case "LOG2":
      return [g.alu("MUL", a.alu("MUL", full(a, Math.LN2)).alu("RECIP"))];
    case "SIN": {
      // cos(a) as 1 - 2 sin²(a / 2), as Tensor.cos: sin(a + π/2) loses a large a's low bits to the rounding of the sum
      const half = a.alu("MUL", full(a, 0.5)).alu("SIN");
      return [g.alu("MUL", half.alu("MUL", half).alu("MUL", full(a, -2)).alu("ADD", full(a, 1)))];
    }
    case "TRUNC":
      // a step function: 0 almost everywhere, as PyTorch gives for trunc, floor, ceil and round
      return [full(g, 0)];
    case "MAX": {
      // ties split the gradient evenly, as tinygrad does
      const toA = b
        .alu("CMPLT", a)
        .cast(g.dtype)
        .alu("ADD", eq(a, b).cast(g.dtype).alu("MUL", full(g, 0.5)));
      return [g.alu("MUL", toA), g.alu("MUL", full(g, 1).alu("ADD", toA.alu("NEG")))];
    }
    case "WHERE": {
      const zero = full(g, 0);
      return [undefined, a.alu("WHERE", g, zero), a.alu("WHERE", zero, g)];
    }
    case "CAST":
      return [isFloat(a.dtype) ? g.cast(a.dtype) : undefined];
    case "REDUCE": {
      const { op, axes } = node.arg as ReduceArg;
      if (op === "ADD") return [g.expand(a.shape)];
      const hits = eq(a, node.expand(a.shape)).cast(g.dtype);
      const share = g.alu("MUL", hits.reduce("ADD", axes).alu("RECIP"));
      return [hits.alu("MUL", share.expand(a.shape))];
    }
    case "RESHAPE":
      return [g.reshape(a.shape)];
    case "PERMUTE": {
      const order = node.arg as number[];
      const inverse = order.map((_, i) => order.indexOf(i));
      return [g.permute(inverse)];
    }
    case "EXPAND": {
      const axes = a.shape.flatMap((s, i) => (s === 1 && node.shape[i] !== 1 ? [i] : []));
      // a long sum to few outputs (a bias's gradient over every token, whatever products it sums: no
      // matmul has so few outputs) in two kernels, the partials in float32
      if (splitReduce(g.shape, axes)) {
        const sixteen = g.dtype === dtypes.float16 || g.dtype === dtypes.bfloat16;
        return [reduceInTwo(sixteen ? g.cast(dtypes.float32) : g, "ADD", axes).cast(g.dtype)];
      }
      // an input several matmuls read (x under q, k and v) gets the sum of their products here: reduced
      // term by term it is several matmuls (tensor cores, tiled kernels), not one loop over all the products
      const terms = addTerms(g);
      // (only matmul products: an elementwise product, a GELU's gradient contributions, summed term by term
      // would be two reduces each recomputing part of the chain instead of one reading the stored gradient)
      if (terms.length > 1 && terms.every(isBroadcastProduct))
        return [terms.map((t) => t.reduce("ADD", axes)).reduce((sum, t) => sum.alu("ADD", t))];
      return [g.reduce("ADD", axes)];
    }
    case "PAD":
      return [g.shrink((node.arg as Pads).map(([before], i) => [before, before + a.shape[i]!]))];
    case "SHRINK":
      return [g.pad((node.arg as Pads).map(([start, end], i) => [start, a.shape[i]! - end]))];
    case "FLIP":
      return [g.flip(node.arg as boolean[])];
    case "DETACH":
      return [undefined];
    case "CONTIGUOUS":
      return [g];
    case "COPY":
      return [g.copyTo(a.device)];
    default:
      return node.src.map(() => undefined); // comparisons, integer and bit ops, ASSIGN: no gradient
  }
}

/** The terms of a tree of ADDs (the gradient contributions summed at a node). */
const addTerms = (u: UOp): UOp[] => (u.op === "ADD" ? u.src.flatMap(addTerms) : [u]);

/** Gradients of `root` (seeded with `rootGrad`) with respect to each of `targets` that it depends on. */
export function computeGradients(root: UOp, rootGrad: UOp, targets: ReadonlySet<UOp>): Map<UOp, UOp> {
  const order = UOp.toposort([root], (u) => targets.has(u));
  // only nodes on a path to a target need a gradient
  const onPath = new Set<UOp>();
  for (const node of order) if (targets.has(node) || node.src.some((s) => onPath.has(s))) onPath.add(node);
  const grads = new Map<UOp, UOp>([[root, rootGrad]]);
  for (let i = order.length - 1; i >= 0; i--) {
    const node = order[i]!;
    const g = grads.get(node);
    if (!g || targets.has(node) || !onPath.has(node)) continue;
    rule(node, g).forEach((srcGrad, n) => {
      const src = node.src[n]!;
      if (!srcGrad || !onPath.has(src) || !isFloat(src.dtype)) return;
      const prev = grads.get(src);
      grads.set(src, prev ? prev.alu("ADD", srcGrad) : srcGrad);
    });
  }
  return new Map([...targets].flatMap((t) => (grads.has(t) ? [[t, grads.get(t)!] as [UOp, UOp]] : [])));
}
