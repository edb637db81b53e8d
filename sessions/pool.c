/*
 * pool.c - the paged KV pool: one rill_kv_cache_t, a free list and a reference count per page.
 *
 * Design: the budget is fixed at creation (DESIGN.md section 4: cells allocated at start), so
 * the allocator is a plain stack of free page indices; take and release are O(1) and never
 * allocate. Reference counts are plain ints because a pool and its sessions are confined to the
 * engine thread (rill_session.h). One extra page past the budget is the scratch page, used to
 * evaluate a token against a session's context without writing the session's own pages (logits
 * after a rollback); it is never handed out.
 *
 * Invariants: refs[p] == 0 exactly for the n_free pages in free_list; every page in a session's
 * table has refs >= 1, and refs[p] equals the number of page-table entries naming p.
 *
 * Rejected: one allocation per page (fragmentation, and a backend allocation per page is
 * expensive on a GPU) and per-session pools (forks could not share pages).
 */
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "session_internal.h"

rill_session_pool_params_t rill_session_pool_default_params(void) {
    rill_session_pool_params_t p;
    memset(&p, 0, sizeof p);
    p.n_cells = 8192;
    p.page_size = RILL_KV_PAGE_SIZE;
    p.kv_type = RILL_DTYPE_F16;
    p.kv_type_v = RILL_SESSION_KV_SAME;
    p.n_ctx = 0;
    p.tokenizer = NULL;
    return p;
}

rill_err_t rill_session_pool_new(rill_forward_t *fw, const rill_session_pool_params_t *params,
                                 rill_session_pool_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (fw == NULL) {
        return RILL_EINVAL;
    }
    rill_session_pool_params_t pp = params != NULL ? *params : rill_session_pool_default_params();
    const rill_hparams_t *hp = rill_model_hparams(rill_forward_model(fw));
    int32_t n_ctx = pp.n_ctx == 0 ? hp->n_ctx_train : pp.n_ctx;
    const int32_t v_type =
        pp.kv_type_v == RILL_SESSION_KV_SAME ? (int32_t)pp.kv_type : pp.kv_type_v;
    if (!rill_dtype_valid((int)pp.kv_type) || !rill_dtype_valid(v_type) ||
        !rill_kv_type_ok(pp.kv_type, hp->head_dim) ||
        !rill_kv_type_ok((rill_dtype_t)v_type, hp->head_dim)) {
        RILL_LOGE("session pool: KV cache types K %s, V %s: each must be f32, f16, q8_0 or q4_0 "
                  "(the block types need head_dim %% 32 == 0; this model's is %d)",
                  rill_dtype_name(pp.kv_type), rill_dtype_name((rill_dtype_t)v_type), hp->head_dim);
        return RILL_EINVAL;
    }
    if (pp.page_size < 1 || pp.page_size > 4096 || pp.n_cells < 1 || n_ctx < pp.page_size ||
        n_ctx > hp->n_ctx_train || pp.n_cells / pp.page_size >= INT32_MAX - 1) {
        RILL_LOGE("session pool: invalid parameters (cells %lld, page %d, n_ctx %d of %d)",
                  (long long)pp.n_cells, pp.page_size, n_ctx, hp->n_ctx_train);
        return RILL_EINVAL;
    }
    int32_t n_pages = (int32_t)((pp.n_cells + pp.page_size - 1) / pp.page_size);
    rill_session_pool_t *p = rill_calloc(RILL_MEM_SESSIONS, 1, sizeof *p);
    if (p == NULL) {
        return RILL_ENOMEM;
    }
    rill_err_t err = RILL_OK;
    p->fw = fw;
    p->be = rill_forward_backend(fw);
    p->n_layer = hp->n_layer;
    p->n_vocab = hp->n_vocab;
    p->n_ctx = n_ctx;
    p->P = pp.page_size;
    p->max_batch = rill_forward_max_batch(fw);
    p->n_pages = n_pages;
    p->scratch_page = n_pages;
    p->max_table = (n_ctx + pp.page_size - 1) / pp.page_size;
    /* The same rope the forward pass applies (forward/forward.c), for re-basing kept keys. */
    p->rope.mode = hp->rope_type == RILL_MODEL_ROPE_NEOX ? RILL_ROPE_NEOX : RILL_ROPE_NORM;
    p->rope.n_rot = hp->n_rot;
    p->rope.freq_base = hp->rope_base;
    p->rope.freq_scale = 1.0f;
    p->tok = pp.tokenizer;
    p->refs = rill_calloc(RILL_MEM_SESSIONS, (size_t)n_pages, sizeof *p->refs);
    p->free_list = rill_malloc(RILL_MEM_SESSIONS, (size_t)n_pages * sizeof *p->free_list);
    p->tmp_pages = rill_malloc(RILL_MEM_SESSIONS, (size_t)p->max_table * sizeof *p->tmp_pages);
    p->btok = rill_malloc(RILL_MEM_SESSIONS, (size_t)p->max_batch * sizeof *p->btok);
    p->bids = rill_malloc(RILL_MEM_SESSIONS, (size_t)p->max_batch * sizeof *p->bids);
    p->bpt = rill_malloc(RILL_MEM_SESSIONS, (size_t)p->max_batch * sizeof *p->bpt);
    p->brow = rill_malloc(RILL_MEM_SESSIONS, RILL_SESSION_STEP_MAX_LOGITS * sizeof *p->brow);
    p->blogits = rill_malloc(RILL_MEM_SESSIONS,
                             (size_t)RILL_SESSION_STEP_MAX_LOGITS * p->n_vocab * sizeof(float));
    if (p->refs == NULL || p->free_list == NULL || p->tmp_pages == NULL || p->btok == NULL ||
        p->bids == NULL || p->bpt == NULL || p->brow == NULL || p->blogits == NULL) {
        err = RILL_ENOMEM;
        goto cleanup;
    }
    if (p->tok != NULL) {
        RILL_TRY(rill_tokenizer_work_new(&p->work));
    }
    RILL_TRY(rill_kv_cache_new_types(fw, pp.kv_type, (rill_dtype_t)v_type, pp.page_size,
                                     n_pages + 1, &p->kv));
    p->layout = *rill_kv_cache_layout(p->kv);
    p->page_bytes = rill_kv_page_bytes(&p->layout);
    /* Lowest page index on top, so a fresh pool hands out pages 0, 1, 2, ... */
    for (int32_t i = 0; i < n_pages; i++) {
        p->free_list[i] = n_pages - 1 - i;
    }
    p->n_free = n_pages;
    *out = p;
    return RILL_OK;
cleanup:
    rill_session_pool_destroy(&p);
    return err;
}

void rill_session_pool_destroy(rill_session_pool_t **pp) {
    if (pp == NULL || *pp == NULL) {
        return;
    }
    rill_session_pool_t *p = *pp;
    RILL_ASSERT(p->n_sessions == 0);
    rill_kv_cache_destroy(&p->kv);
    rill_tokenizer_work_destroy(&p->work);
    rill_free(p->refs);
    rill_free(p->free_list);
    rill_free(p->tmp_pages);
    rill_free(p->btok);
    rill_free(p->bids);
    rill_free(p->bpt);
    rill_free(p->brow);
    rill_free(p->blogits);
    rill_free(p);
    *pp = NULL;
}

const rill_tokenizer_t *rill_session_pool_tokenizer(const rill_session_pool_t *p) {
    return p->tok;
}

int32_t rill_session_pool_n_vocab(const rill_session_pool_t *p) {
    return p->n_vocab;
}

rill_forward_t *rill_session_pool_forward(rill_session_pool_t *p) {
    return p->fw;
}

int32_t rill_session_pool_max_batch(const rill_session_pool_t *p) {
    return p->max_batch;
}

int32_t rill_session_pool_n_pages(const rill_session_pool_t *p) {
    return p->n_pages;
}

int32_t rill_session_pool_n_free(const rill_session_pool_t *p) {
    return p->n_free;
}

int32_t rill_session_pool_page_size(const rill_session_pool_t *p) {
    return p->P;
}

int32_t rill_session_pool_n_ctx(const rill_session_pool_t *p) {
    return p->n_ctx;
}

int32_t rill_session_pool_page_refs(const rill_session_pool_t *p, int32_t page) {
    if (page < 0 || page >= p->n_pages) {
        return -1;
    }
    return p->refs[page];
}

rill_kv_cache_t *rill_session_pool_cache(rill_session_pool_t *p) {
    return p->kv;
}

int64_t rill_session_pool_page_bytes(const rill_session_pool_t *p) {
    return p->page_bytes * p->n_layer;
}

int32_t rill__pool_take(rill_session_pool_t *p) {
    RILL_ASSERT(p->n_free > 0);
    int32_t page = p->free_list[--p->n_free];
    RILL_ASSERT(p->refs[page] == 0);
    p->refs[page] = 1;
    return page;
}

void rill__pool_release(rill_session_pool_t *p, int32_t page) {
    RILL_ASSERT(page >= 0 && page < p->n_pages && p->refs[page] > 0);
    if (--p->refs[page] == 0) {
        p->free_list[p->n_free++] = page;
    }
}

rill_err_t rill__pool_copy_page(rill_session_pool_t *p, int32_t dst, int32_t src) {
    return rill_kv_cache_copy_pages(p->kv, &src, &dst, 1); /* every layer in one backend call */
}
