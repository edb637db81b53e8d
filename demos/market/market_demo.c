/*
 * market_demo.c - rill's market demo: live market streams into rilld sessions, standing
 * questions answered as the data moves, pushed to this client, and interactive questions whose
 * latency stays flat while the context grows; at the end a re-prefill of the same context
 * shows what a stateless server would have paid. Talks to a running rilld (demos/market/run.sh
 * starts one) through clients/rill_client.h only.
 *
 * Streams: a seeded synthetic market per session (ingest/rill_market.h: byte-identical on every
 * machine), or a CSV of ticks given with --csv (symbol,ts,price,size,side), replayed at
 * --speed times real time. Ends after --duration seconds and prints a summary table.
 *
 * Every answer printed (interactive and pushed) is checked (issue 23): the demo replays rilld's
 * rate governor, so it knows the lines each batch became; they go into a market truth
 * (ingest/rill_market_truth.h) with the data version the batch's acknowledgement carried, and
 * the truth scores each answer's first line at the version the answer saw. rilld's tick ingest
 * holds back the last line's side until more text comes (text ingest without a flush), and the
 * truth is told so. The summary prints accuracy per question kind and overall. An answer's
 * version is the newest one wholly in its context (scheduler/requests.c: a fork taken while
 * later batches were still queued drops them, and its version does not count them), so the
 * version is what it saw; a batch evaluated in part when the question forked is not counted,
 * though its first lines were in the context.
 *
 * How the questions are put (issue 23, item 2; ingest/rill_market_prompt.h, tuned in
 * docs/market_prompts.md): each session starts with the market system prompt (the feed's fields
 * and the answer rules), and every question, interactive or standing, is sent with its kind's
 * answer-form instruction after it (--instruct chooses; the truth's table classifies the
 * question either way). rilld ends a chat answer at the model's end-of-turn token; the demo
 * prints and scores an answer's first line (the stop rule, rill_market_answer_line) and marks
 * what the model wrote after it with " [+N bytes]".
 */
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_client.h"
#include "rill_hist.h"
#include "rill_market.h"
#include "rill_market_prompt.h"
#include "rill_market_truth.h"

#define MAX_SESSIONS 8
#define MAX_BATCH    512
#define MAX_Q        8

static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

typedef struct sess {
    char name[32];
    rill_market_synth_t *synth;
    rill_tick_t next; /* the next tick to send (synthetic or CSV) */
    bool have_next;
    int64_t t0_ns; /* stream time at the start */
    int64_t ticks, lines, rejected, version;
    int64_t pushed; /* standing answers received */
    double age_sum_ms, age_max_ms;
    rill_hist_t ttft;       /* the interactive questions' TTFT in ns (rill_hist.h) */
    rill_market_gov_t *gov; /* the server's governor, replayed here: the same lines */
    char *text;             /* everything ingested, for the final re-prefill comparison */
    size_t text_len, text_cap;
    size_t batch_off;           /* where the text of the batch being sent starts in text */
    rill_market_truth_t *truth; /* the lines at each acknowledged version (the check) */
} sess_t;

typedef struct opts {
    const char *connect, *events, *csv;
    int sessions;
    double duration, speed, rate, ask_every, tick_rate;
    uint64_t seed;
    bool quiet;
    rill_market_instruct_t instruct;
} opts_t;

static void usage(void) {
    printf("usage: market-demo [options]\n\n"
           "Streams market data into rilld sessions, registers standing questions, prints the\n"
           "answers rilld pushes and the latency of interactive questions, then compares with\n"
           "re-prefilling the context. Needs a running rilld (demos/market/run.sh starts one).\n\n"
           "options:\n"
           "  --connect EP      rilld requests endpoint (default %s)\n"
           "  --events EP       rilld events endpoint (default %s)\n"
           "  --sessions N      sessions, one market stream each (default 3, at most %d)\n"
           "  --duration S      seconds to run (default 40)\n"
           "  --rate R          synthetic ticks per second per session (default 3)\n"
           "  --speed X         replay speed against the ticks' own clock (default 1)\n"
           "  --seed N          synthetic market seed (default 7)\n"
           "  --csv FILE        replay this tick CSV (symbol,ts,price,size,side) in every "
           "session\n"
           "  --ask-every S     seconds between interactive questions (default 4)\n"
           "  --tick-rate R     rilld's --tick-rate (to replay its governor; default 20)\n"
           "  --instruct WHERE  where the answer rules go: none, system, question or both\n"
           "                    (default %s; docs/market_prompts.md)\n"
           "  --quiet           only the summary\n",
           RILL_CLIENT_DEFAULT_REQUESTS, RILL_CLIENT_DEFAULT_EVENTS, MAX_SESSIONS,
           rill_market_instruct_name(RILL_MARKET_INSTRUCT_DEFAULT));
}

static int parse(int argc, char **argv, opts_t *o) {
    *o = (opts_t){ .connect = RILL_CLIENT_DEFAULT_REQUESTS,
                   .events = RILL_CLIENT_DEFAULT_EVENTS,
                   .sessions = 3,
                   .duration = 40,
                   .speed = 1,
                   .rate = 3,
                   .ask_every = 4,
                   .tick_rate = 20,
                   .seed = 7,
                   .instruct = RILL_MARKET_INSTRUCT_DEFAULT };
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            return 1;
        }
        if (strcmp(a, "--quiet") == 0) {
            o->quiet = true;
            continue;
        }
        if (v == NULL) {
            fprintf(stderr, "market-demo: %s needs a value (--help)\n", a);
            return 2;
        }
        char *end = NULL;
        double d = strtod(v, &end);
        bool num = end != v && *end == '\0';
        if (strcmp(a, "--connect") == 0) {
            o->connect = v;
        } else if (strcmp(a, "--events") == 0) {
            o->events = v;
        } else if (strcmp(a, "--csv") == 0) {
            o->csv = v;
        } else if (num && strcmp(a, "--sessions") == 0 && d >= 1 && d <= MAX_SESSIONS) {
            o->sessions = (int)d;
        } else if (num && strcmp(a, "--duration") == 0 && d > 0 && d <= 86400) {
            o->duration = d;
        } else if (num && strcmp(a, "--rate") == 0 && d > 0 && d <= 1e5) {
            o->rate = d;
        } else if (num && strcmp(a, "--speed") == 0 && d > 0 && d <= 1e6) {
            o->speed = d;
        } else if (num && strcmp(a, "--seed") == 0 && d >= 0) {
            o->seed = (uint64_t)d;
        } else if (num && strcmp(a, "--tick-rate") == 0 && d > 0) {
            o->tick_rate = d;
        } else if (strcmp(a, "--instruct") == 0 &&
                   rill_market_instruct_from_name(v, &o->instruct)) {
        } else if (num && strcmp(a, "--ask-every") == 0 && d > 0) {
            o->ask_every = d;
        } else {
            fprintf(stderr, "market-demo: bad option or value: %s %s (--help)\n", a, v);
            return 2;
        }
        i++;
    }
    return 0;
}

/* ---- tick sources --------------------------------------------------------------------------- */

typedef struct csv_src {
    rill_tick_t *ticks;
    int64_t n;
} csv_src_t;

static int load_csv(const char *path, csv_src_t *out) {
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        fprintf(stderr, "market-demo: cannot open %s\n", path);
        return -1;
    }
    rill_tick_csv_t *csv = NULL;
    if (rill_tick_csv_new(&csv) != RILL_OK) {
        fclose(f);
        return -1;
    }
    int64_t cap = 0;
    char line[1024];
    int64_t lineno = 0, bad = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        rill_tick_t t;
        rill_err_t err = rill_tick_csv_line(csv, line, strlen(line), &t);
        if (err == RILL_EAGAIN) {
            continue; /* header, blank, comment */
        }
        if (err != RILL_OK) {
            if (bad++ < 3) {
                fprintf(stderr, "market-demo: %s:%" PRId64 ": %s (skipped)\n", path, lineno,
                        rill_last_error(RILL_OK));
            }
            continue;
        }
        if (out->n == cap) {
            cap = cap > 0 ? cap * 2 : 1024;
            rill_tick_t *g = realloc(out->ticks, (size_t)cap * sizeof *g);
            if (g == NULL) {
                break;
            }
            out->ticks = g;
        }
        out->ticks[out->n++] = t;
    }
    fclose(f);
    rill_tick_csv_destroy(&csv);
    if (out->n == 0) {
        fprintf(stderr, "market-demo: %s holds no valid tick\n", path);
        return -1;
    }
    return 0;
}

/* Keeps the text the session ingests for tick t: the server runs every batch through a rate
 * governor with the same parameters (demos/market/run.sh passes --tick-rate to both). */
static void keep_text(sess_t *s, const rill_tick_t *t) {
    const char *text = NULL;
    int64_t n = rill_market_gov_push(s->gov, t, &text);
    if (n <= 0) {
        return;
    }
    if (s->text_len + (size_t)n + 1 > s->text_cap) {
        size_t cap = (s->text_len + (size_t)n + 1) * 2;
        char *g = realloc(s->text, cap);
        if (g == NULL) {
            return;
        }
        s->text = g;
        s->text_cap = cap;
    }
    memcpy(s->text + s->text_len, text, (size_t)n);
    s->text_len += (size_t)n;
    s->text[s->text_len] = '\0';
}

/* ---- main ----------------------------------------------------------------------------------- */

static const char *const k_standing[] = {
    "Which symbol moved most recently?",
    "Is AAPL trading above its first price in the stream?",
};

static const char *const k_questions[] = {
    "What was the last price of MSFT?",
    "Which symbol traded the largest size?",
    "Were there more buys or sells of NVDA?",
    "What is the most recent EURUSD quote?",
};

/* The check of one printed answer to question q (text) at data version v, tallied; on a
 * terminal also a line under the answer saying right or wrong and what is true. */
static void check(sess_t *s, const char *q, int64_t v, const char *answer, size_t len,
                  rill_market_tally_t *tl, bool quiet) {
    rill_market_question_t mq;
    if (rill_market_question_parse(q, strlen(q), &mq) != RILL_OK) {
        memset(&mq, 0, sizeof mq); /* not a question with a known answer: unscored */
    }
    rill_market_verdict_t vd = RILL_MARKET_UNSCORED;
    size_t at = 0, n1 = rill_market_answer_line(answer, len, &at); /* the stop rule */
    if (rill_market_truth_score(s->truth, &mq, v, answer + at, n1, &vd) != RILL_OK) {
        vd = RILL_MARKET_UNSCORED;
    }
    rill_market_tally_add(tl, mq.kind, vd);
    if (!quiet) {
        char want[512];
        int64_t n = rill_market_truth_expect(s->truth, &mq, v, want, sizeof want);
        printf("          %s (true at v%" PRId64 ": %s)\n",
               vd == RILL_MARKET_RIGHT   ? "right"
               : vd == RILL_MARKET_WRONG ? "wrong"
                                         : "unscored",
               v, n >= 0 ? want : "nothing to know yet");
    }
}

/* An answer as printed: its first line (the stop rule; at most 80 bytes), and " [+N bytes]"
 * when the model wrote more after it. */
static void first_line(const char *a, size_t n, char *out, size_t cap) {
    size_t at = 0, n1 = rill_market_answer_line(a, n, &at);
    size_t rest = 0;
    for (size_t i = at + n1; i < n; i++) { /* what follows, blanks aside */
        rest += a[i] != ' ' && a[i] != '\n' && a[i] != '\r' && a[i] != '\t';
    }
    int k = snprintf(out, cap, "%.*s", (int)(n1 < 80 ? n1 : 80), a + at);
    if (rest > 0 && k >= 0 && (size_t)k < cap) {
        snprintf(out + k, cap - (size_t)k, " [+%zu bytes]", n - at - n1);
    }
}

/* Quantile q of the TTFTs in ms (0 when none): the nearest-rank sample as core's histogram
 * reports it, within 1/32 above (exact for the max). */
static double ttft_pct(const rill_hist_t *h, double q) {
    return (double)rill_hist_quantile(h, q) / 1e6;
}

int main(int argc, char **argv) {
    opts_t o;
    int rc = parse(argc, argv, &o);
    if (rc != 0) {
        return rc == 1 ? 0 : rc;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    csv_src_t csv = { 0 };
    if (o.csv != NULL && load_csv(o.csv, &csv) != 0) {
        return 1;
    }
    rill_client_params_t cp = rill_client_default_params();
    cp.request_ep = o.connect;
    cp.event_ep = o.events;
    cp.timeout_ms = 60000;
    rill_client_t *c = NULL;
    rill_err_t ce = rill_client_new(&cp, &c);
    if (ce != RILL_OK) {
        fprintf(stderr, "market-demo: %s\n", rill_last_error(ce));
        return 1;
    }
    sess_t ss[MAX_SESSIONS];
    memset(ss, 0, sizeof ss);
    int64_t csv_pos[MAX_SESSIONS] = { 0 };
    for (int i = 0; i < o.sessions; i++) {
        sess_t *s = &ss[i];
        snprintf(s->name, sizeof s->name, "market-%d", i + 1);
        rill_hist_init(&s->ttft);
        rill_client_session_close(c, s->name); /* a leftover of an earlier run */
        rill_err_t e = rill_client_session_create(c, s->name, -1, -1,
                                                  rill_market_prompt_system(o.instruct), NULL);
        if (e != RILL_OK) {
            fprintf(stderr, "market-demo: session.create %s: %s %s\n", s->name, rill_err_name(e),
                    rill_last_error(RILL_OK));
            rill_client_destroy(&c);
            return 1;
        }
        if (o.csv == NULL) {
            rill_market_synth_params_t sp = rill_market_synth_default_params();
            sp.seed = o.seed + (uint64_t)i;
            sp.n_symbols = 5;
            sp.rate_hz = o.rate;
            rill_market_synth_new(&sp, &s->synth);
            rill_market_synth_next(s->synth, &s->next);
        } else {
            s->next = csv.ticks[0];
            csv_pos[i] = 1;
        }
        s->have_next = true;
        s->t0_ns = s->next.ts_ns;
        rill_market_gov_params_t gp = rill_market_gov_default_params();
        gp.target_lines_per_s = o.tick_rate;
        rill_market_truth_params_t tp = rill_market_truth_default_params();
        tp.hold_tail = true; /* rilld ingests tick text without a flush */
        if (rill_market_gov_new(&gp, &s->gov) != RILL_OK ||
            rill_market_truth_new(&tp, &s->truth) != RILL_OK) {
            fprintf(stderr, "market-demo: out of memory\n");
            return 1;
        }
        for (size_t q = 0; q < sizeof k_standing / sizeof *k_standing; q++) {
            char asked[512];
            if (rill_market_prompt_question(k_standing[q], strlen(k_standing[q]), o.instruct, asked,
                                            sizeof asked) < 0) {
                snprintf(asked, sizeof asked, "%s", k_standing[q]);
            }
            e = rill_client_standing_register(c, s->name, asked, 24, NULL);
            if (e != RILL_OK) {
                fprintf(stderr, "market-demo: standing.register: %s %s\n", rill_err_name(e),
                        rill_last_error(RILL_OK));
            }
        }
        char topic[64];
        snprintf(topic, sizeof topic, "%s/standing", s->name);
        rill_client_subscribe(c, topic);
    }
    if (!o.quiet) {
        printf("market-demo: %d session(s), %s, %.0f s; standing questions:\n", o.sessions,
               o.csv != NULL ? o.csv : "synthetic market", o.duration);
        for (size_t q = 0; q < sizeof k_standing / sizeof *k_standing; q++) {
            printf("  - %s\n", k_standing[q]);
        }
    }
    double t_start = now_s(), next_ask = t_start + o.ask_every;
    int ask_turn = 0;
    rill_market_tally_t tally; /* every printed answer's verdict, per question kind */
    memset(&tally, 0, sizeof tally);
    rill_tick_t batch[MAX_BATCH];
    while (!g_stop && now_s() - t_start < o.duration) {
        double elapsed = now_s() - t_start;
        /* ticks due by now (stream time runs --speed times wall time) */
        for (int i = 0; i < o.sessions; i++) {
            sess_t *s = &ss[i];
            int64_t due = s->t0_ns + (int64_t)(elapsed * o.speed * 1e9);
            int n = 0;
            s->batch_off = s->text_len;
            while (s->have_next && s->next.ts_ns <= due && n < MAX_BATCH) {
                batch[n++] = s->next;
                keep_text(s, &s->next);
                if (o.csv == NULL) {
                    rill_market_synth_next(s->synth, &s->next);
                } else if (csv_pos[i] < csv.n) {
                    s->next = csv.ticks[csv_pos[i]++];
                } else {
                    s->have_next = false;
                }
            }
            if (n > 0) {
                rill_client_ticks_result_t r;
                rill_err_t e = rill_client_ingest_ticks(c, s->name, batch, n, &r);
                if (e != RILL_OK) {
                    fprintf(stderr, "market-demo: ingest: %s %s\n", rill_err_name(e),
                            rill_last_error(RILL_OK));
                    g_stop = 1;
                    break;
                }
                s->ticks += r.accepted;
                s->rejected += r.rejected;
                s->lines += r.lines;
                s->version = r.version;
                e = rill_market_truth_feed(s->truth, s->text + s->batch_off,
                                           s->text_len - s->batch_off, r.version,
                                           batch[n - 1].ts_ns);
                if (e != RILL_OK) {
                    fprintf(stderr, "market-demo: the check lost track of %s: %s\n", s->name,
                            rill_last_error(e));
                }
            }
        }
        /* pushed standing answers */
        rill_client_event_t ev;
        while (rill_client_next_event(c, 0, &ev) == RILL_OK) {
            if (ev.kind != RILL_CLIENT_EVENT_STANDING) {
                continue;
            }
            sess_t *from = NULL;
            for (int i = 0; i < o.sessions; i++) {
                if (strcmp(ss[i].name, ev.session) == 0) {
                    ss[i].pushed++;
                    ss[i].age_sum_ms += ev.age_ms;
                    ss[i].age_max_ms = ev.age_ms > ss[i].age_max_ms ? ev.age_ms : ss[i].age_max_ms;
                    from = &ss[i];
                }
            }
            if (!o.quiet) {
                char shown[128];
                first_line(ev.answer, ev.answer_len, shown, sizeof shown);
                printf("[%6.1fs] %-9s push  v%-5" PRId64 " (now v%" PRId64 ", %5.0f ms to compute) "
                       "%s -> %s\n",
                       now_s() - t_start, ev.session, ev.version, ev.data_version, ev.compute_ms,
                       ev.question, shown);
            }
            if (from != NULL) {
                check(from, ev.question != NULL ? ev.question : "", ev.version, ev.answer,
                      ev.answer_len, &tally, o.quiet);
            }
        }
        /* an interactive question now and then */
        if (now_s() >= next_ask) {
            next_ask += o.ask_every;
            sess_t *s = &ss[ask_turn % o.sessions];
            const char *q = k_questions[ask_turn % (int)(sizeof k_questions / sizeof *k_questions)];
            ask_turn++;
            rill_client_answer_t a;
            char asked[512];
            if (rill_market_prompt_question(q, strlen(q), o.instruct, asked, sizeof asked) < 0) {
                snprintf(asked, sizeof asked, "%s", q);
            }
            rill_err_t e = rill_client_ask(c, s->name, asked, 24, NULL, NULL, &a);
            if (e == RILL_OK) {
                rill_hist_record(&s->ttft, a.ttft_ms > 0 ? (uint64_t)llround(a.ttft_ms * 1e6) : 0);
                if (!o.quiet) {
                    char shown[128];
                    first_line(a.answer, a.answer_len, shown, sizeof shown);
                    printf("[%6.1fs] %-9s ask   ttft %6.1f ms over %5" PRId64 " tokens: %s -> "
                           "%s\n",
                           now_s() - t_start, s->name, a.ttft_ms, a.context, q, shown);
                }
                check(s, q, a.version, a.answer, a.answer_len, &tally, o.quiet);
            } else if (e != RILL_OK) {
                fprintf(stderr, "market-demo: ask: %s %s\n", rill_err_name(e),
                        rill_last_error(RILL_OK));
            }
        }
        struct timespec nap = { 0, 20 * 1000 * 1000 };
        nanosleep(&nap, NULL);
    }
    /* what a stateless server pays: re-prefill session 1's text in a fresh session */
    double reprefill_ms = -1, session_ttft = -1; /* both: to the first answer token */
    int64_t context = 0;
    rill_client_session_stats_t st;
    if (!g_stop && rill_client_session_stats(c, ss[0].name, &st) == RILL_OK && st.n_seen > 0) {
        rill_client_answer_t a;
        const char *q = k_questions[0];
        if (rill_client_ask(c, ss[0].name, q, 8, NULL, NULL, &a) == RILL_OK) {
            session_ttft = a.ttft_ms;
            context = a.context;
        }
        rill_client_session_close(c, "market-reprefill");
        if (rill_client_session_create(c, "market-reprefill", 0, 0, NULL, NULL) == RILL_OK) {
            double t0 = now_s();
            size_t off = 0;
            bool ok = true;
            while (ok && off < ss[0].text_len) { /* in request-sized pieces */
                size_t n = ss[0].text_len - off < 65536 ? ss[0].text_len - off : 65536;
                ok = rill_client_ingest_text(c, "market-reprefill", ss[0].text + off, n,
                                             off + n == ss[0].text_len, NULL) == RILL_OK;
                off += n;
            }
            if (ok && rill_client_ask(c, "market-reprefill", q, 8, NULL, NULL, &a) == RILL_OK) {
                /* to the first token: everything but the answer's own decoding */
                reprefill_ms = (now_s() - t0) * 1000 - (a.total_ms - a.ttft_ms);
            }
            rill_client_session_close(c, "market-reprefill");
        }
    }
    rill_client_server_stats_t sv;
    memset(&sv, 0, sizeof sv);
    rill_client_server_stats(c, &sv);
    printf("\nsummary (%.0f s, %d session(s))\n", now_s() - t_start, o.sessions);
    printf("%-10s %7s %7s %8s %8s %7s %9s %9s %9s %9s\n", "session", "ticks", "lines", "version",
           "context", "pushes", "age avg", "age max", "ttft p50", "ttft max");
    for (int i = 0; i < o.sessions; i++) {
        sess_t *s = &ss[i];
        rill_client_session_stats_t x;
        memset(&x, 0, sizeof x);
        rill_client_session_stats(c, s->name, &x);
        double p50 = ttft_pct(&s->ttft, 0.5), mx = ttft_pct(&s->ttft, 1.0);
        printf("%-10s %7" PRId64 " %7" PRId64 " %8" PRId64 " %8" PRId64 " %7" PRId64
               " %7.0fms %7.0fms %7.1fms %7.1fms\n",
               s->name, s->ticks, s->lines, x.version, x.n_resident, s->pushed,
               s->pushed > 0 ? s->age_sum_ms / (double)s->pushed : 0, s->age_max_ms, p50, mx);
    }
    printf("engine: %" PRId64 " steps, busy %.0f ms, idle %.0f ms (utilization %.0f%%); tokens: "
           "ingest %" PRId64 ", question prefill %" PRId64 ", decode %" PRId64 ", standing %" PRId64
           "; standing refreshes %" PRId64 "\n",
           sv.steps, sv.busy_ms, sv.idle_ms,
           sv.busy_ms + sv.idle_ms > 0 ? 100 * sv.busy_ms / (sv.busy_ms + sv.idle_ms) : 0,
           sv.tokens_ingest, sv.tokens_prefill, sv.tokens_decode, sv.tokens_standing,
           sv.standing_refreshes);
    for (int i = 0; i < o.sessions; i++) { /* the check saw the lines rilld wrote */
        if (rill_market_truth_n_lines(ss[i].truth) != ss[i].lines) {
            printf("market-demo: the check holds %" PRId64 " lines of %s, rilld wrote %" PRId64
                   ": its accuracy is not to be trusted\n",
                   rill_market_truth_n_lines(ss[i].truth), ss[i].name, ss[i].lines);
        }
    }
    /* accuracy of the answers printed above, per question kind */
    printf("accuracy (each answer's first line against the ticks its data version held):\n");
    printf("%-18s %7s %7s %7s %9s\n", "question kind", "answers", "scored", "right", "accuracy");
    for (int k = 0; k < RILL_MARKET_Q_N_KINDS; k++) {
        if (tally.n[k] == 0) {
            continue;
        }
        char acc[16] = "-";
        if (tally.scored[k] > 0) {
            snprintf(acc, sizeof acc, "%.0f%%",
                     100.0 * (double)tally.right[k] / (double)tally.scored[k]);
        }
        printf("%-18s %7" PRId64 " %7" PRId64 " %7" PRId64 " %9s\n",
               rill_market_qkind_name((rill_market_qkind_t)k), tally.n[k], tally.scored[k],
               tally.right[k], acc);
    }
    {
        int64_t sc = rill_market_tally_scored(&tally), ri = rill_market_tally_right(&tally);
        char acc[16] = "-";
        if (sc > 0) {
            snprintf(acc, sizeof acc, "%.0f%%", 100.0 * (double)ri / (double)sc);
        }
        printf("%-18s %7" PRId64 " %7" PRId64 " %7" PRId64 " %9s\n", "overall",
               rill_market_tally_n(&tally), sc, ri, acc);
    }
    if (reprefill_ms > 0 && session_ttft > 0) {
        printf("a question on %s (%" PRId64 " tokens of context): %.1f ms to the first token; "
               "re-prefilling the same data for it (what a stateless server does): %.0f ms "
               "to the first token (%.0fx)\n",
               ss[0].name, context, session_ttft, reprefill_ms, reprefill_ms / session_ttft);
    }
    for (int i = 0; i < o.sessions; i++) {
        rill_market_synth_destroy(&ss[i].synth);
        rill_market_gov_destroy(&ss[i].gov);
        rill_market_truth_destroy(&ss[i].truth);
        free(ss[i].text);
    }
    free(csv.ticks);
    rill_client_destroy(&c);
    return 0;
}
