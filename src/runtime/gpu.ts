// A GPU, whichever vendor's: contexts, a stream of its own, memory from a caching allocator, modules loaded from
// code objects, kernels launched with given grid, block and shared memory sizes and timed with events, copies
// between GPUs, and graphs of a jitted step. CUDA (cuda.ts, libcuda) and AMD (hip.ts, libamdhip64) each give a
// GpuDriver: the same few operations in their API's calls, which check their results and name the call, the
// error and what it was for.
import type { Allocator, Buffer } from "../device.ts";
import { debugLevel, getenv } from "../helpers.ts";
import { CachingAllocator } from "./cuda_allocator.ts";

/** An opaque driver handle (context, module, function, event, stream) as koffi returns it. */
export type Handle = bigint;

/** A GPU as its driver opened it. */
export interface OpenedGpu {
  /** What `activate` makes current: a CUDA context, a HIP device ordinal. */
  readonly context: unknown;
  /** The compile target, e.g. "sm_90", "gfx1100". */
  readonly arch: string;
  /** Shared memory a multiprocessor has, in bytes (what CUDA's tensor-core pipeline depth is chosen by). */
  readonly sharedPerMultiprocessor: number;
}

/** Grid and block sizes (x, y, z), dynamic shared memory and scratch memory of one launch. */
export interface LaunchDims {
  readonly grid: readonly [number, number, number];
  readonly block: readonly [number, number, number];
  readonly sharedBytes: number;
  /**
   * Scratch device memory the kernel takes as an extra last parameter, of which the first `zeroedBytes` must be
   * zero at launch and are left zero by the kernel (the device's workspace: launches on one stream run in order).
   */
  readonly workspace?: { readonly bytes: number; readonly zeroedBytes: number };
}

/**
 * One vendor's runtime API as the device uses it. Each call throws (the driver's error class) on failure, naming
 * the API call, its error and `what`, unless it says otherwise.
 */
export interface GpuDriver {
  /** The device kind, in device names and messages: "CUDA", "AMD". */
  readonly kind: string;
  /** Whether its peer copy works between GPUs without peer access (staging through host memory itself). */
  readonly peerCopyStages: boolean;
  deviceCount(): number;
  open(index: number): OpenedGpu;
  activate(context: unknown): void;
  malloc(bytes: number): number;
  free(pointer: number): void;
  /** Whether an allocation's error says the GPU is out of memory (the caching allocator then empties and retries). */
  isOutOfMemory(error: unknown): boolean;
  copyHtoD(dst: number, src: ArrayBufferView, bytes: number, what: string): void;
  copyDtoH(dst: ArrayBufferView, src: number, bytes: number, what: string): void;
  copyDtoDAsync(dst: number, src: number, bytes: number, stream: Handle, what: string): void;
  /** Queues a copy from `srcGpu`'s memory into `dstGpu`'s on `stream` (the destination's; it is current). */
  copyPeerAsync(dst: number, dstGpu: GpuDevice, src: number, srcGpu: GpuDevice, bytes: number, stream: Handle): void;
  canAccessPeer(index: number, peer: number): boolean;
  /** Lets the current device read `peer`'s memory (already enabled is fine). */
  enablePeerAccess(peer: GpuDevice, what: string): void;
  loadModule(image: Uint8Array): Handle;
  getFunction(module: Handle, name: string): Handle;
  /** Lets `fn` launch with `launch.sharedBytes` of dynamic shared memory, where that needs asking. */
  allowSharedMemory(fn: Handle, launch: LaunchDims, name: string): void;
  /** Launches `fn` on `stream` with `params` (one 8-byte value each); `what` names the kernel and its sizes. */
  launch(fn: Handle, launch: LaunchDims, stream: Handle, params: readonly globalThis.Buffer[], what: string): void;
  createEvent(timing: boolean): Handle;
  recordEvent(event: Handle, stream: Handle, what: string): void;
  synchronizeEvent(event: Handle, what: string): void;
  elapsedMs(start: Handle, end: Handle): number;
  destroyEvent(event: Handle, what: string): void;
  createStream(): Handle;
  synchronizeStream(stream: Handle, what: string): void;
  waitEvent(stream: Handle, event: Handle, what: string): void;
  /** Starts capturing `stream`'s launches; false where the driver refuses. */
  beginCapture(stream: Handle): boolean;
  /** Ends the capture: the graph, or why there is none (never throws: a capture must always be ended). */
  endCapture(stream: Handle): { graph: unknown } | { failed: string };
  /** The graph made launchable; undefined where the driver refuses. */
  instantiate(graph: unknown): unknown;
  launchGraph(exec: unknown, stream: Handle, what: string): void;
}

/** Device memory as a GPU hands it out. */
export interface GpuMemory {
  readonly pointer: number;
  readonly bytes: number;
}

/** The context current on this thread, whichever driver made it. */
let currentContext: { driver: GpuDriver; context: unknown } | undefined;

/** One GPU: its context, architecture and memory. */
export class GpuDevice {
  /** "CUDA:0", "AMD:1": how messages name it. */
  readonly name: string;
  readonly context: unknown;
  /** The compile target, e.g. "sm_90", "gfx1100". */
  readonly arch: string;
  /** Shared memory a multiprocessor has, in bytes (what the tensor-core pipeline's depth is chosen by). */
  readonly sharedPerMultiprocessor: number;
  readonly allocator: CachingAllocator;
  /** Peers this device has asked for, and whether it reads their memory directly. */
  private readonly peers = new Map<number, boolean>();
  /**
   * The stream kernels run on (created with the context; a blocking stream, so the synchronous copies on
   * the legacy stream still wait for its work and it for theirs). A stream of its own can be captured.
   */
  private launchStream: Handle | undefined;
  /** The event other streams wait on for this one's work (`waitFor`). */
  private marker: Handle | undefined;
  /** Scratch memory for kernels that ask for it (split-K); shared, since launches run in stream order. */
  private scratch: { pointer: number; bytes: number; zeroed: number } | undefined;

  constructor(
    readonly driver: GpuDriver,
    readonly index: number,
    deviceError: (message: string) => Error,
  ) {
    this.name = `${driver.kind}:${index}`;
    const count = driver.deviceCount();
    if (index >= count) throw deviceError(`${this.name} does not exist: the driver sees ${count} GPU(s)`);
    ({
      context: this.context,
      arch: this.arch,
      sharedPerMultiprocessor: this.sharedPerMultiprocessor,
    } = driver.open(index));
    this.allocator = new CachingAllocator(
      (bytes) => (this.activate(), driver.malloc(bytes)),
      (pointer) => (this.activate(), driver.free(pointer)),
      (e) => driver.isOutOfMemory(e),
    );
  }

  /** Makes this device's context the thread's current one (the driver's calls act on it). */
  activate(): void {
    if (currentContext?.driver === this.driver && currentContext.context === this.context) return;
    this.driver.activate(this.context);
    currentContext = { driver: this.driver, context: this.context };
  }

  get stream(): Handle {
    if (this.launchStream === undefined) {
      this.activate();
      this.launchStream = this.driver.createStream();
    }
    return this.launchStream;
  }

  /**
   * Records the launches `run` makes into a graph and returns its replay (one launch for all of them), or
   * undefined where capture is off (CUDA_GRAPH=0, AMD_GRAPH=0), unsupported by the driver or fails: then callers
   * launch one by one as before. `run` must only launch kernels (no copies, no allocations).
   */
  captureGraph(run: () => void): (() => void) | undefined {
    const kind = this.driver.kind;
    if (getenv(`${kind}_GRAPH`, 1) === 0) return undefined;
    const d = this.driver,
      stream = this.stream;
    this.activate();
    if (!d.beginCapture(stream)) return undefined;
    let failed: unknown;
    try {
      run();
    } catch (e) {
      failed = e;
    }
    const ended = d.endCapture(stream);
    if (failed || "failed" in ended) {
      if (debugLevel() >= 1)
        console.error(
          `tsgrad: ${kind} graph capture failed (${failed instanceof Error ? failed.message : "failed" in ended ? ended.failed : failed}); launching one by one`,
        );
      return undefined;
    }
    const exec = d.instantiate(ended.graph);
    if (exec === undefined) return undefined;
    return () => {
      this.activate(); // a copy between GPUs may have left another device's context current
      d.launchGraph(exec, stream, `a captured ${kind} graph on ${this.name}`);
    };
  }

  /**
   * A workspace of at least `bytes` whose first `zeroedBytes` are zero (kernels leave them so). Grows by
   * replacing the old one, which is kept, not freed: a recorded graph may still launch kernels on it.
   */
  workspace(bytes: number, zeroedBytes: number): number {
    const s = this.scratch;
    if (s && s.bytes >= bytes && s.zeroed >= zeroedBytes) return s.pointer;
    const size = Math.max(bytes, s?.bytes ?? 0),
      zeroed = Math.max(zeroedBytes, s?.zeroed ?? 0);
    const pointer = this.allocator.alloc(size);
    this.activate();
    this.driver.copyHtoD(pointer, new Uint8Array(zeroed), zeroed, "zeroing a kernel workspace");
    this.scratch = { pointer, bytes: size, zeroed };
    return pointer;
  }

  /** Makes this device's stream hold its later work until `other`'s stream has run what it has queued so far. */
  waitFor(other: GpuDevice): void {
    const d = this.driver;
    other.activate();
    other.marker ??= d.createEvent(false); // no timing: cheaper
    d.recordEvent(other.marker, other.stream, `${other.name}'s stream`);
    this.activate();
    // the wait is for the record as it is now: recording the event again later does not move it
    d.waitEvent(this.stream, other.marker, `${this.name} waiting for ${other.name}`);
  }

  /**
   * Queues a copy of `bytes` from `source`'s memory into this device's on this device's stream: after the
   * work both have queued so far (`src` written, `dst` no longer read), before `source`'s later work (which
   * may reuse `src`'s memory) and this device's. The host does not wait, and neither GPU stops the others
   * (a synchronous peer copy would hold all work of both, turning a ring all-reduce's copies into a queue).
   */
  copyFrom(source: GpuDevice, dst: number, src: number, bytes: number): void {
    if (!this.enablePeer(source) && !this.driver.peerCopyStages) {
      this.copyThroughHost(source, dst, src, bytes);
      return;
    }
    this.waitFor(source);
    this.activate();
    this.driver.copyPeerAsync(dst, this, src, source, bytes, this.stream);
    source.waitFor(this);
  }

  /**
   * The fallback where this device cannot read `source`'s memory and its driver's peer copy would not stage
   * the bytes itself: through host memory, the host waiting for `source`'s work (slow, but always there).
   * The synchronous copies wait for their devices' streams (blocking streams), so `dst` is no longer read.
   */
  private copyThroughHost(source: GpuDevice, dst: number, src: number, bytes: number): void {
    const host = new Uint8Array(bytes);
    source.activate();
    this.driver.synchronizeStream(source.stream, `${source.name}'s stream`);
    this.driver.copyDtoH(host, src, bytes, `${bytes} bytes ${source.name} -> host -> ${this.name}`);
    this.activate();
    this.driver.copyHtoD(dst, host, bytes, `${bytes} bytes ${source.name} -> host -> ${this.name}`);
  }

  /** Lets this device read `peer`'s memory directly, when the hardware can (once per pair); whether it can. */
  enablePeer(peer: GpuDevice): boolean {
    if (peer === this) return true;
    const known = this.peers.get(peer.index);
    if (known !== undefined) return known;
    const can = this.driver.canAccessPeer(this.index, peer.index);
    this.peers.set(peer.index, can);
    if (!can) return false;
    this.activate();
    this.driver.enablePeerAccess(peer, `${this.name} -> ${peer.name}`);
    return true;
  }
}

/** Loads a module from its code object (cubin, gfx ELF) onto `device`; the handles of its functions `names`. */
export function loadFunctions(device: GpuDevice, image: Uint8Array, names: readonly string[]): Handle[] {
  device.activate();
  const module = device.driver.loadModule(image);
  return names.map((name) => device.driver.getFunction(module, name));
}

/** Launches on the device's stream; with `events`, waits and returns the kernel's seconds. */
function launchKernel(
  device: GpuDevice,
  fn: Handle,
  launch: LaunchDims,
  params: globalThis.Buffer[],
  name: string,
  events?: [Handle, Handle],
): number | undefined {
  const d = device.driver;
  device.activate();
  const stream = device.stream;
  if (events) d.recordEvent(events[0], stream, name);
  d.launch(fn, launch, stream, params, `${name} grid ${launch.grid} block ${launch.block}`);
  if (!events) return undefined;
  d.recordEvent(events[1], stream, name);
  d.synchronizeEvent(events[1], name);
  return d.elapsedMs(events[0], events[1]) / 1000;
}

/**
 * A loaded kernel function with its launch sizes, launched on `bufferCount` buffers (and the workspace where it takes
 * one).
 */
export class GpuKernel {
  /** The buffers' pointers, then a workspace pointer for kernels that take one. */
  private readonly params: globalThis.Buffer[];
  private readonly bufferParams: globalThis.Buffer[];
  private events: [Handle, Handle] | undefined;

  /** `name` names the kernel in launch errors. */
  constructor(
    readonly device: GpuDevice,
    private readonly fn: Handle,
    readonly launch: LaunchDims,
    readonly name: string,
    bufferCount: number,
  ) {
    device.driver.allowSharedMemory(fn, launch, name);
    this.params = Array.from({ length: bufferCount + 1 }, () => globalThis.Buffer.alloc(8));
    this.bufferParams = this.params.slice(0, bufferCount);
  }

  /** Launches on `buffers`; with `wait`, waits and returns the kernel's seconds. */
  run(buffers: readonly Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    buffers.forEach((b, i) => this.params[i]!.writeBigUInt64LE(BigInt((b.handle as GpuMemory).pointer)));
    return this.launchOn(opts.wait ? this.timingEvents() : undefined);
  }

  /** Launches on memory at `pointers`, waits and returns the kernel's seconds (timed with `events`). */
  timeOn(pointers: readonly number[], events: [Handle, Handle]): number {
    pointers.forEach((pointer, i) => this.params[i]!.writeBigUInt64LE(BigInt(pointer)));
    return this.launchOn(events)!;
  }

  private launchOn(events?: [Handle, Handle]): number | undefined {
    const { workspace } = this.launch;
    if (workspace)
      this.params[this.bufferParams.length]!.writeBigUInt64LE(
        BigInt(this.device.workspace(workspace.bytes, workspace.zeroedBytes)),
      );
    return launchKernel(
      this.device,
      this.fn,
      this.launch,
      workspace ? this.params : this.bufferParams,
      this.name,
      events,
    );
  }

  private timingEvents(): [Handle, Handle] {
    this.events ??= [this.device.driver.createEvent(true), this.device.driver.createEvent(true)];
    return this.events;
  }
}

/**
 * Gives `time` a way to time renderings of the kernel `name` that take buffers of `bufferBytes` each: the fastest
 * of three launches, on scratch buffers of those sizes (or on `on`'s memory: the output then holds the last result).
 */
export function timeLaunches<T>(
  device: GpuDevice,
  name: string,
  bufferBytes: readonly number[],
  on: readonly Buffer[] | undefined,
  time: (launch: (kernel: GpuKernel) => number) => T,
): T {
  const scratch = on ? [] : bufferBytes.map((bytes) => device.allocator.alloc(bytes));
  const pointers = on ? on.map((b) => (b.handle as GpuMemory).pointer) : scratch;
  const events: [Handle, Handle] = [device.driver.createEvent(true), device.driver.createEvent(true)];
  try {
    return time((kernel) => {
      let fastest = Infinity;
      for (let run = 0; run < 3; run++) fastest = Math.min(fastest, kernel.timeOn(pointers, events));
      return fastest;
    });
  } finally {
    scratch.forEach((pointer, i) => device.allocator.free(pointer, bufferBytes[i]!));
    for (const event of events) device.driver.destroyEvent(event, `timing ${name}`);
  }
}

/**
 * A kind's devices by index, each opened once on first use; the driver is made with the first (so that a kind
 * never asked for loads nothing).
 */
export function deviceTable(
  makeDriver: () => GpuDriver,
  makeError: (message: string) => Error,
): (index: number) => GpuDevice {
  let driver: GpuDriver | undefined;
  const devices = new Map<number, GpuDevice>();
  return (index) => {
    let device = devices.get(index);
    if (!device) {
      driver ??= makeDriver();
      device = new GpuDevice(driver, index, makeError);
      devices.set(index, device);
    }
    return device;
  };
}

/**
 * The memory of `device`. Its `transfer` queues a copy device to device (peer to peer where the GPUs allow);
 * `deviceOf` finds the source device of a copy from another GPU of the same kind.
 */
export function gpuMemory(device: GpuDevice, deviceOf: (index: number) => GpuDevice): Allocator {
  const d = device.driver,
    name = device.name;
  return {
    native: {
      pointer: (raw) => BigInt((raw as GpuMemory).pointer),
      get stream() {
        return device.stream;
      },
      activate: () => device.activate(),
    },
    allocate: (bytes): GpuMemory => ({ pointer: device.allocator.alloc(bytes), bytes }),
    free: (raw) => device.allocator.free((raw as GpuMemory).pointer, (raw as GpuMemory).bytes),
    copyout: (raw, bytes) => {
      const host = new Uint8Array(bytes);
      device.activate();
      d.copyDtoH(host, (raw as GpuMemory).pointer, bytes, `${bytes} bytes from ${name}`);
      return host;
    },
    copyin: (raw, data) => {
      device.activate();
      d.copyHtoD((raw as GpuMemory).pointer, data, data.byteLength, `${data.byteLength} bytes to ${name}`);
    },
    transfer: (dstRaw, srcRaw, bytes, srcDevice) => {
      const [dst, src] = [dstRaw as GpuMemory, srcRaw as GpuMemory];
      const srcIndex = Number(srcDevice.split(":")[1] ?? 0);
      if (srcIndex !== device.index) return device.copyFrom(deviceOf(srcIndex), dst.pointer, src.pointer, bytes);
      device.activate();
      d.copyDtoDAsync(dst.pointer, src.pointer, bytes, device.stream, `${bytes} bytes on ${name}`);
    },
  };
}
