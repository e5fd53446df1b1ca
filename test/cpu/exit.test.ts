// A process that ran CPU kernels exits cleanly: kernel libraries (and the OpenMP runtime they load) stay
// mapped until the end. Unloaded at exit while OpenMP's idle worker threads still ran its code, node
// crashed (SIGSEGV, exit 139) on about 4 exits in 10.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Device } from "../../src/index.ts";
import { scratchDir } from "../scratch.ts";

const hasCpu = Device.isAvailable("CPU");
const hasReadelf = spawnSync("readelf", ["--version"]).status === 0;

const child = `import { Tensor } from ${JSON.stringify(join(import.meta.dirname, "../../src/index.ts"))};
const a = Tensor.rand([256, 256], { device: "CPU" }).realize(), b = Tensor.rand([256, 256], { device: "CPU" }).realize();
for (let i = 0; i < 3; i++) a.matmul(b).add(i).realize();
`;

test("processes that ran multi-threaded CPU kernels exit with status 0, every time", { skip: !hasCpu }, () => {
  const dir = scratchDir("exit");
  const cache = join(dir, "cache");
  writeFileSync(join(dir, "child.ts"), child);
  const statuses = Array.from({ length: 6 }, () => {
    const run = spawnSync(process.execPath, ["--import", "tsx", join(dir, "child.ts")], {
      env: { ...process.env, TSGRAD_CACHE: cache, THREADS: "2" },
      encoding: "utf8",
    });
    return run.signal ?? run.status;
  });
  assert.deepEqual(statuses, [0, 0, 0, 0, 0, 0]);
  // the libraries say so themselves
  const libraries = readdirSync(join(cache, "cpu")).filter((f) => f.endsWith(".so"));
  assert.ok(libraries.length > 0);
  if (hasReadelf)
    for (const lib of libraries)
      assert.match(spawnSync("readelf", ["-d", join(cache, "cpu", lib)], { encoding: "utf8" }).stdout, /NODELETE/, lib);
});
