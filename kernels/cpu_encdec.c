/*
 * cpu_encdec.c - the AVX2/FMA kernel of dense attention (rill_backend_attention_dense) for the
 * fast CPU backend: the one encoder-decoder op whose cost matters (Whisper's encoder attends
 * 1500 frames to 1500 frames per head and layer; the decoder's cross-attention reads 1500 keys
 * per token). LayerNorm, GELU and im2col run the reference's row functions on the backend's
 * threads (cpu_backend.c): they are a few percent of an encoder pass.
 *
 * Numerics: rill__attention_dense_row's (encdec_internal.h), bit for bit. Each score's 8 FMA
 * lanes are one register (value i of the head in lane i % 8, as the reference), reduced as
 * rill__hsum_a; the exponentials are ggml_v_expf eight at a time (its lane is rill__ggml_expf);
 * the sum of weights is a scalar f32 sum in key order; V is accumulated per dimension with one
 * FMA per key in key order, which is the reference's loop vectorized across dimensions. So the
 * thread count and the task split never change a bit (the backend-ops test checks it).
 *
 * Blocking: four queries of one head share each K row's loads in the score pass; the scores of
 * the task's queries live in the thread's attention scratch between the passes.
 *
 * Build: functions carry target("avx2,fma") so the file compiles with baseline flags; the
 * backend calls them only after rill__cpu_has_avx2(). The vector exp is the same code as
 * cpu_avx2.c's ggml_expf8, kept as a private copy so this file depends on no other kernel file.
 */
#include <math.h>
#include <string.h>

#include "encdec_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#define AVX2   __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))

/* ggml_v_expf (AVX2), operation for operation; its lane is rill__ggml_expf. */
INLINE AVX2 __m256 expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k =
        _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256 an = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 c = _mm256_cmp_ps(an, _mm256_set1_ps(126), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
            _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(c)) {
        return _mm256_fmadd_ps(j, k, k);
    }
    const __m256i g =
        _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                         _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 d = _mm256_cmp_ps(an, _mm256_set1_ps(192), _CMP_GT_OQ);
    return _mm256_or_ps(
        _mm256_and_ps(d, _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(
            d, _mm256_or_ps(_mm256_and_ps(c, _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                            _mm256_andnot_ps(c, _mm256_fmadd_ps(k, j, k)))));
}

/* rill__hsum_a of the 8 lanes: (t0 + t2) + (t1 + t3), t_i = x_i + x_{i+4}. */
INLINE AVX2 float hsum_a(__m256 x) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
    return _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
}

/* A score from its lane register: the d % 8 tail values go into lanes 0.. by scalar fmaf, as
 * the reference's loop puts them. */
INLINE AVX2 float finish_dot(__m256 acc, const float *q, const float *k, int32_t d8, int32_t d) {
    if (d8 == d) {
        return hsum_a(acc);
    }
    float lane[8];
    _mm256_storeu_ps(lane, acc);
    for (int32_t i = d8; i < d; i++) {
        lane[i % 8] = fmaf(q[i], k[i], lane[i % 8]);
    }
    return rill__hsum_a(lane);
}

#define QB 4 /* queries sharing each K row's loads */

AVX2 void rill__attention_dense_rows_avx2(float *out, const float *q, const float *k,
                                          const float *v, int64_t row, int64_t n_q, int64_t n_kv,
                                          int32_t d, float *scores) {
    const float scale = 1.0f / sqrtf((float)d);
    const int32_t d8 = d & ~7;
    /* pass 1: scores and their maxima */
    for (int64_t i0 = 0; i0 < n_q; i0 += QB) {
        const int nq = n_q - i0 < QB ? (int)(n_q - i0) : QB;
        for (int64_t j = 0; j < n_kv; j++) {
            const float *kj = k + j * row;
            __m256 acc[QB] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                               _mm256_setzero_ps() };
            for (int32_t c = 0; c < d8; c += 8) {
                const __m256 kc = _mm256_loadu_ps(kj + c);
                for (int qi = 0; qi < nq; qi++) {
                    acc[qi] =
                        _mm256_fmadd_ps(_mm256_loadu_ps(q + (i0 + qi) * row + c), kc, acc[qi]);
                }
            }
            for (int qi = 0; qi < nq; qi++) {
                scores[(i0 + qi) * n_kv + j] =
                    finish_dot(acc[qi], q + (i0 + qi) * row, kj, d8, d) * scale;
            }
        }
    }
    /* pass 2, per query: weights, their sum, the weighted V */
    for (int64_t i = 0; i < n_q; i++) {
        float *sc = scores + i * n_kv;
        float m = -INFINITY;
        for (int64_t j = 0; j < n_kv; j++) {
            m = sc[j] > m ? sc[j] : m;
        }
        const __m256 mv = _mm256_set1_ps(m);
        int64_t j = 0;
        for (; j + 8 <= n_kv; j += 8) {
            _mm256_storeu_ps(sc + j, expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv)));
        }
        for (; j < n_kv; j++) {
            sc[j] = rill__ggml_expf(sc[j] - m);
        }
        float sum = 0.0f;
        for (j = 0; j < n_kv; j++) {
            sum += sc[j];
        }
        const float inv = 1.0f / sum;
        float *o = out + i * row;
        for (int32_t c0 = 0; c0 < d8; c0 += 64) {
            const int nc = (d8 - c0) / 8 < 8 ? (d8 - c0) / 8 : 8;
            __m256 acc[8];
            for (int c = 0; c < 8; c++) {
                acc[c] = _mm256_setzero_ps();
            }
            for (j = 0; j < n_kv; j++) {
                const __m256 p = _mm256_set1_ps(sc[j]);
                const float *vj = v + j * row + c0;
                for (int c = 0; c < nc; c++) {
                    acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
                }
            }
            for (int c = 0; c < nc; c++) {
                _mm256_storeu_ps(o + c0 + 8 * c, _mm256_mul_ps(acc[c], _mm256_set1_ps(inv)));
            }
        }
        for (int32_t c = d8; c < d; c++) {
            float a = 0.0f;
            for (j = 0; j < n_kv; j++) {
                a = fmaf(sc[j], v[j * row + c], a);
            }
            o[c] = a * inv;
        }
    }
}

#else

void rill__attention_dense_rows_avx2(float *out, const float *q, const float *k, const float *v,
                                     int64_t row, int64_t n_q, int64_t n_kv, int32_t d,
                                     float *scores) {
    for (int64_t i = 0; i < n_q; i++) {
        rill__attention_dense_row(out + i * row, q + i * row, k, v, row, n_kv, d, scores);
    }
}

#endif
