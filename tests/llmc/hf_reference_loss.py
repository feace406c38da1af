#!/usr/bin/env python3
"""A reference GPT-2 forward of a Hugging Face model.safetensors in PyTorch (Debian's python3-torch), written
the way Hugging Face's GPT2LMHeadModel computes: Conv1D layers as x @ W + b with W stored [in, out], GELU's
tanh form ("gelu_new"), LayerNorm eps 1e-5, causal softmax attention, the output layer tied to wte. In float64,
so it is a reference for our fp32 loss. Reads the file with the standard library (not the safetensors package).

usage: hf_reference_loss.py MODEL.safetensors TOKENS   (TOKENS: comma-separated ids, inputs then the last target)
Prints the mean cross-entropy of predicting tokens[1:] from tokens[:-1].
"""
import json
import math
import os
import struct
import sys

try:
    import torch
except ImportError:
    sys.exit("hf_reference_loss.py: PyTorch is missing; run scripts/setup (it installs python3-torch)")

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def load(path):
    with open(path, "rb") as f:
        data = f.read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    body = data[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__" or entry["dtype"] not in DTYPES:
            continue
        begin, end = entry["data_offsets"]
        raw = bytearray(body[begin:end])
        t = torch.frombuffer(raw, dtype=DTYPES[entry["dtype"]]) if raw else torch.zeros(0)
        key = name[len("transformer."):] if name.startswith("transformer.") else name
        tensors[key] = t.reshape(entry["shape"]).to(torch.float64)
    return tensors


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def forward_loss(w, heads, tokens):
    inputs, targets = torch.tensor(tokens[:-1]), torch.tensor(tokens[1:])
    T, C = len(inputs), w["wte.weight"].shape[1]
    hs = C // heads
    x = w["wte.weight"][inputs] + w["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    layer = 0
    while f"h.{layer}.ln_1.weight" in w:
        p = lambda n: w[f"h.{layer}.{n}"]
        h = layer_norm(x, p("ln_1.weight"), p("ln_1.bias"))
        q, k, v = (h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")).split(C, dim=-1)
        q, k, v = (t.reshape(T, heads, hs).transpose(0, 1) for t in (q, k, v))
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hs)
        att = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(0, 1).reshape(T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layer_norm(x, p("ln_2.weight"), p("ln_2.bias"))
        x = x + gelu_new(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias")) @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
        layer += 1
    x = layer_norm(x, w["ln_f.weight"], w["ln_f.bias"])
    logits = x @ w["wte.weight"].T
    return torch.nn.functional.cross_entropy(logits, targets).item()


def main():
    path, tokens = sys.argv[1], [int(t) for t in sys.argv[2].split(",")]
    with open(os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")) as f:
        heads = json.load(f)["n_head"]
    print(repr(forward_loss(load(path), heads, tokens)))


if __name__ == "__main__":
    main()
