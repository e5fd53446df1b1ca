// The CUDA device: GPUs through the driver API (libcuda via koffi), memory from a caching allocator, modules
// loaded from cubins (compiled by cuda_compile.ts) and kernels launched with given grid, block and shared
// memory sizes, timed with events.
//
// Devices are `CUDA`, `CUDA:1`, ... one per GPU, each on its primary context. Nothing is loaded until
// first used: `cudaAvailable()` is false (and cheap, and never throws) where libcuda is missing or no GPU
// answers, and then nothing else here runs.
//
// - kernels launch on a stream of the device's own; a jitted function's replays launch as one CUDA graph
//   (tensor/jit.ts; CUDA_GRAPH=0 launches kernel by kernel). A copy between GPUs is queued on the
//   receiving GPU's stream between event waits, so neither host nor the other GPUs stop for it.
//
// Environment: TSGRAD_LIBCUDA / TSGRAD_LIBNVRTC (library paths), CUDA_GRAPH, DEBUG (>= 3 reports compiles),
// TSGRAD_CACHE (where cubins are cached, under cuda/). How kernels are shaped for the GPU is the engine's
// (engine/cuda_programs.ts). Without a GPU, test/cuda/emu is a CPU emulator both library paths can point at
// (tests, gpu-check --emulate). On a GPU machine: bench/gpu-check.sh (op suite on CUDA, tensor-core checks,
// GEMMs and a BERT-large step beside PyTorch).
import type { Allocator, Buffer } from "../device.ts";
import { debugLevel, getenv } from "../helpers.ts";
import { CachingAllocator } from "./cuda_allocator.ts";
import { ATTRIBUTE, type CudaDriver, CudaError, type Handle, cudaDriver, loadCudaDriver, out } from "./cuda_driver.ts";

/** Device memory as the CUDA device hands it out. */
export interface CudaMemory {
  readonly pointer: number;
  readonly bytes: number;
}

/** Whether a GPU answers (loads libcuda once; false, never an exception, where there is none). */
export function cudaAvailable(): boolean {
  try {
    return loadCudaDriver() !== null;
  } catch {
    return false;
  }
}

/** How many GPUs the driver sees (0 without a driver). */
export function cudaDeviceCount(): number {
  const d = loadCudaDriver();
  return d ? out<number>(d, "cuDeviceGetCount") : 0;
}

let currentContext: Handle | undefined;

/** One GPU: its context, architecture and memory. */
export class CudaDevice {
  readonly driver: CudaDriver;
  readonly context: Handle;
  /** The compile target, e.g. "sm_90". */
  readonly arch: string;
  /** Shared memory a multiprocessor has, in bytes (what the tensor-core pipeline's depth is chosen by). */
  readonly sharedPerMultiprocessor: number;
  readonly allocator: CachingAllocator;
  private readonly peers = new Set<number>();
  /**
   * The stream kernels run on (created with the context; a blocking stream, so the synchronous copies on
   * the legacy stream still wait for its work and it for theirs). A stream of its own can be captured.
   */
  private launchStream: Handle | undefined;
  /** The event other streams wait on for this one's work (`waitFor`). */
  private marker: Handle | undefined;
  /** Scratch memory for kernels that ask for it (split-K); shared, since launches run in stream order. */
  private scratch: { pointer: number; bytes: number; zeroed: number } | undefined;

  constructor(readonly index: number) {
    this.driver = cudaDriver();
    const count = out<number>(this.driver, "cuDeviceGetCount");
    if (index >= count) throw new CudaError(`CUDA:${index} does not exist: the driver sees ${count} GPU(s)`);
    const device = out<number>(this.driver, "cuDeviceGet", index);
    this.context = out<Handle>(this.driver, "cuDevicePrimaryCtxRetain", device);
    const major = out<number>(this.driver, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMajor, device);
    const minor = out<number>(this.driver, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMinor, device);
    this.arch = `sm_${major}${minor}`;
    this.sharedPerMultiprocessor = out<number>(
      this.driver,
      "cuDeviceGetAttribute",
      ATTRIBUTE.maxSharedMemoryPerMultiprocessor,
      device,
    );
    const d = this.driver;
    this.allocator = new CachingAllocator(
      (bytes) => (this.activate(), out<number>(d, "cuMemAlloc_v2", bytes)),
      (pointer) => (this.activate(), d.check("cuMemFree_v2", d.cuMemFree_v2(pointer))),
      (e) => e instanceof CudaError && e.message.includes("CUDA_ERROR_OUT_OF_MEMORY"),
    );
  }

  /** Makes this device's context the thread's current one (the driver's calls act on it). */
  activate(): void {
    if (currentContext === this.context) return;
    this.driver.check("cuCtxSetCurrent", this.driver.cuCtxSetCurrent(this.context));
    currentContext = this.context;
  }

  get stream(): Handle {
    if (this.launchStream === undefined) {
      this.activate();
      this.launchStream = out<Handle>(this.driver, "cuStreamCreate", 0);
    }
    return this.launchStream;
  }

  /**
   * Records the launches `run` makes into a CUDA graph and returns its replay (one launch for all of them),
   * or undefined where capture is off (CUDA_GRAPH=0), unsupported by the driver or fails: then callers
   * launch one by one as before. `run` must only launch kernels (no copies, no allocations).
   */
  captureGraph(run: () => void): (() => void) | undefined {
    if (getenv("CUDA_GRAPH", 1) === 0) return undefined;
    const d = this.driver,
      stream = this.stream;
    this.activate();
    try {
      // relaxed: the capture does not forbid other driver calls in this thread (a lazy module load)
      d.check("cuStreamBeginCapture_v2", d.cuStreamBeginCapture_v2(stream, 2));
    } catch {
      return undefined;
    }
    let failed: unknown;
    try {
      run();
    } catch (e) {
      failed = e;
    }
    const graph: unknown[] = [null];
    const ended = d.cuStreamEndCapture(stream, graph);
    if (failed || ended !== 0) {
      if (debugLevel() >= 1)
        console.error(
          `tsgrad: CUDA graph capture failed (${failed instanceof Error ? failed.message : `cuStreamEndCapture ${ended}`}); launching one by one`,
        );
      return undefined;
    }
    const exec: unknown[] = [null];
    if (d.cuGraphInstantiateWithFlags(exec, graph[0], 0) !== 0) return undefined;
    return () => {
      this.activate(); // a copy between GPUs may have left another device's context current
      d.check("cuGraphLaunch", d.cuGraphLaunch(exec[0], stream), `a captured CUDA graph on CUDA:${this.index}`);
    };
  }

  /**
   * A workspace of at least `bytes` whose first `zeroedBytes` are zero (kernels leave them so). Grows by
   * replacing the old one, which is kept, not freed: a recorded CUDA graph may still launch kernels on it.
   */
  workspace(bytes: number, zeroedBytes: number): number {
    const s = this.scratch;
    if (s && s.bytes >= bytes && s.zeroed >= zeroedBytes) return s.pointer;
    const size = Math.max(bytes, s?.bytes ?? 0),
      zeroed = Math.max(zeroedBytes, s?.zeroed ?? 0);
    const pointer = this.allocator.alloc(size);
    this.activate();
    this.driver.check(
      "cuMemcpyHtoD_v2",
      this.driver.cuMemcpyHtoD_v2(pointer, new Uint8Array(zeroed), zeroed),
      "zeroing a kernel workspace",
    );
    this.scratch = { pointer, bytes: size, zeroed };
    return pointer;
  }

  /** Makes this device's stream hold its later work until `other`'s stream has run what it has queued so far. */
  waitFor(other: CudaDevice): void {
    const d = this.driver;
    other.activate();
    other.marker ??= out<Handle>(d, "cuEventCreate", 2); // CU_EVENT_DISABLE_TIMING: cheaper
    d.check("cuEventRecord", d.cuEventRecord(other.marker, other.stream), `CUDA:${other.index}'s stream`);
    this.activate();
    // the wait is for the record as it is now: recording the event again later does not move it
    d.check(
      "cuStreamWaitEvent",
      d.cuStreamWaitEvent(this.stream, other.marker, 0),
      `CUDA:${this.index} waiting for CUDA:${other.index}`,
    );
  }

  /**
   * Queues a copy of `bytes` from `source`'s memory into this device's on this device's stream: after the
   * work both have queued so far (`src` written, `dst` no longer read), before `source`'s later work (which
   * may reuse `src`'s memory) and this device's. The host does not wait, and neither GPU stops the others
   * (cuMemcpyPeer would hold all work of both contexts, turning a ring all-reduce's copies into a queue).
   */
  copyFrom(source: CudaDevice, dst: number, src: number, bytes: number): void {
    this.enablePeer(source);
    this.waitFor(source);
    this.activate();
    const d = this.driver;
    d.check(
      "cuMemcpyPeerAsync",
      d.cuMemcpyPeerAsync(dst, this.context, src, source.context, bytes, this.stream),
      `${bytes} bytes CUDA:${source.index} -> CUDA:${this.index}`,
    );
    source.waitFor(this);
  }

  /** Lets this device read `peer`'s memory directly, when the hardware can (once per pair). */
  enablePeer(peer: CudaDevice): void {
    if (this.peers.has(peer.index) || peer === this) return;
    this.peers.add(peer.index);
    if (!out<number>(this.driver, "cuDeviceCanAccessPeer", this.index, peer.index)) return;
    this.activate();
    const result = this.driver.cuCtxEnablePeerAccess(peer.context, 0);
    // 704: CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    if (result !== 704) this.driver.check("cuCtxEnablePeerAccess", result, `CUDA:${this.index} -> CUDA:${peer.index}`);
  }
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

/** Loads a module from its cubin onto `device`; the handles of its functions `names`. */
export function loadFunctions(device: CudaDevice, cubin: Uint8Array, names: readonly string[]): Handle[] {
  device.activate();
  const module = out<Handle>(device.driver, "cuModuleLoadData", cubin);
  return names.map((name) => out<Handle>(device.driver, "cuModuleGetFunction", module, name));
}

/** The shared memory a block may take without asking (more needs the function's attribute raised). */
const STATIC_SHARED_LIMIT = 48 << 10;
/** CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
const MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

/** Lets `fn` launch with more than 48 KB of dynamic shared memory, where its launch asks for that. */
function allowSharedMemory(device: CudaDevice, fn: Handle, launch: LaunchDims, name: string): void {
  if (launch.sharedBytes <= STATIC_SHARED_LIMIT) return;
  const d = device.driver;
  d.check(
    "cuFuncSetAttribute",
    d.cuFuncSetAttribute(fn, MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.sharedBytes),
    `${name}: ${launch.sharedBytes} bytes of shared memory`,
  );
}

/** Launches on the device's stream; with `events`, waits and returns the kernel's seconds. */
function launchKernel(
  device: CudaDevice,
  fn: Handle,
  launch: LaunchDims,
  params: globalThis.Buffer[],
  name: string,
  events?: [Handle, Handle],
): number | undefined {
  const d = device.driver;
  device.activate();
  const stream = device.stream;
  if (events) d.check("cuEventRecord", d.cuEventRecord(events[0], stream), name);
  const [gx, gy, gz] = launch.grid,
    [bx, by, bz] = launch.block;
  d.check(
    "cuLaunchKernel",
    d.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, launch.sharedBytes, stream, params, null),
    `${name} grid ${launch.grid} block ${launch.block}`,
  );
  if (!events) return undefined;
  d.check("cuEventRecord", d.cuEventRecord(events[1], stream), name);
  d.check("cuEventSynchronize", d.cuEventSynchronize(events[1]), name);
  return out<number>(d, "cuEventElapsedTime", events[0], events[1]) / 1000;
}

/**
 * A loaded kernel function with its launch sizes, launched on `bufferCount` buffers (and the workspace where it takes
 * one).
 */
export class CudaKernel {
  /** The buffers' pointers, then a workspace pointer for kernels that take one. */
  private readonly params: globalThis.Buffer[];
  private readonly bufferParams: globalThis.Buffer[];
  private events: [Handle, Handle] | undefined;

  /** `name` names the kernel in launch errors. */
  constructor(
    readonly device: CudaDevice,
    private readonly fn: Handle,
    readonly launch: LaunchDims,
    readonly name: string,
    bufferCount: number,
  ) {
    allowSharedMemory(device, fn, launch, name);
    this.params = Array.from({ length: bufferCount + 1 }, () => globalThis.Buffer.alloc(8));
    this.bufferParams = this.params.slice(0, bufferCount);
  }

  /** Launches on `buffers`; with `wait`, waits and returns the kernel's seconds. */
  run(buffers: readonly Buffer[], opts: { wait?: boolean } = {}): number | undefined {
    buffers.forEach((b, i) => this.params[i]!.writeBigUInt64LE(BigInt((b.handle as CudaMemory).pointer)));
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
    this.events ??= [
      out<Handle>(this.device.driver, "cuEventCreate", 0),
      out<Handle>(this.device.driver, "cuEventCreate", 0),
    ];
    return this.events;
  }
}

/**
 * Gives `time` a way to time renderings of the kernel `name` that take buffers of `bufferBytes` each: the fastest
 * of three launches, on scratch buffers of those sizes (or on `on`'s memory: the output then holds the last result).
 */
export function timeLaunches<T>(
  device: CudaDevice,
  name: string,
  bufferBytes: readonly number[],
  on: readonly Buffer[] | undefined,
  time: (launch: (kernel: CudaKernel) => number) => T,
): T {
  const scratch = on ? [] : bufferBytes.map((bytes) => device.allocator.alloc(bytes));
  const pointers = on ? on.map((b) => (b.handle as CudaMemory).pointer) : scratch;
  const events: [Handle, Handle] = [
    out<Handle>(device.driver, "cuEventCreate", 0),
    out<Handle>(device.driver, "cuEventCreate", 0),
  ];
  try {
    return time((kernel) => {
      let fastest = Infinity;
      for (let run = 0; run < 3; run++) fastest = Math.min(fastest, kernel.timeOn(pointers, events));
      return fastest;
    });
  } finally {
    scratch.forEach((pointer, i) => device.allocator.free(pointer, bufferBytes[i]!));
    for (const event of events)
      device.driver.check("cuEventDestroy_v2", device.driver.cuEventDestroy_v2(event), `timing ${name}`);
  }
}

const devices = new Map<number, CudaDevice>();

/** The device `CUDA:index` (its context made on first use). */
export function cudaDevice(index: number): CudaDevice {
  let device = devices.get(index);
  if (!device) {
    device = new CudaDevice(index);
    devices.set(index, device);
  }
  return device;
}

/** The memory of `device`. Its `transfer` queues a copy device to device (peer to peer where the GPUs allow). */
export function cudaMemory(device: CudaDevice): Allocator {
  const d = device.driver,
    index = device.index;
  return {
    native: {
      pointer: (raw) => BigInt((raw as CudaMemory).pointer),
      get stream() {
        return device.stream;
      },
      activate: () => device.activate(),
    },
    allocate: (bytes): CudaMemory => ({ pointer: device.allocator.alloc(bytes), bytes }),
    free: (raw) => device.allocator.free((raw as CudaMemory).pointer, (raw as CudaMemory).bytes),
    copyout: (raw, bytes) => {
      const host = new Uint8Array(bytes);
      device.activate();
      d.check(
        "cuMemcpyDtoH_v2",
        d.cuMemcpyDtoH_v2(host, (raw as CudaMemory).pointer, bytes),
        `${bytes} bytes from CUDA:${index}`,
      );
      return host;
    },
    copyin: (raw, data) => {
      device.activate();
      d.check(
        "cuMemcpyHtoD_v2",
        d.cuMemcpyHtoD_v2((raw as CudaMemory).pointer, data, data.byteLength),
        `${data.byteLength} bytes to CUDA:${index}`,
      );
    },
    transfer: (dstRaw, srcRaw, bytes, srcDevice) => {
      const [dst, src] = [dstRaw as CudaMemory, srcRaw as CudaMemory];
      const srcIndex = Number(srcDevice.split(":")[1] ?? 0);
      if (srcIndex !== index) return device.copyFrom(cudaDevice(srcIndex), dst.pointer, src.pointer, bytes);
      device.activate();
      d.check(
        "cuMemcpyDtoDAsync_v2",
        d.cuMemcpyDtoDAsync_v2(dst.pointer, src.pointer, bytes, device.stream),
        `${bytes} bytes on CUDA:${index}`,
      );
    },
  };
}
