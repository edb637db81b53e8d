/*
 * backend_internal.h - what every backend shares: the handle's common part, the function table,
 * the weight struct, and the registry rows.
 *
 * A backend is a struct that starts with `struct rill_backend` (C "inheritance" by first member);
 * backend.c checks every argument of the public API once, then calls the table. So a table entry
 * may assume: pointers non-NULL, sizes in range, a batch installed when it needs one, page indices
 * and slots of the batch valid for the pool's layout, host index arrays validated.
 *
 * The kernels' include graph (a DAG; an arrow is "includes"; public headers are leaves above
 * core/):
 *
 *   rill_backend.h, rill_quant.h, rill_dtype.h (core)        public: types and the contract
 *     ^-- quant_internal.h   GGML block structs               layout headers: no code that
 *     ^-- kv_internal.h      KV page addresses                 computes, nothing of a backend
 *           ^-- ggml_internal.h  llama.cpp's arithmetic, lane by lane (ggml_ref.c): the leaf
 *                 ^-- encdec_internal.h  the encoder-decoder ops' arithmetic (encdec_ref.c)
 *                       ^-- backend_internal.h  this file: handle, ops table, registry rows
 *                             ^-- cpu_internal.h  the fast CPU backend's kernel tables (+
 * rill_pool.h)
 *
 *   .c file         includes                     calls into
 *   ggml_ref.c      ggml_internal.h              quant.c (f16/bf16 conversions, dequantizers)
 *   quant*.c,       quant_internal.h             each other
 *   vecdot.c
 *   backend.c       backend_internal.h           the ops table only (checks, then dispatch)
 *   registry.c      backend_internal.h           the rows' available() / create()
 *   backend_common.c backend_internal.h          quant.c: the common part, host memory hooks
 *   encdec_ref.c    encdec_internal.h            ggml_ref.c (ggml's exp, hsum_a)
 *   cpu_encdec.c    encdec_internal.h            encdec_ref.c (tails, non-x86 fallback)
 *   ref_backend.c   backend_internal.h           ggml_ref.c, encdec_ref.c, backend_common.c
 *   cpu_backend.c,  cpu_internal.h               the kernel tables, ggml_ref.c, backend_common.c,
 *                                                encdec_ref.c, cpu_encdec.c
 *   cpu_matmul.c
 *   cpu_scalar.c    cpu_internal.h               ggml_ref.c
 *   cpu_avx2.c      cpu_internal.h               ggml_ref.c, cpu_scalar.c (fallback tasks)
 *   cpu_avx512.c    cpu_internal.h               cpu_avx2.c (its table, fallback tasks)
 *
 * Before this layout the reference arithmetic lived in backend.c beside the dispatch layer and
 * the creation switch, and one header declared all three: backend.c called the CPU backend's
 * constructor, the CPU backend called backend.c's common part and host hooks, and its kernel
 * tables called backend.c's arithmetic, a circle through every CPU file. Now the calls run one
 * way, from the registry down to ggml_ref.c, and backend.c reaches a backend only through its
 * table.
 */
#ifndef RILL_BACKEND_INTERNAL_H
#define RILL_BACKEND_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "encdec_internal.h"
#include "ggml_internal.h"
#include "kv_internal.h"
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
    /* ids: host array, checked */
    rill_err_t (*get_rows)(rill_backend_t *b, float *y, const rill_weight_t *w, const int32_t *ids,
                           int64_t n);
    /* ids: backend memory, unchecked: the op checks every id against [0, w->ne1) before it
     * writes anything and returns RILL_EINVAL (y untouched) when one is outside */
    rill_err_t (*get_rows_resident)(rill_backend_t *b, float *y, const rill_weight_t *w,
                                    const int32_t *ids, int64_t n);
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
    /* pools, src, dst: host arrays, checked (n >= 1, n_pools >= 1) */
    rill_err_t (*kv_copy_pages)(rill_backend_t *b, const rill_kv_layout_t *kv, void *const *pools,
                                int32_t n_pools, const int32_t *src, const int32_t *dst, int32_t n);
    /* out: host array */
    rill_err_t (*argmax)(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                         int32_t *out);
    /* out: backend memory */
    rill_err_t (*argmax_resident)(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                                  int32_t *out);
    /* encoder-decoder ops (encdec_internal.h states their arithmetic); gamma, beta: f32 host
     * views of checked vectors of n values; cv: a valid geometry */
    rill_err_t (*layer_norm)(rill_backend_t *b, float *y, const float *x, const float *gamma,
                             const float *beta, int64_t n_rows, int64_t n, float eps);
    rill_err_t (*gelu)(rill_backend_t *b, float *y, const float *x, int64_t n);
    rill_err_t (*im2col_1d)(rill_backend_t *b, float *y, const float *x, const rill_conv1d_t *cv);
    rill_err_t (*attention_dense)(rill_backend_t *b, float *out, const float *q, const float *k,
                                  const float *v, int64_t n_q, int64_t n_kv, int32_t n_head,
                                  int32_t head_dim);
} rill_backend_ops_t;

typedef struct rill__backend_entry rill__backend_entry_t;

struct rill_backend {
    const rill_backend_ops_t *ops;
    const rill__backend_entry_t *entry; /* the registry row it was created from */
    const char *name;                   /* instance name, e.g. "cpu-avx2" */
    rill_backend_params_t params;       /* as created (AUTO resolved, n_threads resolved) */
    bool has_batch;
    int32_t n_tok, n_seq;
    rill_batch_token_t *tok; /* [max_batch], copy of the installed batch */
    rill_page_table_t *seq;  /* [max_batch] */
};

/* ---- the registry ------------------------------------------------------------------------- */

/* One row of the registry (registry.c lists them; each backend's file defines its own). */
struct rill__backend_entry {
    const char *name; /* registry name: "ref", "cpu"; a CUDA backend adds "cuda" */
    rill_backend_kind_t kind;
    rill_numerics_t numerics; /* its ops' class (rill_backend.h, Numerics classes) */
    const char *summary;      /* one line for listings */
    /* Devices of this backend usable on this machine now (0: unavailable). Cheap, no
     * allocation, thread-safe. */
    int32_t (*available)(void);
    /* The backend's new(): p has passed the common checks (max_batch, max_n_in, attn, kind) and
     * 0 <= p->device < available(). Checks its own part, builds the backend. On error nothing is
     * left allocated and a sentence went to the log. */
    rill_err_t (*create)(const rill_backend_params_t *p, rill_backend_t **out);
};

extern const rill__backend_entry_t rill__backend_entry_ref; /* ref_backend.c */
extern const rill__backend_entry_t rill__backend_entry_cpu; /* cpu_backend.c */

/* ---- the common part and the host memory hooks (backend_common.c) -------------------------- */

/* Allocates the common part's batch arrays (RILL_MEM_KERNELS). Errors: RILL_ENOMEM. */
rill_err_t rill__backend_init_common(rill_backend_t *b, const rill_backend_params_t *p);
void rill__backend_deinit_common(rill_backend_t *b);

/* NULL when the CPU part of p (n_threads, simd) is valid, else why not (static string). */
const char *rill__cpu_params_invalid(const rill_backend_params_t *p);

/* The kernel llama.cpp runs for token tok of an n_tok-token matmul with w (rill__mm_path). */
static inline rill__mm_path_t rill__mm_path_for(const rill_weight_t *w, int64_t n_tok,
                                                int64_t tok) {
    return rill__mm_path(w->dtype, w->ne0, w->ne1, w->embedding, n_tok, tok);
}

/* Host-memory implementations of the memory and weight hooks, shared by the two CPU backends:
 * 64-byte aligned rill_malloc blocks, memmove/memset copies, zero-copy weights (the kernels read
 * the mmapped layout as is). A device backend supplies its own. */
rill_err_t rill__host_alloc(rill_backend_t *b, size_t bytes, void **out);
void rill__host_free(rill_backend_t *b, void *p);
rill_err_t rill__host_copy(rill_backend_t *b, void *dst, const void *src, size_t bytes);
rill_err_t rill__host_zero(rill_backend_t *b, void *dst, size_t bytes);
rill_err_t rill__host_weight_prepare(rill_backend_t *b, rill_weight_t *w, const void *host);
void rill__host_weight_release(rill_backend_t *b, rill_weight_t *w);
/* get_rows / get_rows_resident on host memory: the dequantized rows (resident: ids checked
 * first, RILL_EINVAL before any write) */
rill_err_t rill__host_get_rows(rill_backend_t *b, float *y, const rill_weight_t *w,
                               const int32_t *ids, int64_t n);
rill_err_t rill__host_get_rows_resident(rill_backend_t *b, float *y, const rill_weight_t *w,
                                        const int32_t *ids, int64_t n);
/* argmax into host memory (the CPU backends' resident memory is host memory too) */
rill_err_t rill__host_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                             int32_t *out);
/* kv_copy_pages as plain memcpy loops, pool after pool */
rill_err_t rill__host_kv_copy_pages(rill_backend_t *b, const rill_kv_layout_t *kv,
                                    void *const *pools, int32_t n_pools, const int32_t *src,
                                    const int32_t *dst, int32_t n);

#endif /* RILL_BACKEND_INTERNAL_H */
