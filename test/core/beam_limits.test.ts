// BEAM's stopping rules and progress, with a stand-in timer (no compiler): BEAM_MIN_PROGRESS (microseconds,
// tinygrad's knob) skips kernels faster than it and ends a search whose round gains less; a search says
// on stderr that it runs.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tensor, type UOp } from "../../src/index.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { createSchedule } from "../../src/engine/schedule.ts";
import { beamSearch } from "../../src/engine/search.ts";

const cache = mkdtempSync(join(tmpdir(), "tsgrad-beam-"));
after(() => rmSync(cache, { recursive: true, force: true }));

/** A 32x32 matmul's kernel (JS device: lowered, never compiled). */
function matmulKernel(): KernelIR {
  const [a, b] = [Tensor.rand([32, 32], { device: "JS" }), Tensor.rand([32, 32], { device: "JS" })];
  Tensor.realizeAll([a, b]);
  const item = createSchedule([a.matmul(b).node as UOp]).items.find((i) => i.kind === "kernel")!;
  return (item as { kernel: KernelIR }).kernel;
}

/**
 * Runs a search with `env`, timing the n-th batch of candidates with `seconds(n, count)`; returns the batches'
 * sizes and what went to stderr. Each run names its own device, so no run finds another's choice cached.
 */
let runs = 0;
function search(
  env: Record<string, string>,
  seconds: (batch: number, count: number) => number[],
): { batches: number[]; stderr: string } {
  const saved = { ...process.env };
  const lines: string[] = [];
  const error = console.error;
  console.error = (...args: unknown[]) => void lines.push(args.join(" "));
  Object.assign(process.env, { TSGRAD_CACHE: cache, DEBUG: "0", ...env });
  const batches: number[] = [];
  try {
    beamSearch(matmulKernel(), `TEST${runs++}`, (kernels) => {
      batches.push(kernels.length);
      return seconds(batches.length - 1, kernels.length);
    });
  } finally {
    console.error = error;
    for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
    Object.assign(process.env, saved);
  }
  return { batches, stderr: lines.join("\n") };
}

// first: only the process's first search announces itself
test("a search announces itself on stderr without DEBUG", () => {
  const { stderr } = search({ BEAM: "2" }, (_, n) => new Array(n).fill(1e-3));
  // the first search of the process says what runs and where the choices are kept
  assert.match(stderr, /BEAM=2: searching kernel options \(once: the choices are cached in .*beam\)/);
});

test("BEAM_MIN_PROGRESS: a kernel faster than it is timed once and not searched", () => {
  const { batches } = search({ BEAM: "2", BEAM_MIN_PROGRESS: "5" }, (_, n) => new Array(n).fill(3e-6));
  assert.deepEqual(batches, [1]);
  // without the knob (tinygrad's default, 0.01 us) the same kernel is searched
  assert.ok(search({ BEAM: "2" }, (_, n) => new Array(n).fill(3e-6)).batches.length > 1);
});

test("BEAM_MIN_PROGRESS: a round that gains less ends the search; more goes on", () => {
  // the start takes 100 us; each round's first candidate is 4 us (4%) faster than the last round's best
  const rounds = (batch: number, n: number) =>
    Array.from({ length: n }, (_, i) => (i === 0 ? 1e-4 - 4e-6 * batch : 2e-4));
  // 4 us < 5 us: the first round is the last (the start, then one round; nothing won, so no confirmation)
  assert.equal(search({ BEAM: "2", BEAM_MIN_PROGRESS: "5" }, rounds).batches.length, 2);
  // 4 us > 3 us: more rounds
  assert.ok(search({ BEAM: "2", BEAM_MIN_PROGRESS: "3" }, rounds).batches.length > 3);
  // rounds gaining 10% each, well above both: the search goes on for several rounds
  const big = (batch: number, n: number) => Array.from({ length: n }, (_, i) => (i === 0 ? 1e-3 * 0.9 ** batch : 2e-3));
  assert.ok(search({ BEAM: "2", BEAM_MIN_PROGRESS: "5" }, big).batches.length > 3);
});
