// The configure-time paths of test_paths.h (tests/CMakeLists.txt defines them for this file only).
#include "test_paths.h"

namespace shardtrain::test_paths {
const char* const kRefDir = SHARDTRAIN_CFG_REF_DIR;
const char* const kTestTmp = SHARDTRAIN_CFG_TEST_TMP;
const char* const kSourceDir = SHARDTRAIN_CFG_SOURCE_DIR;
const char* const kMpiexec = SHARDTRAIN_CFG_MPIEXEC;
const char* const kBin = SHARDTRAIN_CFG_BIN;
const char* const kPython = SHARDTRAIN_CFG_PYTHON;
}  // namespace shardtrain::test_paths
