// A tiny float64 ndarray: the plain reference that op tests compare tsgrad against.
export interface Nd {
  shape: number[];
  data: number[];
}

export const nd = (shape: number[], data: number[]): Nd => ({ shape, data });
const size = (shape: number[]): number => shape.reduce((a, b) => a * b, 1);
const strides = (shape: number[]): number[] => shape.map((_, i) => size(shape.slice(i + 1)));

export function unravel(flat: number, shape: number[]): number[] {
  return strides(shape).map((s, i) => Math.floor(flat / s) % shape[i]!);
}
export const ravel = (idx: number[], shape: number[]): number =>
  idx.reduce((acc, v, i) => acc + v * strides(shape)[i]!, 0);

/** Deterministic pseudo-random data in [lo, hi) (an LCG: the tests do not depend on tsgrad's RNG). */
export function randomNd(shape: number[], seed: number, lo = -1, hi = 1): Nd {
  let state = seed * 7919 + 17;
  const data = Array.from({ length: size(shape) }, () => {
    state = (state * 1103515245 + 12345) % 2147483648;
    return lo + (hi - lo) * (state / 2147483648);
  });
  return nd(shape, data);
}

export const map = (a: Nd, f: (x: number) => number): Nd => nd(a.shape, a.data.map(f));

export function broadcastShape(a: number[], b: number[]): number[] {
  const n = Math.max(a.length, b.length);
  return Array.from({ length: n }, (_, i) => Math.max(a[a.length - n + i] ?? 1, b[b.length - n + i] ?? 1));
}

export function at(a: Nd, idx: number[]): number {
  // broadcasting read: trailing-aligned, size-1 axes read index 0
  const off = idx.length - a.shape.length;
  return a.data[
    ravel(
      a.shape.map((s, i) => (s === 1 ? 0 : idx[i + off]!)),
      a.shape,
    )
  ]!;
}

export function zip(a: Nd, b: Nd, f: (x: number, y: number) => number): Nd {
  const shape = broadcastShape(a.shape, b.shape);
  return nd(
    shape,
    Array.from({ length: size(shape) }, (_, i) => {
      const idx = unravel(i, shape);
      return f(at(a, idx), at(b, idx));
    }),
  );
}

export function reduce(
  a: Nd,
  axes: number[],
  f: (acc: number, x: number) => number,
  init: number,
  keepdim = false,
): Nd {
  const outShape = a.shape.map((s, i) => (axes.includes(i) ? 1 : s));
  const out = new Array(size(outShape)).fill(init);
  a.data.forEach((x, i) => {
    const idx = unravel(i, a.shape).map((v, d) => (axes.includes(d) ? 0 : v));
    const o = ravel(idx, outShape);
    out[o] = f(out[o], x);
  });
  return nd(keepdim ? outShape : a.shape.filter((_, i) => !axes.includes(i)), out);
}

export function permute(a: Nd, order: number[]): Nd {
  const shape = order.map((o) => a.shape[o]!);
  return nd(
    shape,
    Array.from({ length: size(shape) }, (_, i) => {
      const idx = unravel(i, shape);
      const src = new Array(order.length);
      order.forEach((o, d) => (src[o] = idx[d]));
      return a.data[ravel(src, a.shape)]!;
    }),
  );
}

export function matmul(a: Nd, b: Nd): Nd {
  const [m, k] = a.shape as [number, number];
  const n = b.shape[1]!;
  const out = new Array(m * n).fill(0);
  for (let i = 0; i < m; i++)
    for (let j = 0; j < n; j++) for (let p = 0; p < k; p++) out[i * n + j] += a.data[i * k + p]! * b.data[p * n + j]!;
  return nd([m, n], out);
}

export function slice(a: Nd, bounds: [number, number][]): Nd {
  const shape = bounds.map(([s, e]) => e - s);
  return nd(
    shape,
    Array.from(
      { length: size(shape) },
      (_, i) =>
        a.data[
          ravel(
            unravel(i, shape).map((v, d) => v + bounds[d]![0]),
            a.shape,
          )
        ]!,
    ),
  );
}

export function pad(a: Nd, pads: [number, number][], value = 0): Nd {
  const shape = a.shape.map((s, i) => s + pads[i]![0] + pads[i]![1]);
  return nd(
    shape,
    Array.from({ length: size(shape) }, (_, i) => {
      const idx = unravel(i, shape).map((v, d) => v - pads[d]![0]);
      return idx.every((v, d) => v >= 0 && v < a.shape[d]!) ? a.data[ravel(idx, a.shape)]! : value;
    }),
  );
}

export function flip(a: Nd, axes: number[]): Nd {
  return nd(
    a.shape,
    Array.from(
      { length: a.data.length },
      (_, i) =>
        a.data[
          ravel(
            unravel(i, a.shape).map((v, d) => (axes.includes(d) ? a.shape[d]! - 1 - v : v)),
            a.shape,
          )
        ]!,
    ),
  );
}

export function softmax(a: Nd): Nd {
  const last = a.shape[a.shape.length - 1]!;
  const out = [...a.data];
  for (let r = 0; r < a.data.length / last; r++) {
    const row = a.data.slice(r * last, (r + 1) * last);
    const m = Math.max(...row);
    const e = row.map((x) => Math.exp(x - m));
    const s = e.reduce((x, y) => x + y, 0);
    e.forEach((v, j) => (out[r * last + j] = v / s));
  }
  return nd(a.shape, out);
}

/** erf to double precision (Abramowitz-Stegun 7.1.28 is not enough for gradients; use a series/continued fraction). */
export function erf(x: number): number {
  const t = Math.abs(x);
  if (t < 3) {
    let sum = t,
      term = t;
    for (let n = 1; n < 200; n++) {
      term *= (-t * t) / n;
      sum += term / (2 * n + 1);
      if (Math.abs(term) < 1e-17) break;
    }
    return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
  }
  return Math.sign(x) * (1 - (Math.exp(-t * t) / (t * Math.sqrt(Math.PI))) * (1 - 1 / (2 * t * t)));
}
