"""Helpers of bench/gpu_suite.sh, one sub-command each; every check prints one line and exits 1
when it fails.
  env                                     the GPU, driver, CUDA, NCCL and torch, as markdown lines
  make-model DIR --layers ...             a random GQA Llama in Hugging Face format (safetensors)
  make-7b DIR --dtype bf16 --device cuda  a random full-size Llama-2 7B, saved as the Hub ships it: sharded
                                          safetensors with model.safetensors.index.json (--small: a tiny one)
  logits DIR SHARDTRAIN.h5 --device D --dtype T --tol X
                                          transformers' logits and loss on the same rows, against shardtrain's
  curves A.jsonl B.jsonl --first N --max-rel X --tail-rel Y
                                          two runs' per-step losses
  subset IN.h5 OUT.h5 --rows N            the first N rows of a token file
  same-weights DIR_A DIR_B                two Hugging Face model directories hold equal tensors
  fits LOG                                'fits', 'oom' or 'error' for a training log
  gtest REPORT.xml --name N --device D --rc RC
                                          a GoogleTest XML report: passed, failed and skipped tests (on a
                                          GPU, a test skipped for want of one fails)
  watch --json OUT.json [--timeout S] -- CMD...
                                          runs CMD (killed after S seconds: exit 124) and writes its exit
                                          code, seconds, peak resident set and the host's used-memory rise
  offload-table --shardtrain DIR --pytorch DIR --skip N --device D
                                          the offload part's table: one row per side, and their ratios
  fp8-table --dir DIR --skip N --tail T --max-rel X --device D --table OUT.md
                                          the fp8 part's table (DIR/off, DIR/tensorwise, DIR/rowwise) and
                                          its check: each mode's mean loss over the last T steps within X
                                          of bf16's (on the CPU, where --fp8 is refused, bf16's run only)
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import torch


def cmd_env(_):
    lines = [f"- torch {torch.__version__}"]
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout.strip().splitlines()
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
        lines = [f"- GPU: {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs",
                 f"- driver {smi[0] if smi else 'unknown'}, CUDA (torch) {torch.version.cuda}, NCCL (torch) {nccl}"] + lines
    else:
        lines.insert(0, "- no GPU: CPU smoke test")
    print("\n".join(lines))


def cmd_make_model(a):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(a.seed)
    cfg = LlamaConfig(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.ffn, num_hidden_layers=a.layers,
                      num_attention_heads=a.heads, num_key_value_heads=a.kv_heads, max_position_embeddings=4096,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="float32")
    model = LlamaForCausalLM(cfg)
    with torch.no_grad():  # wider than the init's 0.02, so the logits are far from uniform and differences show
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0, 0.05)
    model.save_pretrained(a.dir, safe_serialization=True)
    print(f"random Llama: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters -> {a.dir}")


def cmd_make_7b(a):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(a.seed)
    shape = dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                 num_key_value_heads=32, vocab_size=32000)  # meta-llama/Llama-2-7b-hf's config.json
    if a.small:  # the CPU smoke test's stand-in: same layout, a shape that saves in a second
        shape = dict(hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=4, vocab_size=512)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    cfg = LlamaConfig(**shape, max_position_embeddings=4096, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype=dtype)
    with torch.device(a.device):  # the GPU initialises 6.7B parameters in seconds; the host takes minutes
        model = LlamaForCausalLM(cfg).to(dtype)
    model.save_pretrained(a.dir, safe_serialization=True, max_shard_size=a.max_shard_size)
    n = sum(p.numel() for p in model.parameters())
    print(f"random Llama-2 {'7B' if not a.small else 'stand-in'}: {n / 1e6:.1f}M parameters, {a.dtype}, "
          f"shards of at most {a.max_shard_size} -> {a.dir}")


def next_token_loss(logits, tokens):
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                             tokens[:, 1:].reshape(-1)).item()


def cmd_logits(a):
    import h5py
    from transformers import LlamaForCausalLM
    with h5py.File(a.shardtrain, "r") as f:
        tokens = torch.from_numpy(f["tokens"][()]).long()
        ours = torch.from_numpy(f["logits"][()]).view(tokens.shape[0], tokens.shape[1], -1)
        # Packed rows: transformers attends within each sample given their positions (use_cache off).
        positions = torch.from_numpy(f["position_ids"][()]).long().to(a.device) if "position_ids" in f else None
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    model = LlamaForCausalLM.from_pretrained(a.dir, torch_dtype=dtype, attn_implementation="sdpa").to(a.device).eval()
    with torch.no_grad():
        ref = model(tokens.to(a.device), position_ids=positions, use_cache=False).logits.float().cpu()
    rel = ((ours - ref).norm() / ref.norm()).item()  # relative RMS error over every logit
    lo, lr = next_token_loss(ours, tokens), next_token_loss(ref, tokens)
    ok = rel <= a.tol and abs(lo - lr) <= a.tol * abs(lr)
    print(f"{'PASS' if ok else 'FAIL'}: logits vs transformers ({a.dtype}, {a.device}): relative RMS error {rel:.2e}, "
          f"loss {lo:.5f} vs {lr:.5f} (bound {a.tol:g})")
    sys.exit(0 if ok else 1)


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if '"loss"' in line]


def cmd_curves(a):
    x, y = losses(a.a)[:a.first], losses(a.b)[:a.first]
    if len(x) < a.first or len(y) < a.first:
        print(f"FAIL: {a.name}: expected {a.first} steps, got {len(x)} and {len(y)}")
        sys.exit(1)
    rel = [abs(p - q) / abs(q) for p, q in zip(x, y)]
    tail = min(10, a.first)
    tail_rel = abs(sum(x[-tail:]) - sum(y[-tail:])) / abs(sum(y[-tail:]))
    ok = max(rel) <= a.max_rel and tail_rel <= a.tail_rel and all(map(math.isfinite, x))
    print(f"{'PASS' if ok else 'FAIL'}: {a.name}: {a.first} steps, largest per-step difference {max(rel):.2e} "
          f"(bound {a.max_rel:g}), last {tail} steps' mean {tail_rel:.2e} (bound {a.tail_rel:g}); "
          f"loss {y[0]:.4f} -> {y[-1]:.4f} vs {x[0]:.4f} -> {x[-1]:.4f}")
    sys.exit(0 if ok else 1)


def cmd_subset(a):
    """The first ROWS rows of a token file, every attribute kept (a row count is the datasets')."""
    import h5py
    with h5py.File(a.src, "r") as f, h5py.File(a.dst, "w") as g:
        g.attrs.update(dict(f.attrs))
        for name, d in f.items():
            g.create_dataset(name, data=d[:a.rows] if d.shape and d.shape[0] == f["tokens"].shape[0] else d[()])
            g[name].attrs.update(dict(d.attrs))


def read_weights(d):
    from safetensors.torch import load_file
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, name)))
    return out


def cmd_same_weights(a):
    x, y = read_weights(a.a), read_weights(a.b)
    differ = [k for k in sorted(set(x) | set(y)) if k not in x or k not in y or not torch.equal(x[k], y[k])]
    ok = bool(x) and not differ
    print(f"{'PASS' if ok else 'FAIL'}: {len(x)} tensors in {os.path.basename(a.a)}, {len(y)} in {os.path.basename(a.b)}, "
          f"{len(differ)} differ{' (' + ', '.join(differ[:3]) + ')' if differ else ''}")
    sys.exit(0 if ok else 1)


def cmd_fits(a):
    text = open(a.log, errors="replace").read()
    if re.search(r"out of memory|OutOfMemoryError|CUDA error: out of memory", text, re.I):
        print("oom")
    elif a.rc == 0:
        print("fits")
    else:
        print("error")


def cmd_gtest(a):
    import xml.etree.ElementTree as ET
    try:
        cases = list(ET.parse(a.report).getroot().iter("testcase"))
    except (OSError, ET.ParseError) as e:
        print(f"FAIL: {a.name}: no test report (exit {a.rc}; {e})")
        sys.exit(1)
    passed, failed, skipped = [], [], []
    for case in cases:
        name = f"{case.get('classname')}.{case.get('name')}"
        why = case.find("skipped")
        if case.find("failure") is not None:
            failed.append(name)
        elif why is not None or case.get("result") == "skipped":
            message = (why.get("message") or "") if why is not None else ""
            skipped.append((name, message.strip().splitlines()[-1] if message.strip() else "no reason given"))
        else:
            passed.append(name)
    # On a GPU only the tests written for CPU-only machines may skip.
    unseen = [n for n, why in skipped if a.device == "cuda" and "a GPU is visible" not in why]
    # Exit 77: the test binary ran every case and all of them skipped (SHARDTRAIN_SKIP_STATUS, tests/CMakeLists.txt).
    all_skipped = a.rc == 77 and cases and not passed and not failed
    ok = (a.rc == 0 or all_skipped) and cases and not failed and not unseen
    parts = [f"{len(passed)} passed"]
    if failed:
        parts.append(f"{len(failed)} failed ({', '.join(failed)})")
    reasons = {}
    for n, why in skipped:
        reasons.setdefault(why, []).append(n.split(".", 1)[1])
    for why, names in reasons.items():
        parts.append(f"{len(names)} skipped ({', '.join(names)}): {why}")
    print(f"{'PASS' if ok else 'FAIL'}: {a.name}: {', '.join(parts)}; exit {a.rc}")
    sys.exit(0 if ok else 1)


def host_used_bytes():
    """MemTotal - MemAvailable: every process's memory, pinned (page-locked) pages included."""
    m = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            m[k] = int(v.split()[0]) * 1024
    return m["MemTotal"] - m["MemAvailable"]


def vm_hwm_bytes(pid):
    """A process's own resident-set high-water mark (VmHWM; 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(re.search(r"^VmHWM:\s+(\d+)", f.read(), re.M).group(1)) * 1024
    except (OSError, AttributeError):
        return 0


def cmd_watch(a):
    import time
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    base = peak = host_used_bytes()
    t0 = time.monotonic()
    try:
        pid = os.posix_spawnp(cmd[0], cmd, os.environ)
    except OSError as e:
        print(f"watch: {cmd[0]}: {e}", file=sys.stderr)
        sys.exit(127)
    # Sampled, not wait4's ru_maxrss: a spawned child's starts at this (torch-importing) process's.
    hwm, timed_out, kill_at = 0, False, None
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        peak, hwm = max(peak, host_used_bytes()), max(hwm, vm_hwm_bytes(pid))
        now = time.monotonic()
        if a.timeout and now - t0 > a.timeout and not timed_out:
            os.kill(pid, 15)
            timed_out, kill_at = True, now + 15
        elif timed_out and now > kill_at:
            os.kill(pid, 9)
        time.sleep(0.2)
    code = os.waitstatus_to_exitcode(status)
    rc = 124 if timed_out else (128 - code if code < 0 else code)
    out = {"rc": rc, "seconds": round(time.monotonic() - t0, 1), "peak_rss_bytes": hwm,
           "host_used_rise_bytes": peak - base, "host_used_before_bytes": base}
    with open(a.json, "w") as f:
        json.dump(out, f)
    sys.exit(rc)


def read_json(path, last_line=False):
    """A JSON file, or with last_line its last line that is a JSON object; {} when there is none."""
    try:
        text = open(path, errors="replace").read().strip()
        if not last_line:
            return json.loads(text)
        return json.loads(next(line for line in reversed(text.splitlines()) if line.startswith("{")))
    except (OSError, StopIteration, ValueError):
        return {}


def cmd_offload_table(a):
    import metrics_median  # beside this script
    mem = lambda b: ("%.1f GiB" % (b / 2**30) if b >= 2**30 else "%.0f MiB" % (b / 2**20)) if b else "n/a"
    ratio = lambda x, y: "%.2fx" % (x / y) if x and y else "n/a"
    metrics = os.path.join(a.shardtrain, "metrics.jsonl")
    try:
        steps = [json.loads(line) for line in open(metrics) if line.strip()]
    except (OSError, ValueError):
        steps = []
    peak = lambda k: max([(s.get("memory") or {}).get(k, 0) for s in steps] or [0])  # over every step, as PyTorch's
    pt = read_json(os.path.join(a.pytorch, "run.log"), last_line=True)
    rows = {
        "shardtrain `--cpu-offload`": dict(
            watch=read_json(os.path.join(a.shardtrain, "watch.json")),
            tps=metrics_median.median(metrics, "tokens_per_s", a.skip) if steps else 0,
            step=metrics_median.median(metrics, "step_time_s", a.skip) if steps else 0,
            alloc=peak("gpu_peak_allocated_bytes"), reserved=peak("gpu_peak_reserved_bytes"),
            loss=(steps[0]["loss"], steps[-1]["loss"]) if steps else None),
        "PyTorch FSDP2 `CPUOffloadPolicy`": dict(
            watch=read_json(os.path.join(a.pytorch, "watch.json")), tps=pt.get("tokens_per_s", 0),
            step=pt.get("step_s", 0), alloc=pt.get("peak_allocated_bytes", 0), reserved=pt.get("peak_reserved_bytes", 0),
            loss=(pt["first_loss"], pt["last_loss"]) if "first_loss" in pt else None)}
    gpu = a.device == "cuda"
    print("| side | tokens/s | step | peak GPU allocated | peak GPU reserved | peak host RSS | host memory used, rise "
          "| loss, first → last | exit, seconds |")
    print("|---|---:|---:|---:|---:|---:|---:|---|---|")
    for name, r in rows.items():
        w = r["watch"]
        tps = "%.0f" % r["tps"] if r["tps"] else "failed" if w else "not run"
        print(f"| {name} | {tps} | {'%.2f s' % r['step'] if r['step'] else 'n/a'} "
              f"| {mem(r['alloc']) if gpu else 'n/a'} | {mem(r['reserved']) if gpu else 'n/a'} "
              f"| {mem(w.get('peak_rss_bytes', 0))} | {mem(w.get('host_used_rise_bytes', 0))} "
              f"| {'%.4f → %.4f' % r['loss'] if r['loss'] else 'n/a'} | {'%d, %.0f s' % (w['rc'], w['seconds']) if w else 'not run'} |")
    st, ref = rows.values()
    print(f"\nshardtrain / PyTorch: tokens/s {ratio(st['tps'], ref['tps'])}, peak GPU allocated "
          f"{ratio(st['alloc'], ref['alloc']) if gpu else 'n/a'}, peak host RSS "
          f"{ratio(st['watch'].get('peak_rss_bytes', 0), ref['watch'].get('peak_rss_bytes', 0))}.")
    sys.exit(0 if all(r["watch"].get("rc") == 0 and r["tps"] for r in rows.values()) else 1)


def cmd_fp8_table(a):
    import metrics_median  # beside this script
    mem = lambda b: "%.1f GiB" % (b / 2**30) if b else "n/a"
    rows, verdicts, ok = [], [], True
    base = None
    for mode in ("off", "tensorwise", "rowwise"):
        metrics = os.path.join(a.dir, mode, "metrics.jsonl")
        try:
            steps = [json.loads(line) for line in open(metrics) if line.strip()]
        except (OSError, ValueError):
            steps = []
        watch = read_json(os.path.join(a.dir, mode, "watch.json"))
        name = "without --fp8" if mode == "off" else f"`--fp8 {mode}`"
        if not steps:
            rows.append(f"| {name} | {'refused (CPU)' if a.device == 'cpu' and mode != 'off' else 'not run' if not watch else 'failed, exit %s' % watch.get('rc')} | | | | |")
            ok = ok and (a.device == "cpu" and mode != "off")
            continue
        tail = [s["loss"] for s in steps[-a.tail:]]
        mean = sum(tail) / len(tail)
        tps = metrics_median.median(metrics, "tokens_per_s", a.skip)
        peak = max((s.get("memory") or {}).get("gpu_peak_allocated_bytes", 0) for s in steps)
        if mode == "off":
            base = dict(mean=mean, tps=tps)
            rel, speed = "", ""
        else:
            gap = abs(mean - base["mean"]) / abs(base["mean"]) if base else float("inf")
            good = gap <= a.max_rel and all(map(math.isfinite, tail))
            ok = ok and good
            verdicts.append(f"{mode} {gap:.2e}")
            rel, speed = f"{gap:.2e}", "%.2fx" % (tps / base["tps"]) if base and base["tps"] else "n/a"
        rows.append(f"| {name} | {tps:.0f} | {speed} | {mem(peak) if a.device == 'cuda' else 'n/a'} "
                    f"| {steps[0]['loss']:.4f} → {mean:.4f} | {rel} |")
    with open(a.table, "w") as f:
        f.write(f"\n| run | tokens/s | vs without | peak GPU allocated | loss, first → mean of last {a.tail} "
                "| mean loss vs without |\n|---|---:|---:|---:|---|---:|\n" + "\n".join(rows) + "\n")
    print(f"{'PASS' if ok else 'FAIL'}: fp8: last {a.tail} steps' mean loss against bf16's "
          f"({', '.join(verdicts) or 'no fp8 run'}; bound {a.max_rel:g})")
    sys.exit(0 if ok else 1)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("env")
    m = sub.add_parser("make-model")
    m.add_argument("dir")
    for k, v in dict(layers=4, hidden=512, ffn=1376, heads=8, kv_heads=4, vocab=512, seed=7).items():
        m.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    m7 = sub.add_parser("make-7b")
    m7.add_argument("dir"), m7.add_argument("--dtype", default="bf16"), m7.add_argument("--device", default="cuda")
    m7.add_argument("--max-shard-size", default="10GB"), m7.add_argument("--seed", type=int, default=7)
    m7.add_argument("--small", action="store_true")
    lg = sub.add_parser("logits")
    lg.add_argument("dir"), lg.add_argument("shardtrain")
    lg.add_argument("--device", default="cuda"), lg.add_argument("--dtype", default="bf16")
    lg.add_argument("--tol", type=float, required=True)
    c = sub.add_parser("curves")
    c.add_argument("a"), c.add_argument("b"), c.add_argument("--name", required=True)
    c.add_argument("--first", type=int, required=True)
    c.add_argument("--max-rel", type=float, required=True), c.add_argument("--tail-rel", type=float, required=True)
    sb = sub.add_parser("subset")
    sb.add_argument("src"), sb.add_argument("dst"), sb.add_argument("--rows", type=int, required=True)
    sw = sub.add_parser("same-weights")
    sw.add_argument("a"), sw.add_argument("b")
    f = sub.add_parser("fits")
    f.add_argument("log"), f.add_argument("--rc", type=int, required=True)
    g = sub.add_parser("gtest")
    g.add_argument("report"), g.add_argument("--name", required=True), g.add_argument("--device", required=True)
    g.add_argument("--rc", type=int, required=True)
    w = sub.add_parser("watch")
    w.add_argument("--json", required=True), w.add_argument("--timeout", type=float, default=0)
    w.add_argument("command", nargs=argparse.REMAINDER)
    o = sub.add_parser("offload-table")
    o.add_argument("--shardtrain", required=True), o.add_argument("--pytorch", required=True)
    o.add_argument("--skip", type=int, required=True), o.add_argument("--device", required=True)
    f8 = sub.add_parser("fp8-table")
    f8.add_argument("--dir", required=True), f8.add_argument("--skip", type=int, required=True)
    f8.add_argument("--tail", type=int, required=True), f8.add_argument("--max-rel", type=float, required=True)
    f8.add_argument("--device", required=True), f8.add_argument("--table", required=True)
    a = ap.parse_args()
    {"env": cmd_env, "make-model": cmd_make_model, "make-7b": cmd_make_7b, "logits": cmd_logits, "curves": cmd_curves,
     "subset": cmd_subset, "same-weights": cmd_same_weights, "fits": cmd_fits, "gtest": cmd_gtest,
     "watch": cmd_watch, "offload-table": cmd_offload_table, "fp8-table": cmd_fp8_table}[a.cmd](a)


if __name__ == "__main__":
    main()
