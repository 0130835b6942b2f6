#!/usr/bin/env bash
# The bundle is self-contained: built by scripts/bundle.sh, unpacked, and run in a mount namespace
# where every file of the Debian packages it replaces is hidden (bound to /dev/null), leaving only
# what a Debian 12 minbase with python3 has, plus the venv's torch wheel. There it runs prepare,
# train --device cpu at 1 rank (singleton MPI) and at 2 ranks under the bundled mpirun (equal
# losses), preflight, and the one bundled GPU test written for machines without a GPU, all with
# LD_DEBUG=libs: every object that the bundle's programs load must come from the bundle, the torch
# and NVIDIA wheels, or glibc.
#   tests/bundle/test_bundle.sh BUILD_DIR PYTHON     (root: mount namespaces; exit 77 = skipped)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "$1" && pwd) venv_py=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
[ "$(id -u)" = 0 ] && unshare --mount true 2> /dev/null || { echo "SKIP: needs root and mount namespaces"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

DIST_DIR=$work/dist BUILD_DIR=$build BUNDLE_SKIP_BUILD=1 PYTHON=$venv_py "$repo/scripts/bundle.sh"
tarball=$(ls "$work"/dist/shardtrain-*-linux-x86_64.tar.gz)
size=$(stat -c %s "$tarball")
[ "$size" -lt 60000000 ] || fail "the bundle is $size bytes, over the 60 MB limit"
tar -C "$work" -xzf "$tarball"
root=$(ls -d "$work"/shardtrain-*-linux-x86_64)

# A torch of another release series is refused with what to install (exit 2).
mkdir -p "$work/torch-2.10/torch"; echo "__version__ = '2.10.0+cu128'" > "$work/torch-2.10/torch/version.py"
set +e; msg=$(SHARDTRAIN_TORCH=$work/torch-2.10/torch "$root/bin/shardtrain" --version 2>&1); rc=$?; set -e
[ "$rc" = 2 ] && [[ $msg == *"built against torch 2.11"*"has torch 2.10.0+cu128"*"pip install torch==2.11"* ]] \
  || fail "a torch 2.10 gave exit $rc: $msg"

# The packages to hide: those the bundled files came from, less what minbase + python3 has
# (glibc, libstdc++, zlib, libssl: the bundle's copies must still win there, which LD_DEBUG checks).
mapfile -t hide < <(cut -f2 "$root/share/shardtrain/origins.tsv" | python3 "$repo/tests/bundle/packages_to_hide.py")
[ "${#hide[@]}" -gt 5 ] || fail "expected Open MPI, HDF5, Boost, ... among the packages to hide, got: ${hide[*]}"
echo "hiding ${#hide[@]} packages: ${hide[*]}"
dpkg -L "${hide[@]}" | sort -u > "$work/hidden-files"

# Inside the namespace: nothing of those packages is readable, and the bundle does all the work.
export ROOT=$root WORK=$work REPO=$repo VENV_PY=$venv_py
unshare --mount --propagation private bash -euo pipefail <<'INNER'
n=0
while read -r f; do
  if [ -f "$f" ] && [ ! -L "$f" ]; then mount --bind /dev/null "$f"; n=$((n + 1)); fi
done < "$WORK/hidden-files"
echo "hid $n files"
[ ! -s /usr/lib/x86_64-linux-gnu/libmpi.so.40 ] || { echo "FAIL: the system's libmpi is still readable" >&2; exit 1; }
! /usr/bin/orterun --version > /dev/null 2>&1 || { echo "FAIL: the system's mpirun still runs" >&2; exit 1; }
export PATH=/usr/sbin:/usr/bin:/sbin:/bin SHARDTRAIN_PYTHON=$VENV_PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
mkdir -p "$WORK/ld"
run() {  # NAME CMD...: runs CMD with the loader's library log in $WORK/ld/NAME.PID
  echo "== $1"; local name=$1; shift
  LD_DEBUG=libs LD_DEBUG_OUTPUT=$WORK/ld/$name "$@" < /dev/null > "$WORK/$name.log" 2>&1 || { cat "$WORK/$name.log"; echo "FAIL: $name" >&2; exit 1; }
  tail -2 "$WORK/$name.log"
}
cd "$ROOT"
run version bin/shardtrain --version
run prepare bin/shardtrain prepare --tokenizer data/demo/tokenizer.model --input data/demo/train.jsonl \
  --output "$WORK/train.h5" --seq-len 64 --mode packing
common=(train --model tiny --data "$WORK/train.h5" --device cpu --steps 4 --log-every 1 --collective-timeout 0 --seed 3)
run train1 bin/shardtrain "${common[@]}" --batch-size 4 --metrics-file "$WORK/m1.jsonl"
run train2 bin/mpirun -np 2 --oversubscribe bin/shardtrain "${common[@]}" --batch-size 2 --metrics-file "$WORK/m2.jsonl"
run preflight bin/shardtrain preflight --device cpu --max-bytes 1M
if [ -x libexec/tests/run ]; then  # the GPU tests (CUDA builds): the one written for machines without a GPU
  mkdir -p "$WORK/tests/demo" && ln -sf "$WORK/train.h5" "$WORK/tests/demo/train.h5"  # where the tests look for the demo data
  SHARDTRAIN_TEST_WORK=$WORK/tests run gpu_tests libexec/tests/run test_gpu --gtest_filter=Gpu.CudaWithoutAGpuIsAUsageError
  grep -q "PASSED .* 1 test" "$WORK/gpu_tests.log" || { cat "$WORK/gpu_tests.log"; echo "FAIL: the bundled test_gpu" >&2; exit 1; }
fi
INNER

# Equal losses at 1 and 2 ranks (global batch 4 both ways; fp32 reduction order differs).
python3 - "$work/m1.jsonl" "$work/m2.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f) if '"loss"' in l] for f in sys.argv[1:])
assert len(a) == len(b) == 4, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= 1e-4 * abs(x), f"losses differ: 1 rank {a}, 2 ranks {b}"
print("losses at 1 and 2 ranks:", ", ".join("%.6f" % x for x in a))
PY

# Every object that a bundled program loaded is the bundle's, the wheels' or glibc's.
torch_dir=$("$venv_py" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')
python3 "$repo/tests/bundle/check_loaded.py" "$work/ld" "$root" "$(dirname "$torch_dir")"
echo "PASS: bundle $(basename "$tarball"), $((size / 1000000)) MB"
