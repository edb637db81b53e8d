# Tests of the tokenizer (model/tokenizer*.c): llama.cpp's reference tokenizations of the shared
# vocabulary files and of every tests/data/ref/<model>.gguf.inp whose model is present, plus
# round trips, streaming, special tokens, malformed metadata and allocation failures.
rill_test(test_tokenizer SOURCES test_tokenizer.c LIBS rill_model LABELS unit TIMEOUT 600)
# The converted Whisper GGUF (tools/whisper_to_gguf.py) through the reader and the tokenizer,
# against Hugging Face tokenizers' ids (tests/data/ref/whisper/tokens.tsv); exits 77 without
# models/whisper-tiny.en.gguf (scripts/setup.sh makes it).
rill_test(test_whisper_vocab SOURCES test_whisper_vocab.c LIBS rill_model LABELS unit TIMEOUT 120)
