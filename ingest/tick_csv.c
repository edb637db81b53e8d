/*
 * tick_csv.c - CSV lines to validated rill_tick_t (rill_market.h, "CSV ticks").
 *
 * One line per call, so the caller chooses how to read (getline on a file, a pipe, a test
 * string) and the reader holds no buffer. The header names the columns, so files with the
 * columns in another order or with extra columns (an exchange, a sequence number) read as they
 * are. Numbers are parsed here rather than with strtod/strtoll: strtod follows LC_NUMERIC (a
 * program that called setlocale could read "187,32" and refuse "187.32"), accepts hex, "inf"
 * and "nan", and rounds in ways that are hard to state. A price is an integer mantissa of at most
 * 18 digits divided by an exact power of ten: one IEEE division, so the same text gives the same
 * double everywhere, and the double that strtod would give for such text.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "market_internal.h"
#include "rill_alloc.h"

#define MAX_COLS 32
#define MSG_CAP  320

enum { C_SYMBOL, C_TS, C_PRICE, C_SIZE, C_SIDE, C_COUNT };
static const char *const k_cols[C_COUNT] = { "symbol", "ts", "price", "size", "side" };

struct rill_tick_csv {
    bool have_header;
    int n_cols;       /* cells per line, from the header */
    int col[C_COUNT]; /* column of each field, -1: absent (side only) */
    int64_t line_no;  /* lines fed so far */
    rill_tick_csv_stats_t stats;
    char msg[MSG_CAP];
};

rill_err_t rill_tick_csv_new(rill_tick_csv_t **out) {
    if (out == NULL) {
        return RILL_EINVAL;
    }
    rill_tick_csv_t *c = rill_calloc(RILL_MEM_INGEST, 1, sizeof *c);
    if (c == NULL) {
        return RILL_ENOMEM;
    }
    *out = c;
    return RILL_OK;
}

void rill_tick_csv_destroy(rill_tick_csv_t **cp) {
    if (cp != NULL) {
        rill_free(*cp);
        *cp = NULL;
    }
}

rill_tick_csv_stats_t rill_tick_csv_stats(const rill_tick_csv_t *c) {
    rill_tick_csv_stats_t z = { 0 };
    return c != NULL ? c->stats : z;
}

static rill_err_t fail(rill_tick_csv_t *c, rill_err_t err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static rill_err_t fail(rill_tick_csv_t *c, rill_err_t err, const char *fmt, ...) {
    int o = snprintf(c->msg, sizeof c->msg, "line %" PRId64 ": ", c->line_no);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->msg + o, sizeof c->msg - (size_t)o, fmt, ap);
    va_end(ap);
    c->stats.rejected++;
    return err;
}

typedef struct cell {
    const char *p;
    size_t n;
} cell_t;

static bool blank(char ch) {
    return ch == ' ' || ch == '\t';
}

static cell_t trim(const char *p, size_t n) {
    while (n > 0 && blank(p[0])) {
        p++;
        n--;
    }
    while (n > 0 && blank(p[n - 1])) {
        n--;
    }
    cell_t c = { p, n };
    return c;
}

/* Splits s[0..n) at commas into cells[0..*n_cells) (trimmed). False when there are more than
 * MAX_COLS cells. */
static bool split(const char *s, size_t n, cell_t *cells, int *n_cells) {
    int k = 0;
    size_t start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i == n || s[i] == ',') {
            if (k == MAX_COLS) {
                return false;
            }
            cells[k++] = trim(s + start, i - start);
            start = i + 1;
        }
    }
    *n_cells = k;
    return true;
}

static bool is_digit(char ch) {
    return ch >= '0' && ch <= '9';
}

/* [-]digits as int64. RILL_EFORMAT for bad syntax, RILL_ERANGE when it does not fit. */
static rill_err_t parse_int(cell_t s, int64_t *out) {
    size_t i = 0;
    bool neg = false;
    if (i < s.n && s.p[i] == '-') {
        neg = true;
        i++;
    }
    if (i == s.n) {
        return RILL_EFORMAT;
    }
    uint64_t v = 0;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < s.n; i++) {
        if (!is_digit(s.p[i])) {
            return RILL_EFORMAT;
        }
        uint64_t dgt = (uint64_t)(s.p[i] - '0');
        if (v > (limit - dgt) / 10) {
            return RILL_ERANGE;
        }
        v = v * 10 + dgt;
    }
    *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
    return RILL_OK;
}

/* 10^0 .. 10^22: every one is exactly representable as a double. */
static const double k_pow10[23] = { 1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                    1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                    1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22 };

/* [-]digits[.digits] or [-].digits: RILL_EFORMAT for bad syntax, RILL_ERANGE for more than 18
 * significant digits or more than 22 decimals. */
static rill_err_t parse_price(cell_t s, double *out, const char **why) {
    size_t i = 0;
    bool neg = false;
    if (i < s.n && s.p[i] == '-') {
        neg = true;
        i++;
    }
    size_t int_start = i;
    while (i < s.n && is_digit(s.p[i])) {
        i++;
    }
    size_t int_end = i, frac_start = i, frac_end = i;
    if (i < s.n && s.p[i] == '.') {
        frac_start = ++i;
        while (i < s.n && is_digit(s.p[i])) {
            i++;
        }
        frac_end = i;
    }
    if (i != s.n || (int_end == int_start && frac_end == frac_start)) {
        *why = "must be [-]digits[.digits] (no exponent)";
        return RILL_EFORMAT;
    }
    while (frac_end > frac_start && s.p[frac_end - 1] == '0') {
        frac_end--; /* trailing zeros of the fraction add nothing */
    }
    size_t frac = frac_end - frac_start;
    if (frac > 22) {
        *why = "more than 22 decimals";
        return RILL_ERANGE;
    }
    uint64_t mant = 0;
    int sig = 0;
    for (size_t k = int_start; k < frac_end; k++) {
        if (k == int_end) {
            k = frac_start; /* skip the '.' */
            if (k == frac_end) {
                break;
            }
        }
        if (mant == 0 && s.p[k] == '0') {
            continue; /* leading zeros are not significant */
        }
        if (++sig > 18) {
            *why = "more than 18 significant digits";
            return RILL_ERANGE;
        }
        mant = mant * 10 + (uint64_t)(s.p[k] - '0');
    }
    double v = (double)mant / k_pow10[frac]; /* mant < 2^60: at most one rounding each */
    *out = neg ? -v : v;
    return RILL_OK;
}

static rill_err_t read_header(rill_tick_csv_t *c, const cell_t *cells, int n) {
    int col[C_COUNT];
    for (int f = 0; f < C_COUNT; f++) {
        col[f] = -1;
    }
    for (int k = 0; k < n; k++) {
        for (int f = 0; f < C_COUNT; f++) {
            if (cells[k].n == strlen(k_cols[f]) && memcmp(cells[k].p, k_cols[f], cells[k].n) == 0) {
                if (col[f] >= 0) {
                    return fail(c, RILL_EFORMAT, "header: column '%s' given twice", k_cols[f]);
                }
                col[f] = k;
            }
        }
    }
    for (int f = C_SYMBOL; f <= C_SIZE; f++) {
        if (col[f] < 0) {
            return fail(c, RILL_EFORMAT,
                        "header: column '%s' missing (expected a header such as "
                        "symbol,ts,price,size,side)",
                        k_cols[f]);
        }
    }
    memcpy(c->col, col, sizeof col);
    c->n_cols = n;
    c->have_header = true;
    return RILL_EAGAIN;
}

static rill_err_t tick_csv_line_impl(rill_tick_csv_t *c, const char *line, size_t len,
                                     rill_tick_t *out) {
    if (c == NULL) {
        return RILL_EINVAL;
    }
    c->msg[0] = '\0';
    if ((line == NULL && len > 0) || out == NULL) {
        snprintf(c->msg, sizeof c->msg, "NULL line or out");
        return RILL_EINVAL;
    }
    c->line_no++;
    c->stats.lines++;
    if (len > 0 && line[len - 1] == '\n') {
        len--;
    }
    if (len > 0 && line[len - 1] == '\r') {
        len--;
    }
    if (len > 0 && (memchr(line, '\n', len) != NULL || memchr(line, '\0', len) != NULL)) {
        return fail(c, RILL_EFORMAT, "a line may not hold a newline or NUL byte");
    }
    cell_t whole = trim(line, len);
    if (whole.n == 0 || whole.p[0] == '#') {
        return RILL_EAGAIN;
    }
    if (memchr(line, '"', len) != NULL) {
        return fail(c, RILL_EFORMAT, "quoted cells are not supported");
    }
    cell_t cells[MAX_COLS];
    int n = 0;
    if (!split(line, len, cells, &n)) {
        return fail(c, RILL_EFORMAT, "more than %d cells", MAX_COLS);
    }
    if (!c->have_header) {
        return read_header(c, cells, n);
    }
    if (n != c->n_cols) {
        return fail(c, RILL_EFORMAT, "%d cells, the header has %d", n, c->n_cols);
    }

    rill_tick_t t;
    memset(&t, 0, sizeof t);
    const char *syn = NULL;
    rill_err_t err;
    cell_t s = cells[c->col[C_SYMBOL]];
    err = rill_tick_check_symbol(s.p, s.n);
    if (err != RILL_OK) {
        return fail(c, err, "%s", rill_last_error(err));
    }
    memcpy(t.symbol, s.p, s.n);
    t.symbol[s.n] = '\0';

    err = parse_int(cells[c->col[C_TS]], &t.ts_ns);
    if (err != RILL_OK) {
        return fail(c, err, "field 'ts': %s",
                    err == RILL_EFORMAT ? "must be a decimal integer" : "does not fit 64 bits");
    }
    err = rill_tick_check_ts(t.ts_ns);
    if (err != RILL_OK) {
        return fail(c, err, "%s", rill_last_error(err));
    }

    err = parse_price(cells[c->col[C_PRICE]], &t.price, &syn);
    if (err != RILL_OK) {
        return fail(c, err, "field 'price': %s", syn);
    }
    err = rill_tick_check_price(t.price);
    if (err != RILL_OK) {
        return fail(c, err, "%s", rill_last_error(err));
    }

    err = parse_int(cells[c->col[C_SIZE]], &t.size);
    if (err != RILL_OK) {
        return fail(c, err, "field 'size': %s",
                    err == RILL_EFORMAT ? "must be a decimal integer" : "does not fit 64 bits");
    }
    err = rill_tick_check_size(t.size);
    if (err != RILL_OK) {
        return fail(c, err, "%s", rill_last_error(err));
    }

    t.side = RILL_SIDE_UNKNOWN;
    if (c->col[C_SIDE] >= 0) {
        cell_t sd = cells[c->col[C_SIDE]];
        err = rill_tick_parse_side(sd.p, sd.n, &t.side);
        if (err != RILL_OK) {
            return fail(c, err, "%s", rill_last_error(err));
        }
    }
    *out = t;
    c->stats.ticks++;
    return RILL_OK;
}

rill_err_t rill_tick_csv_line(rill_tick_csv_t *c, const char *line, size_t len, rill_tick_t *out) {
    rill_err_t e = tick_csv_line_impl(c, line, len, out);
    return rill__error_str(e, c != NULL ? c->msg : "");
}
