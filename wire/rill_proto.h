/*
 * rill_proto.h - the rilld wire protocol, version 1 (docs/protocol.md): decoding requests from
 * untrusted frames and encoding replies and events.
 *
 * Decoding checks the frame before msgpack-c unpacks it (rill_msgpack_check: every length
 * against the bytes that remain, nesting, no trailing bytes), then every field: envelope keys
 * v / id / cmd / args and nothing else, the command's argument names and types, string lengths,
 * session names ([A-Za-z0-9_.-]{1,64}), numeric ranges. A request that fails gets an error code
 * and a message naming the field; nothing is used before all of it passed.
 *
 * Thread safety: a decoder is used by one thread at a time; encoding functions are pure.
 */
#ifndef RILL_PROTO_H
#define RILL_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rill_err.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RILL_PROTO_VERSION      1
#define RILL_PROTO_MAX_DEPTH    8
#define RILL_PROTO_MAX_STR      65536   /* bytes of a string argument */
#define RILL_PROTO_MAX_TEXT     1048576 /* bytes of ingest.text's text */
#define RILL_PROTO_MAX_NAME     64      /* bytes of a session name */
#define RILL_PROTO_MAX_TOKENS   1024    /* ask / standing max_tokens */
#define RILL_PROTO_MAX_WINDOW   1048576 /* window and sinks */
#define RILL_PROTO_MAX_MESSAGES 256     /* complete: messages */
#define RILL_PROTO_MAX_STOP     4       /* complete: stop strings */
#define RILL_PROTO_MAX_STOP_LEN 256     /* bytes of one */
#define RILL_PROTO_MAX_AUDIO    1048576 /* bytes of ingest.audio's data */

typedef enum rill_proto_cmd {
    RILL_PROTO_SESSION_CREATE = 0,
    RILL_PROTO_SESSION_CLOSE,
    RILL_PROTO_SESSION_LIST,
    RILL_PROTO_SESSION_STATS,
    RILL_PROTO_SESSION_SNAPSHOT,
    RILL_PROTO_INGEST_TEXT,
    RILL_PROTO_INGEST_TICKS,
    RILL_PROTO_ASK,
    RILL_PROTO_STANDING_REGISTER,
    RILL_PROTO_STANDING_UNREGISTER,
    RILL_PROTO_STANDING_LIST,
    RILL_PROTO_SERVER_STATS,
    RILL_PROTO_INGEST_REPLACE,
    RILL_PROTO_COMPLETE,
    RILL_PROTO_SERVER_METRICS,
    RILL_PROTO_INGEST_AUDIO,
    RILL_PROTO_N_CMDS
} rill_proto_cmd_t;

/* The command's wire name ("session.create", ...), or NULL out of range. */
const char *rill_proto_cmd_name(rill_proto_cmd_t cmd);

/* A string inside the decoded frame (not NUL-terminated; borrowed from the decoder, valid until
 * its next decode). */
typedef struct rill_proto_str {
    const char *p;
    size_t len;
} rill_proto_str_t;

/* Bits of rill_proto_req_t.present: which optional arguments were given. */
#define RILL_PROTO_HAS_SESSION     (1u << 0)
#define RILL_PROTO_HAS_WINDOW      (1u << 1)
#define RILL_PROTO_HAS_SINKS       (1u << 2)
#define RILL_PROTO_HAS_SYSTEM      (1u << 3)
#define RILL_PROTO_HAS_FLUSH       (1u << 4)
#define RILL_PROTO_HAS_MAX_TOKENS  (1u << 5)
#define RILL_PROTO_HAS_MODEL       (1u << 6)
#define RILL_PROTO_HAS_PROMPT      (1u << 7)
#define RILL_PROTO_HAS_MESSAGES    (1u << 8)
#define RILL_PROTO_HAS_TEMPERATURE (1u << 9)
#define RILL_PROTO_HAS_TOP_P       (1u << 10)
#define RILL_PROTO_HAS_SEED        (1u << 11)
#define RILL_PROTO_HAS_CONSISTENCY (1u << 12)
#define RILL_PROTO_HAS_ASR         (1u << 13)
#define RILL_PROTO_HAS_PACKET      (1u << 14) /* ingest.audio: codec, rate, channels, seq, data */
#define RILL_PROTO_HAS_TRANSLATE   (1u << 15)

/* complete: one chat message (role is system, user or assistant). */
typedef struct rill_proto_msg {
    rill_proto_str_t role, content;
} rill_proto_msg_t;

typedef struct rill_proto_req {
    uint64_t id; /* the client's request id (0 when it could not be read) */
    rill_proto_cmd_t cmd;
    unsigned present; /* RILL_PROTO_HAS_* */
    rill_proto_str_t session, text, question, system, model;
    bool flush;
    bool pin; /* session.create: never sleeps (false when not given) */
    int64_t window, sinks;
    int32_t max_tokens;
    bool evaluated; /* ask: consistency "evaluated" (false: "acknowledged", the default) */
    uint64_t qid;
    int64_t from_version; /* ingest.replace: 1..2^63 - 1 */
    const void *ticks;    /* ingest.ticks: the ticks array re-encoded as one msgpack buffer
                             (rill_tick_decode's input); borrowed like the strings */
    size_t ticks_len;
    /* session.create: the recognizer's model (RILL_PROTO_HAS_ASR); a translation policy name
     * (RILL_PROTO_HAS_TRANSLATE: the session translates its transcript; the name as sent, the
     * server judges it) */
    rill_proto_str_t asr, translate;
    /* ingest.audio (RILL_PROTO_HAS_PACKET: all five given; without them flush must be true).
     * rate, channels and seq are only checked to be integers in [0, 2^63): the packet decoder
     * judges them (ingest/rill_audio.h), and codec is the name as sent */
    rill_proto_str_t codec;
    int64_t rate, channels, seq;
    const uint8_t *data; /* borrowed like the strings */
    size_t data_len;
    /* complete: */
    rill_proto_str_t prompt;
    const rill_proto_msg_t *messages; /* [n_messages], borrowed like the strings */
    int32_t n_messages;
    double temperature, top_p; /* [0, 2], (0, 1] */
    uint64_t seed;
    rill_proto_str_t stop[RILL_PROTO_MAX_STOP];
    int32_t n_stop;
} rill_proto_req_t;

typedef struct rill_proto_dec rill_proto_dec_t;

/* Creates a decoder for frames of at most max_bytes (>= 16). Its handle is charged to
 * RILL_MEM_SERVER (rilld is its user); msgpack-c's zone comes from libc. Caller owns *out;
 * destroy with rill_proto_dec_destroy(). Errors: RILL_EINVAL, RILL_ENOMEM (*out NULL). */
rill_err_t rill_proto_dec_new(size_t max_bytes, rill_proto_dec_t **out);
/* Destroys *dp and sets it to NULL. NULL-safe. */
void rill_proto_dec_destroy(rill_proto_dec_t **dp);

/* Decodes one request frame into *req. Errors (rill_last_error(err) has the detail, the reply's
 * message; req->id holds the id when it was read): RILL_EFORMAT (not msgpack, truncated, trailing
 * bytes, too deep, not a map, a field of the wrong type), RILL_ERANGE (a length or number outside
 * its range, a frame above max_bytes), RILL_EINVAL (a missing or unknown key, a bad session name,
 * an unknown command), RILL_EUNSUPPORTED (another protocol version), RILL_ENOMEM. */
rill_err_t rill_proto_decode(rill_proto_dec_t *d, const void *buf, size_t len,
                             rill_proto_req_t *req);

#ifdef __cplusplus
}
#endif
#endif /* RILL_PROTO_H */
