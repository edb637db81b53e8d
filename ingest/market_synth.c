/*
 * market_synth.c - a deterministic synthetic market (rill_market.h, "synthetic market").
 *
 * Determinism is the point: a benchmark figure or a demo transcript must be reproducible from
 * its seed on any machine. So every random decision is integer arithmetic on core's xoshiro256**
 * (rill_rand.h: seeded through splitmix64, as its authors recommend), prices are integers counted
 * in tick sizes, and the only floating point is a few IEEE-754 operations whose results are fixed
 * by the standard: one division per price (units / 10^d), one multiplication per inter-arrival
 * time, conversions. No libm function is called: the exponential inter-arrival times come from von
 * Neumann's method, which compares uniforms instead of taking a logarithm (glibc's log and
 * another libm's may differ in the last bit, and then a timestamp would differ by one ns). Each
 * floating-point operation is its own statement, so no compiler contracts two into an FMA.
 *
 * Model: a Poisson stream of ticks over all symbols (rate_hz), each tick going to a symbol
 * picked by weight; a random walk of price per symbol, in ticks, with Irwin-Hall steps (the sum
 * of four uniform integers in [-k, k]), reflected at a quarter and at four times the start
 * price; sides leaning 60/40 with the symbol's last move; sizes of round lots with odd lots and
 * blocks. A burst multiplies the rate and one symbol's step size for a while.
 */
#include <stdio.h>
#include <string.h>

#include "market_internal.h"
#include "rill_alloc.h"
#include "rill_rand.h"

typedef struct builtin {
    const char *name;
    int64_t start; /* start price in ticks of 10^-decimals */
    int32_t decimals;
    int64_t k;      /* step half-width in ticks */
    int64_t weight; /* relative share of ticks */
    int32_t kind;   /* 0 equity (shares), 1 FX (currency units), 2 crypto (coins) */
} builtin_t;

static const builtin_t k_builtin[] = {
    { "AAPL", 18732, 2, 1, 20, 0 },        { "MSFT", 37458, 2, 2, 15, 0 },
    { "NVDA", 49522, 2, 3, 18, 0 },        { "EURUSD", 109420, 5, 2, 25, 1 },
    { "BTC-USD", 4285050, 2, 250, 12, 2 }, { "AMZN", 15194, 2, 1, 10, 0 },
    { "TSLA", 24842, 2, 3, 14, 0 },        { "GBPUSD", 127310, 5, 2, 12, 1 },
    { "ETH-USD", 228135, 2, 20, 8, 2 },    { "SPY", 47531, 2, 1, 20, 0 },
    { "GOOGL", 13969, 2, 1, 8, 0 },        { "META", 35396, 2, 2, 9, 0 },
};
#define N_BUILTIN ((int32_t)(sizeof k_builtin / sizeof k_builtin[0]))

static const double k_p10[RILL_MARKET_DECIMALS_MAX + 1] = { 1e0, 1e1, 1e2, 1e3, 1e4,
                                                            1e5, 1e6, 1e7, 1e8 };

typedef struct ssym {
    char name[RILL_MARKET_SYMBOL_MAX + 1];
    int32_t decimals, kind;
    int64_t units, lo, hi; /* price and its reflecting bounds, in ticks */
    int64_t k, k_burst, weight;
    int32_t last_move; /* -1, 0, +1 */
} ssym_t;

struct rill_market_synth {
    rill_market_synth_params_t params;
    rill_rand_t rng; /* xoshiro256** (rill_rand.h) */
    ssym_t *syms;    /* (n_symbols) */
    int32_t n;
    int64_t total_weight;
    double mean_ns, mean_burst_ns;
    uint64_t burst_thr; /* burst starts when a 53-bit uniform is below this */
    int64_t burst_left;
    int32_t burst_sym;
    int64_t ts;
};

rill_market_synth_params_t rill_market_synth_default_params(void) {
    rill_market_synth_params_t p = {
        .seed = 1,
        .n_symbols = 5,
        .rate_hz = 100.0,
        .burst_prob = 0.001,
        .burst_ticks = 200,
        .burst_rate_mult = 20.0,
        .burst_vol_mult = 4.0,
        .start_ts_ns = INT64_C(1704205800000000000),
    };
    return p;
}

static uint64_t next64(rill_market_synth_t *m) {
    return rill_rand_next(&m->rng);
}

/* Uniform integer in [0, n), n >= 1 (modulo bias below 2^-40 for the n used here). */
static uint64_t below(rill_market_synth_t *m, uint64_t n) {
    return next64(m) % n;
}

/* A standard exponential variate by von Neumann's comparison method (see the design note). */
static double exp1(rill_market_synth_t *m) {
    uint64_t k = 0;
    for (;;) {
        uint64_t u1 = next64(m) >> 11; /* 53-bit uniform */
        uint64_t prev = u1;
        uint64_t run = 1;
        for (;;) {
            uint64_t u = next64(m) >> 11;
            if (u >= prev) {
                break;
            }
            prev = u;
            run++;
        }
        if (run & 1) {
            double frac = (double)u1 * 0x1p-53;
            double whole = (double)k;
            return whole + frac;
        }
        k++;
    }
}

rill_err_t rill_market_synth_new(const rill_market_synth_params_t *params,
                                 rill_market_synth_t **out) {
    rill_market_synth_params_t p = params != NULL ? *params : rill_market_synth_default_params();
    if (out == NULL || p.n_symbols < 1 || p.n_symbols > RILL_MARKET_SYNTH_MAX_SYMBOLS ||
        !(p.rate_hz >= 1e-3 && p.rate_hz <= 1e9) || !(p.burst_prob >= 0.0 && p.burst_prob <= 1.0) ||
        p.burst_ticks < 1 || p.burst_ticks > 1000000 ||
        !(p.burst_rate_mult >= 1.0 && p.burst_rate_mult <= 1e4) ||
        !(p.burst_vol_mult >= 1.0 && p.burst_vol_mult <= 100.0) || p.start_ts_ns <= 0) {
        return RILL_EINVAL;
    }
    rill_market_synth_t *m = rill_calloc(RILL_MEM_INGEST, 1, sizeof *m);
    ssym_t *syms = rill_calloc(RILL_MEM_INGEST, (size_t)p.n_symbols, sizeof *syms);
    if (m == NULL || syms == NULL) {
        rill_free(m);
        rill_free(syms);
        return RILL_ENOMEM;
    }
    m->params = p;
    m->syms = syms;
    m->n = p.n_symbols;
    rill_rand_seed(&m->rng, p.seed);
    for (int32_t i = 0; i < m->n; i++) {
        ssym_t *s = &syms[i];
        if (i < N_BUILTIN) {
            const builtin_t *b = &k_builtin[i];
            snprintf(s->name, sizeof s->name, "%s", b->name);
            s->units = b->start;
            s->decimals = b->decimals;
            s->k = b->k;
            s->weight = b->weight;
            s->kind = b->kind;
        } else {
            snprintf(s->name, sizeof s->name, "S%03d", (int)i);
            s->units = 2000 + (int64_t)(i * 3701 % 40000); /* 20.00 .. 419.99 */
            s->decimals = 2;
            s->k = 1;
            s->weight = 5;
            s->kind = 0;
        }
        double kb = (double)s->k * p.burst_vol_mult;
        s->k_burst = (int64_t)kb;
        s->lo = s->units / 4 > 1 ? s->units / 4 : 1;
        s->hi = s->units * 4;
        m->total_weight += s->weight;
    }
    double mean = 1e9 / p.rate_hz;
    m->mean_ns = mean;
    m->mean_burst_ns = mean / p.burst_rate_mult;
    double thr = p.burst_prob * 0x1p53;
    m->burst_thr = (uint64_t)thr;
    m->burst_sym = -1;
    m->ts = p.start_ts_ns;
    *out = m;
    return RILL_OK;
}

void rill_market_synth_destroy(rill_market_synth_t **sp) {
    if (sp == NULL || *sp == NULL) {
        return;
    }
    rill_free((*sp)->syms);
    rill_free(*sp);
    *sp = NULL;
}

static int32_t pick_weighted(rill_market_synth_t *m) {
    int64_t r = (int64_t)below(m, (uint64_t)m->total_weight);
    for (int32_t i = 0; i < m->n; i++) {
        r -= m->syms[i].weight;
        if (r < 0) {
            return i;
        }
    }
    return m->n - 1;
}

static int64_t draw_size(rill_market_synth_t *m, int32_t kind) {
    uint64_t r = below(m, 100);
    switch (kind) {
    case 1: /* FX: thousands of units, sometimes a million */
        return r < 90 ? 1000 * (int64_t)(1 + below(m, 100)) : 1000000 * (int64_t)(1 + below(m, 5));
    case 2: /* crypto: whole coins, mostly few */
        return r < 85 ? (int64_t)(1 + below(m, 5)) : (int64_t)(5 + below(m, 96));
    default: /* equity: round lots, odd lots, blocks */
        if (r < 15) {
            return (int64_t)(1 + below(m, 99));
        }
        if (r < 70) {
            return 100 * (int64_t)(1 + below(m, 5));
        }
        if (r < 95) {
            return 100 * (int64_t)(5 + below(m, 16));
        }
        return 100 * (int64_t)(10 + below(m, 191));
    }
}

rill_err_t rill_market_synth_next(rill_market_synth_t *m, rill_tick_t *out) {
    if (m == NULL || out == NULL) {
        return RILL_EINVAL;
    }
    if (m->burst_left == 0 && m->burst_thr > 0 && (next64(m) >> 11) < m->burst_thr) {
        uint64_t len = (uint64_t)m->params.burst_ticks;
        m->burst_left = (int64_t)(len / 2 + below(m, len + 1)); /* mean ~ burst_ticks */
        m->burst_sym = pick_weighted(m);
    }
    bool burst = m->burst_left > 0;
    int32_t i;
    if (burst && below(m, 2) == 0) {
        i = m->burst_sym;
    } else {
        i = pick_weighted(m);
    }
    ssym_t *s = &m->syms[i];

    /* Side leans with the last move (momentum), then the step. */
    uint64_t r = below(m, 10);
    bool buy = s->last_move > 0 ? r < 6 : s->last_move < 0 ? r < 4 : r < 5;
    int64_t k = burst && i == m->burst_sym ? s->k_burst : s->k;
    int64_t step = 0;
    for (int j = 0; j < 4; j++) {
        step += (int64_t)below(m, (uint64_t)(2 * k + 1)) - k;
    }
    int64_t u = s->units + step;
    if (u < s->lo) {
        u = s->lo + (s->lo - u);
    }
    if (u > s->hi) {
        u = s->hi - (u - s->hi);
    }
    u = u < s->lo ? s->lo : u > s->hi ? s->hi : u; /* a step wider than the band */
    s->last_move = u > s->units ? 1 : u < s->units ? -1 : 0;
    s->units = u;

    double e = exp1(m);
    double mean = burst ? m->mean_burst_ns : m->mean_ns;
    double dt = mean * e;
    int64_t dti = dt < 1.0 ? 1 : dt > 9e15 ? INT64_C(9000000000000000) : (int64_t)dt;
    m->ts += dti;
    if (burst) {
        m->burst_left--;
    }

    memset(out, 0, sizeof *out);
    memcpy(out->symbol, s->name, sizeof out->symbol);
    out->ts_ns = m->ts;
    double price = (double)u / k_p10[s->decimals];
    out->price = price;
    out->size = draw_size(m, s->kind);
    out->side = buy ? RILL_SIDE_BUY : RILL_SIDE_SELL;
    return RILL_OK;
}

int64_t rill_market_synth_n_symbols(const rill_market_synth_t *m) {
    return m != NULL ? m->n : RILL_EINVAL;
}

rill_err_t rill_market_synth_symbol(const rill_market_synth_t *m, int64_t i, const char **name,
                                    int32_t *decimals) {
    if (m == NULL) {
        return RILL_EINVAL;
    }
    if (i < 0 || i >= m->n) {
        return RILL_ERANGE;
    }
    if (name != NULL) {
        *name = m->syms[i].name;
    }
    if (decimals != NULL) {
        *decimals = m->syms[i].decimals;
    }
    return RILL_OK;
}
