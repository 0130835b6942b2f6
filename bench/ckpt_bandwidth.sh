#!/usr/bin/env bash
# Checkpoint save/load bandwidth against the raw disk, for a model state of about 1 GB
# (91M parameters: weights + exp_avg + exp_avg_sq in fp32, a 1.13 GB file), at 1, 2
# and 4 ranks. Appends a dated section to docs/performance.md. Not a test: run it by hand.
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

raw=$(dd if=/dev/zero of="$dir/dd.bin" bs=1M count=1024 conv=fdatasync 2>&1 | sed -n 's/.*, \([0-9.]*\) \([GM]\)B\/s.*/\1 \2/p')
rm -f "$dir/dd.bin"
raw_gbs=$(awk -v v="${raw% *}" -v u="${raw#* }" 'BEGIN { printf "%.3f", (u == "M") ? v / 1000 : v }')
echo "raw write (dd, 1 GiB, conv=fdatasync): $raw_gbs GB/s"

rows=""
for np in 1 2 4; do
  rm -rf "$dir/ckpt"
  save=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 1 \
    --checkpoint-dir "$dir/ckpt" 2>&1 | field checkpoint)
  cache=$(drop_caches)
  load=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 1 \
    --checkpoint-dir "$dir/ckpt" --resume auto 2>&1 | field "at step")
  read -r s_t s_gb s_bw <<< "$save"
  read -r l_t _ l_bw <<< "$load"
  rm -rf "$dir/ckpt"
  # --async-save: the longest time the loop was blocked over two saves (copying shards to host).
  blocked=$("${mpi[@]}" -np "$np" "$bin" train "${model[@]}" --threads 1 --data "$data" --batch-size 1 --steps 2 \
    --save-every 1 --async-save --checkpoint-dir "$dir/ckpt" 2>&1 \
    | sed -n 's/.*the loop was blocked \([0-9.]*\) s.*/\1/p' | sort -g | tail -n 1)
  ratio=$(awk -v a="$s_bw" -v b="$raw_gbs" 'BEGIN { printf "%.2f", a / b }')
  echo "np $np: save $s_t s ($s_bw GB/s, $ratio of raw), load $l_t s ($l_bw GB/s, page cache $cache), async blocked $blocked s"
  rows+="| $np | $s_gb | $s_t | $s_bw | $ratio | $l_t | $l_bw | $cache | $blocked |"$'\n'
done
rm -rf "$dir/ckpt"

{
  echo
  echo "## Checkpoint bandwidth, $(date -u +%Y-%m-%d) on $(hostname) ($(nproc) cores, $(df -h "$dir" | awk 'NR==2 {print $1}'))"
  echo
  echo "bench/ckpt_bandwidth.sh: a 91M-parameter model (a 1.13 GB file: fp32 weights + AdamW state, 1 MiB-aligned),"
  echo "saved synchronously at the end of one step (write + fsync + rename), then loaded by --resume."
  echo "Raw write bandwidth of the same disk: $raw_gbs GB/s (dd bs=1M count=1024 conv=fdatasync)."
  echo
  echo "| ranks | GB | save s | save GB/s | save / raw | load s | load GB/s | page cache before load | async: loop blocked s |"
  echo "|---|---|---|---|---|---|---|---|---|"
  printf "%s" "$rows"
} >> "$repo/docs/performance.md"
echo "appended to docs/performance.md"
