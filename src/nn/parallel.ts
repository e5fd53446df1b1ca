// Data parallelism for models: replicate a model's state over a device set, in place.
import { Tensor } from "../tensor/index.ts";
import { getStateDict } from "./state.ts";

/**
 * Moves every tensor of `model`'s state (parameters, and state such as running statistics) onto each of
 * `devices` (replicated), keeping the same Tensor objects so tied weights stay tied. Create optimizers after
 * this: their state then lives on every device too. Inputs are then sharded along the batch:
 * `x.shard(devices, 0)`. A batch norm's statistics over a sharded batch are then the whole batch's.
 */
export function replicateParameters(model: unknown, devices: readonly string[]): void {
  const params = Object.values(getStateDict(model));
  const unique = [...new Set(params)];
  // realized right away: each replica is then its own buffer, as a gradient target must be. Owned: the replica
  // on the parameter's own device would otherwise share its buffer with the tensor it came from, and the first
  // optimizer step (timed, in a benchmark) would copy every replica before writing
  for (const p of unique) p.node = p.to(devices).owned().node;
  Tensor.realizeAll(unique);
}
