#!/usr/bin/env python3
"""Checks tools/ggml_quants.py byte for byte against ggml's own reference quantizers.

Calls ggml_quantize_chunk() from the libggml-base shared library that llama-cpp-python ships
(ggml's quantize_row_*_ref, no importance matrix) on random and edge-case matrices, and compares the
bytes with tools/ggml_quants.quantize(). Needs llama-cpp-python; the model generator itself
does not.

Usage: check_quants_vs_ggml.py [--lib path/to/libggml-base.so]
Exit status 0 when every type matches exactly.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ggml_quants  # noqa: E402

TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q4_K", "Q5_K", "Q6_K"]


def find_lib() -> str:
    import llama_cpp  # noqa: F401  (only to locate the package)
    d = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    hits = sorted(glob.glob(os.path.join(d, "libggml-base.*")))
    if not hits:
        raise SystemExit(f"no libggml-base in {d}")
    return hits[0]


def matrices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(12345)
    m = {
        "normal": rng.standard_normal((48, 512)).astype(np.float32),
        "small": (0.02 * rng.standard_normal((16, 256))).astype(np.float32),
        "skewed": (np.abs(rng.standard_normal((16, 256))) + 0.5).astype(np.float32),
        "heavy": rng.standard_t(2, (16, 512)).astype(np.float32),
    }
    e = rng.standard_normal((8, 256)).astype(np.float32)
    e[0] = 0.0                      # all-zero row
    e[1] = 0.75                     # constant row
    e[2, :128] = 0.0                # zero half-block
    e[3, ::7] *= 100.0              # outliers
    e[4] = -np.abs(e[4])            # all negative
    e[5, 32:64] = 1e-3 * e[5, 32:64]  # one tiny sub-block
    m["edge"] = e
    return m


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib", default=None)
    args = ap.parse_args()
    lib = ctypes.CDLL(args.lib or find_lib())
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                        ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                        ctypes.c_void_p]
    lib.ggml_quantize_init.argtypes = [ctypes.c_int]
    bad = 0
    for t in TYPES:
        qt = QT[t]
        lib.ggml_quantize_init(int(qt))
        for name, w in matrices().items():
            w = np.ascontiguousarray(w)
            mine = np.ascontiguousarray(ggml_quants.quantize(w, qt)).view(np.uint8).reshape(
                w.shape[0], -1)
            ref = np.zeros_like(mine)
            n = lib.ggml_quantize_chunk(int(qt), w.ctypes.data, ref.ctypes.data, 0, w.shape[0],
                                        w.shape[1], None)
            ok = n == ref.size and np.array_equal(mine, ref)
            bad += not ok
            print(f"{t:5s} {name:7s} {'identical' if ok else 'DIFFERENT'}"
                  + ("" if ok else f" ({(mine != ref).mean():.2%} of bytes differ)"))
    print(f"{len(TYPES) * len(matrices()) - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
