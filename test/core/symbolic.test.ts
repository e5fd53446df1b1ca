// Index simplification: every rewrite must keep the value of the expression for every value of its
// variables (floor division and modulo). Checked exhaustively on small random expressions.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type Idx,
  coefficientOf,
  iadd,
  iconst,
  idiv,
  imod,
  imul,
  ivar,
  replaceSubexpressions,
  splitAtMultiple,
} from "../../src/shape/symbolic.ts";

/** The value of `e` with variables set from `env`. */
function evaluate(e: Idx, env: ReadonlyMap<string, number>): number {
  switch (e.kind) {
    case "const":
      return e.value;
    case "var":
      return env.get(e.name)!;
    case "sum":
      return e.terms.reduce((s, t) => s + evaluate(t, env), 0);
    case "mul":
      return evaluate(e.a, env) * e.c;
    case "div":
      return Math.floor(evaluate(e.a, env) / e.c);
    case "mod":
      return ((evaluate(e.a, env) % e.c) + e.c) % e.c;
  }
}

/** Deterministic pseudo-random integers. */
function rng(seed: number): (n: number) => number {
  let state = seed >>> 0;
  return (n) => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state % n;
  };
}

const sizes = { x: 7, y: 5, z: 12 } as const;
const vars = Object.entries(sizes).map(([name, size]) => ({ name, size, idx: ivar(name, size) }));

/** Every assignment of the variables. */
function* assignments(): Generator<Map<string, number>> {
  for (let x = 0; x < sizes.x; x++)
    for (let y = 0; y < sizes.y; y++)
      for (let z = 0; z < sizes.z; z++)
        yield new Map([
          ["x", x],
          ["y", y],
          ["z", z],
        ]);
}

test("division, modulo and their recombination keep the value of random index expressions", () => {
  const rand = rng(5);
  const coefficients = [1, 2, 3, 4, 6, 8, 12, 16, 20, 24, 40, -2, -4];
  const divisors = [2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 60];
  for (let trial = 0; trial < 600; trial++) {
    const parts = vars.filter(() => rand(3) > 0).map((v) => imul(v.idx, coefficients[rand(coefficients.length)]!));
    const sum = iadd(...parts, iconst(rand(2) ? rand(30) - 10 : 0));
    const c = divisors[rand(divisors.length)]!;
    const k = [1, 3, 64][rand(3)]!;
    // a merged axis split again, recombined: (s / c) * (c*k) + (s % c) * k
    const recombined = iadd(imul(idiv(sum, c), c * k), imul(imod(sum, c), k));
    // nested: (s / (c*m)) * (m*k) + ((s / c) % m) * k = (s / c) * k
    const m = [2, 3, 5][rand(3)]!;
    const nested = iadd(imul(idiv(sum, c * m), m * k), imul(imod(idiv(sum, c), m), k));
    // ... and not when the coefficients do not match
    const mismatched = iadd(imul(idiv(sum, c), c * k + 1), imul(imod(sum, c), k));
    for (const env of assignments()) {
      const s = evaluate(sum, env);
      assert.equal(evaluate(idiv(sum, c), env), Math.floor(s / c), `floor(${sum.key} / ${c}) at ${[...env]}`);
      assert.equal(evaluate(imod(sum, c), env), ((s % c) + c) % c, `${sum.key} % ${c} at ${[...env]}`);
      assert.equal(evaluate(recombined, env), s * k, `${recombined.key} at ${[...env]}`);
      assert.equal(evaluate(nested, env), Math.floor(s / c) * k, `${nested.key} at ${[...env]}`);
      assert.equal(
        evaluate(mismatched, env),
        Math.floor(s / c) * (c * k + 1) + (((s % c) + c) % c) * k,
        `${mismatched.key} at ${[...env]}`,
      );
    }
  }
});

test("a row index split and merged again is the plain index (what merging two loops needs)", () => {
  // rows of 16 tiles over 160 = 8 x 20 rows of 64: ((i*16 + c) / 20) * 1280 + ((i*16 + c) % 20) * 64
  const i = ivar("i", 10);
  for (const c of [0, 1, 15]) {
    const row = iadd(imul(i, 16), iconst(c));
    const split = iadd(imul(idiv(row, 20), 1280), imul(imod(row, 20), 64));
    assert.equal(split.key, iadd(imul(i, 1024), iconst(c * 64)).key);
  }
  // a flat output index over [8, 20, 1000] read as [160, 1000]: the batch and row come back without division
  const [j, col] = [ivar("j", 10), ivar("col", 1000)];
  const flat = iadd(imul(j, 16000), col);
  assert.equal(idiv(flat, 20000).key, idiv(imul(j, 4), 5).key);
});

test("coefficientOf: a variable's step in a linear index, 0 where absent, undefined under a division or modulo", () => {
  const [i, j, k] = [ivar("i", 64), ivar("j", 48), ivar("k", 512)];
  // W^T viewed as [48, 512] from a [512, 48] buffer: j steps by 1, k by 48
  const index = iadd(imul(k, 48), j, iconst(7));
  assert.equal(coefficientOf(index, "j"), 1);
  assert.equal(coefficientOf(index, "k"), 48);
  assert.equal(coefficientOf(index, "i"), 0);
  assert.equal(coefficientOf(imul(iadd(imul(k, 3), j), 512), "k"), 1536);
  assert.equal(coefficientOf(iadd(imod(i, 8), j), "i"), undefined);
  assert.equal(coefficientOf(iadd(idiv(i, 8), j), "j"), 1);
});

test("splitAtMultiple: a = q*c + r with each coefficient split at its nearest multiple; replaceSubexpressions swaps in values and simplifies", () => {
  let seed = 7;
  const rand = (n: number): number => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
  for (let trial = 0; trial < 200; trial++) {
    const sizes = [1 + rand(40), 1 + rand(5), 1 + rand(9)];
    const vars = sizes.map((size, i) => ivar(`v${i}`, size));
    const c = 2 + rand(60);
    const a = iadd(...vars.map((v) => imul(v, rand(3 * c) - c)), iconst(rand(200) - 100));
    const { q, r } = splitAtMultiple(a, c);
    for (let k = 0; k < 10; k++) {
      const env = new Map(sizes.map((size, i) => [`v${i}`, rand(size)]));
      assert.equal(evaluate(q, env) * c + evaluate(r, env), evaluate(a, env));
    }
  }
  // the skewed rows of a sliding window's gradient: (i + 34 j) = 35 j + (i - j)
  const [i, j] = [ivar("i", 34), ivar("j", 3)];
  const { q, r } = splitAtMultiple(iadd(i, imul(j, 34)), 35);
  assert.equal(q.key, j.key);
  assert.equal(r.key, iadd(i, imul(j, -1)).key);
  // replacing (i + 34 j) % 35 by a value in [0, 31] simplifies what divides it further
  const m = imod(iadd(i, imul(j, 34)), 35);
  const e = idiv(iadd(m, imul(ivar("n", 8), 32)), 32);
  assert.equal(replaceSubexpressions(e, new Map([[m.key, ivar("h", 32)]])).key, "n");
});
