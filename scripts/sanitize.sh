#!/usr/bin/env bash
# CI's sanitizer and fuzzing job (docs/reliability.md): one clang build with ASan + UBSan and
# libFuzzer's coverage (SHARDTRAIN_FUZZ=ON) in build-san/, of only what it runs: the libraries up
# to train, the unit tests, the MPI test programs and the fuzz targets. Then the unit tests, the
# 2-rank MPI tests, and every fuzz target for FUZZ_SECONDS (20) on its corpus. Any finding fails.
# Env: SAN_BUILD_DIR (default build-san), JOBS, FUZZ_SECONDS.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${SAN_BUILD_DIR:-$repo/build-san}
jobs=${JOBS:-$(nproc)}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source "$repo/tests/sanitize/env.sh"  # also for the build: gtest discovery runs the unit tests
mpi=(env LSAN_OPTIONS="$SAN_MPI_LSAN_OPTIONS" mpirun --allow-run-as-root --oversubscribe -np 2)
t0=$SECONDS
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSHARDTRAIN_FUZZ=ON -DSHARDTRAIN_ENABLE_CUDA=OFF > "$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 1; }
cmake --build "$build" -j "$jobs" --target test_unit test_comm_mpi test_loader_mpi test_fsdp_mpi fuzz_targets
echo "[sanitize] build: $((SECONDS - t0)) s"

t1=$SECONDS
log=$(mktemp -d "${TMPDIR:-/tmp}/shardtrain-san.XXXXXX")
trap 'rm -rf "$log"' EXIT
run() {  # name command...: output kept in a log, shown when it fails
  local name=$1 s=$SECONDS; shift
  if "$@" > "$log/$name.log" 2>&1; then
    echo "[sanitize] $name passed ($((SECONDS - s)) s)"
  else
    echo "[sanitize] $name FAILED; its output:"; cat "$log/$name.log"; return 1
  fi
}
mkdir -p "$build/tests/tmp"
run unit "$build/tests/test_unit"
run comm_mpi_np2 "${mpi[@]}" "$build/tests/test_comm_mpi"
run loader_mpi_np2 "${mpi[@]}" "$build/tests/test_loader_mpi"
# Leak checking needs the slow unwinder (tests/sanitize/env.sh), which makes the FSDP test ~5x
# slower; its leaks are the libraries' ones, which the unit tests and fuzz targets already check.
# (fast_unwind_on_malloc=0 slows every malloc even without leak checking: not for this one.)
run fsdp_mpi_np2 env ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" mpirun --allow-run-as-root --oversubscribe -np 2 \
  "$build/tests/test_fsdp_mpi" --ranks-per-node=0
echo "[sanitize] tests: $((SECONDS - t1)) s"

t2=$SECONDS
"$repo/bench/fuzz.sh" --build "$build" --seconds "${FUZZ_SECONDS:-20}" --runs 100000000 --parallel "$jobs"
echo "[sanitize] fuzz: $((SECONDS - t2)) s; total $((SECONDS - t0)) s"
