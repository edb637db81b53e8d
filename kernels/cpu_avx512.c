/*
 * cpu_avx512.c - the AVX-512 table of the fast CPU backend: the AVX2 table with the flash
 * attention kernel and, on CPUs with AVX-512 VNNI, the Q8_0, Q4_1 and 8-row Q4_0 matmul tiles in
 * 512-bit vectors.
 *
 * Why these: on a long context the attention of a question's tokens costs more than its matmuls
 * (SmolLM2-135M at 4096 cached slots: ~2.5 ms a token against ~1.3 ms), and every one of its
 * operations is an f32 dot, exp or FMA whose bits do not depend on the vector width. The matmul
 * tiles reproduce llama.cpp's AVX2 integer sums and float chains: vpdpbusd forms the same int32
 * lanes as maddubs + madd, and a zmm carries two of the AVX2 kernel's 8-lane accumulators side
 * by side (two rows, or two tokens), so each output keeps its own chain of roundings (the matmul
 * section below). The weight types of the default model and the benchmarks come first; the
 * others keep the AVX2 tiles. One token (decode) goes to the AVX2 tiles too: measured on the
 * development machine (AMD EPYC, Zen 4: 512-bit operations split into two 256-bit halves), the
 * 512-bit tiles gain on batches (Q8_0 and Q4_0 ~1.25x, Q4_1 ~1.05x at 64 tokens) and not on one
 * token, which is memory-bound and where the 2-row Q8_0 tile was slower. Rejected after
 * measuring: the K-quants' batch kernels (integer sums exact in any order) with two tokens per
 * zmm, 0.8x of the AVX2 tiles on that machine; without VNNI there is no instruction to save.
 *
 * Build: every function carries target("avx512f,avx512vl,avx512bw,avx2,fma,f16c") (the matmul
 * tiles also avx512vnni), so the file compiles with baseline flags; cpu_backend.c installs the
 * table only after rill__cpu_has_avx512() (CPUID for AVX-512 F/VL/BW, XGETBV for the opmask and
 * ZMM state), and the table takes the matmul tiles only when CPUID also reports VNNI.
 *
 * Numerics of the flash kernel: the bits of rill__attention_head_flash_ref (rill_backend.h,
 * Numerics), the same as the AVX2 kernel's, operation for operation:
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

/* ---- matmul tiles (AVX-512 VNNI) ------------------------------------------------------------
 *
 * The AVX2 tiles' numerics in 16-lane vectors. Integer lane sums are exact in any instruction
 * sequence, so vpdpbusd (u8 x s8, four products summed into an int32 lane) gives the very lane
 * values of the AVX2 maddubs + madd pair: the codes never reach maddubs's int16 saturation
 * (|weight code| <= 128 with act codes in [-127, 127]: a pair <= 32512). What must not change
 * is the float side, so one zmm holds two independent accumulators, each with the AVX2 kernel's
 * own per-lane chain:
 *   - vec_dot tiles (Q8_0, Q4_1): lanes 0-7 are row r, lanes 8-15 row r + 1 against the same
 *     token; per block acc = fma(d_w * d_a, float(lane sums), acc) per half, then hsum_float_8
 *     of each half, and for Q4_1 the scalar min chain summs = fma(m_w, s_a, summs) per row;
 *   - the 8-row Q4_0 tile (repacked q4_0_8x8 numerics): lanes 0-7 are rows 0-7 of token t,
 *     lanes 8-15 the same rows of token t + 1; the exact block sum per (row, token), then one
 *     acc = fma(float(isum), d_w * d_a, acc).
 * The signed Q8_0 x Q8_0 product goes through vpdpbusd as |x| times y with x's sign (llama.cpp's
 * sign trick; AVX-512 has no vpsignb, a masked negate takes its place: the same bytes wherever
 * |x| is not 0). These tiles need AVX-512 VNNI; without it the table keeps the AVX2 tiles. */

#define AVX512V               __attribute__((target("avx512f,avx512vl,avx512bw,avx512vnni,avx2,fma,f16c")))
#define ACT(T, as, act, t, i) ((const T *)((const char *)(act) + (size_t)(t) * (as)) + (i))
#define UNROLL_T              _Pragma("GCC unroll 4")

static bool cpu_has_vnni(void) {
    unsigned a, b, c, d;
    __cpuid_count(7, 0, a, b, c, d);
    return (c & (1u << 11)) != 0;
}

/* llama.cpp's hsum_float_8: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)), as cpu_avx2.c's hsum8. */
INLINE AVX512V float hsum8(__m256 x) {
    __m128 r = _mm256_extractf128_ps(x, 1);
    r = _mm_add_ps(r, _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

INLINE AVX512V __m256 hi256(__m512 x) {
    return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1));
}

/* [f16 a x 8 | f16 b x 8] as 16 floats (exact conversions). */
INLINE AVX512V __m512 halves_f16(uint16_t a, uint16_t b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)a)),
                                                   _mm_set1_epi16((short)b), 1));
}

/* 32 bytes of each of two rows: row p in the low 256 bits, row q in the high. */
INLINE AVX512V __m512i rows2(const void *p, const void *q) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p)),
                              _mm256_loadu_si256((const __m256i *)q), 1);
}

/* The 32 codes of a 4-bit block (16 bytes of nibbles) of two rows: per row the low nibbles
 * (values 0-15), then the high nibbles (16-31), as in cpu_avx2.c's nibbles32. */
INLINE AVX512V __m512i nibbles2(const uint8_t *p, const uint8_t *q) {
    const __m128i a = _mm_loadu_si128((const __m128i *)p), b = _mm_loadu_si128((const __m128i *)q);
    __m512i v = _mm512_castsi128_si512(a);
    v = _mm512_inserti32x4(v, a, 1);
    v = _mm512_inserti32x4(v, b, 2);
    v = _mm512_inserti32x4(v, b, 3);
    v = _mm512_mask_srli_epi16(v, (__mmask32)0xFF00FF00u, v, 4); /* 128-bit lanes 1 and 3 */
    return _mm512_and_si512(v, _mm512_set1_epi8(0xF));
}

/* Q8_0 x Q8_0, two rows: ggml_vec_dot_q8_0_q8_0 per row (cpu_avx2.c's tile_q8_0). */
INLINE AVX512V void tile2_q8_0_n(int64_t n, const void *w, size_t wst, const void *act, size_t as,
                                 const int nt, float *y, int64_t ys) {
    const int64_t nb = n / QK8_0;
    const block_q8_0 *x0 = w, *x1 = (const block_q8_0 *)((const char *)w + wst);
    const size_t so = rill__act_side_offset(nb, sizeof(block_q8_0));
    __m512 acc[RILL__TILE_T] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                                 _mm512_setzero_ps() };
    for (int64_t i = 0; i < nb; i++) {
        const __m512i qx = rows2(x0[i].qs, x1[i].qs);
        const __m512i ax = _mm512_abs_epi8(qx);
        const __mmask64 neg = _mm512_movepi8_mask(qx);
        const __m512 dw = halves_f16(x0[i].d, x1[i].d);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const __m512i qy = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)ACT(block_q8_0, as, act, t, i)->qs));
            const __m512i sy = _mm512_mask_sub_epi8(qy, neg, _mm512_setzero_si512(), qy);
            const __m512 q =
                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy));
            const float *sd = (const float *)((const char *)act + (size_t)t * as + so);
            const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(sd[i]));
            acc[t] = _mm512_fmadd_ps(d, q, acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(_mm512_castps512_ps256(acc[t]));
        y[t * ys + 1] = hsum8(hi256(acc[t]));
    }
}

/* Q4_1 x Q8_1, two rows: ggml_vec_dot_q4_1_q8_1 per row (cpu_avx2.c's tile_q4_1). */
INLINE AVX512V void tile2_q4_1_n(int64_t n, const void *w, size_t wst, const void *act, size_t as,
                                 const int nt, float *y, int64_t ys) {
    const int64_t nb = n / QK4_1;
    const block_q4_1 *x0 = w, *x1 = (const block_q4_1 *)((const char *)w + wst);
    const size_t so = rill__act_side_offset(nb, sizeof(block_q8_1));
    __m512 acc[RILL__TILE_T] = { _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                                 _mm512_setzero_ps() };
    float s0[RILL__TILE_T] = { 0 }, s1[RILL__TILE_T] = { 0 };
    for (int64_t i = 0; i < nb; i++) {
        const __m512i qx = nibbles2(x0[i].qs, x1[i].qs);
        const __m512 dw = halves_f16(x0[i].d, x1[i].d);
        const float m0 = _cvtsh_ss(x0[i].m), m1 = _cvtsh_ss(x1[i].m);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const float *sd = (const float *)((const char *)act + (size_t)t * as + so);
            s0[t] = fmaf(m0, sd[nb + i], s0[t]);
            s1[t] = fmaf(m1, sd[nb + i], s1[t]);
            const __m512i qy = _mm512_broadcast_i64x4(
                _mm256_loadu_si256((const __m256i *)ACT(block_q8_1, as, act, t, i)->qs));
            const __m512 q =
                _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), qx, qy));
            acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(sd[i])), q, acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(_mm512_castps512_ps256(acc[t])) + s0[t];
        y[t * ys + 1] = hsum8(hi256(acc[t])) + s1[t];
    }
}

/* Q4_0, 8 rows (repacked q4_0_8x8 numerics, cpu_avx2.c's tile8_q4_0), two tokens per vector.
 * Per block the 8 rows' nibble bytes are gathered into qwords (L: bytes 0-7 of each row, H:
 * bytes 8-15), so that one broadcast act qword against them gives each row's partial sums in
 * its two int32 lanes 2r and 2r + 1; four vpdpbusd cover the 32 values, and the lanes of two
 * tokens then fold into [token t rows 0-7 | token t + 1 rows 0-7]. The -8 offset comes off with
 * the act block's code sum, as in the AVX2 kernel. */
INLINE AVX512V __m512i q4_0_rowsums(const __m512i *nib, const int8_t *qa) {
    __m512i p = _mm512_setzero_si512();
    _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {
        int64_t a8;
        memcpy(&a8, qa + 8 * g, 8);
        p = _mm512_dpbusd_epi32(p, nib[g], _mm512_set1_epi64(a8));
    }
    return p;
}

INLINE AVX512V void tile8_q4_0_n(int64_t n, const void *w, size_t wst, const void *act, size_t as,
                                 const int nt, float *y, int64_t ys) {
    const int64_t nb = n / QK4_0;
    const size_t so = rill__act_side_offset(nb, sizeof(block_q8_0));
    const __m512i m4 = _mm512_set1_epi8(0xF);
    const __m512i lo_q = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
    const __m512i hi_q = _mm512_setr_epi64(1, 3, 5, 7, 9, 11, 13, 15);
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd =
        _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    const uint8_t *rp[8];
    for (int r = 0; r < 8; r++) {
        rp[r] = (const uint8_t *)w + (size_t)r * wst;
    }
    __m512 acc[2] = { _mm512_setzero_ps(), _mm512_setzero_ps() }; /* tokens 0-1, 2-3 */
    const char *next = (const char *)w + 16 * wst; /* as the AVX2 kernel: two groups ahead */
    const int64_t lines_per_block = ((int64_t)(8 * wst) / 64 + nb) / nb;
    for (int64_t i = 0; i < nb; i++) {
        const size_t off = (size_t)i * sizeof(block_q4_0);
        for (int64_t l = 0; l < lines_per_block; l++) {
            _mm_prefetch(next + (size_t)(i * lines_per_block + l) * 64, _MM_HINT_T0);
        }
        uint16_t h[8];
        __m512i z[2];
        _Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
            __m512i v =
                _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rp[4 * g] + off + 2)));
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rp[4 * g + 1] + off + 2)),
                                   1);
            v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rp[4 * g + 2] + off + 2)),
                                   2);
            z[g] = _mm512_inserti32x4(
                v, _mm_loadu_si128((const __m128i *)(rp[4 * g + 3] + off + 2)), 3);
        }
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            memcpy(&h[r], rp[r] + off, 2);
        }
        const __m512i L = _mm512_permutex2var_epi64(z[0], lo_q, z[1]);
        const __m512i H = _mm512_permutex2var_epi64(z[0], hi_q, z[1]);
        const __m512i nib[4] = { _mm512_and_si512(L, m4), _mm512_and_si512(H, m4),
                                 _mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                                 _mm512_and_si512(_mm512_srli_epi16(H, 4), m4) };
        const __m128i h8 = _mm_setr_epi16((short)h[0], (short)h[1], (short)h[2], (short)h[3],
                                          (short)h[4], (short)h[5], (short)h[6], (short)h[7]);
        const __m512 dw = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(h8)); /* rows 0-7, twice */
        _Pragma("GCC unroll 2") for (int tp = 0; tp < (nt + 1) / 2; tp++) {
            const int ta = 2 * tp, tb = 2 * tp + 1 < nt ? 2 * tp + 1 : 2 * tp;
            const __m512i pa = q4_0_rowsums(nib, ACT(block_q8_0, as, act, ta, i)->qs);
            const __m512i pb =
                tb == ta ? pa : q4_0_rowsums(nib, ACT(block_q8_0, as, act, tb, i)->qs);
            __m512i isum = _mm512_add_epi32(_mm512_permutex2var_epi32(pa, even, pb),
                                            _mm512_permutex2var_epi32(pa, odd, pb));
            const float *sa = (const float *)((const char *)act + (size_t)ta * as + so);
            const float *sb = (const float *)((const char *)act + (size_t)tb * as + so);
            const int32_t asa = ((const int32_t *)(sa + nb))[i],
                          asb = ((const int32_t *)(sb + nb))[i];
            const __mmask16 upper = 0xFF00;
            isum = _mm512_sub_epi32(
                isum, _mm512_mask_set1_epi32(_mm512_set1_epi32(8 * asa), upper, 8 * asb));
            const __m512 da =
                _mm512_mask_mov_ps(_mm512_set1_ps(sa[i]), upper, _mm512_set1_ps(sb[i]));
            acc[tp] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, da), acc[tp]);
        }
    }
    _Pragma("GCC unroll 2") for (int tp = 0; tp < (nt + 1) / 2; tp++) {
        _mm256_storeu_ps(y + 2 * tp * ys, _mm512_castps512_ps256(acc[tp]));
        if (2 * tp + 1 < nt) {
            _mm256_storeu_ps(y + (2 * tp + 1) * ys, hi256(acc[tp]));
        }
    }
}

/* The AVX2 table's kernels, for one token (set before the table is installed). */
static rill__tile_fn avx2_tile_q8_0, avx2_tile_q4_1;
static rill__tile8_fn avx2_tile8_q4_0;

static void avx2_rows2(rill__tile_fn tile, int64_t n, const void *w, size_t wst, const void *act,
                       size_t as, float *y) {
    tile(n, w, act, as, 1, y, 1);
    tile(n, (const char *)w + wst, act, as, 1, y + 1, 1);
}

/* Entries with the token count a compile-time constant inside (cpu_avx2.c's TILE_ENTRY). One
 * token goes to the AVX2 kernel (ONE: its call): measured faster for decode on the development
 * machine (docs/benchmarks.md, "AVX-512 matmul kernels"), and the same bits. */
#define TILE_ROWS_ENTRY(name, ONE)                                                             \
    static AVX512V void name(int64_t n, const void *w, size_t wst, const void *act, size_t as, \
                             int nt, float *y, int64_t ys) {                                   \
        switch (nt) {                                                                          \
        case 1:                                                                                \
            ONE;                                                                               \
            break;                                                                             \
        case 2:                                                                                \
            name##_n(n, w, wst, act, as, 2, y, ys);                                            \
            break;                                                                             \
        case 3:                                                                                \
            name##_n(n, w, wst, act, as, 3, y, ys);                                            \
            break;                                                                             \
        default:                                                                               \
            name##_n(n, w, wst, act, as, 4, y, ys);                                            \
            break;                                                                             \
        }                                                                                      \
    }
TILE_ROWS_ENTRY(tile2_q8_0, avx2_rows2(avx2_tile_q8_0, n, w, wst, act, as, y))
TILE_ROWS_ENTRY(tile2_q4_1, avx2_rows2(avx2_tile_q4_1, n, w, wst, act, as, y))
TILE_ROWS_ENTRY(tile8_q4_0, avx2_tile8_q4_0(n, w, wst, act, as, 1, y, ys))

static rill__cpu_kernels_t avx512_kernels;
static pthread_once_t avx512_once = PTHREAD_ONCE_INIT;

static void avx512_init(void) {
    avx512_kernels = *rill__cpu_kernels_avx2();
    avx512_kernels.name = "avx512";
    avx512_kernels.attention_flash = attention_flash;
    if (cpu_has_vnni()) {
        avx2_tile_q8_0 = avx512_kernels.tile[RILL_DTYPE_Q8_0];
        avx2_tile_q4_1 = avx512_kernels.tile[RILL_DTYPE_Q4_1];
        avx2_tile8_q4_0 = avx512_kernels.tile8[RILL_DTYPE_Q4_0];
        avx512_kernels.tile2[RILL_DTYPE_Q8_0] = tile2_q8_0;
        avx512_kernels.tile2[RILL_DTYPE_Q4_1] = tile2_q4_1;
        avx512_kernels.tile8[RILL_DTYPE_Q4_0] = tile8_q4_0;
    }
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
