import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";

/** Runs `body` with a fresh temporary folder, removed afterwards. */
export function withTempDir(body: (dir: string) => void): void {
  const dir = mkdtempSync(path.join(tmpdir(), "tsgrad-mlperf-test-"));
  try {
    body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
