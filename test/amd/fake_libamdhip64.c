/* A stand-in for libamdhip64 and hiprtc, for testing the AMD runtime's FFI on machines without an AMD GPU: one
 * device whose "device memory" is host memory. hiprtc "compiles" a source into an ELF-tagged copy of it (version
 * 99: the runtime then checks no code object); modules must be ELF images; launches run nothing but are recorded,
 * their arguments read from the packed buffer of `extra`, and fake_* functions let a test read the record or make
 * the next launch fail. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int fail_next = 0;
static char last_name[256];
static unsigned last_grid[3], last_block[3];
static uint64_t last_params[16];
static size_t last_bytes = 0;
static int launches = 0;
static int64_t allocated = 0, limit = 1ll << 34;

void fake_fail_next_launch(int code) { fail_next = code; }
int fake_launches(void) { return launches; }
const char *fake_last_name(void) { return last_name; }
unsigned fake_last_dim(int which) { return which < 3 ? last_grid[which] : last_block[which - 3]; }
uint64_t fake_last_param(int i) { return last_params[i]; }
/* the size of the last launch's packed argument buffer */
int fake_last_arg_bytes(void) { return (int)last_bytes; }
void fake_set_limit(int64_t bytes) { limit = bytes; }

int hipInit(unsigned flags) { (void)flags; return 0; }
int hipRuntimeGetVersion(int *v) { *v = 60200000; return 0; }
int hipGetDeviceCount(int *n) { *n = 1; return 0; }
int hipSetDevice(int device) { return device == 0 ? 0 : 101; /* hipErrorInvalidDevice */ }
int hipDeviceSynchronize(void) { return 0; }
int hipDeviceCanAccessPeer(int *can, int device, int peer) { (void)device; (void)peer; *can = 0; return 0; }
int hipDeviceEnablePeerAccess(int peer, unsigned flags) { (void)peer; (void)flags; return 217; }
/* memory: a header before each block remembers its size, so that frees give the budget back */
int hipMalloc(uint64_t *pointer, size_t bytes) {
  if (allocated + (int64_t)bytes > limit) return 2; /* hipErrorOutOfMemory */
  int64_t *block = malloc(bytes + 16);
  block[0] = (int64_t)bytes;
  allocated += (int64_t)bytes;
  *pointer = (uint64_t)(uintptr_t)(block + 2);
  return 0;
}
int hipFree(uint64_t pointer) {
  int64_t *block = (int64_t *)(uintptr_t)pointer - 2;
  allocated -= block[0];
  free(block);
  return 0;
}
int hipMemGetInfo(size_t *free_bytes, size_t *total) { *free_bytes = (size_t)(limit - allocated); *total = (size_t)limit; return 0; }
int hipMemcpyHtoD(uint64_t dst, const void *src, size_t bytes) { memcpy((void *)(uintptr_t)dst, src, bytes); return 0; }
int hipMemcpyDtoH(void *dst, uint64_t src, size_t bytes) { memcpy(dst, (const void *)(uintptr_t)src, bytes); return 0; }
int hipMemcpyDtoDAsync(uint64_t dst, uint64_t src, size_t bytes, void *stream) { (void)stream; memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes); return 0; }
int hipModuleLoadData(void **module, const void *image) {
  if (memcmp(image, "\x7f" "ELF", 4) != 0) return 200; /* hipErrorInvalidImage */
  *module = (void *)0x2000;
  return 0;
}
int hipModuleGetFunction(void **function, void *module, const char *name) {
  (void)module;
  *function = strdup(name);
  return 0;
}
int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  (void)shared; (void)stream;
  if (fail_next) { int code = fail_next; fail_next = 0; return code; }
  if (params || !extra || extra[0] != (void *)1 || extra[2] != (void *)2 || extra[4] != (void *)3) return 1; /* hipErrorInvalidValue */
  last_bytes = *(size_t *)extra[3];
  memcpy(last_params, extra[1], last_bytes < sizeof last_params ? last_bytes : sizeof last_params);
  strncpy(last_name, (const char *)f, sizeof last_name - 1);
  last_grid[0] = gx; last_grid[1] = gy; last_grid[2] = gz;
  last_block[0] = bx; last_block[1] = by; last_block[2] = bz;
  launches++;
  return 0;
}
int hipEventCreateWithFlags(void **event, unsigned flags) { (void)flags; *event = (void *)0x3000; return 0; }
int hipEventRecord(void *event, void *stream) { (void)event; (void)stream; return 0; }
int hipEventSynchronize(void *event) { (void)event; return 0; }
int hipEventElapsedTime(float *ms, void *start, void *end) { (void)start; (void)end; *ms = 0.25f; return 0; }
int hipEventDestroy(void *event) { (void)event; return 0; }
int hipStreamCreate(void **stream) { *stream = (void *)0x4000; return 0; }
int hipStreamSynchronize(void *stream) { (void)stream; return 0; }
int hipStreamWaitEvent(void *stream, void *event, unsigned flags) { (void)stream; (void)event; (void)flags; return 0; }
/* no graphs here: capture is refused, as an old runtime would (the JIT then launches one by one) */
int hipStreamBeginCapture(void *stream, int mode) { (void)stream; (void)mode; return 801; /* hipErrorNotSupported */ }
const char *hipGetErrorName(int error) {
  switch (error) {
    case 1: return "hipErrorInvalidValue";
    case 2: return "hipErrorOutOfMemory";
    case 101: return "hipErrorInvalidDevice";
    case 200: return "hipErrorInvalidImage";
    case 217: return "hipErrorPeerAccessUnsupported";
    case 701: return "hipErrorLaunchOutOfResources";
    case 801: return "hipErrorNotSupported";
    default: return "hipErrorUnknown";
  }
}

/* hiprtc: a "code object" is an ELF magic and the source */
typedef struct { char *source; } Program;
int hiprtcVersion(int *major, int *minor) { *major = 99; *minor = 0; return 0; }
int hiprtcCreateProgram(void **program, const char *source, const char *name, int n, void *sources, void *names) {
  (void)name; (void)n; (void)sources; (void)names;
  Program *p = malloc(sizeof *p);
  p->source = strdup(source);
  *program = p;
  return 0;
}
int hiprtcCompileProgram(void *program, int count, const char **options) { (void)program; (void)count; (void)options; return 0; }
int hiprtcGetProgramLogSize(void *program, size_t *size) { (void)program; *size = 1; return 0; }
int hiprtcGetProgramLog(void *program, char *log) { (void)program; *log = 0; return 0; }
int hiprtcGetCodeSize(void *program, size_t *size) { *size = 4 + strlen(((Program *)program)->source) + 1; return 0; }
int hiprtcGetCode(void *program, char *code) {
  memcpy(code, "\x7f" "ELF", 4);
  strcpy(code + 4, ((Program *)program)->source);
  return 0;
}
int hiprtcDestroyProgram(void **program) {
  Program *p = *program;
  free(p->source);
  free(p);
  *program = 0;
  return 0;
}
