// Renders the loop IR as a C function `void name(T0* b0, const T1* b1, ..., int threads)`.
// Semantics follow the JS renderer (the reference): float32 math in float, 16-bit floats stored
// as their bits and computed in float, integers wrap, bool is 0/1 (computed in an int32_t, stored in a byte),
// division by zero gives 0.
import type { DType } from "../dtype.ts";
import { type Bound, type Idx, coefficientOf, renderIdx, varsOf, renderBounds } from "../shape/symbolic.ts";
import type { AluOp, Expr, KernelIR, Operand, Stmt } from "../codegen/ir.ts";
import { hoistInvariants } from "./hoist.ts";
import { type LanePlan, type LaneTerm, planLanes } from "./c_lanes.ts";

export interface CRenderOptions {
  /**
   * Slots whose memory is passed in another slot too (an in-place assign's output and input): not declared
   * `restrict`. Every other slot is, so loads of the rest (an optimizer's scalars) stay hoisted out of loops.
   */
  readonly aliased?: ReadonlySet<number>;
  /** Lane counts a register tile's runs are rendered as C vectors at (c_lanes.ts; the target's: `vectorLaneWidths`). None by default. */
  readonly vectorLanes?: readonly number[];
}

/** The C type a dtype is computed in. */
const computeType: Record<DType["name"], string> = {
  bool: "int32_t", int8: "int8_t", uint8: "uint8_t", int16: "int16_t", uint16: "uint16_t", int32: "int32_t",
  uint32: "uint32_t", int64: "int64_t", float16: "float", bfloat16: "float", float32: "float", float64: "double",
};
/** The C type a dtype is stored in: bools are computed as 32-bit 0/1 (as wide as the floats beside them, so that loops mixing them vectorise) and stored in a byte. */
const storageType = (d: DType): string => (d.name === "float16" || d.name === "bfloat16" ? "uint16_t" : d.name === "bool" ? "uint8_t" : computeType[d.name]);

/** Inline helpers every kernel may use: exact 16-bit float conversions, wrapping casts, safe division. */
export const C_PRELUDE = `#include <stdint.h>
/* the marker of kernels with loops some compilers vectorise wrongly (renderer/c.ts hasFragileLoops): empty unless
   the compiler's probes found the bug (runtime/compiler_bugs.ts); there it is defined as an attribute */
#ifndef TG_FRAGILE_LOOPS
#define TG_FRAGILE_LOOPS
#endif
#include <string.h>
#include <math.h>
/* float16: hardware conversions where the target has them (x86 F16C), exact in both directions; else in software */
#if defined(__F16C__) && defined(__FLT16_MAX__)
static inline float tg_h2f(uint16_t h) { _Float16 x; memcpy(&x, &h, 2); return (float)x; }
static inline uint16_t tg_f2h(float v) { _Float16 x = (_Float16)v; uint16_t h; memcpy(&h, &x, 2); return h; }
#else
static inline float tg_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) { float m = (float)mant * 5.9604644775390625e-8f; return sign ? -m : m; }
  bits = exp == 0x1f ? (sign | 0x7f800000 | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  float f; memcpy(&f, &bits, 4); return f;
}
static inline uint16_t tg_f2h(float v) {
  uint32_t x; memcpy(&x, &v, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, mant = x & 0x7fffff;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00 | (mant ? 0x200 : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 0x1f) return (uint16_t)(sign | 0x7c00);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000;
    int shift = 14 - e;
    uint32_t half = 1u << (shift - 1), h = mant >> shift, rest = mant & ((1u << shift) - 1);
    if (rest > half || (rest == half && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (mant >> 13), rest = mant & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return (uint16_t)(sign | h);
}
#endif
/* 2^x for float math, in double (rounded to float it is what libm's exp2 and JS give) with arithmetic alone,
   so that loops around it vectorise: x = n + f (n the nearest integer, |f| <= 1/2), 2^f by its Taylor series
   (degree 13: error below 1e-17), 2^n from the exponent bits. Floats need |x| < 160 at most: clamped there. */
static inline double tg_exp2_narrow(double x) {
  double c = x < -160.0 ? -160.0 : (x > 160.0 ? 160.0 : x);
  double t = c + 6755399441055744.0; /* 1.5 * 2^52: the low mantissa bits of t hold round(c) */
  double n = t - 6755399441055744.0, f = c - n;
  double p = 1.0 + f * (0.6931471805599453 + f * (0.24022650695910072 + f * (0.05550410866482158 + f * (0.009618129107628477
    + f * (0.0013333558146428443 + f * (0.0001540353039338161 + f * (1.5252733804059841e-05 + f * (1.321548679014431e-06
    + f * (1.01780860092397e-07 + f * (7.054911620801123e-09 + f * (4.4455382718708116e-10 + f * (2.5678435993488206e-11
    + f * 1.3691488853904128e-12))))))))))));
  uint64_t tb, sb; double s;
  memcpy(&tb, &t, 8);
  sb = (tb + 1023) << 52;
  memcpy(&s, &sb, 8);
  return x != x ? x : p * s;
}
static inline float tg_b2f(uint16_t h) { uint32_t bits = (uint32_t)h << 16; float f; memcpy(&f, &bits, 4); return f; }
static inline uint16_t tg_f2b(float v) {
  uint32_t x; memcpy(&x, &v, 4);
  if ((x & 0x7f800000) == 0x7f800000 && (x & 0x7fffff)) return (uint16_t)((x >> 16) | 0x40);
  return (uint16_t)((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}
/* JavaScript's ToUint32: truncate, then wrap modulo 2^32 (NaN and infinities give 0) */
static inline uint32_t tg_wrap32(double x) {
  if (x > -2147483648.0 && x < 2147483648.0) return (uint32_t)(int32_t)x;
  if (x != x || isinf(x)) return 0;
  double m = fmod(trunc(x), 4294967296.0);
  return (uint32_t)(m < 0 ? m + 4294967296.0 : m);
}
static inline int64_t tg_trunc64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return INT64_MAX;
  if (x <= -9223372036854775808.0) return INT64_MIN;
  return (int64_t)x;
}
/* truncating division and remainder; by 0 gives 0, and MIN / -1 wraps instead of trapping */
static inline int64_t tg_floordiv(int64_t a, int64_t c) { int64_t q = a / c; return (q * c != a && (a < 0) != (c < 0)) ? q - 1 : q; }
#define TG_IDIV(T, a, b) ((b) == 0 ? (T)0 : ((b) == -1 ? (T)(0u - (uint64_t)(a)) : (T)((a) / (b))))
#define TG_IMOD(T, a, b) ((b) == 0 || (b) == -1 ? (T)0 : (T)((a) % (b)))
#define TG_UDIV(T, a, b) ((b) == 0 ? (T)0 : (T)((a) / (b)))
#define TG_UMOD(T, a, b) ((b) == 0 ? (T)0 : (T)((a) % (b)))
`;

/**
 * The vector helpers register tiles call (c_lanes.ts), added to the prelude only where the compiler builds
 * them (`vectorLaneWidths`): an unused helper that does not compile would fail every kernel.
 */
export const C_VECTOR_PRELUDE = `/* a register tile's lanes as one vector (c_lanes.ts, at the widths compiler_cache.ts's vectorLaneWidths finds
   the target has instructions for): lane i is fmaf(a, w[i], c[i]), as in the scalar form; a split sum's lanes
   load neighbours (tg_ld; int32 ones converted, tg_ldi), take one value for all (tg_splat), select by
   neighbouring bools (tg_mask, tg_sel: bitwise, so exactly the scalar ?:), fuse a product's add (tg_vfma) as it
   does, and take a max as the scalar form's (acc > v || acc != acc) ? acc : v (tg_vmax). The x86 builtins
   behind _mm512_fmadd_ps and _mm256_fmadd_ps (gcc and clang name them alike), not <immintrin.h>: parsing it
   cost 0.2 s a translation unit. The splat of a becomes the instruction's broadcast operand. */
#if defined(__AVX__) && defined(__FMA__)
typedef float tg_f32x8 __attribute__((vector_size(32)));
static inline tg_f32x8 tg_fma8(float a, const float* w, tg_f32x8 c) {
  tg_f32x8 s = {a, a, a, a, a, a, a, a}, v;
  memcpy(&v, w, sizeof v);
  return __builtin_ia32_vfmaddps256(s, v, c);
}
static inline tg_f32x8 tg_ld8(const float* p) { tg_f32x8 v; memcpy(&v, p, sizeof v); return v; }
static inline tg_f32x8 tg_splat8(float a) { tg_f32x8 s = {a, a, a, a, a, a, a, a}; return s; }
static inline tg_f32x8 tg_vfma8(tg_f32x8 a, tg_f32x8 b, tg_f32x8 c) { return __builtin_ia32_vfmaddps256(a, b, c); }
typedef int tg_i32x8 __attribute__((vector_size(32)));
typedef unsigned char tg_u8x8 __attribute__((vector_size(8)));
static inline tg_i32x8 tg_mask8(const uint8_t* p) { tg_u8x8 m; memcpy(&m, p, sizeof m); return __builtin_convertvector(m, tg_i32x8) != 0; }
static inline tg_f32x8 tg_sel8(tg_i32x8 m, tg_f32x8 a, tg_f32x8 b) { return (tg_f32x8)(((tg_i32x8)a & m) | ((tg_i32x8)b & ~m)); }
static inline tg_f32x8 tg_vmax8(tg_f32x8 a, tg_f32x8 b) { return tg_sel8((a > b) | (a != a), a, b); }
static inline tg_f32x8 tg_ldi8(const int32_t* p) { tg_i32x8 v; memcpy(&v, p, sizeof v); return __builtin_convertvector(v, tg_f32x8); }
#endif
#if defined(__AVX512F__)
typedef float tg_f32x16 __attribute__((vector_size(64)));
static inline tg_f32x16 tg_fma16(float a, const float* w, tg_f32x16 c) {
  tg_f32x16 s = {a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}, v;
  memcpy(&v, w, sizeof v);
  return __builtin_ia32_vfmaddps512_mask(s, v, c, (unsigned short)-1, 4);
}
static inline tg_f32x16 tg_ld16(const float* p) { tg_f32x16 v; memcpy(&v, p, sizeof v); return v; }
static inline tg_f32x16 tg_splat16(float a) { tg_f32x16 s = {a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a}; return s; }
static inline tg_f32x16 tg_vfma16(tg_f32x16 a, tg_f32x16 b, tg_f32x16 c) { return __builtin_ia32_vfmaddps512_mask(a, b, c, (unsigned short)-1, 4); }
typedef int tg_i32x16 __attribute__((vector_size(64)));
typedef unsigned char tg_u8x16 __attribute__((vector_size(16)));
static inline tg_i32x16 tg_mask16(const uint8_t* p) { tg_u8x16 m; memcpy(&m, p, sizeof m); return __builtin_convertvector(m, tg_i32x16) != 0; }
static inline tg_f32x16 tg_sel16(tg_i32x16 m, tg_f32x16 a, tg_f32x16 b) { return (tg_f32x16)(((tg_i32x16)a & m) | ((tg_i32x16)b & ~m)); }
static inline tg_f32x16 tg_vmax16(tg_f32x16 a, tg_f32x16 b) { return tg_sel16((a > b) | (a != a), a, b); }
static inline tg_f32x16 tg_ldi16(const int32_t* p) { tg_i32x16 v; memcpy(&v, p, sizeof v); return __builtin_convertvector(v, tg_f32x16); }
#endif
`;

export function renderC(kernel: KernelIR, fnName: string, opts: CRenderOptions): string {
  const params = kernel.buffers.map((b, slot) => {
    const constness = slot === 0 ? "" : "const ";
    return `${constness}${storageType(b.dtype)}* ${opts.aliased?.has(slot) ? "" : "restrict "}b${slot}`;
  });
  const loopVars = loopVarsOf(kernel.body);
  const lines = [`${hasFragileLoops(kernel, loopVars) ? "TG_FRAGILE_LOOPS " : ""}void ${fnName}(${[...params, "int threads"].join(", ")}) {`];
  const { body, plan: lanes } = planLanes(hoistInvariants(kernel.body, kernel.parallel, opts.aliased), opts.vectorLanes ?? []);
  renderBlock(body, lines, "  ", { kernel, products: new Map(), indexType: indexType(kernel, loopVars), lanes, loopVars }, kernel.parallel);
  lines.push("}");
  return lines.join("\n");
}

/** gcc unrolls constant loops this short before it vectorises: their accesses join the loop around them. */
const UNROLLED_TRIPS = 16;

/**
 * Whether the kernel has loops of the kinds gcc 12.2 vectorises wrongly (runtime/compiler_bugs.ts probes for it):
 * a loop reading or writing one buffer at several places an iteration (after short inner loops are unrolled:
 * the accesses gcc groups) where one of them walks the buffer backwards (a flip's index: gcc put such groups in
 * the wrong lane order), guarded loads or stores (if-converted to masked accesses), and integer sums (a
 * reduction through wrapping casts). Such a kernel carries the marker TG_FRAGILE_LOOPS, which the compiler
 * defines as an attribute that turns loop vectorisation off where the probes show the bug. Groups that walk
 * forwards (a split sum's lanes, a tile's rows, a transposing copy) keep it: over 11,395 kernels of fuzzer
 * programs and BERT steps gcc got none of those wrong (test/fuzz/kernel_diff.py; the wrong ones were all guarded),
 * and marked, a split sum ran 2.5x slower (a layer norm's row sums over [1024, 256]: 0.21 vs 0.08 ms).
 * Marked too, where no vectorisation can pay: a kernel whose reduce loops of sums each add terms read along the
 * loop itself (unit steps), several in one loop. Vectorising those along the loop would reorder the additions,
 * which gcc may not do; it tries to group the sums instead, which for sums whose lanes lie apart took 2 s to
 * compile (a [32, 2, 32] kernel of 32 such sums) and ran slower (38 vs 24 us).
 */
function hasFragileLoops(kernel: KernelIR, loopVars: ReadonlySet<string>): boolean {
  let fragile = false;
  // each buffer's accesses in `stmts` an iteration of the loop around them, short inner loops unrolled into it
  // (longer ones are loops of their own), and whether one walks backwards; every loop's own count is checked on the way
  type Accesses = { n: number; backwards: boolean };
  const perIteration = (stmts: readonly Stmt[]): Map<number, Accesses> => {
    const counts = new Map<number, Accesses>();
    const add = (buf: number, n: number, backwards: boolean) => {
      const seen = counts.get(buf);
      counts.set(buf, { n: (seen?.n ?? 0) + n, backwards: (seen?.backwards ?? false) || backwards });
    };
    for (const s of stmts) {
      if (s.kind === "loop") {
        const inner = perIteration(s.body);
        if ([...inner.values()].some((a) => a.n > 1 && a.backwards)) fragile = true;
        if (s.size <= UNROLLED_TRIPS) for (const [buf, a] of inner) add(buf, a.n * s.size, a.backwards);
      } else if (s.kind === "def" && s.expr.op === "LOAD") {
        add(s.expr.buf, 1, descends(s.expr.index, loopVars));
        if (s.expr.valid.length > 0 && !readsInBounds(s.expr, kernel, loopVars)) fragile = true;
      } else if (s.kind === "store") {
        add(s.buf, 1, descends(s.index, loopVars));
        if (s.valid?.length) fragile = true;
      } else if (s.kind === "acc" && s.op === "ADD" && (s.dtype.kind === "int" || s.dtype.kind === "uint")) fragile = true;
    }
    return counts;
  };
  perIteration(kernel.body);
  return fragile || onlySumsAlongThemselves(kernel.body);
}

/**
 * Whether every reduce loop of the kernel that updates sums is a loop of float sums whose terms read only along
 * the loop (one element a step), and one holds several (what gcc tries to group).
 */
function onlySumsAlongThemselves(body: readonly Stmt[]): boolean {
  const loops: { updates: number; along: boolean }[] = [];
  const visit = (stmts: readonly Stmt[]): void => {
    for (const s of stmts) if (s.kind === "loop") {
      const updates = s.body.filter((t) => t.kind === "update").length;
      if (s.var.startsWith("r") && updates > 0) loops.push({ updates, along: sumsAlongItself(s) });
      visit(s.body);
    }
  };
  visit(body);
  return loops.some((l) => l.updates > 1) && loops.every((l) => l.along);
}

/** Whether every update in `loop`'s body is a float sum whose terms read along the loop only one element a step. */
function sumsAlongItself(loop: Stmt & { kind: "loop" }): boolean {
  const defs = new Map<string, Expr>();
  for (const s of loop.body) if (s.kind === "def") defs.set(s.name, s.expr);
  const updates = loop.body.filter((s): s is Stmt & { kind: "update" } => s.kind === "update");
  // the loads a value is computed from inside the loop (values from outside are the same every step)
  const loadsOf = (o: Operand, into: Idx[], seen: Set<string>): Idx[] => {
    const e = o.kind === "val" && !seen.has(o.name) ? defs.get(o.name) : undefined;
    if (o.kind === "val") seen.add(o.name);
    if (e?.op === "LOAD") into.push(e.index);
    else if (e && "srcs" in e) for (const src of e.srcs) loadsOf(src, into, seen);
    return into;
  };
  return updates.length > 0 && updates.every((u) => {
    // (a load at the same place every step is a value from outside the loop)
    const steps = loadsOf(u.value, [], new Set()).map((index) => coefficientOf(index, loop.var)).filter((c) => c !== 0);
    return u.dtype.kind === "float" && steps.length > 0 && steps.every((c) => c === 1);
  });
}

/** Whether a step of some loop variable moves `e` down somewhere in it: a negative factor over a term holding one. */
function descends(e: Idx, loopVars: ReadonlySet<string>): boolean {
  // (a negative factor shows in the key as "*-": most indices have none)
  if (!e.key.includes("*-")) return false;
  switch (e.kind) {
    case "const": case "var": return false;
    case "sum": return e.terms.some((t) => descends(t, loopVars));
    case "mul": return (e.c < 0 && [...varsOf(e.a)].some((v) => loopVars.has(v))) || descends(e.a, loopVars);
    case "div": case "mod": return descends(e.a, loopVars);
  }
}

/** The kernel's loop variables by name. */
function loopVarsOf(stmts: readonly Stmt[], into = new Set<string>()): Set<string> {
  for (const s of stmts) if (s.kind === "loop") loopVarsOf(s.body, into.add(s.var));
  return into;
}

/**
 * Whether a guarded load's index stays inside its buffer for every value of the loops (a pad's scalar, a
 * piece of a concatenation read at a fixed place): then it is read unconditionally and the guard selects,
 * a blend where a conditional read needs a masked load or a branch. Only over loop variables: a runtime
 * index's range may hold only where the guard does.
 */
function readsInBounds(e: Expr & { op: "LOAD" }, kernel: KernelIR, loopVars: ReadonlySet<string>): boolean {
  return e.index.min >= 0 && e.index.max < kernel.buffers[e.buf]!.size && [...varsOf(e.index)].every((v) => loopVars.has(v));
}

/** The loop variables' C type: 32-bit unless an index (or a step of computing one) can leave that range. */
function indexType(kernel: KernelIR, loopVars: ReadonlySet<string>): string {
  const exprs: Idx[] = [];
  const scan = (stmts: readonly Stmt[]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") scan(s.body);
      else if (s.kind === "store") exprs.push(s.index);
      else if (s.kind === "def" && (s.expr.op === "LOAD" || s.expr.op === "INDEX")) exprs.push(s.expr.index);
      if (s.kind === "def" && (s.expr.op === "LOAD" || s.expr.op === "VALID")) exprs.push(...s.expr.valid.map((b) => b.expr));
    }
  };
  scan(kernel.body);
  // runtime values (one-hot indices) are only used where their bounds hold: their declared range says nothing
  const wide = (e: Idx): boolean => {
    if ([...varsOf(e)].some((v) => !loopVars.has(v))) return false;
    if (e.min < -(2 ** 31) || e.max >= 2 ** 31) return true;
    return e.kind === "sum" ? e.terms.some(wide) : e.kind === "const" || e.kind === "var" ? false : wide(e.a);
  };
  return exprs.some(wide) ? "int64_t" : "int32_t";
}

interface RenderContext {
  readonly kernel: KernelIR;
  /** The C type of loop variables. */
  readonly indexType: string;
  /** Float products by name: a sum of products accumulates with fused multiply-adds. */
  readonly products: Map<string, readonly Operand[]>;
  /** Register-tile lanes rendered as vectors. */
  readonly lanes: LanePlan;
  readonly loopVars: ReadonlySet<string>;
}

/** A split sum's lane term as a C vector expression of `width` lanes (c_lanes.ts LaneTerm). */
function laneVector(t: LaneTerm, width: number): string {
  if (t.kind === "load") return `tg_ld${width}(&b${t.buf}[${idx(t.index)}])`;
  if (t.kind === "intLoad") return `tg_ldi${width}(&b${t.buf}[${idx(t.index)}])`;
  if (t.kind === "splat") return `tg_splat${width}(${operand(t.operand)})`;
  const [a, b] = t.srcs.map((s) => laneVector(s, width));
  if (t.kind === "select") return `tg_sel${width}(tg_mask${width}(&b${t.mask.buf}[${idx(t.mask.index)}]), ${a}, ${b})`;
  return t.op === "NEG" ? `(-${a})` : `(${a} ${t.op === "ADD" ? "+" : "*"} ${b})`;
}

function renderBlock(stmts: readonly Stmt[], out: string[], indent: string, ctx: RenderContext, parallel: number): void {
  const { kernel, lanes } = ctx;
  for (const s of stmts) {
    switch (s.kind) {
      case "loop":
        // the first `parallel` perfectly nested output loops are split across threads (inside a serial loop)
        for (const group of lanes.groups.get(s) ?? []) out.push(`${indent}tg_f32x${group.accs.length} ${group.vector} = {${group.accs.join(", ")}};`);
        if (parallel > 0 && !s.serial) out.push(`${indent}#pragma omp parallel for schedule(static) num_threads(threads)${parallel > 1 ? ` collapse(${parallel})` : ""}`);
        out.push(`${indent}for (${ctx.indexType} ${s.var} = 0; ${s.var} < ${s.size}; ${s.var}++) {`);
        renderBlock(s.body, out, indent + "  ", ctx, s.serial ? parallel : 0);
        out.push(`${indent}}`);
        for (const group of lanes.groups.get(s) ?? []) out.push(group.accs.map((acc, j) => `${acc} = ${group.vector}[${j}];`).join(" ").replace(/^/, indent));
        // sibling loop nests at the top (the pieces of a concatenation) are each split across threads
        break;
      case "def":
        if (lanes.skipped.has(s.name)) break;
        if (s.expr.op === "LOAD" && s.expr.valid.length > 0 && readsInBounds(s.expr, kernel, ctx.loopVars)) {
          out.push(`${indent}${computeType[s.dtype.name]} ${s.name} = ${renderExpr({ ...s.expr, valid: [] }, s.dtype, kernel)};`);
          out.push(`${indent}${s.name} = (${cond(s.expr.valid)} ? ${s.name} : 0);`);
          break;
        }
        out.push(`${indent}${computeType[s.dtype.name]} ${s.name} = ${renderExpr(s.expr, s.dtype, kernel)};`);
        if (s.expr.op === "MUL" && s.dtype.kind === "float") ctx.products.set(s.name, s.expr.srcs);
        // a 16-bit product widened to float32 is the same C float: the sum still takes the FMA
        const src = s.expr.op === "CAST" ? s.expr.srcs[0] : undefined;
        if (src?.kind === "val" && ctx.products.has(src.name) && computeType[s.dtype.name] === computeType[src.dtype.name]) ctx.products.set(s.name, ctx.products.get(src.name)!);
        break;
      case "acc":
        out.push(`${indent}${computeType[s.dtype.name]} ${s.name} = ${identity(s.op, s.dtype)};`);
        break;
      case "update": {
        // a run of lanes is one vector update, rendered at its first (null: the rest of the run)
        const lane = lanes.updates.get(s);
        if (lane) {
          const { vector, accs } = lane.group;
          const w = accs.length;
          if (lane.kind === "fma") out.push(`${indent}${vector} = tg_fma${w}(${operand(lane.scalar)}, &b${lane.buf}[${idx(lane.index)}], ${vector});`);
          else if (lane.kind === "fusedSum") out.push(`${indent}${vector} = tg_vfma${w}(${lane.factors.map((t) => laneVector(t, w)).join(", ")}, ${vector});`);
          else if (lane.kind === "max") out.push(`${indent}${vector} = tg_vmax${w}(${vector}, ${laneVector(lane.term, w)});`);
          else out.push(`${indent}${vector} = ${vector} + ${laneVector(lane.term, w)};`);
        }
        if (lane !== undefined) break;
        const acc: Operand = { kind: "val", name: s.name, dtype: s.dtype };
        // the one place results may differ from the JS reference in the last bit: matmul speed needs the FMA
        const product = s.op === "ADD" && s.value.kind === "val" && !s.unfused ? ctx.products.get(s.value.name) : undefined;
        if (product) {
          out.push(`${indent}${s.name} = ${s.dtype.name === "float64" ? "fma" : "fmaf"}(${operand(product[0]!)}, ${operand(product[1]!)}, ${s.name});`);
          break;
        }
        out.push(`${indent}${s.name} = ${renderAlu(s.op === "ADD" ? "ADD" : "MAX", [acc, s.value], s.dtype)};`);
        break;
      }
      case "store":
        out.push(`${indent}${s.valid?.length ? `if (${cond(s.valid)}) ` : ""}b${s.buf}[${idx(s.index)}] = ${toStorage(operand(s.value), s.dtype)};`);
        break;
    }
  }
}

function identity(op: "ADD" | "MAX", d: DType): string {
  if (op === "ADD") return "0";
  switch (d.kind) {
    case "float": return "-INFINITY";
    case "int": return d.name === "int64" ? "INT64_MIN" : `INT${d.itemsize * 8}_MIN`;
    default: return "0";
  }
}

/**
 * Index expressions in C-family languages. The IR's division and modulo are floor operations:
 * the truncating C forms are exact when the dividend cannot be negative, `tg_floordiv` and a
 * shifted remainder otherwise (CUDA shares this).
 */
export const cIndex = (e: Idx): string =>
  renderIdx(
    e,
    (a, c, nonNegative) => (nonNegative ? `(${a} / ${c})` : `tg_floordiv(${a}, ${c})`),
    (a, c, nonNegative) => (nonNegative ? `(${a} % ${c})` : `(((${a}) % ${c} + ${c}) % ${c})`),
  );
const idx = cIndex;

const cond = (bounds: readonly Bound[]): string => renderBounds(bounds, idx, "1");

function renderExpr(e: Expr, dtype: DType, kernel: KernelIR): string {
  if (e.op === "LOAD") {
    const load = fromStorage(`b${e.buf}[${idx(e.index)}]`, kernel.buffers[e.buf]!.dtype);
    return e.valid.length ? `(${cond(e.valid)} ? ${load} : 0)` : load;
  }
  if (e.op === "VALID") return `(int32_t)(${cond(e.valid)})`;
  if (e.op === "INDEX") return `(int32_t)(${idx(e.index)})`;
  return renderAlu(e.op, e.srcs, dtype);
}

/** A literal in the dtype's C type (infinities and NaN by name, -0 kept). */
function literal(value: number, d: DType): string {
  if (d.name === "bool") return value ? "1" : "0";
  if (d.kind === "float") {
    const suffix = d.name === "float64" ? "" : "f";
    if (Number.isNaN(value)) return "NAN";
    if (!Number.isFinite(value)) return value > 0 ? "INFINITY" : "-INFINITY";
    const text = Object.is(value, -0) ? "-0.0" : value.toPrecision(17);
    return `${text.includes(".") || text.includes("e") ? text : text + ".0"}${suffix}`;
  }
  if (d.name === "int64") return `${value}LL`;
  if (d.name === "uint32") return `${value}u`;
  if (d.name === "int32" && value === -2147483648) return "INT32_MIN";
  return String(value);
}

function operand(o: Operand): string {
  return o.kind === "val" ? o.name : literal(o.value, o.dtype);
}

function fromStorage(x: string, d: DType): string {
  if (d.name === "float16") return `tg_h2f(${x})`;
  if (d.name === "bfloat16") return `tg_b2f(${x})`;
  return x;
}

function toStorage(x: string, d: DType): string {
  if (d.name === "float16") return `tg_f2h(${x})`;
  if (d.name === "bfloat16") return `tg_f2b(${x})`;
  return x;
}

/** Integer arithmetic wraps: do it unsigned (no undefined behaviour) and convert back. */
function wrapped(op: string, a: string, b: string, d: DType): string {
  const t = computeType[d.name];
  const u = d.itemsize === 8 ? "uint64_t" : "uint32_t";
  return `(${t})((${u})${a} ${op} (${u})${b})`;
}

/** Math functions are computed in double and rounded, as JavaScript's Math does. */
function viaDouble(fn: string, a: string, d: DType): string {
  return d.name === "float64" ? `${fn}(${a})` : `(float)${fn}((double)${a})`;
}

function renderAlu(op: AluOp, srcs: readonly Operand[], d: DType): string {
  const [a, b, c] = srcs.map(operand) as [string, string, string];
  const from = srcs[0]!.dtype;
  const t = computeType[d.name];
  const isInt = d.kind === "int" || d.kind === "uint";
  switch (op) {
    case "ADD": return d.name === "bool" ? `(${a} | ${b})` : isInt ? wrapped("+", a, b, d) : `(${a} + ${b})`;
    case "MUL": return d.name === "bool" ? `(${a} & ${b})` : isInt ? wrapped("*", a, b, d) : `(${a} * ${b})`;
    case "IDIV": return isInt ? `TG_${d.kind === "uint" ? "U" : "I"}DIV(${t}, ${a}, ${b})` : `(${t})trunc((double)${a} / (double)${b})`;
    case "MOD": return isInt ? `TG_${d.kind === "uint" ? "U" : "I"}MOD(${t}, ${a}, ${b})` : `(${t})fmod((double)${a}, (double)${b})`;
    case "MAX": return d.kind === "float" ? `((${a} > ${b} || ${a} != ${a}) ? ${a} : ${b})` : `(${a} > ${b} ? ${a} : ${b})`;
    case "CMPLT": return `(int32_t)(${a} < ${b})`;
    case "CMPNE": return `(int32_t)(${a} != ${b})`;
    case "AND": return `(${t})(${a} & ${b})`;
    case "OR": return `(${t})(${a} | ${b})`;
    case "XOR": return `(${t})(${a} ^ ${b})`;
    case "SHL": return d.itemsize === 8 ? `(${t})((uint64_t)${a} << (${b} & 63))` : `(${t})((uint32_t)${a} << (${b} & 31))`;
    case "SHR": return d.itemsize === 8 ? `(${t})(${a} >> (${b} & 63))` : `(${t})(${a} >> (${b} & 31))`;
    case "NEG": return d.name === "bool" ? `(int32_t)!${a}` : isInt ? wrapped("-", "0", a, d) : `(-(${a}))`; // a may be a negative literal: --1.0f is a decrement
    case "RECIP": return isInt ? `TG_${d.kind === "uint" ? "U" : "I"}DIV(${t}, 1, ${a})` : `(${t})(1 / ${a})`;
    case "SQRT": return d.name === "float64" ? `sqrt(${a})` : `sqrtf(${a})`;
    case "EXP2": return d.name === "float64" ? `exp2(${a})` : `(float)tg_exp2_narrow((double)${a})`;
    case "LOG2": return viaDouble("log2", a, d);
    case "SIN": return viaDouble("sin", a, d);
    case "TRUNC": return d.kind === "float" ? (d.name === "float64" ? `trunc(${a})` : `truncf(${a})`) : a;
    case "WHERE": return `(${a} ? ${b} : ${c})`;
    case "CAST": return renderCast(a, from, d);
    case "BITCAST": return `({ ${storageType(from)} in_ = ${toStorage(a, from)}; ${storageType(d)} out_; memcpy(&out_, &in_, sizeof out_); ${fromStorage("out_", d)}; })`;
  }
}

function renderCast(x: string, from: DType, to: DType): string {
  switch (to.name) {
    case "bool": return `(int32_t)(${x} != 0)`;
    case "float16": return `tg_h2f(tg_f2h((float)${x}))`;
    case "bfloat16": return `tg_b2f(tg_f2b((float)${x}))`;
    case "float32": return `(float)${x}`;
    case "float64": return `(double)${x}`;
    case "int64": return from.kind === "float" ? `tg_trunc64(${x})` : `(int64_t)${x}`;
    default: return from.kind === "float" ? `(${computeType[to.name]})tg_wrap32(${x})` : `(${computeType[to.name]})${x}`;
  }
}
