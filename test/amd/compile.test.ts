// The AMD backend's kernels compile for a tinybox red's GPU (RX 7900 XTX, gfx1100) with the backend's own compile
// step (hip_compile.ts: Debian's hipcc here, test/setup/ensure-hip.sh), without the GPU: every kernel of a BERT-tiny
// and a BERT-large float16 train step, and the WMMA tile, whose code must hold RDNA3's matrix instructions and no
// register spills. What this cannot check is the GPU running them: test/amd/ checks that on the CPU emulator.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { scratchDir } from "../scratch.ts";

const work = scratchDir("amd-compile");
process.env.TSGRAD_CACHE = join(work, "cache");

const { Tensor, dtypes } = await import("../../src/index.ts");
const { recordItems } = await import("../../src/engine/realize.ts");
const { amdForm, renderAmdForm } = await import("../../src/codegen/amd_forms.ts");
const { HIP_PRELUDE } = await import("../../src/renderer/hip.ts");
const { CompileError } = await import("../../src/runtime/compiler_cache.ts");
const { checkCodeObject, compileHip, findHipcc, isaVersion } = await import("../../src/runtime/hip_compile.ts");
const { disassemble, findObjdump } = await import("../../bench/amd/compile_step.ts");
type StepCompile = import("../../bench/amd/compile_step.ts").StepCompile;

const skip = findHipcc() ? false : "hipcc not found (test/setup/ensure-hip.sh installs Debian's hipcc as root)";
const skipDisassembly = skip || (findObjdump() ? false : "no llvm-objdump with the AMDGPU target");

/** Runs bench/amd/compile_step.ts in a child (each step's kernels compile in a process of their own, in parallel). */
function compileStep(args: string[]): Promise<StepCompile> {
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const child = spawn(process.execPath, ["--import", "tsx", "bench/amd/compile_step.ts", ...args], {
    env: { ...env, TSGRAD_CACHE: join(work, `cache-${args.join("-")}`) },
  });
  let out = "",
    err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  return new Promise((resolve, reject) =>
    child.on("close", (status) =>
      status === 0 ? resolve(JSON.parse(out) as StepCompile) : reject(new Error(`compile_step ${args}: ${err}`)),
    ),
  );
}

test("every kernel of a BERT-tiny and a BERT-large float16 train step compiles for gfx1100", {
  skip,
  timeout: 300_000,
}, async (t) => {
  const [tiny, large] = await Promise.all([
    compileStep(["--preset", "tiny", "--batch", "4", "--seq", "128"]),
    // a tinybox red's share of the global batch 66 on one of six GPUs, at sequence 512
    compileStep(["--preset", "large", "--batch", "11", "--seq", "512"]),
  ]);
  for (const [name, step] of [
    ["BERT-tiny", tiny],
    ["BERT-large", large],
  ] as const) {
    t.diagnostic(
      `${name}: ${step.kernels} launches, ${step.distinct} distinct kernels (${step.forms.wmma} WMMA, ${step.forms.loops} loops) in ${step.modules} code objects of ${step.codeBytes} bytes, ${step.wmmaInstructions ?? "?"} v_wmma, ${step.scratchInstructions ?? "?"} scratch, ${step.seconds.toFixed(1)} s`,
    );
    assert.equal(step.arch, "gfx1100");
    assert.equal(step.forms.wmma + step.forms.loops, step.distinct);
    // every projection and attention product of the step (forward and backward) is a 16-bit matmul
    assert.ok(step.forms.wmma >= 20, `${name}: only ${step.forms.wmma} WMMA kernels`);
    // 2 x 2 tiles a wave, each k step
    if (step.wmmaInstructions !== undefined) assert.ok(step.wmmaInstructions >= 4 * step.forms.wmma);
    // no register spills, nor private arrays the compiler could not keep in registers
    if (step.scratchInstructions !== undefined)
      assert.equal(step.scratchInstructions, 0, `${name}: scratch memory used`);
  }
  assert.ok(large.kernels > 3000, `BERT-large's step launched ${large.kernels} kernels`);
  assert.ok(large.distinct > 150 && tiny.distinct > 100);
});

/** A float16 (or bfloat16) matmul with a bias and a ReLU after it: its kernels and their AMD forms. */
function matmulKernels(dtype: (typeof dtypes)["float16"]) {
  const a = Tensor.rand([256, 192], { device: "JS" }).cast(dtype);
  const b = Tensor.rand([192, 320], { device: "JS" }).cast(dtype);
  const bias = Tensor.rand([320], { device: "JS" }).cast(dtype);
  const { items } = recordItems(() => a.matmul(b).add(bias).relu().realize());
  return items.flatMap((item) => (item.kind === "kernel" ? [amdForm(item.kernel, "gfx1100")] : []));
}

test("the WMMA tile compiles to RDNA3's matrix instructions, with no register spills", {
  skip: skipDisassembly,
  timeout: 60_000,
}, () => {
  for (const [dtype, instruction] of [
    [dtypes.float16, "v_wmma_f32_16x16x16_f16"],
    [dtypes.bfloat16, "v_wmma_f32_16x16x16_bf16"],
  ] as const) {
    const wmma = matmulKernels(dtype).filter((f) => f.kind === "wmma");
    assert.equal(wmma.length, 1, `${dtype.name}: one WMMA kernel`);
    const code = compileHip(`${HIP_PRELUDE}\n${renderAmdForm(wmma[0]!, "k", true).code}\n`, "gfx1100", "a WMMA tile");
    const text = disassemble(code, "gfx1100")!;
    const count = text.split("\n").filter((l) => l.includes(instruction)).length;
    // 2 x 2 tiles a wave, in the k loop
    assert.ok(count >= 4, `${dtype.name}: ${count} ${instruction} instructions`);
    assert.doesNotMatch(text, /\bscratch_(store|load)/, `${dtype.name}: the tile spills registers to scratch memory`);
  }
});

test("the same kernels compile for gfx1030 (RDNA2, no WMMA) as loops", { skip, timeout: 60_000 }, () => {
  const kernels = matmulKernels(dtypes.float16).map((f) => f);
  const forms = kernels.map((f) => f.kind);
  assert.ok(forms.includes("wmma"));
  // the backend picks forms by the GPU's architecture: an RDNA2 GPU gets no WMMA kernel
  const a = Tensor.rand([256, 192], { device: "JS" }).cast(dtypes.float16);
  const b = Tensor.rand([192, 320], { device: "JS" }).cast(dtypes.float16);
  const { items } = recordItems(() => a.matmul(b).realize());
  const rdna2 = items.flatMap((i) => (i.kind === "kernel" ? [amdForm(i.kernel, "gfx1030")] : []));
  assert.ok(rdna2.every((f) => f.kind === "loops"));
  const source = rdna2.map((f, i) => renderAmdForm(f, `k${i}`, true).code).join("\n\n");
  const code = compileHip(`${HIP_PRELUDE}\n${source}\n`, "gfx1030", "RDNA2 kernels");
  checkCodeObject(code, "gfx1030", "RDNA2 kernels");
});

test("a compile error names the kernels, the architecture and hipcc's message", { skip, timeout: 60_000 }, () => {
  assert.throws(
    () =>
      compileHip(
        `${HIP_PRELUDE}\nextern "C" __global__ void k(float* b0) { b0[0] = undefined_thing; }\n`,
        "gfx1100",
        "the broken kernel",
      ),
    (e: Error) =>
      e instanceof CompileError && /the broken kernel for gfx1100/.test(e.message) && /undefined_thing/.test(e.message),
  );
});

test("architectures are checked before compiling and code objects after", () => {
  assert.throws(() => compileHip("", "sm_90", "k"), /"sm_90" is not an AMD GPU architecture/);
  assert.equal(isaVersion("gfx1100"), 11000);
  assert.equal(isaVersion("gfx90a"), 9010);
  assert.equal(isaVersion("gfx1030"), 10300);
  assert.throws(() => checkCodeObject(new Uint8Array(64), "gfx1100", "k"), /not an AMD GPU code object/);
  // an x86 ELF header: right magic, wrong machine
  const x86 = new Uint8Array(64);
  x86.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]);
  x86[18] = 62;
  assert.throws(() => checkCodeObject(x86, "gfx1100", "k"), /not an AMD GPU code object/);
  // an AMD GPU object for gfx1030 (0x36) passed off as gfx1100 (0x41)
  const wrong = new Uint8Array(64);
  wrong.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]);
  wrong[18] = 224;
  wrong[48] = 0x36;
  assert.throws(() => checkCodeObject(wrong, "gfx1100", "k"), /machine 0x36, not gfx1100/);
  wrong[48] = 0x41;
  checkCodeObject(wrong, "gfx1100", "k");
});
