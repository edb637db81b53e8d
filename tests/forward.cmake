# The forward pass against llama.cpp's reference logits and greedy continuations (needs the tiny
# test models that scripts/test.sh regenerates, and the default model).
rill_test(test_forward SOURCES test_forward.c LIBS rill_forward LABELS "unit;integration"
          TIMEOUT 900)
# Whisper (forward/whisper.c) against CTranslate2 on the same weights: encoder output, decoder
# logits and greedy transcripts against tests/data/ref/whisper/ (parts skip without those files),
# plus the decoder's batching contracts and its failure paths. Exits 77 without
# models/whisper-tiny.en.gguf (scripts/setup.sh makes it; RILL_TEST_WHISPER_DIR overrides).
rill_test(test_whisper SOURCES test_whisper.c LIBS rill_forward LABELS "unit;integration"
          TIMEOUT 900)
# Whisper's log-mel front end (forward/whisper_mel.c) against faster-whisper's features
# (tests/data/ref/whisper/mel_*.f32); needs pocketsphinx-testdata's LibriVox clip (exits 77
# without it), no model.
rill_test(test_whisper_mel SOURCES test_whisper_mel.c LIBS rill_forward LABELS unit TIMEOUT 120)
