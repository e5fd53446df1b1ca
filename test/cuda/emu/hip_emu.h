/* What HIP kernels use beyond CUDA's (hip.ts's prelude outside TG_EMU), for running them on the CPU emulator:
 * included at the end of cuda_emu.h's module part, so the scheduler's warps (32 lanes) are RDNA3's wave32 waves.
 * WMMA is emulated from AMD's published register layout for wave32: lane l holds row l % 16 of A and column
 * l % 16 of B (16 k each, lanes 16-31 repeating lanes 0-15), and accumulator v of D at row 2v + l / 16, column
 * l % 16. A wave whose two halves hold different A or B stops the emulator: the hardware would compute with one
 * half's values and a kernel relying on the other would be wrong on a GPU. */
#pragma once

/* GCC's vectors where the GPU compiler takes clang's ext_vector_type: subscripts and copies behave the same */
typedef _Float16 tg_half16 __attribute__((vector_size(32)));
typedef short tg_short16 __attribute__((vector_size(32)));
typedef float tg_float8 __attribute__((vector_size(32)));
#define TG_HAS_WMMA 1

/* a shuffle among `width` lanes (a power of two up to 32): lane ^ mask within the caller's segment */
template <typename T> static inline T __shfl_xor(T v, int mask, int width) {
  static_assert(sizeof(T) <= 8, "shuffled values are at most 8 bytes");
  uint32_t words[2] = {0, 0};
  memcpy(words, &v, sizeof v);
  const uint32_t *table = tg_emu_publish(words, 2);
  const unsigned lane = (*tg_emu.current)->lane;
  const unsigned from = (lane & ~(unsigned)(width - 1)) | ((lane ^ mask) & (width - 1));
  T r;
  memcpy(&r, table + (from & 31) * 32, sizeof r);
  tg_emu.sync_warp(); /* nobody publishes again before everyone has read */
  return r;
}

static inline tg_float8 tg_emu_wmma(const void *a, const void *b, tg_float8 c, float (*widen)(unsigned short)) {
  uint32_t words[16];
  memcpy(words, a, 32);
  memcpy(words + 8, b, 32);
  const uint32_t *table = tg_emu_publish(words, 16);
  const unsigned lane = (*tg_emu.current)->lane;
  if (memcmp(table + (lane & 15) * 32, table + ((lane & 15) + 16) * 32, 64) != 0) {
    fprintf(stderr, "tg_emu: WMMA with lanes %u and %u holding different A or B (block %u,%u,%u thread %u)\n", lane & 15, (lane & 15) + 16, blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x);
    abort();
  }
  /* the 16-bit value k of lane l's operand (word 0: A, word 8: B) */
  auto at = [&](unsigned l, int word, int k) {
    unsigned short h;
    memcpy(&h, (const unsigned char *)(table + l * 32 + word) + k * 2, 2);
    return widen(h);
  };
  tg_float8 d;
  for (int v = 0; v < 8; v++) {
    const unsigned row = 2 * v + lane / 16, col = lane % 16;
    float sum = 0;
    for (int k = 0; k < 16; k++) sum += at(row, 0, k) * at(col, 8, k);
    d[v] = c[v] + sum;
  }
  tg_emu.sync_warp();
  return d;
}
static inline tg_float8 tg_wmma_f16(tg_half16 a, tg_half16 b, tg_float8 c) { return tg_emu_wmma(&a, &b, c, tg_h2f); }
static inline tg_float8 tg_wmma_bf16(tg_short16 a, tg_short16 b, tg_float8 c) { return tg_emu_wmma(&a, &b, c, tg_emu_b2f); }
