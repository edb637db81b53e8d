/*
 * test_session_records.c - records as bytes (sessions/rill_session.h, "records as bytes"): the
 * frame rill_session_record_header() writes is the ingest log's, byte for byte (a session's
 * own log is read back and re-encoded), and rill_session_record_parse() refuses every damaged
 * frame with its documented error. The cluster's JetStream subjects carry these frames, so this
 * is what keeps the stream and the log one encoding.
 */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "rill_session.h"
#include "session_internal.h" /* rill__crc32c: frames with a valid checksum and a bad field */
#include "test_util.h"

#define MODEL   "rill-tiny-qwen2-Q8_0.gguf"
#define LOG_HDR 128

static char g_dir[64];

START_TEST(header_is_the_logs_record_frame) {
    test_rig_params_t p = test_rig_default_params(MODEL);
    p.pool.n_cells = 512;
    test_rig_t g;
    test_rig_open(&g, &p);
    rill_session_params_t sp = rill_session_default_params();
    rill_session_t *s = NULL;
    ck_assert_int_eq(rill_session_new(g.pool, &sp, &s), RILL_OK);
    const char *path = test_path_in(g_dir, "frame.log");
    ck_assert_int_eq(rill_session_open_log(s, path, RILL_SESSION_FSYNC_NEVER), RILL_OK);
    const int32_t toks[3] = { 5, 17, 2 };
    ck_assert_int_eq(rill_session_append(s, toks, 3), RILL_OK);
    ck_assert_int_eq(rill_session_append_text(s, "hello wor", 9), RILL_OK);
    ck_assert_int_eq(rill_session_flush_text(s), RILL_OK);
    ck_assert_int_eq(rill_session_rollback(s, 2), RILL_OK);
    ck_assert_int_eq(rill_session_append_text_end(s, "ld.", 3), RILL_OK);
    ck_assert_int_eq(rill_session_close_log(s), RILL_OK);
    rill_session_destroy(&s);
    test_rig_close(&g);

    size_t n = 0;
    unsigned char *file = test_read_file(path, &n);
    ck_assert_uint_gt(n, LOG_HDR);
    const uint32_t types[5] = { RILL_SESSION_REC_TOKENS, RILL_SESSION_REC_TEXT,
                                RILL_SESSION_REC_FLUSH, RILL_SESSION_REC_ROLLBACK,
                                RILL_SESSION_REC_TEXT_END };
    size_t off = LOG_HDR;
    for (int i = 0; i < 5; i++) {
        ck_assert_uint_ge(n - off, RILL_SESSION_RECORD_HEADER);
        uint32_t len = (uint32_t)file[off + 4] | (uint32_t)file[off + 5] << 8 |
                       (uint32_t)file[off + 6] << 16 | (uint32_t)file[off + 7] << 24;
        size_t whole = RILL_SESSION_RECORD_HEADER + len;
        rill_session_record_t rec;
        ck_assert_int_eq(rill_session_record_parse(file + off, whole, &rec), RILL_OK);
        ck_assert_uint_eq(rec.type, types[i]);
        ck_assert_uint_eq(rec.seq, (uint64_t)i + 1);
        ck_assert_ptr_eq(rec.payload, file + off + RILL_SESSION_RECORD_HEADER);
        /* the header written for the same (type, seq, payload) is the log's, byte for byte */
        unsigned char hdr[RILL_SESSION_RECORD_HEADER];
        ck_assert_int_eq(rill_session_record_header(hdr, rec.type, rec.seq, rec.payload, rec.len),
                         RILL_OK);
        ck_assert_mem_eq(hdr, file + off, RILL_SESSION_RECORD_HEADER);
        off += whole;
    }
    ck_assert_uint_eq(off, n);
    free(file);
}
END_TEST

START_TEST(damaged_frames_are_refused) {
    const char text[] = "a replace's text";
    unsigned char rec[RILL_SESSION_RECORD_HEADER + 8 + sizeof text];
    unsigned char *payload = rec + RILL_SESSION_RECORD_HEADER;
    memset(payload, 0, 8);
    payload[0] = 7; /* from_version 7 */
    memcpy(payload + 8, text, sizeof text);
    size_t len = 8 + sizeof text, n = sizeof rec;
    ck_assert_int_eq(rill_session_record_header(rec, RILL_SESSION_REC_REPLACE, 42, payload, len),
                     RILL_OK);
    rill_session_record_t r;
    ck_assert_int_eq(rill_session_record_parse(rec, n, &r), RILL_OK);
    ck_assert_uint_eq(r.type, RILL_SESSION_REC_REPLACE);
    ck_assert_uint_eq(r.seq, 42);
    ck_assert_uint_eq(r.len, len);
    ck_assert_mem_eq(r.payload, payload, len);

    rill_session_record_t keep = r;
    /* short, a length that does not match, one flipped bit anywhere, the reserved field */
    ck_assert_int_eq(rill_session_record_parse(rec, RILL_SESSION_RECORD_HEADER - 1, &r),
                     RILL_EFORMAT);
    ck_assert_int_eq(rill_session_record_parse(rec, n - 1, &r), RILL_EFORMAT);
    for (size_t i = 0; i < n; i++) {
        if (i >= 4 && i < 8) {
            continue; /* the length field: a format error, checked above */
        }
        rec[i] ^= 0x10;
        rill_err_t err = rill_session_record_parse(rec, n, &r);
        ck_assert_msg(err == RILL_ECORRUPT, "byte %zu flipped: %s", i, rill_err_name(err));
        rec[i] ^= 0x10;
    }
    ck_assert_mem_eq(&r, &keep, sizeof r); /* unchanged by every refusal */
    /* a type this build does not know, and a non-zero reserved field, with a valid checksum */
    unsigned char odd[RILL_SESSION_RECORD_HEADER];
    ck_assert_int_eq(rill_session_record_header(odd, RILL_SESSION_REC_FLUSH, 3, NULL, 0), RILL_OK);
    ck_assert_int_eq(rill_session_record_parse(odd, sizeof odd, &r), RILL_OK);
    ck_assert_uint_eq(r.type, RILL_SESSION_REC_FLUSH);
    odd[8] = 99; /* the checksum is recomputed, so only the type is wrong */
    rill__put_u32(odd, rill__crc32c(0, odd + 4, sizeof odd - 4));
    ck_assert_int_eq(rill_session_record_parse(odd, sizeof odd, &r), RILL_EUNSUPPORTED);
    odd[8] = RILL_SESSION_REC_FLUSH;
    odd[12] = 1;
    rill__put_u32(odd, rill__crc32c(0, odd + 4, sizeof odd - 4));
    ck_assert_int_eq(rill_session_record_parse(odd, sizeof odd, &r), RILL_EFORMAT);
    ck_assert_uint_eq(r.type, RILL_SESSION_REC_FLUSH); /* still the last good parse */
    ck_assert_uint_eq(r.seq, 3);

    ck_assert_int_eq(rill_session_record_header(rec, 0, 1, NULL, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_session_record_header(rec, 7, 1, NULL, 0), RILL_EINVAL);
    ck_assert_int_eq(rill_session_record_header(rec, RILL_SESSION_REC_TEXT, 1, NULL, 3),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_session_record_header(NULL, RILL_SESSION_REC_TEXT, 1, NULL, 0),
                     RILL_EINVAL);
    ck_assert_int_eq(rill_session_record_parse(NULL, 24, &r), RILL_EINVAL);
}
END_TEST

int main(void) {
    if (!test_tmpdir_make(g_dir, sizeof g_dir, "records")) {
        return EXIT_FAILURE;
    }
    Suite *su = suite_create("session_records");
    TCase *tc = tcase_create("frames");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, damaged_frames_are_refused);
    if (test_have_models(MODEL, NULL)) {
        tcase_add_test(tc, header_is_the_logs_record_frame);
    }
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    test_dir_remove(g_dir);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
