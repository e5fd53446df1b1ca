/* A CUDA "GPU" that runs on the CPU, for testing tsgrad's CUDA backend without one: the subset of the
 * driver API (libcuda) and of NVRTC that src/runtime/cuda*.ts calls, in one library that both
 * TSGRAD_LIBCUDA and TSGRAD_LIBNVRTC point at.
 *
 * - "Compiling" a program compiles its CUDA C as host C++ with g++ and cuda_emu.h forced in; the "cubin"
 *   is the source itself, and loading it builds (or finds) the shared object and dlopens it.
 * - A launch runs the blocks one after another; a block's threads are fibers taken in turn (ucontext
 *   starts each on a stack of its own, _setjmp/_longjmp switch between them: no signal-mask syscalls),
 *   each running until it waits at a barrier (__syncthreads, or a warp-wide shuffle or mma) or returns.
 *   A barrier opens when every thread of the block (warp) that has not returned has reached it.
 * - Device memory is host memory; copies are memcpy; events read the host clock. Fresh device memory and
 *   dynamic shared memory hold 0xa5 / 0xff bytes, and cp.async copies land only at the wait that covers
 *   them (NaNs before), so that kernels reading what they never wrote, or too early, fail here too.
 * - The device reports an H100's attributes (sm_90, 132 multiprocessors, 228 KB shared memory each).
 *
 * Environment: TG_EMU_CXX (default g++), TG_EMU_CACHE (a folder where built modules are kept and shared
 * between processes; default: a temporary folder removed at exit). The header's path is compiled in. */
#include <dlfcn.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>
#include <map>
#include <string>
#include <vector>
#define TG_EMU_LIBRARY
#include "cuda_emu.h"

#ifndef TG_EMU_HEADER
#error "build with -DTG_EMU_HEADER=\"/path/to/cuda_emu.h\""
#endif

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, NOT_FOUND = 500, LAUNCH_FAILED = 719 };
static const char MAGIC[] = "TGEMU1\n";

/* ---------- modules: CUDA C -> host shared object ---------- */

static std::string work_dir() {
  static std::string dir;
  if (!dir.empty()) return dir;
  const char *shared = getenv("TG_EMU_CACHE");
  if (shared && *shared) {
    mkdir(shared, 0755); /* one level, as the tests ask for it; an existing folder is fine */
    return dir = shared;
  }
  char templ[] = "/tmp/tsgrad-cuda-emu-XXXXXX";
  if (!mkdtemp(templ)) return dir = "/tmp";
  dir = templ;
  atexit([] { nftw(dir.c_str(), [](const char *p, const struct stat *, int, struct FTW *) { return remove(p); }, 8, FTW_DEPTH | FTW_PHYS); });
  return dir;
}

static uint64_t fnv1a(const std::string &s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

/** A __global__ function of a source: its name, and whether its threads ever wait for each other. */
struct KernelInfo {
  std::string name;
  bool waits;
};

/** The source's __global__ functions. A kernel whose text calls no barrier, shuffle, ldmatrix or mma runs its threads one after another, without fibers. */
static std::vector<KernelInfo> kernels_of(const std::string &src) {
  std::vector<KernelInfo> kernels;
  for (size_t at = src.find("__global__"); at != std::string::npos; at = src.find("__global__", at + 1)) {
    size_t p = src.find("void", at) + 4;
    while (isspace((unsigned char)src[p])) p++;
    if (src.compare(p, 17, "__launch_bounds__") == 0) p = src.find(')', p) + 1;
    while (isspace((unsigned char)src[p])) p++;
    size_t end = p;
    while (isalnum((unsigned char)src[end]) || src[end] == '_') end++;
    size_t next = src.find("__global__", end);
    std::string body = src.substr(end, next == std::string::npos ? std::string::npos : next - end);
    bool waits = false;
    for (const char *call : {"__syncthreads", "shfl", "tg_mma", "tg_ldsm", "tg_wgmma"}) waits = waits || body.find(call) != std::string::npos;
    kernels.push_back({src.substr(p, end - p), waits});
  }
  return kernels;
}

/** The header's text: modules built against another version of it are not reused. */
static const std::string &header_text() {
  static std::string text;
  if (text.empty()) {
    if (FILE *h = fopen(TG_EMU_HEADER, "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, h)) > 0) text.append(buf, n);
      fclose(h);
    }
  }
  return text;
}

/** Builds `src` into a shared object (once per source and header); its path, or "" with the compiler's messages in `log`. */
static std::string build(const std::string &src, std::string &log) {
  char stem[64];
  snprintf(stem, sizeof stem, "%s/m%016llx", work_dir().c_str(), (unsigned long long)fnv1a(header_text() + src));
  std::string so = std::string(stem) + ".so";
  if (access(so.c_str(), R_OK) == 0) return so;
  std::string full = src + "\n";
  for (const KernelInfo &k : kernels_of(src)) {
    full += "extern \"C\" void tg_emu_call_" + k.name + "(void **p) { tg_emu_invoke(" + k.name + ", p); }\n";
    full += "extern \"C\" int tg_emu_params_" + k.name + "(void) { return tg_emu_count(" + k.name + "); }\n";
    full += "extern \"C\" int tg_emu_waits_" + k.name + "(void) { return " + (k.waits ? "1" : "0") + "; }\n";
  }
  char tmp[96];
  snprintf(tmp, sizeof tmp, "%s.%d", stem, (int)getpid());
  std::string cc = std::string(tmp) + ".cc", out = std::string(tmp) + ".so", err = std::string(tmp) + ".err";
  FILE *f = fopen(cc.c_str(), "w");
  if (!f) { log = "cannot write " + cc; return ""; }
  fwrite(full.data(), 1, full.size(), f);
  fclose(f);
  const char *cxx = getenv("TG_EMU_CXX");
  std::string cmd = std::string(cxx && *cxx ? cxx : "g++") + " -std=c++17 -O1 -shared -fPIC -ffp-contract=off -fno-strict-aliasing -w -include " TG_EMU_HEADER " -o " + out + " " + cc + " 2> " + err;
  int status = system(cmd.c_str());
  if (status != 0) {
    log.clear();
    if (FILE *e = fopen(err.c_str(), "r")) {
      char buf[4096];
      size_t n;
      while ((n = fread(buf, 1, sizeof buf, e)) > 0) log.append(buf, n);
      fclose(e);
    }
    if (log.empty()) log = "the host compiler failed: " + cmd;
  } else {
    rename(out.c_str(), so.c_str()); /* atomic: another process may build the same module */
  }
  remove(cc.c_str());
  remove(err.c_str());
  remove(out.c_str());
  return status == 0 ? so : "";
}

/* ---------- the scheduler: one block's threads as fibers ---------- */

namespace {
struct Fiber {
  ucontext_t ctx; /* where it starts */
  jmp_buf resume; /* where it waits */
  std::vector<char> stack;
  tg_emu_thread t;
  bool started, done;
};
struct Barrier {
  int live = 0, arrived = 0;
  unsigned gen = 0;
};
struct Warp {
  Barrier barrier;
  uint64_t slots[32 * 16];
};
struct Function {
  void (*call)(void **);
  int params; /* how many: a captured launch keeps their values (all 8-byte pointers here) */
  bool waits; /* threads wait for each other: they run as fibers */
  unsigned max_dynamic_shared = 48 << 10; /* as on a GPU: more only after cuFuncSetAttribute */
};
/** A launch recorded by stream capture: its parameters' values as they were then. */
struct Launch {
  Function *fn;
  unsigned grid[3], block[3], shared;
  std::vector<uint64_t> values;
};
struct Stream {
  int device = 0; /* the device whose context was current when it was made */
  bool capturing = false;
  std::vector<Launch> recorded;
};
struct Graph {
  int device = 0;
  std::vector<Launch> launches;
};

/* Which device each allocation belongs to, to count launches that read another GPU's memory (legal with
   peer access, but every such read crosses the interconnect: a kernel run on the wrong GPU) */
int current_device = 0;
std::map<uint64_t, std::pair<uint64_t, int>> allocations; /* start -> (end, device) */
int foreign_launches = 0;
void check_owner(int device, const std::vector<uint64_t> &values) {
  for (uint64_t v : values) {
    auto it = allocations.upper_bound(v);
    if (it == allocations.begin()) continue;
    --it;
    if (v < it->second.first && it->second.second != device) {
      foreign_launches++;
      return;
    }
  }
}

std::vector<Fiber> fibers;
std::vector<Warp> warps;
Barrier block_barrier;
ucontext_t scheduler;
jmp_buf scheduler_jump;
Fiber *running;
tg_emu_thread *current;
void (*launch_call)(void **);
void **launch_params;
/** Bumped whenever a thread arrives at a barrier or returns: a round without it is a deadlock. */
unsigned long progress;
/** The running launch's dynamic shared memory, and a number for each block run. */
std::vector<unsigned char> dynamic_shared;
unsigned long block_serial;

void wait_at(Barrier &b) {
  progress++;
  unsigned gen = b.gen;
  if (++b.arrived == b.live) {
    b.arrived = 0;
    b.gen++;
    return;
  }
  while (gen == b.gen)
    if (!_setjmp(running->resume)) _longjmp(scheduler_jump, 1);
}
void sync_block() { wait_at(block_barrier); }
void sync_warp() { wait_at(warps[(running - fibers.data()) / 32].barrier); }

/** A returned thread no longer holds its barriers back. */
void leave(Barrier &b) {
  b.live--;
  if (b.arrived > 0 && b.arrived == b.live) {
    b.arrived = 0;
    b.gen++;
  }
}

void fiber_main() {
  launch_call(launch_params);
  running->done = true;
  _longjmp(scheduler_jump, 1);
}

const tg_emu_api api = {&current, sync_block, sync_warp};

/** Runs one block; false on a deadlock (threads waiting at a barrier the others never reach). */
bool run_block(uint3 block, uint3 grid, uint3 dim) {
  int n = dim.x * dim.y * dim.z, nwarps = (n + 31) / 32;
  block_serial++;
  if ((int)fibers.size() < n) fibers.resize(n);
  warps.resize(nwarps);
  block_barrier = Barrier{n, 0, 0};
  for (int w = 0; w < nwarps; w++) warps[w].barrier = Barrier{n - w * 32 < 32 ? n - w * 32 : 32, 0, 0};
  for (int i = 0; i < n; i++) {
    Fiber &f = fibers[i];
    if (f.stack.empty()) f.stack.resize(256 << 10);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, fiber_main, 0);
    f.t = tg_emu_thread{{(unsigned)(i % dim.x), (unsigned)(i / dim.x % dim.y), (unsigned)(i / (dim.x * dim.y))}, block, dim, grid, warps[i / 32].slots, (unsigned)(i % 32), dynamic_shared.data(), block_serial, (unsigned)dynamic_shared.size()};
    f.started = f.done = false;
  }
  int alive = n;
  while (alive > 0) {
    unsigned long before = progress;
    for (int i = 0; i < n; i++) {
      Fiber &f = fibers[i];
      if (f.done) continue;
      running = &f;
      current = &f.t;
      if (!_setjmp(scheduler_jump)) {
        if (!f.started) {
          f.started = true;
          swapcontext(&scheduler, &f.ctx);
        } else {
          _longjmp(f.resume, 1);
        }
      }
      if (f.done) {
        alive--;
        progress++;
        leave(block_barrier);
        leave(warps[i / 32].barrier);
      }
    }
    if (progress == before && alive > 0) return false;
  }
  return true;
}
}  // namespace

/* ---------- the driver API ---------- */

extern "C" {
int cuInit(unsigned) { return OK; }
int cuDriverGetVersion(int *v) { *v = 13000; return OK; }
/* TG_EMU_DEVICES GPUs (default 1), all in host memory: peer access between any two, peer copies are memcpys */
static int device_count(void) {
  const char *n = getenv("TG_EMU_DEVICES");
  return n && atoi(n) > 0 ? atoi(n) : 1;
}
int cuDeviceGetCount(int *n) { *n = device_count(); return OK; }
int cuDeviceGet(int *d, int ordinal) { if (ordinal < 0 || ordinal >= device_count()) return 101; *d = ordinal; return OK; }
int cuDeviceGetAttribute(int *v, int attribute, int) {
  /* an H100's: sm_90, 132 multiprocessors, 228 KB of shared memory each */
  *v = attribute == 75 ? 9 : attribute == 76 ? 0 : attribute == 16 ? 132 : attribute == 81 ? 233472 : 0;
  return OK;
}
int cuDeviceGetName(char *name, int length, int) { strncpy(name, "tsgrad CPU emulator", (size_t)length); return OK; }
int peer_copies = 0; /* cuMemcpyPeer calls, for tests (tg_emu_peer_copies) */
int cuDeviceCanAccessPeer(int *can, int device, int peer) { *can = device != peer; return OK; }
int cuDevicePrimaryCtxRetain(void **context, int device) { *context = (void *)(uintptr_t)(0x1000 + device); return OK; }
int cuCtxSetCurrent(void *context) { current_device = (int)((uintptr_t)context - 0x1000); return OK; }
int cuCtxSynchronize(void) { return OK; }
int cuCtxEnablePeerAccess(void *, unsigned) { return OK; }
int cuMemAlloc_v2(uint64_t *pointer, size_t bytes) {
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return OUT_OF_MEMORY;
  memset(p, 0xA5, bytes); /* like fresh device memory: not zero, so kernels that rely on zeros fail here too */
  *pointer = (uint64_t)(uintptr_t)p;
  allocations[*pointer] = {*pointer + (bytes ? bytes : 1), current_device};
  return OK;
}
int cuMemFree_v2(uint64_t pointer) { allocations.erase(pointer); free((void *)(uintptr_t)pointer); return OK; }
/* for tests: launches whose pointer arguments reached another device's memory */
int tg_emu_foreign_launches(void) { return foreign_launches; }
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = *total = (size_t)1 << 34; return OK; }
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes) { memcpy((void *)(uintptr_t)dst, src, bytes); return OK; }
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes) { memcpy(dst, (const void *)(uintptr_t)src, bytes); return OK; }
int cuMemcpyDtoD_v2(uint64_t dst, uint64_t src, size_t bytes) { memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes); return OK; }
int cuMemcpyPeer(uint64_t dst, void *, uint64_t src, void *, size_t bytes) { peer_copies++; return cuMemcpyDtoD_v2(dst, src, bytes); }
int tg_emu_peer_copies(void) { return peer_copies; }

int cuModuleLoadData(void **module, const void *image) {
  const char *text = (const char *)image;
  if (strncmp(text, MAGIC, sizeof MAGIC - 1) != 0) return INVALID_IMAGE;
  std::string log, so = build(text + sizeof MAGIC - 1, log);
  if (so.empty()) { fprintf(stderr, "tsgrad CUDA emulator: %s\n", log.c_str()); return INVALID_IMAGE; }
  void *handle = dlopen(so.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) { fprintf(stderr, "tsgrad CUDA emulator: %s\n", dlerror()); return INVALID_IMAGE; }
  ((void (*)(const tg_emu_api *))dlsym(handle, "tg_emu_bind"))(&api);
  *module = handle;
  return OK;
}
int cuModuleGetFunction(void **function, void *module, const char *name) {
  void *call = dlsym(module, ("tg_emu_call_" + std::string(name)).c_str());
  void *count = dlsym(module, ("tg_emu_params_" + std::string(name)).c_str());
  void *waits = dlsym(module, ("tg_emu_waits_" + std::string(name)).c_str());
  if (!call || !count || !waits) return NOT_FOUND;
  *function = new Function{(void (*)(void **))call, ((int (*)(void))count)(), ((int (*)(void))waits)() != 0};
  return OK;
}
/* CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (8), up to an H100's 227 KB */
int cuFuncSetAttribute(void *f, int attribute, int value) {
  if (attribute != 8 || value < 0 || value > 227 << 10) return INVALID_VALUE;
  ((Function *)f)->max_dynamic_shared = (unsigned)value;
  return OK;
}
int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void *stream, void **params, void **) {
  if (shared > ((Function *)f)->max_dynamic_shared || bx * by * bz == 0 || bx * by * bz > 1024 || gx * gy * gz == 0) return INVALID_VALUE;
  {
    std::vector<uint64_t> values;
    for (int i = 0; i < ((Function *)f)->params; i++) values.push_back(*(uint64_t *)params[i]);
    if (stream && ((Stream *)stream)->capturing) {
      ((Stream *)stream)->recorded.push_back(Launch{(Function *)f, {gx, gy, gz}, {bx, by, bz}, shared, values});
      return OK;
    }
    /* a graph's launches are checked when it is launched (stream null here), on its stream's device */
    if (stream) check_owner(((Stream *)stream)->device, values);
  }
  launch_call = ((Function *)f)->call;
  launch_params = params;
  /* uninitialised, as on a GPU: NaN bytes, so that reading before writing shows */
  dynamic_shared.assign(shared, 0xff);
  if (!((Function *)f)->waits) {
    /* no thread waits for another: each runs to its end in turn, on this stack */
    static tg_emu_thread t;
    current = &t;
    for (unsigned z = 0; z < gz; z++)
      for (unsigned y = 0; y < gy; y++)
        for (unsigned x = 0; x < gx; x++)
          for (unsigned i = 0; i < bx * by * bz; i++) {
            t = tg_emu_thread{{i % bx, i / bx % by, i / (bx * by)}, {x, y, z}, {bx, by, bz}, {gx, gy, gz}, nullptr, i % 32, dynamic_shared.data(), ++block_serial, (unsigned)dynamic_shared.size()};
            launch_call(launch_params);
          }
    return OK;
  }
  for (unsigned z = 0; z < gz; z++)
    for (unsigned y = 0; y < gy; y++)
      for (unsigned x = 0; x < gx; x++)
        if (!run_block({x, y, z}, {gx, gy, gz}, {bx, by, bz})) {
          fprintf(stderr, "tsgrad CUDA emulator: block (%u, %u, %u) deadlocked at a barrier\n", x, y, z);
          return LAUNCH_FAILED;
        }
  return OK;
}
int cuStreamCreate(void **stream, unsigned) { Stream *s = new Stream(); s->device = current_device; *stream = s; return OK; }
int cuStreamSynchronize(void *) { return OK; }
int cuStreamBeginCapture_v2(void *stream, int) {
  if (!stream || ((Stream *)stream)->capturing) return INVALID_VALUE;
  ((Stream *)stream)->capturing = true;
  ((Stream *)stream)->recorded.clear();
  return OK;
}
int cuStreamEndCapture(void *stream, void **graph) {
  Stream *s = (Stream *)stream;
  if (!s || !s->capturing) return INVALID_VALUE;
  s->capturing = false;
  *graph = new Graph{s->device, s->recorded};
  return OK;
}
int cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long) { *exec = new Graph(*(Graph *)graph); return OK; }
static int graph_launches = 0;
/* for tests: how many graphs were launched */
int tg_emu_graph_launches(void) { return graph_launches; }
int cuGraphLaunch(void *exec, void *stream) {
  graph_launches++;
  for (Launch &l : ((Graph *)exec)->launches) {
    check_owner(((Graph *)exec)->device, l.values);
    std::vector<void *> params;
    for (uint64_t &v : l.values) params.push_back(&v);
    int result = cuLaunchKernel(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared, nullptr, params.data(), nullptr);
    if (result != OK) return result;
  }
  (void)stream;
  return OK;
}
int cuEventCreate(void **event, unsigned) { *event = new double(0); return OK; }
int cuEventRecord(void *event, void *) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  *(double *)event = ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
  return OK;
}
int cuEventSynchronize(void *) { return OK; }
int cuEventDestroy_v2(void *event) { delete (double *)event; return OK; }
int cuEventElapsedTime(float *ms, void *start, void *end) { *ms = (float)(*(double *)end - *(double *)start); return OK; }
int cuGetErrorName(int error, const char **name) {
  switch (error) {
    case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return OK;
    case LAUNCH_FAILED: *name = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
    default: return INVALID_VALUE;
  }
}

/* ---------- NVRTC ---------- */

struct Program {
  std::string source, log, image;
};
/* an unusual version: cached "cubins" of the emulator never pass for a real compiler's */
int nvrtcVersion(int *major, int *minor) { *major = 99; *minor = 0; return 0; }
int nvrtcCreateProgram(void **program, const char *source, const char *, int, void *, void *) {
  *program = new Program{source, "", ""};
  return 0;
}
int nvrtcCompileProgram(void *program, int, const char **) {
  Program *p = (Program *)program;
  if (build(p->source, p->log).empty()) return 6; /* NVRTC_ERROR_COMPILATION */
  p->image = MAGIC + p->source;
  p->image.push_back('\0');
  return 0;
}
int nvrtcGetProgramLogSize(void *program, size_t *size) { *size = ((Program *)program)->log.size() + 1; return 0; }
int nvrtcGetProgramLog(void *program, char *log) { memcpy(log, ((Program *)program)->log.c_str(), ((Program *)program)->log.size() + 1); return 0; }
int nvrtcGetCUBINSize(void *program, size_t *size) { *size = ((Program *)program)->image.size(); return 0; }
int nvrtcGetCUBIN(void *program, char *cubin) { memcpy(cubin, ((Program *)program)->image.data(), ((Program *)program)->image.size()); return 0; }
/* the emulator's "PTX" is the host C++ it builds */
int nvrtcGetPTXSize(void *program, size_t *size) { *size = ((Program *)program)->source.size() + 1; return 0; }
int nvrtcGetPTX(void *program, char *ptx) { memcpy(ptx, ((Program *)program)->source.c_str(), ((Program *)program)->source.size() + 1); return 0; }
int nvrtcDestroyProgram(void **program) { delete (Program *)*program; *program = nullptr; return 0; }
}
