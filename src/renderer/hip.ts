// HIP C++ for AMD GPUs: the CUDA renderer's kernels (cuda.ts) compile as HIP with another prelude, since HIP keeps
// CUDA's kernel language (grid and block indices, __shared__, barriers, vector types, float intrinsics). What
// differs is below the language: 16-bit floats convert through clang's _Float16 (v_cvt_f16_f32 rounds to nearest
// even, as PTX's cvt.rn does) instead of PTX, warp shuffles are __shfl_xor with a width of 32 (a wave32 wave on
// RDNA; 32-lane halves of a wave64 elsewhere, so group reduces stay right on both), and RDNA3's matrix
// instructions (WMMA, 16 x 16 x 16 with float32 accumulators) replace mma.sync for 16-bit matmuls (hip_wmma.ts).
// There is no PTX: no ldmatrix, cp.async or wgmma; no asm at all.
import { GPU_HELPERS, GPU_LIMITS } from "./cuda.ts";

/** Threads that shuffle together: the renderer's warps (group reduces, WMMA's waves). */
export const WAVE = 32;

/** The vector types WMMA's operands and accumulators travel in (clang's ext_vector_type; GCC vectors in the emulator). */
const WMMA_TYPES = `typedef _Float16 tg_half16 __attribute__((ext_vector_type(16)));
typedef short tg_short16 __attribute__((ext_vector_type(16)));
typedef float tg_float8 __attribute__((ext_vector_type(8)));`;

/**
 * RDNA3's wave-wide products (gfx11), d = a * b + c over a 16 x 16 x 16 tile: lane l holds row l % 16 of A and
 * column l % 16 of B (all 16 k, lanes 16-31 repeating lanes 0-15), and accumulators v = 0..7 of D at row 2v + l / 16,
 * column l % 16. Defined only where the instructions exist: a module for an older GPU has no WMMA kernels.
 */
const WMMA_HELPERS = `#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || defined(__gfx1150__) || defined(__gfx1151__)
#define TG_HAS_WMMA 1
__device__ __forceinline__ tg_float8 tg_wmma_f16(tg_half16 a, tg_half16 b, tg_float8 c) { return __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a, b, c); }
__device__ __forceinline__ tg_float8 tg_wmma_bf16(tg_short16 a, tg_short16 b, tg_float8 c) { return __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(a, b, c); }
#endif`;

/** Helpers every HIP kernel may use: those CUDA's prelude gives, in HIP's terms. */
export const HIP_PRELUDE = `${GPU_LIMITS}/* AMD's own instructions (a CPU emulator for tests, test/cuda/emu, defines TG_EMU and its own) */
#ifndef TG_EMU
#ifndef __HIPCC_RTC__
#include <hip/hip_runtime.h>
#endif
__device__ __forceinline__ float tg_h2f(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
/* round to nearest even in hardware; NaN keeps its sign and becomes quiet, as the reference does */
__device__ __forceinline__ unsigned short tg_f2h(float f) {
  return f != f ? (unsigned short)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u) : __builtin_bit_cast(unsigned short, (_Float16)f);
}
/* shared memory sized at launch (LDS: 64 KB a workgroup on RDNA3) */
#define TG_DYNAMIC_SHARED(name) extern __shared__ __attribute__((aligned(16))) unsigned char name[]
${WMMA_TYPES}
${WMMA_HELPERS}
#endif
${GPU_HELPERS}/* shuffles within 32 lanes, for every compute type (narrow integers travel as int) */
template <typename T> __device__ __forceinline__ T tg_shfl(T v, int lane) { return (T)__shfl_xor((int)v, lane, ${WAVE}); }
template <> __device__ __forceinline__ unsigned int tg_shfl(unsigned int v, int lane) { return __shfl_xor(v, lane, ${WAVE}); }
template <> __device__ __forceinline__ long long tg_shfl(long long v, int lane) { return __shfl_xor(v, lane, ${WAVE}); }
template <> __device__ __forceinline__ float tg_shfl(float v, int lane) { return __shfl_xor(v, lane, ${WAVE}); }
template <> __device__ __forceinline__ double tg_shfl(double v, int lane) { return __shfl_xor(v, lane, ${WAVE}); }
`;
