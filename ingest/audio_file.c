/*
 * audio_file.c - audio files read in chunks as 16 kHz mono (rill_audio.h, files).
 *
 * Two decoders behind one pull interface: libsndfile (WAV, FLAC and its other formats) and
 * libopusfile (Ogg Opus). Which one is decided by the content: an Ogg page whose first packet
 * is an OpusHead (the bytes "OggS" at 0 and "OpusHead" in the first page) is Ogg Opus and its
 * errors are libopusfile's; anything else goes to libsndfile. Rejected: the file name's
 * extension (wrong as often as not for recordings that passed through other tools) and letting
 * libsndfile read Ogg Opus too (1.2 can, but libopusfile is the reference decoder, handles
 * chained streams and reports holes in the data, which is what "damaged" means here).
 *
 * Reading: each refill decodes one block of RILL__AUDIO_BLOCK frames into the frame buffer,
 * resamples it into the pending buffer, and read() copies from there, so one call can hand out
 * exactly n samples whatever the block and rate. The pending buffer holds the resampler's most
 * output for one block (2 samples per input frame at the lowest rate, 8 kHz) plus what libsoxr
 * may hold back and release with it (at most 1852 samples, at 8 kHz; the tests measure it).
 *
 * Damage: a decoder error, or an end of data before the length the header gave (FLAC's
 * STREAMINFO), turns the file failed: the error is kept and returned by every later read, after
 * the samples decoded before it were handed out. Ogg is checked at open instead: libopusfile
 * skips a page whose checksum fails and ends quietly at a cut page (its total length is then
 * computed from what is left), so nothing it returns tells a damaged file from a short one. So
 * open reads the file once through libogg's page sync and refuses any damaged page, bytes
 * between pages, a gap in a logical stream's page numbers, or a file that ends inside a page.
 * That costs one sequential read of the file (an hour of speech at 32 kbit/s is 14 MB); rejected:
 * checking as libopusfile reads (it seeks: it bisects at open to find the length and the links,
 * so the bytes it reads are not the stream in order).
 */
#include <errno.h>
#include <ogg/ogg.h>
#include <opus/opusfile.h>
#include <sndfile.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "audio_internal.h"
#include "rill_alloc.h"

#define PEND_CAP ((size_t)RILL__AUDIO_BLOCK * 2 + 8192)

struct rill_audio_file {
    SNDFILE *sf;
    OggOpusFile *of;
    rill_audio_file_info_t info;
    rill_audio_resampler_t *rs;
    float *frames; /* (RILL__AUDIO_BLOCK, channels) */
    float *pend;   /* PEND_CAP resampled samples */
    size_t pend_pos, pend_len;
    int64_t frames_read; /* decoded so far, at the file's rate */
    bool eof;
    rill_err_t failed;
    char fail_msg[256];
    rill_audio_stats_t stats;
};

static const char *op_message(int e) {
    switch (e) {
    case OP_HOLE:
        return "a hole in the data (a damaged or missing page)";
    case OP_EREAD:
        return "read error";
    case OP_EFAULT:
        return "internal failure (memory)";
    case OP_EIMPL:
        return "uses a feature libopusfile does not implement";
    case OP_ENOTFORMAT:
        return "not an Ogg Opus stream";
    case OP_EBADHEADER:
        return "damaged Opus header";
    case OP_EVERSION:
        return "unknown Opus header version";
    case OP_EBADPACKET:
        return "damaged Opus packet";
    case OP_EBADLINK:
        return "damaged link in the stream";
    case OP_EBADTIMESTAMP:
        return "invalid granule positions (timestamps)";
    default:
        return "libopusfile error";
    }
}

static const char *sf_format_name(int format) {
    switch (format & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
        return "wav";
    case SF_FORMAT_RF64:
        return "rf64";
    case SF_FORMAT_W64:
        return "w64";
    case SF_FORMAT_FLAC:
        return "flac";
    case SF_FORMAT_AIFF:
        return "aiff";
    case SF_FORMAT_AU:
        return "au";
    case SF_FORMAT_OGG:
        return "ogg";
    case SF_FORMAT_CAF:
        return "caf";
    default:
        return "sndfile";
    }
}

/* True when the file starts with an Ogg page carrying an OpusHead. The file is opened again by
 * the decoder (and read twice for Ogg), so it must be a regular file, not a pipe or a device. */
static rill_err_t sniff_opus(const char *path, bool *is_opus) {
    struct stat st;
    if (stat(path, &st) != 0) {
        return rill__error(RILL_EIO, "%s: cannot open (%s)", path, strerror(errno));
    }
    if (!S_ISREG(st.st_mode)) {
        return rill__error(RILL_EUNSUPPORTED, "%s: not a regular file", path);
    }
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        return rill__error(RILL_EIO, "%s: cannot open", path);
    }
    unsigned char head[300];
    size_t n = fread(head, 1, sizeof head, fp);
    bool read_error = ferror(fp) != 0;
    fclose(fp);
    if (read_error) {
        return rill__error(RILL_EIO, "%s: read error", path);
    }
    *is_opus = false;
    if (n >= 36 && memcmp(head, "OggS", 4) == 0) {
        for (size_t i = 27; i + 8 <= n; i++) {
            if (memcmp(head + i, "OpusHead", 8) == 0) {
                *is_opus = true;
                break;
            }
        }
    }
    return RILL_OK;
}

static rill_err_t open_sndfile(rill_audio_file_t *f, const char *path) {
    SF_INFO si;
    memset(&si, 0, sizeof si);
    f->sf = sf_open(path, SFM_READ, &si);
    if (f->sf == NULL) {
        return rill__error(RILL_EFORMAT, "%s: %s", path, sf_strerror(NULL));
    }
    rill_err_t err = rill__audio_check_format(path, si.samplerate, si.channels);
    if (err != RILL_OK) {
        return err;
    }
    f->info.rate = si.samplerate;
    f->info.channels = si.channels;
    f->info.frames = si.frames >= 0 && si.frames < ((int64_t)1 << 46) ? si.frames : -1;
    f->info.format = sf_format_name(si.format);
    return RILL_OK;
}

/* Checks the Ogg framing of the whole file (design note): every page found with a valid
 * checksum, no bytes between pages, page numbers of each logical stream without gaps, the file
 * ending at a page's end. */
static rill_err_t check_ogg(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        return rill__error(RILL_EIO, "%s: cannot open", path);
    }
    enum { STREAMS = 8 };
    struct {
        int serial;
        long pageno;
    } seen[STREAMS];
    int n_seen = 0;
    ogg_sync_state oy;
    ogg_sync_init(&oy);
    long long paged = 0, total = 0;
    rill_err_t err = RILL_OK;
    for (bool more = true; more && err == RILL_OK;) {
        char *buf = ogg_sync_buffer(&oy, 65536);
        if (buf == NULL) {
            err = rill__error(RILL_ENOMEM, "%s: no memory to check the Ogg pages", path);
            break;
        }
        size_t n = fread(buf, 1, 65536, fp);
        ogg_sync_wrote(&oy, (long)n);
        total += (long long)n;
        more = n > 0;
        if (!more && ferror(fp)) {
            err = rill__error(RILL_EIO, "%s: read error", path);
        }
        ogg_page og;
        long r;
        while (err == RILL_OK && (r = ogg_sync_pageseek(&oy, &og)) != 0) {
            if (r < 0) {
                err = rill__error(RILL_EFORMAT,
                                  "%s: damaged Ogg data at byte %lld (a page's checksum or "
                                  "framing is wrong)",
                                  path, paged);
                break;
            }
            int serial = ogg_page_serialno(&og);
            long pageno = ogg_page_pageno(&og);
            int k = 0;
            while (k < n_seen && seen[k].serial != serial) {
                k++;
            }
            long want = k < n_seen ? seen[k].pageno + 1 : 0;
            if (pageno != want || (k == n_seen && n_seen == STREAMS)) {
                err = rill__error(RILL_EFORMAT,
                                  "%s: Ogg page %ld of stream %08x at byte %lld where page %ld "
                                  "should be (pages missing)",
                                  path, pageno, (unsigned)serial, paged, want);
                break;
            }
            if (k == n_seen) {
                seen[n_seen++].serial = serial;
            }
            seen[k].pageno = pageno;
            paged += r;
        }
    }
    if (err == RILL_OK && paged < total) {
        err = rill__error(RILL_EFORMAT,
                          "%s: the Ogg data ends inside a page at byte %lld of %lld (truncated)",
                          path, paged, total);
    }
    ogg_sync_clear(&oy);
    fclose(fp);
    return err;
}

static rill_err_t open_opus(rill_audio_file_t *f, const char *path) {
    rill_err_t err = check_ogg(path);
    if (err != RILL_OK) {
        return err;
    }
    int e = 0;
    f->of = op_open_file(path, &e);
    if (f->of == NULL) {
        return rill__error(RILL_EFORMAT, "%s: %s", path, op_message(e));
    }
    ogg_int64_t total = op_pcm_total(f->of, -1);
    f->info.rate = 48000;
    f->info.channels = op_channel_count(f->of, -1) == 1 ? 1 : 2;
    f->info.frames = total >= 0 ? (int64_t)total : -1;
    f->info.format = "ogg-opus";
    return RILL_OK;
}

static void release(rill_audio_file_t *f) {
    if (f->sf != NULL) {
        sf_close(f->sf);
    }
    if (f->of != NULL) {
        op_free(f->of);
    }
    rill_audio_resampler_destroy(&f->rs);
    rill_free(f->frames);
    rill_free(f->pend);
    rill_free(f);
}

rill_err_t rill_audio_file_open(const char *path, rill_audio_file_t **out) {
    if (path == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "audio file open: NULL argument");
    }
    bool is_opus = false;
    rill_err_t err = sniff_opus(path, &is_opus);
    if (err != RILL_OK) {
        return err;
    }
    rill_audio_file_t *f = rill_calloc(RILL_MEM_INGEST, 1, sizeof *f);
    if (f == NULL) {
        return rill__error(RILL_ENOMEM, "audio file open: no memory for the handle");
    }
    err = is_opus ? open_opus(f, path) : open_sndfile(f, path);
    if (err == RILL_OK) {
        f->frames = rill_malloc(RILL_MEM_INGEST, (size_t)RILL__AUDIO_BLOCK *
                                                     (size_t)f->info.channels * sizeof(float));
        f->pend = rill_malloc(RILL_MEM_INGEST, PEND_CAP * sizeof(float));
        err = f->frames == NULL || f->pend == NULL
                  ? rill__error(RILL_ENOMEM, "audio file open: no memory for the buffers")
                  : rill_audio_resampler_new(f->info.rate, f->info.channels, &f->rs);
    }
    if (err != RILL_OK) {
        release(f);
        return err;
    }
    if (f->info.frames >= 0) {
        f->info.samples = (f->info.frames * RILL_AUDIO_RATE + f->info.rate / 2) / f->info.rate;
        f->info.duration_s = (double)f->info.frames / f->info.rate;
    } else {
        f->info.samples = -1;
        f->info.duration_s = -1.0;
    }
    *out = f;
    return RILL_OK;
}

void rill_audio_file_close(rill_audio_file_t **fp) {
    if (fp != NULL && *fp != NULL) {
        release(*fp);
        *fp = NULL;
    }
}

rill_audio_file_info_t rill_audio_file_info(const rill_audio_file_t *f) {
    rill_audio_file_info_t z = { 0 };
    return f != NULL ? f->info : z;
}

static rill_err_t fail(rill_audio_file_t *f, rill_err_t err, const char *fmt, long long a,
                       long long b) {
    snprintf(f->fail_msg, sizeof f->fail_msg, fmt, a, b);
    f->failed = err;
    return rill__error_str(err, f->fail_msg);
}

/* Decodes up to one block; returns frames (0: end of data) or a failure. */
static int64_t decode_block(rill_audio_file_t *f) {
    if (f->sf != NULL) {
        sf_count_t got = sf_readf_float(f->sf, f->frames, RILL__AUDIO_BLOCK);
        if (got <= 0 && sf_error(f->sf) != SF_ERR_NO_ERROR) {
            return fail(f, RILL_EFORMAT, "damaged data after frame %lld (%lld frames declared)",
                        (long long)f->frames_read, (long long)f->info.frames);
        }
        return got > 0 ? (int64_t)got : 0;
    }
    int got;
    if (f->info.channels == 1) {
        got = op_read_float(f->of, f->frames, RILL__AUDIO_BLOCK, NULL);
        /* A chained stream may change its channel count: later links mix to stereo. */
        if (got > 0 && op_channel_count(f->of, -1) != 1) {
            return fail(f, RILL_EFORMAT, "a link changes to %lld channels at frame %lld",
                        (long long)op_channel_count(f->of, -1), (long long)f->frames_read);
        }
    } else {
        got = op_read_float_stereo(f->of, f->frames, RILL__AUDIO_BLOCK * 2);
    }
    if (got < 0) {
        snprintf(f->fail_msg, sizeof f->fail_msg, "%s after frame %lld", op_message(got),
                 (long long)f->frames_read);
        f->failed = RILL_EFORMAT;
        return rill__error_str(RILL_EFORMAT, f->fail_msg);
    }
    return got;
}

/* Fills the pending buffer with the next block's samples (or the flush at the end). */
static rill_err_t refill(rill_audio_file_t *f) {
    int64_t got = decode_block(f);
    if (got < 0) {
        return (rill_err_t)got;
    }
    int64_t n;
    if (got == 0) {
        if (f->info.frames >= 0 && f->frames_read < f->info.frames) {
            return fail(f, RILL_EFORMAT, "data ends at frame %lld of %lld declared (truncated)",
                        (long long)f->frames_read, (long long)f->info.frames);
        }
        f->eof = true;
        n = rill_audio_resampler_flush(f->rs, f->pend, PEND_CAP);
    } else {
        f->frames_read += got;
        f->stats.frames_in += got;
        n = rill_audio_resampler_push(f->rs, f->frames, (size_t)got, f->pend, PEND_CAP);
    }
    if (n < 0) {
        f->failed = (rill_err_t)n;
        snprintf(f->fail_msg, sizeof f->fail_msg, "%s", rill_last_error((rill_err_t)n));
        return (rill_err_t)n;
    }
    f->pend_pos = 0;
    f->pend_len = (size_t)n;
    return RILL_OK;
}

int64_t rill_audio_file_read(rill_audio_file_t *f, float *out, size_t n) {
    if (f == NULL || (out == NULL && n > 0)) {
        return rill__error(RILL_EINVAL, "audio file read: NULL argument");
    }
    if (f->failed != RILL_OK && f->pend_pos == f->pend_len) {
        return rill__error_str(f->failed, f->fail_msg);
    }
    size_t got = 0;
    while (got < n) {
        if (f->pend_pos < f->pend_len) {
            got += rill__audio_take(out + got, n - got, f->pend, &f->pend_pos, f->pend_len);
            continue;
        }
        if (f->eof || f->failed != RILL_OK) {
            break;
        }
        rill_err_t err = refill(f);
        if (err != RILL_OK && got == 0) {
            return err;
        }
    }
    f->stats.samples_out += (int64_t)got;
    return (int64_t)got;
}

rill_audio_stats_t rill_audio_file_stats(const rill_audio_file_t *f) {
    rill_audio_stats_t z = { 0 };
    if (f == NULL) {
        return z;
    }
    rill_audio_stats_t s = f->stats;
    rill_audio_stats_t r = rill_audio_resampler_stats(f->rs);
    s.cleaned = r.cleaned;
    s.clipped = r.clipped;
    return s;
}
