/*
 * step.c - one engine step (contract: rill_scheduler.h, "Work classes", "Step size"): the batch
 * builder, the step-time model that caps a step, reclaiming forks when the pool is exhausted,
 * and what follows a forward pass (every item that asked for logits picks its next token).
 *
 * The builder goes through the classes from DECODE down; within a class it takes the sessions
 * (and forks) with work of that class round robin from a rotating start, so no session starves
 * within its class, until the step's token cap or RILL_SESSION_STEP_MAX_LOGITS rows of logits
 * are used. One rill_session_step() evaluates the batch.
 *
 * The cap comes from a least-squares fit t = a + b * tokens over recent steps, older ones
 * weighted down by FORGET per step: a step is held to about max_delay_ns, so a question that
 * arrives during it waits at most that long.
 */
#include <stdio.h>

#include "rill_log.h"
#include "sched_internal.h"

typedef struct builder {
    int32_t n_items, tokens, cap, logits;
    bool questions; /* the step carries question work (decode, prefill, data a question awaits) */
} builder_t;

static bool room_for(const rill_sched_t *sch, const builder_t *b, bool logits) {
    return b->tokens < b->cap && b->n_items < sch->max_batch &&
           (!logits || b->logits < RILL_SESSION_STEP_MAX_LOGITS);
}

/* Adds up to the cap's remaining tokens of s; logits on its last queued token when
 * want_logits. */
static void add_item(rill_sched_t *sch, builder_t *b, rill_session_t *s, req_t *r, sess_t *x,
                     rill_sched_class_t cls, bool want_logits) {
    int32_t room = rill_session_step_room(s);
    int32_t n = room < b->cap - b->tokens ? room : b->cap - b->tokens;
    if (n < 1) {
        return;
    }
    bool logits = want_logits && n == rill_session_pending(s);
    if (logits && b->logits >= RILL_SESSION_STEP_MAX_LOGITS) {
        if (n == 1) {
            return;
        }
        n--; /* the last token in a later step */
        logits = false;
    }
    int32_t i = b->n_items++;
    sch->items[i] = (rill_session_step_t){ .s = s, .n = n, .logits = logits };
    sch->item_req[i] = r;
    sch->item_sess[i] = x;
    sch->item_class[i] = cls;
    b->tokens += n;
    b->logits += logits;
    b->questions |= cls == RILL_SCHED_DECODE || cls == RILL_SCHED_PREFILL;
}

static bool req_runs(const req_t *r) {
    return r->fork != NULL &&
           (r->phase == PH_PREFILL || r->phase == PH_DECODE || r->phase == PH_LAST) &&
           rill_session_pending(r->fork) > 0;
}

#define FORGET 0.97

/* Adds a step of T tokens that took ns to the time model and refits it. */
static void learn(rill_sched_t *sch, int32_t T, int64_t ns) {
    double x = T, y = (double)ns;
    sch->fw = FORGET * sch->fw + 1;
    sch->ft = FORGET * sch->ft + x;
    sch->fy = FORGET * sch->fy + y;
    sch->ftt = FORGET * sch->ftt + x * x;
    sch->fty = FORGET * sch->fty + x * y;
    double mt = sch->ft / sch->fw, my = sch->fy / sch->fw;
    double var = sch->ftt / sch->fw - mt * mt, cov = sch->fty / sch->fw - mt * my;
    if (var > 1.0 && cov > 0) { /* steps of different sizes seen: slope and intercept */
        sch->ns_per_tok = cov / var;
        sch->ns_fixed = my - sch->ns_per_tok * mt;
        sch->ns_fixed = sch->ns_fixed > 0 ? sch->ns_fixed : 0;
    } else if (mt > 0) { /* all alike so far: charge everything per token (conservative) */
        sch->ns_per_tok = my / mt;
        sch->ns_fixed = 0;
    }
}

/* Tokens a step of max_delay_ns holds by the time model (0 when not even one does);
 * step_tokens when there is no bound or no model yet. */
static int32_t delay_tokens(const rill_sched_t *sch) {
    int32_t cap = sch->prm.step_tokens;
    if (sch->prm.max_delay_ns > 0 && sch->ns_per_tok > 0) {
        double c = ((double)sch->prm.max_delay_ns - sch->ns_fixed) / sch->ns_per_tok;
        cap = c < cap ? (c > 0 ? (int32_t)c : 0) : cap;
    }
    return cap;
}

int32_t rill__sched_step_cap(const rill_sched_t *sch) {
    int32_t cap = delay_tokens(sch);
    if (sch->prm.max_delay_ns > 0 && sch->ns_per_tok > 0) {
        cap = cap < sch->prm.min_chunk ? sch->prm.min_chunk : cap;
        cap = cap > sch->prm.step_tokens ? sch->prm.step_tokens : cap;
    }
    return cap;
}

/* Sessions' own queued data of class cls (PREFILL: a request waits for it; INGEST: the rest and
 * the templates' prompts), round robin from the rotating start. */
static void add_session_data(rill_sched_t *sch, builder_t *b, rill_sched_class_t cls) {
    int32_t n = sch->n_sessions, k = 0;
    uint64_t start = n > 0 ? sch->rr % (uint64_t)n : 0;
    for (int pass = 0; pass < 2; pass++) {
        k = 0;
        for (sess_t *x = sch->sessions; x != NULL; x = x->next, k++) {
            if ((pass == 0) != ((uint64_t)k >= start)) {
                continue;
            }
            bool boosted = x->n_waiting > 0;
            if (rill_session_pending(x->s) > 0 && (cls == RILL_SCHED_PREFILL) == boosted &&
                room_for(sch, b, false)) {
                add_item(sch, b, x->s, NULL, x, cls, false);
            }
        }
    }
    if (cls == RILL_SCHED_INGEST) {
        for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
            if (rill_session_pending(t->s) > 0 && room_for(sch, b, false)) {
                add_item(sch, b, t->s, NULL, NULL, RILL_SCHED_INGEST, false);
            }
        }
    }
}

/* Idle capacity: starts refreshes of stale standing queries. */
static void start_refreshes(rill_sched_t *sch) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->kind == REQ_STANDING && r->phase == PH_IDLE && r->stale &&
            sch->st.steps >= r->retry_step && rill_session_pending(r->sess->s) == 0) {
            r->stale = false;
            r->target = rill__sched_acknowledged(r->sess);
            r->sess->n_waiting++;
            r->n_out = 0;
            r->first_ns = 0;
            r->compute_ns = 0;
            r->ttft_compute_ns = 0;
            r->backlog = 0; /* refreshes start on evaluated data only */
            r->submit_ns = rill__sched_now();
            rill__sched_start_fork(sch, r);
        }
    }
}

/* Builds the step in class order; returns the number of items. */
static int32_t build_step(rill_sched_t *sch) {
    builder_t b = { .cap = rill__sched_step_cap(sch) };
    /* waiting requests whose session has no queued data move onto forks */
    for (req_t *r = sch->reqs, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (r->phase == PH_WAIT && rill__sched_data_ready(r)) {
            rill__sched_start_fork(sch, r);
        }
    }
    for (int cls = RILL_SCHED_DECODE; cls < RILL_SCHED_N_CLASSES; cls++) {
        if (cls >= RILL_SCHED_STANDING && b.questions) {
            break; /* refreshes and speculation would lengthen a step questions are in */
        }
        if (cls == RILL_SCHED_INGEST && b.questions) {
            /* answers wait for this step: ingest fills it only as far as the delay bound
             * reaches, without min_chunk's floor (which exists so that ingest progresses in
             * steps of its own) */
            int32_t fill = delay_tokens(sch);
            b.cap = fill < b.cap ? (fill > b.tokens ? fill : b.tokens) : b.cap;
        }
        if (cls == RILL_SCHED_PREFILL || cls == RILL_SCHED_INGEST) {
            add_session_data(sch, &b, (rill_sched_class_t)cls);
        }
        if (cls == RILL_SCHED_STANDING && room_for(sch, &b, true)) {
            start_refreshes(sch);
        }
        for (req_t *r = sch->reqs; r != NULL; r = r->next) {
            if (req_runs(r) && (int)rill__sched_req_class(r) == cls && room_for(sch, &b, true)) {
                add_item(sch, &b, r->fork, r, r->sess, (rill_sched_class_t)cls, true);
            }
        }
    }
    sch->rr++;
    sch->step_questions = b.questions;
    return b.n_items;
}

/* At exhaustion: frees the fork of the lowest-class request. False when none is left. */
static bool reclaim(rill_sched_t *sch) {
    req_t *victim = NULL;
    int best = -1;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->fork == NULL) {
            continue;
        }
        int rank = r->kind == REQ_SPEC && !r->committed ? 3 : r->kind == REQ_STANDING ? 2 : 1;
        if (rank > best) { /* newest first within a rank: the list is newest first */
            victim = r;
            best = rank;
        }
    }
    if (victim == NULL) {
        return false;
    }
    sch->st.reclaimed++;
    if (victim->kind == REQ_STANDING) {
        rill__sched_abandon(sch, victim);
        victim->retry_step = sch->st.steps + 16;
    } else {
        char msg[200];
        snprintf(msg, sizeof msg, "KV budget exhausted (%d free of %d pages): fork reclaimed",
                 rill_session_pool_n_free(sch->pool), sch->n_pages);
        rill__sched_finish(sch, victim,
                           victim->kind == REQ_SPEC && !victim->committed ? RILL_ECANCELED
                                                                          : RILL_EFULL,
                           msg, false);
    }
    return true;
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (x[i] > x[best]) {
            best = i;
        }
    }
    return best;
}

/* A step of ns evaluated queued data of x that requests wait for: it counts towards their time
 * to the first token. */
static void own_data_step(rill_sched_t *sch, const sess_t *x, int64_t ns) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess == x && r->phase == PH_WAIT) {
            r->ttft_compute_ns += ns;
        }
    }
}

/* Opens the preemption window for a step of lower work alone: a question submitted while it
 * runs stops it (post()); one already queued stops it before its first layer. */
static void arm_preemption(rill_sched_t *sch) {
    pthread_mutex_lock(&sch->mu);
    sch->preemptible = !sch->step_questions;
    atomic_store(&sch->preempt, 0);
    for (cmd_t *c = sch->head; c != NULL && sch->preemptible; c = c->next) {
        if (rill__sched_is_question(c)) {
            atomic_store(&sch->preempt, 1);
        }
    }
    pthread_mutex_unlock(&sch->mu);
}

/* Closes it; true when the step was told to stop. */
static bool disarm_preemption(rill_sched_t *sch) {
    pthread_mutex_lock(&sch->mu);
    sch->preemptible = false;
    bool preempted = atomic_exchange(&sch->preempt, 0) != 0;
    pthread_mutex_unlock(&sch->mu);
    return preempted;
}

/* The accounting of an evaluated step of n items, T tokens, [t0, t1). */
static void account(rill_sched_t *sch, int32_t n, int32_t T, int64_t t0, int64_t t1) {
    for (int32_t i = 0; i < n; i++) {
        sch->st.tokens[sch->item_class[i]] += sch->items[i].n;
        if (sch->step_questions && sch->item_class[i] >= RILL_SCHED_INGEST) {
            sch->st.question_step_filler += sch->items[i].n;
        }
        req_t *r = sch->item_req[i];
        if (r == NULL) {
            if (sch->item_class[i] == RILL_SCHED_PREFILL) {
                own_data_step(sch, sch->item_sess[i], t1 - t0);
            }
            continue;
        }
        if (r->first_ns == 0) {
            r->ttft_compute_ns += t1 - t0;
        }
        r->compute_ns += (t1 - t0) * sch->items[i].n / T;
        if (r->kind == REQ_SPEC && !r->committed) {
            r->computed += sch->items[i].n;
            sch->st.spec_tokens_computed += sch->items[i].n;
        }
    }
}

/* After the pass: adoptions of finished turns, and the next token of every request that got
 * logits. */
static void pick(rill_sched_t *sch, int32_t n, int64_t t1) {
    const int32_t V = rill_session_pool_n_vocab(sch->pool);
    for (int32_t i = 0; i < n; i++) {
        req_t *r = sch->item_req[i];
        if (r == NULL || !sch->items[i].logits || r->fork == NULL ||
            (r->phase != PH_PREFILL && r->phase != PH_DECODE && r->phase != PH_LAST)) {
            continue; /* a standing refresh abandoned by an adoption earlier in this loop */
        }
        if (r->phase == PH_LAST) { /* input and reply evaluated: the session takes them */
            bool adopted = rill_session_adopt(r->sess->s, r->fork) == RILL_OK;
            if (adopted) {
                rill__sched_data_changed(sch, r->sess);
            }
            rill__sched_finish(sch, r, RILL_OK, NULL, adopted);
            continue;
        }
        const float *logits = NULL;
        if (rill_session_logits(r->fork, &logits) != RILL_OK) {
            rill__sched_finish(sch, r, RILL_EINTERNAL, "logits missing after a step", false);
            continue;
        }
        rill__sched_on_pick(sch, r, argmax(logits, V), t1);
    }
}

bool rill__sched_step(rill_sched_t *sch) {
    for (;;) {
        int32_t n = build_step(sch);
        if (n == 0) {
            /* nothing else to do: refreshes backed off after a reclaim may run now */
            bool retry = false;
            for (req_t *r = sch->reqs; r != NULL; r = r->next) {
                if (r->kind == REQ_STANDING && r->stale && r->retry_step > sch->st.steps) {
                    r->retry_step = 0;
                    retry = true;
                }
            }
            n = retry ? build_step(sch) : 0;
            if (n == 0) {
                return false;
            }
        }
        arm_preemption(sch);
        int64_t t0 = rill__sched_now();
        rill_err_t err = rill_session_step(sch->pool, sch->items, n);
        int64_t t1 = rill__sched_now();
        bool preempted = disarm_preemption(sch);
        if (err == RILL_ECANCELED && preempted) {
            /* nothing changed but pages trimmed and logits invalidated: the tokens stay
             * queued (rill_session_step's forward-error contract) and run again later */
            sch->st.preempted++;
            sch->st.busy_ns += t1 - t0;
            return true;
        }
        if (err == RILL_EFULL) {
            if (reclaim(sch)) {
                continue;
            }
            RILL_LOGE("scheduler: %s with no fork left to reclaim",
                      rill_session_pool_last_error(sch->pool));
            return false;
        }
        sch->st.busy_ns += t1 - t0;
        sch->st.steps++;
        int32_t T = 0;
        for (int32_t i = 0; i < n; i++) {
            T += sch->items[i].n;
        }
        if (err != RILL_OK) {
            /* forward errors: fail the requests of the step, keep sessions' data queued */
            RILL_LOGE("scheduler: step failed: %s", rill_session_pool_last_error(sch->pool));
            for (int32_t i = 0; i < n; i++) {
                req_t *r = sch->item_req[i];
                if (r != NULL && r->kind != REQ_STANDING) {
                    rill__sched_finish(sch, r, err, rill_session_pool_last_error(sch->pool), false);
                } else if (r != NULL) {
                    rill__sched_abandon(sch, r);
                }
            }
            return true;
        }
        learn(sch, T, t1 - t0);
        account(sch, n, T, t0, t1);
        pick(sch, n, t1);
        rill__sched_templates_ready(sch);
        return true;
    }
}
