/*
 * backend.c - the public face of rill_backend.h: argument checking, then the backend's table.
 *
 * Every check of the contract happens here, once, for all backends, so a backend's op only
 * computes (and a future CUDA backend cannot forget a check). Checks that depend on a KV pool's
 * layout (slots and page indices of the installed batch) run on every kv_store/attention call:
 * they are O(tokens + pages), negligible next to the op, and they keep a bad page table from ever
 * reaching a kernel running on worker threads. Errors carry a sentence on the handle
 * (rill_backend_last_error), formatted into a fixed buffer: no allocation on the op path.
 *
 * The RoPE angle helpers live here too because both backends must rotate by the very same floats,
 * and so does llama.cpp's arithmetic stated lane by lane (rill__ggml_*, rill__dot_ggml,
 * rill__attention_head_ref), and the flash kernel's (rill__attention_head_flash_ref): the
 * reference backend computes with it, the scalar kernels reuse it, and the AVX2 kernels are its
 * vector form, tested bit for bit against it. Where a formula below
 * looks odd (an FMA in one product but not the other, a tail summed differently from the body),
 * it is how llama.cpp's GCC build compiled the C source; the tests check each against bits
 * recorded from llama.cpp's library.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend_internal.h"
#include "quant_internal.h"
#include "rill_alloc.h"
#include "rill_quant.h"

static rill_err_t fail(rill_backend_t *b, rill_err_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static rill_err_t fail(rill_backend_t *b, rill_err_t err, const char *fmt, ...) {
    if (b != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, sizeof b->err, fmt, ap);
        va_end(ap);
    }
    return err;
}

/* ---- lifetime ------------------------------------------------------------------------------- */

rill_backend_params_t rill_backend_default_params(void) {
    rill_backend_params_t p = { 0 };
    p.kind = RILL_BACKEND_CPU;
    p.n_threads = 0;
    p.simd = RILL_SIMD_AUTO;
    p.max_batch = 512;
    p.max_n_in = 8192;
    p.attn = RILL_ATTN_EXACT;
    return p;
}

rill_err_t rill_backend_new(const rill_backend_params_t *params, rill_backend_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    rill_backend_params_t p = params != NULL ? *params : rill_backend_default_params();
    if (p.n_threads < 0 || p.n_threads > 512 || p.max_batch < 1 || p.max_n_in < 1 ||
        (p.simd != RILL_SIMD_AUTO && p.simd != RILL_SIMD_SCALAR && p.simd != RILL_SIMD_AVX2 &&
         p.simd != RILL_SIMD_AVX512) ||
        (p.attn != RILL_ATTN_EXACT && p.attn != RILL_ATTN_FLASH)) {
        return RILL_EINVAL;
    }
    if ((double)p.max_batch * (double)p.max_n_in * 4.0 > 0x1p40) {
        return RILL_EINVAL;
    }
    switch (p.kind) {
    case RILL_BACKEND_REF:
        p.n_threads = 1;
        p.simd = RILL_SIMD_SCALAR;
        return rill__ref_backend_new(&p, out);
    case RILL_BACKEND_CPU:
        return rill__cpu_backend_new(&p, out);
    case RILL_BACKEND_CUDA:
        return RILL_EUNSUPPORTED;
    }
    return RILL_EINVAL;
}

void rill_backend_destroy(rill_backend_t **bp) {
    if (bp == NULL || *bp == NULL) {
        return;
    }
    (*bp)->ops->destroy(*bp);
    *bp = NULL;
}

rill_err_t rill__backend_init_common(rill_backend_t *b, const rill_backend_params_t *p) {
    b->params = *p;
    b->tok = rill_calloc(RILL_MEM_KERNELS, (size_t)p->max_batch, sizeof *b->tok);
    b->seq = rill_calloc(RILL_MEM_KERNELS, (size_t)p->max_batch, sizeof *b->seq);
    if (b->tok == NULL || b->seq == NULL) {
        rill__backend_deinit_common(b);
        return RILL_ENOMEM;
    }
    return RILL_OK;
}

void rill__backend_deinit_common(rill_backend_t *b) {
    rill_free(b->tok);
    rill_free(b->seq);
    b->tok = NULL;
    b->seq = NULL;
}

const char *rill_backend_name(const rill_backend_t *b) {
    return b != NULL ? b->name : "?";
}

int rill_backend_n_threads(const rill_backend_t *b) {
    return b != NULL ? b->params.n_threads : 0;
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

const char *rill_backend_last_error(const rill_backend_t *b) {
    return b != NULL ? b->err : "no backend";
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

static bool kv_layout_ok(const rill_kv_layout_t *kv) {
    return kv != NULL && (kv->dtype == RILL_DTYPE_F16 || kv->dtype == RILL_DTYPE_F32) &&
           kv->page_size >= 1 && kv->n_kv_heads >= 1 && kv->head_dim >= 1 &&
           kv->head_dim <= RILL_KV_MAX_HEAD_DIM && kv->n_pages >= 1 &&
           (double)kv->page_size * kv->n_kv_heads * kv->head_dim * 8.0 * kv->n_pages < 0x1p62;
}

int64_t rill_kv_page_bytes(const rill_kv_layout_t *kv) {
    if (!kv_layout_ok(kv)) {
        return -1;
    }
    return 2 * (int64_t)kv->page_size * kv->n_kv_heads * kv->head_dim * (int64_t)rill__kv_elt(kv);
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

rill_err_t rill_backend_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                               int32_t *out_host) {
    if (b == NULL || x == NULL || out_host == NULL || n_rows < 1 || n_cols < 1 ||
        n_cols > INT32_MAX) {
        return fail(b, RILL_EINVAL, "argmax: bad argument");
    }
    return b->ops->argmax(b, x, n_rows, n_cols, out_host);
}

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

rill__mm_path_t rill__mm_path_for(const rill_weight_t *w, int64_t n_tok, int64_t tok) {
    const bool repacked = w->ne1 % 8 == 0 && !w->embedding;
    switch (w->dtype) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
    case RILL_DTYPE_BF16:
        return n_tok >= 2 && w->ne0 % 8 == 0 && w->ne1 % 4 == 0 ? RILL__MM_GEMM : RILL__MM_VEC;
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

/* Q4_0 / Q8_0 x Q8_0: per block, 8 lanes of 4 products, acc_l = fma(d_w d_a, lane_l, acc_l)
 * (ggml_vec_dot_q4_0/q8_0_q8_0); repacked Q4_0: the block's whole sum, one FMA per block. */
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

/* Q4_1 x Q8_1 (ggml_vec_dot_q4_1_q8_1): lanes as above with unsigned codes, plus the min term
 * summed separately: summs = fma(m_w, s_a, summs). */
static float dot_q4_1_lanes(const block_q4_1 *x, const block_q8_1 *a, int64_t nb) {
    float acc[8] = { 0 }, summs = 0.0f;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t q[32];
        for (int b = 0; b < 16; b++) {
            q[b] = x[i].qs[b] & 0xF;
            q[b + 16] = x[i].qs[b] >> 4;
        }
        summs = fmaf(rill_fp16_to_f32(x[i].m), rill_fp16_to_f32(a[i].s), summs);
        const float d = rill_fp16_to_f32(x[i].d) * rill_fp16_to_f32(a[i].d);
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
    case RILL_DTYPE_Q8_0:
        return dot_q8_lanes(wt, w, act, n / QK8_0, path == RILL__MM_REPACK);
    case RILL_DTYPE_Q4_1:
        return dot_q4_1_lanes(w, act, n / QK4_1);
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
    (void)rill_dequantize_row(kv->dtype, p, dst, kv->head_dim);
}

static float round_f16(float x) {
    return rill_fp16_to_f32(rill_f32_to_fp16(x));
}

/* w_j of rill__attention_head_ref: the scaled score with the mask's +0 (which turns -0 to +0). */
static float attn_logit(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                        int32_t kv_head, int32_t slot, const float *qr, float scale) {
    float kr[RILL_KV_MAX_HEAD_DIM];
    kv_row(kv, pool, pages, kv_head, slot, 0, kr);
    const float s = kv->dtype == RILL_DTYPE_F16 ? rill__ggml_dot_f16(kr, qr, kv->head_dim)
                                                : rill__ggml_dot_f32(kr, qr, kv->head_dim);
    return s * scale + 0.0f;
}

void rill__attention_head_ref(const rill_kv_layout_t *kv, const void *pool, const int32_t *pages,
                              int32_t kv_head, int32_t n_kv, bool batched, const float *q,
                              float *out) {
    const int32_t D = kv->head_dim;
    const bool f16 = kv->dtype == RILL_DTYPE_F16;
    const float scale = 1.0f / sqrtf((float)D);
    float qr[RILL_KV_MAX_HEAD_DIM], vr[RILL_KV_MAX_HEAD_DIM];
    for (int32_t d = 0; d < D; d++) { /* Q meets K in K's type (ggml converts src1) */
        qr[d] = f16 ? round_f16(q[d]) : q[d];
    }
    float max = -INFINITY;
    for (int32_t j = 0; j < n_kv; j++) {
        const float w = attn_logit(kv, pool, pages, kv_head, j, qr, scale);
        max = max > w ? max : w; /* ggml's MAX(max, w) */
    }
    double sum = 0.0;
    for (int32_t j0 = 0; j0 < n_kv; j0 += 8) {
        float e[8] = { 0 }; /* masked slots: exp(-inf) = 0 */
        for (int32_t l = 0; l < 8 && j0 + l < n_kv; l++) {
            e[l] = rill__ggml_expf(attn_logit(kv, pool, pages, kv_head, j0 + l, qr, scale) - max);
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
        float p = rill__ggml_expf(attn_logit(kv, pool, pages, kv_head, j, qr, scale) - max) * inv;
        p = f16 ? round_f16(p) : p; /* KQ is converted to V's type */
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
    const bool f16 = kv->dtype == RILL_DTYPE_F16;
    const float scale = 1.0f / sqrtf((float)D);
    float qr[RILL_KV_MAX_HEAD_DIM], kr[RILL_KV_MAX_HEAD_DIM], vr[RILL_KV_MAX_HEAD_DIM];
    float acc[RILL_KV_MAX_HEAD_DIM], s[RILL_ATTN_FLASH_BLOCK];
    for (int32_t d = 0; d < D; d++) {
        qr[d] = f16 ? round_f16(q[d]) : q[d];
        acc[d] = 0.0f;
    }
    float m = -INFINITY, sum = 0.0f;
    for (int32_t j0 = 0; j0 < n_kv; j0 += RILL_ATTN_FLASH_BLOCK) {
        const int32_t nb = n_kv - j0 < RILL_ATTN_FLASH_BLOCK ? n_kv - j0 : RILL_ATTN_FLASH_BLOCK;
        float bm = -INFINITY;
        for (int32_t i = 0; i < nb; i++) {
            kv_row(kv, pool, pages, kv_head, j0 + i, 0, kr);
            s[i] = (f16 ? rill__ggml_dot_f16(kr, qr, D) : rill__ggml_dot_f32(kr, qr, D)) * scale;
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

/* ---- host memory hooks shared by the CPU backends ---- */

rill_err_t rill__host_alloc(rill_backend_t *b, size_t bytes, void **out) {
    (void)b;
    *out = rill_malloc_aligned(RILL_MEM_KERNELS, bytes, 64);
    return *out != NULL ? RILL_OK : RILL_ENOMEM;
}

void rill__host_free(rill_backend_t *b, void *p) {
    (void)b;
    rill_free(p);
}

rill_err_t rill__host_copy(rill_backend_t *b, void *dst, const void *src, size_t bytes) {
    (void)b;
    memmove(dst, src, bytes);
    return RILL_OK;
}

rill_err_t rill__host_zero(rill_backend_t *b, void *dst, size_t bytes) {
    (void)b;
    memset(dst, 0, bytes);
    return RILL_OK;
}

rill_err_t rill__host_weight_prepare(rill_backend_t *b, rill_weight_t *w, const void *host) {
    (void)b;
    w->data = host; /* zero copy: the kernels read the mmapped layout as is */
    return RILL_OK;
}

void rill__host_weight_release(rill_backend_t *b, rill_weight_t *w) {
    (void)b;
    (void)w;
}

rill_err_t rill__host_argmax(rill_backend_t *b, const float *x, int64_t n_rows, int64_t n_cols,
                             int32_t *out) {
    (void)b;
    for (int64_t r = 0; r < n_rows; r++) {
        const float *xr = x + r * n_cols;
        int64_t best = 0;
        float bv = -INFINITY;
        for (int64_t i = 0; i < n_cols; i++) {
            if (xr[i] > bv) { /* the first on ties; NaN never wins */
                bv = xr[i];
                best = i;
            }
        }
        out[r] = (int32_t)best;
    }
    return RILL_OK;
}
