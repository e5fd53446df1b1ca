// Runs a fuzz program (program.ts) in tsgrad on one device: each node through the public Tensor API, its shape
// and dtype checked against the program's as it is built, the output read back (and in gradient mode the
// gradients of sum(out * weights) with respect to every float32 input).
import { Tensor, TsgradError } from "../../src/index.ts";
import { type ActFn, type DT, type Node, type Program, outputOf } from "./program.ts";

/** A value read back: flat numbers, its shape and dtype. */
export interface Value {
  shape: number[];
  dtype: string;
  data: number[];
}

export interface DeviceResult {
  out?: Value;
  /** Per float32 input (by node id): its gradient, or null where tsgrad gave none. */
  grads?: Map<number, Value | null>;
  /** An exception, or the first node whose shape or dtype is not the program's. */
  error?: string;
}

const TYPED: Record<DT, (data: number[]) => Float32Array | Int32Array | Uint8Array> = {
  float32: (d) => Float32Array.from(d),
  float16: (d) => Float32Array.from(d),
  int32: (d) => Int32Array.from(d),
  bool: (d) => Uint8Array.from(d),
};

/** An activation method, with its parameter where the node has one. */
function activation(x: Tensor, fn: ActFn, param: number | [number, number] | undefined): Tensor {
  const p = param as number | undefined;
  switch (fn) {
    case "gelu":
      return x.gelu();
    case "geluTanh":
      return x.gelu({ approximate: "tanh" });
    case "softplus":
      return x.softplus(p);
    case "elu":
      return x.elu(p);
    case "leakyRelu":
      return x.leakyRelu(p);
    case "hardtanh":
      return param === undefined ? x.hardtanh() : x.hardtanh(...(param as [number, number]));
    default:
      return x[fn]();
  }
}

/** Node `n` as a tensor, from the tensors of its arguments. */
function build(n: Node, xs: Tensor[], device: string): Tensor {
  const [a, b] = xs as [Tensor, Tensor];
  switch (n.op) {
    case "input":
      return new Tensor(TYPED[n.dtype](n.data), { device, dtype: n.dtype }).reshape(n.shape);
    case "binary":
      return a[n.fn](n.scalar ?? b);
    case "where": {
      const rest = xs.slice(1);
      const x = n.a ?? rest.shift()!;
      const y = n.b ?? rest.shift()!;
      return a.where(x, y);
    }
    case "unary":
      if (n.fn === "exp") return a.exp();
      if (n.fn === "neg") return a.neg();
      if (n.fn === "logAbs1") return a.abs().add(1).log();
      return a.abs().sqrt();
    case "cast":
      return a.cast(n.dtype);
    case "reshape":
      return a.reshape(n.to);
    case "permute":
      return a.permute(n.order);
    case "transpose":
      return a.transpose(...n.dims);
    case "expand":
      return a.expand(n.to);
    case "pad":
      return n.mode ? a.pad(n.pads, 0, n.mode) : a.pad(n.pads, n.value);
    case "shrink":
      return a.shrink(n.bounds);
    case "flip":
      return a.flip(n.axes);
    case "index":
      return a.index(...n.spec);
    case "cat":
      return Tensor.cat(xs, n.axis);
    case "stack":
      return Tensor.stack(xs, n.axis);
    case "repeat":
      return a.repeat(n.reps);
    case "reduce":
      return a[n.fn]({ axis: n.axis, keepdim: n.keepdim });
    case "matmul":
      return a.matmul(b);
    case "cumsum":
      return a.cumsum(n.axis);
    case "gather":
      return a.gather(n.axis, b);
    case "cummax":
      return a.cummax(n.axis);
    case "softmax":
      return a[n.fn](n.axis);
    case "logsumexp":
      return a.logsumexp({ axis: n.axis, keepdim: n.keepdim });
    case "sort":
      return a.sort({ axis: n.axis, descending: n.descending })[n.take];
    case "argsort":
      return a.argsort({ axis: n.axis, descending: n.descending });
    case "topk":
      return a.topk(n.k, { axis: n.axis, largest: n.largest })[n.take];
    case "einsum":
      return Tensor.einsum(n.formula, a, b);
    case "act":
      return activation(a, n.fn, n.param);
    case "interpolate":
      return a.interpolate({ mode: n.mode, size: n.size, scaleFactor: n.scaleFactor, alignCorners: n.alignCorners });
    case "conv2d":
      return a.conv2d(b, { bias: xs[2], stride: n.stride, padding: n.padding, dilation: n.dilation, groups: n.groups });
    case "contiguous":
      return a.contiguous();
    case "realize":
      return a.realize();
  }
}

const read = (t: Tensor): Value => ({
  shape: t.shape,
  dtype: t.dtype.name,
  data: Array.from(t.toArray() as ArrayLike<number>, Number),
});

/** An exception in a line: its first line, and a compiler's first "error:" line where it has one. */
function describe(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const lines = e.message.split("\n");
  const compiler = lines.find((l) => l.includes("error:"));
  return `${e.name}: ${lines[0]!.slice(0, 300)}${compiler ? ` ${compiler.trim().slice(0, 300)}` : ""}`;
}

export function runOnDevice(p: Program, device: string): DeviceResult {
  const tensors: Tensor[] = [];
  try {
    for (const [id, n] of p.nodes.entries()) {
      const t = build(
        n,
        (n.op === "input" ? [] : n.args).map((i) => tensors[i]!),
        device,
      );
      if (t.shape.join() !== n.shape.join() || t.dtype.name !== n.dtype) {
        return {
          error: `node ${id} (${n.op}): tsgrad gives ${t.dtype.name} [${t.shape}], expected ${n.dtype} [${n.shape}]`,
        };
      }
      if (p.grad && n.op === "input" && n.dtype === "float32") t.requiresGrad = true;
      tensors.push(t);
    }
  } catch (e) {
    return { error: `building: ${describe(e)}` };
  }
  const out = tensors[tensors.length - 1]!;
  try {
    if (!p.grad) return { out: read(out) };
    // backward before reading: reading may swap the output's graph for its buffer
    const weights = new Tensor(Float32Array.from(p.weights!), { device }).reshape(outputOf(p).shape);
    const loss = out.mul(weights).sum();
    // an output reached from no float input (through integer casts, comparisons) has no gradient: backward()
    // refuses it, as PyTorch does, and every input's gradient is none
    try {
      loss.backward();
    } catch (e) {
      if (!(e instanceof TsgradError && e.message.includes("depends on no tensor that requires grad"))) throw e;
    }
    const grads = new Map<number, Value | null>();
    p.nodes.forEach((n, id) => {
      if (n.op === "input" && n.dtype === "float32") grads.set(id, tensors[id]!.grad ? read(tensors[id]!.grad!) : null);
    });
    return { out: read(out), grads };
  } catch (e) {
    return { error: `running: ${describe(e)}` };
  }
}
