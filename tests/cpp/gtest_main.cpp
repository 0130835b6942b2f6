// gtest_main with skip_aware_status: a ctest whose case skipped reports Skipped.
#include "gtest_skip.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return skip_aware_status(RUN_ALL_TESTS());
}
