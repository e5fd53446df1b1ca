// Every device kind tsgrad runs kernels on, registered in one place: each pairs a runtime's memory (and graphs)
// with the engine's way of turning a kernel into a program there (its options, lowering, renderer, compiler and
// loader) and the lowering forms it wants.
import { type Backend, registerBackend } from "./engine/backend.ts";
import { jsProgram } from "./engine/js_programs.ts";
import { CpuProgram } from "./engine/cpu_programs.ts";
import { cudaPrograms } from "./engine/cuda_programs.ts";
import { amdPrograms } from "./engine/amd_programs.ts";
import { hostMemory } from "./runtime/host_memory.ts";
import { captureCpuGraph, cpuAvailable, recordCpuCopy } from "./runtime/cpu.ts";
import { cudaAvailable, cudaDevice, cudaMemory } from "./runtime/cuda.ts";
import { amdDevice, amdMemory, hipAvailable } from "./runtime/hip.ts";
import { webgpuPrograms } from "./engine/webgpu_programs.ts";
import { type WebGpuBuffer, WebGpuError, webGpuAvailable, webGpuDevice, webGpuFailure } from "./runtime/webgpu.ts";

/** JS: kernels rendered as JavaScript functions, on host memory. Slow, always there. */
export function jsBackend(): Backend {
  return { name: "JS", hostForms: true, ...hostMemory, compile: jsProgram };
}

/**
 * CPU: kernels rendered to C, compiled by the system compiler, called on host memory; jitted calls replay as call
 * tables.
 */
export function cpuBackend(): Backend {
  return {
    name: "CPU",
    hostForms: true,
    ...hostMemory,
    compile: (kernel) => new CpuProgram(kernel),
    graphsSwapBuffers: true,
    recordCopy: recordCpuCopy,
    captureGraph: captureCpuGraph,
  };
}

/**
 * `CUDA:index`: kernels in GPU forms, rendered to CUDA C, compiled by NVRTC or nvcc; jitted calls replay as CUDA
 * graphs.
 */
export function cudaBackend(index: number): Backend {
  const device = cudaDevice(index);
  return {
    name: index === 0 ? "CUDA" : `CUDA:${index}`,
    ...cudaMemory(device),
    compile: cudaPrograms(device),
    // one stream's capture: kernels of this device only
    captureGraph: (run, span) => (span.devices.length === 1 && !span.copies ? device.captureGraph(run) : undefined),
  };
}

/**
 * `AMD:index`: kernels in AMD forms (RDNA3's WMMA or GPU-shaped loops), rendered to HIP C++, compiled by hiprtc or
 * hipcc; jitted calls replay as HIP graphs. Never the default over CUDA.
 */
export function amdBackend(index: number): Backend {
  const device = amdDevice(index);
  return {
    name: index === 0 ? "AMD" : `AMD:${index}`,
    ...amdMemory(device),
    compile: amdPrograms(device),
    // one stream's capture: kernels of this device only
    captureGraph: (run, span) => (span.devices.length === 1 && !span.copies ? device.captureGraph(run) : undefined),
  };
}

/**
 * WEBGPU: kernels rendered to WGSL, run by Dawn (the optional `webgpu` package) on any GPU it drives, or on
 * SwiftShader where there is none. One device; never the default (asked for by DEVICE=WEBGPU).
 */
export function webgpuBackend(index: number): Backend {
  const device = webGpuDevice();
  if (!device) throw new WebGpuError(`WEBGPU is not available here: ${webGpuFailure()}`);
  if (index !== 0) throw new WebGpuError(`WEBGPU:${index}: there is one WebGPU device, WEBGPU`);
  return {
    name: "WEBGPU",
    allocate: (bytes) => device.allocate(bytes),
    free: (raw) => device.free(raw as WebGpuBuffer),
    copyin: (raw, data) => device.copyin(raw as WebGpuBuffer, data),
    copyout: (raw, bytes) => device.copyout(raw as WebGpuBuffer, bytes),
    compile: webgpuPrograms(device),
    // a shader's storage buffers: the output's, then the inputs'
    maxKernelInputs: device.info.maxStorageBuffersPerShaderStage - 1,
  };
}

/**
 * Registers the device kinds in order of preference: a GPU when one answers, else the native CPU device wherever a C
 * compiler works, else JS.
 */
export function registerBackends(): void {
  registerBackend("CUDA", cudaBackend, cudaAvailable);
  registerBackend("AMD", amdBackend, hipAvailable);
  registerBackend("CPU", cpuBackend, cpuAvailable);
  registerBackend("JS", jsBackend);
  registerBackend("WEBGPU", webgpuBackend, webGpuAvailable);
}
