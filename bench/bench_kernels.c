/*
 * bench_kernels.c - matmul throughput per weight type on the shapes of SmolLM2-135M.
 *
 * One "step" is every matmul a forward pass of n_tok tokens runs, in order: 30 layers x (q, k,
 * v, o, gate, up, down) plus the output projection to the vocabulary, with random weights of the
 * given type (n_embd 576, n_ff 1536, n_kv 192, vocab 49152). Every layer has its own copy of the
 * weights, so decode streams ~the model's size from memory per step as a real forward pass does
 * (a bench that reuses one layer's weights measures cache, not the kernel). tok/s is an upper
 * bound on what a forward pass can reach: no attention, norms or RoPE. K-quants need rows that are
 * a multiple of 256 values, which 576 is not (llama.cpp stores such tensors in another type): for
 * Q4_K/Q5_K/Q6_K the width 576 is replaced by 768, and the GFLOP/s column accounts for the larger
 * shapes.
 *
 * A second table times attention over the paged F16 KV pool with SmolLM2's attention shape
 * (9 query heads, 3 KV heads, head_dim 64, pages of 16): a causal prefill of n_tok tokens of one
 * sequence, and one decode token over 512, 4096 and 16384 cached positions, with each attention
 * kernel (exact: llama.cpp's two-pass arithmetic; flash: the one-pass online softmax) side by
 * side; ms per layer call and per 30-layer step.
 *
 * Output: tables on stdout, then one JSON object per row (prefix "JSON ").
 * Usage: bench_kernels [--types q4_1,q8_0,...] [--threads 1,2] [--tokens 1,64,512] [--ref]
 *                      [--simd auto,avx2,avx512] [--min-time SECONDS] [--no-attn] [--no-matmul]
 *   --simd times the matmuls with each listed kernel table (RILL_SIMD's names; default auto),
 *     one right after another for each batch size, so their ratio is measured in pairs;
 *   --cpu-time times the matmuls in process CPU time (for 1 thread on a loaded machine);
 *   --ref adds the reference backend (for n_tok <= 64 only: it is slow by design);
 *   --no-attn skips the attention table, --no-matmul the matmul table.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_core.h"
#include "rill_kernels.h"

#define N_LAYER  30
#define VOCAB    49152
#define N_SHAPES 8 /* q k v o gate up down output */

typedef struct shape {
    const char *name;
    int64_t n_in, n_out;
    int per_layer; /* 1: counted N_LAYER times; 0: once (output) */
} shape_t;

static rill_rand_t rng; /* seeded at the start of main */

/* A uniform value in [-1, 1) for random weights and activations. */
static float rnd(void) {
    return (float)(rill_rand_double(&rng) * 2.0 - 1.0);
}

static int parse_list(const char *s, char items[][16], int max) {
    int n = 0;
    while (*s != '\0' && n < max) {
        size_t len = strcspn(s, ",");
        if (len >= 16) {
            len = 15;
        }
        memcpy(items[n], s, len);
        items[n][len] = '\0';
        n++;
        s += strcspn(s, ",");
        if (*s == ',') {
            s++;
        }
    }
    return n;
}

static bool dtype_by_name(const char *name, rill_dtype_t *out) {
    static const rill_dtype_t all[] = { RILL_DTYPE_F32,  RILL_DTYPE_F16,  RILL_DTYPE_BF16,
                                        RILL_DTYPE_Q4_0, RILL_DTYPE_Q4_1, RILL_DTYPE_Q5_0,
                                        RILL_DTYPE_Q5_1, RILL_DTYPE_Q8_0, RILL_DTYPE_Q4_K,
                                        RILL_DTYPE_Q5_K, RILL_DTYPE_Q6_K };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(rill_dtype_name(all[i]), name) == 0) {
            *out = all[i];
            return true;
        }
    }
    return false;
}

/* Random weight of type t, quantized row by row. Caller frees. */
static void *make_weight(rill_dtype_t t, int64_t n_in, int64_t n_out) {
    const int64_t rb = rill_dtype_row_bytes(t, n_in);
    uint8_t *w = malloc((size_t)(rb * n_out));
    float *row = malloc((size_t)n_in * sizeof(float));
    if (w == NULL || row == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) {
            row[i] = rnd() * 0.05f;
        }
        (void)rill_quantize_row(t, row, w + r * rb, n_in);
    }
    free(row);
    return w;
}

/* One step: every layer's matmuls in order, then the output. */
static void run_step(rill_backend_t *b, rill_weight_t *w[][N_SHAPES], int ns, float *y,
                     const float *x, int64_t n_tok) {
    for (int l = 0; l < N_LAYER; l++) {
        for (int s = 0; s < ns; s++) {
            if (w[l][s] != NULL && rill_backend_matmul(b, y, x, w[l][s], n_tok) != RILL_OK) {
                fprintf(stderr, "matmul failed: %s\n", rill_last_error(RILL_OK));
                exit(1);
            }
        }
    }
}

/* --cpu-time: the clock is this process's CPU time instead of wall time. With one thread that is
 * the time the work itself took, whatever share of a core the scheduler gave it: on a loaded
 * machine it keeps ratios between kernels comparable where wall time does not (it still includes
 * cache and memory contention from the other processes). With 2+ threads it adds the workers'
 * waits, so it is meant for 1 thread. */
static bool use_cpu_time = false;

static uint64_t clock_ns(void) {
    if (!use_cpu_time) {
        return rill_now_ns();
    }
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Seconds per step: the best of several timed runs after a warm-up, each run repeating the step
 * until min_time / 3 has passed (best-of filters out other processes on a shared machine). */
static double time_step(rill_backend_t *b, rill_weight_t *w[][N_SHAPES], int ns, float *y,
                        const float *x, int64_t n_tok, double min_time) {
    run_step(b, w, ns, y, x, n_tok);
    double best = 1e30;
    for (int run = 0; run < (min_time > 0.0 ? 3 : 1); run++) {
        int64_t reps = 0;
        const uint64_t t0 = clock_ns();
        uint64_t t1 = t0;
        while (reps < 1 || (double)(t1 - t0) * 1e-9 < min_time / 3) {
            run_step(b, w, ns, y, x, n_tok);
            reps++;
            t1 = clock_ns();
        }
        const double sec = (double)(t1 - t0) * 1e-9 / (double)reps;
        best = sec < best ? sec : best;
    }
    return best;
}

/* Attention timing: returns ms per call (best of 3 runs of >= min_time / 3). */
static double time_attention(rill_backend_t *b, int32_t n_tok, int32_t n_ctx, double min_time) {
    const rill_kv_layout_t kv = { RILL_DTYPE_F16,           RILL_DTYPE_F16, 16, 3, 64,
                                  (n_ctx + n_tok + 15) / 16 };
    const int32_t n_head = 9;
    int32_t *pages = malloc((size_t)kv.n_pages * sizeof *pages);
    rill_batch_token_t *tok = malloc((size_t)n_tok * sizeof *tok);
    for (int32_t i = 0; i < kv.n_pages; i++) {
        pages[i] = kv.n_pages - 1 - i; /* a non-identity table */
    }
    for (int32_t t = 0; t < n_tok; t++) {
        tok[t] = (rill_batch_token_t){ 0, n_ctx + t, n_ctx + t, n_ctx + t + 1 };
    }
    const rill_page_table_t pt = { pages, kv.n_pages };
    const rill_batch_t batch = { n_tok, tok, 1, &pt };
    void *pool = NULL;
    float *q = NULL, *out = NULL;
    const size_t qbytes = (size_t)n_tok * n_head * 64 * sizeof(float);
    if (rill_backend_alloc(b, (size_t)rill_kv_pool_bytes(&kv), &pool) != RILL_OK ||
        rill_backend_alloc(b, qbytes, (void **)&q) != RILL_OK ||
        rill_backend_alloc(b, qbytes, (void **)&out) != RILL_OK ||
        rill_backend_set_batch(b, &batch) != RILL_OK) {
        fprintf(stderr, "attention setup failed\n");
        exit(1);
    }
    (void)rill_backend_zero(b, pool, (size_t)rill_kv_pool_bytes(&kv));
    float *qh = malloc(qbytes);
    for (size_t i = 0; i < qbytes / sizeof(float); i++) {
        qh[i] = rnd();
    }
    (void)rill_backend_copy_in(b, q, qh, qbytes);
    double best = 1e30;
    for (int run = 0; run < 3; run++) {
        int64_t reps = 0;
        const uint64_t t0 = rill_now_ns();
        uint64_t t1 = t0;
        while (reps < 1 || (double)(t1 - t0) * 1e-9 < min_time / 3) {
            (void)rill_backend_attention(b, &kv, pool, out, q, n_head);
            reps++;
            t1 = rill_now_ns();
        }
        const double ms = (double)(t1 - t0) * 1e-6 / (double)reps;
        best = ms < best ? ms : best;
    }
    rill_backend_free(b, pool);
    rill_backend_free(b, q);
    rill_backend_free(b, out);
    free(qh);
    free(pages);
    free(tok);
    return best;
}

int main(int argc, char **argv) {
    rill_rand_seed(&rng, 0x243F6A8885A308D3ull);
    char types[16][16], threads_s[8][16], tokens_s[8][16];
    int n_types = parse_list("q4_0,q4_1,q5_0,q5_1,q8_0,q4_k,q5_k,q6_k,f16,bf16,f32", types, 16);
    int n_threads_list = parse_list("1,2", threads_s, 8);
    int n_tokens = parse_list("1,64,512", tokens_s, 8);
    char simd_s[3][16];
    int n_simd = parse_list("auto", simd_s, 3);
    bool with_ref = false, with_attn = true, with_matmul = true;
    double min_time = 1.0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--types") == 0 && i + 1 < argc) {
            n_types = parse_list(argv[++i], types, 16);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            n_threads_list = parse_list(argv[++i], threads_s, 8);
        } else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            n_tokens = parse_list(argv[++i], tokens_s, 8);
        } else if (strcmp(argv[i], "--min-time") == 0 && i + 1 < argc) {
            min_time = atof(argv[++i]);
        } else if (strcmp(argv[i], "--simd") == 0 && i + 1 < argc) {
            n_simd = parse_list(argv[++i], simd_s, 3);
        } else if (strcmp(argv[i], "--cpu-time") == 0) {
            use_cpu_time = true;
        } else if (strcmp(argv[i], "--ref") == 0) {
            with_ref = true;
        } else if (strcmp(argv[i], "--no-attn") == 0) {
            with_attn = false;
        } else if (strcmp(argv[i], "--no-matmul") == 0) {
            with_matmul = false;
        } else {
            fprintf(
                stderr,
                "usage: %s [--types a,b] [--threads 1,2] [--tokens 1,64,512] "
                "[--simd auto,scalar,avx2,avx512] [--cpu-time] [--ref] [--min-time s] [--no-attn] "
                "[--no-matmul]\n",
                argv[0]);
            return 2;
        }
    }
    if (!with_matmul) {
        n_types = 0;
    }
    rill_simd_t simds[3];
    for (int si = 0; si < n_simd; si++) {
        static const char *const names[] = { "auto", "scalar", "avx2", "avx512" };
        static const rill_simd_t levels[] = { RILL_SIMD_AUTO, RILL_SIMD_SCALAR, RILL_SIMD_AVX2,
                                              RILL_SIMD_AVX512 };
        int found = -1;
        for (int k = 0; k < 4; k++) {
            found = strcmp(simd_s[si], names[k]) == 0 ? k : found;
        }
        if (found < 0) {
            fprintf(stderr, "unknown SIMD level %s (auto, scalar, avx2, avx512)\n", simd_s[si]);
            return 2;
        }
        simds[si] = levels[found];
    }

    if (n_types > 0) {
        printf("%-5s %-10s %3s %5s %10s %10s %9s %9s\n", "type", "backend", "thr", "n_tok",
               "ms/step", "tok/s", "GFLOP/s", "wGB/s");
    }
    char json[64][512];
    int n_json = 0;
    for (int ti = 0; ti < n_types; ti++) {
        rill_dtype_t t;
        if (!dtype_by_name(types[ti], &t)) {
            fprintf(stderr, "unknown type %s\n", types[ti]);
            return 2;
        }
        const int64_t E = rill_dtype_block_elems(t) == 256 ? 768 : 576;
        const shape_t shapes[] = {
            { "q", E, E, 1 },       { "k", E, 192, 1 },        { "v", E, 192, 1 },
            { "o", E, E, 1 },       { "gate", E, 1536, 1 },    { "up", E, 1536, 1 },
            { "down", 1536, E, 1 }, { "output", E, VOCAB, 0 },
        };
        enum { NS = N_SHAPES };
        _Static_assert(sizeof shapes / sizeof shapes[0] == N_SHAPES, "one entry per shape");
        void *wdata[NS];
        size_t wsize[NS];
        double flops_per_tok = 0.0, wbytes = 0.0;
        for (int s = 0; s < NS; s++) {
            wdata[s] = make_weight(t, shapes[s].n_in, shapes[s].n_out);
            wsize[s] = (size_t)rill_dtype_row_bytes(t, shapes[s].n_in) * (size_t)shapes[s].n_out;
            const double mult = shapes[s].per_layer ? N_LAYER : 1;
            flops_per_tok += mult * 2.0 * (double)shapes[s].n_in * (double)shapes[s].n_out;
            wbytes += mult * (double)wsize[s];
        }
        /* per-layer copies: distinct memory, same values */
        uint8_t *layers[N_LAYER][NS];
        for (int l = 0; l < N_LAYER; l++) {
            for (int s = 0; s < NS; s++) {
                layers[l][s] = NULL;
                if (shapes[s].per_layer || l == 0) {
                    layers[l][s] = malloc(wsize[s]);
                    if (layers[l][s] == NULL) {
                        fprintf(stderr, "out of memory\n");
                        return 1;
                    }
                    memcpy(layers[l][s], wdata[s], wsize[s]);
                }
            }
        }
        for (int bk = 0; bk < (with_ref ? 2 : 1); bk++) {
            for (int hi = 0; hi < (bk == 0 ? n_threads_list : 1); hi++) {
                /* one backend per SIMD level, timed one after another for each batch size, so
                 * that their ratio is measured in pairs on a shared machine */
                const int n_b = bk == 0 ? n_simd : 1;
                rill_backend_t *b[3] = { NULL, NULL, NULL };
                rill_weight_t *w[3][N_LAYER][NS];
                for (int si = 0; si < n_b; si++) {
                    rill_backend_params_t p = rill_backend_default_params();
                    p.kind = bk == 0 ? RILL_BACKEND_CPU : RILL_BACKEND_REF;
                    p.cpu.n_threads = atoi(threads_s[hi]);
                    p.cpu.simd = bk == 0 ? simds[si] : RILL_SIMD_AUTO;
                    p.max_batch = 512;
                    p.max_n_in = 1536;
                    if (rill_backend_new(&p, &b[si]) != RILL_OK) {
                        fprintf(stderr, "backend creation failed: %s\n",
                                rill_last_error(RILL_EUNSUPPORTED));
                        return 1;
                    }
                    for (int l = 0; l < N_LAYER; l++) {
                        for (int s = 0; s < NS; s++) {
                            w[si][l][s] = NULL;
                            if (layers[l][s] != NULL) {
                                (void)rill_weight_new(b[si], t, layers[l][s], shapes[s].n_in,
                                                      shapes[s].n_out, &w[si][l][s]);
                            }
                        }
                    }
                }
                for (int ki = 0; ki < n_tokens; ki++) {
                    const int64_t n_tok = atoll(tokens_s[ki]);
                    if (n_tok < 1 || n_tok > 512 || (bk == 1 && n_tok > 64)) {
                        continue;
                    }
                    for (int si = 0; si < n_b; si++) {
                        float *x = NULL, *y = NULL;
                        (void)rill_backend_alloc(b[si], (size_t)(n_tok * 1536) * 4, (void **)&x);
                        (void)rill_backend_alloc(b[si], (size_t)(n_tok * VOCAB) * 4, (void **)&y);
                        float *xh = malloc((size_t)(n_tok * 1536) * 4);
                        for (int64_t i = 0; i < n_tok * 1536; i++) {
                            xh[i] = rnd();
                        }
                        (void)rill_backend_copy_in(b[si], x, xh, (size_t)(n_tok * 1536) * 4);
                        free(xh);
                        const double step =
                            time_step(b[si], w[si], NS, y, x, n_tok, bk == 1 ? 0.0 : min_time);
                        const double tok_s = (double)n_tok / step;
                        const double gflops = flops_per_tok * (double)n_tok / step * 1e-9;
                        const double wgbs = wbytes / step * 1e-9;
                        printf("%-5s %-10s %3d %5lld %10.3f %10.1f %9.1f %9.1f\n",
                               rill_dtype_name(t), rill_backend_name(b[si]),
                               rill_backend_n_threads(b[si]), (long long)n_tok, step * 1e3, tok_s,
                               gflops, wgbs);
                        fflush(stdout);
                        if (n_json < 64) {
                            snprintf(json[n_json++], sizeof json[0],
                                     "{\"bench\":\"kernels_matmul\",\"model_shape\":\"smollm2-"
                                     "135m\",\"type\":\"%s\",\"row_width\":%lld,\"backend\":"
                                     "\"%s\",\"threads\":%d,\"n_tok\":%lld,\"ms_per_step\":%.4f,"
                                     "\"tok_s\":%.2f,\"gflops\":%.2f,\"weight_gbs\":%.2f}",
                                     rill_dtype_name(t), (long long)E, rill_backend_name(b[si]),
                                     rill_backend_n_threads(b[si]), (long long)n_tok, step * 1e3,
                                     tok_s, gflops, wgbs);
                        }
                        rill_backend_free(b[si], x);
                        rill_backend_free(b[si], y);
                    }
                }
                for (int si = 0; si < n_b; si++) {
                    for (int l = 0; l < N_LAYER; l++) {
                        for (int s = 0; s < NS; s++) {
                            rill_weight_destroy(&w[si][l][s]);
                        }
                    }
                    rill_backend_destroy(&b[si]);
                }
            }
        }
        for (int l = 0; l < N_LAYER; l++) {
            for (int s = 0; s < NS; s++) {
                free(layers[l][s]);
            }
        }
        for (int s = 0; s < NS; s++) {
            free(wdata[s]);
        }
    }
    if (with_attn) {
        printf("\n%-10s %3s %-18s %12s %12s %12s %12s %7s\n", "backend", "thr", "attention",
               "exact ms", "exact 30L", "flash ms", "flash 30L", "f/e");
    }
    static const struct {
        const char *name;
        int32_t n_tok, n_ctx;
    } attn[] = {
        { "prefill T=64", 64, 0 },        { "prefill T=512", 512, 0 },
        { "decode ctx=512", 1, 512 },     { "decode ctx=4096", 1, 4096 },
        { "decode ctx=16384", 1, 16384 }, { "question T=32 ctx=4096", 32, 4096 },
    };
    for (int hi = 0; hi < (with_attn ? n_threads_list : 0); hi++) {
        rill_backend_t *b[2] = { NULL, NULL }; /* [RILL_ATTN_EXACT], [RILL_ATTN_FLASH] */
        for (int k = 0; k < 2; k++) {
            rill_backend_params_t p = rill_backend_default_params();
            p.cpu.n_threads = atoi(threads_s[hi]);
            p.max_batch = 512;
            p.max_n_in = 1536;
            p.attn = k == 0 ? RILL_ATTN_EXACT : RILL_ATTN_FLASH;
            if (rill_backend_new(&p, &b[k]) != RILL_OK) {
                return 1;
            }
        }
        for (size_t a = 0; a < sizeof attn / sizeof attn[0]; a++) {
            double ms[2];
            for (int k = 0; k < 2; k++) {
                ms[k] = time_attention(b[k], attn[a].n_tok, attn[a].n_ctx, min_time);
                if (n_json < 64) {
                    snprintf(json[n_json++], sizeof json[0],
                             "{\"bench\":\"kernels_attention\",\"shape\":\"h9_kv3_d64_p16_f16\","
                             "\"backend\":\"%s\",\"attn\":\"%s\",\"threads\":%d,\"n_tok\":%d,"
                             "\"n_ctx\":%d,\"ms_per_call\":%.4f}",
                             rill_backend_name(b[k]), rill_attn_name(rill_backend_attn(b[k])),
                             rill_backend_n_threads(b[k]), attn[a].n_tok, attn[a].n_ctx, ms[k]);
                }
            }
            printf("%-10s %3d %-18s %12.3f %12.2f %12.3f %12.2f %7.2f\n", rill_backend_name(b[0]),
                   rill_backend_n_threads(b[0]), attn[a].name, ms[0], ms[0] * N_LAYER, ms[1],
                   ms[1] * N_LAYER, ms[1] / ms[0]);
            fflush(stdout);
        }
        rill_backend_destroy(&b[0]);
        rill_backend_destroy(&b[1]);
    }
    for (int i = 0; i < n_json; i++) {
        printf("JSON %s\n", json[i]);
    }
    return 0;
}
