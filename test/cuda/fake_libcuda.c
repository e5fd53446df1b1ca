/* A stand-in for libcuda, for testing the CUDA runtime's FFI on machines without a GPU: one device of
 * compute capability 9.0 whose "device memory" is host memory. Modules must be ELF images (cubins);
 * launches run nothing but are recorded, and fake_* functions let a test read the record or make the
 * next launch fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fail_next = 0;
static char last_name[256];
static unsigned last_grid[3], last_block[3];
static uint64_t last_params[16];
static int launches = 0, param_count = 0;
static int64_t allocated = 0, limit = 1ll << 34;

void fake_fail_next_launch(int code) { fail_next = code; }
int fake_launches(void) { return launches; }
const char *fake_last_name(void) { return last_name; }
unsigned fake_last_dim(int which) { return which < 3 ? last_grid[which] : last_block[which - 3]; }
uint64_t fake_last_param(int i) { return last_params[i]; }
void fake_set_limit(int64_t bytes) { limit = bytes; }
/* launches carry no parameter count: the test says how many the next ones have */
void fake_expect_params(int n) { param_count = n; }

#define FAIL_IF_ASKED() do { if (fail_next) { int code = fail_next; fail_next = 0; return code; } } while (0)

int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDriverGetVersion(int *v) { *v = 13000; return 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal != 0) return 101; *d = 0; return 0; }
int cuDeviceGetAttribute(int *v, int attribute, int device) {
  (void)device;
  *v = attribute == 75 ? 9 : attribute == 76 ? 0 : attribute == 16 ? 132 : 0;
  return 0;
}
int cuDeviceGetName(char *name, int length, int device) { (void)device; strncpy(name, "Fake GPU", (size_t)length); return 0; }
int cuDeviceCanAccessPeer(int *can, int device, int peer) { (void)device; (void)peer; *can = 0; return 0; }
int cuDevicePrimaryCtxRetain(void **context, int device) { (void)device; *context = (void *)0x1000; return 0; }
int cuCtxSetCurrent(void *context) { (void)context; return 0; }
int cuCtxSynchronize(void) { return 0; }
int cuCtxEnablePeerAccess(void *peer, unsigned flags) { (void)peer; (void)flags; return 0; }
/* memory: a header before each block remembers its size, so that frees give the budget back */
int cuMemAlloc_v2(uint64_t *pointer, size_t bytes) {
  if (allocated + (int64_t)bytes > limit) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  int64_t *block = malloc(bytes + 16);
  block[0] = (int64_t)bytes;
  allocated += (int64_t)bytes;
  *pointer = (uint64_t)(uintptr_t)(block + 2);
  return 0;
}
int cuMemFree_v2(uint64_t pointer) {
  int64_t *block = (int64_t *)(uintptr_t)pointer - 2;
  allocated -= block[0];
  free(block);
  return 0;
}
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = (size_t)(limit - allocated); *total = (size_t)limit; return 0; }
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes) { memcpy((void *)(uintptr_t)dst, src, bytes); return 0; }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes) { memcpy(dst, (const void *)(uintptr_t)src, bytes); return 0; }
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes) { memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes); return 0; }
int cuMemcpyPeer(uint64_t dst, void *dc, uint64_t src, void *sc, size_t bytes) { (void)dc; (void)sc; return cuMemcpyDtoD_v2(dst, src, bytes); }
int cuModuleLoadData(void **module, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; /* CUDA_ERROR_INVALID_IMAGE */
  *module = (void *)0x2000;
  return 0;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
  (void)module;
  char *copy = strdup(name);
  *function = copy;
  return 0;
}
int cuFuncSetAttribute(void *f, int attribute, int value) { (void)f; (void)attribute; (void)value; return 0; }
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  (void)shared; (void)stream; (void)extra;
  FAIL_IF_ASKED();
  strncpy(last_name, (const char *)f, sizeof last_name - 1);
  last_grid[0] = gx; last_grid[1] = gy; last_grid[2] = gz;
  last_block[0] = bx; last_block[1] = by; last_block[2] = bz;
  for (int i = 0; i < param_count && i < 16; i++) last_params[i] = *(uint64_t *)params[i];
  launches++;
  return 0;
}
int cuStreamCreate(void **stream, unsigned flags) { (void)flags; *stream = (void *)0x4000; return 0; }
int cuStreamSynchronize(void *stream) { (void)stream; return 0; }
/* no graphs here: capture is refused, as an old driver would (the JIT then launches one by one) */
int cuStreamBeginCapture_v2(void *stream, int mode) { (void)stream; (void)mode; return 801; /* CUDA_ERROR_NOT_SUPPORTED */ }
int cuEventCreate(void **event, unsigned flags) { (void)flags; *event = (void *)0x3000; return 0; }
int cuEventRecord(void *event, void *stream) { (void)event; (void)stream; return 0; }
int cuEventSynchronize(void *event) { (void)event; return 0; }
int cuEventDestroy_v2(void *event) { (void)event; return 0; }
int cuEventElapsedTime(float *ms, void *start, void *end) { (void)start; (void)end; *ms = 0.25f; return 0; }
int cuGetErrorName(int error, const char **name) {
  switch (error) {
    case 1: *name = "CUDA_ERROR_INVALID_VALUE"; return 0;
    case 2: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return 0;
    case 200: *name = "CUDA_ERROR_INVALID_IMAGE"; return 0;
    case 701: *name = "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"; return 0;
    default: return 1;
  }
}
