/*
 * local.h - the in-process engine behind `rill generate`, `rill logits` and `rill bench model`:
 * a model, its tokenizer, a backend, a forward pass and one contiguous KV cache of n_ctx
 * positions (the identity page table), with helpers that evaluate a token sequence in chunks of
 * the backend's batch size. Sessions (sessions/) replace the single contiguous cache for the
 * daemon; these commands only ever run one sequence. Private to cli/.
 */
#ifndef RILL_CLI_LOCAL_H
#define RILL_CLI_LOCAL_H

#include <stdbool.h>
#include <stdint.h>

#include "rill_backend.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_tokenizer.h"

typedef struct local_opts {
    const char *model_path;   /* NULL: the default model */
    int64_t threads;          /* 0: one per CPU */
    int64_t n_ctx;            /* 0: the model's training context, capped at 4096 */
    const char *backend;      /* "cpu" (default) or "ref" */
    const char *kv_type;      /* K and V cache type: "f16" (default), "f32", "q8_0" or "q4_0" */
    const char *attn;         /* attention kernel: "exact" (default; NULL too) or "flash" */
    const char *ctx_from;     /* the options n_ctx comes from, for errors (NULL: "--ctx") */
    const char *cache_type_k; /* K's cache type over kv_type's (--cache-type-k); NULL: kv_type */
    const char *cache_type_v; /* V's cache type over kv_type's (--cache-type-v); NULL: kv_type */
} local_opts_t;

typedef struct local {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_kv_cache_t *kv;
    int32_t *pages; /* identity page table */
    int32_t n_ctx;
    int32_t n_vocab;
    int32_t n_past;              /* positions [0, n_past) hold K/V */
    rill_dtype_t k_type, v_type; /* the cache types local_open() resolved */
    const rill_hparams_t *hp;
} local_t;

/* Resolves the cache types of o (kv_type for both, cache_type_k / cache_type_v over it; names
 * f32, f16, q8_0, q4_0) into *k and *v. Prints a message naming the flag and returns non-zero
 * on an unknown name. */
int local_cache_types(const local_opts_t *o, rill_dtype_t *k, rill_dtype_t *v);

/* Loads everything; prints a message to stderr and returns non-zero on failure (l is then
 * cleaned up). */
int local_open(local_t *l, const local_opts_t *o);
void local_close(local_t *l);

/* Evaluates tokens[0, n) at positions n_past.. and advances n_past. When logits != NULL, writes
 * the logits of the last token (all == false: n_vocab floats) or of every token (all == true:
 * n * n_vocab floats). Prints a message and returns non-zero on failure (context full, bad id). */
int local_eval(local_t *l, const int32_t *tokens, int32_t n, bool all, float *logits);

/* Parses "ID ID ..." (spaces or commas) into a new array (caller frees with rill_free).
 * Prints a message and returns -1 on malformed input. */
int64_t local_parse_ids(const char *s, int32_t **out);

#endif /* RILL_CLI_LOCAL_H */
