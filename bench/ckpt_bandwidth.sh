#!/usr/bin/env bash
# Checkpoint save/load bandwidth against the raw disk, for a model state of about 1 GB
# (91M parameters: weights + exp_avg + exp_avg_sq in fp32, a 1.13 GB file), at 1, 2
# and 4 ranks. Writes a dated section to OUT/results.md (and appends it to docs/performance.md
# with BENCH_APPEND_DOCS=1). Not a test: run it by hand.
# Usage: bench/ckpt_bandwidth.sh [DIR on the disk to measure]   (default: out/bench)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${BUILD_DIR:-$repo/build}/src/shardtrain
dir=${1:-$repo/out/bench}
mkdir -p "$dir"
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
model=(--model tiny --hidden-size 1024 --n-layers 7 --intermediate-size 2816 --n-heads 16 --n-kv-heads 16)
data=$dir/train.h5
[ -f "$data" ] || "$bin" prepare --tokenizer "$repo/data/demo/tokenizer.model" --input "$repo/data/demo/val.jsonl" \
  --output "$data" --seq-len 64 > /dev/null

drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null && echo dropped || echo kept; }
field() { sed -n "s/.*$1 .*(\([0-9.]*\) s, \([0-9.]*\) GB, \([0-9.]*\) GB\/s).*/\1 \2 \3/p" | tail -n 1; }

# Each save is paired with a dd run just before it, three times per rank count, and the medians
# are reported. dd copies random bytes of the checkpoint's size (zeros can be cheaper on virtual
# disks).
reps=${REPS:-3}
src=/dev/shm/shardtrain-bench-random.bin
head -c 1134559232 /dev/urandom > "$src"
trap 'rm -f "$src"' EXIT
raw_gbs() {
  local r
  r=$(dd if="$src" of="$dir/dd.bin" bs=1M conv=fdatasync 2>&1 | sed -n 's/.*, \([0-9.]*\) \([GM]\)B\/s.*/\1 \2/p')
  rm -f "$dir/dd.bin"
  awk -v v="${r% *}" -v u="${r#* }" 'BEGIN { printf "%.3f", (u == "M") ? v / 1000 : v }'
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }

rows=""
for np in 1 2 4; do
  raws="" saves="" save_bws="" loads="" load_bws="" ratios=""
  for rep in $(seq "$reps"); do
    raw=$(raw_gbs)
    rm -rf "$dir/ckpt"
    save=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 1 \
      --checkpoint-dir "$dir/ckpt" 2>&1 | field checkpoint)
    cache=$(drop_caches)
    load=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 1 \
      --checkpoint-dir "$dir/ckpt" --resume auto 2>&1 | field "at step")
    read -r s_t s_gb s_bw <<< "$save"
    read -r l_t _ l_bw <<< "$load"
    ratio=$(awk -v a="$s_bw" -v b="$raw" 'BEGIN { printf "%.2f", a / b }')
    echo "np $np run $rep: raw $raw GB/s, save $s_t s ($s_bw GB/s, $ratio of raw), load $l_t s ($l_bw GB/s, page cache $cache)"
    raws+=" $raw" saves+=" $s_t" save_bws+=" $s_bw" loads+=" $l_t" load_bws+=" $l_bw" ratios+=" $ratio"
  done
  rm -rf "$dir/ckpt"
  # --async-save: the longest time the loop was blocked over two saves (copying shards to host).
  blocked=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 2 \
    --save-every 1 --async-save --checkpoint-dir "$dir/ckpt" 2>&1 \
    | sed -n 's/.*the loop was blocked \([0-9.]*\) s.*/\1/p' | sort -g | tail -n 1)
  rows+="| $np | $s_gb | $(echo "$raws" | median) | $(echo "$saves" | median) | $(echo "$save_bws" | median) |"
  rows+=" $(echo "$ratios" | median) |$ratios | $(echo "$loads" | median) | $(echo "$load_bws" | median) | $cache | $blocked |"$'\n'
done
rm -rf "$dir/ckpt"

{
  echo
  echo "## Checkpoint bandwidth, $(date -u +%Y-%m-%d) on $(hostname) ($(nproc) cores, $(df -h "$dir" | awk 'NR==2 {print $1}'))"
  echo
  echo "bench/ckpt_bandwidth.sh: a 91M-parameter model (a 1.13 GB file: fp32 weights + AdamW state, 1 MiB-aligned),"
  echo "saved synchronously at the end of one step (write + fsync + rename), then loaded by --resume."
  echo "Each of $reps runs per rank count measures the disk's raw write bandwidth first (dd of 1.13 GB of random"
  echo "bytes from tmpfs, bs=1M conv=fdatasync), then saves. The table gives medians,"
  echo "and every run's save/raw ratio."
  echo
  echo "| ranks | GB | raw GB/s | save s | save GB/s | save / raw (median) | save / raw (each run) | load s | load GB/s | page cache before load | async: loop blocked s |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  printf "%s" "$rows"
} > "$dir/results.md"
cat "$dir/results.md"
if [ "${BENCH_APPEND_DOCS:-0}" = 1 ]; then cat "$dir/results.md" >> "$repo/docs/performance.md"; echo "appended to docs/performance.md"; fi
