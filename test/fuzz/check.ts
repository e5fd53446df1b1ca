// Runs fuzz programs on both sides and compares: numpy (numpy_ref.py, one python process a batch) against tsgrad's
// JS and CPU devices, the two devices against each other, and in gradient mode their gradients against each other
// and against float64 central differences.
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { type GenerateOptions, type Program, generateProgram } from "./program.ts";
import type { DeviceResult, Value } from "./runner.ts";

const num = (v: number | string): number => (typeof v === "number" ? v : Number(v));

const SCRIPT = join(import.meta.dirname, "numpy_ref.py");
const WORKER = join(import.meta.dirname, "worker.ts");
/** The repository root: workers start there, where `--import tsx` resolves. */
const ROOT = join(import.meta.dirname, "..", "..");
/** A worker that has run this long is stopped and the program in flight reported as hanging. */
const WORKER_TIMEOUT_MS = 10 * 60 * 1000;

/** What numpy_ref.py answers for one program (numbers that are not finite come as "NaN", "Infinity", "-Infinity"). */
export interface Reference {
  out?: (number | string)[];
  /**
   * The output in float64: |out - out64| is how far float32 rounding alone moves an element (each gets 4x that as
   * slack).
   */
  out64?: (number | string)[];
  /**
   * The output with every float16 node rounded (programs with float16 nodes): tsgrad rounds where it stores, which
   * the scheduler decides, so |out - out16| (4x, as slack) is how far that choice alone can move an element.
   */
  out16?: (number | string)[];
  /**
   * A square root was taken at 0: gradients through it are infinite, and NaN after a multiply by 0.
   */
  singular?: boolean;
  nodes?: (number | string)[][];
  grads?: { input: number; fd: number[]; smooth: number[] }[];
  skip?: string;
  error?: string;
}

export function runReference(programs: readonly Program[], allNodes = false): Reference[] {
  const run = spawnSync(process.env.PYTHON ?? "python3", [SCRIPT], {
    input: JSON.stringify({ programs, allNodes }),
    encoding: "utf8",
    maxBuffer: 1 << 30,
  });
  if (run.status !== 0) throw new Error(`numpy_ref.py failed (status ${run.status}): ${run.stderr}`);
  return JSON.parse(run.stdout) as Reference[];
}

type Line =
  | { start: number }
  | { index: number; results: Record<string, Omit<DeviceResult, "grads"> & { grads?: [number, Value | null][] }> };

/** A value from a worker line, its non-finite numbers back from strings. */
const decode = (v: Value): Value => ({ ...v, data: v.data.map(num) });

/**
 * Each program's results on each device, from worker.ts processes: a fresh one after a crash, a hang or a compile
 * error (which the program in flight is charged with), each starting at the next program.
 */
export function runDevices(programs: readonly Program[], devices: readonly string[]): Map<string, DeviceResult>[] {
  const results: Map<string, DeviceResult>[] = [];
  while (results.length < programs.length) {
    const from = results.length;
    const run = spawnSync(process.execPath, ["--import", "tsx", WORKER], {
      cwd: ROOT,
      input: JSON.stringify({ programs: programs.slice(from), devices }),
      encoding: "utf8",
      maxBuffer: 1 << 30,
      timeout: WORKER_TIMEOUT_MS,
    });
    let inFlight: number | undefined;
    for (const text of run.stdout.split("\n").filter(Boolean)) {
      const line = JSON.parse(text) as Line;
      if ("start" in line) {
        inFlight = from + line.start;
        continue;
      }
      inFlight = undefined;
      results.push(
        new Map(
          Object.entries(line.results).map(([d, r]) => [
            d,
            {
              ...r,
              out: r.out && decode(r.out),
              grads: r.grads && new Map(r.grads.map(([id, g]) => [id, g && decode(g)])),
            },
          ]),
        ),
      );
    }
    if (results.length === programs.length) break;
    if (inFlight === undefined) {
      if (results.length > from) continue; // it stopped after a compile error: a fresh one goes on from the next program
      throw new Error(
        `fuzz worker failed before a program ran (status ${run.status}, signal ${run.signal}): ${run.stderr.slice(-2000)}`,
      );
    }
    // the worker died inside this program: a crash or a hang, charged to every device (which one is unknown)
    const why =
      run.signal === "SIGTERM"
        ? `hung (no result in ${WORKER_TIMEOUT_MS / 1000} s)`
        : `crashed (status ${run.status}, signal ${run.signal}): ${run.stderr.trim().split("\n").slice(-3).join(" | ")}`;
    results.push(new Map(devices.map((d) => [d, { error: `worker ${why}` }])));
  }
  return results;
}

export interface Mismatch {
  seed: number;
  grad: boolean;
  /** Which comparison failed and how, without the numbers: the same bug gives the same key. */
  key: string;
  detail: string;
}

interface Tolerance {
  atol: number;
  rtol: number;
}

/**
 * float32 results: a few ulps of the largest value (sums run in other orders, exp2 and log2 differ by an ulp).
 * Where the program holds float16 values, tsgrad rounds them where it stores them, which the scheduler decides:
 * a 16-bit tolerance.
 */
function tolerance(p: Program, dtype: string, against: "numpy" | "device"): Tolerance | null {
  if (dtype === "bool" || dtype === "int32") return null;
  const sixteen = p.nodes.some((n) => n.dtype === "float16");
  if (sixteen) return { atol: 4e-3, rtol: 4e-3 };
  return against === "numpy" ? { atol: 2e-5, rtol: 2e-4 } : { atol: 4e-6, rtol: 4e-5 };
}

function unravel(i: number, shape: readonly number[]): number[] {
  const idx: number[] = [];
  for (let d = shape.length - 1; d >= 0; d--) {
    idx.unshift(i % shape[d]!);
    i = Math.floor(i / shape[d]!);
  }
  return idx;
}

/** Where the first difference of two results is looked for, and how much each element may differ. */
interface DiffOptions {
  /** Elements where it is 0 are left out. */
  mask?: readonly number[];
  /** Added to each element's allowed difference. */
  slack?: readonly number[];
}

/**
 * The first element where `actual` and `expected` differ beyond `tol` (exact when null; the absolute part scales with
 * the largest expected value), described; else null.
 */
export function firstDifference(
  actual: ArrayLike<number>,
  expected: ArrayLike<number>,
  shape: readonly number[],
  tol: Tolerance | null,
  { mask, slack }: DiffOptions = {},
): string | null {
  if (actual.length !== expected.length) return `${actual.length} elements, expected ${expected.length}`;
  let scale = 0;
  for (let i = 0; i < expected.length; i++)
    if (Number.isFinite(expected[i]!) && (!mask || mask[i])) scale = Math.max(scale, Math.abs(expected[i]!));
  for (let i = 0; i < expected.length; i++) {
    if (mask && !mask[i]) continue;
    const [a, e] = [actual[i]!, expected[i]!];
    if (a === e || (Number.isNaN(a) && Number.isNaN(e))) continue;
    if (
      tol &&
      Number.isFinite(a) &&
      Number.isFinite(e) &&
      Math.abs(a - e) <= tol.atol * (1 + scale) + tol.rtol * Math.abs(e) + (slack?.[i] ?? 0)
    )
      continue;
    return `first difference at [${unravel(i, shape)}] (flat ${i}): ${a}, expected ${e} (${expected.length} elements)`;
  }
  return null;
}

function compareOut(
  p: Program,
  name: string,
  got: Value,
  expected: Value,
  against: "numpy" | "device",
  slack?: number[],
): Mismatch | null {
  const d = firstDifference(got.data, expected.data, expected.shape, tolerance(p, expected.dtype, against), { slack });
  return d ? { seed: p.seed, grad: p.grad, key: `${name}: wrong values`, detail: `${name}: ${d}` } : null;
}

/** The error message with its numbers and shapes blanked: one key for one kind of failure. */
const errorKey = (message: string): string =>
  message
    .replace(/\/\S+/g, "<path>")
    .replace(/\[[^\]]*\]/g, "[]")
    .replace(/\b[0-9a-f]{16,}\b/g, "<hash>")
    .replace(/-?\d+(\.\d+)?/g, "N")
    .slice(0, 160);

/** Every mismatch of one program, given numpy's answer and each device's. */
export function compare(p: Program, ref: Reference, results: ReadonlyMap<string, DeviceResult>): Mismatch[] {
  const out: Mismatch[] = [];
  const last = p.nodes[p.nodes.length - 1]!;
  const expected: Value = { shape: last.shape, dtype: last.dtype, data: ref.out!.map(num) };
  const estimates = [ref.out64, ref.out16].flatMap((o) => (o ? [o.map(num)] : []));
  const off = (e: number, other: number): number =>
    Number.isFinite(e) && Number.isFinite(other) ? 4 * Math.abs(e - other) : 0;
  const slack =
    estimates.length > 0 ? expected.data.map((e, i) => Math.max(...estimates.map((o) => off(e, o[i]!)))) : undefined;
  for (const [device, r] of results) {
    if (r.error)
      out.push({ seed: p.seed, grad: p.grad, key: `${device}: ${errorKey(r.error)}`, detail: `${device}: ${r.error}` });
    else {
      const m = compareOut(p, `${device} vs numpy`, r.out!, expected, "numpy", slack);
      if (m) out.push(m);
    }
  }
  const [js, cpu] = [results.get("JS"), results.get("CPU")];
  if (js?.out && cpu?.out) {
    const m = compareOut(p, "CPU vs JS", cpu.out, js.out, "device", slack);
    if (m) out.push(m);
  }
  if (!p.grad) return out;
  const fds = new Map((ref.grads ?? []).map((g) => [g.input, g]));
  // the largest gradient element of any input: a gradient that cancels to about 0 (a bias under a softmax over the
  // axis it shifts) is rounding noise of terms on this scale, summed in another order on each device
  let gradScale = 0;
  for (const g of js?.grads?.values() ?? [])
    for (const v of g?.data ?? []) if (Number.isFinite(v)) gradScale = Math.max(gradScale, Math.abs(v));
  p.nodes.forEach((n, input) => {
    if (n.op !== "input" || n.dtype !== "float32") return;
    const [jsGrad, cpuGrad] = [js?.grads?.get(input), cpu?.grads?.get(input)];
    const zeros = n.data.map(() => 0);
    const fd = fds.get(input); // none where a float32 value overflowed
    for (const [device, grad] of [
      ["JS", jsGrad],
      ["CPU", cpuGrad],
    ] as const) {
      if (grad === undefined || !fd) continue;
      const data = grad?.data ?? zeros;
      // past a square root of 0, an infinite or NaN gradient is the chain rule's answer (inf * 0), not a bug (past an
      // overflowed sigmoid it is a known one)
      const mask = ref.singular ? fd.smooth.map((s, i) => (Number.isFinite(data[i]!) ? s : 0)) : fd.smooth;
      const d = firstDifference(data, fd.fd, n.shape, { atol: 2e-3, rtol: 2e-3 }, { mask });
      if (d)
        out.push({
          seed: p.seed,
          grad: true,
          key: `${device} gradient vs finite differences`,
          detail: `${device} gradient of input t${input} vs central differences: ${d}`,
        });
    }
    if (jsGrad !== undefined && cpuGrad !== undefined) {
      const [c, j] = [cpuGrad?.data ?? zeros, jsGrad?.data ?? zeros];
      // a gradient with infinities or NaN in it came through overflowed values: its finite elements can be sums of
      // terms near the overflow that cancel, where the order of rounding decides (the CPU's fused multiply-adds);
      // there only the non-finite elements must agree
      const overflowed = [...c, ...j].some((v) => !Number.isFinite(v));
      const slack = j.map(() => 1e-5 * gradScale);
      const d = firstDifference(
        c,
        j,
        n.shape,
        { atol: 1e-5, rtol: 1e-4 },
        overflowed ? { mask: j.map((v, i) => (Number.isFinite(v) && Number.isFinite(c[i]!) ? 0 : 1)) } : { slack },
      );
      if (d)
        out.push({
          seed: p.seed,
          grad: true,
          key: "CPU vs JS gradient",
          detail: `CPU vs JS gradient of input t${input}: ${d}`,
        });
    }
  });
  return out;
}

export interface BatchReport {
  ran: number;
  skipped: number;
  mismatches: Mismatch[];
  /** Mismatches by program, for printing with the program. */
  failing: Map<number, { program: Program; mismatches: Mismatch[] }>;
}

/**
 * Runs `programs` in numpy (one process for all; programs whose result is undefined are skipped) and on `devices`, and
 * compares.
 */
export function checkPrograms(programs: readonly Program[], devices: readonly string[]): BatchReport {
  const refs = runReference(programs);
  const report: BatchReport = { ran: 0, skipped: 0, mismatches: [], failing: new Map() };
  const defined = programs.filter((_, i) => !refs[i]!.skip);
  const results = runDevices(defined, devices);
  report.skipped = programs.length - defined.length;
  defined.forEach((p, i) => {
    const ref = refs[programs.indexOf(p)]!;
    report.ran++;
    const mismatches = ref.error
      ? [
          {
            seed: p.seed,
            grad: p.grad,
            key: `numpy reference: ${errorKey(ref.error)}`,
            detail: `numpy reference failed (a fuzzer bug): ${ref.error}`,
          },
        ]
      : compare(p, ref, results[i]!);
    if (mismatches.length > 0) {
      report.mismatches.push(...mismatches);
      report.failing.set(p.seed, { program: p, mismatches });
    }
  });
  return report;
}

export const checkSeeds = (
  seeds: readonly number[],
  devices: readonly string[],
  options: GenerateOptions = {},
): BatchReport =>
  checkPrograms(
    seeds.map((s) => generateProgram(s, options)),
    devices,
  );
