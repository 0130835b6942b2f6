#!/usr/bin/env python3
"""Integration tests of slurm/train.sbatch, slurm/sweep.sh and launch/mpirun.sh against a real
Slurm on localhost (scripts/local-slurm.sh, started by the ctest fixture) and a real mpirun.

Usage: slurm_tests.py CASE --repo R --bin B --data D --tmp T [--slurm-dir S]
CASE: training | requeue | failfast | sweep | scancel | timelimit | finetune | mpirun | mpirun_sigterm |
      mpirun_finetune.
Exit 0 pass, 1 fail, 77 skipped (with the reason).
"""
import argparse
import hashlib
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

SKIP = 77


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)
    print("ok: " + msg)


def run(cmd, env, cwd=None, timeout=600):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, env=env, cwd=cwd, timeout=timeout, text=True, capture_output=True)
    print(p.stdout + p.stderr, flush=True)
    return p


def metrics(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def job_field(job, field, env):
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job)], env=env, text=True, capture_output=True).stdout
    m = re.search(r"\b%s=(\S+)" % field, out)
    return m.group(1) if m else None


def wait_job(job, env, timeout=600):
    """Waits until the job has ended for good (requeued jobs pass through PENDING again)."""
    end = time.time() + timeout
    while time.time() < end:
        state = job_field(job, "JobState", env)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"):
            return state
        time.sleep(0.2)  # scontrol is cheap; a 1 s poll was most of a short job's latency
    fail("job %s did not end within %d s (state %s)" % (job, timeout, job_field(job, "JobState", env)))


# 2 of the node's CPUs, and not the whole node train.sbatch asks for (--exclusive): the time-limit
# job runs through the other cases (case_timelimit_submit).
SHARED_NODE = ["--nodes=1", "--ntasks-per-node=2", "--cpus-per-task=1", "--oversubscribe"]


def sbatch(args, a, env, extra_train, sbatch_opts=(), wait=False):
    """wait: until the job has ended (wait_job's 0.2 s polls; sbatch --wait sleeps 2 s and more between its)."""
    if "--model" not in args and "--weights" not in args:
        args = ["--model", "tiny", *args]
    cmd = ["sbatch", "--parsable", *SHARED_NODE, *sbatch_opts,
           "slurm/train.sbatch", "--profile", "cpu", "--data", a.data, *args, "--", *extra_train]
    p = run(cmd, env, cwd=a.repo)
    if p.returncode != 0:
        fail("sbatch exited %d" % p.returncode)
    job = p.stdout.strip().split(";")[0]
    if wait:
        wait_job(job, env)
    return job


def final_loss(path):
    m = metrics(path)
    return m[-1]["step"], m[-1]["loss"]


TRAIN_EXTRA = ["--batch-size", "2", "--log-every", "5", "--lr", "1e-3"]


def case_training(a, env):
    out = os.path.join(a.tmp, "training")
    shutil.rmtree(out, ignore_errors=True)
    job = sbatch(["--out-dir", out, "--steps", "8", "--save-every", "4"], a, env, TRAIN_EXTRA,
                 ["--output", os.path.join(a.tmp, "training-%j.out")], wait=True)
    log = open(os.path.join(a.tmp, "training-%s.out" % job)).read()
    print(log)
    check(job_field(job, "JobState", env) == "COMPLETED", "job %s completed" % job)
    check("preflight: PASS" in log, "preflight ran first and passed")
    check("2 ranks on 1 node x 2 ranks per node" in log, "the trainer ran as 2 srun --mpi=pmix ranks")
    check(re.search(r"binding on \S+: 2 ranks", log) is not None and "1 CPU thread per rank" in log,
          "each rank bound by its node's plan, --threads following it")
    m = metrics(os.path.join(out, "metrics.jsonl"))
    check([x["step"] for x in m] == list(range(1, 9)), "metrics has steps 1..8")
    check(all(math.isfinite(x["loss"]) and x["tokens_per_s"] > 0 for x in m), "losses finite, tokens/s positive")
    ckpts = sorted(os.listdir(os.path.join(out, "checkpoints")))
    check(any("000008" in c and c.endswith(".h5") for c in ckpts), "final checkpoint written: %s" % ckpts)
    check(open(os.path.join(out, "exit_code")).read().strip() == "0", "exit code 0 recorded")


def case_requeue(a, env):
    steps = "20"
    extra = ["--batch-size", "8", "--log-every", "10", "--lr", "1e-3"]
    ref_out = os.path.join(a.tmp, "requeue-ref")
    out = os.path.join(a.tmp, "requeue")
    for d in (ref_out, out):
        shutil.rmtree(d, ignore_errors=True)
    ref = sbatch(["--out-dir", ref_out, "--steps", steps, "--save-every", "1000", "--skip-preflight"], a, env,
                 extra, ["--output", os.path.join(a.tmp, "requeue-ref-%j.out")], wait=True)
    check(job_field(ref, "JobState", env) == "COMPLETED", "uninterrupted job %s completed" % ref)
    # The tiny model's steps take milliseconds: rank 0 sleeps 0.15 s before each, so that the signal
    # lands mid-run (a sleep changes no loss: the final-loss check below still compares with ref).
    job = sbatch(["--out-dir", out, "--steps", steps, "--save-every", "1000", "--skip-preflight"], a, env,
                 extra + ["--debug-sleep", "0:0:0.15"], ["--output", os.path.join(a.tmp, "requeue-%j.out")])
    mfile = os.path.join(out, "metrics.jsonl")
    end = time.time() + 300
    while time.time() < end:  # signal mid-run: after some steps, well before the last
        if os.path.exists(mfile) and len(metrics(mfile)) >= 5:
            break
        time.sleep(0.05)
    else:
        fail("the job never reached step 5")
    at = len(metrics(mfile))
    check(at < int(steps) - 5, "signalling at step %d of %s" % (at, steps))
    run(["scancel", "--signal=USR1", "--batch", job], env)
    state = wait_job(job, env)
    log = open(os.path.join(a.tmp, "requeue-%s.out" % job)).read()
    print(log)
    check(state == "COMPLETED", "requeued job completed (%s)" % state)
    check(job_field(job, "Restarts", env) == "1", "Slurm counted one restart")
    check("trainer exit code 75" in log and "requeueing" in log, "trainer checkpointed, exited 75, the script requeued")
    resumed = re.search(r"resumed from \S+ at step (\d+)", log)
    check(resumed is not None and 0 < int(resumed.group(1)) < int(steps), "second run resumed mid-way: %s" %
          (resumed.group(0) if resumed else None))
    m = metrics(mfile)
    check([x["step"] for x in m] == list(range(1, int(steps) + 1)), "metrics hold each step once across both runs")
    s_ref, l_ref = final_loss(os.path.join(ref_out, "metrics.jsonl"))
    s, l = final_loss(mfile)
    print("final loss: uninterrupted %.9f, requeued %.9f" % (l_ref, l))
    check(s == s_ref == int(steps) and l == l_ref, "final loss equals the uninterrupted run's (%.9f)" % l)


def case_failfast(a, env):
    """A rank that fails ends the job at once; --restart-on-failure retries, bounded by --max-restarts."""
    out = os.path.join(a.tmp, "failfast")
    shutil.rmtree(out, ignore_errors=True)
    t0 = time.time()
    job = sbatch(["--out-dir", out, "--steps", "50", "--skip-preflight", "--restart-on-failure", "--max-restarts", "1"],
                 a, env, TRAIN_EXTRA + ["--fail-on-rank", "1"], ["--output", os.path.join(a.tmp, "failfast-%j.out")])
    state = wait_job(job, env, timeout=180)
    took = time.time() - t0
    log = open(os.path.join(a.tmp, "failfast-%s.out" % job)).read()
    print(log)
    check(state == "FAILED", "the job failed (%s) instead of hanging" % state)
    check(took < 120, "it ended in %.0f s, one retry included" % took)
    check("fault injected by --fail-on-rank 1" in log, "the log names the failing rank's error")
    check(job_field(job, "Restarts", env) == "1" and "max-restarts 1 reached" in log, "one restart, then it gave up")
    check(open(os.path.join(out, "exit_code")).read().strip() not in ("0", "75"), "a failure exit code recorded")


def wait_steps(mfile, n, timeout=300):
    end = time.time() + timeout
    while time.time() < end:
        if os.path.exists(mfile) and len(metrics(mfile)) >= n:
            return len(metrics(mfile))
        time.sleep(0.2)
    fail("the run never reached step %d" % n)


def latest_step(ckpt_dir):
    with open(os.path.join(ckpt_dir, "latest")) as f:
        return int(f.read().strip()[5:13])


def case_scancel(a, env):
    """scancel mid-run: Slurm's SIGTERM reaches every rank, which checkpoint the same step and exit 75; no requeue."""
    out = os.path.join(a.tmp, "scancel")
    shutil.rmtree(out, ignore_errors=True)
    job = sbatch(["--out-dir", out, "--steps", "100000", "--save-every", "100000", "--skip-preflight"], a, env,
                 TRAIN_EXTRA, ["--output", os.path.join(a.tmp, "scancel-%j.out")])
    mfile = os.path.join(out, "metrics.jsonl")
    wait_steps(mfile, 3)
    run(["scancel", job], env)
    state = wait_job(job, env, timeout=120)
    log = open(os.path.join(a.tmp, "scancel-%s.out" % job)).read()
    print(log)
    check(state == "CANCELLED", "the job ended cancelled (%s)" % state)
    check("stopped by SIGTERM after a checkpoint; exiting with code 75" in log, "the trainer checkpointed on SIGTERM")
    check("trainer exit code 75" in log and "not requeueing" in log, "the script saw 75 and did not requeue")
    check(job_field(job, "Restarts", env) == "0", "no restart")
    last = metrics(mfile)[-1]["step"]
    check(latest_step(os.path.join(out, "checkpoints")) == last, "the checkpoint is the last step run (%d)" % last)
    check(open(os.path.join(out, "exit_code")).read().strip() == "75", "exit code 75 recorded")


def case_timelimit_submit(a, env):
    """Submits the --time=1 job that case_timelimit checks: ctest runs this first and the check after the other
    Slurm cases, so Slurm's minute (and its ~30 s check interval) passes while they run."""
    out = os.path.join(a.tmp, "timelimit")
    shutil.rmtree(out, ignore_errors=True)
    job = sbatch(["--out-dir", out, "--steps", "1000000", "--save-every", "1000000", "--skip-preflight",
                  "--max-restarts", "1"], a, env,
                 # Paced at 0.5 s a step: the minute costs no CPU, and nothing of the trainer's logic changes.
                 TRAIN_EXTRA + ["--debug-sleep", "0:0:0.5"],
                 # URG, which bash ignores, replaces the script's USR1 warning: this case is the SIGTERM at the limit.
                 ["--time=1", "--signal=B:URG@1", "--output", os.path.join(a.tmp, "timelimit-%j.out")])
    with open(os.path.join(a.tmp, "timelimit.job"), "w") as f:
        f.write(job)


def case_timelimit(a, env):
    """--time=1: Slurm's SIGTERM at the limit -> checkpoint, exit 75, requeue, and the next run resumes from it."""
    job = open(os.path.join(a.tmp, "timelimit.job")).read().strip()
    logfile = os.path.join(a.tmp, "timelimit-%s.out" % job)
    end = time.time() + 300
    while time.time() < end:  # the limit is 1 minute; Slurm checks it every ~30 s
        log = open(logfile).read() if os.path.exists(logfile) else ""
        if re.search(r"resumed from \S+ at step \d+", log):
            break
        time.sleep(0.2)
    else:
        print(open(logfile).read() if os.path.exists(logfile) else "(no log)")
        fail("the job was not requeued and resumed within 300 s")
    run(["scancel", job], env)
    wait_job(job, env, timeout=120)
    log = open(logfile).read()
    print(log)
    check("DUE TO TIME LIMIT" in log, "Slurm ended the first run at its time limit")
    check("stopped by SIGTERM after a checkpoint; exiting with code 75" in log, "the trainer checkpointed on SIGTERM")
    check("the time limit was reached" in log and "requeueing" in log, "the script requeued at the time limit")
    saved = re.search(r"checkpoint \S+step-(\d+)\.h5 \(SIGTERM\)", log)
    resumed = re.search(r"resumed from \S+ at step (\d+)", log)
    check(saved is not None and resumed is not None and saved.group(1).lstrip("0") == resumed.group(1),
          "the second run resumed from the SIGTERM checkpoint (%s)" % (resumed.group(0) if resumed else None))


def png_ok(path, python):
    checker = os.path.join(os.path.dirname(__file__), "..", "python", "check_png.py")
    return subprocess.run([python, checker, path]).returncode == 0


def case_sweep(a, env):
    out = os.path.join(a.tmp, "sweep")
    shutil.rmtree(out, ignore_errors=True)
    cmd = ["slurm/sweep.sh", "--nodes", "1 2", "--simulate-ranks-per-node", "2", "--out", out, "--sbatch-args",
           "--cpus-per-task=1 --oversubscribe", "--", "--data", a.data, "--profile", "cpu", "--model", "tiny", "--steps", "12", "--",
           *TRAIN_EXTRA]
    p = run(cmd, env, cwd=a.repo, timeout=900)
    check(p.returncode == 0, "sweep.sh exited 0")
    table = open(os.path.join(out, "scaling.md")).read()
    print(table)
    rows = [r for r in table.splitlines() if re.match(r"^\|\s*\d+\s*\|", r)]
    check([int(r.split("|")[1]) for r in rows] == [1, 2], "table has rows for 1 and 2 nodes")
    for n in (1, 2):
        log = open([os.path.join(out, "nodes-%d" % n, f) for f in os.listdir(os.path.join(out, "nodes-%d" % n))
                    if f.startswith("slurm-")][0]).read()
        check("%d ranks on %d node%s x 2 ranks per node" % (2 * n, n, "s" * (n > 1)) in log, "%d simulated node(s) of 2 ranks ran" % n)
    cells = [[c.strip() for c in r.split("|")[1:-1]] for r in rows]
    check(all(float(c[1]) > 0 for c in cells), "tokens/s measured for both")
    check(cells[0][4] == "100.0%", "1 node is the 100% efficiency baseline")
    expect = 100.0 * float(cells[1][1]) / 2 / float(cells[0][1])
    check(abs(float(cells[1][4].rstrip("%")) - expect) < 0.1, "2-node efficiency = tokens/s per node ratio (%.1f%%)" % expect)
    check(png_ok(os.path.join(out, "scaling.png"), a.python), "scaling.png is a valid, non-blank PNG")


def fresh_hostfile(a, name, hosts):
    """An empty output directory for a launcher case, and a hostfile in it."""
    out = os.path.join(a.tmp, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    hostfile = os.path.join(out, "hosts")
    with open(hostfile, "w") as f:
        f.write(hosts)
    return out, hostfile


def case_mpirun(a, env):
    """launch/mpirun.sh over a hostfile; USR1 to the launcher mid-run -> checkpoint, exit 75, restart."""
    out, hostfile = fresh_hostfile(a, "mpirun", "# one line per instance\nlocalhost slots=2\n")
    cmd = ["launch/mpirun.sh", "--hostfile", hostfile, "--profile", "cpu", "--ranks-per-host", "2",
           "--mpirun-args", "--oversubscribe", "--data", a.data, "--out-dir", out, "--steps", "20", "--save-every", "1000",
           # tiny's steps take milliseconds: rank 0 sleeps 0.15 s before each, so USR1 lands mid-run.
           "--model", "tiny", "--", "--batch-size", "8", "--log-every", "10", "--lr", "1e-3", "--debug-sleep", "0:0:0.15"]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, env=env, cwd=a.repo, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    mfile = os.path.join(out, "metrics.jsonl")
    end = time.time() + 240
    while time.time() < end and not (os.path.exists(mfile) and len(metrics(mfile)) >= 4):
        time.sleep(0.05)
    at = len(metrics(mfile)) if os.path.exists(mfile) else 0
    check(4 <= at < 15, "signalling the launcher at step %d of 20" % at)
    p.send_signal(signal.SIGUSR1)
    log, _ = p.communicate(timeout=300)
    print(log)
    check(p.returncode == 0, "launch/mpirun.sh exited 0")
    check("preflight: PASS" in log, "preflight passed first")
    check("2 ranks on 1 node x 2 ranks per node" in log, "2 ranks from the hostfile")
    check(re.search(r"binding on \S+: 2 ranks (x 1 cores|share cpus)", log) is not None, "ranks were bound by their node's plan")
    check("1 CPU thread per rank" in log, "--threads follows the plan")
    check("trainer exit code 75" in log and "restarting (restart 1" in log, "USR1 -> checkpoint, exit 75, restart")
    check(re.search(r"resumed from \S+ at step [1-9]", log) is not None, "the restart resumed from the checkpoint")
    check([x["step"] for x in metrics(mfile)] == list(range(1, 21)), "metrics hold steps 1..20 once")
    check(any("000020" in c for c in os.listdir(os.path.join(out, "checkpoints"))), "final checkpoint written")


def case_mpirun_sigterm(a, env):
    """SIGTERM to launch/mpirun.sh: relayed as USR2 through mpirun; checkpoint, exit 75, no restart."""
    out, hostfile = fresh_hostfile(a, "mpirun_sigterm", "localhost slots=2\n")
    cmd = ["launch/mpirun.sh", "--hostfile", hostfile, "--profile", "cpu", "--ranks-per-host", "2",
           "--mpirun-args", "--oversubscribe", "--data", a.data, "--out-dir", out, "--steps", "100000",
           "--save-every", "100000", "--skip-preflight", "--model", "tiny", "--", *TRAIN_EXTRA]
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.Popen(cmd, env=env, cwd=a.repo, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    mfile = os.path.join(out, "metrics.jsonl")
    wait_steps(mfile, 3, timeout=240)
    p.send_signal(signal.SIGTERM)
    log, _ = p.communicate(timeout=120)
    print(log)
    check(p.returncode == 75, "launch/mpirun.sh exited 75 (%d)" % p.returncode)
    check("stopped by SIGUSR2 (a relayed SIGTERM) after a checkpoint" in log, "the ranks got the relayed SIGTERM")
    check("stopped by TERM: not restarting" in log and "restarting (restart" not in log, "no restart")
    last = metrics(mfile)[-1]["step"]
    check(latest_step(os.path.join(out, "checkpoints")) == last, "the checkpoint is the last step run (%d)" % last)


def make_weights(a, name):
    """A small Llama written by transformers' save_pretrained, shaped for the demo data's 512-piece tokenizer.
    Made once per code version (seeded, so the same bytes) and shared: importing transformers costs seconds."""
    code = ("import sys, torch, transformers\n"
            "torch.manual_seed(0)\n"
            "cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,"
            " num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)\n"
            "transformers.LlamaForCausalLM(cfg).save_pretrained(sys.argv[1])\n")
    d = os.path.join(a.tmp, "%s-%s" % (name, hashlib.sha1(code.encode()).hexdigest()[:12]))
    if not os.path.exists(os.path.join(d, "config.json")):
        part = "%s.%d.part" % (d, os.getpid())  # the Slurm and mpirun cases may run at once: rename publishes
        shutil.rmtree(part, ignore_errors=True)
        subprocess.run([a.python, "-c", code, part], check=True)
        try:
            os.rename(part, d)
        except OSError:  # another case published it first
            shutil.rmtree(part, ignore_errors=True)
    return d


def check_export(a, export, val):
    p = subprocess.run([a.python, os.path.join(os.path.dirname(__file__), "..", "python", "check_hf_export.py"), a.bin,
                        export, val], text=True, capture_output=True)
    print(p.stdout + p.stderr)
    check(p.returncode == 0, "transformers loads the export %s and its loss equals shardtrain eval's" % export)


def check_fine_tuned(log, weights, export):
    check("fine-tuning" in log and "from the weights in " + weights in log, "the trainer started from --weights")
    check(re.search(r"loaded \d+ bytes of weights from " + re.escape(weights), log) is not None, "the weights were read")
    check("random initialization" not in log, "no random initialization anywhere in the log")
    check(" --model " not in log, "the launcher passed no --model: the config came from the weights directory")
    check(os.path.exists(os.path.join(export, "model.safetensors")), "the export was written")


def case_finetune(a, env):
    """sbatch from another directory, without SHARDTRAIN_HOME: pretrained weights in, an export out."""
    submit = os.path.join(a.tmp, "finetune-submit")
    shutil.rmtree(submit, ignore_errors=True)
    os.makedirs(submit)
    weights, export = make_weights(a, "llama-weights"), os.path.join(submit, "export")
    env = {k: v for k, v in env.items() if k != "SHARDTRAIN_HOME"}
    cmd = ["sbatch", "--parsable", *SHARED_NODE,
           os.path.join(a.repo, "slurm/train.sbatch"), "--profile", "cpu", "--weights", weights, "--data", a.data,
           "--steps", "6", "--save-model", export, "--skip-preflight", "--", *TRAIN_EXTRA]
    p = run(cmd, env, cwd=submit)
    check(p.returncode == 0, "sbatch exited 0")
    job = p.stdout.strip().split(";")[0]
    wait_job(job, env)  # not sbatch --wait: its polls sleep 2 s and more
    log = open(os.path.join(submit, "shardtrain-%s.out" % job)).read()
    print(log)
    check(job_field(job, "JobState", env) == "COMPLETED", "job %s completed" % job)
    run_dir = os.path.join(submit, "runs", job)
    check(os.path.exists(os.path.join(run_dir, "metrics.jsonl")), "the run went under the submit directory: %s" % run_dir)
    check_fine_tuned(log, weights, export)
    check_export(a, export, a.data.replace("train.h5", "train.val.h5"))


def case_mpirun_finetune(a, env):
    """launch/mpirun.sh with --weights, LoRA options passed through, and a merged export."""
    out, hostfile = fresh_hostfile(a, "mpirun_finetune", "localhost slots=2\n")
    weights, export = make_weights(a, "llama-weights"), os.path.join(out, "export")
    cmd = ["launch/mpirun.sh", "--hostfile", hostfile, "--profile", "cpu", "--ranks-per-host", "2", "--mpirun-args",
           "--oversubscribe", "--data", a.data, "--out-dir", out, "--steps", "6", "--skip-preflight", "--weights", weights,
           "--lora-rank", "4", "--lora-alpha", "8", "--merge-lora", "--save-model", export, "--", *TRAIN_EXTRA]
    p = run(cmd, env, cwd=a.repo)
    log = p.stdout + p.stderr
    check(p.returncode == 0, "launch/mpirun.sh exited 0")
    check_fine_tuned(log, weights, export)
    check("lora        rank 4, alpha 8" in log, "the LoRA options reached the trainer")
    check_export(a, export, a.data.replace("train.h5", "train.val.h5"))
    # Started again on the same directory: --resume auto continues (nothing is left to train), not a new run.
    again = run(cmd, env, cwd=a.repo)
    check(again.returncode == 0 and re.search(r"resumed from \S+step-00000006\.h5 at step 6", again.stdout + again.stderr) is not None,
          "a second launch resumes from the run's latest checkpoint")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=["training", "requeue", "failfast", "sweep", "scancel", "timelimit_submit", "timelimit",
                                     "finetune",
                                     "mpirun", "mpirun_sigterm", "mpirun_finetune"])
    for opt in ("--repo", "--bin", "--data", "--tmp"):
        ap.add_argument(opt, required=True)
    ap.add_argument("--slurm-dir")
    a = ap.parse_args()
    a.python = sys.executable
    env = dict(os.environ, SHARDTRAIN_HOME=a.repo, SHARDTRAIN_BIN=a.bin)
    env.pop("OMP_NUM_THREADS", None)  # the launchers' binding sets it: the checks see theirs, not the test runner's
    if not a.case.startswith("mpirun"):
        envfile = os.path.join(a.slurm_dir or "", "env")
        if not os.path.exists(envfile):
            print("SKIP: local Slurm is not up (%s missing): see the slurm_up test's output" % envfile)
            sys.exit(SKIP)
        env["SLURM_CONF"] = open(envfile).read().split("SLURM_CONF=")[1].split()[0]
    os.makedirs(a.tmp, exist_ok=True)
    globals()["case_" + a.case](a, env)
    print("PASS")


if __name__ == "__main__":
    main()
