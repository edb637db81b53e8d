/*
 * market_gov.c - the rate governor (rill_market.h, "the rate governor").
 *
 * Why the ticks' own timestamps and not a clock: the same recorded feed must give the same text
 * (tests, replays, the durability log), and a feed replayed faster than real time must be
 * governed as it was live. Why a budget per interval and not a token bucket: a bucket needs a
 * notion of "now" between ticks and gives output that depends on how ticks are batched; a
 * fixed grid of intervals gives bars with clean boundaries ("AAPL bar" for 14:30:01) that a
 * model and a reader both understand.
 *
 * Invariants: bars are open only in the current interval (n_active > 0 implies have_interval);
 * active[0..n_active) lists the symbols with bar_n > 0, in order of their first aggregated tick.
 * The output buffer holds max_symbols bar lines plus one tick line, which is the most one call
 * can write, so a call never runs out of room.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "market_internal.h"
#include "rill_alloc.h"

#define MIN_INTERVAL_NS INT64_C(1000000)
#define MAX_INTERVAL_NS INT64_C(3600000000000)

struct rill_market_gov {
    rill_market_gov_params_t params;
    rill_market_fmt_t *fmt;
    int64_t budget; /* B: tick lines per interval */
    bool have_interval;
    int64_t cur_k;     /* index of the current interval: [cur_k * I, (cur_k + 1) * I) */
    int64_t cur_ticks; /* ticks taken into the current interval */
    int64_t cur_lines; /* tick lines written in it */
    bool agg;          /* the current interval aggregates */
    int32_t *active;   /* (max_symbols) */
    int32_t n_active;
    char *out; /* (max_symbols + 1) * RILL_MARKET_LINE_MAX */
    size_t out_len;
    rill_market_gov_stats_t stats;
    char msg[320];
};

rill_market_gov_params_t rill_market_gov_default_params(void) {
    rill_market_gov_params_t p = {
        .target_lines_per_s = 20.0,
        .interval_ns = INT64_C(1000000000),
        .fmt = rill_market_fmt_default_params(),
    };
    return p;
}

rill_err_t rill_market_gov_new(const rill_market_gov_params_t *params, rill_market_gov_t **out) {
    rill_market_gov_params_t p = params != NULL ? *params : rill_market_gov_default_params();
    if (out == NULL || !(p.target_lines_per_s > 0.0 && p.target_lines_per_s < 1e15) ||
        p.interval_ns < MIN_INTERVAL_NS || p.interval_ns > MAX_INTERVAL_NS) {
        return RILL_EINVAL;
    }
    rill_market_gov_t *g = rill_calloc(RILL_MEM_INGEST, 1, sizeof *g);
    if (g == NULL) {
        return RILL_ENOMEM;
    }
    rill_err_t err = rill_market_fmt_new(&p.fmt, &g->fmt);
    if (err != RILL_OK) {
        rill_free(g);
        return err;
    }
    size_t n_sym = (size_t)p.fmt.max_symbols;
    g->active = rill_malloc(RILL_MEM_INGEST, n_sym * sizeof *g->active);
    g->out = rill_malloc(RILL_MEM_INGEST, (n_sym + 1) * RILL_MARKET_LINE_MAX);
    if (g->active == NULL || g->out == NULL) {
        rill_market_gov_destroy(&g);
        return RILL_ENOMEM;
    }
    /* B = floor(rate * I / 1e9): in seconds, exact enough for any budget a session can take. */
    double b = floor(p.target_lines_per_s * ((double)p.interval_ns / 1e9));
    g->budget = b < 1.0 ? 1 : b > 1e15 ? INT64_C(1000000000000000) : (int64_t)b;
    g->params = p;
    g->out[0] = '\0';
    *out = g;
    return RILL_OK;
}

void rill_market_gov_destroy(rill_market_gov_t **gp) {
    if (gp == NULL || *gp == NULL) {
        return;
    }
    rill_market_fmt_destroy(&(*gp)->fmt);
    rill_free((*gp)->active);
    rill_free((*gp)->out);
    rill_free(*gp);
    *gp = NULL;
}

rill_market_fmt_t *rill_market_gov_fmt(rill_market_gov_t *g) {
    return g != NULL ? g->fmt : NULL;
}

rill_market_gov_stats_t rill_market_gov_stats(const rill_market_gov_t *g) {
    rill_market_gov_stats_t z = { 0 };
    return g != NULL ? g->stats : z;
}

/* Writes the bars of the current interval to the output and closes them. */
static void write_bars(rill_market_gov_t *g) {
    if (g->n_active == 0) {
        return;
    }
    for (int32_t i = 0; i < g->n_active; i++) {
        rill__sym_t *e = &g->fmt->syms[g->active[i]];
        g->out_len += rill__fmt_bar_line(e, g->out + g->out_len);
        e->bar_n = 0;
    }
    g->stats.bars_out += g->n_active;
    g->stats.lines_out += g->n_active;
    g->stats.intervals_aggregated++;
    g->n_active = 0;
}

/* Makes interval k current (k > cur_k), closing the current one. */
static void enter(rill_market_gov_t *g, int64_t k) {
    bool follow_overload = false;
    if (g->have_interval) {
        write_bars(g);
        follow_overload = g->cur_ticks > g->budget && k == g->cur_k + 1;
    }
    g->have_interval = true;
    g->cur_k = k;
    g->cur_ticks = 0;
    g->cur_lines = 0;
    g->agg = follow_overload;
}

static void begin(rill_market_gov_t *g, const char **text) {
    g->msg[0] = '\0';
    g->out_len = 0;
    g->out[0] = '\0';
    if (text != NULL) {
        *text = g->out;
    }
}

static int64_t market_gov_push_impl(rill_market_gov_t *g, const rill_tick_t *t, const char **text) {
    if (g == NULL) {
        return RILL_EINVAL;
    }
    begin(g, text);
    if (t == NULL || text == NULL) {
        snprintf(g->msg, sizeof g->msg, "NULL tick or text");
        return RILL_EINVAL;
    }
    g->stats.ticks_in++;
    rill_err_t err = rill_tick_check(t);
    if (err != RILL_OK) {
        snprintf(g->msg, sizeof g->msg, "%s", rill_last_error(err));
    }
    if (err != RILL_OK) {
        g->stats.rejected++;
        return err;
    }
    rill_market_fmt_t *f = g->fmt;
    size_t len = strlen(t->symbol);
    int32_t e = rill__fmt_find(f, t->symbol, len);
    if (e < 0) {
        if (f->n == f->params.max_symbols) {
            snprintf(g->msg, sizeof g->msg, "symbol table full (%d symbols): cannot add '%s'",
                     (int)f->params.max_symbols, t->symbol);
            g->stats.rejected++;
            return RILL_EFULL;
        }
        e = rill__fmt_add(f, t->symbol, len);
    }

    int64_t k = t->ts_ns / g->params.interval_ns;
    if (!g->have_interval || k > g->cur_k) {
        enter(g, k);
    } else if (k < g->cur_k) {
        g->stats.late++;
    }
    g->cur_ticks++;
    rill__sym_t *sym = &f->syms[e];
    if (!g->agg && g->cur_lines < g->budget) {
        g->out_len += rill__fmt_apply(f, sym, t, g->out + g->out_len);
        g->cur_lines++;
        g->stats.tick_lines++;
        g->stats.lines_out++;
    } else {
        g->agg = true;
        if (sym->bar_n == 0) {
            sym->bar_ref = sym->pub.n_ticks > 0 ? sym->pub.last : t->price;
            sym->bar_open = sym->bar_high = sym->bar_low = t->price;
            sym->bar_vol = 0;
            g->active[g->n_active++] = e;
        }
        sym->bar_n++;
        sym->bar_close = t->price;
        sym->bar_high = t->price > sym->bar_high ? t->price : sym->bar_high;
        sym->bar_low = t->price < sym->bar_low ? t->price : sym->bar_low;
        sym->bar_vol = sym->bar_vol > INT64_MAX - t->size ? INT64_MAX : sym->bar_vol + t->size;
        rill__fmt_apply(f, sym, t, NULL);
        g->stats.aggregated++;
    }
    return (int64_t)g->out_len;
}

int64_t rill_market_gov_push(rill_market_gov_t *g, const rill_tick_t *t, const char **text) {
    int64_t n = market_gov_push_impl(g, t, text);
    if (n < 0) {
        rill__error_str((rill_err_t)n, g != NULL ? g->msg : "");
    }
    return n;
}

static int64_t market_gov_advance_impl(rill_market_gov_t *g, int64_t ts_ns, const char **text) {
    if (g == NULL) {
        return RILL_EINVAL;
    }
    begin(g, text);
    if (text == NULL || ts_ns < 0) {
        snprintf(g->msg, sizeof g->msg, "NULL text or negative time");
        return RILL_EINVAL;
    }
    int64_t k = ts_ns / g->params.interval_ns;
    if (g->have_interval && k > g->cur_k) {
        enter(g, k);
    }
    return (int64_t)g->out_len;
}

int64_t rill_market_gov_advance(rill_market_gov_t *g, int64_t ts_ns, const char **text) {
    int64_t n = market_gov_advance_impl(g, ts_ns, text);
    if (n < 0) {
        rill__error_str((rill_err_t)n, g != NULL ? g->msg : "");
    }
    return n;
}

static int64_t market_gov_flush_impl(rill_market_gov_t *g, const char **text) {
    if (g == NULL) {
        return RILL_EINVAL;
    }
    begin(g, text);
    if (text == NULL) {
        snprintf(g->msg, sizeof g->msg, "NULL text");
        return RILL_EINVAL;
    }
    write_bars(g);
    return (int64_t)g->out_len;
}

int64_t rill_market_gov_flush(rill_market_gov_t *g, const char **text) {
    int64_t n = market_gov_flush_impl(g, text);
    if (n < 0) {
        rill__error_str((rill_err_t)n, g != NULL ? g->msg : "");
    }
    return n;
}
