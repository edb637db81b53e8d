/*
 * session_internal.h - the pool and session structs and the page operations shared by the
 * files of sessions/. Private to the module.
 */
#ifndef RILL_SESSION_INTERNAL_H
#define RILL_SESSION_INTERNAL_H

#include "rill_session.h"

struct rill_session_pool {
    rill_forward_t *fw; /* borrowed */
    rill_backend_t *be; /* fw's */
    rill_kv_cache_t *kv;
    rill_kv_layout_t layout; /* n_pages = budget + 1 (the scratch page) */
    rill_rope_t rope;
    int32_t n_layer, n_vocab, n_ctx, P, max_batch;
    int32_t n_pages;      /* budget */
    int32_t scratch_page; /* == n_pages: outside the budget */
    int64_t page_bytes;   /* one page of one layer */
    int32_t *refs;        /* [n_pages] */
    int32_t *free_list;   /* [n_pages] stack of free pages */
    int32_t n_free;
    int32_t max_table;           /* ceil(n_ctx / P): longest page table */
    int32_t *tmp_pages;          /* [max_table] */
    rill_batch_token_t *btok;    /* [max_batch] */
    const rill_tokenizer_t *tok; /* borrowed, optional */
    rill_tokenizer_work_t *work; /* when tok */
    int32_t n_sessions;
};

struct rill_session {
    rill_session_pool_t *pool;
    int32_t sink_slots;   /* S' */
    int32_t window_slots; /* W' (0: none) */
    int32_t evict_pages;
    int32_t cap_slots; /* S' + W', or n_ctx */
    int32_t cap_pages; /* ceil(cap_slots / P) */
    int32_t *pages;    /* [cap_pages]; n_pages == ceil(n / P) */
    int32_t n_pages;
    int32_t *tokens; /* [cap_slots] resident ids by slot */
    bool *shared;    /* [cap_pages] scratch of the page planner */
    int32_t n;       /* resident tokens == next position */
    int64_t n_evicted;
    float *logits; /* [n_vocab] */
    bool logits_valid;
    /* text held back (text.c) */
    char *text;
    size_t text_len, text_cap;
    bool text_started; /* a text is in progress: held-back text continues it */
    int32_t *tbuf;     /* token scratch of text append */
    int64_t tbuf_cap;
    char err[256];
};

/* Records a message on s and returns err. */
rill_err_t rill__session_fail(rill_session_t *s, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Pops a free page; the caller has checked the budget (asserted). refs = 1. */
int32_t rill__pool_take(rill_session_pool_t *p);

/* Drops one reference; the page returns to the free list at zero. */
void rill__pool_release(rill_session_pool_t *p, int32_t page);

/* Copies page src to page dst in every layer. */
rill_err_t rill__pool_copy_page(rill_session_pool_t *p, int32_t dst, int32_t src);

#endif /* RILL_SESSION_INTERNAL_H */
