// Lowers one scheduled kernel (a root UOp whose inputs are buffers) into the loop IR.
// Movement ops become index arithmetic; each reduce becomes a loop with an accumulator.
// Options (opts.ts) shape the loops: upcast output axes become lanes computed in lockstep, sharing
// loads and reduce loops; the innermost reduce loop can be unrolled. A one-hot sum (embedding, gather)
// collapses to one guarded load at the runtime index; on host backends, one whose hot index is an output
// row (their gradients) becomes a scatter: each summed row added where its index points.
import { dtypes, type DType } from "../dtype.ts";
import {
  type Bound,
  type Idx,
  andBound,
  condKey,
  flatIndex,
  iadd,
  iconst,
  idiv,
  imul,
  iruntime,
  ivar,
  replaceSubexpressions,
  splitAtMultiple,
  substitute,
  unflatIndex,
} from "../shape/symbolic.ts";
import { type Pads, type ReduceArg, type UOp, isElementwise } from "../uop.ts";
import type { AluOp, Expr, KernelIR, Operand, Stmt } from "./ir.ts";
import { type KernelSpec, blockedReduce } from "./kernel_spec.ts";
import { type KernelOpts, NO_OPTS, optsKey, splittingChunk, upcastWidth } from "./opts.ts";
import { heuristicOpts } from "./heuristics.ts";
import {
  type OneHot,
  type ScatterPlan,
  dtypeRange,
  isMovement,
  matchOneHot,
  moveIndex,
  scatterPlan,
} from "./one_hot.ts";

const specs = new WeakMap<KernelIR, KernelSpec>();

/** Kernels read back from the disk cache (engine/lowered_cache.ts), with the spec they were lowered for. */
const adopted = new WeakMap<KernelIR, KernelSpec>();

/** The spec a kernel was lowered from, to lower it again with other options (BEAM). */
export function kernelSpecOf(kernel: KernelIR): KernelSpec | undefined {
  const known = specs.get(kernel);
  if (known || !adopted.has(kernel)) return known;
  // a kernel another process lowered: the lowering's choice of spec (its merged axes) is made again
  const spec = specs.get(lowerKernel(adopted.get(kernel)!));
  if (spec) specs.set(kernel, spec);
  return spec;
}

/** Registers `kernel`, read back from the disk cache, as the lowering of `spec`. */
export function adoptLowered(kernel: KernelIR, spec: KernelSpec): void {
  adopted.set(kernel, spec);
}

/** The kernel with `opts`, or with the hand-written heuristics' choice. */
export function lowerKernel(spec: KernelSpec, opts?: KernelOpts): KernelIR {
  // an embedding's or a gather's gradient adds each row where its index points, instead of testing every
  // row against every index; it has no options to choose
  const plan = spec.host ? scatterPlan(spec) : undefined;
  if (plan) {
    const kernel = new Lowerer({ ...spec, inputs: new Map([...spec.inputs, [plan.reduce, 0]]) }, NO_OPTS).runScatter(
      plan,
    );
    specs.set(kernel, spec);
    return kernel;
  }
  // a concatenation (cat, the all-gather of an all-reduce) copies each piece with its own loops,
  // instead of testing every piece's bounds at every element
  const pieces = opts ? undefined : catPieces(spec.value, (n) => spec.inputs.has(n));
  if (pieces) {
    const kernel = new Lowerer(spec, NO_OPTS).runPieces(pieces);
    specs.set(kernel, spec);
    return kernel;
  }
  if (opts) {
    const kernel = new Lowerer(spec, opts).run();
    specs.set(kernel, spec);
    return kernel;
  }
  const chosen = spec.host ? mergeAxes(spec) : tiled(spec);
  const kernel = new Lowerer(chosen.spec, chosen.opts).run();
  specs.set(kernel, chosen.spec);
  return kernel;
}

/** The heuristics' options for `spec`, with what they were judged from (its plain lowering). */
function tiled(spec: KernelSpec): { spec: KernelSpec; plain: KernelIR; opts: KernelOpts } {
  const plain = new Lowerer(spec, NO_OPTS).run();
  return { spec, plain, opts: heuristicOpts(spec, plain) };
}

/** Floor divisions and modulos in a kernel's indices and bounds: what merging loops must not add. */
function divisions(body: readonly Stmt[]): number {
  const count = (e: Idx): number =>
    e.kind === "div" || e.kind === "mod"
      ? 1 + count(e.a)
      : e.kind === "mul"
        ? count(e.a)
        : e.kind === "sum"
          ? e.terms.reduce((n, t) => n + count(t), 0)
          : 0;
  return body.reduce((n, s) => {
    if (s.kind === "loop") return n + divisions(s.body);
    if (s.kind === "store") return n + count(s.index) + (s.valid ?? []).reduce((m, b) => m + count(b.expr), 0);
    if (s.kind !== "def") return n;
    const { expr } = s;
    if (expr.op === "LOAD") return n + count(expr.index) + expr.valid.reduce((m, b) => m + count(b.expr), 0);
    if (expr.op === "VALID") return n + expr.valid.reduce((m, b) => m + count(b.expr), 0);
    return expr.op === "INDEX" ? n + count(expr.index) : n;
  }, 0);
}

/**
 * The kernel with neighbouring axes merged wherever every index stays as simple. Summed axes first: a sum over
 * a batch's rows and a sequence's positions is one loop (not a short loop in another, which gcc 12.2 can
 * vectorise wrongly: renderer/c.ts hasFragileLoops), and a one-axis sum can be K-blocked. Then the output's (a
 * batch of 8 sequences of 20 masked positions is 160 rows): a host backend's register tile then has rows to
 * take along the merged axis (8 rather than the 4 that divide 20), and its cost model sees one operand, not a batch.
 */
function mergeAxes(spec: KernelSpec): ReturnType<typeof tiled> {
  // no more divisions in the plain kernel, and as many lanes in the heuristics' tile (merging a matmul's two
  // tile axes would leave one)
  const judge = (s: KernelSpec) => {
    const t = tiled(s);
    return { ...t, divs: divisions(t.plain.body), lanes: upcastWidth(t.opts) };
  };
  let best = judge(spec);
  const rejected = new Set<string>();
  for (let next = mergeReducePair(best.spec, rejected); next; next = mergeReducePair(best.spec, rejected)) {
    const candidate = judge(next.spec);
    if (candidate.divs <= best.divs && candidate.lanes >= best.lanes) best = candidate;
    else rejected.add(next.pair);
  }
  let shape = [...best.spec.value.shape];
  for (let d = 0; d + 1 < shape.length; ) {
    if (shape[d] === 1 || shape[d + 1] === 1) {
      d++;
      continue;
    }
    const merged = [...shape.slice(0, d), shape[d]! * shape[d + 1]!, ...shape.slice(d + 2)];
    const candidate = judge({ ...best.spec, value: best.spec.value.reshape(merged) });
    if (candidate.divs <= best.divs && candidate.lanes >= best.lanes) [shape, best] = [merged, candidate];
    else d++;
  }
  return best;
}

/**
 * `spec` with one sum's two neighbouring summed axes read as one (its source reshaped, the second axis left 1):
 * the first pair not `rejected`, named `pair` (the sum's id and the first axis); undefined when none is left.
 */
function mergeReducePair(
  spec: KernelSpec,
  rejected: ReadonlySet<string>,
): { spec: KernelSpec; pair: string } | undefined {
  let found: { node: UOp; axis: number; next: number } | undefined;
  const seen = new Set<UOp>();
  const find = (n: UOp): void => {
    if (found || seen.has(n) || spec.inputs.has(n)) return;
    seen.add(n);
    if (n.op === "REDUCE") {
      const { axes } = n.arg as ReduceArg;
      // neighbours: nothing but axes of size 1 between them
      const shape = n.src[0]!.shape;
      for (let i = 0; !found && i + 1 < axes.length; i++) {
        const [a, b] = [axes[i]!, axes[i + 1]!];
        if (shape.slice(a + 1, b).every((s) => s === 1) && !rejected.has(`${n.id}:${a}`))
          found = { node: n, axis: a, next: b };
      }
    }
    n.src.forEach(find);
  };
  find(spec.value);
  if (!found) return undefined;
  const { node, axis, next } = found;
  const { op, axes } = node.arg as ReduceArg;
  const src = node.src[0]!;
  // [.., A, 1, .., B, ..] read as [.., A*B, 1, .., 1, ..]: the sum keeps its shape
  const merged = src.reshape(src.shape.map((s, d) => (d === axis ? s * src.shape[next]! : d === next ? 1 : s)));
  const replacement = merged.reduce(
    op,
    axes.filter((a) => a !== next),
  );
  const value = spec.value.replaceNodes(new Map([[node, replacement]]), (n) => spec.inputs.has(n));
  return { spec: { ...spec, value }, pair: `${node.id}:${axis}` };
}

/** One value wanted: `node` at per-axis index `idx`, where `valid` holds. */
interface Request {
  readonly node: UOp;
  readonly idx: readonly Idx[];
  readonly valid: readonly Bound[];
}

interface Scope {
  stmts: Stmt[];
  cache: Map<string, Operand>;
  trips: number;
}

class Lowerer {
  private names = 0;
  private loops = 0;
  private scopes: Scope[] = [];
  private flops = 0;
  private hasReduce = false;
  /** While collecting (a dry run), the reduces met, instead of emitting their loops. */
  private collecting: Request[] | null = null;
  /**
   * A K-blocked kernel's sum while its blocks are lowered: its loop covers `size` steps from `start`, on the partial
   * sums.
   */
  private block: { node: UOp; start: Idx; size: number } | undefined;
  /** A K-blocked kernel's sum while its epilogue is lowered: read back from the output. */
  private partials: UOp | undefined;

  constructor(
    private readonly spec: KernelSpec,
    private readonly opts: KernelOpts,
  ) {}

  run(): KernelIR {
    if (this.opts.kblock) return this.runBlocked(this.opts.kblock);
    const root = this.spec.value;
    const body: Stmt[] = [];
    this.scopes.push({ stmts: body, cache: new Map(), trips: 1 });
    const loopCount = this.tiles((lanes) => {
      const values = this.genAll(lanes.map((idx) => ({ node: root, idx, valid: [] })));
      lanes.forEach((idx, i) =>
        this.emit({
          kind: "store",
          buf: 0,
          index: flatIndex(idx, root.shape),
          value: values[i]!,
          dtype: this.spec.buffers[0]!.dtype,
        }),
      );
    });
    return this.kernel(this.hasReduce ? "r" : "E", body, Math.min(this.opts.parallel, loopCount), optsKey(this.opts));
  }

  /**
   * The output's loops under the options (upcast axes step by their amount, `outer` axes first), and in them
   * `fill` given every lane's per-axis index (each combination of upcast offsets is one lane). Returns how
   * many loops it opened; they are closed again when it returns.
   */
  private tiles(fill: (lanes: Idx[][]) => void): number {
    const root = this.spec.value;
    const amounts = root.shape.map((size, d) => {
      const upcasts = this.opts.upcast.filter((x) => x.axis === d);
      const u = upcasts.reduce((a, x) => a * x.amount, 1);
      // the vector axis alone may leave a remainder (upcast alone): it runs as a narrower last tile
      const ragged = upcasts.length === 1 && this.opts.upcast[0] === upcasts[0];
      if (size % u !== 0 && !ragged)
        throw new Error(`lowerKernel: upcast ${u} does not divide axis ${d} of size ${size}`);
      return u;
    });
    const ragged = amounts.findIndex((u, d) => root.shape[d]! % u !== 0);
    const nest = (
      widths: readonly number[],
      trips: readonly number[],
      base: readonly number[],
      oneLoop = false,
    ): number => {
      const depth = this.scopes.length;
      const order = [...this.opts.outer, ...root.shape.map((_, d) => d).filter((d) => !this.opts.outer.includes(d))];
      const outer = new Array<Idx>(root.shape.length);
      let loops = 0;
      // a chunked axis (not in a last tile that has one tile along it): its chunk loop first, tiles within below
      const chunk = this.opts.chunk && splittingChunk(this.opts.chunk, trips[this.opts.chunk.axis]!);
      if (chunk) {
        const n = trips[chunk.axis]! / chunk.tiles;
        if (!Number.isInteger(n))
          throw new Error(
            `lowerKernel: chunks of ${chunk.tiles} tiles do not divide axis ${chunk.axis}'s ${trips[chunk.axis]} tiles`,
          );
        this.openLoop(`c${chunk.axis}`, n);
        loops++;
      }
      for (const d of order) {
        const t = d === chunk?.axis ? chunk.tiles : trips[d]!;
        outer[d] = t === 1 ? iconst(0) : ivar(`i${d}`, t);
        if (t > 1) this.openLoop(`i${d}`, t), loops++;
        if (d === chunk?.axis) outer[d] = iadd(imul(ivar(`c${d}`, trips[d]! / t), t), outer[d]!);
      }
      // a last tile with no output loop of its own (a 1-D output) gets one of one trip: the loops split across
      // threads must be output loops, and without one here the whole kernel ran on one thread (the vocabulary
      // bias's gradient, a sum over 160 rows of 30522 columns)
      if (oneLoop && loops === 0) this.openLoop(`i${ragged}`, 1);
      fill(lanesOf(widths, outer, base));
      this.scopes.length = depth;
      return oneLoop ? Math.max(loops, 1) : loops;
    };
    // every lane's per-axis index in a tile at `outer`
    const lanesOf = (widths: readonly number[], outer: readonly Idx[], base: readonly number[]): Idx[][] => {
      let lanes: Idx[][] = [[]];
      root.shape.forEach((_, d) => {
        const u = widths[d]!;
        const tile = (c: number): Idx => (u === 1 ? outer[d]! : iadd(imul(outer[d]!, u), iconst(c)));
        const at = (c: number): Idx => (base[d] === 0 ? tile(c) : iadd(tile(c), iconst(base[d]!)));
        lanes = lanes.flatMap((lane) => Array.from({ length: u }, (_, c) => [...lane, at(c)]));
      });
      return lanes;
    };
    const full = root.shape.map((size, d) => Math.floor(size / amounts[d]!));
    const zero = root.shape.map(() => 0);
    let loops = full[ragged] === 0 ? Infinity : nest(amounts, full, zero);
    if (ragged >= 0) {
      // the last tile along the ragged axis: as many lanes as are left, at the end
      const rest = root.shape[ragged]! % amounts[ragged]!;
      const at = (d: number, inRest: number, otherwise: number): number => (d === ragged ? inRest : otherwise);
      loops = Math.min(
        loops,
        nest(
          amounts.map((u, d) => at(d, rest, u)),
          full.map((t, d) => at(d, 1, t)),
          zero.map((_, d) => at(d, full[d]! * amounts[d]!, 0)),
          this.opts.parallel > 0 && loops !== Infinity,
        ),
      );
    }
    return loops;
  }

  /**
   * A kernel whose one long sum runs in blocks of `size` steps (kblock): zero the output, then for each block
   * (in order) every output tile adds the block's terms to its partial sum, loaded from the output and stored
   * back; then the last, shorter block; then what the kernel stores is computed from the finished sums. The
   * terms are added in the plain kernel's order, so the results are the same bits; what changes is that a
   * block of the operands stays in cache while every tile reads it, instead of each tile streaming the whole
   * length of both (BERT's hidden-state gradient g @ W reads 30522 x 128 of W per tile).
   */
  private runBlocked(size: number): KernelIR {
    const reduce = blockedReduce(this.spec);
    if (!reduce)
      throw new Error(
        `lowerKernel: kblock needs one float sum over one axis that the kernel stores (${optsKey(this.opts)})`,
      );
    const root = this.spec.value;
    const dtype = this.spec.buffers[0]!.dtype;
    const body: Stmt[] = [];
    this.scopes.push({ stmts: body, cache: new Map(), trips: 1 });
    const length = reduce.src[0]!.shape[(reduce.arg as ReduceArg).axes[0]!]!;
    const [blocks, rest] = [Math.floor(length / size), length % size];
    // the partial sums live in the output at the sum's own (row-major) index, which a reshape keeps
    const atSum = (idx: readonly Idx[]): Idx[] => unflatIndex(flatIndex(idx, root.shape), reduce.shape);
    const sumPass = (): number =>
      this.tiles((lanes) => {
        const requests = lanes.map((idx) => ({ node: reduce, idx: atSum(idx), valid: [] }));
        const values = this.genAll(requests);
        requests.forEach((r, i) =>
          this.emit({ kind: "store", buf: 0, index: flatIndex(r.idx, reduce.shape), value: values[i]!, dtype }),
        );
      });
    const plainLoops = (fill: (idx: Idx[]) => void): number => {
      const depth = this.scopes.length;
      const idx = root.shape.map((n, d) => (n === 1 ? iconst(0) : (this.openLoop(`i${d}`, n), ivar(`i${d}`, n))));
      fill(idx);
      this.scopes.length = depth;
      return idx.filter((i) => i.kind !== "const").length;
    };
    let loops = plainLoops((idx) =>
      this.emit({
        kind: "store",
        buf: 0,
        index: flatIndex(idx, root.shape),
        value: { kind: "lit", value: 0, dtype },
        dtype,
      }),
    );
    if (blocks > 0) {
      const depth = this.scopes.length;
      this.openLoop("kb", blocks, true);
      this.block = { node: reduce, start: imul(ivar("kb", blocks), size), size };
      loops = Math.min(loops, sumPass());
      this.scopes.length = depth;
    }
    if (rest > 0) {
      this.block = { node: reduce, start: iconst(blocks * size), size: rest };
      loops = Math.min(loops, sumPass());
    }
    this.block = undefined;
    if (unwrap(root) !== reduce) {
      // the epilogue: what the kernel stores, with the sum read back from the output
      this.partials = reduce;
      loops = Math.min(
        loops,
        plainLoops((idx) => {
          const [value] = this.genAll([{ node: root, idx, valid: [] }]);
          this.emit({ kind: "store", buf: 0, index: flatIndex(idx, root.shape), value: value!, dtype });
        }),
      );
      this.partials = undefined;
    }
    return this.kernel("r", body, Math.min(this.opts.parallel, loops), optsKey(this.opts));
  }

  /** The kernel as one loop nest per piece of a concatenation, each storing at its offset. */
  runPieces({ axis, pieces, shape }: CatPieces): KernelIR {
    const body: Stmt[] = [];
    this.scopes.push({ stmts: body, cache: new Map(), trips: 1 });
    pieces.forEach(({ src, offset }, p) => {
      const depth = this.scopes.length;
      const idx = src.shape.map((size, d) => {
        if (size === 1) return iconst(0);
        this.openLoop(`p${p}_${d}`, size);
        return ivar(`p${p}_${d}`, size);
      });
      const [value] = this.genAll([{ node: src, idx, valid: [] }]);
      const at = idx.map((i, d) => (d === axis ? iadd(i, iconst(offset)) : i));
      this.emit({
        kind: "store",
        buf: 0,
        index: flatIndex(at, shape),
        value: value!,
        dtype: this.spec.buffers[0]!.dtype,
      });
      this.scopes.length = depth;
    });
    return this.kernel("E", body, pieces.some(({ src }) => src.shape.some((s) => s > 1)) ? 1 : 0, "cat");
  }

  /**
   * The scatter form of a one-hot sum (scatterPlan): for each block of columns (the kept axes: these loops may
   * run in parallel), zero the output rows, then add every summed row where its index points (rows outside
   * the output are dropped, as the dense sum drops them), then compute what the kernel stores from the sums.
   */
  runScatter({ reduce, axis, idx, lanes, laneAxis, match, place, epilogue }: ScatterPlan): KernelIR {
    const root = this.spec.value;
    const body: Stmt[] = [];
    this.scopes.push({ stmts: body, cache: new Map(), trips: 1 });
    const src = reduce.src[0]!;
    const { axes } = reduce.arg as ReduceArg;
    const dtype = this.spec.buffers[0]!.dtype;
    let opened = 0;
    src.shape.forEach((size, d) => {
      if (d === axis || axes.includes(d)) return;
      const trips = d === laneAxis ? size / lanes : size;
      if (trips > 1) {
        this.openLoop(`o${d}`, trips);
        opened++;
      }
    });
    const columns = this.scopes.length;
    const rows = src.shape[axis]!;
    const openRows = (): void => {
      this.openLoop(`row${axis}`, rows);
      if (lanes > 1) this.openLoop(`l${laneAxis}`, lanes);
    };
    // the output element of row `row` in these columns (the reduce's own shape: the summed axes are 1)
    const outputAt = (row: Idx): Idx => place(idx.map((i, d) => (d === axis ? row : axes.includes(d) ? iconst(0) : i)));

    openRows();
    this.emit({ kind: "store", buf: 0, index: outputAt(idx[axis]!), value: { kind: "lit", value: 0, dtype }, dtype });
    this.scopes.length = columns;

    axes.forEach((d) => src.shape[d]! > 1 && this.openLoop(`t${d}`, src.shape[d]!));
    if (lanes > 1) this.openLoop(`l${laneAxis}`, lanes);
    const [hot, value] = this.genAll([
      { node: match.other, idx: match.otherIdx, valid: [] },
      { node: match.value, idx: match.valueIdx, valid: [] },
    ]);
    const row = iadd(
      hot!.kind === "lit" ? iconst(hot!.value) : iruntime(hot!.name, ...dtypeRange(hot!.dtype)),
      imul(match.offset, -1),
    );
    const inside = andBound([], row, 0, rows);
    if (inside !== null) {
      const added = this.hotValue(match, value!, "scatter");
      const at = outputAt(row);
      const old = this.define(reduce.dtype, { op: "LOAD", buf: 0, index: at, valid: inside }, "scatter|old");
      const sum = this.define(reduce.dtype, { op: "ADD", srcs: [old, added] }, "scatter|sum");
      this.emit({ kind: "store", buf: 0, index: at, value: sum, dtype, valid: inside });
    }
    this.scopes.length = columns;

    if (epilogue) {
      openRows();
      const flat = outputAt(idx[axis]!);
      const [out] = this.genAll([{ node: root, idx: unflatIndex(flat, root.shape), valid: [] }]);
      this.emit({ kind: "store", buf: 0, index: flat, value: out!, dtype });
    }
    // without a loop over columns, the top-level loops are the rows and the summed axis: not parallel
    return this.kernel("s", body, opened > 0 ? 1 : 0, "scatter");
  }

  /** The lowered kernel: named by its kind (r: reduce, E: elementwise, s: scatter) and its output shape. */
  private kernel(kind: string, body: Stmt[], parallel: number, opts: string): KernelIR {
    const shape = this.spec.value.shape;
    return {
      name: [kind, ...shape.filter((s) => s !== 1)].join("_"),
      buffers: this.spec.buffers,
      body,
      outputShape: shape,
      flops: this.flops,
      parallel,
      opts,
    };
  }

  private get top(): Scope {
    return this.scopes[this.scopes.length - 1]!;
  }

  private emit(stmt: Stmt): void {
    this.top.stmts.push(stmt);
  }

  private openLoop(name: string, size: number, serial = false): void {
    const loop: Stmt = serial
      ? { kind: "loop", var: name, size, body: [], serial }
      : { kind: "loop", var: name, size, body: [] };
    this.emit(loop);
    this.scopes.push({ stmts: loop.body, cache: new Map(), trips: this.top.trips * size });
  }

  private lookup(key: string): Operand | undefined {
    for (let i = this.scopes.length - 1; i >= 0; i--) {
      const hit = this.scopes[i]!.cache.get(key);
      if (hit) return hit;
    }
    return undefined;
  }

  private define(dtype: DType, expr: Expr, key: string): Operand {
    const name = `v${this.names++}`;
    this.emit({ kind: "def", name, dtype, expr });
    const operand: Operand = { kind: "val", name, dtype };
    this.top.cache.set(key, operand);
    if (expr.op !== "LOAD" && expr.op !== "VALID" && expr.op !== "INDEX" && expr.op !== "CAST" && expr.op !== "BITCAST")
      this.flops += this.top.trips;
    return operand;
  }

  /**
   * Values for several requests at once. The reduces they need are found by a dry run first, so that
   * all lanes of one reduce share one loop; then the values are generated (the reduces hit the cache).
   */
  private genAll(requests: readonly Request[]): Operand[] {
    const found = this.collectReduces(requests);
    const groups = new Map<UOp, Request[]>();
    for (const r of found) groups.set(r.node, [...(groups.get(r.node) ?? []), r]);
    for (const [node, lanes] of groups) this.reduceLanes(node, lanes);
    return requests.map((r) => this.gen(r.node, r.idx, r.valid));
  }

  /** The reduces `requests` read (not those nested inside them), each lane once. */
  private collectReduces(requests: readonly Request[]): Request[] {
    const saved = { names: this.names, flops: this.flops, collecting: this.collecting };
    const found: Request[] = [];
    this.collecting = found;
    this.scopes.push({ stmts: [], cache: new Map(), trips: this.top.trips });
    for (const r of requests) this.gen(r.node, r.idx, r.valid);
    this.scopes.pop();
    Object.assign(this, saved);
    const seen = new Set<string>();
    return found.filter((r) => {
      const key = requestKey(r);
      if (seen.has(key) || this.lookup(key)) return false;
      seen.add(key);
      return true;
    });
  }

  /** The value of `node` at per-axis index `idx`, where `valid` holds (null: never valid, so 0). */
  private gen(node: UOp, idx: readonly Idx[], valid: readonly Bound[] | null): Operand {
    if (valid === null) return { kind: "lit", value: 0, dtype: node.dtype };
    if (node.op === "CONST") return { kind: "lit", value: node.arg as number, dtype: node.dtype };
    const key = requestKey({ node, idx, valid });
    const hit = this.lookup(key);
    if (hit) return hit;

    const slot = this.spec.inputs.get(node);
    if (node.op === "INDEX") return this.define(node.dtype, { op: "INDEX", index: idx[0]! }, key);
    if (slot !== undefined)
      return this.define(node.dtype, { op: "LOAD", buf: slot, index: flatIndex(idx, node.shape), valid }, key);
    if (isElementwise(node.op)) {
      const srcs = node.src.map((s) => this.gen(s, idx, valid));
      return this.define(node.dtype, { op: node.op as AluOp, srcs }, key);
    }
    if (isMovement(node.op)) {
      const moved = moveIndex(node, idx);
      if (moved.inside === null) return { kind: "lit", value: 0, dtype: node.dtype };
      // (not in collectReduces' dry run: a local defined there is dropped with its scope, and a reduce request
      // found with it would name a value the real run never defines)
      const unwrap = node.op === "PAD" && moved.inside.length > 0 && !this.collecting;
      const { srcIdx, inside } = unwrap
        ? this.unwrapGuardedModulo(moved.srcIdx, moved.inside)
        : (moved as { srcIdx: Idx[]; inside: Bound[] });
      const value = this.gen(node.src[0]!, srcIdx, inside.length ? [...valid, ...inside] : valid);
      return inside.length ? this.select(inside, value, key) : value;
    }
    if (node.op === "REDUCE" && node === this.partials)
      return this.define(node.dtype, { op: "LOAD", buf: 0, index: flatIndex(idx, node.shape), valid: [] }, key);
    if (node.op === "REDUCE") {
      if (this.collecting) {
        this.collecting.push({ node, idx, valid });
        return { kind: "val", name: "collecting", dtype: node.dtype };
      }
      this.reduceLanes(node, [{ node, idx, valid }]);
      return this.lookup(key)!;
    }
    if (node.op === "CONTIGUOUS") return this.gen(node.src[0]!, idx, valid);
    throw new Error(`lowerKernel: ${node.op} must be scheduled as its own step, not fused`);
  }

  /**
   * A pad's bound on an index `a mod c + k` (a reshape that skews rows under a pad: a sliding window's gradient)
   * that only the unwrapped branch of the modulo can meet: there `a mod c` is r = a - q*c and `a div c` is q
   * (`splitAtMultiple`). The index below the pad gets those, r held in a local whose range the bound gives, so
   * the reshapes further down simplify as over plain loop variables instead of dividing a term at a time.
   */
  private unwrapGuardedModulo(srcIdx: readonly Idx[], inside: readonly Bound[]): { srcIdx: Idx[]; inside: Bound[] } {
    let index = [...srcIdx];
    const bounds = [...inside];
    for (let b = 0; b < bounds.length; b++) {
      const { expr, lo, hi } = bounds[b]!;
      const terms = expr.kind === "sum" ? expr.terms : [expr];
      const m = terms.find((t) => t.kind === "mod");
      if (m?.kind !== "mod" || terms.some((t) => t !== m && t.kind !== "const")) continue;
      const k = terms.reduce((sum, t) => sum + (t.kind === "const" ? t.value : 0), 0);
      const [low, high] = [Math.max(lo - k, 0), Math.min(hi - k, m.c)];
      const { q, r } = splitAtMultiple(m.a, m.c);
      // a wrapped value (r < 0: a mod c = r + c) must fail the bound; then r >= 0 wherever it holds
      if (low >= high || r.min < -m.c || r.max >= m.c || (r.min < 0 && r.min + m.c < high)) continue;
      const held = this.define(dtypes.int32, { op: "INDEX", index: r }, `${r.key}|unwrapped`);
      if (held.kind !== "val") continue;
      const by = new Map([
        [m.key, iruntime(held.name, Math.max(low, r.min), Math.min(high - 1, r.max))],
        [idiv(m.a, m.c).key, q],
      ]);
      index = index.map((e) => replaceSubexpressions(e, by));
      bounds[b] = { expr: r, lo: low, hi: high };
      for (let o = b + 1; o < bounds.length; o++)
        bounds[o] = { ...bounds[o]!, expr: replaceSubexpressions(bounds[o]!.expr, by) };
    }
    return { srcIdx: index, inside: bounds };
  }

  /** `value` where every bound holds, else 0. */
  private select(bounds: readonly Bound[], value: Operand, key: string): Operand {
    const inside = this.define(dtypes.bool, { op: "VALID", valid: bounds }, `${key}|inside`);
    return this.define(
      value.dtype,
      { op: "WHERE", srcs: [inside, value, { kind: "lit", value: 0, dtype: value.dtype }] },
      key,
    );
  }

  /** One reduce at several lanes: one accumulator per lane, one shared loop nest (or no loop, if it collapses). */
  private reduceLanes(node: UOp, lanes: readonly Request[]): void {
    this.hasReduce = true;
    if (this.collapseOneHot(node, lanes)) return;
    const { op, axes } = node.arg as ReduceArg;
    const src = node.src[0]!;
    const block = this.block?.node === node ? this.block : undefined;
    const last = axes[axes.length - 1]!;
    const lastSize = block ? block.size : src.shape[last]!;
    // split: each step of a trip goes to its own accumulator (a K-blocked sum keeps one: its partial sums); the
    // steps left over when the split does not divide the sum (a vocabulary of 30522) go to the first, after
    const split = !block && this.opts.split && this.opts.split > 1 && lastSize >= this.opts.split ? this.opts.split : 1;
    const unroll = split > 1 ? split : lastSize % this.opts.unroll === 0 ? this.opts.unroll : 1;
    const trips = Math.floor(lastSize / unroll);
    const newAccs = (): string[] => lanes.flatMap(() => Array.from({ length: split }, () => `acc${this.names++}`));
    const declare = (names: readonly string[]): void =>
      names.forEach((name) => this.emit({ kind: "acc", name, dtype: node.dtype, op }));
    const accs = newAccs();
    declare(accs);
    // a long split sum runs in blocks, each summed from 0 into accumulators of its own, then added to the totals
    const blocks =
      split > 1 && op === "ADD" && trips >= 2 * SPLIT_BLOCK_TRIPS ? Math.floor(trips / SPLIT_BLOCK_TRIPS) : 0;
    let blockAccs: string[] = [];
    // a block of a K-blocked sum starts from the partial sum so far (0 + partial: the same bits)
    if (block)
      lanes.forEach((lane, l) => {
        const partial = this.define(
          node.dtype,
          { op: "LOAD", buf: 0, index: flatIndex(lane.idx, node.shape), valid: [] },
          `${requestKey(lane)}|partial`,
        );
        this.emit({ kind: "update", name: accs[l]!, dtype: node.dtype, op, value: partial });
      });
    const outer = this.scopes.length;
    const loopIdx = new Map<number, Idx>();
    for (const axis of axes) {
      if (axis === last && blocks) {
        const blockName = `r${this.loops++}`;
        this.openLoop(blockName, blocks);
        blockAccs = newAccs();
        declare(blockAccs);
        const name = `r${this.loops++}`;
        this.openLoop(name, SPLIT_BLOCK_TRIPS);
        loopIdx.set(axis, iadd(imul(ivar(blockName, blocks), SPLIT_BLOCK_TRIPS), ivar(name, SPLIT_BLOCK_TRIPS)));
        continue;
      }
      const size = axis === last ? trips : src.shape[axis]!;
      const name = `r${this.loops++}`;
      if (size > 1) this.openLoop(name, size);
      loopIdx.set(axis, ivar(name, size));
    }
    // each lane reads the source at the loop variables, `steps` consecutive steps of the last axis per trip
    const accumulate = (
      steps: number,
      lastAt: (step: number) => Idx,
      accOf: (step: number) => number,
      into: readonly string[] = accs,
    ): void => {
      const requests = lanes.flatMap((lane) =>
        Array.from({ length: steps }, (_, step) => {
          const idx = lane.idx.map((i, d) =>
            d === last ? (block ? iadd(block.start, lastAt(step)) : lastAt(step)) : (loopIdx.get(d) ?? i),
          );
          return { node: src, idx, valid: lane.valid };
        }),
      );
      const values = this.genAll(requests);
      lanes.forEach((_, l) => {
        for (let step = 0; step < steps; step++) {
          this.emit({
            kind: "update",
            name: into[l * split + accOf(step)]!,
            dtype: node.dtype,
            op,
            value: values[l * steps + step]!,
            ...(split > 1 ? { unfused: true } : {}),
          });
          this.flops += this.top.trips;
        }
      });
    };
    const loop = loopIdx.get(last)!;
    accumulate(
      unroll,
      (step) => (unroll > 1 ? iadd(imul(loop, unroll), iconst(step)) : loop),
      (step) => (split > 1 ? step : 0),
      blocks ? blockAccs : accs,
    );
    if (blocks) {
      // each block's accumulators into the totals, lane by lane; the trips the blocks leave over go to the totals
      this.scopes.pop();
      blockAccs.forEach((name, i) =>
        this.emit({
          kind: "update",
          name: accs[i]!,
          dtype: node.dtype,
          op,
          value: { kind: "val", name, dtype: node.dtype },
        }),
      );
      this.scopes.pop();
      const rest = trips - blocks * SPLIT_BLOCK_TRIPS;
      if (rest > 0) {
        const name = `r${this.loops++}`;
        if (rest > 1) this.openLoop(name, rest);
        const trip = iadd(iconst(blocks * SPLIT_BLOCK_TRIPS), ivar(name, rest));
        accumulate(
          split,
          (step) => iadd(imul(trip, split), iconst(step)),
          (step) => step,
        );
        if (rest > 1) this.scopes.pop();
      }
    }
    const left = lastSize - trips * unroll;
    if (left > 0) {
      // the steps the split leaves over, in a loop of their own beside the main one, into the first accumulators
      if (trips > 1 && !blocks) this.scopes.pop();
      const name = `r${this.loops++}`;
      if (left > 1) this.openLoop(name, left);
      const tail = iadd(iconst(trips * unroll), ivar(name, left));
      accumulate(
        1,
        () => tail,
        () => 0,
      );
    }
    this.scopes.length = outer;
    // a split sum's accumulators, added pairwise into the first
    for (let width = split / 2; width >= 1; width /= 2) {
      lanes.forEach((_, l) => {
        for (let j = 0; j < width; j++) {
          const value: Operand = { kind: "val", name: accs[l * split + j + width]!, dtype: node.dtype };
          this.emit({ kind: "update", name: accs[l * split + j]!, dtype: node.dtype, op, value });
        }
      });
    }
    lanes.forEach((lane, l) =>
      this.top.cache.set(requestKey(lane), { kind: "val", name: accs[l * split]!, dtype: node.dtype }),
    );
  }

  /** What a one-hot sum adds at its hot index: the WHERE's value, cast and negated as the sum's source is. */
  private hotValue(match: OneHot, value: Operand, key: string): Operand {
    const cast =
      match.cast && match.cast !== value.dtype
        ? this.define(match.cast, { op: "CAST", srcs: [value] }, `${key}|cast`)
        : value;
    return match.negate ? this.define(cast.dtype, { op: "NEG", srcs: [cast] }, `${key}|neg`) : cast;
  }

  /**
   * sum over r of WHERE(r == x, v, 0), with x not depending on r, is v at r = x (0 when x is out of range):
   * embedding and gather written as one-hot sums become one guarded load instead of a loop over the vocabulary.
   */
  private collapseOneHot(node: UOp, lanes: readonly Request[]): boolean {
    const { op, axes } = node.arg as ReduceArg;
    if (op !== "ADD" || axes.length !== 1) return false;
    const axis = axes[0]!;
    const src = node.src[0]!;
    const size = src.shape[axis]!;
    for (const lane of lanes) {
      const r = ivar(`collapse${this.loops}`, size);
      const idx = lane.idx.map((i, d) => (d === axis ? r : i));
      const match = matchOneHot(src, idx, r, this.spec.inputs);
      if (!match) return false;
      const x = this.gen(match.other, match.otherIdx, lane.valid);
      // r = x - offset, a runtime index: v is read there when 0 <= r < size
      const xIdx = x.kind === "lit" ? iconst(x.value) : iruntime(x.name, ...dtypeRange(x.dtype));
      const at = iadd(xIdx, imul(match.offset, -1));
      const inside = andBound([], at, 0, size);
      const laneKey = requestKey(lane);
      // the value where it is hot: its own index (movement ops may lie between the sum and the WHERE, a
      // transpose moving the summed axis) with r replaced
      const atIdx = r.kind === "var" ? match.valueIdx.map((i) => substitute(i, r.name, at)) : match.valueIdx;
      if (inside === null) {
        this.top.cache.set(laneKey, { kind: "lit", value: 0, dtype: node.dtype });
        continue;
      }
      const [loaded] = this.genAll([{ node: match.value, idx: atIdx, valid: [...lane.valid, ...inside] }]);
      const value = this.hotValue(match, loaded!, laneKey);
      this.top.cache.set(laneKey, inside.length ? this.select(inside, value, laneKey) : value);
    }
    this.loops++;
    return true;
  }
}

/**
 * Trips of a split sum's loop (16 steps each) summed into a block's own accumulators before they are added to the
 * totals: a vocabulary-long row sum (30522 terms) then adds about 64 terms into each accumulator, then 29 blocks,
 * where one loop had added 1900 (its error growing with the square root of that), for 16 scalar additions a block.
 */
const SPLIT_BLOCK_TRIPS = 64;

/** The cache key of a request. */
const requestKey = (r: Request): string => `${r.node.id}|${r.idx.map((i) => i.key).join(",")}|${condKey(r.valid)}`;

/**
 * Bytes a kernel moves at least: each buffer's span the kernel's loads and stores can reach, once (a kernel
 * reading a view, a gradient in a bucket of many, moves its slice, not the bucket).
 */
export function estimateBytes(k: KernelIR): number {
  const spans = k.buffers.map(() => ({ lo: Infinity, hi: -Infinity }));
  const visit = (stmts: readonly Stmt[]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") visit(s.body);
      else if (s.kind === "store" || (s.kind === "def" && s.expr.op === "LOAD")) {
        const { buf, index } = s.kind === "store" ? s : (s.expr as { buf: number; index: Idx });
        spans[buf]!.lo = Math.min(spans[buf]!.lo, index.min);
        spans[buf]!.hi = Math.max(spans[buf]!.hi, index.max);
      }
    }
  };
  visit(k.body);
  return k.buffers.reduce((sum, b, i) => {
    const { lo, hi } = spans[i]!;
    const elements = hi >= lo ? Math.min(b.size, Math.max(0, Math.min(hi, b.size - 1) - Math.max(lo, 0) + 1)) : b.size;
    return sum + elements * b.dtype.itemsize;
  }, 0);
}

interface CatPieces {
  readonly axis: number;
  /** The concatenation's own shape (the kernel's output may be a reshape of it). */
  readonly shape: readonly number[];
  readonly pieces: readonly { readonly src: UOp; readonly offset: number }[];
}

/** `root` as a sum of pads along one axis that tile it exactly (what `Tensor.cat` builds), if it is one. */
export function catPieces(value: UOp, isInput: (n: UOp) => boolean = () => false): CatPieces | undefined {
  let root = value;
  // a reshape keeps the row-major layout, so the pieces can be stored by the inner shape; a copy the kernel
  // reads as an input (cat(...).contiguous().contiguous()) is where the kernel's own work ends
  while ((root.op === "CONTIGUOUS" || root.op === "RESHAPE") && !isInput(root.src[0]!)) root = root.src[0]!;
  const terms: UOp[] = [];
  // (a sum the kernel reads as an input is a term: its pads belong to the kernel that computed it)
  const collect = (n: UOp): void =>
    void (n.op === "ADD" && n.dtype.name !== "bool" && !isInput(n)
      ? (collect(n.src[0]!), collect(n.src[1]!))
      : terms.push(n));
  collect(root);
  if (terms.length < 2 || terms.some((t) => t.op !== "PAD")) return undefined;
  let axis = -1;
  for (const t of terms) {
    const padded = (t.arg as Pads).flatMap(([before, after], d) => (before || after ? [d] : []));
    if (padded.length !== 1 || (axis !== -1 && padded[0] !== axis)) return undefined;
    axis = padded[0]!;
  }
  const pieces = terms
    .map((t) => ({ src: t.src[0]!, offset: (t.arg as Pads)[axis]![0] }))
    .sort((a, b) => a.offset - b.offset);
  let next = 0;
  for (const { src, offset } of pieces) {
    if (offset !== next) return undefined;
    next += src.shape[axis]!;
  }
  return next === root.shape[axis] ? { axis, pieces, shape: root.shape } : undefined;
}
/** `node` without the reshapes and copies around it (they keep the row-major order). */
const unwrap = (node: UOp): UOp => (node.op === "RESHAPE" || node.op === "CONTIGUOUS" ? unwrap(node.src[0]!) : node);
