#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF fuzzer (fuzz/corpus/gguf/seed-*.gguf), deterministically.

Python standard library only. Seeds are small (< 8 KB each): valid files that reach every part
of the reader and the model loader (every value type, nested arrays, string arrays, version 2,
every tensor type, tiny llama and qwen2 models with chat templates), and near-valid files that
each break one rule (truncation, misalignment, overlap, duplicates, bad bool, unknown types).
Regression inputs found by fuzzing are added next to them as crash-*/regress-* files.

Usage: fuzz/make_seeds.py [OUT_DIR]   (default: fuzz/corpus/gguf next to this script)
"""

import os
import random
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
       BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}
# ggml type id -> (block elements, block bytes)
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 8: (32, 34), 9: (32, 36),
         12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292), 30: (1, 2)}
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0 = 0, 1, 2, 3, 8
T_Q4_K, T_Q5_K, T_Q6_K, T_BF16 = 12, 13, 14, 30


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == STR:
        return gstr(v)
    if t == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(FMT[t], v)


def gguf(kvs, tensors, version=3, alignment=32, rng=None, tweak=None):
    """kvs: [(key, type, value)]; tensors: [(name, [ne...], type)] laid out in order.
    tweak(infos) may edit the tensor infos (dicts) before they are written."""
    infos = []
    off = 0
    for name, ne, t in tensors:
        be, bb = TYPES[t]
        rows = 1
        for d in ne[1:]:
            rows *= d
        nbytes = ne[0] // be * bb * rows
        infos.append({"name": name, "ne": list(ne), "type": t, "offset": off, "nbytes": nbytes})
        off += (nbytes + alignment - 1) // alignment * alignment
    if tweak:
        tweak(infos)
    out = b"GGUF" + struct.pack("<IQQ", version, len(infos), len(kvs))
    for k, t, v in kvs:
        out += gstr(k) + struct.pack("<I", t) + value(t, v)
    for ti in infos:
        out += gstr(ti["name"]) + struct.pack("<I", len(ti["ne"]))
        out += b"".join(struct.pack("<Q", d) for d in ti["ne"])
        out += struct.pack("<IQ", ti["type"], ti["offset"])
    out += b"\0" * ((-len(out)) % alignment)
    rng = rng or random.Random(1)
    data = bytearray(rng.getrandbits(8) for _ in range(off))
    return out + bytes(data)


CHATML_SMOL = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
LLAMA3 = ("{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>"
          "\\n\\n' + m['content'] | trim + '<|eot_id|>' }}{% endfor %}")


def model_kvs(arch, n_layer, E, H, K, F, V, extra=()):
    kvs = [("general.architecture", STR, arch),
           (arch + ".context_length", U32, 64),
           (arch + ".embedding_length", U32, E),
           (arch + ".block_count", U32, n_layer),
           (arch + ".feed_forward_length", U32, F),
           (arch + ".attention.head_count", U32, H),
           (arch + ".attention.head_count_kv", U32, K),
           (arch + ".attention.layer_norm_rms_epsilon", F32, 1e-5),
           (arch + ".rope.freq_base", F32, 10000.0 if arch == "llama" else 1e6),
           ("tokenizer.ggml.model", STR, "gpt2"),
           ("tokenizer.ggml.tokens", ARR, (STR, ["<t%d>" % i for i in range(V)])),
           ("tokenizer.ggml.token_type", ARR, (I32, [1] * V))]
    return kvs + list(extra)


def model_tensors(n_layer, E, H, K, F, V, mat, bias=False, output=False):
    D = E // H
    ts = [("token_embd.weight", [E, V], T_Q8_0), ("output_norm.weight", [E], T_F32)]
    if output:
        ts.append(("output.weight", [E, V], T_Q8_0))
    for i in range(n_layer):
        p = "blk.%d." % i
        ts += [(p + "attn_norm.weight", [E], T_F32), (p + "attn_q.weight", [E, H * D], mat),
               (p + "attn_k.weight", [E, K * D], mat), (p + "attn_v.weight", [E, K * D], mat),
               (p + "attn_output.weight", [H * D, E], mat), (p + "ffn_norm.weight", [E], T_F32),
               (p + "ffn_gate.weight", [E, F], mat), (p + "ffn_up.weight", [E, F], mat),
               (p + "ffn_down.weight", [F, E], mat)]
        if bias:
            ts += [(p + "attn_q.bias", [H * D], T_F32), (p + "attn_k.bias", [K * D], T_F32),
                   (p + "attn_v.bias", [K * D], T_F32)]
    return ts


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "corpus", "gguf")
    os.makedirs(out, exist_ok=True)
    seeds = {}

    llama_kvs = model_kvs("llama", 1, 32, 2, 1, 32, 8,
                          [("tokenizer.chat_template", STR, CHATML_SMOL)])
    llama_ts = model_tensors(1, 32, 2, 1, 32, 8, T_Q4_0)
    seeds["seed-tiny-llama.gguf"] = gguf(llama_kvs, llama_ts)

    # Vocabulary size from llama.vocab_size (no token list), explicit RoPE and attention keys.
    keys_kvs = [kv for kv in model_kvs("llama", 1, 32, 2, 1, 32, 8)
                if not kv[0].startswith("tokenizer.")]
    keys_kvs += [("llama.vocab_size", U32, 8), ("llama.rope.dimension_count", U32, 16),
                 ("llama.attention.key_length", U32, 16), ("llama.attention.value_length", U32, 16),
                 ("llama.rope.scaling.type", STR, "linear"), ("llama.rope.scaling.factor", F32, 1.0)]
    seeds["seed-tiny-llama-keys.gguf"] = gguf(keys_kvs, llama_ts)
    seeds["near-rope-scaling.gguf"] = gguf(
        [kv for kv in keys_kvs if kv[0] != "llama.rope.scaling.factor"] +
        [("llama.rope.scaling.factor", F32, 8.0)], llama_ts)

    qwen_kvs = model_kvs("qwen2", 1, 32, 2, 1, 32, 4,
                         [("general.alignment", U32, 64),
                          ("tokenizer.chat_template", STR, "{{'<|im_start|>'}}")])
    seeds["seed-tiny-qwen2.gguf"] = gguf(qwen_kvs,
                                         model_tensors(1, 32, 2, 1, 32, 4, T_Q4_1, bias=True,
                                                       output=True), alignment=64)

    every = [("u8", U8, 200), ("i8", I8, -100), ("u16", U16, 60000), ("i16", I16, -30000),
             ("u32", U32, 4000000000), ("i32", I32, -2000000000), ("f32", F32, 1.5),
             ("bool", BOOL, 1), ("str", STR, "hello"), ("empty", STR, ""),
             ("u64", U64, 2**63 + 5), ("i64", I64, -2**62), ("f64", F64, 1e300),
             ("a.u8", ARR, (U8, [1, 2, 3])), ("a.bool", ARR, (BOOL, [0, 1, 1])),
             ("a.f64", ARR, (F64, [0.5, -2.0])), ("a.str", ARR, (STR, ["a", "", "ccc"])),
             ("a.empty", ARR, (I32, [])),
             ("a.nested", ARR, (ARR, [(U16, [1, 2]), (STR, ["x"]), (ARR, [(I8, [-1])])])),
             ("tokenizer.chat_template", STR, LLAMA3)]
    seeds["seed-metadata-every-type.gguf"] = gguf(every, [])

    kq = [("a", [256, 1], T_Q4_K), ("b", [256], T_Q5_K), ("c", [256, 1, 1], T_Q6_K),
          ("d", [4, 2, 1, 1], T_BF16), ("e", [2, 2, 2], T_F16), ("f", [0, 3], T_F32),
          ("g", [32, 1], 9), ("h", [256], 15)]
    seeds["seed-v2-types.gguf"] = gguf([("general.name", STR, "types")], kq, version=2)

    # Near-valid inputs, each breaking one rule of the reader or the loader.
    full = seeds["seed-tiny-llama.gguf"]
    seeds["near-truncated-infos.gguf"] = full[:900]
    seeds["near-truncated-data.gguf"] = full[:len(full) - 100]

    def misalign(infos):
        infos[1]["offset"] += 4

    def overlap(infos):
        infos[2]["offset"] = infos[1]["offset"]

    def bad_type(infos):
        infos[0]["type"] = 10  # Q2_K: a ggml type rill does not have

    def five_dims(infos):
        infos[1]["ne"] = [32, 1, 1, 1, 1]

    seeds["near-misaligned.gguf"] = gguf(llama_kvs, llama_ts, tweak=misalign)
    seeds["near-overlap.gguf"] = gguf(llama_kvs, llama_ts, tweak=overlap)
    seeds["near-unknown-type.gguf"] = gguf(llama_kvs, llama_ts, tweak=bad_type)
    seeds["near-five-dims.gguf"] = gguf(llama_kvs, llama_ts, tweak=five_dims)
    seeds["near-duplicate-key.gguf"] = gguf(llama_kvs + [("llama.block_count", U32, 1)],
                                            llama_ts)
    seeds["near-bad-bool.gguf"] = gguf([("b", BOOL, 2)], [])
    seeds["near-bad-alignment.gguf"] = gguf([("general.alignment", U32, 48)], [])
    def wrong_shape(infos):
        infos[3]["ne"] = [32, 16]  # blk.0.attn_q.weight should be [32, 32]

    seeds["near-wrong-shape.gguf"] = gguf(llama_kvs, llama_ts, tweak=wrong_shape)
    seeds["near-missing-tensor.gguf"] = gguf(llama_kvs, llama_ts[:-1])
    seeds["near-deep-nesting.gguf"] = gguf(
        [("deep", ARR, (ARR, [(ARR, [(ARR, [(ARR, [(ARR, [(ARR, [(ARR, [(ARR, [(U8, [1])])])])])])])])]))], [])

    for name, data in sorted(seeds.items()):
        assert len(data) < 8192, (name, len(data))
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
        print("%-36s %5d bytes" % (name, len(data)))


if __name__ == "__main__":
    main()
