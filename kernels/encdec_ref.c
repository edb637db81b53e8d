/*
 * encdec_ref.c - the reference arithmetic of the encoder-decoder ops (encdec_internal.h).
 *
 * Written for a second formulation to be able to match it: every sum has a stated order, every
 * FMA is spelled out (the kernels are built with -ffp-contract=off), the exponential is ggml's
 * (rill__ggml_expf: one lane of a vector exp, so a vector kernel computes the same values), and
 * the one library call is libm's erff in GELU, which is cheap next to the matmuls around it and
 * which the CPU backend calls too. The AVX2 dense attention (cpu_encdec.c) keeps the 8
 * dot-product lanes in one register and takes 8 exponentials at a time, so its bits are these.
 *
 * Rejected: double-precision dot products for attention (more accurate, but a vector kernel
 * could not afford them, and the oracle, CTranslate2, sums in f32 anyway); an online softmax
 * (one pass, but a rescale per block rounds differently from the two-pass form, and Whisper's
 * key counts, 1500 at most, fit the scratch).
 */
#include <math.h>
#include <string.h>

#include "encdec_internal.h"

void rill__layer_norm_row(float *y, const float *x, const float *g, const float *b, int64_t n,
                          float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)x[i];
    }
    const double mean = sum / (double)n;
    double var = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double dv = (double)x[i] - mean;
        var += dv * dv;
    }
    const double r = 1.0 / sqrt(var / (double)n + (double)eps);
    for (int64_t i = 0; i < n; i++) {
        const float z = (float)(((double)x[i] - mean) * r);
        y[i] = z * g[i] + b[i];
    }
}

float rill__gelu(float x) {
    const float e = erff(x * (float)M_SQRT1_2);
    return 0.5f * x * (1.0f + e);
}

void rill__im2col_1d_rows(float *y, const float *x, const rill_conv1d_t *cv, int64_t r0,
                          int64_t r1) {
    const int64_t C = cv->n_ch, K = cv->kernel;
    for (int64_t t = r0; t < r1; t++) {
        float *row = y + t * C * K;
        for (int64_t c = 0; c < C; c++) {
            for (int64_t j = 0; j < K; j++) {
                const int64_t s = t * cv->stride + j - cv->pad;
                row[c * K + j] =
                    s >= 0 && s < cv->n_in ? x[c * cv->ch_stride + s * cv->t_stride] : 0.0f;
            }
        }
    }
}

float rill__dense_dot(const float *q, const float *k, int32_t d) {
    float lane[8] = { 0 };
    for (int32_t i = 0; i < d; i++) {
        lane[i % 8] = fmaf(q[i], k[i], lane[i % 8]);
    }
    return rill__hsum_a(lane);
}

void rill__attention_dense_row(float *out, const float *q, const float *k, const float *v,
                               int64_t kv_stride, int64_t n_kv, int32_t d, float *scores) {
    const float scale = 1.0f / sqrtf((float)d);
    float m = -INFINITY;
    for (int64_t j = 0; j < n_kv; j++) {
        const float s = rill__dense_dot(q, k + j * kv_stride, d) * scale;
        if (scores != NULL) {
            scores[j] = s;
        }
        m = s > m ? s : m;
    }
    float acc[RILL_KV_MAX_HEAD_DIM];
    memset(acc, 0, sizeof(float) * (size_t)d);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_kv; j++) {
        const float s =
            scores != NULL ? scores[j] : rill__dense_dot(q, k + j * kv_stride, d) * scale;
        const float p = rill__ggml_expf(s - m);
        sum += p;
        const float *vj = v + j * kv_stride;
        for (int32_t i = 0; i < d; i++) {
            acc[i] = fmaf(p, vj[i], acc[i]);
        }
    }
    const float inv = 1.0f / sum;
    for (int32_t i = 0; i < d; i++) {
        out[i] = acc[i] * inv;
    }
}
