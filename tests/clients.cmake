# The C client (clients/rill_client.h) against the real daemon (`rill serve` on free ports, the
# default model, one thread) and against a hostile fake server; and the rill command's client
# sub-commands end to end, CURVE included (test_client_cli.py, system python3, no packages).
rill_test(test_client SOURCES test_client.c
          LIBS rill_client rill_core PkgConfig::ZMQ PkgConfig::MSGPACK Threads::Threads
          LABELS integration TIMEOUT 180)
target_compile_definitions(test_client PRIVATE RILL_BIN="$<TARGET_FILE:rill>")
add_dependencies(test_client rill)

find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME test_client_cli
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_client_cli.py
                 $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
set_tests_properties(test_client_cli PROPERTIES TIMEOUT 300 LABELS "integration"
                     SKIP_RETURN_CODE 77)
