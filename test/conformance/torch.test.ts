// Every op against PyTorch: the values and gradients PyTorch 1.13 computed for the same inputs, read from
// test/conformance/torch_cases.safetensors (written by scripts/conformance/generate.py, which alone needs PyTorch).
// Each case runs the op forward, checks the output's shape, dtype and values, then the gradient of
// sum(output * cotangent) with respect to each float32 input. Where tsgrad keeps a different answer on purpose,
// DIVERGENCES says so, with the reason, and the test checks that the answer still differs.
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { Tensor, type DTypeName, io } from "../../src/index.ts";
import { f16BitsToF32 } from "../../src/dtype.ts";
import { type CloseOptions, assertClose } from "../close.ts";
import { testDevices } from "../devices.ts";
import { type Args, OPS } from "./ops.ts";

interface TensorEntry {
  dtype: string;
  shape: number[];
}
interface Input extends TensorEntry {
  view: "T" | "step2" | null;
}
interface Case {
  op: string;
  args: Args;
  tag: string;
  inputs: Input[];
  outputs: TensorEntry[];
  /** The outputs a cotangent multiplies, and the inputs PyTorch differentiated. */
  cotangents?: number[];
  grads?: number[];
  tol?: { atol: number; rtol: number };
}

type Part = "value" | "dtype" | "gradient";

/** Where tsgrad answers differently from PyTorch, and why it keeps its answer (also in docs/tensor.md's table). */
const DIVERGENCES: { op: string; tag: string; part: Part; reason: string; device?: string }[] = [
  ...(["sin", "cos"] as const).flatMap((op) =>
    (["value", "gradient"] as const).map((part) => ({
      op,
      tag: "large arguments",
      part,
      device: "WEBGPU",
      reason:
        "past |x| = 205,000 WGSL's f32 sin reduces the argument itself (SwiftShader's is off by up to 0.05); tsgrad's own reduction holds below that",
    })),
  ),
  {
    op: "cummax",
    tag: "ties",
    part: "gradient",
    reason:
      "equal running maxima share the gradient evenly, as max's ties do; PyTorch's goes to the one its index names",
  },
  {
    op: "maxPool2d",
    tag: "ties",
    part: "gradient",
    reason: "a window's equal maxima share the gradient evenly (max's tie rule); PyTorch's goes to the first",
  },
  {
    op: "maxPool2d",
    tag: "NaN",
    part: "gradient",
    reason: "no element equals a NaN maximum, so max's gradient is NaN over the window; PyTorch's goes to the NaN",
  },
  {
    op: "topk",
    tag: "ties",
    part: "value",
    reason: "equal values come lowest index first; PyTorch leaves their order unspecified (its CPU order differs)",
  },
  { op: "topk", tag: "ties", part: "gradient", reason: "follows the indices above" },
  {
    op: "hardswish",
    tag: "finite edges",
    part: "gradient",
    reason:
      "at ±3 the derivative of x hardsigmoid(x) with hardsigmoid's 0 at its kinks (1, 0); PyTorch's (2x + 3)/6 (1.5, -0.5)",
  },
  {
    op: "pow",
    tag: "edges",
    part: "gradient",
    reason:
      "where the value is NaN (a negative base, a non-integer exponent) the NaN is a constant, gradient 0; PyTorch's NaN",
  },
  { op: "pow", tag: "square root", part: "gradient", reason: "as pow (edges): 0 at a negative base, PyTorch NaN" },
];

/**
 * Cases a device refuses with a clear error rather than answering: WGSL has no 64-bit types, and integer pow
 * computes in float64 (exact where float32 is not). The test checks that each still throws that error.
 */
const REFUSALS: { device: string; op: string; tag: string; error: RegExp }[] = [
  { device: "WEBGPU", op: "pow", tag: "int32", error: /WEBGPU: \S+ uses float64, which WGSL has no type for/ },
];

/**
 * PyTorch's integer results (sums of integers, indices, one-hot rows, integer fills) are int64; tsgrad's int32, the
 * width every backend computes natively, where the values fit.
 */
const INDEX_DTYPE: DTypeName = "int32";

const TOLERANCE: Record<string, { atol: number; rtol: number }> = {
  float32: { atol: 1e-5, rtol: 1e-4 },
  float16: { atol: 1e-3, rtol: 2e-3 },
};
const GRADIENT_TOLERANCE = { atol: 1e-4, rtol: 1e-4 };
const EXACT = { atol: 0, rtol: 0 };

const file = fileURLToPath(new URL("torch_cases.safetensors", import.meta.url));
const { tensors, metadata } = io.readSafetensorsFile(file);
const cases = JSON.parse(metadata.cases!) as Case[];

/** A stored tensor's values as numbers (float16 decoded from its bits). */
function stored(name: string): number[] {
  const entry = tensors[name];
  assert.ok(entry, `the fixture has no tensor ${name}`);
  if (entry.dtype === "F16") return Array.from(entry.data, f16BitsToF32);
  return Array.from(entry.data as ArrayLike<number>, Number);
}

function makeInput(name: string, entry: TensorEntry, device: string): Tensor {
  const dtype = entry.dtype as DTypeName;
  return new Tensor(stored(name), { dtype, device }).reshape(entry.shape);
}

const seen = (x: Tensor, view: Input["view"]): Tensor =>
  view === "T" ? x.transpose(-1, -2) : view === "step2" ? x.index("...", [null, null, 2]) : x;

const read = (t: Tensor): number[] => Array.from(t.toArray() as ArrayLike<number | bigint>, Number);

/** A case's outputs and gradients, lazy: every case of a device is realized at once (its kernels compile together). */
interface Run {
  outs: Tensor[];
  grads: (Tensor | null)[];
}

function run(c: Case, n: number, device: string): Run {
  const leaves = c.inputs.map((entry, j) => makeInput(`${n}.x${j}`, entry, device));
  for (const j of c.grads ?? []) leaves[j]!.requiresGrad = true;
  const result = OPS[c.op]!(
    leaves.map((x, j) => seen(x, c.inputs[j]!.view)),
    c.args,
    device,
  );
  const outs = Array.isArray(result) ? result : [result];
  assert.equal(outs.length, c.outputs.length, "the number of outputs");
  if (c.cotangents?.length) {
    const terms = c.cotangents.map((k) =>
      outs[k]!.mul(new Tensor(stored(`${n}.c${k}`), { device, dtype: "float32" }).reshape(c.outputs[k]!.shape)).sum(),
    );
    terms.reduce((a, b) => a.add(b)).backward();
  }
  return { outs, grads: (c.grads ?? []).map((j) => leaves[j]!.grad) };
}

/** What differs between tsgrad's run of a case and PyTorch's, by part (empty: they agree). */
function compare(c: Case, n: number, { outs, grads }: Run): Map<Part, string> {
  const problems = new Map<Part, string>();
  const check = (part: Part, fn: () => void): void => {
    try {
      fn();
    } catch (error) {
      const before = problems.get(part);
      problems.set(part, `${before ? `${before}; ` : ""}${(error as Error).message.split("\n")[0]}`);
    }
  };
  c.outputs.forEach((expected, k) => {
    const out = outs[k]!;
    const dtype = expected.dtype === "int64" ? INDEX_DTYPE : expected.dtype;
    check("dtype", () => assert.equal(out.dtype.name, dtype, `output ${k} dtype`));
    check("value", () => {
      assert.deepEqual(out.shape, expected.shape, `output ${k} shape`);
      assertClose(read(out), stored(`${n}.y${k}`), closeness(c, expected.dtype, `output ${k}`));
    });
  });
  (c.grads ?? []).forEach((j, i) =>
    check("gradient", () => {
      assert.ok(grads[i], `input ${j} got no gradient`);
      assertClose(read(grads[i]!), stored(`${n}.g${j}`), {
        ...(c.tol ?? GRADIENT_TOLERANCE),
        equalNan: true,
        what: `gradient of input ${j}`,
      });
    }),
  );
  return problems;
}

function closeness(c: Case, dtype: string, what: string): CloseOptions {
  const tolerance = c.tol ?? TOLERANCE[dtype] ?? EXACT;
  return { ...tolerance, equalNan: true, what };
}

const label = (c: Case): string => `${c.op}${c.tag ? ` (${c.tag})` : ""}`;

const byOp = new Map<string, number[]>();
cases.forEach((c, n) => byOp.set(c.op, [...(byOp.get(c.op) ?? []), n]));

test("every op the fixture names has a tsgrad counterpart, and every divergence a case", () => {
  assert.deepEqual(
    [...byOp.keys()].filter((op) => !OPS[op]),
    [],
  );
  for (const d of DIVERGENCES)
    assert.ok(
      cases.some((c) => c.op === d.op && c.tag === d.tag),
      `divergence ${d.op} (${d.tag}) names no case`,
    );
});

for (const device of testDevices()) {
  describe(`PyTorch conformance on ${device}`, () => {
    // every case's graph first, then one realize: on a compiling device the kernels build in a few large batches
    const runs = new Map<number, Run | Error>();
    before(() => {
      cases.forEach((c, n) => {
        try {
          runs.set(n, run(c, n, device));
        } catch (error) {
          runs.set(n, error as Error);
        }
      });
      const tensorsOf = ({ outs, grads }: Run) => [...outs, ...grads.filter((g) => g !== null)];
      const refused = (n: number) =>
        REFUSALS.some((r) => r.device === device && r.op === cases[n]!.op && r.tag === cases[n]!.tag);
      // a refused case realizes alone: its error is its own, and the others still run
      for (const [n, ran] of runs)
        if (refused(n) && !(ran instanceof Error))
          try {
            Tensor.realizeAll(tensorsOf(ran));
          } catch (error) {
            runs.set(n, error as Error);
          }
      const ready = [...runs].filter(([n, r]) => !refused(n) && !(r instanceof Error)).map(([, r]) => r as Run);
      Tensor.realizeAll(ready.flatMap(tensorsOf));
    });
    for (const [op, numbers] of byOp) {
      test(`${op}: ${numbers.length} case${numbers.length === 1 ? "" : "s"}`, () => {
        const failures: string[] = [];
        for (const n of numbers) {
          const c = cases[n]!;
          const ran = runs.get(n)!;
          const refusal = REFUSALS.find((r) => r.device === device && r.op === c.op && r.tag === c.tag);
          if (refusal) {
            if (!(ran instanceof Error && refusal.error.test(ran.message)))
              failures.push(
                `${label(c)}: listed as refused on ${device} (${refusal.error}), but it ${ran instanceof Error ? `threw ${ran.message.split("\n")[0]}` : "ran"}`,
              );
            continue;
          }
          if (ran instanceof Error) {
            failures.push(`${label(c)}: threw ${ran.message.split("\n")[0]}`);
            continue;
          }
          const problems = compare(c, n, ran);
          const known = DIVERGENCES.filter(
            (d) => d.op === c.op && d.tag === c.tag && (d.device === undefined || d.device === device),
          );
          for (const [part, problem] of problems)
            if (!known.some((d) => d.part === part)) failures.push(`${label(c)}: ${part}: ${problem}`);
          for (const d of known)
            if (!problems.has(d.part))
              failures.push(`${label(c)}: listed as diverging in its ${d.part} (${d.reason}), but agrees now`);
        }
        assert.deepEqual(failures, []);
      });
    }
  });
}
