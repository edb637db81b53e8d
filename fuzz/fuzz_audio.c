/*
 * fuzz_audio.c - libFuzzer target for the `ingest.audio` packet decoder (ingest/rill_audio.h,
 * ingest/audio_packet.c): what a client of rilld can send as audio.
 *
 * Input: a 2-byte header, then records. Header byte 0: bit 0 the codec (0 pcm16, 1 opus), bits
 * 1-3 the rate (a table of Opus's five rates and three others), bit 4 a second channel; byte 1:
 * max_gap 1 + (b & 63) and max_conceal_ms 20 * (b >> 6). Each record: one op byte (bits 0-5 a
 * signed sequence step -32..31 from the last number sent, 31 meaning a jump of 10^6; bit 6 send
 * with a buffer one sample too small; bit 7 send with the wrong rate), a 2-byte little-endian
 * length (cut to what is left), then that many payload bytes.
 *
 * Oracles (abort on a bug, never on bad input):
 *   1. A result >= 0 is at most rill_audio_packet_out_max(); every sample written is finite and
 *      within [-1, 1].
 *   2. A refusal is RILL_EINVAL, RILL_EFORMAT or RILL_EFULL (the wrong rate always is
 *      RILL_EINVAL; the small buffer is always refused unless the packet is a duplicate or late,
 *      which writes nothing), and changes nothing: expected, and every counter but packets_bad,
 *      are as before.
 *   3. "Changes nothing" reaches into the codec: a shadow decoder gets only the packets the
 *      first one accepted, in the same order, and must produce the same samples bit for bit and
 *      end with the same counters (packets_bad aside).
 *   4. Counters add up: packets_concealed <= packets_lost, concealed_ms bounded by the lost
 *      packets at 120 ms each.
 *
 * Build and run: scripts/fuzz.sh audio [SECONDS] (fuzz/CMakeLists.txt), seeds made by
 * fuzz/make_audio_seeds.py into fuzz/corpus/audio.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rill_audio.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const int32_t rates[8] = { 8000, 12000, 16000, 24000, 48000, 44100, 22050, 96000 };

static float g_a[16384], g_b[16384];

static void check_samples(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i]) || x[i] > 1.0f || x[i] < -1.0f) {
            abort();
        }
    }
}

static bool same_counters(rill_audio_stats_t a, rill_audio_stats_t b) {
    a.packets_bad = b.packets_bad = 0;
    return memcmp(&a, &b, sizeof a) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) {
        return 0;
    }
    rill_audio_codec_t codec = (data[0] & 1) ? RILL_AUDIO_CODEC_OPUS : RILL_AUDIO_CODEC_PCM16;
    int32_t rate = rates[(data[0] >> 1) & 7];
    int32_t ch = 1 + ((data[0] >> 4) & 1);
    rill_audio_packet_params_t p = rill_audio_packet_default_params();
    p.max_gap = 1 + (data[1] & 63);
    p.max_conceal_ms = 20 * (data[1] >> 6);
    p.max_packet_ms = 100;
    rill_audio_packet_decoder_t *a = NULL, *b = NULL;
    rill_err_t err = rill_audio_packet_decoder_new(&p, codec, rate, ch, &a);
    if (err != RILL_OK) {
        if (codec == RILL_AUDIO_CODEC_OPUS && (rate == 44100 || rate == 22050 || rate == 96000)) {
            return 0; /* not an Opus rate: refused, as it must be */
        }
        abort();
    }
    if (rill_audio_packet_decoder_new(&p, codec, rate, ch, &b) != RILL_OK) {
        abort();
    }
    size_t cap = rill_audio_packet_out_max(a);
    if (cap > sizeof g_a / sizeof g_a[0]) {
        abort();
    }
    int64_t seq = 0;
    size_t at = 2;
    while (at + 3 <= size) {
        uint8_t op = data[at];
        size_t len = (size_t)data[at + 1] | (size_t)data[at + 2] << 8;
        at += 3;
        len = len < size - at ? len : size - at;
        const uint8_t *pkt = data + at;
        at += len;
        int step = (int)(op & 63) - 32;
        int64_t s = step == 31 ? seq + 1000000 : seq + step;
        s = s < 0 ? 0 : s;
        bool small = (op & 64) != 0, wrong_rate = (op & 128) != 0;
        rill_audio_stats_t before = rill_audio_packet_stats(a);
        int64_t exp_before = rill_audio_packet_expected(a);
        int64_t r = rill_audio_packet_decode(a, codec, wrong_rate ? rate + 1 : rate, ch, s, pkt,
                                             len, g_a, small ? cap - 1 : cap);
        if (r >= 0) {
            /* A duplicate or late packet writes nothing, so even a small buffer takes it. */
            if ((small && r != 0) || wrong_rate || (size_t)r > cap) {
                abort();
            }
            check_samples(g_a, r);
            int64_t rb = rill_audio_packet_decode(b, codec, rate, ch, s, pkt, len, g_b, cap);
            if (rb != r || memcmp(g_a, g_b, (size_t)r * sizeof *g_a) != 0) {
                abort();
            }
            seq = s;
        } else {
            if (r != RILL_EINVAL && r != RILL_EFORMAT && r != RILL_EFULL) {
                abort();
            }
            if (wrong_rate && r != RILL_EINVAL) {
                abort();
            }
            rill_audio_stats_t after = rill_audio_packet_stats(a);
            if (after.packets_bad != before.packets_bad + 1 || !same_counters(before, after) ||
                rill_audio_packet_expected(a) != exp_before) {
                abort();
            }
        }
        rill_audio_stats_t st = rill_audio_packet_stats(a);
        if (st.packets_concealed > st.packets_lost || st.concealed_ms > st.packets_lost * 120) {
            abort();
        }
    }
    if (!same_counters(rill_audio_packet_stats(a), rill_audio_packet_stats(b)) ||
        rill_audio_packet_expected(a) != rill_audio_packet_expected(b)) {
        abort();
    }
    rill_audio_packet_decoder_destroy(&a);
    rill_audio_packet_decoder_destroy(&b);
    return 0;
}
