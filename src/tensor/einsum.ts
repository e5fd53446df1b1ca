// Einstein summation with numpy's and PyTorch's rules, from movement ops, mul and sum alone: autograd needs no
// rule of its own, a diagonal is a strided view (no gather), and each contraction of two operands is the
// broadcast product summed over its last axes that Tensor.matmul builds, so the scheduler runs it as a matmul.
import { Tensor } from "./tensor.ts";
import { TsgradError, fmtShape } from "../helpers.ts";

const ELLIPSIS = "...";

/**
 * `einsum("ij,jk->ik", a, b)` is `a.matmul(b)`. Letters name axes; a letter missing from the output is summed;
 * a letter repeated in one term takes the diagonal; without `->` the output is the letters used once, in
 * alphabetical order (uppercase first); `...` stands for the axes no letter names, broadcast between operands
 * and kept at the front of an implicit output (an explicit output must place them, as numpy requires).
 */
export function einsum(formula: string, ...operands: Tensor[]): Tensor {
  const fail = (problem: string): never => {
    throw new TsgradError(`einsum "${formula}": ${problem}`);
  };
  const compact = formula.replace(/\s+/g, "");
  const sides = compact.split("->");
  if (sides.length > 2) fail("'->' appears more than once");
  const terms = sides[0]!.split(",").map((term) => parseTerm(term, fail));
  if (terms.length !== operands.length)
    fail(
      `${terms.length} input term${terms.length === 1 ? "" : "s"} but ${operands.length} operand${operands.length === 1 ? "" : "s"}`,
    );

  const inputs = labelAxes(terms, operands, fail);
  checkSizes(inputs, operands, fail);
  const ellipsisLabels = [...new Set(inputs.flat().filter(isEllipsisLabel))].sort(
    (a, b) => ellipsisIndex(a) - ellipsisIndex(b),
  );
  const output =
    sides.length === 2
      ? explicitOutput(parseTerm(sides[1]!, fail), terms, ellipsisLabels, fail)
      : implicitOutput(terms, ellipsisLabels);

  // every label by where it lands: the output's first, in its order, so the last product needs no permute
  const order = [...new Set([...output, ...inputs.flat()])];
  const prepared = operands.map((t, i) => {
    const [diagonal, labels] = takeDiagonals(t, inputs[i]!);
    // a label no other operand and not the output uses is summed before any product makes it larger
    const elsewhere = new Set([...output, ...inputs.filter((_, j) => j !== i).flat()]);
    return sumOut(diagonal, labels, (label) => elsewhere.has(label));
  });
  let [result, labels] = prepared[0]!;
  for (let i = 1; i < prepared.length; i++) {
    const needed = new Set([...output, ...prepared.slice(i + 1).flatMap(([, later]) => later)]);
    [result, labels] = contract([result, labels], prepared[i]!, needed, order);
  }
  // a lone operand is still in its own order
  return result.permute(output.map((label) => labels.indexOf(label)));
}

/** A term's tokens: single letters and at most one "...". */
function parseTerm(term: string, fail: (problem: string) => never): string[] {
  const tokens: string[] = [];
  for (let i = 0; i < term.length; ) {
    if (term.startsWith(ELLIPSIS, i)) {
      if (tokens.includes(ELLIPSIS)) fail(`term "${term}" has more than one "..."`);
      tokens.push(ELLIPSIS);
      i += ELLIPSIS.length;
    } else if (/[a-zA-Z]/.test(term[i]!)) {
      tokens.push(term[i++]!);
    } else {
      fail(`invalid character '${term[i]}' in term "${term}" (letters a-z, A-Z and one "..." per term)`);
    }
  }
  return tokens;
}

/**
 * Each operand's label per axis. The axes under an ellipsis are right-aligned as in broadcasting and labelled by
 * position (`...0` is the outermost of the widest ellipsis), so equal labels broadcast against each other.
 */
function labelAxes(terms: string[][], operands: Tensor[], fail: (problem: string) => never): string[][] {
  const spans = terms.map((tokens, i) => {
    const letters = tokens.filter((t) => t !== ELLIPSIS).length;
    const { shape, ndim } = operands[i]!;
    const hasEllipsis = tokens.includes(ELLIPSIS);
    if (hasEllipsis ? letters > ndim : letters !== ndim) {
      fail(
        `term "${tokens.join("")}" names ${hasEllipsis ? "at least " : ""}${letters} axes but operand ${i} has shape ${fmtShape(shape)} (${ndim} axes)`,
      );
    }
    return ndim - letters;
  });
  const widest = Math.max(0, ...spans);
  return terms.map((tokens, i) =>
    tokens.flatMap((t) =>
      t === ELLIPSIS ? Array.from({ length: spans[i]! }, (_, j) => `${ELLIPSIS}${widest - spans[i]! + j}`) : [t],
    ),
  );
}

const isEllipsisLabel = (label: string): boolean => label.startsWith(ELLIPSIS);
const ellipsisIndex = (label: string): number => Number(label.slice(ELLIPSIS.length));
const nameOf = (label: string): string =>
  isEllipsisLabel(label) ? `axis ${ellipsisIndex(label)} under "..."` : `'${label}'`;

/** A label's sizes: repeats within an operand (a diagonal) must agree exactly, across operands 1 broadcasts. */
function checkSizes(inputs: string[][], operands: Tensor[], fail: (problem: string) => never): void {
  const sizes = new Map<string, { size: number; operand: number }>();
  inputs.forEach((labels, i) => {
    const shape = operands[i]!.shape;
    labels.forEach((label, axis) => {
      const size = shape[axis]!;
      const first = labels.indexOf(label);
      if (first !== axis && shape[first] !== size)
        fail(
          `operand ${i} ${fmtShape(shape)} repeats ${nameOf(label)} over axes of sizes ${shape[first]} and ${size}: a diagonal needs equal sizes`,
        );
      const seen = sizes.get(label);
      if (seen && seen.size !== size && seen.size !== 1 && size !== 1) {
        fail(
          `sizes of ${nameOf(label)} disagree: ${seen.size} in operand ${seen.operand} ${fmtShape(operands[seen.operand]!.shape)} and ${size} in operand ${i} ${fmtShape(shape)}`,
        );
      }
      if (!seen || seen.size === 1) sizes.set(label, { size, operand: i });
    });
  });
}

function explicitOutput(
  tokens: string[],
  terms: string[][],
  ellipsisLabels: string[],
  fail: (problem: string) => never,
): string[] {
  const used = new Set(terms.flat());
  tokens.forEach((t, i) => {
    if (t === ELLIPSIS) return;
    if (tokens.indexOf(t) !== i) fail(`output letter '${t}' appears more than once`);
    if (!used.has(t)) fail(`output letter '${t}' is in no input term`);
  });
  // numpy's rule: axes under "..." are only ever broadcast, never summed
  if (ellipsisLabels.length > 0 && !tokens.includes(ELLIPSIS))
    fail(
      `"..." covers ${ellipsisLabels.length} ${ellipsisLabels.length === 1 ? "axis" : "axes"} of the inputs; the output must place them with "..."`,
    );
  return tokens.flatMap((t) => (t === ELLIPSIS ? ellipsisLabels : [t]));
}

/** numpy's implicit output: the broadcast axes, then the letters used exactly once, in code-point order. */
function implicitOutput(terms: string[][], ellipsisLabels: string[]): string[] {
  const letters = terms.flat().filter((t) => t !== ELLIPSIS);
  const once = [...new Set(letters)].filter((l) => letters.indexOf(l) === letters.lastIndexOf(l)).sort();
  return [...ellipsisLabels, ...once];
}

/**
 * Merges each repeated label's axes into their diagonal, a view: the two axes (n each) flattened, padded by n to
 * rows of n + 1, so column 0 of row i is element i*(n+1) = (i, i).
 */
function takeDiagonals(t: Tensor, labels: string[]): [Tensor, string[]] {
  const second = labels.findIndex((label, axis) => labels.indexOf(label) !== axis);
  if (second === -1) return [t, labels];
  const first = labels.indexOf(labels[second]!);
  const rest = labels.map((_, axis) => axis).filter((axis) => axis !== first && axis !== second);
  const lead = rest.map((axis) => t.shape[axis]!);
  const keep = lead.map(() => null);
  const n = t.shape[first]!;
  const diagonal = t
    .permute([...rest, first, second])
    .reshape([...lead, n * n])
    .pad([...keep, [0, n]])
    .reshape([...lead, n, n + 1])
    .shrink([...keep, null, [0, 1]])
    .reshape([...lead, n]);
  return takeDiagonals(diagonal, [...rest.map((axis) => labels[axis]!), labels[first]!]);
}

/** Sums the axes whose labels are not kept. */
function sumOut(t: Tensor, labels: string[], kept: (label: string) => boolean): [Tensor, string[]] {
  const axes = labels.flatMap((label, axis) => (kept(label) ? [] : [axis]));
  return axes.length === 0 ? [t, labels] : [t.sum({ axis: axes }), labels.filter(kept)];
}

/**
 * Two operands as Tensor.matmul lays them out: each permuted to the shared label order and given size-1 axes for
 * the labels it lacks, multiplied (the broadcast expands both), and summed over the contracted labels, last
 * (merged into one axis where both operands have them whole).
 */
function contract(
  [a, aLabels]: [Tensor, string[]],
  [b, bLabels]: [Tensor, string[]],
  needed: ReadonlySet<string>,
  order: string[],
): [Tensor, string[]] {
  const labels = order.filter((label) => aLabels.includes(label) || bLabels.includes(label));
  const kept = labels.filter((label) => needed.has(label));
  const all = [...kept, ...labels.filter((label) => !needed.has(label))];
  const align = (t: Tensor, own: string[]): Tensor => {
    const present = all.filter((label) => own.includes(label));
    return t
      .permute(present.map((label) => own.indexOf(label)))
      .reshape(all.map((label) => (own.includes(label) ? t.shape[own.indexOf(label)]! : 1)));
  };
  const [x, y] = [align(a, aLabels), align(b, bLabels)];
  const k = kept.length;
  // several contracted labels become one axis, as a matmul's K: the kernels tile, pack and block a single
  // sum axis (two sums over the same K run far apart); not where a size-1 axis broadcasts against a longer one
  if (all.length - k > 1 && x.shape.slice(k).every((size, i) => size === y.shape[k + i])) {
    const merge = (t: Tensor): Tensor =>
      t.reshape([...t.shape.slice(0, k), t.shape.slice(k).reduce((p, s) => p * s, 1)]);
    return [merge(x).mul(merge(y)).sum({ axis: -1 }), kept];
  }
  return sumOut(x.mul(y), all, (label) => needed.has(label));
}

declare module "./tensor.ts" {
  // a static method, merged into the class as a namespace member
  namespace Tensor {
    /**
     * Einstein summation, numpy's rules (`Tensor.einsum("bij,bjk->bik", a, b)`, diagonals, `...`, implicit
     * output); a contraction of two operands runs as a matmul.
     */
    let einsum: (formula: string, ...operands: Tensor[]) => Tensor;
  }
}

Tensor.einsum = einsum;
