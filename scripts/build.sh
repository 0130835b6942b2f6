#!/usr/bin/env bash
# Configures and builds shardtrain into build/ (BUILD_DIR to change). Extra args go to cmake.
# BUILD_TARGET=shardtrain builds only the binary (the demo does; the tests need everything).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" > "$build.configure.log" 2>&1 \
  || { cat "$build.configure.log"; exit 1; }
grep -E "shardtrain:" "$build.configure.log" || true
cmake --build "$build" -j "$jobs" ${BUILD_TARGET:+--target "$BUILD_TARGET"}
