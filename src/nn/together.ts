// Initial state realized in one schedule: a lazily compiling backend (the CPU's) compiles everything a schedule
// runs in one round of compiler runs, each round ~0.15 s of compiler start-up however small its kernels, so a
// model's parameters, an optimizer's moments and a schedule's first rate are best made together.
import { Tensor } from "../tensor/index.ts";

/** Tensors made inside `initialisedTogether`, to realize when the outermost one ends; null outside. */
let deferred: Tensor[] | null = null;

/**
 * Builds something whose initial tensors (parameters, optimizer state, a schedule's first rate) are realized in
 * one schedule when `build` returns, rather than one at a time. Nested calls join the outermost one. The values
 * are the same either way: each random draw is keyed when it is made, not when it runs.
 */
export function initialisedTogether<T>(build: () => T): T {
  if (deferred) return build();
  const made: Tensor[] = (deferred = []);
  try {
    const built = build();
    Tensor.realizeAll(made);
    return built;
  } finally {
    deferred = null;
  }
}

/** Realizes `tensors` now, or inside `initialisedTogether` when the outermost one ends. */
export function realizeInitial(tensors: readonly Tensor[]): void {
  if (deferred) deferred.push(...tensors);
  else Tensor.realizeAll(tensors);
}
