#!/usr/bin/env python3
"""K train steps of a small BERT for pretraining, in float64 and float32, under the MLPerf reference's
training rules and the seed's: writes test/models/bert_train_goldens.safetensors.

Only for regenerating that file; the test that reads it (test/models/reference_numerics.test.ts) needs no
PyTorch. On Debian 12 (PyTorch 1.13, CPU):

    apt-get install -y python3-torch
    /usr/bin/python3 scripts/reference/bert_train.py

Written here from the MLPerf reference's description (its TensorFlow `run_pretraining.py`, `optimization.py`,
`lamb_optimizer_v1.py`, as docs/mlperf.md summarises them), not from tsgrad's code:

- BERT for pretraining: post-LayerNorm encoder, GELU in its erf form, the masked-LM head (dense, GELU,
  LayerNorm, then the decoder tied to the word embeddings plus its own bias) over the masked positions, the
  NSP head on the tanh pooler of [CLS]; no dropout. Parameters carry tsgrad's (Hugging Face's) names.
- The loss: masked-LM cross-entropy summed with masked_lm_weights and divided by their sum (+ 1e-5 under
  the reference rule), plus the NSP cross-entropy's mean.
- The step: gradients clipped to global norm 1.0, then LAMB (Adam moments with bias correction, weight
  decay 0.01 on all but biases and LayerNorm parameters, the trust ratio |w|/|u| on the decayed tensors
  only under the reference rule, on every tensor under the seed's), with the rule's LR schedule.

The float64 run is the truth; the float32 run measures PyTorch's own float32 error (each gradient's at the
first step, relative in L2 norm, and the K-step update's), which the test holds tsgrad to. The weights
start as bfloat16-representable float32 values (so that they are stored in two bytes and read exactly);
every input is drawn from fixed seeds, so the same PyTorch writes the same file.
"""

import json
import math
import os
import struct

import numpy as np
import torch

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "test", "models", "bert_train_goldens.safetensors")

# a vocabulary of thousands, so that the masked-LM head's sums are long; a narrow hidden size keeps the file
# (every weight, its update and its float64 gradient under each rule) at a few MB
CONFIG = {
    "vocabSize": 8000,
    "hiddenSize": 16,
    "numHiddenLayers": 2,
    "numAttentionHeads": 2,
    "intermediateSize": 64,
    "maxPositionEmbeddings": 64,
    "typeVocabSize": 2,
    "layerNormEps": 1e-12,
}
BATCH, SEQ, PREDICTIONS, STEPS = 4, 32, 5, 3
OPTIMIZER = {"lr": 0.01, "totalSteps": 10, "warmupSteps": 1, "power": 1.0, "weightDecay": 0.01, "b1": 0.9,
             "b2": 0.999, "eps": 1e-6, "maxGradNorm": 1.0}
MASKED_LM_EPSILON = 1e-5
RULES = ("reference", "seed")


def parameter_shapes(c):
    v, h, i, p, t = (c[k] for k in ("vocabSize", "hiddenSize", "intermediateSize", "maxPositionEmbeddings",
                                     "typeVocabSize"))
    shapes = {
        "bert.embeddings.word_embeddings.weight": (v, h),
        "bert.embeddings.position_embeddings.weight": (p, h),
        "bert.embeddings.token_type_embeddings.weight": (t, h),
        "bert.embeddings.LayerNorm.weight": (h,),
        "bert.embeddings.LayerNorm.bias": (h,),
    }

    def dense(name, n_in, n_out):
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (n_out, n_in), (n_out,)

    def norm(name):
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (h,), (h,)

    for layer in range(c["numHiddenLayers"]):
        prefix = f"bert.encoder.layer.{layer}"
        for part in ("query", "key", "value"):
            dense(f"{prefix}.attention.self.{part}", h, h)
        dense(f"{prefix}.attention.output.dense", h, h)
        norm(f"{prefix}.attention.output.LayerNorm")
        dense(f"{prefix}.intermediate.dense", h, i)
        dense(f"{prefix}.output.dense", i, h)
        norm(f"{prefix}.output.LayerNorm")
    dense("bert.pooler.dense", h, h)
    dense("cls.predictions.transform.dense", h, h)
    norm("cls.predictions.transform.LayerNorm")
    shapes["cls.predictions.bias"] = (v,)
    dense("cls.seq_relationship", h, 2)
    return shapes


def is_no_decay(name):
    return name.endswith("bias") or "LayerNorm" in name


def to_bfloat16_values(x):
    """float32 values rounded (to nearest even) to the bfloat16 grid, kept as float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return rounded.astype(np.uint32).view(np.float32)


def initial_weights(c, rng):
    """Weights as a trained model might hold them, not the zero biases and unit LayerNorms of a fresh one, so
    that every parameter's update (the trust ratio's |w| included) is exercised from the first step."""
    weights = {}
    for name, shape in parameter_shapes(c).items():
        if name.endswith("LayerNorm.weight"):
            values = 1 + 0.1 * rng.standard_normal(shape)
        elif name.endswith("bias"):
            values = 0.02 * rng.standard_normal(shape)
        else:
            values = np.clip(rng.standard_normal(shape), -2, 2) * 0.05
        weights[name] = to_bfloat16_values(values)
    return weights


def batches(c, rng):
    """STEPS batches with padding, a second segment, 3 to PREDICTIONS masked positions per sequence (the rest
    weight 0) and both NSP labels; the last batch has a single masked position, so that the reference's 1e-5 in
    the masked-LM loss's denominator moves the loss by 1e-4, not 1e-5 / 16 of it."""
    out = []
    for step in range(STEPS):
        ids = np.zeros((BATCH, SEQ), np.int32)
        segments = np.zeros((BATCH, SEQ), np.int32)
        mask = np.zeros((BATCH, SEQ), np.int32)
        positions = np.zeros((BATCH, PREDICTIONS), np.int32)
        labels = np.zeros((BATCH, PREDICTIONS), np.int32)
        weights = np.zeros((BATCH, PREDICTIONS), np.float32)
        for row in range(BATCH):
            length = int(rng.integers(SEQ * 2 // 3, SEQ + 1))
            split = int(rng.integers(3, length - 2))
            ids[row, :length] = rng.integers(5, c["vocabSize"], length)
            segments[row, split:length] = 1
            mask[row, :length] = 1
            count = int(rng.integers(3, PREDICTIONS + 1))
            if step == STEPS - 1:
                count = 1 if row == 0 else 0
            picked = np.sort(rng.choice(np.arange(1, length), count, replace=False))
            positions[row, :count] = picked
            labels[row, :count] = rng.integers(5, c["vocabSize"], count)
            weights[row, :count] = 1
        out.append({
            "input_ids": ids,
            "segment_ids": segments,
            "input_mask": mask,
            "masked_lm_positions": positions,
            "masked_lm_ids": labels,
            "masked_lm_weights": weights,
            "next_sentence_labels": rng.integers(0, 2, BATCH).astype(np.int32),
        })
    return out


# ---------------------------------------------------------------- the model


def layer_norm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    variance = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(variance + CONFIG["layerNormEps"]) * w + b


def gelu(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def dense(x, W, name):
    return x @ W[f"{name}.weight"].T + W[f"{name}.bias"]


def encoder_layer(x, additive_mask, W, prefix):
    batch, seq, hidden = x.shape
    heads = CONFIG["numAttentionHeads"]
    split = lambda t: t.reshape(batch, seq, heads, hidden // heads).transpose(1, 2)
    q, k, v = (split(dense(x, W, f"{prefix}.attention.self.{part}")) for part in ("query", "key", "value"))
    scores = q @ k.transpose(-1, -2) / math.sqrt(hidden // heads) + additive_mask
    context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(batch, seq, hidden)
    attended = layer_norm(dense(context, W, f"{prefix}.attention.output.dense") + x,
                          W[f"{prefix}.attention.output.LayerNorm.weight"],
                          W[f"{prefix}.attention.output.LayerNorm.bias"])
    inner = gelu(dense(attended, W, f"{prefix}.intermediate.dense"))
    return layer_norm(dense(inner, W, f"{prefix}.output.dense") + attended, W[f"{prefix}.output.LayerNorm.weight"],
                      W[f"{prefix}.output.LayerNorm.bias"])


def pretraining_loss(W, data, rule):
    ids, segments = data["input_ids"].long(), data["segment_ids"].long()
    seq = ids.shape[1]
    x = (W["bert.embeddings.word_embeddings.weight"][ids]
         + W["bert.embeddings.position_embeddings.weight"][:seq]
         + W["bert.embeddings.token_type_embeddings.weight"][segments])
    x = layer_norm(x, W["bert.embeddings.LayerNorm.weight"], W["bert.embeddings.LayerNorm.bias"])
    additive_mask = ((1 - data["input_mask"].to(x.dtype)) * -10000.0)[:, None, None, :]
    for layer in range(CONFIG["numHiddenLayers"]):
        x = encoder_layer(x, additive_mask, W, f"bert.encoder.layer.{layer}")
    # masked-LM head over the masked positions, its decoder the word embeddings
    positions = data["masked_lm_positions"].long()
    gathered = torch.gather(x, 1, positions[:, :, None].expand(-1, -1, x.shape[-1]))
    transformed = layer_norm(gelu(dense(gathered, W, "cls.predictions.transform.dense")),
                             W["cls.predictions.transform.LayerNorm.weight"],
                             W["cls.predictions.transform.LayerNorm.bias"])
    logits = transformed @ W["bert.embeddings.word_embeddings.weight"].T + W["cls.predictions.bias"]
    log_probs = torch.log_softmax(logits, -1)
    label_log_probs = torch.gather(log_probs, -1, data["masked_lm_ids"].long()[:, :, None])[:, :, 0]
    weights = data["masked_lm_weights"].to(x.dtype)
    denominator = weights.sum() + (MASKED_LM_EPSILON if rule == "reference" else 0.0)
    masked_lm_loss = -(label_log_probs * weights).sum() / denominator
    # next-sentence head on the pooled [CLS]
    pooled = torch.tanh(dense(x[:, 0], W, "bert.pooler.dense"))
    nsp_log_probs = torch.log_softmax(dense(pooled, W, "cls.seq_relationship"), -1)
    nsp_loss = -torch.gather(nsp_log_probs, -1, data["next_sentence_labels"].long()[:, None]).mean()
    return masked_lm_loss + nsp_loss


# ---------------------------------------------------------------- the optimizer


def learning_rate(steps_taken, rule):
    """The rate of the step after `steps_taken` steps."""
    o = OPTIMIZER
    lr, total, warmup, power = o["lr"], o["totalSteps"], o["warmupSteps"], o["power"]
    if rule == "reference":
        # optimization.py: polynomial decay from step 0, a linear warmup in its place while s < warmup
        if steps_taken < warmup:
            return lr * steps_taken / warmup
        return lr * (1 - min(steps_taken, total) / total) ** power
    # the seed: warmup to the peak at s = warmup, then the decay starts
    if steps_taken <= warmup:
        return lr * steps_taken / warmup
    return lr * (1 - (steps_taken - warmup) / (total - warmup + 1)) ** power


class Lamb:
    """lamb_optimizer_v1.py's update, with tsgrad's choice of trust-ratio tensors per rule."""

    def __init__(self, weights, rule):
        self.rule = rule
        self.m = {name: torch.zeros_like(w) for name, w in weights.items()}
        self.v = {name: torch.zeros_like(w) for name, w in weights.items()}
        self.steps = 0

    def step(self, weights, grads, lr):
        o = OPTIMIZER
        self.steps += 1
        for name, w in weights.items():
            g = grads[name]
            self.m[name] = o["b1"] * self.m[name] + (1 - o["b1"]) * g
            self.v[name] = o["b2"] * self.v[name] + (1 - o["b2"]) * g * g
            m_hat = self.m[name] / (1 - o["b1"] ** self.steps)
            v_hat = self.v[name] / (1 - o["b2"] ** self.steps)
            update = m_hat / (torch.sqrt(v_hat) + o["eps"])
            excluded = is_no_decay(name)
            if not excluded:
                update = update + o["weightDecay"] * w
            ratio = 1.0
            if self.rule == "seed" or not excluded:
                w_norm, u_norm = torch.linalg.norm(w), torch.linalg.norm(update)
                ratio = (w_norm / u_norm) if w_norm > 0 and u_norm > 0 else 1.0
            weights[name] = w - lr * ratio * update


def clip_by_global_norm(grads, max_norm):
    norm = torch.sqrt(sum((g * g).sum() for g in grads.values()))
    scale = max_norm / max(norm, max_norm)
    return {name: g * scale for name, g in grads.items()}


def train(initial, data, rule, dtype):
    """STEPS steps from `initial`: the losses, the first step's gradients and the weights after the last step."""
    weights = {name: torch.tensor(w, dtype=dtype) for name, w in initial.items()}
    lamb = Lamb(weights, rule)
    losses, first_grads = [], None
    for step, batch in enumerate(data):
        leaves = {name: w.detach().requires_grad_() for name, w in weights.items()}
        loss = pretraining_loss(leaves, {k: torch.from_numpy(x) for k, x in batch.items()}, rule)
        loss.backward()
        grads = {name: w.grad.detach() for name, w in leaves.items()}
        if first_grads is None:
            first_grads = grads
        losses.append(loss.item())
        weights = {name: w.detach() for name, w in leaves.items()}
        lamb.step(weights, clip_by_global_norm(grads, OPTIMIZER["maxGradNorm"]), learning_rate(step, rule))
    return losses, first_grads, weights


def relative_error(x, truth):
    """|x - truth| / |truth| in the L2 norm."""
    truth = truth.double().flatten()
    scale = torch.linalg.norm(truth).item()
    diff = torch.linalg.norm(x.double().flatten() - truth).item()
    return diff / scale if scale > 0 else diff


# ---------------------------------------------------------------- the file

STORED = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32", np.dtype(np.int32): "I32",
          np.dtype(np.uint16): "BF16"}


def bfloat16_bits(x):
    """The upper halves of float32 values already on the bfloat16 grid."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), "not bfloat16 values"
    return (bits >> 16).astype(np.uint16)


def write(path, tensors, metadata):
    header, offset, blobs = {}, 0, []
    for name, x in tensors.items():
        data = np.ascontiguousarray(x).astype(x.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": STORED[x.dtype], "shape": list(x.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {k: json.dumps(v, separators=(",", ":")) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def main():
    rng = np.random.default_rng(43)
    initial = initial_weights(CONFIG, rng)
    data = batches(CONFIG, rng)
    names = list(initial)
    tensors = {f"init.{name}": bfloat16_bits(w) for name, w in initial.items()}
    for step, batch in enumerate(data):
        tensors.update({f"batch.{step}.{field}": x for field, x in batch.items()})
    figures = {}
    for rule in RULES:
        losses64, grads64, final64 = train(initial, data, rule, torch.float64)
        losses32, grads32, final32 = train(initial, data, rule, torch.float32)
        update64 = {n: final64[n] - torch.from_numpy(initial[n]).double() for n in names}
        update32 = {n: final32[n].double() - torch.from_numpy(initial[n]).double() for n in names}
        grad_errors = [relative_error(grads32[n], grads64[n]) for n in names]
        update_errors = [relative_error(update32[n], update64[n]) for n in names]
        tensors[f"{rule}.loss"] = np.array(losses64, np.float64)
        tensors[f"{rule}.torch32.loss"] = np.array(losses32, np.float64)
        tensors[f"{rule}.torch32.grad_error"] = np.array(grad_errors, np.float64)
        tensors[f"{rule}.torch32.update_error"] = np.array(update_errors, np.float64)
        for n in names:
            tensors[f"{rule}.update.{n}"] = update64[n].float().numpy()
            tensors[f"{rule}.grad.{n}"] = grads64[n].numpy()
        worst = int(np.argmax(grad_errors))
        figures[rule] = {
            "losses": losses64,
            "torch32 max loss diff": max(abs(a - b) for a, b in zip(losses32, losses64)),
            "torch32 worst grad error": [names[worst], grad_errors[worst]],
            "torch32 worst update error": max(update_errors),
        }
    metadata = {"config": CONFIG, "names": names, "optimizer": OPTIMIZER, "maskedLmEpsilon": MASKED_LM_EPSILON,
                "steps": STEPS, "rules": list(RULES)}
    write(OUT, tensors, metadata)
    print(json.dumps(figures, indent=1))
    print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT) / 2**20:.2f} MiB)")


if __name__ == "__main__":
    main()
