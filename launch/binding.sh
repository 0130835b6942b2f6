# shellcheck shell=bash
# Rank-to-core binding computed from the node's real topology (sysfs), for the launchers.
# Sourceable; bash + awk (mawk is enough) + coreutils only, as launch hosts may lack Python.
#
#   source "$SHARDTRAIN_HOME/launch/binding.sh"
#   binding_compute "$ranks_per_node" "$GPUS_PER_NODE"  # prints BINDING_SUMMARY; a GPU count of 0: CPU ranks
#
# It sets CORES_PER_RANK (physical cores = LibTorch threads per rank), RANK_CPUS[i] (local rank
# i's cpu list, e.g. "0-11,96-107": its cores plus their hyper-threads) and BINDING_SUMMARY, and
# exports SHARDTRAIN_RANK_CPUS ("list0;list1;...") and SHARDTRAIN_RANK_THREADS. The launchers do
# not call it themselves: launch/bind-rank.sh, put before the binary (mpirun --bind-to none,
# srun --cpu-bind=none --cpus-per-task), calls it in every rank on the rank's own node, so nodes
# plan from their own topology whichever host launched the job.

# Overrides (tests; nodes without nvidia-smi): SHARDTRAIN_SYSFS_ROOT (default /: reads
# sys/devices/system/{cpu,node}, sys/bus/pci/devices and proc/self/status under it),
# SHARDTRAIN_CPUS_ALLOWED (default: Cpus_allowed_list, the Slurm allocation under Slurm),
# SHARDTRAIN_GPU_NUMA ("0 0 0 0 1 1 1 1": local GPU i's NUMA node; set and empty: no GPUs).
#
# A GPU NUMA node of -1 (firmware does not say) makes the ranks spread evenly over the NUMA nodes,
# as with no GPUs: piling them on node 0 would halve every rank's cores on a two-socket node.

# awk helpers shared by the programs below: Linux cpu lists ("0-3,8") to sets and back.
_BINDING_AWK_LIB='
function expand(list, set,   n, parts, i, r, c) {
  n = split(list, parts, ",")
  for (i = 1; i <= n; i++) {
    if (parts[i] == "") continue
    if (split(parts[i], r, "-") == 1) r[2] = r[1]
    for (c = r[1] + 0; c <= r[2] + 0; c++) set[c] = 1
  }
}
function ranges(set, maxc,   c, out, start) {
  out = ""; start = -1
  for (c = 0; c <= maxc + 1; c++) {
    if ((c in set) && start < 0) start = c
    else if (!(c in set) && start >= 0) {
      out = out (out == "" ? "" : ",") (start == c - 1 ? start : start "-" (c - 1)); start = -1
    }
  }
  return out
}
'

# Prints "cpu core package numa" for each online cpu this process may use, read from sysfs.
# core: the first cpu of its thread_siblings_list (unique per physical core), else its core_id.
binding_topology() {
  local root=${SHARDTRAIN_SYSFS_ROOT:-/} sys online allowed
  sys=$root/sys/devices/system
  online=$(cat "$sys/cpu/online" 2>/dev/null)
  allowed=${SHARDTRAIN_CPUS_ALLOWED:-$(awk '/^Cpus_allowed_list:/ { print $2 }' "$root/proc/self/status" 2>/dev/null)}
  grep -H . "$sys"/cpu/cpu[0-9]*/topology/{thread_siblings_list,core_id,physical_package_id} \
    "$sys"/node/node[0-9]*/cpulist 2>/dev/null |
    awk -v online="$online" -v allowed="$allowed" "$_BINDING_AWK_LIB"'
    { i = match($0, /:[^:]*$/); path = substr($0, 1, i - 1); val = substr($0, i + 1) }
    path ~ /\/node[0-9]+\/cpulist$/ {
      node = path; sub(/\/cpulist$/, "", node); sub(/.*\/node/, "", node)
      split("", s); expand(val, s); for (c in s) numa[c] = node; next
    }
    { cpu = path; sub(/\/topology\/.*/, "", cpu); sub(/.*\/cpu/, "", cpu); cpu += 0; seen[cpu] = 1 }
    path ~ /thread_siblings_list$/ { split(val, p, /[-,]/); sib[cpu] = p[1] }
    path ~ /core_id$/ { coreid[cpu] = val }
    path ~ /physical_package_id$/ { pkg[cpu] = val }
    END {
      if (online != "") expand(online, on); else for (c in seen) on[c] = 1
      if (allowed != "") expand(allowed, ok); else for (c in on) ok[c] = 1
      for (c in on) if ((c in ok) && (c in seen))
        print c, ((c in sib) ? sib[c] : coreid[c] + 0), pkg[c] + 0, numa[c] + 0
    }'
}

# Prints local GPU i's NUMA node for each GPU this process sees (CUDA_VISIBLE_DEVICES order),
# space-separated; -1 where unknown; nothing without GPUs.
binding_gpu_numa() {
  if [ -n "${SHARDTRAIN_GPU_NUMA+set}" ]; then echo "$SHARDTRAIN_GPU_NUMA"; return; fi
  command -v nvidia-smi >/dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=index,uuid,pci.bus_id --format=csv,noheader 2>/dev/null |
    awk -F', *' -v root="${SHARDTRAIN_SYSFS_ROOT:-/}" -v visible="${CUDA_VISIBLE_DEVICES-}" '
    # sysfs names 00000000:53:00.0 (nvidia-smi) 0000:53:00.0: lower case, a 4-digit domain.
    { id = tolower($3); split(id, p, ":"); if (length(p[1]) > 4) id = substr(id, length(p[1]) - 3)
      f = root "/sys/bus/pci/devices/" id "/numa_node"; node = -1
      if ((getline val < f) > 0) node = val + 0
      close(f); n++; order[n] = node; byindex[$1] = node; byuuid[$2] = node }
    END {
      if (n == 0) exit
      if (visible == "") for (i = 1; i <= n; i++) out = out (i > 1 ? " " : "") order[i]
      else {
        m = split(visible, v, ",")
        for (i = 1; i <= m; i++)
          out = out (i > 1 ? " " : "") ((v[i] in byindex) ? byindex[v[i]] : (v[i] in byuuid) ? byuuid[v[i]] : -1)
      }
      print out
    }'
}

# The pure arithmetic. stdin: "cpu core package numa" rows (binding_topology); $1: ranks per node;
# $2: the GPUs' NUMA nodes, space-separated (local rank i uses GPU i mod their count, as the
# trainer does), empty: no GPUs. Prints "cores N", then "rank I NUMA THREADS CPULIST" per rank,
# "note TEXT" for each fallback taken, and "summary TEXT".
binding_plan() {
  sort -n -k1,1 | awk -v ranks="$1" -v gpus="$2" "$_BINDING_AWK_LIB"'
    NF >= 4 {
      key = $3 ":" $2; d = $4 + 0
      if (!(key in core_of)) {
        ncore++; core_of[key] = ncore
        if (!(d in dcores)) { ndom++; dom[ndom] = d }
        dcores[d]++; dcore[d, dcores[d]] = ncore
      }
      k = core_of[key]; nthr[k]++; thr[k, nthr[k]] = $1; if ($1 + 0 > maxcpu) maxcpu = $1 + 0
      cpus[$1 + 0] = 1
    }
    # Cores (and their hyper-threads) c0+1 .. c0+n of list L to rank r.
    function take(r, L, c0, n,   j, k, t) {
      for (j = c0 + 1; j <= c0 + n; j++) { k = L[j]; for (t = 1; t <= nthr[k]; t++) owner[thr[k, t]] = r }
    }
    function plan_numa(   r, d, used, L, j, i) {
      for (r = 0; r < ranks; r++) {
        d = rdom[r]; split("", L); for (j = 1; j <= dcores[d]; j++) L[j] = dcore[d, j]
        take(r, L, used[d] + 0, n); used[d] += n
      }
    }
    function plan_flat(   r, L, i, j, m) {
      for (i = 1; i <= ndom; i++) for (j = 1; j <= dcores[dom[i]]; j++) L[++m] = dcore[dom[i], j]
      for (r = 0; r < ranks; r++) { take(r, L, r * n, n); rdom[r] = core_dom_first(L[r * n + 1]) }
    }
    function core_dom_first(k,   i, j) {
      for (i = 1; i <= ndom; i++) for (j = 1; j <= dcores[dom[i]]; j++) if (dcore[dom[i], j] == k) return dom[i]
    }
    END {
      # NUMA domains in numeric order (insertion sort: a handful of them).
      for (i = 2; i <= ndom; i++) { x = dom[i]; for (j = i - 1; j >= 1 && dom[j] > x; j--) dom[j + 1] = dom[j]; dom[j + 1] = x }
      ng = split(gpus, g, " "); spread = (ng == 0)
      for (i = 1; i <= ng; i++) if (g[i] < 0) spread = 1
      if (ng > 0 && spread) print "note GPU NUMA node unknown (-1): spreading the ranks evenly over the NUMA nodes"
      for (r = 0; r < ranks; r++) {
        rdom[r] = spread ? dom[int(r * ndom / ranks) + 1] : g[r % ng + 1] + 0
        dranks[rdom[r]]++
      }
      n = -1
      for (d in dranks) { m = int(dcores[d] / dranks[d]); if (n < 0 || m < n) { n = m; short = d } }
      mode = "numa"
      if (n < 1) { n = int(ncore / ranks); mode = "flat" }
      if (n < 1) mode = "shared"
      if (ncore == 0) mode = "none"
      if (mode == "numa") plan_numa()
      else if (mode == "flat") {
        print "note NUMA node " short " has " (dcores[short] + 0) " usable cores for its " dranks[short] \
          " ranks: ignoring GPU locality, " n " cores per rank from all " ncore
        plan_flat()
      } else if (mode == "shared") {
        print "note only " (ncore + 0) " usable cores for " ranks " ranks: they share cpus " ranges(cpus, maxcpu) ", 1 thread each"
        n = 1
        for (r = 0; r < ranks; r++) rdom[r] = dom[1]
        for (c in cpus) owner[c] = "all"
      } else { print "note no usable cpus found in sysfs: the ranks run unbound"; n = 1 }
      print "cores", n
      tmin = -1; tmax = 0
      for (r = 0; r < ranks; r++) {
        split("", mine); t = 0
        for (c in owner) if (owner[c] == r || owner[c] == "all") { mine[c] = 1; t++ }
        if (tmin < 0 || t < tmin) tmin = t; if (t > tmax) tmax = t
        print "rank", r, rdom[r] + 0, t, ranges(mine, maxcpu)
      }
      # The summary: "binding: 8 ranks x 12 cores (24 hardware threads), NUMA 0: ranks 0-3, ...".
      s = "binding: " ranks " ranks x " n " cores (" (tmin == tmax ? tmax : tmin "-" tmax) " hardware threads)"
      if (mode == "flat") s = s ", GPU locality ignored"
      if (mode == "shared") s = "binding: " ranks " ranks share cpus " ranges(cpus, maxcpu) " (1 thread each)"
      if (mode == "none") s = "binding: none, " ranks " ranks unbound"
      for (i = 1; i <= ndom; i++) {
        split("", rs); any = 0
        for (r = 0; r < ranks; r++) if (rdom[r] == dom[i]) { rs[r] = 1; any = 1 }
        if (any) s = s ", NUMA " dom[i] ": ranks " ranges(rs, ranks)
      }
      print "summary", s
    }'
}

# Plans this node for $1 ranks ($2 GPUs per node; 0: CPU ranks, whatever nvidia-smi shows): sets
# CORES_PER_RANK, RANK_CPUS, BINDING_SUMMARY, exports SHARDTRAIN_RANK_{CPUS,THREADS}, prints the summary.
binding_compute() {
  local ranks=${1:?ranks per node} gpus kind rest r cpus
  [[ "$ranks" =~ ^[1-9][0-9]*$ ]] || { echo "error: binding_compute: ranks per node '$ranks' is not a positive number" >&2; return 2; }
  if [ "${2:-}" = 0 ]; then gpus=; else gpus=$(binding_gpu_numa); fi
  CORES_PER_RANK=1 RANK_CPUS=() BINDING_SUMMARY=
  while read -r kind rest; do
    case $kind in
      cores) CORES_PER_RANK=$rest ;;
      rank) read -r r _ _ cpus <<<"$rest"; RANK_CPUS[r]=$cpus ;;
      note) echo "binding: $rest" >&2 ;;
      summary) BINDING_SUMMARY=$rest ;;
    esac
  done < <(binding_topology | binding_plan "$ranks" "$gpus")
  SHARDTRAIN_RANK_CPUS=$(IFS=';'; echo "${RANK_CPUS[*]}")
  SHARDTRAIN_RANK_THREADS=$CORES_PER_RANK
  export SHARDTRAIN_RANK_CPUS SHARDTRAIN_RANK_THREADS
  echo "$BINDING_SUMMARY"
}
