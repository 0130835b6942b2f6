#!/usr/bin/env python3
"""The metrics endpoint under a minute of load, against a minute without it, while one rank trains.

Timeline, after the warm-up: QUIET_S seconds with nothing connecting, LOAD_S seconds of load,
QUIET_S seconds with nothing connecting again. The load: 50 concurrent scrapers (each waits
--pace seconds between its scrapes) and 10 slow clients that shrink their receive buffer, send a
whole request and never read the reply, holding each connection for --hold seconds before
opening the next. The load runs at nice 19, standing in for scrapers on other hosts.

Measured: the median step time (the metrics JSONL's step_time_s) in each window; the training
process's threads, open fds and sockets, sampled four times a second. Criteria:
  - the loaded window's median step time is within 5% of the quiet windows' median, judged only
    when the two quiet windows agree within 5% (otherwise the machine is too noisy: inconclusive);
  - every honest scrape got a 200 with the metrics;
  - the threads, fds and sockets in the last 20 s of the second quiet window equal those of the
    first (nothing left behind), and the sockets during the load stayed below the server's limit.
Exit: 0 pass, 1 a criterion failed, 77 inconclusive (the step-time comparison could not be judged).

usage: metrics_load_bench.py --bin B --data D --out DIR [--quiet-s 60] [--load-s 60] [--pace 0.25]
"""
import argparse
import collections
import json
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from proc_sampler import last_step, proc_figures, ranks, scrape  # noqa: E402

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: metrics_load_bench\r\nAccept: text/plain\r\n\r\n"
SCRAPERS, SLOW = 50, 10
MAX_CONNECTIONS = 64  # the server's limit (docs/observability.md)
TCP_STATES = {1: "ESTABLISHED", 7: "CLOSE", 8: "CLOSE_WAIT", 11: "CLOSING"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loadavg():
    return open("/proc/loadavg").read().split()[:3]


class Load:
    def __init__(self, port, pace, hold):
        self.port, self.pace, self.hold = port, pace, hold
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.ok, self.failed, self.latencies = 0, [], []
        self.slow_states = collections.Counter()
        self.slow_conns = 0

    def scraper(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                data = scrape(self.port, 10, REQUEST)
                good = data.startswith(b"HTTP/1.0 200") and b"\nshardtrain_step{" in data
            except OSError as e:
                data, good = repr(e).encode(), False
            with self.lock:
                if good:
                    self.ok += 1
                    self.latencies.append(time.monotonic() - t0)
                else:
                    self.failed.append(data[:100])
            self.stop.wait(self.pace)

    def slow(self):
        while not self.stop.is_set():
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)  # the kernel's minimum: the reply does not fit
            try:
                s.connect(("127.0.0.1", self.port))
                s.sendall(REQUEST)
                self.stop.wait(self.hold)  # never reads
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
                state = TCP_STATES.get(struct.unpack("B", info[:1])[0], str(info[0]))
            except OSError as e:
                state = "error " + type(e).__name__
            finally:
                s.close()
            with self.lock:
                self.slow_conns += 1
                self.slow_states[state] += 1

    def run(self, seconds):
        threads = [threading.Thread(target=self.scraper, daemon=True) for _ in range(SCRAPERS)]
        threads += [threading.Thread(target=self.slow, daemon=True) for _ in range(SLOW)]
        for t in threads:
            t.start()
        time.sleep(seconds)
        self.stop.set()
        for t in threads:
            t.join(timeout=30)
        return not any(t.is_alive() for t in threads)


class Sampler:
    """The trainer's threads, fds and sockets four times a second, tagged with the current phase."""

    def __init__(self, pid):
        self.pid, self.phase, self.rows = pid, "warm-up", []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            f = proc_figures(self.pid)
            if f:
                self.rows.append((time.monotonic(), self.phase) + f)
            self.stop.wait(0.25)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--quiet-s", type=float, default=60)
    ap.add_argument("--load-s", type=float, default=60)
    ap.add_argument("--pace", type=float, default=0.25)
    ap.add_argument("--hold", type=float, default=10)
    a = ap.parse_args()
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    port, mfile = free_port(), os.path.join(a.out, "metrics.jsonl")
    mpirun = ["mpirun", "--oversubscribe", "--bind-to", "none"] + (["--allow-run-as-root"] if os.getuid() == 0 else [])
    cmd = mpirun + ["-np", "1", a.bin, "train", "--model", "tiny", "--data", a.data, "--threads", "1", "--device", "cpu",
                    "--steps", "1000000", "--lr-schedule", "constant", "--log-every", "1000000", "--metrics-file", mfile,
                    "--metrics-port", str(port), "--metrics-bind", "127.0.0.1"]
    print("$ " + " ".join(cmd), flush=True)
    log = open(os.path.join(a.out, "train.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    marks, loads, failures = {}, {}, []
    try:
        end = time.monotonic() + 180
        while time.monotonic() < end and proc.poll() is None and last_step(mfile) < 50:
            time.sleep(0.5)
        if last_step(mfile) < 50:
            sys.exit("training did not reach step 50 (see %s/train.log)" % a.out)
        trainer = ranks(proc.pid).get(0)
        sampler = Sampler(trainer)
        threading.Thread(target=sampler.run, daemon=True).start()
        os.nice(19)  # the load and this driver stand in for scrapers on other hosts
        for phase, secs in (("quiet-1", a.quiet_s), ("load", a.load_s), ("quiet-2", a.quiet_s)):
            sampler.phase = phase
            marks[phase] = [last_step(mfile)]
            loads[phase] = [loadavg()]
            if phase == "load":
                load = Load(port, a.pace, a.hold)
                finished = load.run(secs)
            else:
                time.sleep(secs)
            marks[phase].append(last_step(mfile))
            loads[phase].append(loadavg())
        sampler.stop.set()
        if proc.poll() is not None:
            failures.append("training stopped during the bench (exit %s)" % proc.returncode)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()

    times = {}
    for line in open(mfile):
        j = json.loads(line)
        times[j["step"]] = j["step_time_s"]
    # One step of margin at each mark: a step can straddle a window's edge.
    win = {p: [t for s, t in times.items() if m[0] + 1 < s <= m[1] - 1] for p, m in marks.items()}
    med = {p: statistics.median(v) if v else float("nan") for p, v in win.items()}
    quiet = win["quiet-1"] + win["quiet-2"]
    mq = statistics.median(quiet)
    ratio = med["load"] / mq
    drift = med["quiet-2"] / med["quiet-1"]

    # Threads, fds, sockets: the most frequent value per window, and the range.
    def figures(phase, last_s=None):
        rows = [r for r in sampler.rows if r[1] == phase]
        if last_s:
            rows = [r for r in rows if r[0] >= rows[-1][0] - last_s]
        out = {}
        for i, k in ((3, "threads"), (4, "fds"), (5, "sockets")):
            vals = [r[i] for r in rows]
            out[k] = {"mode": collections.Counter(vals).most_common(1)[0][0], "min": min(vals), "max": max(vals)}
        return out
    before, during, after = figures("quiet-1"), figures("load"), figures("quiet-2", last_s=20)
    lat = sorted(load.latencies)
    result = {
        "windows_s": {"quiet": a.quiet_s, "load": a.load_s}, "marks": marks, "loadavg": loads,
        "steps": {p: len(v) for p, v in win.items()}, "median_step_s": med, "quiet_median_s": mq,
        "ratio_load_over_quiet": ratio, "quiet_2_over_quiet_1": drift,
        "scrapes_ok": load.ok, "scrapes_failed": len(load.failed), "scrape_failures": [f.decode("latin-1") for f in load.failed[:3]],
        "scrape_median_s": statistics.median(lat) if lat else None, "scrape_p99_s": lat[int(0.99 * (len(lat) - 1))] if lat else None,
        "slow_connections": load.slow_conns, "slow_states_at_close": dict(load.slow_states), "load_threads_ended": finished,
        "trainer_before": before, "trainer_during_load": during, "trainer_after": after,
    }
    json.dump(result, open(os.path.join(a.out, "result.json"), "w"), indent=1)
    print(json.dumps(result, indent=1), flush=True)

    if load.failed:
        failures.append("%d honest scrapes failed: %s" % (len(load.failed), result["scrape_failures"]))
    if load.ok < SCRAPERS * 10:
        failures.append("only %d honest scrapes" % load.ok)
    if not finished:
        failures.append("some load threads did not end")
    for k in ("threads", "fds", "sockets"):
        if after[k]["mode"] != before[k]["mode"] or after[k]["max"] > before[k]["max"]:
            failures.append("%s: %s before the load, %s in the last 20 s after it" % (k, before[k], after[k]))
    if during["sockets"]["max"] > before["sockets"]["max"] + MAX_CONNECTIONS + 1:  # + the listening socket's
        failures.append("sockets during the load reached %d" % during["sockets"]["max"])
    if min(len(v) for v in win.values()) < 40:
        failures.append("too few steps in a window: %s" % result["steps"])
    print("median step time: quiet-1 %.5f s, load %.5f s, quiet-2 %.5f s; load / quiet = %.4f; quiet-2 / quiet-1 = %.4f"
          % (med["quiet-1"], med["load"], med["quiet-2"], ratio, drift), flush=True)
    for f in failures:
        print("FAIL: " + f, flush=True)
    if failures:
        sys.exit(1)
    if abs(drift - 1) > 0.05:
        print("INCONCLUSIVE: the quiet windows alone differ by %+.1f%%: this machine is too busy to resolve 5%%" % (100 * (drift - 1)), flush=True)
        sys.exit(77)
    if ratio >= 1.05:
        print("FAIL: the loaded window's median step time is %.1f%% above the quiet windows'" % (100 * (ratio - 1)), flush=True)
        sys.exit(1)
    print("PASS: the loaded window's median step time is within 5%% of the quiet windows' (%+.1f%%)" % (100 * (ratio - 1)), flush=True)


if __name__ == "__main__":
    main()
