// Renders the loop IR as a CUDA C kernel `extern "C" __global__ void name(T0* b0, const T1* b1, ...)`: the
// CUDA dialect of cstyle.ts (bools computed in a byte, infinities and NaN as bit patterns, no headers: NVRTC
// needs no include path). The output loops become the grid: one thread per output iteration (exact grid, bounds
// check), or, for reduces with few outputs, one block per output whose threads split the reduce loop and combine
// with warp shuffles ("group" mode; many rows of their own: one warp a row, 8 rows a block); upcast lanes load
// and store as vectors. Differences from the reference (the JS renderer): exp2/log2/sin of 32-bit floats use
// CUDA's float functions (within 2 ulp) rather than double math rounded, and group reduces add in a different order.
import type { DType } from "../dtype.ts";
import { getenv } from "../helpers.ts";
import { type Idx, varsOf } from "../shape/symbolic.ts";
import type { KernelIR, Operand, Stmt } from "../codegen/ir.ts";
import { type Products, cIndex, cStyle, forLoop, fromStorage, noteProduct, toStorage } from "./cstyle.ts";

/** Grid and block sizes (x, y, z) and dynamic shared memory of one launch. */
export interface CudaLaunch {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
  /**
   * Scratch device memory the kernel takes as an extra last parameter (split-K partial sums), of which the
   * first `zeroedBytes` must be zero at launch and are left zero by the kernel. Launches on one stream run
   * in order, so the kernels of a device share one workspace.
   */
  readonly workspace?: { readonly bytes: number; readonly zeroedBytes: number };
}

/** One kernel's CUDA source (without `CUDA_PRELUDE`) and how to launch it. */
export interface CudaKernelSource {
  readonly code: string;
  readonly launch: CudaLaunch;
}

export interface CudaRenderOptions {
  /** Which slots are promised unaliased (`__restrict__`): see `Restrict`. */
  readonly restrict: Restrict;
  /** Threads per block when each thread computes one output iteration. */
  readonly blockSize?: number;
  /** Threads that split each output's reduce loop (0: one thread per output). Default: `groupSize(kernel)`. */
  readonly group?: number;
  /** Outputs a block computes in group mode, a warp each (group is then 32); default 1, the whole block. */
  readonly rows?: number;
}

const INT64_MIN = "(-9223372036854775807LL - 1)";

/**
 * CUDA C: bools computed in a byte as they are stored, float math in CUDA's float functions, limits without headers.
 */
export const CUDA = cStyle({
  types: {
    bool: "unsigned char",
    int8: "signed char",
    uint8: "unsigned char",
    int16: "short",
    uint16: "unsigned short",
    int32: "int",
    uint32: "unsigned int",
    int64: "long long",
    float16: "float",
    bfloat16: "float",
    float32: "float",
    float64: "double",
  },
  uint32: "unsigned int",
  uint64: "unsigned long long",
  restrict: "__restrict__",
  infinity: (d) => (d.name === "float64" ? "TG_DINF" : "TG_INF"),
  nan: (d) => (d.name === "float64" ? "TG_DNAN" : "TG_NAN"),
  // the digits of -2^31 and -2^63 are a negated literal too wide for the type
  minLiteral: (d) => (d.name === "int64" ? INT64_MIN : "(-2147483647 - 1)"),
  lowest: (d) => (d.name === "int64" ? INT64_MIN : String(-(2 ** (d.itemsize * 8 - 1)))),
  narrowMath: (fn, a) => `${fn}f(${a})`,
  bitcast: (bits, fromType, toType, to) => fromStorage(`tg_bitcast<${toType}>((${fromType})${bits})`, to),
});

/** The CUDA type a dtype is stored in. */
export const storageType = CUDA.storageType;

/** The widths (n) of the wgmma instructions CUDA_PRELUDE wraps (tensor-core tiles use these as bn). */
export const WGMMA_WIDTHS: readonly number[] = [64, 128, 256];

/**
 * Hopper's warpgroup products (sm_90a): a shared-memory descriptor (no swizzle: start, leading and stride
 * byte offsets, each over 16), the fences and groups around wgmma.mma_async, and one product per width and
 * input type, d (float32, accumulated) += A (64 x 16) * B (16 x n), A and B read through descriptors,
 * K-major or transposed (MN-major) as TA / TB say.
 */
function wgmmaHelpers(): string {
  const lines = [
    `__device__ __forceinline__ unsigned long long tg_wgmma_desc(const void* p, unsigned lbo, unsigned sbo) {`,
    `  const unsigned a = (unsigned)__cvta_generic_to_shared(p);`,
    `  return (unsigned long long)((a & 0x3ffff) >> 4) | (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32;`,
    `}`,
    `__device__ __forceinline__ void tg_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }`,
    `__device__ __forceinline__ void tg_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }`,
    `template <int N> __device__ __forceinline__ void tg_wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }`,
    `/* a thread's shared-memory writes (st.shared, cp.async) made visible to wgmma's reads (the async proxy) */`,
    `__device__ __forceinline__ void tg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }`,
    `/* an accumulator the compiler may not read before the asynchronous products writing it are waited for */`,
    `__device__ __forceinline__ void tg_fence_reg(float& r) { asm volatile("" : "+f"(r) :: "memory"); }`,
  ];
  for (const n of WGMMA_WIDTHS)
    for (const input of ["f16", "bf16"]) {
      const count = n / 2;
      const regs = Array.from({ length: count }, (_, i) => `%${i}`).join(", ");
      const outs = Array.from({ length: count }, (_, i) => `"+f"(d[${i}])`).join(", ");
      lines.push(
        `template <int TA, int TB> __device__ __forceinline__ void tg_wgmma_${input}_n${n}(float* d, unsigned long long a, unsigned long long b) {`,
        `  asm volatile("{ .reg .pred p; setp.ne.b32 p, %${count + 2}, 0; wgmma.mma_async.sync.aligned.m64n${n}k16.f32.${input}.${input} {${regs}}, %${count}, %${count + 1}, p, 1, 1, %${count + 3}, %${count + 4}; }"`,
        `    : ${outs}`,
        `    : "l"(a), "l"(b), "r"(1), "n"(TA), "n"(TB));`,
        `}`,
      );
    }
  return lines.join("\n");
}

/** Infinities and NaN as bit patterns (no headers: NVRTC needs no include path). */
export const GPU_LIMITS = `#define TG_INF __int_as_float(0x7f800000)
#define TG_NAN __int_as_float(0x7fc00000)
#define TG_DINF __longlong_as_double(0x7ff0000000000000LL)
#define TG_DNAN __longlong_as_double(0x7ff8000000000000LL)
`;

/**
 * Helpers both GPU dialects (CUDA, HIP) share: bfloat16 conversions, JS-style casts, floor division, bit casts,
 * safe integer division.
 */
export const GPU_HELPERS = `__device__ __forceinline__ float tg_b2f(unsigned short h) { return __uint_as_float((unsigned int)h << 16); }
__device__ __forceinline__ unsigned short tg_f2b(float v) {
  unsigned int x = __float_as_uint(v);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
/* JavaScript's ToUint32: truncate, then wrap modulo 2^32 (NaN and infinities give 0) */
__device__ __forceinline__ unsigned int tg_wrap32(double x) {
  if (x > -2147483648.0 && x < 2147483648.0) return (unsigned int)(int)x;
  if (x - x != 0.0) return 0u;
  double m = fmod(trunc(x), 4294967296.0);
  return (unsigned int)(m < 0 ? m + 4294967296.0 : m);
}
__device__ __forceinline__ long long tg_trunc64(double x) {
  if (x != x) return 0;
  if (x >= 9223372036854775807.0) return 9223372036854775807LL;
  if (x <= -9223372036854775808.0) return -9223372036854775807LL - 1;
  return (long long)x;
}
/* floor division of a possibly negative index */
template <typename A, typename C> __device__ __forceinline__ A tg_floordiv(A a, C c) { A q = a / c; return q * c != a && (a < 0) != (c < 0) ? q - 1 : q; }
template <typename O, typename I> __device__ __forceinline__ O tg_bitcast(I x) { union { I i; O o; } u; u.i = x; return u.o; }
/* truncating division and remainder; by 0 gives 0, and MIN / -1 wraps instead of trapping */
#define TG_IDIV(T, a, b) ((b) == 0 ? (T)0 : ((b) == -1 ? (T)(0ull - (unsigned long long)(a)) : (T)((a) / (b))))
#define TG_IMOD(T, a, b) ((b) == 0 || (b) == -1 ? (T)0 : (T)((a) % (b)))
#define TG_UDIV(T, a, b) ((b) == 0 ? (T)0 : (T)((a) / (b)))
#define TG_UMOD(T, a, b) ((b) == 0 ? (T)0 : (T)((a) % (b)))
`;

/** Helpers every kernel may use: exact 16-bit float conversions, JS-style casts, safe division, warp shuffles. */
export const CUDA_PRELUDE = `${GPU_LIMITS}/* the GPU's own instructions (a CPU emulator for tests, test/cuda/emu, defines TG_EMU and its own) */
#ifndef TG_EMU
__device__ __forceinline__ float tg_h2f(unsigned short h) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
/* round to nearest even in hardware; NaN keeps its sign and becomes quiet, as the reference does */
__device__ __forceinline__ unsigned short tg_f2h(float f) {
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return f != f ? (unsigned short)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u) : h;
}
/* one warp's 16 x 8 x 16 tensor-core product, float32 accumulators c += a * b (fragments as mma.sync lays them out) */
__device__ __forceinline__ void tg_mma_f16(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
__device__ __forceinline__ void tg_mma_bf16(float* c, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* ldmatrix: four 8 x 8 16-bit matrices, lane l giving the address of row l % 8 of matrix l / 8 */
__device__ __forceinline__ void tg_ldsm_x4(unsigned* r, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(row)));
}
__device__ __forceinline__ void tg_ldsm_x4_trans(unsigned* r, const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"((unsigned)__cvta_generic_to_shared(row)));
}
/* 16 bytes global -> shared without registers; bytes = 0 writes zeros (past a tile edge) */
__device__ __forceinline__ void tg_cp_async16(void* dst, const void* src, int bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void tg_cp_async_commit() { asm volatile("cp.async.commit_group;"); }
/* every committed group but the newest N has landed (in this thread) */
template <int N> __device__ __forceinline__ void tg_cp_async_wait() { asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
/* shared memory sized at launch (over 48 KB only after cuFuncSetAttribute); 128-byte aligned, as wgmma's core matrices are */
#define TG_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#ifdef __CUDA_ARCH_FEAT_SM90_ALL
${wgmmaHelpers()}
#endif
#endif
${GPU_HELPERS}/* warp shuffles for every compute type (narrow integers travel as int) */
template <typename T> __device__ __forceinline__ T tg_shfl(T v, int lane) { return (T)__shfl_xor_sync(0xffffffffu, (int)v, lane); }
template <> __device__ __forceinline__ unsigned int tg_shfl(unsigned int v, int lane) { return __shfl_xor_sync(0xffffffffu, v, lane); }
template <> __device__ __forceinline__ long long tg_shfl(long long v, int lane) { return __shfl_xor_sync(0xffffffffu, v, lane); }
template <> __device__ __forceinline__ float tg_shfl(float v, int lane) { return __shfl_xor_sync(0xffffffffu, v, lane); }
template <> __device__ __forceinline__ double tg_shfl(double v, int lane) { return __shfl_xor_sync(0xffffffffu, v, lane); }
`;

/** Default threads per block for one-thread-per-output kernels (`CUDA_BLOCK`). */
const defaultBlockSize = (): number => getenv("CUDA_BLOCK", 256);

/** The leading, perfectly nested output loops (the grid) and the statements inside the innermost one. */
export function splitOutputLoops(kernel: KernelIR): { loops: { var: string; size: number }[]; body: readonly Stmt[] } {
  const loops: { var: string; size: number }[] = [];
  let body: readonly Stmt[] = kernel.body;
  while (body.length === 1 && body[0]!.kind === "loop" && body[0]!.var.startsWith("i")) {
    loops.push({ var: body[0]!.var, size: body[0]!.size });
    body = body[0]!.body;
  }
  return { loops, body };
}

/**
 * Threads per output for group reduces, 0 for one thread per output. Group mode is for reduces right
 * inside the output loops that are long and either have few outputs (too few threads otherwise) or
 * read a row of their own per output (a softmax or a norm: one thread per row would read uncoalesced).
 */
export function groupSize(kernel: KernelIR): number {
  const { loops, body } = splitOutputLoops(kernel);
  const outputs = loops.reduce((n, l) => n * l.size, 1);
  const reduces = body.filter((s): s is Stmt & { kind: "loop" } => s.kind === "loop");
  const reduceTrips = Math.max(0, ...reduces.map((s) => s.size));
  if (reduceTrips < 64 || outputs > 1 << 19) return 0;
  if (outputs >= 1 << 14 && !readsRows(loops, reduces)) return 0;
  // fewer outputs than multiprocessors (norms, losses): a whole 1024-thread block on each
  const most = outputs < 128 ? 1024 : 256;
  return Math.min(most, Math.max(32, 2 ** Math.floor(Math.log2(reduceTrips / 4))));
}

/** Outputs (rows) a block of warp-per-row group reduces computes: 8 warps, 256 threads. */
export const WARP_ROWS = 8;

/**
 * Whether a group reduce computes each output with one warp, WARP_ROWS outputs a block, instead of a
 * block an output: where there are many outputs, each a row of its own of at most 4096 (a softmax over
 * 512 keys, a layer norm over 1024 features). A warp then keeps several of its row's loads in flight and
 * combines by shuffles alone (no shared memory, no barriers), and a multiprocessor holds 64 rows at once
 * instead of 8 to 16 blocks.
 */
export function warpPerRow(kernel: KernelIR): boolean {
  const { loops, body } = splitOutputLoops(kernel);
  const outputs = loops.reduce((n, l) => n * l.size, 1);
  const reduces = body.filter((s): s is Stmt & { kind: "loop" } => s.kind === "loop");
  return groupSize(kernel) > 0 && outputs >= 4096 && reduces.every((s) => s.size <= 4096) && readsRows(loops, reduces);
}

/**
 * Whether some load inside the reduce loops reads a row of its own for each output (it depends on every
 * output loop: a softmax's scores, beside a mask all rows share). A matmul's operands each skip an output
 * loop: one thread per output then shares them; rows of their own are read coalesced only by a group.
 */
function readsRows(loops: readonly { var: string; size: number }[], reduces: readonly Stmt[]): boolean {
  const indices: Idx[] = [];
  const collect = (stmts: readonly Stmt[]): void =>
    stmts.forEach((s) => {
      if (s.kind === "loop") collect(s.body);
      else if (s.kind === "def" && s.expr.op === "LOAD") indices.push(s.expr.index);
    });
  collect(reduces);
  return indices.some((index) => loops.every((l) => varsOf(index).has(l.var)));
}

export function renderCuda(kernel: KernelIR, fnName: string, opts: CudaRenderOptions): CudaKernelSource {
  const rows = opts.rows ?? 1;
  const group = rows > 1 ? 32 : (opts.group ?? groupSize(kernel));
  const blockSize = group > 0 ? group * rows : (opts.blockSize ?? defaultBlockSize());
  const { loops, body } = splitOutputLoops(kernel);
  const outputs = loops.reduce((n, l) => n * l.size, 1);
  const index = indexType(kernel);
  const lines = [
    `extern "C" __global__ void __launch_bounds__(${blockSize}) ${fnName}(${kernelParams(kernel, opts.restrict)}) {`,
  ];
  if (rows > 1) {
    // a warp an output: warps past the end leave together (no block barrier follows, only shuffles)
    lines.push(`  ${index} gid = (${index})blockIdx.x * ${rows} + (threadIdx.x >> 5);`);
    lines.push(`  if (gid >= ${outputs}) return;`);
  } else if (group > 0) {
    lines.push(`  __shared__ unsigned long long tg_partial[32];`);
    lines.push(`  ${index} gid = blockIdx.x;`);
  } else {
    lines.push(`  ${index} gid = (${index})blockIdx.x * ${blockSize} + threadIdx.x;`);
    lines.push(`  if (gid >= ${outputs}) return;`);
  }
  lines.push(...outputIndices(loops, index, "gid", "  "));
  const ctx: RenderContext = {
    kernel,
    products: new Map(),
    group,
    member: rows > 1 ? "(threadIdx.x & 31)" : "threadIdx.x",
  };
  renderBlock(body, lines, "  ", ctx, true);
  lines.push("}");
  const blocks = group > 0 ? Math.ceil(outputs / rows) : Math.ceil(outputs / blockSize);
  return { code: lines.join("\n"), launch: { grid: [blocks, 1, 1], block: [blockSize, 1, 1], sharedBytes: 0 } };
}

/**
 * Which of a kernel's buffer slots are `__restrict__`: true, every one; false, none; a set, every slot but
 * those (the slots one buffer is passed in twice, an in-place assign's output and input: the optimizer's other
 * inputs stay promised unaliased, so their loads may go through the read-only cache).
 */
export type Restrict = boolean | ReadonlySet<number>;

/** The parameter list: the output first, inputs const. */
export function kernelParams(kernel: KernelIR, restrict: Restrict): string {
  const restricted = (slot: number): boolean => (typeof restrict === "boolean" ? restrict : !restrict.has(slot));
  return CUDA.params(kernel, restricted).join(", ");
}

/** Each output loop variable from one flat index (row-major over the loops). */
export function outputIndices(
  loops: readonly { var: string; size: number }[],
  index: string,
  flat: string,
  indent: string,
): string[] {
  let stride = 1;
  const out: string[] = [];
  for (let d = loops.length - 1; d >= 0; d--) {
    const { var: name, size } = loops[d]!;
    const quotient = stride === 1 ? flat : `(${flat} / ${stride})`;
    out.unshift(`${indent}${index} ${name} = ${d === 0 ? quotient : `${quotient} % ${size}`};`);
    stride *= size;
  }
  return out;
}

/** The loop variables' type: 32-bit unless a buffer is too large for it. */
export const indexType = (kernel: KernelIR): string =>
  kernel.buffers.some((b) => b.size >= 2 ** 31) ? "long long" : "int";

export interface RenderContext {
  readonly kernel: KernelIR;
  readonly products: Products;
  /** Threads per output in group mode (0: none). */
  readonly group: number;
  /** A thread's place in its output's group (threadIdx.x, or its lane where a warp computes an output). */
  readonly member?: string;
}

/** Renders statements; `top` marks the innermost output loop's body, where group mode splits reduce loops. */
export function renderBlock(
  stmts: readonly Stmt[],
  out: string[],
  indent: string,
  ctx: RenderContext,
  top = false,
): void {
  const index = indexType(ctx.kernel);
  // statements a vector load or store stands for: its lines at one of them, null at the others;
  // in group mode one thread stores each output: those stores stay scalar
  const vectors = new Map([
    ...vectorLoads(stmts, ctx.kernel),
    ...(top && ctx.group > 0 ? [] : vectorStores(stmts, ctx.kernel)),
  ]);
  for (let n = 0; n < stmts.length; n++) {
    const s = stmts[n]!;
    const vector = vectors.get(n);
    if (vector !== undefined) {
      if (vector) out.push(...vector.map((line) => indent + line));
      continue;
    }
    switch (s.kind) {
      case "loop":
        if (top && ctx.group > 0) {
          out.push(
            `${indent}for (${index} ${s.var} = ${ctx.member ?? "threadIdx.x"}; ${s.var} < ${s.size}; ${s.var} += ${ctx.group}) {`,
          );
          renderBlock(s.body, out, `${indent}  `, ctx);
          out.push(`${indent}}`);
          // accumulators of this level (not those of reduces nested in the loop) hold per-thread parts
          const declared = new Set(stmts.flatMap((t) => (t.kind === "acc" ? [t.name] : [])));
          for (const acc of updatedAccs(s.body))
            if (declared.has(acc[0])) out.push(...groupCombine(acc, ctx.group, indent));
        } else {
          out.push(indent + forLoop(index, s.var, s.size));
          renderBlock(s.body, out, `${indent}  `, ctx);
          out.push(`${indent}}`);
        }
        break;
      case "def":
        out.push(indent + CUDA.declare(s.name, s.dtype, CUDA.expr(s.expr, s.dtype, ctx.kernel)));
        noteProduct(s, ctx.products);
        break;
      case "acc":
        out.push(indent + CUDA.declare(s.name, s.dtype, CUDA.identity(s.op, s.dtype)));
        break;
      case "update":
        out.push(`${indent}${s.name} = ${CUDA.accumulate(s, ctx.products)};`);
        break;
      case "store": {
        const line = CUDA.store(s);
        // in group mode every thread holds the combined value: one of them writes it
        out.push(`${indent}${top && ctx.group > 0 ? `if (${ctx.member ?? "threadIdx.x"} == 0) ${line}` : line}`);
        break;
      }
    }
  }
}

/** Accumulators updated anywhere inside `stmts`, with their reduce op and dtype. */
function updatedAccs(
  stmts: readonly Stmt[],
  found = new Map<string, { op: "ADD" | "MAX"; dtype: DType }>(),
): Map<string, { op: "ADD" | "MAX"; dtype: DType }> {
  for (const s of stmts) {
    if (s.kind === "update") found.set(s.name, { op: s.op, dtype: s.dtype });
    else if (s.kind === "loop") updatedAccs(s.body, found);
  }
  return found;
}

/** Combines one accumulator across the block: shuffles within each warp, then warp 0 over the warps' results. */
function groupCombine(
  [name, { op, dtype }]: [string, { op: "ADD" | "MAX"; dtype: DType }],
  group: number,
  indent: string,
): string[] {
  const t = CUDA.computeType(dtype);
  const other: Operand = { kind: "val", name: "tg_other", dtype };
  const combine = `${name} = ${CUDA.alu(op, [{ kind: "val", name, dtype }, other], dtype)};`;
  const warps = Math.max(1, group / 32);
  const lines = [
    `for (int tg_lane = 16; tg_lane > 0; tg_lane >>= 1) { ${t} tg_other = tg_shfl(${name}, tg_lane); ${combine} }`,
  ];
  if (warps > 1) {
    lines.push(
      `if ((threadIdx.x & 31) == 0) ((${t}*)tg_partial)[threadIdx.x >> 5] = ${name};`,
      `__syncthreads();`,
      `${name} = ((${t}*)tg_partial)[0];`,
      `for (int tg_w = 1; tg_w < ${warps}; tg_w++) { ${t} tg_other = ((${t}*)tg_partial)[tg_w]; ${combine} }`,
      // the partials are read by everyone before the next combine overwrites them
      `__syncthreads();`,
    );
  }
  return lines.map((l) => indent + l);
}

/** Vector types by (storage type, lanes): what one aligned load of neighbouring elements reads. */
const vectorTypes: Record<string, string> = {
  "float:2": "float2",
  "float:4": "float4",
  "int:2": "int2",
  "int:4": "int4",
  "unsigned int:2": "uint2",
  "unsigned int:4": "uint4",
  "unsigned short:2": "ushort2",
  "unsigned short:4": "ushort4",
  "unsigned char:2": "uchar2",
  "unsigned char:4": "uchar4",
};
const fields = ["x", "y", "z", "w"];

/**
 * The constant term of an index and the rest, and whether the rest is a multiple of `n` for every value of its
 * variables.
 */
function splitConstant(e: Idx): { rest: string; offset: number; restAligned: (n: number) => boolean } {
  const terms = e.kind === "sum" ? e.terms : [e];
  const constant = terms.find((t) => t.kind === "const");
  const others = terms.filter((t) => t.kind !== "const");
  return {
    rest: others.map((t) => t.key).join("+"),
    offset: constant?.kind === "const" ? constant.value : 0,
    restAligned: (n) => others.every((t) => t.kind === "mul" && t.c % n === 0),
  };
}

/** A load or store of one upcast lane: its statement's position, buffer and index. */
interface Lane {
  readonly position: number;
  readonly buf: number;
  readonly index: Idx;
}

/**
 * Runs of 4 (or 2) lanes of one buffer at neighbouring, aligned indices (the same index but for its
 * constant, which steps by one), none in an earlier run and each accepted by `fits`: the vectors to load
 * or store. Only indices over loop variables qualify, so that the access can move to one lane's place.
 */
function vectorRuns<L extends Lane>(
  lanes: readonly L[],
  kernel: KernelIR,
  fits: (run: readonly L[]) => boolean,
): { run: L[]; vtype: string }[] {
  const rows = new Map<string, Map<number, L>>();
  for (const lane of lanes) {
    if (![...varsOf(lane.index)].every((v) => /^[ir]\d+$/.test(v))) continue;
    const { rest, offset } = splitConstant(lane.index);
    const key = `${lane.buf}|${rest}`;
    if (!rows.has(key)) rows.set(key, new Map());
    rows.get(key)!.set(offset, lane);
  }
  const taken = new Set<number>();
  const runs: { run: L[]; vtype: string }[] = [];
  for (const row of rows.values()) {
    for (const [offset, base] of [...row].sort((x, y) => x[0] - y[0])) {
      const stored = storageType(kernel.buffers[base.buf]!.dtype);
      const runOf = (n: number) => Array.from({ length: n }, (_, l) => row.get(offset + l));
      const n = [4, 2].find((n) => {
        const run = runOf(n);
        return (
          vectorTypes[`${stored}:${n}`] !== undefined &&
          offset % n === 0 &&
          splitConstant(base.index).restAligned(n) &&
          run.every((lane) => lane !== undefined && !taken.has(lane.position)) &&
          fits(run as L[])
        );
      });
      if (!n) continue;
      const run = runOf(n) as L[];
      for (const lane of run) taken.add(lane.position);
      runs.push({ run, vtype: vectorTypes[`${stored}:${n}`]! });
    }
  }
  return runs;
}

/**
 * Unguarded loads of neighbouring elements (upcast lanes) whose first element is aligned become one vector
 * load: statement position -> the lines defining all of them (at the first), or null (defined there already).
 */
function vectorLoads(stmts: readonly Stmt[], kernel: KernelIR): Map<number, string[] | null> {
  const loads = stmts.flatMap((s, position) =>
    s.kind === "def" && s.expr.op === "LOAD" && s.expr.valid.length === 0
      ? [{ position, buf: s.expr.buf, index: s.expr.index, name: s.name, dtype: s.dtype }]
      : [],
  );
  const result = new Map<number, string[] | null>();
  for (const { run, vtype } of vectorRuns(loads, kernel, () => true)) {
    const [base] = run,
      dtype = kernel.buffers[base!.buf]!.dtype,
      tmp = `vec_${base!.name}`;
    const lines = [`${vtype} ${tmp} = *(const ${vtype}*)(b${base!.buf} + ${cIndex(base!.index)});`];
    run.forEach((lane, l) => {
      lines.push(CUDA.declare(lane.name, lane.dtype, fromStorage(`${tmp}.${fields[l]}`, dtype)));
      result.set(lane.position, null);
    });
    result.set(Math.min(...run.map((lane) => lane.position)), lines);
  }
  return result;
}

/**
 * Stores of neighbouring elements (upcast lanes) whose first element is aligned become one vector store,
 * at the last lane's position: statement position -> its lines, or null (stored there). Only when nothing
 * between the lanes' stores reads the stored buffer or holds a loop.
 */
function vectorStores(stmts: readonly Stmt[], kernel: KernelIR): Map<number, string[] | null> {
  const stores = stmts.flatMap((s, position) =>
    s.kind === "store" && !s.valid?.length ? [{ position, buf: s.buf, index: s.index, value: s.value }] : [],
  );
  const undisturbed = (run: readonly Lane[]): boolean => {
    const positions = run.map((lane) => lane.position);
    return stmts
      .slice(Math.min(...positions), Math.max(...positions) + 1)
      .every((s) => s.kind !== "loop" && !(s.kind === "def" && s.expr.op === "LOAD" && s.expr.buf === run[0]!.buf));
  };
  const result = new Map<number, string[] | null>();
  for (const { run, vtype } of vectorRuns(stores, kernel, undisturbed)) {
    const dtype = kernel.buffers[run[0]!.buf]!.dtype;
    const fieldsSet = run
      .map((lane, l) => `tg_st.${fields[l]} = ${toStorage(CUDA.operand(lane.value), dtype)};`)
      .join(" ");
    for (const lane of run) result.set(lane.position, null);
    result.set(Math.max(...run.map((lane) => lane.position)), [
      `{ ${vtype} tg_st; ${fieldsSet} *(${vtype}*)(b${run[0]!.buf} + ${cIndex(run[0]!.index)}) = tg_st; }`,
    ]);
  }
  return result;
}
