/*
 * cmd_generate.c - `rill generate`: prompt in, text streamed out as it is produced.
 *
 * The prompt is tokenized (special-token texts parsed, BOS as the model's metadata says), with
 * --chat first rendered through the model's chat template as one user turn. Generation stops
 * after -n tokens, at an end-of-generation token, or when the context is full. Text goes to
 * stdout through the streaming detokenizer (only complete UTF-8 characters are written); a
 * one-line summary with token counts and speeds goes to stderr.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "local.h"
#include "rill_alloc.h"
#include "rill_chat.h"
#include "rill_log.h"
#include "rill_sampler.h"

/* Renders prompt as one user turn of the model's chat template. Caller frees the result. */
static char *apply_chat(const local_t *l, const char *prompt, const char *system) {
    rill_chat_t *chat = NULL;
    rill_err_t err = rill_chat_new_gguf(rill_model_gguf(l->model), RILL_CHAT_AUTO, &chat);
    if (err != RILL_OK) {
        fprintf(stderr, "rill generate: --chat: the model's chat template is %s (%s)\n",
                err == RILL_ENOTFOUND ? "missing" : "not supported", rill_strerror(err));
        return NULL;
    }
    rill_chat_msg_t msgs[2];
    size_t n = 0;
    if (system != NULL) {
        msgs[n++] = (rill_chat_msg_t){ "system", system };
    }
    msgs[n++] = (rill_chat_msg_t){ "user", prompt };
    int64_t need = rill_chat_apply(chat, msgs, n, true, NULL, 0);
    char *text = need >= 0 ? rill_malloc(RILL_MEM_OTHER, (size_t)need + 1) : NULL;
    if (text != NULL) {
        rill_chat_apply(chat, msgs, n, true, text, (size_t)need + 1);
    } else {
        fprintf(stderr, "rill generate: cannot render the chat template\n");
    }
    rill_chat_destroy(&chat);
    return text;
}

int cmd_generate(int argc, char **argv) {
    local_opts_t lo = { NULL, 0, 0, "cpu", "f16", "exact", NULL, NULL, NULL };
    const char *prompt = NULL, *system = NULL;
    bool chat = false;
    int64_t n_predict = 128;
    rill_sampler_params_t sp = rill_sampler_default_params();
    double temp = sp.temp, top_p = sp.top_p, min_p = sp.min_p, rep = sp.penalty_repeat;
    int64_t top_k = sp.top_k, seed = (int64_t)sp.seed, rep_last_n = sp.penalty_last_n;
    const cli_opt_t opts[] = {
        { "model", "-m", CLI_STRING, &lo.model_path, "GGUF model file (default: SmolLM2-135M)", 0,
          -1 },
        { "prompt", "-p", CLI_STRING, &prompt, "the prompt (required)", 0, -1 },
        { "chat", NULL, CLI_FLAG, &chat, "wrap the prompt in the model's chat template", 0, -1 },
        { "system", NULL, CLI_STRING, &system, "with --chat: a system message", 0, -1 },
        { "n-predict", "-n", CLI_INT, &n_predict, "tokens to generate at most", 0, 1 << 24 },
        { "temp", NULL, CLI_FLOAT, &temp, "temperature; 0 = greedy", 0, 100 },
        { "top-k", NULL, CLI_INT, &top_k, "keep the k most likely tokens; 0 = off", 0, 1 << 24 },
        { "top-p", NULL, CLI_FLOAT, &top_p, "nucleus sampling mass; 1 = off", 0, 1 },
        { "min-p", NULL, CLI_FLOAT, &min_p, "drop tokens below min-p x the top probability", 0, 1 },
        { "repeat-penalty", NULL, CLI_FLOAT, &rep, "penalty for recent tokens; 1 = off", 0.01,
          100 },
        { "repeat-last-n", NULL, CLI_INT, &rep_last_n, "tokens the penalty looks back over", 0,
          1 << 20 },
        { "seed", "-s", CLI_INT, &seed, "random seed", 0, 9.2e18 },
        { "threads", "-t", CLI_INT, &lo.threads, "compute threads, 0 = one per CPU", 0, 512 },
        { "ctx", "-c", CLI_INT, &lo.n_ctx, "context size, 0 = min(model's, 4096)", 0, 1 << 24 },
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
        { "backend", NULL, CLI_STRING, &lo.backend, "cpu (fast) or ref (plain-C oracle)", 0, -1 },
        { 0 },
    };
    const char *pos[1];
    int n_pos = 0;
    int rc = cli_parse(argc, argv, 1, opts,
                       "rill generate [--model FILE] --prompt TEXT [--chat] [-n N] [--temp T] "
                       "[--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] "
                       "[--threads N]",
                       "Generates text from a prompt and streams it to stdout; a summary line "
                       "goes to stderr.",
                       pos, 0, &n_pos);
    if (rc != 0) {
        return rc == 1 ? 0 : 2;
    }
    if (prompt == NULL) {
        fprintf(stderr, "rill generate: --prompt is required\n");
        return 2;
    }
    local_t l;
    if (local_open(&l, &lo) != 0) {
        return 1;
    }
    int status = 1;
    char *text = NULL, *out = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    rill_sampler_t *sampler = NULL;

    text = chat ? apply_chat(&l, prompt, system) : rill_strdup(RILL_MEM_OTHER, prompt);
    if (text == NULL) {
        goto done;
    }
    size_t len = strlen(text);
    int64_t n_prompt = rill_tokenizer_encode(l.tok, text, len, true, true, NULL, 0);
    if (n_prompt <= 0) {
        fprintf(stderr, "rill generate: the prompt encodes to no tokens\n");
        goto done;
    }
    if (n_prompt >= l.n_ctx) {
        fprintf(stderr, "rill generate: the prompt (%lld tokens) does not fit the context (%d)\n",
                (long long)n_prompt, l.n_ctx);
        goto done;
    }
    ids = rill_malloc(RILL_MEM_OTHER, (size_t)n_prompt * sizeof *ids);
    logits = rill_malloc(RILL_MEM_OTHER, (size_t)l.n_vocab * sizeof *logits);
    size_t out_cap = rill_tokenizer_stream_bound(l.tok) + 4;
    out = rill_malloc(RILL_MEM_OTHER, out_cap);
    if (ids == NULL || logits == NULL || out == NULL) {
        fprintf(stderr, "rill generate: out of memory\n");
        goto done;
    }
    rill_tokenizer_encode(l.tok, text, len, true, true, ids, n_prompt);

    sp.temp = (float)temp;
    sp.top_k = (int32_t)top_k;
    sp.top_p = (float)top_p;
    sp.min_p = (float)min_p;
    sp.penalty_repeat = (float)rep;
    sp.penalty_last_n = (int32_t)rep_last_n;
    sp.seed = (uint64_t)seed;
    rill_err_t err = rill_sampler_new(l.n_vocab, sp, &sampler);
    if (err != RILL_OK) {
        fprintf(stderr, "rill generate: sampler: %s\n", rill_strerror(err));
        goto done;
    }
    for (int64_t i = 0; i < n_prompt; i++) {
        rill_sampler_accept(sampler, ids[i]);
    }

    uint64_t t0 = rill_now_ns();
    if (local_eval(&l, ids, (int32_t)n_prompt, false, logits) != 0) {
        goto done;
    }
    uint64_t t1 = rill_now_ns();
    rill_tokenizer_stream_t stream;
    rill_tokenizer_stream_init(&stream, 0);
    int64_t n_gen = 0;
    const char *stop = "length";
    while (n_gen < n_predict) {
        int32_t next = 0;
        if ((err = rill_sampler_sample(sampler, logits, &next)) != RILL_OK) {
            fprintf(stderr, "rill generate: sampling failed: %s\n", rill_strerror(err));
            goto done;
        }
        if (rill_tokenizer_is_eog(l.tok, next)) {
            stop = "end of generation";
            break;
        }
        rill_sampler_accept(sampler, next);
        n_gen++;
        int64_t w = rill_tokenizer_stream_feed(l.tok, &stream, next, out, out_cap);
        if (w > 0) {
            fwrite(out, 1, (size_t)w, stdout);
            fflush(stdout);
        }
        if (n_gen == n_predict) {
            break;
        }
        if (l.n_past >= l.n_ctx) {
            stop = "context full";
            break;
        }
        if (local_eval(&l, &next, 1, false, logits) != 0) {
            goto done;
        }
    }
    int64_t w = rill_tokenizer_stream_flush(&stream, out, out_cap);
    if (w > 0) {
        fwrite(out, 1, (size_t)w, stdout);
    }
    printf("\n");
    fflush(stdout);
    uint64_t t2 = rill_now_ns();
    double pp_s = (double)(t1 - t0) / 1e9, tg_s = (double)(t2 - t1) / 1e9;
    fprintf(stderr,
            "rill generate: %lld prompt tokens in %.3f s (%.1f tok/s), %lld generated in %.3f s "
            "(%.1f tok/s), stopped: %s; %s, %d threads, %s attention\n",
            (long long)n_prompt, pp_s, (double)n_prompt / (pp_s > 0 ? pp_s : 1e-9),
            (long long)n_gen, tg_s, (double)n_gen / (tg_s > 0 ? tg_s : 1e-9), stop,
            rill_backend_name(l.be), rill_backend_n_threads(l.be),
            rill_attn_name(rill_backend_attn(l.be)));
    status = 0;
done:
    rill_sampler_destroy(&sampler);
    rill_free(out);
    rill_free(logits);
    rill_free(ids);
    rill_free(text);
    local_close(&l);
    return status;
}
