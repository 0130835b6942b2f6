#!/usr/bin/env python3
"""kill -9 every shardtrain rank under a launcher at a chosen moment, for bench/crash_consistency.sh.

Moments (--mode):
  random   --delay seconds from now;
  save     a checkpoint's step-N.h5.tmp has just appeared in --dir (a save is writing), plus a random
           0..--jitter seconds (default 0.02) so the kill lands inside the write;
  publish  a step-N.h5.tmp that appeared has just disappeared: rank 0 renamed it and is updating
           `latest` (its fsync and rename) or has just done so.
The directory is polled every 0.2 ms. A tmp left by an earlier kill does not count as appearing:
only a name, inode or modification time not present when this helper started does. If the
moment has not come within --timeout seconds, the ranks are killed then and the mode is reported
as "<mode>-timeout".
Prints one JSON line: mode, whether it killed, seconds waited, and what --dir held once every
rank was dead (tmp files, latest's target, the newest step-*.h5).

usage: kill_at.py --pid LAUNCHER --dir CKPT --mode random|save|publish [--delay S] [--seed N]
"""
import argparse
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_sampler import ranks  # noqa: E402

POLL_S = 0.0002


def tmps(d):
    """{name: (inode, mtime_ns)} of the *.h5.tmp files in d."""
    out = {}
    try:
        for n in os.listdir(d):
            if n.endswith(".h5.tmp"):
                try:
                    st = os.stat(os.path.join(d, n))
                    out[n] = (st.st_ino, st.st_mtime_ns)
                except OSError:
                    pass
    except OSError:
        pass
    return out


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--mode", choices=["random", "save", "publish"], required=True)
    ap.add_argument("--delay", type=float, default=0)
    ap.add_argument("--jitter", type=float, default=0.02)
    ap.add_argument("--timeout", type=float, default=30)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    t0 = time.monotonic()
    before = tmps(a.dir)
    pids = ranks(a.pid)
    mode, fresh = a.mode, None
    next_refresh = t0
    while True:
        now = time.monotonic()
        if not alive(a.pid):
            print(json.dumps({"mode": a.mode, "killed": False, "waited_s": now - t0}))
            return
        if now >= next_refresh:
            pids = ranks(a.pid) or pids
            next_refresh = now + 0.5
        if now - t0 > a.timeout:
            mode += "-timeout"
            break
        if a.mode == "random":
            if now - t0 >= a.delay:
                break
            time.sleep(min(0.01, a.delay - (now - t0)))
            continue
        cur = tmps(a.dir)
        new = [n for n, v in cur.items() if before.get(n) != v]
        if fresh is None and new:
            fresh = new[0]
            if a.mode == "save":
                time.sleep(rng.uniform(0, a.jitter))
                break
        elif fresh is not None and a.mode == "publish" and fresh not in cur:
            break
        time.sleep(POLL_S)
    waited = time.monotonic() - t0
    for p in pids.values():
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 10
    while any(alive(p) for p in pids.values()) and time.monotonic() < end:
        time.sleep(0.001)
    left = tmps(a.dir)
    try:
        latest = open(os.path.join(a.dir, "latest")).read().strip()
    except OSError:
        latest = None
    steps = sorted(n for n in os.listdir(a.dir) if n.startswith("step-") and n.endswith(".h5")) if os.path.isdir(a.dir) else []
    print(json.dumps({"mode": mode, "killed": bool(pids), "ranks": len(pids), "waited_s": round(waited, 4),
                      "aimed_at": fresh, "tmp_at_kill": sorted(left), "latest": latest,
                      "newest_file": steps[-1] if steps else None}))


if __name__ == "__main__":
    main()
