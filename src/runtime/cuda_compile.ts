// CUDA C -> cubin for one architecture: NVRTC (libnvrtc through koffi) when it loads, else `nvcc -cubin`.
// Cubins are cached on disk by a hash of (compiler, architecture, source), so a second run compiles nothing.
// Both compile with --fmad=false: elementwise results keep the JS reference's separate roundings.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import koffi from "koffi";
import { cacheDir, debugLevel, writeAtomic } from "../helpers.ts";
import { CompileError } from "./compiler_cache.ts";

type Fn = (...args: unknown[]) => number;

interface Nvrtc {
  readonly version: string;
  readonly fns: Record<string, Fn>;
}

const NVRTC_SIGNATURES = [
  "int nvrtcVersion(_Out_ int *major, _Out_ int *minor)",
  "int nvrtcCreateProgram(_Out_ void **program, const char *source, const char *name, int headers, void *headerSources, void *headerNames)",
  "int nvrtcCompileProgram(void *program, int count, const char **options)",
  "int nvrtcGetProgramLogSize(void *program, _Out_ size_t *size)",
  "int nvrtcGetProgramLog(void *program, _Out_ uint8_t *log)",
  "int nvrtcGetCUBINSize(void *program, _Out_ size_t *size)",
  "int nvrtcGetCUBIN(void *program, _Out_ uint8_t *cubin)",
  "int nvrtcDestroyProgram(_Inout_ void **program)",
  "int nvrtcGetPTXSize(void *program, _Out_ size_t *size)",
  "int nvrtcGetPTX(void *program, _Out_ uint8_t *ptx)",
];

/** `TSGRAD_LIBNVRTC` (a path), else the sonames CUDA 13, 12 and 11 install. */
const nvrtcCandidates = (): string[] =>
  process.env.TSGRAD_LIBNVRTC
    ? [process.env.TSGRAD_LIBNVRTC]
    : ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "/usr/local/cuda/lib64/libnvrtc.so"];

let nvrtc: Nvrtc | null | undefined;

/** NVRTC, or null where it does not load (probed once). */
export function loadNvrtc(): Nvrtc | null {
  if (nvrtc !== undefined) return nvrtc;
  for (const name of nvrtcCandidates()) {
    try {
      const lib = koffi.load(name);
      const fns: Record<string, Fn> = {};
      for (const s of NVRTC_SIGNATURES) fns[s.slice(4, s.indexOf("("))] = lib.func(s) as Fn;
      const [major, minor]: unknown[][] = [[0], [0]];
      fns.nvrtcVersion!(major, minor);
      return (nvrtc = { version: `nvrtc ${major[0]}.${minor[0]}`, fns });
    } catch {
      // the next candidate
    }
  }
  return (nvrtc = null);
}

let nvccPath: string | null | undefined;

/** `nvcc` on the PATH, else under `$CUDA_HOME` or /usr/local/cuda; null when there is none (probed once). */
export function findNvcc(): string | null {
  if (nvccPath !== undefined) return nvccPath;
  const candidates = [
    "nvcc",
    ...(process.env.CUDA_HOME ? [join(process.env.CUDA_HOME, "bin", "nvcc")] : []),
    "/usr/local/cuda/bin/nvcc",
  ];
  nvccPath = candidates.find((c) => spawnSync(c, ["--version"], { stdio: "ignore" }).status === 0) ?? null;
  return nvccPath;
}

/** Counts compiled and cached kernels, for tests and DEBUG output. */
export const cudaCompileStats = { compiled: 0, cached: 0 };

/** The cubin of `source` for `arch` (e.g. "sm_90"); `what` names the kernel in errors. Throws CompileError. */
export function compileCuda(source: string, arch: string, what: string): Uint8Array {
  const compiler = loadNvrtc()?.version ?? (findNvcc() ? "nvcc" : null);
  if (!compiler)
    throw new CompileError(`CUDA: cannot compile ${what}: neither NVRTC (set TSGRAD_LIBNVRTC) nor nvcc was found`);
  const hash = createHash("sha256").update(`${compiler}|${arch}\0${source}`).digest("hex").slice(0, 32);
  const dir = join(cacheDir(), "cuda");
  const path = join(dir, `${hash}.cubin`);
  if (existsSync(path)) {
    cudaCompileStats.cached++;
    return readFileSync(path);
  }
  const start = performance.now();
  const cubin = loadNvrtc()
    ? compileNvrtc(loadNvrtc()!, source, arch, what)
    : compileNvcc(findNvcc()!, source, arch, what);
  mkdirSync(dir, { recursive: true });
  writeAtomic(path, cubin);
  writeAtomic(join(dir, `${hash}.cu`), source);
  cudaCompileStats.compiled++;
  if (debugLevel() >= 3)
    console.error(`tsgrad: ${compiler} compiled ${what} for ${arch} in ${(performance.now() - start).toFixed(0)} ms`);
  return cubin;
}

/** NVRTC's PTX for `source` (diagnostics: what the driver's compiler made of a kernel); throws CompileError. */
export function nvrtcPtx(source: string, arch: string, what: string): string {
  const compiler = loadNvrtc();
  if (!compiler) throw new CompileError(`CUDA: no NVRTC to compile ${what} to PTX`);
  // a virtual architecture: PTX is what it makes
  return compileNvrtc(compiler, source, arch.replace(/^sm_/, "compute_"), what, true)
    .toString("utf8")
    .replace(/\0+$/, "");
}

function compileNvrtc({ fns }: Nvrtc, source: string, arch: string, what: string, ptx = false): globalThis.Buffer {
  const program: unknown[] = [null];
  if (fns.nvrtcCreateProgram!(program, source, `${what}.cu`, 0, null, null) !== 0)
    throw new CompileError(`NVRTC could not create a program for ${what}`);
  try {
    const options = [`--gpu-architecture=${arch}`, "--fmad=false"];
    const result = fns.nvrtcCompileProgram!(program[0], options.length, options);
    if (result !== 0) {
      const size: unknown[] = [0];
      fns.nvrtcGetProgramLogSize!(program[0], size);
      const log = Buffer.alloc(Number(size[0]));
      fns.nvrtcGetProgramLog!(program[0], log);
      throw new CompileError(
        `NVRTC failed to compile ${what} for ${arch}:\n${log.toString("utf8").replace(/\0+$/, "").slice(0, 4000)}`,
      );
    }
    const size: unknown[] = [0];
    fns[ptx ? "nvrtcGetPTXSize" : "nvrtcGetCUBINSize"]!(program[0], size);
    const out = Buffer.alloc(Number(size[0]));
    fns[ptx ? "nvrtcGetPTX" : "nvrtcGetCUBIN"]!(program[0], out);
    return out;
  } finally {
    fns.nvrtcDestroyProgram!(program);
  }
}

function compileNvcc(nvcc: string, source: string, arch: string, what: string): Uint8Array {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-nvcc-"));
  try {
    writeFileSync(join(dir, "kernel.cu"), source);
    const run = spawnSync(
      nvcc,
      [...nvccFlags([arch]), "-cubin", "-o", join(dir, "kernel.cubin"), join(dir, "kernel.cu")],
      { encoding: "utf8" },
    );
    if (run.status !== 0)
      throw new CompileError(
        `nvcc failed to compile ${what} for ${arch}:\n${(run.stderr || run.stdout || "").slice(0, 4000)}`,
      );
    return readFileSync(join(dir, "kernel.cubin"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * nvcc's flags for device code of `archs` (one -gencode each; with `ptx`, the first arch's PTX), the semantics NVRTC is
 * given.
 */
export const nvccFlags = (archs: readonly string[], { ptx = false } = {}): string[] => [
  ...(ptx ? ["-arch", archs[0]!] : archs.flatMap((a) => ["-gencode", `arch=compute_${a.slice(3)},code=${a}`])),
  "--fmad=false",
  "-diag-suppress",
  "177",
];
