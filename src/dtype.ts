// The one dtype table: names, sizes, kinds, promotion, and exact 16-bit float conversions.
import { TsgradError } from "./helpers.ts";

export type DTypeName =
  | "bool"
  | "int8"
  | "uint8"
  | "int16"
  | "uint16"
  | "int32"
  | "uint32"
  | "int64"
  | "float16"
  | "bfloat16"
  | "float32"
  | "float64";

export interface DType {
  readonly name: DTypeName;
  readonly itemsize: number;
  readonly kind: "bool" | "int" | "uint" | "float";
  /** Position in the promotion lattice: a higher priority wins within the same kind. */
  readonly priority: number;
}

const make = (name: DTypeName, itemsize: number, kind: DType["kind"], priority: number): DType =>
  Object.freeze({ name, itemsize, kind, priority });

export const dtypes = {
  bool: make("bool", 1, "bool", 0),
  int8: make("int8", 1, "int", 1),
  uint8: make("uint8", 1, "uint", 2),
  int16: make("int16", 2, "int", 3),
  uint16: make("uint16", 2, "uint", 4),
  int32: make("int32", 4, "int", 5),
  uint32: make("uint32", 4, "uint", 6),
  int64: make("int64", 8, "int", 7),
  float16: make("float16", 2, "float", 9),
  bfloat16: make("bfloat16", 2, "float", 10),
  float32: make("float32", 4, "float", 11),
  float64: make("float64", 8, "float", 12),
} as const satisfies Record<DTypeName, DType>;

export const isFloat = (d: DType): boolean => d.kind === "float";
export const isInt = (d: DType): boolean => d.kind === "int" || d.kind === "uint";

export function dtypeOf(name: string): DType {
  const upper: Record<string, DType> = {
    HALF: dtypes.float16,
    FLOAT: dtypes.float32,
    BFLOAT16: dtypes.bfloat16,
    FLOAT32: dtypes.float32,
    FLOAT16: dtypes.float16,
  };
  const d = (dtypes as Record<string, DType>)[name] ?? upper[name.toUpperCase()];
  if (!d) throw new TsgradError(`unknown dtype ${JSON.stringify(name)}; known: ${Object.keys(dtypes).join(", ")}`);
  return d;
}

/**
 * Promotion of two tensor dtypes, as numpy/tinygrad do it:
 * bool < ints < floats; two floats give the wider one (float16 with bfloat16 gives float32);
 * signed with unsigned gives the next signed type wide enough for both (uint32 with int32 gives int64).
 */
export function promote(a: DType, b: DType): DType {
  if (a === b) return a;
  if (a.kind === "bool") return b;
  if (b.kind === "bool") return a;
  if (isFloat(a) !== isFloat(b)) return isFloat(a) ? a : b;
  if (isFloat(a)) {
    if ((a === dtypes.float16 && b === dtypes.bfloat16) || (a === dtypes.bfloat16 && b === dtypes.float16))
      return dtypes.float32;
    return a.itemsize >= b.itemsize ? a : b;
  }
  if (a.kind === b.kind) return a.itemsize >= b.itemsize ? a : b;
  const [signed, unsigned] = a.kind === "int" ? [a, b] : [b, a];
  if (signed.itemsize > unsigned.itemsize) return signed;
  const wider: Record<number, DType> = { 1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64, 8: dtypes.int64 };
  return wider[unsigned.itemsize]!;
}

/** The typed array that stores a dtype: 16-bit floats are stored as their bits. */
export type TypedArray =
  | Float32Array
  | Float64Array
  | Int8Array
  | Uint8Array
  | Int16Array
  | Uint16Array
  | Int32Array
  | Uint32Array
  | BigInt64Array;

export function typedArrayFor(
  d: DType,
  buffer: ArrayBuffer | SharedArrayBuffer,
  byteOffset = 0,
  length?: number,
): TypedArray {
  const n = length ?? (buffer.byteLength - byteOffset) / d.itemsize;
  switch (d.name) {
    case "bool":
    case "uint8":
      return new Uint8Array(buffer, byteOffset, n);
    case "int8":
      return new Int8Array(buffer, byteOffset, n);
    case "int16":
      return new Int16Array(buffer, byteOffset, n);
    case "uint16":
    case "float16":
    case "bfloat16":
      return new Uint16Array(buffer, byteOffset, n);
    case "int32":
      return new Int32Array(buffer, byteOffset, n);
    case "uint32":
      return new Uint32Array(buffer, byteOffset, n);
    case "int64":
      return new BigInt64Array(buffer, byteOffset, n);
    case "float32":
      return new Float32Array(buffer, byteOffset, n);
    case "float64":
      return new Float64Array(buffer, byteOffset, n);
  }
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** float32 value -> float16 bits, round to nearest even (overflow to inf, NaN kept quiet). */
export function f32ToF16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    const half = 1 << (shift - 1);
    let h = mant >>> shift;
    const rest = mant & ((1 << shift) - 1);
    if (rest > half || (rest === half && h & 1)) h++;
    return sign | h;
  }
  let h = (e << 10) | (mant >>> 13);
  const rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest === 0x1000 && h & 1)) h++;
  return sign | h;
}

/** float16 bits -> value (exact). */
export function f16BitsToF32(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exp = (h >>> 10) & 0x1f;
  const mant = h & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant ? NaN : sign * Infinity;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}

/** float32 value -> bfloat16 bits, round to nearest even. */
export function f32ToBf16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  if ((x & 0x7f800000) === 0x7f800000 && x & 0x7fffff) return (x >>> 16) | 0x40;
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** bfloat16 bits -> value (exact). */
export function bf16BitsToF32(h: number): number {
  u32[0] = h << 16;
  return f32[0]!;
}

/** Rounds a number to the nearest value a dtype can hold (floats), or wraps it as the integer type does. */
export function castScalar(value: number, d: DType): number {
  switch (d.name) {
    case "bool":
      return value !== 0 ? 1 : 0;
    case "float16":
      return f16BitsToF32(f32ToF16Bits(value));
    case "bfloat16":
      return bf16BitsToF32(f32ToBf16Bits(value));
    case "float32":
      return Math.fround(value);
    case "float64":
      return value;
    case "int8":
      return (Math.trunc(value) << 24) >> 24;
    case "uint8":
      return Math.trunc(value) & 0xff;
    case "int16":
      return (Math.trunc(value) << 16) >> 16;
    case "uint16":
      return Math.trunc(value) & 0xffff;
    case "int32":
      return Math.trunc(value) | 0;
    case "uint32":
      return Math.trunc(value) >>> 0;
    case "int64":
      return Math.trunc(value);
  }
}

/** The default float for new float tensors: `DEFAULT_FLOAT=HALF` makes it float16. */
export function defaultFloatFromEnv(): DType {
  const name = process.env.DEFAULT_FLOAT;
  return name ? dtypeOf(name) : dtypes.float32;
}
