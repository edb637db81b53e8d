#!/usr/bin/env python3
"""Records llama.cpp's own Q5_0 / Q5_1 bits for tests/test_kernels.c (test_q5_matches_llama_cpp).

Through ctypes, from the libraries llama-cpp-python ships (the portable AVX2 + FMA + F16C build of
tools/README.md), after ggml_cpu_init():
  - ggml_quantize_chunk (ggml's quantize_row_q5_0_ref / q5_1_ref) of a 4 x 256 weight matrix:
    the FNV-1a 64 hash of the bytes;
  - the CPU backend's from_float for each type's vec_dot type (Q8_0, Q8_1: the AVX2 activation
    quantizers) of one 256-value input row: the FNV-1a 64 hash;
  - the CPU backend's vec_dot (ggml_vec_dot_q5_0_q8_0 / q5_1_q8_1) of each weight row with that
    activation row: the f32 bits.
The inputs are the test's golden_input() (x_i = ((i * 2654435761 + seed) mod 1000003) / 1000003
* (hi - lo) + lo, rounded once to f32): weights seed 11 in [-1, 1] with the first block of row 3
set to zero (a block with d = 0), activations seed 12 in [-3, 3]. Prints the C initializers.

Usage: ggml_golden_q5.py [--lib-dir DIR]   (default: llama_cpp's lib/ folder)
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import os

import numpy as np

GGML_TYPE = {"Q5_0": 6, "Q5_1": 7, "Q8_0": 8, "Q8_1": 9}
ROWS, N = 4, 256


class TypeTraitsCpu(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


FROM_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
VEC_DOT = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
                           ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t,
                           ctypes.c_int)


def golden_input(n: int, lo: float, hi: float, seed: int) -> np.ndarray:
    k = [(i * 2654435761 + seed) % 1000003 for i in range(n)]
    return np.array([float(v) / 1000003.0 * (hi - lo) + lo for v in k]).astype(np.float32)


def fnv1a64(b: bytes) -> int:
    h = 0xcbf29ce484222325
    for c in b:
        h = ((h ^ c) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lib-dir", default=None)
    args = ap.parse_args()
    if args.lib_dir is None:
        import llama_cpp
        args.lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    mode = ctypes.RTLD_GLOBAL
    base = ctypes.CDLL(sorted(glob.glob(os.path.join(args.lib_dir, "libggml-base.*")))[0], mode)
    cpu = ctypes.CDLL(sorted(glob.glob(os.path.join(args.lib_dir, "libggml-cpu.*")))[0], mode)
    cpu.ggml_cpu_init()
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(TypeTraitsCpu)
    base.ggml_quantize_chunk.restype = ctypes.c_size_t
    base.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p,
                                         ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                         ctypes.c_void_p]
    base.ggml_row_size.restype = ctypes.c_size_t
    base.ggml_row_size.argtypes = [ctypes.c_int, ctypes.c_int64]

    w = golden_input(ROWS * N, -1, 1, 11).reshape(ROWS, N)
    w[3, :32] = 0.0
    x = golden_input(N, -3, 3, 12)
    for name in ("Q5_0", "Q5_1"):
        t = GGML_TYPE[name]
        rb = base.ggml_row_size(t, N)
        wq = np.zeros(ROWS * rb, dtype=np.uint8)
        base.ggml_quantize_chunk(t, w.ctypes.data, wq.ctypes.data, 0, ROWS, N, None)
        tr = cpu.ggml_get_type_traits_cpu(t).contents
        vt = tr.vec_dot_type
        xq = np.zeros(base.ggml_row_size(vt, N), dtype=np.uint8)
        act = cpu.ggml_get_type_traits_cpu(vt).contents  # from_float makes a row of its own type
        FROM_FLOAT(act.from_float)(x.ctypes.data, xq.ctypes.data, N)
        dots = []
        for r in range(ROWS):
            s = ctypes.c_float()
            VEC_DOT(tr.vec_dot)(N, ctypes.byref(s), 0, wq.ctypes.data + r * rb, 0,
                                xq.ctypes.data, 0, 1)
            dots.append(np.float32(s.value).view(np.uint32))
        print(f"/* {name}: vec_dot type {vt} */")
        print(f"    {{ RILL_DTYPE_{name}, 0x{fnv1a64(wq.tobytes()):016x}ull, "
              f"0x{fnv1a64(xq.tobytes()):016x}ull,")
        print("      { " + ", ".join(f"0x{int(d):08x}" for d in dots) + " } },")


if __name__ == "__main__":
    main()
