/*
 * rill_market_prompt.h - how the fixed market questions are put to an instruct model, and where
 * its answer ends (issue 23, item 2). The other half of rill_market_truth.h: that header knows
 * the true answer and reads an answer's first line; this one asks so that the first line is the
 * answer.
 *
 * Three parts, chosen by measurement (docs/market_prompts.md holds the tuning log: what was
 * tried on seeds 1-100 and how right each was):
 *
 *   the system prompt   what the feed's lines are (the tick line of rill_market.h, field by
 *                       field) and, with the rules, how every answer looks: one line, the value
 *                       only. A session's first tokens: paid once, kept as attention sinks.
 *   the instruction     one sentence per question kind that fixes the answer's form (a price, a
 *                       symbol, yes or no, buys/sells/equal, ...), written after the question in
 *                       its chat turn: paid by every question (its tokens are part of the time
 *                       to the first answer token).
 *   the stop rule       an answer ends at the end of its first non-blank line: the decoder stops
 *                       after the token that writes that '\n' (rill_sched_ask_t.stop_at_newline),
 *                       and rill_market_answer_line() cuts a text there, as the truth's scorer
 *                       reads it.
 *
 * Where the answer rules go is a choice (rill_market_instruct_t); every caller of this header
 * (the demo, `rill bench stream`) passes one, and RILL_MARKET_INSTRUCT_DEFAULT is the measured
 * best. A question with its instruction is still classified by rill_market_question_parse(): the
 * template table accepts a question followed by one space and its kind's instruction, exactly.
 *
 * Thread safety: everything here is immutable or pure (any thread). Memory: nothing allocates;
 * returned strings are static.
 */
#ifndef RILL_MARKET_PROMPT_H
#define RILL_MARKET_PROMPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"
#include "rill_market_truth.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the answer rules are given. */
typedef enum rill_market_instruct {
    RILL_MARKET_INSTRUCT_NONE = 0,     /* the feed's description only; the question as asked */
    RILL_MARKET_INSTRUCT_SYSTEM = 1,   /* the rules for every kind in the system prompt */
    RILL_MARKET_INSTRUCT_QUESTION = 2, /* the kind's instruction after each question */
    RILL_MARKET_INSTRUCT_BOTH = 3,     /* both */
    RILL_MARKET_INSTRUCT_N = 4
} rill_market_instruct_t;

/* The measured best (docs/market_prompts.md). */
#define RILL_MARKET_INSTRUCT_DEFAULT RILL_MARKET_INSTRUCT_SYSTEM

/* "none", "system", "question", "both" ("?" out of range). Static storage. */
const char *rill_market_instruct_name(rill_market_instruct_t where);

/* Parses a name as written by rill_market_instruct_name (for command-line options). False, and
 * *out unchanged, for an unknown name or NULL. */
bool rill_market_instruct_from_name(const char *name, rill_market_instruct_t *out);

/* The system prompt's text for `where` (plain text, no chat markers, ending in '\n'): the
 * feed's description, and with SYSTEM or BOTH the answer rules. Static storage; "" out of
 * range. */
const char *rill_market_prompt_system(rill_market_instruct_t where);

/* The answer-form instruction of kind k: one sentence ("Reply with the price only."), without
 * a leading space; "" for RILL_MARKET_Q_NONE and out of range. Static storage. */
const char *rill_market_prompt_instruction(rill_market_qkind_t k);

/* Writes question text[0..len) as it is put to the model for `where` into buf[0..cap),
 * NUL-terminated: with QUESTION or BOTH, and a question that rill_market_question_parse()
 * classifies, the question, one space and its kind's instruction; otherwise the question
 * unchanged (a question outside the table gets no instruction: its form is not known). Returns
 * the length (without the NUL). Errors: RILL_EINVAL (NULL buf, NULL text with len > 0, `where`
 * out of range), RILL_EFULL (cap too small; buf then holds ""). Allocates nothing. */
int64_t rill_market_prompt_question(const char *text, size_t len, rill_market_instruct_t where,
                                    char *buf, size_t cap);

/* The stop rule on a decoded answer a[0..n): the answer is its first line. Sets *start to the
 * offset of the first byte that is not a space, tab, '\r' or '\n' (n when none) and returns the
 * length from there up to the next '\n' or the end, trailing spaces, tabs and '\r' dropped.
 * a may be NULL when n is 0. Pure. */
size_t rill_market_answer_line(const char *a, size_t n, size_t *start);

/* True when the text a[0..n) decoded so far holds a complete first line: a '\n' after a byte
 * that is not blank (the point where the stop rule ends decoding). Pure. */
bool rill_market_answer_done(const char *a, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MARKET_PROMPT_H */
