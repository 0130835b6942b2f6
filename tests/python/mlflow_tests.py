#!/usr/bin/env python3
"""--mlflow-uri end to end against a real `mlflow server` (SQLite store in a temp directory), read
back through MLflow's own Python client (mlflow.tracking.MlflowClient):
  uri       --mlflow-uri file:///... exits 2 with one line that says to start `mlflow server`
  finished  a 2-rank run: status FINISHED, params = the options, tags (host, world size, strategy,
            commit), every metric of the --metrics-file JSONL at every step = MLflow's latest
            point at or before it, every point a JSONL point, held values not sent again
  killed    SIGTERM mid-run: status KILLED, with an end time
  failed    a non-finite loss stops the run (exit 65): status FAILED
  down      the server SIGKILLed mid-run: training ends with exit 0, in bounded time, with the
            losses of a run without MLflow, and one failure line (not one per request)
One server serves every case (it takes ~20 s to start on 2 cores; the run without MLflow trains
meanwhile). Usage: mlflow_tests.py --bin B --data D --tmp T --repo R
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from harness import check, free_port

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none"]
STEPS, LOG_EVERY = 20, 5  # four progress lines: enough for held values and the down case's 15 steps after the kill
DOWN_SLEEP_S = 0.1  # per step in the down case: 15 steps after the kill, >= 1.5 s to see it
FAILURE_LINE = re.compile(r"MLflow at \S+: \d+ requests? failed and \d+ metric batch(es were| was) dropped")


def train_cmd(a, out, name, extra, steps=STEPS, log_every=LOG_EVERY):
    return MPIRUN + ["-np", "2", a.bin, "train", "--config", os.path.join(a.repo, "configs", "tiny-demo.cfg"),
                     "--data", a.data, "--steps", str(steps), "--log-every", str(log_every), "--batch-size", "4",
                     "--threads", "1", "--device", "cpu", "--val-every", "0", "--val-batches", "2",
                     "--accuracy-samples", "0", "--metrics-file", os.path.join(out, name + ".jsonl")] + extra


def flatten(node, tag, out):
    """The JSONL line's numeric leaves, keys joined by '/' (booleans, strings and nulls are not figures)."""
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return
    if isinstance(node, (int, float)):
        out[tag] = float(node)
    elif isinstance(node, dict):
        for k, v in node.items():
            flatten(v, k if not tag else tag + "/" + k, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            flatten(v, tag + "/" + str(i), out)


def jsonl_series(path):
    """{key: [(step, value)]} from a --metrics-file."""
    series = {}
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            flat = {}
            for k, v in j.items():
                if k != "step" and (j["step"] > 0 or k.startswith("val_")):  # step 0: validation alone
                    flatten(v, k, flat)
            for k, v in flat.items():
                series.setdefault(k, []).append((j["step"], v))
    return series


def losses(path):
    with open(path) as f:
        return [(j["step"], j["loss"]) for j in map(json.loads, f)]


def close(x, y):
    return x == y or (math.isfinite(x) and math.isfinite(y) and abs(x - y) <= 1e-6 * max(abs(x), abs(y)))


def start_server(tmp):
    port = free_port()
    log = open(os.path.join(tmp, "server.log"), "w")
    cmd = [os.path.join(os.path.dirname(sys.executable), "mlflow"), "server", "--backend-store-uri",
           "sqlite:///" + os.path.join(tmp, "mlflow.db"), "--default-artifact-root", os.path.join(tmp, "artifacts"),
           "--host", "127.0.0.1", "--port", str(port), "--workers", "1"]
    env = dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")  # no job-runner processes: a quicker start
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    return proc, "http://127.0.0.1:%d" % port, time.monotonic()


def wait_healthy(proc, uri, started, limit_s=90):
    while time.monotonic() - started < limit_s:
        check_alive = proc.poll()
        if check_alive is not None:
            return None
        try:
            with urllib.request.urlopen(uri + "/health", timeout=1) as r:
                if r.status == 200:
                    return time.monotonic() - started
        except OSError:
            pass
        time.sleep(0.25)
    return None


def stop_server(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)  # uvicorn's worker too: the whole session
    proc.wait()


def find_run(client, experiment, run_name):
    exp = client.get_experiment_by_name(experiment)
    check(exp is not None, "experiment %r exists" % experiment)
    runs = client.search_runs([exp.experiment_id], filter_string="attributes.run_name = '%s'" % run_name)
    check(len(runs) == 1, "one run named %r (got %d)" % (run_name, len(runs)))
    return runs[0]


def case_uri(a):
    r = subprocess.run([a.bin, "train", "--data", a.data, "--mlflow-uri", "file:///tmp/x"], capture_output=True, text=True,
                       timeout=60)
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    check(r.returncode == 2, "--mlflow-uri file:///tmp/x exits 2 (got %d)" % r.returncode)
    check(len(lines) == 1 and "--mlflow-uri" in lines[0] and "mlflow server" in lines[0] and "http://" in lines[0],
          "one line naming --mlflow-uri that says to start `mlflow server` and pass its http:// URI: %r" % r.stderr)
    r = subprocess.run([a.bin, "train", "--data", a.data, "--mlflow-uri", "/tmp/mlruns"], capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == 2 and "--mlflow-uri" in r.stderr, "a bare path is refused too (exit %d)" % r.returncode)


def check_finished(a, client, out, started_s):
    run = find_run(client, "shardtrain-test", "finished")
    check(run.info.status == "FINISHED", "status FINISHED (got %s)" % run.info.status)
    check(run.info.end_time and run.info.end_time >= run.info.start_time, "an end time after the start time")
    p = run.data.params
    want = {"model": "tiny", "steps": str(STEPS), "batch-size": "4", "lr": "4e-3", "lr-schedule": "cosine",
            "warmup-steps": "50", "log-every": str(LOG_EVERY), "sharding": "full_shard", "data": a.data,
            "mlflow-experiment": "shardtrain-test", "run-name": "finished"}
    for k, v in want.items():
        check(p.get(k) == v, "param %s = %r (got %r)" % (k, v, p.get(k)))
    # Every option of --help-defaults is a param, at its default unless given.
    table = subprocess.run([a.bin, "train", "--help-defaults"], capture_output=True, text=True, check=True).stdout
    defaults = dict(re.findall(r"^\| `--([\w-]+)` \| `([^`]*)` \|", table, re.M))
    missing = [k for k in defaults if k not in p]
    check(not missing, "every option with a default is a param (%d options; missing: %s)" % (len(defaults), missing))
    given = set(want) | {"threads", "device", "val-every", "val-batches", "accuracy-samples", "max-new-tokens", "config"}
    differ = {k: (p[k], v) for k, v in defaults.items() if k not in given and p[k] != v and k not in ("metrics-job",)}
    check(not differ, "the other options' params are their defaults (differ: %s)" % differ)
    t = run.data.tags
    check(t.get("host") == socket.gethostname(), "tag host = %r (got %r)" % (socket.gethostname(), t.get("host")))
    check(t.get("world_size") == "2", "tag world_size = 2 (got %r)" % t.get("world_size"))
    check(t.get("strategy") == "full_shard", "tag strategy = full_shard (got %r)" % t.get("strategy"))
    commit = t.get("git_commit", "").replace("-dirty", "")
    ok = re.fullmatch(r"[0-9a-f]{40}", commit) and subprocess.run(
        ["git", "-C", a.repo, "merge-base", "--is-ancestor", commit, "HEAD"]).returncode == 0
    check(ok, "tag git_commit %r is this checkout's HEAD or an ancestor" % t.get("git_commit"))
    check(t.get("mlflow.source.git.commit") == commit, "MLflow's own commit tag is the commit id alone (no -dirty)")
    series = jsonl_series(os.path.join(out, "finished.jsonl"))
    check(len(series) > 20 and "loss" in series and "phases/forward" in series,
          "the metrics file has %d figures, loss and phases/forward among them" % len(series))
    logged = set(run.data.metrics)
    check(logged == set(series), "the run's metric keys are the metrics file's (only in MLflow: %s; only in the file: %s)"
          % (sorted(logged - set(series))[:5], sorted(set(series) - logged)[:5]))
    # MLflow gets a series' points where it changes, the point before each change and the latest
    # point at each progress line: its latest point at or before a step is that step's value.
    bad, invented, sent, logged_points = [], [], 0, 0
    for key, want_points in series.items():
        got = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        want = dict(want_points)
        sent += len(got)
        logged_points += len(want)
        invented += [(key, s) for s, v in got if s not in want or not close(v, want[s])]
        for step, value in want_points:
            shown = [v for s, v in got if s <= step]
            if not shown or not close(shown[-1], value):
                bad.append((key, step))
                break
        if got and got[-1][0] != max(want):
            bad.append((key, "last"))
    check(not bad, "every metric's value at every step of the metrics file is MLflow's latest point at or before "
          "that step (%d keys x %d steps; differ: %s)" % (len(series), len(series["loss"]), bad[:5]))
    check(not invented, "every MLflow point is a point of the metrics file (not: %s)" % invented[:5])
    loss_steps = sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss"))
    check(loss_steps == [s for s, _ in series["loss"]], "the loss, which changes every step, has a point at every step")
    check(sent < logged_points, "held values are not sent again (%d points sent for %d logged)" % (sent, logged_points))


def run_killed(a, client, out, uri):
    cmd = train_cmd(a, out, "killed", ["--mlflow-uri", uri, "--mlflow-experiment", "shardtrain-test", "--run-name", "killed"],
                    steps=2000, log_every=1)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = []
    for line in proc.stdout:
        log.append(line)
        if re.search(r"step 3/2000", line):
            break
    proc.send_signal(signal.SIGTERM)  # mpirun forwards it to the ranks
    rest, _ = proc.communicate(timeout=60)
    log = "".join(log) + rest
    check(proc.returncode != 0 and "stopped by SIGTERM" in log, "SIGTERM stops the run (exit %d)" % proc.returncode)
    run = find_run(client, "shardtrain-test", "killed")
    check(run.info.status == "KILLED", "status KILLED (got %s)" % run.info.status)
    check(run.info.end_time and run.info.end_time >= run.info.start_time, "a KILLED run has its end time")


def run_failed(a, client, out, uri):
    r = subprocess.run(train_cmd(a, out, "failed", ["--mlflow-uri", uri, "--mlflow-experiment", "shardtrain-test",
                                                    "--run-name", "failed", "--debug-nan", "0:3"]),
                       capture_output=True, text=True, timeout=180)
    check(r.returncode == 65, "a NaN gradient stops the run with exit 65 (got %d)" % r.returncode)
    run = find_run(client, "shardtrain-test", "failed")
    check(run.info.status == "FAILED", "status FAILED (got %s)" % run.info.status)


def run_down(a, client, out, uri, server, baseline):
    # rank 0 sleeps before every step: the server dies while the run has steps left (the other rank
    # spins meanwhile, so each 0.1 s costs both cores)
    cmd = train_cmd(a, out, "down", ["--mlflow-uri", uri, "--mlflow-experiment", "shardtrain-test", "--run-name", "down",
                                     "--debug-sleep", "0:0:%g" % DOWN_SLEEP_S])
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = []
    for line in proc.stdout:
        log.append(line)
        if "step %d/%d" % (LOG_EVERY, STEPS) in line:
            break
    run = find_run(client, "shardtrain-test", "down")
    check(run.info.status == "RUNNING", "the run is RUNNING before the server dies")
    stop_server(server)
    killed_at = time.monotonic()
    rest, _ = proc.communicate(timeout=120)
    took = time.monotonic() - killed_at
    log = "".join(log) + rest
    print(log[-3000:])
    check(proc.returncode == 0, "training goes on to exit 0 without its server (got %d)" % proc.returncode)
    steps_left = STEPS - LOG_EVERY
    check(took <= steps_left * DOWN_SLEEP_S + 25, "it ended %.1f s after the server died (%d steps of >= %g s left; "
          "bound +25 s)" % (took, steps_left, DOWN_SLEEP_S))
    got = losses(os.path.join(out, "down.jsonl"))
    check(len(got) == STEPS and all(s1 == s2 and close(l1, l2) for (s1, l1), (s2, l2) in zip(got, baseline)),
          "its losses equal the run's without MLflow, all %d steps" % STEPS)
    lines = [l for l in log.splitlines() if FAILURE_LINE.search(l)]
    check(1 <= len(lines) <= 2, "%d failure lines (one at the first failure, one at the end; not one per request): %s"
          % (len(lines), lines[:3]))
    check("training goes on" in lines[0] and "last error" in lines[0], "the first says training goes on and the last error")
    print("server down: the run ended %.1f s after the kill, %.1f s in all" % (took, time.monotonic() - t0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.tmp, ignore_errors=True)
    os.makedirs(a.tmp)
    os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    for k in ("MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "http_proxy", "HTTP_PROXY"):
        os.environ.pop(k, None)
    from mlflow.tracking import MlflowClient

    server, uri, started = start_server(a.tmp)
    try:
        case_uri(a)
        t = time.monotonic()
        base = subprocess.run(train_cmd(a, a.tmp, "baseline", []), capture_output=True, text=True, timeout=180)
        check(base.returncode == 0, "the run without MLflow trains (%.1f s)" % (time.monotonic() - t))
        up = wait_healthy(server, uri, started)
        check(up is not None, "mlflow server answers /health (after %.1f s)" % (up or -1))
        client = MlflowClient(tracking_uri=uri)
        t = time.monotonic()
        r = subprocess.run(train_cmd(a, a.tmp, "finished", ["--mlflow-uri", uri, "--mlflow-experiment", "shardtrain-test",
                                                            "--run-name", "finished"]),
                           capture_output=True, text=True, timeout=180)
        check(r.returncode == 0, "the run with MLflow trains (%.1f s)\n%s" % (time.monotonic() - t, r.stdout[-2000:] + r.stderr[-2000:]))
        check(not FAILURE_LINE.search(r.stdout + r.stderr), "no failure line while the server is up")
        check_finished(a, client, a.tmp, started)
        baseline = losses(os.path.join(a.tmp, "baseline.jsonl"))
        got = losses(os.path.join(a.tmp, "finished.jsonl"))
        check(len(got) == STEPS and all(s1 == s2 and close(l1, l2) for (s1, l1), (s2, l2) in zip(got, baseline)),
              "logging to MLflow leaves the losses as they are")
        run_killed(a, client, a.tmp, uri)
        run_failed(a, client, a.tmp, uri)
        run_down(a, client, a.tmp, uri, server, baseline)
    finally:
        stop_server(server)


if __name__ == "__main__":
    main()
