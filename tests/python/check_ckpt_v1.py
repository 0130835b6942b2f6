#!/usr/bin/env python3
"""The format-1 checkpoint in tests/data/ckpt_v1 (written by 2 ranks at step 2), resumed by
shardtrain at 1 rank for steps 3-10, against Hugging Face transformers and torch.optim.AdamW.

h5py reads the checkpoint: its "model" group becomes a transformers LlamaForCausalLM (fp32,
eager attention) built from the model_config attribute. Each step's loss is that model's loss on
the rows the step trains on; then torch.nn.utils.clip_grad_norm_ and torch.optim.AdamW, started
from the file's exp_avg, exp_avg_sq and adam_step, make the next step's weights. Every loss
against the one shardtrain's resumed run records in its metrics file.

The rows of a step: the data order is a Fisher-Yates shuffle driven by splitmix64 (seed = --seed,
the stream offset by the epoch; src/data/sampler.cpp), written out here from that description;
step s of an epoch takes the global batch order[s*B:(s+1)*B]. The optimizer settings are train's
defaults as `shardtrain train --help` prints them. The learning rate of each step is computed here
from the README's formula (linear warmup, then cosine down to --min-lr-ratio), never read from
shardtrain's output; the resume sets --warmup-steps 4 so that steps 3-4 warm up and 5-10 decay.

Usage: check_ckpt_v1.py SHARDTRAIN CKPT_V1_DIR TOKEN_FILE WORKDIR
"""
import json
import math
import os
import re
import shutil
import subprocess
import sys

import h5py
import torch
from transformers import LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import token_rows  # noqa: E402

BATCH, SEED, STEPS, LR, WARMUP, MIN_LR_RATIO = 8, 7, 10, 1e-3, 4, 0.1
# The resumed steps' losses against transformers': measured within 1.1e-7 (relative) over the 8
# steps, so 1e-6 leaves room for another BLAS's summation order and nothing for a wrong lr or step.
LOSS_RTOL = 1e-6
MASK = (1 << 64) - 1


def epoch_permutation(n, seed, epoch):
    """Fisher-Yates from the last element down, j = splitmix64() % (i + 1)."""
    p = list(range(n))
    state = (seed * 0x9E3779B97F4A7C15 + epoch + 1) & MASK

    def nxt():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & MASK
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    for i in range(n - 1, 0, -1):
        j = nxt() % (i + 1)
        p[i], p[j] = p[j], p[i]
    return p


def lr_at(step):
    """The README's schedule at step `step` (1, 2, ...): lr * step / W while step <= W, then
    m + (lr - m) * (1 + cos(pi * min(1, (step - 1 - W) / max(1, N - W)))) / 2, m = --min-lr-ratio * lr."""
    if step <= WARMUP:
        return LR * step / WARMUP
    m = MIN_LR_RATIO * LR
    return m + (LR - m) * (1 + math.cos(math.pi * min(1.0, (step - 1 - WARMUP) / max(1, STEPS - WARMUP)))) / 2


def help_default(binary, option):
    out = subprocess.run([binary, "train", "--help"], capture_output=True, text=True).stdout
    m = re.search(r"--%s\b[^\n(]*\(=([^)]+)\)" % re.escape(option), out)
    if not m:
        sys.exit(f"FAIL: `shardtrain train --help` shows no default for --{option}")
    return float(m.group(1))


def batch(f, rows):
    idx = sorted(rows)  # h5py reads in increasing order; restore the step's order after
    tokens, labels, positions = token_rows.read(f, idx)
    order = torch.tensor([idx.index(r) for r in rows])
    return tokens[order], labels[order], None if positions is None else positions[order]


def loss_of(model, tokens, labels, positions):
    """Sum of token cross-entropies over the counted labels / their count (labels shifted by one)."""
    logits = token_rows.forward(model, tokens, positions).logits.float()
    lg, lb = logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1)
    return torch.nn.functional.cross_entropy(lg, lb, ignore_index=-100, reduction="sum") / (lb != -100).sum()


def check(ok, msg):
    print(("ok: " if ok else "FAIL: ") + msg, flush=True)
    return ok


def main(binary, ckpt_dir, token_file, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    ckpt = os.path.join(work, "step-00000002.h5")
    shutil.copyfile(os.path.join(ckpt_dir, "step-00000002.h5"), ckpt)
    metrics = os.path.join(work, "metrics.jsonl")
    # The resume of ctest CliMpi.CheckpointWrittenBeforeTheModuleSplitResumes, at 1 rank.
    cmd = [binary, "train", "--threads", "1", "--model", "tiny", "--n-layers", "2", "--hidden-size", "32",
           "--intermediate-size", "64", "--n-heads", "2", "--n-kv-heads", "1", "--vocab-size", "512", "--data", token_file,
           "--steps", str(STEPS), "--batch-size", str(BATCH), "--lr", str(LR), "--lr-schedule", "cosine", "--warmup-steps",
           str(WARMUP), "--min-lr-ratio", str(MIN_LR_RATIO), "--seed", str(SEED), "--resume", ckpt, "--metrics-file", metrics]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    ours = {j["step"]: j for j in (json.loads(line) for line in open(metrics))}
    print("shardtrain resumed:", {s: ours[s]["loss"] for s in sorted(ours)})

    with h5py.File(ckpt, "r") as f:
        a = f.attrs
        cfg = json.loads(a["model_config"])
        epoch, step, adam_step = int(a["loader_epoch"]), int(a["loader_step"]), int(a["adam_step"])
        saved_at = int(a["step"])
        state = {name: torch.from_numpy(f["model"][name][()]) for name in f["model"]}
        exp_avg = {name: torch.from_numpy(f["exp_avg"][name][()]) for name in f["exp_avg"]}
        exp_avg_sq = {name: torch.from_numpy(f["exp_avg_sq"][name][()]) for name in f["exp_avg_sq"]}
    print(f"checkpoint: step {saved_at}, loader epoch {epoch} step {step}, adam_step {adam_step}, "
          f"{len(state)} tensors, config {cfg}")

    torch.manual_seed(0)
    config = LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")})
    model = LlamaForCausalLM(config).to(torch.float32)
    model.config._attn_implementation = "eager"
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary_emb" not in k]
    ok = check(not missing and not unexpected, f"the checkpoint's model group fills the transformers model "
               f"(missing {missing}, unexpected {unexpected})")

    with h5py.File(token_file, "r") as f:
        n = f["tokens"].shape[0]
        steps_per_epoch = max(1, math.ceil(n / BATCH))
        positions = []
        for _ in range(STEPS - saved_at):
            positions.append((epoch, step))
            epoch, step = (epoch + 1, 0) if step + 1 >= steps_per_epoch else (epoch, step + 1)
        batches = []
        for e, s in positions:
            order = epoch_permutation(n, SEED, e)
            batches.append(batch(f, order[s * BATCH:min(n, (s + 1) * BATCH)]))
    print(f"{n} rows, {steps_per_epoch} steps per epoch; steps {saved_at + 1}-{STEPS} at (epoch, step) {positions}")

    wd, b1, b2, eps, clip = (help_default(binary, o) for o in ("weight-decay", "beta1", "beta2", "adam-eps", "grad-clip"))
    print(f"AdamW: weight decay {wd} (not on norms), betas ({b1}, {b2}), eps {eps}; grad clip {clip}")
    named = dict(model.named_parameters())
    decay = [p for k, p in named.items() if p.dim() >= 2]
    no_decay = [p for k, p in named.items() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(b1, b2), eps=eps, foreach=False)
    for k, p in named.items():
        opt.state[p] = {"step": torch.tensor(float(adam_step)), "exp_avg": exp_avg[k].clone(),
                        "exp_avg_sq": exp_avg_sq[k].clone()}

    ok &= check(sorted(ours) == list(range(saved_at + 1, STEPS + 1)), f"shardtrain recorded steps {sorted(ours)}")
    for s, (tokens, labels, positions) in zip(range(saved_at + 1, STEPS + 1), batches):
        for group in opt.param_groups:
            group["lr"] = lr_at(s)
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, tokens, labels, positions)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip).item()
        opt.step()
        got = ours.get(s, {}).get("loss", float("nan"))
        ok &= check(abs(loss.item() - got) <= LOSS_RTOL * abs(loss.item()),
                    f"step {s} at lr {lr_at(s):.6g}: transformers {loss.item():.7f}, shardtrain {got:.7f}")
        if "grad_norm" in ours.get(s, {}):
            ok &= check(abs(norm - ours[s]["grad_norm"]) <= 1e-4 * norm,
                        f"step {s}: gradient norm {norm:.6f}, shardtrain {ours[s]['grad_norm']:.6f}")
    if not ok:
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main(*sys.argv[1:5])
