// Renders the loop IR as a WGSL compute shader: one invocation per output iteration (the output loops
// flattened onto a 2-D grid of 64-wide workgroups, with a bounds check), reduces as loops inside it, as
// renderer/cuda.ts does without its group and tensor-core forms.
//
// WGSL is C-like in its statements (cstyle.ts's index and bound rendering are shared) but not in its values,
// so the expressions are its own: conversions are calls (`f32(x)`), a select takes (false, true, condition),
// there are no 8-, 16- or 64-bit integers and no float64, and storage has no bytes. So:
// - every buffer is bound as an array of 32-bit words, its bytes laid out as on the host (copies in and out
//   are byte for byte); 1- and 2-byte elements are read by shifting their word and written with an atomic AND
//   and OR on it (invocations write different bytes of one word at once), 4-byte ones as the word;
// - narrow integers compute in i32/u32 and are wrapped into their range after each operation that can leave
//   it, bools compute as WGSL bools, 16-bit floats in f32 with exact bit conversions (no `shader-f16` needed);
// - int64 and float64 have no WGSL type: a kernel using one is refused by name (WgslError).
// Semantics follow the JS reference (cstyle.ts's header) except: float32 exp2, log2 and sin are the prelude's f32
// versions (about an ulp; the reference rounds double results), float IDIV and MOD divide in f32 (the reference in
// double), and implementations may treat NaN and infinities loosely (WGSL lets them).
import type { DType } from "../dtype.ts";
import { TsgradError } from "../helpers.ts";
import type { AluOp, Expr, KernelIR, Operand, Stmt } from "../codegen/ir.ts";
import type { Bound, Idx } from "../shape/symbolic.ts";
import { type Products, cIndex, noteProduct } from "./cstyle.ts";
import { outputIndices, splitOutputLoops } from "./cuda.ts";

/** A kernel WGSL cannot express (a dtype it has no type for). */
export class WgslError extends TsgradError {
  override name = "WgslError";
}

/** Invocations per workgroup; the grid is 2-D because a dimension holds at most 65,535 workgroups. */
export const WGSL_WORKGROUP = 64;
const MAX_GROUPS_PER_DIM = 65535;

/** One kernel's WGSL source and its dispatch. */
export interface WgslKernelSource {
  readonly code: string;
  /** Workgroups in x and y. */
  readonly workgroups: readonly [number, number];
  /** The binding each kernel slot reads through (a buffer passed in two slots is bound once, at its first). */
  readonly bindings: readonly number[];
}

/** The WGSL type a dtype is computed in. */
function computeType(d: DType, kernel: string): string {
  switch (d.name) {
    case "bool":
      return "bool";
    case "int8":
    case "int16":
    case "int32":
      return "i32";
    case "uint8":
    case "uint16":
    case "uint32":
      return "u32";
    case "float16":
    case "bfloat16":
    case "float32":
      return "f32";
    default:
      throw new WgslError(`WEBGPU: ${kernel} uses ${d.name}, which WGSL has no type for (no 64-bit types)`);
  }
}

/** A float32 literal: short decimal where it reads back exactly, else its bits. */
function f32Literal(value: number): string {
  const v = Math.fround(value);
  // infinities and NaN through a function call: as constant expressions WGSL refuses them
  if (Number.isNaN(v)) return "tg_f32(0x7fc00000u)";
  if (!Number.isFinite(v)) return v > 0 ? "tg_f32(0x7f800000u)" : "tg_f32(0xff800000u)";
  if (Object.is(v, -0)) return "tg_f32(0x80000000u)";
  for (let digits = 1; digits <= 9; digits++) {
    const text = v.toPrecision(digits);
    if (Math.fround(Number(text)) === v && Math.abs(v) < 1e30 && (v === 0 || Math.abs(v) > 1e-30))
      return `${text.includes(".") || text.includes("e") ? text : `${text}.0`}f`;
  }
  const bits = new Uint32Array(Float32Array.of(v).buffer)[0]!;
  return `bitcast<f32>(0x${bits.toString(16)}u)`;
}

function literal(value: number, d: DType): string {
  if (d.name === "bool") return value ? "true" : "false";
  if (d.kind === "float") return f32Literal(value);
  if (d.kind === "uint") return `${value >>> 0}u`;
  if (value === -(2 ** 31)) return "i32(-2147483648)";
  return value < 0 ? `(${value})` : `${value}`;
}

/** An expression of a narrow integer dtype wrapped into its range (i32 and u32 wrap by themselves). */
function fit(x: string, d: DType): string {
  switch (d.name) {
    case "int8":
      return `((${x} << 24u) >> 24u)`;
    case "int16":
      return `((${x} << 16u) >> 16u)`;
    case "uint8":
      return `(${x} & 0xffu)`;
    case "uint16":
      return `(${x} & 0xffffu)`;
    default:
      return x;
  }
}

/** The 32-bit word holding element `index` of a buffer of `d`, and where the element sits in it. */
function wordOf(d: DType, index: string): { word: string; shift: string | null } {
  if (d.itemsize === 1) return { word: `(u32(${index}) >> 2u)`, shift: `((u32(${index}) & 3u) * 8u)` };
  if (d.itemsize === 2) return { word: `(u32(${index}) >> 1u)`, shift: `((u32(${index}) & 1u) * 16u)` };
  return { word: `${index}`, shift: null };
}

/** An element's stored bits (in the low bits of a u32) as the value it is computed as. */
function fromBits(bits: string, d: DType): string {
  switch (d.name) {
    case "bool":
      return `(${bits} != 0u)`;
    case "uint8":
    case "uint16":
    case "uint32":
      return bits;
    case "int8":
      return `(bitcast<i32>(${bits} << 24u) >> 24u)`;
    case "int16":
      return `(bitcast<i32>(${bits} << 16u) >> 16u)`;
    case "int32":
      return `bitcast<i32>(${bits})`;
    case "float16":
      return `tg_h2f(${bits})`;
    case "bfloat16":
      return `bitcast<f32>(${bits} << 16u)`;
    default:
      return `bitcast<f32>(${bits})`;
  }
}

/** A computed value as the bits it is stored as (in the low bits of a u32). */
function toBits(x: string, d: DType): string {
  switch (d.name) {
    case "bool":
      return `select(0u, 1u, ${x})`;
    case "uint8":
    case "int8":
      return `(bitcast<u32>(${x}) & 0xffu)`;
    case "uint16":
    case "int16":
      return `(bitcast<u32>(${x}) & 0xffffu)`;
    case "float16":
      return `tg_f2h(${x})`;
    case "bfloat16":
      return `tg_f2b(${x})`;
    default:
      return `bitcast<u32>(${x})`;
  }
}

/**
 * pi/4 as a sum of floats of at most 6 significant bits each (the last takes the rest of a double's 53): y * part is
 * exact for any whole y below 2^18, so x - y pi/4 keeps its accuracy for |x| up to about 205,000 (Cody and Waite's
 * reduction, in more parts than Cephes's three, which hold to 8,192).
 */
const PI_4_PARTS: readonly string[] = (() => {
  const parts: string[] = [];
  let rest = Math.PI / 4;
  for (let i = 0; i < 9 && rest !== 0; i++) {
    const exponent = Math.floor(Math.log2(Math.abs(rest)));
    const unit = 2 ** (exponent - 5);
    const part = i === 8 ? Math.fround(rest) : Math.trunc(rest / unit) * unit;
    parts.push(`${part.toPrecision(17)}f`);
    rest -= part;
  }
  return parts;
})();

/**
 * Exact conversions between f32 and 16-bit floats' bits (round to nearest even), integer helpers, and exp2, log2
 * and sin to about an ulp (the built-ins are looser: SwiftShader's sin is 1e-4 off, its log2(0) finite). Where a
 * result is an infinity or NaN it comes from tg_f32: a constant expression may not be one.
 */
export const WGSL_PRELUDE = `fn tg_f32(bits: u32) -> f32 { return bitcast<f32>(bits); }
fn tg_f(x: f32) -> f32 { return x; }
fn tg_i(x: i32) -> i32 { return x; }
fn tg_u(x: u32) -> u32 { return x; }
fn tg_b(x: bool) -> bool { return x; }
fn tg_nan_or_inf(x: f32) -> bool { return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u; }
fn tg_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn tg_pow2i(k: i32) -> f32 { return bitcast<f32>(u32(k + 127) << 23u); }
fn tg_exp2(x: f32) -> f32 {
  if (tg_nan_or_inf(x)) { return select(x, 0.0f, x < 0.0f); }
  if (x >= 128.0f) { return tg_f32(0x7f800000u); }
  if (x < -150.0f) { return 0.0f; }
  let n = round(x);
  let t = (x - n) * 0.6931471805599453f;
  let p = 1.0f + t * (1.0f + t * (0.5f + t * (0.16666666666666666f + t * (0.041666666666666664f
    + t * (0.008333333333333333f + t * (0.001388888888888889f + t * 0.0001984126984126984f))))));
  let k = i32(n);
  if (k < -126) { return p * tg_pow2i(k + 64) * tg_pow2i(-64); }
  if (k > 127) { return p * tg_pow2i(k - 1) * 2.0f; }
  return p * tg_pow2i(k);
}
fn tg_log2(x: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) { return x; }
  if (b == 0x7f800000u) { return x; }
  if ((b & 0x7fffffffu) == 0u) { return tg_f32(0xff800000u); }
  if (b >= 0x80000000u) { return tg_f32(0x7fc00000u); }
  var m = x;
  var e = 0;
  if (b < 0x00800000u) { m = x * 8388608.0f; e = -23; }
  let mb = bitcast<u32>(m);
  e = e + i32((mb >> 23u) & 0xffu) - 127;
  var f = bitcast<f32>((mb & 0x7fffffu) | 0x3f800000u);
  if (f > 1.4142135623730951f) { f = f * 0.5f; e = e + 1; }
  let s = (f - 1.0f) / (f + 1.0f);
  let z = s * s;
  let ln = 2.0f * s * (1.0f + z * (0.3333333333333333f + z * (0.2f + z * (0.14285714285714285f
    + z * (0.1111111111111111f + z * 0.09090909090909091f)))));
  return f32(e) + ln * 1.4426950408889634f;
}
fn tg_sin(v: f32) -> f32 {
  if (tg_nan_or_inf(v)) { return tg_f32(0x7fc00000u); }
  var sign = 1.0f;
  var x = v;
  if (x < 0.0f) { sign = -1.0f; x = -x; }
  if (x > 205000.0f) { return sign * sin(x); }
  var j = u32(x * 1.2732395447351628f);
  var y = f32(j);
  if ((j & 1u) == 1u) { j = j + 1u; y = y + 1.0f; }
  j = j & 7u;
  if (j > 3u) { sign = -sign; j = j - 4u; }
  var z = x;
  ${PI_4_PARTS.map((part) => `z = z - y * ${part};`).join("\n  ")}
  let zz = z * z;
  var r: f32;
  if (j == 1u || j == 2u) {
    r = ((2.443315711809948e-5f * zz - 1.388731625493765e-3f) * zz + 4.166664568298827e-2f) * zz * zz - 0.5f * zz + 1.0f;
  } else {
    r = ((-1.9515295891e-4f * zz + 8.3321608736e-3f) * zz - 1.6666654611e-1f) * zz * z + z;
  }
  return sign * r;
}
fn tg_h2f(h: u32) -> f32 {
  let s = (h & 0x8000u) << 16u;
  let e = (h >> 10u) & 0x1fu;
  let m = h & 0x3ffu;
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 5.9604644775390625e-8f)); }
  if (e == 31u) { return bitcast<f32>(s | 0x7f800000u | (m << 13u)); }
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 13u));
}
fn tg_f2h(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  let s = (x >> 16u) & 0x8000u;
  let exp = (x >> 23u) & 0xffu;
  var m = x & 0x7fffffu;
  if (exp == 0xffu) { return s | 0x7c00u | select(0u, 0x200u, m != 0u); }
  let e = i32(exp) - 112;
  if (e >= 31) { return s | 0x7c00u; }
  if (e <= 0) {
    if (e < -10) { return s; }
    m = m | 0x800000u;
    let shift = u32(14 - e);
    let half = 1u << (shift - 1u);
    var h = m >> shift;
    let rest = m & ((1u << shift) - 1u);
    if (rest > half || (rest == half && (h & 1u) != 0u)) { h = h + 1u; }
    return s | h;
  }
  var h = (u32(e) << 10u) | (m >> 13u);
  let rest = m & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u) != 0u)) { h = h + 1u; }
  return s | h;
}
fn tg_f2b(v: f32) -> u32 {
  let x = bitcast<u32>(v);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0u) { return (x >> 16u) | 0x40u; }
  return (x + 0x7fffu + ((x >> 16u) & 1u)) >> 16u;
}
fn tg_floordiv(a: i32, c: i32) -> i32 {
  let q = a / c;
  return select(q, q - 1, q * c != a && (a < 0) != (c < 0));
}
fn tg_idiv(a: i32, b: i32) -> i32 { return select(select(a / b, 0 - a, b == -1), 0, b == 0); }
fn tg_imod(a: i32, b: i32) -> i32 { return select(a % b, 0, b == 0 || b == -1); }
fn tg_udiv(a: u32, b: u32) -> u32 { return select(a / b, 0u, b == 0u); }
fn tg_umod(a: u32, b: u32) -> u32 { return select(a % b, 0u, b == 0u); }
fn tg_wrap32(x: f32) -> u32 {
  if ((bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u) { return 0u; }
  let t = trunc(x);
  if (t > -2147483648.0f && t < 2147483648.0f) { return bitcast<u32>(i32(t)); }
  let k = floor(t / 4294967296.0f);
  return u32(t - k * 4294967296.0f);
}
`;

/** Renders `kernel`; `bindings[slot]` is the slot whose buffer slot `slot` reads (itself unless aliased). */
export function renderWgsl(
  kernel: KernelIR,
  bindings: readonly number[] = kernel.buffers.map((_, i) => i),
): WgslKernelSource {
  const { loops, body } = splitOutputLoops(kernel);
  const outputs = loops.reduce((n, l) => n * l.size, 1);
  for (const b of kernel.buffers) computeType(b.dtype, kernel.name);
  const out = kernel.buffers[0]!.dtype;
  // the output's bytes are written by several invocations a word when its elements are narrower than one
  const atomicOutput = out.itemsize < 4;
  const lines: string[] = [WGSL_PRELUDE];
  // binding n: the n-th distinct buffer, named by the first slot holding it
  [...new Set(bindings)].forEach((slot, binding) => {
    const words = slot === 0 && atomicOutput ? "array<atomic<u32>>" : "array<u32>";
    const access = slot === 0 ? "read_write" : "read";
    lines.push(`@group(0) @binding(${binding}) var<storage, ${access}> b${slot}: ${words};`);
  });
  lines.push(
    `@compute @workgroup_size(${WGSL_WORKGROUP})`,
    `fn main(@builtin(global_invocation_id) tg_id: vec3<u32>, @builtin(num_workgroups) tg_groups: vec3<u32>) {`,
    `  let gid = i32(tg_id.x + tg_id.y * tg_groups.x * ${WGSL_WORKGROUP}u);`,
    `  if (gid >= ${outputs}) { return; }`,
    ...outputIndices(loops, "let", "gid", "  "),
  );
  const ctx: Context = { kernel, bindings, atomicOutput, products: new Map() };
  renderBlock(body, lines, "  ", ctx);
  lines.push("}");
  const groups = Math.max(1, Math.ceil(outputs / WGSL_WORKGROUP));
  const x = Math.min(groups, MAX_GROUPS_PER_DIM);
  return { code: lines.join("\n"), workgroups: [x, Math.ceil(groups / x)], bindings };
}

interface Context {
  readonly kernel: KernelIR;
  readonly products: Products;
  readonly bindings: readonly number[];
  readonly atomicOutput: boolean;
}

function renderBlock(stmts: readonly Stmt[], out: string[], indent: string, ctx: Context): void {
  for (const s of stmts) {
    switch (s.kind) {
      case "loop":
        out.push(`${indent}for (var ${s.var}: i32 = 0; ${s.var} < ${s.size}; ${s.var}++) {`);
        renderBlock(s.body, out, `${indent}  `, ctx);
        out.push(`${indent}}`);
        break;
      case "def":
        out.push(`${indent}let ${s.name}: ${computeType(s.dtype, ctx.kernel.name)} = ${expr(s.expr, s.dtype, ctx)};`);
        noteProduct(s, ctx.products);
        break;
      case "acc":
        out.push(`${indent}var ${s.name}: ${computeType(s.dtype, ctx.kernel.name)} = ${identity(s.op, s.dtype)};`);
        break;
      case "update": {
        const acc: Operand = { kind: "val", name: s.name, dtype: s.dtype };
        // a sum of products accumulates with fused multiply-adds, as the C and CUDA renderers do
        const product =
          s.op === "ADD" && s.value.kind === "val" && !s.unfused ? ctx.products.get(s.value.name) : undefined;
        const next = product
          ? `fma(${operand(product[0]!)}, ${operand(product[1]!)}, ${s.name})`
          : alu(s.op, [acc, s.value], s.dtype);
        out.push(`${indent}${s.name} = ${next};`);
        break;
      }
      case "store":
        out.push(`${indent}${s.valid?.length ? `if (${cond(s.valid)}) ` : ""}${store(s)}`);
        break;
    }
  }
}

/**
 * Whether every bound holds, joined by `&`, not `&&`: short-circuit conditions are branches, and SwiftShader's
 * compiler took minutes (or never finished) on a kernel with a few dozen of them, 85 ms with `&`.
 */
function cond(bounds: readonly Bound[]): string {
  const parts: string[] = [];
  for (const b of bounds) {
    const e = cIndex(b.expr);
    if (b.expr.min < b.lo) parts.push(`(${e} >= ${b.lo})`);
    if (b.expr.max >= b.hi) parts.push(`(${e} < ${b.hi})`);
  }
  return parts.join(" & ") || "true";
}
const index = (e: Idx): string => cIndex(e);

function load(buf: number, at: string, ctx: Context): string {
  const d = ctx.kernel.buffers[buf]!.dtype;
  const binding = ctx.bindings[buf]!;
  const { word, shift } = wordOf(d, at);
  const read = binding === 0 && ctx.atomicOutput ? `atomicLoad(&b0[${word}])` : `b${binding}[${word}]`;
  const bits = shift === null ? read : `((${read} >> ${shift}) & ${d.itemsize === 1 ? "0xffu" : "0xffffu"})`;
  return fromBits(bits, d);
}

function store(s: Stmt & { kind: "store" }): string {
  const at = index(s.index);
  const bits = toBits(operand(s.value), s.dtype);
  const { word, shift } = wordOf(s.dtype, at);
  if (shift === null) return `b0[${word}] = ${bits};`;
  const mask = s.dtype.itemsize === 1 ? "0xffu" : "0xffffu";
  // other invocations write the word's other bytes at the same time: clear ours, then set it, atomically each
  return `{ let tg_w = ${word}; let tg_s = ${shift}; atomicAnd(&b0[tg_w], ~(${mask} << tg_s)); atomicOr(&b0[tg_w], ${bits} << tg_s); }`;
}

function operand(o: Operand): string {
  return o.kind === "val" ? o.name : literal(o.value, o.dtype);
}

function expr(e: Expr, d: DType, ctx: Context): string {
  if (e.op === "LOAD") {
    const value = load(e.buf, index(e.index), ctx);
    const dtype = ctx.kernel.buffers[e.buf]!.dtype;
    // out-of-range indices read nothing: WGSL would clamp them into the buffer, but the value is not used
    return e.valid.length ? `select(${literal(0, dtype)}, ${value}, ${cond(e.valid)})` : value;
  }
  if (e.op === "VALID") return `(${cond(e.valid)})`;
  if (e.op === "INDEX") return `i32(${index(e.index)})`;
  return alu(e.op, e.srcs, d);
}

function identity(op: "ADD" | "MAX", d: DType): string {
  if (op === "ADD") return literal(0, d);
  if (d.kind === "float") return "tg_f32(0xff800000u)";
  if (d.name === "bool") return "false";
  return d.kind === "int" ? literal(-(2 ** (d.itemsize * 8 - 1)), d) : "0u";
}

/** A zero of the compute type of `d`, for comparisons against it. */
const zero = (d: DType): string => (d.kind === "float" ? "0.0f" : d.kind === "uint" || d.name === "bool" ? "0u" : "0");

function alu(op: AluOp, srcs: readonly Operand[], d: DType): string {
  const [a, b, c] = srcs.map(operand) as [string, string, string];
  // literals alone make a constant expression, which WGSL refuses when it overflows or is not finite (1.0f / 0.0f):
  // the first goes through an identity function, whose result is a runtime value
  if (srcs.every((o) => o.kind === "lit")) {
    const first = srcs[0]!.dtype;
    const fn =
      first.name === "bool" ? "tg_b" : first.kind === "float" ? "tg_f" : first.kind === "uint" ? "tg_u" : "tg_i";
    return alu(op, [{ kind: "val", name: `${fn}(${a})`, dtype: first }, ...srcs.slice(1)], d);
  }
  const from = srcs[0]!.dtype;
  const isBool = d.name === "bool";
  const isInt = d.kind === "int" || d.kind === "uint";
  const signed = d.kind === "int";
  switch (op) {
    case "ADD":
      return isBool ? `(${a} | ${b})` : fit(`(${a} + ${b})`, d);
    case "MUL":
      return isBool ? `(${a} & ${b})` : fit(`(${a} * ${b})`, d);
    case "IDIV":
      return isInt ? fit(signed ? `tg_idiv(${a}, ${b})` : `tg_udiv(${a}, ${b})`, d) : `trunc(${a} / ${b})`;
    case "MOD":
      return isInt ? (signed ? `tg_imod(${a}, ${b})` : `tg_umod(${a}, ${b})`) : `(${a} % ${b})`;
    case "MAX":
      if (isBool) return `(${a} | ${b})`;
      return d.kind === "float" ? `select(${b}, ${a}, (${a} > ${b}) | tg_isnan(${a}))` : `max(${a}, ${b})`;
    // float comparisons spelled out for NaN: SwiftShader's `!=` is false where an operand is NaN (IEEE: true)
    case "CMPLT":
      if (from.name === "bool") return `(!${a} & ${b})`;
      return from.kind === "float" ? `((${a} < ${b}) & !tg_isnan(${a}) & !tg_isnan(${b}))` : `(${a} < ${b})`;
    case "CMPNE":
      return from.kind === "float" ? `((${a} != ${b}) | tg_isnan(${a}) | tg_isnan(${b}))` : `(${a} != ${b})`;
    case "AND":
      return `(${a} & ${b})`;
    case "OR":
      return `(${a} | ${b})`;
    case "XOR":
      return isBool ? `(${a} != ${b})` : `(${a} ^ ${b})`;
    case "SHL":
      return fit(`(${a} << (u32(${b}) & 31u))`, d);
    case "SHR":
      return `(${a} >> (u32(${b}) & 31u))`;
    case "NEG":
      if (isBool) return `!${a}`;
      return isInt ? fit(`(${zero(d)} - ${a})`, d) : `(-(${a}))`;
    case "RECIP":
      return isInt ? fit(signed ? `tg_idiv(1, ${a})` : `tg_udiv(1u, ${a})`, d) : `(1.0f / ${a})`;
    case "SQRT":
      return `sqrt(${a})`;
    case "EXP2":
      return `tg_exp2(${a})`;
    case "LOG2":
      return `tg_log2(${a})`;
    case "SIN":
      return `tg_sin(${a})`;
    case "TRUNC":
      return d.kind === "float" ? `trunc(${a})` : a;
    case "WHERE":
      return `select(${c}, ${b}, ${a})`;
    case "CAST":
      return cast(a, from, d);
    case "BITCAST":
      return fromBits(toBits(a, from), d);
  }
}

function cast(x: string, from: DType, to: DType): string {
  if (to.name === "bool") {
    if (from.kind === "float") return `((bitcast<u32>(${x}) & 0x7fffffffu) != 0u)`; // NaN is true
    return from.name === "bool" ? x : `(${x} != ${zero(from)})`;
  }
  if (to.kind === "float") {
    const f = from.kind === "float" ? x : from.name === "bool" ? `select(0.0f, 1.0f, ${x})` : `f32(${x})`;
    if (to.name === "float16") return `tg_h2f(tg_f2h(${f}))`;
    if (to.name === "bfloat16") return `bitcast<f32>(tg_f2b(${f}) << 16u)`;
    return f;
  }
  // to an integer: floats truncate and wrap as JavaScript's ToInt32 does, then into the dtype's range
  const word =
    from.kind === "float"
      ? `tg_wrap32(${x})`
      : from.name === "bool"
        ? `select(0u, 1u, ${x})`
        : from.kind === "uint"
          ? x
          : `bitcast<u32>(${x})`;
  return fit(to.kind === "uint" ? word : `bitcast<i32>(${word})`, to);
}
