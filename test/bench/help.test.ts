// Every bench script answers --help with its usage and exit status 0 (issue 38: some crashed on it), without
// running the benchmark: fast, and safe on any machine (the GPU scripts must not touch CUDA for it).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readdirSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const projectRoot = fileURLToPath(new URL("../../", import.meta.url));
/** Modules of the bench folder that are helpers, not scripts. */
const HELPERS = new Set(["bench/args.ts", "bench/webgpu_tfjs_bert.ts"]);

const scripts = ["bench", "bench/gpu"]
  .flatMap((dir) =>
    readdirSync(path.join(projectRoot, dir))
      .filter((name) => name.endsWith(".ts"))
      .map((name) => `${dir}/${name}`),
  )
  .filter((script) => !HELPERS.has(script))
  .sort();

const run = promisify(execFile);

test("the bench folder has scripts to check", () => {
  assert.ok(scripts.length >= 20, scripts.join(" "));
});

// a few at a time: each is a Node process loading tsx and the sources
describe("bench --help", { concurrency: 4 }, () => {
  for (const script of scripts) {
    test(`${script} --help prints its usage and exits 0`, async () => {
      const name = path.basename(script, ".ts");
      const { stdout } = await run(process.execPath, ["--import", "tsx", script, "--help"], {
        cwd: projectRoot,
        timeout: 30_000,
        env: { ...process.env, DEBUG: "0" },
      });
      assert.match(stdout, new RegExp(`^usage: .*\\b${name}\\b`, "im"), stdout);
    });
  }
});
