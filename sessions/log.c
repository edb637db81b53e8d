/*
 * log.c - the per-session ingest log: an append-only file of the session's raw input, one
 * record per input call, written before the call is applied; and reading it back in order.
 *
 * Layout (little-endian; docs/architecture.md, "Sessions: durability"):
 *   header, LOG_HDR bytes: "RILLLOG\0", u32 version (1), u32 header bytes (128), u64 uid,
 *     u64 first_seq, the model fingerprint (64 bytes), u32 sink_slots, u32 window_slots,
 *     u32 evict_pages, 12 zero bytes, u32 CRC-32C of the 124 bytes before it;
 *   records: u32 CRC-32C of everything after it, u32 payload length, u32 type, u32 zero,
 *     u64 seq, payload. Sequence numbers are consecutive from first_seq. The types and their
 *     payloads are record.c's (session_internal.h lists them); this file moves bytes and does
 *     not know what a record means, so it never calls back into the session: replay is
 *     record.c reading records through rill__log_reader_next() and applying them.
 *
 * Design. A record is written with one writev() at the end of the file (O_APPEND) before the
 * call is applied, so that a crash in the middle of the apply still finds the input; a call
 * that then fails cuts its record off again (ftruncate), so the log holds exactly the calls
 * that returned RILL_OK and replay never meets a call that failed. Writing after applying was
 * rejected: a failed write would leave the session ahead of its log with no way back (window
 * eviction cannot be undone). Under FSYNC_ALWAYS the record is fdatasync'ed before the apply.
 * After a failed fsync the log is marked unusable rather than retried: the kernel may have
 * dropped the dirty pages, and a second fsync would report success for data that is gone.
 *
 * Torn tails. A crash can leave the last record short (the file ends inside it), or whole in
 * length but with bytes that never reached the disk (zeros: a bad CRC). Either is dropped with a
 * warning when the record is the last thing in the file (or only zeros follow it: file systems
 * may expose a zero-filled extent after a crash); the same damage before the tail is corruption
 * (RILL_ECORRUPT with the byte offset), because acknowledged records would follow it.
 *
 * Version. Still 1: adding record type 5 (replace) changed no byte of the layout, and a reader
 * already refuses a type it does not know (RILL_EUNSUPPORTED with the offset) rather than
 * guessing, so a log without replace records is readable by builds before and after it, and an
 * older build refuses a log with one cleanly.
 *
 * Memory: a log is one small struct and its path; writing allocates nothing (header on the
 * stack, payload straight from the caller). The reader grows one payload buffer to the largest
 * record.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/uio.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "session_internal.h"

#define LOG_MAGIC   "RILLLOG"
#define LOG_VERSION 1u
#define LOG_HDR     128
#define REC_HDR     24

struct rill__log {
    int fd;
    char *path;
    rill_session_fsync_t policy;
    int64_t size;       /* end of the last record */
    int64_t pending_at; /* start of the record of the call in progress, or -1 */
    uint64_t last_sync_ns;
    bool dirty;  /* written since the last fsync */
    bool broken; /* an I/O error left the file in doubt: refuse further records */
};

static bool policy_ok(rill_session_fsync_t policy) {
    return policy == RILL_SESSION_FSYNC_EVERYSEC || policy == RILL_SESSION_FSYNC_ALWAYS ||
           policy == RILL_SESSION_FSYNC_NEVER;
}

/* ---- writing ------------------------------------------------------------------------------ */

static void put_header(unsigned char *h, const rill_session_pool_t *p, const rill_session_t *s,
                       uint64_t first_seq) {
    memset(h, 0, LOG_HDR);
    memcpy(h, LOG_MAGIC, 8);
    rill__put_u32(h + 8, LOG_VERSION);
    rill__put_u32(h + 12, LOG_HDR);
    rill__put_u64(h + 16, s->uid);
    rill__put_u64(h + 24, first_seq);
    rill__fingerprint_put(p, h + 32);
    rill__put_u32(h + 96, (uint32_t)s->sink_slots);
    rill__put_u32(h + 100, (uint32_t)s->window_slots);
    rill__put_u32(h + 104, (uint32_t)s->evict_pages);
    rill__put_u32(h + 124, rill__crc32c(0, h, 124));
}

/* Creates a log file for s whose first record will be first_seq: at `path`, which must not
 * exist, or (replace) at a temporary name then renamed over `path`. Locks it, writes the
 * header, fsyncs it and the directory. On success *out is the open log (size = the header). On
 * error no new file is left. */
static rill_err_t create_log(rill_session_t *s, const char *path, rill_session_fsync_t policy,
                             uint64_t first_seq, bool replace, rill__log_t **out, char *msg,
                             size_t msglen) {
    rill_err_t err = RILL_OK;
    char *tmp = NULL;
    int fd = -1;
    rill__log_t *lg = rill_calloc(RILL_MEM_SESSIONS, 1, sizeof *lg);
    if (lg != NULL) {
        lg->path = rill_strdup(RILL_MEM_SESSIONS, path);
    }
    size_t tlen = strlen(path) + 32;
    if (replace) {
        tmp = rill_malloc(RILL_MEM_SESSIONS, tlen);
    }
    if (lg == NULL || lg->path == NULL || (replace && tmp == NULL)) {
        snprintf(msg, msglen, "out of memory");
        err = RILL_ENOMEM;
        goto cleanup;
    }
    const char *file = path;
    if (replace) {
        snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
        file = tmp;
        unlink(tmp); /* a leftover of a crashed process with the same pid */
    }
    fd = rill__io_open(file, O_WRONLY | O_CREAT | O_EXCL | O_APPEND, 0644);
    if (fd < 0) {
        err = rill__io_err(errno);
        snprintf(msg, msglen, "cannot create the log %s: %s", file, strerror(errno));
        goto cleanup;
    }
    unsigned char h[LOG_HDR];
    put_header(h, s->pool, s, first_seq);
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || rill__io_write(fd, h, sizeof h) != 0 ||
        rill__io_fsync(fd, false) != 0 || (replace && rill__io_rename(tmp, path) != 0) ||
        rill__io_fsync_dir(path) != 0) {
        err = rill__io_err(errno);
        snprintf(msg, msglen, "cannot create the log %s: %s", path, strerror(errno));
        goto cleanup;
    }
    lg->fd = fd;
    lg->policy = policy;
    lg->size = LOG_HDR;
    lg->pending_at = -1;
    lg->last_sync_ns = rill_now_ns();
    rill_free(tmp);
    *out = lg;
    return RILL_OK;
cleanup:
    if (fd >= 0) {
        close(fd);
        /* After a failed rename the file is still at its temporary name; after a failed
         * directory fsync it is at path, and unlinking it there is what "nothing left" means. */
        unlink(replace ? tmp : path);
    }
    if (lg != NULL) {
        rill_free(lg->path);
    }
    rill_free(lg);
    rill_free(tmp);
    return err;
}

rill_err_t rill_session_open_log(rill_session_t *s, const char *path, rill_session_fsync_t policy) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (path == NULL || !policy_ok(policy)) {
        return rill__session_fail(s, RILL_EINVAL, "open_log: no path or an unknown policy");
    }
    rill__log_t *lg = NULL;
    char msg[sizeof s->err];
    rill_err_t err = create_log(s, path, policy, (uint64_t)s->seq + 1, false, &lg, msg, sizeof msg);
    if (err != RILL_OK) {
        return rill__session_fail(s, err, "%s", msg);
    }
    rill__log_close(s);
    s->log = lg;
    return RILL_OK;
}

/* Cuts the file back to `size` (the record of a call that failed, or a partial write). */
static void cut(rill__log_t *lg, int64_t size) {
    if (rill__io_ftruncate(lg->fd, size) != 0 ||
        (lg->policy == RILL_SESSION_FSYNC_ALWAYS && rill__io_fsync(lg->fd, true) != 0)) {
        RILL_LOGE("ingest log %s: cannot remove a record (%s); the log is unusable", lg->path,
                  strerror(errno));
        lg->broken = true;
    }
    lg->size = size;
}

static rill_err_t do_sync(rill__log_t *lg) {
    if (rill__io_fsync(lg->fd, true) != 0) {
        RILL_LOGE("ingest log %s: fsync failed (%s); the log is unusable", lg->path,
                  strerror(errno));
        lg->broken = true;
        return RILL_EIO;
    }
    lg->dirty = false;
    lg->last_sync_ns = rill_now_ns();
    return RILL_OK;
}

rill_err_t rill__log_write(rill_session_t *s, uint32_t type, const void *a, size_t na,
                           const void *b, size_t nb) {
    rill__log_t *lg = s->log;
    if (lg == NULL) {
        return RILL_OK;
    }
    if (lg->broken) {
        return rill__session_fail(s, RILL_EIO,
                                  "ingest log %s is unusable after an I/O error: close it or open "
                                  "a new one",
                                  lg->path);
    }
    size_t len = na + nb;
    if (na > RILL__LOG_MAX_PAYLOAD || nb > RILL__LOG_MAX_PAYLOAD || len > RILL__LOG_MAX_PAYLOAD) {
        return rill__session_fail(s, RILL_ERANGE, "input of %zu bytes exceeds a log record (%u)",
                                  len, RILL__LOG_MAX_PAYLOAD);
    }
    unsigned char h[REC_HDR];
    rill__put_u32(h + 4, (uint32_t)len);
    rill__put_u32(h + 8, type);
    rill__put_u32(h + 12, 0);
    rill__put_u64(h + 16, (uint64_t)s->seq + 1);
    uint32_t crc = rill__crc32c(0, h + 4, REC_HDR - 4);
    crc = rill__crc32c(crc, a, na);
    rill__put_u32(h, rill__crc32c(crc, b, nb));
    struct iovec iov[3] = { { h, REC_HDR } };
    int n_iov = 1;
    if (na > 0) {
        iov[n_iov++] = (struct iovec){ (void *)a, na };
    }
    if (nb > 0) {
        iov[n_iov++] = (struct iovec){ (void *)b, nb };
    }
    int64_t at = lg->size;
    if (rill__io_writev(lg->fd, iov, n_iov) != 0) {
        int e = errno;
        cut(lg, at); /* a partial write must not stay as a torn record before later ones */
        return rill__session_fail(s, RILL_EIO, "writing ingest log %s: %s", lg->path, strerror(e));
    }
    lg->size = at + REC_HDR + (int64_t)len;
    lg->pending_at = at;
    lg->dirty = true;
    if (lg->policy == RILL_SESSION_FSYNC_ALWAYS && do_sync(lg) != RILL_OK) {
        cut(lg, at);
        lg->pending_at = -1;
        return rill__session_fail(s, RILL_EIO, "fsync of ingest log %s failed", lg->path);
    }
    return RILL_OK;
}

rill_err_t rill__log_settle(rill_session_t *s, rill_err_t err) {
    rill__log_t *lg = s->log;
    if (err == RILL_OK) {
        s->seq++;
        if (lg != NULL) {
            lg->pending_at = -1;
            if (lg->policy == RILL_SESSION_FSYNC_EVERYSEC && lg->dirty &&
                rill_now_ns() - lg->last_sync_ns >= 1000000000ull) {
                /* The call itself succeeded; a failed fsync makes the next one fail. */
                (void)do_sync(lg);
            }
        }
        return RILL_OK;
    }
    if (lg != NULL && lg->pending_at >= 0) {
        cut(lg, lg->pending_at);
        lg->pending_at = -1;
    }
    return err;
}

rill_err_t rill__log_close(rill_session_t *s) {
    rill__log_t *lg = s->log;
    if (lg == NULL) {
        return RILL_OK;
    }
    rill_err_t err = RILL_OK;
    if (lg->policy != RILL_SESSION_FSYNC_NEVER && lg->dirty && !lg->broken) {
        err = do_sync(lg);
    }
    close(lg->fd);
    rill_free(lg->path);
    rill_free(lg);
    s->log = NULL;
    return err;
}

rill_err_t rill_session_sync_log(rill_session_t *s) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    rill__log_t *lg = s->log;
    if (lg == NULL) {
        return RILL_OK;
    }
    if (lg->broken || do_sync(lg) != RILL_OK) {
        return rill__session_fail(s, RILL_EIO, "ingest log %s: fsync failed or log unusable",
                                  lg->path);
    }
    return RILL_OK;
}

rill_err_t rill_session_close_log(rill_session_t *s) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    char path[200] = "";
    if (s->log != NULL) {
        snprintf(path, sizeof path, "%s", s->log->path);
    }
    rill_err_t err = rill__log_close(s);
    if (err != RILL_OK) {
        return rill__session_fail(s, err, "ingest log %s: fsync at close failed", path);
    }
    return RILL_OK;
}

/* ---- reading -------------------------------------------------------------------------------- */

static rill_err_t read_header(const rill_session_pool_t *p, int fd, int64_t size, const char *path,
                              rill__log_header_t *hd, char *msg, size_t msglen) {
    unsigned char h[LOG_HDR];
    size_t have = size < LOG_HDR ? (size_t)size : LOG_HDR;
    if (have > 0 && rill__io_pread(fd, h, have, 0) != 0) {
        snprintf(msg, msglen, "log %s: read error: %s", path, strerror(errno));
        return RILL_EIO;
    }
    if (have < 8 || memcmp(h, LOG_MAGIC, 8) != 0) {
        snprintf(msg, msglen, "%s is not a rill ingest log (bad magic)", path);
        return RILL_EFORMAT;
    }
    if (have >= 12 && rill__get_u32(h + 8) != LOG_VERSION) {
        snprintf(msg, msglen, "log %s: format version %u (this build reads %u)", path,
                 rill__get_u32(h + 8), LOG_VERSION);
        return RILL_EUNSUPPORTED;
    }
    if (have < LOG_HDR) {
        snprintf(msg, msglen, "log %s: truncated header (%zu of %d bytes)", path, have, LOG_HDR);
        return RILL_EFORMAT;
    }
    if (rill__get_u32(h + 12) != LOG_HDR) {
        snprintf(msg, msglen, "log %s: header size %u, expected %d", path, rill__get_u32(h + 12),
                 LOG_HDR);
        return RILL_EFORMAT;
    }
    if (rill__get_u32(h + 124) != rill__crc32c(0, h, 124)) {
        snprintf(msg, msglen, "log %s: header checksum mismatch (offset 124)", path);
        return RILL_ECORRUPT;
    }
    static const unsigned char zero[16];
    if (memcmp(h + 108, zero, sizeof zero) != 0) {
        snprintf(msg, msglen, "log %s: reserved header bytes are not zero", path);
        return RILL_EFORMAT;
    }
    char why[200];
    if (!rill__fingerprint_check(p, h + 32, why, sizeof why)) {
        snprintf(msg, msglen, "log %s: %s", path, why);
        return RILL_EUNSUPPORTED;
    }
    hd->uid = rill__get_u64(h + 16);
    hd->first_seq = rill__get_u64(h + 24);
    uint32_t sink = rill__get_u32(h + 96), window = rill__get_u32(h + 100),
             evict = rill__get_u32(h + 104);
    int32_t P = p->P;
    bool geometry_ok = sink % (uint32_t)P == 0 && window % (uint32_t)P == 0 &&
                       sink <= (uint32_t)INT32_MAX && window <= (uint32_t)INT32_MAX &&
                       (window == 0 ? evict <= (uint32_t)INT32_MAX /* unused */
                                    : evict >= 1 && evict <= window / (uint32_t)P);
    if (!geometry_ok || hd->first_seq < 1 || hd->first_seq > (uint64_t)INT64_MAX / 2) {
        snprintf(msg, msglen, "log %s: inconsistent header (sinks %u, window %u, evict %u)", path,
                 sink, window, evict);
        return RILL_EFORMAT;
    }
    if ((window == 0 && sink > (uint32_t)p->n_ctx) ||
        (window > 0 && (uint64_t)sink + window > (uint64_t)(p->n_ctx / P * P))) {
        snprintf(msg, msglen, "log %s: sinks %u + window %u exceed the pool's context %d", path,
                 sink, window, p->n_ctx);
        return RILL_ERANGE;
    }
    hd->sink_slots = (int32_t)sink;
    hd->window_slots = (int32_t)window;
    hd->evict_pages = (int32_t)evict;
    return RILL_OK;
}

/* True when the file holds only zero bytes from off to its end. */
static bool zeros_to_end(int fd, int64_t off, int64_t size) {
    unsigned char buf[4096];
    while (off < size) {
        size_t n = size - off < (int64_t)sizeof buf ? (size_t)(size - off) : sizeof buf;
        if (rill__io_pread(fd, buf, n, off) != 0) {
            return false;
        }
        for (size_t i = 0; i < n; i++) {
            if (buf[i] != 0) {
                return false;
            }
        }
        off += (int64_t)n;
    }
    return true;
}

struct rill__log_reader {
    int fd;
    char *path;
    int64_t size;    /* of the file */
    int64_t off;     /* of the next record */
    int64_t last;    /* sequence number of the last record read */
    int64_t torn_at; /* a torn tail starts here, or -1 */
    unsigned char *buf;
    size_t cap;
};

void rill__log_reader_close(rill__log_reader_t **rdp) {
    if (rdp == NULL || *rdp == NULL) {
        return;
    }
    rill__log_reader_t *rd = *rdp;
    if (rd->fd >= 0) {
        close(rd->fd);
    }
    rill_free(rd->path);
    rill_free(rd->buf);
    rill_free(rd);
    *rdp = NULL;
}

rill_err_t rill__log_reader_open(const rill_session_pool_t *p, const char *path,
                                 rill__log_header_t *hd, rill__log_reader_t **out, char *msg,
                                 size_t msglen) {
    rill_err_t err = RILL_OK;
    *out = NULL;
    rill__log_reader_t *rd = rill_calloc(RILL_MEM_SESSIONS, 1, sizeof *rd);
    if (rd == NULL || (rd->path = rill_strdup(RILL_MEM_SESSIONS, path)) == NULL) {
        rill_free(rd);
        snprintf(msg, msglen, "out of memory");
        return RILL_ENOMEM;
    }
    rd->fd = rill__io_open(path, O_RDWR | O_APPEND, 0);
    if (rd->fd < 0) {
        err = rill__io_err(errno);
        snprintf(msg, msglen, "cannot open the log %s: %s", path, strerror(errno));
        goto cleanup;
    }
    if (flock(rd->fd, LOCK_EX | LOCK_NB) != 0) {
        err = errno == EWOULDBLOCK ? RILL_EBUSY : RILL_EIO;
        snprintf(msg, msglen, "log %s is in use by another session or process", path);
        goto cleanup;
    }
    rd->size = rill__io_file_size(rd->fd);
    if (rd->size < 0) {
        err = RILL_EIO;
        snprintf(msg, msglen, "log %s: %s", path, strerror(errno));
        goto cleanup;
    }
    RILL_TRY(read_header(p, rd->fd, rd->size, path, hd, msg, msglen));
    rd->off = LOG_HDR;
    rd->last = (int64_t)hd->first_seq - 1;
    rd->torn_at = -1;
    *out = rd;
    return RILL_OK;
cleanup:
    rill__log_reader_close(&rd);
    return err;
}

int64_t rill__log_reader_last(const rill__log_reader_t *rd) {
    return rd->last;
}

rill_err_t rill__log_reader_next(rill__log_reader_t *rd, rill__log_record_t *rec, char *msg,
                                 size_t msglen) {
    memset(rec, 0, sizeof *rec);
    const char *path = rd->path;
    int64_t off = rd->off, size = rd->size;
    if (off >= size || rd->torn_at >= 0) {
        return RILL_OK;
    }
    unsigned char h[REC_HDR];
    if (size - off < REC_HDR) {
        rd->torn_at = off;
        return RILL_OK;
    }
    if (rill__io_pread(rd->fd, h, REC_HDR, off) != 0) {
        snprintf(msg, msglen, "log %s: read error at offset %lld", path, (long long)off);
        return RILL_EIO;
    }
    uint32_t len = rill__get_u32(h + 4);
    uint64_t seq = rill__get_u64(h + 16);
    int64_t end = off + REC_HDR + (int64_t)len;
    if (end > size) {
        rd->torn_at = off; /* the file ends inside this record */
        return RILL_OK;
    }
    if (len > rd->cap) {
        if (len > RILL__LOG_MAX_PAYLOAD) {
            snprintf(msg, msglen, "log %s: record at offset %lld has length %u", path,
                     (long long)off, len);
            return RILL_ECORRUPT;
        }
        unsigned char *grown = rill_realloc(RILL_MEM_SESSIONS, rd->buf, len);
        if (grown == NULL) {
            snprintf(msg, msglen, "out of memory (log record of %u bytes)", len);
            return RILL_ENOMEM;
        }
        rd->buf = grown;
        rd->cap = len;
    }
    if (len > 0 && rill__io_pread(rd->fd, rd->buf, len, off + REC_HDR) != 0) {
        snprintf(msg, msglen, "log %s: read error at offset %lld", path, (long long)off);
        return RILL_EIO;
    }
    uint32_t crc = rill__crc32c(rill__crc32c(0, h + 4, REC_HDR - 4), rd->buf, len);
    if (crc != rill__get_u32(h)) {
        if (end == size || zeros_to_end(rd->fd, off, size)) {
            rd->torn_at = off;
            return RILL_OK;
        }
        snprintf(msg, msglen,
                 "log %s: record at offset %lld: checksum mismatch (%lld bytes follow it)", path,
                 (long long)off, (long long)(size - end));
        return RILL_ECORRUPT;
    }
    if (seq != (uint64_t)rd->last + 1) {
        snprintf(msg, msglen,
                 "log %s: record at offset %lld has sequence number %llu, "
                 "expected %lld",
                 path, (long long)off, (unsigned long long)seq, (long long)rd->last + 1);
        return RILL_ECORRUPT;
    }
    rec->type = rill__get_u32(h + 8);
    rec->reserved = rill__get_u32(h + 12);
    rec->seq = seq;
    rec->payload = rd->buf;
    rec->len = len;
    rec->off = off;
    rd->last = (int64_t)seq;
    rd->off = end;
    return RILL_OK;
}

rill_err_t rill__log_reader_attach(rill__log_reader_t **rdp, rill_session_t *s,
                                   rill_session_fsync_t policy, char *msg, size_t msglen) {
    rill__log_reader_t *rd = *rdp;
    rill__log_t *lg = NULL;
    const char *path = rd->path;
    if (rd->last < s->seq) {
        /* The log lost records that the snapshot holds: continuing it would leave a gap. */
        RILL_LOGW("log %s ends at record %lld but the snapshot covers %lld: starting it afresh",
                  path, (long long)rd->last, (long long)s->seq);
        rill_err_t err = create_log(s, path, policy, (uint64_t)s->seq + 1, true, &lg, msg, msglen);
        if (err != RILL_OK) {
            return err;
        }
    } else {
        lg = rill_calloc(RILL_MEM_SESSIONS, 1, sizeof *lg);
        if (lg != NULL) {
            lg->path = rill_strdup(RILL_MEM_SESSIONS, path);
        }
        if (lg == NULL || lg->path == NULL) {
            if (lg != NULL) {
                rill_free(lg);
            }
            snprintf(msg, msglen, "out of memory");
            return RILL_ENOMEM;
        }
        if (rd->torn_at >= 0) {
            if (rill__io_ftruncate(rd->fd, rd->torn_at) != 0 || rill__io_fsync(rd->fd, true) != 0) {
                snprintf(msg, msglen, "log %s: cannot cut the torn record: %s", path,
                         strerror(errno));
                rill_free(lg->path);
                rill_free(lg);
                return RILL_EIO;
            }
            RILL_LOGW("log %s: torn last record at offset %lld (%lld bytes) dropped", path,
                      (long long)rd->torn_at, (long long)(rd->size - rd->torn_at));
        }
        lg->fd = rd->fd;
        lg->policy = policy;
        lg->size = rd->torn_at >= 0 ? rd->torn_at : rd->size;
        lg->pending_at = -1;
        lg->last_sync_ns = rill_now_ns();
        rd->fd = -1; /* the log's now */
    }
    s->log = lg;
    rill__log_reader_close(rdp);
    return RILL_OK;
}
