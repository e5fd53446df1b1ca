// Memory scopes: tidy(fn) gives back, when fn returns, the buffers fn made that nothing outside it keeps.
// JavaScript frees memory only when the garbage collector runs, and within one synchronous job never (weak
// references hold their targets to the job's end): an eager loop that never yields grows by every step's
// tensors, and each step writes fresh memory (a page fault per 4 KiB). PyTorch frees a tensor when its last
// reference goes; here the scope decides, as TensorFlow.js's tidy() does.
import { type Buffer, memoryScopes } from "../device.ts";
import { TsgradError } from "../helpers.ts";
import { storedBuffer } from "../engine/schedule.ts";
import { UOp } from "../uop.ts";
import { MultiLazy } from "./multi.ts";
import { Tensor, type TensorScope, holdInScopes, tensorCount, tensorScopes } from "./tensor.ts";

/** Tensors in a result: a tensor, or arrays, Maps, Sets and objects holding them, at any depth. */
export function tensorsIn(value: unknown): Tensor[] {
  const found: Tensor[] = [];
  const seen = new Set<object>();
  const visit = (v: unknown): void => {
    if (v instanceof Tensor) found.push(v);
    else if (v === null || typeof v !== "object" || seen.has(v) || ArrayBuffer.isView(v)) return;
    else {
      seen.add(v);
      const values = Array.isArray(v) ? v : v instanceof Map || v instanceof Set ? [...v.values()] : Object.values(v);
      for (const x of values) visit(x);
    }
  };
  visit(value);
  return found;
}

/**
 * Runs `fn` and frees every buffer it made that neither its result nor a tensor from outside the scope holds
 * when it returns: each is given back to the device's pool at once, for the next allocation of its size.
 * Kept: the tensors in the result (a tensor, or arrays, Maps, Sets and objects holding them) with everything their lazy
 * graphs read; tensors made before the scope that fn realized, assigned to or gave a gradient; parameters
 * (tensors that require grad) made inside; tensors passed to keep(); a JIT's own buffers. Anything else made
 * inside is dead after: using it throws, naming the buffer. Scopes nest (what an inner scope returns belongs to
 * the outer one). `fn` must be synchronous: across an `await` other work would run inside the scope.
 */
export function tidy<T>(fn: () => T): T {
  const buffers: Buffer[] = [];
  const scope: TensorScope = { opened: tensorCount(), held: new Set() };
  memoryScopes.push(buffers);
  tensorScopes.push(scope);
  let result: T;
  try {
    result = fn();
  } finally {
    memoryScopes.pop();
    tensorScopes.pop();
  }
  if (result instanceof Promise)
    throw new TsgradError("tidy() takes a synchronous function: an async one would run past the scope's end");
  const live = reachableBuffers([...tensorsIn(result), ...scope.held]);
  const survivors: Buffer[] = [];
  for (const buffer of buffers) {
    if (live.has(buffer) || buffer.pinned) survivors.push(buffer);
    else buffer.dispose();
  }
  // what this scope keeps was made inside the enclosing one too: that one decides about it at its end
  memoryScopes.at(-1)?.push(...survivors);
  return result;
}

/** Keeps `t`'s memory past every open tidy() scope (an outer structure holds it). Returns `t`. */
export function keep<T extends Tensor>(t: T): T {
  holdInScopes(t, -1);
  return t;
}

/** The buffers the tensors read, directly or through their lazy graphs, gradients included. */
function reachableBuffers(tensors: Iterable<Tensor>): Set<Buffer> {
  const roots: UOp[] = [];
  const add = (t: Tensor | null): void => {
    if (!t || t.isDisposed) return;
    const node = t.node;
    roots.push(...(node instanceof MultiLazy ? node.shards : [node]));
  };
  for (const t of tensors) {
    add(t);
    add(t.grad);
  }
  const found = new Set<Buffer>();
  for (const u of UOp.toposort(roots)) {
    if (u.op === "BUFFER") found.add(u.arg as Buffer);
    // a lazy node computed already reads its buffer: a graph built before the realize reaches it this way
    const stored = storedBuffer(u);
    if (stored) found.add(stored);
  }
  return found;
}
