// tsgrad's public API.
import { registerBackends } from "./backends.ts";

registerBackends();

export { Tensor, broadcastShapes } from "./tensor/index.ts";
export type { TensorOptions, ReduceOptions, IndexSpec, TensorData, NestedArray } from "./tensor/index.ts";
export { dtypes, promote, type DType, type DTypeName } from "./dtype.ts";
export { Device, Buffer } from "./device.ts";
// helpers a model writer uses too: environment knobs, counters, errors, shape arithmetic and its formatting
export { GlobalCounters, TsgradError, getenv, prod, fmtShape } from "./helpers.ts";
export { UOp } from "./uop.ts";
export { jit, TinyJit, tidy, keep } from "./tensor/index.ts";
export { clearKernelCache } from "./engine/search.ts";
export { initWebGpu } from "./runtime/webgpu.ts";
export * as nn from "./nn/index.ts";
export * as io from "./io/index.ts";
export * as dist from "./dist/index.ts";
