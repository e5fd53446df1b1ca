// The CUDA device: NVIDIA GPUs through the driver API (libcuda via koffi, cuda_driver.ts) as a GpuDriver, each
// GPU a GpuDevice (gpu.ts: memory from a caching allocator, modules loaded from cubins compiled by
// cuda_compile.ts, kernels launched with given grid, block and shared memory sizes, timed with events).
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
import type { Allocator } from "../device.ts";
import { ATTRIBUTE, type CudaDriver, CudaError, cudaDriver, loadCudaDriver, out } from "./cuda_driver.ts";
import { type GpuDevice, type GpuDriver, type Handle, deviceTable, gpuMemory } from "./gpu.ts";

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

/** The shared memory a block may take without asking (more needs the function's attribute raised). */
const STATIC_SHARED_LIMIT = 48 << 10;
/** CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES */
const MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;
/** CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED */
const PEER_ACCESS_ALREADY_ENABLED = 704;
/** CU_EVENT_DISABLE_TIMING */
const EVENT_DISABLE_TIMING = 2;
/** CU_STREAM_CAPTURE_MODE_RELAXED: the capture does not forbid other driver calls in this thread (a lazy module load) */
const CAPTURE_MODE_RELAXED = 2;

/** The device's operations in libcuda's calls. */
function cudaGpuDriver(d: CudaDriver): GpuDriver {
  return {
    kind: "CUDA",
    // cuMemcpyPeerAsync copies between any two GPUs, staging through the host where they have no peer access
    peerCopyStages: true,
    deviceCount: () => out<number>(d, "cuDeviceGetCount"),
    open: (index) => {
      const device = out<number>(d, "cuDeviceGet", index);
      const context = out<Handle>(d, "cuDevicePrimaryCtxRetain", device);
      const major = out<number>(d, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMajor, device);
      const minor = out<number>(d, "cuDeviceGetAttribute", ATTRIBUTE.computeCapabilityMinor, device);
      const shared = out<number>(d, "cuDeviceGetAttribute", ATTRIBUTE.maxSharedMemoryPerMultiprocessor, device);
      return { context, arch: `sm_${major}${minor}`, sharedPerMultiprocessor: shared };
    },
    activate: (context) => d.check("cuCtxSetCurrent", d.cuCtxSetCurrent(context)),
    malloc: (bytes) => out<number>(d, "cuMemAlloc_v2", bytes),
    free: (pointer) => d.check("cuMemFree_v2", d.cuMemFree_v2(pointer)),
    isOutOfMemory: (e) => e instanceof CudaError && e.message.includes("CUDA_ERROR_OUT_OF_MEMORY"),
    copyHtoD: (dst, src, bytes, what) => d.check("cuMemcpyHtoD_v2", d.cuMemcpyHtoD_v2(dst, src, bytes), what),
    copyDtoH: (dst, src, bytes, what) => d.check("cuMemcpyDtoH_v2", d.cuMemcpyDtoH_v2(dst, src, bytes), what),
    copyDtoDAsync: (dst, src, bytes, stream, what) =>
      d.check("cuMemcpyDtoDAsync_v2", d.cuMemcpyDtoDAsync_v2(dst, src, bytes, stream), what),
    copyPeerAsync: (dst, dstGpu, src, srcGpu, bytes, stream) =>
      d.check(
        "cuMemcpyPeerAsync",
        d.cuMemcpyPeerAsync(dst, dstGpu.context, src, srcGpu.context, bytes, stream),
        `${bytes} bytes ${srcGpu.name} -> ${dstGpu.name}`,
      ),
    canAccessPeer: (index, peer) => out<number>(d, "cuDeviceCanAccessPeer", index, peer) !== 0,
    enablePeerAccess: (peer, what) => {
      const result = d.cuCtxEnablePeerAccess(peer.context, 0);
      if (result !== PEER_ACCESS_ALREADY_ENABLED) d.check("cuCtxEnablePeerAccess", result, what);
    },
    loadModule: (image) => out<Handle>(d, "cuModuleLoadData", image),
    getFunction: (module, name) => out<Handle>(d, "cuModuleGetFunction", module, name),
    allowSharedMemory: (fn, launch, name) => {
      if (launch.sharedBytes <= STATIC_SHARED_LIMIT) return;
      d.check(
        "cuFuncSetAttribute",
        d.cuFuncSetAttribute(fn, MAX_DYNAMIC_SHARED_SIZE_BYTES, launch.sharedBytes),
        `${name}: ${launch.sharedBytes} bytes of shared memory`,
      );
    },
    launch: (fn, launch, stream, params, what) => {
      const [gx, gy, gz] = launch.grid,
        [bx, by, bz] = launch.block;
      d.check(
        "cuLaunchKernel",
        d.cuLaunchKernel(fn, gx, gy, gz, bx, by, bz, launch.sharedBytes, stream, params, null),
        what,
      );
    },
    createEvent: (timing) => out<Handle>(d, "cuEventCreate", timing ? 0 : EVENT_DISABLE_TIMING),
    recordEvent: (event, stream, what) => d.check("cuEventRecord", d.cuEventRecord(event, stream), what),
    synchronizeEvent: (event, what) => d.check("cuEventSynchronize", d.cuEventSynchronize(event), what),
    elapsedMs: (start, end) => out<number>(d, "cuEventElapsedTime", start, end),
    destroyEvent: (event, what) => d.check("cuEventDestroy_v2", d.cuEventDestroy_v2(event), what),
    createStream: () => out<Handle>(d, "cuStreamCreate", 0),
    synchronizeStream: (stream, what) => d.check("cuStreamSynchronize", d.cuStreamSynchronize(stream), what),
    waitEvent: (stream, event, what) => d.check("cuStreamWaitEvent", d.cuStreamWaitEvent(stream, event, 0), what),
    beginCapture: (stream) => d.cuStreamBeginCapture_v2(stream, CAPTURE_MODE_RELAXED) === 0,
    endCapture: (stream) => {
      const graph: unknown[] = [null];
      const ended = d.cuStreamEndCapture(stream, graph);
      return ended === 0 ? { graph: graph[0] } : { failed: `cuStreamEndCapture ${ended}` };
    },
    instantiate: (graph) => {
      const exec: unknown[] = [null];
      return d.cuGraphInstantiateWithFlags(exec, graph, 0) === 0 ? exec[0] : undefined;
    },
    launchGraph: (exec, stream, what) => d.check("cuGraphLaunch", d.cuGraphLaunch(exec, stream), what),
  };
}

/** The device `CUDA:index` (its context made on first use). */
export const cudaDevice = deviceTable(
  () => cudaGpuDriver(cudaDriver()),
  (message) => new CudaError(message),
);

/** The memory of `device`. Its `transfer` queues a copy device to device (peer to peer where the GPUs allow). */
export const cudaMemory = (device: GpuDevice): Allocator => gpuMemory(device, cudaDevice);
