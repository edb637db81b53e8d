/*
 * test_server_events.c - rilld's engine-to-socket event queue (server/events.c, through the
 * module's private header): answer tokens in a bounded ring whose overflow is dropped and
 * counted, finished answers never dropped, a request's tokens handled before its end, and an
 * answer's text complete even when its token events were dropped (it is decoded from the
 * answer's own tokens). A fake front door records what the command layer sends.
 *
 * Model: the tiny qwen2 file of tests/data/models (its tokenizer only); skipped without it.
 */
#include <check.h>
#include <msgpack.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill_core.h"
#include "rill_msgpack.h"
#include "server_internal.h"
#include "test_util.h"

#define QWEN "rill-tiny-qwen2-F32.gguf"

/* The fake door: the replies and token events it was handed, decoded. */
typedef struct fake {
    srv_door_t door;
    int n_replies, n_tokens;
    char answer[8192];
    char streamed[65536];
    size_t streamed_len;
    char status[32];
} fake_t;

static void fake_reply(srv_t *s, srv_door_t *d, const srv_addr_t *to, const void *buf, size_t len) {
    (void)s;
    (void)to;
    fake_t *f = (fake_t *)d;
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    ck_assert_int_eq(msgpack_unpack_next(&u, buf, len, NULL), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *st = rill_msgpack_get(&u.data, "status"),
                         *res = rill_msgpack_get(&u.data, "result");
    ck_assert_ptr_nonnull(st);
    snprintf(f->status, sizeof f->status, "%.*s", (int)st->via.str.size, st->via.str.ptr);
    const msgpack_object *a =
        res != NULL && res->type == MSGPACK_OBJECT_MAP ? rill_msgpack_get(res, "answer") : NULL;
    if (a != NULL) {
        snprintf(f->answer, sizeof f->answer, "%.*s", (int)a->via.str.size, a->via.str.ptr);
    }
    f->n_replies++;
    msgpack_unpacked_destroy(&u);
}

static void fake_publish(srv_t *s, srv_door_t *d, const char *topic, const void *buf, size_t len) {
    (void)s;
    fake_t *f = (fake_t *)d;
    if (strcmp(topic, "t/token") != 0) {
        return;
    }
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    ck_assert_int_eq(msgpack_unpack_next(&u, buf, len, NULL), MSGPACK_UNPACK_SUCCESS);
    const msgpack_object *p = rill_msgpack_get(&u.data, "piece");
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_le(f->streamed_len + p->via.str.size, sizeof f->streamed);
    memcpy(f->streamed + f->streamed_len, p->via.str.ptr, p->via.str.size);
    f->streamed_len += p->via.str.size;
    f->n_tokens++;
    msgpack_unpacked_destroy(&u);
}

/* A server with one model's tokenizer, one session "t", one ask (rid 5) and the fake door. */
typedef struct rig {
    srv_t *s;
    rill_model_t *model;
    srv_sess_t *x;
    fake_t f;
    int32_t V;
} rig_t;

static void rig_open(rig_t *g) {
    memset(g, 0, sizeof *g);
    g->s = calloc(1, sizeof *g->s);
    ck_assert_ptr_nonnull(g->s);
    srv_t *s = g->s;
    s->p = rill_server_default_params();
    msgpack_sbuffer_init(&s->out);
    ck_assert_int_eq(srv_events_init(s), 0);
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &s->models[0].tok), RILL_OK);
    s->n_models = 1;
    g->V = rill_model_hparams(g->model)->n_vocab;
    g->f.door = (srv_door_t){ .name = "fake", .reply = fake_reply, .publish = fake_publish };
    s->doors[s->n_doors++] = &g->f.door;
    g->x = srv_new_sess(s);
    ck_assert_ptr_nonnull(g->x);
    snprintf(g->x->name, sizeof g->x->name, "t");
    srv_link_sess(s, g->x);
    pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p); /* srv_on_done frees it */
    ck_assert_ptr_nonnull(p);
    p->rid = 5;
    p->sess = g->x;
    p->to.door = &g->f.door;
    p->to.len = 1;
    rill_tokenizer_stream_init(&p->stream, 0);
    p->next = s->pends;
    s->pends = p;
}

static void rig_close(rig_t *g) {
    srv_t *s = g->s;
    while (s->pends != NULL) {
        srv_drop_pend(s, s->pends);
    }
    srv_free_sess(g->x);
    srv_events_deinit(s);
    msgpack_sbuffer_destroy(&s->out);
    rill_tokenizer_destroy(&s->models[0].tok);
    rill_model_destroy(&g->model);
    free(s);
}

/* The text of ids[0, n) without leading blanks, as the reply carries it: the stream
 * detokenizer's (tested with the tokenizer) output, the way rilld decodes answers. */
static void expected_text(const rig_t *g, const int32_t *ids, int n, char *out, size_t cap) {
    rill_tokenizer_stream_t st;
    rill_tokenizer_stream_init(&st, 0);
    char buf[16384], piece[64];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int64_t k =
            rill_tokenizer_stream_feed(g->s->models[0].tok, &st, ids[i], piece, sizeof piece);
        ck_assert_int_ge(k, 0);
        ck_assert_uint_lt(len + (size_t)k, sizeof buf);
        memcpy(buf + len, piece, (size_t)k);
        len += (size_t)k;
    }
    int64_t k = rill_tokenizer_stream_flush(&st, piece, sizeof piece);
    ck_assert_int_ge(k, 0);
    memcpy(buf + len, piece, (size_t)k);
    len += (size_t)k;
    buf[len] = '\0';
    const char *t = buf;
    while (*t == ' ' || *t == '\n') {
        t++;
    }
    ck_assert_uint_lt(strlen(t), cap);
    memcpy(out, t, strlen(t) + 1);
}

static void finish(rig_t *g, const int32_t *ids, int n) {
    rill_sched_answer_t a = { .status = RILL_OK, .message = "", .tokens = ids, .n_tokens = n };
    srv_cb_done(g->s, 5, &a);
}

/* Tokens pushed before their answer are published before the reply; the reply's text is the
 * answer's; the ring's content and the answer list are emptied by one drain. */
START_TEST(tokens_come_before_their_answer) {
    rig_t g;
    rig_open(&g);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) {
        ids[i] = (100 + 7 * i) % g.V;
    }
    for (int i = 0; i < 40; i++) {
        srv_cb_token(g.s, 5, ids[i]);
    }
    finish(&g, ids, 40);
    srv_cb_token(g.s, 99, 1); /* a request nobody waits for: ignored */
    srv_events_drain(g.s);
    ck_assert_int_eq(g.f.n_replies, 1);
    ck_assert_str_eq(g.f.status, "OK");
    char want[8192];
    expected_text(&g, ids, 40, want, sizeof want);
    ck_assert_str_eq(g.f.answer, want);
    ck_assert_int_gt(g.f.n_tokens, 0);
    ck_assert_int_eq(atomic_load(&g.s->engine_drops), 0);
    ck_assert_ptr_null(g.s->pends); /* the ask is done */
    ck_assert_uint_eq(rill_ring_size(&g.s->tok_ring), 0);
    rig_close(&g);
}
END_TEST

/* A socket thread that does not drain: the ring holds SRV_TOKEN_RING tokens, the rest are
 * dropped and counted, and the answer still arrives whole. */
START_TEST(a_full_ring_drops_tokens_never_answers) {
    rig_t g;
    rig_open(&g);
    const int extra = 300, n = SRV_TOKEN_RING + extra;
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < n; i++) {
        ids[i] = (200 + i % 50) % g.V;
    }
    for (int i = 0; i < n; i++) {
        srv_cb_token(g.s, 5, ids[i]);
    }
    ck_assert_int_eq(atomic_load(&g.s->engine_drops), extra);
    int32_t ans[64];
    memcpy(ans, ids + n - 64, sizeof ans); /* the answer: the last tokens, all dropped as events */
    finish(&g, ans, 64);
    srv_events_drain(g.s);
    ck_assert_int_eq(g.f.n_replies, 1);
    char want[8192];
    expected_text(&g, ans, 64, want, sizeof want);
    ck_assert_str_eq(g.f.answer, want);
    ck_assert_int_le(g.f.n_tokens, SRV_TOKEN_RING);
    free(ids);
    rig_close(&g);
}
END_TEST

/* The engine thread pushing while the socket thread drains (run under TSan by scripts/test.sh):
 * every token is either published or counted as dropped, and the answer comes after all its
 * tokens, whole. */
typedef struct producer {
    rig_t *g;
    int32_t *ids;
    int n;
} producer_t;

static void *produce(void *arg) {
    producer_t *p = arg;
    for (int i = 0; i < p->n; i++) {
        srv_cb_token(p->g->s, 5, p->ids[i]);
    }
    finish(p->g, p->ids + p->n - 32, 32);
    return NULL;
}

START_TEST(tokens_cross_threads_in_order) {
    rig_t g;
    rig_open(&g);
    enum { N = 40000 };
    int32_t *ids = malloc(N * sizeof *ids);
    ck_assert_ptr_nonnull(ids);
    for (int i = 0; i < N; i++) {
        ids[i] = (300 + i % 97) % g.V;
    }
    producer_t p = { .g = &g, .ids = ids, .n = N };
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, produce, &p), 0);
    int64_t t0 = (int64_t)rill_now_ns();
    while (g.f.n_replies == 0) {
        struct pollfd pfd = { .fd = g.s->efd, .events = POLLIN };
        poll(&pfd, 1, 100); /* as the socket thread waits on the eventfd */
        srv_events_drain(g.s);
        ck_assert_int_lt((int64_t)rill_now_ns() - t0, 60 * 1000000000LL);
    }
    pthread_join(th, NULL);
    ck_assert_int_eq(g.f.n_tokens + atomic_load(&g.s->engine_drops), N);
    char want[8192];
    expected_text(&g, ids + N - 32, 32, want, sizeof want);
    ck_assert_str_eq(g.f.answer, want);
    free(ids);
    rig_close(&g);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("server_events");
    TCase *tc = tcase_create("events");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, tokens_come_before_their_answer);
    tcase_add_test(tc, a_full_ring_drops_tokens_never_answers);
    tcase_add_test(tc, tokens_cross_threads_in_order);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    if (!test_have_models(QWEN, NULL)) {
        return TEST_SKIP;
    }
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
