// The Tensor: a lazy handle on a UOp graph. Every op builds nodes; realize() or a read runs them.
// This is its core; the families of composite ops (einsum, scan, sort, upsample, windows) add their methods
// as they load, and index.ts assembles the whole Tensor.
import { Device } from "../device.ts";
import {
  type DType,
  type DTypeName,
  type TypedArray,
  castScalar,
  defaultFloatFromEnv,
  dtypeOf,
  dtypes,
  f16BitsToF32,
  bf16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  isFloat,
  promote,
  typedArrayFor,
} from "../dtype.ts";
import { Buffer } from "../device.ts";
import { computeGradients } from "./gradient.ts";
import { TsgradError, arraysEqual, fmtShape, prod, range } from "../helpers.ts";
import { realizeNodes } from "../engine/realize.ts";
import { storedBuffer } from "../engine/schedule.ts";
import { randomBits } from "./random.ts";
import { reduceInTwo } from "./split_reduce.ts";
import { type BinaryOp, type Pads, type UnaryOp, UOp } from "../uop.ts";
import { type Lazy, MultiLazy, allReduceMany, multiDeviceName, splitDeviceName, splitSizes } from "./multi.ts";

export type NestedArray = number | boolean | NestedArray[];
export type TensorData = NestedArray | TypedArray | readonly number[];
export interface TensorOptions {
  dtype?: DType | DTypeName;
  device?: string;
  requiresGrad?: boolean;
}
export interface ReduceOptions {
  axis?: number | number[] | null;
  keepdim?: boolean;
}
/**
 * One entry per axis: a number picks (and drops the axis), [start, stop, step] slices, null adds an axis, "..." fills.
 */
export type IndexSpec = number | [(number | null)?, (number | null)?, (number | null)?] | null | "...";

const toDtype = (d: DType | DTypeName | undefined, fallback: DType): DType =>
  d === undefined ? fallback : typeof d === "string" ? dtypeOf(d) : d;

let uniqueTag = 0;
/** Tensors made so far: a tensor's number says which tidy() scopes it was made inside. */
let tensorsMade = 0;

/** An open tidy() scope (tidy.ts) as tensors see it. */
export interface TensorScope {
  /** Tensors numbered below this were made before the scope opened. */
  readonly opened: number;
  /** Tensors from outside the scope, or kept, whose memory as they stand at its end outlives it. */
  readonly held: Set<Tensor>;
}
/** Open tidy() scopes, innermost last. */
export const tensorScopes: TensorScope[] = [];
/**
 * A tensor made before some open scopes now stands for other memory (realized, assigned, given a gradient):
 * those scopes must not free it. `made` -1: every open scope (keep(), parameters).
 */
export function holdInScopes(t: Tensor, made: number): void {
  for (const scope of tensorScopes) if (made < scope.opened) scope.held.add(t);
}
export const tensorCount = (): number => tensorsMade;

const requiringGrad = new Set<WeakRef<Tensor>>();
/** Tensors with an assign not yet run: the JIT runs them inside the captured call. */
const pendingAssigns = new Set<Tensor>();

export class Tensor {
  /**
   * The node this tensor currently stands for (replaced by a buffer view once realized); one per device when spread
   * over several.
   */
  private _node!: Lazy;
  private _grad: Tensor | null = null;
  private _requiresGrad = false;
  private _disposed = false;
  private readonly made = tensorsMade++;

  get node(): Lazy {
    if (this._disposed)
      throw new TsgradError(`this ${fmtShape(this._node.shape)} tensor was disposed and cannot be used any more`);
    return this._node;
  }
  set node(node: Lazy) {
    this._node = node;
    if (tensorScopes.length > 0) holdInScopes(this, this.made);
  }
  /** The gradient the last backward() left (summed over backward passes until zeroed). */
  get grad(): Tensor | null {
    return this._grad;
  }
  set grad(grad: Tensor | null) {
    this._grad = grad;
    if (tensorScopes.length > 0) holdInScopes(this, this.made);
  }
  /** Whether dispose() was called: every use then throws. */
  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Dropout and other train-only behaviour switch on this. */
  static training = false;
  /** dtype of new float tensors (`DEFAULT_FLOAT=HALF` gives float16). */
  static defaultFloat: DType = defaultFloatFromEnv();
  private static seed = 0;
  /**
   * Per device: a uint32 counter kept on the device plus the calls made since it last advanced.
   * A draw's key is counter + calls; the JIT advances the counter after each call, so a replayed
   * step draws new numbers while the kernels (with their baked-in call offsets) stay the same.
   * A draw over several devices keys them all by the first one's counter: the others hold mirrors of it,
   * advanced with it, so such a draw copies nothing between devices (each copy of the key had split a
   * data-parallel step's graphs: 73 copies a device a BERT-large step on 8 GPUs).
   */
  private static rngCounters = new Map<string, { counter: Tensor; calls: number; mirrors: Map<string, Tensor> }>();

  constructor(data: TensorData | Lazy, opts: TensorOptions = {}) {
    if (data instanceof UOp || data instanceof MultiLazy) {
      this.node = data;
    } else {
      const { flat, shape, inferred } = flatten(data);
      const dtype = toDtype(opts.dtype, inferred);
      const encoded = encode(flat, dtype);
      const nodes = resolveDevices(opts.device).map((device) =>
        UOp.buffer(new Buffer(device, flat.length, dtype).copyin(encoded)).reshape(shape),
      );
      this.node = nodes.length === 1 ? nodes[0]! : new MultiLazy(nodes, null);
    }
    if (opts.requiresGrad) this.requiresGrad = true;
  }

  get shape(): number[] {
    return [...this.node.shape];
  }
  get dtype(): DType {
    return this.node.dtype;
  }
  get device(): string {
    return this.node.device;
  }
  get ndim(): number {
    return this.node.shape.length;
  }
  get numel(): number {
    return this.node.numel;
  }

  get requiresGrad(): boolean {
    return this._requiresGrad;
  }
  set requiresGrad(on: boolean) {
    if (on && !this._requiresGrad) {
      if (!isFloat(this.dtype)) throw new TsgradError(`requiresGrad needs a float tensor, got ${this.dtype.name}`);
      // a parameter must be its own node: equal lazy values are shared (realized ones too), gradients must not be
      const sharesBuffer = shardsOf(this.node).some((u) => (storedBuffer(u)?.realizedBy ?? 0) > 1);
      if (!isStored(this.node) || sharesBuffer) this.node = this.node.contiguous(uniqueTag++);
      requiringGrad.add(new WeakRef(this));
      // parameters outlive tidy() scopes, as TensorFlow.js's variables do: their owner frees them
      if (tensorScopes.length > 0) holdInScopes(this, -1);
    }
    this._requiresGrad = on;
  }

  /**
   * Gives this tensor's memory back now rather than when the garbage collector finds it unreachable (which,
   * in one synchronous loop, is never before the loop ends): the buffer it reads, if it is one (realized, or
   * made from data, or a reshape of such), goes to the device's pool for the next allocation of its size.
   * Every later use of this tensor throws, and so does computing anything that reads that buffer (views of it
   * included); a buffer another tensor was realized onto too is freed with the last of them. A lazy tensor
   * has no memory of its own: disposing it frees nothing. A JIT's output buffers stay with the JIT. See tidy().
   */
  dispose(): void {
    if (this._disposed) return;
    for (const u of shardsOf(this._node)) {
      const buffer = u.baseBuffer;
      if (!buffer || buffer.pinned) continue;
      if (buffer.realizedBy > 1) buffer.realizedBy--;
      else buffer.dispose();
    }
    this._requiresGrad = false;
    pendingAssigns.delete(this);
    this._disposed = true;
  }

  toString(): string {
    if (this._disposed) return "<Tensor disposed>";
    return `<Tensor ${fmtShape(this.shape)} ${this.dtype.name} on ${this.device}>`;
  }

  // ---------------------------------------------------------------- creation

  /** `shape` filled with `value`: int32 for a whole number (as arange), bool for a boolean, else a float. */
  static full(shape: readonly number[], value: number | boolean, opts: TensorOptions = {}): Tensor {
    const multi = onEachDevice(opts, (o) => Tensor.full(shape, value, o));
    if (multi) return multi;
    const inferred =
      typeof value === "boolean" ? dtypes.bool : Number.isInteger(value) ? dtypes.int32 : Tensor.defaultFloat;
    const dtype = toDtype(opts.dtype, inferred);
    const device = Device.canonicalize(opts.device ?? Device.DEFAULT);
    checkShape(shape);
    const node = UOp.const(castScalar(Number(value), dtype), dtype, device)
      .reshape(shape.map(() => 1))
      .expand(shape);
    return new Tensor(node, opts);
  }
  static zeros(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    return Tensor.full(shape, 0, { ...opts, dtype: opts.dtype ?? Tensor.defaultFloat });
  }
  static ones(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    return Tensor.full(shape, 1, { ...opts, dtype: opts.dtype ?? Tensor.defaultFloat });
  }
  /** Uninitialised storage: whatever the memory held (a freed buffer's values where a pool hands one out). */
  static empty(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    const multi = onEachDevice(opts, (o) => Tensor.empty(shape, o));
    if (multi) return multi;
    checkShape(shape);
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    const buffer = new Buffer(Device.canonicalize(opts.device ?? Device.DEFAULT), prod(shape as number[]), dtype);
    return new Tensor(UOp.buffer(buffer).reshape(shape), opts);
  }
  /** [start, start+step, ...) below stop; `Tensor.arange(5)` is [0, 1, 2, 3, 4]. */
  static arange(start: number, stop?: number, step = 1, opts: TensorOptions = {}): Tensor {
    const multi = onEachDevice(opts, (o) => Tensor.arange(start, stop, step, o));
    if (multi) return multi;
    // (plain JavaScript callers: options in the place of `stop` would otherwise surface as a NaN shape)
    for (const [name, value] of [
      ["start", start],
      ["stop", stop ?? 0],
      ["step", step],
    ] as const) {
      if (typeof value !== "number")
        throw new TsgradError(`arange(start, stop?, step?, options?): ${name} is ${typeof value}, not a number`);
    }
    if (stop === undefined) [start, stop] = [0, start];
    if (step === 0) throw new TsgradError("arange: step must not be 0");
    const n = Math.max(0, Math.ceil((stop - start) / step));
    const allInt = [start, stop, step].every(Number.isInteger);
    const dtype = toDtype(opts.dtype, allInt ? dtypes.int32 : Tensor.defaultFloat);
    const device = Device.canonicalize(opts.device ?? Device.DEFAULT);
    const index = new Tensor(UOp.index(n, device));
    return index
      .cast(isFloat(dtype) ? dtypes.float32 : dtype)
      .mul(step)
      .add(start)
      .cast(dtype);
  }
  /** `steps` evenly spaced values from start to end, both included (float unless given a dtype). */
  static linspace(start: number, end: number, steps: number, opts: TensorOptions = {}): Tensor {
    if (!Number.isInteger(steps) || steps < 0)
      throw new TsgradError(`linspace: steps must be a non-negative integer, got ${steps}`);
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    if (steps === 1) return Tensor.full([1], start, { ...opts, dtype });
    // start + i * step, the last element exactly `end` (a step rounded in float32 could miss it)
    const i = Tensor.arange(steps, undefined, 1, { ...opts, dtype: dtypes.float32 });
    return i
      .eq(steps - 1)
      .where(end, i.mul((end - start) / (steps - 1)).add(start))
      .cast(dtype);
  }
  /** The n x m identity. */
  static eye(n: number, m = n, opts: TensorOptions = {}): Tensor {
    const rows = Tensor.arange(n, undefined, 1, { device: opts.device }).reshape([n, 1]);
    const cols = Tensor.arange(m, undefined, 1, { device: opts.device }).reshape([1, m]);
    return rows.eq(cols).cast(toDtype(opts.dtype, Tensor.defaultFloat));
  }
  /** Makes every random op reproducible from here on. */
  static manualSeed(seed: number): void {
    Tensor.seed = seed >>> 0;
    Tensor.rngCounters.clear();
  }
  /** Advances each device's RNG counter past the draws made so far; the tensors to realize for that. */
  static rngState(): Tensor[] {
    const advanced: Tensor[] = [];
    for (const state of Tensor.rngCounters.values()) {
      if (state.calls === 0) continue;
      for (const counter of [state.counter, ...state.mirrors.values()]) {
        counter.assign(counter.add(state.calls));
        advanced.push(counter);
      }
      state.calls = 0;
    }
    return advanced;
  }
  /** The next draw's key on each of `devices` (the same number on each, the first device's stream). */
  private static nextRngKeys(devices: readonly string[]): UOp[] {
    const first = devices[0]!;
    let state = Tensor.rngCounters.get(first);
    if (!state) {
      // the counters live as long as the process: no tidy() scope frees them
      const counter = new Tensor(Uint32Array.from([0]), { device: first });
      holdInScopes(counter, -1);
      state = { counter, calls: 0, mirrors: new Map() };
      Tensor.rngCounters.set(first, state);
    }
    const call = state.calls++;
    return devices.map((device) => {
      let counter = device === first ? state.counter : state.mirrors.get(device);
      if (!counter) {
        // once per device: the mirror starts from the counter's value, read back
        counter = new Tensor(Uint32Array.from(state.counter.toArray() as Uint32Array), { device });
        holdInScopes(counter, -1);
        state.mirrors.set(device, counter);
      }
      // the call's offset comes from a buffer, not a constant: every draw of one shape is then the same
      // kernel (one compile, one lowering), however many dropout layers a model has
      return counter.add(new Tensor(Uint32Array.of(call), { device })).node as UOp;
    });
  }
  /** Uniform in [0, 1). */
  static rand(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    checkShape(shape);
    const devices = resolveDevices(opts.device);
    // one key for all devices (the first device's stream): replicas draw the same numbers,
    // so replicated weights start equal and a sharded tensor's dropout slices one logical mask
    const keys = Tensor.nextRngKeys(devices);
    const draws = devices.map((d, i) => randomBits(prod(shape as number[]), Tensor.seed, keys[i]!, d));
    const bits = new Tensor(draws.length === 1 ? draws[0]! : new MultiLazy(draws, null));
    return uniformFromBits(bits).reshape(shape).cast(toDtype(opts.dtype, Tensor.defaultFloat)).withGrad(opts);
  }
  /**
   * `Tensor.rand(like.shape)` on like's devices, float32, laid out as `like` is: sharded along the first
   * axis, each device draws only its slice of the one logical draw (the numbers the replicated draw's slice
   * holds: a dropout mask over a sharded batch costs each device its share, not the whole batch).
   */
  private static randLike(like: Tensor): Tensor {
    const node = like.node;
    if (!(node instanceof MultiLazy) || node.axis !== 0)
      return Tensor.rand(like.shape, { device: like.device, dtype: dtypes.float32 });
    const keys = Tensor.nextRngKeys(node.devices);
    let start = 0;
    const draws = node.shards.map((shard, i) => {
      const bits = randomBits(shard.numel, Tensor.seed, keys[i]!, shard.device, start);
      start += shard.numel;
      return bits;
    });
    return uniformFromBits(new Tensor(new MultiLazy(draws, 0))).reshape(like.shape);
  }
  static uniform(shape: readonly number[], low = 0, high = 1, opts: TensorOptions = {}): Tensor {
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    return Tensor.rand(shape, { ...opts, dtype: dtypes.float32, requiresGrad: false })
      .mul(high - low)
      .add(low)
      .cast(dtype)
      .withGrad(opts);
  }
  /** Standard normal, by Box-Muller. */
  static randn(shape: readonly number[], opts: TensorOptions = {}): Tensor {
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    const u = Tensor.rand([2, ...shape], { ...opts, dtype: dtypes.float32, requiresGrad: false });
    const [u1, u2] = [u.index(0), u.index(1)];
    const radius = Tensor.ones(shape, { device: u.device, dtype: dtypes.float32 }).sub(u1).log().mul(-2).sqrt();
    return radius
      .mul(u2.mul(2 * Math.PI).cos())
      .cast(dtype)
      .withGrad(opts);
  }
  static normal(shape: readonly number[], mean = 0, std = 1, opts: TensorOptions = {}): Tensor {
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    return Tensor.randn(shape, { ...opts, dtype: dtypes.float32, requiresGrad: false })
      .mul(std)
      .add(mean)
      .cast(dtype)
      .withGrad(opts);
  }
  /**
   * Normal(mean, std) truncated to [mean + a*std, mean + b*std], by inverting the CDF (as TensorFlow and tinygrad do).
   */
  static truncNormal(
    shape: readonly number[],
    { mean = 0, std = 1, a = -2, b = 2 } = {},
    opts: TensorOptions = {},
  ): Tensor {
    const dtype = toDtype(opts.dtype, Tensor.defaultFloat);
    const cdf = (x: number): number => 0.5 * (1 + erfScalar(x / Math.SQRT2));
    const [lo, hi] = [cdf(a), cdf(b)];
    const u = Tensor.uniform(shape, 2 * lo - 1, 2 * hi - 1, { ...opts, dtype: dtypes.float32, requiresGrad: false });
    const z = u.erfinv().mul(Math.SQRT2).clip(a, b);
    return z.mul(std).add(mean).cast(dtype).withGrad(opts);
  }
  /** Integers uniform in [low, high). */
  static randint(shape: readonly number[], low: number, high: number, opts: TensorOptions = {}): Tensor {
    return Tensor.rand(shape, { ...opts, dtype: dtypes.float32 })
      .mul(high - low)
      .floor()
      .add(low)
      .cast(toDtype(opts.dtype, dtypes.int32));
  }

  private withGrad(opts: TensorOptions): Tensor {
    if (opts.requiresGrad) this.requiresGrad = true;
    return this;
  }

  // ---------------------------------------------------------------- realize and read

  /** Computes this tensor (and `others`) now. */
  realize(...others: Tensor[]): this {
    Tensor.realizeAll([this, ...others]);
    return this;
  }

  /** Tensors assigned to since they were last realized. */
  static pendingAssigns(): Tensor[] {
    return [...pendingAssigns];
  }

  static realizeAll(tensors: readonly Tensor[]): void {
    for (const t of tensors) pendingAssigns.delete(t);
    const pending = tensors.filter((t) => !isStored(t.node) && !shardsOf(t.node).every((u) => u.op === "CONST"));
    if (pending.length > 0) realizeNodes(pending.flatMap((t) => shardsOf(t.node)));
    for (const t of pendingAssigns) if (isStored(t.node)) pendingAssigns.delete(t);
    // a tensor whose equal lazy value another tensor realized already shares that buffer: it owns it too
    const shared = tensors.filter(
      (t) =>
        !pending.includes(t) && shardsOf(t.node).every((u) => u.op !== "ASSIGN" && !u.baseBuffer && storedBuffer(u)),
    );
    for (const t of [...pending, ...shared]) {
      t.node = mapShards(t.node, (u) => {
        const buffer = storedBuffer(u)!;
        if (u.op !== "ASSIGN") buffer.realizedBy++; // an assign's target already belongs to its tensor
        return UOp.buffer(buffer).reshape(u.shape);
      });
    }
  }

  /** The values as a flat row-major typed array (16-bit floats decoded to Float32Array, int64 to BigInt64Array). */
  toArray(): TypedArray {
    if (this.node instanceof MultiLazy) return new Tensor(this.node.copyTo(this.node.devices[0]!)).toArray();
    const t = storedBuffer(this.node) ? this : this.contiguous();
    t.realize();
    const raw = storedBuffer(t.node as UOp)!.toTypedArray();
    if (this.dtype === dtypes.float16) return Float32Array.from(raw as Uint16Array, f16BitsToF32);
    if (this.dtype === dtypes.bfloat16) return Float32Array.from(raw as Uint16Array, bf16BitsToF32);
    return raw;
  }

  /** The values as nested arrays of numbers (booleans for bool). */
  tolist(): NestedArray {
    const flat = Array.from(this.toArray() as ArrayLike<number | bigint>, (v) =>
      this.dtype === dtypes.bool ? v !== 0 : Number(v),
    );
    const build = (dim: number, offset: number): NestedArray => {
      if (dim === this.ndim) return flat[offset]!;
      const stride = prod(this.shape.slice(dim + 1));
      return range(this.shape[dim]!).map((i) => build(dim + 1, offset + i * stride));
    };
    return build(0, 0);
  }

  /** The value of a one-element tensor. */
  item(): number {
    if (this.numel !== 1) throw new TsgradError(`item() needs one element, tensor has shape ${fmtShape(this.shape)}`);
    return Number(this.toArray()[0]);
  }

  /** A copy on another device; on several devices ("CPU:0,CPU:1" or a list), a copy on each (replicated). */
  to(device: string | readonly string[]): Tensor {
    const devices = resolveDevices(typeof device === "string" ? device : multiDeviceName(device));
    const whole = this.node instanceof MultiLazy ? this.node.copyTo(devices[0]!) : this.node;
    if (devices.length === 1) return new Tensor(whole.copyTo(devices[0]!));
    return new Tensor(
      new MultiLazy(
        devices.map((d) => whole.copyTo(d)),
        null,
      ),
    );
  }

  /** Splits along `axis` over `devices` (equal blocks): device i holds block i. */
  shard(devices: string | readonly string[], axis = 0): Tensor {
    const list = resolveDevices(typeof devices === "string" ? devices : multiDeviceName(devices));
    const a = this.normalizeAxis(axis);
    if (this.node instanceof MultiLazy && multiDeviceName(this.node.devices) === multiDeviceName(list))
      return new Tensor(this.node.relayout(a));
    const whole = this.node instanceof MultiLazy ? this.node.copyTo(list[0]!) : this.node;
    const sizes = splitSizes(this.shape[a]!, list.length, this.shape, a);
    let start = 0;
    return new Tensor(
      new MultiLazy(
        list.map((d, i) => {
          const block = whole.shrink(
            this.shape.map((n, dim) => (dim === a ? [start, start + sizes[i]!] : [0, n]) as [number, number]),
          );
          if (i === list.length - 1) start = 0;
          else start += sizes[i]!;
          return block.copyTo(d);
        }),
        a,
      ),
    );
  }

  /** The devices this tensor lives on (one entry unless it is spread over several). */
  get devices(): string[] {
    return this.node instanceof MultiLazy ? this.node.devices : [this.node.device];
  }

  // ---------------------------------------------------------------- assignment and autograd

  /** Writes `value` into this tensor's storage (realizing this tensor first if needed). */
  assign(value: Tensor | number): this {
    const v = this.operand(value).cast(this.dtype);
    if (!arraysEqual(v.shape, this.shape))
      throw new TsgradError(`assign: value shape ${fmtShape(v.shape)} differs from target ${fmtShape(this.shape)}`);
    if (v.device !== this.device) throw new TsgradError(`assign: value on ${v.device}, target on ${this.device}`);
    if (!isStored(this.node)) this.realize();
    // equal lazy values share one buffer when realized; writing must not change the other tensors
    if (shardsOf(this.node).some((u) => storedBuffer(u)!.realizedBy > 1)) this.node = this.node.contiguous(uniqueTag++);
    if (!isStored(this.node)) this.realize();
    this.node =
      this.node instanceof MultiLazy ? this.node.assign(v.node) : this.node.assign(single(v.node, "assign", this.node));
    pendingAssigns.add(this);
    return this;
  }

  /** The same values with no autograd history: gradients do not flow back through it (a view, no copy). */
  detach(): Tensor {
    return new Tensor(this.node.detach());
  }

  /** Fills `.grad` of every tensor with requiresGrad that this (scalar) tensor depends on. */
  backward(gradient?: Tensor): void {
    if (!gradient && this.numel !== 1)
      throw new TsgradError(`backward() without a gradient needs a scalar, got shape ${fmtShape(this.shape)}`);
    const seed = gradient ?? Tensor.ones(this.shape, { dtype: this.dtype, device: this.device });
    const params: Tensor[] = [];
    for (const ref of requiringGrad) {
      const t = ref.deref();
      if (!t) requiringGrad.delete(ref);
      else if (t.requiresGrad) params.push(t);
    }
    const byNode = new Map<UOp, Tensor[]>();
    for (const p of params) for (const u of shardsOf(p.node)) byNode.set(u, [...(byNode.get(u) ?? []), p]);
    // on several devices the loss is replicated (an all-reduce made it so): one copy carries the whole gradient
    const grads = computeGradients(shardsOf(this.node)[0]!, shardsOf(seed.node)[0]!, new Set(byNode.keys()));
    const touched = [...new Set([...grads.keys()].flatMap((u) => byNode.get(u)!))];
    // as PyTorch refuses it: silence here left every .grad null
    if (touched.length === 0) {
      throw new TsgradError(
        `backward: this ${fmtShape(this.shape)} tensor depends on no tensor that requires grad (a realized tensor keeps no graph: call backward() on the lazy result, and realize after)`,
      );
    }
    // a replicated parameter's gradient is the all-reduce of each device's: all of them together, in buckets
    const replicated = touched.filter((p) => p.node instanceof MultiLazy && p.node.axis === null);
    const reduced = new Map(
      allReduceMany(
        "ADD",
        replicated.map((p) => localGradients(p.node as MultiLazy, grads)),
      ).map((shards, i) => [replicated[i]!, shards]),
    );
    for (const p of touched) {
      const shards = reduced.get(p);
      const grad = new Tensor(shards ? new MultiLazy(shards, null) : gradientFor(p.node, grads));
      p.grad = p.grad ? p.grad.add(grad) : grad;
    }
  }

  // ---------------------------------------------------------------- elementwise

  /** A tensor or scalar as a tensor broadcastable with this one; scalars take this tensor's dtype where they fit. */
  private operand(x: Tensor | number | boolean): Tensor {
    if (x instanceof Tensor) return x;
    const value = typeof x === "boolean" ? Number(x) : x;
    let dtype = this.dtype;
    if (!isFloat(dtype) && !Number.isInteger(value)) dtype = Tensor.defaultFloat;
    else if (dtype === dtypes.bool && typeof x !== "boolean") dtype = dtypes.int32;
    return new Tensor(constOn(this.node, castScalar(value, dtype), dtype));
  }

  /** Both operands broadcast to one shape and promoted to one dtype. */
  private broadcastWith(x: Tensor | number | boolean, reverse = false): [Tensor, Tensor] {
    const other = this.operand(x);
    const [a, b]: [Tensor, Tensor] = reverse ? [other, this] : [this, other];
    if (a.device !== b.device) throw new TsgradError(`devices ${a.device} and ${b.device} differ; copy with to()`);
    const dtype = promote(a.dtype, b.dtype);
    const shape = broadcastShapes(a.shape, b.shape);
    return [a.cast(dtype).broadcastTo(shape), b.cast(dtype).broadcastTo(shape)];
  }

  private binary(op: BinaryOp, x: Tensor | number | boolean, reverse = false): Tensor {
    const [a, b] = this.broadcastWith(x, reverse);
    return new Tensor(alu(a.node, op, b.node));
  }

  private unary(op: UnaryOp): Tensor {
    return new Tensor(alu(this.node, op));
  }

  /** This tensor as a float (itself if it already is one, else cast to `Tensor.defaultFloat`). */
  float(): Tensor {
    return isFloat(this.dtype) ? this : this.cast(Tensor.defaultFloat);
  }

  add(x: Tensor | number): Tensor {
    return this.binary("ADD", x);
  }
  sub(x: Tensor | number): Tensor {
    const [a, b] = this.broadcastWith(x);
    return a.add(b.neg());
  }
  mul(x: Tensor | number): Tensor {
    return this.binary("MUL", x);
  }
  /** True division (integers become floats); `idiv` truncates. */
  div(x: Tensor | number): Tensor {
    const [a, b] = this.broadcastWith(x);
    return a.float().mul(b.float().reciprocal());
  }
  idiv(x: Tensor | number): Tensor {
    return this.binary("IDIV", x);
  }
  mod(x: Tensor | number): Tensor {
    return this.binary("MOD", x);
  }
  neg(): Tensor {
    return this.dtype === dtypes.bool ? this.logicalNot() : this.unary("NEG");
  }
  reciprocal(): Tensor {
    return this.float().unary("RECIP");
  }
  sqrt(): Tensor {
    return this.float().unary("SQRT");
  }
  rsqrt(): Tensor {
    return this.sqrt().reciprocal();
  }
  exp2(): Tensor {
    return this.float().unary("EXP2");
  }
  log2(): Tensor {
    return this.float().unary("LOG2");
  }
  exp(): Tensor {
    const x = this.float();
    // a 16-bit float scales by log2(e) in float32: rounded to float16 the constant is off by 2e-4 (exp(10) by 0.2%)
    const sixteen = x.dtype === dtypes.float16 || x.dtype === dtypes.bfloat16;
    return (sixteen ? x.cast(dtypes.float32) : x).mul(Math.LOG2E).exp2().cast(x.dtype);
  }
  log(): Tensor {
    return this.log2().mul(Math.LN2);
  }
  sin(): Tensor {
    return this.float().unary("SIN");
  }
  /** 1 - 2 sin²(x / 2): halving is exact, where x + π/2 rounds away a large x's low bits (cos(1e6) was off by 0.003). */
  cos(): Tensor {
    const half = this.float().mul(0.5).sin();
    return half.mul(half).mul(-2).add(1);
  }
  square(): Tensor {
    return this.mul(this);
  }
  trunc(): Tensor {
    return isFloat(this.dtype) ? this.unary("TRUNC") : this;
  }
  floor(): Tensor {
    const t = this.trunc();
    return t.gt(this).where(t.sub(1), t);
  }
  ceil(): Tensor {
    const t = this.trunc();
    return t.lt(this).where(t.add(1), t);
  }
  /** To the nearest integer, halves to the even one (2.5 -> 2, 3.5 -> 4), as PyTorch and NumPy. */
  round(): Tensor {
    if (!isFloat(this.dtype)) return this;
    const down = this.floor();
    // x - floor(x) is exact, where x + 0.5 can round up (0.49999997 + 0.5 is 1 in float32)
    const fraction = this.sub(down);
    const up = fraction.gt(0.5).logicalOr(fraction.eq(0.5).logicalAnd(down.mod(2).ne(0)));
    return up.where(down.add(1), down);
  }
  relu(): Tensor {
    // max(x, 0) with PyTorch's gradient at the kink, 0 at x = 0 (MAX would give x half of it, a tie)
    return this.gt(0).where(this, this.maximum(0).detach());
  }
  /**
   * 1 / (1 + exp(-x)) for x >= 0, exp(x) / (1 + exp(x)) below: no exp overflows, in the value or in the gradient
   * (the one form's gradient at x = -100 was -0 * inf, NaN). Each side reads x only where it is chosen, so the
   * other side's gradient is 0 times a finite number.
   */
  sigmoid(): Tensor {
    const positive = this.ge(0);
    const above = positive.where(this, 0).neg().exp().add(1).reciprocal();
    const e = positive.where(0, this).exp();
    return positive.where(above, e.div(e.add(1)));
  }
  tanh(): Tensor {
    const x = isFloat(this.dtype) ? this : this.cast(Tensor.defaultFloat);
    // 2σ(2x) − 1 cancels near 0 (up to 4e-4 relative error in float32); there x + x·z·P(z), z = x², with P
    // fitted to tanh by least squares on |x| ≤ 0.625 (1.1e-7 relative in float32, the other form's at the seam)
    // (the polynomial reads 0 where it is not used: at ±inf it would give NaN, and its 0 gradient times NaN too)
    const near0 = x.abs().lt(TANH_SMALL_BOUND);
    const xs = near0.where(x, 0);
    const z = xs.square();
    const p = TANH_SMALL_COEFFICIENTS.reduceRight((acc: Tensor | number, c) => z.mul(acc).add(c), 0) as Tensor;
    return near0.where(xs.add(xs.mul(z).mul(p)), x.mul(2).sigmoid().mul(2).sub(1));
  }
  abs(): Tensor {
    if (this.dtype === dtypes.bool || this.dtype.kind === "uint") return this;
    // max(x, -x): at 0 the tie splits the gradient into halves of opposite signs, 0 in all (as PyTorch);
    // + 0 makes a -0 that max may pick +0 (1 / abs(0) is inf, not -inf)
    return this.maximum(this.neg()).add(0);
  }
  /** -1, 0 or 1 (0 for NaN, as PyTorch); its gradient is 0, through x * 0 where x is 0. */
  sign(): Tensor {
    if (this.dtype === dtypes.bool) return this;
    return this.gt(0).where(1, this.lt(0).where(-1, this.eq(0).where(this.mul(0), 0)));
  }
  /**
   * Error function, Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7, below float32 resolution near 1), with its
   * gradient 2/√π exp(-x²) as such: the polynomial's own is 0 at x = 0 (through sign), where erf's is 2/√π.
   */
  erf(): Tensor {
    const x = this.float();
    const [erf, gaussian] = x.erfAndGaussian();
    return erf.detach().add(x.zeroWithSlope(gaussian.mul(2 / Math.sqrt(Math.PI))));
  }
  /**
   * A term worth 0 whose gradient with respect to this tensor is `slope` (held constant): an op whose derivative is
   * known in closed form adds it to its detached value. x - x is NaN at ±inf, where the term is 0 (so is its gradient).
   */
  private zeroWithSlope(slope: Tensor): Tensor {
    const zero = this.sub(this.detach());
    return zero.eq(0).where(zero.mul(slope.detach()), 0);
  }
  /** erf(x) and the exp(-x^2) it is made from (GELU's gradient reads the second too), in float32. */
  private erfAndGaussian(): [Tensor, Tensor] {
    const x = this.float();
    const t = x.abs().mul(0.3275911).add(1).reciprocal();
    const poly = t
      .mul(1.061405429)
      .add(-1.453152027)
      .mul(t)
      .add(1.421413741)
      .mul(t)
      .add(-0.284496736)
      .mul(t)
      .add(0.254829592)
      .mul(t);
    const gaussian = x.square().neg().exp();
    return [x.sign().mul(poly.mul(gaussian).neg().add(1)), gaussian];
  }
  /**
   * Inverse error function (Giles' single-precision approximation), used by truncated normal init: ±inf at ±1, NaN
   * beyond; its gradient √π/2 exp(erfinv(x)²) as such (the polynomial's is NaN at 0, through a branch not taken).
   */
  erfinv(): Tensor {
    const x = this.float();
    const w = x.neg().mul(x).add(1).log().neg();
    const small = w.sub(2.5);
    const p1 = [
      2.81022636e-8, 3.43273939e-7, -3.5233877e-6, -4.39150654e-6, 0.00021858087, -0.00125372503, -0.00417768164,
      0.246640727, 1.50140941,
    ].reduce<Tensor | null>((acc, c) => (acc ? acc.mul(small).add(c) : small.mul(0).add(c)), null)!;
    const big = w.sqrt().sub(3);
    const p2 = [
      -0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613, 0.00943887047,
      1.00167406, 2.83297682,
    ].reduce<Tensor | null>((acc, c) => (acc ? acc.mul(big).add(c) : big.mul(0).add(c)), null)!;
    const inner = w.lt(5).where(p1, p2).mul(x);
    // at ±1, where w is inf, the polynomial is inf - inf: x * inf there, whose gradient is ±inf as erfinv's (x * 1
    // elsewhere: an infinite factor where the branch is not taken would make its zero gradient NaN)
    const pole = x.abs().eq(1);
    const slope = pole.where(
      0,
      inner
        .square()
        .exp()
        .mul(Math.sqrt(Math.PI) / 2),
    );
    return pole.where(x.mul(pole.where(Infinity, 1)), inner.detach().add(x.zeroWithSlope(slope)));
  }
  /** GELU with the exact erf form, as BERT uses; `approximate: "tanh"` for the tanh form (GPT-2's). */
  gelu({ approximate = "none" }: { approximate?: "none" | "tanh" } = {}): Tensor {
    if (approximate === "tanh")
      return this.mul(0.5).mul(
        this.add(this.mul(this).mul(this).mul(0.044715))
          .mul(Math.sqrt(2 / Math.PI))
          .tanh()
          .add(1),
      );
    // x Φ(x), with Φ(x) = (1 + erf(x / √2)) / 2, whose gradient Φ(x) + x φ(x) is given as such: Φ and x φ(x)
    // are held constant (detached) and x φ(x) reaches the gradient through a term worth 0, (x - x) x φ(x).
    // Differentiating erf's polynomial instead (its reciprocal, exp and sign) made BERT's backward a kernel
    // of ~90 operations an element reading 9 buffers, most of them values the forward pass stored for it.
    if (!isFloat(this.dtype)) return this.cast(Tensor.defaultFloat).gelu();
    const [erf, gaussian] = this.mul(Math.SQRT1_2).erfAndGaussian();
    // (stored for the backward in the input's dtype, as the value would read them)
    const value = this.mul(0.5).mul(erf.add(1).cast(this.dtype).detach());
    // (at ±inf, where x φ(x) is NaN, the term is 0, which leaves the value what x Φ(x) gives)
    return value.add(this.zeroWithSlope(this.mul(gaussian.mul(1 / Math.sqrt(2 * Math.PI)).cast(this.dtype))));
  }
  /** x * sigmoid(x) (swish). */
  silu(): Tensor {
    return this.mul(this.sigmoid());
  }
  leakyRelu(slope = 0.01): Tensor {
    return this.gt(0).where(this, this.mul(slope));
  }
  relu6(): Tensor {
    return this.hardtanh(0, 6);
  }
  /** clip's values, with PyTorch's gradient: 0 at the bounds as beyond them (clip's is 1 at the bounds). */
  hardtanh(min = -1, max = 1): Tensor {
    return this.gt(min).logicalAnd(this.lt(max)).where(this, this.clip(min, max).detach());
  }
  hardsigmoid(): Tensor {
    return this.add(3).relu6().div(6);
  }
  hardswish(): Tensor {
    return this.mul(this.hardsigmoid());
  }
  /** x where positive, alpha * (exp(x) - 1) elsewhere. */
  elu(alpha = 1): Tensor {
    // exp reads x only where it is not positive: the branch `where` drops must stay finite, or its gradient
    // (0 * inf) is NaN; and at 0 it reads x itself, whose gradient is alpha there (min(x, 0) split it at the tie)
    const positive = this.gt(0);
    return positive.where(this, positive.where(0, this).expm1().mul(alpha));
  }
  /** SELU: scaled ELU with the self-normalising constants. */
  selu(): Tensor {
    return this.elu(1.6732632423543772).mul(1.0507009873554805);
  }
  /** log(1 + exp(beta * x)) / beta, without overflow for large x. */
  softplus(beta = 1): Tensor {
    const x = this.float().mul(beta);
    // max(x, 0) + log1p(exp(-|x|)): the max's tie rule gives the gradient at 0 its 1/2 (relu's kink rule gave 0)
    return x.maximum(0).add(x.abs().neg().exp().log1p()).div(beta);
  }
  /** x * tanh(softplus(x)). */
  mish(): Tensor {
    return this.mul(this.softplus().tanh());
  }
  /** log(sigmoid(x)), finite for very negative x. */
  logsigmoid(): Tensor {
    return this.neg().softplus().neg();
  }
  /**
   * log(1 + x), accurate for tiny x where 1 + x rounds: log(u) * x / (u - 1) with u = 1 + x (Goldberg) cancels
   * u's rounding error; where u - 1 is 0, x itself. Its gradient 1 / (1 + x) is given as such (the quotient's is
   * NaN at x = -1); where 1 + x is 0 or inf, log(1 + x) itself, -inf or inf with its own gradient.
   */
  log1p(): Tensor {
    const x = this.float();
    const u = x.add(1);
    const d = u.sub(1);
    const exact = d.eq(0);
    const value = exact.where(x, u.log().mul(x).div(exact.where(1, d)));
    const edge = u.eq(0).logicalOr(u.eq(Infinity));
    return edge.where(u.log(), value.detach().add(x.zeroWithSlope(edge.where(0, u.reciprocal()))));
  }
  /** exp(x) - 1, accurate for tiny x: (u - 1) * x / log(u) with u = exp(x) (Kahan) for |x| < 1. */
  expm1(): Tensor {
    const x = this.float();
    const small = x.abs().lt(1);
    const xs = small.where(x, 0); // the large branch's inputs kept out of the small one's arithmetic
    const u = xs.exp();
    const l = u.log();
    const exact = l.eq(0);
    const near = exact.where(xs, u.sub(1).mul(xs).div(exact.where(1, l)));
    return small.where(near, small.where(0, x).exp().sub(1));
  }
  /**
   * this ** x with PyTorch's values at the edges: a negative base with a non-integer exponent is NaN, x ** 0 and
   * 1 ** x are 1, 0 ** x is 0 or inf by the sign of x; the base's gradient is x * this^(x-1) there too.
   */
  pow(x: Tensor | number): Tensor {
    // whole powers up to 4 as products: exact, in the tensor's dtype, with the product rule's gradient
    if (typeof x === "number" && Number.isInteger(x) && x >= 1 && x <= 4) {
      let out: Tensor = this;
      for (let i = 1; i < x; i++) out = out.mul(this);
      return out;
    }
    if (x === 0 && !isFloat(this.dtype)) return Tensor.onesLike(this);
    // integers to integer powers stay integers (as in NumPy and PyTorch): in float64, exact, rounded
    if (!isFloat(this.dtype) && (x instanceof Tensor ? !isFloat(x.dtype) : Number.isInteger(x))) {
      const dtype = x instanceof Tensor ? promote(this.dtype, x.dtype) : this.dtype;
      const wide = (t: Tensor | number): Tensor | number => (t instanceof Tensor ? t.cast(dtypes.float64) : t);
      return (wide(this) as Tensor).pow(wide(x)).round().cast(dtype);
    }
    const [base, exponent] = this.float().broadcastWith(x);
    const zero = base.eq(0);
    // |base|^x as 2^(x log2|base|), with 1 in a zero base's place: the branch `where` drops must keep a finite
    // gradient, or its 0 * inf is NaN
    const magnitude = zero.where(1, base).abs().log2().mul(exponent).exp2();
    const whole = exponent.eq(exponent.trunc());
    const odd = exponent.abs().mod(2).eq(1);
    const signed = base.lt(0).where(whole.where(odd.where(magnitude.neg(), magnitude), Number.NaN), magnitude);
    const atZero = exponent.gt(0).where(0, Infinity).add(this.zeroBaseSlope(base, exponent));
    return exponent.eq(0).logicalOr(base.eq(1)).where(1, zero.where(atZero, signed));
  }
  /**
   * A term worth 0 at a zero base whose gradient there is x * 0^(x-1): 1 for x = 1 (the base itself), 0 above;
   * +inf for 0 < x < 1 and -inf below 0, as the square root's slope at 0 (1 where it is not read, for a finite 0).
   */
  private zeroBaseSlope(base: Tensor, exponent: Tensor): Tensor {
    const steep = base.eq(0).logicalAnd(exponent.lt(1)).logicalAnd(exponent.ne(0));
    const root = steep.where(base, 1).sqrt();
    const infinite = steep.where(exponent.gt(0).where(root, root.neg()), 0);
    return exponent.eq(1).where(base, infinite);
  }
  maximum(x: Tensor | number): Tensor {
    return this.binary("MAX", x);
  }
  minimum(x: Tensor | number): Tensor {
    const [a, b] = this.broadcastWith(x);
    return a.neg().maximum(b.neg()).neg();
  }
  /**
   * Each element limited to [min, max] (max where min > max; NaN stays NaN), with PyTorch's clamp gradient: 1 at
   * the bounds, where a max and a min would split it at the tie.
   */
  clip(min: number, max: number): Tensor {
    const low = this.lt(min).where(min, this);
    return low.gt(max).where(max, low);
  }

  lt(x: Tensor | number): Tensor {
    return this.binary("CMPLT", x);
  }
  gt(x: Tensor | number): Tensor {
    return this.binary("CMPLT", x, true);
  }
  ne(x: Tensor | number): Tensor {
    return this.binary("CMPNE", x);
  }
  eq(x: Tensor | number): Tensor {
    return this.ne(x).logicalNot();
  }
  /** this >= x: false where either is NaN (not lt's negation, for floats). */
  ge(x: Tensor | number): Tensor {
    return this.mayBeNaN(x) ? this.gt(x).logicalOr(this.eq(x)) : this.lt(x).logicalNot();
  }
  /** this <= x: false where either is NaN. */
  le(x: Tensor | number): Tensor {
    return this.mayBeNaN(x) ? this.lt(x).logicalOr(this.eq(x)) : this.gt(x).logicalNot();
  }
  private mayBeNaN(x: Tensor | number): boolean {
    return isFloat(this.dtype) || (x instanceof Tensor ? isFloat(x.dtype) : Number.isNaN(x));
  }
  logicalNot(): Tensor {
    return new Tensor(alu(this.cast(dtypes.bool).node, "NEG"));
  }
  logicalAnd(x: Tensor | boolean): Tensor {
    return this.cast(dtypes.bool).binary("AND", x instanceof Tensor ? x.cast(dtypes.bool) : x);
  }
  logicalOr(x: Tensor | boolean): Tensor {
    return this.cast(dtypes.bool).binary("OR", x instanceof Tensor ? x.cast(dtypes.bool) : x);
  }
  bitwiseAnd(x: Tensor | number): Tensor {
    return this.binary("AND", x);
  }
  bitwiseOr(x: Tensor | number): Tensor {
    return this.binary("OR", x);
  }
  bitwiseXor(x: Tensor | number): Tensor {
    return this.binary("XOR", x);
  }
  shl(bits: number): Tensor {
    return this.binary("SHL", bits);
  }
  shr(bits: number): Tensor {
    return this.binary("SHR", bits);
  }

  /** `cond.where(a, b)`: a where cond is true, else b. */
  where(a: Tensor | number, b: Tensor | number): Tensor {
    const ta = a instanceof Tensor ? a : undefined;
    const tb = b instanceof Tensor ? b : undefined;
    const like = ta ?? tb;
    const dtype =
      ta && tb
        ? promote(ta.dtype, tb.dtype)
        : like
          ? !isFloat(like.dtype) && !Number.isInteger(like === ta ? b : a)
            ? Tensor.defaultFloat
            : like.dtype
          : [a, b].every((v) => Number.isInteger(v))
            ? dtypes.int32
            : Tensor.defaultFloat;
    const asTensor = (v: Tensor | number): Tensor =>
      v instanceof Tensor ? v.cast(dtype) : new Tensor(constOn(this.node, castScalar(v, dtype), dtype));
    const [x, y] = [asTensor(a), asTensor(b)];
    const shape = broadcastShapes(broadcastShapes(this.shape, x.shape), y.shape);
    return new Tensor(
      alu(
        this.cast(dtypes.bool).broadcastTo(shape).node,
        "WHERE",
        x.broadcastTo(shape).node,
        y.broadcastTo(shape).node,
      ),
    );
  }

  cast(dtype: DType | DTypeName): Tensor {
    const d = toDtype(dtype, this.dtype);
    return d === this.dtype ? this : new Tensor(this.node.cast(d));
  }
  bitcast(dtype: DType | DTypeName): Tensor {
    return new Tensor(this.node.bitcast(toDtype(dtype, this.dtype)));
  }

  static zerosLike(t: Tensor): Tensor {
    return Tensor.zeros(t.shape, { dtype: t.dtype, device: t.device });
  }
  static onesLike(t: Tensor): Tensor {
    return Tensor.ones(t.shape, { dtype: t.dtype, device: t.device });
  }

  // ---------------------------------------------------------------- reductions

  private axes(axis: number | number[] | null | undefined): number[] {
    if (axis === null || axis === undefined) return range(this.ndim);
    const given = Array.isArray(axis) ? axis : [axis];
    // a 0-d tensor reduces over 0 or -1 as over an axis of size 1 (PyTorch, NumPy): nothing to reduce
    if (this.ndim === 0) {
      for (const a of given) this.normalizeAxis(a, 1);
      return [];
    }
    return given.map((a) => this.normalizeAxis(a));
  }

  normalizeAxis(axis: number, ndim = this.ndim): number {
    const a = axis < 0 ? axis + ndim : axis;
    if (!Number.isInteger(a) || a < 0 || a >= ndim)
      throw new TsgradError(`axis ${axis} is out of range for a tensor of shape ${fmtShape(this.shape)}`);
    return a;
  }

  private reduce(op: "ADD" | "MAX", { axis, keepdim = false }: ReduceOptions): Tensor {
    return (op === "MAX" ? this.maxSource() : this).reduceNode(op, { axis, keepdim });
  }

  /**
   * What a max reads. 16-bit floats are computed in float32 and rounded only when stored, so a computed
   * 16-bit value and its stored copy can differ; the max's gradient and argmax find the maximum by
   * equality with the stored result, so a computed 16-bit input is stored first, and all of them read it.
   */
  private maxSource(): Tensor {
    const sixteen = this.dtype === dtypes.float16 || this.dtype === dtypes.bfloat16;
    return sixteen && !isStored(this.node) && !shardsOf(this.node).every((u) => u.op === "CONTIGUOUS")
      ? this.contiguous()
      : this;
  }

  private reduceNode(op: "ADD" | "MAX", { axis, keepdim = false }: ReduceOptions): Tensor {
    const axes = this.axes(axis);
    const sharded = this.node instanceof MultiLazy && this.node.axis !== null;
    // a long reduce to few outputs: two kernels (split_reduce.ts)
    const out = new Tensor(sharded ? this.node.reduce(op, axes) : reduceInTwo(this.node, op, axes));
    return keepdim ? out : out.reshape(this.shape.filter((_, i) => !axes.includes(i)));
  }

  /** Sum; small ints sum as int32, 16-bit floats accumulate in float32. */
  sum(opts: ReduceOptions = {}): Tensor {
    const acc =
      this.dtype === dtypes.float16 || this.dtype === dtypes.bfloat16
        ? dtypes.float32
        : this.dtype.kind === "bool" || (this.dtype.kind === "int" && this.dtype.itemsize < 4)
          ? dtypes.int32
          : this.dtype.kind === "uint" && this.dtype.itemsize < 4
            ? dtypes.uint32
            : this.dtype;
    const out = this.cast(acc).reduce("ADD", opts);
    return isFloat(this.dtype) ? out.cast(this.dtype) : out;
  }
  /** Product of the elements (1 over an empty axis), exact: pairs multiplied level by level, as views. */
  prod(opts: ReduceOptions = {}): Tensor {
    const axes = this.axes(opts.axis);
    const rest = range(this.ndim).filter((a) => !axes.includes(a));
    const restShape = rest.map((a) => this.shape[a]!);
    const n = axes.reduce((p, a) => p * this.shape[a]!, 1);
    const whole = restShape.map(() => null);
    // the reduced axes flattened last, then halved until one element is left (an odd length padded with 1)
    let x: Tensor = this.permute([...rest, ...axes]).reshape([...restShape, n]);
    if (n % 2 === 1 || n === 0) x = x.pad([...whole, [0, 1]], 1);
    for (let level = 1; x.shape.at(-1)! > 1; level++) {
      const half = x.shape.at(-1)! / 2;
      x = x.shrink([...whole, [0, half]]).mul(x.shrink([...whole, [half, 2 * half]]));
      if (half > 1 && half % 2 === 1) x = x.pad([...whole, [0, 1]], 1);
      // stored every 4 levels: inlined, level k reads 2^k elements for each output
      if (level % 4 === 0 && half > 1) x = x.contiguous();
    }
    return x.reshape(opts.keepdim ? this.shape.map((s, i) => (axes.includes(i) ? 1 : s)) : restShape);
  }
  max(opts: ReduceOptions = {}): Tensor {
    this.refuseEmptyAxis("max", opts.axis);
    return this.reduce("MAX", opts);
  }
  min(opts: ReduceOptions = {}): Tensor {
    this.refuseEmptyAxis("min", opts.axis);
    return this.neg().max(opts).neg();
  }
  /** A max of nothing has no value (as in PyTorch and NumPy); a sum, a product or `any` of nothing does. */
  private refuseEmptyAxis(op: string, axis: ReduceOptions["axis"]): void {
    const empty = this.axes(axis).find((a) => this.shape[a] === 0);
    if (empty !== undefined)
      throw new TsgradError(
        `${op}(): axis ${empty} of ${fmtShape(this.shape)} has no elements, and the ${op} of none is undefined`,
      );
  }
  mean(opts: ReduceOptions = {}): Tensor {
    const n = this.axes(opts.axis).reduce((p, a) => p * this.shape[a]!, 1);
    return this.float().sum(opts).div(n);
  }
  /** Variance with Bessel's correction by default (`correction: 0` for the population variance). */
  var(opts: ReduceOptions & { correction?: number } = {}): Tensor {
    const n = this.axes(opts.axis).reduce((p, a) => p * this.shape[a]!, 1);
    const centered = this.float().sub(this.mean({ axis: opts.axis, keepdim: true }));
    return centered
      .square()
      .sum(opts)
      .div(Math.max(0, n - (opts.correction ?? 1)));
  }
  /** The square root of `var`; at zero spread its gradient is 0, as PyTorch's (not inf * 0, NaN). */
  std(opts: ReduceOptions & { correction?: number } = {}): Tensor {
    return this.var(opts).sqrtFlatAtZero();
  }
  /** sqrt, with gradient 0 where the argument is 0: the root of a sum of squares, whose own gradient is 0 there. */
  private sqrtFlatAtZero(): Tensor {
    const zero = this.eq(0);
    return zero.where(0, zero.where(1, this).sqrt());
  }
  /** Index of the first maximum along `axis` (of the flattened tensor when axis is omitted). */
  argmax(opts: { axis?: number; keepdim?: boolean } = {}): Tensor {
    if (opts.axis === undefined) return this.flatten().argmax({ axis: 0 });
    if (this.ndim === 0) {
      this.axes(opts.axis); // 0 or -1: the one element's index, 0
      return Tensor.zeros([], { dtype: dtypes.int32, device: this.device });
    }
    const axis = this.normalizeAxis(opts.axis);
    this.refuseEmptyAxis("argmax", axis);
    const n = this.shape[axis]!;
    const src = this.maxSource();
    // the max of a row holding NaN is NaN, which equals nothing: the first NaN is the answer then (as in PyTorch)
    const equal = src.eq(src.max({ axis, keepdim: true }));
    const isMax = isFloat(src.dtype) ? equal.logicalOr(src.ne(src)) : equal;
    const countdown = Tensor.arange(n, 0, -1, { device: this.device }).reshape(
      this.shape.map((_s, i) => (i === axis ? n : 1)),
    );
    const first = isMax.where(countdown, 0).max({ axis, keepdim: opts.keepdim });
    return first.neg().add(n).cast(dtypes.int32);
  }
  argmin(opts: { axis?: number; keepdim?: boolean } = {}): Tensor {
    this.refuseEmptyAxis("argmin", opts.axis);
    return this.neg().argmax(opts);
  }
  /** log(sum(exp(x))) without overflow: the max is taken out first (a row of -inf gives -inf). */
  logsumexp(opts: ReduceOptions = {}): Tensor {
    const x = this.float();
    const m = x.max({ axis: opts.axis, keepdim: true }).detach();
    const shift = m.abs().eq(Infinity).where(0, m); // an infinite max would make x - m NaN
    const out = x.sub(shift).exp().sum({ axis: opts.axis, keepdim: true }).log().add(shift);
    if (opts.keepdim) return out;
    const reduced = this.axes(opts.axis);
    return out.reshape(out.shape.filter((_, i) => !reduced.includes(i)));
  }
  /**
   * The L2 norm (sqrt of the sum of squares) over `axis` (all elements by default), gradient 0 at a zero vector as
   * PyTorch's; `ord: 1` for the L1 norm.
   */
  norm({ ord = 2, ...opts }: ReduceOptions & { ord?: 1 | 2 } = {}): Tensor {
    if (ord === 1) return this.abs().sum(opts);
    if (ord === 2) return this.float().square().sum(opts).sqrtFlatAtZero();
    throw new TsgradError(`norm: ord must be 1 or 2, got ${ord}`);
  }
  /** Whether any element is nonzero (true), as bool. */
  any(opts: ReduceOptions = {}): Tensor {
    // unsigned, so that a max over nothing starts from 0, false
    return this.ne(0).cast(dtypes.uint8).reduce("MAX", opts).cast(dtypes.bool);
  }
  /** Whether every element is nonzero (true), as bool. */
  all(opts: ReduceOptions = {}): Tensor {
    return this.eq(0).any(opts).logicalNot();
  }

  // ---------------------------------------------------------------- movement (views: no copies)

  reshape(shape: readonly number[]): Tensor {
    const unknown = shape.filter((s) => s === -1).length;
    if (unknown > 1) throw new TsgradError(`reshape to ${fmtShape(shape)}: only one -1 is allowed`);
    const known = prod(shape.filter((s) => s !== -1) as number[]);
    const resolved = shape.map((s) => (s === -1 ? (known === 0 ? 0 : this.numel / known) : s));
    if (resolved.some((s) => !Number.isInteger(s) || s < 0) || prod(resolved) !== this.numel) {
      throw new TsgradError(`cannot reshape ${fmtShape(this.shape)} (${this.numel} elements) to ${fmtShape(shape)}`);
    }
    return new Tensor(this.node.reshape(resolved));
  }
  permute(order: readonly number[]): Tensor {
    const axes = order.map((a) => this.normalizeAxis(a));
    if (axes.length !== this.ndim || new Set(axes).size !== axes.length)
      throw new TsgradError(
        `permute ${fmtShape(order)} is not a permutation of the ${this.ndim} axes of ${fmtShape(this.shape)}`,
      );
    return new Tensor(this.node.permute(axes));
  }
  /** Swaps two axes (the last two by default). */
  transpose(dim0 = -2, dim1 = -1): Tensor {
    const order = range(this.ndim);
    const [a, b] = [this.normalizeAxis(dim0), this.normalizeAxis(dim1)];
    [order[a], order[b]] = [order[b]!, order[a]!];
    return this.permute(order);
  }
  get T(): Tensor {
    return this.transpose();
  }
  /** Broadcasts size-1 axes (and new leading axes) to `shape`; -1 keeps an axis. */
  expand(shape: readonly number[]): Tensor {
    const resolved = shape.map((s, i) => (s === -1 ? this.shape[i - (shape.length - this.ndim)]! : s));
    return this.broadcastTo(resolved);
  }
  broadcastTo(shape: readonly number[]): Tensor {
    if (arraysEqual(shape, this.shape)) return this;
    if (shape.length < this.ndim)
      throw new TsgradError(`cannot broadcast ${fmtShape(this.shape)} to ${fmtShape(shape)}`);
    const padded = [...Array(shape.length - this.ndim).fill(1), ...this.shape] as number[];
    padded.forEach((s, i) => {
      if (s !== 1 && s !== shape[i])
        throw new TsgradError(
          `cannot broadcast ${fmtShape(this.shape)} to ${fmtShape(shape)}: axis ${i - (shape.length - this.ndim)} has ${s}, not 1 or ${shape[i]}`,
        );
    });
    return new Tensor(this.node.reshape(padded).expand(shape));
  }
  /**
   * Pads each axis with [before, after] elements (null: no padding on that axis): of `value`, or with mode
   * "reflect" (mirrored about the edge element), "replicate" (the edge element repeated) or "circular" (wrapped
   * around from the other end), as PyTorch's F.pad modes.
   */
  pad(pads: readonly ([number, number] | null)[], value = 0, mode: PadMode = "constant"): Tensor {
    if (pads.length !== this.ndim)
      throw new TsgradError(`pad needs one entry per axis: ${pads.length} given for shape ${fmtShape(this.shape)}`);
    if (mode !== "constant")
      return padFromEdges(
        this,
        pads.map((x) => x ?? [0, 0]),
        mode,
      );
    const p: Pads = pads.map((x) => x ?? [0, 0]);
    if (p.some(([b, a]) => b < 0 || a < 0))
      return this.shrink(p.map(([b, a], i) => [Math.max(0, -b), this.shape[i]! - Math.max(0, -a)])).pad(
        p.map(([b, a]) => [Math.max(0, b), Math.max(0, a)]),
        value,
      );
    const out = new Tensor(this.node.pad(p));
    if (value === 0) return out;
    const inside = new Tensor(Tensor.ones(this.shape, { dtype: dtypes.bool, device: this.device }).node.pad(p));
    return inside.where(out, value);
  }
  /** Keeps [start, end) of each axis (null: all of it). */
  shrink(bounds: readonly ([number, number] | null)[]): Tensor {
    if (bounds.length !== this.ndim)
      throw new TsgradError(
        `shrink needs one entry per axis: ${bounds.length} given for shape ${fmtShape(this.shape)}`,
      );
    const b: Pads = bounds.map((x, i) => x ?? [0, this.shape[i]!]);
    b.forEach(([s, e], i) => {
      if (s < 0 || e > this.shape[i]! || s > e)
        throw new TsgradError(`shrink [${s}, ${e}) is out of range for axis ${i} of ${fmtShape(this.shape)}`);
    });
    return new Tensor(this.node.shrink(b));
  }
  flip(axis: number | number[]): Tensor {
    const axes = this.axes(axis);
    return new Tensor(this.node.flip(range(this.ndim).map((i) => axes.includes(i))));
  }
  /** numpy-style indexing: `t.index(0, [1, 3], null, "...")`. */
  index(...spec: IndexSpec[]): Tensor {
    const ellipsis = spec.indexOf("...");
    const real = spec.filter((s) => s !== null && s !== "...").length;
    if (real > this.ndim) throw new TsgradError(`too many indices (${real}) for shape ${fmtShape(this.shape)}`);
    const full: IndexSpec[] =
      ellipsis >= 0
        ? [...spec.slice(0, ellipsis), ...Array<IndexSpec>(this.ndim - real).fill([]), ...spec.slice(ellipsis + 1)]
        : [...spec, ...Array<IndexSpec>(this.ndim - real).fill([])];
    let t: Tensor = this;
    const finalShape: number[] = [];
    const bounds: [number, number][] = [];
    const flips: number[] = [];
    const steps: number[] = [];
    let axis = 0;
    for (const s of full) {
      if (s === null) {
        finalShape.push(1);
        continue;
      }
      const size = this.shape[axis]!;
      if (typeof s === "number") {
        const i = s < 0 ? s + size : s;
        if (!Number.isInteger(i) || i < 0 || i >= size)
          throw new TsgradError(`index ${s} is out of range for axis ${axis} with size ${size}`);
        bounds.push([i, i + 1]);
        steps.push(1);
      } else {
        const [start, stop, stepOrNull] = s as [
          number | null | undefined,
          number | null | undefined,
          number | null | undefined,
        ];
        const step = stepOrNull ?? 1;
        if (step === 0) throw new TsgradError(`slice step must not be 0 (axis ${axis})`);
        const clampIdx = (v: number, lo: number, hi: number): number =>
          Math.min(hi, Math.max(lo, v < 0 ? v + size : v));
        let lo: number, hi: number;
        if (step > 0) {
          lo = clampIdx(start ?? 0, 0, size);
          hi = Math.max(lo, clampIdx(stop ?? size, 0, size));
        } else {
          hi = clampIdx(start ?? size - 1, -1, size - 1) + 1;
          lo = Math.min(hi, clampIdx(stop ?? -size - 1, -1, size - 1) + 1);
        }
        bounds.push([lo, hi]);
        if (step < 0) flips.push(axis);
        steps.push(Math.abs(step));
        finalShape.push(Math.ceil((hi - lo) / Math.abs(step)));
      }
      axis++;
    }
    t = t.shrink(bounds);
    if (flips.length) t = t.flip(flips);
    if (steps.some((s) => s > 1)) {
      // take every step-th element: pad to a multiple of step, split the axis, keep the first of each group
      const padded = t.pad(t.shape.map((n, i) => [0, Math.ceil(n / steps[i]!) * steps[i]! - n] as [number, number]));
      const split = padded.reshape(padded.shape.flatMap((n, i) => [n / steps[i]!, steps[i]!]));
      t = split.shrink(split.shape.map((n, i) => (i % 2 === 1 ? [0, 1] : [0, n]) as [number, number]));
    }
    return t.reshape(finalShape);
  }
  /** Joins tensors along an existing axis. */
  static cat(tensors: readonly Tensor[], axis = 0): Tensor {
    if (tensors.length === 0) throw new TsgradError("cat needs at least one tensor");
    const first = tensors[0]!;
    const a = first.normalizeAxis(axis);
    for (const t of tensors) {
      if (t.ndim !== first.ndim || t.shape.some((s, i) => i !== a && s !== first.shape[i])) {
        throw new TsgradError(
          `cat along axis ${axis}: shapes ${tensors.map((x) => fmtShape(x.shape)).join(", ")} differ off that axis`,
        );
      }
    }
    const total = tensors.reduce((s, t) => s + t.shape[a]!, 0);
    let offset = 0;
    const parts = tensors.map((t) => {
      const p = t.pad(
        t.shape.map((_, i) => (i === a ? [offset, total - offset - t.shape[a]!] : [0, 0]) as [number, number]),
      );
      offset += t.shape[a]!;
      return p;
    });
    return parts.reduce((acc, p) => acc.add(p));
  }
  cat(others: readonly Tensor[], axis = 0): Tensor {
    return Tensor.cat([this, ...others], axis);
  }
  /** Joins tensors along a new axis. */
  static stack(tensors: readonly Tensor[], axis = 0): Tensor {
    const a = axis < 0 ? axis + tensors[0]!.ndim + 1 : axis;
    return Tensor.cat(
      tensors.map((t) => t.unsqueeze(a)),
      a,
    );
  }
  /** Splits into pieces of `sizes` (or equal pieces of one size) along `axis`. */
  split(sizes: number | number[], axis = 0): Tensor[] {
    const a = this.normalizeAxis(axis);
    const n = this.shape[a]!;
    const lengths =
      typeof sizes === "number" ? range(Math.ceil(n / sizes)).map((i) => Math.min(sizes, n - i * sizes)) : sizes;
    if (lengths.reduce((s, x) => s + x, 0) !== n)
      throw new TsgradError(
        `split sizes ${fmtShape(lengths)} do not add up to ${n} (axis ${axis} of ${fmtShape(this.shape)})`,
      );
    let start = 0;
    return lengths.map((len) => {
      const piece = this.shrink(
        this.shape.map((s, i) => (i === a ? [start, start + len] : [0, s]) as [number, number]),
      );
      start += len;
      return piece;
    });
  }
  chunk(chunks: number, axis = 0): Tensor[] {
    return this.split(Math.ceil(this.shape[this.normalizeAxis(axis)]! / chunks), axis);
  }
  squeeze(axis?: number): Tensor {
    if (axis === undefined) return this.reshape(this.shape.filter((s) => s !== 1));
    const a = this.normalizeAxis(axis);
    return this.shape[a] === 1 ? this.reshape(this.shape.filter((_, i) => i !== a)) : this;
  }
  unsqueeze(axis: number): Tensor {
    const a = this.normalizeAxis(axis, this.ndim + 1);
    return this.reshape([...this.shape.slice(0, a), 1, ...this.shape.slice(a)]);
  }
  flatten(startDim = 0, endDim = -1): Tensor {
    if (this.ndim === 0) return this.reshape([1]);
    const [s, e] = [this.normalizeAxis(startDim), this.normalizeAxis(endDim)];
    return this.reshape([...this.shape.slice(0, s), prod(this.shape.slice(s, e + 1)), ...this.shape.slice(e + 1)]);
  }
  /** Tiles the tensor `reps[i]` times along each axis (PyTorch's repeat; extra leading reps add axes). */
  repeat(reps: readonly number[]): Tensor {
    if (reps.length < this.ndim || reps.some((r) => !Number.isInteger(r) || r < 0)) {
      throw new TsgradError(
        `repeat: ${fmtShape(reps)} must give a non-negative integer for each of the ${this.ndim} axes of ${fmtShape(this.shape)} (and may add leading ones)`,
      );
    }
    const shape = [...Array<number>(reps.length - this.ndim).fill(1), ...this.shape];
    // each axis s becomes [r, s], the copies outermost, then merged: a view, no copy until read
    return this.reshape(shape.flatMap((s) => [1, s]))
      .expand(shape.flatMap((s, i) => [reps[i]!, s]))
      .reshape(shape.map((s, i) => s * reps[i]!));
  }
  /** A tensor stored in its own buffer in row-major order. */
  contiguous(): Tensor {
    return new Tensor(this.node.contiguous());
  }
  /**
   * Like contiguous, but realized it gets a buffer no other tensor shares (equal lazy values otherwise share
   * one): state to assign into, made lazily so that many are realized together.
   */
  owned(): Tensor {
    return new Tensor(this.node.contiguous(uniqueTag++));
  }
  /** out[..., i, ...] = this[..., index[..., i, ...], ...] along `axis`; index has this tensor's rank. */
  gather(axis: number, index: Tensor): Tensor {
    const a = this.normalizeAxis(axis);
    if (index.ndim !== this.ndim)
      throw new TsgradError(
        `gather: index rank ${index.ndim} differs from tensor rank ${this.ndim} (${fmtShape(index.shape)} vs ${fmtShape(this.shape)})`,
      );
    index.shape.forEach((s, i) => {
      if (i !== a && s > this.shape[i]!)
        throw new TsgradError(
          `gather: index ${fmtShape(index.shape)} is larger than ${fmtShape(this.shape)} on axis ${i}`,
        );
    });
    const n = this.shape[a]!;
    const source = this.shrink(this.shape.map((s, i) => (i === a ? [0, s] : [0, index.shape[i]!]) as [number, number]));
    const moved = source.unsqueeze(-1).transpose(a, -1); // the gathered axis last, size 1 where it was
    const onehot = index.unsqueeze(-1).eq(Tensor.arange(n, undefined, 1, { device: this.device }));
    // the sum widens small types (bool to int32): the gathered values come back in this tensor's dtype
    return onehot
      .where(moved.broadcastTo([...index.shape, n]), 0)
      .sum({ axis: -1 })
      .cast(this.dtype);
  }

  // ---------------------------------------------------------------- neural-network ops

  /** Matrix product with numpy's rules: 1-D vectors, batched and broadcast leading axes. */
  matmul(w: Tensor): Tensor {
    if (this.ndim === 0 || w.ndim === 0)
      throw new TsgradError(`matmul needs at least 1-D operands, got ${fmtShape(this.shape)} and ${fmtShape(w.shape)}`);
    const x = this.ndim === 1 ? this.unsqueeze(0) : this;
    const y = w.ndim === 1 ? w.unsqueeze(-1) : w;
    const k = x.shape[x.ndim - 1]!;
    if (y.shape[y.ndim - 2] !== k)
      throw new TsgradError(
        `matmul: ${fmtShape(this.shape)} @ ${fmtShape(w.shape)}: inner sizes ${k} and ${y.shape[y.ndim - 2]} differ`,
      );
    // x[..., m, 1, k] * y^T[..., 1, n, k], summed over k
    const prod = x.unsqueeze(-2).mul(y.transpose(-1, -2).unsqueeze(-3));
    let out = prod.sum({ axis: -1 });
    if (this.ndim === 1) out = out.squeeze(-2);
    if (w.ndim === 1) out = out.squeeze(-1);
    return out;
  }
  dot(w: Tensor): Tensor {
    return this.matmul(w);
  }
  /** x @ weight.T + bias, with weight as [out, in] (PyTorch's layout). */
  linear(weight: Tensor, bias?: Tensor): Tensor {
    const out = this.matmul(weight.T);
    return bias ? out.add(bias) : out;
  }
  /**
   * Zeros above the `diagonal`-th diagonal of the last two axes (0: the main one; 1: one above it). A causal mask:
   * `Tensor.ones([t, t]).tril()`.
   */
  tril(diagonal = 0): Tensor {
    return this.triangle(diagonal, true);
  }
  /** Zeros below the `diagonal`-th diagonal of the last two axes. */
  triu(diagonal = 0): Tensor {
    return this.triangle(diagonal, false);
  }
  private triangle(diagonal: number, lower: boolean): Tensor {
    if (this.ndim < 2)
      throw new TsgradError(`${lower ? "tril" : "triu"} needs at least 2 axes, got ${fmtShape(this.shape)}`);
    const [n, m] = this.shape.slice(-2) as [number, number];
    // kept where col - row <= diagonal (tril) or >= diagonal (triu): index arithmetic, no buffer
    const rows = Tensor.arange(n, undefined, 1, { device: this.device }).reshape([n, 1]);
    const cols = Tensor.arange(m, undefined, 1, { device: this.device }).reshape([1, m]);
    const keep = lower ? cols.sub(rows).le(diagonal) : cols.sub(rows).ge(diagonal);
    return keep.where(this, 0);
  }
  softmax(axis = -1): Tensor {
    // the values the max reads (a 16-bit input stored first) are the values shifted: the max is exactly 0
    // after the shift, and a computed input runs once (in its producer's kernel: attention scores in the
    // matmul's epilogue) rather than again in every reader. The max is detached: softmax(x - c) does not depend
    // on c, so its gradient is 0, and differentiating it would only add a pass over x (a count of each row's maxima)
    const x = this.maxSource().float();
    const shifted = x.sub(x.max({ axis, keepdim: true }).detach());
    const e = shifted.exp();
    return e.div(e.sum({ axis, keepdim: true }));
  }
  logSoftmax(axis = -1): Tensor {
    const x = this.maxSource().float();
    const shifted = x.sub(x.max({ axis, keepdim: true }).detach());
    return shifted.sub(shifted.exp().sum({ axis, keepdim: true }).log());
  }
  /** Normalises over the last `axes` axes (default: the last one). */
  layerNorm({ axis = -1, eps = 1e-5 }: { axis?: number | number[]; eps?: number } = {}): Tensor {
    const centered = this.sub(this.mean({ axis, keepdim: true }));
    return centered.mul(centered.square().mean({ axis, keepdim: true }).add(eps).rsqrt());
  }
  /** Zeroes a fraction p of elements and scales the rest by 1/(1-p), only while `Tensor.training`. */
  dropout(p = 0.5): Tensor {
    if (!Tensor.training || p === 0) return this;
    if (p < 0 || p >= 1) throw new TsgradError(`dropout probability ${p} must be in [0, 1)`);
    // the mask is stored, a byte an element: the output's readers (a residual's layer norm reads it three
    // times) and the backward pass read it, where each would otherwise run Threefry again
    const keep = Tensor.randLike(this).ge(p).contiguous();
    return keep.where(this.mul(1 / (1 - p)), 0);
  }
  /** One-hot encoding along a new last axis. */
  oneHot(numClasses: number): Tensor {
    return this.unsqueeze(-1)
      .eq(Tensor.arange(numClasses, undefined, 1, { device: this.device }))
      .cast(dtypes.int32);
  }
  /** Rows of `weight` ([vocab, dim]) picked by integer ids of any shape. */
  static embedding(ids: Tensor, weight: Tensor): Tensor {
    const [vocab, dim] = weight.shape as [number, number];
    const onehot = ids.unsqueeze(-1).eq(Tensor.arange(vocab, undefined, 1, { device: ids.device }));
    return onehot
      .unsqueeze(-1)
      .where(weight, 0)
      .sum({ axis: -2 })
      .reshape([...ids.shape, dim]);
  }
  /**
   * Cross-entropy of logits [..., classes] against integer labels [...]: targets equal to
   * `ignoreIndex` count zero, `weights` scale each element; mean divides by the sum of the weights used.
   */
  sparseCategoricalCrossentropy(
    labels: Tensor,
    {
      ignoreIndex = -1,
      weights,
      reduction = "mean",
      labelSmoothing = 0,
    }: { ignoreIndex?: number; weights?: Tensor; reduction?: LossReduction; labelSmoothing?: number } = {},
  ): Tensor {
    if (!arraysEqual(labels.shape, this.shape.slice(0, -1)))
      throw new TsgradError(
        `sparseCategoricalCrossentropy: labels ${fmtShape(labels.shape)} must match logits ${fmtShape(this.shape)} without the class axis`,
      );
    const classes = this.shape[this.ndim - 1]!;
    const logProbs = this.logSoftmax(-1);
    const onehot = labels.unsqueeze(-1).eq(Tensor.arange(classes, undefined, 1, { device: this.device }));
    let loss = onehot.where(logProbs, 0).sum({ axis: -1 }).neg();
    if (labelSmoothing > 0) loss = loss.mul(1 - labelSmoothing).sub(logProbs.mean({ axis: -1 }).mul(labelSmoothing));
    let w = labels.ne(ignoreIndex).cast(loss.dtype);
    if (weights) w = w.mul(weights.cast(loss.dtype));
    loss = loss.mul(w);
    if (reduction === "none") return loss;
    if (reduction === "sum") return loss.sum();
    return loss.sum().div(w.sum().maximum(1e-12));
  }
  /**
   * Cross-entropy of logits [..., classes] against class probabilities of the same shape, or integer labels
   * [...] (then as sparseCategoricalCrossentropy).
   */
  crossEntropy(
    target: Tensor,
    { reduction = "mean", labelSmoothing = 0 }: { reduction?: LossReduction; labelSmoothing?: number } = {},
  ): Tensor {
    if (!isFloat(target.dtype)) return this.sparseCategoricalCrossentropy(target, { reduction, labelSmoothing });
    if (!arraysEqual(target.shape, this.shape))
      throw new TsgradError(
        `crossEntropy: class probabilities ${fmtShape(target.shape)} must have the logits' shape ${fmtShape(this.shape)}`,
      );
    const classes = this.shape[this.ndim - 1]!;
    const smoothed = labelSmoothing > 0 ? target.mul(1 - labelSmoothing).add(labelSmoothing / classes) : target;
    return reduceLoss(this.logSoftmax(-1).mul(smoothed).sum({ axis: -1 }).neg(), reduction);
  }
  /** Binary cross-entropy of probabilities in [0, 1] against targets; logs are clamped at -100 (as PyTorch). */
  binaryCrossentropy(target: Tensor, { reduction = "mean" }: { reduction?: LossReduction } = {}): Tensor {
    const t = target.float();
    const logP = this.log().maximum(-100),
      log1mP = this.neg().add(1).log().maximum(-100);
    return reduceLoss(t.mul(logP).add(t.neg().add(1).mul(log1mP)).neg(), reduction);
  }
  /** Binary cross-entropy of logits against targets (sigmoid inside, stable); `posWeight` scales positives. */
  binaryCrossentropyLogits(
    target: Tensor,
    { reduction = "mean", posWeight }: { reduction?: LossReduction; posWeight?: Tensor | number } = {},
  ): Tensor {
    const t = target.float();
    const weight =
      posWeight === undefined ? 1 : t.mul(posWeight instanceof Tensor ? posWeight.sub(1) : posWeight - 1).add(1);
    // (1 - t) x + w log(1 + exp(-x)), the log as softplus(-x)
    return reduceLoss(t.neg().add(1).mul(this).add(this.neg().softplus().mul(weight)), reduction);
  }
  /** Mean squared error. */
  mseLoss(target: Tensor, { reduction = "mean" }: { reduction?: LossReduction } = {}): Tensor {
    return reduceLoss(this.sub(target).square(), reduction);
  }
  /** Mean absolute error. */
  l1Loss(target: Tensor, { reduction = "mean" }: { reduction?: LossReduction } = {}): Tensor {
    return reduceLoss(this.sub(target).abs(), reduction);
  }
  /** softmax(q k^T / sqrt(d) + mask) v; a boolean mask keeps where true, a float mask is added. */
  scaledDotProductAttention(
    key: Tensor,
    value: Tensor,
    { mask, dropout = 0 }: { mask?: Tensor; dropout?: number } = {},
  ): Tensor {
    const d = this.shape[this.ndim - 1]!;
    let scores = this.matmul(key.transpose(-1, -2)).mul(1 / Math.sqrt(d));
    if (mask) scores = mask.dtype === dtypes.bool ? mask.where(scores, -Infinity) : scores.add(mask);
    return scores.softmax(-1).dropout(dropout).matmul(value);
  }
}

export type PadMode = "constant" | "reflect" | "replicate" | "circular";

/** Padding made of the tensor's own elements: pieces of each padded axis (flipped for reflect) laid around it. */
function padFromEdges(x: Tensor, pads: readonly [number, number][], mode: PadMode): Tensor {
  if (!["reflect", "replicate", "circular"].includes(mode))
    throw new TsgradError(
      `pad: unknown mode ${JSON.stringify(mode)}; expected constant, reflect, replicate or circular`,
    );
  let out = x;
  pads.forEach(([before, after], axis) => {
    if (before === 0 && after === 0) return;
    const n = out.shape[axis]!;
    const limit = mode === "reflect" ? n - 1 : mode === "circular" ? n : Infinity;
    if (before < 0 || after < 0 || before > limit || after > limit || n === 0) {
      throw new TsgradError(
        `pad (${mode}): [${before}, ${after}] on axis ${axis} of ${fmtShape(out.shape)}: ${mode === "replicate" ? "needs" : `at most ${limit} a side, and`} a non-empty axis, no negative padding`,
      );
    }
    const slice = (start: number, end: number): Tensor =>
      out.shrink(out.shape.map((s, d) => (d === axis ? [start, end] : [0, s]) as [number, number]));
    const edge = (start: number, count: number): Tensor =>
      slice(start, start + 1).expand(out.shape.map((s, d) => (d === axis ? count : s)));
    const [head, tail] =
      mode === "reflect"
        ? [slice(1, before + 1).flip(axis), slice(n - 1 - after, n - 1).flip(axis)]
        : mode === "circular"
          ? [slice(n - before, n), slice(0, after)]
          : [edge(0, before), edge(n - 1, after)];
    out = Tensor.cat([...(before > 0 ? [head] : []), out, ...(after > 0 ? [tail] : [])], axis);
  });
  return out;
}

export type LossReduction = "none" | "mean" | "sum";

function reduceLoss(loss: Tensor, reduction: LossReduction): Tensor {
  if (reduction === "none") return loss;
  if (reduction === "sum") return loss.sum();
  if (reduction === "mean") return loss.mean();
  throw new TsgradError(`loss reduction must be "none", "mean" or "sum", got ${JSON.stringify(reduction)}`);
}

/** "CPU:0,CPU:1" -> canonical names; nothing given -> the default device. */
function resolveDevices(device: string | undefined): string[] {
  return splitDeviceName(device ?? Device.DEFAULT).map((d) => Device.canonicalize(d));
}

/** With several devices in `opts.device`, makes the tensor on each and replicates it; otherwise undefined. */
function onEachDevice(opts: TensorOptions, make: (opts: TensorOptions) => Tensor): Tensor | undefined {
  if (opts.device === undefined || !opts.device.includes(",")) return undefined;
  const parts = resolveDevices(opts.device).map((device) => make({ ...opts, device, requiresGrad: false }).node as UOp);
  return new Tensor(new MultiLazy(parts, null), opts);
}

/** An elementwise op on single- or multi-device nodes; mixing the two is a device mismatch. */
function alu(node: Lazy, op: UnaryOp | BinaryOp | "WHERE", ...others: Lazy[]): Lazy {
  if (node instanceof MultiLazy) return node.alu(op, ...others);
  return node.alu(op, ...others.map((o) => single(o, op, node)));
}

function single(node: Lazy, what: string, like: UOp): UOp {
  if (node instanceof MultiLazy)
    throw new TsgradError(
      `${what}: device sets differ: ${like.device} and ${node.device}; move both to the same devices with to() or shard()`,
    );
  return node;
}

const shardsOf = (node: Lazy): readonly UOp[] => (node instanceof MultiLazy ? node.shards : [node]);
/** Below this |x| tanh is a polynomial (Tensor.tanh). */
const TANH_SMALL_BOUND = 0.625;
/** P(z) of tanh(x) = x + x·z·P(z) on |x| ≤ 0.625, lowest degree first (a least-squares fit made for tsgrad). */
const TANH_SMALL_COEFFICIENTS = [-0.3333333, 0.13332902, -0.05387026, 0.02108583, -0.00622171];

const isStored = (node: Lazy): boolean => shardsOf(node).every((u) => storedBuffer(u) !== undefined);
const mapShards = (node: Lazy, fn: (u: UOp) => UOp): Lazy =>
  node instanceof MultiLazy ? new MultiLazy(node.shards.map(fn), node.axis) : fn(node);

/** A scalar constant on the device(s) of `like`. */
function constOn(like: Lazy, value: number, dtype: DType): Lazy {
  if (like instanceof MultiLazy)
    return new MultiLazy(
      like.devices.map((d) => UOp.const(value, dtype, d)),
      null,
    );
  return UOp.const(value, dtype, like.device);
}

/**
 * A parameter's gradient from per-node gradients: on one device, its own; sharded, each device's part. (A
 * replicated parameter's is the sum of every device's part, from its own shard of the batch: an all-reduce,
 * which backward() makes for all of them together.)
 */
function gradientFor(node: Lazy, grads: ReadonlyMap<UOp, UOp>): Lazy {
  return node instanceof MultiLazy ? new MultiLazy(localGradients(node, grads), node.axis) : grads.get(node)!;
}

/** Each device's gradient of its shard of `node` (zeros where nothing reached it). */
function localGradients(node: MultiLazy, grads: ReadonlyMap<UOp, UOp>): UOp[] {
  return node.shards.map(
    (u) =>
      grads.get(u) ??
      UOp.const(0, u.dtype, u.device)
        .reshape(u.shape.map(() => 1))
        .expand(u.shape),
  );
}

function checkShape(shape: readonly number[]): void {
  if (shape.some((s) => !Number.isInteger(s) || s < 0))
    throw new TsgradError(`bad shape ${fmtShape(shape)}: sizes must be non-negative integers`);
}

export function broadcastShapes(a: readonly number[], b: readonly number[]): number[] {
  const n = Math.max(a.length, b.length);
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const x = a[a.length - n + i] ?? 1;
    const y = b[b.length - n + i] ?? 1;
    if (x !== y && x !== 1 && y !== 1)
      throw new TsgradError(`shapes ${fmtShape(a)} and ${fmtShape(b)} do not broadcast (axis ${i}: ${x} vs ${y})`);
    out.push(x === 1 ? y : x);
  }
  return out;
}

function flatten(data: TensorData): { flat: ArrayLike<number | bigint>; shape: number[]; inferred: DType } {
  if (ArrayBuffer.isView(data)) {
    const inferred: Record<string, DType> = {
      Float32Array: dtypes.float32,
      Float64Array: dtypes.float32,
      Int32Array: dtypes.int32,
      Uint8Array: dtypes.uint8,
      Int8Array: dtypes.int8,
      Int16Array: dtypes.int16,
      Uint16Array: dtypes.uint16,
      Uint32Array: dtypes.uint32,
      BigInt64Array: dtypes.int64,
    };
    return {
      flat: data as TypedArray,
      shape: [(data as TypedArray).length],
      inferred: inferred[data.constructor.name] ?? dtypes.float32,
    };
  }
  const shape: number[] = [];
  let probe: unknown = data;
  while (Array.isArray(probe)) {
    shape.push(probe.length);
    probe = probe[0];
  }
  const flat: number[] = [];
  let allBool = true,
    allInt = true;
  const walk = (x: unknown, dim: number): void => {
    if (dim === shape.length) {
      if (Array.isArray(x)) throw new TsgradError(`ragged nested array: expected shape ${fmtShape(shape)}`);
      if (typeof x === "boolean") {
        flat.push(x ? 1 : 0);
        allInt = false;
        return;
      }
      if (typeof x !== "number") throw new TsgradError(`tensor data must be numbers or booleans, found ${typeof x}`);
      allBool = false;
      if (!Number.isInteger(x)) allInt = false;
      flat.push(x);
      return;
    }
    if (!Array.isArray(x) || x.length !== shape[dim])
      throw new TsgradError(
        `ragged nested array: expected ${shape[dim]} elements on axis ${dim} (shape ${fmtShape(shape)})`,
      );
    for (const y of x) walk(y, dim + 1);
  };
  walk(data, 0);
  const inferred =
    flat.length > 0 && allBool ? dtypes.bool : allInt && flat.length > 0 ? dtypes.int32 : Tensor.defaultFloat;
  return { flat, shape, inferred };
}

function encode(flat: ArrayLike<number | bigint>, dtype: DType): TypedArray {
  // a typed array of the dtype's own storage type holds its encoding already (copyin copies it): no pass per
  // element, which took 10 ms a million floats (bool, float16 and bfloat16 store other values than they are given)
  if (
    ArrayBuffer.isView(flat) &&
    flat.constructor === typedArrayFor(dtype, new ArrayBuffer(0)).constructor &&
    dtype !== dtypes.bool &&
    dtype !== dtypes.float16 &&
    dtype !== dtypes.bfloat16
  )
    return flat as TypedArray;
  const out = typedArrayFor(dtype, new ArrayBuffer(flat.length * dtype.itemsize));
  for (let i = 0; i < flat.length; i++) {
    const v = flat[i]!;
    if (dtype === dtypes.int64) (out as BigInt64Array)[i] = typeof v === "bigint" ? v : BigInt(Math.trunc(v));
    else if (dtype === dtypes.float16) (out as Uint16Array)[i] = f32ToF16Bits(Number(v));
    else if (dtype === dtypes.bfloat16) (out as Uint16Array)[i] = f32ToBf16Bits(Number(v));
    else (out as Float32Array)[i] = castScalar(Number(v), dtype);
  }
  return out;
}

/** Uniform [0, 1) float32 from random uint32 words: 23 random mantissa bits under exponent 0 give [1, 2), minus 1. */
const uniformFromBits = (bits: Tensor): Tensor => bits.shr(9).bitwiseOr(0x3f800000).bitcast(dtypes.float32).sub(1);

/** erf on a host number (for constants such as the truncated normal's bounds). */
function erfScalar(x: number): number {
  const t = 1 / (1 + 0.3275911 * Math.abs(x));
  const y =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-x * x);
  return Math.sign(x) * y;
}
