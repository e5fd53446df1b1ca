// The `nn` namespace of tsgrad's public API (`import { nn } from "tsgrad"`): layers, optimizers, learning-rate
// schedules, state dicts and checkpoints, data parallelism.
export {
  Linear,
  Conv2d,
  ConvTranspose2d,
  Embedding,
  LayerNorm,
  RMSNorm,
  GroupNorm,
  BatchNorm,
  Dropout,
  parameter,
  uniformFanIn,
  truncatedNormal,
  standardNormal,
  zeros,
  ones,
  type Initializer,
} from "./layers.ts";
export { initialisedTogether } from "./together.ts";
export { Optimizer, SGD, LAMB, AdamW, OptimizerGroup, clipGradNorm, type LambOptions } from "./optim.ts";
export {
  LRScheduler,
  PolynomialDecayWithWarmup,
  ReferencePolynomialDecay,
  CosineDecayWithWarmup,
  LRSchedulerGroup,
  type PolynomialDecayOptions,
  type ReferencePolynomialDecayOptions,
  type CosineDecayOptions,
} from "./schedules.ts";
export {
  getStateDict,
  getParameters,
  loadStateDict,
  safeSave,
  safeLoad,
  saveTrainingState,
  loadTrainingState,
  StateDictError,
  type StateDict,
  type HasStateDict,
} from "./state.ts";
export { replicateParameters } from "./parallel.ts";
