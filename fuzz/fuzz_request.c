/*
 * fuzz_request.c - libFuzzer target for rilld's request decoder (wire/rill_proto.h), which
 * reads every frame a client sends before anything else looks at it.
 *
 * Every input is decoded by a long-lived decoder (as rilld keeps one: its zone is reused from
 * frame to frame) and by a fresh one whose size limit comes from the input. Oracles (each
 * aborts on a bug, never on bad input):
 *
 *   1. The result is OK or one of the documented errors, with a message on error; the two
 *      decoders agree unless the fresh one's limit is below the input's size (then ERANGE).
 *   2. A decoded request holds what the command table promises: a known command; its required
 *      arguments; strings that lie inside the input, within their length limits, session names
 *      of [A-Za-z0-9_.-]{1,64}, a non-empty question; numbers in their ranges; only flags of
 *      arguments the command takes.
 *   3. Round trip: the request is packed again (canonical msgpack: the envelope, the arguments
 *      that were given) and decoded; the same request must come back, field by field.
 *   4. ingest.ticks' re-packed array passes rill_msgpack_check, and the tick decoder reads it
 *      without error other than the documented ones.
 *   5. What rilld would echo is valid UTF-8 once packed as it packs strings: the error message,
 *      and each string argument (a standing question is echoed), packed with
 *      rill_msgpack_pack_str, pass rill_msgpack_check_utf8; the input itself, packed as one str,
 *      too.
 *
 * Build and run: scripts/fuzz.sh request [seconds] (seeds: fuzz/make_request_seeds.py).
 */
#include <msgpack.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill_market.h"
#include "rill_msgpack.h"
#include "rill_proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_FRAME (1u << 20) /* rilld's default --max-msg */

static rill_proto_dec_t *g_dec;
static rill_tick_decoder_t *g_ticks;
static rill_tick_t g_tick_out[4096];

static void check(bool ok) {
    if (!ok) {
        abort();
    }
}

static bool documented(rill_err_t e) {
    return e == RILL_OK || e == RILL_EFORMAT || e == RILL_ERANGE || e == RILL_EINVAL ||
           e == RILL_EUNSUPPORTED || e == RILL_ENOMEM;
}

/* A decoded string lies inside buf[0, len) (msgpack-c does not copy them). */
static void check_str(rill_proto_str_t s, const uint8_t *buf, size_t len, size_t max) {
    check(s.len <= max);
    if (s.len > 0) {
        check(s.p != NULL && (const uint8_t *)s.p >= buf &&
              (const uint8_t *)s.p + s.len <= buf + len);
    }
}

static bool name_ok(rill_proto_str_t s) {
    if (s.len < 1 || s.len > RILL_PROTO_MAX_NAME) {
        return false;
    }
    for (size_t i = 0; i < s.len; i++) {
        char c = s.p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '-')) {
            return false;
        }
    }
    return true;
}

/* Which arguments each command takes: session (S), text (T), question (Q), system (Y), window
 * and sinks (W), flush (F), max_tokens (M), qid (I), ticks (K), model (O), from_version (V);
 * upper case required. */
static const char *const k_args[RILL_PROTO_N_CMDS] = {
    [RILL_PROTO_SESSION_CREATE] = "sywo",   [RILL_PROTO_SESSION_CLOSE] = "S",
    [RILL_PROTO_SESSION_LIST] = "",         [RILL_PROTO_SESSION_STATS] = "S",
    [RILL_PROTO_SESSION_SNAPSHOT] = "S",    [RILL_PROTO_INGEST_TEXT] = "STf",
    [RILL_PROTO_INGEST_TICKS] = "SK",       [RILL_PROTO_ASK] = "SQm",
    [RILL_PROTO_STANDING_REGISTER] = "SQm", [RILL_PROTO_STANDING_UNREGISTER] = "SI",
    [RILL_PROTO_STANDING_LIST] = "S",       [RILL_PROTO_SERVER_STATS] = "",
    [RILL_PROTO_INGEST_REPLACE] = "STV",
};

static bool takes(rill_proto_cmd_t c, char a) {
    return strchr(k_args[c], a) != NULL || strchr(k_args[c], a - 'a' + 'A') != NULL;
}

static void check_req(const rill_proto_req_t *r, const uint8_t *buf, size_t len) {
    check((unsigned)r->cmd < (unsigned)RILL_PROTO_N_CMDS && rill_proto_cmd_name(r->cmd) != NULL);
    check(r->id < (UINT64_C(1) << 63));
    rill_proto_cmd_t c = r->cmd;
    bool has_session = (r->present & RILL_PROTO_HAS_SESSION) != 0;
    check(takes(c, 's') || !has_session);
    check(strchr(k_args[c], 'S') == NULL || has_session);
    if (has_session) {
        check_str(r->session, buf, len, RILL_PROTO_MAX_NAME);
        check(name_ok(r->session));
    }
    check_str(r->text, buf, len, RILL_PROTO_MAX_TEXT);
    check_str(r->question, buf, len, RILL_PROTO_MAX_STR);
    check_str(r->system, buf, len, RILL_PROTO_MAX_STR);
    check(takes(c, 'q') == (r->question.len > 0)); /* a question is required and non-empty */
    check(takes(c, 't') || r->text.len == 0);
    check(takes(c, 'y') || (r->present & RILL_PROTO_HAS_SYSTEM) == 0);
    check(takes(c, 'w') || (r->present & (RILL_PROTO_HAS_WINDOW | RILL_PROTO_HAS_SINKS)) == 0);
    check(takes(c, 'f') || (r->present & RILL_PROTO_HAS_FLUSH) == 0);
    check(takes(c, 'm') || (r->present & RILL_PROTO_HAS_MAX_TOKENS) == 0);
    check(takes(c, 'o') || (r->present & RILL_PROTO_HAS_MODEL) == 0);
    if (r->present & RILL_PROTO_HAS_MODEL) {
        check_str(r->model, buf, len, RILL_PROTO_MAX_NAME - 1);
        check(name_ok(r->model));
    }
    check(takes(c, 'v') ? r->from_version >= 1 : r->from_version == 0);
    check(r->window >= 0 && r->window <= RILL_PROTO_MAX_WINDOW);
    check(r->sinks >= 0 && r->sinks <= RILL_PROTO_MAX_WINDOW);
    if (r->present & RILL_PROTO_HAS_MAX_TOKENS) {
        check(r->max_tokens >= 1 && r->max_tokens <= RILL_PROTO_MAX_TOKENS);
    }
    check(takes(c, 'i') == (r->qid != 0));
    check(takes(c, 'k') == (r->ticks != NULL));
    if (r->ticks != NULL) {
        /* the re-packed array: one well-formed msgpack array the tick decoder can read */
        rill_msgpack_shape_t sh;
        check(rill_msgpack_check(r->ticks, r->ticks_len, RILL_MSGPACK_MAX_DEPTH, &sh) == RILL_OK &&
              sh.top == RILL_MSGPACK_ARRAY);
        int64_t n = rill_tick_decode(g_ticks, r->ticks, r->ticks_len, g_tick_out, 4096);
        check(n >= 0 || n == RILL_EFORMAT || n == RILL_ERANGE || n == RILL_EINVAL ||
              n == RILL_EFULL || n == RILL_ENOMEM);
        check(n < 0 || (uint64_t)n <= sh.top_count);
    }
}

static void pack_str(msgpack_packer *pk, const char *s) {
    size_t n = strlen(s);
    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

static void pack_kv_str(msgpack_packer *pk, const char *k, rill_proto_str_t v) {
    pack_str(pk, k);
    msgpack_pack_str(pk, v.len);
    msgpack_pack_str_body(pk, v.p, v.len);
}

/* The request packed again, canonically: the envelope and the arguments that were given. The
 * ticks array is written as the decoder re-packed it. */
static void repack(const rill_proto_req_t *r, msgpack_sbuffer *sb) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    pack_str(&pk, "v");
    msgpack_pack_uint32(&pk, RILL_PROTO_VERSION);
    pack_str(&pk, "id");
    msgpack_pack_uint64(&pk, r->id);
    pack_str(&pk, "cmd");
    pack_str(&pk, rill_proto_cmd_name(r->cmd));
    pack_str(&pk, "args");
    rill_proto_cmd_t c = r->cmd;
    size_t n = 0;
    n += (r->present & RILL_PROTO_HAS_SESSION) != 0;
    n += (r->present & RILL_PROTO_HAS_SYSTEM) != 0;
    n += (r->present & RILL_PROTO_HAS_WINDOW) != 0;
    n += (r->present & RILL_PROTO_HAS_SINKS) != 0;
    n += (r->present & RILL_PROTO_HAS_FLUSH) != 0;
    n += (r->present & RILL_PROTO_HAS_MAX_TOKENS) != 0;
    n += (r->present & RILL_PROTO_HAS_MODEL) != 0;
    n += takes(c, 't') + takes(c, 'q') + takes(c, 'i') + takes(c, 'k') + takes(c, 'v');
    msgpack_pack_map(&pk, n);
    if (r->present & RILL_PROTO_HAS_SESSION) {
        pack_kv_str(&pk, "session", r->session);
    }
    if (r->present & RILL_PROTO_HAS_SYSTEM) {
        pack_kv_str(&pk, "system", r->system);
    }
    if (r->present & RILL_PROTO_HAS_WINDOW) {
        pack_str(&pk, "window");
        msgpack_pack_int64(&pk, r->window);
    }
    if (r->present & RILL_PROTO_HAS_SINKS) {
        pack_str(&pk, "sinks");
        msgpack_pack_int64(&pk, r->sinks);
    }
    if (r->present & RILL_PROTO_HAS_FLUSH) {
        pack_str(&pk, "flush");
        r->flush ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk);
    }
    if (r->present & RILL_PROTO_HAS_MAX_TOKENS) {
        pack_str(&pk, "max_tokens");
        msgpack_pack_int32(&pk, r->max_tokens);
    }
    if (takes(c, 't')) {
        pack_kv_str(&pk, "text", r->text);
    }
    if (takes(c, 'q')) {
        pack_kv_str(&pk, "question", r->question);
    }
    if (takes(c, 'i')) {
        pack_str(&pk, "qid");
        msgpack_pack_uint64(&pk, r->qid);
    }
    if (takes(c, 'k')) {
        pack_str(&pk, "ticks");
        msgpack_sbuffer_write(sb, r->ticks, r->ticks_len);
    }
    if (r->present & RILL_PROTO_HAS_MODEL) {
        pack_kv_str(&pk, "model", r->model);
    }
    if (takes(c, 'v')) {
        pack_str(&pk, "from_version");
        msgpack_pack_int64(&pk, r->from_version);
    }
}

/* Oracle 5: s[0, n) packed as rilld packs strings is one str of valid UTF-8. */
static void check_sent(const char *s, size_t n) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    check(rill_msgpack_pack_str(&pk, s, n) == 0);
    rill_msgpack_shape_t sh;
    check(rill_msgpack_check_utf8(sb.data, sb.size, 1, &sh) == RILL_OK &&
          sh.top == RILL_MSGPACK_SCALAR);
    check(sb.size >= n + 1 && sb.size <= 4 * n + 5);
    msgpack_sbuffer_destroy(&sb);
}

static bool str_eq(rill_proto_str_t a, rill_proto_str_t b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.p, b.p, a.len) == 0);
}

static void check_same(const rill_proto_req_t *a, const rill_proto_req_t *b) {
    check(a->id == b->id && a->cmd == b->cmd && a->present == b->present);
    check(str_eq(a->session, b->session) && str_eq(a->text, b->text) &&
          str_eq(a->question, b->question) && str_eq(a->system, b->system) &&
          str_eq(a->model, b->model) && a->from_version == b->from_version);
    check(a->flush == b->flush && a->window == b->window && a->sinks == b->sinks &&
          a->max_tokens == b->max_tokens && a->qid == b->qid);
    check((a->ticks == NULL) == (b->ticks == NULL) && a->ticks_len == b->ticks_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_dec == NULL) {
        rill_tick_decoder_params_t tp = rill_tick_decoder_default_params();
        tp.max_batch = 4096;
        if (rill_proto_dec_new(MAX_FRAME, &g_dec) != RILL_OK ||
            rill_tick_decoder_new(&tp, &g_ticks) != RILL_OK) {
            abort();
        }
    }
    char msg[RILL_ERR_DETAIL];
    rill_proto_req_t r;
    rill_err_t err = rill_proto_decode(g_dec, data, size, &r);
    snprintf(msg, sizeof msg, "%s", err == RILL_OK ? "" : rill_last_error(err));
    check(documented(err));
    check(strlen(msg) < sizeof msg && (err == RILL_OK) == (msg[0] == '\0'));
    if (err == RILL_OK) {
        check_req(&r, data, size);
        check_sent(r.question.p, r.question.len);
        check_sent(r.system.p, r.system.len);
        check_sent(r.text.p, r.text.len);
    } else {
        check(r.id < (UINT64_C(1) << 63));
        check_sent(msg, strlen(msg));
    }
    check_sent((const char *)data, size);

    /* a fresh decoder with a limit from the input: the same verdict, or ERANGE above it */
    size_t limit = 16 + (size > 0 ? (size_t)data[size - 1] * 8 : 0);
    rill_proto_dec_t *fresh = NULL;
    check(rill_proto_dec_new(limit, &fresh) == RILL_OK);
    rill_proto_req_t r2;
    char msg2[RILL_ERR_DETAIL];
    rill_err_t err2 = rill_proto_decode(fresh, data, size, &r2);
    snprintf(msg2, sizeof msg2, "%s", err2 == RILL_OK ? "" : rill_last_error(err2));
    if (size > limit) {
        check(err2 == RILL_ERANGE);
    } else {
        check(err2 == err && r2.id == r.id && strcmp(msg, msg2) == 0);
        if (err == RILL_OK) {
            check_same(&r, &r2);
        }
    }
    rill_proto_dec_destroy(&fresh);
    check(fresh == NULL);

    if (err == RILL_OK) {
        /* round trip: r borrows from g_dec (the ticks buffer), so decode the copy with another
           decoder and compare before g_dec decodes anything else */
        msgpack_sbuffer sb;
        msgpack_sbuffer_init(&sb);
        repack(&r, &sb);
        rill_proto_dec_t *again = NULL;
        check(rill_proto_dec_new(MAX_FRAME + 64, &again) == RILL_OK);
        rill_proto_req_t r3;
        rill_err_t err3 = rill_proto_decode(again, sb.data, sb.size, &r3);
        check(err3 == RILL_OK);
        check_same(&r, &r3);
        if (r.ticks != NULL) {
            check(memcmp(r.ticks, r3.ticks, r.ticks_len) == 0);
        }
        rill_proto_dec_destroy(&again);
        msgpack_sbuffer_destroy(&sb);
    }
    return 0;
}
