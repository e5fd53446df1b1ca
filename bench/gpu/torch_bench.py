"""PyTorch (eager) on the same GPU, side by side with bench/gpu/gemm.ts and bert_step.ts: float16 GEMM
through cuBLAS, and the same BERT-large float16 pretraining step (post-LN encoder, exact GELU, masked-LM
head over the gathered positions tied to the word embeddings, NSP head; loss scaling, clipping at global
norm 1.0 in float32, LAMB) at the same batch and sequence length. FLOPs use the same analytic formula as
bert_step.ts. Prints one JSON object.

Usage: python3 torch_bench.py [--shapes 4096x4096x4096,...] [--batch 8] [--seq 512] [--steps 5] [--skip-bert]
  [--preset large|base|tiny] [--device cuda|cpu] [--predictions 76] [--threads N]
--device cpu (float32: half matmuls are not there on every CPU build) with --preset tiny is a dry run of this
script without a GPU (bench/gpu-check.sh --emulate runs it where the Python it finds has torch); with --preset
base --batch 8 --seq 128 --predictions 20 --threads 2 --shapes "" it is the CPU step bench/bert-step.ts times.
"""
import argparse
import json
import math
import re
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = dict(large=dict(vocab=30522, hidden=1024, layers=24, heads=16, intermediate=4096, max_positions=512, types=2),
               base=dict(vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072, max_positions=512, types=2),
               tiny=dict(vocab=30522, hidden=128, layers=2, heads=2, intermediate=512, max_positions=512, types=2))


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def dtype_on(device):
    return torch.float16 if device == "cuda" else torch.float32


def gemm(shapes, runs, device):
    results = []
    for shape in shapes:
        m, n, k = (int(x) for x in shape.split("x"))
        a = torch.rand(m, k, device=device, dtype=dtype_on(device))
        b = torch.rand(k, n, device=device, dtype=dtype_on(device))
        torch.matmul(a, b)
        best = math.inf
        for _ in range(runs):
            if device == "cuda":
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                torch.matmul(a, b)
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3)
            else:
                t = time.perf_counter()
                torch.matmul(a, b)
                best = min(best, time.perf_counter() - t)
        tflops = 2 * m * n * k / best / 1e12
        print(f"torch gemm {shape}: {best * 1e3:.3f} ms, {tflops:.1f} TFLOP/s", file=sys.stderr)
        results.append(dict(shape=shape, m=m, n=n, k=k, ms=round(best * 1e3, 4), tflops=round(tflops, 2)))
    return results


class Layer(nn.Module):
    def __init__(self, c, dropout):
        super().__init__()
        h = c["hidden"]
        self.heads = c["heads"]
        self.query, self.key, self.value, self.out = (nn.Linear(h, h) for _ in range(4))
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=1e-12), nn.LayerNorm(h, eps=1e-12)
        self.up, self.down = nn.Linear(h, c["intermediate"]), nn.Linear(c["intermediate"], h)
        self.dropout = dropout

    def forward(self, x, mask):
        b, s, h = x.shape
        split = lambda t: t.view(b, s, self.heads, h // self.heads).transpose(1, 2)
        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / math.sqrt(h // self.heads) + mask
        probs = F.dropout(scores.softmax(-1), self.dropout, self.training)
        attn = (probs @ v).transpose(1, 2).reshape(b, s, h)
        x = self.ln1(x + F.dropout(self.out(attn), self.dropout, self.training))
        return self.ln2(x + F.dropout(self.down(F.gelu(self.up(x))), self.dropout, self.training))


class Bert(nn.Module):
    def __init__(self, c, dropout=0.1):
        super().__init__()
        h = c["hidden"]
        self.word, self.position, self.token_type = nn.Embedding(c["vocab"], h), nn.Embedding(c["max_positions"], h), nn.Embedding(c["types"], h)
        self.ln = nn.LayerNorm(h, eps=1e-12)
        self.layers = nn.ModuleList(Layer(c, dropout) for _ in range(c["layers"]))
        self.pooler, self.transform, self.nsp = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, 2)
        self.transform_ln = nn.LayerNorm(h, eps=1e-12)
        self.decoder_bias = nn.Parameter(torch.zeros(c["vocab"]))
        self.dropout = dropout
        # BERT's initialisation (as tsgrad's model): weights N(0, 0.02), biases 0; PyTorch's defaults (N(0, 1)
        # embeddings) start the loss near 46 instead of ln(vocab) + ln 2 = 11, and overflow float16 gradients
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, ids, segments, input_mask, positions):
        s = ids.shape[1]
        x = self.word(ids) + self.position(torch.arange(s, device=ids.device))[None] + self.token_type(segments)
        x = F.dropout(self.ln(x), self.dropout, self.training)
        mask = ((1.0 - input_mask[:, None, None, :].to(x.dtype)) * -10000.0).to(x.dtype)
        for layer in self.layers:
            x = layer(x, mask)
        gathered = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))
        mlm = F.linear(self.transform_ln(F.gelu(self.transform(gathered))), self.word.weight, self.decoder_bias)
        nsp = self.nsp(torch.tanh(self.pooler(x[:, 0])))
        return mlm, nsp


def losses(mlm, nsp, mlm_ids, mlm_weights, nsp_labels):
    per_token = F.cross_entropy(mlm.float().flatten(0, 1), mlm_ids.flatten(), reduction="none")
    mlm_loss = (per_token * mlm_weights.flatten()).sum() / mlm_weights.sum().clamp_min(1e-5)
    return mlm_loss + F.cross_entropy(nsp.float(), nsp_labels)


class Lamb:
    """LAMB with float32 moments and master copies, elementwise work batched with torch._foreach."""

    def __init__(self, params, lr=1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01):
        self.params = params
        self.master = [p.detach().float() for p in params]
        self.m = [torch.zeros_like(p) for p in self.master]
        self.v = [torch.zeros_like(p) for p in self.master]
        self.lr, self.b1, self.b2, self.eps, self.wd, self.t = lr, b1, b2, eps, weight_decay, 0

    @torch.no_grad()
    def step(self, grads):
        self.t += 1
        torch._foreach_mul_(self.m, self.b1)
        torch._foreach_add_(self.m, grads, alpha=1 - self.b1)
        torch._foreach_mul_(self.v, self.b2)
        torch._foreach_addcmul_(self.v, grads, grads, value=1 - self.b2)
        denom = torch._foreach_sqrt(torch._foreach_div(self.v, 1 - self.b2 ** self.t))
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(torch._foreach_div(self.m, 1 - self.b1 ** self.t), denom)
        torch._foreach_add_(update, self.master, alpha=self.wd)
        ratios = [torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w)) for w, u in zip(torch._foreach_norm(self.master), torch._foreach_norm(update))]
        torch._foreach_mul_(update, ratios)
        torch._foreach_add_(self.master, update, alpha=-self.lr)
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(self.params, self.master)
        else:  # torch < 2.1
            for p, w in zip(self.params, self.master):
                p.copy_(w)


def bert_step_flops(b, s, p, c):
    h, i, l, v = c["hidden"], c["intermediate"], c["layers"], c["vocab"]
    per_layer = 2 * b * s * (4 * h * h + 2 * h * i) + 2 * 2 * b * s * s * h
    heads = 2 * b * p * (h * h + h * v) + 2 * b * h * h
    return 3 * (l * per_layer + heads)


def bert(batch, seq, steps, preset, device, predictions=76, loss_scale=1024.0):
    c = PRESETS[preset]
    p = min(predictions, seq)
    torch.manual_seed(0)
    model = Bert(c).to(device=device, dtype=dtype_on(device)).train()
    params = list(model.parameters())
    lamb = Lamb(params)
    ids = torch.randint(0, c["vocab"], (batch, seq), device=device)
    segments = torch.randint(0, 2, (batch, seq), device=device)
    input_mask = torch.ones(batch, seq, dtype=torch.int32, device=device)
    positions = (torch.arange(p, device=device) * (seq // p))[None].expand(batch, p).contiguous()
    mlm_ids = torch.randint(0, c["vocab"], (batch, p), device=device)
    mlm_weights = torch.ones(batch, p, device=device)
    nsp_labels = torch.randint(0, 2, (batch,), device=device)

    def step():
        for q in params:
            q.grad = None
        loss = losses(*model(ids, segments, input_mask, positions), mlm_ids, mlm_weights, nsp_labels)
        (loss * loss_scale).backward()
        grads = [q.grad.float() / loss_scale for q in params]
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_div_(grads, torch.clamp(norm / 1.0, min=1.0))
        lamb.step(grads)
        return loss

    losses_seen = [step().item() for _ in range(2)]
    times = []
    for _ in range(steps):
        sync(device)
        t = time.perf_counter()
        losses_seen.append(step().item())
        times.append(time.perf_counter() - t)
    ms = sorted(times)[len(times) // 2] * 1e3
    flops = bert_step_flops(batch, seq, p, c)
    model_name = f"BERT-{preset} ({c['layers']} layers) {str(dtype_on(device)).replace('torch.', '')}, PyTorch eager on {device}"
    return dict(model=model_name, batch=batch, seq=seq, steps=steps, ms_per_step=round(ms, 2),
                tflops=round(flops / (ms / 1e3) / 1e12, 2), step_flops=flops, sequences_per_s=round(batch * 1e3 / ms, 1),
                losses=[round(x, 4) for x in losses_seen])


def blas_info():
    """The BLAS torch was built with (BLAS_INFO in its build settings: mkl, open, generic...), or None."""
    found = re.search(r"BLAS_INFO=([^,\s]+)", torch.__config__.show())
    return found.group(1) if found else None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="16384x1024x1024,16384x4096x1024,16384x1024x4096,4096x4096x4096,8192x8192x8192")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--skip-bert", action="store_true")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="large")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--predictions", type=int, default=76, help="masked positions a sequence")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_bench: torch sees no CUDA GPU (--device cpu is a dry run without one)")
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else None
    result = dict(torch=torch.__version__, gpu=gpu, device=args.device, blas=blas_info(),
                  gemm=gemm([s for s in args.shapes.split(",") if s], args.runs, args.device), threads=torch.get_num_threads())
    if args.device == "cpu" and result["blas"] == "generic":
        print("torch_bench: this torch multiplies matrices with a generic BLAS (Debian's python3-torch links the "
              "reference one, about 6 GFLOP/s): its CPU steps are no fair comparison; use a PyTorch wheel (MKL)",
              file=sys.stderr)
    if not args.skip_bert:
        result["bert"] = bert(args.batch, args.seq, args.steps, args.preset, args.device, args.predictions)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
