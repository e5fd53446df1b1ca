// Ctrl-C through the tsgrad command (issue 38): the bin runs the trainer as a child of its own process, and a
// terminal's SIGINT reaches both; the trainer still finishes its step, checkpoints and exits 130, and the command
// with it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { tinyDataFolder } from "./tiny_manifest.ts";

const root = join(import.meta.dirname, "..", "..");
const dir = mkdtempSync(join(tmpdir(), "tsgrad-cli-signals-"));
test.after(() => rmSync(dir, { recursive: true, force: true }));

test("Ctrl-C to `tsgrad train`'s process group: a checkpoint after the step, exit 130", {
  timeout: 120_000,
}, async () => {
  const data = tinyDataFolder(join(dir, "data"));
  const args = ["bin/tsgrad.mjs", "train", "--data", data, "--out", join(dir, "run"), "--verbose"];
  const knobs = ["--train-steps", "100000", "--eval-step-freq", "100000", "--save-ckpt-freq", "100000"];
  const child = spawn(process.execPath, [...args, ...knobs], {
    cwd: root,
    env: { ...process.env, DEVICE: "JS", BEAM: "0" },
    detached: true,
    stdio: "pipe",
  });
  let output = "";
  let sentAfter = 0;
  const collect = (chunk: Buffer) => {
    output += chunk.toString();
    const steps = [...output.matchAll(/^step (\d+) /gm)].map((m) => Number(m[1]));
    if (sentAfter === 0 && steps.length > 0 && steps.at(-1)! >= 3) {
      sentAfter = steps.at(-1)!;
      process.kill(-child.pid!, "SIGINT");
    }
  };
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  const status = await new Promise<number | null>((resolve) => child.on("close", resolve));
  assert.equal(status, 130, output);
  const match = /interrupted at step (\d+); continue with RESUME=(\S+)/.exec(output);
  assert.ok(match, `no interrupt message:\n${output}`);
  assert.ok(Number(match[1]) <= sentAfter + 1, `signalled after step ${sentAfter}, stopped at ${match[1]}`);
  assert.ok(existsSync(match[2]!), `the checkpoint ${match[2]}`);
  assert.match(output, /^result: {6}interrupted at step \d+/m);
});
