#!/usr/bin/env python3
"""Plain PyTorch reference for strata's GPT-2 and LLaMA models: writes one golden safetensors file
per model (initial weights, fixed tokens/targets, logits, loss, every gradient, a few activations,
and the losses of AdamW steps) that the C++ tests compare against.

It is a dev tool, never a build or test requirement: the tests only read the committed files in
tests/data/golden/. It does not use transformers: the two models are written out below with the
Hugging Face semantics and tensor names. Works with torch 1.13 and 2.x; numpy is not needed.

Precision: the weights are drawn in float32 (so they are exactly representable in the file) and
everything else is computed in float64 from them, then rounded to --dtype (float32 by default)
for storage. A stored value is thus the exact answer to within half an fp32 ulp, and a C++ fp32
result may be compared to it with a tolerance that only has to cover the C++ side's own
rounding. The same run repeated in float32 by torch is measured against it, and that error is
written to the metadata ("torch_fp32_error") as a yardstick for those tolerances.
"""
import argparse
import json
import math
import struct
import sys

import torch
import torch.nn as nn

# ----------------------------------------------------------------------------------------------
# Presets. Config keys are the Hugging Face config.json names, so the metadata reads like one.

PRESETS = {
    "gpt2": {
        "model_type": "gpt2",
        "vocab_size": 256,  # byte vocabulary
        "n_positions": 64,  # maxT > T: wpe rows T..maxT-1 exist and get zero gradient
        "n_embd": 48,
        "n_layer": 2,
        "n_head": 4,
        "n_inner": 192,  # 4 * n_embd
        "layer_norm_epsilon": 1e-5,
        "activation_function": "gelu_new",  # tanh approximation
        "tie_word_embeddings": True,
    },
    "llama": {
        "model_type": "llama",
        "vocab_size": 256,
        "max_position_embeddings": 64,
        "hidden_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 128,  # 8/3 * hidden_size
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
    },
}
BATCH, SEQ_LEN = 2, 32  # (B, T) of the golden batch, both models

# ----------------------------------------------------------------------------------------------
# GPT-2: learned positions, pre-LayerNorm blocks, GELU (tanh), multi-head attention, lm_head tied
# to wte. Linear layers are HF's Conv1D: weight stored (in, out), y = x @ W + b.


class Conv1D(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n_in, n_out))  # (in, out): transposed vs nn.Linear
        self.bias = nn.Parameter(torch.empty(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def causal_attention(q, k, v):
    """q (B, NH, T, HS), k and v (B, NH, T, HS) -> (B, NH, T, HS); scale 1 / sqrt(HS)."""
    T, HS = q.size(-2), q.size(-1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(HS)  # (B, NH, T, T)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def keep(acts, name, t):
    if acts is not None:
        acts[name] = t.detach().clone()


class GPT2Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.n_head = cfg["n_head"]
        self.c_attn = Conv1D(C, 3 * C)  # (C, 3C): columns [q | k | v]
        self.c_proj = Conv1D(C, C)

    def forward(self, x, acts, prefix):
        B, T, C = x.shape
        NH, HS = self.n_head, C // self.n_head
        qkv = self.c_attn(x)  # (B, T, 3C)
        keep(acts, prefix + "qkv", qkv)
        q, k, v = (t.view(B, T, NH, HS).transpose(1, 2) for t in qkv.split(C, dim=2))
        y = causal_attention(q, k, v).transpose(1, 2).reshape(B, T, C)  # heads side by side
        keep(acts, prefix + "y", y)
        out = self.c_proj(y)
        keep(acts, prefix + "out", out)
        return out


class GPT2MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_fc = Conv1D(cfg["n_embd"], cfg["n_inner"])  # (C, 4C)
        self.c_proj = Conv1D(cfg["n_inner"], cfg["n_embd"])  # (4C, C)

    def forward(self, x):
        return self.c_proj(gelu_tanh(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["n_embd"], cfg["layer_norm_epsilon"]
        self.ln_1 = nn.LayerNorm(C, eps=eps)
        self.attn = GPT2Attention(cfg)
        self.ln_2 = nn.LayerNorm(C, eps=eps)
        self.mlp = GPT2MLP(cfg)

    def forward(self, x, acts, prefix):
        h = self.ln_1(x)
        keep(acts, prefix + "ln_1", h)
        x = x + self.attn(h, acts, prefix + "attn.")
        x = x + self.mlp(self.ln_2(x))
        keep(acts, prefix + "out", x)
        return x


class GPT2(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["n_embd"]
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(cfg["vocab_size"], C),  # (V, C), also the lm_head
                wpe=nn.Embedding(cfg["n_positions"], C),  # (maxT, C)
                h=nn.ModuleList(GPT2Block(cfg) for _ in range(cfg["n_layer"])),
                ln_f=nn.LayerNorm(C, eps=cfg["layer_norm_epsilon"]),
            )
        )

    def forward(self, tokens, acts=None):
        tr = self.transformer
        T = tokens.size(1)
        x = tr.wte(tokens) + tr.wpe(torch.arange(T))
        keep(acts, "act.embed", x)
        for i, block in enumerate(tr.h):
            x = block(x, acts if i == 0 else None, "act.h.%d." % i)
        x = tr.ln_f(x)
        keep(acts, "act.ln_f", x)
        return x @ tr.wte.weight.t()  # (B, T, V), tied head


def gpt2_residual_projection(name):
    return name.endswith("attn.c_proj.weight") or name.endswith("mlp.c_proj.weight")


# ----------------------------------------------------------------------------------------------
# LLaMA: RMSNorm, rotary positions ("rotate half"), SwiGLU MLP, grouped-query attention, untied
# head. Linear layers are nn.Linear without bias: weight stored (out, in), y = x @ W^T.


class RMSNorm(nn.Module):
    def __init__(self, C, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.empty(C))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(T, HS, theta, dtype):
    """cos, sin (T, HS): position p, element i and i + HS/2 at angle p * theta^(-2i/HS)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))  # (HS/2)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)  # (T, HS/2), in float64
    emb = torch.cat((angles, angles), dim=-1)  # (T, HS)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):
    """x (B, T, H, HS); cos, sin (T, HS)."""
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return x * cos + rotate_half(x) * sin


class LlamaAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, NH, NKV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.NH, self.NKV, self.HS, self.theta = NH, NKV, C // NH, cfg["rope_theta"]
        self.q_proj = nn.Linear(C, NH * self.HS, bias=False)  # (NH*HS, C)
        self.k_proj = nn.Linear(C, NKV * self.HS, bias=False)  # (NKV*HS, C)
        self.v_proj = nn.Linear(C, NKV * self.HS, bias=False)
        self.o_proj = nn.Linear(NH * self.HS, C, bias=False)

    def forward(self, x, acts, prefix):
        B, T, _ = x.shape
        NH, NKV, HS = self.NH, self.NKV, self.HS
        cos, sin = rope_cos_sin(T, HS, self.theta, x.dtype)
        q = apply_rope(self.q_proj(x).view(B, T, NH, HS), cos, sin)
        k = apply_rope(self.k_proj(x).view(B, T, NKV, HS), cos, sin)
        v = self.v_proj(x).view(B, T, NKV, HS)
        keep(acts, prefix + "q_rot", q)
        keep(acts, prefix + "k_rot", k)
        rep = NH // NKV  # query head h reads kv head h // rep (HF repeat_kv)
        k = k.transpose(1, 2).repeat_interleave(rep, dim=1)
        v = v.transpose(1, 2).repeat_interleave(rep, dim=1)
        y = causal_attention(q.transpose(1, 2), k, v).transpose(1, 2).reshape(B, T, NH * HS)
        keep(acts, prefix + "y", y)
        out = self.o_proj(y)
        keep(acts, prefix + "out", out)
        return out


class LlamaMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, H = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj = nn.Linear(C, H, bias=False)  # (H, C)
        self.up_proj = nn.Linear(C, H, bias=False)  # (H, C)
        self.down_proj = nn.Linear(H, C, bias=False)  # (C, H)

    def forward(self, x):
        g = self.gate_proj(x)
        return self.down_proj(g * torch.sigmoid(g) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(C, eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(C, eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x, acts, prefix):
        h = self.input_layernorm(x)
        keep(acts, prefix + "input_layernorm", h)
        x = x + self.self_attn(h, acts, prefix + "self_attn.")
        x = x + self.mlp(self.post_attention_layernorm(x))
        keep(acts, prefix + "out", x)
        return x


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        C = cfg["hidden_size"]
        self.model = nn.ModuleDict(
            dict(
                embed_tokens=nn.Embedding(cfg["vocab_size"], C),  # (V, C)
                layers=nn.ModuleList(LlamaLayer(cfg) for _ in range(cfg["num_hidden_layers"])),
                norm=RMSNorm(C, cfg["rms_norm_eps"]),
            )
        )
        self.lm_head = nn.Linear(C, cfg["vocab_size"], bias=False)  # (V, C), untied

    def forward(self, tokens, acts=None):
        m = self.model
        x = m.embed_tokens(tokens)
        keep(acts, "act.embed", x)
        for i, layer in enumerate(m.layers):
            x = layer(x, acts if i == 0 else None, "act.layers.%d." % i)
        x = m.norm(x)
        keep(acts, "act.norm", x)
        return self.lm_head(x)


def llama_residual_projection(name):
    return name.endswith("self_attn.o_proj.weight") or name.endswith("mlp.down_proj.weight")


# ----------------------------------------------------------------------------------------------
# Initialisation, inputs, loss.

INIT_STD = 0.02
GAIN_STD = 0.1  # norm gains are 1 + normal(0, 0.1), not ones, so a forgotten gain shows
BIAS_STD = 0.02  # biases are normal(0, 0.02), not zeros, so a forgotten bias shows


def init_rule_text(n_layer):
    return (
        "parameters in named_parameters() order, each drawn in float32 from one torch.Generator "
        "seeded with --seed: 2-D weights normal(0, %g), residual projections (GPT-2 attn.c_proj/"
        "mlp.c_proj, LLaMA o_proj/down_proj) normal(0, %g / sqrt(2 * n_layer)) = normal(0, %.9g); "
        "norm gains 1 + normal(0, %g); biases normal(0, %g)"
        % (INIT_STD, INIT_STD, INIT_STD / math.sqrt(2 * n_layer), GAIN_STD, BIAS_STD)
    )


def init_weights(model, n_layer, is_residual, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            z = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() >= 2:
                std = INIT_STD / math.sqrt(2 * n_layer) if is_residual(name) else INIT_STD
                p.copy_(z * std)
            elif name.endswith("bias"):
                p.copy_(z * BIAS_STD)
            else:
                p.copy_(1.0 + z * GAIN_STD)


def make_batch(V, gen):
    """tokens (B, T) and targets (B, T) int64: one random sequence of T+1 tokens, shifted by one."""
    seq = torch.randint(0, V, (BATCH, SEQ_LEN + 1), generator=gen)
    return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()


def mean_cross_entropy(logits, targets):
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


# Weight decay rule (the C++ trainer must replicate it): decay every tensor with 2 or more
# dimensions (embeddings, position embeddings, every projection, lm_head); no decay for 1-D
# tensors (biases, norm gains). One optimizer state per tensor; GPT-2's tied wte is one tensor.
def decays(p):
    return p.dim() >= 2


def optimizer_config(args):
    return {
        "type": "torch.optim.AdamW",
        "lr": args.lr,
        "lr_schedule": "constant",
        "betas": [0.9, 0.95],
        "eps": 1e-8,
        "weight_decay": 0.1,
        "weight_decay_rule": "weight_decay on tensors with ndim >= 2 (embeddings, projections, "
        "lm_head); 0 on ndim == 1 (biases, norm gains)",
        "update": "decoupled: p -= lr*wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2; "
        "p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps), t = 1, 2, ...",
        "grad_clip": "none",
        "steps": args.steps,
        "batch": "the same golden batch (tokens, targets) every step",
        "losses": "adamw.losses[i] = loss after i updates, i = 0..steps (adamw.losses[0] == loss)",
    }


def make_optimizer(model, cfg):
    decay = [p for p in model.parameters() if decays(p)]
    no_decay = [p for p in model.parameters() if not decays(p)]
    groups = [{"params": decay, "weight_decay": cfg["weight_decay"]}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg["eps"])


# ----------------------------------------------------------------------------------------------
# Running the reference.


def forward_backward(model, tokens, targets, acts=None):
    model.zero_grad(set_to_none=True)
    logits = model(tokens, acts)
    loss = mean_cross_entropy(logits, targets)
    loss.backward()
    grads = {"grad." + n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return logits.detach(), loss.detach(), grads


def adamw_losses(model, tokens, targets, opt_cfg, steps):
    opt = make_optimizer(model, opt_cfg)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = mean_cross_entropy(model(tokens), targets)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    with torch.no_grad():
        losses.append(mean_cross_entropy(model(tokens), targets).item())
    return losses


def run(model_cls, cfg, dtype, init_state, tokens, targets, opt_cfg, steps):
    model = model_cls(cfg)
    model.load_state_dict(init_state)
    model.to(dtype)
    acts = {}
    logits, loss, grads = forward_backward(model, tokens, targets, acts)
    losses = adamw_losses(model, tokens, targets, opt_cfg, steps)
    return {"logits": logits, "loss": loss, "grads": grads, "acts": acts, "losses": losses}


def normwise_error(approx, exact):
    """max |approx - exact| / max |exact|: the error relative to the tensor's scale."""
    scale = exact.abs().max().item()
    return (approx.double() - exact).abs().max().item() / (scale if scale > 0 else 1.0)


# ----------------------------------------------------------------------------------------------
# A minimal safetensors writer (struct + json): 8-byte little-endian header length, the JSON
# header padded with spaces to a multiple of 8, then the tensors back to back in the given order.

SAFE_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.int32: "I32"}


def write_safetensors(path, tensors, metadata):
    header = {"__metadata__": metadata}
    chunks, offset = [], 0
    for name, t in tensors:
        t = t.contiguous()
        data = bytes(t.view(-1).view(torch.uint8).tolist()) if t.numel() else b""
        header[name] = {"dtype": SAFE_DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for c in chunks:
            f.write(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(PRESETS), required=True)
    ap.add_argument("--out", required=True, help="safetensors file to write")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--steps", type=int, default=10, help="AdamW steps whose losses are recorded")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--dtype", choices=["float32", "float64"], default="float32", help="storage dtype of the tensors")
    args = ap.parse_args()
    if sys.byteorder != "little":
        sys.exit("torch_reference.py writes little-endian bytes from memory; run it on a little-endian host")
    torch.use_deterministic_algorithms(True)

    cfg = PRESETS[args.model]
    if args.model == "gpt2":
        model_cls, n_layer, is_residual = GPT2, cfg["n_layer"], gpt2_residual_projection
    else:
        model_cls, n_layer, is_residual = Llama, cfg["num_hidden_layers"], llama_residual_projection
    gen = torch.Generator().manual_seed(args.seed)
    model = model_cls(cfg)
    init_weights(model, n_layer, is_residual, gen)
    init_state = {k: v.clone() for k, v in model.state_dict().items()}
    tokens, targets = make_batch(cfg["vocab_size"], gen)
    opt_cfg = optimizer_config(args)

    ref = run(model_cls, cfg, torch.float64, init_state, tokens, targets, opt_cfg, args.steps)
    f32 = run(model_cls, cfg, torch.float32, init_state, tokens, targets, opt_cfg, args.steps)
    fp32_error = {"logits": normwise_error(f32["logits"], ref["logits"]), "loss": normwise_error(f32["loss"], ref["loss"])}
    for group in ("grads", "acts"):
        fp32_error.update({n: normwise_error(f32[group][n], ref[group][n]) for n in ref[group]})
    fp32_error["adamw.losses"] = normwise_error(torch.tensor(f32["losses"]), torch.tensor(ref["losses"], dtype=torch.float64))

    store = torch.float32 if args.dtype == "float32" else torch.float64
    # Wider dtypes first: every tensor stays aligned to its element size in the file.
    tensors = [("loss", ref["loss"].reshape(1)), ("adamw.losses", torch.tensor(ref["losses"], dtype=torch.float64))]
    tensors += [(n, p.to(store)) for n, p in init_state.items()]
    tensors += [("logits", ref["logits"].to(store))]
    tensors += [(n, g.to(store)) for n, g in ref["grads"].items()]
    tensors += [(n, a.to(store)) for n, a in ref["acts"].items()]
    tensors += [("tokens", tokens.to(torch.int32)), ("targets", targets.to(torch.int32))]

    metadata = {
        "format": "strata-golden-v1",
        "model": args.model,
        "config": json.dumps(cfg),
        "batch": json.dumps({"B": BATCH, "T": SEQ_LEN}),
        "seed": str(args.seed),
        "init": init_rule_text(n_layer),
        "inputs": "tokens (B, T) int32 = seq[:, :-1], targets (B, T) int32 = seq[:, 1:], seq = "
        "torch.randint(0, V, (B, T+1)) from the same generator after the weights; no ignored targets",
        "loss": "mean cross-entropy over all B*T positions",
        "precision": "weights drawn in float32 and stored exactly; logits, loss, grads, acts and "
        "adamw.losses computed in float64 from them, then rounded to the storage dtype "
        "(loss and adamw.losses stay F64)",
        "storage_dtype": args.dtype,
        "torch_fp32_error": json.dumps(fp32_error),
        "optimizer": json.dumps(opt_cfg),
        "torch_version": torch.__version__,
        "python_version": sys.version.split()[0],
        "generator": "tools/reference/torch_reference.py --model %s --seed %d --steps %d --lr %g --dtype %s"
        % (args.model, args.seed, args.steps, args.lr, args.dtype),
    }
    write_safetensors(args.out, tensors, metadata)
    worst = max(fp32_error.items(), key=lambda kv: kv[1])
    print("%s: %d tensors, loss %.9f, adamw losses %.6f -> %.6f; torch fp32 worst normwise error %.2e (%s)"
          % (args.out, len(tensors), ref["loss"].item(), ref["losses"][0], ref["losses"][-1], worst[1], worst[0]))


if __name__ == "__main__":
    main()
