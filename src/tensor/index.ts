// The Tensor as the rest of tsgrad sees it: the core class (tensor.ts) with every family of ops attached.
// Each family adds its methods to Tensor when it loads, so this is the one file that loads them all, and code
// outside src/tensor/ imports from here only (a rule in .dependency-cruiser.cjs), never a Tensor without them.
import "./einsum.ts";
import "./scan.ts";
import "./sort.ts";
import "./upsample.ts";
import "./windows.ts";

export { Tensor, broadcastShapes } from "./tensor.ts";
export type {
  IndexSpec,
  LossReduction,
  NestedArray,
  PadMode,
  ReduceOptions,
  TensorData,
  TensorOptions,
} from "./tensor.ts";
export { einsum } from "./einsum.ts";
export { type TopkOptions, cummax, cumsum, multinomial, topk } from "./scan.ts";
export { type SortOptions, argsort, sort } from "./sort.ts";
export {
  type ConvTransposeOptions,
  type InterpolateMode,
  type InterpolateOptions,
  convTranspose,
  interpolate,
} from "./upsample.ts";
export { type ConvOptions, type PoolOptions, avgPool2d, conv, maxPool2d } from "./windows.ts";
export { buffersOf, realizedBuffers } from "./buffers.ts";
export { keep, tidy } from "./tidy.ts";
export { type JitOutput, MAX_CAPTURES, TinyJit, deviceRuns, jit } from "./jit.ts";
// internals their tests check on their own
export { allReduce, allReduceMany } from "./multi.ts";
export { threefry2x32 } from "./random.ts";
export { splitReduce } from "./split_reduce.ts";
