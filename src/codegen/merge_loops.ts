// Perfectly nested reduce loops become one loop: GPU reduces split one loop across a block's threads and
// tensor cores tile one k, so both need the whole trip count in one loop. Where the nest walks memory as one
// loop would (a reduce over a tensor's batch and sequence axes: `for r0 < 8 { for r1 < 512 { x[r0*524288 +
// r1*1024] } }`), the merged loop reads it with one stride; elsewhere it recovers r0 and r1 by / and %.
import type { Expr, KernelIR, Stmt } from "./ir.ts";
import type { Bound, Idx } from "../shape/symbolic.ts";
import { iadd, idiv, imod, imul, ivar } from "../shape/symbolic.ts";

/** `kernel` with every mergeable nest of loops merged (itself when there is none). */
export function mergeNestedLoops(kernel: KernelIR): KernelIR {
  let changed = false;
  const visit = (stmts: readonly Stmt[]): Stmt[] =>
    stmts.map((s) => {
      if (s.kind !== "loop") return s;
      let loop: Stmt & { kind: "loop" } = { ...s, body: visit(s.body) };
      for (let merged = mergePair(loop); merged; merged = mergePair(loop)) {
        loop = merged;
        changed = true;
      }
      return loop;
    });
  const body = visit(kernel.body);
  return changed ? { ...kernel, body } : kernel;
}

/**
 * `for outer < A { for inner < B { body } }` as `for outer < A*B { body' }`. Indices that read the two
 * variables as c*B*outer + c*inner read c*merged; any other reads merged / B and merged % B.
 */
function mergePair(loop: Stmt & { kind: "loop" }): (Stmt & { kind: "loop" }) | undefined {
  const [inner] = loop.body;
  if (loop.body.length !== 1 || inner?.kind !== "loop") return undefined;
  const size = loop.size * inner.size;
  const merged = ivar(loop.var, size);
  const substitute = (e: Idx): Idx => {
    switch (e.kind) {
      case "const":
        return e;
      case "var":
        return e.name === loop.var ? idiv(merged, inner.size) : e.name === inner.var ? imod(merged, inner.size) : e;
      case "sum":
        return iadd(...e.terms.map(substitute));
      case "mul":
        return imul(substitute(e.a), e.c);
      case "div":
        return idiv(substitute(e.a), e.c);
      case "mod":
        return imod(substitute(e.a), e.c);
    }
  };
  const rewrite = (e: Idx): Idx => {
    const terms = e.kind === "sum" ? e.terms : [e];
    const coef = (name: string): number | undefined => {
      let c = 0;
      for (const t of terms) {
        if (t.kind === "var" && t.name === name) c += 1;
        else if (t.kind === "mul" && t.a.kind === "var" && t.a.name === name) c += t.c;
        else if (reads(t, name)) return undefined; // inside a division or modulo
      }
      return c;
    };
    const [co, ci] = [coef(loop.var), coef(inner.var)];
    if (co === undefined || ci === undefined || co !== ci * inner.size) return substitute(e);
    if (co === 0) return e;
    const rest = terms.filter((t) => !reads(t, loop.var) && !reads(t, inner.var));
    return iadd(...rest, imul(merged, ci));
  };
  const body = rewriteStmts(inner.body, rewrite);
  return body && { kind: "loop", var: loop.var, size, body };
}

/** Whether `e` reads variable `name`. */
function reads(e: Idx, name: string): boolean {
  switch (e.kind) {
    case "const":
      return false;
    case "var":
      return e.name === name;
    case "sum":
      return e.terms.some((t) => reads(t, name));
    default:
      return reads(e.a, name);
  }
}

/** The statements with every index rewritten; undefined when they store (the nest is not a reduce's). */
function rewriteStmts(stmts: readonly Stmt[], rewrite: (e: Idx) => Idx): Stmt[] | undefined {
  const out: Stmt[] = [];
  for (const s of stmts) {
    if (s.kind === "loop") {
      const body = rewriteStmts(s.body, rewrite);
      if (!body) return undefined;
      out.push({ ...s, body });
    } else if (s.kind === "store") {
      return undefined; // output loops keep their shape: the grid and the CPU's threads follow them
    } else {
      out.push(s.kind === "def" ? { ...s, expr: rewriteExpr(s.expr, rewrite) } : s);
    }
  }
  return out;
}

function rewriteExpr(e: Expr, rewrite: (e: Idx) => Idx): Expr {
  const bounds = (valid: readonly Bound[]): Bound[] => valid.map((b) => ({ ...b, expr: rewrite(b.expr) }));
  switch (e.op) {
    case "LOAD":
      return { ...e, index: rewrite(e.index), valid: bounds(e.valid) };
    case "VALID":
      return { ...e, valid: bounds(e.valid) };
    case "INDEX":
      return { ...e, index: rewrite(e.index) };
    default:
      return e;
  }
}
