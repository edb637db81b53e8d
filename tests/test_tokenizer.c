/*
 * test_tokenizer.c - the tokenizer against llama.cpp's own reference tokenizations.
 *
 * The reference cases are llama.cpp's (shared/testdata/tokenizer: four vocabulary-only GGUFs,
 * one per tokenizer family, with .inp/.out pairs made with add_special and parse_special off),
 * plus every tests/data/ref/<model>.gguf.inp that tools/ref_logits.py produced with llama.cpp
 * for the models under models/ or tests/data/models/ (skipped when the model file is absent).
 * Every case must match exactly.
 *
 * Then the properties llama.cpp's files do not cover: round trips, the streaming detokenizer on
 * characters split across tokens, special-token parsing on and off, add_special, RILL_EFULL and
 * measuring, scratch reuse, long inputs (no quadratic blow-up), invalid UTF-8, malformed
 * metadata (built in memory) and every allocation failure during creation and encoding.
 */
#include <check.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_gguf.h"
#include "rill_tokenizer.h"
#include "test_util.h"

#define VOCAB_DIR RILL_SHARED_DIR "/testdata/tokenizer/"
#define REF_DIR   RILL_SOURCE_DIR "/tests/data/ref/"
#define MARKER    "\n__ggml_vocab_test__\n"

/* ---- helpers --------------------------------------------------------------------------- */

static rill_tokenizer_t *load(const char *path, rill_gguf_t **gp) {
    char err[256];
    rill_gguf_t *g = NULL;
    rill_err_t e = rill_gguf_open(path, &g);
    ck_assert_msg(e == RILL_OK, "%s: %s", path, err);
    rill_tokenizer_t *tok = NULL;
    e = rill_tokenizer_new(g, &tok);
    ck_assert_msg(e == RILL_OK, "%s: %s (%s)", path, err, rill_err_name(e));
    if (gp != NULL) {
        *gp = g;
    } else {
        rill_gguf_destroy(&g);
    }
    return tok;
}

static rill_tokenizer_t *load_vocab(const char *name) {
    char path[512];
    snprintf(path, sizeof(path), VOCAB_DIR "ggml-vocab-%s.gguf", name);
    return load(path, NULL);
}

/* Encodes into a malloc'd array (caller frees); *n gets the count. */
static int32_t *encode(const rill_tokenizer_t *tok, const char *s, size_t len, bool add_special,
                       bool parse_special, int64_t *n) {
    int64_t count = rill_tokenizer_encode(tok, s, len, add_special, parse_special, NULL, 0);
    ck_assert_int_ge(count, 0);
    int32_t *ids = malloc(((size_t)count + 1) * sizeof(int32_t));
    ck_assert_ptr_nonnull(ids);
    int64_t r = rill_tokenizer_encode(tok, s, len, add_special, parse_special, ids, count);
    ck_assert_int_eq(r, count);
    *n = count;
    return ids;
}

static char *decode(const rill_tokenizer_t *tok, const int32_t *ids, int64_t n, unsigned flags,
                    size_t *len) {
    size_t need = 0;
    int64_t r = rill_tokenizer_decode(tok, ids, n, flags, NULL, 0, &need);
    ck_assert(r == 0 || r == RILL_EFULL);
    char *buf = malloc(need + 1);
    ck_assert_ptr_nonnull(buf);
    r = rill_tokenizer_decode(tok, ids, n, flags, buf, need, NULL);
    ck_assert_int_ge(r, 0);
    buf[r] = '\0';
    *len = (size_t)r;
    return buf;
}

static bool utf8_valid(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        size_t need;
        unsigned char lo = 0x80, hi = 0xbf;
        if (b < 0x80) {
            i++;
            continue;
        } else if (b >= 0xc2 && b <= 0xdf) {
            need = 2;
        } else if (b >= 0xe0 && b <= 0xef) {
            need = 3;
            lo = b == 0xe0 ? 0xa0 : 0x80;
            hi = b == 0xed ? 0x9f : 0xbf;
        } else if (b >= 0xf0 && b <= 0xf4) {
            need = 4;
            lo = b == 0xf0 ? 0x90 : 0x80;
            hi = b == 0xf4 ? 0x8f : 0xbf;
        } else {
            return false;
        }
        if (i + need > n || s[i + 1] < lo || s[i + 1] > hi) {
            return false;
        }
        for (size_t k = 2; k < need; k++) {
            if ((s[i + k] & 0xc0) != 0x80) {
                return false;
            }
        }
        i += need;
    }
    return true;
}

/* ---- reference cases ------------------------------------------------------------------- */

typedef struct cases {
    char *inp, *out;
    size_t n;
    const char *text[256];
    size_t len[256];
    char *line[256];
} cases_t;

static bool cases_load(cases_t *c, const char *inp_path, const char *out_path) {
    size_t il, ol;
    memset(c, 0, sizeof(*c));
    c->inp = test_read_text_if_present(inp_path, &il);
    c->out = test_read_text_if_present(out_path, &ol);
    if (c->inp == NULL || c->out == NULL) {
        free(c->inp);
        free(c->out);
        return false;
    }
    size_t pos = 0, ml = strlen(MARKER);
    for (;;) {
        char *at = strstr(c->inp + pos, MARKER);
        if (at == NULL) {
            break;
        }
        ck_assert_uint_lt(c->n, 256);
        c->text[c->n] = c->inp + pos;
        c->len[c->n] = (size_t)(at - (c->inp + pos));
        c->n++;
        pos = (size_t)(at - c->inp) + ml;
    }
    ck_assert_msg(pos == il, "%s: text after the last marker", inp_path);
    size_t nl = 0;
    char *p = c->out;
    while (*p != '\0') {
        char *e = strchr(p, '\n');
        ck_assert_ptr_nonnull(e);
        *e = '\0';
        ck_assert_uint_lt(nl, 256);
        c->line[nl++] = p;
        p = e + 1;
    }
    ck_assert_msg(nl == c->n, "%s: %zu cases, %zu output lines", inp_path, c->n, nl);
    return true;
}

static void cases_free(cases_t *c) {
    free(c->inp);
    free(c->out);
}

/* Runs every case; returns the number of mismatches (details on stderr). */
static int run_cases(const rill_tokenizer_t *tok, const cases_t *c, const char *label) {
    int bad = 0;
    rill_tokenizer_work_t *w = NULL;
    ck_assert_int_eq(rill_tokenizer_work_new(&w), RILL_OK);
    int32_t ids[4096];
    for (size_t i = 0; i < c->n; i++) {
        int64_t n = rill_tokenizer_encode_with(tok, w, c->text[i], c->len[i], false, false, ids,
                                               4096, NULL);
        ck_assert_int_ge(n, 0);
        int32_t want[4096];
        int64_t nw = 0;
        for (char *q = c->line[i]; *q != '\0';) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) {
                break;
            }
            want[nw++] = (int32_t)v;
            q = end;
        }
        bool same = n == nw && memcmp(ids, want, (size_t)n * sizeof(int32_t)) == 0;
        if (!same) {
            bad++;
            fprintf(stderr, "%s case %zu '%.*s': got", label, i, (int)c->len[i], c->text[i]);
            for (int64_t k = 0; k < n; k++) {
                fprintf(stderr, " %d", ids[k]);
            }
            fprintf(stderr, "\n  want %s\n", c->line[i]);
        }
    }
    rill_tokenizer_work_destroy(&w);
    return bad;
}

static const char *const g_vocabs[] = { "llama-spm", "llama-bpe", "qwen2", "gpt-2" };

START_TEST(test_reference_vocab) {
    const char *name = g_vocabs[_i];
    char path[512], inp[520], out[520];
    snprintf(path, sizeof(path), VOCAB_DIR "ggml-vocab-%s.gguf", name);
    snprintf(inp, sizeof(inp), "%s.inp", path);
    snprintf(out, sizeof(out), "%s.out", path);
    rill_tokenizer_t *tok = load(path, NULL);
    cases_t c;
    ck_assert(cases_load(&c, inp, out));
    int bad = run_cases(tok, &c, name);
    fprintf(stderr, "tokenizer reference %-10s %zu/%zu cases match\n", name, c.n - (size_t)bad,
            c.n);
    ck_assert_int_eq(bad, 0);
    cases_free(&c);
    rill_tokenizer_destroy(&tok);
}
END_TEST

/* Every tests/data/ref/X.gguf.inp, run against X.gguf from models/ or tests/data/models/. */
START_TEST(test_reference_models) {
    DIR *d = opendir(REF_DIR);
    if (d == NULL) {
        fprintf(stderr, "tokenizer: no %s, skipped\n", REF_DIR);
        return;
    }
    struct dirent *de;
    int ran = 0;
    while ((de = readdir(d)) != NULL) {
        size_t nl = strlen(de->d_name);
        if (nl < 9 || strcmp(de->d_name + nl - 9, ".gguf.inp") != 0) {
            continue;
        }
        char model[256];
        snprintf(model, sizeof(model), "%.*s", (int)(nl - 4), de->d_name);
        char path[768], inp[768], out[768];
        test_model_path(path, sizeof(path), model);
        if (!test_file_exists(path)) {
            fprintf(stderr, "tokenizer: %s absent, %s skipped\n", model, de->d_name);
            continue;
        }
        snprintf(inp, sizeof(inp), REF_DIR "%s.inp", model);
        snprintf(out, sizeof(out), REF_DIR "%s.out", model);
        cases_t c;
        if (!cases_load(&c, inp, out)) {
            continue;
        }
        rill_tokenizer_t *tok = load(path, NULL);
        int bad = run_cases(tok, &c, model);
        fprintf(stderr, "tokenizer reference %s: %zu/%zu cases match\n", model, c.n - (size_t)bad,
                c.n);
        ck_assert_int_eq(bad, 0);
        cases_free(&c);
        rill_tokenizer_destroy(&tok);
        ran++;
    }
    closedir(d);
    (void)ran;
}
END_TEST

/* ---- properties ------------------------------------------------------------------------ */

START_TEST(test_roundtrip) {
    const char *name = g_vocabs[_i];
    char path[512];
    snprintf(path, sizeof(path), VOCAB_DIR "ggml-vocab-%s.gguf", name);
    char inp[520], out[520];
    snprintf(inp, sizeof(inp), "%s.inp", path);
    snprintf(out, sizeof(out), "%s.out", path);
    rill_tokenizer_t *tok = load(path, NULL);
    cases_t c;
    ck_assert(cases_load(&c, inp, out));
    static const char *extra[] = { "Hello, y'all! 123456789 \xe4\xbd\xa0\xe5\xa5\xbd\n\n\t x",
                                   "\xf0\x9f\xa6\x99\xf0\x9f\xa6\x99 ok", "<|im_start|> <s>" };
    for (size_t i = 0; i < c.n + 3; i++) {
        const char *s = i < c.n ? c.text[i] : extra[i - c.n];
        size_t sl = i < c.n ? c.len[i] : strlen(s);
        int64_t n;
        int32_t *ids = encode(tok, s, sl, false, false, &n);
        size_t dl;
        /* byte-level BPE is lossless on the raw pieces; SPM loses nothing either once the
         * prefix space is stripped (llama.cpp's detokenize without clean-up) */
        unsigned flags =
            rill_tokenizer_kind(tok) == RILL_TOKENIZER_BPE ? RILL_TOKENIZER_DECODE_RAW : 0;
        char *back = decode(tok, ids, n, flags, &dl);
        ck_assert_msg(dl == sl && memcmp(back, s, sl) == 0, "%s: '%.*s' came back as '%s'", name,
                      (int)sl, s, back);
        free(back);
        free(ids);
    }
    cases_free(&c);
    rill_tokenizer_destroy(&tok);
}
END_TEST

/* Feeds ids one at a time; every chunk must be valid UTF-8; returns the concatenation. */
static char *stream_all(const rill_tokenizer_t *tok, const int32_t *ids, int64_t n, unsigned flags,
                        size_t *len, int *held) {
    size_t bound = rill_tokenizer_stream_bound(tok);
    char *chunk = malloc(bound);
    char *all = malloc(bound * (size_t)(n + 1) + 4);
    ck_assert(chunk != NULL && all != NULL);
    rill_tokenizer_stream_t s;
    rill_tokenizer_stream_init(&s, flags);
    size_t o = 0;
    *held = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t pl;
        rill_tokenizer_piece(tok, ids[i], (flags & RILL_TOKENIZER_STREAM_SPECIAL) != 0, &pl);
        int64_t r = rill_tokenizer_stream_feed(tok, &s, ids[i], chunk, bound);
        ck_assert_int_ge(r, 0);
        ck_assert_msg(utf8_valid((const unsigned char *)chunk, (size_t)r), "chunk %lld invalid",
                      (long long)i);
        if ((size_t)r < pl) {
            (*held)++;
        }
        memcpy(all + o, chunk, (size_t)r);
        o += (size_t)r;
    }
    int64_t r = rill_tokenizer_stream_flush(&s, chunk, bound);
    ck_assert_int_ge(r, 0);
    memcpy(all + o, chunk, (size_t)r);
    o += (size_t)r;
    free(chunk);
    *len = o;
    return all;
}

/* Sequences llama.cpp tokenized for tests/data/ref/index.json (tools/ref_logits.py) with
 * add_special and, for the chat prompt, parse_special on. */
START_TEST(test_default_model_sequences) {
    const char *path = RILL_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
    if (!test_file_exists(path)) {
        fprintf(stderr, "tokenizer: %s absent, skipped\n", path);
        return;
    }
    rill_tokenizer_t *tok = load(path, NULL);
    ck_assert_str_eq(rill_tokenizer_pre(tok), "smollm");
    const rill_tokenizer_special_t *sp = rill_tokenizer_special(tok);
    ck_assert(!sp->add_bos && !sp->add_eos && !sp->clean_spaces);
    ck_assert_int_eq(sp->bos, 1);
    ck_assert_int_eq(sp->eos, 2);
    ck_assert_int_eq(sp->eot, 2); /* <|im_end|> */
    ck_assert(rill_tokenizer_is_eog(tok, 0) && rill_tokenizer_is_eog(tok, 2));
    static const char chat[] =
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n";
    static const int32_t chat_ids[] = { 1,     9690,  198,  2683, 359,   253,  5356, 5646,
                                        11173, 3365,  3511, 308,  34519, 28,   7018, 411,
                                        407,   19712, 8182, 2,    198,   1,    4093, 198,
                                        1780,  314,   260,  3575, 282,   4649, 47,   2,
                                        198,   1,     520,  9531, 198 };
    static const char fox[] = "The quick brown fox jumps over the lazy dog.";
    static const int32_t fox_ids[] = { 504, 2365, 6354, 16438, 27003, 690, 260, 23790, 2767, 30 };
    int64_t n;
    int32_t *ids = encode(tok, chat, strlen(chat), true, true, &n);
    ck_assert_int_eq(n, (int64_t)(sizeof(chat_ids) / sizeof(chat_ids[0])));
    ck_assert(memcmp(ids, chat_ids, sizeof(chat_ids)) == 0);
    free(ids);
    ids = encode(tok, fox, strlen(fox), true, false, &n);
    ck_assert_int_eq(n, (int64_t)(sizeof(fox_ids) / sizeof(fox_ids[0])));
    ck_assert(memcmp(ids, fox_ids, sizeof(fox_ids)) == 0);
    free(ids);
    /* streaming the chat ids with specials rendered gives the prompt back */
    size_t len;
    int held;
    char *all = stream_all(tok, chat_ids, (int64_t)(sizeof(chat_ids) / sizeof(chat_ids[0])),
                           RILL_TOKENIZER_STREAM_SPECIAL, &len, &held);
    ck_assert(len == strlen(chat) && memcmp(all, chat, len) == 0);
    free(all);
    rill_tokenizer_destroy(&tok);
}
END_TEST

START_TEST(test_stream_split_characters) {
    /* emoji and CJK end up in byte tokens or byte-level fragments in all four vocabularies */
    const char *text = "Hi \xf0\x9f\xa6\x99 \xe6\x88\x91\xe6\x83\xb3 \xf0\x9f\x98\xb6\xe2\x80\x8d"
                       "\xf0\x9f\x8c\xab\xef\xb8\x8f \xe1\x9e\x80\xe1\x9e\xb6!";
    int held_total = 0;
    for (size_t v = 0; v < 4; v++) {
        rill_tokenizer_t *tok = load_vocab(g_vocabs[v]);
        int64_t n;
        int32_t *ids = encode(tok, text, strlen(text), false, false, &n);
        size_t len;
        int held;
        char *all = stream_all(tok, ids, n, 0, &len, &held);
        /* SPM pieces start with the prefix space */
        const char *got = all;
        if (rill_tokenizer_kind(tok) == RILL_TOKENIZER_SPM) {
            ck_assert(len > 0 && all[0] == ' ');
            got++;
            len--;
        }
        ck_assert_msg(len == strlen(text) && memcmp(got, text, len) == 0, "%s: '%.*s'", g_vocabs[v],
                      (int)len, got);
        held_total += held;
        free(all);
        free(ids);
        rill_tokenizer_destroy(&tok);
    }
    ck_assert_int_gt(held_total, 0); /* some character really was split across tokens */

    /* byte tokens one by one, and the replacement rules (SPM has a token for every byte) */
    rill_tokenizer_t *tok = load_vocab("llama-spm");
    int32_t b[16];
    const unsigned char bytes[] = { 0xf0, 0x9f, 0xa6, 0x99, /* one emoji, 4 tokens */
                                    0xe6, 0x88, 'A',        /* cut short: U+FFFD then A */
                                    0xff,                   /* never valid: U+FFFD */
                                    0xed, 0xa0, 0x80,       /* surrogate: 3 x U+FFFD */
                                    0xe6, 0x88 };           /* pending at the end: U+FFFD */
    for (size_t i = 0; i < sizeof(bytes); i++) {
        char t[8];
        snprintf(t, sizeof(t), "<0x%02X>", bytes[i]);
        b[i] = rill_tokenizer_find(tok, t, 6);
        ck_assert_int_ge(b[i], 0);
    }
    rill_tokenizer_stream_t s;
    rill_tokenizer_stream_init(&s, 0);
    char out[64];
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[0], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[1], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[2], out, sizeof(out)), 0);
    /* too small a buffer: EFULL and nothing consumed */
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[3], out, 3), RILL_EFULL);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[3], out, sizeof(out)), 4);
    ck_assert(memcmp(out, "\xf0\x9f\xa6\x99", 4) == 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[4], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[5], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[6], out, sizeof(out)), 4);
    ck_assert(memcmp(out,
                     "\xef\xbf\xbd"
                     "A",
                     4) == 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[7], out, sizeof(out)), 3);
    ck_assert(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    size_t o = 0;
    for (int i = 8; i < 11; i++) {
        int64_t r = rill_tokenizer_stream_feed(tok, &s, b[i], out + o, sizeof(out) - o);
        ck_assert_int_ge(r, 0);
        o += (size_t)r;
    }
    ck_assert_uint_eq(o, 9);
    ck_assert(memcmp(out, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd", 9) == 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[11], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, b[12], out, sizeof(out)), 0);
    ck_assert_int_eq(rill_tokenizer_stream_flush(&s, out, 2), RILL_EFULL);
    ck_assert_int_eq(rill_tokenizer_stream_flush(&s, out, sizeof(out)), 3);
    ck_assert(memcmp(out, "\xef\xbf\xbd", 3) == 0);
    ck_assert_int_eq(rill_tokenizer_stream_flush(&s, out, sizeof(out)), 0);

    /* control tokens: hidden unless asked for */
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, 1, out, sizeof(out)), 0);
    rill_tokenizer_stream_init(&s, RILL_TOKENIZER_STREAM_SPECIAL);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, 1, out, sizeof(out)), 3);
    ck_assert(memcmp(out, "<s>", 3) == 0);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, -1, out, sizeof(out)), RILL_EINVAL);
    ck_assert_int_eq(rill_tokenizer_stream_feed(tok, &s, 32000, out, sizeof(out)), RILL_EINVAL);
    rill_tokenizer_destroy(&tok);
}
END_TEST

static bool contains(const int32_t *ids, int64_t n, int32_t id) {
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] == id) {
            return true;
        }
    }
    return false;
}

START_TEST(test_parse_special) {
    rill_tokenizer_t *tok = load_vocab("qwen2");
    int32_t im_start = rill_tokenizer_find(tok, "<|im_start|>", 12);
    int32_t im_end = rill_tokenizer_find(tok, "<|im_end|>", 10);
    int32_t pad = rill_tokenizer_find(tok, "[PAD151646]", 11);
    ck_assert_int_eq(im_start, 151644);
    ck_assert_int_eq(im_end, 151645);
    ck_assert_int_eq(pad, 151646);
    ck_assert_uint_eq(rill_tokenizer_type(tok, pad), RILL_TOKENIZER_TYPE_USER_DEFINED);
    const char *text = "<|im_start|>user\nhi[PAD151646]<|im_end|>";
    int64_t n1, n2;
    int32_t *on = encode(tok, text, strlen(text), false, true, &n1);
    int32_t *off = encode(tok, text, strlen(text), false, false, &n2);
    ck_assert_int_eq(on[0], im_start);
    ck_assert_int_eq(on[n1 - 1], im_end);
    ck_assert(contains(on, n1, pad));
    ck_assert(!contains(off, n2, im_start) && !contains(off, n2, im_end));
    ck_assert(contains(off, n2, pad)); /* user-defined tokens are always cut out */
    ck_assert_int_gt(n2, n1);
    /* both decode back to the same text when control tokens are rendered */
    size_t l1, l2;
    char *d1 = decode(tok, on, n1, RILL_TOKENIZER_DECODE_SPECIAL | RILL_TOKENIZER_DECODE_RAW, &l1);
    char *d2 = decode(tok, off, n2, RILL_TOKENIZER_DECODE_SPECIAL | RILL_TOKENIZER_DECODE_RAW, &l2);
    ck_assert_str_eq(d1, text);
    ck_assert_str_eq(d2, text);
    free(d1);
    free(d2);
    /* without DECODE_SPECIAL the control tokens vanish */
    d1 = decode(tok, on, n1, RILL_TOKENIZER_DECODE_RAW, &l1);
    ck_assert_str_eq(d1, "user\nhi[PAD151646]");
    free(d1);
    free(on);
    free(off);
    rill_tokenizer_destroy(&tok);

    /* SPM: a special token in the middle gets a space prefix after it, like llama.cpp */
    tok = load_vocab("llama-spm");
    int64_t n;
    int32_t *ids = encode(tok, "<s>Hello</s> world", 18, false, true, &n);
    int32_t hello = rill_tokenizer_find(tok, "\xe2\x96\x81Hello", 8);
    ck_assert_int_ge(hello, 0);
    ck_assert_int_ge(n, 4);
    ck_assert_int_eq(ids[0], 1);
    ck_assert_int_eq(ids[1], hello);
    ck_assert_int_eq(ids[2], 2);
    free(ids);
    ids = encode(tok, "<s>Hello", 8, false, false, &n);
    ck_assert(!contains(ids, n, 1));
    free(ids);
    rill_tokenizer_destroy(&tok);
}
END_TEST

START_TEST(test_add_special) {
    struct {
        const char *vocab;
        int32_t first, last; /* -1: none expected */
    } want[] = {
        { "llama-spm", 1, -1 },
        { "llama-bpe", 128000, -1 },
        { "qwen2", -1, -1 },
        { "gpt-2", -1, -1 },
    };
    for (size_t v = 0; v < 4; v++) {
        rill_tokenizer_t *tok = load_vocab(want[v].vocab);
        const rill_tokenizer_special_t *sp = rill_tokenizer_special(tok);
        int64_t n0, n1;
        int32_t *a = encode(tok, "Hello world", 11, false, false, &n0);
        int32_t *b = encode(tok, "Hello world", 11, true, false, &n1);
        if (want[v].first >= 0) {
            ck_assert(sp->add_bos);
            ck_assert_int_eq(sp->bos, want[v].first);
            ck_assert_int_eq(n1, n0 + 1);
            ck_assert_int_eq(b[0], want[v].first);
            ck_assert(memcmp(a, b + 1, (size_t)n0 * sizeof(int32_t)) == 0);
        } else {
            ck_assert(!sp->add_bos);
            ck_assert_int_eq(n1, n0);
        }
        /* the empty string: nothing, or just bos */
        int64_t ne = rill_tokenizer_encode(tok, "", 0, true, false, NULL, 0);
        ck_assert_int_eq(ne, sp->add_bos ? 1 : 0);
        ck_assert_int_eq(rill_tokenizer_encode(tok, NULL, 0, false, false, NULL, 0), 0);
        free(a);
        free(b);
        rill_tokenizer_destroy(&tok);
    }
}
END_TEST

START_TEST(test_vocab_accessors) {
    rill_tokenizer_t *tok = load_vocab("llama-spm");
    const rill_tokenizer_special_t *sp = rill_tokenizer_special(tok);
    ck_assert_int_eq(rill_tokenizer_kind(tok), RILL_TOKENIZER_SPM);
    ck_assert_int_eq(rill_tokenizer_n_vocab(tok), 32000);
    ck_assert_int_eq(sp->bos, 1);
    ck_assert_int_eq(sp->eos, 2);
    ck_assert_int_eq(sp->unk, 0);
    ck_assert_int_eq(sp->nl, 13);
    ck_assert(sp->add_space_prefix && !sp->add_eos && !sp->clean_spaces);
    ck_assert(rill_tokenizer_is_eog(tok, 2) && !rill_tokenizer_is_eog(tok, 1));
    ck_assert_uint_eq(rill_tokenizer_type(tok, 3), RILL_TOKENIZER_TYPE_BYTE);
    ck_assert_uint_eq(rill_tokenizer_attr(tok, 1), RILL_TOKENIZER_ATTR_CONTROL);
    size_t len;
    ck_assert_str_eq(rill_tokenizer_text(tok, 1, &len), "<s>");
    ck_assert_uint_eq(len, 3);
    ck_assert_ptr_null(rill_tokenizer_text(tok, 32000, &len));
    ck_assert_uint_eq(len, 0);
    const char *p = rill_tokenizer_piece(tok, 13, false, &len); /* <0x0A> */
    ck_assert(len == 1 && p[0] == '\n');
    int32_t hello = rill_tokenizer_find(tok, "\xe2\x96\x81Hello", 8);
    p = rill_tokenizer_piece(tok, hello, false, &len);
    ck_assert(len == 6 && memcmp(p, " Hello", 6) == 0);
    ck_assert(rill_tokenizer_score(tok, hello) < 0.0f);
    rill_tokenizer_piece(tok, 1, false, &len);
    ck_assert_uint_eq(len, 0);
    rill_tokenizer_piece(tok, 1, true, &len);
    ck_assert_uint_eq(len, 3);
    ck_assert_str_eq(rill_tokenizer_pre(tok), "");
    rill_tokenizer_destroy(&tok);

    tok = load_vocab("gpt-2");
    sp = rill_tokenizer_special(tok);
    ck_assert_int_eq(rill_tokenizer_kind(tok), RILL_TOKENIZER_BPE);
    ck_assert_str_eq(rill_tokenizer_pre(tok), "gpt-2");
    ck_assert_int_eq(sp->bos, 50256);
    ck_assert_int_eq(sp->eos, 50256);
    ck_assert_int_eq(sp->eot, 50256);
    ck_assert_int_eq(sp->nl, 198);
    ck_assert(sp->clean_spaces && !sp->add_space_prefix);
    p = rill_tokenizer_piece(tok, 220, false, &len); /* "Ġ" */
    ck_assert(len == 1 && p[0] == ' ');
    rill_tokenizer_destroy(&tok);

    tok = load_vocab("llama-bpe");
    sp = rill_tokenizer_special(tok);
    ck_assert_int_eq(sp->eot, 128009);
    ck_assert(rill_tokenizer_is_eog(tok, 128009) && rill_tokenizer_is_eog(tok, 128001));
    ck_assert(!rill_tokenizer_is_eog(tok, 128000));
    rill_tokenizer_destroy(&tok);

    tok = load_vocab("qwen2");
    sp = rill_tokenizer_special(tok);
    ck_assert_int_eq(sp->eot, 151645);
    ck_assert(!sp->clean_spaces);
    ck_assert(rill_tokenizer_is_eog(tok, 151643) && rill_tokenizer_is_eog(tok, 151645));
    rill_tokenizer_destroy(&tok);
}
END_TEST

START_TEST(test_efull_and_measure) {
    rill_tokenizer_t *tok = load_vocab("qwen2");
    const char *text = "The quick brown fox jumps over the lazy dog 12345";
    size_t tl = strlen(text);
    int64_t n = rill_tokenizer_encode(tok, text, tl, false, false, NULL, 0);
    ck_assert_int_gt(n, 5);
    int32_t all[64], few[64];
    ck_assert_int_eq(rill_tokenizer_encode(tok, text, tl, false, false, all, 64), n);
    rill_tokenizer_work_t *w = NULL;
    ck_assert_int_eq(rill_tokenizer_work_new(&w), RILL_OK);
    int64_t total = -1;
    ck_assert_int_eq(rill_tokenizer_encode_with(tok, w, text, tl, false, false, few, 3, &total),
                     RILL_EFULL);
    ck_assert_int_eq(total, n);
    ck_assert(memcmp(few, all, 3 * sizeof(int32_t)) == 0);
    ck_assert_int_eq(rill_tokenizer_encode(tok, text, tl, false, false, few, 3), RILL_EFULL);
    /* argument errors */
    ck_assert_int_eq(rill_tokenizer_encode(tok, NULL, 3, false, false, few, 3), RILL_EINVAL);
    ck_assert_int_eq(rill_tokenizer_encode(tok, text, tl, false, false, NULL, 3), RILL_EINVAL);
    ck_assert_int_eq(rill_tokenizer_encode(tok, text, tl, false, false, few, -1), RILL_EINVAL);
    ck_assert_int_eq(rill_tokenizer_encode_with(tok, NULL, text, tl, false, false, few, 3, NULL),
                     RILL_EINVAL);
    /* decode: too small, measure, argument errors */
    char buf[256];
    size_t need = 0;
    ck_assert_int_eq(rill_tokenizer_decode(tok, all, n, RILL_TOKENIZER_DECODE_RAW, buf, 4, &need),
                     RILL_EFULL);
    ck_assert_uint_eq(need, tl);
    ck_assert_int_eq(rill_tokenizer_decode(tok, all, n, RILL_TOKENIZER_DECODE_RAW, buf, tl, NULL),
                     (int64_t)tl);
    ck_assert(memcmp(buf, text, tl) == 0);
    int32_t badid = 151936;
    ck_assert_int_eq(rill_tokenizer_decode(tok, &badid, 1, 0, buf, sizeof(buf), NULL), RILL_EINVAL);
    rill_tokenizer_work_destroy(&w);
    rill_tokenizer_destroy(&tok);
}
END_TEST

START_TEST(test_work_reuse) {
    rill_tokenizer_t *tok = load_vocab("llama-bpe");
    rill_tokenizer_work_t *w = NULL;
    ck_assert_int_eq(rill_tokenizer_work_new(&w), RILL_OK);
    const char *text = "Streams of text, one chunk after another \xf0\x9f\x9a\x80 <|eot_id|>";
    int32_t ids[128];
    int64_t n1 = rill_tokenizer_encode_with(tok, w, text, strlen(text), true, true, ids, 128, NULL);
    ck_assert_int_gt(n1, 0);
    size_t bytes = rill_tokenizer_work_bytes(w);
    int64_t calls = rill_mem_calls();
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(
            rill_tokenizer_encode_with(tok, w, text, strlen(text), true, true, ids, 128, NULL), n1);
    }
    ck_assert_int_eq(rill_mem_calls(), calls); /* warm: no allocation at all */
    ck_assert_uint_eq(rill_tokenizer_work_bytes(w), bytes);
    ck_assert_int_eq(ids[0], 128000);
    ck_assert_int_eq(ids[n1 - 1], 128009);
    rill_tokenizer_work_destroy(&w);
    rill_tokenizer_work_destroy(&w); /* NULL-safe */
    rill_tokenizer_destroy(&tok);
    rill_tokenizer_destroy(&tok);
}
END_TEST

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

START_TEST(test_long_inputs) {
    /* one huge word, one huge whitespace run, one huge digit run: no quadratic behaviour
     * (each takes milliseconds; a quadratic merge would take minutes) */
    const size_t n = 1 << 20;
    char *s = malloc(n);
    ck_assert_ptr_nonnull(s);
    const char fill[] = { 'a', ' ', '7', '\n' };
    for (size_t v = 0; v < 4; v++) {
        rill_tokenizer_t *tok = load_vocab(g_vocabs[v]);
        for (size_t f = 0; f < sizeof(fill); f++) {
            memset(s, fill[f], n);
            double t0 = now_s();
            int64_t count = rill_tokenizer_encode(tok, s, n, false, false, NULL, 0);
            double dt = now_s() - t0;
            ck_assert_int_gt(count, 0);
            ck_assert_msg(dt < 20.0, "%s: 1 MiB of '%c' took %.1f s", g_vocabs[v], fill[f], dt);
        }
        rill_tokenizer_destroy(&tok);
    }
    free(s);
}
END_TEST

START_TEST(test_invalid_utf8) {
    /* llama.cpp's decoder: a bad byte is U+FFFD, an overlong is the code point it spells */
    rill_tokenizer_t *tok = load_vocab("qwen2");
    int64_t n1, n2;
    int32_t *a = encode(tok, "x\xffy", 3, false, false, &n1);
    int32_t *b = encode(tok, "x\xef\xbf\xbdy", 5, false, false, &n2);
    ck_assert(n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof(int32_t)) == 0);
    free(a);
    free(b);
    a = encode(tok, "\xc1\x81", 2, false, false, &n1); /* overlong 'A' */
    b = encode(tok, "A", 1, false, false, &n2);
    ck_assert(n1 == n2 && memcmp(a, b, (size_t)n1 * sizeof(int32_t)) == 0);
    free(a);
    free(b);
    /* a surrogate survives as its bytes (PCRE2 never sees it) */
    a = encode(tok, "a\xed\xa0\x80", 4, false, false, &n1);
    size_t dl;
    char *d = decode(tok, a, n1, RILL_TOKENIZER_DECODE_RAW, &dl);
    ck_assert(dl == 4 && memcmp(d, "a\xed\xa0\x80", 4) == 0);
    free(d);
    free(a);
    /* random bytes through every vocabulary: no crash, SPM keeps every byte */
    rill_rand_t rng;
    rill_rand_seed(&rng, 12345);
    char buf[4096];
    for (size_t i = 0; i < sizeof(buf); i++) {
        buf[i] = (char)(rill_rand_next(&rng) >> 56);
    }
    rill_tokenizer_destroy(&tok);
    for (size_t v = 0; v < 4; v++) {
        tok = load_vocab(g_vocabs[v]);
        a = encode(tok, buf, sizeof(buf), true, true, &n1);
        ck_assert_int_gt(n1, 0);
        free(a);
        rill_tokenizer_destroy(&tok);
    }
}
END_TEST

START_TEST(test_decode_clean_spaces) {
    rill_tokenizer_t *tok = load_vocab("gpt-2");
    const char *text = "Hello , world ! It 's a ' b ' thing .";
    int64_t n;
    int32_t *ids = encode(tok, text, strlen(text), false, false, &n);
    size_t len;
    char *d = decode(tok, ids, n, 0, &len);
    ck_assert_str_eq(d, "Hello, world! It's a'b'thing.");
    free(d);
    d = decode(tok, ids, n, RILL_TOKENIZER_DECODE_RAW, &len);
    ck_assert_str_eq(d, text);
    free(d);
    free(ids);
    rill_tokenizer_destroy(&tok);

    tok = load_vocab("llama-spm");
    ids = encode(tok, "Hello", 5, true, false, &n);
    ck_assert_int_eq(ids[0], 1);
    d = decode(tok, ids, n, RILL_TOKENIZER_DECODE_REMOVE_SPECIAL, &len);
    ck_assert_str_eq(d, " Hello"); /* llama.cpp keeps the space when bos was removed */
    free(d);
    d = decode(tok, ids + 1, n - 1, 0, &len);
    ck_assert_str_eq(d, "Hello");
    free(d);
    free(ids);
    rill_tokenizer_destroy(&tok);
}
END_TEST

/* ---- malformed metadata, built in memory ----------------------------------------------- */

typedef struct gb {
    unsigned char *p;
    size_t n, cap;
    uint64_t n_kv;
} gb_t;

static void gb_put(gb_t *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void gb_u32(gb_t *b, uint32_t v) {
    gb_put(b, &v, 4);
}

static void gb_str(gb_t *b, const char *s) {
    uint64_t l = strlen(s);
    gb_put(b, &l, 8);
    gb_put(b, s, (size_t)l);
}

static void kv_key(gb_t *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
    b->n_kv++;
}

static void kv_str(gb_t *b, const char *key, const char *v) {
    kv_key(b, key, RILL_GGUF_STRING);
    gb_str(b, v);
}

static void kv_u32(gb_t *b, const char *key, uint32_t v) {
    kv_key(b, key, RILL_GGUF_U32);
    gb_u32(b, v);
}

static void kv_bool(gb_t *b, const char *key, bool v) {
    kv_key(b, key, RILL_GGUF_BOOL);
    unsigned char c = v;
    gb_put(b, &c, 1);
}

static void kv_arr_str(gb_t *b, const char *key, const char *const *v, uint64_t n) {
    kv_key(b, key, RILL_GGUF_ARRAY);
    gb_u32(b, RILL_GGUF_STRING);
    gb_put(b, &n, 8);
    for (uint64_t i = 0; i < n; i++) {
        gb_str(b, v[i]);
    }
}

static void kv_arr_i32(gb_t *b, const char *key, const int32_t *v, uint64_t n) {
    kv_key(b, key, RILL_GGUF_ARRAY);
    gb_u32(b, RILL_GGUF_I32);
    gb_put(b, &n, 8);
    gb_put(b, v, (size_t)n * 4);
}

/* A whole file from a kv body. */
static unsigned char *gb_file(gb_t *body, size_t *len) {
    gb_t f = { 0 };
    gb_put(&f, "GGUF", 4);
    gb_u32(&f, 3);
    uint64_t zero = 0;
    gb_put(&f, &zero, 8);
    gb_put(&f, &body->n_kv, 8);
    gb_put(&f, body->p, body->n);
    free(body->p);
    *len = f.n;
    return f.p;
}

enum defect {
    D_NONE,
    D_NO_MODEL,
    D_MODEL_INT,
    D_MODEL_T5,
    D_PRE_UNKNOWN,
    D_NO_TOKENS,
    D_TOKENS_INT,
    D_TYPES_SHORT,
    D_TYPES_STR,
    D_NO_MERGES,
    D_MERGES_INT,
    D_MERGE_UNKNOWN_LEFT,
    D_MERGE_UNKNOWN_RESULT,
    D_DUPLICATE,
    D_ADD_BOS_NO_BOS,
    D_ADD_BOS_INT,
    D_BOS_STR,
    D_COUNT
};

static const char *const g_tiny_tokens[] = {
    "a",         "b",
    "c",         "ab",
    "abc",       "\xc4\xa0",
    "\304\240a", /* "Ġa" (octal: a hex escape would swallow the a) */
    "<|x|>",     "<|endoftext|>",
    "1",         "2"
};

static unsigned char *tiny_vocab(enum defect d, size_t *len) {
    gb_t b = { 0 };
    const uint64_t nt = sizeof(g_tiny_tokens) / sizeof(g_tiny_tokens[0]);
    if (d == D_MODEL_INT) {
        kv_u32(&b, "tokenizer.ggml.model", 2);
    } else if (d != D_NO_MODEL) {
        kv_str(&b, "tokenizer.ggml.model", d == D_MODEL_T5 ? "t5" : "gpt2");
    }
    kv_str(&b, "tokenizer.ggml.pre", d == D_PRE_UNKNOWN ? "no-such-pre" : "qwen2");
    if (d == D_TOKENS_INT) {
        int32_t v[3] = { 1, 2, 3 };
        kv_arr_i32(&b, "tokenizer.ggml.tokens", v, 3);
    } else if (d != D_NO_TOKENS) {
        const char *toks[16];
        memcpy(toks, g_tiny_tokens, sizeof(g_tiny_tokens));
        if (d == D_DUPLICATE) {
            toks[2] = "a";
        }
        kv_arr_str(&b, "tokenizer.ggml.tokens", toks, nt);
    }
    int32_t types[16];
    for (uint64_t i = 0; i < nt; i++) {
        types[i] = i == 7   ? RILL_TOKENIZER_TYPE_USER_DEFINED
                   : i == 8 ? RILL_TOKENIZER_TYPE_CONTROL
                            : RILL_TOKENIZER_TYPE_NORMAL;
    }
    if (d == D_TYPES_STR) {
        kv_arr_str(&b, "tokenizer.ggml.token_type", g_tiny_tokens, nt);
    } else {
        kv_arr_i32(&b, "tokenizer.ggml.token_type", types, d == D_TYPES_SHORT ? nt - 1 : nt);
    }
    const char *merges[] = { "a b", "ab c", "\xc4\xa0 a", NULL };
    if (d == D_MERGE_UNKNOWN_LEFT) {
        merges[1] = "x c";
    } else if (d == D_MERGE_UNKNOWN_RESULT) {
        merges[1] = "b c";
    }
    if (d == D_MERGES_INT) {
        int32_t v[1] = { 0 };
        kv_arr_i32(&b, "tokenizer.ggml.merges", v, 1);
    } else if (d != D_NO_MERGES) {
        kv_arr_str(&b, "tokenizer.ggml.merges", merges, 3);
    }
    if (d == D_ADD_BOS_NO_BOS) {
        /* 11 tokens: the BPE default bos (11) is out of range, so there is no bos */
        kv_bool(&b, "tokenizer.ggml.add_bos_token", true);
    } else if (d == D_ADD_BOS_INT) {
        kv_u32(&b, "tokenizer.ggml.add_bos_token", 1);
    } else {
        kv_u32(&b, "tokenizer.ggml.bos_token_id", 8);
    }
    if (d == D_BOS_STR) {
        kv_str(&b, "tokenizer.ggml.eos_token_id", "eight");
    }
    return gb_file(&b, len);
}

START_TEST(test_malformed_metadata) {
    static const rill_err_t want[D_COUNT] = {
        [D_NONE] = RILL_OK,
        [D_NO_MODEL] = RILL_EFORMAT,
        [D_MODEL_INT] = RILL_EFORMAT,
        [D_MODEL_T5] = RILL_EUNSUPPORTED,
        [D_PRE_UNKNOWN] = RILL_EUNSUPPORTED,
        [D_NO_TOKENS] = RILL_EFORMAT,
        [D_TOKENS_INT] = RILL_EFORMAT,
        [D_TYPES_SHORT] = RILL_EFORMAT,
        [D_TYPES_STR] = RILL_EFORMAT,
        [D_NO_MERGES] = RILL_EFORMAT,
        [D_MERGES_INT] = RILL_EFORMAT,
        [D_MERGE_UNKNOWN_LEFT] = RILL_EFORMAT,
        [D_MERGE_UNKNOWN_RESULT] = RILL_EFORMAT,
        [D_DUPLICATE] = RILL_EFORMAT,
        [D_ADD_BOS_NO_BOS] = RILL_EFORMAT,
        [D_ADD_BOS_INT] = RILL_EFORMAT,
        [D_BOS_STR] = RILL_EFORMAT,
    };
    static const char *const want_msg[D_COUNT] = {
        [D_NO_MODEL] = "tokenizer.ggml.model",
        [D_MODEL_T5] = "'t5'",
        [D_PRE_UNKNOWN] = "no-such-pre",
        [D_NO_TOKENS] = "missing tokenizer.ggml.tokens",
        [D_TOKENS_INT] = "tokenizer.ggml.tokens",
        [D_TYPES_SHORT] = "token_type",
        [D_NO_MERGES] = "missing tokenizer.ggml.merges",
        [D_MERGE_UNKNOWN_LEFT] = "left part",
        [D_MERGE_UNKNOWN_RESULT] = "merged text",
        [D_DUPLICATE] = "duplicate",
        [D_ADD_BOS_NO_BOS] = "add_bos_token",
        [D_BOS_STR] = "eos_token_id",
    };
    int64_t live = rill_mem_stats(RILL_MEM_MODEL).n_live;
    for (int d = 0; d < D_COUNT; d++) {
        size_t len;
        unsigned char *file = tiny_vocab((enum defect)d, &len);
        rill_gguf_t *g = NULL;
        ck_assert_msg(rill_gguf_open_memory(file, len, &g) == RILL_OK, "%d: %s", d,
                      rill_last_error(RILL_OK));
        rill_tokenizer_t *tok = (rill_tokenizer_t *)1;
        rill_err_t e = rill_tokenizer_new(g, &tok);
        const char *err = rill_last_error(e);
        ck_assert_msg(e == want[d], "defect %d: %s (%s)", d, rill_err_name(e), err);
        if (e != RILL_OK) {
            ck_assert_ptr_null(tok);
            ck_assert_msg(strcmp(err, rill_strerror(e)) != 0, "defect %d: no detail", d);
            if (want_msg[d] != NULL) {
                ck_assert_msg(strstr(err, want_msg[d]) != NULL, "defect %d: '%s'", d, err);
            }
        } else {
            /* the tiny vocabulary works: user-defined always, control only when parsing */
            int32_t ids[32];
            int64_t n =
                rill_tokenizer_encode(tok, "abc<|x|> a12<|endoftext|>", 25, false, false, ids, 32);
            ck_assert_int_ge(n, 5);
            ck_assert_int_eq(ids[0], 4); /* abc */
            ck_assert_int_eq(ids[1], 7); /* <|x|> */
            ck_assert_int_eq(ids[2], 6); /* Ġa */
            ck_assert_int_eq(ids[3], 9); /* qwen2 splits digits: 1, 2 */
            ck_assert_int_eq(ids[4], 10);
            n = rill_tokenizer_encode(tok, "<|endoftext|>", 13, false, true, ids, 32);
            ck_assert_int_eq(n, 1);
            ck_assert_int_eq(ids[0], 8);
            ck_assert_int_eq(rill_tokenizer_special(tok)->bos, 8);
            ck_assert_int_eq(rill_tokenizer_special(tok)->eot, 8); /* found by its text */
            rill_tokenizer_destroy(&tok);
        }
        rill_gguf_destroy(&g);
        free(file);
    }
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_MODEL).n_live, live);
    ck_assert_int_eq(rill_tokenizer_new(NULL, NULL), RILL_EINVAL);
}
END_TEST

/* ---- allocation failures --------------------------------------------------------------- */

static void walk_new(const char *vocab) {
    char path[512];
    snprintf(path, sizeof(path), VOCAB_DIR "ggml-vocab-%s.gguf", vocab);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open(path, &g), RILL_OK);
    int64_t live = rill_mem_stats(RILL_MEM_MODEL).n_live;
    int64_t before = rill_mem_calls();
    rill_tokenizer_t *tok = NULL;
    ck_assert_int_eq(rill_tokenizer_new(g, &tok), RILL_OK);
    int64_t points = rill_mem_calls() - before;
    rill_tokenizer_destroy(&tok);
    ck_assert_int_gt(points, 5);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t e = rill_tokenizer_new(g, &tok);
        rill_mem_fail_nth(0);
        ck_assert_msg(e == RILL_ENOMEM, "%s: allocation %lld of %lld failing gave %s", vocab,
                      (long long)k, (long long)points, rill_err_name(e));
        ck_assert_ptr_null(tok);
        ck_assert_int_eq(rill_mem_stats(RILL_MEM_MODEL).n_live, live);
    }
    rill_gguf_destroy(&g);
}

START_TEST(test_alloc_fail_new) {
    walk_new("gpt-2");
    walk_new("llama-spm");
}
END_TEST

START_TEST(test_alloc_fail_encode) {
    rill_tokenizer_t *tok = load_vocab(g_vocabs[_i]);
    const char *text = "<|im_start|>Hello \xff world, \xf0\x9f\xa6\x99 1234 <s>";
    int32_t want[64], ids[64];
    int64_t n = rill_tokenizer_encode(tok, text, strlen(text), true, true, want, 64);
    ck_assert_int_gt(n, 0);
    int64_t live = rill_mem_stats(RILL_MEM_MODEL).n_live;
    int64_t before = rill_mem_calls();
    ck_assert_int_eq(rill_tokenizer_encode(tok, text, strlen(text), true, true, ids, 64), n);
    int64_t points = rill_mem_calls() - before;
    ck_assert_int_gt(points, 2);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        int64_t r = rill_tokenizer_encode(tok, text, strlen(text), true, true, ids, 64);
        rill_mem_fail_nth(0);
        ck_assert_msg(r == RILL_ENOMEM, "allocation %lld of %lld failing gave %lld", (long long)k,
                      (long long)points, (long long)r);
        ck_assert_int_eq(rill_mem_stats(RILL_MEM_MODEL).n_live, live);
    }
    /* a work object that cannot grow stays usable afterwards */
    rill_tokenizer_work_t *w = NULL;
    ck_assert_int_eq(rill_tokenizer_work_new(&w), RILL_OK);
    rill_mem_fail_nth(1);
    ck_assert_int_eq(
        rill_tokenizer_encode_with(tok, w, text, strlen(text), true, true, ids, 64, NULL),
        RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert_int_eq(
        rill_tokenizer_encode_with(tok, w, text, strlen(text), true, true, ids, 64, NULL), n);
    ck_assert(memcmp(ids, want, (size_t)n * sizeof(int32_t)) == 0);
    rill_tokenizer_work_destroy(&w);
    for (int k = 1; k <= 3; k++) {
        rill_mem_fail_nth(k);
        rill_err_t e = rill_tokenizer_work_new(&w);
        rill_mem_fail_nth(0);
        if (e == RILL_OK) {
            rill_tokenizer_work_destroy(&w);
            break;
        }
        ck_assert_int_eq(e, RILL_ENOMEM);
        ck_assert_ptr_null(w);
    }
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_MODEL).n_live, live);
    rill_tokenizer_destroy(&tok);
}
END_TEST

/* ---- threads --------------------------------------------------------------------------- */

typedef struct thread_arg {
    const rill_tokenizer_t *tok;
    const char *text;
    const int32_t *want;
    int64_t n_want;
    int mismatches;
} thread_arg_t;

static void *encode_thread(void *p) {
    thread_arg_t *a = p;
    rill_tokenizer_work_t *w = NULL;
    if (rill_tokenizer_work_new(&w) != RILL_OK) {
        a->mismatches = -1;
        return NULL;
    }
    int32_t ids[512];
    for (int i = 0; i < 200; i++) {
        int64_t n = rill_tokenizer_encode_with(a->tok, w, a->text, strlen(a->text), true, true, ids,
                                               512, NULL);
        if (n != a->n_want || memcmp(ids, a->want, (size_t)n * sizeof(int32_t)) != 0) {
            a->mismatches++;
        }
    }
    rill_tokenizer_work_destroy(&w);
    return NULL;
}

/* One immutable tokenizer, four threads, each with its own work object. */
START_TEST(test_shared_across_threads) {
    rill_tokenizer_t *tok = load_vocab("qwen2");
    const char *text = "<|im_start|>user\nThreads share one tokenizer: 12345 \xf0\x9f\xa6\x99, "
                       "caf\xc3\xa9, \xe6\x88\x91\xe6\x83\xb3<|im_end|>\n";
    int64_t n;
    int32_t *want = encode(tok, text, strlen(text), true, true, &n);
    pthread_t th[4];
    thread_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg_t){ .tok = tok, .text = text, .want = want, .n_want = n };
        ck_assert_int_eq(pthread_create(&th[i], NULL, encode_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(args[i].mismatches, 0);
    }
    free(want);
    rill_tokenizer_destroy(&tok);
}
END_TEST

static Suite *tokenizer_suite(void) {
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_reference_vocab, 0, 4);
    tcase_add_test(tc, test_reference_models);
    suite_add_tcase(s, tc);
    tc = tcase_create("properties");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_roundtrip, 0, 4);
    tcase_add_test(tc, test_stream_split_characters);
    tcase_add_test(tc, test_default_model_sequences);
    tcase_add_test(tc, test_shared_across_threads);
    tcase_add_test(tc, test_parse_special);
    tcase_add_test(tc, test_add_special);
    tcase_add_test(tc, test_vocab_accessors);
    tcase_add_test(tc, test_efull_and_measure);
    tcase_add_test(tc, test_work_reuse);
    tcase_add_test(tc, test_long_inputs);
    tcase_add_test(tc, test_invalid_utf8);
    tcase_add_test(tc, test_decode_clean_spaces);
    suite_add_tcase(s, tc);
    tc = tcase_create("failures");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_malformed_metadata);
    tcase_add_test(tc, test_alloc_fail_new);
    tcase_add_loop_test(tc, test_alloc_fail_encode, 0, 4);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(tokenizer_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
