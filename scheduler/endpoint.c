/*
 * endpoint.c - the end-of-turn predictor and the speculation driver (contract: rill_endpoint.h).
 *
 * The driver keeps no text: the stability features need only whether the recognizer's text
 * changed, and the last non-blank byte of the transcript. The text changed when the words a
 * step committed, then its tail, differ from the previous tail (local agreement commits words
 * of the previous hypothesis's tail, so a commit alone moves words without changing the text
 * a consumer holds); the comparison is of 64-bit FNV-1a hashes, so it needs only the previous
 * tail's hash. So it allocates
 * nothing after creation whatever the stream's length, and a daemon can keep one per speech
 * session. Rejected: keeping the tentative text to compare (a buffer that grows with the tail,
 * for a comparison a hash makes with one collision in 2^64).
 *
 * The probability is computed in double and clamped to [0, 1]; exp() of a large negative
 * argument underflows to 0, of a large positive one overflows to inf and gives 0 - both are
 * the logistic function's limits, so no input makes it NaN once the inputs are finite (they are
 * checked).
 */
#include <math.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_endpoint.h"

/* Fitted by tools/fit_endpoint.py on the dev split (docs/benchmarks.md, "Endpoint
 * anticipation"); the order is rill_endpoint_feature_t's. */
#define FIT_BIAS (-2.638085f)
static const float FIT_WEIGHTS[RILL_ENDPOINT_N_FEATURES] = {
    1.285291f, -0.137351f, -0.133910f, -0.291383f, 0.584365f, 0.081486f, 0.345510f,
};

static const char *const FEATURE_NAMES[RILL_ENDPOINT_N_FEATURES] = {
    "pause",        "log_p_turn",   "log_p_sentence", "tentative_empty",
    "stable_steps", "since_commit", "ends_sentence",
};

static const char *const ACTION_NAMES[] = { "none", "start", "commit", "cancel", "end" };

#define FNV_EMPTY  14695981039346656037ull /* FNV-1a's hash of "" */
#define P_FLOOR    1e-6
#define STABLE_MAX 5
#define SINCE_MAX  5.0

struct rill_endpoint {
    rill_endpoint_params_t p;
    rill_endpoint_state_t state;
    int64_t last_step_ms, last_obs_ms; /* -1: no call yet */
    /* the recognizer's text */
    uint64_t tent_hash;
    size_t tent_len;
    int32_t stable_steps;
    int64_t last_commit_ms; /* -1: nothing committed yet */
    char last_committed;    /* last non-blank byte of the committed text (0: none) */
    char last_tentative;    /* of the tentative tail (0: empty) */
    bool changed;           /* the text changed while a speculation was open */
    rill_endpoint_stats_t st;
};

const char *rill_endpoint_feature_name(rill_endpoint_feature_t f) {
    return (unsigned)f < RILL_ENDPOINT_N_FEATURES ? FEATURE_NAMES[f] : NULL;
}

const char *rill_endpoint_action_name(rill_endpoint_action_t a) {
    return (unsigned)a < sizeof ACTION_NAMES / sizeof ACTION_NAMES[0] ? ACTION_NAMES[a] : NULL;
}

rill_endpoint_params_t rill_endpoint_default_params(void) {
    rill_endpoint_params_t p = {
        .threshold = 0.5f, .confirm_ms = 700, .min_pause_ms = 90, .bias = FIT_BIAS
    };
    memcpy(p.weights, FIT_WEIGHTS, sizeof p.weights);
    return p;
}

rill_err_t rill_endpoint_params_check(const rill_endpoint_params_t *p) {
    if (p == NULL) {
        return rill__error(RILL_EINVAL, "endpoint: NULL parameters");
    }
    if (!(p->threshold > 0 && p->threshold <= 1)) {
        return rill__error(RILL_EINVAL, "endpoint: threshold %g outside (0, 1]",
                           (double)p->threshold);
    }
    if (p->confirm_ms < 100 || p->confirm_ms > 10000) {
        return rill__error(RILL_EINVAL, "endpoint: confirm_ms %d outside 100..10000",
                           p->confirm_ms);
    }
    if (p->min_pause_ms < 0 || p->min_pause_ms > p->confirm_ms) {
        return rill__error(RILL_EINVAL, "endpoint: min_pause_ms %d outside 0..confirm_ms (%d)",
                           p->min_pause_ms, p->confirm_ms);
    }
    if (!isfinite(p->bias)) {
        return rill__error(RILL_EINVAL, "endpoint: bias is not finite");
    }
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        if (!isfinite(p->weights[i])) {
            return rill__error(RILL_EINVAL, "endpoint: weight of %s is not finite",
                               FEATURE_NAMES[i]);
        }
    }
    return RILL_OK;
}

rill_err_t rill_endpoint_prob(const rill_endpoint_params_t *p, const rill_endpoint_features_t *f,
                              float *out) {
    rill_err_t err = rill_endpoint_params_check(p);
    if (err != RILL_OK) {
        return err;
    }
    if (f == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "endpoint: NULL features or result");
    }
    double z = p->bias;
    for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
        if (!isfinite(f->x[i])) {
            return rill__error(RILL_EINVAL, "endpoint: feature %s is not finite", FEATURE_NAMES[i]);
        }
        z += (double)p->weights[i] * f->x[i];
    }
    double pr = 1.0 / (1.0 + exp(-z));
    *out = (float)(pr < 0 ? 0 : pr > 1 ? 1 : pr);
    return RILL_OK;
}

rill_err_t rill_endpoint_new(const rill_endpoint_params_t *params, rill_endpoint_t **out) {
    rill_endpoint_params_t d = rill_endpoint_default_params();
    const rill_endpoint_params_t *p = params != NULL ? params : &d;
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "endpoint: NULL out");
    }
    rill_err_t err = rill_endpoint_params_check(p);
    if (err != RILL_OK) {
        return err;
    }
    rill_endpoint_t *ep = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *ep);
    if (ep == NULL) {
        return rill__error(RILL_ENOMEM, "endpoint: out of memory");
    }
    ep->p = *p;
    ep->state = RILL_ENDPOINT_LISTEN;
    ep->last_step_ms = ep->last_obs_ms = -1;
    ep->last_commit_ms = -1;
    ep->tent_hash = FNV_EMPTY;
    *out = ep;
    return RILL_OK;
}

void rill_endpoint_destroy(rill_endpoint_t **ep) {
    if (ep != NULL && *ep != NULL) {
        rill_free(*ep);
        *ep = NULL;
    }
}

/* FNV-1a of the bytes hashed into h, then s[0, n). */
static uint64_t fnv1a_add(uint64_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    }
    return h;
}

/* Last byte of s[0, n) that is not a space, tab or newline; 0 when none. */
static char last_visible(const char *s, size_t n) {
    while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) {
        n--;
    }
    return n > 0 ? s[n - 1] : 0;
}

rill_err_t rill_endpoint_observe(rill_endpoint_t *ep, int64_t now_ms, const char *committed,
                                 size_t committed_len, const char *tentative,
                                 size_t tentative_len) {
    if (ep == NULL || (committed == NULL && committed_len > 0) ||
        (tentative == NULL && tentative_len > 0)) {
        return rill__error(RILL_EINVAL, "endpoint: NULL driver or text");
    }
    if (now_ms < ep->last_obs_ms) {
        return rill__error(RILL_EINVAL, "endpoint: observe at %lld ms, before %lld ms",
                           (long long)now_ms, (long long)ep->last_obs_ms);
    }
    ep->last_obs_ms = now_ms;
    ep->st.observed++;
    /* the text is unchanged when the words committed now, then the new tail, are the old
     * tail: local agreement commits words of the previous hypothesis's tail */
    size_t skip = 0;
    while (skip < committed_len && committed[skip] == ' ') {
        skip++;
    }
    uint64_t joined = fnv1a_add(FNV_EMPTY, committed + skip, committed_len - skip);
    if (committed_len > skip && tentative_len > 0) {
        joined = fnv1a_add(joined, " ", 1);
    }
    joined = fnv1a_add(joined, tentative, tentative_len);
    uint64_t h = fnv1a_add(FNV_EMPTY, tentative, tentative_len);
    char lc = last_visible(committed != NULL ? committed : "", committed_len);
    bool changed = joined != ep->tent_hash;
    if (lc != 0) {
        ep->last_committed = lc;
        ep->last_commit_ms = now_ms;
    }
    ep->tent_hash = h;
    ep->tent_len = tentative_len;
    ep->last_tentative = last_visible(tentative_len > 0 ? tentative : "", tentative_len);
    if (changed) {
        ep->stable_steps = 0;
        ep->changed |= ep->state == RILL_ENDPOINT_SPEC;
    } else if (ep->stable_steps < STABLE_MAX) {
        ep->stable_steps++;
    }
    return RILL_OK;
}

static void features(const rill_endpoint_t *ep, int64_t now_ms, int64_t pause_ms,
                     const rill_sched_end_mass_t *mass, rill_endpoint_features_t *f) {
    bool have = mass != NULL && mass->updates > 0;
    double pt = have ? mass->p_turn : 0, ps = have ? mass->p_sentence : 0;
    char last = ep->last_tentative != 0 ? ep->last_tentative : ep->last_committed;
    double since = ep->last_commit_ms < 0 ? (double)now_ms / 1000.0
                                          : (double)(now_ms - ep->last_commit_ms) / 1000.0;
    f->x[RILL_ENDPOINT_PAUSE] = (float)((double)pause_ms / 1000.0);
    f->x[RILL_ENDPOINT_LOG_P_TURN] = (float)log(pt > P_FLOOR ? pt : P_FLOOR);
    f->x[RILL_ENDPOINT_LOG_P_SENTENCE] = (float)log(ps > P_FLOOR ? ps : P_FLOOR);
    f->x[RILL_ENDPOINT_TENTATIVE_EMPTY] = ep->tent_len == 0 ? 1.0f : 0.0f;
    f->x[RILL_ENDPOINT_STABLE_STEPS] = (float)ep->stable_steps;
    f->x[RILL_ENDPOINT_SINCE_COMMIT] =
        (float)(since < SINCE_MAX ? (since > 0 ? since : 0) : SINCE_MAX);
    f->x[RILL_ENDPOINT_ENDS_SENTENCE] = last == '.' || last == '?' || last == '!' ? 1.0f : 0.0f;
}

rill_err_t rill_endpoint_step(rill_endpoint_t *ep, int64_t now_ms, int64_t pause_ms,
                              const rill_sched_end_mass_t *mass, rill_endpoint_decision_t *out) {
    if (ep == NULL || out == NULL || pause_ms < 0) {
        return rill__error(RILL_EINVAL, "endpoint: NULL driver or result, or a negative pause");
    }
    if (now_ms < ep->last_step_ms) {
        return rill__error(RILL_EINVAL, "endpoint: step at %lld ms, before %lld ms",
                           (long long)now_ms, (long long)ep->last_step_ms);
    }
    if (mass != NULL && mass->updates > 0 &&
        !(mass->p_turn >= 0 && mass->p_turn <= 1 && mass->p_sentence >= 0 &&
          mass->p_sentence <= 1)) {
        return rill__error(RILL_EINVAL, "endpoint: a mass outside [0, 1]");
    }
    rill_endpoint_decision_t d = { .action = RILL_ENDPOINT_NONE };
    features(ep, now_ms, pause_ms, mass, &d.features);
    if (pause_ms > 0) {
        rill_err_t err = rill_endpoint_prob(&ep->p, &d.features, &d.prob);
        if (err != RILL_OK) {
            return err; /* only non-finite features, which finite inputs cannot give */
        }
    }
    ep->last_step_ms = now_ms;
    ep->st.steps++;
    switch (ep->state) {
    case RILL_ENDPOINT_DONE:
        if (pause_ms == 0) {
            ep->state = RILL_ENDPOINT_LISTEN;
        }
        break;
    case RILL_ENDPOINT_SPEC:
        if (pause_ms == 0 || ep->changed) {
            d.action = RILL_ENDPOINT_CANCEL;
            ep->st.cancels_speech += pause_ms == 0;
            ep->st.cancels_stale += pause_ms != 0;
            ep->state = RILL_ENDPOINT_LISTEN;
        } else if (pause_ms >= ep->p.confirm_ms) {
            d.action = RILL_ENDPOINT_COMMIT;
            ep->st.commits++;
            ep->state = RILL_ENDPOINT_DONE;
        }
        ep->changed = false;
        break;
    case RILL_ENDPOINT_LISTEN:
        if (pause_ms >= ep->p.confirm_ms) {
            d.action = RILL_ENDPOINT_END;
            ep->st.ends++;
            ep->state = RILL_ENDPOINT_DONE;
        } else if (pause_ms > 0 && pause_ms >= ep->p.min_pause_ms && d.prob >= ep->p.threshold) {
            d.action = RILL_ENDPOINT_START;
            ep->st.starts++;
            ep->state = RILL_ENDPOINT_SPEC;
            ep->changed = false;
        }
        break;
    }
    d.state = ep->state;
    *out = d;
    return RILL_OK;
}

rill_endpoint_state_t rill_endpoint_state(const rill_endpoint_t *ep) {
    return ep != NULL ? ep->state : RILL_ENDPOINT_LISTEN;
}

rill_endpoint_stats_t rill_endpoint_stats(const rill_endpoint_t *ep) {
    rill_endpoint_stats_t z = { 0 };
    return ep != NULL ? ep->st : z;
}
