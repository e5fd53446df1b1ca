// What every C-family renderer shares: the loop IR's values, arithmetic, loads and stores as C expressions.
// Semantics follow the JS renderer (the reference): float32 math in float, 16-bit floats stored as their bits
// and computed in float, integers wrap, bool is 0/1 (stored in a byte), integer division by zero gives 0.
// A dialect (c.ts, cuda.ts) names the types and spells what C itself leaves open: infinities and NaN, the
// most negative integers, float math, bit casts, the restrict keyword.
import type { DType, DTypeName } from "../dtype.ts";
import { type Bound, type Idx, renderBounds, renderIdx } from "../shape/symbolic.ts";
import type { AluOp, Expr, KernelIR, Operand, Stmt } from "../codegen/ir.ts";

export interface CDialect {
  /** The type each dtype is computed in; bool's is the type comparisons and masks give. */
  readonly types: Readonly<Record<DTypeName, string>>;
  /** The unsigned types integer arithmetic wraps in (unsigned overflow is defined, signed is not). */
  readonly uint32: string;
  readonly uint64: string;
  /** The keyword that promises a buffer parameter unaliased. */
  readonly restrict: string;
  /** Positive infinity and NaN in a float dtype's compute type. */
  readonly infinity: (d: DType) => string;
  readonly nan: (d: DType) => string;
  /** The literal of an int32's or int64's most negative value (its digits would be a positive overflowing constant). */
  readonly minLiteral: (d: DType) => string;
  /** A signed integer dtype's most negative value as a maximum's starting point. */
  readonly lowest: (d: DType) => string;
  /** exp2, log2 or sin of a float32 (or 16-bit float) value. */
  readonly narrowMath: (fn: "exp2" | "log2" | "sin", a: string) => string;
  /** The stored bits `bits` of type `fromType` reinterpreted as `toType`, the stored type of `to`, read as `to`. */
  readonly bitcast: (bits: string, fromType: string, toType: string, to: DType) => string;
}

/** Float products by name: a sum of products accumulates with fused multiply-adds. */
export type Products = Map<string, readonly Operand[]>;

/** A dialect's renderings of values, expressions and the statements every C-family kernel writes alike. */
export interface CStyle {
  readonly computeType: (d: DType) => string;
  readonly storageType: (d: DType) => string;
  readonly literal: (value: number, d: DType) => string;
  readonly operand: (o: Operand) => string;
  readonly alu: (op: AluOp, srcs: readonly Operand[], d: DType) => string;
  readonly expr: (e: Expr, d: DType, kernel: KernelIR) => string;
  /** A reduce's starting value. */
  readonly identity: (op: "ADD" | "MAX", d: DType) => string;
  /** The line declaring a local of the compute type. */
  readonly declare: (name: string, d: DType, value: string) => string;
  /** An accumulator's new value; a product is added with a fused multiply-add unless `unfused`. */
  readonly accumulate: (s: Stmt & { kind: "update" }, products: Products) => string;
  /** A store's line, guarded where it has bounds. */
  readonly store: (s: Stmt & { kind: "store" }) => string;
  /** The buffer parameters: the output first, inputs const, each `restrict` where `restricted(slot)`. */
  readonly params: (kernel: KernelIR, restricted: (slot: number) => boolean) => string[];
}

/**
 * Index expressions in C-family languages. The IR's division and modulo are floor operations:
 * the truncating C forms are exact when the dividend cannot be negative, `tg_floordiv` and a
 * shifted remainder otherwise.
 */
export const cIndex = (e: Idx): string =>
  renderIdx(
    e,
    (a, c, nonNegative) => (nonNegative ? `(${a} / ${c})` : `tg_floordiv(${a}, ${c})`),
    (a, c, nonNegative) => (nonNegative ? `(${a} % ${c})` : `(((${a}) % ${c} + ${c}) % ${c})`),
  );

/** Whether every bound holds, as a C condition. */
export const cCond = (bounds: readonly Bound[]): string => renderBounds(bounds, cIndex, "1");

/** A stored value as the value computed with (16-bit floats are stored as their bits). */
export function fromStorage(x: string, d: DType): string {
  if (d.name === "float16") return `tg_h2f(${x})`;
  if (d.name === "bfloat16") return `tg_b2f(${x})`;
  return x;
}

export function toStorage(x: string, d: DType): string {
  if (d.name === "float16") return `tg_f2h(${x})`;
  if (d.name === "bfloat16") return `tg_f2b(${x})`;
  return x;
}

/** A loop from 0 to `size` - 1 over `name`, of type `type`. */
export const forLoop = (type: string, name: string, size: number): string =>
  `for (${type} ${name} = 0; ${name} < ${size}; ${name}++) {`;

/** Notes a float product `s` defines, for the sum it feeds to take as a fused multiply-add. */
export function noteProduct(s: Stmt & { kind: "def" }, products: Products): void {
  if (s.expr.op === "MUL" && s.dtype.kind === "float") products.set(s.name, s.expr.srcs);
}

export function cStyle(dialect: CDialect): CStyle {
  const { types } = dialect;
  const computeType = (d: DType): string => types[d.name];
  const storageType = (d: DType): string =>
    d.name === "float16" || d.name === "bfloat16" ? types.uint16 : d.name === "bool" ? types.uint8 : types[d.name];

  function literal(value: number, d: DType): string {
    if (d.name === "bool") return value ? "1" : "0";
    if (d.kind === "float") {
      if (Number.isNaN(value)) return dialect.nan(d);
      if (!Number.isFinite(value)) return `${value > 0 ? "" : "-"}${dialect.infinity(d)}`;
      // -0 kept
      const text = Object.is(value, -0) ? "-0.0" : value.toPrecision(17);
      return `${text.includes(".") || text.includes("e") ? text : `${text}.0`}${d.name === "float64" ? "" : "f"}`;
    }
    if ((d.name === "int32" && value === -(2 ** 31)) || (d.name === "int64" && value <= -(2 ** 63)))
      return dialect.minLiteral(d);
    // a double at or past 2^63 is no int64: it saturates, as the JS reference stores it (its digits would overflow)
    if (d.name === "int64") return value >= 2 ** 63 ? "9223372036854775807LL" : `${value}LL`;
    if (d.name === "uint32") return `${value}u`;
    return String(value);
  }

  const operand = (o: Operand): string => (o.kind === "val" ? o.name : literal(o.value, o.dtype));

  /** Integer arithmetic wraps: do it unsigned (no undefined behaviour) and convert back. */
  function wrapped(op: string, a: string, b: string, d: DType): string {
    const u = d.itemsize === 8 ? dialect.uint64 : dialect.uint32;
    return `(${types[d.name]})((${u})${a} ${op} (${u})${b})`;
  }

  function alu(op: AluOp, srcs: readonly Operand[], d: DType): string {
    const [a, b, c] = srcs.map(operand) as [string, string, string];
    const from = srcs[0]!.dtype;
    const t = types[d.name];
    const isInt = d.kind === "int" || d.kind === "uint";
    const signedness = d.kind === "uint" ? "U" : "I";
    const f64 = d.name === "float64";
    switch (op) {
      case "ADD":
        return d.name === "bool" ? `(${a} | ${b})` : isInt ? wrapped("+", a, b, d) : `(${a} + ${b})`;
      case "MUL":
        return d.name === "bool" ? `(${a} & ${b})` : isInt ? wrapped("*", a, b, d) : `(${a} * ${b})`;
      case "IDIV":
        return isInt ? `TG_${signedness}DIV(${t}, ${a}, ${b})` : `(${t})trunc((double)${a} / (double)${b})`;
      case "MOD":
        return isInt ? `TG_${signedness}MOD(${t}, ${a}, ${b})` : `(${t})fmod((double)${a}, (double)${b})`;
      case "MAX":
        return d.kind === "float" ? `((${a} > ${b} || ${a} != ${a}) ? ${a} : ${b})` : `(${a} > ${b} ? ${a} : ${b})`;
      case "CMPLT":
        return `(${types.bool})(${a} < ${b})`;
      case "CMPNE":
        return `(${types.bool})(${a} != ${b})`;
      case "AND":
        return `(${t})(${a} & ${b})`;
      case "OR":
        return `(${t})(${a} | ${b})`;
      case "XOR":
        return `(${t})(${a} ^ ${b})`;
      case "SHL":
        return d.itemsize === 8
          ? `(${t})((${dialect.uint64})${a} << (${b} & 63))`
          : `(${t})((${dialect.uint32})${a} << (${b} & 31))`;
      case "SHR":
        return d.itemsize === 8 ? `(${t})(${a} >> (${b} & 63))` : `(${t})(${a} >> (${b} & 31))`;
      case "NEG":
        return d.name === "bool" ? `(${types.bool})!${a}` : isInt ? wrapped("-", "0", a, d) : `(-(${a}))`; // a may be a negative literal: --1.0f is a decrement
      case "RECIP":
        return isInt ? `TG_${signedness}DIV(${t}, 1, ${a})` : `(${t})(1 / ${a})`;
      case "SQRT":
        return f64 ? `sqrt(${a})` : `sqrtf(${a})`;
      case "EXP2":
        return f64 ? `exp2(${a})` : dialect.narrowMath("exp2", a);
      case "LOG2":
        return f64 ? `log2(${a})` : dialect.narrowMath("log2", a);
      case "SIN":
        return f64 ? `sin(${a})` : dialect.narrowMath("sin", a);
      case "TRUNC":
        return d.kind === "float" ? (f64 ? `trunc(${a})` : `truncf(${a})`) : a;
      case "WHERE":
        return `(${a} ? ${b} : ${c})`;
      case "CAST":
        return cast(a, from, d);
      case "BITCAST":
        return dialect.bitcast(toStorage(a, from), storageType(from), storageType(d), d);
    }
  }

  function cast(x: string, from: DType, to: DType): string {
    switch (to.name) {
      case "bool":
        return `(${types.bool})(${x} != 0)`;
      case "float16":
        return `tg_h2f(tg_f2h((float)${x}))`;
      case "bfloat16":
        return `tg_b2f(tg_f2b((float)${x}))`;
      case "float32":
        return `(float)${x}`;
      case "float64":
        return `(double)${x}`;
      case "int64":
        return from.kind === "float" ? `tg_trunc64(${x})` : `(${types.int64})${x}`;
      default:
        return from.kind === "float" ? `(${types[to.name]})tg_wrap32(${x})` : `(${types[to.name]})${x}`;
    }
  }

  function expr(e: Expr, d: DType, kernel: KernelIR): string {
    if (e.op === "LOAD") {
      const load = fromStorage(`b${e.buf}[${cIndex(e.index)}]`, kernel.buffers[e.buf]!.dtype);
      return e.valid.length ? `(${cCond(e.valid)} ? ${load} : 0)` : load;
    }
    if (e.op === "VALID") return `(${types.bool})(${cCond(e.valid)})`;
    if (e.op === "INDEX") return `(${types.int32})(${cIndex(e.index)})`;
    return alu(e.op, e.srcs, d);
  }

  function identity(op: "ADD" | "MAX", d: DType): string {
    if (op === "ADD") return "0";
    if (d.kind === "float") return `-${dialect.infinity(d)}`;
    return d.kind === "int" ? dialect.lowest(d) : "0";
  }

  function accumulate(s: Stmt & { kind: "update" }, products: Products): string {
    const product = s.op === "ADD" && s.value.kind === "val" && !s.unfused ? products.get(s.value.name) : undefined;
    if (product)
      return `${s.dtype.name === "float64" ? "fma" : "fmaf"}(${operand(product[0]!)}, ${operand(product[1]!)}, ${s.name})`;
    return alu(s.op, [{ kind: "val", name: s.name, dtype: s.dtype }, s.value], s.dtype);
  }

  return {
    computeType,
    storageType,
    literal,
    operand,
    alu,
    expr,
    identity,
    declare: (name, d, value) => `${types[d.name]} ${name} = ${value};`,
    accumulate,
    store: (s) =>
      `${s.valid?.length ? `if (${cCond(s.valid)}) ` : ""}b${s.buf}[${cIndex(s.index)}] = ${toStorage(operand(s.value), s.dtype)};`,
    params: (kernel, restricted) =>
      kernel.buffers.map(
        (b, slot) =>
          `${slot === 0 ? "" : "const "}${storageType(b.dtype)}* ${restricted(slot) ? `${dialect.restrict} ` : ""}b${slot}`,
      ),
  };
}
