#!/usr/bin/env python3
"""Writes a GPT-2 model.safetensors in the Hugging Face layout from an llm.c model file, using only Python's
standard library: a writer independent of model/safetensors_format (it shares no code with it), for the tests.

usage: hf_safetensors_writer.py LLMC.bin OUT.safetensors [--dtype f32|f16|bf16] [--prefix transformer.]
                                [--lm-head] [--mask-buffers] [--config]

The tensors are the hub's: wte.weight [V, C] (the unpadded vocabulary), wpe.weight, h.N.* with Conv1D
weights stored [in, out], ln_f.*; optionally the tied lm_head.weight, the causal-mask buffers older files carry
(h.N.attn.bias, h.N.attn.masked_bias), and config.json beside the file. The header lists the tensors in
reverse name order and is not padded, unlike our writer's.
"""
import argparse
import array
import json
import os
import struct


def read_llmc(path):
    with open(path, "rb") as f:
        data = f.read()
    header = struct.unpack("<256i", data[:1024])
    if header[0] != 20240326 or header[1] != 3:
        raise SystemExit(f"{path}: not an llm.c fp32 GPT-2 file")
    max_t, vocab, layers, heads, c, vp = header[2:8]
    values = array.array("f")
    values.frombytes(data[1024:])
    # llm.c's order, parameter-major across layers.
    sizes = [("wte", vp * c), ("wpe", max_t * c), ("ln1w", layers * c), ("ln1b", layers * c),
             ("qkvw", layers * 3 * c * c), ("qkvb", layers * 3 * c), ("attprojw", layers * c * c),
             ("attprojb", layers * c), ("ln2w", layers * c), ("ln2b", layers * c), ("fcw", layers * 4 * c * c),
             ("fcb", layers * 4 * c), ("fcprojw", layers * 4 * c * c), ("fcprojb", layers * c), ("lnfw", c),
             ("lnfb", c)]
    tensors, at = {}, 0
    for name, n in sizes:
        tensors[name] = values[at:at + n]
        at += n
    if at != len(values):
        raise SystemExit(f"{path}: {len(values)} values, expected {at}")
    shape = dict(max_t=max_t, vocab=vocab, layers=layers, heads=heads, c=c)
    return shape, tensors


def transposed(values, rows, cols):
    """[rows, cols] row-major -> [cols, rows] row-major."""
    out = array.array("f", bytes(4 * rows * cols))
    for r in range(rows):
        out[r::rows] = values[r * cols:(r + 1) * cols]
    return out


def hub_tensors(shape, t, lm_head, mask_buffers):
    """(name, shape, float array) in the hub's layout."""
    c, layers, max_t, vocab = shape["c"], shape["layers"], shape["max_t"], shape["vocab"]
    out = [("wte.weight", [vocab, c], t["wte"][:vocab * c]), ("wpe.weight", [max_t, c], t["wpe"])]
    for l in range(layers):
        def part(name, per_layer):
            return t[name][l * per_layer:(l + 1) * per_layer]
        h = f"h.{l}."
        out += [
            (h + "ln_1.weight", [c], part("ln1w", c)), (h + "ln_1.bias", [c], part("ln1b", c)),
            (h + "attn.c_attn.weight", [c, 3 * c], transposed(part("qkvw", 3 * c * c), 3 * c, c)),
            (h + "attn.c_attn.bias", [3 * c], part("qkvb", 3 * c)),
            (h + "attn.c_proj.weight", [c, c], transposed(part("attprojw", c * c), c, c)),
            (h + "attn.c_proj.bias", [c], part("attprojb", c)),
            (h + "ln_2.weight", [c], part("ln2w", c)), (h + "ln_2.bias", [c], part("ln2b", c)),
            (h + "mlp.c_fc.weight", [c, 4 * c], transposed(part("fcw", 4 * c * c), 4 * c, c)),
            (h + "mlp.c_fc.bias", [4 * c], part("fcb", 4 * c)),
            (h + "mlp.c_proj.weight", [4 * c, c], transposed(part("fcprojw", 4 * c * c), c, 4 * c)),
            (h + "mlp.c_proj.bias", [c], part("fcprojb", c)),
        ]
        if mask_buffers:
            tril = array.array("f", [1.0 if j <= i else 0.0 for i in range(max_t) for j in range(max_t)])
            out += [(h + "attn.bias", [1, 1, max_t, max_t], tril),
                    (h + "attn.masked_bias", [], array.array("f", [-1e4]))]
    out += [("ln_f.weight", [c], t["lnfw"]), ("ln_f.bias", [c], t["lnfb"])]
    if lm_head:
        out.append(("lm_head.weight", [vocab, c], t["wte"][:vocab * c]))
    return out


def encode(values, dtype):
    if dtype == "f32":
        return values.tobytes(), "F32"
    if dtype == "f16":  # struct's 'e' rounds to nearest, ties to even
        return struct.pack(f"<{len(values)}e", *values), "F16"
    bits = array.array("I")
    bits.frombytes(values.tobytes())
    rounded = [((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF for u in bits]  # nearest even (finite values)
    return struct.pack(f"<{len(rounded)}H", *rounded), "BF16"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("llmc")
    p.add_argument("out")
    p.add_argument("--dtype", choices=["f32", "f16", "bf16"], default="f32")
    p.add_argument("--prefix", default="")
    p.add_argument("--lm-head", action="store_true")
    p.add_argument("--mask-buffers", action="store_true")
    p.add_argument("--config", action="store_true")
    a = p.parse_args()
    shape, t = read_llmc(a.llmc)
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, dims, values in hub_tensors(shape, t, a.lm_head, a.mask_buffers):
        # The mask buffers stay fp32, as in the files that carry them.
        mask = name.endswith((".attn.bias", ".attn.masked_bias"))
        blob, dtype = encode(values, "f32" if mask else a.dtype)
        full = name if name.startswith("lm_head") else a.prefix + name
        header[full] = {"dtype": dtype, "shape": dims, "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    ordered = {k: header[k] for k in sorted(header, reverse=True)}
    text = json.dumps(ordered).encode()
    with open(a.out, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    if a.config:
        config = {"model_type": "gpt2", "n_layer": shape["layers"], "n_head": shape["heads"], "n_embd": shape["c"],
                  "n_positions": shape["max_t"], "n_ctx": shape["max_t"], "vocab_size": shape["vocab"]}
        with open(os.path.join(os.path.dirname(os.path.abspath(a.out)), "config.json"), "w") as f:
            json.dump(config, f)


if __name__ == "__main__":
    main()
