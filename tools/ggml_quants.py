"""Numpy quantizers for the ggml block formats rill supports.

Q8_0, Q4_0, Q4_1 and BF16 come from gguf-py (gguf.quants), whose implementations are written to be
bit-exact with ggml's reference quantizers. gguf-py has no K-quant quantizers (only dequantizers), so
Q4_K, Q5_K and Q6_K are implemented here, following ggml's quantize_row_q{4,5,6}_K_ref
(ggml/src/ggml-quants.c): the same scale search (make_qkx2_quants / make_qx_quants), the same 6-bit
scale/min packing and the same bit layouts. They are not guaranteed bit-exact with ggml (ggml sums in
float32 in sequence; this sums in float64), but every block they write is a valid block of that type
and gguf.quants.dequantize reads it back (checked in make_test_models.py --check).

Block layouts (QK_K = 256, K_SCALE_SIZE = 12, all little-endian, ggml_half = IEEE fp16):

  block_q8_0 (34 B / 32 w):  half d; int8 qs[32];                       w = d * q
  block_q4_0 (18 B / 32 w):  half d; uint8 qs[16];                      w = d * (q - 8)
                             q of weight j: j < 16 -> qs[j] & 0xF, else qs[j-16] >> 4
  block_q4_1 (20 B / 32 w):  half d; half m; uint8 qs[16];              w = d * q + m (same nibbles)
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


def _make_qkx2_quants(x: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """Vectorised make_qkx2_quants over rows of x (n, 32). Returns (scale, min) with min >= 0,
    meaning w ~= scale * q - min."""
    x = x.astype(np.float64)
    av_x = np.sqrt((x * x).mean(axis=1, keepdims=True))
    w = av_x + np.abs(x)
    mn = np.minimum(x.min(axis=1), 0.0)
    mx = x.max(axis=1)
    sum_w = w.sum(axis=1)
    sum_x = (w * x).sum(axis=1)
    rng = mx - mn
    flat = rng == 0
    rng_s = np.where(flat, 1.0, rng)

    iscale = nmax / rng_s
    scale = 1.0 / iscale
    L = np.clip(np.rint(iscale[:, None] * (x - mn[:, None])), 0, nmax)
    best_err = (w * (scale[:, None] * L + mn[:, None] - x) ** 2).sum(axis=1)
    best_scale = scale.copy()
    best_min = mn.copy()
    for i in range(nstep + 1):
        iscale = (rmin + rdelta * i + nmax) / rng_s
        l = np.clip(np.rint(iscale[:, None] * (x - mn[:, None])), 0, nmax)
        sum_l = (w * l).sum(axis=1)
        sum_l2 = (w * l * l).sum(axis=1)
        sum_xl = (w * l * x).sum(axis=1)
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        D_s = np.where(ok, D, 1.0)
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / D_s
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D_s
        pos = this_min > 0
        this_min = np.where(pos, 0.0, this_min)
        this_scale = np.where(pos, sum_xl / np.where(sum_l2 > 0, sum_l2, 1.0), this_scale)
        cur = (w * (this_scale[:, None] * l + this_min[:, None] - x) ** 2).sum(axis=1)
        upd = ok & (cur < best_err)
        best_err = np.where(upd, cur, best_err)
        best_scale = np.where(upd, this_scale, best_scale)
        best_min = np.where(upd, this_min, best_min)
    best_scale = np.where(flat, 0.0, best_scale)
    return best_scale.astype(np.float32), (-best_min).astype(np.float32)


def _quantize_k_scale_min(blocks: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """Shared part of Q4_K and Q5_K: per-sub-block scale/min search, 6-bit quantization of the
    scales and mins against the super-block d/dmin, and the final integer weights."""
    nb = blocks.shape[0]
    sub = blocks.reshape(nb * 8, 32)
    scales, mins = _make_qkx2_quants(sub, nmax, rmin, rdelta, nstep)
    scales = scales.reshape(nb, 8)
    mins = mins.reshape(nb, 8)
    max_scale = np.maximum(scales.max(axis=1), 0.0)
    max_min = np.maximum(mins.max(axis=1), 0.0)
    inv_scale = np.where(max_scale > 0, np.float32(63.0) / np.where(max_scale > 0, max_scale, 1), 0)
    inv_min = np.where(max_min > 0, np.float32(63.0) / np.where(max_min > 0, max_min, 1), 0)
    ls = np.clip(np.rint(inv_scale[:, None] * scales), 0, 63).astype(np.uint8)
    lm = np.clip(np.rint(inv_min[:, None] * mins), 0, 63).astype(np.uint8)
    d_bytes, d = _f16_roundtrip(max_scale / np.float32(63.0))
    dmin_bytes, dmin = _f16_roundtrip(max_min / np.float32(63.0))

    packed = np.zeros((nb, 12), dtype=np.uint8)
    packed[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)

    d_eff = (d[:, None] * ls.astype(np.float32)).astype(np.float32)  # (nb, 8)
    dm_eff = (dmin[:, None] * lm.astype(np.float32)).astype(np.float32)
    x = blocks.reshape(nb, 8, 32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint((x + dm_eff[:, :, None]) / d_eff[:, :, None])
    q = np.where(d_eff[:, :, None] == 0, 0, q)
    q = np.clip(q, 0, nmax).astype(np.uint8).reshape(nb, QK_K)
    return d_bytes, dmin_bytes, packed, q


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


def _make_qx_quants_rmse1(x: np.ndarray, nmax: int) -> np.ndarray:
    """Vectorised make_qx_quants(n, nmax, x, L, rmse_type=1, NULL) over rows of x; returns scale
    (signed) per row."""
    x = x.astype(np.float64)
    idx = np.abs(x).argmax(axis=1)
    mx = np.take_along_axis(x, idx[:, None], axis=1)[:, 0]
    zero = np.abs(mx) < GROUP_MAX_EPS
    mx_s = np.where(zero, 1.0, mx)
    w = x * x

    def fit(iscale):
        l = np.clip(np.rint(iscale[:, None] * x), -nmax, nmax - 1)
        return (w * x * l).sum(axis=1), (w * l * l).sum(axis=1)

    sumlx, suml2 = fit(-nmax / mx_s)
    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, 1), 0.0)
    best = scale * sumlx
    for i in range(-9, 10):
        if i == 0:
            continue
        sumlx, suml2 = fit(-(nmax + 0.1 * i) / mx_s)
        upd = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        new_scale = sumlx / np.where(suml2 > 0, suml2, 1)
        scale = np.where(upd, new_scale, scale)
        best = np.where(upd, new_scale * sumlx, best)
    return np.where(zero, 0.0, scale).astype(np.float32)


def quantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    """blocks: (nb, 256) float32 -> (nb, 210) uint8."""
    nb = blocks.shape[0]
    scales = _make_qx_quants_rmse1(blocks.reshape(nb * 16, 16), 32).reshape(nb, 16)
    imax = np.abs(scales).argmax(axis=1)  # first maximum, as ggml's strict '>'
    max_scale = np.take_along_axis(scales, imax[:, None], axis=1)[:, 0]
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    iscale = np.where(zero, 0, np.float32(-128.0) / np.where(zero, 1, max_scale)).astype(np.float32)
    with np.errstate(divide="ignore"):
        d_bytes, d = _f16_roundtrip(np.where(zero, 0, np.float32(1.0) / iscale))
    sq = np.minimum(127, np.rint(iscale[:, None] * scales)).astype(np.int8)
    d_eff = (d[:, None] * sq.astype(np.float32)).astype(np.float32)
    x = blocks.reshape(nb, 16, 16)
    with np.errstate(divide="ignore", invalid="ignore"):
        l = np.rint(x / d_eff[:, :, None])
    l = np.where(d_eff[:, :, None] == 0, 0, l)
    L = (np.clip(l, -32, 31) + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # (nb, half, quarter, l)
    ql = np.empty((nb, 2, 2, 32), dtype=np.uint8)
    ql[:, :, 0, :] = (L[:, :, 0, :] & 0xF) | ((L[:, :, 2, :] & 0xF) << 4)
    ql[:, :, 1, :] = (L[:, :, 1, :] & 0xF) | ((L[:, :, 3, :] & 0xF) << 4)
    qh = ((L[:, :, 0, :] >> 4) | ((L[:, :, 1, :] >> 4) << 2) | ((L[:, :, 2, :] >> 4) << 4)
          | ((L[:, :, 3, :] >> 4) << 6))
    out = np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sq.view(np.uint8), d_bytes],
                         axis=1)
    out[zero] = 0
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
    if qtype in (QT.BF16, QT.Q8_0, QT.Q4_0, QT.Q4_1):
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
