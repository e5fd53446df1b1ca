// Builds the CPU emulator of a CUDA GPU (libcuda_emu.cc + cuda_emu.h) into `dir`: one library to point
// both TSGRAD_LIBCUDA and TSGRAD_LIBNVRTC at (or, for an AMD GPU, TSGRAD_LIBHIP and TSGRAD_LIBHIPRTC). Null where there is no C++ compiler.
import { spawnSync } from "node:child_process";
import { join } from "node:path";

const here = import.meta.dirname;

/** The emulator library's path, built now (about 2 s); null without g++. */
export function buildCudaEmulator(dir: string): string | null {
  const library = join(dir, "libcuda_emu.so");
  const header = join(here, "cuda_emu.h");
  const run = spawnSync(
    process.env.TG_EMU_CXX || "g++",
    [
      "-std=c++17",
      "-O1",
      "-shared",
      "-fPIC",
      "-U_FORTIFY_SOURCE",
      `-DTG_EMU_HEADER="${header}"`,
      "-o",
      library,
      join(here, "libcuda_emu.cc"),
      "-ldl",
    ],
    { encoding: "utf8" },
  );
  if (run.error || run.status !== 0) {
    if (run.error) return null;
    throw new Error(`the CUDA emulator does not build:\n${run.stderr}`);
  }
  return library;
}

/** The environment that makes `CUDA` the emulator: kernels built as host code, kept in `dir`. */
export const emulatorEnv = (library: string, dir: string): Record<string, string> => ({
  TSGRAD_LIBCUDA: library,
  TSGRAD_LIBNVRTC: library,
  TSGRAD_CACHE: join(dir, "cache"),
  TG_EMU_CACHE: join(dir, "modules"),
});

/**
 * The environment that makes `AMD` the emulator: the same library as HIP's runtime and hiprtc, a gfx1100 (RDNA3, the
 * 7900 XTX's) as the architecture, kernels built as host code kept in `dir`.
 */
export const amdEmulatorEnv = (library: string, dir: string): Record<string, string> => ({
  TSGRAD_LIBHIP: library,
  TSGRAD_LIBHIPRTC: library,
  AMD_ARCH: "gfx1100",
  TSGRAD_CACHE: join(dir, "cache"),
  TG_EMU_CACHE: join(dir, "modules"),
});

// CLI (bench/gpu-check.sh --emulate): `npx tsx test/cuda/emu/build.ts DIR` builds into DIR and prints the library's
// path.
if (process.argv[1] === import.meta.filename) {
  const dir = process.argv[2];
  if (!dir) {
    console.error("usage: npx tsx test/cuda/emu/build.ts DIR");
    process.exit(2);
  }
  const library = buildCudaEmulator(dir);
  if (!library) {
    console.error(`the CUDA emulator needs a C++ compiler (${process.env.TG_EMU_CXX || "g++"} not found)`);
    process.exit(2);
  }
  console.log(library);
}
