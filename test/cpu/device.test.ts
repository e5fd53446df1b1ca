// The CPU device as a device: default where a compiler works, forced by DEVICE= or CPU=1, virtual CPU:n devices.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { Device, Tensor, dtypes } from "../../src/index.ts";

const hasCpu = Device.isAvailable("CPU");

/** The default device a fresh process picks with `env` added. */
function defaultDevice(env: Record<string, string>): string {
  const script = `import { Device } from "./src/index.ts"; console.log(Device.DEFAULT);`;
  const run = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
    env: { ...process.env, DEVICE: "", CPU: "", JS: "", ...env },
    encoding: "utf8",
  });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout.trim();
}

test("the CPU device is the default where a compiler works, and DEVICE=JS forces JS", { skip: !hasCpu }, () => {
  assert.equal(defaultDevice({}), "CPU");
  assert.equal(defaultDevice({ DEVICE: "JS" }), "JS");
});

test("without a working compiler the default is JS", () => {
  assert.equal(defaultDevice({ CC: "/nonexistent/cc" }), "JS");
});

test("virtual CPU devices compute independently and copy between each other", { skip: !hasCpu }, () => {
  const a = new Tensor([1, 2, 3], { dtype: dtypes.float32, device: "CPU:1" });
  const b = new Tensor([10, 20, 30], { dtype: dtypes.float32, device: "CPU:2" });
  const sum = a.mul(2).to("CPU:2").add(b);
  assert.equal(sum.device, "CPU:2");
  assert.deepEqual(sum.tolist(), [12, 24, 36]);
});
