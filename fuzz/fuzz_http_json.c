/*
 * fuzz_http_json.c - libFuzzer target for the JSON request path of rilld's HTTP door: a body as
 * a client sends it, parsed by jansson, turned into the protocol's request map
 * (server/json.c, srv_json_to_msgpack) and decoded by wire/'s rill_proto_decode, as
 * server/door_http.c does for every request.
 *
 * Input: byte 0 picks the command (mod RILL_PROTO_N_CMDS), the rest is the body. Oracles (each
 * aborts on a bug, never on bad input):
 *   1. A body jansson accepts converts to msgpack that passes rill_msgpack_check_utf8 (every
 *      str valid UTF-8), or fails only for nesting deeper than RILL_PROTO_MAX_DEPTH.
 *   2. Back to JSON (srv_json_from_msgpack) it is the same value (json_equal): nothing is lost
 *      or changed on the way to the command layer.
 *   3. The request decoder answers OK or a documented error, with a message on error.
 *
 * Build and run: scripts/fuzz.sh http_json [seconds].
 */
#include <jansson.h>
#include <msgpack.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rill_err.h"
#include "rill_msgpack.h"
#include "rill_proto.h"
#include "server_internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static rill_proto_dec_t *g_dec;

static void check(bool ok) {
    if (!ok) {
        abort();
    }
}

static int depth_of(const json_t *j) {
    int d = 0;
    if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            int k = depth_of(json_array_get(j, i));
            d = k > d ? k : d;
        }
        return d + 1;
    }
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            int e = depth_of(v);
            d = e > d ? e : d;
        }
        return d + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (g_dec == NULL) {
        check(rill_proto_dec_new(1u << 20, &g_dec) == RILL_OK);
    }
    if (size < 1) {
        return 0;
    }
    rill_proto_cmd_t cmd = (rill_proto_cmd_t)(data[0] % RILL_PROTO_N_CMDS);
    json_error_t je;
    json_t *body = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, &je);
    if (body == NULL) {
        return 0; /* the door answers 400 with jansson's message */
    }
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    /* the frame's envelope, then the arguments where srv_json_request puts them */
    json_t *empty = json_object();
    check(empty != NULL && srv_json_request(&sb, 1, rill_proto_cmd_name(cmd), empty) == 0);
    json_decref(empty);
    size_t at = sb.size - 1; /* the empty map's one byte */
    sb.size = 0;
    int rc = srv_json_request(&sb, 1, rill_proto_cmd_name(cmd), body);
    check(rc == 0 || depth_of(body) + 1 > RILL_PROTO_MAX_DEPTH);
    if (rc == 0) {
        /* 1 */
        check(rill_msgpack_check_utf8(sb.data + at, sb.size - at, RILL_PROTO_MAX_DEPTH + 1, NULL) ==
              RILL_OK);
        /* 2 */
        msgpack_unpacked u;
        msgpack_unpacked_init(&u);
        size_t off = 0;
        check(msgpack_unpack_next(&u, sb.data + at, sb.size - at, &off) == MSGPACK_UNPACK_SUCCESS);
        json_t *back = srv_json_from_msgpack(&u.data);
        check(back != NULL && json_equal(back, body));
        json_decref(back);
        msgpack_unpacked_destroy(&u);
        /* 3 */
        rill_proto_req_t req;
        rill_err_t err = rill_proto_decode(g_dec, sb.data, sb.size, &req);
        check(err == RILL_OK || err == RILL_EFORMAT || err == RILL_ERANGE || err == RILL_EINVAL ||
              err == RILL_EUNSUPPORTED || err == RILL_ENOMEM);
        check(err == RILL_OK || rill_last_error(err)[0] != '\0');
        check(err != RILL_OK || req.cmd == cmd);
    }
    msgpack_sbuffer_destroy(&sb);
    json_decref(body);
    return 0;
}
