/*
 * whisper.c - Whisper's encoder and decoder over the backend interface.
 *
 * Shapes (letters of rill_whisper.h): mel (M, 2Ta) channel-major on the host; every activation
 * time- or token-major (rows of d floats), as the backend's matmul produces them.
 *
 * Encoder, once per window:
 *   c = gelu(conv1(mel) + b1)                 im2col (2Ta, 3M) . W1^T -> (2Ta, d)
 *   x = gelu(conv2(c) + b2) + pos             im2col stride 2 (Ta, 3d) . W2^T -> (Ta, d)
 *   per layer: n = LN(x); q, k, v = n Wq^T + bq, ...; x += attn_dense(q, k, v) Wo^T + bo
 *              n = LN(x); x += gelu(n W1^T + b1) W2^T + b2
 *   enc = LN_enc(x); per decoder layer l: K_l = enc Wk_l^T + bk_l, V_l = enc Wv_l^T + bv_l
 * Decoder, per batch of T tokens:
 *   x = embd[tok] + pos[p]
 *   per layer: n = LN(x); q, k, v; store k, v in the paged cache; x += attn(q, cache) Wo^T + bo
 *              n = LN(x); q = n Wq^T + bq; x += attn_dense(q, K_l, V_l of the token's window)
 *              Wo^T + bo;  FFN as the encoder's
 *   logits (rows asked) = LN_dec(x) embd^T (tied)
 * The paged attention is the LLM's (rill_backend_attention) without RoPE: Whisper's decoder
 * positions are added to the embeddings, so keys are stored as projected.
 *
 * The matmuls are split into chunks of the backend's max_batch rows (the encoder has 1500 to
 * 3000): a matmul's rows are independent, so the chunking changes no value beyond the kernel
 * choice the backend documents (F32/F16 matmuls use the same kernel for every chunk of 2+ rows).
 *
 * Weights: views of the model's mapping, or (f32_weights) f32 copies made once at creation;
 * CTranslate2 with compute_type float32 does the same conversion at load, which is why the
 * default matches the oracle best. Rejected: keeping F16 and converting per matmul (costs every
 * pass what a one-time copy costs once); fusing Q|K|V into one matmul (the file stores them
 * fused, but three matmuls of d rows do the same work and give contiguous q, k, v with no
 * strided attention op).
 *
 * Nothing here touches activation memory from the host: every buffer is a backend pointer; only
 * the mel features go in and the logits (or the encoder output, for tests) come out.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "forward_internal.h"
#include "rill_alloc.h"
#include "rill_log.h"
#include "rill_quant.h"
#include "rill_whisper.h"

typedef struct attn_w {
    rill_weight_t *ln_g, *ln_b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo;
} attn_w_t;

typedef struct ffn_w {
    rill_weight_t *ln_g, *ln_b, *w1, *b1, *w2, *b2;
} ffn_w_t;

typedef struct enc_layer {
    attn_w_t a;
    ffn_w_t f;
} enc_layer_t;

typedef struct dec_layer {
    attn_w_t s, c;
    ffn_w_t f;
} dec_layer_t;

struct rill_whisper {
    rill_model_t *model;
    rill_backend_t *be;
    rill_whisper_hparams_t hp;
    rill_tokenizer_t *tok;
    int32_t max_batch, max_logits, mm_rows, Ta, d, D;
    bool f32_weights;

    rill_weight_t *conv1_w, *conv1_b, *conv2_w, *conv2_b, *enc_pos, *enc_ln_g, *enc_ln_b;
    rill_weight_t *embd, *dec_pos, *dec_ln_g, *dec_ln_b;
    enc_layer_t *enc; /* [n_audio_layer] */
    dec_layer_t *dec; /* [n_text_layer] */
    float **owned;    /* host f32 copies of widened weights */
    int32_t n_owned, cap_owned;

    /* backend memory: one arena */
    void *arena;
    float *mel;                                    /* (M, 2Ta) */
    float *c1;                                     /* (2Ta, d) */
    float *ex, *en, *eq, *ek, *ev, *ea;            /* (Ta, d) */
    float *eff;                                    /* im2col rows and the FFN hidden layer */
    float *dx, *dn, *dq, *dk, *dv, *da, *dff, *xo; /* decoder: (T, d), (T, F), (L, d) */
    float *logits;                                 /* (L, V) */

    /* host */
    int32_t *ids;             /* [max(Ta, T)] scratch ids: 0..Ta-1 for the encoder positions */
    int32_t *pos_ids;         /* [T] the batch's positions */
    float *glogits;           /* greedy: 2 rows of V */
    rill_kv_cache_t *gkv;     /* greedy: n_text_ctx positions */
    int32_t *gpages;          /* its identity page table */
    rill_batch_token_t *gtok; /* [n_text_ctx] */
};

struct rill_whisper_window {
    rill_whisper_t *w;
    void *mem;
    float *enc;     /* (Ta, d) */
    float **k, **v; /* host arrays of n_text_layer backend pointers: (Ta, d) each */
    bool encoded;
};

rill_whisper_params_t rill_whisper_default_params(void) {
    rill_whisper_params_t p = { 0, 4, true };
    return p;
}

rill_whisper_greedy_params_t rill_whisper_greedy_default_params(void) {
    rill_whisper_greedy_params_t p = {
        .language = NULL, .max_tokens = 0, .timestamps = false, .max_initial_ms = 0, .window_ms = 0
    };
    return p;
}

/* ---- weights ---- */

static rill_err_t prep(rill_whisper_t *w, const rill_model_tensor_t *t, rill_weight_t **out) {
    *out = NULL;
    const bool widen =
        w->f32_weights && (t->dtype == RILL_DTYPE_F16 || t->dtype == RILL_DTYPE_BF16);
    if (!widen) {
        return rill_weight_new(w->be, t->dtype, t->data, t->ne0, t->ne1, out);
    }
    RILL_ASSERT(w->n_owned < w->cap_owned);
    float *f = rill_malloc(RILL_MEM_MODEL, (size_t)(t->ne0 * t->ne1) * sizeof(float));
    if (f == NULL) {
        return RILL_ENOMEM;
    }
    for (int64_t r = 0; r < t->ne1; r++) {
        (void)rill_dequantize_row(t->dtype, (const char *)t->data + (size_t)r * t->row_bytes,
                                  f + r * t->ne0, t->ne0);
    }
    w->owned[w->n_owned++] = f;
    return rill_weight_new(w->be, RILL_DTYPE_F32, f, t->ne0, t->ne1, out);
}

static rill_err_t prep_attn(rill_whisper_t *w, const rill_whisper_attn_weights_t *s, attn_w_t *a) {
    rill_err_t err;
    RILL_TRY(prep(w, &s->ln_gamma, &a->ln_g));
    RILL_TRY(prep(w, &s->ln_beta, &a->ln_b));
    RILL_TRY(prep(w, &s->wq, &a->wq));
    RILL_TRY(prep(w, &s->bq, &a->bq));
    RILL_TRY(prep(w, &s->wk, &a->wk));
    RILL_TRY(prep(w, &s->bk, &a->bk));
    RILL_TRY(prep(w, &s->wv, &a->wv));
    RILL_TRY(prep(w, &s->bv, &a->bv));
    RILL_TRY(prep(w, &s->wo, &a->wo));
    RILL_TRY(prep(w, &s->bo, &a->bo));
cleanup:
    return err;
}

static rill_err_t prep_ffn(rill_whisper_t *w, const rill_whisper_ffn_weights_t *s, ffn_w_t *f) {
    rill_err_t err;
    RILL_TRY(prep(w, &s->ln_gamma, &f->ln_g));
    RILL_TRY(prep(w, &s->ln_beta, &f->ln_b));
    RILL_TRY(prep(w, &s->w1, &f->w1));
    RILL_TRY(prep(w, &s->b1, &f->b1));
    RILL_TRY(prep(w, &s->w2, &f->w2));
    RILL_TRY(prep(w, &s->b2, &f->b2));
cleanup:
    return err;
}

static void free_attn(attn_w_t *a) {
    rill_weight_t **all[] = { &a->ln_g, &a->ln_b, &a->wq, &a->bq, &a->wk,
                              &a->bk,   &a->wv,   &a->bv, &a->wo, &a->bo };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        rill_weight_destroy(all[i]);
    }
}

static void free_ffn(ffn_w_t *f) {
    rill_weight_t **all[] = { &f->ln_g, &f->ln_b, &f->w1, &f->b1, &f->w2, &f->b2 };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        rill_weight_destroy(all[i]);
    }
}

static void free_weights(rill_whisper_t *w) {
    rill_weight_t **top[] = { &w->conv1_w, &w->conv1_b,  &w->conv2_w,  &w->conv2_b,
                              &w->enc_pos, &w->enc_ln_g, &w->enc_ln_b, &w->embd,
                              &w->dec_pos, &w->dec_ln_g, &w->dec_ln_b };
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++) {
        rill_weight_destroy(top[i]);
    }
    for (int32_t l = 0; w->enc != NULL && l < w->hp.n_audio_layer; l++) {
        free_attn(&w->enc[l].a);
        free_ffn(&w->enc[l].f);
    }
    for (int32_t l = 0; w->dec != NULL && l < w->hp.n_text_layer; l++) {
        free_attn(&w->dec[l].s);
        free_attn(&w->dec[l].c);
        free_ffn(&w->dec[l].f);
    }
    rill_free(w->enc);
    rill_free(w->dec);
    w->enc = NULL;
    w->dec = NULL;
    for (int32_t i = 0; i < w->n_owned; i++) {
        rill_free(w->owned[i]);
    }
    rill_free(w->owned);
    w->owned = NULL;
    w->n_owned = 0;
}

static rill_err_t prep_weights(rill_whisper_t *w) {
    const rill_whisper_weights_t *s = rill_model_whisper_weights(w->model);
    const rill_whisper_hparams_t *hp = &w->hp;
    rill_err_t err = RILL_OK;
    w->cap_owned = 8 + 8 * hp->n_audio_layer + 12 * hp->n_text_layer;
    w->owned = rill_calloc(RILL_MEM_MODEL, (size_t)w->cap_owned, sizeof *w->owned);
    w->enc = rill_calloc(RILL_MEM_MODEL, (size_t)hp->n_audio_layer, sizeof *w->enc);
    w->dec = rill_calloc(RILL_MEM_MODEL, (size_t)hp->n_text_layer, sizeof *w->dec);
    if (w->owned == NULL || w->enc == NULL || w->dec == NULL) {
        return RILL_ENOMEM;
    }
    RILL_TRY(prep(w, &s->conv1_w, &w->conv1_w));
    RILL_TRY(prep(w, &s->conv1_b, &w->conv1_b));
    RILL_TRY(prep(w, &s->conv2_w, &w->conv2_w));
    RILL_TRY(prep(w, &s->conv2_b, &w->conv2_b));
    RILL_TRY(prep(w, &s->enc_pos, &w->enc_pos));
    RILL_TRY(prep(w, &s->enc_ln_gamma, &w->enc_ln_g));
    RILL_TRY(prep(w, &s->enc_ln_beta, &w->enc_ln_b));
    RILL_TRY(prep(w, &s->dec_embd, &w->embd));
    RILL_TRY(prep(w, &s->dec_pos, &w->dec_pos));
    RILL_TRY(prep(w, &s->dec_ln_gamma, &w->dec_ln_g));
    RILL_TRY(prep(w, &s->dec_ln_beta, &w->dec_ln_b));
    for (int32_t l = 0; l < hp->n_audio_layer; l++) {
        RILL_TRY(prep_attn(w, &s->enc_layers[l].attn, &w->enc[l].a));
        RILL_TRY(prep_ffn(w, &s->enc_layers[l].ffn, &w->enc[l].f));
    }
    for (int32_t l = 0; l < hp->n_text_layer; l++) {
        RILL_TRY(prep_attn(w, &s->dec_layers[l].self_attn, &w->dec[l].s));
        RILL_TRY(prep_attn(w, &s->dec_layers[l].cross_attn, &w->dec[l].c));
        RILL_TRY(prep_ffn(w, &s->dec_layers[l].ffn, &w->dec[l].f));
    }
cleanup:
    return err;
}

/* ---- buffers ---- */

static size_t floats_bytes(int64_t n) {
    return (size_t)((n * 4 + 63) / 64 * 64); /* each buffer starts cache-line aligned */
}

static int64_t max3(int64_t a, int64_t b, int64_t c) {
    const int64_t m = a > b ? a : b;
    return m > c ? m : c;
}

static rill_err_t alloc_buffers(rill_whisper_t *w) {
    const rill_whisper_hparams_t *hp = &w->hp;
    const int64_t Ta = w->Ta, d = w->d, M = hp->n_mels, T = w->max_batch, L = w->max_logits;
    const int64_t Fa = hp->n_audio_ff, Ft = hp->n_text_ff, V = hp->n_vocab;
    const int64_t sizes[] = {
        M * 2 * Ta, 2 * Ta * d, Ta * d,
        Ta * d,     Ta * d,     Ta * d,
        Ta * d,     Ta * d,     max3(Ta * Fa, 2 * Ta * 3 * M, Ta * 3 * d),
        T * d,      T * d,      T * d,
        T * d,      T * d,      T * d,
        T * Ft,     L * d,      L * V,
    };
    float **dst[] = {
        &w->mel, &w->c1, &w->ex, &w->en, &w->eq, &w->ek, &w->ev,  &w->ea, &w->eff,
        &w->dx,  &w->dn, &w->dq, &w->dk, &w->dv, &w->da, &w->dff, &w->xo, &w->logits
    };
    _Static_assert(sizeof sizes / sizeof sizes[0] == sizeof dst / sizeof dst[0], "buffers");
    size_t total = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        total += floats_bytes(sizes[i]);
    }
    rill_err_t err = rill_backend_alloc(w->be, total, &w->arena);
    if (err != RILL_OK) {
        return err;
    }
    size_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        *dst[i] = (float *)((char *)w->arena + off);
        off += floats_bytes(sizes[i]);
    }
    const int64_t n_ids = Ta > T ? Ta : T;
    w->ids = rill_malloc(RILL_MEM_MODEL, (size_t)n_ids * sizeof *w->ids);
    w->pos_ids = rill_malloc(RILL_MEM_MODEL, (size_t)T * sizeof *w->pos_ids);
    w->glogits = rill_malloc(RILL_MEM_MODEL, (size_t)(2 * V) * sizeof *w->glogits);
    const int32_t P = RILL_KV_PAGE_SIZE, n_pages = (hp->n_text_ctx + P - 1) / P;
    w->gpages = rill_malloc(RILL_MEM_MODEL, (size_t)n_pages * sizeof *w->gpages);
    w->gtok = rill_malloc(RILL_MEM_MODEL, (size_t)hp->n_text_ctx * sizeof *w->gtok);
    if (w->ids == NULL || w->pos_ids == NULL || w->glogits == NULL || w->gpages == NULL ||
        w->gtok == NULL) {
        return RILL_ENOMEM;
    }
    for (int64_t i = 0; i < n_ids; i++) {
        w->ids[i] = (int32_t)i;
    }
    for (int32_t i = 0; i < n_pages; i++) {
        w->gpages[i] = i;
    }
    return rill_whisper_kv_cache_new(w, RILL_DTYPE_F32, P, n_pages, &w->gkv);
}

rill_err_t rill_whisper_new(rill_model_t *model, rill_backend_t *backend,
                            const rill_whisper_params_t *params, rill_whisper_t **out) {
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "whisper: NULL out");
    }
    *out = NULL;
    if (model == NULL || backend == NULL) {
        return rill__error(RILL_EINVAL, "whisper: NULL model or backend");
    }
    const rill_whisper_hparams_t *hp = rill_model_whisper_hparams(model);
    if (hp == NULL) {
        return rill__error(RILL_EUNSUPPORTED, "whisper: the model's architecture is %s",
                           rill_arch_name(rill_model_hparams(model)->arch));
    }
    rill_whisper_params_t p = params != NULL ? *params : rill_whisper_default_params();
    const int32_t be_batch = rill_backend_max_batch(backend);
    if (p.max_batch == 0) {
        p.max_batch = be_batch < hp->n_text_ctx ? be_batch : hp->n_text_ctx;
    }
    if (p.max_batch < 1 || p.max_batch > be_batch || p.max_logits < 1 || p.max_logits > be_batch) {
        return rill__error(RILL_EINVAL,
                           "whisper: max_batch %d / max_logits %d outside [1, backend max_batch "
                           "%d]",
                           p.max_batch, p.max_logits, be_batch);
    }
    const int64_t widest = max3(3 * (int64_t)hp->n_mels, 3 * (int64_t)hp->n_audio_state,
                                hp->n_audio_ff > hp->n_text_ff ? hp->n_audio_ff : hp->n_text_ff);
    if (widest > rill_backend_max_n_in(backend) || hp->n_audio_state != hp->n_text_state) {
        return rill__error(RILL_EUNSUPPORTED,
                           "whisper: matmul inputs up to %lld wide (backend max_n_in %lld), audio "
                           "state %d, text state %d (must be equal)",
                           (long long)widest, (long long)rill_backend_max_n_in(backend),
                           hp->n_audio_state, hp->n_text_state);
    }
    rill_whisper_t *w = rill_calloc(RILL_MEM_MODEL, 1, sizeof *w);
    if (w == NULL) {
        return rill__error(RILL_ENOMEM, "whisper: out of memory");
    }
    w->model = rill_model_retain(model);
    w->be = backend;
    w->hp = *hp;
    w->max_batch = p.max_batch;
    w->max_logits = p.max_logits;
    w->mm_rows = be_batch;
    w->f32_weights = p.f32_weights;
    w->Ta = hp->n_audio_ctx;
    w->d = hp->n_audio_state;
    w->D = hp->n_audio_state / hp->n_audio_head;
    rill_err_t err = rill_tokenizer_new(rill_model_gguf(model), &w->tok);
    if (err != RILL_OK) {
        err = rill__error(err, "whisper: tokenizer: %s", rill_last_error(err));
        goto cleanup;
    }
    if ((err = prep_weights(w)) != RILL_OK || (err = alloc_buffers(w)) != RILL_OK) {
        err = rill__error(err, "whisper: %s", rill_last_error(err));
        goto cleanup;
    }
    *out = w;
    return RILL_OK;
cleanup:
    rill_whisper_destroy(&w);
    return err;
}

void rill_whisper_destroy(rill_whisper_t **wp) {
    if (wp == NULL || *wp == NULL) {
        return;
    }
    rill_whisper_t *w = *wp;
    rill_kv_cache_destroy(&w->gkv);
    free_weights(w);
    rill_backend_free(w->be, w->arena);
    rill_free(w->ids);
    rill_free(w->pos_ids);
    rill_free(w->glogits);
    rill_free(w->gpages);
    rill_free(w->gtok);
    rill_tokenizer_destroy(&w->tok);
    rill_model_destroy(&w->model);
    rill_free(w);
    *wp = NULL;
}

const rill_whisper_hparams_t *rill_whisper_hparams(const rill_whisper_t *w) {
    return w != NULL ? &w->hp : NULL;
}

const rill_tokenizer_t *rill_whisper_tokenizer(const rill_whisper_t *w) {
    return w != NULL ? w->tok : NULL;
}

rill_backend_t *rill_whisper_backend(rill_whisper_t *w) {
    return w != NULL ? w->be : NULL;
}

int32_t rill_whisper_n_frames(const rill_whisper_t *w) {
    return w != NULL ? 2 * w->Ta : 0;
}

rill_err_t rill_whisper_kv_cache_new(rill_whisper_t *w, rill_dtype_t dtype, int32_t page_size,
                                     int32_t n_pages, rill_kv_cache_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (w == NULL) {
        return RILL_EINVAL;
    }
    return rill__kv_cache_new(w->be, w, w->hp.n_text_layer, w->hp.n_text_head, w->D, dtype,
                              page_size, n_pages, out);
}

/* ---- windows ---- */

rill_err_t rill_whisper_window_new(rill_whisper_t *w, rill_whisper_window_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    *out = NULL;
    if (w == NULL) {
        return RILL_EINVAL;
    }
    const int32_t L = w->hp.n_text_layer;
    const size_t one = floats_bytes((int64_t)w->Ta * w->d);
    rill_whisper_window_t *win = rill_calloc(RILL_MEM_MODEL, 1, sizeof *win);
    if (win == NULL) {
        return RILL_ENOMEM;
    }
    win->w = w;
    win->k = rill_calloc(RILL_MEM_MODEL, (size_t)L, sizeof *win->k);
    win->v = rill_calloc(RILL_MEM_MODEL, (size_t)L, sizeof *win->v);
    rill_err_t err = win->k == NULL || win->v == NULL
                         ? RILL_ENOMEM
                         : rill_backend_alloc(w->be, one * (1 + 2 * (size_t)L), &win->mem);
    if (err != RILL_OK) {
        rill_free(win->k);
        rill_free(win->v);
        rill_free(win);
        return err;
    }
    win->enc = win->mem;
    for (int32_t l = 0; l < L; l++) {
        win->k[l] = (float *)((char *)win->mem + one * (1 + 2 * (size_t)l));
        win->v[l] = (float *)((char *)win->mem + one * (2 + 2 * (size_t)l));
    }
    *out = win;
    return RILL_OK;
}

void rill_whisper_window_destroy(rill_whisper_window_t **winp) {
    if (winp == NULL || *winp == NULL) {
        return;
    }
    rill_whisper_window_t *win = *winp;
    rill_backend_free(win->w->be, win->mem);
    rill_free(win->k);
    rill_free(win->v);
    rill_free(win);
    *winp = NULL;
}

bool rill_whisper_window_encoded(const rill_whisper_window_t *win) {
    return win != NULL && win->encoded;
}

rill_err_t rill_whisper_window_read(const rill_whisper_window_t *win, float *host,
                                    int64_t n_floats) {
    if (win == NULL || host == NULL || !win->encoded ||
        n_floats != (int64_t)win->w->Ta * win->w->d) {
        return RILL_EINVAL;
    }
    return rill_backend_copy_out(win->w->be, host, win->enc, (size_t)n_floats * sizeof(float));
}

/* ---- the passes ---- */

static rill_err_t fail(rill_err_t err, const char *what) {
    return rill__error(err, "whisper %s: %s", what, rill_last_error(err));
}

/* y (T, O) = x (T, E) W^T (+ b), in chunks of the backend's max_batch rows. */
static rill_err_t linear(rill_whisper_t *w, float *y, const float *x, const rill_weight_t *W,
                         const rill_weight_t *b, int64_t T) {
    const int64_t E = rill_weight_ne0(W), O = rill_weight_ne1(W);
    rill_err_t err = RILL_OK;
    for (int64_t r0 = 0; r0 < T && err == RILL_OK; r0 += w->mm_rows) {
        const int64_t n = T - r0 < w->mm_rows ? T - r0 : w->mm_rows;
        err = rill_backend_matmul(w->be, y + r0 * O, x + r0 * E, W, n);
    }
    if (err == RILL_OK && b != NULL) {
        err = rill_backend_add_bias(w->be, y, b, T);
    }
    return err;
}

/* x += gelu(LN(x) W1^T + b1) W2^T + b2 over T rows; n and ff are scratch. */
static rill_err_t ffn(rill_whisper_t *w, const ffn_w_t *f, float *x, float *n, float *ff, int64_t T,
                      int64_t F) {
    const int64_t d = w->d;
    rill_err_t err;
    if ((err = rill_backend_layer_norm(w->be, n, x, f->ln_g, f->ln_b, T, d, w->hp.eps)) ||
        (err = linear(w, ff, n, f->w1, f->b1, T)) ||
        (err = rill_backend_gelu(w->be, ff, ff, T * F)) ||
        (err = linear(w, n, ff, f->w2, f->b2, T)) ||
        (err = rill_backend_add(w->be, x, x, n, T * d))) {
        return fail(err, "feed-forward");
    }
    return RILL_OK;
}

rill_err_t rill_whisper_encode(rill_whisper_t *w, const float *mel_host, int32_t n_frames,
                               rill_whisper_window_t *win) {
    if (w == NULL || mel_host == NULL || win == NULL || win->w != w) {
        return rill__error(RILL_EINVAL, "whisper encode: NULL argument or a window of another "
                                        "whisper");
    }
    const int64_t Ta = w->Ta, d = w->d, M = w->hp.n_mels, H = w->hp.n_audio_head;
    if (n_frames != 2 * Ta) {
        return rill__error(RILL_EINVAL, "whisper encode: %d mel frames, the window takes %lld",
                           n_frames, (long long)(2 * Ta));
    }
    for (int64_t i = 0; i < M * n_frames; i++) {
        if (!isfinite(mel_host[i])) {
            return rill__error(RILL_EINVAL, "whisper encode: mel value %lld is not finite",
                               (long long)i);
        }
    }
    win->encoded = false;
    rill_backend_t *b = w->be;
    rill_err_t err;
    const rill_conv1d_t cv1 = { M, 2 * Ta, 2 * Ta, 1, 3, 1, 1 }; /* channel-major mel */
    const rill_conv1d_t cv2 = { d, 2 * Ta, 1, d, 3, 2, 1 };      /* time-major conv1 output */
    if ((err = rill_backend_copy_in(b, w->mel, mel_host, (size_t)(M * n_frames) * 4)) ||
        (err = rill_backend_im2col_1d(b, w->eff, w->mel, &cv1)) ||
        (err = linear(w, w->c1, w->eff, w->conv1_w, w->conv1_b, 2 * Ta)) ||
        (err = rill_backend_gelu(b, w->c1, w->c1, 2 * Ta * d)) ||
        (err = rill_backend_im2col_1d(b, w->eff, w->c1, &cv2)) ||
        (err = linear(w, w->ex, w->eff, w->conv2_w, w->conv2_b, Ta)) ||
        (err = rill_backend_gelu(b, w->ex, w->ex, Ta * d)) ||
        (err = rill_backend_get_rows(b, w->en, w->enc_pos, w->ids, Ta)) ||
        (err = rill_backend_add(b, w->ex, w->ex, w->en, Ta * d))) {
        return fail(err, "encode (conv stem)");
    }
    for (int32_t l = 0; l < w->hp.n_audio_layer; l++) {
        const attn_w_t *a = &w->enc[l].a;
        if ((err = rill_backend_layer_norm(b, w->en, w->ex, a->ln_g, a->ln_b, Ta, d, w->hp.eps)) ||
            (err = linear(w, w->eq, w->en, a->wq, a->bq, Ta)) ||
            (err = linear(w, w->ek, w->en, a->wk, a->bk, Ta)) ||
            (err = linear(w, w->ev, w->en, a->wv, a->bv, Ta)) ||
            (err = rill_backend_attention_dense(b, w->ea, w->eq, w->ek, w->ev, Ta, Ta, (int32_t)H,
                                                w->D)) ||
            (err = linear(w, w->en, w->ea, a->wo, a->bo, Ta)) ||
            (err = rill_backend_add(b, w->ex, w->ex, w->en, Ta * d))) {
            return fail(err, "encode (self-attention)");
        }
        if ((err = ffn(w, &w->enc[l].f, w->ex, w->en, w->eff, Ta, w->hp.n_audio_ff))) {
            return err;
        }
    }
    if ((err = rill_backend_layer_norm(b, win->enc, w->ex, w->enc_ln_g, w->enc_ln_b, Ta, d,
                                       w->hp.eps))) {
        return fail(err, "encode (final norm)");
    }
    for (int32_t l = 0; l < w->hp.n_text_layer; l++) {
        const attn_w_t *c = &w->dec[l].c;
        if ((err = linear(w, win->k[l], win->enc, c->wk, c->bk, Ta)) ||
            (err = linear(w, win->v[l], win->enc, c->wv, c->bv, Ta))) {
            return fail(err, "encode (cross-attention K/V)");
        }
    }
    win->encoded = true;
    return RILL_OK;
}

/* Logits of rows[0, n) (batch token indices, n <= max_logits) into w->logits. */
static rill_err_t project(rill_whisper_t *w, const int32_t *rows, int32_t n) {
    const int64_t d = w->d;
    rill_err_t err;
    for (int32_t j = 0; j < n; j++) {
        err = rill_backend_copy(w->be, w->xo + j * d, w->dx + (int64_t)rows[j] * d,
                                (size_t)d * sizeof(float));
        if (err != RILL_OK) {
            return fail(err, "gather output rows");
        }
    }
    if ((err = rill_backend_layer_norm(w->be, w->xo, w->xo, w->dec_ln_g, w->dec_ln_b, n, d,
                                       w->hp.eps)) ||
        (err = rill_backend_matmul(w->be, w->logits, w->xo, w->embd, n))) {
        return fail(err, "output");
    }
    return RILL_OK;
}

rill_err_t rill_whisper_decode(rill_whisper_t *w, rill_kv_cache_t *kv, const rill_batch_t *batch,
                               const int32_t *tokens, const rill_whisper_window_t *const *windows,
                               const int32_t *out_rows, int32_t n_out, float *logits_host) {
    if (w == NULL || kv == NULL || batch == NULL || tokens == NULL || windows == NULL ||
        n_out < 0 || (n_out > 0 && (out_rows == NULL || logits_host == NULL)) ||
        batch->tok == NULL || kv->owner != (const void *)w) {
        return rill__error(RILL_EINVAL, "whisper decode: NULL argument or a KV cache of another "
                                        "model");
    }
    const int64_t T = batch->n_tok, d = w->d, V = w->hp.n_vocab;
    if (T < 1 || batch->n_seq < 1) {
        return rill__error(RILL_EINVAL, "whisper decode: empty batch");
    }
    if (T > w->max_batch) {
        return rill__error(RILL_ERANGE, "whisper decode: %lld tokens exceed max_batch %d",
                           (long long)T, w->max_batch);
    }
    for (int32_t s = 0; s < batch->n_seq; s++) {
        if (windows[s] == NULL || windows[s]->w != w || !windows[s]->encoded) {
            return rill__error(
                RILL_EINVAL, "whisper decode: sequence %d has no encoded window of this model", s);
        }
    }
    for (int64_t t = 0; t < T; t++) {
        const rill_batch_token_t *tk = &batch->tok[t];
        if (tokens[t] < 0 || tokens[t] >= V || tk->pos < 0 || tk->pos >= w->hp.n_text_ctx ||
            tk->seq < 0 || tk->seq >= batch->n_seq) {
            return rill__error(RILL_EINVAL,
                               "whisper decode: token %lld (id %d, position %d, sequence %d) out "
                               "of range (vocabulary %lld, n_text_ctx %d)",
                               (long long)t, tokens[t], tk->pos, tk->seq, (long long)V,
                               w->hp.n_text_ctx);
        }
        w->pos_ids[t] = tk->pos;
    }
    for (int32_t j = 0; j < n_out; j++) {
        if (out_rows[j] < 0 || out_rows[j] >= T) {
            return rill__error(RILL_EINVAL, "whisper decode: output row %d outside the batch",
                               out_rows[j]);
        }
    }
    rill_backend_t *b = w->be;
    const int32_t H = w->hp.n_text_head;
    rill_err_t err;
    if ((err = rill_backend_set_batch(b, batch)) ||
        (err = rill_backend_get_rows(b, w->dx, w->embd, tokens, T)) ||
        (err = rill_backend_get_rows(b, w->dn, w->dec_pos, w->pos_ids, T)) ||
        (err = rill_backend_add(b, w->dx, w->dx, w->dn, T * d))) {
        return fail(err, "decode (embedding)");
    }
    for (int32_t l = 0; l < w->hp.n_text_layer; l++) {
        const attn_w_t *s = &w->dec[l].s, *c = &w->dec[l].c;
        void *pool = rill_kv_cache_pool(kv, l);
        if ((err = rill_backend_layer_norm(b, w->dn, w->dx, s->ln_g, s->ln_b, T, d, w->hp.eps)) ||
            (err = linear(w, w->dq, w->dn, s->wq, s->bq, T)) ||
            (err = linear(w, w->dk, w->dn, s->wk, s->bk, T)) ||
            (err = linear(w, w->dv, w->dn, s->wv, s->bv, T)) ||
            (err = rill_backend_kv_store(b, &kv->layout, pool, w->dk, w->dv)) ||
            (err = rill_backend_attention(b, &kv->layout, pool, w->da, w->dq, H)) ||
            (err = linear(w, w->dn, w->da, s->wo, s->bo, T)) ||
            (err = rill_backend_add(b, w->dx, w->dx, w->dn, T * d))) {
            return fail(err, "decode (self-attention)");
        }
        if ((err = rill_backend_layer_norm(b, w->dn, w->dx, c->ln_g, c->ln_b, T, d, w->hp.eps)) ||
            (err = linear(w, w->dq, w->dn, c->wq, c->bq, T))) {
            return fail(err, "decode (cross-attention query)");
        }
        /* runs of consecutive tokens attending to the same window: one dense call each */
        for (int64_t t0 = 0, t1; t0 < T; t0 = t1) {
            const rill_whisper_window_t *win = windows[batch->tok[t0].seq];
            for (t1 = t0 + 1; t1 < T && windows[batch->tok[t1].seq] == win; t1++) {
            }
            err = rill_backend_attention_dense(b, w->da + t0 * d, w->dq + t0 * d, win->k[l],
                                               win->v[l], t1 - t0, w->Ta, H, w->D);
            if (err != RILL_OK) {
                return fail(err, "decode (cross-attention)");
            }
        }
        if ((err = linear(w, w->dn, w->da, c->wo, c->bo, T)) ||
            (err = rill_backend_add(b, w->dx, w->dx, w->dn, T * d))) {
            return fail(err, "decode (cross-attention output)");
        }
        if ((err = ffn(w, &w->dec[l].f, w->dx, w->dn, w->dff, T, w->hp.n_text_ff))) {
            return err;
        }
    }
    for (int32_t j0 = 0; j0 < n_out; j0 += w->max_logits) {
        const int32_t n = n_out - j0 < w->max_logits ? n_out - j0 : w->max_logits;
        if ((err = project(w, out_rows + j0, n)) != RILL_OK) {
            return err;
        }
        err = rill_backend_copy_out(b, logits_host + (int64_t)j0 * V, w->logits,
                                    (size_t)(n * V) * sizeof(float));
        if (err != RILL_OK) {
            return fail(err, "decode (logits out)");
        }
    }
    return RILL_OK;
}

/* ---- transcription ---- */

int64_t rill_whisper_prompt(const rill_whisper_t *w, const char *language, int32_t *out,
                            int32_t cap) {
    if (w == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    const rill_whisper_hparams_t *hp = &w->hp;
    int32_t p[4], n = 0;
    p[n++] = hp->tok_sot;
    if (hp->multilingual) {
        const char *code = language != NULL ? language : "en";
        int32_t i = 0;
        while (i < hp->n_langs && !rill_gguf_str_eq(hp->lang_codes[i], code)) {
            i++;
        }
        if (i == hp->n_langs) {
            return rill__error(RILL_ENOTFOUND, "whisper: the model has no language '%s'", code);
        }
        p[n++] = hp->lang_ids[i];
        p[n++] = hp->tok_transcribe;
    } else if (language != NULL && strcmp(language, "en") != 0) {
        return rill__error(RILL_ENOTFOUND, "whisper: an English-only model cannot take '%s'",
                           language);
    }
    p[n++] = hp->tok_no_timestamps;
    if (cap < n) {
        return RILL_EFULL;
    }
    memcpy(out, p, (size_t)n * sizeof *out);
    return n;
}

void rill_whisper_transcript_deinit(rill_whisper_transcript_t *t) {
    if (t == NULL) {
        return;
    }
    rill_free(t->tokens);
    rill_free(t->text);
    rill_free(t->segments);
    memset(t, 0, sizeof *t);
}

double rill_whisper_log_prob(const float *logits, int64_t V, int32_t id) {
    float m = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        m = logits[i] > m ? logits[i] : m;
    }
    if (!isfinite(m)) {
        return -INFINITY;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < V; i++) {
        sum += exp((double)logits[i] - m);
    }
    return (double)logits[id] - m - log(sum);
}

/* softmax(logits)[id] in double. */
static float prob_of(const float *logits, int64_t V, int32_t id) {
    float m = -INFINITY;
    for (int64_t i = 0; i < V; i++) {
        m = logits[i] > m ? logits[i] : m;
    }
    double sum = 0.0;
    for (int64_t i = 0; i < V; i++) {
        sum += exp((double)logits[i] - m);
    }
    return (float)(exp((double)logits[id] - m) / sum);
}

/* The suppression every greedy step applies (faster-whisper's list; begin_suppress_tokens too
 * at the first generated token). */
static void suppress(const rill_whisper_hparams_t *hp, float *logits, bool first) {
    for (int32_t i = 0; i < hp->n_suppress; i++) {
        logits[hp->suppress[i]] = -INFINITY;
    }
    const int32_t always[] = { hp->tok_transcribe, hp->tok_translate, hp->tok_sot, hp->tok_prev,
                               hp->tok_no_speech };
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++) {
        logits[always[i]] = -INFINITY;
    }
    if (first) {
        for (int32_t i = 0; i < hp->n_begin_suppress; i++) {
            logits[hp->begin_suppress[i]] = -INFINITY;
        }
    }
}

static int32_t arg_max(const float *logits, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++) {
        if (logits[i] > logits[best]) {
            best = i;
        }
    }
    return best;
}

static void set_inf(float *logits, int32_t from, int32_t to) {
    for (int32_t i = from; i < to; i++) {
        logits[i] = -INFINITY;
    }
}

int32_t rill_whisper_pick(const rill_whisper_hparams_t *hp, float *logits, bool first) {
    suppress(hp, logits, first);
    return arg_max(logits, hp->n_vocab);
}

int32_t rill_whisper_pick_timestamp(const rill_whisper_hparams_t *hp, float *logits,
                                    const int32_t *gen, int32_t n_gen, int32_t max_initial) {
    const int32_t tsb = hp->tok_timestamp_begin, V = hp->n_vocab;
    suppress(hp, logits, n_gen == 0);
    logits[hp->tok_no_timestamps] = -INFINITY;
    bool check = true;
    if (n_gen == 0) {
        /* the first token is a timestamp, at most max_initial steps in */
        set_inf(logits, 0, tsb);
        if (max_initial >= 0 && (int64_t)tsb + max_initial + 1 < V) {
            set_inf(logits, tsb + max_initial + 1, V);
        }
        check = false;
    } else {
        const int32_t last = gen[n_gen - 1];
        if (last >= tsb) {
            const int32_t pen = n_gen >= 2 ? gen[n_gen - 2] : last;
            if (pen >= tsb) {
                set_inf(logits, tsb, V); /* a pair is closed (or the first): text or eot next */
                check = false;
            } else {
                set_inf(logits, 0, hp->tok_eot); /* a segment's end: its pair's start, or eot */
            }
        }
        /* timestamps never decrease */
        for (int32_t t = n_gen - 1; t >= 0; t--) {
            if (gen[t] >= tsb) {
                set_inf(logits, tsb, gen[t]);
                break;
            }
        }
    }
    if (check) {
        /* the probability mass of all timestamps against the likeliest text token (both after
         * the rules above), compared in the logit domain: the softmax's normaliser cancels */
        float mt = -INFINITY, mx = -INFINITY;
        for (int32_t i = 0; i < tsb; i++) {
            mt = logits[i] > mt ? logits[i] : mt;
        }
        for (int32_t i = tsb; i < V; i++) {
            mx = logits[i] > mx ? logits[i] : mx;
        }
        if (isfinite(mx)) {
            double sum = 0.0;
            for (int32_t i = tsb; i < V; i++) {
                sum += exp((double)logits[i] - mx);
            }
            if ((double)mx + log(sum) > (double)mt) {
                set_inf(logits, 0, tsb);
            }
        }
    }
    return arg_max(logits, V);
}

int32_t rill_whisper_segments(const rill_whisper_hparams_t *hp, const int32_t *ids, int32_t n,
                              int32_t window_ms, rill_whisper_segment_t *segs, int32_t cap,
                              int32_t *tail, int32_t *seek_ms) {
    if (hp == NULL || n < 0 || (ids == NULL && n > 0) || segs == NULL || cap < 1 || window_ms < 0) {
        return RILL_EINVAL;
    }
    const int32_t tsb = hp->tok_timestamp_begin;
    const bool single_end = n >= 2 && ids[n - 2] < tsb && ids[n - 1] >= tsb;
    int32_t k = 0, last = 0;
    bool consecutive = false;
    for (int32_t i = 1; i <= n; i++) {
        const bool cut = i < n ? ids[i] >= tsb && ids[i - 1] >= tsb : consecutive && single_end;
        if (!cut) {
            continue;
        }
        consecutive = true;
        if (k == cap) {
            return RILL_EFULL;
        }
        /* ids[last, i) opens and closes with a timestamp */
        segs[k++] = (rill_whisper_segment_t){ .t0_ms = (ids[last] - tsb) * RILL_WHISPER_TS_MS,
                                              .t1_ms = (ids[i - 1] - tsb) * RILL_WHISPER_TS_MS,
                                              .first = last,
                                              .n_ids = i - last,
                                              .closed = true };
        last = i;
    }
    int32_t t = n, seek = window_ms;
    if (consecutive) {
        if (!single_end) {
            t = last; /* an unfinished segment: the next window starts at the last end */
            seek = (ids[last - 1] - tsb) * RILL_WHISPER_TS_MS;
        }
    } else {
        /* one segment: from the window's start to its last timestamp (unless that is 0), else
         * to the window's end */
        int32_t end = window_ms;
        for (int32_t i = n - 1; i >= 0; i--) {
            if (ids[i] >= tsb) {
                end = ids[i] > tsb ? (ids[i] - tsb) * RILL_WHISPER_TS_MS : window_ms;
                break;
            }
        }
        segs[k++] = (rill_whisper_segment_t){
            .t0_ms = 0, .t1_ms = end, .first = 0, .n_ids = n, .closed = n > 0 && ids[n - 1] >= tsb
        };
    }
    if (tail != NULL) {
        *tail = t;
    }
    if (seek_ms != NULL) {
        *seek_ms = seek;
    }
    return k;
}

/* Appends the text of ids[0, n)'s text tokens (those below eot) to *buf at *len (growing it). */
static rill_err_t append_text(const rill_tokenizer_t *tok, const rill_whisper_hparams_t *hp,
                              const int32_t *ids, int32_t n, int32_t *scratch, char **buf,
                              size_t *len, size_t *cap) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < hp->tok_eot) {
            scratch[m++] = ids[i];
        }
    }
    size_t need = 0;
    int64_t k = rill_tokenizer_decode(tok, scratch, m, RILL_TOKENIZER_DECODE_RAW, NULL, 0, &need);
    if (k < 0 && k != RILL_EFULL) {
        return (rill_err_t)k;
    }
    if (k >= 0) {
        need = (size_t)k;
    }
    if (*len + need + 1 > *cap) {
        size_t c = (*len + need + 1) * 2;
        char *g = rill_realloc(RILL_MEM_MODEL, *buf, c);
        if (g == NULL) {
            return rill__error(RILL_ENOMEM, "whisper greedy: out of memory");
        }
        *buf = g;
        *cap = c;
    }
    k = rill_tokenizer_decode(tok, scratch, m, RILL_TOKENIZER_DECODE_RAW, *buf + *len, *cap - *len,
                              NULL);
    if (k < 0) {
        return (rill_err_t)k;
    }
    *len += (size_t)k;
    (*buf)[*len] = '\0';
    return RILL_OK;
}

static bool blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r') {
            return false;
        }
    }
    return true;
}

/* With timestamps: t's tokens into faster-whisper's segments, their texts, the tail. */
static rill_err_t split_transcript(rill_whisper_t *w, int32_t window_ms,
                                   rill_whisper_transcript_t *t) {
    const int32_t cap = t->n_tokens + 1;
    t->segments = rill_malloc(RILL_MEM_MODEL, (size_t)cap * sizeof *t->segments);
    int32_t *scratch = rill_malloc(RILL_MEM_MODEL, (size_t)(t->n_tokens + 1) * sizeof *scratch);
    size_t len = 0, tcap = 64;
    t->text = rill_malloc(RILL_MEM_MODEL, tcap);
    rill_err_t err = RILL_OK;
    if (t->segments == NULL || scratch == NULL || t->text == NULL) {
        err = rill__error(RILL_ENOMEM, "whisper greedy: out of memory");
        goto done;
    }
    t->text[0] = '\0';
    int32_t tail = 0, seek = 0;
    const int32_t k = rill_whisper_segments(&w->hp, t->tokens, t->n_tokens, window_ms, t->segments,
                                            cap, &tail, &seek);
    if (k < 0) {
        err = (rill_err_t)k;
        goto done;
    }
    int32_t kept = 0;
    for (int32_t s = 0; s < k; s++) {
        rill_whisper_segment_t g = t->segments[s];
        const size_t off = len;
        if ((err = append_text(w->tok, &w->hp, t->tokens + g.first, g.n_ids, scratch, &t->text,
                               &len, &tcap)) != RILL_OK) {
            goto done;
        }
        /* faster-whisper yields no segment of zero length or without text */
        if (g.t0_ms == g.t1_ms || blank(t->text + off, len - off)) {
            len = off;
            t->text[len] = '\0';
            continue;
        }
        g.text_off = off;
        g.text_len = len - off;
        t->segments[kept++] = g;
    }
    t->n_segments = kept;
    t->tail_first = tail;
    t->tail_text_off = len;
    t->seek_ms = seek;
    err = append_text(w->tok, &w->hp, t->tokens + tail, t->n_tokens - tail, scratch, &t->text, &len,
                      &tcap);
    t->text_len = len;
done:
    rill_free(scratch);
    return err;
}

rill_err_t rill_whisper_greedy(rill_whisper_t *w, const rill_whisper_window_t *win,
                               const rill_whisper_greedy_params_t *params,
                               rill_whisper_transcript_t *out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    memset(out, 0, sizeof *out);
    rill_whisper_greedy_params_t p =
        params != NULL ? *params : rill_whisper_greedy_default_params();
    if (w == NULL || win == NULL || win->w != w || !win->encoded || p.max_tokens < 0 ||
        p.max_initial_ms < -1 || p.window_ms < 0 || p.window_ms > rill_whisper_n_frames(w) * 10) {
        return rill__error(RILL_EINVAL, "whisper greedy: bad argument or window not encoded");
    }
    const rill_whisper_hparams_t *hp = &w->hp;
    int32_t prompt[4];
    int64_t n_p = rill_whisper_prompt(w, p.language, prompt, 4);
    if (n_p < 0) {
        return (rill_err_t)n_p;
    }
    int32_t limit = hp->n_text_ctx - (int32_t)n_p;
    int32_t max_initial = -1;
    if (p.timestamps) {
        n_p--; /* no <|notimestamps|> */
        /* CTranslate2's decoding length: half the context, less the prompt before its last
         * token */
        limit = hp->n_text_ctx / 2;
        if (hp->n_text_ctx - ((int32_t)n_p - 1) < limit) {
            limit = hp->n_text_ctx - ((int32_t)n_p - 1);
        }
        max_initial = p.max_initial_ms == 0    ? 1000 / RILL_WHISPER_TS_MS
                      : p.max_initial_ms == -1 ? -1
                                               : p.max_initial_ms / RILL_WHISPER_TS_MS;
    }
    if (p.max_tokens > 0 && p.max_tokens < limit) {
        limit = p.max_tokens;
    }
    rill_whisper_transcript_t t = { 0 };
    t.tokens = rill_malloc(RILL_MEM_MODEL, (size_t)(limit > 0 ? limit : 1) * sizeof *t.tokens);
    if (t.tokens == NULL) {
        return rill__error(RILL_ENOMEM, "whisper greedy: out of memory");
    }
    const rill_page_table_t pt = { w->gpages,
                                   (hp->n_text_ctx + RILL_KV_PAGE_SIZE - 1) / RILL_KV_PAGE_SIZE };
    const rill_whisper_window_t *const wins[1] = { win };
    for (int32_t i = 0; i < n_p; i++) {
        w->gtok[i] = (rill_batch_token_t){ 0, i, i, i + 1 };
    }
    const int32_t rows[2] = { 0, (int32_t)n_p - 1 };
    rill_batch_t batch = { (int32_t)n_p, w->gtok, 1, &pt };
    rill_err_t err = rill_whisper_decode(w, w->gkv, &batch, prompt, wins, rows, 2, w->glogits);
    if (err != RILL_OK) {
        goto cleanup;
    }
    const int64_t V = hp->n_vocab;
    t.no_speech_prob = prob_of(w->glogits, V, hp->tok_no_speech);
    float *last = w->glogits + V;
    double sum_lp = 0.0;
    for (;;) {
        if (t.n_tokens >= limit) {
            t.hit_limit = true;
            break;
        }
        const int32_t next =
            p.timestamps ? rill_whisper_pick_timestamp(hp, last, t.tokens, t.n_tokens, max_initial)
                         : rill_whisper_pick(&w->hp, last, t.n_tokens == 0);
        sum_lp += rill_whisper_log_prob(last, V, next);
        if (next == hp->tok_eot) {
            break;
        }
        t.tokens[t.n_tokens++] = next;
        if (t.n_tokens >= limit) {
            t.hit_limit = true;
            break; /* no further step: its logits would not be used */
        }
        const int32_t pos = (int32_t)n_p + t.n_tokens - 1;
        w->gtok[0] = (rill_batch_token_t){ 0, pos, pos, pos + 1 };
        batch.n_tok = 1;
        const int32_t row0 = 0;
        err = rill_whisper_decode(w, w->gkv, &batch, &next, wins, &row0, 1, last);
        if (err != RILL_OK) {
            goto cleanup;
        }
    }
    t.avg_logprob = (float)(sum_lp / (t.n_tokens + 1));
    if (p.timestamps) {
        err =
            split_transcript(w, p.window_ms > 0 ? p.window_ms : rill_whisper_n_frames(w) * 10, &t);
        if (err != RILL_OK) {
            goto cleanup;
        }
        *out = t;
        return RILL_OK;
    }
    size_t need = 0;
    int64_t n = rill_tokenizer_decode(w->tok, t.tokens, t.n_tokens, 0, NULL, 0, &need);
    if (n < 0 && n != RILL_EFULL) {
        err = (rill_err_t)n;
        goto cleanup;
    }
    if (n >= 0) {
        need = (size_t)n;
    }
    t.text = rill_malloc(RILL_MEM_MODEL, need + 1);
    if (t.text == NULL) {
        err = rill__error(RILL_ENOMEM, "whisper greedy: out of memory");
        goto cleanup;
    }
    n = rill_tokenizer_decode(w->tok, t.tokens, t.n_tokens, 0, t.text, need + 1, NULL);
    if (n < 0) {
        err = (rill_err_t)n;
        goto cleanup;
    }
    t.text[n] = '\0';
    t.text_len = (size_t)n;
    t.tail_first = t.n_tokens;
    t.tail_text_off = t.text_len;
    *out = t;
    return RILL_OK;
cleanup:
    rill_whisper_transcript_deinit(&t);
    return err;
}
