#!/usr/bin/env bash
# One device call of the GPU suite, from a source tree that carries the bundle in dist/: unpacks
# it, runs bench/gpu_suite.sh --parts PARTS from the bundle (its bench/ is this tree's, see
# scripts/bundle.sh), and leaves in OUTDIR what fits a call's return: results.md, the suite's
# progress log, and the other logs, metrics and tables in logs.tar.gz (no weights, data or checkpoints).
#
# FILTER, when given: test_gpu's tests that match it run first (a test mended since the last call).
#
#   bench/gpu_call.sh next OUTDIR                 # e.g. OUTDIR=$OUT on the device machine
#   bench/gpu_call.sh next2 OUTDIR 'GpuFp8.*'
set -uo pipefail
parts=${1:?parts (e.g. next, next2, check)} dest=${2:?output folder} filter=${3:-}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball=$(ls "$repo"/dist/shardtrain-*-linux-x86_64.tar.gz 2> /dev/null | head -1)
[ -n "$tarball" ] || { echo "gpu_call.sh: no bundle in $repo/dist (scripts/bundle.sh)" >&2; exit 2; }
unpack=$(mktemp -d) suite=$(mktemp -d)
tar xzf "$tarball" -C "$unpack"
root=$(ls -d "$unpack"/shardtrain-*)
mkdir -p "$dest"
if [ -n "$filter" ]; then
  (source "$root/bench/env.sh" && export SHARDTRAIN_TEST_WORK=$suite/rerun SHARDTRAIN_TEST_BIN=$bin \
     && prepare_demo_data "$SHARDTRAIN_TEST_WORK/demo" > /dev/null \
     && "$root/libexec/tests/run" test_gpu --gtest_filter="$filter") > "$dest/rerun.log" 2>&1
  echo "gpu_call.sh: test_gpu --gtest_filter='$filter': exit $? ($(grep -E '^\[  (PASSED|FAILED) ' "$dest/rerun.log" | paste -sd' ' -))"
fi
bash "$root/bench/gpu_suite.sh" --out "$suite" --parts "$parts" 2>&1 | tee "$dest/suite.log"
rc=${PIPESTATUS[0]}
cp "$suite/results.md" "$dest/" 2> /dev/null
(cd "$suite" && find . -type f \( -name '*.log' -o -name '*.err' -o -name '*.jsonl' -o -name '*.json' -o -name '*.md' \
   -o -name '*.xml' -o -name '*.json.gz' \) -size -20M -print0 | tar czf "$dest/logs.tar.gz" --null -T -)
echo "gpu_call.sh: suite exit $rc; $(du -sh "$dest" | cut -f1) in $dest"
exit "$rc"
