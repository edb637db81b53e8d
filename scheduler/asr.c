/*
 * asr.c - the streaming recognizer (contract: rill_asr.h).
 *
 * State: the window is the rill_mel_t's sample buffer (no second copy of the samples: the front
 * end holds exactly the window, and rill_mel_drop() is the trim); `start` is the absolute sample
 * index of its first sample (always a multiple of the 160-sample hop, because drops are whole
 * hops), `decoded_to` the absolute end of the audio the last decode saw. The voice detector sees
 * every sample once, as it is fed; what the recognizer keeps of it is the absolute end of the
 * last frame it called speech (smoothed, so with its hangover) and whether any frame since the
 * last decode was speech.
 *
 * The decode is rill_whisper_greedy()'s loop with a prompt in front: one batch for
 * <|startofprev|> + prompt + sot sequence (logits of the sot row for the no-speech probability
 * and of the last row for the first token), then one token per batch, on a KV cache of our own
 * (rill_whisper_greedy() cannot take a prompt). Positions restart at 0 every decode, so the
 * cache's contents are overwritten, never grown.
 *
 * Failure atomicity of a step: everything that can fail (encode, decode, tokenizer, the
 * transcript update) happens before the window is trimmed or any counter moves, and the
 * transcript's update is itself atomic; the trim after it cannot fail (rill_mel_drop and
 * rill_transcript_trim only refuse bad arguments, which are ours).
 *
 * Timestamps (rill_asr_params_t.timestamps, off by default): the decode is
 * rill_whisper_pick_timestamp()'s, the ids are split by rill_whisper_segments(), and the
 * transcript gets the segments (the unfinished tail, and a segment without a closing timestamp,
 * with an unknown end), so it trims the window at the end of a committed segment
 * (whisper_streaming's segment trimming) and the forced trim at max_window_ms is only the
 * fallback. Measured (docs/architecture.md, "The streaming recognizer"): on the five LibriVox
 * clips back to back no word is lost at a trim, where the forced cut of the no-timestamps path
 * lost three.
 *
 * Prompt resets. In test_asr's 10-minute stream (the same sentence between 55 s of noise) the
 * timestamp path committed two of the eleven clips three times: the prompt had become that
 * sentence repeated, the first decode of a cycle (1.3 s of audio, so 32 tokens at most) ran to
 * the limit repeating it, the next one did too, and local agreement committed what they agreed
 * on. Not a trim or origin error: the word times were right, the text was not heard. So a
 * prompted decode that hits max_tokens is decoded again without the prompt (the window is
 * encoded once); the prompt-less decode's hypothesis is what the transcript gets, limit or not.
 * Rejected: faster-whisper's gzip compression-ratio test (2.4), which the first of those
 * hypotheses passed (2.396: texts this short do not compress), and dropping the looping
 * hypothesis (nothing would commit while it lasts). Still not the default: on the espeak verse
 * Obadiah 1:1 (bench/transcribe_eval.py, Bible dev split) the timestamp path's stream lost its
 * last seven words ("arise, and let rise up against the"), which the no-timestamps stream keeps;
 * not understood yet. The prompt stays the committed text before
 * the window (rill_transcript_prompt_before(): after a segment trim committed words of later
 * segments are still in the window). Tried and rejected: no prompt after a trim, which lost the
 * first word of four of the five sentences there. Also rejected: the temperature
 * fallback of faster-whisper (a re-decode at higher temperature when the compression ratio or
 * the mean log-probability is bad): sampling would make the stream's hypotheses disagree more
 * often, which local agreement pays for with commit delay; max_tokens bounds a looping decode
 * instead.
 */
#include <math.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_asr.h"
#include "rill_mel.h"

#define SAMPLES_PER_MS (RILL_AUDIO_RATE / 1000)
#define MAX_PROMPT     8  /* sot sequence tokens at most (rill_whisper_prompt gives 2 or 4) */
#define MAX_INITIAL_TS 50 /* the first timestamp at most 1 s in (faster-whisper's default) */

struct rill_asr {
    rill_whisper_t *w;
    rill_asr_params_t prm;
    char language[16];
    const rill_whisper_hparams_t *hp;
    const rill_tokenizer_t *tok;
    rill_tokenizer_work_t *tw;
    rill_mel_t *mel;
    rill_whisper_window_t *win;
    rill_kv_cache_t *kv;
    rill_transcript_t *tr;
    rill_vad_t *vad;

    float *feat;    /* (M, 2 Ta): the encoder's input */
    float *logits;  /* (2, V) */
    int32_t *ids;   /* [n_text_ctx]: the decoder's input sequence */
    int32_t *gen;   /* [n_text_ctx]: generated ids */
    int32_t *pages; /* identity page table of the cache */
    int32_t n_pages;
    rill_batch_token_t *btok; /* [n_text_ctx] */
    char *ptext;              /* " " + the prompt text */
    size_t ptext_len;         /* 0: no prompt */
    size_t ptext_cap;
    char *text; /* decoded hypothesis */
    size_t text_cap;
    uint8_t *vad_out; /* per-frame decisions of one feed */
    size_t vad_cap;
    rill_whisper_segment_t *wseg; /* [seg_cap]: the decode's segments */
    rill_transcript_seg_t *tseg;  /* [seg_cap + 1]: them and the tail, for the transcript */
    int32_t seg_cap, n_tseg;

    int64_t start;      /* absolute sample of the window's first sample */
    int64_t decoded_to; /* absolute sample the last decode's audio ended at */
    int64_t stepped_to; /* absolute sample at the last step (decoded or skipped) */
    int64_t speech_end; /* absolute end of the last smoothed speech frame; -1 none */
    bool speech_since;  /* a speech frame since the last decode */
    bool settled;       /* the last update left nothing tentative */
    bool finished;
    int64_t frame_samples;
    rill_asr_stats_t st;
};

rill_asr_params_t rill_asr_default_params(void) {
    return (rill_asr_params_t){
        .language = NULL,
        .step_ms = 1000,
        .window_ms = 30000,
        .max_tokens = 0,
        .keep_ms = 300,
        .no_speech_threshold = 0.6f,
        .logprob_threshold = -1.0f,
        .skip_silence = true,
        .keep_committed = true,
        .timestamps = false,
        .transcript = rill_transcript_default_params(),
        .vad = rill_vad_default_params(),
    };
}

void rill_asr_destroy(rill_asr_t **ap) {
    if (ap == NULL || *ap == NULL) {
        return;
    }
    rill_asr_t *a = *ap;
    rill_whisper_window_destroy(&a->win);
    rill_kv_cache_destroy(&a->kv);
    rill_mel_destroy(&a->mel);
    rill_transcript_destroy(&a->tr);
    rill_vad_destroy(&a->vad);
    rill_tokenizer_work_destroy(&a->tw);
    rill_free(a->feat);
    rill_free(a->logits);
    rill_free(a->ids);
    rill_free(a->gen);
    rill_free(a->pages);
    rill_free(a->btok);
    rill_free(a->ptext);
    rill_free(a->text);
    rill_free(a->vad_out);
    rill_free(a->wseg);
    rill_free(a->tseg);
    rill_free(a);
    *ap = NULL;
}

rill_err_t rill_asr_new(rill_whisper_t *w, const rill_model_t *model,
                        const rill_asr_params_t *params, rill_asr_t **out) {
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "asr: NULL out");
    }
    *out = NULL;
    const rill_asr_params_t p = params != NULL ? *params : rill_asr_default_params();
    if (w == NULL || model == NULL) {
        return rill__error(RILL_EINVAL, "asr: NULL whisper or model");
    }
    const rill_whisper_weights_t *ww = rill_model_whisper_weights(model);
    const rill_whisper_hparams_t *mhp = rill_model_whisper_hparams(model);
    if (ww == NULL || mhp == NULL || mhp->n_mels != rill_whisper_hparams(w)->n_mels ||
        mhp->n_vocab != rill_whisper_hparams(w)->n_vocab || ww->mel_filters.data == NULL) {
        return rill__error(RILL_EINVAL, "asr: the model is not the whisper model of w");
    }
    if (p.step_ms < 100 || p.step_ms > 10000 || p.window_ms < 2000 || p.window_ms > 30000 ||
        p.max_tokens < 0 || p.keep_ms < 0 || p.keep_ms > 2000 ||
        !(p.no_speech_threshold >= 0.0f && p.no_speech_threshold <= 1.0f) ||
        !(p.logprob_threshold <= 0.0f) ||
        p.transcript.max_window_ms > (int64_t)p.window_ms - p.step_ms) {
        return rill__error(RILL_EINVAL,
                           "asr: parameter out of range (step_ms %d, window_ms %d, max_tokens %d, "
                           "keep_ms %d, max_window_ms %lld)",
                           p.step_ms, p.window_ms, p.max_tokens, p.keep_ms,
                           (long long)p.transcript.max_window_ms);
    }
    if (p.language != NULL && strlen(p.language) >= sizeof((rill_asr_t *)0)->language) {
        return rill__error(RILL_ENOTFOUND, "asr: no language \"%s\"", p.language);
    }
    int32_t probe[MAX_PROMPT];
    const int64_t np = rill_whisper_prompt(w, p.language, probe, MAX_PROMPT);
    if (np < 0) {
        return (rill_err_t)np;
    }
    rill_asr_t *a = rill_calloc(RILL_MEM_SCHEDULER, 1, sizeof *a);
    if (a == NULL) {
        return rill__error(RILL_ENOMEM, "asr: out of memory");
    }
    a->w = w;
    a->prm = p;
    if (p.language != NULL) {
        strcpy(a->language, p.language);
        a->prm.language = a->language;
    }
    a->hp = rill_whisper_hparams(w);
    a->tok = rill_whisper_tokenizer(w);
    const rill_whisper_hparams_t *hp = a->hp;
    const int32_t n_frames = rill_whisper_n_frames(w);
    const int32_t ctx = hp->n_text_ctx;
    a->n_pages = (ctx + RILL_KV_PAGE_SIZE - 1) / RILL_KV_PAGE_SIZE;
    a->ptext_cap = p.transcript.prompt_bytes + 2;
    /* A token's text is at most a few dozen bytes; 32 per context position is ample, and a
     * decode whose text would not fit is cut (decode_text). */
    a->text_cap = (size_t)ctx * 32 + 1;
    a->frame_samples = (int64_t)p.vad.frame_ms * SAMPLES_PER_MS;
    a->vad_cap = (size_t)((int64_t)p.window_ms * SAMPLES_PER_MS / a->frame_samples + 2);
    a->feat = rill_malloc(RILL_MEM_SCHEDULER, (size_t)hp->n_mels * n_frames * sizeof *a->feat);
    a->logits = rill_malloc(RILL_MEM_SCHEDULER, 2 * (size_t)hp->n_vocab * sizeof *a->logits);
    a->ids = rill_malloc(RILL_MEM_SCHEDULER, (size_t)ctx * sizeof *a->ids);
    a->gen = rill_malloc(RILL_MEM_SCHEDULER, (size_t)ctx * sizeof *a->gen);
    a->pages = rill_malloc(RILL_MEM_SCHEDULER, (size_t)a->n_pages * sizeof *a->pages);
    a->btok = rill_malloc(RILL_MEM_SCHEDULER, (size_t)ctx * sizeof *a->btok);
    a->ptext = rill_malloc(RILL_MEM_SCHEDULER, a->ptext_cap);
    a->text = rill_malloc(RILL_MEM_SCHEDULER, a->text_cap);
    a->vad_out = rill_malloc(RILL_MEM_SCHEDULER, a->vad_cap);
    a->seg_cap = ctx; /* rill_whisper_segments needs at most one per generated id */
    a->wseg = rill_malloc(RILL_MEM_SCHEDULER, (size_t)a->seg_cap * sizeof *a->wseg);
    a->tseg = rill_malloc(RILL_MEM_SCHEDULER, (size_t)(a->seg_cap + 1) * sizeof *a->tseg);
    rill_err_t err = RILL_ENOMEM;
    if (a->feat == NULL || a->logits == NULL || a->ids == NULL || a->gen == NULL ||
        a->pages == NULL || a->btok == NULL || a->ptext == NULL || a->text == NULL ||
        a->vad_out == NULL || a->wseg == NULL || a->tseg == NULL) {
        err = rill__error(RILL_ENOMEM, "asr: out of memory");
        goto fail;
    }
    for (int32_t i = 0; i < a->n_pages; i++) {
        a->pages[i] = i;
    }
    if ((err = rill_tokenizer_work_new(&a->tw)) != RILL_OK ||
        (err = rill_transcript_new(&p.transcript, &a->tr)) != RILL_OK ||
        (err = rill_vad_new(&p.vad, &a->vad)) != RILL_OK) {
        goto fail;
    }
    /* The filterbank is the model's tensor; rill_mel copies it. */
    if ((err = rill_mel_new((const float *)ww->mel_filters.data, hp->n_mels,
                            (int64_t)p.window_ms * SAMPLES_PER_MS, &a->mel)) != RILL_OK ||
        (err = rill_whisper_window_new(w, &a->win)) != RILL_OK ||
        (err = rill_whisper_kv_cache_new(w, RILL_DTYPE_F32, RILL_KV_PAGE_SIZE, a->n_pages,
                                         &a->kv)) != RILL_OK) {
        goto fail;
    }
    a->speech_end = -1;
    a->settled = true;
    *out = a;
    return RILL_OK;
fail:
    rill_asr_destroy(&a);
    return err;
}

int64_t rill_asr_room(const rill_asr_t *a) {
    if (a == NULL) {
        return 0;
    }
    return (int64_t)a->prm.window_ms * SAMPLES_PER_MS - rill_mel_n_samples(a->mel);
}

rill_err_t rill_asr_feed(rill_asr_t *a, const float *x, int64_t n) {
    if (a == NULL || n < 0 || (x == NULL && n > 0)) {
        return rill__error(RILL_EINVAL, "asr feed: bad argument");
    }
    if (a->finished) {
        return rill__error(RILL_EBUSY, "asr feed: the stream was finished");
    }
    if (n > rill_asr_room(a)) {
        return rill__error(RILL_EFULL, "asr feed: %lld samples, room for %lld (step first)",
                           (long long)n, (long long)rill_asr_room(a));
    }
    /* rill_mel checks every sample before it takes any, so the detector only sees accepted
     * audio. */
    rill_err_t err = rill_mel_append(a->mel, x, n);
    if (err != RILL_OK) {
        return err;
    }
    /* The detector has seen every sample since the stream's start, so its frame count gives
     * absolute times, as start does. */
    const int64_t before = rill_vad_frames(a->vad);
    const int64_t k = rill_vad_feed(a->vad, x, (size_t)n, a->vad_out, a->vad_cap);
    for (int64_t i = 0; i < k && i < (int64_t)a->vad_cap; i++) {
        if (a->vad_out[i]) {
            a->speech_end = (before + i + 1) * a->frame_samples;
            a->speech_since = true;
        }
    }
    a->st.samples_fed += n;
    return RILL_OK;
}

bool rill_asr_ready(const rill_asr_t *a) {
    if (a == NULL || a->finished) {
        return false;
    }
    const int64_t end = a->start + rill_mel_n_samples(a->mel);
    return end - a->stepped_to >= (int64_t)a->prm.step_ms * SAMPLES_PER_MS;
}

/* Drops the window's audio before absolute sample `to` (rounded down to a hop) and tells the
 * transcript. Cannot fail for to within the window. */
static void drop_to(rill_asr_t *a, int64_t to) {
    const int64_t n_hops = (to - a->start) / RILL_MEL_HOP;
    if (n_hops <= 0) {
        return;
    }
    const int64_t have = rill_mel_n_samples(a->mel) / RILL_MEL_HOP;
    const int64_t h = n_hops < have ? n_hops : have;
    if (h <= 0) {
        return;
    }
    rill_mel_drop(a->mel, h);
    a->start += h * RILL_MEL_HOP;
    a->st.samples_dropped += h * RILL_MEL_HOP;
    rill_transcript_trim(a->tr, a->start / SAMPLES_PER_MS);
    /* Every trim is at or after the last committed word (the transcript's forced trims, and
     * ours, which only happen when nothing is tentative), so the committed text's tail is now
     * the text before the window: the prompt of the next decodes. */
    size_t plen = 0;
    const char *p = rill_transcript_prompt_before(a->tr, &plen);
    if (plen > a->ptext_cap - 2) {
        plen = a->ptext_cap - 2;
    }
    a->ptext_len = 0;
    if (plen > 0) {
        a->ptext[0] = ' ';
        memcpy(a->ptext + 1, p, plen);
        a->ptext_len = plen + 1;
    }
}

typedef struct hyp {
    int32_t n_gen;
    float no_speech;
    double mean_logprob;
    bool hit_limit;
    size_t text_len;
} hyp_t;

/* Appends the text of ids[0, n)'s text tokens to a->text at *len, cut at what fits (the words
 * past text_cap would only be tentative). Uses a->ids as scratch (the decode is over). */
static rill_err_t add_text(rill_asr_t *a, const int32_t *ids, int32_t n, size_t *len) {
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < a->hp->tok_eot) {
            a->ids[m++] = ids[i];
        }
    }
    const size_t room = a->text_cap - *len;
    int64_t t = rill_tokenizer_decode(a->tok, a->ids, m, RILL_TOKENIZER_DECODE_RAW, a->text + *len,
                                      room, NULL);
    if (t == RILL_EFULL) {
        t = (int64_t)room - 1;
    } else if (t < 0) {
        return (rill_err_t)t;
    }
    if ((size_t)t >= room) {
        t = (int64_t)room - 1;
    }
    *len += (size_t)t;
    a->text[*len] = '\0';
    return RILL_OK;
}

/* Without timestamps: the whole text, one segment of unknown end. */
static rill_err_t text_hyp(rill_asr_t *a, hyp_t *h) {
    size_t len = 0;
    rill_err_t err = add_text(a, a->gen, h->n_gen, &len);
    if (err != RILL_OK) {
        return err;
    }
    h->text_len = len;
    a->tseg[0] = (rill_transcript_seg_t){ a->text, len, 0, -1 };
    a->n_tseg = 1;
    return RILL_OK;
}

/* With timestamps: faster-whisper's segments, then the unfinished tail (from the last segment's
 * end, end unknown); a segment without a closing timestamp has an unknown end too. */
static rill_err_t split_hyp(rill_asr_t *a, hyp_t *h) {
    const int32_t window_ms = (int32_t)(rill_mel_n_samples(a->mel) / SAMPLES_PER_MS);
    int32_t tail = 0;
    const int32_t k =
        rill_whisper_segments(a->hp, a->gen, h->n_gen, window_ms, a->wseg, a->seg_cap, &tail, NULL);
    if (k < 0) {
        return (rill_err_t)k;
    }
    size_t len = 0, off[2];
    int32_t n = 0;
    int64_t last_t = 0;
    rill_err_t err;
    for (int32_t s = 0; s <= k; s++) {
        const bool is_tail = s == k;
        if (is_tail && tail >= h->n_gen) {
            break;
        }
        const int32_t first = is_tail ? tail : a->wseg[s].first;
        const int32_t n_ids = is_tail ? h->n_gen - tail : a->wseg[s].n_ids;
        off[0] = len;
        if ((err = add_text(a, a->gen + first, n_ids, &len)) != RILL_OK) {
            return err;
        }
        off[1] = len;
        int64_t t0 = is_tail ? last_t : a->wseg[s].t0_ms;
        int64_t t1 = is_tail || !a->wseg[s].closed ? -1 : a->wseg[s].t1_ms;
        t0 = t0 < last_t ? last_t : t0;
        if (t1 >= 0 && t1 < t0) {
            t1 = t0;
        }
        last_t = t1 >= 0 ? t1 : t0;
        a->tseg[n++] = (rill_transcript_seg_t){ a->text + off[0], off[1] - off[0], t0, t1 };
    }
    a->n_tseg = n;
    h->text_len = len;
    return RILL_OK;
}

/* Encodes the window into a->win. */
static rill_err_t encode_window(rill_asr_t *a) {
    const rill_whisper_hparams_t *hp = a->hp;
    const int32_t n_frames = rill_whisper_n_frames(a->w);
    const int64_t M = hp->n_mels;
    /* faster-whisper's transcribe: the first n/160 frames, the rest 0.0 */
    int64_t nf = rill_mel_n_samples(a->mel) / RILL_MEL_HOP;
    if (nf > n_frames) {
        nf = n_frames;
    }
    memset(a->feat, 0, (size_t)M * n_frames * sizeof *a->feat);
    rill_err_t err = rill_mel_features(a->mel, 0, nf, a->feat, n_frames);
    if (err != RILL_OK) {
        return err;
    }
    return rill_whisper_encode(a->w, a->feat, n_frames, a->win);
}

/* Decodes the encoded window, with the previous-text prompt when `prompted` (and there is one);
 * the text goes to a->text, the segments to a->tseg. */
static rill_err_t decode_window(rill_asr_t *a, hyp_t *h, bool prompted) {
    const rill_whisper_hparams_t *hp = a->hp;
    rill_err_t err;
    /* The sequence: [prev, prompt tokens..., sot sequence...] */
    const int32_t ctx = hp->n_text_ctx;
    int32_t n = 0;
    if (prompted && a->ptext_len > 0) {
        const int32_t max_prompt = ctx / 2 - 1;
        int64_t total = 0;
        int64_t k = rill_tokenizer_encode_with(a->tok, a->tw, a->ptext, a->ptext_len, false, false,
                                               a->gen, ctx, &total);
        if (k == RILL_EFULL) {
            k = ctx;
        } else if (k < 0) {
            return (rill_err_t)k;
        }
        const int64_t skip = k > max_prompt ? k - max_prompt : 0;
        a->ids[n++] = hp->tok_prev;
        for (int64_t i = skip; i < k; i++) {
            a->ids[n++] = a->gen[i];
        }
    }
    int64_t ns = rill_whisper_prompt(a->w, a->prm.language, a->ids + n, MAX_PROMPT);
    if (ns < 0) {
        return (rill_err_t)ns;
    }
    if (a->prm.timestamps) {
        ns--; /* the sot sequence without <|notimestamps|> */
    }
    const int32_t sot_row = n;
    n += (int32_t)ns;
    const int64_t window_s = (rill_mel_n_samples(a->mel) + RILL_AUDIO_RATE - 1) / RILL_AUDIO_RATE;
    int32_t limit = ctx - n;
    const int32_t cap = a->prm.max_tokens > 0 ? a->prm.max_tokens : (int32_t)(16 + 8 * window_s);
    limit = cap < limit ? cap : limit;

    const rill_page_table_t pt = { a->pages, a->n_pages };
    const rill_whisper_window_t *const wins[1] = { a->win };
    for (int32_t i = 0; i < n; i++) {
        a->btok[i] = (rill_batch_token_t){ 0, i, i, i + 1 };
    }
    rill_batch_t batch = { n, a->btok, 1, &pt };
    const int32_t rows[2] = { sot_row, n - 1 };
    const int64_t V = hp->n_vocab;
    err = rill_whisper_decode(a->w, a->kv, &batch, a->ids, wins, rows, 2, a->logits);
    if (err != RILL_OK) {
        return err;
    }
    h->no_speech = (float)exp(rill_whisper_log_prob(a->logits, V, hp->tok_no_speech));
    float *last = a->logits + V;
    double sum_lp = 0.0;
    int32_t n_gen = 0;
    h->hit_limit = false;
    for (;;) {
        const int32_t next =
            a->prm.timestamps ? rill_whisper_pick_timestamp(hp, last, a->gen, n_gen, MAX_INITIAL_TS)
                              : rill_whisper_pick(hp, last, n_gen == 0);
        sum_lp += rill_whisper_log_prob(last, V, next);
        if (next == hp->tok_eot) {
            break;
        }
        a->gen[n_gen++] = next;
        if (n_gen >= limit) {
            h->hit_limit = true;
            break;
        }
        const int32_t pos = n + n_gen - 1;
        a->btok[0] = (rill_batch_token_t){ 0, pos, pos, pos + 1 };
        batch.n_tok = 1;
        const int32_t row0 = 0;
        err = rill_whisper_decode(a->w, a->kv, &batch, &next, wins, &row0, 1, last);
        if (err != RILL_OK) {
            return err;
        }
    }
    h->n_gen = n_gen;
    h->mean_logprob = sum_lp / (n_gen + 1);
    return a->prm.timestamps ? split_hyp(a, h) : text_hyp(a, h);
}

static void fill_out(const rill_asr_t *a, const rill_transcript_update_t *u, bool decoded,
                     float no_speech, rill_asr_update_t *out) {
    if (out == NULL) {
        return;
    }
    out->decoded = decoded;
    out->committed = u != NULL ? u->committed : "";
    out->committed_len = u != NULL ? u->committed_len : 0;
    if (u != NULL) {
        out->tentative = u->tentative;
        out->tentative_len = u->tentative_len;
    } else {
        out->tentative = rill_transcript_tentative(a->tr, &out->tentative_len);
    }
    out->no_speech_prob = no_speech;
    out->audio_ms = (a->start + rill_mel_n_samples(a->mel)) / SAMPLES_PER_MS;
}

/* The step without the finished check; `final`: decode even less than a hop of new audio. */
static rill_err_t step(rill_asr_t *a, rill_asr_update_t *out) {
    const int64_t n_win = rill_mel_n_samples(a->mel);
    const int64_t end = a->start + n_win;
    if (end <= a->decoded_to || n_win == 0) {
        a->stepped_to = end;
        fill_out(a, NULL, false, 0.0f, out);
        return RILL_OK;
    }
    if (a->prm.skip_silence && a->settled) {
        if (a->speech_end <= a->start) {
            /* nothing in the window was speech: drop it but its tail */
            const int64_t keep = (int64_t)a->prm.keep_ms * SAMPLES_PER_MS;
            a->st.skipped_silence++;
            a->stepped_to = end;
            a->decoded_to = end;
            drop_to(a, end - keep);
            a->st.window_samples = rill_mel_n_samples(a->mel);
            fill_out(a, NULL, false, 0.0f, out);
            return RILL_OK;
        }
        if (!a->speech_since) {
            /* the speech in the window is transcribed and settled; only silence came since */
            a->st.skipped_settled++;
            a->stepped_to = end;
            a->decoded_to = end;
            drop_to(a, a->speech_end);
            a->st.window_samples = rill_mel_n_samples(a->mel);
            fill_out(a, NULL, false, 0.0f, out);
            return RILL_OK;
        }
    }
    hyp_t h = { 0 };
    rill_err_t err = encode_window(a);
    if (err == RILL_OK) {
        err = decode_window(a, &h, true);
    }
    if (err != RILL_OK) {
        return err;
    }
    int64_t tokens = h.n_gen;
    const bool reset = h.hit_limit && a->ptext_len > 0;
    if (reset) {
        /* a prompted decode that runs to the limit is a loop on its prompt (seen: the last
         * sentence repeated three times over 1.3 s of audio, and the next decode agreeing):
         * decode the window again without it, as faster-whisper resets its prompt when it
         * falls back */
        if ((err = decode_window(a, &h, false)) != RILL_OK) {
            return err;
        }
        tokens += h.n_gen;
    }
    const bool no_speech =
        h.no_speech > a->prm.no_speech_threshold && h.mean_logprob < a->prm.logprob_threshold;
    rill_transcript_update_t u;
    err = rill_transcript_update(a->tr, a->tseg, no_speech || h.text_len == 0 ? 0 : a->n_tseg,
                                 n_win / SAMPLES_PER_MS, &u);
    if (err != RILL_OK) {
        return err;
    }
    a->st.decodes++;
    a->st.tokens += tokens;
    a->st.prompt_resets += reset;
    a->st.no_speech += no_speech;
    a->st.hit_limit += h.hit_limit;
    a->decoded_to = end;
    a->stepped_to = end;
    a->speech_since = false;
    a->settled = u.n_tentative == 0;
    if (u.trim_ms >= 0) {
        drop_to(a, u.trim_ms * SAMPLES_PER_MS);
    }
    if (!a->prm.keep_committed) {
        /* the update's committed text is a view into the transcript's buffer: hand it out
         * before it is dropped, through the text buffer (which the next decode overwrites) */
        const size_t m = u.committed_len < a->text_cap - 1 ? u.committed_len : a->text_cap - 1;
        memmove(a->text, u.committed, m);
        a->text[m] = '\0';
        u.committed = a->text;
        u.committed_len = m;
        rill_transcript_drop_committed(a->tr);
    }
    a->st.window_samples = rill_mel_n_samples(a->mel);
    if (a->st.window_samples > a->st.max_window_samples) {
        a->st.max_window_samples = a->st.window_samples;
    }
    fill_out(a, &u, true, h.no_speech, out);
    return RILL_OK;
}

rill_err_t rill_asr_step(rill_asr_t *a, rill_asr_update_t *out) {
    if (a == NULL) {
        return rill__error(RILL_EINVAL, "asr step: NULL");
    }
    if (a->finished) {
        return rill__error(RILL_EBUSY, "asr step: the stream was finished");
    }
    const int64_t w = rill_mel_n_samples(a->mel);
    if (w > a->st.max_window_samples) {
        a->st.max_window_samples = w;
    }
    return step(a, out);
}

rill_err_t rill_asr_finish(rill_asr_t *a, rill_asr_update_t *out) {
    if (a == NULL) {
        return rill__error(RILL_EINVAL, "asr finish: NULL");
    }
    if (a->finished) {
        return rill__error(RILL_EBUSY, "asr finish: the stream was finished");
    }
    rill_asr_update_t s;
    rill_err_t err = step(a, &s);
    if (err != RILL_OK) {
        return err;
    }
    /* The last step's commits and the finish's, joined (both are deltas of the same text). */
    const size_t first_len = s.committed_len;
    if (first_len > 0 && s.committed != a->text) {
        const size_t m = first_len < a->text_cap - 1 ? first_len : a->text_cap - 1;
        memmove(a->text, s.committed, m);
    }
    rill_transcript_update_t u;
    err = rill_transcript_finish(a->tr, &u);
    if (err != RILL_OK) {
        return err;
    }
    a->finished = true;
    size_t len = first_len < a->text_cap - 1 ? first_len : a->text_cap - 1;
    const size_t add =
        u.committed_len < a->text_cap - 1 - len ? u.committed_len : a->text_cap - 1 - len;
    memcpy(a->text + len, u.committed, add);
    len += add;
    a->text[len] = '\0';
    if (!a->prm.keep_committed) {
        rill_transcript_drop_committed(a->tr);
    }
    if (out != NULL) {
        fill_out(a, &u, s.decoded, s.no_speech_prob, out);
        out->committed = a->text;
        out->committed_len = len;
    }
    return RILL_OK;
}

const rill_transcript_t *rill_asr_transcript(const rill_asr_t *a) {
    return a != NULL ? a->tr : NULL;
}

rill_asr_stats_t rill_asr_stats(const rill_asr_t *a) {
    rill_asr_stats_t s = { 0 };
    if (a != NULL) {
        s = a->st;
        s.window_samples = rill_mel_n_samples(a->mel);
    }
    return s;
}
