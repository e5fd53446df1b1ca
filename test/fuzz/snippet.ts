// A fuzz program as the TypeScript that runs it: the readable form every mismatch report prints, and a
// reproduction to paste into a file beside src/ (`import { Tensor } from "./src/index.ts"`).
import { type Node, type Program, outputOf } from "./program.ts";

const json = (x: unknown): string => JSON.stringify(x);

const ARRAYS = { float32: "Float32Array", float16: "Float32Array", int32: "Int32Array", bool: "Uint8Array" } as const;

/** Node `n` as an expression over the names of its arguments. */
function expression(n: Node, names: string[]): string {
  const [a, b] = names;
  switch (n.op) {
    case "input":
      return `new Tensor(${ARRAYS[n.dtype]}.from(${json(n.data)}), { device, dtype: "${n.dtype}" }).reshape(${json(n.shape)})`;
    case "binary":
      return `${a}.${n.fn}(${n.scalar ?? b})`;
    case "where": {
      const rest = names.slice(1);
      return `${a}.where(${n.a ?? rest.shift()}, ${n.b ?? rest.shift()})`;
    }
    case "unary":
      return { exp: `${a}.exp()`, neg: `${a}.neg()`, logAbs1: `${a}.abs().add(1).log()`, sqrtAbs: `${a}.abs().sqrt()` }[
        n.fn
      ];
    case "cast":
      return `${a}.cast("${n.dtype}")`;
    case "reshape":
      return `${a}.reshape(${json(n.to)})`;
    case "permute":
      return `${a}.permute(${json(n.order)})`;
    case "transpose":
      return `${a}.transpose(${n.dims.join(", ")})`;
    case "expand":
      return `${a}.expand(${json(n.to)})`;
    case "pad":
      return n.mode ? `${a}.pad(${json(n.pads)}, 0, "${n.mode}")` : `${a}.pad(${json(n.pads)}, ${n.value})`;
    case "shrink":
      return `${a}.shrink(${json(n.bounds)})`;
    case "flip":
      return `${a}.flip(${json(n.axes)})`;
    case "index":
      return `${a}.index(${n.spec.map(json).join(", ")})`;
    case "cat":
      return `Tensor.cat([${names.join(", ")}], ${n.axis})`;
    case "stack":
      return `Tensor.stack([${names.join(", ")}], ${n.axis})`;
    case "repeat":
      return `${a}.repeat(${json(n.reps)})`;
    case "reduce":
      return `${a}.${n.fn}({ axis: ${json(n.axis)}, keepdim: ${n.keepdim} })`;
    case "matmul":
      return `${a}.matmul(${b})`;
    case "cumsum":
      return `${a}.cumsum(${n.axis})`;
    case "gather":
      return `${a}.gather(${n.axis}, ${b})`;
    case "cummax":
      return `${a}.cummax(${n.axis})`;
    case "softmax":
      return `${a}.${n.fn}(${n.axis})`;
    case "logsumexp":
      return `${a}.logsumexp({ axis: ${json(n.axis)}, keepdim: ${n.keepdim} })`;
    case "sort":
      return `${a}.sort({ axis: ${n.axis}, descending: ${n.descending} }).${n.take}`;
    case "argsort":
      return `${a}.argsort({ axis: ${n.axis}, descending: ${n.descending} })`;
    case "topk":
      return `${a}.topk(${n.k}, { axis: ${n.axis}, largest: ${n.largest} }).${n.take}`;
    case "einsum":
      return `Tensor.einsum("${n.formula}", ${a}, ${b})`;
    case "act": {
      const p = n.param === undefined ? "" : Array.isArray(n.param) ? n.param.join(", ") : `${n.param}`;
      return n.fn === "geluTanh" ? `${a}.gelu({ approximate: "tanh" })` : `${a}.${n.fn}(${p})`;
    }
    case "interpolate": {
      const opts = [
        `mode: "${n.mode}"`,
        ...(n.size !== undefined ? [`size: ${json(n.size)}`] : []),
        ...(n.scaleFactor !== undefined ? [`scaleFactor: ${json(n.scaleFactor)}`] : []),
        ...(n.alignCorners !== undefined ? [`alignCorners: ${n.alignCorners}`] : []),
      ];
      return `${a}.interpolate({ ${opts.join(", ")} })`;
    }
    case "conv2d": {
      const opts = [
        ...(names[2] ? [`bias: ${names[2]}`] : []),
        `stride: ${json(n.stride)}`,
        `padding: ${json(n.padding)}`,
        `dilation: ${json(n.dilation)}`,
        `groups: ${n.groups}`,
      ];
      return `${a}.conv2d(${b}, { ${opts.join(", ")} })`;
    }
    case "contiguous":
      return `${a}.contiguous()`;
    case "realize":
      return `${a}.realize()`;
  }
}

/** The program as statements, one node a line, each with its shape and dtype. */
export function snippet(p: Program, device = "CPU"): string {
  const lines = [`const device = "${device}"; // and "JS"`];
  p.nodes.forEach((n, i) => {
    const names = (n.op === "input" ? [] : n.args).map((a) => `t${a}`);
    lines.push(`const t${i} = ${expression(n, names)}; // [${n.shape}] ${n.dtype}`);
    // as the runner does: on the input's own tensor (the reshaped view), which then holds the gradient
    if (p.grad && n.op === "input" && n.dtype === "float32") lines.push(`t${i}.requiresGrad = true;`);
  });
  const last = `t${p.nodes.length - 1}`;
  if (p.grad) {
    lines.push(
      `${last}.mul(new Tensor(Float32Array.from(${json(p.weights)}), { device }).reshape(${json(outputOf(p).shape)})).sum().backward();`,
    );
    const inputs = p.nodes.flatMap((n, i) =>
      n.op === "input" && n.dtype === "float32" ? [`t${i}.grad?.tolist()`] : [],
    );
    lines.push(`console.log(${[`${last}.tolist()`, ...inputs].join(", ")});`);
  } else {
    lines.push(`console.log(${last}.tolist());`);
  }
  return lines.join("\n");
}
