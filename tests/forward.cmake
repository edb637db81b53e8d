# The forward pass against llama.cpp's reference logits and greedy continuations (needs the tiny
# test models that scripts/test.sh regenerates, and the default model).
rill_test(test_forward SOURCES test_forward.c LIBS rill_forward LABELS "unit;integration"
          TIMEOUT 900)
# Whisper's log-mel front end (forward/whisper_mel.c) against faster-whisper's features
# (tests/data/ref/whisper/mel_*.f32); needs pocketsphinx-testdata's LibriVox clip (exits 77
# without it), no model.
rill_test(test_whisper_mel SOURCES test_whisper_mel.c LIBS rill_forward LABELS unit TIMEOUT 120)
