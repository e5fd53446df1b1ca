"""The numpy side of graph_fuzz.ts: runs fuzz programs (program.ts's JSON) with tsgrad's documented semantics.

stdin: {"programs": [...], "allNodes": bool}; stdout: one result per program, {"out": value, "out64": value,
"singular": bool} or {"skip": reason} (or {"error": message}: a fuzzer bug). out64 is the output computed in float64
(how far float32 rounding moves it: near a square root of 0 or after a cancellation, far); singular says a square
root was taken at 0 (where gradients are infinite). Plus {"nodes": [...]} with allNodes, and for
gradient programs {"grads": [{"input": id, "fd": [...], "smooth": [...]}]}: central differences in float64 of
sum(out * weights) per float32 input element, two step sizes, "smooth" where they agree (off at kinks, ties and
jumps); none where a float32 value of the program overflows.

Where numpy's own rules differ from tsgrad's, tsgrad's are modelled: results are cast to the node's dtype (numpy
would widen int32 sums and bool + int to int64), x / y is x * (1 / y), exp(x) is exp2(x * log2(e)), log(x) is
log2(x) * ln(2), constants take the tensor's dtype, and float16 values are float32 values rounded to float16
where tsgrad stores them (a cast to float16, contiguous, a sum's or max's input, the output), not after every op.
Composite ops are modelled as tsgrad composes them where that decides a value (softmax's shift by the max, logsumexp's
finite shift, activations from sigmoid = 1 / (1 + exp(-x)) and tanh = 2 sigmoid(2x) - 1, gelu's erf by Abramowitz
and Stegun); sorts are numpy's stable argsort; pad modes are np.pad's reflect, edge and wrap; interpolate and conv2d
follow PyTorch's formulas.
"""
import json
import math
import sys

import numpy as np

np.seterr(all="ignore")

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
F16_MAX = 65504.0


class Skip(Exception):
    """The program's result is not defined (a float cast to int out of range, x / 0 whose sign of zero decides)."""


class Model:
    def __init__(self, wide, round_all=False):
        # wide: float64 throughout (finite differences, error estimates); else float32, as tsgrad computes
        self.wide = wide
        # round_all: every float16 node rounded, as if tsgrad stored each one (an error estimate: which it stores
        # is the scheduler's choice, and a later exp can make one rounding count)
        self.round_all = round_all
        self.ft = np.float64 if wide else np.float32
        # a square root taken at exactly 0: its gradient is infinite there, and inf * 0 = NaN downstream (also set
        # where a sigmoid's exp overflows: a known bug's NaN gradient)
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


PAD_MODES = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def pad(m, n, x):
    if n.get("mode"):
        # tsgrad's limits (reflect < size, circular <= size a side) are where numpy's modes mean the same
        return np.pad(x, n["pads"], mode=PAD_MODES[n["mode"]])
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


def fexp(m, x, dt):
    """Tensor.exp: exp2(x * log2(e)) in float32."""
    return np.exp(x) if m.wide else np.exp2(x * m.const(LOG2E, dt))


def flog(m, x, dt):
    """Tensor.log: log2(x) * ln(2) in float32."""
    return np.log(x) if m.wide else np.log2(x) * m.const(LN2, dt)


def fdiv(m, x, y, dt):
    """Tensor.div: x * (1 / y)."""
    return x / y if m.wide else x * (m.const(1, dt) / y)


def softmax(m, n, x, src_dt):
    dt = n["dtype"]
    x = m.as_dt(m.r16(x, src_dt), dt)  # a 16-bit input is stored before its max (Tensor.maxSource)
    axis = n["axis"]
    shifted = x - np.max(x, axis=axis, keepdims=True)
    e = fexp(m, shifted, dt)
    total = m.r16(np.sum(e, axis=axis, keepdims=True), dt)  # a float16 sum comes back rounded
    if n["fn"] == "softmax":
        return fdiv(m, e, total, dt)
    return shifted - flog(m, total, dt)


def logsumexp(m, n, x, src_dt):
    dt = n["dtype"]
    axis = n["axis"]
    axes = reduce_axes([axis] if isinstance(axis, int) else axis, x.ndim)
    x = m.as_dt(m.r16(x, src_dt), dt)
    top = np.max(x, axis=axes, keepdims=True) if x.ndim > 0 else x
    shift = np.where(np.abs(top) == np.inf, m.const(0, dt), top)  # an infinite max is not taken out
    out = flog(m, m.r16(np.sum(fexp(m, x - shift, dt), axis=axes, keepdims=True), dt), dt) + shift
    return out if n["keepdim"] else out.reshape([s for i, s in enumerate(x.shape) if i not in axes])


def sort_key(x, descending):
    """A key whose stable ascending order is x's order (descending: largest first, ties still lowest index first)."""
    if np.any(np.isnan(x)):
        raise Skip("sort of NaN: the order is undefined")
    k = x.astype(np.int64) if x.dtype != np.float32 and x.dtype != np.float64 else x
    return -k if descending else k


def sort_order(x, axis, descending):
    return np.argsort(sort_key(x, descending), axis=axis, kind="stable")


def topk(n, x):
    order = sort_order(x, n["axis"], n["largest"])
    idx = np.take(order, range(n["k"]), axis=n["axis"])
    return idx if n["take"] == "indices" else np.take_along_axis(x, idx, axis=n["axis"])


def einsum(m, n, a, b):
    dt = n["dtype"]
    # bools multiply and sum as int32 (tsgrad's mul is AND, its sum counts)
    work = "int32" if dt in ("bool", "int32") else "float32" if dt == "float16" else dt
    return m.r16(m.as_dt(np.einsum(n["formula"], m.as_dt(a, work), m.as_dt(b, work)), dt), dt)


def erf(m, x, dt):
    if m.wide:
        return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x
    # Tensor.erf: Abramowitz & Stegun 7.1.26
    c = lambda v: m.const(v, dt)
    t = c(1) / (np.abs(x) * c(0.3275911) + c(1))
    poly = (((((t * c(1.061405429) + c(-1.453152027)) * t + c(1.421413741)) * t + c(-0.284496736)) * t + c(0.254829592)) * t)
    return np.sign(x) * (c(1) - poly * fexp(m, -(x * x), dt))


def activation(m, n, x, src_dt):
    """Tensor's activations, as it composes them (sigmoid 1 / (1 + exp(-x)), tanh 2 sigmoid(2x) - 1, ...)."""
    fn, dt, param = n["fn"], n["dtype"], n.get("param")
    if dt == "int32":  # relu, relu6 and hardtanh with integer bounds stay integers
        lo, hi = {"relu": (0, None), "relu6": (0, 6)}.get(fn, tuple(param) if param else (-1, 1))
        return np.clip(x, lo, hi)
    fdt = dt
    c = lambda v: m.const(v, fdt)
    x = m.as_dt(x, fdt)

    def sigmoid(v):
        # tsgrad's overflow-free form: 1 / (1 + exp(-v)) at v >= 0, exp(v) / (exp(v) + 1) below
        positive = v >= c(0)
        above = c(1) / (c(1) + fexp(m, -np.where(positive, v, c(0)), fdt))
        e = fexp(m, np.where(positive, c(0), v), fdt)
        return np.where(positive, above, fdiv(m, e, e + c(1), fdt))

    def tanh(v):
        return np.tanh(v) if m.wide else sigmoid(v * c(2)) * c(2) - c(1)

    def softplus(v, beta=1):
        v = v * c(beta)
        return fdiv(m, np.maximum(v, c(0)) + np.log1p(fexp(m, -np.abs(v), fdt)), c(beta), fdt)

    def elu(v, alpha=1):
        return np.where(v > 0, v, np.expm1(np.minimum(v, c(0))) * c(alpha))

    if fn == "sigmoid":
        return sigmoid(x)
    if fn == "tanh":
        return tanh(x)
    if fn == "relu":
        return np.maximum(x, c(0))
    if fn == "silu":
        return x * sigmoid(x)
    if fn == "gelu":
        return x * c(0.5) * (erf(m, x * c(math.sqrt(0.5)), fdt) + c(1))
    if fn == "geluTanh":
        # x * x * x is an integer product for an integer x
        cube = m.as_dt(np.asarray(x, dtype=np.int32) ** 3, fdt) if src_dt == "int32" else x * x * x
        return x * c(0.5) * (tanh((x + cube * c(0.044715)) * c(math.sqrt(2 / math.pi))) + c(1))
    if fn == "softplus":
        return softplus(x, param if param is not None else 1)
    if fn == "elu":
        return elu(x, param if param is not None else 1)
    if fn == "selu":
        return elu(x, 1.6732632423543772) * c(1.0507009873554805)
    if fn == "leakyRelu":
        return np.where(x > 0, x, x * c(param if param is not None else 0.01))
    if fn == "relu6":
        return np.minimum(np.maximum(x, c(0)), c(6))
    if fn == "hardtanh":
        lo, hi = param if param else (-1, 1)
        return np.minimum(np.maximum(x, c(lo)), c(hi))
    if fn == "hardsigmoid":
        return fdiv(m, np.minimum(np.maximum(x + c(3), c(0)), c(6)), c(6), fdt)
    if fn == "hardswish":
        return x * fdiv(m, np.minimum(np.maximum(x + c(3), c(0)), c(6)), c(6), fdt)
    if fn == "mish":
        return x * tanh(softplus(x))
    if fn == "logsigmoid":
        return -softplus(-x)
    raise ValueError(fn)


def interpolate(m, n, x):
    """PyTorch's F.interpolate: legacy nearest (floor of o * scale, in float32), linear with its source-index rule
    (in float32), axes from the last, each output reading its one or two sources only."""
    mode, dt = n["mode"], n["dtype"]
    spatial = x.ndim - 2
    sf = n.get("scaleFactor")
    scales = None if sf is None else ([sf] * spatial if isinstance(sf, (int, float)) else sf)
    align = bool(n.get("alignCorners"))
    f32 = np.float32
    for d in reversed(range(spatial)):
        axis, size_in, size_out = 2 + d, x.shape[2 + d], n["shape"][2 + d]
        if mode == "nearest" and size_out % size_in == 0 and (not scales or scales[d] == size_out / size_in):
            x = np.repeat(x, size_out // size_in, axis=axis)  # a whole factor: a view in tsgrad (an expand)
            continue
        # the picked values are a gather's (a sum's) results, in the node's dtype: float16 ones rounded
        x = m.r16(x, dt)
        if mode == "nearest":
            scale = f32(1.0 / scales[d]) if scales else f32(size_in / size_out)
            idx = [min(int(np.floor(f32(o) * scale)), size_in - 1) for o in range(size_out)]
            x = np.take(x, idx, axis=axis)
            continue
        if align:
            scale = f32((size_in - 1) / (size_out - 1) if size_out > 1 else 0.0)
        else:
            scale = f32(1.0 / scales[d] if scales else size_in / size_out)
        low, high, lam = [], [], []
        for o in range(size_out):
            src = scale * f32(o) if align else max(scale * f32(o + 0.5) - f32(0.5), f32(0))
            i = min(int(math.floor(src)), size_in - 1)
            low.append(i)
            high.append(i + 1 if i < size_in - 1 else i)
            lam.append(f32(src - f32(i)))
        shape = [1] * x.ndim
        shape[axis] = size_out
        # the weights are float32 (float64 for a wide model), the mix rounded once to the node's dtype
        l1 = np.array(lam, dtype=m.ft).reshape(shape)
        l0 = np.array([f32(1) - v for v in lam], dtype=m.ft).reshape(shape)
        x = m.r16(np.take(x, low, axis=axis) * l0 + np.take(x, high, axis=axis) * l1, dt)
    return x


def pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


ORDER = ["bool", "int32", "float16", "float32"]


def matmul_dtype(a, b):
    """A matmul's dtype: the promoted one, bools summed as int32."""
    d = max(a, b, key=ORDER.index)
    return "int32" if d == "bool" else d


def conv2d(m, n, x, w, bias, dts):
    """PyTorch's conv2d (cross-correlation): a sum over the kernel's taps of a strided view times the tap's weights."""
    dt = n["dtype"]
    mdt = matmul_dtype(dts[0], dts[1])  # the product's dtype (before the bias)
    product = "float32" if mdt == "float16" else mdt
    (sh, sw), (ph, pw), (dh, dw), groups = pair(n["stride"]), pair(n["padding"]), pair(n["dilation"]), n["groups"]
    x = np.pad(m.as_dt(x, product), ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    w = m.as_dt(w, product)
    batch, channels, height, width = x.shape
    filters, per_group, kh, kw = w.shape
    oh, ow = n["shape"][2], n["shape"][3]
    out = np.zeros((batch, filters, oh, ow), dtype=m.ctype(product))
    fg = filters // groups
    for g in range(groups):
        xs, ws = x[:, g * per_group:(g + 1) * per_group], w[g * fg:(g + 1) * fg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh, j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * fg:(g + 1) * fg] += np.einsum("bchw,fc->bfhw", patch, ws[:, :, i, j])
    out = m.r16(out, mdt)
    if bias is not None:
        out = m.as_dt(out, dt) + m.as_dt(bias, dt).reshape(1, -1, 1, 1)
    return out


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
        elif op == "cummax":
            v = np.maximum.accumulate(m.r16(args[0], dts[0]), axis=n["axis"])
        elif op == "softmax":
            v = softmax(m, n, args[0], dts[0])
        elif op == "logsumexp":
            v = logsumexp(m, n, args[0], dts[0])
        elif op in ("sort", "argsort"):
            order = sort_order(args[0], n["axis"], n["descending"])
            v = np.take_along_axis(args[0], order, axis=n["axis"]) if n.get("take") == "values" else order
        elif op == "topk":
            v = topk(n, args[0])
        elif op == "einsum":
            v = einsum(m, n, args[0], args[1])
        elif op == "act":
            v = activation(m, n, args[0], dts[0])
        elif op == "interpolate":
            v = interpolate(m, n, args[0])
        elif op == "conv2d":
            v = conv2d(m, n, args[0], args[1], args[2] if len(args) > 2 else None, dts)
        elif op in ("contiguous", "realize"):
            v = m.r16(args[0], dt)
        else:
            raise ValueError(f"unknown op {op}")
        v = np.array(m.as_dt(v, dt))  # a copy, contiguous, 0-d kept 0-d
        if m.round_all:
            v = m.r16(v, dt)
        if dt == "float16" and not m.wide and np.any(np.isfinite(v) & (np.abs(v) > F16_MAX)):
            # finite in float32, infinite once stored as float16: where tsgrad stores it (the scheduler's choice) decides
            raise Skip("a float16 value beyond float16's range")
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


# |value| from which float64 rounding (an ulp of 2e-5 at 1e11) swallows a difference step of h = 5e-5
ABSORBED = 1e11


def finite_differences(prog):
    """d(sum(out * w))/d(input element), float64, for every float32 input, with steps h and h/2.

    The outputs are differenced before they are weighted and summed: outputs the element does not reach cancel
    exactly, however large they are (exp of exp), instead of drowning the difference in the sum's rounding. An element
    is smooth where the two steps agree and no integer or bool value of the program (a cast, a comparison, sort
    indices) differs between its two sides: a steep value cast to int32 jumps at both step sizes alike.
    """
    m = Model(wide=True)
    w = np.array(prog["weights"], dtype=np.float64).reshape(prog["nodes"][-1]["shape"])

    discrete = [k for k, n in enumerate(prog["nodes"]) if n["op"] != "input" and n["dtype"] in ("bool", "int32")]

    def out(inputs):
        """The output, and the program's integer and bool values (None where the program is undefined)."""
        try:
            vals = evaluate(m, prog, inputs)
            return vals[-1].astype(np.float64), [vals[k] for k in discrete]
        except Skip:
            return np.full(w.shape, math.nan), None

    # a value beyond ABSORBED (exp of exp) swallows a step of h added to it in float64: the output does not move,
    # and the difference reads as 0 however much the element matters (t - y with t near 1e26: y's gradient is -w,
    # its differences 0). Both steps agree on that 0, so the program's differences are not trusted at all.
    try:
        absorbed = any(v.dtype.kind == "f" and np.any(np.isfinite(v) & (np.abs(v) > ABSORBED)) for v in evaluate(m, prog))
    except Skip:
        absorbed = False
    grads = []
    for i, n in enumerate(prog["nodes"]):
        if n["op"] != "input" or n["dtype"] != "float32":
            continue
        base = np.array(n["data"], dtype=np.float64)
        fd, smooth = [], []
        for j in range(base.size):
            d, jump = [], False
            for h in (1e-4, 5e-5):
                up, down = base.copy(), base.copy()
                up[j] += h
                down[j] -= h
                (hi, hi_discrete), (lo, lo_discrete) = out({i: up}), out({i: down})
                diff = hi - lo
                d.append(float(np.sum(np.where(diff == 0, 0.0, diff * w))) / (2 * h))
                jump = jump or hi_discrete is None or lo_discrete is None or any(not np.array_equal(a, b) for a, b in zip(hi_discrete, lo_discrete))
            ok = not absorbed and not jump and all(math.isfinite(x) for x in d) and abs(d[0] - d[1]) <= 1e-5 + 1e-4 * abs(d[1])
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
        if any(n["dtype"] == "float16" for n in prog["nodes"]):
            try:
                result["out16"] = encode(evaluate(Model(wide=False, round_all=True), prog)[-1])
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
