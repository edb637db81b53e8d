/*
 * metrics.c - rilld's figures in the Prometheus text exposition format, version 0.0.4 (the
 * command server.metrics; the HTTP door serves the same text at GET /metrics). Contract:
 * server_internal.h; the metric names: docs/protocol.md "Metrics".
 *
 * Two halves. srv_metrics_render is a pure function from a plain struct of figures
 * (srv_metrics_t) to text, so that its output can be tested line by line without a daemon;
 * srv_cmd_metrics collects those figures (the server's counters, rill_sched_stats, one
 * rill_sched_model_info per model) and replies with the text.
 *
 * Histograms (TTFT, step time) come from core's rill_hist_t, recorded in nanoseconds; they are
 * exported on one fixed ladder of `le` bounds in seconds (1 ms .. 60 s, then +Inf), each count
 * rill_hist_count_le of the bound: cumulative by construction, never counting a sample above
 * its bound (a sample within 1/32 below a bound may be counted in the next one up). The ladder
 * is fixed so that series stay comparable across restarts and versions; a log-linear export of
 * every populated bucket was rejected (a thousand series, changing with the data).
 *
 * Sums and second-valued counters are printed from integer nanoseconds as "S.NNNNNNNNN", exact
 * and the same on every platform (no float formatting). Label values are escaped as the format
 * requires (backslash, double quote, line feed) and bytes that are not UTF-8 become U+FFFD:
 * model names are restricted to [A-Za-z0-9_.-] today, but the renderer does not rely on it.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_utf8.h"
#include "server_internal.h"

/* ---- the text ------------------------------------------------------------------------------ */

/* An append-only writer with snprintf's contract: len counts every byte, written or not. */
typedef struct out {
    char *buf;
    size_t cap, len;
} out_t;

static void put(out_t *o, const char *p, size_t n) {
    if (o->len < o->cap) {
        size_t room = o->cap - o->len;
        memcpy(o->buf + o->len, p, n < room ? n : room);
    }
    o->len += n;
}

static void putf(out_t *o, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void putf(out_t *o, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0) {
        put(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
    }
}

/* A label value, escaped. */
static void put_value(out_t *o, const char *v) {
    size_t n = strlen(v);
    for (size_t i = 0; i < n;) {
        size_t k = rill_utf8_char_len(v + i, n - i);
        if (k == 0) {
            put(o, "\xEF\xBF\xBD", 3); /* U+FFFD for a byte that starts no character */
            i++;
        } else if (v[i] == '\\') {
            put(o, "\\\\", 2);
            i++;
        } else if (v[i] == '"') {
            put(o, "\\\"", 2);
            i++;
        } else if (v[i] == '\n') {
            put(o, "\\n", 2);
            i++;
        } else {
            put(o, v + i, k);
            i += k;
        }
    }
}

static void head(out_t *o, const char *name, const char *type, const char *help) {
    putf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{k1="v1",k2="v2"} (labels with a NULL key are left out). */
static void series(out_t *o, const char *name, const char *k1, const char *v1, const char *k2,
                   const char *v2) {
    put(o, name, strlen(name));
    if (k1 != NULL) {
        putf(o, "{%s=\"", k1);
        put_value(o, v1);
        put(o, "\"", 1);
        if (k2 != NULL) {
            putf(o, ",%s=\"", k2);
            put_value(o, v2);
            put(o, "\"", 1);
        }
        put(o, "}", 1);
    }
    put(o, " ", 1);
}

static void put_int(out_t *o, int64_t v) {
    putf(o, "%" PRId64 "\n", v);
}

/* Nanoseconds as seconds, exactly: "S.NNNNNNNNN" (negative figures, which none should be, as
 * 0). */
static void put_seconds(out_t *o, int64_t ns) {
    uint64_t u = ns > 0 ? (uint64_t)ns : 0;
    putf(o, "%" PRIu64 ".%09" PRIu64 "\n", u / 1000000000u, u % 1000000000u);
}

static void scalar(out_t *o, const char *name, const char *type, const char *help, int64_t v) {
    head(o, name, type, help);
    series(o, name, NULL, NULL, NULL, NULL);
    put_int(o, v);
}

/* The `le` ladder: bounds in nanoseconds and as printed. */
static const uint64_t k_le_ns[SRV_METRICS_N_LE] = {
    1000000,   2500000,    5000000,    10000000,   25000000,    50000000,    100000000,   250000000,
    500000000, 1000000000, 2500000000, 5000000000, 10000000000, 30000000000, 60000000000,
};
static const char *const k_le[SRV_METRICS_N_LE] = {
    "0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1", "0.25",
    "0.5",   "1",      "2.5",   "5",    "10",    "30",   "60",
};

static void histogram(out_t *o, const char *name, const char *help, const rill_hist_t *h) {
    char n[96];
    head(o, name, "histogram", help);
    snprintf(n, sizeof n, "%s_bucket", name);
    for (int i = 0; i < SRV_METRICS_N_LE; i++) {
        series(o, n, "le", k_le[i], NULL, NULL);
        putf(o, "%" PRIu64 "\n", rill_hist_count_le(h, k_le_ns[i]));
    }
    series(o, n, "le", "+Inf", NULL, NULL);
    putf(o, "%" PRIu64 "\n", h->count);
    snprintf(n, sizeof n, "%s_sum", name);
    series(o, n, NULL, NULL, NULL, NULL);
    /* samples are integers: their sum is one below 2^53 ns (104 days of TTFT) */
    put_seconds(o, h->sum < 9.2e18 ? (int64_t)h->sum : INT64_MAX);
    snprintf(n, sizeof n, "%s_count", name);
    series(o, n, NULL, NULL, NULL, NULL);
    putf(o, "%" PRIu64 "\n", h->count);
}

/* One gauge or counter per model, from the int64_t at byte offset off of srv_metrics_model_t. */
static void per_model(out_t *o, const srv_metrics_t *m, const char *name, const char *type,
                      const char *help, size_t off, bool seconds) {
    head(o, name, type, help);
    for (int32_t i = 0; i < m->n_models; i++) {
        const srv_metrics_model_t *x = &m->models[i];
        int64_t v;
        memcpy(&v, (const char *)x + off, sizeof v);
        series(o, name, "model", x->name, NULL, NULL);
        seconds ? put_seconds(o, v) : put_int(o, v);
    }
}

#define MODEL_FIELD(f) offsetof(srv_metrics_model_t, f)

int64_t srv_metrics_render(const srv_metrics_t *m, char *buf, size_t cap) {
    out_t o = { .buf = buf, .cap = cap, .len = 0 };
    histogram(&o, "rill_ttft_seconds",
              "Time from an ask's arrival to its first answer token (asks answered).", &m->ttft);
    histogram(&o, "rill_step_duration_seconds", "Duration of the engine's forward passes (steps).",
              &m->step);

    head(&o, "rill_requests_total", "counter",
         "Requests received, by command (invalid: frames that did not decode).");
    for (int c = 0; c <= RILL_PROTO_N_CMDS; c++) {
        const char *name =
            c < RILL_PROTO_N_CMDS ? rill_proto_cmd_name((rill_proto_cmd_t)c) : "invalid";
        series(&o, "rill_requests_total", "command", name, NULL, NULL);
        put_int(&o, m->requests[c]);
    }
    head(&o, "rill_request_errors_total", "counter",
         "Replies with a status other than OK, by the command they answer.");
    for (int c = 0; c <= RILL_PROTO_N_CMDS; c++) {
        const char *name =
            c < RILL_PROTO_N_CMDS ? rill_proto_cmd_name((rill_proto_cmd_t)c) : "invalid";
        series(&o, "rill_request_errors_total", "command", name, NULL, NULL);
        put_int(&o, m->errors[c]);
    }

    head(&o, "rill_tokens_total", "counter", "Tokens the engine evaluated, by model and class.");
    for (int32_t i = 0; i < m->n_models; i++) {
        for (int k = 0; k < RILL_SCHED_N_CLASSES; k++) {
            series(&o, "rill_tokens_total", "model", m->models[i].name, "class",
                   rill_sched_class_name((rill_sched_class_t)k));
            put_int(&o, m->models[i].tokens[k]);
        }
    }
    per_model(&o, m, "rill_steps_total", "counter", "Forward passes the engine ran, by model.",
              MODEL_FIELD(steps), false);
    per_model(&o, m, "rill_busy_seconds_total", "counter",
              "Time the engine spent in forward passes, by model.", MODEL_FIELD(busy_ns), true);
    per_model(&o, m, "rill_sessions", "gauge", "Open sessions, by model.", MODEL_FIELD(sessions),
              false);
    per_model(&o, m, "rill_backlog_tokens", "gauge",
              "Tokens acknowledged to sessions and not yet evaluated, by model.",
              MODEL_FIELD(backlog), false);
    per_model(&o, m, "rill_kv_pages_capacity", "gauge", "KV cache pages of the model's pool.",
              MODEL_FIELD(pages_total), false);
    per_model(&o, m, "rill_kv_pages_used", "gauge", "KV cache pages in use.",
              MODEL_FIELD(pages_used), false);
    per_model(&o, m, "rill_kv_pages_free", "gauge", "KV cache pages free.", MODEL_FIELD(pages_free),
              false);
    per_model(&o, m, "rill_kv_pages_reserved", "gauge",
              "KV cache pages reserved by sessions' windows (admission).",
              MODEL_FIELD(pages_reserved), false);

    scalar(&o, "rill_event_drops_total", "counter", "Events rilld could not hand to a front door.",
           m->event_drops);
    scalar(&o, "rill_reply_drops_total", "counter",
           "Replies that could not be queued (client queue full or client gone).", m->reply_drops);
    scalar(&o, "rill_engine_drops_total", "counter",
           "Answer-token events dropped between the engine and the socket thread.",
           m->engine_drops);
    scalar(&o, "rill_standing_refreshes_total", "counter", "Standing-query refreshes completed.",
           m->standing_refreshes);
    scalar(&o, "rill_standing_abandoned_total", "counter",
           "Standing-query refreshes abandoned for newer data or reclaimed.",
           m->standing_abandoned);
    scalar(&o, "rill_standing_cache_hits_total", "counter",
           "Asks answered from a standing query's cache.", m->standing_cache_hits);
    scalar(&o, "rill_standing_deferred_interval_total", "counter",
           "Standing-query refreshes held back by the least interval between refreshes.",
           m->standing_deferred_interval);
    scalar(&o, "rill_standing_deferred_share_total", "counter",
           "Standing-query refreshes held back by the most share of engine time.",
           m->standing_deferred_share);
    histogram(&o, "rill_wake_duration_seconds",
              "Time a sleeping session took to wake (its snapshot or its log re-prefilled).",
              &m->wake);
    scalar(&o, "rill_sessions_awake", "gauge", "Sessions with their pages in RAM.",
           m->sessions_awake);
    scalar(&o, "rill_sessions_asleep", "gauge",
           "Sessions asleep (pages on disk in their snapshot, or only in their log).",
           m->sessions_asleep);
    scalar(&o, "rill_sessions_asleep_log", "gauge",
           "Sleeping sessions that keep only their log (past the sleep disk budget).",
           m->sessions_asleep_log);
    scalar(&o, "rill_sleep_disk_bytes", "gauge", "Bytes of sleeping sessions' snapshots.",
           m->sleep_disk_bytes);
    scalar(&o, "rill_sleeps_total", "counter", "Sessions put to sleep.", m->sleeps);
    scalar(&o, "rill_wakes_total", "counter", "Sleeping sessions woken.", m->wakes);
    scalar(&o, "rill_wakes_log_total", "counter", "Wakes that re-prefilled from the log.",
           m->wakes_log);
    scalar(&o, "rill_wake_fallbacks_total", "counter",
           "Sleep snapshots found damaged at wake (re-prefilled from the log instead).",
           m->wake_fallbacks);
    scalar(&o, "rill_wake_errors_total", "counter",
           "Wakes that failed (the session stayed asleep).", m->wake_errors);
    scalar(&o, "rill_sleep_errors_total", "counter", "Sleep snapshots that could not be written.",
           m->sleep_errors);
    scalar(&o, "rill_spec_tokens_computed_total", "counter",
           "Tokens evaluated on speculative branches.", m->spec_tokens_computed);
    scalar(&o, "rill_spec_tokens_kept_total", "counter", "Speculative tokens kept by commits.",
           m->spec_tokens_kept);
    scalar(&o, "rill_spec_tokens_wasted_total", "counter",
           "Speculative tokens rolled back or cancelled.", m->spec_tokens_wasted);
    if (cap > 0) {
        o.buf[o.len < cap ? o.len : cap - 1] = '\0';
    }
    return (int64_t)o.len;
}

/* ---- the command --------------------------------------------------------------------------- */

void srv_cmd_metrics(srv_t *s, const srv_call_t *c, const rill_proto_req_t *r) {
    srv_metrics_t *m = rill_calloc(RILL_MEM_SERVER, 1, sizeof *m);
    rill_sched_stats_t *st = rill_malloc(RILL_MEM_SERVER, sizeof *st);
    if (m == NULL || st == NULL) {
        rill_free(m);
        rill_free(st);
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    rill_sched_stats(s->sch, st);
    m->ttft = s->ttft;
    m->step = st->step_ns;
    memcpy(m->requests, s->cmd_requests, sizeof m->requests);
    memcpy(m->errors, s->cmd_errors, sizeof m->errors);
    m->event_drops = s->event_drops;
    m->reply_drops = s->reply_drops;
    m->engine_drops = atomic_load(&s->engine_drops);
    m->standing_refreshes = st->standing_refreshes;
    m->standing_abandoned = st->standing_abandoned;
    m->standing_cache_hits = st->standing_cache_hits;
    m->standing_deferred_interval = st->standing_deferred_interval;
    m->standing_deferred_share = st->standing_deferred_share;
    m->spec_tokens_computed = st->spec_tokens_computed;
    m->spec_tokens_kept = st->spec_tokens_kept;
    m->spec_tokens_wasted = st->spec_tokens_wasted;
    m->wake = st->wake_ns;
    m->sessions_awake = st->awake;
    m->sessions_asleep = st->asleep;
    m->sessions_asleep_log = st->asleep_log;
    m->sleep_disk_bytes = st->sleep_disk_bytes;
    m->sleeps = st->sleeps;
    m->wakes = st->wakes;
    m->wakes_log = st->wakes_log;
    m->wake_fallbacks = st->wake_fallbacks;
    m->wake_errors = st->wake_errors;
    m->sleep_errors = st->sleep_errors;
    m->n_models = s->n_models;
    for (int32_t i = 0; i < s->n_models; i++) {
        srv_metrics_model_t *x = &m->models[i];
        rill_sched_model_info_t mi;
        if (s->models[i].sched < 0 ||
            rill_sched_model_info(s->sch, s->models[i].sched, &mi) != RILL_OK) {
            memset(&mi, 0, sizeof mi); /* a recognizer has no pages or passes of its own */
        }
        x->name = s->models[i].name;
        x->steps = mi.steps;
        x->busy_ns = mi.busy_ns;
        memcpy(x->tokens, mi.tokens, sizeof x->tokens);
        x->pages_total = mi.total_pages;
        x->pages_free = mi.free_pages;
        x->pages_used = mi.total_pages - mi.free_pages;
        x->pages_reserved = mi.reserved_pages;
        x->backlog = mi.backlog;
    }
    for (const srv_sess_t *y = s->sessions; y != NULL; y = y->next) {
        m->models[y->model].sessions++; /* the sessions clients see (no prompt templates) */
    }
    rill_free(st);
    int64_t n = srv_metrics_render(m, NULL, 0);
    char *text = rill_malloc(RILL_MEM_SERVER, (size_t)n + 1);
    if (text == NULL) {
        rill_free(m);
        srv_reply_err(s, &c->from, r->id, RILL_ENOMEM, "out of memory");
        return;
    }
    srv_metrics_render(m, text, (size_t)n + 1);
    rill_free(m);
    msgpack_packer pk;
    srv_reply_begin(s, &pk, r->id, RILL_OK, "");
    msgpack_pack_map(&pk, 1);
    srv_pk_str(&pk, "text");
    srv_pk_strn(&pk, text, (size_t)n);
    rill_free(text);
    srv_reply_send(s, &c->from);
}
