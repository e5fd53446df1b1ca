// Device memory of intermediates: the memory planner's released buffers go back to the device as soon as a
// schedule has run (the garbage collector knows nothing of device memory), but not while a JIT capture
// keeps the kernels that use them.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GlobalCounters, Tensor } from "../../src/index.ts";
import { jit } from "../../src/tensor/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { storedBuffer } from "../../src/engine/schedule.ts";
import koffi from "koffi";
import { readFileSync } from "node:fs";
import { testDevices } from "../devices.ts";

for (const device of testDevices()) {
  test(`a schedule's released intermediates are given back when it has run (${device})`, () => {
    const x = Tensor.rand([64, 256], { device }).realize();
    const before = GlobalCounters.memUsed;
    // softmax stores the rows' max and sum (read under broadcasts), each released after its last reader
    const { result: y, items } = recordItems(() => x.softmax(-1).mul(2).softmax(-1).realize());
    const written = new Set(items.flatMap((item) => (item.kind === "kernel" ? [item.buffers[0]!] : [])));
    assert.ok(written.size >= 3, `expected stored intermediates, got ${written.size} kernels`);
    // while recorded, every buffer the kernels use stays
    assert.ok(GlobalCounters.memUsed - before > 64 * 256 * 4, `${GlobalCounters.memUsed - before} bytes`);
    const plainBefore = GlobalCounters.memUsed;
    const z = x.softmax(-1).mul(3).softmax(-1).realize();
    // not recorded: only the result stays
    assert.equal(GlobalCounters.memUsed - plainBefore, 64 * 256 * 4);
    assert.ok(Math.abs(z.sum().item() - 64) < 1e-3 && Math.abs(y.sum().item() - 64) < 1e-3);
  });

  test(`a jitted function's intermediates survive its capture and give the same numbers on replay (${device})`, () => {
    const w = Tensor.rand([32, 32], { device }).realize();
    const f = (x: Tensor): Tensor => x.matmul(w).softmax(-1).matmul(w).softmax(-1);
    const jf = jit(f);
    for (let i = 0; i < 4; i++) {
      const x = Tensor.rand([8, 32], { device }).realize();
      const got = jf(x).toArray() as Float32Array,
        want = f(x).toArray() as Float32Array;
      got.forEach((g, j) => assert.ok(Math.abs(g - want[j]!) < 1e-6, `call ${i}, element ${j}: ${g} vs ${want[j]}`));
    }
    assert.ok(jf.jit.isCaptured);
  });
}

for (const device of testDevices().filter((d) => d.startsWith("CPU") || d.startsWith("JS"))) {
  test(`host buffers start on a 64-byte boundary, and kernels and copies see the right bytes there (${device})`, () => {
    // Node's own ArrayBuffers start 16 bytes past one: a 64-byte vector would straddle two cache lines
    for (const n of [1, 3, 17, 1000, 65536 + 5]) {
      const t = Tensor.arange(n, undefined, 1, { device }).float().mul(2).realize();
      const handle = storedBuffer(t.node as never)!.handle as Uint8Array;
      assert.equal(koffi.address(handle) % 64n, 0n, `${n} floats: address ${koffi.address(handle)}`);
      assert.ok(handle.byteOffset > 0 || koffi.address(handle.buffer) % 64n === 0n);
      const values = t.add(1).toArray() as Float32Array;
      assert.equal(values.length, n);
      values.forEach((v, i) => assert.equal(v, 2 * i + 1, `element ${i} of ${n}`));
    }
  });
}

test("the host pool hands a freed buffer to the next allocation of its size, aligned, up to its limit", async () => {
  const { HOST_ALIGNMENT, HostPool } = await import("../../src/runtime/host_memory.ts");
  const pool = new HostPool(3000);
  const a = pool.allocate(1000);
  assert.equal(Number(koffi.address(a) % BigInt(HOST_ALIGNMENT)), 0);
  a.fill(7);
  pool.release(a);
  assert.equal(pool.bytes, 1000);
  assert.notEqual(pool.allocate(999), a, "another size gets fresh memory");
  const again = pool.allocate(1000);
  assert.equal(again, a, "the same size gets the freed memory back");
  assert.equal(pool.bytes, 0);
  // past the limit a freed buffer is left to the garbage collector
  for (const m of [pool.allocate(1500), pool.allocate(1500), pool.allocate(1500)]) pool.release(m);
  assert.equal(pool.bytes, 3000);
  new HostPool(0).release(a);
});

test("host buffers of half a huge page or more start on one and are marked for huge pages (Linux)", async (t) => {
  const { HUGE_PAGE, alignedBytes } = await import("../../src/runtime/host_memory.ts");
  if (process.platform !== "linux" || process.env.TSGRAD_HUGE_PAGES === "0") return t.skip("no transparent huge pages");
  const mappingFlags = (address: bigint): string =>
    readFileSync("/proc/self/smaps", "utf8")
      .split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)
      .find((lines) => {
        const [start, end] = lines
          .split(" ")[0]!
          .split("-")
          .map((hex) => BigInt(`0x${hex}`));
        return address >= start! && address < end!;
      })
      ?.match(/^VmFlags:.*$/m)?.[0] ?? "";
  for (const bytes of [HUGE_PAGE / 2, HUGE_PAGE + 12345]) {
    const memory = alignedBytes(bytes);
    const address = koffi.address(memory);
    assert.equal(address % BigInt(HUGE_PAGE), 0n, `${bytes} bytes`);
    assert.ok(
      memory.every((byte) => byte === 0),
      "fresh memory reads as zeros",
    );
    // the whole huge pages it spans carry the advice ("hg"), so its faults take 2 MiB pages where any are free
    for (const end of [address, address + BigInt(Math.ceil(bytes / HUGE_PAGE) * HUGE_PAGE) - 1n])
      assert.match(mappingFlags(end), /\bhg\b/, `${bytes} bytes, byte ${end - address}`);
  }
  // a smaller buffer keeps to 64 bytes (a huge page would be mostly idle memory)
  assert.equal(koffi.address(alignedBytes(HUGE_PAGE / 4)) % 64n, 0n);
});

for (const device of testDevices().filter((d) => d === "CPU" || d === "JS")) {
  test(`an eager op run again reuses its intermediates' memory and gives the same numbers (${device})`, async () => {
    const { hostPool } = await import("../../src/runtime/host_memory.ts");
    const data = Float32Array.from({ length: 64 * 96 }, (_, i) => Math.sin(i));
    // a new input every call, as in an eager loop (the same graph again would be the realized result itself)
    const f = () => new Tensor(data, { device }).reshape([64, 96]).softmax(-1).mul(2).softmax(-1).realize();
    const first = f().toArray() as Float32Array;
    assert.ok(hostPool.bytes > 0, "the first run's intermediates wait in the pool");
    const reused = hostPool.counts.reused;
    const second = f().toArray() as Float32Array;
    // the softmaxes' row maxima and sums (and what the first run's result freed): memory it had before
    assert.ok(hostPool.counts.reused - reused >= 2, `${hostPool.counts.reused - reused} buffers reused`);
    assert.deepEqual(second, first);
  });
}

for (const device of testDevices().filter((d) => d === "CPU" || d === "JS")) {
  test(`results do not hang on what host memory held before: every small size waiting as NaN changes none (${device})`, async () => {
    const { hostPool } = await import("../../src/runtime/host_memory.ts");
    const [vocab, width] = [40, 24];
    const run = (): number[][] => {
      const w = new Tensor(
        Float32Array.from({ length: vocab * width }, (_, i) => Math.sin(i)),
        { device },
      ).reshape([vocab, width]);
      w.requiresGrad = true;
      // a gather, a packed matmul, a softmax's row sums, a pad, and the scatter of the gather's gradient
      const x = Tensor.embedding(new Tensor(new Int32Array([3, 0, 37, 3, 1, 19, 25, 3]), { device }), w);
      const y = x
        .matmul(w.transpose(0, 1))
        .softmax(-1)
        .pad([
          [1, 2],
          [0, 3],
        ]);
      y.square().sum().backward();
      return [y, w.grad!].map((t) => Array.from(t.toArray() as Float32Array));
    };
    hostPool.clear();
    const clean = run();
    // fresh memory is not cleared, and freed memory comes back as it was left: here, all NaN (or -1)
    for (let bytes = 4; bytes <= 16384; bytes += 4) hostPool.release(new Uint8Array(bytes).fill(0xff));
    const reused = hostPool.counts.reused;
    try {
      assert.deepEqual(run(), clean);
      assert.ok(hostPool.counts.reused - reused >= 8, `${hostPool.counts.reused - reused} poisoned buffers taken`);
    } finally {
      hostPool.clear();
    }
  });
}

test("a tensor made from a typed array of its dtype's storage copies it: later writes to the array do not show", () => {
  for (const device of testDevices()) {
    const floats = new Float32Array([1.5, Number.NaN, -0, 3e38]);
    const ints = new Int32Array([1, -2, 2147483647]);
    const [f, i] = [new Tensor(floats, { device }), new Tensor(ints, { device })];
    floats[0] = 99;
    ints[0] = 99;
    assert.deepEqual(Array.from(f.toArray() as Float32Array), [1.5, Number.NaN, -0, Math.fround(3e38)], device);
    assert.deepEqual(Array.from(i.toArray() as Int32Array), [1, -2, 2147483647], device);
    // storage that holds other values than given still converts: bytes to bools, floats to float16
    assert.deepEqual(new Tensor(new Uint8Array([0, 2, 255]), { device, dtype: "bool" }).tolist(), [false, true, true]);
    assert.deepEqual(new Tensor(new Float32Array([1.1]), { device, dtype: "float16" }).tolist(), [1.099609375]);
  }
});
