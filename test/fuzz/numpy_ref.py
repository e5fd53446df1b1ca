"""The numpy side of graph_fuzz.ts: runs fuzz programs (program.ts's JSON) with tsgrad's documented semantics.

stdin: {"programs": [...], "allNodes": bool}; stdout: one result per program, {"out": value, "out64": value,
"singular": bool} or {"skip": reason} (or {"error": message}: a fuzzer bug). out64 is the output computed in float64
(how far float32 rounding moves it: near a square root of 0 or after a cancellation, far); singular says a square
root was taken at 0 (where gradients are infinite). Plus {"nodes": [...]} with allNodes, and for gradient programs {"grads":
[{"input": id, "fd": [...], "smooth": [...]}]}: central differences in float64 of sum(out * weights) per float32
input element, two step sizes, "smooth" where they agree (off at kinks, ties and jumps); none where a float32 value
of the program overflows.

Where numpy's own rules differ from tsgrad's, tsgrad's are modelled: results are cast to the node's dtype (numpy
would widen int32 sums and bool + int to int64), x / y is x * (1 / y), exp(x) is exp2(x * log2(e)), log(x) is
log2(x) * ln(2), constants take the tensor's dtype, and float16 values are float32 values rounded to float16
where tsgrad stores them (a cast to float16, contiguous, a sum's or max's input, the output), not after every op.
"""
import json
import math
import sys

import numpy as np

np.seterr(all="ignore")

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


class Skip(Exception):
    """The program's result is not defined (a float cast to int out of range, x / 0 whose sign of zero decides)."""


class Model:
    def __init__(self, wide):
        # wide: float64 throughout (finite differences, error estimates); else float32, as tsgrad computes
        self.wide = wide
        self.ft = np.float64 if wide else np.float32
        # a square root taken at exactly 0: its gradient is infinite there, and inf * 0 = NaN downstream
        self.singular = False

    def ctype(self, dt):
        """What a dtype computes in: float16 values are held as float32 (float64 when wide)."""
        return {"bool": np.bool_, "int32": np.int32}.get(dt, self.ft)

    def as_dt(self, x, dt):
        return np.asarray(x).astype(self.ctype(dt))

    def r16(self, x, dt):
        """Rounds a float16 node's values to float16 (where tsgrad stores them)."""
        if dt != "float16" or self.wide:
            return x
        return np.asarray(x).astype(np.float16).astype(np.float32)

    def const(self, v, dt):
        if dt == "float16" and not self.wide:
            return np.float32(np.float16(v))
        if dt == "bool":
            return np.bool_(v != 0)
        if dt == "int32":
            return np.int32(int(v))
        return self.ft(v)


def reduce_axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(a % ndim for a in axis)) if ndim > 0 else ()


def binary(m, n, a, b):
    fn, dt, op = n["fn"], n["dtype"], n["operand"]
    a, b = m.as_dt(a, op), m.as_dt(b, op)
    if fn == "add":
        return a | b if op == "bool" else a + b
    if fn == "sub":
        return a - b
    if fn == "mul":
        return a & b if op == "bool" else a * b
    if fn == "div":
        fa, fb = m.as_dt(a, dt), m.as_dt(b, dt)
        if not m.wide and np.any((fb == 0) & (fa != 0) & ~np.isnan(fa)):
            raise Skip("x / 0: the sign of a zero decides +-inf")
        one = m.const(1, dt)
        return fa * (one / fb)
    if fn == "maximum":
        return a | b if op == "bool" else np.maximum(a, b)
    if fn == "minimum":
        return a & b if op == "bool" else np.minimum(a, b)
    if fn == "lt":
        return a < b
    if fn == "eq":
        return a == b
    raise ValueError(fn)


def unary(m, n, x, src_dt):
    fn, dt = n["fn"], n["dtype"]
    if fn == "neg":
        return ~x if dt == "bool" else -x
    if fn == "exp":
        f = m.as_dt(x, dt)
        return np.exp(f) if m.wide else np.exp2(f * m.const(LOG2E, dt))
    # abs keeps the dtype (int32 stays int32; a bool is its own absolute value, and bool + 1 is int32)
    absolute = x.astype(np.int32) if src_dt == "bool" else np.abs(x)
    if fn == "logAbs1":
        y = m.as_dt(absolute + m.const(1, "int32" if src_dt == "bool" else src_dt), dt)
        return np.log(y) if m.wide else np.log2(y) * m.const(LN2, dt)
    if fn == "sqrtAbs":
        m.singular = m.singular or bool(np.any(absolute == 0))
        return np.sqrt(m.as_dt(absolute, dt))
    raise ValueError(fn)


def cast(m, x, src_dt, dt):
    if dt == "bool":
        return x != 0
    if dt == "int32" and src_dt in ("float16", "float32"):
        if not np.all(np.isfinite(x)) or np.any(np.abs(np.trunc(x)) >= 2**31):
            raise Skip("a float cast to int32 out of range")
        return np.trunc(x).astype(np.int32)
    return m.r16(m.as_dt(x, dt), dt)


def pad(m, n, x):
    slices = tuple(slice(max(0, -b), x.shape[i] - max(0, -a)) for i, (b, a) in enumerate(n["pads"]))
    x = m.as_dt(x[slices], n["dtype"])
    widths = [(max(0, b), max(0, a)) for b, a in n["pads"]]
    return np.pad(x, widths, constant_values=m.const(n["value"], n["dtype"]))


def index(x, spec):
    key = []
    for e in spec:
        if e is None:
            key.append(np.newaxis)
        elif isinstance(e, list):
            key.append(slice(*e))
        else:
            key.append(e)
    return x[tuple(key)]


def reduce(m, n, x, src_dt):
    fn, dt = n["fn"], n["dtype"]
    axes = reduce_axes(n["axis"], x.ndim)
    keep = n["keepdim"]
    if fn in ("max", "min"):
        x = m.r16(x, src_dt)  # a 16-bit max reads a stored copy (Tensor.maxSource)
        return (np.max if fn == "max" else np.min)(x, axis=axes, keepdims=keep)
    if fn == "sum":
        return total(m, x, src_dt, dt, axes, keep)
    # mean: float() then sum, times the reciprocal of the count
    f = src_dt if src_dt in ("float16", "float32") else "float32"
    s = total(m, m.as_dt(x, f), f, f, axes, keep)
    count = int(np.prod([x.shape[a] for a in axes])) if axes else 1
    return s * m.const(1.0 / count, dt)


def total(m, x, src_dt, dt, axes, keep):
    if dt == "int32":
        return np.sum(x, axis=axes, dtype=np.int32, keepdims=keep)
    return m.r16(np.sum(m.as_dt(x, "float32"), axis=axes, keepdims=keep), dt)


def matmul(m, n, a, b):
    dt = n["dtype"]
    wide = "float32" if dt == "float16" else dt
    return m.r16(np.matmul(m.as_dt(a, wide), m.as_dt(b, wide)), dt)


def gather(n, src, idx):
    axis = n["axis"] % src.ndim
    key = tuple(slice(None) if i == axis else slice(0, s) for i, s in enumerate(idx.shape))
    return np.take_along_axis(src[key], idx.astype(np.int64), axis=axis)


def evaluate(m, prog, inputs=None):
    """All node values; `inputs` replaces input nodes' data (finite differences)."""
    nodes = prog["nodes"]
    vals = []
    for i, n in enumerate(nodes):
        op, dt = n["op"], n["dtype"]
        args = [vals[a] for a in n.get("args", [])]
        dts = [nodes[a]["dtype"] for a in n.get("args", [])]
        if op == "input":
            data = inputs[i] if inputs is not None and i in inputs else np.array(n["data"], dtype=np.float64)
            v = m.as_dt(data, dt).reshape(n["shape"])
        elif op == "binary":
            b = args[1] if len(args) > 1 else m.const(n["scalar"], n["operand"])
            v = binary(m, n, args[0], b)
        elif op == "where":
            rest = iter(args[1:])
            a = next(rest) if n.get("a") is None else m.const(n["a"], dt)
            b = next(rest) if n.get("b") is None else m.const(n["b"], dt)
            v = np.where(args[0] != 0, m.as_dt(a, dt), m.as_dt(b, dt))
        elif op == "unary":
            v = unary(m, n, args[0], dts[0])
        elif op == "cast":
            v = cast(m, args[0], dts[0], dt)
        elif op == "reshape":
            v = args[0].reshape(n["to"])
        elif op == "permute":
            v = np.transpose(args[0], n["order"])
        elif op == "transpose":
            v = np.swapaxes(args[0], *n["dims"])
        elif op == "expand":
            x = args[0]
            lead = len(n["to"]) - x.ndim
            to = [x.shape[i - lead] if s == -1 else s for i, s in enumerate(n["to"])]
            v = np.broadcast_to(x.reshape([1] * lead + list(x.shape)), to)
        elif op == "pad":
            v = pad(m, n, args[0])
        elif op == "shrink":
            v = args[0][tuple(slice(s, e) for s, e in n["bounds"])]
        elif op == "flip":
            v = np.flip(args[0], n["axes"])
        elif op == "index":
            v = index(args[0], n["spec"])
        elif op == "cat":
            v = np.concatenate([m.as_dt(a, dt) for a in args], axis=n["axis"])
        elif op == "stack":
            v = np.stack([m.as_dt(a, dt) for a in args], axis=n["axis"])
        elif op == "repeat":
            v = np.tile(args[0], n["reps"])
        elif op == "reduce":
            v = reduce(m, n, args[0], dts[0])
        elif op == "matmul":
            v = matmul(m, n, args[0], args[1])
        elif op == "cumsum":
            wide = "float32" if dt == "float16" else dt
            v = m.r16(np.cumsum(m.as_dt(args[0], wide), axis=n["axis"], dtype=m.ctype(wide)), dt)
        elif op == "gather":
            v = gather(n, args[0], args[1])
        elif op in ("contiguous", "realize"):
            v = m.r16(args[0], dt)
        else:
            raise ValueError(f"unknown op {op}")
        v = np.array(m.as_dt(v, dt))  # a copy, contiguous, 0-d kept 0-d
        if list(v.shape) != list(n["shape"]):
            raise ValueError(f"node {i} ({op}): numpy shape {list(v.shape)}, program says {n['shape']}")
        vals.append(v)
    vals[-1] = m.r16(vals[-1], nodes[-1]["dtype"])
    return vals


def encode(v):
    """A value as JSON: flat numbers, non-finite floats as the strings JS's Number() reads."""
    flat = v.reshape(-1)
    if v.dtype == np.bool_:
        return [int(x) for x in flat]
    if np.issubdtype(v.dtype, np.integer):
        return [int(x) for x in flat]
    return [float(x) if math.isfinite(x) else ("NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")) for x in flat.tolist()]


def finite_differences(prog):
    """d(sum(out * w))/d(input element), float64, for every float32 input, with steps h and h/2.

    The outputs are differenced before they are weighted and summed: outputs the element does not reach cancel
    exactly, however large they are (exp of exp), instead of drowning the difference in the sum's rounding.
    """
    m = Model(wide=True)
    w = np.array(prog["weights"], dtype=np.float64).reshape(prog["nodes"][-1]["shape"])

    def out(inputs):
        try:
            return evaluate(m, prog, inputs)[-1].astype(np.float64)
        except Skip:
            return np.full(w.shape, math.nan)

    grads = []
    for i, n in enumerate(prog["nodes"]):
        if n["op"] != "input" or n["dtype"] != "float32":
            continue
        base = np.array(n["data"], dtype=np.float64)
        fd, smooth = [], []
        for j in range(base.size):
            d = []
            for h in (1e-4, 5e-5):
                up, down = base.copy(), base.copy()
                up[j] += h
                down[j] -= h
                diff = out({i: up}) - out({i: down})
                d.append(float(np.sum(np.where(diff == 0, 0.0, diff * w))) / (2 * h))
            ok = all(math.isfinite(x) for x in d) and abs(d[0] - d[1]) <= 1e-5 + 1e-4 * abs(d[1])
            fd.append(d[1] if math.isfinite(d[1]) else 0.0)
            smooth.append(1 if ok else 0)
        grads.append({"input": i, "fd": fd, "smooth": smooth})
    return grads


def run(prog, all_nodes):
    try:
        m = Model(wide=False)
        vals = evaluate(m, prog)
        result = {"out": encode(vals[-1]), "singular": m.singular}
        try:
            # the same program in float64: how far float32 rounding alone moves each output (an error estimate)
            result["out64"] = encode(evaluate(Model(wide=True), prog)[-1])
        except Skip:
            pass
        if all_nodes:
            result["nodes"] = [encode(v) for v in vals]
        # float32 overflow anywhere (exp of exp) makes tsgrad's gradients inf or NaN where float64's are finite
        overflow = any(v.dtype.kind == "f" and not np.all(np.isfinite(v)) for v in vals)
        if prog.get("grad") and not overflow:
            result["grads"] = finite_differences(prog)
        return result
    except Skip as e:
        return {"skip": str(e)}
    except Exception as e:  # a fuzzer bug: the program is not one numpy can run
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    request = json.load(sys.stdin)
    json.dump([run(p, request.get("allNodes", False)) for p in request["programs"]], sys.stdout)


if __name__ == "__main__":
    main()
