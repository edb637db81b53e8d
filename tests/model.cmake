# Tests of the model module (GGUF reader, loader, sampler, chat templates). Tests that need the
# default model (models/SmolLM2-135M-Instruct.Q4_1.gguf) skip themselves when it is absent.
rill_test(test_model SOURCES test_model.c LIBS rill_model LABELS unit TIMEOUT 600)
