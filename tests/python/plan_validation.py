"""`shardtrain plan` against measured runs on this machine (the memory and step-time validation).

Memory: for the tiny and small presets, at 1, 2 and 4 ranks, every strategy, activation
checkpointing off and on (and LoRA at 2 ranks), on packed rows (and on rows of one document each
for full_shard at 2 ranks), plus selective checkpointing and checkpointing every other layer
(--ac-every 2) at 1 and 2 ranks, a one-step run's peak of every CPU tensor,
activations included (metrics memory.host_tensor_peak_bytes: rank 0's step, counted by the
allocator wrapper in runtime/host_tensor_memory.h, which sees every allocation LibTorch's CPU
allocator makes and nothing of the engine's own accounting), against the plan's tensor peak:
within 10%. The engine's own byte count (peak_bytes_by_phase) is printed beside it, not judged:
the plan and the engine compute it with the same functions (fsdp/memory_model.h). The process's
peak RSS (peak_mem_bytes, ru_maxrss: VmHWM) is printed too, not judged: it holds the binary,
LibTorch and MPI besides the tensors.
Configurations the engine runs identically are run once: the engine sees a strategy only as its
shard and replicate group sizes and whether it reshards after forward, so e.g. hybrid_shard_zero2
with one rank per node is no_shard. The output says how many distinct runs back the figure.
--memory-subset (the default test tier) runs MEMORY_SUBSET, 13 of those runs: every strategy
(hybrid on 2x2 ranks), every checkpointing setting, LoRA, padding and packing, 1, 2 and 4 ranks and
both presets at least once, picked where the full matrix's error is largest; --memory-only (label
`slow`) runs them all.

Step time: a fabric measured here with `preflight --json`, a calibration run (2 ranks,
full_shard, checkpointing off), then the plan against measured runs of every other strategy and
checkpointing setting at 2 ranks (9 configurations: predicting the calibration configuration
itself would check nothing, so it is not among them): the compute time (median forward + backward over the steps after the
first two) within 15% as a median; the whole step time is printed beside it, not judged (see
docs/planner.md).

usage: plan_validation.py SHARDTRAIN REPO WORKDIR [--memory-only|--memory-subset|--time-only]
"""
import concurrent.futures
import json
import os
import statistics
import subprocess
import sys

BIN, REPO, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
MODE = sys.argv[4] if len(sys.argv) > 4 else "all"
STRATEGIES = ["full_shard", "shard_grad_op", "no_shard", "hybrid_shard", "hybrid_shard_zero2"]
# Activation checkpointing settings by the short name runs are tagged with: off, full (the bare
# flag), selective, and each on every other layer.
AC_FLAGS = {"0": [], "1": ["--activation-checkpointing"], "s": ["--activation-checkpointing", "selective"],
            "s2": ["--activation-checkpointing", "selective", "--ac-every", "2"],
            "f2": ["--activation-checkpointing", "full", "--ac-every", "2"]}
SEQ, BATCH = 128, 2
# The default tier's runs by name (see name() in memory()), each one of the full matrix's.
MEMORY_SUBSET = {"tiny-4-full_shard-1", "small-4-hybrid_shard-0", "tiny-4-hybrid_shard_zero2-1", "small-2-full_shard-0",
                 "tiny-2-shard_grad_op-1", "small-2-no_shard-0", "small-2-lora-s", "tiny-2-lora-1",
                 "tiny-2-full_shard-1-padding", "small-2-full_shard-s2", "small-1-full_shard-f2", "tiny-1-full_shard-s",
                 "small-1-shard_grad_op-0"}
os.makedirs(WORK, exist_ok=True)
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")


def run(cmd, env=None):
    p = subprocess.run(cmd, env=env or ENV, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def data(mode="packing"):
    path = os.path.join(WORK, f"data-{SEQ}-{mode}.h5")
    if not os.path.exists(path):
        run([BIN, "prepare", "--tokenizer", f"{REPO}/data/demo/tokenizer.model", "--input", f"{REPO}/data/demo/train.jsonl",
             "--output", path, "--seq-len", str(SEQ), "--mode", mode])
    return path


def layout(ranks, strategy):
    """(ranks per node for train, nodes and gpus per node for plan): hybrid runs on 2 simulated nodes."""
    rpn = ranks // 2 if strategy.startswith("hybrid") and ranks > 1 else ranks
    return rpn, ranks // rpn, rpn


def train(preset, ranks, strategy, ac, steps, tag, extra=(), mode="packing"):
    rpn, _, _ = layout(ranks, strategy)
    metrics = os.path.join(WORK, f"m-{tag}.jsonl")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), BIN] if ranks > 1 else [BIN]
    cmd += ["train", "--model", preset, "--data", data(mode), "--batch-size", str(BATCH), "--steps", str(steps), "--device", "cpu",
            "--threads", "1", "--sharding", strategy, "--ranks-per-node", str(rpn), "--metrics-file", metrics, "--lr", "1e-4"]
    cmd += AC_FLAGS[ac]
    # Two mpiruns starting at once can collide on Open MPI's session directory: one each.
    session = os.path.join(WORK, f"ompi-{tag}")
    os.makedirs(session, exist_ok=True)
    run(cmd + list(extra), dict(ENV, OMPI_MCA_orte_tmpdir_base=session))
    return [json.loads(line) for line in open(metrics)]


def plan(preset, ranks, strategy, ac, extra=(), mode="packing"):
    _, nodes, gpn = layout(ranks, strategy)
    cmd = [BIN, "plan", "--model", preset, "--gpu", "cpu", "--no-allowances", "--param-dtype", "fp32", "--nodes", str(nodes),
           "--gpus-per-node", str(gpn), "--strategy", strategy, "--seq-len", str(SEQ), "--batch-size", str(BATCH), "--json"]
    cmd += AC_FLAGS[ac]
    if mode == "packing":
        cmd.append("--packed")
    return json.loads(run(cmd + list(extra)))["rows"][0]


def engine_run(preset, ranks, strategy, ac, extra, mode):
    """What the engine does with a configuration: its groups, whether it reshards, the rest."""
    rpn, nodes, _ = layout(ranks, strategy)
    if strategy in ("full_shard", "shard_grad_op"):
        shard, replicate = ranks, 1
    elif strategy == "no_shard":
        shard, replicate = 1, ranks
    else:  # hybrid: a simulated node is a shard group
        shard, replicate = rpn, nodes
    reshard = strategy in ("full_shard", "hybrid_shard")
    return preset, ranks, shard, replicate, reshard, ac, tuple(extra), mode


def memory(subset=False):
    steps = 1  # its peak equals every later step's: the optimizer state exists from the start

    def check(cfg):
        preset, ranks, strategy, ac, extra, label, mode = cfg
        tag = name(cfg)
        last = train(preset, ranks, strategy, ac, steps, tag, extra, mode)[-1]
        mem = last["memory"]
        measured_engine, measured_total = max(mem["peak_bytes_by_phase"].values()), mem["host_tensor_peak_bytes"]
        p = plan(preset, ranks, strategy, ac, extra, mode)["memory"]
        t_err = p["tensor_peak"] / measured_total - 1
        line = (f"{tag:34s} tensors {measured_total:>10d} predicted {p['tensor_peak']:>10d} ({100 * t_err:+5.1f}%)"
                f"  [not judged: engine bytes {measured_engine:>10d} plan {p['engine_peak']:>10d};"
                f" peak RSS {last['peak_mem_bytes'] / 2**20:6.0f} MiB]")
        return line, abs(t_err), (measured_total, p["tensor_peak"])

    def name(cfg):
        preset, ranks, strategy, ac, _, label, mode = cfg
        return f"{preset}-{ranks}-{label or strategy}-{ac}" + ("" if mode == "packing" else f"-{mode}")

    # Packed rows (several documents per row, the masked attention path on a CPU) for every
    # configuration; rows of one document each (padding) for full_shard at 2 ranks.
    lora = ["--lora-rank", "8", "--lora-targets", "q_proj,v_proj,o_proj,down_proj"]
    configs = [(preset, ranks, strategy, ac, [], None, "packing") for preset in ["tiny", "small"] for ranks in [1, 2, 4]
               for strategy in STRATEGIES for ac in ["0", "1"]]
    configs += [(preset, 2, "full_shard", ac, lora, "lora", "packing") for preset in ["tiny", "small"] for ac in ["0", "1", "s"]]
    configs += [(preset, 2, "full_shard", ac, [], None, "padding") for preset in ["tiny", "small"] for ac in ["0", "1", "s"]]
    # Selective checkpointing, and either kind on every other layer.
    configs += [(preset, ranks, "full_shard", ac, [], None, "packing") for preset in ["tiny", "small"] for ranks in [1, 2]
                for ac in ["s", "s2", "f2"]]
    distinct, same_as = [], {}
    for cfg in configs:
        key = engine_run(*cfg[:5], cfg[6])
        if key in same_as:
            if not subset:
                print(f"{name(cfg)}: the same run as {same_as[key]}")
        else:
            same_as[key] = name(cfg)
            distinct.append(cfg)
    if subset:
        distinct = [cfg for cfg in distinct if name(cfg) in MEMORY_SUBSET]
        missing = MEMORY_SUBSET - {name(cfg) for cfg in distinct}
        assert not missing, f"MEMORY_SUBSET names runs the full matrix does not make: {sorted(missing)}"
        # What the subset promises: each strategy, checkpointing setting, rank count, preset, LoRA and row mode.
        promised = {"strategy": (2, set(STRATEGIES)), "checkpointing": (3, set(AC_FLAGS)), "ranks": (1, {1, 2, 4}),
                    "preset": (0, {"tiny", "small"}), "lora": (5, {None, "lora"}), "rows": (6, {"packing", "padding"})}
        for what, (at, want) in promised.items():
            lacking = want - {cfg[at] for cfg in distinct}
            assert not lacking, f"MEMORY_SUBSET lacks {what} {sorted(map(str, lacking))}"
        configs = distinct
    data("packing")  # once each, before the runs share them
    data("padding")
    # Tensor bytes do not depend on timing, so two runs at a time is safe and halves the wall time.
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(check, distinct))
    for line, _, _ in results:
        print(line)
    # Rank 0's peak does not depend on the replicate group: runs that differ only there measure
    # the same bytes, so fewer distinct pairs (measured, predicted) than runs back the figure.
    pairs = len({pair for _, _, pair in results})
    print(f"memory: {len(configs)} configurations, {len(results)} distinct runs of {steps} step each, "
          f"{pairs} distinct (measured, predicted) peaks; the plan's tensor peak against the counted CPU "
          f"tensors: worst error {100 * max(e for _, e, _ in results):.1f}%")
    return [line for line, e, _ in results if e > 0.10]


def step_time():
    # Two ranks as one node (the intra-node scope) and as two nodes (the inter-node scope), in one file.
    fabric, scopes = os.path.join(WORK, "fabric.json"), {}
    for rpn in (2, 1):
        part = os.path.join(WORK, f"fabric-rpn{rpn}.json")
        run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", BIN, "preflight", "--device", "cpu", "--ranks-per-node",
             str(rpn), "--min-bytes", "64K", "--max-bytes", "32M", "--iters", "20", "--warmup", "3", "--json", part])
        keep = ("format", "format_version", "intra", "inter", "overlaps_compute")
        scopes.update({k: v for k, v in json.load(open(part)).items() if k in keep})
    json.dump(scopes, open(fabric, "w"))
    steps = 12

    def median_of(lines, f):
        return statistics.median(f(line) for line in lines[2:])

    calib = os.path.join(WORK, "m-time-calibration.jsonl")

    def measure(strategy, ac, attempt):
        if attempt > 0:  # a fresh calibration beside the repeat: both see the machine as it is now
            train("small", 2, "full_shard", "0", steps, "time-calibration")
        lines = train("small", 2, strategy, ac, steps, f"time-{strategy}-{ac}")
        measured_step = median_of(lines, lambda line: line["step_time_s"])
        measured_compute = median_of(lines, lambda line: line["phases"]["forward"] + line["phases"]["backward"])
        t = plan("small", 2, strategy, ac, ["--fabric", fabric, "--calibrate", calib])["time"]
        c_err, s_err = t["compute_s"] / measured_compute - 1, t["step_s"] / measured_step - 1
        line = (f"small 2 ranks {strategy:20s} ac={ac} compute measured {measured_compute:.4f}s predicted "
                f"{t['compute_s']:.4f}s ({100 * c_err:+5.1f}%); step measured {measured_step:.4f}s predicted "
                f"{t['step_s']:.4f}s ({100 * s_err:+5.1f}%)" + (" [repeat]" if attempt else ""))
        print(line, flush=True)
        return line, c_err

    train("small", 2, "full_shard", "0", steps, "time-calibration")
    errors, lines = [], []
    for strategy in STRATEGIES:
        for ac in ["0", "1"]:
            if (strategy, ac) == ("full_shard", "0"):
                continue  # calibrated from this configuration: predicting it checks nothing
            # This VM's run-to-run noise reaches 20-40% for single runs, so a miss beyond 15% is
            # measured once more with a fresh calibration. The judgment is the median absolute
            # compute error over the 9 configurations (within 15%), and every configuration within
            # 30% (a broken term would break that). The step time is printed, not judged: on 2
            # shared cores the exposed communication is mostly the ranks' skew (docs/planner.md).
            line, c_err = measure(strategy, ac, 0)
            if abs(c_err) > 0.15:
                line, c_err = measure(strategy, ac, 1)
            errors.append(abs(c_err))
            lines.append(line)
    med = statistics.median(errors)
    print(f"compute (forward + backward; the whole step is not judged): {len(errors)} configurations, "
          f"median absolute error {100 * med:.1f}%, worst {100 * max(errors):.1f}%")
    failures = [line for line, e in zip(lines, errors) if e > 0.30]
    if med > 0.15:
        failures.append(f"median absolute compute error {100 * med:.1f}% > 15%")
    return failures


failures = []
if MODE in ("all", "--memory-only", "--memory-subset"):
    failures += memory(subset=MODE == "--memory-subset")
if MODE in ("all", "--time-only"):
    failures += step_time()
if failures:
    print("OUTSIDE TOLERANCE:\n" + "\n".join(failures))
    sys.exit(1)
print("plan validation: every prediction within tolerance")
