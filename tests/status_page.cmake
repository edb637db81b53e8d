# rilld's status page (GET /, server/status.html) in headless chromium through selenium
# (tests/test_status_page.py): the page against the HTTP routes and the session's own event
# stream, with and without --http-tokens. One CTest per test, like tests/http.cmake (whose
# RILL_SERVER_TEST_PYTHON it uses); they skip without selenium, chromium, chromedriver or the
# default model. $RILL_SCREENSHOT_DIR, when set, receives the screenshots.
foreach(t page tokens)
    add_test(NAME test_status_page_${t}
             COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_status_page.py
                     $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR} ${t})
    set_tests_properties(test_status_page_${t} PROPERTIES TIMEOUT 300 LABELS "integration"
                         SKIP_RETURN_CODE 77)
endforeach()
# The captions page (GET /captions/NAME, server/captions.html) in headless chromium
# (tests/test_captions_page.py): a translation session fed an espeak-ng clip at real time, the
# page's captions and transcript against the events the engine published. Skips without
# selenium, chromium, chromedriver, espeak-ng, whisper-tiny.en or the tiny models.
add_test(NAME test_captions_page
         COMMAND ${RILL_SERVER_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/test_captions_page.py
                 $<TARGET_FILE:rill> ${PROJECT_SOURCE_DIR})
set_tests_properties(test_captions_page PROPERTIES TIMEOUT 400 LABELS "integration"
                     SKIP_RETURN_CODE 77)
