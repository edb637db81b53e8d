/*
 * end_watch.c - the end-of-turn mass of a session's last evaluated position (contract:
 * rill_scheduler.h, "End-of-turn mass"), the language-model feature of endpoint anticipation
 * (rill_endpoint.h).
 *
 * Why here and not in a request: the feature must be free, so it is read off the pass that
 * evaluates the session's own data anyway. step.c asks for logits on the last queued token of
 * a watched session's data item (one row of the output projection; an unwatched session asks
 * for none), and after the pass this file turns the row into two masses with one softmax pass
 * (max, then sums in double) and stores them under the watch's mutex. Rejected: a request kind
 * of its own (a fork and a step per probe: not free), and keeping the whole row for the reader
 * (n_vocab floats copied per step under a lock for two numbers).
 *
 * The watch is caller-owned and borrowed by the session, so a reader on any thread reaches it
 * without looking the session up in engine-thread state.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "sched_internal.h"

struct rill_sched_end_watch {
    pthread_mutex_t mu;
    int32_t n_sentence, n_turn;
    int32_t *ids; /* [n_sentence + n_turn]: the sentence-final ids, then the end-of-turn ids */
    rill_sched_end_mass_t mass; /* (mu) */
};

/* True when set[0, n) holds a negative id or one twice (n <= RILL_SCHED_END_TOKENS: quadratic
 * is fine and needs no scratch). */
static bool bad_set(const int32_t *set, int32_t n) {
    for (int32_t i = 0; i < n; i++) {
        if (set[i] < 0) {
            return true;
        }
        for (int32_t j = 0; j < i; j++) {
            if (set[j] == set[i]) {
                return true;
            }
        }
    }
    return false;
}

rill_err_t rill_sched_end_watch_new(const int32_t *sentence, int32_t n_sentence,
                                    const int32_t *turn, int32_t n_turn,
                                    rill_sched_end_watch_t **out) {
    if (out == NULL || n_sentence < 0 || n_turn < 0 || n_sentence > RILL_SCHED_END_TOKENS ||
        n_turn > RILL_SCHED_END_TOKENS || n_sentence + n_turn == 0 ||
        (n_sentence > 0 && sentence == NULL) || (n_turn > 0 && turn == NULL)) {
        return rill__error(RILL_EINVAL, "end watch: sets of 0..%d token ids, not both empty",
                           RILL_SCHED_END_TOKENS);
    }
    if (bad_set(sentence, n_sentence) || bad_set(turn, n_turn)) {
        return rill__error(RILL_EINVAL, "end watch: a negative or repeated token id");
    }
    rill_sched_end_watch_t *w = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *w);
    int32_t *ids = rill_malloc(RILL_MEM_SCHEDULER, (size_t)(n_sentence + n_turn) * sizeof *ids);
    if (w == NULL || ids == NULL) {
        rill_free(w);
        rill_free(ids);
        return rill__error(RILL_ENOMEM, "end watch: out of memory");
    }
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        rill_free(w);
        rill_free(ids);
        return rill__error(RILL_ENOMEM, "end watch: no mutex");
    }
    if (n_sentence > 0) {
        memcpy(ids, sentence, (size_t)n_sentence * sizeof *ids);
    }
    if (n_turn > 0) {
        memcpy(ids + n_sentence, turn, (size_t)n_turn * sizeof *ids);
    }
    w->ids = ids;
    w->n_sentence = n_sentence;
    w->n_turn = n_turn;
    *out = w;
    return RILL_OK;
}

void rill_sched_end_watch_destroy(rill_sched_end_watch_t **wp) {
    if (wp == NULL || *wp == NULL) {
        return;
    }
    pthread_mutex_destroy(&(*wp)->mu);
    rill_free((*wp)->ids);
    rill_free(*wp);
    *wp = NULL;
}

rill_err_t rill_sched_end_watch_read(const rill_sched_end_watch_t *w, rill_sched_end_mass_t *out) {
    if (w == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    rill_sched_end_watch_t *mw = (rill_sched_end_watch_t *)w; /* the mutex only */
    pthread_mutex_lock(&mw->mu);
    *out = w->mass;
    pthread_mutex_unlock(&mw->mu);
    return RILL_OK;
}

const char *rill__sched_end_watch_check(const rill_sched_end_watch_t *w, int32_t n_vocab) {
    static _Thread_local char msg[96];
    for (int32_t i = 0; w != NULL && i < w->n_sentence + w->n_turn; i++) {
        if (w->ids[i] >= n_vocab) {
            snprintf(msg, sizeof msg, "end watch: token id %d is outside the vocabulary (%d)",
                     w->ids[i], n_vocab);
            return msg;
        }
    }
    return NULL;
}

/* The softmax masses of w's two sets in logits[0, V). */
static void masses(const rill_sched_end_watch_t *w, const float *logits, int32_t V, float *sent,
                   float *turn) {
    float mx = logits[0];
    for (int32_t i = 1; i < V; i++) {
        mx = logits[i] > mx ? logits[i] : mx;
    }
    double z = 0;
    for (int32_t i = 0; i < V; i++) {
        z += exp((double)logits[i] - mx);
    }
    double ps = 0, pt = 0;
    for (int32_t i = 0; i < w->n_sentence + w->n_turn; i++) {
        double p = exp((double)logits[w->ids[i]] - mx);
        *(i < w->n_sentence ? &ps : &pt) += p;
    }
    *sent = (float)(ps / z);
    *turn = (float)(pt / z);
}

void rill__sched_end_watch_pass(model_t *m) {
    const int32_t V = rill_session_pool_n_vocab(m->pool);
    for (int32_t i = 0; i < m->n_items; i++) {
        sess_t *x = m->item_sess[i];
        if (m->item_req[i] != NULL || x == NULL || x->end_watch == NULL || !m->items[i].logits ||
            m->items[i].s != x->s) {
            continue;
        }
        const float *logits = NULL;
        if (rill_session_logits(x->s, &logits) != RILL_OK) {
            continue; /* not expected after a pass that kept them; the watch stays as it was */
        }
        float ps = 0, pt = 0;
        masses(x->end_watch, logits, V, &ps, &pt);
        rill_session_stats_t st;
        rill_session_stats(x->s, &st);
        rill_sched_end_watch_t *w = x->end_watch;
        pthread_mutex_lock(&w->mu);
        w->mass.updates++;
        w->mass.version = rill_session_seq(x->s);
        w->mass.position = st.n_resident;
        w->mass.p_sentence = ps;
        w->mass.p_turn = pt;
        w->mass.at_ns = (int64_t)rill_now_ns();
        pthread_mutex_unlock(&w->mu);
    }
}
