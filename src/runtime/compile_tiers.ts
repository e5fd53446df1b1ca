// Two tiers of C compilation, so that a cold start does not wait for -O3. A round of kernels missing from the
// cache with much source (a model's first step: 200 kernels, 1 MB of C) is compiled at -Og first, in about 40% of
// the compiler's time (its kernels run about half as fast), and the same sources are compiled at -O3 in the
// background, by niced child processes that publish each library into the cache by a hard link as a foreground
// build does. A kernel switches to its -O3 build at a run (a graph at a replay) once that is in the cache; a
// later process finds the -O3 build and never compiles at -Og. Both tiers have the same flags but the level (the
// miscompile workarounds included), and C fixes the arithmetic: the results are the same bits.
// CPU_TIERED=0 compiles at -O3 at once; CPU_TIERED=2 tiers every round, however small (tests).
import { spawn } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { setPriority } from "node:os";
import { join } from "node:path";
import { cacheDir, debugLevel, getenv } from "../helpers.ts";
import {
  type CFunction,
  type CompiledFunction,
  type Compiler,
  atLevel,
  balancedBatches,
  compileEach,
  hashOf,
  libraryOf,
  shellQuote,
  writeBatches,
} from "./compiler_cache.ts";

/**
 * The level a large round is compiled at first: -Og compiled BERT-tiny's first step in 1.9 s where -O1 took 2.6,
 * and ran it about as fast (a cold first step 0.5-0.8 s sooner). Neither vectorises loops, so gcc 12.2's wrong
 * vectorisation does not show.
 */
export const QUICK_LEVEL = "-Og";
/** Source characters a round must hold to be tiered: about 0.25 s of -O3 on one core. */
const TIERED_SOURCE = 32 * 1024;
/** How often at most the runs look whether background builds finished (a look is a file check a batch). */
const POLL_MS = 25;
/** The background builds' niceness: a training step's threads come first. */
const NICENESS = 10;

/** A function's final (-O3) library, compiled in the background. */
export interface FinalBuild {
  readonly compiled: CompiledFunction;
  state: "building" | "ready" | "failed";
}

/** A compiled function, and where it is a quick build, the final build it will switch to. */
export type TieredFunction = CompiledFunction & { readonly final?: FinalBuild };

/** Background builds not yet seen finished: each batch's source (its removal says it is done) and its builds. */
const running: { source: string; builds: FinalBuild[] }[] = [];
/** This process's final builds by library path: a function asked for again waits for the same build. */
const builds = new Map<string, FinalBuild>();
let lastPoll = -Infinity;

/** Background batches finished so far, and builds ever started in the background: for graphs, tests and benches. */
export const tierStats = { finished: 0, started: 0 };

/**
 * Each function's library: the final build where the cache has it; else, where the round is large enough to
 * tier, a quick build with its final build under way in the background; else the final build, compiled now.
 */
export function compileTiered(
  compiler: Compiler,
  functions: readonly CFunction[],
): (TieredFunction | { error: string })[] {
  const hashes = functions.map((fn) => hashOf(compiler, fn));
  const finals = hashes.map(libraryOf);
  const missing = functions.map((_, i) => i).filter((i) => !existsSync(finals[i]!.path));
  const mode = getenv("CPU_TIERED", 1);
  const source = missing.reduce((n, i) => n + functions[i]!.code.length, 0);
  if (missing.length === 0 || mode === 0 || (mode === 1 && source < TIERED_SOURCE))
    return compileEach(compiler, functions);
  const quick = compileEach(
    atLevel(compiler, QUICK_LEVEL),
    missing.map((i) => functions[i]!),
  );
  // the final builds of the functions that compiled quickly (one that did not gives its error now)
  const results: (TieredFunction | { error: string })[] = [...finals];
  const toBuild = new Map<string, CFunction>(); // by hash
  missing.forEach((i, m) => {
    const library = quick[m]!;
    if ("error" in library) {
      results[i] = library;
      return;
    }
    const path = finals[i]!.path;
    let final = builds.get(path);
    if (!final) {
      builds.set(path, (final = { compiled: finals[i]!, state: "building" }));
      toBuild.set(hashes[i]!, functions[i]!);
    }
    results[i] = { ...library, final };
  });
  if (toBuild.size > 0) buildInBackground(compiler, toBuild);
  return results;
}

/** Starts the final builds of `byHash`'s functions in niced child processes; never waits for them. */
function buildInBackground(compiler: Compiler, byHash: ReadonlyMap<string, CFunction>): void {
  const dir = join(cacheDir(), "cpu");
  mkdirSync(dir, { recursive: true });
  const jobs = writeBatches(compiler, dir, balancedBatches([...byHash.keys()], byHash), byHash);
  // each batch: build, link its library under each function's name (atomic; one already there stays), tidy up,
  // and remove its source last: the sign that the batch is done, whether it built or not
  const script = jobs.map(({ hashes, stem, command }) => {
    const [library, errors, source] = [".so", ".err", ".c"].map((ext) => shellQuote(`${stem}${ext}`));
    const links = hashes.map((h) => `ln ${library} ${shellQuote(libraryOf(h).path)} 2>/dev/null`).join("; ");
    return `(${command} && { ${links}; }; rm -f ${library} ${errors}; rm -f ${source}) &`;
  });
  const child = spawn("sh", ["-c", [...script, "wait"].join("\n")], { stdio: "ignore" });
  child.on("error", () => {}); // a shell that does not start leaves the sources: the builds stay pending
  if (child.pid !== undefined)
    try {
      setPriority(child.pid, NICENESS);
    } catch {
      // not allowed here: the builds run at the process's priority
    }
  // a process that ends first leaves the builds to finish for the next one
  child.unref();
  for (const { hashes, stem } of jobs)
    running.push({ source: `${stem}.c`, builds: hashes.map((h) => builds.get(libraryOf(h).path)!) });
  tierStats.started += byHash.size;
  if (debugLevel() >= 3)
    console.error(`tsgrad: compiling ${byHash.size} kernel(s) at ${compiler.flags[0]} in the background`);
}

/**
 * Looks (at most every POLL_MS, or now where `now`) whether background batches finished, and marks their builds
 * ready or failed; returns how many batches have finished in all (a graph compares it with what it saw last).
 */
export function pollFinalBuilds(now = false): number {
  if (running.length === 0) return tierStats.finished;
  const time = performance.now();
  if (!now && time - lastPoll < POLL_MS) return tierStats.finished;
  lastPoll = time;
  for (let i = running.length - 1; i >= 0; i--) {
    const batch = running[i]!;
    if (existsSync(batch.source)) continue;
    running.splice(i, 1);
    tierStats.finished++;
    for (const build of batch.builds) {
      build.state = existsSync(build.compiled.path) ? "ready" : "failed";
      if (build.state === "failed" && debugLevel() >= 1)
        console.error(`tsgrad: the background build of ${build.compiled.path} failed; its quick build stays`);
    }
  }
  return tierStats.finished;
}

/** Blocks until every background build has finished, or `timeoutMs` passed; whether all finished (benches, tests). */
export function waitForFinalBuilds(timeoutMs = 600_000): boolean {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  const end = performance.now() + timeoutMs;
  for (pollFinalBuilds(true); running.length > 0 && performance.now() < end; pollFinalBuilds(true))
    Atomics.wait(pause, 0, 0, 10);
  return running.length === 0;
}
