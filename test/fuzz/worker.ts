// A child process that runs fuzz programs on tsgrad's devices, one JSON line per program on stdout. The parent
// (check.ts) runs programs here, not in itself: a kernel that crashes takes down only this process, and one that
// fails to compile leaves the CPU device unable to compile anything after it (the failed program stays pending and
// every later batch retries it), so this process stops after a compile error and the parent starts a fresh one.
//
// stdin: {"programs": [...], "devices": [...]}; stdout: {"start": i} before program i, then {"index": i, "results":
// {device: ...}}.
import { readFileSync } from "node:fs";
import type { Program } from "./program.ts";
import { runOnDevice } from "./runner.ts";

/** The exit status after a compile error: the parent goes on with a fresh worker. */
const EXIT_COMPILE_ERROR = 3;

function main(): void {
  const { programs, devices } = JSON.parse(readFileSync(0, "utf8")) as { programs: Program[]; devices: string[] };
  for (const [index, p] of programs.entries()) {
    process.stdout.write(`${JSON.stringify({ start: index })}\n`);
    const results: Record<string, unknown> = {};
    let poisoned = false;
    for (const device of devices) {
      const r = runOnDevice(p, device);
      results[device] = { ...r, grads: r.grads ? [...r.grads] : undefined };
      if (r.error?.includes("CompileError")) poisoned = true;
    }
    // JSON has no NaN or Infinity: as strings, which Number() reads back
    process.stdout.write(
      `${JSON.stringify({ index, results }, (_, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? String(v) : v))}\n`,
    );
    if (poisoned) process.exit(EXIT_COMPILE_ERROR);
  }
}

main();
