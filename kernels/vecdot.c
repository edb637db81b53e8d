/*
 * vecdot.c - reference dot products: one weight row times one act row (quant_internal.h).
 *
 * Each function spells out llama.cpp's formula for its pair of types: the products of the
 * integer codes are summed exactly per block (as the SIMD code does with maddubs/madd), and the
 * block's scales are applied once per block. Only the accumulation over blocks differs from
 * llama.cpp: here it is in double, so the result is the exact value of the formula up to one
 * final rounding. The backends compute llama.cpp's f32 sums instead (rill__dot_ggml, ggml_ref.c);
 * tests measure those against this exact value.
 *
 * The formulas (w = weight block, a = act block):
 *   q4_0 . q8_0 : sum_b d_w d_a sum_j (q_j - 8) a_j
 *   q4_1 . q8_1 : sum_b d_w d_a sum_j q_j a_j + m_w s_a     (s_a = f16(d_a sum_j a_j), stored)
 *   q5_0 . q8_0 : sum_b d_w d_a sum_j (q_j - 16) a_j          (5-bit q)
 *   q5_1 . q8_1 : sum_b d_w d_a sum_j q_j a_j + m_w s_a     (5-bit q)
 *   q8_0 . q8_0 : sum_b d_w d_a sum_j q_j a_j
 *   q4_K . q8_K : sum_B d_a (d_w sum_s sc_s sum_j q_j a_j - dmin_w sum_s m_s bsum_s)
 *   q5_K . q8_K : same with 5-bit q
 *   q6_K . q8_K : sum_B d_a d_w sum_s sc_s sum_j (q_j - 32) a_j     (16-value sub-blocks)
 *   f16/bf16/f32: sum_j w_j a_j with a_j already rounded to the weight's type
 */
#include "quant_internal.h"

static double dot_q4_0(const block_q4_0 *x, const block_q8_0 *y, int64_t nb) {
    double sum = 0.0;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0;
        for (int j = 0; j < QK4_0 / 2; j++) {
            isum += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            isum += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK4_0 / 2];
        }
        sum += (double)rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(y[i].d) * isum;
    }
    return sum;
}

static double dot_q4_1(const block_q4_1 *x, const block_q8_1 *y, int64_t nb) {
    double sum = 0.0;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0;
        for (int j = 0; j < QK4_1 / 2; j++) {
            isum += (x[i].qs[j] & 0xF) * y[i].qs[j];
            isum += (x[i].qs[j] >> 4) * y[i].qs[j + QK4_1 / 2];
        }
        sum += (double)rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(y[i].d) * isum;
        sum += (double)rill_fp16_to_f32(x[i].m) * rill_fp16_to_f32(y[i].s);
    }
    return sum;
}

static double dot_q5_0(const block_q5_0 *x, const block_q8_0 *y, int64_t nb) {
    double sum = 0.0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t q[QK5_0];
        rill__q5_codes(x[i].qs, x[i].qh, q);
        int isum = 0;
        for (int j = 0; j < QK5_0; j++) {
            isum += (q[j] - 16) * y[i].qs[j];
        }
        sum += (double)rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(y[i].d) * isum;
    }
    return sum;
}

static double dot_q5_1(const block_q5_1 *x, const block_q8_1 *y, int64_t nb) {
    double sum = 0.0;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t q[QK5_1];
        rill__q5_codes(x[i].qs, x[i].qh, q);
        int isum = 0;
        for (int j = 0; j < QK5_1; j++) {
            isum += q[j] * y[i].qs[j];
        }
        sum += (double)rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(y[i].d) * isum;
        sum += (double)rill_fp16_to_f32(x[i].m) * rill_fp16_to_f32(y[i].s);
    }
    return sum;
}

static double dot_q8_0(const block_q8_0 *x, const block_q8_0 *y, int64_t nb) {
    double sum = 0.0;
    for (int64_t i = 0; i < nb; i++) {
        int isum = 0;
        for (int j = 0; j < QK8_0; j++) {
            isum += x[i].qs[j] * y[i].qs[j];
        }
        sum += (double)rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(y[i].d) * isum;
    }
    return sum;
}

/* Shared by Q4_K and Q5_K once the codes of a super-block are unpacked into q[256]. */
static double dot_k4_block(const uint8_t q[QK_K], const uint8_t *scales, float d, float dmin,
                           const block_q8_K *y) {
    int64_t isum = 0, msum = 0;
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        rill__get_scale_min_k4(s, scales, &sc, &m);
        int sub = 0;
        for (int l = 0; l < 32; l++) {
            sub += q[32 * s + l] * y->qs[32 * s + l];
        }
        isum += (int64_t)sc * sub;
        msum += (int64_t)m * (y->bsums[2 * s] + y->bsums[2 * s + 1]);
    }
    return (double)y->d * ((double)d * (double)isum - (double)dmin * (double)msum);
}

static double dot_q4_K(const block_q4_K *x, const block_q8_K *y, int64_t nb) {
    double sum = 0.0;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++) {
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                q[64 * c + l] = x[i].qs[32 * c + l] & 0xF;
                q[64 * c + 32 + l] = x[i].qs[32 * c + l] >> 4;
            }
        }
        sum += dot_k4_block(q, x[i].scales, rill_fp16_to_f32(x[i].d), rill_fp16_to_f32(x[i].dmin),
                            &y[i]);
    }
    return sum;
}

static double dot_q5_K(const block_q5_K *x, const block_q8_K *y, int64_t nb) {
    double sum = 0.0;
    uint8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++) {
        for (int c = 0; c < 4; c++) {
            for (int l = 0; l < 32; l++) {
                const int hb = x[i].qh[l] >> (2 * c);
                q[64 * c + l] = (uint8_t)((x[i].qs[32 * c + l] & 0xF) | ((hb & 1) << 4));
                q[64 * c + 32 + l] = (uint8_t)((x[i].qs[32 * c + l] >> 4) | (((hb >> 1) & 1) << 4));
            }
        }
        sum += dot_k4_block(q, x[i].scales, rill_fp16_to_f32(x[i].d), rill_fp16_to_f32(x[i].dmin),
                            &y[i]);
    }
    return sum;
}

static double dot_q6_K(const block_q6_K *x, const block_q8_K *y, int64_t nb) {
    double sum = 0.0;
    int8_t q[QK_K];
    for (int64_t i = 0; i < nb; i++) {
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            int8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                qq[l] = (int8_t)(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
                qq[l + 32] = (int8_t)(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
                qq[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
                qq[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
            }
        }
        int64_t isum = 0;
        for (int s = 0; s < 16; s++) {
            int sub = 0;
            for (int l = 0; l < 16; l++) {
                sub += q[16 * s + l] * y[i].qs[16 * s + l];
            }
            isum += (int64_t)x[i].scales[s] * sub;
        }
        sum += (double)y[i].d * rill_fp16_to_f32(x[i].d) * (double)isum;
    }
    return sum;
}

double rill__dot_ref(rill_dtype_t wt, const void *w, const void *act, int64_t n) {
    const float *a = act;
    double sum = 0.0;
    switch (wt) {
    case RILL_DTYPE_Q4_0:
        return dot_q4_0(w, act, n / QK4_0);
    case RILL_DTYPE_Q4_1:
        return dot_q4_1(w, act, n / QK4_1);
    case RILL_DTYPE_Q5_0:
        return dot_q5_0(w, act, n / QK5_0);
    case RILL_DTYPE_Q5_1:
        return dot_q5_1(w, act, n / QK5_1);
    case RILL_DTYPE_Q8_0:
        return dot_q8_0(w, act, n / QK8_0);
    case RILL_DTYPE_Q4_K:
        return dot_q4_K(w, act, n / QK_K);
    case RILL_DTYPE_Q5_K:
        return dot_q5_K(w, act, n / QK_K);
    case RILL_DTYPE_Q6_K:
        return dot_q6_K(w, act, n / QK_K);
    case RILL_DTYPE_F16:
        for (int64_t j = 0; j < n; j++) {
            sum += (double)rill_fp16_to_f32(((const uint16_t *)w)[j]) * a[j];
        }
        return sum;
    case RILL_DTYPE_BF16:
        for (int64_t j = 0; j < n; j++) {
            sum += (double)rill_bf16_to_f32(((const uint16_t *)w)[j]) * a[j];
        }
        return sum;
    case RILL_DTYPE_F32:
        for (int64_t j = 0; j < n; j++) {
            sum += (double)((const float *)w)[j] * a[j];
        }
        return sum;
    default: /* activation-only types are never weights (callers check) */
        return 0.0;
    }
}
