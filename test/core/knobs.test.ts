import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("../..", import.meta.url));
const run = (env: Record<string, string>, code: string) =>
  spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], {
    cwd: root,
    env: { ...process.env, ...env },
    encoding: "utf8",
  });

test("DEFAULT_FLOAT=HALF makes new float tensors float16", () => {
  const r = run(
    { DEFAULT_FLOAT: "HALF" },
    `import { Tensor } from "./src/index.ts"; console.log(Tensor.randn([2]).dtype.name, new Tensor([1.5]).dtype.name, Tensor.arange(3).dtype.name);`,
  );
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout.trim(), "float16 float16 int32");
});

test("DEBUG=2 prints one line per kernel with device, name, shape, time, GFLOP/s and options; DEBUG=4 adds the source", () => {
  const code = `import { Tensor } from "./src/index.ts"; new Tensor([1, 2, 3], { device: "JS", dtype: "float32" }).exp().sum().realize();`;
  const two = run({ DEBUG: "2" }, code);
  assert.equal(two.status, 0, two.stderr);
  const lines = two.stderr.split("\n").filter((l) => l.startsWith("***"));
  assert.equal(lines.length, 1);
  assert.match(lines[0]!, /^\*\*\* JS\s+\d+ r\s+\[\]\s+[\d.]+ ms\s+[\d.]+ GFLOP\/s {2}u\|\S+$/);
  const four = run({ DEBUG: "4" }, code);
  assert.match(four.stderr, /for \(let r\d+ = 0; r\d+ < 3;/);
});

test("a bad DEFAULT_FLOAT names the value", () => {
  const r = run({ DEFAULT_FLOAT: "QUARTER" }, `import { Tensor } from "./src/index.ts";`);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /QUARTER/);
});

test("a numeric knob that is not a decimal number is refused by name", async () => {
  const { getenv, TsgradError } = await import("../../src/index.ts");
  const saved = process.env.BEAM;
  try {
    for (const raw of ["0x2", " 2", "Infinity", "two"]) {
      process.env.BEAM = raw;
      assert.throws(
        () => getenv("BEAM", 0),
        (e: unknown) =>
          e instanceof TsgradError && e.message.includes(`BEAM=${JSON.stringify(raw)} is not a decimal number`),
      );
    }
    process.env.BEAM = "2";
    assert.equal(getenv("BEAM", 0), 2);
    process.env.BEAM = "0.01";
    assert.equal(getenv("BEAM", 0), 0.01);
  } finally {
    if (saved === undefined) delete process.env.BEAM;
    else process.env.BEAM = saved;
  }
});
