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
assert p.returncode == 0, p.stderr
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

j = json.loads(plan("--model", "llama2-7b", "--nodes", "1,2", "--strategy", "hybrid_shard", "--json").stdout)
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
    assert r.returncode == 0, (ok, r.stderr)
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
]:
    r = plan(*args)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and option in lines[0], (args, r.returncode, r.stderr)
    print(f"exit 2: {lines[0]}")
print("plan CLI: OK")
