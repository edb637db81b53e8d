/*
 * quant.c - f16/bf16 conversions, the 32-value block formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 * Q8_1), and the row dispatch of rill_quant.h (K-quants live in quant_k.c).
 *
 * Design: plain C that states the arithmetic once. The activation quantizers (Q8_0, Q8_1) follow
 * the AVX2 code path of llama.cpp rather than ggml's "_ref" functions, because that is what the
 * oracle runs on x86: scale id = 127/amax (not 1/d) and round-half-to-even (not roundf). The
 * AVX2 versions in cpu_avx2.c must produce the same bytes; tests compare them.
 *
 * The f16 conversion is integer code (no FPU tricks), written to agree with VCVTPS2PH bit for bit,
 * NaN payloads included, so the scalar and F16C paths of the CPU backend store identical KV
 * caches. Rejected: a 64K-entry lookup table for f16 -> f32 (256 KiB of cache for a conversion
 * that the fast path does with F16C anyway).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant_internal.h"

/* ---- f16 / bf16 ----------------------------------------------------------------------------- */

float rill_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        memcpy(&bits, &v, sizeof bits);
        bits |= sign;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t rill_f32_to_fp16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) { /* NaN: quiet it, keep the top payload bits (as F16C does) */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    if (a >= 0x477ff000u) { /* rounds to >= 65520: infinity (also +-inf itself) */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) { /* normal half: round at bit 13, ties to even; carry may bump exp */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    }
    if (a < 0x33000000u) { /* below 2^-25: rounds to zero */
        return sign;
    }
    /* subnormal half: value = m * 2^(e - 150); result = round(value / 2^-24) */
    uint32_t e = a >> 23;
    uint32_t m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) {
        q++; /* may become 0x400, the smallest normal: still the right encoding */
    }
    return (uint16_t)(sign | q);
}

float rill_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t rill_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 64u); /* NaN: force quiet */
    }
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

/* ---- type properties ------------------------------------------------------------------------ */

int rill_dtype_vec_dot_type(rill_dtype_t t) {
    switch (t) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
    case RILL_DTYPE_BF16:
    case RILL_DTYPE_Q8_0:
    case RILL_DTYPE_Q8_1:
    case RILL_DTYPE_Q8_K:
        return (int)t;
    case RILL_DTYPE_Q4_0:
    case RILL_DTYPE_Q5_0:
        return RILL_DTYPE_Q8_0;
    case RILL_DTYPE_Q4_1:
    case RILL_DTYPE_Q5_1:
        return RILL_DTYPE_Q8_1;
    case RILL_DTYPE_Q4_K:
    case RILL_DTYPE_Q5_K:
    case RILL_DTYPE_Q6_K:
        return RILL_DTYPE_Q8_K;
    }
    return -1;
}

bool rill_dtype_is_weight(rill_dtype_t t) {
    return rill_dtype_valid((int)t) && t != RILL_DTYPE_Q8_1 && t != RILL_DTYPE_Q8_K;
}

int64_t rill__act_row_bytes(rill_dtype_t wt, int64_t n) {
    if (!rill_dtype_is_weight(wt) || rill_dtype_row_bytes(wt, n) < 0) {
        return -1;
    }
    int vt = rill_dtype_vec_dot_type(wt);
    if (vt == RILL_DTYPE_F16 || vt == RILL_DTYPE_BF16 || vt == RILL_DTYPE_F32) {
        return n * (int64_t)sizeof(float);
    }
    return rill_dtype_row_bytes((rill_dtype_t)vt, n);
}

/* ---- 32-value blocks ------------------------------------------------------------------------ */

static float block_amax(const float *x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; j++) {
        amax = fmaxf(amax, fabsf(x[j]));
    }
    return amax;
}

void rill__quantize_row_q8_0(const float *x, block_q8_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0) {
        const float amax = block_amax(x, QK8_0);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        y[i].d = rill_f32_to_fp16(d);
        for (int j = 0; j < QK8_0; j++) {
            y[i].qs[j] = (int8_t)rill__nearest_int(x[j] * id);
        }
    }
}

void rill__quantize_row_q8_1(const float *x, block_q8_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const float amax = block_amax(x, QK8_1);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        y[i].d = rill_f32_to_fp16(d);
        for (int j = 0; j < QK8_1; j++) {
            y[i].qs[j] = (int8_t)rill__nearest_int(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = rill_f32_to_fp16(d * (float)sum); /* d unrounded, as llama.cpp does */
    }
}

/* ggml's (int8_t)(x * id + 8.5f) of a Q4_0 code, for every input: a finite one lies in
 * [0, 16.5] and truncates the same; a NaN (non-finite input rows, which a KV cache may be fed)
 * gives 0, what the x86 conversion gives, without the cast's undefined behaviour. */
static int q4_0_code(float f) {
    return f >= 0.0f && f < 127.0f ? (int)f : 0;
}

/* ggml's quantize_row_q4_0_ref: the scale is the value of largest magnitude over -8. */
static void quantize_row_q4_0(const float *x, block_q4_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK4_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rill_f32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            int q0 = q4_0_code(x[j] * id + 8.5f);
            int q1 = q4_0_code(x[j + QK4_0 / 2] * id + 8.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* ggml's quantize_row_q4_1_ref: 16 levels between the block's min and max. */
static void quantize_row_q4_1(const float *x, block_q4_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK4_1; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = rill_f32_to_fp16(d);
        y[i].m = rill_f32_to_fp16(min);
        for (int j = 0; j < QK4_1 / 2; j++) {
            int q0 = (int8_t)((x[j] - min) * id + 0.5f);
            int q1 = (int8_t)((x[j + QK4_1 / 2] - min) * id + 0.5f);
            q0 = q0 > 15 ? 15 : q0;
            q1 = q1 > 15 ? 15 : q1;
            y[i].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* The 32 five-bit codes q[] of a block into its nibbles and high bits. */
static void pack_q5(const uint8_t q[32], uint8_t qs[16], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)(q[j] >> 4) << j;
        h |= (uint32_t)(q[j + 16] >> 4) << (j + 16);
    }
    for (int b = 0; b < 4; b++) {
        qh[b] = (uint8_t)(h >> (8 * b)); /* little-endian, as ggml stores it */
    }
}

/* ggml's quantize_row_q5_0_ref: as Q4_0 with 32 levels, the extreme value mapping to -16. */
static void quantize_row_q5_0(const float *x, block_q5_0 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK5_0; j++) {
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        const float d = max / -16;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[QK5_0];
        for (int j = 0; j < QK5_0; j++) {
            const int v = (int8_t)(x[j] * id + 16.5f);
            q[j] = (uint8_t)(v > 31 ? 31 : v);
        }
        y[i].d = rill_f32_to_fp16(d);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

/* ggml's quantize_row_q5_1_ref: 32 levels between the block's min and max. */
static void quantize_row_q5_1(const float *x, block_q5_1 *y, int64_t n) {
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < QK5_1; j++) {
            min = x[j] < min ? x[j] : min;
            max = x[j] > max ? x[j] : max;
        }
        const float d = (max - min) / 31;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t q[QK5_1];
        for (int j = 0; j < QK5_1; j++) {
            /* (x - min) * id lies in [0, 31 + a rounding]: no clamp needed, as in ggml */
            q[j] = (uint8_t)((x[j] - min) * id + 0.5f);
        }
        y[i].d = rill_f32_to_fp16(d);
        y[i].m = rill_f32_to_fp16(min);
        pack_q5(q, y[i].qs, y[i].qh);
    }
}

static void dequantize_row_q4_0(const block_q4_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float d = rill_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[j + QK4_0 / 2] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequantize_row_q4_1(const block_q4_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK4_1; i++, y += QK4_1) {
        const float d = rill_fp16_to_f32(x[i].d);
        const float m = rill_fp16_to_f32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[j + QK4_1 / 2] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void dequantize_row_q5_0(const block_q5_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK5_0; i++, y += QK5_0) {
        const float d = rill_fp16_to_f32(x[i].d);
        uint8_t q[QK5_0];
        rill__q5_codes(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK5_0; j++) {
            y[j] = (float)(q[j] - 16) * d;
        }
    }
}

static void dequantize_row_q5_1(const block_q5_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK5_1; i++, y += QK5_1) {
        const float d = rill_fp16_to_f32(x[i].d);
        const float m = rill_fp16_to_f32(x[i].m);
        uint8_t q[QK5_1];
        rill__q5_codes(x[i].qs, x[i].qh, q);
        for (int j = 0; j < QK5_1; j++) {
            y[j] = (float)q[j] * d + m;
        }
    }
}

static void dequantize_row_q8_0(const block_q8_0 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float d = rill_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_0; j++) {
            y[j] = (float)x[i].qs[j] * d;
        }
    }
}

static void dequantize_row_q8_1(const block_q8_1 *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n / QK8_1; i++, y += QK8_1) {
        const float d = rill_fp16_to_f32(x[i].d);
        for (int j = 0; j < QK8_1; j++) {
            y[j] = (float)x[i].qs[j] * d;
        }
    }
}

/* ---- row dispatch --------------------------------------------------------------------------- */

static bool row_args_ok(rill_dtype_t t, const void *a, const void *b, int64_t n) {
    return a != NULL && b != NULL && rill_dtype_valid((int)t) && rill_dtype_row_bytes(t, n) >= 0;
}

rill_err_t rill_dequantize_row(rill_dtype_t t, const void *src, float *dst, int64_t n) {
    if (!row_args_ok(t, src, dst, n)) {
        return RILL_EINVAL;
    }
    const uint16_t *h = src;
    switch (t) {
    case RILL_DTYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case RILL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            dst[i] = rill_fp16_to_f32(h[i]);
        }
        break;
    case RILL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            dst[i] = rill_bf16_to_f32(h[i]);
        }
        break;
    case RILL_DTYPE_Q4_0:
        dequantize_row_q4_0(src, dst, n);
        break;
    case RILL_DTYPE_Q4_1:
        dequantize_row_q4_1(src, dst, n);
        break;
    case RILL_DTYPE_Q5_0:
        dequantize_row_q5_0(src, dst, n);
        break;
    case RILL_DTYPE_Q5_1:
        dequantize_row_q5_1(src, dst, n);
        break;
    case RILL_DTYPE_Q8_0:
        dequantize_row_q8_0(src, dst, n);
        break;
    case RILL_DTYPE_Q8_1:
        dequantize_row_q8_1(src, dst, n);
        break;
    case RILL_DTYPE_Q4_K:
        rill__dequantize_row_q4_K(src, dst, n);
        break;
    case RILL_DTYPE_Q5_K:
        rill__dequantize_row_q5_K(src, dst, n);
        break;
    case RILL_DTYPE_Q6_K:
        rill__dequantize_row_q6_K(src, dst, n);
        break;
    case RILL_DTYPE_Q8_K:
        rill__dequantize_row_q8_K(src, dst, n);
        break;
    }
    return RILL_OK;
}

rill_err_t rill_quantize_row(rill_dtype_t t, const float *src, void *dst, int64_t n) {
    if (!row_args_ok(t, src, dst, n)) {
        return RILL_EINVAL;
    }
    uint16_t *h = dst;
    switch (t) {
    case RILL_DTYPE_F32:
        memmove(dst, src, (size_t)n * sizeof(float));
        break;
    case RILL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            h[i] = rill_f32_to_fp16(src[i]);
        }
        break;
    case RILL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            h[i] = rill_f32_to_bf16(src[i]);
        }
        break;
    case RILL_DTYPE_Q4_0:
        quantize_row_q4_0(src, dst, n);
        break;
    case RILL_DTYPE_Q4_1:
        quantize_row_q4_1(src, dst, n);
        break;
    case RILL_DTYPE_Q5_0:
        quantize_row_q5_0(src, dst, n);
        break;
    case RILL_DTYPE_Q5_1:
        quantize_row_q5_1(src, dst, n);
        break;
    case RILL_DTYPE_Q8_0:
        rill__quantize_row_q8_0(src, dst, n);
        break;
    case RILL_DTYPE_Q8_1:
        rill__quantize_row_q8_1(src, dst, n);
        break;
    case RILL_DTYPE_Q4_K:
        rill__quantize_row_q4_K(src, dst, n);
        break;
    case RILL_DTYPE_Q5_K:
        rill__quantize_row_q5_K(src, dst, n);
        break;
    case RILL_DTYPE_Q6_K:
        rill__quantize_row_q6_K(src, dst, n);
        break;
    case RILL_DTYPE_Q8_K:
        rill__quantize_row_q8_K(src, dst, n);
        break;
    }
    return RILL_OK;
}

void rill__act_quantize_ref(rill_dtype_t wt, const float *x, void *act, int64_t n) {
    float *f = act;
    switch (rill_dtype_vec_dot_type(wt)) {
    case RILL_DTYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            f[i] = rill_fp16_to_f32(rill_f32_to_fp16(x[i]));
        }
        break;
    case RILL_DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            f[i] = rill_bf16_to_f32(rill_f32_to_bf16(x[i]));
        }
        break;
    case RILL_DTYPE_Q8_0:
        rill__quantize_row_q8_0(x, act, n);
        break;
    case RILL_DTYPE_Q8_1:
        rill__quantize_row_q8_1(x, act, n);
        break;
    case RILL_DTYPE_Q8_K:
        rill__quantize_row_q8_K(x, act, n);
        break;
    default: /* F32 */
        if ((const void *)x != act) {
            memmove(act, x, (size_t)n * sizeof(float));
        }
        break;
    }
}
