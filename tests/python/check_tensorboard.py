#!/usr/bin/env python3
"""--tensorboard end to end at 2 ranks, read back by TensorBoard's own readers (tensorboard 2.20):
a run stopped by SIGTERM (--on-signal exit-nosave, so it stops past its last checkpoint) leaves a
readable file with every step it logged; its resume appends a second file to the same run
directory, and the merged run (TensorBoard drops the steps the resume redoes) holds every scalar of
the metrics file at every step, equal as float32, no step missing or twice; the configuration (text
plugin) and hyper-parameters (HParams plugin) are there and parse.
Usage: check_tensorboard.py --bin B --data D --val-data V --tmp T
"""
import argparse
import glob
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

from tensorboard.backend.event_processing import event_file_loader
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer
from tensorboard.plugins.hparams import plugin_data_pb2
from tensorboard.util import tensor_util

from harness import check

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", "2"]
RUN = "ckpt"  # the run name: --checkpoint-dir's directory name, as neither run passes --run-name
KEEP_ALL = {"scalars": 0, "tensors": 0}


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def flatten(obj, prefix=""):
    """Every numeric leaf of a metrics line under its '/'-joined key path (flags and strings left out)."""
    out = {}
    for key, v in obj.items():
        tag = prefix + key
        if isinstance(v, dict):
            out.update(flatten(v, tag + "/"))
        elif isinstance(v, list):
            out.update(flatten({str(i): x for i, x in enumerate(v)}, tag + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[tag] = v
    return out


def expected_points(metrics_file):
    """{tag: {step: float32 value}} from the metrics file; every step once."""
    lines = [json.loads(l) for l in open(metrics_file)]
    steps = [l["step"] for l in lines]
    check(len(steps) == len(set(steps)), "the metrics file has each step once (%d lines)" % len(steps))
    want = {}
    for line in lines:
        # Before step 1 the trackers get the validation figures alone (the training fields are 0 there).
        keep = lambda k: k != "step" and (line["step"] > 0 or k.startswith("val_"))
        for tag, v in flatten({k: v for k, v in line.items() if keep(k)}).items():
            want.setdefault(tag, {})[line["step"]] = f32(float(v))
    return want, sorted(steps)


def compare(got_scalars, want, what):
    """got_scalars: {tag: [(step, value)]} as TensorBoard read them."""
    check(set(got_scalars) == set(want), "%s: the tags are the metrics file's %d (only in TensorBoard: %s; only in the file: %s)"
          % (what, len(want), sorted(set(got_scalars) - set(want))[:5], sorted(set(want) - set(got_scalars))[:5]))
    bad = []
    for tag, points in want.items():
        got = got_scalars[tag]
        steps = [s for s, _ in got]
        if steps != sorted(points) or any(v != points[s] for s, v in got):
            bad.append((tag, got[:3], sorted(points.items())[:3]))
    check(not bad, "%s: every scalar equals the metrics file's at every step as float32 (%d tags; differ: %s)"
          % (what, len(want), bad[:2]))


def first_events(path):
    return list(event_file_loader.LegacyEventFileLoader(path).Load())  # as written: no migration to tensors


def train(a, out, extra, stop_after_step=None):
    cmd = MPIRUN + [a.bin, "train", "--data", a.data, "--val-data", a.val_data, "--steps", "16", "--batch-size", "2",
                    "--threads", "1", "--device", "cpu", "--val-every", "3", "--val-batches", "2", "--log-every", "100",
                    "--metrics-file", os.path.join(out, "metrics.jsonl"), "--tensorboard", os.path.join(out, "tb"),
                    "--checkpoint-dir", os.path.join(out, RUN), "--save-every", "2", "--on-signal", "exit-nosave"] + extra
    print("$ " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if stop_after_step is not None:  # SIGTERM to the ranks once the metrics file has that step, as a scheduler sends it
        mfile = os.path.join(out, "metrics.jsonl")
        end = time.time() + 120
        while time.time() < end and proc.poll() is None:
            if os.path.exists(mfile) and any(json.loads(l)["step"] >= stop_after_step for l in open(mfile) if l.strip()):
                # not through mpirun, which SIGKILLs the ranks odls_base_sigkill_timeout (1 s) after passing it on
                ranks = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
                for pid in ranks:
                    os.kill(int(pid), signal.SIGTERM)
                check(len(ranks) == 2, "SIGTERM sent to both ranks (%s)" % ranks)
                break
            time.sleep(0.05)
    log, _ = proc.communicate(timeout=180)
    print(log)
    return proc.returncode, log


def main():
    p = argparse.ArgumentParser()
    for opt in ("--bin", "--data", "--val-data", "--tmp"):
        p.add_argument(opt, required=True)
    a = p.parse_args()
    out = os.path.join(a.tmp, "tensorboard")
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    run_dir = os.path.join(out, "tb", RUN)

    # 1. Stopped by SIGTERM mid-run (rank 0 sleeps 0.5 s before each step), without a checkpoint at
    # the stop (--on-signal exit-nosave): the resume redoes a step or two.
    code, log = train(a, out, ["--debug-sleep", "0:0:0.5"], stop_after_step=3)
    check(code != 0 and "stopped by SIGTERM" in log, "SIGTERM stops the first run (exit %d)" % code)
    want, steps = expected_points(os.path.join(out, "metrics.jsonl"))
    stopped_at = steps[-1]
    saved = max(int(os.path.basename(f)[5:13]) for f in glob.glob(os.path.join(out, RUN, "step-*.h5")))
    check(steps == list(range(1, stopped_at + 1)) and saved < stopped_at < 16,
          "the first run logged steps 1..%d, past its last checkpoint (step %d)" % (stopped_at, saved))
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    check(len(files) == 1, "one event file in %s: %s" % (run_dir, [os.path.basename(f) for f in files]))
    acc = EventAccumulator(files[0], size_guidance=KEEP_ALL)
    acc.Reload()
    compare({t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}, want,
            "after SIGTERM (steps 1..%d, flushed at the stop)" % stopped_at)
    check("_hparams_/session_end_info" not in acc.Tags()["tensors"], "a signal's stop leaves the HParams session open")

    # 2. The resume continues from the checkpoint to step 16 in a second file of the same run directory.
    code, log = train(a, out, ["--resume", "auto"])
    check(code == 0, "the resumed run exits 0")
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    check(len(files) == 2, "the resume added a second event file to %s: %s" % (run_dir, [os.path.basename(f) for f in files]))
    for f in files:
        ev = first_events(f)
        check(ev[0].file_version == "brain.Event:2", "%s opens with the file version" % os.path.basename(f))
    resumed = [e for e in first_events(files[1]) if e.HasField("summary")]
    resumed_steps = sorted({e.step for e in resumed if any(v.HasField("simple_value") for v in e.summary.value)})
    check(resumed_steps == list(range(saved + 1, 17)), "the second file's scalars continue at step %d through 16: %s"
          % (saved + 1, resumed_steps))
    want, steps = expected_points(os.path.join(out, "metrics.jsonl"))
    check(steps == list(range(1, 17)), "the metrics file holds steps 1..16 once each")
    mux = EventMultiplexer(size_guidance=KEEP_ALL).AddRunsFromDirectory(os.path.join(out, "tb"))
    mux.Reload()
    check(list(mux.Runs()) == [RUN], "TensorBoard sees one run, %s: %s" % (RUN, list(mux.Runs())))
    tags = mux.Runs()[RUN]
    compare({t: [(e.step, e.value) for e in mux.Scalars(RUN, t)] for t in tags["scalars"]}, want,
            "both files merged (steps %d..%d redone by the resume)" % (saved + 1, stopped_at))
    for tag in ("loss", "lr", "grad_norm", "tokens_per_s", "mfu", "peak_mem_bytes", "val_loss", "phases/forward",
                "memory/param_bytes", "comm/world/all_reduce/calls"):
        check(tag in tags["scalars"], "scalar %s is logged" % tag)

    # 3. The configuration (text plugin) and the hyper-parameters (HParams plugin).
    check(mux.SummaryMetadata(RUN, "config").plugin_data.plugin_name == "text", "the config is a text-plugin summary")
    text = tensor_util.make_ndarray(mux.Tensors(RUN, "config")[-1].tensor_proto).item().decode()
    check("--resume auto" in text and "| lr | 0.0001 |" in text and "| sharding | full_shard |" in text,
          "the config text names the command line and settings:\n" + text[:400])
    def plugin_data(tag):
        md = mux.SummaryMetadata(RUN, tag)
        check(md.plugin_data.plugin_name == "hparams", "%s is an HParams summary" % tag)
        return plugin_data_pb2.HParamsPluginData.FromString(md.plugin_data.content)
    start = plugin_data("_hparams_/session_start_info").session_start_info
    hp = {k: v for k, v in start.hparams.items()}
    check(hp["lr"].number_value == 1e-4 and hp["batch_size"].number_value == 2 and hp["global_batch"].number_value == 4
          and hp["sharding"].string_value == "full_shard" and hp["world_size"].number_value == 2,
          "session_start_info's hparams: lr, batch size, global batch, strategy, world size (%s)" % sorted(hp))
    check(start.group_name == RUN, "the session group is the run name")
    experiment = plugin_data("_hparams_/experiment").experiment
    check({i.name for i in experiment.hparam_infos} == set(hp), "the experiment declares every hparam")
    check({m.name.tag for m in experiment.metric_infos} >= {"loss", "val_loss"}, "the experiment compares runs by loss and val_loss")
    end = plugin_data("_hparams_/session_end_info").session_end_info
    check(end.status == 1, "the completed run's session ends in success (STATUS_SUCCESS)")


if __name__ == "__main__":
    main()
