// What the engine needs of a device to run kernels there: its memory (the core's Allocator), a way to turn a
// kernel into a program (options, lowering, rendering, compiling and loading, per device kind), the lowering
// forms it wants and its graphs. src/backends.ts registers each device kind with these.
import { type Allocator, type Buffer, Device } from "../device.ts";
import { TsgradError } from "../helpers.ts";
import type { KernelIR } from "../codegen/ir.ts";

/** A compiled kernel: call it with buffers (outputs first, as the kernel's signature says). */
export interface Program {
  run(buffers: Buffer[], opts?: { wait?: boolean }): number | undefined;
  /**
   * The kernel it runs, where that is not the one it was made for: BEAM's choice, once searched (DEBUG prints its
   * options).
   */
  ranKernel?(): KernelIR;
  /**
   * Told before a schedule runs it on `buffers`: a backend that compiles lazily builds what those runs need together.
   */
  expect?(buffers: Buffer[]): void;
}

/** One device as the engine uses it: memory, and turning kernels into runnable programs. */
export interface Backend extends Allocator {
  readonly name: string;
  compile(kernel: KernelIR): Program;
  /**
   * Whether kernels are lowered in the forms that suit a host CPU (codegen/lower.ts, heuristics.ts): one-hot
   * sums along an output axis (an embedding's or a gather's gradient) as scatters, the output zeroed then each
   * summed row added where its index points (a vocabulary's worth less work); long sums to few outputs in
   * cached blocks; ragged 16-lane tiles; neighbouring output axes merged. GPUs keep their own forms (the
   * dense one-hot product runs every output in parallel on tensor cores).
   */
  readonly hostForms?: boolean;
  /** Most input buffers one kernel may read on this device (the scheduler splits wider ones); default 48. */
  readonly maxKernelInputs?: number;
  /**
   * Records the kernel launches (and copies) `run` makes, without running them, and returns a function that
   * replays them all at once (a CUDA graph, a CPU call table); undefined where the backend cannot, e.g. for
   * launches on several `devices` or with copies among them (then the JIT launches item by item). A replay
   * that waits for its kernels (host devices) returns the seconds they took.
   */
  captureGraph?(
    run: () => void,
    span: { readonly devices: readonly string[]; readonly copies: boolean },
    // biome-ignore lint/suspicious/noConfusingVoidType: a replay on a device that does not wait returns nothing
  ): ((swap?: ReadonlyMap<Buffer, Buffer>) => number | void) | undefined;
  /**
   * Whether this backend's graph replays take `swap` (recorded buffer -> buffer to use this time) and read the
   * swapped buffers directly (CPU tables: addresses patched); otherwise the JIT copies a call's inputs into
   * buffers the graph owns (CUDA graphs hold fixed pointers).
   */
  readonly graphsSwapBuffers?: boolean;
  /**
   * While `captureGraph` records: takes a copy between two devices of this kind into the graph (true), or not (false).
   */
  recordCopy?(dst: Buffer, src: Buffer): boolean;
}

/** Each opened device's backend, by canonical name (the core holds the same object as its memory). */
const opened = new Map<string, Backend>();

/** Adds a device kind: `open` makes its device `index`; `available` says whether the kind works on this machine. */
export function registerBackend(kind: string, open: (index: number) => Backend, available?: () => boolean): void {
  Device.register(
    kind,
    (index) => {
      const backend = open(index);
      opened.set(index === 0 ? kind : `${kind}:${index}`, backend);
      return backend;
    },
    available,
  );
}

/** The backend of device `name`, opening the device the first time. */
export function backendOf(name: string): Backend {
  const canonical = Device.canonicalize(name);
  let backend = opened.get(canonical);
  if (!backend) {
    Device.allocator(canonical);
    backend = opened.get(canonical);
    if (!backend)
      throw new TsgradError(`device ${canonical} has memory but runs no kernels: register it with registerBackend`);
  }
  return backend;
}
