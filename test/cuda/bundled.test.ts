// Op tests bundled as bench/gpu-check.sh bundles them for the GPU machine (bench/gpu/bundle.ts), run as it runs
// them: `node --test` on the bundles, in a folder of their own beside koffi only, CUDA being the emulator
// (or the JS device alone where there is no g++), no CPU device. A bundle can break where the sources work:
// the lowered-kernel cache once took `/` for tsgrad's sources there and walked the whole filesystem.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { scratchDir } from "../scratch.ts";
import { buildCudaEmulator, emulatorEnv } from "./emu/build.ts";
import { bundleForDevice } from "../../bench/gpu/bundle.ts";

const root = join(import.meta.dirname, "..", "..");

test("op tests bundled for the GPU machine pass from their bundles, on the emulated GPU", { timeout: 200_000 }, () => {
  const work = scratchDir("bundled-");
  const folder = join(work, "device");
  // what travels beside the bundles: koffi and its native package, nothing else of node_modules
  mkdirSync(join(folder, "node_modules", "@koromix"), { recursive: true });
  symlinkSync(join(root, "node_modules", "koffi"), join(folder, "node_modules", "koffi"));
  symlinkSync(
    join(root, "node_modules", "@koromix", "koffi-linux-x64"),
    join(folder, "node_modules", "@koromix", "koffi-linux-x64"),
  );
  const names = ["regressions", "jit"];
  bundleForDevice(
    names.map((n) => join(root, "test", "core", `${n}.test.ts`)),
    join(folder, "tests"),
  );
  const library = buildCudaEmulator(work);
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const run = spawnSync(
    process.execPath,
    ["--test", "--test-reporter=spec", ...names.map((n) => join(folder, "tests", `${n}.test.mjs`))],
    {
      cwd: folder,
      env: {
        ...env,
        ...(library ? emulatorEnv(library, work) : { TSGRAD_CACHE: join(work, "cache") }),
        CC: "/nonexistent/cc",
      },
      encoding: "utf8",
      timeout: 120_000,
    },
  );
  const failing = run.stdout
    .split("\n")
    .filter((l) => /✖|Error/.test(l))
    .slice(0, 20)
    .join("\n");
  assert.equal(run.status, 0, `${run.error ?? ""}\n${failing}\n${run.stderr.slice(-2000)}`);
  assert.ok(Number(run.stdout.match(/^ℹ pass (\d+)/m)?.[1]) >= 10, run.stdout.slice(-1500));
  if (library) assert.match(run.stdout, /\(CUDA\)/);
});
