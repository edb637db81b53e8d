/*
 * test_whisper.c - Whisper on rill's backend (forward/rill_whisper.h) against CTranslate2, the
 * oracle, on the same weights, and the decoder's own contracts.
 *
 * The oracle's numbers are h-whisper-gguf's reference files (tests/data/ref/whisper/, written
 * by tools/ref_whisper.py with faster-whisper 1.2.1 / CTranslate2 4.8.5, compute_type float32,
 * 2 threads): faster-whisper's mel features of each clip (mel_<clip>.f32, 80 x frames), 19 whole
 * rows of the encoder output and every row's sum and sum of squares (enc_<clip>_rows.f32,
 * enc_<clip>_stats.f32), whole logit rows of the decoder (dec_<clip>_full.f32) and greedy
 * transcripts (transcripts.tsv). The features go in as faster-whisper's transcribe feeds them:
 * the first frames - 1 columns, zero-padded to 3000. Tests that need a file skip (with a line)
 * when it is absent; the suite exits 77 without the model.
 *
 * Tolerances (measured maxima in the comments; bounds a few times those). Both sides compute in
 * f32 with f16 weights widened to f32; what differs is the summation order of every dot product
 * (rill: llama.cpp's tinyBLAS / vec_dot lanes and rill's dense-attention lanes; CTranslate2:
 * oneDNN/MKL GEMMs), so the differences are a few f32 ulps per op, grown through the layers:
 *   encoder output: stored rows max |d| 4.2e-5 (lv0880) / 6.0e-5 (birch) for values up to 9.9
 *     (6.6e-6 of max |ref|; over all 1500 rows, measured separately, 3.9e-4 of 12.4, 3.1e-5);
 *     bound 5e-5 of max |ref|, and every row's sum (relative to its sum of |x|) and sum of
 *     squares within 20 times that;
 *   decoder logits: max |d| 8.6e-5 for rows up to 34 (positions 1..12 of lv0880 measured
 *     separately; positions 1, 2 here); bound 1e-5 of max |row| + 1e-4, and the same arg-max;
 *   with the mapped F16 weights (f32_weights false: activations rounded to f16 per matmul, as
 *     llama.cpp's F16 matmul does) the encoder's stored rows are within 6.4e-4 of their scale
 *     (bound 4e-3) and the greedy transcripts are still equal: the f16 rounding (2^-11 relative)
 *     of every matmul input, grown through the conv stem and 4 layers.
 * Greedy transcripts: token ids equal to faster-whisper's, and the text too, from the oracle's
 * features and end to end from the WAV files through rill's own mel front end (rill_mel.h).
 *
 * Model: models/whisper-tiny.en.gguf (scripts/setup.sh), or the directory in
 * RILL_TEST_WHISPER_DIR; reference files: RILL_TEST_WHISPER_REF overrides the directory.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_forward.h"
#include "rill_mel.h"
#include "rill_whisper.h"
#include "test_util.h"

static char g_tiny[TEST_PATH_MAX];
static char g_ref[TEST_PATH_MAX - 64];

/* The 19 encoder rows tools/ref_whisper.py stores whole (its ENC_ROWS). */
static const int32_t enc_rows[] = { 0,   1,   2,   3,   64,  65,  127,  128,  129, 130,
                                    149, 150, 151, 400, 749, 750, 1200, 1498, 1499 };
enum { N_ENC_ROWS = sizeof enc_rows / sizeof enc_rows[0] };

typedef struct rig {
    rill_model_t *m;
    rill_backend_t *b;
    rill_whisper_t *w;
} rig_t;

static int64_t live(void) {
    return rill_mem_stats(RILL_MEM_MODEL).n_live + rill_mem_stats(RILL_MEM_KERNELS).n_live;
}

static rig_t rig_open_with(bool f32_weights, int32_t max_logits) {
    rig_t r = { 0 };
    ck_assert_int_eq(rill_model_load(g_tiny, rill_model_default_params(), &r.m), RILL_OK);
    rill_backend_params_t bp = rill_backend_default_params();
    bp.kind = RILL_BACKEND_CPU;
    bp.cpu.n_threads = 2;
    ck_assert_int_eq(rill_backend_new(&bp, &r.b), RILL_OK);
    rill_whisper_params_t wp = rill_whisper_default_params();
    wp.f32_weights = f32_weights;
    wp.max_logits = max_logits;
    rill_err_t e = rill_whisper_new(r.m, r.b, &wp, &r.w);
    ck_assert_msg(e == RILL_OK, "whisper_new: %s", rill_last_error(e));
    return r;
}

static rig_t rig_open(bool f32_weights) {
    return rig_open_with(f32_weights, rill_whisper_default_params().max_logits);
}

static void rig_close(rig_t *r) {
    rill_whisper_destroy(&r->w);
    rill_backend_destroy(&r->b);
    rill_model_destroy(&r->m);
}

/* A reference file's bytes, or NULL (with a SKIP line) when absent. */
static void *ref_file(const char *name, size_t *len) {
    char path[TEST_PATH_MAX + 64];
    const int w = snprintf(path, sizeof path, "%s/%s", g_ref, name);
    ck_assert(w > 0 && (size_t)w < sizeof path);
    if (!test_file_exists(path)) {
        printf("SKIP part: %s is missing (tools/ref_whisper.py writes it)\n", path);
        return NULL;
    }
    return test_read_file(path, len);
}

/* The encoder input of a clip as faster-whisper's transcribe makes it from its features: the
 * first frames - 1 columns, zero-padded to n_frames; NULL when the reference is absent. */
static float *clip_mel(const char *clip, int32_t n_mels, int32_t n_frames) {
    char name[64];
    snprintf(name, sizeof name, "mel_%s.f32", clip);
    size_t len = 0;
    float *f = ref_file(name, &len);
    if (f == NULL) {
        return NULL;
    }
    ck_assert_uint_eq(len % (4 * (size_t)n_mels), 0);
    const int32_t frames = (int32_t)(len / 4 / (size_t)n_mels), use = frames - 1;
    ck_assert_int_ge(use, 1);
    ck_assert_int_le(use, n_frames);
    float *mel = calloc((size_t)n_mels * (size_t)n_frames, sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    for (int32_t c = 0; c < n_mels; c++) {
        memcpy(mel + (size_t)c * n_frames, f + (size_t)c * frames, (size_t)use * sizeof *mel);
    }
    free(f);
    return mel;
}

static rill_whisper_window_t *encode_clip(rig_t *r, const char *clip) {
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r->w);
    const int32_t nf = rill_whisper_n_frames(r->w);
    float *mel = clip_mel(clip, hp->n_mels, nf);
    if (mel == NULL) {
        return NULL;
    }
    rill_whisper_window_t *win = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r->w, &win), RILL_OK);
    ck_assert(!rill_whisper_window_encoded(win));
    rill_err_t e = rill_whisper_encode(r->w, mel, nf, win);
    ck_assert_msg(e == RILL_OK, "encode %s: %s", clip, rill_last_error(e));
    ck_assert(rill_whisper_window_encoded(win));
    free(mel);
    return win;
}

/* Encoder output against the oracle's rows and row statistics; returns max |d| / max |ref|. */
static double check_encoder(rig_t *r, const char *clip, double tol) {
    size_t lr = 0, ls = 0;
    char n1[64], n2[64];
    snprintf(n1, sizeof n1, "enc_%s_rows.f32", clip);
    snprintf(n2, sizeof n2, "enc_%s_stats.f32", clip);
    float *rows = ref_file(n1, &lr), *stats = ref_file(n2, &ls);
    rill_whisper_window_t *win = rows != NULL && stats != NULL ? encode_clip(r, clip) : NULL;
    if (win == NULL) {
        free(rows);
        free(stats);
        return -1.0;
    }
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r->w);
    const int64_t Ta = hp->n_audio_ctx, d = hp->n_audio_state;
    ck_assert_uint_eq(lr, (size_t)N_ENC_ROWS * (size_t)d * 4);
    ck_assert_uint_eq(ls, (size_t)Ta * 2 * 4);
    float *enc = malloc((size_t)(Ta * d) * sizeof *enc);
    ck_assert_ptr_nonnull(enc);
    ck_assert_int_eq(rill_whisper_window_read(win, enc, Ta * d), RILL_OK);
    const double scale = test_max_abs(rows, N_ENC_ROWS * d);
    double worst = 0.0;
    for (int i = 0; i < N_ENC_ROWS; i++) {
        const double dd = test_max_diff(enc + enc_rows[i] * d, rows + i * d, d);
        worst = dd > worst ? dd : worst;
    }
    ck_assert_msg(worst <= tol * scale, "%s encoder rows: max |d| %g > %g x %g", clip, worst, tol,
                  scale);
    /* every row: its sum and sum of squares (the oracle's in double) */
    double worst_stat = 0.0;
    for (int64_t t = 0; t < Ta; t++) {
        double s = 0, s2 = 0, sa = 0;
        for (int64_t j = 0; j < d; j++) {
            const double x = enc[t * d + j];
            s += x;
            s2 += x * x;
            sa += fabs(x);
        }
        const double ds = fabs(s - stats[2 * t]) / sa, ds2 = fabs(s2 - stats[2 * t + 1]) / s2;
        worst_stat = ds > worst_stat ? ds : worst_stat;
        worst_stat = ds2 > worst_stat ? ds2 : worst_stat;
        ck_assert_msg(ds <= 20 * tol && ds2 <= 20 * tol,
                      "%s encoder row %lld: sum %g / %g, squares %g / %g", clip, (long long)t, s,
                      (double)stats[2 * t], s2, (double)stats[2 * t + 1]);
    }
    printf("%s encoder: rows max |d| %.3g of max |ref| %.3g (%.3g); row sums and squares within "
           "%.3g\n",
           clip, worst, scale, worst / scale, worst_stat);
    free(enc);
    free(rows);
    free(stats);
    rill_whisper_window_destroy(&win);
    return worst / scale;
}

START_TEST(test_encoder_matches_ctranslate2) {
    rig_t r = rig_open(true);
    check_encoder(&r, "lv0880", 5e-5);
    check_encoder(&r, "birch", 5e-5);
    rig_close(&r);
    /* the mapped F16 weights: the f16 rounding of activations costs accuracy, within bound */
    r = rig_open(false);
    check_encoder(&r, "lv0880", 4e-3);
    rig_close(&r);
}
END_TEST

/* The oracle's sequence for a clip: the prompt and its greedy transcript (transcripts.tsv). */
static int transcript_of(const char *model, const char *clip, int32_t *ids, int cap, char *text,
                         size_t text_cap) {
    size_t len = 0;
    char *tsv = ref_file("transcripts.tsv", &len);
    if (tsv == NULL) {
        return -1;
    }
    char *tsv_end = tsv + len;
    int n = -1;
    for (char *line = tsv; line < tsv_end && n < 0;) {
        char *eol = memchr(line, '\n', (size_t)(tsv_end - line));
        eol = eol != NULL ? eol : tsv_end;
        *eol = '\0';
        char m[64], c[64];
        int off = 0;
        if (line[0] != '#' && sscanf(line, "%63[^\t]\t%63[^\t]\t%n", m, c, &off) == 2 &&
            strcmp(m, model) == 0 && strcmp(c, clip) == 0) {
            char *p = line + off;
            n = 0;
            while (*p != '\t' && *p != '\0') {
                ck_assert_int_lt(n, cap);
                ids[n++] = (int32_t)strtol(p, &p, 10);
                p += *p == ',';
            }
            ck_assert_int_eq(*p, '\t');
            size_t k = 0;
            for (p++; p[0] != '\0' && p[1] != '\0' && k + 1 < text_cap; p += 2) {
                unsigned v;
                ck_assert_int_eq(sscanf(p, "%2x", &v), 1);
                text[k++] = (char)v;
            }
            text[k] = '\0';
        }
        line = eol + 1;
    }
    free(tsv);
    if (n < 0) {
        printf("SKIP part: no transcript of %s by %s in transcripts.tsv\n", clip, model);
    }
    return n;
}

static void check_transcript(rig_t *r, const char *clip) {
    int32_t want[448];
    char text[4096];
    const int n = transcript_of("whisper-tiny.en", clip, want, 448, text, sizeof text);
    rill_whisper_window_t *win = n >= 0 ? encode_clip(r, clip) : NULL;
    if (win == NULL) {
        return;
    }
    rill_whisper_transcript_t t;
    rill_err_t e = rill_whisper_greedy(r->w, win, NULL, &t);
    ck_assert_msg(e == RILL_OK, "greedy: %s", rill_last_error(e));
    ck_assert_msg(t.n_tokens == n, "%s: %d tokens, oracle %d ('%s' vs '%s')", clip, t.n_tokens, n,
                  t.text, text);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(t.tokens[i] == want[i], "%s token %d: %d, oracle %d", clip, i, t.tokens[i],
                      want[i]);
    }
    ck_assert_str_eq(t.text, text);
    ck_assert_uint_eq(t.text_len, strlen(text));
    ck_assert(!t.hit_limit);
    /* speech: the no-speech probability is low */
    ck_assert_msg(t.no_speech_prob >= 0.0f && t.no_speech_prob < 0.2f, "%s no_speech %g", clip,
                  (double)t.no_speech_prob);
    printf("%s: '%s' (%d tokens, no_speech %.4f)\n", clip, t.text, t.n_tokens,
           (double)t.no_speech_prob);
    rill_whisper_transcript_deinit(&t);
    rill_whisper_transcript_deinit(&t); /* idempotent */
    rill_whisper_window_destroy(&win);
}

START_TEST(test_greedy_matches_faster_whisper) {
    rig_t r = rig_open(true);
    check_transcript(&r, "lv0880");
    check_transcript(&r, "birch");
    rig_close(&r);
    r = rig_open(false);
    check_transcript(&r, "lv0880");
    rig_close(&r);
}
END_TEST

/* Logits of every row of the forced sequence ids[0, n), one batch. */
static float *decode_all(rig_t *r, const rill_whisper_window_t *win, const int32_t *ids, int n) {
    const int64_t V = rill_whisper_hparams(r->w)->n_vocab;
    rill_kv_cache_t *kv = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(r->w, RILL_DTYPE_F32, 16, 4, &kv), RILL_OK);
    const int32_t pages[4] = { 2, 0, 3, 1 }; /* scrambled on purpose */
    const rill_page_table_t pt = { pages, 4 };
    rill_batch_token_t tk[64];
    int32_t rows[64];
    ck_assert_int_le(n, 64);
    for (int i = 0; i < n; i++) {
        tk[i] = (rill_batch_token_t){ 0, i, i, i + 1 };
        rows[i] = i;
    }
    const rill_batch_t batch = { n, tk, 1, &pt };
    float *lg = malloc((size_t)(n * V) * sizeof *lg);
    ck_assert_ptr_nonnull(lg);
    const rill_whisper_window_t *wins[1] = { win };
    ck_assert_int_eq(rill_whisper_decode(r->w, kv, &batch, ids, wins, rows, n, lg), RILL_OK);
    rill_kv_cache_destroy(&kv);
    return lg;
}

START_TEST(test_decoder_matches_ctranslate2) {
    rig_t r = rig_open(true);
    const int64_t V = rill_whisper_hparams(r.w)->n_vocab;
    const char *clips[2] = { "lv0880", "birch" };
    for (int c = 0; c < 2; c++) {
        int32_t seq[448];
        char text[4096];
        const int n = transcript_of("whisper-tiny.en", clips[c], seq + 2, 446, text, sizeof text);
        size_t len = 0;
        char name[64];
        snprintf(name, sizeof name, "dec_%s_full.f32", clips[c]);
        float *ref = n >= 0 ? ref_file(name, &len) : NULL;
        rill_whisper_window_t *win = ref != NULL ? encode_clip(&r, clips[c]) : NULL;
        if (win == NULL) {
            free(ref);
            continue;
        }
        ck_assert_uint_eq(len % ((size_t)V * 4), 0);
        const int n_rows = (int)(len / ((size_t)V * 4));
        seq[0] = rill_whisper_hparams(r.w)->tok_sot;
        seq[1] = rill_whisper_hparams(r.w)->tok_no_timestamps;
        float *lg = decode_all(&r, win, seq, 2 + n);
        /* reference row j is decoder position 1 + j (the row after sot, notimestamps, ...) */
        for (int j = 0; j < n_rows; j++) {
            const float *want = ref + (size_t)j * V, *got = lg + (size_t)(1 + j) * V;
            const double scale = test_max_abs(want, V), dd = test_max_diff(got, want, V);
            printf("%s decoder position %d: max |d| %.3g of %.3g\n", clips[c], 1 + j, dd, scale);
            ck_assert_msg(dd <= 1e-5 * scale + 1e-4, "%s position %d: max |d| %g", clips[c], 1 + j,
                          dd);
            ck_assert_int_eq(test_argmax(got, (int)V), test_argmax(want, (int)V));
        }
        free(lg);
        free(ref);
        rill_whisper_window_destroy(&win);
    }
    rig_close(&r);
}
END_TEST

/* A window of digital silence (log-mel floor everywhere: (log10(1e-10) + 4) / 4 after the
 * max - 8 clamp of a constant signal is -1.5): Whisper's no-speech token wins. */
START_TEST(test_no_speech_on_silence) {
    rig_t r = rig_open(true);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const int32_t nf = rill_whisper_n_frames(r.w);
    float *mel = malloc((size_t)hp->n_mels * (size_t)nf * sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    for (int64_t i = 0; i < (int64_t)hp->n_mels * nf; i++) {
        mel[i] = -1.5f;
    }
    rill_whisper_window_t *win = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r.w, &win), RILL_OK);
    ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, win), RILL_OK);
    rill_whisper_transcript_t t;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, NULL, &t), RILL_OK);
    printf("silence: no_speech %.4f, '%s'\n", (double)t.no_speech_prob, t.text);
    ck_assert_msg(t.no_speech_prob > 0.5f, "no_speech %g", (double)t.no_speech_prob);
    rill_whisper_transcript_deinit(&t);
    /* max_tokens stops it early */
    rill_whisper_greedy_params_t gp = rill_whisper_greedy_default_params();
    gp.max_tokens = 1;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_OK);
    ck_assert_int_le(t.n_tokens, 1);
    ck_assert(t.n_tokens == 0 || t.hit_limit);
    rill_whisper_transcript_deinit(&t);
    rill_whisper_window_destroy(&win);
    free(mel);
    rig_close(&r);
}
END_TEST

/* The decoder's batching contracts on a synthetic window (any finite features): a batch of two
 * sequences over scattered pages, each with its own window, gives each sequence the bits it
 * gets alone (rows of a matmul are independent, the attention ops are per token; max_logits
 * covers every row asked, so that no row is projected in a one-row matmul, whose kernel
 * differs, see rill_whisper_decode); a sequence
 * decoded one token at a time gives the one-shot logits within 2e-5 of their scale (only the
 * matmul kernel for 1 token vs 2+ differs: vec_dot vs tinyBLAS lanes). */
START_TEST(test_decode_batching) {
    rig_t r = rig_open_with(true, 16);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const int64_t V = hp->n_vocab;
    const int32_t nf = rill_whisper_n_frames(r.w);
    float *mel = malloc((size_t)hp->n_mels * (size_t)nf * sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    rill_whisper_window_t *wa = NULL, *wb = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r.w, &wa), RILL_OK);
    ck_assert_int_eq(rill_whisper_window_new(r.w, &wb), RILL_OK);
    for (int k = 0; k < 2; k++) {
        for (int64_t i = 0; i < (int64_t)hp->n_mels * nf; i++) {
            mel[i] = (float)sin(0.001 * (double)i * (k + 1)) * 0.8f - 0.2f;
        }
        ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, k == 0 ? wa : wb), RILL_OK);
    }
    free(mel);
    const int32_t sa[5] = { hp->tok_sot, hp->tok_no_timestamps, 383, 12487, 460 };
    const int32_t sb[4] = { hp->tok_sot, hp->tok_no_timestamps, 679, 373 };
    /* alone */
    float *la = decode_all(&r, wa, sa, 5), *lb = decode_all(&r, wb, sb, 4);
    /* together, interleaved: a0 b0 a1 b1 ..., pages scattered in one pool */
    rill_kv_cache_t *kv = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(r.w, RILL_DTYPE_F32, 2, 8, &kv), RILL_OK);
    const int32_t pa[3] = { 5, 1, 6 }, pb[2] = { 0, 7 };
    const rill_page_table_t pts[2] = { { pa, 3 }, { pb, 2 } };
    rill_batch_token_t tk[9];
    int32_t ids[9], rows[9];
    int n = 0;
    for (int i = 0; i < 5; i++) {
        tk[n] = (rill_batch_token_t){ 0, i, i, i + 1 };
        ids[n++] = sa[i];
        if (i < 4) {
            tk[n] = (rill_batch_token_t){ 1, i, i, i + 1 };
            ids[n++] = sb[i];
        }
    }
    for (int i = 0; i < n; i++) {
        rows[i] = n - 1 - i; /* any order */
    }
    const rill_batch_t batch = { n, tk, 2, pts };
    const rill_whisper_window_t *wins[2] = { wa, wb };
    float *lt = malloc((size_t)(n * V) * sizeof *lt);
    ck_assert_ptr_nonnull(lt);
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, rows, n, lt), RILL_OK);
    for (int j = 0; j < n; j++) {
        const int t = rows[j], s = tk[t].seq, p = tk[t].pos;
        const float *alone = (s == 0 ? la : lb) + (size_t)p * V;
        ck_assert_msg(memcmp(lt + (size_t)j * V, alone, (size_t)V * sizeof(float)) == 0,
                      "batched row %d (sequence %d position %d) differs from alone", j, s, p);
    }
    /* one token at a time, continuing in the same cache as the batch left sequence 0 */
    rill_kv_cache_t *kv1 = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(r.w, RILL_DTYPE_F32, 16, 1, &kv1), RILL_OK);
    const int32_t p1[1] = { 0 };
    const rill_page_table_t pt1 = { p1, 1 };
    for (int i = 0; i < 5; i++) {
        rill_batch_token_t one = { 0, i, i, i + 1 };
        const rill_batch_t b1 = { 1, &one, 1, &pt1 };
        float *l1 = malloc((size_t)V * sizeof *l1);
        const int32_t row0 = 0;
        ck_assert_int_eq(rill_whisper_decode(r.w, kv1, &b1, &sa[i], wins, &row0, 1, l1), RILL_OK);
        const double scale = test_max_abs(la + (size_t)i * V, V);
        const double dd = test_max_diff(l1, la + (size_t)i * V, V);
        ck_assert_msg(dd <= 2e-5 * scale, "position %d one at a time: max |d| %g of %g", i, dd,
                      scale);
        free(l1);
    }
    /* an F16 cache (llama.cpp's default type) stays close */
    rill_kv_cache_t *kh = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(r.w, RILL_DTYPE_F16, 16, 1, &kh), RILL_OK);
    rill_batch_token_t t5[5];
    int32_t r5[5];
    for (int i = 0; i < 5; i++) {
        t5[i] = (rill_batch_token_t){ 0, i, i, i + 1 };
        r5[i] = i;
    }
    const rill_batch_t b5 = { 5, t5, 1, &pt1 };
    float *lh = malloc((size_t)(5 * V) * sizeof *lh);
    ck_assert_int_eq(rill_whisper_decode(r.w, kh, &b5, sa, wins, r5, 5, lh), RILL_OK);
    const double dh = test_max_diff(lh, la, 5 * V), sh = test_max_abs(la, 5 * V);
    printf("F16 KV cache: max |d| %.3g of %.3g\n", dh, sh);
    ck_assert_msg(dh <= 2e-3 * sh, "F16 cache: %g of %g", dh, sh);
    free(lh);
    rill_kv_cache_destroy(&kh);
    rill_kv_cache_destroy(&kv1);
    rill_kv_cache_destroy(&kv);
    free(lt);
    free(la);
    free(lb);
    rill_whisper_window_destroy(&wa);
    rill_whisper_window_destroy(&wb);
    rig_close(&r);
}
END_TEST

/* Bad input is refused with RILL_EINVAL (or the documented code) and changes nothing. */
START_TEST(test_bad_arguments) {
    rig_t r = rig_open(false);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const int64_t V = hp->n_vocab;
    const int32_t nf = rill_whisper_n_frames(r.w);
    ck_assert_int_eq(nf, 3000);
    float *mel = calloc((size_t)hp->n_mels * (size_t)nf, sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    rill_whisper_window_t *win = NULL, *other = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r.w, &win), RILL_OK);
    /* encode: frames, NaN, NULLs; a failed encode leaves the window unencoded */
    ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf - 1, win), RILL_EINVAL);
    mel[12345] = NAN;
    ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, win), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "not finite"));
    mel[12345] = 0.0f;
    ck_assert_int_eq(rill_whisper_encode(NULL, mel, nf, win), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_encode(r.w, NULL, nf, win), RILL_EINVAL);
    ck_assert(!rill_whisper_window_encoded(win));
    float probe[4];
    ck_assert_int_eq(rill_whisper_window_read(win, probe, 4), RILL_EINVAL);
    /* decode before encoding, and with bad batches */
    rill_kv_cache_t *kv = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(r.w, RILL_DTYPE_F32, 16, 2, &kv), RILL_OK);
    const int32_t pages[2] = { 0, 1 };
    const rill_page_table_t pt = { pages, 2 };
    rill_batch_token_t tk[2] = { { 0, 0, 0, 1 }, { 0, 1, 1, 2 } };
    int32_t ids[2] = { hp->tok_sot, hp->tok_no_timestamps }, row = 1;
    rill_batch_t batch = { 2, tk, 1, &pt };
    const rill_whisper_window_t *wins[1] = { win };
    float *lg = malloc((size_t)V * sizeof *lg);
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, win), RILL_OK);
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_OK);
    ids[1] = (int32_t)V;
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    ids[1] = hp->tok_no_timestamps;
    tk[1].pos = hp->n_text_ctx;
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    ck_assert_ptr_nonnull(strstr(rill_last_error(RILL_EINVAL), "n_text_ctx"));
    tk[1].pos = 1;
    row = 2;
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    row = 1;
    tk[1].slot = 40; /* beyond the page table */
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    tk[1].slot = 1;
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, NULL, &row, 1, lg), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wins, &row, 1, NULL), RILL_EINVAL);
    /* a window and a cache of another rill_whisper_t */
    rill_whisper_t *w2 = NULL;
    rill_whisper_params_t wp = rill_whisper_default_params();
    wp.f32_weights = false;
    ck_assert_int_eq(rill_whisper_new(r.m, r.b, &wp, &w2), RILL_OK);
    ck_assert_int_eq(rill_whisper_window_new(w2, &other), RILL_OK);
    ck_assert_int_eq(rill_whisper_encode(w2, mel, nf, other), RILL_OK);
    const rill_whisper_window_t *wrong[1] = { other };
    ck_assert_int_eq(rill_whisper_decode(r.w, kv, &batch, ids, wrong, &row, 1, lg), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, other), RILL_EINVAL);
    rill_whisper_transcript_t t;
    ck_assert_int_eq(rill_whisper_greedy(r.w, other, NULL, &t), RILL_EINVAL);
    ck_assert_ptr_null(t.tokens);
    rill_kv_cache_t *kv2 = NULL;
    ck_assert_int_eq(rill_whisper_kv_cache_new(w2, RILL_DTYPE_F32, 16, 2, &kv2), RILL_OK);
    ck_assert_int_eq(rill_whisper_decode(r.w, kv2, &batch, ids, wins, &row, 1, lg), RILL_EINVAL);
    rill_kv_cache_destroy(&kv2);
    rill_whisper_window_destroy(&other);
    rill_whisper_destroy(&w2);
    /* prompts: English-only model */
    int32_t p[4];
    ck_assert_int_eq(rill_whisper_prompt(r.w, NULL, p, 4), 2);
    ck_assert_int_eq(p[0], hp->tok_sot);
    ck_assert_int_eq(p[1], hp->tok_no_timestamps);
    ck_assert_int_eq(rill_whisper_prompt(r.w, "en", p, 4), 2);
    ck_assert_int_eq(rill_whisper_prompt(r.w, "de", p, 4), RILL_ENOTFOUND);
    ck_assert_int_eq(rill_whisper_prompt(r.w, NULL, p, 1), RILL_EFULL);
    rill_whisper_greedy_params_t gp = rill_whisper_greedy_default_params();
    gp.language = "fr";
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_ENOTFOUND);
    gp.language = NULL;
    gp.max_tokens = -1;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_EINVAL);
    /* creation: arguments, a backend too narrow, a non-whisper model */
    rill_whisper_t *w3 = NULL;
    ck_assert_int_eq(rill_whisper_new(NULL, r.b, NULL, &w3), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_new(r.m, NULL, NULL, &w3), RILL_EINVAL);
    wp.max_batch = rill_backend_max_batch(r.b) + 1;
    ck_assert_int_eq(rill_whisper_new(r.m, r.b, &wp, &w3), RILL_EINVAL);
    ck_assert_ptr_null(w3);
    rill_backend_params_t bp = rill_backend_default_params();
    bp.max_n_in = 1000; /* conv2 takes 3 x 384 */
    rill_backend_t *narrow = NULL;
    ck_assert_int_eq(rill_backend_new(&bp, &narrow), RILL_OK);
    ck_assert_int_eq(rill_whisper_new(r.m, narrow, NULL, &w3), RILL_EUNSUPPORTED);
    rill_backend_destroy(&narrow);
    rill_forward_t *fw = NULL;
    ck_assert_int_eq(rill_forward_new(r.m, r.b, NULL, &fw), RILL_EUNSUPPORTED);
    ck_assert_ptr_null(fw);
    char llama[TEST_PATH_MAX];
    if (test_file_exists(test_model_path(llama, sizeof llama, "rill-tiny-llama-F32.gguf"))) {
        rill_model_t *lm = NULL;
        ck_assert_int_eq(rill_model_load(llama, rill_model_default_params(), &lm), RILL_OK);
        ck_assert_int_eq(rill_whisper_new(lm, r.b, NULL, &w3), RILL_EUNSUPPORTED);
        rill_model_destroy(&lm);
    }
    free(lg);
    free(mel);
    rill_kv_cache_destroy(&kv);
    rill_whisper_window_destroy(&win);
    rig_close(&r);
}
END_TEST

/* Every allocation of creation, window, encode and greedy failing in turn: RILL_ENOMEM and
 * nothing leaked (mapped F16 weights, so that each try is quick). */
START_TEST(test_allocation_failures) {
    rill_model_t *m = NULL;
    ck_assert_int_eq(rill_model_load(g_tiny, rill_model_default_params(), &m), RILL_OK);
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = 1;
    rill_backend_t *b = NULL;
    ck_assert_int_eq(rill_backend_new(&bp, &b), RILL_OK);
    rill_whisper_params_t wp = rill_whisper_default_params();
    wp.f32_weights = false;
    const int64_t before = live();
    int64_t c0 = rill_mem_calls();
    rill_whisper_t *w = NULL;
    ck_assert_int_eq(rill_whisper_new(m, b, &wp, &w), RILL_OK);
    rill_whisper_destroy(&w);
    const int64_t points = rill_mem_calls() - c0;
    ck_assert_int_gt(points, 100);
    test_log_quiet();
    /* every point of the weights' preparation and the buffers; the tokenizer's own walk is
     * tests/test_tokenizer.c's: sample it */
    for (int64_t k = 1; k <= points; k += k < 40 || k > points - 400 ? 1 : 97) {
        rill_mem_fail_nth(k);
        rill_err_t e = rill_whisper_new(m, b, &wp, &w);
        rill_mem_fail_nth(0);
        ck_assert_msg(e == RILL_ENOMEM, "allocation %lld of %lld: %s", (long long)k,
                      (long long)points, rill_err_name(e));
        ck_assert_ptr_null(w);
        ck_assert_int_eq(live(), before);
    }
    test_log_release();
    rill_backend_destroy(&b);
    rill_model_destroy(&m);
}
END_TEST

/* ---- end to end: WAV file -> rill_mel -> encoder -> greedy -------------------------------- */

/* A minimal reader of 16 kHz mono 16-bit PCM WAV files (what the test clips are): samples /
 * 32768 as floats, *n of them; NULL when the file is absent. Asserts the format. */
static float *read_wav(const char *path, int64_t *n) {
    if (!test_file_exists(path)) {
        return NULL;
    }
    size_t len = 0;
    uint8_t *b = test_read_file(path, &len);
    ck_assert_msg(len >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WAVE", 4) == 0,
                  "%s: not a RIFF WAVE file", path);
    float *x = NULL;
    bool fmt_ok = false;
    for (size_t off = 12; off + 8 <= len;) {
        const uint32_t size = (uint32_t)b[off + 4] | (uint32_t)b[off + 5] << 8 |
                              (uint32_t)b[off + 6] << 16 | (uint32_t)b[off + 7] << 24;
        ck_assert_msg(size <= len - off - 8, "%s: chunk runs past the end", path);
        const uint8_t *c = b + off + 8;
        if (memcmp(b + off, "fmt ", 4) == 0) {
            ck_assert_uint_ge(size, 16);
            const unsigned tag = c[0] | c[1] << 8, ch = c[2] | c[3] << 8, bits = c[14] | c[15] << 8;
            const uint32_t rate =
                (uint32_t)c[4] | (uint32_t)c[5] << 8 | (uint32_t)c[6] << 16 | (uint32_t)c[7] << 24;
            ck_assert_msg(tag == 1 && ch == 1 && bits == 16 && rate == 16000,
                          "%s: not 16 kHz mono 16-bit PCM", path);
            fmt_ok = true;
        } else if (memcmp(b + off, "data", 4) == 0) {
            ck_assert_msg(fmt_ok, "%s: data before fmt", path);
            *n = size / 2;
            x = malloc((size_t)(*n > 0 ? *n : 1) * sizeof *x);
            ck_assert_ptr_nonnull(x);
            for (int64_t i = 0; i < *n; i++) {
                const int16_t v = (int16_t)(c[2 * i] | c[2 * i + 1] << 8);
                x[i] = (float)v / 32768.0f;
            }
            break;
        }
        off += 8 + size + (size & 1);
    }
    free(b);
    ck_assert_msg(x != NULL, "%s: no data chunk", path);
    return x;
}

/* Every tiny.en clip of transcripts.tsv whose audio is here, from the WAV file: rill's mel front
 * end (faster-whisper's features: the first n / 160 frames, zero-padded to 3000), the encoder and
 * the greedy decoder give faster-whisper's token ids and text. */
START_TEST(test_wav_end_to_end) {
    static const char *const clips[][2] = {
        { "birch", RILL_SOURCE_DIR "/tests/data/audio/birch_canoe_espeak.wav" },
        { "lv0870", "/usr/share/pocketsphinx/test/data/librivox/"
                    "sense_and_sensibility_01_austen_64kb-0870.wav" },
        { "lv0880", "/usr/share/pocketsphinx/test/data/librivox/"
                    "sense_and_sensibility_01_austen_64kb-0880.wav" },
        { "lv0890", "/usr/share/pocketsphinx/test/data/librivox/"
                    "sense_and_sensibility_01_austen_64kb-0890.wav" },
        { "lv0920", "/usr/share/pocketsphinx/test/data/librivox/"
                    "sense_and_sensibility_01_austen_64kb-0920.wav" },
        { "lv0930", "/usr/share/pocketsphinx/test/data/librivox/"
                    "sense_and_sensibility_01_austen_64kb-0930.wav" },
    };
    rig_t r = rig_open(true);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const rill_whisper_weights_t *ww = rill_model_whisper_weights(r.m);
    const int32_t nf = rill_whisper_n_frames(r.w);
    float *mel = malloc((size_t)hp->n_mels * (size_t)nf * sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    rill_whisper_window_t *win = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r.w, &win), RILL_OK);
    int done = 0;
    /* light runs (sanitizers): the espeak clip and one LibriVox clip, the same path */
    const size_t n_clips = test_light() ? 2 : sizeof clips / sizeof clips[0];
    for (size_t c = 0; c < n_clips; c++) {
        int32_t want[448];
        char text[4096];
        int64_t n = 0;
        const int n_want =
            transcript_of("whisper-tiny.en", clips[c][0], want, 448, text, sizeof text);
        float *x = n_want >= 0 ? read_wav(clips[c][1], &n) : NULL;
        if (x == NULL) {
            printf("SKIP part: %s (%s) absent\n", clips[c][0], clips[c][1]);
            continue;
        }
        ck_assert_int_le(n / RILL_MEL_HOP, nf);
        rill_mel_t *fe = NULL;
        ck_assert_int_eq(rill_mel_new(ww->mel_filters.data, hp->n_mels, n, &fe), RILL_OK);
        ck_assert_int_eq(rill_mel_append(fe, x, n), RILL_OK);
        const int64_t use = n / RILL_MEL_HOP;
        memset(mel, 0, (size_t)hp->n_mels * (size_t)nf * sizeof *mel);
        ck_assert_int_eq(rill_mel_features(fe, 0, use, mel, nf), RILL_OK);
        rill_mel_destroy(&fe);
        ck_assert_int_eq(rill_whisper_encode(r.w, mel, nf, win), RILL_OK);
        rill_whisper_transcript_t t;
        ck_assert_int_eq(rill_whisper_greedy(r.w, win, NULL, &t), RILL_OK);
        printf("%s from its WAV: '%s'\n", clips[c][0], t.text);
        ck_assert_msg(t.n_tokens == n_want, "%s: %d tokens, faster-whisper %d ('%s' vs '%s')",
                      clips[c][0], t.n_tokens, n_want, t.text, text);
        for (int i = 0; i < n_want; i++) {
            ck_assert_int_eq(t.tokens[i], want[i]);
        }
        ck_assert_str_eq(t.text, text);
        rill_whisper_transcript_deinit(&t);
        free(x);
        done++;
    }
    printf("%d clips transcribed from WAV as faster-whisper does\n", done);
    rill_whisper_window_destroy(&win);
    free(mel);
    rig_close(&r);
}
END_TEST

/* ---- timestamps ---- */

#define LIBRIVOX "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-"

/* A clip of timestamps.tsv as samples (malloc'd), or NULL when a WAV is absent: lvall is the five
 * LibriVox clips in order, each followed by 2 s of zeros (tools/ref_whisper.py's samples_of). */
static float *ts_clip(const char *clip, int64_t *n) {
    static const char *const lv[] = { "0870", "0880", "0890", "0920", "0930" };
    char path[256];
    if (strcmp(clip, "birch") == 0) {
        return read_wav(RILL_SOURCE_DIR "/tests/data/audio/birch_canoe_espeak.wav", n);
    }
    if (strcmp(clip, "lvall") != 0) {
        snprintf(path, sizeof path, LIBRIVOX "%s.wav", clip + 2);
        return read_wav(path, n);
    }
    float *all = NULL;
    *n = 0;
    for (int i = 0; i < 5; i++) {
        int64_t k = 0;
        snprintf(path, sizeof path, LIBRIVOX "%s.wav", lv[i]);
        float *x = read_wav(path, &k);
        if (x == NULL) {
            free(all);
            return NULL;
        }
        all = realloc(all, (size_t)(*n + k + 32000) * sizeof *all);
        ck_assert_ptr_nonnull(all);
        memcpy(all + *n, x, (size_t)k * sizeof *x);
        memset(all + *n + k, 0, 32000 * sizeof *all);
        *n += k + 32000;
        free(x);
    }
    return all;
}

static int parse_ids(char **p, int32_t *ids, int cap) {
    int n = 0;
    while (**p != '\t' && **p != '\0') {
        ck_assert_int_lt(n, cap);
        ids[n++] = (int32_t)strtol(*p, p, 10);
        *p += **p == ',';
    }
    return n;
}

static void parse_hex(const char *p, char *out, size_t cap) {
    size_t k = 0;
    for (; p[0] != '\0' && p[1] != '\0' && p[0] != '\t' && k + 1 < cap; p += 2) {
        unsigned v;
        ck_assert_int_eq(sscanf(p, "%2x", &v), 1);
        out[k++] = (char)v;
    }
    out[k] = '\0';
}

/* One clip: the first window's ids against CTranslate2's (W row), then faster-whisper's whole
 * transcribe loop (seek, windows, no-speech skip) against its segments (S rows). */
static int check_timestamps(rig_t *r, const char *clip, char *tsv, const char *tsv_end) {
    int64_t n = 0;
    float *x = ts_clip(clip, &n);
    if (x == NULL) {
        printf("SKIP part: %s's audio is absent\n", clip);
        return 0;
    }
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r->w);
    const rill_whisper_weights_t *ww = rill_model_whisper_weights(r->m);
    const int32_t nf = rill_whisper_n_frames(r->w);
    rill_mel_t *fe = NULL;
    ck_assert_int_eq(rill_mel_new(ww->mel_filters.data, hp->n_mels, n, &fe), RILL_OK);
    ck_assert_int_eq(rill_mel_append(fe, x, n), RILL_OK);
    float *mel = malloc((size_t)hp->n_mels * (size_t)nf * sizeof *mel);
    ck_assert_ptr_nonnull(mel);
    rill_whisper_window_t *win = NULL;
    ck_assert_int_eq(rill_whisper_window_new(r->w, &win), RILL_OK);
    const int64_t content = n / RILL_MEL_HOP;
    int64_t seek = 0;
    int windows = 0, total_segs = 0;
    bool found_w = false;
    static int32_t want[448];
    static char text[4096];
    while (seek < content) {
        const int64_t size = content - seek < nf ? content - seek : nf;
        memset(mel, 0, (size_t)hp->n_mels * (size_t)nf * sizeof *mel);
        ck_assert_int_eq(rill_mel_features(fe, seek, size, mel, nf), RILL_OK);
        ck_assert_int_eq(rill_whisper_encode(r->w, mel, nf, win), RILL_OK);
        rill_whisper_greedy_params_t gp = rill_whisper_greedy_default_params();
        gp.timestamps = true;
        gp.window_ms = (int32_t)size * 10;
        rill_whisper_transcript_t t;
        ck_assert_int_eq(rill_whisper_greedy(r->w, win, &gp, &t), RILL_OK);
        for (char *q = tsv; windows == 0 && q < tsv_end; q += strlen(q) + 1) {
            char m[64], c[64];
            int off = 0;
            if (q[0] != 'W' || sscanf(q, "W\t%63[^\t]\t%63[^\t]\t%n", m, c, &off) != 2 ||
                strcmp(m, "whisper-tiny.en") != 0 || strcmp(c, clip) != 0) {
                continue;
            }
            char *p = q + off;
            const int k = parse_ids(&p, want, 448);
            ck_assert_msg(k == t.n_tokens, "%s window 0: %d ids, CTranslate2 %d", clip, t.n_tokens,
                          k);
            for (int i = 0; i < k; i++) {
                ck_assert_msg(t.tokens[i] == want[i], "%s window 0: id %d is %d, not %d", clip, i,
                              t.tokens[i], want[i]);
            }
            ck_assert(!t.hit_limit);
            ck_assert_double_eq_tol(t.no_speech_prob, strtod(p + 1, NULL), 1e-4);
            found_w = true;
        }
        ck_assert_msg(windows > 0 || found_w, "%s: no W row in timestamps.tsv", clip);
        /* compare this window's segments with the rows of its seek (re-scanned) */
        int j = 0;
        for (char *q = tsv; q < tsv_end; q += strlen(q) + 1) {
            char kind[4], m[64], c[64];
            int off = 0, sk = 0, t0 = 0, t1 = 0;
            if (q[0] != 'S' ||
                sscanf(q, "%3[^\t]\t%63[^\t]\t%63[^\t]\t%n", kind, m, c, &off) != 3 ||
                strcmp(m, "whisper-tiny.en") != 0 || strcmp(c, clip) != 0) {
                continue;
            }
            char *p = q + off;
            ck_assert_int_eq(sscanf(p, "%d\t%d\t%d\t%n", &sk, &t0, &t1, &off), 3);
            if (sk != seek) {
                continue;
            }
            p += off;
            const int k = parse_ids(&p, want, 448);
            parse_hex(p + 1, text, sizeof text);
            ck_assert_msg(j < t.n_segments, "%s seek %lld: rill has %d segments, more expected",
                          clip, (long long)seek, t.n_segments);
            const rill_whisper_segment_t *g = &t.segments[j++];
            const int64_t off_ms = seek * 10;
            printf("%s [%lld %.2f-%.2f] '%.*s'\n", clip, (long long)seek,
                   (double)(off_ms + g->t0_ms) / 1000, (double)(off_ms + g->t1_ms) / 1000,
                   (int)g->text_len, t.text + g->text_off);
            ck_assert_msg(off_ms + g->t0_ms == t0 && off_ms + g->t1_ms == t1,
                          "%s segment %d: %lld-%lld ms, faster-whisper %d-%d", clip, j - 1,
                          (long long)(off_ms + g->t0_ms), (long long)(off_ms + g->t1_ms), t0, t1);
            ck_assert_int_eq(g->n_ids, k);
            for (int i = 0; i < k; i++) {
                ck_assert_int_eq(t.tokens[g->first + i], want[i]);
            }
            ck_assert_msg(g->text_len == strlen(text) &&
                              memcmp(t.text + g->text_off, text, g->text_len) == 0,
                          "%s segment %d: '%.*s', faster-whisper '%s'", clip, j - 1,
                          (int)g->text_len, t.text + g->text_off, text);
        }
        ck_assert_msg(j == t.n_segments, "%s seek %lld: rill has %d segments, faster-whisper %d",
                      clip, (long long)seek, t.n_segments, j);
        windows++;
        total_segs += j;
        /* faster-whisper's no-speech skip, then its seek */
        if (t.no_speech_prob > 0.6f && !(t.avg_logprob > -1.0f)) {
            seek += size;
        } else {
            seek += t.seek_ms / 10;
        }
        rill_whisper_transcript_deinit(&t);
    }
    rill_whisper_window_destroy(&win);
    rill_mel_destroy(&fe);
    free(mel);
    free(x);
    printf("%s: %d windows, %d segments as faster-whisper's\n", clip, windows, total_segs);
    return windows;
}

/* The split on hand-made id sequences: every branch of faster-whisper's rule. */
START_TEST(test_segments_split) {
    rig_t r = rig_open(true);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const int32_t T = hp->tok_timestamp_begin;
    rill_whisper_segment_t sg[8];
    int32_t tail = -1, seek = -1;
    /* two closed segments, ended by a lone timestamp: nothing unfinished */
    const int32_t a[] = { T, 100, 101, T + 50, T + 50, 102, T + 100 };
    ck_assert_int_eq(rill_whisper_segments(hp, a, 7, 12340, sg, 8, &tail, &seek), 2);
    ck_assert_int_eq(sg[0].t0_ms, 0);
    ck_assert_int_eq(sg[0].t1_ms, 1000);
    ck_assert_int_eq(sg[0].first, 0);
    ck_assert_int_eq(sg[0].n_ids, 4);
    ck_assert_int_eq(sg[1].t0_ms, 1000);
    ck_assert_int_eq(sg[1].t1_ms, 2000);
    ck_assert_int_eq(sg[1].first, 4);
    ck_assert_int_eq(sg[1].n_ids, 3);
    ck_assert(sg[0].closed && sg[1].closed);
    ck_assert_int_eq(tail, 7);
    ck_assert_int_eq(seek, 12340);
    /* a pair, then an unfinished segment: the next window starts at the pair */
    const int32_t b[] = { T, 100, T + 50, T + 50, 102, 103 };
    ck_assert_int_eq(rill_whisper_segments(hp, b, 6, 12340, sg, 8, &tail, &seek), 1);
    ck_assert_int_eq(sg[0].t1_ms, 1000);
    ck_assert_int_eq(sg[0].n_ids, 3);
    ck_assert_int_eq(tail, 3);
    ck_assert_int_eq(seek, 1000);
    /* no pair: one segment from 0 to the last timestamp (faster-whisper's rule, even when that
     * is its opening one) */
    const int32_t c[] = { T + 25, 100, 101 };
    ck_assert_int_eq(rill_whisper_segments(hp, c, 3, 12340, sg, 8, &tail, &seek), 1);
    ck_assert_int_eq(sg[0].t0_ms, 0);
    ck_assert_int_eq(sg[0].t1_ms, 500);
    ck_assert(!sg[0].closed);
    ck_assert_int_eq(tail, 3);
    ck_assert_int_eq(seek, 12340);
    const int32_t d[] = { T + 25, 100, T + 75 };
    ck_assert_int_eq(rill_whisper_segments(hp, d, 3, 12340, sg, 8, NULL, NULL), 1);
    ck_assert_int_eq(sg[0].t1_ms, 1500);
    ck_assert(sg[0].closed);
    /* only <|0.00|>, or nothing: to the window's end */
    const int32_t e[] = { T, 100 };
    ck_assert_int_eq(rill_whisper_segments(hp, e, 2, 12340, sg, 8, NULL, NULL), 1);
    ck_assert_int_eq(sg[0].t1_ms, 12340);
    ck_assert_int_eq(rill_whisper_segments(hp, NULL, 0, 777, sg, 1, &tail, &seek), 1);
    ck_assert_int_eq(sg[0].n_ids, 0);
    ck_assert_int_eq(sg[0].t1_ms, 777);
    ck_assert_int_eq(tail, 0);
    /* bad arguments, and more segments than room */
    ck_assert_int_eq(rill_whisper_segments(NULL, a, 7, 0, sg, 8, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_segments(hp, NULL, 3, 0, sg, 8, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_segments(hp, a, -1, 0, sg, 8, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_segments(hp, a, 7, -1, sg, 8, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_segments(hp, a, 7, 0, sg, 0, NULL, NULL), RILL_EINVAL);
    ck_assert_int_eq(rill_whisper_segments(hp, a, 7, 0, sg, 1, NULL, NULL), RILL_EFULL);
    const int32_t f[] = { T, T + 1, T + 2, T + 3 };
    ck_assert_int_eq(rill_whisper_segments(hp, f, 4, 0, sg, 4, NULL, NULL), 3);
    rig_close(&r);
}
END_TEST

/* The timestamp rules one by one, on made-up logits (every logit -10 unless set). */
START_TEST(test_timestamp_rules) {
    rig_t r = rig_open(true);
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(r.w);
    const int32_t T = hp->tok_timestamp_begin, V = hp->n_vocab, eot = hp->tok_eot;
    float *l = malloc((size_t)V * sizeof *l);
    ck_assert_ptr_nonnull(l);
#define RESET()                          \
    for (int32_t i_ = 0; i_ < V; i_++) { \
        l[i_] = -10.0f;                  \
    }
    /* first token: a timestamp no later than max_initial; never <|notimestamps|> */
    RESET();
    l[100] = 20;
    l[T + 60] = 10;
    l[T + 3] = 5;
    l[hp->tok_no_timestamps] = 40;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, NULL, 0, 50), T + 3);
    RESET();
    l[T + 60] = 10;
    l[T + 3] = 5;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, NULL, 0, -1), T + 60);
    /* after text: text wins unless the timestamps' mass beats it; never an earlier timestamp */
    const int32_t g1[] = { T + 3, 100 };
    RESET();
    l[200] = 5;
    l[T + 1] = 30;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g1, 2, 50), 200);
    RESET();
    l[200] = 5;
    for (int i = 10; i < 20; i++) {
        l[T + i] = 4; /* each below the text token, together above it: log(10) + 4 > 5 */
    }
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g1, 2, 50), T + 10);
    RESET();
    l[200] = 5;
    for (int i = 10; i < 12; i++) {
        l[T + i] = 4; /* log(2) + 4 < 5 */
    }
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g1, 2, 50), 200);
    /* after text then a timestamp: a timestamp (not earlier) or eot, never text */
    const int32_t g2[] = { T + 3, 100, T + 10 };
    RESET();
    l[200] = 50;
    l[T + 5] = 40;
    l[T + 20] = 2;
    l[eot] = 1;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g2, 3, 50), T + 20);
    RESET();
    l[200] = 50;
    l[eot] = 3;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g2, 3, 50), eot);
    /* after a pair (or the first timestamp): text or eot */
    const int32_t g3[] = { T + 3, 100, T + 10, T + 10 };
    RESET();
    l[200] = 1;
    l[T + 30] = 50;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g3, 4, 50), 200);
    RESET();
    l[200] = 1;
    l[T + 30] = 50;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g3, 1, 50), 200);
    /* the ordinary suppression still holds */
    RESET();
    l[hp->tok_sot] = 50;
    l[hp->suppress[0]] = 49;
    l[200] = 1;
    ck_assert_int_eq(rill_whisper_pick_timestamp(hp, l, g3, 4, 50), 200);
#undef RESET
    free(l);
    rig_close(&r);
}
END_TEST

/* Timestamp decoding's bad arguments and failed allocations (out zeroed, nothing leaked). */
START_TEST(test_timestamps_failures) {
    rig_t r = rig_open(true);
    rill_whisper_window_t *win = encode_clip(&r, "birch");
    if (win == NULL) {
        rig_close(&r);
        return;
    }
    rill_whisper_greedy_params_t gp = rill_whisper_greedy_default_params();
    gp.timestamps = true;
    rill_whisper_transcript_t t;
    gp.max_initial_ms = -2;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_EINVAL);
    gp.max_initial_ms = 0;
    gp.window_ms = 30001;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_EINVAL);
    gp.window_ms = -1;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_EINVAL);
    ck_assert_ptr_null(t.segments);
    gp.window_ms = 2990;
    const int64_t before = live(), c0 = rill_mem_calls();
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_OK);
    const int64_t points = rill_mem_calls() - c0;
    ck_assert_int_eq(t.n_segments, 1);
    ck_assert_int_eq(t.segments[0].t1_ms, 2560);
    ck_assert_int_eq(t.tail_first, t.n_tokens);
    ck_assert_int_eq(t.seek_ms, 2990);
    /* a confident transcript: the mean log-probability is negative and well above -1 */
    ck_assert(t.avg_logprob < 0.0f && t.avg_logprob > -1.0f);
    rill_whisper_transcript_deinit(&t);
    ck_assert_int_eq(live(), before);
    ck_assert_int_ge(points, 4);
    for (int64_t k = 1; k <= points; k++) {
        rill_mem_fail_nth(k);
        rill_err_t e = rill_whisper_greedy(r.w, win, &gp, &t);
        rill_mem_fail_nth(0);
        ck_assert_int_eq(e, RILL_ENOMEM);
        ck_assert_ptr_null(t.tokens);
        ck_assert_ptr_null(t.segments);
        ck_assert_ptr_null(t.text);
        ck_assert_int_eq(live(), before);
    }
    /* a limit that cuts the decode: hit_limit, and the ids still split */
    gp.max_tokens = 4;
    ck_assert_int_eq(rill_whisper_greedy(r.w, win, &gp, &t), RILL_OK);
    ck_assert(t.hit_limit);
    ck_assert_int_eq(t.n_tokens, 4);
    ck_assert_int_eq(t.tokens[0], rill_whisper_hparams(r.w)->tok_timestamp_begin);
    ck_assert_int_ge(t.n_segments, 1);
    rill_whisper_transcript_deinit(&t);
    rill_whisper_window_destroy(&win);
    rig_close(&r);
}
END_TEST

START_TEST(test_timestamps_match_faster_whisper) {
    size_t len = 0;
    char *tsv = ref_file("timestamps.tsv", &len);
    if (tsv == NULL) {
        return;
    }
    for (size_t i = 0; i < len; i++) {
        tsv[i] = tsv[i] == '\n' ? '\0' : tsv[i];
    }
    rig_t r = rig_open(true);
    static const char *const clips[] = { "birch",  "lv0870", "lv0880", "lv0890",
                                         "lv0920", "lv0930", "lvall" };
    int windows = 0;
    /* light runs (sanitizers): one single window, and the five clips in one stream (windows
     * that seek by timestamps: every rule) */
    static const char *const light[] = { "birch", "lvall" };
    const bool lt = test_light();
    const size_t n_clips = lt ? sizeof light / sizeof light[0] : sizeof clips / sizeof clips[0];
    for (size_t c = 0; c < n_clips; c++) {
        windows += check_timestamps(&r, lt ? light[c] : clips[c], tsv, tsv + len);
    }
    printf("timestamps: %d windows, every segment's ids, text, start and end as faster-whisper's\n",
           windows);
    rig_close(&r);
    free(tsv);
}
END_TEST

static Suite *whisper_suite(void) {
    Suite *s = suite_create("whisper");
    TCase *tc = tcase_create("whisper");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_encoder_matches_ctranslate2);
    tcase_add_test(tc, test_decoder_matches_ctranslate2);
    tcase_add_test(tc, test_greedy_matches_faster_whisper);
    tcase_add_test(tc, test_wav_end_to_end);
    tcase_add_test(tc, test_timestamps_match_faster_whisper);
    tcase_add_test(tc, test_segments_split);
    tcase_add_test(tc, test_timestamp_rules);
    tcase_add_test(tc, test_timestamps_failures);
    tcase_add_test(tc, test_no_speech_on_silence);
    tcase_add_test(tc, test_decode_batching);
    tcase_add_test(tc, test_bad_arguments);
    tcase_add_test(tc, test_allocation_failures);
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
    const char *ref = getenv("RILL_TEST_WHISPER_REF");
    snprintf(g_ref, sizeof g_ref, "%s",
             ref != NULL && ref[0] != '\0' ? ref : RILL_SOURCE_DIR "/tests/data/ref/whisper");
    if (!test_file_exists(g_tiny)) {
        printf("SKIP: %s is missing: run scripts/setup.sh\n", g_tiny);
        return TEST_SKIP;
    }
    SRunner *sr = srunner_create(whisper_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
