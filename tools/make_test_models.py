#!/usr/bin/env python3
"""Writes rill's tiny random-weight test models (GGUF v3), deterministically.

Every run with the same numpy and gguf versions writes byte-identical files (fixed seeds, no
timestamps, float64 reductions only where the result is rounded back). The sha256 of each file is
printed and written to SHA256SUMS in the output folder; tools/ref_logits.py records it next to the
reference logits so a test can tell when a regenerated model no longer matches the references.

Needs numpy and gguf only (no llama-cpp-python), so CI can regenerate the models.

Models (24 files), all with n_embd 256, n_ff 512, 2 layers, 4 query heads, 2 KV heads (GQA,
head dim 64), context length 256:

  rill-tiny-llama-<T>.gguf       arch llama, untied (has output.weight), rope base 1e4 (NORM rope:
                                 adjacent pairs), rms eps 1e-5, SentencePiece-style vocab (288)
  rill-tiny-qwen2-<T>.gguf       arch qwen2, untied, q/k/v biases, rope base 1e6 (NEOX rope:
                                 halves),
                                 rms eps 1e-6, byte-level BPE vocab (283) with merges, pre "qwen2"
  rill-tiny-llama-tied-F32.gguf  like llama-F32 but tied: no output.weight, logits use token_embd
  rill-tiny-llama-tied-Q4_1.gguf tied and mixed like SmolLM2's file: token_embd Q8_0, other
                                 matrices Q4_1

<T> is one of F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K: every 2-D weight (token_embd, output and
all layer matrices) is stored in that type; norms and biases are always F32. All models of one
architecture share the same underlying float weights (same seed), so a quantized model approximates
its F32 sibling, and the tied models share llama's weights minus output.weight.

Usage: make_test_models.py [--out tests/data/models] [--check]
  --check  also dequantizes every tensor with gguf-py (gguf.quants.dequantize) and compares it with
           the float weights it came from (error bounds per type); exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from collections import Counter

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import LlamaFileType as FT
from gguf import TokenType

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_quants  # noqa: E402

N_EMBD = 256
N_FF = 512
N_LAYER = 2
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = N_EMBD // N_HEAD
N_CTX = 256

TYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K", "Q5_0", "Q5_1"]
FILE_TYPE = {
    "F32": FT.ALL_F32, "F16": FT.MOSTLY_F16, "BF16": FT.MOSTLY_BF16, "Q8_0": FT.MOSTLY_Q8_0,
    "Q4_0": FT.MOSTLY_Q4_0, "Q4_1": FT.MOSTLY_Q4_1, "Q4_K": FT.MOSTLY_Q4_K_S,
    "Q5_K": FT.MOSTLY_Q5_K_S, "Q6_K": FT.MOSTLY_Q6_K, "Q5_0": FT.MOSTLY_Q5_0,
    "Q5_1": FT.MOSTLY_Q5_1,
}

ARCH = {
    "llama": dict(seed=0x7111A, rope_base=10000.0, eps=1e-5, bias=False),
    "qwen2": dict(seed=0x9E2, rope_base=1000000.0, eps=1e-6, bias=True),
}

# A small fixed corpus from which both tiny vocabularies are "trained" (plain BPE merge counting),
# so that real text tokenizes into a mix of merged pieces and single bytes.
CORPUS = """\
the stream is the state. the session keeps the cache and the answer comes at once.
there is a price and a size in each line of the market; the trader reads them and then writes.
she said that the rate is not the same as the one in the other stream, and he said it is.
in the end the model sees the tokens in order and it sees the ones that came before.
"""

# -------------------------------------------------------------------------------------------------
# Tokenizers


def _train_bpe(words: Counter, n_merges: int) -> list[tuple[str, str]]:
    """Greedy BPE: repeatedly merge the most frequent adjacent pair (ties: smallest pair)."""
    seqs = {w: list(w) for w in words}
    merges = []
    for _ in range(n_merges):
        pairs: Counter = Counter()
        for w, f in words.items():
            s = seqs[w]
            for a, b in zip(s, s[1:]):
                pairs[(a, b)] += f
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merges.append(best)
        for w in seqs:
            s = seqs[w]
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and (s[i], s[i + 1]) == best:
                    out.append(s[i] + s[i + 1])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            seqs[w] = out
    return merges


def _bytes_to_unicode() -> list[tuple[int, str]]:
    """GPT-2's byte <-> printable-unicode map, in GPT-2's order (printable bytes first)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [(b, chr(c)) for b, c in zip(bs, cs)]


def spm_vocab(n_chars: int = 12, n_merged: int = 17) -> dict:
    """SentencePiece-style ('llama') vocabulary: <unk> <s> </s>, 256 byte tokens <0xNN>, then
    n_chars single characters and n_merged merged pieces ('▁' marks a word start). Merged pieces
    score -rank (earlier merge = higher score = merged first); characters score below them."""
    words = Counter("▁" + w for w in CORPUS.split())
    chars = Counter()
    for w, f in words.items():
        for c in w:
            chars[c] += f
    char_list = [c for c, _ in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))[:n_chars]]
    known = set(char_list)
    pieces = []
    for a, b in _train_bpe(words, 200):
        if a in known and b in known and a + b not in known:
            pieces.append(a + b)
            known.add(a + b)
            if len(pieces) == n_merged:
                break
    assert len(pieces) == n_merged, "corpus too small for the requested vocabulary"
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)
    for i, p in enumerate(pieces):
        tokens.append(p)
        types.append(TokenType.NORMAL)
        scores.append(-float(i))
    for i, c in enumerate(char_list):
        tokens.append(c)
        types.append(TokenType.NORMAL)
        scores.append(-100.0 - i)
    return dict(model="llama", pre="default", tokens=tokens, types=types, scores=scores,
                merges=None, bos=1, eos=2, unk=0, pad=None, add_bos=True, add_eos=False,
                add_space_prefix=True, chat_template=None)


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
          "{{ '<|im_start|>assistant\\n' }}{% endif %}")


def bpe_vocab(n_merges: int = 24) -> dict:
    """Byte-level BPE ('gpt2') vocabulary like Qwen2's: 256 byte symbols, n_merges merged tokens,
    then <|endoftext|> <|im_start|> <|im_end|> as control tokens."""
    b2u = dict(_bytes_to_unicode())
    pat = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+")
    words = Counter("".join(b2u[b] for b in m.encode("utf-8")) for m in pat.findall(CORPUS))
    merges = _train_bpe(words, n_merges)
    tokens = [u for _, u in _bytes_to_unicode()] + [a + b for a, b in merges]
    assert len(set(tokens)) == len(tokens)
    types = [TokenType.NORMAL] * len(tokens)
    eot = len(tokens)
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types += [TokenType.CONTROL] * 3
    return dict(model="gpt2", pre="qwen2", tokens=tokens, types=types, scores=None,
                merges=[f"{a} {b}" for a, b in merges], bos=eot, eos=eot + 2, unk=None, pad=eot,
                add_bos=False, add_eos=False, add_space_prefix=None, chat_template=CHATML)


# -------------------------------------------------------------------------------------------------
# Weights


def make_weights(arch: str, n_vocab: int) -> dict[str, np.ndarray]:
    """Float32 weights in GGUF/ggml orientation: a matrix is (n_out, n_in) in numpy (ggml ne[0] =
    n_in is the contiguous row). Scales: entries ~ N(0, (gain/sqrt(n_in))^2), norms ~ 1 + N(0,.1^2),
    so that logits have a spread of a few units and attention is neither uniform nor one-hot."""
    a = ARCH[arch]
    rng = np.random.default_rng(a["seed"])

    def mat(n_out, n_in, gain):
        return (rng.standard_normal((n_out, n_in)) * (gain / np.sqrt(n_in))).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    def bias(n):
        return (0.1 * rng.standard_normal(n)).astype(np.float32)

    w = {}
    w["token_embd.weight"] = (0.15 * rng.standard_normal((n_vocab, N_EMBD))).astype(np.float32)
    w["output_norm.weight"] = norm(N_EMBD)
    w["output.weight"] = mat(n_vocab, N_EMBD, 2.0)
    kv = N_HEAD_KV * HEAD_DIM
    for i in range(N_LAYER):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = norm(N_EMBD)
        w[p + "attn_q.weight"] = mat(N_EMBD, N_EMBD, 1.5)
        w[p + "attn_k.weight"] = mat(kv, N_EMBD, 1.5)
        w[p + "attn_v.weight"] = mat(kv, N_EMBD, 1.0)
        if a["bias"]:
            w[p + "attn_q.bias"] = bias(N_EMBD)
            w[p + "attn_k.bias"] = bias(kv)
            w[p + "attn_v.bias"] = bias(kv)
        w[p + "attn_output.weight"] = mat(N_EMBD, N_EMBD, 1.0)
        w[p + "ffn_norm.weight"] = norm(N_EMBD)
        w[p + "ffn_gate.weight"] = mat(N_FF, N_EMBD, 1.0)
        w[p + "ffn_up.weight"] = mat(N_FF, N_EMBD, 1.0)
        w[p + "ffn_down.weight"] = mat(N_EMBD, N_FF, 1.0)
    return w


# -------------------------------------------------------------------------------------------------
# Writing


def write_model(path: str, arch: str, name: str, vocab: dict, weights: dict[str, np.ndarray],
                type_of: dict[str, str], file_type: FT) -> None:
    a = ARCH[arch]
    wr = gguf.GGUFWriter(path, arch)
    wr.add_name(name)
    wr.add_type("model")
    wr.add_description("rill test model: random weights, not a language model")
    wr.add_context_length(N_CTX)
    wr.add_embedding_length(N_EMBD)
    wr.add_block_count(N_LAYER)
    wr.add_feed_forward_length(N_FF)
    wr.add_head_count(N_HEAD)
    wr.add_head_count_kv(N_HEAD_KV)
    wr.add_rope_freq_base(a["rope_base"])
    wr.add_rope_dimension_count(HEAD_DIM)
    wr.add_layer_norm_rms_eps(a["eps"])
    wr.add_vocab_size(len(vocab["tokens"]))
    wr.add_file_type(int(file_type))
    if file_type != FT.ALL_F32:
        wr.add_quantization_version(gguf.GGML_QUANT_VERSION)

    wr.add_tokenizer_model(vocab["model"])
    wr.add_tokenizer_pre(vocab["pre"])
    wr.add_token_list(vocab["tokens"])
    if vocab["scores"] is not None:
        wr.add_token_scores(vocab["scores"])
    wr.add_token_types([int(t) for t in vocab["types"]])
    if vocab["merges"] is not None:
        wr.add_token_merges(vocab["merges"])
    wr.add_bos_token_id(vocab["bos"])
    wr.add_eos_token_id(vocab["eos"])
    if vocab["unk"] is not None:
        wr.add_unk_token_id(vocab["unk"])
    if vocab["pad"] is not None:
        wr.add_pad_token_id(vocab["pad"])
    wr.add_add_bos_token(vocab["add_bos"])
    wr.add_add_eos_token(vocab["add_eos"])
    if vocab["add_space_prefix"] is not None:
        wr.add_add_space_prefix(vocab["add_space_prefix"])
    if vocab["chat_template"] is not None:
        wr.add_chat_template(vocab["chat_template"])

    for tname, w in weights.items():
        t = type_of.get(tname, "F32") if w.ndim == 2 else "F32"
        qt = QT[t]
        data = ggml_quants.quantize(w, qt)
        if qt in (QT.F32, QT.F16):
            wr.add_tensor(tname, data)
        else:
            wr.add_tensor(tname, data, raw_dtype=qt)

    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def model_specs():
    """(file name, arch, tied, {tensor name -> type} default, default type, file type)."""
    specs = []
    for arch in ("llama", "qwen2"):
        for t in TYPES:
            specs.append((f"rill-tiny-{arch}-{t}.gguf", arch, False, {}, t, FILE_TYPE[t]))
    specs.append(("rill-tiny-llama-tied-F32.gguf", "llama", True, {}, "F32", FT.ALL_F32))
    specs.append(("rill-tiny-llama-tied-Q4_1.gguf", "llama", True,
                  {"token_embd.weight": "Q8_0"}, "Q4_1", FT.MOSTLY_Q4_1))
    return specs


# Bounds for --check on (rms error / rms weight, max error / max |row|). They sit about 1.5x above
# what ggml's reference quantizers reach on Gaussian weights; a layout bug gives errors of O(1).
CHECK_BOUND = {"F32": (0.0, 0.0), "F16": (5e-4, 1e-3), "BF16": (4e-3, 8e-3),
               "Q8_0": (1e-2, 1e-2), "Q4_0": (0.13, 0.25), "Q4_1": (0.12, 0.15),
               "Q5_0": (0.065, 0.125), "Q5_1": (0.06, 0.075),
               "Q4_K": (0.11, 0.15), "Q5_K": (0.055, 0.08), "Q6_K": (0.027, 0.04)}


def check_file(path: str, weights: dict[str, np.ndarray], type_of: dict[str, str]) -> list[str]:
    errors = []
    r = gguf.GGUFReader(path)
    seen = set()
    for t in r.tensors:
        seen.add(t.name)
        src = weights[t.name]
        qt = QT(int(t.tensor_type))
        got = ggml_quants.dequantize(t.data, qt).reshape(src.shape)
        expect_t = type_of.get(t.name, "F32") if src.ndim == 2 else "F32"
        if qt.name != expect_t:
            errors.append(f"{t.name}: type {qt.name}, expected {expect_t}")
        err = (got - src).astype(np.float64)
        rel_rms = float(np.sqrt((err ** 2).mean() / (src.astype(np.float64) ** 2).mean()))
        rel_max = float((np.abs(err) / np.abs(src).max(axis=-1, keepdims=True)).max())
        b_rms, b_max = CHECK_BOUND[qt.name]
        if not (rel_rms <= b_rms and rel_max <= b_max):
            errors.append(f"{t.name} ({qt.name}): rms error {rel_rms:.4g} (bound {b_rms}), "
                          f"max error {rel_max:.4g} (bound {b_max})")
    missing = set(weights) - seen
    if missing:
        errors.append(f"missing tensors: {sorted(missing)}")
    return errors


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "models"))
    ap.add_argument("--check", action="store_true", help="dequantize and compare every tensor")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    vocabs = {"llama": spm_vocab(), "qwen2": bpe_vocab()}
    float_weights = {arch: make_weights(arch, len(vocabs[arch]["tokens"])) for arch in ARCH}

    sums = []
    failed = False
    for fname, arch, tied, overrides, t, ft in model_specs():
        w = dict(float_weights[arch])
        if tied:
            del w["output.weight"]
        type_of = {n: t for n, a in w.items() if a.ndim == 2}
        type_of.update(overrides)
        path = os.path.join(args.out, fname)
        name = fname[:-len(".gguf")]
        write_model(path, arch, name, vocabs[arch], w, type_of, ft)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        sums.append(f"{digest}  {fname}")
        line = f"{digest}  {fname}  ({os.path.getsize(path)} bytes)"
        if args.check:
            errs = check_file(path, w, type_of)
            line += "  check " + ("ok" if not errs else "FAILED")
            for e in errs:
                print("  " + e, file=sys.stderr)
            failed |= bool(errs)
        print(line)
    with open(os.path.join(args.out, "SHA256SUMS"), "w") as f:
        f.write("\n".join(sums) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
