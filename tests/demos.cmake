# The market demo end to end (demos/market/run.sh with rilld and the default model, a few
# seconds): the README's main job, shortened.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME test_market_demo
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_market_demo.py
                 ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
set_tests_properties(test_market_demo PROPERTIES TIMEOUT 300 LABELS "integration"
                     SKIP_RETURN_CODE 77)
# The translation demo end to end (demos/translate/run.sh, what `scripts/run.sh translate FILE`
# runs): the tiny qwen2 model and whisper-tiny.en on an espeak-ng clip at 2x real time.
add_test(NAME test_translate_demo
         COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/test_translate_demo.py
                 $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
set_tests_properties(test_translate_demo PROPERTIES TIMEOUT 600 LABELS "integration"
                     SKIP_RETURN_CODE 77)
