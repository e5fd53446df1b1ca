// The one numeric closeness check for tests, in numpy's sense: |actual - expected| <= atol + rtol * |expected|.
import assert from "node:assert/strict";

/** A number, or a flat or nested array of numbers (plain or typed). */
export type Numeric = number | ArrayLike<Numeric>;

export interface CloseOptions {
  /** Absolute tolerance. */
  atol?: number;
  /** Relative tolerance, a fraction of |expected|. */
  rtol?: number;
  /** Whether NaN matches NaN (numpy's `equal_nan`); infinities always match their own sign. */
  equalNan?: boolean;
  /** What is compared, the start of the failure message. */
  what?: string;
}

type Tolerance = Required<Omit<CloseOptions, "what">>;

/**
 * Fails on the first element out of tolerance, naming its index, both values and the bound.
 * `assertClose(values(x.grad!), [1, 2], { atol: 1e-6, rtol: 0, what: "gradient" })`
 */
export function assertClose(
  actual: Numeric,
  expected: Numeric,
  { atol = 1e-5, rtol = 1e-4, equalNan = false, what = "" }: CloseOptions = {},
): void {
  const difference = firstDifference(actual, expected, { atol, rtol, equalNan });
  if (!difference) return;
  const place = difference.at.length ? `element [${difference.at.join(", ")}] ` : "";
  assert.fail(`${what ? `${what}: ` : ""}${place}${difference.text}`);
}

interface Difference {
  at: number[];
  text: string;
}

function firstDifference(actual: Numeric, expected: Numeric, tolerance: Tolerance): Difference | undefined {
  if (typeof actual === "number" && typeof expected === "number") {
    return isClose(actual, expected, tolerance)
      ? undefined
      : { at: [], text: outOfTolerance(actual, expected, tolerance) };
  }
  if (typeof actual === "number" || typeof expected === "number")
    return { at: [], text: `is ${show(actual)}, expected ${show(expected)}` };
  if (actual.length !== expected.length)
    return { at: [], text: `has ${actual.length} values, expected ${expected.length}` };
  for (let i = 0; i < expected.length; i++) {
    const difference = firstDifference(actual[i]!, expected[i]!, tolerance);
    if (difference) return { at: [i, ...difference.at], text: difference.text };
  }
  return undefined;
}

function isClose(actual: number, expected: number, { atol, rtol, equalNan }: Tolerance): boolean {
  if (actual === expected) return true;
  if (Number.isNaN(actual) && Number.isNaN(expected)) return equalNan;
  if (!Number.isFinite(actual) || !Number.isFinite(expected)) return false;
  return Math.abs(actual - expected) <= atol + rtol * Math.abs(expected);
}

function outOfTolerance(actual: number, expected: number, { atol, rtol }: Tolerance): string {
  if (Number.isNaN(actual) && Number.isNaN(expected)) return "is NaN, expected NaN (equal only with equalNan)";
  if (!Number.isFinite(actual) || !Number.isFinite(expected)) return `is ${actual}, expected ${expected}`;
  const bound = atol + rtol * Math.abs(expected);
  return `is ${actual}, expected ${expected}: |difference| ${brief(Math.abs(actual - expected))} > atol ${atol} + rtol ${rtol} * |expected| = ${brief(bound)}`;
}

const brief = (x: number): string => `${Number(x.toPrecision(3))}`;

const show = (value: Numeric): string => (typeof value === "number" ? `${value}` : `an array of ${value.length}`);
