/*
 * test_asr.c - the streaming recognizer (scheduler/rill_asr.h) with whisper-tiny.en on real
 * speech: the final streaming transcript of two clips against faster-whisper's offline greedy
 * transcript (tests/data/ref/whisper/transcripts.tsv), committed text that only ever grows,
 * silence that is not decoded, memory that stays flat over a 10-minute stream, forced trims in
 * continuous speech, bad input and failed allocations.
 *
 * Tolerance of the transcript comparison: at most one word edit (substitution, insertion or
 * deletion) per clip after the normalisation (lower case; letters, digits and
 * apostrophes kept, everything else a space). The offline reference decodes the whole clip
 * once; the stream decodes growing windows and commits by agreement, so a word at a window's
 * edge can settle differently (the goal: "within one word per clip").
 *
 * Exits 77 without models/whisper-tiny.en.gguf (RILL_TEST_WHISPER_DIR overrides the folder);
 * the LibriVox clip part skips without pocketsphinx-testdata.
 */
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_asr.h"
#include "rill_audio.h"
#include "rill_backend.h"
#include "rill_model.h"
#include "rill_whisper.h"
#include "test_util.h"

#define LV0880 \
    "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"
#define BIRCH RILL_SOURCE_DIR "/tests/data/audio/birch_canoe_espeak.wav"
#define CHUNK 1600 /* 100 ms, as `rill transcribe` feeds */

static char g_tiny[TEST_PATH_MAX];
static rill_model_t *g_model;
static rill_backend_t *g_be;
static rill_whisper_t *g_w;

/* A whole clip as 16 kHz samples (malloc'd), or NULL when the file is absent. */
static float *read_clip(const char *path, int64_t *n) {
    if (!test_file_exists(path)) {
        return NULL;
    }
    rill_audio_file_t *f = NULL;
    ck_assert_int_eq(rill_audio_file_open(path, &f), RILL_OK);
    int64_t cap = 16000, len = 0;
    float *x = malloc((size_t)cap * sizeof *x);
    ck_assert_ptr_nonnull(x);
    for (;;) {
        if (cap - len < CHUNK) {
            cap *= 2;
            x = realloc(x, (size_t)cap * sizeof *x);
            ck_assert_ptr_nonnull(x);
        }
        const int64_t k = rill_audio_file_read(f, x + len, CHUNK);
        ck_assert_int_ge(k, 0);
        if (k == 0) {
            break;
        }
        len += k;
    }
    rill_audio_file_close(&f);
    *n = len;
    return x;
}

/* faster-whisper's tiny.en transcript of clip (transcripts.tsv, text hex) into out. */
static bool ref_text(const char *clip, char *out, size_t cap) {
    size_t len = 0;
    char *tsv =
        test_read_text_if_present(RILL_SOURCE_DIR "/tests/data/ref/whisper/transcripts.tsv", &len);
    if (tsv == NULL) {
        return false;
    }
    bool found = false;
    char want[64];
    snprintf(want, sizeof want, "whisper-tiny.en\t%s\t", clip);
    for (char *line = tsv; line != NULL && *line != '\0';) {
        char *nl = strchr(line, '\n');
        if (nl != NULL) {
            *nl = '\0';
        }
        if (strncmp(line, want, strlen(want)) == 0) {
            const char *hex = strrchr(line, '\t') + 1;
            size_t k = 0;
            for (; hex[0] != '\0' && hex[1] != '\0' && k + 1 < cap; hex += 2) {
                unsigned v = 0;
                ck_assert_int_eq(sscanf(hex, "%2x", &v), 1);
                out[k++] = (char)v;
            }
            out[k] = '\0';
            found = true;
            break;
        }
        line = nl != NULL ? nl + 1 : NULL;
    }
    free(tsv);
    return found;
}

/* The normalisation, split into words: words[i] point into buf. */
static int norm_words(const char *text, char *buf, size_t cap, char **words, int max) {
    size_t k = 0;
    for (const char *p = text; *p != '\0' && k + 1 < cap; p++) {
        char c = *p;
        if (c >= 'A' && c <= 'Z') {
            c = (char)(c - 'A' + 'a');
        }
        const bool keep = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '\'' ||
                          (unsigned char)c >= 0x80;
        buf[k++] = keep ? c : ' ';
    }
    buf[k] = '\0';
    int n = 0;
    for (char *t = strtok(buf, " "); t != NULL && n < max; t = strtok(NULL, " ")) {
        words[n++] = t;
    }
    return n;
}

/* Word edit distance between two texts after normalisation. */
static int word_edits(const char *a, const char *b) {
    static char ba[8192], bb[8192];
    char *wa[512], *wb[512];
    const int na = norm_words(a, ba, sizeof ba, wa, 512),
              nb = norm_words(b, bb, sizeof bb, wb, 512);
    static int d[513][513];
    for (int i = 0; i <= na; i++) {
        for (int j = 0; j <= nb; j++) {
            if (i == 0 || j == 0) {
                d[i][j] = i + j;
                continue;
            }
            const int sub = d[i - 1][j - 1] + (strcmp(wa[i - 1], wb[j - 1]) != 0);
            const int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    }
    return d[na][nb];
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = strstr(hay, needle); p != NULL; p = strstr(p + 1, needle)) {
        n++;
    }
    return n;
}

typedef struct run {
    char *text; /* the deltas joined: the whole committed text (malloc'd) */
    size_t len, cap;
    int updates;
} run_t;

/* Takes one update: appends its committed delta and checks that the recognizer's committed text
 * (with keep_committed) is exactly what the deltas add up to, so it never shrinks or changes. */
static void take(run_t *r, rill_asr_t *a, const rill_asr_update_t *u, bool keep) {
    ck_assert_ptr_nonnull(u->committed);
    ck_assert_ptr_nonnull(u->tentative);
    if (r->len + u->committed_len + 1 > r->cap) {
        r->cap = (r->len + u->committed_len + 1) * 2;
        r->text = realloc(r->text, r->cap);
        ck_assert_ptr_nonnull(r->text);
    }
    memcpy(r->text + r->len, u->committed, u->committed_len);
    r->len += u->committed_len;
    r->text[r->len] = '\0';
    r->updates++;
    if (keep) {
        size_t n = 0;
        const char *c = rill_transcript_committed(rill_asr_transcript(a), &n);
        ck_assert_msg(n == r->len && memcmp(c, r->text, n) == 0,
                      "committed text '%.*s' is not the deltas '%s'", (int)n, c, r->text);
    }
}

/* Streams x[0, n) in 100 ms chunks, stepping whenever ready, then finishes. */
static void stream(rill_asr_t *a, const float *x, int64_t n, run_t *r, bool keep) {
    rill_asr_update_t u;
    for (int64_t i = 0; i < n; i += CHUNK) {
        const int64_t k = n - i < CHUNK ? n - i : CHUNK;
        while (rill_asr_ready(a) || rill_asr_room(a) < k) {
            const rill_err_t e = rill_asr_step(a, &u);
            ck_assert_msg(e == RILL_OK, "step: %s", rill_last_error(e));
            take(r, a, &u, keep);
        }
        ck_assert_int_eq(rill_asr_feed(a, x + i, k), RILL_OK);
    }
}

static void finish(rill_asr_t *a, run_t *r, bool keep) {
    rill_asr_update_t u;
    const rill_err_t e = rill_asr_finish(a, &u);
    ck_assert_msg(e == RILL_OK, "finish: %s", rill_last_error(e));
    take(r, a, &u, keep);
    ck_assert_uint_eq(rill_transcript_tentative(rill_asr_transcript(a), NULL)[0], '\0');
}

static void check_clip(const char *clip, const char *path, bool timestamps) {
    int64_t n = 0;
    float *x = read_clip(path, &n);
    char want[4096];
    if (x == NULL || !ref_text(clip, want, sizeof want)) {
        printf("SKIP part: %s (%s) or its reference absent\n", clip, path);
        free(x);
        return;
    }
    rill_asr_t *a = NULL;
    rill_asr_params_t p = rill_asr_default_params();
    p.timestamps = timestamps;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_OK);
    run_t r = { 0 };
    stream(a, x, n, &r, true);
    finish(a, &r, true);
    const rill_asr_stats_t st = rill_asr_stats(a);
    const int e = word_edits(r.text, want);
    printf("%s%s: streamed \"%s\" (%lld decodes, %d updates); offline reference \"%s\"; %d word "
           "edits\n",
           clip, timestamps ? "" : " (no timestamps)", r.text, (long long)st.decodes, r.updates,
           want, e);
    ck_assert_int_le(e, 1);
    /* it streamed: one decode per second of audio, at least two */
    ck_assert_int_ge(st.decodes, 2);
    ck_assert_int_ge(st.decodes, n / 16000);
    ck_assert_int_eq(st.samples_fed, n);
    rill_asr_destroy(&a);
    ck_assert_ptr_null(a);
    free(r.text);
    free(x);
}

START_TEST(streamed_transcripts_match_the_offline_reference) {
    check_clip("birch", BIRCH, true);
    if (!test_light()) { /* the same path over a longer clip */
        check_clip("lv0880", LV0880, true);
    }
    check_clip("birch", BIRCH, false); /* the default path */
}
END_TEST

static int64_t live_bytes(void) {
    int64_t b = 0;
    for (int t = 0; t < RILL_MEM_COUNT_; t++) {
        b += rill_mem_stats((rill_mem_t)t).bytes;
    }
    return b;
}

/* Low noise, about -60 dBFS: what a quiet room gives, not digital zero. */
static void noise(float *x, int64_t n, rill_rand_t *rng) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = ((float)test_rand_below(rng, 2001) - 1000.0f) * 1.7e-6f;
    }
}

/* The 10-minute stream: the espeak clip after 55 s of room noise, eleven times. Before prompt
 * resets (rill_asr.h, step 2) the timestamp path committed two of the clips three times: from
 * the fifth cycle on, the previous-text prompt is the sentence repeated, the first decode of a
 * cycle (1.3 s of audio) ran to max_tokens repeating it, the next one (2.3 s) too, and local
 * agreement committed the repetition ("smooth" 15 times, live bytes +4672 from cycle 3 to 11). */
static void ten_minutes(bool timestamps) {
    int64_t nc = 0;
    float *clip = read_clip(BIRCH, &nc);
    ck_assert_ptr_nonnull(clip);
    enum { CYCLES = 11, SILENCE_S = 55 };
    const int64_t ns = (int64_t)SILENCE_S * 16000;
    float *sil = malloc((size_t)ns * sizeof *sil);
    ck_assert_ptr_nonnull(sil);
    noise(sil, ns, test_rng());
    rill_asr_params_t p = rill_asr_default_params();
    p.keep_committed = false;
    p.timestamps = timestamps;
    rill_asr_t *a = NULL;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_OK);
    run_t r = { 0 };
    int64_t after3 = 0;
    for (int c = 0; c < CYCLES; c++) {
        stream(a, sil, ns, &r, false);
        stream(a, clip, nc, &r, false);
        if (c == 2) {
            after3 = live_bytes();
        }
    }
    const int64_t end = live_bytes();
    /* the silence after the last clip lets it settle */
    stream(a, sil, 3 * 16000, &r, false);
    finish(a, &r, false);
    const rill_asr_stats_t st = rill_asr_stats(a);
    const double audio_min = (double)st.samples_fed / 16000 / 60;
    printf("%.1f min of audio%s: %lld decodes (%lld prompt resets), %lld silent steps skipped, "
           "%lld settled steps skipped, %lld no-speech, longest window %.1f s; live bytes %lld "
           "after 3 cycles, %lld after %d; \"smooth\" %d times\n",
           audio_min, timestamps ? "" : " (no timestamps)", (long long)st.decodes,
           (long long)st.prompt_resets, (long long)st.skipped_silence,
           (long long)st.skipped_settled, (long long)st.no_speech,
           (double)st.max_window_samples / 16000, (long long)after3, (long long)end, CYCLES,
           count_of(r.text, "smooth"));
    ck_assert_double_ge(audio_min, 10.0);
    /* memory: nothing grows with the stream (the transcript's committed text is dropped) */
    ck_assert_int_le(end, after3 + 4096);
    /* silence is not decoded: only the clips are (about one decode per second of speech, a
     * few more while the tail settles) */
    ck_assert_int_le(st.decodes, CYCLES * 8);
    ck_assert_int_ge(st.skipped_silence + st.skipped_settled, CYCLES * (SILENCE_S - 5));
    ck_assert_int_le(st.max_window_samples, 10 * 16000);
    /* and every clip was transcribed */
    ck_assert_int_ge(count_of(r.text, "smooth"), CYCLES - 1);
    ck_assert_int_le(count_of(r.text, "smooth"), CYCLES); /* and none twice */
    rill_asr_destroy(&a);
    free(r.text);
    free(sil);
    free(clip);
}

START_TEST(a_ten_minute_stream_of_silence_and_speech_stays_bounded) {
    ten_minutes(true);
}
END_TEST

START_TEST(a_ten_minute_stream_without_timestamps_stays_bounded) {
    ten_minutes(false);
}
END_TEST

/* Resident set size now, bytes (/proc/self/statm's second field), or -1 where there is none. */
static int64_t rss_bytes(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL) {
        return -1;
    }
    long long size = 0, res = 0;
    const int k = fscanf(f, "%lld %lld", &size, &res);
    fclose(f);
    return k == 2 ? res * (int64_t)sysconf(_SC_PAGESIZE) : -1;
}

/* Streams noise for n samples in CHUNK pieces, generated as it goes (an hour is not held). */
static void stream_noise(rill_asr_t *a, int64_t n, run_t *r, rill_rand_t *rng) {
    float buf[CHUNK];
    rill_asr_update_t u;
    for (int64_t i = 0; i < n; i += CHUNK) {
        const int64_t k = n - i < CHUNK ? n - i : CHUNK;
        noise(buf, k, rng);
        while (rill_asr_ready(a) || rill_asr_room(a) < k) {
            const rill_err_t e = rill_asr_step(a, &u);
            ck_assert_msg(e == RILL_OK, "step: %s", rill_last_error(e));
            take(r, a, &u, false);
        }
        ck_assert_int_eq(rill_asr_feed(a, buf, k), RILL_OK);
    }
}

/* The memory test: an hour of audio (speech clips between stretches of room noise, so
 * that the detector skips most of it), fed as fast as the recognizer takes it; the process's RSS
 * and core's live bytes are sampled after every minute. Warm-up: the first 15 minutes. RSS grows
 * while the previous-text prompt does (each prompt token touches fresh pages of the decoder's KV
 * cache and scratch, about 27 KB a token for tiny.en), until the prompt reaches prompt_bytes
 * (600 bytes, about 13 minutes of this stream: measured +0.35 MiB a minute until then, then
 * 297.40, 297.45, 297.45 MB after 14, 15, 16 minutes); the
 * allocator's buffers reach their size sooner. After it: live bytes may not grow by more than
 * 4 KiB, RSS by more than 4 MiB (a leak of one decode's buffers per minute would be tens of MiB by
 * the end). Release build only (ctest test_asr_hour; under ASan RSS measures the sanitizer's
 * quarantine, and it takes too long). */
START_TEST(an_hour_of_audio_keeps_memory_flat) {
    int64_t nb = 0, nl = 0;
    float *birch = read_clip(BIRCH, &nb), *lv = read_clip(LV0880, &nl);
    ck_assert_ptr_nonnull(birch);
    enum { MINUTES = 60, WARM = 15 };
    rill_asr_params_t p = rill_asr_default_params();
    p.keep_committed = false;
    rill_asr_t *a = NULL;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_OK);
    run_t r = { 0 };
    rill_rand_t *rng = test_rng();
    int64_t rss[MINUTES + 1], live[MINUTES + 1];
    const uint64_t t0 = rill_now_ns();
    for (int m = 0; m < MINUTES; m++) {
        /* a minute: the clip (LibriVox's every other minute when present), then noise */
        const bool use_lv = lv != NULL && m % 2 == 1;
        const float *clip = use_lv ? lv : birch;
        const int64_t nc = use_lv ? nl : nb;
        stream(a, clip, nc, &r, false);
        stream_noise(a, 60 * 16000 - nc, &r, rng);
        rss[m] = rss_bytes();
        live[m] = live_bytes();
    }
    stream_noise(a, 3 * 16000, &r, rng);
    finish(a, &r, false);
    const double wall = (double)(rill_now_ns() - t0) * 1e-9;
    const rill_asr_stats_t st = rill_asr_stats(a);
    int64_t rss_max = 0, live_max = 0;
    for (int m = WARM; m < MINUTES; m++) {
        rss_max = rss[m] > rss_max ? rss[m] : rss_max;
        live_max = live[m] > live_max ? live[m] : live_max;
    }
    printf("an hour (%.1f min of audio) in %.1f s: %lld decodes, %lld + %lld steps skipped; RSS "
           "%.1f MiB after %d min, at most %.1f MiB after, %.1f MiB at the end; live bytes %lld "
           "after %d min, at most %lld after; \"smooth\" %d times, \"young\" %d times\n",
           (double)st.samples_fed / 16000 / 60, wall, (long long)st.decodes,
           (long long)st.skipped_silence, (long long)st.skipped_settled,
           (double)rss[WARM - 1] / (1 << 20), WARM, (double)rss_max / (1 << 20),
           (double)rss[MINUTES - 1] / (1 << 20), (long long)live[WARM - 1], WARM,
           (long long)live_max, count_of(r.text, "smooth"), count_of(r.text, "young"));
    ck_assert_double_ge((double)st.samples_fed / 16000, 3600.0);
    ck_assert_int_le(live_max, live[WARM - 1] + 4096);
    if (rss[0] > 0) {
        ck_assert_int_le(rss_max, rss[WARM - 1] + (4 << 20));
    }
    /* the hour was heard: (nearly) every clip, and most of it skipped undecoded */
    ck_assert_int_ge(count_of(r.text, "smooth") + count_of(r.text, "young"), MINUTES - 3);
    ck_assert_int_le(st.decodes, MINUTES * 10);
    ck_assert_int_ge(st.skipped_silence + st.skipped_settled, MINUTES * 40);
    rill_asr_destroy(&a);
    free(r.text);
    free(birch);
    free(lv);
}
END_TEST

START_TEST(continuous_speech_is_trimmed_at_the_window_limit) {
    int64_t nc = 0;
    float *clip = read_clip(BIRCH, &nc);
    ck_assert_ptr_nonnull(clip);
    rill_asr_params_t p = rill_asr_default_params();
    p.timestamps = true; /* segment trims where the decode gives them, else forced */
    p.step_ms = 2000;
    p.transcript.max_window_ms = 12000;
    rill_asr_t *a = NULL;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_OK);
    run_t r = { 0 };
    /* 34 s back to back, or 17 s in light runs (sanitizers): both past the 12 s limit */
    const int loops = test_light() ? 6 : 12;
    for (int i = 0; i < loops; i++) {
        stream(a, clip, nc, &r, true);
    }
    finish(a, &r, true);
    const rill_asr_stats_t st = rill_asr_stats(a);
    printf("%d loops back to back (%.1f s): %lld decodes, %.1f s dropped, longest window %.1f "
           "s, \"smooth\" %d times: %s\n",
           loops, (double)st.samples_fed / 16000, (long long)st.decodes,
           (double)st.samples_dropped / 16000, (double)st.max_window_samples / 16000,
           count_of(r.text, "smooth"), r.text);
    ck_assert_int_gt(st.samples_dropped, 0);
    ck_assert_int_le(st.max_window_samples, (12000 + 2000 + 100) * 16);
    /* forced trims cut inside words now and then; most repeats survive */
    ck_assert_int_ge(count_of(r.text, "smooth"), loops - 3);
    ck_assert_int_le(count_of(r.text, "smooth"), loops + 1);
    rill_asr_destroy(&a);
    free(r.text);
    free(clip);
}
END_TEST

/* A prompted decode that runs to max_tokens is decoded again without the prompt (rill_asr.h,
 * step 2). max_tokens 6 is below the clip's 13 text tokens, so its decodes hit the limit: the
 * first clip's (no prompt yet: nothing to reset), then, once the clip is committed and the window
 * trimmed past it, the second clip's prompted ones, which are redone. */
START_TEST(a_looping_prompted_decode_is_redone_without_the_prompt) {
    int64_t nc = 0;
    float *clip = read_clip(BIRCH, &nc);
    ck_assert_ptr_nonnull(clip);
    const int64_t ns = 3 * 16000;
    float *sil = malloc((size_t)ns * sizeof *sil);
    ck_assert_ptr_nonnull(sil);
    noise(sil, ns, test_rng());
    rill_asr_params_t p = rill_asr_default_params();
    p.max_tokens = 6;
    p.timestamps = true; /* as measured: the redo's first token is a timestamp */
    rill_asr_t *a = NULL;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_OK);
    run_t r = { 0 };
    stream(a, clip, nc, &r, true);
    stream(a, sil, ns, &r, true);
    const rill_asr_stats_t s1 = rill_asr_stats(a);
    size_t plen = 0;
    rill_transcript_prompt_before(rill_asr_transcript(a), &plen);
    stream(a, clip, nc, &r, true);
    finish(a, &r, true);
    const rill_asr_stats_t s2 = rill_asr_stats(a);
    printf("max_tokens 6: %lld decodes, %lld prompt resets, %lld at the limit (first clip: %lld, "
           "%lld, %lld); prompt before the second clip %zu bytes; \"%s\"\n",
           (long long)s2.decodes, (long long)s2.prompt_resets, (long long)s2.hit_limit,
           (long long)s1.decodes, (long long)s1.prompt_resets, (long long)s1.hit_limit, plen,
           r.text);
    ck_assert_int_ge(s1.decodes, 2);
    ck_assert_int_eq(s1.prompt_resets, 0); /* no prompt before the first trim */
    ck_assert_int_eq(s1.hit_limit, s1.decodes);
    ck_assert_uint_gt(plen, 0); /* the first clip's words are the prompt now */
    const int64_t d2 = s2.decodes - s1.decodes, resets = s2.prompt_resets - s1.prompt_resets;
    ck_assert_int_ge(d2, 2);
    /* the prompted decodes that ran to the limit were redone (one that ends in eot within 6
     * tokens, as the clip's last words can, is not) */
    ck_assert_int_ge(resets, 1);
    ck_assert_int_le(resets, d2);
    /* a redone decode counts its 6 prompted tokens and the redo's (a timestamp at least) */
    ck_assert_int_ge(s2.tokens - s1.tokens, resets * 7);
    ck_assert_int_le(s2.tokens - s1.tokens, d2 * 6 + resets * 6);
    rill_asr_destroy(&a);
    free(r.text);
    free(sil);
    free(clip);
}
END_TEST

START_TEST(bad_input_is_refused_and_changes_nothing) {
    rill_asr_t *a = NULL;
    ck_assert_int_eq(rill_asr_new(NULL, g_model, NULL, &a), RILL_EINVAL);
    ck_assert_int_eq(rill_asr_new(g_w, NULL, NULL, &a), RILL_EINVAL);
    ck_assert_int_eq(rill_asr_new(g_w, g_model, NULL, NULL), RILL_EINVAL);
    rill_asr_params_t p = rill_asr_default_params();
    p.step_ms = 50;
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_EINVAL);
    p = rill_asr_default_params();
    p.window_ms = 20000; /* max_window_ms 24000 does not fit */
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_EINVAL);
    p = rill_asr_default_params();
    p.language = "de"; /* tiny.en is English only */
    ck_assert_int_eq(rill_asr_new(g_w, g_model, &p, &a), RILL_ENOTFOUND);
    ck_assert_ptr_null(a);

    ck_assert_int_eq(rill_asr_new(g_w, g_model, NULL, &a), RILL_OK);
    float x[CHUNK] = { 0 };
    x[7] = NAN;
    ck_assert_int_eq(rill_asr_feed(a, x, CHUNK), RILL_EINVAL);
    x[7] = INFINITY;
    ck_assert_int_eq(rill_asr_feed(a, x, CHUNK), RILL_EINVAL);
    ck_assert_int_eq(rill_asr_feed(a, NULL, 5), RILL_EINVAL);
    ck_assert_int_eq(rill_asr_feed(a, x, -1), RILL_EINVAL);
    ck_assert_int_eq(rill_asr_stats(a).samples_fed, 0);
    ck_assert_int_eq(rill_asr_room(a), 30 * 16000);
    ck_assert(!rill_asr_ready(a));
    /* more than the window holds */
    float *big = calloc(31 * 16000, sizeof *big);
    ck_assert_ptr_nonnull(big);
    ck_assert_int_eq(rill_asr_feed(a, big, 31 * 16000), RILL_EFULL);
    ck_assert_int_eq(rill_asr_stats(a).samples_fed, 0);
    /* a step with nothing fed does nothing */
    rill_asr_update_t u;
    ck_assert_int_eq(rill_asr_step(a, &u), RILL_OK);
    ck_assert(!u.decoded);
    ck_assert_uint_eq(u.committed_len + u.tentative_len, 0);
    /* two seconds of digital silence: ready, and the step skips it undecoded */
    ck_assert_int_eq(rill_asr_feed(a, big, 2 * 16000), RILL_OK);
    ck_assert(rill_asr_ready(a));
    ck_assert_int_eq(rill_asr_step(a, &u), RILL_OK);
    ck_assert(!u.decoded);
    ck_assert_int_eq(u.audio_ms, 2000);
    ck_assert_int_eq(rill_asr_stats(a).decodes, 0);
    ck_assert_int_eq(rill_asr_stats(a).skipped_silence, 1);
    ck_assert_int_le(rill_asr_stats(a).window_samples, 300 * 16 + 160);
    ck_assert_int_eq(rill_asr_finish(a, &u), RILL_OK);
    ck_assert_uint_eq(u.committed_len, 0);
    ck_assert_int_eq(rill_asr_feed(a, big, 10), RILL_EBUSY);
    ck_assert_int_eq(rill_asr_step(a, &u), RILL_EBUSY);
    ck_assert_int_eq(rill_asr_finish(a, &u), RILL_EBUSY);
    ck_assert(!rill_asr_ready(a));
    rill_asr_destroy(&a);
    rill_asr_destroy(&a); /* NULL-safe */
    free(big);
}
END_TEST

START_TEST(failed_allocations_leak_nothing) {
    /* every allocation of rill_asr_new, and then of a first decode and its transcript update */
    int64_t nc = 0;
    float *clip = read_clip(BIRCH, &nc);
    ck_assert_ptr_nonnull(clip);
    const int64_t base = live_bytes();
    int fails = 0;
    for (int64_t nth = 1;; nth++) {
        rill_asr_t *a = NULL;
        rill_mem_fail_nth(nth);
        rill_err_t e = rill_asr_new(g_w, g_model, NULL, &a);
        if (e == RILL_OK) {
            /* the step's allocations (the transcript's buffers) */
            rill_mem_fail_nth(0);
            ck_assert_int_eq(rill_asr_feed(a, clip, 16000), RILL_OK);
            const int64_t calls0 = rill_mem_calls();
            rill_asr_update_t u;
            ck_assert_int_eq(rill_asr_step(a, &u), RILL_OK);
            const int64_t step_calls = rill_mem_calls() - calls0;
            rill_asr_destroy(&a);
            for (int64_t k = 1; k <= step_calls; k++) {
                ck_assert_int_eq(rill_asr_new(g_w, g_model, NULL, &a), RILL_OK);
                ck_assert_int_eq(rill_asr_feed(a, clip, 16000), RILL_OK);
                rill_mem_fail_nth(k);
                e = rill_asr_step(a, &u);
                rill_mem_fail_nth(0);
                if (e != RILL_OK) {
                    ck_assert_int_eq(e, RILL_ENOMEM);
                    /* unchanged: the same step now succeeds and decodes */
                    ck_assert_int_eq(rill_asr_stats(a).decodes, 0);
                    ck_assert_int_eq(rill_asr_step(a, &u), RILL_OK);
                    ck_assert(u.decoded);
                    fails++;
                }
                rill_asr_destroy(&a);
            }
            printf("rill_asr_new: %lld allocation points; a first step: %lld (%d failed)\n",
                   (long long)(nth - 1), (long long)step_calls, fails);
            break;
        }
        rill_mem_fail_nth(0);
        ck_assert_msg(e == RILL_ENOMEM, "allocation %lld: %s", (long long)nth, rill_strerror(e));
        ck_assert_ptr_null(a);
        ck_assert_int_eq(live_bytes(), base);
        ck_assert_int_lt(nth, 200);
    }
    ck_assert_int_eq(live_bytes(), base);
    free(clip);
}
END_TEST

static Suite *asr_suite(void) {
    Suite *s = suite_create("asr");
    TCase *tc = tcase_create("asr");
    tcase_set_timeout(tc, 900);
    if (getenv("RILL_TEST_ASR_HOUR") != NULL) {
        /* ctest test_asr_hour (release builds only) */
        tcase_add_test(tc, an_hour_of_audio_keeps_memory_flat);
        suite_add_tcase(s, tc);
        return s;
    }
    tcase_add_test(tc, streamed_transcripts_match_the_offline_reference);
    tcase_add_test(tc, bad_input_is_refused_and_changes_nothing);
    tcase_add_test(tc, failed_allocations_leak_nothing);
    tcase_add_test(tc, continuous_speech_is_trimmed_at_the_window_limit);
    /* The ten-minute cycles of one clip and noise (with and without timestamps): their checks
     * are counts and rill's own live bytes, which the release pass sees; under a sanitizer only
     * time would grow. */
    if (!test_light()) {
        tcase_add_test(tc, a_ten_minute_stream_of_silence_and_speech_stays_bounded);
        tcase_add_test(tc, a_ten_minute_stream_without_timestamps_stays_bounded);
    }
    tcase_add_test(tc, a_looping_prompted_decode_is_redone_without_the_prompt);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) {
    const char *dir = getenv("RILL_TEST_WHISPER_DIR");
    if (dir != NULL && dir[0] != '\0') {
        snprintf(g_tiny, sizeof g_tiny, "%s/whisper-tiny.en.gguf", dir);
    } else {
        test_model_path(g_tiny, sizeof g_tiny, "whisper-tiny.en.gguf");
    }
    if (!test_file_exists(g_tiny)) {
        printf("SKIP: %s is missing: run scripts/setup.sh\n", g_tiny);
        return TEST_SKIP;
    }
    if (rill_model_load(g_tiny, rill_model_default_params(), &g_model) != RILL_OK) {
        printf("cannot load %s\n", g_tiny);
        return EXIT_FAILURE;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = 2;
    if (rill_backend_new(&bp, &g_be) != RILL_OK ||
        rill_whisper_new(g_model, g_be, NULL, &g_w) != RILL_OK) {
        printf("cannot set up whisper\n");
        return EXIT_FAILURE;
    }
    SRunner *sr = srunner_create(asr_suite());
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    rill_whisper_destroy(&g_w);
    rill_backend_destroy(&g_be);
    rill_model_destroy(&g_model);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
