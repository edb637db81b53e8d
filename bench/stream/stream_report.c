/*
 * stream_report.c - what the stream benchmark prints (see rill_bench_stream.h, "Output"): a
 * line per question and mode and a summary per mode in --json's file, the Markdown table of TTFT
 * percentiles per context bucket and the summary lines on stdout, and the machine-readable line
 * (STYLE.md rule 27). Runs on the main thread after both modes, when nothing else writes b.
 *
 * Percentiles are core's histogram's (rill_hist.h; see record() below), not sorts of the
 * samples, as STYLE.md rule 19 asks of latencies: one histogram refilled per figure, no array
 * of samples, and the precision stated once in core. The figures in docs/benchmarks.md recorded
 * before 2026-12-02 were exact order statistics of sorted samples.
 *
 * Accuracy (issue 23): every answer is decoded to text (its ids, special tokens rendered as
 * nothing) and scored by the session's market truth at the chunks it saw (the whole chunks
 * within its resident tokens; stream_internal.h says why not its version);
 * a question outside the truth's table, or one with nothing to know yet, is unscored (null).
 * accuracy = right / scored, per mode, per question kind, and for the standing answers.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_hist.h"
#include "rill_text_ingest.h"
#include "stream_internal.h"

/* Percentiles come from core's histogram (rill_hist.h), recorded in integer units fine enough
 * that its 1/32 bucket width is the only rounding: nanoseconds for times, tokens for backlogs,
 * millionths for ratios. Each is the nearest-rank sample (the smallest rank >= q * n) reported
 * as the upper edge of its bucket: within 1/32 above the sample, exact for the minimum and the
 * maximum and below 32 units. One histogram is refilled for each figure. */
static void record(rill_hist_t *h, int64_t v) {
    rill_hist_record(h, v > 0 ? (uint64_t)v : 0); /* a negative difference counts as 0 */
}

/* Quantile q of h in units of `unit` (1e6: ns to ms); NAN when h is empty. */
static double pct(const rill_hist_t *h, double q, double unit) {
    return h->count > 0 ? (double)rill_hist_quantile(h, q) / unit : NAN;
}

static bool ok(const result_t *r) {
    return r->done && r->status == RILL_OK && r->first_ns > 0;
}

static int64_t ttft_ns(const result_t *r) {
    return r->first_ns - r->arrival_ns;
}

static void json_num(FILE *f, const char *key, double v) {
    if (isfinite(v)) {
        fprintf(f, ",\"%s\":%.3f", key, v);
    } else {
        fprintf(f, ",\"%s\":null", key);
    }
}

/* The decoding of answers into text: ids to bytes (raw), then to valid UTF-8 (a byte token
 * cut off by --answer becomes U+FFFD: JSON lines are UTF-8). Made once per report. */
typedef struct decoder {
    char *raw;
    size_t raw_cap;
    rill_text_clean_t *clean;
} decoder_t;

static decoder_t g_dec; /* the report runs on the main thread only */

/* Decodes ids[0, n) into buf[0, cap) (cap >= text_cap(b)), NUL-terminated; returns the length. */
static size_t answer_text(const bench_t *b, const int32_t *ids, int32_t n, char *buf, size_t cap) {
    int64_t k = rill_tokenizer_decode(b->l.tok, ids, n, 0, g_dec.raw, g_dec.raw_cap, NULL);
    buf[0] = '\0';
    if (k <= 0) {
        return 0;
    }
    rill_text_clean_reset(g_dec.clean);
    int64_t m = rill_text_clean_feed(g_dec.clean, g_dec.raw, (size_t)k, buf, cap);
    if (m < 0) {
        buf[0] = '\0';
        return 0;
    }
    int64_t f = rill_text_clean_flush(g_dec.clean, buf + m, cap - (size_t)m);
    return (size_t)m + (size_t)(f > 0 ? f : 0);
}

/* Bytes that always hold a decoded answer of --answer ids. */
static size_t text_cap(const bench_t *b) {
    return RILL_TEXT_CLEAN_BOUND(
               (size_t)rill__stream_max_answer(&b->o) * rill_tokenizer_max_piece(b->l.tok) + 16) +
           16;
}

/* The chunks of session s an answer computed on n_context resident tokens saw: the whole ones
 * after the prompt (see stream_internal.h). */
static int64_t chunks_within(const bench_t *b, int32_t s, int64_t n_context) {
    const sstream_t *ss = &b->ss[s];
    int64_t data = n_context - b->n_prompt, lo = 0, hi = ss->n_chunks;
    while (lo < hi) { /* the most chunks whose tokens end at or before data */
        int64_t mid = (lo + hi + 1) / 2;
        const chunk_t *c = &ss->chunks[mid - 1];
        if (c->tok_off + c->n_tok <= data) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}

/* The verdict of answer ids[0, n) to question kind k of session s, which saw `seen` chunks. */
static rill_market_verdict_t verdict(const bench_t *b, int32_t s, const rill_market_question_t *q,
                                     int64_t seen, const int32_t *ids, int32_t n, char *buf,
                                     size_t cap) {
    size_t len = answer_text(b, ids, n, buf, cap);
    rill_market_verdict_t v = RILL_MARKET_UNSCORED;
    if (rill_market_truth_score(b->ss[s].truth, q, seen, buf, len, &v) != RILL_OK) {
        v = RILL_MARKET_UNSCORED;
    }
    return v;
}

static const char *verdict_json(rill_market_verdict_t v) {
    return v == RILL_MARKET_RIGHT ? "true" : v == RILL_MARKET_WRONG ? "false" : "null";
}

static void write_question(FILE *f, const bench_t *b, const question_t *q, const char *mode,
                           const result_t *r, char *buf, size_t cap) {
    fprintf(f,
            "{\"bench\":\"stream\",\"mode\":\"%s\",\"session\":%d,\"q\":%d,\"kind\":%d,"
            "\"t_s\":%.3f,\"context\":%d,\"bucket\":%d,\"n_question\":%d,\"status\":\"%s\"",
            mode, q->session, q->index, q->kind, (double)q->t_ns / 1e9, q->context,
            b->buckets[q->bucket], b->n_qtok[q->kind], rill_err_name(r->status));
    bool good = ok(r);
    json_num(f, "ttft_ms", good ? (double)ttft_ns(r) / 1e6 : NAN);
    json_num(f, "total_ms", good ? (double)(r->done_ns - r->arrival_ns) / 1e6 : NAN);
    json_num(f, "engine_ttft_ms", good ? (double)r->engine_ttft_ns / 1e6 : NAN);
    json_num(f, "ttft_compute_ms", good ? (double)r->ttft_compute_ns / 1e6 : NAN);
    fprintf(f, ",\"backlog\":%lld,\"engine_context\":%d", (long long)r->backlog, r->engine_context);
    if (r == &q->rill) {
        fprintf(f, ",\"consistency\":\"%s\",\"data_version\":%lld",
                rill_sched_consistency_name(q->consistency), (long long)r->version);
        json_num(f, "standing_age_ms",
                 r->standing_age_ns >= 0 ? (double)r->standing_age_ns / 1e6 : NAN);
    }
    int32_t n = r->n_answer < (int32_t)b->o.answer ? r->n_answer : (int32_t)b->o.answer;
    fprintf(f, ",\"n_answer\":%d,\"answer\":", r->n_answer);
    rill__stream_json_ids(f, r->answer, n);
    /* the check: what the answer says, what is true at the chunks it saw, the verdict */
    const rill_market_question_t *mq = &b->qq[q->kind];
    fprintf(f, ",\"truth_kind\":\"%s\",\"chunks_seen\":%lld,\"answer_text\":",
            rill_market_qkind_name(mq->kind), (long long)r->seen);
    size_t len = answer_text(b, r->answer, n, buf, cap);
    rill__stream_json_str(f, buf, len);
    int64_t e = rill_market_truth_expect(b->ss[q->session].truth, mq, r->seen, buf, cap);
    fprintf(f, ",\"expected\":");
    if (e >= 0) {
        rill__stream_json_str(f, buf, (size_t)e);
    } else {
        fprintf(f, "null");
    }
    fprintf(f, ",\"correct\":%s}\n", verdict_json(r->verdict));
}

typedef struct summary {
    int64_t n, failed;
    double p50, p90, p99;
    double bp50[MAX_BUCKETS], bp90[MAX_BUCKETS], bp99[MAX_BUCKETS];
    int64_t bn[MAX_BUCKETS];
    double ratio[MAX_BUCKETS]; /* stateless: median over its questions of stateless / rill */
} summary_t;

/* Whether question q counts in a rill-mode figure restricted to consistency c (-1: all). */
static bool of_consistency(const question_t *q, int c) {
    return c < 0 || (int)q->consistency == c;
}

/* The TTFT summary of one mode; rill mode: of the questions of consistency c only (-1: all;
 * the stateless mode takes -1). */
static void summarize(const bench_t *b, bool stateless, int c, rill_hist_t *h, summary_t *sm) {
    memset(sm, 0, sizeof *sm);
    rill_hist_init(h);
    for (int64_t i = 0; i < b->n_qs; i++) {
        const question_t *q = &b->qs[i];
        const result_t *r = stateless ? &q->stateless : &q->rill;
        if ((stateless && !q->sampled) || !of_consistency(q, c)) {
            continue;
        }
        if (ok(r)) {
            record(h, ttft_ns(r));
        } else {
            sm->failed++;
        }
    }
    sm->n = (int64_t)h->count;
    sm->p50 = pct(h, 0.50, 1e6);
    sm->p90 = pct(h, 0.90, 1e6);
    sm->p99 = pct(h, 0.99, 1e6);
    for (int k = 0; k < b->n_buckets; k++) {
        rill_hist_init(h);
        for (int64_t i = 0; i < b->n_qs; i++) {
            const question_t *q = &b->qs[i];
            const result_t *r = stateless ? &q->stateless : &q->rill;
            if (q->bucket == k && (!stateless || q->sampled) && of_consistency(q, c) && ok(r)) {
                record(h, ttft_ns(r));
            }
        }
        sm->bn[k] = (int64_t)h->count;
        sm->bp50[k] = pct(h, 0.50, 1e6);
        sm->bp90[k] = pct(h, 0.90, 1e6);
        sm->bp99[k] = pct(h, 0.99, 1e6);
        rill_hist_init(h); /* stateless / rill per question, in millionths */
        for (int64_t i = 0; i < b->n_qs && stateless; i++) {
            const question_t *q = &b->qs[i];
            if (q->bucket == k && q->sampled && ok(&q->stateless) && ok(&q->rill)) {
                double ratio = (double)ttft_ns(&q->stateless) / (double)ttft_ns(&q->rill);
                record(h, llround(ratio * 1e6));
            }
        }
        sm->ratio[k] = pct(h, 0.50, 1e6);
    }
}

/* Rill mode's questions of one consistency (issue 18 item 3): their TTFT, their accuracy, and
 * how far behind the acknowledged data their answers were (chunks acknowledged before the
 * question that the answer did not see; an acknowledged question's is 0 unless it failed). */
typedef struct by_cons {
    summary_t sm;
    rill_market_tally_t tl;
    double behind50, behind99; /* chunks, over the answered questions */
    int64_t behind_any;        /* answered questions that missed at least one chunk */
} by_cons_t;

static void summarize_consistency(const bench_t *b, int c, rill_hist_t *h, by_cons_t *bc) {
    summarize(b, false, c, h, &bc->sm);
    memset(&bc->tl, 0, sizeof bc->tl);
    bc->behind_any = 0;
    rill_hist_init(h);
    for (int64_t i = 0; i < b->n_qs; i++) {
        const question_t *q = &b->qs[i];
        if (!of_consistency(q, c)) {
            continue;
        }
        rill_market_tally_add(&bc->tl, b->qq[q->kind].kind, q->rill.verdict);
        if (ok(&q->rill)) {
            int64_t behind = q->after > q->rill.seen ? q->after - q->rill.seen : 0;
            record(h, behind);
            bc->behind_any += behind > 0;
        }
    }
    bc->behind50 = pct(h, 0.5, 1);
    bc->behind99 = pct(h, 0.99, 1);
}

static void json_buckets(FILE *f, const bench_t *b, const summary_t *sm, bool ratio) {
    fprintf(f, ",\"buckets\":[");
    for (int k = 0; k < b->n_buckets; k++) {
        fprintf(f, "%s{\"le\":%d,\"n\":%lld", k ? "," : "", b->buckets[k], (long long)sm->bn[k]);
        json_num(f, "ttft_p50_ms", sm->bp50[k]);
        json_num(f, "ttft_p90_ms", sm->bp90[k]);
        json_num(f, "ttft_p99_ms", sm->bp99[k]);
        if (ratio) {
            json_num(f, "over_rill", sm->ratio[k]);
        }
        fputc('}', f);
    }
    fputc(']', f);
}

/* "scored", "correct", "accuracy" (null when none was scored) and "accuracy_by_kind" of tl. */
static void json_accuracy(FILE *f, const char *prefix, const rill_market_tally_t *tl,
                          bool by_kind) {
    int64_t sc = rill_market_tally_scored(tl), ri = rill_market_tally_right(tl);
    fprintf(f, ",\"%sscored\":%lld,\"%scorrect\":%lld", prefix, (long long)sc, prefix,
            (long long)ri);
    char key[64];
    snprintf(key, sizeof key, "%saccuracy", prefix);
    json_num(f, key, sc > 0 ? (double)ri / (double)sc : NAN);
    if (!by_kind) {
        return;
    }
    fprintf(f, ",\"accuracy_by_kind\":{");
    for (int k = 0, first = 1; k < RILL_MARKET_Q_N_KINDS; k++) {
        if (tl->n[k] == 0) {
            continue;
        }
        fprintf(f, "%s\"%s\":{\"n\":%lld,\"scored\":%lld,\"correct\":%lld", first ? "" : ",",
                rill_market_qkind_name((rill_market_qkind_t)k), (long long)tl->n[k],
                (long long)tl->scored[k], (long long)tl->right[k]);
        json_num(f, "accuracy",
                 tl->scored[k] > 0 ? (double)tl->right[k] / (double)tl->scored[k] : NAN);
        fputc('}', f);
        first = 0;
    }
    fputc('}', f);
}

static void json_accuracy(FILE *f, const char *prefix, const rill_market_tally_t *tl, bool by_kind);

/* "consistency" of the rill mode and, with --consistency both, "by_consistency": per
 * consistency its questions, TTFT percentiles, accuracy and chunks behind. */
static void json_consistency(FILE *f, const bench_t *b, const by_cons_t bc[2]) {
    fprintf(f, ",\"consistency\":\"%s\"",
            b->o.consistency_both ? "both" : rill_sched_consistency_name(b->o.consistency));
    if (!b->o.consistency_both) {
        return;
    }
    fprintf(f, ",\"by_consistency\":{");
    for (int c = 0; c < 2; c++) {
        const by_cons_t *x = &bc[c];
        fprintf(f, "%s\"%s\":{\"questions\":%lld,\"failed\":%lld", c ? "," : "",
                rill_sched_consistency_name((rill_sched_consistency_t)c), (long long)x->sm.n,
                (long long)x->sm.failed);
        json_num(f, "ttft_p50_ms", x->sm.p50);
        json_num(f, "ttft_p90_ms", x->sm.p90);
        json_num(f, "ttft_p99_ms", x->sm.p99);
        json_num(f, "behind_p50", x->behind50);
        json_num(f, "behind_p99", x->behind99);
        fprintf(f, ",\"behind_any\":%lld", (long long)x->behind_any);
        json_accuracy(f, "", &x->tl, false);
        fputc('}', f);
    }
    fputc('}', f);
}

static void write_summary(FILE *f, const bench_t *b, const char *mode, const summary_t *sm,
                          const double *extra, int n_extra, const char *const *extra_keys,
                          const rill_market_tally_t *tl, const rill_market_tally_t *standing,
                          const by_cons_t *bc) {
    char kv[16]; /* "f16", or "q8_0/f16" when V's type differs */
    if (b->l.k_type == b->l.v_type) {
        snprintf(kv, sizeof kv, "%s", rill_dtype_name(b->l.k_type));
    } else {
        snprintf(kv, sizeof kv, "%s/%s", rill_dtype_name(b->l.k_type),
                 rill_dtype_name(b->l.v_type));
    }
    fprintf(f,
            "{\"bench\":\"stream\",\"mode\":\"%s\",\"summary\":true,\"model\":\"%s\","
            "\"sessions\":%lld,\"rate\":%g,\"every\":%lld,\"answer\":%lld,\"context\":%lld,"
            "\"threads\":%d,\"backend\":\"%s\",\"attn\":\"%s\",\"seed\":%lld,\"kv\":\"%s\","
            "\"cache_type_k\":\"%s\",\"cache_type_v\":\"%s\","
            "\"standing\":%s,\"max_delay_ms\":%g,\"standing_interval_ms\":%g,"
            "\"standing_max_share\":%g,\"questions\":%lld,\"failed\":%lld,"
            "\"prompt\":\"%s\",\"instruct\":\"%s\",\"stop\":%s,\"standing_answer\":%lld",
            mode, rill__stream_model_name(b), (long long)b->o.sessions, b->o.rate,
            (long long)b->o.every, (long long)b->o.answer, (long long)b->o.context,
            rill_backend_n_threads(b->l.be), rill_backend_name(b->l.be),
            rill_attn_name(rill_backend_attn(b->l.be)), (long long)b->o.seed, kv,
            rill_dtype_name(b->l.k_type), rill_dtype_name(b->l.v_type),
            b->o.no_standing ? "false" : "true",
            strcmp(mode, "stateless") == 0 ? 0.0 : b->o.max_delay_ms, b->o.standing_interval_ms,
            b->o.standing_share, (long long)sm->n, (long long)sm->failed,
            b->chat != NULL ? "chat" : "plain", rill_market_instruct_name(b->o.instruct),
            b->o.no_stop ? "false" : "true", (long long)b->o.standing_answer);
    json_num(f, "ttft_p50_ms", sm->p50);
    json_num(f, "ttft_p90_ms", sm->p90);
    json_num(f, "ttft_p99_ms", sm->p99);
    json_num(f, "p99_over_p50", sm->p99 / sm->p50);
    for (int i = 0; i < n_extra; i++) {
        json_num(f, extra_keys[i], extra[i]);
    }
    json_buckets(f, b, sm, strcmp(mode, "stateless") == 0);
    json_accuracy(f, "", tl, true);
    if (bc != NULL) {
        json_consistency(f, b, bc);
    }
    if (standing != NULL) {
        fprintf(f, ",\"standing_kind\":\"%s\",\"standing_answers_checked\":%lld",
                rill_market_qkind_name(b->sq.kind), (long long)rill_market_tally_n(standing));
        json_accuracy(f, "standing_", standing, false);
    }
    fprintf(f, "}\n");
}

static void fmt_ms(char *buf, size_t cap, double v) {
    if (isfinite(v)) {
        snprintf(buf, cap, "%.1f", v);
    } else {
        snprintf(buf, cap, "-");
    }
}

/* right / scored as a percentage, "-" when none was scored. */
static void fmt_pct(char *buf, size_t cap, int64_t right, int64_t scored) {
    if (scored > 0) {
        snprintf(buf, cap, "%.1f%%", 100.0 * (double)right / (double)scored);
    } else {
        snprintf(buf, cap, "-");
    }
}

int rill__stream_report(bench_t *b) {
    rill_hist_t *h = rill_malloc(RILL_MEM_OTHER, sizeof *h);
    if (h == NULL) {
        fprintf(stderr, "rill bench stream: out of memory\n");
        return 1;
    }
    summary_t rs, ss;
    summarize(b, false, -1, h, &rs);
    summarize(b, true, -1, h, &ss);
    /* the check of every answer (see the top) */
    size_t cap = text_cap(b);
    char *buf = rill_malloc(RILL_MEM_OTHER, cap);
    g_dec.raw_cap =
        (size_t)rill__stream_max_answer(&b->o) * rill_tokenizer_max_piece(b->l.tok) + 16;
    g_dec.raw = rill_malloc(RILL_MEM_OTHER, g_dec.raw_cap);
    if (buf == NULL || g_dec.raw == NULL || rill_text_clean_new(NULL, &g_dec.clean) != RILL_OK) {
        rill_free(g_dec.raw);
        rill_free(buf);
        fprintf(stderr, "rill bench stream: out of memory\n");
        rill_free(h);
        return 1;
    }
    rill_market_tally_t tr, ts, tst;
    memset(&tr, 0, sizeof tr);
    memset(&ts, 0, sizeof ts);
    memset(&tst, 0, sizeof tst);
    for (int64_t i = 0; i < b->n_qs; i++) {
        question_t *q = &b->qs[i];
        const rill_market_question_t *mq = &b->qq[q->kind];
        for (int m = 0; m < 2; m++) {
            result_t *r = m == 0 ? &q->rill : &q->stateless;
            if (m == 1 && !q->sampled) {
                continue;
            }
            r->seen = m == 0 ? chunks_within(b, q->session, r->engine_context) : q->after;
            r->verdict = RILL_MARKET_UNSCORED;
            if (ok(r)) {
                int32_t n = r->n_answer < (int32_t)b->o.answer ? r->n_answer : (int32_t)b->o.answer;
                r->verdict = verdict(b, q->session, mq, r->seen, r->answer, n, buf, cap);
            }
            rill_market_tally_add(m == 0 ? &tr : &ts, mq->kind, r->verdict);
        }
    }
    for (int32_t s = 0; s < (int32_t)b->o.sessions && !b->o.no_standing; s++) {
        for (int64_t k = 0; k < b->st[s].n_kept; k++) {
            const sanswer_t *a = &b->st[s].kept[k];
            rill_market_tally_add(&tst, b->sq.kind,
                                  verdict(b, s, &b->sq, chunks_within(b, s, a->n_context),
                                          a->tokens, a->n_tokens, buf, cap));
        }
    }
    by_cons_t bc[2]; /* per consistency, for --consistency both */
    for (int c = 0; c < 2; c++) {
        summarize_consistency(b, c, h, &bc[c]);
    }
    /* standing answer age at the questions, ingest acknowledgement, feed lateness */
    int64_t mismatch = 0;
    rill_hist_init(h);
    for (int64_t i = 0; i < b->n_qs; i++) {
        const result_t *r = &b->qs[i].rill;
        if (r->standing_age_ns >= 0) {
            record(h, r->standing_age_ns);
        }
        mismatch += ok(r) && r->engine_context != b->qs[i].context;
    }
    double age50 = pct(h, 0.5, 1e6), age99 = pct(h, 0.99, 1e6);
    rill_hist_init(h);
    double late_max = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions; s++) {
        for (int64_t c = 0; c < b->ss[s].n_chunks; c++) {
            record(h, b->ss[s].chunks[c].ack_ns);
            double late = (double)b->ss[s].chunks[c].late_ns / 1e6;
            late_max = late > late_max ? late : late_max;
        }
    }
    double ack50 = pct(h, 0.5, 1e6), ack99 = pct(h, 0.99, 1e6);
    rill_hist_init(h); /* TTFT from the submission (after the preceding chunk was acknowledged) */
    for (int64_t i = 0; i < b->n_qs; i++) {
        const result_t *r = &b->qs[i].rill;
        if (ok(r)) {
            record(h, r->engine_ttft_ns);
        }
    }
    double eng50 = pct(h, 0.5, 1e6), eng99 = pct(h, 0.99, 1e6);
    /* what a question's TTFT (from the ask call) was made of: the steps of its own work (its
     * question and the backlog of its session it waited for), the rest behind other work */
    double own[2], other[2], backlog[2];
    for (int k = 0; k < 3; k++) {
        rill_hist_init(h);
        for (int64_t i = 0; i < b->n_qs; i++) {
            const result_t *r = &b->qs[i].rill;
            if (ok(r)) {
                record(h, k == 0   ? r->ttft_compute_ns
                          : k == 1 ? r->engine_ttft_ns - r->ttft_compute_ns
                                   : r->backlog);
            }
        }
        double *o = k == 0 ? own : k == 1 ? other : backlog;
        double unit = k < 2 ? 1e6 : 1; /* ns to ms; tokens */
        o[0] = pct(h, 0.5, unit);
        o[1] = pct(h, 0.99, unit);
    }
    double steal = NAN; /* % of the host's CPU time taken by the hypervisor during the stream */
    if (b->c0.ok && b->c1.ok && b->c1.total > b->c0.total) {
        steal = 100.0 * (double)(b->c1.steal - b->c0.steal) / (double)(b->c1.total - b->c0.total);
    }
    double busy = (double)(b->s1.busy_ns - b->s0.busy_ns);
    double idle = (double)(b->s1.idle_ns - b->s0.idle_ns);
    double util = busy + idle > 0 ? busy / (busy + idle) : NAN;
    /* the standing budget: the refreshes' engine time over the stream's wall time and over
     * the engine's busy time, and the refreshes each limit held back */
    double st_ns = (double)(b->s1.standing_ns - b->s0.standing_ns);
    double st_share = b->stream_ns > 0 ? st_ns / (double)b->stream_ns : NAN;
    double st_busy = busy > 0 ? st_ns / busy : NAN;
    int64_t held_iv = b->s1.standing_deferred_interval - b->s0.standing_deferred_interval;
    int64_t held_sh = b->s1.standing_deferred_share - b->s0.standing_deferred_share;
    int64_t refreshes = 0, abandoned = 0;
    for (int32_t s = 0; s < (int32_t)b->o.sessions && !b->o.no_standing; s++) {
        refreshes += b->sinfo[s].refreshes;
        abandoned += b->sinfo[s].abandoned;
    }
    int64_t tok[RILL_SCHED_N_CLASSES], tok_all = 0;
    for (int c = 0; c < RILL_SCHED_N_CLASSES; c++) {
        tok[c] = b->s1.tokens[c] - b->s0.tokens[c];
        tok_all += tok[c];
    }
    int64_t steps = b->s1.steps - b->s0.steps, preempted = b->s1.preempted - b->s0.preempted;
    int64_t filler = b->s1.question_step_filler - b->s0.question_step_filler;
    double step_ms = steps > 0 ? busy / 1e6 / (double)steps : NAN;
    double step_tok = steps > 0 ? (double)tok_all / (double)steps : NAN;

    printf("rill bench stream: %s, %lld sessions, %g ticks/s each, a question every %lld "
           "ticks (%lld in all), answers of %lld tokens, context up to %lld, %d threads, KV F16\n",
           rill__stream_model_name(b), (long long)b->o.sessions, b->o.rate, (long long)b->o.every,
           (long long)b->n_qs, (long long)b->o.answer, (long long)b->o.context,
           rill_backend_n_threads(b->l.be));
    printf("prompts: %s, instruction: %s, answers end %s; standing answers up to %lld tokens\n",
           b->chat != NULL ? "the model's chat template" : "the fixed Question/Answer form",
           rill_market_instruct_name(b->o.instruct),
           b->o.no_stop ? "at --answer tokens" : "with their first line",
           (long long)b->o.standing_answer);
    printf("\n| context <= | questions | rill TTFT p50 ms | p90 | p99 | stateless (a) n | "
           "(a) TTFT p50 ms | (a) / rill |\n|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < b->n_buckets; k++) {
        char a[32], c[32], d[32], e[32], g[32];
        fmt_ms(a, sizeof a, rs.bp50[k]);
        fmt_ms(c, sizeof c, rs.bp90[k]);
        fmt_ms(d, sizeof d, rs.bp99[k]);
        fmt_ms(e, sizeof e, ss.bp50[k]);
        fmt_ms(g, sizeof g, ss.ratio[k]);
        printf("| %d | %lld | %s | %s | %s | %lld | %s | %s%s |\n", b->buckets[k],
               (long long)rs.bn[k], a, c, d, (long long)ss.bn[k], e, g,
               isfinite(ss.ratio[k]) ? "x" : "");
    }
    printf("\nrill: TTFT p50 %.1f ms, p90 %.1f, p99 %.1f (p99/p50 %.2f) over %lld questions "
           "(%lld failed); engine utilization %.1f%% over the %.1f s stream; tokens ingest %lld, "
           "prefill %lld, decode %lld, standing %lld; drain after the stream %.0f ms\n",
           rs.p50, rs.p90, rs.p99, rs.p99 / rs.p50, (long long)rs.n, (long long)rs.failed,
           100 * util, (double)b->stream_ns / 1e9, (long long)tok[RILL_SCHED_INGEST],
           (long long)tok[RILL_SCHED_PREFILL], (long long)tok[RILL_SCHED_DECODE],
           (long long)tok[RILL_SCHED_STANDING], (double)b->drain_ns / 1e6);
    printf("engine steps %lld: %.1f ms and %.1f tokens each on average; step cap at the end %d "
           "tokens (%.2f ms a token estimated); %lld steps of lower work preempted by a question; "
           "%lld ingest tokens in steps with question work\n",
           (long long)steps, step_ms, step_tok, b->s1.chunk_cap, b->s1.ns_per_token / 1e6,
           (long long)preempted, (long long)filler);
    printf("ingest acknowledgement (on_ack) p50 %.2f ms, p99 %.2f ms after the call; feeder at "
           "most %.1f ms late; TTFT from the ask call p50 %.1f ms, p99 %.1f ms\n",
           ack50, ack99, late_max, eng50, eng99);
    printf("TTFT from the ask call made of: its own steps (its question and the %.0f tokens "
           "(p50; p99 %.0f) of its session's backlog it waited for) p50 %.1f ms, p99 %.1f ms; "
           "behind other work p50 %.1f ms, p99 %.1f ms\n",
           backlog[0], backlog[1], own[0], own[1], other[0], other[1]);
    if (isfinite(steal)) {
        printf("host: %.1f%% of its CPU time was stolen by the hypervisor during the stream (a "
               "noisy machine: compare runs side by side)\n",
               steal);
    }
    if (!b->o.no_standing) {
        printf("standing queries: answer age at the questions p50 %.0f ms, p99 %.0f ms; %lld "
               "refreshes, %lld abandoned; refreshes took %.1f%% of the stream's wall time "
               "(%.1f%% of the engine's busy time); budget: interval %g ms held back %lld, share "
               "cap %g held back %lld\n",
               age50, age99, (long long)refreshes, (long long)abandoned, 100 * st_share,
               100 * st_busy, b->o.standing_interval_ms, (long long)held_iv, b->o.standing_share,
               (long long)held_sh);
    }
    if (mismatch > 0) {
        printf("%lld questions were answered on more context than was acknowledged when they "
               "were asked (the engine was behind the feed)\n",
               (long long)mismatch);
    }
    /* accuracy per question kind, beside its latency */
    printf("\n| question kind | questions | scored | right | rill accuracy | rill TTFT p50 ms | "
           "(a) scored | (a) accuracy |\n|---|---|---|---|---|---|---|---|\n");
    for (int k = 0; k < RILL_MARKET_Q_N_KINDS; k++) {
        if (tr.n[k] == 0) {
            continue;
        }
        rill_hist_init(h);
        for (int64_t i = 0; i < b->n_qs; i++) {
            if (b->qq[b->qs[i].kind].kind == (rill_market_qkind_t)k && ok(&b->qs[i].rill)) {
                record(h, ttft_ns(&b->qs[i].rill));
            }
        }
        char a50[32], acc[32], sacc[32];
        fmt_ms(a50, sizeof a50, pct(h, 0.5, 1e6));
        fmt_pct(acc, sizeof acc, tr.right[k], tr.scored[k]);
        fmt_pct(sacc, sizeof sacc, ts.right[k], ts.scored[k]);
        printf("| %s | %lld | %lld | %lld | %s | %s | %lld | %s |\n",
               rill_market_qkind_name((rill_market_qkind_t)k), (long long)tr.n[k],
               (long long)tr.scored[k], (long long)tr.right[k], acc, a50, (long long)ts.scored[k],
               sacc);
    }
    {
        char acc[32], sacc[32], stacc[32];
        fmt_pct(acc, sizeof acc, rill_market_tally_right(&tr), rill_market_tally_scored(&tr));
        fmt_pct(sacc, sizeof sacc, rill_market_tally_right(&ts), rill_market_tally_scored(&ts));
        fmt_pct(stacc, sizeof stacc, rill_market_tally_right(&tst), rill_market_tally_scored(&tst));
        printf("\naccuracy (first line of each answer against the ticks it was computed on): "
               "rill %s of %lld scored (%lld unscored), stateless (a) %s of %lld",
               acc, (long long)rill_market_tally_scored(&tr),
               (long long)(rill_market_tally_n(&tr) - rill_market_tally_scored(&tr)), sacc,
               (long long)rill_market_tally_scored(&ts));
        if (!b->o.no_standing) {
            printf(", standing (%s) %s of %lld answers scored", rill_market_qkind_name(b->sq.kind),
                   stacc, (long long)rill_market_tally_scored(&tst));
        }
        printf("\n");
    }
    for (int c = 0; c < 2 && b->o.consistency_both; c++) {
        const by_cons_t *x = &bc[c];
        char acc[32];
        fmt_pct(acc, sizeof acc, rill_market_tally_right(&x->tl), rill_market_tally_scored(&x->tl));
        printf("consistency %s: %lld questions (%lld failed), TTFT p50 %.1f ms, p99 %.1f ms; "
               "answers %.0f chunks behind the acknowledged data (p50; p99 %.0f; %lld answers "
               "behind at all); accuracy %s of %lld scored\n",
               rill_sched_consistency_name((rill_sched_consistency_t)c), (long long)x->sm.n,
               (long long)x->sm.failed, x->sm.p50, x->sm.p99, x->behind50, x->behind99,
               (long long)x->behind_any, acc, (long long)rill_market_tally_scored(&x->tl));
    }

    int rc = 0;
    if (b->o.json_path != NULL) {
        FILE *f = fopen(b->o.json_path, "w");
        if (f == NULL) {
            fprintf(stderr, "rill bench stream: cannot write %s: %s\n", b->o.json_path,
                    strerror(errno));
            rill_free(buf);
            rill_free(g_dec.raw);
            rill_text_clean_destroy(&g_dec.clean);
            rill_free(h);
            return 1;
        }
        for (int64_t i = 0; i < b->n_qs; i++) {
            write_question(f, b, &b->qs[i], "rill", &b->qs[i].rill, buf, cap);
        }
        for (int64_t i = 0; i < b->n_qs; i++) {
            if (b->qs[i].sampled) {
                write_question(f, b, &b->qs[i], "stateless", &b->qs[i].stateless, buf, cap);
            }
        }
        static const char *const rk[] = { "utilization",
                                          "stream_s",
                                          "drain_ms",
                                          "standing_age_p50_ms",
                                          "standing_age_p99_ms",
                                          "standing_refreshes",
                                          "standing_abandoned",
                                          "standing_share",
                                          "standing_busy_share",
                                          "standing_deferred_interval",
                                          "standing_deferred_share",
                                          "ingest_ack_p50_ms",
                                          "ingest_ack_p99_ms",
                                          "feed_late_max_ms",
                                          "tokens_ingest",
                                          "tokens_prefill",
                                          "tokens_decode",
                                          "tokens_standing",
                                          "context_mismatch",
                                          "steps",
                                          "steps_preempted",
                                          "question_step_filler",
                                          "step_ms",
                                          "step_tokens",
                                          "chunk_cap_end",
                                          "engine_ttft_p50_ms",
                                          "engine_ttft_p99_ms",
                                          "ttft_own_p50_ms",
                                          "ttft_own_p99_ms",
                                          "ttft_other_p50_ms",
                                          "ttft_other_p99_ms",
                                          "backlog_p50",
                                          "backlog_p99",
                                          "host_steal_pct" };
        double rv[] = { util,
                        (double)b->stream_ns / 1e9,
                        (double)b->drain_ns / 1e6,
                        b->o.no_standing ? NAN : age50,
                        b->o.no_standing ? NAN : age99,
                        (double)refreshes,
                        (double)abandoned,
                        b->o.no_standing ? NAN : st_share,
                        b->o.no_standing ? NAN : st_busy,
                        (double)held_iv,
                        (double)held_sh,
                        ack50,
                        ack99,
                        late_max,
                        (double)tok[RILL_SCHED_INGEST],
                        (double)tok[RILL_SCHED_PREFILL],
                        (double)tok[RILL_SCHED_DECODE],
                        (double)tok[RILL_SCHED_STANDING],
                        (double)mismatch,
                        (double)steps,
                        (double)preempted,
                        (double)filler,
                        step_ms,
                        step_tok,
                        (double)b->s1.chunk_cap,
                        eng50,
                        eng99,
                        own[0],
                        own[1],
                        other[0],
                        other[1],
                        backlog[0],
                        backlog[1],
                        steal };
        write_summary(f, b, "rill", &rs, rv, (int)(sizeof rv / sizeof rv[0]), rk, &tr,
                      b->o.no_standing ? NULL : &tst, bc);
        if (ss.n + ss.failed > 0) {
            write_summary(f, b, "stateless", &ss, NULL, 0, NULL, &ts, NULL, NULL);
        }
        if (fclose(f) != 0) {
            fprintf(stderr, "rill bench stream: cannot write %s\n", b->o.json_path);
            rc = 1;
        }
    }
    /* STYLE.md rule 27: the machine-readable line on stdout too */
    printf("{\"bench\":\"stream\",\"sessions\":%lld,\"context\":%lld,\"questions\":%lld,"
           "\"failed\":%lld,\"rill_ttft_p50_ms\":%.3f,\"rill_ttft_p99_ms\":%.3f,"
           "\"utilization\":%.4f,\"accuracy\":%.4f}\n",
           (long long)b->o.sessions, (long long)b->o.context, (long long)rs.n,
           (long long)(rs.failed + ss.failed), isfinite(rs.p50) ? rs.p50 : -1,
           isfinite(rs.p99) ? rs.p99 : -1, isfinite(util) ? util : -1,
           rill_market_tally_scored(&tr) > 0
               ? (double)rill_market_tally_right(&tr) / (double)rill_market_tally_scored(&tr)
               : -1);
    rill_free(buf);
    rill_free(g_dec.raw);
    rill_text_clean_destroy(&g_dec.clean);
    rill_free(h);
    return rc != 0 ? rc : (rs.failed + ss.failed > 0 ? 1 : 0);
}
