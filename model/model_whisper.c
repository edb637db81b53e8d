/*
 * model_whisper.c - binding a whisper GGUF (tools/whisper_to_gguf.py's layout,
 * docs/whisper_gguf.md): hyper-parameters, special tokens, token lists and every tensor, checked
 * for shape and type.
 *
 * Design. The same discipline as the llama loader (model.c): every key read with its range
 * checked, relations checked before any table is sized by them (the layer counts against the
 * file's tensor count), one lookup per expected tensor, each marked used so that a tensor this
 * code does not know fails the load. Tensor names are CTranslate2's variable names verbatim.
 * The file's fused projections stay fused in the mapping: Q|K|V (self-attention linear_0) and
 * K|V (cross-attention linear_1) are bound as views of their row ranges, which costs nothing
 * and lets the forward pass multiply by each part alone.
 *
 * The FFN widths are not in the metadata: they are read from the first layer's linear_0 and
 * every other layer must agree. Token ids and suppression lists must lie in the vocabulary,
 * so the forward pass and the greedy decoder can index logits with them unchecked.
 */
#include <stdio.h>
#include <string.h>

#include "model_internal.h"
#include "rill_alloc.h"
#include "rill_log.h"

struct rill__whisper_model {
    rill_whisper_hparams_t hp;
    rill_whisper_weights_t w;
    rill_whisper_encoder_layer_t *enc; /* [n_audio_layer] */
    rill_whisper_decoder_layer_t *dec; /* [n_text_layer] */
    int32_t *lang_ids, *suppress, *begin_suppress;
    rill_gguf_str_t *lang_codes;
};

typedef enum want { W_MATRIX, W_F32 } want_t;

/* Binds tensor `name` of GGUF shape [ne0, ne1, ne2] as a 2-D view: a 3-D convolution weight
 * [k, in, out] becomes out rows of k * in values; a 2-D tensor (ne2 = 1) stays (ne0, ne1). */
static rill_err_t bind3(loader_t *ld, const char *name, int64_t ne0, int64_t ne1, int64_t ne2,
                        want_t want, rill_model_tensor_t *t) {
    memset(t, 0, sizeof *t);
    const rill_gguf_tensor_t *g = rill_gguf_find_tensor(ld->g, name);
    if (g == NULL) {
        return rill__model_fail(ld, RILL_EFORMAT, "missing tensor %s", name);
    }
    ld->used[g - rill_gguf_tensor(ld->g, 0)] = 1;
    if (g->ne[0] != ne0 || g->ne[1] != ne1 || g->ne[2] != ne2 || g->ne[3] != 1) {
        return rill__model_fail(ld, RILL_EFORMAT,
                                "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, "
                                "%lld, %lld]",
                                name, (long long)g->ne[0], (long long)g->ne[1], (long long)g->ne[2],
                                (long long)g->ne[3], (long long)ne0, (long long)ne1,
                                (long long)ne2);
    }
    const bool matrix_ok =
        g->type == RILL_DTYPE_F32 || g->type == RILL_DTYPE_F16 || g->type == RILL_DTYPE_BF16;
    if (want == W_F32 ? g->type != RILL_DTYPE_F32 : !matrix_ok) {
        return rill__model_fail(ld, RILL_EUNSUPPORTED, "tensor %s has type %s; whisper needs %s",
                                name, rill_dtype_name(g->type),
                                want == W_F32 ? "F32" : "F32, F16 or BF16");
    }
    const int64_t row = ne2 > 1 ? ne0 * ne1 : ne0, rows = ne2 > 1 ? ne2 : ne1;
    t->dtype = g->type;
    t->ne0 = row;
    t->ne1 = rows;
    t->row_bytes = (size_t)rill_dtype_row_bytes(g->type, row);
    t->data = g->data;
    return RILL_OK;
}

static rill_err_t bind2(loader_t *ld, const char *name, int64_t ne0, int64_t ne1, want_t want,
                        rill_model_tensor_t *t) {
    return bind3(ld, name, ne0, ne1, 1, want, t);
}

/* Rows [r0, r0 + n) of t as a tensor of their own. */
static rill_model_tensor_t rows_of(const rill_model_tensor_t *t, int64_t r0, int64_t n) {
    rill_model_tensor_t v = *t;
    v.ne1 = n;
    v.data = (const char *)t->data + (size_t)r0 * t->row_bytes;
    return v;
}

/* Values [i0, i0 + n) of an f32 vector as a vector of their own. */
static rill_model_tensor_t part_of(const rill_model_tensor_t *t, int64_t i0, int64_t n) {
    rill_model_tensor_t v = *t;
    v.ne0 = n;
    v.row_bytes = (size_t)n * sizeof(float);
    v.data = (const float *)t->data + i0;
    return v;
}

static rill_err_t bind_ln(loader_t *ld, const char *prefix, int64_t d, rill_model_tensor_t *g,
                          rill_model_tensor_t *b) {
    char n[160];
    rill_err_t err;
    snprintf(n, sizeof n, "%s/gamma", prefix);
    if ((err = bind2(ld, n, d, 1, W_F32, g)) != RILL_OK) {
        return err;
    }
    snprintf(n, sizeof n, "%s/beta", prefix);
    return bind2(ld, n, d, 1, W_F32, b);
}

/* A linear layer: weight (ne0 = n_in, ne1 = n_out) and bias (n_out). */
static rill_err_t bind_linear(loader_t *ld, const char *prefix, int64_t n_in, int64_t n_out,
                              rill_model_tensor_t *w, rill_model_tensor_t *b) {
    char n[160];
    rill_err_t err;
    snprintf(n, sizeof n, "%s/weight", prefix);
    if ((err = bind2(ld, n, n_in, n_out, W_MATRIX, w)) != RILL_OK) {
        return err;
    }
    snprintf(n, sizeof n, "%s/bias", prefix);
    return bind2(ld, n, n_out, 1, W_F32, b);
}

/* Self-attention of width d: linear_0 = Q|K|V, linear_1 = output. */
static rill_err_t bind_self_attn(loader_t *ld, const char *layer, int64_t d,
                                 rill_whisper_attn_weights_t *a) {
    char p[160];
    rill_model_tensor_t w, b;
    rill_err_t err;
    snprintf(p, sizeof p, "%s/self_attention/layer_norm", layer);
    if ((err = bind_ln(ld, p, d, &a->ln_gamma, &a->ln_beta)) != RILL_OK) {
        return err;
    }
    snprintf(p, sizeof p, "%s/self_attention/linear_0", layer);
    if ((err = bind_linear(ld, p, d, 3 * d, &w, &b)) != RILL_OK) {
        return err;
    }
    a->wq = rows_of(&w, 0, d), a->wk = rows_of(&w, d, d), a->wv = rows_of(&w, 2 * d, d);
    a->bq = part_of(&b, 0, d), a->bk = part_of(&b, d, d), a->bv = part_of(&b, 2 * d, d);
    snprintf(p, sizeof p, "%s/self_attention/linear_1", layer);
    return bind_linear(ld, p, d, d, &a->wo, &a->bo);
}

/* Cross-attention of width d over an encoder of width d_a: linear_0 = Q, linear_1 = K|V,
 * linear_2 = output. */
static rill_err_t bind_cross_attn(loader_t *ld, const char *layer, int64_t d, int64_t d_a,
                                  rill_whisper_attn_weights_t *a) {
    char p[160];
    rill_model_tensor_t w, b;
    rill_err_t err;
    snprintf(p, sizeof p, "%s/attention/layer_norm", layer);
    if ((err = bind_ln(ld, p, d, &a->ln_gamma, &a->ln_beta)) != RILL_OK) {
        return err;
    }
    snprintf(p, sizeof p, "%s/attention/linear_0", layer);
    if ((err = bind_linear(ld, p, d, d, &a->wq, &a->bq)) != RILL_OK) {
        return err;
    }
    snprintf(p, sizeof p, "%s/attention/linear_1", layer);
    if ((err = bind_linear(ld, p, d_a, 2 * d, &w, &b)) != RILL_OK) {
        return err;
    }
    a->wk = rows_of(&w, 0, d), a->wv = rows_of(&w, d, d);
    a->bk = part_of(&b, 0, d), a->bv = part_of(&b, d, d);
    snprintf(p, sizeof p, "%s/attention/linear_2", layer);
    return bind_linear(ld, p, d, d, &a->wo, &a->bo);
}

/* FFN of width d; *ff is its hidden width: read from the tensor when 0, else required. */
static rill_err_t bind_ffn(loader_t *ld, const char *layer, int64_t d, int32_t *ff,
                           rill_whisper_ffn_weights_t *f) {
    char p[160];
    rill_err_t err;
    snprintf(p, sizeof p, "%s/ffn/layer_norm", layer);
    if ((err = bind_ln(ld, p, d, &f->ln_gamma, &f->ln_beta)) != RILL_OK) {
        return err;
    }
    if (*ff == 0) {
        snprintf(p, sizeof p, "%s/ffn/linear_0/weight", layer);
        const rill_gguf_tensor_t *g = rill_gguf_find_tensor(ld->g, p);
        if (g == NULL) {
            return rill__model_fail(ld, RILL_EFORMAT, "missing tensor %s", p);
        }
        if (g->ne[1] < 1 || g->ne[1] > 65536) {
            return rill__model_fail(ld, RILL_EFORMAT, "tensor %s has %lld rows", p,
                                    (long long)g->ne[1]);
        }
        *ff = (int32_t)g->ne[1];
    }
    snprintf(p, sizeof p, "%s/ffn/linear_0", layer);
    if ((err = bind_linear(ld, p, d, *ff, &f->w1, &f->b1)) != RILL_OK) {
        return err;
    }
    snprintf(p, sizeof p, "%s/ffn/linear_1", layer);
    return bind_linear(ld, p, *ff, d, &f->w2, &f->b2);
}

/* A required token id key "whisper.token.<name>" in [0, n_vocab). */
static rill_err_t token(loader_t *ld, const char *name, int32_t n_vocab, int32_t *out) {
    char key[96];
    snprintf(key, sizeof key, "whisper.token.%s", name);
    int64_t v = -1;
    rill_err_t e = rill_gguf_get_i64(ld->g, key, &v);
    if (e == RILL_ENOTFOUND) {
        return rill__model_fail(ld, RILL_EFORMAT, "missing required key %s", key);
    }
    if (e != RILL_OK || v < 0 || v >= n_vocab) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s = %lld is not a token id in [0, %d)", key,
                                (long long)v, n_vocab);
    }
    *out = (int32_t)v;
    return RILL_OK;
}

/* An integer array key as int32 ids in [0, n_vocab), copied into a model-owned array (*out NULL
 * for an empty array). Absent: an error when required, else empty. */
static rill_err_t id_array(loader_t *ld, const char *key, bool required, int32_t n_vocab,
                           int32_t **out, int32_t *n_out) {
    *out = NULL;
    *n_out = 0;
    rill_gguf_type_t et;
    uint64_t len = 0;
    rill_err_t e = rill_gguf_get_arr(ld->g, key, &et, &len);
    if (e == RILL_ENOTFOUND && !required) {
        return RILL_OK;
    }
    if (e == RILL_ENOTFOUND) {
        return rill__model_fail(ld, RILL_EFORMAT, "missing required key %s", key);
    }
    if (e != RILL_OK || (et != RILL_GGUF_I32 && et != RILL_GGUF_U32)) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s is not an array of 32-bit integers", key);
    }
    if (len > (uint64_t)n_vocab) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s has %llu entries, more than the vocabulary",
                                key, (unsigned long long)len);
    }
    if (len == 0) {
        return RILL_OK;
    }
    const void *data = NULL;
    uint64_t n = 0;
    if (rill_gguf_get_arr_data(ld->g, key, &data, &n) != RILL_OK || n != len) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s cannot be read", key);
    }
    int32_t *ids = rill_malloc(RILL_MEM_MODEL, (size_t)len * sizeof *ids);
    if (ids == NULL) {
        return rill__model_fail(ld, RILL_ENOMEM, "out of memory");
    }
    for (uint64_t i = 0; i < len; i++) {
        uint32_t u;
        memcpy(&u, (const char *)data + i * 4, 4);
        const int64_t v = et == RILL_GGUF_I32 ? (int64_t)(int32_t)u : (int64_t)u;
        if (v < 0 || v >= n_vocab) {
            rill_free(ids);
            return rill__model_fail(ld, RILL_EFORMAT,
                                    "%s[%llu] = %lld is not a token id in [0, %d)", key,
                                    (unsigned long long)i, (long long)v, n_vocab);
        }
        ids[i] = (int32_t)v;
    }
    *out = ids;
    *n_out = (int32_t)len;
    return RILL_OK;
}

static rill_err_t read_hparams(loader_t *ld, rill__whisper_model_t *wm) {
    rill_whisper_hparams_t *hp = &wm->hp;
    rill_err_t err = RILL_OK;
    RILL_TRY(rill__model_hp_int(ld, "n_mels", -1, &hp->n_mels));
    RILL_TRY(rill__model_hp_int(ld, "n_audio_ctx", -1, &hp->n_audio_ctx));
    RILL_TRY(rill__model_hp_int(ld, "n_audio_state", -1, &hp->n_audio_state));
    RILL_TRY(rill__model_hp_int(ld, "n_audio_head", -1, &hp->n_audio_head));
    RILL_TRY(rill__model_hp_int(ld, "n_audio_layer", -1, &hp->n_audio_layer));
    RILL_TRY(rill__model_hp_int(ld, "n_text_ctx", -1, &hp->n_text_ctx));
    RILL_TRY(rill__model_hp_int(ld, "n_text_state", -1, &hp->n_text_state));
    RILL_TRY(rill__model_hp_int(ld, "n_text_head", -1, &hp->n_text_head));
    RILL_TRY(rill__model_hp_int(ld, "n_text_layer", -1, &hp->n_text_layer));
    RILL_TRY(rill__model_hp_int(ld, "n_vocab", -1, &hp->n_vocab));
    RILL_TRY(rill__model_hp_float(ld, "layer_norm_epsilon", 0.0f, &hp->eps));
    if (rill_gguf_get_bool(ld->g, "whisper.multilingual", &hp->multilingual) != RILL_OK) {
        err = rill__model_fail(ld, RILL_EFORMAT, "whisper.multilingual is missing or not a bool");
        goto cleanup;
    }
    if (hp->n_audio_state % hp->n_audio_head != 0 || hp->n_text_state % hp->n_text_head != 0 ||
        hp->n_audio_state / hp->n_audio_head > 256 || hp->n_text_state / hp->n_text_head > 256) {
        err = rill__model_fail(ld, RILL_EFORMAT,
                               "state widths %d / %d are not multiples of head counts %d / %d "
                               "with head width <= 256",
                               hp->n_audio_state, hp->n_text_state, hp->n_audio_head,
                               hp->n_text_head);
        goto cleanup;
    }
    /* upper bounds that keep every product below in range and tables small */
    if (hp->n_mels > 1024 || hp->n_audio_ctx > 65536 || hp->n_text_ctx > 65536 ||
        hp->n_audio_state > 65536 || hp->n_text_state > 65536) {
        err = rill__model_fail(ld, RILL_EFORMAT,
                               "whisper sizes out of range (n_mels %d, ctx "
                               "%d / %d, state %d / %d)",
                               hp->n_mels, hp->n_audio_ctx, hp->n_text_ctx, hp->n_audio_state,
                               hp->n_text_state);
        goto cleanup;
    }
    /* The tokenizer's list and n_vocab must agree: ids index both. */
    rill_gguf_type_t et;
    uint64_t nt = 0;
    if (rill_gguf_get_arr(ld->g, "tokenizer.ggml.tokens", &et, &nt) == RILL_OK &&
        nt != (uint64_t)hp->n_vocab) {
        err = rill__model_fail(ld, RILL_EFORMAT,
                               "whisper.n_vocab %d differs from tokenizer.ggml.tokens (%llu)",
                               hp->n_vocab, (unsigned long long)nt);
        goto cleanup;
    }
    const int32_t V = hp->n_vocab;
    RILL_TRY(token(ld, "sot", V, &hp->tok_sot));
    RILL_TRY(token(ld, "eot", V, &hp->tok_eot));
    RILL_TRY(token(ld, "transcribe", V, &hp->tok_transcribe));
    RILL_TRY(token(ld, "translate", V, &hp->tok_translate));
    RILL_TRY(token(ld, "no_timestamps", V, &hp->tok_no_timestamps));
    RILL_TRY(token(ld, "no_speech", V, &hp->tok_no_speech));
    RILL_TRY(token(ld, "prev", V, &hp->tok_prev));
    RILL_TRY(token(ld, "timestamp_begin", V, &hp->tok_timestamp_begin));
    RILL_TRY(id_array(ld, "whisper.suppress_tokens", true, V, &wm->suppress, &hp->n_suppress));
    RILL_TRY(id_array(ld, "whisper.begin_suppress_tokens", true, V, &wm->begin_suppress,
                      &hp->n_begin_suppress));
    RILL_TRY(id_array(ld, "whisper.lang_ids", false, V, &wm->lang_ids, &hp->n_langs));
    hp->suppress = wm->suppress;
    hp->begin_suppress = wm->begin_suppress;
    hp->lang_ids = wm->lang_ids;
    uint64_t nc = 0;
    rill_err_t e = rill_gguf_get_arr(ld->g, "whisper.lang_codes", &et, &nc);
    if (e == RILL_ENOTFOUND) {
        nc = 0;
    } else if (e != RILL_OK || et != RILL_GGUF_STRING) {
        err = rill__model_fail(ld, RILL_EFORMAT, "whisper.lang_codes is not an array of strings");
        goto cleanup;
    }
    if (nc != (uint64_t)hp->n_langs || (hp->multilingual && hp->n_langs == 0)) {
        err = rill__model_fail(ld, RILL_EFORMAT,
                               "whisper.lang_codes has %llu entries and whisper.lang_ids %d (a "
                               "multilingual model needs at least one, the same number of each)",
                               (unsigned long long)nc, hp->n_langs);
        goto cleanup;
    }
    if (nc > 0) {
        wm->lang_codes = rill_calloc(RILL_MEM_MODEL, (size_t)nc, sizeof *wm->lang_codes);
        if (wm->lang_codes == NULL) {
            err = rill__model_fail(ld, RILL_ENOMEM, "out of memory");
            goto cleanup;
        }
        for (uint64_t i = 0; i < nc; i++) {
            if (rill_gguf_get_arr_str(ld->g, "whisper.lang_codes", i, &wm->lang_codes[i]) !=
                RILL_OK) {
                err = rill__model_fail(ld, RILL_EFORMAT, "whisper.lang_codes[%llu] unreadable",
                                       (unsigned long long)i);
                goto cleanup;
            }
        }
    }
    hp->lang_codes = wm->lang_codes;
cleanup:
    return err;
}

static rill_err_t bind_tensors(loader_t *ld, rill__whisper_model_t *wm) {
    rill_whisper_hparams_t *hp = &wm->hp;
    rill_whisper_weights_t *w = &wm->w;
    const int64_t da = hp->n_audio_state, dt = hp->n_text_state, M = hp->n_mels;
    char p[96];
    rill_err_t err;
    RILL_TRY(bind3(ld, "encoder/conv1/weight", 3, M, da, W_MATRIX, &w->conv1_w));
    RILL_TRY(bind2(ld, "encoder/conv1/bias", da, 1, W_F32, &w->conv1_b));
    RILL_TRY(bind3(ld, "encoder/conv2/weight", 3, da, da, W_MATRIX, &w->conv2_w));
    RILL_TRY(bind2(ld, "encoder/conv2/bias", da, 1, W_F32, &w->conv2_b));
    RILL_TRY(
        bind2(ld, "encoder/position_encodings/encodings", da, hp->n_audio_ctx, W_F32, &w->enc_pos));
    for (int32_t l = 0; l < hp->n_audio_layer; l++) {
        snprintf(p, sizeof p, "encoder/layer_%d", l);
        RILL_TRY(bind_self_attn(ld, p, da, &wm->enc[l].attn));
        RILL_TRY(bind_ffn(ld, p, da, &hp->n_audio_ff, &wm->enc[l].ffn));
    }
    RILL_TRY(bind_ln(ld, "encoder/layer_norm", da, &w->enc_ln_gamma, &w->enc_ln_beta));
    RILL_TRY(bind2(ld, "decoder/embeddings/weight", dt, hp->n_vocab, W_MATRIX, &w->dec_embd));
    RILL_TRY(
        bind2(ld, "decoder/position_encodings/encodings", dt, hp->n_text_ctx, W_F32, &w->dec_pos));
    for (int32_t l = 0; l < hp->n_text_layer; l++) {
        snprintf(p, sizeof p, "decoder/layer_%d", l);
        RILL_TRY(bind_self_attn(ld, p, dt, &wm->dec[l].self_attn));
        RILL_TRY(bind_cross_attn(ld, p, dt, da, &wm->dec[l].cross_attn));
        RILL_TRY(bind_ffn(ld, p, dt, &hp->n_text_ff, &wm->dec[l].ffn));
    }
    RILL_TRY(bind_ln(ld, "decoder/layer_norm", dt, &w->dec_ln_gamma, &w->dec_ln_beta));
    RILL_TRY(bind2(ld, "whisper/mel_filters", 201, M, W_F32, &w->mel_filters));
    w->enc_layers = wm->enc;
    w->dec_layers = wm->dec;
cleanup:
    return err;
}

void rill__whisper_free(rill__whisper_model_t *wm) {
    if (wm == NULL) {
        return;
    }
    rill_free(wm->enc);
    rill_free(wm->dec);
    rill_free(wm->lang_ids);
    rill_free(wm->suppress);
    rill_free(wm->begin_suppress);
    rill_free(wm->lang_codes);
    rill_free(wm);
}

rill_err_t rill__whisper_bind(loader_t *ld, rill_hparams_t *hp, rill__whisper_model_t **out) {
    *out = NULL;
    rill__whisper_model_t *wm = rill_calloc(RILL_MEM_MODEL, 1, sizeof *wm);
    if (wm == NULL) {
        return rill__model_fail(ld, RILL_ENOMEM, "out of memory");
    }
    rill_err_t err = read_hparams(ld, wm);
    if (err != RILL_OK) {
        goto cleanup;
    }
    /* an encoder layer has 12 tensors, a decoder layer 20: refuse layer counts the file cannot
     * back before the tables are sized by them */
    const int64_t need = 12 * (int64_t)wm->hp.n_audio_layer + 20 * (int64_t)wm->hp.n_text_layer;
    if (need > rill_gguf_n_tensors(ld->g)) {
        err = rill__model_fail(ld, RILL_EFORMAT,
                               "%d encoder and %d decoder layers need at least %lld tensors; the "
                               "file has %lld",
                               wm->hp.n_audio_layer, wm->hp.n_text_layer, (long long)need,
                               (long long)rill_gguf_n_tensors(ld->g));
        goto cleanup;
    }
    wm->enc = rill_calloc(RILL_MEM_MODEL, (size_t)wm->hp.n_audio_layer, sizeof *wm->enc);
    wm->dec = rill_calloc(RILL_MEM_MODEL, (size_t)wm->hp.n_text_layer, sizeof *wm->dec);
    if (wm->enc == NULL || wm->dec == NULL) {
        err = rill__model_fail(ld, RILL_ENOMEM, "out of memory");
        goto cleanup;
    }
    err = bind_tensors(ld, wm);
    if (err != RILL_OK) {
        goto cleanup;
    }
    const rill_whisper_hparams_t *w = &wm->hp;
    hp->arch = RILL_ARCH_WHISPER;
    hp->n_vocab = w->n_vocab;
    hp->n_ctx_train = w->n_text_ctx;
    hp->n_embd = w->n_text_state;
    hp->n_layer = w->n_text_layer;
    hp->n_ff = w->n_text_ff;
    hp->n_head = w->n_text_head;
    hp->n_head_kv = w->n_text_head;
    hp->head_dim = w->n_text_state / w->n_text_head;
    hp->n_rot = 0;
    hp->rms_eps = w->eps;
    hp->rope_base = 0.0f;
    hp->rope_type = RILL_MODEL_ROPE_NORM;
    hp->tied_output = true;
    *out = wm;
    return RILL_OK;
cleanup:
    rill__whisper_free(wm);
    return err;
}

const rill_whisper_hparams_t *rill__whisper_hparams(const rill__whisper_model_t *wm) {
    return &wm->hp;
}

const rill_whisper_weights_t *rill__whisper_weights(const rill__whisper_model_t *wm) {
    return &wm->w;
}
