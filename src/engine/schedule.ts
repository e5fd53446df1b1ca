// Cuts the lazy graph into kernels. The one place that decides fusion:
// - elementwise ops and movement ops never get their own kernel: they are inlined into users;
// - a reduce fuses with its elementwise inputs and with the elementwise ops after it, unless its
//   result is read by several users, broadcast (expanded) afterwards, or read inside another reduce,
//   where recomputing it would multiply the work: then it is stored;
// - CONTIGUOUS, COPY and ASSIGN are always stored; requested outputs are stored.
import { Buffer, DISPOSED_HINT } from "../device.ts";
import { backendOf } from "./backend.ts";
import { TsgradError, fmtShape, getenv } from "../helpers.ts";
import { type KernelBuffer, type KernelIR, reduceIdentity } from "../codegen/ir.ts";
import { type DType, isFloat } from "../dtype.ts";
import type { KernelSpec } from "../codegen/kernel_spec.ts";
import { adoptLowered, catPieces, lowerKernel } from "../codegen/lower.ts";
import { loadLowered, storeLowered } from "./lowered_cache.ts";
import { type PackedOperand, packOperands } from "./pack.ts";
import {
  MOVEMENT_OPS,
  type ReduceArg,
  type ReduceKind,
  UOp,
  isElementwise,
  isMatmul,
  isNarrowingFloatCast,
  isWideningFloatCast,
} from "../uop.ts";
import { isOneHotProduct } from "../codegen/one_hot.ts";

export type ExecItem =
  | { readonly kind: "kernel"; readonly kernel: KernelIR; readonly buffers: Buffer[] }
  | { readonly kind: "copy"; readonly src: Buffer; readonly dst: Buffer };

/**
 * Nodes already computed, and where. An entry holds only while its buffer has not been assigned
 * since (the buffer's version is unchanged); after that the node is computed again from its sources.
 */
const realized = new WeakMap<UOp, { buffer: Buffer; version: number }>();

export function recordRealized(node: UOp, buffer: Buffer): void {
  realized.set(node, { buffer, version: buffer.version });
}

/** The buffer that holds `u`'s elements contiguously in `u`'s shape, if there is one. */
export function storedBuffer(u: UOp): Buffer | undefined {
  const entry = realized.get(u);
  // a disposed buffer's node is computed again from its sources (an error there if they are gone too)
  if (entry && entry.buffer.version === entry.version && !entry.buffer.disposed) return entry.buffer;
  return u.baseBuffer;
}

const isSource = (u: UOp): boolean => u.op === "CONST" || u.op === "INDEX";
const isLeaf = (u: UOp): boolean => isSource(u) || storedBuffer(u) !== undefined;

export interface Schedule {
  items: ExecItem[];
  /** The buffer each materialised node was written to. */
  outputs: Map<UOp, Buffer>;
  /**
   * Buffers this schedule made that no node keeps (intermediates the memory planner released after their
   * last reader): dead once the items have run, unless something keeps the items (a JIT capture).
   */
  temporaries: Buffer[];
}

export function createSchedule(roots: readonly UOp[]): Schedule {
  const nodes = UOp.toposort(roots, isLeaf);
  for (const n of nodes) {
    const buffer = n.baseBuffer;
    if (buffer?.disposed)
      throw new TsgradError(`this computation reads ${buffer.describe()} that was disposed: ${DISPOSED_HINT}`);
  }
  // an eager loop schedules graphs of one structure over new buffers again and again: the decisions are kept
  const keyed = getenv("SCHEDULE_CACHE", 1) !== 0 ? scheduleKey(roots, nodes) : undefined;
  const known = keyed && scheduleCache.get(keyed.key);
  if (known) return instantiate(known, nodes, keyed.leaves);
  const schedule = buildSchedule(roots, nodes);
  if (keyed) rememberSchedule(keyed.key, schedule, nodes, keyed.leaves);
  return schedule;
}

/** A schedule with its buffers as references: >= 0 the graph's i-th input buffer, < 0 new buffer -1 - ref. */
interface ScheduleTemplate {
  readonly items: readonly (
    | { readonly kind: "kernel"; readonly kernel: KernelIR; readonly buffers: readonly number[] }
    | { readonly kind: "copy"; readonly src: number; readonly dst: number }
  )[];
  readonly created: readonly { readonly device: string; readonly size: number; readonly dtype: DType }[];
  /** (index of the node in the graph's topological order, its buffer) */
  readonly outputs: readonly (readonly [number, number])[];
  readonly temporaries: readonly number[];
}

/** Schedules by graph structure; cleared when full (a program that keeps making new structures gains nothing). */
const scheduleCache = new Map<string, ScheduleTemplate>();
const SCHEDULE_CACHE_SIZE = 512;
/** Hits and misses, for tests and benches. */
export const scheduleCacheStats = { hits: 0, misses: 0 };

/**
 * What the schedule of `nodes` depends on: every node's op, dtype, device, shape, argument and sources, each input
 * buffer as a slot (its dtype, size and the view over it; the same buffer twice is the same slot). Undefined where a
 * node realized earlier stands in for its buffer: the passes may look at such a node's own sources.
 */
function scheduleKey(roots: readonly UOp[], nodes: readonly UOp[]): { key: string; leaves: Buffer[] } | undefined {
  const index = new Map<UOp, number>();
  const slots = new Map<Buffer, number>();
  const leaves: Buffer[] = [];
  const parts: string[] = [];
  for (const n of nodes) {
    index.set(n, parts.length);
    const stored = storedBuffer(n);
    if (stored) {
      if (n.baseBuffer !== stored) return undefined;
      let slot = slots.get(stored);
      if (slot === undefined) {
        slots.set(stored, (slot = leaves.length));
        leaves.push(stored);
      }
      let view = "";
      for (let u = n; u.op !== "BUFFER"; u = u.src[0]!) view += `${u.op}${u.shape.join("x")}`;
      parts.push(`@${slot}:${stored.dtype.name}:${stored.size}:${stored.device}:${view}`);
      continue;
    }
    // (not stored: a leaf here is a constant or index, whose sources do not count)
    const sources = isSource(n) ? "" : n.src.map((u) => index.get(u)).join(",");
    parts.push(`${n.op}:${n.dtype.name}:${n.device}:${n.shape.join("x")}:${argString(n.arg)}(${sources})`);
  }
  parts.push(roots.map((r) => index.get(r)).join(","));
  return { key: parts.join(";"), leaves };
}

function rememberSchedule(key: string, schedule: Schedule, nodes: readonly UOp[], leaves: readonly Buffer[]): void {
  const refs = new Map<Buffer, number>(leaves.map((b, i) => [b, i]));
  const created: { device: string; size: number; dtype: DType }[] = [];
  const ref = (b: Buffer): number => {
    let r = refs.get(b);
    if (r === undefined) {
      created.push({ device: b.device, size: b.size, dtype: b.dtype });
      refs.set(b, (r = -created.length));
    }
    return r;
  };
  const position = new Map(nodes.map((n, i) => [n, i]));
  const template: ScheduleTemplate = {
    items: schedule.items.map((item) =>
      item.kind === "copy"
        ? { kind: "copy", src: ref(item.src), dst: ref(item.dst) }
        : { kind: "kernel", kernel: item.kernel, buffers: item.buffers.map(ref) },
    ),
    // outputs outside the graph (packed operands' copies) are not looked up again: their buffers are left to go
    outputs: [...schedule.outputs].flatMap(([n, b]) => (position.has(n) ? [[position.get(n)!, ref(b)] as const] : [])),
    temporaries: schedule.temporaries.map(ref),
    created,
  };
  if (scheduleCache.size >= SCHEDULE_CACHE_SIZE) scheduleCache.clear();
  scheduleCache.set(key, template);
  scheduleCacheStats.misses++;
}

function instantiate(template: ScheduleTemplate, nodes: readonly UOp[], leaves: readonly Buffer[]): Schedule {
  const created = template.created.map((c) => new Buffer(c.device, c.size, c.dtype));
  const buffer = (ref: number): Buffer => (ref >= 0 ? leaves[ref]! : created[-1 - ref]!);
  scheduleCacheStats.hits++;
  return {
    items: template.items.map((item) =>
      item.kind === "copy"
        ? { kind: "copy", src: buffer(item.src), dst: buffer(item.dst) }
        : { kind: "kernel", kernel: item.kernel, buffers: item.buffers.map(buffer) },
    ),
    outputs: new Map(template.outputs.map(([i, ref]) => [nodes[i]!, buffer(ref)])),
    temporaries: template.temporaries.map(buffer),
  };
}

function buildSchedule(roots: readonly UOp[], nodes: UOp[]): Schedule {
  const users = new Map<UOp, number>();
  for (const n of nodes) if (!isLeaf(n)) for (const s of n.src) users.set(s, (users.get(s) ?? 0) + 1);

  const stored = new Set<UOp>();
  for (const r of roots) if (!isLeaf(r)) stored.add(r);
  for (const n of nodes) {
    if (isLeaf(n)) continue;
    if (n.op === "CONTIGUOUS" || n.op === "ASSIGN" || n.op === "COPY") stored.add(n);
    if (n.op === "REDUCE" && (users.get(n) ?? 0) > 1) stored.add(n);
    if (n.op === "COPY" && !isLeaf(n.src[0]!)) stored.add(n.src[0]!);
  }
  markRecomputedWork(stored, users);
  storeBeforeHeavyEpilogues(stored, users);
  storeSharedChains(stored);
  const packs = packOperands(nodes, stored, isLeaf);
  capKernelInputs(stored);
  stageCrossReadingAssigns(nodes, stored);
  // each packed operand's copy is computed right before its product (its sources come earlier), so that it
  // holds memory only until the product has read it
  const copiesBefore = new Map<UOp, UOp[]>();
  for (const [reduce, operands] of packs) {
    for (const { copy } of operands) {
      if (stored.has(copy) || isLeaf(copy)) continue;
      copiesBefore.set(reduce, [...(copiesBefore.get(reduce) ?? []), copy]);
      stored.add(copy);
    }
  }
  const ordered = copiesBefore.size === 0 ? nodes : nodes.flatMap((n) => [...(copiesBefore.get(n) ?? []), n]);

  const outputs = new Map<UOp, Buffer>();
  const created: Buffer[] = [];
  const steps: Step[] = [];
  for (const n of ordered) {
    if (!stored.has(n)) continue;
    let out: Buffer;
    if (n.op === "ASSIGN") {
      const target = storedBuffer(n.src[0]!);
      if (!target)
        throw new TsgradError(`assign: the target ${fmtShape(n.shape)} must be a realized buffer, not a lazy view`);
      out = target;
    } else {
      out = new Buffer(n.device, n.numel, n.dtype);
      created.push(out);
    }
    outputs.set(n, out);
    if (n.numel === 0) {
      // nothing to compute or copy: an empty buffer (a kernel of no elements has no loop to index with)
      steps.push({ node: n, items: [], inputs: [] });
      continue;
    }
    const bufferOf = (u: UOp): Buffer => outputs.get(u) ?? storedBuffer(u)!;
    if (n.op === "COPY") {
      const src = bufferOf(n.src[0]!);
      steps.push({ node: n, items: [{ kind: "copy", src, dst: out }], inputs: [n.src[0]!] });
      continue;
    }
    steps.push({ node: n, ...kernelsFor(n, out, stored, bufferOf, packs) });
  }
  const order = orderSteps(steps, stored);
  const rootSet = new Set(roots);
  reuseBuffers(order, (n) => !rootSet.has(n) && n.op !== "ASSIGN", outputs);
  const kept = new Set(outputs.values());
  return { items: order.flatMap((step) => step.items), outputs, temporaries: created.filter((b) => !kept.has(b)) };
}

/**
 * The memory planner: an intermediate's buffer goes back to a pool after the last step that reads
 * it, and a later intermediate of the same device, dtype and size takes it instead of a new one.
 * Recycled intermediates are dropped from `outputs` (their buffer holds something else afterwards).
 */
function reuseBuffers(order: Step[], reusable: (n: UOp) => boolean, outputs: Map<UOp, Buffer>): void {
  const lastRead = new Map<UOp, number>();
  order.forEach((step, pos) => step.inputs.forEach((input) => lastRead.set(input, pos)));
  const releaseAfter = new Map<number, UOp[]>();
  for (const [node, pos] of lastRead)
    if (outputs.has(node) && reusable(node)) releaseAfter.set(pos, [...(releaseAfter.get(pos) ?? []), node]);
  const keyOf = (b: Buffer): string => `${b.device}|${b.dtype.name}|${b.size}`;
  const pool = new Map<string, Buffer[]>();
  const replaced = new Map<Buffer, Buffer>();
  order.forEach((step, pos) => {
    const n = step.node;
    if (reusable(n)) {
      const fresh = outputs.get(n)!;
      const free = pool.get(keyOf(fresh))?.pop();
      if (free) {
        replaced.set(fresh, free);
        outputs.set(n, free);
      }
    }
    for (const done of releaseAfter.get(pos) ?? []) {
      const buffer = outputs.get(done)!;
      pool.set(keyOf(buffer), [...(pool.get(keyOf(buffer)) ?? []), buffer]);
      outputs.delete(done);
    }
  });
  if (replaced.size === 0) return;
  const sub = (b: Buffer): Buffer => replaced.get(b) ?? b;
  for (const step of order) {
    step.items = step.items.map((item) =>
      item.kind === "copy"
        ? { kind: "copy", src: sub(item.src), dst: sub(item.dst) }
        : { kind: "kernel", kernel: item.kernel, buffers: item.buffers.map(sub) },
    );
  }
}

/** What computes one stored node, and the nodes it reads. */
interface Step {
  node: UOp;
  items: ExecItem[];
  inputs: UOp[];
}
/**
 * Stores what would otherwise be recomputed many times: a reduce read under a broadcast (expand) or
 * inside another reduce's loop, and an expensive elementwise chain read under a broadcast (the
 * operands of a matmul in a backward pass, softmax probabilities feeding attention). A float reduce read
 * only through a cast to a narrower float (a 16-bit matmul accumulated in float32) is stored after the
 * cast: the same values its readers use, in half the bytes, and a 16-bit factor for the next matmul.
 */
function markRecomputedWork(stored: Set<UOp>, users: ReadonlyMap<UOp, number>): void {
  // Each kernel root is walked once; a node marked here becomes a root and is walked in turn. Marking only
  // cuts later walks short (and makes inlined chains cheaper), so walks already done need no second pass.
  const roots = [...stored];
  for (let r = 0; r < roots.length; r++) {
    const root = roots[r]!;
    const seen = new Set<string>();
    let matmuls = 0;
    // a concatenation runs each piece as plain loops, without a tile or options: a reduce in a piece (the
    // gradient of a fused q/k/v projection: three matmuls side by side) is stored first, and copied
    const concatenation =
      catPieces(root.op === "ASSIGN" ? root.src[1]! : root, (n) => n !== root && (stored.has(n) || isLeaf(n))) !==
      undefined;
    const mark = (n: UOp): void => {
      stored.add(n);
      roots.push(n);
    };
    const walk = (n: UOp, underExpand: boolean, inReduce: boolean): void => {
      if (n !== root && (stored.has(n) || isLeaf(n))) return;
      const key = `${n.id}|${underExpand}|${inReduce}`;
      if (seen.has(key)) return;
      seen.add(key);
      // a reduce, or a narrowing cast that is all its reduce's readers see (then stored in its place)
      const reduce = n.op === "REDUCE" ? n : isNarrowingFloatCast(n) ? soleReduceUnder(n, users, stored) : undefined;
      if (reduce && n !== root && (underExpand || inReduce || concatenation)) {
        mark(n);
        return;
      }
      // one matmul a kernel: a second one beside it (a gelu's input recomputed in its backward; a tied
      // embedding's two gradients summed, its one-hot product being the other) is stored, so that each can be
      // tiled as a matmul instead of both running as plain loops. A host backend's scatter (the one-hot
      // product's form there) computes its epilogue per output element: a matmul left in it ran as a naive
      // loop nest (BERT-mini's tied decoder gradient: 1 s instead of 20 ms)
      if (reduce && !inReduce && !underExpand && (isMatmul(reduce) || isOneHotProduct(reduce))) {
        if (matmuls > 0 && n !== root) {
          mark(n);
          return;
        }
        if (n === reduce) matmuls++;
      }
      if (n.op === "EXPAND") {
        const chain = narrowerSource(skipMovement(n.src[0]!));
        if (!stored.has(chain) && !isLeaf(chain)) {
          // a reduce under a broadcast is stored when the walk reaches it: here that is before a cast over it is
          if (chain.op === "REDUCE") {
            mark(chain);
            return;
          }
          if (isElementwise(chain.op) && inlineCost(chain, stored) > EXPENSIVE) {
            mark(chain);
            return;
          }
        }
      }
      if (n.op === "REDUCE") inReduce = true;
      if (n.op === "EXPAND") underExpand = true;
      for (const s of n.src) walk(s, underExpand, inReduce);
    };
    walk(root.op === "ASSIGN" ? root.src[1]! : root, false, false);
  }
}

/**
 * Stores an elementwise value that several kernels would each compute inline, where that costs EXPENSIVE
 * operations an element or more: once stored, each reads it. Without this a chain that grows through a model
 * (the gradient of BERT's residual stream, layer after layer) was recomputed from every layer's inputs by
 * every kernel that read it: a layer norm's gamma gradient, its backward sums, the next layer's kernels (one
 * of BERT-mini's read 46 buffers). The topmost such node of a chain is stored (its users are not equally
 * shared); passes repeat while the stores change what the rest share. Host backends only: stored values live
 * from the forward pass to the backward, and a GPU's memory is the tighter bound (BERT-large float16 would take
 * much more of it a step).
 */
function storeSharedChains(stored: Set<UOp>): void {
  if (![...stored].some((n) => backendOf(n.device).hostForms === true)) return;
  for (let pass = 0; pass < 8; pass++) {
    // how many kernels compute each node inline, and each inlined node's inlined users
    const readers = new Map<UOp, number>();
    const usersOf = new Map<UOp, Set<UOp>>();
    for (const root of stored) {
      const value = root.op === "ASSIGN" ? root.src[1]! : root;
      const seen = new Set<UOp>();
      const walk = (n: UOp, top: boolean): void => {
        if (seen.has(n)) return;
        seen.add(n);
        if (!top) readers.set(n, (readers.get(n) ?? 0) + 1);
        for (const src of n.src) {
          if (stored.has(src) || isLeaf(src)) continue;
          let users = usersOf.get(src);
          if (!users) usersOf.set(src, (users = new Set()));
          users.add(n);
          walk(src, false);
        }
      };
      if (!isLeaf(value) && (value === root || !stored.has(value))) walk(value, value === root);
    }
    // (each node's verdict once a pass: inlineCost walks the chain below it)
    const verdicts = new Map<UOp, boolean>();
    const shared = (n: UOp): boolean => {
      let verdict = verdicts.get(n);
      if (verdict === undefined) {
        verdict =
          isElementwise(n.op) &&
          (readers.get(n) ?? 0) > 1 &&
          backendOf(n.device).hostForms === true &&
          inlineCost(n, stored) >= EXPENSIVE;
        verdicts.set(n, verdict);
      }
      return verdict;
    };
    const tops = [...readers.keys()].filter(
      (n) => shared(n) && ![...(usersOf.get(n) ?? [])].some((u) => shared(u) && readers.get(u)! >= readers.get(n)!),
    );
    if (tops.length === 0) return;
    for (const n of tops) stored.add(n);
  }
}

/**
 * Inline cost (ALU operations an element) of the elementwise work after a matmul above which a host backend stores the
 * matmul first.
 */
const HEAVY_EPILOGUE = 16;

/**
 * On host backends a matmul's register tile copies its kernel's epilogue once per lane, and the heuristics
 * narrow the tile to keep the code small: a GELU's gradient after dY @ W (~90 operations an element) left
 * 2 rows of 16 lanes, a slow tile. Such a matmul is stored first (full tile), and the epilogue reads it.
 */
function storeBeforeHeavyEpilogues(stored: Set<UOp>, users: ReadonlyMap<UOp, number>): void {
  for (const root of [...stored]) {
    if (backendOf(root.device).hostForms !== true) continue;
    const value = root.op === "ASSIGN" ? root.src[1]! : root;
    // the matmuls, or the narrowing casts that are all their readers see (stored in their place: 16-bit)
    const matmuls: UOp[] = [];
    const seen = new Set<UOp>();
    const walk = (n: UOp, top: boolean): void => {
      if (seen.has(n) || (!top && (stored.has(n) || isLeaf(n)))) return;
      seen.add(n);
      const narrowed = isNarrowingFloatCast(n) ? soleReduceUnder(n, users, stored) : undefined;
      if (narrowed && isMatmul(narrowed)) {
        matmuls.push(n);
        return;
      }
      if (n.op === "REDUCE") {
        if (isMatmul(n)) matmuls.push(n);
        return;
      }
      if (isElementwise(n.op) || MOVEMENT_OPS.has(n.op)) for (const s of n.src) walk(s, false);
    };
    walk(value, value === root);
    if (matmuls.length === 0 || matmuls.includes(value)) continue;
    // the work above the matmuls (nodes already counted cost nothing: the matmuls are seeded as counted)
    const counted = new Set(matmuls);
    const epilogue = value.src.reduce((sum, s) => sum + inlineCost(s, stored, counted), ownCost(value));
    if (epilogue > HEAVY_EPILOGUE) for (const matmul of matmuls) stored.add(matmul);
  }
}

/**
 * What to store of a chain read under a broadcast: a widening float cast's source (through views) when that
 * is computed too (a 16-bit gradient entering a float32 accumulation): half the bytes, re-widened exactly by readers.
 */
function narrowerSource(chain: UOp): UOp {
  if (!isWideningFloatCast(chain)) return chain;
  // through views: the narrow values are stored in their own layout, readers view and widen them
  const inner = skipMovement(chain.src[0]!);
  return !isLeaf(inner) && (isElementwise(inner.op) || inner.op === "REDUCE") ? inner : chain;
}

/** The reduce `n` reads through reshapes only, when nothing else reads it or them (and it is not stored already). */
function soleReduceUnder(n: UOp, users: ReadonlyMap<UOp, number>, stored: ReadonlySet<UOp>): UOp | undefined {
  let s = n.src[0]!;
  while (s.op === "RESHAPE" && users.get(s) === 1) s = s.src[0]!;
  return s.op === "REDUCE" && users.get(s) === 1 && !stored.has(s) && !isLeaf(s) ? s : undefined;
}

/**
 * Most buffers one kernel reads: FFI calls and GPU launches take a bounded number of arguments. A device may
 * take fewer (its backend's `maxKernelInputs`: a WebGPU shader's storage buffers).
 */
export const MAX_KERNEL_INPUTS = 48;

const inputCap = (device: string): number => Math.min(MAX_KERNEL_INPUTS, backendOf(device).maxKernelInputs ?? Infinity);

/**
 * Splits kernels that would read more than their device's input cap (a global gradient norm over every
 * parameter of a model; on WebGPU, a wide elementwise chain) by storing the inlined node that gathers the most
 * inputs within the cap.
 */
function capKernelInputs(stored: Set<UOp>): void {
  let changed = true;
  while (changed) {
    changed = false;
    for (const root of [...stored]) {
      const value = root.op === "ASSIGN" ? root.src[1]! : root;
      const under = new Map<UOp, Set<UOp>>();
      const inputsUnder = (n: UOp, top: boolean): Set<UOp> => {
        if (!top && (stored.has(n) || isLeaf(n))) return isSource(n) ? new Set() : new Set([n]);
        let inputs = under.get(n);
        if (!inputs) {
          inputs = new Set();
          for (const src of n.src) for (const input of inputsUnder(src, false)) inputs.add(input);
          under.set(n, inputs);
        }
        return inputs;
      };
      const cap = inputCap(root.device);
      if (inputsUnder(value, value === root).size <= cap) continue;
      let best: UOp | undefined;
      for (const [n, inputs] of under) {
        if (n === value || !isElementwise(n.op) || inputs.size > cap) continue;
        if (!best || inputs.size > under.get(best)!.size) best = n;
      }
      if (best && under.get(best)!.size > 1) {
        stored.add(best);
        changed = true;
      }
    }
  }
}

/** Inline cost above which a broadcast elementwise chain is stored rather than recomputed per use. */
const EXPENSIVE = 8;
const TRANSCENDENTAL = new Set(["EXP2", "LOG2", "SIN", "SQRT", "RECIP"]);

const skipMovement = (n: UOp): UOp => (MOVEMENT_OPS.has(n.op) ? skipMovement(n.src[0]!) : n);

/** ALU operations computed inline for one element of `n` (transcendentals count 4), up to stored inputs. */
function inlineCost(n: UOp, stored: ReadonlySet<UOp>, seen = new Set<UOp>()): number {
  if (seen.has(n) || stored.has(n) || isLeaf(n)) return 0;
  seen.add(n);
  return ownCost(n) + n.src.reduce((sum, s) => sum + inlineCost(s, stored, seen), 0);
}
const ownCost = (n: UOp): number => (isElementwise(n.op) && n.op !== "CAST" ? (TRANSCENDENTAL.has(n.op) ? 4 : 1) : 0);

/**
 * An assigned value that reads the old contents of another assign's target is computed into its own
 * buffer first: otherwise two in-place writes that read each other's targets (w1 from w2 and w2 from w1,
 * as in one optimizer step over a model) would each have to run before the other.
 */
function stageCrossReadingAssigns(nodes: readonly UOp[], stored: Set<UOp>): void {
  const assigns = nodes.filter((n) => n.op === "ASSIGN");
  if (assigns.length < 2) return;
  const targets = new Map(assigns.map((a) => [storedBuffer(a.src[0]!)!, a]));
  for (const a of assigns) {
    const value = a.src[1]!;
    if (isLeaf(value) || stored.has(value)) continue;
    const seen = new Set<UOp>();
    const readsOtherTarget = (n: UOp): boolean => {
      if (seen.has(n)) return false;
      seen.add(n);
      if (stored.has(n) || isLeaf(n)) {
        const buffer = storedBuffer(n);
        return buffer !== undefined && targets.has(buffer) && targets.get(buffer) !== a;
      }
      return n.src.some(readsOtherTarget);
    };
    if (readsOtherTarget(value)) stored.add(value);
  }
}

/**
 * The kernel(s) computing `node` into `out`: two when an in-place write would clobber its own inputs.
 * `packs`: per reduce, operands it reads from stored copies (packOperands); this kernel reads each
 * through its reader in the operand's place (other kernels keep reading the operand).
 */
function kernelsFor(
  node: UOp,
  out: Buffer,
  stored: Set<UOp>,
  bufferOf: (u: UOp) => Buffer,
  packs: ReadonlyMap<UOp, readonly PackedOperand[]> = new Map(),
): { items: ExecItem[]; inputs: UOp[] } {
  const top = node.op === "ASSIGN" ? node.src[1]! : node;
  const isTop = top === node;
  const value = withEmptyReducesFolded(
    packs.size === 0 ? top : withPackedOperands(top, isTop, stored, packs),
    isTop,
    stored,
  );
  const inputs = new Map<UOp, number>();
  const buffers: Buffer[] = [out];
  const seen = new Set<UOp>();
  const walk = (n: UOp, first: boolean): void => {
    if (seen.has(n)) return;
    seen.add(n);
    if (!first && (stored.has(n) || isLeaf(n))) {
      if (!isSource(n)) {
        inputs.set(n, buffers.length);
        buffers.push(bufferOf(n));
      }
      return;
    }
    for (const s of n.src) walk(s, false);
  };
  walk(value, isTop);
  const inputNodes = [...inputs.keys()];
  const kernelBuffers: KernelBuffer[] = buffers.map((b) => ({ dtype: b.dtype, size: b.size }));
  const host = backendOf(out.device).hostForms === true;
  const kernel = lowerCached({ value, inputs, buffers: kernelBuffers, host }, out.device);
  if (!readsOwnOutputElsewhere(kernel, buffers))
    return { items: [{ kind: "kernel", kernel, buffers }], inputs: inputNodes };
  // an in-place write that reads its target elsewhere (w.assign(w.flip(0)), or a scatter, which zeroes its
  // output first, into a buffer it reads): compute into a temporary, then copy
  const temp = new Buffer(out.device, out.size, out.dtype);
  const first = lowerKernel({
    value,
    inputs,
    buffers: [{ dtype: temp.dtype, size: temp.size }, ...kernelBuffers.slice(1)],
    host,
  });
  const tempNode = UOp.buffer(temp).reshape(value.shape);
  const second = lowerKernel({
    value: tempNode,
    inputs: new Map([[tempNode, 1]]),
    buffers: [kernelBuffers[0]!, { dtype: temp.dtype, size: temp.size }],
  });
  const items: ExecItem[] = [
    { kind: "kernel", kernel: first, buffers: [temp, ...buffers.slice(1)] },
    { kind: "kernel", kernel: second, buffers: [out, temp] },
  ];
  return { items, inputs: inputNodes };
}
/**
 * `value` with each packed operand of the matmuls it computes replaced by the view that reads its copy
 * (the same values; the graph is rebuilt only along the paths that reach an operand, within this kernel).
 */
function withPackedOperands(
  value: UOp,
  isTop: boolean,
  stored: ReadonlySet<UOp>,
  packs: ReadonlyMap<UOp, readonly PackedOperand[]>,
): UOp {
  const readers = new Map<UOp, UOp>();
  const seen = new Set<UOp>();
  const find = (n: UOp, first: boolean): void => {
    if (seen.has(n) || (!first && (stored.has(n) || isLeaf(n)))) return;
    seen.add(n);
    for (const p of packs.get(n) ?? []) readers.set(p.view, p.reader);
    for (const s of n.src) find(s, false);
  };
  find(value, isTop);
  // (with readers found, `value` is computed here, stored or not: its own node is rebuilt)
  return readers.size === 0 ? value : value.replaceNodes(readers, (n) => stored.has(n) || isLeaf(n));
}

/**
 * `value` with each reduce over zero elements replaced by its identity (a sum of nothing is 0), broadcast: a
 * kernel's reduce loop of no iterations would have no loop variable for its body to index with.
 */
function withEmptyReducesFolded(value: UOp, isTop: boolean, stored: ReadonlySet<UOp>): UOp {
  const folded = new Map<UOp, UOp>();
  const seen = new Set<UOp>();
  const find = (n: UOp, first: boolean): void => {
    if (seen.has(n) || (!first && (stored.has(n) || isLeaf(n)))) return;
    seen.add(n);
    if (n.op === "REDUCE" && n.src[0]!.numel === 0) {
      const identity = UOp.const(reduceIdentityOf((n.arg as ReduceArg).op, n.dtype), n.dtype, n.device);
      folded.set(n, identity.reshape(n.shape.map(() => 1)).expand(n.shape));
      return;
    }
    for (const s of n.src) find(s, false);
  };
  find(value, isTop);
  return folded.size === 0 ? value : value.replaceNodes(folded, (n) => stored.has(n) || isLeaf(n));
}

/** A reduce's starting value in `dtype`: 0 for a sum, the lowest value for a max. */
function reduceIdentityOf(op: ReduceKind, dtype: DType): number {
  if (op === "ADD" || isFloat(dtype)) return reduceIdentity(op);
  return dtype.kind === "int" ? -(2 ** (dtype.itemsize * 8 - 1)) : 0;
}

/** Kernels lowered before, by structure: a training loop schedules the same kernels over new buffers every step. */
const lowered = new Map<string, KernelIR>();

function lowerCached(spec: KernelSpec, device: string): KernelIR {
  const key = `${device.split(":")[0]}|${structureKey(spec)}`;
  let kernel = lowered.get(key);
  if (!kernel) {
    // a host kernel an earlier process lowered is read back from the disk (engine/lowered_cache.ts)
    kernel = spec.host ? loadLowered(key) : undefined;
    if (kernel) adoptLowered(kernel, spec);
    else {
      kernel = lowerKernel(spec);
      if (spec.host) storeLowered(key, kernel);
    }
    lowered.set(key, kernel);
  }
  return kernel;
}

/** What the lowering depends on: the inlined graph's ops, dtypes, shapes and arguments, with inputs as slots. */
function structureKey({ value, inputs, buffers, host }: KernelSpec): string {
  const ids = new Map<UOp, number>();
  const parts: string[] = [];
  const visit = (n: UOp): number => {
    const known = ids.get(n);
    if (known !== undefined) return known;
    const slot = inputs.get(n);
    const desc =
      slot !== undefined
        ? `@${slot}:${n.dtype.name}:${n.shape.join("x")}`
        : `${n.op}:${n.dtype.name}:${n.shape.join("x")}:${argString(n.arg)}(${n.src.map(visit).join(",")})`;
    const id = parts.length;
    parts.push(desc);
    ids.set(n, id);
    return id;
  };
  visit(value);
  return `${parts.join(";")}|${buffers.map((b) => `${b.dtype.name}:${b.size}`).join(",")}|${host ? "host" : ""}`;
}

/** Numbers by String (JSON would print NaN and Infinity both as null), the rest as JSON. */
const argString = (arg: unknown): string =>
  arg === undefined ? "" : typeof arg === "number" ? (Object.is(arg, -0) ? "-0" : String(arg)) : JSON.stringify(arg);

/** True when the kernel loads its output buffer at an index other than the one it stores to. */
function readsOwnOutputElsewhere(kernel: KernelIR, buffers: readonly Buffer[]): boolean {
  const aliased = new Set(buffers.map((b, slot) => (slot > 0 && b === buffers[0] ? slot : -1)).filter((s) => s > 0));
  if (aliased.size === 0) return false;
  // a scatter zeroes its output first, a K-blocked sum keeps partial sums there: both read it back elsewhere
  if (kernel.opts === "scatter" || /\|k\d+/.test(kernel.opts)) return true;
  const loads: string[] = [];
  let storeKey = "";
  const scan = (stmts: KernelIR["body"]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") scan(s.body);
      else if (s.kind === "def" && s.expr.op === "LOAD" && aliased.has(s.expr.buf)) loads.push(s.expr.index.key);
      else if (s.kind === "store") storeKey = s.index.key;
    }
  };
  scan(kernel.body);
  return loads.some((k) => k !== storeKey);
}

/**
 * Orders steps so each runs after the steps that produce what it reads (read after write), and every
 * in-place write (ASSIGN) runs after the steps that read the target's old contents (write after read).
 */
function orderSteps(steps: readonly Step[], stored: ReadonlySet<UOp>): Step[] {
  const producerOf = new Map<UOp, number>();
  const assignsTo = new Map<Buffer, number[]>();
  steps.forEach((step, i) => {
    producerOf.set(step.node, i);
    if (step.node.op === "ASSIGN") {
      const target = storedBuffer(step.node.src[0]!)!;
      assignsTo.set(target, [...(assignsTo.get(target) ?? []), i]);
    }
  });
  const deps = steps.map(() => new Set<number>());
  steps.forEach((step, i) => {
    for (const input of step.inputs) {
      const producer = producerOf.get(input);
      if (producer !== undefined) deps[i]!.add(producer);
      else if (!stored.has(input)) {
        for (const writer of assignsTo.get(storedBuffer(input)!) ?? []) if (writer !== i) deps[writer]!.add(i);
      }
    }
  });
  const state = new Map<number, "visiting" | "done">();
  const order: Step[] = [];
  const visit = (i: number): void => {
    if (state.get(i) === "done") return;
    if (state.get(i) === "visiting")
      throw new TsgradError("schedule: a buffer is both read and assigned in a cycle; realize() between the two");
    state.set(i, "visiting");
    for (const d of deps[i]!) visit(d);
    state.set(i, "done");
    order.push(steps[i]!);
  };
  steps.forEach((_, i) => visit(i));
  return order;
}
