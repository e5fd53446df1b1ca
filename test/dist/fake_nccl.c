// A stand-in for libnccl.so.2 with NCCL's C ABI, for tests on machines without GPUs: "device" pointers are host
// addresses, and the ranks of a world exchange their buffers through files in a folder named by the unique id
// (under $FAKE_NCCL_DIR, default /tmp). It checks what a caller passes (types, ops, counts, ranks) as NCCL
// does, so tsgrad's binding (signatures, struct-by-value id, enums, groups, error strings) is exercised for
// real; it is not NCCL and makes no claim about speed. Built by test/dist/nccl.test.ts with cc -shared.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef struct { char dir[512]; int nranks, rank; long seq; } fake_comm;

enum { ok = 0, unhandled_cuda = 1, system_error = 2, internal_error = 3, invalid_argument = 4, invalid_usage = 5 };
static const size_t type_size[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

int ncclGetVersion(int *version) { *version = 21805; return ok; }

const char *ncclGetErrorString(int result) {
  switch (result) {
    case ok: return "no error";
    case system_error: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case invalid_argument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case invalid_usage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    default: return "unknown result code";
  }
}

int ncclGetUniqueId(ncclUniqueId *id) {
  memset(id, 0, sizeof *id);
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  snprintf(id->internal, sizeof id->internal, "fake-nccl-%d-%ld-%ld", (int)getpid(), (long)now.tv_sec, now.tv_nsec);
  return ok;
}

int ncclCommInitRank(void **comm, int nranks, ncclUniqueId id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks || strncmp(id.internal, "fake-nccl-", 10) != 0) return invalid_argument;
  fake_comm *c = calloc(1, sizeof *c);
  const char *base = getenv("FAKE_NCCL_DIR");
  snprintf(c->dir, sizeof c->dir, "%s/%.100s", base ? base : "/tmp", id.internal);
  mkdir(c->dir, 0700);
  c->nranks = nranks;
  c->rank = rank;
  *comm = c;
  return ok;
}

int ncclCommDestroy(void *comm) { free(comm); return ok; }
int ncclCommAbort(void *comm) { free(comm); return ok; }
int ncclCommGetAsyncError(void *comm, int *error) { (void)comm; *error = ok; return ok; }
int ncclGroupStart(void) { return ok; }
int ncclGroupEnd(void) { return ok; }

// this rank's `bytes` at `data` published as call `seq`'s file of `rank` (written whole, then renamed)
static int publish(fake_comm *c, long seq, int rank, const void *data, size_t bytes) {
  char path[600], temporary[620];
  snprintf(path, sizeof path, "%s/%ld.%d", c->dir, seq, rank);
  snprintf(temporary, sizeof temporary, "%s.tmp", path);
  FILE *f = fopen(temporary, "wb");
  if (!f || fwrite(data, 1, bytes, f) != bytes) return system_error;
  fclose(f);
  return rename(temporary, path) == 0 ? ok : system_error;
}

// waits (up to 30 s) for call `seq`'s file of `rank` and reads it into `data`
static int collect(fake_comm *c, long seq, int rank, void *data, size_t bytes) {
  char path[600];
  snprintf(path, sizeof path, "%s/%ld.%d", c->dir, seq, rank);
  for (int waited = 0; access(path, F_OK) != 0; waited++) {
    if (waited > 30000) return system_error;
    usleep(1000);
  }
  FILE *f = fopen(path, "rb");
  if (!f) return system_error;
  size_t got = fread(data, 1, bytes, f);
  fclose(f);
  return got == bytes ? ok : invalid_usage;  // another rank passed another count
}

int ncclAllReduce(uint64_t send, uint64_t recv, size_t count, int type, int op, void *comm, void *stream) {
  (void)stream;
  fake_comm *c = comm;
  if (type != 2 && type != 7 && type != 8) return invalid_argument;  // int32, float32, float64 here
  if (op != 0 && op != 2 && op != 4) return invalid_argument;       // sum, max, avg here
  size_t bytes = count * type_size[type];
  long seq = c->seq++;
  int result = publish(c, seq, c->rank, (const void *)(uintptr_t)send, bytes);
  if (result != ok) return result;
  char *all = malloc(bytes * c->nranks);
  for (int r = 0; r < c->nranks && result == ok; r++) result = collect(c, seq, r, all + r * bytes, bytes);
  for (size_t i = 0; i < count && result == ok; i++) {
    double total = 0;
    for (int r = 0; r < c->nranks; r++) {
      const char *at = all + r * bytes;
      double v = type == 2 ? ((const int32_t *)at)[i] : type == 7 ? ((const float *)at)[i] : ((const double *)at)[i];
      total = r == 0 ? v : op == 2 ? (v > total ? v : total) : total + v;
    }
    if (op == 4) total /= c->nranks;
    if (type == 2) ((int32_t *)(uintptr_t)recv)[i] = (int32_t)total;
    else if (type == 7) ((float *)(uintptr_t)recv)[i] = (float)total;
    else ((double *)(uintptr_t)recv)[i] = total;
  }
  free(all);
  return result;
}

int ncclBroadcast(uint64_t send, uint64_t recv, size_t count, int type, int root, void *comm, void *stream) {
  (void)stream;
  fake_comm *c = comm;
  if (type < 0 || type > 9) return invalid_argument;
  if (root < 0 || root >= c->nranks) return invalid_argument;
  size_t bytes = count * type_size[type];
  long seq = c->seq++;
  if (c->rank == root) {
    memmove((void *)(uintptr_t)recv, (const void *)(uintptr_t)send, bytes);
    return publish(c, seq, root, (const void *)(uintptr_t)send, bytes);
  }
  return collect(c, seq, root, (void *)(uintptr_t)recv, bytes);
}

int ncclAllGather(uint64_t send, uint64_t recv, size_t count, int type, void *comm, void *stream) {
  (void)stream;
  fake_comm *c = comm;
  if (type < 0 || type > 9) return invalid_argument;
  size_t bytes = count * type_size[type];
  long seq = c->seq++;
  int result = publish(c, seq, c->rank, (const void *)(uintptr_t)send, bytes);
  for (int r = 0; r < c->nranks && result == ok; r++) result = collect(c, seq, r, (char *)(uintptr_t)recv + r * bytes, bytes);
  return result;
}
