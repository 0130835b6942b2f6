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

# The ctest entries each plant must fail, by name: every strategy (1 rank against 2, 3 and 4,
# hybrid on two simulated nodes; FP8 inside the whole-suite layouts), offload (its part at 3
# ranks), context parallelism, LoRA against PEFT (at 1 rank with float8 base GEMMs too), DPO
# against TRL.
equality="fsdp_mpi_np2 fsdp_mpi_np3.EveryStrategy fsdp_mpi_np3.Offload fsdp_mpi_np4_nodes_of_2 context_parallel_mpi_np2 lora_mpi_np1 lora_mpi_np3"
declare -A tests=(
  [gradient-scale-x2]="$equality dpo_trl"
  # dpo_trl only through its context-parallel runs: a micro-batch always holds --batch-size pairs,
  # so without a context group a mean per micro-batch is the global mean; within one, the group's
  # ranks hold the same pairs and the plant's mean over ranks counts each pair once per rank.
  [micro-batch-mean]="$equality dpo_trl"
)
plants=("$@")
[ ${#plants[@]} -gt 0 ] || plants=("${!tests[@]}")

rm -rf "$work"
git clone -q "$repo" "$work"
# The venv is the checkout's (a symlink: nothing is installed twice).
ln -s "$repo/.venv" "$work/.venv"
"$work/scripts/build.sh" > "$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
cd "$work/build"
source "$repo/scripts/test_env.sh"
bad=0
for p in "${plants[@]}"; do
  [ -n "${tests[$p]:-}" ] || { echo "planted_bugs: no plant named $p" >&2; exit 2; }
  git -C "$work" apply "$repo/tests/planted/$p.patch"
  ninja > "$work/build-$p.log" 2>&1 || { tail -40 "$work/build-$p.log"; exit 1; }
  regex="^($(echo "${tests[$p]}" | tr ' ' '|'))\$"
  # The fixtures the entries need run first (ctest adds them); a failing one makes them "Not Run".
  ctest -R "$regex" -j "$test_jobs" --output-junit "$work/junit-$p.xml" > "$work/ctest-$p.log" 2>&1 || true
  # Each entry's status and first failed check, from ctest's JUnit file.
  "$repo/.venv/bin/python" - "$work/junit-$p.xml" "$p" ${tests[$p]} <<'PY' || bad=1
import sys, xml.etree.ElementTree as ET
path, plant, want = sys.argv[1], sys.argv[2], sys.argv[3:]
cases = {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}
ok = True
for name in want:
    c = cases.get(name)
    out = (c.findtext("system-out") or "") if c is not None else ""
    why = next((l.strip() for l in out.splitlines() if l.startswith(("Expected", "FAIL:"))), "")
    if c is not None and c.get("status") == "fail":
        print(f"planted {plant}: {name} fails, as it must ({why[:160]})")
    else:
        print(f"planted {plant}: {name} DID NOT FAIL ({'missing' if c is None else c.get('status')})")
        ok = False
sys.exit(0 if ok else 1)
PY
  git -C "$work" checkout -q -- .
done
ninja > /dev/null 2>&1  # leaves the scratch build unplanted
[ "$bad" = 0 ] && echo "planted_bugs: every plant failed every test named for it"
exit "$bad"
