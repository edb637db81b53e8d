/*
 * cmd_logits.c - `rill logits`: evaluates token ids from position 0 and writes the logits of the
 * last position, or of every position with --all. With --out, raw little-endian float32 rows
 * (what tools/ compares against llama.cpp); else text, one row per line, %.9g so that a float32
 * survives the round trip.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"

int cmd_logits(int argc, char **argv) {
    local_opts_t lo = { NULL, 0, 0, "cpu", "f16", "exact", NULL, NULL, NULL };
    const char *tokens = NULL, *out_path = NULL;
    bool all = false;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &lo.model_path, "GGUF model file (default: SmolLM2-135M)", 0,
          -1 },
        { "tokens", NULL, CLI_STRING, &tokens,
          "token ids, separated by spaces or commas (required)", 0, -1 },
        { "threads", "-t", CLI_INT, &lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "all", NULL, CLI_FLAG, &all, "write the logits of every position, row after row", 0, -1 },
        { "out", "-o", CLI_STRING, &out_path, "write raw little-endian float32 to this file", 0,
          -1 },
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
        { "ctx", "-c", CLI_INT, &lo.n_ctx, "context size, 0 = the number of tokens", 0, 1 << 24 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts,
                       "rill logits [--model FILE] --tokens \"ID ID ...\" [--all] [--out FILE]",
                       "Evaluates the tokens from position 0 and writes n_vocab logits per row.",
                       pos, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (tokens == NULL) {
        fprintf(stderr, "rill logits: --tokens is required\n");
        return 2;
    }
    int32_t *ids = NULL;
    int64_t n = local_parse_ids(tokens, &ids);
    if (n < 0) {
        return 2;
    }
    if (n == 0) {
        fprintf(stderr, "rill logits: --tokens holds no ids\n");
        rill_free(ids);
        return 2;
    }
    if (lo.n_ctx == 0) {
        lo.n_ctx = n;
    }
    local_t l;
    if (local_open(&l, &lo) != 0) {
        rill_free(ids);
        return 1;
    }
    int status = 1;
    int64_t rows = all ? n : 1;
    float *logits = rill_malloc(RILL_MEM_OTHER, (size_t)(rows * l.n_vocab) * sizeof(float));
    FILE *f = NULL;
    if (logits == NULL) {
        fprintf(stderr, "rill logits: out of memory\n");
        goto done;
    }
    if (n > INT32_MAX || local_eval(&l, ids, (int32_t)n, all, logits) != 0) {
        goto done;
    }
    if (out_path != NULL) {
        f = fopen(out_path, "wb");
        if (f == NULL || fwrite(logits, sizeof(float), (size_t)(rows * l.n_vocab), f) !=
                             (size_t)(rows * l.n_vocab)) {
            fprintf(stderr, "rill logits: cannot write %s\n", out_path);
            goto done;
        }
    } else {
        for (int64_t r = 0; r < rows; r++) {
            for (int32_t v = 0; v < l.n_vocab; v++) {
                printf(v ? " %.9g" : "%.9g", logits[r * l.n_vocab + v]);
            }
            printf("\n");
        }
    }
    status = 0;
done:
    if (f != NULL && fclose(f) != 0 && status == 0) {
        fprintf(stderr, "rill logits: cannot write %s\n", out_path);
        status = 1;
    }
    rill_free(logits);
    rill_free(ids);
    local_close(&l);
    return status;
}
