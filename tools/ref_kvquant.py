#!/usr/bin/env python3
"""Records llama.cpp's logits with quantized KV caches, for rill's parity test of its Q8_0 / Q4_0
cache types (tests/test_forward.c, tiny_kvquant_matches_llama_cpp).

llama.cpp (through llama-cpp-python) runs the tiny F32 models of tests/data/models on the same
token sequences as tests/data/ref/flash/ (read from its logits.tsv: every position of sequences a
and b), with flash attention on (llama.cpp needs it for a quantized V cache) and each of the cache
type pairs in PAIRS (type_k, type_v). Everything written comes from those runs; nothing but the
inputs is fixed here.

Writes into --out (default tests/data/ref/kvquant/):

  <k>-<v>-<model>.f32   llama.cpp's logits, float32 little-endian, (position, vocab), rows of
                        sequence a then b
  logits.tsv            one line per block, the columns of ref_logits.py's logits.tsv (file, byte
                        offset, rows, n_vocab, model, model sha256, positions, tokens, top-1), the
                        file names carrying the cache types
  index.json            llama.cpp version and settings, and per block llama.cpp's own distance
                        from its F16-cache flash run (tests/data/ref/flash/) on the same tokens: how
                        much the cache type alone moves llama.cpp's logits

llama.cpp settings: n_threads 2, n_ctx 256, n_batch = n_ubatch = 256 (a sequence is one batch),
flash_attn on, mmap on, CPU only.

Usage: ref_kvquant.py [--models tests/data/models] [--ref tests/data/ref] [--out DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))

# llama.cpp rotates Q, K and V by a Hadamard transform when a cache type is quantized (its
# "attention rotation", on by default at this commit); rill stores the rows unrotated, so the
# references are made with the rotation off (llama.cpp's own switch, read when a context is made).
os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"

import llama_cpp  # noqa: E402

N_THREADS = 2
N_CTX = 256
# ggml type ids (ggml.h)
GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
PAIRS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"), ("f16", "q4_0")]
MODELS = ["rill-tiny-llama-F32.gguf", "rill-tiny-qwen2-F32.gguf"]


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_tsv(path: str) -> list[dict]:
    rows = []
    with open(path) as f:
        head = f.readline().lstrip("#").rstrip("\n").split("\t")
        for line in f:
            rows.append(dict(zip(head, line.rstrip("\n").split("\t"))))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=os.path.join(ROOT, "tests", "data", "models"))
    ap.add_argument("--ref", default=os.path.join(ROOT, "tests", "data", "ref"))
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out_dir = args.out or os.path.join(args.ref, "kvquant")
    os.makedirs(out_dir, exist_ok=True)
    flash_rows = [r for r in read_tsv(os.path.join(args.ref, "flash", "logits.tsv"))
                  if r["model"] in MODELS]
    tsv = ["#file\toffset\trows\tn_vocab\tmodel\tmodel_sha256\tpositions\ttokens\ttop1"]
    index = {"llama_cpp_python": llama_cpp.__version__,
             "system_info": llama_cpp.llama_print_system_info().decode().strip(),
             "python": platform.python_version(), "numpy": np.__version__,
             "settings": {"n_threads": N_THREADS, "n_ctx": N_CTX, "n_batch": N_CTX,
                          "n_ubatch": N_CTX, "flash_attn": True, "n_gpu_layers": 0},
             "blocks": []}
    for model in MODELS:
        path = os.path.join(args.models, model)
        digest = sha256_file(path)
        seqs = [r for r in flash_rows if r["model"] == model]
        if len(seqs) != 2 or any(r["model_sha256"] != digest for r in seqs):
            raise SystemExit(f"{model}: flash references missing or for another file")
        for k, v in PAIRS:
            llm = llama_cpp.Llama(path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX,
                                  n_threads=N_THREADS, n_threads_batch=N_THREADS,
                                  logits_all=True, type_k=GGML[k], type_v=GGML[v],
                                  flash_attn=True, n_gpu_layers=0, verbose=False)
            fname = f"{k}-{v}-{model[:-len('.gguf')]}.f32"
            blocks, offset = [], 0
            for r in seqs:
                ids = [int(t) for t in r["tokens"].split(",")]
                llm.reset()
                llm.eval(ids)
                logits = np.array(llm.scores[: len(ids)], dtype=np.float32)
                if not np.isfinite(logits).all() or float(logits.std()) < 0.1:
                    raise SystemExit(f"{fname}: degenerate logits")
                f16 = np.fromfile(os.path.join(args.ref, r["file"]), dtype=np.float32,
                                  count=len(ids) * logits.shape[1],
                                  offset=int(r["offset"])).reshape(logits.shape)
                blocks.append(logits)
                tsv.append("\t".join([os.path.basename(out_dir) + "/" + fname, str(offset), str(len(ids)), str(logits.shape[1]),
                                      model, digest, "all", r["tokens"],
                                      ",".join(str(int(t)) for t in logits.argmax(axis=1))]))
                index["blocks"].append({
                    "file": fname, "offset": offset, "type_k": k, "type_v": v, "model": model,
                    "n_tokens": len(ids),
                    "max_abs_vs_f16_flash": float(np.abs(logits - f16).max()),
                    "scale": float(np.abs(f16).max())})
                offset += logits.nbytes
            np.concatenate(blocks).astype("<f4").tofile(os.path.join(out_dir, fname))
            del llm
    with open(os.path.join(out_dir, "logits.tsv"), "w") as f:
        f.write("\n".join(tsv) + "\n")
    with open(os.path.join(out_dir, "index.json"), "w") as f:
        json.dump(index, f, indent=1)
        f.write("\n")
    for b in index["blocks"]:
        print(f"{b['file']:44s} {b['n_tokens']:3d} tok  llama.cpp {b['type_k']}/{b['type_v']} vs "
              f"its f16 cache: max|d| {b['max_abs_vs_f16_flash']:.4g} (scale {b['scale']:.3g})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
