#!/usr/bin/env python3
"""PyTorch's values and gradients for tsgrad's ops: writes test/conformance/torch_cases.safetensors.

Only for regenerating that file; the test that reads it (test/conformance/torch.test.ts) needs no PyTorch.
On Debian 12 (PyTorch 1.13, CPU):

    apt-get install -y python3-torch
    /usr/bin/python3 scripts/conformance/generate.py

Each case names a tsgrad op (the test maps the name to tsgrad, this file to PyTorch), its arguments, its inputs,
PyTorch's outputs and, for float32 cases, the gradient of sum(output * cotangent) with respect to each float
input, the cotangent drawn at random. float16 cases are computed in float32 and rounded to float16, which is
what tsgrad promises. Integer outputs PyTorch gives as int64 are stored as int32 (their dtype is kept in the
index). Seeds are fixed: the same PyTorch writes the same file.
"""

import json
import math
import os
import struct

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "test", "conformance", "torch_cases.safetensors")

gen = torch.Generator().manual_seed(36)
NAN, INF = math.nan, math.inf


# ---------------------------------------------------------------- inputs


def uniform(*shape, lo=-2.0, hi=2.0, dtype=torch.float32):
    return (torch.rand(shape, generator=gen) * (hi - lo) + lo).to(dtype)


def normal(*shape):
    return torch.randn(shape, generator=gen)


def positive(*shape, lo=0.1, hi=3.0):
    return uniform(*shape, lo=lo, hi=hi)


def ints(*shape, lo=-9, hi=10, dtype=torch.int32):
    return torch.randint(lo, hi, shape, generator=gen).to(dtype)


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def distinct(*shape):
    """Values without ties (a permutation of a range, scaled): sort, topk, max-pool gradients need no tie rule."""
    n = math.prod(shape)
    return (torch.randperm(n, generator=gen).float() / 4 - n / 8).reshape(shape)


class In:
    """An input: its data and how the op sees it (`view`: "T" swaps the last two axes, "step2" takes every
    second element of the last axis: non-contiguous views of the stored tensor)."""

    def __init__(self, data, view=None, grad=True):
        self.data, self.view, self.grad = data, view, grad


def seen(x, view):
    if view is None:
        return x
    if view == "T":
        return x.transpose(-1, -2)
    if view == "step2":
        return x[..., ::2]
    raise ValueError(view)


# ---------------------------------------------------------------- PyTorch's side of each op

TORCH = {}


def op(*names):
    def register(fn):
        for name in names:
            TORCH[name] = fn
        return fn

    return register


UNARY = {
    "neg": torch.neg,
    "reciprocal": torch.reciprocal,
    "sqrt": torch.sqrt,
    "rsqrt": torch.rsqrt,
    "exp": torch.exp,
    "exp2": torch.exp2,
    "log": torch.log,
    "log2": torch.log2,
    "sin": torch.sin,
    "cos": torch.cos,
    "tanh": torch.tanh,
    "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "abs": torch.abs,
    "sign": torch.sign,
    "erf": torch.erf,
    "erfinv": torch.erfinv,
    "square": torch.square,
    "trunc": torch.trunc,
    "floor": torch.floor,
    "ceil": torch.ceil,
    "round": torch.round,
    "log1p": torch.log1p,
    "expm1": torch.expm1,
    "silu": F.silu,
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "selu": F.selu,
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "logicalNot": torch.logical_not,
    "contiguous": lambda x: x.contiguous(),
}
for _name, _fn in UNARY.items():
    TORCH[_name] = lambda xs, a, fn=_fn: fn(xs[0])

op("gelu")(lambda xs, a: F.gelu(xs[0], approximate=a.get("approximate", "none")))
op("leakyRelu")(lambda xs, a: F.leaky_relu(xs[0], a["slope"]))
op("hardtanh")(lambda xs, a: F.hardtanh(xs[0], a["min"], a["max"]))
op("elu")(lambda xs, a: F.elu(xs[0], a["alpha"]))
op("softplus")(lambda xs, a: F.softplus(xs[0], a["beta"]))
op("clip")(lambda xs, a: torch.clamp(xs[0], a["min"], a["max"]))
op("cast")(lambda xs, a: xs[0].to(getattr(torch, a["dtype"])))
op("bitcast")(lambda xs, a: xs[0].view(getattr(torch, a["dtype"])))
op("shl")(lambda xs, a: torch.bitwise_left_shift(xs[0], a["bits"]))
op("shr")(lambda xs, a: torch.bitwise_right_shift(xs[0], a["bits"]))

BINARY = {
    "add": torch.add,
    "sub": torch.sub,
    "mul": torch.mul,
    "div": torch.true_divide,
    "idiv": lambda x, y: torch.div(x, y, rounding_mode="trunc"),
    "mod": torch.fmod,  # tsgrad's mod truncates, as C's % (PyTorch's % floors: torch.remainder)
    "maximum": torch.maximum,
    "minimum": torch.minimum,
    "pow": torch.pow,
    "lt": torch.lt,
    "le": torch.le,
    "gt": torch.gt,
    "ge": torch.ge,
    "eq": torch.eq,
    "ne": torch.ne,
    "logicalAnd": torch.logical_and,
    "logicalOr": torch.logical_or,
    "bitwiseAnd": torch.bitwise_and,
    "bitwiseOr": torch.bitwise_or,
    "bitwiseXor": torch.bitwise_xor,
}


def binary(fn):
    def run(xs, a):
        if "scalar" in a:
            scalar = a["scalar"]
            if fn in (torch.maximum, torch.minimum):  # these take tensors only
                scalar = torch.tensor(scalar, dtype=xs[0].dtype)
            return fn(xs[0], scalar)
        return fn(xs[0], xs[1])

    return run


for _name, _fn in BINARY.items():
    TORCH[_name] = binary(_fn)


@op("where")
def _where(xs, a):
    rest = iter(xs[1:])
    x = a["a"] if "a" in a else next(rest)
    y = a["b"] if "b" in a else next(rest)
    like = next((v for v in (x, y) if isinstance(v, torch.Tensor)), None)
    as_tensor = lambda v: v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=like.dtype if like is not None else torch.float32)
    return torch.where(xs[0], as_tensor(x), as_tensor(y))


# reductions: axis None is every axis; a list is several


def dims(x, a):
    axis = a.get("axis")
    if axis is None:
        return list(range(x.ndim))
    return axis if isinstance(axis, list) else [axis]


def one_by_one(fn, x, axes, keepdim):
    """For PyTorch reductions that take one axis at a time: the axes from the last, so indices stay valid."""
    for d in sorted((d % max(x.ndim, 1) for d in axes), reverse=True):
        x = fn(x, d, keepdim=keepdim)
    return x


def reduction(fn, several=True):
    def run(xs, a):
        x, keepdim = xs[0], a.get("keepdim", False)
        axes = dims(x, a)
        if x.ndim == 0:
            return fn(x, axes[0] if axes else 0, keepdim=keepdim) if several or axes else x
        if not axes:
            return x
        if several:
            return fn(x, axes, keepdim=keepdim)
        return one_by_one(fn, x, axes, keepdim)

    return run


TORCH["sum"] = reduction(lambda x, d, keepdim: torch.sum(x, d, keepdim=keepdim))
TORCH["mean"] = reduction(lambda x, d, keepdim: torch.mean(x, d, keepdim=keepdim))
TORCH["max"] = reduction(lambda x, d, keepdim: torch.amax(x, d, keepdim=keepdim))
TORCH["min"] = reduction(lambda x, d, keepdim: torch.amin(x, d, keepdim=keepdim))
TORCH["logsumexp"] = reduction(lambda x, d, keepdim: torch.logsumexp(x, d, keepdim=keepdim))
TORCH["prod"] = reduction(lambda x, d, keepdim: torch.prod(x, d, keepdim=keepdim), several=False)
TORCH["any"] = reduction(lambda x, d, keepdim: torch.any(x, d, keepdim=keepdim), several=False)
TORCH["all"] = reduction(lambda x, d, keepdim: torch.all(x, d, keepdim=keepdim), several=False)


def spread(fn):
    def run(xs, a):
        x = xs[0]
        kw = dict(correction=a.get("correction", 1), keepdim=a.get("keepdim", False))
        return fn(x, None if a.get("axis") is None else dims(x, a), **kw)

    return run


TORCH["var"] = spread(torch.var)
TORCH["std"] = spread(torch.std)


@op("norm")
def _norm(xs, a):
    x = xs[0]
    return torch.linalg.vector_norm(x, a.get("ord", 2), dim=dims(x, a), keepdim=a.get("keepdim", False))


TORCH["argmax"] = lambda xs, a: torch.argmax(xs[0], a.get("axis"), keepdim=a.get("keepdim", False))
TORCH["argmin"] = lambda xs, a: torch.argmin(xs[0], a.get("axis"), keepdim=a.get("keepdim", False))
op("cumsum")(lambda xs, a: torch.cumsum(xs[0], a["axis"]))
op("cummax")(lambda xs, a: torch.cummax(xs[0], a["axis"]).values)
op("topk")(
    lambda xs, a: tuple(torch.topk(xs[0], a["k"], a.get("axis", -1), largest=a.get("largest", True), sorted=True))
)
op("sort")(
    lambda xs, a: tuple(torch.sort(xs[0], dim=a.get("axis", -1), descending=a.get("descending", False), stable=True))
)
op("argsort")(
    lambda xs, a: torch.sort(xs[0], dim=a.get("axis", -1), descending=a.get("descending", False), stable=True).indices
)

# movement

op("reshape")(lambda xs, a: xs[0].reshape(a["shape"]))
op("permute")(lambda xs, a: xs[0].permute(a["order"]))
op("transpose")(lambda xs, a: xs[0].transpose(a["dim0"], a["dim1"]))
op("expand")(lambda xs, a: xs[0].expand(a["shape"]))
op("flip")(lambda xs, a: torch.flip(xs[0], a["axis"] if isinstance(a["axis"], list) else [a["axis"]]))
op("squeeze")(lambda xs, a: xs[0].squeeze(a["axis"]) if "axis" in a else xs[0].squeeze())
op("unsqueeze")(lambda xs, a: xs[0].unsqueeze(a["axis"]))
op("flatten")(lambda xs, a: torch.flatten(xs[0], a.get("start", 0), a.get("end", -1)))
op("repeat")(lambda xs, a: xs[0].repeat(a["reps"]))
op("tril")(lambda xs, a: torch.tril(xs[0], a.get("diagonal", 0)))
op("triu")(lambda xs, a: torch.triu(xs[0], a.get("diagonal", 0)))
op("gather")(lambda xs, a: torch.gather(xs[0], a["axis"], xs[1].long()))
op("cat")(lambda xs, a: torch.cat(xs, a.get("axis", 0)))
op("stack")(lambda xs, a: torch.stack(xs, a.get("axis", 0)))
op("split")(lambda xs, a: tuple(torch.split(xs[0], a["sizes"], a.get("axis", 0))))
op("chunk")(lambda xs, a: tuple(torch.chunk(xs[0], a["chunks"], a.get("axis", 0))))


@op("shrink")
def _shrink(xs, a):
    return xs[0][tuple(slice(None) if b is None else slice(b[0], b[1]) for b in a["bounds"])]


@op("pad")
def _pad(xs, a):
    x = xs[0]
    flat = [p for pair in reversed([b or [0, 0] for b in a["pads"]]) for p in pair]
    mode = a.get("mode", "constant")
    if mode == "constant":
        return F.pad(x, flat, value=a.get("value", 0))
    # PyTorch pads the last 1-3 axes of a [batch, channels, ...] input in these modes: the axes not padded as one
    while flat[-2:] == [0, 0]:
        flat = flat[:-2]
    lead = x.ndim - len(flat) // 2
    out = F.pad(x.reshape([-1, 1, *x.shape[lead:]]), flat, mode=mode)
    return out.reshape([*x.shape[:lead], *out.shape[2:]])


@op("index")
def _index(xs, a):
    """numpy's basic indexing by index_select, which takes any step (PyTorch's slices take no negative one)."""
    x = xs[0]
    spec = a["spec"]
    real = sum(1 for s in spec if s is not None and s != "...")
    if "..." in spec:
        at = spec.index("...")
        spec = spec[:at] + [[]] * (x.ndim - real) + spec[at + 1 :]
    else:
        spec = spec + [[]] * (x.ndim - real)
    axis = 0
    for s in spec:
        if s is None:
            x = x.unsqueeze(axis)
            axis += 1
        elif isinstance(s, int):
            x = x.select(axis, s)
        else:
            start, stop, step = (list(s) + [None, None, None])[:3]
            picks = list(range(*slice(start, stop, step).indices(x.shape[axis])))
            x = x.index_select(axis, torch.tensor(picks, dtype=torch.long))
            axis += 1
    return x


# neural-network ops

op("matmul", "dot")(lambda xs, a: torch.matmul(xs[0], xs[1]))
op("linear", "nn.Linear")(lambda xs, a: F.linear(*xs))
op("softmax")(lambda xs, a: torch.softmax(xs[0], a.get("axis", -1)))
op("logSoftmax")(lambda xs, a: torch.log_softmax(xs[0], a.get("axis", -1)))
op("einsum")(lambda xs, a: torch.einsum(a["formula"], *xs))
op("oneHot")(lambda xs, a: F.one_hot(xs[0].long(), a["numClasses"]))
op("embedding", "nn.Embedding")(lambda xs, a: F.embedding(xs[0].long(), xs[1]))
op("mseLoss")(lambda xs, a: F.mse_loss(xs[0], xs[1], reduction=a.get("reduction", "mean")))
op("l1Loss")(lambda xs, a: F.l1_loss(xs[0], xs[1], reduction=a.get("reduction", "mean")))
op("binaryCrossentropy")(lambda xs, a: F.binary_cross_entropy(xs[0], xs[1], reduction=a.get("reduction", "mean")))


@op("layerNorm")
def _layer_norm(xs, a):
    x, eps = xs[0], a.get("eps", 1e-5)
    axes = dims(x, {"axis": a.get("axis", -1)})
    mean = x.mean(axes, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(axes, correction=0, keepdim=True) + eps)


op("nn.LayerNorm")(lambda xs, a: F.layer_norm(xs[0], [xs[0].shape[-1]], xs[1], xs[2], a.get("eps", 1e-5)))
op("nn.GroupNorm")(lambda xs, a: F.group_norm(xs[0], a["groups"], xs[1], xs[2], a.get("eps", 1e-5)))


@op("nn.RMSNorm")
def _rms_norm(xs, a):
    x = xs[0]
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + a.get("eps", 1e-6)) * xs[1]


@op("nn.BatchNorm")
def _batch_norm(xs, a):
    """Training mode: the batch's statistics, and the running ones after the step (from zeros and ones)."""
    channels = xs[0].shape[1]
    mean, var = torch.zeros(channels), torch.ones(channels)
    momentum, eps = a.get("momentum", 0.1), a.get("eps", 1e-5)
    out = F.batch_norm(xs[0], mean, var, xs[1], xs[2], training=True, momentum=momentum, eps=eps)
    return out, mean, var


@op("sparseCategoricalCrossentropy")
def _sparse_xent(xs, a):
    logits, labels = xs[0], xs[1].long()
    ignore, smoothing = a.get("ignoreIndex", -1), a.get("labelSmoothing", 0.0)
    classes = logits.shape[-1]
    loss = F.cross_entropy(
        logits.reshape(-1, classes),
        labels.reshape(-1),
        reduction="none",
        ignore_index=ignore,
        label_smoothing=smoothing,
    ).reshape(labels.shape)
    weight = (labels != ignore).float()
    if len(xs) > 2:
        weight = weight * xs[2]
        loss = loss * xs[2]
    reduction = a.get("reduction", "mean")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / weight.sum().clamp(min=1e-12)


op("crossEntropy")(
    lambda xs, a: F.cross_entropy(
        xs[0], xs[1], reduction=a.get("reduction", "mean"), label_smoothing=a.get("labelSmoothing", 0.0)
    )
)


@op("binaryCrossentropyLogits")
def _bce_logits(xs, a):
    pos = a.get("posWeight")
    pos_weight = xs[2] if len(xs) > 2 else (torch.tensor(pos) if pos is not None else None)
    return F.binary_cross_entropy_with_logits(xs[0], xs[1], reduction=a.get("reduction", "mean"), pos_weight=pos_weight)


@op("scaledDotProductAttention")
def _attention(xs, a):
    q, k, v = xs[:3]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if len(xs) > 3:
        mask = xs[3]
        scores = scores.masked_fill(~mask, -INF) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, -1) @ v


CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
op("conv2d", "nn.Conv2d")(
    lambda xs, a: CONV[xs[1].ndim - 2](
        xs[0],
        xs[1],
        xs[2] if len(xs) > 2 else None,
        a.get("stride", 1),
        a.get("padding", 0),
        a.get("dilation", 1),
        a.get("groups", 1),
    )
)
op("convTranspose2d")(
    lambda xs, a: CONV_T[xs[1].ndim - 2](
        xs[0],
        xs[1],
        xs[2] if len(xs) > 2 else None,
        a.get("stride", 1),
        a.get("padding", 0),
        a.get("outputPadding", 0),
        a.get("groups", 1),
        a.get("dilation", 1),
    )
)
op("maxPool2d")(
    lambda xs, a: F.max_pool2d(xs[0], a["kernel"], a.get("stride"), a.get("padding", 0), a.get("dilation", 1))
)
op("avgPool2d")(lambda xs, a: F.avg_pool2d(xs[0], a["kernel"], a.get("stride"), a.get("padding", 0)))
op("interpolate")(
    lambda xs, a: F.interpolate(
        xs[0],
        size=a.get("size"),
        scale_factor=a.get("scaleFactor"),
        mode=a.get("mode", "nearest"),
        align_corners=a.get("alignCorners"),
    )
)

# creation (no inputs)

op("arange")(lambda xs, a: torch.arange(a["start"], a["stop"], a.get("step", 1)))
op("linspace")(lambda xs, a: torch.linspace(a["start"], a["end"], a["steps"]))
op("eye")(lambda xs, a: torch.eye(a["n"], a.get("m", a["n"])))
op("full")(lambda xs, a: torch.full(a["shape"], a["value"]))
op("zeros")(lambda xs, a: torch.zeros(a["shape"]))
op("ones")(lambda xs, a: torch.ones(a["shape"]))

# ---------------------------------------------------------------- the cases

STORED = {
    torch.float32: "F32",
    torch.float16: "F16",
    torch.int32: "I32",
    torch.int64: "I32",  # PyTorch's indices and integer results; all fit
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
DTYPE_NAME = {
    torch.float32: "float32",
    torch.float16: "float16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.int16: "int16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bool: "bool",
}

cases = []
tensors = {}


def store(name, x):
    x = x.detach()
    if x.dtype == torch.int64:
        assert x.numel() == 0 or (x.abs().max() < 2**31), name
        x = x.to(torch.int32)
    tensors[name] = x.contiguous()
    return name


def case(name, inputs=(), args=None, *, tag="", grad=True, tol=None, native=False):
    """One case of op `name`: PyTorch's outputs and gradients. float16 is computed in float32 and rounded, unless
    `native` (PyTorch's own float16 op: for dtype promotion)."""
    args = args or {}
    inputs = [x if isinstance(x, In) else In(x) for x in inputs]
    n = len(cases)
    floats = [x.data.dtype for x in inputs if x.data.is_floating_point()]
    half = not native and floats and all(d == torch.float16 for d in floats)
    leaves = []
    for x in inputs:
        data = x.data.float() if half and x.data.dtype == torch.float16 else x.data.clone()
        wants = grad and not half and x.grad and data.is_floating_point()
        leaves.append(data.requires_grad_(wants))
    result = TORCH[name]([seen(leaf, x.view) for leaf, x in zip(leaves, inputs)], args)
    outs = list(result) if isinstance(result, tuple) else [result]
    if half:
        outs = [o.half() if o.is_floating_point() else o for o in outs]
    entry = {
        "op": name,
        "args": args,
        "tag": tag,
        "inputs": [
            {"dtype": DTYPE_NAME[x.data.dtype], "shape": list(x.data.shape), "view": x.view} for x in inputs
        ],
        "outputs": [{"dtype": DTYPE_NAME[o.dtype], "shape": list(o.shape)} for o in outs],
    }
    for j, x in enumerate(inputs):
        store(f"{n}.x{j}", x.data)
    for k, o in enumerate(outs):
        store(f"{n}.y{k}", o)
    differentiable = [k for k, o in enumerate(outs) if o.requires_grad]
    if any(leaf.requires_grad for leaf in leaves) and differentiable:
        loss = 0
        for k in differentiable:
            cotangent = normal(*outs[k].shape)
            store(f"{n}.c{k}", cotangent)
            loss = loss + (outs[k] * cotangent).sum()
        loss.backward()
        entry["cotangents"] = differentiable
        entry["grads"] = []
        for j, leaf in enumerate(leaves):
            if leaf.requires_grad:
                store(f"{n}.g{j}", leaf.grad if leaf.grad is not None else torch.zeros_like(leaf))
                entry["grads"].append(j)
    if tol:
        entry["tol"] = tol
    cases.append(entry)


def write(path):
    header, offset, blobs = {}, 0, []
    for name, x in tensors.items():
        data = stored_bytes(x)
        header[name] = {"dtype": STORED[x.dtype], "shape": list(x.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"cases": json.dumps(cases, separators=(",", ":"))}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def stored_bytes(x):
    if x.dtype == torch.bool:
        return x.to(torch.uint8).numpy().tobytes()
    return x.numpy().astype(x.numpy().dtype.newbyteorder("<")).tobytes()


EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5, 3.0, -3.0, 6.0, 100.0, -100.0, INF, -INF, NAN]
# gradients at inf and NaN are whatever each formula happens to give: the gradient cases take the finite edges
FINITE_EDGES = [x for x in EDGES if math.isfinite(x)]
DOMAIN = {  # where an op's random inputs are drawn: in its domain, away from poles
    "sqrt": (0.1, 4),
    "rsqrt": (0.1, 4),
    "log": (0.1, 4),
    "log2": (0.1, 4),
    "reciprocal": (0.5, 3),
    "erfinv": (-0.95, 0.95),
    "log1p": (-0.9, 3),
}


def elementwise():
    for name in UNARY:
        if name in ("logicalNot", "contiguous"):
            continue
        lo, hi = DOMAIN.get(name, (-3, 3))
        case(name, [uniform(3, 4, lo=lo, hi=hi)])
        case(name, [t(EDGES)], tag="edges", grad=False)
        case(name, [t(FINITE_EDGES)], tag="finite edges")
    for name, args in [
        ("gelu", {}),
        ("gelu", {"approximate": "tanh"}),
        ("leakyRelu", {"slope": 0.1}),
        ("hardtanh", {"min": -1, "max": 1}),
        ("hardtanh", {"min": -0.5, "max": 2}),
        ("elu", {"alpha": 1}),
        ("elu", {"alpha": 0.5}),
        ("softplus", {"beta": 1}),
        ("softplus", {"beta": 2}),
        ("clip", {"min": -1, "max": 1}),
        ("clip", {"min": 0, "max": 6}),
    ]:
        case(name, [uniform(3, 4, lo=-3, hi=3)], args)
        case(name, [t(EDGES + [-1.0, 1.0, 2.0, -0.5])], args, tag="edges and bounds", grad=False)
        case(name, [t(FINITE_EDGES + [-1.0, 1.0, 2.0, -0.5])], args, tag="finite edges and bounds")
    # large arguments: the argument reduction must be exact, not a shifted sin
    large = t([1e4, -1e4, 12345.678, 1e5, 314159.25, 1e6, -1e6, 3e6, 16777216.0, 1e10])
    for name in ("sin", "cos"):
        case(name, [large], tag="large arguments")
        case(name, [uniform(64, lo=-1000, hi=1000)], tag="to 1000")
    case("tanh", [t([-20.0, -10.0, -1e-4, 1e-4, 10.0, 20.0, 50.0])], tag="saturated")
    case("sigmoid", [t([-100.0, -20.0, -1e-4, 1e-4, 20.0, 100.0])], tag="saturated")
    case("softplus", [t([-100.0, -20.0, 0.0, 19.0, 21.0, 100.0])], {"beta": 1}, tag="saturated")
    case("logsigmoid", [t([-200.0, -50.0, 0.0, 50.0])], tag="saturated")
    case("log1p", [t([1e-10, -1e-10, 1e-6, -0.999, -1.0, -2.0, 1e30])], tag="tiny and poles")
    case("expm1", [t([1e-10, -1e-10, 1e-6, -30.0, 80.0, 100.0, -INF])], tag="tiny and overflow")
    case("exp", [t([88.0, 89.0, -104.0, -110.0])], tag="overflow and underflow")
    case("round", [t([0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 0.49999997, 8388609.0, -8388609.0])], tag="halves")
    case("erfinv", [t([-1.0, 1.0, 0.0, 0.999, -0.999, 1.5])], tag="bounds")
    # 0-d, empty and non-contiguous inputs
    for name in ("exp", "relu", "sin", "abs"):
        case(name, [t(0.7 if name != "abs" else -0.7)], tag="0-d")
        case(name, [uniform(0, 3)], tag="empty")
        case(name, [In(uniform(4, 3), view="T")], tag="transposed view")
    case("sqrt", [In(positive(3, 8), view="step2")], tag="strided view")
    case("contiguous", [In(uniform(4, 3), view="T")], tag="transposed view")
    # float16: computed in float32 and rounded
    for name in ("neg", "sqrt", "exp", "log", "sin", "cos", "tanh", "sigmoid", "relu", "abs", "erf", "square",
                 "round", "floor", "reciprocal", "silu", "gelu", "expm1", "log1p"):
        lo, hi = DOMAIN.get(name, (-3, 3))
        case(name, [uniform(3, 4, lo=lo, hi=hi, dtype=torch.float16)], tag="float16")
    case("exp", [t([10.0, 11.0, 12.0, -20.0], torch.float16)], tag="float16 overflow")
    # integers: PyTorch keeps the dtype, or gives the default float
    for name in ("neg", "abs", "sign", "square", "relu", "trunc", "floor", "ceil", "round", "sqrt", "exp", "sin"):
        case(name, [ints(3, 4, lo=0 if name in ("sqrt",) else -9)], tag="int32")
    case("logicalNot", [t([[True, False], [False, False]], torch.bool)])
    case("logicalNot", [t([0.0, 1.0, -2.0, NAN])], tag="float")
    for dtype, values in [
        ("int32", [-2.7, -0.5, 0.0, 0.9, 2.5, 1e9]),
        ("bool", [0.0, -0.0, 0.1, -3.0, NAN]),
        ("float16", [1.0, 1e-3, 65504.0, 70000.0, 1e-8, -1e6, 0.1, NAN]),
        ("uint8", [0.0, 1.5, 200.0, 255.0]),
        ("int8", [-128.0, 127.0, 3.7]),
    ]:
        case("cast", [t(values)], {"dtype": dtype}, tag=f"float32 to {dtype}", native=True)
    case("cast", [ints(5)], {"dtype": "float32"}, tag="int32 to float32")
    case("cast", [t([0, 3, -1], torch.int32)], {"dtype": "bool"}, tag="int32 to bool")
    case("cast", [t([300, -200, 127], torch.int32)], {"dtype": "int8"}, tag="int32 to int8 wraps")
    case("cast", [t([True, False], torch.bool)], {"dtype": "float32"}, tag="bool to float32")
    case("cast", [uniform(5, dtype=torch.float16)], {"dtype": "float32"}, tag="float16 to float32", native=True)
    case("cast", [uniform(3, 4)], {"dtype": "float16"}, tag="float32 to float16 (gradient)")
    case("bitcast", [t([1.0, -2.0, 0.0, INF])], {"dtype": "int32"}, tag="float32 to int32")
    case("bitcast", [t([1065353216, -1, 0], torch.int32)], {"dtype": "float32"}, tag="int32 to float32")


def binaries():
    shapes = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (3,)), ((2, 0, 3), (1, 3))]
    for name in ("add", "sub", "mul", "div", "maximum", "minimum"):
        for a, b in shapes:
            case(name, [uniform(*a), uniform(*b, lo=0.5) if name == "div" else uniform(*b)], tag=f"{list(a)} {list(b)}")
        case(name, [uniform(3, 4)], {"scalar": 1.5}, tag="scalar")
        case(name, [In(uniform(4, 3), view="T"), uniform(3, 4)], tag="transposed view")
        case(name, [ints(3, 4), ints(3, 4, lo=1)], tag="int32")
    case("div", [t([1.0, -1.0, 0.0, INF, 1.0]), t([0.0, 0.0, 0.0, INF, -0.0])], tag="by zero")
    for name in ("maximum", "minimum"):
        case(name, [t([1.0, 2.0, -0.0, 3.0]), t([1.0, -2.0, 0.0, 3.0])], tag="ties")
        case(name, [t([NAN, 1.0, NAN, INF]), t([1.0, NAN, NAN, -INF])], tag="NaN", grad=False)
        case(name, [uniform(3, 4), uniform(3, 4, dtype=torch.float16)], tag="float16")
    case("add", [uniform(3, 4, dtype=torch.float16), uniform(3, 4, dtype=torch.float16)], tag="float16")
    case("mul", [uniform(3, 4, dtype=torch.float16), uniform(4, dtype=torch.float16)], tag="float16")
    case("div", [uniform(3, 4, dtype=torch.float16), positive(3, 4).half()], tag="float16")
    case("mul", [t(60000.0, torch.float16), t([2.0, -2.0], torch.float16)], tag="float16 overflow")
    case("pow", [positive(3, 4), uniform(3, 4)])
    case("pow", [positive(3, 4)], {"scalar": 2.5}, tag="scalar exponent")
    case("pow", [uniform(3, 4)], {"scalar": 3}, tag="whole exponent")
    case("pow", [uniform(3, 4)], {"scalar": -2}, tag="negative whole exponent")
    case("pow", [uniform(3, 4)], {"scalar": 0}, tag="zero exponent")
    case("pow", [uniform(3, 4)], {"scalar": 0.5}, tag="square root")
    case(
        "pow",
        [t([-2.0, -2.0, -2.0, 0.0, 0.0, 0.0, 1.0, 2.0, -8.0, 0.0]),
         t([0.5, 3.0, 2.0, 0.0, -1.0, 2.0, NAN, 0.0, 1.0 / 3.0, 1.0])],
        tag="edges",
    )
    case("pow", [ints(3, 4), t(2, torch.int32)], tag="int32")
    case("idiv", [t([7, -7, 7, -7, 0, 9], torch.int32), t([2, 2, -2, -2, 3, 3], torch.int32)], tag="int32 signs")
    case("mod", [t([7, -7, 7, -7, 0, 9], torch.int32), t([2, 2, -2, -2, 3, 3], torch.int32)], tag="int32 signs")
    case("mod", [t([7.5, -7.5, 7.5, -7.5]), t([2.0, 2.0, -2.0, -2.0])], tag="float32 signs", grad=False)
    case("idiv", [ints(3, 4, lo=-100, hi=100), ints(4, lo=1, hi=9)], tag="int32 broadcast")
    nan = t([NAN, 1.0, NAN, INF, -INF, 0.0, -0.0])
    other = t([NAN, NAN, 1.0, INF, INF, -0.0, 0.0])
    for name in ("lt", "le", "gt", "ge", "eq", "ne"):
        case(name, [ints(3, 4, lo=-2, hi=3).float(), ints(3, 4, lo=-2, hi=3).float()], tag="with ties")
        case(name, [nan, other], tag="NaN, inf and signed zeros")
        case(name, [ints(3, 4, lo=-2, hi=3)], {"scalar": 0}, tag="int32 with a scalar")
        case(name, [uniform(2, 3, dtype=torch.float16), uniform(3)], tag="float16 with float32")
    flags = t([[True, False, True], [False, False, True]], torch.bool)
    for name in ("logicalAnd", "logicalOr"):
        case(name, [flags, t([True, False, False], torch.bool)])
        case(name, [t([0.0, 1.0, -2.0, NAN]), t([1.0, 1.0, 0.0, 0.0])], tag="float")
    for name in ("bitwiseAnd", "bitwiseOr", "bitwiseXor"):
        case(name, [ints(3, 4, lo=-100, hi=100), ints(3, 4, lo=-100, hi=100)], tag="int32")
        case(name, [flags, t([True, False, False], torch.bool)], tag="bool")
    for name in ("shl", "shr"):
        case(name, [t([1, -1, 5, -37, 2**30, 123456], torch.int32)], {"bits": 3}, tag="int32")
    # dtype promotion, with PyTorch's own ops (the result dtype is what is checked)
    for a, b in [
        (torch.int32, torch.float16),
        (torch.uint8, torch.int8),
        (torch.int8, torch.float32),
        (torch.bool, torch.int32),
        (torch.float16, torch.float32),
        (torch.uint8, torch.int32),
        (torch.int16, torch.uint8),
        (torch.bool, torch.bool),
        (torch.bool, torch.float16),
    ]:
        case("add", [t([1, 0, 1], a), t([1, 1, 0], b)], tag=f"{DTYPE_NAME[a]} + {DTYPE_NAME[b]}", native=True)
    case("add", [t([1, 2], torch.int32)], {"scalar": 2.5}, tag="int32 + float scalar", native=True)
    case("mul", [t([1, 2], torch.int32)], {"scalar": 2}, tag="int32 * int scalar", native=True)
    case("add", [t([1, 2], torch.float16)], {"scalar": 2.5}, tag="float16 + float scalar", native=True)
    case("add", [t([1, 2], torch.uint8)], {"scalar": 300}, tag="uint8 + int scalar", native=True)
    case("div", [t([7, -7], torch.int32), t([2, 2], torch.int32)], tag="int32 / int32", native=True)
    case("clip", [t([-2, 0, 5, 9], torch.int32)], {"min": 0, "max": 6}, tag="int32")
    cond = ints(3, 4, lo=0, hi=2).bool()
    case("where", [cond, uniform(3, 4), uniform(3, 4)])
    case("where", [ints(3, 1, lo=0, hi=2).bool(), uniform(4), t(0.5)], tag="broadcast")
    case("where", [cond, uniform(3, 4)], {"b": 0.0}, tag="scalar b")
    case("where", [cond, uniform(3, 4)], {"a": -1.5}, tag="scalar a")
    case("where", [cond, ints(3, 4), ints(3, 4)], tag="int32")
    case("where", [cond, t([NAN, INF, 1.0, 2.0]), t([1.0, 1.0, NAN, -INF])], tag="NaN in the branch not taken")


def reductions():
    x = uniform(3, 4, 5)
    axes = [None, 0, -1, [0, 2], [-1, -2]]
    for name in ("sum", "mean", "max", "min", "prod", "logsumexp", "var", "std", "norm"):
        for axis in axes:
            for keepdim in (False, True):
                if keepdim and axis in (None, 0):
                    continue
                case(name, [x], {"axis": axis, "keepdim": keepdim}, tag=f"axis {axis}{' keepdim' if keepdim else ''}")
        # (the spread of one element with Bessel's correction is 0 / 0: corrected by 0 here, NaN below)
        corrected = {"correction": 0} if name in ("var", "std") else {}
        case(name, [t(1.5)], {"axis": 0, **corrected}, tag="0-d axis 0")
        case(name, [t(-1.5)], {"axis": -1, "keepdim": True, **corrected}, tag="0-d axis -1 keepdim")
        case(name, [t(2.5)], corrected, tag="0-d")
        case(name, [uniform(1, 4)], {"axis": 0}, tag="size-1 axis")
        case(name, [In(uniform(5, 3), view="T")], {"axis": -1}, tag="transposed view")
    for name in ("sum", "mean", "prod"):
        case(name, [uniform(3, 0)], {"axis": 1}, tag="empty axis")
        case(name, [uniform(0)], tag="empty")
        case(name, [uniform(0, 3)], {"axis": 1}, tag="empty output")
    for name in ("sum", "mean", "max", "min"):
        case(name, [uniform(3, 4, dtype=torch.float16)], {"axis": 1}, tag="float16")
        case(name, [t([[1.0, NAN, 2.0], [INF, -INF, 1.0], [INF, 1.0, 2.0]])], {"axis": 1}, tag="NaN and inf")
    case("sum", [uniform(4096, dtype=torch.float16)], tag="float16 long")
    for name in ("sum", "max", "min", "prod"):
        case(name, [ints(3, 4, lo=-5, hi=6)], {"axis": 1}, tag="int32")
    case("sum", [t([[True, False], [True, True]], torch.bool)], {"axis": 0}, tag="bool")
    case("sum", [uniform(2, 3000)], {"axis": 1}, tag="long axis", tol={"atol": 1e-4, "rtol": 1e-4})
    ties = t([[1.0, 3.0, 3.0, -1.0], [2.0, 2.0, 2.0, 2.0], [0.0, -0.0, -5.0, -5.0]])
    for name in ("max", "min"):
        case(name, [ties], {"axis": 1}, tag="ties")
        case(name, [ties], tag="ties, all axes")
    case("prod", [t([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [-1.5, 2.0, 4.0]])], {"axis": 1}, tag="zeros")
    case("logsumexp", [t([[-INF, -INF], [1000.0, 1000.0], [-INF, 0.0]])], {"axis": 1}, tag="infinite and large")
    flat = t([[1.5, 1.5, 1.5, 1.5], [0.0, 0.0, 0.0, 0.0], [-2.0, 3.0, -2.0, 3.0]])
    for name in ("var", "std"):
        case(name, [flat], {"axis": 1}, tag="zero spread")
        case(name, [flat], {"axis": 1, "correction": 0}, tag="correction 0")
        case(name, [x], {"axis": [0, 1], "correction": 2}, tag="correction 2")
        case(name, [uniform(3, 1)], {"axis": 1}, tag="one element")
    case("norm", [flat], {"axis": 1}, tag="zero vector")
    case("norm", [x], {"axis": -1, "ord": 1}, tag="ord 1")
    case("norm", [flat], {"axis": 1, "ord": 1}, tag="ord 1 at zero")
    for name in ("argmax", "argmin"):
        case(name, [x], {"axis": 1})
        case(name, [x], {"axis": -1, "keepdim": True}, tag="keepdim")
        case(name, [x], tag="flattened")
        case(name, [ties], {"axis": 1}, tag="ties: the first")
        case(name, [t([[1.0, NAN, 3.0, NAN], [INF, 1.0, 2.0, 3.0]])], {"axis": 1}, tag="NaN and inf")
        case(name, [ints(3, 4)], {"axis": 0}, tag="int32")
        case(name, [t(3.0)], {"axis": 0}, tag="0-d")
    for name in ("any", "all"):
        case(name, [t([[True, False, True], [False, False, False], [True, True, True]], torch.bool)], {"axis": 1})
        case(name, [t([[0.0, 1.0], [NAN, 0.0], [0.0, 0.0]])], {"axis": 1}, tag="float")
        case(name, [ints(3, 4, lo=0, hi=2)], {"axis": 0, "keepdim": True}, tag="int32 keepdim")
        case(name, [uniform(3, 0)], {"axis": 1}, tag="empty axis")
        case(name, [ints(2, 3, lo=0, hi=2).bool()], tag="all axes")


def scans():
    x = uniform(3, 5)
    for axis in (0, 1, -1):
        case("cumsum", [x], {"axis": axis}, tag=f"axis {axis}")
        case("cummax", [distinct(3, 5)], {"axis": axis}, tag=f"axis {axis}")
    case("cumsum", [uniform(2, 300)], {"axis": 1}, tag="long axis", tol={"atol": 1e-4, "rtol": 1e-4})
    case("cumsum", [ints(3, 4)], {"axis": 1}, tag="int32")
    case("cumsum", [uniform(3, 4, dtype=torch.float16)], {"axis": 1}, tag="float16")
    case("cumsum", [t([1.0, INF, 2.0, NAN, 1.0])], {"axis": 0}, tag="inf and NaN")
    case("cumsum", [t(2.0)], {"axis": 0}, tag="0-d")
    case("cummax", [t([1.0, 3.0, 3.0, 2.0, 5.0, 5.0])], {"axis": 0}, tag="ties")
    y = distinct(3, 6)
    for k in (1, 3, 6):
        case("topk", [y], {"k": k}, tag=f"k {k}")
    case("topk", [y], {"k": 2, "largest": False}, tag="smallest")
    case("topk", [y], {"k": 2, "axis": 0}, tag="axis 0")
    case("topk", [ints(3, 6, lo=-100, hi=100)], {"k": 2}, tag="int32")
    case("topk", [t([[1.0, 5.0, 3.0, 5.0], [2.0, 2.0, 2.0, 1.0]])], {"k": 3}, tag="ties")
    case("topk", [t([[1.0, NAN, 3.0, -INF]])], {"k": 2}, tag="NaN")
    for args in ({}, {"descending": True}, {"axis": 0}):
        case("sort", [y], args, tag=" ".join(f"{k} {v}" for k, v in args.items()))
        case("argsort", [y], args, tag=" ".join(f"{k} {v}" for k, v in args.items()))
    case("sort", [t([[3.0, 1.0, 3.0, 1.0, 2.0], [0.0, -0.0, 0.0, 5.0, -1.0]])], tag="ties keep their order")
    case("sort", [t([[3.0, 1.0, 3.0, 1.0, 2.0]])], {"descending": True}, tag="ties descending")
    case("sort", [t([[1.0, NAN, -INF, 0.0, INF]])], tag="NaN and inf")
    case("sort", [ints(2, 7, lo=-5, hi=5)], tag="int32")
    case("sort", [uniform(2, 5, dtype=torch.float16)], tag="float16")


def movement():
    x = uniform(2, 3, 4)
    case("reshape", [x], {"shape": [6, 4]})
    case("reshape", [x], {"shape": [4, -1]}, tag="-1")
    case("reshape", [uniform(0, 3)], {"shape": [3, 0]}, tag="empty")
    case("reshape", [t(1.5)], {"shape": [1, 1]}, tag="0-d")
    case("reshape", [In(uniform(4, 3), view="T")], {"shape": [12]}, tag="transposed view")
    case("permute", [x], {"order": [2, 0, 1]})
    case("permute", [x], {"order": [-1, -3, -2]}, tag="negative")
    case("transpose", [x], {"dim0": 0, "dim1": 2})
    case("transpose", [x], {"dim0": -1, "dim1": -2}, tag="negative")
    case("expand", [uniform(3, 1)], {"shape": [3, 4]})
    case("expand", [uniform(4)], {"shape": [2, 3, 4]}, tag="new axes")
    case("expand", [uniform(1, 4)], {"shape": [3, -1]}, tag="-1")
    case("expand", [t(2.0)], {"shape": [2, 2]}, tag="0-d")
    case("pad", [uniform(3, 4)], {"pads": [[1, 2], [0, 3]]})
    case("pad", [uniform(3, 4)], {"pads": [None, [2, 1]], "value": 1.5}, tag="value")
    case("pad", [uniform(3, 4)], {"pads": [[-1, 1], [1, -2]]}, tag="negative")
    case("pad", [ints(3, 4)], {"pads": [[1, 1], [0, 0]], "value": -7}, tag="int32")
    for mode in ("reflect", "replicate", "circular"):
        case("pad", [uniform(2, 5)], {"pads": [None, [2, 3]], "mode": mode}, tag=mode)
        case("pad", [uniform(2, 3, 4)], {"pads": [None, [1, 2], [3, 1]], "mode": mode}, tag=f"{mode} two axes")
    case("shrink", [x], {"bounds": [[1, 2], None, [1, 3]]})
    case("shrink", [x], {"bounds": [None, [1, 1], None]}, tag="to empty")
    for axis in (0, -1, [0, 2]):
        case("flip", [x], {"axis": axis}, tag=f"axis {axis}")
    case("flip", [ints(3, 4)], {"axis": 1}, tag="int32")
    y = uniform(4, 5)
    for spec in (
        [1],
        [-1],
        [[None, None, 2]],
        [[None, None, -1]],
        [[3, 0, -2], [1, None]],
        ["...", 0],
        [None, 1, [1, 4]],
        [[1, -1], "...", None],
        [[10, 20]],
        [[-100, 2], [None, None, 3]],
    ):
        case("index", [y], {"spec": spec}, tag=json.dumps(spec))
    case("cat", [uniform(2, 3), uniform(1, 3), uniform(4, 3)], {"axis": 0})
    case("cat", [uniform(2, 3), uniform(2, 1)], {"axis": -1}, tag="axis -1")
    case("cat", [uniform(2, 3), uniform(0, 3), uniform(1, 3)], {"axis": 0}, tag="an empty piece")
    case("cat", [ints(2, 2), ints(1, 2)], {"axis": 0}, tag="int32")
    case("stack", [uniform(2, 3), uniform(2, 3)], {"axis": 0})
    case("stack", [uniform(2, 3), uniform(2, 3), uniform(2, 3)], {"axis": -1}, tag="axis -1")
    case("stack", [t(1.0), t(2.0)], {"axis": 0}, tag="0-d")
    case("split", [uniform(5, 3)], {"sizes": 2}, tag="equal pieces")
    case("split", [uniform(5, 3)], {"sizes": [1, 4]}, tag="sizes")
    case("split", [uniform(3, 5)], {"sizes": [2, 0, 3], "axis": -1}, tag="axis -1 with an empty piece")
    case("chunk", [uniform(7, 2)], {"chunks": 3})
    case("chunk", [uniform(2, 6)], {"chunks": 4, "axis": 1}, tag="fewer pieces")
    case("squeeze", [uniform(3, 1, 4)], {"axis": 1})
    case("squeeze", [uniform(1, 3, 1)], tag="all")
    case("squeeze", [uniform(3, 4)], {"axis": 0}, tag="not size 1")
    case("unsqueeze", [uniform(3, 4)], {"axis": 0})
    case("unsqueeze", [uniform(3, 4)], {"axis": -1}, tag="axis -1")
    case("flatten", [x])
    case("flatten", [x], {"start": 1}, tag="from axis 1")
    case("flatten", [uniform(2, 3, 4, 2)], {"start": 1, "end": 2}, tag="middle")
    case("flatten", [t(1.0)], tag="0-d")
    case("repeat", [uniform(2, 3)], {"reps": [2, 1]})
    case("repeat", [uniform(2, 3)], {"reps": [2, 1, 3]}, tag="new axis")
    case("repeat", [uniform(2, 3)], {"reps": [0, 2]}, tag="zero")
    for name in ("tril", "triu"):
        for diagonal in (0, 1, -1):
            case(name, [uniform(4, 5)], {"diagonal": diagonal}, tag=f"diagonal {diagonal}")
        case(name, [uniform(2, 3, 3)], tag="batched")
        case(name, [ints(3, 3)], tag="int32")
    case("gather", [uniform(3, 4), In(ints(3, 4, lo=0, hi=3), grad=False)], {"axis": 0}, tag="axis 0")
    case("gather", [uniform(3, 4), In(ints(3, 2, lo=0, hi=4), grad=False)], {"axis": 1}, tag="axis 1")
    case("gather", [uniform(3, 4, 2), In(ints(2, 5, 1, lo=0, hi=4), grad=False)], {"axis": -2}, tag="smaller index")
    case("gather", [ints(3, 4), In(ints(3, 4, lo=0, hi=3), grad=False)], {"axis": 0}, tag="int32")


def nn_ops():
    case("matmul", [uniform(3, 4), uniform(4, 5)])
    case("matmul", [uniform(4), uniform(4, 5)], tag="vector @ matrix")
    case("matmul", [uniform(3, 4), uniform(4)], tag="matrix @ vector")
    case("matmul", [uniform(4), uniform(4)], tag="vector @ vector")
    case("matmul", [uniform(2, 3, 4), uniform(4, 5)], tag="batched")
    case("matmul", [uniform(2, 1, 3, 4), uniform(5, 4, 2)], tag="broadcast batches")
    case("matmul", [uniform(3, 0), uniform(0, 4)], tag="inner size 0")
    case("matmul", [uniform(0, 3), uniform(3, 4)], tag="no rows")
    case("matmul", [In(uniform(4, 3), view="T"), In(uniform(5, 4), view="T")], tag="transposed views")
    case("matmul", [uniform(1, 1), uniform(1, 1)], tag="1x1")
    case("matmul", [ints(3, 4), ints(4, 2)], tag="int32")
    case("matmul", [uniform(8, 16, dtype=torch.float16), uniform(16, 4, dtype=torch.float16)], tag="float16")
    case("matmul", [uniform(16, 64), uniform(64, 16)], tag="tiled", tol={"atol": 1e-4, "rtol": 1e-4})
    case("dot", [uniform(5), uniform(5)])
    case("linear", [uniform(2, 3, 4), uniform(5, 4), uniform(5)])
    case("linear", [uniform(3, 4), uniform(2, 4)], tag="no bias")
    for axis in (-1, 0):
        case("softmax", [uniform(3, 5, lo=-5, hi=5)], {"axis": axis}, tag=f"axis {axis}")
        case("logSoftmax", [uniform(3, 5, lo=-5, hi=5)], {"axis": axis}, tag=f"axis {axis}")
    masked = t([[1.0, -INF, 2.0], [-INF, -INF, -INF], [1000.0, 999.0, -1000.0], [INF, 1.0, 0.0]])
    for name in ("softmax", "logSoftmax"):
        case(name, [masked], {"axis": -1}, tag="-inf, a row of -inf, large, +inf")
        case(name, [uniform(2, 6, dtype=torch.float16)], {"axis": -1}, tag="float16")
        case(name, [uniform(2, 1)], {"axis": -1}, tag="one class")
        case(name, [t(0.3)], {"axis": 0}, tag="0-d")
        case(name, [In(uniform(5, 3), view="T")], {"axis": -1}, tag="transposed view")
    case("layerNorm", [uniform(3, 8)])
    case("layerNorm", [uniform(2, 3, 4)], {"axis": [-2, -1]}, tag="two axes")
    case("layerNorm", [uniform(4, 3)], {"axis": 0}, tag="axis 0")
    case("layerNorm", [t([[1.0, 1.0, 1.0], [2.0, -2.0, 0.0]])], {"eps": 1e-3}, tag="zero spread")
    case("layerNorm", [uniform(3, 8, dtype=torch.float16)], tag="float16")
    for formula, shapes in [
        ("ij,jk->ik", [(3, 4), (4, 5)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("i,j->ij", [(3,), (4,)]),
        ("i,i->", [(5,), (5,)]),
        ("ii->i", [(4, 4)]),
        ("ii", [(4, 4)]),
        ("ij->", [(3, 4)]),
        ("ij->ji", [(3, 4)]),
        ("ba", [(3, 4)]),
        ("ij,ij->ij", [(3, 4), (3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]),
        ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
        ("...ij,...jk", [(2, 1, 3, 4), (5, 4, 2)]),
        ("...ii->...i", [(2, 3, 3)]),
        ("i...->...", [(3, 2, 4)]),
        ("...i,...i->...", [(2, 3, 4), (3, 4)]),
        ("a...b->b...a", [(2, 3, 4, 5)]),
        ("ij...,jk...->ik...", [(2, 3, 4), (3, 5, 4)]),
        ("...,...->...", [(3, 4), (4,)]),
        ("i,jk->ijk", [(2,), (3, 4)]),
        ("ijk,ikl,ilm->ijm", [(2, 3, 4), (2, 4, 5), (2, 5, 3)]),
    ]:
        case("einsum", [uniform(*s) for s in shapes], {"formula": formula}, tag=formula)
    case("oneHot", [t([0, 3, 1, 1, 2], torch.int32)], {"numClasses": 4})
    case("oneHot", [t([[0, 2], [1, 0]], torch.int32)], {"numClasses": 3}, tag="2-d")
    case("embedding", [t([[0, 3], [2, 2]], torch.int32), uniform(5, 4)])
    logits, labels = uniform(6, 5, lo=-4, hi=4), t([0, 4, -1, 2, 2, 1], torch.int32)
    for reduction in ("mean", "sum", "none"):
        case("sparseCategoricalCrossentropy", [logits, labels], {"reduction": reduction}, tag=reduction)
        case("crossEntropy", [logits, torch.softmax(uniform(6, 5), -1)], {"reduction": reduction}, tag=reduction)
        case("binaryCrossentropy", [uniform(3, 4, lo=0.05, hi=0.95), uniform(3, 4, lo=0, hi=1)],
             {"reduction": reduction}, tag=reduction)
        case("binaryCrossentropyLogits", [uniform(3, 4, lo=-5, hi=5), uniform(3, 4, lo=0, hi=1)],
             {"reduction": reduction}, tag=reduction)
        case("mseLoss", [uniform(3, 4), uniform(3, 4)], {"reduction": reduction}, tag=reduction)
        case("l1Loss", [uniform(3, 4), uniform(3, 4)], {"reduction": reduction}, tag=reduction)
    case("sparseCategoricalCrossentropy", [logits, labels], {"labelSmoothing": 0.1}, tag="label smoothing")
    case("sparseCategoricalCrossentropy", [logits, labels, In(positive(6), grad=False)], tag="weights")
    case("sparseCategoricalCrossentropy", [uniform(2, 3, 5), ints(2, 3, lo=0, hi=5)], tag="batched")
    case("crossEntropy", [logits, torch.softmax(uniform(6, 5), -1)], {"labelSmoothing": 0.2}, tag="label smoothing")
    case("binaryCrossentropy", [t([0.0, 1.0, 1e-30, 0.5]), t([0.0, 1.0, 1.0, 0.5])], tag="at 0 and 1", grad=False)
    case("binaryCrossentropyLogits", [uniform(3, 4, lo=-5, hi=5), uniform(3, 4, lo=0, hi=1)], {"posWeight": 3.0},
         tag="posWeight")
    case("binaryCrossentropyLogits", [uniform(3, 4, lo=-5, hi=5), uniform(3, 4, lo=0, hi=1), In(positive(4), grad=False)],
         tag="posWeight tensor")
    case("binaryCrossentropyLogits", [t([-200.0, 200.0, 0.0]), t([1.0, 0.0, 0.5])], tag="saturated")
    case("l1Loss", [t([1.0, 2.0, 3.0]), t([1.0, 0.0, 3.0])], tag="zero difference")
    q, k, v = uniform(2, 3, 4), uniform(2, 5, 4), uniform(2, 5, 6)
    case("scaledDotProductAttention", [q, k, v])
    case("scaledDotProductAttention", [q, k, v, In(ints(3, 5, lo=0, hi=2).bool() | t([True] + [False] * 4, torch.bool))],
         tag="bool mask")
    case("scaledDotProductAttention", [q, k, v, In(uniform(3, 5), grad=False)], tag="float mask")
    case("nn.Linear", [uniform(2, 4), uniform(3, 4), uniform(3)])
    case("nn.Embedding", [t([1, 0, 3], torch.int32), uniform(4, 2)])
    case("nn.LayerNorm", [uniform(2, 3, 6), uniform(6), uniform(6)])
    case("nn.RMSNorm", [uniform(2, 3, 6), uniform(6)])
    case("nn.GroupNorm", [uniform(2, 6, 3, 2), uniform(6), uniform(6)], {"groups": 3})
    case("nn.BatchNorm", [uniform(4, 3, 2, 2), uniform(3), uniform(3)])
    case("nn.BatchNorm", [uniform(5, 2), uniform(2), uniform(2)], {"momentum": 0.3}, tag="2-d, momentum 0.3")


def convolution():
    x = uniform(2, 4, 7, 6)
    for args, weight, bias in [
        ({}, (3, 4, 3, 3), False),
        ({}, (3, 4, 3, 3), True),
        ({"stride": 2, "padding": 1}, (3, 4, 3, 3), True),
        ({"stride": [2, 1], "padding": [0, 2]}, (3, 4, 2, 3), False),
        ({"dilation": 2, "padding": 2}, (2, 4, 3, 3), False),
        ({"groups": 2}, (4, 2, 3, 1), True),
        ({"groups": 4, "padding": 1}, (8, 1, 3, 3), False),
        ({}, (5, 4, 1, 1), True),
    ]:
        inputs = [x, uniform(*weight)] + ([uniform(weight[0])] if bias else [])
        case("conv2d", inputs, args, tag=f"weight {list(weight)}{' bias' if bias else ''} {json.dumps(args)}")
    case("conv2d", [uniform(2, 3, 9), uniform(4, 3, 3), uniform(4)], {"stride": 2, "padding": 1}, tag="1-d")
    case("conv2d", [uniform(1, 2, 4, 5, 3), uniform(3, 2, 2, 3, 2)], {"padding": [1, 0, 1]}, tag="3-d")
    case("conv2d", [uniform(1, 3, 6, 6, dtype=torch.float16), uniform(2, 3, 3, 3, dtype=torch.float16)],
         tag="float16")
    case("nn.Conv2d", [uniform(1, 2, 5, 5), uniform(3, 2, 3, 3), uniform(3)], {"padding": 1})
    for args, weight, size in [
        ({}, (4, 3, 3, 3), (2, 4, 4, 5)),
        ({"stride": 2, "padding": 1, "outputPadding": 1}, (4, 2, 3, 3), (1, 4, 3, 3)),
        ({"stride": 2, "dilation": 2}, (4, 2, 2, 2), (1, 4, 3, 2)),
        ({"groups": 2}, (4, 3, 2, 2), (1, 4, 3, 3)),
        ({"stride": 3, "padding": 1}, (2, 3, 4), (2, 2, 5)),
    ]:
        case("convTranspose2d", [uniform(*size), uniform(*weight), uniform(weight[1] * args.get("groups", 1))], args,
             tag=f"weight {list(weight)} {json.dumps(args)}")
    y = distinct(2, 3, 6, 7)
    for args in (
        {"kernel": 2},
        {"kernel": 3, "stride": 2, "padding": 1},
        {"kernel": [2, 3], "stride": [1, 2]},
        {"kernel": 2, "dilation": 2},
    ):
        case("maxPool2d", [y], args, tag=json.dumps(args))
        case("avgPool2d", [uniform(2, 3, 6, 7)], {k: v for k, v in args.items() if k != "dilation"},
             tag=json.dumps(args))
    case("maxPool2d", [t([[[[1.0, 1.0, 0.0, 2.0], [0.0, 1.0, 2.0, 2.0]]]])], {"kernel": 2}, tag="ties")
    case("maxPool2d", [t([[[[NAN, 1.0], [0.0, 1.0]]]])], {"kernel": 2}, tag="NaN")
    case("maxPool2d", [uniform(1, 2, 4, 4, dtype=torch.float16)], {"kernel": 2}, tag="float16")
    z = uniform(1, 2, 3, 4)
    for args in (
        {"scaleFactor": 2, "mode": "nearest"},
        {"size": [5, 7], "mode": "nearest"},
        {"size": [2, 3], "mode": "nearest"},
        {"scaleFactor": 2, "mode": "bilinear", "alignCorners": False},
        {"size": [5, 7], "mode": "bilinear", "alignCorners": True},
        {"size": [2, 2], "mode": "bilinear", "alignCorners": False},
    ):
        case("interpolate", [z], args, tag=json.dumps(args))
    case("interpolate", [uniform(2, 3, 5)], {"size": 8, "mode": "linear", "alignCorners": False}, tag="linear")
    case("interpolate", [uniform(1, 1, 2, 3, 2)], {"scaleFactor": 2, "mode": "trilinear", "alignCorners": False},
         tag="trilinear")


def creation():
    for args in ({"start": 0, "stop": 5}, {"start": 1, "stop": 10, "step": 3}, {"start": 5, "stop": 0, "step": -1},
                 {"start": 0, "stop": 1, "step": 0.25}, {"start": -1.5, "stop": 1.5, "step": 0.5}):
        case("arange", [], args, tag=json.dumps(args))
    for args in ({"start": 0, "end": 1, "steps": 5}, {"start": -3, "end": 7, "steps": 11}, {"start": 2, "end": 3, "steps": 1}):
        case("linspace", [], args, tag=json.dumps(args))
    case("eye", [], {"n": 3})
    case("eye", [], {"n": 2, "m": 4}, tag="2x4")
    case("full", [], {"shape": [2, 3], "value": 3}, tag="integer")
    case("full", [], {"shape": [2, 3], "value": 2.5}, tag="float")
    case("full", [], {"shape": [2], "value": True}, tag="bool")
    case("zeros", [], {"shape": [2, 0, 3]})
    case("ones", [], {"shape": [3]})


def main():
    elementwise()
    binaries()
    reductions()
    scans()
    movement()
    nn_ops()
    convolution()
    creation()
    write(OUT)
    ops = sorted({c["op"] for c in cases})
    print(f"{len(cases)} cases of {len(ops)} ops, {os.path.getsize(OUT)} bytes: {os.path.relpath(OUT)}")


if __name__ == "__main__":
    main()
