#!/usr/bin/env bash
# The metrics endpoint under load for a minute, against a minute without it, while one rank trains
# the tiny model (bench/metrics_load_bench.py): 50 concurrent scrapers and 10 clients that send a
# request and never read the reply. Passes when the median step time under the load is within 5%
# of the quiet minutes' around it, every scrape got its metrics, and no thread, fd or socket is
# left behind. When the two quiet minutes alone differ by more than 5% (a busy machine), the
# comparison is inconclusive: exit 77.
# Usage: bench/metrics_load.sh [OUT]   (default out/metrics-load).
# Env: QUIET_S (60), LOAD_S (60), PACE (0.25 s between one scraper's scrapes), HOLD (10 s).
# Writes OUT/results.md.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
out=$(mkdir -p "${1:-$repo/out/metrics-load}" && cd "${1:-$repo/out/metrics-load}" && pwd)
data=$(bench_data "$out" 64)
start=$(date -u '+%Y-%m-%d %H:%M UTC')
rc=0
"$py" "$repo/bench/metrics_load_bench.py" --bin "$bin" --data "$data" --out "$out/run" --quiet-s "${QUIET_S:-60}" \
  --load-s "${LOAD_S:-60}" --pace "${PACE:-0.25}" --hold "${HOLD:-10}" > "$out/run.log" 2>&1 || rc=$?
verdict=$(grep -E '^(PASS|FAIL|INCONCLUSIVE)' "$out/run.log" || echo "no verdict (exit $rc): see $out/run.log")
"$py" - "$out/run/result.json" "$start" "$(nproc)" "$(uname -n)" "$verdict" <<'PY' | tee "$out/results.md"
import json, sys
r, start, cores, host, verdict = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
print("## The metrics endpoint under load (%s, %s cores, %s; bench/metrics_load.sh)" % (start, cores, host))
print()
print("| window | seconds | steps | median step time | load average (1 min) at its start / end |")
print("|---|---|---|---|---|")
for p in ("quiet-1", "load", "quiet-2"):
    print("| %s | %g | %d | %.5f s | %s / %s |" % (p, r["windows_s"]["load" if p == "load" else "quiet"], r["steps"][p],
          r["median_step_s"][p], r["loadavg"][p][0][0], r["loadavg"][p][1][0]))
print()
print("Load / quiet: %.4f; quiet-2 / quiet-1: %.4f." % (r["ratio_load_over_quiet"], r["quiet_2_over_quiet_1"]))
print("Scrapes: %d answered, %d failed; median %.4f s, p99 %.4f s. Slow clients: %d connections, TCP state when they closed: %s."
      % (r["scrapes_ok"], r["scrapes_failed"], r["scrape_median_s"], r["scrape_p99_s"], r["slow_connections"], r["slow_states_at_close"]))
print()
print("| trainer | before the load | during it (min-max) | last 20 s after it |")
print("|---|---|---|---|")
for k in ("threads", "fds", "sockets"):
    b, d, a = r["trainer_before"][k], r["trainer_during_load"][k], r["trainer_after"][k]
    print("| %s | %d | %d-%d | %d |" % (k, b["mode"], d["min"], d["max"], a["mode"]))
print()
print(verdict)
PY
exit "$rc"
