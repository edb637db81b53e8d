/*
 * stream_internal.h - the stream benchmark's shared types (the bench/stream/ files; private to the
 * rill_bench_stream library). `rill bench stream`: question latency on live streams, rill's
 * persistent sessions against answering statelessly (DESIGN.md section 8, "Sessions").
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
 * Consistency (issue 18 item 3): rill-mode questions wait for everything acknowledged before
 * them (--consistency acknowledged, the default: the chunk that came with the question is part
 * of its answer) or answer on what the engine has evaluated (evaluated: no wait for the backlog;
 * the answer says which data version it saw, and is scored against that). --consistency both
 * splits the same run's questions between the two: question j of session s waits as
 * ((s + j) / 6 + s) % 2 says (0 acknowledged; the kind is (s + j) % 6): neighbouring sessions
 * start on different sides and each flips every round of six questions, so every kind is asked
 * both ways, short runs are split too, and both halves share the stream, the load and the
 * machine.
 * TTFT is measured the same way in both: from arrival (rill) or submission (stateless) to the
 * on_token callback of the first answer token; total to on_done. Per question the engine also
 * reports the backlog of its session it waited for and the time of its own steps
 * (rill_sched_answer_t), which split a TTFT into own work and waiting behind other work; the
 * host's steal time over the stream (/proc/stat) says how much a shared machine took away.
 *
 * Rejected: running (a) concurrently with the streams (it would steal the cores rill is being
 * measured on, and its own figures would depend on rill's load); sampling every question in (a)
 * (a 4096-token re-prefill takes seconds on two cores; a full sweep would take an hour).
 *
 * Answers are checked (issue 23): each session's lines go into a market truth
 * (ingest/rill_market_truth.h) as chunk c at version c + 1; a question's answer, decoded to text,
 * is scored against the truth at the chunks it was computed on, and so is every standing
 * answer. Rill mode: the whole chunks within the tokens resident when it was answered
 * (rill_sched_answer_t.n_context): exact to the token, where the version (the newest input
 * wholly in its context, scheduler/requests.c) leaves out a chunk evaluated in part. Stateless:
 * the chunks of its request.
 *
 * Files, one job each: stream_main.c (options, the KV pool, the entry point), stream_build.c
 * (the stream, built before the run, and its export), stream_run.c (the feeders and the two
 * modes), stream_report.c (percentiles from core's histogram, the table, the JSON lines).
 */
#ifndef RILL_BENCH_STREAM_INTERNAL_H
#define RILL_BENCH_STREAM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "local.h"
#include "rill_chat.h"
#include "rill_market_prompt.h"
#include "rill_market_truth.h"
#include "rill_scheduler.h"
#include "rill_session.h"

#define N_SYMBOLS   6
#define MAX_BUCKETS 8
#define MIN_BUCKET  256
#define N_QUESTIONS 6 /* QUESTIONS[] in stream_build.c */

typedef struct opts {
    local_opts_t lo;
    int64_t sessions, every, answer, context, seed, stateless;
    double rate, duration, max_delay_ms;
    double standing_interval_ms, standing_share; /* the standing budget (rill_sched_params_t) */
    bool no_standing, no_prompt, export_only;
    bool no_chat, no_stop;                /* the fixed question form; decode every --answer token */
    rill_market_instruct_t instruct;      /* where the answer rules go (rill_market_prompt.h) */
    int64_t standing_answer;              /* the standing query's answer limit in tokens */
    rill_sched_consistency_t consistency; /* what rill-mode questions wait for (--consistency) */
    bool consistency_both;                /* --consistency both: half the questions each */
    const char *json_path, *export_path;
} opts_t;

typedef struct bench bench_t;

/* The longest answer in ids any request of the run may decode (questions and standing). */
static inline int64_t rill__stream_max_answer(const opts_t *o) {
    return o->standing_answer > o->answer ? o->standing_answer : o->answer;
}

/* The host's CPU time from /proc/stat's "cpu" line, in clock ticks: all of it and what the
 * hypervisor gave to others (steal); ok false where the file cannot be read (not Linux). */
typedef struct cpu_time {
    bool ok;
    unsigned long long total, steal;
} cpu_time_t;

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
    int64_t version; /* rill mode: the data version the answer saw (rill_sched_answer_t) */
    /* the check (stream_report.c): chunks of its session the answer saw, and the verdict */
    int64_t seen;
    rill_market_verdict_t verdict;
} result_t;

typedef struct question {
    int32_t session, index, kind;
    int32_t after;                        /* chunks of its session before it */
    int32_t context;                      /* tokens before it: prompt + those chunks */
    int32_t bucket;                       /* index into bench.buckets */
    int64_t t_ns;                         /* due, from the stream's start */
    bool sampled;                         /* also asked statelessly */
    rill_sched_consistency_t consistency; /* rill mode: what it waits for (see the top) */
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

/* A standing answer as the engine finished it: the data version it saw and its tokens. */
typedef struct sanswer {
    int64_t version;
    int32_t n_context; /* tokens resident when it was computed (rill_sched_answer_t) */
    int32_t n_tokens;
    int32_t *tokens; /* room for opts.answer ids */
} sanswer_t;

typedef struct sstream {
    chunk_t *chunks;
    int64_t n_chunks, cap_chunks;
    int32_t *tokens; /* chunk tokens, in order (the prompt excluded) */
    int64_t n_tokens, cap_tokens;
    int32_t q_first, n_q; /* its questions in bench.qs */
    int64_t ticks;
    rill_market_truth_t *truth; /* its lines, chunk c at version c + 1 (issue 23's check) */
} sstream_t;

typedef struct standing {
    bench_t *b;
    int64_t done_ns; /* finish of the newest answer (0: none yet); under b->mu */
    int64_t answers;
    sanswer_t *kept; /* the answers in order, up to cap_kept (one per version at most) */
    int64_t n_kept, cap_kept;
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
    rill_chat_t *chat; /* the model's chat template; NULL: the fixed form */
    char prompt_text[2048], stand_text[1024], q_text[N_QUESTIONS][1024]; /* as put to the model */
    int32_t *prompt, n_prompt;
    int32_t *qtok[N_QUESTIONS], n_qtok[N_QUESTIONS], max_q;
    int32_t *stok, n_stok;
    rill_market_question_t qq[N_QUESTIONS], sq; /* the questions' kinds (truth) */
    int32_t *sanswers;                          /* the standing answers' ids */
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

/* ---- across the files ---------------------------------------------------------------------- */

/* stream_build.c: builds every session's chunks and questions (the whole stream, before
 * anything runs) and the prompt, question and standing-query tokens. Prints a message and
 * returns non-zero on failure. */
int rill__stream_build(bench_t *b);

/* stream_build.c: writes the stream as bench/stream_llama.py reads it. Prints a message and
 * returns non-zero on failure. */
int rill__stream_export(const bench_t *b, const char *path);

/* stream_build.c: JSON writers shared with the report: a string of len bytes (escaped), an
 * array of token ids; and the model's path as given (or the default model's). */
void rill__stream_json_str(FILE *f, const char *s, size_t len);
void rill__stream_json_ids(FILE *f, const int32_t *ids, int64_t n);
const char *rill__stream_model_name(const bench_t *b);

/* stream_run.c: the two modes, one after the other on b->pool. Each prints a message and
 * returns non-zero on failure; results are in b->qs[*].rill / .stateless. */
int rill__stream_run_rill(bench_t *b);
int rill__stream_run_stateless(bench_t *b);

/* stream_report.c: the table and lines on stdout, --json's lines; returns the exit code
 * (1 when a question failed). */
int rill__stream_report(bench_t *b);

#endif /* RILL_BENCH_STREAM_INTERNAL_H */
