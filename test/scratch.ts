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
    process.on("exit", () => {
      // a kernel cache in it may still be filled by background -O3 builds (compile_tiers.ts) as the process ends:
      // retried, and a folder they keep filling is left to the system's temporary files rather than failing the run
      try {
        rmSync(dir, { recursive: true, force: true, maxRetries: 10, retryDelay: 20 });
      } catch {
        // left in tmpdir()
      }
    });
  }
  return mkdtempSync(join(root, label));
}
