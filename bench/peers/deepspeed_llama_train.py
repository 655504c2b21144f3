#!/usr/bin/env python3
"""DeepSpeed peer for `strata train` with offload: ZeRO-3, parameters and optimizer offloaded to the CPU.

The DeepSpeed ZeRO-Infinity setup strata's users know: ZeRO stage 3 with offload_param and
offload_optimizer on pinned CPU memory (DeepSpeedCPUAdam, AdamW), bf16, activation checkpointing
per transformer block, gradient clipping 1.0, on the LLaMA architecture of strata's preset
(torch_gpt_train.py's model: RMSNorm, RoPE, SwiGLU, untied head unless the preset ties it), random
tokens, one process on one GPU. Prints one JSON line like torch_gpt_train.py's: the median step
time, tokens/s and TFLOP/s by strata's model-FLOPs count (6 N_mm + 6 L C T per token; the
recomputation not counted), and the peak GPU memory torch allocated. Not a correctness check.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.utils.checkpoint

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_train import GPT, matmul_params  # noqa: E402

PRESETS = {  # strata's model/net/model_config.cc: (vocab, max_seq, dim, n_layer, n_head, n_kv_head, ffn, tied)
    "llama-1b": (128256, 8192, 2048, 16, 32, 8, 8192, True),
    "llama-3b": (128256, 8192, 3072, 28, 24, 8, 8192, True),
    "llama-7b": (32000, 4096, 4096, 32, 32, 32, 11008, False),
    "llama-13b": (32000, 4096, 5120, 40, 40, 40, 13824, False),
}


class Checkpointed(GPT):
    """torch_gpt_train's model with each block recomputed in the backward (strata's
    --activation-checkpointing keeps each layer's input and recomputes the rest)."""

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx)
        inv = 1.0 / (10000 ** (torch.arange(0, self.HS, 2, device=idx.device).float() / self.HS))
        ang = torch.outer(torch.arange(T, device=idx.device).float(), inv)
        rope = (ang.cos().to(x.dtype), ang.sin().to(x.dtype))
        for b in self.blocks:
            x = torch.utils.checkpoint.checkpoint(b, x, rope, use_reentrant=False)
        logits = self.head(self.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="llama-7b", choices=sorted(PRESETS))
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("deepspeed_llama_train: no CUDA device visible to torch")
    import deepspeed  # after the check: importing it without a GPU prints pages of warnings

    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29511"), ("RANK", "0"), ("LOCAL_RANK", "0"),
                 ("WORLD_SIZE", "1")):
        os.environ.setdefault(k, v)
    deepspeed.init_distributed()
    V, maxT, C, L, NH, NKV, H, tied = PRESETS[args.preset]
    B, T, K = args.micro_batch, args.seq, args.grad_accum
    config = {
        "train_micro_batch_size_per_gpu": B,
        "gradient_accumulation_steps": K,
        "gradient_clipping": 1.0,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1}},
        "zero_optimization": {
            "stage": 3,
            "offload_param": {"device": "cpu", "pin_memory": True},
            "offload_optimizer": {"device": "cpu", "pin_memory": True},
            "overlap_comm": True,
            "contiguous_gradients": True,
        },
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    torch.manual_seed(0)
    with deepspeed.zero.Init(config_dict_or_path=config, remote_device="cpu", pin_memory=True):
        model = Checkpointed("llama", V, maxT, C, L, NH, NKV, H)
        if tied:
            model.head.weight = model.wte.weight
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    times = []
    loss = None
    for step in range(args.warmup + args.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(K):
            idx = torch.randint(0, V, (B, T + 1), device="cuda")
            loss = engine(idx[:, :-1], idx[:, 1:])
            engine.backward(loss)
            engine.step()
        torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - t0)
        print(f"step {step + 1}: {time.perf_counter() - t0:.3f} s, loss {loss.item():.4f}", file=sys.stderr, flush=True)
    step_s = statistics.median(times)
    flops = (6 * matmul_params("llama", V, C, L, NH, NKV, H) + 6 * L * C * T) * B * T * K
    out = {"peer": "deepspeed", "deepspeed": deepspeed.__version__, "torch": torch.__version__,
           "preset": args.preset, "dtype": "bf16", "zero": 3, "offload": "param+optimizer cpu",
           "micro_batch": B, "seq": T, "grad_accum": K, "step_s": step_s, "tokens_per_s": B * T * K / step_s,
           "tflops": flops / step_s / 1e12, "loss": loss.item(),
           "gpu_peak_bytes": torch.cuda.max_memory_allocated(), "device": torch.cuda.get_device_name()}
    if args.peak_tflops > 0:
        out["mfu"] = out["tflops"] / args.peak_tflops
    assert math.isfinite(out["loss"])
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
