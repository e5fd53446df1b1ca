// Kernels as programs on the WEBGPU device: rendered to WGSL (renderer/wgsl.ts), compiled into compute pipelines by
// the runtime (runtime/webgpu.ts) once per aliasing variant, launched in order on its queue. A run that must wait
// (`wait`, as BEAM's timing asks) waits for the queue and returns the seconds it took. BEAM=n searches the loop
// options as on the other devices, each candidate timed as the fastest of three launches on scratch buffers
// (launch and wait from the engine's thread: the round trip to the GPU's worker is in every figure).
import { type Buffer, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { debugLevel } from "../helpers.ts";
import { type WgslKernelSource, renderWgsl } from "../renderer/wgsl.ts";
import type { WebGpuBuffer, WebGpuDevice } from "../runtime/webgpu.ts";
import type { Program } from "./backend.ts";
import { beamSearch, searchLimits } from "./search.ts";

/** Turns kernels into programs on `device`. */
export function webgpuPrograms(device: WebGpuDevice): (kernel: KernelIR) => Program {
  return (kernel) => new WebGpuProgram(device, kernel);
}

class WebGpuProgram implements Program {
  /** By aliasing ("" for distinct buffers): the pipeline and the rendered kernel. */
  private readonly variants = new Map<string, { pipeline: number; source: WgslKernelSource; slots: number[] }>();
  private chosen: KernelIR | undefined;

  constructor(
    private readonly device: WebGpuDevice,
    private readonly kernel: KernelIR,
  ) {}

  /** The kernel it runs: BEAM's choice, searched on first use, where BEAM is on. */
  ranKernel(): KernelIR {
    this.chosen ??=
      searchLimits().beam > 0
        ? beamSearch(this.kernel, "WEBGPU", (kernels) => timeCandidates(this.device, kernels))
        : this.kernel;
    return this.chosen;
  }

  run(buffers: Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    // a buffer passed in two slots (an in-place assign) is bound once: WebGPU refuses one buffer bound as
    // writable storage and bound again in the same dispatch
    const key = aliasedSlots(buffers);
    let variant = this.variants.get(key);
    if (!variant) {
      const kernel = this.ranKernel();
      const bindings = buffers.map((b) => buffers.findIndex((other) => other.handle === b.handle));
      const source = renderWgsl(kernel, bindings);
      if (debugLevel() >= 4) console.error(source.code);
      // the slots bound, in binding order: each distinct buffer at its first slot
      const slots = [...new Set(bindings)];
      const pipeline = this.device.compile(source.code, slots.length, kernel.name);
      this.variants.set(key, (variant = { pipeline, source, slots }));
    }
    const bound = variant.slots.map((slot) => buffers[slot]!.handle as WebGpuBuffer);
    return launch(this.device, variant.pipeline, bound, variant.source, opts.wait === true);
  }
}

function launch(
  device: WebGpuDevice,
  pipeline: number,
  buffers: readonly WebGpuBuffer[],
  source: WgslKernelSource,
  wait: boolean,
): number | undefined {
  const start = wait ? performance.now() : 0;
  device.dispatch(pipeline, buffers, source.workgroups);
  if (!wait) return undefined;
  device.synchronize();
  return (performance.now() - start) / 1000;
}

/** The fastest of three launches of each candidate (seconds), on zeroed scratch buffers; Infinity where one fails. */
function timeCandidates(device: WebGpuDevice, kernels: readonly KernelIR[]): number[] {
  if (kernels.length === 0) return [];
  const scratch = kernels[0]!.buffers.map((b) => device.allocate(Math.max(4, b.size * b.dtype.itemsize)));
  try {
    device.synchronize();
    return kernels.map((kernel) => {
      try {
        const source = renderWgsl(kernel);
        const pipeline = device.compile(source.code, kernel.buffers.length, kernel.name);
        launch(device, pipeline, scratch, source, true); // the first launch warms caches
        return Math.min(...[0, 1, 2].map(() => launch(device, pipeline, scratch, source, true)!));
      } catch {
        return Number.POSITIVE_INFINITY;
      }
    });
  } finally {
    for (const buffer of scratch) device.free(buffer);
  }
}
