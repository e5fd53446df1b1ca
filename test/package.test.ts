// The package as a Node user gets it (`npm install`, then `import { Tensor, nn, jit } from "tsgrad"`): built
// to JavaScript by `npm run build` (tsconfig.build.json), it runs in plain Node, with no TypeScript loader.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";

const root = join(import.meta.dirname, "..");

test("the built package imports in plain Node and trains a layer with a jitted step", { timeout: 120_000 }, () => {
  // inside node_modules, so that the build's own imports (koffi) resolve as they do for an installed package
  const out = join(root, "node_modules", ".cache", `tsgrad-package-test-${process.pid}`);
  try {
    const build = spawnSync("npx", ["tsc", "-p", "tsconfig.build.json", "--outDir", out], { cwd: root, encoding: "utf8" });
    assert.equal(build.status, 0, `the build failed:\n${build.stdout}${build.stderr}`);
    const manifest = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
    // what package.json points users at is what the build writes
    for (const path of [manifest.main, manifest.types, manifest.exports["."].default, manifest.exports["."].types]) {
      assert.ok(existsSync(join(out, path.replace(/^(\.\/)?dist\//, ""))), `${path} is not in the build`);
    }
    const script = `
      import { Tensor, nn, jit, dtypes } from ${JSON.stringify(join(out, "index.js"))};
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
    `;
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { cwd: root, encoding: "utf8", env: { ...process.env, DEVICE: "JS", NODE_OPTIONS: "" } });
    assert.equal(run.status, 0, run.stderr);
    const { sum, losses } = JSON.parse(run.stdout) as { sum: number; losses: number[] };
    assert.equal(sum, 21);
    for (let i = 1; i < losses.length; i++) assert.ok(losses[i]! < losses[i - 1]!, `the loss did not fall: ${losses}`);
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
});
