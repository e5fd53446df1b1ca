// The roofline model of bench/gpu/roofline.ts: a kernel's bound is the slower of its FLOPs at the form's peak and
// its bytes at HBM's bandwidth, checked against figures worked by hand; a step's totals are the sums of its
// groups; a measured profile is set beside the bounds and ranked by gap. On a NULL device: nothing runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Tensor, dtypes } from "../../src/index.ts";
import {
  H200,
  type Peaks,
  compareProfile,
  groupBounds,
  kernelBound,
  readProfile,
  rooflineReport,
  totalsOf,
} from "../../bench/gpu/roofline.ts";
import {
  type KernelProfile,
  PROFILE_FORMAT,
  bertStepKernels,
  formsOf,
  recordKernels,
  useNullDevice,
} from "../../bench/gpu/step_kernels.ts";

useNullDevice();
const projectRoot = fileURLToPath(new URL("../../", import.meta.url));
const close = (actual: number, expected: number, what: string) =>
  assert.ok(Math.abs(actual - expected) <= 1e-9 * Math.abs(expected), `${what}: ${actual}, expected ${expected}`);

/** A 1024x1024 float16 input (its memory: nothing on a NULL device). */
const float16Matrix = (): Tensor => Tensor.empty([1024, 1024], { dtype: dtypes.float16 });

/** The kernels that compute `build`'s result from already realized inputs, with their forms. */
function kernelsOf(inputs: Tensor[], build: () => Tensor) {
  Tensor.realizeAll(inputs);
  const kernels = recordKernels(() => void build().realize());
  return { kernels, forms: formsOf(kernels) };
}

/** The bounds of those kernels at `peaks`. */
function boundsOf(inputs: Tensor[], build: () => Tensor, peaks: Peaks = H200) {
  const { kernels, forms } = kernelsOf(inputs, build);
  return kernels.map((kernel, i) => kernelBound(kernel, forms[i]!, peaks));
}

test("a float16 1024^3 matmul is bound by the tensor cores: 2*1024^3 FLOPs at 990 TFLOP/s", () => {
  const [x, w] = [float16Matrix(), float16Matrix()];
  const [bound] = boundsOf([x, w], () => x.matmul(w));
  assert.equal(bound?.formClass, "tensor");
  const flops = 2 * 1024 ** 3; // a multiply and an add per term
  const bytes = 3 * 1024 * 1024 * 2; // x, w and the output, float16, each once
  assert.equal(bound.flops, flops);
  assert.equal(bound.bytes, bytes);
  close(bound.seconds, flops / 990e12, "bound"); // 2.17 us; its memory would take 1.31 us
  assert.ok(bound.computeSeconds > bound.memorySeconds);
});

test("a float16 add of two 1024x1024 arrays is bound by HBM: 6 MiB at 4.8 TB/s", () => {
  const [a, b] = [float16Matrix(), float16Matrix()];
  const [bound] = boundsOf([a, b], () => a.add(b));
  assert.equal(bound?.formClass, "loops");
  assert.equal(bound.flops, 1024 * 1024);
  assert.equal(bound.bytes, 3 * 1024 * 1024 * 2);
  close(bound.seconds, (3 * 1024 * 1024 * 2) / 4.8e12, "bound");
});

test("the peaks are the ones given: the same add at half the bandwidth takes twice as long", () => {
  const [a, b] = [Tensor.empty([256, 256]), Tensor.empty([256, 256])];
  const { kernels, forms } = kernelsOf([a, b], () => a.mul(b));
  const fast = kernelBound(kernels[0]!, forms[0]!, H200);
  const slow = kernelBound(kernels[0]!, forms[0]!, { ...H200, hbmBytes: H200.hbmBytes / 2 });
  close(slow.seconds, 2 * fast.seconds, "half the bandwidth");
});

test("a step's totals are the sums of its groups and of its forms", () => {
  const kernels = bertStepKernels({ preset: "tiny", batch: 2, seq: 32, layers: 1 });
  const forms = formsOf(kernels);
  const bounds = kernels.map((kernel, i) => kernelBound(kernel, forms[i]!, H200));
  const groups = groupBounds(bounds);
  const totals = totalsOf(bounds, H200);
  assert.equal(totals.kernels, kernels.length);
  assert.equal(
    groups.reduce((n, g) => n + g.count, 0),
    totals.kernels,
  );
  close(
    groups.reduce((s, g) => s + g.seconds, 0),
    totals.seconds,
    "seconds",
  );
  close(
    groups.reduce((s, g) => s + g.flops, 0),
    totals.flops,
    "flops",
  );
  close(
    groups.reduce((s, g) => s + g.bytes, 0),
    totals.bytes,
    "bytes",
  );
  // each launch takes at least the floor without a graph
  assert.ok(totals.secondsWithLaunches >= totals.kernels * H200.launchSeconds);
  assert.ok(totals.secondsWithLaunches >= totals.seconds);
  const report = rooflineReport(kernels, forms, H200, { top: 1000 });
  const byForm = Object.values(report.bound_by_form);
  assert.equal(
    byForm.reduce((n, f) => n + f.kernels, 0),
    report.kernels,
  );
  const rounding = 1e-3 * byForm.length; // each figure rounded to a microsecond
  assert.ok(Math.abs(byForm.reduce((s, f) => s + f.bound_ms, 0) - report.lower_bound_ms) <= rounding);
  assert.ok(
    Math.abs(report.bound_ms_by_limit.compute + report.bound_ms_by_limit.memory - report.lower_bound_ms) <= 2e-3,
  );
  assert.equal(report.top.length, groups.length);
});

test("a measured profile is set beside the bounds, ranked by gap, with groups the model lacks apart", () => {
  const [x, w] = [float16Matrix(), float16Matrix()];
  const [matmul, add] = boundsOf([x, w], () => x.matmul(w).realize().add(x));
  const groups = groupBounds([matmul!, add!]);
  const profile: KernelProfile = {
    format: PROFILE_FORMAT,
    kernels: [
      { name: add!.name, form: add!.form, count: 1, ms: 0.002 },
      { name: matmul!.name, form: matmul!.form, count: 1, ms: 0.01 },
      { name: "E_7", form: "loops", count: 3, ms: 0.5 },
    ],
  };
  const { gaps, unmatched } = compareProfile(groups, profile);
  assert.deepEqual(
    gaps.map((g) => g.name),
    [matmul!.name, add!.name],
  );
  close(gaps[0]!.gapMs, 0.01 - matmul!.seconds * 1e3, "matmul's gap");
  close(gaps[0]!.ratio, 0.01 / (matmul!.seconds * 1e3), "matmul's ratio");
  assert.deepEqual(unmatched, [profile.kernels[2]]);
});

test("roofline.ts --profile reads a hand-made profile and rejects one of another shape", async () => {
  const folder = mkdtempSync(path.join(tmpdir(), "tsgrad-roofline-"));
  try {
    const file = path.join(folder, "profile.json");
    const kernels = [
      { name: "E_30522_128", form: "loops", count: 3, ms: 0.25 },
      { name: "not_in_the_step", form: "loops", count: 1, ms: 1 },
    ];
    writeFileSync(file, JSON.stringify({ format: PROFILE_FORMAT, preset: "tiny", batch: 2, seq: 32, kernels }));
    const { stdout } = await promisify(execFile)(
      process.execPath,
      [
        "--import",
        "tsx",
        "bench/gpu/roofline.ts",
        "--preset",
        "tiny",
        "--layers",
        "1",
        "--batch",
        "2",
        "--seq",
        "32",
        "--profile",
        file,
      ],
      { cwd: projectRoot, timeout: 60_000 },
    );
    const report = JSON.parse(stdout);
    assert.equal(report.profile.measured_ms, 1.25);
    assert.equal(report.profile.unmatched_ms, 1);
    assert.equal(report.profile.by_gap.length, 1);
    const [embedding] = report.profile.by_gap;
    assert.equal(embedding.name, "E_30522_128");
    assert.ok(Math.abs(embedding.gap_ms - (0.25 - embedding.bound_ms)) <= 1e-3, JSON.stringify(embedding));
    assert.throws(
      () => readProfile(file, { preset: "tiny", batch: 8, seq: 32, layers: 1 }),
      /batch 2, the model is of batch 8/,
    );
  } finally {
    rmSync(folder, { recursive: true, force: true });
  }
});
