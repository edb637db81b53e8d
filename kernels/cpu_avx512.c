/*
 * cpu_avx512.c - the AVX-512 table of the fast CPU backend: the AVX2 table with the flash
 * attention kernel in 512-bit vectors.
 *
 * Why only flash attention: on a long context the attention of a question's tokens costs more
 * than its matmuls (SmolLM2-135M at 4096 cached slots: ~2.5 ms a token against ~1.3 ms), and
 * every one of its operations is an f32 dot, exp or FMA whose bits do not depend on the vector
 * width. The matmul kernels reproduce llama.cpp's AVX2 integer sums and stay as they are.
 *
 * Build: every function carries target("avx512f,avx512vl,avx512bw,avx2,fma,f16c"), so the file
 * compiles with baseline flags; cpu_backend.c installs the table only after
 * rill__cpu_has_avx512() (CPUID for AVX-512 F/VL/BW, XGETBV for the opmask and ZMM state).
 *
 * Numerics: the bits of rill__attention_head_flash_ref (rill_backend.h, Numerics), the same as
 * the AVX2 kernel's, operation for operation:
 *   - a score is ggml_vec_dot_f32's four 8-lane accumulators: with q held in registers, one
 *     zmm carries accumulators 0 and 1 (dims d..d+16 of each 32) and another 2 and 3 (d+16..),
 *     so (a0 + a2) + (a1 + a3) is one zmm add and one add of its halves; the eight rows of a
 *     group then take the AVX2 kernel's transposed two-hadd reduction;
 *   - ggml_expf8's steps on 16 lanes (masks in place of the blends: the same value per lane);
 *   - the weight sum one slot at a time in slot order, and acc[d] = fma(p_j, V_j[d], acc[d])
 *     per dim in slot order, 16 dims per vector.
 * head_dim must be a multiple of 32 (every model rill runs); other tasks go to the AVX2 kernel.
 */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__)

#include <cpuid.h>
#include <immintrin.h>

#define AVX512  __attribute__((target("avx512f,avx512vl,avx512bw,avx2,fma,f16c")))
#define INLINE  static inline __attribute__((always_inline))
#define FLASH_B RILL_ATTN_FLASH_BLOCK

bool rill__cpu_has_avx512(void) {
    if (!rill__cpu_has_avx2() || __get_cpuid_max(0, NULL) < 7) {
        return false;
    }
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    const bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31);
    if (!(f && bw && vl)) {
        return false;
    }
    uint32_t xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    return (xlo & 0xe6u) == 0xe6u; /* SSE, AVX, opmask, ZMM0-15 upper halves, ZMM16-31 */
}

static _Alignas(64) const float zero_row[RILL_KV_MAX_HEAD_DIM];

/* ggml_expf8 (cpu_avx2.c) on 16 lanes: the same operations, masks in place of its blends. */
INLINE AVX512 __m512 expf16(__m512 x) {
    const __m512 r = _mm512_set1_ps(0x1.8p23f);
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
    const __m512 n = _mm512_sub_ps(z, r);
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                      _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512i e = _mm512_slli_epi32(_mm512_castps_si512(z), 23);
    const __m512 k =
        _mm512_castsi512_ps(_mm512_add_epi32(e, _mm512_castps_si512(_mm512_set1_ps(1))));
    const __m512 an = _mm512_castsi512_ps(
        _mm512_andnot_si512(_mm512_set1_epi32((int)0x80000000u), _mm512_castps_si512(n)));
    const __mmask16 c = _mm512_cmp_ps_mask(an, _mm512_set1_ps(126), _CMP_GT_OQ);
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(
            _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
            _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_mul_ps(_mm512_set1_ps(0x1.ffffecp-1f), b));
    const __m512 plain = _mm512_fmadd_ps(k, j, k);
    if (c == 0) {
        return plain;
    }
    const __mmask16 le = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
    const __m512i g = _mm512_maskz_mov_epi32(le, _mm512_set1_epi32((int)0x82000000u));
    const __m512 s1 = _mm512_castsi512_ps(_mm512_add_epi32(g, _mm512_set1_epi32(0x7f000000)));
    const __m512 s2 = _mm512_castsi512_ps(_mm512_sub_epi32(e, g));
    const __mmask16 d = _mm512_cmp_ps_mask(an, _mm512_set1_ps(192), _CMP_GT_OQ);
    const __m512 far = _mm512_mask_blend_ps(
        c, plain, _mm512_mul_ps(_mm512_fmadd_ps(s2, j, s2), s1)); /* |n| > 126 */
    return _mm512_mask_blend_ps(d, far, _mm512_mul_ps(s1, s1));   /* |n| > 192 */
}

/* [lo(x) + hi(x) | lo(y) + hi(y)]: the first step of GGML_F32x8_REDUCE's tail, two rows. */
INLINE AVX512 __m256 halves2(__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}

/* One row's (a0 + a2) + (a1 + a3) of ggml_vec_dot_f32 over D dims (D % 32 == 0) against q in
 * registers (qv[2i], qv[2i + 1]: dims 32i..32i+16, 32i+16..32i+32). */
INLINE AVX512 __m256 dot_row(const float *k, const __m512 *qv, const int32_t D) {
    __m512 lo = _mm512_fmadd_ps(_mm512_loadu_ps(k), qv[0], _mm512_setzero_ps());
    __m512 hi = _mm512_fmadd_ps(_mm512_loadu_ps(k + 16), qv[1], _mm512_setzero_ps());
    for (int32_t d = 32; d < D; d += 32) {
        lo = _mm512_fmadd_ps(_mm512_loadu_ps(k + d), qv[d / 16], lo);
        hi = _mm512_fmadd_ps(_mm512_loadu_ps(k + d + 16), qv[d / 16 + 1], hi);
    }
    const __m512 s = _mm512_add_ps(lo, hi); /* lanes 0-7: a0 + a2, lanes 8-15: a1 + a3 */
    return _mm256_add_ps(_mm512_castps512_ps256(s),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
}

/* The scores of 8 rows: per row dot_row, then (t0 + t1) + (t2 + t3) for all 8 at once. */
INLINE AVX512 __m256 scores8(const float *const *k, const __m512 *qv, const int32_t D) {
    const __m256 h0 = _mm256_hadd_ps(halves2(dot_row(k[0], qv, D), dot_row(k[1], qv, D)),
                                     halves2(dot_row(k[2], qv, D), dot_row(k[3], qv, D)));
    const __m256 h1 = _mm256_hadd_ps(halves2(dot_row(k[4], qv, D), dot_row(k[5], qv, D)),
                                     halves2(dot_row(k[6], qv, D), dot_row(k[7], qv, D)));
    return _mm256_permutevar8x32_ps(_mm256_hadd_ps(h0, h1),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One V row's 16 dims from d (f16 or f32: a constant after inlining). */
INLINE AVX512 __m512 v16(const void *row, int32_t d, const bool f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + d)))
               : _mm512_loadu_ps((const float *)row + d);
}

/* acc (D dims) = (rescale ? acc * c : acc), then acc[d] = fma(p[i], V_i[d], acc[d]) for the
 * slots i < n in order: 64 dims at a time in four registers, a last 32 in two; V_i at vr[i]. */
INLINE AVX512 void v_step(float *acc, const void *const *vr, const float *p, int32_t n,
                          bool rescale, float c, const int32_t D, const bool f16) {
    const __m512 cv = _mm512_set1_ps(rescale ? c : 1.0f); /* x * 1 is exact */
    int32_t d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        __m512 a0 = _mm512_mul_ps(_mm512_load_ps(acc + d0), cv);
        __m512 a1 = _mm512_mul_ps(_mm512_load_ps(acc + d0 + 16), cv);
        __m512 a2 = _mm512_mul_ps(_mm512_load_ps(acc + d0 + 32), cv);
        __m512 a3 = _mm512_mul_ps(_mm512_load_ps(acc + d0 + 48), cv);
        for (int32_t i = 0; i < n; i++) {
            const __m512 pj = _mm512_set1_ps(p[i]);
            a0 = _mm512_fmadd_ps(pj, v16(vr[i], d0, f16), a0);
            a1 = _mm512_fmadd_ps(pj, v16(vr[i], d0 + 16, f16), a1);
            a2 = _mm512_fmadd_ps(pj, v16(vr[i], d0 + 32, f16), a2);
            a3 = _mm512_fmadd_ps(pj, v16(vr[i], d0 + 48, f16), a3);
        }
        _mm512_store_ps(acc + d0, a0), _mm512_store_ps(acc + d0 + 16, a1);
        _mm512_store_ps(acc + d0 + 32, a2), _mm512_store_ps(acc + d0 + 48, a3);
    }
    if (d0 < D) { /* D % 64 == 32 */
        __m512 a0 = _mm512_mul_ps(_mm512_load_ps(acc + d0), cv);
        __m512 a1 = _mm512_mul_ps(_mm512_load_ps(acc + d0 + 16), cv);
        for (int32_t i = 0; i < n; i++) {
            const __m512 pj = _mm512_set1_ps(p[i]);
            a0 = _mm512_fmadd_ps(pj, v16(vr[i], d0, f16), a0);
            a1 = _mm512_fmadd_ps(pj, v16(vr[i], d0 + 16, f16), a1);
        }
        _mm512_store_ps(acc + d0, a0), _mm512_store_ps(acc + d0 + 16, a1);
    }
}

/* Floats of scratch a run of nq queries needs: per query q and acc (D each), one block's
 * scores (FLASH_B) and m, S (padded to 16: every part stays 64-byte aligned); for an F16 pool
 * the block's K and V rows in f32. */
static size_t run_floats(int32_t nq, int32_t D, bool f16) {
    return (size_t)nq * (size_t)(2 * D + FLASH_B + 16) + (f16 ? 2u * FLASH_B * (size_t)D : 0u);
}

/* Tokens [t0, t0 + n_t) x query heads [h0, h0 + nh) of a task; the caller checked the scratch.
 * D is a constant after inlining for the common head sizes. */
INLINE AVX512 void run(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0, int32_t nh,
                       const int32_t D) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t P = kv->page_size;
    const bool f16 = kv->k_dtype == RILL_DTYPE_F16;
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)D));
    const int32_t nq = n_t * nh; /* query (t, i) is r = (t - t0) * nh + i */
    int32_t n_kv_max = 0;
    for (int32_t t = t0; t < t0 + n_t; t++) {
        n_kv_max = a->tok[t].n_kv > n_kv_max ? a->tok[t].n_kv : n_kv_max;
    }
    float *const qf = a->scratch, *const acc = qf + (size_t)nq * D;
    float *const pw = acc + (size_t)nq * D, *const ms = pw + (size_t)nq * FLASH_B;
    float *const kbuf = ms + (size_t)nq * 16, *const vbuf = kbuf + (size_t)FLASH_B * D;
    const bool v_copy = f16 && nq > 1, v_f16 = f16 && !v_copy;
    for (int32_t r = 0; r < nq; r++) {
        const float *qs = a->q + (size_t)(t0 + r / nh) * a->tok_stride + (size_t)(h0 + r % nh) * D;
        for (int32_t d = 0; d < D; d += 16) {
            __m512 v = _mm512_loadu_ps(qs + d);
            if (f16) { /* Q meets K in K's type */
                v = _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            }
            _mm512_store_ps(qf + (size_t)r * D + d, v);
            _mm512_store_ps(acc + (size_t)r * D + d, _mm512_setzero_ps());
        }
        ms[(size_t)r * 16] = -INFINITY; /* m */
        ms[(size_t)r * 16 + 1] = 0.0f;  /* S */
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const float *kr[FLASH_B];
    const void *vr[FLASH_B];
    __m512 qv[RILL_KV_MAX_HEAD_DIM / 16];
    for (int32_t j0 = 0; j0 < n_kv_max; j0 += FLASH_B) {
        const int32_t nb = n_kv_max - j0 < FLASH_B ? n_kv_max - j0 : FLASH_B;
        for (int32_t i = 0; i < nb; i++) {
            const int32_t page = a->pages[(j0 + i) / P], row = (j0 + i) % P;
            const uint8_t *k0 = rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 0);
            const uint8_t *v0 = rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 1);
            if (j0 + FLASH_B + i < n_kv_max) { /* the next block's rows, while this one runs */
                const int32_t pn = a->pages[(j0 + FLASH_B + i) / P], rn = (j0 + FLASH_B + i) % P;
                const uint8_t *kn = rill__kv_ptr(kv, a->pool, pn, a->kv_head, rn, 0);
                const uint8_t *vn = rill__kv_ptr(kv, a->pool, pn, a->kv_head, rn, 1);
                for (size_t o = 0; o < (size_t)D * rill__kv_elt(kv); o += 64) {
                    _mm_prefetch((const char *)kn + o, _MM_HINT_T0);
                    _mm_prefetch((const char *)vn + o, _MM_HINT_T0);
                }
            }
            if (f16) {
                float *kd = kbuf + (size_t)i * D;
                for (int32_t d = 0; d < D; d += 16) {
                    _mm512_store_ps(kd + d, _mm512_cvtph_ps(_mm256_loadu_si256(
                                                (const __m256i *)((const uint16_t *)k0 + d))));
                }
                kr[i] = kd;
            } else {
                kr[i] = (const float *)k0;
            }
            if (v_copy) {
                float *vd = vbuf + (size_t)i * D;
                for (int32_t d = 0; d < D; d += 16) {
                    _mm512_store_ps(vd + d, _mm512_cvtph_ps(_mm256_loadu_si256(
                                                (const __m256i *)((const uint16_t *)v0 + d))));
                }
                vr[i] = vd;
            } else {
                vr[i] = v0;
            }
        }
        for (int32_t i = nb; i < ((nb + 7) & ~7); i++) { /* scores8 reads whole groups of 8 */
            kr[i] = zero_row;
        }
        for (int32_t r = 0; r < nq; r++) {
            const int32_t n_kv = a->tok[t0 + r / nh].n_kv;
            const int32_t n = n_kv - j0 < nb ? n_kv - j0 : nb; /* the query's slots */
            if (n <= 0) {
                continue;
            }
            for (int32_t d = 0; d < D; d += 16) {
                qv[d / 16] = _mm512_load_ps(qf + (size_t)r * D + d);
            }
            float *p = pw + (size_t)r * FLASH_B;
            __m256 vmax = _mm256_set1_ps(-INFINITY);
            for (int32_t c8 = 0; 8 * c8 < n; c8++) {
                const __m256 sc = _mm256_mul_ps(scores8(kr + 8 * c8, qv, D), scale);
                _mm256_store_ps(p + 8 * c8, sc);
                const __m256 valid =
                    _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8 * c8), lane));
                vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc, valid));
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float bm = _mm_cvtss_f32(m4);
            float m = ms[(size_t)r * 16], S = ms[(size_t)r * 16 + 1], c = 0.0f;
            const bool rescale = bm > m;
            if (rescale) { /* ggml_expf of one value: lane 0 of the 16-lane version */
                c = _mm512_cvtss_f32(expf16(_mm512_set1_ps(m - bm)));
                S *= c;
                m = bm;
            }
            const __m512 mv = _mm512_set1_ps(m);
            for (int32_t c16 = 0; 16 * c16 < n; c16++) { /* p has FLASH_B floats: 16 | FLASH_B */
                _mm512_store_ps(p + 16 * c16,
                                expf16(_mm512_sub_ps(_mm512_load_ps(p + 16 * c16), mv)));
            }
            for (int32_t i = 0; i < n; i++) { /* in slot order, as the reference */
                S += p[i];
            }
            if (v_f16) {
                v_step(acc + (size_t)r * D, vr, p, n, rescale, c, D, true);
            } else {
                v_step(acc + (size_t)r * D, vr, p, n, rescale, c, D, false);
            }
            ms[(size_t)r * 16] = m;
            ms[(size_t)r * 16 + 1] = S;
        }
    }
    for (int32_t r = 0; r < nq; r++) {
        const __m512 inv = _mm512_set1_ps(1.0f / ms[(size_t)r * 16 + 1]);
        float *o = a->out + (size_t)(t0 + r / nh) * a->tok_stride + (size_t)(h0 + r % nh) * D;
        for (int32_t d = 0; d < D; d += 16) {
            _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_load_ps(acc + (size_t)r * D + d), inv));
        }
    }
}

static AVX512 void run_any(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                           int32_t nh) {
    switch (a->kv->head_dim) {
    case 64:
        run(a, t0, n_t, h0, nh, 64);
        break;
    case 128:
        run(a, t0, n_t, h0, nh, 128);
        break;
    default:
        run(a, t0, n_t, h0, nh, a->kv->head_dim);
        break;
    }
}

/* Splits a run until its scratch fits: tokens first, then heads (one query always fits). */
static AVX512 void split(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                         int32_t nh) {
    const bool f16 = a->kv->k_dtype == RILL_DTYPE_F16;
    if (run_floats(n_t * nh, a->kv->head_dim, f16) <= RILL__ATTN_SCRATCH || n_t * nh == 1) {
        run_any(a, t0, n_t, h0, nh);
    } else if (n_t > 1) {
        split(a, t0, n_t / 2, h0, nh);
        split(a, t0 + n_t / 2, n_t - n_t / 2, h0, nh);
    } else {
        split(a, t0, 1, h0, nh / 2);
        split(a, t0, 1, h0 + nh / 2, nh - nh / 2);
    }
}

static AVX512 void attention_flash(const rill__attn_task_t *a) {
    if (a->kv->head_dim % 32 != 0) {
        rill__cpu_kernels_avx2()->attention_flash(a);
        return;
    }
    split(a, 0, a->n_t, 0, a->n_q);
}

static rill__cpu_kernels_t avx512_kernels;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_init(void) {
    avx512_kernels = *rill__cpu_kernels_avx2();
    avx512_kernels.name = "avx512";
    avx512_kernels.attention_flash = attention_flash;
}

const rill__cpu_kernels_t *rill__cpu_kernels_avx512(void) {
    if (!rill__cpu_has_avx512()) {
        return NULL;
    }
    pthread_once(&avx512_once, avx512_init);
    return &avx512_kernels;
}

#else /* not x86-64 */

bool rill__cpu_has_avx512(void) {
    return false;
}

const rill__cpu_kernels_t *rill__cpu_kernels_avx512(void) {
    return NULL;
}

#endif
