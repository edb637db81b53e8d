/*
 * cpu_scalar.c - the portable kernel table of the fast CPU backend.
 *
 * It is the fallback for CPUs without AVX2 and the second opinion in tests. Its dot products,
 * RMSNorm, SwiGLU, RoPE and attention (both kernels) are the reference backend's lane-by-lane
 * statements of llama.cpp's arithmetic and of the flash kernel's (ggml_ref.c): there is no value in
 * a second scalar formulation, and sharing them means the scalar fast path differs from the
 * reference backend only in threading and tiling, which is exactly what the tests then isolate. So
 * this table produces the AVX2 table's bits for every op, only slower.
 */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

static void act_quant(rill_dtype_t wt, const float *x, void *act, int64_t n) {
    rill__act_quantize_ref(wt, x, act, n);
}

/* One tile of dot products on llama.cpp kernel `path` (ggml_ref.c states them). */
static void tile_dot(rill_dtype_t wt, rill__mm_path_t path, int64_t n, const void *w,
                     const void *act, size_t as, int nt, float *y, int64_t ys) {
    for (int t = 0; t < nt; t++) {
        y[t * ys] = rill__dot_ggml(wt, w, (const char *)act + (size_t)t * as, n, path);
    }
}

/* One named wrapper per weight type and kernel, so that the table holds plain function
 * pointers. */
#define SCALAR_TYPE(T)                                                                             \
    static void tile_##T(int64_t n, const void *w, const void *act, size_t as, int nt, float *y,   \
                         int64_t ys) {                                                             \
        tile_dot(RILL_DTYPE_##T, RILL__MM_VEC, n, w, act, as, nt, y, ys);                          \
    }                                                                                              \
    static void gemm_##T(int64_t n, const void *w, const void *act, size_t as, int nt, float *y,   \
                         int64_t ys) {                                                             \
        tile_dot(RILL_DTYPE_##T, RILL__MM_GEMM, n, w, act, as, nt, y, ys);                         \
    }                                                                                              \
    static void repack_##T(int64_t n, const void *w, const void *act, size_t as, int nt, float *y, \
                           int64_t ys) {                                                           \
        tile_dot(RILL_DTYPE_##T, RILL__MM_REPACK, n, w, act, as, nt, y, ys);                       \
    }                                                                                              \
    static void repack4_##T(int64_t n, const void *w, const void *act, size_t as, int nt,          \
                            float *y, int64_t ys) {                                                \
        tile_dot(RILL_DTYPE_##T, RILL__MM_REPACK4, n, w, act, as, nt, y, ys);                      \
    }                                                                                              \
    static void act_##T(const float *x, void *act, int64_t n) {                                    \
        act_quant(RILL_DTYPE_##T, x, act, n);                                                      \
    }

SCALAR_TYPE(F32)
SCALAR_TYPE(F16)
SCALAR_TYPE(BF16)
SCALAR_TYPE(Q4_0)
SCALAR_TYPE(Q4_1)
SCALAR_TYPE(Q5_0)
SCALAR_TYPE(Q5_1)
SCALAR_TYPE(Q8_0)
SCALAR_TYPE(Q4_K)
SCALAR_TYPE(Q5_K)
SCALAR_TYPE(Q6_K)
#undef SCALAR_TYPE

static void rms_norm_rows(float *y, const float *x, const float *w, int64_t n_rows, int64_t n,
                          float eps) {
    for (int64_t r = 0; r < n_rows; r++) {
        rill__ggml_rms_norm_row(y + r * n, x + r * n, w, n, eps);
    }
}

static void swiglu(float *y, const float *g, const float *u, int64_t n) {
    rill__ggml_swiglu(y, g, u, n);
}

static void add(float *y, const float *a, const float *c, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        y[i] = a[i] + c[i];
    }
}

static void to_f16(uint16_t *dst, const float *src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        dst[i] = rill_f32_to_fp16(src[i]);
    }
}

static void attention(const rill__attn_task_t *a) {
    const int32_t D = a->kv->head_dim;
    for (int32_t t = 0; t < a->n_t; t++) {
        for (int32_t i = 0; i < a->n_q; i++) {
            const size_t off = (size_t)t * a->tok_stride + (size_t)i * D;
            rill__attention_head_ref(a->kv, a->pool, a->pages, a->kv_head, a->tok[t].n_kv,
                                     a->batched, a->q + off, a->out + off);
        }
    }
}

static void attention_flash(const rill__attn_task_t *a) {
    const int32_t D = a->kv->head_dim;
    for (int32_t t = 0; t < a->n_t; t++) {
        for (int32_t i = 0; i < a->n_q; i++) {
            const size_t off = (size_t)t * a->tok_stride + (size_t)i * D;
            rill__attention_head_flash_ref(a->kv, a->pool, a->pages, a->kv_head, a->tok[t].n_kv,
                                           a->q + off, a->out + off);
        }
    }
}

static const rill__cpu_kernels_t scalar_kernels = {
    .name = "scalar",
    .tile = {
        [RILL_DTYPE_F32] = tile_F32,
        [RILL_DTYPE_F16] = tile_F16,
        [RILL_DTYPE_BF16] = tile_BF16,
        [RILL_DTYPE_Q4_0] = tile_Q4_0,
        [RILL_DTYPE_Q4_1] = tile_Q4_1,
        [RILL_DTYPE_Q5_0] = tile_Q5_0,
        [RILL_DTYPE_Q5_1] = tile_Q5_1,
        [RILL_DTYPE_Q8_0] = tile_Q8_0,
        [RILL_DTYPE_Q4_K] = tile_Q4_K,
        [RILL_DTYPE_Q5_K] = tile_Q5_K,
        [RILL_DTYPE_Q6_K] = tile_Q6_K,
    },
#define ALL_TYPES(prefix)                                                   \
    {                                                                       \
        [RILL_DTYPE_F32] = prefix##F32, [RILL_DTYPE_F16] = prefix##F16,     \
        [RILL_DTYPE_BF16] = prefix##BF16, [RILL_DTYPE_Q4_0] = prefix##Q4_0, \
        [RILL_DTYPE_Q4_1] = prefix##Q4_1, [RILL_DTYPE_Q5_0] = prefix##Q5_0, \
        [RILL_DTYPE_Q5_1] = prefix##Q5_1, [RILL_DTYPE_Q8_0] = prefix##Q8_0, \
        [RILL_DTYPE_Q4_K] = prefix##Q4_K, [RILL_DTYPE_Q5_K] = prefix##Q5_K, \
        [RILL_DTYPE_Q6_K] = prefix##Q6_K,                                   \
    }
    .tile_gemm = ALL_TYPES(gemm_),
    .tile_repack = ALL_TYPES(repack_),
    .tile_repack4 = ALL_TYPES(repack4_),
#undef ALL_TYPES
    .act = {
        [RILL_DTYPE_F32] = NULL,
        [RILL_DTYPE_F16] = act_F16,
        [RILL_DTYPE_BF16] = act_BF16,
        [RILL_DTYPE_Q4_0] = act_Q4_0,
        [RILL_DTYPE_Q4_1] = act_Q4_1,
        [RILL_DTYPE_Q5_0] = act_Q5_0,
        [RILL_DTYPE_Q5_1] = act_Q5_1,
        [RILL_DTYPE_Q8_0] = act_Q8_0,
        [RILL_DTYPE_Q4_K] = act_Q4_K,
        [RILL_DTYPE_Q5_K] = act_Q5_K,
        [RILL_DTYPE_Q6_K] = act_Q6_K,
    },
    .act_row_bytes = rill__act_row_bytes,
    .rms_norm_rows = rms_norm_rows,
    .rope_apply = rill__rope_apply,
    .swiglu = swiglu,
    .add = add,
    .to_f16 = to_f16,
    .attention = attention,
    .attention_flash = attention_flash,
};

const rill__cpu_kernels_t *rill__cpu_kernels_scalar(void) {
    (void)act_F32; /* F32 needs no conversion: the table entry stays NULL */
    return &scalar_kernels;
}
