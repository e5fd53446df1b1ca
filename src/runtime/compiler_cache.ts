// C sources -> shared libraries, compiled by the system compiler several at a time and cached on
// disk by a hash of (compiler, flags, machine, source), so a second run compiles nothing.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, linkSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus } from "node:os";
import { join } from "node:path";
import { TsgradError, cacheDir, debugLevel, writeAtomic } from "../helpers.ts";
import { miscompileWorkarounds } from "./compiler_bugs.ts";

export class CompileError extends TsgradError {
  override name = "CompileError";
}

export interface Compiler {
  readonly command: string;
  readonly flags: readonly string[];
  /** The first line of `--version`. */
  readonly version: string;
  /** Compiler version, flags and CPU model: part of every cache key. */
  readonly identity: string;
}

const compilerOf = (command: string, version: string, flags: readonly string[]): Compiler => ({
  command,
  flags,
  version,
  identity: `${version}|${flags.join(" ")}|${cpus()[0]?.model ?? ""}`,
});

/** The same compiler and flags at another optimisation level (`-O1`): its own cache keys. */
export const atLevel = (compiler: Compiler, level: string): Compiler =>
  compilerOf(
    compiler.command,
    compiler.version,
    compiler.flags.map((f) => (/^-O\d$/.test(f) ? level : f)),
  );

let probed: Compiler | null | undefined;

/** The working C compiler (`$CC`, else `cc`) with OpenMP when it links, or null when none works. Probed once. */
export function findCompiler(): Compiler | null {
  if (probed !== undefined) return probed;
  const command = process.env.CC || "cc";
  const version = spawnSync(command, ["--version"], { encoding: "utf8" });
  if (version.status !== 0) return (probed = null);
  // no contraction into fused multiply-adds behind our back: elementwise results match the JS reference bit for bit.
  // No trapping math: kernels never read floating-point exceptions, and without it gcc keeps the branches of
  // every float select and compare, so loops holding one (a GELU, a clamp) do not vectorise; results are the same.
  // No errno from math functions: kernels never read it, and a sqrtf that may set it is a call with a branch
  // around it, so no loop holding one vectorised (layer norms, LAMB's update); the
  // square root itself is the same correctly rounded instruction either way.
  const base = [
    "-O3",
    "-march=native",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fno-math-errno",
    "-fPIC",
    "-shared",
    "-std=gnu11",
  ];
  // -z nodelete (GNU and LLVM linkers): a kernel library, and the OpenMP runtime it pulls in, stays mapped until
  // the process ends; unloaded at exit while OpenMP's idle worker threads still ran its code, node crashed
  // (SIGSEGV) on some exits. Linkers without it (macOS) get the flags without.
  const nodelete = "-Wl,-z,nodelete";
  const probeSource =
    "#include <stdint.h>\nint tg_kernel(int x) { int s = 0;\n#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < x; i++) s += i;\nreturn s; }\n";
  // wrong code some compilers make of some loops (gcc 12.2's), stepped around for the kernels it touches
  const workarounds = miscompileWorkarounds(command, version.stdout, base, join(cacheDir(), "cpu"));
  base.push(...workarounds.flags);
  if (workarounds.found.length > 0 && debugLevel() >= 1)
    console.error(
      `tsgrad: ${command} vectorises some loops wrongly (probes ${workarounds.found.join(", ")}, a compiler bug); compiling with ${workarounds.flags.join(" ")}`,
    );
  for (const flags of [[...base, nodelete, "-fopenmp"], [...base, "-fopenmp"], [...base, nodelete], base]) {
    const compiler = compilerOf(command, version.stdout.split("\n")[0]!, flags);
    try {
      compileLibraries(compiler, [{ prelude: "", code: probeSource }]);
      probed = compiler;
      if (debugLevel() >= 1) console.error(`tsgrad: C compiler ${command} ${flags.join(" ")}`);
      return probed;
    } catch {
      // try without nodelete, without OpenMP, then give up
    }
  }
  return (probed = null);
}

let widths: readonly number[] | undefined;

/**
 * The register-tile lane runs the target takes as C vectors (renderer/c_lanes.ts), from the compiler's own
 * macros for its flags: 16 and 8 floats with AVX-512, 8 with AVX and FMA (a 16-lane run as two: a 64-byte
 * vector without AVX-512 goes through memory, several times slower than the scalar form), none elsewhere.
 * Then `prelude`'s vector helpers must compile for them with this compiler (they call x86 builtins that gcc
 * and clang name alike; another compiler gets the scalar form rather than kernels that do not build).
 */
export function vectorLaneWidths(prelude: string): readonly number[] {
  if (widths) return widths;
  const compiler = findCompiler();
  if (!compiler) return (widths = []);
  // the answer is kept by compiler (command and identity) and prelude: asking costs two compiler runs a start
  const key = createHash("sha256")
    .update(compiler.command)
    .update("\0")
    .update(compiler.identity)
    .update("\0")
    .update(prelude)
    .digest("hex")
    .slice(0, 32);
  const answer = join(cacheDir(), "cpu", `lanes-${key}.txt`);
  if (existsSync(answer)) {
    const text = readFileSync(answer, "utf8").trim();
    const kept = text === "" ? [] : text.split(",").map(Number);
    if (kept.every((w) => w === 8 || w === 16)) return (widths = kept);
  }
  widths = probeLaneWidths(compiler, prelude);
  mkdirSync(join(cacheDir(), "cpu"), { recursive: true });
  writeAtomic(answer, widths.join(","));
  return widths;
}

/** Asks the compiler which lane widths its target has and whether `prelude`'s vector helpers build for them. */
function probeLaneWidths(compiler: Compiler, prelude: string): readonly number[] {
  const targetFlags = compiler.flags.filter((f) => f.startsWith("-m"));
  const macros =
    spawnSync(compiler.command, [...targetFlags, "-dM", "-E", "-x", "c", "-"], { input: "", encoding: "utf8" })
      .stdout ?? "";
  const has = (name: string): boolean => new RegExp(`^#define ${name} `, "m").test(macros);
  const candidates = has("__AVX512F__") ? [16, 8] : has("__AVX__") && has("__FMA__") ? [8] : [];
  if (candidates.length === 0) return [];
  const uses = candidates
    .map((w) => `  { tg_f32x${w} v = {0}; v = tg_fma${w}(a, w, v); memcpy(out, &v, sizeof v); }`)
    .join("\n");
  const probe = `${prelude}\nvoid tg_probe(float* restrict out, const float* restrict w, float a) {\n${uses}\n}\n`;
  const check = spawnSync(
    compiler.command,
    [...targetFlags, "-std=gnu11", "-fsyntax-only", "-Werror=implicit-function-declaration", "-x", "c", "-"],
    { input: probe, encoding: "utf8" },
  );
  if (check.status !== 0 && debugLevel() >= 1)
    console.error(
      `tsgrad: C compiler ${compiler.command} cannot build the vector helpers; register tiles stay scalar\n${check.stderr}`,
    );
  return check.status === 0 ? candidates : [];
}

/** A C function to compile: `code` defines it under the name `tg_kernel`, after `prelude` (shared helpers). */
export interface CFunction {
  readonly prelude: string;
  readonly code: string;
}

/** Where a compiled function lives: its library in the cache and its symbol there. */
export interface CompiledFunction {
  readonly path: string;
  readonly symbol: string;
}

/** The cache's name for `fn` compiled by `compiler`. */
export const hashOf = (compiler: Compiler, fn: CFunction): string =>
  createHash("sha256")
    .update(compiler.identity)
    .update("\0")
    .update(fn.prelude)
    .update("\0")
    .update(fn.code)
    .digest("hex")
    .slice(0, 32);

/** Where the function named `hash` lives in the cache (whether it is there yet or not). */
export const libraryOf = (hash: string): CompiledFunction => ({
  path: join(cacheDir(), "cpu", `${hash}.so`),
  symbol: `tg_${hash}`,
});

/** Counts compiled and cached functions and the rounds of compiler runs that built them, for tests and DEBUG output. */
export const compileStats = { compiled: 0, cached: 0, rounds: 0, seconds: 0 };

/**
 * Each function's library, compiling the ones not in the cache. Compiler start-up dominates small
 * kernels, so missing functions are batched into one translation unit per core, compiled in parallel;
 * each function's cache entry is a hard link to its batch's library. Throws CompileError with the compiler's message.
 */
export function compileLibraries(compiler: Compiler, functions: readonly CFunction[]): CompiledFunction[] {
  const compiled = compileEach(compiler, functions);
  const failed = compiled.find((c) => "error" in c);
  if (failed && "error" in failed) throw new CompileError(failed.error);
  return compiled as CompiledFunction[];
}

/** Like compileLibraries, but a function that does not compile gives its error instead. */
export function compileEach(
  compiler: Compiler,
  functions: readonly CFunction[],
  { timeoutS }: { timeoutS?: number } = {},
): (CompiledFunction | { error: string })[] {
  const dir = join(cacheDir(), "cpu");
  const hashes = functions.map((fn) => hashOf(compiler, fn));
  const entries = hashes.map(libraryOf);
  const missing = [...new Set(hashes.filter((_, i) => !existsSync(entries[i]!.path)))];
  compileStats.cached += functions.length - missing.length;
  const errors = new Map<string, string>();
  if (missing.length > 0) {
    mkdirSync(dir, { recursive: true });
    const start = performance.now();
    const byHash = new Map(hashes.map((h, i) => [h, functions[i]!]));
    const batches = balancedBatches(missing, byHash);
    const failedBatches = buildBatches(compiler, dir, batches, byHash, undefined, timeoutS);
    // a failed batch is compiled one function at a time, to pin the error on the function that has it
    for (const batch of failedBatches) {
      const singles = batch.map((h) => [h]);
      const stillFailing = new Set(buildBatches(compiler, dir, singles, byHash, errors, timeoutS).flat());
      for (const h of stillFailing) errors.set(h, errors.get(h) ?? `compiling ${join(dir, `${h}.c`)} failed`);
    }
    compileStats.compiled += missing.length;
    compileStats.rounds++;
    compileStats.seconds += (performance.now() - start) / 1000;
    if (debugLevel() >= 3)
      console.error(
        `tsgrad: compiled ${missing.length} kernel(s) in ${batches.length} batch(es) in ${(performance.now() - start).toFixed(0)} ms`,
      );
  }
  return entries.map((e, i) => (errors.has(hashes[i]!) ? { error: errors.get(hashes[i]!)! } : e));
}

/**
 * `hashes` in one batch a core, of about equal source length (the compiler's time grows with it): longest first,
 * each into the batch with the least so far. A batch takes as long as its slowest: batches by count were uneven.
 */
export function balancedBatches(hashes: readonly string[], byHash: ReadonlyMap<string, CFunction>): string[][] {
  const width = Math.min(hashes.length, Math.max(1, availableParallelism()));
  const batches = Array.from({ length: width }, () => ({ hashes: [] as string[], length: 0 }));
  const longestFirst = [...hashes].sort((a, b) => byHash.get(b)!.code.length - byHash.get(a)!.code.length);
  for (const hash of longestFirst) {
    const lightest = batches.reduce((a, b) => (b.length < a.length ? b : a));
    lightest.hashes.push(hash);
    lightest.length += byHash.get(hash)!.code.length;
  }
  return batches.map((b) => b.hashes);
}

/** `s` as one word of a POSIX shell command. */
export const shellQuote = (s: string): string => `'${s.replace(/'/g, "'\\''")}'`;

/** A batch's translation unit `stem.c`, and the shell command that builds it into `stem.so` (errors in `stem.err`). */
export interface BatchJob {
  readonly hashes: readonly string[];
  readonly stem: string;
  readonly command: string;
}

/**
 * Writes each batch's translation unit, and each function's own source beside its library (for checks such as
 * test/fuzz/kernel_diff.py), under names no other process uses.
 */
export function writeBatches(
  compiler: Compiler,
  dir: string,
  batches: readonly (readonly string[])[],
  byHash: ReadonlyMap<string, CFunction>,
): BatchJob[] {
  return batches.map((hashes) => {
    const stem = join(dir, `batch.${process.pid}.${Math.random().toString(36).slice(2)}`);
    const prelude = byHash.get(hashes[0]!)!.prelude;
    const units = hashes.map((h) => {
      const fn = byHash.get(h)!;
      writeAtomic(join(dir, `${h}.c`), `${fn.prelude}\n${fn.code}\n`);
      return fn.code.replace(/\btg_kernel\b/g, `tg_${h}`);
    });
    writeFileSync(`${stem}.c`, `${prelude}\n${units.join("\n\n")}\n`);
    const build = [compiler.command, ...compiler.flags, "-o", `${stem}.so`, `${stem}.c`, "-lm"]
      .map(shellQuote)
      .join(" ");
    return { hashes, stem, command: `${build} 2> ${shellQuote(`${stem}.err`)}` };
  });
}

/**
 * Compiles each batch (one library per batch, in parallel); returns the batches that failed. `timeoutS`: a
 * compiler run still going after that many seconds is killed with its children and its batch fails (gcc can
 * take many minutes on a long straight-line kernel, and a BEAM candidate is not worth that).
 */
function buildBatches(
  compiler: Compiler,
  dir: string,
  batches: readonly string[][],
  byHash: ReadonlyMap<string, CFunction>,
  errors?: Map<string, string>,
  timeoutS?: number,
): string[][] {
  const jobs = writeBatches(compiler, dir, batches, byHash);
  const limit = timeoutS !== undefined && hasTimeoutCommand() ? `timeout -s KILL ${timeoutS} ` : "";
  // a run killed while linking may leave part of a library: whatever did not finish leaves none
  const script = [
    ...jobs.map(({ command, stem }) => `{ ${limit}${command} || rm -f ${shellQuote(`${stem}.so`)}; } &`),
    "wait",
  ].join("\n");
  spawnSync("sh", ["-c", script], { stdio: "ignore" });
  const failed: string[][] = [];
  for (const { hashes, stem } of jobs) {
    if (existsSync(`${stem}.so`)) {
      for (const h of hashes) linkInto(`${stem}.so`, join(dir, `${h}.so`));
      rmSync(`${stem}.so`);
    } else {
      failed.push([...hashes]);
      if (errors && hashes.length === 1) {
        const message = existsSync(`${stem}.err`) ? readFileSync(`${stem}.err`, "utf8").slice(0, 4000) : "";
        errors.set(
          hashes[0]!,
          `compiling ${join(dir, `${hashes[0]}.c`)} failed${message ? `:\n${message}` : limit ? ` (no message: killed after ${timeoutS} s?)` : ""}`,
        );
      }
    }
    rmSync(`${stem}.c`, { force: true });
    rmSync(`${stem}.err`, { force: true });
  }
  return failed;
}

let timeoutCommand: boolean | undefined;
/** Whether coreutils' `timeout` is there to limit a compiler run (Linux has it; a bare macOS may not). */
function hasTimeoutCommand(): boolean {
  timeoutCommand ??= spawnSync("timeout", ["1", "true"], { stdio: "ignore" }).status === 0;
  return timeoutCommand;
}

/** Publishes a library under its cache name (another process may have published it first: fine). */
function linkInto(source: string, target: string): void {
  try {
    linkSync(source, target);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e;
  }
}
