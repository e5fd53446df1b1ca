// The CUDA runtime's FFI, end to end on a stand-in libcuda (fake_libcuda.c: one sm_90 "GPU" whose memory
// is host memory, launches recorded instead of run): copies, compiled modules, launch parameters and
// dimensions, errors naming the CUDA error and the kernel; plus the caching allocator and the disk cache.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import koffi from "koffi";
import { scratchDir } from "../scratch.ts";
import { CachingAllocator } from "../../src/runtime/cuda_allocator.ts";
import { CudaError } from "../../src/runtime/cuda_driver.ts";

const work = scratchDir("cuda-runtime");
const fakePath = join(work, "libcuda_fake.so");
const built =
  spawnSync("cc", ["-shared", "-fPIC", "-O1", "-o", fakePath, join(import.meta.dirname, "fake_libcuda.c")]).status ===
  0;
// the runtime reads these when it first loads the driver and compiler
process.env.TSGRAD_LIBCUDA = fakePath;
process.env.TSGRAD_LIBNVRTC = "/nonexistent/libnvrtc.so";
process.env.TSGRAD_CACHE = join(work, "cache");

const { Tensor, Device } = await import("../../src/index.ts");
const { storedBuffer } = await import("../../src/engine/schedule.ts");
const { compileCuda, cudaCompileStats, findNvcc } = await import("../../src/runtime/cuda_compile.ts");
const { CUDA_PRELUDE } = await import("../../src/renderer/cuda.ts");
type Fn = (...args: unknown[]) => unknown;
const fake = built ? koffi.load(fakePath) : undefined;
const control = (signature: string): Fn => fake!.func(signature) as Fn;

const skipFake = built ? false : "no C compiler to build the stand-in libcuda";
const skipCompile = !built ? skipFake : findNvcc() ? false : "nvcc not found";

/** The device address behind a realized tensor. */
const pointerOf = (t: InstanceType<typeof Tensor>): number =>
  (storedBuffer(t.realize().node as never)!.handle as { pointer: number }).pointer;

test("without libcuda the CUDA device is unavailable and another device is the default", () => {
  const { NODE_TEST_CONTEXT: _, ...env } = process.env;
  const child = spawnSync(
    process.execPath,
    [
      "--import",
      "tsx",
      "-e",
      'const { Device } = await import("./src/index.ts"); console.log(Device.isAvailable("CUDA"), Device.DEFAULT);',
    ],
    {
      env: { ...env, TSGRAD_LIBCUDA: "/nonexistent/libcuda.so.1" },
      encoding: "utf8",
    },
  );
  assert.equal(child.status, 0, child.stderr);
  assert.match(child.stdout, /^false (CPU|JS)\n$/);
});

test("CUDA is the default device when a GPU answers", { skip: skipFake }, () => {
  assert.equal(Device.DEFAULT, "CUDA");
});

test("data copied into a CUDA buffer reads back unchanged", { skip: skipFake }, () => {
  const values = [1.5, -2, 3.25, 1e30];
  assert.deepEqual(
    Array.from(new Tensor(values, { device: "CUDA" }).toArray() as Float32Array),
    values.map(Math.fround),
  );
});

test("a kernel launches with its buffers' device pointers and a grid covering every output", {
  skip: skipCompile,
}, () => {
  const a = new Tensor(
    Array.from({ length: 1000 }, (_, i) => i),
    { device: "CUDA" },
  );
  const b = new Tensor(
    Array.from({ length: 1000 }, (_, i) => 2 * i),
    { device: "CUDA" },
  );
  const [pa, pb] = [pointerOf(a), pointerOf(b)];
  control("void fake_expect_params(int n)")(3);
  const before = control("int fake_launches(void)")() as number;
  const sum = a.add(b);
  const out = pointerOf(sum);
  assert.equal(control("int fake_launches(void)")(), before + 1);
  assert.match(control("const char *fake_last_name(void)")() as string, /^E_1000_\d+$/);
  const dim = control("unsigned int fake_last_dim(int which)");
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5].map((d) => dim(d)),
    [4, 1, 1, 256, 1, 1],
  );
  const param = control("uint64_t fake_last_param(int i)");
  assert.deepEqual([param(0), param(1), param(2)], [out, pa, pb]);
});

test("a failed launch throws CudaError naming the CUDA error and the kernel", { skip: skipCompile }, () => {
  const a = new Tensor([1, 2, 3, 4, 5, 6, 7], { device: "CUDA" }).realize();
  control("void fake_fail_next_launch(int code)")(701);
  assert.throws(
    () => a.mul(3).realize(),
    (e: unknown) =>
      e instanceof CudaError &&
      /cuLaunchKernel \(E_7 grid 1,1,1 block 256,1,1\) failed: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES/.test(e.message),
  );
});

test("running out of device memory throws CudaError naming CUDA_ERROR_OUT_OF_MEMORY", { skip: skipFake }, () => {
  control("void fake_set_limit(int64_t bytes)")(1 << 22);
  try {
    assert.throws(
      () => new Tensor(new Float32Array(1 << 21), { device: "CUDA" }),
      (e: unknown) => e instanceof CudaError && /CUDA_ERROR_OUT_OF_MEMORY/.test(e.message),
    );
  } finally {
    control("void fake_set_limit(int64_t bytes)")(2 ** 40);
  }
});

test("a source compiled once comes from the disk cache after", { skip: skipCompile }, () => {
  const source = `${CUDA_PRELUDE}\nextern "C" __global__ void cached(float* b0) { b0[threadIdx.x] = 2.0f; }\n`;
  const first = compileCuda(source, "sm_90", "cached");
  const hits = cudaCompileStats.cached;
  assert.deepEqual(compileCuda(source, "sm_90", "cached"), first);
  assert.equal(cudaCompileStats.cached, hits + 1);
  assert.deepEqual([...first.subarray(0, 4)], [0x7f, 0x45, 0x4c, 0x46]); // an ELF cubin
});

/** An allocator over a pretend device of `capacity` bytes that counts driver calls. */
function pretendAllocator(capacity: number) {
  const calls = { alloc: 0, release: 0 };
  let used = 0,
    next = 4096;
  const sizes = new Map<number, number>();
  const allocator = new CachingAllocator(
    (bytes) => {
      calls.alloc++;
      if (used + bytes > capacity) throw new CudaError("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2)");
      used += bytes;
      sizes.set(next, bytes);
      return (next += bytes) - bytes;
    },
    (pointer) => {
      calls.release++;
      used -= sizes.get(pointer)!;
    },
    (e) => e instanceof CudaError && e.message.includes("OUT_OF_MEMORY"),
  );
  return { allocator, calls };
}

test("a freed block is handed out again for a request of the same rounded size", () => {
  const { allocator, calls } = pretendAllocator(1 << 20);
  const p = allocator.alloc(1000);
  allocator.free(p, 1000);
  assert.equal(allocator.alloc(1020), p);
  assert.equal(calls.alloc, 1);
  assert.equal(CachingAllocator.blockSize(1000), 1024);
});

test("an allocation that runs out of memory empties the cache and tries again", () => {
  const { allocator, calls } = pretendAllocator(4096);
  const p = allocator.alloc(3000);
  allocator.free(p, 3000);
  allocator.alloc(4000);
  assert.equal(calls.release, 1);
  assert.equal(allocator.cachedBytes, 0);
  assert.equal(allocator.usedBytes, 4096);
});
