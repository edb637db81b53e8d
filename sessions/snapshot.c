/*
 * snapshot.c - a session's state in one file (rill_session_snapshot) and its reconstruction in
 * a pool (rill_session_restore: the snapshot, then the log records after it, replayed by
 * record.c).
 *
 * Layout (little-endian; docs/architecture.md, "Sessions: durability"):
 *   header, SNAP_HDR bytes: "RILLSNAP", u32 version (2; 1 is read too), u32 header bytes (160),
 *     u64 file bytes, the model fingerprint (64 bytes), u64 uid, u64 seq, u64 n_evicted,
 *     u64 text_len, u64 page_bytes (one page of one layer), u32 sink_slots, u32 window_slots,
 *     u32 evict_pages, u32 n_resident, u32 n_pages, u32 flags (1: logits valid, 2: a text is in
 *     progress), u32 bytes of the replace window section (version 1: zero), u32 CRC-32C of the
 *     156 bytes before it;
 *   sections, each followed by the u32 CRC-32C of its bytes: the resident token ids (int32,
 *     n_resident), the held-back text (text_len bytes), the replace window (version 2 only:
 *     u64 n_evicted_sync, u64 hist_floor, u32 entries, u32 held bytes, per entry u64 seq,
 *     u64 start, u32 held offset, u32 held length, u32 flags (1: text in progress), u32 lost,
 *     then the held bytes), the logits (float, n_vocab, or nothing when not valid), then per
 *     page of the table: every layer's page (K then V, exactly as the KV pool stores it) one
 *     after the other, with one CRC per page;
 *   "RILLEND\0".
 *
 * Design. The header states the file's total size, so a truncated snapshot is refused before
 * anything is allocated or read (RILL_EFORMAT), whatever the cut point; checksums then catch
 * damaged bytes (RILL_ECORRUPT, with the offset). Everything a restore can refuse without
 * reading the sections (version, model, sizes, context, budget) is checked first, so the common
 * refusals touch neither the pool nor the heap. The file is written to path.tmp.PID, fsynced,
 * and renamed over path, so a crash leaves either the old snapshot or the new one, never a mix.
 * Pages travel whole (all P rows, also the unused rows of the last page): restore is one
 * read and one copy-in per layer and page, with no re-layout. Logits are stored rather than
 * recomputed because recomputing the last token alone takes another path through the kernels
 * than the prefill chunk that produced them, and the restored session must be bit-identical.
 *
 * The replace window travels with the snapshot (version 2) so that a replace logged after the
 * snapshot, reaching back before it, replays after a restore as it ran live; a version 1
 * snapshot restores with an empty window (replaces may then name only later versions).
 *
 * Rejected: a snapshot of the whole pool (forks would come back, but one session could not be
 * moved between pools or processes); compressing pages (F16 K/V compresses poorly and restore
 * speed is the point).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rill_alloc.h"
#include "rill_log.h"
#include "session_internal.h"

#define SNAP_MAGIC   "RILLSNAP"
#define SNAP_END     "RILLEND"
#define SNAP_VERSION 2u
#define SNAP_HDR     160
#define HIST_ENTRY   32
#define HIST_FIXED   24
#define HIST_LIMIT \
    (HIST_FIXED + HIST_ENTRY * RILL_SESSION_REPLACE_INPUTS + RILL_SESSION_REPLACE_HELD)

#define FLAG_LOGITS 1u
#define FLAG_TEXT   2u

/* Bytes of a snapshot with these contents (hist_bytes: the replace window section, version 2;
 * -1: none, version 1). */
static int64_t snap_bytes(int64_t n, int64_t text_len, int64_t hist_bytes, bool logits,
                          int64_t n_vocab, int64_t n_pages, int64_t n_layer, int64_t page_bytes) {
    return SNAP_HDR + (4 * n + 4) + (text_len + 4) + (hist_bytes >= 0 ? hist_bytes + 4 : 0) +
           ((logits ? 4 * n_vocab : 0) + 4) + n_pages * (n_layer * page_bytes + 4) + 8;
}

/* Where the held store's kept bytes begin (the oldest entry's), and the section's size. */
static uint64_t held_from(rill_session_t *s) {
    return s->n_hist > 0 ? rill__hist_at(s, 0)->held_at : s->held_end;
}

static int64_t hist_bytes(rill_session_t *s) {
    return HIST_FIXED + (int64_t)HIST_ENTRY * s->n_hist + (int64_t)(s->held_end - held_from(s));
}

/* ---- writing ------------------------------------------------------------------------------ */

typedef struct writer {
    int fd;
    uint32_t crc; /* of the section so far */
    bool failed;
} writer_t;

static void w_put(writer_t *w, const void *data, size_t n) {
    if (!w->failed && rill__io_write(w->fd, data, n) != 0) {
        w->failed = true;
    }
    w->crc = rill__crc32c(w->crc, data, n);
}

/* Ends a section: writes its CRC and starts the next. */
static void w_crc(writer_t *w) {
    unsigned char c[4];
    rill__put_u32(c, w->crc);
    if (!w->failed && rill__io_write(w->fd, c, 4) != 0) {
        w->failed = true;
    }
    w->crc = 0;
}

/* The replace window section (without its CRC). */
static void put_history(writer_t *w, rill_session_t *s) {
    unsigned char f[HIST_ENTRY];
    uint64_t from = held_from(s);
    rill__put_u64(f, (uint64_t)s->n_evicted_sync);
    rill__put_u64(f + 8, (uint64_t)s->hist_floor);
    rill__put_u32(f + 16, (uint32_t)s->n_hist);
    rill__put_u32(f + 20, (uint32_t)(s->held_end - from));
    w_put(w, f, HIST_FIXED);
    for (int32_t i = 0; i < s->n_hist; i++) {
        const rill__input_t *in = rill__hist_at(s, i);
        rill__put_u64(f, (uint64_t)in->seq);
        rill__put_u64(f + 8, (uint64_t)in->start);
        rill__put_u32(f + 16, (uint32_t)(in->held_at - from));
        rill__put_u32(f + 20, in->held_len);
        rill__put_u32(f + 24, in->started ? 1u : 0u);
        rill__put_u32(f + 28, in->lost);
        w_put(w, f, HIST_ENTRY);
    }
    if (s->held_end > from) {
        w_put(w, s->held + (from - s->held_base), (size_t)(s->held_end - from));
    }
}

/* durable: fsync the log first, the file, and its directory after the rename (see
 * rill_session_snapshot_volatile for the other way). */
static rill_err_t snapshot(rill_session_t *s, const char *path, bool durable) {
    if (s == NULL) {
        return RILL_EINVAL;
    }
    if (path == NULL) {
        return rill__session_fail(s, RILL_EINVAL, "snapshot: no path");
    }
    if (s->n_pend > 0) {
        return rill__session_fail(s, RILL_EAGAIN,
                                  "snapshot: %d queued token(s) not evaluated yet (drain first)",
                                  s->n_pend);
    }
    rill_session_pool_t *p = s->pool;
    if (durable && s->log != NULL) {
        rill_err_t err = rill_session_sync_log(s);
        if (err != RILL_OK) {
            return err;
        }
    }
    rill_err_t err = RILL_OK;
    int fd = -1;
    size_t tlen = strlen(path) + 32;
    size_t page_all = (size_t)(p->page_bytes * p->n_layer);
    char *tmp = rill_malloc(RILL_MEM_SESSIONS, tlen);
    unsigned char *buf = rill_malloc(RILL_MEM_SESSIONS, page_all);
    if (tmp == NULL || buf == NULL) {
        err = rill__session_fail(s, RILL_ENOMEM, "snapshot: out of memory");
        goto cleanup;
    }
    snprintf(tmp, tlen, "%s.tmp.%ld", path, (long)getpid());
    fd = rill__io_open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        err = rill__session_fail(s, rill__io_err(errno), "snapshot: cannot create %s: %s", tmp,
                                 strerror(errno));
        goto cleanup;
    }
    unsigned char h[SNAP_HDR];
    memset(h, 0, sizeof h);
    memcpy(h, SNAP_MAGIC, 8);
    rill__put_u32(h + 8, SNAP_VERSION);
    rill__put_u32(h + 12, SNAP_HDR);
    rill__put_u64(h + 16,
                  (uint64_t)snap_bytes(s->n, (int64_t)s->text_len, hist_bytes(s), s->logits_valid,
                                       p->n_vocab, s->n_pages, p->n_layer, p->page_bytes));
    rill__fingerprint_put(p, h + 24);
    rill__put_u64(h + 88, s->uid);
    rill__put_u64(h + 96, (uint64_t)s->seq);
    rill__put_u64(h + 104, (uint64_t)s->n_evicted);
    rill__put_u64(h + 112, (uint64_t)s->text_len);
    rill__put_u64(h + 120, (uint64_t)p->page_bytes);
    rill__put_u32(h + 128, (uint32_t)s->sink_slots);
    rill__put_u32(h + 132, (uint32_t)s->window_slots);
    rill__put_u32(h + 136, (uint32_t)s->evict_pages);
    rill__put_u32(h + 140, (uint32_t)s->n);
    rill__put_u32(h + 144, (uint32_t)s->n_pages);
    rill__put_u32(h + 148,
                  (s->logits_valid ? FLAG_LOGITS : 0u) | (s->text_started ? FLAG_TEXT : 0u));
    rill__put_u32(h + 152, (uint32_t)hist_bytes(s));
    rill__put_u32(h + 156, rill__crc32c(0, h, 156));
    writer_t w = { fd, 0, false };
    w_put(&w, h, sizeof h);
    w.crc = 0;
    w_put(&w, s->tokens, (size_t)s->n * sizeof *s->tokens);
    w_crc(&w);
    w_put(&w, s->text, s->text_len);
    w_crc(&w);
    put_history(&w, s);
    w_crc(&w);
    if (s->logits_valid) {
        w_put(&w, s->logits, (size_t)p->n_vocab * sizeof *s->logits);
    }
    w_crc(&w);
    for (int32_t j = 0; j < s->n_pages && !w.failed; j++) {
        for (int32_t l = 0; l < p->n_layer; l++) {
            const char *base = rill_kv_cache_pool(p->kv, l);
            err = rill_backend_copy_out(p->be, buf + (size_t)l * (size_t)p->page_bytes,
                                        base + (int64_t)s->pages[j] * p->page_bytes,
                                        (size_t)p->page_bytes);
            if (err != RILL_OK) {
                rill__session_fail(s, err, "snapshot: reading page %d: %s", s->pages[j],
                                   rill_last_error(err));
                goto cleanup;
            }
        }
        w_put(&w, buf, page_all);
        w_crc(&w);
    }
    w_put(&w, SNAP_END, 8);
    if (w.failed || (durable && rill__io_fsync(fd, false) != 0)) {
        err = rill__session_fail(s, rill__io_err(errno), "snapshot: writing %s: %s", tmp,
                                 strerror(errno));
        goto cleanup;
    }
    int rc = close(fd);
    fd = -1;
    if (rc != 0 || rill__io_rename(tmp, path) != 0) {
        err = rill__session_fail(s, rill__io_err(errno), "snapshot: cannot replace %s: %s", path,
                                 strerror(errno));
        goto cleanup;
    }
    /* The rename is done: the snapshot is at path. A failed directory fsync only means it might
     * not survive a power loss; report it, but there is no temporary file left to remove. */
    if (durable && rill__io_fsync_dir(path) != 0) {
        err = rill__session_fail(s, RILL_EIO, "snapshot: fsync of the directory of %s: %s", path,
                                 strerror(errno));
    }
    rill_free(tmp);
    rill_free(buf);
    return err;
cleanup:
    if (fd >= 0) {
        close(fd);
    }
    if (tmp != NULL) {
        unlink(tmp);
    }
    rill_free(tmp);
    rill_free(buf);
    return err;
}

rill_err_t rill_session_snapshot(rill_session_t *s, const char *path) {
    return snapshot(s, path, true);
}

rill_err_t rill_session_snapshot_volatile(rill_session_t *s, const char *path) {
    return snapshot(s, path, false);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* Reads section [off, off + n) into dst (when n > 0) and checks the CRC after it. */
static rill_err_t read_section(int fd, const char *path, const char *what, void *dst, size_t n,
                               int64_t *off, char *msg, size_t msglen) {
    unsigned char c[4];
    if ((n > 0 && rill__io_pread(fd, dst, n, *off) != 0) ||
        rill__io_pread(fd, c, 4, *off + (int64_t)n) != 0) {
        snprintf(msg, msglen, "snapshot %s: read error in the %s at offset %lld", path, what,
                 (long long)*off);
        return RILL_EIO;
    }
    if (rill__crc32c(0, dst, n) != rill__get_u32(c)) {
        snprintf(msg, msglen, "snapshot %s: checksum mismatch in the %s (offset %lld, %zu bytes)",
                 path, what, (long long)*off, n);
        return RILL_ECORRUPT;
    }
    *off += (int64_t)n + 4;
    return RILL_OK;
}

typedef struct snap_header {
    uint64_t uid, seq, n_evicted, text_len;
    int32_t sink_slots, window_slots, evict_pages, n, n_pages;
    uint32_t flags;
    int64_t hist_bytes; /* -1: version 1, no replace window section */
} snap_header_t;

/* Validates everything the header alone can tell. */
static rill_err_t check_header(const rill_session_pool_t *p, const unsigned char *h, size_t have,
                               int64_t size, const char *path, snap_header_t *hd, char *msg,
                               size_t msglen) {
    if (have < 8 || memcmp(h, SNAP_MAGIC, 8) != 0) {
        snprintf(msg, msglen, "%s is not a rill snapshot (bad magic)", path);
        return RILL_EFORMAT;
    }
    if (have >= 12 && rill__get_u32(h + 8) != SNAP_VERSION && rill__get_u32(h + 8) != 1) {
        snprintf(msg, msglen, "snapshot %s: format version %u (this build reads 1 and %u)", path,
                 rill__get_u32(h + 8), SNAP_VERSION);
        return RILL_EUNSUPPORTED;
    }
    if (have < SNAP_HDR) {
        snprintf(msg, msglen, "snapshot %s: truncated: %lld bytes, the header alone is %d", path,
                 (long long)size, SNAP_HDR);
        return RILL_EFORMAT;
    }
    if (rill__get_u32(h + 12) != SNAP_HDR) {
        snprintf(msg, msglen, "snapshot %s: header size %u, expected %d", path,
                 rill__get_u32(h + 12), SNAP_HDR);
        return RILL_EFORMAT;
    }
    if (rill__get_u32(h + 156) != rill__crc32c(0, h, 156)) {
        snprintf(msg, msglen, "snapshot %s: header checksum mismatch (offset 156)", path);
        return RILL_ECORRUPT;
    }
    int64_t want = (int64_t)rill__get_u64(h + 16);
    if (size != want) {
        snprintf(msg, msglen, "snapshot %s: %s: %lld bytes, the header says %lld", path,
                 size < want ? "truncated" : "trailing bytes", (long long)size, (long long)want);
        return RILL_EFORMAT;
    }
    char why[200];
    if (!rill__fingerprint_check(p, h + 24, why, sizeof why)) {
        snprintf(msg, msglen, "snapshot %s: %s", path, why);
        return RILL_EUNSUPPORTED;
    }
    hd->uid = rill__get_u64(h + 88);
    hd->seq = rill__get_u64(h + 96);
    hd->n_evicted = rill__get_u64(h + 104);
    hd->text_len = rill__get_u64(h + 112);
    uint64_t page_bytes = rill__get_u64(h + 120);
    uint32_t sink = rill__get_u32(h + 128), window = rill__get_u32(h + 132),
             evict = rill__get_u32(h + 136), n = rill__get_u32(h + 140),
             n_pages = rill__get_u32(h + 144);
    hd->flags = rill__get_u32(h + 148);
    uint32_t hist = rill__get_u32(h + 152);
    hd->hist_bytes = rill__get_u32(h + 8) == 1 ? -1 : (int64_t)hist;
    bool hist_ok = hd->hist_bytes < 0 ? hist == 0 : hist >= HIST_FIXED && hist <= HIST_LIMIT;
    uint32_t P = (uint32_t)p->P;
    bool ok = page_bytes == (uint64_t)p->page_bytes && sink % P == 0 && window % P == 0 &&
              sink <= (uint32_t)INT32_MAX && window <= (uint32_t)INT32_MAX &&
              n <= (uint32_t)INT32_MAX &&
              (window == 0 ? evict <= (uint32_t)INT32_MAX /* unused */
                           : evict >= 1 && evict <= window / P) &&
              n_pages == (n + P - 1) / P && (hd->flags & ~(FLAG_LOGITS | FLAG_TEXT)) == 0 &&
              hist_ok && hd->seq <= (uint64_t)INT64_MAX / 2 &&
              hd->n_evicted <= (uint64_t)INT64_MAX / 2 && hd->text_len <= (uint64_t)size &&
              (hd->flags & FLAG_LOGITS ? n > 0 : true) && (window > 0 ? n <= sink + window : true);
    if (ok) {
        ok = want == snap_bytes(n, (int64_t)hd->text_len, hd->hist_bytes,
                                (hd->flags & FLAG_LOGITS) != 0, p->n_vocab, n_pages, p->n_layer,
                                p->page_bytes);
    }
    if (!ok) {
        snprintf(msg, msglen,
                 "snapshot %s: inconsistent header (%u tokens, %u pages, sinks %u, "
                 "window %u)",
                 path, n, n_pages, sink, window);
        return RILL_EFORMAT;
    }
    int64_t ctx = (int64_t)p->n_ctx;
    if ((window == 0 && (n > ctx || sink > ctx)) ||
        (window > 0 && (int64_t)sink + window > ctx / P * P)) {
        snprintf(msg, msglen,
                 "snapshot %s: the session (%u tokens, sinks %u, window %u) does not "
                 "fit the pool's context of %d",
                 path, n, sink, window, p->n_ctx);
        return RILL_ERANGE;
    }
    if ((int32_t)n_pages > p->n_free) {
        snprintf(msg, msglen, "snapshot %s needs %u pages, the pool has %d free of %d", path,
                 n_pages, p->n_free, p->n_pages);
        return RILL_EFULL;
    }
    hd->sink_slots = (int32_t)sink;
    hd->window_slots = (int32_t)window;
    hd->evict_pages = (int32_t)evict;
    hd->n = (int32_t)n;
    hd->n_pages = (int32_t)n_pages;
    return RILL_OK;
}

/* Checks the replace window section sec[0, bytes) against the session s holds so far (tokens,
 * counters, seq) and installs it. Errors: RILL_EFORMAT (inconsistent), RILL_ENOMEM. */
static rill_err_t load_history(rill_session_t *s, const unsigned char *sec, size_t bytes,
                               const char *path, int64_t off, char *msg, size_t msglen) {
    uint64_t sync = rill__get_u64(sec), floor = rill__get_u64(sec + 8);
    uint32_t n = rill__get_u32(sec + 16), held = rill__get_u32(sec + 20);
    bool ok = n <= RILL_SESSION_REPLACE_INPUTS && held <= RILL_SESSION_REPLACE_HELD &&
              bytes == HIST_FIXED + (size_t)HIST_ENTRY * n + held &&
              sync >= (uint64_t)s->n_evicted && sync <= (uint64_t)INT64_MAX / 2 && floor >= 1 &&
              floor <= (uint64_t)s->seq + 1 && (n > 0 || floor == (uint64_t)s->seq + 1);
    uint64_t prev_seq = floor - 1, prev_at = 0, prev_end = 0;
    int64_t len = s->n_evicted + s->n;
    for (uint32_t i = 0; i < n && ok; i++) {
        const unsigned char *e = sec + HIST_FIXED + (size_t)HIST_ENTRY * i;
        uint64_t seq = rill__get_u64(e), start = rill__get_u64(e + 8);
        uint32_t at = rill__get_u32(e + 16), hl = rill__get_u32(e + 20),
                 flags = rill__get_u32(e + 24), lost = rill__get_u32(e + 28);
        ok = seq > prev_seq && seq <= (uint64_t)s->seq && (i + 1 < n || seq == (uint64_t)s->seq) &&
             start <= (uint64_t)INT64_MAX / 2 &&
             (start <= (uint64_t)len || lost != RILL__LOST_NONE) && at >= prev_at &&
             (uint64_t)at + hl <= held && (uint64_t)at + hl >= prev_end && flags <= 1 &&
             lost <= RILL__LOST_HELD;
        prev_seq = seq;
        prev_at = at;
        prev_end = (uint64_t)at + hl;
    }
    if (!ok) {
        snprintf(msg, msglen, "snapshot %s: inconsistent replace window (offset %lld)", path,
                 (long long)off);
        return RILL_EFORMAT;
    }
    if (held > 0) {
        s->held = rill_malloc(RILL_MEM_SESSIONS, held);
        if (s->held == NULL) {
            snprintf(msg, msglen, "out of memory (replace window of %u bytes)", held);
            return RILL_ENOMEM;
        }
        memcpy(s->held, sec + bytes - held, held);
        s->held_cap = held;
    }
    for (uint32_t i = 0; i < n; i++) {
        const unsigned char *e = sec + HIST_FIXED + (size_t)HIST_ENTRY * i;
        s->hist[i] = (rill__input_t){ .seq = (int64_t)rill__get_u64(e),
                                      .start = (int64_t)rill__get_u64(e + 8),
                                      .held_at = rill__get_u32(e + 16),
                                      .held_len = rill__get_u32(e + 20),
                                      .started = rill__get_u32(e + 24) != 0,
                                      .lost = (uint8_t)rill__get_u32(e + 28) };
    }
    s->hist_head = 0;
    s->n_hist = (int32_t)n;
    s->hist_floor = (int64_t)floor;
    s->held_base = 0;
    s->held_end = held;
    s->n_evicted_sync = (int64_t)sync;
    return RILL_OK;
}

/* Loads the snapshot at path into a new session of p. On error nothing is left allocated. */
static rill_err_t load(rill_session_pool_t *p, const char *path, rill_session_t **out, char *msg,
                       size_t msglen) {
    rill_err_t err = RILL_OK;
    rill_session_t *s = NULL;
    unsigned char *buf = NULL, *sec = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        err = rill__io_err(errno);
        snprintf(msg, msglen, "cannot open the snapshot %s: %s", path, strerror(errno));
        goto cleanup;
    }
    int64_t size = rill__io_file_size(fd);
    unsigned char h[SNAP_HDR];
    size_t have = size < 0 ? 0 : size < SNAP_HDR ? (size_t)size : SNAP_HDR;
    if (size < 0 || (have > 0 && rill__io_pread(fd, h, have, 0) != 0)) {
        err = RILL_EIO;
        snprintf(msg, msglen, "snapshot %s: read error: %s", path, strerror(errno));
        goto cleanup;
    }
    snap_header_t hd;
    RILL_TRY(check_header(p, h, have, size, path, &hd, msg, msglen));
    size_t page_all = (size_t)(p->page_bytes * p->n_layer);
    buf = rill_malloc(RILL_MEM_SESSIONS, page_all);
    if (buf == NULL) {
        err = RILL_ENOMEM;
        snprintf(msg, msglen, "out of memory");
        goto cleanup;
    }
    RILL_TRY(rill__session_alloc(p, hd.sink_slots, hd.window_slots, hd.evict_pages, &s));
    if (hd.text_len > 0) {
        s->text = rill_malloc(RILL_MEM_SESSIONS, (size_t)hd.text_len);
        if (s->text == NULL) {
            err = RILL_ENOMEM;
            snprintf(msg, msglen, "out of memory (held-back text of %llu bytes)",
                     (unsigned long long)hd.text_len);
            goto cleanup;
        }
        s->text_cap = (size_t)hd.text_len;
    }
    int64_t off = SNAP_HDR;
    RILL_TRY(read_section(fd, path, "tokens", s->tokens, (size_t)hd.n * sizeof *s->tokens, &off,
                          msg, msglen));
    for (int32_t i = 0; i < hd.n; i++) {
        if (s->tokens[i] < 0 || s->tokens[i] >= p->n_vocab) {
            err = RILL_ECORRUPT;
            snprintf(msg, msglen, "snapshot %s: token %d at slot %d is outside the vocabulary",
                     path, s->tokens[i], i);
            goto cleanup;
        }
    }
    RILL_TRY(
        read_section(fd, path, "held-back text", s->text, (size_t)hd.text_len, &off, msg, msglen));
    /* what the replace window is checked against */
    s->seq = (int64_t)hd.seq;
    s->n = hd.n;
    s->n_evicted = (int64_t)hd.n_evicted;
    if (hd.hist_bytes >= 0) {
        int64_t at = off;
        sec = rill_malloc(RILL_MEM_SESSIONS, (size_t)hd.hist_bytes);
        if (sec == NULL) {
            err = RILL_ENOMEM;
            snprintf(msg, msglen, "out of memory");
            goto cleanup;
        }
        RILL_TRY(read_section(fd, path, "replace window", sec, (size_t)hd.hist_bytes, &off, msg,
                              msglen));
        RILL_TRY(load_history(s, sec, (size_t)hd.hist_bytes, path, at, msg, msglen));
    } else { /* version 1: nothing before the snapshot can be replaced */
        s->hist_floor = s->seq + 1;
        s->n_evicted_sync = s->n_evicted;
    }
    bool logits = (hd.flags & FLAG_LOGITS) != 0;
    RILL_TRY(read_section(fd, path, "logits", s->logits,
                          logits ? (size_t)p->n_vocab * sizeof *s->logits : 0, &off, msg, msglen));
    for (int32_t j = 0; j < hd.n_pages; j++) {
        s->pages[j] = rill__pool_take(p); /* check_header() saw the pages free */
        s->n_pages = j + 1;
        RILL_TRY(read_section(fd, path, "pages", buf, page_all, &off, msg, msglen));
        for (int32_t l = 0; l < p->n_layer; l++) {
            char *base = rill_kv_cache_pool(p->kv, l);
            err = rill_backend_copy_in(p->be, base + (int64_t)s->pages[j] * p->page_bytes,
                                       buf + (size_t)l * (size_t)p->page_bytes,
                                       (size_t)p->page_bytes);
            if (err != RILL_OK) {
                snprintf(msg, msglen, "snapshot %s: writing page %d: %s", path, s->pages[j],
                         rill_last_error(err));
                goto cleanup;
            }
        }
    }
    char end[8];
    if (rill__io_pread(fd, end, 8, off) != 0 || memcmp(end, SNAP_END, 8) != 0) {
        err = RILL_EFORMAT;
        snprintf(msg, msglen, "snapshot %s: no end marker at offset %lld", path, (long long)off);
        goto cleanup;
    }
    s->uid = hd.uid;
    s->seq = (int64_t)hd.seq;
    s->n = hd.n;
    s->n_evicted = (int64_t)hd.n_evicted;
    s->logits_valid = logits;
    s->text_len = (size_t)hd.text_len;
    s->text_started = (hd.flags & FLAG_TEXT) != 0;
    close(fd);
    rill_free(buf);
    rill_free(sec);
    *out = s;
    return RILL_OK;
cleanup:
    if (fd >= 0) {
        close(fd);
    }
    rill_free(buf);
    rill_free(sec);
    rill_session_destroy(&s);
    return err;
}

rill_err_t rill_session_restore(rill_session_pool_t *p, const char *snapshot_path,
                                const char *log_path, rill_session_fsync_t policy,
                                rill_session_t **out) {
    char msg[RILL_ERR_DETAIL] = "";
    rill_err_t e = RILL_OK;
    rill_session_t *s = NULL;
    if (out != NULL) {
        *out = NULL;
    }
    if (p == NULL || out == NULL || (snapshot_path == NULL && log_path == NULL) ||
        (policy != RILL_SESSION_FSYNC_EVERYSEC && policy != RILL_SESSION_FSYNC_ALWAYS &&
         policy != RILL_SESSION_FSYNC_NEVER)) {
        e = RILL_EINVAL;
        snprintf(msg, sizeof msg, "restore: NULL pool or out, no path, or an unknown policy");
    }
    if (e == RILL_OK && snapshot_path != NULL) {
        e = load(p, snapshot_path, &s, msg, sizeof msg);
    }
    if (e == RILL_OK && log_path != NULL) {
        e = rill__record_replay(p, &s, log_path, policy, msg, sizeof msg);
    }
    if (e != RILL_OK) {
        rill_session_destroy(&s);
        RILL_LOGD("restore: %s", msg);
    } else {
        s->err[0] = '\0';
        *out = s;
    }
    return rill__error_str(e, msg);
}
