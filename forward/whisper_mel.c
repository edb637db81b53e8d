/*
 * whisper_mel.c - Whisper's log-mel features, as faster-whisper computes them (rill_mel.h).
 *
 * Design. The buffer keeps the raw audio and, per frame, L = log10(max(mel, 1e-10)) before the
 * normalisation. A frame is final once every sample it reads is a real one that no append can
 * change: frame t reads padded positions 160 t .. 160 t + 399, i.e. signal indices
 * 160 t - 200 .. 160 t + 199, so it is final when 160 t + 200 < n (on the left, reflection reads
 * x[1 .. 200], real once n > 200). rill_mel_append() computes those frames once; the (at most
 * two) frames after them read the zero padding or the right reflection and are computed into a
 * small tail by every rill_mel_features() call, which then normalises with the maximum over
 * final and tail frames. The normalisation needs the global maximum, so it cannot be folded
 * into the cache; applying it at read time costs n_frames * n_mels operations, nothing next to
 * the FFTs. Every frame is computed by the same function from the same samples whatever the
 * append pattern, so incremental and one-shot results are bit-identical (tested).
 *
 * Streaming cost (tests/test_whisper_mel.c prints it; 2 cores shared with other builds): a
 * sliding 30 s window advanced by 1 s (drop 1 s, append 1 s: 100 new frames, read all 3000
 * normalised) takes 1-3 ms; computing a 30 s window from scratch (3000 frames) 10-40 ms, so
 * even recomputing every second would be cheap next to the encoder. Per frame: one 400-point FFT
 * and the mel product over only the bins where each triangle is non-zero (391 of 80 x 201, under
 * 3%). The window slides with rill_mel_drop(): a memmove of what remains, the first two frames
 * recomputed (their left reflection changed) and the maximum re-taken over the cache.
 *
 * FFT: FFTW 3 (fftw3f, Debian's libfftw3-dev), single precision, one r2c plan of 400 points
 * made with FFTW_ESTIMATE: no timing measurements during planning, so on a given machine the
 * plan and hence the rounding are the same in every run (the SIMD codelets FFTW picks may differ
 * between CPUs; the tolerance covers that). numpy (what faster-whisper uses) also transforms in
 * float32 since numpy 2.0 (pocketfft), so both sides round at the same precision. A plain
 * O(N^2) real DFT of 400 points would have been ~10x the operations with worse rounding; a
 * hand-written mixed-radix FFT (400 = 2^4 * 5^2) is what the library already is. The planner
 * is not thread-safe, so plan creation and destruction take g_plan_lock; fftwf_execute_dft_r2c
 * on our own arrays (allocated aligned, with the plan made on them) is.
 *
 * Where we round differently from faster-whisper, and why it is small: |X|^2 as re^2 + im^2
 * (numpy: hypotf, then squared: at most 2 ulp apart); the mel product accumulated in double
 * (numpy's sgemm: float32, blocked); the window from cos() in double rounded to float (numpy:
 * np.hanning in double, cast). The FFT's own error is bounded relative to the frame's energy,
 * not to each bin, so a mel band far below its frame's loudest band carries a larger relative
 * error; the (M - 8) clamp caps how far below the global maximum a band can be and still
 * matter. The tolerance the tests hold us to, and the measured error, are in
 * tests/test_whisper_mel.c.
 *
 * Rejected: recomputing all frames on every read (simple, but the normalisation is the only
 * part that really depends on later audio); a window of ring-buffered audio (drop() with a
 * memmove is simpler: 1.9 MB moved per second of sliding for a 30 s window, inside the 1-3 ms).
 */
#include "rill_mel.h"

#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "rill_alloc.h"
#include "rill_log.h"

#define TAIL_MAX 3 /* frames after the final ones: at most 2 (see rill_mel_features) */

struct rill_mel {
    int n_mels;
    int64_t cap;            /* most samples */
    int64_t n;              /* samples held */
    int64_t n_final;        /* frames in logmel that no append can change */
    float max_final;        /* max of logmel over the final frames; -INFINITY when none */
    float *audio;           /* (cap) */
    float *logmel;          /* (cap / HOP + 1, n_mels): L per frame, frame major */
    float *filters;         /* (n_mels, N_FREQ) */
    int16_t *band;          /* (n_mels, 2): the [first, last + 1) bins where a filter is non-zero */
    float *tail;            /* (TAIL_MAX, n_mels) */
    float *power;           /* (N_FREQ) */
    float *fft_in;          /* (N_FFT), aligned for FFTW */
    fftwf_complex *fft_out; /* (N_FREQ) */
    fftwf_plan plan;
    float window[RILL_MEL_N_FFT];
};

static pthread_mutex_t g_plan_lock = PTHREAD_MUTEX_INITIALIZER;

/* Index into x_ext[0, len) of padded position p - 200, with numpy's "reflect" (the edge sample
 * not repeated; periodic with period 2 (len - 1) when the pad is longer than the signal). */
static int64_t reflect(int64_t q, int64_t len) {
    if (len == 1) {
        return 0;
    }
    int64_t period = 2 * (len - 1);
    q %= period;
    if (q < 0) {
        q += period;
    }
    return q < len ? q : period - q;
}

/* L of frame t of the first n samples of the buffer, into dst[0, n_mels). */
static void frame_logmel(rill_mel_t *m, int64_t t, int64_t n, float *dst) {
    const int64_t len = n + RILL_MEL_HOP; /* faster-whisper's padding=160 zeros */
    const int64_t start = t * RILL_MEL_HOP - RILL_MEL_N_FFT / 2;
    if (start >= 0 && start + RILL_MEL_N_FFT <= n) {
        const float *a = m->audio + start;
        for (int i = 0; i < RILL_MEL_N_FFT; i++) {
            m->fft_in[i] = a[i] * m->window[i];
        }
    } else {
        for (int i = 0; i < RILL_MEL_N_FFT; i++) {
            int64_t q = reflect(start + i, len);
            float v = q < n ? m->audio[q] : 0.0f;
            m->fft_in[i] = v * m->window[i];
        }
    }
    fftwf_execute_dft_r2c(m->plan, m->fft_in, m->fft_out);
    for (int k = 0; k < RILL_MEL_N_FREQ; k++) {
        float re = m->fft_out[k][0], im = m->fft_out[k][1];
        m->power[k] = re * re + im * im;
    }
    for (int b = 0; b < m->n_mels; b++) {
        const float *f = m->filters + (size_t)b * RILL_MEL_N_FREQ;
        double acc = 0.0;
        /* The triangles are narrow: summing only their non-zero bins skips 97% of the product
         * and changes no sum (the skipped terms are exact zeros times finite powers). */
        for (int k = m->band[2 * b]; k < m->band[2 * b + 1]; k++) {
            acc += (double)f[k] * (double)m->power[k];
        }
        float mel = (float)acc;
        dst[b] = log10f(mel > 1e-10f ? mel : 1e-10f);
    }
}

/* Frames of n samples that no later sample can change. */
static int64_t final_frames(int64_t n) {
    return n > RILL_MEL_N_FFT / 2 ? (n - RILL_MEL_N_FFT / 2 - 1) / RILL_MEL_HOP + 1 : 0;
}

static float row_max(const float *row, int n) {
    float mx = -INFINITY;
    for (int b = 0; b < n; b++) {
        mx = row[b] > mx ? row[b] : mx;
    }
    return mx;
}

/* Computes frames [n_final, final_frames(n)) into the cache. */
static void finalize(rill_mel_t *m) {
    int64_t upto = final_frames(m->n);
    for (int64_t t = m->n_final; t < upto; t++) {
        float *row = m->logmel + (size_t)t * (size_t)m->n_mels;
        frame_logmel(m, t, m->n, row);
        float mx = row_max(row, m->n_mels);
        m->max_final = mx > m->max_final ? mx : m->max_final;
    }
    m->n_final = upto > m->n_final ? upto : m->n_final;
}

rill_err_t rill_mel_new(const float *filters, int n_mels, int64_t max_samples, rill_mel_t **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (filters == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "rill_mel_new: NULL %s",
                           filters == NULL ? "filters" : "out");
    }
    if (n_mels < 1 || n_mels > RILL_MEL_MAX_MELS) {
        return rill__error(RILL_EINVAL, "rill_mel_new: n_mels %d outside 1..%d", n_mels,
                           RILL_MEL_MAX_MELS);
    }
    if (max_samples < 1 || max_samples > INT32_MAX) {
        return rill__error(RILL_EINVAL, "rill_mel_new: max_samples %lld outside 1..2^31-1",
                           (long long)max_samples);
    }
    for (int64_t i = 0; i < (int64_t)n_mels * RILL_MEL_N_FREQ; i++) {
        if (!isfinite(filters[i]) || filters[i] < 0.0f) {
            return rill__error(RILL_EINVAL,
                               "rill_mel_new: filter weight %lld (bin %lld of mel %lld) is %g",
                               (long long)i, (long long)(i % RILL_MEL_N_FREQ),
                               (long long)(i / RILL_MEL_N_FREQ), (double)filters[i]);
        }
    }
    rill_mel_t *m = rill_calloc(RILL_MEM_MODEL, 1, sizeof *m);
    if (m == NULL) {
        return RILL_ENOMEM;
    }
    m->n_mels = n_mels;
    m->cap = max_samples;
    size_t frames = (size_t)(max_samples / RILL_MEL_HOP + 1);
    m->audio = rill_malloc(RILL_MEM_MODEL, (size_t)max_samples * sizeof(float));
    m->logmel = rill_malloc(RILL_MEM_MODEL, frames * (size_t)n_mels * sizeof(float));
    m->filters = rill_malloc(RILL_MEM_MODEL, (size_t)n_mels * RILL_MEL_N_FREQ * sizeof(float));
    m->tail = rill_malloc(RILL_MEM_MODEL, TAIL_MAX * (size_t)n_mels * sizeof(float));
    m->power = rill_malloc(RILL_MEM_MODEL, RILL_MEL_N_FREQ * sizeof(float));
    m->fft_in = rill_malloc_aligned(RILL_MEM_MODEL, RILL_MEL_N_FFT * sizeof(float), 64);
    m->fft_out = rill_malloc_aligned(RILL_MEM_MODEL, RILL_MEL_N_FREQ * sizeof(fftwf_complex), 64);
    m->band = rill_malloc(RILL_MEM_MODEL, 2 * (size_t)n_mels * sizeof(int16_t));
    if (m->audio == NULL || m->logmel == NULL || m->filters == NULL || m->tail == NULL ||
        m->power == NULL || m->fft_in == NULL || m->fft_out == NULL || m->band == NULL) {
        rill_mel_destroy(&m);
        return RILL_ENOMEM;
    }
    memcpy(m->filters, filters, (size_t)n_mels * RILL_MEL_N_FREQ * sizeof(float));
    for (int b = 0; b < n_mels; b++) {
        const float *f = filters + (size_t)b * RILL_MEL_N_FREQ;
        int lo = 0, hi = RILL_MEL_N_FREQ;
        while (lo < hi && f[lo] == 0.0f) {
            lo++;
        }
        while (hi > lo && f[hi - 1] == 0.0f) {
            hi--;
        }
        m->band[2 * b] = (int16_t)lo;
        m->band[2 * b + 1] = (int16_t)hi;
    }
    /* Periodic Hann: np.hanning(401)[:-1], i.e. 0.5 - 0.5 cos(2 pi i / 400), in double. */
    const double pi = 3.14159265358979323846;
    for (int i = 0; i < RILL_MEL_N_FFT; i++) {
        m->window[i] = (float)(0.5 - 0.5 * cos(2.0 * pi * i / RILL_MEL_N_FFT));
    }
    pthread_mutex_lock(&g_plan_lock);
    m->plan = fftwf_plan_dft_r2c_1d(RILL_MEL_N_FFT, m->fft_in, m->fft_out, FFTW_ESTIMATE);
    pthread_mutex_unlock(&g_plan_lock);
    if (m->plan == NULL) {
        rill_mel_destroy(&m);
        return rill__error(RILL_ENOMEM, "rill_mel_new: FFTW could not make a plan");
    }
    rill_mel_reset(m);
    *out = m;
    return RILL_OK;
}

void rill_mel_destroy(rill_mel_t **mp) {
    if (mp == NULL || *mp == NULL) {
        return;
    }
    rill_mel_t *m = *mp;
    if (m->plan != NULL) {
        pthread_mutex_lock(&g_plan_lock);
        fftwf_destroy_plan(m->plan);
        pthread_mutex_unlock(&g_plan_lock);
    }
    rill_free(m->audio);
    rill_free(m->logmel);
    rill_free(m->filters);
    rill_free(m->tail);
    rill_free(m->power);
    rill_free(m->fft_in);
    rill_free(m->fft_out);
    rill_free(m->band);
    rill_free(m);
    *mp = NULL;
}

void rill_mel_reset(rill_mel_t *m) {
    if (m == NULL) {
        return;
    }
    m->n = 0;
    m->n_final = 0;
    m->max_final = -INFINITY;
}

rill_err_t rill_mel_append(rill_mel_t *m, const float *x, int64_t n) {
    if (m == NULL || n < 0 || (x == NULL && n > 0)) {
        return rill__error(RILL_EINVAL, "rill_mel_append: %s",
                           m == NULL ? "NULL mel"
                           : n < 0   ? "negative count"
                                     : "NULL samples");
    }
    if (n > m->cap - m->n) {
        return rill__error(RILL_EFULL, "rill_mel_append: %lld samples on %lld would exceed %lld",
                           (long long)n, (long long)m->n, (long long)m->cap);
    }
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            return rill__error(RILL_EINVAL, "rill_mel_append: sample %lld is %g", (long long)i,
                               (double)x[i]);
        }
        if (fabsf(x[i]) > RILL_MEL_MAX_ABS) {
            return rill__error(RILL_ERANGE, "rill_mel_append: sample %lld is %g, above %g",
                               (long long)i, (double)x[i], (double)RILL_MEL_MAX_ABS);
        }
    }
    if (n == 0) {
        return RILL_OK; /* x may be NULL */
    }
    memcpy(m->audio + m->n, x, (size_t)n * sizeof(float));
    m->n += n;
    finalize(m);
    return RILL_OK;
}

rill_err_t rill_mel_drop(rill_mel_t *m, int64_t n_hops) {
    if (m == NULL || n_hops < 0) {
        return rill__error(RILL_EINVAL, "rill_mel_drop: %s",
                           m == NULL ? "NULL mel" : "negative count");
    }
    int64_t k = n_hops < m->n / RILL_MEL_HOP ? n_hops : m->n / RILL_MEL_HOP;
    if (k == 0) {
        return RILL_OK;
    }
    int64_t gone = k * RILL_MEL_HOP;
    memmove(m->audio, m->audio + gone, (size_t)(m->n - gone) * sizeof(float));
    m->n -= gone;
    int64_t keep = m->n_final > k ? m->n_final - k : 0;
    memmove(m->logmel, m->logmel + (size_t)k * (size_t)m->n_mels,
            (size_t)keep * (size_t)m->n_mels * sizeof(float));
    m->n_final = keep;
    /* Frames 0 and 1 read the left reflection, which now mirrors other samples. */
    for (int64_t t = 0; t < 2 && t < m->n_final; t++) {
        frame_logmel(m, t, m->n, m->logmel + (size_t)t * (size_t)m->n_mels);
    }
    m->max_final = -INFINITY;
    for (int64_t t = 0; t < m->n_final; t++) {
        float mx = row_max(m->logmel + (size_t)t * (size_t)m->n_mels, m->n_mels);
        m->max_final = mx > m->max_final ? mx : m->max_final;
    }
    finalize(m);
    return RILL_OK;
}

int64_t rill_mel_n_samples(const rill_mel_t *m) {
    return m == NULL ? 0 : m->n;
}

int64_t rill_mel_n_frames(const rill_mel_t *m) {
    return m == NULL ? 0 : m->n / RILL_MEL_HOP + 1;
}

int rill_mel_n_mels(const rill_mel_t *m) {
    return m == NULL ? 0 : m->n_mels;
}

rill_err_t rill_mel_features(rill_mel_t *m, int64_t first, int64_t count, float *out,
                             int64_t stride) {
    if (m == NULL || (out == NULL && count > 0) || first < 0 || count < 0 ||
        first > rill_mel_n_frames(m) - count || stride < count) {
        return rill__error(RILL_EINVAL,
                           "rill_mel_features: bad arguments (frames [%lld, +%lld) "
                           "of %lld, stride %lld)",
                           (long long)first, (long long)count, (long long)rill_mel_n_frames(m),
                           (long long)stride);
    }
    /* The frames after the final ones: n/160 + 1 - final_frames(n) <= 2 (the two floors differ
     * by at most 2 since their arguments differ by 201/160). */
    int64_t n_frames = rill_mel_n_frames(m);
    int64_t n_tail = n_frames - m->n_final;
    RILL_ASSERT(n_tail >= 0 && n_tail <= TAIL_MAX);
    float mx = m->max_final;
    for (int64_t i = 0; i < n_tail; i++) {
        float *row = m->tail + (size_t)i * (size_t)m->n_mels;
        frame_logmel(m, m->n_final + i, m->n, row);
        float r = row_max(row, m->n_mels);
        mx = r > mx ? r : mx;
    }
    const float floor_ = mx - 8.0f;
    for (int64_t t = first; t < first + count; t++) {
        const float *row = t < m->n_final ? m->logmel + (size_t)t * (size_t)m->n_mels
                                          : m->tail + (size_t)(t - m->n_final) * (size_t)m->n_mels;
        for (int b = 0; b < m->n_mels; b++) {
            float v = row[b] > floor_ ? row[b] : floor_;
            out[(size_t)b * (size_t)stride + (size_t)(t - first)] = (v + 4.0f) / 4.0f;
        }
    }
    return RILL_OK;
}
