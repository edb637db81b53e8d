# rilld's HTTP door (tests/test_http.py): rill's routes and SSE, the OpenAI API through the
# openai package, curl, bearer tokens, hostile HTTP. One CTest per test, like tests/server.cmake
# (whose RILL_SERVER_TEST_PYTHON it uses); they skip without the .venv or the default model.
foreach(t routes events openai budget curl tokens both_doors metrics hostile stop)
    add_test(NAME test_http_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_http.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_http_${t} PROPERTIES TIMEOUT 300 LABELS "integration"
                         SKIP_RETURN_CODE 77)
endforeach()
