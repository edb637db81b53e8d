/*
 * bench_endpoint.c - endpoint anticipation on the real chain (issue 17 item 4): a turn corpus
 * (tools/make_turns.py: turns.wav) -> rill_asr streaming (Whisper) -> a consuming chat session
 * of a language model on the scheduler, with an end watch (rill_sched_end_watch_t) -> the
 * endpoint driver (scheduler/rill_endpoint.h) -> rill_sched_spec_start / _commit /
 * rill_sched_cancel, against the fixed 700 ms silence endpoint.
 *
 *   bench_endpoint --corpus DIR [--asr FILE] [--model FILE] [--asr-cache FILE]
 *                  [--thresholds 0.3,0.5,...] [--reply-tokens 32] [--step-ms 500]
 *                  [--threads N] [--coef b,w0,...,w6] [--trace FILE] [--json FILE]
 *
 * Clocks. The speaker lives on the audio clock: the detector (ingest/'s rill_vad, 30 ms frames)
 * gives the pause at the end of every frame, and the recognizer's update for audio up to t is
 * applied at frame t (with --asr-lag: at t plus the wall time its decode took in the
 * recognizer pass). The recognizer runs once, before the language model, and can be cached
 * (--asr-cache): its compute is not on the audio clock (as if it had a device of its own) and
 * is the same for every run. The language model's compute is on the wall clock:
 *   - with no speculation open, every frame's input is evaluated before the next frame (the
 *     program waits for the engine to be idle), so the end-of-turn mass is always that of the
 *     latest text and ingest costs the speaker no time;
 *   - from a START until its COMMIT or CANCEL the frames are paced to the wall clock (frame t
 *     is taken when t - start of audio time has passed since the start), so the speculative
 *     reply computes in real time while the pause goes on, and a CANCEL stops it where it is.
 * The latency of a reply is the wall time from the fixed endpoint (pause >= 700 ms: the turn
 * is submitted, or the speculation committed) to its last token; saved = the baseline run's
 * latency at the same endpoint - this run's. Only one speaker is on the engine.
 *
 * The consuming session is a ChatML chat: the system prompt, then per turn "<|im_start|>user\n",
 * the turn's transcript (committed words and the tentative tail, fed as replaceable text: a
 * replace from the turn's anchor version and a flush, so its last word is evaluated), and at
 * the end the turn suffix "<|im_end|>\n<|im_start|>assistant\n" with the reply (the guess of a
 * speculation is that suffix: "the transcript so far is the whole turn"). A turn's transcript
 * is the words of the recognizer's text after those it had when the previous turn ended.
 *
 * Output: a table per run on stdout and, with --json, one JSON line per event (an endpoint of
 * the fixed rule, with what each run did there) and one summary line per run; with --trace,
 * one JSON line per detector frame of the baseline run inside a pause (the features, for
 * tools/fit_endpoint.py). bench/endpoint_report.py turns these into the table and plot of
 * docs/benchmarks.md.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_asr.h"
#include "rill_audio.h"
#include "rill_backend.h"
#include "rill_core.h"
#include "rill_endpoint.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "rill_whisper.h"

#define SEC       1000000000LL
#define FRAME_MS  30
#define MAX_THR   16
#define MAX_REPLY 256

static const char SYSTEM[] = "<|im_start|>system\nYou are a helpful assistant. Answer the "
                             "speaker briefly.<|im_end|>\n";
static const char USER[] = "<|im_start|>user\n";
static const char SUFFIX[] = "<|im_end|>\n<|im_start|>assistant\n";

static void die(const char *what, rill_err_t e) {
    fprintf(stderr, "bench_endpoint: %s: %s %s\n", what, rill_err_name(e), rill_last_error(e));
    exit(1);
}

static double now_ms(void) {
    return (double)rill_now_ns() / 1e6;
}

/* ---- the recognizer's updates --------------------------------------------------------------- */

typedef struct asr_ev {
    int64_t audio_ms, decode_ms; /* available at audio_ms + decode_ms */
    char *committed, *tentative; /* this step's committed text and the tail (owned) */
} asr_ev_t;

typedef struct asr_trace {
    asr_ev_t *ev;
    int n, cap;
} asr_trace_t;

static char *dup_clean(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d == NULL) {
        die("memory", RILL_ENOMEM);
    }
    for (size_t i = 0; i < n; i++) {
        d[i] = s[i] == '\t' || s[i] == '\n' || s[i] == '\r' ? ' ' : s[i];
    }
    d[n] = '\0';
    return d;
}

static void trace_add(asr_trace_t *t, int64_t audio_ms, int64_t decode_ms, const char *c, size_t cn,
                      const char *te, size_t tn) {
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 256;
        t->ev = realloc(t->ev, (size_t)t->cap * sizeof *t->ev);
        if (t->ev == NULL) {
            die("memory", RILL_ENOMEM);
        }
    }
    t->ev[t->n++] = (asr_ev_t){ audio_ms, decode_ms, dup_clean(c, cn), dup_clean(te, tn) };
}

static bool trace_load(asr_trace_t *t, const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return false;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    while ((n = getline(&line, &cap, f)) > 0) {
        line[n - 1] = line[n - 1] == '\n' ? '\0' : line[n - 1];
        long long a, d;
        char *p1 = strchr(line, '\t'), *p2 = p1 ? strchr(p1 + 1, '\t') : NULL;
        if (p2 == NULL || sscanf(line, "%lld %lld", &a, &d) != 2) {
            fprintf(stderr, "bench_endpoint: %s: a bad line\n", path);
            exit(1);
        }
        *p2 = '\0';
        trace_add(t, a, d, p1 + 1, strlen(p1 + 1), p2 + 1, strlen(p2 + 1));
    }
    free(line);
    fclose(f);
    return true;
}

static void trace_save(const asr_trace_t *t, const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "bench_endpoint: cannot write %s\n", path);
        exit(1);
    }
    for (int i = 0; i < t->n; i++) {
        fprintf(f, "%lld %lld\t%s\t%s\n", (long long)t->ev[i].audio_ms,
                (long long)t->ev[i].decode_ms, t->ev[i].committed, t->ev[i].tentative);
    }
    fclose(f);
}

/* The recognizer pass over x[0, n): one update per step (decoded or not). */
static void run_asr(const char *asr_path, int threads, int step_ms, const float *x, int64_t n,
                    asr_trace_t *t) {
    rill_model_t *model = NULL;
    rill_err_t e = rill_model_load(asr_path, rill_model_default_params(), &model);
    if (e != RILL_OK) {
        die(asr_path, e);
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = threads;
    rill_backend_t *be = NULL;
    rill_whisper_t *w = NULL;
    rill_asr_t *asr = NULL;
    rill_asr_params_t ap = rill_asr_default_params();
    ap.step_ms = step_ms;
    ap.keep_committed = false;
    if (ap.transcript.max_window_ms > ap.window_ms - ap.step_ms) {
        ap.transcript.max_window_ms = ap.window_ms - ap.step_ms;
    }
    if ((e = rill_backend_new(&bp, &be)) != RILL_OK ||
        (e = rill_whisper_new(model, be, NULL, &w)) || (e = rill_asr_new(w, model, &ap, &asr))) {
        die("recognizer", e);
    }
    const int64_t chunk = RILL_AUDIO_RATE / 10;
    double t0 = now_ms();
    rill_asr_update_t u;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t k = n - i < chunk ? n - i : chunk;
        if ((e = rill_asr_feed(asr, x + i, k)) == RILL_EFULL) {
            die("recognizer window full", e);
        } else if (e != RILL_OK) {
            die("feed", e);
        }
        if (rill_asr_ready(asr)) {
            double s0 = now_ms();
            if ((e = rill_asr_step(asr, &u)) != RILL_OK) {
                die("step", e);
            }
            trace_add(t, u.audio_ms, (int64_t)(now_ms() - s0), u.committed, u.committed_len,
                      u.tentative, u.tentative_len);
        }
    }
    double s0 = now_ms();
    if ((e = rill_asr_finish(asr, &u)) != RILL_OK) {
        die("finish", e);
    }
    trace_add(t, u.audio_ms, (int64_t)(now_ms() - s0), u.committed, u.committed_len, "", 0);
    rill_asr_stats_t st = rill_asr_stats(asr);
    fprintf(stderr,
            "bench_endpoint: recognizer: %.1f s of audio in %.1f s (%lld decodes, %lld skipped "
            "as silence, %lld settled)\n",
            (double)n / RILL_AUDIO_RATE, (now_ms() - t0) / 1000, (long long)st.decodes,
            (long long)st.skipped_silence, (long long)st.skipped_settled);
    rill_asr_destroy(&asr);
    rill_whisper_destroy(&w);
    rill_backend_destroy(&be);
    rill_model_destroy(&model);
}

/* ---- the transcript as words ---------------------------------------------------------------- */

typedef struct text {
    char *p;
    size_t n, cap;
} text_t;

static void text_set(text_t *t, const char *a, size_t an, const char *b, size_t bn) {
    size_t need = an + bn + 2;
    if (need > t->cap) {
        t->cap = need * 2;
        t->p = realloc(t->p, t->cap);
        if (t->p == NULL) {
            die("memory", RILL_ENOMEM);
        }
    }
    memcpy(t->p, a, an);
    t->n = an;
    if (an > 0 && bn > 0) {
        t->p[t->n++] = ' ';
    }
    memcpy(t->p + t->n, b, bn);
    t->n += bn;
    t->p[t->n] = '\0';
}

static void text_append(text_t *t, const char *a, size_t an) {
    if (t->n + an + 1 > t->cap) {
        t->cap = (t->n + an + 1) * 2;
        t->p = realloc(t->p, t->cap);
        if (t->p == NULL) {
            die("memory", RILL_ENOMEM);
        }
    }
    memcpy(t->p + t->n, a, an);
    t->n += an;
    t->p[t->n] = '\0';
}

/* Offset in s of word w (words: runs of non-spaces); s's length when there are fewer. */
static size_t word_offset(const char *s, size_t n, int w) {
    size_t i = 0;
    int k = 0;
    while (i < n) {
        while (i < n && s[i] == ' ') {
            i++;
        }
        if (i < n && k == w) {
            return i;
        }
        while (i < n && s[i] != ' ') {
            i++;
        }
        k++;
    }
    return n;
}

static int word_count(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        k += s[i] != ' ' && (i == 0 || s[i - 1] == ' ');
    }
    return k;
}

/* ---- requests ------------------------------------------------------------------------------- */

typedef struct req {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    rill_sched_answer_t a;
    int n_tok;
    int32_t tok[MAX_REPLY];
    double first_ms, last_ms; /* wall clock of the first and the last delivered token */
} req_t;

static void req_reset(req_t *r) {
    pthread_mutex_lock(&r->mu);
    r->done = false;
    r->n_tok = 0;
    r->first_ms = r->last_ms = 0;
    pthread_mutex_unlock(&r->mu);
}

static void on_token(void *user, rill_sched_rid_t rid, int32_t tok) {
    (void)rid;
    req_t *r = user;
    pthread_mutex_lock(&r->mu);
    double t = now_ms();
    if (r->n_tok == 0) {
        r->first_ms = t;
    }
    r->last_ms = t;
    if (r->n_tok < MAX_REPLY) {
        r->tok[r->n_tok++] = tok;
    }
    pthread_mutex_unlock(&r->mu);
}

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    req_t *r = user;
    pthread_mutex_lock(&r->mu);
    r->a = *a;
    r->a.tokens = NULL;
    r->a.message = NULL;
    r->done = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void req_wait(req_t *r) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) {
        pthread_cond_wait(&r->cv, &r->mu);
    }
    pthread_mutex_unlock(&r->mu);
}

/* ---- one run -------------------------------------------------------------------------------- */

typedef struct lm {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    int32_t sent[RILL_SCHED_END_TOKENS], turn[8];
    int n_sent, n_turn;
    int32_t sys[256], user[16], suffix[16];
    int n_sys, n_user, n_suffix;
    int32_t im_end;
} lm_t;

typedef struct event {
    int64_t at_ms;     /* audio time of the fixed endpoint */
    char kind;         /* 'c' commit, 'e' end (no speculation) */
    double latency_ms; /* to the last reply token */
    double first_ms;   /* to the first reply token */
    int64_t start_ms;  /* audio time of the speculation's start (-1: none) */
    double spec_ms;    /* wall time from its start to the commit */
    int n_reply;       /* reply tokens */
    bool hit;          /* the speculation was kept */
} event_t;

typedef struct run_out {
    event_t *ev;
    int n;
    rill_sched_stats_t st;
    rill_endpoint_stats_t ep;
    int64_t reply_tokens; /* suffix + reply tokens of the delivered replies */
    int64_t stale_mass;   /* decisions made on a mass older than the input */
} run_out_t;

static int64_t encode(const rill_tokenizer_t *tk, const char *s, int32_t *out, int cap) {
    int64_t n = rill_tokenizer_encode(tk, s, strlen(s), false, true, out, cap);
    if (n < 0) {
        die("tokenize", (rill_err_t)n);
    }
    return n;
}

static void lm_open(lm_t *L, const char *path, int threads) {
    rill_err_t e = rill_model_load(path, rill_model_default_params(), &L->model);
    if (e != RILL_OK) {
        die(path, e);
    }
    if ((e = rill_tokenizer_new(rill_model_gguf(L->model), &L->tok)) != RILL_OK) {
        die("tokenizer", e);
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = threads;
    rill_forward_params_t fp = rill_forward_default_params();
    if ((e = rill_backend_new(&bp, &L->be)) ||
        (e = rill_forward_new(L->model, L->be, &fp, &L->fw))) {
        die("forward", e);
    }
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = 32768;
    pp.tokenizer = L->tok;
    if ((e = rill_session_pool_new(L->fw, &pp, &L->pool)) != RILL_OK) {
        die("pool", e);
    }
    L->im_end = rill_tokenizer_find(L->tok, "<|im_end|>", 10);
    if (L->im_end == RILL_TOKEN_NULL) {
        fprintf(stderr, "bench_endpoint: the model has no <|im_end|> (a ChatML model is needed)\n");
        exit(1);
    }
    L->turn[L->n_turn++] = L->im_end;
    /* sentence-final pieces: blank-stripped, only . ? ! and closing quotes/brackets, with one
     * of . ? ! */
    int32_t V = rill_tokenizer_n_vocab(L->tok);
    for (int32_t id = 0; id < V && L->n_sent < RILL_SCHED_END_TOKENS; id++) {
        size_t len = 0;
        const char *p = rill_tokenizer_piece(L->tok, id, false, &len);
        bool any = false, only = len > 0;
        for (size_t i = 0; p != NULL && i < len; i++) {
            char c = p[i];
            any |= c == '.' || c == '?' || c == '!';
            only &= c == '.' || c == '?' || c == '!' || c == '"' || c == '\'' || c == ')' ||
                    c == ' ' || c == '\n';
        }
        if (any && only) {
            L->sent[L->n_sent++] = id;
        }
    }
    L->n_sys = (int)encode(L->tok, SYSTEM, L->sys, 256);
    L->n_user = (int)encode(L->tok, USER, L->user, 16);
    L->n_suffix = (int)encode(L->tok, SUFFIX, L->suffix, 16);
}

typedef struct corpus {
    float *x;
    int64_t n;
    int64_t *pause; /* [n_frames] pause at each frame's end, ms */
    int n_frames;
} corpus_t;

static void must(rill_err_t e, const char *what) {
    if (e != RILL_OK) {
        die(what, e);
    }
}

/* One run over the corpus with driver parameters ep_p (baseline: min_pause_ms = confirm_ms, so
 * it never starts). trace: feature lines of each pause frame (NULL: none). */
static void run(const lm_t *L, const corpus_t *C, const asr_trace_t *A,
                const rill_endpoint_params_t *ep_p, int reply_tokens, bool asr_lag, FILE *trace,
                run_out_t *out) {
    memset(out, 0, sizeof *out);
    rill_sched_params_t sp = rill_sched_default_params();
    rill_sched_t *sch = NULL;
    must(rill_sched_new(L->pool, &sp, &sch), "scheduler");
    rill_sched_end_watch_t *watch = NULL;
    must(rill_sched_end_watch_new(L->sent, L->n_sent, L->turn, L->n_turn, &watch), "watch");
    rill_sched_session_params_t ssp = rill_sched_session_default_params();
    ssp.end_watch = watch;
    rill_sched_sid_t sid = 0;
    must(rill_sched_session_create(sch, &ssp, &sid), "session");
    must(rill_sched_ingest(sch, sid, L->sys, L->n_sys), "ingest");
    must(rill_sched_ingest(sch, sid, L->user, L->n_user), "ingest");
    rill_endpoint_t *ep = NULL;
    must(rill_endpoint_new(ep_p, &ep), "endpoint");
    req_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    rill_sched_ask_t reply = { .n_max = reply_tokens,
                               .stop_at_eog = true,
                               .on_token = on_token,
                               .on_done = on_done,
                               .user = &r };
    text_t committed = { 0 }, all = { 0 };
    text_set(&committed, "", 0, "", 0);
    const char *tentative = "";
    int turn_w0 = 0;         /* words of the recognizer's text before this turn */
    int64_t anchor = -1;     /* version of this turn's first text input */
    int64_t fed_version = 0; /* version of the latest input */
    char *turn_fed = NULL;   /* the turn's text as last fed */
    rill_sched_rid_t spec = 0;
    int64_t spec_start_ms = -1;
    double spec_wall0 = 0;
    int next_ev = 0, cap_ev = 0;
    rill_sched_stats_t st0;
    must(rill_sched_wait_idle(sch, 600 * SEC), "idle");
    rill_sched_stats(sch, &st0);
    for (int f = 0; f < C->n_frames; f++) {
        int64_t t = (int64_t)(f + 1) * FRAME_MS;
        bool text_changed = false;
        while (next_ev < A->n &&
               A->ev[next_ev].audio_ms + (asr_lag ? A->ev[next_ev].decode_ms : 0) <= t) {
            const asr_ev_t *u = &A->ev[next_ev++];
            size_t cn = strlen(u->committed);
            if (cn > 0) { /* led by a space when something was committed before */
                text_append(&committed, u->committed, cn);
            }
            tentative = u->tentative;
            must(rill_endpoint_observe(ep, t, u->committed, cn, u->tentative, strlen(u->tentative)),
                 "observe");
            text_changed = true;
        }
        if (text_changed) {
            text_set(&all, committed.p, committed.n, tentative, strlen(tentative));
            size_t off = word_offset(all.p, all.n, turn_w0);
            const char *tt = all.p + off;
            if (turn_fed == NULL || strcmp(turn_fed, tt) != 0) {
                int64_t v = 0;
                if (anchor < 0) {
                    if (*tt != '\0') {
                        must(rill_sched_ingest_text(sch, sid, tt, strlen(tt), true, &v), "text");
                        anchor = v;
                        fed_version = v;
                    }
                } else {
                    must(rill_sched_ingest_replace(sch, sid, anchor, tt, strlen(tt), &v),
                         "replace");
                    anchor = v;
                    must(rill_sched_ingest_text(sch, sid, "", 0, true, &v), "flush");
                    fed_version = v;
                }
                free(turn_fed);
                turn_fed = strdup(tt);
            }
        }
        if (spec != 0) {
            /* a speculation runs: the engine works on it in real time while the speaker's
             * clock goes on, so frames are paced to the wall clock since its start */
            double due = spec_wall0 + (double)(t - spec_start_ms);
            for (double w = now_ms(); w < due; w = now_ms()) {
                double d = (due - w) / 1000;
                struct timespec ts = { (time_t)d, (long)((d - (double)(time_t)d) * 1e9) };
                nanosleep(&ts, NULL);
            }
        } else {
            must(rill_sched_wait_idle(sch, 600 * SEC), "idle");
        }
        rill_sched_end_mass_t mass;
        must(rill_sched_end_watch_read(watch, &mass), "read");
        int64_t pause = C->pause[f];
        rill_endpoint_decision_t d;
        must(rill_endpoint_step(ep, t, pause, &mass, &d), "step");
        if (pause > 0 && mass.version < fed_version) {
            out->stale_mass++;
        }
        if (trace != NULL && pause > 0) {
            fprintf(trace, "{\"t_ms\": %lld, \"pause_ms\": %lld, \"x\": [", (long long)t,
                    (long long)pause);
            for (int i = 0; i < RILL_ENDPOINT_N_FEATURES; i++) {
                fprintf(trace, "%s%.6g", i ? ", " : "", (double)d.features.x[i]);
            }
            fprintf(trace, "], \"prob\": %.6g}\n", (double)d.prob);
        }
        bool turn_over = false;
        event_t e = { .at_ms = t, .start_ms = -1 };
        switch (d.action) {
        case RILL_ENDPOINT_START: {
            req_reset(&r);
            spec_wall0 = now_ms();
            must(rill_sched_spec_start(sch, sid, L->suffix, L->n_suffix, &reply, &spec),
                 "spec_start");
            spec_start_ms = t;
            break;
        }
        case RILL_ENDPOINT_CANCEL:
            must(rill_sched_cancel(sch, spec), "cancel");
            req_wait(&r);
            spec = 0;
            break;
        case RILL_ENDPOINT_COMMIT: {
            int64_t hits0 = 0;
            rill_sched_stats_t s1;
            rill_sched_stats(sch, &s1);
            hits0 = s1.spec_hits;
            double w0 = now_ms();
            must(rill_sched_spec_commit(sch, spec, L->suffix, L->n_suffix), "commit");
            req_wait(&r);
            rill_sched_stats(sch, &s1);
            e.kind = 'c';
            e.start_ms = spec_start_ms;
            e.spec_ms = w0 - spec_wall0;
            e.hit = s1.spec_hits > hits0;
            e.latency_ms = r.n_tok > 0 ? r.last_ms - w0 : now_ms() - w0;
            e.first_ms = r.n_tok > 0 ? r.first_ms - w0 : now_ms() - w0;
            spec = 0;
            turn_over = true;
            break;
        }
        case RILL_ENDPOINT_END: {
            req_reset(&r);
            rill_sched_rid_t rid = 0;
            rill_sched_ask_t q = reply;
            q.question = L->suffix;
            q.n_question = L->n_suffix;
            double w0 = now_ms();
            must(rill_sched_turn(sch, sid, &q, &rid), "turn");
            req_wait(&r);
            e.kind = 'e';
            e.latency_ms = r.n_tok > 0 ? r.last_ms - w0 : now_ms() - w0;
            e.first_ms = r.n_tok > 0 ? r.first_ms - w0 : now_ms() - w0;
            turn_over = true;
            break;
        }
        default:
            break;
        }
        if (turn_over) {
            if (r.a.status != RILL_OK || !r.a.adopted) {
                fprintf(stderr, "bench_endpoint: the reply at %lld ms: %s, adopted %d\n",
                        (long long)t, rill_err_name(r.a.status), r.a.adopted);
                exit(1);
            }
            e.n_reply = r.n_tok;
            out->reply_tokens += L->n_suffix + r.n_tok;
            if (out->n == cap_ev) {
                cap_ev = cap_ev ? 2 * cap_ev : 64;
                out->ev = realloc(out->ev, (size_t)cap_ev * sizeof *out->ev);
            }
            out->ev[out->n++] = e;
            /* the next turn: the reply closed with <|im_end|> or gets one */
            bool closed = r.n_tok > 0 && r.tok[r.n_tok - 1] == L->im_end;
            int32_t nl[16];
            int n_nl = (int)encode(L->tok, closed ? "\n" : "<|im_end|>\n", nl, 16);
            must(rill_sched_ingest(sch, sid, nl, n_nl), "ingest");
            must(rill_sched_ingest(sch, sid, L->user, L->n_user), "ingest");
            text_set(&all, committed.p, committed.n, tentative, strlen(tentative));
            turn_w0 = word_count(all.p, all.n);
            anchor = -1;
            free(turn_fed);
            turn_fed = NULL;
        }
    }
    if (spec != 0) {
        must(rill_sched_cancel(sch, spec), "cancel");
        req_wait(&r);
    }
    must(rill_sched_wait_idle(sch, 600 * SEC), "idle");
    rill_sched_stats(sch, &out->st);
    out->st.spec_tokens_computed -= st0.spec_tokens_computed;
    out->ep = rill_endpoint_stats(ep);
    rill_endpoint_destroy(&ep);
    rill_sched_destroy(&sch);
    rill_sched_end_watch_destroy(&watch);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
    free(committed.p);
    free(all.p);
    free(turn_fed);
}

/* One turn on a throwaway session, so that the first run does not pay for the model's pages
 * being faulted in. */
static void warm_up(const lm_t *L, int reply_tokens) {
    rill_sched_t *sch = NULL;
    must(rill_sched_new(L->pool, NULL, &sch), "scheduler");
    rill_sched_sid_t sid = 0;
    must(rill_sched_session_create(sch, NULL, &sid), "session");
    must(rill_sched_ingest(sch, sid, L->sys, L->n_sys), "ingest");
    must(rill_sched_ingest(sch, sid, L->user, L->n_user), "ingest");
    must(rill_sched_ingest_text(sch, sid, "Hello there.", 12, true, NULL), "text");
    req_t r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.mu, NULL);
    pthread_cond_init(&r.cv, NULL);
    rill_sched_ask_t q = { .question = L->suffix,
                           .n_question = L->n_suffix,
                           .n_max = reply_tokens,
                           .on_token = on_token,
                           .on_done = on_done,
                           .user = &r };
    rill_sched_rid_t rid = 0;
    must(rill_sched_turn(sch, sid, &q, &rid), "turn");
    req_wait(&r);
    rill_sched_destroy(&sch);
    pthread_mutex_destroy(&r.mu);
    pthread_cond_destroy(&r.cv);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double q) {
    if (n == 0) {
        return NAN;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double k = q * (n - 1);
    int i = (int)k;
    return i + 1 < n ? v[i] + (k - i) * (v[i + 1] - v[i]) : v[i];
}

int main(int argc, char **argv) {
    const char *corpus = NULL, *asr_path = "models/whisper-tiny.en.gguf";
    const char *lm_path = "models/SmolLM2-135M-Instruct.Q4_1.gguf", *cache = NULL;
    const char *thr_list = "0.3,0.5,0.7,0.9", *trace_path = NULL, *json_path = NULL;
    const char *coef = NULL;
    int reply_tokens = 32, step_ms = 500, threads = 2;
    bool asr_only = false, asr_lag = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--asr-only")) { /* the recognizer pass into --asr-cache, nothing else */
            asr_only = true;
            continue;
        }
        if (!strcmp(a, "--asr-lag")) { /* updates arrive after their measured decode time */
            asr_lag = true;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "bench_endpoint: %s needs a value\n", a);
            return 2;
        }
        if (!strcmp(a, "--corpus")) {
            corpus = v;
        } else if (!strcmp(a, "--asr")) {
            asr_path = v;
        } else if (!strcmp(a, "--model")) {
            lm_path = v;
        } else if (!strcmp(a, "--asr-cache")) {
            cache = v;
        } else if (!strcmp(a, "--thresholds")) {
            thr_list = v;
        } else if (!strcmp(a, "--trace")) {
            trace_path = v;
        } else if (!strcmp(a, "--json")) {
            json_path = v;
        } else if (!strcmp(a, "--coef")) {
            coef = v;
        } else if (!strcmp(a, "--reply-tokens")) {
            reply_tokens = atoi(v);
        } else if (!strcmp(a, "--step-ms")) {
            step_ms = atoi(v);
        } else if (!strcmp(a, "--threads")) {
            threads = atoi(v);
        } else {
            fprintf(stderr, "bench_endpoint: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    if (corpus == NULL || reply_tokens < 1 || reply_tokens > MAX_REPLY || threads < 1) {
        fprintf(stderr, "usage: bench_endpoint --corpus DIR [--asr FILE] [--model FILE] "
                        "[--asr-cache FILE] [--thresholds A,B,..] [--reply-tokens N<=256] "
                        "[--step-ms MS] [--threads N] [--coef b,w0..w6] [--trace FILE] "
                        "[--json FILE]\n");
        return 2;
    }
    rill_endpoint_params_t base = rill_endpoint_default_params();
    if (coef != NULL) {
        float c[RILL_ENDPOINT_N_FEATURES + 1];
        int k = 0;
        for (const char *p = coef; k <= RILL_ENDPOINT_N_FEATURES && *p; k++) {
            char *e = NULL;
            c[k] = strtof(p, &e);
            p = *e == ',' ? e + 1 : e;
        }
        if (k != RILL_ENDPOINT_N_FEATURES + 1) {
            fprintf(stderr, "bench_endpoint: --coef takes %d numbers\n",
                    RILL_ENDPOINT_N_FEATURES + 1);
            return 2;
        }
        base.bias = c[0];
        memcpy(base.weights, c + 1, sizeof base.weights);
    }
    double thr[MAX_THR];
    int n_thr = 0;
    for (const char *p = thr_list; *p && n_thr < MAX_THR;) {
        char *e = NULL;
        thr[n_thr++] = strtod(p, &e);
        p = *e == ',' ? e + 1 : e;
    }
    for (int i = 0; i < n_thr; i++) {
        rill_endpoint_params_t p = base;
        p.threshold = (float)thr[i];
        if (rill_endpoint_params_check(&p) != RILL_OK) {
            fprintf(stderr, "bench_endpoint: threshold %g: %s\n", thr[i],
                    rill_last_error(RILL_EINVAL));
            return 2;
        }
    }
    /* the audio */
    char path[4096];
    snprintf(path, sizeof path, "%s/turns.wav", corpus);
    rill_audio_file_t *af = NULL;
    must(rill_audio_file_open(path, &af), path);
    corpus_t C = { 0 };
    int64_t cap = rill_audio_file_info(af).samples + RILL_AUDIO_RATE;
    C.x = malloc((size_t)cap * sizeof *C.x);
    for (int64_t k; (k = rill_audio_file_read(af, C.x + C.n, (size_t)(cap - C.n))) > 0;) {
        C.n += k;
    }
    rill_audio_file_close(&af);
    rill_vad_t *vad = NULL;
    must(rill_vad_new(NULL, &vad), "vad");
    const int64_t fs = RILL_AUDIO_RATE * FRAME_MS / 1000;
    C.n_frames = (int)(C.n / fs);
    C.pause = malloc((size_t)C.n_frames * sizeof *C.pause);
    for (int f = 0; f < C.n_frames; f++) {
        rill_vad_feed(vad, C.x + (int64_t)f * fs, (size_t)fs, NULL, 0);
        C.pause[f] = rill_vad_pause_ms(vad);
    }
    rill_vad_destroy(&vad);
    /* the recognizer */
    asr_trace_t A = { 0 };
    if (cache == NULL || !trace_load(&A, cache)) {
        run_asr(asr_path, threads, step_ms, C.x, C.n, &A);
        if (cache != NULL) {
            trace_save(&A, cache);
        }
    }
    if (asr_only) {
        return 0;
    }
    lm_t L;
    memset(&L, 0, sizeof L);
    lm_open(&L, lm_path, threads);
    fprintf(stderr, "bench_endpoint: %d sentence-final tokens, <|im_end|> = %d\n", L.n_sent,
            L.im_end);
    FILE *json = json_path != NULL ? fopen(json_path, "w") : NULL;
    FILE *trace = trace_path != NULL ? fopen(trace_path, "w") : NULL;
    if ((json_path != NULL && json == NULL) || (trace_path != NULL && trace == NULL)) {
        fprintf(stderr, "bench_endpoint: cannot write the output files\n");
        return 1;
    }
    warm_up(&L, reply_tokens);
    /* run 0 and run n_thr + 1: the fixed endpoint alone, before and after one run per
     * threshold (a shared machine's load drifts: the baseline latency at an endpoint is the
     * mean of the two) */
    const int n_runs = n_thr + 2;
    run_out_t *R = calloc((size_t)n_runs, sizeof *R);
    for (int k = 0; k < n_runs; k++) {
        bool is_base = k == 0 || k == n_runs - 1;
        rill_endpoint_params_t p = base;
        if (is_base) {
            p.min_pause_ms = p.confirm_ms;
        } else {
            p.threshold = (float)thr[k - 1];
        }
        double w0 = now_ms();
        run(&L, &C, &A, &p, reply_tokens, asr_lag, k == 0 ? trace : NULL, &R[k]);
        fprintf(stderr, "bench_endpoint: run %d (%s %.2f): %d endpoints, %.1f s\n", k,
                is_base ? "baseline" : "threshold", is_base ? 0.0 : thr[k - 1], R[k].n,
                (now_ms() - w0) / 1000);
    }
    printf("%-9s %6s %8s %8s %8s %7s %7s %9s %9s %8s\n", "threshold", "ends", "specs", "hits",
           "saved50", "saved90", "first50", "wasted", "used", "extra%");
    for (int k = 1; k <= n_thr; k++) {
        const run_out_t *o = &R[k];
        double *sv = malloc((size_t)o->n * sizeof *sv), *fv = malloc((size_t)o->n * sizeof *fv);
        int n = 0;
        for (int i = 0; i < o->n; i++) {
            /* the same endpoint in the baseline runs (within two frames) */
            double lat = 0, first = 0;
            int nb = 0;
            for (int b = 0; b < n_runs; b += n_runs - 1) {
                for (int j = 0; j < R[b].n; j++) {
                    if (llabs(R[b].ev[j].at_ms - o->ev[i].at_ms) <= 2 * FRAME_MS) {
                        lat += R[b].ev[j].latency_ms;
                        first += R[b].ev[j].first_ms;
                        nb++;
                        break;
                    }
                }
            }
            if (nb > 0) {
                sv[n] = lat / nb - o->ev[i].latency_ms;
                fv[n] = first / nb - o->ev[i].first_ms;
                n++;
            }
        }
        int64_t wasted = o->st.spec_tokens_wasted;
        double extra = o->reply_tokens > 0 ? 100.0 * (double)wasted / (double)o->reply_tokens : 0;
        double s50 = pct(sv, n, 0.5), s90 = pct(sv, n, 0.9), f50 = pct(fv, n, 0.5);
        printf("%-9.2f %6d %8lld %8lld %8.0f %7.0f %7.0f %9lld %9lld %8.1f\n", thr[k - 1], o->n,
               (long long)o->ep.starts, (long long)o->st.spec_hits, s50, s90, f50,
               (long long)wasted, (long long)o->reply_tokens, extra);
        free(sv);
        free(fv);
    }
    if (json != NULL) {
        for (int k = 0; k < n_runs; k++) {
            const run_out_t *o = &R[k];
            bool is_base = k == 0 || k == n_runs - 1;
            for (int i = 0; i < o->n; i++) {
                const event_t *e = &o->ev[i];
                fprintf(json,
                        "{\"run\": %d, \"threshold\": %.4g, \"at_ms\": %lld, \"kind\": \"%s\", "
                        "\"latency_ms\": %.2f, \"first_ms\": %.2f, \"start_ms\": %lld, "
                        "\"spec_ms\": %.2f, \"n_reply\": %d, \"hit\": %s}\n",
                        k, is_base ? -1.0 : thr[k - 1], (long long)e->at_ms,
                        e->kind == 'c' ? "commit" : "end", e->latency_ms, e->first_ms,
                        (long long)e->start_ms, e->spec_ms, e->n_reply, e->hit ? "true" : "false");
            }
            fprintf(json,
                    "{\"run\": %d, \"summary\": true, \"threshold\": %.4g, \"endpoints\": %d, "
                    "\"starts\": %lld, \"commits\": %lld, \"cancels_speech\": %lld, "
                    "\"cancels_stale\": %lld, \"spec_started\": %lld, \"spec_hits\": %lld, "
                    "\"spec_tokens_computed\": %lld, \"spec_tokens_kept\": %lld, "
                    "\"spec_tokens_wasted\": %lld, \"reply_tokens\": %lld, \"stale_mass\": %lld, "
                    "\"reply_max\": %d, \"step_ms\": %d, \"threads\": %d, \"asr\": \"%s\", "
                    "\"model\": \"%s\"}\n",
                    k, is_base ? -1.0 : thr[k - 1], o->n, (long long)o->ep.starts,
                    (long long)o->ep.commits, (long long)o->ep.cancels_speech,
                    (long long)o->ep.cancels_stale, (long long)o->st.spec_started,
                    (long long)o->st.spec_hits, (long long)o->st.spec_tokens_computed,
                    (long long)o->st.spec_tokens_kept, (long long)o->st.spec_tokens_wasted,
                    (long long)o->reply_tokens, (long long)o->stale_mass, reply_tokens, step_ms,
                    threads, asr_path, lm_path);
        }
        fclose(json);
    }
    if (trace != NULL) {
        fclose(trace);
    }
    return 0;
}
