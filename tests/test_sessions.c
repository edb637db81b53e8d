/*
 * test_sessions.c - the sessions module: paged pool, append, fork / copy-on-write, rollback,
 * window eviction with re-based positions, query, text append, budget and allocation failures.
 *
 * The oracle is a plain re-prefill: a contiguous KV cache (identity page table) that evaluates a
 * branch's whole token list from position 0 with rill_forward_eval_sequence(). KV caches are F32
 * in the comparisons, so differences are float rounding only; tolerances are relative to the
 * largest |logit| of the reference row (scale):
 *   chunked appends, random operations, 1-layer eviction    max |d| <= 1e-4 * scale
 *   re-rotated layer-0 keys against fresh keys               max |d| <= 1e-4 * max |k|
 * Models: the tiny random-weight models of tests/data/models (tools/make_test_models.py); a
 * 1-layer variant is made in memory by patching block_count in a copy of the qwen2 F32 file and
 * loading it with allow_unused_tensors (layer 1's tensors are then ignored). Without the tiny
 * models the suite is skipped (exit 77).
 */
#include <check.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_quant.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "test_util.h"

#define QWEN  "rill-tiny-qwen2-F32.gguf"
#define LLAMA "rill-tiny-llama-F32.gguf"
#define MAXT  4096

/* The rig: a model, a backend, a forward pass, a session pool and a contiguous reference cache
 * of 256 positions (g->kv, g->pt) for the re-prefill oracle. */
typedef test_rig_t rig_t;

/* Loads model with block_count patched to n_layer in an in-memory copy (loaded with
 * allow_unused_tensors: the layers past n_layer are ignored); *file is the copy, which the
 * model reads from (the rig frees it at close). */
static rill_model_t *load_patched(const char *model, int n_layer, void **file) {
    char path[TEST_PATH_MAX];
    size_t len = 0;
    unsigned char *buf = test_read_file(test_model_path(path, sizeof path, model), &len);
    const char *arch = strncmp(model, "rill-tiny-qwen2", 15) == 0 ? "qwen2" : "llama";
    char key[64];
    snprintf(key, sizeof key, "%s.block_count", arch);
    size_t kl = strlen(key);
    bool patched = false;
    for (size_t i = 0; i + kl + 8 <= len && !patched; i++) {
        if (memcmp(buf + i, key, kl) == 0) {
            uint32_t type, v = (uint32_t)n_layer;
            memcpy(&type, buf + i + kl, 4);
            ck_assert_uint_eq(type, 4); /* GGUF UINT32 */
            memcpy(buf + i + kl + 4, &v, 4);
            patched = true;
        }
    }
    ck_assert(patched);
    rill_gguf_t *gg = NULL;
    ck_assert_int_eq(rill_gguf_open_memory(buf, len, &gg), RILL_OK);
    rill_model_params_t mp = rill_model_default_params();
    mp.allow_unused_tensors = true;
    rill_model_t *m = NULL;
    test_log_quiet(); /* one warning per ignored tensor */
    ck_assert_int_eq(rill_model_load_gguf(&gg, mp, &m), RILL_OK);
    test_log_release();
    ck_assert_int_eq(rill_model_hparams(m)->n_layer, n_layer);
    *file = buf;
    return m;
}

/* n_layer 0: the model as stored; 1: block_count patched to 1 (load_patched). */
static void rig_open_ex(rig_t *g, const char *model, int n_layer, int64_t cells, rill_dtype_t kvt,
                        int32_t max_batch) {
    test_rig_params_t p = test_rig_default_params(model);
    p.forward.max_batch = max_batch;
    p.pool.n_cells = cells;
    p.pool.kv_type = kvt;
    p.ref_tokens = 16 * RILL_KV_PAGE_SIZE;
    if (n_layer == 0) {
        test_rig_open(g, &p);
    } else {
        void *file = NULL;
        rill_model_t *m = load_patched(model, n_layer, &file);
        test_rig_open_model(g, m, file, &p);
    }
}

static void rig_open(rig_t *g, const char *model, int64_t cells) {
    rig_open_ex(g, model, 0, cells, RILL_DTYPE_F32, 64);
}

/* The oracle: logits of the last of tokens[0, n) by a fresh contiguous prefill (n <= 256). */
static void ref_logits(rig_t *g, const int32_t *tokens, int n, float *out) {
    rill_err_t err = rill_forward_eval_sequence(g->fw, g->kv, &g->pt, 0, tokens, n, false, out);
    ck_assert_msg(err == RILL_OK, "ref: %s", rill_last_error(RILL_OK));
}

static void check_close(const float *got, const float *want, int n, double rel, const char *what) {
    double scale = test_max_abs(want, n), d = test_max_diff(got, want, n);
    ck_assert_msg(d <= rel * scale, "%s: max|d| %g > %g * scale %g", what, d, rel, scale);
}

static const float *logits_of(rill_session_t *s) {
    const float *l = NULL;
    rill_err_t err = rill_session_logits(s, &l);
    ck_assert_msg(err == RILL_OK, "logits: %s", rill_last_error(RILL_OK));
    return l;
}

/* ---- append ------------------------------------------------------------------------------- */

START_TEST(chunked_appends_equal_one_shot) {
    rig_t g;
    rig_open(&g, QWEN, 4096);
    int32_t toks[200];
    test_rand_tokens(test_rng(), toks, 200, g.V);
    float *want = malloc((size_t)g.V * sizeof *want);
    int chunks[] = { 1, 7, 64, 200 };
    for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
        rill_session_t *s = NULL;
        ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
        for (int i = 0; i < 200; i += chunks[c]) {
            int m = 200 - i < chunks[c] ? 200 - i : chunks[c];
            ck_assert_int_eq(rill_session_append(s, toks + i, m), RILL_OK);
            if ((i / chunks[c]) % 9 == 0 || i + m == 200) { /* some prefixes, and the end */
                ref_logits(&g, toks, i + m, want);
                check_close(logits_of(s), want, g.V, 1e-4, "chunked append");
            }
        }
        rill_session_stats_t st;
        rill_session_stats(s, &st);
        ck_assert_int_eq(st.n_resident, 200);
        ck_assert_int_eq(st.pos_next, 200);
        ck_assert_int_eq(st.pages, 13);
        ck_assert_int_eq(st.n_seen, 200);
        rill_session_destroy(&s);
        ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    }
    free(want);
    test_rig_close(&g);
}
END_TEST

/* ---- query ---------------------------------------------------------------------------------- */

typedef struct kv_snap {
    int32_t n_pages, n_tok;
    int32_t pages[64];
    int32_t toks[MAXT];
    float *logits;
    unsigned char *bytes; /* every layer of every page */
} kv_snap_t;

static void snap(rig_t *g, rill_session_t *s, kv_snap_t *k) {
    const int32_t *pg = rill_session_pages(s, &k->n_pages);
    memcpy(k->pages, pg, (size_t)k->n_pages * sizeof *pg);
    const int32_t *t = rill_session_tokens(s, &k->n_tok);
    memcpy(k->toks, t, (size_t)k->n_tok * sizeof *t);
    k->logits = malloc((size_t)g->V * sizeof(float));
    memcpy(k->logits, logits_of(s), (size_t)g->V * sizeof(float));
    rill_kv_cache_t *kv = rill_session_pool_cache(g->pool);
    int64_t pb = rill_kv_page_bytes(rill_kv_cache_layout(kv));
    int32_t L = rill_model_hparams(g->model)->n_layer;
    k->bytes = malloc((size_t)(pb * L * k->n_pages));
    for (int32_t l = 0; l < L; l++) {
        for (int32_t j = 0; j < k->n_pages; j++) {
            ck_assert_int_eq(rill_backend_copy_out(g->be, k->bytes + (l * k->n_pages + j) * pb,
                                                   (char *)rill_kv_cache_pool(kv, l) + pg[j] * pb,
                                                   (size_t)pb),
                             RILL_OK);
        }
    }
}

static void snap_equal(rig_t *g, kv_snap_t *a, kv_snap_t *b) {
    ck_assert_int_eq(a->n_pages, b->n_pages);
    ck_assert_int_eq(a->n_tok, b->n_tok);
    ck_assert_mem_eq(a->pages, b->pages, (size_t)a->n_pages * sizeof(int32_t));
    ck_assert_mem_eq(a->toks, b->toks, (size_t)a->n_tok * sizeof(int32_t));
    ck_assert_mem_eq(a->logits, b->logits, (size_t)g->V * sizeof(float));
    int64_t pb = rill_kv_page_bytes(rill_kv_cache_layout(rill_session_pool_cache(g->pool)));
    int32_t L = rill_model_hparams(g->model)->n_layer;
    ck_assert(memcmp(a->bytes, b->bytes, (size_t)(pb * L * a->n_pages)) == 0);
    free(a->logits);
    free(a->bytes);
    free(b->logits);
    free(b->bytes);
}

typedef struct collect {
    int32_t ids[64];
    int n;
} collect_t;

static bool on_token(void *user, int32_t token) {
    collect_t *c = user;
    c->ids[c->n++] = token;
    return true;
}

START_TEST(query_leaves_session_identical) {
    rig_t g;
    rig_open_ex(&g, QWEN, 0, 4096, RILL_DTYPE_F16, 64);
    int32_t toks[45], q[12];
    test_rand_tokens(test_rng(), toks, 45, g.V);
    test_rand_tokens(test_rng(), q, 12, g.V);
    rill_session_t *s = NULL, *twin = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &twin), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 45), RILL_OK);
    ck_assert_int_eq(rill_session_append(twin, toks, 45), RILL_OK);
    int32_t free0 = rill_session_pool_n_free(g.pool);
    kv_snap_t before, after;
    snap(&g, s, &before);

    collect_t c = { { 0 }, 0 };
    int32_t out[8];
    rill_session_gen_t gen = { .n_max = 8, .on_token = on_token, .user = &c, .out = out };
    ck_assert_int_eq(rill_session_query(s, q, 12, &gen), RILL_OK);
    ck_assert_int_eq(gen.n_out, 8);
    ck_assert_int_eq(c.n, 8);
    ck_assert_mem_eq(c.ids, out, 8 * sizeof(int32_t));
    snap(&g, s, &after);
    snap_equal(&g, &before, &after);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), free0);

    /* The answer is what a fork decoding by hand gets. */
    rill_session_t *f = NULL;
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert_int_eq(rill_session_append(f, q, 12), RILL_OK);
    int32_t out2[8];
    rill_session_gen_t gen2 = { .n_max = 8, .out = out2 };
    ck_assert_int_eq(rill_session_generate(f, &gen2), RILL_OK);
    ck_assert_mem_eq(out, out2, sizeof out);
    rill_session_destroy(&f);

    /* Next logits equal those of a twin that never saw the query. */
    int32_t next[3] = { 5, 17, 200 };
    ck_assert_int_eq(rill_session_append(s, next, 3), RILL_OK);
    ck_assert_int_eq(rill_session_append(twin, next, 3), RILL_OK);
    ck_assert_mem_eq(logits_of(s), logits_of(twin), (size_t)g.V * sizeof(float));

    /* A sampled query streams too, and stops when the callback says so. */
    rill_sampler_t *smp = NULL;
    ck_assert_int_eq(rill_sampler_new(g.V, rill_sampler_default_params(), &smp), RILL_OK);
    rill_session_gen_t gen3 = { .n_max = 5, .sampler = smp };
    ck_assert_int_eq(rill_session_query(s, q, 3, &gen3), RILL_OK);
    ck_assert_int_eq(gen3.n_out, 5);
    rill_sampler_destroy(&smp);
    rill_session_destroy(&s);
    rill_session_destroy(&twin);
    test_rig_close(&g);
}
END_TEST

/* ---- random operations against re-prefill ----------------------------------------------------
 */

#define NB 6

/* The reference of a windowed branch: per token, a full window first drops evict * P tokens
 * after the sinks (what the session does page-wise). */
static void ref_push(int32_t *list, int *n, const int32_t *add, int m, int cap, int sinks,
                     int evict) {
    for (int i = 0; i < m; i++) {
        if (cap > 0 && *n == cap) {
            memmove(list + sinks, list + sinks + evict, (size_t)(*n - sinks - evict) * 4);
            *n -= evict;
        }
        list[(*n)++] = add[i];
    }
}

/* 1,000 random fork / append / rollback / drop operations over up to NB branches, each branch
 * checked after every operation against a re-prefill of its resident tokens. window > 0 needs a
 * 1-layer model (there the re-prefill of sinks + kept tokens is exact). */
static void random_ops(const char *model, int n_layer, int window, int pages) {
    rig_t g;
    rig_open_ex(&g, model, n_layer, (int64_t)pages * 16, RILL_DTYPE_F32, 64);
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = window > 0 ? 16 : 0;
    sp.window = window;
    sp.evict_pages = 2;
    int cap = window > 0 ? 16 + window : 0;
    rill_session_t *ss[NB] = { 0 };
    static int32_t toks[NB][256];
    int n_tok[NB] = { 0 };
    float *want = malloc((size_t)g.V * sizeof *want);
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &ss[0]), RILL_OK);
    int counts[5] = { 0 }, efull = 0;
    for (int op = 0; op < 1000; op++) {
        int b = (int)test_rand_below(test_rng(), NB);
        while (ss[b] == NULL) {
            b = (b + 1) % NB;
        }
        int kind = (int)test_rand_below(test_rng(), 10);
        int touched = b;
        if (kind < 2) { /* fork */
            int d = 0;
            while (d < NB && ss[d] != NULL) {
                d++;
            }
            if (d == NB) {
                continue;
            }
            ck_assert_int_eq(rill_session_fork(ss[b], &ss[d]), RILL_OK);
            memcpy(toks[d], toks[b], (size_t)n_tok[b] * sizeof(int32_t));
            n_tok[d] = n_tok[b];
            touched = d;
        } else if (kind < 7) { /* append */
            int m = 1 + (int)test_rand_below(test_rng(), 20);
            if (window == 0 && n_tok[b] + m > 250) {
                m = 250 - n_tok[b];
            }
            if (m <= 0) {
                continue;
            }
            int32_t add[20];
            test_rand_tokens(test_rng(), add, m, g.V);
            int32_t free0 = rill_session_pool_n_free(g.pool);
            rill_session_stats_t st0, st1;
            rill_session_stats(ss[b], &st0);
            rill_err_t err = rill_session_append(ss[b], add, m);
            if (err == RILL_EFULL) {
                efull++;
                rill_session_stats(ss[b], &st1);
                ck_assert_mem_eq(&st0, &st1, sizeof st0);
                ck_assert_int_eq(rill_session_pool_n_free(g.pool), free0);
            } else {
                ck_assert_msg(err == RILL_OK, "append: %s", rill_last_error(RILL_OK));
                ref_push(toks[b], &n_tok[b], add, m, cap, 16, 32);
            }
        } else if (kind < 9) { /* rollback */
            int pos = n_tok[b] > 0 ? (int)test_rand_below(test_rng(), (uint32_t)(n_tok[b] + 1)) : 0;
            ck_assert_int_eq(rill_session_rollback(ss[b], pos), RILL_OK);
            n_tok[b] = pos;
        } else { /* drop, keeping at least one */
            int live = 0;
            for (int i = 0; i < NB; i++) {
                live += ss[i] != NULL;
            }
            if (live == 1) {
                continue;
            }
            rill_session_destroy(&ss[b]);
            n_tok[b] = 0;
            touched = -1;
        }
        counts[kind < 2 ? 0 : kind < 7 ? 1 : kind < 9 ? 2 : 3]++;
        test_pool_check(g.pool, ss, NB);
        if (touched >= 0) {
            int32_t n = 0;
            const int32_t *t = rill_session_tokens(ss[touched], &n);
            ck_assert_int_eq(n, n_tok[touched]);
            ck_assert_mem_eq(t, toks[touched], (size_t)n * sizeof(int32_t));
            if (n > 0) {
                ref_logits(&g, toks[touched], n, want);
                check_close(logits_of(ss[touched]), want, g.V, 1e-4, "random ops");
            }
        }
    }
    printf("random ops: %d forks, %d appends (%d RILL_EFULL), %d rollbacks, %d drops\n", counts[0],
           counts[1], efull, counts[2], counts[3]);
    ck_assert_int_gt(efull, 0);
    /* Every branch once more at the end. */
    for (int i = 0; i < NB; i++) {
        if (ss[i] != NULL && n_tok[i] > 0) {
            ref_logits(&g, toks[i], n_tok[i], want);
            check_close(logits_of(ss[i]), want, g.V, 1e-4, "final");
        }
        rill_session_destroy(&ss[i]);
    }
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    free(want);
    test_rig_close(&g);
}

START_TEST(random_ops_match_reprefill) {
    random_ops(QWEN, 0, 0, 16); /* tight: some operations must hit RILL_EFULL */
}
END_TEST

START_TEST(random_ops_with_window_match_reprefill_1_layer) {
    random_ops(QWEN, 1, 64, 16);
}
END_TEST

/* ---- window ------------------------------------------------------------------------------- */

/* Layer-0 K of a session's slots [s0, s1) (host floats, (slot, Hkv, D) order). */
static void read_k(rig_t *g, rill_kv_cache_t *kv, const int32_t *pages, int s0, int s1,
                   float *out) {
    const rill_kv_layout_t *lay = rill_kv_cache_layout(kv);
    int64_t pb = rill_kv_page_bytes(lay);
    int P = lay->page_size, H = lay->n_kv_heads, D = lay->head_dim;
    float *page = malloc((size_t)pb);
    for (int s = s0; s < s1; s++) {
        ck_assert_int_eq(
            rill_backend_copy_out(
                g->be, page, (char *)rill_kv_cache_pool(kv, 0) + pages[s / P] * pb, (size_t)pb),
            RILL_OK);
        for (int h = 0; h < H; h++) {
            memcpy(out + ((size_t)(s - s0) * H + h) * D, page + ((size_t)h * P + s % P) * D,
                   (size_t)D * sizeof(float));
        }
    }
    free(page);
}

/* Sinks + kept tokens of a windowed stream, in slot order. */
static int window_tokens(const int32_t *stream, int n_seen, int sinks, int64_t kept_from,
                         int32_t *out) {
    int n = 0;
    for (int i = 0; i < sinks; i++) {
        out[n++] = stream[i];
    }
    for (int64_t i = kept_from; i < n_seen; i++) {
        out[n++] = stream[i];
    }
    return n;
}

static void eviction_rotates_keys(const char *model) {
    rig_t g;
    rig_open(&g, model, 4096);
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 64;
    sp.evict_pages = 1;
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    int32_t stream[100], win[100];
    test_rand_tokens(test_rng(), stream, 100, g.V);
    ck_assert_int_eq(rill_session_append(s, stream, 80), RILL_OK); /* full: 16 + 64 */
    rill_session_t *f = NULL;
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK); /* the shift must copy shared pages */
    ck_assert_int_eq(rill_session_append(s, stream + 80, 3), RILL_OK);
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    ck_assert_int_eq(st.n_evicted, 16);
    ck_assert_int_eq(st.kept_from, 32);
    ck_assert_int_eq(st.n_resident, 67);
    ck_assert_int_eq(st.pos_next, 67);
    ck_assert_int_eq(st.n_seen, 83);
    ck_assert_int_eq(st.pages_shared, 1); /* only the sink page is still shared */
    int n = window_tokens(stream, 83, 16, st.kept_from, win);
    ck_assert_int_eq(n, 67);
    int32_t np = 0;
    const int32_t *pages = rill_session_pages(s, &np);
    const rill_kv_layout_t *lay = rill_kv_cache_layout(g.kv);
    int row = lay->n_kv_heads * lay->head_dim;
    float *got = malloc((size_t)100 * row * sizeof(float));
    float *fresh = malloc((size_t)100 * row * sizeof(float));
    read_k(&g, rill_session_pool_cache(g.pool), pages, 0, n, got);
    float *tmp = malloc((size_t)g.V * sizeof(float));
    ref_logits(&g, win, n, tmp);
    read_k(&g, g.kv, g.pages, 0, n, fresh);
    double scale = test_max_abs(fresh, n * row), d = test_max_diff(got, fresh, n * row);
    printf("%s: re-rotated layer-0 keys vs fresh: max|d| %.3g (scale %.3g)\n", model, d, scale);
    ck_assert_msg(d <= 1e-4 * scale, "re-rotated keys differ: %g", d);
    /* The fork still holds the un-shifted keys of the same tokens at their old positions. */
    int32_t nf = 0;
    const int32_t *fpages = rill_session_pages(f, &nf);
    ck_assert_int_eq(nf, 5);
    ref_logits(&g, stream, 80, tmp);
    read_k(&g, rill_session_pool_cache(g.pool), fpages, 0, 80, got);
    read_k(&g, g.kv, g.pages, 0, 80, fresh);
    ck_assert(test_max_diff(got, fresh, 80 * row) <= 1e-6 * scale);
    free(got);
    free(fresh);
    free(tmp);
    rill_session_destroy(&f);
    rill_session_destroy(&s);
    test_rig_close(&g);
}

START_TEST(eviction_rotates_keys_qwen2_neox) {
    eviction_rotates_keys(QWEN);
}
END_TEST

START_TEST(eviction_rotates_keys_llama_norm) {
    eviction_rotates_keys(LLAMA);
}
END_TEST

/* With one layer, K/V of a token depend on nothing but the token and its position, so after
 * eviction the session is exactly a fresh prefill of sinks + kept tokens. */
START_TEST(one_layer_eviction_equals_fresh_prefill) {
    rig_t g;
    rig_open_ex(&g, QWEN, 1, 4096, RILL_DTYPE_F32, 64);
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 10;  /* rounded up to 16 */
    sp.window = 100; /* rounded up to 112 */
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    int32_t stream[700], win[300];
    test_rand_tokens(test_rng(), stream, 700, g.V);
    float *want = malloc((size_t)g.V * sizeof *want);
    int seen = 0, checks = 0;
    while (seen < 700) {
        int m = 1 + (int)test_rand_below(test_rng(), 40);
        m = m < 700 - seen ? m : 700 - seen;
        ck_assert_int_eq(rill_session_append(s, stream + seen, m), RILL_OK);
        seen += m;
        rill_session_stats_t st;
        rill_session_stats(s, &st);
        ck_assert_int_eq(st.n_seen, seen);
        ck_assert_int_le(st.n_resident, 128);
        ck_assert_int_eq(st.n_sink_cfg, 16);
        ck_assert_int_eq(st.window_cfg, 112);
        if (st.n_evicted > 0) {
            int n = window_tokens(stream, seen, 16, st.kept_from, win);
            ck_assert_int_eq(n, st.n_resident);
            int32_t nt = 0;
            const int32_t *t = rill_session_tokens(s, &nt);
            ck_assert_mem_eq(t, win, (size_t)n * sizeof(int32_t));
            ref_logits(&g, win, n, want);
            check_close(logits_of(s), want, g.V, 1e-4, "1-layer eviction");
            checks++;
        }
    }
    ck_assert_int_gt(checks, 10);
    rill_session_destroy(&s);
    free(want);
    test_rig_close(&g);
}
END_TEST

/* 10x the model's context through a window: bounded memory, positions below n_ctx. */
START_TEST(endless_stream_in_bounded_memory) {
    rig_t g;
    rig_open_ex(&g, QWEN, 0, 4096, RILL_DTYPE_F16, 64);
    int32_t n_ctx = rill_session_pool_n_ctx(g.pool);
    ck_assert_int_eq(n_ctx, 256);
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 224;
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    int32_t free_min = rill_session_pool_n_free(g.pool);
    rill_mem_stats_t m0 = rill_mem_stats(RILL_MEM_SESSIONS);
    int32_t chunk[64];
    int64_t seen = 0;
    while (seen < 10 * n_ctx) {
        int m = 1 + (int)test_rand_below(test_rng(), 64);
        test_rand_tokens(test_rng(), chunk, m, g.V);
        ck_assert_int_eq(rill_session_append(s, chunk, m), RILL_OK);
        seen += m;
        rill_session_stats_t st;
        rill_session_stats(s, &st);
        ck_assert_int_le(st.pos_next, 240);
        ck_assert_int_lt(st.pos_next, n_ctx);
        ck_assert_int_le(st.pages, 15);
        ck_assert_int_eq(st.n_seen, seen);
        free_min = rill_session_pool_n_free(g.pool) < free_min ? rill_session_pool_n_free(g.pool)
                                                               : free_min;
    }
    ck_assert_int_ge(free_min, rill_session_pool_n_pages(g.pool) - 15);
    rill_mem_stats_t m1 = rill_mem_stats(RILL_MEM_SESSIONS);
    ck_assert_int_eq(m1.n_allocs, m0.n_allocs); /* nothing allocated while streaming */
    const float *l = logits_of(s);
    for (int i = 0; i < g.V; i++) {
        ck_assert(isfinite(l[i]));
    }
    rill_session_destroy(&s);
    test_rig_close(&g);
}
END_TEST

/* ---- budget --------------------------------------------------------------------------------- */

START_TEST(exhausted_budget_changes_nothing) {
    rig_t g;
    rig_open(&g, QWEN, 4 * 16); /* 4 pages */
    int32_t toks[100];
    test_rand_tokens(test_rng(), toks, 100, g.V);
    rill_session_t *s = NULL, *f = NULL, *t = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &t), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 40), RILL_OK); /* 3 pages, last partial */
    ck_assert_int_eq(rill_session_append(t, toks, 16), RILL_OK); /* the 4th */
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 0);
    kv_snap_t a, b, c, d;
    snap(&g, s, &a);
    snap(&g, f, &c);
    /* Writing into the shared last page needs a copy, hence a page. */
    ck_assert_int_eq(rill_session_append(f, toks + 50, 1), RILL_EFULL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFULL), "budget"));
    ck_assert_int_eq(rill_session_append(s, toks + 50, 1), RILL_EFULL);
    ck_assert_int_eq(rill_session_append(s, toks + 50, 30), RILL_EFULL);
    /* A query needs the fork's pages: RILL_EFULL, and s unchanged. */
    rill_session_gen_t gen = { .n_max = 2 };
    ck_assert_int_eq(rill_session_query(s, toks, 1, &gen), RILL_EFULL);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 0);
    snap(&g, s, &b);
    snap(&g, f, &d);
    snap_equal(&g, &a, &b);
    snap_equal(&g, &c, &d);
    rill_session_destroy(&f);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 0);
    ck_assert_int_eq(rill_session_append(s, toks + 50, 1), RILL_OK); /* s owns it now */
    rill_session_destroy(&t);
    rill_session_destroy(&s);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 4);

    /* A window shift that must copy shared kept pages, in a pool that cannot. */
    rill_session_params_t sp = rill_session_default_params();
    sp.window = 48;
    sp.evict_pages = 1;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 48), RILL_OK);
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    snap(&g, s, &a);
    ck_assert_int_eq(rill_session_append(s, toks + 48, 1), RILL_EFULL);
    snap(&g, s, &b);
    snap_equal(&g, &a, &b);
    rill_session_destroy(&f);
    ck_assert_int_eq(rill_session_append(s, toks + 48, 1), RILL_OK);
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    ck_assert_int_eq(st.n_resident, 33);
    rill_session_destroy(&s);

    /* Without a window, the context is the limit. */
    rill_session_pool_destroy(&g.pool);
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = 1024;
    pp.kv_type = RILL_DTYPE_F32;
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &g.pool), RILL_OK);
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
    int32_t many[256];
    test_rand_tokens(test_rng(), many, 256, g.V);
    ck_assert_int_eq(rill_session_append(s, many, 250), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, many, 7), RILL_ERANGE);
    ck_assert_int_eq(rill_session_append(s, many, 6), RILL_OK);
    rill_session_destroy(&s);
    test_rig_close(&g);
}
END_TEST

/* ---- text ----------------------------------------------------------------------------------- */

static const char TEXT[] =
    "the stream is the state. the session keeps the cache and the answer comes at once.\n"
    "there is a price and a size in each line of the market;  the trader reads them and then "
    "writes 12345 and 6.78 times.\n\nshe said that the rate is not the same as the one in the "
    "other stream, and he said it is. x   y\tz \xc3\xa9t\xc3\xa9 caf\xc3\xa9 ok";

static void text_chunks_equal_whole(const char *model) {
    rig_t g;
    rig_open(&g, model, 4096);
    size_t len = strlen(TEXT);
    int32_t want[1024];
    int64_t nw = rill_tokenizer_encode(g.tok, TEXT, len, false, false, want, 1024);
    ck_assert_int_gt(nw, 50);
    size_t sizes[] = { 1, 2, 3, 7, 13, 64, 0 };
    for (size_t c = 0; c < sizeof sizes / sizeof sizes[0]; c++) {
        rill_session_t *s = NULL;
        ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
        for (size_t i = 0; i < len;) {
            size_t m = sizes[c] != 0 ? sizes[c] : 1 + test_rand_below(test_rng(), 20);
            m = m < len - i ? m : len - i;
            ck_assert_int_eq(rill_session_append_text(s, TEXT + i, m), RILL_OK);
            i += m;
        }
        ck_assert_uint_gt(rill_session_pending_text(s), 0); /* "ok" is held back */
        ck_assert_int_eq(rill_session_flush_text(s), RILL_OK);
        ck_assert_uint_eq(rill_session_pending_text(s), 0);
        int32_t n = 0;
        const int32_t *t = rill_session_tokens(s, &n);
        ck_assert_int_eq(n, nw);
        ck_assert_mem_eq(t, want, (size_t)n * sizeof(int32_t));
        rill_session_destroy(&s);
    }
    test_rig_close(&g);
}

START_TEST(text_chunks_equal_whole_text_bpe) {
    text_chunks_equal_whole(QWEN);
}
END_TEST

START_TEST(text_chunks_equal_whole_text_spm) {
    text_chunks_equal_whole(LLAMA);
}
END_TEST

/* ---- quantized caches --------------------------------------------------------------------- */

/* Layer-0 K of slots [0, n) decoded to f32 ((slot, Hkv, D) order), whatever the cache types. */
static void read_k_decoded(rig_t *g, rill_kv_cache_t *kv, const int32_t *pages, int n, float *out) {
    const rill_kv_layout_t *lay = rill_kv_cache_layout(kv);
    const int64_t pb = rill_kv_page_bytes(lay),
                  rb = rill_dtype_row_bytes(lay->k_dtype, lay->head_dim);
    const int P = lay->page_size, H = lay->n_kv_heads, D = lay->head_dim;
    unsigned char *page = malloc((size_t)pb);
    for (int s = 0; s < n; s++) {
        ck_assert_int_eq(
            rill_backend_copy_out(
                g->be, page, (char *)rill_kv_cache_pool(kv, 0) + pages[s / P] * pb, (size_t)pb),
            RILL_OK);
        for (int h = 0; h < H; h++) {
            ck_assert_int_eq(rill_dequantize_row(lay->k_dtype, page + ((int64_t)h * P + s % P) * rb,
                                                 out + ((size_t)s * H + h) * D, D),
                             RILL_OK);
        }
    }
    free(page);
}

/* Q8_0 and Q4_0 caches (and K and V of different types) behave as sessions promise: a query
 * leaves the session's bytes as they were, a fork decoding by hand gets the query's answer, a
 * rollback and re-append equals a twin that never rolled back (bit for bit: the same rows give
 * the same blocks), and a window's re-rotated keys stay within the quantization of the keys a
 * fresh prefill of the kept tokens stores (the shift decodes, rotates and quantizes again:
 * at most one step of the original block, one of the new, and the fresh one's half step, so
 * 2.5 steps of the block, a step being amax / 127 (q8_0) or amax / 8 (q4_0)). */
static void quantized_session_case(rill_dtype_t k, int32_t v) {
    rig_t g;
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.forward.max_batch = 64;
    p.pool.n_cells = 4096;
    p.pool.kv_type = k;
    p.pool.kv_type_v = v;
    p.ref_tokens = 16 * RILL_KV_PAGE_SIZE;
    test_rig_open(&g, &p);
    const rill_kv_layout_t *lay = rill_kv_cache_layout(rill_session_pool_cache(g.pool));
    ck_assert_int_eq(lay->k_dtype, k);
    ck_assert_int_eq(lay->v_dtype, v == RILL_SESSION_KV_SAME ? k : (rill_dtype_t)v);
    int32_t toks[60], q[12];
    test_rand_tokens(test_rng(), toks, 60, g.V);
    test_rand_tokens(test_rng(), q, 12, g.V);
    rill_session_t *s = NULL, *twin = NULL, *f = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &twin), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 45), RILL_OK);
    ck_assert_int_eq(rill_session_append(twin, toks, 45), RILL_OK);
    kv_snap_t before, after;
    snap(&g, s, &before);
    int32_t out[6], out2[6];
    rill_session_gen_t gen = { .n_max = 6, .out = out };
    ck_assert_int_eq(rill_session_query(s, q, 12, &gen), RILL_OK);
    snap(&g, s, &after);
    snap_equal(&g, &before, &after);
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert_int_eq(rill_session_append(f, q, 12), RILL_OK);
    rill_session_gen_t gen2 = { .n_max = 6, .out = out2 };
    ck_assert_int_eq(rill_session_generate(f, &gen2), RILL_OK);
    ck_assert_mem_eq(out, out2, sizeof out);
    rill_session_destroy(&f);
    ck_assert_int_eq(rill_session_append(s, toks + 45, 10), RILL_OK); /* then rolled back */
    ck_assert_int_eq(rill_session_rollback(s, 45), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks + 50, 10), RILL_OK);
    ck_assert_int_eq(rill_session_append(twin, toks + 50, 10), RILL_OK);
    ck_assert_mem_eq(logits_of(s), logits_of(twin), (size_t)g.V * sizeof(float));
    rill_session_destroy(&s);
    rill_session_destroy(&twin);

    /* a window: 16 sinks + 64, one page evicted when full */
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 64;
    sp.evict_pages = 1;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    int32_t stream[100], win[100];
    test_rand_tokens(test_rng(), stream, 100, g.V);
    ck_assert_int_eq(rill_session_append(s, stream, 83), RILL_OK);
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    ck_assert_int_eq(st.n_evicted, 16);
    ck_assert_int_eq(st.n_resident, 67);
    const int n = window_tokens(stream, 83, 16, st.kept_from, win);
    int32_t np = 0;
    const int32_t *pages = rill_session_pages(s, &np);
    const int row = lay->n_kv_heads * lay->head_dim, D = lay->head_dim;
    float *got = malloc((size_t)n * row * sizeof(float));
    float *fresh = malloc((size_t)n * row * sizeof(float));
    float *tmp = malloc((size_t)g.V * sizeof(float));
    read_k_decoded(&g, rill_session_pool_cache(g.pool), pages, n, got);
    ref_logits(&g, win, n, tmp);
    read_k_decoded(&g, g.kv, g.pages, n, fresh);
    const double levels = k == RILL_DTYPE_Q8_0 ? 127.0 : k == RILL_DTYPE_Q4_0 ? 8.0 : 0.0;
    double worst = 0.0;
    for (int b = 0; b < n * row / 32; b++) { /* per 32-value block of the fresh keys */
        double amax = 0.0, d = 0.0;
        for (int i = 0; i < 32; i++) {
            amax = fmax(amax, fabs(fresh[b * 32 + i]));
            d = fmax(d, fabs(got[b * 32 + i] - fresh[b * 32 + i]));
        }
        const double bound = levels > 0 ? 2.5 * amax / levels + 1e-6 : 1e-3 * amax + 1e-6;
        ck_assert_msg(d <= bound, "%s: block %d: re-rotated keys off by %g (bound %g)",
                      rill_dtype_name(k), b, d, bound);
        worst = fmax(worst, d / (amax > 0 ? amax : 1));
    }
    printf("K %s: re-rotated keys vs a fresh prefill's, worst %.3g of the block's amax\n",
           rill_dtype_name(k), worst);
    (void)D;
    free(got);
    free(fresh);
    free(tmp);
    rill_session_destroy(&s);
    test_rig_close(&g);
}

START_TEST(quantized_caches_fork_rollback_window) {
    quantized_session_case(RILL_DTYPE_Q8_0, RILL_SESSION_KV_SAME);
    quantized_session_case(RILL_DTYPE_Q4_0, RILL_SESSION_KV_SAME);
    quantized_session_case(RILL_DTYPE_Q8_0, RILL_DTYPE_F16);
}
END_TEST

/* ---- failures ------------------------------------------------------------------------------- */

START_TEST(arguments_are_checked) {
    rig_t g;
    rig_open(&g, QWEN, 256);
    rill_session_pool_t *p = NULL;
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_ctx = 100000;
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &p), RILL_EINVAL);
    ck_assert_ptr_null(p);
    pp = rill_session_pool_default_params();
    pp.kv_type = RILL_DTYPE_Q4_1; /* not a cache type */
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &p), RILL_EINVAL);
    pp = rill_session_pool_default_params();
    pp.kv_type_v = RILL_DTYPE_Q8_K;
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &p), RILL_EINVAL);
    pp.kv_type_v = 77; /* no type at all */
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &p), RILL_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_int_eq(rill_session_pool_new(NULL, NULL, &p), RILL_EINVAL);
    rill_session_t *s = NULL;
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 250; /* 16 + 256 > 256 */
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_EINVAL);
    sp.window = 64;
    sp.evict_pages = 5;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_EINVAL);
    sp = rill_session_default_params();
    int32_t bad[2] = { 1, 100000 };
    sp.prompt = bad;
    sp.n_prompt = 2;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_EINVAL);
    ck_assert_ptr_null(s);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 16);
    sp.n_prompt = 1;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    const float *l = NULL;
    ck_assert_int_eq(rill_session_append(s, bad, 2), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "outside"));
    ck_assert_int_eq(rill_session_rollback(s, 2), RILL_EINVAL);
    ck_assert_int_eq(rill_session_rollback(s, 0), RILL_OK);
    ck_assert_int_eq(rill_session_logits(s, &l), RILL_EAGAIN);
    rill_session_gen_t gen = { .n_max = 1 };
    ck_assert_int_eq(rill_session_generate(s, &gen), RILL_EAGAIN);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), 16);
    rill_session_destroy(&s);
    rill_session_destroy(&s); /* NULL-safe */
    rill_session_pool_destroy(&p);
    test_rig_close(&g);
}
END_TEST

START_TEST(allocation_failures_leave_everything_as_it_was) {
    rig_t g;
    rig_open(&g, QWEN, 256);
    int32_t toks[40];
    test_rand_tokens(test_rng(), toks, 40, g.V);
    rill_session_pool_params_t pp = rill_session_pool_default_params();
    pp.n_cells = 256;
    pp.tokenizer = g.tok;
    rill_session_params_t sp = rill_session_default_params();
    sp.prompt = toks;
    sp.n_prompt = 20;
    sp.window = 64;

    /* Pool, session with a prompt, fork, text append: every allocation point. */
    rill_mem_stats_t before = rill_mem_stats_total();
    int64_t c0 = rill_mem_calls();
    rill_session_pool_t *p = NULL;
    rill_session_t *s = NULL, *f = NULL;
    ck_assert_int_eq(rill_session_pool_new(g.fw, &pp, &p), RILL_OK);
    ck_assert_int_eq(rill_session_new(p, &sp, &s), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "abc de", 6), RILL_OK);
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    int64_t points = rill_mem_calls() - c0;
    rill_session_destroy(&f);
    rill_session_destroy(&s);
    rill_session_pool_destroy(&p);
    ck_assert_int_eq(rill_mem_stats_total().n_live, before.n_live);
    int failed = 0;
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_pool_new(g.fw, &pp, &p);
        if (err != RILL_OK) {
            ck_assert_int_eq(err, RILL_ENOMEM);
            ck_assert_ptr_null(p);
            failed++;
        } else if ((err = rill_session_new(p, &sp, &s)) != RILL_OK) {
            ck_assert_int_eq(err, RILL_ENOMEM);
            ck_assert_ptr_null(s);
            ck_assert_int_eq(rill_session_pool_n_free(p), rill_session_pool_n_pages(p));
            failed++;
        } else if ((err = rill_session_append_text(s, "abc de", 6)) != RILL_OK) {
            ck_assert_int_eq(err, RILL_ENOMEM);
            ck_assert_uint_eq(rill_session_pending_text(s), 0);
            rill_session_stats_t st;
            rill_session_stats(s, &st);
            ck_assert_int_eq(st.n_resident, 20);
            failed++;
        } else if ((err = rill_session_fork(s, &f)) != RILL_OK) {
            ck_assert_int_eq(err, RILL_ENOMEM);
            ck_assert_ptr_null(f);
            rill_session_stats_t st;
            rill_session_stats(s, &st);
            ck_assert_int_eq(st.pages_shared, 0);
            failed++;
        }
        rill_mem_fail_nth(0);
        rill_session_destroy(&f);
        rill_session_destroy(&s);
        rill_session_pool_destroy(&p);
        ck_assert_int_eq(rill_mem_stats_total().n_live, before.n_live);
    }
    ck_assert_int_eq(failed, points);
    test_rig_close(&g);
}
END_TEST

/* A step whose forward pass is cancelled (rill_forward_set_cancel, as the scheduler preempts)
 * returns RILL_ECANCELED and changes nothing observable: tokens still queued, nothing resident
 * added, pages back (but a copy-on-write copy); stepping again gives the uncancelled result. */
START_TEST(cancelled_step_changes_nothing) {
    rig_t g;
    rig_open(&g, QWEN, 4096);
    int32_t toks[2][70];
    rill_session_t *s[2] = { NULL, NULL };
    for (int i = 0; i < 2; i++) {
        test_rand_tokens(test_rng(), toks[i], 70, g.V);
        ck_assert_int_eq(rill_session_new(g.pool, NULL, &s[i]), RILL_OK);
    }
    ck_assert_int_eq(rill_session_append(s[0], toks[0], 40), RILL_OK);
    ck_assert_int_eq(rill_session_feed(s[0], toks[0] + 40, 30), RILL_OK);
    ck_assert_int_eq(rill_session_feed(s[1], toks[1], 70), RILL_OK);
    rill_session_t *f = NULL; /* a fork shares s[0]'s pages: a write would copy them */
    ck_assert_int_eq(rill_session_fork(s[0], &f), RILL_OK);
    const int32_t free0 = rill_session_pool_n_free(g.pool);
    atomic_int cancel;
    atomic_init(&cancel, 1);
    rill_forward_set_cancel(rill_session_pool_forward(g.pool), &cancel);
    rill_session_step_t it[2] = { { s[0], 30, true }, { s[1], 30, false } };
    ck_assert_int_eq(rill_session_step(g.pool, it, 2), RILL_ECANCELED);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_ECANCELED), "cancelled"));
    /* the pages the step took are back, but for the private copy of the page s[0] shares with
     * f, made before the pass (copy-on-write; the same rows, so nothing observable) */
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), free0 - 1);
    ck_assert_int_eq(rill_session_pending(s[0]), 30);
    ck_assert_int_eq(rill_session_pending(s[1]), 70);
    int32_t n = 0;
    rill_session_tokens(s[0], &n);
    ck_assert_int_eq(n, 40);
    rill_session_tokens(s[1], &n);
    ck_assert_int_eq(n, 0);
    atomic_store(&cancel, 0);
    ck_assert_int_eq(rill_session_drain(s[0]), RILL_OK);
    ck_assert_int_eq(rill_session_drain(s[1]), RILL_OK);
    rill_forward_set_cancel(rill_session_pool_forward(g.pool), NULL);
    float *want = malloc((size_t)g.V * sizeof *want);
    for (int i = 0; i < 2; i++) {
        ref_logits(&g, toks[i], 70, want);
        check_close(logits_of(s[i]), want, g.V, 1e-4, "session stepped after a cancelled step");
        const int32_t *t = rill_session_tokens(s[i], &n);
        ck_assert_int_eq(n, 70);
        ck_assert_mem_eq(t, toks[i], 70 * sizeof(int32_t));
    }
    rill_session_tokens(f, &n);
    ck_assert_int_eq(n, 40); /* the fork kept its own view */
    free(want);
    rill_session_destroy(&f);
    for (int i = 0; i < 2; i++) {
        rill_session_destroy(&s[i]);
    }
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}
END_TEST

/* Deferred input: rill_session_step() evaluates queued tokens of several sessions in one pass
 * with each session's own positions and pages (logits against the re-prefill oracle). */
START_TEST(step_batches_sessions_like_lone_appends) {
    rig_t g;
    rig_open(&g, QWEN, 4096);
    int32_t toks[3][90];
    rill_session_t *s[3] = { NULL, NULL, NULL };
    for (int i = 0; i < 3; i++) {
        test_rand_tokens(test_rng(), toks[i], 90, g.V);
        ck_assert_int_eq(rill_session_new(g.pool, NULL, &s[i]), RILL_OK);
    }
    ck_assert_int_eq(rill_session_append(s[0], toks[0], 30), RILL_OK); /* resident already */
    ck_assert_int_eq(rill_session_feed(s[0], toks[0] + 30, 60), RILL_OK);
    ck_assert_int_eq(rill_session_feed(s[1], toks[1], 90), RILL_OK);
    ck_assert_int_eq(rill_session_feed(s[2], toks[2], 5), RILL_OK);
    ck_assert_int_eq(rill_session_pending(s[1]), 90);
    rill_session_stats_t st;
    rill_session_stats(s[1], &st);
    ck_assert_int_eq(st.n_pending, 90);
    ck_assert_int_eq(st.n_resident, 0);
    ck_assert_int_eq(rill_session_seq(s[1]), 1); /* fed input is an input call */
    /* arguments: twice the same session, too many tokens, more than max_batch in all */
    rill_session_step_t bad[2] = { { s[0], 10, false }, { s[0], 10, false } };
    ck_assert_int_eq(rill_session_step(g.pool, bad, 2), RILL_EINVAL);
    bad[0].n = 61;
    ck_assert_int_eq(rill_session_step(g.pool, bad, 1), RILL_EINVAL);
    rill_session_step_t over[2] = { { s[0], 40, false }, { s[1], 40, false } };
    ck_assert_int_eq(rill_session_step(g.pool, over, 2), RILL_ERANGE); /* 80 > 64 */
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_ERANGE), "max_batch"));
    /* steps mixing the three until their queues are empty */
    while (rill_session_pending(s[0]) + rill_session_pending(s[1]) + rill_session_pending(s[2]) >
           0) {
        rill_session_step_t it[3];
        int n = 0, left = 64;
        for (int i = 0; i < 3; i++) {
            int m = rill_session_step_room(s[i]);
            m = m < 20 ? m : 20;
            m = m < left ? m : left;
            if (m > 0) {
                it[n++] = (rill_session_step_t){ s[i], m, m == rill_session_pending(s[i]) };
                left -= m;
            }
        }
        ck_assert_int_eq(rill_session_step(g.pool, it, n), RILL_OK);
    }
    float *want = malloc((size_t)g.V * sizeof *want);
    int n_all[3] = { 90, 90, 5 };
    for (int i = 0; i < 3; i++) {
        ref_logits(&g, toks[i], n_all[i], want);
        check_close(logits_of(s[i]), want, g.V, 1e-4, "stepped session");
        int32_t n = 0;
        const int32_t *t = rill_session_tokens(s[i], &n);
        ck_assert_int_eq(n, n_all[i]);
        ck_assert_mem_eq(t, toks[i], (size_t)n * 4);
    }
    free(want);
    for (int i = 0; i < 3; i++) {
        rill_session_destroy(&s[i]);
    }
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}
END_TEST

/* The queue under fork, rollback, snapshot and budget; adopt of a branch. */
START_TEST(queue_fork_rollback_and_adopt) {
    rig_t g;
    rig_open(&g, QWEN, 4 * 16);
    int32_t toks[100];
    test_rand_tokens(test_rng(), toks, 100, g.V);
    rill_session_t *s = NULL, *f = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, NULL, &s), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 20), RILL_OK);
    ck_assert_int_eq(rill_session_feed(s, toks + 20, 10), RILL_OK);
    ck_assert_int_eq(rill_session_snapshot(s, "/nonexistent/x"), RILL_EAGAIN);
    /* the fork copies the queue */
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert_int_eq(rill_session_pending(f), 10);
    /* rollback into the queue keeps the resident part and cuts the queue */
    ck_assert_int_eq(rill_session_rollback(f, 31), RILL_EINVAL);
    ck_assert_int_eq(rill_session_rollback(f, 25), RILL_OK);
    ck_assert_int_eq(rill_session_pending(f), 5);
    rill_session_stats_t st;
    rill_session_stats(f, &st);
    ck_assert_int_eq(st.n_resident, 20);
    ck_assert_int_eq(rill_session_rollback(f, 10), RILL_OK);
    ck_assert_int_eq(rill_session_pending(f), 0);
    rill_session_destroy(&f);
    /* a queue beyond the budget: the step says RILL_EFULL and changes nothing */
    ck_assert_int_eq(rill_session_feed(s, toks + 30, 50), RILL_OK); /* 80 tokens: 5 pages */
    rill_session_step_t it = { s, 60, false };
    ck_assert_int_eq(rill_session_step(g.pool, &it, 1), RILL_EFULL);
    ck_assert_int_eq(rill_session_pending(s), 60);
    ck_assert_int_eq(rill_session_drain(s), RILL_EFULL);
    ck_assert_int_eq(rill_session_rollback(s, 60), RILL_OK); /* 20 resident + 40 queued */
    ck_assert_int_eq(rill_session_drain(s), RILL_OK);
    rill_session_stats(s, &st);
    ck_assert_int_eq(st.n_resident, 60);
    /* adopt: a branch's appended tokens become s's, pages shared, not copied */
    ck_assert_int_eq(rill_session_rollback(s, 40), RILL_OK); /* 3 pages: one left to copy */
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert_int_eq(rill_session_append(f, toks + 40, 3), RILL_OK);
    int64_t seq = rill_session_seq(s);
    ck_assert_int_eq(rill_session_adopt(s, f), RILL_OK);
    ck_assert_int_eq(rill_session_seq(s), seq + 1);
    int32_t n = 0, nf = 0;
    const int32_t *pf = rill_session_pages(f, &nf);
    const int32_t *ps = rill_session_pages(s, &n);
    ck_assert_int_eq(n, nf);
    ck_assert_mem_eq(ps, pf, (size_t)n * 4);
    float *want = malloc((size_t)g.V * sizeof *want);
    ref_logits(&g, toks, 43, want);
    check_close(logits_of(s), want, g.V, 1e-4, "adopted");
    /* s changed since: the branch cannot be adopted again */
    ck_assert_int_eq(rill_session_adopt(s, f), RILL_EINVAL);
    rill_session_destroy(&f);
    free(want);
    rill_session_destroy(&s);
    test_rig_close(&g);
}
END_TEST

START_TEST(unwindowed_fork_does_not_evict) {
    rig_t g;
    rig_open(&g, QWEN, 4096);
    int32_t toks[120];
    test_rand_tokens(test_rng(), toks, 120, g.V);
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 64;
    rill_session_t *s = NULL, *f = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, toks, 80), RILL_OK); /* the window is full */
    ck_assert_int_eq(rill_session_fork_unwindowed(s, &f), RILL_OK);
    int free0 = rill_session_pool_n_free(g.pool);
    ck_assert_int_eq(rill_session_append(f, toks + 80, 40), RILL_OK);
    rill_session_stats_t st;
    rill_session_stats(f, &st);
    ck_assert_int_eq(st.n_evicted, 0);
    ck_assert_int_eq(st.n_resident, 120);
    ck_assert_int_eq(free0 - rill_session_pool_n_free(g.pool), 3); /* new pages only */
    float *want = malloc((size_t)g.V * sizeof *want);
    ref_logits(&g, toks, 120, want);
    check_close(logits_of(f), want, g.V, 1e-4, "unwindowed fork");
    free(want);
    rill_session_destroy(&f);
    rill_session_destroy(&s);
    test_rig_close(&g);
}
END_TEST

int main(void) {
    if (!test_have_models(QWEN, LLAMA, NULL)) {
        return TEST_SKIP;
    }
    Suite *su = suite_create("sessions");
    TCase *tc = tcase_create("sessions");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, chunked_appends_equal_one_shot);
    tcase_add_test(tc, query_leaves_session_identical);
    tcase_add_test(tc, quantized_caches_fork_rollback_window);
    tcase_add_test(tc, random_ops_match_reprefill);
    tcase_add_test(tc, random_ops_with_window_match_reprefill_1_layer);
    tcase_add_test(tc, eviction_rotates_keys_qwen2_neox);
    tcase_add_test(tc, eviction_rotates_keys_llama_norm);
    tcase_add_test(tc, one_layer_eviction_equals_fresh_prefill);
    tcase_add_test(tc, endless_stream_in_bounded_memory);
    tcase_add_test(tc, exhausted_budget_changes_nothing);
    tcase_add_test(tc, text_chunks_equal_whole_text_bpe);
    tcase_add_test(tc, text_chunks_equal_whole_text_spm);
    tcase_add_test(tc, arguments_are_checked);
    tcase_add_test(tc, allocation_failures_leave_everything_as_it_was);
    tcase_add_test(tc, step_batches_sessions_like_lone_appends);
    tcase_add_test(tc, cancelled_step_changes_nothing);
    tcase_add_test(tc, queue_fork_rollback_and_adopt);
    tcase_add_test(tc, unwindowed_fork_does_not_evict);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
