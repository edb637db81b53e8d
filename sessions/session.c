/*
 * session.c - sessions over the paged pool: taking tokens, window eviction with re-based
 * positions, batched steps, fork with copy-on-write, cutting the stream, adopt, logits, stats.
 *
 * Design. A session is a page table plus the ids of its resident tokens; slot s holds the token
 * at position s (no holes, no per-slot positions), so a batch token is { pos = slot = s,
 * n_kv = s + 1 } and the forward pass needs nothing else. Eviction keeps this true by moving
 * page-table entries (not K/V) down and re-rotating the moved keys by the same delta.
 *
 * "RILL_EFULL changes nothing" is kept by planning: plan() walks exactly the steps append will
 * take (evictions, copy-on-write of shared pages it will write or re-rotate, new pages) on
 * counters only, and append starts only when the free list covers the worst point of the walk.
 * Since frees (evicted pages nobody else holds) always come before the takes of the same step
 * in both the plan and the execution, the plan is exact, and the execution asserts that every
 * take succeeds.
 *
 * Copy-on-write is decided per page at the moment of writing: a page with refs > 1 is copied
 * (all layers) and the copy replaces it in the writer's table. Writes are: storing K/V of new
 * tokens into the last, partially filled page, and re-rotating kept pages after an eviction.
 * Sink pages are never written after they fill, so forks share them for their whole life.
 *
 * Logits after a rollback are recomputed lazily by running the last resident token again with
 * the page that holds it swapped for the pool's scratch page (a copy of it): the session's own
 * pages, which forks may share, are never written for that.
 *
 * Inputs are records (record.c): this file holds the state they change and splits each change
 * in a check and an effect. The checks (rill__session_check_take, _check_adopt) refuse before
 * anything changes, and reserve what the effect needs (queue room), so that the effects (cut,
 * queue, adopt) cannot fail and only evaluation (rill__session_evaluate) can, in the forward
 * pass. This file calls pool.c, history.c (the replace window's allocation, copied by fork) and
 * log.c (destroy closes the log); none of them calls it.
 *
 * Rejected: per-slot positions (a position array per session and a holes-aware attention) to
 * evict single tokens; page granularity is what DESIGN.md asks for and keeps attention simple.
 */
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_rand.h"
#include "session_internal.h"

static int32_t ceil_div(int64_t a, int32_t b) {
    return (int32_t)((a + b - 1) / b);
}

rill_session_params_t rill_session_default_params(void) {
    rill_session_params_t p;
    memset(&p, 0, sizeof p);
    return p;
}

/* A 64-bit identity unlikely to repeat across processes and time (a splitmix64 step,
 * core/rill_rand.h, of the clock, the process id, an address and a counter). Never 0. */
static uint64_t new_uid(const void *salt) {
    static _Atomic uint64_t counter;
    uint64_t x = rill_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)salt ^
                 (atomic_fetch_add(&counter, 1) + 1) * 0x9E3779B97F4A7C15ull;
    x = rill_rand_splitmix64(&x);
    return x != 0 ? x : 1;
}

rill_err_t rill__session_alloc(rill_session_pool_t *p, int32_t sink_slots, int32_t window_slots,
                               int32_t evict_pages, rill_session_t **out) {
    rill_session_t *s = rill_calloc(RILL_MEM_SESSIONS, 1, sizeof *s);
    if (s == NULL) {
        return RILL_ENOMEM;
    }
    s->pool = p;
    s->sink_slots = sink_slots;
    s->window_slots = window_slots;
    s->evict_pages = evict_pages;
    s->cap_slots = window_slots > 0 ? sink_slots + window_slots : p->n_ctx;
    s->cap_pages = ceil_div(s->cap_slots, p->P);
    s->pages = rill_malloc(RILL_MEM_SESSIONS, (size_t)s->cap_pages * sizeof *s->pages);
    s->shared = rill_malloc(RILL_MEM_SESSIONS, (size_t)s->cap_pages * sizeof *s->shared);
    s->tokens = rill_malloc(RILL_MEM_SESSIONS, (size_t)s->cap_slots * sizeof *s->tokens);
    s->logits = rill_malloc(RILL_MEM_SESSIONS, (size_t)p->n_vocab * sizeof *s->logits);
    /* the input queue starts at one step's worth; it grows only for a longer input */
    s->pend_cap = p->max_batch;
    s->pend = rill_malloc(RILL_MEM_SESSIONS, (size_t)s->pend_cap * sizeof *s->pend);
    if (s->pages == NULL || s->shared == NULL || s->tokens == NULL || s->logits == NULL ||
        s->pend == NULL || rill__hist_new(s) != RILL_OK) {
        rill_free(s->pend);
        rill_free(s->pages);
        rill_free(s->shared);
        rill_free(s->tokens);
        rill_free(s->logits);
        rill_free(s);
        return RILL_ENOMEM;
    }
    s->uid = new_uid(s);
    p->n_sessions++;
    *out = s;
    return RILL_OK;
}

void rill_session_destroy(rill_session_t **sp) {
    if (sp == NULL || *sp == NULL) {
        return;
    }
    rill_session_t *s = *sp;
    rill__log_close(s);
    for (int32_t i = 0; i < s->n_pages; i++) {
        rill__pool_release(s->pool, s->pages[i]);
    }
    s->pool->n_sessions--;
    rill_free(s->pages);
    rill_free(s->shared);
    rill_free(s->tokens);
    rill_free(s->logits);
    rill_free(s->text);
    rill_free(s->tbuf);
    rill_free(s->xbuf);
    rill__hist_free(s);
    rill_free(s->pend);
    rill_free(s);
    *sp = NULL;
}

/* ---- planning -------------------------------------------------------------------------------
 */

/* Walks the page effects of cutting the resident part at slot `from` (<= n) and then appending
 * n tokens, without changing anything: the most pages the append holds beyond today's at any
 * point (new pages and copies, less evicted ones and those the cut frees). */
static int64_t plan_need(rill_session_t *s, int32_t from, int64_t n) {
    rill_session_pool_t *p = s->pool;
    int32_t P = p->P;
    int64_t free = 0, worst = 0;
    int32_t n_pg = ceil_div(from, P), cur = from;
    for (int32_t i = 0; i < n_pg; i++) {
        s->shared[i] = p->refs[s->pages[i]] > 1;
    }
    for (int32_t i = n_pg; i < s->n_pages; i++) {
        free += p->refs[s->pages[i]] == 1; /* released by the cut, before any take */
    }
    for (int64_t left = n; left > 0;) {
        if (cur == s->cap_slots) {
            int32_t first = s->sink_slots / P, k = s->evict_pages;
            for (int32_t j = first; j < first + k; j++) {
                free += !s->shared[j];
            }
            memmove(s->shared + first, s->shared + first + k, (size_t)(n_pg - first - k));
            n_pg -= k;
            cur -= k * P;
            for (int32_t j = first; j < n_pg; j++) {
                if (s->shared[j]) {
                    free--; /* copied before it is re-rotated */
                    s->shared[j] = false;
                }
            }
            worst = free < worst ? free : worst;
        }
        int32_t m = left < s->cap_slots - cur ? (int32_t)left : s->cap_slots - cur;
        if (cur % P != 0 && s->shared[cur / P]) {
            free--; /* copied before the first write into it */
            s->shared[cur / P] = false;
        }
        int32_t need = ceil_div((int64_t)cur + m, P);
        for (; n_pg < need; n_pg++) {
            s->shared[n_pg] = false;
            free--;
        }
        worst = free < worst ? free : worst;
        cur += m;
        left -= m;
    }
    return -worst;
}

/* RILL_OK when the free list suffices for cutting at `from` and appending n tokens at every
 * step, RILL_EFULL (with the shortfall in s->err) otherwise. */
static rill_err_t plan(rill_session_t *s, int32_t from, int64_t n) {
    int64_t need = plan_need(s, from, n);
    if (need > s->pool->n_free) {
        return rill__session_fail(
            s, RILL_EFULL, "KV budget exhausted: %lld more page(s) needed (%d free of %d)",
            (long long)(need - s->pool->n_free), s->pool->n_free, s->pool->n_pages);
    }
    return RILL_OK;
}

/* ---- page writes ----------------------------------------------------------------------------
 */

/* Gives s its own copy of table entry j when the page is shared. */
static rill_err_t own_page(rill_session_t *s, int32_t j) {
    rill_session_pool_t *p = s->pool;
    int32_t old = s->pages[j];
    if (p->refs[old] <= 1) {
        return RILL_OK;
    }
    int32_t page = rill__pool_take(p);
    rill_err_t err = rill__pool_copy_page(p, page, old);
    if (err != RILL_OK) {
        rill__pool_release(p, page);
        return rill__session_fail(s, err, "copy-on-write of page %d failed", old);
    }
    rill__pool_release(p, old);
    s->pages[j] = page;
    return RILL_OK;
}

/* Drops evict_pages pages from the front of the full recent part and re-bases the rest. */
static rill_err_t evict(rill_session_t *s) {
    rill_session_pool_t *p = s->pool;
    int32_t P = p->P, first = s->sink_slots / P, k = s->evict_pages;
    for (int32_t j = first; j < first + k; j++) {
        rill__pool_release(p, s->pages[j]);
    }
    memmove(s->pages + first, s->pages + first + k,
            (size_t)(s->n_pages - first - k) * sizeof *s->pages);
    memmove(s->tokens + first * P, s->tokens + (first + k) * P,
            (size_t)(s->n - (first + k) * P) * sizeof *s->tokens);
    s->n_pages -= k;
    s->n -= k * P;
    s->n_evicted += (int64_t)k * P;
    rill_err_t err = RILL_OK;
    for (int32_t j = first; j < s->n_pages && err == RILL_OK; j++) {
        err = own_page(s, j);
    }
    for (int32_t l = 0; l < p->n_layer && err == RILL_OK && s->n_pages > first; l++) {
        err = rill_backend_kv_rope_shift(p->be, &p->layout, rill_kv_cache_pool(p->kv, l),
                                         s->pages + first, s->n_pages - first, -k * P, &p->rope);
        if (err != RILL_OK) {
            rill__session_fail(s, err, "re-rotating kept keys: %s", rill_last_error(err));
        }
    }
    return err;
}

/* Makes slots [n, n + m) writable: own the partially filled last page, take new pages. */
static rill_err_t prepare_write(rill_session_t *s, int32_t m) {
    rill_session_pool_t *p = s->pool;
    if (s->n % p->P != 0) {
        rill_err_t err = own_page(s, s->n / p->P);
        if (err != RILL_OK) {
            return err;
        }
    }
    int32_t need = ceil_div((int64_t)s->n + m, p->P);
    while (s->n_pages < need) {
        s->pages[s->n_pages++] = rill__pool_take(p);
    }
    return RILL_OK;
}

/* Releases table entries past what n tokens need. */
static void trim_pages(rill_session_t *s) {
    int32_t keep = ceil_div(s->n, s->pool->P);
    while (s->n_pages > keep) {
        rill__pool_release(s->pool, s->pages[--s->n_pages]);
    }
}

/* Makes the queue able to hold `total` tokens. Errors: RILL_ENOMEM (unchanged). */
static rill_err_t pend_reserve(rill_session_t *s, int64_t total) {
    if (total <= s->pend_cap) {
        return RILL_OK;
    }
    if (total > INT32_MAX) {
        return rill__session_fail(s, RILL_ERANGE, "queue of %lld tokens is too long",
                                  (long long)total);
    }
    int64_t cap = (int64_t)s->pend_cap * 2 > total ? (int64_t)s->pend_cap * 2 : total;
    cap = cap < 64 ? 64 : cap > INT32_MAX ? INT32_MAX : cap;
    int32_t *grown = rill_realloc(RILL_MEM_SESSIONS, s->pend, (size_t)cap * sizeof *grown);
    if (grown == NULL) {
        return rill__session_fail(s, RILL_ENOMEM, "queue of %lld tokens: out of memory",
                                  (long long)total);
    }
    s->pend = grown;
    s->pend_cap = (int32_t)cap;
    return RILL_OK;
}

rill_err_t rill__session_check_take(rill_session_t *s, int32_t keep, const int32_t *tokens,
                                    int32_t n, bool defer) {
    rill_session_pool_t *p = s->pool;
    RILL_ASSERT(keep >= 0 && keep <= s->n + s->n_pend && n >= 0);
    for (int32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= p->n_vocab) {
            return rill__session_fail(s, RILL_EINVAL, "token %d at index %d is outside [0, %d)",
                                      tokens[i], i, p->n_vocab);
        }
    }
    if (s->window_slots == 0 && (int64_t)keep + n > s->cap_slots) {
        return rill__session_fail(s, RILL_ERANGE,
                                  "%d + %d tokens exceed the context of %d (no window)", keep, n,
                                  s->cap_slots);
    }
    int32_t queued = keep > s->n ? keep - s->n : 0; /* what stays queued after the cut */
    if (!defer && (queued > 0 || n > 0)) {
        rill_err_t err = plan(s, keep < s->n ? keep : s->n, (int64_t)queued + n);
        if (err != RILL_OK) {
            return err;
        }
    }
    return pend_reserve(s, (int64_t)queued + n);
}

static void pend_pop(rill_session_t *s, int32_t n) {
    s->pend_head += n;
    s->n_pend -= n;
    if (s->n_pend == 0) {
        s->pend_head = 0;
    }
}

void rill__session_queue(rill_session_t *s, const int32_t *tokens, int32_t n) {
    if (n == 0) {
        return;
    }
    if (s->pend_head + s->n_pend + n > s->pend_cap) {
        memmove(s->pend, s->pend + s->pend_head, (size_t)s->n_pend * sizeof *s->pend);
        s->pend_head = 0;
    }
    RILL_ASSERT(s->n_pend + n <= s->pend_cap); /* reserved by rill__session_check_take() */
    memcpy(s->pend + s->pend_head + s->n_pend, tokens, (size_t)n * sizeof *tokens);
    s->n_pend += n;
}

int32_t rill_session_step_room(const rill_session_t *s) {
    int32_t room = s->n < s->cap_slots ? s->cap_slots - s->n
                                       : s->evict_pages * s->pool->P; /* after the eviction */
    room = room < s->n_pend ? room : s->n_pend;
    return room < s->pool->max_batch ? room : s->pool->max_batch;
}

int32_t rill_session_pending(const rill_session_t *s) {
    return s->n_pend;
}

static rill_err_t pool_fail(rill_session_pool_t *p, rill_err_t err, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static rill_err_t pool_fail(rill_session_pool_t *p, rill_err_t err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->err, sizeof p->err, fmt, ap);
    va_end(ap);
    return rill__error_str(err, p->err);
}

/* Validates a step: sessions of p, each once, counts within room, totals within the limits. */
static rill_err_t check_step(rill_session_pool_t *p, const rill_session_step_t *it, int32_t n_it) {
    int64_t total = 0;
    int32_t n_logits = 0;
    rill_err_t err = RILL_OK;
    int32_t i = 0;
    for (; i < n_it && err == RILL_OK; i++) {
        rill_session_t *s = it[i].s;
        if (s == NULL || s->pool != p) {
            err = pool_fail(p, RILL_EINVAL, "step item %d: no session, or one of another pool", i);
        } else if (s->in_step) {
            err = pool_fail(p, RILL_EINVAL, "step item %d: the session appears twice", i);
        } else if (it[i].n < 1 || it[i].n > rill_session_step_room(s)) {
            err = pool_fail(p, RILL_EINVAL, "step item %d: %d tokens outside [1, %d]", i, it[i].n,
                            rill_session_step_room(s));
        } else {
            s->in_step = true;
            total += it[i].n;
            n_logits += it[i].logits;
        }
    }
    for (int32_t j = 0; j < i; j++) {
        if (it[j].s != NULL && it[j].s->pool == p) {
            it[j].s->in_step = false;
        }
    }
    if (err == RILL_OK && total > p->max_batch) {
        err = pool_fail(p, RILL_ERANGE, "step of %lld tokens exceeds max_batch %d",
                        (long long)total, p->max_batch);
    }
    if (err == RILL_OK && n_logits > RILL_SESSION_STEP_MAX_LOGITS) {
        err = pool_fail(p, RILL_ERANGE, "step asks for %d logits rows (at most %d)", n_logits,
                        RILL_SESSION_STEP_MAX_LOGITS);
    }
    if (err == RILL_OK) {
        /* Pages: the sum of each item's worst case, so the step can never run dry midway. */
        int64_t need = 0;
        for (int32_t j = 0; j < n_it; j++) {
            need += plan_need(it[j].s, it[j].s->n, it[j].n);
        }
        if (need > p->n_free) {
            err = pool_fail(p, RILL_EFULL,
                            "KV budget exhausted: the step needs %lld page(s), %d free of %d",
                            (long long)need, p->n_free, p->n_pages);
        }
    }
    return err;
}

rill_err_t rill_session_step(rill_session_pool_t *p, rill_session_step_t *it, int32_t n_it) {
    if (p == NULL || it == NULL || n_it < 1 || n_it > p->max_batch) {
        return RILL_EINVAL;
    }
    rill_err_t err = check_step(p, it, n_it);
    if (err != RILL_OK) {
        return err;
    }
    int32_t T = 0, n_out = 0;
    for (int32_t i = 0; i < n_it && err == RILL_OK; i++) {
        rill_session_t *s = it[i].s;
        if (s->n == s->cap_slots) {
            err = evict(s);
        }
        if (err == RILL_OK) {
            err = prepare_write(s, it[i].n);
        }
        if (err != RILL_OK) {
            pool_fail(p, err, "step item %d: %s", i, s->err);
            break;
        }
        for (int32_t t = 0; t < it[i].n; t++) {
            int32_t slot = s->n + t;
            p->btok[T] =
                (rill_batch_token_t){ .seq = i, .pos = slot, .slot = slot, .n_kv = slot + 1 };
            p->bids[T++] = s->pend[s->pend_head + t];
        }
        p->bpt[i] = (rill_page_table_t){ s->pages, s->n_pages };
        if (it[i].logits) {
            p->brow[n_out++] = T - 1;
        }
    }
    if (err == RILL_OK) {
        rill_batch_t b = { .n_tok = T, .tok = p->btok, .n_seq = n_it, .seq = p->bpt };
        err = rill_forward_eval(p->fw, p->kv, &b, p->bids, p->brow, n_out,
                                n_out > 0 ? p->blogits : NULL);
        if (err != RILL_OK) {
            pool_fail(p, err, "forward pass: %s", rill_last_error(err));
        }
    }
    if (err != RILL_OK) {
        for (int32_t i = 0; i < n_it; i++) {
            trim_pages(it[i].s);
            it[i].s->logits_valid = false;
        }
        return err;
    }
    for (int32_t i = 0, o = 0; i < n_it; i++) {
        rill_session_t *s = it[i].s;
        memcpy(s->tokens + s->n, s->pend + s->pend_head, (size_t)it[i].n * sizeof *s->tokens);
        s->n += it[i].n;
        pend_pop(s, it[i].n);
        s->logits_valid = it[i].logits;
        if (it[i].logits) {
            memcpy(s->logits, p->blogits + (size_t)o++ * p->n_vocab,
                   (size_t)p->n_vocab * sizeof *s->logits);
        }
    }
    return RILL_OK;
}

rill_err_t rill__session_drain(rill_session_t *s) {
    while (s->n_pend > 0) {
        int32_t m = rill_session_step_room(s);
        rill_session_step_t it = { .s = s, .n = m, .logits = m == s->n_pend };
        rill_err_t err = rill_session_step(s->pool, &it, 1);
        if (err != RILL_OK) {
            return rill__session_fail(s, err, "%s", s->pool->err);
        }
    }
    return RILL_OK;
}

rill_err_t rill__session_evaluate(rill_session_t *s, int32_t n_new) {
    int32_t before = s->n_pend - n_new, n0 = s->n;
    rill_err_t err = rill__session_drain(s);
    if (err != RILL_OK) {
        /* keep the tokens queued before this call that were not evaluated; drop the new ones */
        int32_t keep = before - (s->n - n0) > 0 ? before - (s->n - n0) : 0;
        s->n_pend = keep < s->n_pend ? keep : s->n_pend;
    }
    return err;
}

rill_err_t rill__session_check_adopt(rill_session_t *s, const rill_session_t *branch,
                                     int64_t *n_new) {
    if (branch->parent_uid != s->uid || branch->parent_seq != s->seq) {
        return rill__session_fail(s, RILL_EINVAL,
                                  "adopt: the branch was not forked from this session's "
                                  "current state");
    }
    /* the tokens the branch added: the last n_new of its stream (still resident) */
    int64_t n = branch->n_evicted + branch->n - (s->n_evicted + s->n);
    if (branch->window_slots != s->window_slots || branch->sink_slots != s->sink_slots || n < 0 ||
        n > branch->n || branch->n_pend > 0 || s->n_pend > 0 || s->text_len > 0 ||
        branch->text_len > 0 ||
        (branch->n_evicted == s->n_evicted &&
         memcmp(branch->tokens, s->tokens, (size_t)s->n * sizeof *s->tokens) != 0)) {
        return rill__session_fail(s, RILL_EUNSUPPORTED,
                                  "adopt: the branch has another window, rolled back below the "
                                  "fork, or holds queued tokens or text");
    }
    *n_new = n;
    return RILL_OK;
}

void rill__session_adopt(rill_session_t *s, const rill_session_t *branch) {
    rill_session_pool_t *p = s->pool;
    for (int32_t i = 0; i < branch->n_pages; i++) {
        p->refs[branch->pages[i]]++;
    }
    for (int32_t i = 0; i < s->n_pages; i++) {
        rill__pool_release(p, s->pages[i]);
    }
    memcpy(s->pages, branch->pages, (size_t)branch->n_pages * sizeof *s->pages);
    memcpy(s->tokens, branch->tokens, (size_t)branch->n * sizeof *s->tokens);
    memcpy(s->logits, branch->logits, (size_t)p->n_vocab * sizeof *s->logits);
    s->n_pages = branch->n_pages;
    s->n = branch->n;
    s->n_evicted = branch->n_evicted;
    s->logits_valid = branch->logits_valid;
    s->text_started = branch->text_started;
}

static rill_err_t fork_as(rill_session_t *src, rill_session_t **out, bool windowed) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (src == NULL) {
        return RILL_EINVAL;
    }
    rill_session_pool_t *p = src->pool;
    rill_session_t *s = NULL;
    rill_err_t err =
        rill__session_alloc(p, windowed ? src->sink_slots : 0, windowed ? src->window_slots : 0,
                            windowed ? src->evict_pages : 0, &s);
    if (err != RILL_OK) {
        return rill__session_fail(src, err, "fork: out of memory");
    }
    if (src->text_len > 0) {
        s->text = rill_malloc(RILL_MEM_SESSIONS, src->text_len);
        if (s->text == NULL) {
            rill_session_destroy(&s);
            return rill__session_fail(src, RILL_ENOMEM, "fork: out of memory");
        }
        memcpy(s->text, src->text, src->text_len);
        s->text_len = s->text_cap = src->text_len;
    }
    if (src->n_pend > 0) {
        if (pend_reserve(s, src->n_pend) != RILL_OK) {
            rill_session_destroy(&s);
            return rill__session_fail(src, RILL_ENOMEM, "fork: out of memory");
        }
        rill__session_queue(s, src->pend + src->pend_head, src->n_pend);
    }
    if (rill__hist_copy(s, src) != RILL_OK) {
        rill_session_destroy(&s);
        return rill__session_fail(src, RILL_ENOMEM, "fork: out of memory");
    }
    s->parent_uid = src->uid;
    s->parent_seq = src->seq;
    s->text_started = src->text_started;
    memcpy(s->pages, src->pages, (size_t)src->n_pages * sizeof *s->pages);
    memcpy(s->tokens, src->tokens, (size_t)src->n * sizeof *s->tokens);
    memcpy(s->logits, src->logits, (size_t)p->n_vocab * sizeof *s->logits);
    s->n_pages = src->n_pages;
    s->n = src->n;
    s->n_evicted = src->n_evicted;
    s->seq = src->seq;
    s->logits_valid = src->logits_valid;
    for (int32_t i = 0; i < s->n_pages; i++) {
        p->refs[s->pages[i]]++;
    }
    *out = s;
    return RILL_OK;
}

rill_err_t rill_session_fork(rill_session_t *src, rill_session_t **out) {
    return fork_as(src, out, true);
}

rill_err_t rill_session_fork_unwindowed(rill_session_t *src, rill_session_t **out) {
    return fork_as(src, out, false);
}

void rill__session_cut(rill_session_t *s, int32_t keep) {
    RILL_ASSERT(keep >= 0 && keep <= s->n + s->n_pend);
    if (keep >= s->n) { /* only queued tokens go */
        s->n_pend = keep - s->n;
        return;
    }
    s->n_pend = 0;
    s->pend_head = 0;
    s->n = keep;
    trim_pages(s);
    s->logits_valid = false;
}

rill_err_t rill_session_logits(rill_session_t *s, const float **out) {
    if (s == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (s->n == 0) {
        return rill__session_fail(s, RILL_EAGAIN, "the session holds no token");
    }
    if (!s->logits_valid) {
        rill_session_pool_t *p = s->pool;
        int32_t slot = s->n - 1, j = slot / p->P;
        memcpy(p->tmp_pages, s->pages, (size_t)s->n_pages * sizeof *s->pages);
        p->tmp_pages[j] = p->scratch_page;
        rill_err_t err = rill__pool_copy_page(p, p->scratch_page, s->pages[j]);
        if (err != RILL_OK) {
            return rill__session_fail(s, err, "copy to the scratch page failed");
        }
        p->btok[0] = (rill_batch_token_t){ .seq = 0, .pos = slot, .slot = slot, .n_kv = slot + 1 };
        rill_page_table_t pt = { p->tmp_pages, s->n_pages };
        rill_batch_t b = { .n_tok = 1, .tok = p->btok, .n_seq = 1, .seq = &pt };
        int32_t row = 0;
        err = rill_forward_eval(p->fw, p->kv, &b, s->tokens + slot, &row, 1, s->logits);
        if (err != RILL_OK) {
            return rill__session_fail(s, err, "forward pass: %s", rill_last_error(err));
        }
        s->logits_valid = true;
    }
    *out = s->logits;
    return RILL_OK;
}

void rill_session_stats(const rill_session_t *s, rill_session_stats_t *out) {
    const rill_session_pool_t *p = s->pool;
    memset(out, 0, sizeof *out);
    out->n_resident = s->n;
    out->n_sink = s->n < s->sink_slots ? s->n : s->sink_slots;
    out->n_evicted = s->n_evicted;
    out->n_seen = s->n_evicted + s->n;
    out->kept_from = out->n_sink + s->n_evicted;
    out->pos_next = s->n;
    out->pages = s->n_pages;
    for (int32_t i = 0; i < s->n_pages; i++) {
        out->pages_shared += p->refs[s->pages[i]] > 1;
    }
    out->bytes = (int64_t)s->n_pages * p->page_bytes * p->n_layer;
    out->n_sink_cfg = s->sink_slots;
    out->window_cfg = s->window_slots;
    out->n_pending = s->n_pend;
}

rill_err_t rill_session_drain(rill_session_t *s) {
    return s == NULL ? RILL_EINVAL : rill__session_drain(s);
}

const int32_t *rill_session_tokens(const rill_session_t *s, int32_t *n) {
    *n = s->n;
    return s->tokens;
}

const int32_t *rill_session_pages(const rill_session_t *s, int32_t *n) {
    *n = s->n_pages;
    return s->pages;
}

rill_session_pool_t *rill_session_pool(rill_session_t *s) {
    return s->pool;
}

int64_t rill_session_seq(const rill_session_t *s) {
    return s->seq;
}

bool rill_session_has_log(const rill_session_t *s) {
    return s->log != NULL;
}
