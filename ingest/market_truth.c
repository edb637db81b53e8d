/*
 * market_truth.c - the true answers to the fixed market questions and the check of answers
 * (rill_market_truth.h states every rule; this note says how it is built).
 *
 * The truth keeps the lines themselves, parsed back from the text (not the ticks that made
 * them): what the model was given is the text, and the governor's bars hide what the ticks
 * said. Prices stay decimals as printed - an integer mantissa and its number of decimals - so
 * no float rounding can make 187.34 differ from 187.34, and a value is compared by its
 * normalized form (trailing fractional zeros dropped). Lines are kept in feed order with their
 * version, which never goes back, so the text at version v is a prefix found by binary search;
 * each question scans that prefix (a few thousand lines at most in the demo and the benchmark),
 * which needs no per-version state and answers for any version fed, as standing answers
 * computed on an older version need.
 *
 * An answer is read once into tokens (numbers as decimals, words with the symbol they name);
 * each kind's rule then looks at those. The template table is exact text with a symbol slot,
 * not a matcher of meanings: a question the table does not hold is unscored, never guessed.
 *
 * Rejected: scoring whole answers (a model that answers and then repeats the feed would be
 * judged by the repetition); fuzzy symbol matching (EUR/USD for EURUSD: the stream prints one
 * spelling, and the check must not be more lenient than the text is clear).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_market_prompt.h"
#include "rill_market_truth.h"

#define MAX_SYMS   256 /* symbols one truth tells apart */
#define MAX_TOKENS 128 /* tokens of an answer's first line read (more: the line is wrong) */
#define MAX_DIGITS 18

/* ---- decimals ------------------------------------------------------------------------------ */

typedef struct dec {
    int64_t m; /* value = m / 10^d */
    int32_t d;
} dec_t;

static const int64_t POW10[MAX_DIGITS + 1] = { 1,
                                               10,
                                               100,
                                               1000,
                                               10000,
                                               100000,
                                               1000000,
                                               10000000,
                                               100000000,
                                               1000000000,
                                               10000000000LL,
                                               100000000000LL,
                                               1000000000000LL,
                                               10000000000000LL,
                                               100000000000000LL,
                                               1000000000000000LL,
                                               10000000000000000LL,
                                               100000000000000000LL,
                                               1000000000000000000LL };

static dec_t dec_norm(dec_t a) {
    while (a.d > 0 && a.m % 10 == 0) {
        a.m /= 10;
        a.d--;
    }
    return a;
}

static bool dec_eq(dec_t a, dec_t b) {
    a = dec_norm(a);
    b = dec_norm(b);
    return a.m == b.m && a.d == b.d;
}

/* a at d decimals (d >= a.d; the caller keeps d <= 8 and values small). */
static int64_t dec_at(dec_t a, int32_t d) {
    return a.m * POW10[d - a.d];
}

static dec_t dec_add(dec_t a, dec_t b) {
    int32_t d = a.d > b.d ? a.d : b.d;
    return (dec_t){ dec_at(a, d) + dec_at(b, d), d };
}

static int dec_cmp(dec_t a, dec_t b) {
    int32_t d = a.d > b.d ? a.d : b.d;
    int64_t x = dec_at(a, d), y = dec_at(b, d);
    return x < y ? -1 : x > y;
}

static dec_t dec_abs(dec_t a) {
    return (dec_t){ a.m < 0 ? -a.m : a.m, a.d };
}

/* Writes a with its own decimals ("187.30"); sign: "+" in front of a value >= 0 too. */
static int dec_fmt(char *buf, size_t cap, dec_t a, bool sign) {
    int64_t m = a.m < 0 ? -a.m : a.m;
    const char *s = a.m < 0 ? "-" : sign ? "+" : "";
    if (a.d == 0) {
        return snprintf(buf, cap, "%s%lld", s, (long long)m);
    }
    return snprintf(buf, cap, "%s%lld.%0*lld", s, (long long)(m / POW10[a.d]), (int)a.d,
                    (long long)(m % POW10[a.d]));
}

/* Reads digits[.digits] at p[0..n) into *out; returns the bytes read, 0 when there is no
 * number there (or more than MAX_DIGITS digits). A '.' not followed by a digit is not read. */
static size_t dec_read(const char *p, size_t n, dec_t *out) {
    size_t i = 0;
    int digits = 0;
    int64_t m = 0;
    while (i < n && isdigit((unsigned char)p[i])) {
        if (++digits > MAX_DIGITS) {
            return 0;
        }
        m = m * 10 + (p[i++] - '0');
    }
    if (digits == 0) {
        return 0;
    }
    int32_t d = 0;
    if (i + 1 < n && p[i] == '.' && isdigit((unsigned char)p[i + 1])) {
        i++;
        while (i < n && isdigit((unsigned char)p[i])) {
            if (++digits > MAX_DIGITS) {
                return 0;
            }
            m = m * 10 + (p[i++] - '0');
            d++;
        }
    }
    *out = (dec_t){ m, d };
    return i;
}

/* ---- the lines ----------------------------------------------------------------------------- */

typedef struct line {
    int32_t sym;
    bool bar;
    char side;   /* 'B', 'S', '?' (a bar: '?') */
    dec_t price; /* a tick's price, a bar's close */
    dec_t first; /* a tick's price, a bar's open */
    dec_t change;
    int64_t size; /* a tick's size; a bar's volume */
    int64_t version, ts_ns;
} line_t;

typedef struct sym {
    char name[RILL_MARKET_SYMBOL_MAX + 1];
    int64_t first_line; /* index of its first line: in the text at v when < the prefix end */
} sym_t;

struct rill_market_truth {
    rill_market_truth_params_t p;
    line_t *lines;
    int64_t n, cap;
    sym_t syms[MAX_SYMS];
    int32_t n_syms;
    int64_t version, ts_ns;
};

/* A cursor over one line's bytes. */
typedef struct cur {
    const char *p;
    size_t n, i;
} cur_t;

static bool lit(cur_t *c, const char *s) {
    size_t k = strlen(s);
    if (c->n - c->i < k || memcmp(c->p + c->i, s, k) != 0) {
        return false;
    }
    c->i += k;
    return true;
}

static bool num(cur_t *c, bool sign, dec_t *out) {
    int neg = 0;
    if (sign) {
        if (c->i >= c->n || (c->p[c->i] != '+' && c->p[c->i] != '-')) {
            return false;
        }
        neg = c->p[c->i++] == '-';
    }
    size_t k = dec_read(c->p + c->i, c->n - c->i, out);
    if (k == 0) {
        return false;
    }
    c->i += k;
    if (neg) {
        out->m = -out->m;
    }
    return true;
}

static bool is_sym_byte(char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
           ch == '/' || ch == '-';
}

/* Parses one tick or bar line p[0..n) (no '\n') into *l (sym: the name in name[]). */
static bool parse_line(const char *p, size_t n, line_t *l, char *name) {
    cur_t c = { p, n, 0 };
    while (c.i < n && p[c.i] != ' ') {
        if (!is_sym_byte(p[c.i]) || c.i >= RILL_MARKET_SYMBOL_MAX) {
            return false;
        }
        name[c.i] = p[c.i];
        c.i++;
    }
    if (c.i == 0) {
        return false;
    }
    name[c.i] = '\0';
    memset(l, 0, sizeof *l);
    dec_t x;
    if (lit(&c, " bar ")) {
        dec_t hi, lo;
        l->bar = true;
        l->side = '?';
        if (!num(&c, false, &l->first) || !lit(&c, " ") || !num(&c, false, &hi) || !lit(&c, " ") ||
            !num(&c, false, &lo) || !lit(&c, " ") || !num(&c, false, &l->price) || !lit(&c, " ") ||
            !num(&c, true, &l->change) || !lit(&c, " vol ") || !num(&c, false, &x) || x.d != 0) {
            return false;
        }
        l->size = x.m;
        if (!lit(&c, " n ") || !num(&c, false, &x) || x.d != 0) {
            return false;
        }
    } else {
        if (!lit(&c, " ") || !num(&c, false, &l->price) || !lit(&c, " ") ||
            !num(&c, true, &l->change) || !lit(&c, " ") || !num(&c, false, &x) || x.d != 0 ||
            !lit(&c, " ") || c.i + 1 != n) {
            return false;
        }
        l->first = l->price;
        l->size = x.m;
        l->side = p[c.i++];
        if (l->side != 'B' && l->side != 'S' && l->side != '?') {
            return false;
        }
    }
    return c.i == n;
}

static int32_t sym_find(const rill_market_truth_t *t, const char *s, size_t len) {
    for (int32_t i = 0; i < t->n_syms; i++) {
        if (strlen(t->syms[i].name) == len && memcmp(t->syms[i].name, s, len) == 0) {
            return i;
        }
    }
    return -1;
}

rill_market_truth_params_t rill_market_truth_default_params(void) {
    return (rill_market_truth_params_t){ .hold_tail = false };
}

rill_err_t rill_market_truth_new(const rill_market_truth_params_t *params,
                                 rill_market_truth_t **out) {
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "rill_market_truth_new: out is NULL");
    }
    rill_market_truth_t *t = rill_calloc(RILL_MEM_INGEST, 1, sizeof *t);
    if (t == NULL) {
        return rill__error(RILL_ENOMEM, "rill_market_truth_new: out of memory");
    }
    t->p = params != NULL ? *params : rill_market_truth_default_params();
    *out = t;
    return RILL_OK;
}

void rill_market_truth_destroy(rill_market_truth_t **tp) {
    if (tp == NULL || *tp == NULL) {
        return;
    }
    rill_free((*tp)->lines);
    rill_free(*tp);
    *tp = NULL;
}

int64_t rill_market_truth_n_lines(const rill_market_truth_t *t) {
    return t != NULL ? t->n : RILL_EINVAL;
}

int64_t rill_market_truth_version(const rill_market_truth_t *t) {
    return t != NULL ? t->version : RILL_EINVAL;
}

rill_err_t rill_market_truth_feed(rill_market_truth_t *t, const char *text, size_t len,
                                  int64_t version, int64_t ts_ns) {
    if (t == NULL || (text == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "rill_market_truth_feed: NULL argument");
    }
    if (version < 0 || version < t->version || ts_ns < t->ts_ns) {
        return rill__error(RILL_EINVAL,
                           "rill_market_truth_feed: version %lld / time %lld goes back (had "
                           "%lld / %lld)",
                           (long long)version, (long long)ts_ns, (long long)t->version,
                           (long long)t->ts_ns);
    }
    if (len > 0 && text[len - 1] != '\n') {
        return rill__error(RILL_EFORMAT, "rill_market_truth_feed: the text does not end in '\\n'");
    }
    /* Two passes: check every line (and count new symbols and room), then take them. */
    int64_t n_new = 0;
    int32_t n_syms = t->n_syms;
    char pend[MAX_SYMS][RILL_MARKET_SYMBOL_MAX + 1];
    int32_t n_pend = 0;
    int64_t lineno = 0;
    for (size_t i = 0; i < len;) {
        const char *e = memchr(text + i, '\n', len - i);
        size_t n = (size_t)(e - (text + i));
        line_t l;
        char name[RILL_MARKET_SYMBOL_MAX + 1];
        lineno++;
        if (!parse_line(text + i, n, &l, name)) {
            return rill__error(RILL_EFORMAT,
                               "rill_market_truth_feed: line %lld is not a tick or bar line: "
                               "\"%.*s\"",
                               (long long)lineno, (int)(n < 80 ? n : 80), text + i);
        }
        if (sym_find(t, name, strlen(name)) < 0) {
            bool seen = false;
            for (int32_t k = 0; k < n_pend && !seen; k++) {
                seen = strcmp(pend[k], name) == 0;
            }
            if (!seen) {
                if (n_syms >= MAX_SYMS) {
                    return rill__error(RILL_EFULL, "rill_market_truth_feed: more than %d symbols",
                                       MAX_SYMS);
                }
                memcpy(pend[n_pend++], name, sizeof name);
                n_syms++;
            }
        }
        n_new++;
        i += n + 1;
    }
    if (t->n + n_new > t->cap) {
        int64_t cap = t->cap > 0 ? t->cap : 64;
        while (cap < t->n + n_new) {
            cap *= 2;
        }
        line_t *g = rill_realloc(RILL_MEM_INGEST, t->lines, (size_t)cap * sizeof *g);
        if (g == NULL) {
            return rill__error(RILL_ENOMEM, "rill_market_truth_feed: out of memory");
        }
        t->lines = g;
        t->cap = cap;
    }
    for (size_t i = 0; i < len;) {
        const char *e = memchr(text + i, '\n', len - i);
        size_t n = (size_t)(e - (text + i));
        line_t *l = &t->lines[t->n];
        char name[RILL_MARKET_SYMBOL_MAX + 1];
        parse_line(text + i, n, l, name);
        int32_t s = sym_find(t, name, strlen(name));
        if (s < 0) {
            s = t->n_syms++;
            memcpy(t->syms[s].name, name, sizeof name);
            t->syms[s].first_line = t->n;
        }
        l->sym = s;
        l->version = version;
        l->ts_ns = ts_ns;
        t->n++;
        i += n + 1;
    }
    t->version = version;
    t->ts_ns = ts_ns;
    return RILL_OK;
}

/* Lines [0, end) are the text at version v. */
static int64_t prefix_end(const rill_market_truth_t *t, int64_t v) {
    int64_t lo = 0, hi = t->n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (t->lines[mid].version <= v) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

/* ---- the question table -------------------------------------------------------------------- */

typedef struct tmpl {
    const char *text; /* "{S}": the symbol slot */
    rill_market_qkind_t kind;
    int64_t window_ns;
    int32_t last_n;
} tmpl_t;

/* The questions of demos/market/market_demo.c and bench/stream/stream_build.c, exactly. */
static const tmpl_t TEMPLATES[] = {
    { "What was the last price of {S}?", RILL_MARKET_Q_LAST_PRICE, 0, 0 },
    { "What is the most recent {S} quote?", RILL_MARKET_Q_QUOTE, 0, 0 },
    { "Which symbol moved most recently?", RILL_MARKET_Q_MOVED_LAST, 0, 0 },
    { "Were there more buys or sells of {S}?", RILL_MARKET_Q_BUYS_SELLS, 0, 0 },
    { "Is {S} trading above its first price in the stream?", RILL_MARKET_Q_ABOVE_FIRST, 0, 0 },
    { "Which symbol traded the largest size?", RILL_MARKET_Q_LARGEST_TRADE, 0, 0 },
    { "Which symbol moved most in the last minute, and by how much? Answer with the symbol and "
      "its change.",
      RILL_MARKET_Q_MOVED_MOST, 60000000000LL, 0 },
    { "Is {S} above its open? Answer yes or no, then give the last {S} price from the feed.",
      RILL_MARKET_Q_ABOVE_FIRST_PRICE, 0, 0 },
    { "What was the last {S} price in the feed above, and was that trade a buy or a sell?",
      RILL_MARKET_Q_LAST_PRICE_SIDE, 0, 0 },
    { "Which symbol traded the largest size in the last minute? Answer with the symbol and the "
      "size.",
      RILL_MARKET_Q_LARGEST_SIZE, 60000000000LL, 0 },
    { "Is {S} going up or down over its last ten trades? Answer up, down or flat, with its last "
      "price.",
      RILL_MARKET_Q_TREND, 0, 10 },
    { "How many of the last ten {S} trades were sells? Answer with one number only.",
      RILL_MARKET_Q_SELLS_COUNT, 0, 10 },
    { "What is the latest price of each symbol in the feed above? Answer as a list of symbol and "
      "price pairs.",
      RILL_MARKET_Q_ALL_LAST_PRICES, 0, 0 },
};

static const char *const KIND_NAMES[RILL_MARKET_Q_N_KINDS] = {
    "none",         "last_price",    "quote",       "moved_last",        "buys_sells",
    "above_first",  "largest_trade", "moved_most",  "above_first_price", "last_price_side",
    "largest_size", "trend",         "sells_count", "all_last_prices",
};

const char *rill_market_qkind_name(rill_market_qkind_t kind) {
    return (int)kind >= 0 && kind < RILL_MARKET_Q_N_KINDS ? KIND_NAMES[kind] : "?";
}

/* Matches text[0..n) against template tp; the slot's symbol goes into sym. */
static bool tmpl_match(const char *tp, const char *text, size_t n, char *sym) {
    size_t i = 0;
    sym[0] = '\0';
    while (*tp != '\0') {
        if (strncmp(tp, "{S}", 3) == 0) {
            size_t k = 0;
            while (i + k < n && is_sym_byte(text[i + k]) && k <= RILL_MARKET_SYMBOL_MAX) {
                k++;
            }
            /* the slot ends where the template's next byte is; a symbol may end in '.' only
             * when the template does not continue with one */
            while (k > 0 && tp[3] != '\0' && text[i + k - 1] == tp[3]) {
                k--;
            }
            if (k == 0 || k > RILL_MARKET_SYMBOL_MAX) {
                return false;
            }
            if (sym[0] != '\0' && (strlen(sym) != k || memcmp(sym, text + i, k) != 0)) {
                return false; /* the slot twice, two symbols */
            }
            memcpy(sym, text + i, k);
            sym[k] = '\0';
            i += k;
            tp += 3;
            continue;
        }
        if (i >= n || text[i] != *tp) {
            return false;
        }
        i++;
        tp++;
    }
    return i == n;
}

rill_err_t rill_market_question_parse(const char *text, size_t len, rill_market_question_t *out) {
    if (out == NULL || (text == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "rill_market_question_parse: NULL argument");
    }
    memset(out, 0, sizeof *out);
    while (len > 0 && isspace((unsigned char)text[0])) {
        text++;
        len--;
    }
    while (len > 0 && isspace((unsigned char)text[len - 1])) {
        len--;
    }
    for (size_t k = 0; k < sizeof TEMPLATES / sizeof TEMPLATES[0]; k++) {
        char sym[RILL_MARKET_SYMBOL_MAX + 2];
        /* the question alone, or followed by one space and its kind's instruction
         * (rill_market_prompt.h) */
        const char *instr = rill_market_prompt_instruction(TEMPLATES[k].kind);
        size_t il = strlen(instr), qn = len;
        if (len > il + 1 && text[len - il - 1] == ' ' && memcmp(text + len - il, instr, il) == 0) {
            qn = len - il - 1;
        }
        if (tmpl_match(TEMPLATES[k].text, text, len, sym) ||
            (qn < len && tmpl_match(TEMPLATES[k].text, text, qn, sym))) {
            out->kind = TEMPLATES[k].kind;
            memcpy(out->symbol, sym, strlen(sym) + 1);
            out->window_ns = TEMPLATES[k].window_ns;
            out->last_n = TEMPLATES[k].last_n;
            return RILL_OK;
        }
    }
    return rill__error(RILL_ENOTFOUND, "not one of the market questions with a known answer");
}

/* ---- the truth at a version ---------------------------------------------------------------- */

enum { C_NONE = -1, C_BUYS, C_SELLS, C_EQUAL, C_ABOVE, C_NO, C_BELOW, C_UP, C_DOWN, C_FLAT };

typedef struct truth {
    bool known;
    int32_t n_syms; /* the right symbols (ties), with their number each */
    int32_t syms[MAX_SYMS];
    dec_t sym_num[MAX_SYMS];
    dec_t num; /* the price, size or count */
    int choice;
    char side;
    int64_t nb, ns; /* buys_sells: the counts */
    dec_t first;    /* above_first: the first price */
} truth_t;

/* Index of the last line of symbol s in [0, end), -1 when none. */
static int64_t last_of(const rill_market_truth_t *t, int64_t end, int32_t s) {
    for (int64_t i = end - 1; i >= 0; i--) {
        if (t->lines[i].sym == s) {
            return i;
        }
    }
    return -1;
}

/* The side of line i as the text at [0, end) shows it ('?' when held back). */
static char side_seen(const rill_market_truth_t *t, int64_t end, int64_t i) {
    return t->p.hold_tail && i == end - 1 ? 'h' : t->lines[i].side;
}

static int above_choice(dec_t last, dec_t first) {
    int c = dec_cmp(last, first);
    return c > 0 ? C_ABOVE : c < 0 ? C_BELOW : C_EQUAL;
}

/* The largest trade among tick lines [lo, end): symbols and size. */
static void largest(const rill_market_truth_t *t, int64_t lo, int64_t end, truth_t *tr) {
    int64_t best = -1;
    for (int64_t i = lo; i < end; i++) {
        if (!t->lines[i].bar && t->lines[i].size > best) {
            best = t->lines[i].size;
        }
    }
    if (best < 0) {
        return;
    }
    for (int64_t i = lo; i < end; i++) {
        const line_t *l = &t->lines[i];
        if (l->bar || l->size != best) {
            continue;
        }
        bool have = false;
        for (int32_t k = 0; k < tr->n_syms && !have; k++) {
            have = tr->syms[k] == l->sym;
        }
        if (!have) {
            tr->syms[tr->n_syms++] = l->sym;
        }
    }
    tr->num = (dec_t){ best, 0 };
    tr->known = true;
}

/* First line index of the window ending at line end - 1. */
static int64_t window_lo(const rill_market_truth_t *t, int64_t end, int64_t window_ns) {
    int64_t t_end = t->lines[end - 1].ts_ns, lo = end;
    while (lo > 0 && t->lines[lo - 1].ts_ns > t_end - window_ns) {
        lo--;
    }
    return lo;
}

static void compute(const rill_market_truth_t *t, const rill_market_question_t *q, int64_t v,
                    truth_t *tr) {
    memset(tr, 0, sizeof *tr);
    tr->choice = C_NONE;
    int64_t end = prefix_end(t, v);
    if (end == 0 || q->kind <= RILL_MARKET_Q_NONE || q->kind >= RILL_MARKET_Q_N_KINDS) {
        return;
    }
    int32_t s = -1;
    if (q->symbol[0] != '\0') {
        s = sym_find(t, q->symbol, strlen(q->symbol));
        if (s < 0 || t->syms[s].first_line >= end) {
            return; /* S is not in the text yet */
        }
    }
    int64_t li = s >= 0 ? last_of(t, end, s) : -1;
    switch (q->kind) {
    case RILL_MARKET_Q_LAST_PRICE:
    case RILL_MARKET_Q_QUOTE:
        tr->num = t->lines[li].price;
        tr->known = true;
        break;
    case RILL_MARKET_Q_MOVED_LAST:
        for (int64_t i = end - 1; i >= 0; i--) {
            if (t->lines[i].change.m != 0) {
                tr->syms[tr->n_syms++] = t->lines[i].sym;
                tr->known = true;
                break;
            }
        }
        break;
    case RILL_MARKET_Q_BUYS_SELLS: {
        int64_t held = 0;
        for (int64_t i = 0; i < end; i++) {
            if (t->lines[i].sym != s || t->lines[i].bar) {
                continue;
            }
            char sd = side_seen(t, end, i);
            tr->nb += sd == 'B';
            tr->ns += sd == 'S';
            held += sd == 'h' && t->lines[i].side != '?';
        }
        int c0 = tr->nb > tr->ns ? C_BUYS : tr->nb < tr->ns ? C_SELLS : C_EQUAL;
        if (held > 0) { /* the held side counted either way must give the same answer */
            int cb = tr->nb + 1 > tr->ns ? C_BUYS : tr->nb + 1 < tr->ns ? C_SELLS : C_EQUAL;
            int cs = tr->nb > tr->ns + 1 ? C_BUYS : tr->nb < tr->ns + 1 ? C_SELLS : C_EQUAL;
            if (cb != cs) {
                return;
            }
            c0 = cb;
        }
        if (tr->nb + tr->ns + held == 0) {
            return; /* no side of S in the text: bars only, or '?' */
        }
        tr->choice = c0;
        tr->known = true;
        break;
    }
    case RILL_MARKET_Q_ABOVE_FIRST:
    case RILL_MARKET_Q_ABOVE_FIRST_PRICE:
        tr->first = t->lines[t->syms[s].first_line].first;
        tr->num = t->lines[li].price;
        tr->choice = above_choice(tr->num, tr->first);
        tr->known = true;
        break;
    case RILL_MARKET_Q_LARGEST_TRADE:
        largest(t, 0, end, tr);
        break;
    case RILL_MARKET_Q_LARGEST_SIZE:
        largest(t, window_lo(t, end, q->window_ns), end, tr);
        break;
    case RILL_MARKET_Q_MOVED_MOST: {
        dec_t sum[MAX_SYMS];
        bool in[MAX_SYMS] = { false };
        for (int32_t k = 0; k < t->n_syms; k++) {
            sum[k] = (dec_t){ 0, 0 };
        }
        for (int64_t i = window_lo(t, end, q->window_ns); i < end; i++) {
            sum[t->lines[i].sym] = dec_add(sum[t->lines[i].sym], t->lines[i].change);
            in[t->lines[i].sym] = true;
        }
        dec_t best = { 0, 0 };
        for (int32_t k = 0; k < t->n_syms; k++) {
            if (in[k] && dec_cmp(dec_abs(sum[k]), best) > 0) {
                best = dec_abs(sum[k]);
            }
        }
        if (best.m == 0) {
            return; /* nothing moved in the window */
        }
        for (int32_t k = 0; k < t->n_syms; k++) {
            if (in[k] && dec_cmp(dec_abs(sum[k]), best) == 0) {
                tr->sym_num[tr->n_syms] = sum[k];
                tr->syms[tr->n_syms++] = k;
            }
        }
        tr->known = true;
        break;
    }
    case RILL_MARKET_Q_LAST_PRICE_SIDE: {
        char sd = side_seen(t, end, li);
        if (t->lines[li].bar || (sd != 'B' && sd != 'S')) {
            return;
        }
        tr->num = t->lines[li].price;
        tr->side = sd;
        tr->known = true;
        break;
    }
    case RILL_MARKET_Q_TREND:
    case RILL_MARKET_Q_SELLS_COUNT: {
        dec_t sum = { 0, 0 };
        int64_t sells = 0;
        int32_t k = 0;
        for (int64_t i = end - 1; i >= 0 && k < q->last_n; i--) {
            const line_t *l = &t->lines[i];
            if (l->sym != s) {
                continue;
            }
            k++;
            sum = dec_add(sum, l->change);
            char sd = side_seen(t, end, i);
            if (q->kind == RILL_MARKET_Q_SELLS_COUNT && (l->bar || (sd == 'h' && l->side != '?'))) {
                return; /* a side the text does not show */
            }
            sells += sd == 'S';
        }
        if (q->kind == RILL_MARKET_Q_TREND) {
            tr->choice = sum.m > 0 ? C_UP : sum.m < 0 ? C_DOWN : C_FLAT;
            tr->num = t->lines[li].price;
        } else {
            tr->num = (dec_t){ sells, 0 };
        }
        tr->known = true;
        break;
    }
    case RILL_MARKET_Q_ALL_LAST_PRICES:
        for (int32_t k = 0; k < t->n_syms; k++) {
            if (t->syms[k].first_line < end) {
                tr->sym_num[tr->n_syms] = t->lines[last_of(t, end, k)].price;
                tr->syms[tr->n_syms++] = k;
            }
        }
        tr->known = true;
        break;
    default:
        break;
    }
}

static const char *choice_name(int c) {
    switch (c) {
    case C_BUYS:
        return "buys";
    case C_SELLS:
        return "sells";
    case C_EQUAL:
        return "equal";
    case C_ABOVE:
        return "yes";
    case C_BELOW:
        return "no";
    case C_UP:
        return "up";
    case C_DOWN:
        return "down";
    case C_FLAT:
        return "flat";
    default:
        return "?";
    }
}

/* Appends printf output to buf at *off (cut at cap). */
#define APPEND(...)                                                                              \
    do {                                                                                         \
        int k_ = snprintf(off < cap ? buf + off : NULL, off < cap ? cap - off : 0, __VA_ARGS__); \
        off += k_ > 0 ? (size_t)k_ : 0;                                                          \
    } while (0)

int64_t rill_market_truth_expect(const rill_market_truth_t *t, const rill_market_question_t *q,
                                 int64_t version, char *buf, size_t cap) {
    if (t == NULL || q == NULL || buf == NULL || cap == 0) {
        return rill__error(RILL_EINVAL, "rill_market_truth_expect: NULL argument");
    }
    truth_t tr;
    compute(t, q, version, &tr);
    buf[0] = '\0';
    if (!tr.known) {
        return RILL_EAGAIN;
    }
    size_t off = 0;
    char a[48], b[48];
    switch (q->kind) {
    case RILL_MARKET_Q_LAST_PRICE:
    case RILL_MARKET_Q_QUOTE:
    case RILL_MARKET_Q_SELLS_COUNT:
        dec_fmt(a, sizeof a, tr.num, false);
        APPEND("%s", a);
        break;
    case RILL_MARKET_Q_MOVED_LAST:
    case RILL_MARKET_Q_LARGEST_TRADE:
    case RILL_MARKET_Q_LARGEST_SIZE:
        for (int32_t k = 0; k < tr.n_syms; k++) {
            APPEND("%s%s", k ? " or " : "", t->syms[tr.syms[k]].name);
        }
        if (q->kind != RILL_MARKET_Q_MOVED_LAST) {
            APPEND(" %lld", (long long)tr.num.m);
        }
        break;
    case RILL_MARKET_Q_BUYS_SELLS:
        APPEND("%s (%lld to %lld)", choice_name(tr.choice), (long long)tr.nb, (long long)tr.ns);
        break;
    case RILL_MARKET_Q_ABOVE_FIRST:
        dec_fmt(a, sizeof a, tr.num, false);
        dec_fmt(b, sizeof b, tr.first, false);
        APPEND("%s (%s %s %s)", choice_name(tr.choice), a,
               tr.choice == C_ABOVE   ? "over"
               : tr.choice == C_BELOW ? "under"
                                      : "equal to",
               b);
        break;
    case RILL_MARKET_Q_ABOVE_FIRST_PRICE:
    case RILL_MARKET_Q_TREND:
        dec_fmt(a, sizeof a, tr.num, false);
        APPEND("%s, %s", choice_name(tr.choice), a);
        break;
    case RILL_MARKET_Q_MOVED_MOST:
        for (int32_t k = 0; k < tr.n_syms; k++) {
            dec_fmt(a, sizeof a, tr.sym_num[k], true);
            APPEND("%s%s %s", k ? " or " : "", t->syms[tr.syms[k]].name, a);
        }
        break;
    case RILL_MARKET_Q_LAST_PRICE_SIDE:
        dec_fmt(a, sizeof a, tr.num, false);
        APPEND("%s %c", a, tr.side);
        break;
    case RILL_MARKET_Q_ALL_LAST_PRICES:
        for (int32_t k = 0; k < tr.n_syms; k++) {
            dec_fmt(a, sizeof a, tr.sym_num[k], false);
            APPEND("%s%s %s", k ? ", " : "", t->syms[tr.syms[k]].name, a);
        }
        break;
    default:
        break;
    }
    if (off >= cap) {
        return rill__error(RILL_EFULL, "rill_market_truth_expect: %zu bytes needed", off + 1);
    }
    return (int64_t)off;
}

/* ---- reading an answer --------------------------------------------------------------------- */

typedef struct tok {
    bool is_num;
    size_t pos, len;
    dec_t v;      /* a number's value */
    bool signed_; /* written with + or - */
    int32_t sym;  /* a word naming a symbol: its index; else -1 */
} tok_t;

typedef struct ans {
    const char *p;
    size_t n;
    tok_t tok[MAX_TOKENS];
    int32_t n_tok;
    bool overflow, echo, inverted;
} ans_t;

static bool is_word_byte(char ch) {
    return isalnum((unsigned char)ch) || ch == '.' || ch == '_' || ch == '/' || ch == '-';
}

/* Reads a number at p[i..n) with commas grouping thousands ("1,200"); returns its length. */
static size_t read_grouped(const char *p, size_t n, size_t i, dec_t *v) {
    size_t k = dec_read(p + i, n - i, v);
    if (k == 0 || k > 3 || v->d != 0) {
        return k;
    }
    /* 1-3 digits: ",ddd" groups may follow */
    size_t j = i + k;
    int64_t m = v->m;
    int groups = 0;
    while (j + 3 < n + 0 && p[j] == ',' && isdigit((unsigned char)p[j + 1]) &&
           isdigit((unsigned char)p[j + 2]) && isdigit((unsigned char)p[j + 3]) &&
           (j + 4 >= n || !isdigit((unsigned char)p[j + 4])) && groups < 5) {
        m = m * 1000 + (p[j + 1] - '0') * 100 + (p[j + 2] - '0') * 10 + (p[j + 3] - '0');
        j += 4;
        groups++;
    }
    if (groups == 0) {
        return k;
    }
    dec_t frac;
    size_t f = 0;
    if (j + 1 < n && p[j] == '.' && isdigit((unsigned char)p[j + 1])) {
        f = dec_read(p + j + 1, n - j - 1, &frac);
    }
    if (f > 0) {
        if (frac.d != 0 || f > 8) {
            return k;
        }
        m = m * POW10[f] + frac.m;
        *v = (dec_t){ m, (int32_t)f };
        return j + 1 + f - i;
    }
    *v = (dec_t){ m, 0 };
    return j - i;
}

static bool word_is(const ans_t *a, const tok_t *tk, const char *w) {
    size_t n = strlen(w);
    if (tk->is_num || tk->len != n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (tolower((unsigned char)a->p[tk->pos + i]) != w[i]) {
            return false;
        }
    }
    return true;
}

static void read_answer(const rill_market_truth_t *t, int64_t end, const char *text, size_t len,
                        ans_t *a) {
    memset(a, 0, sizeof *a);
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) {
        i++;
    }
    const char *nl = memchr(text + i, '\n', len - i);
    a->p = text + i;
    a->n = nl != NULL ? (size_t)(nl - (text + i)) : len - i;
    size_t n = a->n;
    while (n > 0 && isspace((unsigned char)a->p[n - 1])) {
        n--;
    }
    line_t l;
    char name[RILL_MARKET_SYMBOL_MAX + 1];
    a->echo = parse_line(a->p, n, &l, name);
    const char *p = a->p;
    for (size_t j = 0; j < n;) {
        bool boundary = j == 0 || !is_word_byte(p[j - 1]);
        bool sign = (p[j] == '+' || p[j] == '-') && j + 1 < n && isdigit((unsigned char)p[j + 1]);
        if (boundary && (sign || isdigit((unsigned char)p[j]))) {
            dec_t v;
            size_t k = read_grouped(p, n, j + (sign ? 1 : 0), &v);
            size_t e = j + (sign ? 1 : 0) + k;
            if (k > 0 && (e >= n || !isalpha((unsigned char)p[e]))) {
                if (a->n_tok == MAX_TOKENS) {
                    a->overflow = true;
                    return;
                }
                if (sign && p[j] == '-') {
                    v.m = -v.m;
                }
                a->tok[a->n_tok++] = (tok_t){ true, j, e - j, v, sign, -1 };
                j = e;
                continue;
            }
        }
        if (boundary && isalpha((unsigned char)p[j])) {
            size_t e = j;
            while (e < n && is_word_byte(p[e])) {
                e++;
            }
            size_t wl = e - j;
            if (wl > 1 && (p[j + wl - 1] == '.' || p[j + wl - 1] == '/' || p[j + wl - 1] == '-')) {
                wl--;
            }
            if (a->n_tok == MAX_TOKENS) {
                a->overflow = true;
                return;
            }
            int32_t s = sym_find(t, p + j, wl);
            if (s >= 0 && t->syms[s].first_line >= end) {
                s = -1;
            }
            a->tok[a->n_tok++] = (tok_t){ false, j, wl, { 0, 0 }, false, s };
            static const char *const INV[] = { "not", "never", "neither", "nor", "fewer", "less" };
            for (size_t k = 0; k < sizeof INV / sizeof INV[0]; k++) {
                a->inverted |= word_is(a, &a->tok[a->n_tok - 1], INV[k]);
            }
            j = e;
            continue;
        }
        if (p[j] == '\'' && j > 0 && p[j - 1] == 'n' && j + 1 < n && p[j + 1] == 't') {
            a->inverted = true; /* "isn't", "wasn't" */
        }
        j++;
    }
}

/* The distinct symbols the answer names: count, and the first in *s. */
static int32_t named(const ans_t *a, int32_t *s) {
    int32_t n = 0, seen[MAX_TOKENS];
    for (int32_t i = 0; i < a->n_tok; i++) {
        int32_t x = a->tok[i].sym;
        if (x < 0) {
            continue;
        }
        bool have = false;
        for (int32_t k = 0; k < n && !have; k++) {
            have = seen[k] == x;
        }
        if (!have) {
            seen[n++] = x;
        }
    }
    *s = n > 0 ? seen[0] : -1;
    return n;
}

/* True when every number of tokens [lo, hi) that counts (unsigned only when prices) equals want
 * and there is at least one. */
static bool numbers_are(const ans_t *a, int32_t lo, int32_t hi, bool prices, dec_t want) {
    int32_t seen = 0;
    for (int32_t i = lo; i < hi; i++) {
        const tok_t *tk = &a->tok[i];
        if (!tk->is_num || (prices && tk->signed_)) {
            continue;
        }
        if (!dec_eq(tk->v, want)) {
            return false;
        }
        seen++;
    }
    return seen > 0;
}

typedef struct vocab {
    const char *word;
    int choice;
} vocab_t;

static const vocab_t V_BUYS_SELLS[] = {
    { "buy", C_BUYS },    { "buys", C_BUYS },     { "buying", C_BUYS }, { "bought", C_BUYS },
    { "buyers", C_BUYS }, { "sell", C_SELLS },    { "sells", C_SELLS }, { "selling", C_SELLS },
    { "sold", C_SELLS },  { "sellers", C_SELLS }, { "equal", C_EQUAL }, { "same", C_EQUAL },
    { "even", C_EQUAL },  { "tie", C_EQUAL },     { "tied", C_EQUAL },  { "balanced", C_EQUAL },
    { NULL, 0 },
};
static const vocab_t V_ABOVE[] = {
    { "yes", C_ABOVE },   { "above", C_ABOVE },     { "higher", C_ABOVE }, { "no", C_NO },
    { "below", C_BELOW }, { "lower", C_BELOW },     { "equal", C_EQUAL },  { "same", C_EQUAL },
    { "flat", C_EQUAL },  { "unchanged", C_EQUAL }, { NULL, 0 },
};
static const vocab_t V_TREND[] = {
    { "up", C_UP },     { "rising", C_UP },      { "higher", C_UP },
    { "down", C_DOWN }, { "falling", C_DOWN },   { "lower", C_DOWN },
    { "flat", C_FLAT }, { "unchanged", C_FLAT }, { NULL, 0 },
};
static const vocab_t V_SIDE[] = {
    { "buy", 'B' },   { "buys", 'B' }, { "bought", 'B' }, { "sell", 'S' },
    { "sells", 'S' }, { "sold", 'S' }, { NULL, 0 },
};

/* The answer's choice by the rules at the top of rill_market_truth.h; C_NONE: no readable
 * choice (the line is wrong). side: also a lone upper-case B or S word. */
static int choice_of(const ans_t *a, const vocab_t *v, bool yes_no, bool side) {
    int32_t first = -1;
    for (int32_t i = 0; i < a->n_tok && first < 0; i++) {
        first = a->tok[i].is_num ? -1 : i;
    }
    if (first >= 0 && (word_is(a, &a->tok[first], "yes") || word_is(a, &a->tok[first], "no"))) {
        if (!yes_no) {
            return C_NONE; /* yes or no to an either-or question */
        }
        return word_is(a, &a->tok[first], "yes") ? C_ABOVE : C_NO;
    }
    if (a->inverted) {
        return C_NONE;
    }
    for (int32_t i = 0; i < a->n_tok; i++) {
        const tok_t *tk = &a->tok[i];
        if (tk->is_num) {
            continue;
        }
        if (side && tk->len == 1 && (a->p[tk->pos] == 'B' || a->p[tk->pos] == 'S')) {
            return a->p[tk->pos];
        }
        for (const vocab_t *w = v; w->word != NULL; w++) {
            if (word_is(a, tk, w->word)) {
                return w->choice;
            }
        }
    }
    return C_NONE;
}

static bool above_right(int said, int truth) {
    return said == truth || (said == C_NO && (truth == C_BELOW || truth == C_EQUAL));
}

/* The count words zero..ten as numbers (sells_count). */
static int32_t count_words(const ans_t *a, dec_t want, int32_t *n_other) {
    static const char *const W[] = { "zero", "one",   "two",   "three", "four", "five",
                                     "six",  "seven", "eight", "nine",  "ten" };
    int32_t right = 0;
    for (int32_t i = 0; i < a->n_tok; i++) {
        for (int64_t k = 0; k < 11; k++) {
            if (word_is(a, &a->tok[i], W[k])) {
                if (want.d == 0 && want.m == k) {
                    right++;
                } else {
                    (*n_other)++;
                }
            }
        }
    }
    return right;
}

static bool all_prices_right(const rill_market_truth_t *t, const ans_t *a, const truth_t *tr) {
    bool done[MAX_SYMS] = { false };
    int32_t covered = 0;
    for (int32_t i = 0; i < a->n_tok; i++) {
        int32_t s = a->tok[i].sym;
        if (s < 0) {
            continue;
        }
        int32_t k = 0;
        while (k < tr->n_syms && tr->syms[k] != s) {
            k++;
        }
        if (k == tr->n_syms || done[s]) {
            return false; /* named twice */
        }
        int32_t j = i + 1;
        while (j < a->n_tok && a->tok[j].sym < 0) {
            j++;
        }
        if (!numbers_are(a, i + 1, j, true, tr->sym_num[k])) {
            return false;
        }
        done[s] = true;
        covered++;
    }
    (void)t;
    return covered == tr->n_syms;
}

rill_err_t rill_market_truth_score(const rill_market_truth_t *t, const rill_market_question_t *q,
                                   int64_t version, const char *answer, size_t len,
                                   rill_market_verdict_t *out) {
    if (t == NULL || q == NULL || out == NULL || (answer == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "rill_market_truth_score: NULL argument");
    }
    truth_t tr;
    compute(t, q, version, &tr);
    if (!tr.known) {
        *out = RILL_MARKET_UNSCORED;
        return RILL_OK;
    }
    ans_t a; /* about 7 KiB of tokens */
    read_answer(t, prefix_end(t, version), answer != NULL ? answer : "", len, &a);
    bool ok = !a.echo && !a.overflow;
    int32_t s0 = -1, n_named = named(&a, &s0);
    if (ok && q->symbol[0] != '\0') { /* a kind with S names no other symbol */
        int32_t s = sym_find(t, q->symbol, strlen(q->symbol));
        ok = n_named == 0 || (n_named == 1 && s0 == s);
    }
    bool in_set = false;
    for (int32_t k = 0; k < tr.n_syms; k++) {
        in_set |= tr.syms[k] == s0;
    }
    switch (q->kind) {
    case RILL_MARKET_Q_LAST_PRICE:
    case RILL_MARKET_Q_QUOTE:
        ok = ok && numbers_are(&a, 0, a.n_tok, true, tr.num);
        break;
    case RILL_MARKET_Q_MOVED_LAST:
    case RILL_MARKET_Q_LARGEST_TRADE:
        ok = ok && n_named == 1 && in_set;
        break;
    case RILL_MARKET_Q_LARGEST_SIZE:
        ok = ok && n_named == 1 && in_set && numbers_are(&a, 0, a.n_tok, false, tr.num);
        break;
    case RILL_MARKET_Q_MOVED_MOST: {
        ok = ok && n_named == 1 && in_set;
        dec_t sum = { 0, 0 };
        for (int32_t k = 0; k < tr.n_syms; k++) {
            if (tr.syms[k] == s0) {
                sum = tr.sym_num[k];
            }
        }
        const tok_t *one = NULL;
        for (int32_t i = 0; i < a.n_tok && ok; i++) {
            if (a.tok[i].is_num) {
                ok = one == NULL || dec_eq(one->v, a.tok[i].v);
                one = one == NULL ? &a.tok[i] : one;
            }
        }
        ok = ok && one != NULL && dec_eq(one->v, one->signed_ ? sum : dec_abs(sum));
        break;
    }
    case RILL_MARKET_Q_BUYS_SELLS:
        ok = ok && choice_of(&a, V_BUYS_SELLS, false, false) == tr.choice;
        break;
    case RILL_MARKET_Q_ABOVE_FIRST:
        ok = ok && above_right(choice_of(&a, V_ABOVE, true, false), tr.choice);
        break;
    case RILL_MARKET_Q_ABOVE_FIRST_PRICE:
        ok = ok && above_right(choice_of(&a, V_ABOVE, true, false), tr.choice) &&
             numbers_are(&a, 0, a.n_tok, true, tr.num);
        break;
    case RILL_MARKET_Q_LAST_PRICE_SIDE:
        ok = ok && choice_of(&a, V_SIDE, false, true) == tr.side &&
             numbers_are(&a, 0, a.n_tok, true, tr.num);
        break;
    case RILL_MARKET_Q_TREND:
        ok = ok && choice_of(&a, V_TREND, false, false) == tr.choice &&
             numbers_are(&a, 0, a.n_tok, true, tr.num);
        break;
    case RILL_MARKET_Q_SELLS_COUNT: {
        int32_t other = 0, right = count_words(&a, tr.num, &other);
        bool any_num = false, nums_ok = true;
        for (int32_t i = 0; i < a.n_tok; i++) {
            if (a.tok[i].is_num) {
                any_num = true;
                nums_ok &= dec_eq(a.tok[i].v, tr.num);
            }
        }
        ok = ok && other == 0 && nums_ok && (any_num || right > 0);
        break;
    }
    case RILL_MARKET_Q_ALL_LAST_PRICES:
        ok = ok && all_prices_right(t, &a, &tr);
        break;
    default:
        ok = false;
        break;
    }
    *out = ok ? RILL_MARKET_RIGHT : RILL_MARKET_WRONG;
    return RILL_OK;
}

/* ---- tally --------------------------------------------------------------------------------- */

void rill_market_tally_add(rill_market_tally_t *tl, rill_market_qkind_t k,
                           rill_market_verdict_t v) {
    if (tl == NULL || (int)k < 0 || k >= RILL_MARKET_Q_N_KINDS) {
        return;
    }
    tl->n[k]++;
    tl->scored[k] += v != RILL_MARKET_UNSCORED;
    tl->right[k] += v == RILL_MARKET_RIGHT;
}

static int64_t tally_sum(const int64_t *x) {
    int64_t s = 0;
    for (int k = 0; k < RILL_MARKET_Q_N_KINDS; k++) {
        s += x[k];
    }
    return s;
}

int64_t rill_market_tally_n(const rill_market_tally_t *tl) {
    return tl != NULL ? tally_sum(tl->n) : 0;
}

int64_t rill_market_tally_scored(const rill_market_tally_t *tl) {
    return tl != NULL ? tally_sum(tl->scored) : 0;
}

int64_t rill_market_tally_right(const rill_market_tally_t *tl) {
    return tl != NULL ? tally_sum(tl->right) : 0;
}
