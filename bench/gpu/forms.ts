// Which form each kernel of one BERT train step takes on CUDA (tensor cores, group reduce, plain loops), with its share
// of the step's FLOPs, without a GPU: the step runs on a NULL device whose kernels do nothing, and every kernel is
// shaped by the CUDA backend's own choice (cuda_forms.ts). Also the device memory the step's buffers take
// (footprint_gib: will a batch fit a GPU?). `--devices N` shards the batch over N such devices, the weights replicated
// (data parallelism: kernels and footprint are then per device). `--source NAME` (or "NAME FORM") prints the CUDA C of
// the first kernel of that name (and form); `--plain`, its lowering without options. Prints one JSON object (and the
// sources, to stderr). Usage: npx tsx bench/gpu/forms.ts [--batch 8] [--seq 512] [--preset large] [--layers 24]
// [--devices 1] [--source r_1024]
import { argsWithUsage } from "../args.ts";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { deviceRuns } from "../../src/tensor/index.ts";
import { cudaForm, renderCudaForm } from "../../src/codegen/cuda_forms.ts";
import { matchMatmul, worthTensorCores } from "../../src/renderer/cuda_matmul.ts";
import { estimateBytes, kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { NO_OPTS } from "../../src/codegen/opts.ts";
import { BERT_PRESETS, BertForPretraining, type BertPresetName } from "../../models/bert.ts";
import { createBertOptimizer, makeBertTrainStep, trainStepOptionsFromEnv } from "../../models/bert_train_step.ts";
import { fakeBatch, samplesToTensors } from "../../mlperf/bert/data/loader.ts";
import { replicateParameters } from "../../src/nn/parallel.ts";
import { formClassOf, formLabel, useNullDevice } from "./step_kernels.ts";

const { values } = argsWithUsage(
  "Usage: npx tsx bench/gpu/forms.ts [--batch 8] [--seq 512] [--preset large] [--layers 24] [--devices 1] [--source NAME]... [--plain]",
  {
    batch: { type: "string", default: "8" },
    seq: { type: "string", default: "512" },
    preset: { type: "string", default: "large" },
    layers: { type: "string" },
    devices: { type: "string", default: "1" },
    source: { type: "string", multiple: true, default: [] },
    plain: { type: "boolean" },
  },
);
const [batchSize, seq] = [Number(values.batch), Number(values.seq)];
if (!(Number(values.devices) >= 1 && Number.isInteger(Number(values.devices))))
  throw new Error(`--devices ${values.devices}: expected a whole number of devices, 1 or more`);
const preset = BERT_PRESETS[values.preset as BertPresetName];
const config = { ...preset, numHiddenLayers: values.layers ? Number(values.layers) : preset.numHiddenLayers };

// a device that holds no memory and runs nothing: schedules and kernels as real, at no cost
useNullDevice();

const devices = Array.from({ length: Number(values.devices) }, (_, i) => `NULL:${i}`);
const model = new BertForPretraining(config);
if (devices.length > 1) replicateParameters(model, devices);
const { optimizer, scheduler } = createBertOptimizer(model, { lr: 1e-4, totalSteps: 1000, warmupSteps: 0 });
const step = makeBertTrainStep({ model, optimizer, scheduler }, trainStepOptionsFromEnv(dtypes.float16));
const batch = samplesToTensors(
  fakeBatch(batchSize, seq, Math.min(76, seq), 0, config.vocabSize),
  devices.length > 1 ? devices : undefined,
);
Tensor.realizeAll([...batch, ...optimizer.params]);

// the second step, as a jitted run captures it: the first also makes one-time copies (a replicated
// parameter's first assign copies the buffer it still shares with the tensor it was replicated from)
const started = performance.now();
Tensor.realizeAll([step(...batch), ...Tensor.pendingAssigns()]);
const recorded = recordItems(() => Tensor.realizeAll([step(...batch), ...Tensor.pendingAssigns()])).items;
const kernels = recorded.flatMap((item) => (item.kind === "kernel" ? [item.kernel] : []));
// the distinct buffers one step touches (after the scheduler's memory planner): parameters, optimizer
// state, the batch and every intermediate, all held by a jitted step's capture
const buffers = new Set(recorded.flatMap((item) => (item.kind === "kernel" ? item.buffers : [item.src, item.dst])));
const footprintGiB =
  Math.max(
    ...devices.map((d) =>
      [...buffers].reduce(
        (sum, b) => sum + (Device.canonicalize(b.device) === Device.canonicalize(d) ? b.nbytes : 0),
        0,
      ),
    ),
  ) /
  2 ** 30;
const hostSeconds = (performance.now() - started) / 1000;

// bytes each kernel moves at least: the span of every buffer it touches, read or written once (a kernel outside
// tensor cores is bound by these on a GPU: H200 ~4.8 TB/s)
const kernelBytes = kernels.map(estimateBytes);
type Row = { name: string; form: string; count: number; gflop: number; gb: number; why?: string };
const rows = new Map<string, Row>();
const sources = new Set(values.source);
let totalFlops = 0;
const bytesByForm: Record<string, number> = {};
const formOf = new Map<KernelIR, ReturnType<typeof cudaForm>>();
for (const [index, kernel] of kernels.entries()) {
  const form = formOf.get(kernel) ?? cudaForm(kernel);
  formOf.set(kernel, form);
  const spec = kernelSpecOf(kernel);
  const plain = spec ? lowerKernel(spec, NO_OPTS) : kernel;
  let reason: string | undefined;
  const pattern = matchMatmul(plain, (r) => (reason = r));
  const kind = formLabel(form);
  const why =
    form.kind === "tensorCores" || !kernel.name.startsWith("r")
      ? undefined
      : pattern
        ? worthTensorCores(pattern)
          ? "TC=0"
          : "matmul, too small for tensor cores"
        : reason;
  const key = `${kernel.name} ${kind}`;
  const row = rows.get(key) ?? { name: kernel.name, form: kind, count: 0, gflop: 0, gb: 0, why };
  row.count++;
  row.gflop += kernel.flops / 1e9;
  row.gb += kernelBytes[index]! / 1e9;
  const formName = formClassOf(form);
  bytesByForm[formName] = (bytesByForm[formName] ?? 0) + kernelBytes[index]! / 1e9;
  totalFlops += kernel.flops;
  rows.set(key, row);
  if (sources.has(kernel.name) || sources.has(key)) {
    sources.delete(kernel.name);
    sources.delete(key);
    const shown = values.plain ? { kind: "loops" as const, kernel: plain } : form;
    console.error(
      `// ${kernel.name} (${values.plain ? "plain lowering" : kind})\n${renderCudaForm(shown, "tg_kernel", true).code}\n`,
    );
  }
}
const byForm: Record<string, number> = {};
for (const r of rows.values()) {
  const form = r.form.startsWith("tensor cores") ? "tensor" : r.form.split(" ")[0]!;
  byForm[form] = (byForm[form] ?? 0) + r.gflop / (totalFlops / 1e9);
}
console.log(
  JSON.stringify(
    {
      model: `BERT-${values.preset} (${config.numHiddenLayers} layers) float16`,
      batch: batchSize,
      seq,
      devices: devices.length,
      kernels_per_device: Math.round(kernels.length / devices.length),
      // a jitted replay launches one CUDA graph per run of a device's kernels between its copies (jit.ts deviceRuns)
      ...(devices.length > 1
        ? {
            copies_per_device: Math.round(recorded.filter((item) => item.kind === "copy").length / devices.length),
            graphs_per_device: Math.round(
              deviceRuns(recorded).filter((part) => Array.isArray(part)).length / devices.length,
            ),
          }
        : {}),
      distinct_kernels: formOf.size,
      host_s: +hostSeconds.toFixed(1),
      footprint_gib: +footprintGiB.toFixed(2),
      gb_moved_by_form: Object.fromEntries(Object.entries(bytesByForm).map(([k, v]) => [k, +v.toFixed(2)])),
      flop_share_by_form: Object.fromEntries(Object.entries(byForm).map(([k, v]) => [k, +v.toFixed(4)])),
      kernels_by_flops: [...rows.values()]
        .sort((a, b) => b.gflop - a.gflop)
        .map((r) => ({ ...r, gflop: +r.gflop.toFixed(2), gb: +r.gb.toFixed(3) })),
    },
    null,
    1,
  ),
);
