/*
 * market_internal.h - what the market files of ingest/ share: the symbol table of the formatter,
 * which the governor also reads. The field checks that make the msgpack decoder, the CSV reader
 * and rill_tick_check() agree on every rule and every message are wire/rill_tick.h's.
 */
#ifndef RILL_MARKET_INTERNAL_H
#define RILL_MARKET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_market.h"

/* ---- the symbol table (market_fmt.c), shared with the governor (market_gov.c) ---- */

/* One symbol: what rill_market_symbol_t shows, plus the governor's bar of the current interval. */
typedef struct rill__sym {
    rill_market_symbol_t pub;
    /* The bar (bar_n > 0: open in the current interval). bar_ref: the symbol's last price
     * before the bar's first tick, or that tick's price when the symbol had none. */
    int64_t bar_n, bar_vol;
    double bar_open, bar_high, bar_low, bar_close, bar_ref;
} rill__sym_t;

struct rill_market_fmt {
    rill_market_fmt_params_t params;
    rill__sym_t *syms; /* (max_symbols), entries [0, n) in use */
    int32_t n;
    int32_t *slots; /* open-addressing hash of names: index into syms or -1; (mask + 1) */
    uint32_t mask;
    char msg[320];
};

/* Index of symbol s[0..len) in f's table, or -1 when absent. */
int32_t rill__fmt_find(const rill_market_fmt_t *f, const char *s, size_t len);

/* Adds symbol s[0..len) (valid, absent, and the table not full: the caller checked). */
int32_t rill__fmt_add(rill_market_fmt_t *f, const char *s, size_t len);

/* Records the valid tick t in entry e (fixing automatic decimals at its first price). When buf
 * != NULL, first writes the tick line, NUL-terminated, into buf (RILL_MARKET_LINE_MAX bytes) and
 * returns its length; returns 0 otherwise. */
size_t rill__fmt_apply(rill_market_fmt_t *f, rill__sym_t *e, const rill_tick_t *t, char *buf);

/* Writes e's bar line, NUL-terminated, into buf (RILL_MARKET_LINE_MAX bytes); returns its
 * length. */
size_t rill__fmt_bar_line(const rill__sym_t *e, char *buf);

#endif /* RILL_MARKET_INTERNAL_H */
