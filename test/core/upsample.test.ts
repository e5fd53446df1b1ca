// Transposed convolution and interpolation (src/tensor/upsample.ts): against float64 references by their definitions,
// forward and gradients, on every test device; convTranspose as conv's adjoint; PyTorch's documented outputs; errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError, nn } from "../../src/index.ts";
import { conv, convTranspose, interpolate } from "../../src/tensor/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { assertClose } from "../close.ts";
import { checkOp, fromNd, values } from "./harness.ts";
import { type Nd, nd, randomNd, ravel, unravel } from "./ref.ts";
import { testDevices } from "../devices.ts";

const devices = testDevices();
const prod = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

/** Every multi-index of a shape, in row-major order. */
const indices = (shape: number[]): number[][] => Array.from({ length: prod(shape) }, (_, i) => unravel(i, shape));

interface TransposeCase {
  name: string;
  x: number[]; // [batch, in, ...spatial]
  w: number[]; // [in, out / groups, ...kernel]
  stride: number[];
  padding: number[];
  outputPadding: number[];
  dilation: number[];
  groups: number;
  bias: boolean;
}

/**
 * The transposed convolution by its definition: each input element, times the kernel, added into the output
 * from its position*stride - padding on, the kernel's taps dilation apart.
 */
function convTransposeRef(c: TransposeCase, x: Nd, w: Nd, bias?: Nd): Nd {
  const [batch, channels] = c.x as [number, number];
  const perGroup = c.w[1]!,
    kernel = c.w.slice(2),
    inPerGroup = channels / c.groups;
  const out = c.x
    .slice(2)
    .map(
      (l, d) =>
        (l - 1) * c.stride[d]! - 2 * c.padding[d]! + c.dilation[d]! * (kernel[d]! - 1) + c.outputPadding[d]! + 1,
    );
  const outShape = [batch, perGroup * c.groups, ...out];
  const y = new Array<number>(prod(outShape)).fill(0);
  if (bias) for (const [n, f, ...o] of indices(outShape)) y[ravel([n!, f!, ...o], outShape)] = bias.data[f!]!;
  for (const [n, ci, ...i] of indices(c.x)) {
    const value = x.data[ravel([n!, ci!, ...i], c.x)]!;
    const group = Math.floor(ci! / inPerGroup);
    for (const [fo, ...k] of indices([perGroup, ...kernel])) {
      const at = i.map((v, d) => v * c.stride[d]! - c.padding[d]! + k[d]! * c.dilation[d]!);
      if (at.some((p, d) => p < 0 || p >= out[d]!)) continue;
      y[ravel([n!, group * perGroup + fo!, ...at], outShape)] += value * w.data[ravel([ci!, fo!, ...k], c.w)]!;
    }
  }
  return nd(outShape, y);
}

const transposeCases: TransposeCase[] = [
  {
    name: "2-D, stride 2, padding 1, outputPadding 1, bias",
    x: [2, 3, 3, 4],
    w: [3, 2, 3, 3],
    stride: [2, 2],
    padding: [1, 1],
    outputPadding: [1, 1],
    dilation: [1, 1],
    groups: 1,
    bias: true,
  },
  {
    name: "2-D, dilation 2, stride (1, 2), padding (2, 0)",
    x: [1, 2, 4, 3],
    w: [2, 3, 2, 3],
    stride: [1, 2],
    padding: [2, 0],
    outputPadding: [0, 0],
    dilation: [2, 2],
    groups: 1,
    bias: false,
  },
  {
    name: "2-D, two groups, stride 2, outputPadding (0, 1), bias",
    x: [1, 4, 3, 3],
    w: [4, 3, 2, 2],
    stride: [2, 2],
    padding: [0, 0],
    outputPadding: [0, 1],
    dilation: [1, 1],
    groups: 2,
    bias: true,
  },
  {
    name: "1-D, stride 3, padding 2, outputPadding 2",
    x: [2, 2, 5],
    w: [2, 3, 4],
    stride: [3],
    padding: [2],
    outputPadding: [2],
    dilation: [1],
    groups: 1,
    bias: false,
  },
  {
    name: "1-D, outputPadding 2 below dilation 3 (stride 1), bias",
    x: [1, 2, 4],
    w: [2, 2, 3],
    stride: [1],
    padding: [1],
    outputPadding: [2],
    dilation: [3],
    groups: 1,
    bias: true,
  },
  {
    name: "1-D, padding beyond the kernel's reach (the stuffed input is shrunk)",
    x: [1, 2, 4],
    w: [2, 1, 2],
    stride: [3],
    padding: [2],
    outputPadding: [1],
    dilation: [1],
    groups: 1,
    bias: false,
  },
  {
    name: "3-D, stride 2, depthwise groups",
    x: [1, 2, 2, 2, 2],
    w: [2, 1, 2, 2, 2],
    stride: [2, 2, 2],
    padding: [0, 1, 0],
    outputPadding: [1, 0, 0],
    dilation: [1, 1, 1],
    groups: 2,
    bias: false,
  },
];

for (const device of devices) {
  for (const c of transposeCases) {
    test(`convTranspose matches its scatter definition, forward and gradients: ${c.name} (${device})`, () => {
      const inputs = [randomNd(c.x, 1), randomNd(c.w, 2), ...(c.bias ? [randomNd([c.w[1]! * c.groups], 3)] : [])];
      const options = {
        stride: c.stride,
        padding: c.padding,
        outputPadding: c.outputPadding,
        dilation: c.dilation,
        groups: c.groups,
      };
      checkOp(
        device,
        inputs,
        (x, w, b) => convTranspose(x!, w!, { ...options, bias: b }),
        (x, w, b) => convTransposeRef(c, x!, w!, b),
      );
    });
  }

  test(`convTranspose is conv's adjoint: <conv(x, w), y> = <x, convTranspose(y, w)> over random options (${device})`, () => {
    let seed = 10;
    const pick = (n: number): number => Math.floor(randomNd([1], seed++, 0, n).data[0]!);
    for (let trial = 0; trial < 8; trial++) {
      const spatial = 1 + (trial % 2),
        groups = 1 + pick(2);
      const kernel = Array.from({ length: spatial }, () => 1 + pick(3));
      const stride = kernel.map(() => 1 + pick(3)),
        dilation = kernel.map(() => 1 + pick(2));
      const padding = kernel.map((k, d) => pick(dilation[d]! * (k - 1) + 2));
      const length = kernel.map((k, d) => dilation[d]! * (k - 1) + 1 + pick(7));
      // which of the input lengths that map to conv's output length this one is
      const outputPadding = length.map(
        (l, d) => (l + 2 * padding[d]! - dilation[d]! * (kernel[d]! - 1) - 1) % stride[d]!,
      );
      const [channels, filters] = [2 * groups, 3 * groups];
      const options = { stride, padding, dilation, groups };
      const what = JSON.stringify({ kernel, length, ...options, outputPadding });
      const x = fromNd(randomNd([2, channels, ...length], seed++), device);
      const w = fromNd(randomNd([filters, channels / groups, ...kernel], seed++), device);
      const forward = conv(x, w, options);
      const y = fromNd(randomNd(forward.shape, seed++), device);
      const back = convTranspose(y, w, { ...options, outputPadding });
      assert.deepEqual(back.shape, x.shape, what);
      assertClose([back.mul(x).sum().item()], [forward.mul(y).sum().item()], { atol: 1e-4, what });
    }
  });

  test(`interpolate nearest by 2 repeats each element: [[1, 2], [3, 4]], as a view with no reduction (${device})`, () => {
    const x = new Tensor([1, 2, 3, 4], { device }).reshape([1, 1, 2, 2]).realize();
    const { result, items } = recordItems(() => interpolate(x, { scaleFactor: 2 }).realize());
    assert.deepEqual(result.tolist(), [
      [
        [
          [1, 1, 2, 2],
          [1, 1, 2, 2],
          [3, 3, 4, 4],
          [3, 3, 4, 4],
        ],
      ],
    ]);
    const names = items.flatMap((item) => (item.kind === "kernel" ? [item.kernel.name] : []));
    assert.deepEqual(
      names.filter((name) => name.startsWith("r_")),
      [],
      names.join(", "),
    );
  });

  test(`interpolate nearest to other sizes reads floor(o * in / out), and PyTorch's 1 / scaleFactor when one is given (${device})`, () => {
    const x = new Tensor([0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22, 23, 24], { device }).reshape([1, 1, 3, 5]);
    // rows 3 -> 5: floor(o * 3/5) for o = 0..4 = 0, 0, 1, 1, 2; columns 5 -> 3: floor(o * 5/3) = 0, 1, 3
    assert.deepEqual(interpolate(x, { size: [5, 3] }).tolist(), [
      [
        [
          [0, 1, 3],
          [0, 1, 3],
          [10, 11, 13],
          [10, 11, 13],
          [20, 21, 23],
        ],
      ],
    ]);
    // 3 * 3.2 -> 9 elements, read at floor(o / 3.2) = 0, 0, 0, 0, 1, 1, 1, 2, 2 (not floor(o / 3), though 9 = 3 * 3)
    const row = new Tensor([5, 6, 7], { device }).reshape([1, 1, 3]);
    assert.deepEqual(interpolate(row, { scaleFactor: 3.2 }).tolist(), [[[5, 5, 5, 5, 6, 6, 6, 7, 7]]]);
  });

  test(`interpolate bilinear 2x2 -> 4x4 gives PyTorch's documented values, alignCorners false and true (${device})`, () => {
    const x = new Tensor([1, 2, 3, 4], { device, dtype: "float32" }).reshape([1, 1, 2, 2]);
    // alignCorners false: source (o + 0.5) * 2/4 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (past the last: 1), so
    // the row [1, 2] becomes [1, 0.75*1 + 0.25*2, 0.25*1 + 0.75*2, 2] = [1, 1.25, 1.75, 2], the column [1, 3] [1, 1.5,
    // 2.5, 3]
    const halfPixel = [
      [1, 1.25, 1.75, 2],
      [1.5, 1.75, 2.25, 2.5],
      [2.5, 2.75, 3.25, 3.5],
      [3, 3.25, 3.75, 4],
    ];
    assertClose(values(interpolate(x, { size: [4, 4], mode: "bilinear" })), halfPixel.flat(), {
      what: "alignCorners false",
    });
    // alignCorners true: source o * (2-1)/(4-1) = 0, 1/3, 2/3, 1, so the row [1, 2] becomes [1, 4/3, 5/3, 2]
    const corners = [
      [1, 4 / 3, 5 / 3, 2],
      [5 / 3, 2, 7 / 3, 8 / 3],
      [7 / 3, 8 / 3, 3, 10 / 3],
      [3, 10 / 3, 11 / 3, 4],
    ];
    assertClose(values(interpolate(x, { scaleFactor: 2, mode: "bilinear", alignCorners: true })), corners.flat(), {
      what: "alignCorners true",
    });
  });

  test(`interpolate reads only each output's sources: an inf or NaN stays where PyTorch's formula puts it (${device})`, () => {
    const x = new Tensor([1, Infinity, 3], { device }).reshape([1, 1, 3]);
    // nearest to 2 reads floor(o * 1.5) = 0, 1
    assert.deepEqual(values(interpolate(x, { size: 2 })), [1, Infinity]);
    // linear to 6: sources 0 (1*1 + 0*inf: NaN, as in PyTorch), 0.25, 0.75, 1.25, 1.75 (inf), 2.25 (the last: 3)
    assert.deepEqual(values(interpolate(x, { size: 6, mode: "linear" })), [
      NaN,
      Infinity,
      Infinity,
      Infinity,
      Infinity,
      3,
    ]);
    const withNaN = new Tensor([NaN, 2, 4, 6], { device }).reshape([1, 1, 4]);
    assert.deepEqual(values(interpolate(withNaN, { size: 2 })), [NaN, 4]);
    assert.deepEqual(values(interpolate(withNaN, { size: 2, mode: "linear" })), [NaN, 5]);
  });
}

/** The source coordinate PyTorch reads output `o` from along one axis (`step`: 1 / scaleFactor, or in / out). */
function sourceOf(o: number, from: number, to: number, alignCorners: boolean, step = from / to): number {
  if (alignCorners) return to > 1 ? (o * (from - 1)) / (to - 1) : 0;
  return Math.max((o + 0.5) * step - 0.5, 0);
}

/**
 * Bilinear interpolation of the last two axes by its formula: the four neighbours of each source point, weighted by
 * distance.
 */
function bilinearRef(x: Nd, [outH, outW]: number[], alignCorners: boolean): Nd {
  const [batch, channels, inH, inW] = x.shape as [number, number, number, number];
  const shape = [batch, channels, outH!, outW!];
  const read = (n: number, ch: number, r: number, c: number): number => x.data[ravel([n, ch, r, c], x.shape)]!;
  return nd(
    shape,
    indices(shape).map(([n, ch, oy, ox]) => {
      const [sy, sx] = [sourceOf(oy!, inH, outH!, alignCorners), sourceOf(ox!, inW, outW!, alignCorners)];
      const [y0, x0] = [Math.min(Math.floor(sy), inH - 1), Math.min(Math.floor(sx), inW - 1)];
      const [y1, x1] = [Math.min(y0 + 1, inH - 1), Math.min(x0 + 1, inW - 1)];
      const [fy, fx] = [sy - y0, sx - x0];
      return (
        (1 - fy) * ((1 - fx) * read(n!, ch!, y0, x0) + fx * read(n!, ch!, y0, x1)) +
        fy * ((1 - fx) * read(n!, ch!, y1, x0) + fx * read(n!, ch!, y1, x1))
      );
    }),
  );
}

/** Nearest (PyTorch's legacy mode) over every spatial axis: output o reads input floor(o * in / out). */
function nearestRef(x: Nd, out: number[]): Nd {
  const shape = [...x.shape.slice(0, 2), ...out];
  return nd(
    shape,
    indices(shape).map(
      ([n, ch, ...o]) =>
        x.data[ravel([n!, ch!, ...o.map((v, d) => Math.floor((v * x.shape[2 + d]!) / out[d]!))], x.shape)]!,
    ),
  );
}

for (const device of devices) {
  for (const alignCorners of [false, true]) {
    test(`interpolate bilinear matches its formula up and down, with gradients, alignCorners ${alignCorners} (${device})`, () => {
      for (const [input, size] of [
        [
          [1, 2, 3, 4],
          [5, 7],
        ],
        [
          [2, 1, 5, 6],
          [3, 4],
        ],
      ] as const) {
        checkOp(
          device,
          [randomNd([...input], 4)],
          (x) => interpolate(x!, { size: [...size], mode: "bilinear", alignCorners }),
          (x) => bilinearRef(x!, [...size], alignCorners),
        );
      }
    });
  }

  test(`interpolate nearest matches floor(o * in / out), with gradients, by whole and other factors (${device})`, () => {
    checkOp(
      device,
      [randomNd([2, 2, 2, 3], 5)],
      (x) => interpolate(x!, { size: [6, 6] }),
      (x) => nearestRef(x!, [6, 6]),
    );
    checkOp(
      device,
      [randomNd([1, 2, 3, 5], 6)],
      (x) => interpolate(x!, { size: [4, 2] }),
      (x) => nearestRef(x!, [4, 2]),
    );
    checkOp(
      device,
      [randomNd([1, 2, 2, 2, 3], 7)],
      (x) => interpolate(x!, { scaleFactor: [2, 1, 3] }),
      (x) => nearestRef(x!, [4, 2, 9]),
    );
  });

  test(`interpolate linear reads PyTorch's 1 / scaleFactor when one is given, with gradients (${device})`, () => {
    // 5 * 1.5 -> 7 outputs, read at (o + 0.5) / 1.5 - 0.5, not (o + 0.5) * 5/7 - 0.5
    const linearRef = (x: Nd): Nd => {
      const out = 7,
        from = x.shape[2]!;
      const shape = [...x.shape.slice(0, 2), out];
      return nd(
        shape,
        indices(shape).map(([n, ch, o]) => {
          const s = sourceOf(o!, from, out, false, 1 / 1.5);
          const low = Math.min(Math.floor(s), from - 1),
            high = Math.min(low + 1, from - 1);
          const row = (i: number): number => x.data[ravel([n!, ch!, i], x.shape)]!;
          return (1 - (s - low)) * row(low) + (s - low) * row(high);
        }),
      );
    };
    checkOp(device, [randomNd([2, 3, 5], 8)], (x) => interpolate(x!, { scaleFactor: 1.5, mode: "linear" }), linearRef);
  });

  test(`interpolate trilinear with alignCorners reproduces an affine function at the source points (${device})`, () => {
    const [inSize, outSize] = [
      [2, 3, 4],
      [3, 5, 4],
    ];
    const affine = (z: number, y: number, x: number): number => 0.5 + 2 * z - y + 0.25 * x;
    const grid = indices(inSize).map(([z, y, x]) => affine(z!, y!, x!));
    const expected = indices(outSize).map((o) =>
      affine(...(o.map((v, d) => (v * (inSize[d]! - 1)) / (outSize[d]! - 1)) as [number, number, number])),
    );
    const x = new Tensor(grid, { device, dtype: "float32" }).reshape([1, 1, ...inSize]);
    assertClose(values(interpolate(x, { size: outSize, mode: "trilinear", alignCorners: true })), expected, {
      atol: 1e-5,
    });
  });
}

test("bad transposed convolutions are clear errors naming the shapes", () => {
  const x = Tensor.zeros([1, 4, 5, 5]);
  const expectError = (f: () => unknown, text: string) =>
    assert.throws(f, (e: Error) => e instanceof TsgradError && e.message.includes(text), text);
  expectError(
    () => convTranspose(x, Tensor.zeros([3, 2, 3, 3])),
    "input [1, 4, 5, 5], weight [3, 2, 3, 3]: the weight's first axis must be the input's 4 channels",
  );
  expectError(
    () => convTranspose(x, Tensor.zeros([4, 2, 3])),
    "needs a batch and a channel axis before the weight's 1 spatial axes",
  );
  expectError(() => convTranspose(x, Tensor.zeros([4, 2, 3, 3]), { groups: 3 }), "3 groups must divide the 4 channels");
  expectError(
    () => convTranspose(x, Tensor.zeros([4, 2, 3, 3]), { groups: 2, bias: Tensor.zeros([2]) }),
    "bias [2] must be [4]",
  );
  expectError(() => convTranspose(x, Tensor.zeros([4, 2, 3, 3]), { stride: [2, 0] }), "convTranspose stride");
  expectError(
    () => convTranspose(x, Tensor.zeros([4, 2, 3, 3]), { stride: 2, outputPadding: [0, 2] }),
    "outputPadding 2 must be smaller than the stride 2 or the dilation 1",
  );
  expectError(() => convTranspose(x, Tensor.zeros([4, 2, 3, 3]), { padding: -1 }), "convTranspose padding");
  expectError(
    () => convTranspose(Tensor.zeros([1, 4, 1, 1]), Tensor.zeros([4, 2, 1, 1]), { padding: 1 }),
    "the output would be [-1, -1]",
  );
});

test("bad interpolations are clear errors naming the input", () => {
  const x = Tensor.zeros([1, 2, 3, 4]);
  const expectError = (f: () => unknown, text: string) =>
    assert.throws(f, (e: Error) => e instanceof TsgradError && e.message.includes(text), text);
  expectError(
    () => interpolate(x, { size: [6, 8], scaleFactor: 2 }),
    "input [1, 2, 3, 4]: give exactly one of size and scaleFactor",
  );
  expectError(() => interpolate(x, {}), "give exactly one of size and scaleFactor");
  expectError(() => interpolate(x, { size: [6, 8, 2] }), "output size [6, 8, 2] must be 2 positive integer(s)");
  expectError(() => interpolate(x, { size: [0, 8] }), "output size [0, 8]");
  expectError(() => interpolate(x, { size: [2.5, 8] }), "output size [2.5, 8]");
  expectError(() => interpolate(x, { scaleFactor: [2] }), "scaleFactor [2] must be one positive number or 2");
  expectError(() => interpolate(x, { scaleFactor: -1 }), "scaleFactor -1");
  expectError(
    () => interpolate(x, { scaleFactor: 0.2 }),
    "output size [0, 0] must be 2 positive integer(s) (from scaleFactor 0.2)",
  );
  expectError(() => interpolate(x, { size: 4, mode: "bicubic" as "nearest" }), 'unknown mode "bicubic"');
  expectError(() => interpolate(x, { size: 4, mode: "linear" }), "linear interpolates 1 spatial axes, the input has 2");
  expectError(() => interpolate(x, { size: 4, alignCorners: false }), "alignCorners is only for the linear modes");
  expectError(() => interpolate(Tensor.zeros([3, 4]), { size: 4 }), "needs [batch, channels, ...spatial]");
  expectError(
    () => interpolate(Tensor.zeros([1, 1, 2, 2], { dtype: "int32" }), { size: 4, mode: "bilinear" }),
    "bilinear needs a float input, got int32",
  );
});

test("Tensor.convTranspose2d, Tensor.interpolate and nn.ConvTranspose2d", () => {
  const x = new Tensor(
    [
      [
        [
          [1, 2],
          [3, 4],
        ],
      ],
    ],
    { device: "JS", dtype: "float32" },
  );
  assert.deepEqual(x.interpolate({ scaleFactor: 2 }).tolist(), [
    [
      [
        [1, 1, 2, 2],
        [1, 1, 2, 2],
        [3, 3, 4, 4],
        [3, 3, 4, 4],
      ],
    ],
  ]);
  // a 2x2 kernel of ones at stride 2 copies each input into its own 2x2 block
  const ones = Tensor.ones([1, 1, 2, 2], { device: "JS" });
  assert.deepEqual(x.convTranspose2d(ones, { stride: 2 }).tolist(), x.interpolate({ scaleFactor: 2 }).tolist());
  const layer = new nn.ConvTranspose2d(4, 6, 3, { stride: 2, padding: 1, outputPadding: 1, groups: 2 });
  assert.deepEqual(layer.weight.shape, [4, 3, 3, 3]);
  assert.deepEqual(layer.forward(Tensor.randn([2, 4, 5, 5])).shape, [2, 6, 10, 10]);
  const bound = 1 / Math.sqrt(3 * 9); // PyTorch's fan-in: the weight's second axis times the kernel
  assert.ok(values(layer.weight).every((w) => Math.abs(w) <= bound));
  assert.throws(
    () => new nn.ConvTranspose2d(4, 6, 3, { groups: 4 }),
    /ConvTranspose2d\(4 -> 6\): 4 groups must divide both/,
  );
});
