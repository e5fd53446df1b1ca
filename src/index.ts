// tsgrad's public API.
import { Device } from "./device.ts";
import { jsBackend } from "./runtime/js.ts";
import { cpuAvailable, cpuBackend } from "./runtime/cpu.ts";
import { cudaAvailable, cudaBackend } from "./runtime/cuda.ts";

// in order of preference: a GPU when one answers, else the native CPU device wherever a C compiler works
Device.register("CUDA", (index) => cudaBackend(index), cudaAvailable);
Device.register("CPU", () => cpuBackend(), cpuAvailable);
Device.register("JS", () => jsBackend());

export { Tensor, broadcastShapes } from "./tensor/index.ts";
export type { TensorOptions, ReduceOptions, IndexSpec, TensorData, NestedArray } from "./tensor/index.ts";
export { dtypes, promote, type DType, type DTypeName } from "./dtype.ts";
export { Device, Buffer } from "./device.ts";
// helpers a model writer uses too: environment knobs, counters, errors, shape arithmetic and its formatting
export { GlobalCounters, TsgradError, getenv, prod, fmtShape } from "./helpers.ts";
export { UOp } from "./uop.ts";
export { jit, TinyJit } from "./tensor/index.ts";
export { clearKernelCache } from "./engine/search.ts";
export * as nn from "./nn/index.ts";
export * as io from "./io/index.ts";
