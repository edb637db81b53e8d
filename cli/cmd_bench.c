/*
 * cmd_bench.c - `rill bench model`: prompt-processing and text-generation throughput, measured
 * the way llama-bench measures them so the figures compare: pp = a batch of -p tokens evaluated
 * (chunks of the backend's batch size), tg = -n tokens decoded one at a time, both on top of
 * --depth tokens already in the cache (llama-bench's -d; 0 = an empty context): the depth is
 * evaluated once, untimed, and every run starts again from it. Token ids are drawn from a fixed
 * seed; each figure is the mean of --reps runs after one warm-up run. Prints a table and one
 * JSON line.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_rand.h"
#ifdef RILL_HAVE_BENCH_STREAM
#include "rill_bench_stream.h"
#endif

/* Seconds to run the pp (n_tok in one go) or tg (n_tok single steps) workload once, on top of
 * the first `depth` positions of the cache (they stay; what a run wrote after them is
 * overwritten by the next). */
static double run_once(local_t *l, const int32_t *ids, int32_t n_tok, bool tg, int32_t depth,
                       float *logits) {
    l->n_past = depth;
    uint64_t t0 = rill_now_ns();
    if (tg) {
        for (int32_t i = 0; i < n_tok; i++) {
            if (local_eval(l, ids + i, 1, false, logits) != 0) {
                return -1;
            }
        }
    } else if (local_eval(l, ids, n_tok, false, logits) != 0) {
        return -1;
    }
    return (double)(rill_now_ns() - t0) / 1e9;
}

/* Mean and standard deviation of tokens/s over reps runs. */
static int measure(local_t *l, const int32_t *ids, int32_t n_tok, bool tg, int32_t depth,
                   int64_t reps, float *logits, double *mean, double *sd) {
    if (n_tok == 0) {
        *mean = *sd = 0;
        return 0;
    }
    if (run_once(l, ids, n_tok, tg, depth, logits) < 0) {
        return 1;
    }
    double sum = 0, sum2 = 0;
    for (int64_t r = 0; r < reps; r++) {
        double s = run_once(l, ids, n_tok, tg, depth, logits);
        if (s < 0) {
            return 1;
        }
        double ts = n_tok / s;
        sum += ts;
        sum2 += ts * ts;
    }
    *mean = sum / (double)reps;
    double var = sum2 / (double)reps - *mean * *mean;
    *sd = var > 0 ? sqrt(var) : 0;
    return 0;
}

static int bench_model(int argc, char **argv) {
    local_opts_t lo = { NULL, 0,   0, "cpu", "f16", "exact", "-d plus the larger of -p and -n",
                        NULL, NULL };
    int64_t n_prompt = 512, n_gen = 128, depth = 0, reps = 3;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &lo.model_path, "GGUF model file (default: SmolLM2-135M)", 0,
          -1 },
        { "n-prompt", "-p", CLI_INT, &n_prompt, "prompt tokens for the pp test (0 = skip)", 0,
          1 << 20 },
        { "n-gen", "-n", CLI_INT, &n_gen, "generated tokens for the tg test (0 = skip)", 0,
          1 << 20 },
        { "depth", "-d", CLI_INT, &depth,
          "tokens already in the cache under each test, evaluated once untimed (llama-bench's "
          "-d)",
          0, 1 << 20 },
        { "threads", "-t", CLI_INT, &lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "reps", "-r", CLI_INT, &reps, "measured runs per test (after one warm-up)", 1, 1000 },
        { "backend", NULL, CLI_STRING, &lo.backend, "cpu (fast) or ref (plain-C oracle)", 0, -1 },
        { "kv-type", NULL, CLI_STRING, &lo.kv_type,
          "KV cache type of K and V: f16, f32, q8_0 or q4_0", 0, -1 },
        { "cache-type-k", NULL, CLI_STRING, &lo.cache_type_k,
          "K cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 0, -1 },
        { "cache-type-v", NULL, CLI_STRING, &lo.cache_type_v,
          "V cache type: f32, f16, q8_0 or q4_0 (default: --kv-type's)", 0, -1 },
        { "attn", NULL, CLI_STRING, &lo.attn,
          "attention kernel: exact (llama.cpp's non-flash bits) or flash (one-pass online "
          "softmax, O(1) memory per query)",
          0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts,
                       "rill bench model [--model FILE] [-p 512] [-n 128] [-d 0] [--threads N]",
                       "Measures prompt processing (pp) and generation (tg) tokens/s like "
                       "llama-bench; prints a table and one JSON line.",
                       pos, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    int64_t need = depth + (n_prompt > n_gen ? n_prompt : n_gen);
    lo.n_ctx = need > 0 ? need : 1;
    local_t l;
    if (local_open(&l, &lo) != 0) {
        return 1;
    }
    int status = 1;
    int32_t *ids = rill_malloc(RILL_MEM_OTHER, (size_t)lo.n_ctx * sizeof *ids);
    float *logits = rill_malloc(RILL_MEM_OTHER, (size_t)l.n_vocab * sizeof *logits);
    if (ids == NULL || logits == NULL) {
        fprintf(stderr, "rill bench: out of memory\n");
        goto done;
    }
    uint64_t s = 42;
    for (int64_t i = 0; i < lo.n_ctx; i++) {
        ids[i] = (int32_t)(rill_rand_splitmix64(&s) % (uint64_t)l.n_vocab);
    }
    if (depth > 0 && local_eval(&l, ids, (int32_t)depth, false, NULL) != 0) {
        goto done;
    }
    const int32_t *top = ids + depth; /* the tested tokens follow the depth's */
    double pp = 0, pp_sd = 0, tg = 0, tg_sd = 0;
    if (measure(&l, top, (int32_t)n_prompt, false, (int32_t)depth, reps, logits, &pp, &pp_sd) !=
            0 ||
        measure(&l, top, (int32_t)n_gen, true, (int32_t)depth, reps, logits, &tg, &tg_sd) != 0) {
        goto done;
    }
    const char *path = lo.model_path != NULL ? lo.model_path : cli_default_model();
    const char *base = strrchr(path, '/') != NULL ? strrchr(path, '/') + 1 : path;
    int threads = rill_backend_n_threads(l.be);
    printf("| %-40s | %-10s | %7s | %14s | %16s |\n", "model", "backend", "threads", "test", "t/s");
    printf("|%s|%s|%s|%s|%s|\n", "------------------------------------------", "------------",
           "---------", "----------------", "------------------");
    for (int k = 0; k < 2; k++) {
        const int64_t n = k == 0 ? n_prompt : n_gen;
        if (n == 0) {
            continue;
        }
        char test[48];
        if (depth > 0) { /* llama-bench's names: pp512 @ d4096 */
            snprintf(test, sizeof test, "%s%lld @ d%lld", k == 0 ? "pp" : "tg", (long long)n,
                     (long long)depth);
        } else {
            snprintf(test, sizeof test, "%s%lld", k == 0 ? "pp" : "tg", (long long)n);
        }
        printf("| %-40s | %-10s | %7d | %14s | %8.2f ± %5.2f |\n", base, rill_backend_name(l.be),
               threads, test, k == 0 ? pp : tg, k == 0 ? pp_sd : tg_sd);
    }
    printf("{\"pp_tok_s\":%.3f,\"tg_tok_s\":%.3f,\"threads\":%d,\"model\":\"%s\","
           "\"backend\":\"%s\",\"attn\":\"%s\",\"n_prompt\":%lld,\"n_gen\":%lld,\"depth\":%lld,"
           "\"reps\":%lld}\n",
           pp, tg, threads, base, rill_backend_name(l.be), rill_attn_name(rill_backend_attn(l.be)),
           (long long)n_prompt, (long long)n_gen, (long long)depth, (long long)reps);
    status = 0;
done:
    rill_free(ids);
    rill_free(logits);
    local_close(&l);
    return status;
}

#define BENCH_USAGE                                                                             \
    "usage: rill bench model [options]    prompt and generation tokens/s (like llama-bench)\n"  \
    "       rill bench stream [options]   question latency on live streams: sessions against\n" \
    "                                     stateless re-prefill\n"                               \
    "(rill bench model --help, rill bench stream --help)\n"

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "model") == 0) {
        return bench_model(argc - 1, argv + 1);
    }
    if (argc >= 2 && strcmp(argv[1], "stream") == 0) {
#ifdef RILL_HAVE_BENCH_STREAM
        return rill_bench_stream_main(argc - 1, argv + 1); /* bench/stream/ */
#else
        fprintf(stderr, "rill bench stream: not built (needs the scheduler and ingest modules)\n");
        return 1;
#endif
    }
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(BENCH_USAGE, stdout);
        return 0;
    }
    fputs(BENCH_USAGE, stderr);
    return 2;
}
