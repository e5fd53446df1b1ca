#!/usr/bin/env python3
"""Compiler differential over tsgrad's C kernels.

Each kernel of a kernel cache (its `<hash>.c` files: the prelude and one `tg_kernel`) is built three ways: at -O0,
at tsgrad's -O3 flags with the TG_FRAGILE_LOOPS marker empty (the compiler as it is), and with the marker defined
as the attribute src/runtime/compiler_bugs.ts uses where its probes show gcc 12.2's bug. All three run on the same
inputs and their outputs are compared element by element: -O0 is the reference, since C fixes the arithmetic
(no contraction, no reassociation). NaN equals NaN; +0 equals -0 (with -fno-trapping-math gcc 12.2 drops the sign
of some zeros, a difference the JS reference's tests do not see either). Prints a line per kernel:

    <hash> marked=<0|1> O3=<same|DIFF> fixed=<same|DIFF>

and, on stderr, the first differing element of each DIFF. A kernel gcc gets wrong that is not marked is a hole in
renderer/c.ts hasFragileLoops; a marked one still wrong when fixed, a hole in the workaround.

Usage: python3 test/fuzz/kernel_diff.py [--bytes N] [--work DIR] KERNEL.c...
  e.g. after the fuzzer ran with TSGRAD_CACHE=/tmp/fz: python3 test/fuzz/kernel_diff.py /tmp/fz/cpu/*.c
--bytes: the size of every buffer (default 256 KiB: the fuzzer's kernels; 32 MiB for BERT-mini's).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

FLAGS = ["-march=native", "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno", "-fPIC", "-shared", "-std=gnu11", "-fopenmp"]
BUILDS = {
    "O0": ["-O0"],
    "O3": ["-O3", "-DTG_FRAGILE_LOOPS="],
    "fixed": ["-O3", '-DTG_FRAGILE_LOOPS=__attribute__((optimize("no-tree-loop-vectorize")))'],
}
# the C type of a buffer -> the letter the driver fills and compares it by
LETTERS = {"float": "F", "double": "D", "int32_t": "I", "uint32_t": "U", "int64_t": "L", "uint16_t": "H", "int16_t": "S", "uint8_t": "B", "int8_t": "C"}
SIGNATURE = re.compile(r"^(TG_FRAGILE_LOOPS )?void tg_kernel\(([^)]*)\)", re.M)
BATCH = 400

DRIVER = r"""
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct Kernel { const char* name; const char* letters; int marked; };
static const struct Kernel kernels[] = { KERNELS };
static const char LETTERS[] = "FDIULHSBC";
static unsigned long long state;
static unsigned next(void) { state = state * 6364136223846793005ULL + 1442695040888963407ULL; return (unsigned)(state >> 33); }

/* floats in [-4, 4] on a 1/250 grid (zeros included), small integers around 0 (in range for gathers), 0/1
   bools, finite float16 bit patterns of either sign */
static void fill(char letter, void* p) {
  switch (letter) {
    case 'F': for (size_t i = 0; i < BYTES / 4; i++) ((float*)p)[i] = ((int)(next() % 2001) - 1000) / 250.0f; break;
    case 'D': for (size_t i = 0; i < BYTES / 8; i++) ((double*)p)[i] = ((int)(next() % 2001) - 1000) / 250.0; break;
    case 'I': case 'U': for (size_t i = 0; i < BYTES / 4; i++) ((int32_t*)p)[i] = (int32_t)(next() % 9) - 2; break;
    case 'L': for (size_t i = 0; i < BYTES / 8; i++) ((int64_t*)p)[i] = (int64_t)(next() % 9) - 2; break;
    case 'H': for (size_t i = 0; i < BYTES / 2; i++) ((uint16_t*)p)[i] = (uint16_t)((next() % 0x7800) | ((next() & 1) << 15)); break;
    case 'S': for (size_t i = 0; i < BYTES / 2; i++) ((int16_t*)p)[i] = (int16_t)((int)(next() % 9) - 2); break;
    case 'B': for (size_t i = 0; i < BYTES; i++) ((uint8_t*)p)[i] = next() & 1; break;
    case 'C': for (size_t i = 0; i < BYTES; i++) ((int8_t*)p)[i] = (int8_t)((int)(next() % 9) - 2); break;
  }
}

/* whether two outputs agree (NaN with NaN, +0 with -0); else prints the first difference */
static int agree(const char* name, const char* build, char letter, const void* a, const void* b) {
  if (letter == 'F') {
    for (size_t i = 0; i < BYTES / 4; i++) {
      float x = ((const float*)a)[i], y = ((const float*)b)[i];
      if (x != y && !(x != x && y != y)) { fprintf(stderr, "%s %s: [%zu] %a, -O0 %a\n", name, build, i, y, x); return 0; }
    }
    return 1;
  }
  if (letter == 'D') {
    for (size_t i = 0; i < BYTES / 8; i++) {
      double x = ((const double*)a)[i], y = ((const double*)b)[i];
      if (x != y && !(x != x && y != y)) { fprintf(stderr, "%s %s: [%zu] %a, -O0 %a\n", name, build, i, y, x); return 0; }
    }
    return 1;
  }
  if (letter == 'H') {
    for (size_t i = 0; i < BYTES / 2; i++) {
      uint16_t x = ((const uint16_t*)a)[i], y = ((const uint16_t*)b)[i];
      int nans = (x & 0x7c00) == 0x7c00 && (x & 0x3ff) && (y & 0x7c00) == 0x7c00 && (y & 0x3ff);
      if (x != y && (x | y) != 0x8000 && !nans) { fprintf(stderr, "%s %s: [%zu] %04x, -O0 %04x\n", name, build, i, y, x); return 0; }
    }
    return 1;
  }
  if (memcmp(a, b, BYTES) == 0) return 1;
  fprintf(stderr, "%s %s: integer outputs differ\n", name, build);
  return 0;
}

CALL

int main(int argc, char** argv) {
  void* libs[3];
  for (int l = 0; l < 3; l++) if (!(libs[l] = dlopen(argv[1 + l], RTLD_NOW | RTLD_LOCAL))) { fprintf(stderr, "%s\n", dlerror()); return 2; }
  static void* inputs[MAXBUFS][sizeof LETTERS]; /* each slot's input of each type, filled once */
  void* bufs[MAXBUFS];
  void* reference = malloc(BYTES);
  bufs[0] = malloc(BYTES);
  for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++) {
    const struct Kernel* kernel = &kernels[k];
    int n = (int)strlen(kernel->letters);
    for (int i = 1; i < n; i++) {
      int t = (int)(strchr(LETTERS, kernel->letters[i]) - LETTERS);
      if (!inputs[i][t]) { inputs[i][t] = malloc(BYTES); state = 12345u + 16u * i + t; fill(kernel->letters[i], inputs[i][t]); }
      bufs[i] = inputs[i][t];
    }
    char symbol[80];
    snprintf(symbol, sizeof symbol, "k_%s", kernel->name);
    int same[3];
    for (int l = 0; l < 3; l++) {
      memset(bufs[0], 0, BYTES);
      call(dlsym(libs[l], symbol), bufs, n);
      if (l == 0) memcpy(reference, bufs[0], BYTES);
      else same[l] = agree(kernel->name, l == 1 ? "O3" : "fixed", kernel->letters[0], reference, bufs[0]);
    }
    printf("%s marked=%d O3=%s fixed=%s\n", kernel->name, kernel->marked, same[1] ? "same" : "DIFF", same[2] ? "same" : "DIFF");
    fflush(stdout);
  }
  return 0;
}
"""


def call_function(max_buffers: int) -> str:
    """C: call(f, bufs, n) calls f(bufs[0], ..., bufs[n-1], 1) for every n up to max_buffers."""
    cases = []
    for n in range(1, max_buffers + 1):
        types = ", ".join(["void*"] * n + ["int"])
        args = ", ".join([f"p[{i}]" for i in range(n)] + ["1"])
        cases.append(f"    case {n}: ((void (*)({types}))f)({args}); break;")
    return "static void call(void* f, void** p, int n) {\n  switch (n) {\n" + "\n".join(cases) + "\n  }\n}"


def load(files):
    """(prelude, [(hash, code with tg_kernel renamed, letters, marked)]) of the kernel sources."""
    prelude, kernels = None, []
    for path in files:
        source = open(path).read()
        match = SIGNATURE.search(source)
        if not match or "\n// " not in source:
            continue
        start = source.index("\n// ")
        prelude = prelude or source[:start]
        params = [p.strip() for p in match.group(2).split(",")][:-1]  # the last is `int threads`
        letters = "".join(LETTERS[re.match(r"(const )?(\w+)\*", p).group(2)] for p in params)
        name = os.path.basename(path)[:-2]
        kernels.append((name, source[start:].replace("tg_kernel", f"k_{name}"), letters, bool(match.group(1))))
    return prelude, kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bytes", type=int, default=256 * 1024)
    parser.add_argument("--work", default=None)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="tsgrad-kernel-diff-")
    os.makedirs(work, exist_ok=True)
    prelude, kernels = load(args.files)
    print(f"{len(kernels)} kernels, work in {work}", file=sys.stderr)
    cc = os.environ.get("CC", "cc")
    for start in range(0, len(kernels), BATCH):
        batch = kernels[start:start + BATCH]
        source = os.path.join(work, f"batch{start}.c")
        with open(source, "w") as f:
            f.write(prelude + "\n" + "\n".join(k[1] for k in batch))
        libs = []
        for build, flags in BUILDS.items():
            libs.append(os.path.join(work, f"batch{start}.{build}.so"))
            subprocess.run([cc, *flags, *FLAGS, "-o", libs[-1], source, "-lm"], check=True)
        max_buffers = max(len(k[2]) for k in batch)
        table = ", ".join(f'{{"{k[0]}", "{k[2]}", {int(k[3])}}}' for k in batch)
        driver = (DRIVER.replace("KERNELS", table).replace("CALL", call_function(max_buffers))
                  .replace("MAXBUFS", str(max_buffers)).replace("BYTES", f"((size_t){args.bytes})"))
        program = os.path.join(work, f"driver{start}")
        with open(program + ".c", "w") as f:
            f.write(driver)
        subprocess.run([cc, "-O1", "-o", program, program + ".c", "-ldl"], check=True)
        run = subprocess.run([program, *libs], stdout=sys.stdout, stderr=sys.stderr)
        if run.returncode != 0:
            sys.exit(f"driver for kernels {start}..{start + len(batch) - 1} failed ({run.returncode})")


if __name__ == "__main__":
    main()
