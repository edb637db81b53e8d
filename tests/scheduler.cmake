# Tests of the scheduler (engine step loop). Needs the tiny test models; skips without.
# test_scheduler_stress (16 sessions, 4 client threads, the same binary with --stress) is
# labelled concurrency, so scripts/test.sh also runs it under ThreadSanitizer.
rill_test(test_scheduler SOURCES test_scheduler.c LIBS rill_scheduler LABELS unit TIMEOUT 600)
add_test(NAME test_scheduler_stress COMMAND test_scheduler --stress)
set_tests_properties(test_scheduler_stress PROPERTIES TIMEOUT 900 LABELS "unit;concurrency"
                     ENVIRONMENT "CK_FORK=no" SKIP_RETURN_CODE 77)
# Sessions that sleep (rill_scheduler.h "Sleeping sessions"): answers after a wake against an
# engine whose sessions never sleep, both tiers, pins, idle time, the disk budget, and the
# failure paths (injected write and allocation failures, damaged sleep files).
rill_test(test_sched_sleep SOURCES test_sched_sleep.c LIBS rill_scheduler LABELS unit TIMEOUT 600)
# The streaming transcript (scheduler/rill_transcript.h): pure logic, no model.
rill_test(test_transcript SOURCES test_transcript.c LIBS rill_scheduler LABELS unit TIMEOUT 60)
# The streaming recognizer (scheduler/rill_asr.h) with whisper-tiny.en on the espeak clip and a
# LibriVox clip (against faster-whisper's transcripts), a 10-minute stream's memory, forced
# trims, bad input, failed allocations. Exits 77 without models/whisper-tiny.en.gguf.
rill_test(test_asr SOURCES test_asr.c LIBS rill_scheduler LABELS integration TIMEOUT 900)
# Recognizers as an engine work class (rill_scheduler.h "speech recognizers"): a consumer
# session fed the transcript (against rill_asr driven directly), other sessions not held up,
# bad feeds, failed allocations. Exits 77 without whisper-tiny.en or the tiny test models.
# Labelled concurrency too: the audio queue, the engine's wake-up and the updates cross threads,
# so the ThreadSanitizer pass runs it (about two minutes there).
rill_test(test_sched_speech SOURCES test_sched_speech.c LIBS rill_scheduler
          LABELS integration concurrency TIMEOUT 900)
# Endpoint anticipation (scheduler/rill_endpoint.h: predictor and driver, pure logic) and the
# end-of-turn mass of the scheduler (needs the tiny qwen2 model; those cases are left out
# without it).
rill_test(test_endpoint SOURCES test_endpoint.c LIBS rill_scheduler LABELS unit TIMEOUT 300)
# The simultaneous translation session (scheduler/rill_translate.h) on the tiny qwen2 model:
# policies' emission rules, nothing taken back, exact revisions, bounded memory, failures.
rill_test(test_translate SOURCES test_translate.c LIBS rill_scheduler LABELS unit TIMEOUT 600)
# The issue's memory test: an hour of speech and noise through the recognizer, RSS and core's
# live bytes sampled every minute (the same binary, RILL_TEST_ASR_HOUR selects that test). A few
# minutes in a release build; not registered in sanitizer builds (RSS there is the sanitizer's,
# and it would take far longer than the suite's budget).
if(RILL_SANITIZE STREQUAL "")
    add_test(NAME test_asr_hour COMMAND test_asr)
    set_tests_properties(test_asr_hour PROPERTIES TIMEOUT 1200 LABELS "integration;slow"
                         ENVIRONMENT "CK_FORK=no;RILL_TEST_ASR_HOUR=1" SKIP_RETURN_CODE 77)
endif()
