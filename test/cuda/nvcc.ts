// Compiles many rendered CUDA kernels with nvcc in a few parallel invocations (compile only: no GPU needed),
// naming the kernels whose lines the compiler complains about.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CUDA_PRELUDE } from "../../src/renderer/cuda.ts";
import { nvccFlags } from "../../src/runtime/cuda_compile.ts";

export interface NamedKernel {
  /** The kernel's function name in the source (unique among the kernels compiled together). */
  readonly name: string;
  readonly code: string;
}

export interface CompileReport {
  /** nvcc's messages, empty when everything compiled. */
  readonly errors: string;
  /** Names of the kernels the error lines point into. */
  readonly failing: string[];
  /** The outputs nvcc wrote (one per file), for content checks. */
  readonly outputs: string[];
  /** What nvcc printed on stderr for each file (ptxas's reports with `-Xptxas -v`). */
  readonly logs: string[];
}

/**
 * Compiles `kernels` for `archs` in `files` parallel nvcc runs; `mode` is -fatbin (every arch), -ptx or -cubin (one
 * arch).
 */
export async function compileKernels(
  nvcc: string,
  kernels: readonly NamedKernel[],
  archs: readonly string[],
  { files = 2, mode = "-fatbin", flags = [] as string[] } = {},
): Promise<CompileReport> {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-cuda-test-"));
  try {
    const runs = Array.from({ length: Math.min(files, kernels.length) }, (_, f) => {
      const mine = kernels.filter((_, i) => i % files === f);
      const lines = CUDA_PRELUDE.split("\n");
      const owners: { start: number; name: string }[] = [];
      for (const k of mine) {
        owners.push({ start: lines.length + 1, name: k.name });
        lines.push(...k.code.split("\n"), "");
      }
      const source = join(dir, `k${f}.cu`);
      const output = join(dir, `k${f}.out`);
      writeFileSync(source, lines.join("\n"));
      return { source, output, owners };
    });
    const results = await Promise.all(
      runs.map(({ source, output }) =>
        run(nvcc, [...nvccFlags(archs, { ptx: mode !== "-fatbin" }), ...flags, mode, "-o", output, source]),
      ),
    );
    const failing = new Set<string>();
    let errors = "";
    results.forEach(({ status, stderr }, f) => {
      if (status === 0) return;
      errors += stderr;
      for (const match of stderr.matchAll(/\.cu\((\d+)\): error/g)) {
        const line = Number(match[1]);
        const owner = runs[f]!.owners.filter((o) => o.start <= line).pop();
        if (owner) failing.add(owner.name);
      }
    });
    const outputs = results.map(({ status }, f) =>
      status === 0 ? readFileSync(runs[f]!.output, mode === "-ptx" ? "utf8" : "latin1") : "",
    );
    return { errors, failing: [...failing], outputs, logs: results.map((r) => r.stderr) };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function run(command: string, args: string[]): Promise<{ status: number; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { stdio: ["ignore", "ignore", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d) => (stderr += d));
    child.on("close", (status) => resolve({ status: status ?? 1, stderr }));
  });
}
