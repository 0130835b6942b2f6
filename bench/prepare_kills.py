#!/usr/bin/env python3
"""kill -9 of `shardtrain prepare` at chosen moments, for bench/crash_consistency.sh.

prepare writes each output to OUTPUT.tmp and renames it into place when it is complete (older
builds: OUTPUT.tmp.PID; both are watched): the train file's temporary first, then the validation
file, written and renamed, then the train file's rename, so the two appear together. Each trial runs prepare into an empty directory and
kills it at one of three moments, in turn:
  random  0..T seconds after the start, T = an uninterrupted run's duration;
  write   the train file's temporary has just appeared (+ 0..5 ms): it is being written;
  rename  the train file's temporary has just disappeared: the rename is happening or done;
  val     the validation file has just appeared under its name (renamed), the train file not yet
          (older builds: the whole train file's write; now only its final fsync and rename).
After the kill, each output must be absent or equal to an uninterrupted run's (h5diff: every
dataset and attribute), never partial. Then prepare runs again into the same directory, with
whatever the kill left there, and must exit 0 with outputs equal to the uninterrupted run's.
Prints a markdown table and a JSON summary; exits 1 if a trial fails.

usage: prepare_kills.py --bin B --out DIR --kills N -- PREPARE-ARGS... (without --output)
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

POLL_S = 0.0002
OUTS = ("train.h5", "train.val.h5")


def same(a, b):
    """h5diff finds no difference (exit 0), and the number of bytes that differ (cmp -l)."""
    eq = subprocess.run(["h5diff", a, b], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    nb = subprocess.run(["cmp", "-l", a, b], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL).stdout.count(b"\n")
    return eq, nb


def run_prepare(binary, args, out):
    return subprocess.Popen([binary, "prepare"] + args + ["--output", os.path.join(out, "train.h5")],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "prepare.err"), "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--kills", type=int, default=15)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    args = [x for x in a.rest if x != "--"]
    rng = random.Random(a.seed)
    shutil.rmtree(a.out, ignore_errors=True)
    ref = os.path.join(a.out, "ref")
    os.makedirs(ref)
    t0 = time.monotonic()
    p = run_prepare(a.bin, args, ref)
    if p.wait() != 0:
        sys.exit("the uninterrupted prepare failed: see %s/prepare.err" % ref)
    duration = time.monotonic() - t0
    rows, failures = [], []
    moments = ["random", "write", "rename", "val"]
    for i in range(a.kills):
        moment = moments[i % len(moments)]
        d = os.path.join(a.out, "kill-%02d" % i)
        os.makedirs(d)
        p = run_prepare(a.bin, args, d)
        tmps = [os.path.join(d, "train.h5.tmp"), os.path.join(d, "train.h5.tmp.%d" % p.pid)]
        start = time.monotonic()
        if moment == "random":
            time.sleep(rng.uniform(0, duration))
        elif moment == "val":
            while p.poll() is None and not os.path.exists(os.path.join(d, "train.val.h5")):
                time.sleep(POLL_S)
        else:
            seen = False
            while p.poll() is None:
                here = any(os.path.exists(t) for t in tmps)
                if here and not seen:
                    seen = True
                    if moment == "write":
                        time.sleep(rng.uniform(0, 0.005))
                        break
                elif seen and not here:
                    break
                time.sleep(POLL_S)
        at = time.monotonic() - start
        ended_first = p.poll() is not None
        if not ended_first:
            p.send_signal(signal.SIGKILL)
        p.wait()
        state, ok = [], True
        for name in OUTS:
            f = os.path.join(d, name)
            if not os.path.exists(f):
                state.append("absent")
                continue
            eq, _ = same(f, os.path.join(ref, name))
            state.append("complete" if eq else "PARTIAL")
            ok &= eq
        left = sorted(n for n in os.listdir(d) if ".tmp" in n)
        pair = "val without train" if state == ["absent", "complete"] else ""
        # The rerun, into the same directory.
        q = run_prepare(a.bin, args, d)
        rc = q.wait()
        rerun = []
        for name in OUTS:
            f = os.path.join(d, name)
            eq, nb = same(f, os.path.join(ref, name)) if os.path.exists(f) else (False, -1)
            rerun.append((eq, nb))
            ok &= eq
        ok &= rc == 0
        row = {"trial": i, "moment": moment, "at_s": round(at, 4), "ended_before_kill": ended_first,
               "train": state[0], "val": state[1], "pair": pair, "tmp_left": left, "rerun_exit": rc,
               "rerun_equal": all(e for e, _ in rerun), "rerun_bytes_differing": [nb for _, nb in rerun], "ok": ok}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if not ok:
            failures.append(row)
    by = {}
    for r in rows:
        m = by.setdefault(r["moment"], {"kills": 0, "ended_before_kill": 0, "absent": 0, "complete": 0, "partial": 0,
                                        "val_without_train": 0, "tmp_left": 0, "rerun_equal": 0})
        m["kills"] += 1
        m["ended_before_kill"] += r["ended_before_kill"]
        m["absent"] += r["train"] == "absent"
        m["complete"] += r["train"] == "complete"
        m["partial"] += "PARTIAL" in (r["train"], r["val"])
        m["val_without_train"] += bool(r["pair"])
        m["tmp_left"] += bool(r["tmp_left"])
        m["rerun_equal"] += r["rerun_equal"] and r["rerun_exit"] == 0
    print("uninterrupted prepare: %.2f s" % duration)
    print()
    print("| moment | kills | train.h5 absent | train.h5 complete | a partial file | train.val.h5 without train.h5 | a temporary left | rerun equal to the uninterrupted output |")
    print("|---|---|---|---|---|---|---|---|")
    for m in moments:
        if m in by:
            x = by[m]
            print("| %s | %d | %d | %d | %d | %d | %d | %d |" % (m, x["kills"], x["absent"], x["complete"], x["partial"],
                                                              x["val_without_train"], x["tmp_left"], x["rerun_equal"]))
    print()
    nb = sorted({n for r in rows for n in r["rerun_bytes_differing"]})
    print("Bytes that differ between a rerun's outputs and the uninterrupted run's (cmp -l): %s" % nb)
    json.dump({"duration_s": duration, "by_moment": by, "failures": len(failures)},
              open(os.path.join(a.out, "summary.json"), "w"), indent=1)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
