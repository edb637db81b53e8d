/*
 * sampler.c - penalties, top-k, top-p, min-p, temperature and a seeded draw.
 *
 * Design. Each call copies the logits into a candidate array (token id, logit) sized at
 * creation, and every stage narrows the live prefix cand[0, n) in place: no allocation per token
 * (STYLE.md rule 6). Sorting uses our own heap routines rather than qsort, because glibc's qsort
 * may call malloc for its merge buffer and because a heap gives top-k in O(V log k): the k best
 * are kept in a min-heap at the front of the array while the rest is scanned, then heap-sorted.
 * The order is total (logit descending, then token id ascending), so results never depend on
 * the sort algorithm or the platform.
 *
 * Probabilities are computed in double as exp((l - l_max) / T): the temperature is applied to
 * differences, which is the same distribution as dividing the logits first but cannot overflow
 * for huge logits or tiny temperatures. +inf logits are clamped to FLT_MAX and NaN ones become
 * -inf before anything else looks at them.
 *
 * The penalty window is a ring of the last `penalty_last_n` accepted tokens. A token is
 * penalised once however often it occurs: a per-token stamp array marks what this call has
 * already penalised, so de-duplication costs O(window), not O(V).
 *
 * PRNG: core's xoshiro256** (rill_rand.h: state seeded by four splitmix64 outputs, a uniform
 * double in [0, 1) from the top 53 bits), inline, one step per draw.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_rand.h"
#include "rill_sampler.h"

typedef struct cand {
    float logit;
    int32_t id;
} cand_t;

struct rill_sampler {
    rill_sampler_params_t p;
    int32_t n_vocab;
    cand_t *cand;    /* (V) */
    uint32_t *stamp; /* (V) penalty de-duplication marks */
    uint32_t cur_stamp;
    int32_t *hist; /* (penalty_last_n) ring of accepted tokens */
    int32_t hist_n;
    int32_t hist_head; /* next slot to write */
    rill_rand_t rng;
};

/* ---- ordering ---- */

static bool better(const cand_t *a, const cand_t *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

/* Min-heap under `better`: the root is the worst element of c[0, n). */
static void sift_down(cand_t *c, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1;
        if (l >= n) {
            return;
        }
        int32_t w = l;
        if (l + 1 < n && better(&c[w], &c[l + 1])) {
            w = l + 1;
        }
        if (!better(&c[i], &c[w])) {
            return;
        }
        cand_t t = c[i];
        c[i] = c[w];
        c[w] = t;
        i = w;
    }
}

/* Moves the k best of c[0, n) to c[0, k), sorted best first. */
static void top_sorted(cand_t *c, int32_t n, int32_t k) {
    for (int32_t i = k / 2 - 1; i >= 0; i--) {
        sift_down(c, k, i);
    }
    for (int32_t i = k; i < n; i++) {
        if (better(&c[i], &c[0])) {
            cand_t t = c[0];
            c[0] = c[i];
            c[i] = t;
            sift_down(c, k, 0);
        }
    }
    for (int32_t end = k - 1; end > 0; end--) {
        cand_t t = c[0];
        c[0] = c[end];
        c[end] = t;
        sift_down(c, end, 0);
    }
}

/* ---- lifetime ---- */

rill_sampler_params_t rill_sampler_default_params(void) {
    rill_sampler_params_t p;
    memset(&p, 0, sizeof p);
    p.temp = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.penalty_repeat = 1.0f;
    p.penalty_last_n = 64;
    p.seed = 0x5eed;
    return p;
}

void rill_sampler_reset(rill_sampler_t *s, uint64_t seed) {
    if (s == NULL) {
        return;
    }
    s->hist_n = 0;
    s->hist_head = 0;
    rill_rand_seed(&s->rng, seed);
}

bool rill_sampler_params_valid(const rill_sampler_params_t *params) {
    return params != NULL && !isnan(params->temp) && !isnan(params->top_p) &&
           !isnan(params->min_p) && params->penalty_repeat > 0 &&
           isfinite(params->penalty_repeat) && params->penalty_last_n >= 0;
}

rill_err_t rill_sampler_new(int32_t n_vocab, rill_sampler_params_t params, rill_sampler_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (n_vocab < 1 || !rill_sampler_params_valid(&params)) {
        return RILL_EINVAL;
    }
    rill_sampler_t *s = rill_calloc(RILL_MEM_MODEL, 1, sizeof *s);
    if (s == NULL) {
        return RILL_ENOMEM;
    }
    s->p = params;
    s->n_vocab = n_vocab;
    s->cand = rill_malloc(RILL_MEM_MODEL, (size_t)n_vocab * sizeof *s->cand);
    s->stamp = rill_calloc(RILL_MEM_MODEL, (size_t)n_vocab, sizeof *s->stamp);
    s->hist = rill_malloc(RILL_MEM_MODEL, ((size_t)params.penalty_last_n + 1) * sizeof *s->hist);
    if (s->cand == NULL || s->stamp == NULL || s->hist == NULL) {
        rill_sampler_destroy(&s);
        return RILL_ENOMEM;
    }
    rill_sampler_reset(s, params.seed);
    *out = s;
    return RILL_OK;
}

void rill_sampler_destroy(rill_sampler_t **sp) {
    if (sp == NULL || *sp == NULL) {
        return;
    }
    rill_free((*sp)->cand);
    rill_free((*sp)->stamp);
    rill_free((*sp)->hist);
    rill_free(*sp);
    *sp = NULL;
}

rill_sampler_params_t rill_sampler_params(const rill_sampler_t *s) {
    return s != NULL ? s->p : rill_sampler_default_params();
}

void rill_sampler_accept(rill_sampler_t *s, int32_t token) {
    if (s == NULL || token < 0 || token >= s->n_vocab || s->p.penalty_last_n == 0) {
        return;
    }
    s->hist[s->hist_head] = token;
    s->hist_head = (s->hist_head + 1) % s->p.penalty_last_n;
    if (s->hist_n < s->p.penalty_last_n) {
        s->hist_n++;
    }
}

/* ---- the stages ---- */

static void apply_penalties(rill_sampler_t *s) {
    if (s->p.penalty_repeat == 1.0f || s->hist_n == 0) {
        return;
    }
    if (++s->cur_stamp == 0) { /* wrapped after 2^32 calls: forget every old mark */
        memset(s->stamp, 0, (size_t)s->n_vocab * sizeof *s->stamp);
        s->cur_stamp = 1;
    }
    const float pen = s->p.penalty_repeat;
    for (int32_t i = 0; i < s->hist_n; i++) {
        int32_t t = s->hist[i];
        if (s->stamp[t] == s->cur_stamp) {
            continue;
        }
        s->stamp[t] = s->cur_stamp;
        float l = s->cand[t].logit; /* cand is still in id order here */
        s->cand[t].logit = l <= 0 ? l * pen : l / pen;
    }
}

/* Runs every stage; leaves the live candidates in cand[0, *n) and returns their largest logit
 * (which is what the softmax subtracts). Greedy and degenerate inputs leave one candidate. */
static float prepare(rill_sampler_t *s, const float *logits, int32_t *n_out) {
    const int32_t V = s->n_vocab;
    cand_t *c = s->cand;
    float max = -INFINITY;
    for (int32_t i = 0; i < V; i++) {
        float l = logits[i];
        if (isnan(l)) {
            l = -INFINITY;
        } else if (l > FLT_MAX) {
            l = FLT_MAX;
        }
        c[i].logit = l;
        c[i].id = i;
    }
    apply_penalties(s);
    int32_t best = 0;
    for (int32_t i = 0; i < V; i++) {
        if (c[i].logit > max) {
            max = c[i].logit;
            best = i;
        }
    }
    if (max == -INFINITY || !(s->p.temp > 0)) {
        c[0] = c[best];
        *n_out = 1;
        return c[0].logit;
    }
    int32_t n = V;
    bool sorted = false;
    if (s->p.top_k > 0 && s->p.top_k < n) {
        top_sorted(c, n, s->p.top_k);
        n = s->p.top_k;
        sorted = true;
    }
    if (s->p.top_p < 1.0f) {
        if (!sorted) {
            top_sorted(c, n, n);
            sorted = true;
        }
        double sum = 0;
        for (int32_t i = 0; i < n; i++) {
            sum += exp((double)c[i].logit - (double)max);
        }
        double cum = 0;
        const double target = (double)s->p.top_p * sum;
        for (int32_t i = 0; i < n; i++) {
            cum += exp((double)c[i].logit - (double)max);
            if (cum >= target) {
                n = i + 1;
                break;
            }
        }
    }
    if (s->p.min_p > 0.0f) {
        const double floor_logit = (double)max + log((double)s->p.min_p);
        int32_t k = 0;
        for (int32_t i = 0; i < n; i++) {
            if ((double)c[i].logit >= floor_logit) {
                c[k++] = c[i];
            }
        }
        n = k;
        if (n == 0) { /* min_p > 1: not even the arg-max passes; keep it alone */
            c[0] = (cand_t){ max, best };
            n = 1;
        }
    }
    *n_out = n;
    return max;
}

/* Softmax weights of the live candidates at the sampler's temperature, in double. */
static double weight(const rill_sampler_t *s, float logit, float max) {
    return exp(((double)logit - (double)max) / (double)s->p.temp);
}

int32_t rill_sampler_argmax(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

rill_err_t rill_sampler_sample(rill_sampler_t *s, const float *logits, int32_t *token) {
    if (s == NULL || logits == NULL || token == NULL) {
        return RILL_EINVAL;
    }
    int32_t n;
    float max = prepare(s, logits, &n);
    if (n == 1) {
        *token = s->cand[0].id;
        return RILL_OK;
    }
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        sum += weight(s, s->cand[i].logit, max);
    }
    double u = rill_rand_double(&s->rng) * sum;
    double cum = 0;
    int32_t pick = n - 1;
    for (int32_t i = 0; i < n; i++) {
        cum += weight(s, s->cand[i].logit, max);
        if (u < cum) {
            pick = i;
            break;
        }
    }
    *token = s->cand[pick].id;
    return RILL_OK;
}

rill_err_t rill_sampler_probs(rill_sampler_t *s, const float *logits, float *probs) {
    if (s == NULL || logits == NULL || probs == NULL) {
        return RILL_EINVAL;
    }
    int32_t n;
    float max = prepare(s, logits, &n);
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    if (n == 1) {
        probs[s->cand[0].id] = 1.0f;
        return RILL_OK;
    }
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        sum += weight(s, s->cand[i].logit, max);
    }
    for (int32_t i = 0; i < n; i++) {
        probs[s->cand[i].id] = (float)(weight(s, s->cand[i].logit, max) / sum);
    }
    return RILL_OK;
}
