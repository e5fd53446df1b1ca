// Runs scheduled items on their devices, counting and (DEBUG=2) reporting each kernel.
import { Device } from "../device.ts";
import { GlobalCounters, debugLevel, fmtShape } from "../helpers.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { estimateBytes } from "../codegen/lower.ts";
import { type ExecItem, createSchedule, recordRealized } from "./schedule.ts";
import { beamHeldBack } from "./search.ts";
import { type Program, backendOf } from "./backend.ts";
import type { UOp } from "../uop.ts";

/**
 * Each kernel's program per device (the same kernel runs on every device of a data-parallel step: a CUDA
 * program launches on its own GPU's stream). `provisional`: made while BEAM was held back
 * (IGNORE_JIT_FIRST_BEAM), to be made again (searched) after.
 */
const programs = new WeakMap<KernelIR, Map<string, { program: Program; provisional: boolean }>>();

const kernelBytes = new WeakMap<KernelIR, number>();
const bytesOf = (kernel: KernelIR): number => {
  let bytes = kernelBytes.get(kernel);
  if (bytes === undefined) kernelBytes.set(kernel, (bytes = estimateBytes(kernel)));
  return bytes;
};

/** Hooks the JIT uses to see what runs. */
export const execObservers = new Set<(item: ExecItem) => void>();

/** Runs `fn` and returns what it returned with every item it ran, in order (the JIT's capture, kernel reports). */
export function recordItems<T>(fn: () => T): { result: T; items: ExecItem[] } {
  const items: ExecItem[] = [];
  const record = (item: ExecItem): void => void items.push(item);
  execObservers.add(record);
  try {
    return { result: fn(), items };
  } finally {
    execObservers.delete(record);
  }
}

/**
 * Profilers and checkers: while one is set, every kernel is waited for, then reported with its seconds on the device.
 */
export const kernelTimers = new Set<(item: ExecItem & { kind: "kernel" }, seconds: number) => void>();

function programFor(item: ExecItem & { kind: "kernel" }): Program {
  // on the replay path: two map lookups, the environment is read only for provisional programs
  const device = item.buffers[0]!.device;
  let byDevice = programs.get(item.kernel);
  if (!byDevice) programs.set(item.kernel, (byDevice = new Map()));
  let entry = byDevice.get(device);
  if (!entry || (entry.provisional && !beamHeldBack())) {
    entry = { program: backendOf(device).compile(item.kernel), provisional: beamHeldBack() };
    byDevice.set(device, entry);
  }
  return entry.program;
}

/** Runs one item; `debug` is DEBUG's level, read once by the caller for a whole list of items. */
export function runItem(item: ExecItem, debug = debugLevel()): void {
  for (const observe of execObservers) observe(item);
  if (item.kind === "copy") {
    copy(item);
    countCopy(item, debug);
    return;
  }
  const seconds = programFor(item).run(item.buffers, { wait: debug >= 2 || kernelTimers.size > 0 }) ?? 0;
  countKernel(item, seconds, debug);
}

function copy(item: ExecItem & { kind: "copy" }): void {
  const memory = Device.allocator(item.dst.device);
  const sameKind = item.src.device.split(":")[0] === item.dst.device.split(":")[0];
  if (memory.transfer && sameKind) memory.transfer(item.dst.handle, item.src.handle, item.src.nbytes, item.src.device);
  else item.dst.copyin(item.src.toTypedArray());
}

/** Launches an item and nothing else (no observers, counters or timing): for recording it into a graph. */
export function launchItem(item: ExecItem): void {
  if (item.kind === "copy") {
    if (!backendOf(item.dst.device).recordCopy?.(item.dst, item.src)) copy(item);
  } else programFor(item).run(item.buffers);
}

/** What running a copy item adds to the counters (and DEBUG's log). */
export function countCopy(item: ExecItem & { kind: "copy" }, debug = debugLevel()): void {
  GlobalCounters.globalMem += item.src.nbytes;
  if (debug >= 2) console.error(`copy ${item.src.nbytes} bytes ${item.src.device} -> ${item.dst.device}`);
}

/** What running a kernel item adds to the counters and timers (and DEBUG's log), `seconds` its time if measured. */
export function countKernel(item: ExecItem & { kind: "kernel" }, seconds: number, debug = debugLevel()): void {
  const { kernel, buffers } = item;
  for (const timer of kernelTimers) timer(item, seconds);
  GlobalCounters.kernelCount++;
  GlobalCounters.globalOps += kernel.flops;
  GlobalCounters.globalMem += bytesOf(kernel);
  GlobalCounters.timeSumS += seconds;
  if (debug >= 2) {
    const gflops = seconds > 0 ? kernel.flops / seconds / 1e9 : 0;
    // the options of the kernel that ran: BEAM's where it searched
    const ran = programs.get(kernel)?.get(buffers[0]!.device)?.program.ranKernel?.() ?? kernel;
    console.error(
      `*** ${buffers[0]!.device.padEnd(6)} ${String(GlobalCounters.kernelCount).padStart(4)} ${kernel.name.padEnd(28)} ${fmtShape(kernel.outputShape).padEnd(20)} ${(seconds * 1e3).toFixed(3).padStart(9)} ms ${gflops.toFixed(2).padStart(8)} GFLOP/s  ${ran.opts}`,
    );
  }
}

/** Computes `roots` (and everything they need that is not computed yet). */
export function realizeNodes(roots: readonly UOp[]): void {
  const { items, outputs, temporaries } = createSchedule(roots);
  // every program first: backends that compile lazily then build the whole schedule's kernels together
  for (const item of items) if (item.kind === "kernel") programFor(item).expect?.(item.buffers);
  const debug = debugLevel();
  for (const item of items) runItem(item, debug);
  // an assigned buffer holds a new value: nodes that stood for its old value no longer do
  for (const [node, buffer] of outputs) if (node.op === "ASSIGN") buffer.version++;
  for (const [node, buffer] of outputs) recordRealized(node, buffer);
  // intermediates nothing keeps go back to the device now (a caching allocator hands them to the next
  // schedule), unless a recorder (a JIT capture) keeps the items that use them
  if (execObservers.size === 0) for (const buffer of temporaries) buffer.release();
}
