# Tests of the tokenizer (model/tokenizer*.c): llama.cpp's reference tokenizations of the shared
# vocabulary files and of every tests/data/ref/<model>.gguf.inp whose model is present, plus
# round trips, streaming, special tokens, malformed metadata and allocation failures.
rill_test(test_tokenizer SOURCES test_tokenizer.c LIBS rill_model LABELS unit TIMEOUT 600)
