/*
 * test_whisper_vocab.c - the converted Whisper GGUF (tools/whisper_to_gguf.py) through rill's
 * GGUF reader and tokenizer, against the outside oracle.
 *
 * The oracle is the Hugging Face `tokenizers` library on the checkpoint's own tokenizer.json
 * (what faster-whisper encodes and decodes with): tests/data/ref/whisper/tokens.tsv holds its
 * ids and decoded text for a set of strings (tools/ref_whisper.py --only tokens). Each row must
 * encode to exactly those ids, in the parse_special mode the row names, and the ids must decode
 * (RAW, control tokens rendered) to exactly HF's text. Then the layout of docs/whisper_gguf.md:
 * metadata keys and types, special ids as the tokenizer sees them, tensor types and shapes, the
 * mel filterbank equal to faster-whisper's (tests/data/ref/whisper/mel_filters.f32), and
 * truncated copies of the file refused.
 *
 * Files: models/whisper-tiny.en.gguf (scripts/setup.sh makes it; the suite exits 77 without it)
 * and, when present, models/whisper-base.gguf (multilingual vocabulary: its rows of tokens.tsv
 * are checked too; `scripts/setup.sh --speech` makes it). RILL_TEST_WHISPER_DIR, when set, is
 * looked in instead of models/.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_gguf.h"
#include "rill_tokenizer.h"
#include "test_util.h"

#define REF_DIR RILL_SOURCE_DIR "/tests/data/ref/whisper/"

static char g_tiny[TEST_PATH_MAX];
static char g_base[TEST_PATH_MAX];

static void whisper_path(char *out, size_t cap, const char *name) {
    const char *dir = getenv("RILL_TEST_WHISPER_DIR");
    if (dir != NULL && dir[0] != '\0') {
        snprintf(out, cap, "%s/%s", dir, name);
    } else {
        test_model_path(out, cap, name);
    }
}

static rill_tokenizer_t *load(const char *path, rill_gguf_t **gp) {
    rill_gguf_t *g = NULL;
    rill_err_t e = rill_gguf_open(path, &g);
    ck_assert_msg(e == RILL_OK, "%s: %s", path, rill_err_name(e));
    rill_tokenizer_t *tok = NULL;
    e = rill_tokenizer_new(g, &tok);
    ck_assert_msg(e == RILL_OK, "%s: tokenizer: %s", path, rill_err_name(e));
    if (gp != NULL) {
        *gp = g;
    } else {
        rill_gguf_destroy(&g);
    }
    return tok;
}

/* Hex "48656c" -> bytes into a malloc'd buffer (caller frees), length in *n. */
static char *unhex(const char *s, size_t len, size_t *n) {
    ck_assert_msg(len % 2 == 0, "odd hex field");
    char *out = malloc(len / 2 + 1);
    ck_assert_ptr_nonnull(out);
    for (size_t i = 0; i < len / 2; i++) {
        unsigned v = 0;
        ck_assert(sscanf(s + 2 * i, "%2x", &v) == 1);
        out[i] = (char)v;
    }
    out[len / 2] = '\0';
    *n = len / 2;
    return out;
}

/* Splits line (modified) at tabs into f[0..cap); returns the field count. */
static int split_tabs(char *line, char **f, int cap) {
    int n = 0;
    for (char *p = line; n < cap;) {
        f[n++] = p;
        char *t = strchr(p, '\t');
        if (t == NULL) {
            break;
        }
        *t = '\0';
        p = t + 1;
    }
    return n;
}

static int parse_ids(const char *s, int32_t *ids, int cap) {
    int n = 0;
    while (*s != '\0') {
        char *end = NULL;
        long v = strtol(s, &end, 10);
        ck_assert_msg(end != s && n < cap, "bad ids field");
        ids[n++] = (int32_t)v;
        s = (*end == ',') ? end + 1 : end;
    }
    return n;
}

/* Checks every row of tokens.tsv for `model` on tok; returns the number of rows checked. */
static int check_rows(const rill_tokenizer_t *tok, const char *model) {
    size_t len = 0;
    char *all = test_read_file(REF_DIR "tokens.tsv", &len);
    ck_assert_ptr_nonnull(all);
    int rows = 0;
    for (char *line = strtok(all, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        if (line[0] == '#') {
            continue;
        }
        char *f[5];
        ck_assert_int_eq(split_tabs(line, f, 5), 5);
        if (strcmp(f[0], model) != 0) {
            continue;
        }
        size_t tlen = 0, dlen = 0;
        char *text = unhex(f[2], strlen(f[2]), &tlen);
        char *want_text = unhex(f[4], strlen(f[4]), &dlen);
        int32_t want[512];
        int nw = parse_ids(f[3], want, 512);
        bool modes[2] = { strcmp(f[1], "special") != 0, strcmp(f[1], "plain") != 0 };
        for (int m = 0; m < 2; m++) {
            if (!modes[m]) {
                continue;
            }
            int32_t got[512];
            int64_t n = rill_tokenizer_encode(tok, text, tlen, false, m == 1, got, 512);
            ck_assert_msg(n == nw, "%s %s parse_special=%d: %lld ids, HF %d", model, f[2], m,
                          (long long)n, nw);
            for (int i = 0; i < nw; i++) {
                ck_assert_msg(got[i] == want[i], "%s %s parse_special=%d: id %d is %d, HF %d",
                              model, f[2], m, i, got[i], want[i]);
            }
        }
        char out[4096];
        int64_t d = rill_tokenizer_decode(tok, want, nw,
                                          RILL_TOKENIZER_DECODE_RAW | RILL_TOKENIZER_DECODE_SPECIAL,
                                          out, sizeof out, NULL);
        ck_assert_int_ge(d, 0);
        ck_assert_msg((size_t)d == dlen && memcmp(out, want_text, dlen) == 0,
                      "%s %s: decode differs from HF's", model, f[2]);
        free(text);
        free(want_text);
        rows++;
    }
    free(all);
    return rows;
}

START_TEST(test_tiny_en_matches_hf) {
    rill_tokenizer_t *tok = load(g_tiny, NULL);
    ck_assert_int_eq(rill_tokenizer_kind(tok), RILL_TOKENIZER_BPE);
    ck_assert_str_eq(rill_tokenizer_pre(tok), "gpt-2");
    ck_assert_int_eq(rill_tokenizer_n_vocab(tok), 51864);
    ck_assert_int_ge(check_rows(tok, "whisper-tiny.en"), 18);
    rill_tokenizer_destroy(&tok);
}
END_TEST

START_TEST(test_base_matches_hf) {
    if (!test_file_exists(g_base)) {
        printf("whisper-base rows not checked: %s absent (scripts/setup.sh --speech)\n", g_base);
        return;
    }
    rill_tokenizer_t *tok = load(g_base, NULL);
    ck_assert_int_eq(rill_tokenizer_n_vocab(tok), 51865);
    ck_assert_int_ge(check_rows(tok, "whisper-base"), 18);
    rill_tokenizer_destroy(&tok);
}
END_TEST

/* A u32 key that must exist, read through the reader's typed getter. */
static uint32_t u32_key(const rill_gguf_t *g, const char *key) {
    uint32_t v = 0;
    rill_err_t e = rill_gguf_get_u32(g, key, &v);
    ck_assert_msg(e == RILL_OK, "%s: %s", key, rill_err_name(e));
    ck_assert_int_eq(rill_gguf_kv_type(g, rill_gguf_find_key(g, key)), RILL_GGUF_U32);
    return v;
}

START_TEST(test_tiny_en_layout) {
    rill_gguf_t *g = NULL;
    rill_tokenizer_t *tok = load(g_tiny, &g);
    rill_gguf_str_t s;
    ck_assert_int_eq(rill_gguf_get_str(g, "general.architecture", &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "whisper"));
    ck_assert_int_eq(rill_gguf_get_str(g, "general.name", &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "whisper-tiny.en"));
    ck_assert_uint_eq(u32_key(g, "whisper.n_mels"), 80);
    ck_assert_uint_eq(u32_key(g, "whisper.n_audio_ctx"), 1500);
    ck_assert_uint_eq(u32_key(g, "whisper.n_audio_state"), 384);
    ck_assert_uint_eq(u32_key(g, "whisper.n_audio_head"), 6);
    ck_assert_uint_eq(u32_key(g, "whisper.n_audio_layer"), 4);
    ck_assert_uint_eq(u32_key(g, "whisper.n_text_ctx"), 448);
    ck_assert_uint_eq(u32_key(g, "whisper.n_text_state"), 384);
    ck_assert_uint_eq(u32_key(g, "whisper.n_text_head"), 6);
    ck_assert_uint_eq(u32_key(g, "whisper.n_text_layer"), 4);
    ck_assert_uint_eq(u32_key(g, "whisper.n_vocab"), 51864);
    bool multi = true;
    ck_assert_int_eq(rill_gguf_get_bool(g, "whisper.multilingual", &multi), RILL_OK);
    ck_assert(!multi);
    ck_assert_int_eq(rill_gguf_find_key(g, "whisper.lang_ids"), -1); /* .en: no languages */
    float eps = 0;
    ck_assert_int_eq(rill_gguf_get_f32(g, "whisper.layer_norm_epsilon", &eps), RILL_OK);
    ck_assert_float_eq(eps, 1e-5f);

    /* Special ids: each is the token whose text OpenAI's tokenizer gives it, and the
     * tokenizer's bos/eos are sot/eot. */
    static const struct {
        const char *key, *text;
    } specials[] = {
        { "whisper.token.sot", "<|startoftranscript|>" },
        { "whisper.token.eot", "<|endoftext|>" },
        { "whisper.token.transcribe", "<|transcribe|>" },
        { "whisper.token.translate", "<|translate|>" },
        { "whisper.token.no_timestamps", "<|notimestamps|>" },
        { "whisper.token.no_speech", "<|nocaptions|>" },
        { "whisper.token.prev", "<|startofprev|>" },
        { "whisper.token.timestamp_begin", "<|0.00|>" },
    };
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++) {
        uint32_t id = u32_key(g, specials[i].key);
        ck_assert_str_eq(rill_tokenizer_text(tok, (int32_t)id, NULL), specials[i].text);
        ck_assert_int_eq(rill_tokenizer_type(tok, (int32_t)id), RILL_TOKENIZER_TYPE_CONTROL);
    }
    const rill_tokenizer_special_t *sp = rill_tokenizer_special(tok);
    ck_assert_int_eq(sp->bos, 50257);
    ck_assert_int_eq(sp->eos, 50256);
    ck_assert(!sp->add_bos && !sp->add_eos);
    ck_assert(rill_tokenizer_is_eog(tok, 50256));
    ck_assert_int_eq(rill_tokenizer_type(tok, 50255), RILL_TOKENIZER_TYPE_NORMAL);
    ck_assert_str_eq(rill_tokenizer_text(tok, 51863, NULL), "<|30.00|>");

    /* Suppression lists: i32 arrays, the first and last entries of config.json's. */
    rill_gguf_type_t et = RILL_GGUF_NONE;
    uint64_t n = 0;
    const void *data = NULL;
    ck_assert_int_eq(rill_gguf_get_arr(g, "whisper.suppress_tokens", &et, &n), RILL_OK);
    ck_assert_int_eq(et, RILL_GGUF_I32);
    ck_assert_uint_eq(n, 90);
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "whisper.suppress_tokens", &data, &n), RILL_OK);
    int32_t first = 0, last = 0;
    memcpy(&first, data, 4);
    memcpy(&last, (const char *)data + 4 * (n - 1), 4);
    ck_assert_int_eq(first, 1);
    ck_assert_int_eq(last, 50361);
    ck_assert_int_eq(rill_gguf_get_arr(g, "whisper.begin_suppress_tokens", &et, &n), RILL_OK);
    ck_assert_int_eq(et, RILL_GGUF_I32);
    ck_assert_uint_eq(n, 2);

    /* Tensors: F16 for 2-D and 3-D weights exactly, F32 for the rest; no alias copies; the
     * shapes the forward relies on. */
    ck_assert_int_eq(rill_gguf_n_tensors(g), 140);
    for (int64_t i = 0; i < rill_gguf_n_tensors(g); i++) {
        const rill_gguf_tensor_t *t = rill_gguf_tensor(g, i);
        const char *name = t->name.ptr;
        size_t nl = (size_t)t->name.len;
        bool weight = nl > 7 && memcmp(name + nl - 7, "/weight", 7) == 0 && t->n_dims >= 2;
        ck_assert_msg(t->type == (weight ? RILL_DTYPE_F16 : RILL_DTYPE_F32), "%.*s", (int)nl, name);
    }
    ck_assert_ptr_null(rill_gguf_find_tensor(g, "decoder/projection/weight"));
    const rill_gguf_tensor_t *t = rill_gguf_find_tensor(g, "encoder/conv1/weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->n_dims, 3);
    ck_assert(t->ne[0] == 3 && t->ne[1] == 80 && t->ne[2] == 384);
    t = rill_gguf_find_tensor(g, "decoder/layer_2/self_attention/linear_0/weight");
    ck_assert(t != NULL && t->ne[0] == 384 && t->ne[1] == 3 * 384);
    t = rill_gguf_find_tensor(g, "decoder/layer_2/attention/linear_1/weight");
    ck_assert(t != NULL && t->ne[0] == 384 && t->ne[1] == 2 * 384);
    t = rill_gguf_find_tensor(g, "decoder/embeddings/weight");
    ck_assert(t != NULL && t->ne[0] == 384 && t->ne[1] == 51864);
    t = rill_gguf_find_tensor(g, "encoder/position_encodings/encodings");
    ck_assert(t != NULL && t->type == RILL_DTYPE_F32 && t->ne[0] == 384 && t->ne[1] == 1500);

    /* The filterbank, bit for bit faster-whisper's FeatureExtractor.mel_filters. */
    t = rill_gguf_find_tensor(g, "whisper/mel_filters");
    ck_assert_ptr_nonnull(t);
    ck_assert(t->type == RILL_DTYPE_F32 && t->n_dims == 2 && t->ne[0] == 201 && t->ne[1] == 80);
    size_t flen = 0;
    void *want = test_read_file(REF_DIR "mel_filters.f32", &flen);
    ck_assert_ptr_nonnull(want);
    ck_assert_uint_eq(flen, 80 * 201 * sizeof(float));
    ck_assert(memcmp(t->data, want, flen) == 0);
    free(want);

    rill_tokenizer_destroy(&tok);
    rill_gguf_destroy(&g);
}
END_TEST

/* Cut copies of the file: inside the header/metadata and inside the tensor data. The reader
 * must refuse each (RILL_EFORMAT) and return nothing. */
START_TEST(test_truncated_refused) {
    FILE *f = fopen(g_tiny, "rb");
    ck_assert_ptr_nonnull(f);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open(g_tiny, &g), RILL_OK);
    uint64_t data_off = rill_gguf_data_offset(g);
    uint64_t size = rill_gguf_file_size(g);
    rill_gguf_destroy(&g);
    size_t keep = (size_t)data_off + 4096;
    char *buf = malloc(keep);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, keep, f), keep);
    fclose(f);
    const size_t cuts[] = {
        3, 24, 1000, (size_t)data_off / 2, (size_t)data_off - 1, (size_t)data_off + 4096
    };
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        ck_assert(cuts[i] < size);
        rill_err_t e = rill_gguf_open_memory(buf, cuts[i], &g);
        ck_assert_msg(e == RILL_EFORMAT, "cut at %zu: %s", cuts[i], rill_err_name(e));
        ck_assert_ptr_null(g);
    }
    free(buf);
}
END_TEST

static Suite *whisper_vocab_suite(void) {
    Suite *s = suite_create("whisper_vocab");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_tiny_en_matches_hf);
    tcase_add_test(tc, test_base_matches_hf);
    tcase_add_test(tc, test_tiny_en_layout);
    tcase_add_test(tc, test_truncated_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    whisper_path(g_tiny, sizeof g_tiny, "whisper-tiny.en.gguf");
    whisper_path(g_base, sizeof g_base, "whisper-base.gguf");
    if (!test_file_exists(g_tiny)) {
        printf("SKIP: %s is missing: run scripts/setup.sh\n", g_tiny);
        return TEST_SKIP;
    }
    SRunner *sr = srunner_create(whisper_vocab_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
