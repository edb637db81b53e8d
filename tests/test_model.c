/*
 * test_model.c - unit tests of the model module: GGUF reader, model loader, sampler, chat.
 *
 * Crafted GGUF files are built in memory by the small writer below (gw_*). Buffers handed to the
 * reader are plain malloc() blocks of the exact size, so that AddressSanitizer reports any read
 * past their end (rill_malloc pads its blocks, which would hide a one-byte over-read).
 *
 * Tests that need the default model (models/SmolLM2-135M-Instruct.Q4_1.gguf) skip themselves
 * with a message when it is absent; the shared vocabulary files are required.
 */
#include <check.h>
#include <fcntl.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rill_chat.h"
#include "rill_core.h"
#include "rill_gguf.h"
#include "rill_model.h"
#include "rill_sampler.h"
#include "test_util.h"

#define MODEL_PATH RILL_SOURCE_DIR "/models/SmolLM2-135M-Instruct.Q4_1.gguf"
#define VOCAB_DIR  RILL_SHARED_DIR "/testdata/tokenizer/"
#define CORPUS_DIR RILL_SOURCE_DIR "/fuzz/corpus/gguf/"

static bool have_model(const char *test) {
    if (!test_file_exists(MODEL_PATH)) {
        fprintf(stderr, "%s: skipped, %s is absent\n", test, MODEL_PATH);
        return false;
    }
    return true;
}

static int64_t live(void) {
    return rill_mem_stats(RILL_MEM_MODEL).n_live;
}

/* ---- a tiny GGUF writer (test-only: plain malloc, aborts on OOM) ---- */

typedef struct buf {
    uint8_t *p;
    size_t n;
    size_t cap;
} buf_t;

static void put(buf_t *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) {
            cap *= 2;
        }
        b->p = realloc(b->p, cap);
        ck_assert_ptr_nonnull(b->p);
        b->cap = cap;
    }
    if (n > 0) {
        memcpy(b->p + b->n, src, n);
    }
    b->n += n;
}

static void put_u32(buf_t *b, uint32_t v) {
    uint8_t x[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24) };
    put(b, x, 4);
}

static void put_u64(buf_t *b, uint64_t v) {
    put_u32(b, (uint32_t)v);
    put_u32(b, (uint32_t)(v >> 32));
}

static void put_str(buf_t *b, const char *s) {
    put_u64(b, strlen(s));
    put(b, s, strlen(s));
}

#define AUTO_OFFSET UINT64_MAX

typedef struct gw {
    buf_t kv;
    buf_t ti;
    uint64_t n_kv;
    uint64_t n_t;
    uint64_t data_size;
    uint32_t alignment;
    uint32_t version;
} gw_t;

static void gw_init(gw_t *w) {
    memset(w, 0, sizeof *w);
    w->alignment = 32;
    w->version = 3;
}

static void kv_head(gw_t *w, const char *key, uint32_t type) {
    put_str(&w->kv, key);
    put_u32(&w->kv, type);
    w->n_kv++;
}

static void kv_u32(gw_t *w, const char *key, uint32_t v) {
    kv_head(w, key, RILL_GGUF_U32);
    put_u32(&w->kv, v);
}

static void kv_f32(gw_t *w, const char *key, float f) {
    uint32_t bits;
    memcpy(&bits, &f, 4);
    kv_head(w, key, RILL_GGUF_F32);
    put_u32(&w->kv, bits);
}

static void kv_str(gw_t *w, const char *key, const char *s) {
    kv_head(w, key, RILL_GGUF_STRING);
    put_str(&w->kv, s);
}

static void kv_raw(gw_t *w, const char *key, uint32_t type, const void *bytes, size_t n) {
    kv_head(w, key, type);
    put(&w->kv, bytes, n);
}

static void kv_tokens(gw_t *w, int n) {
    kv_head(w, "tokenizer.ggml.tokens", RILL_GGUF_ARRAY);
    put_u32(&w->kv, RILL_GGUF_STRING);
    put_u64(&w->kv, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        char t[32];
        snprintf(t, sizeof t, "<t%d>", i);
        put_str(&w->kv, t);
    }
}

/* Writes a tensor info; its data (a byte pattern) is laid out at `offset` (AUTO_OFFSET: after
 * the previous tensors, aligned). */
static void tensor(gw_t *w, const char *name, int n_dims, const int64_t *ne, uint32_t type,
                   uint64_t offset) {
    int64_t nbytes = 0;
    if (rill_dtype_valid((int)type)) {
        /* Tensors too large to lay out (for overflow tests) get no data. */
        nbytes = rill_dtype_row_bytes((rill_dtype_t)type, ne[0]);
        for (int d = 1; d < n_dims && nbytes > 0; d++) {
            nbytes = ne[d] >= 0 && ne[d] <= (1 << 24) / nbytes ? nbytes * ne[d] : 0;
        }
        if (nbytes < 0 || nbytes > (1 << 24)) {
            nbytes = 0;
        }
    }
    if (offset == AUTO_OFFSET) {
        offset = w->data_size;
    }
    uint64_t end = offset + (uint64_t)nbytes;
    end = (end + w->alignment - 1) / w->alignment * w->alignment;
    if (offset < (1u << 24) && end > w->data_size) {
        w->data_size = end;
    }
    put_str(&w->ti, name);
    put_u32(&w->ti, (uint32_t)n_dims);
    for (int d = 0; d < n_dims; d++) {
        put_u64(&w->ti, (uint64_t)ne[d]);
    }
    put_u32(&w->ti, type);
    put_u64(&w->ti, offset);
    w->n_t++;
}

static void tensor2(gw_t *w, const char *name, int64_t ne0, int64_t ne1, uint32_t type) {
    int64_t ne[2] = { ne0, ne1 };
    tensor(w, name, ne1 == 1 ? 1 : 2, ne, type, AUTO_OFFSET);
}

/* The file, in an exact-size malloc block. */
static uint8_t *gw_finish(gw_t *w, size_t *len) {
    buf_t b = { 0 };
    put(&b, "GGUF", 4);
    put_u32(&b, w->version);
    put_u64(&b, w->n_t);
    put_u64(&b, w->n_kv);
    put(&b, w->kv.p, w->kv.n);
    put(&b, w->ti.p, w->ti.n);
    while (b.n % w->alignment != 0) {
        put(&b, "", 1);
    }
    for (uint64_t i = 0; i < w->data_size; i++) {
        uint8_t x = (uint8_t)(i * 7 + 1);
        put(&b, &x, 1);
    }
    free(w->kv.p);
    free(w->ti.p);
    uint8_t *out = malloc(b.n ? b.n : 1);
    ck_assert_ptr_nonnull(out);
    memcpy(out, b.p, b.n);
    free(b.p);
    *len = b.n;
    return out;
}

/* A tiny model of either architecture, with knobs to break it. */
typedef struct tiny {
    const char *arch;
    int n_layer, n_embd, n_head, n_head_kv, n_ff, n_vocab;
    rill_dtype_t mat;
    rill_dtype_t norm;
    bool output, bias;
    const char *omit;    /* tensor not written */
    const char *reshape; /* tensor written with its row count (or length) halved */
    const char *extra;   /* an extra F32 vector tensor, of extra_len (0: n_embd) elements */
    int extra_len;
    const char *omit_key; /* "<arch>.<omit_key>" not written */
    void (*more_kv)(gw_t *w);
} tiny_t;

static tiny_t tiny_default(void) {
    tiny_t t = { .arch = "llama",
                 .n_layer = 2,
                 .n_embd = 64,
                 .n_head = 4,
                 .n_head_kv = 2,
                 .n_ff = 128,
                 .n_vocab = 32,
                 .mat = RILL_DTYPE_Q4_0,
                 .norm = RILL_DTYPE_F32 };
    return t;
}

static void tiny_kv_u32(gw_t *w, const tiny_t *t, const char *name, uint32_t v) {
    char key[128];
    if (t->omit_key != NULL && strcmp(t->omit_key, name) == 0) {
        return;
    }
    snprintf(key, sizeof key, "%s.%s", t->arch, name);
    kv_u32(w, key, v);
}

static void tiny_tensor(gw_t *w, const tiny_t *t, const char *name, int64_t ne0, int64_t ne1,
                        uint32_t type) {
    if (t->omit != NULL && strcmp(t->omit, name) == 0) {
        return;
    }
    if (t->reshape != NULL && strcmp(t->reshape, name) == 0) {
        if (ne1 > 1) {
            ne1 /= 2;
        } else {
            ne0 /= 2;
        }
    }
    tensor2(w, name, ne0, ne1, type);
}

static uint8_t *build_tiny(const tiny_t *t, size_t *len) {
    gw_t w;
    gw_init(&w);
    kv_str(&w, "general.architecture", t->arch);
    tiny_kv_u32(&w, t, "context_length", 256);
    tiny_kv_u32(&w, t, "embedding_length", (uint32_t)t->n_embd);
    tiny_kv_u32(&w, t, "block_count", (uint32_t)t->n_layer);
    tiny_kv_u32(&w, t, "feed_forward_length", (uint32_t)t->n_ff);
    tiny_kv_u32(&w, t, "attention.head_count", (uint32_t)t->n_head);
    tiny_kv_u32(&w, t, "attention.head_count_kv", (uint32_t)t->n_head_kv);
    char key[128];
    if (t->omit_key == NULL || strcmp(t->omit_key, "attention.layer_norm_rms_epsilon") != 0) {
        snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", t->arch);
        kv_f32(&w, key, 1e-6f);
    }
    snprintf(key, sizeof key, "%s.rope.freq_base", t->arch);
    kv_f32(&w, key, strcmp(t->arch, "qwen2") == 0 ? 1e6f : 10000.0f);
    kv_tokens(&w, t->n_vocab);
    if (t->more_kv != NULL) {
        t->more_kv(&w);
    }
    const int64_t E = t->n_embd;
    const int64_t D = t->n_embd / t->n_head;
    const int64_t Q = t->n_head * D;
    const int64_t KV = t->n_head_kv * D;
    const int64_t F = t->n_ff;
    tiny_tensor(&w, t, "token_embd.weight", E, t->n_vocab, RILL_DTYPE_Q8_0);
    tiny_tensor(&w, t, "output_norm.weight", E, 1, RILL_DTYPE_F32);
    if (t->output) {
        tiny_tensor(&w, t, "output.weight", E, t->n_vocab, t->mat);
    }
    for (int l = 0; l < t->n_layer; l++) {
        char n[64];
#define T_(s, a, b, ty) (snprintf(n, sizeof n, "blk.%d." s, l), tiny_tensor(&w, t, n, a, b, ty))
        T_("attn_norm.weight", E, 1, t->norm);
        T_("attn_q.weight", E, Q, t->mat);
        T_("attn_k.weight", E, KV, t->mat);
        T_("attn_v.weight", E, KV, t->mat);
        T_("attn_output.weight", Q, E, t->mat);
        if (t->bias) {
            T_("attn_q.bias", Q, 1, RILL_DTYPE_F32);
            T_("attn_k.bias", KV, 1, RILL_DTYPE_F32);
            T_("attn_v.bias", KV, 1, RILL_DTYPE_F32);
        }
        T_("ffn_norm.weight", E, 1, t->norm);
        T_("ffn_gate.weight", E, F, t->mat);
        T_("ffn_up.weight", E, F, t->mat);
        T_("ffn_down.weight", F, E, t->mat);
#undef T_
    }
    if (t->extra != NULL) {
        tensor2(&w, t->extra, t->extra_len > 0 ? t->extra_len : E, 1, RILL_DTYPE_F32);
    }
    return gw_finish(&w, len);
}

/* Opens a buffer and expects `want`; returns the message. Checks that nothing leaked. */
static rill_err_t open_expect(const uint8_t *b, size_t n, rill_err_t want) {
    int64_t before = live();
    rill_gguf_t *g = (rill_gguf_t *)1;
    rill_err_t e = rill_gguf_open_memory(b, n, &g);
    ck_assert_msg(e == want, "got %s, want %s: %s", rill_err_name(e), rill_err_name(want),
                  rill_last_error(RILL_OK));
    if (e != RILL_OK) {
        ck_assert_ptr_null(g);
    }
    rill_gguf_destroy(&g);
    ck_assert_int_eq(live(), before);
    return e;
}

/* Loads a model from a buffer through rill_model_load_gguf. */
static rill_err_t load_buf(const uint8_t *b, size_t n, rill_model_params_t p, rill_model_t **m) {
    rill_gguf_t *g = NULL;
    rill_err_t e = rill_gguf_open_memory(b, n, &g);
    ck_assert_msg(e == RILL_OK, "open: %s", rill_last_error(RILL_OK));
    e = rill_model_load_gguf(&g, p, m);
    if (e == RILL_OK) {
        ck_assert_ptr_null(g);
    } else {
        ck_assert_ptr_nonnull(g); /* the caller still owns the reader */
        ck_assert_ptr_null(*m);
        rill_gguf_destroy(&g);
    }
    return e;
}

static rill_err_t load_tiny(const tiny_t *t, rill_model_t **m) {
    size_t n;
    uint8_t *b = build_tiny(t, &n);
    int64_t before = live();
    rill_err_t e = load_buf(b, n, rill_model_default_params(), m);
    if (e != RILL_OK) {
        ck_assert_int_eq(live(), before);
    }
    rill_model_destroy(m);
    ck_assert_int_eq(live(), before);
    free(b);
    return e;
}

/* ---- GGUF reader on real files ---- */

START_TEST(gguf_reads_default_model) {
    if (!have_model(__func__)) {
        return;
    }
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open(MODEL_PATH, &g), RILL_OK);
    ck_assert_uint_eq(rill_gguf_version(g), 3);
    ck_assert_uint_eq(rill_gguf_alignment(g), 32);
    ck_assert_uint_eq(rill_gguf_file_size(g), 98362432);
    ck_assert_int_eq(rill_gguf_n_kv(g), 33);
    ck_assert_int_eq(rill_gguf_n_tensors(g), 272);

    rill_gguf_str_t s;
    ck_assert_int_eq(rill_gguf_get_str(g, "general.architecture", &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "llama"));
    uint32_t u;
    ck_assert_int_eq(rill_gguf_get_u32(g, "llama.block_count", &u), RILL_OK);
    ck_assert_uint_eq(u, 30);
    ck_assert_int_eq(rill_gguf_get_u32(g, "llama.embedding_length", &u), RILL_OK);
    ck_assert_uint_eq(u, 576);
    float f;
    ck_assert_int_eq(rill_gguf_get_f32(g, "llama.rope.freq_base", &f), RILL_OK);
    ck_assert_float_eq(f, 100000.0f);
    bool b = true;
    ck_assert_int_eq(rill_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), RILL_OK);
    ck_assert(!b);
    /* Wrong type, absent, and the value left alone on error. */
    u = 7;
    ck_assert_int_eq(rill_gguf_get_u32(g, "llama.rope.freq_base", &u), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_u32(g, "no.such.key", &u), RILL_ENOTFOUND);
    ck_assert_uint_eq(u, 7);

    rill_gguf_type_t et;
    uint64_t len;
    ck_assert_int_eq(rill_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &len), RILL_OK);
    ck_assert_int_eq(et, RILL_GGUF_STRING);
    ck_assert_uint_eq(len, 49152);
    ck_assert_int_eq(rill_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "<|endoftext|>"));
    ck_assert_int_eq(rill_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1, &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "<|im_start|>"));
    ck_assert_int_eq(rill_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 49152, &s), RILL_ERANGE);
    ck_assert_int_eq(rill_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &len), RILL_OK);
    ck_assert_uint_eq(len, 48900);
    const void *data;
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "tokenizer.ggml.token_type", &data, &len), RILL_OK);
    ck_assert_uint_eq(len, 49152);
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "tokenizer.ggml.tokens", &data, &len), RILL_EFORMAT);

    /* Keys by index agree with lookups by name. */
    for (int64_t i = 0; i < rill_gguf_n_kv(g); i++) {
        char k[128];
        rill_gguf_str_t key = rill_gguf_key(g, i);
        ck_assert_uint_lt(key.len, sizeof k);
        memcpy(k, key.ptr, key.len);
        k[key.len] = '\0';
        ck_assert_int_eq(rill_gguf_find_key(g, k), i);
    }
    ck_assert_int_eq(rill_gguf_kv_type(g, 0), RILL_GGUF_STRING);
    ck_assert_int_eq(rill_gguf_kv_type(g, 33), RILL_GGUF_NONE);
    ck_assert_ptr_null(rill_gguf_key(g, -1).ptr);

    const rill_gguf_tensor_t *t = rill_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, RILL_DTYPE_Q8_0);
    ck_assert_int_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 576);
    ck_assert_int_eq(t->ne[1], 49152);
    ck_assert_uint_eq(t->nbytes, 30081024);
    ck_assert_uint_eq(rill_gguf_data_offset(g) + t->offset, 1785664); /* as gguf-py reports */
    t = rill_gguf_find_tensor(g, "blk.0.attn_k.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->type, RILL_DTYPE_Q4_1);
    ck_assert_int_eq(t->ne[0], 576);
    ck_assert_int_eq(t->ne[1], 192);
    ck_assert_uint_eq(t->nbytes, 69120);
    ck_assert_ptr_eq(rill_gguf_tensor(g, t - rill_gguf_tensor(g, 0)), t);
    ck_assert_ptr_null(rill_gguf_find_tensor(g, "output.weight"));
    ck_assert_ptr_null(rill_gguf_tensor(g, 272));
    int n_q41 = 0;
    for (int64_t i = 0; i < 272; i++) {
        n_q41 += rill_gguf_tensor(g, i)->type == RILL_DTYPE_Q4_1;
    }
    ck_assert_int_eq(n_q41, 210);
    rill_gguf_destroy(&g);
    ck_assert_ptr_null(g);
    rill_gguf_destroy(&g);
    rill_gguf_destroy(NULL);
}
END_TEST

START_TEST(gguf_reads_vocab_files) {
    static const struct {
        const char *file;
        uint64_t n_vocab;
        bool merges;
    } files[] = { { "ggml-vocab-llama-spm.gguf", 32000, false },
                  { "ggml-vocab-llama-bpe.gguf", 128256, true },
                  { "ggml-vocab-qwen2.gguf", 151936, true },
                  { "ggml-vocab-gpt-2.gguf", 50257, true } };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s%s", VOCAB_DIR, files[i].file);
        rill_gguf_t *g = NULL;
        ck_assert_msg(rill_gguf_open(path, &g) == RILL_OK, "%s: %s", path,
                      rill_last_error(RILL_OK));
        ck_assert_int_eq(rill_gguf_n_tensors(g), 0);
        uint64_t len = 0;
        ck_assert_int_eq(rill_gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &len), RILL_OK);
        ck_assert_uint_eq(len, files[i].n_vocab);
        rill_gguf_str_t s;
        ck_assert_int_eq(rill_gguf_get_arr_str(g, "tokenizer.ggml.tokens", len - 1, &s), RILL_OK);
        ck_assert_int_eq(rill_gguf_get_arr(g, "tokenizer.ggml.merges", NULL, &len),
                         files[i].merges ? RILL_OK : RILL_ENOTFOUND);
        rill_gguf_destroy(&g);
    }
}
END_TEST

START_TEST(gguf_open_file_errors) {
    rill_gguf_t *g = (rill_gguf_t *)1;
    ck_assert_int_eq(rill_gguf_open("/nonexistent/x.gguf", &g), RILL_EIO);
    ck_assert_ptr_null(g);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EIO), "/nonexistent/x.gguf"));
    ck_assert_int_eq(rill_gguf_open("/tmp", &g), RILL_EIO);
    char path[] = "/tmp/rill-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(rill_gguf_open(path, &g), RILL_EFORMAT); /* empty */
    ck_assert_int_eq(write(fd, "GGUF\3\0\0\0", 8), 8);
    close(fd);
    ck_assert_int_eq(rill_gguf_open(path, &g), RILL_EFORMAT); /* truncated */
    unlink(path);
    ck_assert_int_eq(rill_gguf_open(NULL, &g), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_open(path, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_open_memory(NULL, 5, &g), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_open_memory(NULL, 0, &g), RILL_EFORMAT);
}
END_TEST

/* Every cut of the real model's metadata (each byte of the first 4 KiB, then strided) and a
 * stride through its data section must give RILL_EFORMAT without leaking. Metadata cuts are
 * exact-size copies so that ASan sees over-reads; data-section cuts are prefixes of a mapping
 * (the reader does not touch tensor bytes, and copying 98 MB per cut would be slow). */
START_TEST(gguf_truncated_default_model) {
    if (!have_model(__func__)) {
        return;
    }
    int fd = open(MODEL_PATH, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    size_t size = (size_t)st.st_size;
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    ck_assert(map != MAP_FAILED);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open_memory(map, size, &g), RILL_OK);
    size_t meta = (size_t)rill_gguf_data_offset(g);
    rill_gguf_destroy(&g);
    int64_t before = live();
    int cuts = 0;
    for (size_t cut = 0; cut < meta + 64; cut += cut < 4096 ? 1 : 4093) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, map, cut);
        rill_err_t e = rill_gguf_open_memory(copy, cut, &g);
        ck_assert_msg(e == RILL_EFORMAT, "cut %zu: %s (%s)", cut, rill_err_name(e),
                      rill_last_error(RILL_EFORMAT));
        ck_assert_ptr_null(g);
        free(copy);
        cuts++;
    }
    for (size_t cut = meta + 64; cut < size; cut += size / 97) {
        ck_assert_int_eq(rill_gguf_open_memory(map, cut, &g), RILL_EFORMAT);
        cuts++;
    }
    ck_assert_int_eq(rill_gguf_open_memory(map, size - 1, &g), RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFORMAT),
                                 "output_norm.weight")); /* the last tensor in the file */
    ck_assert_int_eq(live(), before);
    ck_assert_int_gt(cuts, 4500);
    munmap((void *)map, size);
}
END_TEST

START_TEST(gguf_truncated_tiny_every_byte) {
    tiny_t t = tiny_default();
    size_t n;
    uint8_t *full = build_tiny(&t, &n);
    open_expect(full, n, RILL_OK);
    for (size_t cut = 0; cut < n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, full, cut);
        open_expect(copy, cut, RILL_EFORMAT);
        free(copy);
    }
    free(full);
}
END_TEST

/* ---- GGUF reader: crafted errors ---- */

static uint8_t *header_only(uint32_t version, uint64_t n_t, uint64_t n_kv, size_t pad,
                            size_t *len) {
    gw_t w;
    gw_init(&w);
    w.version = version;
    uint8_t *b = gw_finish(&w, len);
    b = realloc(b, 24 + pad);
    memset(b + 8, 0, 16 + pad);
    for (int i = 0; i < 8; i++) {
        b[8 + i] = (uint8_t)(n_t >> (8 * i));
        b[16 + i] = (uint8_t)(n_kv >> (8 * i));
    }
    *len = 24 + pad;
    return b;
}

START_TEST(gguf_bad_headers) {
    size_t n;
    uint8_t *b = header_only(3, 0, 0, 0, &n);
    open_expect(b, n, RILL_OK);
    b[0] = 'X';
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "magic"));
    b[0] = 'G';
    b[4] = 1;
    open_expect(b, n, RILL_EUNSUPPORTED);
    b[4] = 4;
    open_expect(b, n, RILL_EUNSUPPORTED);
    b[4] = 2;
    open_expect(b, n, RILL_OK);
    b[4] = 0;
    b[7] = 3; /* version 3 written big-endian */
    open_expect(b, n, RILL_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "big-endian"));
    free(b);
    /* Counts the file cannot hold are refused before anything is allocated. */
    b = header_only(3, 0, UINT64_C(1) << 62, 64, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);
    b = header_only(3, UINT64_MAX, 0, 64, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);
    b = header_only(3, 3, 0, 71, &n); /* 3 tensor infos need >= 72 bytes */
    open_expect(b, n, RILL_EFORMAT);
    free(b);
}
END_TEST

START_TEST(gguf_bad_metadata) {
    size_t n;
    gw_t w;
    uint8_t *b;

    gw_init(&w); /* a string longer than the file */
    kv_head(&w, "k", RILL_GGUF_STRING);
    put_u64(&w.kv, UINT64_MAX - 3);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);

    gw_init(&w); /* an array longer than the file */
    kv_head(&w, "arr", RILL_GGUF_ARRAY);
    put_u32(&w.kv, RILL_GGUF_U64);
    put_u64(&w.kv, UINT64_C(1) << 61);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "arr"));
    free(b);

    gw_init(&w); /* an unknown value type */
    kv_head(&w, "k", 13);
    put_u32(&w.kv, 0);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EUNSUPPORTED);
    free(b);

    gw_init(&w); /* an unknown array element type */
    kv_head(&w, "k", RILL_GGUF_ARRAY);
    put_u32(&w.kv, 99);
    put_u64(&w.kv, 0);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EUNSUPPORTED);
    free(b);

    gw_init(&w); /* bool 2 */
    kv_raw(&w, "flag", RILL_GGUF_BOOL, "\2", 1);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "flag"));
    free(b);

    gw_init(&w); /* bool array with a 7 */
    kv_head(&w, "flags", RILL_GGUF_ARRAY);
    put_u32(&w.kv, RILL_GGUF_BOOL);
    put_u64(&w.kv, 3);
    put(&w.kv, "\1\0\7", 3);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);

    gw_init(&w); /* duplicate keys */
    kv_u32(&w, "a.b", 1);
    kv_u32(&w, "x", 1);
    kv_u32(&w, "a.b", 2);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "duplicate key 'a.b'"));
    free(b);

    for (int depth = RILL_GGUF_MAX_DEPTH; depth <= RILL_GGUF_MAX_DEPTH + 1; depth++) {
        gw_init(&w); /* arrays nested `depth` deep: the deepest one holds one u8 */
        kv_head(&w, "deep", RILL_GGUF_ARRAY);
        for (int d = 1; d < depth; d++) {
            put_u32(&w.kv, RILL_GGUF_ARRAY);
            put_u64(&w.kv, 1);
        }
        put_u32(&w.kv, RILL_GGUF_U8);
        put_u64(&w.kv, 1);
        put(&w.kv, "\5", 1);
        b = gw_finish(&w, &n);
        open_expect(b, n, depth <= RILL_GGUF_MAX_DEPTH ? RILL_OK : RILL_EFORMAT);
        free(b);
    }

    static const uint32_t bad_align[] = { 0, 48, 3 };
    for (size_t i = 0; i < 3; i++) {
        gw_init(&w);
        kv_u32(&w, "general.alignment", bad_align[i]);
        b = gw_finish(&w, &n);
        open_expect(b, n, RILL_EFORMAT);
        ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "alignment"));
        free(b);
    }
    gw_init(&w);
    kv_raw(&w, "general.alignment", RILL_GGUF_U64, "\x20\0\0\0\0\0\0\0", 8);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);
}
END_TEST

START_TEST(gguf_getters_convert_and_check) {
    gw_t w;
    gw_init(&w);
    w.alignment = 64;
    kv_u32(&w, "general.alignment", 64);
    kv_raw(&w, "u8", RILL_GGUF_U8, "\xc8", 1);
    kv_raw(&w, "i8", RILL_GGUF_I8, "\x9c", 1);       /* -100 */
    kv_raw(&w, "i16", RILL_GGUF_I16, "\x30\x8a", 2); /* -30160 */
    kv_raw(&w, "u64big", RILL_GGUF_U64, "\5\0\0\0\0\0\0\x80", 8);
    kv_raw(&w, "i32", RILL_GGUF_I32, "\x05\0\0\0", 4);
    double d = 0.25;
    uint8_t db[8];
    memcpy(db, &d, 8);
    kv_raw(&w, "f64", RILL_GGUF_F64, db, 8);
    d = 1e300;
    memcpy(db, &d, 8);
    kv_raw(&w, "f64big", RILL_GGUF_F64, db, 8);
    kv_raw(&w, "yes", RILL_GGUF_BOOL, "\1", 1);
    kv_str(&w, "s", "hello");
    kv_head(&w, "a.i16", RILL_GGUF_ARRAY);
    put_u32(&w.kv, RILL_GGUF_I16);
    put_u64(&w.kv, 2);
    put(&w.kv, "\1\0\2\0", 4);
    kv_head(&w, "a.nested", RILL_GGUF_ARRAY);
    put_u32(&w.kv, RILL_GGUF_ARRAY);
    put_u64(&w.kv, 1);
    put_u32(&w.kv, RILL_GGUF_STRING);
    put_u64(&w.kv, 1);
    put_str(&w.kv, "inner");
    int64_t ne[1] = { 8 };
    tensor(&w, "t", 1, ne, RILL_DTYPE_F32, AUTO_OFFSET);
    size_t n;
    uint8_t *b = gw_finish(&w, &n);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open_memory(b, n, &g), RILL_OK);
    ck_assert_uint_eq(rill_gguf_alignment(g), 64);
    ck_assert_uint_eq(rill_gguf_data_offset(g) % 64, 0);
    const rill_gguf_tensor_t *t = rill_gguf_find_tensor(g, "t");
    ck_assert_ptr_eq(t->data, b + rill_gguf_data_offset(g));

    uint32_t u32 = 0;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    float f = 0;
    bool yes = false;
    ck_assert_int_eq(rill_gguf_get_u32(g, "u8", &u32), RILL_OK);
    ck_assert_uint_eq(u32, 200);
    ck_assert_int_eq(rill_gguf_get_u32(g, "i8", &u32), RILL_ERANGE);
    ck_assert_int_eq(rill_gguf_get_u64(g, "i16", &u64), RILL_ERANGE);
    ck_assert_int_eq(rill_gguf_get_i64(g, "i8", &i64), RILL_OK);
    ck_assert_int_eq(i64, -100);
    ck_assert_int_eq(rill_gguf_get_i64(g, "i16", &i64), RILL_OK);
    ck_assert_int_eq(i64, -30160);
    ck_assert_int_eq(rill_gguf_get_i64(g, "u64big", &i64), RILL_ERANGE);
    ck_assert_int_eq(rill_gguf_get_u32(g, "u64big", &u32), RILL_ERANGE);
    ck_assert_int_eq(rill_gguf_get_u64(g, "u64big", &u64), RILL_OK);
    ck_assert_uint_eq(u64, UINT64_C(0x8000000000000005));
    ck_assert_int_eq(rill_gguf_get_u64(g, "i32", &u64), RILL_OK);
    ck_assert_uint_eq(u64, 5);
    ck_assert_int_eq(rill_gguf_get_f32(g, "f64", &f), RILL_OK);
    ck_assert_float_eq(f, 0.25f);
    ck_assert_int_eq(rill_gguf_get_f32(g, "f64big", &f), RILL_OK);
    ck_assert(isinf(f));
    ck_assert_int_eq(rill_gguf_get_f32(g, "i32", &f), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_bool(g, "yes", &yes), RILL_OK);
    ck_assert(yes);
    ck_assert_int_eq(rill_gguf_get_bool(g, "u8", &yes), RILL_EFORMAT);
    rill_gguf_str_t s;
    ck_assert_int_eq(rill_gguf_get_str(g, "s", &s), RILL_OK);
    ck_assert(rill_gguf_str_eq(s, "hello"));
    ck_assert(!rill_gguf_str_eq(s, "hell"));
    ck_assert(!rill_gguf_str_eq(s, NULL));
    ck_assert_int_eq(rill_gguf_get_str(g, "u8", &s), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_u32(g, "s", &u32), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_arr(g, "s", NULL, NULL), RILL_EFORMAT);
    rill_gguf_type_t et;
    uint64_t len;
    ck_assert_int_eq(rill_gguf_get_arr(g, "a.nested", &et, &len), RILL_OK);
    ck_assert_int_eq(et, RILL_GGUF_ARRAY);
    ck_assert_uint_eq(len, 1);
    const void *data;
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "a.nested", &data, &len), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_arr_str(g, "a.nested", 0, &s), RILL_EFORMAT);
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "a.i16", &data, &len), RILL_OK);
    ck_assert_uint_eq(len, 2);
    ck_assert_int_eq(((const uint8_t *)data)[2], 2);
    ck_assert_int_eq(rill_gguf_get_arr_data(g, "a.i16", &data, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_get_u32(NULL, "u8", &u32), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_get_u32(g, NULL, &u32), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_get_u32(g, "u8", NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_gguf_find_key(g, NULL), -1);
    ck_assert_int_eq(rill_gguf_find_key(NULL, "u8"), -1);
    ck_assert_int_eq(rill_gguf_n_kv(NULL), 0);
    ck_assert_int_eq(rill_gguf_n_tensors(NULL), 0);
    ck_assert_ptr_null(rill_gguf_find_tensor(g, NULL));
    rill_gguf_destroy(&g);
    free(b);
}
END_TEST

START_TEST(gguf_bad_tensors) {
    size_t n;
    uint8_t *b;
    gw_t w;
    const int64_t ne[2] = { 32, 4 };

    gw_init(&w); /* misaligned offset */
    tensor(&w, "a", 2, ne, RILL_DTYPE_F32, 0);
    tensor(&w, "b", 2, ne, RILL_DTYPE_F32, 1024 + 16);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "'b'"));
    free(b);

    gw_init(&w); /* overlapping: b starts inside a */
    tensor(&w, "a", 2, ne, RILL_DTYPE_F32, 0);
    tensor(&w, "b", 2, ne, RILL_DTYPE_F32, 256);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "overlap"));
    free(b);

    gw_init(&w); /* out of order but disjoint and in range: fine */
    tensor(&w, "a", 2, ne, RILL_DTYPE_F32, 512);
    tensor(&w, "b", 2, ne, RILL_DTYPE_F32, 0);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_OK);
    free(b);

    gw_init(&w); /* unknown type (Q2_K exists in ggml, not in rill) */
    tensor(&w, "a", 2, ne, 10, AUTO_OFFSET);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EUNSUPPORTED);
    free(b);

    gw_init(&w); /* ne[0] not a whole number of blocks */
    const int64_t half[2] = { 16, 1 };
    tensor(&w, "q", 2, half, RILL_DTYPE_Q4_0, AUTO_OFFSET);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "blocks"));
    free(b);

    gw_init(&w); /* five dimensions */
    const int64_t ne5[5] = { 1, 1, 1, 1, 1 };
    tensor(&w, "a", 5, ne5, RILL_DTYPE_F32, AUTO_OFFSET);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);

    gw_init(&w); /* element count overflows int64 */
    const int64_t huge[3] = { INT64_C(1) << 40, INT64_C(1) << 20, INT64_C(1) << 10 };
    tensor(&w, "a", 3, huge, RILL_DTYPE_F32, 0);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "overflow"));
    free(b);

    gw_init(&w); /* a dimension above INT64_MAX */
    const int64_t neg[2] = { -1, 1 };
    tensor(&w, "a", 2, neg, RILL_DTYPE_F32, 0);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    free(b);

    gw_init(&w); /* data past the end of the file */
    tensor(&w, "a", 2, ne, RILL_DTYPE_F32, AUTO_OFFSET);
    tensor(&w, "far", 2, ne, RILL_DTYPE_F32, UINT64_C(1) << 40);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "'far'"));
    free(b);

    gw_init(&w); /* duplicate tensor names */
    tensor(&w, "same", 2, ne, RILL_DTYPE_F32, AUTO_OFFSET);
    tensor(&w, "same", 2, ne, RILL_DTYPE_F32, AUTO_OFFSET);
    b = gw_finish(&w, &n);
    open_expect(b, n, RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_OK), "duplicate tensor name 'same'"));
    free(b);

    gw_init(&w); /* zero-size and zero-dims tensors are allowed, and take no room */
    const int64_t zero[2] = { 0, 5 };
    tensor(&w, "empty", 2, zero, RILL_DTYPE_Q4_K, 0);
    tensor(&w, "scalar", 0, ne, RILL_DTYPE_F32, 0);
    b = gw_finish(&w, &n);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open_memory(b, n, &g), RILL_OK);
    ck_assert_uint_eq(rill_gguf_find_tensor(g, "empty")->nbytes, 0);
    ck_assert_uint_eq(rill_gguf_find_tensor(g, "scalar")->nbytes, 4);
    ck_assert_int_eq(rill_gguf_find_tensor(g, "scalar")->ne[0], 1);
    rill_gguf_destroy(&g);
    free(b);
}
END_TEST

/* Walks every allocation point of an operation: each failure gives RILL_ENOMEM and leaks
 * nothing. `op` returns the operation's result and cleans up after a success. */
typedef rill_err_t (*op_fn)(void *ctx);

static void fail_walk(op_fn op, void *ctx, int64_t min_points) {
    int64_t before = live();
    int64_t c0 = rill_mem_calls();
    ck_assert_int_eq(op(ctx), RILL_OK);
    int64_t points = rill_mem_calls() - c0;
    ck_assert_int_ge(points, min_points);
    ck_assert_int_eq(live(), before);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t e = op(ctx);
        rill_mem_fail_nth(0);
        ck_assert_msg(e == RILL_ENOMEM, "allocation %lld of %lld: %s", (long long)k,
                      (long long)points, rill_err_name(e));
        ck_assert_int_eq(live(), before);
    }
}

typedef struct mem_ctx {
    const uint8_t *b;
    size_t n;
} mem_ctx_t;

static rill_err_t op_open_memory(void *ctx) {
    mem_ctx_t *c = ctx;
    rill_gguf_t *g = NULL;
    rill_err_t e = rill_gguf_open_memory(c->b, c->n, &g);
    ck_assert(e == RILL_OK || g == NULL);
    rill_gguf_destroy(&g);
    return e;
}

static rill_err_t op_load_memory(void *ctx) {
    mem_ctx_t *c = ctx;
    rill_gguf_t *g = NULL;
    rill_err_t e = rill_gguf_open_memory(c->b, c->n, &g);
    if (e != RILL_OK) {
        return e;
    }
    rill_model_t *m = NULL;
    e = rill_model_load_gguf(&g, rill_model_default_params(), &m);
    rill_gguf_destroy(&g);
    rill_model_destroy(&m);
    return e;
}

static rill_err_t op_load_file(void *ctx) {
    (void)ctx;
    rill_model_t *m = NULL;
    rill_err_t e = rill_model_load(MODEL_PATH, rill_model_default_params(), &m);
    ck_assert(e == RILL_OK || m == NULL);
    rill_model_destroy(&m);
    return e;
}

START_TEST(gguf_and_model_allocation_failures) {
    tiny_t t = tiny_default();
    t.bias = true;
    size_t n;
    uint8_t *b = build_tiny(&t, &n);
    mem_ctx_t c = { b, n };
    fail_walk(op_open_memory, &c, 5);
    fail_walk(op_load_memory, &c, 7);
    free(b);
    if (have_model(__func__)) {
        fail_walk(op_load_file, NULL, 7);
    }
}
END_TEST

/* ---- model loader ---- */

START_TEST(model_loads_default_model) {
    if (!have_model(__func__)) {
        return;
    }
    rill_model_t *m = NULL;
    ck_assert_int_eq(rill_model_load(MODEL_PATH, rill_model_default_params(), &m), RILL_OK);
    const rill_hparams_t *hp = rill_model_hparams(m);
    ck_assert_int_eq(hp->arch, RILL_ARCH_LLAMA);
    ck_assert_int_eq(hp->n_vocab, 49152);
    ck_assert_int_eq(hp->n_ctx_train, 8192);
    ck_assert_int_eq(hp->n_embd, 576);
    ck_assert_int_eq(hp->n_layer, 30);
    ck_assert_int_eq(hp->n_ff, 1536);
    ck_assert_int_eq(hp->n_head, 9);
    ck_assert_int_eq(hp->n_head_kv, 3);
    ck_assert_int_eq(hp->head_dim, 64);
    ck_assert_int_eq(hp->n_rot, 64);
    ck_assert_float_eq_tol(hp->rms_eps, 1e-5f, 1e-9f);
    ck_assert_float_eq(hp->rope_base, 100000.0f);
    ck_assert_int_eq(hp->rope_type, RILL_MODEL_ROPE_NORM);
    ck_assert(hp->tied_output);

    const rill_model_weights_t *w = rill_model_weights(m);
    ck_assert_int_eq(w->n_layer, 30);
    ck_assert_int_eq(w->token_embd.dtype, RILL_DTYPE_Q8_0);
    ck_assert_int_eq(w->token_embd.ne0, 576);
    ck_assert_int_eq(w->token_embd.ne1, 49152);
    ck_assert_uint_eq(w->token_embd.row_bytes, 576 / 32 * 34);
    ck_assert_ptr_eq(w->output.data, w->token_embd.data);
    ck_assert_ptr_null(w->rope_freqs.data);
    ck_assert_int_eq(w->output_norm.dtype, RILL_DTYPE_F32);
    for (int l = 0; l < 30; l++) {
        const rill_layer_weights_t *L = &w->layers[l];
        ck_assert_int_eq(L->wq.dtype, RILL_DTYPE_Q4_1);
        ck_assert_int_eq(L->wq.ne0, 576);
        ck_assert_int_eq(L->wq.ne1, 576);
        ck_assert_int_eq(L->wk.ne1, 192);
        ck_assert_int_eq(L->wv.ne1, 192);
        ck_assert_int_eq(L->wo.ne0, 576);
        ck_assert_int_eq(L->ffn_gate.ne1, 1536);
        ck_assert_int_eq(L->ffn_down.ne0, 1536);
        ck_assert_int_eq(L->ffn_down.ne1, 576);
        ck_assert_ptr_null(L->bq.data);
        ck_assert_ptr_nonnull(L->attn_norm.data);
        ck_assert_ptr_nonnull(L->ffn_norm.data);
    }
    /* The reader stays reachable for the tokenizer, and the model is shareable. */
    const rill_gguf_t *g = rill_model_gguf(m);
    ck_assert_int_eq(rill_gguf_n_tensors(g), 272);
    rill_model_t *m2 = rill_model_retain(m);
    ck_assert_ptr_eq(m2, m);
    rill_model_destroy(&m);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(rill_gguf_n_tensors(rill_model_gguf(m2)), 272); /* still alive */
    rill_model_destroy(&m2);
    rill_model_destroy(&m2);
    ck_assert_ptr_null(rill_model_retain(NULL));
    ck_assert_int_eq(rill_model_load("/nonexistent.gguf", rill_model_default_params(), &m),
                     RILL_EIO);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(model_loads_tiny_llama_and_qwen2) {
    tiny_t t = tiny_default();
    size_t n;
    uint8_t *b = build_tiny(&t, &n);
    rill_model_t *m = NULL;
    ck_assert_int_eq(load_buf(b, n, rill_model_default_params(), &m), RILL_OK);
    const rill_hparams_t *hp = rill_model_hparams(m);
    ck_assert_int_eq(hp->head_dim, 16);
    ck_assert_int_eq(hp->n_vocab, 32);
    ck_assert_int_eq(hp->rope_type, RILL_MODEL_ROPE_NORM);
    ck_assert(hp->tied_output);
    ck_assert_int_eq(rill_model_weights(m)->layers[1].wk.ne1, 32);
    rill_model_destroy(&m);
    free(b);

    t.arch = "qwen2";
    t.bias = true;
    t.output = true;
    t.mat = RILL_DTYPE_Q6_K;
    t.n_embd = 256; /* K-quant rows are 256 wide */
    t.n_ff = 512;
    b = build_tiny(&t, &n);
    ck_assert_msg(load_buf(b, n, rill_model_default_params(), &m) == RILL_OK, "%s",
                  rill_last_error(RILL_OK));
    hp = rill_model_hparams(m);
    ck_assert_int_eq(hp->arch, RILL_ARCH_QWEN2);
    ck_assert_int_eq(hp->rope_type, RILL_MODEL_ROPE_NEOX);
    ck_assert_float_eq(hp->rope_base, 1e6f);
    ck_assert(!hp->tied_output);
    const rill_model_weights_t *w = rill_model_weights(m);
    ck_assert_ptr_ne(w->output.data, w->token_embd.data);
    ck_assert_int_eq(w->output.dtype, RILL_DTYPE_Q6_K);
    ck_assert_int_eq(w->layers[0].bq.ne0, 256);
    ck_assert_int_eq(w->layers[0].bk.ne0, 128);
    ck_assert_ptr_nonnull(w->layers[1].bv.data);
    ck_assert_uint_eq(w->layers[0].ffn_down.row_bytes, 2 * 210);
    rill_model_destroy(&m);
    free(b);

    /* Biases are optional in llama, and bound when present. */
    t = tiny_default();
    t.bias = true;
    b = build_tiny(&t, &n);
    ck_assert_int_eq(load_buf(b, n, rill_model_default_params(), &m), RILL_OK);
    ck_assert_ptr_nonnull(rill_model_weights(m)->layers[0].bq.data);
    rill_model_destroy(&m);
    free(b);

    /* rope_freqs.weight is bound when present. */
    t = tiny_default();
    t.extra = "rope_freqs.weight";
    t.extra_len = 8; /* head_dim 16 / 2 */
    t.mat = RILL_DTYPE_F16;
    b = build_tiny(&t, &n);
    ck_assert_msg(load_buf(b, n, rill_model_default_params(), &m) == RILL_OK, "%s",
                  rill_last_error(RILL_OK));
    ck_assert_int_eq(rill_model_weights(m)->rope_freqs.ne0, 8);
    rill_model_destroy(&m);
    free(b);
}
END_TEST

START_TEST(model_unused_tensor_policy) {
    tiny_t t = tiny_default();
    t.extra = "blk.0.attn_q_norm.weight";
    ck_assert_int_eq(load_tiny(&t, &(rill_model_t *){ NULL }), RILL_EUNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EUNSUPPORTED), "blk.0.attn_q_norm.weight"));
    size_t n;
    uint8_t *b = build_tiny(&t, &n);
    rill_model_params_t p = rill_model_default_params();
    p.allow_unused_tensors = true;
    rill_model_t *m = NULL;
    test_log_t log = { .only = "blk.0.attn_q_norm.weight" };
    test_log_capture(&log);
    ck_assert_int_eq(load_buf(b, n, p, &m), RILL_OK);
    test_log_release();
    ck_assert_int_eq(log.n_level[RILL_LOG_WARN], 1);
    rill_model_destroy(&m);
    free(b);
}
END_TEST

static void kv_head_count_array(gw_t *w) {
    kv_head(w, "llama.attention.head_count", RILL_GGUF_ARRAY);
    put_u32(&w->kv, RILL_GGUF_U32);
    put_u64(&w->kv, 2);
    put_u32(&w->kv, 4);
    put_u32(&w->kv, 4);
}

static void kv_rope_linear(gw_t *w) {
    kv_str(w, "llama.rope.scaling.type", "linear");
    kv_f32(w, "llama.rope.scaling.factor", 4.0f);
}

static void kv_rope_none(gw_t *w) {
    kv_str(w, "llama.rope.scaling.type", "none");
    kv_f32(w, "llama.rope.scaling.factor", 4.0f);
}

static void kv_rope_dims(gw_t *w) {
    kv_u32(w, "llama.rope.dimension_count", 8);
}

static void kv_eps_string(gw_t *w) {
    kv_str(w, "llama.attention.layer_norm_rms_epsilon", "tiny");
}

static void kv_eps_negative(gw_t *w) {
    kv_f32(w, "llama.attention.layer_norm_rms_epsilon", -1.0f);
}

static void kv_huge_layers(gw_t *w) {
    kv_u32(w, "llama.block_count", 1000000000);
}

static void kv_zero_ff(gw_t *w) {
    kv_u32(w, "llama.feed_forward_length", 0);
}

START_TEST(model_load_errors) {
    static const struct {
        const char *what;
        rill_err_t want;
        const char *in_msg;
    } cases[] = {
        { "omit blk.1.ffn_down.weight", RILL_EFORMAT, "missing tensor blk.1.ffn_down.weight" },
        { "omit token_embd.weight", RILL_EFORMAT, "token_embd.weight" },
        { "omit output_norm.weight", RILL_EFORMAT, "output_norm.weight" },
        { "reshape blk.0.attn_k.weight", RILL_EFORMAT, "blk.0.attn_k.weight has shape [64, 16" },
        { "reshape blk.1.ffn_norm.weight", RILL_EFORMAT, "blk.1.ffn_norm.weight" },
        { "reshape token_embd.weight", RILL_EFORMAT, "token_embd.weight" },
        { "qwen2 without biases", RILL_EFORMAT, "missing tensor blk.0.attn_q.bias" },
        { "arch gpt2", RILL_EUNSUPPORTED, "gpt2" },
        { "heads 3", RILL_EFORMAT, "head_count" },
        { "kv heads 3", RILL_EFORMAT, "head_count_kv" },
        { "no embedding_length", RILL_EFORMAT, "missing required key llama.embedding_length" },
        { "no eps", RILL_EFORMAT, "layer_norm_rms_epsilon" },
        { "matrix type q8_1", RILL_EUNSUPPORTED, "q8_1" },
        { "norm type f16", RILL_EUNSUPPORTED, "blk.0.attn_norm.weight has type f16" },
        { "head_count array", RILL_EUNSUPPORTED, "per-layer" },
        { "rope scaling", RILL_EUNSUPPORTED, "RoPE scaling" },
        { "rope dims", RILL_EUNSUPPORTED, "rope.dimension_count" },
        { "eps string", RILL_EFORMAT, "not a float" },
        { "eps negative", RILL_EFORMAT, "positive" },
        { "huge block_count", RILL_EFORMAT, "block_count" },
        { "zero n_ff", RILL_EFORMAT, "feed_forward_length" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tiny_t t = tiny_default();
        const char *w = cases[i].what;
        if (strncmp(w, "omit ", 5) == 0) {
            t.omit = w + 5;
        } else if (strncmp(w, "reshape ", 8) == 0) {
            t.reshape = w + 8;
        } else if (strcmp(w, "qwen2 without biases") == 0) {
            t.arch = "qwen2";
        } else if (strcmp(w, "arch gpt2") == 0) {
            t.arch = "gpt2";
        } else if (strcmp(w, "heads 3") == 0) {
            t.n_head = 3;
            t.mat = RILL_DTYPE_F32; /* rows of 63 elements: no block type fits */
        } else if (strcmp(w, "kv heads 3") == 0) {
            t.n_head_kv = 3;
            t.mat = RILL_DTYPE_F32;
        } else if (strcmp(w, "no embedding_length") == 0) {
            t.omit_key = "embedding_length";
        } else if (strcmp(w, "no eps") == 0) {
            t.omit_key = "attention.layer_norm_rms_epsilon";
        } else if (strcmp(w, "matrix type q8_1") == 0) {
            t.mat = RILL_DTYPE_Q8_1;
        } else if (strcmp(w, "norm type f16") == 0) {
            t.norm = RILL_DTYPE_F16;
        } else if (strcmp(w, "head_count array") == 0) {
            t.omit_key = "attention.head_count";
            t.more_kv = kv_head_count_array;
        } else if (strcmp(w, "rope scaling") == 0) {
            t.more_kv = kv_rope_linear;
        } else if (strcmp(w, "rope dims") == 0) {
            t.more_kv = kv_rope_dims;
        } else if (strcmp(w, "eps string") == 0) {
            t.omit_key = "attention.layer_norm_rms_epsilon";
            t.more_kv = kv_eps_string;
        } else if (strcmp(w, "eps negative") == 0) {
            t.omit_key = "attention.layer_norm_rms_epsilon";
            t.more_kv = kv_eps_negative;
        } else if (strcmp(w, "huge block_count") == 0) {
            t.omit_key = "block_count";
            t.more_kv = kv_huge_layers;
        } else if (strcmp(w, "zero n_ff") == 0) {
            t.omit_key = "feed_forward_length";
            t.more_kv = kv_zero_ff;
        }
        rill_model_t *m = NULL;
        rill_err_t e = load_tiny(&t, &m);
        ck_assert_msg(e == cases[i].want, "%s: got %s (%s)", w, rill_err_name(e),
                      rill_last_error(RILL_OK));
        ck_assert_msg(strstr(rill_last_error(RILL_OK), cases[i].in_msg) != NULL,
                      "%s: message '%s' lacks '%s'", w, rill_last_error(RILL_OK), cases[i].in_msg);
    }
    /* Scaling type "none" with a factor is no scaling. */
    tiny_t t = tiny_default();
    t.more_kv = kv_rope_none;
    ck_assert_int_eq(load_tiny(&t, &(rill_model_t *){ NULL }), RILL_OK);
    /* A file without general.architecture, and bad arguments. */
    gw_t w;
    gw_init(&w);
    size_t n;
    uint8_t *b = gw_finish(&w, &n);
    rill_model_t *m = NULL;
    ck_assert_int_eq(load_buf(b, n, rill_model_default_params(), &m), RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFORMAT), "general.architecture"));
    free(b);
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_model_load_gguf(&g, rill_model_default_params(), &m), RILL_EINVAL);
    ck_assert_int_eq(rill_model_load_gguf(NULL, rill_model_default_params(), &m), RILL_EINVAL);
    ck_assert_int_eq(rill_model_load(NULL, rill_model_default_params(), &m), RILL_EINVAL);
    ck_assert_ptr_null(rill_model_hparams(NULL));
    ck_assert_str_eq(rill_arch_name(RILL_ARCH_QWEN2), "qwen2");
    ck_assert_str_eq(rill_arch_name((rill_arch_t)9), "?");
}
END_TEST

/* ---- whisper ----------------------------------------------------------------------------------
 * A tiny synthetic whisper GGUF in tools/whisper_to_gguf.py's layout (M = 4 mel bins, 4 audio
 * positions, width 8 with 2 heads, FFN 32, one encoder and one decoder layer, 6 text positions,
 * 16 tokens), with knobs to break it one way at a time. */

typedef struct wtiny {
    const char *omit;      /* tensor not written */
    const char *reshape;   /* tensor written with its last dimension halved */
    const char *f16;       /* tensor written as F16 (a vector that must be F32) */
    const char *q8;        /* tensor written as Q8_0 (a matrix type whisper does not take) */
    const char *omit_key;  /* key not written */
    const char *extra;     /* an extra tensor */
    bool multilingual;     /* lang ids/codes written (1 language) */
    int n_codes;           /* lang codes written (multilingual: default 1) */
    int sot;               /* whisper.token.sot (default 10) */
    int suppress0;         /* first entry of whisper.suppress_tokens (default 1) */
    uint32_t n_text_layer; /* default 1 */
    int state;             /* n_text_state (default 8) */
} wtiny_t;

static void kv_bool(gw_t *w, const char *key, bool v) {
    const uint8_t x = v ? 1 : 0;
    kv_raw(w, key, RILL_GGUF_BOOL, &x, 1);
}

static void kv_i32s(gw_t *w, const char *key, uint32_t et, const int32_t *v, int n) {
    kv_head(w, key, RILL_GGUF_ARRAY);
    put_u32(&w->kv, et);
    put_u64(&w->kv, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        put_u32(&w->kv, (uint32_t)v[i]);
    }
}

static void kv_strs(gw_t *w, const char *key, const char *const *v, int n) {
    kv_head(w, key, RILL_GGUF_ARRAY);
    put_u32(&w->kv, RILL_GGUF_STRING);
    put_u64(&w->kv, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        put_str(&w->kv, v[i]);
    }
}

static void wt_u32(gw_t *w, const wtiny_t *t, const char *key, uint32_t v) {
    if (t->omit_key == NULL || strcmp(t->omit_key, key) != 0) {
        kv_u32(w, key, v);
    }
}

static void wt_tensor(gw_t *w, const wtiny_t *t, const char *name, int n_dims, int64_t ne0,
                      int64_t ne1, int64_t ne2, uint32_t type) {
    if (t->omit != NULL && strcmp(t->omit, name) == 0) {
        return;
    }
    int64_t ne[3] = { ne0, ne1, ne2 };
    if (t->reshape != NULL && strcmp(t->reshape, name) == 0) {
        ne[n_dims - 1] /= 2;
    }
    if (t->f16 != NULL && strcmp(t->f16, name) == 0) {
        type = RILL_DTYPE_F16;
    }
    if (t->q8 != NULL && strcmp(t->q8, name) == 0) {
        type = RILL_DTYPE_Q8_0;
    }
    tensor(w, name, n_dims, ne, type, AUTO_OFFSET);
}

static void wt_linear(gw_t *w, const wtiny_t *t, const char *prefix, int64_t in, int64_t out) {
    char n[128];
    snprintf(n, sizeof n, "%s/weight", prefix);
    wt_tensor(w, t, n, 2, in, out, 1, RILL_DTYPE_F16);
    snprintf(n, sizeof n, "%s/bias", prefix);
    wt_tensor(w, t, n, 1, out, 1, 1, RILL_DTYPE_F32);
}

static void wt_ln(gw_t *w, const wtiny_t *t, const char *prefix, int64_t d) {
    char n[128];
    snprintf(n, sizeof n, "%s/gamma", prefix);
    wt_tensor(w, t, n, 1, d, 1, 1, RILL_DTYPE_F32);
    snprintf(n, sizeof n, "%s/beta", prefix);
    wt_tensor(w, t, n, 1, d, 1, 1, RILL_DTYPE_F32);
}

static uint8_t *build_whisper(const wtiny_t *t, size_t *len) {
    gw_t w;
    gw_init(&w);
    const int64_t M = 4, Ta = 4, d = 8, F = 32, Tt = 6, V = 16;
    const int64_t dt = t->state > 0 ? t->state : d;
    const uint32_t n_dec = t->n_text_layer > 0 ? t->n_text_layer : 1;
    kv_str(&w, "general.architecture", "whisper");
    wt_u32(&w, t, "whisper.n_mels", (uint32_t)M);
    wt_u32(&w, t, "whisper.n_audio_ctx", (uint32_t)Ta);
    wt_u32(&w, t, "whisper.n_audio_state", (uint32_t)d);
    wt_u32(&w, t, "whisper.n_audio_head", 2);
    wt_u32(&w, t, "whisper.n_audio_layer", 1);
    wt_u32(&w, t, "whisper.n_text_ctx", (uint32_t)Tt);
    wt_u32(&w, t, "whisper.n_text_state", (uint32_t)dt);
    wt_u32(&w, t, "whisper.n_text_head", 2);
    wt_u32(&w, t, "whisper.n_text_layer", n_dec);
    wt_u32(&w, t, "whisper.n_vocab", (uint32_t)V);
    if (t->omit_key == NULL || strcmp(t->omit_key, "whisper.multilingual") != 0) {
        kv_bool(&w, "whisper.multilingual", t->multilingual);
    }
    if (t->omit_key == NULL || strcmp(t->omit_key, "whisper.layer_norm_epsilon") != 0) {
        kv_f32(&w, "whisper.layer_norm_epsilon", 1e-5f);
    }
    wt_u32(&w, t, "whisper.token.sot", (uint32_t)(t->sot != 0 ? t->sot : 10));
    wt_u32(&w, t, "whisper.token.eot", 11);
    wt_u32(&w, t, "whisper.token.transcribe", 12);
    wt_u32(&w, t, "whisper.token.translate", 13);
    wt_u32(&w, t, "whisper.token.no_timestamps", 14);
    wt_u32(&w, t, "whisper.token.no_speech", 15);
    wt_u32(&w, t, "whisper.token.prev", 9);
    wt_u32(&w, t, "whisper.token.timestamp_begin", 8);
    const int32_t sup[2] = { t->suppress0 != 0 ? t->suppress0 : 1, 2 }, bsup[1] = { 11 };
    if (t->omit_key == NULL || strcmp(t->omit_key, "whisper.suppress_tokens") != 0) {
        kv_i32s(&w, "whisper.suppress_tokens", RILL_GGUF_I32, sup, 2);
    }
    kv_i32s(&w, "whisper.begin_suppress_tokens", RILL_GGUF_I32, bsup, 1);
    if (t->multilingual) {
        const int32_t ids[2] = { 7, 6 };
        const char *const codes[2] = { "en", "de" };
        kv_i32s(&w, "whisper.lang_ids", RILL_GGUF_U32, ids, 1);
        kv_strs(&w, "whisper.lang_codes", codes, t->n_codes > 0 ? t->n_codes : 1);
    }
    kv_tokens(&w, (int)V);
    wt_tensor(&w, t, "encoder/conv1/weight", 3, 3, M, d, RILL_DTYPE_F16);
    wt_tensor(&w, t, "encoder/conv1/bias", 1, d, 1, 1, RILL_DTYPE_F32);
    wt_tensor(&w, t, "encoder/conv2/weight", 3, 3, d, d, RILL_DTYPE_F16);
    wt_tensor(&w, t, "encoder/conv2/bias", 1, d, 1, 1, RILL_DTYPE_F32);
    wt_tensor(&w, t, "encoder/position_encodings/encodings", 2, d, Ta, 1, RILL_DTYPE_F32);
    wt_ln(&w, t, "encoder/layer_0/self_attention/layer_norm", d);
    wt_linear(&w, t, "encoder/layer_0/self_attention/linear_0", d, 3 * d);
    wt_linear(&w, t, "encoder/layer_0/self_attention/linear_1", d, d);
    wt_ln(&w, t, "encoder/layer_0/ffn/layer_norm", d);
    wt_linear(&w, t, "encoder/layer_0/ffn/linear_0", d, F);
    wt_linear(&w, t, "encoder/layer_0/ffn/linear_1", F, d);
    wt_ln(&w, t, "encoder/layer_norm", d);
    wt_tensor(&w, t, "decoder/embeddings/weight", 2, dt, V, 1, RILL_DTYPE_F16);
    wt_tensor(&w, t, "decoder/position_encodings/encodings", 2, dt, Tt, 1, RILL_DTYPE_F32);
    for (uint32_t l = 0; l < n_dec && l < 4; l++) {
        char p[128];
#define P_(s) (snprintf(p, sizeof p, "decoder/layer_%u/" s, l), p)
        wt_ln(&w, t, P_("self_attention/layer_norm"), dt);
        wt_linear(&w, t, P_("self_attention/linear_0"), dt, 3 * dt);
        wt_linear(&w, t, P_("self_attention/linear_1"), dt, dt);
        wt_ln(&w, t, P_("attention/layer_norm"), dt);
        wt_linear(&w, t, P_("attention/linear_0"), dt, dt);
        wt_linear(&w, t, P_("attention/linear_1"), d, 2 * dt);
        wt_linear(&w, t, P_("attention/linear_2"), dt, dt);
        wt_ln(&w, t, P_("ffn/layer_norm"), dt);
        wt_linear(&w, t, P_("ffn/linear_0"), dt, F);
        wt_linear(&w, t, P_("ffn/linear_1"), F, dt);
#undef P_
    }
    wt_ln(&w, t, "decoder/layer_norm", dt);
    wt_tensor(&w, t, "whisper/mel_filters", 2, 201, M, 1, RILL_DTYPE_F32);
    if (t->extra != NULL) {
        wt_tensor(&w, t, t->extra, 1, d, 1, 1, RILL_DTYPE_F32);
    }
    return gw_finish(&w, len);
}

/* Loads a synthetic whisper file from memory. The model borrows the buffer: with keep, the
 * caller gets it in *keep and frees it after destroying the model; without, it is freed here (for
 * loads expected to fail; a model that loaded anyway is destroyed first). */
static rill_err_t load_whisper_keep(const wtiny_t *t, rill_model_t **m, uint8_t **keep) {
    size_t n;
    uint8_t *b = build_whisper(t, &n);
    int64_t before = live();
    rill_err_t e = load_buf(b, n, rill_model_default_params(), m);
    if (e != RILL_OK) {
        ck_assert_int_eq(live(), before);
    }
    if (keep != NULL) {
        *keep = b;
    } else {
        rill_model_destroy(m);
        free(b);
    }
    return e;
}

static rill_err_t load_whisper(const wtiny_t *t, rill_model_t **m) {
    return load_whisper_keep(t, m, NULL);
}

START_TEST(model_loads_tiny_whisper) {
    wtiny_t t = { 0 };
    rill_model_t *m = NULL;
    uint8_t *keep = NULL;
    ck_assert_int_eq(load_whisper_keep(&t, &m, &keep), RILL_OK);
    const rill_hparams_t *hp = rill_model_hparams(m);
    ck_assert_int_eq(hp->arch, RILL_ARCH_WHISPER);
    ck_assert_str_eq(rill_arch_name(hp->arch), "whisper");
    /* the generic hparams describe the text decoder */
    ck_assert_int_eq(hp->n_vocab, 16);
    ck_assert_int_eq(hp->n_ctx_train, 6);
    ck_assert_int_eq(hp->n_embd, 8);
    ck_assert_int_eq(hp->n_layer, 1);
    ck_assert_int_eq(hp->n_head, 2);
    ck_assert_int_eq(hp->n_head_kv, 2);
    ck_assert_int_eq(hp->head_dim, 4);
    ck_assert_int_eq(hp->n_ff, 32);
    ck_assert(hp->tied_output);
    ck_assert_int_eq(rill_model_weights(m)->n_layer, 0);
    ck_assert_ptr_null(rill_model_weights(m)->token_embd.data);
    const rill_whisper_hparams_t *wh = rill_model_whisper_hparams(m);
    ck_assert_ptr_nonnull(wh);
    ck_assert_int_eq(wh->n_mels, 4);
    ck_assert_int_eq(wh->n_audio_ctx, 4);
    ck_assert_int_eq(wh->n_audio_ff, 32);
    ck_assert_int_eq(wh->n_text_ff, 32);
    ck_assert(!wh->multilingual);
    ck_assert_int_eq(wh->n_langs, 0);
    ck_assert_int_eq(wh->tok_sot, 10);
    ck_assert_int_eq(wh->tok_eot, 11);
    ck_assert_int_eq(wh->tok_timestamp_begin, 8);
    ck_assert_int_eq(wh->n_suppress, 2);
    ck_assert_int_eq(wh->suppress[0], 1);
    ck_assert_int_eq(wh->n_begin_suppress, 1);
    ck_assert_int_eq(wh->begin_suppress[0], 11);
    ck_assert_float_eq(wh->eps, 1e-5f);
    /* the conv weight as an im2col matrix, the fused projections as row views */
    const rill_whisper_weights_t *ww = rill_model_whisper_weights(m);
    ck_assert_int_eq(ww->conv1_w.ne0, 12);
    ck_assert_int_eq(ww->conv1_w.ne1, 8);
    ck_assert_int_eq(ww->conv2_w.ne0, 24);
    ck_assert_int_eq(ww->mel_filters.ne0, 201);
    ck_assert_int_eq(ww->mel_filters.ne1, 4);
    const rill_whisper_attn_weights_t *sa = &ww->enc_layers[0].attn;
    ck_assert_int_eq(sa->wq.ne1, 8);
    ck_assert_ptr_eq((const char *)sa->wk.data, (const char *)sa->wq.data + 8 * sa->wq.row_bytes);
    ck_assert_ptr_eq((const char *)sa->wv.data, (const char *)sa->wq.data + 16 * sa->wq.row_bytes);
    ck_assert_ptr_eq((const float *)sa->bv.data, (const float *)sa->bq.data + 16);
    const rill_whisper_attn_weights_t *ca = &ww->dec_layers[0].cross_attn;
    ck_assert_int_eq(ca->wk.ne0, 8);
    ck_assert_ptr_eq((const char *)ca->wv.data, (const char *)ca->wk.data + 8 * ca->wk.row_bytes);
    ck_assert_ptr_null(rill_model_whisper_hparams(NULL));
    rill_model_destroy(&m);
    free(keep);
    /* llama models have no whisper part */
    tiny_t lt = tiny_default();
    size_t n;
    uint8_t *b = build_tiny(&lt, &n);
    ck_assert_int_eq(load_buf(b, n, rill_model_default_params(), &m), RILL_OK);
    ck_assert_ptr_null(rill_model_whisper_hparams(m));
    ck_assert_ptr_null(rill_model_whisper_weights(m));
    rill_model_destroy(&m);
    free(b);
    /* a multilingual one */
    t.multilingual = true;
    ck_assert_int_eq(load_whisper_keep(&t, &m, &keep), RILL_OK);
    wh = rill_model_whisper_hparams(m);
    ck_assert(wh->multilingual);
    ck_assert_int_eq(wh->n_langs, 1);
    ck_assert_int_eq(wh->lang_ids[0], 7);
    ck_assert(rill_gguf_str_eq(wh->lang_codes[0], "en"));
    rill_model_destroy(&m);
    free(keep);
}
END_TEST

START_TEST(model_whisper_load_errors) {
    static const struct {
        const char *what;
        rill_err_t want;
        const char *in_msg;
    } cases[] = {
        { "omit decoder/layer_0/attention/linear_1/weight", RILL_EFORMAT,
          "missing tensor decoder/layer_0/attention/linear_1/weight" },
        { "omit encoder/conv2/weight", RILL_EFORMAT, "missing tensor encoder/conv2/weight" },
        { "omit whisper/mel_filters", RILL_EFORMAT, "whisper/mel_filters" },
        { "omit encoder/layer_0/ffn/linear_0/weight", RILL_EFORMAT,
          "encoder/layer_0/ffn/linear_0/weight" },
        { "reshape encoder/conv1/weight", RILL_EFORMAT,
          "encoder/conv1/weight has shape [3, 4, 4, 1], expected [3, 4, 8]" },
        { "reshape encoder/layer_0/self_attention/linear_0/weight", RILL_EFORMAT,
          "self_attention/linear_0/weight has shape [8, 12" },
        { "reshape decoder/position_encodings/encodings", RILL_EFORMAT, "position_encodings" },
        { "reshape decoder/layer_0/ffn/linear_1/bias", RILL_EFORMAT, "ffn/linear_1/bias" },
        { "f16 encoder/layer_norm/gamma", RILL_EUNSUPPORTED, "needs F32" },
        { "q8 decoder/layer_0/ffn/linear_1/weight", RILL_EUNSUPPORTED, "F32, F16 or BF16" },
        { "key whisper.n_mels", RILL_EFORMAT, "missing required key whisper.n_mels" },
        { "key whisper.token.no_speech", RILL_EFORMAT, "whisper.token.no_speech" },
        { "key whisper.multilingual", RILL_EFORMAT, "whisper.multilingual" },
        { "key whisper.layer_norm_epsilon", RILL_EFORMAT, "layer_norm_epsilon" },
        { "key whisper.suppress_tokens", RILL_EFORMAT, "whisper.suppress_tokens" },
        { "sot outside the vocabulary", RILL_EFORMAT, "whisper.token.sot = 16" },
        { "suppress outside the vocabulary", RILL_EFORMAT, "whisper.suppress_tokens[0] = -3" },
        { "codes without ids", RILL_EFORMAT, "lang_codes has 2 entries" },
        { "huge layer count", RILL_EFORMAT, "need at least" },
        { "state not a multiple of heads", RILL_EFORMAT, "multiples of head counts" },
        { "extra tensor", RILL_EUNSUPPORTED, "encoder/extra is not used by architecture whisper" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        wtiny_t t = { 0 };
        const char *w = cases[i].what;
        if (strncmp(w, "omit ", 5) == 0) {
            t.omit = w + 5;
        } else if (strncmp(w, "reshape ", 8) == 0) {
            t.reshape = w + 8;
        } else if (strncmp(w, "f16 ", 4) == 0) {
            t.f16 = w + 4;
        } else if (strncmp(w, "q8 ", 3) == 0) {
            t.q8 = w + 3;
        } else if (strncmp(w, "key ", 4) == 0) {
            t.omit_key = w + 4;
        } else if (strcmp(w, "sot outside the vocabulary") == 0) {
            t.sot = 16;
        } else if (strcmp(w, "suppress outside the vocabulary") == 0) {
            t.suppress0 = -3;
        } else if (strcmp(w, "codes without ids") == 0) {
            t.multilingual = true;
            t.n_codes = 2;
        } else if (strcmp(w, "huge layer count") == 0) {
            t.n_text_layer = 100000;
        } else if (strcmp(w, "state not a multiple of heads") == 0) {
            t.state = 9;
        } else if (strcmp(w, "extra tensor") == 0) {
            t.extra = "encoder/extra";
        }
        rill_model_t *m = NULL;
        rill_err_t e = load_whisper(&t, &m);
        ck_assert_msg(e == cases[i].want, "%s: got %s (%s)", w, rill_err_name(e),
                      rill_last_error(RILL_OK));
        ck_assert_msg(strstr(rill_last_error(RILL_OK), cases[i].in_msg) != NULL,
                      "%s: message '%s' lacks '%s'", w, rill_last_error(RILL_OK), cases[i].in_msg);
        ck_assert_ptr_null(m);
    }
    /* allow_unused_tensors applies to whisper files too */
    wtiny_t t = { .extra = "encoder/extra" };
    size_t n;
    uint8_t *b = build_whisper(&t, &n);
    rill_model_params_t p = rill_model_default_params();
    p.allow_unused_tensors = true;
    rill_model_t *m = NULL;
    test_log_quiet();
    ck_assert_int_eq(load_buf(b, n, p, &m), RILL_OK);
    test_log_release();
    rill_model_destroy(&m);
    free(b);
    /* every truncation of the file is refused, leaking nothing */
    t = (wtiny_t){ 0 };
    b = build_whisper(&t, &n);
    int64_t before = live();
    for (size_t cut = 0; cut < n; cut += (cut < 2048 ? 1 : 97)) {
        rill_gguf_t *g = NULL;
        if (rill_gguf_open_memory(b, cut, &g) == RILL_OK) {
            ck_assert_int_ne(rill_model_load_gguf(&g, rill_model_default_params(), &m), RILL_OK);
            rill_gguf_destroy(&g);
        }
        ck_assert_ptr_null(m);
    }
    ck_assert_int_eq(live(), before);
    /* and every allocation failure */
    mem_ctx_t c = { b, n };
    fail_walk(op_load_memory, &c, 9);
    free(b);
}
END_TEST

/* ---- the fuzz corpus replays cleanly ---- */

START_TEST(fuzz_corpus_replays) {
    DIR *d = opendir(CORPUS_DIR);
    ck_assert_ptr_nonnull(d);
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s%s", CORPUS_DIR, e->d_name);
        size_t n = 0;
        uint8_t *b = test_read_file(path, &n); /* exactly n bytes: ASan sees any overread */
        int64_t before = live();
        rill_gguf_t *g = NULL;
        rill_err_t err = rill_gguf_open_memory(b, n, &g);
        /* seed-*: valid files (seed-tiny-*: loadable models); near-*: each breaks one rule of
         * the reader or the loader; anything else (fuzzer regressions): must not crash. */
        bool seed = strncmp(e->d_name, "seed-", 5) == 0;
        bool near = strncmp(e->d_name, "near-", 5) == 0;
        if (seed) {
            ck_assert_msg(err == RILL_OK, "%s: %s", e->d_name, rill_last_error(RILL_OK));
        }
        rill_err_t le = err;
        if (err == RILL_OK) {
            for (int64_t i = 0; i < rill_gguf_n_tensors(g); i++) {
                const rill_gguf_tensor_t *t = rill_gguf_tensor(g, i);
                if (t->nbytes > 0) {
                    volatile uint8_t x = ((const uint8_t *)t->data)[t->nbytes - 1];
                    (void)x;
                }
            }
            rill_model_t *m = NULL;
            le = rill_model_load_gguf(&g, rill_model_default_params(), &m);
            if (strncmp(e->d_name, "seed-tiny", 9) == 0) {
                ck_assert_msg(le == RILL_OK, "%s: %s", e->d_name, rill_last_error(RILL_OK));
            }
            rill_model_destroy(&m);
            rill_gguf_destroy(&g);
        }
        if (near) {
            ck_assert_msg(le != RILL_OK, "%s was accepted", e->d_name);
        }
        ck_assert_int_eq(live(), before);
        free(b);
        files++;
    }
    closedir(d);
    ck_assert_int_ge(files, 10);
}
END_TEST

/* ---- sampler ---- */

static rill_sampler_params_t plain(void) {
    rill_sampler_params_t p = rill_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_repeat = 1.0f;
    return p;
}

static void probs_of(rill_sampler_params_t p, const float *logits, int n, float *probs) {
    rill_sampler_t *s = NULL;
    ck_assert_int_eq(rill_sampler_new(n, p, &s), RILL_OK);
    ck_assert_int_eq(rill_sampler_probs(s, logits, probs), RILL_OK);
    rill_sampler_destroy(&s);
}

START_TEST(sampler_greedy_and_ties) {
    const float l[5] = { 1, 3, -2, 3, 0.5f };
    rill_sampler_params_t p = plain();
    p.temp = 0;
    rill_sampler_t *s = NULL;
    ck_assert_int_eq(rill_sampler_new(5, p, &s), RILL_OK);
    int32_t tok = -1;
    for (int i = 0; i < 10; i++) {
        ck_assert_int_eq(rill_sampler_sample(s, l, &tok), RILL_OK);
        ck_assert_int_eq(tok, 1); /* the lower id of the two maxima */
    }
    /* the pure arg-max agrees: lowest id of the maxima, the last one, one entry, none */
    ck_assert_int_eq(rill_sampler_argmax(l, 5), 1);
    ck_assert_int_eq(rill_sampler_argmax(l, 1), 0);
    ck_assert_int_eq(rill_sampler_argmax(l, 0), 0);
    const float rise[4] = { -INFINITY, -1, 0, 7 };
    ck_assert_int_eq(rill_sampler_argmax(rise, 4), 3);
    ck_assert_int_eq(rill_sampler_argmax(rise, 3), 2);
    float pr[5];
    ck_assert_int_eq(rill_sampler_probs(s, l, pr), RILL_OK);
    ck_assert_float_eq(pr[1], 1.0f);
    ck_assert_float_eq(pr[3], 0.0f);
    /* NaN and infinities. */
    const float nan_l[3] = { NAN, -INFINITY, NAN };
    rill_sampler_destroy(&s);
    p = plain();
    ck_assert_int_eq(rill_sampler_new(3, p, &s), RILL_OK);
    ck_assert_int_eq(rill_sampler_sample(s, nan_l, &tok), RILL_OK);
    ck_assert_int_eq(tok, 0);
    const float inf_l[3] = { 0, INFINITY, 5 };
    ck_assert_int_eq(rill_sampler_sample(s, inf_l, &tok), RILL_OK);
    ck_assert_int_eq(tok, 1);
    ck_assert_int_eq(rill_sampler_sample(s, NULL, &tok), RILL_EINVAL);
    ck_assert_int_eq(rill_sampler_sample(NULL, l, &tok), RILL_EINVAL);
    rill_sampler_destroy(&s);
    ck_assert_ptr_null(s);
    rill_sampler_destroy(&s);
}
END_TEST

START_TEST(sampler_is_deterministic_per_seed) {
    enum { V = 1000, N = 200 };
    static float l[V];
    for (int i = 0; i < V; i++) {
        l[i] = (float)sin(i * 0.37) * 3.0f;
    }
    int32_t a[N], b[N], c[N];
    rill_sampler_params_t p = rill_sampler_default_params();
    p.seed = 42;
    rill_sampler_t *s = NULL;
    ck_assert_int_eq(rill_sampler_new(V, p, &s), RILL_OK);
    /* No allocation per token. */
    int64_t calls = rill_mem_calls();
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(rill_sampler_sample(s, l, &a[i]), RILL_OK);
        rill_sampler_accept(s, a[i]);
    }
    ck_assert_int_eq(rill_mem_calls(), calls);
    rill_sampler_reset(s, 42);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(rill_sampler_sample(s, l, &b[i]), RILL_OK);
    }
    rill_sampler_reset(s, 43);
    int same = 0;
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(rill_sampler_sample(s, l, &c[i]), RILL_OK);
        same += c[i] == a[i];
    }
    ck_assert_mem_eq(a, b, sizeof a);
    ck_assert_int_lt(same, N / 2);
    /* The exact sequence is part of the contract (same on every platform). */
    ck_assert_int_eq(rill_sampler_params(s).seed, 42);
    rill_sampler_destroy(&s);
}
END_TEST

START_TEST(sampler_filters) {
    /* Probabilities 0.5, 0.3, 0.15, 0.05 (at temperature 1). */
    const float l[4] = { logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f) };
    float pr[4];
    rill_sampler_params_t p = plain();
    probs_of(p, l, 4, pr);
    ck_assert_float_eq_tol(pr[0], 0.5f, 1e-6f);
    ck_assert_float_eq_tol(pr[3], 0.05f, 1e-6f);

    p = plain(); /* top-k 2: renormalised over the two best */
    p.top_k = 2;
    probs_of(p, l, 4, pr);
    ck_assert_float_eq_tol(pr[0], 0.625f, 1e-6f);
    ck_assert_float_eq_tol(pr[1], 0.375f, 1e-6f);
    ck_assert_float_eq(pr[2], 0.0f);

    p = plain(); /* top-p 0.7: 0.5 < 0.7 <= 0.8, so two tokens */
    p.top_p = 0.7f;
    probs_of(p, l, 4, pr);
    ck_assert_float_eq_tol(pr[0], 0.625f, 1e-6f);
    ck_assert_float_eq(pr[2], 0.0f);
    p.top_p = 0.81f;
    probs_of(p, l, 4, pr);
    ck_assert_float_gt(pr[2], 0.0f);
    ck_assert_float_eq(pr[3], 0.0f);

    p = plain(); /* min-p 0.2: keep p >= 0.1 */
    p.min_p = 0.2f;
    probs_of(p, l, 4, pr);
    ck_assert_float_eq_tol(pr[2], 0.15f / 0.95f, 1e-6f);
    ck_assert_float_eq(pr[3], 0.0f);
    p.min_p = 2.0f; /* nothing passes: the arg-max alone */
    probs_of(p, l, 4, pr);
    ck_assert_float_eq(pr[0], 1.0f);

    p = plain(); /* temperature 2: p ~ sqrt(p) */
    p.temp = 2.0f;
    probs_of(p, l, 4, pr);
    float z = sqrtf(0.5f) + sqrtf(0.3f) + sqrtf(0.15f) + sqrtf(0.05f);
    ck_assert_float_eq_tol(pr[1], sqrtf(0.3f) / z, 1e-6f);

    /* Order: top-k before top-p. After top-k 2 the survivors are 0.4/0.7 = 0.571 and 0.429, so
     * top-p 0.55 keeps one; on the full distribution it would keep two. */
    const float m[4] = { logf(0.4f), logf(0.3f), logf(0.2f), logf(0.1f) };
    p = plain();
    p.top_k = 2;
    p.top_p = 0.55f;
    probs_of(p, m, 4, pr);
    ck_assert_float_eq(pr[0], 1.0f);
    /* min-p compares with the untempered distribution: at temp 5 a token at 0.1/0.4 = 0.25 of
     * the max passes min-p 0.3 only if temperature came first. */
    p = plain();
    p.min_p = 0.3f;
    p.temp = 5.0f;
    probs_of(p, m, 4, pr);
    ck_assert_float_eq(pr[3], 0.0f);
    ck_assert_float_gt(pr[2], 0.0f);
}
END_TEST

START_TEST(sampler_repetition_penalty) {
    const float l[3] = { 2.0f, -2.0f, 1.5f };
    rill_sampler_params_t p = plain();
    p.penalty_repeat = 2.0f;
    p.penalty_last_n = 2;
    rill_sampler_t *s = NULL;
    ck_assert_int_eq(rill_sampler_new(3, p, &s), RILL_OK);
    rill_sampler_accept(s, 0);
    rill_sampler_accept(s, 1);
    rill_sampler_accept(s, 1);  /* 0 leaves the window of 2 */
    rill_sampler_accept(s, 99); /* ignored */
    float pr[3];
    ck_assert_int_eq(rill_sampler_probs(s, l, pr), RILL_OK);
    /* Logits seen: 2 (token 0 left the window), -2 * 2 = -4 (counted once), 1.5. */
    double z = exp(2.0) + exp(-4.0) + exp(1.5);
    ck_assert_float_eq_tol(pr[0], (float)(exp(2.0) / z), 1e-6f);
    ck_assert_float_eq_tol(pr[1], (float)(exp(-4.0) / z), 1e-7f);
    rill_sampler_accept(s, 0);
    rill_sampler_accept(s, 2);
    ck_assert_int_eq(rill_sampler_probs(s, l, pr), RILL_OK);
    z = exp(1.0) + exp(-2.0) + exp(0.75);
    ck_assert_float_eq_tol(pr[0], (float)(exp(1.0) / z), 1e-6f);
    /* Greedy sees the penalties too: with token 0 in the window, 2 / 2 = 1 < 1.5. */
    rill_sampler_destroy(&s);
    p.temp = 0;
    ck_assert_int_eq(rill_sampler_new(3, p, &s), RILL_OK);
    rill_sampler_accept(s, 0);
    int32_t tok;
    ck_assert_int_eq(rill_sampler_sample(s, l, &tok), RILL_OK);
    ck_assert_int_eq(tok, 2);
    rill_sampler_reset(s, 1);
    ck_assert_int_eq(rill_sampler_sample(s, l, &tok), RILL_OK);
    ck_assert_int_eq(tok, 0);
    rill_sampler_destroy(&s);
}
END_TEST

START_TEST(sampler_distribution_matches) {
    /* Chi-square goodness of fit of 200000 draws from p = (0.1, 0.2, 0.3, 0.4): 3 degrees of
     * freedom, critical value 16.27 at p = 0.001. The seed makes the test deterministic. */
    enum { N = 200000 };
    const double want[4] = { 0.1, 0.2, 0.3, 0.4 };
    float l[4];
    for (int i = 0; i < 4; i++) {
        l[i] = (float)log(want[i]);
    }
    rill_sampler_t *s = NULL;
    ck_assert_int_eq(rill_sampler_new(4, plain(), &s), RILL_OK);
    int count[4] = { 0 };
    for (int i = 0; i < N; i++) {
        int32_t t;
        ck_assert_int_eq(rill_sampler_sample(s, l, &t), RILL_OK);
        ck_assert(t >= 0 && t < 4);
        count[t]++;
    }
    double chi2 = 0;
    for (int i = 0; i < 4; i++) {
        double e = want[i] * N;
        chi2 += (count[i] - e) * (count[i] - e) / e;
    }
    ck_assert_msg(chi2 < 16.27, "chi2 = %f", chi2);
    rill_sampler_destroy(&s);
}
END_TEST

static rill_err_t op_sampler_new(void *ctx) {
    (void)ctx;
    rill_sampler_t *s = NULL;
    rill_err_t e = rill_sampler_new(100, rill_sampler_default_params(), &s);
    rill_sampler_destroy(&s);
    return e;
}

START_TEST(sampler_bad_params_and_oom) {
    rill_sampler_t *s = (rill_sampler_t *)1;
    rill_sampler_params_t p = rill_sampler_default_params();
    ck_assert_int_eq(rill_sampler_new(0, p, &s), RILL_EINVAL);
    ck_assert_ptr_null(s);
    p.penalty_repeat = 0;
    ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    p = rill_sampler_default_params();
    p.temp = NAN;
    ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    p = rill_sampler_default_params();
    p.penalty_last_n = -1;
    ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    ck_assert_int_eq(rill_sampler_new(10, rill_sampler_default_params(), NULL), RILL_EINVAL);
    /* the predicate says the same as creation, for each rule */
    ck_assert(!rill_sampler_params_valid(&p));
    ck_assert(!rill_sampler_params_valid(NULL));
    p = rill_sampler_default_params();
    ck_assert(rill_sampler_params_valid(&p));
    p.temp = -1; /* greedy, not an error */
    ck_assert(rill_sampler_params_valid(&p));
    const float bad_f[] = { NAN, 0.0f, -1.0f, INFINITY };
    for (int i = 0; i < 4; i++) {
        p = rill_sampler_default_params();
        p.penalty_repeat = bad_f[i];
        ck_assert(!rill_sampler_params_valid(&p));
        ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    }
    p = rill_sampler_default_params();
    p.top_p = NAN;
    ck_assert(!rill_sampler_params_valid(&p));
    ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    p = rill_sampler_default_params();
    p.min_p = NAN;
    ck_assert(!rill_sampler_params_valid(&p));
    ck_assert_int_eq(rill_sampler_new(10, p, &s), RILL_EINVAL);
    fail_walk(op_sampler_new, NULL, 4);
    rill_sampler_params_t d = rill_sampler_default_params();
    ck_assert_float_eq(d.temp, 0.8f);
    ck_assert_int_eq(d.top_k, 40);
    ck_assert_float_eq(d.top_p, 0.95f);
    ck_assert_float_eq(d.min_p, 0.05f);
    ck_assert_int_eq(d.penalty_last_n, 64);
}
END_TEST

/* ---- chat templates ---- */

#define SMOL_SYSTEM "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
static const char smol_template[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" SMOL_SYSTEM "<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + "
    "message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

static void expect_render(const rill_chat_t *c, const rill_chat_msg_t *m, size_t n, bool gen,
                          const char *want) {
    char buf[1024];
    int64_t len = rill_chat_apply(c, m, n, gen, buf, sizeof buf);
    ck_assert_int_eq(len, (int64_t)strlen(want));
    ck_assert_str_eq(buf, want);
}

START_TEST(chat_chatml_smollm2) {
    rill_chat_t *c = NULL;
    ck_assert_int_eq(rill_chat_new(smol_template, strlen(smol_template), RILL_CHAT_AUTO, &c),
                     RILL_OK);
    ck_assert_int_eq(rill_chat_kind(c), RILL_CHAT_CHATML);
    ck_assert_str_eq(rill_chat_default_system(c), SMOL_SYSTEM);
    ck_assert_str_eq(rill_chat_end_of_turn(c), "<|im_end|>");
    const rill_chat_msg_t user[] = { { "user", "Hello" } };
    expect_render(c, user, 1, true,
                  "<|im_start|>system\n" SMOL_SYSTEM "<|im_end|>\n"
                  "<|im_start|>user\nHello<|im_end|>\n"
                  "<|im_start|>assistant\n");
    const rill_chat_msg_t conv[] = {
        { "system", "Be brief." }, { "user", "Hi" }, { "assistant", "Hello!" }, { "user", "2+2?" }
    };
    const rill_chat_msg_t bad_turn[] = { { "user", NULL } };
    expect_render(c, conv, 4, false,
                  "<|im_start|>system\nBe brief.<|im_end|>\n"
                  "<|im_start|>user\nHi<|im_end|>\n"
                  "<|im_start|>assistant\nHello!<|im_end|>\n"
                  "<|im_start|>user\n2+2?<|im_end|>\n");
    expect_render(c, NULL, 0, true, "<|im_start|>assistant\n");
    /* a turn continuing a conversation under way: no default system message */
    char turn[256];
    ck_assert_int_eq(rill_chat_apply_turns(c, user, 1, true, turn, sizeof turn),
                     (int64_t)strlen("<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"));
    ck_assert_str_eq(turn, "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    ck_assert_int_eq(rill_chat_apply_turns(c, conv, 1, false, turn, sizeof turn),
                     (int64_t)strlen("<|im_start|>system\nBe brief.<|im_end|>\n"));
    ck_assert_int_eq(rill_chat_apply_turns(c, bad_turn, 1, true, turn, sizeof turn), RILL_EINVAL);
    /* snprintf semantics: the length is always the full one, the output cut and terminated. */
    char small[8];
    int64_t len = rill_chat_apply(c, user, 1, true, small, sizeof small);
    ck_assert_int_gt(len, 100);
    ck_assert_str_eq(small, "<|im_st");
    ck_assert_int_eq(rill_chat_apply(c, user, 1, true, NULL, 0), len);
    ck_assert_int_eq(rill_chat_apply(c, NULL, 1, true, NULL, 0), RILL_EINVAL);
    const rill_chat_msg_t bad[] = { { NULL, "x" } };
    ck_assert_int_eq(rill_chat_apply(c, bad, 1, true, small, sizeof small), RILL_EINVAL);
    ck_assert_int_eq(rill_chat_apply(NULL, user, 1, true, small, sizeof small), RILL_EINVAL);
    rill_chat_destroy(&c);
    ck_assert_ptr_null(c);
    rill_chat_destroy(&c);

    /* The same from the model file itself. */
    if (!have_model(__func__)) {
        return;
    }
    rill_model_t *m = NULL;
    ck_assert_int_eq(rill_model_load(MODEL_PATH, rill_model_default_params(), &m), RILL_OK);
    ck_assert_int_eq(rill_chat_new_gguf(rill_model_gguf(m), RILL_CHAT_AUTO, &c), RILL_OK);
    expect_render(c, user, 1, true,
                  "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
                  "Hugging Face<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
                  "<|im_start|>assistant\n");
    rill_chat_destroy(&c);
    rill_model_destroy(&m);
}
END_TEST

START_TEST(chat_families_and_overrides) {
    rill_chat_t *c = NULL;
    /* Qwen2's template (from the shared vocabulary file): ChatML with its own default. */
    rill_gguf_t *g = NULL;
    ck_assert_int_eq(rill_gguf_open(VOCAB_DIR "ggml-vocab-qwen2.gguf", &g), RILL_OK);
    ck_assert_int_eq(rill_chat_new_gguf(g, RILL_CHAT_AUTO, &c), RILL_OK);
    ck_assert_str_eq(rill_chat_default_system(c), "You are a helpful assistant");
    rill_chat_destroy(&c);
    rill_gguf_destroy(&g);
    /* A file without a template: not found, unless a family is forced. */
    ck_assert_int_eq(rill_gguf_open(VOCAB_DIR "ggml-vocab-llama-spm.gguf", &g), RILL_OK);
    if (rill_gguf_find_key(g, "tokenizer.chat_template") < 0) {
        ck_assert_int_eq(rill_chat_new_gguf(g, RILL_CHAT_AUTO, &c), RILL_ENOTFOUND);
        ck_assert_ptr_null(c);
        ck_assert_int_eq(rill_chat_new_gguf(g, RILL_CHAT_CHATML, &c), RILL_OK);
        ck_assert_ptr_null(rill_chat_default_system(c));
        rill_chat_destroy(&c);
    }
    rill_gguf_destroy(&g);

    /* Llama 3: content trimmed, no default system. */
    static const char l3[] = "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' "
                             "+ m['content'] | trim + '<|eot_id|>' }}";
    ck_assert_int_eq(rill_chat_new(l3, strlen(l3), RILL_CHAT_AUTO, &c), RILL_OK);
    ck_assert_int_eq(rill_chat_kind(c), RILL_CHAT_LLAMA3);
    ck_assert_str_eq(rill_chat_end_of_turn(c), "<|eot_id|>");
    const rill_chat_msg_t m[] = { { "system", " Be brief.\n" }, { "user", "Hi" } };
    expect_render(c, m, 2, true,
                  "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                  "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                  "<|start_header_id|>assistant<|end_header_id|>\n\n");
    rill_chat_destroy(&c);

    /* Unknown templates are refused, and can be overridden. */
    static const char zephyr[] = "{% for m in messages %}<|user|>\n{{ m['content'] }}</s>";
    ck_assert_int_eq(rill_chat_new(zephyr, strlen(zephyr), RILL_CHAT_AUTO, &c), RILL_EUNSUPPORTED);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rill_chat_new(zephyr, strlen(zephyr), RILL_CHAT_CHATML, &c), RILL_OK);
    expect_render(c, m + 1, 1, true, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    rill_chat_destroy(&c);
    ck_assert_int_eq(rill_chat_new(NULL, 0, RILL_CHAT_AUTO, &c), RILL_EINVAL);
    ck_assert_int_eq(rill_chat_new(NULL, 0, (rill_chat_template_t)7, &c), RILL_EINVAL);
    ck_assert_int_eq(rill_chat_new_gguf(NULL, RILL_CHAT_AUTO, &c), RILL_EINVAL);

    /* Jinja escapes in the default system literal are decoded; an expression is not a default. */
    static const char esc[] =
        "{{ '<|im_start|>system\\nTabs\\there, \\'quoted\\' \\\\<|im_end|>' }}";
    ck_assert_int_eq(rill_chat_new(esc, strlen(esc), RILL_CHAT_AUTO, &c), RILL_OK);
    ck_assert_str_eq(rill_chat_default_system(c), "Tabs\there, 'quoted' \\");
    rill_chat_destroy(&c);
    static const char expr[] = "{{ '<|im_start|>system\\n' + messages[0]['content'] + "
                               "'<|im_end|>' }}";
    ck_assert_int_eq(rill_chat_new(expr, strlen(expr), RILL_CHAT_AUTO, &c), RILL_OK);
    ck_assert_ptr_null(rill_chat_default_system(c));
    rill_chat_destroy(&c);

    rill_chat_template_t t = RILL_CHAT_AUTO;
    ck_assert(rill_chat_template_from_name("llama3", &t));
    ck_assert_int_eq(t, RILL_CHAT_LLAMA3);
    ck_assert(!rill_chat_template_from_name("zephyr", &t));
    ck_assert_int_eq(t, RILL_CHAT_LLAMA3);
    ck_assert_str_eq(rill_chat_template_name(RILL_CHAT_CHATML), "chatml");
    ck_assert_str_eq(rill_chat_template_name((rill_chat_template_t)9), "?");
}
END_TEST

static rill_err_t op_chat_new(void *ctx) {
    (void)ctx;
    rill_chat_t *c = NULL;
    rill_err_t e = rill_chat_new(smol_template, strlen(smol_template), RILL_CHAT_AUTO, &c);
    ck_assert(e == RILL_OK || c == NULL);
    rill_chat_destroy(&c);
    return e;
}

START_TEST(chat_allocation_failures) {
    fail_walk(op_chat_new, NULL, 2);
}
END_TEST

static Suite *model_suite(void) {
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("gguf");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, gguf_reads_default_model);
    tcase_add_test(tc, gguf_reads_vocab_files);
    tcase_add_test(tc, gguf_open_file_errors);
    tcase_add_test(tc, gguf_truncated_default_model);
    tcase_add_test(tc, gguf_truncated_tiny_every_byte);
    tcase_add_test(tc, gguf_bad_headers);
    tcase_add_test(tc, gguf_bad_metadata);
    tcase_add_test(tc, gguf_getters_convert_and_check);
    tcase_add_test(tc, gguf_bad_tensors);
    tcase_add_test(tc, gguf_and_model_allocation_failures);
    tcase_add_test(tc, fuzz_corpus_replays);
    suite_add_tcase(s, tc);
    tc = tcase_create("loader");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, model_loads_default_model);
    tcase_add_test(tc, model_loads_tiny_llama_and_qwen2);
    tcase_add_test(tc, model_unused_tensor_policy);
    tcase_add_test(tc, model_load_errors);
    tcase_add_test(tc, model_loads_tiny_whisper);
    tcase_add_test(tc, model_whisper_load_errors);
    suite_add_tcase(s, tc);
    tc = tcase_create("sampler");
    tcase_add_test(tc, sampler_greedy_and_ties);
    tcase_add_test(tc, sampler_is_deterministic_per_seed);
    tcase_add_test(tc, sampler_filters);
    tcase_add_test(tc, sampler_repetition_penalty);
    tcase_add_test(tc, sampler_distribution_matches);
    tcase_add_test(tc, sampler_bad_params_and_oom);
    suite_add_tcase(s, tc);
    tc = tcase_create("chat");
    tcase_add_test(tc, chat_chatml_smollm2);
    tcase_add_test(tc, chat_families_and_overrides);
    tcase_add_test(tc, chat_allocation_failures);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    SRunner *sr = srunner_create(model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
