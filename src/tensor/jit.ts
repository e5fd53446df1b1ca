// Capture and replay: the second call of a jitted function records the kernels it ran, later
// calls run that list again with the new inputs' buffers swapped in, skipping scheduling and codegen.
// Where the device records graphs (CUDA graphs, CPU call tables), the replays launch the whole list as one graph.
import { Buffer } from "../device.ts";
import { GlobalCounters, debugLevel, fmtShape, getenv } from "../helpers.ts";
import { Tensor } from "./tensor.ts";
import { UOp } from "../uop.ts";
import { type Lazy, MultiLazy } from "./multi.ts";
import {
  countCopy,
  countKernel,
  execObservers,
  kernelTimers,
  launchItem,
  recordItems,
  runItem,
} from "../engine/realize.ts";
import { type ExecItem, storedBuffer } from "../engine/schedule.ts";
import { jitFirstCall } from "../engine/search.ts";
import { buffersOf } from "./buffers.ts";
import { tensorsIn } from "./tidy.ts";
import { backendOf } from "../engine/backend.ts";

/** What a jitted function may return: tensors, arrays of them, records of them, or nothing. */
// biome-ignore lint/suspicious/noConfusingVoidType: a jitted function may return nothing, typed void
export type JitOutput = Tensor | readonly JitOutput[] | { readonly [key: string]: JitOutput } | undefined | void;

interface InputSignature {
  shape: readonly number[];
  dtype: string;
  device: string;
}

/** Input signatures one jitted function keeps captures for; calls with further ones run uncaptured. */
export const MAX_CAPTURES = 8;

/**
 * Wraps `fn` so that its kernels are captured on the second call and replayed afterwards.
 * Inputs are the Tensor arguments. Each signature of them (shapes, dtypes, devices) gets a capture of its own,
 * made the same way (its first call runs normally, its second records): a last batch of another size, or
 * training and evaluation shapes, each replay. Up to MAX_CAPTURES signatures; calls with more run uncaptured
 * (said once on stderr). Anything else `fn` reads must live in tensors (a learning rate, an RNG counter), not
 * in JS numbers. `JIT=0` turns capture off: every call then runs `fn` normally.
 */
export class TinyJit<A extends Tensor[], R extends JitOutput> {
  private captures = new Map<string, Capture<R>>();
  private warnedFull = false;

  constructor(private readonly fn: (...args: A) => R) {}

  /** Forgets every capture: the next call runs uncaptured again. */
  reset(): void {
    this.captures.clear();
  }

  /** Whether some input signature has been captured (and is replayed). */
  get isCaptured(): boolean {
    return [...this.captures.values()].some((c) => c.items !== undefined);
  }

  /** How many input signatures have been captured. */
  get captureCount(): number {
    return [...this.captures.values()].filter((c) => c.items !== undefined).length;
  }

  call(...args: A): R {
    for (const a of args) if (!buffersOf(a)) a.node = a.contiguous().node;
    Tensor.realizeAll(args);
    // inputs count as new data on every call: a result computed from the same buffers before
    // must not be taken from the cache (the capture would then record nothing)
    for (const a of args) {
      for (const buffer of buffersOf(a)!) buffer.version++;
      a.node = bufferView(a.node);
    }
    if (getenv("JIT", 1) === 0) return this.runAndRealize(args);
    const signature = args.map(signatureOf);
    const key = signature.map((s) => `${fmtShape(s.shape)} ${s.dtype} ${s.device}`).join("; ");
    let capture = this.captures.get(key);
    if (!capture) {
      if (this.captures.size >= MAX_CAPTURES) {
        if (!this.warnedFull)
          console.error(
            `tsgrad: jit: ${MAX_CAPTURES} input signatures captured already; calls with ${key} run uncaptured`,
          );
        this.warnedFull = true;
        return this.runAndRealize(args);
      }
      capture = new Capture<R>(signature);
      this.captures.set(key, capture);
    }
    if (capture.items) return capture.replay(args);
    capture.calls++;
    if (capture.calls === 1) {
      jitFirstCall.depth++;
      try {
        return this.runAndRealize(args);
      } finally {
        jitFirstCall.depth--;
      }
    }
    const { result: out, items } = recordItems(() => this.runAndRealize(args));
    capture.record(items, args, out);
    return out;
  }

  private runAndRealize(args: A): R {
    const out = this.fn(...args);
    // also what the call assigned (optimizer updates) and the RNG counters, so replays repeat them
    Tensor.realizeAll([...tensorsIn(out), ...Tensor.rngState(), ...Tensor.pendingAssigns()]);
    return out;
  }
}

/** One input signature's capture: the items its second call ran, replayed with each call's input buffers. */
class Capture<R extends JitOutput> {
  calls = 0;
  items: ExecItem[] | undefined;
  private inputs: Buffer[][] = [];
  /** Per captured item: whether it reads or writes an input buffer (only those are rebuilt on replay). */
  private touchesInput: boolean[] = [];
  private output: R | undefined;
  /**
   * The captured items as the devices' graph(s), with the buffers it reads inputs from (null where the replay
   * takes the call's buffers instead: CPU tables); null: no graph.
   */
  private graph: // biome-ignore lint/suspicious/noConfusingVoidType: the backend's replay type
  { replay: (swap?: ReadonlyMap<Buffer, Buffer>) => number | void; inputs: Buffer[][] | null } | null | undefined;

  constructor(readonly signature: readonly InputSignature[]) {}

  record(items: ExecItem[], args: readonly Tensor[], output: R): void {
    this.items = items;
    this.inputs = args.map((a) => buffersOf(a)!);
    const inputs = new Set(this.inputs.flat());
    this.touchesInput = items.map((item) =>
      (item.kind === "copy" ? [item.src, item.dst] : item.buffers).some((b) => inputs.has(b)),
    );
    this.output = output;
    // replays write into these: dispose() and tidy() must leave them to the capture (inputs are the caller's)
    for (const item of items)
      for (const b of item.kind === "copy" ? [item.src, item.dst] : item.buffers) if (!inputs.has(b)) b.pinned = true;
  }

  replay(args: readonly Tensor[]): R {
    const swap = new Map<Buffer, Buffer>();
    args.forEach((a, i) => buffersOf(a)!.forEach((buffer, shard) => swap.set(this.inputs[i]![shard]!, buffer)));
    const debug = debugLevel();
    // per-kernel timing (DEBUG >= 2, profilers) needs the kernels one by one
    const timed = debug >= 2 || kernelTimers.size > 0;
    if (this.graph === undefined && !timed) this.graph = this.captureGraph();
    if (this.graph && !timed) {
      // a graph that reads its own input buffers gets this call's arguments copied there; one that swaps
      // buffers (CPU) reads them where they are
      const graphInputs = this.graph.inputs;
      if (graphInputs)
        args.forEach((a, i) =>
          buffersOf(a)!.forEach((buffer, shard) =>
            runItem({ kind: "copy", src: buffer, dst: graphInputs[i]![shard]! }, debug),
          ),
        );
      for (const item of this.items!) for (const observe of execObservers) observe(item);
      const seconds = this.graph.replay(graphInputs ? undefined : swap);
      for (const item of this.items!) item.kind === "kernel" ? countKernel(item, 0, debug) : countCopy(item, debug);
      GlobalCounters.timeSumS += seconds ?? 0;
      return freshOutputs(this.output) as R;
    }
    this.items!.forEach((item, i) => runItem(this.touchesInput[i] ? swapBuffers(item, swap) : item, debug));
    return freshOutputs(this.output) as R;
  }

  /**
   * The capture as one graph of the devices' (CUDA graphs: one launch instead of thousands; on the CPU one
   * call for every kernel and copy of all its virtual devices), reading inputs from buffers of its own (or,
   * where graphs swap buffers, from the call's); null where that cannot be: an input the function writes,
   * devices of several kinds, or a backend that has no graphs or cannot record these items.
   */
  private captureGraph(): {
    // biome-ignore lint/suspicious/noConfusingVoidType: the backend's replay type
    replay: (swap?: ReadonlyMap<Buffer, Buffer>) => number | void;
    inputs: Buffer[][] | null;
  } | null {
    const items = this.items!;
    const written = items.map((item) => (item.kind === "kernel" ? item.buffers[0]! : item.dst));
    const devices = [
      ...new Set(
        items.flatMap((item) =>
          item.kind === "kernel" ? [item.buffers[0]!.device] : [item.src.device, item.dst.device],
        ),
      ),
    ];
    const inputs = new Set(this.inputs.flat());
    if (
      devices.length === 0 ||
      written.some((b) => inputs.has(b)) ||
      new Set(devices.map((d) => d.split(":")[0])).size !== 1
    )
      return null;
    const backend = backendOf(devices[0]!);
    if (!backend.captureGraph) return null;
    const own = backend.graphsSwapBuffers
      ? null
      : this.inputs.map((buffers) =>
          buffers.map((b) => Object.assign(new Buffer(b.device, b.size, b.dtype), { pinned: true })),
        );
    const swap = new Map(
      own ? this.inputs.flatMap((buffers, i) => buffers.map((b, shard) => [b, own[i]![shard]!] as const)) : [],
    );
    const swapped = items.map((item) => swapBuffers(item, swap));
    // every buffer the graph touches exists before recording (allocation is not a launch); inputs a replay
    // swaps are the caller's, maybe disposed since the capture
    for (const item of swapped)
      for (const b of item.kind === "kernel" ? item.buffers : [item.src, item.dst])
        if (own || !inputs.has(b)) void b.handle;
    const replay = backend.captureGraph(() => swapped.forEach(launchItem), {
      devices,
      copies: items.some((item) => item.kind === "copy"),
    });
    if (replay) return { replay, inputs: own };
    // (CPU graphs hold any device set: only graphs that copy inputs in come here)
    const segments = own && devices.length > 1 ? segmentGraphs(swapped) : null;
    return segments ? { replay: segments, inputs: own } : null;
  }
}

/**
 * Where one graph cannot hold the items (CUDA: a graph is one device's stream), one graph per run of a device's
 * kernels between the copies that device takes part in, the copies launched between them; null if no run has
 * two kernels. Kernels only touch their own device's buffers and a copy only its two devices', so a device's
 * kernels may wait until its next copy: the items regroup into long runs (a data-parallel step: a device's
 * whole forward and backward between all-reduces) with every buffer still written before it is read.
 */
function segmentGraphs(items: readonly ExecItem[]): (() => void) | null {
  let graphs = 0;
  const steps = deviceRuns(items).map((part) => {
    if (!Array.isArray(part)) return () => launchItem(part);
    const device = (part[0] as ExecItem & { kind: "kernel" }).buffers[0]!.device;
    const graph =
      part.length > 1
        ? backendOf(device).captureGraph?.(() => part.forEach(launchItem), { devices: [device], copies: false })
        : undefined;
    if (graph) graphs++;
    return graph ?? (() => part.forEach(launchItem));
  });
  return graphs > 0 ? () => steps.forEach((step) => step()) : null;
}

/**
 * The items regrouped as runs of one device's kernels (arrays) between the copies (items) each device takes part in.
 */
export function deviceRuns(items: readonly ExecItem[]): (ExecItem | ExecItem[])[] {
  const parts: (ExecItem | ExecItem[])[] = [];
  const pending = new Map<string, ExecItem[]>();
  const flush = (device: string): void => {
    const run = pending.get(device);
    if (run && run.length > 0) parts.push(run);
    pending.delete(device);
  };
  for (const item of items) {
    if (item.kind === "kernel") {
      const device = item.buffers[0]!.device;
      const run = pending.get(device);
      if (run) run.push(item);
      else pending.set(device, [item]);
    } else {
      flush(item.src.device);
      flush(item.dst.device);
      parts.push(item);
    }
  }
  for (const device of [...pending.keys()]) flush(device);
  return parts;
}

/** `jit(fn)` returns a function with the same signature that captures and replays, plus `reset()`. */
export function jit<A extends Tensor[], R extends JitOutput>(
  fn: (...args: A) => R,
): ((...args: A) => R) & { reset(): void; jit: TinyJit<A, R> } {
  const j = new TinyJit(fn);
  return Object.assign((...args: A) => j.call(...args), { reset: () => j.reset(), jit: j });
}

const signatureOf = (t: Tensor): InputSignature => ({ shape: t.shape, dtype: t.dtype.name, device: t.device });

function swapBuffers(item: ExecItem, swap: ReadonlyMap<Buffer, Buffer>): ExecItem {
  if (swap.size === 0) return item;
  const sub = (b: Buffer): Buffer => swap.get(b) ?? b;
  return item.kind === "copy"
    ? { kind: "copy", src: sub(item.src), dst: sub(item.dst) }
    : { kind: "kernel", kernel: item.kernel, buffers: item.buffers.map(sub) };
}

/** A node that reads a realized tensor's buffer(s) as they are now. */
function bufferView(node: Lazy): Lazy {
  const view = (u: UOp): UOp => UOp.buffer(storedBuffer(u)!).reshape(u.shape);
  return node instanceof MultiLazy ? new MultiLazy(node.shards.map(view), node.axis) : view(node);
}

/** New Tensor objects over the captured output buffers, so callers never hold the jit's own objects. */
function freshOutputs(out: JitOutput): JitOutput {
  if (out instanceof Tensor) return new Tensor(bufferView(out.node));
  if (out === undefined || out === null) return out;
  if (Array.isArray(out)) return out.map(freshOutputs);
  return Object.fromEntries(Object.entries(out as Record<string, JitOutput>).map(([k, v]) => [k, freshOutputs(v)]));
}
