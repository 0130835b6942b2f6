#!/usr/bin/env bash
# Renders the MPIJob for EKS from a values file: every {{ KEY }} in mpijob.template.yaml is
# replaced by the file's KEY=VALUE; a key missing from either side is an error (exit 2).
#   containers/eks/render.sh [VALUES]  > mpijob.yaml     (default: containers/eks/values.env)
#   kubectl apply -f mpijob.yaml ; kubectl logs -f job/NAME-launcher
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
values=${1:-$here/values.env}
[ -f "$values" ] || { echo "error: values file '$values' does not exist" >&2; exit 2; }
declare -A val
while IFS= read -r line || [ -n "$line" ]; do
  line=${line%%#*}
  [[ "$line" =~ ^[[:space:]]*$ ]] && continue
  [[ "$line" =~ ^[[:space:]]*([A-Z_][A-Z0-9_]*)=[[:space:]]*([^[:space:]]*)[[:space:]]*$ ]] \
    || { echo "error: $values: '$line' is not KEY=VALUE" >&2; exit 2; }
  val[${BASH_REMATCH[1]}]=${BASH_REMATCH[2]}
done < "$values"
template=$(cat "$here/mpijob.template.yaml")
for key in $(grep -oE '\{\{ [A-Z_][A-Z0-9_]* \}\}' <<< "$template" | tr -d '{} ' | sort -u); do
  [ -n "${val[$key]:-}" ] || { echo "error: $values has no $key; the template needs it" >&2; exit 2; }
  template=${template//"{{ $key }}"/${val[$key]}}
done
for n in NODES GPUS_PER_NODE EFA_PER_NODE; do
  [[ "${val[$n]:-}" =~ ^[1-9][0-9]*$ ]] || { echo "error: $values: $n='${val[$n]:-}' is not a positive number" >&2; exit 2; }
done
# The operator names pods NAME-worker-N: each must be a DNS label (63 characters at most).
worker="${val[NAME]}-worker-$((val[NODES] - 1))"
[[ ${#worker} -le 63 && "$worker" =~ ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$ ]] \
  || { echo "error: $values: NAME='${val[NAME]}' gives pod name '$worker', not a DNS label of at most 63 characters" >&2; exit 2; }
printf '%s\n' "$template"
