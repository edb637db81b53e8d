# rilld over loopback (tests/test_server.py): the command set and its errors, malformed frames,
# CURVE ownership, a slow subscriber, restarts, --config, sleeping sessions. One CTest per test
# so that ctest -j runs them side by side (each picks free ports and its own state directory).
# They need pyzmq and msgpack: the project's .venv (scripts/setup.sh); without them, or without the default model, they skip.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(RILL_SERVER_TEST_PYTHON ${PROJECT_SOURCE_DIR}/.venv/bin/python)
else()
    set(RILL_SERVER_TEST_PYTHON ${Python3_EXECUTABLE})
endif()
foreach(t commands malformed curve slow_subscriber restart config models replace sleep)
    add_test(NAME test_server_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_server_${t} PROPERTIES TIMEOUT 300 LABELS "integration"
                         SKIP_RETURN_CODE 77)
endforeach()
# The engine-to-socket event queue of rilld (server/events.c), through the module's private
# header, with a fake front door.
rill_test(test_server_events SOURCES test_server_events.c LIBS rill_server PkgConfig::MSGPACK
          LABELS "unit;concurrency")
# server.metrics' Prometheus text (server/metrics.c's renderer, through the private header)
# from known figures, and the command through srv_handle over the tiny model with a fake door.
rill_test(test_server_metrics SOURCES test_server_metrics.c LIBS rill_server PkgConfig::MSGPACK
          LABELS unit TIMEOUT 120)
# server.metrics over loopback: the Prometheus text checked by promtool (Debian's prometheus
# package, scripts/setup.sh) and its counters against what the test sent.
add_test(NAME test_server_metrics_live
         COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server.py
                 $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} metrics)
set_tests_properties(test_server_metrics_live PROPERTIES TIMEOUT 300 LABELS "integration"
                     SKIP_RETURN_CODE 77)
# The HTTP door's JSON <-> msgpack walk (server/json.c).
rill_test(test_server_json SOURCES test_server_json.c LIBS rill_server PkgConfig::MSGPACK
          LABELS unit TIMEOUT 60)

# ---- the Python client (clients/python, module rill_client: tests/test_python_client.py) ----
# Against a real rilld (free ports, the default model) and a fake one; `install` pip-installs
# clients/python into a fresh virtual environment offline (it skips where setuptools cannot
# build a wheel without network: the wheel package of tools/requirements.txt is missing).
foreach(t commands complete errors events gaps curve fake install audio)
    add_test(NAME test_python_client_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_python_client.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_python_client_${t} PROPERTIES TIMEOUT 300 LABELS "integration"
                         SKIP_RETURN_CODE 77)
endforeach()
# Speech sessions over loopback (tests/test_server_speech.py): a LibriVox clip as pcm16 and Opus
# packets into a transcript-only session and a language model's session with a recognizer,
# against `rill transcribe --json`; hostile ingest.audio frames; a client vanishing mid-stream;
# a restart.
# Skips without whisper-tiny.en, the clip, or PyAV and numpy in .venv.
# The Opus case runs in the release build only: after the packet decoder (which test_audio and
# the fuzzer run under the sanitizers) its path is the pcm16 case's.
set(rill_speech_cases pcm16 hostile vanish restart)
if(RILL_SANITIZE STREQUAL "")
    list(APPEND rill_speech_cases opus)
endif()
foreach(t ${rill_speech_cases})
    add_test(NAME test_server_speech_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_speech.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_server_speech_${t} PROPERTIES TIMEOUT 300 LABELS "integration"
                         SKIP_RETURN_CODE 77)
endforeach()
# Translation sessions over loopback (tests/test_server_translate.py): session.create with
# translate on the tiny qwen2 model and whisper-tiny.en, an espeak-ng clip as ingest.audio, the
# translation events against the transcript events, bad args, close and SIGTERM while the worker
# threads translate (concurrency: run it in the ThreadSanitizer pass too, libzmq's own threads
# suppressed: tests/tsan_libzmq.supp). Skips without them.
foreach(t events errors stop)
    add_test(NAME test_server_translate_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_server_translate.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_server_translate_${t} PROPERTIES TIMEOUT 300
                         LABELS "integration;concurrency" SKIP_RETURN_CODE 77
                         ENVIRONMENT
                         "TSAN_OPTIONS=halt_on_error=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan_libzmq.supp")
endforeach()
