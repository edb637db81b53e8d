/*
 * local.c - the in-process engine of the local sub-commands (see local.h). One sequence, one
 * contiguous KV cache; prompts longer than the backend's batch are fed in chunks, which must
 * give the same logits as one batch (the attention of a chunk sees the K/V the earlier chunks
 * stored).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "local.h"
#include "rill_alloc.h"

/* One cache type name (f32, f16, q8_0, q4_0); -1 for any other. */
static int cache_type_of(const char *name) {
    const int t = rill_dtype_from_name(name);
    return t == RILL_DTYPE_F32 || t == RILL_DTYPE_F16 || t == RILL_DTYPE_Q8_0 ||
                   t == RILL_DTYPE_Q4_0
               ? t
               : -1;
}

int local_cache_types(const local_opts_t *o, rill_dtype_t *k, rill_dtype_t *v) {
    const struct {
        const char *flag, *name;
        rill_dtype_t *out;
    } parts[] = {
        { "--kv-type", o->kv_type, k },
        { "--cache-type-k", o->cache_type_k, k },
        { "--cache-type-v", o->cache_type_v, v },
    };
    *k = *v = RILL_DTYPE_F16;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (parts[i].name == NULL) {
            continue;
        }
        const int t = cache_type_of(parts[i].name);
        if (t < 0) {
            fprintf(stderr, "rill: %s must be f32, f16, q8_0 or q4_0, got '%s'\n", parts[i].flag,
                    parts[i].name);
            return 1;
        }
        *parts[i].out = (rill_dtype_t)t;
        if (i == 0) {
            *v = (rill_dtype_t)t;
        }
    }
    return 0;
}

int local_open(local_t *l, const local_opts_t *o) {
    memset(l, 0, sizeof *l);
    const char *path = o->model_path != NULL ? o->model_path : cli_default_model();
    if (path == NULL) {
        return 1;
    }
    rill_err_t err = rill_model_load(path, rill_model_default_params(), &l->model);
    if (err != RILL_OK) {
        fprintf(stderr, "rill: cannot load %s: %s\n", path, rill_last_error(err));
        return 1;
    }
    l->hp = rill_model_hparams(l->model);
    err = rill_tokenizer_new(rill_model_gguf(l->model), &l->tok);
    if (err != RILL_OK) {
        fprintf(stderr, "rill: %s: tokenizer: %s\n", path, rill_last_error(err));
        goto fail;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    if (o->backend == NULL || strcmp(o->backend, "cpu") == 0) {
        bp.kind = RILL_BACKEND_CPU;
    } else if (strcmp(o->backend, "ref") == 0) {
        bp.kind = RILL_BACKEND_REF;
    } else {
        fprintf(stderr, "rill: --backend must be cpu or ref, got '%s'\n", o->backend);
        goto fail;
    }
    if (o->attn == NULL || strcmp(o->attn, "exact") == 0) {
        bp.attn = RILL_ATTN_EXACT;
    } else if (strcmp(o->attn, "flash") == 0) {
        bp.attn = RILL_ATTN_FLASH;
    } else {
        fprintf(stderr, "rill: --attn must be exact or flash, got '%s'\n", o->attn);
        goto fail;
    }
    bp.cpu.n_threads = (int)o->threads;
    int64_t widest = l->hp->n_ff > l->hp->n_embd ? l->hp->n_ff : l->hp->n_embd;
    if (bp.max_n_in < widest) {
        bp.max_n_in = widest;
    }
    err = rill_backend_new(&bp, &l->be);
    if (err != RILL_OK) {
        const char *why = err == RILL_EUNSUPPORTED && bp.kind == RILL_BACKEND_CPU
                              ? rill_backend_simd_unsupported(bp.cpu.simd)
                              : NULL;
        fprintf(stderr, "rill: cannot create the %s backend: %s%s%s\n",
                o->backend ? o->backend : "cpu", rill_strerror(err), why ? ": " : "",
                why ? why : "");
        goto fail;
    }
    err = rill_forward_new(l->model, l->be, NULL, &l->fw);
    if (err != RILL_OK) {
        fprintf(stderr, "rill: %s: %s\n", path, rill_strerror(err));
        goto fail;
    }
    if (local_cache_types(o, &l->k_type, &l->v_type) != 0) {
        goto fail;
    }
    if (!rill_kv_type_ok(l->k_type, l->hp->head_dim) ||
        !rill_kv_type_ok(l->v_type, l->hp->head_dim)) {
        fprintf(stderr,
                "rill: a q8_0 or q4_0 cache needs a head size that is a multiple of 32; this "
                "model's is %d\n",
                l->hp->head_dim);
        goto fail;
    }
    int64_t n_ctx = o->n_ctx;
    if (n_ctx <= 0) {
        n_ctx = l->hp->n_ctx_train < 4096 ? l->hp->n_ctx_train : 4096;
    }
    if (n_ctx > l->hp->n_ctx_train) {
        fprintf(stderr,
                "rill: a context of %lld tokens (%s) exceeds the model's training "
                "context %d\n",
                (long long)n_ctx, o->ctx_from != NULL ? o->ctx_from : "--ctx", l->hp->n_ctx_train);
        goto fail;
    }
    int32_t n_pages = (int32_t)((n_ctx + RILL_KV_PAGE_SIZE - 1) / RILL_KV_PAGE_SIZE);
    err = rill_kv_cache_new_types(l->fw, l->k_type, l->v_type, RILL_KV_PAGE_SIZE, n_pages, &l->kv);
    if (err != RILL_OK) {
        fprintf(stderr, "rill: cannot allocate a KV cache of %lld positions: %s\n",
                (long long)n_ctx, rill_strerror(err));
        goto fail;
    }
    l->pages = rill_malloc(RILL_MEM_OTHER, (size_t)n_pages * sizeof *l->pages);
    if (l->pages == NULL) {
        fprintf(stderr, "rill: out of memory\n");
        goto fail;
    }
    for (int32_t i = 0; i < n_pages; i++) {
        l->pages[i] = i;
    }
    l->n_ctx = (int32_t)n_ctx;
    l->n_vocab = l->hp->n_vocab;
    return 0;
fail:
    local_close(l);
    return 1;
}

void local_close(local_t *l) {
    rill_free(l->pages);
    rill_kv_cache_destroy(&l->kv);
    rill_forward_destroy(&l->fw);
    rill_backend_destroy(&l->be);
    rill_tokenizer_destroy(&l->tok);
    rill_model_destroy(&l->model);
    memset(l, 0, sizeof *l);
}

int local_eval(local_t *l, const int32_t *tokens, int32_t n, bool all, float *logits) {
    if (n <= 0) {
        return 0;
    }
    if ((int64_t)l->n_past + n > l->n_ctx) {
        fprintf(stderr, "rill: context full: %d + %d tokens exceed --ctx %d\n", l->n_past, n,
                l->n_ctx);
        return 1;
    }
    rill_page_table_t pt = { l->pages, (l->n_ctx + RILL_KV_PAGE_SIZE - 1) / RILL_KV_PAGE_SIZE };
    rill_err_t err =
        rill_forward_eval_sequence(l->fw, l->kv, &pt, l->n_past, tokens, n, all, logits);
    if (err != RILL_OK) {
        fprintf(stderr, "rill: evaluation failed: %s\n", rill_last_error(err));
        return 1;
    }
    l->n_past += n;
    return 0;
}

int64_t local_parse_ids(const char *s, int32_t **out) {
    *out = NULL;
    int64_t cap = 16, n = 0;
    int32_t *ids = rill_malloc(RILL_MEM_OTHER, (size_t)cap * sizeof *ids);
    if (ids == NULL) {
        return -1;
    }
    const char *p = s;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n') {
            p++;
        }
        if (*p == '\0') {
            break;
        }
        char *end = NULL;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v > INT32_MAX ||
            (*end != '\0' && *end != ' ' && *end != ',' && *end != '\t' && *end != '\n')) {
            fprintf(stderr, "rill: --tokens: '%.20s' is not a token id\n", p);
            rill_free(ids);
            return -1;
        }
        if (n == cap) {
            int32_t *grown = rill_realloc(RILL_MEM_OTHER, ids, (size_t)cap * 2 * sizeof *ids);
            if (grown == NULL) {
                rill_free(ids);
                return -1;
            }
            ids = grown;
            cap *= 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    *out = ids;
    return n;
}
