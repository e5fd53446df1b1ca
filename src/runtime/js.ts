// The JS device: buffers are ArrayBuffers, kernels are JavaScript functions made once per source text.
import {
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  type DTypeName,
  type TypedArray,
  typedArrayFor,
} from "../dtype.ts";
import type { Buffer } from "../device.ts";

/**
 * A computed int64 (a double) as the BigInt it is stored as, converted as the C backend does: saturated, NaN as 0.
 * INT64_MAX reads as the double 2^63, which BigInt64Array would wrap to INT64_MIN (and BigInt(NaN) throws).
 */
const toInt64 = (x: number): bigint =>
  Number.isNaN(x) ? 0n : x >= 2 ** 63 ? 9223372036854775807n : x <= -(2 ** 63) ? -9223372036854775808n : BigInt(x);

const scratch = new DataView(new ArrayBuffer(8));
const bitcasts: Record<string, (x: number) => number> = {};
const put: Record<string, (x: number) => void> = {
  float32: (x) => scratch.setFloat32(0, x, true),
  int32: (x) => scratch.setInt32(0, x, true),
  uint32: (x) => scratch.setUint32(0, x, true),
  float16: (x) => scratch.setUint16(0, f32ToF16Bits(x), true),
  bfloat16: (x) => scratch.setUint16(0, f32ToBf16Bits(x), true),
  int16: (x) => scratch.setInt16(0, x, true),
  uint16: (x) => scratch.setUint16(0, x, true),
  int8: (x) => scratch.setInt8(0, x),
  uint8: (x) => scratch.setUint8(0, x),
  bool: (x) => scratch.setUint8(0, x),
  float64: (x) => scratch.setFloat64(0, x, true),
  int64: (x) => scratch.setBigInt64(0, toInt64(x), true),
};
const take: Record<string, () => number> = {
  float32: () => scratch.getFloat32(0, true),
  int32: () => scratch.getInt32(0, true),
  uint32: () => scratch.getUint32(0, true),
  float16: () => f16BitsToF32(scratch.getUint16(0, true)),
  bfloat16: () => bf16BitsToF32(scratch.getUint16(0, true)),
  int16: () => scratch.getInt16(0, true),
  uint16: () => scratch.getUint16(0, true),
  int8: () => scratch.getInt8(0),
  uint8: () => scratch.getUint8(0),
  bool: () => (scratch.getUint8(0) ? 1 : 0),
  float64: () => scratch.getFloat64(0, true),
  int64: () => Number(scratch.getBigInt64(0, true)),
};
for (const from of Object.keys(put))
  for (const to of Object.keys(take)) {
    const write = put[from]!,
      read = take[to]!;
    bitcasts[`bitcast_${from as DTypeName}_${to as DTypeName}`] = (x) => (write(x), read());
  }

/** What generated JS kernels call for 16-bit floats and bitcasts. */
export const jsKernelHelpers = {
  h2f: f16BitsToF32,
  b2f: bf16BitsToF32,
  f2h: f32ToF16Bits,
  f2b: f32ToBf16Bits,
  f16round: (x: number) => f16BitsToF32(f32ToF16Bits(x)),
  bf16round: (x: number) => bf16BitsToF32(f32ToBf16Bits(x)),
  i64: toInt64,
  ...bitcasts,
};

type KernelFn = (bufs: unknown[], helpers: typeof jsKernelHelpers) => void;
const compiled = new Map<string, KernelFn>();

/** One typed view per buffer, made on first use (a kernel call should not allocate). */
const views = new WeakMap<Buffer, TypedArray>();
const viewOf = (b: Buffer): TypedArray => {
  let view = views.get(b);
  if (!view) {
    const bytes = b.handle as Uint8Array;
    view = typedArrayFor(b.dtype, bytes.buffer as ArrayBuffer, bytes.byteOffset, b.size);
    views.set(b, view);
  }
  return view;
};

/** A kernel as a JavaScript function, run on buffers' typed views. */
export class JsKernel {
  constructor(private readonly fn: KernelFn) {}
  run(buffers: Buffer[]): number {
    const args = buffers.map(viewOf);
    const start = performance.now();
    this.fn(args, jsKernelHelpers);
    return (performance.now() - start) / 1000;
  }
}

/**
 * The kernel a function body defines (`bufs`: the buffers' views in slot order, `H`: jsKernelHelpers), made once per
 * text.
 */
export function jsKernel(source: string): JsKernel {
  let fn = compiled.get(source);
  if (!fn) {
    fn = new Function("bufs", "H", source) as KernelFn;
    compiled.set(source, fn);
  }
  return new JsKernel(fn);
}
