#!/usr/bin/env python3
"""The soak's verdict from proc_sampler.py's CSV: resident memory per rank over the run, its growth
after the warm-up, and whether the thread and file-descriptor counts stayed put.

Warm-up: the first WARMUP steps. Baseline: the median RSS of a rank's samples in the next
WINDOW steps; end: the median of its samples in the last WINDOW steps, before the last step
(samples that see the last step are the final save and the exit, shown as "last sample"). Growth = end / baseline - 1,
which must be <= MAX_GROWTH (1%). Threads, fds and sockets: the most frequent count in the end
window must equal the one in the baseline window. A save opens its file and runs on a thread, and
a scrape is a socket, so single samples vary by one or two; their range is printed, not judged.

usage: soak_report.py SAMPLES.csv STEPS [--warmup 200] [--window 200] [--max-growth 0.01]
Prints a markdown report; exits 1 when a criterion fails.
"""
import argparse
import collections
import csv
import statistics
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("samples")
    ap.add_argument("steps", type=int)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--window", type=int, default=200)
    ap.add_argument("--max-growth", type=float, default=0.01)
    a = ap.parse_args()
    rows = collections.defaultdict(list)
    for r in csv.DictReader(open(a.samples)):
        rows[int(r["rank"])].append({k: float(v) for k, v in r.items()})
    failed = []
    base_lo, base_hi = a.warmup, a.warmup + a.window
    end_lo = a.steps - a.window
    print("| rank | " + " | ".join("step %d" % s for s in marks(a.steps)) + " | last sample | baseline (steps %d-%d) | end (steps %d-%d) | growth | peak after warm-up |"
          % (base_lo, base_hi, end_lo, a.steps - 1))
    print("|---|" + "---|" * (len(marks(a.steps)) + 5))
    counts = []
    for rank in sorted(rows):
        s = rows[rank]
        at = []
        for m in marks(a.steps):
            near = [x for x in s if x["step"] >= m]
            at.append("%.1f MiB" % (near[0]["rss_kib"] / 1024) if near else "-")
        at.append("%.1f MiB (step %d)" % (s[-1]["rss_kib"] / 1024, s[-1]["step"]))
        base = [x for x in s if base_lo < x["step"] <= base_hi]
        # Samples that see the last step are the end of the run (the last save, the exit): not steady state.
        end = [x for x in s if end_lo < x["step"] < a.steps]
        post = [x for x in s if base_lo < x["step"] < a.steps]
        if len(base) < 3 or len(end) < 3:
            failed.append("rank %d: too few samples (%d in the baseline window, %d in the end window)" % (rank, len(base), len(end)))
            continue
        b, e = statistics.median(x["rss_kib"] for x in base), statistics.median(x["rss_kib"] for x in end)
        peak = max(x["rss_kib"] for x in post)
        growth = e / b - 1
        print("| %d | %s | %.1f MiB | %.1f MiB | %+.2f%% | %.1f MiB (%+.2f%%) |"
              % (rank, " | ".join(at), b / 1024, e / 1024, 100 * growth, peak / 1024, 100 * (peak / b - 1)))
        if growth > a.max_growth:
            failed.append("rank %d: RSS grew %.2f%% after the warm-up (limit %.1f%%)" % (rank, 100 * growth, 100 * a.max_growth))
        for key in ("threads", "fds", "sockets"):
            mode_b = collections.Counter(x[key] for x in base).most_common(1)[0][0]
            mode_e = collections.Counter(x[key] for x in end).most_common(1)[0][0]
            lo, hi = min(x[key] for x in post), max(x[key] for x in post)
            counts.append("rank %d %s: %d in the baseline window, %d in the end window (after the warm-up: %d to %d)"
                          % (rank, key, mode_b, mode_e, lo, hi))
            if mode_e != mode_b:
                failed.append("rank %d: %s went from %d to %d" % (rank, key, mode_b, mode_e))
    print()
    for c in counts:
        print("- " + c)
    print()
    for f in failed:
        print("FAIL: " + f)
    sys.exit(1 if failed else 0)


def marks(steps):
    return [m for m in (100, 200, 500, 1000, 1500) if m < steps]


if __name__ == "__main__":
    main()
