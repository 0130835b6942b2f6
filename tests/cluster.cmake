# Cluster integration: a real Slurm on localhost (munge + slurmctld + slurmd, started and stopped by
# PID by the fixture), the real slurm/train.sbatch, slurm/sweep.sh and launch/mpirun.sh.
set(SLURM_DIR ${TEST_TMP}/slurm)
add_test(NAME slurm_up COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/local-slurm.sh start ${SLURM_DIR})
add_test(NAME slurm_down COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/local-slurm.sh stop ${SLURM_DIR})
set_tests_properties(slurm_up PROPERTIES FIXTURES_SETUP slurm SKIP_RETURN_CODE 77 RESOURCE_LOCK slurm)
set_tests_properties(slurm_down PROPERTIES FIXTURES_CLEANUP slurm RESOURCE_LOCK slurm)
set(cluster_args --repo ${PROJECT_SOURCE_DIR} --bin $<TARGET_FILE:shardtrain> --data ${TEST_TMP}/demo/train.h5
    --tmp ${TEST_TMP}/cluster --slurm-dir ${SLURM_DIR})
# The time-limit job is submitted first and checked last: Slurm's 1-minute minimum limit passes
# while the other cases run (its trainer paced by --debug-sleep, so it takes no core from them).
add_test(NAME Slurm.timelimit_submit COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_tests.py timelimit_submit ${cluster_args})
set_tests_properties(Slurm.timelimit_submit PROPERTIES FIXTURES_REQUIRED "slurm;demo_data" FIXTURES_SETUP slurm_timelimit
                     RESOURCE_LOCK slurm SKIP_RETURN_CODE 77)
set(slurm_cases training requeue failfast sweep scancel finetune)
foreach(case ${slurm_cases} timelimit)
  add_test(NAME Slurm.${case} COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_tests.py ${case} ${cluster_args})
  # One Slurm node: the jobs of different tests would otherwise share (and time) it. Each case
  # needs slurm_timelimit only so that its submission comes first.
  set_tests_properties(Slurm.${case} PROPERTIES FIXTURES_REQUIRED "slurm;demo_data;slurm_timelimit" RESOURCE_LOCK slurm
                       SKIP_RETURN_CODE 77 TIMEOUT 900)
endforeach()
list(TRANSFORM slurm_cases PREPEND Slurm.)
# After the other Slurm cases and two long entries elsewhere: by then the minute has passed.
set_tests_properties(Slurm.timelimit PROPERTIES DEPENDS "${slurm_cases};dpo_trl;model_variants")
add_test(NAME Launch.mpirun_hostfile COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_tests.py mpirun ${cluster_args})
set_tests_properties(Launch.mpirun_hostfile PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300)
add_test(NAME Launch.mpirun_finetune COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_tests.py mpirun_finetune ${cluster_args})
set_tests_properties(Launch.mpirun_finetune PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300)
add_test(NAME Launch.mpirun_sigterm COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/slurm/slurm_tests.py mpirun_sigterm ${cluster_args})
set_tests_properties(Launch.mpirun_sigterm PROPERTIES FIXTURES_REQUIRED demo_data TIMEOUT 300)
add_test(NAME Containers.pinned_and_complete COMMAND ${SHARDTRAIN_PYTHON} ${PROJECT_SOURCE_DIR}/tests/python/check_containers.py
         --self-test ${PROJECT_SOURCE_DIR})
add_test(NAME Launch.binding COMMAND bash ${PROJECT_SOURCE_DIR}/tests/launch/test_binding.sh)
