#!/usr/bin/env python3
"""Write a tiny, torch-free Kimi K3 checkpoint and its packed trunk for bin/k3.

The real engine (kimi-k3-in-c, `bin/k3`) reads a directory holding config.json
and *.safetensors, and, with `--trunk DIR`, a packed trunk (trunk.bin +
trunk.json). The engine's own writers (tools/make_tiny_checkpoint.py and
tools/pack_trunk.py) need torch and numpy; this one needs the Python standard
library only, and writes the same format from random weights:

  <model>/config.json        flat shape, the keys include/k3/k3_cfg.h reads
  <model>/model.safetensors  one shard: per layer its trunk tensors as one
                             contiguous run, then that layer's routed experts
                             (w1, w2, w3 each as weight_packed + weight_scale,
                             one contiguous run per expert), then the
                             model-level tensors (embed, norms, lm_head)
  <trunk>/trunk.bin          every layer's trunk run, verbatim, each starting
                             on a 4096-byte boundary and zero-padded to one
  <trunk>/trunk.json         {"n_layers", "align": 4096, "layers": [{layer,
                             shard, run_start, nbytes, file_off, tensors:
                             {name: {off, nbytes, dtype, shape}}}]}
  <model>/orchestrator.env   KEY=VALUE facts about this checkpoint for configs
                             (expert slot size, top-k, prompt ids, ...)

Dtypes follow src/model/k3_bind.c: tensors the kernels read elementwise
(reqw: norms, attn-res projections, conv kernels, A_log, dt_bias, o_norm, the
router bias) are F32; large matrices (reqn) and the router gate are BF16; the
routed experts are MXFP4 as U8: packed nibbles [rows, cols/2] (low nibble is
the even element, E2M1 codes) and E8M0 scales [rows, cols/32].

Shapes follow src/model/k3_bind.c (element counts), src/io/k3_load.c (expert
geometry) and src/core/k3_ops.c (w1/w3 are [moe_inter, latent], w2 is
[latent, moe_inter]).

Weights are random but deterministic: every tensor draws from its own
Mersenne Twister seeded from sha256(seed, tensor name), so the same seed and
shape arguments give byte-identical files. The default shape (33 layers: one
dense, 32 MoE layers of 32 routed experts, top-4, one shared expert; hidden
128; vocabulary 16384, which covers the example config's prompt ids) makes
one 5-token, 8-generated-token bench run take a few tenths of a second on two
cores, with files of about 33 MB (model) and 10 MB (trunk).

With --cycle N (default 3) the embedding dominates the residual stream and
lm_head row pi(x) is embedding row x, for a permutation pi of the vocabulary
made of N-cycles: greedy decode then repeats with period N (x, pi(x), ...).
That gives --spec's n-gram drafter something to draft and the expert cache
something to reuse across steps, as a real text continuation does; the
routing still follows each token. --cycle 0 gives pseudo-random next tokens,
for which --spec never drafts.

Usage:
  k3_checkpoint.py MODEL_DIR TRUNK_DIR [--seed N] [shape options]
  k3_checkpoint.py --print-facts MODEL_DIR     print orchestrator.env
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import struct
import sys
import time

FORMAT_VERSION = 1
GROUP = 32          # MXFP4 group size (K3_MXFP4_GROUP)
ALIGN = 4096        # K3_ST_ALIGN / K3_TRUNK_ALIGN: O_DIRECT alignment
PRE = "language_model.model."


# --------------------------------------------------------------- random bytes
def rng_for(seed: int, name: str) -> random.Random:
    h = hashlib.sha256(("k3ckpt:%d:%s" % (seed, name)).encode()).digest()
    return random.Random(int.from_bytes(h[:16], "little"))


def _bf16_hi_table(top_exp: int) -> bytes:
    """Map a random byte to the high byte of a bf16 (sign + top 7 exponent bits).

    The low exponent bit and the 7 mantissa bits come from a second random byte.
    Octave k below the top is drawn with probability 2^-(k+1), so magnitudes
    spread roughly uniformly over [0, 2^(top_exp+1)): a symmetric distribution
    with no NaN, no infinity and no denormal, at a chosen scale.
    """
    e_hi = (top_exp + 127) >> 1          # top 7 bits of the biased exponent
    tab = bytearray(256)
    for b in range(256):
        r = b & 0x7F
        k = 7 if r == 0 else 6 - int(math.log2(r))   # r>=64 -> 0, r>=32 -> 1, ...
        tab[b] = (b & 0x80) | max(e_hi - k, 1)
    return bytes(tab)


def bf16_random(rng: random.Random, n: int, amp: float) -> bytes:
    """n little-endian bf16 values, symmetric, magnitudes up to about amp."""
    top = int(math.floor(math.log2(amp))) - 1
    lo = rng.randbytes(n)
    hi = rng.randbytes(n).translate(_bf16_hi_table(top))
    out = bytearray(2 * n)
    out[0::2] = lo
    out[1::2] = hi
    return bytes(out)


def f32_const(n: int, v: float) -> bytes:
    return struct.pack("<f", v) * n


def f32_list(vals) -> bytes:
    return struct.pack("<%df" % len(vals), *vals)


def f32_normal(rng: random.Random, n: int, std: float) -> bytes:
    return f32_list([rng.gauss(0.0, std) for _ in range(n)])


def linspace(a: float, b: float, n: int):
    if n == 1:
        return [a]
    return [a + (b - a) * i / (n - 1) for i in range(n)]


def mxfp4_random(rng: random.Random, rows: int, cols: int, scale_lo: int,
                 scale_hi: int) -> tuple[bytes, bytes]:
    """Packed E2M1 nibbles [rows, cols/2] and E8M0 scales [rows, cols/32].

    Every nibble code (0..15) is equally likely; each group's scale byte is
    uniform over scale_lo..scale_hi (the multiplier is 2^(byte-127)).
    """
    assert cols % GROUP == 0, cols
    packed = rng.randbytes(rows * cols // 2)
    span = scale_hi - scale_lo + 1
    tab = bytes(scale_lo + (b % span) for b in range(256))
    scales = rng.randbytes(rows * cols // GROUP).translate(tab)
    return packed, scales


# --------------------------------------------------------------- the model
class Shape:
    def __init__(self, a: argparse.Namespace):
        self.hidden = a.hidden
        self.n_layers = a.layers
        self.vocab = a.vocab
        self.n_experts = a.experts
        self.topk = a.top_k
        self.n_shared = a.shared
        self.latent = a.latent
        self.moe_inter = a.moe_inter
        self.dense_inter = a.dense_inter
        self.first_dense = 1
        self.kda_heads = a.kda_heads
        self.kda_head_dim = a.kda_head_dim
        self.conv_k = 4
        self.n_heads = a.mla_heads
        self.q_lora = a.q_lora
        self.kv_lora = a.kv_lora
        self.qk_nope = a.qk_nope
        self.qk_rope = a.qk_rope
        self.v_head = a.v_head
        self.attn_res_block = a.attn_res_block
        self.cycle = a.cycle
        # ONE-based MLA layer list, as in the released config: every 4th layer
        # plus the last one (3 KDA then 1 MLA, repeating).
        fa = [i for i in range(4, self.n_layers + 1) if i % 4 == 0]
        if self.n_layers not in fa:
            fa.append(self.n_layers)
        self.full_attn = fa

    def is_mla(self, L: int) -> bool:
        return (L + 1) in self.full_attn

    def is_dense(self, L: int) -> bool:
        return L < self.first_dense

    def check(self) -> None:
        errs = []
        if self.n_layers < 2:
            errs.append("--layers must be at least 2 (one dense, one MoE)")
        if not 1 <= self.topk <= min(self.n_experts, 64):
            errs.append("--top-k must be in 1..min(experts, 64)")
        if self.latent % GROUP or self.moe_inter % GROUP:
            errs.append("--latent and --moe-inter must be multiples of %d (MXFP4 groups)" % GROUP)
        if not 0 <= self.cycle <= self.vocab:
            errs.append("--cycle must be in 0..vocab")
        if self.kda_head_dim < self.kda_heads:
            errs.append("--kda-head-dim must be >= --kda-heads (A_log ships head_dim values)")
        if len(self.full_attn) >= self.n_layers:
            errs.append("the layer map leaves no KDA layer; use more --layers")
        for name in ("hidden", "vocab", "latent", "moe_inter", "dense_inter", "kda_head_dim",
                     "q_lora", "kv_lora", "qk_nope", "qk_rope", "v_head"):
            if getattr(self, name) % 4:
                errs.append("--%s must be a multiple of 4 (keeps every tensor 8-byte aligned)"
                            % name.replace("_", "-"))
        if errs:
            raise SystemExit("k3_checkpoint.py: " + "; ".join(errs))

    def config(self) -> dict:
        return {
            "hidden_size": self.hidden, "num_hidden_layers": self.n_layers,
            "vocab_size": self.vocab, "rms_norm_eps": 1e-5,
            "kda_num_heads": self.kda_heads, "kda_head_dim": self.kda_head_dim,
            "short_conv_kernel_size": self.conv_k, "gate_lower_bound": -5.0,
            "num_attention_heads": self.n_heads, "q_lora_rank": self.q_lora,
            "kv_lora_rank": self.kv_lora, "qk_nope_head_dim": self.qk_nope,
            "qk_rope_head_dim": self.qk_rope, "v_head_dim": self.v_head,
            "mla_use_output_gate": True,
            "num_experts": self.n_experts, "num_experts_per_token": self.topk,
            "num_shared_experts": self.n_shared,
            "routed_expert_hidden_size": self.latent,
            "moe_intermediate_size": self.moe_inter,
            "routed_scaling_factor": 1.0, "moe_renormalize": True,
            "latent_moe_use_norm": True,
            "first_k_dense_replace": self.first_dense,
            "intermediate_size": self.dense_inter,
            "attn_res_block_size": self.attn_res_block,
            "situ_beta": 4.0, "situ_linear_beta": 25.0,
            "full_attn_layers": self.full_attn,
        }

    # Bytes of one routed expert's run: three matrices of moe_inter x latent
    # elements, each half a byte per element plus one scale byte per 32.
    def expert_payload_bytes(self) -> int:
        n = self.moe_inter * self.latent
        return 3 * (n // 2 + n // GROUP)

    # src/cache/k3_cache.c k3_cache_init: the slot holds the payload plus an
    # O_DIRECT widening of one 4096 block at each end, rounded up to 4096.
    def expert_slot_bytes(self) -> int:
        s = self.expert_payload_bytes() + 2 * ALIGN
        return (s + ALIGN - 1) // ALIGN * ALIGN

    # src/model/k3_bind.c k3_bind_widen_bytes.
    def widen_bytes(self) -> int:
        return (6 * self.hidden + self.q_lora + self.kv_lora + self.latent) * 4 + 4096


class Writer:
    """Collects (name, dtype, shape, bytes) in file order."""

    def __init__(self):
        self.items: list[tuple[str, str, list[int], bytes]] = []

    def add(self, name: str, dtype: str, shape: list[int], data: bytes) -> None:
        esz = {"F32": 4, "BF16": 2, "U8": 1}[dtype]
        n = 1
        for d in shape:
            n *= d
        assert len(data) == n * esz, (name, len(data), n * esz)
        assert len(data) % 8 == 0, (name, len(data))   # keeps every offset 8-aligned
        self.items.append((name, dtype, shape, data))


def build(sh: Shape, seed: int) -> tuple[Writer, dict[int, list[str]]]:
    """Every tensor in file order, and per layer the names of its trunk run."""
    w = Writer()
    trunk_names: dict[int, list[str]] = {}
    H = sh.hidden

    def bf16(name, shape, fan_in, gain=1.0):
        n = 1
        for d in shape:
            n *= d
        amp = gain * math.sqrt(3.0 / fan_in)
        w.add(name, "BF16", shape, bf16_random(rng_for(seed, name), n, amp))

    def ones(name, n):
        w.add(name, "F32", [n], f32_const(n, 1.0))

    for L in range(sh.n_layers):
        p = PRE + "layers.%d." % L
        start = len(w.items)
        # Trunk tensors of the layer, in sorted-name order like the released shards.
        t: list[tuple[str, object]] = []
        t.append((p + "input_layernorm.weight", lambda n: ones(n, H)))
        t.append((p + "post_attention_layernorm.weight", lambda n: ones(n, H)))
        t.append((p + "self_attention_res_norm.weight", lambda n: ones(n, H)))
        t.append((p + "mlp_res_norm.weight", lambda n: ones(n, H)))
        for k in ("self_attention_res_proj.weight", "mlp_res_proj.weight"):
            t.append((p + k, lambda n: w.add(n, "F32", [1, H],
                                             f32_normal(rng_for(seed, n), H, 0.02))))
        if sh.is_mla(L):
            qh = sh.qk_nope + sh.qk_rope
            a = p + "self_attn."
            t.append((a + "q_a_proj.weight", lambda n: bf16(n, [sh.q_lora, H], H)))
            t.append((a + "q_a_layernorm.weight", lambda n: ones(n, sh.q_lora)))
            t.append((a + "q_b_proj.weight",
                      lambda n: bf16(n, [sh.n_heads * qh, sh.q_lora], sh.q_lora)))
            t.append((a + "kv_a_proj_with_mqa.weight",
                      lambda n: bf16(n, [sh.kv_lora + sh.qk_rope, H], H)))
            t.append((a + "kv_a_layernorm.weight", lambda n: ones(n, sh.kv_lora)))
            t.append((a + "kv_b_proj.weight",
                      lambda n: bf16(n, [sh.n_heads * (sh.qk_nope + sh.v_head), sh.kv_lora],
                                     sh.kv_lora)))
            t.append((a + "o_proj.weight",
                      lambda n: bf16(n, [H, sh.n_heads * sh.v_head], sh.n_heads * sh.v_head)))
            t.append((a + "g_proj.weight",
                      lambda n: bf16(n, [sh.n_heads * sh.v_head, H], H)))
        else:
            P = sh.kda_heads * sh.kda_head_dim
            D = sh.kda_head_dim
            a = p + "self_attn."
            for k in ("q_proj", "k_proj", "v_proj", "g_proj"):
                t.append((a + k + ".weight", lambda n: bf16(n, [P, H], H)))
            t.append((a + "o_proj.weight", lambda n: bf16(n, [H, P], P)))
            for k in ("q_conv1d", "k_conv1d", "v_conv1d"):
                t.append((a + k + ".weight",
                          lambda n: w.add(n, "F32", [P, 1, sh.conv_k],
                                          f32_normal(rng_for(seed, n), P * sh.conv_k, 0.4))))
            t.append((a + "f_a_proj.weight", lambda n: bf16(n, [D, H], H)))
            t.append((a + "f_b_proj.weight", lambda n: bf16(n, [P, D], D)))
            t.append((a + "b_proj.weight", lambda n: bf16(n, [sh.kda_heads, H], H)))
            # Per head, shipped zero-padded to head_dim like the released checkpoint.
            t.append((a + "A_log",
                      lambda n: w.add(n, "F32", [D], f32_list(
                          linspace(-0.4, 1.2, sh.kda_heads) + [0.0] * (D - sh.kda_heads)))))
            t.append((a + "dt_bias",
                      lambda n: w.add(n, "F32", [P], f32_normal(rng_for(seed, n), P, 0.5))))
            t.append((a + "o_norm.weight", lambda n: ones(n, D)))
        if sh.is_dense(L):
            m = p + "mlp."
            t.append((m + "gate_proj.weight", lambda n: bf16(n, [sh.dense_inter, H], H, 2.0)))
            t.append((m + "up_proj.weight", lambda n: bf16(n, [sh.dense_inter, H], H, 2.0)))
            t.append((m + "down_proj.weight",
                      lambda n: bf16(n, [H, sh.dense_inter], sh.dense_inter)))
        else:
            m = p + "block_sparse_moe."
            SI = sh.moe_inter * sh.n_shared
            # Router gate BF16, as the released checkpoint streams it. Logits of
            # about unit scale keep the sigmoid scores apart, so the selection
            # follows the token rather than the bias.
            t.append((m + "gate.weight", lambda n: bf16(n, [sh.n_experts, H], H, 1.0)))
            # A small monotone selection bias, like the reference fixture's
            # (it steers selection only), mild enough that every expert is used.
            t.append((m + "gate.e_score_correction_bias",
                      lambda n: w.add(n, "F32", [sh.n_experts],
                                      f32_list(linspace(-0.01, 0.01, sh.n_experts)))))
            t.append((m + "routed_expert_down_proj.weight",
                      lambda n: bf16(n, [sh.latent, H], H)))
            t.append((m + "routed_expert_up_proj.weight",
                      lambda n: bf16(n, [H, sh.latent], sh.latent)))
            t.append((m + "routed_expert_norm.weight", lambda n: ones(n, sh.latent)))
            t.append((m + "shared_experts.gate_proj.weight", lambda n: bf16(n, [SI, H], H, 2.0)))
            t.append((m + "shared_experts.up_proj.weight", lambda n: bf16(n, [SI, H], H, 2.0)))
            t.append((m + "shared_experts.down_proj.weight", lambda n: bf16(n, [H, SI], SI)))
        t.sort(key=lambda x: x[0])
        for name, make in t:
            make(name)
        trunk_names[L] = [it[0] for it in w.items[start:]]

        if not sh.is_dense(L):
            # Routed experts: one contiguous run each, w1 w2 w3 (packed, scale),
            # the order src/io/k3_load.h measured on the released shards.
            I, Ll = sh.moe_inter, sh.latent
            for e in range(sh.n_experts):
                base = p + "block_sparse_moe.experts.%d." % e
                for wn, rows, cols in (("w1", I, Ll), ("w2", Ll, I), ("w3", I, Ll)):
                    r = rng_for(seed, base + wn)
                    pk, sc = mxfp4_random(r, rows, cols, 121, 123)
                    w.add(base + wn + ".weight_packed", "U8", [rows, cols // 2], pk)
                    w.add(base + wn + ".weight_scale", "U8", [rows, cols // GROUP], sc)

    # Model-level tensors.
    V = sh.vocab
    name = PRE + "embed_tokens.weight"
    if sh.cycle:
        # A strong embedding dominates the residual stream, and lm_head row
        # pi(x) is embedding row x: greedy decode then follows x -> pi(x), a
        # permutation made of cycles of length `cycle`, so the output repeats
        # and the n-gram drafter of --spec has something to draft. Routing
        # still depends on the token (and on the context through the layers).
        embed = bf16_random(rng_for(seed, name), V * H, 16.0)
        w.add(name, "BF16", [V, H], embed)
    else:
        bf16(name, [V, H], 1, 1.0)
    ones(PRE + "norm.weight", H)
    ones(PRE + "output_attn_res_norm.weight", H)
    n = PRE + "output_attn_res_proj.weight"
    w.add(n, "F32", [1, H], f32_normal(rng_for(seed, n), H, 0.02))
    name = "language_model.lm_head.weight"
    if sh.cycle:
        row = 2 * H
        lm = bytearray(V * row)
        for x, y in enumerate(cycle_perm(V, sh.cycle, seed)):
            lm[y * row:(y + 1) * row] = embed[x * row:(x + 1) * row]
        w.add(name, "BF16", [V, H], bytes(lm))
    else:
        bf16(name, [V, H], H, 4.0)
    return w, trunk_names


def cycle_perm(V: int, n: int, seed: int) -> list[int]:
    """pi as a list (pi[x]): the vocabulary shuffled and cut into cycles of n."""
    ids = list(range(V))
    rng_for(seed, "cycles").shuffle(ids)
    pi = list(range(V))
    for s in range(0, V - V % n, n):
        grp = ids[s:s + n]
        for i, x in enumerate(grp):
            pi[x] = grp[(i + 1) % n]
    return pi


# --------------------------------------------------------------- writing
def durable(f) -> None:
    """Flush to the device. The engine reads the shards and the trunk with
    O_DIRECT, and an O_DIRECT read of dirty pages first waits for their
    writeback: without this the first bench runs after a write are slower."""
    f.flush()
    os.fsync(f.fileno())


def write_safetensors(path: str, w: Writer, meta: dict) -> tuple[int, dict]:
    """Returns (data base offset, name -> (absolute offset, nbytes, dtype, shape))."""
    header: dict = {"__metadata__": meta}
    where: dict = {}
    off = 0
    for name, dtype, shape, data in w.items:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [off, off + len(data)]}
        where[name] = (off, len(data), dtype, shape)
        off += len(data)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((-(8 + len(hj))) % 8)          # data starts 8-aligned (spec allows it)
    base = 8 + len(hj)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for _, _, _, data in w.items:
            f.write(data)
        durable(f)
    return base, {k: (base + v[0], v[1], v[2], v[3]) for k, v in where.items()}


def write_trunk(out: str, sh: Shape, w: Writer, trunk_names: dict, shard: str,
                where: dict) -> list[int]:
    """trunk.bin + trunk.json exactly as tools/pack_trunk.py lays them out."""
    data = {name: d for name, _, _, d in w.items}
    manifest = {"n_layers": sh.n_layers, "align": ALIGN, "layers": []}
    sizes = []
    with open(os.path.join(out, "trunk.bin"), "wb") as f:
        for L in range(sh.n_layers):
            names = trunk_names[L]
            lo = min(where[n][0] for n in names)
            hi = max(where[n][0] + where[n][1] for n in names)
            own = sum(where[n][1] for n in names)
            if hi - lo != own:
                raise SystemExit("layer %d trunk is not contiguous" % L)
            pad = (-f.tell()) % ALIGN
            f.write(b"\0" * pad)
            file_off = f.tell()
            for n in sorted(names, key=lambda n: where[n][0]):
                f.write(data[n])
            f.write(b"\0" * ((-f.tell()) % ALIGN))
            nbytes = (own + ALIGN - 1) // ALIGN * ALIGN
            sizes.append(nbytes)
            manifest["layers"].append({
                "layer": L, "shard": shard, "run_start": lo, "nbytes": nbytes,
                "file_off": file_off,
                "tensors": {n: {"off": where[n][0] - lo, "nbytes": where[n][1],
                                "dtype": where[n][2], "shape": where[n][3]}
                            for n in sorted(names)},
            })
        durable(f)
    with open(os.path.join(out, "trunk.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f)
    return sizes


def trunk_pin_all_bytes(sh: Shape, sizes: list[int]) -> int:
    """Smallest --trunk-gb (in bytes) at which src/io/k3_trunk.c pins every layer:
    two ring slots sized for the last layer, plus every layer plus its widen area."""
    widen = sh.widen_bytes()
    rs = (sizes[-1] + ALIGN - 1) // ALIGN * ALIGN + widen
    rs = (rs + 4095) // 4096 * 4096
    return 2 * rs + sum(s + widen for s in sizes)


# The prompt of examples/kimi-k3-in-c.toml; used when the vocabulary covers it
# (the default one does), so that config's argv runs unchanged.
EXAMPLE_IDS = [1008, 10484, 318, 15383, 387]


def prompt_ids(sh: Shape, seed: int) -> list[int]:
    if max(EXAMPLE_IDS) < sh.vocab:
        return list(EXAMPLE_IDS)
    r = rng_for(seed, "prompt")
    return [r.randrange(1, sh.vocab) for _ in range(5)]


def gb(nbytes: int) -> str:
    """A --cache-gb/--trunk-gb value that gives at least nbytes: the engine
    truncates (int64_t)(X * 1e9), so one byte of margin absorbs the rounding."""
    return "%.9f" % ((nbytes + 1) / 1e9)


def facts(sh: Shape, seed: int, sizes: list[int], model_bytes: int) -> list[tuple[str, str]]:
    moe_layers = sum(1 for L in range(sh.n_layers) if not sh.is_dense(L))
    slot = sh.expert_slot_bytes()
    min_cache = (sh.topk + 1) * slot
    return [
        ("K3_TOP_K", str(sh.topk)),
        ("K3_N_EXPERTS", str(sh.n_experts)),
        ("K3_N_LAYERS", str(sh.n_layers)),
        ("K3_MOE_LAYERS", str(moe_layers)),
        ("K3_VOCAB", str(sh.vocab)),
        ("K3_IDS", ",".join(str(i) for i in prompt_ids(sh, seed))),
        # The engine's cache slot for one routed expert (k3_cache.c: payload +
        # 2*4096, rounded up to 4096) and the expert payload itself.
        ("K3_EXPERT_BYTES", str(slot)),
        ("K3_EXPERT_PAYLOAD_BYTES", str(sh.expert_payload_bytes())),
        # --cache-gb below this fails: the cache needs top_k + 1 slots.
        ("K3_CACHE_GB_MIN", gb(min_cache)),
        # Every routed expert resident (n_moe_layers * n_experts slots).
        ("K3_CACHE_GB_ALL", gb(moe_layers * sh.n_experts * slot)),
        # --trunk-gb at or above this pins every trunk layer.
        ("K3_TRUNK_GB_ALL", gb(trunk_pin_all_bytes(sh, sizes))),
        ("K3_TRUNK_BYTES", str(sum(sizes))),
        ("K3_MODEL_BYTES", str(model_bytes)),
        # Greedy output repeats with this period (0: it does not), see --cycle.
        ("K3_CYCLE", str(sh.cycle)),
        ("K3_SEED", str(seed)),
    ]


def main() -> int:
    if sys.version_info < (3, 9):
        raise SystemExit("k3_checkpoint.py needs Python 3.9+ (random.randbytes)")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir", nargs="?")
    ap.add_argument("trunk_dir", nargs="?")
    ap.add_argument("--print-facts", metavar="MODEL_DIR",
                    help="print MODEL_DIR/orchestrator.env and exit")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=33)
    ap.add_argument("--vocab", type=int, default=16384,
                    help="default covers the example config's prompt ids (< 16384)")
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--shared", type=int, default=1)
    ap.add_argument("--latent", type=int, default=64)
    ap.add_argument("--moe-inter", type=int, default=128)
    ap.add_argument("--dense-inter", type=int, default=512)
    ap.add_argument("--kda-heads", type=int, default=4)
    ap.add_argument("--kda-head-dim", type=int, default=32)
    ap.add_argument("--mla-heads", type=int, default=4)
    ap.add_argument("--q-lora", type=int, default=64)
    ap.add_argument("--kv-lora", type=int, default=32)
    ap.add_argument("--qk-nope", type=int, default=16)
    ap.add_argument("--qk-rope", type=int, default=8)
    ap.add_argument("--v-head", type=int, default=16)
    ap.add_argument("--attn-res-block", type=int, default=4)
    ap.add_argument("--cycle", type=int, default=3, metavar="N",
                    help="greedy decode cycles through N tokens, so --spec's n-gram "
                         "drafter fires (0: pseudo-random next tokens; --spec then "
                         "never drafts)")
    a = ap.parse_args()

    if a.print_facts:
        with open(os.path.join(a.print_facts, "orchestrator.env"), encoding="utf-8") as f:
            sys.stdout.write(f.read())
        return 0
    if not a.model_dir or not a.trunk_dir:
        ap.error("MODEL_DIR and TRUNK_DIR are required")

    sh = Shape(a)
    sh.check()
    t0 = time.time()
    os.makedirs(a.model_dir, exist_ok=True)
    os.makedirs(a.trunk_dir, exist_ok=True)
    w, trunk_names = build(sh, a.seed)
    meta = {"format": "pt", "writer": "orchestrator scripts/k3_checkpoint.py",
            "writer_version": str(FORMAT_VERSION), "seed": str(a.seed)}
    shard = "model.safetensors"
    spath = os.path.join(a.model_dir, shard)
    _, where = write_safetensors(spath, w, meta)
    with open(os.path.join(a.model_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(sh.config(), f, indent=1)
    sizes = write_trunk(a.trunk_dir, sh, w, trunk_names, shard, where)
    model_bytes = os.path.getsize(spath)
    lines = facts(sh, a.seed, sizes, model_bytes)
    with open(os.path.join(a.model_dir, "orchestrator.env"), "w", encoding="utf-8") as f:
        for k, v in lines:
            f.write("%s=%s\n" % (k, v))
    print("k3_checkpoint.py: %d tensors, %.1f MB model, %.1f MB trunk, %d experts x %d "
          "layers (top-%d), in %.2f s" % (len(w.items), model_bytes / 1e6, sum(sizes) / 1e6,
                                          sh.n_experts, sum(1 for L in range(sh.n_layers)
                                                            if not sh.is_dense(L)),
                                          sh.topk, time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
