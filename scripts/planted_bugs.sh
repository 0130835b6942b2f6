#!/usr/bin/env bash
# The planted bugs (tests/planted/*.patch) each fail every equality test named for it below: a
# check that the tests see a wrong gradient, not only a wrong loss (docs/testing.md). In a scratch
# clone of HEAD, so the working tree is never left planted: builds it (ccache serves most of it),
# then per plant applies the patch, rebuilds, runs the tests and expects every one to fail.
# Usage: scripts/planted_bugs.sh [PLANT...]   (default: every plant; about 15 minutes on 2 cores)
# Env:   PLANT_DIR (default: /tmp/shardtrain-planted), JOBS.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
work=${PLANT_DIR:-/tmp/shardtrain-planted}

# The ctest entries each plant must fail: every strategy (1 rank against 2 and 4, hybrid on two
# simulated nodes), offload and FP8 (their parts at 3 ranks), context parallelism, LoRA against
# PEFT, DPO against TRL. A regex per entry, anchored.
declare -A tests=(
  [gradient-scale-x2]="fsdp_mpi_np2 fsdp_mpi_np3.EveryStrategy fsdp_mpi_np3.Offload fsdp_mpi_np4_nodes_of_2 context_parallel_mpi_np2 lora_mpi_np3 dpo_trl"
  [micro-batch-mean]="fsdp_mpi_np2 fsdp_mpi_np3.EveryStrategy fsdp_mpi_np3.Offload fsdp_mpi_np4_nodes_of_2 context_parallel_mpi_np2 lora_mpi_np3 dpo_trl"
)
plants=("$@")
[ ${#plants[@]} -gt 0 ] || plants=(gradient-scale-x2 micro-batch-mean)

rm -rf "$work"
git clone -q "$repo" "$work"
# The venv is the checkout's (a symlink: nothing is installed twice).
ln -s "$repo/.venv" "$work/.venv"
"$work/scripts/build.sh" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
cd "$work/build"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
bad=0
for p in "${plants[@]}"; do
  [ -n "${tests[$p]:-}" ] || { echo "planted_bugs: no plant named $p" >&2; exit 2; }
  git -C "$work" apply "$repo/tests/planted/$p.patch"
  ninja > "$work/build-$p.log" 2>&1 || { tail -40 "$work/build-$p.log"; exit 1; }
  regex="^($(echo "${tests[$p]}" | tr ' ' '|'))\$"
  # The fixtures the entries need run first (ctest adds them); a failing one makes them "Not Run".
  ctest -R "$regex" -j "${JOBS:-$(nproc)}" --output-junit "$work/junit-$p.xml" > "$work/ctest-$p.log" 2>&1 || true
  for t in ${tests[$p]}; do
    if grep -qE "Test +#[0-9]+: $(printf '%s' "$t" | sed 's/\./\\./g') \.+ +\*\*\*Failed" "$work/ctest-$p.log"; then
      echo "planted $p: $t fails, as it must"
    else
      echo "planted $p: $t DID NOT FAIL ($(grep -E ": $t " "$work/ctest-$p.log" | sed 's/.* \.\.\.* *//'))"
      bad=1
    fi
  done
  git -C "$work" checkout -q -- .
done
ninja > /dev/null 2>&1  # leaves the scratch build unplanted
[ "$bad" = 0 ] && echo "planted_bugs: every plant failed every test named for it"
exit "$bad"
