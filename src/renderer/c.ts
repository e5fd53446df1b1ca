// Renders the loop IR as a C function `void name(T0* b0, const T1* b1, ..., int threads)`: the C dialect of
// cstyle.ts (fixed-width types, bools computed in an int32_t, float math in double and rounded, as JS's Math),
// with its preludes, register tiles as vectors (c_lanes.ts) and output loops split across threads by OpenMP.
import { type Bound, type Idx, coefficientOf, varsOf } from "../shape/symbolic.ts";
import type { Expr, KernelIR, Operand, Stmt } from "../codegen/ir.ts";
import { type Products, cCond, cIndex, cStyle, forLoop, fromStorage, noteProduct } from "./cstyle.ts";
import { hoistInvariants } from "./hoist.ts";
import { type LanePlan, type LaneTerm, planLanes } from "./c_lanes.ts";

export { cIndex };

export interface CRenderOptions {
  /**
   * Slots whose memory is passed in another slot too (an in-place assign's output and input): not declared
   * `restrict`. Every other slot is, so loads of the rest (an optimizer's scalars) stay hoisted out of loops.
   */
  readonly aliased?: ReadonlySet<number>;
  /**
   * Lane counts a register tile's runs are rendered as C vectors at (c_lanes.ts; the target's: `vectorLaneWidths`).
   * None by default.
   */
  readonly vectorLanes?: readonly number[];
}

/**
 * C: bools are computed as 32-bit 0/1 (as wide as the floats beside them, so that loops mixing them vectorise) and
 * stored in a byte.
 */
const C = cStyle({
  types: {
    bool: "int32_t",
    int8: "int8_t",
    uint8: "uint8_t",
    int16: "int16_t",
    uint16: "uint16_t",
    int32: "int32_t",
    uint32: "uint32_t",
    int64: "int64_t",
    float16: "float",
    bfloat16: "float",
    float32: "float",
    float64: "double",
  },
  uint32: "uint32_t",
  uint64: "uint64_t",
  restrict: "restrict",
  infinity: () => "INFINITY",
  nan: () => "NAN",
  minLiteral: (d) => (d.name === "int32" ? "INT32_MIN" : "INT64_MIN"),
  lowest: (d) => `INT${d.itemsize * 8}_MIN`,
  // computed in double and rounded, as JavaScript's Math does; exp2 by arithmetic alone, so that loops around it
  // vectorise
  narrowMath: (fn, a) => (fn === "exp2" ? `(float)tg_exp2_narrow((double)${a})` : `(float)${fn}((double)${a})`),
  bitcast: (bits, fromType, toType, to) =>
    `({ ${fromType} in_ = ${bits}; ${toType} out_; memcpy(&out_, &in_, sizeof out_); ${fromStorage("out_", to)}; })`,
});

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
  const params = C.params(kernel, (slot) => !opts.aliased?.has(slot));
  const loopVars = loopVarsOf(kernel.body);
  const lines = [
    `${hasFragileLoops(kernel, loopVars) ? "TG_FRAGILE_LOOPS " : ""}void ${fnName}(${[...params, "int threads"].join(", ")}) {`,
  ];
  const { body, plan: lanes } = planLanes(
    hoistInvariants(kernel.body, kernel.parallel, opts.aliased),
    opts.vectorLanes ?? [],
  );
  renderBlock(
    body,
    lines,
    "  ",
    { kernel, products: new Map(), indexType: indexType(kernel, loopVars), lanes, loopVars },
    kernel.parallel,
  );
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
 * forwards (a split sum's lanes, a tile's rows, a transposing copy) keep it: over the kernels of fuzzer programs
 * and BERT steps gcc got none of those wrong (test/fuzz/kernel_diff.py; the wrong ones were all guarded), and
 * marked, a split sum (a layer norm's row sums) ran much slower.
 * Marked too, where no vectorisation can pay: a kernel whose reduce loops of sums each add terms read along the
 * loop itself (unit steps), several in one loop. Vectorising those along the loop would reorder the additions,
 * which gcc may not do; it tries to group the sums instead, which for sums whose lanes lie apart is slow to
 * compile (a [32, 2, 32] kernel of 32 such sums) and runs slower than the loop left scalar.
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
      } else if (s.kind === "acc" && s.op === "ADD" && (s.dtype.kind === "int" || s.dtype.kind === "uint"))
        fragile = true;
    }
    return counts;
  };
  perIteration(kernel.body);
  return (
    fragile || onlySumsAlongThemselves(kernel.body) || (selectsShareConditions(kernel.body) && oddGroups(kernel.body))
  );
}

/**
 * Whether some loop body (with the short loops in it) holds two selects on one condition: gcc merges them into one
 * branch, moves the loads only one side reads into it, and vectorises those as masked loads (the sigmoid's gradient,
 * a max's). Conditions are compared by what they compute, as gcc sees them, not by name.
 */
function selectsShareConditions(body: readonly Stmt[]): boolean {
  const defs = new Map<string, Expr>();
  // each value's key names its sources by number (a value's whole expression tree can be exponentially long)
  const keys = new Map<string, string>();
  const numbers = new Map<string, string>();
  const intern = (key: string): string => {
    if (!numbers.has(key)) numbers.set(key, `#${numbers.size}`);
    return numbers.get(key)!;
  };
  const keyOf = (o: Operand): string => {
    if (o.kind === "lit") return `${o.value}`;
    const known = keys.get(o.name);
    if (known !== undefined) return known;
    const e = defs.get(o.name);
    const bounds = (valid: readonly Bound[]) => valid.map((b) => `${b.expr.key}@${b.lo}:${b.hi}`).join("&");
    const key = intern(
      !e
        ? o.name // an accumulator or a value from outside the loops
        : e.op === "LOAD"
          ? `b${e.buf}[${e.index.key}]?${bounds(e.valid)}`
          : e.op === "VALID"
            ? `valid(${bounds(e.valid)})`
            : e.op === "INDEX"
              ? `index(${e.index.key})`
              : `${e.op}(${e.srcs.map(keyOf).join(",")})`,
    );
    keys.set(o.name, key);
    return key;
  };
  // (selects outside every loop are not vectorised)
  const visit = (stmts: readonly Stmt[], conditions: Set<string> | null): boolean => {
    for (const s of stmts) {
      if (s.kind === "loop") {
        if (visit(s.body, conditions && s.size <= UNROLLED_TRIPS ? conditions : new Set())) return true;
      } else if (s.kind === "def") {
        defs.set(s.name, s.expr);
        if (s.expr.op === "WHERE" && conditions) {
          const key = keyOf(s.expr.srcs[0]!);
          if (conditions.has(key)) return true;
          conditions.add(key);
        }
      }
    }
    return false;
  };
  return visit(body, null);
}

/**
 * Whether some loop reads or writes a buffer a number of times an iteration (its short loops unrolled) that is more
 * than one and not a power of two: a group gcc vectorises with interleaving permutes. Masked loads in such groups got
 * the wrong mask (a select's gradient over an axis of 3, 5 or 7; groups of 6, 9, 10, 12 and 15 too), groups of 2, 4, 8
 * or 16 did not.
 */
function oddGroups(body: readonly Stmt[]): boolean {
  let odd = false;
  const perIteration = (stmts: readonly Stmt[]): Map<number, number> => {
    const counts = new Map<number, number>();
    const add = (buf: number, n: number) => counts.set(buf, (counts.get(buf) ?? 0) + n);
    for (const s of stmts) {
      if (s.kind === "loop") {
        const inner = perIteration(s.body);
        if ([...inner.values()].some((n) => n > 1 && (n & (n - 1)) !== 0)) odd = true;
        if (s.size <= UNROLLED_TRIPS) for (const [buf, n] of inner) add(buf, n * s.size);
      } else if (s.kind === "def" && s.expr.op === "LOAD") add(s.expr.buf, 1);
      else if (s.kind === "store") add(s.buf, 1);
    }
    return counts;
  };
  perIteration(body);
  return odd;
}

/**
 * Whether every reduce loop of the kernel that updates sums is a loop of float sums whose terms read only along
 * the loop (one element a step), and one holds several (what gcc tries to group).
 */
function onlySumsAlongThemselves(body: readonly Stmt[]): boolean {
  const loops: { updates: number; along: boolean }[] = [];
  const visit = (stmts: readonly Stmt[]): void => {
    for (const s of stmts)
      if (s.kind === "loop") {
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
  return (
    updates.length > 0 &&
    updates.every((u) => {
      // (a load at the same place every step is a value from outside the loop)
      const steps = loadsOf(u.value, [], new Set())
        .map((index) => coefficientOf(index, loop.var))
        .filter((c) => c !== 0);
      return u.dtype.kind === "float" && steps.length > 0 && steps.every((c) => c === 1);
    })
  );
}

/** Whether a step of some loop variable moves `e` down somewhere in it: a negative factor over a term holding one. */
function descends(e: Idx, loopVars: ReadonlySet<string>): boolean {
  // (a negative factor shows in the key as "*-": most indices have none)
  if (!e.key.includes("*-")) return false;
  switch (e.kind) {
    case "const":
    case "var":
      return false;
    case "sum":
      return e.terms.some((t) => descends(t, loopVars));
    case "mul":
      return (e.c < 0 && [...varsOf(e.a)].some((v) => loopVars.has(v))) || descends(e.a, loopVars);
    case "div":
    case "mod":
      return descends(e.a, loopVars);
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
  return (
    e.index.min >= 0 && e.index.max < kernel.buffers[e.buf]!.size && [...varsOf(e.index)].every((v) => loopVars.has(v))
  );
}

/** The loop variables' C type: 32-bit unless an index (or a step of computing one) can leave that range. */
function indexType(kernel: KernelIR, loopVars: ReadonlySet<string>): string {
  const exprs: Idx[] = [];
  const scan = (stmts: readonly Stmt[]): void => {
    for (const s of stmts) {
      if (s.kind === "loop") scan(s.body);
      else if (s.kind === "store") exprs.push(s.index);
      else if (s.kind === "def" && (s.expr.op === "LOAD" || s.expr.op === "INDEX")) exprs.push(s.expr.index);
      if (s.kind === "def" && (s.expr.op === "LOAD" || s.expr.op === "VALID"))
        exprs.push(...s.expr.valid.map((b) => b.expr));
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
  readonly products: Products;
  /** Register-tile lanes rendered as vectors. */
  readonly lanes: LanePlan;
  readonly loopVars: ReadonlySet<string>;
}

/** A split sum's lane term as a C vector expression of `width` lanes (c_lanes.ts LaneTerm). */
function laneVector(t: LaneTerm, width: number): string {
  if (t.kind === "load") return `tg_ld${width}(&b${t.buf}[${cIndex(t.index)}])`;
  if (t.kind === "intLoad") return `tg_ldi${width}(&b${t.buf}[${cIndex(t.index)}])`;
  if (t.kind === "splat") return `tg_splat${width}(${C.operand(t.operand)})`;
  const [a, b] = t.srcs.map((s) => laneVector(s, width));
  if (t.kind === "select")
    return `tg_sel${width}(tg_mask${width}(&b${t.mask.buf}[${cIndex(t.mask.index)}]), ${a}, ${b})`;
  return t.op === "NEG" ? `(-${a})` : `(${a} ${t.op === "ADD" ? "+" : "*"} ${b})`;
}

function renderBlock(
  stmts: readonly Stmt[],
  out: string[],
  indent: string,
  ctx: RenderContext,
  parallel: number,
): void {
  const { kernel, lanes } = ctx;
  for (const s of stmts) {
    switch (s.kind) {
      case "loop":
        // the first `parallel` perfectly nested output loops are split across threads (inside a serial loop)
        for (const group of lanes.groups.get(s) ?? [])
          out.push(`${indent}tg_f32x${group.accs.length} ${group.vector} = {${group.accs.join(", ")}};`);
        if (parallel > 0 && !s.serial)
          out.push(
            `${indent}#pragma omp parallel for schedule(static) num_threads(threads)${parallel > 1 ? ` collapse(${parallel})` : ""}`,
          );
        out.push(indent + forLoop(ctx.indexType, s.var, s.size));
        renderBlock(s.body, out, `${indent}  `, ctx, s.serial ? parallel : 0);
        out.push(`${indent}}`);
        for (const group of lanes.groups.get(s) ?? [])
          out.push(
            group.accs
              .map((acc, j) => `${acc} = ${group.vector}[${j}];`)
              .join(" ")
              .replace(/^/, indent),
          );
        // sibling loop nests at the top (the pieces of a concatenation) are each split across threads
        break;
      case "def": {
        if (lanes.skipped.has(s.name)) break;
        if (s.expr.op === "LOAD" && s.expr.valid.length > 0 && readsInBounds(s.expr, kernel, ctx.loopVars)) {
          out.push(indent + C.declare(s.name, s.dtype, C.expr({ ...s.expr, valid: [] }, s.dtype, kernel)));
          out.push(`${indent}${s.name} = (${cCond(s.expr.valid)} ? ${s.name} : 0);`);
          break;
        }
        out.push(indent + C.declare(s.name, s.dtype, C.expr(s.expr, s.dtype, kernel)));
        noteProduct(s, ctx.products);
        // a 16-bit product widened to float32 is the same C float: the sum still takes the FMA
        const src = s.expr.op === "CAST" ? s.expr.srcs[0] : undefined;
        if (src?.kind === "val" && ctx.products.has(src.name) && C.computeType(s.dtype) === C.computeType(src.dtype))
          ctx.products.set(s.name, ctx.products.get(src.name)!);
        break;
      }
      case "acc":
        out.push(indent + C.declare(s.name, s.dtype, C.identity(s.op, s.dtype)));
        break;
      case "update": {
        // a run of lanes is one vector update, rendered at its first (null: the rest of the run)
        const lane = lanes.updates.get(s);
        if (lane) {
          const { vector, accs } = lane.group;
          const w = accs.length;
          if (lane.kind === "fma")
            out.push(
              `${indent}${vector} = tg_fma${w}(${C.operand(lane.scalar)}, &b${lane.buf}[${cIndex(lane.index)}], ${vector});`,
            );
          else if (lane.kind === "fusedSum")
            out.push(
              `${indent}${vector} = tg_vfma${w}(${lane.factors.map((t) => laneVector(t, w)).join(", ")}, ${vector});`,
            );
          else if (lane.kind === "max")
            out.push(`${indent}${vector} = tg_vmax${w}(${vector}, ${laneVector(lane.term, w)});`);
          else out.push(`${indent}${vector} = ${vector} + ${laneVector(lane.term, w)};`);
        }
        // the one place results may differ from the JS reference in the last bit: matmul speed needs the FMA
        if (lane === undefined) out.push(`${indent}${s.name} = ${C.accumulate(s, ctx.products)};`);
        break;
      }
      case "store":
        out.push(indent + C.store(s));
        break;
    }
  }
}
