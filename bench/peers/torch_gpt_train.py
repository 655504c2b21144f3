#!/usr/bin/env python3
"""PyTorch peer for `strata train` on a GPU: GPT-2 (or LLaMA-style) training throughput.

Builds the same architecture as strata's preset (pre-norm GPT-2: learned positions, LayerNorm,
GELU-tanh MLP, tied head; or LLaMA: RMSNorm, RoPE, SwiGLU, untied head), trains it on uniform
random tokens with the working weights in --dtype (bf16 autocast over fp32 masters, as strata's
mixed precision keeps fp32 masters), fused AdamW on the device, causal attention through
F.scaled_dot_product_attention (flash attention on a GPU), and prints one JSON line with the median
step time, tokens/s, TFLOP/s by strata's model-FLOPs count (model/net/flops.h: 6 N_mm + 6 L C T per
token) and that over --peak-tflops when given. --compile adds torch.compile. Not a correctness
check: strata's golden tests do that.
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # name: (arch, vocab, max_seq, dim, n_layer, n_head, n_kv_head, ffn_hidden)
    "gpt2-124m": ("gpt2", 50257, 1024, 768, 12, 12, 12, 3072),
    "gpt2-350m": ("gpt2", 50257, 1024, 1024, 24, 16, 16, 4096),
    "gpt2-774m": ("gpt2", 50257, 1024, 1280, 36, 20, 20, 5120),
    "gpt2-1.5b": ("gpt2", 50257, 1024, 1600, 48, 25, 25, 6400),
}


class Block(nn.Module):
    def __init__(self, arch, C, NH, NKV, H):
        super().__init__()
        self.arch, self.NH, self.NKV, self.HS = arch, NH, NKV, C // NH
        norm = nn.LayerNorm if arch == "gpt2" else nn.RMSNorm
        self.ln1, self.ln2 = norm(C), norm(C)
        bias = arch == "gpt2"
        self.qkv = nn.Linear(C, C + 2 * NKV * self.HS, bias=bias)
        self.proj = nn.Linear(C, C, bias=bias)
        self.fc = nn.Linear(C, H if arch == "gpt2" else 2 * H, bias=bias)
        self.out = nn.Linear(H, C, bias=bias)

    def forward(self, x, rope):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([C, self.NKV * self.HS, self.NKV * self.HS], dim=-1)
        q = q.view(B, T, self.NH, self.HS).transpose(1, 2)
        k = k.view(B, T, self.NKV, self.HS).transpose(1, 2)
        v = v.view(B, T, self.NKV, self.HS).transpose(1, 2)
        if rope is not None:
            q, k = apply_rope(q, rope), apply_rope(k, rope)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.NKV != self.NH)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        h = self.fc(self.ln2(x))
        if self.arch == "gpt2":
            h = F.gelu(h, approximate="tanh")
        else:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        return x + self.out(h)


def apply_rope(x, rope):
    cos, sin = rope
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class GPT(nn.Module):
    def __init__(self, arch, V, maxT, C, L, NH, NKV, H):
        super().__init__()
        self.arch = arch
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(maxT, C) if arch == "gpt2" else None
        self.blocks = nn.ModuleList(Block(arch, C, NH, NKV, H) for _ in range(L))
        self.ln_f = nn.LayerNorm(C) if arch == "gpt2" else nn.RMSNorm(C)
        self.head = nn.Linear(C, V, bias=False)
        if arch == "gpt2":
            self.head.weight = self.wte.weight
        self.HS = C // NH
        # GPT-2's initialisation (as strata's): N(0, 0.02), residual projections / sqrt(2 L), biases 0.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("proj.weight", "out.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        rope = None
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(T, device=idx.device))
        else:
            inv = 1.0 / (10000 ** (torch.arange(0, self.HS, 2, device=idx.device).float() / self.HS))
            ang = torch.outer(torch.arange(T, device=idx.device).float(), inv)
            rope = (ang.cos().to(x.dtype), ang.sin().to(x.dtype))
        for b in self.blocks:
            x = b(x, rope)
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def matmul_params(arch, V, C, L, NH, NKV, H):
    HS = C // NH
    fc_rows = H if arch == "gpt2" else 2 * H
    return L * ((C + 2 * NKV * HS) * C + C * C + fc_rows * C + C * H) + V * C


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--micro-batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--dtype", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_gpt_train: no CUDA device visible to torch")
    arch, V, maxT, C, L, NH, NKV, H = PRESETS[args.preset]
    torch.manual_seed(0)
    model = GPT(arch, V, maxT, C, L, NH, NKV, H).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = torch.compile(model) if args.compile else model
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.dtype]
    scaler = torch.amp.GradScaler(enabled=args.dtype == "fp16")
    B, T = args.micro_batch, args.seq
    times = []
    for step in range(args.warmup + args.steps):
        idx = torch.randint(0, V, (B, T + 1), device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=amp, enabled=amp is not None):
            loss = step_fn(idx[:, :-1], idx[:, 1:])
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    flops = (6 * matmul_params(arch, V, C, L, NH, NKV, H) + 6 * L * C * T) * B * T
    out = {"peer": "torch", "torch": torch.__version__, "preset": args.preset, "dtype": args.dtype,
           "compile": args.compile, "micro_batch": B, "seq": T, "step_s": step_s,
           "tokens_per_s": B * T / step_s, "tflops": flops / step_s / 1e12,
           "loss": loss.item(), "device": torch.cuda.get_device_name()}
    if args.peak_tflops > 0:
        out["mfu"] = out["tflops"] / args.peak_tflops
    assert math.isfinite(out["loss"])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
