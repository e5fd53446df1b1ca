// Kernels as programs on the JS device: rendered as JavaScript (renderer/js.ts), made into functions by the runtime.
import type { KernelIR } from "../codegen/ir.ts";
import { renderJs } from "../renderer/js.ts";
import { jsKernel } from "../runtime/js.ts";
import { debugLevel } from "../helpers.ts";
import type { Program } from "./backend.ts";

/** The program that runs `kernel` on the JS device. */
export function jsProgram(kernel: KernelIR): Program {
  const source = renderJs(kernel);
  if (debugLevel() >= 4) console.error(source);
  return jsKernel(source);
}
