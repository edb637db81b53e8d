/*
 * test_sched_sleep.c - sessions that sleep (rill_scheduler.h, "Sleeping sessions"): under
 * pressure the least recently used sleep and wake on their next command with the answers they
 * would have given awake, token for token (snapshot tier and log tier); pinned sessions stay
 * awake; idle time puts sessions to sleep; the disk budget moves the coldest to the log tier;
 * and the failure paths on purpose: no room and no log, a sleep file that cannot be written
 * (injected I/O failure), a truncated or corrupt sleep file at wake (fallback to the log, or a
 * clear error without one), and allocation failures at wake (every one, SQLite-style).
 *
 * The oracle is a second scheduler over a pool large enough that nothing sleeps, given the same
 * calls: "same answers as if it never slept". Model: the tiny qwen2 F32 file of
 * tests/data/models (skipped without it: exit 77).
 */
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_session.h"
#include "rill_tokenizer.h"
#include "session_internal.h" /* rill__session_io_fail_nth: the injected file failure */
#include "test_util.h"

#define QWEN "rill-tiny-qwen2-F32.gguf"
#define SEC  1000000000LL

/* Sessions of sinks 16 + window 64 reserve 5 pages of 16; the pool has 16 pages of which 6 are
 * held back for forks: two sessions awake at once. */
#define SINKS    16
#define WINDOW   64
#define CELLS    256
#define OVERFLOW 6

/* Two engines on one model: `sch` sleeps (small pool), `ref` never does (large pool). */
typedef struct rig {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be, *rbe;
    rill_forward_t *fw, *rfw;
    rill_session_pool_t *pool, *rpool;
    rill_sched_t *sch, *ref;
    int32_t V;
    char dir[200]; /* sleep files and logs */
} rig_t;

static void rig_open(rig_t *g, int64_t disk_bytes, int64_t idle_ns) {
    memset(g, 0, sizeof *g);
    ck_assert(test_tmpdir_make(g->dir, sizeof g->dir, "sleep"));
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &g->tok), RILL_OK);
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.backend.cpu.n_threads = 1;
    p.forward.max_batch = 64;
    p.pool.kv_type = RILL_DTYPE_F32;
    p.pool.n_cells = CELLS;
    test_engine_open(g->model, g->tok, &p, &g->be, &g->fw, &g->pool);
    p.pool.n_cells = 8192;
    test_engine_open(g->model, g->tok, &p, &g->rbe, &g->rfw, &g->rpool);
    rill_sched_params_t sp = rill_sched_default_params();
    sp.step_tokens = 32;
    sp.overflow_pages = OVERFLOW;
    sp.sleep_dir = g->dir;
    sp.sleep_disk_bytes = disk_bytes;
    sp.sleep_idle_ns = idle_ns;
    ck_assert_int_eq(rill_sched_new(g->pool, &sp, &g->sch), RILL_OK);
    sp.sleep_dir = NULL;
    sp.overflow_pages = -1;
    ck_assert_int_eq(rill_sched_new(g->rpool, &sp, &g->ref), RILL_OK);
    g->V = rill_model_hparams(g->model)->n_vocab;
}

static void rig_close(rig_t *g) {
    rill_sched_destroy(&g->sch);
    rill_sched_destroy(&g->ref);
    test_engine_close(&g->pool, &g->fw, &g->be);
    test_engine_close(&g->rpool, &g->rfw, &g->rbe);
    rill_tokenizer_destroy(&g->tok);
    rill_model_destroy(&g->model);
    /* nothing may be left of the sleepers: the scheduler deletes their files */
    test_dir_remove(g->dir);
}

/* A session on both engines (same policy; a log in the sleeping one's folder when with_log). */
typedef struct pair {
    rill_sched_sid_t a, r; /* sleeping engine's, reference's */
} pair_t;

static pair_t new_pair(rig_t *g, const char *name, bool with_log, bool pin) {
    char logp[300];
    snprintf(logp, sizeof logp, "%s/%s.log", g->dir, name);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.session.n_sink = SINKS;
    sp.session.window = WINDOW;
    sp.pin = pin;
    sp.log_path = with_log ? logp : NULL;
    sp.fsync = RILL_SESSION_FSYNC_NEVER;
    pair_t p = { 0, 0 };
    rill_err_t err = rill_sched_session_create(g->sch, &sp, &p.a);
    ck_assert_msg(err == RILL_OK, "create %s: %s %s", name, rill_err_name(err),
                  rill_last_error(err));
    sp.log_path = NULL;
    sp.pin = false;
    ck_assert_int_eq(rill_sched_session_create(g->ref, &sp, &p.r), RILL_OK);
    return p;
}

/* Both get the same input. */
static void feed_pair(rig_t *g, pair_t p, const int32_t *t, int n) {
    rill_err_t err = rill_sched_ingest(g->sch, p.a, t, n);
    ck_assert_msg(err == RILL_OK, "ingest: %s %s", rill_err_name(err), rill_last_error(err));
    ck_assert_int_eq(rill_sched_ingest(g->ref, p.r, t, n), RILL_OK);
}

typedef struct answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    rill_err_t status;
    int32_t tokens[32];
    int n;
    int64_t version;
} answer_t;

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *a) {
    (void)rid;
    answer_t *o = user;
    pthread_mutex_lock(&o->mu);
    o->status = a->status;
    o->n = a->n_tokens < 32 ? a->n_tokens : 32;
    memcpy(o->tokens, a->tokens, (size_t)o->n * sizeof *o->tokens);
    o->version = a->version;
    o->done = true;
    pthread_cond_broadcast(&o->cv);
    pthread_mutex_unlock(&o->mu);
}

/* Asks q on sid and waits for the answer (status in o->status). */
static void ask(rill_sched_t *sch, rill_sched_sid_t sid, const int32_t *q, int n_q, answer_t *o) {
    memset(o, 0, sizeof *o);
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    rill_sched_ask_t a = {
        .question = q, .n_question = n_q, .n_max = 8, .on_done = on_done, .user = o
    };
    rill_sched_rid_t rid;
    ck_assert_int_eq(rill_sched_ask(sch, sid, &a, &rid), RILL_OK);
    pthread_mutex_lock(&o->mu);
    while (!o->done) {
        pthread_cond_wait(&o->cv, &o->mu);
    }
    pthread_mutex_unlock(&o->mu);
    pthread_mutex_destroy(&o->mu);
    pthread_cond_destroy(&o->cv);
}

/* The same question on both: the answers, versions and resident tokens must be equal. */
static void same_answer(rig_t *g, pair_t p, const int32_t *q, int n_q) {
    answer_t a, r;
    ask(g->sch, p.a, q, n_q, &a);
    ask(g->ref, p.r, q, n_q, &r);
    ck_assert_int_eq(a.status, RILL_OK);
    ck_assert_int_eq(r.status, RILL_OK);
    ck_assert_int_eq(a.n, r.n);
    ck_assert_int_gt(a.n, 0);
    ck_assert_mem_eq(a.tokens, r.tokens, (size_t)a.n * sizeof *a.tokens);
    ck_assert_int_eq(a.version, r.version);
    int32_t ta[256], tr[256];
    int64_t na = rill_sched_session_tokens(g->sch, p.a, ta, 256);
    int64_t nr = rill_sched_session_tokens(g->ref, p.r, tr, 256);
    ck_assert_int_eq(na, nr);
    ck_assert_mem_eq(ta, tr, (size_t)na * sizeof *ta);
}

static rill_sched_session_info_t info(rig_t *g, rill_sched_sid_t sid) {
    rill_sched_session_info_t o;
    ck_assert_int_eq(rill_sched_session_info(g->sch, sid, &o), RILL_OK);
    return o;
}

static rill_sched_stats_t stats(rig_t *g) {
    rill_sched_stats_t st;
    rill_sched_stats(g->sch, &st);
    return st;
}

static void rand_tokens(int32_t *t, int n, int V) {
    test_rand_tokens(test_rng(), t, n, V);
}

static void sleep_path(const rig_t *g, rill_sched_sid_t sid, char *out, size_t cap) {
    snprintf(out, cap, "%s/s%llu.sleep", g->dir, (unsigned long long)sid);
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* Three sessions in a budget of two: the least recently used sleeps (snapshot tier), wakes on
 * its question and answers what the never-sleeping engine answers, sleeping another; ingest
 * into a sleeper wakes it too; info reports a sleeper without waking it; the counters add up;
 * closing a sleeper deletes its file. */
START_TEST(least_recently_used_sleep_and_answer_alike) {
    rig_t g;
    rig_open(&g, 0, 0);
    pair_t p[3];
    int32_t data[3][100], q[12];
    rand_tokens(q, 12, g.V);
    for (int i = 0; i < 3; i++) {
        char name[8];
        snprintf(name, sizeof name, "s%d", i);
        p[i] = new_pair(&g, name, true, false);
        rand_tokens(data[i], 100, g.V);
        feed_pair(&g, p[i], data[i], 100); /* past the window: evictions too */
    }
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    rill_sched_stats_t st = stats(&g);
    ck_assert_int_eq(st.n_sessions, 3);
    ck_assert_int_eq(st.awake, 2);
    ck_assert_int_eq(st.asleep, 1);
    ck_assert_int_eq(st.sleeps, 1);
    ck_assert_int_eq(st.admission_rejects, 0);
    ck_assert_int_le(st.reserved_pages, 16 - OVERFLOW);
    rill_sched_session_info_t i0 = info(&g, p[0].a);
    ck_assert(i0.asleep);
    ck_assert_int_eq(i0.tier, RILL_SCHED_TIER_SNAPSHOT);
    ck_assert_int_gt(i0.sleep_bytes, 0);
    ck_assert_int_eq(i0.version, 1);
    ck_assert_int_eq(i0.st.n_seen, 100);
    ck_assert_int_eq(st.sleep_disk_bytes, i0.sleep_bytes);
    char path[300];
    sleep_path(&g, p[0].a, path, sizeof path);
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert(info(&g, p[0].a).asleep); /* info does not wake it */
    same_answer(&g, p[0], q, 12);       /* wakes s0; s1 (least recently used) sleeps */
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert(!info(&g, p[0].a).asleep);
    ck_assert(info(&g, p[1].a).asleep);
    ck_assert(!info(&g, p[2].a).asleep);
    int32_t more[40];
    rand_tokens(more, 40, g.V);
    feed_pair(&g, p[1], more, 40); /* ingest wakes s1; s2 sleeps */
    ck_assert(info(&g, p[2].a).asleep);
    same_answer(&g, p[1], q, 12);
    same_answer(&g, p[2], q, 12);
    same_answer(&g, p[0], q, 12);
    st = stats(&g);
    ck_assert_int_eq(st.wakes, st.sleeps - 1);
    ck_assert_int_eq(st.wakes_log, 0);
    ck_assert_int_eq(st.wake_ns.count, (uint64_t)st.wakes);
    ck_assert_int_eq(st.wake_errors, 0);
    rill_sched_sid_t ids[4];
    ck_assert_int_eq(rill_sched_session_list(g.sch, ids, 4), 3); /* both lists, id order */
    for (int i = 0; i < 3; i++) {
        ck_assert_uint_eq(ids[i], p[i].a);
    }
    rill_sched_sid_t asleep = info(&g, p[0].a).asleep   ? p[0].a
                              : info(&g, p[1].a).asleep ? p[1].a
                                                        : p[2].a;
    ck_assert(info(&g, asleep).asleep);
    sleep_path(&g, asleep, path, sizeof path);
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert_int_eq(rill_sched_session_close(g.sch, asleep), RILL_OK);
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(stats(&g).sleep_disk_bytes, 0);
    ck_assert_int_eq(stats(&g).n_sessions, 2);
    rig_close(&g);
}
END_TEST

/* Pinned sessions never sleep: pressure picks the unpinned one even when it is the most
 * recently used, and when everything awake is pinned a creation is RILL_EFULL; unpinning lets
 * it sleep; pinning a sleeper wakes it; asking to sleep a pinned one is RILL_EBUSY. */
START_TEST(pinned_sessions_stay_awake) {
    rig_t g;
    rig_open(&g, 0, 0);
    pair_t a = new_pair(&g, "a", true, true);
    pair_t b = new_pair(&g, "b", true, false);
    int32_t d[50], q[6];
    rand_tokens(d, 50, g.V);
    rand_tokens(q, 6, g.V);
    feed_pair(&g, b, d, 50);
    feed_pair(&g, a, d, 20); /* a is now the most recently used */
    ck_assert(info(&g, a.a).pinned);
    pair_t c = new_pair(&g, "c", true, false); /* b sleeps, not a */
    ck_assert(info(&g, b.a).asleep);
    ck_assert(!info(&g, a.a).asleep);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, a.a), RILL_EBUSY);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, c.a, true), RILL_OK);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.session.n_sink = SINKS;
    sp.session.window = WINDOW;
    rill_sched_sid_t x = 0;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &x), RILL_EFULL);
    ck_assert_int_eq(stats(&g).admission_rejects, 1);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, b.a, true), RILL_EFULL); /* no room to wake */
    ck_assert(info(&g, b.a).asleep);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, a.a, false), RILL_OK);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, b.a, true), RILL_OK); /* wakes b, a sleeps */
    ck_assert(!info(&g, b.a).asleep);
    ck_assert(info(&g, a.a).asleep);
    same_answer(&g, b, q, 6);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, 999, true), RILL_ENOTFOUND);
    rig_close(&g);
}
END_TEST

/* A disk budget that holds one sleep file: the second sleeper's room is made by dropping the
 * coldest's file (it keeps only its log: tier_drops), and with a budget smaller than any file
 * every sleeper re-prefills from its log; answers stay those of the never-sleeping engine.
 * A session without a log cannot sleep without room: the creation that needed it is
 * RILL_EFULL and nothing changed. */
START_TEST(disk_budget_moves_the_coldest_to_their_logs) {
    rig_t g;
    rig_open(&g, 0, 0);
    /* one sleep file's size, measured */
    pair_t probe = new_pair(&g, "probe", true, false);
    int32_t d[4][90], q[10];
    rand_tokens(d[0], 90, g.V);
    rand_tokens(q, 10, g.V);
    feed_pair(&g, probe, d[0], 90);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, probe.a), RILL_OK);
    int64_t one = info(&g, probe.a).sleep_bytes;
    ck_assert_int_gt(one, 0);
    same_answer(&g, probe, q, 10);
    rig_close(&g);

    rig_open(&g, one + one / 2, 0); /* room for one file of this size, not two */
    pair_t p[4];
    for (int i = 0; i < 4; i++) {
        char name[8];
        snprintf(name, sizeof name, "p%d", i);
        p[i] = new_pair(&g, name, true, false);
        rand_tokens(d[i], 90, g.V);
        feed_pair(&g, p[i], d[i], 90);
    }
    /* p0 slept for p2, p1 for p3: p0's file was dropped to make room for p1's */
    rill_sched_stats_t st = stats(&g);
    ck_assert_int_eq(st.asleep, 2);
    ck_assert_int_eq(st.tier_drops, 1);
    ck_assert_int_eq(st.asleep_log, 1);
    ck_assert_int_eq(info(&g, p[0].a).tier, RILL_SCHED_TIER_LOG);
    ck_assert_int_eq(info(&g, p[0].a).sleep_bytes, 0);
    ck_assert_int_eq(info(&g, p[1].a).tier, RILL_SCHED_TIER_SNAPSHOT);
    ck_assert_int_le(st.sleep_disk_bytes, one + one / 2);
    same_answer(&g, p[0], q, 10); /* re-prefilled from its log */
    ck_assert_int_eq(stats(&g).wakes_log, 1);
    ck_assert_int_eq(stats(&g).wake_log_ns.count, 1);
    same_answer(&g, p[1], q, 10);
    same_answer(&g, p[2], q, 10);
    same_answer(&g, p[3], q, 10);
    rig_close(&g);

    rig_open(&g, 1, 0); /* no file fits: log tier for all, and no sleep without a log */
    pair_t n0 = new_pair(&g, "n0", false, false);
    pair_t l1 = new_pair(&g, "l1", true, false);
    feed_pair(&g, n0, d[0], 90);
    feed_pair(&g, l1, d[1], 90);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, n0.a), RILL_EFULL);
    ck_assert(!info(&g, n0.a).asleep);
    pair_t l2 = new_pair(&g, "l2", true, false); /* n0 is colder but cannot sleep: l1 does */
    ck_assert(!info(&g, n0.a).asleep);
    ck_assert(info(&g, l1.a).asleep);
    ck_assert_int_eq(info(&g, l1.a).tier, RILL_SCHED_TIER_LOG);
    feed_pair(&g, l2, d[2], 90);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, l2.a, true), RILL_OK);
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    sp.session.n_sink = SINKS;
    sp.session.window = WINDOW;
    rill_sched_sid_t x = 0;
    ck_assert_int_eq(rill_sched_session_create(g.sch, &sp, &x), RILL_EFULL); /* n0 cannot */
    ck_assert_int_eq(stats(&g).n_sessions, 3);
    same_answer(&g, n0, q, 10);
    ck_assert_int_eq(rill_sched_session_pin(g.sch, l2.a, false), RILL_OK);
    same_answer(&g, l1, q, 10); /* from its log: l2 sleeps on its log to make room */
    ck_assert_int_eq(stats(&g).wakes_log, 1);
    same_answer(&g, l2, q, 10);
    ck_assert_int_eq(stats(&g).sleep_disk_bytes, 0);
    rig_close(&g);
}
END_TEST

/* A sleep file that cannot be written (the N-th file call failing, injected): a session with a
 * log sleeps on its log (sleep_errors) and answers alike; one without stays awake with the
 * error and answers alike. */
START_TEST(failed_sleep_writes_fall_back_or_keep_awake) {
    rig_t g;
    rig_open(&g, 0, 0);
    pair_t l = new_pair(&g, "l", true, false);
    pair_t n = new_pair(&g, "n", false, false);
    int32_t d[80], q[9];
    rand_tokens(d, 80, g.V);
    rand_tokens(q, 9, g.V);
    feed_pair(&g, l, d, 80);
    feed_pair(&g, n, d, 50);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    rill__session_io_fail_nth(1);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, l.a), RILL_OK);
    rill__session_io_fail_nth(0);
    ck_assert_int_eq(stats(&g).sleep_errors, 1);
    ck_assert(info(&g, l.a).asleep);
    ck_assert_int_eq(info(&g, l.a).tier, RILL_SCHED_TIER_LOG);
    char path[300];
    sleep_path(&g, l.a, path, sizeof path);
    ck_assert_int_ne(access(path, F_OK), 0); /* no temporary or partial file left */
    same_answer(&g, l, q, 9);
    for (int k = 1; k <= 3; k++) { /* whichever file call fails, n stays awake and intact */
        rill__session_io_fail_nth(k);
        rill_err_t err = rill_sched_session_sleep(g.sch, n.a);
        rill__session_io_fail_nth(0);
        ck_assert_int_eq(err, RILL_EIO);
        ck_assert(!info(&g, n.a).asleep);
        sleep_path(&g, n.a, path, sizeof path);
        ck_assert_int_ne(access(path, F_OK), 0);
    }
    same_answer(&g, n, q, 9);
    ck_assert_int_eq(stats(&g).sleep_errors, 4);
    rig_close(&g);
}
END_TEST

/* Truncated and corrupt sleep files at wake: with a log the session re-prefills from it
 * (wake_fallbacks, the file deleted) and answers alike; without one the command that woke it
 * fails with RILL_EFORMAT and the session stays asleep. */
START_TEST(damaged_sleep_files_fall_back_to_the_log) {
    rig_t g;
    rig_open(&g, 0, 0);
    pair_t t = new_pair(&g, "t", true, false);
    pair_t c = new_pair(&g, "c", true, false);
    pair_t n = new_pair(&g, "n", false, false);
    int32_t d[70], q[7];
    rand_tokens(d, 70, g.V);
    rand_tokens(q, 7, g.V);
    feed_pair(&g, t, d, 70);
    feed_pair(&g, c, d, 40);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, t.a), RILL_OK);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, c.a), RILL_OK);
    feed_pair(&g, n, d, 60);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    ck_assert_int_eq(rill_sched_session_sleep(g.sch, n.a), RILL_OK);
    char pt[300], pc[300], pn[300];
    sleep_path(&g, t.a, pt, sizeof pt);
    sleep_path(&g, c.a, pc, sizeof pc);
    sleep_path(&g, n.a, pn, sizeof pn);
    ck_assert_int_eq(truncate(pt, test_file_size(pt) / 2), 0);
    int fd = open(pc, O_RDWR);
    ck_assert_int_ge(fd, 0);
    unsigned char b;
    off_t mid = (off_t)(test_file_size(pc) / 2);
    ck_assert_int_eq(pread(fd, &b, 1, mid), 1);
    b ^= 0x5a;
    ck_assert_int_eq(pwrite(fd, &b, 1, mid), 1);
    close(fd);
    ck_assert_int_eq(truncate(pn, 100), 0);
    same_answer(&g, t, q, 7);
    ck_assert_int_eq(stats(&g).wake_fallbacks, 1);
    ck_assert_int_ne(access(pt, F_OK), 0);
    same_answer(&g, c, q, 7);
    ck_assert_int_eq(stats(&g).wake_fallbacks, 2);
    ck_assert_int_eq(stats(&g).wakes_log, 2);
    int32_t buf[8];
    ck_assert_int_eq(rill_sched_session_tokens(g.sch, n.a, buf, 8), RILL_EFORMAT);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EFORMAT), "waking session"));
    answer_t a;
    ask(g.sch, n.a, q, 7, &a);
    ck_assert_int_eq(a.status, RILL_EFORMAT);
    ck_assert(info(&g, n.a).asleep);
    ck_assert_int_eq(stats(&g).wake_errors, 2);
    ck_assert_int_eq(rill_sched_session_close(g.sch, n.a), RILL_OK);
    rig_close(&g);
}
END_TEST

/* Every allocation of a wake failing in turn (snapshot tier, then log tier): the command gets
 * RILL_ENOMEM, the session stays asleep with its file, and the wake that finally succeeds
 * answers alike. */
START_TEST(allocation_failures_at_wake_leave_it_asleep) {
    for (int tier = 0; tier < 2; tier++) {
        rig_t g;
        rig_open(&g, tier == 0 ? 0 : 1, 0);
        pair_t s = new_pair(&g, "s", true, false);
        int32_t d[75], q[8];
        rand_tokens(d, 75, g.V);
        rand_tokens(q, 8, g.V);
        feed_pair(&g, s, d, 75);
        ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
        ck_assert_int_eq(rill_sched_session_sleep(g.sch, s.a), RILL_OK);
        ck_assert_int_eq(info(&g, s.a).tier, tier);
        int32_t buf[128];
        int failures = 0;
        for (int64_t k = 1;; k++) {
            rill_mem_fail_nth(k);
            int64_t n = rill_sched_session_tokens(g.sch, s.a, buf, 128);
            rill_mem_fail_nth(0);
            if (n >= 0) {
                break;
            }
            ck_assert_int_eq(n, RILL_ENOMEM);
            ck_assert(info(&g, s.a).asleep);
            ck_assert_int_eq(info(&g, s.a).tier, tier);
            failures++;
            ck_assert_int_lt(k, 200);
        }
        ck_assert_int_gt(failures, 0);
        ck_assert_int_eq(stats(&g).wake_errors, failures);
        ck_assert(!info(&g, s.a).asleep);
        same_answer(&g, s, q, 8);
        rig_close(&g);
    }
}
END_TEST

/* With an idle time, an untouched session sleeps by itself (sleeps_idle) and the engine is idle
 * meanwhile; its next ingest wakes it; a standing query that is fresh does not keep it awake,
 * and the refresh after the waking ingest equals the never-sleeping engine's. */
START_TEST(idle_sessions_sleep_and_standing_queries_wake_them) {
    rig_t g;
    rig_open(&g, 0, 300 * 1000 * 1000LL);
    pair_t s = new_pair(&g, "s", true, false);
    int32_t d[60], q[6];
    rand_tokens(d, 60, g.V);
    rand_tokens(q, 6, g.V);
    feed_pair(&g, s, d, 40);
    answer_t sa, sr;
    memset(&sa, 0, sizeof sa);
    memset(&sr, 0, sizeof sr);
    pthread_mutex_init(&sa.mu, NULL);
    pthread_cond_init(&sa.cv, NULL);
    pthread_mutex_init(&sr.mu, NULL);
    pthread_cond_init(&sr.cv, NULL);
    rill_sched_ask_t a = {
        .question = q, .n_question = 6, .n_max = 8, .on_done = on_done, .user = &sa
    };
    rill_sched_rid_t qa, qr;
    ck_assert_int_eq(rill_sched_standing_register(g.sch, s.a, &a, &qa), RILL_OK);
    a.user = &sr;
    ck_assert_int_eq(rill_sched_standing_register(g.ref, s.r, &a, &qr), RILL_OK);
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    ck_assert_int_eq(rill_sched_wait_idle(g.ref, 60 * SEC), RILL_OK);
    struct timespec ts = { 0, 700 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    ck_assert(info(&g, s.a).asleep);
    ck_assert_int_eq(info(&g, s.a).n_standing, 1);
    ck_assert_int_eq(stats(&g).sleeps_idle, 1);
    feed_pair(&g, s, d + 40, 20); /* wakes it; the standing query refreshes */
    ck_assert_int_eq(rill_sched_wait_idle(g.sch, 60 * SEC), RILL_OK);
    ck_assert_int_eq(rill_sched_wait_idle(g.ref, 60 * SEC), RILL_OK);
    pthread_mutex_lock(&sa.mu);
    pthread_mutex_lock(&sr.mu);
    ck_assert_int_eq(sa.version, 2);
    ck_assert_int_eq(sr.version, 2);
    ck_assert_int_eq(sa.n, sr.n);
    ck_assert_mem_eq(sa.tokens, sr.tokens, (size_t)sa.n * sizeof *sa.tokens);
    pthread_mutex_unlock(&sr.mu);
    pthread_mutex_unlock(&sa.mu);
    ck_assert_int_eq(stats(&g).wakes, 1);
    ck_assert_int_eq(rill_sched_standing_unregister(g.sch, qa), RILL_OK);
    ck_assert_int_eq(rill_sched_standing_unregister(g.ref, qr), RILL_OK);
    rig_close(&g);
    pthread_mutex_destroy(&sa.mu);
    pthread_cond_destroy(&sa.cv);
    pthread_mutex_destroy(&sr.mu);
    pthread_cond_destroy(&sr.cv);
}
END_TEST

/* Without a sleep_dir nothing sleeps (admission is RILL_EFULL as before, sleeping is refused),
 * and the new parameters are checked. */
START_TEST(sleeping_is_off_without_a_folder_and_checked) {
    rig_t g;
    rig_open(&g, 0, 0);
    rill_sched_params_t sp = rill_sched_default_params();
    sp.step_tokens = 32;
    sp.overflow_pages = OVERFLOW;
    rill_sched_t *plain = NULL;
    rill_sched_destroy(&g.sch);
    ck_assert_int_eq(rill_sched_new(g.pool, &sp, &plain), RILL_OK);
    rill_sched_session_params_t p = rill_sched_session_default_params();
    p.session.n_sink = SINKS;
    p.session.window = WINDOW;
    rill_sched_sid_t a, b, c;
    ck_assert_int_eq(rill_sched_session_create(plain, &p, &a), RILL_OK);
    ck_assert_int_eq(rill_sched_session_create(plain, &p, &b), RILL_OK);
    ck_assert_int_eq(rill_sched_session_create(plain, &p, &c), RILL_EFULL);
    ck_assert_int_eq(rill_sched_session_sleep(plain, a), RILL_EUNSUPPORTED);
    rill_sched_destroy(&plain);
    sp.sleep_idle_ns = -1;
    ck_assert_int_eq(rill_sched_new(g.pool, &sp, &plain), RILL_EINVAL);
    sp.sleep_idle_ns = 0;
    sp.sleep_disk_bytes = -5;
    ck_assert_int_eq(rill_sched_new(g.pool, &sp, &plain), RILL_EINVAL);
    ck_assert_ptr_null(plain);
    rig_close(&g);
}
END_TEST

int main(void) {
    if (!test_have_models(QWEN, NULL)) {
        return TEST_SKIP;
    }
    Suite *su = suite_create("sched_sleep");
    TCase *tc = tcase_create("sleep");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, least_recently_used_sleep_and_answer_alike);
    tcase_add_test(tc, pinned_sessions_stay_awake);
    tcase_add_test(tc, disk_budget_moves_the_coldest_to_their_logs);
    tcase_add_test(tc, failed_sleep_writes_fall_back_or_keep_awake);
    tcase_add_test(tc, damaged_sleep_files_fall_back_to_the_log);
    tcase_add_test(tc, allocation_failures_at_wake_leave_it_asleep);
    tcase_add_test(tc, idle_sessions_sleep_and_standing_queries_wake_them);
    tcase_add_test(tc, sleeping_is_off_without_a_folder_and_checked);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
