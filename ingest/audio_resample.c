/*
 * audio_resample.c - interleaved frames at any rate to 16 kHz mono (rill_audio.h, resampler).
 *
 * Mix first, resample second: averaging the channels costs one pass, and then libsoxr runs one
 * channel instead of up to 32. The mix goes through a fixed scratch of RILL__AUDIO_BLOCK frames
 * made at creation, so a push of any length allocates nothing: it is cut into blocks.
 *
 * The output bound rests on a property of libsoxr's streaming interface that the tests check for
 * every rate the tests use: with room to spare, soxr_process consumes all its input, and the
 * output so far never exceeds ceil(input so far * ratio) (the filter delay only holds samples
 * back). So push demands cap >= ceil((in + n) * ratio) - out before consuming anything, and a
 * push can never stop halfway. Should libsoxr ever break the property, the push would find no
 * room with input left: that is RILL_EINTERNAL, not a silent loss.
 *
 * Rejected: a rate-16000 bypass. libsoxr passes equal rates through exactly already, and one
 * path is one path to test. Rejected: libsoxr's own int16 input type: the mix needs floats.
 */
#include <math.h>
#include <soxr.h>
#include <string.h>

#include "audio_internal.h"
#include "rill_alloc.h"

struct rill_audio_resampler {
    int32_t rate, channels;
    soxr_t soxr;
    bool flushed;
    int64_t in_frames, out_samples; /* since the last reset: the bound's terms */
    rill_audio_stats_t stats;
    float mono[RILL__AUDIO_BLOCK];
};

rill_err_t rill__audio_check_format(const char *what, int64_t rate, int64_t channels) {
    if (rate < RILL_AUDIO_RATE_MIN || rate > RILL_AUDIO_RATE_MAX) {
        return rill__error(RILL_ERANGE, "%s: rate %lld Hz outside %d..%d", what, (long long)rate,
                           RILL_AUDIO_RATE_MIN, RILL_AUDIO_RATE_MAX);
    }
    if (channels < 1 || channels > RILL_AUDIO_CHANNELS_MAX) {
        return rill__error(RILL_ERANGE, "%s: %lld channels outside 1..%d", what,
                           (long long)channels, RILL_AUDIO_CHANNELS_MAX);
    }
    return RILL_OK;
}

size_t rill__audio_take(float *out, size_t n, const float *pend, size_t *pos, size_t len) {
    size_t k = len - *pos;
    k = k < n ? k : n;
    memcpy(out, pend + *pos, k * sizeof *out);
    *pos += k;
    return k;
}

int64_t rill__audio_out_frames(int64_t frames, int32_t rate) {
    return (frames * RILL_AUDIO_RATE + rate - 1) / rate;
}

static float clean(float x, int64_t *cleaned, int64_t *clipped) {
    if (!isfinite(x)) {
        (*cleaned)++;
        return 0.0f;
    }
    if (x > 1.0f || x < -1.0f) {
        (*clipped)++;
        return x > 0.0f ? 1.0f : -1.0f;
    }
    return x;
}

void rill__audio_mix(const float *in, size_t n, int32_t ch, float *mono, int64_t *cleaned,
                     int64_t *clipped) {
    if (ch == 1) {
        for (size_t i = 0; i < n; i++) {
            mono[i] = clean(in[i], cleaned, clipped);
        }
        return;
    }
    float scale = 1.0f / (float)ch;
    for (size_t i = 0; i < n; i++) {
        float s = 0.0f;
        for (int32_t c = 0; c < ch; c++) {
            s += clean(in[i * (size_t)ch + (size_t)c], cleaned, clipped);
        }
        mono[i] = s * scale;
    }
}

void rill__audio_mix_s16(const int16_t *in, size_t n, int32_t ch, float *mono) {
    float scale = 1.0f / (32768.0f * (float)ch);
    for (size_t i = 0; i < n; i++) {
        int32_t s = 0;
        for (int32_t c = 0; c < ch; c++) {
            s += in[i * (size_t)ch + (size_t)c];
        }
        mono[i] = (float)s * scale;
    }
}

static soxr_t make_soxr(int32_t rate, rill_err_t *err) {
    soxr_error_t e = NULL;
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_t s = soxr_create((double)rate, (double)RILL_AUDIO_RATE, 1, &e, &io, &q, NULL);
    if (s == NULL || e != NULL) {
        soxr_delete(s);
        *err = rill__error(RILL_EINTERNAL, "libsoxr: %s", e != NULL ? e : "soxr_create failed");
        return NULL;
    }
    *err = RILL_OK;
    return s;
}

rill_err_t rill_audio_resampler_new(int32_t rate, int32_t channels, rill_audio_resampler_t **out) {
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "resampler: out is NULL");
    }
    rill_err_t err = rill__audio_check_format("resampler", rate, channels);
    if (err != RILL_OK) {
        return err;
    }
    rill_audio_resampler_t *r = rill_calloc(RILL_MEM_INGEST, 1, sizeof *r);
    if (r == NULL) {
        return rill__error(RILL_ENOMEM, "resampler: no memory for the handle");
    }
    r->rate = rate;
    r->channels = channels;
    r->soxr = make_soxr(rate, &err);
    if (r->soxr == NULL) {
        rill_free(r);
        return err;
    }
    *out = r;
    return RILL_OK;
}

void rill_audio_resampler_destroy(rill_audio_resampler_t **rp) {
    if (rp != NULL && *rp != NULL) {
        soxr_delete((*rp)->soxr);
        rill_free(*rp);
        *rp = NULL;
    }
}

size_t rill_audio_resampler_out_max(const rill_audio_resampler_t *r, size_t n_frames) {
    if (r == NULL) {
        return 0;
    }
    int64_t bound = rill__audio_out_frames(r->in_frames + (int64_t)n_frames, r->rate);
    return (size_t)(bound - r->out_samples);
}

static int64_t run_soxr_raw(rill_audio_resampler_t *r, const float *in, size_t n, float *out,
                            size_t cap);

/* Clamps what libsoxr wrote: a band-limiting filter overshoots full-scale input (the Gibbs
 * ripple of a steep edge is up to ~9 % of the step), and the module promises samples in
 * [-1, 1]. */
static void clamp_out(rill_audio_resampler_t *r, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (out[i] > 1.0f || out[i] < -1.0f) {
            out[i] = out[i] > 0.0f ? 1.0f : -1.0f;
            r->stats.clipped++;
        }
    }
}

/* Runs libsoxr over in[0..n) (NULL: the flush) into out[0..cap); returns the samples written
 * or RILL_EINTERNAL when it stops with input left. */
static int64_t run_soxr(rill_audio_resampler_t *r, const float *in, size_t n, float *out,
                        size_t cap) {
    int64_t got = run_soxr_raw(r, in, n, out, cap);
    if (got > 0) {
        clamp_out(r, out, (size_t)got);
    }
    return got;
}

static int64_t run_soxr_raw(rill_audio_resampler_t *r, const float *in, size_t n, float *out,
                            size_t cap) {
    size_t written = 0;
    for (;;) {
        size_t idone = 0, odone = 0;
        soxr_error_t e = soxr_process(r->soxr, in, n, &idone, out + written, cap - written, &odone);
        if (e != NULL) {
            return rill__error(RILL_EINTERNAL, "libsoxr: %s", e);
        }
        written += odone;
        if (in != NULL) {
            in += idone;
            n -= idone;
            if (n == 0) {
                return (int64_t)written;
            }
        } else if (odone == 0) {
            return (int64_t)written; /* the flush gives until it has nothing left */
        }
        if (written == cap) {
            return in == NULL ? (int64_t)written
                              : rill__error(RILL_EINTERNAL,
                                            "libsoxr kept %zu input frames with no room left", n);
        }
    }
}

static int64_t push_common(rill_audio_resampler_t *r, const void *frames, bool s16, size_t n_frames,
                           float *out, size_t cap) {
    if (r == NULL || out == NULL || (frames == NULL && n_frames > 0)) {
        return rill__error(RILL_EINVAL, "resampler push: NULL argument");
    }
    if (r->flushed) {
        return rill__error(RILL_EINVAL, "resampler push after flush (reset first)");
    }
    size_t need = rill_audio_resampler_out_max(r, n_frames);
    if (cap < need) {
        return rill__error(RILL_EFULL, "resampler push: room for %zu samples, %zu may come", cap,
                           need);
    }
    size_t written = 0;
    for (size_t done = 0; done < n_frames;) {
        size_t k = n_frames - done < RILL__AUDIO_BLOCK ? n_frames - done : RILL__AUDIO_BLOCK;
        size_t at = done * (size_t)r->channels;
        if (s16) {
            rill__audio_mix_s16((const int16_t *)frames + at, k, r->channels, r->mono);
        } else {
            rill__audio_mix((const float *)frames + at, k, r->channels, r->mono, &r->stats.cleaned,
                            &r->stats.clipped);
        }
        int64_t got = run_soxr(r, r->mono, k, out + written, cap - written);
        if (got < 0) {
            return got;
        }
        written += (size_t)got;
        done += k;
        r->in_frames += (int64_t)k;
        r->stats.frames_in += (int64_t)k;
    }
    r->out_samples += (int64_t)written;
    r->stats.samples_out += (int64_t)written;
    return (int64_t)written;
}

int64_t rill_audio_resampler_push(rill_audio_resampler_t *r, const float *frames, size_t n_frames,
                                  float *out, size_t cap) {
    return push_common(r, frames, false, n_frames, out, cap);
}

int64_t rill_audio_resampler_push_s16(rill_audio_resampler_t *r, const int16_t *frames,
                                      size_t n_frames, float *out, size_t cap) {
    return push_common(r, frames, true, n_frames, out, cap);
}

int64_t rill_audio_resampler_flush(rill_audio_resampler_t *r, float *out, size_t cap) {
    if (r == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "resampler flush: NULL argument");
    }
    if (r->flushed) {
        return 0;
    }
    size_t need = rill_audio_resampler_out_max(r, 0);
    if (cap < need) {
        return rill__error(RILL_EFULL, "resampler flush: room for %zu samples, %zu may come", cap,
                           need);
    }
    int64_t got = run_soxr(r, NULL, 0, out, need);
    if (got < 0) {
        return got;
    }
    r->flushed = true;
    r->out_samples += got;
    r->stats.samples_out += got;
    return got;
}

void rill_audio_resampler_reset(rill_audio_resampler_t *r) {
    if (r != NULL) {
        soxr_clear(r->soxr);
        r->flushed = false;
        r->in_frames = 0;
        r->out_samples = 0;
    }
}

int32_t rill_audio_resampler_rate(const rill_audio_resampler_t *r) {
    return r != NULL ? r->rate : 0;
}

int32_t rill_audio_resampler_channels(const rill_audio_resampler_t *r) {
    return r != NULL ? r->channels : 0;
}

rill_audio_stats_t rill_audio_resampler_stats(const rill_audio_resampler_t *r) {
    rill_audio_stats_t z = { 0 };
    return r != NULL ? r->stats : z;
}
