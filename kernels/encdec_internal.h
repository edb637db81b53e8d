/*
 * encdec_internal.h - the arithmetic of the encoder-decoder ops (Whisper's): LayerNorm with
 * gamma and beta, GELU, the 1-D im2col of a convolution, and dense attention, stated one lane at
 * a time (encdec_ref.c) so that the reference backend, the scalar kernels and the AVX2 kernel
 * (cpu_encdec.c) all give the same bits.
 *
 * These ops have no llama.cpp counterpart that rill reproduces: their definition is rill's own,
 * written here (rill_backend.h, "Encoder-decoder ops", says what is promised). A leaf beside
 * ggml_internal.h: it includes only the public rill_backend.h and ggml_internal.h (for the
 * horizontal sum it shares). Private to kernels/ and its tests.
 *
 * Thread safety: every function is pure; any thread.
 */
#ifndef RILL_ENCDEC_INTERNAL_H
#define RILL_ENCDEC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ggml_internal.h"
#include "rill_backend.h"

/* One LayerNorm row: mean and variance of the f32 values summed in double in order (the
 * variance from the deviations to the mean, two passes), r = 1 / sqrt(var + eps) in double,
 * then y[i] = ((float)((x[i] - mean) * r) * g[i]) + b[i] in f32 (two roundings). y may equal x. */
void rill__layer_norm_row(float *y, const float *x, const float *g, const float *b, int64_t n,
                          float eps);

/* GELU, the erf form: 0.5f * x * (1 + erff(x * (float)M_SQRT1_2)), each step rounded to f32,
 * libm's erff. */
float rill__gelu(float x);

/* Rows [r0, r1) of the im2col matrix of a 1-D convolution (rill_conv1d_t): row t holds, for
 * channel c and tap j, y[t * C * K + c * K + j] = x[c * ch_stride + s * t_stride] with
 * s = t * stride + j - pad, or 0 where s falls outside [0, n_in). */
void rill__im2col_1d_rows(float *y, const float *x, const rill_conv1d_t *cv, int64_t r0,
                          int64_t r1);

/* The dot product of dense attention: value i of q and k goes into lane i % 8 by fmaf, in
 * order; the lanes are reduced with rill__hsum_a. */
float rill__dense_dot(const float *q, const float *k, int32_t d);

/* One (query, head) of dense attention (rill_backend_attention_dense): q and out are the head's
 * D values; k and v point at the head's D values of key 0, key j being kv_stride floats further.
 *   s_j = rill__dense_dot(q, K_j) * (1 / sqrtf(D))     (the scale rounded to f32 once)
 *   m   = max_j s_j;  p_j = rill__ggml_expf(s_j - m);  S = sum of p_j in f32, in order
 *   acc[d] = fmaf(p_j, V_j[d], acc[d]) in order of j from 0;  out[d] = acc[d] * (1 / S)
 * scores: n_kv floats of scratch keeping s_j between the passes, or NULL to compute them again
 * (the same bits either way). Finite inputs assumed. */
void rill__attention_dense_row(float *out, const float *q, const float *k, const float *v,
                               int64_t kv_stride, int64_t n_kv, int32_t d, float *scores);

/* The AVX2/FMA form of rill__attention_dense_row (cpu_encdec.c), same bits: n_q queries of one
 * head, query i's q and out at q + i * row, out + i * row; scores: n_q * n_kv floats of
 * scratch. Only call when rill__cpu_has_avx2(); on other targets it is the scalar loop. */
void rill__attention_dense_rows_avx2(float *out, const float *q, const float *k, const float *v,
                                     int64_t row, int64_t n_q, int64_t n_kv, int32_t d,
                                     float *scores);

#endif /* RILL_ENCDEC_INTERNAL_H */
