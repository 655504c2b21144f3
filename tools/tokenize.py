#!/usr/bin/env python3
"""Turns text into token shards that `strata train --data` reads, with a Hugging Face tokenizer.

Input: plain text files (each file one document) or JSONL files (one document per line, its text
under --text-key, "text" by default). The tokenizer is the tokenizer.json of a model directory
(--tokenizer DIR or DIR/tokenizer.json). Each document is encoded and followed by the end-of-text
token when the tokenizer has one (--eot, or the first of <|endoftext|>, <|end_of_text|>, </s>,
<|im_end|>, <|eot_id|> it knows). Output: llm.c shards exactly as strata's TokenDataset
(model/data/token_dataset.h) and karpathy/llm.c dev/data/data_common.py write them: a header of 256
little-endian int32 {magic, version, token count, 0...} then the tokens; magic 20240520 version 1
with uint16 tokens when the vocabulary has at most 65535 ids, else magic 20240801 version 7 with
uint32 tokens. --shard-tokens splits the output into OUT_000000.bin, OUT_000001.bin, ...; the first
--val-tokens tokens go to OUT_val.bin (llm.c's convention: shard 0 is validation).

A dev tool: it needs the `tokenizers` package from PyPI (pip install tokenizers), never a build or
test requirement of strata. Not a data pipeline: no deduplication, filtering or shuffling.

  python3 tools/tokenize.py --tokenizer ~/models/Llama-3.2-1B --out data/mytext corpus/*.jsonl
  strata train --init-from ~/models/Llama-3.2-1B --data 'data/mytext_0*.bin' --val-data data/mytext_val.bin
"""
import os
import sys

# tools/tokenize.py shadows the standard library's `tokenize` (which linecache, inspect and torch
# import) for any script run from tools/: take this directory off the module path first.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import json
import struct

MAGIC_U16, VERSION_U16 = 20240520, 1
MAGIC_U32, VERSION_U32 = 20240801, 7
HEADER_INTS = 256
EOT_CANDIDATES = ["<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|im_end|>", "</s>"]


def load_tokenizer(path):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("tokenize.py: the `tokenizers` package is missing; pip install tokenizers")
    file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
    if not os.path.exists(file):
        sys.exit(f"tokenize.py: {file} does not exist; pass a model directory holding tokenizer.json")
    return Tokenizer.from_file(file)


def documents(paths, text_key):
    for path in paths:
        if path.endswith(".jsonl") or path.endswith(".json"):
            with open(path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        doc = json.loads(line)
                    except json.JSONDecodeError as e:
                        sys.exit(f"tokenize.py: {path}:{n}: not JSON ({e}); pass one JSON object per line")
                    if not isinstance(doc, dict) or not isinstance(doc.get(text_key), str):
                        sys.exit(f"tokenize.py: {path}:{n}: no string under '{text_key}'; pass --text-key")
                    yield doc[text_key]
        else:
            with open(path, encoding="utf-8") as f:
                yield f.read()


def write_shard(path, tokens, wide):
    """One llm.c shard: the header, then the tokens (uint16 or uint32, little-endian)."""
    header = [0] * HEADER_INTS
    header[0], header[1], header[2] = (MAGIC_U32, VERSION_U32, len(tokens)) if wide else (MAGIC_U16, VERSION_U16, len(tokens))
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack(f"<{HEADER_INTS}i", *header))
        f.write(struct.pack(f"<{len(tokens)}{'I' if wide else 'H'}", *tokens))
    os.replace(path + ".tmp", path)
    print(f"{path}: {len(tokens)} tokens ({'uint32' if wide else 'uint16'})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="text files (one document each) or JSONL files")
    ap.add_argument("--tokenizer", required=True, help="a model directory holding tokenizer.json, or the file")
    ap.add_argument("--out", required=True, help="output prefix: OUT_000000.bin ... and OUT_val.bin")
    ap.add_argument("--text-key", default="text", help="JSONL: the key holding each document's text")
    ap.add_argument("--eot", default=None, help="the end-of-text token appended to each document ('' for none)")
    ap.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per training shard")
    ap.add_argument("--val-tokens", type=int, default=0, help="tokens of the first documents kept for OUT_val.bin")
    args = ap.parse_args(argv)

    tok = load_tokenizer(args.tokenizer)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    wide = vocab > 65535
    eot = None
    if args.eot is None:
        for cand in EOT_CANDIDATES:
            if tok.token_to_id(cand) is not None:
                eot = tok.token_to_id(cand)
                break
    elif args.eot:
        eot = tok.token_to_id(args.eot)
        if eot is None:
            sys.exit(f"tokenize.py: the tokenizer has no token '{args.eot}'")
    print(f"vocabulary {vocab} ({'uint32' if wide else 'uint16'} shards), end-of-text id {eot}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    val, train, shard = [], [], 0
    for text in documents(args.inputs, args.text_key):
        ids = tok.encode(text, add_special_tokens=False).ids
        if eot is not None:
            ids.append(eot)
        if max(ids, default=0) >= (1 << 32 if wide else 1 << 16):
            sys.exit("tokenize.py: a token id does not fit the shard's width")
        for t in ids:
            if len(val) < args.val_tokens:
                val.append(t)
            else:
                train.append(t)
        while len(train) >= args.shard_tokens:
            write_shard(f"{args.out}_{shard:06d}.bin", train[: args.shard_tokens], wide)
            train, shard = train[args.shard_tokens:], shard + 1
    if train:
        write_shard(f"{args.out}_{shard:06d}.bin", train, wide)
    if val:
        write_shard(f"{args.out}_val.bin", val, wide)
    if not train and not val:
        sys.exit("tokenize.py: the inputs held no text")


if __name__ == "__main__":
    main()
