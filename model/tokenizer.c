/*
 * tokenizer.c - building a tokenizer from GGUF metadata, and its accessors.
 *
 * Everything here follows llama.cpp's llama_vocab (src/llama-vocab.cpp) rule for rule, because
 * the contract is "same ids as llama.cpp": the same defaults per tokenizer model and pre-type,
 * the same text-based detection of end-of-turn / FIM tokens and forcing of their type, the
 * same special-token order (longest text first, ties by id where llama.cpp's sort leaves them
 * open), the same piece of every token. Where llama.cpp's choice depends on hash-map iteration
 * order (which of several end-of-turn texts wins), we take the first of its list,
 * deterministically.
 *
 * Layout: the tokenizer owns a copy of every token text in one blob (NUL after each), the
 * decoded piece of every token in another, flat arrays of scores/types/attributes, an
 * open-addressing hash text -> id (linear probing, load <= 1/2) and, for BPE, a hash
 * (left id, right id) -> (rank, result id). Nothing points into the GGUF afterwards.
 *
 * Pieces are computed once here, so rill_tokenizer_piece() is a lookup (llama.cpp caches them
 * the same way).
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "tokenizer_internal.h"

#define KEY_MODEL      "tokenizer.ggml.model"
#define KEY_PRE        "tokenizer.ggml.pre"
#define KEY_TOKENS     "tokenizer.ggml.tokens"
#define KEY_SCORES     "tokenizer.ggml.scores"
#define KEY_TYPES      "tokenizer.ggml.token_type"
#define KEY_MERGES     "tokenizer.ggml.merges"
#define KEY_ADD_BOS    "tokenizer.ggml.add_bos_token"
#define KEY_ADD_EOS    "tokenizer.ggml.add_eos_token"
#define KEY_ADD_PREFIX "tokenizer.ggml.add_space_prefix"

/* ---------------------------------------------------------------------------------------- */
/* small helpers                                                                             */

static rill_err_t fail(char *err, size_t errlen, rill_err_t e, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static rill_err_t fail(char *err, size_t errlen, rill_err_t e, const char *fmt, ...) {
    if (err != NULL && errlen > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return e;
}

rill_err_t rill__tok_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return RILL_OK;
    }
    size_t ncap = *cap * 2;
    if (ncap < need) {
        ncap = need;
    }
    if (ncap < 64) {
        ncap = 64;
    }
    if (ncap > SIZE_MAX / elem) {
        return RILL_ENOMEM;
    }
    void *q = rill_realloc(RILL_MEM_MODEL, *p, ncap * elem);
    if (q == NULL) {
        return RILL_ENOMEM;
    }
    *p = q;
    *cap = ncap;
    return RILL_OK;
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 29;
    return h;
}

int32_t rill__tok_lookup(const rill_tokenizer_t *tok, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & tok->hash_mask;
    for (;;) {
        int32_t id = tok->hash[i];
        if (id < 0) {
            return -1;
        }
        size_t tl;
        const char *t = tok_text(tok, id, &tl);
        if (tl == n && memcmp(t, s, n) == 0) {
            return id;
        }
        i = (i + 1) & tok->hash_mask;
    }
}

/* Inserts id; returns the id already holding the same text, or -1. */
static int32_t hash_insert(rill_tokenizer_t *tok, int32_t id) {
    size_t n;
    const char *s = tok_text(tok, id, &n);
    uint32_t i = (uint32_t)hash_bytes(s, n) & tok->hash_mask;
    for (;;) {
        int32_t other = tok->hash[i];
        if (other < 0) {
            tok->hash[i] = id;
            return -1;
        }
        size_t tl;
        const char *t = tok_text(tok, other, &tl);
        if (tl == n && memcmp(t, s, n) == 0) {
            return other;
        }
        i = (i + 1) & tok->hash_mask;
    }
}

static int32_t lookup_cstr(const rill_tokenizer_t *tok, const char *s) {
    return rill__tok_lookup(tok, s, strlen(s));
}

/* Reads an optional bool key; a key of another type is an error. */
static rill_err_t opt_bool(const rill_gguf_t *g, const char *key, bool *v, char *err,
                           size_t errlen) {
    rill_err_t e = rill_gguf_get_bool(g, key, v);
    if (e == RILL_OK || e == RILL_ENOTFOUND) {
        return RILL_OK;
    }
    return fail(err, errlen, RILL_EFORMAT, "%s: expected a bool (%s)", key, rill_err_name(e));
}

/* ---------------------------------------------------------------------------------------- */
/* creation                                                                                  */

static uint16_t attr_of_type(int32_t type) {
    switch (type) {
    case RILL_TOKENIZER_TYPE_NORMAL:
        return RILL_TOKENIZER_ATTR_NORMAL;
    case RILL_TOKENIZER_TYPE_UNKNOWN:
        return RILL_TOKENIZER_ATTR_UNKNOWN;
    case RILL_TOKENIZER_TYPE_CONTROL:
        return RILL_TOKENIZER_ATTR_CONTROL;
    case RILL_TOKENIZER_TYPE_USER_DEFINED:
        return RILL_TOKENIZER_ATTR_USER_DEFINED;
    case RILL_TOKENIZER_TYPE_UNUSED:
        return RILL_TOKENIZER_ATTR_UNUSED;
    case RILL_TOKENIZER_TYPE_BYTE:
        return RILL_TOKENIZER_ATTR_BYTE;
    default:
        return 0;
    }
}

/* Element i of an i32 / f32 array (little-endian, possibly unaligned). */
static int32_t arr_i32(const void *data, uint64_t i) {
    int32_t v;
    memcpy(&v, (const char *)data + 4 * i, 4);
    return v;
}

static float arr_f32(const void *data, uint64_t i) {
    float v;
    memcpy(&v, (const char *)data + 4 * i, 4);
    return v;
}

static rill_err_t load_tokens(rill_tokenizer_t *tok, const rill_gguf_t *g, char *err,
                              size_t errlen) {
    rill_gguf_type_t et;
    uint64_t n;
    rill_err_t e = rill_gguf_get_arr(g, KEY_TOKENS, &et, &n);
    if (e == RILL_ENOTFOUND) {
        return fail(err, errlen, RILL_EFORMAT, "missing %s", KEY_TOKENS);
    }
    if (e != RILL_OK || et != RILL_GGUF_STRING) {
        return fail(err, errlen, RILL_EFORMAT, "%s: expected an array of strings", KEY_TOKENS);
    }
    if (n == 0 || n > (uint64_t)INT32_MAX - 1) {
        return fail(err, errlen, RILL_EFORMAT, "%s: %llu tokens", KEY_TOKENS,
                    (unsigned long long)n);
    }
    tok->n_vocab = (int32_t)n;

    const void *scores = NULL, *types = NULL;
    bool scores_int = false;
    uint64_t len;
    e = rill_gguf_get_arr(g, KEY_SCORES, &et, &len);
    if (e == RILL_OK) {
        if (et != RILL_GGUF_F32 && et != RILL_GGUF_I32) {
            return fail(err, errlen, RILL_EFORMAT, "%s: expected f32 or i32 elements", KEY_SCORES);
        }
        if (len < n) {
            return fail(err, errlen, RILL_EFORMAT, "%s: %llu scores for %llu tokens", KEY_SCORES,
                        (unsigned long long)len, (unsigned long long)n);
        }
        scores_int = et == RILL_GGUF_I32;
        if (rill_gguf_get_arr_data(g, KEY_SCORES, &scores, &len) != RILL_OK) {
            return fail(err, errlen, RILL_EFORMAT, "%s: unreadable", KEY_SCORES);
        }
    } else if (e != RILL_ENOTFOUND) {
        return fail(err, errlen, RILL_EFORMAT, "%s: expected an array", KEY_SCORES);
    }
    e = rill_gguf_get_arr(g, KEY_TYPES, &et, &len);
    if (e == RILL_OK) {
        if (et != RILL_GGUF_I32) {
            return fail(err, errlen, RILL_EFORMAT, "%s: expected i32 elements", KEY_TYPES);
        }
        if (len < n) {
            return fail(err, errlen, RILL_EFORMAT, "%s: %llu types for %llu tokens", KEY_TYPES,
                        (unsigned long long)len, (unsigned long long)n);
        }
        if (rill_gguf_get_arr_data(g, KEY_TYPES, &types, &len) != RILL_OK) {
            return fail(err, errlen, RILL_EFORMAT, "%s: unreadable", KEY_TYPES);
        }
    } else if (e != RILL_ENOTFOUND) {
        return fail(err, errlen, RILL_EFORMAT, "%s: expected an array", KEY_TYPES);
    }

    /* blob size first: an empty entry reads "[EMPTY_<i>]" (llama.cpp) */
    uint64_t total = 0;
    for (uint64_t i = 0; i < n; i++) {
        rill_gguf_str_t s;
        if (rill_gguf_get_arr_str(g, KEY_TOKENS, i, &s) != RILL_OK) {
            return fail(err, errlen, RILL_EFORMAT, "%s[%llu]: unreadable", KEY_TOKENS,
                        (unsigned long long)i);
        }
        total += (s.len == 0 ? 24 : s.len) + 1;
    }
    if (total >= UINT32_MAX) {
        return fail(err, errlen, RILL_EFORMAT, "%s: %llu bytes of text", KEY_TOKENS,
                    (unsigned long long)total);
    }
    uint64_t hcap = 1;
    while (hcap < 2 * n) {
        hcap <<= 1;
    }
    if (hcap > UINT32_MAX) {
        return fail(err, errlen, RILL_EFORMAT, "%s: %llu tokens", KEY_TOKENS,
                    (unsigned long long)n);
    }
    tok->text_blob = rill_malloc(RILL_MEM_MODEL, (size_t)total);
    tok->text_off = rill_malloc(RILL_MEM_MODEL, ((size_t)n + 1) * sizeof(uint32_t));
    tok->scores = rill_malloc(RILL_MEM_MODEL, (size_t)n * sizeof(float));
    tok->types = rill_malloc(RILL_MEM_MODEL, (size_t)n);
    tok->attrs = rill_malloc(RILL_MEM_MODEL, (size_t)n * sizeof(uint16_t));
    tok->hash = rill_malloc(RILL_MEM_MODEL, (size_t)hcap * sizeof(int32_t));
    if (tok->text_blob == NULL || tok->text_off == NULL || tok->scores == NULL ||
        tok->types == NULL || tok->attrs == NULL || tok->hash == NULL) {
        return RILL_ENOMEM;
    }
    memset(tok->hash, 0xff, (size_t)hcap * sizeof(int32_t));
    tok->hash_mask = (uint32_t)(hcap - 1);

    uint32_t off = 0;
    for (uint64_t i = 0; i < n; i++) {
        rill_gguf_str_t s;
        rill_gguf_get_arr_str(g, KEY_TOKENS, i, &s);
        tok->text_off[i] = off;
        if (s.len == 0) {
            off +=
                (uint32_t)snprintf(tok->text_blob + off, 24, "[EMPTY_%llu]", (unsigned long long)i);
        } else {
            memcpy(tok->text_blob + off, s.ptr, s.len);
            off += (uint32_t)s.len;
        }
        if (off - tok->text_off[i] > tok->max_token) {
            tok->max_token = off - tok->text_off[i];
        }
        tok->text_blob[off++] = '\0';
        tok->scores[i] = scores == NULL ? 0.0f
                         : scores_int   ? (float)arr_i32(scores, i)
                                        : arr_f32(scores, i);
        int32_t type = types == NULL ? RILL_TOKENIZER_TYPE_NORMAL : arr_i32(types, i);
        tok->types[i] = (uint8_t)(type >= 0 && type <= 6 ? type : 0);
        tok->attrs[i] = attr_of_type(types == NULL ? RILL_TOKENIZER_TYPE_NORMAL : type);
    }
    tok->text_off[n] = off;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        int32_t other = hash_insert(tok, i);
        if (other >= 0) {
            size_t tl;
            const char *t = tok_text(tok, i, &tl);
            return fail(err, errlen, RILL_EFORMAT, "%s: duplicate token '%.*s' has ids %d and %d",
                        KEY_TOKENS, (int)(tl > 64 ? 64 : tl), t, other, i);
        }
    }
    return RILL_OK;
}

static rill_err_t load_merges(rill_tokenizer_t *tok, const rill_gguf_t *g, char *err,
                              size_t errlen) {
    rill_gguf_type_t et;
    uint64_t n;
    rill_err_t e = rill_gguf_get_arr(g, KEY_MERGES, &et, &n);
    if (e == RILL_ENOTFOUND) {
        return fail(err, errlen, RILL_EFORMAT, "missing %s", KEY_MERGES);
    }
    if (e != RILL_OK || et != RILL_GGUF_STRING) {
        return fail(err, errlen, RILL_EFORMAT, "%s: expected an array of strings", KEY_MERGES);
    }
    if (n > (uint64_t)INT32_MAX) {
        return fail(err, errlen, RILL_EFORMAT, "%s: too many merges", KEY_MERGES);
    }
    uint64_t cap = 64;
    while (cap < 2 * n) {
        cap <<= 1;
    }
    tok->pairs = rill_malloc(RILL_MEM_MODEL, (size_t)cap * sizeof(tok_pair_t));
    if (tok->pairs == NULL) {
        return RILL_ENOMEM;
    }
    for (uint64_t i = 0; i < cap; i++) {
        tok->pairs[i].rank = -1;
    }
    tok->pair_mask = cap - 1;

    /* room for "left" + "right" when it can still be a token */
    char *tmp = rill_malloc(RILL_MEM_MODEL, tok->max_token + 1);
    if (tmp == NULL) {
        return RILL_ENOMEM;
    }
    e = RILL_OK;
    for (uint64_t r = 0; r < n; r++) {
        rill_gguf_str_t s;
        if (rill_gguf_get_arr_str(g, KEY_MERGES, r, &s) != RILL_OK) {
            e = fail(err, errlen, RILL_EFORMAT, "%s[%llu]: unreadable", KEY_MERGES,
                     (unsigned long long)r);
            break;
        }
        /* "left right", split at the first space after the first byte (llama.cpp); an entry
         * without one can never match and is skipped, as there */
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (sp == NULL) {
            continue;
        }
        size_t ll = (size_t)(sp - s.ptr), rl = s.len - ll - 1;
        int32_t l = rill__tok_lookup(tok, s.ptr, ll);
        int32_t rt = rill__tok_lookup(tok, sp + 1, rl);
        int32_t res = -1;
        if (l >= 0 && rt >= 0 && ll + rl <= tok->max_token) {
            memcpy(tmp, s.ptr, ll);
            memcpy(tmp + ll, sp + 1, rl);
            res = rill__tok_lookup(tok, tmp, ll + rl);
        }
        if (res < 0) {
            e = fail(err, errlen, RILL_EFORMAT, "%s[%llu] '%.*s': %s is not a token", KEY_MERGES,
                     (unsigned long long)r, (int)(s.len > 64 ? 64 : s.len), s.ptr,
                     l < 0    ? "left part"
                     : rt < 0 ? "right part"
                              : "the merged text");
            break;
        }
        uint64_t key = tok_pair_key(l, rt);
        uint64_t i = tok_pair_home(key, tok->pair_mask);
        while (tok->pairs[i].rank >= 0 && tok->pairs[i].key != key) {
            i = (i + 1) & tok->pair_mask;
        }
        if (tok->pairs[i].rank < 0) { /* a repeated merge keeps its first (lowest) rank */
            tok->pairs[i].key = key;
            tok->pairs[i].rank = (int32_t)r;
            tok->pairs[i].result = res;
        }
    }
    rill_free(tmp);
    return e;
}

/* llama.cpp's text lists for detecting special tokens the metadata does not name. */
#define FW_BAR "\xef\xbd\x9c" /* U+FF5C fullwidth vertical line */
static const char *const g_eot_texts[] = { "<|eot_id|>",
                                           "<|im_end|>",
                                           "<|end|>",
                                           "<end_of_turn>",
                                           "<|endoftext|>",
                                           "<|end_of_text|>",
                                           "<EOT>",
                                           "_<EOT>",
                                           "[EOT]",
                                           "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR
                                           ">",
                                           "<end_of_utterance>",
                                           NULL };
static const char *const g_eom_texts[] = { "<|eom_id|>", NULL };
static const char *const g_fim_pre_texts[] = { "<|fim_prefix|>",
                                               "<fim-prefix>",
                                               "<fim_prefix>",
                                               "<" FW_BAR "fim" SPM_SP "begin" FW_BAR ">",
                                               "<PRE>",
                                               SPM_SP "<PRE>",
                                               "<|code_prefix|>",
                                               "<|prefix|>",
                                               NULL };
static const char *const g_fim_suf_texts[] = { "<|fim_suffix|>",
                                               "<fim-suffix>",
                                               "<fim_suffix>",
                                               "<" FW_BAR "fim" SPM_SP "hole" FW_BAR ">",
                                               "<SUF>",
                                               SPM_SP "<SUF>",
                                               "<|code_suffix|>",
                                               "<|suffix|>",
                                               NULL };
static const char *const g_fim_mid_texts[] = { "<|fim_middle|>",
                                               "<fim-middle>",
                                               "<fim_middle>",
                                               "<" FW_BAR "fim" SPM_SP "end" FW_BAR ">",
                                               "<MID>",
                                               SPM_SP "<MID>",
                                               "<|code_middle|>",
                                               "<|middle|>",
                                               NULL };
static const char *const g_fim_pad_texts[] = { "<|fim_pad|>", "<fim-pad>", "<fim_pad>",
                                               "<PAD>",       "[PAD]",     NULL };
static const char *const g_fim_rep_texts[] = { "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                               "<REPO>",       "<reponame>",    NULL };
static const char *const g_fim_sep_texts[] = { "<|file_sep|>", NULL };
static const char *const g_eog_texts[] = { "<|eot_id|>",
                                           "<|im_end|>",
                                           "<|end|>",
                                           "<|return|>",
                                           "<|call|>",
                                           "<|flush|>",
                                           "<|calls|>",
                                           "<end_of_turn>",
                                           "<|endoftext|>",
                                           "</s>",
                                           "<|eom_id|>",
                                           "<EOT>",
                                           "_<EOT>",
                                           "[EOT]",
                                           "[EOS]",
                                           "<|end_of_text|>",
                                           "<end_of_utterance>",
                                           "<eos>",
                                           "<turn|>",
                                           "<|tool_response>",
                                           "<" FW_BAR "end" SPM_SP "of" SPM_SP "sentence" FW_BAR
                                           ">",
                                           "[e~[",
                                           NULL };

static void force_control(rill_tokenizer_t *tok, int32_t id) {
    if ((tok->attrs[id] & RILL_TOKENIZER_ATTR_CONTROL) == 0) {
        size_t tl;
        const char *t = tok_text(tok, id, &tl);
        RILL_LOGD("tokenizer: control-looking token %d '%s' was not control-type; overridden", id,
                  t);
        tok->attrs[id] |= RILL_TOKENIZER_ATTR_CONTROL;
    }
}

static void detect_by_text(rill_tokenizer_t *tok, int32_t *slot, const char *const *texts) {
    if (*slot != RILL_TOKEN_NULL) {
        return;
    }
    for (int k = 0; texts[k] != NULL; k++) {
        int32_t id = lookup_cstr(tok, texts[k]);
        if (id >= 0) {
            *slot = id;
            force_control(tok, id);
            return;
        }
    }
}

static void eog_add(rill_tokenizer_t *tok, int32_t id) {
    if (id < 0 || id >= tok->n_vocab) {
        return;
    }
    for (int32_t i = 0; i < tok->n_eog; i++) {
        if (tok->eog[i] == id) {
            return;
        }
    }
    if (tok->n_eog < (int32_t)(sizeof(tok->eog) / sizeof(tok->eog[0]))) {
        tok->eog[tok->n_eog++] = id;
    }
}

static void eog_remove(rill_tokenizer_t *tok, int32_t id) {
    for (int32_t i = 0; i < tok->n_eog; i++) {
        if (tok->eog[i] == id) {
            tok->eog[i] = tok->eog[--tok->n_eog];
            return;
        }
    }
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct special_key {
    const char *key;
    size_t field; /* offsetof in rill_tokenizer_special_t */
} special_key_t;

static const special_key_t g_special_keys[] = {
    { "tokenizer.ggml.bos_token_id", offsetof(rill_tokenizer_special_t, bos) },
    { "tokenizer.ggml.eos_token_id", offsetof(rill_tokenizer_special_t, eos) },
    { "tokenizer.ggml.eot_token_id", offsetof(rill_tokenizer_special_t, eot) },
    { "tokenizer.ggml.eom_token_id", offsetof(rill_tokenizer_special_t, eom) },
    { "tokenizer.ggml.unknown_token_id", offsetof(rill_tokenizer_special_t, unk) },
    { "tokenizer.ggml.seperator_token_id", offsetof(rill_tokenizer_special_t, sep) },
    { "tokenizer.ggml.padding_token_id", offsetof(rill_tokenizer_special_t, pad) },
    { "tokenizer.ggml.mask_token_id", offsetof(rill_tokenizer_special_t, mask) },
    { "tokenizer.ggml.fim_pre_token_id", offsetof(rill_tokenizer_special_t, fim_pre) },
    { "tokenizer.ggml.fim_suf_token_id", offsetof(rill_tokenizer_special_t, fim_suf) },
    { "tokenizer.ggml.fim_mid_token_id", offsetof(rill_tokenizer_special_t, fim_mid) },
    { "tokenizer.ggml.fim_pad_token_id", offsetof(rill_tokenizer_special_t, fim_pad) },
    { "tokenizer.ggml.fim_rep_token_id", offsetof(rill_tokenizer_special_t, fim_rep) },
    { "tokenizer.ggml.fim_sep_token_id", offsetof(rill_tokenizer_special_t, fim_sep) },
    /* deprecated names */
    { "tokenizer.ggml.prefix_token_id", offsetof(rill_tokenizer_special_t, fim_pre) },
    { "tokenizer.ggml.suffix_token_id", offsetof(rill_tokenizer_special_t, fim_suf) },
    { "tokenizer.ggml.middle_token_id", offsetof(rill_tokenizer_special_t, fim_mid) },
};

static rill_err_t load_special(rill_tokenizer_t *tok, const rill_gguf_t *g, char *err,
                               size_t errlen) {
    rill_tokenizer_special_t *sp = &tok->sp;
    for (size_t k = 0; k < sizeof(g_special_keys) / sizeof(g_special_keys[0]); k++) {
        int32_t *slot = (int32_t *)((char *)sp + g_special_keys[k].field);
        if (*slot >= tok->n_vocab) {
            RILL_LOGW("tokenizer: default %s = %d out of vocab range, disabled",
                      g_special_keys[k].key, *slot);
            *slot = RILL_TOKEN_NULL;
        }
        int64_t v;
        rill_err_t e = rill_gguf_get_i64(g, g_special_keys[k].key, &v);
        if (e == RILL_ENOTFOUND) {
            continue;
        }
        if (e != RILL_OK) {
            return fail(err, errlen, RILL_EFORMAT, "%s: expected an integer",
                        g_special_keys[k].key);
        }
        if (v < 0 || v >= tok->n_vocab) {
            RILL_LOGW("tokenizer: bad %s = %lld, keeping %d", g_special_keys[k].key, (long long)v,
                      *slot);
            continue;
        }
        *slot = (int32_t)v;
    }

    rill_err_t e = opt_bool(g, KEY_ADD_BOS, &sp->add_bos, err, errlen);
    if (e == RILL_OK) {
        e = opt_bool(g, KEY_ADD_EOS, &sp->add_eos, err, errlen);
    }
    if (e != RILL_OK) {
        return e;
    }
    if (sp->add_bos && sp->bos == RILL_TOKEN_NULL) {
        return fail(err, errlen, RILL_EFORMAT, "%s is true, but there is no bos token",
                    KEY_ADD_BOS);
    }
    if (sp->add_eos && sp->eos == RILL_TOKEN_NULL) {
        return fail(err, errlen, RILL_EFORMAT, "%s is true, but there is no eos token",
                    KEY_ADD_EOS);
    }

    /* special tokens the metadata did not name, found by text */
    detect_by_text(tok, &sp->eot, g_eot_texts);
    detect_by_text(tok, &sp->eom, g_eom_texts);
    detect_by_text(tok, &sp->fim_pre, g_fim_pre_texts);
    detect_by_text(tok, &sp->fim_suf, g_fim_suf_texts);
    detect_by_text(tok, &sp->fim_mid, g_fim_mid_texts);
    detect_by_text(tok, &sp->fim_pad, g_fim_pad_texts);
    detect_by_text(tok, &sp->fim_rep, g_fim_rep_texts);
    detect_by_text(tok, &sp->fim_sep, g_fim_sep_texts);

    /* control tokens named "...unused..." are unused */
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        if ((tok->attrs[i] & RILL_TOKENIZER_ATTR_CONTROL) != 0 &&
            strstr(tok->text_blob + tok->text_off[i], "unused") != NULL) {
            tok->attrs[i] |= RILL_TOKENIZER_ATTR_UNUSED;
        }
    }

    /* end-of-generation set */
    eog_add(tok, sp->fim_pad);
    eog_add(tok, sp->fim_rep);
    eog_add(tok, sp->fim_sep);
    for (int k = 0; g_eog_texts[k] != NULL; k++) {
        int32_t id = lookup_cstr(tok, g_eog_texts[k]);
        if (id >= 0) {
            eog_add(tok, id);
            force_control(tok, id);
        }
    }
    /* gpt-oss: always render these */
    static const char *const user_defined[] = { "<|channel|>", "<|message|>", "<|start|>",
                                                "<|constrain|>", NULL };
    for (int k = 0; user_defined[k] != NULL; k++) {
        int32_t id = lookup_cstr(tok, user_defined[k]);
        if (id >= 0) {
            tok->attrs[id] = RILL_TOKENIZER_ATTR_USER_DEFINED;
        }
    }
    eog_add(tok, sp->eos);
    eog_add(tok, sp->eot);
    eog_add(tok, sp->eom);
    /* o200k_harmony / solar-open: "<|end|>" is no end of generation there */
    {
        int32_t ret = lookup_cstr(tok, "<|return|>"), call = lookup_cstr(tok, "<|call|>");
        int32_t calls = lookup_cstr(tok, "<|calls|>"), flush = lookup_cstr(tok, "<|flush|>");
        int32_t end = lookup_cstr(tok, "<|end|>");
        bool has_call = rill_tokenizer_is_eog(tok, call) || rill_tokenizer_is_eog(tok, calls);
        bool has_ret = rill_tokenizer_is_eog(tok, ret);
        bool has_flush = rill_tokenizer_is_eog(tok, flush);
        if (rill_tokenizer_is_eog(tok, end) && ((has_ret && has_call) || (has_call && has_flush))) {
            eog_remove(tok, end);
            tok->attrs[end] = RILL_TOKENIZER_ATTR_USER_DEFINED;
        }
    }
    /* gemma4 / paddleocr: "</s>" is no end of generation next to "<|tool_response>" */
    {
        int32_t tr = lookup_cstr(tok, "<|tool_response>"), s = lookup_cstr(tok, "</s>");
        if (rill_tokenizer_is_eog(tok, tr) && rill_tokenizer_is_eog(tok, s)) {
            eog_remove(tok, s);
            tok->attrs[s] = RILL_TOKENIZER_ATTR_NORMAL;
        }
    }
    qsort(tok->eog, (size_t)tok->n_eog, sizeof(int32_t), cmp_i32);
    return RILL_OK;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static rill_err_t build_special_list(rill_tokenizer_t *tok) {
    const uint16_t mask = RILL_TOKENIZER_ATTR_CONTROL | RILL_TOKENIZER_ATTR_USER_DEFINED |
                          RILL_TOKENIZER_ATTR_UNKNOWN;
    int32_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        n += (tok->attrs[i] & mask) != 0;
    }
    tok->special = rill_malloc(RILL_MEM_MODEL, (size_t)(n > 0 ? n : 1) * sizeof(uint64_t));
    if (tok->special == NULL) {
        return RILL_ENOMEM;
    }
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        if ((tok->attrs[i] & mask) != 0) {
            uint32_t len = tok->text_off[i + 1] - tok->text_off[i] - 1;
            tok->special[tok->n_special++] = ((uint64_t)~len << 32) | (uint32_t)i;
        }
    }
    qsort(tok->special, (size_t)tok->n_special, sizeof(uint64_t), cmp_u64);
    return RILL_OK;
}

static void apply_model_attrs(rill_tokenizer_t *tok, const rill_gguf_t *g) {
    rill_gguf_str_t name = { NULL, 0 };
    char lower[256];
    size_t n = 0;
    if (rill_gguf_get_str(g, "general.name", &name) == RILL_OK) {
        n = name.len < sizeof(lower) - 1 ? (size_t)name.len : sizeof(lower) - 1;
        for (size_t i = 0; i < n; i++) {
            lower[i] = (char)tolower((unsigned char)name.ptr[i]);
        }
    }
    lower[n] = '\0';
    const char *pre = tok->pre_name;
    if (strstr(pre, "jina-v2-de") != NULL || strstr(pre, "jina-v2-es") != NULL ||
        strstr(pre, "jina-v2-code") != NULL) {
        int32_t id = lookup_cstr(tok, "<mask>");
        if (id >= 0) {
            tok->attrs[id] |= RILL_TOKENIZER_ATTR_LSTRIP;
        }
    } else if (strstr(lower, "phi-3") != NULL || strstr(lower, "phi3") != NULL) {
        for (int32_t i = 0; i < tok->n_special; i++) {
            tok->attrs[special_id(tok, i)] |= RILL_TOKENIZER_ATTR_RSTRIP;
        }
        int32_t id = lookup_cstr(tok, "</s>");
        if (id >= 0) {
            tok->attrs[id] |= RILL_TOKENIZER_ATTR_RSTRIP;
        }
        static const char *const keep[] = { "<unk>", "<s>", "<|endoftext|>", NULL };
        for (int k = 0; keep[k] != NULL; k++) {
            id = lookup_cstr(tok, keep[k]);
            if (id >= 0) {
                tok->attrs[id] &= (uint16_t)~RILL_TOKENIZER_ATTR_RSTRIP;
            }
        }
    } else if (strstr(lower, "modern-bert") != NULL) {
        int32_t id = lookup_cstr(tok, "[MASK]");
        if (id >= 0) {
            tok->attrs[id] |= RILL_TOKENIZER_ATTR_LSTRIP;
        }
    }
}

/* The piece of id with special = true, into out (NULL: measure). */
static size_t make_piece(const rill_tokenizer_t *tok, int32_t id, char *out, size_t cap) {
    const uint16_t a = tok->attrs[id];
    size_t tl;
    const char *t = tok_text(tok, id, &tl);
    if ((a & (RILL_TOKENIZER_ATTR_UNKNOWN | RILL_TOKENIZER_ATTR_CONTROL |
              RILL_TOKENIZER_ATTR_USER_DEFINED)) != 0) {
        if (out != NULL && tl <= cap) {
            memcpy(out, t, tl);
        }
        return tl;
    }
    if ((a & RILL_TOKENIZER_ATTR_NORMAL) != 0) {
        if (tok->kind == RILL_TOKENIZER_BPE) {
            return rill__tok_bpe_decode_text(t, tl, out, cap);
        }
        size_t o = 0;
        for (size_t i = 0; i < tl;) {
            if (i + 3 <= tl && memcmp(t + i, SPM_SP, 3) == 0) {
                if (out != NULL && o < cap) {
                    out[o] = ' ';
                }
                o++;
                i += 3;
            } else {
                if (out != NULL && o < cap) {
                    out[o] = t[i];
                }
                o++;
                i++;
            }
        }
        return o;
    }
    if ((a & RILL_TOKENIZER_ATTR_BYTE) != 0) {
        /* llama.cpp: strtol(text.substr(3, 2), 16) */
        unsigned v = 0;
        for (size_t i = 3; i < tl && i < 5; i++) {
            int c = (unsigned char)t[i];
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0) {
                break;
            }
            v = v * 16 + (unsigned)d;
        }
        if (out != NULL && cap >= 1) {
            out[0] = (char)v;
        }
        return 1;
    }
    return 0;
}

static rill_err_t build_pieces(rill_tokenizer_t *tok) {
    uint64_t total = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        size_t n = make_piece(tok, i, NULL, 0);
        total += n;
        if (n > tok->max_piece) {
            tok->max_piece = n;
        }
    }
    if (total >= UINT32_MAX) {
        return RILL_EFORMAT;
    }
    tok->piece_blob = rill_malloc(RILL_MEM_MODEL, (size_t)(total > 0 ? total : 1));
    tok->piece_off = rill_malloc(RILL_MEM_MODEL, ((size_t)tok->n_vocab + 1) * sizeof(uint32_t));
    if (tok->piece_blob == NULL || tok->piece_off == NULL) {
        return RILL_ENOMEM;
    }
    uint32_t off = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        tok->piece_off[i] = off;
        off += (uint32_t)make_piece(tok, i, tok->piece_blob + off, (size_t)(total - off));
    }
    tok->piece_off[tok->n_vocab] = off;
    return RILL_OK;
}

static void init_byte_tables(rill_tokenizer_t *tok) {
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        tok->spm_byte_id[b] = -1;
        tok->bl_id[b] = -1;
        tok->raw_byte_id[b] = -1;
    }
    if (tok->kind == RILL_TOKENIZER_BPE) {
        rill__tok_bpe_init_bytes(tok);
        return;
    }
    for (int b = 0; b < 256; b++) {
        char buf[6] = { '<', '0', 'x', hex[b >> 4], hex[b & 15], '>' };
        int32_t id = rill__tok_lookup(tok, buf, 6);
        if (id < 0) {
            char raw = (char)b;
            id = rill__tok_lookup(tok, &raw, 1);
        }
        tok->spm_byte_id[b] = id;
    }
}

/* The token of "\n": SPM byte_to_token('\n'), BPE tokenize("\n")[0]; pad when there is none. */
static void find_newline(rill_tokenizer_t *tok) {
    int32_t nl = -1;
    if (tok->kind == RILL_TOKENIZER_SPM) {
        nl = tok->spm_byte_id['\n'];
    } else {
        int32_t whole = lookup_cstr(tok, "\n");
        if (whole >= 0 && (tok->attrs[whole] & RILL_TOKENIZER_ATTR_USER_DEFINED) != 0) {
            nl = whole; /* cut out by the special-token partition */
        } else if (tok->bl_id['\n'] >= 0) {
            nl = tok->bl_id['\n'];
        } else {
            for (int k = 0; k < tok->bl_len['\n'] && nl < 0; k++) {
                nl = tok->raw_byte_id[tok->bl_utf8['\n'][k]];
            }
        }
    }
    tok->sp.nl = nl >= 0 ? nl : tok->sp.pad;
}

void rill_tokenizer_destroy(rill_tokenizer_t **tp) {
    if (tp == NULL || *tp == NULL) {
        return;
    }
    rill_tokenizer_t *tok = *tp;
    rill__tok_pre_free(tok);
    rill_free(tok->text_blob);
    rill_free(tok->text_off);
    rill_free(tok->scores);
    rill_free(tok->types);
    rill_free(tok->attrs);
    rill_free(tok->piece_blob);
    rill_free(tok->piece_off);
    rill_free(tok->hash);
    rill_free(tok->pairs);
    rill_free(tok->special);
    rill_free(tok);
    *tp = NULL;
}

static rill_err_t tokenizer_new_buf(const rill_gguf_t *g, rill_tokenizer_t **out, char *msg,
                                    size_t msglen) {
    rill_err_t err = RILL_OK;
    rill_tokenizer_t *tok = NULL;
    if (msg != NULL && msglen > 0) {
        msg[0] = '\0';
    }
    if (out == NULL) {
        return fail(msg, msglen, RILL_EINVAL, "out is NULL");
    }
    *out = NULL;
    if (g == NULL) {
        return fail(msg, msglen, RILL_EINVAL, "gguf is NULL");
    }

    rill_gguf_str_t model;
    err = rill_gguf_get_str(g, KEY_MODEL, &model);
    if (err == RILL_ENOTFOUND) {
        return fail(msg, msglen, RILL_EFORMAT, "missing %s", KEY_MODEL);
    }
    if (err != RILL_OK) {
        return fail(msg, msglen, RILL_EFORMAT, "%s: expected a string", KEY_MODEL);
    }
    rill_tokenizer_kind_t kind;
    if (rill_gguf_str_eq(model, "llama")) {
        kind = RILL_TOKENIZER_SPM;
    } else if (rill_gguf_str_eq(model, "gpt2")) {
        kind = RILL_TOKENIZER_BPE;
    } else {
        return fail(msg, msglen, RILL_EUNSUPPORTED, "%s '%.*s' is not supported", KEY_MODEL,
                    (int)(model.len > 64 ? 64 : model.len), model.ptr);
    }

    const tok_pre_def_t *pre = NULL;
    char pre_name[32] = "";
    if (kind == RILL_TOKENIZER_BPE) {
        rill_gguf_str_t p;
        err = rill_gguf_get_str(g, KEY_PRE, &p);
        if (err == RILL_ENOTFOUND) {
            RILL_LOGW("tokenizer: missing %s, using 'default' (quality will be degraded)", KEY_PRE);
            p.ptr = "default";
            p.len = 7;
        } else if (err != RILL_OK) {
            return fail(msg, msglen, RILL_EFORMAT, "%s: expected a string", KEY_PRE);
        }
        pre = rill__tok_pre_find(p.ptr, (size_t)p.len);
        if (pre == NULL || p.len >= sizeof(pre_name)) {
            return fail(msg, msglen, RILL_EUNSUPPORTED, "%s '%.*s' is not supported", KEY_PRE,
                        (int)(p.len > 64 ? 64 : p.len), p.ptr);
        }
        memcpy(pre_name, p.ptr, p.len);
        pre_name[p.len] = '\0';
    }

    tok = rill_calloc(RILL_MEM_MODEL, 1, sizeof(*tok));
    if (tok == NULL) {
        return RILL_ENOMEM;
    }
    tok->kind = kind;
    tok->pre = pre;
    memcpy(tok->pre_name, pre_name, sizeof(pre_name));
    rill_tokenizer_special_t *sp = &tok->sp;
    *sp = (rill_tokenizer_special_t){
        .bos = RILL_TOKEN_NULL,
        .eos = RILL_TOKEN_NULL,
        .eot = RILL_TOKEN_NULL,
        .eom = RILL_TOKEN_NULL,
        .unk = RILL_TOKEN_NULL,
        .sep = RILL_TOKEN_NULL,
        .pad = RILL_TOKEN_NULL,
        .mask = RILL_TOKEN_NULL,
        .nl = RILL_TOKEN_NULL,
        .fim_pre = RILL_TOKEN_NULL,
        .fim_suf = RILL_TOKEN_NULL,
        .fim_mid = RILL_TOKEN_NULL,
        .fim_pad = RILL_TOKEN_NULL,
        .fim_rep = RILL_TOKEN_NULL,
        .fim_sep = RILL_TOKEN_NULL,
    };
    if (kind == RILL_TOKENIZER_SPM) {
        sp->bos = 1;
        sp->eos = 2;
        sp->unk = 0;
        sp->add_space_prefix = true;
        sp->add_bos = true;
    } else {
        sp->bos = 11;
        sp->eos = 11;
        sp->add_bos = pre->add_bos;
        sp->clean_spaces = pre->clean_spaces;
        tok->ignore_merges = pre->ignore_merges;
    }
    RILL_TRY(opt_bool(g, KEY_ADD_PREFIX, &sp->add_space_prefix, msg, msglen));

    RILL_TRY(load_tokens(tok, g, msg, msglen));
    if (kind == RILL_TOKENIZER_BPE) {
        RILL_TRY(load_merges(tok, g, msg, msglen));
    }
    init_byte_tables(tok);
    RILL_TRY(load_special(tok, g, msg, msglen));
    RILL_TRY(build_special_list(tok));
    apply_model_attrs(tok, g);
    err = build_pieces(tok);
    if (err == RILL_EFORMAT) {
        fail(msg, msglen, err, "%s: decoded pieces exceed 4 GiB", KEY_TOKENS);
    }
    if (err != RILL_OK) {
        goto cleanup;
    }
    if (kind == RILL_TOKENIZER_BPE) {
        RILL_TRY(rill__tok_pre_compile(tok, msg, msglen));
    }
    find_newline(tok);

    *out = tok;
    return RILL_OK;

cleanup:
    if (err == RILL_ENOMEM && msg != NULL && msglen > 0 && msg[0] == '\0') {
        fail(msg, msglen, err, "out of memory while building the tokenizer");
    }
    rill_tokenizer_destroy(&tok);
    return err;
}

rill_err_t rill_tokenizer_new(const rill_gguf_t *g, rill_tokenizer_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    return rill__error_str(tokenizer_new_buf(g, out, msg, sizeof msg), msg);
}

/* ---------------------------------------------------------------------------------------- */
/* accessors                                                                                 */

rill_tokenizer_kind_t rill_tokenizer_kind(const rill_tokenizer_t *tok) {
    return tok->kind;
}

const char *rill_tokenizer_pre(const rill_tokenizer_t *tok) {
    return tok->pre_name;
}

int32_t rill_tokenizer_n_vocab(const rill_tokenizer_t *tok) {
    return tok->n_vocab;
}

const rill_tokenizer_special_t *rill_tokenizer_special(const rill_tokenizer_t *tok) {
    return &tok->sp;
}

bool rill_tokenizer_is_eog(const rill_tokenizer_t *tok, int32_t id) {
    if (tok == NULL || id < 0 || id >= tok->n_vocab) {
        return false;
    }
    for (int32_t i = 0; i < tok->n_eog; i++) {
        if (tok->eog[i] == id) {
            return true;
        }
    }
    return false;
}

const char *rill_tokenizer_text(const rill_tokenizer_t *tok, int32_t id, size_t *len) {
    size_t n = 0;
    const char *t = NULL;
    if (tok != NULL && id >= 0 && id < tok->n_vocab) {
        t = tok_text(tok, id, &n);
    }
    if (len != NULL) {
        *len = n;
    }
    return t;
}

float rill_tokenizer_score(const rill_tokenizer_t *tok, int32_t id) {
    return tok != NULL && id >= 0 && id < tok->n_vocab ? tok->scores[id] : 0.0f;
}

rill_tokenizer_type_t rill_tokenizer_type(const rill_tokenizer_t *tok, int32_t id) {
    return tok != NULL && id >= 0 && id < tok->n_vocab ? (rill_tokenizer_type_t)tok->types[id]
                                                       : RILL_TOKENIZER_TYPE_UNDEFINED;
}

uint32_t rill_tokenizer_attr(const rill_tokenizer_t *tok, int32_t id) {
    return tok != NULL && id >= 0 && id < tok->n_vocab ? tok->attrs[id] : 0;
}

int32_t rill_tokenizer_find(const rill_tokenizer_t *tok, const char *text, size_t len) {
    if (tok == NULL || (text == NULL && len > 0)) {
        return RILL_TOKEN_NULL;
    }
    return rill__tok_lookup(tok, text == NULL ? "" : text, len);
}
