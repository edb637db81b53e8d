"""Numpy quantizers for the ggml block formats rill supports.

Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and BF16 come from gguf-py (gguf.quants), whose implementations are
written to be bit-exact with ggml's reference quantizers. gguf-py has no K-quant quantizers (only
dequantizers), so Q4_K, Q5_K and Q6_K are implemented here, following ggml's
quantize_row_q{4,5,6}_K_ref (ggml/src/ggml-quants.c): the same scale search (make_qkx2_quants /
make_qx_quants), the same 6-bit scale/min packing and the same bit layouts, computed in float32
with ggml's left-to-right sums so that the bytes match ggml's reference quantizer (checked against
ggml_quantize_chunk from llama.cpp's libggml-base when it is installed: see
check_quants_vs_ggml.py) and never depend on the CPU's SIMD width. gguf.quants.dequantize reads
every block back (make_test_models.py --check).

Block layouts (QK_K = 256, K_SCALE_SIZE = 12, all little-endian, ggml_half = IEEE fp16):

  block_q8_0 (34 B / 32 w):  half d; int8 qs[32];                       w = d * q
  block_q4_0 (18 B / 32 w):  half d; uint8 qs[16];                      w = d * (q - 8)
                             q of weight j: j < 16 -> qs[j] & 0xF, else qs[j-16] >> 4
  block_q4_1 (20 B / 32 w):  half d; half m; uint8 qs[16];              w = d * q + m (same nibbles)
  block_q5_0 (22 B / 32 w):  half d; uint8 qh[4]; uint8 qs[16];         w = d * (q - 16)
                             low 4 bits of q as q4_0's nibbles; bit 4 of weight j is bit j of qh
                             (a little-endian uint32)
  block_q5_1 (24 B / 32 w):  half d; half m; uint8 qh[4]; uint8 qs[16]; w = d * q + m (as q5_0)
  block_q4_K (144 B / 256 w): half d; half dmin; uint8 scales[12]; uint8 qs[128];
        8 sub-blocks of 32; sub-block s has 6-bit scale sc[s] and 6-bit min mn[s]:
        w = d * sc[s] * q - dmin * mn[s], q in 0..15.
        scales[0..3]  = sc[0..3] | (sc[4..7] >> 4) << 6
        scales[4..7]  = mn[0..3] | (mn[4..7] >> 4) << 6
        scales[8..11] = (sc[4..7] & 0xF) | (mn[4..7] & 0xF) << 4
        qs: for each 64-weight group g (0..3): qs[32g + l] = q[64g + l] | q[64g + 32 + l] << 4
  block_q5_K (176 B / 256 w): half d; half dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128];
        as q4_K but q in 0..31; the low 4 bits are packed like q4_K's qs, and bit 4 of
        q[32s + l] is bit s of qh[l] (s = sub-block 0..7).
  block_q6_K (210 B / 256 w): uint8 ql[128]; uint8 qh[64]; int8 scales[16]; half d;
        16 sub-blocks of 16; w = d * scales[s] * (q - 32), q in 0..63.
        for each 128-weight half h (0..1), l < 32, with L = q[128h + ...]:
          ql[64h + l]      = (L[l] & 0xF)      | (L[l + 64] & 0xF) << 4
          ql[64h + 32 + l] = (L[l + 32] & 0xF) | (L[l + 96] & 0xF) << 4
          qh[32h + l] = L[l] >> 4 | (L[l+32] >> 4) << 2 | (L[l+64] >> 4) << 4 | (L[l+96] >> 4) << 6
"""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf import quants as gq

QK_K = 256
GROUP_MAX_EPS = 1e-15


def _f16_roundtrip(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Returns (fp16 bytes as (n, 2) uint8, the fp16 value as float32)."""
    h = v.astype(np.float32).astype(np.float16)
    return h.reshape(-1, 1).view(np.uint8), h.astype(np.float32)


def _seqsum(a: np.ndarray) -> np.ndarray:
    """Sum over the last axis in float32, strictly left to right, like ggml's scalar loops. Only
    element-wise float32 operations are used, so the result is identical on every machine (numpy's
    own .sum() reorders additions depending on the CPU's SIMD width)."""
    acc = a[..., 0].astype(np.float32)
    for i in range(1, a.shape[-1]):
        acc = acc + a[..., i]
    return acc


F32 = np.float32


def _make_qkx2_quants(x: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """make_qkx2_quants(n, nmax, x, weights, L, &the_min, Laux, rmin, rdelta, nstep, false) with
    ggml's q4_K/q5_K weights (av_x + |x|), vectorised over the rows of x (m, n), in float32.
    Returns (scale, the_min, L): w ~= scale * L - the_min, the_min >= 0."""
    x = x.astype(F32)
    av_x = np.sqrt(_seqsum(x * x) / F32(x.shape[1]))
    w = av_x[:, None] + np.abs(x)
    mn = np.minimum(x.min(axis=1), F32(0))
    mx = x.max(axis=1)
    sum_w = _seqsum(w)
    sum_x = _seqsum(w * x)
    flat = mx == mn
    one = F32(1)

    rng = np.where(flat, one, mx - mn)
    iscale = F32(nmax) / rng
    scale = one / iscale
    L = np.clip(np.rint(iscale[:, None] * (x - mn[:, None])), 0, nmax).astype(F32)
    diff = scale[:, None] * L + mn[:, None] - x
    best_err = _seqsum(w * (diff * diff))
    for i in range(nstep + 1):
        # ggml moves `min` whenever a step improves the error; later steps measure from it.
        rng = np.where(flat, one, mx - mn)
        iscale = (F32(rmin) + F32(rdelta) * F32(i) + F32(nmax)) / rng
        l = np.clip(np.rint(iscale[:, None] * (x - mn[:, None])), 0, nmax).astype(F32)
        wl = w * l
        sum_l = _seqsum(wl)
        sum_l2 = _seqsum(wl * l)
        sum_xl = _seqsum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        D_s = np.where(ok, D, one)
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D_s
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D_s
        pos = this_min > 0
        this_min = np.where(pos, F32(0), this_min)
        this_scale = np.where(pos, sum_xl / np.where(sum_l2 != 0, sum_l2, one), this_scale)
        diff = this_scale[:, None] * l + this_min[:, None] - x
        cur = _seqsum(w * (diff * diff))
        upd = ok & (cur < best_err) & ~flat
        best_err = np.where(upd, cur, best_err)
        scale = np.where(upd, this_scale, scale)
        mn = np.where(upd, this_min, mn)
        L = np.where(upd[:, None], l, L)
    scale = np.where(flat, F32(0), scale)
    L = np.where(flat[:, None], F32(0), L)
    return scale.astype(F32), (-mn).astype(F32), L.astype(np.uint8)


def _quantize_k_scale_min(blocks: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """Shared part of quantize_row_q4_K_ref / q5_K_ref: per-sub-block scale/min search, 6-bit
    quantization of scales and mins against the super-block d/dmin, and the final integers."""
    nb = blocks.shape[0]
    blocks = blocks.astype(F32)
    scales, mins, L0 = _make_qkx2_quants(blocks.reshape(nb * 8, 32), nmax, rmin, rdelta, nstep)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    inv_scale = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)),
                         F32(0))
    inv_min = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0))
    ls = np.minimum(np.rint(inv_scale[:, None] * scales), 63).astype(np.uint8)
    lm = np.minimum(np.rint(inv_min[:, None] * mins), 63).astype(np.uint8)
    d_bytes, d = _f16_roundtrip(max_scale / F32(63))
    dmin_bytes, dmin = _f16_roundtrip(max_min / F32(63))

    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)

    d_eff = d[:, None] * ls.astype(F32)  # (nb, 8)
    dm_eff = dmin[:, None] * lm.astype(F32)
    x = blocks.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.clip(np.rint((x + dm_eff[:, :, None]) / d_eff[:, :, None]), 0, nmax)
    # ggml skips sub-blocks whose effective scale is 0 and keeps the search's integers there.
    q = np.where(d_eff[:, :, None] == 0, L0.reshape(nb, 8, 32), q)
    return d_bytes, dmin_bytes, packed, q.astype(np.uint8).reshape(nb, QK_K)


def quantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    """blocks: (nb, 256) float32 -> (nb, 144) uint8."""
    nb = blocks.shape[0]
    d, dmin, sc, q = _quantize_k_scale_min(blocks, 15, -1.0, 0.1, 20)
    q = q.reshape(nb, 4, 2, 32)
    qs = (q[:, :, 0, :] | (q[:, :, 1, :] << 4)).reshape(nb, 128)
    return np.concatenate([d, dmin, sc, qs], axis=1)


def quantize_q5_k(blocks: np.ndarray) -> np.ndarray:
    """blocks: (nb, 256) float32 -> (nb, 176) uint8."""
    nb = blocks.shape[0]
    d, dmin, sc, q = _quantize_k_scale_min(blocks, 31, -0.5, 0.1, 15)
    lo = (q & 0xF).reshape(nb, 4, 2, 32)
    qs = (lo[:, :, 0, :] | (lo[:, :, 1, :] << 4)).reshape(nb, 128)
    hi = (q >> 4).reshape(nb, 8, 32).astype(np.uint8)  # bit 4 of each weight, per sub-block
    qh = np.zeros((nb, 32), dtype=np.uint8)
    for s in range(8):
        qh |= hi[:, s, :] << s
    return np.concatenate([d, dmin, sc, qh, qs], axis=1)


def _make_qx_quants_rmse1(x: np.ndarray, nmax: int):
    """make_qx_quants(n, nmax, x, L, rmse_type=1, NULL) vectorised over the rows of x (m, n), in
    float32. Returns (scale, L) with L = l + nmax in 0..2*nmax-1."""
    x = x.astype(F32)
    idx = np.abs(x).argmax(axis=1)  # first maximum, as ggml's strict '>'
    mx = np.take_along_axis(x, idx[:, None], axis=1)[:, 0]
    zero = np.abs(mx) < F32(GROUP_MAX_EPS)
    mx_s = np.where(zero, F32(1), mx)
    w = x * x

    def fit(iscale):
        l = np.clip(np.rint(iscale[:, None] * x), -nmax, nmax - 1).astype(F32)
        return l, _seqsum(w * x * l), _seqsum(w * l * l)

    l, sumlx, suml2 = fit(F32(-nmax) / mx_s)
    L = l
    scale = np.where(suml2 != 0, sumlx / np.where(suml2 != 0, suml2, F32(1)), F32(0))
    best = scale * sumlx
    for i in range(-9, 10):
        if i == 0:
            continue
        l, sumlx, suml2 = fit(-(F32(nmax) + F32(0.1) * F32(i)) / mx_s)
        upd = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        new_scale = sumlx / np.where(suml2 > 0, suml2, F32(1))
        scale = np.where(upd, new_scale, scale)
        best = np.where(upd, new_scale * sumlx, best)
        L = np.where(upd[:, None], l, L)
    scale = np.where(zero, F32(0), scale)
    L = np.where(zero[:, None], F32(-nmax), L)
    return scale.astype(F32), (L + nmax).astype(np.uint8)


def quantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    """blocks: (nb, 256) float32 -> (nb, 210) uint8, as quantize_row_q6_K_ref."""
    nb = blocks.shape[0]
    blocks = blocks.astype(F32)
    scales, L0 = _make_qx_quants_rmse1(blocks.reshape(nb * 16, 16), 32)
    scales = scales.reshape(nb, 16)
    imax = np.abs(scales).argmax(axis=1)
    max_scale = np.take_along_axis(scales, imax[:, None], axis=1)[:, 0]
    zero = np.abs(max_scale) < F32(GROUP_MAX_EPS)
    iscale = np.where(zero, F32(0), F32(-128) / np.where(zero, F32(1), max_scale))
    with np.errstate(divide="ignore"):
        d_bytes, d = _f16_roundtrip(np.where(zero, F32(0), F32(1) / iscale))
    sq = np.minimum(127, np.rint(iscale[:, None] * scales)).astype(np.int8)
    d_eff = d[:, None] * sq.astype(F32)
    x = blocks.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        L = np.clip(np.rint(x / d_eff[:, :, None]), -32, 31) + 32
    L = np.where(d_eff[:, :, None] == 0, L0.reshape(nb, 16, 16), L)
    L = L.astype(np.uint8).reshape(nb, 2, 4, 32)  # (block, half, quarter, l)
    ql = np.empty((nb, 2, 2, 32), dtype=np.uint8)
    ql[:, :, 0, :] = (L[:, :, 0, :] & 0xF) | ((L[:, :, 2, :] & 0xF) << 4)
    ql[:, :, 1, :] = (L[:, :, 1, :] & 0xF) | ((L[:, :, 3, :] & 0xF) << 4)
    qh = ((L[:, :, 0, :] >> 4) | ((L[:, :, 1, :] >> 4) << 2) | ((L[:, :, 2, :] >> 4) << 4)
          | ((L[:, :, 3, :] >> 4) << 6))
    out = np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sq.view(np.uint8), d_bytes],
                         axis=1)
    out[zero] = 0  # ggml memsets an all-zero block
    return out


_K_QUANTIZERS = {
    QT.Q4_K: (quantize_q4_k, 144),
    QT.Q5_K: (quantize_q5_k, 176),
    QT.Q6_K: (quantize_q6_k, 210),
}


def quantize(w: np.ndarray, qtype: QT) -> np.ndarray:
    """Quantizes a 2-D float32 matrix (rows, cols) row by row. Returns the data as stored in GGUF:
    float32 / float16 arrays for F32 / F16, otherwise uint8 of shape (rows, bytes_per_row)."""
    w = np.ascontiguousarray(w, dtype=np.float32)
    if qtype == QT.F32:
        return w
    if qtype == QT.F16:
        return w.astype(np.float16)
    if qtype in (QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1, QT.Q5_0, QT.Q5_1):
        return gq.quantize(w, qtype)
    fn, type_size = _K_QUANTIZERS[qtype]
    rows, cols = w.shape
    if cols % QK_K != 0:
        raise ValueError(f"row length {cols} is not a multiple of {QK_K}")
    return fn(w.reshape(-1, QK_K)).reshape(rows, cols // QK_K * type_size)


def dequantize(data: np.ndarray, qtype: QT) -> np.ndarray:
    """gguf-py's dequantizer (independent of the quantizers above)."""
    if qtype == QT.F32:
        return np.asarray(data, dtype=np.float32)
    if qtype == QT.F16:
        return np.asarray(data).view(np.float16).astype(np.float32)
    return gq.dequantize(np.asarray(data).view(np.uint8), qtype)
