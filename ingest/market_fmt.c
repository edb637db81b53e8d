/*
 * market_fmt.c - the symbol table and the one-line rendering of ticks and bars (rill_market.h,
 * "formatting and the symbol table").
 *
 * The table is allocated whole at creation: an array of entries (in order of first sight, so
 * enumeration is stable) and an open-addressing hash of their names with at least twice as many
 * slots as entries, so a lookup is a few probes and a tick allocates nothing. Entries are never
 * removed, which is what lets the hash do without tombstones.
 *
 * Numbers are written from integers: a price is rounded once to the symbol's decimals d
 * (half away from zero) into v = round(price * 10^d), which fits 63 bits because price <= 1e10
 * and d <= 8, and printed as v / 10^d "." v % 10^d. Changes are differences of those integers,
 * so they are exact, never "-0.00", and the same in every C locale (printf's %lld has no
 * locale-dependent form without the ' flag).
 */
#include <stdio.h>
#include <string.h>

#include "market_internal.h"
#include "rill_alloc.h"
#include "rill_log.h"

#define MAX_SYMBOLS 65536

static const int64_t k_p10i[RILL_MARKET_DECIMALS_MAX + 1] = { 1,       10,       100,
                                                              1000,    10000,    100000,
                                                              1000000, 10000000, 100000000 };
static const double k_p10d[RILL_MARKET_DECIMALS_MAX + 1] = { 1e0, 1e1, 1e2, 1e3, 1e4,
                                                             1e5, 1e6, 1e7, 1e8 };

rill_market_fmt_params_t rill_market_fmt_default_params(void) {
    rill_market_fmt_params_t p = { .max_symbols = 256, .decimals = -1 };
    return p;
}

rill_err_t rill_market_fmt_new(const rill_market_fmt_params_t *params, rill_market_fmt_t **out) {
    rill_market_fmt_params_t p = params != NULL ? *params : rill_market_fmt_default_params();
    if (out == NULL || p.max_symbols < 1 || p.max_symbols > MAX_SYMBOLS || p.decimals < -1 ||
        p.decimals > RILL_MARKET_DECIMALS_MAX) {
        return RILL_EINVAL;
    }
    uint32_t slots = 4;
    while (slots < 2u * (uint32_t)p.max_symbols) {
        slots <<= 1;
    }
    rill_market_fmt_t *f = rill_calloc(RILL_MEM_INGEST, 1, sizeof *f);
    rill__sym_t *syms = rill_calloc(RILL_MEM_INGEST, (size_t)p.max_symbols, sizeof *syms);
    int32_t *sl = rill_malloc(RILL_MEM_INGEST, slots * sizeof *sl);
    if (f == NULL || syms == NULL || sl == NULL) {
        rill_free(f);
        rill_free(syms);
        rill_free(sl);
        return RILL_ENOMEM;
    }
    memset(sl, 0xff, slots * sizeof *sl); /* -1 everywhere */
    f->params = p;
    f->syms = syms;
    f->slots = sl;
    f->mask = slots - 1;
    *out = f;
    return RILL_OK;
}

void rill_market_fmt_destroy(rill_market_fmt_t **fp) {
    if (fp == NULL || *fp == NULL) {
        return;
    }
    rill_free((*fp)->syms);
    rill_free((*fp)->slots);
    rill_free(*fp);
    *fp = NULL;
}

static uint32_t hash(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 16777619u;
    }
    return h;
}

int32_t rill__fmt_find(const rill_market_fmt_t *f, const char *s, size_t len) {
    for (uint32_t i = hash(s, len) & f->mask;; i = (i + 1) & f->mask) {
        int32_t e = f->slots[i];
        if (e < 0) {
            return -1;
        }
        const char *name = f->syms[e].pub.symbol;
        if (strlen(name) == len && memcmp(name, s, len) == 0) {
            return e;
        }
    }
}

int32_t rill__fmt_add(rill_market_fmt_t *f, const char *s, size_t len) {
    RILL_ASSERT(f->n < f->params.max_symbols);
    int32_t e = f->n++;
    rill__sym_t *sym = &f->syms[e];
    memset(sym, 0, sizeof *sym);
    memcpy(sym->pub.symbol, s, len);
    sym->pub.symbol[len] = '\0';
    sym->pub.decimals = f->params.decimals;
    uint32_t i = hash(s, len) & f->mask;
    while (f->slots[i] >= 0) {
        i = (i + 1) & f->mask;
    }
    f->slots[i] = e;
    return e;
}

/* round(price * 10^d), half away from zero; price > 0 and <= 1e10, so the result fits. */
static int64_t scaled(double price, int32_t d) {
    double x = price * k_p10d[d];
    int64_t v = (int64_t)x;
    if (x - (double)v >= 0.5) { /* exact: x < 2^63 and x - trunc(x) is exact below 2^53 */
        v++;
    }
    return v;
}

/* The fewest decimals in 2..8 that write price to a relative 1e-9 (8 when none does). */
static int32_t auto_decimals(double price) {
    for (int32_t d = 2; d < RILL_MARKET_DECIMALS_MAX; d++) {
        double x = price * k_p10d[d];
        double r = (double)scaled(price, d);
        double diff = x > r ? x - r : r - x;
        if (diff <= (x > 1.0 ? x : 1.0) * 1e-9) {
            return d;
        }
    }
    return RILL_MARKET_DECIMALS_MAX;
}

/* Writes v / 10^d with d decimals; returns the length. sign: also write '+' / '-'. */
static int put_fixed(char *buf, size_t cap, int64_t v, int32_t d, bool sign) {
    char sg[2] = { 0, 0 };
    if (sign) {
        sg[0] = v < 0 ? '-' : '+';
    }
    uint64_t a = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    uint64_t p = (uint64_t)k_p10i[d];
    if (d == 0) {
        return snprintf(buf, cap, "%s%llu", sg, (unsigned long long)a);
    }
    return snprintf(buf, cap, "%s%llu.%0*llu", sg, (unsigned long long)(a / p), (int)d,
                    (unsigned long long)(a % p));
}

static char side_char(rill_side_t s) {
    return s == RILL_SIDE_BUY ? 'B' : s == RILL_SIDE_SELL ? 'S' : '?';
}

size_t rill__fmt_apply(rill_market_fmt_t *f, rill__sym_t *e, const rill_tick_t *t, char *buf) {
    (void)f;
    rill_market_symbol_t *p = &e->pub;
    double prev = p->n_ticks > 0 ? p->last : t->price;
    if (p->decimals < 0) {
        p->decimals = auto_decimals(t->price);
    }
    if (p->n_ticks == 0) {
        p->open = p->high = p->low = t->price;
    }
    p->last = t->price;
    p->high = t->price > p->high ? t->price : p->high;
    p->low = t->price < p->low ? t->price : p->low;
    p->volume = p->volume > INT64_MAX - t->size ? INT64_MAX : p->volume + t->size;
    p->n_ticks++;
    if (buf == NULL) {
        return 0;
    }
    int32_t d = p->decimals;
    int64_t v = scaled(t->price, d);
    char price[40], change[40];
    put_fixed(price, sizeof price, v, d, false);
    put_fixed(change, sizeof change, v - scaled(prev, d), d, true);
    int n = snprintf(buf, RILL_MARKET_LINE_MAX, "%s %s %s %lld %c\n", p->symbol, price, change,
                     (long long)t->size, side_char(t->side));
    return (size_t)n;
}

size_t rill__fmt_bar_line(const rill__sym_t *e, char *buf) {
    int32_t d = e->pub.decimals;
    char o[40], h[40], l[40], c[40], ch[40];
    put_fixed(o, sizeof o, scaled(e->bar_open, d), d, false);
    put_fixed(h, sizeof h, scaled(e->bar_high, d), d, false);
    put_fixed(l, sizeof l, scaled(e->bar_low, d), d, false);
    put_fixed(c, sizeof c, scaled(e->bar_close, d), d, false);
    put_fixed(ch, sizeof ch, scaled(e->bar_close, d) - scaled(e->bar_ref, d), d, true);
    int n = snprintf(buf, RILL_MARKET_LINE_MAX, "%s bar %s %s %s %s %s vol %lld n %lld\n",
                     e->pub.symbol, o, h, l, c, ch, (long long)e->bar_vol, (long long)e->bar_n);
    return (size_t)n;
}

static rill_err_t market_fmt_set_decimals_impl(rill_market_fmt_t *f, const char *symbol,
                                               int32_t decimals) {
    if (f == NULL) {
        return RILL_EINVAL;
    }
    f->msg[0] = '\0';
    if (symbol == NULL) {
        snprintf(f->msg, sizeof f->msg, "symbol is NULL");
        return RILL_EINVAL;
    }
    size_t len = strnlen(symbol, RILL_MARKET_SYMBOL_MAX + 1);
    rill_err_t err = rill_tick_check_symbol(symbol, len);
    if (err != RILL_OK) {
        snprintf(f->msg, sizeof f->msg, "%s", rill_last_error(err));
    }
    if (err != RILL_OK) {
        return err;
    }
    if (decimals < 0 || decimals > RILL_MARKET_DECIMALS_MAX) {
        snprintf(f->msg, sizeof f->msg, "decimals must be 0..%d (got %d)", RILL_MARKET_DECIMALS_MAX,
                 (int)decimals);
        return RILL_ERANGE;
    }
    int32_t e = rill__fmt_find(f, symbol, len);
    if (e < 0) {
        if (f->n == f->params.max_symbols) {
            snprintf(f->msg, sizeof f->msg, "symbol table full (%d symbols): cannot add '%s'",
                     (int)f->params.max_symbols, symbol);
            return RILL_EFULL;
        }
        e = rill__fmt_add(f, symbol, len);
    }
    f->syms[e].pub.decimals = decimals;
    return RILL_OK;
}

rill_err_t rill_market_fmt_set_decimals(rill_market_fmt_t *f, const char *symbol,
                                        int32_t decimals) {
    rill_err_t e = market_fmt_set_decimals_impl(f, symbol, decimals);
    return rill__error_str(e, f != NULL ? f->msg : "");
}

static int64_t market_fmt_tick_impl(rill_market_fmt_t *f, const rill_tick_t *t, char *buf,
                                    size_t cap) {
    if (f == NULL) {
        return RILL_EINVAL;
    }
    f->msg[0] = '\0';
    if (t == NULL || buf == NULL) {
        snprintf(f->msg, sizeof f->msg, "NULL tick or buffer");
        return RILL_EINVAL;
    }
    rill_err_t err = rill_tick_check(t);
    if (err != RILL_OK) {
        snprintf(f->msg, sizeof f->msg, "%s", rill_last_error(err));
    }
    if (err != RILL_OK) {
        return err;
    }
    size_t len = strlen(t->symbol);
    int32_t e = rill__fmt_find(f, t->symbol, len);
    if (e < 0 && f->n == f->params.max_symbols) {
        snprintf(f->msg, sizeof f->msg, "symbol table full (%d symbols): cannot add '%s'",
                 (int)f->params.max_symbols, t->symbol);
        return RILL_EFULL;
    }
    /* Render on a copy of the entry, so that a buffer too small changes nothing. */
    rill__sym_t tmp;
    if (e >= 0) {
        tmp = f->syms[e];
    } else {
        memset(&tmp, 0, sizeof tmp);
        memcpy(tmp.pub.symbol, t->symbol, len + 1);
        tmp.pub.decimals = f->params.decimals;
    }
    char line[RILL_MARKET_LINE_MAX];
    size_t n = rill__fmt_apply(f, &tmp, t, line);
    if (n + 1 > cap) {
        snprintf(f->msg, sizeof f->msg, "buffer of %zu bytes is too small for %zu", cap, n + 1);
        return RILL_EFULL;
    }
    if (e < 0) {
        e = rill__fmt_add(f, t->symbol, len);
    }
    f->syms[e] = tmp;
    memcpy(buf, line, n + 1);
    return (int64_t)n;
}

int64_t rill_market_fmt_tick(rill_market_fmt_t *f, const rill_tick_t *t, char *buf, size_t cap) {
    int64_t n = market_fmt_tick_impl(f, t, buf, cap);
    if (n < 0) {
        rill__error_str((rill_err_t)n, f != NULL ? f->msg : "");
    }
    return n;
}

rill_err_t rill_market_fmt_symbol(const rill_market_fmt_t *f, const char *symbol,
                                  rill_market_symbol_t *out) {
    if (f == NULL || symbol == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    int32_t e = rill__fmt_find(f, symbol, strnlen(symbol, RILL_MARKET_SYMBOL_MAX + 1));
    if (e < 0) {
        return RILL_ENOTFOUND;
    }
    *out = f->syms[e].pub;
    return RILL_OK;
}

int64_t rill_market_fmt_n_symbols(const rill_market_fmt_t *f) {
    return f != NULL ? f->n : RILL_EINVAL;
}

rill_err_t rill_market_fmt_symbol_at(const rill_market_fmt_t *f, int64_t i,
                                     rill_market_symbol_t *out) {
    if (f == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    if (i < 0 || i >= f->n) {
        return RILL_ERANGE;
    }
    *out = f->syms[i].pub;
    return RILL_OK;
}
