# Tests of the ingest module: msgpack and CSV tick decoding (malformed, truncated, hostile
# counts, allocation failures), formatting, the rate governor, the synthetic market, and the
# text cleaner's chunk invariance. No model needed.
rill_test(test_ingest SOURCES test_ingest.c LIBS rill_ingest PkgConfig::MSGPACK LABELS unit
          TIMEOUT 300)
# The market truth: hand-made lines and answers, every kind and rule (rill_market_truth.h).
rill_test(test_market_truth SOURCES test_market_truth.c LIBS rill_ingest LABELS unit TIMEOUT 120)
