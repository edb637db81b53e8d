/*
 * forward.c - the llama / qwen2 forward pass over the backend interface.
 *
 * Per layer, for a batch of T tokens (shapes as in rill_forward.h):
 *   n = rmsnorm(x) * attn_norm                               (T, E)
 *   q = n Wq^T (+ bq), k = n Wk^T (+ bk), v = n Wv^T (+ bv)   (T, Q), (T, KV), (T, KV)
 *   q, k = rope(q), rope(k) at each token's position
 *   store k, v at each token's slot; a = attention(q, cache) (T, Q)
 *   x = x + a Wo^T
 *   m = rmsnorm(x) * ffn_norm; x = x + (silu(m Wg^T) * (m Wu^T)) Wd^T
 * then for the requested rows only: logits = (rmsnorm(x) * output_norm) Wout^T.
 *
 * This file never touches activation memory: every buffer is a backend pointer and only the
 * logits cross to the host, so a GPU backend runs the same code. rill_forward_eval_ids moves not
 * even those: the output's arg-max ids stay in backend memory (rill_forward_ids_t) and the next
 * pass embeds them from there, so a greedy decode loop crosses to the host only when the caller
 * reads the ids. Page copies go to the backend as one call over every layer's pool. The order of
 * operations and the places where values are rounded follow llama.cpp's graph for these
 * architectures (norm, bias add, rope, then K/V stored in the cache type), because the tests hold
 * rill to llama.cpp's logits and greedy continuations.
 *
 * Rejected: fusing the Q/K/V projections into one matmul over a concatenated weight. It would
 * save two activation quantizations per layer but needs a repacked copy of the weights (the
 * GGUF stores them separately), breaking the zero-copy mmap promise; measure before revisiting.
 */
#include <stdio.h>
#include <string.h>

#include "forward_internal.h"
#include "rill_alloc.h"
#include "rill_forward.h"
#include "rill_log.h"

typedef struct layer {
    rill_weight_t *attn_norm, *wq, *wk, *wv, *wo, *bq, *bk, *bv;
    rill_weight_t *ffn_norm, *gate, *up, *down;
} layer_t;

struct rill_forward {
    rill_model_t *model;
    rill_backend_t *be;
    rill_hparams_t hp;
    int32_t max_batch;
    int32_t max_logits;
    rill_rope_t rope;
    const atomic_int *cancel; /* rill_forward_set_cancel */

    rill_weight_t *tok_embd, *out_norm, *output;
    layer_t *layers; /* [n_layer] */

    /* Activations (backend memory), one allocation carved up. */
    void *arena;
    float *x;      /* (T, E) residual stream */
    float *n;      /* (T, E) normed input of a block */
    float *q;      /* (T, Q) */
    float *k;      /* (T, KV) */
    float *v;      /* (T, KV) */
    float *att;    /* (T, Q) attention output */
    float *gate;   /* (T, F) */
    float *up;     /* (T, F) */
    float *xo;     /* (L, E) gathered rows for the output */
    float *logits; /* (L, V) */

    /* Host scratch of rill_forward_eval_sequence(), sized at creation. */
    rill_batch_token_t *seq_tok; /* [max_batch] */
    int32_t *seq_rows;           /* [max_batch] */
};

struct rill_forward_ids {
    rill_forward_t *fw;
    int32_t *ids; /* backend memory: [capacity] */
    int32_t capacity, count;
};

rill_forward_params_t rill_forward_default_params(void) {
    rill_forward_params_t p = { 0, 32 };
    return p;
}

static rill_err_t prep(rill_forward_t *fw, const rill_model_tensor_t *t, rill_weight_t **out) {
    *out = NULL;
    if (t->data == NULL) {
        return RILL_OK; /* optional and absent */
    }
    return rill_weight_new(fw->be, t->dtype, t->data, t->ne0, t->ne1, out);
}

static void free_weights(rill_forward_t *fw) {
    rill_weight_destroy(&fw->tok_embd);
    rill_weight_destroy(&fw->out_norm);
    rill_weight_destroy(&fw->output);
    if (fw->layers == NULL) {
        return;
    }
    for (int32_t l = 0; l < fw->hp.n_layer; l++) {
        layer_t *ly = &fw->layers[l];
        rill_weight_t **all[] = { &ly->attn_norm, &ly->wq,   &ly->wk, &ly->wv,
                                  &ly->wo,        &ly->bq,   &ly->bk, &ly->bv,
                                  &ly->ffn_norm,  &ly->gate, &ly->up, &ly->down };
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            rill_weight_destroy(all[i]);
        }
    }
    rill_free(fw->layers);
    fw->layers = NULL;
}

static rill_err_t prep_weights(rill_forward_t *fw) {
    const rill_model_weights_t *w = rill_model_weights(fw->model);
    rill_err_t err = RILL_OK;
    fw->layers = rill_calloc(RILL_MEM_MODEL, (size_t)fw->hp.n_layer, sizeof *fw->layers);
    if (fw->layers == NULL) {
        return RILL_ENOMEM;
    }
    RILL_TRY(prep(fw, &w->token_embd, &fw->tok_embd));
    /* A tied output multiplies by the embedding: keep llama.cpp's kernel choice for it. */
    RILL_TRY(rill_weight_mark_embedding(fw->tok_embd));
    RILL_TRY(prep(fw, &w->output_norm, &fw->out_norm));
    if (w->output.data == w->token_embd.data) {
        fw->output = NULL; /* tied: the output projection is the embedding */
    } else {
        RILL_TRY(prep(fw, &w->output, &fw->output));
    }
    for (int32_t l = 0; l < fw->hp.n_layer; l++) {
        const rill_layer_weights_t *src = &w->layers[l];
        layer_t *ly = &fw->layers[l];
        RILL_TRY(prep(fw, &src->attn_norm, &ly->attn_norm));
        RILL_TRY(prep(fw, &src->wq, &ly->wq));
        RILL_TRY(prep(fw, &src->wk, &ly->wk));
        RILL_TRY(prep(fw, &src->wv, &ly->wv));
        RILL_TRY(prep(fw, &src->wo, &ly->wo));
        RILL_TRY(prep(fw, &src->bq, &ly->bq));
        RILL_TRY(prep(fw, &src->bk, &ly->bk));
        RILL_TRY(prep(fw, &src->bv, &ly->bv));
        RILL_TRY(prep(fw, &src->ffn_norm, &ly->ffn_norm));
        RILL_TRY(prep(fw, &src->ffn_gate, &ly->gate));
        RILL_TRY(prep(fw, &src->ffn_up, &ly->up));
        RILL_TRY(prep(fw, &src->ffn_down, &ly->down));
    }
cleanup:
    return err;
}

static size_t floats_bytes(int64_t n) {
    /* Round every buffer up to 64 bytes so that each one starts cache-line aligned. */
    return (size_t)((n * 4 + 63) / 64 * 64);
}

static rill_err_t alloc_activations(rill_forward_t *fw) {
    const rill_hparams_t *hp = &fw->hp;
    int64_t T = fw->max_batch, L = fw->max_logits;
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim;
    int64_t KV = (int64_t)hp->n_head_kv * hp->head_dim, F = hp->n_ff, V = hp->n_vocab;
    int64_t sizes[] = { T * E, T * E, T * Q, T * KV, T * KV, T * Q, T * F, T * F, L * E, L * V };
    float **dst[] = { &fw->x,   &fw->n,    &fw->q,  &fw->k,  &fw->v,
                      &fw->att, &fw->gate, &fw->up, &fw->xo, &fw->logits };
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        total += floats_bytes(sizes[i]);
    }
    rill_err_t err = rill_backend_alloc(fw->be, total, &fw->arena);
    if (err != RILL_OK) {
        return err;
    }
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = (float *)((char *)fw->arena + off);
        off += floats_bytes(sizes[i]);
    }
    return RILL_OK;
}

rill_err_t rill_forward_new(rill_model_t *model, rill_backend_t *backend,
                            const rill_forward_params_t *params, rill_forward_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (model == NULL || backend == NULL) {
        return RILL_EINVAL;
    }
    rill_forward_params_t p = params != NULL ? *params : rill_forward_default_params();
    const rill_hparams_t *hp = rill_model_hparams(model);
    if (p.max_batch == 0) {
        p.max_batch = rill_backend_max_batch(backend);
    }
    if (p.max_batch < 1 || p.max_batch > rill_backend_max_batch(backend) || p.max_logits < 1 ||
        p.max_logits > rill_backend_max_batch(backend)) {
        RILL_LOGE("forward: max_batch %d / max_logits %d outside [1, backend max_batch %d]",
                  p.max_batch, p.max_logits, rill_backend_max_batch(backend));
        return RILL_EINVAL;
    }
    if (hp->arch == RILL_ARCH_WHISPER) {
        RILL_LOGE("forward: a whisper model runs through rill_whisper_new (rill_whisper.h)");
        return RILL_EUNSUPPORTED;
    }
    int64_t widest = hp->n_embd;
    if ((int64_t)hp->n_head * hp->head_dim > widest) {
        widest = (int64_t)hp->n_head * hp->head_dim;
    }
    if (hp->n_ff > widest) {
        widest = hp->n_ff;
    }
    if (widest > rill_backend_max_n_in(backend)) {
        RILL_LOGE("forward: the model's widest matmul input (%lld) exceeds the backend's "
                  "max_n_in (%lld)",
                  (long long)widest, (long long)rill_backend_max_n_in(backend));
        return RILL_EINVAL;
    }
    if (rill_model_weights(model)->rope_freqs.data != NULL) {
        RILL_LOGE("forward: rope_freqs (RoPE frequency factors) are not implemented");
        return RILL_EUNSUPPORTED;
    }
    rill_forward_t *fw = rill_calloc(RILL_MEM_MODEL, 1, sizeof *fw);
    if (fw == NULL) {
        return RILL_ENOMEM;
    }
    fw->be = backend;
    fw->hp = *hp;
    fw->max_batch = p.max_batch;
    fw->max_logits = p.max_logits;
    fw->rope.mode = hp->rope_type == RILL_MODEL_ROPE_NEOX ? RILL_ROPE_NEOX : RILL_ROPE_NORM;
    fw->rope.n_rot = hp->n_rot;
    fw->rope.freq_base = hp->rope_base;
    fw->rope.freq_scale = 1.0f;
    rill_err_t err = RILL_OK;
    fw->model = rill_model_retain(model);
    RILL_TRY(prep_weights(fw));
    RILL_TRY(alloc_activations(fw));
    fw->seq_tok = rill_malloc(RILL_MEM_MODEL, (size_t)fw->max_batch * sizeof *fw->seq_tok);
    fw->seq_rows = rill_malloc(RILL_MEM_MODEL, (size_t)fw->max_batch * sizeof *fw->seq_rows);
    if (fw->seq_tok == NULL || fw->seq_rows == NULL) {
        err = RILL_ENOMEM;
        goto cleanup;
    }
    *out = fw;
    return RILL_OK;
cleanup:
    rill_forward_destroy(&fw);
    return err;
}

void rill_forward_destroy(rill_forward_t **fp) {
    if (fp == NULL || *fp == NULL) {
        return;
    }
    rill_forward_t *fw = *fp;
    free_weights(fw);
    rill_free(fw->seq_tok);
    rill_free(fw->seq_rows);
    rill_backend_free(fw->be, fw->arena);
    rill_model_destroy(&fw->model);
    rill_free(fw);
    *fp = NULL;
}

const rill_model_t *rill_forward_model(const rill_forward_t *fw) {
    return fw->model;
}

rill_backend_t *rill_forward_backend(rill_forward_t *fw) {
    return fw->be;
}

int32_t rill_forward_max_batch(const rill_forward_t *fw) {
    return fw->max_batch;
}

/* ---- KV cache ---- */

rill_err_t rill_kv_cache_new(rill_forward_t *fw, rill_dtype_t dtype, int32_t page_size,
                             int32_t n_pages, rill_kv_cache_t **out) {
    if (out != NULL && dtype != RILL_DTYPE_F16 && dtype != RILL_DTYPE_F32) {
        *out = NULL;
        return rill__error(RILL_EINVAL, "KV cache type %s: rill_kv_cache_new takes f16 or f32",
                           rill_dtype_name(dtype));
    }
    return rill_kv_cache_new_types(fw, dtype, dtype, page_size, n_pages, out);
}

rill_err_t rill_kv_cache_new_types(rill_forward_t *fw, rill_dtype_t k_dtype, rill_dtype_t v_dtype,
                                   int32_t page_size, int32_t n_pages, rill_kv_cache_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (fw == NULL) {
        return RILL_EINVAL;
    }
    return rill__kv_cache_new_types(fw->be, fw, fw->hp.n_layer, fw->hp.n_head_kv, fw->hp.head_dim,
                                    k_dtype, v_dtype, page_size, n_pages, out);
}

rill_err_t rill__kv_cache_new(rill_backend_t *be, const void *owner, int32_t n_layer,
                              int32_t n_kv_heads, int32_t head_dim, rill_dtype_t dtype,
                              int32_t page_size, int32_t n_pages, rill_kv_cache_t **out) {
    *out = NULL;
    if (dtype != RILL_DTYPE_F16 && dtype != RILL_DTYPE_F32) {
        return rill__error(RILL_EINVAL, "invalid KV layout (dtype %s, page %d, pages %d)",
                           rill_dtype_name(dtype), page_size, n_pages);
    }
    return rill__kv_cache_new_types(be, owner, n_layer, n_kv_heads, head_dim, dtype, dtype,
                                    page_size, n_pages, out);
}

rill_err_t rill__kv_cache_new_types(rill_backend_t *be, const void *owner, int32_t n_layer,
                                    int32_t n_kv_heads, int32_t head_dim, rill_dtype_t k_dtype,
                                    rill_dtype_t v_dtype, int32_t page_size, int32_t n_pages,
                                    rill_kv_cache_t **out) {
    *out = NULL;
    rill_kv_layout_t layout = { k_dtype, v_dtype, page_size, n_kv_heads, head_dim, n_pages };
    int64_t pool = rill_kv_pool_bytes(&layout);
    if (pool <= 0) {
        return rill__error(
            RILL_EINVAL, "invalid KV layout (K %s, V %s, head_dim %d, page %d, pages %d)%s",
            rill_dtype_name(k_dtype), rill_dtype_name(v_dtype), head_dim, page_size, n_pages,
            head_dim % 32 != 0 ? " (q8_0 and q4_0 need head_dim % 32 == 0)" : "");
    }
    if (pool > INT64_MAX / n_layer) {
        return RILL_EINVAL;
    }
    rill_kv_cache_t *kv = rill_calloc(RILL_MEM_MODEL, 1, sizeof *kv);
    if (kv == NULL) {
        return RILL_ENOMEM;
    }
    kv->be = be;
    kv->owner = owner;
    kv->n_layer = n_layer;
    kv->layout = layout;
    kv->pool_bytes = pool;
    kv->pools = rill_calloc(RILL_MEM_MODEL, (size_t)n_layer, sizeof *kv->pools);
    if (kv->pools == NULL) {
        rill_free(kv);
        return RILL_ENOMEM;
    }
    rill_err_t err = rill_backend_alloc(be, (size_t)(pool * n_layer), &kv->mem);
    if (err != RILL_OK) {
        rill_free(kv->pools);
        rill_free(kv);
        return err;
    }
    for (int32_t l = 0; l < n_layer; l++) {
        kv->pools[l] = (char *)kv->mem + (int64_t)l * pool;
    }
    *out = kv;
    return RILL_OK;
}

void rill_kv_cache_destroy(rill_kv_cache_t **kvp) {
    if (kvp == NULL || *kvp == NULL) {
        return;
    }
    rill_kv_cache_t *kv = *kvp;
    rill_backend_free(kv->be, kv->mem);
    rill_free(kv->pools);
    rill_free(kv);
    *kvp = NULL;
}

const rill_kv_layout_t *rill_kv_cache_layout(const rill_kv_cache_t *kv) {
    return &kv->layout;
}

void *rill_kv_cache_pool(rill_kv_cache_t *kv, int32_t layer) {
    if (layer < 0 || layer >= kv->n_layer) {
        return NULL;
    }
    return (char *)kv->mem + (int64_t)layer * kv->pool_bytes;
}

int64_t rill_kv_cache_bytes(const rill_kv_cache_t *kv) {
    return kv->pool_bytes * kv->n_layer;
}

rill_err_t rill_kv_cache_copy_pages(rill_kv_cache_t *kv, const int32_t *src, const int32_t *dst,
                                    int32_t n) {
    if (kv == NULL) {
        return RILL_EINVAL;
    }
    rill_err_t err =
        rill_backend_kv_copy_pages(kv->be, &kv->layout, kv->pools, kv->n_layer, src, dst, n);
    if (err != RILL_OK) {
        rill__error(err, "page copy: %s", rill_last_error(err));
    }
    return err;
}

/* ---- the pass ---- */

static rill_err_t fail(rill_forward_t *fw, rill_err_t err, const char *what) {
    (void)fw;
    return rill__error(err, "%s: %s", what, rill_last_error(err));
}

/* One transformer block over the installed batch of T tokens. */
static rill_err_t block(rill_forward_t *fw, const layer_t *ly, const rill_kv_layout_t *layout,
                        void *pool, int64_t T) {
    const rill_hparams_t *hp = &fw->hp;
    rill_backend_t *b = fw->be;
    int64_t E = hp->n_embd;
    rill_err_t err;
    if ((err = rill_backend_rms_norm(b, fw->n, fw->x, ly->attn_norm, T, E, hp->rms_eps)) ||
        (err = rill_backend_matmul(b, fw->q, fw->n, ly->wq, T)) ||
        (err = rill_backend_matmul(b, fw->k, fw->n, ly->wk, T)) ||
        (err = rill_backend_matmul(b, fw->v, fw->n, ly->wv, T))) {
        return fail(fw, err, "attention input");
    }
    if ((ly->bq != NULL && (err = rill_backend_add_bias(b, fw->q, ly->bq, T))) ||
        (ly->bk != NULL && (err = rill_backend_add_bias(b, fw->k, ly->bk, T))) ||
        (ly->bv != NULL && (err = rill_backend_add_bias(b, fw->v, ly->bv, T)))) {
        return fail(fw, err, "q/k/v bias");
    }
    if ((err = rill_backend_rope(b, fw->q, hp->n_head, hp->head_dim, &fw->rope)) ||
        (err = rill_backend_rope(b, fw->k, hp->n_head_kv, hp->head_dim, &fw->rope))) {
        return fail(fw, err, "rope");
    }
    if ((err = rill_backend_kv_store(b, layout, pool, fw->k, fw->v)) ||
        (err = rill_backend_attention(b, layout, pool, fw->att, fw->q, hp->n_head))) {
        return fail(fw, err, "attention");
    }
    /* The output projection reuses n as its destination: n is dead until the FFN norm. */
    if ((err = rill_backend_matmul(b, fw->n, fw->att, ly->wo, T)) ||
        (err = rill_backend_add(b, fw->x, fw->x, fw->n, T * E))) {
        return fail(fw, err, "attention output");
    }
    if ((err = rill_backend_rms_norm(b, fw->n, fw->x, ly->ffn_norm, T, E, hp->rms_eps)) ||
        (err = rill_backend_matmul(b, fw->gate, fw->n, ly->gate, T)) ||
        (err = rill_backend_matmul(b, fw->up, fw->n, ly->up, T)) ||
        (err = rill_backend_swiglu(b, fw->gate, fw->gate, fw->up, T * hp->n_ff)) ||
        (err = rill_backend_matmul(b, fw->n, fw->gate, ly->down, T)) ||
        (err = rill_backend_add(b, fw->x, fw->x, fw->n, T * E))) {
        return fail(fw, err, "feed-forward");
    }
    return RILL_OK;
}

/* Logits of rows[0, n) (batch token indices) into fw->logits (n <= max_logits). */
static rill_err_t project(rill_forward_t *fw, const int32_t *rows, int32_t n) {
    rill_backend_t *b = fw->be;
    int64_t E = fw->hp.n_embd;
    rill_err_t err;
    for (int32_t j = 0; j < n; j++) {
        err = rill_backend_copy(b, fw->xo + (int64_t)j * E, fw->x + (int64_t)rows[j] * E,
                                (size_t)E * sizeof(float));
        if (err != RILL_OK) {
            return fail(fw, err, "gather output rows");
        }
    }
    if ((err = rill_backend_rms_norm(b, fw->xo, fw->xo, fw->out_norm, n, E, fw->hp.rms_eps)) ||
        (err = rill_backend_matmul(b, fw->logits, fw->xo,
                                   fw->output != NULL ? fw->output : fw->tok_embd, n))) {
        return fail(fw, err, "output");
    }
    return RILL_OK;
}

/* Logits of the requested rows to the host, or (ids != NULL) their arg-max ids into backend
 * memory; max_logits rows per output matmul. */
static rill_err_t output(rill_forward_t *fw, const int32_t *rows, int32_t n_out, float *host,
                         int32_t *ids) {
    int64_t V = fw->hp.n_vocab;
    rill_err_t err;
    for (int32_t j0 = 0; j0 < n_out; j0 += fw->max_logits) {
        int32_t n = n_out - j0 < fw->max_logits ? n_out - j0 : fw->max_logits;
        if ((err = project(fw, rows + j0, n)) != RILL_OK) {
            return err;
        }
        err = ids != NULL ? rill_backend_argmax_resident(fw->be, fw->logits, n, V, ids + j0)
                          : rill_backend_copy_out(fw->be, host + (int64_t)j0 * V, fw->logits,
                                                  (size_t)(n * V) * sizeof(float));
        if (err != RILL_OK) {
            return fail(fw, err, ids != NULL ? "arg-max" : "output");
        }
    }
    return RILL_OK;
}

/* The checks both evals share: the batch's size and the output rows. */
static rill_err_t check_batch(rill_forward_t *fw, const rill_batch_t *batch,
                              const int32_t *out_rows, int32_t n_out) {
    int64_t T = batch->n_tok;
    if (T < 1) {
        return rill__error(RILL_EINVAL, "empty batch");
    }
    if (T > fw->max_batch) {
        return rill__error(RILL_ERANGE, "batch of %lld tokens exceeds max_batch %d", (long long)T,
                           fw->max_batch);
    }
    for (int32_t j = 0; j < n_out; j++) {
        if (out_rows[j] < 0 || out_rows[j] >= T) {
            return rill__error(RILL_EINVAL, "output row %d outside the batch", out_rows[j]);
        }
    }
    return RILL_OK;
}

static rill_err_t check_host_tokens(rill_forward_t *fw, const int32_t *tokens, int64_t T) {
    for (int64_t i = 0; i < T; i++) {
        if (tokens[i] < 0 || tokens[i] >= fw->hp.n_vocab) {
            return rill__error(RILL_EINVAL,
                               "token %d at batch index %lld is outside the "
                               "vocabulary [0, %d)",
                               tokens[i], (long long)i, fw->hp.n_vocab);
        }
    }
    return RILL_OK;
}

/* Embedding and every layer of the batch; tokens from the host or (tokens_host NULL) from
 * backend memory. */
static rill_err_t run_layers(rill_forward_t *fw, rill_kv_cache_t *kv, const rill_batch_t *batch,
                             const int32_t *tokens_host, const int32_t *tokens_resident) {
    const int64_t T = batch->n_tok;
    rill_err_t err = rill_backend_set_batch(fw->be, batch);
    if (err != RILL_OK) {
        return fail(fw, err, "batch");
    }
    err = tokens_host != NULL
              ? rill_backend_get_rows(fw->be, fw->x, fw->tok_embd, tokens_host, T)
              : rill_backend_get_rows_resident(fw->be, fw->x, fw->tok_embd, tokens_resident, T);
    if (err != RILL_OK) {
        return fail(fw, err,
                    tokens_host != NULL ? "embedding"
                                        : "embedding (a resident id is outside the "
                                          "vocabulary)");
    }
    for (int32_t l = 0; l < fw->hp.n_layer; l++) {
        if (fw->cancel != NULL && atomic_load_explicit(fw->cancel, memory_order_acquire) != 0) {
            return rill__error(RILL_ECANCELED, "cancelled before layer %d", l);
        }
        err = block(fw, &fw->layers[l], &kv->layout, rill_kv_cache_pool(kv, l), T);
        if (err != RILL_OK) {
            return err;
        }
    }
    return RILL_OK;
}

rill_err_t rill_forward_eval(rill_forward_t *fw, rill_kv_cache_t *kv, const rill_batch_t *batch,
                             const int32_t *tokens, const int32_t *out_rows, int32_t n_out,
                             float *logits_host) {
    if (fw == NULL || kv == NULL || batch == NULL || tokens == NULL || n_out < 0 ||
        (n_out > 0 && (out_rows == NULL || logits_host == NULL)) || kv->owner != (const void *)fw) {
        return RILL_EINVAL;
    }
    rill_err_t err = check_batch(fw, batch, out_rows, n_out);
    if (err == RILL_OK) {
        err = check_host_tokens(fw, tokens, batch->n_tok);
    }
    if (err == RILL_OK) {
        err = run_layers(fw, kv, batch, tokens, NULL);
    }
    if (err == RILL_OK && n_out > 0) {
        err = output(fw, out_rows, n_out, logits_host, NULL);
    }
    return err;
}

rill_err_t rill_forward_eval_ids(rill_forward_t *fw, rill_kv_cache_t *kv, const rill_batch_t *batch,
                                 const int32_t *tokens_host, const rill_forward_ids_t *tokens,
                                 const int32_t *out_rows, int32_t n_out, rill_forward_ids_t *next) {
    if (fw == NULL || kv == NULL || batch == NULL || next == NULL || out_rows == NULL ||
        n_out < 1 || kv->owner != (const void *)fw || next->fw != fw) {
        return RILL_EINVAL;
    }
    if ((tokens_host == NULL) == (tokens == NULL)) {
        return rill__error(RILL_EINVAL, "give the tokens either from the host or resident");
    }
    if (tokens != NULL && (tokens->fw != fw || tokens->count < batch->n_tok)) {
        return rill__error(
            RILL_EINVAL,
            "the resident tokens (%d ids) do not cover the batch's %d tokens, or belong to "
            "another forward",
            tokens->count, batch->n_tok);
    }
    if (n_out > next->capacity) {
        return rill__error(RILL_ERANGE, "%d output rows exceed the id buffer's capacity %d", n_out,
                           next->capacity);
    }
    rill_err_t err = check_batch(fw, batch, out_rows, n_out);
    if (err == RILL_OK && tokens_host != NULL) {
        err = check_host_tokens(fw, tokens_host, batch->n_tok);
    }
    if (err != RILL_OK) {
        return err;
    }
    err = run_layers(fw, kv, batch, tokens_host, tokens != NULL ? tokens->ids : NULL);
    if (err == RILL_OK) {
        err = output(fw, out_rows, n_out, NULL, next->ids);
    }
    next->count = err == RILL_OK ? n_out : 0;
    return err;
}

/* ---- resident ids ---- */

rill_err_t rill_forward_ids_new(rill_forward_t *fw, int32_t capacity, rill_forward_ids_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (fw == NULL || capacity < 1 || capacity > fw->max_batch) {
        return RILL_EINVAL;
    }
    rill_forward_ids_t *ids = rill_calloc(RILL_MEM_MODEL, 1, sizeof *ids);
    if (ids == NULL) {
        return RILL_ENOMEM;
    }
    rill_err_t err =
        rill_backend_alloc(fw->be, (size_t)capacity * sizeof(int32_t), (void **)&ids->ids);
    if (err != RILL_OK) {
        rill_free(ids);
        return err;
    }
    ids->fw = fw;
    ids->capacity = capacity;
    *out = ids;
    return RILL_OK;
}

void rill_forward_ids_destroy(rill_forward_ids_t **idp) {
    if (idp == NULL || *idp == NULL) {
        return;
    }
    rill_backend_free((*idp)->fw->be, (*idp)->ids);
    rill_free(*idp);
    *idp = NULL;
}

int32_t rill_forward_ids_count(const rill_forward_ids_t *ids) {
    return ids != NULL ? ids->count : 0;
}

rill_err_t rill_forward_ids_read(rill_forward_ids_t *ids, int32_t *host_out, int32_t n) {
    if (ids == NULL || (host_out == NULL && n > 0) || n < 0) {
        return RILL_EINVAL;
    }
    if (n > ids->count) {
        return RILL_ERANGE;
    }
    return rill_backend_copy_out(ids->fw->be, host_out, ids->ids, (size_t)n * sizeof(int32_t));
}

rill_err_t rill_forward_ids_write(rill_forward_ids_t *ids, const int32_t *host, int32_t n) {
    if (ids == NULL || host == NULL || n < 1) {
        return RILL_EINVAL;
    }
    if (n > ids->capacity) {
        return RILL_ERANGE;
    }
    rill_err_t err = rill_backend_copy_in(ids->fw->be, ids->ids, host, (size_t)n * sizeof(int32_t));
    ids->count = err == RILL_OK ? n : ids->count;
    return err;
}

void rill_forward_set_cancel(rill_forward_t *fw, const atomic_int *flag) {
    if (fw != NULL) {
        fw->cancel = flag;
    }
}

rill_err_t rill_forward_eval_sequence(rill_forward_t *fw, rill_kv_cache_t *kv,
                                      const rill_page_table_t *pt, int32_t pos0,
                                      const int32_t *tokens, int32_t n, bool all,
                                      float *logits_host) {
    if (fw == NULL || kv == NULL || pt == NULL || tokens == NULL || n < 1 || pos0 < 0) {
        return RILL_EINVAL;
    }
    if ((int64_t)pos0 + n > (int64_t)pt->n_pages * kv->layout.page_size) {
        return rill__error(RILL_ERANGE, "positions [%d, %lld) exceed the page table (%d slots)",
                           pos0, (long long)pos0 + n, pt->n_pages * kv->layout.page_size);
    }
    int64_t V = fw->hp.n_vocab;
    for (int32_t i0 = 0; i0 < n; i0 += fw->max_batch) {
        int32_t m = n - i0 < fw->max_batch ? n - i0 : fw->max_batch;
        for (int32_t i = 0; i < m; i++) {
            int32_t p = pos0 + i0 + i;
            fw->seq_tok[i] = (rill_batch_token_t){ .seq = 0, .pos = p, .slot = p, .n_kv = p + 1 };
        }
        int32_t n_out = 0;
        float *dst = NULL;
        if (logits_host != NULL && all) {
            for (int32_t i = 0; i < m; i++) {
                fw->seq_rows[i] = i;
            }
            n_out = m;
            dst = logits_host + (int64_t)i0 * V;
        } else if (logits_host != NULL && i0 + m == n) {
            fw->seq_rows[0] = m - 1;
            n_out = 1;
            dst = logits_host;
        }
        rill_batch_t b = { .n_tok = m, .tok = fw->seq_tok, .n_seq = 1, .seq = pt };
        rill_err_t err = rill_forward_eval(fw, kv, &b, tokens + i0, fw->seq_rows, n_out, dst);
        if (err != RILL_OK) {
            return err;
        }
    }
    return RILL_OK;
}
