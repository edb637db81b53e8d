/*
 * test_server_json.c - the HTTP door's JSON <-> msgpack walk (server/json.c, through the
 * module's private header): every JSON value survives the trip to msgpack and back, empty
 * strings and keys included (msgpack-c hands them over with a NULL pointer), non-UTF-8 strings
 * and NaN become null rather than broken JSON, and nesting beyond the protocol's depth fails.
 */
#include <check.h>
#include <math.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "server_internal.h"

/* JSON text -> msgpack -> JSON, compared with json_equal. */
static void round_trip(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, JSON_DECODE_ANY, &je);
    ck_assert_msg(j != NULL, "%s: %s", text, je.text);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(srv_json_to_msgpack(&pk, j, 1), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    ck_assert_int_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    json_t *back = srv_json_from_msgpack(&u.data);
    ck_assert_msg(back != NULL && json_equal(back, j), "%s did not come back", text);
    json_decref(back);
    json_decref(j);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}

START_TEST(json_round_trips) {
    round_trip("{\"\": \"\"}");
    round_trip("{\"a\": \"\", \"b\": [\"\", {\"\": []}]}");
    round_trip("{\"n\": -9223372036854775808, \"m\": 9223372036854775807, \"z\": 0}");
    round_trip("{\"r\": 0.5, \"e\": -1.25e-300, \"t\": true, \"f\": false, \"x\": null}");
    round_trip("{\"u\": \"\\u00e9\\ud83d\\ude00 and \\\" inside\"}");
    round_trip("[]");
}
END_TEST

START_TEST(json_from_msgpack_never_breaks) {
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 4);
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "bad", 3);
    msgpack_pack_str(&pk, 2);
    msgpack_pack_str_body(&pk, "\xff\xfe", 2); /* not UTF-8 */
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "nan", 3);
    msgpack_pack_double(&pk, NAN);
    msgpack_pack_str(&pk, 3);
    msgpack_pack_str_body(&pk, "bin", 3);
    msgpack_pack_bin(&pk, 2);
    msgpack_pack_bin_body(&pk, "ab", 2);
    msgpack_pack_int(&pk, 7); /* a key that is not a string: left out */
    msgpack_pack_true(&pk);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    ck_assert_int_eq(msgpack_unpack_next(&u, sb.data, sb.size, NULL), MSGPACK_UNPACK_SUCCESS);
    json_t *j = srv_json_from_msgpack(&u.data);
    ck_assert_ptr_nonnull(j);
    ck_assert_int_eq(json_object_size(j), 3);
    ck_assert(json_is_null(json_object_get(j, "bad")));
    ck_assert(json_is_null(json_object_get(j, "nan")));
    ck_assert(json_is_null(json_object_get(j, "bin")));
    char *t = json_dumps(j, JSON_COMPACT);
    ck_assert_ptr_nonnull(t);
    free(t);
    json_decref(j);
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

START_TEST(json_too_deep_fails) {
    char text[64] = "";
    for (int i = 0; i <= RILL_PROTO_MAX_DEPTH; i++) {
        strcat(text, "[");
    }
    for (int i = 0; i <= RILL_PROTO_MAX_DEPTH; i++) {
        strcat(text, "]");
    }
    json_t *j = json_loads(text, 0, NULL);
    ck_assert_ptr_nonnull(j);
    msgpack_sbuffer sb;
    msgpack_sbuffer_init(&sb);
    msgpack_packer pk;
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    ck_assert_int_eq(srv_json_to_msgpack(&pk, j, 1), -1); /* 9 levels from depth 1: too deep */
    msgpack_sbuffer_clear(&sb);
    ck_assert_int_eq(srv_json_to_msgpack(&pk, j, 0), 0); /* 0..8: deep enough */
    json_decref(j);
    msgpack_sbuffer_destroy(&sb);
}
END_TEST

int main(void) {
    Suite *s = suite_create("server_json");
    TCase *tc = tcase_create("json");
    tcase_add_test(tc, json_round_trips);
    tcase_add_test(tc, json_from_msgpack_never_breaks);
    tcase_add_test(tc, json_too_deep_fails);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
