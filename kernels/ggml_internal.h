/*
 * ggml_internal.h - llama.cpp's CPU arithmetic stated one lane at a time (ggml_ref.c).
 *
 * What ggml-cpu (llama.cpp 0c1e57098, the portable AVX2 + FMA + F16C build, GCC -O3, which
 * contracts a*b+c into FMA wherever it may) computes, written as plain C so that the reference
 * backend, the scalar kernels and the AVX2 / AVX-512 kernels can all produce its bits: RoPE's
 * angles and rotation, ggml's exp, SiLU and SwiGLU, RMSNorm, the dot products of every matmul
 * kernel llama.cpp may pick, its non-flash attention, and rill's own flash attention kernel
 * (rill_backend.h, Numerics). The reference backend computes with these; the scalar table
 * reuses them; each SIMD kernel is their vector form and is tested bit for bit against them.
 *
 * A leaf: ggml_ref.c includes only this header, which includes only the public headers
 * (rill_backend.h, rill_quant.h, core's rill_dtype.h) and the layout headers (quant_internal.h:
 * the GGML block structs; kv_internal.h: KV page addresses). It knows no backend, no handle and
 * no weight struct. Private to kernels/ and its tests. Where it sits among the other headers:
 * kernels/backend_internal.h, top comment.
 *
 * Thread safety: every function is pure; any thread.
 */
#ifndef RILL_GGML_INTERNAL_H
#define RILL_GGML_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "kv_internal.h"
#include "quant_internal.h"
#include "rill_backend.h"

/* ---- RoPE ------------------------------------------------------------------------------------ */

/* cos/sin of every rotary pair for position pos (may be negative for a shift), as ggml builds
 * them: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i), theta_i = pos * freq_scale * base^(-2i /
 * n_rot) with the powers formed by repeated f32 multiplication. cs has n_rot entries. */
void rill__rope_cos_sin(const rill_rope_t *rope, int32_t pos, float *cs);

/* Rotates one head vector x[head_dim] with the table from rill__rope_cos_sin(), rounding as
 * llama.cpp's build does: x0' = fma(x0, c, -(x1 s)), x1' = fma(x0, s, x1 c). */
void rill__rope_apply(float *x, const rill_rope_t *rope, const float *cs);

/* ---- elementwise and row ops ----------------------------------------------------------------- */

/* ggml_v_expf (AVX2), one lane: the Arm-optimized-routines exp with ggml's constants, ~1.5 ulp.
 * NaN in, NaN out; x <= -104 gives 0 (-INFINITY too); x >= 88.8 gives +inf. */
float rill__ggml_expf(float x);

/* ggml_v_silu, one lane: x / (1 + ggml_expf(0 - x)). */
float rill__ggml_silu(float x);

/* ggml_vec_swiglu_f32 over n values: y = silu(g) * u with the vector silu for every full group
 * of 8 from the start and libm's expf for the last n % 8 (llama.cpp's scalar tail). */
void rill__ggml_swiglu(float *y, const float *g, const float *u, int64_t n);

/* ggml_compute_forward_rms_norm_f32 (+ ggml_mul by w): sum of the f32 squares in double, in
 * order; scale = 1 / sqrtf((float)(sum / n) + eps); y = (x * scale) * w. y may equal x. */
void rill__ggml_rms_norm_row(float *y, const float *x, const float *w, int64_t n, float eps);

/* ---- dot products ---------------------------------------------------------------------------- */

/* ggml_vec_dot_f32 (AVX2): four 8-lane FMA accumulators over each 32 values, value i in
 * accumulator (i / 8) % 4, lane i % 8; then ((a0 + a2) + (a1 + a3)), the halves added and the
 * lanes as (t0 + t1) + (t2 + t3). The n % 32 tail is added after that, one value at a time:
 * rounded products for all but the last n % 4 values, FMAs for those (how GCC compiled it). */
float rill__ggml_dot_f32(const float *x, const float *y, int64_t n);

/* ggml_vec_dot_f16 (AVX2) on values already widened from f16: the same 32-value body, with
 * the n % 32 tail summed in double. */
float rill__ggml_dot_f16(const float *x, const float *y, int64_t n);

/* The tail of rill__ggml_dot_f32 (f16 false) or _f16 (true): values [i, n) added to sum, the
 * reduced 32-value body. For kernels that vectorize the body themselves. */
float rill__ggml_dot_tail(const float *x, const float *y, int64_t i, int64_t n, float sum,
                          bool f16);

/* One dot product of a float weight row w (F32, F16 or BF16, n values) with an act row a (the
 * values already rounded to w's type) as llama.cpp forms it: gemm true is tinyBLAS (its kernel
 * for 2+ tokens when n % 8 == 0 and the weight has a multiple of 4 rows: one 8-lane FMA
 * accumulator, hsum_a), gemm false ggml_vec_dot_f32 / _f16 / _bf16 (one token; BF16 reduces
 * with hsum_a and, like F16, sums its tail in double). */
float rill__ggml_dot_float(rill_dtype_t wt, const void *w, const float *a, int64_t n, bool gemm);

/* The horizontal sums of llama.cpp's AVX2 code, for 8 lanes x[0..7], t_i = x_i + x_{i+4}:
 *   hsum_a = (t0 + t2) + (t1 + t3)   softmax chunks (ggml_vec_soft_max_f32), tinyBLAS, q8 dots
 *   hsum_b = (t0 + t1) + (t2 + t3)   GGML_F32x8_REDUCE (two hadds): ggml_vec_dot_f32/_f16 */
float rill__hsum_a(const float *x);
float rill__hsum_b(const float *x);

/* ---- matmul: which kernel, and its dot product ---------------------------------------------- */

/* llama.cpp's CPU matmul kernels, which round differently; which one runs depends on the
 * weight's type and shape and on the batch (rill__mm_path). */
typedef enum rill__mm_path {
    RILL__MM_VEC = 0,    /* ggml_vec_dot_<type> */
    RILL__MM_GEMM = 1,   /* tinyBLAS (F32/F16/BF16), the tiled K-quant kernel (Q4_K/Q5_K/Q6_K) */
    RILL__MM_REPACK = 2, /* repacked weights' gemv: q4_0_8x8 (all tokens), q4_K_8x8 */
    RILL__MM_REPACK4 = 3 /* q4_K_8x8's gemm: the tokens of a batch in whole groups of 4 */
} rill__mm_path_t;

/* The kernel llama.cpp (AVX2 build) runs for token tok of an n_tok-token matmul with a weight of
 * type t, ne0 values per row, ne1 rows; embedding: the weight is the token embedding, which
 * llama.cpp never repacks (rill_weight_mark_embedding):
 *   F32/F16/BF16  GEMM from 2 tokens when ne0 % 8 == 0 and ne1 % 4 == 0, else VEC;
 *   Q4_0          REPACK when ne1 % 8 == 0 (never for the embedding), else VEC;
 *   Q4_K          when ne1 % 8 == 0 (not the embedding): REPACK4 for tokens below
 *                 n_tok - n_tok % 4 once n_tok >= 4, REPACK for the rest; else as Q5_K;
 *   Q5_K, Q6_K    GEMM from 8 tokens, else VEC;
 *   Q4_1, Q5_0, Q5_1, Q8_0  VEC (their other kernels, tinyBLAS for Q5_0/Q8_0, give the same
 *                 bits). */
rill__mm_path_t rill__mm_path(rill_dtype_t t, int64_t ne0, int64_t ne1, bool embedding,
                              int64_t n_tok, int64_t tok);

/* One dot product of weight row w (n values of type wt) with an act row as
 * rill__act_quantize_ref writes it, exactly as llama.cpp's kernel `path` forms it: the same
 * integer lane sums, f32 roundings and FMAs. The AVX2 tiles are its vector form. */
float rill__dot_ggml(rill_dtype_t wt, const void *w, const void *act, int64_t n,
                     rill__mm_path_t path);

/* ---- attention ------------------------------------------------------------------------------- */

/* Attention of one query head over n_kv slots of one KV head, as llama.cpp computes it without
 * flash attention (ggml_mul_mat(K, Q), ggml_soft_max_ext, ggml_mul_mat(V, KQ)):
 *   s_j  = ggml_dot(K_j, q)                   (F16 pool: q rounded to f16 first, the f16 dot)
 *   w_j  = s_j * scale + 0                    (soft_max_ext: scale, then the causal mask's 0)
 *   e_j  = ggml_expf(w_j - max_j w_j)         sum: hsum_a of each 8 slots from slot 0, in double
 *   p_j  = e_j * (float)(1 / sum)             (F16 pool: rounded to f16, V's type)
 *   out  = sum_j p_j V_j  over slot lanes: batched (the batch has >= 2 tokens: tinyBLAS) slot
 *          j in lane j % 8 and hsum_a; else (one token: ggml_vec_dot_f32/_f16) the dot order.
 * Slots past n_kv are llama.cpp's masked (-inf) cells: exact zeros in every sum, so the result
 * does not depend on how far llama.cpp pads its KV view (a multiple of 256). pages is the
 * sequence's page table; out and q are (D,). Recomputes instead of storing: no scratch. */
void rill__attention_head_ref(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                              int32_t kv_head, int32_t n_kv, bool batched, const float *q,
                              float *out);

/* The flash kernel (RILL_ATTN_FLASH) for one query head over n_kv slots of one KV head, as
 * rill_backend.h's Numerics states it: blocks of RILL_ATTN_FLASH_BLOCK slots from slot 0; per
 * block the scores s_j = dot(K_j, q) * scale (the dots above; F16 pool: q rounded to f16), the
 * block max bm (sequential, bm > s ? bm : s); if bm > m: c = ggml_expf(m - bm), S *= c, acc *= c,
 * m = bm; then per slot in order p = ggml_expf(s_j - m), S += p, acc[d] = fmaf(p, V_j[d],
 * acc[d]); out = acc * (1 / S). All f32; no dependence on the batch. The scalar and AVX2
 * kernels give these bits. pages is the sequence's page table; out and q are (D,). */
void rill__attention_head_flash_ref(const rill_kv_layout_t *kv, const void *pool,
                                    const int32_t *pages, int32_t kv_head, int32_t n_kv,
                                    const float *q, float *out);

#endif /* RILL_GGML_INTERNAL_H */
