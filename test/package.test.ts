// The package as a Node user gets it (`npm install`, then `import { Tensor, nn, jit } from "tsgrad"`): built
// to JavaScript by `npm run build` (tsconfig.build.json), it runs in plain Node, with no TypeScript loader.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");
// inside node_modules, so that the build's own imports (koffi) resolve as they do for an installed package
const out = join(root, "node_modules", ".cache", `tsgrad-package-test-${process.pid}`);

/** Runs an ES module script against the build in plain Node; returns what it printed as JSON. */
function runWithBuild(script: string): unknown {
  const source = `import * as tsgrad from ${JSON.stringify(join(out, "index.js"))};\n${script}`;
  const run = spawnSync(process.execPath, ["--input-type=module", "-e", source], {
    cwd: root,
    encoding: "utf8",
    env: { ...process.env, DEVICE: "JS", NODE_OPTIONS: "" },
  });
  assert.equal(run.status, 0, run.stderr);
  return JSON.parse(run.stdout);
}

before(() => {
  const build = spawnSync("npx", ["tsc", "-p", "tsconfig.build.json", "--outDir", out], {
    cwd: root,
    encoding: "utf8",
  });
  assert.equal(build.status, 0, `the build failed:\n${build.stdout}${build.stderr}`);
});

after(() => rmSync(out, { recursive: true, force: true }));

test("the built package imports in plain Node and trains a layer with a jitted step", { timeout: 60_000 }, () => {
  const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  // what package.json points users at is what the build writes
  for (const path of [manifest.main, manifest.types, manifest.exports["."].default, manifest.exports["."].types]) {
    assert.ok(existsSync(join(out, path.replace(/^(\.\/)?dist\//, ""))), `${path} is not in the build`);
  }
  const { sum, losses } = runWithBuild(`
    const { Tensor, nn, jit, dtypes } = tsgrad;
    Tensor.manualSeed(0);
    const x = new Tensor([[1, 2, 3], [4, 5, 6]], { dtype: dtypes.float32 });
    const layer = new nn.Linear(3, 1);
    const optimizer = new nn.SGD(nn.getParameters(layer), { lr: 0.01 });
    const step = jit((x) => {
      optimizer.zeroGrad();
      const loss = layer.forward(x).square().mean();
      loss.backward();
      optimizer.step();
      return loss;
    });
    const losses = [0, 1, 2, 3, 4].map(() => step(x).item());
    console.log(JSON.stringify({ sum: x.sum().item(), losses }));
  `) as { sum: number; losses: number[] };
  assert.equal(sum, 21);
  for (let i = 1; i < losses.length; i++) assert.ok(losses[i]! < losses[i - 1]!, `the loss did not fall: ${losses}`);
});

// The public API is a deliberate list: a name added to src/index.ts or a namespace's index.ts must be added
// here too, so that nothing internal leaks out by accident.
const words = (text: string): string[] => text.trim().split(/\s+/).sort();
const PUBLIC_NAMES = {
  tsgrad: words(`
    Buffer Device GlobalCounters Tensor TinyJit TsgradError UOp broadcastShapes clearKernelCache dist dtypes
    fmtShape getenv initWebGpu io jit keep nn prod promote tidy
  `),
  nn: words(`
    AdamW BatchNorm Conv2d ConvTranspose2d CosineDecayWithWarmup Dropout Embedding GroupNorm LAMB LRScheduler
    LRSchedulerGroup LayerNorm Linear Optimizer OptimizerGroup PolynomialDecayWithWarmup RMSNorm SGD
    ReferencePolynomialDecay
    StateDictError clipGradNorm getParameters getStateDict initialisedTogether loadStateDict
    loadTrainingState ones parameter replicateParameters safeLoad safeSave saveTrainingState standardNormal
    truncatedNormal uniformFanIn zeros
  `),
  io: words(`
    SafetensorsError TfCheckpointError TfChecksumError checkTfCheckpoint crc32c decodeSafetensors
    encodeSafetensors listTfCheckpoint maskedCrc32c readSafetensorsFile readSafetensorsHeader removeStaleTemps
    readTfCheckpoint verifySafetensorsFile writeFileAtomic writeFileAtomicFrom writeSafetensorsFile
    writeSafetensorsStream
  `),
  dist: words(
    "DEFAULT_BUCKET_MB MpiError NcclCommunicator NcclError allReduceTensors broadcastTensors init worldFromEnv",
  ),
};

test("the built package exports exactly its public names, nn, io and dist as namespaces", { timeout: 60_000 }, () => {
  const names = runWithBuild(`
    const keys = (namespace) => Object.keys(namespace).sort();
    console.log(JSON.stringify({ tsgrad: keys(tsgrad), nn: keys(tsgrad.nn), io: keys(tsgrad.io), dist: keys(tsgrad.dist) }));
  `);
  assert.deepEqual(names, PUBLIC_NAMES);
});

test("the built package's io writes and reads a safetensors file and checksums as TFRecord does", {
  timeout: 60_000,
}, () => {
  const path = join(out, "roundtrip.safetensors");
  const { tensors, metadata, crc, masked, shape, count } = runWithBuild(`
    const { io, prod, fmtShape } = tsgrad;
    io.writeSafetensorsFile(${JSON.stringify(path)}, { w: { dtype: "F32", shape: [2, 2], data: new Float32Array([1, 2, 3, 4]) } }, { step: "7" });
    const { tensors, metadata } = io.readSafetensorsFile(${JSON.stringify(path)});
    const digits = new TextEncoder().encode("123456789");
    console.log(JSON.stringify({
      tensors: Object.fromEntries(Object.entries(tensors).map(([name, t]) => [name, { dtype: t.dtype, shape: t.shape, data: [...t.data] }])),
      metadata, crc: io.crc32c(digits), masked: io.maskedCrc32c(digits), shape: fmtShape([2, 3]), count: prod([2, 3]),
    }));
  `) as Record<string, unknown>;
  assert.deepEqual(tensors, { w: { dtype: "F32", shape: [2, 2], data: [1, 2, 3, 4] } });
  assert.deepEqual(metadata, { step: "7" });
  assert.equal(crc, 0xe3069283); // CRC-32C's check value (RFC 3720)
  assert.equal(masked, 0xc78ab0e5); // rotated right by 15 plus 0xa282ead8, TFRecord's mask
  assert.equal(shape, "[2, 3]");
  assert.equal(count, 6);
});
