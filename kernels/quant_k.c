/*
 * quant_k.c - the 256-value "K-quant" super-blocks: Q4_K, Q5_K, Q6_K (weights) and Q8_K
 * (activations of the K-quant dot products).
 *
 * Decoding follows ggml exactly (the layouts are in docs/quantization.md). Q8_K quantization is
 * ggml's quantize_row_q8_K_ref, which is also what llama.cpp runs on x86: scale -127/max of the
 * value of largest magnitude, nearest_int rounding, plus the per-16 sums the dot products use.
 *
 * The weight quantizers here are deliberately simpler than ggml's (which search for the scale and
 * min that minimise a weighted error): min/max per sub-block, then 6-bit (Q4_K/Q5_K) or 8-bit
 * (Q6_K) codes for the sub-block scales relative to one f16 super-scale, then a second pass that
 * re-rounds every value against the decoded scales. They produce valid blocks with a bounded
 * error, which is what tests need; they are not a replacement for llama-quantize.
 */
#include <math.h>
#include <string.h>

#include "quant_internal.h"

#define GROUP_MAX_EPS 1e-15f

static int clampi(int v, int lo, int hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

/* Packs 8 six-bit scales and mins into the 12 bytes read by rill__get_scale_min_k4. */
static void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t q[12]) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((ls[j] & 63) | ((ls[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((lm[j] & 63) | ((lm[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((ls[j + 4] & 0xF) | ((lm[j + 4] & 0xF) << 4));
    }
}

/* Shared by Q4_K and Q5_K: per 32-value sub-block w = d*sc*q - dmin*m with q in [0, nmax].
 * Fills L[256] with the codes and writes d, dmin and the packed scales. */
static void quantize_k4_scales(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                               uint8_t scales[12], uint8_t L[QK_K]) {
    float scale[8], minv[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float lo = 0.0f, hi = xs[0];
        for (int l = 0; l < 32; l++) {
            lo = xs[l] < lo ? xs[l] : lo;
            hi = xs[l] > hi ? xs[l] : hi;
        }
        scale[j] = hi > lo ? (hi - lo) / (float)nmax : 0.0f;
        minv[j] = -lo; /* >= 0: the offset subtracted after scaling */
        max_scale = scale[j] > max_scale ? scale[j] : max_scale;
        max_min = minv[j] > max_min ? minv[j] : max_min;
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        ls[j] = (uint8_t)clampi(rill__nearest_int(inv_scale * scale[j]), 0, 63);
        lm[j] = (uint8_t)clampi(rill__nearest_int(inv_min * minv[j]), 0, 63);
    }
    pack_scale_min_k4(ls, lm, scales);
    *d_out = rill_f32_to_fp16(max_scale / 63.f);
    *dmin_out = rill_f32_to_fp16(max_min / 63.f);
    const float d = rill_fp16_to_f32(*d_out);
    const float dmin = rill_fp16_to_f32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        rill__get_scale_min_k4(j, scales, &sc, &m);
        const float ds = d * sc;
        const float dm = dmin * m;
        for (int l = 0; l < 32; l++) {
            int q = ds != 0.0f ? rill__nearest_int((x[32 * j + l] + dm) / ds) : 0;
            L[32 * j + l] = (uint8_t)clampi(q, 0, nmax);
        }
    }
}

void rill__quantize_row_q4_K(const float *x, block_q4_K *y, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_scales(x, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int c = 0; c < 4; c++) { /* 64 values per 32 bytes: low nibbles first */
            for (int l = 0; l < 32; l++) {
                y[i].qs[32 * c + l] = (uint8_t)(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
            }
        }
    }
}

void rill__quantize_row_q5_K(const float *x, block_q5_K *y, int64_t n) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        quantize_k4_scales(x, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
                y[i].qs[32 * c + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
            }
        }
    }
}

void rill__quantize_row_q6_K(const float *x, block_q6_K *y, int64_t n) {
    int8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16], max_scale = 0.0f, max_abs_scale = 0.0f;
        for (int ib = 0; ib < 16; ib++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                if (fabsf(x[16 * ib + l]) > amax) {
                    amax = fabsf(x[16 * ib + l]);
                    max = x[16 * ib + l];
                }
            }
            scale[ib] = max / -32.f; /* the extreme value maps to -32, the widest code */
            if (fabsf(scale[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scale[ib]);
                max_scale = scale[ib];
            }
        }
        memset(&y[i], 0, sizeof y[i]);
        if (max_abs_scale < GROUP_MAX_EPS) {
            continue; /* all zero: d = 0 decodes to zeros */
        }
        const float iscale = -128.f / max_scale;
        y[i].d = rill_f32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            y[i].scales[ib] = (int8_t)clampi(rill__nearest_int(iscale * scale[ib]), -128, 127);
        }
        const float d = rill_fp16_to_f32(y[i].d);
        for (int ib = 0; ib < 16; ib++) {
            const float ds = d * y[i].scales[ib];
            for (int l = 0; l < 16; l++) {
                int q = ds != 0.0f ? rill__nearest_int(x[16 * ib + l] / ds) : 0;
                L[16 * ib + l] = (int8_t)(clampi(q, -32, 31) + 32);
            }
        }
        for (int h = 0; h < 2; h++) { /* two halves of 128 values */
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h;
            uint8_t *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) |
                                  ((Lh[l + 64] >> 4) << 4) | ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

void rill__quantize_row_q8_K(const float *x, block_q8_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]); /* ggml leaves bsums unset here; zero is what it means */
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; j++) {
            int v = rill__nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v > 127 ? 127 : v);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int l = 0; l < 16; l++) {
                sum += y[i].qs[16 * j + l];
            }
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void rill__dequantize_row_q4_K(const block_q4_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rill_fp16_to_f32(x[i].d);
        const float dmin = rill_fp16_to_f32(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int c = 0; c < 4; c++, q += 32) {
            uint8_t sc, m;
            rill__get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            rill__get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) {
                *y++ = d1 * (q[l] & 0xF) - m1;
            }
            for (int l = 0; l < 32; l++) {
                *y++ = d2 * (q[l] >> 4) - m2;
            }
        }
    }
}

void rill__dequantize_row_q5_K(const block_q5_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rill_fp16_to_f32(x[i].d);
        const float dmin = rill_fp16_to_f32(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int c = 0; c < 4; c++, ql += 32) {
            uint8_t sc, m;
            const uint8_t u1 = (uint8_t)(1u << (2 * c)), u2 = (uint8_t)(2u << (2 * c));
            rill__get_scale_min_k4(2 * c, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            rill__get_scale_min_k4(2 * c + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; l++) {
                *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            }
            for (int l = 0; l < 32; l++) {
                *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            }
        }
    }
}

void rill__dequantize_row_q6_K(const block_q6_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = rill_fp16_to_f32(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void rill__dequantize_row_q8_K(const block_q8_K *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, y += QK_K) {
        for (int j = 0; j < QK_K; j++) {
            y[j] = x[i].d * x[i].qs[j];
        }
    }
}
