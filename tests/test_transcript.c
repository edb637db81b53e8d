/*
 * test_transcript.c - the streaming transcript's local agreement (scheduler/rill_transcript.h):
 * what two hypotheses agree on is committed and never taken back, the rest is tentative and
 * replaced, re-transcribed committed words are skipped, the window is trimmed at wholly
 * committed segments or when it grows too long, memory stays bounded, and bad input or a failed
 * allocation changes nothing.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_transcript.h"

/* One segment [t0, t1) ms of text. */
static rill_transcript_seg_t seg(const char *text, int64_t t0, int64_t t1) {
    return (rill_transcript_seg_t){ .text = text, .len = strlen(text), .t0_ms = t0, .t1_ms = t1 };
}

static rill_transcript_t *fresh(void) {
    rill_transcript_t *t = NULL;
    ck_assert_int_eq(rill_transcript_new(NULL, &t), RILL_OK);
    return t;
}

/* An update of one segment of unknown end over a window of window_ms. */
static rill_transcript_update_t say(rill_transcript_t *t, const char *text, int64_t window_ms) {
    rill_transcript_seg_t s = seg(text, 0, -1);
    rill_transcript_update_t u;
    ck_assert_int_eq(rill_transcript_update(t, &s, 1, window_ms, &u), RILL_OK);
    return u;
}

static void ck_text(const char *p, size_t n, const char *want) {
    ck_assert_msg(n == strlen(want) && memcmp(p, want, n) == 0, "'%.*s' != '%s'", (int)n, p, want);
}

START_TEST(agreement_commits_what_two_hypotheses_share) {
    rill_transcript_t *t = fresh();
    rill_transcript_update_t u = say(t, "the quick brown", 1000);
    ck_assert_int_eq(u.n_committed, 0); /* one hypothesis agrees with nothing */
    ck_text(u.tentative, u.tentative_len, "the quick brown");
    ck_assert_int_eq(u.n_tentative, 3);
    ck_assert_int_eq(u.trim_ms, -1);
    u = say(t, "the quick brown fox jumps", 2000);
    ck_text(u.committed, u.committed_len, "the quick brown");
    ck_text(u.tentative, u.tentative_len, "fox jumps");
    ck_assert_int_eq(u.n_committed, 3);
    /* the hypothesis re-transcribes the committed words: they are skipped, not doubled */
    u = say(t, "the quick brown fox jumped over", 3000);
    ck_text(u.committed, u.committed_len, " fox");
    ck_text(u.tentative, u.tentative_len, "jumped over");
    size_t n;
    const char *c = rill_transcript_committed(t, &n);
    ck_text(c, n, "the quick brown fox");
    ck_assert_int_eq(rill_transcript_n_words(t), 4);
    /* a change of mind in the tail replaces the tentative words only */
    u = say(t, "the quick brown fox jumps over the", 4000);
    ck_assert_int_eq(u.n_committed, 0);
    ck_text(u.tentative, u.tentative_len, "jumps over the");
    c = rill_transcript_committed(t, &n);
    ck_text(c, n, "the quick brown fox");
    /* the end of the stream commits the tentative tail */
    ck_assert_int_eq(rill_transcript_finish(t, &u), RILL_OK);
    ck_text(u.committed, u.committed_len, " jumps over the");
    ck_assert_int_eq(u.tentative_len, 0);
    c = rill_transcript_committed(t, &n);
    ck_text(c, n, "the quick brown fox jumps over the");
    ck_assert_int_eq(rill_transcript_committed_total(t), (int64_t)n);
    rill_transcript_destroy(&t);
    ck_assert_ptr_null(t);
    rill_transcript_destroy(&t); /* NULL-safe */
}
END_TEST

/* Words are compared whole: "world." and "world," differ, and a word is never committed half;
 * whitespace of any kind separates words and is normalised to one space. */
START_TEST(words_are_compared_whole) {
    rill_transcript_t *t = fresh();
    say(t, "hello world.", 1000);
    rill_transcript_update_t u = say(t, "hello\tworld, and", 2000);
    ck_text(u.committed, u.committed_len, "hello");
    ck_text(u.tentative, u.tentative_len, "world, and");
    u = say(t, " hello  world, and  you\n", 3000);
    ck_text(u.committed, u.committed_len, " world, and");
    ck_text(u.tentative, u.tentative_len, "you");
    rill_transcript_destroy(&t);
}
END_TEST

/* Re-transcribed committed words are recognised by time (words ending well before the last
 * committed one) and by a repeat of up to five committed words at the hypothesis' start. */
START_TEST(committed_words_are_skipped_by_time_and_repeat) {
    rill_transcript_t *t = fresh();
    /* two segments with times: "one two three" ends at 1500 ms, "four five" at 3000 */
    rill_transcript_seg_t a[2] = { seg("one two three", 0, 1500), seg("four five", 1500, 3000) };
    rill_transcript_update_t u;
    ck_assert_int_eq(rill_transcript_update(t, a, 2, 3000, &u), RILL_OK);
    ck_assert_int_eq(rill_transcript_update(t, a, 2, 3000, &u), RILL_OK);
    ck_text(u.committed, u.committed_len, "one two three four five");
    ck_assert_int_eq(u.tentative_len, 0);
    /* the same words again, then new ones: skipped by time, the new ones tentative */
    rill_transcript_seg_t b[3] = { seg("one two three", 0, 1500), seg("four five", 1500, 3000),
                                   seg("six", 3000, 3400) };
    ck_assert_int_eq(rill_transcript_update(t, b, 3, 3400, &u), RILL_OK);
    ck_assert_int_eq(u.n_committed, 0);
    ck_text(u.tentative, u.tentative_len, "six");
    /* more committed words re-transcribed than a repeat looks for: their times tell */
    rill_transcript_t *m = fresh();
    rill_transcript_seg_t c7 = seg("a1 a2 a3 a4 a5 a6 a7", 0, 3500);
    ck_assert_int_eq(rill_transcript_update(m, &c7, 1, 3500, &u), RILL_OK);
    ck_assert_int_eq(rill_transcript_update(m, &c7, 1, 3500, &u), RILL_OK);
    ck_assert_int_eq(u.n_committed, 7);
    rill_transcript_seg_t c8[2] = { c7, seg("b1", 3500, 4000) };
    ck_assert_int_eq(rill_transcript_update(m, c8, 2, 4000, &u), RILL_OK);
    ck_assert_int_eq(u.n_committed, 0);
    ck_text(u.tentative, u.tentative_len, "b1");
    rill_transcript_destroy(&m);
    /* no times (one segment of unknown end over a short window): only the repeat tells */
    rill_transcript_t *r = fresh();
    say(r, "alpha beta gamma delta", 2000);
    say(r, "alpha beta gamma delta", 2000);
    ck_assert_int_eq(rill_transcript_trim(r, 1500), RILL_OK); /* "gamma delta" still heard */
    u = say(r, "gamma delta epsilon", 500); /* starts with the last two committed words */
    ck_assert_int_eq(u.n_committed, 0);
    ck_text(u.tentative, u.tentative_len, "epsilon");
    u = say(r, "gamma delta epsilon zeta", 600);
    ck_text(u.committed, u.committed_len, " epsilon");
    ck_text(u.tentative, u.tentative_len, "zeta");
    size_t n;
    const char *c = rill_transcript_committed(r, &n);
    ck_text(c, n, "alpha beta gamma delta epsilon");
    rill_transcript_destroy(&r);
    rill_transcript_destroy(&t);
}
END_TEST

/* A wholly committed segment's audio is not needed: trim_ms is its end (absolute), and after
 * rill_transcript_trim the next window's times are relative to the new start. */
START_TEST(windows_trim_at_committed_segments) {
    rill_transcript_t *t = fresh();
    rill_transcript_seg_t a[2] = { seg("first sentence.", 0, 1200), seg("second one", 1200, 2000) };
    rill_transcript_update_t u;
    ck_assert_int_eq(rill_transcript_update(t, a, 2, 2000, &u), RILL_OK);
    ck_assert_int_eq(u.trim_ms, -1);
    rill_transcript_seg_t b[2] = { seg("first sentence.", 0, 1200),
                                   seg("second one is", 1200, 2600) };
    ck_assert_int_eq(rill_transcript_update(t, b, 2, 2600, &u), RILL_OK);
    ck_text(u.committed, u.committed_len, "first sentence. second one");
    ck_assert_int_eq(u.trim_ms, 1200); /* the first segment is wholly committed */
    size_t pn;
    rill_transcript_prompt_before(t, &pn);
    ck_assert_uint_eq(pn, 0); /* nothing lies before the window yet */
    ck_assert_int_eq(rill_transcript_trim(t, 1200), RILL_OK);
    /* "second one" is committed but its audio is still in the window: not in that prompt */
    const char *pb = rill_transcript_prompt_before(t, &pn);
    ck_text(pb, pn, "first sentence.");
    pb = rill_transcript_prompt(t, &pn);
    ck_text(pb, pn, "first sentence. second one");
    ck_assert_int_eq(rill_transcript_window_start(t), 1200);
    ck_assert_int_eq(rill_transcript_trim(t, 1000), RILL_EINVAL); /* before the window */
    /* the new window (from 1200 ms) hears "second one is here"; "is" agrees with before */
    rill_transcript_seg_t c[1] = { seg("second one is here", 0, 1800) };
    ck_assert_int_eq(rill_transcript_update(t, c, 1, 1800, &u), RILL_OK);
    ck_text(u.committed, u.committed_len, " is");
    ck_text(u.tentative, u.tentative_len, "here");
    size_t n;
    const char *s = rill_transcript_committed(t, &n);
    ck_text(s, n, "first sentence. second one is");
    /* a wholly committed segment that is the hypothesis' last is no trim point (it may end only
     * because the window does); with a segment after it, it is */
    ck_assert_int_eq(rill_transcript_update(t, c, 1, 1900, &u), RILL_OK);
    ck_text(u.committed, u.committed_len, " here");
    ck_assert_int_eq(u.trim_ms, -1);
    rill_transcript_seg_t d[2] = { seg("second one is here", 0, 1800), seg("and more", 1800, -1) };
    ck_assert_int_eq(rill_transcript_update(t, d, 2, 2500, &u), RILL_OK);
    ck_assert_int_eq(u.trim_ms, 1200 + 1800);
    ck_assert_int_eq(rill_transcript_trim(t, 3000), RILL_OK);
    pb = rill_transcript_prompt_before(t, &pn);
    ck_text(pb, pn, "first sentence. second one is here");
    rill_transcript_destroy(&t);
}
END_TEST

/* A window that outgrows max_window_ms is trimmed even inside a segment; when nothing was
 * committed in it, what it heard is committed first. */
START_TEST(long_windows_are_forced_to_trim) {
    rill_transcript_params_t p = rill_transcript_default_params();
    p.max_window_ms = 5000;
    rill_transcript_t *t = NULL;
    ck_assert_int_eq(rill_transcript_new(&p, &t), RILL_OK);
    rill_transcript_update_t u = say(t, "um", 3000);
    u = say(t, "uh well", 6000); /* nothing agrees, and the window is too long */
    ck_text(u.committed, u.committed_len, "uh well");
    ck_assert_int_eq(u.tentative_len, 0);
    ck_assert_int_eq(u.trim_ms, 6000); /* the last word's end: the window's */
    ck_assert_int_eq(rill_transcript_trim(t, u.trim_ms), RILL_OK);
    /* with committed words in the window: trimmed at the last one, the tail stays tentative */
    say(t, "so then we", 2000);
    u = say(t, "so then we went", 2500);
    ck_text(u.committed, u.committed_len, " so then we");
    u = say(t, "so then we went home", 5500);
    ck_text(u.committed, u.committed_len, " went");
    ck_text(u.tentative, u.tentative_len, "home");
    ck_assert_int_gt(u.trim_ms, 6000);
    ck_assert_int_lt(u.trim_ms, 6000 + 5500);
    rill_transcript_destroy(&t);
}
END_TEST

/* The prompt is the committed text's tail, at most prompt_bytes, starting at a word; dropping
 * committed text keeps that tail, so an hour of speech stays bounded. The stream: one word a
 * second, sentences of five words; every second the caller decodes its window again (segments
 * per sentence, a sentence's end known once it is complete) and trims where it is told. The
 * committed pieces, put together, are the whole stream in order, each word once. */
START_TEST(an_hour_stays_bounded_and_whole) {
    enum { SECONDS = 3600, PER_SENTENCE = 5 };
    rill_transcript_params_t p = rill_transcript_default_params();
    p.prompt_bytes = 40;
    rill_transcript_t *t = NULL;
    ck_assert_int_eq(rill_transcript_new(&p, &t), RILL_OK);
    size_t cap = (size_t)SECONDS * 8, got_len = 0, want_len = 0;
    char *got = malloc(cap), *want = malloc(cap);
    char text[16][64];
    rill_transcript_seg_t segs[16];
    int64_t ws = 0, longest = 0;
    for (int i = 0; i < SECONDS; i++) {
        want_len += (size_t)snprintf(want + want_len, cap - want_len, "%sw%d", i ? " " : "", i);
        int64_t now = (int64_t)(i + 1) * 1000;
        int n = 0;
        for (int g = (int)(ws / 1000); g <= i; g++) {
            int sentence = g / PER_SENTENCE;
            if (n == 0 || (g % PER_SENTENCE == 0)) { /* a new segment */
                int64_t t0 = (int64_t)sentence * PER_SENTENCE * 1000;
                int64_t t1 = t0 + PER_SENTENCE * 1000;
                segs[n].t0_ms = (t0 > ws ? t0 : ws) - ws;
                segs[n].t1_ms = t1 <= now ? t1 - ws : -1;
                text[n][0] = '\0';
                n++;
            }
            size_t l = strlen(text[n - 1]);
            snprintf(text[n - 1] + l, sizeof text[0] - l, "%sw%d", l ? " " : "", g);
        }
        for (int k = 0; k < n; k++) {
            segs[k].text = text[k];
            segs[k].len = strlen(text[k]);
        }
        rill_transcript_update_t u;
        ck_assert_int_eq(rill_transcript_update(t, segs, n, now - ws, &u), RILL_OK);
        memcpy(got + got_len, u.committed, u.committed_len);
        got_len += u.committed_len;
        if (u.trim_ms >= 0) {
            ck_assert_int_ge(u.trim_ms, ws);
            ck_assert_int_eq(rill_transcript_trim(t, u.trim_ms), RILL_OK);
            ws = u.trim_ms;
        }
        longest = now - ws > longest ? now - ws : longest;
        rill_transcript_drop_committed(t);
        size_t pn;
        const char *pr = rill_transcript_prompt(t, &pn);
        ck_assert_uint_le(pn, 40);
        ck_assert(pn == 0 || pr[0] == 'w');
        /* the prompt before the window ends with the last word of the trimmed sentence */
        size_t bn;
        const char *bp = rill_transcript_prompt_before(t, &bn);
        ck_assert_uint_le(bn, 40);
        if (ws == 0) {
            ck_assert_uint_eq(bn, 0);
        } else {
            ck_assert(bn > 0 && bp[0] == 'w');
            const char *lw = bp + bn;
            while (lw > bp && lw[-1] != 'w') {
                lw--;
            }
            ck_assert_int_eq(strtol(lw, NULL, 10) + 1, ws / 1000);
        }
        /* kept: that prompt and the committed words still in the window (under 3 sentences) */
        ck_assert_uint_le(strlen(rill_transcript_committed(t, NULL)), 40 + 3 * PER_SENTENCE * 6);
    }
    rill_transcript_update_t u;
    ck_assert_int_eq(rill_transcript_finish(t, &u), RILL_OK);
    memcpy(got + got_len, u.committed, u.committed_len);
    got_len += u.committed_len;
    ck_assert_msg(got_len == want_len && memcmp(got, want, got_len) == 0,
                  "the pieces differ from the stream (%zu vs %zu bytes)", got_len, want_len);
    ck_assert_int_eq(rill_transcript_n_words(t), SECONDS);
    ck_assert_int_eq(rill_transcript_committed_total(t), (int64_t)want_len);
    /* trimmed at sentence ends: the window never holds much more than two sentences */
    ck_assert_int_le(longest, 3 * PER_SENTENCE * 1000);
    rill_mem_stats_t st = rill_mem_stats(RILL_MEM_SCHEDULER);
    ck_assert_int_lt(st.peak_bytes, 1 << 16);
    free(got);
    free(want);
    rill_transcript_destroy(&t);
}
END_TEST

START_TEST(bad_input_changes_nothing) {
    rill_transcript_t *t = NULL;
    rill_transcript_params_t p = rill_transcript_default_params();
    p.max_window_ms = 10;
    ck_assert_int_eq(rill_transcript_new(&p, &t), RILL_EINVAL);
    p = rill_transcript_default_params();
    p.prompt_bytes = 1;
    ck_assert_int_eq(rill_transcript_new(&p, &t), RILL_EINVAL);
    ck_assert_int_eq(rill_transcript_new(NULL, NULL), RILL_EINVAL);
    t = fresh();
    say(t, "keep this", 1000);
    say(t, "keep this and", 2000);
    rill_transcript_seg_t bad[][2] = {
        { seg("x", 500, 100), seg("y", 600, 700) }, /* t1 < t0 */
        { seg("x", 500, 600), seg("y", 100, 700) }, /* out of order */
        { seg("x", -5, 600), seg("y", 600, 700) },  /* negative */
        { { NULL, 3, 0, 10 }, seg("y", 600, 700) }, /* NULL text */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(rill_transcript_update(t, bad[i], 2, 2000, NULL), RILL_EINVAL);
    }
    ck_assert_int_eq(rill_transcript_update(t, NULL, 1, 2000, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_transcript_update(t, bad[0], -1, 2000, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_transcript_update(NULL, bad[0], 1, 2000, NULL), RILL_EINVAL);
    size_t n;
    const char *c = rill_transcript_committed(t, &n);
    ck_text(c, n, "keep this");
    c = rill_transcript_tentative(t, &n);
    ck_text(c, n, "and");
    /* the previous hypothesis survived: the next one still agrees with it */
    rill_transcript_update_t u = say(t, "keep this and more", 3000);
    ck_text(u.committed, u.committed_len, " and");
    /* a window with no speech drops the tentative tail */
    ck_assert_int_eq(rill_transcript_update(t, NULL, 0, 3000, &u), RILL_OK);
    ck_assert_int_eq(u.tentative_len, 0);
    rill_transcript_destroy(&t);
}
END_TEST

/* Every allocation of creation and of an update that must grow its buffers can fail: the call
 * reports RILL_ENOMEM and the transcript is as before (the next update works). */
START_TEST(allocation_failure_changes_nothing) {
    for (int64_t k = 1; k < 8; k++) {
        rill_transcript_t *t = NULL;
        rill_mem_fail_nth(k);
        rill_err_t e = rill_transcript_new(NULL, &t);
        rill_mem_fail_nth(0);
        ck_assert(e == RILL_OK || e == RILL_ENOMEM);
        if (e == RILL_ENOMEM) {
            ck_assert_ptr_null(t);
        } else {
            rill_transcript_destroy(&t);
        }
    }
    rill_transcript_t *t = fresh();
    say(t, "a b", 1000);
    say(t, "a b c", 1000);
    char big[4096];
    memset(big, 'z', sizeof big);
    for (size_t i = 5; i < sizeof big; i += 6) {
        big[i] = ' ';
    }
    big[sizeof big - 1] = '\0';
    int failures = 0;
    for (int64_t k = 1; k < 16; k++) {
        int64_t before = rill_mem_calls();
        rill_transcript_seg_t s = seg(big, 0, -1);
        rill_mem_fail_nth(k);
        rill_err_t e = rill_transcript_update(t, &s, 1, 2000, NULL);
        rill_mem_fail_nth(0);
        if (e == RILL_OK) {
            ck_assert_int_lt(rill_mem_calls() - before, k); /* no failure point left */
            break;
        }
        failures++;
        ck_assert_int_eq(e, RILL_ENOMEM);
        size_t n;
        const char *c = rill_transcript_committed(t, &n);
        ck_text(c, n, "a b");
        c = rill_transcript_tentative(t, &n);
        ck_text(c, n, "c");
    }
    ck_assert_int_gt(failures, 0);
    rill_transcript_destroy(&t);
}
END_TEST

int main(void) {
    Suite *su = suite_create("transcript");
    TCase *tc = tcase_create("transcript");
    tcase_add_test(tc, agreement_commits_what_two_hypotheses_share);
    tcase_add_test(tc, words_are_compared_whole);
    tcase_add_test(tc, committed_words_are_skipped_by_time_and_repeat);
    tcase_add_test(tc, windows_trim_at_committed_segments);
    tcase_add_test(tc, long_windows_are_forced_to_trim);
    tcase_add_test(tc, an_hour_stays_bounded_and_whole);
    tcase_add_test(tc, bad_input_changes_nothing);
    tcase_add_test(tc, allocation_failure_changes_nothing);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
