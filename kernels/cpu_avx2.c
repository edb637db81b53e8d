/*
 * cpu_avx2.c - AVX2/FMA/F16C kernels of the fast CPU backend.
 *
 * Build: every function carries target("avx2,fma,f16c") (the AVX2 macro), so this file compiles
 * with baseline x86-64 flags and the library still runs on CPUs without AVX2; cpu_backend.c only
 * installs this table after rill__cpu_has_avx2() (CPUID + XGETBV). -ffp-contract=off (set for the
 * whole target) keeps the compiler from fusing a*b+c behind our back: every FMA here is written.
 *
 * Numerics: the quantized dot products reproduce llama.cpp's AVX2 code operation for operation
 * (see docs/quantization.md): the same byte layout in each 256-bit vector, so maddubs/madd produce
 * the same int32 lane sums; the same per-block float step; the same final horizontal sum. Q4_0
 * with a multiple of 8 rows follows llama.cpp's repacked kernels instead (exact block sums, one
 * FMA per block), because that is what llama.cpp runs for it. A dot product therefore never
 * depends on how many tokens share its tile or which thread computed it. The activation
 * quantizers (Q8_0, Q8_1) are llama.cpp's AVX2 quantizers; Q8_K uses the plain-C one, as
 * llama.cpp does on x86.
 *
 * Tiles: one weight row against up to 4 tokens (Q4_0: 8 rows against up to 4 tokens). The weight
 * block is decoded once (nibbles unpacked, scales shuffled) and used for every token, which is
 * where prefill gets its speed over a row-by-row vec_dot; the accumulators stay in registers.
 * The token count is a compile-time constant inside each kernel (always_inline body + switch) and
 * the token loops carry an unroll pragma: without it GCC keeps the accumulators in a stack array.
 * Act rows carry the f16 block scales already converted to f32 (side arrays), so the inner loops
 * broadcast a float instead of converting per block and token. Rejected for now: repacking
 * weights (the 8-row Q4_0 kernel reads the mmapped layout and matches the repacked speed), and
 * 2-row tiles for the K-quants (register pressure with AVX2's 16 registers).
 *
 * Attention: per task, one KV head and up to 16 of its query heads, in groups of 4 whose dot
 * products and V accumulators stay in registers; scores of up to 8 positions at a time, a
 * vectorized exp for the softmax weights.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend_internal.h"
#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#define AVX2          __attribute__((target("avx2,fma,f16c")))
#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define INLINE        static inline __attribute__((always_inline))
/* Token loops must be fully unrolled so that the per-token accumulators live in registers (GCC
 * -O2 keeps them in a stack array otherwise: a store/load chain per block). */
#define UNROLL_T _Pragma("GCC unroll 4")

bool rill__cpu_has_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) {
        return false;
    }
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28),
               f16c = c & (1u << 29);
    if (!(fma && osxsave && avx && f16c)) {
        return false;
    }
    uint32_t xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    if ((xlo & 6u) != 6u) { /* the OS must save the YMM state */
        return false;
    }
    if (__get_cpuid_max(0, NULL) < 7) {
        return false;
    }
    __cpuid_count(7, 0, a, b, c, d);
    return (b & (1u << 5)) != 0;
}

/* ---- helpers -------------------------------------------------------------------------------- */

INLINE AVX2 float fp16(uint16_t h) {
    return _cvtsh_ss(h);
}

/* a * b + c with one rounding. llama.cpp's scalar accumulations (summs += m * s) are compiled
 * with FP contraction (GNU C mode), i.e. as this FMA; -ffp-contract=off here makes us say so. */
INLINE AVX2 float fma1(float a, float b, float c) {
    return fmaf(a, b, c); /* one vfmadd under target("fma") */
}

/* llama.cpp's hsum_float_8: ((x0+x4)+(x2+x6)) + ((x1+x5)+(x3+x7)). */
INLINE AVX2 float hsum8(__m256 x) {
    __m128 r = _mm256_extractf128_ps(x, 1);
    r = _mm_add_ps(r, _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* Sum of 4 lanes in llama.cpp's order for the K-quant min terms: (a0+a2) + (a1+a3). */
INLINE AVX2 float hsum4(__m128 x) {
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
}

/* u8 x s8 products, pairs summed to s16 (maddubs), then pairs to s32, as float: 8 lanes, lane k
 * holding bytes 4k..4k+3. */
INLINE AVX2 __m256 mul_sum_us8_pairs_float(__m256i ax, __m256i sy) {
    const __m256i dot = _mm256_maddubs_epi16(ax, sy);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_set1_epi16(1), dot));
}

/* 16 bytes of nibbles -> 32 bytes: low nibbles first (values 0..15), then high nibbles. */
INLINE AVX2 __m256i nibbles32(const uint8_t *p) {
    const __m128i tmp = _mm_loadu_si128((const __m128i *)p);
    const __m256i both =
        _mm256_insertf128_si256(_mm256_castsi128_si256(tmp), _mm_srli_epi16(tmp, 4), 1);
    return _mm256_and_si256(_mm256_set1_epi8(0xF), both);
}

/* Decodes the 12 packed scale bytes of Q4_K/Q5_K into 8 scales (low 128 bits) and 8 mins (high
 * 128 bits) as int16 (llama.cpp's utmp shuffle). */
INLINE AVX2 __m256i k4_scales_mins(const uint8_t *scales) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[4];
    memcpy(u, scales, 12);
    u[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = u[1] & kmask1;
    u[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    u[2] = uaux;
    u[0] &= kmask1;
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)u[3], (int)u[2], (int)u[1], (int)u[0]));
}

/* exp(x) for x in [-87.3, 88], about 1 ulp (Cephes' expf polynomial). Below the range it returns
 * ~1e-38 instead of a subnormal, above it saturates: neither matters for softmax or silu. */
INLINE AVX2 __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.0f));
    const __m256 n =
        _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), ROUND_NEAREST);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    const __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#define ACT(T, as, act, t, i) ((const T *)((const char *)(act) + (size_t)(t) * (as)) + (i))

/* A tile kernel's public entry: a switch that instantiates the always_inline body for each token
 * count, so the per-token loops are unrolled with constant bounds. */
#define TILE_ENTRY(name)                                                                          \
    static AVX2 void name(int64_t n, const void *w, const void *act, size_t as, int nt, float *y, \
                          int64_t ys) {                                                           \
        switch (nt) {                                                                             \
        case 1:                                                                                   \
            name##_n(n, w, act, as, 1, y, ys);                                                    \
            break;                                                                                \
        case 2:                                                                                   \
            name##_n(n, w, act, as, 2, y, ys);                                                    \
            break;                                                                                \
        case 3:                                                                                   \
            name##_n(n, w, act, as, 3, y, ys);                                                    \
            break;                                                                                \
        default:                                                                                  \
            name##_n(n, w, act, as, 4, y, ys);                                                    \
            break;                                                                                \
        }                                                                                         \
    }

/* ---- act rows with f32 side data -------------------------------------------------------------
 *
 * This table's Q8_0 and Q8_1 act rows are the standard blocks followed (at a 32-byte boundary) by
 * the blocks' f16 fields already converted to f32: d[nb] then the int32 code sums asum[nb] for
 * Q8_0 (the 8-row Q4_0 kernel removes the -8 offset with them); d[nb] then s[nb] for Q8_1.
 * Same values, so the same results; the inner loops just broadcast a float instead of
 * converting an f16 per block and token. */

static size_t side_offset(int64_t nb, size_t block_bytes) {
    return ((size_t)nb * block_bytes + 31u) & ~(size_t)31u;
}

static int64_t act_row_bytes(rill_dtype_t wt, int64_t n) {
    const int64_t std_bytes = rill__act_row_bytes(wt, n);
    if (std_bytes < 0) {
        return std_bytes;
    }
    switch (rill_dtype_vec_dot_type(wt)) {
    case RILL_DTYPE_Q8_0:
        return (int64_t)side_offset(n / QK8_0, sizeof(block_q8_0)) + 8 * (n / QK8_0);
    case RILL_DTYPE_Q8_1:
        return (int64_t)side_offset(n / QK8_1, sizeof(block_q8_1)) + 8 * (n / QK8_1);
    default:
        return std_bytes;
    }
}

/* Side array of act row t (d; for Q8_1, s follows at + nb). */
INLINE AVX2 const float *side(const void *act, size_t as, int t, size_t off) {
    return (const float *)((const char *)act + (size_t)t * as + off);
}

/* ---- Q4_0 x Q8_0, Q8_0 x Q8_0 ---------------------------------------------------------------- */

/* Shared body: qx are the signed weight bytes of block i (q4_0: nibble - 8; q8_0: as stored).
 * Per token: acc = fma(d_w * d_a, float(lane sums of qx * qy), acc), llama.cpp's step. */
INLINE AVX2 void q8_0_step(__m256i qx, __m256 dw, const void *act, size_t as, size_t so, int64_t i,
                           const int nt, __m256 *acc) {
    const __m256i ax = _mm256_sign_epi8(qx, qx);
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        const block_q8_0 *a = ACT(block_q8_0, as, act, t, i);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)a->qs);
        const __m256 q = mul_sum_us8_pairs_float(ax, _mm256_sign_epi8(qy, qx));
        const __m256 d = _mm256_mul_ps(dw, _mm256_broadcast_ss(side(act, as, t, so) + i));
        acc[t] = _mm256_fmadd_ps(d, q, acc[t]);
    }
}

INLINE AVX2 void tile_q4_0_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q4_0 *x = w;
    const size_t so = side_offset(n / QK4_0, sizeof(block_q8_0));
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    for (int64_t i = 0; i < n / QK4_0; i++) {
        const __m256i qx = _mm256_sub_epi8(nibbles32(x[i].qs), _mm256_set1_epi8(8));
        q8_0_step(qx, _mm256_set1_ps(fp16(x[i].d)), act, as, so, i, nt, acc);
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]);
    }
}
TILE_ENTRY(tile_q4_0)

/* Q4_0, 8 rows at a time, with the numerics of llama.cpp's repacked q4_0_8x8 kernels (which it
 * uses on AVX2 whenever the row count is a multiple of 8): per (row, token) and block, the exact
 * integer sum_j (q_j - 8) a_j, then acc = fma(float(isum), d_w * d_a, acc); no horizontal float
 * sum. It reads the original layout (zero copy): the 8 rows' nibbles are interleaved in registers
 * (qwords [r0 r1 | r2 r3] and [r4 r5 | r6 r7]), multiplied as unsigned nibbles by the broadcast
 * activation bytes, and the -8 offset is removed with the activation block's code sum. int16
 * partial sums cannot overflow: 4 maddubs pairs of at most 2 * 15 * 127 each. */
INLINE AVX2 void tile8_q4_0_n(int64_t n, const void *w, size_t wst, const void *act, size_t as,
                              const int nt, float *y, int64_t ys) {
    const int64_t nb = n / QK4_0;
    const size_t so = side_offset(nb, sizeof(block_q8_0));
    const __m256i m4 = _mm256_set1_epi8(0xF), ones = _mm256_set1_epi16(1);
    const uint8_t *rp[8];
    for (int r = 0; r < 8; r++) {
        rp[r] = (const uint8_t *)w + (size_t)r * wst;
    }
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    /* The 8 rows are read 18 bytes at a time from 8 places, which the hardware prefetchers do
     * not follow (decode streams weights from DRAM): prefetch the next group of 8 rows (the
     * next 8 * wst bytes), a few lines per block. */
    const char *next = (const char *)w + 16 * wst; /* two groups ahead: DRAM latency */
    const int64_t lines_per_block = ((int64_t)(8 * wst) / 64 + nb) / nb;
    for (int64_t i = 0; i < nb; i++) {
        const size_t off = (size_t)i * sizeof(block_q4_0);
        for (int64_t l = 0; l < lines_per_block; l++) {
            _mm_prefetch(next + (size_t)(i * lines_per_block + l) * 64, _MM_HINT_T0);
        }
        __m128i q[8];
        uint16_t h[8];
        _Pragma("GCC unroll 8") for (int r = 0; r < 8; r++) {
            memcpy(&h[r], rp[r] + off, 2);
            q[r] = _mm_loadu_si128((const __m128i *)(rp[r] + off + 2));
        }
        /* lane order of the row sums after hadd: [r0 r1 r4 r5 | r2 r3 r6 r7] */
        const __m256 dw =
            _mm256_cvtph_ps(_mm_set_epi16((short)h[7], (short)h[6], (short)h[3], (short)h[2],
                                          (short)h[5], (short)h[4], (short)h[1], (short)h[0]));
        __m256i v[4]; /* bytes 0-7 / 8-15 of rows 0-3, then of rows 4-7 */
        _Pragma("GCC unroll 2") for (int g = 0; g < 2; g++) {
            const __m128i a01 = _mm_unpacklo_epi64(q[4 * g], q[4 * g + 1]);
            const __m128i a23 = _mm_unpacklo_epi64(q[4 * g + 2], q[4 * g + 3]);
            const __m128i b01 = _mm_unpackhi_epi64(q[4 * g], q[4 * g + 1]);
            const __m128i b23 = _mm_unpackhi_epi64(q[4 * g + 2], q[4 * g + 3]);
            v[2 * g] = _mm256_inserti128_si256(_mm256_castsi128_si256(a01), a23, 1);
            v[2 * g + 1] = _mm256_inserti128_si256(_mm256_castsi128_si256(b01), b23, 1);
        }
        /* nibble groups of 8 values: 0-7 low of bytes 0-7, 8-15 low of bytes 8-15, 16-23 high of
         * bytes 0-7, 24-31 high of bytes 8-15 */
        const __m256i n03[4] = { _mm256_and_si256(v[0], m4), _mm256_and_si256(v[1], m4),
                                 _mm256_and_si256(_mm256_srli_epi16(v[0], 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(v[1], 4), m4) };
        const __m256i n47[4] = { _mm256_and_si256(v[2], m4), _mm256_and_si256(v[3], m4),
                                 _mm256_and_si256(_mm256_srli_epi16(v[2], 4), m4),
                                 _mm256_and_si256(_mm256_srli_epi16(v[3], 4), m4) };
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const int8_t *qa = ACT(block_q8_0, as, act, t, i)->qs;
            __m256i p03 = _mm256_setzero_si256(), p47 = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int g = 0; g < 4; g++) {
                int64_t a8;
                memcpy(&a8, qa + 8 * g, 8);
                const __m256i ag = _mm256_set1_epi64x(a8);
                p03 = _mm256_add_epi16(p03, _mm256_maddubs_epi16(n03[g], ag));
                p47 = _mm256_add_epi16(p47, _mm256_maddubs_epi16(n47[g], ag));
            }
            const float *sd = side(act, as, t, so);
            const int32_t asum = ((const int32_t *)(sd + nb))[i];
            __m256i isum =
                _mm256_hadd_epi32(_mm256_madd_epi16(p03, ones), _mm256_madd_epi16(p47, ones));
            isum = _mm256_sub_epi32(isum, _mm256_set1_epi32(8 * asum));
            const __m256 scale = _mm256_mul_ps(dw, _mm256_broadcast_ss(sd + i));
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[t]);
        }
    }
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        _mm256_storeu_ps(y + t * ys, _mm256_permutevar8x32_ps(acc[t], order));
    }
}

static AVX2 void tile8_q4_0(int64_t n, const void *w, size_t wst, const void *act, size_t as,
                            int nt, float *y, int64_t ys) {
    switch (nt) {
    case 1:
        tile8_q4_0_n(n, w, wst, act, as, 1, y, ys);
        break;
    case 2:
        tile8_q4_0_n(n, w, wst, act, as, 2, y, ys);
        break;
    case 3:
        tile8_q4_0_n(n, w, wst, act, as, 3, y, ys);
        break;
    default:
        tile8_q4_0_n(n, w, wst, act, as, 4, y, ys);
        break;
    }
}

INLINE AVX2 void tile_q8_0_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q8_0 *x = w;
    const size_t so = side_offset(n / QK8_0, sizeof(block_q8_0));
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        q8_0_step(qx, _mm256_set1_ps(fp16(x[i].d)), act, as, so, i, nt, acc);
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]);
    }
}
TILE_ENTRY(tile_q8_0)

/* ---- Q4_1 x Q8_1 ---------------------------------------------------------------------------- */

INLINE AVX2 void tile_q4_1_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q4_1 *x = w;
    const int64_t nb = n / QK4_1;
    const size_t so = side_offset(nb, sizeof(block_q8_1));
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    float summs[RILL__TILE_T] = { 0 };
    for (int64_t i = 0; i < nb; i++) {
        /* d and m are adjacent f16s: one 32-bit load, one conversion for both */
        int32_t dm;
        memcpy(&dm, &x[i].d, sizeof dm);
        const __m128 dmf = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
        const __m256 dw = _mm256_broadcastss_ps(dmf);
        const float mw = _mm_cvtss_f32(_mm_movehdup_ps(dmf));
        const __m256i qx = nibbles32(x[i].qs);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const float *sd = side(act, as, t, so);
            summs[t] = fma1(mw, sd[nb + i], summs[t]);
            const __m256i qy =
                _mm256_loadu_si256((const __m256i *)ACT(block_q8_1, as, act, t, i)->qs);
            const __m256 xy = mul_sum_us8_pairs_float(qx, qy);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(sd + i)), xy, acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]) + summs[t];
    }
}
TILE_ENTRY(tile_q4_1)

/* ---- Q4_K, Q5_K x Q8_K ---------------------------------------------------------------------- */

/* Scale of sub-block s (0..7) in every int16 pair of a vector (shuffle of the broadcast scales);
 * the masks come from a table so that the sub-block loop needs no unrolling to have constants. */
static const uint8_t k4_shuffle[8][32] = {
#define K4_ROW(s)                                                                                 \
    {                                                                                             \
        2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
            2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s,        \
            2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1,    \
            2 * s, 2 * s + 1, 2 * s, 2 * s + 1                                                    \
    }
    K4_ROW(0), K4_ROW(1), K4_ROW(2), K4_ROW(3), K4_ROW(4), K4_ROW(5), K4_ROW(6), K4_ROW(7),
#undef K4_ROW
};

INLINE AVX2 __m256i k4_scale(__m256i scales, int s) {
    return _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const __m256i *)k4_shuffle[s]));
}

/* Min term of one super-block for token a: fma(-d_a*dmin_w, float(madd(mins, pair sums)), acc). */
INLINE AVX2 __m128i k4_min_prod(__m256i mins_scales, const block_q8_K *a) {
    const __m256i q8sums = _mm256_loadu_si256((const __m256i *)a->bsums);
    const __m128i q8s =
        _mm_hadd_epi16(_mm256_extracti128_si256(q8sums, 0), _mm256_extracti128_si256(q8sums, 1));
    return _mm_madd_epi16(_mm256_extracti128_si256(mins_scales, 1), q8s);
}

INLINE AVX2 void tile_q4_K_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q4_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    __m128 acc_m[RILL__TILE_T] = { _mm_setzero_ps(), _mm_setzero_ps(), _mm_setzero_ps(),
                                   _mm_setzero_ps() };
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i mins_scales = k4_scales_mins(x[i].scales);
        const __m128i sc128 = _mm256_extracti128_si256(mins_scales, 0);
        const __m256i scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        __m256i sumi[RILL__TILE_T] = { _mm256_setzero_si256(), _mm256_setzero_si256(),
                                       _mm256_setzero_si256(), _mm256_setzero_si256() };
        _Pragma("GCC unroll 1") for (int j = 0; j < QK_K / 64; j++) {
            const __m256i scale_l = k4_scale(scales, 2 * j), scale_h = k4_scale(scales, 2 * j + 1);
            const __m256i q4bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i q4l = _mm256_and_si256(q4bits, m4);
            const __m256i q4h = _mm256_and_si256(_mm256_srli_epi16(q4bits, 4), m4);
            UNROLL_T
            for (int t = 0; t < nt; t++) {
                const int8_t *q8 = ACT(block_q8_K, as, act, t, i)->qs + 64 * j;
                const __m256i q8l = _mm256_loadu_si256((const __m256i *)q8);
                const __m256i q8h = _mm256_loadu_si256((const __m256i *)(q8 + 32));
                const __m256i p16l = _mm256_madd_epi16(scale_l, _mm256_maddubs_epi16(q4l, q8l));
                const __m256i p16h = _mm256_madd_epi16(scale_h, _mm256_maddubs_epi16(q4h, q8h));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p16l, p16h));
            }
        }
        const float dw = fp16(x[i].d), dminw = fp16(x[i].dmin);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = ACT(block_q8_K, as, act, t, i);
            const float d = a->d * dw, dmin = -a->d * dminw;
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_prod(mins_scales, a)),
                                    acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]) + hsum4(acc_m[t]);
    }
}
TILE_ENTRY(tile_q4_K)

INLINE AVX2 void tile_q5_K_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q5_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0xF), sixteen = _mm256_set1_epi8(16);
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    float summs[RILL__TILE_T] = { 0 };
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i mins_scales = k4_scales_mins(x[i].scales);
        const __m128i sc128 = _mm256_extracti128_si256(mins_scales, 0);
        const __m256i scales = _mm256_insertf128_si256(_mm256_castsi128_si256(sc128), sc128, 1);
        const __m256i hbits = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi[RILL__TILE_T] = { _mm256_setzero_si256(), _mm256_setzero_si256(),
                                       _mm256_setzero_si256(), _mm256_setzero_si256() };
        _Pragma("GCC unroll 1") for (int j = 0; j < QK_K / 64; j++) {
            const __m256i scale_0 = k4_scale(scales, 2 * j), scale_1 = k4_scale(scales, 2 * j + 1);
            const __m256i q5bits = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * j));
            const __m256i mask0 = _mm256_set1_epi8((char)(1 << (2 * j)));
            const __m256i mask1 = _mm256_set1_epi8((char)(1 << (2 * j + 1)));
            /* bit 4 of each value: 16 where the qh bit of this sub-block is set */
            const __m256i h0 =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, mask0), mask0), sixteen);
            const __m256i h1 =
                _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hbits, mask1), mask1), sixteen);
            const __m256i q5_0 = _mm256_add_epi8(_mm256_and_si256(q5bits, m4), h0);
            const __m256i q5_1 =
                _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q5bits, 4), m4), h1);
            UNROLL_T
            for (int t = 0; t < nt; t++) {
                const int8_t *q8 = ACT(block_q8_K, as, act, t, i)->qs + 64 * j;
                const __m256i q8_0 = _mm256_loadu_si256((const __m256i *)q8);
                const __m256i q8_1 = _mm256_loadu_si256((const __m256i *)(q8 + 32));
                const __m256i p0 = _mm256_madd_epi16(scale_0, _mm256_maddubs_epi16(q5_0, q8_0));
                const __m256i p1 = _mm256_madd_epi16(scale_1, _mm256_maddubs_epi16(q5_1, q8_1));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p0, p1));
            }
        }
        const float dw = fp16(x[i].d), dminw = fp16(x[i].dmin);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = ACT(block_q8_K, as, act, t, i);
            const float d = a->d * dw, dmin = -a->d * dminw;
            const __m128i prod = k4_min_prod(mins_scales, a);
            const __m128i zero = _mm_setzero_si128();
            const __m128i hs = _mm_hadd_epi32(_mm_hadd_epi32(prod, zero), zero);
            summs[t] = fma1(dmin, (float)_mm_extract_epi32(hs, 0), summs[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]) + summs[t];
    }
}
TILE_ENTRY(tile_q5_K)

/* ---- Q6_K x Q8_K ---------------------------------------------------------------------------- */

/* As llama.cpp: the unsigned 6-bit codes times q8 times the sub-block scale, summed into 8 int32
 * lanes, minus the -32 offset applied once per super-block through the q8 block sums
 * (lane k: 32 * (bsum[2k] * sc[2k] + bsum[2k+1] * sc[2k+1])). The lane split matters: each lane
 * is converted to float and fused separately, so this is the only order that gives llama.cpp's
 * bits. */
INLINE AVX2 void tile_q6_K_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q6_K *x = w;
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m128i scales = _mm_loadu_si128((const __m128i *)x[i].scales);
        const __m256i scales_16 = _mm256_cvtepi8_epi16(scales);
        __m256i sumi[RILL__TILE_T] = { _mm256_setzero_si256(), _mm256_setzero_si256(),
                                       _mm256_setzero_si256(), _mm256_setzero_si256() };
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h));
            const __m256i ql2 = _mm256_loadu_si256((const __m256i *)(x[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h));
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
                /* 32 values 128h + 32k: low/high nibbles of ql1/ql2, 2 bits of qh at 2k */
                const __m256i lo = k & 1 ? ql2 : ql1;
                const __m256i l4 = _mm256_and_si256(k < 2 ? lo : _mm256_srli_epi16(lo, 4), m4);
                const __m256i h2 = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
                const __m256i q6 = _mm256_or_si256(l4, _mm256_slli_epi16(h2, 4));
                const int s = 8 * h + 2 * k; /* scales s (first 16 values) and s + 1 */
                const __m128i sh = _mm_set_epi64x((long long)(0x0101010101010101ull * (s + 1)),
                                                  (long long)(0x0101010101010101ull * s));
                const __m256i scale = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, sh));
                UNROLL_T
                for (int t = 0; t < nt; t++) {
                    const int8_t *q8 = ACT(block_q8_K, as, act, t, i)->qs + 128 * h + 32 * k;
                    const __m256i qy = _mm256_loadu_si256((const __m256i *)q8);
                    const __m256i p16 = _mm256_maddubs_epi16(q6, qy);
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(scale, p16));
                }
            }
        }
        const float dw = fp16(x[i].d);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = ACT(block_q8_K, as, act, t, i);
            const __m256i q8sums = _mm256_loadu_si256((const __m256i *)a->bsums);
            const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(q8sums, scales_16), 5);
            const float d = a->d * dw;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d),
                                     _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offset)), acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]);
    }
}
TILE_ENTRY(tile_q6_K)

/* ---- F32, F16, BF16 weights (act rows are f32) ---------------------------------------------- */

INLINE AVX2 __m256 load_w(rill_dtype_t wt, const void *w, int64_t k) {
    if (wt == RILL_DTYPE_F16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)w + k)));
    }
    if (wt == RILL_DTYPE_BF16) {
        const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)w + k));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    return _mm256_loadu_ps((const float *)w + k);
}

INLINE AVX2 float load_w1(rill_dtype_t wt, const void *w, int64_t k) {
    if (wt == RILL_DTYPE_F16) {
        return fp16(((const uint16_t *)w)[k]);
    }
    if (wt == RILL_DTYPE_BF16) {
        return rill_bf16_to_f32(((const uint16_t *)w)[k]);
    }
    return ((const float *)w)[k];
}

/* Two accumulators per token (even and odd 8-wide steps) break the FMA latency chain; the
 * summation order is the same for every token count. */
INLINE AVX2 void tile_float_n(rill_dtype_t wt, int64_t n, const void *w, const void *act, size_t as,
                              const int nt, float *y, int64_t ys) {
    __m256 acc0[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                  _mm256_setzero_ps() };
    __m256 acc1[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                  _mm256_setzero_ps() };
    int64_t k = 0;
    for (; k + 16 <= n; k += 16) {
        const __m256 w0 = load_w(wt, w, k), w1 = load_w(wt, w, k + 8);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const float *a = ACT(float, as, act, t, k);
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(a), acc0[t]);
            acc1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(a + 8), acc1[t]);
        }
    }
    for (; k + 8 <= n; k += 8) {
        const __m256 w0 = load_w(wt, w, k);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            acc0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(ACT(float, as, act, t, k)), acc0[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        float tail = 0.0f;
        for (int64_t j = k; j < n; j++) {
            tail += load_w1(wt, w, j) * *ACT(float, as, act, t, j);
        }
        y[t * ys] = hsum8(_mm256_add_ps(acc0[t], acc1[t])) + tail;
    }
}

INLINE AVX2 void tile_f32_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                            float *y, int64_t ys) {
    tile_float_n(RILL_DTYPE_F32, n, w, act, as, nt, y, ys);
}
TILE_ENTRY(tile_f32)

INLINE AVX2 void tile_f16_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                            float *y, int64_t ys) {
    tile_float_n(RILL_DTYPE_F16, n, w, act, as, nt, y, ys);
}
TILE_ENTRY(tile_f16)

INLINE AVX2 void tile_bf16_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    tile_float_n(RILL_DTYPE_BF16, n, w, act, as, nt, y, ys);
}
TILE_ENTRY(tile_bf16)

/* ---- activation quantizers ------------------------------------------------------------------ */

/* llama.cpp's AVX2 block quantizer: amax, d = amax/127, id = 127/amax, round-half-even. Writes
 * the f16 scale and the 32 int8 codes, stores the unrounded d in *d_f32 and returns the sum of
 * the codes (both for Q8_1's s). */
INLINE AVX2 int quantize_block_q8(const float *x, uint16_t *d_out, int8_t *qs, float *d_f32) {
    __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8);
    __m256 v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 amax = _mm256_andnot_ps(sign, v0);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v1));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v2));
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v3));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_scalar = _mm_cvtss_f32(m4);
    const float d = max_scalar / 127.f;
    *d_f32 = d;
    *d_out = (uint16_t)_cvtss_sh(d, 0);
    const __m256 mul = _mm256_set1_ps(max_scalar != 0.0f ? 127.f / max_scalar : 0.0f);
    __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), ROUND_NEAREST));
    __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), ROUND_NEAREST));
    __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), ROUND_NEAREST));
    __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), ROUND_NEAREST));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3));
    i0 = _mm256_packs_epi32(i0, i1);
    i2 = _mm256_packs_epi32(i2, i3);
    i0 = _mm256_packs_epi16(i0, i2);
    i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, i0);
    const __m128i s128 =
        _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    const __m128i s64 = _mm_add_epi32(s128, _mm_unpackhi_epi64(s128, s128));
    return _mm_cvtsi128_si32(_mm_add_epi32(s64, _mm_shuffle_epi32(s64, _MM_SHUFFLE(2, 3, 0, 1))));
}

static AVX2 void act_q8_0(const float *x, void *act, int64_t n) {
    block_q8_0 *y = act;
    const int64_t nb = n / QK8_0;
    float *sd = (float *)((char *)act + side_offset(nb, sizeof(block_q8_0)));
    int32_t *asum = (int32_t *)(sd + nb);
    for (int64_t i = 0; i < nb; i++) {
        float d;
        asum[i] = quantize_block_q8(x + i * QK8_0, &y[i].d, y[i].qs, &d);
        sd[i] = fp16(y[i].d);
    }
}

static AVX2 void act_q8_1(const float *x, void *act, int64_t n) {
    block_q8_1 *y = act;
    const int64_t nb = n / QK8_1;
    float *sd = (float *)((char *)act + side_offset(nb, sizeof(block_q8_1)));
    for (int64_t i = 0; i < nb; i++) {
        float d;
        const int sum = quantize_block_q8(x + i * QK8_1, &y[i].d, y[i].qs, &d);
        y[i].s = (uint16_t)_cvtss_sh(d * (float)sum, 0); /* d unrounded, as llama.cpp does */
        sd[i] = fp16(y[i].d);
        sd[nb + i] = fp16(y[i].s);
    }
}

static AVX2 void act_q8_K(const float *x, void *act, int64_t n) {
    rill__quantize_row_q8_K(x, act, n);
}

static AVX2 void act_f16(const float *x, void *act, int64_t n) {
    float *y = act;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
    }
    for (; i < n; i++) {
        y[i] = rill_fp16_to_f32(rill_f32_to_fp16(x[i]));
    }
}

/* x rounded to bf16 and back, 8 at a time: rill_f32_to_bf16's rule (nearest even; NaN quiet). */
static AVX2 void act_bf16(const float *x, void *act, int64_t n) {
    float *y = act;
    const __m256i hi = _mm256_set1_epi32((int)0xffff0000u), one = _mm256_set1_epi32(1);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(x + i));
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        const __m256i r = _mm256_and_si256(
            _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), hi);
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
        const __m256i qnan = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), hi);
        _mm256_storeu_ps(y + i, _mm256_castsi256_ps(_mm256_blendv_epi8(r, qnan, nan)));
    }
    for (; i < n; i++) {
        y[i] = rill_bf16_to_f32(rill_f32_to_bf16(x[i]));
    }
}

/* ---- elementwise ---------------------------------------------------------------------------- */

static AVX2 void rms_norm_row(float *y, const float *x, const float *w, int64_t n, float eps) {
    __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
        const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
        s0 = _mm256_fmadd_pd(lo, lo, s0); /* products of f32 values are exact in double */
        s1 = _mm256_fmadd_pd(hi, hi, s1);
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(s0, s1));
    double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < n; i++) {
        sum += (double)x[i] * x[i];
    }
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    const __m256 vs = _mm256_set1_ps(scale);
    for (i = 0; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        if (w != NULL) {
            v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
        }
        _mm256_storeu_ps(y + i, v);
    }
    for (; i < n; i++) {
        y[i] = w != NULL ? (x[i] * scale) * w[i] : x[i] * scale;
    }
}

static AVX2 void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f), neg = _mm256_set1_ps(-0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = exp256(_mm256_xor_ps(gv, neg));
        const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

static AVX2 void add(float *y, const float *a, const float *c, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(c + i)));
    }
    for (; i < n; i++) {
        y[i] = a[i] + c[i];
    }
}

static AVX2 void to_f16(uint16_t *dst, const float *src, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) {
        dst[i] = rill_f32_to_fp16(src[i]);
    }
}

/* ---- attention ------------------------------------------------------------------------------ */

INLINE AVX2 __m256 load_kv8(bool f16, const uint8_t *row, int32_t d) {
    if (f16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    }
    return _mm256_loadu_ps((const float *)row + d);
}

#define CHUNK 8 /* positions scored at once: one vector of softmax weights */

/* Scores of one K row against nh (1..4, constant after inlining) query heads: the K row is
 * converted once per 8 dims and the nh dot products stay in registers. */
INLINE AVX2 void scores_n(bool f16, const uint8_t *krow, int32_t D,
                          const float (*qf)[RILL_KV_MAX_HEAD_DIM], float scale, int32_t r,
                          float (*sc)[CHUNK], const int nh) {
    __m256 dot[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                      _mm256_setzero_ps() };
    for (int32_t d = 0; d < D; d += 8) {
        const __m256 kk = load_kv8(f16, krow, d);
        _Pragma("GCC unroll 4") for (int i = 0; i < nh; i++) {
            dot[i] = _mm256_fmadd_ps(_mm256_load_ps(&qf[i][d]), kk, dot[i]);
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < nh; i++) {
        sc[i][r] = hsum8(dot[i]) * scale;
    }
}

/* acc[i] += sum_r p[i][r] * V[r] for nh (1..4) heads and nc rows starting at vrow0: per 8 dims
 * the nh accumulators stay in registers across the rows. */
INLINE AVX2 void accumulate_v_n(bool f16, const uint8_t *vrow0, size_t vstride, int32_t nc,
                                int32_t D, const float (*p)[CHUNK],
                                float (*acc)[RILL_KV_MAX_HEAD_DIM], const int nh) {
    for (int32_t d = 0; d < D; d += 8) {
        __m256 av[4];
        _Pragma("GCC unroll 4") for (int i = 0; i < nh; i++) {
            av[i] = _mm256_load_ps(&acc[i][d]);
        }
        for (int32_t r = 0; r < nc; r++) {
            const __m256 vv = load_kv8(f16, vrow0 + (size_t)r * vstride, d);
            _Pragma("GCC unroll 4") for (int i = 0; i < nh; i++) {
                av[i] = _mm256_fmadd_ps(_mm256_broadcast_ss(&p[i][r]), vv, av[i]);
            }
        }
        _Pragma("GCC unroll 4") for (int i = 0; i < nh; i++) {
            _mm256_store_ps(&acc[i][d], av[i]);
        }
    }
}

static AVX2 void attention(const rill__attn_task_t *a) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t D = kv->head_dim, P = kv->page_size, nq = a->n_q;
    if (D % 8 != 0) {
        rill__cpu_kernels_scalar()->attention(a);
        return;
    }
    const bool f16 = kv->dtype == RILL_DTYPE_F16;
    const float scale = 1.0f / sqrtf((float)D);
    _Alignas(32) float qf[RILL__ATTN_MAX_Q][RILL_KV_MAX_HEAD_DIM];
    _Alignas(32) float acc[RILL__ATTN_MAX_Q][RILL_KV_MAX_HEAD_DIM];
    _Alignas(32) float sc[RILL__ATTN_MAX_Q][CHUNK];
    float m[RILL__ATTN_MAX_Q], l[RILL__ATTN_MAX_Q];
    for (int32_t i = 0; i < nq; i++) {
        for (int32_t d = 0; d < D; d += 8) {
            __m256 v = _mm256_loadu_ps(a->q + i * D + d);
            if (f16) { /* q meets K in K's precision, as in llama.cpp */
                v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            }
            _mm256_store_ps(&qf[i][d], v);
            _mm256_store_ps(&acc[i][d], _mm256_setzero_ps());
        }
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int32_t s0 = 0; s0 < a->n_kv;) {
        const int32_t page = a->pages[s0 / P], row0 = s0 % P;
        int32_t nc = P - row0 < CHUNK ? P - row0 : CHUNK;
        nc = a->n_kv - s0 < nc ? a->n_kv - s0 : nc;
        for (int32_t r = 0; r < nc; r++) {
            const uint8_t *krow = rill__kv_ptr(kv, a->pool, page, a->kv_head, row0 + r, 0);
            for (int32_t i0 = 0; i0 < nq; i0 += 4) {
                switch (nq - i0 < 4 ? nq - i0 : 4) {
                case 1:
                    scores_n(f16, krow, D, &qf[i0], scale, r, &sc[i0], 1);
                    break;
                case 2:
                    scores_n(f16, krow, D, &qf[i0], scale, r, &sc[i0], 2);
                    break;
                case 3:
                    scores_n(f16, krow, D, &qf[i0], scale, r, &sc[i0], 3);
                    break;
                default:
                    scores_n(f16, krow, D, &qf[i0], scale, r, &sc[i0], 4);
                    break;
                }
            }
        }
        _Alignas(32) float p[RILL__ATTN_MAX_Q][CHUNK];
        for (int32_t i = 0; i < nq; i++) {
            float mx = sc[i][0];
            for (int32_t r = 1; r < nc; r++) {
                mx = sc[i][r] > mx ? sc[i][r] : mx;
            }
            if (mx > m[i]) { /* new running max: rescale what was accumulated so far */
                const float corr = expf(m[i] - mx);
                const __m256 vc = _mm256_set1_ps(corr);
                l[i] *= corr;
                for (int32_t d = 0; d < D; d += 8) {
                    _mm256_store_ps(&acc[i][d], _mm256_mul_ps(_mm256_load_ps(&acc[i][d]), vc));
                }
                m[i] = mx;
            }
            for (int32_t r = nc; r < CHUNK; r++) {
                sc[i][r] = m[i]; /* padding lanes, zeroed below */
            }
            __m256 pv = exp256(_mm256_sub_ps(_mm256_load_ps(sc[i]), _mm256_set1_ps(m[i])));
            const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
            const __m256 valid =
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(nc), lane));
            pv = _mm256_and_ps(pv, valid);
            _mm256_store_ps(p[i], pv);
            l[i] += hsum8(pv);
        }
        const uint8_t *vrow0 = rill__kv_ptr(kv, a->pool, page, a->kv_head, row0, 1);
        const size_t vstride = (size_t)D * (f16 ? 2u : 4u);
        for (int32_t i0 = 0; i0 < nq; i0 += 4) {
            switch (nq - i0 < 4 ? nq - i0 : 4) {
            case 1:
                accumulate_v_n(f16, vrow0, vstride, nc, D, &p[i0], &acc[i0], 1);
                break;
            case 2:
                accumulate_v_n(f16, vrow0, vstride, nc, D, &p[i0], &acc[i0], 2);
                break;
            case 3:
                accumulate_v_n(f16, vrow0, vstride, nc, D, &p[i0], &acc[i0], 3);
                break;
            default:
                accumulate_v_n(f16, vrow0, vstride, nc, D, &p[i0], &acc[i0], 4);
                break;
            }
        }
        s0 += nc;
    }
    for (int32_t i = 0; i < nq; i++) {
        const __m256 inv = _mm256_set1_ps(1.0f / l[i]);
        for (int32_t d = 0; d < D; d += 8) {
            _mm256_storeu_ps(a->out + i * D + d, _mm256_mul_ps(_mm256_load_ps(&acc[i][d]), inv));
        }
    }
}

static const rill__cpu_kernels_t avx2_kernels = {
    .name = "avx2",
    .tile = {
        [RILL_DTYPE_F32] = tile_f32,
        [RILL_DTYPE_F16] = tile_f16,
        [RILL_DTYPE_BF16] = tile_bf16,
        [RILL_DTYPE_Q4_0] = tile_q4_0,
        [RILL_DTYPE_Q4_1] = tile_q4_1,
        [RILL_DTYPE_Q8_0] = tile_q8_0,
        [RILL_DTYPE_Q4_K] = tile_q4_K,
        [RILL_DTYPE_Q5_K] = tile_q5_K,
        [RILL_DTYPE_Q6_K] = tile_q6_K,
    },
    .tile8 = {
        [RILL_DTYPE_Q4_0] = tile8_q4_0,
    },
    .act = {
        [RILL_DTYPE_F32] = NULL,
        [RILL_DTYPE_F16] = act_f16,
        [RILL_DTYPE_BF16] = act_bf16,
        [RILL_DTYPE_Q4_0] = act_q8_0,
        [RILL_DTYPE_Q4_1] = act_q8_1,
        [RILL_DTYPE_Q8_0] = act_q8_0,
        [RILL_DTYPE_Q4_K] = act_q8_K,
        [RILL_DTYPE_Q5_K] = act_q8_K,
        [RILL_DTYPE_Q6_K] = act_q8_K,
    },
    .act_row_bytes = act_row_bytes,
    .rms_norm_row = rms_norm_row,
    .swiglu = swiglu,
    .add = add,
    .to_f16 = to_f16,
    .attention = attention,
};

const rill__cpu_kernels_t *rill__cpu_kernels_avx2(void) {
    return rill__cpu_has_avx2() ? &avx2_kernels : NULL;
}

#else /* not x86 */

bool rill__cpu_has_avx2(void) {
    return false;
}

const rill__cpu_kernels_t *rill__cpu_kernels_avx2(void) {
    return NULL;
}

#endif
