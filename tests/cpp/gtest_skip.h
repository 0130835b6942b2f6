// ctest's SKIP_RETURN_CODE for gtest programs: a run in which every case skipped (GTEST_SKIP) and
// none failed exits SHARDTRAIN_SKIP_STATUS, so ctest reports it Skipped, not Passed.
#pragma once
#include <gtest/gtest.h>

// rc: RUN_ALL_TESTS()'s; a run with a case that ran and passed keeps it.
inline int skip_aware_status(int rc) {
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  return rc == 0 && u.successful_test_count() == 0 && u.skipped_test_count() > 0
             ? SHARDTRAIN_SKIP_STATUS
             : rc;
}
