/*
 * requests.c - the four request state machines on the engine thread (contract:
 * rill_scheduler.h): questions, turns, standing queries and speculation.
 *
 * A request runs on a fork of its session: it waits (PH_WAIT) while the session has queued data
 * it must see (the session is boosted to PREFILL class meanwhile), forks, feeds its tokens onto
 * the fork (PH_PREFILL: the fork's queue), decodes (PH_DECODE: each picked token is fed back
 * and evaluated in the next step), and ends by delivering its answer and dropping the fork - or,
 * for turns and speculation, by evaluating the last token (PH_LAST) and letting the session
 * adopt the fork (rill_session_adopt, done by the step). A standing query sits in PH_IDLE
 * between refreshes; a finished speculative reply waits in PH_HELD for its commit.
 *
 * A sampled request (rill_scheduler.h, "Decoding") owns a rill_sampler made with it, which has
 * accepted its question; step.c draws each answer token with it. A speculation whose guess
 * missed restarts the sampler on the real input, so its reply is the one a turn would draw.
 *
 * Memory: a request is allocated when it is submitted, with its answer buffer (n_max tokens)
 * and its sampler; nothing is allocated per token or step.
 */
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "sched_internal.h"

req_t *rill__sched_find_req(rill_sched_t *sch, rill_sched_rid_t id) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->id == id) {
            return r;
        }
    }
    return NULL;
}

rill_sched_class_t rill__sched_req_class(const req_t *r) {
    switch (r->kind) {
    case REQ_STANDING:
        return RILL_SCHED_STANDING;
    case REQ_SPEC:
        if (!r->committed) {
            return RILL_SCHED_SPEC;
        }
        /* fall through */
    default:
        return r->phase == PH_PREFILL ? RILL_SCHED_PREFILL : RILL_SCHED_DECODE;
    }
}

static void drop_fork(req_t *r) {
    if (r->fork != NULL) {
        rill_session_destroy(&r->fork);
    }
}

static void unlink_req(rill_sched_t *sch, req_t *r) {
    for (req_t **pp = &sch->reqs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == r) {
            *pp = r->next;
            break;
        }
    }
    if (r->phase == PH_WAIT && r->sess != NULL) {
        r->sess->n_waiting--;
    }
}

static void free_req(req_t *r) {
    drop_fork(r);
    rill_sampler_destroy(&r->sampler);
    rill_free(r->question);
    rill_free(r->out);
    rill_free(r->cache);
    rill_free(r);
}

void rill__sched_drop_standing(rill_sched_t *sch, req_t *r) {
    unlink_req(sch, r);
    free_req(r);
}

void rill__sched_finish(rill_sched_t *sch, req_t *r, rill_err_t status, const char *message,
                        bool adopted) {
    unlink_req(sch, r);
    int64_t t = rill__sched_now();
    rill_sched_answer_t a = {
        .status = status,
        .message = message != NULL ? message : "",
        .tokens = r->out,
        .n_tokens = r->n_out, /* an early end too: what was decoded before it */
        .version = r->version,
        .n_context = r->n_context,
        .adopted = adopted,
        .submit_ns = r->submit_ns,
        .ttft_ns = r->first_ns > 0 ? r->first_ns - r->submit_ns : 0,
        .total_ns = t - r->submit_ns,
        .compute_ns = r->compute_ns,
        .done_ns = t,
        .backlog = r->backlog,
        .ttft_compute_ns = r->ttft_compute_ns,
    };
    if (status == RILL_OK) {
        sch->st.questions += r->kind != REQ_SPEC || r->committed;
    } else if (status != RILL_ECANCELED) {
        sch->st.questions_failed++;
    }
    if (r->kind == REQ_SPEC) {
        sch->st.spec_tokens_wasted += status == RILL_OK ? 0 : r->computed;
    }
    if (r->ask.on_done != NULL) {
        r->ask.on_done(r->ask.user, r->id, &a);
    }
    free_req(r);
}

void rill__sched_abandon(rill_sched_t *sch, req_t *r) {
    drop_fork(r);
    if (r->phase == PH_WAIT && r->sess != NULL) {
        r->sess->n_waiting--;
    }
    r->phase = PH_IDLE;
    r->stale = true;
    r->abandoned++;
    sch->st.standing_abandoned++;
}

void rill__sched_data_changed(rill_sched_t *sch, sess_t *x) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->kind == REQ_STANDING) {
            r->stale = true;
            if (r->phase == PH_PREFILL) {
                rill__sched_abandon(sch, r);
            }
        }
    }
}

int64_t rill__sched_acknowledged(const sess_t *x) {
    rill_session_stats_t st;
    rill_session_stats(x->s, &st);
    return st.n_seen + st.n_pending;
}

bool rill__sched_data_ready(const req_t *r) {
    rill_session_stats_t st;
    rill_session_stats(r->sess->s, &st);
    return st.n_seen >= r->target;
}

void rill__sched_start_fork(rill_sched_t *sch, req_t *r) {
    rill_session_t *s = r->sess->s;
    /* questions and refreshes are dropped afterwards: they may use the whole context without
     * evicting (no copy of the window's shared pages); turns and speculation keep the window
     * because the session adopts them */
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    bool dropped = (r->kind == REQ_ASK || r->kind == REQ_STANDING) &&
                   (int64_t)st.n_resident + r->n_question + r->ask.n_max <= r->sess->m->n_ctx;
    rill_err_t err =
        dropped ? rill_session_fork_unwindowed(s, &r->fork) : rill_session_fork(s, &r->fork);
    if (err == RILL_OK && st.n_pending > 0) {
        /* data acknowledged after the request: not its business (the fork drops its copy) */
        err = rill_session_rollback(r->fork, st.n_resident);
    }
    if (err == RILL_OK) {
        err = rill_session_feed(r->fork, r->question, r->n_question);
    }
    r->sess->n_waiting--;
    if (err != RILL_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "fork: %s", rill_last_error(err));
        if (r->kind == REQ_STANDING) {
            r->phase = PH_IDLE;
            r->stale = true;
            drop_fork(r);
            r->retry_step = r->sess->m->steps + 64;
            return;
        }
        r->phase = PH_IDLE; /* not waiting any more (finish must not decrement) */
        rill__sched_finish(sch, r, err, msg, false);
        return;
    }
    /* the version it sees: queued data was rolled back from the fork, so not the session's
     * version then but the newest one wholly evaluated (the session's when the inputs around
     * are older than its replace window remembers) */
    int64_t seen = st.n_pending > 0 ? rill_session_version_at(s, st.n_seen) : -1;
    r->version = seen >= 0 ? seen : rill_session_seq(s);
    r->n_context = st.n_resident;
    r->base_n = st.n_resident;
    r->phase = PH_PREFILL;
}

static req_kind_t req_kind_of(cmd_kind_t k) {
    return k == CMD_TURN       ? REQ_TURN
           : k == CMD_STANDING ? REQ_STANDING
           : k == CMD_SPEC     ? REQ_SPEC
                               : REQ_ASK;
}

/* Restarts a sampled request's sampler for its (possibly new) question: the PRNG from the seed,
 * the penalty window holding the question tokens only. */
static void restart_sampler(req_t *r) {
    if (r->sampler == NULL) {
        return;
    }
    rill_sampler_reset(r->sampler, rill_sampler_params(r->sampler).seed);
    for (int32_t i = 0; i < r->n_question; i++) {
        rill_sampler_accept(r->sampler, r->question[i]);
    }
}

/* Makes the request of command c. Errors: RILL_ENOTFOUND, RILL_ENOMEM (*why says what could not
 * be allocated); nothing is left then. */
static rill_err_t new_req(rill_sched_t *sch, cmd_t *c, req_kind_t kind, req_t **out,
                          const char **why) {
    *out = NULL;
    sess_t *x = rill__sched_find_sess(sch, c->u.ask.sid);
    if (x == NULL) {
        *why = "no such session";
        return RILL_ENOTFOUND;
    }
    const rill_sched_ask_t *q = &c->u.ask.ask;
    req_t *r = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *r);
    int32_t *ans = rill_malloc(RILL_MEM_SCHEDULER, (size_t)q->n_max * sizeof *ans);
    int32_t *cache = kind == REQ_STANDING
                         ? rill_malloc(RILL_MEM_SCHEDULER, (size_t)q->n_max * sizeof *cache)
                         : NULL;
    if (r == NULL || ans == NULL || (kind == REQ_STANDING && cache == NULL)) {
        rill_free(r);
        rill_free(ans);
        rill_free(cache);
        *why = "out of memory";
        return RILL_ENOMEM;
    }
    if (c->u.ask.sampled) {
        /* the parameters were checked at submission, so this fails for memory only */
        rill_err_t err =
            rill_sampler_new(rill_session_pool_n_vocab(x->m->pool), c->u.ask.sampling, &r->sampler);
        if (err != RILL_OK) {
            rill_free(r);
            rill_free(ans);
            *why = err == RILL_ENOMEM ? "out of memory (sampler)" : "sampler refused";
            return err;
        }
    }
    r->id = c->u.ask.rid;
    r->kind = kind;
    r->sess = x;
    r->ask = *q;
    r->question = c->u.ask.toks; /* taken over */
    r->n_question = c->u.ask.n;
    c->u.ask.toks = NULL;
    restart_sampler(r);
    r->out = ans;
    r->cache = cache;
    r->cache_version = -1;
    r->submit_ns = c->submit_ns;
    r->phase = PH_WAIT;
    r->stale = true;
    if (q->consistency == RILL_SCHED_EVALUATED) {
        /* what is evaluated now: ready at once, so the session's data is not boosted beyond
         * this step's start of forks (n_waiting drops there) */
        rill_session_stats_t st;
        rill_session_stats(x->s, &st);
        r->target = st.n_seen;
        r->backlog = 0;
    } else {
        r->target = rill__sched_acknowledged(x);
        r->backlog = rill_session_pending(x->s);
    }
    x->n_waiting++;
    r->next = sch->reqs;
    sch->reqs = r;
    *out = r;
    return RILL_OK;
}

/* Cached answer of a standing query for this question, if fresh. */
static req_t *cached_answer(rill_sched_t *sch, sess_t *x, const cmd_t *c) {
    if (rill_session_pending(x->s) > 0) {
        return NULL;
    }
    int64_t v = rill_session_seq(x->s);
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->kind == REQ_STANDING && r->cache_version == v &&
            r->n_question == c->u.ask.n && r->ask.n_max == c->u.ask.ask.n_max &&
            memcmp(r->question, c->u.ask.toks, (size_t)c->u.ask.n * sizeof *c->u.ask.toks) == 0) {
            return r;
        }
    }
    return NULL;
}

void rill__sched_fail_async(cmd_t *c, rill_err_t err, const char *msg) {
    const rill_sched_ask_t *q = &c->u.ask.ask;
    if (q->on_done != NULL) {
        static const int32_t none[1];
        rill_sched_answer_t a = {
            .status = err, .message = msg, .tokens = none, .submit_ns = c->submit_ns
        };
        a.done_ns = rill__sched_now();
        a.total_ns = a.done_ns - a.submit_ns;
        q->on_done(q->user, c->u.ask.rid, &a);
    }
}

/* Answers a question from a standing query's fresh cache. */
static void answer_cached(rill_sched_t *sch, req_t *hit, const cmd_t *c) {
    const rill_sched_ask_t *q = &c->u.ask.ask;
    hit->hits++;
    sch->st.standing_cache_hits++;
    for (int32_t i = 0; i < hit->n_cache && q->on_token != NULL; i++) {
        q->on_token(q->user, c->u.ask.rid, hit->cache[i]);
    }
    int64_t t = rill__sched_now();
    rill_sched_answer_t a = { .status = RILL_OK,
                              .message = "",
                              .tokens = hit->cache,
                              .n_tokens = hit->n_cache,
                              .version = hit->cache_version,
                              .cached = true,
                              .submit_ns = c->submit_ns,
                              .ttft_ns = t - c->submit_ns,
                              .total_ns = t - c->submit_ns,
                              .compute_ns = 0,
                              .done_ns = hit->cache_done_ns };
    sch->st.questions++;
    if (q->on_done != NULL) {
        q->on_done(q->user, c->u.ask.rid, &a);
    }
}

void rill__sched_submit(rill_sched_t *sch, cmd_t *c) {
    req_kind_t kind = req_kind_of(c->kind);
    rill_err_t werr = RILL_OK;
    sess_t *x = rill__sched_use(sch, NULL, c->u.ask.sid, &werr); /* woken if asleep: sleep.c */
    if (x == NULL) {
        rill__sched_fail_async(c, werr,
                               werr == RILL_ENOTFOUND ? "no such session" : rill_last_error(werr));
        return;
    }
    if (kind == REQ_ASK && !c->u.ask.sampled) { /* the cache holds greedy answers */
        req_t *hit = cached_answer(sch, x, c);
        if (hit != NULL) {
            answer_cached(sch, hit, c);
            return;
        }
    }
    req_t *r = NULL;
    const char *why = "";
    rill_err_t err = new_req(sch, c, kind, &r, &why);
    if (err != RILL_OK) {
        rill__sched_fail_async(c, err, why);
        return;
    }
    if (kind == REQ_SPEC) {
        sch->st.spec_started++;
    }
    if (kind == REQ_STANDING) {
        /* registered: waits for its first refresh */
        r->sess->n_waiting--;
        r->phase = PH_IDLE;
    }
}

void rill__sched_cancel(rill_sched_t *sch, cmd_t *c) {
    req_t *r = rill__sched_find_req(sch, c->u.cancel.rid);
    if (r == NULL) {
        return; /* finished already */
    }
    if (r->kind == REQ_STANDING) {
        rill__sched_drop_standing(sch, r);
        return;
    }
    rill__sched_finish(sch, r, RILL_ECANCELED, "cancelled", false);
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i]) {
        i++;
    }
    return i;
}

void rill__sched_commit(rill_sched_t *sch, cmd_t *c) {
    req_t *r = rill__sched_find_req(sch, c->u.commit.rid);
    if (r == NULL || r->kind != REQ_SPEC || r->committed) {
        return; /* finished, reclaimed or committed: the caller learns it from on_done */
    }
    r->committed = true;
    sch->st.spec_committed++;
    int32_t L = common_prefix(r->question, r->n_question, c->u.commit.toks, c->u.commit.n);
    bool hit = L == r->n_question && L == c->u.commit.n;
    bool stale = r->fork != NULL && rill_session_seq(r->sess->s) != r->version;
    if (hit && !stale) {
        sch->st.spec_hits++;
        sch->st.spec_tokens_kept += r->computed;
        r->computed = 0;
        for (int32_t i = 0; i < r->n_out && r->ask.on_token != NULL; i++) {
            r->ask.on_token(r->ask.user, r->id, r->out[i]);
        }
        if (r->phase == PH_HELD) {
            if (rill_session_feed(r->fork, &r->out[r->n_out - 1], 1) != RILL_OK) {
                rill__sched_finish(sch, r, RILL_ENOMEM, "feeding the last reply token failed",
                                   false);
                return;
            }
            r->phase = PH_LAST;
        }
        return;
    }
    /* the guess was wrong: keep what still matches */
    rill_free(r->question);
    r->question = c->u.commit.toks;
    r->n_question = c->u.commit.n;
    c->u.commit.toks = NULL;
    restart_sampler(r); /* the reply is drawn anew, as a turn with this input would draw it */
    r->n_out = 0;
    r->first_ns = 0;
    if (r->fork == NULL) {
        return; /* still waiting for the session's data: it simply runs as a turn */
    }
    if (stale) {
        sch->st.spec_tokens_wasted += r->computed;
        r->computed = 0;
        drop_fork(r);
        r->phase = PH_WAIT;
        r->target = rill__sched_acknowledged(r->sess);
        r->sess->n_waiting++;
        return;
    }
    int32_t keep = L > 0 && L == r->n_question ? L - 1 : L; /* at least one token to evaluate */
    rill_err_t err = rill_session_rollback(r->fork, r->base_n + keep);
    rill_session_stats_t st;
    rill_session_stats(r->fork, &st);
    int64_t kept = st.n_resident - r->base_n;
    sch->st.spec_tokens_kept += kept;
    sch->st.spec_tokens_wasted += r->computed - kept;
    r->computed = 0;
    if (err == RILL_OK) {
        err = rill_session_feed(r->fork, r->question + keep, r->n_question - keep);
    }
    if (err != RILL_OK) {
        rill__sched_finish(sch, r, err, rill_last_error(err), false);
        return;
    }
    r->phase = PH_PREFILL;
}

/* A standing query's refresh decoded its answer: cache it and deliver it. */
static void refreshed(rill_sched_t *sch, req_t *r, int64_t t) {
    memcpy(r->cache, r->out, (size_t)r->n_out * sizeof *r->out);
    r->n_cache = r->n_out;
    r->cache_version = r->version;
    r->cache_done_ns = t;
    r->cache_compute_ns = r->compute_ns;
    r->refreshes++;
    sch->st.standing_refreshes++;
    drop_fork(r);
    r->phase = PH_IDLE;
    r->stale = rill_session_seq(r->sess->s) != r->version;
    rill_sched_answer_t a = { .status = RILL_OK,
                              .message = "",
                              .tokens = r->cache,
                              .n_tokens = r->n_cache,
                              .version = r->version,
                              .n_context = r->n_context,
                              .submit_ns = r->submit_ns,
                              .ttft_ns = r->first_ns - r->submit_ns,
                              .total_ns = t - r->submit_ns,
                              .compute_ns = r->compute_ns,
                              .done_ns = t,
                              .backlog = r->backlog,
                              .ttft_compute_ns = r->ttft_compute_ns };
    if (r->ask.on_done != NULL) {
        r->ask.on_done(r->ask.user, r->id, &a);
    }
}

/* True when the answer out[0, n) ends with a token whose piece writes a '\n' after text that is
 * not blank: its first line is complete (rill_sched_ask_t.stop_at_newline). Reads the pieces
 * from the start each time, so a standing refresh, which starts its answer again, needs no
 * state; answers are short. */
static bool line_ended(const rill_tokenizer_t *tk, const int32_t *out, int32_t n) {
    bool text = false;
    for (int32_t i = 0; i < n; i++) {
        size_t len = 0;
        const char *p = rill_tokenizer_piece(tk, out[i], false, &len);
        for (size_t j = 0; p != NULL && j < len; j++) {
            if (p[j] == '\n' && text) {
                return i == n - 1;
            }
            text = text || (p[j] != ' ' && p[j] != '\n' && p[j] != '\t' && p[j] != '\r');
        }
    }
    return false;
}

void rill__sched_on_pick(rill_sched_t *sch, req_t *r, int32_t tok, int64_t t) {
    if (r->first_ns == 0) {
        r->first_ns = t;
    }
    r->out[r->n_out++] = tok;
    bool spec = r->kind == REQ_SPEC && !r->committed;
    if (!spec && r->ask.on_token != NULL) {
        r->ask.on_token(r->ask.user, r->id, tok);
    }
    const rill_tokenizer_t *tk = r->sess->m->tok;
    bool done = r->n_out == r->ask.n_max ||
                (r->ask.stop_at_eog && tk != NULL && rill_tokenizer_is_eog(tk, tok)) ||
                (r->ask.stop_at_newline && tk != NULL && line_ended(tk, r->out, r->n_out));
    bool adopt = r->kind == REQ_TURN || r->kind == REQ_SPEC;
    if (done && !adopt) {
        if (r->kind == REQ_STANDING) {
            refreshed(sch, r, t);
        } else {
            rill__sched_finish(sch, r, RILL_OK, NULL, false);
        }
        return;
    }
    if (done && spec) {
        r->phase = PH_HELD;
        return;
    }
    if (rill_session_feed(r->fork, &tok, 1) != RILL_OK) {
        rill__sched_finish(sch, r, RILL_ENOMEM, rill_last_error(RILL_ENOMEM), false);
        return;
    }
    r->phase = done ? PH_LAST : PH_DECODE;
}
