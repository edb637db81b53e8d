/*
 * market_internal.h - what the market files of ingest/ share: the field checks that make the
 * msgpack decoder, the CSV reader and rill_tick_check() agree on every rule and every message.
 *
 * Each check returns RILL_OK or the error code of rill_market.h's table, and on error writes
 * "field 'NAME': reason (got VALUE)" into why[0..cap) (when cap > 0).
 */
#ifndef RILL_MARKET_INTERNAL_H
#define RILL_MARKET_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_market.h"

/* Symbol bytes s[0..len): RILL_ERANGE for a length outside 1..15, RILL_EINVAL for a byte outside
 * [A-Z0-9._/-]. */
rill_err_t rill__tick_check_symbol(const char *s, size_t len, char *why, size_t cap);

/* ts > 0 (RILL_ERANGE). */
rill_err_t rill__tick_check_ts(int64_t ts, char *why, size_t cap);

/* 0 < price <= RILL_MARKET_PRICE_MAX and finite (RILL_ERANGE). */
rill_err_t rill__tick_check_price(double price, char *why, size_t cap);

/* 1 <= size <= RILL_MARKET_SIZE_MAX (RILL_ERANGE). */
rill_err_t rill__tick_check_size(int64_t size, char *why, size_t cap);

/* Side text s[0..len): "B"/"b", "S"/"s", "" (unknown); anything else RILL_EINVAL. */
rill_err_t rill__tick_parse_side(const char *s, size_t len, rill_side_t *out, char *why,
                                 size_t cap);

/* Writes the bytes s[0..len) into buf[0..cap) for a message: printable ASCII as is, other bytes
 * as \xHH, cut with "..." past 24 bytes. Always NUL-terminates when cap > 0. */
void rill__tick_quote(const char *s, size_t len, char *buf, size_t cap);

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
