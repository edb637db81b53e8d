/*
 * test_sched_speech.c - recognizers as an engine work class (rill_scheduler.h, "speech
 * recognizers"): a recognizer attached to a consumer session and fed a clip in chunks gives,
 * update by update, the transcript that rill_asr driven directly on the same chunks gives, its
 * updates arrive on the engine thread, the consumer's text after its earlier input is the
 * committed transcript plus the tentative tail after every update (replaces exercised), a
 * finish commits the tail and starts a new stream; other sessions' ingest and questions are
 * answered while the recognizer has audio queued; bad feeds, a full queue, a bad consumer, a
 * closed consumer and failed allocations at attach.
 *
 * Models: whisper-tiny.en (models/, RILL_TEST_WHISPER_DIR overrides) as the recognizer, the tiny
 * qwen2 test model as the consumer (its tokenizer is Qwen2's, so English text round-trips).
 * Exits 77 without them. Clip: tests/data/audio/birch_canoe_espeak.wav.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_core.h"
#include "rill_model.h"
#include "rill_scheduler.h"
#include "rill_tokenizer.h"
#include "rill_whisper.h"
#include "test_util.h"

#define QWEN  "rill-tiny-qwen2-F32.gguf"
#define BIRCH RILL_SOURCE_DIR "/tests/data/audio/birch_canoe_espeak.wav"
#define CHUNK 1600 /* 100 ms */
#define SEC   1000000000LL

static char g_tiny[TEST_PATH_MAX];
static rill_model_t *g_wmodel;
static rill_backend_t *g_wbe;
static rill_whisper_t *g_w;
static float *g_clip;
static int64_t g_clip_n;

typedef struct rig {
    rill_model_t *model;
    rill_tokenizer_t *tok;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    rill_sched_t *sch;
} rig_t;

static void rig_open(rig_t *g) {
    memset(g, 0, sizeof *g);
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &g->tok), RILL_OK);
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.backend.cpu.n_threads = 1;
    p.forward.max_batch = 64;
    p.pool.n_cells = 4096;
    p.pool.kv_type = RILL_DTYPE_F32;
    test_engine_open(g->model, g->tok, &p, &g->be, &g->fw, &g->pool);
    rill_sched_params_t sp = rill_sched_default_params();
    sp.step_tokens = 32;
    ck_assert_int_eq(rill_sched_new(g->pool, &sp, &g->sch), RILL_OK);
}

static void rig_close(rig_t *g) {
    rill_sched_destroy(&g->sch);
    test_engine_close(&g->pool, &g->fw, &g->be);
    rill_tokenizer_destroy(&g->tok);
    rill_model_destroy(&g->model);
}

static rill_sched_sid_t new_session(rig_t *g) {
    rill_sched_session_params_t sp = rill_sched_session_default_params();
    rill_sched_sid_t sid = 0;
    ck_assert_int_eq(rill_sched_session_create(g->sch, &sp, &sid), RILL_OK);
    return sid;
}

static void idle(rig_t *g) {
    ck_assert_int_eq(rill_sched_wait_idle(g->sch, 120 * SEC), RILL_OK);
}

/* What the updates said, accumulated (engine thread writes, test thread reads after idle). */
typedef struct heard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char committed[4096];
    size_t len;
    char tail[1024];
    int updates, finals, errors, consumer_errors;
    int64_t last_version;
    pthread_t thread;
    bool thread_set, same_thread;
} heard_t;

static void heard_init(heard_t *h) {
    memset(h, 0, sizeof *h);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    h->same_thread = true;
}

static void heard_deinit(heard_t *h) {
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->cv);
}

static void on_update(void *user, const rill_sched_asr_update_t *u) {
    heard_t *h = user;
    pthread_mutex_lock(&h->mu);
    if (!h->thread_set) {
        h->thread = pthread_self();
        h->thread_set = true;
    }
    h->same_thread = h->same_thread && pthread_equal(h->thread, pthread_self());
    h->updates++;
    h->errors += u->status != RILL_OK;
    h->consumer_errors += u->consumer_status != RILL_OK;
    if (u->committed_len > 0 && h->len + u->committed_len < sizeof h->committed) {
        memcpy(h->committed + h->len, u->committed, u->committed_len);
        h->len += u->committed_len;
        h->committed[h->len] = '\0';
    }
    snprintf(h->tail, sizeof h->tail, "%.*s", (int)u->tentative_len, u->tentative);
    h->finals += u->final;
    h->last_version = u->consumer_version;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* The consumer's text after its first n0 tokens. */
static void consumer_text(rig_t *g, rill_sched_sid_t sid, int64_t n0, char *out, size_t cap) {
    static int32_t toks[8192];
    int64_t n = rill_sched_session_tokens(g->sch, sid, toks, 8192);
    ck_assert_int_ge(n, n0);
    ck_assert_int_le(n, 8192);
    int64_t k = rill_tokenizer_decode(g->tok, toks + n0, n - n0, 0, out, cap - 1, NULL);
    ck_assert_int_ge(k, 0);
    out[k] = '\0';
}

/* What the consumer must hold: committed, then " " + tail when both are there. */
static void expected_text(heard_t *h, char *out, size_t cap) {
    pthread_mutex_lock(&h->mu);
    snprintf(out, cap, "%s%s%s", h->committed, h->len > 0 && h->tail[0] != '\0' ? " " : "",
             h->tail);
    pthread_mutex_unlock(&h->mu);
}

static rill_asr_params_t asr_params(void) {
    rill_asr_params_t ap = rill_asr_default_params();
    ap.step_ms = 300; /* several decodes on a short clip: tails that change */
    ap.keep_committed = false;
    return ap;
}

START_TEST(recognizer_feeds_its_consumer) {
    rig_t g;
    rig_open(&g);
    rill_sched_sid_t sid = new_session(&g);
    ck_assert_int_eq(rill_sched_ingest_text(g.sch, sid, "Heard:", 6, true, NULL), RILL_OK);
    idle(&g);
    const int64_t n0 = rill_sched_session_tokens(g.sch, sid, NULL, 0);
    ck_assert_int_gt(n0, 0);

    heard_t h;
    heard_init(&h);
    rill_sched_asr_params_t p = rill_sched_asr_default_params();
    p.whisper = g_w;
    p.model = g_wmodel;
    p.asr = asr_params();
    p.consumer = sid;
    p.on_update = on_update;
    p.user = &h;
    rill_sched_asr_t *a = NULL;
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_OK);

    /* the oracle: rill_asr itself, fed the same chunks, stepped whenever ready; it shares g_w
     * with the engine, used only while the engine is idle (one thread at a time) */
    rill_asr_t *ref = NULL;
    rill_asr_params_t rp = asr_params();
    ck_assert_int_eq(rill_asr_new(g_w, g_wmodel, &rp, &ref), RILL_OK);
    char ref_committed[4096] = "", ref_tail[1024] = "";
    size_t ref_len = 0;

    char got[8192], want[8192];
    int checks = 0;
    for (int64_t at = 0; at < g_clip_n; at += CHUNK) {
        const int64_t n = g_clip_n - at < CHUNK ? g_clip_n - at : CHUNK;
        ck_assert_int_eq(rill_sched_asr_feed(a, g_clip + at, n), RILL_OK);
        idle(&g); /* the engine has taken the chunk and run the step it made ready */
        ck_assert_int_eq(rill_asr_feed(ref, g_clip + at, n), RILL_OK);
        while (rill_asr_ready(ref)) {
            rill_asr_update_t u;
            ck_assert_int_eq(rill_asr_step(ref, &u), RILL_OK);
            memcpy(ref_committed + ref_len, u.committed, u.committed_len);
            ref_len += u.committed_len;
            ref_committed[ref_len] = '\0';
            snprintf(ref_tail, sizeof ref_tail, "%.*s", (int)u.tentative_len, u.tentative);
        }
        pthread_mutex_lock(&h.mu);
        ck_assert_str_eq(h.committed, ref_committed);
        ck_assert_str_eq(h.tail, ref_tail);
        pthread_mutex_unlock(&h.mu);
        /* the invariant: the consumer holds the committed transcript and the tail */
        consumer_text(&g, sid, n0, got, sizeof got);
        expected_text(&h, want, sizeof want);
        ck_assert_str_eq(got, want);
        checks++;
    }
    ck_assert_int_gt(checks, 10);
    rill_sched_asr_stats_t st;
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, a, &st), RILL_OK);
    ck_assert_int_eq(st.samples_queued, g_clip_n);
    ck_assert_int_eq(st.samples_taken, g_clip_n);
    ck_assert_int_eq(st.queue_samples, 0);
    ck_assert_int_gt(st.asr.decodes, 3);
    ck_assert_int_gt(st.consumer_replaces, 0); /* the tail was replaced as it changed */
    ck_assert_int_eq(st.consumer_errors, 0);
    ck_assert(st.has_consumer);

    /* finish: the tail is committed, in the consumer too */
    ck_assert_int_eq(rill_sched_asr_finish(a), RILL_OK);
    idle(&g);
    rill_asr_update_t fu;
    ck_assert_int_eq(rill_asr_finish(ref, &fu), RILL_OK);
    memcpy(ref_committed + ref_len, fu.committed, fu.committed_len);
    ref_len += fu.committed_len;
    ref_committed[ref_len] = '\0';
    pthread_mutex_lock(&h.mu);
    ck_assert_int_eq(h.finals, 1);
    ck_assert_str_eq(h.committed, ref_committed);
    ck_assert_str_eq(h.tail, "");
    ck_assert(h.same_thread);
    ck_assert(!pthread_equal(h.thread, pthread_self()));
    ck_assert_int_eq(h.errors, 0);
    ck_assert_int_eq(h.consumer_errors, 0);
    pthread_mutex_unlock(&h.mu);
    consumer_text(&g, sid, n0, got, sizeof got);
    ck_assert_str_eq(got, ref_committed);
    ck_assert_ptr_nonnull(strstr(got, "slid on the smooth"));
    rill_sched_session_info_t info;
    ck_assert_int_eq(rill_sched_session_info(g.sch, sid, &info), RILL_OK);
    ck_assert_int_eq(info.version, h.last_version);
    ck_assert_uint_eq(info.held_text, 0);

    /* the next stream goes on in the same consumer, joined with one space */
    for (int64_t at = 0; at < g_clip_n; at += CHUNK) {
        const int64_t n = g_clip_n - at < CHUNK ? g_clip_n - at : CHUNK;
        ck_assert_int_eq(rill_sched_asr_feed(a, g_clip + at, n), RILL_OK);
    }
    ck_assert_int_eq(rill_sched_asr_finish(a), RILL_OK);
    idle(&g);
    pthread_mutex_lock(&h.mu);
    ck_assert_int_eq(h.finals, 2);
    ck_assert_uint_gt(h.len, ref_len + 10);
    ck_assert_int_eq(h.committed[ref_len], ' ');
    pthread_mutex_unlock(&h.mu);
    consumer_text(&g, sid, n0, got, sizeof got);
    expected_text(&h, want, sizeof want);
    ck_assert_str_eq(got, want);
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, a, &st), RILL_OK);
    ck_assert_int_eq(st.finishes, 2);
    ck_assert_int_eq(st.audio_ms, 2 * (g_clip_n / 16)); /* ms per stream, whole */

    rill_asr_destroy(&ref);
    rill_sched_asr_detach(g.sch, &a);
    ck_assert_ptr_null(a);
    heard_deinit(&h);
    rig_close(&g);
}
END_TEST

typedef struct done {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    int64_t total_ns;
} done_t;

static void on_done(void *user, rill_sched_rid_t rid, const rill_sched_answer_t *an) {
    (void)rid;
    done_t *d = user;
    pthread_mutex_lock(&d->mu);
    d->n++;
    d->total_ns = an->total_ns;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

START_TEST(other_sessions_are_not_held_up) {
    rig_t g;
    rig_open(&g);
    rill_sched_sid_t speech = new_session(&g), other = new_session(&g);
    heard_t h;
    heard_init(&h);
    rill_sched_asr_params_t p = rill_sched_asr_default_params();
    p.whisper = g_w;
    p.model = g_wmodel;
    p.asr = asr_params();
    p.consumer = speech;
    p.on_update = on_update;
    p.user = &h;
    rill_sched_asr_t *a = NULL;
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_OK);
    /* the whole clip at once: about ten decodes of work queued, fed without waiting */
    const int64_t t0 = rill_now_ns();
    for (int64_t at = 0; at < g_clip_n; at += CHUNK) {
        const int64_t n = g_clip_n - at < CHUNK ? g_clip_n - at : CHUNK;
        ck_assert_int_eq(rill_sched_asr_feed(a, g_clip + at, n), RILL_OK);
    }
    ck_assert_int_lt(rill_now_ns() - t0, SEC / 2); /* feeding never waits for a decode */
    /* ingest and a question on another session are carried out meanwhile */
    ck_assert_int_eq(rill_sched_ingest_text(g.sch, other, "one two three", 13, true, NULL),
                     RILL_OK);
    done_t d = { .n = 0 };
    pthread_mutex_init(&d.mu, NULL);
    pthread_cond_init(&d.cv, NULL);
    int32_t q[4] = { 10, 11, 12, 13 };
    rill_sched_ask_t ask = {
        .question = q, .n_question = 4, .n_max = 4, .on_done = on_done, .user = &d
    };
    rill_sched_rid_t rid = 0;
    ck_assert_int_eq(rill_sched_ask(g.sch, other, &ask, &rid), RILL_OK);
    pthread_mutex_lock(&d.mu);
    while (d.n == 0) {
        pthread_cond_wait(&d.cv, &d.mu);
    }
    pthread_mutex_unlock(&d.mu);
    idle(&g);
    rill_sched_asr_stats_t st;
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, a, &st), RILL_OK);
    ck_assert_int_eq(st.samples_taken, g_clip_n);
    ck_assert_int_ge(st.steps, 1);
    /* the question waited for at most about one recognizer step, not for all of them */
    ck_assert_int_lt(d.total_ns, 2 * st.step_ns / st.steps + SEC);
    pthread_mutex_destroy(&d.mu);
    pthread_cond_destroy(&d.cv);
    /* closing the consumer lets it go; the recognizer goes on transcript-only */
    ck_assert_int_eq(rill_sched_session_close(g.sch, speech), RILL_OK);
    ck_assert_int_eq(rill_sched_asr_finish(a), RILL_OK);
    idle(&g);
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, a, &st), RILL_OK);
    ck_assert(!st.has_consumer);
    ck_assert_int_eq(st.finishes, 1);
    pthread_mutex_lock(&h.mu);
    ck_assert_int_eq(h.finals, 1);
    ck_assert_int_eq(h.last_version, -1);
    ck_assert_ptr_nonnull(strstr(h.committed, "slid on the smooth"));
    pthread_mutex_unlock(&h.mu);
    rill_sched_asr_detach(g.sch, &a);
    heard_deinit(&h);
    rig_close(&g);
}
END_TEST

START_TEST(bad_feeds_and_attaches_are_refused) {
    rig_t g;
    rig_open(&g);
    rill_sched_asr_params_t p = rill_sched_asr_default_params();
    p.whisper = g_w;
    p.model = g_wmodel;
    p.queue_ms = 500;
    rill_sched_asr_t *a = NULL;
    p.consumer = 12345;
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_ENOTFOUND);
    ck_assert_ptr_null(a);
    p.consumer = 0;
    p.queue_ms = 50;
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_EINVAL);
    p.queue_ms = 500;
    p.asr.step_ms = 5; /* rill_asr_new refuses it */
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_EINVAL);
    p.asr.step_ms = 300;
    p.asr.language = "xx";
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_ENOTFOUND);
    p.asr.language = NULL;
    ck_assert_int_eq(rill_sched_asr_attach(NULL, &p, &a), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_OK);

    const int64_t room = rill_sched_asr_room(a);
    ck_assert_int_ge(room, 8000);
    float x[CHUNK] = { 0 };
    x[7] = 0.0f / 0.0f;
    ck_assert_int_eq(rill_sched_asr_feed(a, x, CHUNK), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_asr_feed(a, NULL, 3), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_asr_feed(a, x, -1), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_asr_feed(NULL, x, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_sched_asr_room(a), room);
    float *big = calloc((size_t)room + 1, sizeof *big);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(rill_sched_asr_feed(a, big, room + 1), RILL_EFULL);
    ck_assert_int_eq(rill_sched_asr_room(a), room);
    free(big);
    rill_sched_asr_stats_t st;
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, a, &st), RILL_OK);
    ck_assert_int_eq(st.samples_queued, 0);
    ck_assert_int_eq(rill_sched_asr_finish(NULL), RILL_EINVAL);
    rill_sched_asr_detach(g.sch, &a);
    rill_sched_asr_detach(g.sch, &a); /* NULL-safe */
    ck_assert_int_eq(rill_sched_asr_stats(g.sch, NULL, &st), RILL_EINVAL);

    /* every allocation of attach failing in turn leaves nothing behind */
    const rill_mem_stats_t m0 = rill_mem_stats(RILL_MEM_SCHEDULER);
    int failures = 0;
    for (int64_t nth = 1; nth < 200; nth++) {
        rill_mem_fail_nth(nth);
        rill_err_t err = rill_sched_asr_attach(g.sch, &p, &a);
        rill_mem_fail_nth(0);
        if (err == RILL_OK) {
            rill_sched_asr_detach(g.sch, &a);
            break;
        }
        ck_assert_int_eq(err, RILL_ENOMEM);
        ck_assert_ptr_null(a);
        failures++;
    }
    ck_assert_int_gt(failures, 3);
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_SCHEDULER).bytes, m0.bytes);
    rig_close(&g);
}
END_TEST

/* Destroying the scheduler with a recognizer attached and audio queued frees it. */
START_TEST(destroy_frees_attached_recognizers) {
    rig_t g;
    rig_open(&g);
    rill_sched_asr_params_t p = rill_sched_asr_default_params();
    p.whisper = g_w;
    p.model = g_wmodel;
    rill_sched_asr_t *a = NULL;
    ck_assert_int_eq(rill_sched_asr_attach(g.sch, &p, &a), RILL_OK);
    ck_assert_int_eq(rill_sched_asr_feed(a, g_clip, g_clip_n), RILL_OK);
    rig_close(&g);
}
END_TEST

static float *read_clip(const char *path, int64_t *n) {
    rill_audio_file_t *f = NULL;
    if (rill_audio_file_open(path, &f) != RILL_OK) {
        return NULL;
    }
    int64_t cap = 16000 * 8, len = 0;
    float *x = malloc((size_t)cap * sizeof *x);
    for (;;) {
        if (cap - len < CHUNK) {
            cap *= 2;
            x = realloc(x, (size_t)cap * sizeof *x);
        }
        const int64_t k = rill_audio_file_read(f, x + len, CHUNK);
        if (k <= 0) {
            break;
        }
        len += k;
    }
    rill_audio_file_close(&f);
    *n = len;
    return x;
}

int main(void) {
    const char *dir = getenv("RILL_TEST_WHISPER_DIR");
    if (dir != NULL && dir[0] != '\0') {
        snprintf(g_tiny, sizeof g_tiny, "%s/whisper-tiny.en.gguf", dir);
    } else {
        test_model_path(g_tiny, sizeof g_tiny, "whisper-tiny.en.gguf");
    }
    if (!test_file_exists(g_tiny) || !test_have_models(QWEN, NULL)) {
        printf("SKIP: %s or the tiny test models are missing\n", g_tiny);
        return TEST_SKIP;
    }
    g_clip = read_clip(BIRCH, &g_clip_n);
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = 2;
    if (g_clip == NULL ||
        rill_model_load(g_tiny, rill_model_default_params(), &g_wmodel) != RILL_OK ||
        rill_backend_new(&bp, &g_wbe) != RILL_OK ||
        rill_whisper_new(g_wmodel, g_wbe, NULL, &g_w) != RILL_OK) {
        printf("cannot set up whisper or the clip\n");
        return EXIT_FAILURE;
    }
    Suite *s = suite_create("sched_speech");
    TCase *tc = tcase_create("speech");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, recognizer_feeds_its_consumer);
    tcase_add_test(tc, other_sessions_are_not_held_up);
    tcase_add_test(tc, bad_feeds_and_attaches_are_refused);
    tcase_add_test(tc, destroy_frees_attached_recognizers);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rill_whisper_destroy(&g_w);
    rill_backend_destroy(&g_wbe);
    rill_model_destroy(&g_wmodel);
    free(g_clip);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
