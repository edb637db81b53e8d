#!/usr/bin/env python3
"""A plain numpy forward pass for rill's two architectures (llama, qwen2), read from a GGUF file.

It is the written-down model that rill's C reference backend implements, and a second oracle: on the
F32 test models it matches llama.cpp to about 1e-5 (see tools/README.md). Quantized weights are
dequantized with gguf-py first, so on quantized models it differs from llama.cpp by the activation
quantization llama.cpp does inside its matmuls (Q8_0/Q8_1/Q8_K, F16, BF16 activations).

Letters: T tokens in the batch, D = n_embd, H = n_head, G = n_head_kv, E = D / H (head dim),
F = n_ff, V = n_vocab. GGUF stores a matrix W with ggml shape ne = [n_in, n_out]; read into numpy it
is (n_out, n_in), so y = x @ W.T.

Per layer (pre-norm residual block):
    h  = rms_norm(x) * attn_norm                    rms_norm(x) = x / sqrt(mean(x^2) + eps)
    q  = h @ Wq.T (+ bq)   (T, H, E)                biases: qwen2 only
    k  = h @ Wk.T (+ bk)   (T, G, E)
    v  = h @ Wv.T (+ bv)   (T, G, E)
    q, k = rope(q, pos), rope(k, pos)               variant by architecture, see rope()
    query head i reads KV head i // (H / G)         (grouped-query attention)
    a  = softmax(q k^T / sqrt(E) + causal mask) v   (T, H, E) -> (T, D)
    x  = x + a @ Wo.T
    h  = rms_norm(x) * ffn_norm
    x  = x + (silu(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T      silu(z) = z / (1 + exp(-z))
Then logits = (rms_norm(x) * output_norm) @ Wout.T, where Wout = output.weight, or token_embd.weight
when the file has no output.weight (tied embeddings).

With ggml_cpu_acts=True, the input of every weight matmul is first rounded the way ggml's CPU
backend rounds it (its "vec_dot_type"): to F16 for F16 weights, BF16 for BF16, Q8_0 blocks for Q8_0,
Q4_0 and Q5_0, Q8_1 for Q4_1 and Q5_1 and Q8_K (256-wide blocks, float32 scale) for the K-quants.
That reproduces llama.cpp's quantized-model logits closely and shows where its error against the
exact product comes from.

Usage: np_forward.py [--ggml-cpu-acts] MODEL.gguf TOKEN_ID...   prints the argmax at each position.
"""

from __future__ import annotations

import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# llama.cpp's llama_model_rope_type(): LLM_ARCH_LLAMA -> LLAMA_ROPE_TYPE_NORM,
# LLM_ARCH_QWEN2 -> LLAMA_ROPE_TYPE_NEOX.
ROPE_VARIANT = {"llama": "norm", "qwen2": "neox"}


def _q8_k_roundtrip(x: np.ndarray) -> np.ndarray:
    """quantize_row_q8_K_ref then dequantize: blocks of 256, d = max/-127 (float32, signed max),
    q = min(127, nearest(x * -127/max))."""
    b = x.astype(np.float32).reshape(-1, 256)
    idx = np.abs(b).argmax(axis=1)
    mx = np.take_along_axis(b, idx[:, None], axis=1)
    zero = mx == 0
    iscale = np.where(zero, np.float32(0), np.float32(-127) / np.where(zero, np.float32(1), mx))
    q = np.minimum(127, np.rint(iscale * b))
    d = np.where(zero, np.float32(0), np.float32(1) / np.where(zero, np.float32(1), iscale))
    return (d * q).astype(np.float32).reshape(x.shape)


def _q8_0_roundtrip(x: np.ndarray, with_sum: bool = False):
    """ggml-cpu's x86 quantize_row_q8_0 / q8_1 then dequantize: blocks of 32, d = amax/127 stored
    as fp16, q = round-half-even(x * (127/amax)). With with_sum, also returns Q8_1's block sums
    s = fp16(d * sum(q)) with d the float32 (unrounded) scale, shape (..., n_in/32)."""
    b = x.astype(np.float32).reshape(-1, 32)
    amax = np.abs(b).max(axis=1, keepdims=True)
    d = amax / np.float32(127)
    idv = np.where(amax != 0, np.float32(127) / np.where(amax != 0, amax, np.float32(1)),
                   np.float32(0))
    q = np.rint(b * idv)
    deq = (d.astype(np.float16).astype(np.float32) * q).reshape(x.shape)
    if not with_sum:
        return deq
    s = (d[:, 0] * q.sum(axis=1)).astype(np.float16).astype(np.float32)
    return deq, s.reshape(*x.shape[:-1], x.shape[-1] // 32)


def ggml_cpu_activation(x: np.ndarray, weight_type: QT) -> np.ndarray:
    """Rounds matmul inputs x (..., n_in) the way ggml-cpu does before a dot product with weights
    of weight_type (type_traits_cpu[type].vec_dot_type). Q4_1's and Q5_1's Q8_1 block sums are
    handled in Model.mm."""
    x32 = np.ascontiguousarray(x, dtype=np.float32)
    if weight_type == QT.F32:
        return x
    if weight_type == QT.F16:
        return x32.astype(np.float16).astype(np.float64)
    if weight_type == QT.BF16:
        bf16 = gguf.quants.quantize(x32, QT.BF16)
        return gguf.quants.dequantize(bf16, QT.BF16).astype(np.float64)
    if weight_type in (QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
        return _q8_0_roundtrip(x32).astype(np.float64)
    if weight_type in (QT.Q4_K, QT.Q5_K, QT.Q6_K):
        return _q8_k_roundtrip(x32).astype(np.float64)
    raise ValueError(f"no activation rule for {weight_type.name}")


def _q4_1_parts(raw: np.ndarray, n_out: int, n_in: int, qt: QT = QT.Q4_1):
    """Splits Q4_1 / Q5_1 weights (d * q + m per 32-block) into the d * q part (n_out, n_in) and
    the block minimums m (n_out, n_in/32)."""
    blocks = raw.view(np.uint8).reshape(-1, 20 if qt == QT.Q4_1 else 24)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float64)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float64)
    qs = blocks[:, 4:] if qt == QT.Q4_1 else blocks[:, 8:]
    q = np.concatenate([qs & 0xF, qs >> 4], axis=1).astype(np.float64)  # (nb, 32)
    if qt == QT.Q5_1:  # bit 4 of value j is bit j of qh (little-endian uint32)
        qh = blocks[:, 4:8].copy().view("<u4")
        q += ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.float64) * 16
    return (d * q).reshape(n_out, n_in), m.reshape(n_out, n_in // 32)


class Model:
    def __init__(self, path: str, ggml_cpu_acts: bool = False):
        self.ggml_cpu_acts = ggml_cpu_acts
        self.types: dict[str, QT] = {}
        self.q4_1: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        r = gguf.GGUFReader(path)
        self.meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
        self.arch = self.meta["general.architecture"]
        if self.arch not in ROPE_VARIANT:
            raise ValueError(f"unsupported architecture {self.arch}")
        a = self.arch
        self.n_embd = int(self.meta[f"{a}.embedding_length"])
        self.n_layer = int(self.meta[f"{a}.block_count"])
        self.n_head = int(self.meta[f"{a}.attention.head_count"])
        self.n_head_kv = int(self.meta.get(f"{a}.attention.head_count_kv", self.n_head))
        self.head_dim = self.n_embd // self.n_head
        self.n_rot = int(self.meta.get(f"{a}.rope.dimension_count", self.head_dim))
        self.rope_base = float(self.meta.get(f"{a}.rope.freq_base", 10000.0))
        self.eps = float(self.meta[f"{a}.attention.layer_norm_rms_epsilon"])
        self.w: dict[str, np.ndarray] = {}
        for t in r.tensors:
            qt = QT(int(t.tensor_type))
            self.types[t.name] = qt
            data = np.asarray(t.data)
            if qt == QT.F32:
                arr = data.astype(np.float32)
            elif qt == QT.F16:
                arr = data.view(np.float16).astype(np.float32)
            else:
                arr = gguf.quants.dequantize(data.view(np.uint8), qt)
            shape = tuple(int(n) for n in reversed(t.shape))  # ggml ne -> numpy (…, n_out, n_in)
            self.w[t.name] = arr.reshape(shape).astype(np.float64)
            if qt in (QT.Q4_1, QT.Q5_1) and ggml_cpu_acts:
                self.q4_1[t.name] = _q4_1_parts(data, shape[0], shape[1], qt)
        self.n_vocab = self.w["token_embd.weight"].shape[0]

    def mm(self, x: np.ndarray, name: str) -> np.ndarray:
        """x (T, n_in) @ W.T -> (T, n_out)."""
        if self.ggml_cpu_acts and name in self.q4_1:
            # ggml_vec_dot_q4_1_q8_1 (and q5_1): sum over blocks of d4*d8*sum(q4*q8) + m4*s8, where s8 is the
            # activation block sum rounded to fp16.
            a, m = self.q4_1[name]
            x8, s8 = _q8_0_roundtrip(np.ascontiguousarray(x, dtype=np.float32), with_sum=True)
            return x8.astype(np.float64) @ a.T + s8.astype(np.float64) @ m.T
        if self.ggml_cpu_acts:
            x = ggml_cpu_activation(x, self.types[name])
        return x @ self.w[name].T

    def rms_norm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + self.eps) * weight

    def rope(self, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
        """x: (T, heads, E), pos: (T,). Rotates the first n_rot dims of each head.
        Pair i (0 <= i < n_rot/2) is rotated by angle pos * base^(-2i/n_rot):
          norm (llama): the pair is (x[2i], x[2i+1])        - adjacent elements
          neox (qwen2): the pair is (x[i], x[i + n_rot/2])  - first half with second half
        (a, b) -> (a cos - b sin, a sin + b cos)."""
        n = self.n_rot
        inv_freq = self.rope_base ** (-np.arange(0, n, 2, dtype=np.float64) / n)  # (n/2,)
        ang = pos[:, None].astype(np.float64) * inv_freq[None, :]                 # (T, n/2)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = x.copy()
        if ROPE_VARIANT[self.arch] == "norm":
            a, b = x[..., 0:n:2], x[..., 1:n:2]
            out[..., 0:n:2] = a * cos - b * sin
            out[..., 1:n:2] = a * sin + b * cos
        else:
            a, b = x[..., : n // 2], x[..., n // 2: n]
            out[..., : n // 2] = a * cos - b * sin
            out[..., n // 2: n] = a * sin + b * cos
        return out

    def forward(self, tokens, pos0: int = 0) -> np.ndarray:
        """Logits (T, V) in float64 for tokens at positions pos0.. (empty cache)."""
        w = self.w
        T, H, G, E = len(tokens), self.n_head, self.n_head_kv, self.head_dim
        pos = np.arange(pos0, pos0 + T)
        x = w["token_embd.weight"][np.asarray(tokens)]                           # (T, D)
        mask = np.triu(np.full((T, T), -np.inf), k=1)                             # (T, T)
        for il in range(self.n_layer):
            p = f"blk.{il}."
            h = self.rms_norm(x, w[p + "attn_norm.weight"])
            q = self.mm(h, p + "attn_q.weight")
            k = self.mm(h, p + "attn_k.weight")
            v = self.mm(h, p + "attn_v.weight")
            if p + "attn_q.bias" in w:
                q = q + w[p + "attn_q.bias"]
                k = k + w[p + "attn_k.bias"]
                v = v + w[p + "attn_v.bias"]
            q = self.rope(q.reshape(T, H, E), pos)                                # (T, H, E)
            k = self.rope(k.reshape(T, G, E), pos)                                # (T, G, E)
            v = v.reshape(T, G, E)
            att = np.empty((T, H, E))
            for hq in range(H):
                g = hq // (H // G)
                s = q[:, hq, :] @ k[:, g, :].T / np.sqrt(E) + mask               # (T, T)
                s = np.exp(s - s.max(axis=-1, keepdims=True))
                att[:, hq, :] = (s / s.sum(axis=-1, keepdims=True)) @ v[:, g, :]
            x = x + self.mm(att.reshape(T, H * E), p + "attn_output.weight")
            h = self.rms_norm(x, w[p + "ffn_norm.weight"])
            gate = self.mm(h, p + "ffn_gate.weight")                                # (T, F)
            up = self.mm(h, p + "ffn_up.weight")
            x = x + self.mm(gate / (1.0 + np.exp(-gate)) * up, p + "ffn_down.weight")
        x = self.rms_norm(x, w["output_norm.weight"])
        out = "output.weight" if "output.weight" in w else "token_embd.weight"
        return self.mm(x, out)                                                         # (T, V)


def main() -> int:
    args = sys.argv[1:]
    acts = "--ggml-cpu-acts" in args
    args = [a for a in args if a != "--ggml-cpu-acts"]
    if len(args) < 2:
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    m = Model(args[0], ggml_cpu_acts=acts)
    logits = m.forward([int(t) for t in args[1:]])
    print(" ".join(str(int(i)) for i in logits.argmax(axis=-1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
