/*
 * test_server_metrics.c - the Prometheus text of server.metrics (server/metrics.c's
 * srv_metrics_render, through the module's private header), from known figures: exact lines,
 * histogram buckets cumulative and ending in +Inf == _count, sums exact in seconds, label values
 * escaped, every family with its HELP and TYPE first, and snprintf's sizing contract. Then the
 * command itself through srv_handle, over a real scheduler on the tiny qwen2 model (skipped
 * without it) and a fake front door: requests and errors counted per command (an ask's late
 * reply under ask, whatever command is running), TTFT recorded, and every allocation failure
 * answered ENOMEM. tests/test_server.py's metrics case checks a live rilld's text with promtool.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_msgpack.h"
#include "server_internal.h"
#include "test_util.h"

#define QWEN "rill-tiny-qwen2-F32.gguf"

/* Figures: two models, counters with distinct values so that a swapped field shows. */
static srv_metrics_t *figures(void) {
    srv_metrics_t *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    rill_hist_init(&m->ttft);
    rill_hist_init(&m->step);
    /* ttft: 0.5 ms, 3 ms, 40 ms, 40 ms, 2 s, 90 s (above the ladder) */
    const uint64_t t[] = { 500000, 3000000, 40000000, 40000000, 2000000000, 90000000000 };
    for (int i = 0; i < 6; i++) {
        rill_hist_record(&m->ttft, t[i]);
    }
    for (int c = 0; c < SRV_CMD_LABELS; c++) {
        m->requests[c] = 100 + c;
        m->errors[c] = c;
    }
    m->event_drops = 11;
    m->reply_drops = 12;
    m->engine_drops = 13;
    m->standing_refreshes = 21;
    m->standing_abandoned = 22;
    m->standing_cache_hits = 23;
    m->standing_deferred_interval = 24;
    m->standing_deferred_share = 25;
    m->spec_tokens_computed = 31;
    m->spec_tokens_kept = 32;
    m->spec_tokens_wasted = 33;
    m->sessions_awake = 41;
    m->sessions_asleep = 42;
    m->sessions_asleep_log = 43;
    m->sleep_disk_bytes = 44;
    m->sleeps = 45;
    m->wakes = 46;
    m->wakes_log = 47;
    m->wake_fallbacks = 48;
    m->wake_errors = 49;
    m->sleep_errors = 50;
    rill_hist_init(&m->wake);
    rill_hist_record(&m->wake, 3000000);   /* 3 ms */
    rill_hist_record(&m->wake, 700000000); /* 0.7 s */
    m->n_models = 2;
    m->models[0] = (srv_metrics_model_t){ .name = "smol",
                                          .sessions = 3,
                                          .steps = 41,
                                          .busy_ns = 1500000001,
                                          .tokens = { 1, 2, 3, 4, 5 },
                                          .pages_total = 1024,
                                          .pages_used = 100,
                                          .pages_free = 924,
                                          .pages_reserved = 512,
                                          .backlog = 77 };
    m->models[1] = (srv_metrics_model_t){
        .name = "we\"ird\\na\nme\xff", .sessions = 1, .pages_total = 8, .pages_free = 8
    };
    return m;
}

static char *render(const srv_metrics_t *m) {
    int64_t n = srv_metrics_render(m, NULL, 0);
    ck_assert_int_gt(n, 0);
    char *buf = malloc((size_t)n + 1);
    ck_assert_int_eq(srv_metrics_render(m, buf, (size_t)n + 1), n);
    ck_assert_uint_eq(strlen(buf), (size_t)n);
    return buf;
}

/* Whether text holds line as a whole line. */
static bool has_line(const char *text, const char *line) {
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)) != NULL; p++) {
        if ((p == text || p[-1] == '\n') && p[n] == '\n') {
            return true;
        }
    }
    return false;
}

#define CK_LINE(text, line) ck_assert_msg(has_line(text, line), "missing line: %s", line)

START_TEST(exact_lines_for_known_figures) {
    srv_metrics_t *m = figures();
    char *t = render(m);
    CK_LINE(t, "# HELP rill_requests_total Requests received, by command (invalid: frames that "
               "did not decode).");
    CK_LINE(t, "# TYPE rill_requests_total counter");
    CK_LINE(t, "rill_requests_total{command=\"session.create\"} 100");
    CK_LINE(t, "rill_requests_total{command=\"ask\"} 107");
    char line[120]; /* figures() gives command c 100 + c requests and c errors */
    snprintf(line, sizeof line, "rill_requests_total{command=\"server.metrics\"} %d",
             100 + RILL_PROTO_SERVER_METRICS);
    CK_LINE(t, line);
    snprintf(line, sizeof line, "rill_requests_total{command=\"invalid\"} %d",
             100 + SRV_CMD_INVALID);
    CK_LINE(t, line);
    CK_LINE(t, "rill_request_errors_total{command=\"ask\"} 7");
    snprintf(line, sizeof line, "rill_request_errors_total{command=\"invalid\"} %d",
             SRV_CMD_INVALID);
    CK_LINE(t, line);
    CK_LINE(t, "rill_tokens_total{model=\"smol\",class=\"decode\"} 1");
    CK_LINE(t, "rill_tokens_total{model=\"smol\",class=\"ingest\"} 3");
    CK_LINE(t, "rill_tokens_total{model=\"smol\",class=\"spec\"} 5");
    CK_LINE(t, "# TYPE rill_steps_total counter");
    CK_LINE(t, "rill_steps_total{model=\"smol\"} 41");
    CK_LINE(t, "rill_busy_seconds_total{model=\"smol\"} 1.500000001");
    CK_LINE(t, "# TYPE rill_sessions gauge");
    CK_LINE(t, "rill_sessions{model=\"smol\"} 3");
    CK_LINE(t, "rill_backlog_tokens{model=\"smol\"} 77");
    CK_LINE(t, "rill_kv_pages_capacity{model=\"smol\"} 1024");
    CK_LINE(t, "rill_kv_pages_used{model=\"smol\"} 100");
    CK_LINE(t, "rill_kv_pages_free{model=\"smol\"} 924");
    CK_LINE(t, "rill_kv_pages_reserved{model=\"smol\"} 512");
    CK_LINE(t, "# TYPE rill_event_drops_total counter");
    CK_LINE(t, "rill_event_drops_total 11");
    CK_LINE(t, "rill_reply_drops_total 12");
    CK_LINE(t, "rill_engine_drops_total 13");
    CK_LINE(t, "rill_standing_refreshes_total 21");
    CK_LINE(t, "rill_standing_abandoned_total 22");
    CK_LINE(t, "rill_standing_cache_hits_total 23");
    CK_LINE(t, "rill_standing_deferred_interval_total 24");
    CK_LINE(t, "rill_standing_deferred_share_total 25");
    CK_LINE(t, "rill_spec_tokens_computed_total 31");
    CK_LINE(t, "rill_spec_tokens_kept_total 32");
    CK_LINE(t, "rill_spec_tokens_wasted_total 33");
    CK_LINE(t, "# TYPE rill_sessions_awake gauge");
    CK_LINE(t, "rill_sessions_awake 41");
    CK_LINE(t, "rill_sessions_asleep 42");
    CK_LINE(t, "rill_sessions_asleep_log 43");
    CK_LINE(t, "rill_sleep_disk_bytes 44");
    CK_LINE(t, "# TYPE rill_sleeps_total counter");
    CK_LINE(t, "rill_sleeps_total 45");
    CK_LINE(t, "rill_wakes_total 46");
    CK_LINE(t, "rill_wakes_log_total 47");
    CK_LINE(t, "rill_wake_fallbacks_total 48");
    CK_LINE(t, "rill_wake_errors_total 49");
    CK_LINE(t, "rill_sleep_errors_total 50");
    CK_LINE(t, "# TYPE rill_wake_duration_seconds histogram");
    CK_LINE(t, "rill_wake_duration_seconds_bucket{le=\"0.0025\"} 0");
    CK_LINE(t, "rill_wake_duration_seconds_bucket{le=\"0.005\"} 1");
    CK_LINE(t, "rill_wake_duration_seconds_bucket{le=\"1\"} 2");
    CK_LINE(t, "rill_wake_duration_seconds_count 2");
    CK_LINE(t, "rill_wake_duration_seconds_sum 0.703000000");
    /* the ttft histogram, whole: samples at or below each bound, +Inf all of them */
    const char *want = "# HELP rill_ttft_seconds Time from an ask's arrival to its first answer "
                       "token (asks answered).\n"
                       "# TYPE rill_ttft_seconds histogram\n"
                       "rill_ttft_seconds_bucket{le=\"0.001\"} 1\n"
                       "rill_ttft_seconds_bucket{le=\"0.0025\"} 1\n"
                       "rill_ttft_seconds_bucket{le=\"0.005\"} 2\n"
                       "rill_ttft_seconds_bucket{le=\"0.01\"} 2\n"
                       "rill_ttft_seconds_bucket{le=\"0.025\"} 2\n"
                       "rill_ttft_seconds_bucket{le=\"0.05\"} 4\n"
                       "rill_ttft_seconds_bucket{le=\"0.1\"} 4\n"
                       "rill_ttft_seconds_bucket{le=\"0.25\"} 4\n"
                       "rill_ttft_seconds_bucket{le=\"0.5\"} 4\n"
                       "rill_ttft_seconds_bucket{le=\"1\"} 4\n"
                       "rill_ttft_seconds_bucket{le=\"2.5\"} 5\n"
                       "rill_ttft_seconds_bucket{le=\"5\"} 5\n"
                       "rill_ttft_seconds_bucket{le=\"10\"} 5\n"
                       "rill_ttft_seconds_bucket{le=\"30\"} 5\n"
                       "rill_ttft_seconds_bucket{le=\"60\"} 5\n"
                       "rill_ttft_seconds_bucket{le=\"+Inf\"} 6\n"
                       "rill_ttft_seconds_sum 92.083500000\n"
                       "rill_ttft_seconds_count 6\n";
    ck_assert_msg(strncmp(t, want, strlen(want)) == 0, "got:\n%.1500s", t);
    /* an empty histogram: every bucket 0, sum 0 */
    CK_LINE(t, "rill_step_duration_seconds_bucket{le=\"0.001\"} 0");
    CK_LINE(t, "rill_step_duration_seconds_bucket{le=\"+Inf\"} 0");
    CK_LINE(t, "rill_step_duration_seconds_sum 0.000000000");
    CK_LINE(t, "rill_step_duration_seconds_count 0");
    free(t);
    free(m);
}
END_TEST

START_TEST(label_values_are_escaped) {
    srv_metrics_t *m = figures();
    char *t = render(m);
    /* backslash, quote and line feed escaped; the byte 0xff (no UTF-8) as U+FFFD */
    CK_LINE(t, "rill_sessions{model=\"we\\\"ird\\\\na\\nme\xEF\xBF\xBD\"} 1");
    CK_LINE(t, "rill_tokens_total{model=\"we\\\"ird\\\\na\\nme\xEF\xBF\xBD\",class=\"prefill\"} 0");
    /* so no line holds a raw line feed of a name: every line is a comment or a sample */
    for (const char *p = t; *p != '\0';) {
        const char *e = strchr(p, '\n');
        ck_assert_ptr_nonnull(e);
        ck_assert_msg(*p == '#' || strncmp(p, "rill_", 5) == 0, "stray line: %.*s", (int)(e - p),
                      p);
        p = e + 1;
    }
    free(t);
    free(m);
}
END_TEST

/* Every histogram's buckets are non-decreasing and end with +Inf == _count, whatever the
 * samples (random ones over nine decades). */
START_TEST(histograms_are_cumulative) {
    srv_metrics_t *m = figures();
    uint64_t x = 99;
    for (int i = 0; i < 5000; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        uint64_t v = (x >> 33) % 1000;
        for (int k = (int)((x >> 20) % 9); k > 0; k--) {
            v *= 10;
        }
        rill_hist_record(&m->step, v);
    }
    char *t = render(m);
    const char *p = strstr(t, "rill_step_duration_seconds_bucket");
    ck_assert_ptr_nonnull(p);
    uint64_t prev = 0, n = 0, count = 0;
    int buckets = 0;
    bool inf = false;
    while (strncmp(p, "rill_step_duration_seconds_bucket{le=\"", 38) == 0) {
        const char *q = strchr(p, '}');
        ck_assert(sscanf(q, "} %" SCNu64, &n) == 1);
        ck_assert_uint_ge(n, prev);
        prev = n;
        inf = strncmp(p + 38, "+Inf\"", 5) == 0;
        buckets++;
        p = strchr(p, '\n') + 1;
    }
    ck_assert(inf);
    ck_assert_int_eq(buckets, SRV_METRICS_N_LE + 1);
    ck_assert(sscanf(strstr(p, "rill_step_duration_seconds_count "),
                     "rill_step_duration_seconds_count %" SCNu64, &count) == 1);
    ck_assert_uint_eq(count, 5000);
    ck_assert_uint_eq(n, count);
    free(t);
    free(m);
}
END_TEST

/* Every sample's family has its HELP then TYPE line before it, once. */
START_TEST(every_family_has_help_and_type) {
    srv_metrics_t *m = figures();
    char *t = render(m);
    char fam[128] = "";
    int families = 0;
    for (const char *p = t; *p != '\0'; p = strchr(p, '\n') + 1) {
        char name[128], type[32];
        if (sscanf(p, "# HELP %127s", name) == 1) {
            ck_assert_msg(sscanf(strchr(p, '\n') + 1, "# TYPE %127s %31s", fam, type) == 2,
                          "no TYPE after HELP %s", name);
            ck_assert_str_eq(fam, name);
            char again[160];
            snprintf(again, sizeof again, "# HELP %s ", name);
            ck_assert_ptr_eq(strstr(t, again), p); /* only once */
            families++;
            p = strchr(p, '\n') + 1;
            continue;
        }
        ck_assert_msg(fam[0] != '\0' && strncmp(p, fam, strlen(fam)) == 0,
                      "sample outside its family %s: %.60s", fam, p);
    }
    ck_assert_int_eq(families, 35);
    free(t);
    free(m);
}
END_TEST

START_TEST(sizing_as_snprintf) {
    srv_metrics_t *m = figures();
    int64_t n = srv_metrics_render(m, NULL, 0);
    char *full = render(m);
    char small[40];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(srv_metrics_render(m, small, sizeof small), n);
    ck_assert_uint_eq(strlen(small), sizeof small - 1); /* cut and NUL-terminated */
    ck_assert_int_eq(memcmp(small, full, sizeof small - 1), 0);
    char one = 'x';
    ck_assert_int_eq(srv_metrics_render(m, &one, 1), n);
    ck_assert_int_eq(one, '\0');
    free(full);
    free(m);
}
END_TEST

/* ---- the command, through srv_handle -------------------------------------------------------- */

/* The fake door: the last reply's status and, for server.metrics, its text. */
typedef struct fake {
    srv_door_t door;
    int n_replies;
    char status[32];
    char *text;
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
    snprintf(f->status, sizeof f->status, "%.*s", (int)st->via.str.size, st->via.str.ptr);
    free(f->text);
    f->text = NULL;
    const msgpack_object *t =
        res->type == MSGPACK_OBJECT_MAP ? rill_msgpack_get(res, "text") : NULL;
    if (t != NULL) {
        ck_assert_uint_eq(res->via.map.size, 1); /* {text} and nothing else */
        f->text = strndup(t->via.str.ptr, t->via.str.size);
    }
    f->n_replies++;
    msgpack_unpacked_destroy(&u);
}

static void fake_publish(srv_t *s, srv_door_t *d, const char *topic, const void *buf, size_t len) {
    (void)s;
    (void)d;
    (void)topic;
    (void)buf;
    (void)len;
}

typedef struct rig {
    srv_t *s;
    rill_model_t *model;
    rill_backend_t *be;
    rill_forward_t *fw;
    rill_session_pool_t *pool;
    fake_t f;
    srv_call_t call;
} rig_t;

static void rig_open(rig_t *g) {
    memset(g, 0, sizeof *g);
    g->s = calloc(1, sizeof *g->s);
    ck_assert_ptr_nonnull(g->s);
    srv_t *s = g->s;
    s->p = rill_server_default_params();
    msgpack_sbuffer_init(&s->out);
    rill_hist_init(&s->ttft);
    ck_assert_int_eq(srv_events_init(s), 0);
    ck_assert_int_eq(rill_proto_dec_new(1 << 20, &s->dec), RILL_OK);
    g->model = test_model_load(QWEN);
    ck_assert_int_eq(rill_tokenizer_new(rill_model_gguf(g->model), &s->models[0].tok), RILL_OK);
    test_rig_params_t p = test_rig_default_params(QWEN);
    p.backend.cpu.n_threads = 1;
    p.pool.n_cells = 1024;
    test_engine_open(g->model, s->models[0].tok, &p, &g->be, &g->fw, &g->pool);
    ck_assert_int_eq(rill_sched_new(g->pool, NULL, &s->sch), RILL_OK);
    snprintf(s->models[0].name, sizeof s->models[0].name, "tiny");
    s->n_models = 1;
    g->f.door = (srv_door_t){ .name = "fake", .reply = fake_reply, .publish = fake_publish };
    s->doors[s->n_doors++] = &g->f.door;
    g->call = (srv_call_t){ .owner = "" };
    g->call.from.door = &g->f.door;
    g->call.from.len = 1;
}

static void rig_close(rig_t *g) {
    srv_t *s = g->s;
    rill_sched_destroy(&s->sch);
    while (s->pends != NULL) {
        srv_drop_pend(s, s->pends);
    }
    while (s->sessions != NULL) {
        srv_sess_t *x = s->sessions;
        s->sessions = x->next;
        srv_free_sess(x);
    }
    test_engine_close(&g->pool, &g->fw, &g->be);
    rill_proto_dec_destroy(&s->dec);
    srv_events_deinit(s);
    msgpack_sbuffer_destroy(&s->out);
    rill_tokenizer_destroy(&s->models[0].tok);
    rill_model_destroy(&g->model);
    free(g->f.text);
    free(s);
}

/* Sends {v: 1, id, cmd[, args: {session}]} through srv_handle; returns the reply's status. */
static const char *send_cmd(rig_t *g, const char *cmd, const char *session) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, session != NULL ? 4 : 3);
    srv_pk_kv_int(&pk, "v", 1);
    srv_pk_kv_int(&pk, "id", 9);
    srv_pk_kv_str(&pk, "cmd", cmd);
    if (session != NULL) {
        srv_pk_str(&pk, "args");
        msgpack_pack_map(&pk, 1);
        srv_pk_kv_str(&pk, "session", session);
    }
    int before = g->f.n_replies;
    srv_handle(g->s, &g->call, sb.data, sb.size);
    msgpack_sbuffer_destroy(&sb);
    ck_assert_int_eq(g->f.n_replies, before + 1);
    return g->f.status;
}

/* The value of the sample line that starts with `series ` in text. */
static long long sample(const char *text, const char *series) {
    char key[200];
    snprintf(key, sizeof key, "\n%s ", series);
    const char *p = strstr(text, key);
    ck_assert_msg(p != NULL, "no sample %s", series);
    return strtoll(p + strlen(key), NULL, 10);
}

/* An ask's end as the engine reports it, handed to srv_on_done through the event queue. */
static void end_ask(rig_t *g, srv_sess_t *x, rill_err_t status, int64_t ttft_ns) {
    pend_t *p = rill_calloc(RILL_MEM_SERVER, 1, sizeof *p); /* srv_on_done frees it */
    ck_assert_ptr_nonnull(p);
    p->rid = 5;
    p->sess = x;
    p->to = g->call.from;
    rill_tokenizer_stream_init(&p->stream, 0);
    p->next = g->s->pends;
    g->s->pends = p;
    static const int32_t tok[1] = { 1 };
    rill_sched_answer_t a = { .status = status,
                              .message = status == RILL_OK ? "" : "cancelled",
                              .tokens = tok,
                              .n_tokens = 1,
                              .ttft_ns = ttft_ns,
                              .total_ns = ttft_ns };
    srv_cb_done(g->s, 5, &a);
    srv_events_drain(g->s);
}

START_TEST(the_command_counts_per_command) {
    rig_t g;
    rig_open(&g);
    ck_assert_str_eq(send_cmd(&g, "session.list", NULL), "OK");
    ck_assert_str_eq(send_cmd(&g, "session.stats", "nope"), "ENOTFOUND");
    ck_assert_str_eq(send_cmd(&g, "session.frobnicate", NULL), "EINVAL"); /* invalid */
    srv_handle(g.s, &g.call, "\xc1", 1);                                  /* not msgpack */
    ck_assert_str_eq(g.f.status, "EFORMAT");
    srv_sess_t *x = srv_new_sess(g.s); /* a session record only: the asks' ends need one */
    ck_assert_ptr_nonnull(x);
    snprintf(x->name, sizeof x->name, "met");
    srv_link_sess(g.s, x);
    /* ends of asks: an OK one (its TTFT recorded), and a cancelled one delivered while another
     * command is being answered (a close drains the queue): counted under ask, and the running
     * command's own count left alone */
    end_ask(&g, x, RILL_OK, 3000000);
    g.s->replying = 1 + RILL_PROTO_SESSION_CLOSE;
    end_ask(&g, x, RILL_ECANCELED, 0);
    ck_assert_int_eq(g.s->replying, 1 + RILL_PROTO_SESSION_CLOSE);
    g.s->replying = 0;
    ck_assert_str_eq(send_cmd(&g, "server.metrics", NULL), "OK");
    const char *t = g.f.text;
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(sample(t, "rill_requests_total{command=\"session.list\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_request_errors_total{command=\"session.list\"}"), 0);
    ck_assert_int_eq(sample(t, "rill_requests_total{command=\"session.stats\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_request_errors_total{command=\"session.stats\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_requests_total{command=\"invalid\"}"), 2);
    ck_assert_int_eq(sample(t, "rill_request_errors_total{command=\"invalid\"}"), 2);
    ck_assert_int_eq(sample(t, "rill_requests_total{command=\"ask\"}"), 0);
    ck_assert_int_eq(sample(t, "rill_request_errors_total{command=\"ask\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_request_errors_total{command=\"session.close\"}"), 0);
    ck_assert_int_eq(sample(t, "rill_requests_total{command=\"server.metrics\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_ttft_seconds_bucket{le=\"0.0025\"}"), 0);
    ck_assert_int_eq(sample(t, "rill_ttft_seconds_bucket{le=\"0.005\"}"), 1);
    ck_assert_int_eq(sample(t, "rill_ttft_seconds_count"), 1);
    ck_assert_int_eq(sample(t, "rill_sessions{model=\"tiny\"}"), 1);
    rill_sched_model_info_t mi;
    ck_assert_int_eq(rill_sched_model_info(g.s->sch, 0, &mi), RILL_OK);
    ck_assert_int_eq(sample(t, "rill_kv_pages_capacity{model=\"tiny\"}"), mi.total_pages);
    ck_assert_int_eq(sample(t, "rill_kv_pages_reserved{model=\"tiny\"}"), mi.reserved_pages);
    ck_assert_int_eq(g.s->requests, 5);
    ck_assert_int_eq(g.s->bad_requests, 2);
    rig_close(&g);
}
END_TEST

/* Every allocation of the command failing in turn: an ENOMEM reply, counted as its error;
 * then it succeeds. (AddressSanitizer checks that nothing leaks on the way.) */
START_TEST(the_command_out_of_memory) {
    rig_t g;
    rig_open(&g);
    int failures = 0;
    for (int64_t n = 1;; n++) {
        rill_mem_fail_nth(n);
        const char *st = send_cmd(&g, "server.metrics", NULL);
        rill_mem_fail_nth(0);
        if (strcmp(st, "OK") == 0) {
            break;
        }
        ck_assert_str_eq(st, "ENOMEM");
        ck_assert_ptr_null(g.f.text);
        failures++;
        ck_assert_int_lt(failures, 10);
    }
    ck_assert_int_eq(failures, 3); /* the figures, the engine's stats, the text */
    ck_assert_int_eq(sample(g.f.text, "rill_request_errors_total{command=\"server.metrics\"}"), 3);
    ck_assert_int_eq(sample(g.f.text, "rill_requests_total{command=\"server.metrics\"}"), 4);
    rig_close(&g);
}
END_TEST

int main(void) {
    Suite *s = suite_create("server_metrics");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, exact_lines_for_known_figures);
    tcase_add_test(tc, label_values_are_escaped);
    tcase_add_test(tc, histograms_are_cumulative);
    tcase_add_test(tc, every_family_has_help_and_type);
    tcase_add_test(tc, sizing_as_snprintf);
    suite_add_tcase(s, tc);
    tc = tcase_create("command");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, the_command_counts_per_command);
    tcase_add_test(tc, the_command_out_of_memory);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
