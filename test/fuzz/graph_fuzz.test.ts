// A fixed sample of the differential fuzzer (graph_fuzz.ts): random tensor programs agree on the JS and CPU devices
// and with numpy, and their gradients with each other and with central differences.
//
// The programs that found bugs (all fixed) run here too: seeds 5, 19 (x.sub(-c) rendered --c), 11 (abs of a bool),
// 112 (gather of a bool), 993 (cat(...).contiguous() read back), 105644 and 702179 (gcc 12.2 miscompiling a CPU
// kernel) and, with --grad, 200261 (a gather's gradient through a transposed expand), 400437 and 400452
// (--max-size 10: the miscompile); 800490 (--grad) is a check that was wrong: finite gradient elements beside
// overflowed ones, sums of cancelling terms near 1e9, differ by the order of rounding. Those seeds name programs
// of the first generator: since the newer ops (pad modes, softmax, sorts, einsum, activations, interpolate,
// conv2d) joined it they are generated with `classic: true`, which gives the very programs they gave then. Rerun
// one with `npx tsx test/fuzz/graph_fuzz.ts --seed S --count 1 --classic [--grad] [--max-size N]`. Seeds 8000564
// and 9000030 (--grad), both --max-size 12, are checks of the current generator that were wrong (see below). The
// random samples draw from every op family, the newer ones too.
import { test } from "node:test";
import { createHash } from "node:crypto";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { type BatchReport, checkSeeds, compare } from "./check.ts";
import { fuzzDevices } from "./graph_fuzz.ts";
import { type Program, generateProgram } from "./program.ts";

const hasNumpy = spawnSync(process.env.PYTHON ?? "python3", ["-c", "import numpy"]).status === 0;
const skip = !hasNumpy && "python3 with numpy is not installed";

const range = (from: number, count: number): number[] => Array.from({ length: count }, (_, i) => from + i);

function assertNoMismatch(report: BatchReport): void {
  const lines = [...report.failing.values()].flatMap(({ mismatches }) =>
    mismatches.map((m) => `seed ${m.seed}${m.grad ? " --grad" : ""}: ${m.detail}`),
  );
  assert.deepEqual(lines, []);
}

test("the generator is deterministic: one seed, one program", () => {
  assert.deepEqual(generateProgram(7), generateProgram(7));
  assert.deepEqual(generateProgram(7, { grad: true }), generateProgram(7, { grad: true }));
  assert.notDeepEqual(generateProgram(7), generateProgram(8));
});

const BUG_SEEDS = {
  forward: [5, 19, 11, 112, 993, 105644, 702179],
  grad: [200261, 800490],
  gradMaxSize10: [400437, 400452],
};

test("classic generation is unchanged: the bug seeds still give the programs that found the bugs", () => {
  const h = createHash("sha256");
  for (const s of BUG_SEEDS.forward) h.update(JSON.stringify(generateProgram(s, { classic: true })));
  for (const s of BUG_SEEDS.grad) h.update(JSON.stringify(generateProgram(s, { classic: true, grad: true })));
  for (const s of BUG_SEEDS.gradMaxSize10)
    h.update(JSON.stringify(generateProgram(s, { classic: true, grad: true, maxSize: 10 })));
  // the digest of those programs as the generator made them before the newer ops were added
  assert.equal(h.digest("hex").slice(0, 16), "9b91cae457f068b3");
});

test("the comparison reports a wrong value, a NaN, a wrong integer and an error, and lets float32 rounding pass", () => {
  const p: Program = { seed: 0, grad: false, nodes: [{ op: "input", data: [1, 2], shape: [2], dtype: "float32" }] };
  const ref = { out: [1, 2] };
  const result = (data: number[], dtype = "float32") => new Map([["JS", { out: { shape: [2], dtype, data } }]]);
  assert.deepEqual(compare(p, ref, result([1, 2.0000001])), []);
  assert.match(compare(p, ref, result([1, 2.01]))[0]!.detail, /first difference at \[1\].*2\.01, expected 2/);
  assert.equal(compare(p, { out: [1, "NaN"] }, result([1, 2])).length, 1);
  assert.equal(
    compare(p, ref, new Map([["JS", { error: "running: Error: boom" }]]))[0]!.key,
    "JS: running: Error: boom",
  );
  const ints: Program = { ...p, nodes: [{ op: "input", data: [1, 2], shape: [2], dtype: "int32" }] };
  assert.equal(compare(ints, ref, result([1, 3], "int32")).length, 1);
});

test("45 random programs agree on JS, CPU and numpy", { skip }, () => {
  const report = checkSeeds(range(1, 45), fuzzDevices());
  assert.ok(report.ran >= 40, `only ${report.ran} of 45 programs were defined`);
  assertNoMismatch(report);
});

test("the programs that found bugs agree now", { skip }, () => {
  assertNoMismatch(checkSeeds(BUG_SEEDS.forward, fuzzDevices(), { classic: true }));
  assertNoMismatch(checkSeeds(BUG_SEEDS.grad, fuzzDevices(), { classic: true, grad: true }));
  assertNoMismatch(checkSeeds(BUG_SEEDS.gradMaxSize10, fuzzDevices(), { classic: true, grad: true, maxSize: 10 }));
  // checks that were wrong, from the current generator (--max-size 12): 8000564, a float16 logsumexp whose sum numpy
  // did not round before a cancelling matmul; 9000030 (--grad), central differences across a cast to int32 of a steep
  // value, which jumps at both step sizes alike
  assertNoMismatch(checkSeeds([8000564], fuzzDevices(), { maxSize: 12 }));
  assertNoMismatch(checkSeeds([9000030], fuzzDevices(), { grad: true, maxSize: 12 }));
});

test("15 random programs' gradients agree on JS and CPU and with float64 central differences", { skip }, () => {
  const report = checkSeeds(range(1, 15), fuzzDevices(), { grad: true });
  assert.ok(report.ran >= 13, `only ${report.ran} of 15 programs were defined`);
  assertNoMismatch(report);
});
