#!/usr/bin/env python3
"""Checks that transformers computes strata's loss on a Hugging Face directory strata exported.

With --model DIR it checks that directory (from `strata export --hf` or a checkpoint's step-N/, both
hold config.json); with --preset P it first trains P for --steps steps (`strata train
--checkpoint-dir`) and exports the checkpoint (`strata export --hf`, --dtype). Then, on the same
K*B*T+1 tokens (the start of --data, an llm.c .bin shard; default: seeded random tokens), written
to one shard so that it holds exactly K*B rows of T+1 tokens:
  strata: `strata train --init-from DIR --steps 1 --micro-batch B --grad-accum K --seq T`: the one
          step's K micro-batches read every row once (in a shuffled order, which the mean does not
          see), and its loss, from the --metrics file, is the loss of DIR's weights before the update;
  transformers: AutoModelForCausalLM.from_pretrained(DIR) in float32 on the CPU, the mean
          cross-entropy over the same rows (row r = tokens [r*T, r*T+T]).
It prints both losses and their difference and exits 1 when the relative difference exceeds --tol.

A dev tool: it needs torch and transformers (pip install torch transformers), never a build or test
requirement of strata. Not a benchmark and not a generation check.

  python3 tools/hf_check.py --preset gpt2-tiny --steps 50
  python3 tools/hf_check.py --model out/hf --batch 4 --seq 64
"""
import os
import sys

# tools/tokenize.py shadows the standard library's `tokenize` (which linecache, inspect and torch
# import) for any script run from tools/: take this directory off the module path first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import json
import struct
import subprocess
import tempfile

HEADER_INTS = 256


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        sys.exit(f"hf_check.py: {cmd[0]} {cmd[1]} failed (exit {r.returncode}):\n{r.stdout}")
    return r.stdout


def write_llmc(path, tokens, vocab):
    wide = vocab > 65535
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = (20240801, 7, len(tokens)) if wide else (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(tokens)}{'I' if wide else 'H'}", *tokens))


def read_llmc(path):
    with open(path, "rb") as f:
        header = struct.unpack(f"<{HEADER_INTS}i", f.read(4 * HEADER_INTS))
        wide = header[0] == 20240801
        count = header[2]
        return list(struct.unpack(f"<{count}{'I' if wide else 'H'}", f.read(count * (4 if wide else 2))))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "bin", "strata"))
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="an exported Hugging Face directory (config.json + safetensors)")
    src.add_argument("--preset", help="train this strata preset first, then export it")
    ap.add_argument("--steps", type=int, default=50, help="--preset: training steps before the export")
    ap.add_argument("--dtype", default="f32", help="--preset: export dtype (f32, bf16, f16)")
    ap.add_argument("--shard-size", default="64KB", help="--preset: export shard size (small: the check reads shards)")
    ap.add_argument("--data", help="an llm.c token shard to compare on; default: random tokens")
    ap.add_argument("--text", help="a text file compared on as byte tokens (models with vocab >= 256)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batches", type=int, default=4, help="batches the loss is averaged over")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tol", type=float, default=1e-4, help="largest relative difference accepted")
    ap.add_argument("--work", help="working directory (default: a temporary one)")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM

    work = args.work or tempfile.mkdtemp(prefix="hf_check-")
    os.makedirs(work, exist_ok=True)
    model_dir = args.model
    if args.preset:
        run_dir = os.path.join(work, "run")
        model_dir = os.path.join(work, "hf")
        run([args.strata, "train", "--preset", args.preset, "--steps", str(args.steps), "--checkpoint-dir", run_dir,
             "--device", "cpu", "--log-level", "warn"])
        run([args.strata, "export", "--hf", model_dir, "--from", run_dir, "--dtype", args.dtype,
             "--shard-size", args.shard_size])
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    vocab = config["vocab_size"]

    B, T, K = args.batch, args.seq, args.batches
    need = K * B * T + 1
    if args.data:
        tokens = read_llmc(args.data)
        if len(tokens) < need:
            sys.exit(f"hf_check.py: {args.data} has {len(tokens)} tokens; {need} are needed")
        tokens = tokens[:need]
    elif args.text:
        with open(args.text, "rb") as f:
            tokens = list(f.read(need))
        if len(tokens) < need or vocab < 256:
            sys.exit(f"hf_check.py: {args.text} needs {need} bytes and a vocabulary of 256 or more")
    else:
        g = torch.Generator().manual_seed(args.seed)
        tokens = torch.randint(0, vocab, (need,), generator=g).tolist()
    data = os.path.join(work, "tokens.bin")  # exactly K*B*T+1 tokens: one step reads every row once
    write_llmc(data, tokens, vocab)

    metrics = os.path.join(work, "metrics.jsonl")
    run([args.strata, "train", "--init-from", model_dir, "--steps", "1", "--data", data, "--data-format", "llmc",
         "--val-fraction", "0", "--micro-batch", str(B), "--grad-accum", str(K), "--seq", str(T), "--metrics", metrics,
         "--device", "cpu", "--log-level", "warn"])
    with open(metrics) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    strata_loss = lines[0]["loss"]

    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()
    losses = []
    with torch.no_grad():
        for k in range(K):
            window = torch.tensor(tokens[k * B * T: k * B * T + B * T + 1], dtype=torch.long)
            x, y = window[:-1].view(B, T), window[1:].view(B, T)
            logits = model(input_ids=x).logits.float()
            losses.append(torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.reshape(-1)).item())
    hf_loss = sum(losses) / len(losses)
    diff = abs(strata_loss - hf_loss)
    rel = diff / abs(hf_loss)
    print(json.dumps({"model": model_dir, "architecture": config.get("architectures", ["?"])[0],
                      "torch_dtype": config.get("torch_dtype"), "batches": K, "batch": B, "seq": T,
                      "strata_loss": strata_loss, "transformers_loss": hf_loss, "abs_diff": diff, "rel_diff": rel}))
    if rel > args.tol:
        sys.exit(f"hf_check.py: the losses differ by {rel:.2e} (relative), more than --tol {args.tol}")
    print(f"ok: strata {strata_loss:.7f}, transformers {hf_loss:.7f}, difference {diff:.2e} ({rel:.2e} relative)")


if __name__ == "__main__":
    main()
