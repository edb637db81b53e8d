# Tests of the tokenizer (model/tokenizer*.c): llama.cpp's reference tokenizations of the shared
# vocabulary files and of every tests/data/ref/<model>.gguf.inp whose model is present, plus
# round trips, streaming, special tokens, malformed metadata and allocation failures.
rill_test(test_tokenizer SOURCES test_tokenizer.c LIBS rill_model LABELS unit TIMEOUT 600)
# The converted Whisper GGUF (tools/whisper_to_gguf.py) through the reader and the tokenizer,
# against Hugging Face tokenizers' ids (tests/data/ref/whisper/tokens.tsv); exits 77 without
# models/whisper-tiny.en.gguf (scripts/setup.sh makes it).
rill_test(test_whisper_vocab SOURCES test_whisper_vocab.c LIBS rill_model LABELS unit TIMEOUT 120)
# tools/whisper_to_gguf.py on synthetic CTranslate2 checkpoints: exact tensors and metadata,
# determinism, and a clear refusal (no file left) of every malformed input. Needs .venv (numpy,
# gguf), which set-up makes; registered only where .venv exists.
if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    add_test(NAME test_whisper_convert
             COMMAND ${PROJECT_SOURCE_DIR}/.venv/bin/python
                     ${CMAKE_CURRENT_SOURCE_DIR}/test_whisper_convert.py ${PROJECT_SOURCE_DIR})
    set_tests_properties(test_whisper_convert PROPERTIES TIMEOUT 300 LABELS "unit")
endif()
