// Compiles every kernel of one jitted BERT float16 train step for an AMD GPU without one (tinybox red's dry run):
// the step runs on a NULL device (bench/gpu/step_kernels.ts), each distinct kernel takes the AMD backend's form
// (WMMA tiles or GPU loops, codegen/amd_forms.ts), is rendered as HIP and compiled to a code object for --arch by
// the backend's own compiler (runtime/hip_compile.ts: hiprtc of ROCm 6+, else hipcc processes in parallel), --module
// kernels a module. Prints JSON: kernels in the step, distinct ones, forms, modules, code-object bytes, WMMA
// instructions in the code (where llvm-objdump is there to count them), seconds. Exits 1 naming the first kernel
// that fails to compile.
// Usage: npx tsx bench/amd/compile_step.ts [--preset large] [--batch 11] [--seq 512] [--layers N]
//        [--arch gfx1100] [--module 32]
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { amdForm, renderAmdForm } from "../../src/codegen/amd_forms.ts";
import { HIP_PRELUDE } from "../../src/renderer/hip.ts";
import { compileHipAll, hipCompilerName } from "../../src/runtime/hip_compile.ts";
import { benchArgs } from "../args.ts";
import {
  STEP_SHAPE_OPTIONS,
  type BertStepShape,
  bertStepKernels,
  stepShapeOf,
  useNullDevice,
} from "../gpu/step_kernels.ts";

export interface StepCompile {
  readonly compiler: string | null;
  readonly arch: string;
  /** Kernel launches in the step, and the distinct sources among them (a model's layers repeat). */
  readonly kernels: number;
  readonly distinct: number;
  readonly forms: { readonly wmma: number; readonly loops: number };
  readonly modules: number;
  readonly codeBytes: number;
  /** v_wmma instructions in the code objects; undefined without a disassembler. */
  readonly wmmaInstructions?: number;
  /** Scratch-memory loads and stores (register spills, or private arrays the compiler could not keep in registers). */
  readonly scratchInstructions?: number;
  readonly seconds: number;
}

/**
 * Compiles `kernels` (each distinct source once) for `arch`, `perModule` kernels a module, modules in parallel.
 * Rejects with the first CompileError.
 */
export async function compileKernelsForAmd(
  kernels: readonly KernelIR[],
  arch: string,
  { perModule = 64, what = "kernels" } = {},
): Promise<Omit<StepCompile, "compiler" | "arch" | "kernels" | "seconds"> & { readonly codeObjects: Uint8Array[] }> {
  const sources = new Map<string, "wmma" | "loops">();
  const seen = new Set<KernelIR>();
  for (const kernel of kernels) {
    if (seen.has(kernel)) continue;
    seen.add(kernel);
    const form = amdForm(kernel, arch);
    sources.set(renderAmdForm(form, "tg_kernel", true).code, form.kind);
  }
  const codes = [...sources.keys()];
  const modules = [];
  for (let start = 0; start < codes.length; start += perModule) {
    const chunk = codes.slice(start, start + perModule);
    const body = chunk.map((code, i) => code.replace(/\btg_kernel\b/, `k${start + i}`)).join("\n\n");
    modules.push({ source: `${HIP_PRELUDE}\n${body}\n`, what: `${what} ${start}-${start + chunk.length - 1}` });
  }
  const codeObjects = await compileHipAll(modules, arch);
  const kinds = [...sources.values()];
  return {
    distinct: codes.length,
    forms: { wmma: kinds.filter((k) => k === "wmma").length, loops: kinds.filter((k) => k === "loops").length },
    modules: codeObjects.length,
    codeBytes: codeObjects.reduce((s, c) => s + c.length, 0),
    wmmaInstructions: countInstructions(codeObjects, arch, /\bv_wmma_/),
    scratchInstructions: countInstructions(codeObjects, arch, /\bscratch_(load|store)/),
    codeObjects,
  };
}

/** `llvm-objdump` with the AMDGPU target: ROCm's, or Debian's versioned ones. */
export function findObjdump(): string | undefined {
  return [
    "/opt/rocm/llvm/bin/llvm-objdump",
    ...[19, 18, 17, 16, 15].map((v) => `llvm-objdump-${v}`),
    "llvm-objdump",
  ].find((c) => spawnSync(c, ["--version"], { encoding: "utf8" }).stdout?.includes("amdgcn"));
}

/** The disassembly of a code object, or undefined without a disassembler. */
export function disassemble(code: Uint8Array, arch: string): string | undefined {
  const objdump = findObjdump();
  if (!objdump) return undefined;
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-objdump-"));
  try {
    writeFileSync(join(dir, "k.co"), code);
    const run = spawnSync(objdump, ["-d", `--mcpu=${arch}`, join(dir, "k.co")], {
      encoding: "utf8",
      maxBuffer: 1 << 28,
    });
    if (run.status !== 0) throw new Error(`${objdump} failed: ${run.stderr}`);
    return run.stdout;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function countInstructions(codeObjects: readonly Uint8Array[], arch: string, pattern: RegExp): number | undefined {
  let count = 0;
  for (const code of codeObjects) {
    const text = disassemble(code, arch);
    if (text === undefined) return undefined;
    count += text.split("\n").filter((line) => pattern.test(line)).length;
  }
  return count;
}

/** The kernels of one float16 train step of `shape`, each compiled for `arch`. */
export async function compileBertStep(shape: BertStepShape, arch: string, perModule = 32): Promise<StepCompile> {
  const start = performance.now();
  useNullDevice();
  const kernels = bertStepKernels(shape);
  const { codeObjects: _, ...compiled } = await compileKernelsForAmd(kernels, arch, {
    perModule,
    what: `BERT-${shape.preset} step kernels`,
  });
  return {
    compiler: hipCompilerName(),
    arch,
    kernels: kernels.length,
    ...compiled,
    seconds: (performance.now() - start) / 1000,
  };
}

if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = benchArgs(import.meta.url, {
    ...STEP_SHAPE_OPTIONS,
    batch: { type: "string", default: "11" },
    arch: { type: "string", default: "gfx1100" },
    module: { type: "string", default: "32" },
  });
  try {
    console.log(
      JSON.stringify(await compileBertStep(stepShapeOf(values), values.arch, Number(values.module)), null, 1),
    );
  } catch (e) {
    console.error(e instanceof Error ? e.message : e);
    process.exit(1);
  }
}
