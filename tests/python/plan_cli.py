"""`shardtrain plan` as a user meets it: the whole 70B table, its CSV, JSON and PNG, the
seconds it takes, and bad inputs that exit 2 naming the option."""
import csv
import json
import os
import re
import subprocess
import sys
import time

from PIL import Image

BIN, WORK = sys.argv[1], sys.argv[2]
os.makedirs(WORK, exist_ok=True)


def plan(*args):
    return subprocess.run([BIN, "plan", *args], capture_output=True, text=True)


png, csv_path = os.path.join(WORK, "plan.png"), os.path.join(WORK, "plan.csv")
t0 = time.monotonic()
p = plan("--model", "llama2-70b", "--gpu", "a100-80gb", "--fabric", "p4de", "--nodes", "1,2,4,8,16,32,64", "--png", png,
         "--csv", csv_path, "--activation-checkpointing")
elapsed = time.monotonic() - t0
assert p.returncode == 0 and p.stderr == "", p.stderr  # a100-80gb with p4de, its own fabric: no warning
print(p.stdout)
ms = int(re.search(r"planned 35 rows in (\d+) ms", p.stdout).group(1))
print(f"plan: 35 rows in {ms} ms of planning, {elapsed:.2f} s with the process start")
assert ms < 1000, f"plan took {ms} ms for 35 rows"
rows = list(csv.DictReader(open(csv_path)))
assert len(rows) == 35, len(rows)
# FULL_SHARD's sharded state halves when the nodes double; NO_SHARD's does not change.
fs = {int(r["nodes"]): int(r["params_bytes"]) for r in rows if r["strategy"] == "full_shard"}
assert abs(fs[2] / fs[4] - 2) < 0.01, fs
ns = {int(r["nodes"]): int(r["params_bytes"]) for r in rows if r["strategy"] == "no_shard"}
assert ns[1] == ns[64], ns
# 70B without sharding does not fit an 80 GB GPU; full sharding on 64 nodes does.
assert rows[[i for i, r in enumerate(rows) if r["strategy"] == "no_shard"][0]]["fits"] == "0"
assert any(r["fits"] == "1" and r["strategy"] == "full_shard" for r in rows)
assert "best that fits:" in p.stdout
with Image.open(png) as im:
    assert im.size[0] > 600 and im.size[1] > 300, im.size



def llama_params(vocab, hidden, inter, layers, heads, kv_heads, tied=False):
    """Parameters of a Llama decoder, counted here from its shapes, not by the planner's code."""
    kv = hidden // heads * kv_heads
    layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * inter + 2 * hidden  # q, o; k, v; the MLP; two norms
    return layers * layer + vocab * hidden * (1 if tied else 2) + hidden


def table_column(text, name):
    """A column of the printed table by its header, per strategy, in GiB."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("strategy "))
    at = lines[head].split().index(name)
    out = {}
    for line in lines[head + 1:]:
        cells = line.split()
        if not cells or not cells[1].isdigit():
            break
        out[cells[0]] = float(cells[at].rstrip("G"))
    return out


# The sharded state (parameters, gradients, optimizer) is what a rank holds however the step's
# activations are kept: 16 bytes per parameter (fp32 master, gradient, AdamW's two moments) over the
# shard group. The peak's own share of it moves with activation checkpointing: a separate column.
n70 = llama_params(32000, 8192, 28672, 80, 64, 8)
# a100-40gb with p4de (its own fabric) here: the empty stderr below is that pair's no-warning check.
base = ["--model", "llama2-70b", "--gpus-per-node", "8", "--nodes", "1", "--gpu", "a100-40gb", "--fabric", "p4de"]
# The same processes write the CSV: one launch each for the table and its rows.
csv_paths = {ac: os.path.join(WORK, f"plan-70b-{ac}.csv") for ac in (False, True)}
tables = {ac: plan(*base, "--csv", csv_paths[ac], *(["--activation-checkpointing"] if ac else [])) for ac in (False, True)}
for ac, r in tables.items():
    assert r.returncode == 0 and r.stderr == "", (ac, r.stderr)
sharded = {ac: table_column(r.stdout, "sharded") for ac, r in tables.items()}
at_peak = {ac: table_column(r.stdout, "state@peak") for ac, r in tables.items()}
assert sharded[False] == sharded[True], sharded
want = {"full_shard": 8, "shard_grad_op": 8, "hybrid_shard": 8, "hybrid_shard_zero2": 8, "no_shard": 1}  # shard group on 1 node
for strategy, shard in want.items():
    assert abs(sharded[True][strategy] - 16 * n70 / shard / 2**30) < 0.01, (strategy, sharded[True][strategy], 16 * n70 / shard / 2**30)
assert at_peak[False]["full_shard"] < at_peak[True]["full_shard"] <= sharded[True]["full_shard"], at_peak
for ac in (False, True):
    assert "sharded: parameters (fp32 master), gradients and optimizer state" in tables[ac].stdout, tables[ac].stdout
    assert "peak = state@peak + gathered + activ. + other" in tables[ac].stdout
print(f"plan: sharded state {sharded[True]['full_shard']} GiB per rank with and without checkpointing "
      f"(16 B x {n70} / 8); at the peak {at_peak[False]['full_shard']} and {at_peak[True]['full_shard']} GiB")
csv_rows = {ac: next(r for r in csv.DictReader(open(csv_paths[ac])) if r["strategy"] == "full_shard") for ac in (False, True)}
for key in ("params_bytes", "grads_bytes", "optimizer_bytes", "sharded_state_bytes"):
    assert csv_rows[False][key] == csv_rows[True][key], key
r = csv_rows[True]
assert int(r["sharded_state_bytes"]) == sum(int(r[k]) for k in ("params_bytes", "grads_bytes", "optimizer_bytes", "no_sync_bytes", "base_bytes"))
assert abs(int(r["sharded_state_bytes"]) / (16 * n70 / 8) - 1) < 1e-4, r["sharded_state_bytes"]  # padding only
assert int(r["grads_at_peak_bytes"]) <= int(r["grads_bytes"]), r

# A published fabric with a GPU its instances do not carry: planned, with one warning naming both
# and what goes with what. The pairs that exist, and a measured file, plan without one.
r = plan("--model", "llama2-7b", "--gpu", "a100-80gb", "--fabric", "p5", "--nodes", "1")
warn = [line for line in r.stderr.splitlines() if line.strip()]
assert r.returncode == 0 and len(warn) == 1, (r.returncode, r.stderr)
for s in ("WARN", "--fabric p5", "--gpu a100-80gb", "p5.48xlarge", "H100", "--fabric p4de"):
    assert s in warn[0], (s, warn[0])
print(f"warning: {warn[0]}")
r = plan("--model", "llama2-7b", "--gpu", "h100-80gb", "--fabric", "p4de", "--nodes", "1")
assert r.returncode == 0 and "--fabric p4de is the network of p4de.24xlarge" in r.stderr and "--fabric p5" in r.stderr, r.stderr
# The four pairs that exist plan without a warning: a100-80gb/p4de (the 70B table above),
# a100-40gb/p4de (the 70B per-rank tables), h100-80gb/p5 (--cpu-offload) and h200-141gb/p5 (--json).

# --cpu-offload: Llama 3.1 8B on one H100 fits only offloaded, the table gains the host and copy
# columns, and a host too small for the offloaded state refuses the row with a line saying why.
one_gpu = ["--model", "llama3.1-8b", "--gpus-per-node", "1", "--nodes", "1", "--seq-len", "2048", "--activation-checkpointing",
           "--gpu", "h100-80gb", "--fabric", "p5"]
r = plan(*one_gpu)
assert r.returncode == 0 and "nothing fits" in r.stdout and "--cpu-offload" in r.stdout, r.stdout
assert r.stderr == "", r.stderr  # h100-80gb with p5: no warning
r = plan(*one_gpu, "--cpu-offload")
assert r.returncode == 0 and "best that fits:" in r.stdout and "host/node" in r.stdout, r.stdout
host = table_column(r.stdout, "host/node")
assert all(abs(v - 18 * 8030261248 / 2**30) < 0.1 for v in host.values()), host  # 18 B per parameter
r = plan(*one_gpu, "--cpu-offload", "--host-memory-gib", "100")
assert r.returncode == 0 and "nothing fits" in r.stdout, r.stdout
assert "full_shard on 1 node(s) does not fit the host: 134.6 GiB" in r.stdout and "exceeds 100.0 GiB" in r.stdout, r.stdout
print("plan --cpu-offload: 8B on one H100 fits offloaded only; a 100 GiB host refuses it")

# --context-parallel: a 128k row of Llama 3.1 8B fits no p5 rank whole; the plan names the smallest
# context group that fits, and planning that group fits, with the ring's line under the table.
r = plan("--model", "llama3.1-8b", "--seq-len", "131072", "--nodes", "1")
m = re.search(r"smallest context parallel that fits: (\d+)( with --activation-checkpointing full)?", r.stdout)
assert r.returncode == 0 and "nothing fits" in r.stdout and m, r.stdout
r = plan("--model", "llama3.1-8b", "--seq-len", "131072", "--nodes", "1", "--context-parallel", m.group(1),
         *(["--activation-checkpointing", "full"] if m.group(2) else []))
assert r.returncode == 0 and "best that fits:" in r.stdout and f"context parallel {m.group(1)}, ring per layer" in r.stdout, r.stdout
assert r.stdout.splitlines()[1].split()[-1] == "ring-exp", r.stdout  # the ring's column, last
print(f"plan --context-parallel: 128k on p5 fits at {m.group(1)}{m.group(2) or ''}")

r = plan("--model", "llama2-7b", "--nodes", "1,2", "--strategy", "hybrid_shard", "--json", "--gpu", "h200-141gb", "--fabric", "p5")
assert r.returncode == 0 and r.stderr == "", r.stderr  # h200-141gb with p5: no warning
j = json.loads(r.stdout)
assert [r["nodes"] for r in j["rows"]] == [1, 2] and j["rows"][0]["shard_size"] == 8
assert j["rows"][1]["replicas"] == 2

# Fabric files: another format, a newer version, and the legacy single-field format.
scope = {"ranks": 2, "groups": 1, "all_gather": [[1048576, 10.0]], "reduce_scatter": [[1048576, 10.0]], "all_reduce": [[1048576, 10.0]]}
fabric_files = {}
for name, head in {"foreign": {"format": "nccl-tests"}, "newer": {"format": "shardtrain-fabric", "format_version": 99},
                   "unmarked": {}, "legacy": {"format": "shardtrain-fabric/1"}, "current": {"format": "shardtrain-fabric", "format_version": 1}}.items():
    fabric_files[name] = os.path.join(WORK, f"fabric-{name}.json")
    json.dump({**head, "intra": scope}, open(fabric_files[name], "w"))
for ok in ("legacy", "current"):
    r = plan("--model", "llama2-7b", "--gpu", "h100-80gb", "--fabric", fabric_files[ok], "--nodes", "1")
    assert r.returncode == 0 and r.stderr == "", (ok, r.stderr)  # a measured fabric goes with any GPU
# Fields of the wrong JSON type: exit 2 naming the field, not a JSON library error.
bad_fields = [
    ("ranks-string", {"intra": {**scope, "ranks": "2"}}, '"intra.ranks" is a string ("2"), expected an integer'),
    ("overlap-string", {"overlaps_compute": "yes", "intra": scope}, '"overlaps_compute" is a string ("yes"), expected true or false'),
    ("scope-array", {"inter": [scope]}, '"inter" is an array, expected an object'),
    ("rows-object", {"intra": {**scope, "all_gather": {"1048576": 10.0}}}, '"intra.all_gather" is an object, expected an array'),
    ("row-strings", {"intra": {**scope, "all_reduce": [["1MiB", 10.0]]}}, '"intra.all_reduce" has the row ["1MiB",10.0]'),
    ("version-float", {"format_version": 1.5, "intra": scope}, '"format_version" is a float (1.5), expected an integer')]
for name, body, _ in bad_fields:
    fabric_files[name] = os.path.join(WORK, f"fabric-{name}.json")
    json.dump({"format": "shardtrain-fabric", "format_version": 1, **body}, open(fabric_files[name], "w"))
for args, option in [
    *[(["--model", "llama2-7b", "--fabric", fabric_files[name]], field) for name, _, field in bad_fields],
    (["--model", "llama2-7b", "--fabric", fabric_files["foreign"]], "is not a fabric file (\"format\" is 'nccl-tests'"),
    (["--model", "llama2-7b", "--fabric", fabric_files["unmarked"]], "is not a fabric file"),
    (["--model", "llama2-7b", "--fabric", fabric_files["newer"]], "has format_version 99"),
    (["--model", "llama2-7b", "--gpu", "v100"], "--gpu"),
    (["--model", "llama2-7b", "--strategy", "zero3"], "--strategy"),
    (["--model", "llama2-7b", "--nodes", "1,x"], "--nodes"),
    (["--model", "llama2-7b", "--strategy", "hybrid_shard", "--shard-group-size", "3"], "--shard-group-size"),
    (["--model", "llama2-7b", "--fabric", "/nonexistent.json"], "--fabric"),
    (["--model", "llama2-7b", "--seq-len", "9000"], "--seq-len"),
    (["--gpu", "h100-80gb"], "--model"),
    (["--model", "llama2-7b", "--host-memory-gib", "100"], "--host-memory-gib"),
    (["--model", "llama2-7b", "--context-parallel", "3"], "--context-parallel 3 does not divide --gpus-per-node 8"),
    (["--model", "llama2-7b", "--cpu-offload", "--host-memory-gib", "-1"], "--host-memory-gib"),
]:
    r = plan(*args)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and option in lines[0], (args, r.returncode, r.stderr)
    print(f"exit 2: {lines[0]}")
# The README's long-context example takes what its own plan command names (the options after
# "plan it with") and prepares its data in padding mode, not packed.
readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md"), encoding="utf-8").read()
block = readme[readme.index("### Long context"):]
block = block[block.index("```bash") + 7:]
block = re.sub(r"\\\n\s*", " ", block[:block.index("```")])
plan_line = next(line for line in block.splitlines() if line.startswith("shardtrain plan "))
r = plan(*plan_line.split(" #")[0].split()[2:])
named = re.search(r"plan it with (.*)$", r.stdout, re.M)
assert r.returncode == 0 and named, r.stdout
train_line = next(line for line in block.splitlines() if "--context-parallel" in line and not line.startswith("shardtrain plan"))
for flag, value in re.findall(r"(--[a-z-]+) (\S+)", named.group(1)):
    assert f"{flag} {value}" in train_line, (named.group(1), train_line)
assert any(line.startswith("shardtrain prepare") and "--mode padding" in line for line in block.splitlines()), block
print(f"README's long-context example: {named.group(1)}, data prepared with --mode padding")
print("plan CLI: OK")
