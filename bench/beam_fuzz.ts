// Every option set BEAM may try on the kernels of a BERT train step, checked on the CPU device: each variant
// (one or two steps of BEAM's extensions away from the heuristics' choice) must lower, compile, and compute
// what the heuristics' kernel computes on the same inputs - to the bit, unless it sums in another order
// (split accumulators: then within a relative 1e-4). BEAM drops candidates that fail to compile without a
// word, so a codegen bug that only an option set BEAM picks can reach hides there. Prints JSON on stdout
// (counts and every failure), progress on stderr; exit status 1 when anything failed.
// Usage: npx tsx bench/beam_fuzz.ts [--preset tiny] [--batch 2] [--seq 32] [--depth 2] [--per-kernel 60] [--kernels N]
// (BERT-tiny, depth 1, 30 a kernel: 1530 variants of 199 kernels, ~4 min with a cold kernel cache; depth 2, 60 a
// kernel: 6730 variants, 20 min)
import { benchArgs } from "./args.ts";
import { Buffer, Device, Tensor } from "../src/index.ts";
import { recordItems } from "../src/engine/realize.ts";
import type { ExecItem } from "../src/engine/schedule.ts";
import { extensions } from "../src/engine/search.ts";
import { countStmts, heuristicOpts } from "../src/codegen/heuristics.ts";
import { kernelSpecOf, lowerKernel } from "../src/codegen/lower.ts";
import { type KernelOpts, NO_OPTS, optsKey, upcastWidth } from "../src/codegen/opts.ts";
import { compileEach, findCompiler } from "../src/runtime/compiler_cache.ts";
import { cFunction } from "../src/engine/cpu_programs.ts";
import { backendOf } from "../src/engine/backend.ts";
import { BERT_PRESETS, BertForPretraining } from "../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep } from "../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../mlperf/bert/data/loader.ts";

const { values } = benchArgs(import.meta.url, {
  preset: { type: "string", default: "tiny" },
  batch: { type: "string", default: "2" },
  seq: { type: "string", default: "32" },
  depth: { type: "string", default: "2" },
  "per-kernel": { type: "string", default: "60" },
  kernels: { type: "string" },
});
const preset = values.preset as keyof typeof BERT_PRESETS;
const [batch, seq, depth, perKernel] = [
  Number(values.batch),
  Number(values.seq),
  Number(values.depth),
  Number(values["per-kernel"]),
];
if (!BERT_PRESETS[preset]) throw new Error(`unknown preset ${preset}; known: ${Object.keys(BERT_PRESETS).join(", ")}`);
if (!findCompiler()) throw new Error("no C compiler: the fuzz compiles every variant for the CPU device");
Device.DEFAULT = "CPU";

type KernelItem = ExecItem & { kind: "kernel" };

// one train step's kernels, recorded while it runs (integer and byte buffers then hold valid indices and masks)
Tensor.manualSeed(0);
const model = new BertForPretraining(BERT_PRESETS[preset]);
const state = { model, ...createBertOptimizer(model, { lr: 1e-3, totalSteps: 100, warmupSteps: 2 }) };
const step = makeBertTrainStep(state, { lossScale: 1, gradientAccSteps: 1, maxGradNorm: 1 });
const { items } = recordItems(() =>
  step(
    ...samplesToTensors(fakeBatch(batch, seq, Math.max(1, Math.round(seq * 0.15)), 1, BERT_PRESETS[preset].vocabSize)),
  ).item(),
);
const unique = new Map<string, KernelItem>();
for (const item of items)
  if (item.kind === "kernel" && kernelSpecOf(item.kernel))
    unique.set(`${item.kernel.name}|${item.kernel.opts}|${JSON.stringify(item.kernel.body).length}`, item);
const chosen = [...unique.values()].slice(0, values.kernels ? Number(values.kernels) : undefined);
console.error(`beam_fuzz: ${unique.size} distinct kernels in a ${preset} step, checking ${chosen.length}`);

/**
 * Option sets up to `depth` extensions away from `start` (not itself), within BEAM's default upcast limit, at most
 * `perKernel`.
 */
function variants(
  start: KernelOpts,
  spec: NonNullable<ReturnType<typeof kernelSpecOf>>,
  plain: ReturnType<typeof lowerKernel>,
): KernelOpts[] {
  const seen = new Map<string, KernelOpts>([[optsKey(start), start]]);
  let frontier = [start];
  for (let d = 0; d < depth && seen.size <= perKernel; d++) {
    const next: KernelOpts[] = [];
    for (const opts of frontier)
      for (const o of extensions(opts, spec, plain)) {
        if (upcastWidth(o) * o.unroll > 256 || seen.has(optsKey(o))) continue;
        seen.set(optsKey(o), o);
        next.push(o);
      }
    frontier = next;
  }
  return [...seen.values()].slice(1, perKernel + 1);
}

/**
 * Inputs for a kernel: float32 buffers get values in [0.5, 1.5) (the step's buffers are reused by later kernels,
 * so what they hold after it is arbitrary, and a sum of arbitrary signs can round to either side of zero when
 * its order changes: sqrt of a variance gave NaN one way, a finite value the other); others (indices, masks)
 * keep what the step left in them (indices are the step's inputs, never overwritten; any byte is a mask).
 */
function inputsFor(item: KernelItem): Uint8Array[] {
  let seed = 12345;
  const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32;
  return item.buffers.map((b) => {
    if (b.dtype.name !== "float32") return new Uint8Array(b.toTypedArray().buffer);
    return new Uint8Array(Float32Array.from({ length: b.size }, () => 0.5 + next()).buffer);
  });
}

/** The item's inputs copied into fresh buffers (the output too: a kernel may read what it accumulates into). */
const scratch = (item: KernelItem, contents: Uint8Array[]): Buffer[] =>
  item.buffers.map((b, i) => new Buffer("CPU", b.size, b.dtype).copyin(new Uint8Array(contents[i]!)));

/** Runs `kernel` on a scratch copy of the item's buffers; the output's bytes. */
function runOn(kernel: ReturnType<typeof lowerKernel>, item: KernelItem, contents: Uint8Array[]): Uint8Array {
  const buffers = scratch(item, contents);
  backendOf("CPU").compile(kernel).run(buffers);
  return new Uint8Array(buffers[0]!.toTypedArray().buffer);
}

/** Where two outputs differ beyond what the order of a sum explains (`exact`: not at all), as a message. */
function mismatch(a: Uint8Array, b: Uint8Array, dtype: Buffer["dtype"], exact: boolean): string | undefined {
  if (exact || dtype.name !== "float32") {
    const at = a.findIndex((x, i) => x !== b[i]);
    return at < 0 ? undefined : `byte ${at} differs`;
  }
  const [x, y] = [
    new Float32Array(a.buffer, a.byteOffset, a.byteLength / 4),
    new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4),
  ];
  const at = x.findIndex((v, i) => !(Object.is(v, y[i]) || Math.abs(v - y[i]!) <= 1e-4 * Math.max(1, Math.abs(v))));
  return at < 0 ? undefined : `element ${at}: ${x[at]} vs ${y[at]}`;
}

const failures: { kernel: string; opts: string; stage: string; error: string }[] = [];
let checked = 0;
const started = performance.now();
for (const item of chosen) {
  const spec = kernelSpecOf(item.kernel)!;
  const plain = lowerKernel(spec, NO_OPTS);
  const start = heuristicOpts(spec, plain);
  const reference = lowerKernel(spec, start);
  const lowered: { opts: KernelOpts; kernel: ReturnType<typeof lowerKernel> }[] = [];
  for (const opts of variants(start, spec, plain)) {
    try {
      const kernel = lowerKernel(spec, opts);
      if (countStmts(kernel.body) <= 3000) lowered.push({ opts, kernel });
    } catch (e) {
      failures.push({
        kernel: item.kernel.name,
        opts: optsKey(opts),
        stage: "lower",
        error: (e as Error).message.slice(0, 300),
      });
    }
  }
  // compiled together (one batch per core); a variant that does not compile is a failure, not a skip
  const compiled = compileEach(
    findCompiler()!,
    [reference, ...lowered.map((l) => l.kernel)].map((k) => cFunction(k, "")),
  );
  const contents = inputsFor(item);
  const expected = runOn(reference, item, contents);
  lowered.forEach(({ opts, kernel }, i) => {
    const result = compiled[i + 1]!;
    if ("error" in result) {
      failures.push({
        kernel: item.kernel.name,
        opts: optsKey(opts),
        stage: "compile",
        error: result.error.slice(0, 600),
      });
      return;
    }
    const exact = (opts.split ?? 0) === (start.split ?? 0);
    const wrong = mismatch(expected, runOn(kernel, item, contents), item.buffers[0]!.dtype, exact);
    if (wrong)
      failures.push({
        kernel: item.kernel.name,
        opts: optsKey(opts),
        stage: "values",
        error: `${wrong} (heuristics: ${optsKey(start)})`,
      });
    checked++;
  });
  if (failures.length > 0 && failures.length % 10 === 0) console.error(`beam_fuzz: ${failures.length} failures so far`);
}
console.log(
  JSON.stringify(
    {
      preset,
      batch,
      seq,
      depth,
      kernels: chosen.length,
      variants_checked: checked,
      failures: failures.length,
      seconds: Math.round((performance.now() - started) / 1000),
      details: failures,
    },
    null,
    1,
  ),
);
process.exitCode = failures.length > 0 ? 1 : 0;
