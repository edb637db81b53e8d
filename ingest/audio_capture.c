/*
 * audio_capture.c - live input through PortAudio (rill_audio.h, capture), and the device list.
 *
 * The real-time rule (STYLE.md rule 17) decides the shape: PortAudio's callback thread only
 * copies frames into core's SPSC ring, one item per frame (channels floats), and counts what did
 * not fit. Everything that costs (cleaning, mixing, libsoxr) runs on the consumer's thread in
 * rill_audio_capture_read(). The callback is the public rill_audio_capture_callback(), handed
 * to Pa_OpenStream as it is (its signature is PaStreamCallback's), so the test driver that calls
 * it directly runs exactly the code PortAudio runs.
 *
 * The counters the callback writes are relaxed atomics: each has one writer (the callback) and
 * the consumer only reads a snapshot for the stats; nothing is ordered by them (the ring orders
 * the frames themselves).
 *
 * Rejected: letting PortAudio convert to 16 kHz (its ALSA host converts only through ALSA's plug
 * layer, with varying quality per host) and pa_ringbuffer (a second ring type beside core's).
 */
#include <portaudio.h>
#include <stdio.h>
#include <string.h>

#include "audio_internal.h"
#include "rill_alloc.h"
#include "rill_compat.h"
#include "rill_ring.h"

#define PEND_CAP       ((size_t)RILL__AUDIO_BLOCK * 2 + 8192)
#define RING_BYTES_MAX ((uint64_t)256 << 20) /* before rounding up to a power of two */

struct rill_audio_capture {
    rill_audio_capture_params_t params;
    int32_t rate, channels;
    rill_ring_t ring; /* items: one frame, channels floats */
    RILL_ATOMIC(int64_t) callbacks, captured, overruns, device_overflow;
    rill_audio_resampler_t *rs;
    float *frames; /* (RILL__AUDIO_BLOCK, channels), consumer side */
    float *pend;   /* PEND_CAP resampled samples not yet read */
    size_t pend_pos, pend_len;
    PaStream *stream;
    int64_t samples_out;
};

/* A frame of silence for a NULL input (PortAudio's underflow case), RILL_AUDIO_CHANNELS_MAX wide.
 */
static const float zero_frame[RILL_AUDIO_CHANNELS_MAX];

rill_audio_capture_params_t rill_audio_capture_default_params(void) {
    rill_audio_capture_params_t p = {
        .device = -1, .rate = 0, .channels = 1, .ring_ms = 2000, .frames_per_buffer = 0
    };
    return p;
}

static rill_err_t pa_fail(PaError e, const char *what) {
    return rill__error(RILL_EDEVICE, "PortAudio %s: %s", what, Pa_GetErrorText(e));
}

/* Resolves params' device (-1: the default input) after Pa_Initialize. */
static rill_err_t find_device(int32_t device, PaDeviceIndex *idx, const PaDeviceInfo **info) {
    int n = Pa_GetDeviceCount();
    if (n < 0) {
        return pa_fail(n, "device count");
    }
    PaDeviceIndex i = device >= 0 ? device : Pa_GetDefaultInputDevice();
    if (i == paNoDevice || i < 0 || i >= n) {
        return device >= 0
                   ? rill__error(RILL_ENOTFOUND, "no audio device %d (%d devices)", device, n)
                   : rill__error(RILL_ENOTFOUND, "no default audio input device");
    }
    const PaDeviceInfo *di = Pa_GetDeviceInfo(i);
    if (di == NULL || di->maxInputChannels < 1) {
        return rill__error(RILL_ENOTFOUND, "audio device %d has no input", (int)i);
    }
    *idx = i;
    *info = di;
    return RILL_OK;
}

static void destroy(rill_audio_capture_t *c) {
    rill_ring_deinit(&c->ring);
    rill_audio_resampler_destroy(&c->rs);
    rill_free(c->frames);
    rill_free(c->pend);
    rill_free(c);
}

rill_err_t rill_audio_capture_new(const rill_audio_capture_params_t *params,
                                  rill_audio_capture_t **out) {
    rill_audio_capture_params_t p = params != NULL ? *params : rill_audio_capture_default_params();
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "capture: out is NULL");
    }
    if (p.device < -1 || p.ring_ms < 10 || p.ring_ms > 60000 || p.frames_per_buffer < 0 ||
        p.frames_per_buffer > 65536 || p.rate < 0) {
        return rill__error(RILL_EINVAL,
                           "capture: device %d (-1 or an index), ring_ms %d (10..60000), "
                           "frames_per_buffer %d (0..65536), rate %d (0 or a rate)",
                           p.device, p.ring_ms, p.frames_per_buffer, p.rate);
    }
    int32_t rate = p.rate;
    if (rate == 0) {
        PaError e = Pa_Initialize();
        if (e != paNoError) {
            return pa_fail(e, "initialise");
        }
        PaDeviceIndex idx;
        const PaDeviceInfo *info = NULL;
        rill_err_t err = find_device(p.device, &idx, &info);
        double r = err == RILL_OK ? info->defaultSampleRate : 0.0;
        Pa_Terminate();
        if (err != RILL_OK) {
            return err;
        }
        rate = r >= RILL_AUDIO_RATE_MIN && r <= RILL_AUDIO_RATE_MAX ? (int32_t)(r + 0.5) : -1;
        if (rate < 0) {
            return rill__error(RILL_ERANGE,
                               "capture: the device's default rate %.0f Hz is outside "
                               "%d..%d",
                               r, RILL_AUDIO_RATE_MIN, RILL_AUDIO_RATE_MAX);
        }
    }
    rill_err_t err = rill__audio_check_format("capture", rate, p.channels);
    if (err != RILL_OK) {
        return err;
    }
    rill_audio_capture_t *c = rill_calloc(RILL_MEM_INGEST, 1, sizeof *c);
    if (c == NULL) {
        return rill__error(RILL_ENOMEM, "capture: no memory for the handle");
    }
    c->params = p;
    c->rate = rate;
    c->channels = p.channels;
    size_t slots = (size_t)((int64_t)rate * p.ring_ms / 1000);
    size_t frame_bytes = (size_t)p.channels * sizeof(float);
    if ((uint64_t)slots * frame_bytes > RING_BYTES_MAX) {
        rill_free(c);
        return rill__error(RILL_EINVAL,
                           "capture: a ring of %d ms at %d Hz x %d channels is %zu bytes (at most "
                           "%d MiB)",
                           p.ring_ms, rate, p.channels, slots * frame_bytes,
                           (int)(RING_BYTES_MAX >> 20));
    }
    err = rill_ring_init(&c->ring, RILL_MEM_INGEST, frame_bytes, slots);
    if (err == RILL_ENOMEM) {
        err = rill__error(RILL_ENOMEM, "capture: no memory for a ring of %zu frames", slots);
    } else if (err != RILL_OK) {
        err = rill__error(err, "capture: a ring of %zu frames", slots);
    }
    if (err == RILL_OK) {
        c->frames = rill_malloc(RILL_MEM_INGEST, (size_t)RILL__AUDIO_BLOCK * frame_bytes);
        c->pend = rill_malloc(RILL_MEM_INGEST, PEND_CAP * sizeof(float));
        err = c->frames == NULL || c->pend == NULL
                  ? rill__error(RILL_ENOMEM, "capture: no memory for the buffers")
                  : rill_audio_resampler_new(rate, p.channels, &c->rs);
    }
    if (err != RILL_OK) {
        destroy(c);
        return err;
    }
    *out = c;
    return RILL_OK;
}

void rill_audio_capture_destroy(rill_audio_capture_t **cp) {
    if (cp != NULL && *cp != NULL) {
        rill_audio_capture_stop(*cp);
        destroy(*cp);
        *cp = NULL;
    }
}

rill_err_t rill_audio_capture_start(rill_audio_capture_t *c) {
    if (c == NULL) {
        return rill__error(RILL_EINVAL, "capture start: NULL");
    }
    if (c->stream != NULL) {
        return rill__error(RILL_EBUSY, "capture start: already started");
    }
    PaError e = Pa_Initialize();
    if (e != paNoError) {
        return pa_fail(e, "initialise");
    }
    PaDeviceIndex idx;
    const PaDeviceInfo *info = NULL;
    rill_err_t err = find_device(c->params.device, &idx, &info);
    if (err == RILL_OK && info->maxInputChannels < c->channels) {
        err = rill__error(RILL_EDEVICE, "audio device %d (%s) has %d input channels, %d asked",
                          (int)idx, info->name, info->maxInputChannels, c->channels);
    }
    PaStream *s = NULL;
    if (err == RILL_OK) {
        PaStreamParameters in = {
            .device = idx,
            .channelCount = c->channels,
            .sampleFormat = paFloat32,
            .suggestedLatency = info->defaultLowInputLatency,
            .hostApiSpecificStreamInfo = NULL,
        };
        unsigned long fpb = c->params.frames_per_buffer > 0
                                ? (unsigned long)c->params.frames_per_buffer
                                : paFramesPerBufferUnspecified;
        e = Pa_OpenStream(&s, &in, NULL, (double)c->rate, fpb, paNoFlag,
                          rill_audio_capture_callback, c);
        if (e != paNoError) {
            s = NULL;
            err = pa_fail(e, "open stream");
        } else if ((e = Pa_StartStream(s)) != paNoError) {
            err = pa_fail(e, "start stream");
            Pa_CloseStream(s);
            s = NULL;
        }
    }
    if (err != RILL_OK) {
        Pa_Terminate();
        return err;
    }
    c->stream = s;
    return RILL_OK;
}

rill_err_t rill_audio_capture_stop(rill_audio_capture_t *c) {
    if (c == NULL) {
        return rill__error(RILL_EINVAL, "capture stop: NULL");
    }
    if (c->stream == NULL) {
        return RILL_OK;
    }
    PaError e = Pa_StopStream(c->stream);
    PaError e2 = Pa_CloseStream(c->stream);
    c->stream = NULL;
    Pa_Terminate();
    if (e != paNoError || e2 != paNoError) {
        return pa_fail(e != paNoError ? e : e2, "stop stream");
    }
    return RILL_OK;
}

int rill_audio_capture_callback(const void *input, void *output, unsigned long frame_count,
                                const struct PaStreamCallbackTimeInfo *time_info,
                                unsigned long status_flags, void *user) {
    (void)output;
    (void)time_info;
    rill_audio_capture_t *c = user;
    atomic_fetch_add_explicit(&c->callbacks, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->captured, (int64_t)frame_count, memory_order_relaxed);
    if ((status_flags & paInputOverflow) != 0) {
        atomic_fetch_add_explicit(&c->device_overflow, 1, memory_order_relaxed);
    }
    size_t written = 0;
    if (input != NULL) {
        written = rill_ring_push_n(&c->ring, input, frame_count);
    } else {
        while (written < frame_count && rill_ring_push(&c->ring, zero_frame) == RILL_OK) {
            written++;
        }
    }
    if (written < frame_count) {
        atomic_fetch_add_explicit(&c->overruns, (int64_t)(frame_count - written),
                                  memory_order_relaxed);
    }
    return paContinue;
}

int64_t rill_audio_capture_read(rill_audio_capture_t *c, float *out, size_t n) {
    if (c == NULL || (out == NULL && n > 0)) {
        return rill__error(RILL_EINVAL, "capture read: NULL argument");
    }
    size_t got = 0;
    while (got < n) {
        if (c->pend_pos < c->pend_len) {
            got += rill__audio_take(out + got, n - got, c->pend, &c->pend_pos, c->pend_len);
            continue;
        }
        size_t k = rill_ring_pop_n(&c->ring, c->frames, RILL__AUDIO_BLOCK);
        if (k == 0) {
            break;
        }
        int64_t r = rill_audio_resampler_push(c->rs, c->frames, k, c->pend, PEND_CAP);
        if (r < 0) {
            return r; /* libsoxr failed: nothing to recover */
        }
        c->pend_pos = 0;
        c->pend_len = (size_t)r;
    }
    c->samples_out += (int64_t)got;
    return (int64_t)got;
}

int32_t rill_audio_capture_rate(const rill_audio_capture_t *c) {
    return c != NULL ? c->rate : 0;
}

int32_t rill_audio_capture_channels(const rill_audio_capture_t *c) {
    return c != NULL ? c->channels : 0;
}

rill_audio_stats_t rill_audio_capture_stats(const rill_audio_capture_t *c) {
    rill_audio_stats_t s = { 0 };
    if (c == NULL) {
        return s;
    }
    rill_audio_stats_t r = rill_audio_resampler_stats(c->rs);
    s.frames_in = r.frames_in;
    s.cleaned = r.cleaned;
    s.clipped = r.clipped;
    s.samples_out = c->samples_out;
    s.callbacks = atomic_load_explicit(&c->callbacks, memory_order_relaxed);
    s.frames_captured = atomic_load_explicit(&c->captured, memory_order_relaxed);
    s.overruns = atomic_load_explicit(&c->overruns, memory_order_relaxed);
    s.device_overflow = atomic_load_explicit(&c->device_overflow, memory_order_relaxed);
    return s;
}

int64_t rill_audio_devices(rill_audio_device_t *out, size_t cap) {
    if (out == NULL && cap > 0) {
        return rill__error(RILL_EINVAL, "audio devices: out is NULL");
    }
    PaError e = Pa_Initialize();
    if (e != paNoError) {
        return pa_fail(e, "initialise");
    }
    int n = Pa_GetDeviceCount();
    if (n < 0) {
        rill_err_t err = pa_fail(n, "device count");
        Pa_Terminate();
        return err;
    }
    int64_t found = 0;
    for (int i = 0; i < n; i++) {
        const PaDeviceInfo *di = Pa_GetDeviceInfo(i);
        if (di == NULL || di->maxInputChannels < 1) {
            continue;
        }
        if ((size_t)found < cap) {
            rill_audio_device_t *d = &out[found];
            const PaHostApiInfo *api = Pa_GetHostApiInfo(di->hostApi);
            d->index = i;
            snprintf(d->name, sizeof d->name, "%s", di->name != NULL ? di->name : "");
            d->channels = di->maxInputChannels;
            d->rate = di->defaultSampleRate;
            snprintf(d->host_api, sizeof d->host_api, "%s",
                     api != NULL && api->name != NULL ? api->name : "?");
        }
        found++;
    }
    Pa_Terminate();
    return found;
}
