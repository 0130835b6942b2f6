#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test with ctest, and with
# SHARDTRAIN_SANITIZE=1 the sanitizer and fuzzing job (scripts/sanitize.sh). The job is off by
# default until its time on a fresh 2-core machine is measured (docs/reliability.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/install-deps.sh"
"$repo/scripts/build.sh"
cd "${BUILD_DIR:-$repo/build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "$@"
# The ASan + UBSan build, its tests and 20 s of each fuzz target (docs/reliability.md).
[ "${SHARDTRAIN_SANITIZE:-0}" != 1 ] || "$repo/scripts/sanitize.sh"
