// einsum (src/tensor/einsum.ts) against a float64 einsum by its definition (a loop over every assignment of the
// letters), forward and gradients, on every test device; that a contraction of two operands is a matmul; and its
// errors.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { Tensor, TsgradError, UOp } from "../../src/index.ts";
import { einsum } from "../../src/tensor/index.ts";
import { recordItems } from "../../src/engine/realize.ts";
import { isMatmul } from "../../src/uop.ts";
import { testDevices } from "../devices.ts";
import { checkOp, fromNd } from "./harness.ts";
import { type Nd, nd, randomNd, ravel, unravel } from "./ref.ts";

const size = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);

/**
 * out[output letters] = sum over the other letters of the product of every operand at its letters. Axes under
 * "..." are right-aligned and named by digits; an axis of size 1 reads index 0 (broadcasting).
 */
function referenceEinsum(formula: string, ...xs: Nd[]): Nd {
  const [lhs, rhs] = formula.replace(/\s/g, "").split("->") as [string, string | undefined];
  const spans = lhs.split(",").map((term, i) => (term.includes("...") ? xs[i]!.shape.length - (term.length - 3) : 0));
  const widest = Math.max(0, ...spans);
  const ellipsis = (span: number): string[] => Array.from({ length: span }, (_, j) => String(widest - span + j));
  const expand = (term: string, span: number): string[] =>
    term.split("...").flatMap((part, k) => (k === 1 ? [...ellipsis(span), ...part] : [...part]));
  const labels = lhs.split(",").map((term, i) => expand(term, spans[i]!));
  const letters = lhs.replace(/[^a-zA-Z]/g, "");
  const once = [...new Set(letters)].filter((c) => letters.split(c).length === 2).sort();
  const out = rhs === undefined ? [...ellipsis(widest), ...once] : expand(rhs, widest);
  const sizes = new Map<string, number>();
  labels.forEach((ls, i) => ls.forEach((l, d) => sizes.set(l, Math.max(sizes.get(l) ?? 1, xs[i]!.shape[d]!))));
  const all = [...sizes.keys()];
  const allShape = all.map((l) => sizes.get(l)!);
  const outShape = out.map((l) => sizes.get(l)!);
  const result = new Array<number>(size(outShape)).fill(0);
  for (let flat = 0; flat < size(allShape); flat++) {
    const idx = unravel(flat, allShape);
    const at = (l: string): number => idx[all.indexOf(l)]!;
    const term = xs.reduce(
      (p, x, i) =>
        p *
        x.data[
          ravel(
            labels[i]!.map((l, d) => (x.shape[d] === 1 ? 0 : at(l))),
            x.shape,
          )
        ]!,
      1,
    );
    result[ravel(out.map(at), outShape)] += term;
  }
  return nd(outShape, result);
}

interface Case {
  name: string;
  formula: string;
  shapes: number[][];
}

const cases: Case[] = [
  {
    name: "matmul",
    formula: "ij,jk->ik",
    shapes: [
      [3, 4],
      [4, 5],
    ],
  },
  {
    name: "matmul with a transposed right operand",
    formula: "ij,kj->ik",
    shapes: [
      [3, 4],
      [5, 4],
    ],
  },
  {
    name: "batched matmul",
    formula: "bij,bjk->bik",
    shapes: [
      [2, 3, 4],
      [2, 4, 5],
    ],
  },
  {
    name: "batched matrix-vector",
    formula: "bij,bj->bi",
    shapes: [
      [2, 3, 4],
      [2, 4],
    ],
  },
  { name: "outer product", formula: "i,j->ij", shapes: [[3], [4]] },
  { name: "dot product", formula: "i,i->", shapes: [[5], [5]] },
  { name: "transpose", formula: "ij->ji", shapes: [[3, 4]] },
  { name: "permute and sum an axis", formula: "ijk->ki", shapes: [[2, 3, 4]] },
  { name: "trace (implicit: a repeated letter is summed)", formula: "ii", shapes: [[4, 4]] },
  { name: "diagonal", formula: "ii->i", shapes: [[4, 4]] },
  { name: "diagonal of a batch, the repeated axes apart", formula: "ibi->bi", shapes: [[3, 2, 3]] },
  { name: "diagonal of three axes", formula: "iii->i", shapes: [[3, 3, 3]] },
  {
    name: "diagonal times a matrix",
    formula: "ii,ij->j",
    shapes: [
      [3, 3],
      [3, 4],
    ],
  },
  { name: "sum of all", formula: "ij->", shapes: [[3, 4]] },
  {
    name: "implicit output is the letters used once, sorted",
    formula: "ij,jk",
    shapes: [
      [3, 4],
      [4, 5],
    ],
  },
  { name: "implicit output sorts: 'ji' is the transpose", formula: "ji", shapes: [[3, 4]] },
  { name: "implicit output puts uppercase before lowercase", formula: "aB", shapes: [[3, 4]] },
  {
    name: "ellipsis broadcasts batch axes of size 1 and of different ranks",
    formula: "...ij,...jk->...ik",
    shapes: [
      [2, 1, 3, 4],
      [3, 4, 5],
    ],
  },
  {
    name: "implicit output keeps the ellipsis axes first",
    formula: "...ij,...jk",
    shapes: [
      [2, 3, 4],
      [4, 5],
    ],
  },
  {
    name: "ellipsis in the middle of a term",
    formula: "i...j,j...->...i",
    shapes: [
      [3, 2, 4],
      [4, 2],
    ],
  },
  { name: "an ellipsis covering no axes may be left out of the output", formula: "...ij->j", shapes: [[3, 4]] },
  {
    name: "a size-1 lettered axis broadcasts against a larger one",
    formula: "bij,bjk->bik",
    shapes: [
      [1, 3, 1],
      [2, 4, 5],
    ],
  },
  {
    name: "whitespace is ignored",
    formula: " ij , jk -> ik ",
    shapes: [
      [3, 4],
      [4, 5],
    ],
  },
  {
    name: "three operands",
    formula: "ij,jk,kl->il",
    shapes: [
      [2, 3],
      [3, 4],
      [4, 5],
    ],
  },
  {
    name: "bilinear",
    formula: "bn,anm,bm->ba",
    shapes: [
      [2, 3],
      [4, 3, 5],
      [2, 5],
    ],
  },
  {
    name: "four operands, a letter private to one of them",
    formula: "ai,ij,jk,kz->a",
    shapes: [
      [2, 3],
      [3, 4],
      [4, 2],
      [2, 3],
    ],
  },
];

for (const device of testDevices()) {
  describe(`einsum on ${device}`, () => {
    cases.forEach(({ name, formula, shapes }, c) => {
      test(`${name}: "${formula}" matches the definition, forward and gradients`, () => {
        const inputs = shapes.map((shape, i) => randomNd(shape, 10 * c + i + 1));
        checkOp(
          device,
          inputs,
          (...xs) => einsum(formula, ...xs),
          (...xs) => referenceEinsum(formula, ...xs),
        );
      });
    });
  });
}

/** The REDUCE nodes under a tensor. */
const reduces = (t: Tensor): UOp[] => UOp.toposort([t.node as UOp]).filter((u) => u.op === "REDUCE");

test('"ij,jk->ik" builds the very graph a.matmul(b) builds', () => {
  const [a, b] = [fromNd(randomNd([8, 16], 1), "JS"), fromNd(randomNd([16, 4], 2), "JS")];
  assert.equal(einsum("ij,jk->ik", a, b).node, a.matmul(b).node);
  assert.equal(Tensor.einsum("ij,jk->ik", a, b).node, a.matmul(b).node, "the Tensor.einsum entry is the same function");
});

for (const [formula, shapes] of [
  [
    "bij,bjk->bik",
    [
      [3, 8, 16],
      [3, 16, 4],
    ],
  ],
  [
    "ik,jk->ij",
    [
      [8, 16],
      [4, 16],
    ],
  ],
  [
    "bqhd,bkhd->bhqk",
    [
      [2, 8, 3, 16],
      [2, 8, 3, 16],
    ],
  ],
  [
    "ncl,flc->nf",
    [
      [8, 4, 6],
      [5, 6, 4],
    ],
  ],
] as const) {
  test(`"${formula}" is one matmul kernel, as the matmul it is`, () => {
    const [a, b] = shapes.map((shape, i) => fromNd(randomNd([...shape], i + 1), "JS").realize()) as [Tensor, Tensor];
    const out = einsum(formula, a, b);
    assert.deepEqual(reduces(out).map(isMatmul), [true]);
    // several contracted letters are summed as one axis, as a matmul's K (the kernels tile one sum axis)
    assert.deepEqual(
      reduces(out).map((r) => (r.arg as { axes: number[] }).axes.length),
      [1],
    );
    const { items } = recordItems(() => out.realize());
    const kernels = items.flatMap((item) => (item.kind === "kernel" ? [item.kernel.name] : []));
    // the reduce, and at most a packed copy of an operand (host backends lay a matmul's operand out in panels)
    assert.equal(kernels.filter((name) => name.startsWith("r_")).length, 1, kernels.join(", "));
    assert.ok(kernels.length <= 2, kernels.join(", "));
  });
}

test("bad formulas are clear errors naming the formula and the problem", () => {
  const [m34, m45, m55, v3] = [[3, 4], [4, 5], [5, 5], [3]].map((shape) => Tensor.zeros(shape, { device: "JS" })) as [
    Tensor,
    Tensor,
    Tensor,
    Tensor,
  ];
  const throwsNaming = (fn: () => unknown, ...parts: string[]): void => {
    assert.throws(fn, (e: unknown) => {
      assert.ok(e instanceof TsgradError, `expected a TsgradError, got ${e}`);
      for (const p of parts)
        assert.ok(e.message.includes(p), `message ${JSON.stringify(e.message)} does not name ${p}`);
      return true;
    });
  };
  throwsNaming(() => einsum("ij,jk->ik", m34), `einsum "ij,jk->ik"`, "2 input terms but 1 operand");
  throwsNaming(() => einsum("ij->i", m34, m45), "1 input term but 2 operands");
  throwsNaming(() => einsum("ijk->i", m34), `term "ijk" names 3 axes`, "operand 0 has shape [3, 4]");
  throwsNaming(() => einsum("ij,j...k->ik", m34, v3), "at least 2 axes", "operand 1 has shape [3]");
  throwsNaming(
    () => einsum("ij,jk->ik", m34, m55),
    "sizes of 'j' disagree",
    "4 in operand 0 [3, 4]",
    "5 in operand 1 [5, 5]",
  );
  throwsNaming(
    () => einsum("...i,...i->...", Tensor.zeros([2, 3], { device: "JS" }), Tensor.zeros([4, 3], { device: "JS" })),
    `axis 0 under "..."`,
    "2 in operand 0",
    "4 in operand 1",
  );
  throwsNaming(() => einsum("ii->i", m34), "operand 0 [3, 4] repeats 'i'", "sizes 3 and 4");
  throwsNaming(() => einsum("ij->ik", m34), "output letter 'k' is in no input term");
  throwsNaming(() => einsum("ij->ii", m34), "output letter 'i' appears more than once");
  throwsNaming(() => einsum("i1->i", m34), "invalid character '1' in term \"i1\"");
  throwsNaming(() => einsum("ij.->i", m34), "invalid character '.'");
  throwsNaming(() => einsum("ij-i", m34), "invalid character '-'");
  throwsNaming(() => einsum("ij->i->j", m34), "'->' appears more than once");
  throwsNaming(() => einsum("...i->i", m34), `"..." covers 1 axis of the inputs; the output must place them`);
  throwsNaming(() => einsum("...i...->i", m34), `term "...i..." has more than one "..."`);
});
