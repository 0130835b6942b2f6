# Sourced by the bench scripts: where the shardtrain binary and Python are, in a source tree
# (build/, .venv/) or in an unpacked bundle (bin/shardtrain, the system's python3).
# Sets: repo, bin, py; defines out_dir, bench_data, prepare_demo_data. Env: SHARDTRAIN_BIN, PYTHON.
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ -n "${SHARDTRAIN_BIN:-}" ]; then bin=$SHARDTRAIN_BIN
elif [ -x "$repo/libexec/shardtrain" ]; then bin=$repo/bin/shardtrain  # the bundle's launcher
else bin=$repo/build/src/shardtrain; fi
if [ -n "${PYTHON:-}" ]; then py=$PYTHON
elif [ -x "$repo/.venv/bin/python" ]; then py=$repo/.venv/bin/python
else py=python3; fi

# bench_data OUT SEQ: prints the path of OUT/bench-SEQ.h5, the demo data packed into rows of SEQ
# tokens, preparing it on first use.
bench_data() {
  local data=$1/bench-$2.h5
  mkdir -p "$1"  # a part run on its own finds no folder made by an earlier one
  [ -f "$data" ] || "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/train.jsonl" \
    --output "$data" --seq-len "$2" --mode packing > "$1/prepare-$2.log"
  echo "$data"
}

# prepare_demo_data OUT: OUT/train.h5 and OUT/train.val.h5 from data/demo as the ctest fixture
# demo_data makes them (rows of 64, padded), unless present.
prepare_demo_data() {
  [ -s "$1/train.h5" ] && [ -s "$1/train.val.h5" ] && return 0
  echo "== prepare: data/demo -> $1/train.h5, $1/train.val.h5"
  mkdir -p "$1"
  "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/train.jsonl" \
    --val-input "$repo/data/demo/val.jsonl" --format alpaca --mode padding --seq-len 64 --output "$1/train.h5" \
    > "$1/prepare.log" 2>&1 || { cat "$1/prepare.log" >&2; exit 1; }
}

# out_dir DIR: makes DIR and prints its absolute path.
out_dir() { mkdir -p "$1" && cd "$1" && pwd; }
