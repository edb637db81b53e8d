/*
 * rill_market.h - market data into text a session can ingest (../shared/DESIGN.md sections 1, 2
 * and 5: "market data (msgpack ticks to compact lines, with a rate governor)").
 *
 * The path, left to right:
 *
 *   msgpack buffer --rill_tick_decode--> rill_tick_t[] --rill_market_gov_push--> text lines
 *   CSV line ------rill_tick_csv_line--/                  (tick lines, or bars when too fast)
 *   rill_market_synth_next (seeded synthetic stream) --/
 *
 * Five objects, one thread at a time each (none is shared; give each thread its own):
 *
 *   rill_tick_decoder_t   msgpack ticks (one map, or an array of maps) -> validated rill_tick_t.
 *   rill_tick_csv_t       CSV lines "symbol,ts,price,size,side" -> validated rill_tick_t.
 *   rill_market_fmt_t     the per-symbol table (precision, last, open, high, low, volume) and the
 *                         one-line rendering of a tick: "AAPL 187.32 +0.05 200 B\n".
 *   rill_market_gov_t     the rate governor: tick lines while the feed is slower than what the
 *                         session can ingest, one bar line per symbol and interval when faster.
 *   rill_market_synth_t   a deterministic synthetic market (benchmarks, demos, tests).
 *
 * A tick (rill_tick_t) and the rules that make it valid (rill_tick_check) are wire/rill_tick.h's,
 * shared with the client, which encodes ticks (rill_tick_encode) without linking this module.
 *
 * Error codes of every input path (msgpack, CSV, a tick handed in directly) are the same:
 *
 *   RILL_EFORMAT  the bytes are not what they must be: not msgpack, truncated, trailing bytes,
 *                 nesting deeper than allowed, a record that is not a map, a key that is not a
 *                 string, a field of the wrong type (a string price, a float size), bad CSV.
 *   RILL_ERANGE   a number or a length outside its range (ts <= 0, price <= 0 or not finite,
 *                 size 0, a 16-byte symbol, a batch larger than max_batch, a buffer larger
 *                 than max_bytes).
 *   RILL_EINVAL   a well-typed value that is not allowed: a symbol with a lower-case or other
 *                 character, a side other than B/S/b/s, a required field missing, a field
 *                 given twice, an unknown key when unknown keys are rejected; also bad
 *                 arguments (NULL pointers, parameters out of range).
 *
 * The detail (rill_last_error, core/rill_err.h) names the record index (or CSV line) and the field:
 * "record 3: field 'price': must be > 0 and finite (got -1)".
 *
 * Memory: every handle allocates what it needs at creation (charged to RILL_MEM_INGEST); decoding,
 * formatting, governing and generating allocate nothing from rill_malloc. The one exception is
 * msgpack-c's zone inside the decoder (libc malloc, see rill_tick_decoder_new).
 */
#ifndef RILL_MARKET_H
#define RILL_MARKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_tick.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_MARKET_DECIMALS_MAX 8   /* most decimals a price is written with */
#define RILL_MARKET_LINE_MAX     256 /* no line written here is longer (the '\n' included) */

/* ---- msgpack ticks ---------------------------------------------------------------------------
 *
 * Wire form: wire/rill_tick.h; a buffer holds either one record (a map) or a batch (an array
 * of records, possibly empty). Keys are case-sensitive. Unknown keys are ignored by default,
 * whatever their value (producers may add "venue", "seq"...), unless reject_unknown is set; a
 * known key given twice is RILL_EINVAL (which one would count?).
 *
 * Before msgpack-c sees a buffer, its structure is checked header by header without decoding a
 * value: every string, binary, extension and container is checked against the bytes that remain
 * (a container of n elements needs at least n bytes, a map 2n), nesting against max_depth, the
 * batch length against max_batch and the caller's capacity, and there must be no trailing byte.
 * So a 5-byte "array of 4 billion elements" is RILL_EFORMAT before anything is allocated.
 */

typedef struct rill_tick_decoder rill_tick_decoder_t;

typedef struct rill_tick_decoder_params {
    size_t max_bytes;    /* largest buffer accepted (RILL_ERANGE beyond); default 1 MiB */
    int32_t max_batch;   /* most records in one array (RILL_ERANGE beyond), 1..1<<24; default
                            4096 */
    int32_t max_depth;   /* deepest nesting, the top-level value being depth 1 (a batch of maps
                            is depth 2; values of unknown keys may nest further), 1..31; default 8 */
    bool strict;         /* true: one bad record fails the whole buffer (no tick out); false
                            (default): bad records are skipped and counted, the others come out */
    bool reject_unknown; /* true: an unknown key is RILL_EINVAL; default false (ignored) */
} rill_tick_decoder_params_t;

/* Defaults as documented per field. */
rill_tick_decoder_params_t rill_tick_decoder_default_params(void);

typedef struct rill_tick_decoder_stats {
    int64_t buffers;          /* calls of rill_tick_decode with a buffer */
    int64_t buffers_rejected; /* buffers that returned an error (no tick came out) */
    int64_t records;          /* records seen in buffers that passed the structure check */
    int64_t ticks;            /* ticks handed out */
    int64_t rejected;         /* records refused (skipped, or failing a strict buffer) */
    int64_t n_eformat;        /* refusals by code: buffers and records together */
    int64_t n_erange;
    int64_t n_einval;
} rill_tick_decoder_stats_t;

/* Creates a decoder. params NULL: the defaults. Allocates the handle (RILL_MEM_INGEST) and
 * msgpack-c's zone, a 64 KiB chunk from libc malloc (msgpack-c has no allocator hook), which is
 * reused for every buffer: batches whose decoded form needs more (about 200 records) take
 * further chunks from libc for the length of one call, at most 24 bytes per buffer byte. Caller
 * owns *out; destroy with rill_tick_decoder_destroy(). Errors: RILL_EINVAL (out NULL, a parameter
 * out of range), RILL_ENOMEM (*out untouched). */
rill_err_t rill_tick_decoder_new(const rill_tick_decoder_params_t *params,
                                 rill_tick_decoder_t **out);

/* Destroys *dp and sets it to NULL. NULL or *dp NULL: no-op. */
void rill_tick_decoder_destroy(rill_tick_decoder_t **dp);

/* Decodes the buffer data[0..len) into out[0..cap), in record order. Returns the number of ticks
 * written (>= 0), or a negative error (out[0..cap) may then hold partial ticks: ignore them;
 * the counters are the only other thing that changes). Lenient mode: records that fail
 * validation are skipped and counted, the call returns the others and
 * rill_tick_decoder_last_reject describes the first one skipped. Strict mode: the first bad record
 * fails the call. Errors: RILL_EFORMAT, RILL_ERANGE, RILL_EINVAL as at the top of this file (the
 * buffer, or in strict mode a record); RILL_EFULL when the batch has more records than cap (nothing
 * decoded: retry with more room); RILL_EINVAL for NULL arguments (data may be NULL when len is 0,
 * which is RILL_EFORMAT: no value); RILL_ENOMEM when msgpack-c's zone cannot grow. Does not block.
 * The decoder keeps no reference to data or out. */
int64_t rill_tick_decode(rill_tick_decoder_t *d, const void *data, size_t len, rill_tick_t *out,
                         int64_t cap);

/* Why the first record the last successful call skipped was rejected (lenient mode), in the
 * form of the messages above; "" when it skipped none, and after a call that failed (its
 * detail is rill_last_error's). Borrowed; valid until the next call on d. Never NULL. */
const char *rill_tick_decoder_last_reject(const rill_tick_decoder_t *d);

/* Counters since creation (zeros for NULL). */
rill_tick_decoder_stats_t rill_tick_decoder_stats(const rill_tick_decoder_t *d);

/* The encoder of this form, rill_tick_encode, is wire/rill_tick.h's. */

/* ---- CSV ticks -------------------------------------------------------------------------------
 *
 * Lines of a file such as
 *
 *   symbol,ts,price,size,side
 *   AAPL,1704205800000000000,187.32,200,B
 *
 * fed one line at a time (the trailing "\n" or "\r\n" may be included). Blank lines and lines
 * whose first non-blank byte is '#' hold no tick, anywhere. The first other line is the header:
 * comma-separated column names, any order, symbol/ts/price/size required, side optional, other
 * names ignored (their cells too), none twice. Every later line must have the header's number of
 * cells; spaces and tabs around a cell are ignored; quotes are not supported (RILL_EFORMAT).
 * Numbers: ts and size are decimal integers ("-" allowed, then refused by range); price is
 * [-]digits[.digits] with at most 18 significant digits and no exponent, converted exactly as
 * mantissa / 10^decimals with one rounding (independent of the C locale). An empty side cell is
 * RILL_SIDE_UNKNOWN. Validation and codes as for msgpack.
 */

typedef struct rill_tick_csv rill_tick_csv_t;

typedef struct rill_tick_csv_stats {
    int64_t lines;    /* lines fed */
    int64_t ticks;    /* lines that gave a tick */
    int64_t rejected; /* lines refused (the header included, when it was bad) */
} rill_tick_csv_stats_t;

/* Creates a CSV reader that expects its header first. Caller owns *out; destroy with
 * rill_tick_csv_destroy(). Errors: RILL_EINVAL (out NULL), RILL_ENOMEM (*out untouched). */
rill_err_t rill_tick_csv_new(rill_tick_csv_t **out);

/* Destroys *cp and sets it to NULL. NULL-safe. */
void rill_tick_csv_destroy(rill_tick_csv_t **cp);

/* Reads one line line[0..len) (it need not be NUL-terminated and must not hold a '\n' other
 * than a last one). Returns RILL_OK with *out set to its tick; RILL_EAGAIN for a line that holds
 * none (blank, comment, the header); or an error with *out untouched, whose message names the
 * line number (1-based, counting every line fed) and the column: RILL_EFORMAT (a missing or bad
 * header, a cell count other than the header's, bad number syntax, a quote, an embedded '\n' or
 * NUL), RILL_ERANGE, RILL_EINVAL as for msgpack. A bad header leaves the reader waiting for a
 * header. Allocates nothing. */
rill_err_t rill_tick_csv_line(rill_tick_csv_t *c, const char *line, size_t len, rill_tick_t *out);

/* Counters since creation (zeros for NULL). */
rill_tick_csv_stats_t rill_tick_csv_stats(const rill_tick_csv_t *c);

/* ---- formatting and the symbol table ---------------------------------------------------------
 *
 * Tick line:  "<symbol> <price> <change> <size> <side>\n"   e.g. "AAPL 187.32 +0.05 200 B\n"
 * Bar line:   "<symbol> bar <open> <high> <low> <close> <change> vol <volume> n <ticks>\n"
 *             e.g. "AAPL bar 187.10 187.40 187.05 187.32 +0.22 vol 5400 n 37\n"
 *
 * Prices are written with the symbol's number of decimals d (0..8): set with
 * rill_market_fmt_set_decimals, else params.decimals when >= 0, else fixed at the symbol's first
 * price as the fewest decimals in 2..8 that write it exactly, to a relative 1e-9 (187.32 -> 2,
 * 1.08423 -> 5, 187.3 -> 2, 1/3 -> 8). A price is first rounded to d decimals (half away from
 * zero), and the change is the difference of rounded prices, so it always has a sign ("+0.00" for
 * none) and adds up: the change of a tick is its price minus the price of the previous tick of the
 * symbol (0 for the first); the change of a bar is its close minus the symbol's last price before
 * the bar's first tick (its open when there was none). Side is B, S or ?. Numbers are written with
 * integer arithmetic, so the text is the same on every machine and in every C locale.
 *
 * The table holds at most max_symbols symbols (they are never removed); a tick of one more
 * symbol is RILL_EFULL and changes nothing. Per symbol it keeps: decimals, last price, first
 * price (open), high, low, volume and tick count since the symbol was first seen.
 */

typedef struct rill_market_fmt rill_market_fmt_t;

typedef struct rill_market_fmt_params {
    int32_t max_symbols; /* 1..65536; default 256 */
    int32_t decimals;    /* decimals of every symbol not set explicitly, 0..8; -1 (default):
                            from the symbol's first price, as above */
} rill_market_fmt_params_t;

/* Defaults as documented per field. */
rill_market_fmt_params_t rill_market_fmt_default_params(void);

/* What the table knows of one symbol. A plain value (copied out). */
typedef struct rill_market_symbol {
    char symbol[RILL_MARKET_SYMBOL_MAX + 1];
    int32_t decimals;             /* -1 while automatic and no tick seen yet */
    int64_t n_ticks;              /* 0: only its decimals were set */
    double last, open, high, low; /* 0 while n_ticks == 0 */
    int64_t volume;               /* sum of sizes, saturating at INT64_MAX */
} rill_market_symbol_t;

/* Creates a formatter with an empty table (allocated whole here, RILL_MEM_INGEST). params NULL:
 * the defaults. Caller owns *out; destroy with rill_market_fmt_destroy(). Errors: RILL_EINVAL,
 * RILL_ENOMEM (*out untouched). */
rill_err_t rill_market_fmt_new(const rill_market_fmt_params_t *params, rill_market_fmt_t **out);

/* Destroys *fp and sets it to NULL. NULL-safe. */
void rill_market_fmt_destroy(rill_market_fmt_t **fp);

/* Fixes the decimals (0..8) of symbol (NUL-terminated, a valid symbol), adding it to the table
 * when new. Errors: RILL_EINVAL/RILL_ERANGE (a bad symbol or decimals), RILL_EFULL (table full);
 * on error nothing changes. */
rill_err_t rill_market_fmt_set_decimals(rill_market_fmt_t *f, const char *symbol, int32_t decimals);

/* Renders t as one tick line into buf[0..cap), NUL-terminated, and records t in the table.
 * Returns the length of the line (without the NUL; '\n' included), or an error with the table
 * and buf unchanged: the codes of rill_tick_check for an invalid tick, RILL_EFULL for a new
 * symbol in a full table or cap too small (cap >= RILL_MARKET_LINE_MAX always suffices),
 * RILL_EINVAL for NULL arguments. */
int64_t rill_market_fmt_tick(rill_market_fmt_t *f, const rill_tick_t *t, char *buf, size_t cap);

/* Copies the table's entry for symbol into *out. RILL_ENOTFOUND when absent, RILL_EINVAL for
 * NULL arguments. */
rill_err_t rill_market_fmt_symbol(const rill_market_fmt_t *f, const char *symbol,
                                  rill_market_symbol_t *out);

/* Number of symbols in the table (negative error for NULL). Entries are numbered 0..n-1 in the
 * order symbols were first seen; rill_market_fmt_symbol_at copies entry i (RILL_ERANGE when out
 * of range). */
int64_t rill_market_fmt_n_symbols(const rill_market_fmt_t *f);
rill_err_t rill_market_fmt_symbol_at(const rill_market_fmt_t *f, int64_t i,
                                     rill_market_symbol_t *out);

/* ---- the rate governor -----------------------------------------------------------------------
 *
 * A session can ingest about target_lines_per_s lines per second; a market can burst far above
 * that. Time is cut into intervals [k*I, (k+1)*I) of the ticks' own timestamps (I =
 * interval_ns; wall clock never enters, so a tick sequence always gives the same text), and each
 * interval has a budget of B = max(1, floor(target_lines_per_s * I / 1e9)) lines.
 *
 *   - An interval starts in pass-through mode, unless the interval right before it received
 *     more than B ticks (then it starts aggregating at once: a sustained burst does not emit B
 *     tick lines at the start of every interval).
 *   - In pass-through mode each tick becomes a tick line, as long as fewer than B tick lines
 *     were written in the interval. The tick that finds the budget spent switches the interval
 *     to aggregating.
 *   - Aggregating, each tick joins its symbol's bar for the interval (open, high, low, close,
 *     volume, count) and nothing is written; when the interval closes (a tick of a later
 *     interval arrives, rill_market_gov_advance passes its end, or rill_market_gov_flush), one
 *     bar line per symbol is written, in the order of the symbols' first tick in the bars.
 *
 * So an interval writes at most B tick lines plus one bar line per symbol that traded in it;
 * rates are met when B is at least the number of symbols that trade in a busy interval. A tick
 * older than the current interval (out of order) is counted as late and taken into the current
 * interval. Every valid tick updates the symbol table, aggregated or not.
 */

typedef struct rill_market_gov rill_market_gov_t;

typedef struct rill_market_gov_params {
    double target_lines_per_s;    /* what the session can ingest, > 0 (and finite); default 20 */
    int64_t interval_ns;          /* I, 1 ms .. 1 hour; default 1 s */
    rill_market_fmt_params_t fmt; /* the governor's own formatter */
} rill_market_gov_params_t;

/* Defaults as documented per field. */
rill_market_gov_params_t rill_market_gov_default_params(void);

typedef struct rill_market_gov_stats {
    int64_t ticks_in;             /* ticks pushed, valid or not */
    int64_t lines_out;            /* tick lines + bar lines written */
    int64_t tick_lines;           /* ticks written one line each */
    int64_t bars_out;             /* bar lines */
    int64_t aggregated;           /* ticks that went into bars */
    int64_t rejected;             /* ticks refused (invalid, or a new symbol in a full table) */
    int64_t late;                 /* ticks older than the current interval */
    int64_t intervals_aggregated; /* intervals that wrote bars */
} rill_market_gov_stats_t;

/* Creates a governor with its formatter and an output buffer of (max_symbols + 1) *
 * RILL_MARKET_LINE_MAX bytes (RILL_MEM_INGEST). params NULL: the defaults. Caller owns *out;
 * destroy with rill_market_gov_destroy(). Errors: RILL_EINVAL, RILL_ENOMEM (*out untouched). */
rill_err_t rill_market_gov_new(const rill_market_gov_params_t *params, rill_market_gov_t **out);

/* Destroys *gp (and its formatter) and sets it to NULL. NULL-safe. */
void rill_market_gov_destroy(rill_market_gov_t **gp);

/* The governor's formatter, e.g. to set decimals. Borrowed; lives as long as g. Rendering ticks
 * on it directly would enter them in the table without the governor seeing them. */
rill_market_fmt_t *rill_market_gov_fmt(rill_market_gov_t *g);

/* Pushes one tick. Sets *text to the text it produced, zero or more whole lines (bars of the
 * interval it closed, then its own tick line), NUL-terminated, and returns its length.
 * Borrowed: valid until the next call on g. On error (*text = "") nothing changes but the
 * counters: the codes of rill_tick_check, RILL_EFULL (new symbol, full table), RILL_EINVAL
 * (NULL arguments). Allocates nothing. */
int64_t rill_market_gov_push(rill_market_gov_t *g, const rill_tick_t *t, const char **text);

/* Tells the governor that time ts_ns has been reached with no tick (e.g. the feed's clock, or
 * a wall clock mapped to it): when ts_ns is at or past the current interval's end, that
 * interval closes and its bars are written, and the next interval will start in pass-through
 * mode unless it is the one right after. Returns the length of *text (as for push). */
int64_t rill_market_gov_advance(rill_market_gov_t *g, int64_t ts_ns, const char **text);

/* Writes the bars pending in the current interval (end of the stream, or an idle timer); the
 * interval stays current, and its later ticks start new bars. Returns the length of *text. */
int64_t rill_market_gov_flush(rill_market_gov_t *g, const char **text);

/* Counters since creation (zeros for NULL). */
rill_market_gov_stats_t rill_market_gov_stats(const rill_market_gov_t *g);

/* ---- synthetic market ------------------------------------------------------------------------
 *
 * A seeded, deterministic stream: the same parameters give byte-identical ticks on every
 * machine, compiler and C library (integer PRNG: core's xoshiro256** seeded by splitmix64,
 * rill_rand.h; prices are integers of a tick size; inter-arrival times are exponential, drawn
 * with von Neumann's comparison method, which needs uniforms and no logarithm; no libm function
 * is called).
 *
 * Symbols, in this order: AAPL, MSFT, NVDA, EURUSD, BTC-USD, AMZN, TSLA, GBPUSD, ETH-USD, SPY,
 * GOOGL, META, then S012, S013, ... Each has a start price, tick size (decimals), volatility,
 * trading weight and lot size. Prices follow a random walk in ticks (Irwin-Hall steps, kept
 * above a floor); sizes are mostly round lots with odd lots and blocks; the side leans with the
 * last move. Quiet arrivals are a Poisson process of rate_hz over all symbols. With probability
 * burst_prob per tick a burst starts on one symbol: for about burst_ticks ticks the rate is
 * burst_rate_mult times higher, that symbol takes half the ticks and its steps are
 * burst_vol_mult times larger.
 */

typedef struct rill_market_synth rill_market_synth_t;

#define RILL_MARKET_SYNTH_MAX_SYMBOLS 256

typedef struct rill_market_synth_params {
    uint64_t seed;          /* any value; default 1 */
    int32_t n_symbols;      /* 1..RILL_MARKET_SYNTH_MAX_SYMBOLS; default 5 */
    double rate_hz;         /* quiet mean ticks per second over all symbols, 1e-3..1e9; default
                               100 */
    double burst_prob;      /* per-tick probability that a burst starts, 0..1; default 0.001 */
    int32_t burst_ticks;    /* mean ticks in a burst, 1..1e6; default 200 */
    double burst_rate_mult; /* rate factor in a burst, 1..1e4; default 20 */
    double burst_vol_mult;  /* volatility factor in a burst, 1..100; default 4 */
    int64_t start_ts_ns;    /* > 0; default 1704205800000000000 (2024-01-02 14:30 UTC) */
} rill_market_synth_params_t;

/* Defaults as documented per field. */
rill_market_synth_params_t rill_market_synth_default_params(void);

/* Creates a stream (RILL_MEM_INGEST). params NULL: the defaults. Caller owns *out; destroy with
 * rill_market_synth_destroy(). Errors: RILL_EINVAL (a parameter out of range), RILL_ENOMEM. */
rill_err_t rill_market_synth_new(const rill_market_synth_params_t *params,
                                 rill_market_synth_t **out);

/* Destroys *sp and sets it to NULL. NULL-safe. */
void rill_market_synth_destroy(rill_market_synth_t **sp);

/* Writes the next tick into *out (valid per rill_tick_check; ts_ns strictly increasing).
 * Errors: RILL_EINVAL (NULL). Allocates nothing. */
rill_err_t rill_market_synth_next(rill_market_synth_t *s, rill_tick_t *out);

/* Number of symbols (negative error for NULL), and symbol i's name (static storage inside s,
 * borrowed for s's life) and decimals, e.g. to rill_market_fmt_set_decimals. RILL_ERANGE when
 * i is out of range. */
int64_t rill_market_synth_n_symbols(const rill_market_synth_t *s);
rill_err_t rill_market_synth_symbol(const rill_market_synth_t *s, int64_t i, const char **name,
                                    int32_t *decimals);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MARKET_H */
