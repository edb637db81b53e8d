/*
 * backend.c - the public face of rill_backend.h: argument checking, then the backend's table.
 *
 * Every check of the contract happens here, once, for all backends, so a backend's op only
 * computes (and a future CUDA backend cannot forget a check). Checks that depend on a KV pool's
 * layout (slots and page indices of the installed batch) run on every kv_store/attention call:
 * they are O(tokens + pages), negligible next to the op, and they keep a bad page table from ever
 * reaching a kernel running on worker threads. Errors record a sentence (rill_last_error),
 * formatted into a fixed per-thread buffer: no allocation on the op path.
 *
 * This file knows no backend: it reaches one only through its ops table (backend_internal.h).
 * Creation is the registry's (registry.c), the arithmetic the reference states is ggml_ref.c's,
 * and the host hooks the CPU backends share are backend_common.c's.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend_internal.h"
#include "rill_alloc.h"
#include "rill_quant.h"

static rill_err_t fail(rill_backend_t *b, rill_err_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Records the detail (rill_last_error) and returns err. */
static rill_err_t fail(rill_backend_t *b, rill_err_t err, const char *fmt, ...) {
    (void)b;
    char msg[RILL_ERR_DETAIL];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rill__error_str(err, msg);
}

/* ---- lifetime ------------------------------------------------------------------------------- */

void rill_backend_destroy(rill_backend_t **bp) {
    if (bp == NULL || *bp == NULL) {
        return;
    }
    (*bp)->ops->destroy(*bp);
    *bp = NULL;
}

const char *rill_backend_name(const rill_backend_t *b) {
    return b != NULL ? b->name : "?";
}

rill_backend_kind_t rill_backend_kind(const rill_backend_t *b) {
    return b != NULL ? b->params.kind : RILL_BACKEND_REF;
}

int32_t rill_backend_device(const rill_backend_t *b) {
    return b != NULL ? b->params.device : 0;
}

rill_numerics_t rill_backend_numerics(const rill_backend_t *b) {
    if (b == NULL) {
        return RILL_NUMERICS_EXACT;
    }
    /* rill's flash kernel is bit-exact across the exact rows, not to llama.cpp */
    return b->params.attn == RILL_ATTN_FLASH ? RILL_NUMERICS_TOLERANCE : b->entry->numerics;
}

const char *rill_numerics_name(rill_numerics_t numerics) {
    switch (numerics) {
    case RILL_NUMERICS_EXACT:
        return "exact";
    case RILL_NUMERICS_TOLERANCE:
        return "tolerance";
    }
    return "?";
}

int rill_backend_n_threads(const rill_backend_t *b) {
    return b != NULL ? b->params.cpu.n_threads : 0;
}

int32_t rill_backend_max_batch(const rill_backend_t *b) {
    return b != NULL ? b->params.max_batch : 0;
}

int64_t rill_backend_max_n_in(const rill_backend_t *b) {
    return b != NULL ? b->params.max_n_in : 0;
}

rill_attn_t rill_backend_attn(const rill_backend_t *b) {
    return b != NULL ? b->params.attn : RILL_ATTN_EXACT;
}

const char *rill_attn_name(rill_attn_t attn) {
    switch (attn) {
    case RILL_ATTN_EXACT:
        return "exact";
    case RILL_ATTN_FLASH:
        return "flash";
    }
    return "?";
}

/* ---- memory --------------------------------------------------------------------------------- */

rill_err_t rill_backend_alloc(rill_backend_t *b, size_t bytes, void **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (b == NULL || out == NULL || bytes == 0) {
        return fail(b, RILL_EINVAL, "alloc: NULL argument or zero size");
    }
    rill_err_t err = b->ops->alloc(b, bytes, out);
    return err == RILL_OK ? RILL_OK : fail(b, err, "alloc: %zu bytes failed", bytes);
}

void rill_backend_free(rill_backend_t *b, void *p) {
    if (b != NULL && p != NULL) {
        b->ops->free(b, p);
    }
}

rill_err_t rill_backend_copy_in(rill_backend_t *b, void *dst, const void *src_host, size_t bytes) {
    if (b == NULL || ((dst == NULL || src_host == NULL) && bytes > 0)) {
        return fail(b, RILL_EINVAL, "copy_in: NULL argument");
    }
    return bytes == 0 ? RILL_OK : b->ops->copy_in(b, dst, src_host, bytes);
}

rill_err_t rill_backend_copy_out(rill_backend_t *b, void *dst_host, const void *src, size_t bytes) {
    if (b == NULL || ((dst_host == NULL || src == NULL) && bytes > 0)) {
        return fail(b, RILL_EINVAL, "copy_out: NULL argument");
    }
    return bytes == 0 ? RILL_OK : b->ops->copy_out(b, dst_host, src, bytes);
}

rill_err_t rill_backend_copy(rill_backend_t *b, void *dst, const void *src, size_t bytes) {
    if (b == NULL || ((dst == NULL || src == NULL) && bytes > 0)) {
        return fail(b, RILL_EINVAL, "copy: NULL argument");
    }
    return bytes == 0 || dst == src ? RILL_OK : b->ops->copy(b, dst, src, bytes);
}

rill_err_t rill_backend_zero(rill_backend_t *b, void *dst, size_t bytes) {
    if (b == NULL || (dst == NULL && bytes > 0)) {
        return fail(b, RILL_EINVAL, "zero: NULL argument");
    }
    return bytes == 0 ? RILL_OK : b->ops->zero(b, dst, bytes);
}

rill_err_t rill_backend_sync(rill_backend_t *b) {
    return b == NULL ? RILL_EINVAL : RILL_OK;
}

/* ---- weights -------------------------------------------------------------------------------- */

rill_err_t rill_weight_new(rill_backend_t *b, rill_dtype_t dtype, const void *host_ptr, int64_t ne0,
                           int64_t ne1, rill_weight_t **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (b == NULL || out == NULL || host_ptr == NULL) {
        return fail(b, RILL_EINVAL, "weight_new: NULL argument");
    }
    if (!rill_dtype_is_weight(dtype)) {
        return fail(b, RILL_EINVAL, "weight_new: type %d is not a weight type", (int)dtype);
    }
    int64_t row_bytes = rill_dtype_row_bytes(dtype, ne0);
    if (ne0 < 1 || ne1 < 1 || row_bytes < 0 || ne1 > INT64_MAX / row_bytes) {
        return fail(b, RILL_EINVAL, "weight_new: bad shape %lld x %lld for %s", (long long)ne0,
                    (long long)ne1, rill_dtype_name(dtype));
    }
    rill_weight_t *w = rill_calloc(RILL_MEM_KERNELS, 1, sizeof *w);
    if (w == NULL) {
        return fail(b, RILL_ENOMEM, "weight_new: out of memory");
    }
    w->b = b;
    w->dtype = dtype;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = (size_t)row_bytes;
    rill_err_t err = b->ops->weight_prepare(b, w, host_ptr);
    if (err != RILL_OK) {
        rill_free(w);
        return fail(b, err, "weight_new: backend could not prepare the weight");
    }
    *out = w;
    return RILL_OK;
}

void rill_weight_destroy(rill_weight_t **wp) {
    if (wp == NULL || *wp == NULL) {
        return;
    }
    rill_weight_t *w = *wp;
    w->b->ops->weight_release(w->b, w);
    rill_free(w);
    *wp = NULL;
}

rill_err_t rill_weight_mark_embedding(rill_weight_t *w) {
    if (w == NULL) {
        return RILL_EINVAL;
    }
    w->embedding = true;
    return RILL_OK;
}

rill_dtype_t rill_weight_dtype(const rill_weight_t *w) {
    return w->dtype;
}

int64_t rill_weight_ne0(const rill_weight_t *w) {
    return w->ne0;
}

int64_t rill_weight_ne1(const rill_weight_t *w) {
    return w->ne1;
}

/* ---- batch ---------------------------------------------------------------------------------- */

rill_err_t rill_backend_set_batch(rill_backend_t *b, const rill_batch_t *batch) {
    if (b == NULL || batch == NULL || batch->tok == NULL || batch->seq == NULL) {
        return fail(b, RILL_EINVAL, "set_batch: NULL argument");
    }
    if (batch->n_tok < 1 || batch->n_seq < 1) {
        return fail(b, RILL_EINVAL, "set_batch: n_tok %d / n_seq %d must be >= 1", batch->n_tok,
                    batch->n_seq);
    }
    if (batch->n_tok > b->params.max_batch || batch->n_seq > b->params.max_batch) {
        return fail(b, RILL_ERANGE, "set_batch: n_tok %d / n_seq %d above max_batch %d",
                    batch->n_tok, batch->n_seq, b->params.max_batch);
    }
    for (int32_t s = 0; s < batch->n_seq; s++) {
        const rill_page_table_t *pt = &batch->seq[s];
        if (pt->n_pages < 0 || (pt->n_pages > 0 && pt->pages == NULL)) {
            return fail(b, RILL_EINVAL, "set_batch: sequence %d has a bad page table", s);
        }
    }
    for (int32_t t = 0; t < batch->n_tok; t++) {
        const rill_batch_token_t *tk = &batch->tok[t];
        if (tk->seq < 0 || tk->seq >= batch->n_seq || tk->pos < 0 || tk->slot < 0 || tk->n_kv < 1) {
            return fail(b, RILL_EINVAL,
                        "set_batch: token %d has seq %d pos %d slot %d n_kv %d out of range", t,
                        tk->seq, tk->pos, tk->slot, tk->n_kv);
        }
    }
    memcpy(b->tok, batch->tok, (size_t)batch->n_tok * sizeof *b->tok);
    memcpy(b->seq, batch->seq, (size_t)batch->n_seq * sizeof *b->seq);
    b->n_tok = batch->n_tok;
    b->n_seq = batch->n_seq;
    b->has_batch = true;
    return RILL_OK;
}

/* ---- checks shared by the ops --------------------------------------------------------------- */

static bool weight_ok(const rill_backend_t *b, const rill_weight_t *w) {
    return w != NULL && w->b == b;
}

static bool f32_vector(const rill_backend_t *b, const rill_weight_t *w) {
    return weight_ok(b, w) && w->dtype == RILL_DTYPE_F32 && w->ne1 == 1;
}

bool rill_kv_type_ok(rill_dtype_t t, int32_t head_dim) {
    switch (t) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
        return true;
    case RILL_DTYPE_Q8_0:
    case RILL_DTYPE_Q4_0:
        return head_dim % 32 == 0;
    default:
        return false;
    }
}

static bool kv_layout_ok(const rill_kv_layout_t *kv) {
    return kv != NULL && kv->page_size >= 1 && kv->n_kv_heads >= 1 && kv->head_dim >= 1 &&
           kv->head_dim <= RILL_KV_MAX_HEAD_DIM && rill_kv_type_ok(kv->k_dtype, kv->head_dim) &&
           rill_kv_type_ok(kv->v_dtype, kv->head_dim) && kv->n_pages >= 1 &&
           (double)kv->page_size * kv->n_kv_heads * kv->head_dim * 8.0 * kv->n_pages < 0x1p62;
}

int64_t rill_kv_page_bytes(const rill_kv_layout_t *kv) {
    if (!kv_layout_ok(kv)) {
        return -1;
    }
    return (int64_t)rill__kv_page_size_bytes(kv);
}

int64_t rill_kv_pool_bytes(const rill_kv_layout_t *kv) {
    int64_t page = rill_kv_page_bytes(kv);
    return page < 0 ? -1 : page * kv->n_pages;
}

static bool rope_ok(const rill_rope_t *r, int32_t head_dim) {
    return r != NULL && (r->mode == RILL_ROPE_NORM || r->mode == RILL_ROPE_NEOX) && r->n_rot >= 2 &&
           r->n_rot % 2 == 0 && r->n_rot <= head_dim && r->n_rot <= RILL_KV_MAX_HEAD_DIM &&
           isfinite(r->freq_base) && r->freq_base > 0.0f && isfinite(r->freq_scale) &&
           r->freq_scale > 0.0f;
}

/* Slots [0, n_slots) of sequence s must map to valid pages of the pool. */
static bool seq_covers(const rill_backend_t *b, const rill_kv_layout_t *kv, int32_t s,
                       int64_t n_slots) {
    const rill_page_table_t *pt = &b->seq[s];
    int64_t need = (n_slots + kv->page_size - 1) / kv->page_size;
    if (need > pt->n_pages) {
        return false;
    }
    for (int64_t i = 0; i < need; i++) {
        if (pt->pages[i] < 0 || pt->pages[i] >= kv->n_pages) {
            return false;
        }
    }
    return true;
}

/* ---- ops ------------------------------------------------------------------------------------ */

rill_err_t rill_backend_get_rows(rill_backend_t *b, float *y, const rill_weight_t *w,
                                 const int32_t *ids, int64_t n) {
    if (b == NULL || y == NULL || !weight_ok(b, w) || ids == NULL || n < 1) {
        return fail(b, RILL_EINVAL, "get_rows: bad argument");
    }
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= w->ne1) {
            return fail(b, RILL_EINVAL, "get_rows: id %d outside [0, %lld)", ids[i],
                        (long long)w->ne1);
        }
    }
    return b->ops->get_rows(b, y, w, ids, n);
}

rill_err_t rill_backend_get_rows_resident(rill_backend_t *b, float *y, const rill_weight_t *w,
                                          const int32_t *ids, int64_t n) {
    if (b == NULL || y == NULL || !weight_ok(b, w) || ids == NULL || n < 1) {
        return fail(b, RILL_EINVAL, "get_rows_resident: bad argument");
    }
    rill_err_t err = b->ops->get_rows_resident(b, y, w, ids, n);
    return err == RILL_OK
               ? RILL_OK
               : fail(b, err, "get_rows_resident: an id is outside [0, %lld)", (long long)w->ne1);
}

rill_err_t rill_backend_rms_norm(rill_backend_t *b, float *y, const float *x,
                                 const rill_weight_t *w, int64_t n_rows, int64_t n, float eps) {
    if (b == NULL || y == NULL || x == NULL || n_rows < 1 || n < 1 || !(eps >= 0.0f)) {
        return fail(b, RILL_EINVAL, "rms_norm: bad argument");
    }
    if (w != NULL && (!f32_vector(b, w) || w->ne0 != n)) {
        return fail(b, RILL_EINVAL, "rms_norm: weight must be an f32 vector of %lld values",
                    (long long)n);
    }
    return b->ops->rms_norm(b, y, x, w != NULL ? (const float *)w->data : NULL, n_rows, n, eps);
}

rill_err_t rill_backend_matmul(rill_backend_t *b, float *y, const float *x, const rill_weight_t *w,
                               int64_t n_tok) {
    if (b == NULL || y == NULL || x == NULL || !weight_ok(b, w) || n_tok < 1) {
        return fail(b, RILL_EINVAL, "matmul: bad argument");
    }
    if (n_tok > b->params.max_batch || w->ne0 > b->params.max_n_in) {
        return fail(b, RILL_ERANGE,
                    "matmul: %lld tokens x %lld inputs exceed max_batch %d / "
                    "max_n_in %lld",
                    (long long)n_tok, (long long)w->ne0, b->params.max_batch,
                    (long long)b->params.max_n_in);
    }
    return b->ops->matmul(b, y, x, w, n_tok);
}

rill_err_t rill_backend_add_bias(rill_backend_t *b, float *x, const rill_weight_t *bias,
                                 int64_t n_rows) {
    if (b == NULL || x == NULL || !f32_vector(b, bias) || n_rows < 1) {
        return fail(b, RILL_EINVAL, "add_bias: bad argument (bias must be an f32 vector)");
    }
    return b->ops->add_bias(b, x, bias->data, n_rows, bias->ne0);
}

rill_err_t rill_backend_add(rill_backend_t *b, float *y, const float *a, const float *c,
                            int64_t n) {
    if (b == NULL || y == NULL || a == NULL || c == NULL || n < 1) {
        return fail(b, RILL_EINVAL, "add: bad argument");
    }
    return b->ops->add(b, y, a, c, n);
}

rill_err_t rill_backend_swiglu(rill_backend_t *b, float *y, const float *gate, const float *up,
                               int64_t n) {
    if (b == NULL || y == NULL || gate == NULL || up == NULL || n < 1) {
        return fail(b, RILL_EINVAL, "swiglu: bad argument");
    }
    return b->ops->swiglu(b, y, gate, up, n);
}

rill_err_t rill_backend_rope(rill_backend_t *b, float *x, int32_t n_heads, int32_t head_dim,
                             const rill_rope_t *rope) {
    if (b == NULL || x == NULL || n_heads < 1 || head_dim < 2 || !rope_ok(rope, head_dim)) {
        return fail(b, RILL_EINVAL, "rope: bad argument");
    }
    if (!b->has_batch) {
        return fail(b, RILL_EINVAL, "rope: no batch installed");
    }
    return b->ops->rope(b, x, n_heads, head_dim, rope);
}

rill_err_t rill_backend_kv_store(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                 const float *k, const float *v) {
    if (b == NULL || pool == NULL || k == NULL || v == NULL || !kv_layout_ok(kv)) {
        return fail(b, RILL_EINVAL, "kv_store: bad argument or layout");
    }
    if (!b->has_batch) {
        return fail(b, RILL_EINVAL, "kv_store: no batch installed");
    }
    for (int32_t t = 0; t < b->n_tok; t++) {
        if (!seq_covers(b, kv, b->tok[t].seq, (int64_t)b->tok[t].slot + 1)) {
            return fail(b, RILL_EINVAL, "kv_store: token %d slot %d has no valid page", t,
                        b->tok[t].slot);
        }
    }
    return b->ops->kv_store(b, kv, pool, k, v);
}

rill_err_t rill_backend_attention(rill_backend_t *b, const rill_kv_layout_t *kv, const void *pool,
                                  float *out, const float *q, int32_t n_head) {
    if (b == NULL || pool == NULL || out == NULL || q == NULL || !kv_layout_ok(kv) || n_head < 1 ||
        n_head % kv->n_kv_heads != 0) {
        return fail(b, RILL_EINVAL, "attention: bad argument or layout");
    }
    if (!b->has_batch) {
        return fail(b, RILL_EINVAL, "attention: no batch installed");
    }
    for (int32_t t = 0; t < b->n_tok; t++) {
        if (!seq_covers(b, kv, b->tok[t].seq, b->tok[t].n_kv)) {
            return fail(b, RILL_EINVAL, "attention: token %d sees %d slots beyond valid pages", t,
                        b->tok[t].n_kv);
        }
    }
    return b->ops->attention(b, kv, pool, out, q, n_head);
}

rill_err_t rill_backend_kv_rope_shift(rill_backend_t *b, const rill_kv_layout_t *kv, void *pool,
                                      const int32_t *pages, int32_t n_pages, int32_t delta,
                                      const rill_rope_t *rope) {
    if (b == NULL || pool == NULL || !kv_layout_ok(kv) || n_pages < 0 ||
        (pages == NULL && n_pages > 0) || !rope_ok(rope, kv->head_dim)) {
        return fail(b, RILL_EINVAL, "kv_rope_shift: bad argument");
    }
    for (int32_t i = 0; i < n_pages; i++) {
        if (pages[i] < 0 || pages[i] >= kv->n_pages) {
            return fail(b, RILL_EINVAL, "kv_rope_shift: page %d out of range", pages[i]);
        }
    }
    return n_pages == 0 ? RILL_OK : b->ops->kv_rope_shift(b, kv, pool, pages, n_pages, delta, rope);
}

/* Do [a, a + na) and [c, c + nc) share a byte? (Backend pointers compare like host ones: they
 * are addresses in the backend's memory space.) */
static bool overlaps(const void *a, size_t na, const void *c, size_t nc) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)c;
    return x < y + nc && y < x + na;
}

rill_err_t rill_backend_kv_copy_pages(rill_backend_t *b, const rill_kv_layout_t *kv,
                                      void *const *pools, int32_t n_pools, const int32_t *src,
                                      const int32_t *dst, int32_t n) {
    if (b == NULL || !kv_layout_ok(kv) || n_pools < 0 || n < 0 || (n_pools > 0 && pools == NULL) ||
        (n > 0 && (src == NULL || dst == NULL))) {
        return fail(b, RILL_EINVAL, "kv_copy_pages: bad argument or layout");
    }
    if (n == 0 || n_pools == 0) {
        return RILL_OK;
    }
    const size_t pool_bytes = (size_t)rill_kv_pool_bytes(kv);
    for (int32_t p = 0; p < n_pools; p++) {
        if (pools[p] == NULL) {
            return fail(b, RILL_EINVAL, "kv_copy_pages: pool %d is NULL", p);
        }
        for (int32_t q = 0; q < p; q++) {
            if (overlaps(pools[p], pool_bytes, pools[q], pool_bytes)) {
                return fail(b, RILL_EINVAL, "kv_copy_pages: pools %d and %d overlap", q, p);
            }
        }
    }
    for (int32_t i = 0; i < n; i++) {
        if (src[i] < 0 || src[i] >= kv->n_pages || dst[i] < 0 || dst[i] >= kv->n_pages) {
            return fail(b, RILL_EINVAL, "kv_copy_pages: copy %d (page %d -> %d) outside [0, %d)", i,
                        src[i], dst[i], kv->n_pages);
        }
    }
    /* order-free: no destination twice, none that is also read */
    for (int32_t i = 0; i < n; i++) {
        for (int32_t j = 0; j < n; j++) {
            if (dst[i] == src[j]) {
                return fail(b, RILL_EINVAL,
                            "kv_copy_pages: page %d is both a destination (copy %d) and a "
                            "source (copy %d)",
                            dst[i], i, j);
            }
            if (j < i && dst[i] == dst[j]) {
                return fail(b, RILL_EINVAL,
                            "kv_copy_pages: page %d is the destination of copies %d and %d", dst[i],
                            j, i);
            }
        }
    }
    return b->ops->kv_copy_pages(b, kv, pools, n_pools, src, dst, n);
}

rill_err_t rill_backend_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                               int32_t *out_host) {
    if (b == NULL || x == NULL || out_host == NULL || n_rows < 1 || n_cols < 1 ||
        n_cols > INT32_MAX) {
        return fail(b, RILL_EINVAL, "argmax: bad argument");
    }
    return b->ops->argmax(b, x, n_rows, n_cols, out_host);
}

rill_err_t rill_backend_argmax_resident(rill_backend_t *b, const float *x, int64_t n_rows,
                                        int64_t n_cols, int32_t *ids) {
    if (b == NULL || x == NULL || ids == NULL || n_rows < 1 || n_cols < 1 || n_cols > INT32_MAX) {
        return fail(b, RILL_EINVAL, "argmax_resident: bad argument");
    }
    if ((double)n_rows * (double)n_cols * 4.0 > 0x1p62 ||
        overlaps(x, (size_t)(n_rows * n_cols) * sizeof(float), ids,
                 (size_t)n_rows * sizeof(int32_t))) {
        return fail(b, RILL_EINVAL, "argmax_resident: ids overlap x");
    }
    return b->ops->argmax_resident(b, x, n_rows, n_cols, ids);
}

/* ---- encoder-decoder ops -------------------------------------------------------------------- */

rill_err_t rill_backend_layer_norm(rill_backend_t *b, float *y, const float *x,
                                   const rill_weight_t *gamma, const rill_weight_t *beta,
                                   int64_t n_rows, int64_t n, float eps) {
    if (b == NULL || y == NULL || x == NULL || n_rows < 1 || n < 1 || !(eps >= 0.0f)) {
        return fail(b, RILL_EINVAL, "layer_norm: bad argument");
    }
    if (!f32_vector(b, gamma) || gamma->ne0 != n || !f32_vector(b, beta) || beta->ne0 != n) {
        return fail(b, RILL_EINVAL, "layer_norm: gamma and beta must be f32 vectors of %lld values",
                    (long long)n);
    }
    return b->ops->layer_norm(b, y, x, gamma->data, beta->data, n_rows, n, eps);
}

rill_err_t rill_backend_gelu(rill_backend_t *b, float *y, const float *x, int64_t n) {
    if (b == NULL || y == NULL || x == NULL || n < 1) {
        return fail(b, RILL_EINVAL, "gelu: bad argument");
    }
    return b->ops->gelu(b, y, x, n);
}

int64_t rill_conv1d_n_out(const rill_conv1d_t *cv) {
    if (cv == NULL || cv->n_ch < 1 || cv->n_in < 1 || cv->ch_stride < 0 || cv->t_stride < 0 ||
        cv->kernel < 1 || cv->stride < 1 || cv->pad < 0 || cv->pad >= cv->kernel ||
        cv->n_ch > INT32_MAX || cv->n_in > INT32_MAX) {
        return -1;
    }
    const int64_t padded = cv->n_in + 2 * (int64_t)cv->pad;
    return padded < cv->kernel ? -1 : (padded - cv->kernel) / cv->stride + 1;
}

rill_err_t rill_backend_im2col_1d(rill_backend_t *b, float *y, const float *x,
                                  const rill_conv1d_t *cv) {
    if (b == NULL || y == NULL || x == NULL || rill_conv1d_n_out(cv) < 1) {
        return fail(b, RILL_EINVAL, "im2col_1d: bad argument or geometry");
    }
    return b->ops->im2col_1d(b, y, x, cv);
}

rill_err_t rill_backend_attention_dense(rill_backend_t *b, float *out, const float *q,
                                        const float *k, const float *v, int64_t n_q, int64_t n_kv,
                                        int32_t n_head, int32_t head_dim) {
    if (b == NULL || out == NULL || q == NULL || k == NULL || v == NULL || n_q < 1 || n_kv < 1 ||
        n_head < 1 || head_dim < 1 || head_dim > RILL_KV_MAX_HEAD_DIM) {
        return fail(b, RILL_EINVAL, "attention_dense: bad argument");
    }
    const size_t row = (size_t)n_head * (size_t)head_dim * sizeof(float);
    if ((double)(n_q > n_kv ? n_q : n_kv) * (double)row > 0x1p62 ||
        overlaps(out, (size_t)n_q * row, q, (size_t)n_q * row) ||
        overlaps(out, (size_t)n_q * row, k, (size_t)n_kv * row) ||
        overlaps(out, (size_t)n_q * row, v, (size_t)n_kv * row)) {
        return fail(b, RILL_EINVAL, "attention_dense: out overlaps q, k or v");
    }
    return b->ops->attention_dense(b, out, q, k, v, n_q, n_kv, n_head, head_dim);
}
