// C sources -> shared libraries, compiled by the system compiler several at a time and cached on
// disk by a hash of (compiler, flags, machine, source), so a second run compiles nothing.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, homedir } from "node:os";
import { join } from "node:path";
import { TsgradError, debugLevel } from "../helpers.ts";

export class CompileError extends TsgradError {
  override name = "CompileError";
}

/** `$TSGRAD_CACHE`, else `$XDG_CACHE_HOME/tsgrad`, else `~/.cache/tsgrad`. Read live so tests can point it elsewhere. */
export function cacheDir(): string {
  if (process.env.TSGRAD_CACHE) return process.env.TSGRAD_CACHE;
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "tsgrad");
}

/** Writes a file so readers see either nothing or all of it. */
export function writeAtomic(path: string, data: string | Uint8Array): void {
  const temp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
  writeFileSync(temp, data);
  renameSync(temp, path);
}

interface Compiler {
  readonly command: string;
  readonly flags: readonly string[];
  /** Compiler version, flags and CPU model: part of every cache key. */
  readonly identity: string;
}

let probed: Compiler | null | undefined;

/** The working C compiler (`$CC`, else `cc`) with OpenMP when it links, or null when none works. Probed once. */
export function findCompiler(): Compiler | null {
  if (probed !== undefined) return probed;
  const command = process.env.CC || "cc";
  const version = spawnSync(command, ["--version"], { encoding: "utf8" });
  if (version.status !== 0) return (probed = null);
  // no contraction into fused multiply-adds behind our back: elementwise results match the JS reference bit for bit
  const base = ["-O3", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-std=gnu11"];
  const identity = (flags: readonly string[]) => `${version.stdout.split("\n")[0]}|${flags.join(" ")}|${cpus()[0]?.model ?? ""}`;
  const probeSource = "#include <stdint.h>\nint tg_probe(int x) { int s = 0;\n#pragma omp parallel for reduction(+:s)\nfor (int i = 0; i < x; i++) s += i;\nreturn s; }\n";
  for (const flags of [[...base, "-fopenmp"], base]) {
    const compiler = { command, flags, identity: identity(flags) };
    try {
      compileLibraries(compiler, [probeSource]);
      probed = compiler;
      if (debugLevel() >= 1) console.error(`tsgrad: C compiler ${command} ${flags.join(" ")}`);
      return probed;
    } catch {
      // try without OpenMP, then give up
    }
  }
  return (probed = null);
}

/** The path of the shared library for `source` in the cache. */
function libraryPath(compiler: Compiler, source: string): string {
  const hash = createHash("sha256").update(compiler.identity).update("\0").update(source).digest("hex").slice(0, 32);
  return join(cacheDir(), "cpu", `${hash}.so`);
}

/** Counts compiler runs, for tests and DEBUG output. */
export const compileStats = { compiled: 0, cached: 0, seconds: 0 };

/**
 * The shared library of each source, compiling the ones not in the cache in parallel
 * (one compiler process per core). Throws CompileError with the compiler's message.
 */
export function compileLibraries(compiler: Compiler, sources: readonly string[]): string[] {
  const paths = compileEach(compiler, sources);
  const failed = paths.find((p) => typeof p !== "string");
  if (failed) throw new CompileError(failed.error);
  return paths as string[];
}

/** Like compileLibraries, but each source that does not compile gives its error instead of a path. */
export function compileEach(compiler: Compiler, sources: readonly string[]): (string | { error: string })[] {
  const paths = sources.map((src) => libraryPath(compiler, src));
  const missing = [...new Set(paths.map((p, i) => (existsSync(p) ? -1 : i)).filter((i) => i >= 0).map((i) => paths[i]!))];
  compileStats.cached += sources.length - missing.length;
  if (missing.length === 0) return paths;
  const dir = join(cacheDir(), "cpu");
  mkdirSync(dir, { recursive: true });
  const start = performance.now();
  const jobs = missing.map((path) => {
    const source = sources[paths.indexOf(path)]!;
    const stem = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}`;
    writeAtomic(path.replace(/\.so$/, ".c"), source);
    writeFileSync(`${stem}.c`, source);
    return { path, stem };
  });
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const width = Math.max(1, availableParallelism());
  const script: string[] = [];
  jobs.forEach(({ stem }, i) => {
    script.push(`${[compiler.command, ...compiler.flags, "-o", `${stem}.so`, `${stem}.c`, "-lm"].map(quote).join(" ")} 2> ${quote(`${stem}.err`)} &`);
    if ((i + 1) % width === 0) script.push("wait");
  });
  script.push("wait");
  spawnSync("sh", ["-c", script.join("\n")], { stdio: "ignore" });
  compileStats.compiled += jobs.length;
  compileStats.seconds += (performance.now() - start) / 1000;
  if (debugLevel() >= 3) console.error(`tsgrad: compiled ${jobs.length} kernel(s) in ${(performance.now() - start).toFixed(0)} ms`);
  const errors = new Map<string, string>();
  for (const { path, stem } of jobs) {
    if (existsSync(`${stem}.so`)) renameSync(`${stem}.so`, path);
    else errors.set(path, `compiling ${path.replace(/\.so$/, ".c")} failed:\n${readFileSync(`${stem}.err`, "utf8").slice(0, 4000)}`);
    rmSync(`${stem}.c`, { force: true });
    rmSync(`${stem}.err`, { force: true });
  }
  return paths.map((p) => (errors.has(p) ? { error: errors.get(p)! } : p));
}
