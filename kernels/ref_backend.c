/*
 * ref_backend.c - the reference backend: the oracle every other backend is tested against.
 *
 * Rules of this file: one thread, the most direct loops, no cleverness that would need its own
 * test. What it computes is llama.cpp's CPU arithmetic (the AVX2 build), lane by lane:
 *   - matmul: activations are quantized exactly as llama.cpp does (rill__act_quantize_ref), and
 *     every dot product is formed as the llama.cpp kernel that the weight's shape and the batch
 *     select would form it (rill__mm_path_for, rill__dot_ggml: its integer lanes, f32 roundings
 *     and FMAs). A double-precision sum would be more accurate but is not what llama.cpp
 *     computes: its last bit moves an activation across the next matmul's Q8/F16/BF16 rounding
 *     boundary often enough to shift a model's logits by 1e-2 of their scale. The exact formula
 *     in double (rill__dot_ref, vecdot.c) stays as the tests' bound on these f32 sums.
 *   - every other op (RMSNorm, SwiGLU, RoPE, attention) is llama.cpp's own arithmetic, written
 *     out lane by lane in ggml_ref.c (rill__ggml_*, rill__attention_head_ref);
 *   - the encoder-decoder ops (LayerNorm, GELU, im2col, dense attention) are rill's own
 *     definitions, written out in encdec_ref.c; dense attention recomputes its scores.
 *   So this backend states llama.cpp's numerics in plain loops, and the fast kernels must give
 *   its bits. Attention is llama.cpp's non-flash path (scores, softmax, weighted V), recomputing
 *   scores instead of keeping an n_kv-long buffer, or with params.attn = RILL_ATTN_FLASH the
 *   one-pass online softmax (rill__attention_head_flash_ref); neither needs scratch.
 *
 * The memory hooks, lookups, page copies and arg-max are the host versions both CPU backends
 * share (backend_common.c): memory movement and comparisons, with no rounding to state.
 *
 * Scratch: one act row of max_n_in floats (the largest act row of any type fits in it).
 */
#include <math.h>
#include <string.h>

#include "backend_internal.h"
#include "rill_alloc.h"
#include "rill_log.h"

typedef struct ref_backend {
    struct rill_backend base; /* first member */
    void *act;                /* one act row */
} ref_backend_t;

static void ref_destroy(rill_backend_t *b) {
    ref_backend_t *r = (ref_backend_t *)b;
    rill_free(r->act);
    rill__backend_deinit_common(b);
    rill_free(r);
}

static rill_err_t ref_rms_norm(rill_backend_t *b, float *y, const float *x, const float *w,
                               int64_t n_rows, int64_t n, float eps) {
    (void)b;
    for (int64_t r = 0; r < n_rows; r++) {
        rill__ggml_rms_norm_row(y + r * n, x + r * n, w, n, eps);
    }
    return RILL_OK;
}

static rill_err_t ref_matmul(rill_backend_t *b, float *y, const float *x, const rill_weight_t *w,
                             int64_t n_tok) {
    ref_backend_t *r = (ref_backend_t *)b;
    const int64_t n_in = w->ne0, n_out = w->ne1;
    for (int64_t t = 0; t < n_tok; t++) {
        /* the kernel llama.cpp runs for this token decides how the sums round */
        const rill__mm_path_t path = rill__mm_path_for(w, n_tok, t);
        const float *xt = x + t * n_in;
        const void *act = xt;
        if (w->dtype != RILL_DTYPE_F32) {
            rill__act_quantize_ref(w->dtype, xt, r->act, n_in);
            act = r->act;
        }
        for (int64_t o = 0; o < n_out; o++) {
            const uint8_t *row = (const uint8_t *)w->data + (size_t)o * w->row_bytes;
            y[t * n_out + o] = rill__dot_ggml(w->dtype, row, act, n_in, path);
        }
    }
    return RILL_OK;
}

static rill_err_t ref_add_bias(rill_backend_t *b, float *x, const float *bias, int64_t n_rows,
                               int64_t n) {
    (void)b;
    for (int64_t r = 0; r < n_rows; r++) {
        for (int64_t i = 0; i < n; i++) {
            x[r * n + i] += bias[i];
        }
    }
    return RILL_OK;
}

static rill_err_t ref_add(rill_backend_t *b, float *y, const float *a, const float *c, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        y[i] = a[i] + c[i];
    }
    return RILL_OK;
}

static rill_err_t ref_swiglu(rill_backend_t *b, float *y, const float *g, const float *u,
                             int64_t n) {
    (void)b;
    rill__ggml_swiglu(y, g, u, n);
    return RILL_OK;
}

static rill_err_t ref_rope(rill_backend_t *b, float *x, int32_t n_heads, int32_t head_dim,
                           const rill_rope_t *rope) {
    float cs[RILL_KV_MAX_HEAD_DIM];
    for (int32_t t = 0; t < b->n_tok; t++) {
        rill__rope_cos_sin(rope, b->tok[t].pos, cs);
        for (int32_t h = 0; h < n_heads; h++) {
            rill__rope_apply(x + ((size_t)t * n_heads + h) * head_dim, rope, cs);
        }
    }
    return RILL_OK;
}

/* f32 <-> one pool row of type t (F32, F16, Q8_0, Q4_0): rill_quantize_row's bytes, which
 * for the block types are those of the quantizers llama.cpp's CPU backend writes its cache with */
static void to_pool(const rill_kv_layout_t *kv, rill_dtype_t t, uint8_t *dst, const float *src) {
    (void)rill_quantize_row(t, src, dst, kv->head_dim);
}

static void from_pool(const rill_kv_layout_t *kv, rill_dtype_t t, const uint8_t *src, float *dst) {
    (void)rill_dequantize_row(t, src, dst, kv->head_dim);
}

/* Page and row of slot `slot` of token t's sequence. */
static void locate(const rill_backend_t *b, const rill_kv_layout_t *kv, int32_t t, int32_t slot,
                   int32_t *page, int32_t *row) {
    *page = b->seq[b->tok[t].seq].pages[slot / kv->page_size];
    *row = slot % kv->page_size;
}

static rill_err_t ref_kv_store(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                               const float *k, const float *v) {
    const int32_t hkv = kv->n_kv_heads, D = kv->head_dim;
    for (int32_t t = 0; t < b->n_tok; t++) {
        int32_t page, row;
        locate(b, kv, t, b->tok[t].slot, &page, &row);
        for (int32_t h = 0; h < hkv; h++) {
            const size_t off = ((size_t)t * hkv + h) * D;
            to_pool(kv, kv->k_dtype, rill__kv_ptr(kv, pool, page, h, row, 0), k + off);
            to_pool(kv, kv->v_dtype, rill__kv_ptr(kv, pool, page, h, row, 1), v + off);
        }
    }
    return RILL_OK;
}

static rill_err_t ref_attention(rill_backend_t *b, const rill_kv_layout_t *kv, const void *pool,
                                float *out, const float *q, int32_t n_head) {
    const int32_t D = kv->head_dim, G = n_head / kv->n_kv_heads;
    const bool flash = b->params.attn == RILL_ATTN_FLASH;
    /* llama.cpp multiplies V by KQ with tinyBLAS when the batch has 2+ tokens, else by vec_dot */
    const bool batched = b->n_tok >= 2;
    for (int32_t t = 0; t < b->n_tok; t++) {
        const int32_t *pages = b->seq[b->tok[t].seq].pages;
        for (int32_t h = 0; h < n_head; h++) {
            const size_t off = ((size_t)t * n_head + h) * D;
            if (flash) {
                rill__attention_head_flash_ref(kv, pool, pages, h / G, b->tok[t].n_kv, q + off,
                                               out + off);
            } else {
                rill__attention_head_ref(kv, pool, pages, h / G, b->tok[t].n_kv, batched, q + off,
                                         out + off);
            }
        }
    }
    return RILL_OK;
}

static rill_err_t ref_kv_rope_shift(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                    const int32_t *pages, int32_t n_pages, int32_t delta,
                                    const rill_rope_t *rope) {
    (void)b;
    float cs[RILL_KV_MAX_HEAD_DIM], kr[RILL_KV_MAX_HEAD_DIM];
    rill__rope_cos_sin(rope, delta, cs);
    for (int32_t i = 0; i < n_pages; i++) {
        for (int32_t h = 0; h < kv->n_kv_heads; h++) {
            for (int32_t row = 0; row < kv->page_size; row++) {
                uint8_t *p = rill__kv_ptr(kv, pool, pages[i], h, row, 0);
                from_pool(kv, kv->k_dtype, p, kr);
                rill__rope_apply(kr, rope, cs);
                to_pool(kv, kv->k_dtype, p, kr);
            }
        }
    }
    return RILL_OK;
}

static rill_err_t ref_layer_norm(rill_backend_t *b, float *y, const float *x, const float *g,
                                 const float *beta, int64_t n_rows, int64_t n, float eps) {
    (void)b;
    for (int64_t r = 0; r < n_rows; r++) {
        rill__layer_norm_row(y + r * n, x + r * n, g, beta, n, eps);
    }
    return RILL_OK;
}

static rill_err_t ref_gelu(rill_backend_t *b, float *y, const float *x, int64_t n) {
    (void)b;
    for (int64_t i = 0; i < n; i++) {
        y[i] = rill__gelu(x[i]);
    }
    return RILL_OK;
}

static rill_err_t ref_im2col_1d(rill_backend_t *b, float *y, const float *x,
                                const rill_conv1d_t *cv) {
    (void)b;
    rill__im2col_1d_rows(y, x, cv, 0, rill_conv1d_n_out(cv));
    return RILL_OK;
}

static rill_err_t ref_attention_dense(rill_backend_t *b, float *out, const float *q, const float *k,
                                      const float *v, int64_t n_q, int64_t n_kv, int32_t n_head,
                                      int32_t head_dim) {
    (void)b;
    const int64_t row = (int64_t)n_head * head_dim;
    for (int64_t i = 0; i < n_q; i++) {
        for (int32_t h = 0; h < n_head; h++) {
            const int64_t off = (int64_t)h * head_dim;
            rill__attention_dense_row(out + i * row + off, q + i * row + off, k + off, v + off, row,
                                      n_kv, head_dim, NULL);
        }
    }
    return RILL_OK;
}

static const rill_backend_ops_t ref_ops = {
    .destroy = ref_destroy,
    .alloc = rill__host_alloc,
    .free = rill__host_free,
    .copy_in = rill__host_copy,
    .copy_out = rill__host_copy,
    .copy = rill__host_copy,
    .zero = rill__host_zero,
    .weight_prepare = rill__host_weight_prepare,
    .weight_release = rill__host_weight_release,
    .get_rows = rill__host_get_rows,
    .get_rows_resident = rill__host_get_rows_resident,
    .rms_norm = ref_rms_norm,
    .matmul = ref_matmul,
    .add_bias = ref_add_bias,
    .add = ref_add,
    .swiglu = ref_swiglu,
    .rope = ref_rope,
    .kv_store = ref_kv_store,
    .attention = ref_attention,
    .kv_rope_shift = ref_kv_rope_shift,
    .kv_copy_pages = rill__host_kv_copy_pages,
    .argmax = rill__host_argmax,
    .argmax_resident = rill__host_argmax,
    .layer_norm = ref_layer_norm,
    .gelu = ref_gelu,
    .im2col_1d = ref_im2col_1d,
    .attention_dense = ref_attention_dense,
};

static int32_t ref_available(void) {
    return 1; /* the host */
}

static rill_err_t ref_create(const rill_backend_params_t *params, rill_backend_t **out) {
    const char *why = rill__cpu_params_invalid(params);
    if (why != NULL) {
        return rill__error(RILL_EINVAL, "backend ref: %s", why);
    }
    rill_backend_params_t p = *params;
    p.cpu.n_threads = 1;
    p.cpu.simd = RILL_SIMD_SCALAR;
    ref_backend_t *r = rill_calloc(RILL_MEM_KERNELS, 1, sizeof *r);
    if (r == NULL) {
        return RILL_ENOMEM;
    }
    r->base.ops = &ref_ops;
    r->base.name = "ref";
    rill_err_t err = rill__backend_init_common(&r->base, &p);
    if (err != RILL_OK) {
        rill_free(r);
        return err;
    }
    r->act = rill_malloc_aligned(RILL_MEM_KERNELS, (size_t)p.max_n_in * sizeof(float), 64);
    if (r->act == NULL) {
        rill__backend_deinit_common(&r->base);
        rill_free(r);
        return RILL_ENOMEM;
    }
    *out = &r->base;
    return RILL_OK;
}

const rill__backend_entry_t rill__backend_entry_ref = {
    .name = "ref",
    .kind = RILL_BACKEND_REF,
    .numerics = RILL_NUMERICS_EXACT,
    .summary = "reference: plain C, one thread, llama.cpp's CPU arithmetic lane by lane (oracle)",
    .available = ref_available,
    .create = ref_create,
};
