/*
 * test_server_metrics.c - the Prometheus text of server.metrics (server/metrics.c's
 * srv_metrics_render, through the module's private header), from known figures: exact lines,
 * histogram buckets cumulative and ending in +Inf == _count, sums exact in seconds, label values
 * escaped, every family with its HELP and TYPE first, and snprintf's sizing contract.
 * No model, no daemon: tests/test_server.py's metrics case checks the live text with promtool.
 */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "server_internal.h"

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
    m->spec_tokens_computed = 31;
    m->spec_tokens_kept = 32;
    m->spec_tokens_wasted = 33;
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
    CK_LINE(t, "rill_requests_total{command=\"server.metrics\"} 113");
    CK_LINE(t, "rill_requests_total{command=\"invalid\"} 114");
    CK_LINE(t, "rill_request_errors_total{command=\"ask\"} 7");
    CK_LINE(t, "rill_request_errors_total{command=\"invalid\"} 14");
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
    CK_LINE(t, "rill_spec_tokens_computed_total 31");
    CK_LINE(t, "rill_spec_tokens_kept_total 32");
    CK_LINE(t, "rill_spec_tokens_wasted_total 33");
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
    ck_assert_int_eq(families, 22);
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

int main(void) {
    Suite *s = suite_create("server_metrics");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, exact_lines_for_known_figures);
    tcase_add_test(tc, label_values_are_escaped);
    tcase_add_test(tc, histograms_are_cumulative);
    tcase_add_test(tc, every_family_has_help_and_type);
    tcase_add_test(tc, sizing_as_snprintf);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}
