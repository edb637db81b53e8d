/*
 * bench_sessions.c - what sessions buy (issue 4, item 9; DESIGN.md section 8).
 *
 * One session accumulates a real text (the verses of shared/testdata/bible/en-web.tsv) on the
 * default model; at each context size n it measures, side by side and alternating:
 *
 *   fork          rill_session_fork() of the n-token session, and its rill_session_destroy()
 *                 (median of --forks runs): O(pages), no K/V copied
 *   TTFT session  a 32-token question through rill_session_query(): fork, prefill the question
 *                 against the cached context, pick the first token (greedy). Time from the call
 *                 to the first token's callback
 *   TTFT stateless the same question answered the stateless way: a fresh session prefills the
 *                 whole context plus the question, then picks the first token (same code path:
 *                 rill_session_query on an empty session with context + question)
 *   restore       rill_session_restore() of a snapshot of the n-token session (written just
 *                 before, so the file is in the page cache), against re-prefilling the same n
 *                 tokens into a fresh session
 *
 * Prediction of TTFT growth from FLOPs: the question's 32 tokens cost the same matmuls at every
 * n, and token i of the question attends to n + i + 1 keys, 4 * n_layer * n_head * head_dim
 * flops per key (QK^T and PV). predicted(n) = flops(n) / flops(n0) with n0 the smallest size,
 * flops = 32 * 2 * (matmul weights per token) + 2 * n_embd * n_vocab (one output row) +
 * attention. The table gives measured(n) / predicted(n): 1.0 means TTFT grows exactly as the
 * FLOPs do (attention as efficient per flop as the matmuls); the target is <= 1.2 at 4096.
 *
 * Memory per resident token: K/V bytes per token (all layers) from the pool's page size, and the
 * session's host bytes (token ids, page table, logits) from rill_mem_stats(RILL_MEM_SESSIONS).
 *
 * Every time is the median of its runs, taken from core's histogram of the runs in ns
 * (rill_hist.h): within 1/32 above the exact median (the mean of the two middle runs for an
 * even count); earlier figures in docs/benchmarks.md were exact medians of sorted samples.
 *
 * Usage: bench_sessions [--model PATH] [--text PATH] [--contexts 256,512,...] [--threads T]
 *                       [--reps R] [--forks N] [--kv f16|f32] [--tmp DIR]
 * Paths default to the repository layout, run from its root. Prints tables, then one JSON line
 * per context size and one summary line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_session.h"
#include "rill_tokenizer.h"

#define MAX_CTX   16
#define N_Q       32
#define MAX_REPS  16
#define MAX_FORKS 100000

static const char *QUESTION =
    "\nQuestion: In the passage above, who spoke to Moses from the burning bush, and what did he "
    "tell him to do? Answer in one sentence.\nAnswer:";

typedef struct opts {
    const char *model, *text, *tmp;
    int32_t contexts[MAX_CTX];
    int n_contexts, threads, reps, forks;
    rill_dtype_t kv;
} opts_t;

typedef struct row {
    int32_t n;
    double fork_us, destroy_us, ttft_ms, stateless_ms, restore_ms, reprefill_ms, snapshot_ms;
    double flops_q;
    int32_t first_tok_session, first_tok_stateless;
    int64_t snap_bytes;
} row_t;

/* Median of h's samples (nanoseconds) in units of `unit` (1e3: us, 1e6: ms): the middle rank,
 * or the mean of the two middle ranks of an even count, each as core's histogram reports a rank
 * (rill_hist_rank: within 1/32 above the sample, exact for the min and the max). */
static double median(const rill_hist_t *h, double unit) {
    uint64_t n = h->count;
    double m =
        n % 2 ? (double)rill_hist_rank(h, n / 2 + 1)
              : 0.5 * ((double)rill_hist_rank(h, n / 2) + (double)rill_hist_rank(h, n / 2 + 1));
    return m / unit;
}

static int check(rill_err_t err, const char *what) {
    if (err != RILL_OK) {
        fprintf(stderr, "bench_sessions: %s: %s\n", what, rill_strerror(err));
        return 1;
    }
    return 0;
}

/* The verse texts of a TSV (reference TAB text), one per line, until about max_bytes. */
static char *read_verses(const char *path, size_t max_bytes, size_t *len) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        return NULL;
    }
    char *out = malloc(max_bytes + 8192);
    size_t n = 0;
    char line[8192];
    while (n < max_bytes && fgets(line, sizeof line, f) != NULL) {
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

typedef struct first {
    uint64_t t;
    int32_t token;
} first_t;

static bool on_first(void *user, int32_t token) {
    first_t *f = user;
    f->t = rill_now_ns();
    f->token = token;
    return false;
}

/* Records the time to the first token of rill_session_query(s, q, n_q) in h (ns); *tok gets
 * the token. */
static int query_ttft(rill_session_t *s, const int32_t *q, int32_t n_q, rill_hist_t *h,
                      int32_t *tok) {
    first_t f = { 0, -1 };
    rill_session_gen_t g;
    memset(&g, 0, sizeof g);
    g.n_max = 1;
    g.on_token = on_first;
    g.user = &f;
    uint64_t t0 = rill_now_ns();
    rill_err_t err = rill_session_query(s, q, n_q, &g);
    if (err != RILL_OK || f.token < 0) {
        fprintf(stderr, "bench_sessions: query: %s (%s)\n", rill_strerror(err),
                rill_last_error(RILL_OK));
        return 1;
    }
    rill_hist_record(h, f.t - t0);
    *tok = f.token;
    return 0;
}

/* flops of the question's forward pass against a context of n tokens (see the top). */
static double question_flops(const rill_hparams_t *h, int32_t n) {
    double kv = (double)h->n_head_kv * h->head_dim;
    double per_tok =
        2.0 * h->n_layer *
        (2.0 * h->n_embd * h->n_embd + 2.0 * h->n_embd * kv + 3.0 * (double)h->n_embd * h->n_ff);
    double attn = 0;
    for (int i = 0; i < N_Q; i++) {
        attn += 4.0 * h->n_layer * h->n_head * h->head_dim * (double)(n + i + 1);
    }
    return N_Q * per_tok + 2.0 * h->n_embd * h->n_vocab + attn;
}

static int parse_args(int argc, char **argv, opts_t *o) {
    o->model = "models/SmolLM2-135M-Instruct.Q4_1.gguf";
    o->text = "../shared/testdata/bible/en-web.tsv";
    o->tmp = "/tmp";
    int32_t def[] = { 256, 512, 1024, 2048, 4096 };
    memcpy(o->contexts, def, sizeof def);
    o->n_contexts = 5;
    o->threads = 2;
    o->reps = 3;
    o->forks = 2000;
    o->kv = RILL_DTYPE_F16;
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
        } else if (strcmp(a, "--tmp") == 0) {
            o->tmp = v;
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = atoi(v);
        } else if (strcmp(a, "--reps") == 0) {
            o->reps = atoi(v);
        } else if (strcmp(a, "--forks") == 0) {
            o->forks = atoi(v);
        } else if (strcmp(a, "--kv") == 0) {
            o->kv = strcmp(v, "f32") == 0 ? RILL_DTYPE_F32 : RILL_DTYPE_F16;
        } else if (strcmp(a, "--contexts") == 0) {
            o->n_contexts = 0;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            for (char *save = NULL, *t = strtok_r(buf, ",", &save);
                 t != NULL && o->n_contexts < MAX_CTX; t = strtok_r(NULL, ",", &save)) {
                o->contexts[o->n_contexts++] = atoi(t);
            }
        } else {
            return 1;
        }
    }
    if (o->n_contexts < 1 || o->reps < 1 || o->reps > MAX_REPS || o->forks < 1 ||
        o->forks > MAX_FORKS) {
        return 1;
    }
    for (int i = 0; i < o->n_contexts; i++) {
        if (o->contexts[i] < 16 || (i > 0 && o->contexts[i] <= o->contexts[i - 1])) {
            return 1;
        }
    }
    return 0;
}

/* Measures one context size on session s (holding r->n tokens of ctx). */
static int measure(const opts_t *o, rill_session_pool_t *pool, rill_session_t *s,
                   const int32_t *ctx, const int32_t *q, int32_t *buf, row_t *r) {
    /* One program thread: the histograms (16 KiB each) live in static storage. */
    static rill_hist_t h_fork, h_destroy, h_ttft, h_stateless, h_restore, h_reprefill;
    rill_hist_init(&h_fork);
    rill_hist_init(&h_destroy);
    for (int i = 0; i < o->forks; i++) {
        rill_session_t *f = NULL;
        uint64_t t0 = rill_now_ns();
        if (check(rill_session_fork(s, &f), "fork")) {
            return 1;
        }
        uint64_t t1 = rill_now_ns();
        rill_session_destroy(&f);
        uint64_t t2 = rill_now_ns();
        rill_hist_record(&h_fork, t1 - t0);
        rill_hist_record(&h_destroy, t2 - t1);
    }
    r->fork_us = median(&h_fork, 1e3);
    r->destroy_us = median(&h_destroy, 1e3);

    char snap[1200];
    snprintf(snap, sizeof snap, "%s/bench_sessions.%ld.snap", o->tmp, (long)getpid());
    uint64_t t0 = rill_now_ns();
    if (check(rill_session_snapshot(s, snap), "snapshot")) {
        return 1;
    }
    r->snapshot_ms = (double)(rill_now_ns() - t0) * 1e-6;
    FILE *sf = fopen(snap, "rb");
    if (sf != NULL) {
        fseek(sf, 0, SEEK_END);
        r->snap_bytes = ftell(sf);
        fclose(sf);
    }

    /* The stateless prompt: context + question. */
    memcpy(buf, ctx, (size_t)r->n * sizeof *buf);
    memcpy(buf + r->n, q, N_Q * sizeof *buf);
    rill_hist_init(&h_ttft);
    rill_hist_init(&h_stateless);
    rill_hist_init(&h_restore);
    rill_hist_init(&h_reprefill);
    for (int rep = 0; rep < o->reps; rep++) {
        /* Alternate the compared variants so that machine noise hits both. */
        for (int k = 0; k < 3; k++) {
            if (query_ttft(s, q, N_Q, &h_ttft, &r->first_tok_session)) {
                return 1;
            }
        }
        rill_session_t *e = NULL;
        if (check(rill_session_new(pool, NULL, &e), "stateless session") ||
            query_ttft(e, buf, r->n + N_Q, &h_stateless, &r->first_tok_stateless)) {
            return 1;
        }
        rill_session_destroy(&e);

        rill_session_t *rs = NULL;
        t0 = rill_now_ns();
        if (rill_session_restore(pool, snap, NULL, RILL_SESSION_FSYNC_NEVER, &rs) != RILL_OK) {
            fprintf(stderr, "bench_sessions: restore: %s\n", rill_last_error(RILL_OK));
            return 1;
        }
        rill_hist_record(&h_restore, rill_now_ns() - t0);
        rill_session_destroy(&rs);

        t0 = rill_now_ns();
        if (check(rill_session_new(pool, NULL, &e), "re-prefill session") ||
            check(rill_session_append(e, ctx, r->n), "re-prefill")) {
            return 1;
        }
        const float *l = NULL;
        if (check(rill_session_logits(e, &l), "re-prefill logits")) {
            return 1;
        }
        rill_hist_record(&h_reprefill, rill_now_ns() - t0);
        rill_session_destroy(&e);
    }
    remove(snap);
    r->ttft_ms = median(&h_ttft, 1e6);
    r->stateless_ms = median(&h_stateless, 1e6);
    r->restore_ms = median(&h_restore, 1e6);
    r->reprefill_ms = median(&h_reprefill, 1e6);
    return 0;
}

int main(int argc, char **argv) {
    opts_t o;
    if (parse_args(argc, argv, &o)) {
        fprintf(stderr,
                "usage: %s [--model PATH] [--text PATH] [--contexts 256,512,...] "
                "[--threads T] [--reps R<=%d] [--forks N] [--kv f16|f32] [--tmp DIR]\n",
                argv[0], MAX_REPS);
        return 2;
    }
    rill_model_t *model = NULL;
    if (rill_model_load(o.model, rill_model_default_params(), &model) != RILL_OK) {
        fprintf(stderr, "bench_sessions: %s: %s\n", o.model, rill_last_error(RILL_OK));
        return 1;
    }
    const rill_hparams_t *h = rill_model_hparams(model);
    int32_t n_max = o.contexts[o.n_contexts - 1];
    if (n_max + N_Q + 1 > h->n_ctx_train) {
        fprintf(stderr, "bench_sessions: context %d + question %d exceeds the model's %d\n", n_max,
                N_Q, h->n_ctx_train);
        return 2;
    }
    rill_tokenizer_t *tk = NULL;
    if (rill_tokenizer_new(rill_model_gguf(model), &tk) != RILL_OK) {
        fprintf(stderr, "bench_sessions: tokenizer: %s\n", rill_last_error(RILL_OK));
        return 1;
    }
    size_t len = 0;
    char *text = read_verses(o.text, (size_t)n_max * 8 + 4096, &len);
    if (text == NULL) {
        fprintf(stderr, "bench_sessions: cannot read %s\n", o.text);
        return 1;
    }
    int64_t n_all = rill_tokenizer_encode(tk, text, len, false, false, NULL, 0);
    int32_t *ctx = malloc((size_t)(n_all > n_max ? n_all : n_max) * sizeof *ctx);
    int32_t q[64];
    int64_t nq = rill_tokenizer_encode(tk, QUESTION, strlen(QUESTION), false, false, q, 64);
    if (n_all < n_max || rill_tokenizer_encode(tk, text, len, false, false, ctx, n_all) != n_all ||
        nq < N_Q) {
        fprintf(stderr, "bench_sessions: not enough text or question tokens\n");
        return 1;
    }

    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = o.threads;
    rill_backend_t *be = NULL;
    rill_forward_t *fw = NULL;
    rill_forward_params_t fp = rill_forward_default_params();
    if (check(rill_backend_new(&bp, &be), "backend") ||
        check(rill_forward_new(model, be, &fp, &fw), "forward")) {
        return 1;
    }
    /* Cells: the session, a query fork's question pages, the stateless session (context +
     * question), a restored copy; every one rounded up to pages. */
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = 3 * ((int64_t)n_max + N_Q + 2 * RILL_KV_PAGE_SIZE);
    pp.kv_type = o.kv;
    pp.tokenizer = tk;
    rill_session_pool_t *pool = NULL;
    if (check(rill_session_pool_new(fw, &pp, &pool), "pool")) {
        return 1;
    }
    rill_mem_stats_t m0 = rill_mem_stats(RILL_MEM_SESSIONS);
    rill_session_t *s = NULL;
    if (check(rill_session_new(pool, NULL, &s), "session")) {
        return 1;
    }
    int64_t host_empty = rill_mem_stats(RILL_MEM_SESSIONS).bytes - m0.bytes;
    int32_t *buf = malloc(((size_t)n_max + N_Q) * sizeof *buf);
    row_t rows[MAX_CTX];
    memset(rows, 0, sizeof rows);
    double grow_s = 0;
    fprintf(stderr, "bench_sessions: %s, KV %s, %d threads\n", o.model,
            o.kv == RILL_DTYPE_F32 ? "f32" : "f16", o.threads);
    for (int c = 0; c < o.n_contexts; c++) {
        row_t *r = &rows[c];
        r->n = o.contexts[c];
        int32_t have = c == 0 ? 0 : o.contexts[c - 1];
        uint64_t t0 = rill_now_ns();
        if (check(rill_session_append(s, ctx + have, r->n - have), "append")) {
            return 1;
        }
        grow_s += (double)(rill_now_ns() - t0) * 1e-9;
        r->flops_q = question_flops(h, r->n);
        if (measure(&o, pool, s, ctx, q, buf, r)) {
            return 1;
        }
        fprintf(stderr, "  n %d: TTFT %.1f ms, stateless %.1f ms\n", r->n, r->ttft_ms,
                r->stateless_ms);
    }
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    int64_t host_full = rill_mem_stats(RILL_MEM_SESSIONS).bytes - m0.bytes;
    int64_t page_bytes = rill_session_pool_page_bytes(pool);
    double kv_per_tok = (double)page_bytes / rill_session_pool_page_size(pool);

    printf("bench_sessions: %s, KV %s, %d threads, question %d tokens, pages of %d\n\n", o.model,
           o.kv == RILL_DTYPE_F32 ? "f32" : "f16", o.threads, N_Q,
           rill_session_pool_page_size(pool));
    printf("| context | fork us | destroy us | TTFT session ms | TTFT stateless ms | "
           "stateless/session | growth measured | growth by FLOPs | measured/FLOPs | "
           "restore ms | re-prefill ms | re-prefill/restore | snapshot MB |\n");
    printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int c = 0; c < o.n_contexts; c++) {
        const row_t *r = &rows[c];
        double gm = r->ttft_ms / rows[0].ttft_ms, gf = r->flops_q / rows[0].flops_q;
        printf("| %d | %.2f | %.2f | %.1f | %.1f | %.1fx | %.2fx | %.2fx | %.2f | %.1f | %.1f | "
               "%.1fx | %.1f |\n",
               r->n, r->fork_us, r->destroy_us, r->ttft_ms, r->stateless_ms,
               r->stateless_ms / r->ttft_ms, gm, gf, gm / gf, r->restore_ms, r->reprefill_ms,
               r->reprefill_ms / r->restore_ms, (double)r->snap_bytes / 1e6);
    }
    printf("\nmemory: K/V %.0f bytes per resident token (%d layers, %d KV heads x %d, %s); "
           "session host memory %lld bytes empty, %lld bytes at %d tokens (%.1f bytes/token "
           "beyond the empty session); KV of the %d-token session %.1f MB\n",
           kv_per_tok, h->n_layer, h->n_head_kv, h->head_dim,
           o.kv == RILL_DTYPE_F32 ? "f32" : "f16", (long long)host_empty, (long long)host_full,
           st.n_resident, (double)(host_full - host_empty) / st.n_resident, st.n_resident,
           (double)st.bytes / 1e6);
    printf("first tokens (session / stateless) at each size:");
    for (int c = 0; c < o.n_contexts; c++) {
        printf(" %d/%d", rows[c].first_tok_session, rows[c].first_tok_stateless);
    }
    printf("\n");
    for (int c = 0; c < o.n_contexts; c++) {
        const row_t *r = &rows[c];
        printf("{\"bench\":\"sessions\",\"model\":\"%s\",\"kv\":\"%s\",\"threads\":%d,"
               "\"context\":%d,\"question\":%d,\"fork_us\":%.3f,\"destroy_us\":%.3f,"
               "\"ttft_session_ms\":%.3f,\"ttft_stateless_ms\":%.3f,\"stateless_over_session\":"
               "%.2f,\"growth_measured\":%.4f,\"growth_flops\":%.4f,\"restore_ms\":%.3f,"
               "\"reprefill_ms\":%.3f,\"reprefill_over_restore\":%.2f,\"snapshot_bytes\":%lld}\n",
               o.model, o.kv == RILL_DTYPE_F32 ? "f32" : "f16", o.threads, r->n, N_Q, r->fork_us,
               r->destroy_us, r->ttft_ms, r->stateless_ms, r->stateless_ms / r->ttft_ms,
               r->ttft_ms / rows[0].ttft_ms, r->flops_q / rows[0].flops_q, r->restore_ms,
               r->reprefill_ms, r->reprefill_ms / r->restore_ms, (long long)r->snap_bytes);
    }
    printf("{\"bench\":\"sessions_memory\",\"kv\":\"%s\",\"kv_bytes_per_token\":%.1f,"
           "\"host_bytes_empty\":%lld,\"host_bytes_per_token\":%.2f,\"grow_s\":%.2f}\n",
           o.kv == RILL_DTYPE_F32 ? "f32" : "f16", kv_per_tok, (long long)host_empty,
           (double)(host_full - host_empty) / st.n_resident, grow_s);
    free(buf);
    free(ctx);
    free(text);
    rill_session_destroy(&s);
    rill_session_pool_destroy(&pool);
    rill_forward_destroy(&fw);
    rill_backend_destroy(&be);
    rill_tokenizer_destroy(&tk);
    rill_model_destroy(&model);
    return 0;
}
