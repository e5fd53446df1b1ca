// Shrinks a failing fuzz program to a few ops that still fail the same way: greedily, each round trying (in one
// numpy batch) an earlier node as the output, a node bypassed by an argument of its shape and dtype, and a node
// cut off as a new input holding numpy's values for it; the first candidate that keeps the failure wins.
import { type Node, type Program, Rng, argsOf, isFloatDT, numel, outputOf, pruneTo } from "./program.ts";
import { checkPrograms, runReference } from "./check.ts";

/** New grid weights for a gradient program whose output changed. */
function withWeights(p: Program): Program {
  if (!p.grad) return p;
  const rng = new Rng(p.seed);
  return {
    ...p,
    weights: Array.from({ length: numel(outputOf(p).shape) }, () => (rng.int(1, 16) / 8) * (rng.chance(0.5) ? 1 : -1)),
  };
}

const replaceUses = (nodes: readonly Node[], from: number, to: number): Node[] =>
  nodes.map((n) => (n.op === "input" ? n : { ...n, args: n.args.map((a) => (a === from ? to : a)) }));

function candidates(p: Program, values: readonly (number | string)[][] | undefined): Program[] {
  const out: Program[] = [];
  const last = p.nodes.length - 1;
  const add = (nodes: Node[], outId: number): void => {
    const pruned = pruneTo(nodes, outId);
    if (p.grad && outputOf({ ...p, nodes: pruned }).dtype !== "float32") return;
    out.push(withWeights({ ...p, nodes: pruned }));
  };
  // an earlier output: everything after it goes
  for (let k = 0; k < last; k++) if (p.nodes[k]!.op !== "input") add(p.nodes, k);
  p.nodes.forEach((n, k) => {
    if (n.op === "input") return;
    // bypassed: its users read an argument of the same shape and dtype instead
    for (const a of new Set(argsOf(n))) {
      const src = p.nodes[a]!;
      if (k !== last && src.shape.join() === n.shape.join() && src.dtype === n.dtype)
        add(replaceUses(p.nodes, k, a), last);
    }
    // cut: numpy's values for it as a new input (finite ones only: inputs come as JSON numbers)
    const v = values?.[k];
    if (k !== last && v && v.every((x) => typeof x === "number")) {
      const nodes = [...p.nodes];
      nodes[k] = { op: "input", data: v as number[], shape: n.shape, dtype: n.dtype };
      if (!(p.grad && isFloatDT(n.dtype) && n.dtype !== "float32")) add(nodes, last);
    }
  });
  return out;
}

/** The smallest program found that still fails with `key` on `devices`. */
export function minimize(program: Program, key: string, devices: readonly string[]): Program {
  let best = program;
  for (let round = 0; round < 50; round++) {
    const values = runReference([best], true)[0]!.nodes;
    const tried = candidates(best, values)
      .filter(
        (c) =>
          c.nodes.length < best.nodes.length ||
          c.nodes.filter((n) => n.op !== "input").length < best.nodes.filter((n) => n.op !== "input").length,
      )
      .sort((a, b) => a.nodes.length - b.nodes.length)
      .map((c, i) => ({ ...c, seed: i }));
    if (tried.length === 0) break;
    const report = checkPrograms(tried, devices);
    const hit = tried.find((c) => report.failing.get(c.seed)?.mismatches.some((m) => m.key === key));
    if (!hit) break;
    best = { ...hit, seed: program.seed };
  }
  return best;
}
