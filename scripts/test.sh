#!/usr/bin/env bash
# The test command (CI's): installs what is missing, builds, runs every ctest test but the slow
# ones and the timed planner check. Further arguments go to ctest.
# --slow: instead, the slow suites: the ctest tests labelled `slow` (the GPU suite's CPU smoke
# test), then the sanitizer and fuzzing job (scripts/sanitize.sh; docs/reliability.md).
# --containers: instead, the slow container suite (containers/test.sh: builds the image with
# podman from nothing, runs the demo inside it and the hybrid launch; docs/containers.md).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/scripts/install-deps.sh"
if [ "${1:-}" = --containers ]; then
  BUILD_TARGET=shardtrain "$repo/scripts/build.sh"
  exec "$repo/containers/test.sh"
fi
slow=0
[ "${1:-}" = --slow ] && slow=1 && shift
"$repo/scripts/build.sh"
cd "${BUILD_DIR:-$repo/build}"
source "$repo/scripts/test_env.sh"
# The `timing` label (a timed validation of the planner) runs by hand: SHARDTRAIN_TIMING=1 keeps it.
labels=(-LE 'timing|slow')
[ "${SHARDTRAIN_TIMING:-0}" = 1 ] && labels=(-LE slow)
[ "$slow" = 1 ] && labels=(-L slow)
# The skipped tests (GTEST_SKIP, exit 77: no GPU, mount or namespaces refused...) counted by reason at the end.
rc=0
ctest --output-on-failure -j "$test_jobs" "${labels[@]}" --output-junit "$PWD/ctest-junit.xml" "$@" || rc=$?
python3 "$repo/scripts/skip_summary.py" "$PWD/ctest-junit.xml" || true
[ "$rc" = 0 ] || exit "$rc"
# The ASan + UBSan build, its tests and 20 s of each fuzz target (docs/reliability.md).
[ "$slow" = 0 ] || "$repo/scripts/sanitize.sh"
