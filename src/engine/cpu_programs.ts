// Kernels as programs on the CPU device: rendered to C (renderer/c.ts), their options searched by BEAM (timed
// through the runtime), compiled lazily: a program is compiled when first run, together with every program
// created or expected (by a schedule) since, in one parallel batch; a program runs in a variant per set of
// buffer slots sharing memory (C `restrict` promises the others unaliased).
import { type Buffer, aliasedSlots } from "../device.ts";
import type { KernelIR } from "../codegen/ir.ts";
import { C_PRELUDE, C_VECTOR_PRELUDE, renderC } from "../renderer/c.ts";
import { debugLevel } from "../helpers.ts";
import { type CFunction, CompileError, vectorLaneWidths } from "../runtime/compiler_cache.ts";
import { CpuKernel, compileCpu, timeCpuFunctions } from "../runtime/cpu.ts";
import type { Program } from "./backend.ts";
import { renderedSource } from "./lowered_cache.ts";
import { beamSearch } from "./search.ts";

/**
 * One kernel as a C function (named `tg_kernel` until the compiler cache names it by hash), for buffers that
 * share memory in the `aliased` slots (a comma-separated list; "" when no two slots share memory).
 */
export function cFunction(kernel: KernelIR, aliased: string): CFunction {
  const slots = new Set(aliased ? aliased.split(",").map(Number) : []);
  const { prelude, vectorLanes } = cTarget();
  const code = renderedSource(
    kernel,
    `c|${aliased}|${vectorLanes.join(",")}`,
    () => `// ${kernel.name} ${kernel.opts}\n${renderC(kernel, "tg_kernel", { aliased: slots, vectorLanes })}`,
  );
  return { prelude, code };
}

let target: { prelude: string; vectorLanes: readonly number[] } | undefined;

/** The prelude kernels compile with and the vector widths they render register tiles at (probed once). */
function cTarget(): { prelude: string; vectorLanes: readonly number[] } {
  if (!target) {
    const vectorLanes = vectorLaneWidths(C_PRELUDE + C_VECTOR_PRELUDE);
    target = { vectorLanes, prelude: vectorLanes.length > 0 ? C_PRELUDE + C_VECTOR_PRELUDE : C_PRELUDE };
  }
  return target;
}

/** One way to compile a program: for buffers sharing memory in the `aliased` slots ("": none, all `restrict`). */
type Variant = { program: CpuProgram; aliased: string };

/** Compiles several not-yet-compiled program variants in one go (the compiler runs in parallel). */
export function compilePrograms(variants: readonly Variant[]): void {
  const todo = variants.filter(({ program, aliased }) => !program.variant(aliased));
  for (const { program } of todo)
    if (!program.searched) program.useSearched(beamSearch(program.kernel, "CPU", timeKernels));
  const functions = todo.map(({ program, aliased }) => cFunction(program.kernel, aliased));
  if (debugLevel() >= 4) functions.forEach((f) => console.error(f.code));
  const compiled = compileCpu(functions, { tiered: true });
  // the ones that compiled are ready; one that did not stops waiting (it would fail every later batch it joined)
  // and raises its error when it is run, not when a program beside it is
  let failed: string | undefined;
  todo.forEach(({ program, aliased }, i) => {
    const result = compiled[i]!;
    if ("error" in result) {
      program.giveUp(aliased);
      if (i === 0) failed = result.error;
    } else {
      program.setVariant(aliased, new CpuKernel(result, program.kernel.buffers.length));
    }
  });
  if (failed !== undefined) throw new CompileError(failed);
}

/** Times candidate kernels (BEAM) on scratch buffers of the kernel's sizes; Infinity for those that do not compile. */
function timeKernels(kernels: readonly KernelIR[]): number[] {
  const bufferBytes = (kernels[0]?.buffers ?? []).map((b) => b.size * b.dtype.itemsize);
  return timeCpuFunctions(
    kernels.map((k) => cFunction(k, "")),
    bufferBytes,
  );
}

/**
 * Programs created or expected to run (`expect`) but not compiled yet, with the variants they wait for: the
 * first run compiles all of them together (weakly held: one never run is dropped).
 */
const pending = new Set<WeakRef<CpuProgram>>();

/** The variants pending programs still alive wait for (the rest are forgotten). */
function waitingVariants(): Variant[] {
  const variants: Variant[] = [];
  for (const ref of pending) {
    const program = ref.deref();
    if (!program) pending.delete(ref);
    else for (const aliased of program.awaited) variants.push({ program, aliased });
  }
  return variants;
}

export class CpuProgram implements Program {
  private readonly variants = new Map<string, CpuKernel>();
  /** The variants coming runs need that are not compiled yet (a new program's guess: no aliasing). */
  readonly awaited = new Set<string>([""]);
  private guessed = true;
  /** Whether BEAM had its say on the kernel's options (it leaves the kernel as is when BEAM=0). */
  searched = false;
  private readonly pendingRef = new WeakRef(this);
  constructor(public kernel: KernelIR) {
    pending.add(this.pendingRef);
  }

  useSearched(kernel: KernelIR): void {
    this.kernel = kernel;
    this.searched = true;
  }

  ranKernel(): KernelIR {
    return this.kernel;
  }

  /** The compiled variant for buffers sharing memory in the `aliased` slots, if compiled. */
  variant(aliased: string): CpuKernel | undefined {
    return this.variants.get(aliased);
  }

  setVariant(aliased: string, kernel: CpuKernel): void {
    this.variants.set(aliased, kernel);
    this.awaited.delete(aliased);
    if (this.awaited.size === 0) pending.delete(this.pendingRef);
  }

  /** Stops waiting for a variant that does not compile (running it compiles it alone, and fails by name). */
  giveUp(aliased: string): void {
    this.awaited.delete(aliased);
    if (this.awaited.size === 0) pending.delete(this.pendingRef);
  }

  /** A schedule will run this program on `buffers`: the variant they need compiles with the schedule's others. */
  expect(buffers: Buffer[]): void {
    const aliased = aliasedSlots(buffers);
    if (this.guessed) {
      this.guessed = false;
      this.awaited.clear();
    }
    if (!this.variant(aliased)) this.awaited.add(aliased);
    if (this.awaited.size > 0) pending.add(this.pendingRef);
    else pending.delete(this.pendingRef);
  }

  run(buffers: Buffer[]): number {
    const aliased = aliasedSlots(buffers);
    if (!this.variant(aliased))
      compilePrograms([
        { program: this, aliased },
        ...waitingVariants().filter((v) => v.program !== this || v.aliased !== aliased),
      ]);
    return this.variant(aliased)!.run(buffers);
  }
}
