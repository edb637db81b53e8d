# The forward pass against llama.cpp's reference logits and greedy continuations (needs the tiny
# test models that scripts/test.sh regenerates, and the default model).
rill_test(test_forward SOURCES test_forward.c LIBS rill_forward LABELS "unit;integration"
          TIMEOUT 900)
