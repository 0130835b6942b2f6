# Sourced by the bench scripts: where the shardtrain binary and Python are, in a source tree
# (build/, .venv/) or in an unpacked bundle (bin/shardtrain, the system's python3).
# Sets: repo, bin, py. Env: SHARDTRAIN_BIN, PYTHON.
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
