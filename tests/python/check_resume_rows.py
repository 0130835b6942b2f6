#!/usr/bin/env python3
"""What a resumed run trains on, judged by content, not by the sample ids shardtrain logs itself.

The runs start from a tiny transformers model (save_pretrained) and train at --lr 1e-30, which
leaves every fp32 weight as it was (AdamW moves a weight by about lr, far below its last bit), so
each step's loss is the initial model's loss on the rows the step trained. The rows each step
should train are worked out here from docs/data.md's rules ("Reading for training"): an epoch's order is a Fisher-Yates
shuffle driven by splitmix64 (check_ckpt_v1.epoch_permutation), a step takes the next global
batch (--batch-size x --grad-accum x ranks) of it, the epoch's last step what is left; a resume
continues at the next unread row of the epoch, with its own global batch. transformers' loss on
those rows (token_rows, the loss over the batch's loss tokens) must equal the loss the run
records for each step, for an uninterrupted run at 4 ranks and its checkpoint resumed at 2 ranks,
at 4 ranks with --grad-accum 2 in the second epoch, and at 1 rank; a step that trained other
rows (one row skipped, one repeated) changes its loss by far more than the tolerance.

usage: check_resume_rows.py SHARDTRAIN DEMO_JSONL TOKENIZER WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_rows  # noqa: E402
from check_ckpt_v1 import epoch_permutation  # noqa: E402

BIN, JSONL, TOKENIZER, WORK = sys.argv[1:5]
ROWS, SEED, BATCH, EPOCHS = 50, 1234, 3, 2
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
# Measured within 1.9e-7 (relative, fp32); a batch of 3-24 rows with one row swapped moves its
# mean loss by a share of one row's loss, orders of magnitude more.
RTOL = 2e-6
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def run(args, np_=1):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np_), BIN] + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def losses(metrics):
    return {j["step"]: j["loss"] for j in (json.loads(line) for line in open(metrics)) if "loss" in j}


def expected_rows(n, start, global_batch, steps):
    """(epoch, rows) of `steps` steps from position start = (epoch, row), global_batch rows a step."""
    epoch, row = start
    out = []
    for _ in range(steps):
        order = epoch_permutation(n, SEED, epoch)
        rows = order[row:min(n, row + global_batch)]
        out.append((epoch, rows))
        row += len(rows)
        if row >= n:
            epoch, row = epoch + 1, 0
    return out


def position_after(n, global_batch, steps):
    epoch, row = 0, 0
    for _ in range(steps):
        row += min(global_batch, n - row)
        if row >= n:
            epoch, row = epoch + 1, 0
    return epoch, row


def steps_to_end(n, start, global_batch):
    epoch, row = start
    k = 0
    while epoch < EPOCHS:
        row += min(global_batch, n - row)
        k += 1
        if row >= n:
            epoch, row = epoch + 1, 0
    return k


def reference_loss(model, f, rows):
    idx = sorted(rows)
    tokens, labels, positions = token_rows.read(f, idx)
    with torch.no_grad():
        logits = token_rows.forward(model, tokens, positions).logits.float()
    lg, lb = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    return (torch.nn.functional.cross_entropy(lg, lb, ignore_index=-100, reduction="sum") / (lb != -100).sum()).item()


def compare(name, got, plan, first_step, model, f):
    check(sorted(got) == list(range(first_step, first_step + len(plan))),
          f"{name}: steps {sorted(got)}, expected {first_step}..{first_step + len(plan) - 1}")
    worst = 0.0
    for k, (epoch, rows) in enumerate(plan):
        step = first_step + k
        want = reference_loss(model, f, rows)
        have = got.get(step, float("nan"))
        rel = abs(have - want) / want
        worst = max(worst, rel) if rel == rel else float("inf")
        if not rel <= RTOL:
            check(False, f"{name}: step {step} (epoch {epoch}, rows {rows}) loss {have:.7f}, transformers {want:.7f}")
    check(worst <= RTOL, f"{name}: {len(plan)} steps' losses equal transformers' on the expected rows (worst rel {worst:.1e})")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    jsonl, data = os.path.join(WORK, "rows.jsonl"), os.path.join(WORK, "rows.h5")
    with open(JSONL) as src, open(jsonl, "w") as dst:
        for _, line in zip(range(ROWS), src):
            dst.write(line)
    run(["prepare", "--tokenizer", TOKENIZER, "--input", jsonl, "--output", data, "--seq-len", "64", "--mode", "padding"])
    torch.manual_seed(0)
    model_dir = os.path.join(WORK, "model")
    model = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         initializer_range=0.1, tie_word_embeddings=False))
    model.save_pretrained(model_dir)
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()

    common = ["train", "--weights", model_dir, "--data", data, "--threads", "1", "--lr", "1e-30", "--warmup-steps", "2",
              "--epochs", str(EPOCHS), "--batch-size", str(BATCH), "--seed", str(SEED), "--log-every", "1000"]
    ckpt = os.path.join(WORK, "ckpt")
    whole = os.path.join(WORK, "whole.jsonl")
    run(common + ["--checkpoint-dir", ckpt, "--save-every", "3", "--metrics-file", whole], 4)
    with h5py.File(data, "r") as f:
        n = f["tokens"].shape[0]
        g4 = BATCH * 4
        compare("4 ranks, uninterrupted", losses(whole), expected_rows(n, (0, 0), g4, steps_to_end(n, (0, 0), g4)), 1, model, f)
        resumes = [("4 -> 2 ranks from step 3", 3, 2, [], BATCH * 2),
                   ("4 ranks --grad-accum 2 from step 6 (epoch 1)", 6, 4, ["--grad-accum", "2"], BATCH * 4 * 2),
                   ("4 -> 1 rank from step 3", 3, 1, [], BATCH)]
        for name, at, np_, extra, g in resumes:
            metrics = os.path.join(WORK, f"resumed_{at}_{np_}{'_'.join(extra)}.jsonl")
            out = run(common + extra + ["--checkpoint-dir", os.path.join(WORK, f"ckpt_{at}_{np_}{'_'.join(extra)}"),
                                        "--resume", os.path.join(ckpt, f"step-{at:08d}.h5"), "--metrics-file", metrics], np_)
            check("resumed from" in out, f"{name}: the run says it resumed")
            start = position_after(n, g4, at)
            compare(name, losses(metrics), expected_rows(n, start, g, steps_to_end(n, start, g)), at + 1, model, f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
