/*
 * bench_models.c - two models on one engine thread: what each multi-model step policy
 * (rill_sched_params_t.model_steps) costs the questions of one model and the stream of the other
 * (issue 15, part 3: "one forward pass per model per step, or interleaved steps; decide by
 * measurement").
 *
 * Model "stream" (a recognizer's stand-in) takes a text stream at --rate tokens per second into
 * a windowed session; model "ask" (the language model) holds --context tokens and is asked a
 * question (~30 tokens, --answer tokens of greedy answer) every --every ms. Both are the same
 * GGUF loaded as two forwards over one backend (one device, two models), so the two policies
 * differ only in how steps share the engine:
 *   every  RILL_SCHED_EVERY_MODEL: one pass per model per step under one delay bound
 *   top    RILL_SCHED_TOP_MODEL: only the pass of the model with the highest work
 * Rounds alternate the policies (every, top, top, every, ...) so drift of a shared machine falls
 * on both alike. Reported per policy: the question's time to first token and per-token decode
 * time (p50/p99), the stream's lag (tokens acknowledged but not evaluated, sampled every 50 ms;
 * p50/p99) and the tokens it evaluated per second.
 *
 * Usage: bench_models [--model PATH] [--threads T] [--seconds S] [--rounds R] [--rate TOK/S]
 *                     [--context N] [--every MS] [--answer N] [--text PATH]
 * Defaults: the default model, 2 threads, 20 s rounds, 2 rounds per policy, 150 tokens/s,
 * 1024 tokens of context, a question every 1500 ms, 16 answer tokens. Prints a table and one
 * JSON line per policy.
 */
#include <pthread.h>
#include <stdatomic.h>
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

#define MS 1000000LL

typedef struct opts {
    const char *model, *text;
    int threads, seconds, rounds, rate, context, every_ms, answer;
} opts_t;

/* What one policy measured over its rounds. */
typedef struct tally {
    rill_hist_t ttft, tok, lag;
    int64_t streamed, stream_ns, questions, failed;
} tally_t;

/* One question in flight: its token times, filled by the engine's callbacks. */
typedef struct ask_state {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    int64_t last_ns;
    tally_t *t;
    rill_sched_answer_t a;
} ask_state_t;

static void on_token(void *user, rill_sched_rid_t rid, int32_t token) {
    (void)rid;
    (void)token;
    ask_state_t *q = user;
    int64_t now = (int64_t)rill_now_ns();
    pthread_mutex_lock(&q->mu);
    if (q->last_ns > 0) {
        rill_hist_record(&q->t->tok, (uint64_t)(now - q->last_ns));
    }
    q->last_ns = now;
    pthread_mutex_unlock(&q->mu);
}

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    ask_state_t *q = user;
    pthread_mutex_lock(&q->mu);
    q->a = *a;
    q->done = true;
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&q->mu);
}

static int parse(int argc, char **argv, opts_t *o) {
    *o = (opts_t){ .model = "models/SmolLM2-135M-Instruct.Q4_1.gguf",
                   .text = "../shared/testdata/bible/en-web.tsv",
                   .threads = 2,
                   .seconds = 20,
                   .rounds = 2,
                   .rate = 150,
                   .context = 1024,
                   .every_ms = 1500,
                   .answer = 16 };
    for (int i = 1; i < argc; i += 2) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            return -1;
        }
        int *num = strcmp(a, "--threads") == 0   ? &o->threads
                   : strcmp(a, "--seconds") == 0 ? &o->seconds
                   : strcmp(a, "--rounds") == 0  ? &o->rounds
                   : strcmp(a, "--rate") == 0    ? &o->rate
                   : strcmp(a, "--context") == 0 ? &o->context
                   : strcmp(a, "--every") == 0   ? &o->every_ms
                   : strcmp(a, "--answer") == 0  ? &o->answer
                                                 : NULL;
        if (num != NULL) {
            *num = atoi(v);
            if (*num < 1) {
                return -1;
            }
        } else if (strcmp(a, "--model") == 0) {
            o->model = v;
        } else if (strcmp(a, "--text") == 0) {
            o->text = v;
        } else {
            return -1;
        }
    }
    return o->context >= 64 && o->answer <= 256 ? 0 : -1;
}

/* The text column of a verse file (BOOK c:v <TAB> text), joined with newlines: at most cap
 * bytes. Caller frees. */
static char *read_text(const char *path, size_t cap, size_t *len) {
    FILE *f = fopen(path, "r");
    char *buf = f != NULL ? malloc(cap + 1) : NULL;
    char line[4096];
    *len = 0;
    while (buf != NULL && fgets(line, sizeof line, f) != NULL) {
        const char *t = strchr(line, '\t');
        size_t n = t != NULL ? strlen(t + 1) : 0;
        if (n == 0 || *len + n > cap) {
            if (*len + n > cap) {
                break;
            }
            continue;
        }
        memcpy(buf + *len, t + 1, n);
        *len += n;
    }
    if (f != NULL) {
        fclose(f);
    }
    return buf;
}

typedef struct engine {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw[2];
    rill_session_pool_t *pool[2];
} engine_t;

static int open_engine(const opts_t *o, engine_t *e) {
    memset(e, 0, sizeof *e);
    if (rill_model_load(o->model, rill_model_default_params(), &e->model) != RILL_OK ||
        rill_tokenizer_new(rill_model_gguf(e->model), &e->tok) != RILL_OK) {
        fprintf(stderr, "bench_models: %s: %s\n", o->model, rill_last_error(RILL_OK));
        return -1;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = o->threads;
    bp.attn = RILL_ATTN_FLASH; /* what rilld runs */
    if (rill_backend_new(&bp, &e->be) != RILL_OK) {
        fprintf(stderr, "bench_models: no backend\n");
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        rill_session_pool_params_t pp = rill_session_pool_default_params();
        pp.tokenizer = e->tok;
        if (rill_forward_new(e->model, e->be, NULL, &e->fw[i]) != RILL_OK ||
            rill_session_pool_new(e->fw[i], &pp, &e->pool[i]) != RILL_OK) {
            fprintf(stderr, "bench_models: forward or pool %d failed\n", i);
            return -1;
        }
    }
    return 0;
}

static void close_engine(engine_t *e) {
    for (int i = 0; i < 2; i++) {
        rill_session_pool_destroy(&e->pool[i]);
        rill_forward_destroy(&e->fw[i]);
    }
    rill_backend_destroy(&e->be);
    rill_tokenizer_destroy(&e->tok);
    rill_model_destroy(&e->model);
}

/* One round of one policy: fresh scheduler, the context, then questions and the stream. */
static int round_of(const opts_t *o, engine_t *e, rill_sched_model_steps_t policy, const char *text,
                    const int32_t *stream, int64_t n_stream, tally_t *t) {
    rill_sched_model_t ms[2] = { { "ask", e->pool[0] }, { "stream", e->pool[1] } };
    rill_sched_params_t sp = rill_sched_default_params();
    sp.model_steps = policy;
    rill_sched_t *sch = NULL;
    if (rill_sched_new_models(ms, 2, &sp, &sch) != RILL_OK) {
        return -1;
    }
    rill_sched_session_params_t pa = rill_sched_session_default_params();
    pa.session.n_sink = 16;
    pa.session.window = 4096;
    rill_sched_session_params_t pb = pa;
    pb.model = 1;
    pb.session.window = 2048;
    rill_sched_sid_t sa = 0, sb = 0;
    int32_t *ctx = malloc((size_t)o->context * sizeof *ctx), q[64];
    /* RILL_EFULL: the first o->context tokens of 16 KiB of text were written */
    int64_t n_ctx = ctx != NULL
                        ? rill_tokenizer_encode(e->tok, text, 16384, false, false, ctx, o->context)
                        : -1;
    n_ctx = n_ctx == RILL_EFULL ? o->context : n_ctx;
    static const char *question = "\nQuestion: who is named in the last verse above, and what "
                                  "did he do? Answer briefly.\nAnswer:";
    int64_t n_q = rill_tokenizer_encode(e->tok, question, strlen(question), false, false, q, 64);
    if (n_ctx < o->context || n_q < 1 || rill_sched_session_create(sch, &pa, &sa) != RILL_OK ||
        rill_sched_session_create(sch, &pb, &sb) != RILL_OK ||
        rill_sched_ingest(sch, sa, ctx, o->context) != RILL_OK ||
        rill_sched_wait_idle(sch, 600 * 1000 * MS) != RILL_OK) {
        fprintf(stderr, "bench_models: set-up failed: %s\n", rill_last_error(RILL_OK));
        free(ctx);
        rill_sched_destroy(&sch);
        return -1;
    }
    free(ctx);
    ask_state_t as = { .t = t };
    pthread_mutex_init(&as.mu, NULL);
    pthread_cond_init(&as.cv, NULL);
    rill_sched_model_info_t mi0;
    rill_sched_model_info(sch, 1, &mi0);
    int64_t t0 = (int64_t)rill_now_ns(), end = t0 + (int64_t)o->seconds * 1000 * MS;
    int64_t next_q = t0 + (int64_t)o->every_ms * MS / 2, fed = 0;
    bool asking = false;
    while ((int64_t)rill_now_ns() < end) {
        int64_t now = (int64_t)rill_now_ns();
        /* the stream: rate tokens per second, queued without waiting for the engine */
        int64_t due = (now - t0) * o->rate / (1000 * MS);
        if (due > fed && due - fed <= n_stream) {
            int64_t from = fed % n_stream, n = due - fed;
            n = from + n > n_stream ? n_stream - from : n;
            rill_sched_ingest_async(sch, sb, stream + from, (int32_t)n, NULL, NULL);
            fed += n;
        }
        pthread_mutex_lock(&as.mu);
        bool done = as.done;
        pthread_mutex_unlock(&as.mu);
        if (asking && done) {
            asking = false;
            t->questions++;
            if (as.a.status == RILL_OK) {
                rill_hist_record(&t->ttft, (uint64_t)as.a.ttft_ns);
            } else {
                t->failed++;
            }
        }
        if (!asking && now >= next_q) {
            as.done = false;
            as.last_ns = 0;
            rill_sched_ask_t a = { .question = q,
                                   .n_question = (int32_t)n_q,
                                   .n_max = o->answer,
                                   .on_token = on_token,
                                   .on_done = on_done,
                                   .user = &as };
            rill_sched_rid_t rid;
            asking = rill_sched_ask(sch, sa, &a, &rid) == RILL_OK;
            next_q = now + (int64_t)o->every_ms * MS;
        }
        rill_sched_session_info_t si;
        if (rill_sched_session_info(sch, sb, &si) == RILL_OK) {
            rill_hist_record(&t->lag, (uint64_t)si.st.n_pending);
        }
        usleep(50 * 1000);
    }
    if (asking) {
        pthread_mutex_lock(&as.mu);
        while (!as.done) {
            pthread_cond_wait(&as.cv, &as.mu);
        }
        pthread_mutex_unlock(&as.mu);
    }
    rill_sched_model_info_t mi1;
    rill_sched_model_info(sch, 1, &mi1);
    t->streamed += mi1.tokens[RILL_SCHED_INGEST] - mi0.tokens[RILL_SCHED_INGEST];
    t->stream_ns += (int64_t)rill_now_ns() - t0;
    rill_sched_destroy(&sch);
    pthread_mutex_destroy(&as.mu);
    pthread_cond_destroy(&as.cv);
    return 0;
}

int main(int argc, char **argv) {
    opts_t o;
    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr,
                "usage: %s [--model PATH] [--threads T] [--seconds S] [--rounds R] "
                "[--rate TOK/S] [--context N>=64] [--every MS] [--answer N<=256] [--text PATH]\n",
                argv[0]);
        return 2;
    }
    size_t text_len = 0;
    char *text = read_text(o.text, 4u << 20, &text_len);
    if (text == NULL || text_len < 1u << 20) {
        fprintf(stderr, "bench_models: %s: cannot read 1 MiB of verses\n", o.text);
        free(text);
        return 1;
    }
    engine_t e;
    if (open_engine(&o, &e) != 0) {
        close_engine(&e);
        free(text);
        return 1;
    }
    /* the stream's tokens: the second half of the text (the context reads the first) */
    int64_t cap = (int64_t)(text_len / 2), n_stream = 0;
    int32_t *stream = malloc((size_t)cap * sizeof *stream);
    if (stream != NULL) {
        n_stream = rill_tokenizer_encode(e.tok, text + text_len / 2, text_len - text_len / 2, false,
                                         false, stream, cap);
    }
    if (n_stream < 1) {
        fprintf(stderr, "bench_models: could not tokenize the stream\n");
        free(stream);
        close_engine(&e);
        free(text);
        return 1;
    }
    static const char *names[2] = { "every", "top" };
    tally_t t[2];
    for (int i = 0; i < 2; i++) {
        memset(&t[i], 0, sizeof t[i]);
        rill_hist_init(&t[i].ttft);
        rill_hist_init(&t[i].tok);
        rill_hist_init(&t[i].lag);
    }
    for (int r = 0; r < 2 * o.rounds; r++) {
        int p = (r % 4 == 0 || r % 4 == 3) ? 0 : 1; /* every, top, top, every, ... */
        fprintf(stderr, "round %d: %s\n", r + 1, names[p]);
        if (round_of(&o, &e, p == 0 ? RILL_SCHED_EVERY_MODEL : RILL_SCHED_TOP_MODEL, text, stream,
                     n_stream, &t[p]) != 0) {
            free(stream);
            close_engine(&e);
            free(text);
            return 1;
        }
    }
    printf("| policy | questions | TTFT p50 ms | TTFT p99 ms | token p50 ms | token p99 ms | "
           "stream lag p50 | lag p99 | stream tok/s |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int p = 0; p < 2; p++) {
        const tally_t *x = &t[p];
        double tps = x->stream_ns > 0 ? (double)x->streamed * 1e9 / (double)x->stream_ns : 0;
        printf("| %s | %lld | %.1f | %.1f | %.1f | %.1f | %llu | %llu | %.1f |\n", names[p],
               (long long)x->questions, rill_hist_quantile(&x->ttft, 0.5) / 1e6,
               rill_hist_quantile(&x->ttft, 0.99) / 1e6, rill_hist_quantile(&x->tok, 0.5) / 1e6,
               rill_hist_quantile(&x->tok, 0.99) / 1e6,
               (unsigned long long)rill_hist_quantile(&x->lag, 0.5),
               (unsigned long long)rill_hist_quantile(&x->lag, 0.99), tps);
    }
    for (int p = 0; p < 2; p++) {
        const tally_t *x = &t[p];
        printf("{\"policy\": \"%s\", \"questions\": %lld, \"failed\": %lld, \"ttft_p50_ms\": %.2f, "
               "\"ttft_p99_ms\": %.2f, \"token_p50_ms\": %.2f, \"token_p99_ms\": %.2f, "
               "\"lag_p50\": %llu, \"lag_p99\": %llu, \"stream_tok_s\": %.1f, \"threads\": %d, "
               "\"rate\": %d, \"context\": %d}\n",
               names[p], (long long)x->questions, (long long)x->failed,
               rill_hist_quantile(&x->ttft, 0.5) / 1e6, rill_hist_quantile(&x->ttft, 0.99) / 1e6,
               rill_hist_quantile(&x->tok, 0.5) / 1e6, rill_hist_quantile(&x->tok, 0.99) / 1e6,
               (unsigned long long)rill_hist_quantile(&x->lag, 0.5),
               (unsigned long long)rill_hist_quantile(&x->lag, 0.99),
               x->stream_ns > 0 ? (double)x->streamed * 1e9 / (double)x->stream_ns : 0, o.threads,
               o.rate, o.context);
    }
    free(stream);
    close_engine(&e);
    free(text);
    return 0;
}
