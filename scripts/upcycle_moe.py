#!/usr/bin/env python3
"""Upcycles a dense llama-architecture GGUF into a Mixtral-style MoE GGUF.

Every layer's dense FFN (ffn_gate, ffn_up, ffn_down) becomes N experts
(ffn_gate_exps, ffn_up_exps, ffn_down_exps, shaped as llama.cpp's
src/models/llama.cpp creates them: ggml {n_embd, n_ff, n_expert} and
{n_ff, n_embd, n_expert}) plus a router ffn_gate_inp (F32, {n_embd,
n_expert}); `llama.expert_count` and `llama.expert_used_count` are set.
Everything else (metadata, tokenizer, attention, embeddings) is copied.

Expert 0 is the dense FFN byte for byte. Experts 1.. are the dense weights
plus a small Gaussian perturbation (a fixed fraction of the tensor's own
standard deviation) quantized back to the source type, so the experts differ
and routing changes the output, while each expert stays close enough to the
trained FFN that the model still talks. The router is random. All randomness
comes from a fixed seed keyed by (layer, tensor, expert): the same input
gives a byte-identical output.

A tensor type that gguf-py can dequantize but not quantize (the K-quants,
the IQ types) is written as F16 for all of that tensor's experts, since a
stacked tensor has one type.

The output is written beside itself and renamed into place, then read back
and checked (shapes, types, expert 0 equal to the dense FFN).

Usage: upcycle_moe.py --gguf-py DIR IN.gguf OUT.gguf [--experts 4] [--used 2]
Exit codes: 0 ok, 1 failure, 2 usage (bad arguments or an input that is not
a dense llama GGUF).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

SEED = 20261201
# The perturbation relative to each tensor's standard deviation: below
# Q4_1's own rounding error (about 8% of it in SmolLM2's FFN), so an expert
# stays as close to the trained FFN as quantizing it did.
PERTURB = 0.05
FFN = ("ffn_gate", "ffn_up", "ffn_down")


def usage(msg: str) -> NoReturn:
    print(f"upcycle_moe.py: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gguf-py", required=True, type=Path,
                   help="llama.cpp's gguf-py directory (the one holding gguf/)")
    p.add_argument("--experts", type=int, default=4)
    p.add_argument("--used", type=int, default=2)
    p.add_argument("input", type=Path)
    p.add_argument("output", type=Path)
    a = p.parse_args()
    if not (a.gguf_py / "gguf" / "__init__.py").is_file():
        usage(f"no gguf package under {a.gguf_py} (pass llama.cpp's gguf-py directory)")
    if not 1 <= a.used <= a.experts:
        usage(f"--used {a.used} must be between 1 and --experts {a.experts}")
    if not a.input.is_file():
        usage(f"no input GGUF at {a.input}")
    return a


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(args.gguf_py))
    try:
        import numpy as np
    except ImportError:
        usage("numpy is missing: python3 -m pip install numpy")
    import gguf
    from gguf.quants import dequantize, quantize

    reader = gguf.GGUFReader(args.input)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE).contents()
    if arch != "llama":
        usage(f"{args.input} is architecture {arch!r}; only dense 'llama' GGUFs are upcycled")
    expert_key = gguf.Keys.LLM.EXPERT_COUNT.format(arch=arch)
    if reader.get_field(expert_key) is not None:
        usage(f"{args.input} already has {expert_key}: it is not a dense model")
    n_embd = reader.get_field(gguf.Keys.LLM.EMBEDDING_LENGTH.format(arch=arch)).contents()
    n_layer = reader.get_field(gguf.Keys.LLM.BLOCK_COUNT.format(arch=arch)).contents()
    tensors = {t.name: t for t in reader.tensors}
    for il in range(n_layer):
        for f in FFN:
            if f"blk.{il}.{f}.weight" not in tensors:
                usage(f"{args.input} has no blk.{il}.{f}.weight: not a dense llama FFN")
    # llama.cpp's MoE branch loads no FFN biases: a file with them would not load.
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in FFN and parts[3] != "weight":
            usage(f"{args.input} has {t.name}; FFN biases have no place in a llama MoE")

    n_exp = args.experts

    def requantizable(qtype) -> bool:
        try:
            quantize(np.zeros((1, 256), dtype=np.float32), qtype)
            return True
        except NotImplementedError:
            return False

    def expert_type(t):
        return t.tensor_type if requantizable(t.tensor_type) else gguf.GGMLQuantizationType.F16

    def experts(il: int, which: int, t) -> "np.ndarray":
        """The stacked experts of one dense tensor, as the bytes to write."""
        out_type = expert_type(t)
        dense = np.asarray(t.data)
        values = dequantize(dense, t.tensor_type).astype(np.float32)
        std = float(values.std())
        stack = []
        for e in range(n_exp):
            if e == 0 and out_type == t.tensor_type:
                stack.append(dense.view(np.uint8).reshape(dense.shape[0], -1))
                continue
            if e == 0:
                w = values
            else:
                rng = np.random.default_rng([SEED, il, which, e])
                noise = rng.standard_normal(values.shape, dtype=np.float32)
                w = values + np.float32(PERTURB * std) * noise
            stack.append(quantize(w, out_type).view(np.uint8).reshape(dense.shape[0], -1))
        return np.stack(stack)

    def router(il: int) -> "np.ndarray":
        # Logits of order one for an RMS-normed input of n_embd components.
        rng = np.random.default_rng([SEED, il, len(FFN)])
        return (rng.standard_normal((n_exp, n_embd), dtype=np.float32)
                / np.float32(np.sqrt(n_embd)))

    tmp = args.output.with_name(args.output.name + ".partial")
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        # The writer adds the architecture and the GGUF.* header itself.
        # general.name is rewritten below to say what this file is.
        if field.name in (gguf.Keys.General.ARCHITECTURE, gguf.Keys.General.NAME) \
                or field.name.startswith("GGUF."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    name = reader.get_field(gguf.Keys.General.NAME)
    base = name.contents() if name is not None else args.input.stem
    writer.add_name(f"{base} upcycled {n_exp}x top-{args.used} MoE")
    writer.add_expert_count(n_exp)
    writer.add_expert_used_count(args.used)

    # Tensor infos first, data second, in the same order: one layer's experts
    # are built while writing, so memory stays at one layer, not the model.
    plan = []  # (name, ggml type, ggml shape, maker)
    for t in reader.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in FFN and parts[3] == "weight":
            il, which = int(parts[1]), FFN.index(parts[2])
            if which == 0:
                plan.append((f"blk.{il}.ffn_gate_inp.weight", gguf.GGMLQuantizationType.F32,
                             (n_embd, n_exp), lambda il=il: router(il)))
            ne = [int(x) for x in t.shape]  # ggml order: ne0 (row length) first
            plan.append((f"blk.{il}.{parts[2]}_exps.weight", expert_type(t), (*ne, n_exp),
                         lambda il=il, which=which, t=t: experts(il, which, t)))
        else:
            plan.append((t.name, t.tensor_type, tuple(int(x) for x in t.shape),
                         lambda t=t: np.asarray(t.data).view(np.uint8)))
    for tname, qtype, ne, _ in plan:
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        n = 1
        for x in ne:
            n *= x
        nbytes = n // block * type_size
        # The writer takes numpy order (outermost first) with the row in bytes.
        byte_shape = (*reversed(ne[1:]), ne[0] // block * type_size)
        writer.add_tensor_info(tname, byte_shape, np.dtype(np.uint8), nbytes, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tname, _, _, make in plan:
        data = make()
        writer.write_tensor_data(np.ascontiguousarray(data).view(np.uint8))
    writer.close()

    check(gguf, np, tmp, reader, n_exp, args.used, n_layer, n_embd)
    os.replace(tmp, args.output)


def check(gguf, np, path, dense, n_exp, used, n_layer, n_embd) -> None:
    """Reads the output back: what llama.cpp's llama loader will ask for."""
    out = gguf.GGUFReader(path)
    got = {t.name: t for t in out.tensors}
    src = {t.name: t for t in dense.tensors}
    assert out.get_field("llama.expert_count").contents() == n_exp
    assert out.get_field("llama.expert_used_count").contents() == used
    for il in range(n_layer):
        inp = got[f"blk.{il}.ffn_gate_inp.weight"]
        assert inp.tensor_type == gguf.GGMLQuantizationType.F32
        assert [int(x) for x in inp.shape] == [n_embd, n_exp], inp.shape
        for f in FFN:
            assert f"blk.{il}.{f}.weight" not in got
            d, e = src[f"blk.{il}.{f}.weight"], got[f"blk.{il}.{f}_exps.weight"]
            assert [int(x) for x in e.shape] == [*map(int, d.shape), n_exp], (e.name, e.shape)
            if e.tensor_type == d.tensor_type:
                assert np.array_equal(np.asarray(e.data)[0], np.asarray(d.data)), e.name
                assert not np.array_equal(np.asarray(e.data)[1], np.asarray(d.data)), e.name
    for name, t in src.items():
        if name in got:
            assert np.array_equal(np.asarray(got[name].data), np.asarray(t.data)), name


if __name__ == "__main__":
    try:
        main()
    except SystemExit:
        raise
    except Exception as e:  # a failed read, write or check: a runtime failure
        print(f"upcycle_moe.py: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
