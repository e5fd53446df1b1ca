// HIP C++ -> an AMD GPU code object (an ELF shared object hipModuleLoadData loads) for one architecture, e.g. gfx1100.
// Two compilers: hiprtc (ROCm's runtime compiler, through koffi) where it is ROCm 6 or newer, else hipcc, device
// code only. ROCm 5's hiprtc is skipped: its embedded device libraries stop before gfx1100 and it aborts the
// process there instead of failing. Code objects are cached on disk by a hash of (compiler, architecture, source).
// Both compile with -ffp-contract=off (elementwise results keep the JS reference's separate roundings) and
// -fno-unroll-loops (see SEMANTICS).
//
// Where hipcc's device libraries lack the architecture (Debian 12's ROCm 5.2 packages stop at gfx1036), the one
// file that differs by architecture, oclc_isa_version_<N>.bc (a constant holding the ISA version), is built with
// clang into a folder beside links to the other libraries, and hipcc is pointed there.
import { spawn, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import koffi from "koffi";
import { cacheDir, debugLevel, writeAtomic } from "../helpers.ts";
import { CompileError } from "./compiler_cache.ts";

type Fn = (...args: unknown[]) => number;

interface Hiprtc {
  readonly version: string;
  /** The CPU emulator's stand-in (test/cuda/emu): its "code objects" are host libraries. */
  readonly emulated: boolean;
  readonly fns: Record<string, Fn>;
}

const HIPRTC_SIGNATURES = [
  "int hiprtcVersion(_Out_ int *major, _Out_ int *minor)",
  "int hiprtcCreateProgram(_Out_ void **program, const char *source, const char *name, int headers, void *headerSources, void *headerNames)",
  "int hiprtcCompileProgram(void *program, int count, const char **options)",
  "int hiprtcGetProgramLogSize(void *program, _Out_ size_t *size)",
  "int hiprtcGetProgramLog(void *program, _Out_ uint8_t *log)",
  "int hiprtcGetCodeSize(void *program, _Out_ size_t *size)",
  "int hiprtcGetCode(void *program, _Out_ uint8_t *code)",
  "int hiprtcDestroyProgram(_Inout_ void **program)",
];

/**
 * `TSGRAD_LIBHIPRTC` (a path), else the sonames of ROCm 6 and 7. Never ROCm 5's hiprtc (inside libamdhip64.so.5,
 * whose hiprtcVersion answered 9.0 here): by soname, not by version.
 */
const hiprtcCandidates = (): string[] =>
  process.env.TSGRAD_LIBHIPRTC
    ? [process.env.TSGRAD_LIBHIPRTC]
    : ["libhiprtc.so.7", "libhiprtc.so.6", "/opt/rocm/lib/libhiprtc.so.7", "/opt/rocm/lib/libhiprtc.so.6"];

/** The emulator's version: its programs never pass for a real compiler's. */
const EMULATOR_MAJOR = 99;

let hiprtc: Hiprtc | null | undefined;

/** hiprtc of ROCm 6 or newer (or the emulator's), or null (probed once). */
export function loadHiprtc(): Hiprtc | null {
  if (hiprtc !== undefined) return hiprtc;
  for (const name of hiprtcCandidates()) {
    try {
      const lib = koffi.load(name);
      const fns: Record<string, Fn> = {};
      for (const s of HIPRTC_SIGNATURES) fns[s.slice(4, s.indexOf("("))] = lib.func(s) as Fn;
      const [major, minor]: unknown[][] = [[0], [0]];
      if (fns.hiprtcVersion!(major, minor) !== 0) continue;
      return (hiprtc = {
        version: `hiprtc ${major[0]}.${minor[0]}`,
        emulated: major[0] === EMULATOR_MAJOR,
        fns,
      });
    } catch {
      // the next candidate
    }
  }
  return (hiprtc = null);
}

let hipccPath: string | null | undefined;

/** `hipcc` on the PATH, else under `$ROCM_PATH` or /opt/rocm; null when there is none (probed once). */
export function findHipcc(): string | null {
  if (hipccPath !== undefined) return hipccPath;
  const candidates = [
    "hipcc",
    ...(process.env.ROCM_PATH ? [join(process.env.ROCM_PATH, "bin", "hipcc")] : []),
    "/opt/rocm/bin/hipcc",
  ];
  hipccPath =
    candidates.find((c) => spawnSync(c, ["--version"], { stdio: "ignore", env: hipccEnv() }).status === 0) ?? null;
  return hipccPath;
}

/** hipcc targets AMD even where nvcc is on the PATH (it would pick NVIDIA's platform). */
const hipccEnv = (): NodeJS.ProcessEnv => ({ ...process.env, HIP_PLATFORM: "amd" });

/** The compiler compileHip uses, or null where there is none. */
export function hipCompilerName(): string | null {
  return loadHiprtc()?.version ?? (findHipcc() ? "hipcc" : null);
}

/** Counts compiled and cached code objects, for tests and DEBUG output. */
export const hipCompileStats = { compiled: 0, cached: 0 };

/** What compileHip needs to know before compiling: the cache file of this source (and that a compiler exists). */
function cachePath(source: string, arch: string, what: string): string {
  if (!/^gfx[0-9]+[0-9a-f]{2}$/.test(arch))
    throw new CompileError(`AMD: cannot compile ${what}: "${arch}" is not an AMD GPU architecture (gfx1100, ...)`);
  const compiler = hipCompilerName();
  if (!compiler)
    throw new CompileError(
      `AMD: cannot compile ${what}: neither hiprtc of ROCm 6+ (set TSGRAD_LIBHIPRTC) nor hipcc (ROCm, or Debian's hipcc package) was found`,
    );
  const hash = createHash("sha256").update(`${compiler}|${arch}\0${source}`).digest("hex").slice(0, 32);
  return join(cacheDir(), "hip", `${hash}.co`);
}

/** Checks a fresh code object and keeps it (and its source, for reading) in the cache. */
function keep(code: Uint8Array, source: string, arch: string, what: string, path: string, started: number): Uint8Array {
  if (!loadHiprtc()?.emulated) checkCodeObject(code, arch, what);
  mkdirSync(join(path, ".."), { recursive: true });
  writeAtomic(path, code);
  writeAtomic(path.replace(/\.co$/, ".hip"), source);
  hipCompileStats.compiled++;
  if (debugLevel() >= 3)
    console.error(
      `tsgrad: ${hipCompilerName()} compiled ${what} for ${arch} in ${(performance.now() - started).toFixed(0)} ms`,
    );
  return code;
}

/** The cached code object at `path`, counted; undefined where there is none yet. */
function cached(path: string): Uint8Array | undefined {
  if (!existsSync(path)) return undefined;
  hipCompileStats.cached++;
  return readFileSync(path);
}

/** The code object of `source` for `arch` (e.g. "gfx1100"); `what` names the kernels in errors. Throws CompileError. */
export function compileHip(source: string, arch: string, what: string): Uint8Array {
  const path = cachePath(source, arch, what);
  const hit = cached(path);
  if (hit) return hit;
  const started = performance.now();
  const rtc = loadHiprtc();
  if (rtc) return keep(compileHiprtc(rtc, source, arch, what), source, arch, what, path, started);
  const hipcc = findHipcc()!;
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-hipcc-"));
  try {
    writeFileSync(join(dir, "kernel.hip"), source);
    const run = spawnSync(hipcc, hipccArgs(hipcc, arch, dir), { encoding: "utf8", env: hipccEnv() });
    if (run.status !== 0) throw hipccFailure(what, arch, run.stderr || run.stdout || run.error?.message);
    return keep(readFileSync(join(dir, "kernel.co")), source, arch, what, path, started);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Several modules at once, each as compileHip compiles it: `parallel` hipcc processes (a step's kernels, a test's),
 * or, with hiprtc, one after another in this thread. Rejects with the first CompileError.
 */
export async function compileHipAll(
  modules: readonly { readonly source: string; readonly what: string }[],
  arch: string,
  parallel = availableParallelism(),
): Promise<Uint8Array[]> {
  const hipcc = loadHiprtc() ? null : findHipcc();
  if (!hipcc) return modules.map((m) => compileHip(m.source, arch, m.what));
  const results: Uint8Array[] = new Array(modules.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < modules.length) {
      const i = next++;
      const { source, what } = modules[i]!;
      const path = cachePath(source, arch, what);
      const hit = cached(path);
      if (hit) {
        results[i] = hit;
        continue;
      }
      const started = performance.now();
      const dir = mkdtempSync(join(tmpdir(), "tsgrad-hipcc-"));
      try {
        writeFileSync(join(dir, "kernel.hip"), source);
        const args = hipccArgs(hipcc, arch, dir);
        const { status, log } = await new Promise<{ status: number | null; log: string }>((resolve) => {
          const child = spawn(hipcc, args, { env: hipccEnv(), stdio: ["ignore", "ignore", "pipe"] });
          let log = "";
          child.stderr.on("data", (d) => (log += d));
          child.on("error", (e) => resolve({ status: -1, log: e.message }));
          child.on("close", (code) => resolve({ status: code, log }));
        });
        if (status !== 0) throw hipccFailure(what, arch, log);
        results[i] = keep(readFileSync(join(dir, "kernel.co")), source, arch, what, path, started);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(parallel, modules.length)) }, worker));
  return results;
}

const hipccFailure = (what: string, arch: string, log = ""): CompileError =>
  new CompileError(`hipcc failed to compile ${what} for ${arch}:\n${log.slice(0, 4000)}`);

/** hipcc's arguments for `dir`/kernel.hip -> `dir`/kernel.co. */
function hipccArgs(hipcc: string, arch: string, dir: string): string[] {
  const libs = deviceLibraries(hipcc, arch);
  return [
    `--offload-arch=${arch}`,
    // device code only, as a plain code object rather than a host/device bundle
    "--cuda-device-only",
    "--no-gpu-bundle-output",
    ...(libs ? [`--rocm-device-lib-path=${libs}`] : []),
    ...SEMANTICS,
    "-w",
    "-c",
    "-o",
    join(dir, "kernel.co"),
    join(dir, "kernel.hip"),
  ];
}

/**
 * Flags with the semantics every kernel is written for: no contraction of a * b + c into one rounding; and loops
 * unrolled only where the renderer asks (#pragma unroll): AMD's LLVM unrolls constant-count loops whole on its own,
 * hoisting every iteration's loads, which spilled BERT's kernels to scratch memory by hundreds of registers (the
 * LAMB norms kernel: 1,352; with this flag, none).
 */
const SEMANTICS = ["-O3", "-ffp-contract=off", "-fno-unroll-loops"];

function compileHiprtc({ fns }: Hiprtc, source: string, arch: string, what: string): Uint8Array {
  const program: unknown[] = [null];
  if (fns.hiprtcCreateProgram!(program, source, `${what.replace(/\W/g, "_")}.hip`, 0, null, null) !== 0)
    throw new CompileError(`hiprtc could not create a program for ${what}`);
  try {
    const options = [`--offload-arch=${arch}`, ...SEMANTICS];
    if (fns.hiprtcCompileProgram!(program[0], options.length, options) !== 0) {
      const size: unknown[] = [0];
      fns.hiprtcGetProgramLogSize!(program[0], size);
      const log = Buffer.alloc(Number(size[0]));
      fns.hiprtcGetProgramLog!(program[0], log);
      throw new CompileError(
        `hiprtc failed to compile ${what} for ${arch}:\n${log.toString("utf8").replace(/\0+$/, "").slice(0, 4000)}`,
      );
    }
    const size: unknown[] = [0];
    fns.hiprtcGetCodeSize!(program[0], size);
    const code = Buffer.alloc(Number(size[0]));
    fns.hiprtcGetCode!(program[0], code);
    return code;
  } finally {
    fns.hiprtcDestroyProgram!(program);
  }
}

/** Where ROCm's device libraries (ockl.bc, oclc_*.bc) may be, newest layouts first. */
const libraryFolders = (): string[] => [
  ...(process.env.ROCM_PATH ? [join(process.env.ROCM_PATH, "amdgcn", "bitcode")] : []),
  "/opt/rocm/amdgcn/bitcode",
  "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode",
];

/** The ISA version the device libraries key an architecture by: gfx1100 -> 11000, gfx90a -> 9010. */
export function isaVersion(arch: string): number {
  const [, major, minor, stepping] = /^gfx(\d+)([0-9a-f])([0-9a-f])$/.exec(arch) ?? [];
  if (!major) throw new CompileError(`"${arch}" is not an AMD GPU architecture`);
  return Number(major) * 1000 + parseInt(minor!, 16) * 100 + parseInt(stepping!, 16);
}

const libraryFolderOf = new Map<string, string | undefined>();

/**
 * A device-library folder to give hipcc for `arch`: undefined where the installed libraries have it (hipcc finds
 * them), else a folder of links to them plus the architecture's ISA-version library, built once into the cache.
 */
function deviceLibraries(hipcc: string, arch: string): string | undefined {
  if (libraryFolderOf.has(arch)) return libraryFolderOf.get(arch);
  const isa = `oclc_isa_version_${arch.slice(3)}.bc`;
  const installed = libraryFolders().find((d) => existsSync(join(d, "ockl.bc")));
  let folder: string | undefined;
  if (installed && !existsSync(join(installed, isa))) {
    folder = join(cacheDir(), "hip", `device-libs-${arch}`);
    if (!existsSync(join(folder, isa))) buildLibraryFolder(hipcc, installed, folder, arch, isa);
  }
  libraryFolderOf.set(arch, folder);
  return folder;
}

function buildLibraryFolder(hipcc: string, installed: string, folder: string, arch: string, isa: string): void {
  // built beside the folder and renamed into place whole: no process ever sees a folder without the library
  const building = `${folder}.${process.pid}`;
  rmSync(building, { recursive: true, force: true });
  try {
    mkdirSync(building, { recursive: true });
    for (const file of readdirSync(installed))
      if (file.endsWith(".bc")) symlinkSync(join(installed, file), join(building, file));
    // hidden and constant, as the shipped libraries define it
    writeFileSync(
      join(building, "isa.c"),
      `const __attribute__((visibility("hidden"))) int __oclc_ISA_version = ${isaVersion(arch)};\n`,
    );
    const clang = amdgpuClang(hipcc);
    const run = spawnSync(
      clang,
      [
        "-target",
        "amdgcn-amd-amdhsa",
        `-mcpu=${arch}`,
        "-nogpulib",
        "-emit-llvm",
        "-c",
        "-o",
        join(building, isa),
        join(building, "isa.c"),
      ],
      { encoding: "utf8" },
    );
    if (run.status !== 0)
      throw new CompileError(
        `AMD: ${installed} has no device library for ${arch} and ${clang} could not build ${isa}:\n${(run.stderr || run.error?.message || "").slice(0, 2000)}`,
      );
    rmSync(join(building, "isa.c"));
    try {
      renameSync(building, folder);
    } catch (e) {
      // another process renamed its folder into place first: theirs is as good
      if (!existsSync(join(folder, isa))) throw e;
    }
  } finally {
    rmSync(building, { recursive: true, force: true });
  }
}

/** The clang hipcc drives (it has the AMDGPU target): `$HIP_CLANG_PATH/clang`, ROCm's, or the newest Debian clang. */
function amdgpuClang(hipcc: string): string {
  const candidates = [
    ...(process.env.HIP_CLANG_PATH ? [join(process.env.HIP_CLANG_PATH, "clang")] : []),
    join(hipcc, "..", "..", "llvm", "bin", "clang"),
    ...[19, 18, 17, 16, 15].map((v) => `clang-${v}`),
    "clang",
  ];
  return candidates.find((c) => spawnSync(c, ["--version"], { stdio: "ignore" }).status === 0) ?? "clang";
}

/** ELF's machine number for AMD GPUs. */
const EM_AMDGPU = 224;
/** LLVM's EF_AMDGPU_MACH values (the low byte of e_flags) of the architectures checked by name. */
const MACH: Readonly<Record<string, number>> = { gfx1030: 0x36, gfx1100: 0x41 };

/** Throws unless `code` is an AMD GPU ELF object for `arch` (a compiler that silently built for another target). */
export function checkCodeObject(code: Uint8Array, arch: string, what: string): void {
  const view = new DataView(code.buffer, code.byteOffset, code.byteLength);
  const isElf = code.length >= 52 && view.getUint32(0) === 0x7f454c46;
  if (!isElf || view.getUint16(18, true) !== EM_AMDGPU)
    throw new CompileError(`AMD: the compiler's output for ${what} is not an AMD GPU code object (ELF, EM_AMDGPU)`);
  const mach = view.getUint32(48, true) & 0xff;
  if (MACH[arch] !== undefined && mach !== MACH[arch])
    throw new CompileError(
      `AMD: the code object for ${what} is for machine 0x${mach.toString(16)}, not ${arch} (0x${MACH[arch]!.toString(16)})`,
    );
}
