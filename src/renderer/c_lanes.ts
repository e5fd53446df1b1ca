// Register-tile lanes as C vectors. A host matmul's tile is 8 rows x 16 lanes of scalar accumulators, each
// step `acc = fmaf(x_row, w_lane, acc)` with the lanes' w read from one contiguous run of a packed panel.
// gcc 12 vectorises those scalars itself (SLP), but builds each row's broadcast from a 64-byte load and a
// shuffle instead of a broadcasting operand, well below the speed of the same loop written with vectors.
// So such runs are rendered as one vector
// accumulator a row (`tg_f32x16`) for the length of their loop: packed from the scalar accumulators before it,
// updated by `tg_fma16` (c.ts's C_VECTOR_PRELUDE: the AVX-512 or AVX2 multiply-add, at the widths the target
// has), unpacked after it. Each lane still computes fmaf(x, w, acc) in the same order, so the results are bit
// for bit those of the scalar form.
// Split sums take the same vectors: 16 accumulators each summing one lane of a run of neighbours (a norm's
// squares, a bias gradient's column sums, s16 kernels) are one vector updated by the lanes' terms written as
// vector expressions (loads, sums, products, negations). gcc's own vectorisation of such scalars
// streams a long sum of squares well below the vector form's speed.
import type { Operand, Stmt } from "../codegen/ir.ts";
import { iadd, iconst, imul, type Idx } from "../shape/symbolic.ts";

/** Accumulators updated as one vector: scalar names lane by lane, and the vector's name. */
export interface LaneGroup {
  readonly accs: readonly string[];
  readonly vector: string;
}

/** A lane's term as a vector: neighbouring loads, one value for every lane, or an operation on such terms. */
export type LaneTerm =
  | { readonly kind: "load"; readonly buf: number; readonly index: Idx }
  /** int32 neighbours converted to float32 (an attention mask read as int32), as the scalar (float) cast */
  | { readonly kind: "intLoad"; readonly buf: number; readonly index: Idx }
  | { readonly kind: "splat"; readonly operand: Operand }
  | { readonly kind: "alu"; readonly op: "ADD" | "MUL" | "NEG"; readonly srcs: readonly LaneTerm[] }
  /** `mask ? a : b` lane by lane, the mask neighbouring bools of a buffer (a dropout's kept elements). */
  | {
      readonly kind: "select";
      readonly mask: { readonly buf: number; readonly index: Idx };
      readonly srcs: readonly [LaneTerm, LaneTerm];
    };

/**
 * What a run of updates does as one vector: `vector += splat(scalar) * buf[index .. index + width)` (a register
 * tile's row), `vector += term` (a split sum's lanes), or `vector += a * b` in one rounding (a split sum of
 * products, as the scalar form's fmaf).
 */
export type LaneStep =
  | { readonly kind: "fma"; readonly scalar: Operand; readonly buf: number; readonly index: Idx }
  | { readonly kind: "sum"; readonly term: LaneTerm }
  | { readonly kind: "fusedSum"; readonly factors: readonly [LaneTerm, LaneTerm] }
  /** `vector = max(vector, term)` lane by lane, NaN kept as the scalar form keeps it (a softmax's row max) */
  | { readonly kind: "max"; readonly term: LaneTerm };

/** A run of updates rendered as one vector update, with the accumulators it updates. */
export type LaneUpdate = LaneStep & { readonly group: LaneGroup };

export interface LanePlan {
  /** Updates: the first of a run does the vector update, the rest (null) nothing. */
  readonly updates: Map<Stmt, LaneUpdate | null>;
  /** Loops whose groups are packed into vectors before them and unpacked after. */
  readonly groups: Map<Stmt, LaneGroup[]>;
  /** Definitions only the vector updates consumed (the lanes' products and loads): not rendered. */
  readonly skipped: Set<string>;
}

/**
 * Finds the vector runs of every reduce loop in `body` (float32 sums of products over packed lanes). The plan
 * is keyed by statement, so it comes with its own copy of the body (lowering may share a statement object
 * between two places, a tile and its ragged tail): render that copy.
 */
export function planLanes(source: readonly Stmt[], widths: readonly number[]): { body: Stmt[]; plan: LanePlan } {
  const copy = (stmts: readonly Stmt[]): Stmt[] =>
    stmts.map((s) => (s.kind === "loop" ? { ...s, body: copy(s.body) } : { ...s }));
  const body = copy(source);
  const plan: LanePlan = { updates: new Map(), groups: new Map(), skipped: new Set() };
  const uses = new Map<string, number>();
  countUses(body, uses);
  const everyDef = new Map<string, Def>();
  collectDefs(body, everyDef);
  // (the loops enclosing the one visited, outermost first)
  const visit = (block: readonly Stmt[], enclosing: readonly (Stmt & { kind: "loop" })[]): void => {
    for (const s of block)
      if (s.kind === "loop") {
        planLoop(s, plan, uses, widths, everyDef);
        hoistGroups(s, enclosing, plan);
        visit(s.body, [...enclosing, s]);
      }
  };
  visit(body, []);
  return { body, plan };
}

/**
 * Moves `loop`'s vector accumulators out through the reduce loops around it whose bodies touch them nowhere
 * else (a sum over two axes, r0 { r1 { ... } }): packed once for the whole nest, not once per trip of the
 * outer loop. Packing 6 vectors from 96 scalars and back every 20 steps of a tied weight's gradient (160
 * terms as 8 x 20) had made it slower than the scalar form.
 */
function hoistGroups(
  loop: Stmt & { kind: "loop" },
  enclosing: readonly (Stmt & { kind: "loop" })[],
  plan: LanePlan,
): void {
  const groups = plan.groups.get(loop);
  if (!groups) return;
  let at = loop;
  for (let i = enclosing.length - 1; i >= 0; i--) {
    const parent = enclosing[i]!;
    if (!parent.var.startsWith("r")) break;
    const others = parent.body.filter((t) => t !== at);
    const names = new Set<string>();
    readNames(others, names);
    updatedNames(others, names);
    for (const t of others) if (t.kind === "acc") names.add(t.name);
    if (groups.some((g) => g.accs.some((a) => names.has(a)))) break;
    at = parent;
  }
  if (at === loop) return;
  plan.groups.delete(loop);
  plan.groups.set(at, [...(plan.groups.get(at) ?? []), ...groups]);
}

/** The accumulators updated anywhere in `stmts`, nested loops included. */
function updatedNames(stmts: readonly Stmt[], into: Set<string>): void {
  for (const s of stmts) {
    if (s.kind === "loop") updatedNames(s.body, into);
    else if (s.kind === "update") into.add(s.name);
  }
}

type Def = Stmt & { kind: "def" };
type Update = Stmt & { kind: "update" };

function planLoop(
  loop: Stmt & { kind: "loop" },
  plan: LanePlan,
  uses: ReadonlyMap<string, number>,
  widths: readonly number[],
  everyDef: ReadonlyMap<string, Def>,
): void {
  const defs = new Map<string, Def>();
  for (const s of loop.body) if (s.kind === "def") defs.set(s.name, s);
  const updates = loop.body.filter((s): s is Update => s.kind === "update");
  // every run of updates that is one vector multiply-add, keyed by its accumulators
  const runs: { updates: Update[]; accs: string[]; lane: LaneStep; consumed: [string, string][] }[] = [];
  for (let i = 0; i < updates.length; ) {
    const run = widths
      .map(
        (w) =>
          vectorRun(updates.slice(i, i + w), defs) ?? sumRun(updates.slice(i, i + w), { loop: defs, every: everyDef }),
      )
      .find((r) => r !== undefined);
    if (!run) {
      i++;
      continue;
    }
    runs.push(run);
    i += run.updates.length;
  }
  if (runs.length === 0) runs.push(...groupedRuns(updates, defs, widths));
  if (runs.length === 0) return;
  // a group is its accumulators in lane order; every update of them must be in one of its runs
  const groups = new Map<string, { accs: string[]; runs: typeof runs }>();
  for (const run of runs) {
    const key = run.accs.join(",");
    const group = groups.get(key) ?? { accs: run.accs, runs: [] };
    group.runs.push(run);
    groups.set(key, group);
  }
  // the vector holds the accumulators for the whole loop: nothing else in it may read or update them
  const readInLoop = new Set<string>();
  readNames(loop.body, readInLoop);
  const updatedDeeper = new Set<string>();
  updatedNames(
    loop.body.filter((s) => s.kind === "loop"),
    updatedDeeper,
  );
  const claimed = new Set<string>();
  const consumedUses = new Map<string, number>();
  for (const { accs, runs: groupRuns } of groups.values()) {
    const own = new Set(groupRuns.flatMap((r) => r.updates));
    const ok =
      accs.every((a) => !claimed.has(a) && !readInLoop.has(a)) &&
      updates.every((u) => !accs.includes(u.name) || own.has(u)) &&
      !accs.some((a) => updatedDeeper.has(a));
    if (!ok) continue;
    accs.forEach((a) => claimed.add(a));
    const group: LaneGroup = { accs, vector: `${accs[0]}_v` };
    for (const run of groupRuns) {
      run.updates.forEach((u, j) => plan.updates.set(u, j === 0 ? { group, ...run.lane } : null));
      for (const [product] of run.consumed) consumedUses.set(product, (consumedUses.get(product) ?? 0) + 1);
    }
    plan.groups.set(loop, [...(plan.groups.get(loop) ?? []), group]);
  }
  // the lanes' products where nothing but the vector updates reads them, then their loads where nothing but
  // those products does
  for (const [name, n] of consumedUses) if (uses.get(name) === n) plan.skipped.add(name);
  const loadUses = new Map<string, number>();
  for (const group of groups.values())
    for (const run of group.runs)
      for (const [product, load] of run.consumed) {
        if (plan.skipped.has(product)) loadUses.set(load, (loadUses.get(load) ?? 0) + 1);
      }
  for (const [name, n] of loadUses) if (uses.get(name) === n) plan.skipped.add(name);
}

/**
 * Vector runs among updates whose lanes are not neighbours in statement order. A tile whose lanes run along its
 * first axis (lanes across x in x @ W^T, the rows along W's rows) updates lane 0 of every row, then lane 1, and
 * so on (and with two vectors of lanes, in whatever order the upcasts give). So the updates are grouped by the
 * value they share (a row's broadcast scalar), each group ordered by where its lane loads read, and cut into
 * runs of `w`: every update must land in one run. Each accumulator still takes its products in the same order.
 */
function groupedRuns(updates: readonly Update[], defs: ReadonlyMap<string, Def>, widths: readonly number[]) {
  type Run = NonNullable<ReturnType<typeof vectorRun>>;
  const product = (u: Update) => {
    const def = u.value.kind === "val" ? defs.get(u.value.name) : undefined;
    return def?.expr.op === "MUL" ? def.expr.srcs : undefined;
  };
  const loadOffset = (o: Operand | undefined, base: Idx | undefined): number | undefined => {
    const d = o?.kind === "val" ? defs.get(o.name) : undefined;
    if (d?.expr.op !== "LOAD" || !base) return undefined;
    const diff = iadd(d.expr.index, imul(base, -1));
    return diff.kind === "const" ? diff.value : undefined;
  };
  const firstLoad = (o: Operand | undefined): Idx | undefined => {
    const d = o?.kind === "val" ? defs.get(o.name) : undefined;
    return d?.expr.op === "LOAD" ? d.expr.index : undefined;
  };
  for (const w of widths)
    for (const side of [0, 1]) {
      const groups = new Map<string, Update[]>();
      for (const u of updates) {
        const scalar = product(u)?.[side];
        if (!scalar) return [];
        const key = scalar.kind === "val" ? scalar.name : `${scalar.value}`;
        const group = groups.get(key);
        if (group) group.push(u);
        else groups.set(key, [u]);
      }
      const runs: Run[] = [];
      for (const group of groups.values()) {
        if (group.length % w !== 0) break;
        const base = firstLoad(product(group[0]!)?.[1 - side]);
        const offsets = group.map((u) => loadOffset(product(u)?.[1 - side], base));
        if (offsets.some((o) => o === undefined)) break;
        const sorted = group.map((u, i) => ({ u, at: offsets[i]! })).sort((a, b) => a.at - b.at);
        for (let i = 0; i < sorted.length; i += w) {
          const run = vectorRun(
            sorted.slice(i, i + w).map((x) => x.u),
            defs,
          );
          if (run) runs.push(run);
        }
      }
      if (runs.reduce((n, r) => n + r.updates.length, 0) === updates.length) return runs;
    }
  return [];
}

/**
 * `run` as one vector multiply-add, if it is one: float32 sums of fused products, all with one scalar factor,
 * the other factors float32 loads of one buffer at consecutive indices, each into its own accumulator.
 */
function vectorRun(run: readonly Update[], defs: ReadonlyMap<string, Def>) {
  if (run.length !== 16 && run.length !== 8) return undefined; // the prelude's tg_f32x16 and tg_f32x8
  const products = run.map((u) => {
    if (u.op !== "ADD" || u.unfused || u.dtype.name !== "float32" || u.value.kind !== "val") return undefined;
    const def = defs.get(u.value.name);
    return def?.expr.op === "MUL" && def.dtype.name === "float32" ? { def, srcs: def.expr.srcs } : undefined;
  });
  if (products.some((p) => p === undefined) || new Set(run.map((u) => u.name)).size !== run.length) return undefined;
  const first = products[0]!.srcs;
  for (const side of [0, 1]) {
    const scalar = first[side]!;
    if (products.some((p) => !sameOperand(p!.srcs[side]!, scalar))) continue;
    const base = neighbourLoads(
      products.map((p) => p!.srcs[1 - side]!),
      defs,
      "float32",
    );
    if (!base) continue;
    const consumed = products.map((p): [string, string] => [
      p!.def.name,
      (p!.srcs[1 - side] as Operand & { kind: "val" }).name,
    ]);
    return {
      updates: [...run],
      accs: run.map((u) => u.name),
      lane: { kind: "fma" as const, scalar, buf: base.buf, index: base.index },
      consumed,
    };
  }
  return undefined;
}

/**
 * `run` as one vector sum, if it is one: float32 sums, each into its own accumulator, of terms that are the
 * same expression lane by lane over neighbouring loads (laneTerm). A product term not marked unfused is added
 * as the scalar form adds it, by a fused multiply-add. The lanes' scalar definitions stay (nothing else reads
 * them: the C compiler drops them).
 */
function sumRun(run: readonly Update[], defs: Defs) {
  if (run.length !== 16 && run.length !== 8) return undefined;
  const op = run[0]!.op;
  if (
    run.some(
      (u) => u.op !== op || u.dtype.name !== "float32" || u.value.kind !== "val" || !!u.unfused !== !!run[0]!.unfused,
    )
  )
    return undefined;
  if (new Set(run.map((u) => u.name)).size !== run.length) return undefined;
  if (op === "MAX") {
    const term = laneTerm(
      run.map((u) => u.value),
      defs,
    );
    return term && readsLanes(term)
      ? {
          updates: [...run],
          accs: run.map((u) => u.name),
          lane: { kind: "max" as const, term },
          consumed: [] as [string, string][],
        }
      : undefined;
  }
  const tops = run.map((u) => defs.loop.get((u.value as Operand & { kind: "val" }).name));
  const fused = !run[0]!.unfused && tops.every((d) => d?.expr.op === "MUL" && d.dtype.name === "float32");
  const term = fused
    ? binary(
        "MUL",
        tops.map((d) => (d!.expr as { srcs: readonly Operand[] }).srcs),
        defs,
      )
    : laneTerm(
        run.map((u) => u.value),
        defs,
      );
  if (!term || !readsLanes(term)) return undefined;
  const lane: LaneStep =
    fused && term.kind === "alu"
      ? { kind: "fusedSum", factors: [term.srcs[0]!, term.srcs[1]!] }
      : { kind: "sum", term };
  return { updates: [...run], accs: run.map((u) => u.name), lane, consumed: [] as [string, string][] };
}

/** The loop's definitions (lane terms), and every definition of the kernel (to tell equal values apart from lanes). */
interface Defs {
  readonly loop: ReadonlyMap<string, Def>;
  readonly every: ReadonlyMap<string, Def>;
}

/** Operands lane by lane as one vector term, if they are one (see LaneTerm). */
function laneTerm(operands: readonly Operand[], defs: Defs): LaneTerm | undefined {
  const first = operands[0]!;
  if (first.dtype.name !== "float32") return undefined;
  // one value for every lane: the same name, or copies of one computation (hoisting copies it lane by lane)
  if (operands.every((o) => sameValue(o, first, defs.every, 8))) return { kind: "splat", operand: first };
  // neighbouring loads hoisted out of the loop (a column's bias read once a strip): read again, as one vector
  // (hoisting never moves a load of memory the kernel writes, so the values are the same)
  if (operands.every((o) => o.kind === "val" && !defs.loop.has(o.name))) {
    const hoisted = neighbourLoads(operands, defs.every, "float32");
    return hoisted && { kind: "load", ...hoisted };
  }
  const found = operands.map((o) => (o.kind === "val" ? defs.loop.get(o.name) : undefined));
  if (found.some((d) => d?.dtype.name !== "float32" || d.expr.op !== found[0]!.expr.op)) return undefined;
  const exprs = found.map((d) => d!.expr);
  const base = exprs[0]!;
  if (base.op === "LOAD") {
    const loads = neighbourLoads(operands, defs.loop, "float32");
    return loads && { kind: "load", ...loads };
  }
  if (base.op === "ADD" || base.op === "MUL")
    return binary(
      base.op,
      exprs.map((e) => (e as { srcs: readonly Operand[] }).srcs),
      defs,
    );
  if (base.op === "CAST") {
    // (float) of neighbouring int32 loads
    const loads = neighbourLoads(
      exprs.map((e) => (e as { srcs: readonly Operand[] }).srcs[0]!),
      defs.loop,
      "int32",
    );
    return loads && { kind: "intLoad", ...loads };
  }
  if (base.op === "NEG") {
    const src = laneTerm(
      exprs.map((e) => (e as { srcs: readonly Operand[] }).srcs[0]!),
      defs,
    );
    return src && { kind: "alu", op: "NEG", srcs: [src] };
  }
  if (base.op === "WHERE") {
    const srcs = exprs.map((e) => (e as { srcs: readonly Operand[] }).srcs);
    const mask = neighbourLoads(
      srcs.map((s) => s[0]!),
      defs.loop,
      "bool",
    );
    const a =
      mask &&
      laneTerm(
        srcs.map((s) => s[1]!),
        defs,
      );
    const b =
      a &&
      laneTerm(
        srcs.map((s) => s[2]!),
        defs,
      );
    return b && { kind: "select", mask: mask!, srcs: [a!, b] };
  }
  return undefined;
}

/**
 * Where lane j's operand is an unguarded load of `dtype` from element j of one run of a buffer (float32 lanes,
 * int32 ones to convert, a select's bools), that run's buffer and first index.
 */
function neighbourLoads(
  operands: readonly Operand[],
  defs: ReadonlyMap<string, Def>,
  dtype: string,
): { buf: number; index: Idx } | undefined {
  const loads = operands.map((o) => {
    const d = o.kind === "val" ? defs.get(o.name) : undefined;
    return d?.dtype.name === dtype && d.expr.op === "LOAD" && d.expr.valid.length === 0 ? d.expr : undefined;
  });
  const base = loads[0];
  if (!base || loads.some((l, j) => !l || l.buf !== base.buf || l.index.key !== iadd(base.index, iconst(j)).key))
    return undefined;
  return { buf: base.buf, index: base.index };
}

/** Whether two operands hold the same value: the same operand, or definitions of the same computation. */
function sameValue(a: Operand, b: Operand, defs: ReadonlyMap<string, Def>, depth: number): boolean {
  if (sameOperand(a, b)) return true;
  if (a.kind !== "val" || b.kind !== "val" || depth === 0) return false;
  const [da, db] = [defs.get(a.name), defs.get(b.name)];
  if (!da || !db || da.dtype.name !== db.dtype.name || da.expr.op !== db.expr.op) return false;
  const [ea, eb] = [da.expr, db.expr];
  if (ea.op === "LOAD" && eb.op === "LOAD") {
    const bounds = (l: typeof ea): string => l.valid.map((v) => `${v.expr.key}:${v.lo}:${v.hi}`).join(",");
    return ea.buf === eb.buf && ea.index.key === eb.index.key && bounds(ea) === bounds(eb);
  }
  if (!("srcs" in ea) || !("srcs" in eb) || ea.srcs.length !== eb.srcs.length) return false;
  return ea.srcs.every((s, i) => sameValue(s, eb.srcs[i]!, defs, depth - 1));
}

/** Every definition in `stmts`, nested loops included (names are unique in a kernel). */
function collectDefs(stmts: readonly Stmt[], into: Map<string, Def>): void {
  for (const s of stmts) {
    if (s.kind === "loop") collectDefs(s.body, into);
    else if (s.kind === "def") into.set(s.name, s);
  }
}

function binary(op: "ADD" | "MUL", srcs: readonly (readonly Operand[])[], defs: Defs): LaneTerm | undefined {
  const a = laneTerm(
    srcs.map((s) => s[0]!),
    defs,
  );
  const b =
    a &&
    laneTerm(
      srcs.map((s) => s[1]!),
      defs,
    );
  return b && { kind: "alu", op, srcs: [a!, b] };
}

/** Whether a term reads some neighbouring loads (else every lane adds the same value: not worth a vector). */
const readsLanes = (t: LaneTerm): boolean =>
  t.kind === "load" || t.kind === "intLoad" || ((t.kind === "alu" || t.kind === "select") && t.srcs.some(readsLanes));

const sameOperand = (a: Operand, b: Operand): boolean =>
  a.kind === "val" ? b.kind === "val" && a.name === b.name : b.kind === "lit" && Object.is(a.value, b.value);

/** The names statements read (operands, update values, stored values), nested loops included. */
function readNames(stmts: readonly Stmt[], into: Set<string>): void {
  for (const s of stmts) {
    if (s.kind === "loop") readNames(s.body, into);
    else if (s.kind === "def" && "srcs" in s.expr) s.expr.srcs.forEach((o) => o.kind === "val" && into.add(o.name));
    else if ((s.kind === "update" || s.kind === "store") && s.value.kind === "val") into.add(s.value.name);
  }
}

/** How many statements read each name (operands, update values, stores). */
function countUses(stmts: readonly Stmt[], uses: Map<string, number>): void {
  const use = (o: Operand): void => {
    if (o.kind === "val") uses.set(o.name, (uses.get(o.name) ?? 0) + 1);
  };
  for (const s of stmts) {
    if (s.kind === "loop") countUses(s.body, uses);
    else if (s.kind === "def" && "srcs" in s.expr) s.expr.srcs.forEach(use);
    else if (s.kind === "update" || s.kind === "store") use(s.value);
  }
}
