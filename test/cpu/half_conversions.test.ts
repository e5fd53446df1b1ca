// The C prelude's float16 conversions, hardware (x86 F16C) and software, against the JS reference
// (dtype.ts) on every float16 bit pattern and on float32 values around every rounding boundary.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import { f16BitsToF32, f32ToF16Bits } from "../../src/dtype.ts";
import { C_PRELUDE } from "../../src/renderer/c.ts";

const hasCpu = Device.isAvailable("CPU");
const cc = process.env.CC || "cc";
const hasCc = spawnSync(cc, ["--version"]).status === 0;

/**
 * float32 bits whose float16 rounding is delicate: every half, the midpoints to its neighbour and one ulp either side,
 * and pseudo-random patterns.
 */
function float32Inputs(): Uint32Array {
  const f = new Float32Array(1),
    u = new Uint32Array(f.buffer);
  const out: number[] = [];
  for (let h = 0; h < 0x10000; h++) {
    f[0] = f16BitsToF32(h);
    const bits = u[0]!;
    out.push(bits);
    if ((h & 0x7c00) === 0x7c00) continue;
    // the midpoint to the next half up in magnitude (a tie), and its float32 neighbours
    f[0] = (f16BitsToF32(h) + f16BitsToF32(h + 1)) / 2;
    if ((h & 0x7fff) !== 0x7bff) out.push(u[0]! - 1, u[0]!, u[0]! + 1);
  }
  let x = 12345;
  for (let i = 0; i < 1 << 16; i++) out.push((x = (Math.imul(x, 1664525) + 1013904223) >>> 0));
  out.push(0x477ff000, 0x477fefff, 0xc77ff000, 0x33000000, 0x33000001, 0x7f800000, 0xff800000);
  return Uint32Array.from(out);
}

const isNanBits32 = (b: number): boolean => (b & 0x7f800000) === 0x7f800000 && (b & 0x7fffff) !== 0;
const isNanBits16 = (b: number): boolean => (b & 0x7c00) === 0x7c00 && (b & 0x3ff) !== 0;

/** Compares conversions with the JS reference; NaN payloads may differ (a NaN must stay a NaN). */
function assertMatches(halvesToFloat: Uint32Array, floatsToHalf: Uint16Array, inputs: Uint32Array, what: string): void {
  const f = new Float32Array(1),
    u = new Uint32Array(f.buffer);
  for (let h = 0; h < 0x10000; h++) {
    f[0] = f16BitsToF32(h);
    const want = u[0]!,
      got = halvesToFloat[h]!;
    if (isNanBits16(h))
      assert.ok(isNanBits32(got), `${what}: half 0x${h.toString(16)} (NaN) gave 0x${got.toString(16)}`);
    else
      assert.equal(
        got,
        want,
        `${what}: half 0x${h.toString(16)} gave float bits 0x${got.toString(16)}, want 0x${want.toString(16)}`,
      );
  }
  for (let i = 0; i < inputs.length; i++) {
    u[0] = inputs[i]!;
    const want = f32ToF16Bits(f[0]),
      got = floatsToHalf[i]!;
    if (isNanBits32(inputs[i]!))
      assert.ok(isNanBits16(got), `${what}: NaN 0x${inputs[i]!.toString(16)} gave half 0x${got.toString(16)}`);
    else
      assert.equal(
        got,
        want,
        `${what}: float bits 0x${inputs[i]!.toString(16)} (${f[0]}) gave half 0x${got.toString(16)}, want 0x${want.toString(16)}`,
      );
  }
}

test("CPU device: float16 <-> float32 conversions match the JS reference on every half and every rounding boundary", {
  skip: !hasCpu,
}, () => {
  const inputs = float32Inputs();
  const halves = Uint16Array.from({ length: 0x10000 }, (_, i) => i);
  const toFloat = new Tensor(halves, { dtype: dtypes.uint16, device: "CPU" })
    .bitcast(dtypes.float16)
    .cast(dtypes.float32)
    .bitcast(dtypes.uint32)
    .toArray() as Uint32Array;
  const toHalf = new Tensor(inputs, { dtype: dtypes.uint32, device: "CPU" })
    .bitcast(dtypes.float32)
    .cast(dtypes.float16)
    .bitcast(dtypes.uint16)
    .toArray() as Uint16Array;
  assertMatches(toFloat, toHalf, inputs, "CPU device");
});

// The software path runs only where the compiler targets no F16C: build it here on purpose
test("software float16 conversions (no F16C) match the JS reference on the same inputs", { skip: !hasCc }, () => {
  const dir = mkdtempSync(join(tmpdir(), "tsgrad-half-"));
  try {
    const inputs = float32Inputs();
    writeFileSync(join(dir, "in.bin"), new Uint8Array(inputs.buffer));
    const main = `
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char** argv) {
  FILE* in = fopen(argv[1], "rb"); FILE* out = fopen(argv[2], "wb");
  fseek(in, 0, SEEK_END); long n = ftell(in) / 4; fseek(in, 0, SEEK_SET);
  uint32_t* x = malloc(n * 4); if (fread(x, 4, n, in) != (size_t)n) return 1;
  for (uint32_t h = 0; h < 0x10000; h++) { float f = tg_h2f((uint16_t)h); fwrite(&f, 4, 1, out); }
  for (long i = 0; i < n; i++) { float f; memcpy(&f, &x[i], 4); uint16_t h = tg_f2h(f); fwrite(&h, 2, 1, out); }
  return fclose(out);
}`;
    writeFileSync(join(dir, "half.c"), C_PRELUDE + main);
    const built = spawnSync(
      cc,
      ["-O2", "-mno-f16c", "-ffp-contract=off", "-std=gnu11", "-o", join(dir, "half"), join(dir, "half.c"), "-lm"],
      { encoding: "utf8" },
    );
    assert.equal(built.status, 0, built.stderr);
    const ran = spawnSync(join(dir, "half"), [join(dir, "in.bin"), join(dir, "out.bin")], { encoding: "utf8" });
    assert.equal(ran.status, 0, ran.stderr);
    const bytes = readFileSync(join(dir, "out.bin"));
    const toFloat = new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + 0x40000));
    const toHalf = new Uint16Array(bytes.buffer.slice(bytes.byteOffset + 0x40000, bytes.byteOffset + bytes.length));
    assert.equal(toHalf.length, inputs.length);
    assertMatches(toFloat, toHalf, inputs, "software");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
