#!/usr/bin/env python3
"""The metrics endpoint under load, with real sockets on loopback, while one rank trains.

Timeline: OFF_S seconds quiet, LOAD_S seconds of load, OFF_S seconds quiet (2, 8, 2: the load
outlasts the server's 5 s deadline, which every bad client must meet; the quiet windows only feed
the printed, unjudged step times). The load is 50
concurrent honest scrapers plus clients that connect and send nothing, dribble a request one byte
at a time, send garbage, send a 1 MiB request, and a flood of 100 silent connections (more than
the server keeps open). Checks: every honest scrape gets a 200 with the metrics; each bad client
is answered or cut off within the server's deadline; training runs through the load. The step
times under load and in the quiet windows are printed, not judged: on a shared CI machine
another job's burst decides them. bench/metrics_load.sh judges them (within 5%) on a quiet one.
Also: with --metrics-bind 127.0.0.1 the endpoint is not reachable on the host's other address.
The load runs at nice 19, standing in for scrapers on other hosts (see the comment in main).

Usage: metrics_load.py --bin B --data D --tmp T [--load-s 8] [--off-s 2]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

from harness import check, free_port

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
DEADLINE_S = 5.0  # HttpLimits::deadline_s: from accept to the last byte of the reply
SLACK_S = 3.0     # scheduling on a loaded 2-core machine
SCRAPERS = 50
PACE_S = 0.25     # between one scraper's scrapes: ~200 scrapes/s in all, where Prometheus does one per 15 s
REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: metrics_load\r\nAccept: text/plain\r\n\r\n"


def read_all(s):
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def scrape(port, timeout=10.0):
    """One honest scrape: (reply bytes, seconds)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(REQUEST)
        return read_all(s), time.monotonic() - t0


def scraped_step(port):
    data, _ = scrape(port)
    m = re.search(rb'^shardtrain_step\{[^}]*\} (\S+)$', data, re.M)
    return int(float(m.group(1))) if m else 0


def ended_within(s, limit):
    """Reads until the server closes or resets; (seconds it took, bytes received)."""
    t0, got = time.monotonic(), b""
    s.settimeout(limit)
    try:
        got = read_all(s)
    except (ConnectionResetError, BrokenPipeError):
        pass
    except socket.timeout:
        return None, got
    return time.monotonic() - t0, got


class Load:
    """The scrapers and the bad clients, each on its own thread, until stop is set."""

    def __init__(self, port):
        self.port, self.stop = port, threading.Event()
        self.lock = threading.Lock()
        self.ok, self.failed, self.latencies = 0, [], []
        self.swing = threading.Event()  # every scraper has had a reply
        self.bad = {"silent": [], "dribble": [], "garbage": [], "huge": [], "flood": []}  # (seconds or None, reply head)

    def record(self, kind, secs, head):
        with self.lock:
            self.bad[kind].append((secs, head))

    def scraper(self):
        while not self.stop.is_set():
            try:
                data, secs = scrape(self.port)
                good = data.startswith(b"HTTP/1.0 200 OK") and b"\nshardtrain_step{" in data
            except OSError as e:
                data, secs, good = repr(e).encode(), None, False
            with self.lock:
                if good:
                    self.ok += 1
                    self.latencies.append(secs)
                    if self.ok >= SCRAPERS:
                        self.swing.set()
                else:
                    self.failed.append(data[:120])
            time.sleep(PACE_S)

    def silent(self):
        while not self.stop.is_set():
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                secs, got = ended_within(s, DEADLINE_S + 2 * SLACK_S)
                self.record("silent", secs, got[:32])

    def dribble(self):
        while not self.stop.is_set():
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                t0, closed = time.monotonic(), None
                for b in REQUEST[:-2] + b"X-Slow: " + b"a" * 200:  # never ends its headers
                    try:
                        s.send(bytes([b]))
                    except OSError:
                        closed = time.monotonic() - t0
                        break
                    if time.monotonic() - t0 > DEADLINE_S + 2 * SLACK_S:
                        break
                    time.sleep(0.1)
                if closed is None:
                    secs, _ = ended_within(s, 1.0)
                    closed = None if secs is None else time.monotonic() - t0
                self.record("dribble", closed, b"")

    def garbage(self):
        rng = random.Random(7)
        while not self.stop.is_set():
            junk = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 600))) + b"\r\n\r\n"
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                try:
                    s.sendall(junk)
                except OSError:
                    pass
                secs, got = ended_within(s, DEADLINE_S + 2 * SLACK_S)
                self.record("garbage", secs, got[:32])
            time.sleep(0.05)

    def huge(self):
        while not self.stop.is_set():
            with socket.create_connection(("127.0.0.1", self.port), timeout=30) as s:
                t0 = time.monotonic()
                try:
                    s.sendall(b"GET /metrics HTTP/1.1\r\nX-Huge: " + b"h" * (1 << 20) + b"\r\n\r\n")
                except OSError:
                    pass  # reset once the server has seen enough
                secs, got = ended_within(s, DEADLINE_S + 2 * SLACK_S)
                self.record("huge", None if secs is None else time.monotonic() - t0, got[:48])
            time.sleep(0.2)

    def flood(self, n=100):
        self.swing.wait(timeout=5)  # once the scrapers are in full swing
        socks = []
        for _ in range(n):
            try:
                socks.append(socket.create_connection(("127.0.0.1", self.port), timeout=30))
            except OSError:
                pass
        for s in socks:
            secs, got = ended_within(s, DEADLINE_S + 2 * SLACK_S)
            self.record("flood", secs, got[:32])
            s.close()

    def run(self, seconds):
        workers = [self.scraper] * SCRAPERS + [self.silent] * 3 + [self.dribble] * 2 + [self.garbage, self.huge]
        threads = [threading.Thread(target=w, daemon=True) for w in workers]
        threads.append(threading.Thread(target=self.flood, daemon=True))
        for t in threads:
            t.start()
        time.sleep(seconds)
        self.stop.set()
        for t in threads:
            t.join(timeout=2 * DEADLINE_S + 4 * SLACK_S)
        return not any(t.is_alive() for t in threads)


def other_address():
    """This host's address on its default route (no packet is sent), or None."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            ip = s.getsockname()[0]
        return None if ip.startswith("127.") else ip
    except OSError:
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--load-s", type=float, default=8)
    ap.add_argument("--off-s", type=float, default=2)
    a = ap.parse_args()
    out = os.path.join(a.tmp, "metrics_load")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    port, mfile = free_port(), os.path.join(out, "metrics.jsonl")
    cmd = MPIRUN + ["-np", "1", a.bin, "train", "--model", "tiny", "--data", a.data, "--threads", "1", "--device", "cpu",
                    "--steps", "1000000", "--lr-schedule", "constant", "--log-every", "1000000", "--metrics-file", mfile,
                    "--metrics-port", str(port), "--metrics-bind", "127.0.0.1"]
    print("$ " + " ".join(cmd), flush=True)
    log = open(os.path.join(out, "train.log"), "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        end = time.monotonic() + 120
        step = 0
        while time.monotonic() < end and proc.poll() is None and step < 20:  # past start-up and warm-up
            try:
                step = scraped_step(port)
            except OSError:
                pass
            time.sleep(0.2)
        check(step >= 20, "the endpoint answers on 127.0.0.1:%d and training passed step 20" % port)
        ip = other_address()
        if ip:
            try:
                socket.create_connection((ip, port), timeout=2).close()
                reachable = True
            except OSError:
                reachable = False
            check(not reachable, "--metrics-bind 127.0.0.1: nothing listens on %s:%d" % (ip, port))
        marks, load, finished = [], Load(port), []

        def timeline():
            # This thread and the load threads it starts run at nice 19 (Linux's nice is a thread's):
            # they stand in for Prometheus servers on other hosts. On a shared 2-core machine their
            # own CPU would otherwise be what slows training, not the endpoint.
            os.nice(19)
            marks.append(scraped_step(port))
            time.sleep(a.off_s)
            marks.append(scraped_step(port))
            finished.append(load.run(a.load_s))
            marks.append(scraped_step(port))
            time.sleep(a.off_s)
            marks.append(scraped_step(port))

        t = threading.Thread(target=timeline)
        t.start()
        t.join()
        check(len(marks) == 4 and finished, "the load's timeline ran (marks %s)" % marks)
        finished = finished[0]
        check(proc.poll() is None, "training ran through the load")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    check(finished, "every load thread ended")

    lat = sorted(load.latencies)
    print("honest scrapes: %d answered, %d failed; latency median %.4f s, p99 %.4f s, max %.4f s"
          % (load.ok, len(load.failed), statistics.median(lat), lat[int(0.99 * (len(lat) - 1))], lat[-1]), flush=True)
    check(not load.failed, "every honest scrape got a 200 with the metrics (failures: %s)" % load.failed[:3])
    check(load.ok >= 5 * SCRAPERS, "%d honest scrapes in %g s by %d scrapers" % (load.ok, a.load_s, SCRAPERS))
    limit = DEADLINE_S + SLACK_S
    for kind, results in load.bad.items():
        secs = [s for s, _ in results]
        print("%s: %d connections, ended after max %s s; replies %s" % (
            kind, len(results), max((s for s in secs if s is not None), default=None),
            sorted({h.split(b"\r\n")[0].decode("latin-1") for _, h in results})), flush=True)
        check(results and all(s is not None and s <= limit for s in secs),
              "every %s connection was answered or closed by the server within %g s" % (kind, limit))
    # While the flood holds more connections than the server keeps (64), it drops the oldest silent
    # one, else the oldest still reading: a bad client whose bytes the server has not yet seen may
    # then get no reply at all (on a loaded machine).
    garbage = [h for _, h in load.bad["garbage"]]
    check(any(h.startswith(b"HTTP/1.0 400 Bad Request") for h in garbage) and
          all(h == b"" or h.startswith(b"HTTP/1.0 400 Bad Request") for h in garbage),
          "garbage gets 400 Bad Request, or is dropped unanswered while the flood fills the server")
    huge = [h for _, h in load.bad["huge"]]
    check(any(h.startswith(b"HTTP/1.0 431") for h in huge) and all(h == b"" or h.startswith(b"HTTP/1.0 431") for h in huge),
          "a 1 MiB request gets 431 or is cut off")

    steps = {}
    for line in open(mfile):
        j = json.loads(line)
        steps[j["step"]] = j["step_time_s"]
    print("window marks (steps):", marks, flush=True)
    # One step of margin at each mark: a step can straddle the edge of a window.
    before = [t for s, t in steps.items() if marks[0] + 1 < s <= marks[1] - 1]
    after = [t for s, t in steps.items() if marks[2] + 1 < s <= marks[3] - 1]
    quiet = before + after
    loaded = [t for s, t in steps.items() if marks[1] + 1 < s <= marks[2] - 1]
    check(len(quiet) >= 5 and len(loaded) >= 5, "%d quiet and %d loaded steps" % (len(quiet), len(loaded)))
    mq, ml = statistics.median(quiet), statistics.median(loaded)
    ratio = ml / mq
    result = {"quiet_median_s": mq, "loaded_median_s": ml, "ratio": ratio, "quiet_steps": len(quiet),
              "loaded_steps": len(loaded), "honest_scrapes": load.ok, "scrape_p99_s": lat[int(0.99 * (len(lat) - 1))],
              "bad_clients": {k: len(v) for k, v in load.bad.items()}}
    json.dump(result, open(os.path.join(out, "result.json"), "w"), indent=1)
    print(json.dumps(result), flush=True)
    drift = statistics.median(after) / statistics.median(before)
    result["quiet_after_over_before"] = drift
    json.dump(result, open(os.path.join(out, "result.json"), "w"), indent=1)
    print("step time under load / quiet: %.4f (quiet windows: %.4f apart); timing is judged by bench/metrics_load.sh"
          % (ratio, drift), flush=True)

if __name__ == "__main__":
    main()
