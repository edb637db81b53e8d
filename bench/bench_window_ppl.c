/*
 * bench_window_ppl.c - the quality cost of a windowed session (issue 4, 8 (iii)).
 *
 * A windowed session (S sinks + W recent tokens, sessions/rill_session.h) keeps the K/V of its
 * kept tokens as they were computed, while the evicted tokens were still there, and re-rotates
 * their keys instead of recomputing them. A stateless engine with the same memory would instead
 * re-prefill exactly the tokens the session holds, from scratch, for every prediction. This
 * program streams a long real text through a windowed session of the default model and, at
 * sampled scoring points, scores the next token both ways:
 *
 *   windowed   log p(x[t] | the session after appending x[0, t)), taken from the session's
 *              logits; the stream is appended in chunks that end at the scoring points
 *   re-prefill log p(x[t] | a fresh prefill of the tokens the session holds at that moment,
 *              at positions 0..n-1), in a second session without a window
 *
 * and reports both perplexities over the same points, their ratio with a 95% interval (paired
 * differences), the mean |delta log p|, the mean KL(re-prefill || windowed) and the top-1
 * agreement. Scoring points are evenly spaced over
 * [start, n_tokens), the same for every window; start defaults to 2 (S' + W') of the largest
 * window, so that every point comes after several evictions.
 *
 * Text: the verses of shared/testdata/bible/en-web.tsv (second column) in order, one per line,
 * tokenized once as a whole (no BOS: SmolLM2 adds none), cut to --tokens.
 *
 * Usage: bench_window_ppl [--model PATH] [--text PATH] [--tokens N] [--sinks S]
 *                         [--windows W1,W2,...] [--points K] [--start T] [--threads T]
 *                         [--kv f32|f16|q8_0|q4_0] [--kv-v TYPE]   (K and V cache types;
 *                         --kv-v defaults to --kv, as llama.cpp's -ctk/-ctv)
 * Paths default to the repository layout, run from its root. Prints a table, then one JSON line
 * per window.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_sampler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"

#define MAX_WINDOWS 8

typedef struct opts {
    const char *model, *text;
    int64_t n_tokens;
    int32_t sinks, windows[MAX_WINDOWS], n_windows, points;
    int64_t start; /* first scoring point; 0: 2 (S' + W') of the largest window */
    int threads;
    rill_dtype_t kv;   /* K cache type (and V unless kv_v) */
    rill_dtype_t kv_v; /* V cache type */
    char kv_label[16]; /* "q8_0", or "q8_0/f16" when V differs */
} opts_t;

typedef struct result {
    int32_t window, window_slots, points;
    double nll_win, nll_fresh, abs_dlogp, sq_dlogp, kl;
    int32_t top1_same;
    double stream_s, fresh_s;
    int64_t evicted;
} result_t;

/* The verse texts of a TSV (reference TAB text), one per line, until about max_bytes. */
static char *read_verses(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    char *out = malloc(max_bytes + 4096);
    size_t n = 0;
    char line[8192];
    while (n < max_bytes && fgets(line, sizeof line, f) != NULL) {
        char *tab = strchr(line, '\t');
        if (tab == NULL) {
            continue;
        }
        size_t l = strcspn(tab + 1, "\r\n");
        if (n + l + 1 > max_bytes + 4096) {
            break;
        }
        memcpy(out + n, tab + 1, l);
        n += l;
        out[n++] = '\n';
    }
    fclose(f);
    *len = n;
    return out;
}

/* log softmax(logits)[target], and KL(p || q) of two logit rows (natural log). */
static double log_prob(const float *x, int V, int target) {
    double m = -INFINITY, s = 0;
    for (int i = 0; i < V; i++) {
        m = fmax(m, x[i]);
    }
    for (int i = 0; i < V; i++) {
        s += exp(x[i] - m);
    }
    return x[target] - m - log(s);
}

static double kl_div(const float *p_logits, const float *q_logits, int V) {
    double mp = -INFINITY, mq = -INFINITY, sp = 0, sq = 0, kl = 0;
    for (int i = 0; i < V; i++) {
        mp = fmax(mp, p_logits[i]);
        mq = fmax(mq, q_logits[i]);
    }
    for (int i = 0; i < V; i++) {
        sp += exp(p_logits[i] - mp);
        sq += exp(q_logits[i] - mq);
    }
    double lsp = mp + log(sp), lsq = mq + log(sq);
    for (int i = 0; i < V; i++) {
        double lp = p_logits[i] - lsp, lq = q_logits[i] - lsq;
        kl += exp(lp) * (lp - lq);
    }
    return kl;
}

/* 95% interval of the perplexity ratio: exp of the mean paired difference of the two negative
 * log-likelihoods +- 1.96 standard errors (the points are paired: same token, same context). */
static void ratio_ci(const result_t *r, double *lo, double *hi) {
    double n = r->points, mean = (r->nll_win - r->nll_fresh) / n;
    double var = n > 1 ? (r->sq_dlogp - n * mean * mean) / (n - 1) : 0;
    double se = sqrt(var > 0 ? var / n : 0);
    *lo = exp(mean - 1.96 * se);
    *hi = exp(mean + 1.96 * se);
}

static int check(rill_err_t err, const char *what) {
    if (err != RILL_OK) {
        fprintf(stderr, "bench_window_ppl: %s: %s\n", what, rill_strerror(err));
        return 1;
    }
    return 0;
}

static int run_window(rill_forward_t *fw, const opts_t *o, const int32_t *tok, int64_t n_tok,
                      int32_t window, int V, result_t *r) {
    int P = RILL_KV_PAGE_SIZE;
    int32_t cap = (o->sinks + P - 1) / P * P + (window + P - 1) / P * P;
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = 2 * (int64_t)cap + 4 * P;
    pp.kv_type = o->kv;
    pp.kv_type_v = (int32_t)o->kv_v;
    rill_session_pool_t *pool = NULL;
    if (check(rill_session_pool_new(fw, &pp, &pool), "pool")) {
        return 1;
    }
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = o->sinks;
    sp.window = window;
    rill_session_t *s = NULL;
    if (check(rill_session_new(pool, &sp, &s), "session")) {
        rill_session_pool_destroy(&pool);
        return 1;
    }
    float *win = malloc((size_t)V * sizeof *win);
    memset(r, 0, sizeof *r);
    r->window = window;
    r->window_slots = cap - (o->sinks + P - 1) / P * P;
    int64_t start = o->start, at = 0;
    int rc = 0;
    for (int k = 0; k < o->points && rc == 0; k++) {
        int64_t t = start + (n_tok - 1 - start) * k / (o->points > 1 ? o->points - 1 : 1);
        if (t <= at) {
            continue;
        }
        uint64_t t0 = rill_now_ns();
        for (int64_t done = at; done < t && rc == 0;) {
            int32_t m = t - done < 4096 ? (int32_t)(t - done) : 4096;
            rc = check(rill_session_append(s, tok + done, m), "append");
            done += m;
        }
        r->stream_s += (double)(rill_now_ns() - t0) * 1e-9;
        at = t;
        const float *l = NULL;
        if (rc != 0 || check(rill_session_logits(s, &l), "logits")) {
            rc = 1;
            break;
        }
        memcpy(win, l, (size_t)V * sizeof *win);
        int32_t n_res = 0;
        const int32_t *res = rill_session_tokens(s, &n_res);
        t0 = rill_now_ns();
        rill_session_t *f = NULL;
        if (check(rill_session_new(pool, NULL, &f), "fresh session") ||
            check(rill_session_append(f, res, n_res), "fresh append") ||
            check(rill_session_logits(f, &l), "fresh logits")) {
            rill_session_destroy(&f);
            rc = 1;
            break;
        }
        r->fresh_s += (double)(rill_now_ns() - t0) * 1e-9;
        double lw = log_prob(win, V, tok[t]), lf = log_prob(l, V, tok[t]);
        r->nll_win -= lw;
        r->nll_fresh -= lf;
        r->abs_dlogp += fabs(lw - lf);
        r->sq_dlogp += (lw - lf) * (lw - lf);
        r->kl += kl_div(l, win, V);
        r->top1_same += rill_sampler_argmax(l, V) == rill_sampler_argmax(win, V);
        r->points++;
        rill_session_destroy(&f);
        if ((k + 1) % 50 == 0) {
            fprintf(stderr, "  W %d: %d/%d points\n", window, k + 1, o->points);
        }
    }
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    r->evicted = st.n_evicted;
    free(win);
    rill_session_destroy(&s);
    rill_session_pool_destroy(&pool);
    return rc;
}

static int parse_args(int argc, char **argv, opts_t *o) {
    o->model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    o->text = "../shared/testdata/bible/en-web.tsv";
    o->n_tokens = 20000;
    o->sinks = 16;
    o->windows[0] = 1024;
    o->windows[1] = 256;
    o->n_windows = 2;
    o->points = 200;
    o->start = 0;
    o->threads = 2;
    o->kv = RILL_DTYPE_F16;
    int kv_v = -2; /* -2: as K */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            return 1;
        }
        i++;
        if (strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "--text") == 0) {
            o->text = v;
        } else if (strcmp(a, "--tokens") == 0) {
            o->n_tokens = atoll(v);
        } else if (strcmp(a, "--sinks") == 0) {
            o->sinks = atoi(v);
        } else if (strcmp(a, "--start") == 0) {
            o->start = atoll(v);
        } else if (strcmp(a, "--points") == 0) {
            o->points = atoi(v);
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = atoi(v);
        } else if (strcmp(a, "--kv") == 0) {
            const int t = rill_dtype_from_name(v);
            if (t < 0) {
                return 1;
            }
            o->kv = (rill_dtype_t)t;
        } else if (strcmp(a, "--kv-v") == 0) {
            kv_v = rill_dtype_from_name(v);
            if (kv_v < 0) {
                return 1;
            }
        } else if (strcmp(a, "--windows") == 0) {
            o->n_windows = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save);
                 t != NULL && o->n_windows < MAX_WINDOWS; t = strtok_r(NULL, ",", &save)) {
                o->windows[o->n_windows++] = atoi(t);
            }
        } else {
            return 1;
        }
    }
    o->kv_v = kv_v == -2 ? o->kv : (rill_dtype_t)kv_v;
    if (o->kv_v == o->kv) {
        snprintf(o->kv_label, sizeof o->kv_label, "%s", rill_dtype_name(o->kv));
    } else {
        snprintf(o->kv_label, sizeof o->kv_label, "%s/%s", rill_dtype_name(o->kv),
                 rill_dtype_name(o->kv_v));
    }
    if (o->n_tokens < 1000 || o->points < 1 || o->n_windows < 1 || o->sinks < 0) {
        return 1;
    }
    if (o->start == 0) {
        int P = RILL_KV_PAGE_SIZE;
        for (int w = 0; w < o->n_windows; w++) {
            int64_t cap = (o->sinks + P - 1) / P * P + (o->windows[w] + P - 1) / P * P;
            o->start = 2 * cap > o->start ? 2 * cap : o->start;
        }
    }
    return o->start >= o->n_tokens;
}

int main(int argc, char **argv) {
    opts_t o;
    if (parse_args(argc, argv, &o)) {
        fprintf(stderr,
                "usage: %s [--model PATH] [--text PATH] [--tokens N] [--sinks S] "
                "[--windows W1,W2] [--points K] [--start T] [--threads T] [--kv f32|f16|q8_0|q4_0] "
                "[--kv-v TYPE]\n",
                argv[0]);
        return 2;
    }
    rill_model_t *model = NULL;
    if (rill_model_load(o.model, rill_model_default_params(), &model) != RILL_OK) {
        fprintf(stderr, "bench_window_ppl: %s: %s\n", o.model, rill_last_error(RILL_OK));
        return 1;
    }
    rill_tokenizer_t *tk = NULL;
    if (rill_tokenizer_new(rill_model_gguf(model), &tk) != RILL_OK) {
        fprintf(stderr, "bench_window_ppl: tokenizer: %s\n", rill_last_error(RILL_OK));
        return 1;
    }
    size_t len = 0;
    char *text = read_verses(o.text, (size_t)o.n_tokens * 8, &len);
    if (text == NULL) {
        fprintf(stderr, "bench_window_ppl: cannot read %s\n", o.text);
        return 1;
    }
    int64_t n_all = rill_tokenizer_encode(tk, text, len, false, false, NULL, 0);
    int32_t *tok = malloc((size_t)(n_all > 0 ? n_all : 1) * sizeof *tok);
    if (n_all < 0 || rill_tokenizer_encode(tk, text, len, false, false, tok, n_all) != n_all) {
        fprintf(stderr, "bench_window_ppl: tokenizing failed\n");
        return 1;
    }
    int64_t n_tok = n_all < o.n_tokens ? n_all : o.n_tokens;
    int V = rill_model_hparams(model)->n_vocab;

    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = o.threads;
    rill_backend_t *be = NULL;
    rill_forward_t *fw = NULL;
    rill_forward_params_t fp = rill_forward_default_params();
    if (check(rill_backend_new(&bp, &be), "backend") ||
        check(rill_forward_new(model, be, &fp, &fw), "forward")) {
        return 1;
    }
    printf("bench_window_ppl: %s, %lld tokens of %s, sinks %d, KV %s, %d threads, %d points "
           "from token %lld\n",
           o.model, (long long)n_tok, o.text, o.sinks, o.kv_label, o.threads, o.points,
           (long long)o.start);
    result_t res[MAX_WINDOWS];
    for (int w = 0; w < o.n_windows; w++) {
        if (run_window(fw, &o, tok, n_tok, o.windows[w], V, &res[w]) != 0) {
            return 1;
        }
    }
    printf("\n| sinks | window | evicted | points | ppl windowed | ppl re-prefill | ratio | "
           "ratio 95%% CI | mean abs dlogp | mean KL | top-1 same | stream s | re-prefill s |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int w = 0; w < o.n_windows; w++) {
        const result_t *r = &res[w];
        double pw = exp(r->nll_win / r->points), pf = exp(r->nll_fresh / r->points), lo, hi;
        ratio_ci(r, &lo, &hi);
        printf("| %d | %d | %lld | %d | %.3f | %.3f | %.4f | %.3f-%.3f | %.4f | %.5f | %.1f%% | "
               "%.1f | %.1f |\n",
               o.sinks, r->window_slots, (long long)r->evicted, r->points, pw, pf, pw / pf, lo, hi,
               r->abs_dlogp / r->points, r->kl / r->points, 100.0 * r->top1_same / r->points,
               r->stream_s, r->fresh_s);
    }
    for (int w = 0; w < o.n_windows; w++) {
        const result_t *r = &res[w];
        double pw = exp(r->nll_win / r->points), pf = exp(r->nll_fresh / r->points), lo, hi;
        ratio_ci(r, &lo, &hi);
        printf("{\"bench\":\"window_ppl\",\"model\":\"%s\",\"tokens\":%lld,\"sinks\":%d,"
               "\"window\":%d,\"kv\":\"%s\",\"threads\":%d,\"points\":%d,\"evicted\":%lld,"
               "\"ppl_windowed\":%.5f,\"ppl_reprefill\":%.5f,\"ratio\":%.5f,"
               "\"ratio_ci95\":[%.5f,%.5f],\"mean_abs_dlogp\":%.5f,\"mean_kl\":%.6f,"
               "\"top1_same\":%.4f}\n",
               o.model, (long long)n_tok, o.sinks, r->window_slots, o.kv_label, o.threads,
               r->points, (long long)r->evicted, pw, pf, pw / pf, lo, hi, r->abs_dlogp / r->points,
               r->kl / r->points, (double)r->top1_same / r->points);
    }
    free(tok);
    free(text);
    rill_forward_destroy(&fw);
    rill_backend_destroy(&be);
    rill_tokenizer_destroy(&tk);
    rill_model_destroy(&model);
    return 0;
}
