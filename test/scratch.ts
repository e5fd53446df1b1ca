import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

// node --test runs each test file in its own process, so one root per process removed on exit cleans up after every
// test in it.
let root: string | undefined;

/** A fresh empty folder, removed (with everything in it) when this process exits. */
export function scratchDir(label = "dir-"): string {
  if (root === undefined) {
    const dir = (root = mkdtempSync(join(tmpdir(), "tsgrad-scratch-")));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  }
  return mkdtempSync(join(root, label));
}
