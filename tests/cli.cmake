# The rill command end to end (tests/test_cli.py, with the system python3: it needs no packages).
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME test_cli COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_cli.py
         $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/../shared)
set_tests_properties(test_cli PROPERTIES TIMEOUT 600 LABELS "integration" SKIP_RETURN_CODE 77)
# `rill transcribe` (tests/test_transcribe_cli.py): its --json lines, the transcript against
# faster-whisper's, --pace, errors. Exits 77 without models/whisper-tiny.en.gguf.
if(TARGET rill_scheduler AND TARGET rill_ingest)
    add_test(NAME test_transcribe_cli
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_transcribe_cli.py
             $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
    set_tests_properties(test_transcribe_cli PROPERTIES TIMEOUT 600 LABELS "integration"
                         SKIP_RETURN_CODE 77)
    # The CI size of bench/transcribe_eval.py (tests/test_transcribe_eval.py): --small on two
    # short LibriVox clips with tiny.en, its output checked against the recorded faster-whisper
    # transcripts and word ends. Release builds only (a sanitizer build changes nothing it
    # measures and triples its time). Needs the .venv (jiwer); skips without it or the model.
    if(RILL_SANITIZE STREQUAL "")
        if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
            set(rill_eval_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
        else()
            set(rill_eval_python ${Python3_EXECUTABLE})
        endif()
        add_test(NAME bench_transcribe_eval_small
                 COMMAND ${rill_eval_python} ${CMAKE_CURRENT_SOURCE_DIR}/test_transcribe_eval.py
                         $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
        set_tests_properties(bench_transcribe_eval_small PROPERTIES TIMEOUT 600
                             LABELS "integration;bench" SKIP_RETURN_CODE 77)
    endif()
endif()
# The translation benchmark's metrics (tests/test_simul_metrics.py): LAAL, the minimum-WER
# re-segmentation, StreamLAAL and its computation-aware delays, the cascade's records, on
# hand-made cases with known answers. No engine; needs numpy (the .venv), skips without it.
if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(rill_metrics_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
else()
    set(rill_metrics_python ${Python3_EXECUTABLE})
endif()
add_test(NAME bench_simul_metrics
         COMMAND ${rill_metrics_python} ${CMAKE_CURRENT_SOURCE_DIR}/test_simul_metrics.py
                 ${PROJECT_SOURCE_DIR})
set_tests_properties(bench_simul_metrics PROPERTIES TIMEOUT 120 LABELS "bench"
                     SKIP_RETURN_CODE 77)
# `rill translate --text` (tests/test_translate_cli.py) on the tiny qwen2 model: its --json lines,
# wait-k's first emission, the plain output, --help, errors. Exits 77 without the tiny models.
if(TARGET rill_scheduler)
    add_test(NAME test_translate_cli
             COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_translate_cli.py
             $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
    set_tests_properties(test_translate_cli PROPERTIES TIMEOUT 600 LABELS "integration"
                         SKIP_RETURN_CODE 77)
    # The CI size of bench/translate_eval.py (tests/test_translate_eval.py): 3 dev verses, text
    # and retranslate rows on the tiny qwen2 model, the pocketsphinx + Apertium cascade on the
    # espeak-ng talk; the rows, BLEU recomputed, the figure, bad arguments. Release builds only,
    # as bench_transcribe_eval_small; skips without sacreBLEU (scripts/setup.sh --translate),
    # pocketsphinx or apertium (--speech, --translate) or the tiny models.
    if(RILL_SANITIZE STREQUAL "")
        add_test(NAME bench_translate_eval_small
                 COMMAND ${rill_metrics_python} ${CMAKE_CURRENT_SOURCE_DIR}/test_translate_eval.py
                         $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
        set_tests_properties(bench_translate_eval_small PROPERTIES TIMEOUT 600
                             LABELS "integration;bench" SKIP_RETURN_CODE 77)
    endif()
    # `rill translate --audio` (tests/test_translate_audio.py): tiny.en on a two-sentence
    # espeak-ng clip feeding the tiny qwen2 model; skips without them or espeak-ng.
    if(TARGET rill_ingest)
        add_test(NAME test_translate_audio
                 COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_translate_audio.py
                 $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
        set_tests_properties(test_translate_audio PROPERTIES TIMEOUT 900 LABELS "integration"
                             SKIP_RETURN_CODE 77)
    endif()
endif()
