#!/usr/bin/env python3
"""Samples a running shardtrain job's ranks, for the soak and metrics-load benches.

Every --interval seconds, for each process under the launcher PID whose name is shardtrain:
its rank (OMPI_COMM_WORLD_RANK), resident memory (VmRSS, KiB), threads, open file descriptors
and how many of them are sockets. With --port, a scraper thread also GETs /metrics once per
--scrape-every seconds (1 Hz by default) and keeps the step it reports. The step written with
each sample is the newest of the scrape's and the metrics JSONL's last line (--metrics-file).
Writes CSV rows to --out until the launcher exits (or --duration passes).

usage: proc_sampler.py --pid LAUNCHER --out samples.csv [--port P] [--metrics-file F]
                       [--interval 1] [--scrape-every 1] [--duration S]
"""
import argparse
import json
import os
import re
import socket
import threading
import time

REQUEST = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: proc_sampler\r\n\r\n"


def children(pid):
    """Every descendant of pid (from /proc/*/stat's ppid)."""
    parent = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/stat" % d) as f:
                    s = f.read()
                parent[int(d)] = int(s[s.rindex(")") + 2:].split()[1])
            except (OSError, ValueError):
                pass
    out, unvisited = [], [pid]
    while unvisited:
        p = unvisited.pop()
        kids = [c for c, pp in parent.items() if pp == p]
        out += kids
        unvisited += kids
    return out


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def rank_of(pid):
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            for kv in f.read().split(b"\0"):
                if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                    return int(kv.split(b"=", 1)[1])
    except (OSError, ValueError):
        pass
    return -1


def ranks(launcher):
    """{rank: pid} of the shardtrain processes under launcher."""
    return {rank_of(p): p for p in children(launcher) if comm(p) == "shardtrain"}


def proc_figures(pid):
    """(rss_kib, threads, fds, sockets) or None when the process is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            st = f.read()
        rss = int(re.search(r"^VmRSS:\s+(\d+)", st, re.M).group(1))
        thr = int(re.search(r"^Threads:\s+(\d+)", st, re.M).group(1))
        fds = socks = 0
        for fd in os.listdir("/proc/%d/fd" % pid):
            fds += 1
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)).startswith("socket:"):
                    socks += 1
            except OSError:
                pass
        return rss, thr, fds, socks
    except (OSError, AttributeError):
        return None


def last_step(path):
    """The step of a metrics JSONL's last complete line (0 when none)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 65536))
            lines = f.read().split(b"\n")
        for line in reversed(lines):
            if line.strip():
                try:
                    return int(json.loads(line)["step"])
                except (ValueError, KeyError):
                    continue
    except OSError:
        pass
    return 0


def scrape(port, timeout, request=REQUEST):
    """One GET /metrics on localhost: the whole response, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while True:
            c = s.recv(65536)
            if not c:
                return data
            data += c


class Scraper:
    def __init__(self, port, every):
        self.port, self.every = port, every
        self.step, self.ok, self.failed, self.latencies = 0, 0, 0, []
        self.events = []  # (seconds since start, ok) per scrape
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                data = scrape(self.port, 5)
                m = re.search(rb"^shardtrain_step\{[^}]*\} (\S+)$", data, re.M)
                good = data.startswith(b"HTTP/1.0 200") and m is not None
                if good:
                    self.step = int(float(m.group(1)))
                    self.latencies.append(time.monotonic() - t0)
            except OSError:
                good = False
            self.events.append((t0, good))
            if good:
                self.ok += 1
            else:
                self.failed += 1
            self.stop.wait(max(0.0, self.every - (time.monotonic() - t0)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--metrics-file", default="")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--scrape-every", type=float, default=1.0)
    ap.add_argument("--duration", type=float, default=0)
    a = ap.parse_args()
    scr = None
    if a.port:
        scr = Scraper(a.port, a.scrape_every)
        threading.Thread(target=scr.run, daemon=True).start()
    t_start = time.monotonic()
    with open(a.out, "w") as out:
        out.write("t,rank,pid,step,rss_kib,threads,fds,sockets,scrapes_ok,scrapes_failed\n")
        while os.path.exists("/proc/%d" % a.pid):
            t = time.monotonic() - t_start
            if a.duration and t > a.duration:
                break
            step = max(scr.step if scr else 0, last_step(a.metrics_file) if a.metrics_file else 0)
            for r, p in sorted(ranks(a.pid).items()):
                f = proc_figures(p)
                if f:
                    out.write("%.2f,%d,%d,%d,%d,%d,%d,%d,%d,%d\n" % ((t, r, p, step) + f + (
                        scr.ok if scr else 0, scr.failed if scr else 0)))
            out.flush()
            time.sleep(max(0.0, a.interval - (time.monotonic() - t_start - t)))
    if scr:
        scr.stop.set()
        # Failures before the first good scrape are start-up (the endpoint was not listening yet),
        # after the last one shut-down (the endpoint closes as training ends): only those between count.
        oks = [i for i, (_, good) in enumerate(scr.events) if good]
        mid = sum(1 for _, good in scr.events[oks[0]:oks[-1]] if not good) if oks else 0
        lat = sorted(scr.latencies)
        summary = {"scrapes_ok": scr.ok, "scrapes_failed_while_up": mid,
                   "scrapes_failed_at_start_or_end": scr.failed - mid,
                   "scrape_p99_s": lat[int(0.99 * (len(lat) - 1))] if lat else None,
                   "scrape_max_s": lat[-1] if lat else None}
        with open(a.out + ".scrapes.json", "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
