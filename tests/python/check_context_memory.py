"""Context parallelism's memory per rank, counted, against the plan.

The small preset, rows of 1024 tokens (one document each), batch 1 per group, fp32, full_shard
at 2 and 4 ranks, with --context-parallel 1, 2 and 4: a one-step run's peak of every CPU tensor
(metrics memory.host_tensor_peak_bytes: rank 0, the allocator wrapper's count) against `plan
--context-parallel N`'s tensor peak, within 10%. The activations, the peak less the state the
plan puts beside them (parameters, gradients, optimizer, gathered units: equal at one world
size), must fall close to 1/N of the run without context parallelism at the same world.

usage: check_context_memory.py SHARDTRAIN REPO WORKDIR
"""
import json
import os
import subprocess
import sys

BIN, REPO, WORK = sys.argv[1:4]
SEQ = 1024
os.makedirs(WORK, exist_ok=True)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")


def run(cmd):
    p = subprocess.run(cmd, env=ENV, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


data = os.path.join(WORK, f"rows-{SEQ}.h5")
if not os.path.exists(data):
    run([BIN, "prepare", "--tokenizer", f"{REPO}/data/demo/tokenizer.model", "--input",
         f"{REPO}/data/demo/train.jsonl", "--output", data, "--seq-len", str(SEQ), "--mode", "padding"])


def measured(ranks, cp):
    metrics = os.path.join(WORK, f"m-{ranks}-{cp}.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run(["mpirun", "-np", str(ranks), BIN, "train", "--model", "small", "--data", data, "--batch-size", "1",
         "--steps", "1", "--threads", "1", "--device", "cpu", "--param-dtype", "fp32", "--sharding", "full_shard",
         "--context-parallel", str(cp), "--metrics-file", metrics])
    return json.loads(open(metrics).read().splitlines()[-1])["memory"]["host_tensor_peak_bytes"]


def planned(ranks, cp):
    out = run([BIN, "plan", "--model", "small", "--gpu", "cpu", "--no-allowances", "--param-dtype", "fp32",
               "--nodes", "1", "--gpus-per-node", str(ranks), "--strategy", "full_shard", "--seq-len", str(SEQ),
               "--batch-size", "1", "--context-parallel", str(cp), "--json"])
    m = json.loads(out)["rows"][0]["memory"]
    return m["tensor_peak"], m["activations"]


failures = []
for ranks, sizes in [(2, [1, 2]), (4, [1, 2, 4])]:
    acts = {}
    for cp in sizes:
        got = measured(ranks, cp)
        peak, plan_acts = planned(ranks, cp)
        err = peak / got - 1
        acts[cp] = got - (peak - plan_acts)  # what the plan puts beside the activations is the same at any N
        print(f"{ranks} ranks, --context-parallel {cp}: counted {got:>10d}, planned {peak:>10d} ({100 * err:+5.1f}%),"
              f" activations {acts[cp]:>10d}" + ("" if cp == 1 else f" = {acts[cp] / acts[1]:.2f} x CP 1's"))
        if abs(err) > 0.10:
            failures.append(f"{ranks} ranks cp {cp}: the plan is off by {100 * err:+.1f}%")
        # 1/N of the rows' activations, plus what every rank keeps whole (the loss's chunk of logits).
        if cp > 1 and not acts[cp] / acts[1] < 1.0 / cp + 0.12:
            failures.append(f"{ranks} ranks cp {cp}: activations {acts[cp] / acts[1]:.2f} x CP 1's, not near 1/{cp}")
if failures:
    sys.exit("FAILED: " + "; ".join(failures))
print("context parallel memory: the plan within 10% of the counted tensors; activations near 1/N")
