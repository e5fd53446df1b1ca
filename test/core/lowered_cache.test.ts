// Lowered host kernels kept on disk (src/engine/lowered_cache.ts): what a later process reads back is the
// kernel it would have lowered, dtypes and special numbers included, and BEAM can still search it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { buildSync } from "esbuild";
import { dtypes } from "../../src/dtype.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import type { KernelSpec } from "../../src/codegen/kernel_spec.ts";
import { adoptLowered, kernelSpecOf, lowerKernel } from "../../src/codegen/lower.ts";
import { hashSources, loadLowered, sourceVersion, storeLowered } from "../../src/engine/lowered_cache.ts";
import { UOp } from "../../src/uop.ts";
import { Buffer } from "../../src/device.ts";
import { scratchDir } from "../scratch.ts";
import { bundleForDevice } from "../../bench/gpu/bundle.ts";

const root = join(import.meta.dirname, "..", "..");

/** Runs `fn` with the kernel caches in a fresh folder. */
function withCache<T>(fn: (dir: string) => T): T {
  const saved = process.env.TSGRAD_CACHE;
  const dir = scratchDir("lowered-");
  process.env.TSGRAD_CACHE = dir;
  try {
    return fn(dir);
  } finally {
    if (saved === undefined) delete process.env.TSGRAD_CACHE;
    else process.env.TSGRAD_CACHE = saved;
  }
}

test("a stored kernel reads back equal, its dtypes the same objects, NaN, infinities and -0 kept", () => {
  withCache((dir) => {
    const f32 = dtypes.float32;
    const kernel: KernelIR = {
      name: "E_4",
      buffers: [
        { dtype: f32, size: 4 },
        { dtype: dtypes.float16, size: 4 },
      ],
      outputShape: [4],
      flops: 8,
      parallel: 0,
      opts: "u|r1|p0",
      body: [
        {
          kind: "def",
          name: "v0",
          dtype: f32,
          expr: {
            op: "MAX",
            srcs: [
              { kind: "lit", value: -Infinity, dtype: f32 },
              { kind: "lit", value: NaN, dtype: f32 },
            ],
          },
        },
        {
          kind: "def",
          name: "v1",
          dtype: f32,
          expr: {
            op: "ADD",
            srcs: [
              { kind: "val", name: "v0", dtype: f32 },
              { kind: "lit", value: -0, dtype: f32 },
            ],
          },
        },
        {
          kind: "store",
          buf: 0,
          index: { kind: "const", value: 0, min: 0, max: 0, key: "0" },
          value: { kind: "val", name: "v1", dtype: f32 },
          dtype: f32,
        },
      ],
    };
    // an older version's folder goes when this version's is made
    mkdirSync(join(dir, "lowered", "0123456789abcdef"), { recursive: true });
    storeLowered("key A", kernel);
    assert.deepEqual(readdirSync(join(dir, "lowered")), [sourceVersion()]);
    const back = loadLowered("key A")!;
    assert.deepEqual(back, kernel);
    assert.equal(back.buffers[1]!.dtype, dtypes.float16);
    const literals = back.body
      .flatMap((s) => (s.kind === "def" && "srcs" in s.expr ? s.expr.srcs : []))
      .flatMap((o) => (o.kind === "lit" ? [o.value] : []));
    assert.equal(literals.length, 3);
    assert.ok(Object.is(literals[0], -Infinity) && Number.isNaN(literals[1]) && Object.is(literals[2], -0));
    assert.equal(loadLowered("key B"), undefined);
    // a damaged entry is a miss, not an error
    const [file] = readdirSync(join(dir, "lowered", sourceVersion()));
    writeFileSync(join(dir, "lowered", sourceVersion(), file!), "{ not json");
    assert.equal(loadLowered("key A"), undefined);
  });
});

test("a kernel read back can be searched again: its spec is the one its lowering chose", () => {
  withCache(() => {
    const a = UOp.buffer(new Buffer("CPU", 64 * 48, dtypes.float32)).reshape([64, 48]);
    const value = a.reshape([4, 16, 48]).reduce("ADD", [1, 2]);
    const spec: KernelSpec = {
      value,
      inputs: new Map([[a, 1]]),
      buffers: [
        { dtype: dtypes.float32, size: 4 },
        { dtype: dtypes.float32, size: 64 * 48 },
      ],
      host: true,
    };
    const lowered = lowerKernel(spec);
    storeLowered("sum", lowered);
    const back = loadLowered("sum")!;
    assert.equal(kernelSpecOf(back), undefined);
    adoptLowered(back, spec);
    const again = lowerKernel(kernelSpecOf(back)!);
    assert.deepEqual(again, lowered);
  });
});

test("a second process reads its host kernels and their C back instead of lowering and rendering them, and computes the same", {
  timeout: 120_000,
}, () => {
  withCache((dir) => {
    const script = `
      import { Tensor, dtypes } from ${JSON.stringify(join(root, "src", "index.ts"))};
      import { loweredStats } from ${JSON.stringify(join(root, "src", "engine", "lowered_cache.ts"))};
      const x = Tensor.arange(0, 96, 1, { device: "CPU" }).cast(dtypes.float32).reshape([8, 12]);
      const w = Tensor.arange(0, 36, 1, { device: "CPU" }).cast(dtypes.float32).reshape([12, 3]).div(10);
      const y = x.matmul(w).relu().sum({ axis: 0 }).add(x.max({ axis: 1 }).mean());
      console.log(JSON.stringify({ y: y.tolist(), ...loweredStats }));
    `;
    const run = () => {
      const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
        cwd: root,
        env: { ...process.env, TSGRAD_CACHE: dir },
        encoding: "utf8",
      });
      assert.equal(child.status, 0, child.stderr);
      return JSON.parse(child.stdout.trim().split("\n").at(-1)!) as {
        y: number[];
        loaded: number;
        stored: number;
        sourcesRead: number;
      };
    };
    const first = run();
    const second = run();
    assert.ok(first.stored > 0 && first.loaded === 0, JSON.stringify(first));
    assert.ok(second.loaded === first.stored && second.stored === 0, JSON.stringify(second));
    // and their C is read back, not rendered again (the compiled libraries are found by it)
    assert.ok(first.sourcesRead === 0 && second.sourcesRead === second.loaded, JSON.stringify(second));
    assert.deepEqual(second.y, first.y);
  });
});

test("a cache that cannot be written costs nothing but the next process's time", () => {
  withCache((dir) => {
    writeFileSync(join(dir, "lowered"), "a file where the folder would go");
    const kernel: KernelIR = {
      name: "E_1",
      buffers: [{ dtype: dtypes.float32, size: 1 }],
      outputShape: [1],
      flops: 0,
      parallel: 0,
      opts: "",
      body: [],
    };
    assert.doesNotThrow(() => storeLowered("key", kernel));
    assert.equal(loadLowered("key"), undefined);
  });
});

test("the source hash follows no link to a folder: a link back up (as in /lib/llvm-14/build) neither loops nor changes it", () => {
  const dir = scratchDir("sources-");
  mkdirSync(join(dir, "engine"));
  writeFileSync(join(dir, "a.ts"), "export const a = 1;\n");
  writeFileSync(join(dir, "engine", "b.ts"), "export const b = 2;\n");
  writeFileSync(join(dir, "notes.txt"), "not a source");
  const plain = hashSources(dir);
  symlinkSync("..", join(dir, "engine", "up"));
  symlinkSync(join(dir, "engine"), join(dir, "again"));
  assert.equal(hashSources(dir), plain);
  writeFileSync(join(dir, "engine", "b.ts"), "export const b = 3;\n");
  assert.notEqual(hashSources(dir), plain);
});

test("in a bundle the version is the bundle's text, found at once, with import.meta.url kept or defined away (bench/gpu-check.sh's)", () => {
  const dir = scratchDir("bundle-");
  const entry = join(dir, "entry.ts");
  writeFileSync(
    entry,
    `import { sourceVersion } from ${JSON.stringify(join(root, "src", "engine", "lowered_cache.ts"))};\nconsole.log(sourceVersion());\n`,
  );
  const plain = join(dir, "app", "entry.mjs");
  buildSync({
    entryPoints: [entry],
    outfile: plain,
    bundle: true,
    platform: "node",
    format: "esm",
    logLevel: "warning",
  });
  bundleForDevice([entry], join(dir, "device"));
  for (const bundle of [plain, join(dir, "device", "entry.mjs")]) {
    const child = spawnSync(process.execPath, [bundle], { encoding: "utf8", timeout: 30_000 });
    assert.equal(child.status, 0, `${bundle}: ${child.error ?? ""} ${child.stderr}`);
    const expected = createHash("sha256").update("bundle\0").update(readFileSync(bundle)).digest("hex").slice(0, 32);
    assert.equal(child.stdout.trim(), expected, bundle);
  }
});
