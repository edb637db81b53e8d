/*
 * step.c - one engine step (contract: rill_scheduler.h, "Work classes", "Step size"): the batch
 * builder, the step-time model that caps a step, reclaiming forks when the pool is exhausted,
 * and what follows a forward pass (every item that asked for logits picks its next token: the
 * arg-max, or a draw of the request's own sampler; every such item has its logits row on the
 * host, so greedy and sampled requests share a pass).
 *
 * The builder goes through the classes from DECODE down; within a class it takes the sessions
 * (and forks) with work of that class round robin from a rotating start, so no session starves
 * within its class, until the step's token cap or RILL_SESSION_STEP_MAX_LOGITS rows of logits
 * are used. One rill_session_step() evaluates the batch.
 *
 * The cap comes from a least-squares fit t = a + b * tokens over recent steps, older ones
 * weighted down by FORGET per step: a step is held to about max_delay_ns, so a question that
 * arrives during it waits at most that long.
 *
 * Several models: each has its own batch, time model and cap; a step builds every model's
 * batch, orders the models (question work first, then the highest class, ties in rotation) and
 * runs their passes in that order. After a pass with question work, a later pass keeps its own
 * question work, its INGEST is cut to what its time model fits in the rest of max_delay_ns, and
 * its STANDING and SPEC work waits (rill__sched_limit) - the rules of one model's question step,
 * so the delay bound holds for the step as a whole. A model whose pool is exhausted with
 * nothing to reclaim sits out (stuck) until a command arrives, and the others go on.
 *
 * The standing budget ("Standing budget" in the header) is checked where refreshes start: a
 * stale query inside its interval, or any while the share is at the maximum, stays stale and
 * the step notes in sch->wake_at when it could start, so an engine with nothing else to do
 * sleeps until then (engine.c) instead of polling. The share's two decayed sums are brought
 * forward only at the end of a pass (share_add); between passes rill__sched_share() decays
 * them to the time asked, so idle time lowers the share without any update. Rejected: a
 * sliding window of step records (memory per step, and a share that jumps when a long step
 * leaves the window); counting tokens instead of time (a refresh's decode tokens cost a
 * whole step's fixed time each).
 */
#include <math.h>
#include <stdio.h>

#include "rill_log.h"
#include "rill_sampler.h"
#include "sched_internal.h"

typedef struct builder {
    int32_t tokens, cap, logits;
} builder_t;

static bool room_for(const model_t *m, const builder_t *b, bool logits) {
    return b->tokens < b->cap && m->n_items < m->max_batch &&
           (!logits || b->logits < RILL_SESSION_STEP_MAX_LOGITS);
}

/* Adds up to the cap's remaining tokens of s to m's batch; logits on its last queued token when
 * want_logits. */
static void add_item(model_t *m, builder_t *b, rill_session_t *s, req_t *r, sess_t *x,
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
    int32_t i = m->n_items++;
    m->items[i] = (rill_session_step_t){ .s = s, .n = n, .logits = logits };
    m->item_req[i] = r;
    m->item_sess[i] = x;
    m->item_class[i] = cls;
    b->tokens += n;
    b->logits += logits;
    m->questions |= cls == RILL_SCHED_DECODE || cls == RILL_SCHED_PREFILL;
    m->top = cls < m->top ? cls : m->top;
}

static bool req_runs(const req_t *r) {
    return r->fork != NULL &&
           (r->phase == PH_PREFILL || r->phase == PH_DECODE || r->phase == PH_LAST) &&
           rill_session_pending(r->fork) > 0;
}

#define FORGET 0.97

/* Adds a pass of T tokens that took ns to m's time model and refits it. */
static void learn(model_t *m, int32_t T, int64_t ns) {
    double x = T, y = (double)ns;
    m->fw = FORGET * m->fw + 1;
    m->ft = FORGET * m->ft + x;
    m->fy = FORGET * m->fy + y;
    m->ftt = FORGET * m->ftt + x * x;
    m->fty = FORGET * m->fty + x * y;
    double mt = m->ft / m->fw, my = m->fy / m->fw;
    double var = m->ftt / m->fw - mt * mt, cov = m->fty / m->fw - mt * my;
    if (var > 1.0 && cov > 0) { /* steps of different sizes seen: slope and intercept */
        m->ns_per_tok = cov / var;
        m->ns_fixed = my - m->ns_per_tok * mt;
        m->ns_fixed = m->ns_fixed > 0 ? m->ns_fixed : 0;
    } else if (mt > 0) { /* all alike so far: charge everything per token (conservative) */
        m->ns_per_tok = my / mt;
        m->ns_fixed = 0;
    }
}

/* Tokens a pass of m fits in budget_ns by its time model (0 when not even one does);
 * step_tokens when there is no bound or no model yet. */
static int32_t fit_tokens(const rill_sched_t *sch, const model_t *m, int64_t budget_ns) {
    int32_t cap = m->step_tokens;
    if (sch->prm.max_delay_ns > 0 && m->ns_per_tok > 0) {
        double c = ((double)budget_ns - m->ns_fixed) / m->ns_per_tok;
        cap = c < cap ? (c > 0 ? (int32_t)c : 0) : cap;
    }
    return cap;
}

int32_t rill__sched_step_cap(const rill_sched_t *sch, const model_t *m) {
    int32_t cap = fit_tokens(sch, m, sch->prm.max_delay_ns);
    if (sch->prm.max_delay_ns > 0 && m->ns_per_tok > 0) {
        cap = cap < sch->prm.min_chunk ? sch->prm.min_chunk : cap;
        cap = cap > m->step_tokens ? m->step_tokens : cap;
    }
    return cap;
}

/* Sessions' own queued data of class cls (PREFILL: a request waits for it; INGEST: the rest and
 * the templates' prompts), round robin over m's sessions from the rotating start. */
static void add_session_data(rill_sched_t *sch, model_t *m, builder_t *b, rill_sched_class_t cls) {
    uint64_t start = m->n_sessions > 0 ? m->rr % (uint64_t)m->n_sessions : 0;
    for (int pass = 0; pass < 2; pass++) {
        uint64_t k = 0;
        for (sess_t *x = sch->sessions; x != NULL; x = x->next) {
            if (x->m != m) {
                continue;
            }
            bool first_part = k++ >= start;
            if ((pass == 0) != first_part) {
                continue;
            }
            bool boosted = x->n_waiting > 0;
            if (rill_session_pending(x->s) > 0 && (cls == RILL_SCHED_PREFILL) == boosted &&
                room_for(m, b, false)) {
                add_item(m, b, x->s, NULL, x, cls, x->end_watch != NULL); /* end_watch.c */
            }
        }
    }
    if (cls == RILL_SCHED_INGEST) {
        for (tmpl_t *t = sch->templates; t != NULL; t = t->next) {
            if (t->m == m && rill_session_pending(t->s) > 0 && room_for(m, b, false)) {
                add_item(m, b, t->s, NULL, NULL, RILL_SCHED_INGEST, false);
            }
        }
    }
}

#define TAU ((double)RILL_SCHED_SHARE_TAU_NS)

double rill__sched_share(const rill_sched_t *sch, int64_t t) {
    double dt = t > sch->sh_t ? (double)(t - sch->sh_t) : 0;
    double d = exp(-dt / TAU);
    double w = sch->sh_w * d + TAU * (1 - d);
    return w > 0 ? sch->sh_s * d / w : 0;
}

/* A pass that ended at t spent standing_ns of its time on refreshes: both sums decay to t,
 * and the interval since the last update adds its weight, its refresh time spread over it. */
static void share_add(rill_sched_t *sch, int64_t t, double standing_ns) {
    double dt = t > sch->sh_t ? (double)(t - sch->sh_t) : 0;
    double d = exp(-dt / TAU), w = TAU * (1 - d);
    double frac = dt > 0 ? standing_ns / dt : 0; /* the interval holds the pass: <= 1 */
    frac = frac < 1 ? frac : 1;
    sch->sh_s = sch->sh_s * d + frac * w;
    sch->sh_w = sch->sh_w * d + w;
    sch->sh_t = t > sch->sh_t ? t : sch->sh_t;
}

/* When the share, decaying from time t without further refreshes, falls below max. */
static int64_t share_clears(const rill_sched_t *sch, int64_t t, double max) {
    double dt = t > sch->sh_t ? (double)(t - sch->sh_t) : 0;
    double d = exp(-dt / TAU);
    double S = sch->sh_s * d, W = sch->sh_w * d + TAU * (1 - d);
    /* S e / (W e + tau (1 - e)) < max  <=>  e < max tau / (S - max W + max tau) */
    double den = S - max * W + max * TAU;
    if (S < max * W || den <= 0) {
        return t;
    }
    double e = max * TAU / den;
    return t + (int64_t)(-TAU * log(e)) + 1000000; /* a millisecond past, not just before */
}

/* Notes that a held-back refresh may start at t (the engine sleeps no longer). */
static void wake_by(rill_sched_t *sch, int64_t t) {
    sch->wake_at = sch->wake_at == 0 || t < sch->wake_at ? t : sch->wake_at;
}

/* A limit of the standing budget held r back: counted once per refresh and limit. */
static void held_back(rill_sched_t *sch, req_t *r, uint8_t limit, int64_t until) {
    if ((r->held & limit) == 0) {
        r->held |= limit;
        if (limit == HELD_INTERVAL) {
            sch->st.standing_deferred_interval++;
        } else {
            sch->st.standing_deferred_share++;
        }
    }
    wake_by(sch, until);
}

/* Idle capacity: starts refreshes of m's stale standing queries, as far as the standing
 * budget allows. */
static void start_refreshes(rill_sched_t *sch, const model_t *m) {
    int64_t now = rill__sched_now();
    int64_t interval = sch->prm.standing_min_interval_ns;
    double max = sch->prm.standing_max_share;
    bool capped = max < 1 && rill__sched_share(sch, now) >= max;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess->m == m && r->kind == REQ_STANDING && r->phase == PH_IDLE && r->stale &&
            m->steps >= r->retry_step && rill_session_pending(r->sess->s) == 0) {
            if (interval > 0 && r->last_start_ns != 0 && now - r->last_start_ns < interval) {
                held_back(sch, r, HELD_INTERVAL, r->last_start_ns + interval);
                continue;
            }
            if (capped) {
                held_back(sch, r, HELD_SHARE, share_clears(sch, now, max));
                continue;
            }
            r->held = 0;
            r->last_start_ns = now;
            r->stale = false;
            r->target = rill__sched_acknowledged(r->sess);
            r->sess->n_waiting++;
            r->n_out = 0;
            r->first_ns = 0;
            r->compute_ns = 0;
            r->ttft_compute_ns = 0;
            r->backlog = 0;     /* refreshes start on evaluated data only */
            r->submit_ns = now; /* == last_start_ns: answers show the interval */
            rill__sched_start_fork(sch, r);
        }
    }
}

/* The forks of m's running requests of class cls except `skip` (already in the batch), in
 * request order, as far as b has room. */
static void add_requests(rill_sched_t *sch, model_t *m, builder_t *b, rill_sched_class_t cls,
                         const req_t *skip) {
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r != skip && r->sess->m == m && req_runs(r) && rill__sched_req_class(r) == cls &&
            room_for(m, b, true)) {
            add_item(m, b, r->fork, r, r->sess, cls, true);
        }
    }
}

/* m's running request of class cls submitted first (ids grow with submission), or NULL. */
static req_t *oldest_request(rill_sched_t *sch, const model_t *m, rill_sched_class_t cls) {
    req_t *best = NULL;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->sess->m == m && req_runs(r) && rill__sched_req_class(r) == cls &&
            (best == NULL || r->id < best->id)) {
            best = r;
        }
    }
    return best;
}

/* Builds m's batch in class order (m->n_items items). */
static void build_batch(rill_sched_t *sch, model_t *m) {
    builder_t b = { .cap = rill__sched_step_cap(sch, m) };
    m->n_items = 0;
    m->questions = false;
    m->top = RILL_SCHED_N_CLASSES;
    /* waiting requests whose session has no queued data move onto forks */
    for (req_t *r = sch->reqs, *nx; r != NULL; r = nx) {
        nx = r->next;
        if (r->sess->m == m && r->phase == PH_WAIT && rill__sched_data_ready(r)) {
            rill__sched_start_fork(sch, r);
        }
    }
    for (int cls = RILL_SCHED_DECODE; cls < RILL_SCHED_N_CLASSES; cls++) {
        if (cls >= RILL_SCHED_STANDING && m->questions) {
            break; /* refreshes and speculation would lengthen a step questions are in */
        }
        if (cls == RILL_SCHED_INGEST && m->questions) {
            /* answers wait for this step: ingest fills it only as far as the delay bound
             * reaches, without min_chunk's floor (which exists so that ingest progresses in
             * steps of its own) */
            int32_t fill = fit_tokens(sch, m, sch->prm.max_delay_ns);
            b.cap = fill < b.cap ? (fill > b.tokens ? fill : b.tokens) : b.cap;
        }
        if (cls == RILL_SCHED_PREFILL) {
            /* the oldest question's own tokens whole (up to step_tokens): the cap bounds what a
             * question waits behind, not the question; other questions and the data questions
             * wait for fill what the cap leaves (so a step holds at most one question beyond
             * the cap: several questions at once do not make one long step) */
            int32_t cap = b.cap;
            req_t *first = oldest_request(sch, m, RILL_SCHED_PREFILL);
            if (first != NULL && room_for(m, &b, true)) {
                int32_t want = b.tokens + rill_session_pending(first->fork);
                want = want < m->step_tokens ? want : m->step_tokens;
                b.cap = want > cap ? want : cap;
                add_item(m, &b, first->fork, first, first->sess, RILL_SCHED_PREFILL, true);
                b.cap = cap > b.tokens ? cap : b.tokens;
            }
            add_requests(sch, m, &b, RILL_SCHED_PREFILL, first);
            add_session_data(sch, m, &b, RILL_SCHED_PREFILL);
            continue;
        }
        if (cls == RILL_SCHED_INGEST) {
            add_session_data(sch, m, &b, (rill_sched_class_t)cls);
        }
        if (cls == RILL_SCHED_STANDING && room_for(m, &b, true)) {
            start_refreshes(sch, m);
        }
        add_requests(sch, m, &b, (rill_sched_class_t)cls, NULL);
    }
    m->rr++;
}

/* Holds m's batch to what a pass may take after an earlier pass of the same step carried
 * question work, as build_batch does within one model: its own question work (DECODE, PREFILL)
 * stays whole, INGEST fills at most max_tokens in all (never below the question tokens), and
 * STANDING and SPEC wait for a step without questions. Items are in class order, so this keeps
 * a prefix; an item cut short keeps the rest of its tokens queued. */
void rill__sched_limit(model_t *m, int32_t max_tokens) {
    int32_t T = 0, i = 0;
    for (; i < m->n_items && m->item_class[i] < RILL_SCHED_INGEST; i++) {
        T += m->items[i].n; /* question work */
    }
    max_tokens = max_tokens > T ? max_tokens : T;
    for (; i < m->n_items && m->item_class[i] == RILL_SCHED_INGEST && T < max_tokens; i++) {
        int32_t left = max_tokens - T;
        if (m->items[i].n > left) {
            m->items[i].n = left;
            m->items[i].logits = false; /* its last token runs in a later step */
        }
        T += m->items[i].n;
    }
    m->n_items = i;
}

/* At exhaustion of m's pool: frees the fork of its lowest-class request. False when none is
 * left. */
static bool reclaim(rill_sched_t *sch, const model_t *m) {
    req_t *victim = NULL;
    int best = -1;
    for (req_t *r = sch->reqs; r != NULL; r = r->next) {
        if (r->fork == NULL || r->sess->m != m) {
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
        victim->retry_step = m->steps + 16;
    } else {
        char msg[200];
        snprintf(msg, sizeof msg, "KV budget exhausted (%d free of %d pages): fork reclaimed",
                 rill_session_pool_n_free(m->pool), m->n_pages);
        rill__sched_finish(sch, victim,
                           victim->kind == REQ_SPEC && !victim->committed ? RILL_ECANCELED
                                                                          : RILL_EFULL,
                           msg, false);
    }
    return true;
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

/* Opens the preemption window for a pass of lower work alone: a question submitted while it
 * runs stops it (post()); one already queued stops it before its first layer. */
static void arm_preemption(rill_sched_t *sch, bool questions) {
    pthread_mutex_lock(&sch->mu);
    sch->preemptible = !questions;
    atomic_store(&sch->preempt, 0);
    for (cmd_t *c = sch->head; c != NULL && sch->preemptible; c = c->next) {
        if (rill__sched_is_question(c)) {
            atomic_store(&sch->preempt, 1);
        }
    }
    pthread_mutex_unlock(&sch->mu);
}

/* Closes it; true when the pass was told to stop. */
static bool disarm_preemption(rill_sched_t *sch) {
    pthread_mutex_lock(&sch->mu);
    sch->preemptible = false;
    bool preempted = atomic_exchange(&sch->preempt, 0) != 0;
    pthread_mutex_unlock(&sch->mu);
    return preempted;
}

/* The accounting of an evaluated pass of m's batch, T tokens, [t0, t1); questions: the step
 * carries question work (in this pass or an earlier one). */
static void account(rill_sched_t *sch, model_t *m, bool questions, int32_t T, int64_t t0,
                    int64_t t1) {
    for (int32_t i = 0; i < m->n_items; i++) {
        sch->st.tokens[m->item_class[i]] += m->items[i].n;
        m->tokens[m->item_class[i]] += m->items[i].n;
        if (questions && m->item_class[i] >= RILL_SCHED_INGEST) {
            sch->st.question_step_filler += m->items[i].n;
        }
        req_t *r = m->item_req[i];
        if (r == NULL) {
            if (m->item_class[i] == RILL_SCHED_PREFILL) {
                own_data_step(sch, m->item_sess[i], t1 - t0);
            }
            continue;
        }
        if (r->first_ns == 0) {
            r->ttft_compute_ns += t1 - t0;
        }
        r->compute_ns += (t1 - t0) * m->items[i].n / T;
        if (r->kind == REQ_SPEC && !r->committed) {
            r->computed += m->items[i].n;
            sch->st.spec_tokens_computed += m->items[i].n;
        }
    }
}

/* After m's pass: adoptions of finished turns, and the next token of every request that got
 * logits. */
static void pick(rill_sched_t *sch, model_t *m, int64_t t1) {
    const int32_t V = rill_session_pool_n_vocab(m->pool);
    for (int32_t i = 0; i < m->n_items; i++) {
        req_t *r = m->item_req[i];
        if (r == NULL || !m->items[i].logits || r->fork == NULL ||
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
        int32_t tok = 0;
        if (r->sampler == NULL) {
            tok = rill_sampler_argmax(logits, V);
        } else if (rill_sampler_sample(r->sampler, logits, &tok) == RILL_OK) {
            rill_sampler_accept(r->sampler, tok); /* the penalty window sees the answer */
        } else {
            rill__sched_finish(sch, r, RILL_EINTERNAL, "sampler failed", false);
            continue;
        }
        rill__sched_on_pick(sch, r, tok, t1);
    }
}

typedef enum pass_outcome {
    PASS_RAN,       /* evaluated (or failed in the forward pass: its requests were told) */
    PASS_EMPTY,     /* nothing left to run after the step's limits */
    PASS_PREEMPTED, /* stopped for a question: end the step now */
    PASS_STUCK      /* the pool is exhausted and nothing is left to reclaim */
} pass_outcome_t;

/* Runs m's batch (rebuilt after a reclaim, and limited again when an earlier pass of this step
 * carried question work: spent_ns of the step's delay bound is used). *ns receives the time it
 * took. */
static pass_outcome_t run_pass(rill_sched_t *sch, model_t *m, bool questions, int64_t spent_ns,
                               int64_t *ns) {
    *ns = 0;
    for (;;) {
        if (questions) {
            rill__sched_limit(m, fit_tokens(sch, m, sch->prm.max_delay_ns - spent_ns - *ns));
        }
        if (m->n_items == 0) {
            return PASS_EMPTY;
        }
        int32_t T = 0, T_standing = 0;
        for (int32_t i = 0; i < m->n_items; i++) {
            T += m->items[i].n;
            T_standing += m->item_class[i] == RILL_SCHED_STANDING ? m->items[i].n : 0;
        }
        arm_preemption(sch, m->questions);
        int64_t t0 = rill__sched_now();
        rill_err_t err = rill_session_step(m->pool, m->items, m->n_items);
        int64_t t1 = rill__sched_now();
        bool preempted = disarm_preemption(sch);
        *ns += t1 - t0;
        if (err != RILL_EFULL) { /* engine time spent, evaluated or not */
            double standing_ns = (double)(t1 - t0) * T_standing / T;
            sch->st.standing_ns += (int64_t)standing_ns;
            share_add(sch, t1, standing_ns);
        }
        if (err == RILL_ECANCELED && preempted) {
            /* nothing changed but pages trimmed and logits invalidated: the tokens stay
             * queued (rill_session_step's forward-error contract) and run again later */
            sch->st.preempted++;
            sch->st.busy_ns += t1 - t0;
            m->busy_ns += t1 - t0;
            return PASS_PREEMPTED;
        }
        if (err == RILL_EFULL) {
            if (reclaim(sch, m)) {
                build_batch(sch, m);
                continue;
            }
            /* nothing to reclaim: only a command (a close, a cancel) can free pages of this
             * pool, so the model sits out until one arrives (rill__sched_unstick) */
            RILL_LOGE("scheduler: model %s: %s with no fork left to reclaim; waiting for a "
                      "command",
                      m->name, rill_last_error(err));
            m->stuck = true;
            return PASS_STUCK;
        }
        sch->st.busy_ns += t1 - t0;
        m->busy_ns += t1 - t0;
        rill_hist_record(&sch->st.step_ns, (uint64_t)(t1 - t0));
        sch->st.steps++;
        m->steps++;
        if (err != RILL_OK) {
            /* forward errors: fail the requests of the step, keep sessions' data queued */
            const char *why = rill_last_error(err);
            RILL_LOGE("scheduler: model %s: step failed: %s", m->name, why);
            for (int32_t i = 0; i < m->n_items; i++) {
                req_t *r = m->item_req[i];
                if (r != NULL && r->kind != REQ_STANDING) {
                    rill__sched_finish(sch, r, err, why, false);
                } else if (r != NULL) {
                    rill__sched_abandon(sch, r);
                }
            }
            return PASS_RAN;
        }
        learn(m, T, t1 - t0);
        account(sch, m, questions || m->questions, T, t0, t1);
        rill__sched_end_watch_pass(m);
        pick(sch, m, t1);
        rill__sched_templates_ready(sch);
        return PASS_RAN;
    }
}

void rill__sched_unstick(rill_sched_t *sch) {
    for (int32_t i = 0; i < sch->n_models; i++) {
        sch->models[i].stuck = false;
    }
}

/* Builds every model's batch; the models with work, in the order they run, go to sch->order.
 * Returns how many. */
static int32_t plan(rill_sched_t *sch) {
    int32_t n = 0;
    for (int32_t k = 0; k < sch->n_models; k++) {
        model_t *m = &sch->models[(sch->rr + (uint64_t)k) % (uint64_t)sch->n_models];
        if (m->stuck) {
            continue;
        }
        build_batch(sch, m);
        if (m->n_items == 0) {
            continue;
        }
        /* insertion by (question work first, then the highest class); rotation breaks ties */
        int32_t i = n++;
        while (i > 0 && (sch->order[i - 1]->questions < m->questions ||
                         (sch->order[i - 1]->questions == m->questions &&
                          sch->order[i - 1]->top > m->top))) {
            sch->order[i] = sch->order[i - 1];
            i--;
        }
        sch->order[i] = m;
    }
    sch->rr++;
    return n;
}

bool rill__sched_step(rill_sched_t *sch) {
    sch->wake_at = 0;
    int32_t n = plan(sch);
    if (n == 0) {
        /* nothing else to do: refreshes backed off after a reclaim may run now */
        bool retry = false;
        for (req_t *r = sch->reqs; r != NULL; r = r->next) {
            if (r->kind == REQ_STANDING && r->stale && r->retry_step > r->sess->m->steps) {
                r->retry_step = 0;
                retry = true;
            }
        }
        n = retry ? plan(sch) : 0;
        if (n == 0) {
            return false;
        }
    }
    if (sch->prm.model_steps == RILL_SCHED_TOP_MODEL) {
        n = 1;
    }
    bool ran = false, questions = false;
    int64_t spent = 0;
    for (int32_t k = 0; k < n; k++) {
        model_t *m = sch->order[k];
        int64_t ns = 0;
        pass_outcome_t o = run_pass(sch, m, questions, spent, &ns);
        spent += ns;
        questions |= m->questions && o == PASS_RAN;
        ran |= o == PASS_RAN || o == PASS_PREEMPTED;
        if (o == PASS_PREEMPTED) {
            break;
        }
    }
    return ran;
}
