/*
 * bench_sleep.c - sessions that sleep (issue 18 item 2; rill_scheduler.h "Sleeping sessions").
 *
 * Two parts, on one engine (the default model, KV cache types --cache-type-k / --cache-type-v,
 * default q8_0 both):
 *
 *   alive   --sessions distinct sessions (window --window, sinks 16, each with its own ingest
 *           log) each ingest their own --tokens tokens of text (session i reads the text from
 *           its own offset, after its own header line, so no two streams share a prefix) into a
 *           pool of --kv-cells cells (default: --awake windows plus the overflow the scheduler
 *           keeps for forks). The budget holds --awake windows; every creation past it puts the
 *           least recently used to sleep. Reports how many are alive and awake at the end, the
 *           sleep files' bytes, RSS, the time, and the time of one question on an old sleeper.
 *   wake    per context length n (--contexts) and tier: a session holding n tokens is put to
 *           sleep (rill_sched_session_sleep) and asked a question; its time to the first answer
 *           token (the wake included) is set against the question on the same session awake and
 *           against re-prefilling: the question with the n context tokens before it, asked on a
 *           fresh session (what a stateless engine does). The snapshot tier sleeps to a sleep
 *           file; the log tier (a disk budget of one byte) keeps only the ingest log, so its
 *           wake re-prefills from it. --reps runs each, the median reported.
 *
 * Goals (issue 18, this machine, default model): >= 2,000 sessions alive, >= 300 awake at 2,048
 * tokens with Q8_0 KV, a sleeping session's first answer in under 10 % of re-prefilling. The full
 * scale (docs/benchmarks.md gives the command) takes far longer than a CI job; a short run is
 *   bench_sleep --sessions 60 --awake 8 --contexts 256,1024,2048 --reps 2
 *
 * Usage: bench_sleep [--model PATH] [--text PATH] [--sessions N] [--tokens T] [--window W]
 *                    [--awake A] [--kv-cells C] [--cache-type-k T] [--cache-type-v T]
 *                    [--contexts n,n,...] [--reps R] [--threads T] [--tmp DIR] [--skip-alive]
 * Prints tables, then one JSON line per context and tier and one summary line.
 */
#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"

#define MAX_CTX  8
#define MAX_REPS 16

static const char *QUESTION = "\nQuestion: What is this passage about? Answer in a few words.\n"
                              "Answer:";

typedef struct opts {
    const char *model, *text, *tmp, *ctk, *ctv;
    int32_t contexts[MAX_CTX];
    int n_contexts, sessions, tokens, window, awake, reps, threads;
    int64_t kv_cells;
    bool skip_alive;
} opts_t;

typedef struct engine {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
} engine_t;

static int parse_type(const char *s, rill_dtype_t *out) {
    static const struct {
        const char *n;
        rill_dtype_t t;
    } k[] = { { "f32", RILL_DTYPE_F32 },
              { "f16", RILL_DTYPE_F16 },
              { "q8_0", RILL_DTYPE_Q8_0 },
              { "q4_0", RILL_DTYPE_Q4_0 } };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        if (strcmp(s, k[i].n) == 0) {
            *out = k[i].t;
            return 0;
        }
    }
    fprintf(stderr, "bench_sleep: cache type must be f32, f16, q8_0 or q4_0, got '%s'\n", s);
    return -1;
}

static int parse_args(int argc, char **argv, opts_t *o) {
    *o = (opts_t){ .model = "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                   .text = "../shared/testdata/bible/en-web.tsv",
                   .tmp = "/tmp",
                   .ctk = "q8_0",
                   .ctv = "q8_0",
                   .contexts = { 256, 512, 1024, 2048 },
                   .n_contexts = 4,
                   .sessions = 2000,
                   .tokens = 256,
                   .window = 2048,
                   .awake = 300,
                   .reps = 3,
                   .threads = 2 };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--skip-alive") == 0) {
            o->skip_alive = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (v == NULL) {
            return -1;
        }
        if (strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "--text") == 0) {
            o->text = v;
        } else if (strcmp(a, "--tmp") == 0) {
            o->tmp = v;
        } else if (strcmp(a, "--cache-type-k") == 0) {
            o->ctk = v;
        } else if (strcmp(a, "--cache-type-v") == 0) {
            o->ctv = v;
        } else if (strcmp(a, "--sessions") == 0) {
            o->sessions = atoi(v);
        } else if (strcmp(a, "--tokens") == 0) {
            o->tokens = atoi(v);
        } else if (strcmp(a, "--window") == 0) {
            o->window = atoi(v);
        } else if (strcmp(a, "--awake") == 0) {
            o->awake = atoi(v);
        } else if (strcmp(a, "--kv-cells") == 0) {
            o->kv_cells = atoll(v);
        } else if (strcmp(a, "--reps") == 0) {
            o->reps = atoi(v);
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = atoi(v);
        } else if (strcmp(a, "--contexts") == 0) {
            o->n_contexts = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save);
                 t != NULL && o->n_contexts < MAX_CTX; t = strtok_r(NULL, ",", &save)) {
                o->contexts[o->n_contexts++] = atoi(t);
            }
        } else {
            return -1;
        }
    }
    if (o->sessions < 1 || o->tokens < 1 || o->window < 16 || o->awake < 1 || o->reps < 1 ||
        o->reps > MAX_REPS || o->threads < 1 || o->n_contexts < 1) {
        return -1;
    }
    return 0;
}

static int open_engine(const opts_t *o, int64_t cells, engine_t *e) {
    memset(e, 0, sizeof *e);
    rill_dtype_t k, v;
    if (parse_type(o->ctk, &k) != 0 || parse_type(o->ctv, &v) != 0) {
        return -1;
    }
    if (rill_model_load(o->model, rill_model_default_params(), &e->model) != RILL_OK ||
        rill_tokenizer_new(rill_model_gguf(e->model), &e->tok) != RILL_OK) {
        fprintf(stderr, "bench_sleep: %s: %s\n", o->model, rill_last_error(RILL_OK));
        return -1;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = o->threads;
    bp.attn = RILL_ATTN_FLASH; /* what rilld runs; a quantized V cache needs it */
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.tokenizer = e->tok;
    pp.n_cells = cells;
    pp.kv_type = k;
    pp.kv_type_v = (int32_t)v;
    rill_err_t err = rill_backend_new(&bp, &e->be);
    err = err == RILL_OK ? rill_forward_new(e->model, e->be, NULL, &e->fw) : err;
    err = err == RILL_OK ? rill_session_pool_new(e->fw, &pp, &e->pool) : err;
    if (err != RILL_OK) {
        fprintf(stderr, "bench_sleep: engine: %s %s\n", rill_err_name(err), rill_last_error(err));
        return -1;
    }
    return 0;
}

static void close_engine(engine_t *e) {
    rill_session_pool_destroy(&e->pool);
    rill_forward_destroy(&e->fw);
    rill_backend_destroy(&e->be);
    rill_tokenizer_destroy(&e->tok);
    rill_model_destroy(&e->model);
}

/* The verse texts of a TSV (reference TAB text), one per line, up to about max_bytes. */
static char *read_verses(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    char *out = malloc(max_bytes + 8192);
    size_t n = 0;
    char line[8192];
    while (out != NULL && n < max_bytes && fgets(line, sizeof line, f) != NULL) {
        char *tab = strchr(line, '\t');
        if (tab == NULL) {
            continue;
        }
        size_t l = strcspn(tab + 1, "\r\n");
        memcpy(out + n, tab + 1, l);
        n += l;
        out[n++] = '\n';
    }
    fclose(f);
    *len = n;
    return out;
}

static int64_t rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    int64_t kb = -1;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "VmRSS:", 6) == 0) {
            kb = atoll(line + 6);
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    return kb;
}

/* ---- one question, waited for ---------------------------------------------------------------- */

typedef struct wait {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    rill_sched_answer_t a;
} wait_t;

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    wait_t *w = user;
    pthread_mutex_lock(&w->mu);
    w->a = *a;
    w->a.tokens = NULL;
    w->a.message = NULL;
    w->done = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Time to the first answer token of q on sid, in ms (negative: it failed). */
static double ask_ttft(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *q, int32_t n_q) {
    wait_t w = { .done = false };
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, NULL);
    rill_sched_ask_t a = {
        .question = q, .n_question = n_q, .n_max = 1, .on_done = on_done, .user = &w
    };
    rill_sched_rid_t rid;
    rill_err_t err = rill_sched_ask(sch, sid, &a, &rid);
    if (err == RILL_OK) {
        pthread_mutex_lock(&w.mu);
        while (!w.done) {
            pthread_cond_wait(&w.cv, &w.mu);
        }
        pthread_mutex_unlock(&w.mu);
        err = w.a.status;
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.cv);
    if (err != RILL_OK) {
        fprintf(stderr, "bench_sleep: ask: %s\n", rill_err_name(err));
        return -1;
    }
    return (double)w.a.ttft_ns / 1e6;
}

static double median(double *v, int n) {
    for (int i = 1; i < n; i++) { /* insertion sort: n <= MAX_REPS */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    }
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Removes the files of dir (not recursive) and dir. */
static void remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] != '.') {
            char p[4400];
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    rmdir(dir);
}

static rill_sched_sid_t new_session(rill_sched_t *sch, const char *dir, const char *name,
                                    int32_t window) {
    char logp[4200];
    snprintf(logp, sizeof logp, "%s/%s.log", dir, name);
    unlink(logp);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.session.n_sink = 16;
    sp.session.window = window;
    sp.log_path = logp;
    sp.fsync = RILL_SESSION_FSYNC_NEVER;
    rill_sched_sid_t sid = 0;
    rill_err_t err = rill_sched_session_create(sch, &sp, &sid);
    if (err != RILL_OK) {
        fprintf(stderr, "bench_sleep: create %s: %s %s\n", name, rill_err_name(err),
                rill_last_error(err));
        return 0;
    }
    return sid;
}

/* ---- alive ----------------------------------------------------------------------------------- */

static int run_alive(const opts_t *o, const int32_t *text, int64_t n_text) {
    int32_t P = RILL_KV_PAGE_SIZE;
    int64_t res = ((16 + P - 1) / P + (o->window + P - 1) / P) * (int64_t)P; /* one window */
    engine_t e;
    if (open_engine(o, o->kv_cells > 0 ? o->kv_cells : res, &e) != 0) {
        return 1;
    }
    /* the scheduler keeps max(an eighth of the pool, two steps of max_batch) for forks */
    int64_t need = res * o->awake, mb = rill_session_pool_max_batch(e.pool);
    int64_t cells = (need * 8 + 6) / 7 + P;
    cells = cells > need + 2 * mb + P ? cells : need + 2 * mb + P;
    if (o->kv_cells > 0) {
        cells = o->kv_cells;
    } else {
        rill_session_pool_params_t pp = rill_session_pool_default_params();
        pp.tokenizer = e.tok;
        pp.n_cells = cells;
        rill_dtype_t k = RILL_DTYPE_F16, v = RILL_DTYPE_F16;
        parse_type(o->ctk, &k);
        parse_type(o->ctv, &v);
        pp.kv_type = k;
        pp.kv_type_v = (int32_t)v;
        rill_session_pool_destroy(&e.pool);
        if (rill_session_pool_new(e.fw, &pp, &e.pool) != RILL_OK) {
            fprintf(stderr, "bench_sleep: a pool of %lld cells: %s\n", (long long)cells,
                    rill_last_error(RILL_OK));
            close_engine(&e);
            return 1;
        }
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/rill-bench-sleep-XXXXXX", o->tmp);
    if (mkdtemp(dir) == NULL) {
        perror("bench_sleep: mkdtemp");
        return 1;
    }
    rill_sched_params_t sp = rill_sched_default_params();
    sp.sleep_dir = dir;
    sp.max_sessions = o->sessions + 1;
    sp.max_delay_ns = 0; /* no questions wait meanwhile: ingest in steps of max_batch */
    rill_sched_t *sch = NULL;
    if (rill_sched_new(e.pool, &sp, &sch) != RILL_OK) {
        fprintf(stderr, "bench_sleep: scheduler: %s\n", rill_last_error(RILL_OK));
        return 1;
    }
    int64_t kv_bytes =
        (int64_t)rill_session_pool_n_pages(e.pool) * rill_session_pool_page_bytes(e.pool);
    fprintf(stderr,
            "alive: %d sessions of %d ingested tokens each, window %d (%lld cells reserved "
            "each), pool %lld cells (%.2f GiB of %s/%s KV)\n",
            o->sessions, o->tokens, o->window, (long long)res, (long long)cells,
            (double)kv_bytes / (1 << 30), o->ctk, o->ctv);
    int64_t t0 = rill_now_ns();
    rill_sched_sid_t first = 0;
    int32_t head[64];
    int created = 0;
    for (int i = 0; i < o->sessions; i++) {
        char name[32], line[64];
        snprintf(name, sizeof name, "s%d", i);
        rill_sched_sid_t sid = new_session(sch, dir, name, o->window);
        if (sid == 0) {
            break;
        }
        first = first != 0 ? first : sid;
        /* its own header, then the text from its own offset: distinct streams */
        int n_line = snprintf(line, sizeof line, "Stream %d of the bench.\n", i);
        int64_t nh = rill_tokenizer_encode(e.tok, line, (size_t)n_line, false, false, head, 64);
        int64_t off = ((int64_t)i * 7919) % (n_text - o->tokens);
        rill_err_t err = nh > 0 ? rill_sched_ingest(sch, sid, head, (int32_t)nh) : RILL_EINVAL;
        err = err == RILL_OK ? rill_sched_ingest(sch, sid, text + off, o->tokens) : err;
        if (err != RILL_OK) {
            fprintf(stderr, "bench_sleep: ingest %s: %s %s\n", name, rill_err_name(err),
                    rill_last_error(err));
            break;
        }
        created++;
        if ((i + 1) % 100 == 0) {
            rill_sched_stats_t st;
            rill_sched_stats(sch, &st);
            fprintf(stderr, "  %d alive, %d awake, %d asleep, %.1f s\n", st.n_sessions, st.awake,
                    st.asleep, (double)(rill_now_ns() - t0) / 1e9);
        }
    }
    rill_sched_wait_idle(sch, 3600LL * 1000000000);
    double wall = (double)(rill_now_ns() - t0) / 1e9;
    rill_sched_stats_t st;
    rill_sched_stats(sch, &st);
    int32_t q[128];
    int64_t nq = rill_tokenizer_encode(e.tok, QUESTION, strlen(QUESTION), false, false, q, 128);
    double old_ms = first != 0 && nq > 0 ? ask_ttft(sch, first, q, (int32_t)nq) : -1;
    int32_t budget = rill_session_pool_n_pages(e.pool) - st.overflow_pages;
    int32_t awake_cap = budget / (int32_t)(res / P);
    printf("\n| sessions alive | awake | asleep | awake windows the budget holds | sleep files "
           "| RSS | wall | first answer of the oldest sleeper |\n|---|---|---|---|---|---|---|"
           "---|\n");
    printf("| %d | %d | %d | %d of %d tokens | %.1f MiB | %.1f MiB | %.1f s | %.0f ms |\n",
           st.n_sessions, st.awake, st.asleep, awake_cap, o->window,
           (double)st.sleep_disk_bytes / (1 << 20), (double)rss_kib() / 1024, wall, old_ms);
    printf("{\"bench\": \"sleep_alive\", \"sessions\": %d, \"created\": %d, \"tokens_each\": %d, "
           "\"window\": %d, \"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\", \"kv_cells\": "
           "%lld, \"awake\": %d, \"asleep\": %d, \"awake_capacity\": %d, \"sleeps\": %lld, "
           "\"sleep_disk_bytes\": %lld, \"rss_kib\": %lld, \"wall_s\": %.1f, "
           "\"oldest_first_answer_ms\": %.1f}\n",
           st.n_sessions, created, o->tokens, o->window, o->ctk, o->ctv, (long long)cells, st.awake,
           st.asleep, awake_cap, (long long)st.sleeps, (long long)st.sleep_disk_bytes,
           (long long)rss_kib(), wall, old_ms);
    fflush(stdout);
    rill_sched_destroy(&sch);
    remove_dir(dir);
    close_engine(&e);
    return created == o->sessions ? 0 : 1;
}

/* ---- wake ------------------------------------------------------------------------------------ */

typedef struct wake_row {
    int32_t n;
    double awake_ms, wake_ms[2], reprefill_ms;
    int64_t file_bytes;
} wake_row_t;

/* One tier (0 snapshot, 1 log) for every context: fills rows[i].wake_ms[tier] (and the awake
 * and re-prefill times on the snapshot pass). */
static int run_wake_tier(const opts_t *o, engine_t *e, int tier, const int32_t *text,
                         int64_t n_text, const int32_t *q, int32_t nq, int32_t window,
                         wake_row_t *rows) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/rill-bench-wake-XXXXXX", o->tmp);
    if (mkdtemp(dir) == NULL) {
        perror("bench_sleep: mkdtemp");
        return 1;
    }
    rill_sched_params_t sp = rill_sched_default_params();
    sp.sleep_dir = dir;
    sp.sleep_disk_bytes = tier == 0 ? 0 : 1;
    sp.max_delay_ns = 0; /* one request at a time: steps of max_batch, the setup ingest too */
    rill_sched_t *sch = NULL;
    if (rill_sched_new(e->pool, &sp, &sch) != RILL_OK) {
        return 1;
    }
    int rc = 0;
    for (int c = 0; c < o->n_contexts && rc == 0; c++) {
        int32_t n = o->contexts[c];
        if (n + nq > n_text || n + nq + 16 > rill_session_pool_n_ctx(e->pool)) {
            fprintf(stderr, "bench_sleep: context %d too long\n", n);
            rc = 1;
            break;
        }
        rows[c].n = n;
        char name[32];
        snprintf(name, sizeof name, "w%d", n);
        rill_sched_sid_t sid = new_session(sch, dir, name, window);
        if (sid == 0 || rill_sched_ingest(sch, sid, text, n) != RILL_OK) {
            rc = 1;
            break;
        }
        int64_t t_in = rill_now_ns();
        rill_sched_wait_idle(sch, 3600LL * 1000000000);
        fprintf(stderr, "  context %d ingested in %.1f s\n", n,
                (double)(rill_now_ns() - t_in) / 1e9);
        double wk[MAX_REPS], aw[MAX_REPS], rp[MAX_REPS];
        for (int r = 0; r < o->reps && rc == 0; r++) {
            rill_err_t err = rill_sched_session_sleep(sch, sid);
            rill_sched_session_info_t info;
            rill_sched_session_info(sch, sid, &info);
            if (err != RILL_OK || !info.asleep || info.tier != tier) {
                fprintf(stderr, "bench_sleep: sleep: %s %s\n", rill_err_name(err),
                        rill_last_error(err));
                rc = 1;
                break;
            }
            rows[c].file_bytes = tier == 0 ? info.sleep_bytes : rows[c].file_bytes;
            wk[r] = ask_ttft(sch, sid, q, nq);
            if (tier == 0) {
                aw[r] = ask_ttft(sch, sid, q, nq); /* awake now */
                /* re-prefill: the context and the question on a fresh session */
                rill_sched_sid_t fresh = new_session(sch, dir, "fresh", window);
                int32_t *all = malloc((size_t)(n + nq) * sizeof *all);
                memcpy(all, text, (size_t)n * sizeof *all);
                memcpy(all + n, q, (size_t)nq * sizeof *all);
                rp[r] = fresh != 0 ? ask_ttft(sch, fresh, all, n + nq) : -1;
                free(all);
                rill_sched_session_close(sch, fresh);
                rc = aw[r] < 0 || rp[r] < 0 ? 1 : rc;
            }
            rc = wk[r] < 0 ? 1 : rc;
            fprintf(stderr, "  context %d, %s tier, rep %d: wake %.0f ms", n,
                    tier == 0 ? "snapshot" : "log", r + 1, wk[r]);
            if (tier == 0) {
                fprintf(stderr, ", awake %.0f ms, re-prefill %.0f ms", aw[r], rp[r]);
            }
            fprintf(stderr, "\n");
        }
        if (rc == 0) {
            rows[c].wake_ms[tier] = median(wk, o->reps);
            if (tier == 0) {
                rows[c].awake_ms = median(aw, o->reps);
                rows[c].reprefill_ms = median(rp, o->reps);
            }
        }
        rill_sched_session_close(sch, sid);
    }
    rill_sched_destroy(&sch);
    remove_dir(dir);
    return rc;
}

static int run_wake(const opts_t *o, const int32_t *text, int64_t n_text) {
    engine_t e;
    int32_t max_n = 0;
    for (int c = 0; c < o->n_contexts; c++) {
        max_n = o->contexts[c] > max_n ? o->contexts[c] : max_n;
    }
    /* windows past the longest context, so nothing is evicted; room for the session, a fresh
     * one and the questions' forks (the scheduler keeps an eighth of the pool for forks) */
    int32_t window = max_n + 256;
    if (open_engine(o, 4 * ((int64_t)window + 32), &e) != 0) {
        return 1;
    }
    int32_t q[128];
    int64_t nq = rill_tokenizer_encode(e.tok, QUESTION, strlen(QUESTION), false, false, q, 128);
    wake_row_t rows[MAX_CTX];
    memset(rows, 0, sizeof rows);
    int rc = nq > 0 ? 0 : 1;
    for (int tier = 0; tier < 2 && rc == 0; tier++) {
        rc = run_wake_tier(o, &e, tier, text, n_text, q, (int32_t)nq, window, rows);
    }
    if (rc == 0) {
        printf("\n| context | question awake | wake: snapshot | wake: log re-prefill | "
               "re-prefill | snapshot / re-prefill | log / re-prefill | sleep file |\n"
               "|---|---|---|---|---|---|---|---|\n");
        for (int c = 0; c < o->n_contexts; c++) {
            const wake_row_t *r = &rows[c];
            printf("| %d | %.0f ms | %.0f ms | %.0f ms | %.0f ms | %.1f %% | %.0f %% | %.2f MiB "
                   "|\n",
                   r->n, r->awake_ms, r->wake_ms[0], r->wake_ms[1], r->reprefill_ms,
                   100 * r->wake_ms[0] / r->reprefill_ms, 100 * r->wake_ms[1] / r->reprefill_ms,
                   (double)r->file_bytes / (1 << 20));
        }
        for (int c = 0; c < o->n_contexts; c++) {
            const wake_row_t *r = &rows[c];
            for (int tier = 0; tier < 2; tier++) {
                printf("{\"bench\": \"sleep_wake\", \"context\": %d, \"tier\": \"%s\", "
                       "\"cache_type_k\": \"%s\", \"cache_type_v\": \"%s\", \"reps\": %d, "
                       "\"first_answer_ms\": %.1f, \"awake_ms\": %.1f, \"reprefill_ms\": %.1f, "
                       "\"over_reprefill\": %.4f, \"sleep_file_bytes\": %lld}\n",
                       r->n, tier == 0 ? "snapshot" : "log", o->ctk, o->ctv, o->reps,
                       r->wake_ms[tier], r->awake_ms, r->reprefill_ms,
                       r->wake_ms[tier] / r->reprefill_ms,
                       tier == 0 ? (long long)r->file_bytes : 0LL);
            }
        }
    }
    close_engine(&e);
    return rc;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    opts_t o;
    if (parse_args(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: see the top of bench/bench_sleep.c\n");
        return 2;
    }
    /* text: enough for every session's offset and the longest context */
    size_t len = 0;
    char *raw = read_verses(o.text, 4u << 20, &len);
    if (raw == NULL) {
        fprintf(stderr, "bench_sleep: cannot read %s\n", o.text);
        return 1;
    }
    rill_model_t *m = NULL;
    rill_tokenizer_t *tok = NULL;
    if (rill_model_load(o.model, rill_model_default_params(), &m) != RILL_OK ||
        rill_tokenizer_new(rill_model_gguf(m), &tok) != RILL_OK) {
        fprintf(stderr, "bench_sleep: %s: %s\n", o.model, rill_last_error(RILL_OK));
        return 1;
    }
    int64_t cap = (int64_t)len; /* at most one token per byte */
    int32_t *text = malloc((size_t)cap * sizeof *text);
    int64_t n_text = rill_tokenizer_encode(tok, raw, len, false, false, text, cap);
    rill_tokenizer_destroy(&tok);
    rill_model_destroy(&m);
    free(raw);
    if (n_text < 4096) {
        fprintf(stderr, "bench_sleep: too little text in %s\n", o.text);
        return 1;
    }
    int rc = o.skip_alive ? 0 : run_alive(&o, text, n_text);
    rc = rc == 0 ? run_wake(&o, text, n_text) : rc;
    free(text);
    return rc;
}
