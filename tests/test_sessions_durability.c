/*
 * test_sessions_durability.c - the ingest log, snapshots and restore of sessions/ (DESIGN.md
 * section 4, "Durability"; issue 4 items 6 and 8).
 *
 * What "the same state" means here: the same stats, sequence number, resident tokens, held-back
 * text, logits (bit for bit: memcmp) and K/V bytes of every resident row of every layer. A
 * snapshot restores exactly that; replaying a log repeats the same computation (same backend,
 * same max_batch), so it is bit-identical too. Tolerances: none.
 *
 * Failure paths on purpose: truncated and bit-flipped snapshots at many offsets, torn and
 * corrupt logs, a wrong model, a full budget, the N-th allocation failing (rill_mem_fail_nth)
 * and the N-th file call failing (rill__session_io_fail_nth, session_internal.h); each returns
 * its documented error, leaks nothing (n_live) and leaves the pool as it was. The crash test
 * fork()s a child that ingests with FSYNC_ALWAYS and reports each acknowledged batch on a pipe,
 * SIGKILLs it mid-ingest, and restores.
 *
 * Model: rill-tiny-qwen2-Q8_0.gguf (tools/make_test_models.py; exit 77 without it). Files live
 * in a fresh directory under /tmp, removed at the end.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "session_internal.h" /* the I/O failure hook and the session's held-back text */
#include "test_util.h"

#define MODEL     "rill-tiny-qwen2-Q8_0.gguf"
#define MODEL_F32 "rill-tiny-qwen2-F32.gguf"
#define LLAMA     "rill-tiny-llama-Q8_0.gguf"
#define LOG_HDR   128
#define REC_HDR   24

static char g_dir[64];

/* ---- the rig -------------------------------------------------------------------------------- */

typedef test_rig_t rig_t;

/* The suite's rig: forward passes of at most 32 tokens. */
static test_rig_params_t rig_params(const char *model, int64_t cells, rill_dtype_t kv,
                                    int32_t page) {
    test_rig_params_t p = test_rig_default_params(model);
    p.forward.max_batch = 32;
    p.pool.n_cells = cells;
    p.pool.kv_type = kv;
    p.pool.page_size = page;
    return p;
}

static void rig_open_ex(rig_t *g, const char *model, int64_t cells, rill_dtype_t kv, int32_t page) {
    test_rig_params_t p = rig_params(model, cells, kv, page);
    test_rig_open(g, &p);
}

static void rig_open(rig_t *g, int64_t cells) {
    rig_open_ex(g, MODEL, cells, RILL_DTYPE_F16, RILL_KV_PAGE_SIZE);
}

static rill_session_t *new_session(rig_t *g, int32_t sinks, int32_t window) {
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = sinks;
    sp.window = window;
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g->pool, &sp, &s), RILL_OK);
    return s;
}

/* ---- files ---------------------------------------------------------------------------------- */

/* Files in the temporary directory whose name contains ".tmp." (left-over temporary files). */
static int count_tmp_files(void) {
    DIR *d = opendir(g_dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d)) {
        n += strstr(e->d_name, ".tmp.") != NULL;
    }
    closedir(d);
    return n;
}

/* ---- state of a session --------------------------------------------------------------------- */

typedef test_state_t state_t;

/* Asserts a == b (pages_shared aside: a restored session owns all its pages). */
static void state_equal(rig_t *g, const state_t *a, const state_t *b, const char *what) {
    ck_assert_msg(a->st.n_seen == b->st.n_seen && a->st.n_resident == b->st.n_resident &&
                      a->st.n_sink == b->st.n_sink && a->st.kept_from == b->st.kept_from &&
                      a->st.pos_next == b->st.pos_next && a->st.pages == b->st.pages &&
                      a->st.bytes == b->st.bytes && a->st.n_evicted == b->st.n_evicted &&
                      a->st.n_sink_cfg == b->st.n_sink_cfg && a->st.window_cfg == b->st.window_cfg,
                  "%s: stats differ (n_seen %lld / %lld, resident %d / %d, evicted %lld / %lld)",
                  what, (long long)a->st.n_seen, (long long)b->st.n_seen, a->st.n_resident,
                  b->st.n_resident, (long long)a->st.n_evicted, (long long)b->st.n_evicted);
    ck_assert_msg(a->seq == b->seq, "%s: seq %lld / %lld", what, (long long)a->seq,
                  (long long)b->seq);
    ck_assert_int_eq(a->n, b->n);
    ck_assert_msg(memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof(int32_t)) == 0,
                  "%s: tokens differ", what);
    ck_assert_msg(a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0 &&
                      a->text_started == b->text_started,
                  "%s: held-back text differs", what);
    ck_assert_msg((a->logits == NULL) == (b->logits == NULL), "%s: logits", what);
    if (a->logits != NULL) {
        ck_assert_msg(memcmp(a->logits, b->logits, (size_t)g->V * sizeof(float)) == 0,
                      "%s: logits are not bit-identical", what);
    }
    ck_assert_uint_eq(a->kv_bytes, b->kv_bytes);
    ck_assert_msg(memcmp(a->kv, b->kv, a->kv_bytes) == 0, "%s: K/V bytes differ", what);
}

/* ---- inputs --------------------------------------------------------------------------------- */

/* Batch b of the crash test: 8 ids that depend on b only. */
static void batch_tokens(int b, int32_t *t, int V) {
    for (int i = 0; i < 8; i++) {
        t[i] = (int32_t)(((uint32_t)b * 2654435761u + (uint32_t)i * 40503u) % (uint32_t)V);
    }
}

static const char *const g_words[] = { "the quick ", "brown fox", " jumps over the", " lazy",
                                       " dog. ",     "And",       " then again ",    "!" };

/* A mixed run of input calls on s (tokens, text chunks, flush, rollback, generate). When `snap`
 * is given, a snapshot is written there halfway. Deterministic in `seed`. */
static void ingest_mix(rig_t *g, rill_session_t *s, uint64_t seed, const char *snap) {
    rill_rand_t r;
    rill_rand_seed(&r, seed);
    int32_t t[40];
    for (int step = 0; step < 24; step++) {
        uint32_t what = test_rand_below(&r, 10);
        rill_err_t err = RILL_OK;
        if (what < 4) {
            int n = 1 + (int)test_rand_below(&r, 12);
            test_rand_tokens(&r, t, n, g->V);
            err = rill_session_append(s, t, n);
        } else if (what < 7) {
            const char *w = g_words[test_rand_below(&r, 8)];
            err = rill_session_append_text(s, w, strlen(w));
        } else if (what == 7) {
            err = rill_session_flush_text(s);
        } else if (what == 8) {
            rill_session_stats_t st;
            rill_session_stats(s, &st);
            err = rill_session_rollback(s, st.n_resident >= 3 ? st.n_resident - 3 : 0);
        } else {
            int32_t out[3];
            rill_session_gen_t gen = { .n_max = 3, .out = out };
            rill_session_stats_t st;
            rill_session_stats(s, &st);
            if (st.n_resident > 0) {
                err = rill_session_generate(s, &gen);
            }
        }
        ck_assert_msg(err == RILL_OK, "step %d: %s", step, rill_last_error(RILL_OK));
        if (snap != NULL && step == 11) {
            ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK);
        }
    }
}

static rill_session_t *restore_ok(rig_t *g, const char *snap, const char *log,
                                  rill_session_fsync_t policy) {
    rill_session_t *r = NULL;
    rill_err_t err = rill_session_restore(g->pool, snap, log, policy, &r);
    ck_assert_msg(err == RILL_OK, "restore: %s: %s", rill_err_name(err), rill_last_error(err));
    ck_assert_ptr_nonnull(r);
    return r;
}

/* ---- snapshot ------------------------------------------------------------------------------- */

/* On a pool of cache types (k, v): a windowed stream past several evictions (K re-rotated in
 * place, for a quantized K decoded, rotated and quantized again), a fork, a rollback, each
 * snapshotted, destroyed and restored to the same bytes. */
static void snapshot_roundtrip(rill_dtype_t k, int32_t v) {
    rig_t g;
    test_rig_params_t p = rig_params(MODEL, 1024, k, RILL_KV_PAGE_SIZE);
    p.pool.kv_type_v = v;
    test_rig_open(&g, &p);
    const char *snap = test_path_in(g_dir, "a.snap");
    /* Three shapes: a windowed stream past several evictions with held-back text; a fork that
     * shares pages with it; a session whose logits a rollback invalidated. */
    for (int shape = 0; shape < 3; shape++) {
        rill_session_t *s = new_session(&g, 16, 64), *f = NULL, *subject = s;
        int32_t t[200];
        test_rand_tokens(test_rng(), t, 200, g.V);
        ck_assert_int_eq(rill_session_append(s, t, 200), RILL_OK);
        ck_assert_int_eq(rill_session_append_text(s, "hello there wor", 15), RILL_OK);
        ck_assert_uint_gt(rill_session_pending_text(s), 0);
        if (shape == 1) {
            ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
            ck_assert_int_eq(rill_session_append(f, t, 5), RILL_OK);
            subject = f;
        } else if (shape == 2) {
            ck_assert_int_eq(rill_session_rollback(s, 50), RILL_OK);
        }
        ck_assert_int_eq(rill_session_snapshot(subject, snap), RILL_OK);
        ck_assert_int_eq(count_tmp_files(), 0);
        state_t want, got;
        test_state_capture(&g, subject, &want);
        if (shape == 2) {
            ck_assert(want.text_len == 0);
        }
        rill_session_destroy(&f);
        rill_session_destroy(&s);
        ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
        rill_session_t *r = restore_ok(&g, snap, NULL, RILL_SESSION_FSYNC_EVERYSEC);
        ck_assert(!rill_session_has_log(r));
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "snapshot -> destroy -> restore");
        rill_session_stats_t st;
        rill_session_stats(r, &st);
        ck_assert_int_eq(st.pages_shared, 0);
        /* The restored session goes on exactly like the original would have. */
        rill_session_t *twin = restore_ok(&g, snap, NULL, RILL_SESSION_FSYNC_EVERYSEC);
        ck_assert_int_eq(rill_session_append_text(r, "ld ok 1 2 3", 11), RILL_OK);
        ck_assert_int_eq(rill_session_append_text(twin, "ld ok 1 2 3", 11), RILL_OK);
        ck_assert_int_eq(rill_session_append(r, t + 10, 90), RILL_OK);
        ck_assert_int_eq(rill_session_append(twin, t + 10, 90), RILL_OK);
        test_state_free(&want);
        test_state_free(&got);
        test_state_capture(&g, r, &want);
        test_state_capture(&g, twin, &got);
        state_equal(&g, &want, &got, "two restores continued");
        test_state_free(&want);
        test_state_free(&got);
        rill_session_destroy(&r);
        rill_session_destroy(&twin);
    }
    /* An empty session round-trips too. */
    rill_session_t *e = new_session(&g, 0, 0), *r = NULL;
    ck_assert_int_eq(rill_session_snapshot(e, snap), RILL_OK);
    r = restore_ok(&g, snap, NULL, RILL_SESSION_FSYNC_NEVER);
    rill_session_stats_t st;
    rill_session_stats(r, &st);
    ck_assert_int_eq(st.n_resident, 0);
    ck_assert_int_eq(st.pages, 0);
    rill_session_destroy(&e);
    rill_session_destroy(&r);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_dir_clear(g_dir);
    test_rig_close(&g);
}

START_TEST(snapshot_destroy_restore_is_bit_identical) {
    snapshot_roundtrip(RILL_DTYPE_F16, RILL_SESSION_KV_SAME);
}
END_TEST

START_TEST(quantized_caches_snapshot_and_restore_bit_identical) {
    snapshot_roundtrip(RILL_DTYPE_Q8_0, RILL_SESSION_KV_SAME);
    snapshot_roundtrip(RILL_DTYPE_Q4_0, RILL_DTYPE_Q8_0);
    snapshot_roundtrip(RILL_DTYPE_F16, RILL_DTYPE_Q4_0);
}
END_TEST

/* The whole file, malloc'ed (*n bytes). */
static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

/* rill_session_snapshot_volatile writes the very bytes of rill_session_snapshot, with fewer file
 * calls (no fsync of the log, the file or the folder), restores to the same state, and a failed
 * write leaves neither the file nor a temporary one. */
START_TEST(volatile_snapshots_are_the_same_file_without_fsync) {
    rig_t g;
    test_rig_params_t p = rig_params(MODEL, 1024, RILL_DTYPE_F16, RILL_KV_PAGE_SIZE);
    test_rig_open(&g, &p);
    const char *logp = test_path_in(g_dir, "v.log");
    char durable[512], fast[512];
    snprintf(durable, sizeof durable, "%s", test_path_in(g_dir, "d.snap"));
    snprintf(fast, sizeof fast, "%s", test_path_in(g_dir, "v.snap"));
    rill_session_t *s = new_session(&g, 16, 64);
    ck_assert_int_eq(rill_session_open_log(s, logp, RILL_SESSION_FSYNC_EVERYSEC), RILL_OK);
    int32_t t[150];
    test_rand_tokens(test_rng(), t, 150, g.V);
    ck_assert_int_eq(rill_session_append(s, t, 150), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "some held text", 14), RILL_OK);
    int64_t c0 = rill__session_io_calls();
    ck_assert_int_eq(rill_session_snapshot(s, durable), RILL_OK);
    int64_t c1 = rill__session_io_calls();
    ck_assert_int_eq(rill_session_snapshot_volatile(s, fast), RILL_OK);
    int64_t c2 = rill__session_io_calls();
    ck_assert_int_ge((c1 - c0) - (c2 - c1), 2); /* the file's and the folder's fsyncs at least */
    size_t nd = 0, nv = 0;
    unsigned char *bd = slurp(durable, &nd), *bv = slurp(fast, &nv);
    ck_assert_uint_eq(nd, nv);
    ck_assert_mem_eq(bd, bv, nd);
    free(bd);
    free(bv);
    state_t want, got;
    test_state_capture(&g, s, &want);
    rill_session_destroy(&s);
    rill_session_t *r = restore_ok(&g, fast, logp, RILL_SESSION_FSYNC_NEVER);
    test_state_capture(&g, r, &got);
    state_equal(&g, &want, &got, "volatile snapshot -> restore");
    test_state_free(&want);
    test_state_free(&got);
    unlink(fast);
    for (int k = 1; k <= 3; k++) {
        rill__session_io_fail_nth(k);
        rill_err_t err = rill_session_snapshot_volatile(r, fast);
        rill__session_io_fail_nth(0);
        ck_assert_int_eq(err, RILL_EIO);
        ck_assert_int_ne(access(fast, F_OK), 0);
        ck_assert_int_eq(count_tmp_files(), 0);
    }
    rill_session_destroy(&r);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* ---- log replay ----------------------------------------------------------------------------- */

START_TEST(restore_and_replay_reach_the_uninterrupted_state) {
    rig_t g;
    rig_open(&g, 2048);
    const char *snap = test_path_in(g_dir, "b.snap"), *log = test_path_in(g_dir, "b.log");
    for (int window = 0; window < 2; window++) {
        int32_t sinks = window ? 16 : 0, w = window ? 48 : 0;
        uint64_t seed = 0x1234u + (uint64_t)window;
        rill_session_t *u = new_session(&g, sinks, w), *l = new_session(&g, sinks, w);
        ck_assert_int_eq(rill_session_open_log(l, log, RILL_SESSION_FSYNC_EVERYSEC), RILL_OK);
        ck_assert(rill_session_has_log(l));
        ck_assert_int_eq(rill_session_open_log(u, log, RILL_SESSION_FSYNC_NEVER), RILL_EEXIST);
        ck_assert(!rill_session_has_log(u));
        ingest_mix(&g, u, seed, NULL);
        ingest_mix(&g, l, seed, snap);
        /* A query runs on a fork: neither logged nor changing the session. */
        int32_t q[4] = { 1, 2, 3, 4 };
        rill_session_gen_t gen = { .n_max = 2 };
        ck_assert_int_eq(rill_session_query(l, q, 4, &gen), RILL_OK);
        state_t want, got;
        test_state_capture(&g, u, &want);
        ck_assert_int_eq(rill_session_seq(l), want.seq);
        ck_assert_int_eq(rill_session_close_log(l), RILL_OK);
        rill_session_destroy(&l);

        rill_session_t *r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_EVERYSEC);
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "snapshot + log");
        test_state_free(&got);
        /* The restored session continues the same log. */
        ck_assert(rill_session_has_log(r));
        int32_t more[20];
        test_rand_tokens(test_rng(), more, 20, g.V);
        ck_assert_int_eq(rill_session_append(r, more, 20), RILL_OK);
        ck_assert_int_eq(rill_session_append(u, more, 20), RILL_OK);
        ck_assert_int_eq(rill_session_append_text(r, "tail text", 9), RILL_OK);
        ck_assert_int_eq(rill_session_append_text(u, "tail text", 9), RILL_OK);
        /* While r holds the log, nobody else may restore it. */
        rill_session_t *x = NULL;
        ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_EVERYSEC, &x),
                         RILL_EBUSY);
        ck_assert_ptr_null(x);
        rill_session_destroy(&r);

        test_state_free(&want);
        test_state_capture(&g, u, &want);
        r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "log alone");
        test_state_free(&got);
        rill_session_destroy(&r);
        r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_ALWAYS);
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "snapshot + longer log");
        test_state_free(&got);
        rill_session_destroy(&r);

        /* A log that lost records the snapshot holds is started afresh after the snapshot. */
        size_t len = 0;
        unsigned char *bytes = test_read_file(log, &len);
        test_write_file(log, bytes, LOG_HDR); /* header only: it ends before the snapshot */
        free(bytes);
        r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_ALWAYS);
        ck_assert_int_eq(rill_session_append(r, more, 3), RILL_OK);
        test_state_free(&want);
        test_state_capture(&g, r, &want);
        rill_session_destroy(&r);
        r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_ALWAYS);
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "snapshot + restarted log");
        test_state_free(&got);
        test_state_free(&want);
        rill_session_destroy(&r);
        rill_session_destroy(&u);
        test_dir_clear(g_dir);
    }
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}
END_TEST

/* Writes a log of n_batch token batches of 8 (records of REC_HDR + 32 bytes); returns the
 * state after the first n_keep batches, from a session without a log. */
static void make_log(rig_t *g, const char *log, int n_batch, int n_keep, state_t *keep) {
    rill_session_t *s = new_session(g, 0, 0), *ref = new_session(g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    for (int b = 0; b < n_batch; b++) {
        int32_t t[8];
        batch_tokens(b, t, g->V);
        ck_assert_int_eq(rill_session_append(s, t, 8), RILL_OK);
        if (b < n_keep) {
            ck_assert_int_eq(rill_session_append(ref, t, 8), RILL_OK);
        }
    }
    rill_session_destroy(&s);
    if (keep != NULL) {
        test_state_capture(g, ref, keep);
    }
    rill_session_destroy(&ref);
}

START_TEST(torn_last_record_is_dropped) {
    rig_t g;
    rig_open(&g, 1024);
    const char *log = test_path_in(g_dir, "c.log");
    state_t five, six, got;
    make_log(&g, log, 6, 5, &five);
    size_t len = 0;
    unsigned char *whole = test_read_file(log, &len);
    const size_t rec = REC_HDR + 32;
    ck_assert_uint_eq(len, LOG_HDR + 6 * rec);
    {
        rill_session_t *r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
        test_state_capture(&g, r, &six);
        rill_session_destroy(&r);
    }
    test_log_t warns = { .only = NULL };
    test_log_capture(&warns); /* the torn-tail warning */
    /* The file ends anywhere inside the last record, or the record is whole in length but its
     * bytes never made it (zeros, or one byte off), or zeros follow the log. */
    for (size_t cut = 1; cut <= rec + 3; cut++) {
        unsigned char *b = malloc(len + 64);
        memcpy(b, whole, len);
        size_t n = len;
        const char *kind;
        if (cut < rec) {
            n = len - cut;
            kind = "short";
        } else if (cut == rec) {
            memset(b + len - 32, 0, 32);
            kind = "zeroed payload";
        } else if (cut == rec + 1) {
            b[len - rec + 3] ^= 0x40; /* in the CRC field */
            kind = "bad CRC";
        } else if (cut == rec + 2) {
            memset(b + len - rec, 0, rec);
            kind = "zeroed record";
        } else {
            memset(b + len, 0, 64);
            n = len + 64;
            kind = "zero fill after the log";
        }
        test_write_file(log, b, n);
        free(b);
        test_log_reset(&warns);
        rill_session_t *r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
        test_state_capture(&g, r, &got);
        state_equal(&g, cut == rec + 3 ? &six : &five, &got, kind);
        test_state_free(&got);
        ck_assert_msg(warns.n_level[RILL_LOG_WARN] == 1 && strstr(warns.last_warn, "torn") != NULL,
                      "%s: %d warnings, last '%s'", kind, warns.n_level[RILL_LOG_WARN],
                      warns.last_warn);
        /* The file was cut after the last whole record, and the log goes on from there. */
        ck_assert_int_eq(test_file_size(log), (int64_t)(cut == rec + 3 ? len : len - rec));
        int32_t t[8];
        batch_tokens(cut == rec + 3 ? 6 : 5, t, g.V);
        ck_assert_int_eq(rill_session_append(r, t, 8), RILL_OK);
        rill_session_destroy(&r);
        test_log_reset(&warns);
        r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
        ck_assert_int_eq(warns.n_level[RILL_LOG_WARN], 0);
        if (cut != rec + 3) {
            test_state_capture(&g, r, &got);
            state_equal(&g, &six, &got, "after the torn record was written again");
            test_state_free(&got);
        }
        rill_session_destroy(&r);
    }
    test_log_release();
    free(whole);
    test_state_free(&five);
    test_state_free(&six);
    test_dir_clear(g_dir);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_rig_close(&g);
}
END_TEST

START_TEST(corruption_before_the_tail_is_an_error) {
    rig_t g;
    rig_open(&g, 1024);
    const char *log = test_path_in(g_dir, "d.log");
    make_log(&g, log, 6, 0, NULL);
    size_t len = 0;
    unsigned char *whole = test_read_file(log, &len);
    const size_t rec = REC_HDR + 32;
    test_pool_view_t before;
    test_pool_view(g.pool, &before);
    int64_t live = rill_mem_stats_total().n_live;
    struct {
        size_t off;
        rill_err_t want;
        const char *needle;
    } cases[] = {
        { LOG_HDR + 2 * rec + REC_HDR + 5, RILL_ECORRUPT, "offset 240" }, /* record 2 payload */
        { LOG_HDR + 0 * rec + 17, RILL_ECORRUPT, "offset 128" },          /* record 0 seq */
        { LOG_HDR + 4 * rec + 4, RILL_ECORRUPT, "offset 352" },           /* record 4 length */
        { 40, RILL_ECORRUPT, "header checksum" },
        { 0, RILL_EFORMAT, "magic" },
        { 8, RILL_EUNSUPPORTED, "version" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char *b = malloc(len);
        memcpy(b, whole, len);
        b[cases[c].off] ^= 0x01;
        test_write_file(log, b, len);
        rill_session_t *r = NULL;
        rill_err_t err = rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r);
        ck_assert_msg(err == cases[c].want && strstr(rill_last_error(err), cases[c].needle) != NULL,
                      "flip at %zu: %s: %s", cases[c].off, rill_err_name(err),
                      rill_last_error(err));
        ck_assert_ptr_null(r);
        size_t len2 = 0;
        unsigned char *after = test_read_file(log, &len2);
        ck_assert_msg(len2 == len && memcmp(after, b, len) == 0, "the log was changed");
        free(after);
        free(b);
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    /* Records with valid checksums that still do not fit: a sequence number out of order, an
     * unknown type (a newer writer), a payload of the wrong size. */
    struct {
        uint32_t type, len;
        uint64_t seq;
        rill_err_t want;
        const char *needle;
    } forged[] = {
        { RILL__REC_TOKENS, 32, 9, RILL_ECORRUPT, "sequence number 9" },
        { 9, 32, 3, RILL_EUNSUPPORTED, "type 9" },
        { RILL__REC_ROLLBACK, 32, 3, RILL_ECORRUPT, "type 4 with 32 bytes" },
    };
    for (size_t c = 0; c < sizeof forged / sizeof forged[0]; c++) {
        unsigned char *b = malloc(len);
        memcpy(b, whole, len);
        unsigned char *r2 = b + LOG_HDR + 2 * rec; /* record 2 (sequence number 3) */
        rill__put_u32(r2 + 4, forged[c].len);
        rill__put_u32(r2 + 8, forged[c].type);
        rill__put_u64(r2 + 16, forged[c].seq);
        rill__put_u32(r2, rill__crc32c(0, r2 + 4, REC_HDR - 4 + forged[c].len));
        test_write_file(log, b, len);
        free(b);
        rill_session_t *r = NULL;
        rill_err_t err = rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r);
        ck_assert_msg(err == forged[c].want &&
                          strstr(rill_last_error(err), forged[c].needle) != NULL &&
                          strstr(rill_last_error(err), "offset 240") != NULL,
                      "forged %zu: %s: %s", c, rill_err_name(err), rill_last_error(err));
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    /* A log header shorter than a header, and an empty file. */
    for (size_t n = 0; n < LOG_HDR; n += 9) {
        test_write_file(log, whole, n);
        rill_session_t *r = NULL;
        ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, RILL_SESSION_FSYNC_NEVER, &r),
                         RILL_EFORMAT);
        ck_assert_ptr_null(r);
    }
    free(whole);
    test_pool_same(g.pool, &before);
    ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

START_TEST(damaged_snapshots_are_refused_cleanly) {
    rig_t g;
    rig_open(&g, 1024);
    const char *snap = test_path_in(g_dir, "e.snap"), *bad = test_path_in(g_dir, "e-bad.snap");
    rill_session_t *s = new_session(&g, 16, 32);
    int32_t t[70];
    test_rand_tokens(test_rng(), t, 70, g.V);
    ck_assert_int_eq(rill_session_append(s, t, 70), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "some held text", 14), RILL_OK);
    ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK);
    size_t len = 0;
    unsigned char *whole = test_read_file(snap, &len);
    test_pool_view_t before;
    test_pool_view(g.pool, &before);
    int64_t live = rill_mem_stats_total().n_live;
    /* Every cut in the header and the small sections, then every 97th byte, then the tail. */
    int n_cuts = 0;
    for (size_t cut = 0; cut < len; cut += cut < 1024 ? 1 : cut + 16 >= len ? 1 : 97) {
        test_write_file(bad, whole, cut);
        rill_session_t *r = NULL;
        rill_err_t err = rill_session_restore(g.pool, bad, NULL, RILL_SESSION_FSYNC_NEVER, &r);
        ck_assert_msg(err == RILL_EFORMAT, "cut at %zu of %zu: %s: %s", cut, len,
                      rill_err_name(err), rill_last_error(err));
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
        n_cuts++;
    }
    ck_assert_int_gt(n_cuts, 1100);
    /* A flipped bit anywhere: refused, never accepted and never a crash. */
    for (size_t off = 0; off < len; off += off < 400 ? 1 : 61) {
        unsigned char *b = malloc(len);
        memcpy(b, whole, len);
        b[off] ^= 0x10;
        test_write_file(bad, b, len);
        free(b);
        rill_session_t *r = NULL;
        rill_err_t err = rill_session_restore(g.pool, bad, NULL, RILL_SESSION_FSYNC_NEVER, &r);
        ck_assert_msg(err == RILL_ECORRUPT || err == RILL_EFORMAT || err == RILL_EUNSUPPORTED,
                      "flip at %zu: %s: %s", off, rill_err_name(err), rill_last_error(err));
        if (off >= 160 && off < len - 8) {
            ck_assert_msg(err == RILL_ECORRUPT && strstr(rill_last_error(err), "offset") != NULL,
                          "flip at %zu: %s: %s", off, rill_err_name(err), rill_last_error(err));
        }
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    /* Trailing bytes, a missing file, something that is not a snapshot. */
    unsigned char *b = malloc(len + 1);
    memcpy(b, whole, len);
    b[len] = 0;
    test_write_file(bad, b, len + 1);
    free(b);
    rill_session_t *r = NULL;
    ck_assert_int_eq(rill_session_restore(g.pool, bad, NULL, 0, &r), RILL_EFORMAT);
    ck_assert_int_eq(rill_session_restore(g.pool, test_path_in(g_dir, "none"), NULL, 0, &r),
                     RILL_ENOTFOUND);
    test_write_file(bad, "GGUF and so on, not a snapshot", 30);
    ck_assert_int_eq(rill_session_restore(g.pool, bad, NULL, 0, &r), RILL_EFORMAT);
    ck_assert_ptr_null(r);
    test_pool_same(g.pool, &before);
    free(whole);
    rill_session_destroy(&s);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

START_TEST(another_model_is_refused) {
    const char *snap = test_path_in(g_dir, "f.snap"), *log = test_path_in(g_dir, "f.log");
    {
        rig_t g;
        rig_open(&g, 512);
        rill_session_t *s = new_session(&g, 0, 0);
        ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_ALWAYS), RILL_OK);
        int32_t t[20];
        test_rand_tokens(test_rng(), t, 20, g.V);
        ck_assert_int_eq(rill_session_append(s, t, 20), RILL_OK);
        ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK);
        /* an F16 pool's fingerprint field of the cache types is the type id alone (1), as
         * before K and V had types of their own: older files still load */
        unsigned char h[24 + 64];
        FILE *f = fopen(snap, "rb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fread(h, 1, sizeof h, f), sizeof h);
        fclose(f);
        ck_assert_uint_eq(h[24 + 48] | h[24 + 49] << 8 | h[24 + 50] << 16 | h[24 + 51] << 24, 1);
        rill_session_destroy(&s);
        test_rig_close(&g);
    }
    struct {
        const char *model;
        rill_dtype_t kv;
        int32_t page;
        const char *field;
    } others[] = {
        { MODEL_F32, RILL_DTYPE_F16, 16, "GGUF file size" }, /* same shape, other weights */
        { LLAMA, RILL_DTYPE_F16, 16, "architecture" },
        { MODEL, RILL_DTYPE_F32, 16, "KV cache types K f16, V f16; this pool has K f32" },
        { MODEL, RILL_DTYPE_Q8_0, 16, "KV cache types K f16, V f16; this pool has K q8_0" },
        { MODEL, RILL_DTYPE_Q4_0, 16, "this pool has K q4_0, V q4_0" },
        { MODEL, RILL_DTYPE_F16, 8, "page size" },
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        rig_t g;
        rig_open_ex(&g, others[i].model, 512, others[i].kv, others[i].page);
        int64_t live = rill_mem_stats_total().n_live;
        const char *paths[3][2] = { { snap, NULL }, { NULL, log }, { snap, log } };
        for (int k = 0; k < 3; k++) {
            rill_session_t *r = NULL;
            rill_err_t err = rill_session_restore(g.pool, paths[k][0], paths[k][1],
                                                  RILL_SESSION_FSYNC_NEVER, &r);
            ck_assert_msg(err == RILL_EUNSUPPORTED &&
                              strstr(rill_last_error(err), others[i].field) != NULL,
                          "%s: %s: %s", others[i].model, rill_err_name(err), rill_last_error(err));
            ck_assert_ptr_null(r);
        }
        ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
        test_rig_close(&g);
    }
    test_dir_clear(g_dir);
}
END_TEST

START_TEST(a_budget_too_small_is_efull_and_changes_nothing) {
    rig_t g;
    rig_open(&g, 10 * 16); /* 10 pages */
    const char *snap = test_path_in(g_dir, "g.snap"), *log = test_path_in(g_dir, "g.log");
    rill_session_t *s = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    int32_t t[100];
    test_rand_tokens(test_rng(), t, 100, g.V);
    ck_assert_int_eq(rill_session_append(s, t, 60), RILL_OK); /* 4 pages */
    ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, t + 60, 40), RILL_OK); /* 7 pages */
    rill_session_destroy(&s);
    size_t len = 0;
    unsigned char *log_bytes = test_read_file(log, &len);
    /* Another session takes 7 of the 10 pages: the snapshot (4) does not fit. */
    rill_session_t *other = new_session(&g, 0, 0);
    ck_assert_int_eq(rill_session_append(other, t, 100), RILL_OK);
    test_pool_view_t before;
    test_pool_view(g.pool, &before);
    int64_t live = rill_mem_stats_total().n_live;
    rill_session_t *r = NULL;
    ck_assert_int_eq(rill_session_restore(g.pool, snap, log, 0, &r), RILL_EFULL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFULL), "pages"));
    ck_assert_ptr_null(r);
    test_pool_same(g.pool, &before);
    ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    /* Now 5 free: the snapshot fits, the replay (7 pages) does not. */
    ck_assert_int_eq(rill_session_rollback(other, 80), RILL_OK);
    test_pool_view(g.pool, &before);
    ck_assert_int_eq(rill_session_restore(g.pool, snap, log, 0, &r), RILL_EFULL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFULL), "replaying record"));
    ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, 0, &r), RILL_EFULL);
    ck_assert_ptr_null(r);
    test_pool_same(g.pool, &before);
    ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    size_t len2 = 0;
    unsigned char *after = test_read_file(log, &len2);
    ck_assert(len2 == len && memcmp(after, log_bytes, len) == 0);
    free(after);
    /* With room, both work. */
    rill_session_destroy(&other);
    r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_NEVER);
    rill_session_stats_t st;
    rill_session_stats(r, &st);
    ck_assert_int_eq(st.n_resident, 100);
    rill_session_destroy(&r);
    free(log_bytes);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* ---- allocation and I/O failures ------------------------------------------------------------ */

START_TEST(allocation_failures_in_snapshot_restore_and_open_log) {
    rig_t g;
    rig_open(&g, 1024);
    const char *snap = test_path_in(g_dir, "h.snap"), *log = test_path_in(g_dir, "h.log"),
               *log2 = test_path_in(g_dir, "h2.log");
    rill_session_t *s = new_session(&g, 16, 32);
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    int32_t t[60];
    test_rand_tokens(test_rng(), t, 60, g.V);
    ck_assert_int_eq(rill_session_append(s, t, 30), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "text to replay and ", 19), RILL_OK);
    ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK); /* the "old" snapshot */
    ck_assert_int_eq(rill_session_append(s, t + 30, 30), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "more text, held", 15), RILL_OK);
    rill_session_stats_t st;
    rill_session_stats(s, &st);
    ck_assert_int_eq(rill_session_rollback(s, st.n_resident - 5), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "a longer text that makes the buffers grow ", 42),
                     RILL_OK);
    ck_assert_int_eq(rill_session_sync_log(s), RILL_OK);
    size_t snap_len = 0, log_len = 0;
    unsigned char *snap_bytes = test_read_file(snap, &snap_len);
    unsigned char *log_bytes = test_read_file(log, &log_len);
    int64_t live = rill_mem_stats_total().n_live;

    /* snapshot: every allocation point fails -> RILL_ENOMEM, the old file intact, no temp. */
    int64_t c0 = rill_mem_calls();
    ck_assert_int_eq(rill_session_snapshot(s, test_path_in(g_dir, "h-count.snap")), RILL_OK);
    int64_t points = rill_mem_calls() - c0;
    ck_assert_int_ge(points, 2);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_snapshot(s, snap);
        rill_mem_fail_nth(0);
        ck_assert_int_eq(err, RILL_ENOMEM);
        size_t n = 0;
        unsigned char *now = test_read_file(snap, &n);
        ck_assert(n == snap_len && memcmp(now, snap_bytes, n) == 0);
        free(now);
        ck_assert_int_eq(count_tmp_files(), 0);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    state_t want, got;
    test_state_capture(&g, s, &want);
    rill_session_destroy(&s);

    /* restore (snapshot + log with text records): every allocation point -> RILL_ENOMEM. */
    test_pool_view_t before;
    test_pool_view(g.pool, &before);
    live = rill_mem_stats_total().n_live;
    c0 = rill_mem_calls();
    rill_session_t *r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_NEVER);
    points = rill_mem_calls() - c0;
    test_state_capture(&g, r, &got);
    state_equal(&g, &want, &got, "restore for counting");
    test_state_free(&got);
    rill_session_destroy(&r);
    ck_assert_int_ge(points, 8);
    printf("allocation walk of restore (snapshot + log): %lld points\n", (long long)points);
    for (int64_t k = 1; k <= points; k++) {
        test_write_file(log, log_bytes, log_len);
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_restore(g.pool, snap, log, 0, &r);
        rill_mem_fail_nth(0);
        ck_assert_msg(err == RILL_ENOMEM, "allocation %lld: %s: %s", (long long)k,
                      rill_err_name(err), rill_last_error(err));
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
        size_t n = 0;
        unsigned char *now = test_read_file(log, &n);
        ck_assert(n == log_len && memcmp(now, log_bytes, n) == 0);
        free(now);
    }
    /* ... and the log alone. */
    c0 = rill_mem_calls();
    r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
    points = rill_mem_calls() - c0;
    test_state_capture(&g, r, &got);
    state_equal(&g, &want, &got, "log alone for counting");
    test_state_free(&got);
    rill_session_destroy(&r);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_restore(g.pool, NULL, log, 0, &r);
        rill_mem_fail_nth(0);
        ck_assert_msg(err == RILL_ENOMEM, "allocation %lld: %s: %s", (long long)k,
                      rill_err_name(err), rill_last_error(err));
        test_pool_same(g.pool, &before);
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }

    /* open_log: no file is left behind. */
    s = new_session(&g, 0, 0);
    c0 = rill_mem_calls();
    ck_assert_int_eq(rill_session_open_log(s, log2, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    points = rill_mem_calls() - c0;
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    unlink(log2);
    live = rill_mem_stats_total().n_live;
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t err = rill_session_open_log(s, log2, RILL_SESSION_FSYNC_NEVER);
        rill_mem_fail_nth(0);
        ck_assert_int_eq(err, RILL_ENOMEM);
        ck_assert(!test_file_exists(log2));
        ck_assert(!rill_session_has_log(s));
        ck_assert_int_eq(rill_mem_stats_total().n_live, live);
    }
    rill_session_destroy(&s);
    test_state_free(&want);
    free(snap_bytes);
    free(log_bytes);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

START_TEST(io_failures_lose_nothing_acknowledged) {
    rig_t g;
    rig_open(&g, 1024);
    const char *snap = test_path_in(g_dir, "i.snap"), *log = test_path_in(g_dir, "i.log");
    rill_session_t *s = new_session(&g, 0, 0);

    /* open_log: each file call failing -> an error and no file. */
    int64_t c0 = rill__session_io_calls();
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_ALWAYS), RILL_OK);
    int64_t points = rill__session_io_calls() - c0;
    ck_assert_int_eq(points, 4); /* open, write, fsync, directory fsync */
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    unlink(log);
    for (int64_t k = 1; k <= points; k++) {
        rill__session_io_fail_nth(k);
        rill_err_t err = rill_session_open_log(s, log, RILL_SESSION_FSYNC_ALWAYS);
        rill__session_io_fail_nth(0);
        ck_assert_int_eq(err, RILL_EIO);
        ck_assert(!test_file_exists(log));
        ck_assert(!rill_session_has_log(s));
    }
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_ALWAYS), RILL_OK);

    /* An append whose record cannot be written fails and changes nothing; the log goes on. An
     * fsync that fails makes the log unusable (never retried), still without losing anything
     * that was acknowledged. */
    int32_t t[16];
    test_rand_tokens(test_rng(), t, 16, g.V);
    ck_assert_int_eq(rill_session_append(s, t, 8), RILL_OK);
    state_t before, after;
    test_state_capture(&g, s, &before);
    int64_t size = test_file_size(log);
    rill__session_io_fail_nth(1); /* the writev */
    ck_assert_int_eq(rill_session_append(s, t + 8, 8), RILL_EIO);
    test_state_capture(&g, s, &after);
    state_equal(&g, &before, &after, "failed record write");
    test_state_free(&after);
    ck_assert_int_eq(test_file_size(log), size);
    ck_assert_int_eq(rill_session_append_text(s, "ok now ", 7), RILL_OK);
    test_state_free(&before);
    test_state_capture(&g, s, &before);
    size = test_file_size(log);
    rill__session_io_fail_nth(2); /* the fsync of FSYNC_ALWAYS */
    ck_assert_int_eq(rill_session_rollback(s, 3), RILL_EIO);
    rill__session_io_fail_nth(0);
    test_state_capture(&g, s, &after);
    state_equal(&g, &before, &after, "failed fsync");
    test_state_free(&after);
    ck_assert_int_eq(test_file_size(log), size);
    ck_assert_int_eq(rill_session_append(s, t, 2), RILL_EIO); /* unusable now */
    ck_assert_int_eq(rill_session_sync_log(s), RILL_EIO);
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    rill_session_t *r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_ALWAYS);
    test_state_capture(&g, r, &after);
    state_equal(&g, &before, &after, "restore after I/O errors");
    test_state_free(&after);

    /* snapshot: each file call failing -> an error, the old snapshot or (only when the last
     * call, the directory fsync, fails) the new one at path, and no temporary file. (r's log is
     * closed: a snapshot fsyncs it first, and a failed fsync would retire it.) */
    ck_assert_int_eq(rill_session_close_log(r), RILL_OK);
    ck_assert_int_eq(rill_session_snapshot(r, snap), RILL_OK);
    size_t old_len = 0;
    unsigned char *old = test_read_file(snap, &old_len);
    ck_assert_int_eq(rill_session_append(r, t, 16), RILL_OK);
    c0 = rill__session_io_calls();
    ck_assert_int_eq(rill_session_snapshot(r, test_path_in(g_dir, "i-count.snap")), RILL_OK);
    points = rill__session_io_calls() - c0;
    ck_assert_int_ge(points, 8);
    printf("I/O failure walk of snapshot: %lld points\n", (long long)points);
    for (int64_t k = 1; k <= points; k++) {
        test_write_file(snap, old, old_len);
        rill__session_io_fail_nth(k);
        rill_err_t err = rill_session_snapshot(r, snap);
        rill__session_io_fail_nth(0);
        ck_assert_int_eq(err, RILL_EIO);
        ck_assert_int_eq(count_tmp_files(), 0);
        size_t n = 0;
        unsigned char *now = test_read_file(snap, &n);
        if (k < points) {
            ck_assert(n == old_len && memcmp(now, old, n) == 0);
        } else {
            ck_assert_uint_ne(n, old_len); /* renamed: the new one */
        }
        free(now);
        rill_session_t *x = restore_ok(&g, snap, NULL, RILL_SESSION_FSYNC_NEVER);
        rill_session_destroy(&x);
    }
    free(old);
    test_state_free(&before);
    rill_session_destroy(&r);
    rill_session_destroy(&s);

    /* The fsync policies, counted in file calls: ALWAYS = write + fsync per call; EVERYSEC =
     * write, plus an fsync once a second has passed, plus one at close; NEVER = write only. */
    s = new_session(&g, 0, 0);
    const char *pl = test_path_in(g_dir, "i-policy.log");
    rill_session_fsync_t pols[3] = { RILL_SESSION_FSYNC_ALWAYS, RILL_SESSION_FSYNC_EVERYSEC,
                                     RILL_SESSION_FSYNC_NEVER };
    for (int k = 0; k < 3; k++) {
        unlink(pl);
        ck_assert_int_eq(rill_session_open_log(s, pl, pols[k]), RILL_OK);
        c0 = rill__session_io_calls();
        ck_assert_int_eq(rill_session_append(s, t, 1), RILL_OK);
        ck_assert_int_eq(rill__session_io_calls() - c0, k == 0 ? 2 : 1);
        if (k == 1) {
            usleep(1100 * 1000);
            c0 = rill__session_io_calls();
            ck_assert_int_eq(rill_session_append(s, t, 1), RILL_OK);
            ck_assert_int_eq(rill__session_io_calls() - c0, 2);
            ck_assert_int_eq(rill_session_append(s, t, 1), RILL_OK);
            ck_assert_int_eq(rill__session_io_calls() - c0, 3);
        }
        c0 = rill__session_io_calls();
        ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
        ck_assert_int_eq(rill__session_io_calls() - c0, k == 1 ? 1 : 0);
    }
    rill_session_destroy(&s);

    /* restore: cutting a torn tail can fail (the file calls after the reads). */
    make_log(&g, log = test_path_in(g_dir, "i2.log"), 3, 0, NULL);
    size_t len = 0;
    unsigned char *whole = test_read_file(log, &len);
    test_write_file(log, whole, len - 5);
    c0 = rill__session_io_calls();
    r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_ALWAYS);
    points = rill__session_io_calls() - c0;
    rill_session_destroy(&r);
    ck_assert_int_eq(points, 3); /* open, ftruncate, fsync */
    test_pool_view_t pv;
    test_pool_view(g.pool, &pv);
    test_log_quiet(); /* the torn tail is reported on every try */
    for (int64_t k = 1; k <= points; k++) {
        test_write_file(log, whole, len - 5);
        rill__session_io_fail_nth(k);
        rill_err_t err = rill_session_restore(g.pool, NULL, log, 0, &r);
        rill__session_io_fail_nth(0);
        ck_assert_msg(err == RILL_EIO, "%s: %s", rill_err_name(err), rill_last_error(err));
        ck_assert_ptr_null(r);
        test_pool_same(g.pool, &pv);
    }
    test_log_release();
    free(whole);
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

START_TEST(arguments_and_pairing_are_checked) {
    rig_t g;
    rig_open(&g, 512);
    const char *snap = test_path_in(g_dir, "j.snap"), *log = test_path_in(g_dir, "j.log"),
               *log2 = test_path_in(g_dir, "j2.log");
    rill_session_t *s = new_session(&g, 0, 0), *r = NULL;
    ck_assert_int_eq(rill_session_open_log(NULL, log, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_session_open_log(s, NULL, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_session_open_log(s, log, (rill_session_fsync_t)7), RILL_EINVAL);
    ck_assert_int_eq(rill_session_open_log(s, test_path_in(g_dir, "no/such/dir.log"), 0),
                     RILL_ENOTFOUND);
    ck_assert_int_eq(rill_session_snapshot(NULL, snap), RILL_EINVAL);
    ck_assert_int_eq(rill_session_snapshot(s, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_session_snapshot(s, test_path_in(g_dir, "no/such/dir.snap")),
                     RILL_ENOTFOUND);
    ck_assert_int_eq(rill_session_sync_log(s), RILL_OK);
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    ck_assert_int_eq(rill_session_restore(NULL, snap, NULL, 0, &r), RILL_EINVAL);
    ck_assert_int_eq(rill_session_restore(g.pool, NULL, NULL, 0, &r), RILL_EINVAL);
    ck_assert_int_eq(rill_session_restore(g.pool, snap, NULL, 0, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_session_restore(g.pool, snap, NULL, 9, &r), RILL_EINVAL);
    ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, 0, &r), RILL_ENOTFOUND);
    ck_assert_int_eq(rill_session_seq(s), 0);

    /* Sequence numbers: one per input call that changed something. */
    int32_t t[4] = { 1, 2, 3, 4 };
    ck_assert_int_eq(rill_session_append(s, t, 4), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, t, 0), RILL_OK);
    ck_assert_int_eq(rill_session_flush_text(s), RILL_OK);  /* nothing held: not an input */
    ck_assert_int_eq(rill_session_rollback(s, 4), RILL_OK); /* no-op */
    ck_assert_int_eq(rill_session_seq(s), 1);

    /* A log opened after input needs a snapshot; the snapshot pairs only with its own
     * session's log, and only when no records are missing in between. */
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    ck_assert_int_eq(rill_session_open_log(s, log, RILL_SESSION_FSYNC_NEVER), RILL_EEXIST);
    ck_assert(rill_session_has_log(s));
    ck_assert_int_eq(rill_session_append(s, t, 2), RILL_OK);
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    ck_assert_int_eq(rill_session_restore(g.pool, NULL, log, 0, &r), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "begins at record 2"));
    ck_assert_int_eq(rill_session_snapshot(s, snap), RILL_OK); /* covers records 1..2 */
    r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_NEVER);
    ck_assert_int_eq(rill_session_seq(r), 2);
    rill_session_destroy(&r);
    ck_assert_int_eq(rill_session_append(s, t, 1), RILL_OK); /* record 3, unlogged */
    ck_assert_int_eq(rill_session_open_log(s, log2, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    ck_assert_int_eq(rill_session_append(s, t, 1), RILL_OK); /* record 4 */
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    ck_assert_int_eq(rill_session_restore(g.pool, snap, log2, 0, &r), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "missing"));
    rill_session_t *f = NULL;
    ck_assert_int_eq(rill_session_fork(s, &f), RILL_OK);
    ck_assert(!rill_session_has_log(f));
    ck_assert_int_eq(rill_session_seq(f), 4);
    ck_assert_int_eq(rill_session_snapshot(f, snap), RILL_OK);
    rill_session_destroy(&s);
    ck_assert_int_eq(rill_session_restore(g.pool, snap, log2, 0, &r), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "another session"));
    ck_assert_ptr_null(r);
    rill_session_destroy(&f);
    ck_assert_int_eq(rill_session_pool_n_free(g.pool), rill_session_pool_n_pages(g.pool));
    test_dir_clear(g_dir);
    test_rig_close(&g);
}
END_TEST

/* ---- the crash test ------------------------------------------------------------------------- */

/* The child: a session with an FSYNC_ALWAYS log, appending batch after batch and writing each
 * acknowledged batch's number to fd; a snapshot after batch 4. Never returns. */
static _Noreturn void ingest_until_killed(const char *snap, const char *log, int fd) {
    rig_t g;
    test_rig_params_t p = rig_params(MODEL, 1024, RILL_DTYPE_F16, RILL_KV_PAGE_SIZE);
    char msg[512];
    if (test_rig_try(&g, &p, msg, sizeof msg) != 0) { /* no ck_assert in the child */
        _exit(10);
    }
    rill_session_params_t sp = rill_session_default_params();
    sp.n_sink = 16;
    sp.window = 64;
    rill_session_t *s = NULL;
    if (rill_session_new(g.pool, &sp, &s) != RILL_OK ||
        rill_session_open_log(s, log, RILL_SESSION_FSYNC_ALWAYS) != RILL_OK) {
        _exit(11);
    }
    for (int b = 0;; b++) {
        int32_t t[8];
        batch_tokens(b, t, g.V);
        if (rill_session_append(s, t, 8) != RILL_OK) {
            _exit(12);
        }
        if (write(fd, &b, sizeof b) != (ssize_t)sizeof b) {
            _exit(13);
        }
        if (b == 4 && rill_session_snapshot(s, snap) != RILL_OK) {
            _exit(14);
        }
    }
}

START_TEST(sigkill_mid_ingest_loses_no_acknowledged_batch) {
    const char *snap = test_path_in(g_dir, "k.snap"), *log = test_path_in(g_dir, "k.log");
    const int kill_after[] = { 7, 23, 61 };
    for (int round = 0; round < 3; round++) {
        test_dir_clear(g_dir);
        int fds[2];
        ck_assert_int_eq(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            close(fds[0]);
            ingest_until_killed(snap, log, fds[1]);
        }
        close(fds[1]);
        int acked = -1, b = 0, n_read = 0;
        while (read(fds[0], &b, sizeof b) == (ssize_t)sizeof b) {
            ck_assert_int_eq(b, acked + 1);
            acked = b;
            if (++n_read == kill_after[round]) {
                kill(pid, SIGKILL);
            }
        }
        close(fds[0]); /* EOF: the child is gone; every ack it sent has been read */
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                      "the child ended on its own (status %d)", status);
        ck_assert_int_ge(acked, kill_after[round] - 1);

        rig_t g;
        rig_open(&g, 1024);
        /* Every acknowledged batch is in the log (and at most the one in flight besides). */
        rill_session_t *r = restore_ok(&g, NULL, log, RILL_SESSION_FSYNC_NEVER);
        int64_t batches = rill_session_seq(r);
        ck_assert_msg(batches == acked + 1 || batches == acked + 2,
                      "acknowledged %d batches, the log holds %lld", acked + 1, (long long)batches);
        printf("SIGKILL round %d: %d batches acknowledged, %lld in the log\n", round, acked + 1,
               (long long)batches);
        rill_session_stats_t st;
        rill_session_stats(r, &st);
        ck_assert_int_eq(st.n_seen, 8 * batches);
        /* ... with the right contents: the same state as feeding those batches afresh. */
        rill_session_t *ref = new_session(&g, 16, 64);
        for (int64_t k = 0; k < batches; k++) {
            int32_t t[8];
            batch_tokens((int)k, t, g.V);
            ck_assert_int_eq(rill_session_append(ref, t, 8), RILL_OK);
        }
        state_t want, got;
        test_state_capture(&g, ref, &want);
        test_state_capture(&g, r, &got);
        state_equal(&g, &want, &got, "log after SIGKILL");
        test_state_free(&got);
        rill_session_destroy(&r);
        /* The snapshot written before the kill, plus the log, gives the same. */
        if (acked >= 5) {
            r = restore_ok(&g, snap, log, RILL_SESSION_FSYNC_NEVER);
            test_state_capture(&g, r, &got);
            state_equal(&g, &want, &got, "snapshot + log after SIGKILL");
            test_state_free(&got);
            rill_session_destroy(&r);
        }
        test_state_free(&want);
        rill_session_destroy(&ref);
        test_rig_close(&g);
    }
    test_dir_clear(g_dir);
}
END_TEST

int main(void) {
    if (!test_have_models(MODEL, MODEL_F32, LLAMA, NULL)) {
        return TEST_SKIP;
    }
    if (!test_tmpdir_make(g_dir, sizeof g_dir, "durability")) {
        return EXIT_FAILURE;
    }
    Suite *su = suite_create("sessions_durability");
    TCase *tc = tcase_create("durability");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, sigkill_mid_ingest_loses_no_acknowledged_batch);
    tcase_add_test(tc, snapshot_destroy_restore_is_bit_identical);
    tcase_add_test(tc, quantized_caches_snapshot_and_restore_bit_identical);
    tcase_add_test(tc, volatile_snapshots_are_the_same_file_without_fsync);
    tcase_add_test(tc, restore_and_replay_reach_the_uninterrupted_state);
    tcase_add_test(tc, torn_last_record_is_dropped);
    tcase_add_test(tc, corruption_before_the_tail_is_an_error);
    tcase_add_test(tc, damaged_snapshots_are_refused_cleanly);
    tcase_add_test(tc, another_model_is_refused);
    tcase_add_test(tc, a_budget_too_small_is_efull_and_changes_nothing);
    tcase_add_test(tc, allocation_failures_in_snapshot_restore_and_open_log);
    tcase_add_test(tc, io_failures_lose_nothing_acknowledged);
    tcase_add_test(tc, arguments_and_pairing_are_checked);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    test_dir_remove(g_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
