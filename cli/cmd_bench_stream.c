/*
 * cmd_bench_stream.c - `rill bench stream`: question latency on live streams, rill's persistent
 * sessions against answering statelessly (DESIGN.md section 8, "Sessions").
 *
 * The workload. K sessions each follow their own deterministic synthetic market
 * (rill_market_synth, seed --seed + session, 6 symbols, --rate ticks/s, short bursts), every tick
 * rendered as one text line ("AAPL 187.32 +0.05 200 B\n", rill_market_fmt) and tokenized here,
 * the way an ingest adapter hands tokens to the engine. Every --every ticks a session gets a
 * question from a fixed list of market questions (~32 tokens, a plain "Question: ... Answer:"
 * form after a shared system prompt) answered with exactly --answer tokens (greedy, no stop at
 * end of generation, so every mode decodes the same work). A session's stream ends when its
 * context would pass --context tokens (or at --duration seconds). The whole stream - text,
 * tokens, arrival times, question positions - is built before anything runs, so it is the same
 * on every run and machine, and --export writes it for bench/stream_llama.py to replay exactly.
 *
 * Modes, one after the other in the same process, on the same model, backend and KV pool:
 *   rill       the scheduler (scheduler/) with K persistent sessions: one feeder thread per
 *              session sleeps until each chunk's arrival time and ingests it
 *              (rill_sched_ingest_async: the feed does not wait for the acknowledgement), then
 *              asks the question due at that tick (rill_sched_ask, non-blocking) on the live
 *              session, which waits for that chunk: data and question reach the engine
 *              together, as from a feed and a user who do not wait for each other. One standing
 *              query per session unless --no-standing; its answer age is sampled at every
 *              question. Arrival = the chunk's scheduled time, so TTFT includes any wait of the
 *              feed behind the engine.
 *   stateless  (a) how a request-driven server answers: for sampled questions, a fresh session
 *              gets the whole context (prompt + chunks so far) and the question as one request,
 *              prefilled from nothing (a new scheduler on the now empty pool, without the step
 *              cap: 512-token steps, the engine otherwise idle - the best case for this mode).
 *              --stateless questions per context bucket, those with the largest contexts.
 * TTFT is measured the same way in both: from arrival (rill) or submission (stateless) to the
 * on_token callback of the first answer token; total to on_done. Per question the engine also
 * reports the backlog of its session it waited for and the time of its own steps
 * (rill_sched_answer_t), which split a TTFT into own work and waiting behind other work; the
 * host's steal time over the stream (/proc/stat) says how much a shared machine took away.
 *
 * Rejected: running (a) concurrently with the streams (it would steal the cores rill is being
 * measured on, and its own figures would depend on rill's load); sampling every question in (a)
 * (a 4096-token re-prefill takes seconds on two cores; a full sweep would take an hour).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_market.h"
#include "rill_scheduler.h"
#include "rill_session.h"

#define N_SYMBOLS   6
#define MAX_BUCKETS 8
#define MIN_BUCKET  256

static const char *const SYSTEM_PROMPT =
    "Live market data feed. Each line is one trade: symbol, price, change from the symbol's "
    "previous trade, size, and side (B buy, S sell).\n";

static const char *const QUESTIONS[] = {
    "\nQuestion: Which symbol moved most in the last minute, and by how much? Answer with the "
    "symbol and its change.\nAnswer:",
    "\nQuestion: Is AAPL above its open? Answer yes or no, then give the last AAPL price from the "
    "feed.\nAnswer:",
    "\nQuestion: What was the last MSFT price in the feed above, and was that trade a buy or a "
    "sell?\nAnswer:",
    "\nQuestion: Which symbol traded the largest size in the last minute? Answer with the symbol "
    "and the size.\nAnswer:",
    "\nQuestion: Is NVDA going up or down over its last ten trades? Answer up, down or flat, "
    "with its last price.\nAnswer:",
    "\nQuestion: How many of the last ten BTC-USD trades were sells? Answer with one number "
    "only.\nAnswer:",
};
#define N_QUESTIONS ((int32_t)(sizeof QUESTIONS / sizeof QUESTIONS[0]))

static const char *const STANDING =
    "\nQuestion: What is the latest price of each symbol in the feed above? Answer as a list of "
    "symbol and price pairs.\nAnswer:";

typedef struct opts {
    local_opts_t lo;
    int64_t sessions, every, answer, context, seed, stateless;
    double rate, duration, max_delay_ms;
    bool no_standing, no_prompt, export_only;
    const char *json_path, *export_path;
} opts_t;

typedef struct bench bench_t;

/* The host's CPU time from /proc/stat's "cpu" line, in clock ticks: all of it and what the
 * hypervisor gave to others (steal); ok false where the file cannot be read (not Linux). */
typedef struct cpu_time {
    bool ok;
    unsigned long long total, steal;
} cpu_time_t;

static cpu_time_t cpu_time(void) {
    cpu_time_t c = { false, 0, 0 };
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL) {
        return c;
    }
    unsigned long long v[8] = { 0 };
    if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4],
               &v[5], &v[6], &v[7]) == 8) {
        c.ok = true;
        for (int i = 0; i < 8; i++) {
            c.total += v[i];
        }
        c.steal = v[7];
    }
    fclose(f);
    return c;
}

/* One question's outcome in one mode. Written by the engine thread's callbacks (and by the
 * submitting thread before the submission); read by the main thread once `done` is set under
 * the bench's mutex. */
typedef struct result {
    bench_t *b;
    bool done;
    rill_err_t status;
    int64_t arrival_ns; /* rill_now_ns() the question is due */
    int64_t first_ns;   /* first answer token (0: none) */
    int64_t done_ns;
    int64_t engine_ttft_ns, engine_total_ns;
    int64_t backlog, ttft_compute_ns; /* rill_sched_answer_t's */
    int32_t engine_context;
    int64_t standing_age_ns; /* rill mode: now - the standing answer's finish; -1 none yet */
    int32_t n_answer;
    int32_t *answer; /* room for opts.answer ids */
} result_t;

typedef struct question {
    int32_t session, index, kind;
    int32_t after;   /* chunks of its session before it */
    int32_t context; /* tokens before it: prompt + those chunks */
    int32_t bucket;  /* index into bench.buckets */
    int64_t t_ns;    /* due, from the stream's start */
    bool sampled;    /* also asked statelessly */
    result_t rill, stateless;
} question_t;

typedef struct chunk {
    int64_t t_ns; /* arrival, from the stream's start */
    int64_t text_off;
    int32_t text_len;
    int32_t n_tok;
    int64_t tok_off; /* into its session's tokens */
    int64_t call_ns; /* when the feeder called rill_sched_ingest_async() */
    int64_t ack_ns;  /* from then to the acknowledgement (on_ack) */
    int64_t late_ns; /* how late the feeder made the call */
    rill_err_t err;  /* what on_ack said */
} chunk_t;

typedef struct sstream {
    chunk_t *chunks;
    int64_t n_chunks, cap_chunks;
    int32_t *tokens; /* chunk tokens, in order (the prompt excluded) */
    int64_t n_tokens, cap_tokens;
    int32_t q_first, n_q; /* its questions in bench.qs */
    int64_t ticks;
} sstream_t;

typedef struct standing {
    bench_t *b;
    int64_t done_ns; /* finish of the newest answer (0: none yet); under b->mu */
    int64_t answers;
} standing_t;

struct bench {
    opts_t o;
    local_t l;
    rill_session_pool_t *pool;
    int32_t n_ctx, n_pages, res_pages, overflow;
    char *text;
    int64_t text_len, text_cap;
    sstream_t *ss;
    question_t *qs;
    int64_t n_qs, cap_qs;
    int32_t *prompt, n_prompt;
    int32_t *qtok[N_QUESTIONS], n_qtok[N_QUESTIONS], max_q;
    int32_t *stok, n_stok;
    int32_t buckets[MAX_BUCKETS], n_buckets;
    int32_t *answers; /* 2 * n_qs * answer ids */
    /* run time */
    rill_sched_t *sch;
    rill_sched_sid_t *sid;
    standing_t *st;
    int64_t t0;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t n_done, feeders_done;
    rill_err_t feed_err;
    rill_sched_stats_t s0, s1;
    cpu_time_t c0, c1; /* the host's CPU time over the stream */
    int64_t stream_ns, drain_ns;
    rill_sched_standing_info_t *sinfo; /* per session after the run */
};

static bool grow(void **p, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    int64_t n = *cap > 0 ? *cap : 64;
    while (n < need) {
        n *= 2;
    }
    void *q = rill_realloc(RILL_MEM_OTHER, *p, (size_t)n * elem);
    if (q == NULL) {
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

/* Tokenizes text (no special handling unless add_special) into a new array. */
static int tokenize(bench_t *b, const char *text, size_t len, bool add_special, int32_t **out,
                    int32_t *n) {
    int64_t cnt = rill_tokenizer_encode(b->l.tok, text, len, add_special, false, NULL, 0);
    if (cnt < 0) {
        fprintf(stderr, "rill bench stream: tokenizer: %s\n", rill_strerror((rill_err_t)cnt));
        return 1;
    }
    *out = rill_malloc(RILL_MEM_OTHER, (size_t)(cnt > 0 ? cnt : 1) * sizeof **out);
    if (*out == NULL) {
        return 1;
    }
    *n = (int32_t)rill_tokenizer_encode(b->l.tok, text, len, add_special, false, *out, cnt);
    return *n == cnt ? 0 : 1;
}

/* ---- the stream ------------------------------------------------------------------------- */

static int bucket_of(const bench_t *b, int32_t context) {
    for (int i = 0; i < b->n_buckets; i++) {
        if (context <= b->buckets[i]) {
            return i;
        }
    }
    return b->n_buckets - 1;
}

/* One session's chunks and questions, until its context would pass --context or the time
 * --duration. */
static int build_session(bench_t *b, int32_t s, rill_tokenizer_work_t *work) {
    sstream_t *ss = &b->ss[s];
    rill_market_synth_params_t sp = rill_market_synth_default_params();
    sp.seed = (uint64_t)b->o.seed + (uint64_t)s;
    sp.n_symbols = N_SYMBOLS;
    sp.rate_hz = b->o.rate;
    sp.burst_prob = 0.02; /* short bursts every ~50 ticks, 4x the rate, 4x the volatility */
    sp.burst_ticks = 12;
    sp.burst_rate_mult = 4;
    sp.burst_vol_mult = 4;
    rill_market_synth_t *syn = NULL;
    rill_market_fmt_t *fmt = NULL;
    rill_err_t err = rill_market_synth_new(&sp, &syn);
    if (err == RILL_OK) {
        err = rill_market_fmt_new(NULL, &fmt);
    }
    for (int64_t i = 0; err == RILL_OK && i < rill_market_synth_n_symbols(syn); i++) {
        const char *name = NULL;
        int32_t dec = 0;
        err = rill_market_synth_symbol(syn, i, &name, &dec);
        if (err == RILL_OK) {
            err = rill_market_fmt_set_decimals(fmt, name, dec);
        }
    }
    int64_t dur_ns = b->o.duration > 0 ? (int64_t)(b->o.duration * 1e9) : INT64_MAX;
    int32_t context = b->n_prompt;
    ss->q_first = (int32_t)b->n_qs;
    while (err == RILL_OK) {
        rill_tick_t t;
        char line[RILL_MARKET_LINE_MAX];
        if ((err = rill_market_synth_next(syn, &t)) != RILL_OK) {
            break;
        }
        int64_t t_ns = t.ts_ns - sp.start_ts_ns;
        if (t_ns > dur_ns) {
            break;
        }
        int64_t len = rill_market_fmt_tick(fmt, &t, line, sizeof line);
        if (len < 0) {
            err = (rill_err_t)len;
            break;
        }
        if (!grow((void **)&ss->tokens, &ss->cap_tokens, ss->n_tokens + len + 8, sizeof(int32_t))) {
            err = RILL_ENOMEM;
            break;
        }
        int64_t n = rill_tokenizer_encode_with(b->l.tok, work, line, (size_t)len, false, false,
                                               ss->tokens + ss->n_tokens,
                                               ss->cap_tokens - ss->n_tokens, NULL);
        if (n < 0) {
            err = (rill_err_t)n;
            break;
        }
        if (context + n > b->o.context) {
            break;
        }
        if (!grow((void **)&ss->chunks, &ss->cap_chunks, ss->n_chunks + 1, sizeof(chunk_t)) ||
            !grow((void **)&b->text, &b->text_cap, b->text_len + len + 1, 1)) {
            err = RILL_ENOMEM;
            break;
        }
        chunk_t *c = &ss->chunks[ss->n_chunks++];
        memset(c, 0, sizeof *c);
        c->t_ns = t_ns;
        c->text_off = b->text_len;
        c->text_len = (int32_t)len;
        c->tok_off = ss->n_tokens;
        c->n_tok = (int32_t)n;
        memcpy(b->text + b->text_len, line, (size_t)len);
        b->text_len += len;
        ss->n_tokens += n;
        context += (int32_t)n;
        if (++ss->ticks % b->o.every == 0) {
            if (!grow((void **)&b->qs, &b->cap_qs, b->n_qs + 1, sizeof(question_t))) {
                err = RILL_ENOMEM;
                break;
            }
            question_t *q = &b->qs[b->n_qs++];
            memset(q, 0, sizeof *q);
            q->session = s;
            q->index = ss->n_q++;
            q->kind = (s + q->index) % N_QUESTIONS;
            q->after = (int32_t)ss->n_chunks;
            q->context = context;
            q->t_ns = t_ns;
        }
    }
    rill_market_fmt_destroy(&fmt);
    rill_market_synth_destroy(&syn);
    if (err != RILL_OK) {
        fprintf(stderr, "rill bench stream: building the stream of session %d: %s\n", s,
                rill_strerror(err));
        return 1;
    }
    return 0;
}

static int build_stream(bench_t *b) {
    const char *prompt = b->o.no_prompt ? "" : SYSTEM_PROMPT;
    if (tokenize(b, prompt, strlen(prompt), !b->o.no_prompt, &b->prompt, &b->n_prompt) != 0 ||
        tokenize(b, STANDING, strlen(STANDING), false, &b->stok, &b->n_stok) != 0) {
        return 1;
    }
    b->max_q = b->n_stok;
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        if (tokenize(b, QUESTIONS[k], strlen(QUESTIONS[k]), false, &b->qtok[k], &b->n_qtok[k]) !=
            0) {
            return 1;
        }
        b->max_q = b->n_qtok[k] > b->max_q ? b->n_qtok[k] : b->max_q;
    }
    b->ss = rill_calloc(RILL_MEM_OTHER, (size_t)b->o.sessions, sizeof *b->ss);
    rill_tokenizer_work_t *work = NULL;
    if (b->ss == NULL || rill_tokenizer_work_new(&work) != RILL_OK) {
        fprintf(stderr, "rill bench stream: out of memory\n");
        return 1;
    }
    for (int32_t e = MIN_BUCKET; b->n_buckets < MAX_BUCKETS; e *= 2) {
        b->buckets[b->n_buckets++] = e;
        if (e >= b->o.context) {
            break;
        }
    }
    int rc = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions && rc == 0; s++) {
        rc = build_session(b, s, work);
    }
    rill_tokenizer_work_destroy(&work);
    if (rc != 0) {
        return rc;
    }
    for (int64_t i = 0; i < b->n_qs; i++) {
        b->qs[i].bucket = bucket_of(b, b->qs[i].context);
    }
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        b->ss[s].n_q = 0;
    }
    for (int64_t i = 0; i < b->n_qs; i++) {
        b->ss[b->qs[i].session].n_q++;
    }
    if (b->n_qs == 0) {
        fprintf(stderr, "rill bench stream: the stream holds no question (raise --context or "
                        "--duration, or lower --every)\n");
        return 1;
    }
    return 0;
}

/* ---- export ------------------------------------------------------------------------------ */

static void json_str(FILE *f, const char *s, size_t len) {
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            fprintf(f, "\\%c", c);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c < 0x20) {
            fprintf(f, "\\u%04x", c);
        } else {
            fputc(c, f);
        }
    }
    fputc('"', f);
}

static void json_ids(FILE *f, const int32_t *ids, int64_t n) {
    fputc('[', f);
    for (int64_t i = 0; i < n; i++) {
        fprintf(f, i ? ",%d" : "%d", ids[i]);
    }
    fputc(']', f);
}

static const char *model_name(const bench_t *b) {
    const char *p = b->o.lo.model_path != NULL ? b->o.lo.model_path : cli_default_model();
    return p != NULL ? p : "?";
}

/* The stream as bench/stream_llama.py reads it (its docstring describes the format). */
static int write_export(const bench_t *b, const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "rill bench stream: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    fprintf(f, "{\"format\":\"rill-stream\",\"version\":1,\"model\":");
    json_str(f, model_name(b), strlen(model_name(b)));
    fprintf(f,
            ",\"seed\":%lld,\"sessions\":%lld,\"rate\":%g,\"every\":%lld,\"answer\":%lld,"
            "\"context\":%lld,\"n_ctx\":%d,\"threads\":%d,\"attn\":\"%s\",\"max_delay_ms\":%g,"
            "\"standing\":%s,\n",
            (long long)b->o.seed, (long long)b->o.sessions, b->o.rate, (long long)b->o.every,
            (long long)b->o.answer, (long long)b->o.context, b->n_ctx,
            rill_backend_n_threads(b->l.be), rill_attn_name(rill_backend_attn(b->l.be)),
            b->o.max_delay_ms, b->o.no_standing ? "false" : "true");
    fprintf(f, "\"prompt_text\":");
    json_str(f, b->o.no_prompt ? "" : SYSTEM_PROMPT, b->o.no_prompt ? 0 : strlen(SYSTEM_PROMPT));
    fprintf(f, ",\"prompt\":");
    json_ids(f, b->prompt, b->n_prompt);
    fprintf(f, ",\n\"standing_text\":");
    json_str(f, STANDING, strlen(STANDING));
    fprintf(f, ",\"standing_tokens\":");
    json_ids(f, b->stok, b->n_stok);
    fprintf(f, ",\n\"question_texts\":[");
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        fprintf(f, k ? "," : "");
        json_str(f, QUESTIONS[k], strlen(QUESTIONS[k]));
    }
    fprintf(f, "],\n\"question_tokens\":[");
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        fprintf(f, k ? "," : "");
        json_ids(f, b->qtok[k], b->n_qtok[k]);
    }
    fprintf(f, "],\n\"streams\":[");
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        const sstream_t *ss = &b->ss[s];
        fprintf(f, "%s\n{\"session\":%d,\"chunks\":[", s ? "," : "", s);
        for (int64_t c = 0; c < ss->n_chunks; c++) {
            const chunk_t *ch = &ss->chunks[c];
            fprintf(f, "%s\n{\"t_ns\":%lld,\"text\":", c ? "," : "", (long long)ch->t_ns);
            json_str(f, b->text + ch->text_off, (size_t)ch->text_len);
            fprintf(f, ",\"tokens\":");
            json_ids(f, ss->tokens + ch->tok_off, ch->n_tok);
            fputc('}', f);
        }
        fprintf(f, "],\n\"questions\":[");
        for (int32_t j = 0; j < ss->n_q; j++) {
            const question_t *q = &b->qs[ss->q_first + j];
            fprintf(f, "%s\n{\"q\":%d,\"kind\":%d,\"t_ns\":%lld,\"after\":%d,\"context\":%d}",
                    j ? "," : "", q->index, q->kind, (long long)q->t_ns, q->after, q->context);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "rill bench stream: cannot write %s: %s\n", path, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- running ----------------------------------------------------------------------------- */

static void sleep_until(int64_t t_ns) {
    struct timespec ts = { (time_t)(t_ns / 1000000000), (long)(t_ns % 1000000000) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

static int64_t now_ns(void) {
    return (int64_t)rill_now_ns();
}

static void on_token(void *user, rill_sched_rid_t rid, int32_t token) {
    (void)rid;
    result_t *r = user;
    if (r->n_answer == 0) {
        r->first_ns = now_ns();
    }
    if (r->n_answer < (int32_t)r->b->o.answer) {
        r->answer[r->n_answer] = token;
    }
    r->n_answer++;
}

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    result_t *r = user;
    bench_t *b = r->b;
    int64_t t = now_ns();
    pthread_mutex_lock(&b->mu);
    r->done_ns = t;
    r->status = a->status;
    r->engine_ttft_ns = a->ttft_ns;
    r->engine_total_ns = a->total_ns;
    r->backlog = a->backlog;
    r->ttft_compute_ns = a->ttft_compute_ns;
    r->engine_context = a->n_context;
    r->done = true;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

static void on_standing(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    standing_t *st = user;
    if (a->status != RILL_OK) {
        return; /* cancelled when the scheduler is destroyed */
    }
    bench_t *b = st->b;
    pthread_mutex_lock(&b->mu);
    st->done_ns = a->done_ns > 0 ? a->done_ns : now_ns();
    st->answers++;
    pthread_mutex_unlock(&b->mu);
}

static void finish(result_t *r, rill_err_t err) {
    bench_t *b = r->b;
    pthread_mutex_lock(&b->mu);
    r->status = err;
    r->done = true;
    b->n_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* on_ack of a chunk's rill_sched_ingest_async (engine thread; the feeder reads the chunk only
 * after the run). */
static void on_ack(void *user, rill_err_t status, const char *message) {
    (void)message;
    chunk_t *ch = user;
    ch->ack_ns = now_ns() - ch->call_ns;
    ch->err = status;
}

typedef struct feeder {
    bench_t *b;
    int32_t s;
    pthread_t th;
} feeder_t;

static void *feed(void *arg) {
    feeder_t *fd = arg;
    bench_t *b = fd->b;
    sstream_t *ss = &b->ss[fd->s];
    int32_t qi = 0;
    rill_err_t bad = RILL_OK;
    for (int64_t c = 0; c < ss->n_chunks; c++) {
        chunk_t *ch = &ss->chunks[c];
        int64_t due = b->t0 + ch->t_ns;
        sleep_until(due);
        ch->call_ns = now_ns();
        ch->late_ns = ch->call_ns - due;
        rill_err_t err = rill_sched_ingest_async(b->sch, b->sid[fd->s], ss->tokens + ch->tok_off,
                                                 ch->n_tok, on_ack, ch);
        if (err != RILL_OK && bad == RILL_OK) {
            bad = err;
        }
        for (; qi < ss->n_q && b->qs[ss->q_first + qi].after == c + 1; qi++) {
            question_t *q = &b->qs[ss->q_first + qi];
            result_t *r = &q->rill;
            r->arrival_ns = due;
            pthread_mutex_lock(&b->mu);
            int64_t sd = b->st[fd->s].done_ns;
            pthread_mutex_unlock(&b->mu);
            r->standing_age_ns = b->o.no_standing || sd == 0 ? -1 : now_ns() - sd;
            rill_sched_ask_t a = { .question = b->qtok[q->kind],
                                   .n_question = b->n_qtok[q->kind],
                                   .n_max = (int32_t)b->o.answer,
                                   .stop_at_eog = false,
                                   .on_token = on_token,
                                   .on_done = on_done,
                                   .user = r };
            rill_sched_rid_t rid = 0;
            err = rill_sched_ask(b->sch, b->sid[fd->s], &a, &rid);
            if (err != RILL_OK) {
                finish(r, err);
            }
        }
    }
    pthread_mutex_lock(&b->mu);
    if (bad != RILL_OK && b->feed_err == RILL_OK) {
        b->feed_err = bad;
    }
    b->feeders_done++;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* Waits until *counter (guarded by b->mu) reaches target, printing progress every 10 s;
 * false when timeout_ns passes first. */
static bool wait_count(bench_t *b, const int64_t *counter, int64_t target, int64_t timeout_ns,
                       const char *what) {
    int64_t start = now_ns(), last = start;
    pthread_mutex_lock(&b->mu);
    while (*counter < target) {
        int64_t t = now_ns();
        if (t - start > timeout_ns) {
            pthread_mutex_unlock(&b->mu);
            return false;
        }
        if (t - last >= 10000000000LL) {
            fprintf(stderr, "rill bench stream: %s: %.0f s, %lld of %lld done\n", what,
                    (double)(t - start) / 1e9, (long long)*counter, (long long)target);
            last = t;
        }
        struct timespec ts; /* the condition variable's clock is CLOCK_REALTIME */
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&b->cv, &b->mu, &ts);
    }
    pthread_mutex_unlock(&b->mu);
    return true;
}

static int sched_error(const char *what, rill_err_t err, const char *msg) {
    fprintf(stderr, "rill bench stream: %s: %s%s%s\n", what, rill_strerror(err),
            msg != NULL && msg[0] ? ": " : "", msg != NULL ? msg : "");
    return 1;
}

static int run_rill(bench_t *b) {
    int32_t K = (int32_t)b->o.sessions;
    rill_sched_params_t sp = rill_sched_default_params();
    sp.overflow_pages = b->overflow;
    sp.max_delay_ns = (int64_t)(b->o.max_delay_ms * 1e6);
    rill_err_t err = rill_sched_new(b->pool, &sp, &b->sch);
    if (err != RILL_OK) {
        return sched_error("scheduler", err, NULL);
    }
    char msg[256] = "";
    int rc = 1;
    feeder_t *fds = rill_calloc(RILL_MEM_OTHER, (size_t)K, sizeof *fds);
    if (fds == NULL) {
        goto done;
    }
    for (int32_t s = 0; s < K; s++) {
        rill_sched_session_params_t ps = rill_sched_session_default_params();
        ps.session.prompt = b->n_prompt > 0 ? b->prompt : NULL;
        ps.session.n_prompt = b->n_prompt;
        err = rill_sched_session_create(b->sch, &ps, &b->sid[s], msg, sizeof msg);
        if (err != RILL_OK) {
            sched_error("session", err, msg);
            goto done;
        }
        if (!b->o.no_standing) {
            b->st[s].b = b;
            rill_sched_ask_t a = { .question = b->stok,
                                   .n_question = b->n_stok,
                                   .n_max = (int32_t)b->o.answer,
                                   .on_done = on_standing,
                                   .user = &b->st[s] };
            rill_sched_rid_t qid = 0;
            if ((err = rill_sched_standing_register(b->sch, b->sid[s], &a, &qid)) != RILL_OK) {
                sched_error("standing query", err, NULL);
                goto done;
            }
        }
    }
    if (rill_sched_wait_idle(b->sch, 120000000000LL) != RILL_OK) {
        fprintf(stderr, "rill bench stream: the engine did not settle before the stream\n");
        goto done;
    }
    rill_sched_stats(b->sch, &b->s0);
    b->c0 = cpu_time();
    b->t0 = now_ns() + 100000000; /* the feeders start together */
    int32_t started = 0;
    for (; started < K; started++) {
        fds[started] = (feeder_t){ b, started, 0 };
        if (pthread_create(&fds[started].th, NULL, feed, &fds[started]) != 0) {
            fprintf(stderr, "rill bench stream: cannot start a feeder thread\n");
            break;
        }
    }
    /* Feeders always end: their calls do not wait for the engine. */
    wait_count(b, &b->feeders_done, started, INT64_MAX, "streaming (sessions done)");
    for (int32_t s = 0; s < started; s++) {
        pthread_join(fds[s].th, NULL);
    }
    int64_t t_end = now_ns();
    b->stream_ns = t_end - b->t0;
    rill_sched_stats(b->sch, &b->s1);
    b->c1 = cpu_time();
    if (started < K) {
        goto done;
    }
    if (b->feed_err != RILL_OK) {
        sched_error("ingest", b->feed_err, NULL);
        goto done;
    }
    if (!wait_count(b, &b->n_done, b->n_qs, 600000000000LL, "answering")) {
        fprintf(stderr, "rill bench stream: questions still open after 600 s\n");
        goto done;
    }
    if (rill_sched_wait_idle(b->sch, 600000000000LL) != RILL_OK) {
        fprintf(stderr, "rill bench stream: the engine did not go idle after the stream\n");
        goto done;
    }
    b->drain_ns = now_ns() - t_end;
    for (int32_t s = 0; s < K; s++) { /* every chunk acknowledged (on_ack has run: idle) */
        for (int64_t c = 0; c < b->ss[s].n_chunks; c++) {
            if (b->ss[s].chunks[c].err != RILL_OK) {
                sched_error("ingest", b->ss[s].chunks[c].err, NULL);
                goto done;
            }
        }
    }
    for (int32_t s = 0; s < K && !b->o.no_standing; s++) {
        if (rill_sched_standing_list(b->sch, b->sid[s], &b->sinfo[s], 1) < 1) {
            memset(&b->sinfo[s], 0, sizeof b->sinfo[s]);
        }
    }
    rc = 0;
done:
    rill_free(fds);
    rill_sched_destroy(&b->sch); /* ends the standing queries, closes every session */
    return rc;
}

/* (a): each sampled question as one request on a fresh session of an otherwise idle engine. */
static int run_stateless(bench_t *b) {
    int64_t n = 0;
    for (int32_t k = 0; k < b->n_buckets; k++) {
        /* the --stateless questions with the largest contexts of the bucket */
        for (int64_t pick = 0; pick < b->o.stateless; pick++) {
            question_t *best = NULL;
            for (int64_t i = 0; i < b->n_qs; i++) {
                question_t *q = &b->qs[i];
                if (q->bucket == k && !q->sampled && (best == NULL || q->context > best->context)) {
                    best = q;
                }
            }
            if (best == NULL) {
                break;
            }
            best->sampled = true;
            n++;
        }
    }
    if (n == 0) {
        return 0;
    }
    rill_sched_params_t sp = rill_sched_default_params();
    sp.max_delay_ns = 0;                           /* whole 512-token steps: nothing waits */
    sp.overflow_pages = b->n_pages - b->res_pages; /* the request's fork takes the rest */
    rill_err_t err = rill_sched_new(b->pool, &sp, &b->sch);
    if (err != RILL_OK) {
        return sched_error("scheduler (stateless)", err, NULL);
    }
    int32_t *req = rill_malloc(RILL_MEM_OTHER, (size_t)b->n_ctx * sizeof *req);
    int rc = req == NULL;
    char msg[256] = "";
    int64_t done_before = b->n_done;
    fprintf(stderr, "rill bench stream: stateless: %lld questions\n", (long long)n);
    for (int64_t i = 0; i < b->n_qs && rc == 0; i++) {
        question_t *q = &b->qs[i];
        if (!q->sampled) {
            continue;
        }
        const sstream_t *ss = &b->ss[q->session];
        int64_t data =
            q->after > 0 ? ss->chunks[q->after - 1].tok_off + ss->chunks[q->after - 1].n_tok : 0;
        int32_t len = 0;
        memcpy(req, b->prompt, (size_t)b->n_prompt * sizeof *req);
        len += b->n_prompt;
        memcpy(req + len, ss->tokens, (size_t)data * sizeof *req);
        len += (int32_t)data;
        memcpy(req + len, b->qtok[q->kind], (size_t)b->n_qtok[q->kind] * sizeof *req);
        len += b->n_qtok[q->kind];
        rill_sched_session_params_t ps = rill_sched_session_default_params();
        rill_sched_sid_t sid = 0;
        err = rill_sched_session_create(b->sch, &ps, &sid, msg, sizeof msg);
        if (err != RILL_OK) {
            rc = sched_error("stateless session", err, msg);
            break;
        }
        result_t *r = &q->stateless;
        rill_sched_ask_t a = { .question = req,
                               .n_question = len,
                               .n_max = (int32_t)b->o.answer,
                               .on_token = on_token,
                               .on_done = on_done,
                               .user = r };
        rill_sched_rid_t rid = 0;
        r->arrival_ns = now_ns();
        err = rill_sched_ask(b->sch, sid, &a, &rid);
        if (err != RILL_OK) {
            finish(r, err);
        }
        done_before++;
        if (!wait_count(b, &b->n_done, done_before, 600000000000LL, "stateless")) {
            fprintf(stderr, "rill bench stream: a stateless question took over 600 s\n");
            rc = 1;
        }
        rill_sched_session_close(b->sch, sid);
    }
    rill_free(req);
    rill_sched_destroy(&b->sch);
    return rc;
}

/* ---- results ----------------------------------------------------------------------------- */

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, c = *(const double *)y;
    return (a > c) - (a < c);
}

/* Nearest-rank percentile of v[0, n) (sorted in place); NAN when n == 0. */
static double pct(double *v, int64_t n, double p) {
    if (n == 0) {
        return NAN;
    }
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    int64_t k = (int64_t)ceil(p * (double)n);
    return v[k < 1 ? 0 : k > n ? n - 1 : k - 1];
}

static bool ok(const result_t *r) {
    return r->done && r->status == RILL_OK && r->first_ns > 0;
}

static double ttft_ms(const result_t *r) {
    return (double)(r->first_ns - r->arrival_ns) / 1e6;
}

static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) {
        fprintf(f, ",\"%s\":%.3f", key, v);
    } else {
        fprintf(f, ",\"%s\":null", key);
    }
}

static void write_question(FILE *f, const bench_t *b, const question_t *q, const char *mode,
                           const result_t *r) {
    fprintf(f,
            "{\"bench\":\"stream\",\"mode\":\"%s\",\"session\":%d,\"q\":%d,\"kind\":%d,"
            "\"t_s\":%.3f,\"context\":%d,\"bucket\":%d,\"n_question\":%d,\"status\":\"%s\"",
            mode, q->session, q->index, q->kind, (double)q->t_ns / 1e9, q->context,
            b->buckets[q->bucket], b->n_qtok[q->kind], rill_err_name(r->status));
    bool good = ok(r);
    json_num(f, "ttft_ms", good ? ttft_ms(r) : NAN);
    json_num(f, "total_ms", good ? (double)(r->done_ns - r->arrival_ns) / 1e6 : NAN);
    json_num(f, "engine_ttft_ms", good ? (double)r->engine_ttft_ns / 1e6 : NAN);
    json_num(f, "ttft_compute_ms", good ? (double)r->ttft_compute_ns / 1e6 : NAN);
    fprintf(f, ",\"backlog\":%lld,\"engine_context\":%d", (long long)r->backlog, r->engine_context);
    if (r == &q->rill) {
        json_num(f, "standing_age_ms",
                 r->standing_age_ns >= 0 ? (double)r->standing_age_ns / 1e6 : NAN);
    }
    int32_t n = r->n_answer < (int32_t)b->o.answer ? r->n_answer : (int32_t)b->o.answer;
    fprintf(f, ",\"n_answer\":%d,\"answer\":", r->n_answer);
    json_ids(f, r->answer, n);
    fprintf(f, "}\n");
}

typedef struct summary {
    int64_t n, failed;
    double p50, p90, p99;
    double bp50[MAX_BUCKETS], bp90[MAX_BUCKETS], bp99[MAX_BUCKETS];
    int64_t bn[MAX_BUCKETS];
    double ratio[MAX_BUCKETS]; /* stateless: median over its questions of stateless / rill */
} summary_t;

static void summarize(const bench_t *b, bool stateless, double *scratch, summary_t *sm) {
    memset(sm, 0, sizeof *sm);
    int64_t n = 0;
    for (int64_t i = 0; i < b->n_qs; i++) {
        const question_t *q = &b->qs[i];
        const result_t *r = stateless ? &q->stateless : &q->rill;
        if (stateless && !q->sampled) {
            continue;
        }
        if (ok(r)) {
            scratch[n++] = ttft_ms(r);
        } else {
            sm->failed++;
        }
    }
    sm->n = n;
    sm->p50 = pct(scratch, n, 0.50);
    sm->p90 = pct(scratch, n, 0.90);
    sm->p99 = pct(scratch, n, 0.99);
    for (int k = 0; k < b->n_buckets; k++) {
        int64_t m = 0;
        for (int64_t i = 0; i < b->n_qs; i++) {
            const question_t *q = &b->qs[i];
            const result_t *r = stateless ? &q->stateless : &q->rill;
            if (q->bucket == k && (!stateless || q->sampled) && ok(r)) {
                scratch[m++] = ttft_ms(r);
            }
        }
        sm->bn[k] = m;
        sm->bp50[k] = pct(scratch, m, 0.50);
        sm->bp90[k] = pct(scratch, m, 0.90);
        sm->bp99[k] = pct(scratch, m, 0.99);
        m = 0;
        for (int64_t i = 0; i < b->n_qs && stateless; i++) {
            const question_t *q = &b->qs[i];
            if (q->bucket == k && q->sampled && ok(&q->stateless) && ok(&q->rill)) {
                scratch[m++] = ttft_ms(&q->stateless) / ttft_ms(&q->rill);
            }
        }
        sm->ratio[k] = pct(scratch, m, 0.50);
    }
}

static void json_buckets(FILE *f, const bench_t *b, const summary_t *sm, bool ratio) {
    fprintf(f, ",\"buckets\":[");
    for (int k = 0; k < b->n_buckets; k++) {
        fprintf(f, "%s{\"le\":%d,\"n\":%lld", k ? "," : "", b->buckets[k], (long long)sm->bn[k]);
        json_num(f, "ttft_p50_ms", sm->bp50[k]);
        json_num(f, "ttft_p90_ms", sm->bp90[k]);
        json_num(f, "ttft_p99_ms", sm->bp99[k]);
        if (ratio) {
            json_num(f, "over_rill", sm->ratio[k]);
        }
        fputc('}', f);
    }
    fputc(']', f);
}

static void write_summary(FILE *f, const bench_t *b, const char *mode, const summary_t *sm,
                          const double *extra, int n_extra, const char *const *extra_keys) {
    fprintf(f,
            "{\"bench\":\"stream\",\"mode\":\"%s\",\"summary\":true,\"model\":\"%s\","
            "\"sessions\":%lld,\"rate\":%g,\"every\":%lld,\"answer\":%lld,\"context\":%lld,"
            "\"threads\":%d,\"backend\":\"%s\",\"attn\":\"%s\",\"seed\":%lld,\"kv\":\"f16\","
            "\"standing\":%s,\"max_delay_ms\":%g,\"questions\":%lld,\"failed\":%lld",
            mode, model_name(b), (long long)b->o.sessions, b->o.rate, (long long)b->o.every,
            (long long)b->o.answer, (long long)b->o.context, rill_backend_n_threads(b->l.be),
            rill_backend_name(b->l.be), rill_attn_name(rill_backend_attn(b->l.be)),
            (long long)b->o.seed, b->o.no_standing ? "false" : "true",
            strcmp(mode, "stateless") == 0 ? 0.0 : b->o.max_delay_ms, (long long)sm->n,
            (long long)sm->failed);
    json_num(f, "ttft_p50_ms", sm->p50);
    json_num(f, "ttft_p90_ms", sm->p90);
    json_num(f, "ttft_p99_ms", sm->p99);
    json_num(f, "p99_over_p50", sm->p99 / sm->p50);
    for (int i = 0; i < n_extra; i++) {
        json_num(f, extra_keys[i], extra[i]);
    }
    json_buckets(f, b, sm, strcmp(mode, "stateless") == 0);
    fprintf(f, "}\n");
}

static void fmt_ms(char *buf, size_t cap, double v) {
    if (isfinite(v)) {
        snprintf(buf, cap, "%.1f", v);
    } else {
        snprintf(buf, cap, "-");
    }
}

static int report(bench_t *b) {
    int64_t n_chunks = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        n_chunks += b->ss[s].n_chunks;
    }
    int64_t cap = n_chunks > b->n_qs ? n_chunks : b->n_qs;
    double *scratch = rill_malloc(RILL_MEM_OTHER, (size_t)(cap + 1) * sizeof *scratch);
    if (scratch == NULL) {
        return 1;
    }
    summary_t rs, ss;
    summarize(b, false, scratch, &rs);
    summarize(b, true, scratch, &ss);
    /* standing answer age at the questions, ingest acknowledgement, feed lateness */
    int64_t m = 0, mismatch = 0;
    for (int64_t i = 0; i < b->n_qs; i++) {
        const result_t *r = &b->qs[i].rill;
        if (r->standing_age_ns >= 0) {
            scratch[m++] = (double)r->standing_age_ns / 1e6;
        }
        mismatch += ok(r) && r->engine_context != b->qs[i].context;
    }
    double age50 = pct(scratch, m, 0.5), age99 = pct(scratch, m, 0.99);
    m = 0;
    double late_max = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        for (int64_t c = 0; c < b->ss[s].n_chunks; c++) {
            scratch[m++] = (double)b->ss[s].chunks[c].ack_ns / 1e6;
            double late = (double)b->ss[s].chunks[c].late_ns / 1e6;
            late_max = late > late_max ? late : late_max;
        }
    }
    double ack50 = pct(scratch, m, 0.5), ack99 = pct(scratch, m, 0.99);
    m = 0; /* TTFT from the submission (after the preceding chunk was acknowledged) */
    for (int64_t i = 0; i < b->n_qs; i++) {
        const result_t *r = &b->qs[i].rill;
        if (ok(r)) {
            scratch[m++] = (double)r->engine_ttft_ns / 1e6;
        }
    }
    double eng50 = pct(scratch, m, 0.5), eng99 = pct(scratch, m, 0.99);
    /* what a question's TTFT (from the ask call) was made of: the steps of its own work (its
     * question and the backlog of its session it waited for), the rest behind other work */
    double own[2], other[2], backlog[2];
    for (int k = 0; k < 3; k++) {
        m = 0;
        for (int64_t i = 0; i < b->n_qs; i++) {
            const result_t *r = &b->qs[i].rill;
            if (ok(r)) {
                scratch[m++] = k == 0   ? (double)r->ttft_compute_ns / 1e6
                               : k == 1 ? (double)(r->engine_ttft_ns - r->ttft_compute_ns) / 1e6
                                        : (double)r->backlog;
            }
        }
        double *o = k == 0 ? own : k == 1 ? other : backlog;
        o[0] = pct(scratch, m, 0.5);
        o[1] = pct(scratch, m, 0.99);
    }
    double steal = NAN; /* % of the host's CPU time taken by the hypervisor during the stream */
    if (b->c0.ok && b->c1.ok && b->c1.total > b->c0.total) {
        steal = 100.0 * (double)(b->c1.steal - b->c0.steal) / (double)(b->c1.total - b->c0.total);
    }
    double busy = (double)(b->s1.busy_ns - b->s0.busy_ns);
    double idle = (double)(b->s1.idle_ns - b->s0.idle_ns);
    double util = busy + idle > 0 ? busy / (busy + idle) : NAN;
    int64_t refreshes = 0, abandoned = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions && !b->o.no_standing; s++) {
        refreshes += b->sinfo[s].refreshes;
        abandoned += b->sinfo[s].abandoned;
    }
    int64_t tok[RILL_SCHED_N_CLASSES], tok_all = 0;
    for (int c = 0; c < RILL_SCHED_N_CLASSES; c++) {
        tok[c] = b->s1.tokens[c] - b->s0.tokens[c];
        tok_all += tok[c];
    }
    int64_t steps = b->s1.steps - b->s0.steps, preempted = b->s1.preempted - b->s0.preempted;
    int64_t filler = b->s1.question_step_filler - b->s0.question_step_filler;
    double step_ms = steps > 0 ? busy / 1e6 / (double)steps : NAN;
    double step_tok = steps > 0 ? (double)tok_all / (double)steps : NAN;

    printf("rill bench stream: %s, %lld sessions, %g ticks/s each, a question every %lld "
           "ticks (%lld in all), answers of %lld tokens, context up to %lld, %d threads, KV F16\n",
           model_name(b), (long long)b->o.sessions, b->o.rate, (long long)b->o.every,
           (long long)b->n_qs, (long long)b->o.answer, (long long)b->o.context,
           rill_backend_n_threads(b->l.be));
    printf("\n| context <= | questions | rill TTFT p50 ms | p90 | p99 | stateless (a) n | "
           "(a) TTFT p50 ms | (a) / rill |\n|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < b->n_buckets; k++) {
        char a[32], c[32], d[32], e[32], g[32];
        fmt_ms(a, sizeof a, rs.bp50[k]);
        fmt_ms(c, sizeof c, rs.bp90[k]);
        fmt_ms(d, sizeof d, rs.bp99[k]);
        fmt_ms(e, sizeof e, ss.bp50[k]);
        fmt_ms(g, sizeof g, ss.ratio[k]);
        printf("| %d | %lld | %s | %s | %s | %lld | %s | %s%s |\n", b->buckets[k],
               (long long)rs.bn[k], a, c, d, (long long)ss.bn[k], e, g,
               isfinite(ss.ratio[k]) ? "x" : "");
    }
    printf("\nrill: TTFT p50 %.1f ms, p90 %.1f, p99 %.1f (p99/p50 %.2f) over %lld questions "
           "(%lld failed); engine utilization %.1f%% over the %.1f s stream; tokens ingest %lld, "
           "prefill %lld, decode %lld, standing %lld; drain after the stream %.0f ms\n",
           rs.p50, rs.p90, rs.p99, rs.p99 / rs.p50, (long long)rs.n, (long long)rs.failed,
           100 * util, (double)b->stream_ns / 1e9, (long long)tok[RILL_SCHED_INGEST],
           (long long)tok[RILL_SCHED_PREFILL], (long long)tok[RILL_SCHED_DECODE],
           (long long)tok[RILL_SCHED_STANDING], (double)b->drain_ns / 1e6);
    printf("engine steps %lld: %.1f ms and %.1f tokens each on average; step cap at the end %d "
           "tokens (%.2f ms a token estimated); %lld steps of lower work preempted by a question; "
           "%lld ingest tokens in steps with question work\n",
           (long long)steps, step_ms, step_tok, b->s1.chunk_cap, b->s1.ns_per_token / 1e6,
           (long long)preempted, (long long)filler);
    printf("ingest acknowledgement (on_ack) p50 %.2f ms, p99 %.2f ms after the call; feeder at "
           "most %.1f ms late; TTFT from the ask call p50 %.1f ms, p99 %.1f ms\n",
           ack50, ack99, late_max, eng50, eng99);
    printf("TTFT from the ask call made of: its own steps (its question and the %.0f tokens "
           "(p50; p99 %.0f) of its session's backlog it waited for) p50 %.1f ms, p99 %.1f ms; "
           "behind other work p50 %.1f ms, p99 %.1f ms\n",
           backlog[0], backlog[1], own[0], own[1], other[0], other[1]);
    if (isfinite(steal)) {
        printf("host: %.1f%% of its CPU time was stolen by the hypervisor during the stream (a "
               "noisy machine: compare runs side by side)\n",
               steal);
    }
    if (!b->o.no_standing) {
        printf("standing queries: answer age at the questions p50 %.0f ms, p99 %.0f ms; %lld "
               "refreshes, %lld abandoned\n",
               age50, age99, (long long)refreshes, (long long)abandoned);
    }
    if (mismatch > 0) {
        printf("%lld questions were answered on more context than was acknowledged when they "
               "were asked (the engine was behind the feed)\n",
               (long long)mismatch);
    }

    int rc = 0;
    if (b->o.json_path != NULL) {
        FILE *f = fopen(b->o.json_path, "w");
        if (f == NULL) {
            fprintf(stderr, "rill bench stream: cannot write %s: %s\n", b->o.json_path,
                    strerror(errno));
            rill_free(scratch);
            return 1;
        }
        for (int64_t i = 0; i < b->n_qs; i++) {
            write_question(f, b, &b->qs[i], "rill", &b->qs[i].rill);
        }
        for (int64_t i = 0; i < b->n_qs; i++) {
            if (b->qs[i].sampled) {
                write_question(f, b, &b->qs[i], "stateless", &b->qs[i].stateless);
            }
        }
        static const char *const rk[] = { "utilization",
                                          "stream_s",
                                          "drain_ms",
                                          "standing_age_p50_ms",
                                          "standing_age_p99_ms",
                                          "standing_refreshes",
                                          "standing_abandoned",
                                          "ingest_ack_p50_ms",
                                          "ingest_ack_p99_ms",
                                          "feed_late_max_ms",
                                          "tokens_ingest",
                                          "tokens_prefill",
                                          "tokens_decode",
                                          "tokens_standing",
                                          "context_mismatch",
                                          "steps",
                                          "steps_preempted",
                                          "question_step_filler",
                                          "step_ms",
                                          "step_tokens",
                                          "chunk_cap_end",
                                          "engine_ttft_p50_ms",
                                          "engine_ttft_p99_ms",
                                          "ttft_own_p50_ms",
                                          "ttft_own_p99_ms",
                                          "ttft_other_p50_ms",
                                          "ttft_other_p99_ms",
                                          "backlog_p50",
                                          "backlog_p99",
                                          "host_steal_pct" };
        double rv[] = { util,
                        (double)b->stream_ns / 1e9,
                        (double)b->drain_ns / 1e6,
                        b->o.no_standing ? NAN : age50,
                        b->o.no_standing ? NAN : age99,
                        (double)refreshes,
                        (double)abandoned,
                        ack50,
                        ack99,
                        late_max,
                        (double)tok[RILL_SCHED_INGEST],
                        (double)tok[RILL_SCHED_PREFILL],
                        (double)tok[RILL_SCHED_DECODE],
                        (double)tok[RILL_SCHED_STANDING],
                        (double)mismatch,
                        (double)steps,
                        (double)preempted,
                        (double)filler,
                        step_ms,
                        step_tok,
                        (double)b->s1.chunk_cap,
                        eng50,
                        eng99,
                        own[0],
                        own[1],
                        other[0],
                        other[1],
                        backlog[0],
                        backlog[1],
                        steal };
        write_summary(f, b, "rill", &rs, rv, (int)(sizeof rv / sizeof rv[0]), rk);
        if (ss.n + ss.failed > 0) {
            write_summary(f, b, "stateless", &ss, NULL, 0, NULL);
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "rill bench stream: cannot write %s\n", b->o.json_path);
            rc = 1;
        }
    }
    /* STYLE.md rule 27: the machine-readable line on stdout too */
    printf("{\"bench\":\"stream\",\"sessions\":%lld,\"context\":%lld,\"questions\":%lld,"
           "\"failed\":%lld,\"rill_ttft_p50_ms\":%.3f,\"rill_ttft_p99_ms\":%.3f,"
           "\"utilization\":%.4f}\n",
           (long long)b->o.sessions, (long long)b->o.context, (long long)rs.n,
           (long long)(rs.failed + ss.failed), isfinite(rs.p50) ? rs.p50 : -1,
           isfinite(rs.p99) ? rs.p99 : -1, isfinite(util) ? util : -1);
    rill_free(scratch);
    return rc != 0 ? rc : (rs.failed + ss.failed > 0 ? 1 : 0);
}

/* ---- the command ------------------------------------------------------------------------- */

static int setup_pool(bench_t *b) {
    int32_t P = RILL_KV_PAGE_SIZE;
    int32_t K = (int32_t)b->o.sessions;
    int64_t need = b->o.context + b->max_q + b->o.answer;
    int32_t train = b->l.hp->n_ctx_train;
    if (need > train) {
        fprintf(stderr,
                "rill bench stream: --context %lld + a question (%d) + --answer %lld = %lld "
                "tokens exceed the model's context %d\n",
                (long long)b->o.context, b->max_q, (long long)b->o.answer, (long long)need, train);
        return 2;
    }
    b->n_ctx = (int32_t)((need + P - 1) / P * P);
    if (b->n_ctx > train) {
        b->n_ctx = train;
    }
    b->res_pages = (b->n_ctx + P - 1) / P;
    /* Forks of K questions and K standing refreshes at once, each its question and answer
     * plus a copied last page; at least two full steps (the scheduler's minimum). */
    int32_t per_fork = (int32_t)((b->max_q + b->o.answer + P - 1) / P) + 2;
    b->overflow = 2 * K * per_fork;
    if (b->overflow < 2 * (512 + P - 1) / P) {
        b->overflow = 2 * (512 + P - 1) / P;
    }
    /* K reservations, the shared prompt's template, the overflow, and one spare reservation so
     * that the stateless phase's request fits whole. */
    b->n_pages = (K + 1) * b->res_pages + (b->n_prompt + P - 1) / P + 1 + b->overflow;
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = (int64_t)b->n_pages * P;
    pp.page_size = P;
    pp.kv_type = RILL_DTYPE_F16;
    pp.n_ctx = b->n_ctx;
    pp.tokenizer = b->l.tok;
    rill_err_t err = rill_session_pool_new(b->l.fw, &pp, &b->pool);
    if (err != RILL_OK) {
        fprintf(stderr, "rill bench stream: KV pool of %d pages: %s\n", b->n_pages,
                rill_strerror(err));
        return 1;
    }
    b->n_pages = rill_session_pool_n_pages(b->pool);
    return 0;
}

static void bench_free(bench_t *b) {
    rill_session_pool_destroy(&b->pool);
    for (int32_t s = 0; b->ss != NULL && s < (int32_t)b->o.sessions; s++) {
        rill_free(b->ss[s].chunks);
        rill_free(b->ss[s].tokens);
    }
    rill_free(b->ss);
    rill_free(b->qs);
    rill_free(b->text);
    rill_free(b->prompt);
    rill_free(b->stok);
    for (int32_t k = 0; k < N_QUESTIONS; k++) {
        rill_free(b->qtok[k]);
    }
    rill_free(b->answers);
    rill_free(b->sid);
    rill_free(b->st);
    rill_free(b->sinfo);
    local_close(&b->l);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

int cmd_bench_stream(int argc, char **argv) {
    bench_t *b = rill_calloc(RILL_MEM_OTHER, 1, sizeof *b);
    if (b == NULL) {
        fprintf(stderr, "rill bench stream: out of memory\n");
        return 1;
    }
    opts_t *o = &b->o;
    /* an F16 cache and flash attention, as rilld runs sessions (--attn exact: llama.cpp's
     * non-flash bits); bench/stream_llama.py --flash-attn runs llama.cpp the same way */
    o->lo = (local_opts_t){ .threads = 2,
                            .n_ctx = RILL_KV_PAGE_SIZE,
                            .backend = "cpu",
                            .kv_type = "f16",
                            .attn = "flash" };
    o->sessions = 8;
    o->rate = 0.5;
    o->every = 8;
    o->answer = 16;
    o->context = 4096;
    o->seed = 1;
    o->stateless = 2;
    o->max_delay_ms = 50;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &o->lo.model_path, "GGUF model file (default: SmolLM2-135M)",
          0, -1 },
        { "threads", "-t", CLI_INT, &o->lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "attn", NULL, CLI_STRING, &o->lo.attn,
          "attention kernel: flash (rilld's default) or exact (llama.cpp's non-flash bits)", 0,
          -1 },
        { "sessions", "-k", CLI_INT, &o->sessions, "sessions, each with its own market stream", 1,
          256 },
        { "rate", "-r", CLI_FLOAT, &o->rate,
          "mean ticks per second per session (one text line each; bursts go 4x faster)", 0.001,
          10000 },
        { "every", "-q", CLI_INT, &o->every, "a question on a session every N of its ticks", 1,
          1 << 20 },
        { "answer", "-n", CLI_INT, &o->answer, "answer tokens per question (always all decoded)", 1,
          4096 },
        { "context", "-c", CLI_INT, &o->context,
          "a session's stream ends before its context passes N tokens", 64, 1 << 20 },
        { "duration", NULL, CLI_FLOAT, &o->duration,
          "also end the streams after S seconds (0 = only --context)", 0, 1e6 },
        { "seed", NULL, CLI_INT, &o->seed, "market seed (session i uses seed + i)", 0, 1e15 },
        { "stateless", NULL, CLI_INT, &o->stateless,
          "questions per context bucket re-asked statelessly, mode (a); 0 = skip (a)", 0, 1000 },
        { "max-delay-ms", NULL, CLI_FLOAT, &o->max_delay_ms,
          "scheduler step cap in ms of work (rill_sched_params_t.max_delay_ns; 0 = none)", 0,
          10000 },
        { "no-standing", NULL, CLI_FLAG, &o->no_standing,
          "no standing query (default: one per session)", 0, -1 },
        { "no-prompt", NULL, CLI_FLAG, &o->no_prompt,
          "no shared system prompt at the start of each session (default: one, ~35 tokens)", 0,
          -1 },
        { "json", NULL, CLI_STRING, &o->json_path,
          "write JSON lines: one per question and mode, then a summary per mode", 0, -1 },
        { "export", NULL, CLI_STRING, &o->export_path,
          "write the exact stream (JSON) for bench/stream_llama.py", 0, -1 },
        { "export-only", NULL, CLI_FLAG, &o->export_only,
          "build and --export the stream, run nothing", 0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts,
                       "rill bench stream [--sessions 8] [--rate 0.5] [--every 8] [--answer 16] "
                       "[--context 4096] [--json FILE] [--export FILE]",
                       "Question latency on live market streams: K persistent sessions on the "
                       "scheduler (rill) against\nre-prefilling the context for every question "
                       "(stateless, mode (a)), side by side. Each session\ningests its own "
                       "seeded synthetic market at --rate ticks/s (one text line a tick) and "
                       "gets a\n~32-token question every --every ticks; TTFT is measured from "
                       "the tick's arrival to the first\nanswer token. Prints TTFT p50/p90/p99 "
                       "per context bucket, engine utilization, standing-query\nanswer age, what "
                       "the TTFTs were made of (own work, the backlog waited for, other work) "
                       "and\nthe host's steal time; --export writes the stream for "
                       "bench/stream_llama.py (llama.cpp "
                       "modes (b), (c)).",
                       pos, 0, &n_pos);
    if (rc != 0) {
        rill_free(b);
        return rc == 1 ? 0 : 2;
    }
    if (o->export_only && o->export_path == NULL) {
        fprintf(stderr, "rill bench stream: --export-only needs --export FILE\n");
        rill_free(b);
        return 2;
    }
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (local_open(&b->l, &o->lo) != 0) {
        rill_free(b);
        return 1;
    }
    rc = build_stream(b);
    if (rc == 0) {
        rc = setup_pool(b);
    }
    if (rc == 0 && o->export_path != NULL) {
        rc = write_export(b, o->export_path);
    }
    if (rc == 0 && o->export_only) {
        int64_t nc = 0, nt = 0;
        for (int32_t s = 0; s < (int32_t)o->sessions; s++) {
            nc += b->ss[s].n_chunks;
            nt += b->ss[s].n_tokens;
        }
        printf("rill bench stream: wrote %s: %lld sessions, %lld chunks, %lld tokens, %lld "
               "questions\n",
               o->export_path, (long long)o->sessions, (long long)nc, (long long)nt,
               (long long)b->n_qs);
        bench_free(b);
        rill_free(b);
        return 0;
    }
    if (rc == 0) {
        int32_t K = (int32_t)o->sessions;
        b->sid = rill_calloc(RILL_MEM_OTHER, (size_t)K, sizeof *b->sid);
        b->st = rill_calloc(RILL_MEM_OTHER, (size_t)K, sizeof *b->st);
        b->sinfo = rill_calloc(RILL_MEM_OTHER, (size_t)K, sizeof *b->sinfo);
        b->answers =
            rill_calloc(RILL_MEM_OTHER, (size_t)(2 * b->n_qs * o->answer), sizeof *b->answers);
        if (b->sid == NULL || b->st == NULL || b->sinfo == NULL || b->answers == NULL) {
            fprintf(stderr, "rill bench stream: out of memory\n");
            rc = 1;
        }
    }
    if (rc == 0) {
        for (int64_t i = 0; i < b->n_qs; i++) {
            question_t *q = &b->qs[i];
            q->rill = (result_t){ .b = b, .answer = b->answers + (2 * i) * o->answer };
            q->stateless = (result_t){ .b = b, .answer = b->answers + (2 * i + 1) * o->answer };
        }
        fprintf(stderr,
                "rill bench stream: rill: %lld sessions, %lld questions, pool of %d "
                "pages (%d a session, %d overflow)\n",
                (long long)o->sessions, (long long)b->n_qs, b->n_pages, b->res_pages, b->overflow);
        rc = run_rill(b);
    }
    if (rc == 0 && o->stateless > 0) {
        rc = run_stateless(b);
    }
    if (rc == 0) {
        rc = report(b);
    }
    bench_free(b);
    rill_free(b);
    return rc;
}
