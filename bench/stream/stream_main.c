/*
 * stream_main.c - the stream benchmark's entry point (rill_bench_stream.h): the option table
 * (cli.h's, so --help is printed from what is parsed), the model and backend (cli's local.h),
 * the KV pool both modes share, sized for K reserved sessions, the shared prompt, the forks of
 * the questions and standing refreshes in flight, and one spare reservation for the stateless
 * request; then build, export, run, report, free.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rill_alloc.h"
#include "rill_bench_stream.h"
#include "stream_internal.h"

static int setup_pool(bench_t *b) {
    int32_t P = RILL_KV_PAGE_SIZE;
    int32_t K = (int32_t)b->o.sessions;
    int32_t train = b->l.hp->n_ctx_train;
    if (b->o.standing_answer == 0) {
        /* room for six symbols and their prices on one line, where the model's context has it */
        b->o.standing_answer = b->o.answer > 96 ? b->o.answer : 96;
        if (b->o.context + b->max_q + b->o.standing_answer > train) {
            b->o.standing_answer = b->o.answer;
        }
    }
    int64_t need = b->o.context + b->max_q + rill__stream_max_answer(&b->o);
    if (need > train) {
        fprintf(stderr,
                "rill bench stream: --context %lld + a question (%d) + --answer %lld (standing "
                "%lld) = %lld tokens exceed the model's context %d\n",
                (long long)b->o.context, b->max_q, (long long)b->o.answer,
                (long long)b->o.standing_answer, (long long)need, train);
        return 2;
    }
    b->n_ctx = (int32_t)((need + P - 1) / P * P);
    if (b->n_ctx > train) {
        b->n_ctx = train;
    }
    b->res_pages = (b->n_ctx + P - 1) / P;
    /* Forks of K questions and K standing refreshes at once, each its question and answer
     * plus a copied last page; at least two full steps (the scheduler's minimum). */
    int32_t per_fork = (int32_t)((b->max_q + rill__stream_max_answer(&b->o) + P - 1) / P) + 2;
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
    pp.kv_type = b->l.k_type; /* --cache-type-k / -v (default F16) */
    pp.kv_type_v = (int32_t)b->l.v_type;
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
    rill_chat_destroy(&b->chat);
    for (int32_t s = 0; b->ss != NULL && s < (int32_t)b->o.sessions; s++) {
        rill_free(b->ss[s].chunks);
        rill_free(b->ss[s].tokens);
        rill_market_truth_destroy(&b->ss[s].truth);
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
    for (int32_t s = 0; b->st != NULL && s < (int32_t)b->o.sessions; s++) {
        rill_free(b->st[s].kept);
    }
    rill_free(b->st);
    rill_free(b->sanswers);
    rill_free(b->sinfo);
    local_close(&b->l);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
}

int rill_bench_stream_main(int argc, char **argv) {
    bench_t *b = rill_calloc(RILL_MEM_OTHER, 1, sizeof *b);
    if (b == NULL) {
        fprintf(stderr, "rill bench stream: out of memory\n");
        return 1;
    }
    opts_t *o = &b->o;
    /* an F16 cache (unless --cache-type-k/-v) and flash attention, as rilld runs sessions (--attn
     * exact: llama.cpp's non-flash bits); bench/stream_llama.py --flash-attn runs llama.cpp the
     * same way */
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
    const char *instruct = rill_market_instruct_name(RILL_MARKET_INSTRUCT_DEFAULT);
    const char *consistency = rill_sched_consistency_name(RILL_SCHED_ACKNOWLEDGED);
    {
        rill_sched_params_t d = rill_sched_default_params();
        o->standing_interval_ms = (double)d.standing_min_interval_ns / 1e6;
        o->standing_share = d.standing_max_share;
    }
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &o->lo.model_path, "GGUF model file (default: SmolLM2-135M)",
          0, -1 },
        { "threads", "-t", CLI_INT, &o->lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "cache-type-k", NULL, CLI_STRING, &o->lo.cache_type_k,
          "K cache type: f32, f16 (default), q8_0 or q4_0", 0, -1 },
        { "cache-type-v", NULL, CLI_STRING, &o->lo.cache_type_v,
          "V cache type: f32, f16 (default), q8_0 or q4_0", 0, -1 },
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
        { "answer", "-n", CLI_INT, &o->answer, "answer tokens per question, at most", 1, 4096 },
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
        { "standing-interval-ms", NULL, CLI_FLOAT, &o->standing_interval_ms,
          "least time between a standing query's refresh starts (rill_sched_params_t."
          "standing_min_interval_ns; 0 = none)",
          0, 1e6 },
        { "standing-share", NULL, CLI_FLOAT, &o->standing_share,
          "most share of engine time for standing refreshes (standing_max_share; 1 = no cap)",
          0.001, 1 },
        { "no-standing", NULL, CLI_FLAG, &o->no_standing,
          "no standing query (default: one per session)", 0, -1 },
        { "standing-answer", NULL, CLI_INT, &o->standing_answer,
          "the standing query's answer limit in tokens (0 = the larger of --answer and 96 - its "
          "answer lists every symbol - or --answer where that does not fit the model's context)",
          0, 4096 },
        { "instruct", NULL, CLI_STRING, &instruct,
          "where the answer rules go: none, system (the system prompt), question (after each "
          "question) or both (docs/market_prompts.md)",
          0, -1 },
        { "consistency", NULL, CLI_STRING, &consistency,
          "what a question waits for: acknowledged (every chunk before it), evaluated (answer on "
          "what the engine has evaluated) or both (half the questions each, side by side)",
          0, -1 },
        { "no-chat", NULL, CLI_FLAG, &o->no_chat,
          "the fixed \"Question: ... Answer:\" form even when the model has a chat template", 0,
          -1 },
        { "no-stop", NULL, CLI_FLAG, &o->no_stop,
          "decode every --answer token (default: an answer ends with its first line or an "
          "end-of-generation token)",
          0, -1 },
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
    if (!rill_market_instruct_from_name(instruct, &o->instruct)) {
        fprintf(stderr, "rill bench stream: --instruct: none, system, question or both\n");
        rill_free(b);
        return 2;
    }
    o->consistency_both = strcmp(consistency, "both") == 0;
    if (!o->consistency_both &&
        rill_sched_consistency_parse(consistency, &o->consistency) != RILL_OK) {
        fprintf(stderr, "rill bench stream: --consistency: acknowledged, evaluated or both\n");
        rill_free(b);
        return 2;
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
    rc = rill__stream_build(b);
    if (rc == 0) {
        rc = setup_pool(b);
    }
    if (rc == 0 && o->export_path != NULL) {
        rc = rill__stream_export(b, o->export_path);
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
        /* room for a standing answer per data version of each session: its chunks and one */
        int64_t n_sa = 0;
        for (int32_t s = 0; rc == 0 && s < K; s++) {
            n_sa += b->ss[s].n_chunks + 2;
        }
        if (rc == 0 && !o->no_standing) {
            b->sanswers = rill_calloc(RILL_MEM_OTHER, (size_t)(n_sa * o->standing_answer),
                                      sizeof *b->sanswers);
            rc = b->sanswers == NULL;
        }
        for (int32_t s = 0, *ids = b->sanswers; rc == 0 && s < K && !o->no_standing; s++) {
            standing_t *st = &b->st[s];
            st->cap_kept = b->ss[s].n_chunks + 2;
            st->kept = rill_calloc(RILL_MEM_OTHER, (size_t)st->cap_kept, sizeof *st->kept);
            if (st->kept == NULL) {
                rc = 1;
                break;
            }
            for (int64_t i = 0; i < st->cap_kept; i++, ids += o->standing_answer) {
                st->kept[i].tokens = ids;
            }
        }
        if (rc != 0) {
            fprintf(stderr, "rill bench stream: out of memory\n");
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
        rc = rill__stream_run_rill(b);
    }
    if (rc == 0 && o->stateless > 0) {
        rc = rill__stream_run_stateless(b);
    }
    if (rc == 0) {
        rc = rill__stream_report(b);
    }
    bench_free(b);
    rill_free(b);
    return rc;
}
