// The dependency rules (.dependency-cruiser.cjs) catch what they promise to: a small tree with one import
// against each rule is checked with the project's own config, and every rule must report its import.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";

const root = join(import.meta.dirname, "..");

/** Each file of the tree and what it imports (paths from the tree's root). */
const tree: Record<string, string[]> = {
  "src/helpers.ts": [],
  "src/device.ts": ["src/codegen/ir.ts"],
  "src/index.ts": ["src/tensor/index.ts", "src/backends.ts"],
  "src/backends.ts": ["src/runtime/cpu.ts", "src/renderer/c.ts", "src/engine/compile.ts"],
  "src/runtime/cpu.ts": ["src/helpers.ts", "src/engine/search.ts"],
  "src/renderer/c.ts": ["src/codegen/ir.ts", "src/runtime/cpu.ts"],
  "src/codegen/ir.ts": [],
  "src/codegen/lower.ts": ["src/codegen/ir.ts", "src/engine/schedule.ts"],
  "src/engine/compile.ts": ["src/codegen/lower.ts", "src/renderer/c.ts", "src/runtime/cpu.ts"],
  "src/engine/search.ts": [],
  "src/engine/schedule.ts": ["src/tensor/tensor.ts"],
  "src/tensor/tensor.ts": ["src/engine/schedule.ts", "src/nn/layers.ts"],
  "src/tensor/index.ts": ["src/tensor/tensor.ts"],
  "src/nn/layers.ts": ["src/tensor/index.ts", "src/io/safetensors.ts"],
  "src/io/safetensors.ts": ["src/helpers.ts", "src/tensor/index.ts"],
  "src/dist/mpi.ts": ["src/helpers.ts", "src/tensor/index.ts", "src/dist/launcher.ts", "src/runtime/cpu.ts"],
  "src/dist/launcher.ts": [],
  "src/dist/index.ts": ["src/helpers.ts", "src/tensor/index.ts", "src/dist/launcher.ts"],
  "src/io/a.ts": ["src/io/b.ts"],
  "src/io/b.ts": ["src/io/a.ts"],
  "models/bert.ts": ["src/index.ts", "src/nn/layers.ts", "mlperf/train.ts"],
  "mlperf/train.ts": ["src/index.ts", "models/bert.ts"],
  "test/any.test.ts": ["src/engine/schedule.ts"],
};

/** What must be reported: rule, from, to. */
const expected: [string, string, string][] = [
  ["core-imports-core", "src/device.ts", "src/codegen/ir.ts"],
  ["runtime-imports-down", "src/runtime/cpu.ts", "src/engine/search.ts"],
  ["renderer-imports-down", "src/renderer/c.ts", "src/runtime/cpu.ts"],
  ["codegen-imports-down", "src/codegen/lower.ts", "src/engine/schedule.ts"],
  ["engine-imports-down", "src/engine/schedule.ts", "src/tensor/tensor.ts"],
  ["tensor-imports-down", "src/tensor/tensor.ts", "src/nn/layers.ts"],
  ["tensor-through-index", "src/engine/schedule.ts", "src/tensor/tensor.ts"],
  ["io-imports-down", "src/io/safetensors.ts", "src/tensor/index.ts"],
  ["dist-imports-down", "src/dist/mpi.ts", "src/runtime/cpu.ts"],
  ["outside-uses-public-api", "models/bert.ts", "src/nn/layers.ts"],
  ["models-know-no-benchmark", "models/bert.ts", "mlperf/train.ts"],
  ["no-circular", "src/io/a.ts", "src/io/b.ts"],
];

test("each dependency rule reports an import that breaks it, and nothing else", { timeout: 60_000 }, () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-architecture-"));
  try {
    for (const [file, imports] of Object.entries(tree)) {
      mkdirSync(join(dir, dirname(file)), { recursive: true });
      const lines = imports.map((target, i) => {
        const relative =
          join(
            ...dirname(file)
              .split("/")
              .map(() => ".."),
          ) +
          "/" +
          target;
        return `import * as m${i} from "./${relative}";\nexport const use${i} = m${i};`;
      });
      writeFileSync(join(dir, file), `${lines.join("\n")}\nexport const here = 1;\n`);
    }
    writeFileSync(
      join(dir, "tsconfig.json"),
      JSON.stringify({ compilerOptions: { allowImportingTsExtensions: true, noEmit: true, module: "NodeNext" } }),
    );
    const depcruise = join(root, "node_modules", ".bin", "depcruise");
    const config = join(root, ".dependency-cruiser.cjs");
    const check = (outputType: string) =>
      spawnSync(depcruise, ["src", "models", "mlperf", "test", "--config", config, "--output-type", outputType], {
        cwd: dir,
        encoding: "utf8",
      });
    // as `npm run lint` runs it: a violation fails the command
    assert.notEqual(check("err").status, 0, "a tree full of violations must fail the check");
    const run = check("json");
    const violations = (
      JSON.parse(run.stdout) as {
        summary: { violations: { rule: { name: string }; from: string; to: string; cycle?: unknown[] }[] };
      }
    ).summary.violations;
    const found = violations.map((v) => `${v.rule.name} ${v.from} -> ${v.to}`);
    for (const [rule, from, to] of expected) {
      const hit = violations.some(
        (v) => v.rule.name === rule && (v.from === from || v.to === from) && (v.to === to || v.from === to),
      );
      assert.ok(hit, `${rule} did not report ${from} -> ${to}; reported:\n${found.join("\n")}`);
    }
    // the allowed imports (down the pipeline, tests anywhere, backends.ts above all) report nothing
    const rules = new Set(expected.map(([rule]) => rule));
    for (const v of violations) assert.ok(rules.has(v.rule.name), `unexpected: ${v.rule.name} ${v.from} -> ${v.to}`);
    const allowed = [
      "src/backends.ts",
      "src/engine/compile.ts",
      "mlperf/train.ts",
      "test/any.test.ts",
      "src/nn/layers.ts",
      "src/dist/index.ts",
    ];
    for (const v of violations)
      assert.ok(
        !allowed.includes(v.from) || v.rule.name === "no-circular",
        `an allowed import was reported: ${v.rule.name} ${v.from} -> ${v.to}`,
      );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
