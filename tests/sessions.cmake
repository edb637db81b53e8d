# Tests of the sessions module (paged pool, fork / copy-on-write, rollback, window eviction,
# query, text append). Needs the tiny test models (tools/make_test_models.py); skips without.
rill_test(test_sessions SOURCES test_sessions.c LIBS rill_sessions LABELS unit TIMEOUT 600)
rill_test(test_sessions_ref SOURCES test_sessions_ref.c LIBS rill_sessions LABELS "unit;integration"
          TIMEOUT 600)
rill_test(test_sessions_durability SOURCES test_sessions_durability.c LIBS rill_sessions LABELS unit
          TIMEOUT 600)
# Inputs as records and replace (issue 15 part 2): against a fresh prefill, bit for bit.
rill_test(test_sessions_replace SOURCES test_sessions_replace.c LIBS rill_sessions LABELS unit
          TIMEOUT 600)
