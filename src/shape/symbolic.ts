// Integer index expressions over loop variables, simplified with their ranges so that
// movement ops (reshape, permute, expand, pad, shrink, flip) cost nothing but index math.

export type Idx = IConst | IVar | ISum | IMul | IDiv | IMod;
interface Base {
  readonly min: number;
  readonly max: number;
  readonly key: string;
}
export interface IConst extends Base {
  readonly kind: "const";
  readonly value: number;
}
export interface IVar extends Base {
  readonly kind: "var";
  readonly name: string;
}
export interface ISum extends Base {
  readonly kind: "sum";
  readonly terms: readonly Idx[];
}
export interface IMul extends Base {
  readonly kind: "mul";
  readonly a: Idx;
  readonly c: number;
}
export interface IDiv extends Base {
  readonly kind: "div";
  readonly a: Idx;
  readonly c: number;
}
export interface IMod extends Base {
  readonly kind: "mod";
  readonly a: Idx;
  readonly c: number;
}

export const iconst = (value: number): IConst => ({ kind: "const", value, min: value, max: value, key: String(value) });

/** A loop variable taking values 0..size-1. */
export const ivar = (name: string, size: number): Idx =>
  size === 1 ? iconst(0) : { kind: "var", name, min: 0, max: size - 1, key: name };

/** A value only known when the kernel runs (a loaded integer held in local `name`), within [min, max]. */
export const iruntime = (name: string, min: number, max: number): Idx => ({ kind: "var", name, min, max, key: name });

export function iadd(...parts: Idx[]): Idx {
  const flat: Idx[] = [];
  for (const p of parts) p.kind === "sum" ? flat.push(...p.terms) : flat.push(p);
  // combine like terms: c1*x + c2*x = (c1+c2)*x
  const coeffs = new Map<string, { term: Idx; c: number }>();
  let constant = 0;
  for (const p of flat) {
    if (p.kind === "const") {
      constant += p.value;
      continue;
    }
    const [term, c] = p.kind === "mul" ? [p.a, p.c] : [p, 1];
    const entry = coeffs.get(term.key);
    entry ? (entry.c += c) : coeffs.set(term.key, { term, c });
  }
  // (x / m) * (m*k) + (x % m) * k = x * k (floor division and modulo by m > 0): a merged axis split again
  // (x / m is in its simplest form: (y / c) / m is y / (c*m))
  for (const [key, mod] of coeffs) {
    if (mod.term.kind !== "mod" || mod.c === 0) continue;
    const quotient = idiv(mod.term.a, mod.term.c);
    const div = coeffs.get(quotient.key);
    if (!div || div.c !== mod.c * mod.term.c) continue;
    coeffs.delete(key);
    coeffs.delete(quotient.key);
    return iadd(...[...coeffs.values()].map(({ term, c }) => imul(term, c)), imul(mod.term.a, mod.c), iconst(constant));
  }
  const terms: Idx[] = [];
  for (const { term, c } of coeffs.values()) if (c !== 0) terms.push(imul(term, c));
  terms.sort((x, y) => (x.key < y.key ? -1 : x.key > y.key ? 1 : 0));
  if (constant !== 0 || terms.length === 0) terms.push(iconst(constant));
  if (terms.length === 1) return terms[0]!;
  return {
    kind: "sum",
    terms,
    min: terms.reduce((s, t) => s + t.min, 0),
    max: terms.reduce((s, t) => s + t.max, 0),
    key: `(${terms.map((t) => t.key).join("+")})`,
  };
}

export function imul(a: Idx, c: number): Idx {
  if (c === 0) return iconst(0);
  if (c === 1) return a;
  if (a.kind === "const") return iconst(a.value * c);
  if (a.kind === "mul") return imul(a.a, a.c * c);
  if (a.kind === "sum") return iadd(...a.terms.map((t) => imul(t, c)));
  const [min, max] = c > 0 ? [a.min * c, a.max * c] : [a.max * c, a.min * c];
  return { kind: "mul", a, c, min, max, key: `${a.key}*${c}` };
}

/** Floor division by a positive constant. */
export function idiv(a: Idx, c: number): Idx {
  if (!(c > 0)) throw new RangeError(`idiv by ${c}: index arithmetic divides by positive strides only`);
  if (c === 1) return a;
  if (a.kind === "const") return iconst(Math.floor(a.value / c));
  if (a.min >= 0 && a.max < c) return iconst(0);
  if (a.kind === "div") return idiv(a.a, a.c * c);
  if (a.kind === "mul" && a.c % c === 0) return imul(a.a, a.c / c);
  if (a.kind === "mul" && a.c > 0 && c % a.c === 0) return idiv(a.a, c / a.c);
  if (a.kind === "sum") {
    // floor((q*c + r) / c) = q + floor(r / c) for integer q
    const whole: Idx[] = [];
    const rest: Idx[] = [];
    for (const t of a.terms) {
      if (t.kind === "mul" && t.c % c === 0) whole.push(imul(t.a, t.c / c));
      else if (t.kind === "const") {
        // the constant's multiple of c comes out whole, its remainder stays
        const remainder = ((t.value % c) + c) % c;
        if (t.value !== remainder) whole.push(iconst((t.value - remainder) / c));
        rest.push(iconst(remainder));
      } else rest.push(t);
    }
    if (whole.length > 0) return iadd(...whole, idiv(iadd(...rest), c));
  }
  const split = commonFactor(a, c);
  if (split) return idiv(split.scaled, c / split.g);
  return { kind: "div", a, c, min: Math.floor(a.min / c), max: Math.floor(a.max / c), key: `(${a.key}/${c})` };
}

/** Floor modulo by a positive constant. */
export function imod(a: Idx, c: number): Idx {
  if (!(c > 0)) throw new RangeError(`imod by ${c}: index arithmetic takes positive moduli only`);
  if (c === 1) return iconst(0);
  if (a.kind === "const") return iconst(((a.value % c) + c) % c);
  if (a.min >= 0 && a.max < c) return a;
  if (a.kind === "mul" && a.c % c === 0) return iconst(0);
  if (a.kind === "mod" && a.c % c === 0) return imod(a.a, c);
  if (a.kind === "sum") {
    const rest = a.terms
      .filter((t) => !(t.kind === "mul" && t.c % c === 0))
      .map((t) => (t.kind === "const" ? iconst(((t.value % c) + c) % c) : t));
    const changed =
      rest.length < a.terms.length || a.terms.some((t) => t.kind === "const" && (t.value < 0 || t.value >= c));
    if (changed) return imod(iadd(...rest), c);
  }
  const split = commonFactor(a, c);
  if (split) return iadd(imul(imod(split.scaled, c / split.g), split.g), split.small);
  const [min, max] = a.min >= 0 ? [0, Math.min(c - 1, a.max)] : [0, c - 1];
  return { kind: "mod", a, c, min, max, key: `(${a.key}%${c})` };
}

/**
 * A sum as g*y + r with g > 1 dividing c and 0 <= r < g: then floor(sum / c) = floor(y / (c/g)) and
 * sum % c = (y % (c/g))*g + r (an index into rows of g, divided by a multiple of the row).
 */
function commonFactor(a: Idx, c: number): { g: number; scaled: Idx; small: Idx } | undefined {
  if (a.kind !== "sum" && a.kind !== "mul") return undefined;
  const terms = a.kind === "sum" ? a.terms : [a];
  const gcd = (x: number, y: number): number => (y === 0 ? Math.abs(x) : gcd(y, x % y));
  let best: { g: number; scaled: Idx; small: Idx } | undefined;
  // try each term's coefficient's common factor with c; the terms it does not divide must stay below it
  for (const t of terms) {
    const g = gcd(t.kind === "mul" ? t.c : 1, c);
    if (g <= 1 || (best && best.g >= g)) continue;
    // multiples of g (a constant's multiple of g included) over g, and the rest, which must stay in [0, g)
    const scaled: Idx[] = [];
    const rest: Idx[] = [];
    for (const u of terms) {
      if (u.kind === "mul" && u.c % g === 0) scaled.push(imul(u.a, u.c / g));
      else if (u.kind === "const") {
        const r = ((u.value % g) + g) % g;
        scaled.push(iconst((u.value - r) / g));
        rest.push(iconst(r));
      } else rest.push(u);
    }
    const small = iadd(...rest);
    if (small.min < 0 || small.max >= g) continue;
    best = { g, scaled: iadd(...scaled), small };
  }
  return best;
}

/** lo <= expr < hi; a list of these is a validity condition (all must hold). */
export interface Bound {
  readonly expr: Idx;
  readonly lo: number;
  readonly hi: number;
}

/** Adds a bound to a condition, dropping bounds that the ranges already prove. `null` means never valid. */
export function andBound(cond: readonly Bound[] | null, expr: Idx, lo: number, hi: number): Bound[] | null {
  if (cond === null) return null;
  if (expr.min >= lo && expr.max < hi) return [...cond];
  if (expr.max < lo || expr.min >= hi) return null;
  return [...cond, { expr, lo, hi }];
}

export const condKey = (cond: readonly Bound[] | null): string =>
  cond === null ? "never" : cond.map((b) => `${b.lo}<=${b.expr.key}<${b.hi}`).join("&");

/** Flat index of a row-major array of `shape` at `idx`. */
export function flatIndex(idx: readonly Idx[], shape: readonly number[]): Idx {
  let stride = 1;
  const terms: Idx[] = [];
  for (let d = shape.length - 1; d >= 0; d--) {
    terms.push(imul(idx[d]!, stride));
    stride *= shape[d]!;
  }
  return iadd(...terms);
}

/** The per-axis indices of a row-major array of `shape` at flat index `flat`. */
export function unflatIndex(flat: Idx, shape: readonly number[]): Idx[] {
  // a shape with no elements has no valid index: any will do, and dividing by its 0 strides would not end
  if (shape.includes(0)) return shape.map(() => iconst(0));
  const out = new Array<Idx>(shape.length);
  let stride = 1;
  for (let d = shape.length - 1; d >= 0; d--) {
    out[d] = shape[d] === 1 ? iconst(0) : imod(idiv(flat, stride), shape[d]!);
    stride *= shape[d]!;
  }
  return out;
}

/** `e` with every read of variable `name` replaced by `by` (then simplified). */
export function substitute(e: Idx, name: string, by: Idx): Idx {
  switch (e.kind) {
    case "const":
      return e;
    case "var":
      return e.name === name ? by : e;
    case "sum":
      return iadd(...e.terms.map((t) => substitute(t, name, by)));
    case "mul":
      return imul(substitute(e.a, name, by), e.c);
    case "div":
      return idiv(substitute(e.a, name, by), e.c);
    case "mod":
      return imod(substitute(e.a, name, by), e.c);
  }
}

/** `e` with each subexpression whose key `by` holds replaced by its value there (then simplified). */
export function replaceSubexpressions(e: Idx, by: ReadonlyMap<string, Idx>): Idx {
  const hit = by.get(e.key);
  if (hit) return hit;
  switch (e.kind) {
    case "const":
    case "var":
      return e;
    case "sum":
      return iadd(...e.terms.map((t) => replaceSubexpressions(t, by)));
    case "mul":
      return imul(replaceSubexpressions(e.a, by), e.c);
    case "div":
      return idiv(replaceSubexpressions(e.a, by), e.c);
    case "mod":
      return imod(replaceSubexpressions(e.a, by), e.c);
  }
}

/**
 * `a` as q*c + r, each term's coefficient split at the multiple of c nearest it (the constant at the one
 * below): where -c <= r < c, floor(a / c) is q (r >= 0) or q - 1 (r < 0).
 */
export function splitAtMultiple(a: Idx, c: number): { q: Idx; r: Idx } {
  const qs: Idx[] = [],
    rs: Idx[] = [];
  for (const t of a.kind === "sum" ? a.terms : [a]) {
    if (t.kind === "const") {
      const rest = ((t.value % c) + c) % c;
      qs.push(iconst((t.value - rest) / c));
      rs.push(iconst(rest));
      continue;
    }
    const [base, coefficient] = t.kind === "mul" ? [t.a, t.c] : [t, 1];
    let rest = ((coefficient % c) + c) % c;
    if (rest > c / 2) rest -= c;
    qs.push(imul(base, (coefficient - rest) / c));
    rs.push(imul(base, rest));
  }
  return { q: iadd(...qs), r: iadd(...rs) };
}

/** The variables an expression reads. */
export function varsOf(e: Idx, into = new Set<string>()): Set<string> {
  switch (e.kind) {
    case "const":
      break;
    case "var":
      into.add(e.name);
      break;
    case "sum":
      e.terms.forEach((t) => varsOf(t, into));
      break;
    default:
      varsOf(e.a, into);
  }
  return into;
}

/**
 * How far `e` steps as variable `name` steps by one, where `e` is linear in it (0 where `e` does not read it);
 * undefined where `name` sits under a division or modulo.
 */
export function coefficientOf(e: Idx, name: string): number | undefined {
  switch (e.kind) {
    case "const":
      return 0;
    case "var":
      return e.name === name ? 1 : 0;
    case "sum": {
      let total = 0;
      for (const t of e.terms) {
        const c = coefficientOf(t, name);
        if (c === undefined) return undefined;
        total += c;
      }
      return total;
    }
    case "mul": {
      const c = coefficientOf(e.a, name);
      return c === undefined ? undefined : c * e.c;
    }
    default:
      return varsOf(e).has(name) ? undefined : 0;
  }
}

/**
 * Renders with a language's division and modulo. Both are floor operations here; `nonNegative`
 * tells the renderer when the dividend cannot be negative, so plain truncating forms are exact.
 */
export function renderIdx(
  e: Idx,
  div: (a: string, c: number, nonNegative: boolean) => string,
  mod: (a: string, c: number, nonNegative: boolean) => string,
): string {
  switch (e.kind) {
    case "const":
      return String(e.value);
    case "var":
      return e.name;
    case "sum":
      return `(${e.terms.map((t) => renderIdx(t, div, mod)).join(" + ")})`;
    case "mul":
      return `${wrap(renderIdx(e.a, div, mod))}*${e.c}`;
    case "div":
      return div(renderIdx(e.a, div, mod), e.c, e.a.min >= 0);
    case "mod":
      return mod(renderIdx(e.a, div, mod), e.c, e.a.min >= 0);
  }
}

const wrap = (s: string): string => (/^[\w.]+$/.test(s) || s.startsWith("(") ? s : `(${s})`);

/** A validity condition as source text: only the bounds the ranges do not already prove; `always` when none remain. */
export function renderBounds(bounds: readonly Bound[], index: (e: Idx) => string, always: string): string {
  const parts: string[] = [];
  for (const b of bounds) {
    const e = index(b.expr);
    if (b.expr.min < b.lo) parts.push(`${e} >= ${b.lo}`);
    if (b.expr.max >= b.hi) parts.push(`${e} < ${b.hi}`);
  }
  return parts.join(" && ") || always;
}
