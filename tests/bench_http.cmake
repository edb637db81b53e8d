# The CI size of bench/bench_http.py (the two front doors side by side): it runs, every figure it
# prints is finite and > 0, no request fails, every event reaches both subscribers, and rilld
# exits 0 on SIGTERM. Speed is not checked (the bench's full run is for docs/benchmarks.md).
# Uses tests/server.cmake's RILL_SERVER_TEST_PYTHON; skips without the .venv or the model.
add_test(NAME bench_http_quick
         COMMAND ${RILL_SERVER_TEST_PYTHON} ${PROJECT_SOURCE_DIR}/bench/bench_http.py
                 --rilld $<TARGET_FILE_DIR:rill>/rilld --quick --check --json)
set_tests_properties(bench_http_quick PROPERTIES TIMEOUT 300 LABELS "integration;bench"
                     SKIP_RETURN_CODE 77)
