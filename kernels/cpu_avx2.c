/*
 * cpu_avx2.c - AVX2/FMA/F16C kernels of the fast CPU backend.
 *
 * Build: every function carries target("avx2,fma,f16c") (the AVX2 macro), so this file compiles
 * with baseline x86-64 flags and the library still runs on CPUs without AVX2; cpu_backend.c only
 * installs this table after rill__cpu_has_avx2() (CPUID + XGETBV). -ffp-contract=off (set for the
 * whole target) keeps the compiler from fusing a*b+c behind our back: every FMA here is written.
 *
 * Numerics: the dot products reproduce llama.cpp's AVX2 code operation for operation, for each
 * kernel llama.cpp may pick (rill__mm_path_for; ggml_ref.c's rill__dot_ggml states them lane by
 * lane): the same byte layout in each 256-bit vector, so maddubs/madd produce the same int32 lane
 * sums; the same per-block float step; the same final horizontal sum. vec_dot for one token,
 * tinyBLAS's single 8-lane accumulator for F32/F16/BF16 batches, the tiled kernel's per-block
 * fma(res, d_a) for K-quant batches of 8+, the repacked q4_0_8x8 (exact block sums, one FMA per
 * block) and q4_K_8x8 (gemv per block, gemm per pair of sub-blocks) kernels. A dot product
 * therefore depends on the kernel llama.cpp picks for the batch, never on how many tokens share
 * its tile or which thread computed it. The activation quantizers (Q8_0, Q8_1) are llama.cpp's
 * AVX2 quantizers; Q8_K uses the plain-C one, as llama.cpp does on x86.
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
 * Attention, RMSNorm, SwiGLU: llama.cpp's own arithmetic (the non-flash attention path, ggml's
 * exp), operation for operation, so that their bits equal the reference backend's lane-by-lane
 * statement of it (ggml_ref.c) and llama.cpp's; see the attention section for how. The flash
 * attention kernel is rill's own (rill_backend.h, Numerics) and gives the bits of its reference
 * statement the same way; see its section.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <cpuid.h>
#include <immintrin.h>

#include "avx2_expf.h"

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

/* The 32 high bits of a Q5_0/Q5_1 block (qh, little-endian) as 32 bytes: byte j is 0xFF when
 * bit j is set, else 0. Byte j takes qh byte j / 8 (shuffle), then keeps bit j % 8 (mask). */
INLINE AVX2 __m256i bits32(const uint8_t *qh) {
    int32_t h;
    memcpy(&h, qh, sizeof h);
    const __m256i pick = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201ull);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(h), pick);
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit), bit);
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

/* Tile entries of a kernel body with a numerics path (a compile-time constant inside). */
#define PATH_ENTRY(name, body, path)                                                              \
    INLINE AVX2 void name##_n(int64_t n, const void *w, const void *act, size_t as, const int nt, \
                              float *y, int64_t ys) {                                             \
        body(path, n, w, act, as, nt, y, ys);                                                     \
    }                                                                                             \
    TILE_ENTRY(name)
#define KQ_ENTRIES(T)                          \
    PATH_ENTRY(tile_##T, tile_##T##_p, KQ_VEC) \
    PATH_ENTRY(tiled_##T, tile_##T##_p, KQ_TILED)

/* ---- act rows with f32 side data -------------------------------------------------------------
 *
 * This table's Q8_0 and Q8_1 act rows are the standard blocks followed (at a 32-byte boundary) by
 * the blocks' f16 fields already converted to f32: d[nb] then the int32 code sums asum[nb] for
 * Q8_0 (the 8-row Q4_0 kernel removes the -8 offset with them); d[nb] then s[nb] for Q8_1.
 * Same values, so the same results; the inner loops just broadcast a float instead of
 * converting an f16 per block and token. */

static size_t side_offset(int64_t nb, size_t block_bytes) {
    return rill__act_side_offset(nb, block_bytes);
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

/* Q5_0 x Q8_0: the codes with bit 4 from qh, as signed bytes q - 16 (the nibble with 0xF0 set
 * where bit 4 is clear), then Q8_0's step: ggml_vec_dot_q5_0_q8_0. */
INLINE AVX2 void tile_q5_0_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    const block_q5_0 *x = w;
    const size_t so = side_offset(n / QK5_0, sizeof(block_q8_0));
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    for (int64_t i = 0; i < n / QK5_0; i++) {
        const __m256i hi = _mm256_andnot_si256(bits32(x[i].qh), _mm256_set1_epi8((char)0xF0));
        const __m256i qx = _mm256_or_si256(nibbles32(x[i].qs), hi);
        q8_0_step(qx, _mm256_set1_ps(fp16(x[i].d)), act, as, so, i, nt, acc);
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = hsum8(acc[t]);
    }
}
TILE_ENTRY(tile_q5_0)

/* ---- Q4_1, Q5_1 x Q8_1 ---------------------------------------------------------------------- */

/* Shared body; q5 is a compile-time constant: Q5_1 ors bit 4 of each code in from qh (the block
 * layouts differ only by qh between m and qs). ggml_vec_dot_q4_1_q8_1 / q5_1_q8_1. */
INLINE AVX2 void tile_q41_body(const bool q5, int64_t n, const void *w, const void *act, size_t as,
                               const int nt, float *y, int64_t ys) {
    const size_t bsz = q5 ? sizeof(block_q5_1) : sizeof(block_q4_1);
    const int64_t nb = n / QK4_1;
    const size_t so = side_offset(nb, sizeof(block_q8_1));
    __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                 _mm256_setzero_ps() };
    float summs[RILL__TILE_T] = { 0 };
    for (int64_t i = 0; i < nb; i++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)i * bsz;
        /* d and m are adjacent f16s: one 32-bit load, one conversion for both */
        int32_t dm;
        memcpy(&dm, blk, sizeof dm);
        const __m128 dmf = _mm_cvtph_ps(_mm_cvtsi32_si128(dm));
        const __m256 dw = _mm256_broadcastss_ps(dmf);
        const float mw = _mm_cvtss_f32(_mm_movehdup_ps(dmf));
        __m256i qx;
        if (q5) {
            const __m256i hi =
                _mm256_and_si256(bits32(blk + offsetof(block_q5_1, qh)), _mm256_set1_epi8(0x10));
            qx = _mm256_or_si256(nibbles32(blk + offsetof(block_q5_1, qs)), hi);
        } else {
            qx = nibbles32(blk + offsetof(block_q4_1, qs));
        }
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

INLINE AVX2 void tile_q4_1_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    tile_q41_body(false, n, w, act, as, nt, y, ys);
}
TILE_ENTRY(tile_q4_1)

INLINE AVX2 void tile_q5_1_n(int64_t n, const void *w, const void *act, size_t as, const int nt,
                             float *y, int64_t ys) {
    tile_q41_body(true, n, w, act, as, nt, y, ys);
}
TILE_ENTRY(tile_q5_1)

/* ---- Q4_K, Q5_K x Q8_K ---------------------------------------------------------------------- */

/* Which of llama.cpp's kernels a K-quant tile reproduces. All three form the same exact integer
 * sums per super-block (s1 = sum_s sc_s sum_j q_j a_j, s2 = sum_s m_s bsum_s); they differ in
 * the float steps:
 *   KQ_VEC    ggml_vec_dot_q*_K (fewer than 8 tokens): 8 int32 lanes scaled and fused per block;
 *   KQ_TILED  the tiled kernel (8+ tokens, weights not repacked): per block
 *             res = fma(-dmin, (float)s2, d * (float)s1), acc = fma(res, d_a, acc);
 *   KQ_REPACK q4_K_8x8 gemv (Q4_K with a multiple of 8 rows, the last T % 4 tokens of a batch,
 *             or all of a batch of 1-3): acc = fma((float)s1, d * d_a, acc),
 *             accm = fma((float)s2, dmin * d_a, accm) per block, then acc - accm;
 *   KQ_REPACK4 q4_K_8x8 gemm (the tokens in whole groups of 4): the same, but per pair of
 *             sub-blocks (64 values) instead of per block. */
enum { KQ_VEC = 0, KQ_TILED = 1, KQ_REPACK = 2, KQ_REPACK4 = 3 };

INLINE AVX2 int32_t hsum_epi32(__m256i v) { /* exact: any order */
    __m128i x = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(x);
}

INLINE AVX2 int32_t hsum_epi32_4(__m128i x) {
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 0, 3, 2)));
    x = _mm_add_epi32(x, _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(x);
}

/* The KQ_TILED / KQ_REPACK float steps of one super-block (s2 = 0 and dmin unused for Q6_K). */
INLINE AVX2 void kq_block(const int path, int32_t s1, int32_t s2, float dw, float dminw, float da,
                          float *acc, float *accm) {
    if (path == KQ_TILED) {
        const float res = fma1(-dminw, (float)s2, dw * (float)s1);
        *acc = fma1(res, da, *acc);
    } else {
        *acc = fma1((float)s1, dw * da, *acc);
        *accm = fma1((float)s2, dminw * da, *accm);
    }
}

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

INLINE AVX2 void tile_q4_K_p(const int path, int64_t n, const void *w, const void *act, size_t as,
                             const int nt, float *y, int64_t ys) {
    const block_q4_K *x = w;
    float kacc[RILL__TILE_T] = { 0 }, kaccm[RILL__TILE_T] = { 0 };
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
        int32_t s1_sb[RILL__TILE_T][QK_K / 64];
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
                if (path == KQ_REPACK4) {
                    s1_sb[t][j] = hsum_epi32(_mm256_add_epi32(p16l, p16h));
                } else {
                    sumi[t] = _mm256_add_epi32(sumi[t], _mm256_add_epi32(p16l, p16h));
                }
            }
        }
        const float dw = fp16(x[i].d), dminw = fp16(x[i].dmin);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const block_q8_K *a = ACT(block_q8_K, as, act, t, i);
            if (path == KQ_REPACK4) { /* lane j of the min products is pair j's s2 */
                _Alignas(16) int32_t s2_sb[4];
                _mm_store_si128((__m128i *)s2_sb, k4_min_prod(mins_scales, a));
                for (int j = 0; j < QK_K / 64; j++) {
                    kq_block(KQ_REPACK, s1_sb[t][j], s2_sb[j], dw, dminw, a->d, &kacc[t],
                             &kaccm[t]);
                }
                continue;
            }
            if (path != KQ_VEC) {
                kq_block(path, hsum_epi32(sumi[t]), hsum_epi32_4(k4_min_prod(mins_scales, a)), dw,
                         dminw, a->d, &kacc[t], &kaccm[t]);
                continue;
            }
            const float d = a->d * dw, dmin = -a->d * dminw;
            acc_m[t] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(k4_min_prod(mins_scales, a)),
                                    acc_m[t]);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = path == KQ_VEC ? hsum8(acc[t]) + hsum4(acc_m[t]) : kacc[t] - kaccm[t];
    }
}
KQ_ENTRIES(q4_K)
PATH_ENTRY(repack_q4_K, tile_q4_K_p, KQ_REPACK)
PATH_ENTRY(repack4_q4_K, tile_q4_K_p, KQ_REPACK4)

INLINE AVX2 void tile_q5_K_p(const int path, int64_t n, const void *w, const void *act, size_t as,
                             const int nt, float *y, int64_t ys) {
    const block_q5_K *x = w;
    float kacc[RILL__TILE_T] = { 0 }, kaccm[RILL__TILE_T] = { 0 };
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
            if (path != KQ_VEC) {
                kq_block(path, hsum_epi32(sumi[t]), hsum_epi32_4(k4_min_prod(mins_scales, a)), dw,
                         dminw, a->d, &kacc[t], &kaccm[t]);
                continue;
            }
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
        y[t * ys] = path == KQ_VEC ? hsum8(acc[t]) + summs[t] : kacc[t] - kaccm[t];
    }
}
KQ_ENTRIES(q5_K)

/* ---- Q6_K x Q8_K ---------------------------------------------------------------------------- */

/* As llama.cpp: the unsigned 6-bit codes times q8 times the sub-block scale, summed into 8 int32
 * lanes, minus the -32 offset applied once per super-block through the q8 block sums
 * (lane k: 32 * (bsum[2k] * sc[2k] + bsum[2k+1] * sc[2k+1])). The lane split matters: each lane
 * is converted to float and fused separately, so this is the only order that gives llama.cpp's
 * bits. */
INLINE AVX2 void tile_q6_K_p(const int path, int64_t n, const void *w, const void *act, size_t as,
                             const int nt, float *y, int64_t ys) {
    const block_q6_K *x = w;
    float kacc[RILL__TILE_T] = { 0 }, kaccm[RILL__TILE_T] = { 0 };
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
            if (path != KQ_VEC) {
                kq_block(path, hsum_epi32(_mm256_sub_epi32(sumi[t], offset)), 0, dw, 0.0f, a->d,
                         &kacc[t], &kaccm[t]);
                continue;
            }
            const float d = a->d * dw;
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(d),
                                     _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[t], offset)), acc[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        y[t * ys] = path == KQ_VEC ? hsum8(acc[t]) : kacc[t];
    }
}
KQ_ENTRIES(q6_K)

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

/* llama.cpp's two kernels for float weights (the act rows hold the values already rounded to
 * the weight's type, as f32):
 *   FP_GEMM  tinyBLAS (2+ tokens, n % 8 == 0, rows % 4 == 0): one 8-lane FMA accumulator over
 *            the row, then (t0 + t2) + (t1 + t3);
 *   FP_VEC   ggml_vec_dot_f32 / _f16 / _bf16 (one token): four accumulators over each 32 values,
 *            (a0 + a2) + (a1 + a3), then (t0 + t1) + (t2 + t3) (F32, F16: GGML_F32x8_REDUCE) or
 *            (t0 + t2) + (t1 + t3) (BF16's own reduction), then the n % 32 tail (in double for
 *            F16 and BF16; rill__ggml_dot_tail's mix of products and FMAs for F32). */
enum { FP_VEC = 0, FP_GEMM = 1 };

/* (t0 + t1) + (t2 + t3) with t_i = x_i + x_{i+4}: two hadds, as GGML_F32x8_REDUCE. */
INLINE AVX2 float hsum8_b(__m256 x) {
    const __m128 t = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    const __m128 h = _mm_hadd_ps(t, t);
    return _mm_cvtss_f32(_mm_hadd_ps(h, h));
}

INLINE AVX2 void tile_float_p(rill_dtype_t wt, const int path, int64_t n, const void *w,
                              const void *act, size_t as, const int nt, float *y, int64_t ys) {
    if (path == FP_GEMM) {
        __m256 acc[RILL__TILE_T] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                                     _mm256_setzero_ps() };
        for (int64_t k = 0; k < n; k += 8) {
            const __m256 w0 = load_w(wt, w, k);
            UNROLL_T
            for (int t = 0; t < nt; t++) {
                acc[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(ACT(float, as, act, t, k)), acc[t]);
            }
        }
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            y[t * ys] = hsum8(acc[t]);
        }
        return;
    }
    __m256 a0[RILL__TILE_T], a1[RILL__TILE_T], a2[RILL__TILE_T], a3[RILL__TILE_T];
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        a0[t] = a1[t] = a2[t] = a3[t] = _mm256_setzero_ps();
    }
    const int64_t np = n & ~(int64_t)31;
    for (int64_t k = 0; k < np; k += 32) {
        const __m256 w0 = load_w(wt, w, k), w1 = load_w(wt, w, k + 8);
        const __m256 w2 = load_w(wt, w, k + 16), w3 = load_w(wt, w, k + 24);
        UNROLL_T
        for (int t = 0; t < nt; t++) {
            const float *a = ACT(float, as, act, t, k);
            a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(a), a0[t]);
            a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(a + 8), a1[t]);
            a2[t] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(a + 16), a2[t]);
            a3[t] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(a + 24), a3[t]);
        }
    }
    UNROLL_T
    for (int t = 0; t < nt; t++) {
        const __m256 r = _mm256_add_ps(_mm256_add_ps(a0[t], a2[t]), _mm256_add_ps(a1[t], a3[t]));
        float sum = wt == RILL_DTYPE_BF16 ? hsum8(r) : hsum8_b(r);
        if (np < n) {
            const float *a = ACT(float, as, act, t, 0);
            if (wt == RILL_DTYPE_F32) {
                sum = rill__ggml_dot_tail(w, a, np, n, sum, false);
            } else {
                double s = sum;
                for (int64_t k = np; k < n; k++) {
                    s += (double)(load_w1(wt, w, k) * a[k]);
                }
                sum = (float)s;
            }
        }
        y[t * ys] = sum;
    }
}

#define FLOAT_ENTRIES(T, DT)                                                            \
    INLINE AVX2 void tile_##T##_n(int64_t n, const void *w, const void *act, size_t as, \
                                  const int nt, float *y, int64_t ys) {                 \
        tile_float_p(DT, FP_VEC, n, w, act, as, nt, y, ys);                             \
    }                                                                                   \
    TILE_ENTRY(tile_##T)                                                                \
    INLINE AVX2 void gemm_##T##_n(int64_t n, const void *w, const void *act, size_t as, \
                                  const int nt, float *y, int64_t ys) {                 \
        tile_float_p(DT, FP_GEMM, n, w, act, as, nt, y, ys);                            \
    }                                                                                   \
    TILE_ENTRY(gemm_##T)

FLOAT_ENTRIES(f32, RILL_DTYPE_F32)
FLOAT_ENTRIES(f16, RILL_DTYPE_F16)
FLOAT_ENTRIES(bf16, RILL_DTYPE_BF16)

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

/* ggml's RMSNorm sums the f32 squares of a row in double one after the other: a chain of
 * dependent adds that any other order would round differently. Four rows run at once, one per
 * lane of a double vector, so the chains overlap instead of waiting on each other. */
static AVX2 void rms_norm_rows(float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                               float eps) {
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int64_t nr = n_rows - r0 < 4 ? n_rows - r0 : 4;
        const float *x0 = x + r0 * n;
        const float *x1 = x0 + (nr > 1 ? n : 0), *x2 = x0 + (nr > 2 ? 2 * n : 0);
        const float *x3 = x0 + (nr > 3 ? 3 * n : 0);
        __m256d sum = _mm256_setzero_pd();
        for (int64_t i = 0; i < n; i++) {
            const __m128 v = _mm_setr_ps(x0[i], x1[i], x2[i], x3[i]);
            sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_mul_ps(v, v)));
        }
        _Alignas(32) double sums[4];
        _mm256_store_pd(sums, sum);
        for (int64_t r = 0; r < nr; r++) {
            const float *xr = x0 + r * n;
            float *yr = y + (r0 + r) * n;
            const float mean = (float)(sums[r] / (double)n);
            const float scale = 1.0f / sqrtf(mean + eps);
            const __m256 vs = _mm256_set1_ps(scale);
            int64_t i = 0;
            for (; i + 8 <= n; i += 8) {
                __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + i), vs);
                if (w != NULL) {
                    v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
                }
                _mm256_storeu_ps(yr + i, v);
            }
            for (; i < n; i++) {
                yr[i] = w != NULL ? (xr[i] * scale) * w[i] : xr[i] * scale;
            }
        }
    }
}

/* rill__rope_apply compiled for FMA: its fmaf become single instructions instead of libm calls. */
static AVX2 void rope_apply(float *x, const rill_rope_t *rope, const float *cs) {
    const int32_t n_rot = rope->n_rot;
    const int32_t stride = rope->mode == RILL_ROPE_NEOX ? n_rot / 2 : 1;
    for (int32_t i = 0; i < n_rot; i += 2) {
        const int32_t j = rope->mode == RILL_ROPE_NEOX ? i / 2 : i;
        const float x0 = x[j], x1 = x[j + stride];
        const float c = cs[i], s = cs[i + 1];
        x[j] = fma1(x0, c, -(x1 * s));
        x[j + stride] = fma1(x0, s, x1 * c);
    }
}

/* ggml_vec_swiglu_f32: ggml_v_silu(g) * u per 8, ggml_silu_f32 (libm expf) for the tail. */
static AVX2 void swiglu(float *y, const float *g, const float *u, int64_t n) {
    const __m256 one = _mm256_set1_ps(1.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 gv = _mm256_loadu_ps(g + i);
        const __m256 e = rill__avx2_expf8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        const __m256 silu = _mm256_div_ps(gv, _mm256_add_ps(one, e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    rill__ggml_swiglu(y + i, g + i, u + i, n - i);
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

/* ---- attention ------------------------------------------------------------------------------
 *
 * llama.cpp's non-flash attention (rill__attention_head_ref states it lane by lane), for the
 * n_q query heads of a task, in three passes over the task's slots in chunks of 8 (a chunk never
 * straddles a page: P % 8 == 0, else the scalar path runs):
 *   1. scores: per K row and head, ggml_vec_dot_f32's four accumulators, then the final two-hadd
 *      reductions of 8 rows at once (transposed, same additions); scaled, +0, masked, stored in
 *      the thread's scratch row of that head, and the running max;
 *   2. softmax: rill__avx2_expf8 of (w - max) 8 slots at a time, each chunk's sum added to a
 * double, then every weight times (float)(1 / sum) (rounded to f16 for an F16 pool);
 *   3. the weighted sum of V, 8 dims at a time with one accumulator per slot lane in registers:
 *      lane j % 8 for a batch of 2+ tokens (tinyBLAS), lane j % 32 in four groups for one token
 *      (ggml_vec_dot_f32), then llama.cpp's horizontal sums, done across dims with vector adds.
 * Slots past n_kv read a zero row (no uninitialized pool rows are touched) and weigh exactly 0. */

INLINE AVX2 __m256 load_kv8(bool f16, const uint8_t *row, int32_t d) {
    if (f16) {
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + d)));
    }
    return _mm256_loadu_ps((const float *)row + d);
}

static _Alignas(32) const float zero_row[RILL_KV_MAX_HEAD_DIM];

/* ggml_vec_dot_f32's 32-value body for one K row and one q: (a0 + a2) + (a1 + a3). */
INLINE AVX2 __m256 dot_body(const float *k, const float *q, int32_t np) {
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int32_t d = 0; d < np; d += 32) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d), _mm256_load_ps(q + d), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 8), _mm256_load_ps(q + d + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 16), _mm256_load_ps(q + d + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + d + 24), _mm256_load_ps(q + d + 24), a3);
    }
    return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

/* [lo(x) + hi(x) | lo(y) + hi(y)]: the first step of GGML_F32x8_REDUCE's tail, two rows. */
INLINE AVX2 __m256 halves2(__m256 x, __m256 y) {
    return _mm256_add_ps(_mm256_permute2f128_ps(x, y, 0x20), _mm256_permute2f128_ps(x, y, 0x31));
}

/* ggml_vec_dot_f32 of 8 K rows with one q: per row the body, then (t0 + t1) + (t2 + t3) for
 * all 8 rows with three hadds instead of eight pairs. */
INLINE AVX2 __m256 scores8(const float *const *k, const float *q, int32_t np) {
    const __m256 h0 = _mm256_hadd_ps(halves2(dot_body(k[0], q, np), dot_body(k[1], q, np)),
                                     halves2(dot_body(k[2], q, np), dot_body(k[3], q, np)));
    const __m256 h1 = _mm256_hadd_ps(halves2(dot_body(k[4], q, np), dot_body(k[5], q, np)),
                                     halves2(dot_body(k[6], q, np), dot_body(k[7], q, np)));
    /* lanes now hold rows 0 2 4 6 | 1 3 5 7 */
    return _mm256_permutevar8x32_ps(_mm256_hadd_ps(h0, h1),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* dot_body for head_dim 64 with q in registers (q[v] = q + 8v): the same FMAs and additions,
 * but a K row's vectors are the only loads (q's would be reloaded for every row otherwise). */
INLINE AVX2 __m256 dot_body64(const float *k, const __m256 *q) {
    const __m256 z = _mm256_setzero_ps();
    __m256 a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k), q[0], z);
    __m256 a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 8), q[1], z);
    __m256 a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 16), q[2], z);
    __m256 a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 24), q[3], z);
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 32), q[4], a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 40), q[5], a1);
    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 48), q[6], a2);
    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k + 56), q[7], a3);
    return _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
}

/* q's 8 vectors (head_dim 64, 32-byte aligned) for dot_body64. */
INLINE AVX2 void load_q64(const float *q, __m256 *out) {
    for (int v = 0; v < 8; v++) {
        out[v] = _mm256_load_ps(q + 8 * v);
    }
}

/* scores8 for head_dim 64, q in registers. */
INLINE AVX2 __m256 scores8_64(const float *const *k, const __m256 *q) {
    const __m256 h0 = _mm256_hadd_ps(halves2(dot_body64(k[0], q), dot_body64(k[1], q)),
                                     halves2(dot_body64(k[2], q), dot_body64(k[3], q)));
    const __m256 h1 = _mm256_hadd_ps(halves2(dot_body64(k[4], q), dot_body64(k[5], q)),
                                     halves2(dot_body64(k[6], q), dot_body64(k[7], q)));
    return _mm256_permutevar8x32_ps(_mm256_hadd_ps(h0, h1),
                                    _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* One lane of vsum_head over 64 dims from d0: acc[v] += p_j * V_j[d0 + 8v ..] for its slots j =
 * L, L + n_lanes, ... < n_kv, in order (f16 is a constant after inlining: no branch inside). */
INLINE AVX2 void vsum_lane(__m256 *acc, const uint8_t *const *vch, size_t in_chunk, const float *p,
                           int32_t L, int32_t n_kv, int32_t n_lanes, int32_t d0, const bool f16) {
    __m256 a0 = acc[0], a1 = acc[1], a2 = acc[2], a3 = acc[3];
    __m256 a4 = acc[4], a5 = acc[5], a6 = acc[6], a7 = acc[7];
    const int32_t c_step = n_lanes / 8;
    for (int32_t j = L, c = L / 8; j < n_kv; j += n_lanes, c += c_step) {
        const __m256 pj = _mm256_broadcast_ss(p + j);
        if (f16) {
            const uint16_t *r = (const uint16_t *)(vch[c] + in_chunk) + d0;
#define V16(k) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + 8 * (k))))
            a0 = _mm256_fmadd_ps(pj, V16(0), a0);
            a1 = _mm256_fmadd_ps(pj, V16(1), a1);
            a2 = _mm256_fmadd_ps(pj, V16(2), a2);
            a3 = _mm256_fmadd_ps(pj, V16(3), a3);
            a4 = _mm256_fmadd_ps(pj, V16(4), a4);
            a5 = _mm256_fmadd_ps(pj, V16(5), a5);
            a6 = _mm256_fmadd_ps(pj, V16(6), a6);
            a7 = _mm256_fmadd_ps(pj, V16(7), a7);
#undef V16
        } else {
            const float *r = (const float *)(vch[c] + in_chunk) + d0;
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 24), a3);
            a4 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 32), a4);
            a5 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 40), a5);
            a6 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 48), a6);
            a7 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 56), a7);
        }
    }
    acc[0] = a0, acc[1] = a1, acc[2] = a2, acc[3] = a3;
    acc[4] = a4, acc[5] = a5, acc[6] = a6, acc[7] = a7;
}

/* out (D) = sum_j p_j V_j for one query in llama.cpp's lane order, p its weights (n_kv).
 * Slot j belongs to lane j % 8 (batched: tinyBLAS's 8 lanes) or j % 32 (ggml_vec_dot_f32's four
 * accumulators of 8 lanes). Each lane walks its own slots in order, one broadcast weight per V
 * row against up to 64 dims held in 8 accumulators (V rows read whole, one load per FMA); the
 * lanes are then combined with llama.cpp's reductions, across dims with vector adds. Chunk c's 8
 * V rows start at vch[c], row_bytes apart, f16 or f32. */
static AVX2 void vsum_head(const rill__attn_task_t *a, int32_t n_kv, const uint8_t *const *vch,
                           bool f16, size_t row_bytes, const float *p, float *out) {
    const int32_t D = a->kv->head_dim;
    const int32_t n_lanes = a->batched ? 8 : 32;
    _Alignas(32) float lanes[32][64];
    for (int32_t d0 = 0; d0 < D; d0 += 64) {
        const int32_t nv = (D - d0 < 64 ? D - d0 : 64) / 8; /* vectors of 8 dims */
        for (int32_t L = 0; L < n_lanes; L++) {
            __m256 acc[8];
            _Pragma("GCC unroll 8") for (int v = 0; v < 8; v++) {
                acc[v] = _mm256_setzero_ps();
            }
            const size_t in_chunk = (size_t)(L % 8) * row_bytes;
            if (nv == 8 && f16) {
                vsum_lane(acc, vch, in_chunk, p, L, n_kv, n_lanes, d0, true);
            } else if (nv == 8) {
                vsum_lane(acc, vch, in_chunk, p, L, n_kv, n_lanes, d0, false);
            } else {
                for (int32_t j = L, c = L / 8; j < n_kv; j += n_lanes, c += n_lanes / 8) {
                    const uint8_t *row = vch[c] + in_chunk;
                    const __m256 pj = _mm256_broadcast_ss(p + j);
                    for (int v = 0; v < nv; v++) {
                        acc[v] = _mm256_fmadd_ps(pj, load_kv8(f16, row, d0 + 8 * v), acc[v]);
                    }
                }
            }
            for (int v = 0; v < nv; v++) {
                _mm256_store_ps(&lanes[L][8 * v], acc[v]);
            }
        }
        for (int v = 0; v < nv; v++) {
            __m256 sl[8];
            _Pragma("GCC unroll 8") for (int l = 0; l < 8; l++) {
                const int o = 8 * v;
                sl[l] = a->batched
                            ? _mm256_load_ps(&lanes[l][o])
                            : _mm256_add_ps(_mm256_add_ps(_mm256_load_ps(&lanes[l][o]),
                                                          _mm256_load_ps(&lanes[16 + l][o])),
                                            _mm256_add_ps(_mm256_load_ps(&lanes[8 + l][o]),
                                                          _mm256_load_ps(&lanes[24 + l][o])));
            }
            const __m256 t0 = _mm256_add_ps(sl[0], sl[4]), t1 = _mm256_add_ps(sl[1], sl[5]);
            const __m256 t2 = _mm256_add_ps(sl[2], sl[6]), t3 = _mm256_add_ps(sl[3], sl[7]);
            const __m256 o = a->batched
                                 ? _mm256_add_ps(_mm256_add_ps(t0, t2), _mm256_add_ps(t1, t3))
                                 : _mm256_add_ps(_mm256_add_ps(t0, t1), _mm256_add_ps(t2, t3));
            _mm256_storeu_ps(out + d0 + 8 * v, o);
        }
    }
}

/* Pointers to the V rows of slots [0, n_kv) for vsum_head, chunk c's at vch[c]: into the pool,
 * or, for an F16 pool when `copy` is not NULL, into an f32 copy made there once (n_kv rounded up
 * to 8 rows of D floats) so that the queries of a task do not each convert every row. *f16 and
 * *row_bytes describe what the pointers point to. */
static AVX2 void v_rows(const rill__attn_task_t *a, int32_t n_kv, const uint8_t **vch, float *copy,
                        bool *f16, size_t *row_bytes) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t D = kv->head_dim, P = kv->page_size;
    const int32_t n_chunks = (n_kv + 7) / 8;
    *f16 = kv->k_dtype == RILL_DTYPE_F16 && copy == NULL;
    *row_bytes = (size_t)D * (*f16 ? 2u : 4u);
    int32_t pi = 0, row = 0;
    for (int32_t c = 0; c < n_chunks; c++) {
        const uint8_t *src = rill__kv_ptr(kv, a->pool, a->pages[pi], a->kv_head, row, 1);
        if (kv->k_dtype == RILL_DTYPE_F16 && copy != NULL) {
            float *dst = copy + (size_t)c * 8 * D;
            const int32_t nc = n_kv - c * 8 < 8 ? n_kv - c * 8 : 8;
            for (int32_t i = 0; i < nc * D; i += 8) {
                _mm256_store_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(
                                             (const __m128i *)((const uint16_t *)src + i))));
            }
            vch[c] = (const uint8_t *)dst;
        } else {
            vch[c] = src;
        }
        if ((row += 8) == P) {
            row = 0;
            pi++;
        }
    }
}

/* Floats of scratch a run of n_t tokens x nh heads needs: the queries (rounded to K's type),
 * the softmax rows, the V chunk pointers, and (with_copy) the f32 V copy. Each part starts
 * 32-byte aligned. */
static size_t run_floats(int32_t n_t, int32_t nh, int32_t n_kv_max, int32_t D, bool with_copy) {
    const size_t stride = (size_t)((n_kv_max + 7) & ~7);
    const size_t ptrs = ((stride / 8) * sizeof(void *) / sizeof(float) + 7) & ~(size_t)7;
    return (size_t)n_t * (size_t)nh * ((size_t)D + stride) + ptrs +
           (with_copy ? stride * (size_t)D : 0);
}

/* Tokens [t0, t0 + n_t) x query heads [h0, h0 + nh) of a task; the caller checked the scratch. */
static AVX2 void attention_run(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                               int32_t nh, bool v_copy) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t D = kv->head_dim, P = kv->page_size, np = D & ~31;
    const bool f16 = kv->k_dtype == RILL_DTYPE_F16;
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)D));
    int32_t n_kv_max = 0;
    for (int32_t t = t0; t < t0 + n_t; t++) {
        n_kv_max = a->tok[t].n_kv > n_kv_max ? a->tok[t].n_kv : n_kv_max;
    }
    const int32_t stride = (n_kv_max + 7) & ~7; /* floats per softmax row */
    const int32_t nq = n_t * nh;                /* query (t, i) is row (t - t0) * nh + i */
    /* scratch: softmax rows (nq x stride), queries (nq x D), V chunk pointers, V copy */
    float *const qf = a->scratch + (size_t)nq * stride;
    _Alignas(32) float kf[8][RILL_KV_MAX_HEAD_DIM];
    for (int32_t r = 0; r < nq; r++) {
        const float *qs = a->q + (size_t)(t0 + r / nh) * a->tok_stride + (size_t)(h0 + r % nh) * D;
        for (int32_t d = 0; d < D; d += 8) {
            __m256 v = _mm256_loadu_ps(qs + d);
            if (f16) { /* Q meets K in K's type */
                v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            }
            _mm256_store_ps(qf + (size_t)r * D + d, v);
        }
    }
    /* 1. scores, chunk by chunk: each K row converted and loaded once for all queries */
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int32_t pi = 0, prow = 0;
    for (int32_t j0 = 0; j0 < n_kv_max; j0 += 8) {
        const int32_t nc = n_kv_max - j0 < 8 ? n_kv_max - j0 : 8;
        const uint8_t *k0 = rill__kv_ptr(kv, a->pool, a->pages[pi], a->kv_head, prow, 0);
        if ((prow += 8) == P) {
            prow = 0;
            pi++;
        }
        const float *kr[8];
        for (int l = 0; l < 8; l++) {
            if (l >= nc) {
                kr[l] = zero_row;
            } else if (f16) {
                const uint16_t *h = (const uint16_t *)k0 + (size_t)l * D;
                for (int32_t d = 0; d < D; d += 8) {
                    _mm256_store_ps(&kf[l][d],
                                    _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + d))));
                }
                kr[l] = kf[l];
            } else {
                kr[l] = (const float *)k0 + (size_t)l * D;
            }
        }
        for (int32_t t = 0; t < n_t; t++) {
            const int32_t n_kv = a->tok[t0 + t].n_kv;
            if (j0 >= n_kv) {
                continue;
            }
            const __m256 valid =
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n_kv - j0), lane));
            for (int32_t i = 0; i < nh; i++) {
                const int32_t r = t * nh + i;
                const float *qr = qf + (size_t)r * D;
                __m256 q64[8];
                if (D == 64) {
                    load_q64(qr, q64);
                }
                __m256 sc = D == 64 ? scores8_64(kr, q64) : scores8(kr, qr, np);
                if (np < D) { /* the dot's tail, lane by lane */
                    _Alignas(32) float tl[8];
                    _mm256_store_ps(tl, sc);
                    for (int l = 0; l < 8; l++) {
                        tl[l] = rill__ggml_dot_tail(kr[l], qr, np, D, tl[l], f16);
                    }
                    sc = _mm256_load_ps(tl);
                }
                /* soft_max_ext: times the scale, plus the mask (0, or -inf past n_kv) */
                const __m256 w = _mm256_add_ps(_mm256_mul_ps(sc, scale), _mm256_setzero_ps());
                _mm256_store_ps(a->scratch + (size_t)r * stride + j0,
                                _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), w, valid));
            }
        }
    }
    /* 2. softmax of every query's row */
    for (int32_t r = 0; r < nq; r++) {
        float *row = a->scratch + (size_t)r * stride;
        const int32_t end = (a->tok[t0 + r / nh].n_kv + 7) & ~7;
        __m256 vmax = _mm256_set1_ps(-INFINITY);
        for (int32_t j0 = 0; j0 < end; j0 += 8) {
            vmax = _mm256_max_ps(vmax, _mm256_load_ps(row + j0));
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const __m256 max = _mm256_set1_ps(_mm_cvtss_f32(m4));
        double sum = 0.0;
        for (int32_t j0 = 0; j0 < end; j0 += 8) {
            const __m256 e = rill__avx2_expf8(_mm256_sub_ps(_mm256_load_ps(row + j0), max));
            _mm256_store_ps(row + j0, e);
            sum += (double)hsum8(e);
        }
        const __m256 inv = _mm256_set1_ps((float)(1.0 / sum));
        for (int32_t j0 = 0; j0 < end; j0 += 8) {
            __m256 pv = _mm256_mul_ps(_mm256_load_ps(row + j0), inv);
            if (f16) { /* KQ is converted to V's type */
                pv = _mm256_cvtph_ps(_mm256_cvtps_ph(pv, _MM_FROUND_TO_NEAREST_INT));
            }
            _mm256_store_ps(row + j0, pv);
        }
    }
    /* 3. the weighted V sums, the V rows prepared once for all queries */
    float *after = qf + (size_t)nq * D;
    const uint8_t **vch = (const uint8_t **)(void *)after;
    const size_t ptrs = ((size_t)(stride / 8) * sizeof(void *) / sizeof(float) + 7) & ~(size_t)7;
    bool vf16;
    size_t row_bytes;
    v_rows(a, n_kv_max, vch, v_copy ? after + ptrs : NULL, &vf16, &row_bytes);
    for (int32_t r = 0; r < nq; r++) {
        const int32_t t = t0 + r / nh;
        vsum_head(a, a->tok[t].n_kv, vch, vf16, row_bytes, a->scratch + (size_t)r * stride,
                  a->out + (size_t)t * a->tok_stride + (size_t)(h0 + r % nh) * D);
    }
}

/* Splits a run until its scratch fits: tokens first, then heads; one (token, head) whose row
 * alone does not fit takes the scalar path. */
static AVX2 void attention_split(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                                 int32_t nh) {
    const int32_t D = a->kv->head_dim;
    int32_t n_kv_max = 0;
    for (int32_t t = t0; t < t0 + n_t; t++) {
        n_kv_max = a->tok[t].n_kv > n_kv_max ? a->tok[t].n_kv : n_kv_max;
    }
    /* the f32 V copy pays off once two or more queries share the rows */
    const bool want_copy = a->kv->k_dtype == RILL_DTYPE_F16 && n_t * nh > 1;
    if (run_floats(n_t, nh, n_kv_max, D, want_copy) <= RILL__ATTN_SCRATCH) {
        attention_run(a, t0, n_t, h0, nh, want_copy);
    } else if (run_floats(n_t, nh, n_kv_max, D, false) <= RILL__ATTN_SCRATCH) {
        attention_run(a, t0, n_t, h0, nh, false);
    } else if (n_t > 1) {
        attention_split(a, t0, n_t / 2, h0, nh);
        attention_split(a, t0 + n_t / 2, n_t - n_t / 2, h0, nh);
    } else if (nh > 1) {
        attention_split(a, t0, 1, h0, nh / 2);
        attention_split(a, t0, 1, h0 + nh / 2, nh - nh / 2);
    } else {
        const size_t off = (size_t)t0 * a->tok_stride + (size_t)h0 * D;
        rill__attention_head_ref(a->kv, a->pool, a->pages, a->kv_head, a->tok[t0].n_kv, a->batched,
                                 a->q + off, a->out + off);
    }
}

static AVX2 void attention(const rill__attn_task_t *a) {
    if (a->kv->head_dim % 8 != 0 || a->kv->page_size % 8 != 0) {
        rill__cpu_kernels_scalar()->attention(a);
        return;
    }
    attention_split(a, 0, a->n_t, 0, a->n_q);
}

/* ---- flash attention ------------------------------------------------------------------------
 *
 * The one-pass kernel (rill__attention_head_flash_ref states it), for the n_t x nh queries of a
 * run, block by block (FLASH_B = 32 slots from slot 0, any page size). Per block, the K rows
 * (and, when 2+ queries share them, the V rows) of an F16 pool are widened to f32 once for all
 * the run's queries; then
 *   1. per query: the scores of 8 rows at a time with the exact kernel's scores8 and tail (the
 *      same dot, so the same bits; for head_dim 64 with q held in registers), times the scale;
 *      the block max over the query's valid slots; when the max grows, c = rill__avx2_expf8 of one
 *      broadcast value (its lane is rill__ggml_expf) and S = S * c; the weights
 *      rill__avx2_expf8(s - m), 8 slots at a time;
 *   2. S summed one weight at a time in slot order, as the reference does (a horizontal sum
 *      would round differently): a chain of dependent additions per query, so four queries'
 *      chains run interleaved;
 *   3. per query: acc * c when the max grew (the reference's rounding), then acc[d] =
 *      fma(p_j, V_j[d], acc[d]) over the slots in order, 8 dims per vector and up to 64 dims
 *      in registers: each dim's chain is the reference's, dims are independent.
 * A query's m, S and acc stay in the scratch between blocks, so memory is O(block) for any n_kv
 * and the only split is when a run's queries do not fit (never for one query). A head_dim that
 * is not a multiple of 8 goes to the scalar table's kernel (the same bits). */

#define FLASH_B RILL_ATTN_FLASH_BLOCK

/* A query's running state, in its 8 floats of scratch: the max m and sum S so far, and for the
 * block at hand its slot count n and whether (and by c) the block rescales S and acc. */
typedef struct flash_state {
    float m, S, c;
    int32_t n, rescale, pad[3];
} flash_state_t;
_Static_assert(sizeof(flash_state_t) == 8 * sizeof(float), "a query's state is 8 floats");

/* Floats of scratch a flash run of nq queries needs: per query its q (rounded to K's type), acc
 * (D each), one block's scores/weights (FLASH_B) and m, S (padded to 8); for an F16 pool the
 * block's K and V rows in f32 (FLASH_B x D each). Every part starts 32-byte aligned (D % 8 ==
 * 0). */
static size_t flash_floats(int32_t nq, int32_t D, bool f16) {
    return (size_t)nq * (size_t)(2 * D + FLASH_B + 8) + (f16 ? 2u * FLASH_B * (size_t)D : 0u);
}

/* acc[0, 64) = (rescale ? acc * c : acc), then acc[d] = fma(p[i], V_i[d0 + d], acc[d]) for the
 * slots i < n in order; V_i at vr[i], f16 or f32 (a constant after inlining). */
INLINE AVX2 void flash_v64(float *acc, const void *const *vr, int32_t d0, const float *p, int32_t n,
                           bool rescale, __m256 c, const bool f16) {
    __m256 a0 = _mm256_load_ps(acc), a1 = _mm256_load_ps(acc + 8);
    __m256 a2 = _mm256_load_ps(acc + 16), a3 = _mm256_load_ps(acc + 24);
    __m256 a4 = _mm256_load_ps(acc + 32), a5 = _mm256_load_ps(acc + 40);
    __m256 a6 = _mm256_load_ps(acc + 48), a7 = _mm256_load_ps(acc + 56);
    if (rescale) {
        a0 = _mm256_mul_ps(a0, c), a1 = _mm256_mul_ps(a1, c), a2 = _mm256_mul_ps(a2, c);
        a3 = _mm256_mul_ps(a3, c), a4 = _mm256_mul_ps(a4, c), a5 = _mm256_mul_ps(a5, c);
        a6 = _mm256_mul_ps(a6, c), a7 = _mm256_mul_ps(a7, c);
    }
    for (int32_t i = 0; i < n; i++) {
        const __m256 pj = _mm256_broadcast_ss(p + i);
        if (f16) {
            const uint16_t *r = (const uint16_t *)vr[i] + d0;
#define V16(k) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(r + 8 * (k))))
            a0 = _mm256_fmadd_ps(pj, V16(0), a0);
            a1 = _mm256_fmadd_ps(pj, V16(1), a1);
            a2 = _mm256_fmadd_ps(pj, V16(2), a2);
            a3 = _mm256_fmadd_ps(pj, V16(3), a3);
            a4 = _mm256_fmadd_ps(pj, V16(4), a4);
            a5 = _mm256_fmadd_ps(pj, V16(5), a5);
            a6 = _mm256_fmadd_ps(pj, V16(6), a6);
            a7 = _mm256_fmadd_ps(pj, V16(7), a7);
#undef V16
        } else {
            const float *r = (const float *)vr[i] + d0;
            a0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 24), a3);
            a4 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 32), a4);
            a5 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 40), a5);
            a6 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 48), a6);
            a7 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(r + 56), a7);
        }
    }
    _mm256_store_ps(acc, a0), _mm256_store_ps(acc + 8, a1), _mm256_store_ps(acc + 16, a2);
    _mm256_store_ps(acc + 24, a3), _mm256_store_ps(acc + 32, a4), _mm256_store_ps(acc + 40, a5);
    _mm256_store_ps(acc + 48, a6), _mm256_store_ps(acc + 56, a7);
}

/* The V step of one query over all D dims: 64 at a time in registers, the rest (D % 64, a
 * multiple of 8) one vector at a time. */
static AVX2 void flash_v(float *acc, int32_t D, const void *const *vr, bool f16, const float *p,
                         int32_t n, bool rescale, __m256 c) {
    int32_t d0 = 0;
    for (; d0 + 64 <= D; d0 += 64) {
        if (f16) {
            flash_v64(acc + d0, vr, d0, p, n, rescale, c, true);
        } else {
            flash_v64(acc + d0, vr, d0, p, n, rescale, c, false);
        }
    }
    for (; d0 < D; d0 += 8) {
        __m256 a = _mm256_load_ps(acc + d0);
        if (rescale) {
            a = _mm256_mul_ps(a, c);
        }
        for (int32_t i = 0; i < n; i++) {
            a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + i), load_kv8(f16, vr[i], d0), a);
        }
        _mm256_store_ps(acc + d0, a);
    }
}

/* Tokens [t0, t0 + n_t) x query heads [h0, h0 + nh) of a task; the caller checked the scratch. */
static AVX2 void flash_run(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                           int32_t nh) {
    const rill_kv_layout_t *kv = a->kv;
    const int32_t D = kv->head_dim, P = kv->page_size, np = D & ~31;
    const bool f16 = kv->k_dtype == RILL_DTYPE_F16;
    const __m256 scale = _mm256_set1_ps(1.0f / sqrtf((float)D));
    const int32_t nq = n_t * nh; /* query (t, i) is r = (t - t0) * nh + i */
    int32_t n_kv_max = 0;
    for (int32_t t = t0; t < t0 + n_t; t++) {
        n_kv_max = a->tok[t].n_kv > n_kv_max ? a->tok[t].n_kv : n_kv_max;
    }
    /* scratch: q (nq x D), acc (nq x D), weights (nq x FLASH_B), m/S (nq x 8), K and V rows */
    float *const qf = a->scratch, *const acc = qf + (size_t)nq * D;
    float *const pw = acc + (size_t)nq * D, *const ms = pw + (size_t)nq * FLASH_B;
    float *const kbuf = ms + (size_t)nq * 8, *const vbuf = kbuf + (size_t)FLASH_B * D;
    flash_state_t *const qst = (flash_state_t *)ms; /* query r's state: qst[r] */
    /* V is widened once per block when queries share it; one query reads the f16 rows */
    const bool v_copy = f16 && nq > 1, v_f16 = f16 && !v_copy;
    for (int32_t r = 0; r < nq; r++) {
        const float *qs = a->q + (size_t)(t0 + r / nh) * a->tok_stride + (size_t)(h0 + r % nh) * D;
        for (int32_t d = 0; d < D; d += 8) {
            __m256 v = _mm256_loadu_ps(qs + d);
            if (f16) { /* Q meets K in K's type */
                v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            }
            _mm256_store_ps(qf + (size_t)r * D + d, v);
            _mm256_store_ps(acc + (size_t)r * D + d, _mm256_setzero_ps());
        }
        qst[r] = (flash_state_t){ .m = -INFINITY, .S = 0.0f };
    }
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const float *kr[FLASH_B];
    const void *vr[FLASH_B];
    for (int32_t j0 = 0; j0 < n_kv_max; j0 += FLASH_B) {
        const int32_t nb = n_kv_max - j0 < FLASH_B ? n_kv_max - j0 : FLASH_B;
        for (int32_t i = 0; i < nb; i++) {
            const int32_t page = a->pages[(j0 + i) / P], row = (j0 + i) % P;
            const uint8_t *k0 = rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 0);
            const uint8_t *v0 = rill__kv_ptr(kv, a->pool, page, a->kv_head, row, 1);
            if (f16) {
                float *kd = kbuf + (size_t)i * D;
                for (int32_t d = 0; d < D; d += 8) {
                    _mm256_store_ps(kd + d, _mm256_cvtph_ps(_mm_loadu_si128(
                                                (const __m128i *)((const uint16_t *)k0 + d))));
                }
                kr[i] = kd;
            } else {
                kr[i] = (const float *)k0;
            }
            if (v_copy) {
                float *vd = vbuf + (size_t)i * D;
                for (int32_t d = 0; d < D; d += 8) {
                    _mm256_store_ps(vd + d, _mm256_cvtph_ps(_mm_loadu_si128(
                                                (const __m128i *)((const uint16_t *)v0 + d))));
                }
                vr[i] = vd;
            } else {
                vr[i] = v0;
            }
        }
        for (int32_t i = nb; i < ((nb + 7) & ~7); i++) { /* scores8 reads whole groups of 8 */
            kr[i] = zero_row;
        }
        /* 1. per query: scores, block max, the rescale of S and the weights */
        for (int32_t r = 0; r < nq; r++) {
            flash_state_t *st = &qst[r];
            const int32_t n = a->tok[t0 + r / nh].n_kv - j0 < nb ? a->tok[t0 + r / nh].n_kv - j0
                                                                 : nb; /* the query's slots */
            st->n = n > 0 ? n : 0;
            if (n <= 0) {
                continue;
            }
            const float *qr = qf + (size_t)r * D;
            float *p = pw + (size_t)r * FLASH_B;
            __m256 vmax = _mm256_set1_ps(-INFINITY);
            __m256 q64[8];
            if (D == 64) {
                load_q64(qr, q64);
            }
            for (int32_t c8 = 0; 8 * c8 < n; c8++) {
                __m256 sc = D == 64 ? scores8_64(kr + 8 * c8, q64) : scores8(kr + 8 * c8, qr, np);
                if (np < D) { /* the dot's tail, lane by lane */
                    _Alignas(32) float tl[8];
                    _mm256_store_ps(tl, sc);
                    for (int l = 0; l < 8; l++) {
                        tl[l] = rill__ggml_dot_tail(kr[8 * c8 + l], qr, np, D, tl[l], f16);
                    }
                    sc = _mm256_load_ps(tl);
                }
                sc = _mm256_mul_ps(sc, scale);
                _mm256_store_ps(p + 8 * c8, sc);
                const __m256 valid =
                    _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8 * c8), lane));
                vmax = _mm256_max_ps(vmax, _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), sc, valid));
            }
            __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
            m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
            m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
            const float bm = _mm_cvtss_f32(m4);
            st->rescale = bm > st->m;
            if (st->rescale) {
                st->c = _mm256_cvtss_f32(rill__avx2_expf8(_mm256_set1_ps(st->m - bm)));
                st->S *= st->c;
                st->m = bm;
            }
            const __m256 mv = _mm256_set1_ps(st->m);
            for (int32_t c8 = 0; 8 * c8 < n; c8++) {
                _mm256_store_ps(p + 8 * c8,
                                rill__avx2_expf8(_mm256_sub_ps(_mm256_load_ps(p + 8 * c8), mv)));
            }
        }
        /* 2. S += the weights in slot order, as the reference: one dependent chain per query,
         * so four queries' chains interleave where their slot counts agree */
        for (int32_t r = 0; r < nq;) {
            flash_state_t *st = &qst[r];
            const float *p = pw + (size_t)r * FLASH_B;
            const int32_t n = st[0].n;
            if (r + 4 <= nq && st[1].n == n && st[2].n == n && st[3].n == n) {
                float S0 = st[0].S, S1 = st[1].S, S2 = st[2].S, S3 = st[3].S;
                for (int32_t i = 0; i < n; i++) {
                    S0 += p[i];
                    S1 += p[FLASH_B + i];
                    S2 += p[2 * FLASH_B + i];
                    S3 += p[3 * FLASH_B + i];
                }
                st[0].S = S0, st[1].S = S1, st[2].S = S2, st[3].S = S3;
                r += 4;
            } else {
                float S = st->S;
                for (int32_t i = 0; i < n; i++) {
                    S += p[i];
                }
                st->S = S;
                r++;
            }
        }
        /* 3. the V steps */
        for (int32_t r = 0; r < nq; r++) {
            const flash_state_t *st = &qst[r];
            if (st->n > 0) {
                flash_v(acc + (size_t)r * D, D, vr, v_f16, pw + (size_t)r * FLASH_B, st->n,
                        st->rescale, _mm256_set1_ps(st->c));
            }
        }
    }
    for (int32_t r = 0; r < nq; r++) {
        const __m256 inv = _mm256_set1_ps(1.0f / qst[r].S);
        float *o = a->out + (size_t)(t0 + r / nh) * a->tok_stride + (size_t)(h0 + r % nh) * D;
        for (int32_t d = 0; d < D; d += 8) {
            _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_load_ps(acc + (size_t)r * D + d), inv));
        }
    }
}

/* Splits a run until its scratch fits: tokens first, then heads (one query always fits). */
static AVX2 void flash_split(const rill__attn_task_t *a, int32_t t0, int32_t n_t, int32_t h0,
                             int32_t nh) {
    const bool f16 = a->kv->k_dtype == RILL_DTYPE_F16;
    if (flash_floats(n_t * nh, a->kv->head_dim, f16) <= RILL__ATTN_SCRATCH || n_t * nh == 1) {
        flash_run(a, t0, n_t, h0, nh);
    } else if (n_t > 1) {
        flash_split(a, t0, n_t / 2, h0, nh);
        flash_split(a, t0 + n_t / 2, n_t - n_t / 2, h0, nh);
    } else {
        flash_split(a, t0, 1, h0, nh / 2);
        flash_split(a, t0, 1, h0 + nh / 2, nh - nh / 2);
    }
}

static AVX2 void attention_flash(const rill__attn_task_t *a) {
    if (a->kv->head_dim % 8 != 0) {
        rill__cpu_kernels_scalar()->attention_flash(a);
        return;
    }
    flash_split(a, 0, a->n_t, 0, a->n_q);
}

static const rill__cpu_kernels_t avx2_kernels = {
    .name = "avx2",
    .tile = {
        [RILL_DTYPE_F32] = tile_f32,
        [RILL_DTYPE_F16] = tile_f16,
        [RILL_DTYPE_BF16] = tile_bf16,
        [RILL_DTYPE_Q4_0] = tile_q4_0,
        [RILL_DTYPE_Q4_1] = tile_q4_1,
        [RILL_DTYPE_Q5_0] = tile_q5_0,
        [RILL_DTYPE_Q5_1] = tile_q5_1,
        [RILL_DTYPE_Q8_0] = tile_q8_0,
        [RILL_DTYPE_Q4_K] = tile_q4_K,
        [RILL_DTYPE_Q5_K] = tile_q5_K,
        [RILL_DTYPE_Q6_K] = tile_q6_K,
    },
    .tile8 = {
        [RILL_DTYPE_Q4_0] = tile8_q4_0,
    },
    .tile_gemm = {
        [RILL_DTYPE_F32] = gemm_f32,
        [RILL_DTYPE_F16] = gemm_f16,
        [RILL_DTYPE_BF16] = gemm_bf16,
        [RILL_DTYPE_Q4_K] = tiled_q4_K,
        [RILL_DTYPE_Q5_K] = tiled_q5_K,
        [RILL_DTYPE_Q6_K] = tiled_q6_K,
    },
    .tile_repack = {
        [RILL_DTYPE_Q4_K] = repack_q4_K,
    },
    .tile_repack4 = {
        [RILL_DTYPE_Q4_K] = repack4_q4_K,
    },
    .act = {
        [RILL_DTYPE_F32] = NULL,
        [RILL_DTYPE_F16] = act_f16,
        [RILL_DTYPE_BF16] = act_bf16,
        [RILL_DTYPE_Q4_0] = act_q8_0,
        [RILL_DTYPE_Q4_1] = act_q8_1,
        [RILL_DTYPE_Q5_0] = act_q8_0,
        [RILL_DTYPE_Q5_1] = act_q8_1,
        [RILL_DTYPE_Q8_0] = act_q8_0,
        [RILL_DTYPE_Q4_K] = act_q8_K,
        [RILL_DTYPE_Q5_K] = act_q8_K,
        [RILL_DTYPE_Q6_K] = act_q8_K,
    },
    .act_row_bytes = act_row_bytes,
    .rms_norm_rows = rms_norm_rows,
    .rope_apply = rope_apply,
    .swiglu = swiglu,
    .add = add,
    .to_f16 = to_f16,
    .attention = attention,
    .attention_flash = attention_flash,
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
