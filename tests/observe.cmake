# Observability: unit tests of the parts, then real runs (mpirun, curl, promtool) end to end.
shardtrain_test(test_observe SOURCES cpp/obs/test_observe.cpp)
set(observe_args --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --tmp ${TEST_TMP}/observe
    --repo ${PROJECT_SOURCE_DIR})
foreach(case endpoint watchdog)
  add_test(NAME Observe.${case} COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/observe_tests.py ${case}
           ${observe_args})
  set_tests_properties(Observe.${case} PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300 SKIP_RETURN_CODE 77)  # 77: no promtool
endforeach()
# The endpoint under 6 s of load (50 scrapers and bad clients; the server's deadline is 5 s) while
# one rank trains: every scrape answered, every bad client cut off. The quiet windows only feed the
# printed step times, which bench/metrics_load.sh judges on a quiet machine: half a second here.
add_test(NAME Observe.metrics_load COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/metrics_load.py
         --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --tmp ${TEST_TMP}/observe --load-s 6 --off-s 0.5)
set_tests_properties(Observe.metrics_load PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 240)
# A watchdog thread whose own work fails (a sticky CUDA error, injected as a failing completion
# probe) ends the job with one line naming rank, host and error and exit code 76.
shardtrain_test_exe(test_watchdog_failure cpp/obs/test_watchdog_failure.cpp)
gtest_discover_tests(test_watchdog_failure DISCOVERY_TIMEOUT 60 PROPERTIES PROCESSORS 2 TIMEOUT 180
  SKIP_RETURN_CODE ${SHARDTRAIN_SKIP_STATUS})
# MLflow: the REST client's limits and key rules, the tracker against silent and closed ports; then
# --mlflow-uri against a real `mlflow server` (the venv's mlflow), read back with MLflow's client.
shardtrain_test(test_mlflow WHOLE SOURCES cpp/obs/test_mlflow.cpp)
add_test(NAME Observe.mlflow COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/mlflow_tests.py
         --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --tmp ${TEST_TMP}/mlflow --repo ${PROJECT_SOURCE_DIR})
set_tests_properties(Observe.mlflow PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300 PROCESSORS 2)
# --tensorboard at 2 ranks, read back with TensorBoard's own readers: a SIGTERM mid-run leaves
# every logged step readable, a resume appends a file whose merged scalars equal the metrics file.
add_test(NAME Observe.tensorboard COMMAND ${SHARDTRAIN_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/check_tensorboard.py
         --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5 --val-data ${TEST_TMP}/demo/train.val.h5
         --tmp ${TEST_TMP}/observe)
set_tests_properties(Observe.tensorboard PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 180 PROCESSORS 2)
