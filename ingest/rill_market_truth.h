/*
 * rill_market_truth.h - the true answers to the fixed market questions, and the check of a
 * model's answer against them (issue 23, item 1). No inference: it reads the text a session was
 * given (the tick and bar lines of rill_market.h) and knows what that text says.
 *
 * The path: the caller feeds the lines a session acknowledged, each batch with the data version
 * its acknowledgement carried; a question text is classified into a kind (and a symbol) by an
 * exact template table; an answer is scored against the truth at the version the answer saw.
 *
 *   lines + version --rill_market_truth_feed--> truth
 *   "What was the last price of MSFT?" --rill_market_question_parse--> {LAST_PRICE, "MSFT"}
 *   truth, question, version, answer text --rill_market_truth_score--> right / wrong / unscored
 *
 * What the model could see. The truth is computed from the lines, not from the ticks behind
 * them: where rilld's rate governor wrote a bar line, the ticks inside the bar are invisible
 * (their sizes and sides), and the bar counts as one line with its close as the price and its
 * change. The text a session holds at version v is every line fed at a version <= v; with
 * params.hold_tail (rilld's tick ingest: rill_session_append_text without a flush holds back
 * the text after the last space that follows a letter or digit) the last line's final field -
 * a tick line's side, a bar line's tick count - is not yet part of it, so questions whose truth
 * depends on that side are unscored while it is held (unless either side gives the same truth).
 *
 * Question kinds and their truth (S = the question's symbol; "lines of S" = its tick and bar
 * lines at the version, in order; a price is written as the stream printed it):
 *
 *   last_price       the price of the last line of S (a bar: its close)          -> a price
 *   quote            the same: the stream's lines are trades (no bid or ask), so the most recent
 *                    quote of S is its last printed price                         -> a price
 *   moved_last       the symbol of the latest line whose change is not +0.00      -> a symbol
 *   buys_sells       tick lines of S with side B against side S (bars carry no side)
 *                                                              -> buys / sells / equal
 *   above_first      last price of S against its first (a first bar: its open)   -> yes / no
 *   largest_trade    the symbol(s) of the tick line(s) with the largest size (a bar's volume is
 *                    many trades, not one)                                        -> a symbol
 *   moved_most       per symbol the sum of the changes of its lines in the window (the last
 *                    window_ns of stream time, up to the latest line's time); the largest in
 *                    magnitude                                       -> a symbol and its change
 *   above_first_price  above_first and last_price together                 -> yes / no, a price
 *   last_price_side  the last line of S: its price and side (a bar: unscored)  -> a price, B / S
 *   largest_size     largest_trade within the window, with the size          -> a symbol, a size
 *   trend            the sum of the changes of the last last_n lines of S (all of them when
 *                    fewer): up, down or flat, and its last price              -> a choice, a price
 *   sells_count      tick lines with side S among the last last_n lines of S (all when fewer;
 *                    unscored when a bar is among them)                          -> a count
 *   all_last_prices  every symbol in the text with its last price              -> pairs
 *
 * A question has no truth (unscored) while the text holds nothing it asks about: no line of S,
 * no line that moved, no tick line, a sum that is zero for every symbol (moved_most).
 *
 * Scoring an answer. Only its first line counts: leading blanks and line ends are skipped, then
 * the text up to the next '\n' (so an answer that runs on into the next tick line is judged by
 * its first line alone). The line is then read as follows; any rule broken makes it wrong.
 *
 *   - A data line is no answer: a first line that is itself a tick or bar line of the stream's
 *     form ("AAPL 187.34 -0.01 100 B") is wrong for every kind.
 *   - Symbols: a word (a run of [A-Za-z0-9._/-] that starts with a letter, one trailing '.',
 *     '/' or '-' dropped) names a symbol when it equals, byte for byte, a symbol the text holds,
 *     as printed (upper case; the stream prints EURUSD and BTC-USD, so "EUR/USD", "BTCUSD" or
 *     "eurusd" name nothing). A symbol answer must name exactly one symbol (two different ones
 *     are two candidates), one of the true ones (ties: any of them). An answer to a question
 *     about S names no symbol but S.
 *   - Numbers: [+|-]digits[.digits] (digits may be grouped by commas in threes: 1,200), not
 *     inside a word; a '.' not followed by a digit ends the number. Values are compared exactly
 *     as decimals: 187.34 and 187.340 are equal, 187.3 is not 187.34. A price, size or count
 *     answer must hold at least one candidate and no candidate of another value (two different
 *     numbers are two candidates); for prices the candidates are the unsigned numbers (a signed
 *     one, "+0.05", is a change), for sizes and counts every number (a count may also be a word,
 *     zero..ten). moved_most's change: the line's one number (exactly one value), equal to the
 *     signed sum when signed, to its magnitude when unsigned.
 *   - Choices: words are compared lower-case. An either-or question (buys_sells, trend,
 *     last_price_side) answered with a first word "yes" or "no" is wrong. A yes/no question
 *     (above_first, above_first_price) is decided by a first word yes or no; otherwise, for
 *     every kind, by the first choice word in the line, and a line that holds a word that can
 *     turn the reading around (not, n't, never, neither, nor, fewer, less) is wrong. The words:
 *       buys_sells: buy buys buying bought -> buys; sell sells selling sold -> sells;
 *                   equal same even tie tied balanced -> equal
 *       above_first(_price): yes above higher -> above; no -> not above (right for below and
 *                   for equal); below lower -> below; equal same unchanged flat -> equal
 *       trend: up rising higher -> up; down falling lower -> down; flat unchanged -> flat
 *       last_price_side: buy buys bought B -> B; sell sells sold S -> S (a lone B or S word)
 *   - all_last_prices: the line, cut at each symbol it names, must name every symbol of the
 *     text once, each followed (before the next symbol) by its last price as the only unsigned
 *     number; one line is the answer, as for every kind.
 *
 * Thread safety: a truth is one thread at a time; the question table is immutable (any thread).
 * Memory: the truth keeps every line fed (about 72 bytes each, RILL_MEM_INGEST, grown by
 * doubling); scoring allocates nothing.
 */
#ifndef RILL_MARKET_TRUTH_H
#define RILL_MARKET_TRUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_tick.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The question kinds (the table above). RILL_MARKET_Q_NONE: a question outside the template
 * table, never scored. */
typedef enum rill_market_qkind {
    RILL_MARKET_Q_NONE = 0,
    RILL_MARKET_Q_LAST_PRICE,
    RILL_MARKET_Q_QUOTE,
    RILL_MARKET_Q_MOVED_LAST,
    RILL_MARKET_Q_BUYS_SELLS,
    RILL_MARKET_Q_ABOVE_FIRST,
    RILL_MARKET_Q_LARGEST_TRADE,
    RILL_MARKET_Q_MOVED_MOST,
    RILL_MARKET_Q_ABOVE_FIRST_PRICE,
    RILL_MARKET_Q_LAST_PRICE_SIDE,
    RILL_MARKET_Q_LARGEST_SIZE,
    RILL_MARKET_Q_TREND,
    RILL_MARKET_Q_SELLS_COUNT,
    RILL_MARKET_Q_ALL_LAST_PRICES,
    RILL_MARKET_Q_N_KINDS
} rill_market_qkind_t;

/* The kind's name as in the table above ("last_price", ...; "none"; "?" out of range). Static
 * storage. */
const char *rill_market_qkind_name(rill_market_qkind_t kind);

/* A classified question. A plain value. */
typedef struct rill_market_question {
    rill_market_qkind_t kind;
    char symbol[RILL_MARKET_SYMBOL_MAX + 1]; /* S; "" for kinds without one */
    int64_t window_ns;                       /* moved_most, largest_size: stream time; else 0 */
    int32_t last_n;                          /* trend, sells_count: lines; else 0 */
} rill_market_question_t;

/* Classifies question text[0..len) by the exact template table (market_truth.c; the questions
 * of demos/market/market_demo.c and `rill bench stream`): blanks around it are ignored, every
 * other byte must match a template, and a template's symbol slot takes a valid symbol
 * (rill_tick_check_symbol); a template with the slot twice needs the same symbol twice. The
 * question may be followed by one space and its kind's instruction, exactly
 * (rill_market_prompt_instruction: the question as rill_market_prompt_question puts it). On
 * RILL_OK *out is set. RILL_ENOTFOUND: no template matches (*out = {RILL_MARKET_Q_NONE}: the
 * question is unscored). RILL_EINVAL: NULL out, or NULL text with len > 0. Allocates nothing. */
rill_err_t rill_market_question_parse(const char *text, size_t len, rill_market_question_t *out);

typedef struct rill_market_truth rill_market_truth_t;

typedef struct rill_market_truth_params {
    bool hold_tail; /* the last line's final field is not yet seen (see the top); default false */
} rill_market_truth_params_t;

/* Defaults as documented per field. */
rill_market_truth_params_t rill_market_truth_default_params(void);

/* Creates an empty truth. params NULL: the defaults. Caller owns *out; destroy with
 * rill_market_truth_destroy(). Errors: RILL_EINVAL (out NULL), RILL_ENOMEM (*out untouched). */
rill_err_t rill_market_truth_new(const rill_market_truth_params_t *params,
                                 rill_market_truth_t **out);

/* Destroys *tp and sets it to NULL. NULL-safe. */
void rill_market_truth_destroy(rill_market_truth_t **tp);

/* Feeds text[0..len): zero or more whole lines in rill_market_fmt's tick or bar form, each
 * ending in '\n', that the session acknowledged at data version `version` (>= the version of
 * the previous feed: versions never go back; an empty text is allowed and only moves the
 * version). ts_ns: the stream time of these lines (the time of the tick whose arrival wrote
 * them; >= the previous feed's), for questions about a window of time. All or nothing: the
 * first line that is not in the form, a text not ending in '\n', a version or time that goes
 * back, is an error and nothing is taken. Errors: RILL_EFORMAT (the detail names the line, 1-
 * based in this text), RILL_EINVAL (NULL t, NULL text with len > 0, version < 0 or going back,
 * ts_ns going back), RILL_EFULL (a 257th symbol: a truth tells 256 apart), RILL_ENOMEM. */
rill_err_t rill_market_truth_feed(rill_market_truth_t *t, const char *text, size_t len,
                                  int64_t version, int64_t ts_ns);

/* Lines fed so far (negative error for NULL), and the latest version fed (0 before any). */
int64_t rill_market_truth_n_lines(const rill_market_truth_t *t);
int64_t rill_market_truth_version(const rill_market_truth_t *t);

typedef enum rill_market_verdict {
    RILL_MARKET_UNSCORED = 0, /* no truth: a question outside the table, or nothing to know yet */
    RILL_MARKET_WRONG = 1,
    RILL_MARKET_RIGHT = 2,
} rill_market_verdict_t;

/* The true answer to q at data version `version`, written for people into buf[0..cap),
 * NUL-terminated: "402.10", "MSFT", "buys (5 to 3)", "yes (187.40 over 187.10)", "AAPL +0.52",
 * "no, 187.05", "402.10 S", "NVDA 500", "up, 402.10", "3", "AAPL 187.40, MSFT 402.10". Returns
 * its length, or RILL_EAGAIN when it has no truth at that version (buf = ""), RILL_EFULL when cap
 * is too small (cap >= 512 suffices for 8 symbols; buf holds a cut prefix), RILL_EINVAL for
 * NULL arguments. */
int64_t rill_market_truth_expect(const rill_market_truth_t *t, const rill_market_question_t *q,
                                 int64_t version, char *buf, size_t cap);

/* Scores answer[0..len) to q against the truth at data version `version` (the version the
 * answer saw), by the rules at the top, into *out: RILL_MARKET_UNSCORED when q's kind is NONE
 * or it has no truth at that version, else RIGHT or WRONG. Errors: RILL_EINVAL (NULL t, q or
 * out, NULL answer with len > 0). Allocates nothing; t is not changed. */
rill_err_t rill_market_truth_score(const rill_market_truth_t *t, const rill_market_question_t *q,
                                   int64_t version, const char *answer, size_t len,
                                   rill_market_verdict_t *out);

/* Verdicts counted per kind: a plain value (zero it to start). */
typedef struct rill_market_tally {
    int64_t n[RILL_MARKET_Q_N_KINDS];      /* answers */
    int64_t scored[RILL_MARKET_Q_N_KINDS]; /* right or wrong */
    int64_t right[RILL_MARKET_Q_N_KINDS];
} rill_market_tally_t;

/* Counts verdict v of an answer to a question of kind k (kinds out of range are ignored). */
void rill_market_tally_add(rill_market_tally_t *tl, rill_market_qkind_t k, rill_market_verdict_t v);

/* Sums of the tally over every kind. */
int64_t rill_market_tally_n(const rill_market_tally_t *tl);
int64_t rill_market_tally_scored(const rill_market_tally_t *tl);
int64_t rill_market_tally_right(const rill_market_tally_t *tl);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MARKET_TRUTH_H */
