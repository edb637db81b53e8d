/*
 * test_market_truth.c - the market truth (ingest/rill_market_truth.h): the question table, the
 * truth of every kind at a version, and the check of answers, on hand-made lines whose true
 * answers are worked out here by hand, with the tricky answers models give (a tick line echoed,
 * an answer running on into the next line, two candidates, ties, yes to an either-or question,
 * EUR/USD for EURUSD). Failure paths on purpose: bad lines (nothing taken), versions and times
 * going back, the N-th allocation failing, NULL arguments. The prompts
 * (ingest/rill_market_prompt.h): the instruction of every kind, the system prompt, the stop
 * rule, and the tick line read back to its tick.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_ingest.h"
#include "test_util.h"

static rill_market_question_t Q(const char *text) {
    rill_market_question_t q;
    ck_assert_msg(rill_market_question_parse(text, strlen(text), &q) == RILL_OK, "%s", text);
    return q;
}

static rill_market_truth_t *truth(bool hold) {
    rill_market_truth_params_t p = rill_market_truth_default_params();
    p.hold_tail = hold;
    rill_market_truth_t *t = NULL;
    ck_assert_int_eq(rill_market_truth_new(&p, &t), RILL_OK);
    return t;
}

static void feed(rill_market_truth_t *t, const char *text, int64_t v, int64_t ts) {
    rill_err_t e = rill_market_truth_feed(t, text, strlen(text), v, ts);
    ck_assert_msg(e == RILL_OK, "%s", rill_last_error(e));
}

static rill_market_verdict_t score(const rill_market_truth_t *t, const char *question, int64_t v,
                                   const char *answer) {
    rill_market_question_t q = Q(question);
    rill_market_verdict_t out = (rill_market_verdict_t)99;
    ck_assert_int_eq(rill_market_truth_score(t, &q, v, answer, strlen(answer), &out), RILL_OK);
    return out;
}

#define RIGHT(t, q, v, a) ck_assert_msg(score(t, q, v, a) == RILL_MARKET_RIGHT, "right: %s", a)
#define WRONG(t, q, v, a) ck_assert_msg(score(t, q, v, a) == RILL_MARKET_WRONG, "wrong: %s", a)
#define UNSCORED(t, q, v, a) \
    ck_assert_msg(score(t, q, v, a) == RILL_MARKET_UNSCORED, "unscored: %s", a)

static void expect(const rill_market_truth_t *t, const char *question, int64_t v,
                   const char *want) {
    rill_market_question_t q = Q(question);
    char buf[512];
    int64_t n = rill_market_truth_expect(t, &q, v, buf, sizeof buf);
    if (want == NULL) {
        ck_assert_int_eq(n, RILL_EAGAIN);
        ck_assert_str_eq(buf, "");
        return;
    }
    ck_assert_msg(n == (int64_t)strlen(want) && strcmp(buf, want) == 0,
                  "%s at v%lld: '%s' not '%s'", question, (long long)v, buf, want);
}

/* The demo's and the benchmark's questions. */
static const char *const LAST = "What was the last price of MSFT?";
static const char *const QUOTE = "What is the most recent EURUSD quote?";
static const char *const MOVED = "Which symbol moved most recently?";
static const char *const BS = "Were there more buys or sells of NVDA?";
static const char *const ABOVE = "Is AAPL trading above its first price in the stream?";
static const char *const LARGEST = "Which symbol traded the largest size?";
static const char *const MOST = "Which symbol moved most in the last minute, and by how much? "
                                "Answer with the symbol and its change.";
static const char *const OPEN = "Is AAPL above its open? Answer yes or no, then give the last "
                                "AAPL price from the feed.";
static const char *const SIDE = "What was the last MSFT price in the feed above, and was that "
                                "trade a buy or a sell?";
static const char *const SIZE = "Which symbol traded the largest size in the last minute? "
                                "Answer with the symbol and the size.";
static const char *const TREND = "Is NVDA going up or down over its last ten trades? Answer up, "
                                 "down or flat, with its last price.";
static const char *const SELLS = "How many of the last ten NVDA trades were sells? Answer with "
                                 "one number only.";
static const char *const ALL = "What is the latest price of each symbol in the feed above? "
                               "Answer as a list of symbol and price pairs.";

#define SEC 1000000000LL

/* A small market: versions 1..4. */
static rill_market_truth_t *market(bool hold) {
    rill_market_truth_t *t = truth(hold);
    feed(t,
         "AAPL 187.34 +0.00 100 B\n"
         "MSFT 402.10 +0.00 300 S\n"
         "EURUSD 1.09340 +0.00000 100 B\n",
         1, 1 * SEC);
    feed(t,
         "NVDA 495.20 +0.00 200 B\n"
         "AAPL 187.30 -0.04 500 S\n"
         "NVDA 495.25 +0.05 100 S\n",
         2, 30 * SEC);
    feed(t, "NVDA 495.30 +0.05 500 B\n", 3, 70 * SEC);
    feed(t, "MSFT 402.10 +0.00 50 B\n", 4, 95 * SEC);
    return t;
}

START_TEST(question_table) {
    const struct {
        const char *text;
        rill_market_qkind_t kind;
        const char *sym;
    } cases[] = {
        { LAST, RILL_MARKET_Q_LAST_PRICE, "MSFT" },
        { QUOTE, RILL_MARKET_Q_QUOTE, "EURUSD" },
        { MOVED, RILL_MARKET_Q_MOVED_LAST, "" },
        { BS, RILL_MARKET_Q_BUYS_SELLS, "NVDA" },
        { ABOVE, RILL_MARKET_Q_ABOVE_FIRST, "AAPL" },
        { LARGEST, RILL_MARKET_Q_LARGEST_TRADE, "" },
        { MOST, RILL_MARKET_Q_MOVED_MOST, "" },
        { OPEN, RILL_MARKET_Q_ABOVE_FIRST_PRICE, "AAPL" },
        { SIDE, RILL_MARKET_Q_LAST_PRICE_SIDE, "MSFT" },
        { SIZE, RILL_MARKET_Q_LARGEST_SIZE, "" },
        { TREND, RILL_MARKET_Q_TREND, "NVDA" },
        { "How many of the last ten BTC-USD trades were sells? Answer with one number only.",
          RILL_MARKET_Q_SELLS_COUNT, "BTC-USD" },
        { ALL, RILL_MARKET_Q_ALL_LAST_PRICES, "" },
        { "  \n What was the last price of S012?\n", RILL_MARKET_Q_LAST_PRICE, "S012" },
    };
    bool seen[RILL_MARKET_Q_N_KINDS] = { false };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rill_market_question_t q = Q(cases[i].text);
        ck_assert_int_eq(q.kind, cases[i].kind);
        ck_assert_str_eq(q.symbol, cases[i].sym);
        seen[q.kind] = true;
    }
    for (int k = 1; k < RILL_MARKET_Q_N_KINDS; k++) {
        ck_assert_msg(seen[k], "kind %s has no question", rill_market_qkind_name(k));
    }
    ck_assert_int_eq(Q(MOST).window_ns, 60 * SEC);
    ck_assert_int_eq(Q(SIZE).window_ns, 60 * SEC);
    ck_assert_int_eq(Q(TREND).last_n, 10);
    ck_assert_int_eq(Q(SELLS).last_n, 10);
    ck_assert_str_eq(rill_market_qkind_name(RILL_MARKET_Q_QUOTE), "quote");
    ck_assert_str_eq(rill_market_qkind_name(RILL_MARKET_Q_NONE), "none");
    ck_assert_str_eq(rill_market_qkind_name(RILL_MARKET_Q_N_KINDS), "?");
    /* Exact templates: anything else is not a question with a known answer. */
    const char *bad[] = {
        "What was the last price of msft?",      /* a symbol is upper case */
        "What was the last price of MSFT",       /* the '?' */
        "What was the last price of MSFT? Now.", /* more text */
        "what was the last price of MSFT?",      /* case of the template */
        "What was the last price of ?",          /* no symbol */
        "What was the last price of ABCDEFGHIJKLMNOP?",
        "Is AAPL above its open? Answer yes or no, then give the last MSFT price from the feed.",
        "Which symbol moved the most?",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rill_market_question_t q = { .kind = RILL_MARKET_Q_QUOTE };
        ck_assert_msg(rill_market_question_parse(bad[i], strlen(bad[i]), &q) == RILL_ENOTFOUND,
                      "%s", bad[i]);
        ck_assert_int_eq(q.kind, RILL_MARKET_Q_NONE);
    }
}
END_TEST

START_TEST(truth_of_every_kind_at_each_version) {
    rill_market_truth_t *t = market(false);
    ck_assert_int_eq(rill_market_truth_n_lines(t), 8);
    ck_assert_int_eq(rill_market_truth_version(t), 4);
    expect(t, LAST, 0, NULL); /* nothing yet */
    expect(t, LAST, 1, "402.10");
    expect(t, QUOTE, 4, "1.09340");
    expect(t, MOVED, 1, NULL); /* nothing moved yet */
    expect(t, MOVED, 2, "NVDA");
    expect(t, MOVED, 4, "NVDA"); /* MSFT's +0.00 is no move */
    expect(t, BS, 1, NULL);      /* no NVDA yet */
    expect(t, BS, 2, "equal (1 to 1)");
    expect(t, BS, 3, "buys (2 to 1)");
    expect(t, ABOVE, 1, "equal (187.34 equal to 187.34)");
    expect(t, ABOVE, 2, "no (187.30 under 187.34)");
    expect(t, LARGEST, 1, "MSFT 300");
    expect(t, LARGEST, 3, "AAPL or NVDA 500"); /* a tie */
    /* the minute before the latest line: at v3 (70 s) the lines after 10 s */
    expect(t, MOST, 2, "NVDA +0.05"); /* +0.05 beats AAPL's -0.04 */
    expect(t, MOST, 3, "NVDA +0.10");
    expect(t, MOST, 4, "NVDA +0.05"); /* at 95 s the lines at 30 s are out */
    expect(t, OPEN, 2, "no, 187.30");
    expect(t, SIDE, 1, "402.10 S");
    expect(t, SIDE, 4, "402.10 B");
    expect(t, SIZE, 3, "AAPL or NVDA 500");
    expect(t, SIZE, 4, "NVDA 500"); /* AAPL's 500 is older than a minute */
    expect(t, TREND, 3, "up, 495.30");
    expect(t, SELLS, 3, "1");
    expect(t, ALL, 2, "AAPL 187.30, MSFT 402.10, EURUSD 1.09340, NVDA 495.25");
    rill_market_question_t none = { .kind = RILL_MARKET_Q_NONE };
    rill_market_verdict_t v = RILL_MARKET_RIGHT;
    ck_assert_int_eq(rill_market_truth_score(t, &none, 4, "x", 1, &v), RILL_OK);
    ck_assert_int_eq(v, RILL_MARKET_UNSCORED);
    UNSCORED(t, "What was the last price of TSLA?", 4, "250.00"); /* not in the text */
    rill_market_truth_destroy(&t);
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(numbers_are_exact_decimals) {
    rill_market_truth_t *t = market(false);
    RIGHT(t, QUOTE, 4, "The most recent EURUSD quote is 1.0934");
    RIGHT(t, QUOTE, 4, "1.09340");
    RIGHT(t, QUOTE, 4, "1.09340.");
    WRONG(t, QUOTE, 4, "1.093");
    WRONG(t, QUOTE, 4, "10.934");                  /* the same digits, another value */
    WRONG(t, QUOTE, 4, "AAPL 187.34 -0.01 100 B"); /* the answer */
    WRONG(t, QUOTE, 4, "The most recent EUR/USD quote is 1.0934 or 1.0935");
    feed(t, "AAPL 187.34 +0.04 100 B\n", 5, 100 * SEC);
    const char *aapl = "What was the last price of AAPL?";
    RIGHT(t, aapl, 5, "187.34");
    RIGHT(t, aapl, 5, " 187.340");
    RIGHT(t, aapl, 5, "$187.34 (+0.04)"); /* a signed number is a change, not a price */
    WRONG(t, aapl, 5, "The last price of AAPL was 187.34, up from 187.30"); /* two */
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(answers_are_read_by_their_first_line) {
    rill_market_truth_t *t = market(false);
    RIGHT(t, LAST, 4, " 402.10\nAAPL 187.34 -0.01 100 B\n"); /* runs on into a tick line */
    RIGHT(t, LAST, 4, "\n\n  MSFT: 402.10\nQuestion: ...");  /* leading line ends skipped */
    WRONG(t, LAST, 4, " MSFT 402.10 +0.00 50 B\n402.10");    /* the first line is a data line */
    WRONG(t, LAST, 4, "");
    WRONG(t, LAST, 4, "The last price was\n402.10"); /* the number is on line two */
    WRONG(t, LAST, 4, "AAPL 402.10");                /* another symbol's price */
    WRONG(t, LAST, 4, "402.10 and 402.15");          /* two candidates */
    RIGHT(t, LAST, 4, "402.10, 402.10");             /* the same candidate twice */
    WRONG(t, LAST, 4, "402.1O");                     /* letters glued on: no number */
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(symbols_are_exact) {
    rill_market_truth_t *t = market(false);
    RIGHT(t, MOVED, 2, "NVDA");
    RIGHT(t, MOVED, 2, "NVDA.");
    RIGHT(t, MOVED, 2, "The symbol that moved most recently is NVDA (+0.05).");
    WRONG(t, MOVED, 2, "nvda");                    /* case as printed */
    WRONG(t, MOVED, 2, "NVDA 495.25 +0.05 100 S"); /* a data line, though NVDA is right */
    WRONG(t, MOVED, 2, "NVDA or AAPL");            /* two candidates */
    WRONG(t, MOVED, 2, "1.09399");                 /* the answer: no symbol */
    WRONG(t, MOVED, 2, "AAPL");
    /* ties: either is right, both at once is not */
    RIGHT(t, LARGEST, 3, "AAPL");
    RIGHT(t, LARGEST, 3, "NVDA, 500 shares");
    WRONG(t, LARGEST, 3, "AAPL and NVDA");
    WRONG(t, LARGEST, 3, "MSFT");
    /* the stream prints EURUSD: other spellings name nothing */
    rill_market_truth_t *fx = truth(false);
    feed(fx, "EURUSD 1.09340 +0.00000 100 B\nEURUSD 1.09350 +0.00010 100 B\n", 1, SEC);
    feed(fx, "BTC-USD 42000.5 +0.0 1 S\n", 2, 2 * SEC);
    RIGHT(fx, MOVED, 2, "EURUSD");
    WRONG(fx, MOVED, 2, "EUR/USD");
    WRONG(fx, MOVED, 2, "EUR-USD");
    WRONG(fx, MOVED, 2, "eurusd");
    RIGHT(fx, LARGEST, 2, "EURUSD");
    feed(fx, "BTC-USD 42001.0 +0.5 2 B\n", 3, 3 * SEC);
    RIGHT(fx, MOVED, 3, "BTC-USD.");
    WRONG(fx, MOVED, 3, "BTCUSD");
    rill_market_truth_destroy(&fx);
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(comparisons_are_the_right_choice) {
    rill_market_truth_t *t = market(false);
    /* buys or sells: v2 equal, v3 buys */
    RIGHT(t, BS, 3, "More buys.");
    RIGHT(t, BS, 3, "There were more buys than sells of NVDA.");
    RIGHT(t, BS, 3, "Buys: 2, sells: 1");
    WRONG(t, BS, 3, "Yes, there were more buys of NVDA compared to the previous answer.");
    WRONG(t, BS, 3, "Sells");
    WRONG(t, BS, 3, "There were fewer sells than buys"); /* a reading that turns around */
    WRONG(t, BS, 3, "Equal");
    RIGHT(t, BS, 2, "Equal: one buy and one sell");
    RIGHT(t, BS, 2, "the same number of each");
    WRONG(t, BS, 2, "buys");
    WRONG(t, BS, 3, "");
    /* above the first price: v1 equal, v2 below */
    RIGHT(t, ABOVE, 2, "No");
    RIGHT(t, ABOVE, 2, "No, AAPL is not above its first price.");
    RIGHT(t, ABOVE, 2, "It is below: 187.30 against 187.34");
    WRONG(t, ABOVE, 2, "Yes");
    WRONG(t, ABOVE, 2, "It is not below"); /* not: unreadable unless a first yes/no */
    WRONG(t, ABOVE, 2, "Yes, MSFT is");    /* another symbol */
    RIGHT(t, ABOVE, 1, "No");              /* equal is not above */
    RIGHT(t, ABOVE, 1, "It is unchanged");
    WRONG(t, ABOVE, 1, "Below");
    WRONG(t, ABOVE, 1, "Yes");
    /* yes/no plus the price */
    RIGHT(t, OPEN, 2, "No, 187.30");
    WRONG(t, OPEN, 2, "No");         /* the price is missing */
    WRONG(t, OPEN, 2, "No, 187.34"); /* the first price, not the last */
    feed(t, "AAPL 187.40 +0.10 100 B\n", 5, 100 * SEC);
    RIGHT(t, OPEN, 5, "Yes. The last AAPL price is 187.40.");
    RIGHT(t, ABOVE, 5, "Yes, it trades above its first price");
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(two_part_answers) {
    rill_market_truth_t *t = market(false);
    /* moved most in the last minute: v3 NVDA +0.10 */
    RIGHT(t, MOST, 3, "NVDA, +0.10");
    RIGHT(t, MOST, 3, "NVDA moved 0.10"); /* unsigned: the magnitude */
    RIGHT(t, MOST, 3, "NVDA +0.1");
    WRONG(t, MOST, 3, "NVDA -0.10"); /* signed: the sign counts */
    WRONG(t, MOST, 3, "NVDA");       /* the change is missing */
    WRONG(t, MOST, 3, "NVDA +0.10 to 495.30");
    RIGHT(t, MOST, 2, "NVDA 0.05");
    WRONG(t, MOST, 2, "AAPL -0.04");
    /* last price and side */
    RIGHT(t, SIDE, 4, "402.10, a buy");
    RIGHT(t, SIDE, 4, "402.10 B");
    RIGHT(t, SIDE, 1, "402.10, sold");
    WRONG(t, SIDE, 4, "402.10, a sell");
    WRONG(t, SIDE, 4, "Yes, 402.10 buy"); /* yes to an either-or question */
    WRONG(t, SIDE, 4, "a buy");
    /* largest size in the window */
    RIGHT(t, SIZE, 4, "NVDA 500");
    RIGHT(t, SIZE, 4, "NVDA, 500 shares");
    WRONG(t, SIZE, 4, "AAPL 500");
    WRONG(t, SIZE, 4, "NVDA 5,000");
    /* trend over the last ten trades, and sells among them */
    RIGHT(t, TREND, 3, "Up, 495.30");
    RIGHT(t, TREND, 3, "rising; last price 495.30");
    WRONG(t, TREND, 3, "Down, 495.30");
    WRONG(t, TREND, 3, "Up");
    WRONG(t, TREND, 3, "Yes, up, 495.30");
    RIGHT(t, SELLS, 3, "1");
    RIGHT(t, SELLS, 3, "One.");
    WRONG(t, SELLS, 3, "2");
    WRONG(t, SELLS, 3, "1 of 3");
    WRONG(t, SELLS, 3, "none");
    /* every symbol with its last price, on the first line */
    RIGHT(t, ALL, 2, "AAPL 187.30, MSFT 402.10, EURUSD 1.0934, NVDA 495.25");
    RIGHT(t, ALL, 2, "NVDA: 495.25; AAPL: 187.30; EURUSD: 1.09340; MSFT: 402.1");
    WRONG(t, ALL, 2, "AAPL 187.30, MSFT 402.10, EURUSD 1.0934"); /* one missing */
    WRONG(t, ALL, 2, "AAPL 187.30, MSFT 402.10, EURUSD 1.0934, NVDA 495.20");
    WRONG(t, ALL, 2, "AAPL 187.30\nMSFT 402.10\nEURUSD 1.0934\nNVDA 495.25"); /* one line */
    WRONG(t, ALL, 2, "AAPL 187.30, AAPL 187.30, MSFT 402.10, EURUSD 1.0934, NVDA 495.25");
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(bars_show_what_the_text_shows) {
    rill_market_truth_t *t = truth(false);
    feed(t,
         "NVDA 495.20 +0.00 200 B\n"
         "NVDA bar 495.25 495.90 495.10 495.80 +0.60 vol 9000 n 37\n"
         "AAPL bar 187.10 187.40 187.05 187.32 +0.22 vol 5400 n 12\n",
         1, SEC);
    expect(t, "What was the last price of NVDA?", 1, "495.80"); /* a bar's close */
    expect(t, MOVED, 1, "AAPL");                                /* the later bar */
    expect(t, "Is AAPL trading above its first price in the stream?", 1,
           "yes (187.32 over 187.10)"); /* a first bar: its open */
    expect(t, LARGEST, 1, "NVDA 200");  /* a bar's volume is not one trade */
    expect(t, BS, 1, "buys (1 to 0)");  /* bars carry no side */
    expect(t, SELLS, 1, NULL);          /* a bar among the last ten: unknown */
    expect(t,
           "What was the last NVDA price in the feed above, and was that trade a buy or a "
           "sell?",
           1, NULL);
    expect(t, TREND, 1, "up, 495.80");
    rill_market_truth_t *only_bars = truth(false);
    feed(only_bars, "AAPL bar 187.10 187.40 187.05 187.32 +0.22 vol 5400 n 12\n", 1, SEC);
    expect(only_bars, LARGEST, 1, NULL);
    expect(only_bars, "Were there more buys or sells of AAPL?", 1, NULL);
    rill_market_truth_destroy(&only_bars);
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(held_tail_hides_the_last_side) {
    /* rilld's tick ingest holds back the last line's side until more text comes */
    rill_market_truth_t *t = market(true);
    expect(t, SIDE, 4, NULL);          /* the last line is MSFT's: its side is not seen */
    expect(t, SIDE, 3, "402.10 S");    /* at v3 MSFT's last line is seen whole */
    expect(t, BS, 3, NULL);            /* 1 B, 1 S and a held B: buys or equal */
    expect(t, BS, 2, NULL);            /* 1 B and a held S: buys or equal */
    expect(t, BS, 4, "buys (2 to 1)"); /* at v4 the NVDA lines are all seen */
    expect(t, SELLS, 3, NULL);         /* the held B is among the last ten */
    expect(t, SELLS, 4, "1");
    UNSCORED(t, SIDE, 4, "402.10, a buy");
    expect(t, LAST, 4, "402.10"); /* the price is seen */
    /* a held side that cannot change the answer leaves it known */
    feed(t, "NVDA 495.35 +0.05 10 B\nNVDA 495.40 +0.05 10 B\n", 5, 100 * SEC);
    expect(t, BS, 5, "buys (3 to 1)");
    RIGHT(t, BS, 5, "buys");
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(feed_is_all_or_nothing) {
    rill_market_truth_t *t = market(false);
    const char *bad[] = {
        "AAPL 187.34 +0.00 100 B\nAAPL 187.34 +0.00 100 X\n", /* a side */
        "AAPL 187.34 +0.00 100 B",                            /* no '\n' */
        "AAPL 187.34 0.00 100 B\n",                           /* a change without sign */
        "AAPL 187.34 +0.00 1.5 B\n",                          /* a size with decimals */
        "aapl 187.34 +0.00 100 B\n",                          /* a lower-case symbol */
        "AAPL bar 1 2 3 4 +1 vol 10\n",                       /* a bar without n */
        "AAPL  187.34 +0.00 100 B\n",
        "\n",
        "Question: what?\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(rill_market_truth_feed(t, bad[i], strlen(bad[i]), 9, 99 * SEC) ==
                          RILL_EFORMAT,
                      "%s", bad[i]);
        ck_assert_int_eq(rill_market_truth_n_lines(t), 8);
        ck_assert_int_eq(rill_market_truth_version(t), 4);
    }
    ck_assert_str_eq(rill_last_error(RILL_EFORMAT),
                     "rill_market_truth_feed: line 1 is not a tick or bar line: \"Question: "
                     "what?\"");
    const char *ok = "AAPL 187.34 +0.00 100 B\n";
    ck_assert_int_eq(rill_market_truth_feed(t, ok, strlen(ok), 3, 99 * SEC), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_feed(t, ok, strlen(ok), 5, 1 * SEC), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_feed(t, ok, strlen(ok), -1, 99 * SEC), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_n_lines(t), 8);
    ck_assert_int_eq(rill_market_truth_feed(t, "", 0, 5, 99 * SEC), RILL_OK); /* version only */
    ck_assert_int_eq(rill_market_truth_version(t), 5);
    ck_assert_int_eq(rill_market_truth_feed(t, ok, strlen(ok), 5, 99 * SEC), RILL_OK);
    expect(t, MOVED, 5, "NVDA");
    /* 256 symbols, then no 257th */
    rill_market_truth_t *many = truth(false);
    char line[64];
    for (int i = 0; i < 256; i++) {
        snprintf(line, sizeof line, "S%03d 1.00 +0.00 1 B\n", i);
        feed(many, line, 1, SEC);
    }
    ck_assert_int_eq(rill_market_truth_feed(many, "T 1.00 +0.00 1 B\n", 17, 1, SEC), RILL_EFULL);
    ck_assert_int_eq(rill_market_truth_n_lines(many), 256);
    rill_market_truth_destroy(&many);
    rill_market_truth_destroy(&t);
}
END_TEST

START_TEST(allocation_failures_and_arguments) {
    rill_market_truth_t *t = (rill_market_truth_t *)&t;
    rill_mem_fail_nth(1);
    ck_assert_int_eq(rill_market_truth_new(NULL, &t), RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert_ptr_eq(t, (rill_market_truth_t *)&t);
    t = truth(false);
    rill_mem_fail_nth(1); /* the first lines need the array */
    const char *ok = "AAPL 187.34 +0.00 100 B\n";
    ck_assert_int_eq(rill_market_truth_feed(t, ok, strlen(ok), 1, SEC), RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert_int_eq(rill_market_truth_n_lines(t), 0);
    ck_assert_int_eq(rill_market_truth_version(t), 0);
    feed(t, ok, 1, SEC);
    expect(t, "What was the last price of AAPL?", 1, "187.34");
    /* growing past the first 64 lines */
    int64_t calls = rill_mem_calls();
    for (int i = 0; i < 100; i++) {
        feed(t, ok, 1, SEC);
    }
    ck_assert_int_ge(rill_mem_calls() - calls, 1);
    rill_mem_fail_nth(1);
    int64_t n = rill_market_truth_n_lines(t);
    rill_err_t e = RILL_OK;
    for (int i = 0; i < 200 && e == RILL_OK; i++) {
        e = rill_market_truth_feed(t, ok, strlen(ok), 1, SEC);
        n += e == RILL_OK;
    }
    rill_mem_fail_nth(0);
    ck_assert_int_eq(e, RILL_ENOMEM);
    ck_assert_int_eq(rill_market_truth_n_lines(t), n);
    /* arguments */
    rill_market_question_t q = Q(LAST);
    rill_market_verdict_t v;
    char buf[8];
    ck_assert_int_eq(rill_market_truth_new(NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_feed(NULL, ok, 1, 1, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_feed(t, NULL, 1, 1, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_score(NULL, &q, 1, "x", 1, &v), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_score(t, NULL, 1, "x", 1, &v), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_score(t, &q, 1, NULL, 1, &v), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_score(t, &q, 1, "x", 1, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_expect(t, &q, 1, NULL, 8), RILL_EINVAL);
    ck_assert_int_eq(rill_market_question_parse(NULL, 1, &q), RILL_EINVAL);
    ck_assert_int_eq(rill_market_question_parse("x", 1, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_market_truth_n_lines(NULL), RILL_EINVAL);
    rill_market_question_t all = Q(ALL);
    feed(t, "MSFT 402.10 +0.00 300 S\n", 2, 2 * SEC);
    ck_assert_int_eq(rill_market_truth_expect(t, &all, 2, buf, sizeof buf), RILL_EFULL);
    char big[64];
    ck_assert_int_eq(rill_market_truth_expect(t, &all, 2, big, sizeof big), 24);
    ck_assert_str_eq(big, "AAPL 187.34, MSFT 402.10");
    rill_market_truth_destroy(&t);
    rill_market_truth_destroy(&t);
    rill_market_truth_destroy(NULL);
    /* the tally */
    rill_market_tally_t tl;
    memset(&tl, 0, sizeof tl);
    rill_market_tally_add(&tl, RILL_MARKET_Q_QUOTE, RILL_MARKET_RIGHT);
    rill_market_tally_add(&tl, RILL_MARKET_Q_QUOTE, RILL_MARKET_WRONG);
    rill_market_tally_add(&tl, RILL_MARKET_Q_TREND, RILL_MARKET_UNSCORED);
    rill_market_tally_add(&tl, RILL_MARKET_Q_N_KINDS, RILL_MARKET_RIGHT);
    rill_market_tally_add(NULL, RILL_MARKET_Q_QUOTE, RILL_MARKET_RIGHT);
    ck_assert_int_eq(tl.n[RILL_MARKET_Q_QUOTE], 2);
    ck_assert_int_eq(tl.scored[RILL_MARKET_Q_QUOTE], 2);
    ck_assert_int_eq(tl.right[RILL_MARKET_Q_QUOTE], 1);
    ck_assert_int_eq(rill_market_tally_n(&tl), 3);
    ck_assert_int_eq(rill_market_tally_scored(&tl), 2);
    ck_assert_int_eq(rill_market_tally_right(&tl), 1);
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_INGEST).bytes, 0);
}
END_TEST

/* ---- the prompts (rill_market_prompt.h) ----------------------------------------------------- */

/* Every kind has its instruction, a sentence that names a form and no value (a small model
 * copies example values), and a question that carries it is still classified as itself. */
START_TEST(instruction_per_kind) {
    const char *const qs[] = { LAST, QUOTE, MOVED, BS,    ABOVE, LARGEST, MOST,
                               OPEN, SIDE,  SIZE,  TREND, SELLS, ALL };
    bool seen[RILL_MARKET_Q_N_KINDS] = { false };
    ck_assert_str_eq(rill_market_prompt_instruction(RILL_MARKET_Q_NONE), "");
    ck_assert_str_eq(rill_market_prompt_instruction(RILL_MARKET_Q_N_KINDS), "");
    ck_assert_str_eq(rill_market_prompt_instruction((rill_market_qkind_t)-1), "");
    for (size_t i = 0; i < sizeof qs / sizeof qs[0]; i++) {
        rill_market_question_t q = Q(qs[i]);
        seen[q.kind] = true;
        const char *in = rill_market_prompt_instruction(q.kind);
        size_t n = strlen(in);
        ck_assert_msg(n > 8 && in[n - 1] == '.' && in[0] != ' ', "%s", in);
        for (size_t j = 0; j < n; j++) {
            ck_assert_msg(in[j] < '0' || in[j] > '9', "a value in '%s'", in);
        }
        for (int w = 0; w < RILL_MARKET_INSTRUCT_N; w++) {
            char buf[512];
            int64_t k = rill_market_prompt_question(qs[i], strlen(qs[i]), (rill_market_instruct_t)w,
                                                    buf, sizeof buf);
            bool with = w == RILL_MARKET_INSTRUCT_QUESTION || w == RILL_MARKET_INSTRUCT_BOTH;
            ck_assert_int_eq(k, (int64_t)(strlen(qs[i]) + (with ? 1 + n : 0)));
            ck_assert_int_eq(k, (int64_t)strlen(buf));
            ck_assert_int_eq(memcmp(buf, qs[i], strlen(qs[i])), 0);
            if (with) {
                ck_assert_str_eq(buf + strlen(qs[i]) + 1, in);
            }
            rill_market_question_t back = Q(buf);
            ck_assert_int_eq(back.kind, q.kind);
            ck_assert_str_eq(back.symbol, q.symbol);
            /* asked twice, it keeps one instruction */
            char again[512];
            ck_assert_int_eq(rill_market_prompt_question(buf, (size_t)k, (rill_market_instruct_t)w,
                                                         again, sizeof again),
                             k);
            ck_assert_str_eq(again, buf);
        }
    }
    for (int k = 1; k < RILL_MARKET_Q_N_KINDS; k++) {
        ck_assert_msg(seen[k], "no question of kind %s here", rill_market_qkind_name(k));
    }
    /* the suffix is exact: another kind's instruction, two spaces or a lone one classify
     * nothing */
    char buf[512];
    rill_market_question_t q;
    snprintf(buf, sizeof buf, "%s %s", LAST,
             rill_market_prompt_instruction(RILL_MARKET_Q_MOVED_LAST));
    ck_assert_int_eq(rill_market_question_parse(buf, strlen(buf), &q), RILL_ENOTFOUND);
    snprintf(buf, sizeof buf, "%s  %s", LAST,
             rill_market_prompt_instruction(RILL_MARKET_Q_LAST_PRICE));
    ck_assert_int_eq(rill_market_question_parse(buf, strlen(buf), &q), RILL_ENOTFOUND);
    snprintf(buf, sizeof buf, "%s%s", LAST,
             rill_market_prompt_instruction(RILL_MARKET_Q_LAST_PRICE));
    ck_assert_int_eq(rill_market_question_parse(buf, strlen(buf), &q), RILL_ENOTFOUND);
    /* a question outside the table gets no instruction: its form is unknown */
    const char *other = "What is the weather?";
    ck_assert_int_eq(rill_market_prompt_question(other, strlen(other), RILL_MARKET_INSTRUCT_BOTH,
                                                 buf, sizeof buf),
                     (int64_t)strlen(other));
    ck_assert_str_eq(buf, other);
    /* errors: nothing written but an empty string */
    strcpy(buf, "x");
    ck_assert_int_eq(rill_market_prompt_question(LAST, strlen(LAST), RILL_MARKET_INSTRUCT_BOTH, buf,
                                                 strlen(LAST) + 2),
                     RILL_EFULL);
    ck_assert_str_eq(buf, "");
    ck_assert_int_eq(rill_market_prompt_question(LAST, strlen(LAST), RILL_MARKET_INSTRUCT_NONE, buf,
                                                 strlen(LAST)),
                     RILL_EFULL);
    ck_assert_int_eq(rill_market_prompt_question(LAST, strlen(LAST), RILL_MARKET_INSTRUCT_NONE, buf,
                                                 strlen(LAST) + 1),
                     (int64_t)strlen(LAST));
    ck_assert_int_eq(rill_market_prompt_question(NULL, 3, RILL_MARKET_INSTRUCT_NONE, buf, 9),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_market_prompt_question(LAST, 3, RILL_MARKET_INSTRUCT_NONE, NULL, 9),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_market_prompt_question(LAST, 3, RILL_MARKET_INSTRUCT_N, buf, sizeof buf),
                     RILL_EINVAL);
}
END_TEST

/* The system prompt names every field of the tick line; the answer rules are there exactly
 * where `where` puts them; names read back. */
START_TEST(system_prompt_and_names) {
    const char *rules = "one short line";
    for (int w = 0; w < RILL_MARKET_INSTRUCT_N; w++) {
        const char *s = rill_market_prompt_system((rill_market_instruct_t)w);
        size_t n = strlen(s);
        ck_assert(n > 0 && s[n - 1] == '\n');
        const char *fields[] = {
            "symbol", "price", "change", "size", "side", "B = buy", "S = sell"
        };
        for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
            ck_assert_msg(strstr(s, fields[f]) != NULL, "%s lacks %s", s, fields[f]);
        }
        bool with = w == RILL_MARKET_INSTRUCT_SYSTEM || w == RILL_MARKET_INSTRUCT_BOTH;
        ck_assert_int_eq(strstr(s, rules) != NULL, with);
        rill_market_instruct_t back = RILL_MARKET_INSTRUCT_N;
        ck_assert(rill_market_instruct_from_name(
            rill_market_instruct_name((rill_market_instruct_t)w), &back));
        ck_assert_int_eq(back, w);
    }
    ck_assert_str_eq(rill_market_prompt_system(RILL_MARKET_INSTRUCT_N), "");
    ck_assert_str_eq(rill_market_instruct_name(RILL_MARKET_INSTRUCT_N), "?");
    rill_market_instruct_t w = RILL_MARKET_INSTRUCT_SYSTEM;
    ck_assert(!rill_market_instruct_from_name("Both", &w));
    ck_assert(!rill_market_instruct_from_name(NULL, &w));
    ck_assert_int_eq(w, RILL_MARKET_INSTRUCT_SYSTEM);
}
END_TEST

/* The stop rule: the first non-blank line, as the truth scores it. */
START_TEST(stop_rule_cuts_at_the_answers_end) {
    size_t at = 99;
    const char *a = " \n\t 402.10 \r\nMSFT 402.10 +0.00 50 B\n";
    size_t n = rill_market_answer_line(a, strlen(a), &at);
    ck_assert_int_eq(at, 4);
    ck_assert_int_eq(n, 6);
    ck_assert_int_eq(memcmp(a + at, "402.10", 6), 0);
    ck_assert(rill_market_answer_done(a, strlen(a)));
    ck_assert(!rill_market_answer_done(a, 12)); /* "402.10 \r" and no '\n' yet */
    ck_assert(rill_market_answer_done(a, 13));
    ck_assert(!rill_market_answer_done("\n\n  \n", 5)); /* blank lines end nothing */
    n = rill_market_answer_line("AAPL", 4, &at);
    ck_assert_int_eq(at, 0);
    ck_assert_int_eq(n, 4);
    n = rill_market_answer_line(" \n ", 3, &at);
    ck_assert_int_eq(at, 3);
    ck_assert_int_eq(n, 0);
    n = rill_market_answer_line(NULL, 0, NULL);
    ck_assert_int_eq(n, 0);
    /* what the rule keeps is what the truth scores: a run-on answer is judged the same cut */
    rill_market_truth_t *t = market(false);
    const char *run = "402.10\nMSFT 402.10 +0.00 50 B\nAAPL 187.30 -0.04 500 S";
    size_t n1 = rill_market_answer_line(run, strlen(run), &at);
    rill_market_question_t q = Q(LAST);
    rill_market_verdict_t whole = RILL_MARKET_UNSCORED, cut = RILL_MARKET_UNSCORED;
    ck_assert_int_eq(rill_market_truth_score(t, &q, 4, run, strlen(run), &whole), RILL_OK);
    ck_assert_int_eq(rill_market_truth_score(t, &q, 4, run + at, n1, &cut), RILL_OK);
    ck_assert_int_eq(whole, RILL_MARKET_RIGHT);
    ck_assert_int_eq(cut, whole);
    rill_market_truth_destroy(&t);
}
END_TEST

/* A tick line says what its tick says and nothing else: read back field by field it gives
 * the tick's symbol, its price rounded to the symbol's decimals, its size and side, and the
 * change from the symbol's previous line; and the truth, which reads the same lines, sees the
 * same last price. Seeded synthetic ticks of several symbols and precisions. */
START_TEST(tick_lines_read_back_to_their_ticks) {
    rill_market_synth_params_t sp = rill_market_synth_default_params();
    sp.seed = 11;
    sp.n_symbols = 6;
    rill_market_synth_t *syn = NULL;
    rill_market_fmt_t *fmt = NULL;
    ck_assert_int_eq(rill_market_synth_new(&sp, &syn), RILL_OK);
    ck_assert_int_eq(rill_market_fmt_new(NULL, &fmt), RILL_OK);
    rill_market_truth_t *t = truth(false);
    char prev_price[6][32] = { { 0 } };
    char names[6][32] = { { 0 } };
    for (int i = 0; i < 400; i++) {
        rill_tick_t k;
        ck_assert_int_eq(rill_market_synth_next(syn, &k), RILL_OK);
        char line[RILL_MARKET_LINE_MAX];
        int64_t n = rill_market_fmt_tick(fmt, &k, line, sizeof line);
        ck_assert_int_gt(n, 0);
        ck_assert_int_eq(line[n - 1], '\n');
        char sym[32], price[32], change[32], side[8];
        long long size = 0;
        int used = 0;
        ck_assert_int_eq(
            sscanf(line, "%31s %31s %31s %lld %7s%n", sym, price, change, &size, side, &used), 5);
        ck_assert_int_eq(used, (int)n - 1); /* five fields, nothing more */
        ck_assert_str_eq(sym, k.symbol);
        ck_assert_int_eq(size, k.size);
        ck_assert_str_eq(side, k.side == RILL_SIDE_BUY    ? "B"
                               : k.side == RILL_SIDE_SELL ? "S"
                                                          : "?");
        rill_market_symbol_t e;
        ck_assert_int_eq(rill_market_fmt_symbol(fmt, k.symbol, &e), RILL_OK);
        /* the price, rounded to the symbol's decimals (written with exactly that many) */
        const char *dot = strchr(price, '.');
        ck_assert_int_eq(dot != NULL ? (int)strlen(dot + 1) : 0, e.decimals);
        double unit = pow(10, -e.decimals);
        ck_assert_double_le(fabs(strtod(price, NULL) - k.price), 0.5 * unit * (1 + 1e-9));
        ck_assert(price[0] != '+' && price[0] != '-');
        ck_assert(change[0] == '+' || change[0] == '-'); /* a change is never read as a price */
        int slot = -1;
        for (int j = 0; j < 6 && slot < 0; j++) {
            if (names[j][0] == '\0' || strcmp(names[j], sym) == 0) {
                slot = j;
            }
        }
        ck_assert_int_ge(slot, 0);
        if (names[slot][0] == '\0') {
            snprintf(names[slot], sizeof names[slot], "%s", sym);
            ck_assert_double_eq_tol(strtod(change, NULL), 0, 1e-12);
        } else {
            double d = strtod(price, NULL) - strtod(prev_price[slot], NULL);
            ck_assert_double_eq_tol(strtod(change, NULL), d, 0.5 * pow(10, -e.decimals));
        }
        snprintf(prev_price[slot], sizeof prev_price[slot], "%s", price);
        feed(t, line, i + 1, k.ts_ns);
        char q[64];
        snprintf(q, sizeof q, "What was the last price of %s?", sym);
        expect(t, q, i + 1, price);
    }
    rill_market_truth_destroy(&t);
    rill_market_fmt_destroy(&fmt);
    rill_market_synth_destroy(&syn);
}
END_TEST

int main(void) {
    Suite *su = suite_create("market_truth");
    TCase *tc = tcase_create("truth");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, question_table);
    tcase_add_test(tc, truth_of_every_kind_at_each_version);
    tcase_add_test(tc, numbers_are_exact_decimals);
    tcase_add_test(tc, answers_are_read_by_their_first_line);
    tcase_add_test(tc, symbols_are_exact);
    tcase_add_test(tc, comparisons_are_the_right_choice);
    tcase_add_test(tc, two_part_answers);
    tcase_add_test(tc, bars_show_what_the_text_shows);
    tcase_add_test(tc, held_tail_hides_the_last_side);
    tcase_add_test(tc, feed_is_all_or_nothing);
    tcase_add_test(tc, allocation_failures_and_arguments);
    suite_add_tcase(su, tc);
    TCase *tp = tcase_create("prompt");
    tcase_set_timeout(tp, 60);
    tcase_add_test(tp, instruction_per_kind);
    tcase_add_test(tp, system_prompt_and_names);
    tcase_add_test(tp, stop_rule_cuts_at_the_answers_end);
    tcase_add_test(tp, tick_lines_read_back_to_their_ticks);
    suite_add_tcase(su, tp);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
