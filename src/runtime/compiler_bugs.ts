// Wrong code from the C compiler, found by running probe programs and stepped around as narrowly as works. gcc 12.2
// (Debian 12's) vectorises some loops wrongly at -O2 and above, found by the differential fuzzer (test/fuzz/): loops
// that read one buffer at several places an iteration, which it groups, and then puts a group read backwards in the
// wrong lane order (the sum of a flipped [5, 2] array counted one element twice; guarded loads if-converted to masked
// loads: a padded column sum gave [33, 30, 27, 40] for [28, 32, 36, 40], a padded copy dropped elements), sums through
// wrapping integer casts (column sums of a [4, 2] int32 array came out [8, 3]), and selects on one condition in groups
// of 3, 5, 6, 7, 9, 10, 12 or 15 (it merges them into one branch and reads the loads under it with another group's
// mask: the gradient of a sigmoid or a max over an axis of 5 had zeros where values belonged). The C renderer marks
// kernels with such loops (renderer/c.ts hasFragileLoops); where a probe shows a bug, the compiler defines the marker
// as an attribute that turns loop vectorisation off for those kernels alone, and where the attribute does not cure the
// probe, everywhere.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus } from "node:os";
import { join } from "node:path";
import { writeAtomic } from "../helpers.ts";

/** The marker the C renderer puts before kernels with such loops, and what it becomes where a probe shows a bug. */
const MARKER = "TG_FRAGILE_LOOPS";
const ATTRIBUTE = `__attribute__((optimize("no-tree-loop-vectorize")))`;

interface Probe {
  readonly name: string;
  /** A program, its functions marked, that prints what it computed. */
  readonly source: string;
  readonly expected: string;
}

const header = `#include <stdint.h>\n#include <stdio.h>\n#ifndef ${MARKER}\n#define ${MARKER}\n#endif\n`;

export const PROBES: readonly Probe[] = [
  {
    // the column sums of a [4, 2] int32 array plus one, as the C backend renders them (two accumulators)
    name: "int-sum",
    expected: "17 21",
    source: `${header}
__attribute__((noinline)) ${MARKER} void tg_kernel(int32_t* restrict b0, const int32_t* restrict b1) {
  int32_t acc0 = 0, acc1 = 0;
  for (int32_t r0 = 0; r0 < 4; r0++) {
    acc0 = (int32_t)((uint32_t)acc0 + (uint32_t)b1[r0*2]);
    acc1 = (int32_t)((uint32_t)acc1 + (uint32_t)b1[r0*2 + 1]);
  }
  b0[0] = (int32_t)((uint32_t)acc0 + 1u);
  b0[1] = (int32_t)((uint32_t)acc1 + 1u);
}
int main(void) {
  static int32_t in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[2];
  tg_kernel(out, in);
  printf("%d %d\\n", out[0], out[1]);
  return 0;
}
`,
  },
  {
    // a [4, 4] float32 array padded with a row in front and summed over rows (four accumulators), and six
    // int32 values padded by 6 and 38 and copied as [10, 5]
    name: "guarded",
    expected: "28 32 36 40 | 0 0 0 0 0 0 1 2 3 4 5 6 0 0 0",
    source: `${header}
__attribute__((noinline)) ${MARKER} void tg_sum(float* restrict b0, const float* restrict b1) {
  float acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
  for (int32_t r0 = 0; r0 < 5; r0++) {
    acc0 = acc0 + (r0 - 1 >= 0 ? b1[r0*4 - 4] : 0);
    acc1 = acc1 + (r0 - 1 >= 0 ? b1[r0*4 - 3] : 0);
    acc2 = acc2 + (r0 - 1 >= 0 ? b1[r0*4 - 2] : 0);
    acc3 = acc3 + (r0 - 1 >= 0 ? b1[r0*4 - 1] : 0);
  }
  b0[0] = acc0; b0[1] = acc1; b0[2] = acc2; b0[3] = acc3;
}
__attribute__((noinline)) ${MARKER} void tg_copy(int32_t* restrict b0, const int32_t* restrict b1) {
  for (int32_t i1 = 0; i1 < 10; i1++)
    for (int32_t i3 = 0; i3 < 5; i3++)
      b0[i1*5 + i3] = (i1*5 + i3 - 6 >= 0 && i1*5 + i3 - 6 < 6 ? b1[i1*5 + i3 - 6] : 0);
}
int main(void) {
  static float f[16], s[4];
  static int32_t six[6] = {1, 2, 3, 4, 5, 6}, copy[50];
  for (int i = 0; i < 16; i++) f[i] = (float)(i + 1);
  tg_sum(s, f);
  tg_copy(copy, six);
  printf("%g %g %g %g |", s[0], s[1], s[2], s[3]);
  for (int i = 0; i < 15; i++) printf(" %d", copy[i]);
  printf("\\n");
  return 0;
}
`,
  },
  {
    // the sum of a flipped [5, 2] array (its inner loop unrolled: a group of two loads read backwards)
    name: "reversed",
    expected: "25",
    source: `${header}
__attribute__((noinline)) ${MARKER} void tg_kernel(float* restrict b0, const float* restrict b1) {
  float acc0 = 0;
  for (int32_t r0 = 0; r0 < 5; r0++)
    for (int32_t r1 = 0; r1 < 2; r1++)
      acc0 = acc0 + b1[r0*-2 + r1*-1 + 9];
  b0[0] = acc0;
}
int main(void) {
  static float in[10] = {0, 1, 2, 3, 4, 5, 6, 1, 2, 1}, out[1];
  tg_kernel(out, in);
  printf("%g\\n", out[0]);
  return 0;
}
`,
  },
  {
    // a select's gradient over an axis of 3 (the sigmoid's), [8, 3]: three selects on one condition, whose loads
    // gcc moves under it and reads as masked loads in a group of three, each group with the first group's mask
    name: "shared-select",
    expected: "2 2 3 2 2 3 2 2 3 2 2 3 2 2 3 2 2 3 2 2 3 2 2 3",
    source: `${header}
__attribute__((noinline)) ${MARKER} void tg_kernel(float* restrict b0, const float* restrict b1,
    const float* restrict b2, const float* restrict b3) {
  for (int32_t i0 = 0; i0 < 8; i0++)
    for (int32_t i1 = 0; i1 < 3; i1++) {
      float v0 = b1[i0*3 + i1];
      int32_t v1 = (int32_t)(0.0f <= v0);
      float v2 = b2[i1];
      float v3 = (v1 ? 0.0f : v2);
      float v4 = b3[i0*3 + i1];
      float v5 = (v3 * v4);
      float v6 = (v1 ? 0.0f : v5);
      float v7 = (v1 ? v2 : 0.0f);
      b0[i0*3 + i1] = v6 + v7;
    }
}
int main(void) {
  static float in[24], w[3] = {1, 2, 3}, x[24], out[24];
  for (int i = 0; i < 24; i++) { in[i] = (float)(i % 3) - 1; x[i] = 2; }
  tg_kernel(out, in, w, x);
  for (int i = 0; i < 24; i++) printf("%s%g", i ? " " : "", out[i]);
  printf("\\n");
  return 0;
}
`,
  },
];

/**
 * The flags that step around the bugs `command` shows with `flags` (its code-generation flags are what the
 * probes build with): the marker's definition, or loop vectorisation off everywhere where the marker's
 * attribute does not cure a probe. The answers are kept in `dir` by compiler version, flags and machine. Every
 * probe without an answer is built both ways at once, in parallel: a cold cache's first kernel waits for them.
 */
export function miscompileWorkarounds(
  command: string,
  version: string,
  flags: readonly string[],
  dir: string,
): { flags: string[]; found: string[] } {
  const codegen = flags.filter(
    (f) => f.startsWith("-O") || f.startsWith("-m") || (f.startsWith("-f") && f !== "-fPIC"),
  );
  const definition = `-D${MARKER}=${ATTRIBUTE}`;
  const answers = PROBES.map((probe) => {
    const key = createHash("sha256")
      .update(`${command}|${version}|${codegen.join(" ")}|${cpus()[0]?.model ?? ""}|${ATTRIBUTE}|${probe.source}`)
      .digest("hex")
      .slice(0, 32);
    const path = join(dir, `probe-${probe.name}-${key}.txt`);
    return { probe, path, verdict: existsSync(path) ? readFileSync(path, "utf8") : undefined };
  });
  const unknown = answers.filter((a) => a.verdict === undefined);
  if (unknown.length > 0) {
    // all probes in one program built both ways (two compiler runs, not two a probe); one at a time where that fails
    const sources = unknown.map(({ probe }) => probe.source);
    const together = runProbes(
      command,
      [codegen, [...codegen, definition]].map((f) => ({ flags: f, source: oneProgram(sources) })),
      dir,
    ).map((output) => output?.split("\n"));
    const apart = (): (string | undefined)[] =>
      runProbes(
        command,
        sources.flatMap((source) => [
          { flags: codegen, source },
          { flags: [...codegen, definition], source },
        ]),
        dir,
      );
    const outputs = together.every((lines) => lines?.length === sources.length)
      ? sources.flatMap((_, i) => [together[0]![i], together[1]![i]])
      : apart();
    unknown.forEach((answer, i) => {
      const [plain, marked] = [outputs[2 * i], outputs[2 * i + 1]];
      if (plain === undefined) return; // the probe does not build or run here: nothing to learn
      const { expected } = answer.probe;
      answer.verdict = plain === expected ? "right" : marked === expected ? "marker" : "global";
      writeAtomic(answer.path, answer.verdict); // runProbes made the folder
    });
  }
  const found = answers.filter((a) => a.verdict !== undefined && a.verdict !== "right").map((a) => a.probe.name);
  const global = answers.some((a) => a.verdict === "global");
  return { flags: global ? ["-fno-tree-loop-vectorize"] : found.length > 0 ? [definition] : [], found };
}

/**
 * The probe programs `sources` as one program that prints each one's line in turn: each probe's functions and
 * `main` renamed apart, and a `main` calling theirs.
 */
function oneProgram(sources: readonly string[]): string {
  const renamed = sources.map((source, i) => source.replace(/\b(tg_\w+|main)\b/g, `$1_probe${i}`));
  const calls = sources.map((_, i) => `  if (main_probe${i}() != 0) return 1;\n  fflush(stdout);`).join("\n");
  return `${renamed.join("\n")}\nint main(void) {\n${calls}\n  return 0;\n}\n`;
}

/** What the probe program built with `flags` prints, or undefined where it does not build or run. */
export function runProbe(command: string, flags: readonly string[], source: string, dir: string): string | undefined {
  return runProbes(command, [{ flags, source }], dir)[0];
}

/** What each probe program prints (undefined where it does not build or run), all built at once in parallel. */
function runProbes(
  command: string,
  builds: readonly { flags: readonly string[]; source: string }[],
  dir: string,
): (string | undefined)[] {
  mkdirSync(dir, { recursive: true });
  const stem = join(dir, `probe.${process.pid}.${Math.random().toString(36).slice(2)}`);
  const quote = (s: string) => `'${s.replace(/'/g, "'\\''")}'`;
  const stems = builds.map((_, i) => `${stem}.${i}`);
  try {
    builds.forEach(({ source }, i) => writeFileSync(`${stems[i]}.c`, source));
    const script = builds.map(
      ({ flags }, i) => `${[command, ...flags, "-o", stems[i]!, `${stems[i]}.c`].map(quote).join(" ")} 2>/dev/null &`,
    );
    spawnSync("sh", ["-c", [...script, "wait"].join("\n")], { stdio: "ignore" });
    return stems.map((path) => {
      if (!existsSync(path)) return undefined;
      const run = spawnSync(path, [], { encoding: "utf8" });
      return run.status === 0 ? run.stdout.trim() : undefined;
    });
  } finally {
    for (const path of stems) {
      rmSync(`${path}.c`, { force: true });
      rmSync(path, { force: true });
    }
  }
}
