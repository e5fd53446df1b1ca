// Collectives on tensors: gradients summed or averaged across ranks through flat host buckets, parameters
// broadcast from one rank. A tensor on several in-process devices (GPUS=N per rank) is read from its first
// device and the result written to all of them, so processes and in-process devices compose.
import { type Buffer, Device } from "../device.ts";
import { TsgradError, getenv } from "../helpers.ts";
import { type DType, f16BitsToF32, f32ToF16Bits, bf16BitsToF32, f32ToBf16Bits } from "../dtype.ts";
import { Tensor, realizedBuffers } from "../tensor/index.ts";
import type { Communicator, ReduceOp } from "./communicator.ts";
import type { NcclCommunicator } from "./nccl.ts";
import type { NcclType } from "./nccl_library.ts";

/** Megabytes of float32 per bucket: one MPI call sequence per bucket, not per tensor (BERT has ~400). */
export const DEFAULT_BUCKET_MB = 32;

/** Elements per bucket: `TSGRAD_BUCKET_MB` (fractions allowed), else DEFAULT_BUCKET_MB. */
export function bucketElements(): number {
  const megabytes = getenv("TSGRAD_BUCKET_MB", DEFAULT_BUCKET_MB);
  if (!(megabytes > 0)) throw new TsgradError(`TSGRAD_BUCKET_MB=${megabytes}: a bucket must be positive`);
  return Math.max(1, Math.floor((megabytes * 2 ** 20) / 4));
}

/** Consecutive runs of `sizes` of at most `limit` in total; an item bigger than `limit` is a run of its own. */
export function buckets(sizes: readonly number[], limit: number): number[][] {
  const runs: number[][] = [];
  let run: number[] = [];
  let total = 0;
  sizes.forEach((size, i) => {
    if (run.length > 0 && total + size > limit) {
      runs.push(run);
      run = [];
      total = 0;
    }
    run.push(i);
    total += size;
  });
  if (run.length > 0) runs.push(run);
  return runs;
}

/** float32 <-> the storage of a float dtype, for the host bucket. */
const CODECS: Partial<
  Record<DType["name"], { read(b: Buffer, into: Float32Array): void; write(from: Float32Array): ArrayBufferView }>
> = {
  float32: {
    read: (b, into) => into.set(b.toTypedArray() as Float32Array),
    write: (from) => from,
  },
  float16: {
    read: (b, into) => (b.toTypedArray() as Uint16Array).forEach((h, i) => (into[i] = f16BitsToF32(h))),
    write: (from) => Uint16Array.from(from, f32ToF16Bits),
  },
  bfloat16: {
    read: (b, into) => (b.toTypedArray() as Uint16Array).forEach((h, i) => (into[i] = bf16BitsToF32(h))),
    write: (from) => Uint16Array.from(from, f32ToBf16Bits),
  },
};

/**
 * Reduces every tensor across ranks in place (each rank's tensors then hold the sum, mean or max of all
 * ranks'), through float32 buckets of up to `TSGRAD_BUCKET_MB`. 16-bit floats are added in float32 and
 * rounded once. Every rank must pass tensors of the same shapes and dtypes in the same order. With `nccl`
 * the tensors stay on the GPU: one NCCL group of in-place all-reduces on the device's stream.
 */
export function allReduceTensors(
  comm: Communicator,
  tensors: readonly Tensor[],
  op: ReduceOp = "mean",
  { nccl }: { nccl?: NcclCommunicator } = {},
): void {
  if (comm.size === 1 || tensors.length === 0) return;
  if (nccl) {
    allReduceOnDevice(nccl, tensors, op);
    return;
  }
  tensors.forEach((t, i) => {
    if (!CODECS[t.dtype.name])
      throw new TsgradError(`allReduceTensors: tensor ${i} is ${t.dtype.name}; only float tensors are reduced`);
  });
  Tensor.realizeAll([...tensors]);
  const buffers = tensors.map(realizedBuffers);
  const sizes = tensors.map((t) => t.numel);
  for (const run of buckets(sizes, bucketElements())) {
    const flat = scratch(run.reduce((total, i) => total + sizes[i]!, 0));
    let offset = 0;
    for (const i of run) {
      CODECS[tensors[i]!.dtype.name]!.read(buffers[i]![0]!, flat.subarray(offset, offset + sizes[i]!));
      offset += sizes[i]!;
    }
    comm.allReduce(flat, op);
    offset = 0;
    for (const i of run) {
      const values = CODECS[tensors[i]!.dtype.name]!.write(flat.subarray(offset, offset + sizes[i]!));
      for (const buffer of buffers[i]!) buffer.copyin(values as Float32Array);
      offset += sizes[i]!;
    }
  }
}

const NCCL_TYPE_OF: Partial<Record<DType["name"], NcclType>> = {
  float32: "float32",
  float16: "float16",
  bfloat16: "bfloat16",
  float64: "float64",
  int32: "int32",
};

/**
 * The NCCL form: each tensor's first device buffer reduced in place (queued on the GPU's stream after the
 * kernels that wrote it), then copied to the rank's other devices, if any.
 */
function allReduceOnDevice(nccl: NcclCommunicator, tensors: readonly Tensor[], op: ReduceOp): void {
  Tensor.realizeAll([...tensors]);
  const buffers = tensors.map(realizedBuffers);
  nccl.allReduce(
    tensors.map((t, i) => {
      const type = NCCL_TYPE_OF[t.dtype.name];
      if (!type) throw new TsgradError(`allReduceTensors: tensor ${i} is ${t.dtype.name}, which NCCL does not reduce`);
      return { pointer: nccl.devicePointer(buffers[i]![0]!), count: t.numel, type };
    }),
    op,
  );
  for (const shards of buffers) {
    const [first, ...rest] = shards;
    first!.version++; // new contents: nodes that stood for the old ones no longer do
    for (const other of rest) {
      const allocator = Device.allocator(other.device);
      if (!allocator.transfer) throw new TsgradError(`${other.device} cannot take a copy from ${first!.device}`);
      allocator.transfer(other.handle, first!.handle, first!.nbytes, first!.device);
      other.version++;
    }
  }
}

/** Copies `root`'s tensors into every rank's (bytes as stored; any dtype). Shapes and dtypes must agree. */
export function broadcastTensors(comm: Communicator, tensors: readonly Tensor[], root = 0): void {
  if (comm.size === 1 || tensors.length === 0) return;
  Tensor.realizeAll([...tensors]);
  for (const t of tensors) {
    const buffers = realizedBuffers(t);
    const stored = buffers[0]!.toTypedArray();
    comm.broadcast(new Uint8Array(stored.buffer, stored.byteOffset, stored.byteLength), root);
    if (comm.rank !== root) for (const buffer of buffers) buffer.copyin(stored);
  }
}

/** One float32 array reused for every bucket of a size: fresh memory would be faulted in again on every call. */
let scratchArray = new Float32Array(0);
function scratch(length: number): Float32Array {
  if (scratchArray.length < length) scratchArray = new Float32Array(length);
  return scratchArray.subarray(0, length);
}
