/*
 * bench_whisper.c - Whisper on rill's CPU backend: encoder time for one 30 s window and decoder
 * time per token (greedy, one sequence, F32 KV), for the side-by-side with CTranslate2
 * (bench/whisper_ct2.py runs the oracle the same way). Not a test.
 *
 *   bench_whisper MODEL.gguf [--threads N] [--runs R] [--tokens T] [--f16]
 *
 * The window is a LibriVox clip's features when pocketsphinx-testdata is installed (else a
 * synthetic one): the encoder's cost does not depend on the content, the decoder's per-token
 * cost only on its position, so the decode runs T forced steps after the prompt. Prints a table
 * and one JSON line; times are medians of R runs (wall clock, monotonic).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_core.h"
#include "rill_mel.h"
#include "rill_whisper.h"

#define CLIP \
    "/usr/share/pocketsphinx/test/data/librivox/sense_and_sensibility_01_austen_64kb-0880.wav"

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* 16-bit mono WAV samples / 32768 (the clip's header is 44 bytes); NULL when absent. */
static float *read_clip(int64_t *n) {
    FILE *f = fopen(CLIP, "rb");
    if (f == NULL) {
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    const long len = ftell(f);
    if (len <= 44) {
        fclose(f);
        return NULL;
    }
    fseek(f, 44, SEEK_SET);
    *n = (len - 44) / 2;
    int16_t *raw = malloc((size_t)*n * 2);
    float *x = malloc((size_t)*n * sizeof *x);
    if (raw == NULL || x == NULL || fread(raw, 2, (size_t)*n, f) != (size_t)*n) {
        free(raw);
        free(x);
        fclose(f);
        return NULL;
    }
    fclose(f);
    for (int64_t i = 0; i < *n; i++) {
        x[i] = (float)raw[i] / 32768.0f;
    }
    free(raw);
    return x;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [--threads N] [--runs R] [--tokens T] [--f16]\n",
                argv[0]);
        return 2;
    }
    int threads = 2, runs = 5, tokens = 32;
    bool f16 = false;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            threads = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
            runs = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--tokens") == 0 && i + 1 < argc) {
            tokens = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--f16") == 0) {
            f16 = true;
        } else {
            fprintf(stderr, "unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (runs < 1 || runs > 100 || tokens < 1 || tokens > 400 || threads < 1) {
        fprintf(stderr, "runs 1..100, tokens 1..400, threads >= 1\n");
        return 2;
    }
    rill_model_t *m = NULL;
    rill_err_t e = rill_model_load(argv[1], rill_model_default_params(), &m);
    if (e != RILL_OK) {
        fprintf(stderr, "%s: %s\n", argv[1], rill_last_error(e));
        return 1;
    }
    rill_backend_params_t bp = rill_backend_default_params();
    bp.cpu.n_threads = threads;
    rill_backend_t *b = NULL;
    rill_whisper_t *w = NULL;
    rill_whisper_params_t wp = rill_whisper_default_params();
    wp.f32_weights = !f16;
    if ((e = rill_backend_new(&bp, &b)) != RILL_OK || (e = rill_whisper_new(m, b, &wp, &w))) {
        fprintf(stderr, "setup: %s\n", rill_last_error(e));
        return 1;
    }
    const rill_whisper_hparams_t *hp = rill_whisper_hparams(w);
    const int32_t nf = rill_whisper_n_frames(w);
    float *mel = calloc((size_t)hp->n_mels * (size_t)nf, sizeof *mel);
    int64_t n = 0;
    float *x = read_clip(&n);
    if (x != NULL && n / 160 <= nf) {
        rill_mel_t *fe = NULL;
        if (rill_mel_new(rill_model_whisper_weights(m)->mel_filters.data, hp->n_mels, n, &fe) ||
            rill_mel_append(fe, x, n) || rill_mel_features(fe, 0, n / 160, mel, nf)) {
            fprintf(stderr, "mel front end failed\n");
            return 1;
        }
        rill_mel_destroy(&fe);
    } else {
        for (int64_t i = 0; i < (int64_t)hp->n_mels * nf; i++) {
            mel[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
        }
    }
    free(x);
    rill_whisper_window_t *win = NULL;
    rill_kv_cache_t *kv = NULL;
    const int32_t n_pages = (hp->n_text_ctx + 15) / 16;
    int32_t *pages = malloc((size_t)n_pages * sizeof *pages);
    for (int32_t i = 0; i < n_pages; i++) {
        pages[i] = i;
    }
    if (rill_whisper_window_new(w, &win) ||
        rill_whisper_kv_cache_new(w, RILL_DTYPE_F32, 16, n_pages, &kv)) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    double enc[100], dec[100];
    float *logits = malloc((size_t)hp->n_vocab * sizeof *logits);
    const rill_page_table_t pt = { pages, n_pages };
    const rill_whisper_window_t *wins[1] = { win };
    for (int r = 0; r < runs + 1; r++) { /* run 0 warms up */
        const uint64_t t0 = rill_now_ns();
        if ((e = rill_whisper_encode(w, mel, nf, win)) != RILL_OK) {
            fprintf(stderr, "encode: %s\n", rill_last_error(e));
            return 1;
        }
        const uint64_t t1 = rill_now_ns();
        int32_t prompt[4];
        const int np = (int)rill_whisper_prompt(w, "en", prompt, 4);
        rill_batch_token_t tk[4];
        int32_t row = np - 1;
        for (int i = 0; i < np; i++) {
            tk[i] = (rill_batch_token_t){ 0, i, i, i + 1 };
        }
        rill_batch_t batch = { np, tk, 1, &pt };
        e = rill_whisper_decode(w, kv, &batch, prompt, wins, &row, 1, logits);
        const uint64_t t2 = rill_now_ns();
        row = 0;
        for (int i = 0; i < tokens && e == RILL_OK; i++) {
            const int32_t pos = np + i, id = 262; /* " the": any text token */
            tk[0] = (rill_batch_token_t){ 0, pos, pos, pos + 1 };
            batch.n_tok = 1;
            e = rill_whisper_decode(w, kv, &batch, &id, wins, &row, 1, logits);
        }
        const uint64_t t3 = rill_now_ns();
        if (e != RILL_OK) {
            fprintf(stderr, "decode: %s\n", rill_last_error(e));
            return 1;
        }
        if (r > 0) {
            enc[r - 1] = (double)(t1 - t0) * 1e-9;
            dec[r - 1] = (double)(t3 - t2) * 1e-6 / tokens;
        }
    }
    const double enc_s = median(enc, runs), dec_ms = median(dec, runs);
    printf("model %s, %s, %d threads, %s weights, %d runs\n", argv[1], rill_backend_name(b),
           threads, f16 ? "f16 (mapped)" : "f32 (widened)", runs);
    printf("%-28s %10s\n", "encoder, 30 s window (s)", "decode/token (ms)");
    printf("%-28.3f %10.2f\n", enc_s, dec_ms);
    printf("{\"bench\": \"whisper\", \"model\": \"%s\", \"threads\": %d, \"f16\": %s, "
           "\"encode_s\": %.4f, \"decode_ms_per_token\": %.3f, \"tokens\": %d, \"runs\": %d}\n",
           argv[1], threads, f16 ? "true" : "false", enc_s, dec_ms, tokens, runs);
    free(logits);
    free(pages);
    free(mel);
    rill_kv_cache_destroy(&kv);
    rill_whisper_window_destroy(&win);
    rill_whisper_destroy(&w);
    rill_backend_destroy(&b);
    rill_model_destroy(&m);
    return 0;
}
