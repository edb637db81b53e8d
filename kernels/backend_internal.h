/*
 * backend_internal.h - what every backend shares: the handle's common part, the function table,
 * the weight struct, and the RoPE angle math (so that both backends rotate by the same floats).
 *
 * A backend is a struct that starts with `struct rill_backend` (C "inheritance" by first member);
 * backend.c checks every argument of the public API once, then calls the table. So a table entry
 * may assume: pointers non-NULL, sizes in range, a batch installed when it needs one, page indices
 * and slots of the batch valid for the pool's layout.
 */
#ifndef RILL_BACKEND_INTERNAL_H
#define RILL_BACKEND_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_backend.h"

struct rill_weight {
    rill_backend_t *b;
    rill_dtype_t dtype;
    int64_t ne0, ne1;
    size_t row_bytes;
    const void *data; /* in the backend's memory space (CPU: the caller's host pointer) */
    bool embedding;   /* rill_weight_mark_embedding(): use the plain (non-repacked) numerics */
};

typedef struct rill_backend_ops {
    void (*destroy)(rill_backend_t *b); /* frees the whole backend, common part included */
    rill_err_t (*alloc)(rill_backend_t *b, size_t bytes, void **out);
    void (*free)(rill_backend_t *b, void *p);
    rill_err_t (*copy_in)(rill_backend_t *b, void *dst, const void *src, size_t bytes);
    rill_err_t (*copy_out)(rill_backend_t *b, void *dst, const void *src, size_t bytes);
    rill_err_t (*copy)(rill_backend_t *b, void *dst, const void *src, size_t bytes);
    rill_err_t (*zero)(rill_backend_t *b, void *dst, size_t bytes);
    rill_err_t (*weight_prepare)(rill_backend_t *b, rill_weight_t *w, const void *host);
    void (*weight_release)(rill_backend_t *b, rill_weight_t *w);
    rill_err_t (*get_rows)(rill_backend_t *b, float *y, const rill_weight_t *w, const int32_t *ids,
                           int64_t n);
    rill_err_t (*rms_norm)(rill_backend_t *b, float *y, const float *x, const float *w,
                           int64_t n_rows, int64_t n, float eps);
    rill_err_t (*matmul)(rill_backend_t *b, float *y, const float *x, const rill_weight_t *w,
                         int64_t n_tok);
    rill_err_t (*add_bias)(rill_backend_t *b, float *x, const float *bias, int64_t n_rows,
                           int64_t n);
    rill_err_t (*add)(rill_backend_t *b, float *y, const float *a, const float *c, int64_t n);
    rill_err_t (*swiglu)(rill_backend_t *b, float *y, const float *g, const float *u, int64_t n);
    rill_err_t (*rope)(rill_backend_t *b, float *x, int32_t n_heads, int32_t head_dim,
                       const rill_rope_t *rope);
    rill_err_t (*kv_store)(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                           const float *k, const float *v);
    rill_err_t (*attention)(rill_backend_t *b, const rill_kv_layout_t *kv, const void *pool,
                            float *out, const float *q, int32_t n_head);
    rill_err_t (*kv_rope_shift)(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                const int32_t *pages, int32_t n_pages, int32_t delta,
                                const rill_rope_t *rope);
    rill_err_t (*argmax)(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                         int32_t *out);
} rill_backend_ops_t;

struct rill_backend {
    const rill_backend_ops_t *ops;
    const char *name;
    rill_backend_params_t params; /* as created (AUTO resolved, n_threads resolved) */
    bool has_batch;
    int32_t n_tok, n_seq;
    rill_batch_token_t *tok; /* [max_batch], copy of the installed batch */
    rill_page_table_t *seq;  /* [max_batch] */
    char err[256];
};

/* Allocates the common part's batch arrays (RILL_MEM_KERNELS). Errors: RILL_ENOMEM. */
rill_err_t rill__backend_init_common(rill_backend_t *b, const rill_backend_params_t *p);
void rill__backend_deinit_common(rill_backend_t *b);

/* Constructors of the two CPU backends (params already checked and resolved). */
rill_err_t rill__ref_backend_new(const rill_backend_params_t *p, rill_backend_t **out);
rill_err_t rill__cpu_backend_new(const rill_backend_params_t *p, rill_backend_t **out);

/* Element size of a KV pool (2 or 4 bytes). */
static inline size_t rill__kv_elt(const rill_kv_layout_t *kv) {
    return kv->dtype == RILL_DTYPE_F16 ? 2u : 4u;
}

/* Byte offset of slot `row` (0..P-1) of KV head h in a page; K part (V adds half a page). */
static inline size_t rill__kv_row_offset(const rill_kv_layout_t *kv, int32_t h, int32_t row) {
    return ((size_t)h * (size_t)kv->page_size + (size_t)row) * (size_t)kv->head_dim *
           rill__kv_elt(kv);
}

/* Address of K (v = 0) or V (v = 1) of slot `row` of KV head h in page `page` of pool. */
static inline uint8_t *rill__kv_ptr(const rill_kv_layout_t *kv, const void *pool, int32_t page,
                                    int32_t h, int32_t row, int v) {
    const size_t half =
        (size_t)kv->n_kv_heads * (size_t)kv->page_size * (size_t)kv->head_dim * rill__kv_elt(kv);
    return (uint8_t *)pool + (size_t)page * 2 * half + (size_t)v * half +
           rill__kv_row_offset(kv, h, row);
}

/* cos/sin of every rotary pair for position pos (may be negative for a shift), as ggml builds
 * them: cs[2i] = cos(theta_i), cs[2i+1] = sin(theta_i), theta_i = pos * freq_scale * base^(-2i /
 * n_rot) with the powers formed by repeated f32 multiplication. cs has n_rot entries. */
void rill__rope_cos_sin(const rill_rope_t *rope, int32_t pos, float *cs);

/* Rotates one head vector x[head_dim] with the table from rill__rope_cos_sin(). */
void rill__rope_apply(float *x, const rill_rope_t *rope, const float *cs);

#endif /* RILL_BACKEND_INTERNAL_H */
