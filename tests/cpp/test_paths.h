// Where the tests find the build's files (the binary, the references, scratch space, mpirun).
// One small object (test_paths.cpp) is compiled with the checkout's paths, so the test sources'
// own compile lines carry none, and ccache serves a clone at another path (docs/testing.md).
#pragma once

namespace shardtrain::test_paths {
extern const char* const kRefDir;     // the Python references' output (build/tests/reference)
extern const char* const kTestTmp;    // scratch space (build/tests/tmp)
extern const char* const kSourceDir;  // the checkout
extern const char* const kMpiexec;    // "mpirun --allow-run-as-root --oversubscribe -np "
extern const char* const kBin;        // the shardtrain binary
extern const char* const kPython;     // the venv's python, with transformers, PEFT, TRL, Pillow
}  // namespace shardtrain::test_paths

#define SHARDTRAIN_REF_DIR ::shardtrain::test_paths::kRefDir
#define SHARDTRAIN_TEST_TMP ::shardtrain::test_paths::kTestTmp
#define SHARDTRAIN_SOURCE_DIR ::shardtrain::test_paths::kSourceDir
#define SHARDTRAIN_MPIEXEC ::shardtrain::test_paths::kMpiexec
#define SHARDTRAIN_BIN ::shardtrain::test_paths::kBin
#define SHARDTRAIN_PYTHON ::shardtrain::test_paths::kPython
