# Tests of the ingest module: msgpack and CSV tick decoding (malformed, truncated, hostile
# counts, allocation failures), formatting, the rate governor, the synthetic market, and the
# text cleaner's chunk invariance. No model needed.
rill_test(test_ingest SOURCES test_ingest.c LIBS rill_ingest PkgConfig::MSGPACK LABELS unit
          TIMEOUT 300)
# The market truth: hand-made lines and answers, every kind and rule (rill_market_truth.h).
rill_test(test_market_truth SOURCES test_market_truth.c LIBS rill_ingest LABELS unit TIMEOUT 120)
# The audio sources (rill_audio.h): resampling accuracy, WAV/FLAC/Ogg Opus files made at test
# time, Opus and pcm16 packets with loss, garbage and bounds, capture through its callback and
# through ALSA's null device where PortAudio offers it (a real callback thread: label
# concurrency, so the ThreadSanitizer pass runs it), voice activity. No model, no sound card.
rill_test(test_audio SOURCES test_audio.c LIBS rill_ingest PkgConfig::SNDFILE PkgConfig::OPUS
          PkgConfig::PORTAUDIO m LABELS "unit;concurrency" TIMEOUT 300)
