// gtest_main with skip_aware_status: a ctest whose case skipped reports Skipped; the static
// destructors are skipped (fast_exit.h).
#include "gtest_skip.h"

#include "shardtrain/runtime/fast_exit.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  shardtrain::runtime::fast_exit(skip_aware_status(RUN_ALL_TESTS()));
}
