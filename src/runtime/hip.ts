// The AMD device: AMD GPUs through the HIP runtime (libamdhip64 via koffi, hip_driver.ts) as a GpuDriver, each GPU
// a GpuDevice (gpu.ts: memory from a caching allocator, code objects compiled by hip_compile.ts loaded as modules,
// kernels launched with given grid, block and shared memory sizes, timed with events).
//
// Devices are `AMD`, `AMD:1`, ... one per GPU in HIP's order. Nothing is loaded until first used: `hipAvailable()`
// is false (and never throws) where libamdhip64 is missing or no GPU answers, and `hipFailure()` says which.
//
// - HIP's runtime API mirrors CUDA's driver API call for call, with device ordinals where CUDA has contexts
//   (hipSetDevice makes a GPU current; peer copies name devices). Launches pass their arguments as one packed
//   buffer (`extra`, HIP_LAUNCH_PARAM_BUFFER_POINTER), which every HIP release takes.
// - a jitted function's replays launch as one HIP graph (hipStreamBeginCapture; AMD_GRAPH=0 launches kernel by
//   kernel). A copy between GPUs is queued peer to peer where the GPUs have peer access, else goes through host
//   memory (gpu.ts's copyThroughHost).
// - the compile target (gfx1100 on a 7900 XTX) is AMD_ARCH where set, else read from the kernel driver's topology
//   (/sys/class/kfd/kfd/topology/nodes/*/properties, gfx_target_version: 110000 is gfx1100; CPU nodes have 0),
//   since HIP's own ways (device properties, attribute numbers) changed layout between ROCm 5 and 6.
//
// Environment: TSGRAD_LIBHIP / TSGRAD_LIBHIPRTC (library paths), AMD_ARCH, AMD_GRAPH. Without a GPU, test/cuda/emu
// is a CPU emulator both library paths can point at (test/amd/emulated.test.ts).
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { Allocator } from "../device.ts";
import { type GpuDevice, type GpuDriver, type Handle, deviceTable, gpuMemory } from "./gpu.ts";
import { type HipDriver, HipError, hipDriver, hipOut, loadHipDriver } from "./hip_driver.ts";

/** Whether an AMD GPU answers (loads libamdhip64 once; false, never an exception, where there is none). */
export function hipAvailable(): boolean {
  try {
    return loadHipDriver() !== null;
  } catch {
    return false;
  }
}

/** How many AMD GPUs HIP sees (0 without the runtime). */
export function hipDeviceCount(): number {
  const d = loadHipDriver();
  return d ? hipOut<number>(d, "hipGetDeviceCount") : 0;
}

/** "gfx1100" from a gfx_target_version (major * 10000 + minor * 100 + stepping; minor and stepping in hex: gfx90a). */
export function gfxName(targetVersion: number): string {
  const major = Math.floor(targetVersion / 10000),
    minor = Math.floor(targetVersion / 100) % 100,
    stepping = targetVersion % 100;
  return `gfx${major}${minor.toString(16)}${stepping.toString(16)}`;
}

/** Where the kernel driver (amdgpu's KFD) lists its nodes: CPUs and GPUs, in the order ROCm numbers GPUs. */
export const KFD_TOPOLOGY = "/sys/class/kfd/kfd/topology/nodes";

/** The gfx targets of the GPUs the kernel driver lists, in node order (empty where there is no KFD). */
export function kfdArchs(topology = KFD_TOPOLOGY): string[] {
  if (!existsSync(topology)) return [];
  const nodes = readdirSync(topology)
    .filter((n) => /^\d+$/.test(n))
    .sort((a, b) => Number(a) - Number(b));
  return nodes.flatMap((node) => {
    const properties = join(topology, node, "properties");
    if (!existsSync(properties)) return [];
    const version = /^gfx_target_version (\d+)$/m.exec(readFileSync(properties, "utf8"));
    return version && Number(version[1]) > 0 ? [gfxName(Number(version[1]))] : [];
  });
}

/**
 * The compile target of AMD GPU `index`: AMD_ARCH, else the kernel driver's. GPUs hidden or reordered by
 * HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES no longer match the topology's order: there, unless every GPU is the
 * same, AMD_ARCH must say.
 */
export function amdArch(index: number, topology = KFD_TOPOLOGY): string {
  const forced = process.env.AMD_ARCH;
  if (forced) return forced;
  const archs = kfdArchs(topology);
  const same = archs.length > 0 && archs.every((a) => a === archs[0]);
  const reordered = ["HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"].some((v) => process.env[v]);
  if (same || (!reordered && index < archs.length)) return same ? archs[0]! : archs[index]!;
  throw new HipError(
    `AMD:${index}: cannot tell its architecture from ${topology} (${archs.length ? `GPUs ${archs.join(", ")}${reordered ? ", renumbered by *_VISIBLE_DEVICES" : ""}` : "no GPU listed"}); set AMD_ARCH, e.g. AMD_ARCH=gfx1100`,
  );
}

/** The local data share (shared memory) a workgroup may use on every AMD GPU tsgrad targets, in bytes. */
const LDS_BYTES = 64 << 10;
/** hipEventDisableTiming */
const EVENT_DISABLE_TIMING = 2;
/** hipStreamCaptureModeRelaxed: the capture does not forbid other runtime calls in this thread (a lazy module load) */
const CAPTURE_MODE_RELAXED = 2;
/** hipErrorPeerAccessAlreadyEnabled */
const PEER_ACCESS_ALREADY_ENABLED = 704;
/** The `extra` markers of a launch's packed arguments (hip_runtime_api.h). */
const LAUNCH_PARAM_BUFFER_POINTER = 1n,
  LAUNCH_PARAM_BUFFER_SIZE = 2n,
  LAUNCH_PARAM_END = 3n;

/** The device's operations in HIP's calls. */
function hipGpuDriver(d: HipDriver): GpuDriver {
  return {
    kind: "AMD",
    // hipMemcpyPeerAsync is not promised to stage through the host without peer access: gpu.ts does it then
    peerCopyStages: false,
    deviceCount: () => hipOut<number>(d, "hipGetDeviceCount"),
    // made current by `activate` only: the device keeps track of which one is
    open: (index) => ({ context: index, arch: amdArch(index), sharedPerMultiprocessor: LDS_BYTES }),
    activate: (context) => d.check("hipSetDevice", d.hipSetDevice(context)),
    malloc: (bytes) => hipOut<number>(d, "hipMalloc", bytes),
    free: (pointer) => d.check("hipFree", d.hipFree(pointer)),
    isOutOfMemory: (e) => e instanceof HipError && e.message.includes("hipErrorOutOfMemory"),
    copyHtoD: (dst, src, bytes, what) => d.check("hipMemcpyHtoD", d.hipMemcpyHtoD(dst, src, bytes), what),
    copyDtoH: (dst, src, bytes, what) => d.check("hipMemcpyDtoH", d.hipMemcpyDtoH(dst, src, bytes), what),
    copyDtoDAsync: (dst, src, bytes, stream, what) =>
      d.check("hipMemcpyDtoDAsync", d.hipMemcpyDtoDAsync(dst, src, bytes, stream), what),
    copyPeerAsync: (dst, dstGpu, src, srcGpu, bytes, stream) =>
      d.check(
        "hipMemcpyPeerAsync",
        d.hipMemcpyPeerAsync(dst, dstGpu.index, src, srcGpu.index, bytes, stream),
        `${bytes} bytes ${srcGpu.name} -> ${dstGpu.name}`,
      ),
    canAccessPeer: (index, peer) => hipOut<number>(d, "hipDeviceCanAccessPeer", index, peer) !== 0,
    enablePeerAccess: (peer, what) => {
      const result = d.hipDeviceEnablePeerAccess(peer.index, 0);
      if (result !== PEER_ACCESS_ALREADY_ENABLED) d.check("hipDeviceEnablePeerAccess", result, what);
    },
    loadModule: (image) => hipOut<Handle>(d, "hipModuleLoadData", image),
    getFunction: (module, name) => hipOut<Handle>(d, "hipModuleGetFunction", module, name),
    // a workgroup's LDS needs no opt-in; more than there is fails at launch, naming the kernel
    allowSharedMemory: () => {},
    launch: (fn, launch, stream, params, what) => {
      const [gx, gy, gz] = launch.grid,
        [bx, by, bz] = launch.block;
      const args = globalThis.Buffer.concat(params);
      const size = globalThis.Buffer.alloc(8);
      size.writeBigUInt64LE(BigInt(args.byteLength));
      const extra = [LAUNCH_PARAM_BUFFER_POINTER, args, LAUNCH_PARAM_BUFFER_SIZE, size, LAUNCH_PARAM_END];
      d.check(
        "hipModuleLaunchKernel",
        d.hipModuleLaunchKernel(fn, gx, gy, gz, bx, by, bz, launch.sharedBytes, stream, null, extra),
        what,
      );
    },
    createEvent: (timing) => hipOut<Handle>(d, "hipEventCreateWithFlags", timing ? 0 : EVENT_DISABLE_TIMING),
    recordEvent: (event, stream, what) => d.check("hipEventRecord", d.hipEventRecord(event, stream), what),
    synchronizeEvent: (event, what) => d.check("hipEventSynchronize", d.hipEventSynchronize(event), what),
    elapsedMs: (start, end) => hipOut<number>(d, "hipEventElapsedTime", start, end),
    destroyEvent: (event, what) => d.check("hipEventDestroy", d.hipEventDestroy(event), what),
    createStream: () => hipOut<Handle>(d, "hipStreamCreate"),
    synchronizeStream: (stream, what) => d.check("hipStreamSynchronize", d.hipStreamSynchronize(stream), what),
    waitEvent: (stream, event, what) => d.check("hipStreamWaitEvent", d.hipStreamWaitEvent(stream, event, 0), what),
    beginCapture: (stream) => {
      try {
        return d.hipStreamBeginCapture(stream, CAPTURE_MODE_RELAXED) === 0;
      } catch {
        return false; // a runtime without graphs
      }
    },
    endCapture: (stream) => {
      const graph: unknown[] = [null];
      const ended = d.hipStreamEndCapture(stream, graph);
      return ended === 0 ? { graph: graph[0] } : { failed: `hipStreamEndCapture: ${d.errorName(ended)}` };
    },
    instantiate: (graph) => {
      const exec: unknown[] = [null];
      return d.hipGraphInstantiate(exec, graph, null, null, 0) === 0 ? exec[0] : undefined;
    },
    launchGraph: (exec, stream, what) => d.check("hipGraphLaunch", d.hipGraphLaunch(exec, stream), what),
  };
}

/** The device `AMD:index` (opened on first use). */
export const amdDevice = deviceTable(
  () => hipGpuDriver(hipDriver()),
  (message) => new HipError(message),
);

/** The memory of `device`. Its `transfer` queues a copy device to device (through the host without peer access). */
export const amdMemory = (device: GpuDevice): Allocator => gpuMemory(device, amdDevice);
