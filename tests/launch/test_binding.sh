#!/usr/bin/env bash
# launch/binding.sh and launch/bind-rank.sh: rank-to-core plans on fake p4de/p5 sysfs trees, the
# pure arithmetic, nvidia-smi's PCI bus ids to NUMA nodes, and a real binding. Exit 0: all passed.
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
source "$repo/launch/binding.sh"
unset SHARDTRAIN_SYSFS_ROOT SHARDTRAIN_CPUS_ALLOWED SHARDTRAIN_GPU_NUMA SHARDTRAIN_RANK_CPUS SHARDTRAIN_RANK_THREADS \
  SHARDTRAIN_RANKS_PER_NODE SHARDTRAIN_GPUS_PER_NODE CUDA_VISIBLE_DEVICES OMPI_COMM_WORLD_LOCAL_RANK \
  OMPI_COMM_WORLD_LOCAL_SIZE SLURM_LOCALID OMP_NUM_THREADS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

check() {  # check NAME EXPECTED ACTUAL
  if [ "$2" = "$3" ]; then echo "ok: $1"; passed=$((passed + 1))
  else echo "FAIL: $1: expected '$2', got '$3'"; failed=$((failed + 1)); fi
}

# make_node DIR SOCKETS CORES_PER_SOCKET HT: Linux's numbering (cpu c on socket c / CORES; with HT
# on, cpu c + SOCKETS * CORES is c's sibling), one NUMA node per socket.
make_node() {
  local sys=$1/sys/devices/system sockets=$2 cores=$3 ht=$4 phys n c base s t list dirs=()
  phys=$((sockets * cores)) n=$((sockets * cores * (ht + 1)))
  for ((c = 0; c < n; c++)); do dirs+=("$sys/cpu/cpu$c/topology"); done
  for ((s = 0; s < sockets; s++)); do dirs+=("$sys/node/node$s"); done
  mkdir -p "${dirs[@]}"
  echo "0-$((n - 1))" >"$sys/cpu/online"
  for ((c = 0; c < n; c++)); do
    base=$((c % phys)) t=$sys/cpu/cpu$c/topology
    echo $((base / cores)) >"$t/physical_package_id"
    echo $((base % cores)) >"$t/core_id"
    if [ "$ht" = 1 ]; then echo "$base,$((base + phys))" >"$t/thread_siblings_list"; else echo "$c" >"$t/thread_siblings_list"; fi
  done
  for ((s = 0; s < sockets; s++)); do
    list="$((s * cores))-$((s * cores + cores - 1))"
    [ "$ht" = 1 ] && list+=",$((phys + s * cores))-$((phys + s * cores + cores - 1))"
    echo "$list" >"$sys/node/node$s/cpulist"
  done
}

# One line on the current RANK_CPUS: "valid" when every rank's list has THREADS cpus on CORES
# distinct physical cores (cpu mod PHYS), all inside its NUMA node (NUMAS: one per rank) of the
# tree ROOT, and no cpu is in two ranks' lists; else what is wrong.
plan_shape() {  # plan_shape ROOT PHYS CORES THREADS "NUMAS"
  local numas i
  read -r -a numas <<<"$5"
  for i in "${!numas[@]}"; do
    echo "$i $(cat "$1/sys/devices/system/node/node${numas[i]}/cpulist") ${RANK_CPUS[i]:-none}"
  done | awk -v phys="$2" -v cores="$3" -v threads="$4" -v ranks="${#RANK_CPUS[@]}" "$_BINDING_AWK_LIB"'
    { split("", node); split("", mine); split("", core); expand($2, node); expand($3, mine); t = 0; k = 0
      for (c in mine) { t++; if (!(c in node)) bad = bad " rank " $1 ": cpu " c " outside its NUMA node"
        if (c in used) bad = bad " cpu " c " in two ranks"; used[c] = 1; if (!((c % phys) in core)) k++; core[c % phys] = 1 }
      if (t != threads || k != cores) bad = bad " rank " $1 ": " k " cores, " t " threads" ; n++ }
    END { if (n != ranks) bad = bad " " ranks " lists for " n " ranks"; print bad == "" ? "valid" : bad }'
}

# Runs binding_compute R [GPUS] on a tree with the given overrides; stdout and stderr to $tmp/out, $tmp/err.
compute() {  # compute ROOT R [GPUS]
  SHARDTRAIN_SYSFS_ROOT=$1 binding_compute "${@:2}" >"$tmp/out" 2>"$tmp/err"
}

# --- the pure arithmetic, no sysfs: 2 cores with a hyper-thread each, one NUMA node; then GPUs on 2 nodes.
check "pure: 2 ranks on 2 hyper-threaded cores" "cores 1|rank 0 0 2 0,2|rank 1 0 2 1,3" \
  "$(printf '0 0 0 0\n1 1 0 0\n2 0 0 0\n3 1 0 0\n' | binding_plan 2 "" | grep -v summary | paste -sd'|')"
check "pure: each rank on its GPU's NUMA node" "rank 0 1 2 2-3|rank 1 0 2 0-1" \
  "$(printf '0 0 0 0\n1 1 0 0\n2 2 1 1\n3 3 1 1\n' | binding_plan 2 "1 0" | grep '^rank' | paste -sd'|')"

# --- p4de.24xlarge: 2 x 24 cores, HT on, GPUs 0-3 on NUMA 0, 4-7 on NUMA 1.
p4de=$tmp/p4de; make_node "$p4de" 2 24 1
SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" compute "$p4de" 8
check "p4de: 6 cores per rank" 6 "$CORES_PER_RANK"
check "p4de: 12 threads per rank in its GPU's NUMA node, disjoint" valid "$(plan_shape "$p4de" 48 6 12 "0 0 0 0 1 1 1 1")"
check "p4de: rank 0 and rank 7's cpus" "0-5,48-53 42-47,90-95" "${RANK_CPUS[0]} ${RANK_CPUS[7]}"
check "p4de: summary" "binding: 8 ranks x 6 cores (12 hardware threads), NUMA 0: ranks 0-3, NUMA 1: ranks 4-7" "$(cat "$tmp/out")"
check "p4de: exported for bind-rank.sh" "0-5,48-53;6-11,54-59;12-17,60-65;18-23,66-71;24-29,72-77;30-35,78-83;36-41,84-89;42-47,90-95 6" \
  "$SHARDTRAIN_RANK_CPUS $SHARDTRAIN_RANK_THREADS"
check "p4de: nothing on stderr" "" "$(cat "$tmp/err")"

# --- p5.48xlarge: 2 x 48 cores, HT on and off.
p5=$tmp/p5; make_node "$p5" 2 48 1
SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" compute "$p5" 8
check "p5: 12 cores per rank" 12 "$CORES_PER_RANK"
check "p5: 24 threads per rank in its GPU's NUMA node, disjoint" valid "$(plan_shape "$p5" 96 12 24 "0 0 0 0 1 1 1 1")"
check "p5: rank 0 and rank 4's cpus" "0-11,96-107 48-59,144-155" "${RANK_CPUS[0]} ${RANK_CPUS[4]}"
p5noht=$tmp/p5noht; make_node "$p5noht" 2 48 0
SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" compute "$p5noht" 8
check "p5 HT off: 12 cores per rank" 12 "$CORES_PER_RANK"
check "p5 HT off: 12 threads per rank in its GPU's NUMA node, disjoint" valid "$(plan_shape "$p5noht" 96 12 12 "0 0 0 0 1 1 1 1")"
check "p5 HT off: rank 0's cpus" "0-11" "${RANK_CPUS[0]}"

# --- uneven: 3 GPUs on NUMA 0, 5 on NUMA 1 -> min(48/3, 48/5) = 9 cores each.
SHARDTRAIN_GPU_NUMA="0 0 0 1 1 1 1 1" compute "$p5" 8
check "p5 uneven 3+5: 9 cores per rank" 9 "$CORES_PER_RANK"
check "p5 uneven 3+5: 18 threads in the GPU's NUMA node, disjoint" valid "$(plan_shape "$p5" 96 9 18 "0 0 0 1 1 1 1 1")"
check "p5 uneven 3+5: summary" "binding: 8 ranks x 9 cores (18 hardware threads), NUMA 0: ranks 0-2, NUMA 1: ranks 3-7" "$(cat "$tmp/out")"

# --- a Slurm allocation of half the node, half of each socket, as /proc/self/status shows it.
half=$tmp/p5half; make_node "$half" 2 48 1
mkdir -p "$half/proc/self"; printf 'Name:\tbash\nCpus_allowed_list:\t0-23,48-71,96-119,144-167\n' >"$half/proc/self/status"
SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" compute "$half" 8
check "Slurm half node (both sockets): 6 cores per rank" 6 "$CORES_PER_RANK"
check "Slurm half node (both sockets): inside the allocation and the NUMA node" "valid 0-5,96-101 48-53,144-149" \
  "$(plan_shape "$half" 96 6 12 "0 0 0 0 1 1 1 1") ${RANK_CPUS[0]} ${RANK_CPUS[4]}"
# Socket 0 only, with the 4 GPUs of that socket; then with all 8 GPUs (NUMA 1 has no cpus: locality goes).
SHARDTRAIN_CPUS_ALLOWED=0-47,96-143 SHARDTRAIN_GPU_NUMA="0 0 0 0" compute "$p5" 4
check "Slurm socket 0, 4 GPUs: 12 cores per rank on NUMA 0" "12 valid" "$CORES_PER_RANK $(plan_shape "$p5" 96 12 24 "0 0 0 0")"
SHARDTRAIN_CPUS_ALLOWED=0-47,96-143 SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" compute "$p5" 8
check "Slurm socket 0, 8 GPUs: 6 cores per rank, all on NUMA 0" "6 valid" "$CORES_PER_RANK $(plan_shape "$p5" 96 6 12 "0 0 0 0 0 0 0 0")"
check "Slurm socket 0, 8 GPUs: one line on stderr" \
  "binding: NUMA node 1 has 0 usable cores for its 4 ranks: ignoring GPU locality, 6 cores per rank from all 48" "$(cat "$tmp/err")"

# --- oversubscribed: 4 ranks on 2 cpus share them, 1 thread each, one line on stderr.
small=$tmp/small; make_node "$small" 1 2 0
SHARDTRAIN_GPU_NUMA='' compute "$small" 4
check "4 ranks on 2 cpus: shared, 1 thread" "0 1 0-1;0-1;0-1;0-1" "$? $CORES_PER_RANK $SHARDTRAIN_RANK_CPUS"
check "4 ranks on 2 cpus: one line on stderr" "1 binding: only 2 usable cores for 4 ranks: they share cpus 0-1, 1 thread each" \
  "$(wc -l <"$tmp/err") $(cat "$tmp/err")"

# --- no GPUs (the cpu profile): the ranks spread evenly over the NUMA nodes.
compute "$p4de" 2 0
check "CPU ranks on p4de: 24 cores each, one per NUMA node" "24 valid" "$CORES_PER_RANK $(plan_shape "$p4de" 48 24 48 "0 1")"

# --- nvidia-smi's bus ids to sysfs's PCI devices' numa_node.
mkdir -p "$tmp/bin"
cat >"$tmp/bin/nvidia-smi" <<'EOF'
#!/bin/sh
for i in 0 1 2 3 4 5 6 7; do printf '%d, GPU-uuid%d, 00000000:%02X:1C.0\n' "$i" "$i" $((0x1a + 16 * i)); done
EOF
chmod +x "$tmp/bin/nvidia-smi"
for i in 0 1 2 3 4 5 6 7; do
  d=$p4de/sys/bus/pci/devices/$(printf '0000:%02x:1c.0' $((0x1a + 16 * i))); mkdir -p "$d"; echo $((i % 2)) >"$d/numa_node"
done
check "nvidia-smi: GPUs' NUMA nodes" "0 1 0 1 0 1 0 1" "$(PATH=$tmp/bin:$PATH SHARDTRAIN_SYSFS_ROOT=$p4de binding_gpu_numa)"
check "nvidia-smi: in CUDA_VISIBLE_DEVICES order (index, uuid)" "1 0" \
  "$(PATH=$tmp/bin:$PATH CUDA_VISIBLE_DEVICES=5,GPU-uuid2 SHARDTRAIN_SYSFS_ROOT=$p4de binding_gpu_numa)"
PATH=$tmp/bin:$PATH compute "$p4de" 8
check "nvidia-smi: p4de plan follows the GPUs" "6 valid" "$CORES_PER_RANK $(plan_shape "$p4de" 48 6 12 "0 1 0 1 0 1 0 1")"
for f in "$p4de"/sys/bus/pci/devices/*/numa_node; do echo -1 >"$f"; done
PATH=$tmp/bin:$PATH compute "$p4de" 8
check "numa_node -1: spread evenly, said on stderr" "6 valid binding: GPU NUMA node unknown (-1): spreading the ranks evenly over the NUMA nodes" \
  "$CORES_PER_RANK $(plan_shape "$p4de" 48 6 12 "0 0 0 0 1 1 1 1") $(cat "$tmp/err")"

# --- bind-rank.sh really binds (to this machine's first allowed cpu) and sets OMP_NUM_THREADS.
bind=$repo/launch/bind-rank.sh
mine=$(awk '/^Cpus_allowed_list:/ { print $2 }' /proc/self/status)
first=${mine%%[-,]*}
# shellcheck disable=SC2016  # expanded by the bash that bind-rank.sh runs
show='echo "$(awk "/^Cpus_allowed_list:/ { print \$2 }" /proc/self/status) ${OMP_NUM_THREADS-unset}"'
check "bind-rank: OMPI local rank 0 on cpu $first" "$first 3" \
  "$(SHARDTRAIN_RANK_CPUS="$first;x" SHARDTRAIN_RANK_THREADS=3 OMPI_COMM_WORLD_LOCAL_RANK=0 "$bind" bash -c "$show")"
check "bind-rank: Slurm local id 1 on cpu $first" "$first 3" \
  "$(SHARDTRAIN_RANK_CPUS="x;$first" SHARDTRAIN_RANK_THREADS=3 SLURM_LOCALID=1 "$bind" bash -c "$show")"
check "bind-rank: no list for the rank: unchanged" "$mine unset" \
  "$(SHARDTRAIN_RANK_CPUS="$first" SHARDTRAIN_RANK_THREADS=3 SLURM_LOCALID=1 "$bind" bash -c "$show")"
check "bind-rank: a cpu outside the allocation: runs unbound, says so" "$mine unset|1" \
  "$(SHARDTRAIN_RANK_CPUS=100000 SHARDTRAIN_RANK_THREADS=3 SLURM_LOCALID=0 "$bind" bash -c "$show" 2>"$tmp/err")|$(wc -l <"$tmp/err")"

# --- bind-rank.sh plans on the rank's own node when the launcher passes only the layout.
unset SHARDTRAIN_RANK_CPUS SHARDTRAIN_RANK_THREADS  # exported by the binding_compute calls above
check "bind-rank: plans here, rank 0 bound and prints the node's plan" "$first 1|binding on $HOSTNAME: 2 ranks share cpus $first (1 thread each), NUMA 0: ranks 0-1" \
  "$(SHARDTRAIN_RANKS_PER_NODE=2 SHARDTRAIN_GPUS_PER_NODE=0 SHARDTRAIN_CPUS_ALLOWED=$first OMPI_COMM_WORLD_LOCAL_RANK=0 \
     "$bind" bash -c "$show" 2>"$tmp/err")|$(grep -v '^binding: ' "$tmp/err")"
# A p4de node's plan, made from that node's sysfs in the rank (this machine cannot take cpus 42-47).
check "bind-rank: rank 7 of a p4de node gets GPU 7's NUMA cores, quietly planned" \
  "bind-rank: local rank 7: cannot bind to cpus 42-47,90-95 (outside this job step's cpus?); running unbound" \
  "$(SHARDTRAIN_SYSFS_ROOT=$p4de SHARDTRAIN_GPU_NUMA="0 0 0 0 1 1 1 1" SHARDTRAIN_CPUS_ALLOWED=0-95 SHARDTRAIN_RANKS_PER_NODE=8 \
     SHARDTRAIN_GPUS_PER_NODE=8 SLURM_LOCALID=7 "$bind" true 2>&1)"

# --- this machine's real sysfs: 2 ranks get lists inside what this process may use.
binding_compute 2 >"$tmp/out" 2>"$tmp/err"
inside=$(awk -v a="$mine" -v b="${RANK_CPUS[0]:-} ${RANK_CPUS[1]:-}" "$_BINDING_AWK_LIB"'BEGIN {
  expand(a, ok); n = split(b, l, " "); for (i = 1; i <= n; i++) { split("", s); expand(l[i], s); for (c in s) if (!(c in ok)) bad = 1 }
  print (n == 2 && !bad) ? "yes" : "no" }')
check "this machine, 2 ranks: $(cat "$tmp/out")" "yes" "$inside"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
