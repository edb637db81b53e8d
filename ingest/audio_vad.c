/*
 * audio_vad.c - energy-based voice activity over 16 kHz frames (rill_audio.h, voice activity).
 *
 * Deliberately simple: a frame's mean square in dBFS against an adaptive noise floor and an
 * absolute floor. It is the first of the two silence tests the streaming recognizer uses (the
 * second is Whisper's own no-speech probability), so its job is to be cheap and to miss little
 * speech; a hangover bridges the short gaps between words. The floor adapts three ways (down at
 * once, toward silence by 5 % a frame, up by at most floor_rise_db a second in speech), which is
 * the minimum-statistics idea in its plainest form.
 *
 * Frames may span calls: the partial frame's sum of squares and sample count are kept, so the
 * decisions do not depend on how the samples are chunked. Rejected: spectral features (band
 * energies, zero crossings): they need an FFT per frame here, and the recognizer already
 * computes a mel spectrogram of the same audio.
 */
#include <math.h>

#include "audio_internal.h"
#include "rill_alloc.h"

#define LEVEL_MIN_DB (-120.0f)

struct rill_vad {
    rill_vad_params_t params;
    int32_t frame_len; /* samples per frame */
    double acc;        /* sum of squares of the partial frame */
    int32_t acc_n;     /* samples in it */
    float floor_db, level_db;
    bool speech;          /* smoothed decision of the last frame */
    int64_t since_speech; /* frames since the last raw speech frame ended */
    bool any_speech;
    int64_t frames, speech_frames;
};

rill_vad_params_t rill_vad_default_params(void) {
    rill_vad_params_t p = {
        .frame_ms = 30,
        .threshold_db = 9.0f,
        .min_level_db = -50.0f,
        .start_floor_db = -70.0f,
        .floor_rise_db = 1.0f,
        .hangover_ms = 300,
    };
    return p;
}

static bool in(float x, float lo, float hi) {
    return x >= lo && x <= hi; /* false for NaN */
}

rill_err_t rill_vad_new(const rill_vad_params_t *params, rill_vad_t **out) {
    rill_vad_params_t p = params != NULL ? *params : rill_vad_default_params();
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "vad: out is NULL");
    }
    if (p.frame_ms < 10 || p.frame_ms > 100 || p.frame_ms % 10 != 0 ||
        !in(p.threshold_db, 0.0f, 60.0f) || !in(p.min_level_db, -100.0f, 0.0f) ||
        !in(p.start_floor_db, -120.0f, 0.0f) || !in(p.floor_rise_db, 0.0f, 60.0f) ||
        p.hangover_ms < 0 || p.hangover_ms > 5000) {
        return rill__error(RILL_EINVAL,
                           "vad: frame_ms %d (10..100, multiple of 10), threshold_db %g (0..60), "
                           "min_level_db %g (-100..0), start_floor_db %g (-120..0), "
                           "floor_rise_db %g (0..60), hangover_ms %d (0..5000)",
                           p.frame_ms, (double)p.threshold_db, (double)p.min_level_db,
                           (double)p.start_floor_db, (double)p.floor_rise_db, p.hangover_ms);
    }
    rill_vad_t *v = rill_calloc(RILL_MEM_INGEST, 1, sizeof *v);
    if (v == NULL) {
        return rill__error(RILL_ENOMEM, "vad: no memory for the handle");
    }
    v->params = p;
    v->frame_len = p.frame_ms * (RILL_AUDIO_RATE / 1000);
    rill_vad_reset(v);
    *out = v;
    return RILL_OK;
}

void rill_vad_destroy(rill_vad_t **vp) {
    if (vp != NULL) {
        rill_free(*vp);
        *vp = NULL;
    }
}

void rill_vad_reset(rill_vad_t *v) {
    if (v != NULL) {
        v->acc = 0.0;
        v->acc_n = 0;
        v->floor_db = v->params.start_floor_db;
        v->level_db = LEVEL_MIN_DB;
        v->speech = false;
        v->since_speech = 0;
        v->any_speech = false;
    }
}

/* Decides one completed frame of mean square ms; returns the smoothed decision. */
static bool decide(rill_vad_t *v, double ms) {
    float level = ms > 0.0 ? (float)(10.0 * log10(ms)) : LEVEL_MIN_DB;
    level = level > LEVEL_MIN_DB ? level : LEVEL_MIN_DB;
    v->level_db = level;
    bool raw = level >= v->floor_db + v->params.threshold_db && level >= v->params.min_level_db;
    if (level < v->floor_db) {
        v->floor_db = level;
    } else if (!raw) {
        v->floor_db += 0.05f * (level - v->floor_db);
    } else {
        float rise = v->params.floor_rise_db * (float)v->params.frame_ms / 1000.0f;
        float room = level - v->floor_db;
        v->floor_db += rise < room ? rise : room;
    }
    v->frames++;
    if (raw) {
        v->speech_frames++;
        v->since_speech = 0;
        v->any_speech = true;
    } else {
        v->since_speech++;
    }
    int64_t hang_frames = v->params.hangover_ms / v->params.frame_ms;
    v->speech = raw || (v->any_speech && v->since_speech <= hang_frames);
    return v->speech;
}

int64_t rill_vad_feed(rill_vad_t *v, const float *samples, size_t n, uint8_t *speech, size_t cap) {
    if (v == NULL || (samples == NULL && n > 0) || (speech == NULL && cap > 0)) {
        return rill__error(RILL_EINVAL, "vad feed: NULL argument");
    }
    int64_t done = 0;
    for (size_t i = 0; i < n; i++) {
        float x = samples[i];
        if (isfinite(x)) {
            v->acc += (double)x * x;
        }
        if (++v->acc_n == v->frame_len) {
            bool s = decide(v, v->acc / v->frame_len);
            if ((size_t)done < cap) {
                speech[done] = s ? 1 : 0;
            }
            done++;
            v->acc = 0.0;
            v->acc_n = 0;
        }
    }
    return done;
}

bool rill_vad_speech(const rill_vad_t *v) {
    return v != NULL && v->speech;
}

int64_t rill_vad_pause_ms(const rill_vad_t *v) {
    return v != NULL ? v->since_speech * v->params.frame_ms : 0;
}

float rill_vad_level_db(const rill_vad_t *v) {
    return v != NULL ? v->level_db : 0.0f;
}

float rill_vad_floor_db(const rill_vad_t *v) {
    return v != NULL ? v->floor_db : 0.0f;
}

int64_t rill_vad_frames(const rill_vad_t *v) {
    return v != NULL ? v->frames : 0;
}

int64_t rill_vad_speech_frames(const rill_vad_t *v) {
    return v != NULL ? v->speech_frames : 0;
}
