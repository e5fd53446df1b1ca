// Differential fuzzer: random small tensor programs (program.ts) run in tsgrad on the JS and CPU devices and in
// numpy (numpy_ref.py), results compared; in gradient mode also backward() on both devices against float64 central
// differences. Every mismatch prints the seed, the program as TypeScript and the first differing element.
//
//   npx tsx test/fuzz/graph_fuzz.ts --seed 1 --count 300 [--grad] [--batch 50] [--devices JS,CPU] [--minimize]
//   [--include-known] [--max-size 7] [--classic]
//
// Program seeds are seed, seed+1, ...: `--seed S --count 1` reruns one. Exits 1 on any mismatch. The generator
// steers around the bugs listed in program.ts's KNOWN_BUGS unless --include-known. --classic generates from the
// first generator's op families only: a seed gives the program it gave before the newer ops (pad modes, softmax,
// sorts, einsum, activations, interpolate, conv2d) were added.
import { parseArgs } from "node:util";
import { Device } from "../../src/index.ts";
import { type BatchReport, checkSeeds } from "./check.ts";
import { minimize } from "./minimize.ts";
import { snippet } from "./snippet.ts";

/** The devices to compare: JS always, CPU where a C compiler works. */
export const fuzzDevices = (): string[] => ["JS", ...(Device.isAvailable("CPU") ? ["CPU"] : [])];

function printFailure(report: BatchReport, seed: number, devices: readonly string[], shrink: boolean): void {
  const { program, mismatches } = report.failing.get(seed)!;
  console.log(`\n=== MISMATCH seed ${seed}${program.grad ? " (--grad)" : ""}: ${program.nodes.length} nodes`);
  for (const m of mismatches) console.log(`  ${m.detail}`);
  console.log(snippet(program).replace(/^/gm, "    "));
  if (!shrink) return;
  const small = minimize(program, mismatches[0]!.key, devices);
  console.log(`  minimised (${small.nodes.length} nodes, still "${mismatches[0]!.key}"):`);
  console.log(snippet(small).replace(/^/gm, "    "));
}

function main(): void {
  const { values } = parseArgs({
    options: {
      seed: { type: "string", default: "1" },
      count: { type: "string", default: "100" },
      batch: { type: "string", default: "50" },
      grad: { type: "boolean", default: false },
      devices: { type: "string" },
      minimize: { type: "boolean", default: false },
      "include-known": { type: "boolean", default: false },
      "max-size": { type: "string", default: "7" },
      classic: { type: "boolean", default: false },
    },
  });
  const [first, count, batch] = [Number(values.seed), Number(values.count), Number(values.batch)];
  const devices = values.devices ? values.devices.split(",") : fuzzDevices();
  const started = performance.now();
  let ran = 0,
    skipped = 0;
  const keys = new Map<string, number[]>();
  for (let start = first; start < first + count; start += batch) {
    const seeds = Array.from({ length: Math.min(batch, first + count - start) }, (_, i) => start + i);
    const report = checkSeeds(seeds, devices, {
      grad: values.grad,
      includeKnown: values["include-known"],
      maxSize: Number(values["max-size"]),
      classic: values.classic,
    });
    ran += report.ran;
    skipped += report.skipped;
    for (const seed of report.failing.keys()) printFailure(report, seed, devices, values.minimize);
    for (const m of report.mismatches) keys.set(m.key, [...(keys.get(m.key) ?? []), m.seed]);
    process.stderr.write(
      `${start + seeds.length - first}/${count} programs, ${new Set([...keys.values()].flat()).size} failing, ${((performance.now() - started) / 1000).toFixed(0)} s\n`,
    );
  }
  const seconds = (performance.now() - started) / 1000;
  const failingSeeds = new Set([...keys.values()].flat());
  console.log(
    `\n${ran} programs compared on ${devices.join(", ")} and numpy${values.grad ? " (gradients too)" : ""}, ${skipped} skipped (undefined results), ${failingSeeds.size} failing, ${seconds.toFixed(1)} s`,
  );
  for (const [key, seeds] of keys)
    console.log(
      `  ${seeds.length}x ${key}: seeds ${[...new Set(seeds)].slice(0, 12).join(" ")}${seeds.length > 12 ? " ..." : ""}`,
    );
  process.exitCode = failingSeeds.size > 0 ? 1 : 0;
}

if (process.argv[1] === import.meta.filename) main();
