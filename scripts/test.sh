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
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# ctest runs $(nproc) tests at once and mpiruns of up to 6 ranks among them, so cores are always
# oversubscribed: ranks waiting in MPI yield the core instead of spinning on it (a 1-thread run
# beside a spinning 4-rank job took 33 s, 18 s beside a yielding one, 12 s alone), and a process
# takes 1 LibTorch thread unless its test asks for more (a 2-thread run with a core shared halts
# at every parallel region's barrier: 37 s against 20 s with 1 thread).
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
# Open MPI removes its session directory's top (TMPDIR/ompi.HOST.UID) when it is left empty at a
# job's end; ctest runs mpiruns side by side, and one starting then fails to make its directory
# there ("A call to mkdir was unable to create..."). A file kept in it keeps it.
ompi_top="${TMPDIR:-/tmp}/ompi.$(hostname -s).$(id -u)"
mkdir -p -m 700 "$ompi_top" && touch "$ompi_top/.keep"
# The `timing` label (a timed validation of the planner) runs by hand: SHARDTRAIN_TIMING=1 keeps it.
labels=(-LE 'timing|slow')
[ "${SHARDTRAIN_TIMING:-0}" = 1 ] && labels=(-LE slow)
[ "$slow" = 1 ] && labels=(-L slow)
# The skipped tests (GTEST_SKIP, exit 77: no GPU, mount or namespaces refused...) counted by reason at the end.
rc=0
ctest --output-on-failure -j "${JOBS:-$(nproc)}" "${labels[@]}" --output-junit "$PWD/ctest-junit.xml" "$@" || rc=$?
python3 "$repo/scripts/skip_summary.py" "$PWD/ctest-junit.xml" || true
[ "$rc" = 0 ] || exit "$rc"
# The ASan + UBSan build, its tests and 20 s of each fuzz target (docs/reliability.md).
[ "$slow" = 0 ] || "$repo/scripts/sanitize.sh"
