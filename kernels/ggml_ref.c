/*
 * ggml_ref.c - llama.cpp's CPU arithmetic, one lane at a time, and rill's flash attention
 * kernel in the same plain form (declared and specified in ggml_internal.h).
 *
 * Why a file of its own: these statements are the numerics every backend of the exact class
 * reproduces (rill_backend.h, "Numerics classes"). The reference backend computes with them,
 * the scalar kernel table calls them, and the AVX2 / AVX-512 kernels are their vector form,
 * tested bit for bit against them. They need nothing but the block and page layouts, so the
 * file is a leaf of the kernels' include graph (backend_internal.h, top comment): it cannot
 * reach the dispatch layer or a backend, and a backend cannot change them by accident.
 *
 * Where a formula below looks odd (an FMA in one product but not the other, a tail summed
 * differently from the body), it is how llama.cpp's GCC build compiled the C source; the tests
 * check each against bits recorded from llama.cpp's library. The file is compiled with
 * -ffp-contract=off (kernels/CMakeLists.txt): every FMA here is written, none is the compiler's.
 */
#include <math.h>
#include <string.h>

#include "ggml_internal.h"

/* ---- RoPE angles ---------------------------------------------------------------------------- */

void rill__rope_cos_sin(const rill_rope_t *rope, int32_t pos, float *cs) {
    const float theta_scale = powf(rope->freq_base, -2.0f / (float)rope->n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < rope->n_rot; i += 2) {
        const float t = rope->freq_scale * theta;
        cs[i] = cosf(t);
        cs[i + 1] = sinf(t);
        theta *= theta_scale;
    }
}

void rill__rope_apply(float *x, const rill_rope_t *rope, const float *cs) {
    const int32_t n_rot = rope->n_rot;
    /* NORM pairs (i, i+1); NEOX pairs (i/2, i/2 + n_rot/2); both use angle index i/2 */
    const int32_t stride = rope->mode == RILL_ROPE_NEOX ? n_rot / 2 : 1;
    for (int32_t i = 0; i < n_rot; i += 2) {
        const int32_t j = rope->mode == RILL_ROPE_NEOX ? i / 2 : i;
        const float x0 = x[j], x1 = x[j + stride];
        const float c = cs[i], s = cs[i + 1];
        /* ggml's rotate_pairs() is x0*c - x1*s and x0*s + x1*c; GCC contracted the first
         * product of each into an FMA (checked against llama.cpp's output bit for bit) */
        x[j] = fmaf(x0, c, -(x1 * s));
        x[j + stride] = fmaf(x0, s, x1 * c);
    }
}

/* ---- llama.cpp's CPU arithmetic, one lane at a time ----------------------------------------- */

static uint32_t f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static float bits_f32(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float rill__ggml_expf(float x) {
    /* ggml_v_expf's AVX2 body lane by lane: every fmaf here is one of its vfmadd/vfnmadd, the
     * integer steps are its epi32 shifts and adds, the branches its blends. */
    const float r = 0x1.8p23f;
    const float z = fmaf(x, 0x1.715476p+0f, r);
    const float n = z - r;
    const float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    const uint32_t e = f32_bits(z) << 23;
    const float k = bits_f32(e + f32_bits(1.0f));
    const float u = b * b;
    const float j = fmaf(
        fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, 0x1.ffffecp-1f * b);
    if (!(fabsf(n) > 126.0f)) { /* also NaN: the vector compare is ordered */
        return fmaf(j, k, k);
    }
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = bits_f32(g + 0x7f000000u);
    const float s2 = bits_f32(e - g);
    if (fabsf(n) > 192.0f) {
        return s1 * s1;
    }
    return fmaf(s2, j, s2) * s1;
}

float rill__ggml_silu(float x) {
    return x / (1.0f + rill__ggml_expf(0.0f - x));
}

void rill__ggml_swiglu(float *y, const float *g, const float *u, int64_t n) {
    const int64_t n8 = n & ~(int64_t)7;
    int64_t i = 0;
    for (; i < n8; i++) { /* lanes of the 8-wide vector loop */
        y[i] = rill__ggml_silu(g[i]) * u[i];
    }
    for (; i < n; i++) { /* ggml_silu_f32: libm's expf */
        y[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

void rill__ggml_rms_norm_row(float *y, const float *x, const float *w, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) {
        sum += (double)(x[i] * x[i]); /* the square is rounded to f32 first, as in ggml */
    }
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) {
        y[i] = w != NULL ? (x[i] * scale) * w[i] : x[i] * scale;
    }
}

float rill__hsum_a(const float *x) {
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    return (t0 + t2) + (t1 + t3);
}

float rill__hsum_b(const float *x) {
    const float t0 = x[0] + x[4], t1 = x[1] + x[5], t2 = x[2] + x[6], t3 = x[3] + x[7];
    return (t0 + t1) + (t2 + t3);
}

/* The 32-value body of ggml_vec_dot_f32/_f16: returns the reduced sum, *done = values used. */
static float dot_body(const float *x, const float *y, int64_t n, int64_t *done) {
    float acc[4][8] = { { 0 } };
    const int64_t np = n & ~(int64_t)31;
    for (int64_t i = 0; i < np; i += 32) {
        for (int a = 0; a < 4; a++) {
            for (int l = 0; l < 8; l++) {
                acc[a][l] = fmaf(x[i + 8 * a + l], y[i + 8 * a + l], acc[a][l]);
            }
        }
    }
    float s[8];
    for (int l = 0; l < 8; l++) {
        s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    *done = np;
    return rill__hsum_b(s);
}

float rill__ggml_dot_tail(const float *x, const float *y, int64_t i, int64_t n, float sum,
                          bool f16) {
    if (f16) { /* ggml_vec_dot_f16 keeps its sum in ggml_float */
        double s = sum;
        for (; i < n; i++) {
            s += (double)(x[i] * y[i]);
        }
        return (float)s;
    }
    /* GCC vectorized the tail's products in groups of 8 and 4 (rounded, then added in order)
     * and contracted the last n % 4 into scalar FMAs. */
    const int64_t fused = n - (n - i) % 4;
    for (; i < fused; i++) {
        sum += x[i] * y[i];
    }
    for (; i < n; i++) {
        sum = fmaf(x[i], y[i], sum);
    }
    return sum;
}

float rill__ggml_dot_f32(const float *x, const float *y, int64_t n) {
    int64_t i;
    const float body = dot_body(x, y, n, &i);
    return rill__ggml_dot_tail(x, y, i, n, body, false);
}

float rill__ggml_dot_f16(const float *x, const float *y, int64_t n) {
    int64_t i;
    const float body = dot_body(x, y, n, &i);
    return rill__ggml_dot_tail(x, y, i, n, body, true);
}

static float widen(rill_dtype_t wt, const void *w, int64_t i) {
    if (wt == RILL_DTYPE_F16) {
        return rill_fp16_to_f32(((const uint16_t *)w)[i]);
    }
    if (wt == RILL_DTYPE_BF16) {
        return rill_bf16_to_f32(((const uint16_t *)w)[i]);
    }
    return ((const float *)w)[i];
}

float rill__ggml_dot_float(rill_dtype_t wt, const void *w, const float *a, int64_t n, bool gemm) {
    if (gemm) { /* tinyBLAS<8, __m256, ...>: n % 8 == 0 */
        float acc[8] = { 0 };
        for (int64_t i = 0; i < n; i += 8) {
            for (int l = 0; l < 8; l++) {
                acc[l] = fmaf(widen(wt, w, i + l), a[i + l], acc[l]);
            }
        }
        return rill__hsum_a(acc);
    }
    float acc[4][8] = { { 0 } };
    const int64_t np = n & ~(int64_t)31;
    for (int64_t i = 0; i < np; i += 32) {
        for (int b = 0; b < 4; b++) {
            for (int l = 0; l < 8; l++) {
                const int64_t k = i + 8 * b + l;
                acc[b][l] = fmaf(widen(wt, w, k), a[k], acc[b][l]);
            }
        }
    }
    float s[8];
    for (int l = 0; l < 8; l++) {
        s[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    }
    if (wt == RILL_DTYPE_F32) {
        return rill__ggml_dot_tail(w, a, np, n, rill__hsum_b(s), false);
    }
    double sum = wt == RILL_DTYPE_BF16 ? rill__hsum_a(s) : rill__hsum_b(s);
    for (int64_t i = np; i < n; i++) {
        sum += (double)(widen(wt, w, i) * a[i]);
    }
    return (float)sum;
}

/* ---- matmul dot products in llama.cpp's orders --------------------------------------------- */

rill__mm_path_t rill__mm_path(rill_dtype_t t, int64_t ne0, int64_t ne1, bool embedding,
                              int64_t n_tok, int64_t tok) {
    const bool repacked = ne1 % 8 == 0 && !embedding;
    switch (t) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
    case RILL_DTYPE_BF16:
        return n_tok >= 2 && ne0 % 8 == 0 && ne1 % 4 == 0 ? RILL__MM_GEMM : RILL__MM_VEC;
    case RILL_DTYPE_Q4_0:
        return repacked ? RILL__MM_REPACK : RILL__MM_VEC;
    case RILL_DTYPE_Q4_K:
        if (repacked) {
            return n_tok >= 4 && tok < n_tok - n_tok % 4 ? RILL__MM_REPACK4 : RILL__MM_REPACK;
        }
        return n_tok >= 8 ? RILL__MM_GEMM : RILL__MM_VEC;
    case RILL_DTYPE_Q5_K:
    case RILL_DTYPE_Q6_K:
        return n_tok >= 8 ? RILL__MM_GEMM : RILL__MM_VEC;
    default:
        return RILL__MM_VEC;
    }
}

/* Sum of the products of bytes [b0, b0 + 4) of x and y: one int32 lane of maddubs + madd. */
static int32_t lane4(const uint8_t *x, const int8_t *y, int b0) {
    return x[b0] * y[b0] + x[b0 + 1] * y[b0 + 1] + x[b0 + 2] * y[b0 + 2] + x[b0 + 3] * y[b0 + 3];
}

static int32_t lane4s(const int8_t *x, const int8_t *y, int b0) {
    return x[b0] * y[b0] + x[b0 + 1] * y[b0 + 1] + x[b0 + 2] * y[b0 + 2] + x[b0 + 3] * y[b0 + 3];
}

/* (x0 + x2) + (x1 + x3): llama.cpp's hsum of the 4-lane K-quant min terms. */
static float hsum_4(const float *x) {
    return (x[0] + x[2]) + (x[1] + x[3]);
}

/* Q4_0 / Q5_0 / Q8_0 x Q8_0: per block, 8 lanes of 4 products of the signed codes (q - 8,
 * q - 16, q), acc_l = fma(d_w d_a, lane_l, acc_l) (ggml_vec_dot_q4_0/q5_0/q8_0_q8_0, and
 * tinyBLAS for Q4_0/Q5_0/Q8_0 batches, which forms the same lanes and steps); repacked Q4_0: the
 * block's whole sum, one FMA per block. */
static float dot_q8_lanes(rill_dtype_t wt, const void *w, const block_q8_0 *a, int64_t nb,
                          bool repack) {
    float acc[8] = { 0 }, racc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int8_t q[32];
        uint16_t dh;
        if (wt == RILL_DTYPE_Q4_0) {
            const block_q4_0 *x = (const block_q4_0 *)w + i;
            for (int b = 0; b < 16; b++) {
                q[b] = (int8_t)((x->qs[b] & 0xF) - 8);
                q[b + 16] = (int8_t)((x->qs[b] >> 4) - 8);
            }
            dh = x->d;
        } else if (wt == RILL_DTYPE_Q5_0) {
            const block_q5_0 *x = (const block_q5_0 *)w + i;
            uint8_t u[32];
            rill__q5_codes(x->qs, x->qh, u);
            for (int b = 0; b < 32; b++) {
                q[b] = (int8_t)(u[b] - 16);
            }
            dh = x->d;
        } else {
            const block_q8_0 *x = (const block_q8_0 *)w + i;
            memcpy(q, x->qs, 32);
            dh = x->d;
        }
        const float d = rill_fp16_to_f32(dh) * rill_fp16_to_f32(a[i].d);
        if (repack) {
            int32_t isum = 0;
            for (int l = 0; l < 8; l++) {
                isum += lane4s(q, a[i].qs, 4 * l);
            }
            racc = fmaf((float)isum, d, racc);
            continue;
        }
        for (int l = 0; l < 8; l++) {
            acc[l] = fmaf(d, (float)lane4s(q, a[i].qs, 4 * l), acc[l]);
        }
    }
    return repack ? racc : rill__hsum_a(acc);
}

/* Q4_1 / Q5_1 x Q8_1 (ggml_vec_dot_q4_1/q5_1_q8_1): lanes as above with unsigned codes, plus
 * the min term summed separately: summs = fma(m_w, s_a, summs). */
static float dot_q4_1_lanes(rill_dtype_t wt, const void *w, const block_q8_1 *a, int64_t nb) {
    float acc[8] = { 0 }, summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t q[32];
        uint16_t dh, mh;
        if (wt == RILL_DTYPE_Q4_1) {
            const block_q4_1 *x = (const block_q4_1 *)w + i;
            for (int b = 0; b < 16; b++) {
                q[b] = x->qs[b] & 0xF;
                q[b + 16] = x->qs[b] >> 4;
            }
            dh = x->d, mh = x->m;
        } else {
            const block_q5_1 *x = (const block_q5_1 *)w + i;
            rill__q5_codes(x->qs, x->qh, q);
            dh = x->d, mh = x->m;
        }
        summs = fmaf(rill_fp16_to_f32(mh), rill_fp16_to_f32(a[i].s), summs);
        const float d = rill_fp16_to_f32(dh) * rill_fp16_to_f32(a[i].d);
        for (int l = 0; l < 8; l++) {
            acc[l] = fmaf(d, (float)lane4(q, a[i].qs, 4 * l), acc[l]);
        }
    }
    return rill__hsum_a(acc) + summs;
}

/* Q4_K / Q5_K x Q8_K. codes(x, i, q) unpacks super-block i's 256 codes in value order. The
 * integer parts: sub-block pair j (64 values) gives 8 lanes, lane l = sc_2j * (4 products of
 * values 64j + 4l..) + sc_2j+1 * (4 products of values 64j + 32 + 4l..); the min terms pair the
 * sub-blocks the same way: mp_j = m_2j S_2j + m_2j+1 S_2j+1, S_s the sum of the 32 act codes. */
static float dot_k4(rill_dtype_t wt, const void *w, const block_q8_K *a, int64_t nb,
                    rill__mm_path_t path) {
    float acc[8] = { 0 }, accm[4] = { 0 }, summs = 0.0f, kacc = 0.0f, kaccm = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t q[QK_K];
        const uint8_t *scales;
        uint16_t dh, dminh;
        if (wt == RILL_DTYPE_Q4_K) {
            const block_q4_K *x = (const block_q4_K *)w + i;
            for (int c = 0; c < 4; c++) {
                for (int b = 0; b < 32; b++) {
                    q[64 * c + b] = x->qs[32 * c + b] & 0xF;
                    q[64 * c + 32 + b] = x->qs[32 * c + b] >> 4;
                }
            }
            scales = x->scales, dh = x->d, dminh = x->dmin;
        } else {
            const block_q5_K *x = (const block_q5_K *)w + i;
            for (int c = 0; c < 4; c++) {
                for (int b = 0; b < 32; b++) {
                    const int hb = x->qh[b] >> (2 * c);
                    q[64 * c + b] = (uint8_t)((x->qs[32 * c + b] & 0xF) | ((hb & 1) << 4));
                    q[64 * c + 32 + b] =
                        (uint8_t)((x->qs[32 * c + b] >> 4) | (((hb >> 1) & 1) << 4));
                }
            }
            scales = x->scales, dh = x->d, dminh = x->dmin;
        }
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++) {
            rill__get_scale_min_k4(j, scales, &sc[j], &mn[j]);
        }
        int32_t lanes[8] = { 0 }, pair_s1[4], mp[4];
        for (int j = 0; j < 4; j++) {
            pair_s1[j] = 0;
            for (int l = 0; l < 8; l++) {
                const int32_t v = sc[2 * j] * lane4(q, a[i].qs, 64 * j + 4 * l) +
                                  sc[2 * j + 1] * lane4(q, a[i].qs, 64 * j + 32 + 4 * l);
                lanes[l] += v;
                pair_s1[j] += v;
            }
            mp[j] = mn[2 * j] * (a[i].bsums[4 * j] + a[i].bsums[4 * j + 1]) +
                    mn[2 * j + 1] * (a[i].bsums[4 * j + 2] + a[i].bsums[4 * j + 3]);
        }
        const float dw = rill_fp16_to_f32(dh), dminw = rill_fp16_to_f32(dminh), da = a[i].d;
        const int32_t s1 = pair_s1[0] + pair_s1[1] + pair_s1[2] + pair_s1[3];
        const int32_t s2 = mp[0] + mp[1] + mp[2] + mp[3];
        if (path == RILL__MM_GEMM) { /* the tiled kernel */
            kacc = fmaf(fmaf(-dminw, (float)s2, dw * (float)s1), da, kacc);
        } else if (path == RILL__MM_REPACK) { /* q4_K_8x8 gemv: per block */
            kacc = fmaf((float)s1, dw * da, kacc);
            kaccm = fmaf((float)s2, dminw * da, kaccm);
        } else if (path == RILL__MM_REPACK4) { /* q4_K_8x8 gemm: per pair of sub-blocks */
            for (int j = 0; j < 4; j++) {
                kacc = fmaf((float)pair_s1[j], dw * da, kacc);
                kaccm = fmaf((float)mp[j], dminw * da, kaccm);
            }
        } else { /* ggml_vec_dot_q4_K / q5_K */
            const float d = da * dw, dmin = -da * dminw;
            for (int l = 0; l < 8; l++) {
                acc[l] = fmaf(d, (float)lanes[l], acc[l]);
            }
            if (wt == RILL_DTYPE_Q4_K) {
                for (int j = 0; j < 4; j++) {
                    accm[j] = fmaf(dmin, (float)mp[j], accm[j]);
                }
            } else {
                summs = fmaf(dmin, (float)s2, summs);
            }
        }
    }
    if (path == RILL__MM_GEMM) {
        return kacc;
    }
    if (path == RILL__MM_REPACK || path == RILL__MM_REPACK4) {
        return kacc - kaccm;
    }
    return rill__hsum_a(acc) + (wt == RILL_DTYPE_Q4_K ? hsum_4(accm) : summs);
}

/* Q6_K x Q8_K: unsigned 6-bit codes; per 32 values (128h + 32k..) 8 lanes of 4 products times
 * the 16-value scale of their half; minus, per lane l, 32 (bsum_2l sc_2l + bsum_2l+1 sc_2l+1)
 * (ggml_vec_dot_q6_K); the tiled kernel uses the lanes' total. */
static float dot_q6_K_lanes(const block_q6_K *x, const block_q8_K *a, int64_t nb,
                            rill__mm_path_t path) {
    float acc[8] = { 0 }, kacc = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        int32_t lanes[8] = { 0 };
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            for (int k = 0; k < 4; k++) {
                uint8_t q[32];
                for (int b = 0; b < 32; b++) {
                    const uint8_t lo = k & 1 ? ql[32 + b] : ql[b];
                    q[b] =
                        (uint8_t)(((k < 2 ? lo : lo >> 4) & 0xF) | (((qh[b] >> (2 * k)) & 3) << 4));
                }
                const int s = 8 * h + 2 * k;
                for (int l = 0; l < 8; l++) {
                    lanes[l] +=
                        x[i].scales[s + (l >= 4)] * lane4(q, a[i].qs + 128 * h + 32 * k, 4 * l);
                }
            }
        }
        int32_t s1 = 0;
        for (int l = 0; l < 8; l++) {
            lanes[l] -= 32 * (a[i].bsums[2 * l] * x[i].scales[2 * l] +
                              a[i].bsums[2 * l + 1] * x[i].scales[2 * l + 1]);
            s1 += lanes[l];
        }
        const float dw = rill_fp16_to_f32(x[i].d);
        if (path == RILL__MM_GEMM) {
            kacc = fmaf(dw * (float)s1, a[i].d, kacc);
            continue;
        }
        const float d = a[i].d * dw;
        for (int l = 0; l < 8; l++) {
            acc[l] = fmaf(d, (float)lanes[l], acc[l]);
        }
    }
    return path == RILL__MM_GEMM ? kacc : rill__hsum_a(acc);
}

float rill__dot_ggml(rill_dtype_t wt, const void *w, const void *act, int64_t n,
                     rill__mm_path_t path) {
    switch (wt) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
    case RILL_DTYPE_BF16:
        return rill__ggml_dot_float(wt, w, act, n, path == RILL__MM_GEMM);
    case RILL_DTYPE_Q4_0:
    case RILL_DTYPE_Q5_0:
    case RILL_DTYPE_Q8_0:
        return dot_q8_lanes(wt, w, act, n / QK8_0, path == RILL__MM_REPACK);
    case RILL_DTYPE_Q4_1:
    case RILL_DTYPE_Q5_1:
        return dot_q4_1_lanes(wt, w, act, n / QK4_1);
    case RILL_DTYPE_Q4_K:
    case RILL_DTYPE_Q5_K:
        return dot_k4(wt, w, act, n / QK_K, path);
    case RILL_DTYPE_Q6_K:
        return dot_q6_K_lanes(w, act, n / QK_K, path);
    default: /* activation-only types are never weights (callers check) */
        return 0.0f;
    }
}

static void kv_row(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                   int32_t kv_head, int32_t slot, int v, float *dst) {
    const uint8_t *p =
        rill__kv_ptr(kv, pool, pages[slot / kv->page_size], kv_head, slot % kv->page_size, v);
    (void)rill_dequantize_row(v ? kv->v_dtype : kv->k_dtype, p, dst, kv->head_dim);
}

static float round_f16(float x) {
    return rill_fp16_to_f32(rill_f32_to_fp16(x));
}

static bool kv_quantized(rill_dtype_t t) {
    return t == RILL_DTYPE_Q8_0 || t == RILL_DTYPE_Q4_0;
}

/* The query as K's dot products read it: F16 K, q rounded to f16 (ggml converts src1); F32 K,
 * q itself; Q8_0 / Q4_0 K, q quantized to Q8_0 (their vec_dot type) in qa. */
typedef struct kq_query {
    float qr[RILL_KV_MAX_HEAD_DIM];
    block_q8_0 qa[RILL_KV_MAX_HEAD_DIM / QK8_0];
} kq_query_t;

static void kq_prepare(const rill_kv_layout_t *kv, const float *q, kq_query_t *kq) {
    if (kv_quantized(kv->k_dtype)) {
        rill__act_quantize_ref(kv->k_dtype, q, kq->qa, kv->head_dim);
        return;
    }
    for (int32_t d = 0; d < kv->head_dim; d++) {
        kq->qr[d] = kv->k_dtype == RILL_DTYPE_F16 ? round_f16(q[d]) : q[d];
    }
}

/* dot(K_slot, q) as llama.cpp forms it for K's type (no scale). */
static float kq_dot(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                    int32_t kv_head, int32_t slot, const kq_query_t *kq) {
    const int32_t D = kv->head_dim;
    if (kv_quantized(kv->k_dtype)) {
        const uint8_t *p =
            rill__kv_ptr(kv, pool, pages[slot / kv->page_size], kv_head, slot % kv->page_size, 0);
        return rill__dot_ggml(kv->k_dtype, p, kq->qa, D, RILL__MM_VEC);
    }
    float kr[RILL_KV_MAX_HEAD_DIM];
    kv_row(kv, pool, pages, kv_head, slot, 0, kr);
    return kv->k_dtype == RILL_DTYPE_F16 ? rill__ggml_dot_f16(kr, kq->qr, D)
                                         : rill__ggml_dot_f32(kr, kq->qr, D);
}

/* w_j of rill__attention_head_ref: the scaled score with the mask's +0 (which turns -0 to +0). */
static float attn_logit(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                        int32_t kv_head, int32_t slot, const kq_query_t *kq, float scale) {
    return kq_dot(kv, pool, pages, kv_head, slot, kq) * scale + 0.0f;
}

void rill__attention_head_ref(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                              int32_t kv_head, int32_t n_kv, bool batched, const float *q,
                              float *out) {
    const int32_t D = kv->head_dim;
    const bool f16 = kv->v_dtype == RILL_DTYPE_F16;
    const float scale = 1.0f / sqrtf((float)D);
    float vr[RILL_KV_MAX_HEAD_DIM];
    kq_query_t kq; /* Q meets K in K's vec_dot type */
    kq_prepare(kv, q, &kq);
    float max = -INFINITY;
    for (int32_t j = 0; j < n_kv; j++) {
        const float w = attn_logit(kv, pool, pages, kv_head, j, &kq, scale);
        max = max > w ? max : w; /* ggml's MAX(max, w) */
    }
    double sum = 0.0;
    for (int32_t j0 = 0; j0 < n_kv; j0 += 8) {
        float e[8] = { 0 }; /* masked slots: exp(-inf) = 0 */
        for (int32_t l = 0; l < 8 && j0 + l < n_kv; l++) {
            e[l] = rill__ggml_expf(attn_logit(kv, pool, pages, kv_head, j0 + l, &kq, scale) - max);
        }
        sum += (double)rill__hsum_a(e);
    }
    const float inv = (float)(1.0 / sum);
    /* lane accumulators: slot j in lane j % 8 (batched) or ((j / 8) % 4) * 8 + j % 8 */
    float acc[32][RILL_KV_MAX_HEAD_DIM];
    const int32_t n_lanes = batched ? 8 : 32;
    for (int32_t l = 0; l < n_lanes; l++) {
        for (int32_t d = 0; d < D; d++) {
            acc[l][d] = 0.0f;
        }
    }
    for (int32_t j = 0; j < n_kv; j++) {
        float p = rill__ggml_expf(attn_logit(kv, pool, pages, kv_head, j, &kq, scale) - max) * inv;
        p = f16 ? round_f16(p) : p; /* KQ is converted to V's type (a quantized V: kept f32) */
        const int32_t lane = batched ? j % 8 : j % 32;
        kv_row(kv, pool, pages, kv_head, j, 1, vr);
        for (int32_t d = 0; d < D; d++) {
            acc[lane][d] = fmaf(p, vr[d], acc[lane][d]);
        }
    }
    for (int32_t d = 0; d < D; d++) {
        float s[8];
        for (int32_t l = 0; l < 8; l++) {
            s[l] = batched ? acc[l][d]
                           : (acc[l][d] + acc[16 + l][d]) + (acc[8 + l][d] + acc[24 + l][d]);
        }
        out[d] = batched ? rill__hsum_a(s) : rill__hsum_b(s);
    }
}

void rill__attention_head_flash_ref(const rill_kv_layout_t *kv, const void *pool,
                                    const int32_t *pages, int32_t kv_head, int32_t n_kv,
                                    const float *q, float *out) {
    const int32_t D = kv->head_dim;
    const float scale = 1.0f / sqrtf((float)D);
    float vr[RILL_KV_MAX_HEAD_DIM], acc[RILL_KV_MAX_HEAD_DIM], s[RILL_ATTN_FLASH_BLOCK];
    kq_query_t kq;
    kq_prepare(kv, q, &kq);
    for (int32_t d = 0; d < D; d++) {
        acc[d] = 0.0f;
    }
    float m = -INFINITY, sum = 0.0f;
    for (int32_t j0 = 0; j0 < n_kv; j0 += RILL_ATTN_FLASH_BLOCK) {
        const int32_t nb = n_kv - j0 < RILL_ATTN_FLASH_BLOCK ? n_kv - j0 : RILL_ATTN_FLASH_BLOCK;
        float bm = -INFINITY;
        for (int32_t i = 0; i < nb; i++) {
            s[i] = kq_dot(kv, pool, pages, kv_head, j0 + i, &kq) * scale;
            bm = bm > s[i] ? bm : s[i];
        }
        if (bm > m) { /* the first block too: c = exp(-inf) = 0 on zeros */
            const float c = rill__ggml_expf(m - bm);
            sum *= c;
            for (int32_t d = 0; d < D; d++) {
                acc[d] *= c;
            }
            m = bm;
        }
        for (int32_t i = 0; i < nb; i++) {
            const float p = rill__ggml_expf(s[i] - m);
            sum += p;
            kv_row(kv, pool, pages, kv_head, j0 + i, 1, vr);
            for (int32_t d = 0; d < D; d++) {
                acc[d] = fmaf(p, vr[d], acc[d]);
            }
        }
    }
    const float inv = 1.0f / sum;
    for (int32_t d = 0; d < D; d++) {
        out[d] = acc[d] * inv;
    }
}
