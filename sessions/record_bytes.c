/*
 * record_bytes.c - one input record as bytes, framed exactly as the ingest log frames it
 * (docs/architecture.md, "Ingest log, version 1": u32 CRC-32C of everything after it, u32
 * payload length, u32 type, u32 zero, u64 sequence number, then the payload), for carriers
 * other than the log file: the cluster's JetStream subjects (cluster/) hold one such record per
 * message, so a record has one encoding wherever it is kept.
 *
 * Design. Only the frame is checked here (lengths, checksum, the zero field, a known type); what
 * a payload must hold (a rollback's position, a replace's version) is record.c's, at apply time,
 * as it is for a record read from a log. The type values are record.c's (session_internal.h);
 * the public enum repeats them and a static assertion keeps the two equal.
 */
#include <string.h>

#include "rill_err.h"
#include "session_internal.h"

#define SAME(pub, priv) ((int)(pub) == (int)(priv))
_Static_assert(SAME(RILL_SESSION_REC_TOKENS, RILL__REC_TOKENS) &&
                   SAME(RILL_SESSION_REC_TEXT, RILL__REC_TEXT) &&
                   SAME(RILL_SESSION_REC_FLUSH, RILL__REC_FLUSH) &&
                   SAME(RILL_SESSION_REC_ROLLBACK, RILL__REC_ROLLBACK) &&
                   SAME(RILL_SESSION_REC_REPLACE, RILL__REC_REPLACE) &&
                   SAME(RILL_SESSION_REC_TEXT_END, RILL__REC_TEXT_END),
               "public record types must be the log's");

rill_err_t rill_session_record_header(unsigned char hdr[RILL_SESSION_RECORD_HEADER], uint32_t type,
                                      uint64_t seq, const void *payload, size_t len) {
    if (hdr == NULL || (payload == NULL && len > 0)) {
        return rill__error(RILL_EINVAL, "record header: NULL argument");
    }
    if (type < RILL_SESSION_REC_TOKENS || type > RILL_SESSION_REC_TEXT_END) {
        return rill__error(RILL_EINVAL, "record header: unknown record type %u", type);
    }
    if (len > RILL__LOG_MAX_PAYLOAD) {
        return rill__error(RILL_ERANGE, "record of %zu bytes exceeds a log record (%u)", len,
                           RILL__LOG_MAX_PAYLOAD);
    }
    rill__put_u32(hdr + 4, (uint32_t)len);
    rill__put_u32(hdr + 8, type);
    rill__put_u32(hdr + 12, 0);
    rill__put_u64(hdr + 16, seq);
    uint32_t crc = rill__crc32c(0, hdr + 4, RILL_SESSION_RECORD_HEADER - 4);
    rill__put_u32(hdr, rill__crc32c(crc, payload, len));
    return RILL_OK;
}

rill_err_t rill_session_record_parse(const void *buf, size_t n, rill_session_record_t *out) {
    if (buf == NULL || out == NULL) {
        return rill__error(RILL_EINVAL, "record parse: NULL argument");
    }
    const unsigned char *b = buf;
    if (n < RILL_SESSION_RECORD_HEADER) {
        return rill__error(RILL_EFORMAT, "record of %zu bytes is shorter than its %d-byte header",
                           n, RILL_SESSION_RECORD_HEADER);
    }
    uint32_t len = rill__get_u32(b + 4);
    if ((size_t)len != n - RILL_SESSION_RECORD_HEADER) {
        return rill__error(RILL_EFORMAT, "record says %u payload bytes, carries %zu", len,
                           n - RILL_SESSION_RECORD_HEADER);
    }
    uint32_t crc = rill__crc32c(0, b + 4, n - 4);
    if (crc != rill__get_u32(b)) {
        return rill__error(RILL_ECORRUPT, "record checksum mismatch (sequence number %llu)",
                           (unsigned long long)rill__get_u64(b + 16));
    }
    uint32_t type = rill__get_u32(b + 8);
    if (rill__get_u32(b + 12) != 0) {
        return rill__error(RILL_EFORMAT, "record's reserved field is not zero");
    }
    if (type < RILL_SESSION_REC_TOKENS || type > RILL_SESSION_REC_TEXT_END) {
        return rill__error(RILL_EUNSUPPORTED, "record type %u is unknown to this build", type);
    }
    out->type = type;
    out->seq = rill__get_u64(b + 16);
    out->payload = b + RILL_SESSION_RECORD_HEADER;
    out->len = len;
    return RILL_OK;
}
