/*
 * model.c - the model loader: GGUF metadata -> rill_hparams_t, tensors -> rill_model_weights_t.
 *
 * Design. Loading is validation plus pointer binding; no weight is copied or converted. The order
 * is: architecture, hyper-parameters (each read with its range checked, then the relations
 * between them), a cheap plausibility check of block_count against the tensor count (so a
 * corrupt block_count cannot make us allocate a huge layer table), then one lookup per expected
 * tensor, each checked for shape and type. Every tensor that was bound is marked in a used[]
 * array; whatever is left unmarked is a tensor this architecture does not use, which fails the
 * load unless the caller allows it (see rill_model.h for why that is the default).
 *
 * The model is immutable after load and reference-counted with a C11 atomic, so sessions and the
 * scheduler on other threads can share it without a lock.
 *
 * Errors carry a message naming the key or tensor, written to the caller's buffer and logged.
 * Architecture "whisper" takes its own path after the architecture key (model_whisper.c binds
 * its hyper-parameters, tokens and tensors); the unused-tensor rule and the ownership rules are
 * shared.
 *
 * Rejected: a table-driven loader keyed by llama.cpp's tensor enums. Two architectures with a
 * dozen tensors each read more clearly as code, and the shapes in the calls document the layout.
 */
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "model_internal.h"
#include "rill_model.h"

struct rill_model {
    _Atomic int refs;
    rill_gguf_t *gguf;
    rill_hparams_t hp;
    rill_model_weights_t w;
    rill_layer_weights_t *layers;
    rill__whisper_model_t *whisper; /* arch "whisper" only (model_whisper.c) */
};

rill_err_t rill__model_fail(loader_t *ld, rill_err_t code, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (ld->err != NULL && ld->errlen > 0) {
        snprintf(ld->err, ld->errlen, "%s", msg);
    }
    RILL_LOGE("model load: %s", msg);
    return code;
}

const char *rill__model_printable(char out[72], rill_gguf_str_t s) {
    size_t n = s.len < 64 ? (size_t)s.len : 64;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        out[i] = (c < 0x20 || c >= 0x7f) ? '?' : (char)c;
    }
    if (s.len > 64) {
        memcpy(out + n, "...", 4);
    } else {
        out[n] = '\0';
    }
    return out;
}

const char *rill_arch_name(rill_arch_t arch) {
    switch (arch) {
    case RILL_ARCH_LLAMA:
        return "llama";
    case RILL_ARCH_QWEN2:
        return "qwen2";
    case RILL_ARCH_WHISPER:
        return "whisper";
    }
    return "?";
}

bool rill_model_matrix_type_supported(rill_dtype_t t) {
    switch (t) {
    case RILL_DTYPE_F32:
    case RILL_DTYPE_F16:
    case RILL_DTYPE_BF16:
    case RILL_DTYPE_Q8_0:
    case RILL_DTYPE_Q4_0:
    case RILL_DTYPE_Q4_1:
    case RILL_DTYPE_Q5_0:
    case RILL_DTYPE_Q5_1:
    case RILL_DTYPE_Q4_K:
    case RILL_DTYPE_Q5_K:
    case RILL_DTYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

rill_model_params_t rill_model_default_params(void) {
    rill_model_params_t p;
    memset(&p, 0, sizeof p);
    p.allow_unused_tensors = false;
    return p;
}

/* ---- hyper-parameters ---- */

/* Reads integer key "<arch>.<name>" into *out, in [1, INT32_MAX]. Absent: *out = def, or an
 * error when def < 0 (required). */
rill_err_t rill__model_hp_int(loader_t *ld, const char *name, int64_t def, int32_t *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, name);
    int64_t i = rill_gguf_find_key(ld->g, key);
    if (i < 0) {
        if (def < 0) {
            return rill__model_fail(ld, RILL_EFORMAT, "missing required key %s", key);
        }
        *out = (int32_t)def;
        return RILL_OK;
    }
    if (rill_gguf_kv_type(ld->g, i) == RILL_GGUF_ARRAY) {
        return rill__model_fail(
            ld, RILL_EUNSUPPORTED,
            "%s is an array (per-layer values); rill supports one value for all layers", key);
    }
    int64_t v = 0;
    rill_err_t e = rill_gguf_get_i64(ld->g, key, &v);
    if (e == RILL_EFORMAT) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s has value type %d, expected an integer", key,
                                (int)rill_gguf_kv_type(ld->g, i));
    }
    if (e != RILL_OK || v < 1 || v > INT32_MAX) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s = %lld is out of range [1, %d]", key,
                                (long long)v, INT32_MAX);
    }
    *out = (int32_t)v;
    return RILL_OK;
}

/* Reads float key "<arch>.<name>", which must be finite and > 0. Absent: *out = def, or an error
 * when def <= 0 (required). */
rill_err_t rill__model_hp_float(loader_t *ld, const char *name, float def, float *out) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", ld->arch, name);
    float v = 0;
    rill_err_t e = rill_gguf_get_f32(ld->g, key, &v);
    if (e == RILL_ENOTFOUND) {
        if (def <= 0) {
            return rill__model_fail(ld, RILL_EFORMAT, "missing required key %s", key);
        }
        *out = def;
        return RILL_OK;
    }
    if (e != RILL_OK) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s is not a float", key);
    }
    if (!isfinite(v) || !(v > 0)) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s = %g is not a positive finite number", key,
                                (double)v);
    }
    *out = v;
    return RILL_OK;
}

/* RoPE scaling changes every rotation; refuse what we do not implement rather than compute
 * something else. llama.cpp's default scaling type is linear with factor 1 (a no-op). */
static rill_err_t check_rope_scaling(loader_t *ld) {
    char key[128];
    float factor = 1.0f;
    const char *const factor_keys[] = { "rope.scaling.factor", "rope.scale_linear" };
    for (size_t k = 0; k < 2; k++) {
        snprintf(key, sizeof key, "%s.%s", ld->arch, factor_keys[k]);
        float f;
        rill_err_t e = rill_gguf_get_f32(ld->g, key, &f);
        if (e == RILL_EFORMAT) {
            return rill__model_fail(ld, RILL_EFORMAT, "%s is not a float", key);
        }
        if (e == RILL_OK && f != 0.0f && f != 1.0f) {
            factor = f;
            break;
        }
    }
    snprintf(key, sizeof key, "%s.rope.scaling.type", ld->arch);
    rill_gguf_str_t type = { "linear", 6 };
    rill_err_t e = rill_gguf_get_str(ld->g, key, &type);
    if (e == RILL_EFORMAT) {
        return rill__model_fail(ld, RILL_EFORMAT, "%s is not a string", key);
    }
    if (factor != 1.0f && !rill_gguf_str_eq(type, "none")) {
        char tn[72];
        return rill__model_fail(ld, RILL_EUNSUPPORTED,
                                "RoPE scaling (type %s, factor %g) is not supported",
                                rill__model_printable(tn, type), (double)factor);
    }
    return RILL_OK;
}

static rill_err_t read_vocab_size(loader_t *ld, int32_t *n_vocab) {
    rill_gguf_type_t et;
    uint64_t len;
    rill_err_t e = rill_gguf_get_arr(ld->g, "tokenizer.ggml.tokens", &et, &len);
    if (e == RILL_OK) {
        if (et != RILL_GGUF_STRING) {
            return rill__model_fail(ld, RILL_EFORMAT,
                                    "tokenizer.ggml.tokens is not an array of strings");
        }
        if (len < 1 || len > INT32_MAX) {
            return rill__model_fail(ld, RILL_EFORMAT, "tokenizer.ggml.tokens has %llu entries",
                                    (unsigned long long)len);
        }
        *n_vocab = (int32_t)len;
        return RILL_OK;
    }
    if (e != RILL_ENOTFOUND) {
        return rill__model_fail(ld, RILL_EFORMAT, "tokenizer.ggml.tokens is not an array");
    }
    char key[128];
    snprintf(key, sizeof key, "%s.vocab_size", ld->arch);
    if (rill_gguf_find_key(ld->g, key) >= 0) {
        return rill__model_hp_int(ld, "vocab_size", -1, n_vocab);
    }
    const rill_gguf_tensor_t *t = rill_gguf_find_tensor(ld->g, "token_embd.weight");
    if (t == NULL) {
        return rill__model_fail(ld, RILL_EFORMAT, "missing tensor token_embd.weight");
    }
    if (t->ne[1] < 1 || t->ne[1] > INT32_MAX) {
        return rill__model_fail(ld, RILL_EFORMAT, "token_embd.weight has %lld rows",
                                (long long)t->ne[1]);
    }
    *n_vocab = (int32_t)t->ne[1];
    return RILL_OK;
}

static rill_err_t read_hparams(loader_t *ld, rill_hparams_t *hp) {
    rill_err_t err;
    RILL_TRY(rill__model_hp_int(ld, "context_length", -1, &hp->n_ctx_train));
    RILL_TRY(rill__model_hp_int(ld, "embedding_length", -1, &hp->n_embd));
    RILL_TRY(rill__model_hp_int(ld, "block_count", -1, &hp->n_layer));
    RILL_TRY(rill__model_hp_int(ld, "feed_forward_length", -1, &hp->n_ff));
    RILL_TRY(rill__model_hp_int(ld, "attention.head_count", -1, &hp->n_head));
    RILL_TRY(rill__model_hp_int(ld, "attention.head_count_kv", hp->n_head, &hp->n_head_kv));
    RILL_TRY(rill__model_hp_float(ld, "attention.layer_norm_rms_epsilon", 0.0f, &hp->rms_eps));
    RILL_TRY(rill__model_hp_float(ld, "rope.freq_base", 10000.0f, &hp->rope_base));
    if (hp->n_embd % hp->n_head != 0) {
        return rill__model_fail(ld, RILL_EFORMAT,
                                "embedding_length %d is not a multiple of head_count %d",
                                hp->n_embd, hp->n_head);
    }
    hp->head_dim = hp->n_embd / hp->n_head;
    if (hp->n_head_kv > hp->n_head || hp->n_head % hp->n_head_kv != 0) {
        return rill__model_fail(ld, RILL_EFORMAT,
                                "head_count %d is not a multiple of head_count_kv %d", hp->n_head,
                                hp->n_head_kv);
    }
    /* Models whose attention width differs from n_embd (Gemma, Qwen3) are other architectures. */
    int32_t kl = hp->head_dim;
    int32_t vl = hp->head_dim;
    RILL_TRY(rill__model_hp_int(ld, "attention.key_length", hp->head_dim, &kl));
    RILL_TRY(rill__model_hp_int(ld, "attention.value_length", hp->head_dim, &vl));
    if (kl != hp->head_dim || vl != hp->head_dim) {
        return rill__model_fail(ld, RILL_EUNSUPPORTED,
                                "attention key/value length %d/%d differs from embedding_length / "
                                "head_count = %d",
                                kl, vl, hp->head_dim);
    }
    RILL_TRY(rill__model_hp_int(ld, "rope.dimension_count", hp->head_dim, &hp->n_rot));
    if (hp->n_rot != hp->head_dim || hp->n_rot % 2 != 0) {
        return rill__model_fail(ld, RILL_EUNSUPPORTED,
                                "rope.dimension_count %d: rill needs n_rot == head_dim (%d), even",
                                hp->n_rot, hp->head_dim);
    }
    RILL_TRY(check_rope_scaling(ld));
    RILL_TRY(read_vocab_size(ld, &hp->n_vocab));
    hp->rope_type = hp->arch == RILL_ARCH_QWEN2 ? RILL_MODEL_ROPE_NEOX : RILL_MODEL_ROPE_NORM;
cleanup:
    return err;
}

/* ---- tensors ---- */

/* Binds tensor `name` with shape [ne0, ne1] (ne1 == 1 for vectors). Absent and optional: *w is
 * zeroed. Matrices may have any supported matrix type; vectors must be F32. */
static rill_err_t bind(loader_t *ld, const char *name, int64_t ne0, int64_t ne1, bool matrix,
                       bool required, rill_model_tensor_t *w) {
    memset(w, 0, sizeof *w);
    const rill_gguf_tensor_t *t = rill_gguf_find_tensor(ld->g, name);
    if (t == NULL) {
        if (required) {
            return rill__model_fail(ld, RILL_EFORMAT, "missing tensor %s", name);
        }
        return RILL_OK;
    }
    ld->used[t - rill_gguf_tensor(ld->g, 0)] = 1;
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
        return rill__model_fail(
            ld, RILL_EFORMAT, "tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
            name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
            (long long)t->ne[3], (long long)ne0, (long long)ne1);
    }
    bool ok = matrix ? rill_model_matrix_type_supported(t->type) : t->type == RILL_DTYPE_F32;
    if (!ok) {
        return rill__model_fail(ld, RILL_EUNSUPPORTED,
                                "tensor %s has type %s, which rill cannot use for %s", name,
                                rill_dtype_name(t->type), matrix ? "a weight matrix" : "a vector");
    }
    w->dtype = t->type;
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->row_bytes = (size_t)rill_dtype_row_bytes(t->type, ne0);
    w->data = t->data;
    return RILL_OK;
}

static rill_err_t bind_layer(loader_t *ld, const rill_hparams_t *hp, int il,
                             rill_layer_weights_t *L) {
    const int64_t E = hp->n_embd;
    const int64_t Q = (int64_t)hp->n_head * hp->head_dim;
    const int64_t KV = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t F = hp->n_ff;
    const bool need_bias = hp->arch == RILL_ARCH_QWEN2;
    char n[64];
    rill_err_t err;
#define NAME_(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
    RILL_TRY(bind(ld, NAME_("attn_norm.weight"), E, 1, false, true, &L->attn_norm));
    RILL_TRY(bind(ld, NAME_("attn_q.weight"), E, Q, true, true, &L->wq));
    RILL_TRY(bind(ld, NAME_("attn_k.weight"), E, KV, true, true, &L->wk));
    RILL_TRY(bind(ld, NAME_("attn_v.weight"), E, KV, true, true, &L->wv));
    RILL_TRY(bind(ld, NAME_("attn_output.weight"), Q, E, true, true, &L->wo));
    RILL_TRY(bind(ld, NAME_("attn_q.bias"), Q, 1, false, need_bias, &L->bq));
    RILL_TRY(bind(ld, NAME_("attn_k.bias"), KV, 1, false, need_bias, &L->bk));
    RILL_TRY(bind(ld, NAME_("attn_v.bias"), KV, 1, false, need_bias, &L->bv));
    RILL_TRY(bind(ld, NAME_("ffn_norm.weight"), E, 1, false, true, &L->ffn_norm));
    RILL_TRY(bind(ld, NAME_("ffn_gate.weight"), E, F, true, true, &L->ffn_gate));
    RILL_TRY(bind(ld, NAME_("ffn_up.weight"), E, F, true, true, &L->ffn_up));
    RILL_TRY(bind(ld, NAME_("ffn_down.weight"), F, E, true, true, &L->ffn_down));
#undef NAME_
cleanup:
    return err;
}

/* Every tensor of the file must have been bound (see rill_model.h for why), unless allowed. */
static rill_err_t check_unused(loader_t *ld, const rill_model_params_t *params) {
    int64_t n_unused = 0;
    int64_t first = -1;
    for (int64_t i = 0; i < rill_gguf_n_tensors(ld->g); i++) {
        if (!ld->used[i]) {
            char tn[72];
            n_unused++;
            if (first < 0) {
                first = i;
            }
            if (params->allow_unused_tensors) {
                RILL_LOGW("model load: tensor %s is not used by architecture %s; ignored",
                          rill__model_printable(tn, rill_gguf_tensor(ld->g, i)->name), ld->arch);
            }
        }
    }
    if (n_unused > 0 && !params->allow_unused_tensors) {
        char tn[72];
        return rill__model_fail(
            ld, RILL_EUNSUPPORTED,
            "tensor %s is not used by architecture %s (%lld unused tensors): the file is "
            "a model variant rill does not implement (allow_unused_tensors ignores them)",
            rill__model_printable(tn, rill_gguf_tensor(ld->g, first)->name), ld->arch,
            (long long)n_unused);
    }
    return RILL_OK;
}

static rill_err_t bind_all(loader_t *ld, rill_model_t *m, const rill_model_params_t *params) {
    const rill_hparams_t *hp = &m->hp;
    rill_model_weights_t *w = &m->w;
    rill_err_t err;
    RILL_TRY(bind(ld, "token_embd.weight", hp->n_embd, hp->n_vocab, true, true, &w->token_embd));
    RILL_TRY(bind(ld, "output_norm.weight", hp->n_embd, 1, false, true, &w->output_norm));
    RILL_TRY(bind(ld, "output.weight", hp->n_embd, hp->n_vocab, true, false, &w->output));
    RILL_TRY(bind(ld, "rope_freqs.weight", hp->n_rot / 2, 1, false, false, &w->rope_freqs));
    if (w->output.data == NULL) {
        w->output = w->token_embd;
        m->hp.tied_output = true;
    }
    for (int il = 0; il < hp->n_layer; il++) {
        RILL_TRY(bind_layer(ld, hp, il, &m->layers[il]));
    }
    w->n_layer = hp->n_layer;
    w->layers = m->layers;
    err = check_unused(ld, params);
cleanup:
    return err;
}

static void model_free(rill_model_t *m) {
    if (m == NULL) {
        return;
    }
    rill__whisper_free(m->whisper);
    rill_gguf_destroy(&m->gguf);
    rill_free(m->layers);
    rill_free(m);
}

/* Architecture "whisper": its own hyper-parameters and tensors (model_whisper.c), then the same
 * unused-tensor rule and ownership transfer as the decoder-only models. */
static rill_err_t load_whisper(loader_t *ld, rill_gguf_t **gp, const rill_model_params_t *params,
                               rill_model_t **out) {
    rill_model_t *m = rill_calloc(RILL_MEM_MODEL, 1, sizeof *m);
    ld->used = rill_calloc(RILL_MEM_MODEL, (size_t)rill_gguf_n_tensors(ld->g) + 1, 1);
    rill_err_t err = RILL_OK;
    if (m == NULL || ld->used == NULL) {
        err = rill__model_fail(ld, RILL_ENOMEM, "out of memory");
        goto cleanup;
    }
    m->hp.arch = RILL_ARCH_WHISPER;
    err = rill__whisper_bind(ld, &m->hp, &m->whisper);
    if (err == RILL_OK) {
        err = check_unused(ld, params);
    }
    if (err != RILL_OK) {
        goto cleanup;
    }
    atomic_init(&m->refs, 1);
    m->gguf = *gp;
    *gp = NULL;
    *out = m;
    const rill_whisper_hparams_t *wh = rill__whisper_hparams(m->whisper);
    RILL_LOGI("model: whisper%s, encoder %d layers x %d, decoder %d layers x %d, vocab %d",
              wh->multilingual ? " (multilingual)" : " (English)", wh->n_audio_layer,
              wh->n_audio_state, wh->n_text_layer, wh->n_text_state, wh->n_vocab);
cleanup:
    rill_free(ld->used);
    ld->used = NULL;
    if (err != RILL_OK) {
        model_free(m);
    }
    return err;
}

static rill_err_t load_gguf(rill_gguf_t **gp, rill_model_params_t params, rill_model_t **out,
                            char *errbuf, size_t errlen) {
    loader_t ld = { .err = errbuf, .errlen = errlen };
    if (out != NULL) {
        *out = NULL;
    }
    if (gp == NULL || *gp == NULL || out == NULL) {
        return rill__model_fail(&ld, RILL_EINVAL, "invalid argument");
    }
    ld.g = *gp;
    rill_hparams_t hp;
    memset(&hp, 0, sizeof hp);
    rill_gguf_str_t arch;
    rill_err_t err = rill_gguf_get_str(ld.g, "general.architecture", &arch);
    if (err == RILL_ENOTFOUND) {
        return rill__model_fail(&ld, RILL_EFORMAT, "missing key general.architecture");
    }
    if (err != RILL_OK) {
        return rill__model_fail(&ld, RILL_EFORMAT, "general.architecture is not a string");
    }
    if (rill_gguf_str_eq(arch, "llama")) {
        hp.arch = RILL_ARCH_LLAMA;
    } else if (rill_gguf_str_eq(arch, "qwen2")) {
        hp.arch = RILL_ARCH_QWEN2;
    } else if (rill_gguf_str_eq(arch, "whisper")) {
        hp.arch = RILL_ARCH_WHISPER;
    } else {
        char an[72];
        return rill__model_fail(&ld, RILL_EUNSUPPORTED,
                                "architecture '%s' is not supported (llama, qwen2 and whisper are)",
                                rill__model_printable(an, arch));
    }
    ld.arch = rill_arch_name(hp.arch);
    if (hp.arch == RILL_ARCH_WHISPER) {
        return load_whisper(&ld, gp, &params, out);
    }
    err = read_hparams(&ld, &hp);
    if (err != RILL_OK) {
        return err;
    }
    /* Each layer has at least 9 tensors: refuse a block_count the file cannot back before the
     * layer table is sized by it. */
    int64_t n_tensors = rill_gguf_n_tensors(ld.g);
    if ((int64_t)hp.n_layer > n_tensors / 9) {
        return rill__model_fail(&ld, RILL_EFORMAT,
                                "block_count %d needs at least %lld tensors; the file has "
                                "%lld",
                                hp.n_layer, 9LL * hp.n_layer, (long long)n_tensors);
    }

    rill_model_t *m = rill_calloc(RILL_MEM_MODEL, 1, sizeof *m);
    if (m == NULL) {
        return rill__model_fail(&ld, RILL_ENOMEM, "out of memory");
    }
    m->hp = hp;
    m->layers = rill_calloc(RILL_MEM_MODEL, (size_t)hp.n_layer, sizeof *m->layers);
    ld.used = rill_calloc(RILL_MEM_MODEL, (size_t)n_tensors + 1, 1);
    if (m->layers == NULL || ld.used == NULL) {
        err = rill__model_fail(&ld, RILL_ENOMEM, "out of memory");
        goto cleanup;
    }
    err = bind_all(&ld, m, &params);
    if (err != RILL_OK) {
        goto cleanup;
    }
    atomic_init(&m->refs, 1);
    m->gguf = *gp;
    *gp = NULL;
    *out = m;
    RILL_LOGI("model: %s, %d layers, n_embd %d, heads %d/%d, n_ff %d, vocab %d%s", ld.arch,
              hp.n_layer, hp.n_embd, hp.n_head, hp.n_head_kv, hp.n_ff, hp.n_vocab,
              m->hp.tied_output ? ", tied output" : "");
cleanup:
    rill_free(ld.used);
    if (err != RILL_OK) {
        model_free(m); /* m->gguf is still NULL: the caller keeps the reader */
    }
    return err;
}

rill_err_t rill_model_load_gguf(rill_gguf_t **gp, rill_model_params_t params, rill_model_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(load_gguf(gp, params, out, msg, sizeof msg), msg);
}

static rill_err_t load_file(const char *path, rill_model_params_t params, rill_model_t **out,
                            char *errbuf, size_t errlen) {
    if (out != NULL) {
        *out = NULL;
    }
    if (path == NULL || out == NULL) {
        if (errbuf != NULL && errlen > 0) {
            snprintf(errbuf, errlen, "invalid argument");
        }
        return RILL_EINVAL;
    }
    rill_gguf_t *g = NULL;
    rill_err_t err = rill_gguf_open(path, &g);
    if (err != RILL_OK) {
        snprintf(errbuf, errlen, "%s", rill_last_error(err));
        RILL_LOGE("model load: %s", errbuf);
        return err;
    }
    err = load_gguf(&g, params, out, errbuf, errlen);
    rill_gguf_destroy(&g); /* NULL after a successful load: the model owns it */
    return err;
}

rill_err_t rill_model_load(const char *path, rill_model_params_t params, rill_model_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(load_file(path, params, out, msg, sizeof msg), msg);
}

rill_model_t *rill_model_retain(rill_model_t *m) {
    if (m != NULL) {
        atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
    }
    return m;
}

void rill_model_destroy(rill_model_t **mp) {
    if (mp == NULL || *mp == NULL) {
        return;
    }
    rill_model_t *m = *mp;
    *mp = NULL;
    if (atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
        model_free(m);
    }
}

const rill_hparams_t *rill_model_hparams(const rill_model_t *m) {
    return m != NULL ? &m->hp : NULL;
}

const rill_model_weights_t *rill_model_weights(const rill_model_t *m) {
    return m != NULL ? &m->w : NULL;
}

const rill_gguf_t *rill_model_gguf(const rill_model_t *m) {
    return m != NULL ? m->gguf : NULL;
}

const rill_whisper_hparams_t *rill_model_whisper_hparams(const rill_model_t *m) {
    return m != NULL && m->whisper != NULL ? rill__whisper_hparams(m->whisper) : NULL;
}

const rill_whisper_weights_t *rill_model_whisper_weights(const rill_model_t *m) {
    return m != NULL && m->whisper != NULL ? rill__whisper_weights(m->whisper) : NULL;
}
