// One-hot sums in the lazy graph, WHERE(x == r + offset, v, 0) summed over r: what they match, the gather
// they collapse to (r reduced: one guarded load at x) and the scatter their gradients lower to on host
// backends (r an output row: each summed row added where x points); with the index rules of the movement
// ops the matching sees through.
import { dtypes, type DType } from "../dtype.ts";
import {
  type Bound,
  type Idx,
  andBound,
  flatIndex,
  iadd,
  iconst,
  imul,
  ivar,
  unflatIndex,
  varsOf,
} from "../shape/symbolic.ts";
import { MOVEMENT_OPS, type Op, type Pads, type ReduceArg, type UOp, isElementwise } from "../uop.ts";
import { hasUnitTerm } from "./heuristics.ts";
import type { KernelSpec } from "./kernel_spec.ts";

/** What a movement op does to an index: the source index, and bounds that must hold (PAD). `null`: never inside. */
export function moveIndex(node: UOp, idx: readonly Idx[]): { srcIdx: Idx[]; inside: Bound[] | null } {
  const src = node.src[0]!;
  switch (node.op) {
    case "RESHAPE":
      return { srcIdx: reshapeIndex(node, idx), inside: [] };
    case "PERMUTE": {
      const srcIdx = new Array<Idx>(idx.length);
      (node.arg as number[]).forEach((from, to) => (srcIdx[from] = idx[to]!));
      return { srcIdx, inside: [] };
    }
    case "EXPAND":
      return { srcIdx: idx.map((i, d) => (src.shape[d] === 1 ? iconst(0) : i)), inside: [] };
    case "SHRINK":
      return { srcIdx: idx.map((i, d) => iadd(i, iconst((node.arg as Pads)[d]![0]))), inside: [] };
    case "DETACH":
      return { srcIdx: [...idx], inside: [] };
    case "FLIP":
      return {
        srcIdx: idx.map((i, d) => ((node.arg as boolean[])[d] ? iadd(iconst(src.shape[d]! - 1), imul(i, -1)) : i)),
        inside: [],
      };
    case "PAD": {
      let inside: Bound[] | null = [];
      const srcIdx = idx.map((i, d) => {
        const shifted = iadd(i, iconst(-(node.arg as Pads)[d]![0]));
        inside = andBound(inside, shifted, 0, src.shape[d]!);
        return shifted;
      });
      return { srcIdx, inside };
    }
    default:
      throw new Error(`moveIndex: ${node.op} is not a movement op`);
  }
}

/** Axes of a reshape that hold the same elements on both sides: `dims` of the result, `srcDims` of the source. */
interface ReshapeGroup {
  readonly dims: readonly number[];
  readonly srcDims: readonly number[];
}
const reshapeGroups = new WeakMap<UOp, readonly ReshapeGroup[]>();

/** The reshape's axes (those of more than one element) in groups of equal products, in order. */
function groupsOf(node: UOp): readonly ReshapeGroup[] {
  const cached = reshapeGroups.get(node);
  if (cached) return cached;
  const remember = (groups: readonly ReshapeGroup[]): readonly ReshapeGroup[] => (
    reshapeGroups.set(node, groups), groups
  );
  const shape = node.shape,
    srcShape = node.src[0]!.shape;
  const dims = shape.flatMap((size, d) => (size === 1 ? [] : [d]));
  const srcDims = srcShape.flatMap((size, d) => (size === 1 ? [] : [d]));
  // one group for everything (the whole flat index): an empty array
  const whole = [{ dims, srcDims }];
  if (shape.includes(0) || srcShape.includes(0)) return remember(whole);
  const found: ReshapeGroup[] = [];
  let [i, j] = [0, 0];
  while (i < dims.length && j < srcDims.length) {
    const group = { dims: [dims[i]!], srcDims: [srcDims[j]!] };
    let [left, right] = [shape[dims[i++]!]!, srcShape[srcDims[j++]!]!];
    while (left !== right) {
      if (left < right && i < dims.length) {
        group.dims.push(dims[i]!);
        left *= shape[dims[i++]!]!;
      } else if (left > right && j < srcDims.length) {
        group.srcDims.push(srcDims[j]!);
        right *= srcShape[srcDims[j++]!]!;
      } else return remember(whole); // products that never meet: not a reshape of the same elements
    }
    found.push(group);
  }
  return remember(i < dims.length || j < srcDims.length ? whole : found);
}

const ZERO = iconst(0);

/**
 * The source index of a reshape, group by group of axes holding the same elements: an axis that only
 * gains or loses unit axes around it (an unsqueeze, a squeeze: most reshapes a graph holds) maps straight to
 * its counterpart; axes merged or split go through their group's flat index (a division and a modulo per
 * axis, simplified by the ranges), not the whole array's.
 */
function reshapeIndex(node: UOp, idx: readonly Idx[]): Idx[] {
  const srcShape = node.src[0]!.shape;
  const out = new Array<Idx>(srcShape.length).fill(ZERO);
  for (const { dims, srcDims } of groupsOf(node)) {
    if (dims.length === 1 && srcDims.length === 1) {
      out[srcDims[0]!] = idx[dims[0]!]!;
      continue;
    }
    const flat = flatIndex(
      dims.map((d) => idx[d]!),
      dims.map((d) => node.shape[d]!),
    );
    const parts = unflatIndex(
      flat,
      srcDims.map((d) => srcShape[d]!),
    );
    srcDims.forEach((d, k) => (out[d] = parts[k]!));
  }
  return out;
}

export const isMovement = (op: Op): boolean => MOVEMENT_OPS.has(op);

/** The values an integer dtype can hold, as the range of a runtime index. */
export function dtypeRange(d: DType): [number, number] {
  if (d.kind === "uint" || d.kind === "bool") return [0, d.kind === "bool" ? 1 : 2 ** (8 * d.itemsize) - 1];
  return [-(2 ** (8 * d.itemsize - 1)), 2 ** (8 * d.itemsize - 1) - 1];
}

export type Inputs = ReadonlyMap<UOp, number>;

/**
 * Follows movement ops (not PAD) down to the node that computes the value or is loaded; undefined when a PAD is in the
 * way.
 */
function throughMoves(node: UOp, idx: readonly Idx[], inputs: Inputs): { node: UOp; idx: readonly Idx[] } | undefined {
  while (isMovement(node.op) && !inputs.has(node)) {
    if (node.op === "PAD") return undefined;
    idx = moveIndex(node, idx).srcIdx;
    node = node.src[0]!;
  }
  return { node, idx };
}

export interface OneHot {
  /** Summed where hot, at `valueIdx` (the index of the WHERE); `cast`: its float cast under the sum. */
  readonly value: UOp;
  readonly valueIdx: readonly Idx[];
  readonly cast?: DType;
  /** Whether the sum adds the negated WHERE (a loss gradient's -(one-hot x weight)). */
  readonly negate?: boolean;
  /** The hot index is `other` at `otherIdx` minus `offset`. */
  readonly other: UOp;
  readonly otherIdx: readonly Idx[];
  readonly offset: Idx;
}

/**
 * Matches WHERE(NOT(a != b), v, 0) at `idx` where one side is exactly r + offset (r the reduce variable,
 * offset free of r) and the other side does not depend on r.
 */
export function matchOneHot(src: UOp, idx: readonly Idx[], r: Idx, inputs: Inputs): OneHot | undefined {
  const computed = (u: UOp, at: readonly Idx[]) => {
    const found = throughMoves(u, at, inputs);
    return found && !inputs.has(found.node) ? found : undefined;
  };
  // a 16-bit sum accumulates in float32: sum(cast(where(c, v, 0))) is cast(v) at the hot index; a negated one
  // (zero stays zero) is -v there
  let where = computed(src, idx);
  let cast: DType | undefined;
  let negate = false;
  for (let peeled = 0; where && peeled < 3; peeled++) {
    const n = where.node;
    if (n.op === "CAST" && n.dtype.kind === "float" && !cast) cast = n.dtype;
    else if (n.op === "NEG" && n.dtype.kind === "float") negate = !negate;
    else break;
    where = computed(n.src[0]!, where.idx);
  }
  if (where?.node.op !== "WHERE") return undefined;
  const zero = computed(where.node.src[2]!, where.idx);
  if (zero?.node.op !== "CONST" || zero.node.arg !== 0) return undefined;
  const not = computed(where.node.src[0]!, where.idx);
  if (not?.node.op !== "NEG" || not.node.dtype !== dtypes.bool) return undefined;
  const ne = computed(not.node.src[0]!, not.idx);
  if (ne?.node.op !== "CMPNE") return undefined;
  const rName = (r as { name: string }).name;
  for (const [a, b] of [
    [0, 1],
    [1, 0],
  ] as const) {
    const sideA = ne.node.src[a]!,
      sideB = ne.node.src[b]!;
    if (!isIntegral(sideA.dtype) || !isIntegral(sideB.dtype)) return undefined;
    const e = asIndex(sideA, ne.idx, inputs);
    if (!e || dependsOn(sideB, ne.idx, rName, inputs)) continue;
    const terms = e.kind === "sum" ? e.terms : [e];
    const rTerms = terms.filter((t) => varsOf(t).has(rName));
    if (rTerms.length !== 1 || rTerms[0]!.kind !== "var") continue;
    const offset = iadd(...terms.filter((t) => t !== rTerms[0]));
    return { value: where.node.src[1]!, valueIdx: where.idx, cast, negate, other: sideB, otherIdx: ne.idx, offset };
  }
  return undefined;
}

const isIntegral = (d: DType): boolean => d.kind === "int" || d.kind === "uint";

const oneHotProducts = new WeakMap<UOp, boolean>();

/**
 * Whether `reduce` sums a one-hot selection over other axes than its class axis: WHERE(x == r + offset, v, 0)
 * with r an axis kept in the output (an embedding's gradient: a product, which a GPU runs on tensor cores). A
 * sum over the class axis itself is a gather (an embedding lookup) and answers false.
 */
export function isOneHotProduct(reduce: UOp): boolean {
  let answer = oneHotProducts.get(reduce);
  if (answer === undefined) {
    const { op, axes } = reduce.arg as ReduceArg;
    const src = reduce.src[0]!;
    const idx = src.shape.map((n, d) => ivar(`a${d}`, n));
    const classAxes =
      op === "ADD" ? idx.flatMap((i, d) => (i.kind === "var" && matchOneHot(src, idx, i, new Map()) ? [d] : [])) : [];
    answer = classAxes.length > 0 && !classAxes.some((d) => axes.includes(d));
    oneHotProducts.set(reduce, answer);
  }
  return answer;
}

/** An INDEX-derived integer value (index, constants, +, * by constants, integer casts) as an index expression. */
function asIndex(node: UOp, idx: readonly Idx[], inputs: Inputs): Idx | undefined {
  const at = throughMoves(node, idx, inputs);
  if (!at || inputs.has(at.node)) return undefined;
  const n = at.node;
  if (n.op === "INDEX") return at.idx[0]!;
  if (n.op === "CONST") return Number.isInteger(n.arg) ? iconst(n.arg as number) : undefined;
  if (n.op === "CAST" && isIntegral(n.dtype) && isIntegral(n.src[0]!.dtype) && n.dtype.itemsize >= 4)
    return asIndex(n.src[0]!, at.idx, inputs);
  if (n.op === "ADD") {
    const [a, b] = [asIndex(n.src[0]!, at.idx, inputs), asIndex(n.src[1]!, at.idx, inputs)];
    return a && b ? iadd(a, b) : undefined;
  }
  if (n.op === "MUL") {
    const [a, b] = [asIndex(n.src[0]!, at.idx, inputs), asIndex(n.src[1]!, at.idx, inputs)];
    if (a && b?.kind === "const") return imul(a, b.value);
    if (b && a?.kind === "const") return imul(b, a.value);
  }
  return undefined;
}

/** Whether `node` at `idx` reads loop variable `name` anywhere (a reduce inside counts when its output index does). */
function dependsOn(node: UOp, idx: readonly Idx[], name: string, inputs: Inputs): boolean {
  if (idx.every((i) => !varsOf(i).has(name))) return false;
  if (node.op === "CONST") return false;
  if (inputs.has(node)) return true;
  if (isMovement(node.op)) return dependsOn(node.src[0]!, moveIndex(node, idx).srcIdx, name, inputs);
  if (isElementwise(node.op) || node.op === "CONTIGUOUS") return node.src.some((s) => dependsOn(s, idx, name, inputs));
  return true;
}

/**
 * A one-hot sum to lower as a scatter: `reduce` sums over its axes WHERE(x == row + offset, value, 0), row along
 * `axis`.
 */
export interface ScatterPlan {
  readonly reduce: UOp;
  readonly axis: number;
  /** The reduce source's index over the loops runScatter opens (o: kept, t: summed, row: `axis`, l: lanes). */
  readonly idx: readonly Idx[];
  /** Neighbouring columns along `laneAxis` one loop iteration takes (contiguous in the output: they vectorise). */
  readonly lanes: number;
  readonly laneAxis: number;
  readonly match: OneHot;
  /** Where the output holds the reduce's element at an index of the reduce's shape. */
  readonly place: (idx: readonly Idx[]) => Idx;
  /** Whether the kernel stores something computed from the sums (elementwise), not the sums themselves. */
  readonly epilogue: boolean;
}

/** Rows below this stay dense: few rows cost little either way, and the dense form is parallel over them. */
const MIN_SCATTER_ROWS = 16;

/**
 * The scatter plan of a kernel that stores one sum over its axes of WHERE(x == row + offset, value, 0), with x
 * and value free of the row (an embedding's or a gather's gradient): stored as it is, through reshapes and
 * permutes, or after elementwise ops (each output element reads its own sum, once it is complete). The sums
 * accumulate in the output buffer itself: its dtype must be the sum's, 32 or 64 bits (not a 16-bit float,
 * whose sum accumulates in float32).
 */
export function scatterPlan(spec: KernelSpec): ScatterPlan | undefined {
  const out = spec.buffers[0]!;
  const accumulates = out.dtype.itemsize >= 4 && (out.dtype.kind === "float" || isIntegral(out.dtype));
  if (!accumulates) return undefined;
  const ok = (reduce: UOp): boolean =>
    (reduce.arg as ReduceArg).op === "ADD" &&
    reduce.dtype === out.dtype &&
    reduce.shape.reduce((a, b) => a * b, 1) === out.size;
  // the sums stored through movement ops that keep every element (reshapes, permutes)
  const chain: UOp[] = [];
  let n = spec.value;
  while ((n.op === "RESHAPE" || n.op === "PERMUTE" || n.op === "CONTIGUOUS") && !spec.inputs.has(n)) {
    chain.unshift(n);
    n = n.src[0]!;
  }
  if (n.op === "REDUCE" && ok(n)) return planFor(n, spec.inputs, (idx) => placeThrough(chain, n, idx), false);
  // or after elementwise ops: the reduces reached through them alone
  const reduces: UOp[] = [];
  const seen = new Set<UOp>();
  const find = (u: UOp): void => {
    if (seen.has(u) || spec.inputs.has(u)) return;
    seen.add(u);
    if (u.op === "REDUCE") reduces.push(u);
    else if (keepsElements(u)) u.src.forEach(find);
  };
  find(spec.value);
  for (const reduce of reduces) {
    if (!ok(reduce)) continue;
    // the one-hot match fails fast on most reduces; the walk over every path is left for the few that match
    const plan = planFor(reduce, spec.inputs, (idx) => flatIndex(idx, reduce.shape), true);
    if (plan && !readsElsewhere(spec, reduce)) return plan;
  }
  return undefined;
}

/** The flat output index of the reduce's element at `idx`, up through `chain` (reshapes and permutes, bottom first). */
function placeThrough(chain: readonly UOp[], reduce: UOp, idx: readonly Idx[]): Idx {
  let at = idx;
  let shape = reduce.shape;
  for (const m of chain) {
    if (m.op === "PERMUTE") at = (m.arg as number[]).map((from) => at[from]!);
    else if (m.op === "RESHAPE") at = unflatIndex(flatIndex(at, shape), m.shape);
    shape = m.shape;
  }
  return flatIndex(at, shape);
}

/** The scatter plan of `reduce`: the first kept axis of enough rows that the one-hot compares against. */
function planFor(
  reduce: UOp,
  inputs: Inputs,
  place: (idx: readonly Idx[]) => Idx,
  epilogue: boolean,
): ScatterPlan | undefined {
  const src = reduce.src[0]!;
  const { axes } = reduce.arg as ReduceArg;
  const kept = src.shape.map((_, d) => d).filter((d) => !axes.includes(d) && src.shape[d]! > 1);
  const plainIdx = src.shape.map((size, d) => (axes.includes(d) ? iconst(0) : ivar(`o${d}`, size)));
  const placed = place(plainIdx);
  for (const axis of kept) {
    if (src.shape[axis]! < MIN_SCATTER_ROWS) continue;
    const columns = kept.filter((d) => d !== axis);
    // lanes along the column axis the output stores contiguously; two blocks of them at least, unless other columns
    // split the work
    const laneAxis = columns.find((d) => hasUnitTerm(placed, `o${d}`)) ?? -1;
    const size = laneAxis < 0 ? 1 : src.shape[laneAxis]!;
    const lanes = [32, 16, 8, 4, 2].find((w) => size % w === 0 && (columns.length > 1 || size / w >= 2)) ?? 1;
    const idx = src.shape.map((size, d): Idx => {
      if (axes.includes(d)) return ivar(`t${d}`, size);
      if (d === axis) return ivar(`row${d}`, size);
      if (d === laneAxis && lanes > 1) return iadd(imul(ivar(`o${d}`, size / lanes), lanes), ivar(`l${d}`, lanes));
      return ivar(`o${d}`, size);
    });
    const match = matchOneHot(src, idx, idx[axis]!, inputs);
    if (match && !dependsOn(match.value, match.valueIdx, `row${axis}`, inputs))
      return { reduce, axis, idx, lanes, laneAxis, match, place, epilogue };
  }
  return undefined;
}

/**
 * Whether some path from the stored value reaches `reduce` through anything but elementwise ops and reshapes
 * (keepsElements).
 */
function readsElsewhere(spec: KernelSpec, reduce: UOp): boolean {
  const reaches = new Map<UOp, boolean>();
  const reach = (n: UOp): boolean => {
    if (n === reduce) return true;
    if (spec.inputs.has(n)) return false;
    let known = reaches.get(n);
    if (known === undefined) reaches.set(n, (known = n.src.some(reach)));
    return known;
  };
  const visited = new Set<UOp>();
  const check = (n: UOp): boolean => {
    if (n === reduce || spec.inputs.has(n) || visited.has(n)) return false;
    visited.add(n);
    if (!keepsElements(n) && n.src.some(reach)) return true;
    return n.src.some(check);
  };
  return check(spec.value);
}

/** Whether each element of `n` reads only the same (flat) element of its sources. */
const keepsElements = (n: UOp): boolean => isElementwise(n.op) || n.op === "RESHAPE" || n.op === "CONTIGUOUS";
