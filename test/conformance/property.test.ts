// Random op chains (chains.ts) agree with the JS device on every other backend here: CPU (C kernels) and CUDA
// (the CPU emulator of a GPU, test/cuda/emu, where g++ is; a real GPU where TSGRAD_LIBCUDA names its driver),
// forward and backward (the gradient of sum(out * cotangent) with respect to every input). Chain i has seed
// PROPERTY_SEED + i (default 1); PROPERTY_CHAINS=N runs N chains on every backend (default: CHAINS below, which
// keeps the file near 30 s on a 2-core machine with a cold kernel cache). A failure prints the chain's seed and the
// chain as code; `PROPERTY_SEED=<seed> PROPERTY_CHAINS=1 node --import tsx --test test/conformance/property.test.ts`
// replays it alone.
import { before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { assertClose } from "../close.ts";
import { scratchDir } from "../scratch.ts";
import { buildCudaEmulator, emulatorEnv } from "../cuda/emu/build.ts";

// the runtime reads these when it first loads the driver and the compiler: set them before tsgrad loads
const work = scratchDir("property-emu");
const library = process.env.TSGRAD_LIBCUDA ? null : buildCudaEmulator(work);
if (library) Object.assign(process.env, emulatorEnv(library, work));

const { Tensor } = await import("../../src/index.ts");
const { testDevices } = await import("../devices.ts");
const { applyStep, chainData, describeChain, generateChain } = await import("./chains.ts");
type T = InstanceType<typeof Tensor>;
type Chain = ReturnType<typeof generateChain>;

/** Chains per backend in CI: the emulator compiles each kernel as a C++ library of its own, so it runs fewer. */
const CHAINS: Record<string, number> = { CPU: 120, CUDA: 60 };
const requested = Number(process.env.PROPERTY_CHAINS ?? 0);
const firstSeed = Number(process.env.PROPERTY_SEED ?? 1);
const count = (device: string): number => requested || (CHAINS[device.split(":")[0]!] ?? 25);

const VALUE_TOLERANCE = { atol: 1e-4, rtol: 1e-3 };
const GRADIENT_TOLERANCE = { atol: 1e-4, rtol: 1e-3 };

/** A chain run on one device, lazy: its output and each input's gradient. */
interface Run {
  out: T;
  grads: (T | null)[];
  /** What realizing it threw. */
  failure?: Error;
}

function run(chain: Chain, device: string): Run {
  const data = chainData(chain, []).inputs;
  const leaves = chain.inputs.map((shape, i) => {
    const x = new Tensor(data[i]!, { device, dtype: "float32" }).reshape(shape);
    x.requiresGrad = true;
    return x;
  });
  const out = chain.steps.reduce((x, step) => applyStep(x, step, leaves), leaves[0]!);
  const cotangent = new Tensor(chainData(chain, out.shape).cotangent, { device, dtype: "float32" });
  out.mul(cotangent.reshape(out.shape)).sum().backward();
  return { out, grads: leaves.map((x) => x.grad) };
}

/** Every chain's run on a device, realized together (a compiling device builds the kernels in a few batches). */
function runAll(list: readonly Chain[], device: string): (Run | Error)[] {
  const runs = list.map((chain) => {
    try {
      return run(chain, device);
    } catch (error) {
      return error as Error;
    }
  });
  realizeOrBlame(runs.filter((r): r is Run => !(r instanceof Error)));
  return runs.map((r) => (r instanceof Error ? r : (r.failure ?? r)));
}

/** Realizes the runs together; where that throws, halves them until each failing run holds its own error. */
function realizeOrBlame(runs: Run[]): void {
  try {
    Tensor.realizeAll(runs.flatMap((r) => [r.out, ...r.grads.filter((g) => g !== null)]));
  } catch (error) {
    if (runs.length === 1) runs[0]!.failure = error as Error;
    else {
      const middle = Math.ceil(runs.length / 2);
      realizeOrBlame(runs.slice(0, middle));
      realizeOrBlame(runs.slice(middle));
    }
  }
}

const values = (t: T): number[] => Array.from(t.toArray() as ArrayLike<number>);

/** What differs between a device's run of a chain and the JS device's (null: they agree). */
function difference(run: Run | Error, reference: Run | Error): string | null {
  if (reference instanceof Error) return `JS threw ${reference.message.split("\n")[0]}`;
  if (run instanceof Error) return `threw ${run.message.split("\n")[0]}`;
  try {
    assert.deepEqual(run.out.shape, reference.out.shape, "output shape");
    assertClose(values(run.out), values(reference.out), { ...VALUE_TOLERANCE, equalNan: true, what: "output" });
    reference.grads.forEach((expected, i) => {
      const actual = run.grads[i];
      assert.equal(actual === null, expected === null, `input ${i}'s gradient present on one device only`);
      if (actual && expected)
        assertClose(values(actual), values(expected), {
          ...GRADIENT_TOLERANCE,
          equalNan: true,
          what: `gradient of x${i}`,
        });
    });
    return null;
  } catch (error) {
    return (error as Error).message.split("\n")[0]!;
  }
}

const devices = testDevices().filter((d) => d !== "JS");
const longest = Math.max(0, ...devices.map(count));
const allChains = Array.from({ length: longest }, (_, i) => generateChain(firstSeed + i));

test("a seed names one chain and one set of values", () => {
  assert.deepEqual(generateChain(7), generateChain(7));
  assert.deepEqual(chainData(generateChain(7), [2]), chainData(generateChain(7), [2]));
  assert.notDeepEqual(generateChain(7), generateChain(8));
});

test("the chains reach the edges: empty and size-1 axes, 0-d values and every op", () => {
  const sample = Array.from({ length: 200 }, (_, i) => generateChain(1 + i));
  const shapes = sample.flatMap((c) => c.inputs);
  assert.ok(shapes.some((s) => s.includes(0)));
  assert.ok(shapes.some((s) => s.includes(1)));
  assert.ok(shapes.some((s) => s.length === 0));
  const ops = new Set(sample.flatMap((c) => c.steps.map((s) => s.op)));
  for (const op of ["permute", "reshape", "expand", "shrink", "pad", "flip", "binary", "reduce", "matmul"])
    assert.ok(ops.has(op as never), `no chain of the sample has a ${op}`);
});

/**
 * Chains that once failed, with the cause (issue 36), run on every backend beside the sequence above. 370 and 2202
 * on CPU: gcc 12.2 at -O3 -march=native merged selects on one condition (the gradient of a sigmoid, of a max over an
 * axis of 5) into one branch and read the loads under it as masked loads, each group of 5 with the first group's
 * mask: zeros where values belonged (renderer/c.ts now marks such kernels, runtime/compiler_bugs.ts probes for the
 * bug). 336, 373 and 389, a gradient through a reshape of an empty tensor, recursed without end until unflatIndex
 * gave a shape with a 0 constant indices.
 */
const REGRESSIONS = [370, 2202, 336, 373, 389];

test(`the chains that once failed (seeds ${REGRESSIONS.join(", ")}) agree with the JS device`, () => {
  const list = REGRESSIONS.map((seed) => generateChain(seed));
  const reference = runAll(list, "JS");
  const failing = devices.flatMap((device) => {
    const runs = runAll(list, device);
    return REGRESSIONS.flatMap((_seed, i) => {
      const problem = difference(runs[i]!, reference[i]!);
      return problem ? [`${device}: ${describeChain(list[i]!)}\n  ${problem}`] : [];
    });
  });
  assert.deepEqual(failing, []);
});

describe(`random op chains from seed ${firstSeed}, against the JS device`, () => {
  let reference: (Run | Error)[] = [];
  before(() => {
    reference = runAll(allChains, "JS");
  });
  for (const device of devices) {
    const n = count(device);
    test(`${n} chains on ${device}: values and gradients`, () => {
      const runs = runAll(allChains.slice(0, n), device);
      const failures = runs.flatMap((r, i) => {
        const problem = difference(r, reference[i]!);
        return problem ? [`${describeChain(allChains[i]!)}\n  ${problem}`] : [];
      });
      assert.deepEqual(failures, [], `${failures.length} of ${n} chains differ on ${device}`);
    });
  }
});
