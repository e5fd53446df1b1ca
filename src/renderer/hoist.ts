// Loop-invariant definitions move out of their loops before a C compiler sees the kernel. gcc hoists such
// loads itself, but only after deciding whether the loop vectorises: an elementwise loop reading its row's
// scalars (a layer norm backward's mean and rstd, b[i0] inside the loop over i1) beside a byte mask stayed
// scalar until those loads sat before it.
import type { Expr, Stmt } from "../codegen/ir.ts";
import { varsOf } from "../shape/symbolic.ts";

/**
 * `body` with every definition that reads nothing its loop changes placed just before that loop, as far out as
 * it goes. Loads of the output (slot 0) and of `pinned` slots (memory the kernel also writes: an in-place
 * update's input) stay where they are, and nothing lands between the `parallel` perfectly nested loops that
 * OpenMP collapses. Values and their order of evaluation within an iteration are unchanged.
 */
export function hoistInvariants(
  body: readonly Stmt[],
  parallel: number,
  pinned: ReadonlySet<number> = new Set(),
): Stmt[] {
  const movable = (s: Stmt): s is Stmt & { kind: "def" } =>
    s.kind === "def" && !(s.expr.op === "LOAD" && (s.expr.buf === 0 || pinned.has(s.expr.buf)));
  // OpenMP collapses `parallel` loops from the first loop that is not serial (as the renderer places the
  // pragma: a K-blocked kernel's tiles sit inside the serial loop over blocks). Their bodies (but the
  // innermost's) hold only the next loop, so nothing moves out of the collapsed loops at levels 1..parallel-1.
  // `level`: the loop's place in that nest, or "before" while no collapsed loop encloses it yet.
  const closed = (level: number | "before"): boolean =>
    parallel > 1 && level !== "before" && level >= 1 && level <= parallel - 1;
  const visit = (stmts: readonly Stmt[], level: number | "before"): Stmt[] => {
    const out: Stmt[] = [];
    for (const s of stmts) {
      if (s.kind !== "loop") {
        out.push(s);
        continue;
      }
      const own = level !== "before" ? level : s.serial ? "before" : 0;
      const inner = visit(s.body, own === "before" ? "before" : own + 1);
      if (closed(own) || s.serial) {
        out.push({ ...s, body: inner });
        continue;
      }
      // names the loop changes: its variable, and everything defined, declared or updated inside it
      const changing = namesIn(inner);
      changing.add(s.var);
      const stay: Stmt[] = [];
      for (const t of inner) {
        if (movable(t) && ![...reads(t.expr)].some((n) => changing.has(n))) {
          out.push(t);
          changing.delete(t.name);
        } else {
          stay.push(t);
        }
      }
      out.push({ ...s, body: stay });
    }
    return out;
  };
  return visit(body, "before");
}

/** Names defined, declared, updated or looped over anywhere in `stmts`. */
function namesIn(stmts: readonly Stmt[], into = new Set<string>()): Set<string> {
  for (const s of stmts) {
    if (s.kind === "loop") {
      into.add(s.var);
      namesIn(s.body, into);
    } else if (s.kind === "def" || s.kind === "acc" || s.kind === "update") {
      into.add(s.name);
    }
  }
  return into;
}

/** The names (values, loop variables, runtime indices) an expression reads. */
function reads(e: Expr): Set<string> {
  const names = new Set<string>();
  if (e.op === "LOAD" || e.op === "VALID") e.valid.forEach((b) => varsOf(b.expr, names));
  if (e.op === "LOAD" || e.op === "INDEX") varsOf(e.index, names);
  if ("srcs" in e) for (const o of e.srcs) if (o.kind === "val") names.add(o.name);
  return names;
}
