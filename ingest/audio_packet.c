/*
 * audio_packet.c - the packets of `ingest.audio` to 16 kHz mono (rill_audio.h, packets).
 *
 * One call is one packet and is all or nothing. Everything that can refuse a packet is checked
 * before anything changes: the stream's format, the sequence number, the payload's shape (pcm16:
 * whole frames within max_packet_ms; Opus: libopus's own parse of the TOC and frame lengths,
 * and at most 120 ms), and the room in the caller's buffer for the concealment and the packet
 * together. What can still fail after that is libopus decoding a packet that parsed; for that
 * the decoder's state is copied before the packet's concealment and decode and copied back on
 * failure. libopus keeps a decoder in one block it was told the size of (opus_decoder_get_size,
 * opus_decoder_init: offsets within the block, pointers only to its static mode tables), which
 * is what makes the copy a complete snapshot; the test that a bad packet between good ones
 * leaves the output bit-identical holds it to that. pcm16 needs no snapshot: its only fallible
 * step after the checks is the resampler, whose room was checked.
 *
 * Sequence numbers: `expected` and a 64-bit mask of which of the 64 numbers before it arrived
 * (bit k: expected - 1 - k). A packet behind `expected` is a duplicate when its bit is set and
 * late otherwise; neither touches the codec. A gap within max_gap is concealed as far as
 * max_conceal_ms allows, in units of the last packet's duration (libopus's PLC needs a frame
 * size; the last packet's is the sender's likeliest); the lost packet just before the one that
 * arrived is decoded from that packet's in-band FEC, which libopus replaces by PLC itself when
 * the packet carries none.
 *
 * Opus decodes at 16 kHz mono directly (libopus resamples and mixes inside its decoder), so a
 * second resampler never runs for Opus. Rejected: decoding at 48 kHz and using libsoxr (two
 * resamplers' cost for no gain: the Opus decoder's internal rate conversion is exact for these
 * rates).
 */
#include <opus/opus.h>
#include <string.h>

#include "audio_internal.h"
#include "rill_alloc.h"

#define OPUS_MAX_16K   1920 /* 120 ms at 16 kHz: the longest Opus packet */
#define RESAMPLE_SLACK 4096 /* what libsoxr holds back at most: 1852 at 8 kHz (tested) */

struct rill_audio_packet_decoder {
    rill_audio_packet_params_t params;
    rill_audio_codec_t codec;
    int32_t rate, channels;
    OpusDecoder *opus, *snap; /* opus only: the decoder and its snapshot, opus_size bytes each */
    size_t opus_size;
    rill_audio_resampler_t *rs; /* pcm16 only */
    int16_t *pcm;               /* pcm16 only: (RILL__AUDIO_BLOCK, channels) host-order samples */
    int64_t expected;           /* -1 before the first packet */
    uint64_t mask;              /* bit k: expected - 1 - k arrived */
    int32_t last_frames;        /* the last packet's frames: 16 kHz (Opus) or at rate (pcm16) */
    int64_t concealed;          /* concealed frames, in last_frames' unit */
    rill_audio_stats_t stats;
};

rill_err_t rill_audio_codec_from_name(const char *name, size_t len, rill_audio_codec_t *out) {
    if (name == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "codec name: NULL argument");
    }
    if (len == 5 && memcmp(name, "pcm16", 5) == 0) {
        *out = RILL_AUDIO_CODEC_PCM16;
    } else if (len == 4 && memcmp(name, "opus", 4) == 0) {
        *out = RILL_AUDIO_CODEC_OPUS;
    } else {
        return rill__error(RILL_EUNSUPPORTED, "codec '%.*s' (want \"opus\" or \"pcm16\")",
                           len > 32 ? 32 : (int)len, name);
    }
    return RILL_OK;
}

const char *rill_audio_codec_name(rill_audio_codec_t codec) {
    return codec == RILL_AUDIO_CODEC_PCM16  ? "pcm16"
           : codec == RILL_AUDIO_CODEC_OPUS ? "opus"
                                            : "?";
}

rill_audio_packet_params_t rill_audio_packet_default_params(void) {
    rill_audio_packet_params_t p = { .max_gap = 50, .max_conceal_ms = 500, .max_packet_ms = 1000 };
    return p;
}

static bool opus_rate(int32_t rate) {
    return rate == 8000 || rate == 12000 || rate == 16000 || rate == 24000 || rate == 48000;
}

static void destroy(rill_audio_packet_decoder_t *d) {
    rill_free(d->opus);
    rill_free(d->snap);
    rill_audio_resampler_destroy(&d->rs);
    rill_free(d->pcm);
    rill_free(d);
}

rill_err_t rill_audio_packet_decoder_new(const rill_audio_packet_params_t *params,
                                         rill_audio_codec_t codec, int64_t rate, int64_t channels,
                                         rill_audio_packet_decoder_t **out) {
    rill_audio_packet_params_t p = params != NULL ? *params : rill_audio_packet_default_params();
    if (out == NULL) {
        return rill__error(RILL_EINVAL, "packet decoder: out is NULL");
    }
    if (p.max_gap < 1 || p.max_gap > 1000 || p.max_conceal_ms < 0 || p.max_conceal_ms > 2000 ||
        p.max_packet_ms < 10 || p.max_packet_ms > 2000) {
        return rill__error(RILL_EINVAL,
                           "packet decoder: max_gap %d (1..1000), max_conceal_ms %d (0..2000), "
                           "max_packet_ms %d (10..2000)",
                           p.max_gap, p.max_conceal_ms, p.max_packet_ms);
    }
    if (codec != RILL_AUDIO_CODEC_PCM16 && codec != RILL_AUDIO_CODEC_OPUS) {
        return rill__error(RILL_EINVAL, "packet decoder: unknown codec %d", (int)codec);
    }
    rill_err_t err = rill__audio_check_format("packet stream", rate, channels);
    if (err != RILL_OK) {
        return err;
    }
    if (codec == RILL_AUDIO_CODEC_OPUS && (!opus_rate((int32_t)rate) || channels > 2)) {
        return rill__error(RILL_ERANGE,
                           "opus stream: rate %lld Hz, %lld channels (want 8000, 12000, 16000, "
                           "24000 or 48000 Hz, 1 or 2 channels)",
                           (long long)rate, (long long)channels);
    }
    rill_audio_packet_decoder_t *d = rill_calloc(RILL_MEM_INGEST, 1, sizeof *d);
    if (d == NULL) {
        return rill__error(RILL_ENOMEM, "packet decoder: no memory for the handle");
    }
    d->params = p;
    d->codec = codec;
    d->rate = (int32_t)rate;
    d->channels = (int32_t)channels;
    d->expected = -1;
    if (codec == RILL_AUDIO_CODEC_OPUS) {
        d->opus_size = (size_t)opus_decoder_get_size(1);
        d->opus = rill_malloc(RILL_MEM_INGEST, d->opus_size);
        d->snap = rill_malloc(RILL_MEM_INGEST, d->opus_size);
        if (d->opus == NULL || d->snap == NULL) {
            err = rill__error(RILL_ENOMEM, "packet decoder: no memory for the Opus decoder");
        } else {
            int e = opus_decoder_init(d->opus, RILL_AUDIO_RATE, 1);
            if (e != OPUS_OK) {
                err = rill__error(RILL_EINTERNAL, "libopus: %s", opus_strerror(e));
            }
        }
    } else {
        d->pcm = rill_malloc(RILL_MEM_INGEST,
                             (size_t)RILL__AUDIO_BLOCK * (size_t)channels * sizeof(int16_t));
        err = d->pcm == NULL
                  ? rill__error(RILL_ENOMEM, "packet decoder: no memory for the PCM buffer")
                  : rill_audio_resampler_new(d->rate, d->channels, &d->rs);
    }
    if (err != RILL_OK) {
        destroy(d);
        return err;
    }
    *out = d;
    return RILL_OK;
}

void rill_audio_packet_decoder_destroy(rill_audio_packet_decoder_t **dp) {
    if (dp != NULL && *dp != NULL) {
        destroy(*dp);
        *dp = NULL;
    }
}

size_t rill_audio_packet_out_max(const rill_audio_packet_decoder_t *d) {
    if (d == NULL) {
        return 0;
    }
    size_t conceal = (size_t)d->params.max_conceal_ms * (RILL_AUDIO_RATE / 1000);
    if (d->codec == RILL_AUDIO_CODEC_OPUS) {
        return conceal + OPUS_MAX_16K;
    }
    return conceal + (size_t)d->params.max_packet_ms * (RILL_AUDIO_RATE / 1000) + RESAMPLE_SLACK;
}

int64_t rill_audio_packet_expected(const rill_audio_packet_decoder_t *d) {
    return d != NULL ? d->expected : 0;
}

rill_audio_stats_t rill_audio_packet_stats(const rill_audio_packet_decoder_t *d) {
    rill_audio_stats_t z = { 0 };
    if (d == NULL) {
        return z;
    }
    rill_audio_stats_t s = d->stats;
    int32_t unit_rate = d->codec == RILL_AUDIO_CODEC_OPUS ? RILL_AUDIO_RATE : d->rate;
    s.concealed_ms = d->concealed * 1000 / unit_rate;
    return s;
}

static int64_t bad(rill_audio_packet_decoder_t *d, rill_err_t err) {
    d->stats.packets_bad++;
    return err;
}

/* Converts little-endian frames data[first .. first + n) into d->pcm. */
static void load_pcm(rill_audio_packet_decoder_t *d, const uint8_t *data, size_t first, size_t n) {
    size_t ns = n * (size_t)d->channels;
    const uint8_t *p = data + first * (size_t)d->channels * 2;
    for (size_t i = 0; i < ns; i++) {
        d->pcm[i] = (int16_t)(uint16_t)(p[2 * i] | (uint16_t)p[2 * i + 1] << 8);
    }
}

/* pcm16: concealment as silence at the input rate, then the packet, through the resampler. */
static int64_t decode_pcm(rill_audio_packet_decoder_t *d, int64_t n_conceal, const uint8_t *data,
                          size_t frames, float *out, size_t cap) {
    size_t w = 0;
    size_t silence = (size_t)n_conceal * (size_t)d->last_frames;
    memset(d->pcm, 0, (size_t)RILL__AUDIO_BLOCK * (size_t)d->channels * sizeof *d->pcm);
    for (size_t done = 0; done < silence;) {
        size_t k = silence - done < RILL__AUDIO_BLOCK ? silence - done : RILL__AUDIO_BLOCK;
        int64_t got = rill_audio_resampler_push_s16(d->rs, d->pcm, k, out + w, cap - w);
        if (got < 0) {
            return got;
        }
        w += (size_t)got;
        done += k;
    }
    for (size_t done = 0; done < frames;) {
        size_t k = frames - done < RILL__AUDIO_BLOCK ? frames - done : RILL__AUDIO_BLOCK;
        load_pcm(d, data, done, k);
        int64_t got = rill_audio_resampler_push_s16(d->rs, d->pcm, k, out + w, cap - w);
        if (got < 0) {
            return got;
        }
        w += (size_t)got;
        done += k;
    }
    d->concealed += (int64_t)silence;
    d->last_frames = (int32_t)frames;
    return (int64_t)w;
}

/* Opus: PLC for the concealed packets (FEC for the one just before this packet when the whole
 * gap is concealed), then the packet. On failure the caller restores the snapshot. */
static int64_t decode_opus(rill_audio_packet_decoder_t *d, int64_t n_conceal, bool fec_last,
                           const uint8_t *data, size_t len, float *out, size_t cap) {
    size_t w = 0;
    for (int64_t i = 0; i < n_conceal; i++) {
        bool fec = fec_last && i == n_conceal - 1;
        int r = opus_decode_float(d->opus, fec ? data : NULL, fec ? (opus_int32)len : 0, out + w,
                                  d->last_frames, fec ? 1 : 0);
        if (r < 0) {
            return rill__error(RILL_EFORMAT, "libopus concealment: %s", opus_strerror(r));
        }
        w += (size_t)r;
        d->concealed += r;
    }
    int r = opus_decode_float(d->opus, data, (opus_int32)len, out + w, (int)(cap - w), 0);
    if (r < 0) {
        return rill__error(RILL_EFORMAT, "libopus: %s", opus_strerror(r));
    }
    d->last_frames = r;
    w += (size_t)r;
    return (int64_t)w;
}

int64_t rill_audio_packet_decode(rill_audio_packet_decoder_t *d, rill_audio_codec_t codec,
                                 int64_t rate, int64_t channels, int64_t seq, const uint8_t *data,
                                 size_t len, float *out, size_t cap) {
    if (d == NULL || out == NULL || (data == NULL && len > 0)) {
        return d != NULL ? bad(d, rill__error(RILL_EINVAL, "audio packet: NULL argument"))
                         : rill__error(RILL_EINVAL, "audio packet: NULL decoder");
    }
    if (codec != d->codec || rate != d->rate || channels != d->channels) {
        return bad(d,
                   rill__error(RILL_EINVAL,
                               "audio packet: %s %lld Hz %lld ch in a stream of %s %d Hz %d ch",
                               rill_audio_codec_name(codec), (long long)rate, (long long)channels,
                               rill_audio_codec_name(d->codec), d->rate, d->channels));
    }
    if (seq < 0 || seq == INT64_MAX) {
        return bad(d, rill__error(RILL_EINVAL, "audio packet: seq %lld outside 0..2^63-2",
                                  (long long)seq));
    }
    if (len == 0) {
        return bad(d, rill__error(RILL_EFORMAT, "audio packet %lld: no data", (long long)seq));
    }
    size_t frames = 0; /* pcm16: the packet's frames */
    if (d->codec == RILL_AUDIO_CODEC_PCM16) {
        size_t fb = 2 * (size_t)d->channels;
        size_t max_frames = (size_t)d->params.max_packet_ms * (size_t)d->rate / 1000;
        if (len % fb != 0 || len / fb > max_frames) {
            return bad(d, rill__error(RILL_EFORMAT,
                                      "audio packet %lld: %zu bytes of pcm16 (whole %zu-byte "
                                      "frames, at most %zu of them)",
                                      (long long)seq, len, fb, max_frames));
        }
        frames = len / fb;
    } else {
        unsigned char toc;
        const unsigned char *fr[48];
        opus_int16 sizes[48];
        int payload = 0;
        int nf = opus_packet_parse(data, len > INT32_MAX ? INT32_MAX : (opus_int32)len, &toc, fr,
                                   sizes, &payload);
        int ns = nf < 0 ? nf : opus_packet_get_nb_samples(data, (opus_int32)len, RILL_AUDIO_RATE);
        if (nf < 0 || ns < 0 || ns > OPUS_MAX_16K) {
            return bad(d, rill__error(RILL_EFORMAT, "audio packet %lld: not an Opus packet (%s)",
                                      (long long)seq,
                                      ns < 0 ? opus_strerror(ns) : "longer than 120 ms"));
        }
    }
    /* Where the packet falls. */
    int64_t gap = 0;
    bool resync = false;
    if (d->expected >= 0 && seq < d->expected) {
        int64_t k = d->expected - 1 - seq;
        if (k < 64 && (d->mask >> k & 1u) != 0) {
            d->stats.packets_duplicate++;
        } else {
            d->stats.packets_late++;
        }
        return 0;
    }
    if (d->expected >= 0 && seq > d->expected) {
        gap = seq - d->expected;
        if (gap > d->params.max_gap) {
            resync = true;
            gap = 0;
        }
    }
    int64_t n_conceal = 0;
    if (gap > 0 && d->last_frames > 0) {
        int64_t unit_rate = d->codec == RILL_AUDIO_CODEC_OPUS ? RILL_AUDIO_RATE : d->rate;
        int64_t budget = (int64_t)d->params.max_conceal_ms * unit_rate / 1000;
        n_conceal = budget / d->last_frames;
        n_conceal = n_conceal < gap ? n_conceal : gap;
    }
    size_t need = rill_audio_packet_out_max(d);
    if (d->codec == RILL_AUDIO_CODEC_PCM16) {
        size_t more = rill_audio_resampler_out_max(
            d->rs, (size_t)n_conceal * (size_t)d->last_frames + frames);
        need = more > need ? more : need;
    }
    if (cap < need) {
        return bad(
            d, rill__error(RILL_EFULL, "audio packet: room for %zu samples, want %zu", cap, need));
    }
    int64_t w;
    if (d->codec == RILL_AUDIO_CODEC_OPUS) {
        memcpy(d->snap, d->opus, d->opus_size);
        int64_t concealed0 = d->concealed;
        int32_t last0 = d->last_frames;
        w = decode_opus(d, n_conceal, n_conceal == gap, data, len, out, cap);
        if (w < 0) {
            memcpy(d->opus, d->snap, d->opus_size);
            d->concealed = concealed0;
            d->last_frames = last0;
            return bad(d, (rill_err_t)w);
        }
        for (int64_t i = 0; i < w; i++) { /* libopus may overshoot full scale a little */
            if (out[i] > 1.0f || out[i] < -1.0f) {
                out[i] = out[i] > 0.0f ? 1.0f : -1.0f;
                d->stats.clipped++;
            }
        }
        d->stats.frames_in += opus_packet_get_nb_samples(data, (opus_int32)len, d->rate);
    } else {
        w = decode_pcm(d, n_conceal, data, frames, out, cap);
        if (w < 0) {
            return bad(d, (rill_err_t)w); /* only a libsoxr failure: the stream is then unusable */
        }
        d->stats.frames_in += (int64_t)frames;
    }
    if (resync) {
        d->stats.resyncs++;
    }
    d->stats.packets++;
    d->stats.packets_lost += gap;
    d->stats.packets_concealed += n_conceal;
    d->stats.samples_out += w;
    uint64_t shift = (uint64_t)gap + 1;
    d->mask = resync || shift >= 64 ? 1u : (d->mask << shift) | 1u;
    d->expected = seq + 1;
    return w;
}
