/*
 * rill_audio.h - audio sources for speech sessions (../shared/DESIGN.md section 2, ingest/:
 * "audio"): files, packets over the wire and live capture, all turned into one signal, mono
 * float32 at 16 kHz (RILL_AUDIO_RATE, what Whisper takes), plus an energy-based voice activity
 * detector over that signal. Recognition is not done here: a recognizer pulls samples from
 * these objects.
 *
 *   rill_audio_resampler_t  any rate, any channel count (interleaved float or 16-bit PCM) to
 *                           16 kHz mono: NaN/inf cleaned, channels averaged, libsoxr's
 *                           streaming resampler (high quality); the piece the others share
 *   rill_audio_file_t       WAV/FLAC (and whatever else libsndfile reads) and Ogg Opus
 *                           (libopusfile), read in chunks: "up to N samples" per call
 *   rill_audio_packet_decoder_t  the packets of `ingest.audio` ({codec "opus"|"pcm16", rate,
 *                           channels, seq, data}): libopus with its loss concealment for missing
 *                           sequence numbers, or little-endian PCM; duplicates and late packets
 *                           dropped and counted
 *   rill_audio_capture_t    a PortAudio input stream whose callback writes into core's lock-free
 *                           ring (rill_ring.h) and never allocates or blocks; the consumer side
 *                           drains, mixes and resamples
 *   rill_vad_t              per-frame speech/silence and the length of the current pause
 *
 * Samples: float, nominally [-1, 1]. Every source cleans its input the same way: a NaN or an
 * infinity becomes 0.0 and a finite sample beyond [-1, 1] is clamped to it, before the channels
 * are mixed, and the output is clamped again after resampling (a band-limiting filter overshoots
 * full-scale input by up to ~9 %), so the 16 kHz signal is always finite and in range; all of it
 * is counted in the stats (`cleaned`, `clipped`). Rejected: refusing a chunk that holds a NaN.
 * A live stream would stop for one bad sample from a driver, and there is nothing a caller could
 * do with the refusal but drop the chunk, which loses more audio than replacing one sample.
 *
 * Limits: input rates RILL_AUDIO_RATE_MIN..RILL_AUDIO_RATE_MAX Hz (8 kHz .. 384 kHz), channels
 * 1..RILL_AUDIO_CHANNELS_MAX (32); outside them a constructor or a packet gives RILL_ERANGE with
 * a detail naming the value. Every error records a detail for the calling thread
 * (rill_last_error); an object whose call failed is as it was before the call, except where a
 * function says otherwise (a file that turns out corrupt in the middle stays failed).
 *
 * Memory: handles and their buffers are charged to RILL_MEM_INGEST and sized at creation; no
 * call after creation allocates through rill_malloc (libsndfile, libopusfile and libsoxr keep
 * their own state, allocated by them when the object is created). Thread safety: each object is
 * used by one thread at a time, except the capture object, whose callback runs on PortAudio's
 * thread (see there). Calls that touch PortAudio (rill_audio_devices, capture start/stop) must
 * not run on two threads at once anywhere in the process (PortAudio's own rule).
 */
#ifndef RILL_AUDIO_H
#define RILL_AUDIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_AUDIO_RATE         16000  /* Hz of every source's output */
#define RILL_AUDIO_RATE_MIN     8000   /* lowest input rate accepted, Hz */
#define RILL_AUDIO_RATE_MAX     384000 /* highest input rate accepted, Hz */
#define RILL_AUDIO_CHANNELS_MAX 32     /* most input channels accepted */

/* Counters of one source; each object fills the fields that apply to it (the rest stay 0). */
typedef struct rill_audio_stats {
    int64_t frames_in;   /* input frames taken (one sample per channel each), at the input rate */
    int64_t samples_out; /* 16 kHz mono samples handed out */
    int64_t cleaned;     /* NaN or infinite input samples replaced by 0 */
    int64_t clipped;     /* samples clamped to [-1, 1]: finite input beyond it, and output
                            that the resampler's (or Opus's) filter pushed past full scale */
    /* Packets (rill_audio_packet_decoder_t). */
    int64_t packets;           /* packets decoded (in order or after a gap) */
    int64_t packets_lost;      /* sequence numbers skipped by a gap within max_gap */
    int64_t packets_concealed; /* lost packets filled by concealment (<= packets_lost) */
    int64_t concealed_ms;      /* audio made up by concealment, ms (16 kHz samples / 16) */
    int64_t packets_duplicate; /* a sequence number received before: dropped */
    int64_t packets_late;      /* arrived after its place was concealed or passed: dropped */
    int64_t resyncs;           /* gaps beyond max_gap: the stream went on at the packet's
                                  number without concealment */
    int64_t packets_bad;       /* packets refused with an error (the decoder unchanged) */
    /* Capture (rill_audio_capture_t). */
    int64_t callbacks;       /* PortAudio callbacks (or test calls of the callback) */
    int64_t frames_captured; /* frames handed to the callback (= frames_in + overruns + what the
                                ring still holds) */
    int64_t overruns;        /* input frames dropped because the ring was full */
    int64_t device_overflow; /* callbacks in which PortAudio reported an input overflow */
} rill_audio_stats_t;

/* ---- resampler: interleaved frames at any rate to 16 kHz mono ---------------------------------
 *
 * A streaming object: push frames as they come, in chunks of any size; the output is the same
 * whatever the chunking (libsoxr keeps the filter's state between calls). Output trails input
 * by the filter's delay, which libsoxr compensates: over a whole stream, after
 * rill_audio_resampler_flush(), the output has round(frames * 16000 / rate) samples and sample
 * k is the input's time k / 16000 s. At 16 kHz in, the output is the mixed input exactly.
 * Quality: libsoxr's SOXR_HQ (20-bit, passband to 91 % of the lower Nyquist frequency). */
typedef struct rill_audio_resampler rill_audio_resampler_t;

/* Creates a resampler for `channels` interleaved channels at `rate` Hz. Caller owns *out;
 * destroy with rill_audio_resampler_destroy(). Errors: RILL_EINVAL (out NULL), RILL_ERANGE (rate
 * or channels outside the limits), RILL_ENOMEM (*out untouched), RILL_EINTERNAL (libsoxr
 * refused; its message in the detail). */
rill_err_t rill_audio_resampler_new(int32_t rate, int32_t channels, rill_audio_resampler_t **out);

/* Destroys *rp and sets it to NULL. NULL-safe. */
void rill_audio_resampler_destroy(rill_audio_resampler_t **rp);

/* Output room (16 kHz samples) that suffices for pushing n_frames more frames now, or for the
 * flush when n_frames is 0: the output so far never exceeds ceil(frames pushed * 16000 / rate). */
size_t rill_audio_resampler_out_max(const rill_audio_resampler_t *r, size_t n_frames);

/* Pushes frames[0 .. n_frames * channels) (interleaved float) and writes the 16 kHz samples that
 * are ready into out[0..cap). Returns the samples written (>= 0; fewer than n_frames * ratio
 * while the filter fills). Errors, with nothing consumed: RILL_EFULL when cap <
 * rill_audio_resampler_out_max(r, n_frames); RILL_EINVAL for NULL r or out, frames NULL with
 * n_frames > 0, or a push after the flush. Does not block or allocate. */
int64_t rill_audio_resampler_push(rill_audio_resampler_t *r, const float *frames, size_t n_frames,
                                  float *out, size_t cap);

/* As rill_audio_resampler_push() for signed 16-bit samples (x / 32768). */
int64_t rill_audio_resampler_push_s16(rill_audio_resampler_t *r, const int16_t *frames,
                                      size_t n_frames, float *out, size_t cap);

/* Ends the stream: writes the samples the filter still holds into out[0..cap). Returns their
 * number; later pushes are refused until rill_audio_resampler_reset(). Errors as push (cap
 * against out_max(r, 0)). A second flush returns 0. */
int64_t rill_audio_resampler_flush(rill_audio_resampler_t *r, float *out, size_t cap);

/* Forgets the stream (the filter's state, the flush) but keeps the counters. NULL-safe. */
void rill_audio_resampler_reset(rill_audio_resampler_t *r);

/* Input rate and channels as created (0 for NULL). */
int32_t rill_audio_resampler_rate(const rill_audio_resampler_t *r);
int32_t rill_audio_resampler_channels(const rill_audio_resampler_t *r);

/* Counters since creation: frames_in, samples_out, cleaned, clipped (zeros for NULL). */
rill_audio_stats_t rill_audio_resampler_stats(const rill_audio_resampler_t *r);

/* ---- files ------------------------------------------------------------------------------------
 *
 * Opens a file by its content, not its name: an Ogg stream whose first packet is an OpusHead
 * goes to libopusfile (Ogg Opus, decoded at 48 kHz, surround mixed to stereo by libopusfile),
 * anything else to libsndfile (WAV, FLAC, and its other formats). A file whose header is cut or
 * damaged is refused at open (RILL_EFORMAT, the library's message in the detail). Ogg Opus is
 * checked whole at open (one sequential read through libogg: every page's checksum, no gap in
 * the page numbers, no bytes between pages, the file ending at a page's end; RILL_EFORMAT with
 * the byte offset), because libopusfile skips damaged pages and cut ends without a word. Other
 * files' damaged or cut data is found while reading: a decoder error, or a stream that ends
 * before the length its header declares (FLAC's STREAMINFO), is RILL_EFORMAT from read, with the
 * position in the detail; the samples before it were handed out. A WAV file whose data chunk is
 * shorter than declared is read to its end without an error: libsndfile corrects the length on
 * open (info.frames is what the file holds), as players do. */
typedef struct rill_audio_file rill_audio_file_t;

typedef struct rill_audio_file_info {
    int32_t rate;       /* the file's rate, Hz (48000 for Ogg Opus: libopusfile's rate) */
    int32_t channels;   /* channels decoded (Ogg Opus: 1 or 2) */
    int64_t frames;     /* frames in the file at `rate`, or -1 when the format does not say */
    int64_t samples;    /* 16 kHz samples the whole file gives, round(frames * 16000 /
                           rate), or -1 with frames */
    double duration_s;  /* frames / rate, or -1 */
    const char *format; /* "wav", "flac", "ogg-opus", ... (static string) */
} rill_audio_file_info_t;

/* Opens path, a regular file, for reading. Caller owns *out; close with rill_audio_file_close().
 * Errors: RILL_EINVAL (NULL arguments), RILL_EIO (cannot open or read the file),
 * RILL_EUNSUPPORTED (not a regular file: a pipe or a device cannot be opened twice, as the
 * content check needs), RILL_EFORMAT (not a file either library reads, or damaged: see above),
 * RILL_ERANGE (rate or channels outside the limits), RILL_ENOMEM (*out untouched). Blocks on
 * file I/O. */
rill_err_t rill_audio_file_open(const char *path, rill_audio_file_t **out);

/* Closes the file and sets *fp to NULL. NULL-safe. */
void rill_audio_file_close(rill_audio_file_t **fp);

/* What the file is (zeros for NULL). */
rill_audio_file_info_t rill_audio_file_info(const rill_audio_file_t *f);

/* Reads up to n 16 kHz mono samples into out[0..n). Returns the number read, 0 at the end of
 * the file (and on every call after it); fewer than n only at the end. Errors: RILL_EINVAL (NULL
 * f, or out NULL with n > 0), RILL_EFORMAT (damaged or cut data: see above; every later call
 * returns it again). Blocks on file I/O; does not allocate. */
int64_t rill_audio_file_read(rill_audio_file_t *f, float *out, size_t n);

/* Counters since open (zeros for NULL). */
rill_audio_stats_t rill_audio_file_stats(const rill_audio_file_t *f);

/* ---- packets over the wire --------------------------------------------------------------------
 *
 * One decoder per stream (a session's `ingest.audio`), created with the stream's format from its
 * first packet; every later packet must have the same codec, rate and channels (a change is
 * RILL_EINVAL: a new format is a new decoder). A server handler passes the request's fields as
 * they came: the codec name through rill_audio_codec_from_name(), rate, channels and seq as the
 * 64-bit integers msgpack gives (range-checked here, so no cast can alias a bad value to a good
 * one), data as the bin's pointer and length.
 *
 *   "pcm16": data is little-endian signed 16-bit interleaved frames (length a multiple of
 *            2 * channels, 1 .. max_packet_ms of audio); resampled to 16 kHz. Lost packets are
 *            concealed with silence of the previous packet's length.
 *   "opus":  one Opus packet (RFC 6716) per message; rate is the stream's (8000, 12000, 16000,
 *            24000 or 48000), channels 1 or 2; libopus decodes straight to 16 kHz mono (it mixes
 *            and resamples itself), so no second resampler runs. Lost packets are concealed by
 *            libopus (PLC) in units of the previous packet's duration; for the last lost packet
 *            before the one that arrived, that packet's in-band FEC is used when it has any.
 *
 * Sequence numbers (0 <= seq < INT64_MAX) count packets; the first packet sets the start. For
 * each packet:
 *   - seq == expected: decoded.
 *   - expected < seq <= expected + max_gap: the seq - expected missing packets are counted lost,
 *     as many as fit in max_conceal_ms are concealed (the rest only counted), then the packet is
 *     decoded.
 *   - seq > expected + max_gap: a resync (counted, the missing packets not counted lost): the
 *     stream goes on at seq without concealment (a gap that long is an outage, and making up
 *     seconds of audio would only feed the recognizer noise; bounding it also bounds the output
 *     of one call).
 *   - expected - 64 <= seq < expected: a duplicate when that number was received (dropped), else
 *     late (its place was concealed; dropped). Older numbers are late too. Both return 0
 *     samples, not an error. A sender that restarts its numbering is a new stream: its handler
 *     makes a new decoder (a packet far behind can never move the stream backwards).
 * A packet that is refused (bad data, format change, out-of-range seq) changes nothing: not the
 * expected number, not the codec's state, no counter but packets_bad. */
typedef struct rill_audio_packet_decoder rill_audio_packet_decoder_t;

typedef enum rill_audio_codec {
    RILL_AUDIO_CODEC_PCM16 = 0,
    RILL_AUDIO_CODEC_OPUS = 1,
} rill_audio_codec_t;

/* Looks up a codec by its wire name ("pcm16", "opus"; len bytes, not NUL-terminated). Errors:
 * RILL_EUNSUPPORTED (another name; *out unaltered), RILL_EINVAL (NULL arguments). */
rill_err_t rill_audio_codec_from_name(const char *name, size_t len, rill_audio_codec_t *out);

/* Wire name of a codec ("pcm16", "opus"), or "?" (static string). */
const char *rill_audio_codec_name(rill_audio_codec_t codec);

typedef struct rill_audio_packet_params {
    int32_t max_gap;        /* most missing packets treated as loss, 1..1000; default 50 */
    int32_t max_conceal_ms; /* most audio concealed for one gap, ms, 0..2000; default 500 */
    int32_t max_packet_ms;  /* longest pcm16 packet, ms, 10..2000; default 1000 (Opus packets
                               are at most 120 ms by the format) */
} rill_audio_packet_params_t;

/* Defaults as documented per field. */
rill_audio_packet_params_t rill_audio_packet_default_params(void);

/* Creates a decoder for a stream of codec at rate Hz with channels channels. params NULL: the
 * defaults. Caller owns *out; destroy with rill_audio_packet_decoder_destroy(). Errors:
 * RILL_EINVAL (out NULL, params out of range, unknown codec), RILL_ERANGE (rate or channels not
 * allowed for the codec), RILL_ENOMEM (*out untouched), RILL_EINTERNAL (libopus refused). */
rill_err_t rill_audio_packet_decoder_new(const rill_audio_packet_params_t *params,
                                         rill_audio_codec_t codec, int64_t rate, int64_t channels,
                                         rill_audio_packet_decoder_t **out);

/* Destroys *dp and sets it to NULL. NULL-safe. */
void rill_audio_packet_decoder_destroy(rill_audio_packet_decoder_t **dp);

/* 16 kHz samples one call of rill_audio_packet_decode() can write at most (concealment plus the
 * longest packet plus the resampler's slack); a buffer of this size always suffices. */
size_t rill_audio_packet_out_max(const rill_audio_packet_decoder_t *d);

/* Decodes one packet: codec, rate and channels as the stream's, seq its number, data[0..len)
 * its payload. Writes concealment (if any) and then the packet's audio into out[0..cap) as
 * 16 kHz mono. Returns the samples written (0 for a duplicate or late packet). Errors, with the
 * decoder unchanged: RILL_EINVAL (NULL d or out, data NULL with len > 0, codec, rate or channels
 * not the stream's, seq outside 0..INT64_MAX-1), RILL_EFULL (cap < rill_audio_packet_out_max(d)),
 * RILL_EFORMAT (empty data, a pcm16 length that is not whole frames or longer than max_packet_ms,
 * an Opus packet libopus refuses). Does not block or allocate. */
int64_t rill_audio_packet_decode(rill_audio_packet_decoder_t *d, rill_audio_codec_t codec,
                                 int64_t rate, int64_t channels, int64_t seq, const uint8_t *data,
                                 size_t len, float *out, size_t cap);

/* The sequence number the decoder expects next (-1 before the first packet; 0 for NULL). */
int64_t rill_audio_packet_expected(const rill_audio_packet_decoder_t *d);

/* Counters since creation (zeros for NULL). */
rill_audio_stats_t rill_audio_packet_stats(const rill_audio_packet_decoder_t *d);

/* ---- live capture (PortAudio) -----------------------------------------------------------------
 *
 * Two sides. The producer is PortAudio's callback thread: rill_audio_capture_callback() copies
 * the device's interleaved float frames into a lock-free single-producer ring sized at creation
 * (core/rill_ring.h); what does not fit is dropped and counted (`overruns`). It never allocates,
 * locks, logs or does I/O, and it never touches the resampler. The consumer is one thread that
 * calls rill_audio_capture_read(): it drains the ring, cleans and mixes the frames and resamples
 * them to 16 kHz. A device's rate is opened as asked (or its default rate), never converted by
 * PortAudio, so the resampler sees the device's own clock. */
typedef struct rill_audio_capture rill_audio_capture_t;

typedef struct rill_audio_capture_params {
    int32_t device;            /* PortAudio device index; -1: the default input; default -1 */
    int32_t rate;              /* Hz; 0: the device's default rate; default 0 */
    int32_t channels;          /* 1..RILL_AUDIO_CHANNELS_MAX; default 1 */
    int32_t ring_ms;           /* ring capacity in ms at the rate, 10..60000, and at most
                                  256 MiB of frames; default 2000 */
    int32_t frames_per_buffer; /* frames per callback, 0: PortAudio chooses; default 0 */
} rill_audio_capture_params_t;

/* Defaults as documented per field. */
rill_audio_capture_params_t rill_audio_capture_default_params(void);

/* Creates a capture object with its ring and resampler, without opening a device (so it can be
 * driven by calling rill_audio_capture_callback() directly). params->rate 0 needs the device:
 * then PortAudio is asked for its default rate. Caller owns *out; destroy with
 * rill_audio_capture_destroy() (which stops the stream). Errors: RILL_EINVAL (out NULL, params
 * out of range), RILL_ERANGE (rate or channels outside the limits), RILL_ENOTFOUND (no such
 * device, or no default input), RILL_EDEVICE (PortAudio failed; its message in the detail),
 * RILL_ENOMEM (*out untouched). */
rill_err_t rill_audio_capture_new(const rill_audio_capture_params_t *params,
                                  rill_audio_capture_t **out);

/* Stops the stream if it runs, destroys *cp and sets it to NULL. NULL-safe. */
void rill_audio_capture_destroy(rill_audio_capture_t **cp);

/* Opens the device and starts the stream; the callback runs from then on. Errors: RILL_EBUSY
 * (already started), RILL_ENOTFOUND (no such device), RILL_EDEVICE (PortAudio refused the
 * device, rate or channels; its message in the detail; nothing left open). Blocks briefly. */
rill_err_t rill_audio_capture_start(rill_audio_capture_t *c);

/* Stops and closes the stream (frames already in the ring stay readable). RILL_OK when it was
 * not started. Blocks until the callback has returned for the last time. */
rill_err_t rill_audio_capture_stop(rill_audio_capture_t *c);

/* The producer: PortAudio's stream callback (its PaStreamCallback signature: input frames,
 * output NULL, frame_count frames, time_info unused, status_flags PaStreamCallbackFlags, user
 * the capture object). Copies frame_count interleaved float frames of `channels` channels into
 * the ring; a NULL input counts as frame_count frames of silence; frames that do not fit are
 * dropped and counted. Returns 0 (paContinue). Wait-free: no allocation, lock, I/O or logging.
 * One producer thread at a time (PortAudio's, or a test's while no stream runs). */
struct PaStreamCallbackTimeInfo;
int rill_audio_capture_callback(const void *input, void *output, unsigned long frame_count,
                                const struct PaStreamCallbackTimeInfo *time_info,
                                unsigned long status_flags, void *user);

/* The consumer: takes what the ring holds and writes up to n 16 kHz mono samples into
 * out[0..n). Returns the number written, 0 when nothing is ready (it never waits). Errors:
 * RILL_EINVAL (NULL c, or out NULL with n > 0). One consumer thread; does not allocate. */
int64_t rill_audio_capture_read(rill_audio_capture_t *c, float *out, size_t n);

/* Rate (Hz) and channels the ring holds (the device's when rate 0 was asked). 0 for NULL. */
int32_t rill_audio_capture_rate(const rill_audio_capture_t *c);
int32_t rill_audio_capture_channels(const rill_audio_capture_t *c);

/* Counters since creation (zeros for NULL). Safe from the consumer thread while the callback
 * runs (the callback's counters are atomics, read as a snapshot). */
rill_audio_stats_t rill_audio_capture_stats(const rill_audio_capture_t *c);

/* One audio input device as PortAudio lists it. */
typedef struct rill_audio_device {
    int32_t index;     /* PortAudio device index (capture params' `device`) */
    char name[128];    /* the device's name, cut to fit, NUL-terminated */
    int32_t channels;  /* most input channels */
    double rate;       /* default sample rate, Hz */
    char host_api[64]; /* "ALSA", "JACK Audio Connection Kit", ..., cut to fit */
} rill_audio_device_t;

/* Lists the input devices (devices with at least one input channel) into out[0..cap), in
 * PortAudio's order. Returns how many there are (may exceed cap: only cap are written); 0 when
 * there are none. Errors: RILL_EINVAL (out NULL with cap > 0), RILL_EDEVICE (PortAudio failed to
 * start; its message in the detail). Initialises and terminates PortAudio for the call; host
 * libraries (ALSA, JACK) may print their own diagnostics on stderr while probing. */
int64_t rill_audio_devices(rill_audio_device_t *out, size_t cap);

/* ---- voice activity ---------------------------------------------------------------------------
 *
 * An energy detector over 16 kHz mono frames of frame_ms (30 ms: 480 samples). A frame's level is
 * its mean square in dB full scale (10 log10(mean x^2); a full-scale sine is -3 dBFS). A frame is
 * speech when its level is at least threshold_db above the noise floor and above min_level_db.
 * The noise floor follows the quietest frames: it drops at once to a quieter frame's level, moves
 * 5 % of the way toward each silence frame's level, and rises by at most floor_rise_db per
 * second during speech (so a louder background is taken as noise within seconds, not as speech
 * forever). It starts at start_floor_db.
 *
 * Smoothing: after speech ends the detector still says speech for hangover_ms (the gaps between
 * words), so `speech` is the raw decision stretched by the hangover. pause_ms is the time since
 * the end of the last raw speech frame (0 inside speech; the time since the start before any
 * speech): the endpoint predictor reads it directly. */
typedef struct rill_vad rill_vad_t;

typedef struct rill_vad_params {
    int32_t frame_ms;     /* 10..100, a multiple of 10 (so whole 16 kHz samples); default 30 */
    float threshold_db;   /* speech: level above the noise floor by this, dB, 0..60; default 9 */
    float min_level_db;   /* speech: level above this, dBFS, -100..0; default -50 */
    float start_floor_db; /* initial noise floor, dBFS, -120..0; default -70 */
    float floor_rise_db;  /* most rise of the floor per second of speech, dB, 0..60; default 1 */
    int32_t hangover_ms;  /* speech kept after the last speech frame, 0..5000; default 300 */
} rill_vad_params_t;

/* Defaults as documented per field. */
rill_vad_params_t rill_vad_default_params(void);

/* Creates a detector. params NULL: the defaults. Caller owns *out; destroy with
 * rill_vad_destroy(). Errors: RILL_EINVAL (out NULL, params out of range or NaN), RILL_ENOMEM
 * (*out untouched). */
rill_err_t rill_vad_new(const rill_vad_params_t *params, rill_vad_t **out);

/* Destroys *vp and sets it to NULL. NULL-safe. */
void rill_vad_destroy(rill_vad_t **vp);

/* Feeds samples[0..n) (16 kHz mono, in any chunks: a frame may span calls). For each frame
 * completed, writes its smoothed decision (1 speech, 0 silence) into speech[i] for i < cap (NULL
 * with cap 0: decisions not wanted). Returns the number of frames completed (may exceed cap: the
 * state advances for all of them). Non-finite samples count as 0. Errors: RILL_EINVAL (NULL v,
 * samples NULL with n > 0, speech NULL with cap > 0). Does not allocate. */
int64_t rill_vad_feed(rill_vad_t *v, const float *samples, size_t n, uint8_t *speech, size_t cap);

/* The smoothed decision of the last completed frame (false before the first; false for NULL). */
bool rill_vad_speech(const rill_vad_t *v);

/* Length of the current pause, ms: time since the last raw speech frame ended (0 when the last
 * frame was speech); before any speech, the time fed so far. 0 for NULL. */
int64_t rill_vad_pause_ms(const rill_vad_t *v);

/* Level of the last completed frame (-120 before the first) and the current noise floor
 * (start_floor_db before the first frame), dBFS; levels are floored at -120. For tests and
 * tuning (0 for NULL). */
float rill_vad_level_db(const rill_vad_t *v);
float rill_vad_floor_db(const rill_vad_t *v);

/* Frames completed and speech frames (raw decisions) since creation (0 for NULL). */
int64_t rill_vad_frames(const rill_vad_t *v);
int64_t rill_vad_speech_frames(const rill_vad_t *v);

/* Forgets the stream: the partial frame, the floor (back to start_floor_db), the hangover and
 * the pause; keeps the frame counters. NULL-safe. */
void rill_vad_reset(rill_vad_t *v);

#ifdef __cplusplus
}
#endif
#endif /* RILL_AUDIO_H */
