// The AMD runtime's FFI: the real libamdhip64 where it is installed but no AMD GPU is (the clear "no AMD GPU found",
// not a crash), a library that does not exist, and end to end on a stand-in libamdhip64 (fake_libamdhip64.c: one
// "GPU" whose memory is host memory, launches recorded instead of run): copies, launch arguments and dimensions,
// errors naming HIP's error and the kernel, device preference; plus how the architecture is found.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import koffi from "koffi";
import { scratchDir } from "../scratch.ts";
import { HipError } from "../../src/runtime/hip_driver.ts";
import { amdArch, gfxName, kfdArchs } from "../../src/runtime/hip.ts";

const work = scratchDir("amd-runtime");
const fakePath = join(work, "libamdhip64_fake.so");
const fakeCudaPath = join(work, "libcuda_fake.so");
const cc = (out: string, source: string): boolean =>
  spawnSync("cc", ["-shared", "-fPIC", "-O1", "-o", out, source]).status === 0;
const built = cc(fakePath, join(import.meta.dirname, "fake_libamdhip64.c"));
const builtCuda = built && cc(fakeCudaPath, join(import.meta.dirname, "..", "cuda", "fake_libcuda.c"));
// the runtime reads these when it first loads the runtime and compiler
process.env.TSGRAD_LIBHIP = fakePath;
process.env.TSGRAD_LIBHIPRTC = fakePath;
process.env.TSGRAD_LIBCUDA = "/nonexistent/libcuda.so.1";
process.env.AMD_ARCH = "gfx1100";
process.env.TSGRAD_CACHE = join(work, "cache");

const { Tensor, Device } = await import("../../src/index.ts");
const { storedBuffer } = await import("../../src/engine/schedule.ts");
type Fn = (...args: unknown[]) => unknown;
const fake = built ? koffi.load(fakePath) : undefined;
const control = (signature: string): Fn => fake!.func(signature) as Fn;
const skipFake = built ? false : "no C compiler to build the stand-in libamdhip64";

/** Whether the loader finds ROCm's HIP runtime (Debian: libamdhip64-5; ROCm: /opt/rocm/lib). */
const realLibrary = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so"].find(
  (name) => {
    try {
      koffi.load(name);
      return true;
    } catch {
      return false;
    }
  },
);

/** Runs `script` in a fresh tsgrad process with `env` over this one's (less node:test's own). */
function child(
  script: string,
  env: Record<string, string | undefined>,
): { status: number | null; out: string; err: string } {
  const { NODE_TEST_CONTEXT: _, ...inherited } = process.env;
  const run = spawnSync(process.execPath, ["--import", "tsx", "-e", script], {
    env: { ...inherited, ...env },
    encoding: "utf8",
  });
  return { status: run.status, out: run.stdout, err: run.stderr };
}

/** What asking for AMD gives: [available, default device, the error opening AMD]. */
const PROBE = `const { Device } = await import("./src/index.ts");
let error = "";
try { Device.allocator("AMD"); } catch (e) { error = e.name + ": " + e.message; }
console.log(JSON.stringify([Device.isAvailable("AMD"), Device.DEFAULT, error]));`;

test("with the HIP runtime installed, AMD opens where a GPU answers and says no AMD GPU was found where none does", {
  skip: realLibrary ? false : "libamdhip64 is not installed (Debian: apt install libamdhip64-5)",
}, () => {
  const run = child(PROBE, { TSGRAD_LIBHIP: undefined, TSGRAD_LIBHIPRTC: undefined, AMD_ARCH: undefined });
  assert.equal(run.status, 0, run.err);
  const [available, fallback, error] = JSON.parse(run.out) as [boolean, string, string];
  if (available) {
    // a machine with an AMD GPU: it opens (the no-GPU message is checked on machines without one, as CI)
    assert.equal(error, "");
    return;
  }
  assert.match(fallback, /^(CPU|JS)$/);
  // ROCm 5.2 without a GPU: hipInit answers hipErrorInvalidDevice, hipGetDeviceCount hipErrorNoDevice
  assert.match(error, /^HipError: AMD: no AMD GPU found \(libamdhip64\.so[.\d]* loaded; .*hipGetDeviceCount: \w+\)$/);
});

test("without the HIP runtime, AMD is unavailable and asking for it says the runtime is not installed", () => {
  const run = child(PROBE, { TSGRAD_LIBHIP: "/nonexistent/libamdhip64.so" });
  assert.equal(run.status, 0, run.err);
  const [available, fallback, error] = JSON.parse(run.out) as [boolean, string, string];
  assert.equal(available, false);
  assert.match(fallback, /^(CPU|JS)$/);
  assert.match(
    error,
    /^HipError: AMD: the HIP runtime \(libamdhip64\) is not installed .*\/nonexistent\/libamdhip64\.so/,
  );
});

test("CUDA stays the default device where both a CUDA and an AMD GPU answer", {
  skip: builtCuda ? false : skipFake,
}, () => {
  const run = child(PROBE, { TSGRAD_LIBCUDA: fakeCudaPath });
  assert.equal(run.status, 0, run.err);
  assert.deepEqual(JSON.parse(run.out), [true, "CUDA", ""]);
});

test("AMD is the default device where an AMD GPU answers and no CUDA GPU does", { skip: skipFake }, () => {
  assert.equal(Device.DEFAULT, "AMD");
});

test("data copied into an AMD buffer reads back unchanged", { skip: skipFake }, () => {
  const values = [1.5, -2, 3.25, 1e30];
  assert.deepEqual(
    Array.from(new Tensor(values, { device: "AMD" }).toArray() as Float32Array),
    values.map(Math.fround),
  );
});

/** The device address behind a realized tensor. */
const pointerOf = (t: InstanceType<typeof Tensor>): number =>
  (storedBuffer(t.realize().node as never)!.handle as { pointer: number }).pointer;

test("a kernel launches with its buffers' pointers packed in one argument buffer and a grid covering every output", {
  skip: skipFake,
}, () => {
  const a = new Tensor(
    Array.from({ length: 1000 }, (_, i) => i),
    { device: "AMD" },
  );
  const b = new Tensor(
    Array.from({ length: 1000 }, (_, i) => 2 * i),
    { device: "AMD" },
  );
  const [pa, pb] = [pointerOf(a), pointerOf(b)];
  const before = control("int fake_launches(void)")() as number;
  const out = pointerOf(a.add(b));
  assert.equal(control("int fake_launches(void)")(), before + 1);
  assert.match(control("const char *fake_last_name(void)")() as string, /^E_1000_\d+$/);
  const dim = control("unsigned int fake_last_dim(int which)");
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5].map((d) => dim(d)),
    [4, 1, 1, 256, 1, 1],
  );
  assert.equal(control("int fake_last_arg_bytes(void)")(), 24);
  const param = control("uint64_t fake_last_param(int i)");
  assert.deepEqual([param(0), param(1), param(2)], [out, pa, pb]);
});

test("a failed launch throws HipError naming HIP's error and the kernel", { skip: skipFake }, () => {
  const a = new Tensor([1, 2, 3, 4, 5, 6, 7], { device: "AMD" }).realize();
  control("void fake_fail_next_launch(int code)")(701);
  assert.throws(
    () => a.mul(3).realize(),
    (e: unknown) =>
      e instanceof HipError &&
      /hipModuleLaunchKernel \(E_7 grid 1,1,1 block 256,1,1\) failed: hipErrorLaunchOutOfResources \(701\)/.test(
        e.message,
      ),
  );
});

test("running out of device memory throws HipError naming hipErrorOutOfMemory", { skip: skipFake }, () => {
  control("void fake_set_limit(int64_t bytes)")(1 << 22);
  try {
    assert.throws(
      () => new Tensor(new Float32Array(1 << 21), { device: "AMD" }),
      (e: unknown) => e instanceof HipError && /hipMalloc failed: hipErrorOutOfMemory \(2\)/.test(e.message),
    );
  } finally {
    control("void fake_set_limit(int64_t bytes)")(2 ** 40);
  }
});

test("an AMD device the runtime does not see is refused by name", { skip: skipFake }, () => {
  assert.throws(
    () => new Tensor([1], { device: "AMD:3" }),
    (e: unknown) => e instanceof HipError && /AMD:3 does not exist: the driver sees 1 GPU\(s\)/.test(e.message),
  );
});

test("a gfx_target_version names its architecture, minor and stepping in hex", () => {
  assert.deepEqual([110000, 110001, 100300, 90010, 90402].map(gfxName), [
    "gfx1100",
    "gfx1101",
    "gfx1030",
    "gfx90a",
    "gfx942",
  ]);
});

/** A pretend KFD topology: a node per gfx_target_version (0: a CPU). */
function topology(versions: number[]): string {
  const root = join(scratchDir("kfd"), "nodes");
  versions.forEach((version, node) => {
    mkdirSync(join(root, String(node)), { recursive: true });
    writeFileSync(join(root, String(node), "properties"), `cpu_cores_count 0\ngfx_target_version ${version}\n`);
  });
  return root;
}

/** Runs `fn` with `vars` set (undefined: unset) in this process's environment, restoring it after. */
function withEnv(vars: Record<string, string | undefined>, fn: () => void): void {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (values: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(values)) v === undefined ? delete process.env[k] : (process.env[k] = v);
  };
  apply(vars);
  try {
    fn();
  } finally {
    apply(saved);
  }
}

test("the architecture comes from the kernel driver's GPU nodes, CPU nodes skipped, unless AMD_ARCH says", () => {
  const tinyboxRed = topology([0, 110000, 110000, 110000, 110000, 110000, 110000]);
  const mixed = topology([0, 110000, 90010]);
  withEnv({ AMD_ARCH: undefined }, () => {
    assert.deepEqual(kfdArchs(tinyboxRed), Array(6).fill("gfx1100"));
    assert.equal(amdArch(5, tinyboxRed), "gfx1100");
    assert.equal(amdArch(1, mixed), "gfx90a");
  });
  withEnv({ AMD_ARCH: "gfx1101" }, () => assert.equal(amdArch(1, mixed), "gfx1101"));
});

test("without a readable topology, or with GPUs renumbered, the architecture must be given by AMD_ARCH", () => {
  withEnv({ AMD_ARCH: undefined }, () =>
    assert.throws(
      () => amdArch(0, join(work, "no-kfd")),
      /AMD:0: cannot tell its architecture .*no GPU listed.*AMD_ARCH/,
    ),
  );
  withEnv({ AMD_ARCH: undefined, HIP_VISIBLE_DEVICES: "1" }, () =>
    assert.throws(() => amdArch(0, topology([0, 110000, 90010])), /renumbered by \*_VISIBLE_DEVICES.*set AMD_ARCH/),
  );
});

test("RCCL, NCCL's API for AMD GPUs, is looked for where ROCm puts it, or where TSGRAD_LIBRCCL says", async () => {
  const { NcclError, candidatePaths, loadNccl } = await import("../../src/dist/nccl_library.ts");
  assert.deepEqual(candidatePaths({}, "rccl"), ["librccl.so.1", "/opt/rocm/lib/librccl.so.1"]);
  assert.throws(
    () => loadNccl({ TSGRAD_LIBRCCL: "/nonexistent/librccl.so.1" }, "rccl"),
    (e: unknown) =>
      e instanceof NcclError && /cannot load RCCL: tried \/nonexistent\/librccl\.so\.1 \(absent\)/.test(e.message),
  );
});
