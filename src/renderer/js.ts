// Renders the loop IR as the body of a JavaScript function `(bufs, H) => void`:
// bufs are typed arrays (slot order), H the conversion helpers in runtime/js.ts.
import type { DType } from "../dtype.ts";
import { type Bound, type Idx, renderIdx, renderBounds } from "../shape/symbolic.ts";
import type { AluOp, Expr, KernelIR, Operand, Stmt } from "../codegen/ir.ts";

export function renderJs(kernel: KernelIR): string {
  const lines = [`// ${kernel.name}`];
  kernel.buffers.forEach((_, slot) => lines.push(`const b${slot} = bufs[${slot}];`));
  renderBlock(kernel.body, lines, "", kernel);
  return lines.join("\n");
}

function renderBlock(stmts: readonly Stmt[], out: string[], indent: string, kernel: KernelIR): void {
  for (const s of stmts) {
    switch (s.kind) {
      case "loop":
        out.push(`${indent}for (let ${s.var} = 0; ${s.var} < ${s.size}; ${s.var}++) {`);
        renderBlock(s.body, out, `${indent}  `, kernel);
        out.push(`${indent}}`);
        break;
      case "def":
        out.push(`${indent}const ${s.name} = ${renderExpr(s.expr, s.dtype, kernel)};`);
        break;
      case "acc":
        out.push(`${indent}let ${s.name} = ${s.op === "ADD" ? "0" : "-Infinity"};`);
        break;
      case "update": {
        const acc: Operand = { kind: "val", name: s.name, dtype: s.dtype };
        out.push(`${indent}${s.name} = ${renderAlu(s.op === "ADD" ? "ADD" : "MAX", [acc, s.value], s.dtype)};`);
        break;
      }
      case "store":
        out.push(
          `${indent}${s.valid?.length ? `if (${cond(s.valid)}) ` : ""}b${s.buf}[${idx(s.index)}] = ${toStorage(operand(s.value), s.dtype)};`,
        );
        break;
    }
  }
}

const idx = (e: Idx): string =>
  renderIdx(
    e,
    (a, c) => `Math.floor(${a} / ${c})`,
    (a, c, nonNegative) => (nonNegative ? `(${a} % ${c})` : `((${a} % ${c} + ${c}) % ${c})`),
  );

const cond = (bounds: readonly Bound[]): string => renderBounds(bounds, idx, "true");

function renderExpr(e: Expr, dtype: DType, kernel: KernelIR): string {
  if (e.op === "LOAD") {
    const load = fromStorage(`b${e.buf}[${idx(e.index)}]`, kernel.buffers[e.buf]!.dtype);
    return e.valid.length ? `(${cond(e.valid)} ? ${load} : 0)` : load;
  }
  if (e.op === "VALID") return `(${cond(e.valid)} ? 1 : 0)`;
  if (e.op === "INDEX") return idx(e.index);
  return renderAlu(e.op, e.srcs, dtype);
}

function operand(o: Operand): string {
  if (o.kind === "val") return o.name;
  if (o.dtype.name === "bool") return o.value ? "1" : "0";
  return Object.is(o.value, -0) ? "-0" : String(o.value);
}

/** Storage -> the number a kernel computes with. */
function fromStorage(x: string, d: DType): string {
  switch (d.name) {
    case "float16":
      return `H.h2f(${x})`;
    case "bfloat16":
      return `H.b2f(${x})`;
    case "int64":
      return `Number(${x})`;
    default:
      return x;
  }
}

function toStorage(x: string, d: DType): string {
  switch (d.name) {
    case "float16":
      return `H.f2h(${x})`;
    case "bfloat16":
      return `H.f2b(${x})`;
    case "int64":
      return `H.i64(${x})`;
    default:
      return x;
  }
}

/** Wraps an integer result into the dtype's range (floats are rounded to float32 where they are 32 bits or less). */
function fit(x: string, d: DType): string {
  switch (d.name) {
    case "bool":
      return `(${x} ? 1 : 0)`;
    case "int8":
      return `((${x} << 24) >> 24)`;
    case "uint8":
      return `((${x}) & 255)`;
    case "int16":
      return `((${x} << 16) >> 16)`;
    case "uint16":
      return `((${x}) & 65535)`;
    case "int32":
      return `((${x}) | 0)`;
    case "uint32":
      return `((${x}) >>> 0)`;
    case "int64":
    case "float64":
      return `(${x})`;
    default:
      return `Math.fround(${x})`;
  }
}

function renderAlu(op: AluOp, srcs: readonly Operand[], d: DType): string {
  const [a, b, c] = srcs.map(operand) as [string, string, string];
  const from = srcs[0]!.dtype;
  const isInt = d.kind === "int" || d.kind === "uint";
  switch (op) {
    case "ADD":
      return d.name === "bool" ? `(${a} | ${b})` : fit(`${a} + ${b}`, d);
    case "MUL":
      if (d.name === "bool") return `(${a} & ${b})`;
      if (isInt && d.name !== "int64") return fit(`Math.imul(${a}, ${b})`, d);
      return fit(`${a} * ${b}`, d);
    case "IDIV":
      return fit(`Math.trunc(${a} / ${b})`, d);
    case "MOD":
      return fit(`${a} % ${b}`, d);
    case "MAX":
      return `Math.max(${a}, ${b})`;
    case "CMPLT":
      return `(${a} < ${b} ? 1 : 0)`;
    case "CMPNE":
      return `(${a} !== ${b} ? 1 : 0)`;
    case "AND":
      return fit(`${a} & ${b}`, d);
    case "OR":
      return fit(`${a} | ${b}`, d);
    case "XOR":
      return fit(`${a} ^ ${b}`, d);
    case "SHL":
      return fit(`${a} << ${b}`, d);
    case "SHR":
      return d.kind === "uint" ? `(${a} >>> ${b})` : `(${a} >> ${b})`;
    case "NEG":
      return d.name === "bool" ? `(${a} ? 0 : 1)` : isInt ? fit(`-(${a})`, d) : `(-(${a}))`; // a may be a negative literal: --1 does not parse
    case "RECIP":
      return fit(`1 / ${a}`, d);
    case "SQRT":
      return fit(`Math.sqrt(${a})`, d);
    case "EXP2":
      return fit(`2 ** ${a}`, d);
    case "LOG2":
      return fit(`Math.log2(${a})`, d);
    case "SIN":
      return fit(`Math.sin(${a})`, d);
    case "TRUNC":
      return `Math.trunc(${a})`;
    case "WHERE":
      return `(${a} ? ${b} : ${c})`;
    case "CAST":
      return renderCast(a, from, d);
    case "BITCAST":
      return `H.bitcast_${from.name}_${d.name}(${a})`;
  }
}

function renderCast(x: string, from: DType, to: DType): string {
  switch (to.name) {
    case "bool":
      return `(${x} !== 0 ? 1 : 0)`;
    case "float16":
      return `H.f16round(${x})`;
    case "bfloat16":
      return `H.bf16round(${x})`;
    case "float32":
      return `Math.fround(${x})`;
    case "float64":
      return x;
    default:
      return from.kind === "float"
        ? to.name === "int64"
          ? `Math.trunc(${x})`
          : fit(`Math.trunc(${x})`, to)
        : fit(x, to);
  }
}
