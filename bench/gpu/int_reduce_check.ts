// Why int32 argmin fails on an H200 (issue 8): the kernel max(-x) over rows of an int32 tensor returned
// [5, 2] for x = [[1, 5, 5, 0], [7, 2, 7, -1]] (right: [0, 1]) although its CUDA source is right, nvcc's PTX
// for it is right, and the CPU emulator of the GPU (test/cuda/emu) runs it right. This runs that kernel
// through tsgrad, then its exact source compiled by NVRTC and (where there is one) by nvcc, launched
// directly, and variants of it; and prints NVRTC's PTX. Prints one JSON object.
// Usage: node int_reduce_check.mjs
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Tensor, dtypes } from "../../src/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { CUDA_PRELUDE } from "../../src/renderer/cuda.ts";
import { cudaForm, renderCudaForm } from "../../src/codegen/cuda_forms.ts";
import { cudaDevice } from "../../src/runtime/cuda.ts";
import { compileCuda, findNvcc, nvccFlags, nvrtcPtx } from "../../src/runtime/cuda_compile.ts";
import { cudaDriver, out } from "../../src/runtime/cuda_driver.ts";
import { argsWithUsage } from "../args.ts";

argsWithUsage(
  "Usage: node int_reduce_check.mjs   (no options; the int32 max(-x) kernel of issue 8 on CUDA, through tsgrad,\n" +
    "NVRTC and nvcc, and its variants; prints one JSON object)",
  {},
);

const rows = [
  [1, 5, 5, 0],
  [7, 2, 7, -1],
];
const x = new Tensor(rows, { device: "CUDA", dtype: dtypes.int32 }).realize();
const { result: viaTsgrad, items } = recordItems(() => x.neg().max({ axis: 1 }).tolist());
const kernel = items.flatMap((i) => (i.kind === "kernel" ? [i.kernel] : [])).at(-1)!;
const { code, launch } = renderCudaForm(cudaForm(kernel), "k", true);
const device = cudaDevice(0);
const d = cudaDriver();

/** Launches `fnName` of a compiled image on x's rows, a fresh output each time. */
function runImage(image: Uint8Array, fnName = "k"): number[] {
  device.activate();
  const module = out<bigint>(d, "cuModuleLoadData", image);
  const fn = out<bigint>(d, "cuModuleGetFunction", module, fnName);
  const input = device.allocator.alloc(32),
    output = device.allocator.alloc(8);
  d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD_v2(input, new Int32Array(rows.flat()), 32));
  d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD_v2(output, new Int32Array([-99, -99]), 8));
  const params = [output, input].map((p) => {
    const b = globalThis.Buffer.alloc(8);
    b.writeBigUInt64LE(BigInt(p));
    return b;
  });
  d.check("cuLaunchKernel", d.cuLaunchKernel(fn, ...launch.grid, ...launch.block, 0, null, params, null));
  d.check("cuCtxSynchronize", d.cuCtxSynchronize());
  const result = new Int32Array(2);
  d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH_v2(result, output, 8));
  device.allocator.free(input, 32);
  device.allocator.free(output, 8);
  return Array.from(result);
}

const attempt = <T>(f: () => T): T | string => {
  try {
    return f();
  } catch (e) {
    return String((e as Error).message ?? e).slice(0, 400);
  }
};
const source = (body: string) => `${CUDA_PRELUDE}\n${body}\n`;
const variants: Record<string, string> = {
  as_rendered: code,
  int_min_spelled: code.replace("-2147483648", "(-2147483647 - 1)"),
  no_restrict: code.replaceAll("__restrict__ ", ""),
  plain_negation: code.replace(/\(int\)\(\(unsigned int\)0 - \(unsigned int\)(v\d+)\)/, "-$1"),
  volatile_accumulator: code.replace("int acc0 =", "volatile int acc0 ="),
};
const nvrtc = Object.fromEntries(
  Object.entries(variants).map(([name, body]) => [
    name,
    attempt(() => runImage(compileCuda(source(body), device.arch, `int max ${name}`))),
  ]),
);

let nvcc: Record<string, unknown> | string = "nvcc not found";
const nvccPath = findNvcc();
if (nvccPath) {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-int-check-"));
  try {
    writeFileSync(join(dir, "k.cu"), source(code));
    const built = spawnSync(
      nvccPath,
      [...nvccFlags([device.arch]), "-cubin", "-o", join(dir, "k.cubin"), join(dir, "k.cu")],
      { encoding: "utf8" },
    );
    nvcc =
      built.status === 0
        ? { as_rendered: attempt(() => runImage(readFileSync(join(dir, "k.cubin")))) }
        : `nvcc failed: ${built.stderr.slice(0, 400)}`;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const ptx = attempt(() => nvrtcPtx(source(code), device.arch, "int max"));
const entry = typeof ptx === "string" ? (ptx.match(/\.entry k\([\s\S]*?\n}\n/)?.[0] ?? ptx.slice(-3000)) : ptx;
console.log(
  JSON.stringify({ expected: [0, 1], via_tsgrad: viaTsgrad, nvrtc, nvcc, source: code, nvrtc_ptx: entry }, null, 1),
);
