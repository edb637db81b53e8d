/*
 * test_audio.c - the audio sources of ingest/ (ingest/rill_audio.h): the resampler, files, the
 * packet decoder, capture (through its callback and through ALSA's null device), voice activity.
 *
 * Test audio is made here, at test time: sines written as WAV, FLAC and Ogg Opus with libsndfile
 * into a temporary directory, Opus packets made with libopus's encoder. Nothing large is checked
 * in. Accuracy is measured by a least-squares fit of the expected sine (amplitude and phase at
 * the known frequency, DC) over the middle of the output: a wrong frequency, a lost or doubled
 * block, a time shift or a gain error all show up as a residual or as a wrong amplitude/phase.
 *
 * Failure paths on purpose (STYLE.md rule 26): absurd rates and channel counts, NaN/inf/huge
 * samples, garbage and truncated files, invalid Opus packets between good ones (the output must
 * stay bit-identical to a decoder that never saw them), a buffer too small, every allocation of
 * every constructor failing in turn (each gives RILL_ENOMEM and leaks nothing: n_live, and
 * AddressSanitizer in the ASan build).
 *
 * ALSA's null device: main() points HOME at the temporary directory, whose .asoundrc defines a
 * PCM "rill_null" of type null (PortAudio skips the predefined "null" by name), before anything
 * initialises PortAudio. Where PortAudio offers no such device the test says why and passes
 * without it.
 */
#include <check.h>
#include <float.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <opus/opus.h>
#include <portaudio.h>
#include <sndfile.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_audio.h"
#include "rill_core.h"
#include "test_util.h"

static char g_dir[TEST_PATH_MAX];

#define PI 3.14159265358979323846

/* ---- helpers -------------------------------------------------------------------------------- */

/* Interleaved frames of a sine: channel c gets amp * sin(2 pi f t) scaled by (1 - 0.25 c) for
 * channel c < 2, so the mix of a stereo sine is amp * 0.875 * sin. Caller frees. */
static float *sine(int32_t rate, int32_t ch, int64_t frames, double f, double amp) {
    float *x = malloc((size_t)(frames * ch) * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (int64_t i = 0; i < frames; i++) {
        double v = amp * sin(2.0 * PI * f * (double)i / rate);
        for (int32_t c = 0; c < ch; c++) {
            x[i * ch + c] = (float)(c == 1 ? 0.75 * v : v);
        }
    }
    return x;
}

/* Least-squares fit of a sin(wt) + b cos(wt) + dc to x[from..to) at 16 kHz. */
typedef struct fit {
    double a, b, amp, resid_rms;
} fit_t;

static fit_t fit_sine(const float *x, int64_t from, int64_t to, double f) {
    double w = 2.0 * PI * f / RILL_AUDIO_RATE;
    double ss = 0, cc = 0, sc = 0, s1 = 0, c1 = 0, n = 0, xs = 0, xc = 0, x1 = 0;
    for (int64_t i = from; i < to; i++) {
        double s = sin(w * (double)i), c = cos(w * (double)i);
        ss += s * s, cc += c * c, sc += s * c, s1 += s, c1 += c, n += 1;
        xs += x[i] * s, xc += x[i] * c, x1 += x[i];
    }
    /* Solve the 3x3 normal equations by Cramer's rule. */
    double m[3][3] = { { ss, sc, s1 }, { sc, cc, c1 }, { s1, c1, n } }, r[3] = { xs, xc, x1 };
#define DET3(M)                                          \
    (M[0][0] * (M[1][1] * M[2][2] - M[1][2] * M[2][1]) - \
     M[0][1] * (M[1][0] * M[2][2] - M[1][2] * M[2][0]) + \
     M[0][2] * (M[1][0] * M[2][1] - M[1][1] * M[2][0]))
    double det = DET3(m), sol[3];
    for (int k = 0; k < 3; k++) {
        double t[3][3];
        memcpy(t, m, sizeof t);
        for (int i = 0; i < 3; i++) {
            t[i][k] = r[i];
        }
        sol[k] = DET3(t) / det;
    }
#undef DET3
    double e = 0;
    for (int64_t i = from; i < to; i++) {
        double d = x[i] - (sol[0] * sin(w * (double)i) + sol[1] * cos(w * (double)i) + sol[2]);
        e += d * d;
    }
    fit_t out = { sol[0], sol[1], hypot(sol[0], sol[1]), sqrt(e / n) };
    return out;
}

/* Resamples all of x (frames at rate, ch channels) in chunks of `chunk` frames (0: random
 * chunks), flushes; returns the output (caller frees) and its length in *n_out. */
static float *resample_all(int32_t rate, int32_t ch, const float *x, int64_t frames, size_t chunk,
                           int64_t *n_out) {
    rill_audio_resampler_t *r = NULL;
    ck_assert_int_eq(rill_audio_resampler_new(rate, ch, &r), RILL_OK);
    size_t cap = (size_t)((frames * RILL_AUDIO_RATE + rate - 1) / rate) + 16;
    float *out = malloc(cap * sizeof *out);
    ck_assert_ptr_nonnull(out);
    int64_t w = 0, done = 0;
    while (done < frames) {
        size_t k = chunk > 0 ? chunk : 1 + test_rand_below(test_rng(), 3000);
        k = (int64_t)k < frames - done ? k : (size_t)(frames - done);
        ck_assert_uint_le(rill_audio_resampler_out_max(r, k), cap - (size_t)w);
        int64_t got = rill_audio_resampler_push(r, x + done * ch, k, out + w, cap - (size_t)w);
        ck_assert_int_ge(got, 0);
        w += got;
        done += (int64_t)k;
    }
    int64_t got = rill_audio_resampler_flush(r, out + w, cap - (size_t)w);
    ck_assert_int_ge(got, 0);
    w += got;
    ck_assert_int_eq(rill_audio_resampler_flush(r, out + w, cap - (size_t)w), 0);
    rill_audio_stats_t st = rill_audio_resampler_stats(r);
    ck_assert_int_eq(st.frames_in, frames);
    ck_assert_int_eq(st.samples_out, w);
    rill_audio_resampler_destroy(&r);
    ck_assert_ptr_null(r);
    *n_out = w;
    return out;
}

/* Writes frames of x (ch channels at rate) to path in format. */
static void write_sf(const char *path, int format, int32_t rate, int32_t ch, const float *x,
                     int64_t frames) {
    SF_INFO info = { .samplerate = rate, .channels = ch, .format = format };
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    ck_assert_msg(f != NULL, "sf_open(%s): %s", path, sf_strerror(NULL));
    ck_assert_int_eq(sf_writef_float(f, x, frames), frames);
    ck_assert_int_eq(sf_close(f), 0);
}

/* Reads the whole file in chunks of `chunk` samples; returns the samples (caller frees). */
static float *read_all(const char *path, size_t chunk, int64_t *n_out,
                       rill_audio_file_info_t *info) {
    rill_audio_file_t *f = NULL;
    rill_err_t err = rill_audio_file_open(path, &f);
    ck_assert_msg(err == RILL_OK, "%s: %s", path, rill_last_error(err));
    *info = rill_audio_file_info(f);
    size_t cap = info->samples > 0 ? (size_t)info->samples + 8 : (size_t)1 << 22;
    float *out = malloc(cap * sizeof *out);
    ck_assert_ptr_nonnull(out);
    int64_t w = 0;
    for (;;) {
        size_t k = chunk < cap - (size_t)w ? chunk : cap - (size_t)w;
        int64_t got = rill_audio_file_read(f, out + w, k);
        ck_assert_msg(got >= 0, "%s: %s", path, rill_last_error((rill_err_t)got));
        if (got == 0) {
            break;
        }
        ck_assert_int_le(got, (int64_t)k);
        w += got;
    }
    ck_assert_int_eq(rill_audio_file_read(f, out, 4), 0); /* the end stays the end */
    rill_audio_stats_t st = rill_audio_file_stats(f);
    ck_assert_int_eq(st.samples_out, w);
    rill_audio_file_close(&f);
    ck_assert_ptr_null(f);
    *n_out = w;
    return out;
}

/* Runs make() with the k-th allocation failing for every k until it succeeds; each failure
 * must be RILL_ENOMEM with nothing left allocated. make() destroys what it made. */
static void every_alloc_fails(rill_err_t (*make)(void), const char *what) {
    int64_t live0 = rill_mem_stats(RILL_MEM_INGEST).n_live;
    int64_t calls0 = rill_mem_calls();
    ck_assert_int_eq(make(), RILL_OK);
    int64_t calls = rill_mem_calls() - calls0;
    ck_assert_int_gt(calls, 0);
    for (int64_t k = 1; k <= calls; k++) {
        rill_mem_fail_nth(k);
        rill_err_t err = make();
        rill_mem_fail_nth(0);
        ck_assert_msg(err == RILL_ENOMEM, "%s: allocation %lld of %lld failing gave %s", what,
                      (long long)k, (long long)calls, rill_err_name(err));
        ck_assert_int_eq(rill_mem_stats(RILL_MEM_INGEST).n_live, live0);
    }
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_INGEST).n_live, live0);
}

/* ---- resampler ------------------------------------------------------------------------------ */

/* A 1 kHz sine of amplitude 0.5 from 44.1 kHz (and other rates, mono and stereo) keeps its
 * frequency, amplitude and phase: the fit at exactly 1 kHz over the middle leaves a residual
 * below 1e-4 (-74 dB under the sine; libsoxr HQ is 20-bit), the amplitude is within 0.1 %, the
 * phase term b within 1e-3 (a time shift of 0.3 us), and the length is round(frames * 16000 /
 * rate). */
START_TEST(resample_sine_accuracy) {
    const struct {
        int32_t rate, ch;
    } cases[] = { { 44100, 1 }, { 48000, 1 }, { 22050, 1 }, { 8000, 1 },
                  { 16000, 1 }, { 44100, 2 }, { 96000, 2 }, { 11025, 1 } };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t rate = cases[c].rate, ch = cases[c].ch;
        int64_t frames = rate; /* 1 s */
        double amp = 0.5, f = 1000.0;
        float *x = sine(rate, ch, frames, f, amp);
        int64_t n = 0;
        float *y = resample_all(rate, ch, x, frames, 0, &n);
        ck_assert_int_eq(n, (frames * 16000 + rate / 2) / rate);
        double want = ch == 2 ? amp * 0.875 : amp;
        fit_t fit = fit_sine(y, n / 10, n - n / 10, f);
        ck_assert_msg(fit.resid_rms < 1e-4 && fabs(fit.amp - want) < 1e-3 * want &&
                          fabs(fit.b) < 1e-3,
                      "%d Hz x%d: amp %.6f (want %.6f), b %.2e, residual %.2e", rate, ch, fit.amp,
                      want, fit.b, fit.resid_rms);
        free(x);
        free(y);
    }
}
END_TEST

/* The output does not depend on the chunking: pushed at once, in 1-frame chunks and in random
 * chunks, the samples are bit-identical. At 16 kHz the output is the input exactly. */
START_TEST(resample_chunk_invariance) {
    int32_t rate = 44100;
    int64_t frames = 30000;
    float *x = sine(rate, 2, frames, 440.0, 0.7);
    int64_t n1, n2, n3;
    float *a = resample_all(rate, 2, x, frames, (size_t)frames, &n1);
    float *b = resample_all(rate, 2, x, frames, 1, &n2);
    float *c = resample_all(rate, 2, x, frames, 0, &n3);
    ck_assert_int_eq(n1, n2);
    ck_assert_int_eq(n1, n3);
    ck_assert(memcmp(a, b, (size_t)n1 * sizeof *a) == 0);
    ck_assert(memcmp(a, c, (size_t)n1 * sizeof *a) == 0);
    free(a), free(b), free(c), free(x);

    float *m = sine(16000, 1, 5000, 700.0, 0.3);
    int64_t nm;
    float *o = resample_all(16000, 1, m, 5000, 0, &nm);
    ck_assert_int_eq(nm, 5000);
    ck_assert(memcmp(m, o, 5000 * sizeof *m) == 0);
    free(m), free(o);
}
END_TEST

/* The bound out_max() states holds at the lowest and highest rates with random chunks, and what
 * the filter holds back (bound minus output) stays far below the packet decoder's 4096-sample
 * slack. */
START_TEST(resample_bound_at_the_limits) {
    const int32_t rates[] = { RILL_AUDIO_RATE_MIN, RILL_AUDIO_RATE_MAX, 11025, 44100 };
    for (size_t i = 0; i < sizeof rates / sizeof rates[0]; i++) {
        rill_audio_resampler_t *r = NULL;
        ck_assert_int_eq(rill_audio_resampler_new(rates[i], 1, &r), RILL_OK);
        static float in[8192], out[8192 * 2 + 8192];
        for (size_t k = 0; k < 8192; k++) {
            in[k] = (float)sin((double)k * 0.01);
        }
        size_t held_max = 0;
        for (int it = 0; it < 300; it++) {
            size_t k = test_rand_below(test_rng(), 8192);
            size_t bound = rill_audio_resampler_out_max(r, k);
            ck_assert_uint_le(bound, sizeof out / sizeof out[0]);
            int64_t got = rill_audio_resampler_push(r, in, k, out, bound);
            ck_assert_int_ge(got, 0);
            ck_assert_uint_le((size_t)got, bound);
            size_t held = rill_audio_resampler_out_max(r, 0);
            held_max = held > held_max ? held : held_max;
        }
        ck_assert_msg(held_max < 4096, "%d Hz: %zu samples held back", rates[i], held_max);
        ck_assert_int_ge(rill_audio_resampler_flush(r, out, rill_audio_resampler_out_max(r, 0)), 0);
        rill_audio_resampler_destroy(&r);
    }
}
END_TEST

/* Absurd formats are refused with RILL_ERANGE and a detail naming the value. */
START_TEST(resample_absurd_formats) {
    rill_audio_resampler_t *r = NULL;
    const int32_t bad_rates[] = { 0, -1, -44100, 7999, 384001, 10000000, INT32_MAX, INT32_MIN };
    for (size_t i = 0; i < sizeof bad_rates / sizeof bad_rates[0]; i++) {
        rill_err_t err = rill_audio_resampler_new(bad_rates[i], 1, &r);
        ck_assert_int_eq(err, RILL_ERANGE);
        ck_assert_ptr_null(r);
        char want[32];
        snprintf(want, sizeof want, "rate %d Hz", bad_rates[i]);
        ck_assert_msg(strstr(rill_last_error(err), want) != NULL, "%s", rill_last_error(err));
    }
    const int32_t bad_ch[] = { 0, -1, 33, 300, INT32_MAX };
    for (size_t i = 0; i < sizeof bad_ch / sizeof bad_ch[0]; i++) {
        rill_err_t err = rill_audio_resampler_new(16000, bad_ch[i], &r);
        ck_assert_int_eq(err, RILL_ERANGE);
        ck_assert(strstr(rill_last_error(err), "channels") != NULL);
    }
    ck_assert_int_eq(rill_audio_resampler_new(16000, 1, NULL), RILL_EINVAL);
}
END_TEST

/* NaN and infinities become 0, samples beyond [-1, 1] are clamped, each counted; the output is
 * then the output of the cleaned input exactly. */
START_TEST(resample_cleans_nan_inf) {
    const int64_t n = 4000;
    float *x = sine(48000, 2, n, 500.0, 0.5);
    float *clean = malloc((size_t)n * 2 * sizeof *clean);
    memcpy(clean, x, (size_t)n * 2 * sizeof *x);
    const struct {
        int64_t at;
        float v, c;
    } bad[] = { { 10, NAN, 0.0f },    { 11, INFINITY, 0.0f },  { 500, -INFINITY, 0.0f },
                { 1001, 3.0f, 1.0f }, { 2000, -1e30f, -1.0f }, { 3999, FLT_MAX, 1.0f },
                { 3000, -NAN, 0.0f } };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        x[bad[i].at] = bad[i].v;
        clean[bad[i].at] = bad[i].c;
    }
    int64_t na, nb;
    float *a = resample_all(48000, 2, x, n, 0, &na);
    float *b = resample_all(48000, 2, clean, n, 0, &nb);
    ck_assert_int_eq(na, nb);
    ck_assert(memcmp(a, b, (size_t)na * sizeof *a) == 0);
    for (int64_t i = 0; i < na; i++) {
        ck_assert(isfinite(a[i]) && fabsf(a[i]) <= 1.01f);
    }
    rill_audio_resampler_t *r = NULL;
    ck_assert_int_eq(rill_audio_resampler_new(48000, 2, &r), RILL_OK);
    static float out[4096];
    ck_assert_int_ge(rill_audio_resampler_push(r, x, (size_t)n, out, 4096), 0);
    rill_audio_stats_t st = rill_audio_resampler_stats(r);
    ck_assert_int_eq(st.cleaned, 4);
    ck_assert_int_eq(st.clipped, 3);
    rill_audio_resampler_destroy(&r);
    free(x), free(clean), free(a), free(b);

    /* A full-scale square wave: the filter's overshoot is clamped (and counted), never passed
     * on. Found by fuzz_audio (corpus/audio/regress-pcm16-overshoot). */
    int16_t sq[8000];
    for (int i = 0; i < 8000; i++) {
        sq[i] = (i / 20) % 2 ? INT16_MIN : INT16_MAX;
    }
    ck_assert_int_eq(rill_audio_resampler_new(8000, 1, &r), RILL_OK);
    static float o[20000];
    int64_t got = rill_audio_resampler_push_s16(r, sq, 8000, o, 20000);
    ck_assert_int_gt(got, 14000);
    got += rill_audio_resampler_flush(r, o + got, 20000 - (size_t)got);
    ck_assert_int_eq(got, 16000);
    float peak = 0.0f;
    for (int64_t i = 0; i < got; i++) {
        ck_assert(isfinite(o[i]) && o[i] <= 1.0f && o[i] >= -1.0f);
        peak = fabsf(o[i]) > peak ? fabsf(o[i]) : peak;
    }
    ck_assert(peak == 1.0f);
    ck_assert_int_gt(rill_audio_resampler_stats(r).clipped, 0);
    rill_audio_resampler_destroy(&r);
}
END_TEST

/* A refused push (room too small, NULL arguments) consumes nothing: the stream goes on as if it
 * had not happened. A push after the flush is refused until reset; reset starts afresh. The
 * 16-bit path equals the float path on x / 32768. */
START_TEST(resample_refusals_change_nothing) {
    float *x = sine(44100, 1, 10000, 1000.0, 0.5);
    int64_t nref;
    float *ref = resample_all(44100, 1, x, 10000, 1000, &nref);
    rill_audio_resampler_t *r = NULL;
    ck_assert_int_eq(rill_audio_resampler_new(44100, 1, &r), RILL_OK);
    float *out = calloc((size_t)nref + 64, sizeof *out);
    int64_t w = 0;
    for (int64_t done = 0; done < 10000; done += 1000) {
        size_t need = rill_audio_resampler_out_max(r, 1000);
        rill_err_t e = (rill_err_t)rill_audio_resampler_push(r, x + done, 1000, out + w, need - 1);
        ck_assert_int_eq(e, RILL_EFULL);
        ck_assert(strstr(rill_last_error(e), "room") != NULL);
        ck_assert_int_eq(rill_audio_resampler_push(r, NULL, 1000, out + w, need), RILL_EINVAL);
        ck_assert_int_eq(rill_audio_resampler_push(r, x + done, 1000, NULL, need), RILL_EINVAL);
        int64_t got = rill_audio_resampler_push(r, x + done, 1000, out + w, need);
        ck_assert_int_ge(got, 0);
        w += got;
    }
    ck_assert_int_eq(rill_audio_resampler_flush(r, out + w, 0) < 0 ||
                         rill_audio_resampler_out_max(r, 0) == 0,
                     1);
    int64_t got = rill_audio_resampler_flush(r, out + w, (size_t)nref + 64 - (size_t)w);
    ck_assert_int_ge(got, 0);
    w += got;
    ck_assert_int_eq(w, nref);
    ck_assert(memcmp(out, ref, (size_t)nref * sizeof *out) == 0);
    ck_assert_int_eq(rill_audio_resampler_push(r, x, 10, out, (size_t)nref), RILL_EINVAL);
    ck_assert(strstr(rill_last_error(RILL_EINVAL), "after flush") != NULL);
    ck_assert_int_eq(rill_audio_resampler_stats(r).frames_in, 10000);

    /* reset: the same stream again gives the same samples. */
    rill_audio_resampler_reset(r);
    w = rill_audio_resampler_push(r, x, 10000, out, (size_t)nref + 64);
    ck_assert_int_ge(w, 0);
    w += rill_audio_resampler_flush(r, out + w, (size_t)nref + 64 - (size_t)w);
    ck_assert_int_eq(w, nref);
    ck_assert(memcmp(out, ref, (size_t)nref * sizeof *out) == 0);
    ck_assert_int_eq(rill_audio_resampler_rate(r), 44100);
    ck_assert_int_eq(rill_audio_resampler_channels(r), 1);
    rill_audio_resampler_destroy(&r);
    rill_audio_resampler_destroy(&r); /* NULL-safe */
    rill_audio_resampler_destroy(NULL);

    /* int16 */
    int16_t s[3000];
    float sf[3000];
    for (int i = 0; i < 3000; i++) {
        s[i] = (int16_t)(i * 37 % 65536 - 32768);
        sf[i] = (float)s[i] / 32768.0f;
    }
    rill_audio_resampler_t *r1 = NULL, *r2 = NULL;
    ck_assert_int_eq(rill_audio_resampler_new(22050, 1, &r1), RILL_OK);
    ck_assert_int_eq(rill_audio_resampler_new(22050, 1, &r2), RILL_OK);
    static float o1[4000], o2[4000];
    int64_t g1 = rill_audio_resampler_push_s16(r1, s, 3000, o1, 4000);
    int64_t g2 = rill_audio_resampler_push(r2, sf, 3000, o2, 4000);
    ck_assert_int_eq(g1, g2);
    ck_assert(memcmp(o1, o2, (size_t)g1 * sizeof *o1) == 0);
    rill_audio_resampler_destroy(&r1);
    rill_audio_resampler_destroy(&r2);
    free(x), free(ref), free(out);
}
END_TEST

static rill_err_t make_resampler(void) {
    rill_audio_resampler_t *r = NULL;
    rill_err_t err = rill_audio_resampler_new(44100, 2, &r);
    rill_audio_resampler_destroy(&r);
    return err;
}

START_TEST(resample_alloc_failures) {
    every_alloc_fails(make_resampler, "resampler");
}
END_TEST

/* ---- files ---------------------------------------------------------------------------------- */

/* WAV (44.1 kHz stereo, 16-bit), FLAC (48 kHz mono) and WAV float (22.05 kHz) sines: the info is
 * right, any chunking reads exactly info.samples samples, and the sine is there (16-bit input:
 * residual below 1e-4). */
START_TEST(file_wav_flac_sine) {
    const struct {
        const char *name;
        int format, rate, ch;
        const char *fmt;
    } cases[] = {
        { "a.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, "wav" },
        { "a.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 48000, 1, "flac" },
        { "f.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 22050, 1, "wav" },
        { "b.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_24, 8000, 2, "flac" },
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t frames = cases[c].rate * 3 / 2;
        float *x = sine(cases[c].rate, cases[c].ch, frames, 1000.0, 0.5);
        const char *path = test_path_in(g_dir, cases[c].name);
        write_sf(path, cases[c].format, cases[c].rate, cases[c].ch, x, frames);
        const size_t chunks[] = { 1, 160, 4096, 100000 };
        float *first = NULL;
        int64_t n_first = 0;
        for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
            rill_audio_file_info_t info;
            int64_t n;
            float *y = read_all(path, chunks[k], &n, &info);
            ck_assert_int_eq(info.rate, cases[c].rate);
            ck_assert_int_eq(info.channels, cases[c].ch);
            ck_assert_int_eq(info.frames, frames);
            ck_assert_str_eq(info.format, cases[c].fmt);
            ck_assert(fabs(info.duration_s - 1.5) < 1e-9);
            ck_assert_int_eq(info.samples, 24000);
            ck_assert_int_eq(n, 24000);
            fit_t fit = fit_sine(y, 2000, n - 2000, 1000.0);
            double want = cases[c].ch == 2 ? 0.4375 : 0.5;
            ck_assert_msg(fit.resid_rms < 1e-4 && fabs(fit.amp - want) < 1e-3,
                          "%s: amp %.5f residual %.2e", cases[c].name, fit.amp, fit.resid_rms);
            if (first == NULL) {
                first = y;
                n_first = n;
            } else {
                ck_assert(memcmp(first, y, (size_t)n_first * sizeof *y) == 0);
                free(y);
            }
        }
        free(first);
        free(x);
    }
}
END_TEST

/* Ogg Opus (written by libsndfile's Opus encoder at 48 kHz) goes through libopusfile: format
 * "ogg-opus", the length libopusfile gives (the pre-skip removed), and a lossy but clear sine
 * (amplitude within 5 %, the residual below 5 % of it). */
START_TEST(file_ogg_opus_sine) {
    const int32_t chans[] = { 1, 2 };
    for (size_t c = 0; c < 2; c++) {
        int64_t frames = 48000 * 2;
        float *x = sine(48000, chans[c], frames, 440.0, 0.5);
        const char *path = test_path_in(g_dir, chans[c] == 1 ? "m.opus" : "s.opus");
        write_sf(path, SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, chans[c], x, frames);
        ck_assert_int_lt(test_file_size(path), 50000);
        rill_audio_file_info_t info;
        int64_t n;
        float *y = read_all(path, 777, &n, &info);
        ck_assert_str_eq(info.format, "ogg-opus");
        ck_assert_int_eq(info.rate, 48000);
        ck_assert_int_eq(info.channels, chans[c]);
        ck_assert_int_gt(info.frames, 0);
        ck_assert_int_eq(n, info.samples);
        ck_assert_int_le(llabs(info.frames - frames), 960); /* Opus's frames round the end */
        double want = chans[c] == 2 ? 0.4375 : 0.5;
        fit_t fit = fit_sine(y, 4000, n - 4000, 440.0);
        ck_assert_msg(fabs(fit.amp - want) < 0.05 * want && fit.resid_rms < 0.05 * want,
                      "opus x%d: amp %.4f residual %.4f", chans[c], fit.amp, fit.resid_rms);
        free(x), free(y);
    }
}
END_TEST

/* A pocketsphinx test clip (16 kHz mono WAV) decodes to its length, which Python's wave module
 * gives as 47840 frames for -0880, and at 16 kHz the samples are libsndfile's own, unchanged. */
START_TEST(file_pocketsphinx_clip) {
    const char *path =
        "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav";
    if (!test_file_exists(path)) {
        printf("file_pocketsphinx_clip: %s not present (Debian pocketsphinx-testdata), skipped\n",
               path);
        return;
    }
    rill_audio_file_info_t info;
    int64_t n;
    float *y = read_all(path, 4000, &n, &info);
    ck_assert_int_eq(info.rate, 16000);
    ck_assert_int_eq(info.frames, 47840);
    ck_assert_int_eq(n, 47840);
    ck_assert(fabs(info.duration_s - 2.99) < 1e-9);
    SF_INFO si = { 0 };
    SNDFILE *sf = sf_open(path, SFM_READ, &si);
    ck_assert_ptr_nonnull(sf);
    float *ref = malloc(47840 * sizeof *ref);
    ck_assert_int_eq(sf_readf_float(sf, ref, 47840), 47840);
    sf_close(sf);
    ck_assert(memcmp(ref, y, 47840 * sizeof *ref) == 0);
    free(ref), free(y);
}
END_TEST

/* Opens path; expects open to fail with want (and a detail containing `says`), or, with
 * want_read, open to succeed and a read to fail with want_read after `before_min` samples. */
static void expect_bad_file(const char *path, rill_err_t want, const char *says) {
    rill_audio_file_t *f = NULL;
    int64_t live0 = rill_mem_stats(RILL_MEM_INGEST).n_live;
    rill_err_t err = rill_audio_file_open(path, &f);
    ck_assert_msg(err == want, "%s: %s (%s)", path, rill_err_name(err), rill_last_error(err));
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(rill_last_error(err), says) != NULL, "%s: '%s' lacks '%s'", path,
                  rill_last_error(err), says);
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_INGEST).n_live, live0);
}

/* Reads path to its failure: returns the samples handed out before it; asserts the failure is
 * RILL_EFORMAT with `says` in the detail, and that later reads fail the same way. */
static int64_t read_to_failure(const char *path, const char *says) {
    rill_audio_file_t *f = NULL;
    rill_err_t err = rill_audio_file_open(path, &f);
    ck_assert_msg(err == RILL_OK, "%s: %s", path, rill_last_error(err));
    static float buf[4096];
    int64_t total = 0, got;
    while ((got = rill_audio_file_read(f, buf, 4096)) > 0) {
        total += got;
    }
    ck_assert_msg(got == RILL_EFORMAT, "%s: read gave %lld", path, (long long)got);
    ck_assert_msg(strstr(rill_last_error(RILL_EFORMAT), says) != NULL, "%s: '%s' lacks '%s'", path,
                  rill_last_error(RILL_EFORMAT), says);
    ck_assert_int_eq(rill_audio_file_read(f, buf, 4096), RILL_EFORMAT);
    ck_assert_int_eq(rill_audio_file_read(f, buf, 1), RILL_EFORMAT);
    ck_assert_int_eq(rill_audio_file_stats(f).samples_out, total);
    rill_audio_file_close(&f);
    return total;
}

/* Writes the first `keep` bytes of src to dst (keep < 0: all), flipping the bytes in
 * [flip_from, flip_to). */
static void damaged_copy(const char *src, const char *dst, int64_t keep, int64_t flip_from,
                         int64_t flip_to) {
    size_t len = 0;
    unsigned char *b = test_read_file(src, &len);
    ck_assert_ptr_nonnull(b);
    size_t n = keep >= 0 && (size_t)keep < len ? (size_t)keep : len;
    for (int64_t i = flip_from; i < flip_to && (size_t)i < n; i++) {
        b[i] ^= 0x5a;
    }
    test_write_file(dst, b, n);
    free(b);
}

/* Missing, empty, garbage, cut-in-the-header files: refused at open with a clear code and
 * detail. FLAC cut in the data: the samples before the cut, then RILL_EFORMAT "truncated",
 * every time. Ogg Opus with damaged pages in the middle: RILL_EFORMAT from libopusfile (a hole).
 * WAV cut in the data: read to its end (libsndfile corrects the length; documented). */
START_TEST(file_damaged) {
    expect_bad_file(test_path_in(g_dir, "no-such-file.wav"), RILL_EIO, "cannot open");
    expect_bad_file(g_dir, RILL_EUNSUPPORTED, "not a regular file");
    expect_bad_file("/dev/null", RILL_EUNSUPPORTED, "not a regular file");
    const char *empty = test_path_in(g_dir, "empty.wav");
    test_write_file(empty, "", 0);
    expect_bad_file(empty, RILL_EFORMAT, "empty.wav");
    unsigned char junk[5000];
    for (size_t i = 0; i < sizeof junk; i++) {
        junk[i] = (unsigned char)test_rand_below(test_rng(), 256);
    }
    const char *garbage = test_path_in(g_dir, "garbage.flac");
    test_write_file(garbage, junk, sizeof junk);
    expect_bad_file(garbage, RILL_EFORMAT, "garbage.flac");
    /* Ogg framing with an OpusHead but nothing valid after: libopusfile's message. */
    unsigned char fake[200] = "OggS";
    memcpy(fake + 28, "OpusHead", 8);
    const char *fake_opus = test_path_in(g_dir, "fake.opus");
    test_write_file(fake_opus, fake, sizeof fake);
    expect_bad_file(fake_opus, RILL_EFORMAT, "fake.opus");

    float *x = sine(44100, 1, 44100, 1000.0, 0.5);
    const char *wav = test_path_in(g_dir, "d.wav");
    const char *flac = test_path_in(g_dir, "d.flac");
    const char *opus = test_path_in(g_dir, "d.opus");
    write_sf(wav, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 1, x, 44100);
    write_sf(flac, SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 44100, 1, x, 44100);
    float *x48 = sine(48000, 1, 96000, 440.0, 0.5);
    write_sf(opus, SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, 1, x48, 96000);

    const char *cut = test_path_in(g_dir, "cut.wav");
    damaged_copy(wav, cut, 30, 0, 0); /* inside the fmt chunk */
    expect_bad_file(cut, RILL_EFORMAT, "cut.wav");
    const char *cut_flac_head = test_path_in(g_dir, "cuthead.flac");
    damaged_copy(flac, cut_flac_head, 20, 0, 0); /* inside STREAMINFO */
    expect_bad_file(cut_flac_head, RILL_EFORMAT, "cuthead.flac");

    const char *cut_flac = test_path_in(g_dir, "cut.flac");
    damaged_copy(flac, cut_flac, test_file_size(flac) / 2, 0, 0);
    int64_t before = read_to_failure(cut_flac, "after frame");
    ck_assert_int_gt(before, 4000);
    ck_assert_int_lt(before, 16000);

    /* Ogg Opus: a flipped byte anywhere after the headers, a cut, trailing junk, a page
     * missing: each refused at open (libopusfile alone would read on). */
    int64_t osz = test_file_size(opus);
    const char *bad_ogg = test_path_in(g_dir, "bad.opus");
    for (int64_t at = 200; at < osz; at += osz / 7) {
        damaged_copy(opus, bad_ogg, -1, at, at + 1);
        expect_bad_file(bad_ogg, RILL_EFORMAT, "damaged Ogg data");
    }
    damaged_copy(opus, bad_ogg, osz - 10, 0, 0);
    expect_bad_file(bad_ogg, RILL_EFORMAT, "truncated");
    damaged_copy(opus, bad_ogg, osz * 2 / 3, 0, 0);
    expect_bad_file(bad_ogg, RILL_EFORMAT, "truncated");
    {
        size_t len = 0;
        unsigned char *b = test_read_file(opus, &len);
        unsigned char *b2 = malloc(len + 50);
        memcpy(b2, b, len);
        memset(b2 + len, 0x41, 50);
        test_write_file(bad_ogg, b2, len + 50);
        expect_bad_file(bad_ogg, RILL_EFORMAT, "damaged Ogg data");
        /* Drop the third page (an audio page): the page numbers have a gap. */
        size_t pages[64], np = 0;
        for (size_t i = 0; i + 4 <= len && np < 64; i++) {
            if (memcmp(b + i, "OggS", 4) == 0) {
                pages[np++] = i;
            }
        }
        ck_assert_uint_ge(np, 4);
        memcpy(b2, b, pages[2]);
        memcpy(b2 + pages[2], b + pages[3], len - pages[3]);
        test_write_file(bad_ogg, b2, pages[2] + len - pages[3]);
        expect_bad_file(bad_ogg, RILL_EFORMAT, "pages missing");
        free(b), free(b2);
    }

    const char *cut_wav = test_path_in(g_dir, "cutdata.wav");
    damaged_copy(wav, cut_wav, 44 + 2 * 20000, 0, 0);
    rill_audio_file_info_t info;
    int64_t n;
    float *y = read_all(cut_wav, 1000, &n, &info);
    ck_assert_int_eq(info.frames, 20000);
    ck_assert_int_eq(n, (20000 * 16000 + 22050) / 44100);
    free(y), free(x), free(x48);

    rill_audio_file_t *f = NULL;
    ck_assert_int_eq(rill_audio_file_open(NULL, &f), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_file_open(wav, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_file_read(NULL, NULL, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_file_open(wav, &f), RILL_OK);
    ck_assert_int_eq(rill_audio_file_read(f, NULL, 10), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_file_read(f, NULL, 0), 0);
    ck_assert_int_eq(rill_audio_file_stats(f).samples_out, 0);
    rill_audio_file_close(&f);
    rill_audio_file_close(&f);
}
END_TEST

/* A file at an absurd rate (libsndfile writes what it is told in the header) or with too many
 * channels is refused with RILL_ERANGE. Float WAV samples that are NaN, inf or huge are cleaned
 * and counted. */
START_TEST(file_absurd_and_nan) {
    float tiny[400] = { 0 };
    const char *slow = test_path_in(g_dir, "slow.wav");
    write_sf(slow, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 500, 1, tiny, 400);
    expect_bad_file(slow, RILL_ERANGE, "rate 500 Hz");
    const char *fast = test_path_in(g_dir, "fast.wav");
    write_sf(fast, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 10000000, 1, tiny, 400);
    expect_bad_file(fast, RILL_ERANGE, "rate 10000000 Hz");
    float *wide = calloc(40 * 100, sizeof *wide);
    const char *many = test_path_in(g_dir, "many.wav");
    write_sf(many, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 16000, 40, wide, 100);
    expect_bad_file(many, RILL_ERANGE, "40 channels");
    free(wide);

    float *x = sine(16000, 1, 8000, 500.0, 0.5);
    x[100] = NAN;
    x[200] = INFINITY;
    x[300] = 7.0f;
    const char *nan = test_path_in(g_dir, "nan.wav");
    write_sf(nan, SF_FORMAT_WAV | SF_FORMAT_FLOAT, 16000, 1, x, 8000);
    rill_audio_file_t *f = NULL;
    ck_assert_int_eq(rill_audio_file_open(nan, &f), RILL_OK);
    static float y[9000];
    ck_assert_int_eq(rill_audio_file_read(f, y, 9000), 8000);
    ck_assert(y[100] == 0.0f && y[200] == 0.0f && y[300] == 1.0f && y[101] == x[101]);
    rill_audio_stats_t st = rill_audio_file_stats(f);
    ck_assert_int_eq(st.cleaned, 2);
    ck_assert_int_eq(st.clipped, 1);
    ck_assert_int_eq(st.frames_in, 8000);
    rill_audio_file_close(&f);
    free(x);
}
END_TEST

static const char *g_alloc_path;
static rill_err_t make_file(void) {
    rill_audio_file_t *f = NULL;
    rill_err_t err = rill_audio_file_open(g_alloc_path, &f);
    rill_audio_file_close(&f);
    return err;
}

START_TEST(file_alloc_failures) {
    float *x = sine(44100, 2, 4410, 1000.0, 0.5);
    const char *wav = test_path_in(g_dir, "alloc.wav");
    write_sf(wav, SF_FORMAT_WAV | SF_FORMAT_PCM_16, 44100, 2, x, 4410);
    g_alloc_path = wav;
    every_alloc_fails(make_file, "file open (wav)");
    float *y = sine(48000, 1, 9600, 440.0, 0.5);
    const char *opus = test_path_in(g_dir, "alloc.opus");
    write_sf(opus, SF_FORMAT_OGG | SF_FORMAT_OPUS, 48000, 1, y, 9600);
    g_alloc_path = opus;
    every_alloc_fails(make_file, "file open (opus)");
    free(x), free(y);
}
END_TEST

/* ---- packets -------------------------------------------------------------------------------- */

#define PKT_MAX 1500

typedef struct opus_stream {
    int n;
    unsigned char data[200][PKT_MAX];
    int32_t len[200];
} opus_stream_t;

/* Encodes n 20 ms packets of a 440 Hz sine at rate with ch channels (VoIP, FEC on, 10 %
 * expected loss so the packets carry LBRR). */
static void encode_opus(opus_stream_t *s, int n, int32_t rate, int32_t ch) {
    int e = 0;
    OpusEncoder *enc = opus_encoder_create(rate, ch, OPUS_APPLICATION_VOIP, &e);
    ck_assert_int_eq(e, OPUS_OK);
    opus_encoder_ctl(enc, OPUS_SET_INBAND_FEC(1));
    opus_encoder_ctl(enc, OPUS_SET_PACKET_LOSS_PERC(10));
    opus_encoder_ctl(enc, OPUS_SET_BITRATE(32000));
    int frame = rate / 50;
    float *x = sine(rate, ch, (int64_t)frame * n, 440.0, 0.5);
    for (int i = 0; i < n; i++) {
        s->len[i] = opus_encode_float(enc, x + (size_t)i * frame * ch, frame, s->data[i], PKT_MAX);
        ck_assert_int_gt(s->len[i], 0);
    }
    s->n = n;
    opus_encoder_destroy(enc);
    free(x);
}

static opus_stream_t g_opus;

static rill_audio_packet_decoder_t *new_dec(rill_audio_codec_t codec, int32_t rate, int32_t ch,
                                            const rill_audio_packet_params_t *p) {
    rill_audio_packet_decoder_t *d = NULL;
    rill_err_t err = rill_audio_packet_decoder_new(p, codec, rate, ch, &d);
    ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
    return d;
}

static int64_t dec_opus(rill_audio_packet_decoder_t *d, int64_t seq, int i, float *out,
                        size_t cap) {
    return rill_audio_packet_decode(d, RILL_AUDIO_CODEC_OPUS, 48000, 1, seq, g_opus.data[i],
                                    (size_t)g_opus.len[i], out, cap);
}

/* Opus at 48 kHz mono in 20 ms packets decodes to 320 samples each, the sine is there, the
 * counters count. */
START_TEST(packet_opus_in_order) {
    encode_opus(&g_opus, 100, 48000, 1);
    rill_audio_packet_decoder_t *d = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
    size_t cap = rill_audio_packet_out_max(d);
    ck_assert_uint_eq(cap, 500 * 16 + 1920);
    float *out = malloc(100 * 320 * sizeof *out);
    int64_t w = 0;
    ck_assert_int_eq(rill_audio_packet_expected(d), -1);
    for (int i = 0; i < 100; i++) {
        int64_t got = dec_opus(d, 1000 + i, i, out + w, cap);
        ck_assert_int_eq(got, 320);
        w += got;
    }
    ck_assert_int_eq(rill_audio_packet_expected(d), 1100);
    fit_t fit = fit_sine(out, 8000, w, 440.0);
    ck_assert_msg(fabs(fit.amp - 0.5) < 0.05 && fit.resid_rms < 0.05, "amp %.4f resid %.4f",
                  fit.amp, fit.resid_rms);
    rill_audio_stats_t st = rill_audio_packet_stats(d);
    ck_assert_int_eq(st.packets, 100);
    ck_assert_int_eq(st.samples_out, 32000);
    ck_assert_int_eq(st.frames_in, 96000);
    ck_assert_int_eq(st.packets_lost + st.packets_late + st.packets_duplicate + st.packets_bad, 0);
    rill_audio_packet_decoder_destroy(&d);
    ck_assert_ptr_null(d);
    free(out);

    /* Stereo at 24 kHz decodes to mono 16 kHz too. */
    static opus_stream_t st2;
    int e = 0;
    OpusEncoder *enc = opus_encoder_create(24000, 2, OPUS_APPLICATION_AUDIO, &e);
    float *x = sine(24000, 2, 480 * 10, 440.0, 0.5);
    d = new_dec(RILL_AUDIO_CODEC_OPUS, 24000, 2, NULL);
    static float o[500 * 16 + 1920];
    for (int i = 0; i < 10; i++) {
        st2.len[i] = opus_encode_float(enc, x + i * 960, 480, st2.data[i], PKT_MAX);
        ck_assert_int_eq(rill_audio_packet_decode(d, RILL_AUDIO_CODEC_OPUS, 24000, 2, i,
                                                  st2.data[i], (size_t)st2.len[i], o, 9919),
                         RILL_EFULL); /* less than out_max */
        ck_assert_int_eq(rill_audio_packet_decode(d, RILL_AUDIO_CODEC_OPUS, 24000, 2, i,
                                                  st2.data[i], (size_t)st2.len[i], o, 9920),
                         320);
    }
    opus_encoder_destroy(enc);
    rill_audio_packet_decoder_destroy(&d);
    free(x);
}
END_TEST

/* Loss, duplicates and late packets: packets 5 and 6 missing are concealed (2 lost, 2
 * concealed, 40 ms, the total length as without loss), 6 arriving afterwards is late, 7 again
 * a duplicate, both dropped with 0 samples. */
START_TEST(packet_opus_loss_dup_late) {
    encode_opus(&g_opus, 20, 48000, 1);
    rill_audio_packet_decoder_t *d = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
    size_t cap = rill_audio_packet_out_max(d);
    float *out = malloc(cap * sizeof *out);
    int64_t total = 0;
    for (int i = 0; i < 20; i++) {
        if (i == 5 || i == 6) {
            continue;
        }
        int64_t got = dec_opus(d, i, i, out, cap);
        ck_assert_int_eq(got, i == 7 ? 3 * 320 : 320);
        for (int64_t k = 0; k < got; k++) {
            ck_assert(isfinite(out[k]) && fabsf(out[k]) <= 1.0f);
        }
        total += got;
        if (i == 8) {
            ck_assert_int_eq(dec_opus(d, 6, 6, out, cap), 0); /* late */
            ck_assert_int_eq(dec_opus(d, 7, 7, out, cap), 0); /* duplicate */
            ck_assert_int_eq(dec_opus(d, 8, 8, out, cap), 0); /* duplicate */
            ck_assert_int_eq(dec_opus(d, 0, 0, out, cap), 0); /* duplicate */
        }
    }
    ck_assert_int_eq(total, 20 * 320);
    rill_audio_stats_t st = rill_audio_packet_stats(d);
    ck_assert_int_eq(st.packets, 18);
    ck_assert_int_eq(st.packets_lost, 2);
    ck_assert_int_eq(st.packets_concealed, 2);
    ck_assert_int_eq(st.concealed_ms, 40);
    ck_assert_int_eq(st.packets_late, 1);
    ck_assert_int_eq(st.packets_duplicate, 3);
    ck_assert_int_eq(st.samples_out, 20 * 320);
    rill_audio_packet_decoder_destroy(&d);
    free(out);
}
END_TEST

/* Bounded concealment: a gap of 40 packets (800 ms) with max_conceal_ms 500 conceals 25 and
 * counts 40 lost; a gap beyond max_gap (and a jump of 10^15) is a resync: no concealment, lost
 * not counted, the packet decoded. */
START_TEST(packet_gaps_bounded) {
    encode_opus(&g_opus, 10, 48000, 1);
    rill_audio_packet_decoder_t *d = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
    size_t cap = rill_audio_packet_out_max(d);
    float *out = malloc(cap * sizeof *out);
    ck_assert_int_eq(dec_opus(d, 0, 0, out, cap), 320);
    ck_assert_int_eq(dec_opus(d, 41, 1, out, cap), 26 * 320);
    rill_audio_stats_t st = rill_audio_packet_stats(d);
    ck_assert_int_eq(st.packets_lost, 40);
    ck_assert_int_eq(st.packets_concealed, 25);
    ck_assert_int_eq(st.concealed_ms, 500);
    ck_assert_int_eq(dec_opus(d, 42 + 51, 2, out, cap), 320);
    ck_assert_int_eq(dec_opus(d, 1000000000000000LL, 3, out, cap), 320);
    st = rill_audio_packet_stats(d);
    ck_assert_int_eq(st.resyncs, 2);
    ck_assert_int_eq(st.packets_lost, 40);
    ck_assert_int_eq(rill_audio_packet_expected(d), 1000000000000001LL);
    ck_assert_int_eq(dec_opus(d, 5, 4, out, cap), 0); /* far behind: late, never backwards */
    ck_assert_int_eq(rill_audio_packet_stats(d).packets_late, 1);
    ck_assert_int_eq(rill_audio_packet_expected(d), 1000000000000001LL);
    rill_audio_packet_decoder_destroy(&d);

    /* max_conceal_ms 0: gaps are counted, never filled. */
    rill_audio_packet_params_t p = rill_audio_packet_default_params();
    p.max_conceal_ms = 0;
    d = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, &p);
    ck_assert_uint_eq(rill_audio_packet_out_max(d), 1920);
    ck_assert_int_eq(dec_opus(d, 0, 0, out, cap), 320);
    ck_assert_int_eq(dec_opus(d, 3, 1, out, cap), 320);
    ck_assert_int_eq(rill_audio_packet_stats(d).packets_lost, 2);
    ck_assert_int_eq(rill_audio_packet_stats(d).packets_concealed, 0);
    rill_audio_packet_decoder_destroy(&d);
    free(out);
}
END_TEST

/* Invalid Opus packets between good ones: each is RILL_EFORMAT, counted bad, and the decoder's
 * state is untouched: the output of the good packets (with a gap concealed around a bad one) is
 * bit-identical to a decoder that never saw the bad ones. Random byte strings too: those libopus
 * refuses must leave no trace either. */
START_TEST(packet_garbage_changes_nothing) {
    encode_opus(&g_opus, 30, 48000, 1);
    const unsigned char bad[][8] = {
        { 0x03, 0x00 },             /* code 3, zero frames */
        { 0x03, 0xff },             /* code 3, 63 frames: > 120 ms */
        { 0x01, 0xaa },             /* code 1 (two equal frames), odd payload */
        { 0x02, 0xfc, 0xff, 0x01 }, /* code 2, first frame longer than the packet */
        { 0x0b, 0xfb, 0x01, 0x02 }, /* code 3 CBR with padding beyond the end */
    };
    const size_t bad_len[] = { 2, 2, 2, 4, 4 };
    rill_audio_packet_decoder_t *ref = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
    rill_audio_packet_decoder_t *d = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
    size_t cap = rill_audio_packet_out_max(d);
    float *a = malloc(cap * sizeof *a), *b = malloc(cap * sizeof *b);
    int n_bad = 0;
    for (int i = 0; i < 30; i++) {
        if (i == 12) {
            continue; /* a gap, so concealment sits right before a bad packet's attempt */
        }
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            int64_t r = rill_audio_packet_decode(d, RILL_AUDIO_CODEC_OPUS, 48000, 1, i, bad[k],
                                                 bad_len[k], b, cap);
            ck_assert_msg(r == RILL_EFORMAT, "bad packet %zu gave %lld", k, (long long)r);
            ck_assert(strstr(rill_last_error(RILL_EFORMAT), "Opus") != NULL);
            n_bad++;
        }
        for (int t = 0; t < 20; t++) {
            unsigned char junk[64];
            size_t len = 1 + test_rand_below(test_rng(), sizeof junk);
            for (size_t k = 0; k < len; k++) {
                junk[k] = (unsigned char)test_rand_below(test_rng(), 256);
            }
            /* A junk string libopus accepts is a valid packet and would change the state: try
             * it on a copy of the stream's history only when it is refused. */
            rill_audio_packet_decoder_t *probe = new_dec(RILL_AUDIO_CODEC_OPUS, 48000, 1, NULL);
            int64_t pr = rill_audio_packet_decode(probe, RILL_AUDIO_CODEC_OPUS, 48000, 1, 0, junk,
                                                  len, b, cap);
            rill_audio_packet_decoder_destroy(&probe);
            if (pr >= 0) {
                continue;
            }
            int64_t r =
                rill_audio_packet_decode(d, RILL_AUDIO_CODEC_OPUS, 48000, 1, i, junk, len, b, cap);
            ck_assert_int_eq(r, RILL_EFORMAT);
            n_bad++;
        }
        int64_t ra = dec_opus(ref, i, i, a, cap);
        int64_t rb = dec_opus(d, i, i, b, cap);
        ck_assert_int_eq(ra, rb);
        ck_assert_int_gt(ra, 0);
        ck_assert(memcmp(a, b, (size_t)ra * sizeof *a) == 0);
    }
    rill_audio_stats_t sa = rill_audio_packet_stats(ref), sb = rill_audio_packet_stats(d);
    ck_assert_int_eq(sb.packets_bad, n_bad);
    sb.packets_bad = 0;
    ck_assert(memcmp(&sa, &sb, sizeof sa) == 0);
    rill_audio_packet_decoder_destroy(&ref);
    rill_audio_packet_decoder_destroy(&d);
    free(a), free(b);
}
END_TEST

/* pcm16 packets (48 kHz stereo, 20 ms) give exactly what the resampler gives on the same frames;
 * a lost packet is silence of the previous packet's length; malformed packets are refused. */
START_TEST(packet_pcm16) {
    enum { FR = 960, N = 20 };
    float *x = sine(48000, 2, FR * N, 1000.0, 0.5);
    int16_t *s = malloc((size_t)FR * N * 2 * sizeof *s);
    uint8_t *le = malloc((size_t)FR * N * 4);
    for (int i = 0; i < FR * N * 2; i++) {
        s[i] = (int16_t)lrintf(x[i] * 32767.0f);
        le[2 * i] = (uint8_t)((uint16_t)s[i] & 0xff);
        le[2 * i + 1] = (uint8_t)((uint16_t)s[i] >> 8);
    }
    rill_audio_resampler_t *r = NULL;
    ck_assert_int_eq(rill_audio_resampler_new(48000, 2, &r), RILL_OK);
    float *ref = malloc(FR * N * sizeof *ref);
    int64_t nref = rill_audio_resampler_push_s16(r, s, FR * N, ref, FR * N);
    ck_assert_int_gt(nref, 0);

    rill_audio_packet_decoder_t *d = new_dec(RILL_AUDIO_CODEC_PCM16, 48000, 2, NULL);
    size_t cap = rill_audio_packet_out_max(d);
    float *out = malloc((cap + FR * N) * sizeof *out);
    int64_t w = 0;
    for (int i = 0; i < N; i++) {
        int64_t got = rill_audio_packet_decode(d, RILL_AUDIO_CODEC_PCM16, 48000, 2, i,
                                               le + (size_t)i * FR * 4, FR * 4, out + w, cap);
        ck_assert_int_ge(got, 0);
        w += got;
    }
    ck_assert_int_eq(w, nref);
    ck_assert(memcmp(out, ref, (size_t)w * sizeof *out) == 0);

    /* Refusals: odd length, half a frame, too long, empty, format changes, seq, room, NULLs. */
    uint8_t big[200000] = { 0 };
    const struct {
        rill_audio_codec_t codec;
        int64_t rate, ch;
        int64_t seq;
        const uint8_t *data;
        size_t len;
        size_t cap;
        rill_err_t want;
    } refusals[] = {
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 3, 0, RILL_EFORMAT },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 6, 0, RILL_EFORMAT },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, big, 48000 * 4 + 4, 0, RILL_EFORMAT },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 0, 0, RILL_EFORMAT },
        { RILL_AUDIO_CODEC_PCM16, 44100, 2, 20, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, 48000, 1, 20, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_OPUS, 48000, 2, 20, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, -1, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, INT64_MAX, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, ((int64_t)1 << 32) + 48000, 2, 20, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, 48000, ((int64_t)1 << 32) + 2, 20, le, 4, 0, RILL_EINVAL },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 4, 100, RILL_EFULL },
        { RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, NULL, 4, 0, RILL_EINVAL },
    };
    rill_audio_stats_t before = rill_audio_packet_stats(d);
    for (size_t i = 0; i < sizeof refusals / sizeof refusals[0]; i++) {
        int64_t got = rill_audio_packet_decode(
            d, refusals[i].codec, refusals[i].rate, refusals[i].ch, refusals[i].seq,
            refusals[i].data, refusals[i].len, out, refusals[i].cap ? refusals[i].cap : cap);
        ck_assert_msg(got == refusals[i].want, "refusal %zu gave %lld (%s)", i, (long long)got,
                      got < 0 ? rill_last_error((rill_err_t)got) : "");
        ck_assert_int_eq(rill_audio_packet_expected(d), N);
    }
    ck_assert_int_eq(
        rill_audio_packet_decode(d, RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 4, NULL, cap),
        RILL_EINVAL);
    ck_assert_int_eq(
        rill_audio_packet_decode(NULL, RILL_AUDIO_CODEC_PCM16, 48000, 2, 20, le, 4, out, cap),
        RILL_EINVAL);
    rill_audio_stats_t after = rill_audio_packet_stats(d);
    ck_assert_int_eq(after.packets_bad - before.packets_bad,
                     (int64_t)(sizeof refusals / sizeof refusals[0]) + 1);
    after.packets_bad = before.packets_bad;
    ck_assert(memcmp(&before, &after, sizeof before) == 0);

    /* A lost packet: silence of one packet's length goes through the resampler. */
    rill_audio_packet_decoder_t *d2 = new_dec(RILL_AUDIO_CODEC_PCM16, 16000, 1, NULL);
    int16_t one[320];
    for (int i = 0; i < 320; i++) {
        one[i] = 1000;
    }
    ck_assert_int_eq(rill_audio_packet_decode(d2, RILL_AUDIO_CODEC_PCM16, 16000, 1, 0,
                                              (const uint8_t *)one, 640, out, cap),
                     320);
    ck_assert_int_eq(rill_audio_packet_decode(d2, RILL_AUDIO_CODEC_PCM16, 16000, 1, 2,
                                              (const uint8_t *)one, 640, out, cap),
                     640);
    for (int i = 0; i < 320; i++) {
        ck_assert(out[i] == 0.0f);
        ck_assert(out[320 + i] == 1000.0f / 32768.0f);
    }
    rill_audio_stats_t st = rill_audio_packet_stats(d2);
    ck_assert_int_eq(st.packets_concealed, 1);
    ck_assert_int_eq(st.concealed_ms, 20);
    rill_audio_packet_decoder_destroy(&d2);
    rill_audio_packet_decoder_destroy(&d);
    rill_audio_resampler_destroy(&r);
    free(x), free(s), free(le), free(ref), free(out);
}
END_TEST

/* Absurd streams are refused at creation; names map both ways. */
START_TEST(packet_absurd_formats) {
    rill_audio_packet_decoder_t *d = NULL;
    const struct {
        rill_audio_codec_t codec;
        int64_t rate, ch;
        rill_err_t want;
    } cases[] = {
        { RILL_AUDIO_CODEC_OPUS, 44100, 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_OPUS, 48000, 3, RILL_ERANGE },
        { RILL_AUDIO_CODEC_OPUS, 0, 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, 0, 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, -16000, 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, 10000000, 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, 16000, 0, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, 16000, 300, RILL_ERANGE },
        { RILL_AUDIO_CODEC_PCM16, ((int64_t)1 << 32) + 16000, 1, RILL_ERANGE }, /* no aliasing */
        { RILL_AUDIO_CODEC_PCM16, 16000, ((int64_t)1 << 32) + 1, RILL_ERANGE },
        { RILL_AUDIO_CODEC_OPUS, ((int64_t)1 << 32) + 48000, 1, RILL_ERANGE },
        { (rill_audio_codec_t)7, 16000, 1, RILL_EINVAL },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rill_err_t err =
            rill_audio_packet_decoder_new(NULL, cases[i].codec, cases[i].rate, cases[i].ch, &d);
        ck_assert_msg(err == cases[i].want, "case %zu: %s", i, rill_err_name(err));
        ck_assert_ptr_null(d);
        ck_assert(rill_last_error(err)[0] != '\0');
    }
    rill_audio_packet_params_t p = rill_audio_packet_default_params();
    p.max_gap = 0;
    ck_assert_int_eq(rill_audio_packet_decoder_new(&p, RILL_AUDIO_CODEC_PCM16, 16000, 1, &d),
                     RILL_EINVAL);
    p = rill_audio_packet_default_params();
    p.max_conceal_ms = 2001;
    ck_assert_int_eq(rill_audio_packet_decoder_new(&p, RILL_AUDIO_CODEC_PCM16, 16000, 1, &d),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_audio_packet_decoder_new(NULL, RILL_AUDIO_CODEC_PCM16, 16000, 1, NULL),
                     RILL_EINVAL);

    rill_audio_codec_t c = RILL_AUDIO_CODEC_PCM16;
    ck_assert_int_eq(rill_audio_codec_from_name("opus", 4, &c), RILL_OK);
    ck_assert_int_eq(c, RILL_AUDIO_CODEC_OPUS);
    ck_assert_int_eq(rill_audio_codec_from_name("pcm16", 5, &c), RILL_OK);
    ck_assert_int_eq(c, RILL_AUDIO_CODEC_PCM16);
    ck_assert_int_eq(rill_audio_codec_from_name("opusX", 4, &c), RILL_OK); /* len counts */
    ck_assert_int_eq(rill_audio_codec_from_name("mp3", 3, &c), RILL_EUNSUPPORTED);
    ck_assert_int_eq(rill_audio_codec_from_name("pcm1", 4, &c), RILL_EUNSUPPORTED);
    ck_assert_int_eq(c, RILL_AUDIO_CODEC_OPUS);
    ck_assert_int_eq(rill_audio_codec_from_name(NULL, 0, &c), RILL_EINVAL);
    ck_assert_str_eq(rill_audio_codec_name(RILL_AUDIO_CODEC_OPUS), "opus");
    ck_assert_str_eq(rill_audio_codec_name(RILL_AUDIO_CODEC_PCM16), "pcm16");
    ck_assert_str_eq(rill_audio_codec_name((rill_audio_codec_t)9), "?");
}
END_TEST

static rill_err_t make_opus_dec(void) {
    rill_audio_packet_decoder_t *d = NULL;
    rill_err_t err = rill_audio_packet_decoder_new(NULL, RILL_AUDIO_CODEC_OPUS, 48000, 2, &d);
    rill_audio_packet_decoder_destroy(&d);
    return err;
}

static rill_err_t make_pcm_dec(void) {
    rill_audio_packet_decoder_t *d = NULL;
    rill_err_t err = rill_audio_packet_decoder_new(NULL, RILL_AUDIO_CODEC_PCM16, 44100, 2, &d);
    rill_audio_packet_decoder_destroy(&d);
    return err;
}

START_TEST(packet_alloc_failures) {
    every_alloc_fails(make_opus_dec, "opus decoder");
    every_alloc_fails(make_pcm_dec, "pcm16 decoder");
}
END_TEST

/* ---- capture -------------------------------------------------------------------------------- */

/* The test driver: the callback PortAudio would call, called directly. 48 kHz stereo, a 100 ms
 * ring (4800 frames rounded up to 8192 slots). Reading drains and resamples exactly as the
 * resampler does on the same frames; a callback that finds the ring full drops and counts the
 * frames that do not fit; a NULL input is silence; PortAudio's overflow flag is counted; the
 * callback allocates nothing. */
START_TEST(capture_callback_driver) {
    rill_audio_capture_params_t p = rill_audio_capture_default_params();
    p.rate = 48000;
    p.channels = 2;
    p.ring_ms = 100;
    rill_audio_capture_t *c = NULL;
    rill_err_t err = rill_audio_capture_new(&p, &c);
    ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
    ck_assert_int_eq(rill_audio_capture_rate(c), 48000);
    ck_assert_int_eq(rill_audio_capture_channels(c), 2);
    const int64_t frames = 48000;
    float *x = sine(48000, 2, frames, 1000.0, 0.5);
    int64_t nref;
    float *ref = resample_all(48000, 2, x, frames, 480, &nref);
    float *out = malloc((size_t)nref * sizeof *out + 64);
    int64_t w = 0;
    int64_t calls0 = rill_mem_calls();
    for (int64_t done = 0; done < frames; done += 480) {
        ck_assert_int_eq(rill_audio_capture_callback(x + done * 2, NULL, 480, NULL, 0, c),
                         paContinue);
        if ((done / 480) % 3 == 2) { /* the consumer runs now and then */
            int64_t got = rill_audio_capture_read(c, out + w, 1000);
            ck_assert_int_ge(got, 0);
            w += got;
        }
    }
    ck_assert_int_eq(rill_mem_calls(), calls0); /* 100 callbacks, 33 reads: no allocation */
    int64_t got;
    while ((got = rill_audio_capture_read(c, out + w, 333)) > 0) {
        w += got;
    }
    ck_assert_int_eq(got, 0);
    rill_audio_stats_t st = rill_audio_capture_stats(c);
    ck_assert_int_eq(st.callbacks, 100);
    ck_assert_int_eq(st.frames_captured, frames);
    ck_assert_int_eq(st.frames_in, frames);
    ck_assert_int_eq(st.overruns, 0);
    ck_assert_int_eq(st.samples_out, w);
    ck_assert_int_le(w, nref);
    ck_assert_int_gt(w, nref - 1024); /* all but what the filter holds until a flush */
    ck_assert(memcmp(out, ref, (size_t)w * sizeof *out) == 0);

    /* Overrun: 8192 slots; 20 callbacks of 480 frames without a read fill 8192 and drop 1408. */
    for (int i = 0; i < 20; i++) {
        rill_audio_capture_callback(x + i * 960, NULL, 480, NULL, i == 3 ? paInputOverflow : 0, c);
    }
    st = rill_audio_capture_stats(c);
    ck_assert_int_eq(st.overruns, 20 * 480 - 8192);
    ck_assert_int_eq(st.device_overflow, 1);
    int64_t before = st.frames_in;
    while ((got = rill_audio_capture_read(c, out, 1000)) > 0) {
    }
    st = rill_audio_capture_stats(c);
    ck_assert_int_eq(st.frames_in - before, 8192);
    ck_assert_int_eq(st.frames_captured, st.frames_in + st.overruns);

    /* NULL input: silence (after the filter settles, zeros). */
    for (int i = 0; i < 20; i++) {
        rill_audio_capture_callback(NULL, NULL, 480, NULL, 0, c);
    }
    int64_t z = 0;
    float last = 1.0f;
    while ((got = rill_audio_capture_read(c, out, 100)) > 0) {
        z += got;
        last = out[got - 1];
    }
    ck_assert_int_gt(z, 2000);
    ck_assert(fabsf(last) < 1e-6f);
    ck_assert_int_eq(rill_audio_capture_read(c, NULL, 0), 0);
    ck_assert_int_eq(rill_audio_capture_read(c, NULL, 5), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_capture_stop(c), RILL_OK); /* never started */
    rill_audio_capture_destroy(&c);
    ck_assert_ptr_null(c);
    rill_audio_capture_destroy(&c);
    free(x), free(ref), free(out);
}
END_TEST

/* The two sides on two threads: a producer thread calls the callback 2000 times with 256 frames
 * of a counter (k / 2^24: exact in float, in range), the consumer reads meanwhile. At 16 kHz mono
 * the resampler passes samples through exactly, so the output must be strictly increasing (no
 * frame reordered, doubled or torn) and, after the last read, every frame is either read or
 * counted as an overrun. */
typedef struct producer {
    rill_audio_capture_t *c;
    int calls, frames;
} producer_t;

static void *produce(void *arg) {
    producer_t *p = arg;
    float buf[256];
    int64_t k = 1;
    for (int i = 0; i < p->calls; i++) {
        for (int j = 0; j < p->frames; j++) {
            buf[j] = (float)k++ / 16777216.0f;
        }
        rill_audio_capture_callback(buf, NULL, (unsigned long)p->frames, NULL, 0, p->c);
        if (i % 64 == 0) {
            sched_yield();
        }
    }
    return NULL;
}

START_TEST(capture_two_threads) {
    rill_audio_capture_params_t p = rill_audio_capture_default_params();
    p.rate = 16000;
    p.ring_ms = 50; /* 800 frames, 1024 slots: overruns happen when the consumer lags */
    rill_audio_capture_t *c = NULL;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_OK);
    producer_t pr = { c, 2000, 256 };
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, produce, &pr), 0);
    static float out[700];
    float last = 0.0f;
    int64_t total = 0;
    /* Until the producer has finished (joined: its last push is then visible), and once more. */
    for (int round = 0; round < 2; round++) {
        if (round == 1) {
            ck_assert_int_eq(pthread_join(t, NULL), 0);
        }
        do {
            int64_t got;
            while ((got = rill_audio_capture_read(c, out, 700)) > 0) {
                for (int64_t i = 0; i < got; i++) {
                    ck_assert_msg(out[i] > last, "sample %lld: %g after %g", (long long)(total + i),
                                  (double)out[i], (double)last);
                    last = out[i];
                }
                total += got;
            }
            ck_assert_int_eq(got, 0);
        } while (round == 0 && rill_audio_capture_stats(c).callbacks < pr.calls);
    }
    rill_audio_stats_t st = rill_audio_capture_stats(c);
    ck_assert_int_eq(st.frames_captured, (int64_t)pr.calls * pr.frames);
    ck_assert_int_eq(st.frames_in + st.overruns, st.frames_captured);
    ck_assert_int_eq(st.samples_out, total);
    ck_assert_int_eq(total, st.frames_in); /* 16 kHz: nothing held back */
    rill_audio_capture_destroy(&c);
}
END_TEST

START_TEST(capture_bad_params) {
    rill_audio_capture_t *c = NULL;
    rill_audio_capture_params_t p = rill_audio_capture_default_params();
    p.rate = 48000;
    p.channels = 0;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_ERANGE);
    p.channels = 300;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_ERANGE);
    p.channels = 1;
    p.rate = 10000000;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_ERANGE);
    p.rate = -5;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_EINVAL);
    p.rate = 48000;
    p.ring_ms = 5;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_EINVAL);
    p.rate = 384000;
    p.channels = 32;
    p.ring_ms = 60000; /* 2.9 GB of ring */
    rill_err_t big = rill_audio_capture_new(&p, &c);
    ck_assert_int_eq(big, RILL_EINVAL);
    ck_assert(strstr(rill_last_error(big), "MiB") != NULL);
    p.rate = 48000;
    p.channels = 1;
    p.ring_ms = 100;
    p.device = -2;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_EINVAL);
    p.device = 4000; /* creation needs no device when the rate is given; start does */
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_OK);
    rill_err_t err = rill_audio_capture_start(c);
    ck_assert_int_eq(err, RILL_ENOTFOUND);
    ck_assert(strstr(rill_last_error(err), "4000") != NULL);
    rill_audio_capture_destroy(&c);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(rill_audio_capture_new(&p, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_audio_capture_read(NULL, NULL, 0), RILL_EINVAL);
}
END_TEST

static rill_err_t make_capture(void) {
    rill_audio_capture_params_t p = rill_audio_capture_default_params();
    p.rate = 44100;
    p.channels = 2;
    rill_audio_capture_t *c = NULL;
    rill_err_t err = rill_audio_capture_new(&p, &c);
    rill_audio_capture_destroy(&c);
    return err;
}

START_TEST(capture_alloc_failures) {
    every_alloc_fails(make_capture, "capture");
}
END_TEST

/* ALSA's null device through PortAudio, where offered: the stream starts, the callback runs on
 * PortAudio's thread, the consumer drains while it runs, and after stop every frame handed to
 * the callback is accounted for (read or counted as an overrun; ALSA's null capture delivers
 * silence as fast as it is asked, so overruns are expected). */
START_TEST(capture_alsa_null) {
    rill_audio_device_t devs[16];
    int64_t n = rill_audio_devices(devs, 16);
    ck_assert_int_ge(n, 0);
    int32_t idx = -1;
    for (int64_t i = 0; i < n && i < 16; i++) {
        ck_assert(devs[i].channels > 0 && devs[i].rate > 0 && devs[i].name[0] != '\0');
        if (strcmp(devs[i].name, "rill_null") == 0) {
            idx = devs[i].index;
        }
    }
    if (idx < 0) {
        printf("capture_alsa_null: PortAudio offers no device 'rill_null' (%lld input devices; "
               "no ALSA host API, or ALSA ignored %s/.asoundrc): skipped\n",
               (long long)n, g_dir);
        return;
    }
    rill_audio_capture_params_t p = rill_audio_capture_default_params();
    p.device = idx;
    p.rate = 16000;
    p.ring_ms = 500;
    p.frames_per_buffer = 256;
    rill_audio_capture_t *c = NULL;
    ck_assert_int_eq(rill_audio_capture_new(&p, &c), RILL_OK);
    rill_err_t err = rill_audio_capture_start(c);
    ck_assert_msg(err == RILL_OK, "%s", rill_last_error(err));
    ck_assert_int_eq(rill_audio_capture_start(c), RILL_EBUSY);
    static float out[4096];
    int64_t got_total = 0;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        int64_t got = rill_audio_capture_read(c, out, 4096);
        ck_assert_int_ge(got, 0);
        for (int64_t i = 0; i < got; i++) { /* what the null device gives, cleaned */
            ck_assert(isfinite(out[i]) && fabsf(out[i]) <= 1.0f);
        }
        got_total += got;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
    ck_assert_int_eq(rill_audio_capture_stop(c), RILL_OK);
    int64_t got;
    while ((got = rill_audio_capture_read(c, out, 4096)) > 0) {
        got_total += got;
    }
    rill_audio_stats_t st = rill_audio_capture_stats(c);
    ck_assert_int_gt(st.callbacks, 0);
    ck_assert_int_gt(st.frames_in, 0);
    ck_assert_int_eq(st.frames_captured, st.frames_in + st.overruns);
    ck_assert_int_eq(st.samples_out, got_total);
    printf("capture_alsa_null: %lld callbacks, %lld frames, %lld overruns\n",
           (long long)st.callbacks, (long long)st.frames_captured, (long long)st.overruns);
    rill_audio_capture_destroy(&c);
}
END_TEST

/* ---- voice activity ------------------------------------------------------------------------- */

/* 1 s of noise at -60 dBFS, 600 ms of a -9 dBFS tone, 200 ms noise, 600 ms tone, 1.5 s noise:
 * the tones are speech, the 200 ms gap is bridged by the 300 ms hangover, speech ends 300 ms
 * after the last tone, the pause then grows to the trailing noise's length; the decisions do not
 * depend on chunking. */
static float *vad_signal(int64_t *n) {
    const int64_t seg[] = { 16000, 9600, 3200, 9600, 24000 };
    int64_t total = 0;
    for (int i = 0; i < 5; i++) {
        total += seg[i];
    }
    float *x = malloc((size_t)total * sizeof *x);
    int64_t at = 0;
    for (int s = 0; s < 5; s++) {
        for (int64_t i = 0; i < seg[s]; i++, at++) {
            double noise = ((double)test_rand_below(test_rng(), 2001) - 1000.0) / 1000.0;
            x[at] = (float)(s % 2 == 1 ? 0.5 * sin(2 * PI * 300.0 * at / 16000.0) : 0.0017 * noise);
        }
    }
    *n = total;
    return x;
}

START_TEST(vad_tones_and_pauses) {
    int64_t n;
    float *x = vad_signal(&n);
    rill_vad_t *v = NULL;
    ck_assert_int_eq(rill_vad_new(NULL, &v), RILL_OK);
    ck_assert(!rill_vad_speech(v));
    ck_assert(rill_vad_level_db(v) == -120.0f && rill_vad_floor_db(v) == -70.0f);
    uint8_t *s = malloc((size_t)n / 480 + 1);
    int64_t frames = rill_vad_feed(v, x, (size_t)n, s, (size_t)n / 480 + 1);
    ck_assert_int_eq(frames, n / 480);
    /* Frame k covers [30k, 30k+30) ms. Tones: 1000-1600 ms and 1800-2400 ms. */
    for (int64_t k = 0; k < frames; k++) {
        int64_t t0 = k * 30, t1 = t0 + 30;
        bool in_tone = (t0 >= 1000 && t1 <= 1600) || (t0 >= 1800 && t1 <= 2400);
        bool in_gap = t0 >= 1600 && t1 <= 1800;
        bool quiet = t1 <= 1000 || t0 >= 2400 + 300 + 30;
        if (in_tone || in_gap) {
            ck_assert_msg(s[k] == 1, "frame %lld (%lld ms) should be speech", (long long)k,
                          (long long)t0);
        } else if (quiet) {
            ck_assert_msg(s[k] == 0, "frame %lld (%lld ms) should be silence", (long long)k,
                          (long long)t0);
        }
    }
    ck_assert(!rill_vad_speech(v));
    /* The last raw speech frame is the one ending at or just after 2400 ms. */
    int64_t pause = rill_vad_pause_ms(v);
    ck_assert_msg(pause >= 1500 - 30 && pause <= 1500 + 30, "pause %lld", (long long)pause);
    ck_assert_int_eq(rill_vad_frames(v), frames);
    int64_t sf = rill_vad_speech_frames(v);
    ck_assert_msg(sf >= 38 && sf <= 42, "speech frames %lld", (long long)sf);
    ck_assert(rill_vad_floor_db(v) < -55.0f && rill_vad_floor_db(v) > -70.0f);

    /* Chunk invariance. */
    rill_vad_t *v2 = NULL;
    ck_assert_int_eq(rill_vad_new(NULL, &v2), RILL_OK);
    uint8_t *s2 = malloc((size_t)frames);
    int64_t done = 0, fr = 0;
    while (done < n) {
        size_t k = 1 + test_rand_below(test_rng(), 1000);
        k = (int64_t)k < n - done ? k : (size_t)(n - done);
        int64_t got = rill_vad_feed(v2, x + done, k, s2 + fr, (size_t)(frames - fr));
        ck_assert_int_ge(got, 0);
        fr += got;
        done += (int64_t)k;
        if (got > 0) {
            ck_assert(rill_vad_speech(v2) == (s2[fr - 1] == 1));
        }
    }
    ck_assert_int_eq(fr, frames);
    ck_assert(memcmp(s, s2, (size_t)frames) == 0);
    ck_assert_int_eq(rill_vad_pause_ms(v2), pause);
    /* Reset: the same signal again gives the same decisions. */
    rill_vad_reset(v2);
    ck_assert_int_eq(rill_vad_pause_ms(v2), 0);
    ck_assert_int_eq(rill_vad_feed(v2, x, (size_t)n, s2, (size_t)frames), frames);
    ck_assert(memcmp(s, s2, (size_t)frames) == 0);
    ck_assert_int_eq(rill_vad_frames(v2), 2 * frames);
    /* Decisions not wanted; NaN counted as 0. */
    float nanbuf[480];
    for (int i = 0; i < 480; i++) {
        nanbuf[i] = NAN;
    }
    ck_assert_int_eq(rill_vad_feed(v2, nanbuf, 480, NULL, 0), 1);
    ck_assert(rill_vad_level_db(v2) == -120.0f);
    ck_assert_int_eq(rill_vad_feed(v2, NULL, 5, NULL, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_vad_feed(v2, x, 5, NULL, 3), RILL_EINVAL);
    ck_assert_int_eq(rill_vad_feed(NULL, x, 5, NULL, 0), RILL_EINVAL);
    rill_vad_destroy(&v);
    rill_vad_destroy(&v2);
    ck_assert_ptr_null(v2);
    free(x), free(s), free(s2);
}
END_TEST

/* A background that gets louder (-60 to -35 dBFS, above min_level_db and above the floor by
 * more than the threshold) is speech at first, then taken as noise once the floor has risen:
 * with floor_rise_db 5 dB/s within about 5 s. */
START_TEST(vad_floor_follows_louder_noise) {
    rill_vad_params_t p = rill_vad_default_params();
    p.floor_rise_db = 5.0f;
    p.start_floor_db = -60.0f;
    rill_vad_t *v = NULL;
    ck_assert_int_eq(rill_vad_new(&p, &v), RILL_OK);
    static float x[16000];
    for (int sec = 0; sec < 8; sec++) {
        for (int i = 0; i < 16000; i++) {
            double noise = ((double)test_rand_below(test_rng(), 2001) - 1000.0) / 1000.0;
            x[i] = (float)(0.031 * noise);
        }
        ck_assert_int_gt(rill_vad_feed(v, x, 16000, NULL, 0), 0);
        if (sec == 0) {
            ck_assert(rill_vad_speech(v));
        }
    }
    ck_assert(!rill_vad_speech(v));
    ck_assert(rill_vad_floor_db(v) > -40.0f);
    rill_vad_destroy(&v);
}
END_TEST

START_TEST(vad_bad_params) {
    rill_vad_t *v = NULL;
    rill_vad_params_t p = rill_vad_default_params();
    p.frame_ms = 25;
    ck_assert_int_eq(rill_vad_new(&p, &v), RILL_EINVAL);
    ck_assert(strstr(rill_last_error(RILL_EINVAL), "frame_ms 25") != NULL);
    p = rill_vad_default_params();
    p.threshold_db = NAN;
    ck_assert_int_eq(rill_vad_new(&p, &v), RILL_EINVAL);
    p = rill_vad_default_params();
    p.hangover_ms = -1;
    ck_assert_int_eq(rill_vad_new(&p, &v), RILL_EINVAL);
    p = rill_vad_default_params();
    p.min_level_db = 3.0f;
    ck_assert_int_eq(rill_vad_new(&p, &v), RILL_EINVAL);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(rill_vad_new(NULL, NULL), RILL_EINVAL);
    ck_assert(!rill_vad_speech(NULL));
    ck_assert_int_eq(rill_vad_pause_ms(NULL), 0);
    int64_t live0 = rill_mem_stats(RILL_MEM_INGEST).n_live;
    rill_mem_fail_nth(1);
    ck_assert_int_eq(rill_vad_new(NULL, &v), RILL_ENOMEM);
    rill_mem_fail_nth(0);
    ck_assert_ptr_null(v);
    ck_assert_int_eq(rill_mem_stats(RILL_MEM_INGEST).n_live, live0);
}
END_TEST

/* Null handles give zeros, never crash. */
START_TEST(null_handles) {
    rill_audio_stats_t z = { 0 };
    rill_audio_stats_t a = rill_audio_resampler_stats(NULL), b = rill_audio_file_stats(NULL),
                       c = rill_audio_packet_stats(NULL), d = rill_audio_capture_stats(NULL);
    ck_assert(memcmp(&a, &z, sizeof z) == 0 && memcmp(&b, &z, sizeof z) == 0 &&
              memcmp(&c, &z, sizeof z) == 0 && memcmp(&d, &z, sizeof z) == 0);
    ck_assert_uint_eq(rill_audio_resampler_out_max(NULL, 10), 0);
    ck_assert_uint_eq(rill_audio_packet_out_max(NULL), 0);
    ck_assert_int_eq(rill_audio_file_info(NULL).rate, 0);
    ck_assert_int_eq(rill_audio_capture_rate(NULL), 0);
    rill_audio_resampler_reset(NULL);
    rill_vad_reset(NULL);
    rill_audio_packet_decoder_destroy(NULL);
    rill_audio_capture_destroy(NULL);
    rill_audio_file_close(NULL);
    rill_vad_destroy(NULL);
    ck_assert_int_eq(rill_audio_devices(NULL, 1), RILL_EINVAL);
}
END_TEST

int main(void) {
    if (!test_tmpdir_make(g_dir, sizeof g_dir, "audio")) {
        return 1;
    }
    /* ALSA reads $HOME/.asoundrc when PortAudio first initialises it (nothing has yet). */
    FILE *rc = fopen(test_path_in(g_dir, ".asoundrc"), "w");
    if (rc == NULL || fputs("pcm.rill_null {\n    type null\n}\n", rc) < 0 || fclose(rc) != 0) {
        perror("test_audio: .asoundrc");
        return 1;
    }
    setenv("HOME", g_dir, 1);

    Suite *su = suite_create("audio");
    TCase *tr = tcase_create("resampler");
    tcase_add_test(tr, resample_sine_accuracy);
    tcase_add_test(tr, resample_chunk_invariance);
    tcase_add_test(tr, resample_bound_at_the_limits);
    tcase_add_test(tr, resample_absurd_formats);
    tcase_add_test(tr, resample_cleans_nan_inf);
    tcase_add_test(tr, resample_refusals_change_nothing);
    tcase_add_test(tr, resample_alloc_failures);
    suite_add_tcase(su, tr);
    TCase *tf = tcase_create("files");
    tcase_add_test(tf, file_wav_flac_sine);
    tcase_add_test(tf, file_ogg_opus_sine);
    tcase_add_test(tf, file_pocketsphinx_clip);
    tcase_add_test(tf, file_damaged);
    tcase_add_test(tf, file_absurd_and_nan);
    tcase_add_test(tf, file_alloc_failures);
    suite_add_tcase(su, tf);
    TCase *tp = tcase_create("packets");
    tcase_add_test(tp, packet_opus_in_order);
    tcase_add_test(tp, packet_opus_loss_dup_late);
    tcase_add_test(tp, packet_gaps_bounded);
    tcase_add_test(tp, packet_garbage_changes_nothing);
    tcase_add_test(tp, packet_pcm16);
    tcase_add_test(tp, packet_absurd_formats);
    tcase_add_test(tp, packet_alloc_failures);
    suite_add_tcase(su, tp);
    TCase *tc = tcase_create("capture");
    tcase_add_test(tc, capture_callback_driver);
    tcase_add_test(tc, capture_two_threads);
    tcase_add_test(tc, capture_bad_params);
    tcase_add_test(tc, capture_alloc_failures);
    tcase_add_test(tc, capture_alsa_null);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(su, tc);
    TCase *tv = tcase_create("vad");
    tcase_add_test(tv, vad_tones_and_pauses);
    tcase_add_test(tv, vad_floor_follows_louder_noise);
    tcase_add_test(tv, vad_bad_params);
    tcase_add_test(tv, null_handles);
    suite_add_tcase(su, tv);
    tcase_set_timeout(tr, 60);
    tcase_set_timeout(tf, 60);
    tcase_set_timeout(tp, 60);
    tcase_set_timeout(tv, 60);

    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    if (failed == 0 && test_dir_remove(g_dir) != 0) {
        return 1;
    }
    return failed == 0 ? 0 : 1;
}
