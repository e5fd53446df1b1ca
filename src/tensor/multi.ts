// Tensors spread over several devices: one lazy node per device, either replicated (axis null:
// every device holds the whole tensor) or sharded along one axis (device i holds the i-th block).
// Ops run per device; a reduction over the sharded axis ends in an all-reduce.
import type { DType } from "../dtype.ts";
import { TsgradError, arraysEqual, fmtShape, prod } from "../helpers.ts";
import type { BinaryOp, Pads, ReduceArg, ReduceKind, UnaryOp, UOp } from "../uop.ts";
import { storedBuffer } from "../engine/schedule.ts";

/** A device list written as one name: "CPU:0,CPU:1". */
export const multiDeviceName = (devices: readonly string[]): string => devices.join(",");
export const splitDeviceName = (name: string): string[] => name.split(",").map((d) => d.trim());

export class MultiLazy {
  readonly op = "MULTI" as const;
  readonly shape: readonly number[];

  constructor(
    readonly shards: readonly UOp[],
    readonly axis: number | null,
  ) {
    const first = shards[0]!;
    if (new Set(shards.map((s) => s.device)).size !== shards.length)
      throw new TsgradError(
        `a multi-device tensor needs distinct devices, got ${shards.map((s) => s.device).join(", ")}`,
      );
    if (axis === null) {
      for (const s of shards)
        if (!arraysEqual(s.shape, first.shape))
          throw new TsgradError(
            `replicated shards differ in shape: ${shards.map((x) => fmtShape(x.shape)).join(", ")}`,
          );
      this.shape = first.shape;
    } else {
      this.shape = first.shape.map((size, i) => (i === axis ? shards.reduce((n, s) => n + s.shape[i]!, 0) : size));
    }
  }

  get dtype(): DType {
    return this.shards[0]!.dtype;
  }
  get devices(): string[] {
    return this.shards.map((s) => s.device);
  }
  get device(): string {
    return multiDeviceName(this.devices);
  }
  get numel(): number {
    return prod(this.shape as number[]);
  }

  private map(fn: (shard: UOp, i: number) => UOp, axis = this.axis): MultiLazy {
    return new MultiLazy(this.shards.map(fn), axis);
  }

  /** The same tensor, laid out along `axis` (null: replicated) — views when going from replicated to sharded. */
  relayout(axis: number | null): MultiLazy {
    if (axis === this.axis) return this;
    if (this.axis === null) {
      const sizes = splitSizes(this.shape[axis!]!, this.shards.length, this.shape, axis!);
      let start = 0;
      return this.map((s, i) => {
        const bounds: Pads = s.shape.map((n, d) => (d === axis ? [start, start + sizes[i]!] : [0, n]));
        start += sizes[i]!;
        // a broadcast along the axis (a bias, a layer norm's weight, position embeddings meeting a sharded batch)
        // is the same broadcast at the slice's size: a slice of it would make its gradient a padded full-size
        // tensor summed over the whole axis, half zeros (on 2 devices) behind masks that keep matmuls untiled
        if (s.op === "EXPAND" && s.src[0]!.shape[axis!] === 1)
          return s.src[0]!.expand(s.shape.map((n, d) => (d === axis ? sizes[i]! : n)));
        return s.shrink(bounds);
      }, axis);
    }
    if (axis === null) return this.gatherToAll();
    return this.gatherToAll().relayout(axis);
  }

  /** Every device gets the whole tensor (each shard copied to every other device). */
  private gatherToAll(): MultiLazy {
    const a = this.axis!;
    const total = this.shape[a]!;
    return this.map((_, target) => {
      let offset = 0;
      const parts = this.shards.map((s) => {
        const piece = s
          .copyTo(this.shards[target]!.device)
          .pad(s.shape.map((n, d) => (d === a ? [offset, total - offset - n] : [0, 0])));
        offset += s.shape[a]!;
        return piece;
      });
      return parts.reduce((acc, p) => acc.alu("ADD", p));
    }, null);
  }

  alu(op: UnaryOp | BinaryOp | "WHERE", ...others: (UOp | MultiLazy)[]): MultiLazy {
    const multis = others.map((o) => {
      if (!(o instanceof MultiLazy) || !arraysEqual(o.devices, this.devices)) {
        throw new TsgradError(
          `${op}: device sets differ: ${this.device} and ${o.device}; move both to the same devices with to() or shard()`,
        );
      }
      return o;
    });
    // sharded wins over replicated (a replicated operand is sliced, which costs nothing)
    const axis = [this, ...multis].find((m) => m.axis !== null)?.axis ?? null;
    for (const m of [this, ...multis]) {
      if (m.axis !== null && m.axis !== axis)
        throw new TsgradError(
          `${op}: operands are sharded on different axes (${m.axis} and ${axis}); reshard one with shard()`,
        );
    }
    const [first, ...rest] = [this, ...multis].map((m) => m.relayout(axis));
    return first!.map((s, i) => s.alu(op, ...rest.map((r) => r.shards[i]!)));
  }

  cast(dtype: DType): MultiLazy {
    return this.map((s) => s.cast(dtype));
  }
  bitcast(dtype: DType): MultiLazy {
    return this.map((s) => s.bitcast(dtype));
  }
  contiguous(tag?: number): MultiLazy {
    return this.map((s) => s.contiguous(tag));
  }
  detach(): MultiLazy {
    return this.map((s) => s.detach());
  }

  reduce(op: ReduceKind, axes: number[]): MultiLazy {
    const partial = this.map((s) => s.reduce(op, axes));
    if (this.axis === null || !axes.includes(this.axis)) return partial;
    return new MultiLazy(allReduce(op, partial.shards), null);
  }

  reshape(shape: readonly number[]): MultiLazy {
    if (this.axis === null) return this.map((s) => s.reshape(shape), null);
    // the sharded axis must survive as one axis whose leading part splits the same way
    const before = prod(this.shape.slice(0, this.axis) as number[]);
    let newAxis = 0;
    while (newAxis < shape.length && prod(shape.slice(0, newAxis) as number[]) < before) newAxis++;
    // unit axes added in front of it (an unsqueeze, a broadcast's leading ones) leave it whole
    while (
      newAxis + 1 < shape.length &&
      shape[newAxis] === 1 &&
      prod(shape.slice(0, newAxis + 1) as number[]) === before
    )
      newAxis++;
    const n = this.shards.length;
    const ok =
      prod(shape.slice(0, newAxis) as number[]) === before &&
      newAxis < shape.length &&
      this.shards.every((s) => s.numel * n === this.numel) &&
      shape[newAxis]! % n === 0;
    if (!ok)
      throw new TsgradError(
        `reshape of a tensor sharded on axis ${this.axis} from ${fmtShape(this.shape)} to ${fmtShape(shape)} would split the sharded axis; gather it first with to()`,
      );
    return this.map((s) => s.reshape(shape.map((size, i) => (i === newAxis ? size / n : size))), newAxis);
  }

  permute(order: readonly number[]): MultiLazy {
    return this.map((s) => s.permute(order), this.axis === null ? null : order.indexOf(this.axis));
  }

  expand(shape: readonly number[]): MultiLazy {
    return this.map((s) => s.expand(shape.map((size, i) => (i === this.axis ? s.shape[i]! : size))));
  }

  pad(pads: Pads): MultiLazy {
    if (this.axis !== null && (pads[this.axis]![0] !== 0 || pads[this.axis]![1] !== 0))
      return this.relayout(null).pad(pads);
    return this.map((s) => s.pad(pads));
  }

  shrink(bounds: Pads): MultiLazy {
    if (this.axis !== null && (bounds[this.axis]![0] !== 0 || bounds[this.axis]![1] !== this.shape[this.axis]))
      return this.relayout(null).shrink(bounds);
    return this.map((s) => s.shrink(bounds.map((b, i) => (i === this.axis ? [0, s.shape[i]!] : b))));
  }

  flip(axes: readonly boolean[]): MultiLazy {
    if (this.axis !== null && axes[this.axis]) return this.relayout(null).flip(axes);
    return this.map((s) => s.flip(axes));
  }

  assign(value: UOp | MultiLazy): MultiLazy {
    if (!(value instanceof MultiLazy) || !arraysEqual(value.devices, this.devices))
      throw new TsgradError(`assign: value on ${value.device}, target on ${this.device}`);
    const v = value.relayout(this.axis);
    return this.map((s, i) => s.assign(v.shards[i]!));
  }

  /** One device gets the whole tensor. */
  copyTo(device: string): UOp {
    const whole = this.axis === null ? this : this.gatherToAll();
    const local = whole.shards.find((s) => s.device === device);
    return local ?? whole.shards[0]!.copyTo(device);
  }
}

/** Sizes of the blocks a sharded axis splits into: equal, or a clear error. */
export function splitSizes(size: number, devices: number, shape: readonly number[], axis: number): number[] {
  if (size % devices !== 0)
    throw new TsgradError(
      `cannot shard axis ${axis} of ${fmtShape(shape)} evenly over ${devices} devices: ${size} is not a multiple of ${devices}`,
    );
  return Array(devices).fill(size / devices);
}

/**
 * A shard that sums inside (a device's partial gradient: a matmul) stored whole, so that what moves between
 * devices are views of it. Otherwise each chunk's kernel computed its own slice of the sum, and a matmul sliced
 * through a flat view is no matmul to the lowering: BERT's weight gradients on two CPU devices ran as untiled
 * loops. Elementwise work (or a sum over one element) is cheaper computed in the chunks' kernels than stored.
 */
function storedWhole(u: UOp): UOp {
  if (storedBuffer(u)) return u;
  const seen = new Set<UOp>();
  const sums = (n: UOp): boolean => {
    if (seen.has(n) || storedBuffer(n)) return false;
    seen.add(n);
    if (n.op === "REDUCE" && (n.arg as ReduceArg).axes.some((a) => n.src[0]!.shape[a]! > 1)) return true;
    return n.src.some(sums);
  };
  return sums(u) ? u.contiguous() : u;
}

/** Tensors up to this size are all-reduced by copying every shard to every device rather than around a ring. */
export const DIRECT_ALL_REDUCE_BYTES = 256 * 1024;

/**
 * Sum (or max) of one same-shaped tensor per device, left on every device. A ring: the data is cut
 * into one chunk per device; n-1 steps pass partial chunks around the ring (reduce-scatter), n-1 more
 * pass the finished chunks (all-gather), so each device sends and receives 2(n-1)/n of the data.
 */
export function allReduce(op: ReduceKind, shards: readonly UOp[]): UOp[] {
  const n = shards.length;
  if (n === 1) return [...shards];
  const shape = shards[0]!.shape;
  const numel = shards[0]!.numel;
  const combine = (a: UOp, b: UOp): UOp => a.alu(op === "ADD" ? "ADD" : "MAX", b);
  const whole = shards.map(storedWhole);
  if (numel < n || numel * shards[0]!.dtype.itemsize <= DIRECT_ALL_REDUCE_BYTES) {
    // small: every device adds up everyone's copy, in the same order (the same bits everywhere): n-1 copies
    // in and one kernel, where a ring's 2(n-1) steps each cost a copy and a kernel
    return whole.map((target) => whole.map((s) => s.copyTo(target.device)).reduce(combine));
  }
  const bounds: [number, number][] = Array.from({ length: n }, (_, c) => [
    Math.floor((c * numel) / n),
    Math.floor(((c + 1) * numel) / n),
  ]);
  const chunk = (u: UOp, c: number): UOp => u.reshape([numel]).shrink([bounds[c]!]);
  // chunks[d][c]: device d's current version of chunk c
  const chunks = whole.map((s) => bounds.map((_, c) => chunk(s, c)));
  for (let step = 0; step < n - 1; step++) {
    const sent = shards.map((_, d) => {
      const c = (d - step + n) % n;
      return { to: (d + 1) % n, c, value: chunks[d]![c]! };
    });
    for (const { to, c, value } of sent) chunks[to]![c] = combine(chunks[to]![c]!, value.copyTo(shards[to]!.device));
  }
  // device d now holds the finished chunk (d + 1) % n; pass finished chunks around
  for (let step = 0; step < n - 1; step++) {
    const sent = shards.map((_, d) => {
      const c = (d + 1 - step + n) % n;
      return { to: (d + 1) % n, c, value: chunks[d]![c]! };
    });
    for (const { to, c, value } of sent) chunks[to]![c] = value.copyTo(shards[to]!.device);
  }
  return chunks.map((parts) => {
    const padded = parts.map((p, c) => p.pad([[bounds[c]![0], numel - bounds[c]![1]]]));
    return padded.reduce((a, b) => a.alu("ADD", b)).reshape(shape);
  });
}

/** Gradient buckets: tensors all-reduced together through flat buffers of up to this many bytes (DDP's idea). */
export const ALL_REDUCE_BUCKET_BYTES = 128 * 2 ** 20;
/**
 * At most this many tensors a bucket (the kernel that lays them side by side reads each: the scheduler caps inputs at
 * 48).
 */
const BUCKET_MAX_TENSORS = 32;

/**
 * All-reduces several tensors (each one same-shaped node per device) through flat buckets: on each device a
 * bucket's tensors are stored side by side in one buffer, the buffer is all-reduced, and each tensor is read
 * back as a view of the result. A ring per tensor costs 2(n-1) copies and kernels per device for each of
 * BERT's ~400 tensors; a bucket costs them once. A tensor bigger than a bucket goes around the ring alone.
 */
export function allReduceMany(op: ReduceKind, tensors: readonly (readonly UOp[])[]): UOp[][] {
  const out: UOp[][] = new Array(tensors.length);
  // a bucket holds one dtype on one list of devices
  const groups = new Map<string, number[]>();
  tensors.forEach((parts, i) => {
    const key = `${parts[0]!.dtype.name}|${parts.map((u) => u.device).join(",")}`;
    const group = groups.get(key);
    if (group) group.push(i);
    else groups.set(key, [i]);
  });
  for (const indices of groups.values()) {
    let bucket: number[] = [];
    let bytes = 0;
    const flush = (): void => {
      if (bucket.length === 0) return;
      const reduced =
        bucket.length === 1
          ? [allReduce(op, tensors[bucket[0]!]!)]
          : reduceBucket(
              op,
              bucket.map((i) => tensors[i]!),
            );
      bucket.forEach((i, k) => (out[i] = reduced[k]!));
      [bucket, bytes] = [[], 0];
    };
    for (const i of indices) {
      const size = tensors[i]![0]!.numel * tensors[i]![0]!.dtype.itemsize;
      if (bucket.length > 0 && (bytes + size > ALL_REDUCE_BUCKET_BYTES || bucket.length >= BUCKET_MAX_TENSORS)) flush();
      bucket.push(i);
      bytes += size;
    }
    flush();
  }
  return out;
}

/** One bucket: each device's members stored whole, laid side by side, all-reduced as one buffer, read back as views. */
function reduceBucket(op: ReduceKind, members: readonly (readonly UOp[])[]): UOp[][] {
  const sizes = members.map((m) => m[0]!.numel);
  let total = 0;
  const offsets = sizes.map((size) => (total += size) - size);
  const flat = members[0]!.map((_, d) =>
    members
      .map((m, k) => {
        const u = m[d]!;
        return storedWhole(u)
          .reshape([sizes[k]!])
          .pad([[offsets[k]!, total - offsets[k]! - sizes[k]!]]);
      })
      .reduce((a, b) => a.alu("ADD", b)),
  );
  // stored once per device: the members' views read it directly
  const reduced = allReduce(op, flat).map((u) => u.contiguous());
  return members.map((m, k) =>
    reduced.map((r) => r.shrink([[offsets[k]!, offsets[k]! + sizes[k]!]]).reshape(m[0]!.shape)),
  );
}

/** Node of a tensor: a single-device UOp or a multi-device one. */
export type Lazy = UOp | MultiLazy;
