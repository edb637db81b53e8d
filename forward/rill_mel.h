/*
 * rill_mel.h - Whisper's log-mel front end: 16 kHz audio in, the encoder's input features out,
 * computed as faster-whisper 1.2.1's FeatureExtractor computes them, and extended as audio
 * arrives.
 *
 * The features of n samples x[0, n) are those of FeatureExtractor()(x) with its defaults:
 *   - x is extended by 160 zero samples (faster-whisper's padding=160), then reflect-padded by
 *     200 samples on each side (STFT center=True; "reflect" excludes the edge sample and repeats
 *     when the signal is shorter than the pad);
 *   - frame t (t = 0 .. n/160, integer division: n/160 + 1 frames, the STFT's last frame
 *     dropped) is the 400 padded samples from 160 t, times a periodic Hann window, through a
 *     400-point real FFT: power |X_k|^2 for k = 0 .. 200;
 *   - mel_b = sum_k filters[b][k] |X_k|^2, then L = log10(max(mel_b, 1e-10));
 *   - over all frames, with M = max L: feature = (max(L, M - 8) + 4) / 4.
 * The features are laid out as the encoder reads them: mel bin major, frame minor
 * (out[b * stride + t]). faster-whisper's transcribe then feeds the encoder the first n/160
 * frames, zero-padded (in the feature domain) to 3000: the caller does that with the stride.
 * Note that M is the maximum over the whole buffer, as faster-whisper takes it over a whole file.
 *
 * Streaming: rill_mel_append() adds samples and computes at once the frames that no later
 * sample can change (frame t is final once 160 t + 200 < n); rill_mel_features() computes the
 * two or three frames at the end, which depend on the zero and reflect padding, and applies the
 * normalisation. Appending in any pieces gives bit for bit the features of one append of the
 * whole. rill_mel_drop() removes audio from the front (whole hops), for a rolling window.
 *
 * Accuracy against faster-whisper (numpy's float32 pocketfft and BLAS): stated and tested in
 * tests/test_whisper_mel.c; the derivation is in forward/whisper_mel.c's design note.
 *
 * Memory: fixed at creation, sized by max_samples: 4 * (max_samples + (max_samples / 160 + 1) *
 * n_mels + n_mels * 201) bytes, a few KiB of scratch, and FFTW's plan (a few KiB, allocated by FFTW
 * itself, not counted by rill_alloc). For 30 s and 80 mels: 2.9 MiB. Nothing is allocated after
 * rill_mel_new().
 *
 * Thread safety: a rill_mel_t is one thread at a time. Creating and destroying them is safe
 * from any number of threads (FFTW's planner, which is not thread-safe, is called under a lock
 * of this module; no other part of rill calls FFTW).
 */
#ifndef RILL_MEL_H
#define RILL_MEL_H

#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_MEL_SAMPLE_RATE 16000 /* Hz */
#define RILL_MEL_N_FFT       400   /* samples per frame (25 ms) */
#define RILL_MEL_HOP         160   /* samples between frames (10 ms) */
#define RILL_MEL_N_FREQ      201   /* FFT bins per frame: N_FFT / 2 + 1 */
#define RILL_MEL_MAX_MELS    512
#define RILL_MEL_MAX_ABS     1e15f /* largest sample magnitude taken: (400 x 1e15)^2 < FLT_MAX */

typedef struct rill_mel rill_mel_t;

/* Creates a front end for buffers of up to max_samples samples. filters: the mel filterbank,
 * float32 [n_mels][RILL_MEL_N_FREQ] row-major (a Whisper GGUF's `whisper/mel_filters` tensor
 * data, ne = (201, n_mels)); copied, so it may be released after the call. Errors: RILL_EINVAL
 * (NULL filters or out, n_mels outside 1 .. RILL_MEL_MAX_MELS, max_samples < 1 or above
 * 2^31 - 1, a filter weight that is negative or not finite), RILL_ENOMEM (also when FFTW cannot
 * make its plan). Caller owns *out; destroy with rill_mel_destroy(). On error *out is NULL. */
rill_err_t rill_mel_new(const float *filters, int n_mels, int64_t max_samples, rill_mel_t **out);

/* Frees m and sets *mp = NULL. NULL-safe. */
void rill_mel_destroy(rill_mel_t **mp);

/* Forgets all audio (the state of a new front end). */
void rill_mel_reset(rill_mel_t *m);

/* Appends x[0, n) (16 kHz mono, nominally in [-1, 1]) and computes the frames that became
 * final. Errors: RILL_EINVAL (NULL m, x == NULL with n > 0, n < 0, a sample that is NaN or
 * infinite), RILL_ERANGE (a sample beyond +-RILL_MEL_MAX_ABS, whose power would overflow
 * float), RILL_EFULL (the buffer would exceed max_samples: drop audio first). On error nothing
 * changes. Does not allocate; time O(n) (one FFT and one
 * n_mels x 201 product per 160 samples). */
rill_err_t rill_mel_append(rill_mel_t *m, const float *x, int64_t n);

/* Drops the first n_hops * RILL_MEL_HOP samples, so the buffer holds what it would after
 * appending only the samples that remain; frames that still exist keep their values except the
 * first two, which are recomputed (their reflect padding changes). n_hops larger than the
 * buffer's whole hops empties it to the remainder (n mod 160 samples). Errors: RILL_EINVAL (NULL
 * m, n_hops < 0). Time: O(samples + frames * n_mels) (a move of what remains). */
rill_err_t rill_mel_drop(rill_mel_t *m, int64_t n_hops);

/* Samples in the buffer (0 for NULL). */
int64_t rill_mel_n_samples(const rill_mel_t *m);

/* Frames the buffer's features have: n_samples / 160 + 1 (0 for NULL). */
int64_t rill_mel_n_frames(const rill_mel_t *m);

/* Number of mel bins (0 for NULL). */
int rill_mel_n_mels(const rill_mel_t *m);

/* Writes the normalised features of frames [first, first + count) to out[b * stride + (t -
 * first)] for b = 0 .. n_mels - 1; nothing else in out is touched. Computes the frames at the
 * end that are not final yet (at most 3 FFTs), so it is not const, but it changes nothing a
 * later call could see. Errors: RILL_EINVAL (NULL m, out == NULL with count > 0, first < 0,
 * count < 0, first + count > rill_mel_n_frames(m), stride < count). Does not allocate. */
rill_err_t rill_mel_features(rill_mel_t *m, int64_t first, int64_t count, float *out,
                             int64_t stride);

#ifdef __cplusplus
}
#endif
#endif /* RILL_MEL_H */
