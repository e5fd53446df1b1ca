// The C renderer computes exactly what the JS renderer (the reference) computes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Device, Tensor, dtypes } from "../../src/index.ts";
import type { TypedArray } from "../../src/dtype.ts";
import type { KernelIR } from "../../src/codegen/ir.ts";
import { renderC } from "../../src/renderer/c.ts";
import { type Idx, imul, ivar } from "../../src/shape/symbolic.ts";
import { recordItems } from "../../src/engine/realize.ts";
import type { ExecItem } from "../../src/engine/schedule.ts";
import { cFunction } from "../../src/engine/cpu_programs.ts";
import { aliasedSlots } from "../../src/device.ts";

const hasCpu = Device.isAvailable("CPU");

/** Runs `build` on JS and on CPU and returns both results' raw values. */
function onBoth(build: (device: string) => Tensor): [TypedArray, TypedArray] {
  return [build("JS").toArray(), build("CPU").toArray()];
}

function assertSame(build: (device: string) => Tensor): void {
  const [js, cpu] = onBoth(build);
  assert.deepEqual(Array.from(cpu as ArrayLike<number>), Array.from(js as ArrayLike<number>));
}

test("int32 add and multiply wrap around", { skip: !hasCpu }, () => {
  assertSame((device) => {
    const a = new Tensor([2147483647, -2147483648, 123456789, 65536], { dtype: dtypes.int32, device });
    return a.add(1).mul(a).add(a.mul(65536));
  });
});

test("narrow integer casts wrap like the reference", { skip: !hasCpu }, () => {
  assertSame((device) =>
    new Tensor([300, -129, 255.9, -0.5, 1e10, -3e9], { dtype: dtypes.float32, device }).cast(dtypes.int8),
  );
  assertSame((device) => new Tensor([300, -129, 70000, -1], { dtype: dtypes.int32, device }).cast(dtypes.uint16));
  assertSame((device) =>
    new Tensor([1e10, -3e9, 4294967295, 2147483648.5], { dtype: dtypes.float64, device }).cast(dtypes.int32),
  );
});

test("integer division and modulo truncate, and by zero give 0", { skip: !hasCpu }, () => {
  assertSame((device) => {
    const a = new Tensor([7, -7, 7, -7, 5, -2147483648], { dtype: dtypes.int32, device });
    const b = new Tensor([2, 2, -2, 0, 0, -1], { dtype: dtypes.int32, device });
    return a.idiv(b).mul(1000).add(a.mod(b));
  });
});

test("float16 and bfloat16 round to nearest even on store and cast", { skip: !hasCpu }, () => {
  // 1 + 2^-11 is a float16 tie (rounds down to even), 1 + 3*2^-11 rounds up; tiny values go subnormal
  const values = [
    1 + 2 ** -11,
    1 + 3 * 2 ** -11,
    65519,
    65520,
    1e-7,
    -3.00048828125,
    1 + 2 ** -8,
    1 + 3 * 2 ** -8,
    NaN,
    -Infinity,
  ];
  assertSame((device) =>
    new Tensor(values, { dtype: dtypes.float32, device }).cast(dtypes.float16).bitcast(dtypes.uint16),
  );
  assertSame((device) =>
    new Tensor(values, { dtype: dtypes.float32, device }).cast(dtypes.bfloat16).bitcast(dtypes.uint16),
  );
  assertSame((device) => new Tensor(values, { dtype: dtypes.float16, device }).mul(3).add(1).cast(dtypes.float32));
});

test("bitcast reinterprets the bits", { skip: !hasCpu }, () => {
  assertSame((device) => new Tensor([1, -2.5, 0.1, -0], { dtype: dtypes.float32, device }).bitcast(dtypes.int32));
  assertSame((device) => new Tensor([1065353216, -1], { dtype: dtypes.int32, device }).bitcast(dtypes.float32).add(1));
});

test("padded loads read only inside the source and give 0 outside", { skip: !hasCpu }, () => {
  assertSame((device) => {
    const a = new Tensor(
      [
        [1, 2, 3],
        [4, 5, 6],
      ],
      { dtype: dtypes.float32, device },
    );
    return a
      .pad([
        [2, 1],
        [3, 2],
      ])
      .add(
        a.flip(1).pad([
          [1, 2],
          [0, 5],
        ]),
      )
      .sum({ axis: 0 });
  });
});

test("transcendental ops match the reference bit for bit", { skip: !hasCpu }, () => {
  assertSame((device) => {
    const x = Tensor.arange(-20, 20, 1, { device }).cast(dtypes.float32).mul(0.37);
    return x.exp().add(x.abs().add(1).log()).add(x.sin()).add(x.abs().sqrt());
  });
});

test("bool logic and comparisons give 0/1", { skip: !hasCpu }, () => {
  assertSame((device) => {
    const a = new Tensor([1, 5, -3, 0, NaN], { dtype: dtypes.float32, device });
    return a.lt(2).logicalAnd(a.ne(0)).logicalOr(a.eq(5)).where(a.maximum(0), -1);
  });
});

test("max reductions of integers start from the type's minimum", { skip: !hasCpu }, () => {
  assertSame((device) =>
    new Tensor(
      [
        [-5, -7],
        [-2147483647, -9],
      ],
      { dtype: dtypes.int32, device },
    ).max({ axis: 1 }),
  );
  assertSame((device) =>
    new Tensor(
      [
        [-5, -7],
        [-100, -9],
      ],
      { dtype: dtypes.int8, device },
    ).max({ axis: 0 }),
  );
});

test("shifts and bitwise ops on unsigned and signed ints", { skip: !hasCpu }, () => {
  assertSame((device) =>
    new Tensor([1, 0x80000000, 0xffffffff], { dtype: dtypes.uint32, device })
      .shl(3)
      .bitwiseXor(new Tensor([5, 6, 7], { dtype: dtypes.uint32, device }))
      .shr(1),
  );
  assertSame((device) => new Tensor([-8, 100, -1], { dtype: dtypes.int8, device }).shl(2).shr(1));
});

test("index math that can leave the int32 range gets 64-bit loop variables", () => {
  const i0 = ivar("i0", 65536);
  const kernel = (index: Idx): KernelIR => ({
    name: "E_65536",
    buffers: [{ dtype: dtypes.float32, size: 2 ** 32 }],
    outputShape: [65536],
    flops: 0,
    parallel: 0,
    opts: "",
    body: [
      {
        kind: "loop",
        var: "i0",
        size: 65536,
        body: [
          {
            kind: "store",
            buf: 0,
            index,
            value: { kind: "lit", value: 1, dtype: dtypes.float32 },
            dtype: dtypes.float32,
          },
        ],
      },
    ],
  });
  assert.match(renderC(kernel(imul(i0, 65536)), "k", {}), /for \(int64_t i0/);
  assert.match(renderC(kernel(imul(i0, 2)), "k", {}), /for \(int32_t i0/);
});

test("exp2 in float is libm's and the reference's to the bit, specials included (the C kernels' own vectorisable 2^x)", {
  skip: !hasCpu,
}, () => {
  // every region of float's range: huge and tiny results, subnormal results, halfway points, integers
  const xs = [
    Infinity,
    -Infinity,
    NaN,
    0,
    -0,
    128,
    127.99999,
    -126,
    -126.5,
    -149,
    -149.5,
    -150,
    -151,
    1e-30,
    -1e-30,
    0.5,
    -0.5,
    1.5,
    200,
    -200,
  ];
  for (let i = 0; i < 20000; i++)
    xs.push(
      Math.fround(Math.sin(i * 1.618) * 160),
      Math.fround((i - 10000) * 1e-4),
      Math.fround(Math.round((i - 10000) / 50) + 0.5),
    );
  assertSame((device) => new Tensor(xs, { dtype: dtypes.float32, device }).exp2());
  assertSame((device) =>
    new Tensor(
      xs.map((x) => x / 16),
      { dtype: dtypes.float16, device },
    ).exp2(),
  );
});

test("bools computed as 32-bit 0/1 store as one byte and combine like the reference", { skip: !hasCpu }, () => {
  const a = [0.5, -1, 2, Number.NaN, 0, 3, -0, 7];
  assertSame((device) => {
    const x = new Tensor(a, { device });
    const lt = x.lt(1),
      ne = x.ne(0),
      pos = x.gt(0);
    return lt.logicalAnd(ne).logicalOr(pos.logicalNot()).ne(lt);
  });
  assertSame((device) => {
    const x = new Tensor(a, { device });
    return x.lt(1).where(x.mul(2), x.gt(2).cast(dtypes.float32)).add(x.ne(x).cast(dtypes.float32));
  });
});

test("an in-place update leaves only its aliased slots without restrict: the optimizer's scalars stay promised unaliased", {
  skip: !hasCpu,
}, () => {
  const on = { device: "CPU", dtype: dtypes.float32 };
  const w = new Tensor([1, 2, 3, 4, 5, 6, 7, 8], on).contiguous().realize();
  const g = new Tensor([8, 7, 6, 5, 4, 3, 2, 1], on).contiguous().realize();
  const lr = new Tensor([0.5], on).contiguous().realize();
  const { items } = recordItems(() => w.assign(w.sub(g.mul(lr).sqrt())).realize());
  const [update] = items.filter((i): i is ExecItem & { kind: "kernel" } => i.kind === "kernel");
  const aliased = aliasedSlots(update!.buffers);
  // w is written through slot 0 and read through another slot: both unrestricted, g and lr restrict
  const wSlot = update!.buffers.findIndex((b, slot) => slot > 0 && b === update!.buffers[0]);
  assert.equal(aliased, `0,${wSlot}`);
  const { code } = cFunction(update!.kernel, aliased);
  const params = /void tg_kernel\((.*)\)/.exec(code)![1]!.split(", ");
  update!.buffers.forEach((_, slot) =>
    assert.equal(params[slot]!.includes("restrict"), slot !== 0 && slot !== wSlot, params[slot]),
  );
  assert.deepEqual(
    Array.from(w.toArray() as Float32Array),
    [1, 2, 3, 4, 5, 6, 7, 8].map((x, i) => Math.fround(x - Math.fround(Math.sqrt(Math.fround((8 - i) * 0.5))))),
  );
  // distinct buffers: nothing aliased
  assert.equal(aliasedSlots(update!.buffers.filter((_, slot) => slot !== wSlot)), "");
});
