/*
 * json.c - JSON <-> the protocol's msgpack, for the HTTP door (contract: server_internal.h).
 *
 * The command layer speaks msgpack only; the HTTP door turns a JSON body into the same request
 * map a ZeroMQ client sends, and a msgpack reply or event back into JSON. jansson parses and
 * prints; this file only walks one tree into the other. JSON has no binary type and no NaN:
 * msgpack bin/ext (never produced by the command layer) become null, a NaN or infinite double
 * becomes null too (jansson refuses them).
 */
#include <math.h>
#include <string.h>

#include "rill_msgpack.h"
#include "rill_utf8.h"
#include "server_internal.h"

json_t *srv_json_from_msgpack(const msgpack_object *o) {
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return json_null();
    case MSGPACK_OBJECT_BOOLEAN:
        return json_boolean(o->via.boolean);
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        return json_integer(o->via.u64 > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)o->via.u64);
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return json_integer((json_int_t)o->via.i64);
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return isfinite(o->via.f64) ? json_real(o->via.f64) : json_null();
    case MSGPACK_OBJECT_STR:
        /* the command layer packs valid UTF-8 only (srv_pk_str); anything else is refused by
         * jansson and becomes null rather than a broken document */
        if (o->via.str.size == 0) {
            return json_string(""); /* msgpack-c may give an empty str a NULL pointer */
        }
        return rill_utf8_valid(o->via.str.ptr, o->via.str.size, NULL)
                   ? json_stringn(o->via.str.ptr, o->via.str.size)
                   : json_null();
    case MSGPACK_OBJECT_ARRAY: {
        json_t *a = json_array();
        for (uint32_t i = 0; a != NULL && i < o->via.array.size; i++) {
            json_t *v = srv_json_from_msgpack(&o->via.array.ptr[i]);
            if (v == NULL || json_array_append_new(a, v) != 0) {
                json_decref(a);
                return NULL;
            }
        }
        return a;
    }
    case MSGPACK_OBJECT_MAP: {
        json_t *m = json_object();
        for (uint32_t i = 0; m != NULL && i < o->via.map.size; i++) {
            const msgpack_object_kv *kv = &o->via.map.ptr[i];
            if (kv->key.type != MSGPACK_OBJECT_STR) {
                continue; /* JSON keys are strings; the command layer packs no other */
            }
            json_t *v = srv_json_from_msgpack(&kv->val);
            const char *k = kv->key.via.str.size > 0 ? kv->key.via.str.ptr : "";
            if (v == NULL || json_object_setn_new(m, k, kv->key.via.str.size, v) != 0) {
                json_decref(m);
                return NULL;
            }
        }
        return m;
    }
    default:
        return json_null();
    }
}

int srv_json_to_msgpack(msgpack_packer *pk, const json_t *j, int depth) {
    if (depth > RILL_PROTO_MAX_DEPTH) {
        return -1;
    }
    switch (json_typeof(j)) {
    case JSON_NULL:
        return msgpack_pack_nil(pk);
    case JSON_TRUE:
        return msgpack_pack_true(pk);
    case JSON_FALSE:
        return msgpack_pack_false(pk);
    case JSON_INTEGER:
        return msgpack_pack_int64(pk, json_integer_value(j));
    case JSON_REAL:
        return msgpack_pack_double(pk, json_real_value(j));
    case JSON_STRING:
        return rill_msgpack_pack_str(pk, json_string_value(j), json_string_length(j));
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        if (msgpack_pack_array(pk, n) != 0) {
            return -1;
        }
        for (size_t i = 0; i < n; i++) {
            if (srv_json_to_msgpack(pk, json_array_get(j, i), depth + 1) != 0) {
                return -1;
            }
        }
        return 0;
    }
    case JSON_OBJECT: {
        if (msgpack_pack_map(pk, json_object_size(j)) != 0) {
            return -1;
        }
        const char *k;
        size_t klen;
        json_t *v;
        json_object_keylen_foreach((json_t *)j, k, klen, v) {
            if (rill_msgpack_pack_str(pk, k, klen) != 0 ||
                srv_json_to_msgpack(pk, v, depth + 1) != 0) {
                return -1;
            }
        }
        return 0;
    }
    }
    return -1;
}

int srv_json_request(msgpack_sbuffer *sb, uint64_t id, const char *cmd, const json_t *args) {
    msgpack_packer pk;
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    if (msgpack_pack_map(&pk, 4) != 0 || rill_msgpack_pack_str(&pk, "v", 1) != 0 ||
        msgpack_pack_int64(&pk, RILL_PROTO_VERSION) != 0 ||
        rill_msgpack_pack_str(&pk, "id", 2) != 0 || msgpack_pack_uint64(&pk, id) != 0 ||
        rill_msgpack_pack_str(&pk, "cmd", 3) != 0 ||
        rill_msgpack_pack_str(&pk, cmd, strlen(cmd)) != 0 ||
        rill_msgpack_pack_str(&pk, "args", 4) != 0) {
        return -1;
    }
    return srv_json_to_msgpack(&pk, args, 1);
}
