/*
 * rill_tick.h - one trade (rill_tick_t), the rules that make it valid, and its msgpack wire form
 * (the records of `ingest.ticks`, docs/protocol.md).
 *
 * The record lives here, below both the client (which encodes ticks for rilld) and ingest/
 * (which decodes them, reads CSV, renders and governs them: rill_market.h), so that a client
 * needs neither the other's code nor ingest's. Every path that makes a tick out of outside
 * bytes (msgpack, CSV, a tick handed in directly) checks it with the functions below, so a tick
 * is valid or not, and refused with the same code and message, whatever path it took.
 *
 * A tick is valid when (rill_tick_check):
 *
 *   symbol  1..15 bytes of [A-Z0-9._/-] (upper case), NUL-terminated in the struct
 *   ts_ns   nanoseconds since the Unix epoch, > 0
 *   price   finite, 0 < price <= RILL_MARKET_PRICE_MAX (1e10)
 *   size    1 <= size <= RILL_MARKET_SIZE_MAX (1e12), an integer (shares, contracts, units)
 *   side    RILL_SIDE_BUY, RILL_SIDE_SELL or RILL_SIDE_UNKNOWN (the aggressor, when known)
 *
 * Ranges are finite on purpose: prices and sizes must fit the integer arithmetic of ingest's
 * formatter (price * 10^8 < 2^63), and volumes must take many ticks before saturating.
 *
 * Codes of every check: RILL_ERANGE (a number or a length outside its range), RILL_EINVAL (a
 * well-typed value that is not allowed: a lower-case symbol, a side other than B/S/b/s; also
 * NULL arguments). Messages read "field 'NAME': reason (got VALUE)".
 *
 * Wire form: a record is a msgpack map with string keys
 *
 *   "symbol": str     "ts": int     "price": float32/float64/int     "size": int (no float)
 *   "side": "B"|"S"|"b"|"s"; "", nil or an absent side is RILL_SIDE_UNKNOWN
 *
 * and a buffer holds either one record (a map) or a batch (an array of records). Readers
 * (rill_tick_decode in ingest/rill_market.h) ignore unknown keys unless told otherwise.
 *
 * Thread safety: everything here is pure (thread-safe); nothing allocates.
 */
#ifndef RILL_TICK_H
#define RILL_TICK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_MARKET_SYMBOL_MAX 15                     /* bytes of a symbol, without the NUL */
#define RILL_MARKET_PRICE_MAX  1e10                   /* largest price accepted */
#define RILL_MARKET_SIZE_MAX   INT64_C(1000000000000) /* largest size accepted (1e12) */

/* The aggressor side of a trade. */
typedef enum rill_side {
    RILL_SIDE_UNKNOWN = 0, /* written as '?' */
    RILL_SIDE_BUY = 1,     /* 'B' */
    RILL_SIDE_SELL = 2     /* 'S' */
} rill_side_t;

/* One trade. A plain value; see the top of this file for what makes it valid. */
typedef struct rill_tick {
    char symbol[RILL_MARKET_SYMBOL_MAX + 1]; /* NUL-terminated */
    int64_t ts_ns;                           /* ns since the Unix epoch */
    double price;
    int64_t size;
    rill_side_t side;
} rill_tick_t;

/* Checks every field of t as described at the top of this file. Returns RILL_OK, or the code of
 * the first bad field (RILL_EINVAL also for t == NULL), with rill_last_error(err) saying which
 * ("field 'size': must be 1..1000000000000 (got 0)"). */
rill_err_t rill_tick_check(const rill_tick_t *t);

/* ---- the field rules, one by one (for readers that build a tick field by field) ----------------
 *
 * Each returns RILL_OK or its code, with its message in rill_last_error(err). */

/* Symbol bytes s[0..len) (not NUL-terminated): RILL_ERANGE for a length outside 1..15,
 * RILL_EINVAL for a byte outside [A-Z0-9._/-]. The message quotes the bytes (rill_tick_quote). */
rill_err_t rill_tick_check_symbol(const char *s, size_t len);

/* ts > 0 (RILL_ERANGE). */
rill_err_t rill_tick_check_ts(int64_t ts);

/* 0 < price <= RILL_MARKET_PRICE_MAX and finite (RILL_ERANGE; NaN too). */
rill_err_t rill_tick_check_price(double price);

/* 1 <= size <= RILL_MARKET_SIZE_MAX (RILL_ERANGE). */
rill_err_t rill_tick_check_size(int64_t size);

/* Side text s[0..len): "B"/"b" buy, "S"/"s" sell, "" unknown, into *out; anything else
 * RILL_EINVAL (*out untouched). */
rill_err_t rill_tick_parse_side(const char *s, size_t len, rill_side_t *out);

/* Writes the bytes s[0..len) into buf[0..cap) for a message: printable ASCII but \ and ' as
 * is, every other byte as \xHH, cut with "..." past 24 bytes (so the result is ASCII whatever s
 * holds). Always NUL-terminates when cap > 0; buf NULL or cap 0: no-op. */
void rill_tick_quote(const char *s, size_t len, char *buf, size_t cap);

/* ---- encoding -------------------------------------------------------------------------------- */

/* Encodes ticks[0..n) as msgpack into buf[0..cap): a batch (array of maps) when as_batch, else
 * the one map of ticks[0] (n must be 1). Keys in the order symbol, ts, price (float64), size,
 * side ("B"/"S"; absent when unknown). Returns the bytes written, or RILL_EFULL when cap is too
 * small (buf contents then undefined), RILL_EINVAL for bad arguments or an invalid tick (checked
 * with rill_tick_check). Allocates nothing. For producers (the client), tests and benchmarks. */
int64_t rill_tick_encode(const rill_tick_t *ticks, int64_t n, bool as_batch, void *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* RILL_TICK_H */
