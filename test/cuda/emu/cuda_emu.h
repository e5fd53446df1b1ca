/* Host definitions that let tsgrad's CUDA C run on a CPU, for testing kernels without a GPU. A module's
 * source (CUDA_PRELUDE + kernels) is compiled as C++ with this header forced in (-include); libcuda_emu.cc
 * runs each block's threads as fibers and binds the state below. Shared memory is static storage (blocks
 * run one after another); barriers, warp shuffles and warp-wide tensor-core ops go through the scheduler.
 * Only what tsgrad's renderer emits is here. */
#pragma once
#define TG_EMU 1
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <utility>

struct uint3 { unsigned x, y, z; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
/* the vector types of vector loads and stores, aligned as CUDA aligns them */
#define TG_EMU_VECTOR2(name, T, align) struct __attribute__((aligned(align))) name { T x, y; };
#define TG_EMU_VECTOR4(name, T, align) struct __attribute__((aligned(align))) name { T x, y, z, w; };
TG_EMU_VECTOR2(float2, float, 8) TG_EMU_VECTOR4(float4, float, 16)
TG_EMU_VECTOR2(int2, int, 8) TG_EMU_VECTOR4(int4, int, 16)
TG_EMU_VECTOR2(uint2, unsigned, 8)
TG_EMU_VECTOR2(ushort2, unsigned short, 4) TG_EMU_VECTOR4(ushort4, unsigned short, 8)
TG_EMU_VECTOR2(uchar2, unsigned char, 2) TG_EMU_VECTOR4(uchar4, unsigned char, 4)

/** One emulated thread as the scheduler sees it. */
struct tg_emu_thread {
  uint3 threadIdx, blockIdx, blockDim, gridDim;
  /** Its warp's exchange area: 32 lanes x 16 words. */
  uint64_t *warp;
  unsigned lane;
  /** The launch's dynamic shared memory (one buffer: blocks run one after another). */
  unsigned char *shared;
  /** Different for every block run: per-thread state of an earlier block is stale. */
  unsigned long serial;
  /** The dynamic shared memory's size (wgmma descriptors are checked against it). */
  unsigned shared_bytes;
};
/** What the scheduler lends a module: the running thread and the barriers. */
struct tg_emu_api {
  tg_emu_thread **current;
  void (*sync_block)(void);
  void (*sync_warp)(void);
};
#ifndef TG_EMU_LIBRARY /* the rest is for modules; the emulator library needs only the types above */
static tg_emu_api tg_emu;
extern "C" void tg_emu_bind(const tg_emu_api *api) { tg_emu = *api; }

#define threadIdx ((*tg_emu.current)->threadIdx)
#define blockIdx ((*tg_emu.current)->blockIdx)
#define blockDim ((*tg_emu.current)->blockDim)
#define gridDim ((*tg_emu.current)->gridDim)
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define TG_DYNAMIC_SHARED(name) unsigned char *name = (*tg_emu.current)->shared
static inline void __syncthreads(void) { tg_emu.sync_block(); }
/* one OS thread runs every block, one after another: plain memory operations are atomic and ordered */
static inline void __threadfence(void) {}
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned old = *p; *p = old + v; return old; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
template <typename T> static inline T min(T a, T b) { return a < b ? a : b; }

template <typename O, typename I> static inline O tg_emu_bits(I x) { O o; memcpy(&o, &x, sizeof o); return o; }
static inline float __int_as_float(int x) { return tg_emu_bits<float>(x); }
static inline float __uint_as_float(unsigned x) { return tg_emu_bits<float>(x); }
static inline unsigned __float_as_uint(float x) { return tg_emu_bits<unsigned>(x); }
static inline double __longlong_as_double(long long x) { return tg_emu_bits<double>(x); }

/** Every lane publishes `words` 32-bit values; returns the warp's table (lane-major, 32 words a lane). */
static inline const uint32_t *tg_emu_publish(const uint32_t *words, int n) {
  tg_emu_thread *t = *tg_emu.current;
  memcpy((uint32_t *)t->warp + t->lane * 32, words, n * 4);
  tg_emu.sync_warp();
  return (const uint32_t *)t->warp;
}

template <typename T> static inline T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8, "shuffled values are at most 8 bytes");
  uint32_t words[2] = {0, 0};
  memcpy(words, &v, sizeof v);
  const uint32_t *table = tg_emu_publish(words, 2);
  T r;
  memcpy(&r, table + (((*tg_emu.current)->lane ^ mask) & 31) * 32, sizeof r);
  tg_emu.sync_warp(); /* nobody publishes again before everyone has read */
  return r;
}

/* 16-bit floats: the host's _Float16 rounds to nearest even as cvt.rn.f16.f32 does */
static inline float tg_h2f(unsigned short h) { return (float)tg_emu_bits<_Float16>(h); }
static inline unsigned short tg_f2h(float f) {
  if (f != f) return (unsigned short)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u);
  return tg_emu_bits<unsigned short>((_Float16)f);
}

/**
 * mma.sync m16n8k16 row.col with float32 accumulation, as one warp: lane (g = lane / 4, t = lane % 4) holds
 * A rows g and g + 8 at k 2t, 2t + 1 (a0, a1) and 2t + 8, 2t + 9 (a2, a3), B column g at those k (b0, b1),
 * and C/D rows g, g + 8 at columns 2t, 2t + 1. `widen` reads one 16-bit input.
 */
static inline void tg_emu_mma(float *c, const unsigned *a, const unsigned *b, float (*widen)(unsigned short)) {
  uint32_t words[6] = {a[0], a[1], a[2], a[3], b[0], b[1]};
  const uint32_t *table = tg_emu_publish(words, 6);
  const auto half = (const unsigned short *)table;
  /* A[row][k], B[k][col] from the lanes that hold them (each 32-bit word: lower k first) */
  auto A = [&](int row, int k) { int lane = (row % 8) * 4 + (k % 8) / 2; int reg = (row >= 8) + 2 * (k >= 8); return widen(half[(lane * 32 + reg) * 2 + k % 2]); };
  auto B = [&](int k, int col) { int lane = col * 4 + (k % 8) / 2; int reg = 4 + (k >= 8); return widen(half[(lane * 32 + reg) * 2 + k % 2]); };
  const unsigned lane = (*tg_emu.current)->lane, g = lane / 4, t = lane % 4;
  float d[4];
  for (int e = 0; e < 4; e++) {
    int row = g + (e >> 1) * 8, col = t * 2 + (e & 1);
    float sum = 0;
    for (int k = 0; k < 16; k++) sum += A(row, k) * B(k, col);
    d[e] = c[e] + sum;
  }
  tg_emu.sync_warp();
  memcpy(c, d, sizeof d);
}
static inline float tg_emu_b2f(unsigned short h) { return __uint_as_float((unsigned)h << 16); }
static inline void tg_mma_f16(float *c, const unsigned *a, const unsigned *b) { tg_emu_mma(c, a, b, tg_h2f); }
static inline void tg_mma_bf16(float *c, const unsigned *a, const unsigned *b) { tg_emu_mma(c, a, b, tg_emu_b2f); }

/* ldmatrix x4: lane l points at row l % 8 of matrix l / 8; each lane receives, from every matrix, the two
 * halves at row l / 4, columns 2 (l % 4) and + 1 (transposed: the matrix's transpose) */
static inline void tg_emu_ldsm(unsigned *r, const void *row, bool trans) {
  uint32_t words[2];
  memcpy(words, &row, sizeof row);
  const uint32_t *table = tg_emu_publish(words, 2);
  auto rowOf = [&](int lane) { const unsigned short *p; memcpy(&p, table + lane * 32, sizeof p); return p; };
  const unsigned l = (*tg_emu.current)->lane;
  for (int m = 0; m < 4; m++) {
    unsigned short lo, hi;
    if (!trans) {
      const unsigned short *p = rowOf(m * 8 + l / 4);
      lo = p[2 * (l % 4)], hi = p[2 * (l % 4) + 1];
    } else {
      lo = rowOf(m * 8 + 2 * (l % 4))[l / 4], hi = rowOf(m * 8 + 2 * (l % 4) + 1)[l / 4];
    }
    r[m] = lo | (unsigned)hi << 16;
  }
  tg_emu.sync_warp();
}
static inline void tg_ldsm_x4(unsigned *r, const void *row) { tg_emu_ldsm(r, row, false); }
static inline void tg_ldsm_x4_trans(unsigned *r, const void *row) { tg_emu_ldsm(r, row, true); }
/* Asynchronous copies land as late as a GPU may let them: at the wait that covers them. Until then the
 * destination holds NaNs (0xff bytes), so that a kernel reading a stage before its wait (no wait, or a
 * wait that leaves the group pending), or filling a stage that other threads still read (no barrier
 * between), computes NaNs instead of passing by luck. */
struct tg_emu_copy { void *dst; const void *src; int bytes; unsigned group; };
struct tg_emu_copies { unsigned long serial; unsigned committed; int count; tg_emu_copy pending[64]; };
static tg_emu_copies tg_emu_async[1024];
static inline tg_emu_copies &tg_emu_my_copies() {
  const unsigned long serial = (*tg_emu.current)->serial;
  tg_emu_copies &q = tg_emu_async[threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)];
  if (q.serial != serial) q = tg_emu_copies{serial, 0, 0, {}};
  return q;
}
static inline void tg_cp_async16(void *dst, const void *src, int bytes) {
  tg_emu_copies &q = tg_emu_my_copies();
  if (q.count == 64) abort(); /* more copies in flight than any tsgrad kernel issues */
  q.pending[q.count++] = tg_emu_copy{dst, src, bytes, q.committed};
  memset(dst, 0xff, 16);
}
static inline void tg_cp_async_commit() { tg_emu_my_copies().committed++; }
/* every committed group but the newest N has landed (in this thread) */
template <int N> static inline void tg_cp_async_wait() {
  tg_emu_copies &q = tg_emu_my_copies();
  int kept = 0;
  for (int i = 0; i < q.count; i++) {
    tg_emu_copy c = q.pending[i];
    if (c.group + N < q.committed) {
      memset(c.dst, 0, 16);
      memcpy(c.dst, c.src, c.bytes);
    } else {
      q.pending[kept++] = c;
    }
  }
  q.count = kept;
}

/* Hopper's warpgroup products (wgmma.mma_async, no swizzle). A descriptor is a shared-memory offset, a
 * leading byte offset (between 8 x 8 core matrices along k) and a stride byte offset (between core matrices
 * along the rows), each over 16. A product is computed when issued and again when the wait that covers it
 * runs (the latest moment a GPU may read its operands): the two must agree, else the kernel changed a tile
 * while the tensor cores could still read it, and the emulator stops. Only then are the accumulators added
 * to: reading them before the wait sees the old values, as on a GPU. Fences are no-ops here (one thread of
 * the host runs everything, in order). Thread (warp w of its warpgroup, lane g * 4 + t) holds, for each 8
 * columns j, rows 16 w + g (+8) at columns 8 j + 2 t (+1): mma.sync's accumulator layout, repeated. */
static inline unsigned long long tg_wgmma_desc(const void *p, unsigned lbo, unsigned sbo) {
  const tg_emu_thread *t = *tg_emu.current;
  const size_t at = (const unsigned char *)p - t->shared;
  if (at >= t->shared_bytes || at % 16 || lbo % 16 || sbo % 16 || lbo >= (1u << 18) || sbo >= (1u << 18)) abort(); /* not a descriptor a GPU could take */
  return (unsigned long long)(at >> 4) | (unsigned long long)(lbo >> 4) << 16 | (unsigned long long)(sbo >> 4) << 32;
}
struct tg_emu_wgmma_op { float *d; int n; unsigned long long a, b; int ta, tb; float (*widen)(unsigned short); unsigned group; float product[128]; };
struct tg_emu_wgmmas { unsigned long serial; unsigned committed; int count; tg_emu_wgmma_op pending[16]; };
static tg_emu_wgmmas tg_emu_wg[1024];
static inline tg_emu_wgmmas &tg_emu_my_wgmmas() {
  const unsigned long serial = (*tg_emu.current)->serial;
  tg_emu_wgmmas &q = tg_emu_wg[threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)];
  if (q.serial != serial) { q.serial = serial; q.committed = 0; q.count = 0; }
  return q;
}
/** This thread's share of A (64 x 16) * B (16 x n) as the descriptors find them now. */
static inline void tg_emu_wgmma_product(const tg_emu_wgmma_op &op, float *out) {
  const tg_emu_thread *t = *tg_emu.current;
  auto at = [&](unsigned long long desc, int trans, int row, int k) {
    const size_t start = (desc & 0x3fff) << 4, lbo = ((desc >> 16) & 0x3fff) << 4, sbo = ((desc >> 32) & 0x3fff) << 4;
    const size_t offset = trans ? start + (row % 8) * 2 + (row / 8) * sbo + (k % 8) * 16 + (k / 8) * lbo
                                : start + (row % 8) * 16 + (row / 8) * sbo + (k % 8) * 2 + (k / 8) * lbo;
    if (offset + 2 > t->shared_bytes) abort(); /* a descriptor reaching past the block's shared memory */
    unsigned short h;
    memcpy(&h, t->shared + offset, 2);
    return op.widen(h);
  };
  const unsigned w = (threadIdx.x >> 5) & 3, g = (threadIdx.x & 31) >> 2, l = threadIdx.x & 3;
  for (int j = 0; j < op.n / 8; j++)
    for (int e = 0; e < 4; e++) {
      const int row = 16 * w + g + 8 * (e >> 1), col = 8 * j + 2 * l + (e & 1);
      float sum = 0;
      for (int k = 0; k < 16; k++) sum += at(op.a, op.ta, row, k) * at(op.b, op.tb, col, k);
      out[4 * j + e] = sum;
    }
}
static inline void tg_emu_wgmma(float *d, int n, unsigned long long a, unsigned long long b, int ta, int tb, float (*widen)(unsigned short)) {
  tg_emu_wgmmas &q = tg_emu_my_wgmmas();
  if (q.count == 16 || n > 256) abort(); /* more products in flight than any tsgrad kernel issues */
  tg_emu_wgmma_op &op = q.pending[q.count++];
  op = tg_emu_wgmma_op{d, n, a, b, ta, tb, widen, q.committed, {}};
  tg_emu_wgmma_product(op, op.product);
}
static inline void tg_wgmma_fence() {}
static inline void tg_fence_proxy_async() {}
static inline void tg_fence_reg(float &) {}
static inline void tg_wgmma_commit() { tg_emu_my_wgmmas().committed++; }
/* every committed group of products but the newest N has been added to its accumulators */
template <int N> static inline void tg_wgmma_wait() {
  tg_emu_wgmmas &q = tg_emu_my_wgmmas();
  int kept = 0;
  for (int i = 0; i < q.count; i++) {
    tg_emu_wgmma_op &op = q.pending[i];
    if (op.group + N < q.committed) {
      float again[128];
      tg_emu_wgmma_product(op, again);
      if (memcmp(again, op.product, sizeof(float) * (op.n / 2)) != 0) {
        fprintf(stderr, "tg_emu: a wgmma's shared-memory operands changed before the wait that covers it (block %u,%u,%u thread %u)\n", blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
        abort();
      }
      for (int e = 0; e < op.n / 2; e++) op.d[e] += op.product[e];
    } else {
      if (kept != i) q.pending[kept] = op;
      kept++;
    }
  }
  q.count = kept;
}
#define TG_EMU_WGMMA(n) \
  template <int TA, int TB> static inline void tg_wgmma_f16_n##n(float *d, unsigned long long a, unsigned long long b) { tg_emu_wgmma(d, n, a, b, TA, TB, tg_h2f); } \
  template <int TA, int TB> static inline void tg_wgmma_bf16_n##n(float *d, unsigned long long a, unsigned long long b) { tg_emu_wgmma(d, n, a, b, TA, TB, tg_emu_b2f); }
TG_EMU_WGMMA(64) TG_EMU_WGMMA(128) TG_EMU_WGMMA(256)

/* calling a kernel with the parameter array cuLaunchKernel takes (pointers to each argument) */
template <typename... A, size_t... I> static void tg_emu_invoke(void (*f)(A...), void **p, std::index_sequence<I...>) { f(*(A *)p[I]...); }
template <typename... A> static void tg_emu_invoke(void (*f)(A...), void **p) { tg_emu_invoke(f, p, std::index_sequence_for<A...>{}); }
template <typename... A> static int tg_emu_count(void (*)(A...)) { static_assert(((sizeof(A) == 8) && ...), "kernel parameters are pointers"); return (int)sizeof...(A); }
/* what HIP kernels use beyond CUDA's */
#include "hip_emu.h"
#endif
