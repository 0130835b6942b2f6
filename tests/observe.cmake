# Observability: unit tests of the parts, then real runs (mpirun, curl, promtool) end to end.
shardtrain_test(test_observe SOURCES cpp/obs/test_observe.cpp)
set(observe_args --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --tmp ${TEST_TMP}/observe
    --repo ${PROJECT_SOURCE_DIR})
foreach(case endpoint watchdog)
  add_test(NAME Observe.${case} COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/observe_tests.py ${case}
           ${observe_args})
  set_tests_properties(Observe.${case} PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300 SKIP_RETURN_CODE 77)  # 77: no promtool
endforeach()
# The endpoint under 20 s of load (50 scrapers and bad clients) while one rank trains: every
# scrape answered, step time within 5% of the quiet windows. Serial: it measures step times.
add_test(NAME Observe.metrics_load COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/metrics_load.py
         --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --tmp ${TEST_TMP}/observe)
set_tests_properties(Observe.metrics_load PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 240 RUN_SERIAL TRUE
                     SKIP_RETURN_CODE 77)  # 77: the quiet windows drift by more than 5% (a busy machine)
# A watchdog thread whose own work fails (a sticky CUDA error, injected as a failing completion
# probe) ends the job with one line naming rank, host and error and exit code 76.
shardtrain_test_exe(test_watchdog_failure cpp/obs/test_watchdog_failure.cpp)
gtest_discover_tests(test_watchdog_failure DISCOVERY_TIMEOUT 60 PROPERTIES PROCESSORS 2 TIMEOUT 180)
