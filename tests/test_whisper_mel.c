/*
 * test_whisper_mel.c - the log-mel front end (forward/rill_mel.h) against faster-whisper.
 *
 * The oracle's features are tests/data/ref/whisper/mel_<clip>.f32 (tools/ref_whisper.py: the
 * output of faster-whisper 1.2.1's FeatureExtractor()(samples), [80][n/160 + 1]), for
 *   birch        tests/data/audio/birch_canoe_espeak.wav (espeak-ng, committed)
 *   lv0880       LibriVox clip 0880 of Debian's pocketsphinx-testdata (the suite exits 77
 *                without it; scripts/setup.sh installs it)
 *   synth        12,345 samples of integer noise under a ramp (synth() = the tool's
 *                synth_samples(): not a whole number of hops)
 *   synth_short  30 samples of it: shorter than the reflect pad (200), one frame
 * with the filterbank of mel_filters.f32 (faster-whisper's, bit for bit the GGUF's; see
 * test_whisper_vocab.c), so the suite needs no model file.
 *
 * Tolerance (derived in FEATURE_TOL's comment): every feature within 2e-4 of the oracle, and
 * the mean absolute difference within 2e-6. Then what the oracle cannot tell: appending in
 * random pieces gives bit for bit the one-shot features, at every intermediate length too;
 * rill_mel_drop() gives bit for bit a fresh front end on the remaining samples; bad input is
 * refused and changes nothing; every allocation failure in rill_mel_new() is RILL_ENOMEM and
 * leaks nothing. The streaming cost is measured and printed (not asserted).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_alloc.h"
#include "rill_mel.h"
#include "test_util.h"

#define REF_DIR RILL_SOURCE_DIR "/tests/data/ref/whisper/"
#define LV0880 \
    "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
#define N_MELS 80

/* Tolerance. Both sides compute in float32 (numpy >= 2.0 transforms float32 input in float32),
 * so the features differ by rounding only, and what amplifies it is the log: a mel energy with
 * relative error r moves L = log10(mel) by r / ln(10), and the feature (L + 4) / 4 by a quarter
 * of that. The FFT's rounding is bounded relative to the frame's energy, about
 * eps * log2(400) ~ 5e-7 of the power of the frame's loudest bins (eps = 6e-8), so a band at a
 * fraction f of its frame's peak gets r ~ 5e-7 / f and a feature error ~ 5e-8 / f. The (M - 8)
 * clamp keeps bands below 1e-8 of the clip's peak out; in 16-bit recordings the quantisation
 * noise keeps bands above ~1e-4 of their frame's peak, which gives ~5e-4 at the very worst;
 * measured (printed by the test) the worst feature is 1.7e-5 off (birch, a quiet band next to
 * espeak's exact-zero pauses), the mean 1.6e-7. We allow 2e-4 for the maximum (12x what was
 * measured) and 2e-6 for the mean (12x). What a mistake costs, measured with numpy on birch: a
 * symmetric instead of periodic Hann window 4.5e-2, the audio one sample early 5.1e-2; a
 * wrong frame count (faster-whisper's padding=160 forgotten) fails the frame count itself. */
#define FEATURE_TOL      2e-4
#define FEATURE_MEAN_TOL 2e-6

static float *g_filters; /* [N_MELS][201] */

/* ---- inputs ------------------------------------------------------------------------------ */

/* 16 kHz mono 16-bit PCM WAV -> malloc'd float samples (int16 / 32768); *n gets the count. */
static float *read_wav(const char *path, int64_t *n) {
    size_t len = 0;
    unsigned char *b = test_read_file(path, &len);
    ck_assert_msg(b != NULL, "%s unreadable", path);
    ck_assert(len >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WAVE", 4) == 0);
    size_t p = 12;
    const unsigned char *data = NULL;
    uint32_t data_len = 0;
    bool fmt_ok = false;
    while (p + 8 <= len) {
        uint32_t sz = (uint32_t)b[p + 4] | (uint32_t)b[p + 5] << 8 | (uint32_t)b[p + 6] << 16 |
                      (uint32_t)b[p + 7] << 24;
        ck_assert(sz <= len - p - 8);
        if (memcmp(b + p, "fmt ", 4) == 0 && sz >= 16) {
            const unsigned char *f = b + p + 8;
            unsigned fmt = f[0] | f[1] << 8, ch = f[2] | f[3] << 8, bits = f[14] | f[15] << 8;
            uint32_t rate = (uint32_t)f[4] | (uint32_t)f[5] << 8 | (uint32_t)f[6] << 16;
            fmt_ok = fmt == 1 && ch == 1 && bits == 16 && rate == 16000;
        } else if (memcmp(b + p, "data", 4) == 0) {
            data = b + p + 8;
            data_len = sz;
        }
        p += 8 + sz + (sz & 1);
    }
    ck_assert_msg(fmt_ok && data != NULL, "%s: not 16 kHz mono PCM16", path);
    *n = data_len / 2;
    float *x = malloc((size_t)(*n + 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < *n; i++) {
        int16_t v = (int16_t)(data[2 * i] | data[2 * i + 1] << 8);
        x[i] = (float)v / 32768.0f;
    }
    free(b);
    return x;
}

/* tools/ref_whisper.py's synth_samples(n). */
static float *synth(int64_t n) {
    float *x = malloc((size_t)(n + 1) * sizeof(float));
    ck_assert_ptr_nonnull(x);
    uint32_t s = 12345;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        int64_t v = (int64_t)(s >> 16) - 32768;
        int64_t q = v * (i % 4000) / 4000; /* C truncates toward zero, as the tool does */
        x[i] = (float)((double)q / 32768.0);
    }
    return x;
}

static float *clip(const char *name, int64_t *n) {
    if (strcmp(name, "birch") == 0) {
        return read_wav(RILL_SOURCE_DIR "/tests/data/audio/birch_canoe_espeak.wav", n);
    }
    if (strcmp(name, "lv0880") == 0) {
        return read_wav(LV0880, n);
    }
    *n = strcmp(name, "synth") == 0 ? 12345 : 30;
    return synth(*n);
}

/* The filterbank, read on first use (inside a test: test_read_file asserts). */
static const float *filters(void) {
    if (g_filters == NULL) {
        size_t len = 0;
        g_filters = test_read_file(REF_DIR "mel_filters.f32", &len);
        ck_assert_uint_eq(len, N_MELS * RILL_MEL_N_FREQ * sizeof(float));
    }
    return g_filters;
}

static rill_mel_t *make(int64_t cap) {
    filters();
    rill_mel_t *m = NULL;
    ck_assert_int_eq(rill_mel_new(g_filters, N_MELS, cap, &m), RILL_OK);
    return m;
}

/* All features of m into a malloc'd [N_MELS][frames] array. */
static float *features(rill_mel_t *m, int64_t *frames) {
    *frames = rill_mel_n_frames(m);
    float *f = malloc((size_t)(*frames * N_MELS) * sizeof(float));
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(rill_mel_features(m, 0, *frames, f, *frames), RILL_OK);
    return f;
}

/* ---- against the oracle ------------------------------------------------------------------ */

static const char *g_clips[] = { "birch", "lv0880", "synth", "synth_short" };

START_TEST(test_matches_faster_whisper) {
    const char *name = g_clips[_i];
    int64_t n = 0;
    float *x = clip(name, &n);
    char path[TEST_PATH_MAX];
    snprintf(path, sizeof path, REF_DIR "mel_%s.f32", name);
    size_t len = 0;
    float *want = test_read_file(path, &len);
    ck_assert_ptr_nonnull(want);
    rill_mel_t *m = make(n + 1);
    ck_assert_int_eq(rill_mel_append(m, x, n), RILL_OK);
    int64_t frames = 0;
    float *got = features(m, &frames);
    ck_assert_int_eq(frames, n / 160 + 1);
    ck_assert_uint_eq(len, (size_t)(frames * N_MELS) * sizeof(float));
    double worst = 0, sum = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < frames * N_MELS; i++) {
        double d = fabs((double)got[i] - (double)want[i]);
        sum += d;
        if (d > worst) {
            worst = d;
            at = i;
        }
    }
    double mean = sum / (double)(frames * N_MELS);
    printf("mel %-11s %5lld frames: max |d| %.3g (mel %lld, frame %lld), mean |d| %.3g\n", name,
           (long long)frames, worst, (long long)(at / frames), (long long)(at % frames), mean);
    ck_assert_msg(worst <= FEATURE_TOL, "%s: max |d| %g at %lld", name, worst, (long long)at);
    ck_assert_msg(mean <= FEATURE_MEAN_TOL, "%s: mean |d| %g", name, mean);
    rill_mel_destroy(&m);
    free(got);
    free(want);
    free(x);
}
END_TEST

/* ---- streaming: pieces, prefixes, dropping ------------------------------------------------ */

START_TEST(test_pieces_bitwise) {
    int64_t n = 0;
    float *x = clip("lv0880", &n);
    rill_mel_t *whole = make(n);
    rill_mel_t *inc = make(n);
    rill_rand_t *r = test_rng();
    int64_t at = 0;
    int checks = 0;
    while (at < n) {
        int64_t k = 1 + test_rand_below(r, 3000);
        k = k > n - at ? n - at : k;
        ck_assert_int_eq(rill_mel_append(inc, x + at, k), RILL_OK);
        at += k;
        /* the prefix so far, at once */
        rill_mel_reset(whole);
        ck_assert_int_eq(rill_mel_append(whole, x, at), RILL_OK);
        int64_t fa = 0, fb = 0;
        float *a = features(whole, &fa);
        float *b = features(inc, &fb);
        ck_assert_int_eq(fa, fb);
        ck_assert_msg(memcmp(a, b, (size_t)(fa * N_MELS) * sizeof(float)) == 0,
                      "features after %lld samples in pieces differ from one append",
                      (long long)at);
        free(a);
        free(b);
        checks++;
    }
    ck_assert_int_gt(checks, 10);
    /* A sub-range with a stride writes exactly its frames and nothing around them. */
    int64_t frames = rill_mel_n_frames(inc);
    float *all = features(inc, &frames);
    const int64_t first = 37, count = 100, stride = 160;
    float *part = malloc((size_t)(N_MELS * stride) * sizeof(float));
    ck_assert_ptr_nonnull(part);
    for (int64_t i = 0; i < N_MELS * stride; i++) {
        part[i] = 99.0f;
    }
    ck_assert_int_eq(rill_mel_features(inc, first, count, part, stride), RILL_OK);
    for (int b = 0; b < N_MELS; b++) {
        for (int64_t t = 0; t < stride; t++) {
            float v = part[b * stride + t];
            ck_assert(t < count ? v == all[b * frames + first + t] : v == 99.0f);
        }
    }
    free(part);
    free(all);
    rill_mel_destroy(&whole);
    rill_mel_destroy(&inc);
    free(x);
}
END_TEST

START_TEST(test_drop_is_fresh_start) {
    int64_t n = 0;
    float *x = clip("birch", &n);
    const int64_t hops[] = { 0, 1, 2, 3, 100, 200 };
    for (size_t h = 0; h < sizeof hops / sizeof hops[0]; h++) {
        rill_mel_t *m = make(n + 5000);
        ck_assert_int_eq(rill_mel_append(m, x, n), RILL_OK);
        ck_assert_int_eq(rill_mel_drop(m, hops[h]), RILL_OK);
        int64_t gone = hops[h] * 160;
        ck_assert_int_eq(rill_mel_n_samples(m), n - gone);
        rill_mel_t *fresh = make(n + 5000);
        ck_assert_int_eq(rill_mel_append(fresh, x + gone, n - gone), RILL_OK);
        int64_t fa = 0, fb = 0;
        float *a = features(m, &fa);
        float *b = features(fresh, &fb);
        ck_assert_int_eq(fa, fb);
        ck_assert_msg(memcmp(a, b, (size_t)(fa * N_MELS) * sizeof(float)) == 0,
                      "after dropping %lld hops", (long long)hops[h]);
        /* and it keeps streaming: more audio after the drop */
        ck_assert_int_eq(rill_mel_append(m, x, 5000), RILL_OK);
        ck_assert_int_eq(rill_mel_append(fresh, x, 5000), RILL_OK);
        free(a);
        free(b);
        a = features(m, &fa);
        b = features(fresh, &fb);
        ck_assert(fa == fb && memcmp(a, b, (size_t)(fa * N_MELS) * sizeof(float)) == 0);
        free(a);
        free(b);
        rill_mel_destroy(&m);
        rill_mel_destroy(&fresh);
    }
    /* More hops than the buffer has: what is left is the remainder of the last hop. */
    rill_mel_t *m = make(n);
    ck_assert_int_eq(rill_mel_append(m, x, 1000), RILL_OK);
    ck_assert_int_eq(rill_mel_drop(m, 1000000), RILL_OK);
    ck_assert_int_eq(rill_mel_n_samples(m), 1000 % 160);
    ck_assert_int_eq(rill_mel_n_frames(m), 1);
    rill_mel_destroy(&m);
    free(x);
}
END_TEST

/* ---- bad input -------------------------------------------------------------------------- */

START_TEST(test_bad_input_changes_nothing) {
    int64_t n = 0;
    float *x = clip("synth", &n);
    rill_mel_t *m = make(8000);
    ck_assert_int_eq(rill_mel_append(m, x, 5000), RILL_OK);
    int64_t f0 = 0;
    float *before = features(m, &f0);

    float bad[300];
    memcpy(bad, x, sizeof bad);
    bad[123] = NAN;
    ck_assert_int_eq(rill_mel_append(m, bad, 300), RILL_EINVAL);
    bad[123] = INFINITY;
    ck_assert_int_eq(rill_mel_append(m, bad, 300), RILL_EINVAL);
    bad[123] = -INFINITY;
    ck_assert_int_eq(rill_mel_append(m, bad, 300), RILL_EINVAL);
    bad[123] = -2e15f;
    ck_assert_int_eq(rill_mel_append(m, bad, 300), RILL_ERANGE);
    bad[123] = RILL_MEL_MAX_ABS; /* the largest taken: finite features */
    rill_mel_t *big = make(300);
    ck_assert_int_eq(rill_mel_append(big, bad, 300), RILL_OK);
    float row[N_MELS * 2];
    ck_assert_int_eq(rill_mel_features(big, 0, 2, row, 2), RILL_OK);
    for (int i = 0; i < N_MELS * 2; i++) {
        ck_assert(isfinite(row[i]));
    }
    rill_mel_destroy(&big);
    ck_assert_int_eq(rill_mel_append(m, x, 3001), RILL_EFULL); /* 5000 + 3001 > 8000 */
    ck_assert_int_eq(rill_mel_append(m, NULL, 5), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_append(m, x, -1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_append(NULL, x, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_append(m, NULL, 0), RILL_OK);
    ck_assert_int_eq(rill_mel_drop(m, -1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_drop(NULL, 1), RILL_EINVAL);

    float out[N_MELS * 4];
    int64_t frames = rill_mel_n_frames(m);
    ck_assert_int_eq(rill_mel_features(m, -1, 1, out, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(m, frames - 1, 2, out, 2), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(m, 0, 4, out, 3), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(m, 0, -1, out, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(m, 0, 1, NULL, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(NULL, 0, 1, out, 1), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_features(m, frames, 0, NULL, 0), RILL_OK);

    ck_assert_int_eq(rill_mel_n_samples(m), 5000);
    int64_t f1 = 0;
    float *after = features(m, &f1);
    ck_assert(f0 == f1 && memcmp(before, after, (size_t)(f0 * N_MELS) * sizeof(float)) == 0);
    free(before);
    free(after);
    rill_mel_destroy(&m);
    rill_mel_destroy(&m); /* NULL-safe */
    rill_mel_destroy(NULL);
    ck_assert_int_eq(rill_mel_n_frames(NULL), 0);
    ck_assert_int_eq(rill_mel_n_samples(NULL), 0);

    /* creation */
    filters();
    rill_mel_t *o = (rill_mel_t *)&o;
    ck_assert_int_eq(rill_mel_new(NULL, N_MELS, 100, &o), RILL_EINVAL);
    ck_assert_ptr_null(o);
    ck_assert_int_eq(rill_mel_new(g_filters, N_MELS, 100, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_new(g_filters, 0, 100, &o), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_new(g_filters, RILL_MEL_MAX_MELS + 1, 100, &o), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_new(g_filters, N_MELS, 0, &o), RILL_EINVAL);
    ck_assert_int_eq(rill_mel_new(g_filters, N_MELS, (int64_t)1 << 31, &o), RILL_EINVAL);
    float *f = malloc(N_MELS * RILL_MEL_N_FREQ * sizeof(float));
    ck_assert_ptr_nonnull(f);
    memcpy(f, g_filters, N_MELS * RILL_MEL_N_FREQ * sizeof(float));
    f[5 * RILL_MEL_N_FREQ + 7] = NAN;
    ck_assert_int_eq(rill_mel_new(f, N_MELS, 100, &o), RILL_EINVAL);
    ck_assert(strstr(rill_last_error(RILL_EINVAL), "mel 5") != NULL);
    f[5 * RILL_MEL_N_FREQ + 7] = -0.5f;
    ck_assert_int_eq(rill_mel_new(f, N_MELS, 100, &o), RILL_EINVAL);
    ck_assert_ptr_null(o);
    free(f);
    free(x);
}
END_TEST

START_TEST(test_alloc_failure) {
    filters();
    int64_t live = rill_mem_stats(RILL_MEM_MODEL).n_live;
    int64_t before = rill_mem_calls();
    rill_mel_t *m = make(16000);
    int64_t points = rill_mem_calls() - before;
    rill_mel_destroy(&m);
    ck_assert_int_ge(points, 8);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t e = rill_mel_new(g_filters, N_MELS, 16000, &m);
        rill_mem_fail_nth(0);
        ck_assert_msg(e == RILL_ENOMEM, "allocation %lld of %lld failing gave %s", (long long)k,
                      (long long)points, rill_err_name(e));
        ck_assert_ptr_null(m);
        ck_assert_int_eq(rill_mem_stats(RILL_MEM_MODEL).n_live, live);
    }
    /* nothing allocates after creation */
    int64_t n = 0;
    float *x = clip("synth", &n);
    m = make(n);
    before = rill_mem_calls();
    ck_assert_int_eq(rill_mel_append(m, x, n), RILL_OK);
    int64_t frames = 0;
    float *f = features(m, &frames);
    ck_assert_int_eq(rill_mel_drop(m, 3), RILL_OK);
    ck_assert_int_eq(rill_mem_calls(), before);
    free(f);
    free(x);
    rill_mel_destroy(&m);
}
END_TEST

/* ---- cost --------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The streaming recognizer's pattern: a 30 s window, 1 s appended (and the oldest second
 * dropped once full) and the whole window read each time; against recomputing the window from
 * scratch. Printed, not asserted (shared machines). */
START_TEST(test_streaming_cost) {
    int64_t n = 0;
    float *x = clip("lv0880", &n);
    const int64_t win = 30 * 16000, step = 16000, total = 60 * 16000;
    float *audio = malloc((size_t)total * sizeof(float));
    ck_assert_ptr_nonnull(audio);
    for (int64_t i = 0; i < total; i++) {
        audio[i] = x[i % n];
    }
    float *out = malloc((size_t)(N_MELS * 3000) * sizeof(float));
    ck_assert_ptr_nonnull(out);
    rill_mel_t *m = make(win);
    double t0 = now_s();
    int steps = 0;
    for (int64_t at = 0; at < total; at += step, steps++) {
        if (rill_mel_n_samples(m) + step > win) {
            ck_assert_int_eq(rill_mel_drop(m, step / 160), RILL_OK);
        }
        ck_assert_int_eq(rill_mel_append(m, audio + at, step), RILL_OK);
        int64_t fr = rill_mel_n_frames(m) - 1 < 3000 ? rill_mel_n_frames(m) - 1 : 3000;
        ck_assert_int_eq(rill_mel_features(m, 0, fr, out, 3000), RILL_OK);
    }
    double inc = (now_s() - t0) / steps;
    rill_mel_t *fresh = make(win);
    t0 = now_s();
    ck_assert_int_eq(rill_mel_append(fresh, audio + total - win, win), RILL_OK);
    ck_assert_int_eq(rill_mel_features(fresh, 0, 3000, out, 3000), RILL_OK);
    double full = now_s() - t0;
    /* the slid window equals a fresh computation of the same 30 s */
    float *a = malloc((size_t)(N_MELS * 3001) * sizeof(float));
    float *b = malloc((size_t)(N_MELS * 3001) * sizeof(float));
    ck_assert(a != NULL && b != NULL);
    ck_assert_int_eq(rill_mel_features(m, 0, 3001, a, 3001), RILL_OK);
    ck_assert_int_eq(rill_mel_features(fresh, 0, 3001, b, 3001), RILL_OK);
    ck_assert(memcmp(a, b, (size_t)(N_MELS * 3001) * sizeof(float)) == 0);
    printf("mel cost: per 1 s step of a sliding 30 s window (drop + append + read) %.2f ms; "
           "a 30 s window from scratch %.2f ms\n",
           1e3 * inc, 1e3 * full);
    free(a);
    free(b);
    rill_mel_destroy(&m);
    rill_mel_destroy(&fresh);
    free(out);
    free(audio);
    free(x);
}
END_TEST

static Suite *mel_suite(void) {
    Suite *s = suite_create("whisper_mel");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_matches_faster_whisper, 0, 4);
    tcase_add_test(tc, test_pieces_bitwise);
    tcase_add_test(tc, test_drop_is_fresh_start);
    tcase_add_test(tc, test_bad_input_changes_nothing);
    tcase_add_test(tc, test_alloc_failure);
    tcase_add_test(tc, test_streaming_cost);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    if (!test_file_exists(LV0880)) {
        printf("SKIP: %s is missing: install pocketsphinx-testdata (scripts/setup.sh)\n", LV0880);
        return TEST_SKIP;
    }
    SRunner *sr = srunner_create(mel_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    free(g_filters);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
