#!/usr/bin/env bash
# The container suite (slow: a from-scratch image build, then the demo three ways); its figures
# go in docs/containers.md. Root, with podman; run after scripts/build.sh (the runs outside
# containers use build/src/shardtrain).
#   containers/test.sh                      (scripts/test.sh --containers runs it)
# Env: OUT (build/containers-test), CONTAINERS_SKIP_BUILD=1 (reuse the image), DEMO_RANKS (2),
#      SHARDTRAIN_BIN (the binary outside containers; build/src/shardtrain).
# Checks, each printed as ok/FAIL:
#   1. containers/build.sh --base local builds the image (time, size), non-root, no compilers;
#      its OCI archive is written (what apptainer build converts)
#   2. mpirun -np 2 inside one container runs scripts/demo.sh and reaches the demo's figures
#      (>= 90% exact match, validation loss falling); files on the mount are uid 1000's
#   3. the hybrid launch: the host's mpirun starts each rank in its own container
#      (containers/podman-exec.sh); its losses equal the same run outside containers at 1e-6,
#      and its files are the invoking user's; the same (1000 steps) through srun --mpi=pmix on a
#      local Slurm
#   4. checkpoints cross: written inside, resumed outside, and the other way round, each
#      resumed run's losses equal the uninterrupted run's at 1e-6
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source "$repo/containers/versions.env"
out=${OUT:-$repo/build/containers-test}
bin=${SHARDTRAIN_BIN:-$repo/build/src/shardtrain}  # the runs outside containers
py=${PYTHON:-$repo/.venv/bin/python}
[ -x "$py" ] || py=python3  # compare_runs.py needs only the standard library
image=$LOCAL_IMAGE
ranks=${DEMO_RANKS:-2}
data=$repo/data/demo
[ "$(id -u)" = 0 ] || { echo "containers/test.sh: needs root (podman, debootstrap)" >&2; exit 2; }
[ -x "$bin" ] || { echo "containers/test.sh: build/src/shardtrain is missing; run scripts/build.sh" >&2; exit 2; }
missing=()
for p in podman runc debootstrap; do command -v "$p" > /dev/null || [ -x "/usr/sbin/$p" ] || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "[containers/test] apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" > /dev/null || exit 1
fi
rm -rf "$out"
mkdir -p "$out"
failed=0
result() {  # result NAME STATUS DETAIL
  local verdict=ok
  [ "$2" = 0 ] || { verdict=FAIL; failed=1; }
  echo "$verdict $1: $3" | tee -a "$out/summary.txt"
}
mpi=(mpirun --allow-run-as-root --oversubscribe -np "$ranks")
losses() { "$py" "$repo/containers/compare_runs.py" "$@"; }

# 1. The image, from nothing but this machine's Debian mirror and PyPI.
if [ "${CONTAINERS_SKIP_BUILD:-0}" != 1 ]; then
  podman rmi -f "$image" "$LOCAL_BASE_IMAGE" > /dev/null 2>&1
  start=$SECONDS
  "$repo/containers/build.sh" --base local --oci-archive "$out/shardtrain.oci.tar" > "$out/build.log" 2>&1
  rc=$?
  result build "$rc" "$((SECONDS - start)) s from nothing ($(grep -o 'image size .*' "$out/build.log"))"
  [ "$rc" = 0 ] || { tail -30 "$out/build.log"; exit 1; }
  result oci_archive "$([ -s "$out/shardtrain.oci.tar" ] && echo 0 || echo 1)" "$(stat -c %s "$out/shardtrain.oci.tar" 2> /dev/null) bytes"
fi
ctr=(podman run --rm --runtime runc --ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
user=$(podman image inspect --format '{{.Config.User}}' "$image")
uid=$("${ctr[@]}" "$image" id -u)
result non_root "$([ "$uid" = 1000 ] && [ "$user" = shardtrain ] && echo 0 || echo 1)" "runs as $user (uid $uid)"
tools=$("${ctr[@]}" "$image" sh -c 'for t in gcc g++ cc c++ nvcc cmake ninja make ld pip python3; do command -v $t; done; ls -d /usr/include/mpi* /opt/shardtrain/venv/lib/python3*/site-packages/torch/include 2>/dev/null; true')
result no_build_tools "$([ -z "$tools" ] && echo 0 || echo 1)" "${tools:-no compiler, build system, headers or Python in the image}"

# 2. The demo inside one container, as the image's user, writing to a mount the user owns.
mkdir -p "$out/inside"
chown 1000:1000 "$out/inside"
start=$SECONDS
"${ctr[@]}" --volume "$out/inside:/work" --env DEMO_OUT=/work --env DEMO_RANKS="$ranks" "$image" \
  bash /opt/shardtrain/scripts/demo.sh > "$out/inside.log" 2>&1
rc=$?
figures=$(losses demo "$out/inside/metrics.jsonl" 2>&1)
[ "$rc" = 0 ] && losses demo "$out/inside/metrics.jsonl" > /dev/null 2>&1 || rc=1
result demo_inside "$rc" "$((SECONDS - start)) s; $figures"
owners=$(find "$out/inside" -printf '%U:%G\n' | sort -u | tr '\n' ' ')
result owner_inside "$([ "$owners" = "1000:1000 " ] && echo 0 || echo 1)" "files on the mount: $owners"

# 3. The hybrid launch: the host's mpirun, one container per rank, against the same run outside.
train=(train --config "$repo/configs/tiny-demo.cfg" --batch-size $((32 / ranks)) --sharding full_shard
       --data "$out/inside/train.h5" --val-data "$out/inside/train.val.h5" --threads 1)
start=$SECONDS
(cd "$out" && "${mpi[@]}" "$bin" "${train[@]}" --metrics-file "$out/outside.jsonl" > "$out/outside.log" 2>&1)
result run_outside $? "$((SECONDS - start)) s"
start=$SECONDS
(cd "$out" && SHARDTRAIN_BIND="$out,$repo" "${mpi[@]}" "$repo/containers/podman-exec.sh" "$image" shardtrain "${train[@]}" \
   --metrics-file "$out/hybrid.jsonl" > "$out/hybrid.log" 2>&1)
rc=$?
eq=$(losses equal "$out/outside.jsonl" "$out/hybrid.jsonl" 2>&1) || rc=1
result hybrid_mpirun "$rc" "$((SECONDS - start)) s; $eq"
eq=$(losses equal "$out/inside/metrics.jsonl" "$out/hybrid.jsonl" 2>&1)
result inside_equals_hybrid $? "$eq"
owners=$(stat -c '%u:%g' "$out/hybrid.jsonl")
result owner_hybrid "$([ "$owners" = "$(id -u):$(id -g)" ] && echo 0 || echo 1)" "hybrid.jsonl is $owners (the invoking user: $(id -u):$(id -g))"
# The same through srun --mpi=pmix on a local Slurm (scripts/local-slurm.sh, private to $out).
# 1000 of the demo's steps (its schedule over 1000), against the same 1000 outside.
if bash "$repo/scripts/local-slurm.sh" start "$out/slurm" 4 > "$out/slurm.log" 2>&1; then
  (cd "$out" && "${mpi[@]}" "$bin" "${train[@]}" --steps 1000 --metrics-file "$out/outside-1000.jsonl" > "$out/outside-1000.log" 2>&1)
  start=$SECONDS
  (source "$out/slurm/env" && cd "$out" && SHARDTRAIN_BIND="$out,$repo" timeout 1800 srun --mpi=pmix -n "$ranks" \
     "$repo/containers/podman-exec.sh" "$image" shardtrain "${train[@]}" --steps 1000 --metrics-file "$out/srun.jsonl" > "$out/srun.log" 2>&1)
  rc=$?
  eq=$(losses equal "$out/outside-1000.jsonl" "$out/srun.jsonl" 2>&1) || rc=1
  result hybrid_srun "$rc" "$((SECONDS - start)) s; $eq"
  bash "$repo/scripts/local-slurm.sh" stop "$out/slurm"
else
  result hybrid_srun 1 "the local Slurm did not start: $(tail -3 "$out/slurm.log")"
fi

# 4. Checkpoints across the boundary: a 20-step run saves at step 10 on one side; the other side
# resumes from that file, and its steps 11-20 equal the whole run's.
short=("${train[@]}" --steps 20 --save-every 10)
inside_run() { SHARDTRAIN_BIND="$out,$repo" "${mpi[@]}" "$repo/containers/podman-exec.sh" "$image" shardtrain "$@"; }
outside_run() { "${mpi[@]}" "$bin" "$@"; }
cd "$out"
for side in inside outside; do
  other=outside
  [ "$side" = outside ] && other=inside
  rm -rf "$out/ckpt-$side" "$out/resumed-by-$other"
  ${side}_run "${short[@]}" --checkpoint-dir "$out/ckpt-$side" --metrics-file "$out/whole-$side.jsonl" > "$out/whole-$side.log" 2>&1
  rc=$?
  ${other}_run "${short[@]}" --checkpoint-dir "$out/resumed-by-$other" --resume "$out/ckpt-$side/step-00000010.h5" \
    --metrics-file "$out/resumed-by-$other.jsonl" > "$out/resumed-by-$other.log" 2>&1 || rc=1
  eq=$(losses equal "$out/whole-$side.jsonl" "$out/resumed-by-$other.jsonl" 2>&1) || rc=1
  result "checkpoint_${side}_to_$other" "$rc" "saved $side at step 10, resumed $other: $eq"
done
echo "[containers/test] $(grep -c '^ok' "$out/summary.txt") ok, $(grep -c '^FAIL' "$out/summary.txt") failed; $out/summary.txt"
exit $failed
