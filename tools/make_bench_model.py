#!/usr/bin/env python3
"""Writes a Qwen2-0.5B-shaped random-weight GGUF for speed benchmarks (not a language model).

Shape of Qwen2-0.5B: n_embd 896, 24 layers, 14 query heads, 2 KV heads (head dim 64), n_ff 4864,
q/k/v biases, RoPE base 1e6 (NEOX), context 32768, tied output, and its real tokenizer (the
151,936-token byte-level BPE vocabulary of ../shared/testdata/tokenizer/ggml-vocab-qwen2.gguf),
so the vocabulary-sized output projection costs what it costs in the real model. The 2-D weights
are stored in TYPE (Q8_0 or Q4_0, or any type ggml_quants.py writes); norms and biases F32.
Deterministic from the seed. About 500 M parameters: 0.5 GB in Q8_0, 0.3 GB in Q4_0.

Usage: tools/make_bench_model.py TYPE [--out models/] [--shared ../shared]
"""
import argparse
import os
import sys

import numpy as np
import gguf

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ggml_quants  # noqa: E402

E, L, H, HKV, D, F, CTX = 896, 24, 14, 2, 64, 4864, 32768


def field_value(r, key):
    f = r.fields[key]
    if f.types[0] == gguf.GGUFValueType.ARRAY:
        if f.types[1] == gguf.GGUFValueType.STRING:
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i].tolist()[0] for i in f.data]
    if f.types[0] == gguf.GGUFValueType.STRING:
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    return f.parts[f.data[0]].tolist()[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("type", choices=["Q8_0", "Q4_0", "Q4_1", "F16"])  # 896 is no multiple of 256
    ap.add_argument("--out", default=os.path.join(HERE, "..", "models"))
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "shared"))
    a = ap.parse_args()

    vocab = gguf.GGUFReader(os.path.join(a.shared, "testdata", "tokenizer",
                                         "ggml-vocab-qwen2.gguf"))
    tokens = field_value(vocab, "tokenizer.ggml.tokens")
    types = field_value(vocab, "tokenizer.ggml.token_type")
    merges = field_value(vocab, "tokenizer.ggml.merges")
    V = len(tokens)

    rng = np.random.default_rng(2026)

    def mat(n_out, n_in, gain=1.0):
        return (rng.standard_normal((n_out, n_in), dtype=np.float32) *
                np.float32(gain / np.sqrt(n_in)))

    def vec(n, mean, sd):
        return (mean + sd * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)

    qt = ggml_quants.QT[a.type]
    path = os.path.join(a.out, f"rill-bench-qwen2-0.5b-{a.type}.gguf")
    os.makedirs(a.out, exist_ok=True)
    w = gguf.GGUFWriter(path, "qwen2")
    w.add_name("rill bench qwen2-0.5b-shaped")
    w.add_description("random weights with the shape of Qwen2-0.5B, for speed benchmarks only")
    w.add_context_length(CTX)
    w.add_embedding_length(E)
    w.add_block_count(L)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(151643)
    w.add_eos_token_id(151645)
    w.add_add_bos_token(False)

    def add(name, t, quantize):
        data = ggml_quants.quantize(t, qt) if quantize else t
        if quantize and qt not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            w.add_tensor(name, data, raw_dtype=qt)
        else:
            w.add_tensor(name, data)

    add("token_embd.weight", (0.02 * rng.standard_normal((V, E), dtype=np.float32)), True)
    add("output_norm.weight", vec(E, 1.0, 0.1), False)
    for i in range(L):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", vec(E, 1.0, 0.1), False)
        add(p + "attn_q.weight", mat(H * D, E), True)
        add(p + "attn_k.weight", mat(HKV * D, E), True)
        add(p + "attn_v.weight", mat(HKV * D, E), True)
        add(p + "attn_q.bias", vec(H * D, 0.0, 0.1), False)
        add(p + "attn_k.bias", vec(HKV * D, 0.0, 0.1), False)
        add(p + "attn_v.bias", vec(HKV * D, 0.0, 0.1), False)
        add(p + "attn_output.weight", mat(E, H * D), True)
        add(p + "ffn_norm.weight", vec(E, 1.0, 0.1), False)
        add(p + "ffn_gate.weight", mat(F, E), True)
        add(p + "ffn_up.weight", mat(F, E), True)
        add(p + "ffn_down.weight", mat(E, F), True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(path, os.path.getsize(path), "bytes")


if __name__ == "__main__":
    main()
