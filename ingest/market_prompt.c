/*
 * market_prompt.c - the market questions' prompts and the stop rule (rill_market_prompt.h says
 * what each part is for; docs/market_prompts.md says why these words).
 *
 * The texts are constants: a prompt that changed with the data would be an aggregate computed
 * outside the model, and the check (rill_market_truth.h) would then be judging this file.
 * The instructions name the answer's form, never a value: an example value ("like 187.32")
 * is what a small model copies.
 */
#include <string.h>

#include "rill_market_prompt.h"

static const char *const INSTRUCT_NAMES[RILL_MARKET_INSTRUCT_N] = { "none", "system", "question",
                                                                    "both" };

/* The feed, field by field, as rill_market.h writes a tick line (and a bar line). */
#define FEED                                                                                  \
    "You watch a live market data feed. Each line of the feed is one trade: the symbol, the " \
    "price, the change from that symbol's previous trade, the size, and the side (B = buy, "  \
    "S = sell).\n"

#define RULES                                                                              \
    "Answer each question with one short line that holds only the answer, taken from the " \
    "feed: a price as the feed prints it, a symbol as the feed prints it, or one word.\n"

static const char *const SYSTEM[RILL_MARKET_INSTRUCT_N] = { FEED, FEED RULES, FEED, FEED RULES };

static const char *const INSTRUCTIONS[RILL_MARKET_Q_N_KINDS] = {
    [RILL_MARKET_Q_NONE] = "",
    [RILL_MARKET_Q_LAST_PRICE] = "Reply with the price only.",
    [RILL_MARKET_Q_QUOTE] = "Reply with the price only.",
    [RILL_MARKET_Q_MOVED_LAST] = "Reply with the symbol only.",
    [RILL_MARKET_Q_BUYS_SELLS] = "Reply with one word: buys, sells or equal.",
    [RILL_MARKET_Q_ABOVE_FIRST] = "Reply with one word: yes or no.",
    [RILL_MARKET_Q_LARGEST_TRADE] = "Reply with the symbol only.",
    [RILL_MARKET_Q_MOVED_MOST] = "Reply with the symbol and the change only.",
    [RILL_MARKET_Q_ABOVE_FIRST_PRICE] = "Reply with yes or no, then the price.",
    [RILL_MARKET_Q_LAST_PRICE_SIDE] = "Reply with the price, then buy or sell.",
    [RILL_MARKET_Q_LARGEST_SIZE] = "Reply with the symbol and the size only.",
    [RILL_MARKET_Q_TREND] = "Reply with up, down or flat, then the price.",
    [RILL_MARKET_Q_SELLS_COUNT] = "Reply with the number only.",
    [RILL_MARKET_Q_ALL_LAST_PRICES] = "Reply on one line with each symbol and its price.",
};

const char *rill_market_instruct_name(rill_market_instruct_t where) {
    return (int)where >= 0 && where < RILL_MARKET_INSTRUCT_N ? INSTRUCT_NAMES[where] : "?";
}

bool rill_market_instruct_from_name(const char *name, rill_market_instruct_t *out) {
    if (name == NULL || out == NULL) {
        return false;
    }
    for (int i = 0; i < RILL_MARKET_INSTRUCT_N; i++) {
        if (strcmp(name, INSTRUCT_NAMES[i]) == 0) {
            *out = (rill_market_instruct_t)i;
            return true;
        }
    }
    return false;
}

const char *rill_market_prompt_system(rill_market_instruct_t where) {
    return (int)where >= 0 && where < RILL_MARKET_INSTRUCT_N ? SYSTEM[where] : "";
}

const char *rill_market_prompt_instruction(rill_market_qkind_t k) {
    return (int)k >= 0 && k < RILL_MARKET_Q_N_KINDS ? INSTRUCTIONS[k] : "";
}

int64_t rill_market_prompt_question(const char *text, size_t len, rill_market_instruct_t where,
                                    char *buf, size_t cap) {
    if (buf == NULL || (text == NULL && len > 0) || (int)where < 0 ||
        where >= RILL_MARKET_INSTRUCT_N) {
        return RILL_EINVAL;
    }
    const char *instr = "";
    rill_market_question_t q;
    if ((where == RILL_MARKET_INSTRUCT_QUESTION || where == RILL_MARKET_INSTRUCT_BOTH) &&
        rill_market_question_parse(text, len, &q) == RILL_OK) {
        instr = rill_market_prompt_instruction(q.kind);
        /* a question that already carries its instruction keeps one */
        size_t il = strlen(instr);
        if (len > il && memcmp(text + len - il, instr, il) == 0) {
            instr = "";
        }
    }
    size_t il = strlen(instr), need = len + (il > 0 ? 1 + il : 0);
    if (need + 1 > cap) {
        if (cap > 0) {
            buf[0] = '\0';
        }
        return RILL_EFULL;
    }
    if (len > 0) {
        memcpy(buf, text, len);
    }
    if (il > 0) {
        buf[len] = ' ';
        memcpy(buf + len + 1, instr, il);
    }
    buf[need] = '\0';
    return (int64_t)need;
}

static bool blank(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

size_t rill_market_answer_line(const char *a, size_t n, size_t *start) {
    size_t i = 0;
    while (i < n && blank(a[i])) {
        i++;
    }
    size_t e = i;
    while (e < n && a[e] != '\n') {
        e++;
    }
    while (e > i && (a[e - 1] == ' ' || a[e - 1] == '\t' || a[e - 1] == '\r')) {
        e--;
    }
    if (start != NULL) {
        *start = i;
    }
    return e - i;
}

bool rill_market_answer_done(const char *a, size_t n) {
    bool text = false;
    for (size_t i = 0; i < n; i++) {
        if (a[i] == '\n' && text) {
            return true;
        }
        text = text || !blank(a[i]);
    }
    return false;
}
