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
 * Blocking: a query's scores are formed eight keys at a time, each key's lanes in a register,
 * and the eight registers reduced together into one register of scores (hsum8: the reference's
 * reduction order with a transpose-like shuffle instead of eight horizontal sums). Both passes
 * go over the keys in blocks of KB, every query of the task over one block before the next, so
 * a block of K or V is read from L1 by all of them; V's accumulators wait in the output row
 * between blocks (a store and a load: exact). The scores of the task's queries live in the
 * thread's attention scratch between the passes. Measured on Whisper tiny.en's encoder (1500 x
 * 1500, D 64, one thread): 2.2 s per window before these two changes, 1.6 s after.
 *
 * Build: functions carry target("avx2,fma") so the file compiles with baseline flags; the
 * backend calls them only after rill__cpu_has_avx2(). The vector exp is cpu_avx2.c's
 * (avx2_expf.h, one definition for both files).
 */
#include <math.h>
#include <string.h>

#include "encdec_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include "avx2_expf.h"

#define AVX2   __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
/* Loops over the eight keys (or eight V chunks) must be fully unrolled so that their
 * accumulators live in registers (GCC -O2 keeps an array of them on the stack otherwise). */
#define UNROLL8 _Pragma("GCC unroll 8")

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

/* hsum_a of eight lane registers at once: out[j] = rill__hsum_a(a[j]). The halves are added
 * (t_i = x_i + x_{i+4}) for a[j] and a[j+4] together, then (t0 + t2) and (t1 + t3) by a
 * shuffle and an add, then their sum by hadd: the reference's order, one register of 8 scores. */
INLINE AVX2 __m256 hsum8(const __m256 a[8]) {
    __m256 p[4];
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        /* [t(a_j) | t(a_{j+4})], t = lo + hi */
        p[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[j], a[j + 4], 0x20),
                             _mm256_permute2f128_ps(a[j], a[j + 4], 0x31));
    }
    /* per 128-bit lane: [t0 + t2, t1 + t3] of two keys */
    const __m256 s01 =
        _mm256_add_ps(_mm256_shuffle_ps(p[0], p[1], 0x44), _mm256_shuffle_ps(p[0], p[1], 0xEE));
    const __m256 s23 =
        _mm256_add_ps(_mm256_shuffle_ps(p[2], p[3], 0x44), _mm256_shuffle_ps(p[2], p[3], 0xEE));
    return _mm256_hadd_ps(s01, s23);
}

/* Keys per block: the task's queries all go over one block of K (then of V) while it is in L1
 * (64 keys of 64 values: 16 KiB), instead of streaming the whole of K or V from L2 per query. */
#define KB 64

/* Scores of query qi against keys [j0, j1) into sc[j0, j1). */
INLINE AVX2 void score_block(float *sc, const float *qi, const float *k, int64_t row, int64_t j0,
                             int64_t j1, int32_t d8, int32_t d, float scale) {
    const __m256 vscale = _mm256_set1_ps(scale);
    int64_t j = j0;
    for (; j + 8 <= j1; j += 8) {
        const float *kj = k + j * row;
        __m256 acc[8];
        UNROLL8 for (int t = 0; t < 8; t++) {
            acc[t] = _mm256_setzero_ps();
        }
        for (int32_t c = 0; c < d8; c += 8) {
            const __m256 qc = _mm256_loadu_ps(qi + c);
            UNROLL8 for (int t = 0; t < 8; t++) {
                acc[t] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kj + t * row + c), acc[t]);
            }
        }
        if (d8 == d) {
            _mm256_storeu_ps(sc + j, _mm256_mul_ps(hsum8(acc), vscale));
        } else {
            for (int t = 0; t < 8; t++) {
                sc[j + t] = finish_dot(acc[t], qi, kj + t * row, d8, d) * scale;
            }
        }
    }
    for (; j < j1; j++) {
        const float *kj = k + j * row;
        __m256 acc = _mm256_setzero_ps();
        for (int32_t c = 0; c < d8; c += 8) {
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qi + c), _mm256_loadu_ps(kj + c), acc);
        }
        sc[j] = finish_dot(acc, qi, kj, d8, d) * scale;
    }
}

/* o[0, d8) += sum over keys [j0, j1) of p_j V_j[0, d8), one FMA per key and dimension in key
 * order (the accumulators go through o between blocks: exact). */
INLINE AVX2 void v_block(float *o, const float *sc, const float *v, int64_t row, int64_t j0,
                         int64_t j1, int32_t d8) {
    int32_t c0 = 0;
    for (; c0 + 64 <= d8; c0 += 64) { /* 64 dimensions: 8 accumulators in registers */
        __m256 acc[8];
        UNROLL8 for (int c = 0; c < 8; c++) {
            acc[c] = _mm256_loadu_ps(o + c0 + 8 * c);
        }
        for (int64_t j = j0; j < j1; j++) {
            const __m256 p = _mm256_set1_ps(sc[j]);
            const float *vj = v + j * row + c0;
            UNROLL8 for (int c = 0; c < 8; c++) {
                acc[c] = _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + 8 * c), acc[c]);
            }
        }
        UNROLL8 for (int c = 0; c < 8; c++) {
            _mm256_storeu_ps(o + c0 + 8 * c, acc[c]);
        }
    }
    for (; c0 < d8; c0 += 8) { /* the rest, 8 dimensions at a time */
        __m256 acc = _mm256_loadu_ps(o + c0);
        for (int64_t j = j0; j < j1; j++) {
            acc = _mm256_fmadd_ps(_mm256_set1_ps(sc[j]), _mm256_loadu_ps(v + j * row + c0), acc);
        }
        _mm256_storeu_ps(o + c0, acc);
    }
}

#define QG 16 /* queries whose 1 / sum is kept at once */

AVX2 void rill__attention_dense_rows_avx2(float *out, const float *q, const float *k,
                                          const float *v, int64_t row, int64_t n_q, int64_t n_kv,
                                          int32_t d, float *scores) {
    const float scale = 1.0f / sqrtf((float)d);
    const int32_t d8 = d & ~7;
    for (int64_t g0 = 0; g0 < n_q; g0 += QG) {
        const int64_t g1 = g0 + QG < n_q ? g0 + QG : n_q;
        /* pass 1: every query's scores, one key block at a time */
        for (int64_t j0 = 0; j0 < n_kv; j0 += KB) {
            const int64_t j1 = j0 + KB < n_kv ? j0 + KB : n_kv;
            for (int64_t i = g0; i < g1; i++) {
                score_block(scores + i * n_kv, q + i * row, k, row, j0, j1, d8, d, scale);
            }
        }
        /* weights and their sums, per query */
        float inv[QG];
        for (int64_t i = g0; i < g1; i++) {
            float *sc = scores + i * n_kv;
            float m = -INFINITY;
            for (int64_t j = 0; j < n_kv; j++) {
                m = sc[j] > m ? sc[j] : m;
            }
            const __m256 mv = _mm256_set1_ps(m);
            int64_t j = 0;
            for (; j + 8 <= n_kv; j += 8) {
                _mm256_storeu_ps(sc + j,
                                 rill__avx2_expf8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv)));
            }
            for (; j < n_kv; j++) {
                sc[j] = rill__ggml_expf(sc[j] - m);
            }
            float sum = 0.0f;
            for (j = 0; j < n_kv; j++) {
                sum += sc[j];
            }
            inv[i - g0] = 1.0f / sum;
            memset(out + i * row, 0, (size_t)d8 * sizeof(float));
        }
        /* pass 2: the weighted V, one key block at a time */
        for (int64_t j0 = 0; j0 < n_kv; j0 += KB) {
            const int64_t j1 = j0 + KB < n_kv ? j0 + KB : n_kv;
            for (int64_t i = g0; i < g1; i++) {
                v_block(out + i * row, scores + i * n_kv, v, row, j0, j1, d8);
            }
        }
        for (int64_t i = g0; i < g1; i++) {
            float *o = out + i * row;
            const float *sc = scores + i * n_kv;
            const __m256 vi = _mm256_set1_ps(inv[i - g0]);
            for (int32_t c = 0; c < d8; c += 8) {
                _mm256_storeu_ps(o + c, _mm256_mul_ps(_mm256_loadu_ps(o + c), vi));
            }
            for (int32_t c = d8; c < d; c++) {
                float a = 0.0f;
                for (int64_t j = 0; j < n_kv; j++) {
                    a = fmaf(sc[j], v[j * row + c], a);
                }
                o[c] = a * inv[i - g0];
            }
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
