import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, mock, test } from "node:test";
import { Device, Tensor, dtypes, type DTypeName } from "../../src/index.ts";
import { LayerNorm, Linear } from "../../src/nn/layers.ts";
import { LAMB, OptimizerGroup } from "../../src/nn/optim.ts";
import {
  readSafetensorsFile,
  readSafetensorsHeader,
  SafetensorsError,
  writeSafetensorsFile,
} from "../../src/io/safetensors.ts";
import { LRSchedulerGroup, PolynomialDecayWithWarmup } from "../../src/nn/schedules.ts";
import {
  StateDictError,
  getParameters,
  getStateDict,
  loadStateDict,
  loadTrainingState,
  safeLoad,
  safeSave,
  saveTrainingState,
  storageOf,
} from "../../src/nn/state.ts";

Device.DEFAULT = process.env.DEVICE ?? "JS";

const scratch = mkdtempSync(join(tmpdir(), "tsgrad-state-"));
after(() => rmSync(scratch, { recursive: true, force: true }));

class Block {
  dense = new Linear(3, 2);
  LayerNorm = new LayerNorm(2);
  readonly #shared: Tensor;
  constructor(shared: Tensor) {
    this.#shared = shared;
  }
  get shared(): Tensor {
    return this.#shared;
  }
}

class Net {
  layers: Block[];
  head = { proj: new Linear(2, 1, { bias: false }) };
  size = 7;
  constructor() {
    const first = new Block(Tensor.zeros([1]));
    this.layers = [first, new Block(first.dense.weight)];
  }
}

test("state dicts name tensors by their dotted property path, arrays by index", () => {
  assert.deepEqual(Object.keys(getStateDict(new Net())), [
    "layers.0.dense.weight",
    "layers.0.dense.bias",
    "layers.0.LayerNorm.weight",
    "layers.0.LayerNorm.bias",
    "layers.1.dense.weight",
    "layers.1.dense.bias",
    "layers.1.LayerNorm.weight",
    "layers.1.LayerNorm.bias",
    "head.proj.weight",
  ]);
});

test("a tensor held in a #private field (a tied weight) is not listed again", () => {
  const net = new Net();
  assert.equal(net.layers[1]!.shared, net.layers[0]!.dense.weight);
  assert.equal(getParameters(net).filter((t) => t === net.layers[0]!.dense.weight).length, 1);
});

test("objects with a stateDict() method contribute what it returns, under a prefix", () => {
  const p = new Linear(2, 2);
  const group = new OptimizerGroup(new LAMB([p.weight]), new LAMB([p.bias!]));
  const names = Object.keys(getStateDict({ optimizer: group }));
  assert.deepEqual(names.slice(0, 5), [
    "optimizer.0.lr",
    "optimizer.0.b1Power",
    "optimizer.0.b2Power",
    "optimizer.0.m.0",
    "optimizer.0.v.0",
  ]);
  assert.equal(names.length, 10);
});

test("loading a state dict writes the values in place, so held references see them", () => {
  const [source, target] = [new Net(), new Net()];
  const weight = target.layers[0]!.dense.weight;
  loadStateDict(target, getStateDict(source));
  assert.equal(target.layers[0]!.dense.weight, weight);
  for (const [name, t] of Object.entries(getStateDict(target)))
    assert.deepEqual(t.tolist(), getStateDict(source)[name]!.tolist(), name);
});

test("a strict load names the missing and the unexpected tensors", () => {
  const state = getStateDict(new Net());
  delete state["head.proj.weight"];
  state["head.extra"] = Tensor.ones([1]);
  assert.throws(
    () => loadStateDict(new Net(), state),
    (error: Error) =>
      error instanceof StateDictError &&
      /1 missing \(head\.proj\.weight\), 1 unexpected \(head\.extra\)/.test(error.message),
  );
});

test("a non-strict load fills what it has and leaves the rest", () => {
  const net = new Net();
  const before = net.head.proj.weight.tolist();
  loadStateDict(net, { "layers.0.dense.bias": new Tensor([5, 6]) }, { strict: false });
  assert.deepEqual(net.layers[0]!.dense.bias!.tolist(), [5, 6]);
  assert.deepEqual(net.head.proj.weight.tolist(), before);
});

test("a load with a wrong shape names the tensor and both shapes", () => {
  const state = getStateDict(new Net());
  state["layers.1.dense.bias"] = Tensor.ones([3]);
  assert.throws(
    () => loadStateDict(new Net(), state),
    /"layers\.1\.dense\.bias" has shape \[3\], the model wants \[2\]/,
  );
});

test("a load casts values to the target's dtype", () => {
  const net = new Net();
  loadStateDict(net, { "layers.0.dense.bias": new Tensor([1.5, -2], { dtype: "float16" }) }, { strict: false });
  assert.equal(net.layers[0]!.dense.bias!.dtype, dtypes.float32);
  assert.deepEqual(net.layers[0]!.dense.bias!.tolist(), [1.5, -2]);
});

const ALL_DTYPES: [DTypeName, number[]][] = [
  ["bool", [1, 0, 1]],
  ["int8", [-128, 0, 127]],
  ["uint8", [0, 200, 255]],
  ["int16", [-32768, 7, 32767]],
  ["uint16", [0, 40000, 65535]],
  ["int32", [-2147483648, 5, 2147483647]],
  ["uint32", [0, 3000000000, 4294967295]],
  ["int64", [-(2 ** 40), 0, 2 ** 50]],
  ["float16", [0.5, -65504, 6.103515625e-5]],
  ["bfloat16", [1.5, -3.3895313892515355e38, 0.0078125]],
  ["float32", [Math.fround(0.1), -1e30, 3.5]],
  ["float64", [0.1, -1e300, Math.PI]],
];

test("safetensors round trips tensors of every dtype bit for bit", () => {
  const state = Object.fromEntries(
    ALL_DTYPES.map(([name, data]) => [`t.${name}`, new Tensor(data, { dtype: name }).reshape([3, 1])]),
  );
  const path = join(scratch, "all-dtypes.safetensors");
  safeSave(state, path, { note: "all dtypes" });
  const { state: loaded, metadata } = safeLoad(path);
  assert.equal(metadata.note, "all dtypes");
  for (const [name] of ALL_DTYPES) {
    const [before, after] = [state[`t.${name}`]!, loaded[`t.${name}`]!];
    assert.equal(after.dtype.name, name);
    assert.deepEqual(after.shape, [3, 1]);
    assert.deepEqual(storageOf(after), storageOf(before), name);
  }
});

test("safetensors files use the standard dtype codes, readable by the plain codec", () => {
  const path = join(scratch, "codes.safetensors");
  safeSave(
    { a: new Tensor([1, 2], { dtype: "float16" }), b: new Tensor([3], { dtype: "int64" }), c: new Tensor([true]) },
    path,
  );
  const { tensors } = readSafetensorsFile(path);
  assert.deepEqual([tensors.a!.dtype, tensors.b!.dtype, tensors.c!.dtype], ["F16", "I64", "BOOL"]);
  assert.deepEqual(Array.from(tensors.a!.data as Uint16Array), [0x3c00, 0x4000]);
});

test("saving a lazy or strided tensor stores its values in row-major order", () => {
  const path = join(scratch, "lazy.safetensors");
  safeSave({ t: Tensor.arange(6).reshape([2, 3]).transpose().add(1) }, path);
  assert.deepEqual(safeLoad(path).state.t!.tolist(), [
    [1, 4],
    [2, 5],
    [3, 6],
  ]);
});

test("loading a dtype tsgrad lacks names the file and tensor", () => {
  const path = join(scratch, "u64.safetensors");
  writeSafetensorsFile(path, { big: { dtype: "U64", shape: [1], data: BigUint64Array.of(1n) } });
  assert.throws(() => safeLoad(path), /u64\.safetensors: tensor "big" is U64, which tsgrad has no dtype for/);
});

test("a failed save leaves no file behind", () => {
  const folder = join(scratch, "missing-folder");
  assert.throws(() => safeSave({ t: Tensor.ones([2]) }, join(folder, "x.safetensors")));
  assert.deepEqual(
    readdirSync(scratch).filter((name) => name.includes(".tmp")),
    [],
  );
});

/** A model, its two LAMBs and their schedules, as the BERT trainer builds them. */
function trainingSetup() {
  Tensor.manualSeed(21);
  const model = new Linear(4, 3);
  const optimizers = [new LAMB([model.weight], { lr: 0.1, weightDecay: 0.01 }), new LAMB([model.bias!], { lr: 0.1 })];
  const optimizer = new OptimizerGroup(...optimizers);
  const scheduler = new LRSchedulerGroup(
    ...optimizers.map((o) => new PolynomialDecayWithWarmup(o, { initialLr: 0.1, totalSteps: 10, warmupSteps: 2 })),
  );
  const x = new Tensor([
    [1, 2, 3, 4],
    [-1, 0.5, 2, 0],
  ]);
  const step = (): void => {
    optimizer.zeroGrad();
    model.forward(x).square().sum().backward();
    optimizer.step();
    scheduler.step();
  };
  return { model, optimizer, scheduler, step };
}

test("a saved training state resumes exactly: model, both optimizers' moments and the schedule", () => {
  const path = join(scratch, "train-state.safetensors");
  const original = trainingSetup();
  original.step();
  original.step();
  saveTrainingState(
    path,
    { model: original.model, optimizer: original.optimizer, scheduler: original.scheduler },
    { step: "2" },
  );
  original.step();

  const resumed = trainingSetup();
  const metadata = loadTrainingState(path, {
    model: resumed.model,
    optimizer: resumed.optimizer,
    scheduler: resumed.scheduler,
  });
  assert.equal(metadata.step, "2");
  assert.equal(resumed.scheduler.schedulers[0]!.stepCount.item(), 2);
  resumed.step();
  assert.deepEqual(resumed.model.weight.tolist(), original.model.weight.tolist());
  assert.deepEqual(resumed.model.bias!.tolist(), original.model.bias!.tolist());
  assert.deepEqual(
    (resumed.optimizer.optimizers[1] as LAMB).v[0]!.tolist(),
    (original.optimizer.optimizers[1] as LAMB).v[0]!.tolist(),
  );
  assert.equal(resumed.optimizer.optimizers[0]!.lr.item(), original.optimizer.optimizers[0]!.lr.item());
});

test("a training state lists every part under its prefix", () => {
  const path = join(scratch, "train-state-names.safetensors");
  const { model, optimizer, scheduler } = trainingSetup();
  saveTrainingState(path, { model, optimizer, scheduler });
  const names = Object.keys(readSafetensorsFile(path).tensors).sort();
  assert.deepEqual(names, [
    "model.bias",
    "model.weight",
    "optimizer.0.b1Power",
    "optimizer.0.b2Power",
    "optimizer.0.lr",
    "optimizer.0.m.0",
    "optimizer.0.v.0",
    "optimizer.1.b1Power",
    "optimizer.1.b2Power",
    "optimizer.1.lr",
    "optimizer.1.m.0",
    "optimizer.1.v.0",
    "scheduler.0.step",
    "scheduler.1.step",
  ]);
});

test("loading a plain safetensors file as a training state is refused", () => {
  const path = join(scratch, "plain.safetensors");
  safeSave({ t: Tensor.ones([1]) }, path);
  const { model, optimizer, scheduler } = trainingSetup();
  assert.throws(() => loadTrainingState(path, { model, optimizer, scheduler }), /not a tsgrad training state/);
});

test("a training state with a flipped byte is refused, naming the file and the tensor", () => {
  const path = join(scratch, "flipped.safetensors");
  const { model, optimizer, scheduler, step } = trainingSetup();
  step();
  saveTrainingState(path, { model, optimizer, scheduler }, { step: "1" });
  const { byteOffset } = readSafetensorsHeader(path).entries["optimizer.0.v.0"]!;
  const bytes = readFileSync(path);
  bytes[byteOffset + 5]! ^= 0x01;
  writeFileSync(path, bytes);
  assert.throws(
    () => loadTrainingState(path, { model, optimizer, scheduler }),
    (error: unknown) =>
      error instanceof SafetensorsError &&
      error.message.startsWith(`${path}: tensor "optimizer.0.v.0", byte offset ${byteOffset}: the CRC-32C`),
  );
});

test("a training state written before checksums loads, with a warning naming it", () => {
  const path = join(scratch, "unchecked.safetensors");
  const saved = trainingSetup();
  saved.step();
  saveTrainingState(path, { model: saved.model, optimizer: saved.optimizer, scheduler: saved.scheduler });
  const { tensors, metadata } = readSafetensorsFile(path);
  writeSafetensorsFile(path, tensors, metadata, { checksums: false });
  const { model, optimizer, scheduler } = trainingSetup();
  const warn = mock.method(console, "error", () => {});
  try {
    loadTrainingState(path, { model, optimizer, scheduler });
  } finally {
    warn.mock.restore();
  }
  assert.deepEqual(model.weight.tolist(), saved.model.weight.tolist());
  assert.equal(warn.mock.callCount(), 1);
  assert.match(String(warn.mock.calls[0]!.arguments[0]), new RegExp(`^warning: ${path} was written without checksums`));
});
