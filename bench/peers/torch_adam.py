#!/usr/bin/env python3
"""PyTorch CPU Adam/AdamW peer for `strata bench adam`.

Times torch.optim.Adam and torch.optim.AdamW on the CPU over --params fp32 parameters split into
--tensors tensors, with --threads intra-op threads, for every implementation this torch has
(for-loop, foreach, and fused on CPU from torch 2.4). Prints one JSON object per line:
{"optimizer", "impl", "tensors", "params", "threads", "grad_dtype", "seconds", "params_per_s", "torch"}.
Torch's Adam needs gradients in the parameters' dtype, so --grad-dtype other than fp32 is reported
and measured with fp32 gradients. Not a correctness check: strata's own tests do that.
"""
import argparse
import json
import statistics
import sys
import time

import torch


def implementations(cls):
    """The implementation flags this torch accepts, by name."""
    impls = [("for-loop", {"foreach": False})]
    try:
        cls([torch.zeros(1, requires_grad=True)], foreach=True)
        impls.append(("foreach", {"foreach": True}))
    except (TypeError, RuntimeError):
        pass
    try:
        p = torch.zeros(16, requires_grad=True)
        p.grad = torch.zeros(16)
        opt = cls([p], fused=True)
        opt.step()  # torch < 2.4 accepts the flag but only runs fused on CUDA
        impls.append(("fused", {"fused": True}))
    except (TypeError, RuntimeError, AssertionError):
        pass
    return impls


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--params", type=int, default=100_000_000)
    ap.add_argument("--tensors", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--grad-dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--optimizers", default="Adam,AdamW")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    sizes = [args.params // args.tensors] * args.tensors
    sizes[-1] += args.params - sum(sizes)
    for name in args.optimizers.split(","):
        cls = getattr(torch.optim, name)
        for impl, flags in implementations(cls):
            params = [torch.empty(n).uniform_(-1, 1).requires_grad_() for n in sizes]
            for p in params:
                p.grad = torch.empty_like(p).uniform_(-0.1, 0.1)
            opt = cls(params, lr=1e-3, weight_decay=0.01, **flags)
            opt.step()  # warm-up: allocates the states
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                opt.step()
                times.append(time.perf_counter() - t0)
            seconds = statistics.median(times)
            print(json.dumps({"optimizer": name, "impl": impl, "tensors": args.tensors, "params": args.params,
                              "threads": torch.get_num_threads(), "grad_dtype": "fp32", "seconds": seconds,
                              "params_per_s": args.params / seconds, "torch": torch.__version__}), flush=True)
            del opt, params
    return 0


if __name__ == "__main__":
    sys.exit(main())
