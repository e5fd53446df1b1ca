/* A CUDA "GPU" that runs on the CPU, for testing tsgrad's CUDA backend without one: the subset of the
 * driver API (libcuda) and of NVRTC that src/runtime/cuda*.ts calls, in one library that both
 * TSGRAD_LIBCUDA and TSGRAD_LIBNVRTC point at. The same library stands in for an AMD GPU: HIP's runtime API
 * and hiprtc (src/runtime/hip*.ts), thin wrappers over the CUDA calls at the end, for TSGRAD_LIBHIP and
 * TSGRAD_LIBHIPRTC; HIP kernels build with hip_emu.h too (wave32 shuffles, WMMA).
 *
 * - "Compiling" a program compiles its CUDA C as host C++ with g++ and cuda_emu.h forced in; the "cubin"
 *   is the source itself, and loading it builds (or finds) the shared object and dlopens it.
 * - A launch runs the blocks one after another; a block's threads are fibers taken in turn (ucontext
 *   starts each on a stack of its own, _setjmp/_longjmp switch between them: no signal-mask syscalls),
 *   each running until it waits at a barrier (__syncthreads, or a warp-wide shuffle or mma) or returns.
 *   A barrier opens when every thread of the block (warp) that has not returned has reached it.
 * - Work put on a stream (launches, graphs, async copies, event records, waits on another stream's event)
 *   is queued and runs only when something needs it: a synchronising call, a legacy-stream copy (which waits
 *   for the blocking streams of its contexts, as on a GPU), or a wait that another stream's queued work
 *   reaches. A missing wait between two GPUs' streams then gives wrong numbers here on every run that reads
 *   the results in an order that exposes it (the reader's stream runs first), where a GPU would give them
 *   only now and then. A failure of queued work is reported by the next synchronising call.
 * - Device memory is host memory; copies are memcpy; events read the host clock. Fresh device memory and
 *   dynamic shared memory hold 0xa5 / 0xff bytes, and cp.async copies land only at the wait that covers
 *   them (NaNs before), so that kernels reading what they never wrote, or too early, fail here too.
 * - The device reports an H100's attributes (sm_90, 132 multiprocessors, 228 KB shared memory each).
 *
 * Environment: TG_EMU_DEVICES (how many GPUs, default 1), TG_EMU_PEER (0: no peer access for HIP), TG_EMU_CXX (default g++), TG_EMU_CACHE (a folder where built modules are kept and shared
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
#include <deque>
#include <map>
#include <string>
#include <vector>
#define TG_EMU_LIBRARY
#include "cuda_emu.h"

#ifndef TG_EMU_HEADER
#error "build with -DTG_EMU_HEADER=\"/path/to/cuda_emu.h\""
#endif

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, INVALID_IMAGE = 200, INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500, NOT_READY = 600, LAUNCH_FAILED = 719, CAPTURE_UNSUPPORTED = 900 };
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

/** The headers' text (cuda_emu.h and the hip_emu.h it includes): modules built against another version are not reused. */
static const std::string &header_text() {
  static std::string text;
  if (text.empty()) {
    std::string header = TG_EMU_HEADER, hip = header.substr(0, header.rfind('/') + 1) + "hip_emu.h";
    for (const std::string &path : {header, hip})
      if (FILE *h = fopen(path.c_str(), "r")) {
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
struct Graph {
  int device = 0;
  std::vector<Launch> launches;
};
struct Stream;
struct Event {
  int device = 0;           /* the context it was made in: it can be recorded only on that device's streams */
  double ms = 0;            /* host clock when its record ran */
  Stream *stream = nullptr; /* its last record: the first `seq` operations of `stream` (none: complete) */
  uint64_t seq = 0;
};
/** An operation queued on a stream. */
struct Op {
  enum Kind { LAUNCH, GRAPH, COPY, RECORD, WAIT } kind;
  Launch launch;              /* LAUNCH */
  const Graph *graph = nullptr; /* GRAPH */
  uint64_t dst = 0, src = 0;  /* COPY */
  size_t bytes = 0;
  Event *event = nullptr;     /* RECORD */
  Stream *after = nullptr;    /* WAIT: until `after` has run its first `upto` operations */
  uint64_t upto = 0;
};
struct Stream {
  int device = 0; /* the device whose context was current when it was made */
  bool capturing = false;
  std::vector<Launch> recorded;
  std::deque<Op> queue;
  uint64_t queued = 0, done = 0; /* operations ever queued, and run */
};
std::vector<Stream *> streams;
/** The first failure of queued work, until a synchronising call reports it. */
int sticky = OK;

/* Which device each allocation belongs to, to count launches that read another GPU's memory (legal with
   peer access, but every such read crosses the interconnect: a kernel run on the wrong GPU) */
int current_device = 0;
std::map<uint64_t, std::pair<uint64_t, int>> allocations; /* start -> (end, device) */
int foreign_launches = 0;
/** The device whose allocation holds `pointer`, or -1. */
int owner(uint64_t pointer) {
  auto it = allocations.upper_bound(pointer);
  if (it == allocations.begin()) return -1;
  --it;
  return pointer < it->second.first ? it->second.second : -1;
}
void check_owner(int device, const std::vector<uint64_t> &values) {
  for (uint64_t v : values) {
    int o = owner(v);
    if (o >= 0 && o != device) {
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

/* ---------- streams: queued work, run when needed ---------- */

namespace {
/** Runs a launch now: its blocks one after another. */
int execute(Function *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void **params) {
  launch_call = f->call;
  launch_params = params;
  /* uninitialised, as on a GPU: NaN bytes, so that reading before writing shows */
  dynamic_shared.assign(shared, 0xff);
  if (!f->waits) {
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
int execute(const Launch &l) {
  std::vector<uint64_t> values = l.values;
  std::vector<void *> params;
  for (uint64_t &v : values) params.push_back(&v);
  return execute(l.fn, l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1], l.block[2], l.shared, params.data());
}

double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/** Runs `s`'s queued operations until `upto` of them have run; a wait first runs what it waits for. */
void run_until(Stream *s, uint64_t upto) {
  while (s->done < upto) {
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    int result = OK;
    switch (op.kind) {
      case Op::LAUNCH: result = execute(op.launch); break;
      case Op::GRAPH:
        for (const Launch &l : op.graph->launches)
          if ((result = execute(l)) != OK) break;
        break;
      case Op::COPY: memmove((void *)(uintptr_t)op.dst, (const void *)(uintptr_t)op.src, op.bytes); break;
      case Op::RECORD: op.event->ms = now_ms(); break;
      /* waits are queued only for records queued before them: no cycles */
      case Op::WAIT: run_until(op.after, op.upto); break;
    }
    s->done++;
    if (result != OK && sticky == OK) sticky = result;
  }
}

/** What a legacy-stream call of `device`'s context waits for: all its streams' work (they are blocking streams). */
void drain_device(int device) {
  for (Stream *s : streams)
    if (s->device == device) run_until(s, s->queued);
}
void drain_all() {
  for (Stream *s : streams) run_until(s, s->queued);
}
/** A synchronising call's result: the failure of queued work it waited for, once. */
int reported() {
  int r = sticky;
  sticky = OK;
  return r;
}
/** Queues `op` on `stream`, which must belong to the current context and not be capturing. */
int enqueue(void *stream, Op op) {
  Stream *s = (Stream *)stream;
  if (!s) return INVALID_HANDLE;
  if (s->capturing) return CAPTURE_UNSUPPORTED;
  if (s->device != current_device) return INVALID_CONTEXT;
  s->queue.push_back(std::move(op));
  s->queued++;
  return OK;
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
int peer_copies = 0; /* cuMemcpyPeerAsync calls, for tests (tg_emu_peer_copies) */
int cuDeviceCanAccessPeer(int *can, int device, int peer) { *can = device != peer; return OK; }
int cuDevicePrimaryCtxRetain(void **context, int device) { *context = (void *)(uintptr_t)(0x1000 + device); return OK; }
int cuCtxSetCurrent(void *context) { current_device = (int)((uintptr_t)context - 0x1000); return OK; }
int cuCtxSynchronize(void) {
  drain_device(current_device);
  return reported();
}
int cuCtxEnablePeerAccess(void *, unsigned) { return OK; }
int cuMemAlloc_v2(uint64_t *pointer, size_t bytes) {
  void *p = nullptr;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) return OUT_OF_MEMORY;
  memset(p, 0xA5, bytes); /* like fresh device memory: not zero, so kernels that rely on zeros fail here too */
  *pointer = (uint64_t)(uintptr_t)p;
  allocations[*pointer] = {*pointer + (bytes ? bytes : 1), current_device};
  return OK;
}
int cuMemFree_v2(uint64_t pointer) {
  drain_all(); /* as cudaFree: queued work may still use it */
  allocations.erase(pointer);
  free((void *)(uintptr_t)pointer);
  return OK;
}
/* for tests: launches whose pointer arguments reached another device's memory */
int tg_emu_foreign_launches(void) { return foreign_launches; }
int cuMemGetInfo_v2(size_t *free_bytes, size_t *total) { *free_bytes = *total = (size_t)1 << 34; return OK; }
/* legacy-stream copies: after the current context's streams, before anything queued later */
int cuMemcpyHtoD_v2(uint64_t dst, const void *src, size_t bytes) {
  drain_device(current_device);
  memcpy((void *)(uintptr_t)dst, src, bytes);
  return reported();
}
int cuMemcpyDtoH_v2(void *dst, uint64_t src, size_t bytes) {
  drain_device(current_device);
  memcpy(dst, (const void *)(uintptr_t)src, bytes);
  return reported();
}
/* queued copies: on the device to device, or between two GPUs' memories (each pointer in its context's device) */
int cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t bytes, void *stream) {
  if (owner(dst) != current_device || owner(src) != current_device) return INVALID_VALUE;
  Op op{Op::COPY};
  op.dst = dst, op.src = src, op.bytes = bytes;
  return enqueue(stream, std::move(op));
}
int cuMemcpyPeerAsync(uint64_t dst, void *dst_context, uint64_t src, void *src_context, size_t bytes, void *stream) {
  if (owner(dst) != (int)((uintptr_t)dst_context - 0x1000) || owner(src) != (int)((uintptr_t)src_context - 0x1000)) return INVALID_VALUE;
  Op op{Op::COPY};
  op.dst = dst, op.src = src, op.bytes = bytes;
  int result = enqueue(stream, std::move(op));
  if (result == OK) peer_copies++;
  return result;
}
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
  Launch launch{(Function *)f, {gx, gy, gz}, {bx, by, bz}, shared, {}};
  for (int i = 0; i < ((Function *)f)->params; i++) launch.values.push_back(*(uint64_t *)params[i]);
  if (stream && ((Stream *)stream)->capturing) {
    ((Stream *)stream)->recorded.push_back(launch);
    return OK;
  }
  if (!stream) {
    /* the legacy stream: after the context's other streams */
    check_owner(current_device, launch.values);
    drain_device(current_device);
    return execute(launch);
  }
  check_owner(((Stream *)stream)->device, launch.values);
  Op op{Op::LAUNCH};
  op.launch = std::move(launch);
  return enqueue(stream, std::move(op));
}
int cuStreamCreate(void **stream, unsigned) {
  Stream *s = new Stream();
  s->device = current_device;
  streams.push_back(s);
  *stream = s;
  return OK;
}
/* for tests: operations queued on streams and not yet run */
int tg_emu_queued(void) {
  uint64_t n = 0;
  for (Stream *s : streams) n += s->queued - s->done;
  return (int)n;
}
int cuStreamSynchronize(void *stream) {
  if (!stream) return INVALID_HANDLE;
  run_until((Stream *)stream, ((Stream *)stream)->queued);
  return reported();
}
int cuStreamWaitEvent(void *stream, void *event, unsigned) {
  Event *e = (Event *)event;
  if (!e->stream) return OK; /* never recorded, or recorded complete */
  Op op{Op::WAIT};
  op.after = e->stream;
  op.upto = e->seq; /* the record as it is now: a later record of the same event does not move this wait */
  return enqueue(stream, std::move(op));
}
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
  const Graph *g = (const Graph *)exec;
  graph_launches++;
  for (const Launch &l : g->launches) check_owner(g->device, l.values);
  Op op{Op::GRAPH};
  op.graph = g;
  return enqueue(stream, std::move(op));
}
int cuEventCreate(void **event, unsigned) {
  Event *e = new Event();
  e->device = current_device;
  *event = e;
  return OK;
}
int cuEventRecord(void *event, void *stream) {
  Event *e = (Event *)event;
  if (!stream) {
    drain_device(current_device);
    e->ms = now_ms();
    e->stream = nullptr;
    return OK;
  }
  if (((Stream *)stream)->device != e->device) return INVALID_HANDLE;
  Op op{Op::RECORD};
  op.event = e;
  int result = enqueue(stream, std::move(op));
  if (result != OK) return result;
  e->stream = (Stream *)stream;
  e->seq = e->stream->queued;
  return OK;
}
int cuEventSynchronize(void *event) {
  Event *e = (Event *)event;
  if (e->stream) run_until(e->stream, e->seq);
  return reported();
}
int cuEventDestroy_v2(void *event) { delete (Event *)event; return OK; }
int cuEventElapsedTime(float *ms, void *start, void *end) {
  for (Event *e : {(Event *)start, (Event *)end})
    if (e->stream && e->stream->done < e->seq) return NOT_READY;
  *ms = (float)(((Event *)end)->ms - ((Event *)start)->ms);
  return OK;
}
int cuGetErrorName(int error, const char **name) {
  switch (error) {
    case INVALID_VALUE: *name = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OUT_OF_MEMORY: *name = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case INVALID_IMAGE: *name = "CUDA_ERROR_INVALID_IMAGE"; return OK;
    case NOT_FOUND: *name = "CUDA_ERROR_NOT_FOUND"; return OK;
    case INVALID_CONTEXT: *name = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
    case INVALID_HANDLE: *name = "CUDA_ERROR_INVALID_HANDLE"; return OK;
    case NOT_READY: *name = "CUDA_ERROR_NOT_READY"; return OK;
    case LAUNCH_FAILED: *name = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
    case CAPTURE_UNSUPPORTED: *name = "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"; return OK;
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

/* ---------- HIP: the runtime API over the driver API above (TSGRAD_LIBHIP points here too) ----------
 * HIP's calls name devices where CUDA's take contexts (hipSetDevice makes one current), return their error's name
 * (hipGetErrorName) and pass a launch's arguments as one packed buffer (`extra`); the codes are CUDA's numbers. The
 * device reports nothing of its own: the runtime takes its architecture from AMD_ARCH (gfx1100 in the tests),
 * and a workgroup may use 64 KB of shared memory (LDS) without asking. TG_EMU_PEER=0 gives the GPUs no peer access,
 * as GPUs on separate root complexes have none. */
extern "C" {
static void *context_of(int device) { return (void *)(uintptr_t)(0x1000 + device); }
static bool peer_access(void) {
  const char *p = getenv("TG_EMU_PEER");
  return !(p && strcmp(p, "0") == 0);
}
int hipInit(unsigned flags) { return cuInit(flags); }
int hipRuntimeGetVersion(int *v) { *v = 99000000; return OK; }
int hipGetDeviceCount(int *n) { return cuDeviceGetCount(n); }
int hipSetDevice(int device) { return device < 0 || device >= device_count() ? 101 : cuCtxSetCurrent(context_of(device)); }
int hipDeviceSynchronize(void) { return cuCtxSynchronize(); }
int hipDeviceCanAccessPeer(int *can, int device, int peer) {
  int r = cuDeviceCanAccessPeer(can, device, peer);
  if (!peer_access()) *can = 0;
  return r;
}
static std::map<std::pair<int, int>, bool> peers_enabled;
int hipDeviceEnablePeerAccess(int peer, unsigned) {
  if (!peer_access() || peer == current_device || peer < 0 || peer >= device_count()) return 217; /* hipErrorPeerAccessUnsupported */
  bool &enabled = peers_enabled[{current_device, peer}];
  if (enabled) return 704; /* hipErrorPeerAccessAlreadyEnabled */
  enabled = true;
  return OK;
}
int hipMalloc(uint64_t *pointer, size_t bytes) { return cuMemAlloc_v2(pointer, bytes); }
int hipFree(uint64_t pointer) { return cuMemFree_v2(pointer); }
int hipMemGetInfo(size_t *free_bytes, size_t *total) { return cuMemGetInfo_v2(free_bytes, total); }
int hipMemcpyHtoD(uint64_t dst, const void *src, size_t bytes) { return cuMemcpyHtoD_v2(dst, src, bytes); }
int hipMemcpyDtoH(void *dst, uint64_t src, size_t bytes) { return cuMemcpyDtoH_v2(dst, src, bytes); }
int hipMemcpyDtoDAsync(uint64_t dst, uint64_t src, size_t bytes, void *stream) { return cuMemcpyDtoDAsync_v2(dst, src, bytes, stream); }
int hipMemcpyPeerAsync(uint64_t dst, int dst_device, uint64_t src, int src_device, size_t bytes, void *stream) {
  return cuMemcpyPeerAsync(dst, context_of(dst_device), src, context_of(src_device), bytes, stream);
}
int hipModuleLoadData(void **module, const void *image) { return cuModuleLoadData(module, image); }
int hipModuleGetFunction(void **function, void *module, const char *name) {
  int r = cuModuleGetFunction(function, module, name);
  if (r == OK) ((Function *)*function)->max_dynamic_shared = 64 << 10;
  return r;
}
/* arguments as kernelParams (pointers to each) or as `extra`: {1, buffer, 2, &size, 3}, 8-byte values packed */
int hipModuleLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shared, void *stream, void **params, void **extra) {
  if (params || !extra) return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, params, nullptr);
  char *buffer = nullptr;
  size_t size = 0;
  for (int i = 0; extra[i] != (void *)3; i += 2) {
    if (i > 8) return INVALID_VALUE;
    if (extra[i] == (void *)1) buffer = (char *)extra[i + 1];
    else if (extra[i] == (void *)2) size = *(size_t *)extra[i + 1];
    else return INVALID_VALUE;
  }
  int count = ((Function *)f)->params;
  if (!buffer || size != (size_t)count * 8) return INVALID_VALUE;
  std::vector<void *> pointers;
  for (int i = 0; i < count; i++) pointers.push_back(buffer + 8 * i);
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, stream, pointers.data(), nullptr);
}
int hipEventCreateWithFlags(void **event, unsigned flags) { return cuEventCreate(event, flags); }
int hipEventRecord(void *event, void *stream) { return cuEventRecord(event, stream); }
int hipEventSynchronize(void *event) { return cuEventSynchronize(event); }
int hipEventElapsedTime(float *ms, void *start, void *end) { return cuEventElapsedTime(ms, start, end); }
int hipEventDestroy(void *event) { return cuEventDestroy_v2(event); }
int hipStreamCreate(void **stream) { return cuStreamCreate(stream, 0); }
int hipStreamSynchronize(void *stream) { return cuStreamSynchronize(stream); }
int hipStreamWaitEvent(void *stream, void *event, unsigned flags) { return cuStreamWaitEvent(stream, event, flags); }
int hipStreamBeginCapture(void *stream, int mode) { return cuStreamBeginCapture_v2(stream, mode); }
int hipStreamEndCapture(void *stream, void **graph) { return cuStreamEndCapture(stream, graph); }
int hipGraphInstantiate(void **exec, void *graph, void **error_node, char *log, size_t log_bytes) {
  if (error_node) *error_node = nullptr;
  if (log && log_bytes) *log = '\0';
  return cuGraphInstantiateWithFlags(exec, graph, 0);
}
int hipGraphLaunch(void *exec, void *stream) { return cuGraphLaunch(exec, stream); }
const char *hipGetErrorName(int error) {
  switch (error) {
    case OK: return "hipSuccess";
    case INVALID_VALUE: return "hipErrorInvalidValue";
    case OUT_OF_MEMORY: return "hipErrorOutOfMemory";
    case 101: return "hipErrorInvalidDevice";
    case INVALID_IMAGE: return "hipErrorInvalidImage";
    case INVALID_CONTEXT: return "hipErrorInvalidContext";
    case 217: return "hipErrorPeerAccessUnsupported";
    case INVALID_HANDLE: return "hipErrorInvalidHandle";
    case NOT_FOUND: return "hipErrorNotFound";
    case NOT_READY: return "hipErrorNotReady";
    case 704: return "hipErrorPeerAccessAlreadyEnabled";
    case LAUNCH_FAILED: return "hipErrorLaunchFailure";
    case CAPTURE_UNSUPPORTED: return "hipErrorStreamCaptureUnsupported";
    default: return "hipErrorUnknown";
  }
}

/* hiprtc: the emulated NVRTC under HIP's names (a "code object" is the source the emulator builds as host C++) */
int hiprtcVersion(int *major, int *minor) { return nvrtcVersion(major, minor); }
int hiprtcCreateProgram(void **program, const char *source, const char *name, int headers, void *sources, void *names) { return nvrtcCreateProgram(program, source, name, headers, sources, names); }
int hiprtcCompileProgram(void *program, int count, const char **options) { return nvrtcCompileProgram(program, count, options); }
int hiprtcGetProgramLogSize(void *program, size_t *size) { return nvrtcGetProgramLogSize(program, size); }
int hiprtcGetProgramLog(void *program, char *log) { return nvrtcGetProgramLog(program, log); }
int hiprtcGetCodeSize(void *program, size_t *size) { return nvrtcGetCUBINSize(program, size); }
int hiprtcGetCode(void *program, char *code) { return nvrtcGetCUBIN(program, code); }
int hiprtcDestroyProgram(void **program) { return nvrtcDestroyProgram(program); }
}
