// The machine's float32 peak: an FMA loop at the widest vector width the CPU has (AVX-512: 16 floats,
// AVX2: 8, else what the compiler's native target gives), with enough independent accumulators to hide the
// FMA latency, on 1 thread and on every core, for a fixed time. Every other CPU figure (docs/performance.md,
// bench/bert-step.ts) is a fraction of this one: measure it on the machine you are on, each time.
// Usage: npx tsx bench/peak.ts [--seconds 2] [--threads 1,N]   (prints JSON)
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { benchArgs } from "./args.ts";

const cores = availableParallelism();
const { values } = benchArgs(import.meta.url, {
  seconds: { type: "string", default: "2" },
  threads: { type: "string", default: `1,${cores}` },
});

// ACC accumulators of W floats each: each thread runs ACC independent FMA chains per iteration
const SOURCE = String.raw`
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#if defined(__AVX512F__)
#define W 16
#elif defined(__AVX__)
#define W 8
#else
#define W 4
#endif
#define ACC 12
typedef float vec __attribute__((vector_size(W * 4)));
static double seconds_now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
typedef struct { double seconds; long iterations; float sink; } job;
static void *run(void *arg) {
  job *j = arg;
  vec a, b, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11;
  for (int i = 0; i < W; i++) {
    a[i] = 0.999999f; b[i] = 1e-7f;
    c0[i] = 0; c1[i] = 1; c2[i] = 2; c3[i] = 3; c4[i] = 4; c5[i] = 5;
    c6[i] = 6; c7[i] = 7; c8[i] = 8; c9[i] = 9; c10[i] = 10; c11[i] = 11;
  }
  double end = seconds_now() + j->seconds;
  long n = 0;
  /* twelve independent chains in registers: one FMA per lane each under -ffp-contract=fast */
#define STEP c0 = c0 * a + b; c1 = c1 * a + b; c2 = c2 * a + b; c3 = c3 * a + b; c4 = c4 * a + b; c5 = c5 * a + b; \
  c6 = c6 * a + b; c7 = c7 * a + b; c8 = c8 * a + b; c9 = c9 * a + b; c10 = c10 * a + b; c11 = c11 * a + b;
  do {
    for (int r = 0; r < 4096; r++) { STEP }
    n += 4096;
  } while (seconds_now() < end);
  vec t = c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11;
  float s = 0;
  for (int i = 0; i < W; i++) s += t[i];
  j->iterations = n; j->sink = s;
  return 0;
}
int main(int argc, char **argv) {
  int threads = atoi(argv[1]); double secs = atof(argv[2]);
  pthread_t t[256]; job jobs[256];
  double start = seconds_now();
  for (int i = 0; i < threads; i++) { jobs[i].seconds = secs; pthread_create(&t[i], 0, run, &jobs[i]); }
  long total = 0; float sink = 0;
  for (int i = 0; i < threads; i++) { pthread_join(t[i], 0); total += jobs[i].iterations; sink += jobs[i].sink; }
  double elapsed = seconds_now() - start;
  printf("{\"width\": %d, \"accumulators\": %d, \"gflops\": %.1f, \"sink\": %g}\n", W, ACC, total * (double)ACC * W * 2 / elapsed / 1e9, sink);
  return 0;
}
`;

const dir = mkdtempSync(join(tmpdir(), "tsgrad-peak-"));
try {
  writeFileSync(join(dir, "peak.c"), SOURCE);
  const binary = join(dir, "peak");
  execFileSync("cc", ["-O2", "-march=native", "-ffp-contract=fast", "-pthread", "-o", binary, join(dir, "peak.c")]);
  const cpu = /model name\s*:\s*(.*)/.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1] ?? "unknown";
  const flags = /flags\s*:\s*(.*)/.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.split(" ") ?? [];
  const runs = values.threads.split(",").map((threads) => {
    const out = JSON.parse(execFileSync(binary, [threads, values.seconds], { encoding: "utf8" })) as {
      width: number;
      accumulators: number;
      gflops: number;
    };
    return { threads: Number(threads), gflops: out.gflops, vectorFloats: out.width };
  });
  console.log(
    JSON.stringify(
      {
        bench: "peak",
        cpu,
        cores,
        avx512f: flags.includes("avx512f"),
        avx512_bf16: flags.includes("avx512_bf16"),
        runs,
      },
      null,
      2,
    ),
  );
} finally {
  rmSync(dir, { recursive: true, force: true });
}
