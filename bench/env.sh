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

# bench_data OUT SEQ: prints the path of OUT/bench-SEQ.h5, preparing it on first use: 64 rows of
# SEQ tokens, each one document of the demo's text (every token in the loss), so that every row
# attends over its whole length on both sides of a comparison (packed rows would attend within
# each short sample here, but causally over the row in a trainer that is not given positions).
# ROWS other than 64 (bench_data OUT SEQ ROWS, OUT/bench-SEQ-ROWS.h5): each row the demo's words
# drawn anew (seeded by the row), so that a run of ROWS samples sees none twice.
bench_data() {
  local rows=${3:-64} name=bench-$2; [ "${3:-64}" = 64 ] || name=bench-$2-$3
  local data=$1/$name.h5
  mkdir -p "$1"  # a part run on its own finds no folder made by an earlier one
  [ -f "$data" ] && { echo "$data"; return; }
  "$py" - "$repo/data/demo/train.jsonl" "$1/$name.jsonl" "$2" "$rows" <<'PY'
import json, random, sys
src, dst, seq, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
text = " ".join(" ".join(r.values()) for r in map(json.loads, open(src, encoding="utf-8")))
n = min(seq * 8, len(text) // 2)  # characters: well over SEQ tokens of the demo tokenizer, so each row is full
words = text.split()
with open(dst, "w", encoding="utf-8") as f:
    for i in range(rows):
        if rows == 64:  # windows of the demo text
            start = i * (len(text) - n) // 64
            f.write(json.dumps({"text": text[start:start + n]}) + "\n")
        else:  # more rows than the text has windows: each row the demo's words drawn anew (seeded), so none repeats
            r = random.Random(i)
            f.write(json.dumps({"text": " ".join(r.choice(words) for _ in range(n // 5))}) + "\n")
PY
  "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$1/$name.jsonl" --format text \
    --output "$data" --seq-len "$2" --mode padding > "$1/prepare-$name.log"
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
