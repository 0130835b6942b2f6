#!/usr/bin/env python3
"""`shardtrain prepare --format preference` and `train --objective dpo` against TRL's DPOTrainer.

On one tiny random Llama (fp32, CPU) and a Llama-3-shaped tokenizer.json with its chat template
(chat_reference.py's llama3 directory), for preference pairs as strings and in TRL's
conversational form:
  - prepare's rows are TRL's tokenization: prompt + chosen and prompt + rejected, the loss mask on
    the answer (TRL's prompt_ids / chosen_ids / rejected_ids);
  - DPO's loss, gradient norm (before clipping) and metrics at steps 1..4 (the last after 3 AdamW
    steps, clipped) equal TRL's DPOTrainer's on the same pairs (the strings' rows; the head chunked,
    and unfused with --fused-layers), full fine-tuning (a frozen copy as the reference) and LoRA
    (PEFT; the base with the adapters off as the reference), at 1 rank and at 2 ranks with
    gradient accumulation and every sharding strategy, in context groups of 2 (each row's answer
    log-probability summed over its group; LoRA at 2 ranks, full at 4), and with --dpo-loss ipo;
  - --reference-logps from `eval --save-logps` trains the same losses as the reference model (the
    ipo run);
  - `eval --objective dpo` of a trained model (full, against --reference-logps; LoRA, against
    the base with the adapter off) reports the DPO loss and metrics that transformers'
    log-probabilities of its saved weights give by TRL's formulas, and train's last validation.
Each step's batch is all the pairs, so TRL's shuffled order cannot change a step's mean.

Usage: check_dpo.py SHARDTRAIN_BIN CHAT_REF_DIR OUT_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import check  # noqa: E402

# CLIP: TRL's Trainer reports grad_norm only when it clips; 0.5 binds at some steps here.
PAIRS, STEPS, SEQ, LR, BETA, CLIP = 8, 4, 64, 2e-3, 0.1, 0.5
MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
METRICS = ["rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins", "logps/chosen",
           "logps/rejected"]


def string_pairs():
    topics = ["the sea", "a red kite", "old trains", "green tea", "snow", "bread", "a clock", "rivers"]
    out = []
    for i, t in enumerate(topics):
        out.append({"prompt": f"Write about {t}.",
                    "chosen": f" {t.capitalize()} is calm and bright" + " indeed" * (i % 3),
                    "rejected": f" No. {t} is bad" + "!" * (i % 4 + 1)})
    return out


def chat_pairs():
    out = []
    for p in string_pairs():
        prompt = [{"role": "user", "content": p["prompt"]}]
        if len(out) % 2:
            prompt = [{"role": "system", "content": "Be kind."}] + prompt
        out.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": p["chosen"].strip()}],
                    "rejected": [{"role": "assistant", "content": p["rejected"].strip()}]})
    return out


def build_model(vocab, out):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, initializer_range=0.05,
                      attn_implementation="eager")
    model = LlamaForCausalLM(cfg).float()
    model.save_pretrained(out, safe_serialization=True)
    return out


def load(path):
    from transformers import LlamaForCausalLM
    return LlamaForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")


def lora_adapter(base, out, trained):
    """A PEFT adapter saved for shardtrain's --lora-init; returns the PEFT model TRL trains. Fresh
    (PEFT's init, B zero): both references are the base with the adapters off. Trained (B away
    from zero): both are a frozen copy of base + adapter (TRL's "ref" adapter)."""
    from peft import LoraConfig, get_peft_model
    torch.manual_seed(5)
    model = get_peft_model(load(base), LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                  target_modules=["q_proj", "v_proj", "down_proj"]))
    if trained:
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.copy_(0.05 * torch.randn_like(p))
    model.save_pretrained(out)
    return model


def trl_run(model, tokenizer, pairs, out, loss_type="sigmoid", train=True):
    """TRL's losses at each step (recorded from compute_loss, unrounded), each step's logged
    metrics and gradient norm, and its tokenized dataset (alone, without training: train=False)."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    class Recording(DPOTrainer):
        losses = []

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            Recording.losses.append(float(loss.detach()))
            return loss

    Recording.losses = []
    args = DPOConfig(output_dir=out, per_device_train_batch_size=PAIRS, max_steps=STEPS, learning_rate=LR,
                     lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=CLIP,
                     adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, optim="adamw_torch", bf16=False,
                     fp16=False, gradient_checkpointing=False, logging_steps=1, report_to=[], beta=BETA,
                     loss_type=[loss_type], max_length=SEQ, seed=0, save_strategy="no", use_cpu=True,
                     dataloader_num_workers=0)
    trainer = Recording(model=model, args=args, train_dataset=Dataset.from_list(pairs),
                        processing_class=tokenizer)
    if not train:
        return [], [], trainer.train_dataset
    trainer.train()
    logs = [h for h in trainer.state.log_history if "rewards/chosen" in h]
    return Recording.losses, logs, trainer.train_dataset


def shardtrain(binary, args, ranks=1):
    cmd = ([*MPI, "-np", str(ranks)] if ranks > 1 else []) + [binary, *args, "--threads", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def dpo_train(binary, base, data, out, ranks=1, accum=1, extra=(), steps=STEPS, pairs=PAIRS, cp=1):
    metrics = os.path.join(out, "metrics.jsonl")
    context = ["--context-parallel", str(cp)] if cp > 1 else []  # --batch-size: pairs per group of cp ranks
    log = shardtrain(binary, ["train", "--weights", base, "--data", data, "--objective", "dpo", "--dpo-beta", str(BETA),
                        *context, "--batch-size", str(pairs * cp // ranks // accum), "--grad-accum", str(accum),
                        "--steps", str(steps), "--lr", str(LR), "--lr-schedule", "constant", "--warmup-steps",
                        "0", "--weight-decay", "0", "--beta1", "0.9", "--beta2", "0.999", "--adam-eps",
                        "1e-8", "--grad-clip", str(CLIP), "--log-every", "1", "--metrics-file", metrics, *extra],
               ranks)
    # The options took: the start banner names what the run does.
    for flag, says in (("--fused-layers", "fused decoder layers"), ("--cpu-offload", "offload     --cpu-offload")):
        given = flag in extra
        check((says in log) == given, f"{flag} {'given' if given else 'absent'}: "
              f"the banner {'says' if given else 'does not say'} '{says}'")
    check(f"global batch {pairs} pairs" in log, f"the banner counts the global batch in pairs ({pairs})")
    with open(metrics) as f:
        return [json.loads(line) for line in f if line.strip()]


def compare(name, ours, trl_losses, trl_logs):
    """Losses, gradient norms and metrics at every step: AdamW normalises the gradient, so a wrong
    gradient scale shows in the losses only through eps and clipping, in grad_norm at once; the
    rewards are all 0 at step 1 (policy = reference) and only the later steps test them."""
    got = [m["loss"] for m in ours]
    check(len(got) == STEPS and len(trl_losses) == STEPS and len(trl_logs) == STEPS, f"{name}: {STEPS} steps each")
    worst = max(abs(a - b) for a, b in zip(got, trl_losses))
    check(worst <= 1e-5, f"{name}: DPO loss at steps 1..{STEPS} equals TRL's within 1e-5 "
          f"(max gap {worst:.2e}; ours {got[0]:.7f} -> {got[-1]:.7f})")
    check(abs(got[-1] - got[0]) > 1e-3, f"{name}: the loss moves over the steps (the comparison sees training)")
    norms = [(m["grad_norm"], t["grad_norm"]) for m, t in zip(ours, trl_logs)]
    worst = max(abs(a - b) / b for a, b in norms)
    check(worst <= 1e-5, f"{name}: the gradient norm at steps 1..{STEPS} equals TRL's within 1e-5 relative "
          f"(max gap {worst:.1e}; TRL's {', '.join(f'{b:.4f}' for _, b in norms)}; clip {CLIP})")
    for step, (m, t) in enumerate(zip(ours, trl_logs), 1):
        for k in METRICS:
            tol = 1e-5 * max(1.0, abs(t[k]))
            check(abs(m[k] - t[k]) <= tol, f"{name}: step {step} {k} {m[k]:.6f} = TRL's {t[k]:.6f}")
    check(any(abs(t["rewards/margins"]) > 1e-3 for t in trl_logs[1:]),
          f"{name}: the rewards compared at steps 2..{STEPS} are not zero")


def check_rows(name, data, trl_dataset):
    with h5py.File(data, "r") as f:
        tokens, mask = f["tokens"][:], f["loss_mask"][:]
        check(f.attrs["format"] == "preference" and tokens.shape[0] == 2 * PAIRS,
              f"{name}: {PAIRS} pairs -> {2 * PAIRS} rows, format preference")
    for i, ex in enumerate(trl_dataset):
        for k, answer in ((0, ex["chosen_ids"]), (1, ex["rejected_ids"])):
            ids = list(ex["prompt_ids"]) + list(answer)
            row = tokens[2 * i + k]
            if list(row[:len(ids)]) != ids or list(mask[2 * i + k][:len(ids)]) != [0] * len(ex["prompt_ids"]) + [1] * len(answer) \
                    or mask[2 * i + k][len(ids):].any():
                check(False, f"{name}: pair {i} {'chosen' if k == 0 else 'rejected'}: ids/mask differ from TRL's\n"
                      f"  TRL  {ids}\n  ours {list(row[:len(ids) + 2])}")
    check(True, f"{name}: every row's ids and answer mask are TRL's prompt_ids + chosen_ids / rejected_ids")


def run_rc(binary, args, ranks=1):
    cmd = ([*MPI, "-np", str(ranks)] if ranks > 1 else []) + [binary, *args, "--threads", "1"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def check_bad_input(binary, tok_dir, base, data, out):
    """Bad records are skipped and named by line; the mistakes users make exit 2 naming the option."""
    good = string_pairs()[0]
    lines = [good, {"prompt": "p", "chosen": "a"}, {"prompt": "p", "chosen": "  ", "rejected": "b"},
             {"prompt": "p", "chosen": "same", "rejected": "same"},
             {"prompt": "word " * 200, "chosen": "a", "rejected": "b"}, {"prompt": "p", "chosen": 3, "rejected": "b"}]
    bad = os.path.join(out, "bad.jsonl")
    with open(bad, "w") as f:
        f.writelines(json.dumps(x) + "\n" for x in lines)
    rc, text = run_rc(binary, ["prepare", "--tokenizer", tok_dir, "--input", bad, "--output", os.path.join(out, "bad.h5"),
                               "--seq-len", str(SEQ), "--show-bad", "4"])
    check(rc == 0 and "preference" in text, "prepare detects the preference format and keeps the good pair")
    for line, reason in ((2, "missing field"), (3, "empty answer"), (4, "identical chosen and rejected"),
                         (5, "answer cut away by --seq-len")):
        check(f"bad.jsonl:{line}: {reason}" in text, f"a bad record is reported by line: {line}: {reason}")
    check("bad.jsonl:6" not in text and "... and 1 more skipped (--show-bad N names up to N)" in text,
          "past --show-bad 4, the fifth bad record is counted and --show-bad named")
    check("1 pair -> 2 rows" in text, "only the good pair is kept")
    chat = os.path.join(out, "bad-chat.jsonl")
    with open(chat, "w") as f:
        f.write(json.dumps(chat_pairs()[0]) + "\n")
        f.write(json.dumps({"prompt": [{"role": "user", "content": "q"}], "chosen": [{"role": "user", "content": "a"}],
                            "rejected": [{"role": "assistant", "content": "b"}]}) + "\n")
    rc, text = run_rc(binary, ["prepare", "--tokenizer", tok_dir, "--input", chat, "--output", os.path.join(out, "c.h5")])
    check(rc == 2 and "bad-chat.jsonl:2" in text, "a conversational answer that is not the assistant's exits 2 naming its line")
    jsonl = os.path.join(out, "strings.jsonl")
    for extra, what in ((["--mode", "packing"], "--mode packing"), (["--train-on", "all"], "--train-on all")):
        rc, text = run_rc(binary, ["prepare", "--tokenizer", tok_dir, "--input", jsonl, "--output",
                                   os.path.join(out, "x.h5"), *extra])
        check(rc == 2 and what in text, f"prepare refuses {what} for preference pairs (exit 2, named)")
    rc, text = run_rc(binary, ["train", "--weights", base, "--data", data, "--steps", "1"])
    check(rc == 2 and "--objective dpo" in text, "train without --objective dpo refuses a preference file")
    rc, text = run_rc(binary, ["eval", "--weights", base, "--data", data, "--save-logps", os.path.join(out, "cp.h5"),
                               "--context-parallel", "2"], ranks=2)
    with h5py.File(os.path.join(out, "cp.h5"), "r") as a, h5py.File(os.path.join(out, "ref-logps.h5"), "r") as b:
        gap = float((abs(a["logps"][:] - b["logps"][:]) / abs(b["logps"][:])).max()) if rc == 0 else float("inf")
    # fp32 sums of about -100: the two shares' sum may differ from one rank's in the last bit (1.2e-7).
    check(rc == 0 and gap <= 1e-6, f"eval --save-logps in context groups of 2 writes 1 rank's log-probabilities "
          f"(max relative gap {gap:.1e})")
    rc, text = run_rc(binary, ["train", "--weights", base, "--data", data, "--steps", "1", "--objective", "dpo",
                               "--reference-logps", os.path.join(out, "ref-logps.h5")])
    check(rc == 0, "a run with --reference-logps of its own file runs")
    other = os.path.join(out, "split.h5")  # other pairs: check_resume_and_validation wrote it
    rc, text = run_rc(binary, ["train", "--weights", base, "--data", other, "--steps", "1", "--objective", "dpo",
                               "--reference-logps", os.path.join(out, "ref-logps.h5")])
    check(rc == 2 and "--reference-logps" in text, "--reference-logps of another token file exits 2")


def answer_logps(model, data):
    """Each row's summed log-probability of its answer tokens (loss_mask), by transformers."""
    with h5py.File(data, "r") as f:
        tokens, mask = torch.tensor(f["tokens"][:]).long(), torch.tensor(f["loss_mask"][:]).double()
    with torch.no_grad():
        logp = torch.log_softmax(model(tokens).logits[:, :-1].double(), -1)
    return (logp.gather(-1, tokens[:, 1:, None]).squeeze(-1) * mask[:, 1:]).sum(-1)


def dpo_metrics(policy, reference):
    """TRL's sigmoid loss and metrics from rows in pairs (chosen 2i, rejected 2i + 1)."""
    chosen, rejected = BETA * (policy[0::2] - reference[0::2]), BETA * (policy[1::2] - reference[1::2])
    return {"loss": float(-torch.nn.functional.logsigmoid(chosen - rejected).mean()),
            "rewards/chosen": float(chosen.mean()), "rewards/rejected": float(rejected.mean()),
            "rewards/accuracies": float((chosen > rejected).double().mean()),
            "rewards/margins": float((chosen - rejected).mean()), "logps/chosen": float(policy[0::2].mean()),
            "logps/rejected": float(policy[1::2].mean())}


def check_eval(name, binary, args, want, also=None):
    """eval --objective dpo's first line against metrics from transformers (and train's, if given)."""
    r = shardtrain(binary, ["eval", *args, "--objective", "dpo", "--dpo-beta", str(BETA)])
    got = json.loads(r[r.index("{"):].splitlines()[0])
    for k, v in want.items():
        check(abs(got[k] - v) <= 1e-5 * max(1.0, abs(v)), f"{name}: eval's {k} {got[k]:.7f} = transformers' {v:.7f}")
    if also:
        worst = max(abs(got[k] - also["val_" + k]) for k in want)
        check(worst <= 1e-6, f"{name}: eval equals train's last validation (max gap {worst:.1e})")
    return got


def check_resume_and_validation(binary, tok_dir, base, out, uninterrupted):
    """A resumed DPO run continues the losses of the uninterrupted one; validation reports DPO's
    metrics on held-out pairs."""
    data = os.path.join(out, "strings.h5")
    ck = os.path.join(out, "ck")
    first = dpo_train(binary, base, data, os.path.join(out, "run-resume-a"),
                      extra=["--checkpoint-dir", ck, "--save-every", "2"], steps=2)
    rest = dpo_train(binary, base, data, os.path.join(out, "run-resume-b"), extra=["--checkpoint-dir", ck, "--resume", "auto"])
    got = [m["loss"] for m in first + rest if "loss" in m and m.get("step", 0) > 0]
    want = [m["loss"] for m in uninterrupted]
    check(len(got) == STEPS and max(abs(a - b) for a, b in zip(got, want)) <= 1e-6,
          f"a DPO run resumed at step 2 trains the uninterrupted run's losses ({got})")
    listing = shardtrain(binary, ["inspect", os.path.join(ck, "latest")])
    check(f"global batch {PAIRS} pairs (schedule in steps of {PAIRS} pairs)" in listing,
          "inspect counts a DPO checkpoint's global batch in pairs")
    jsonl = os.path.join(out, "strings.jsonl")
    split = os.path.join(out, "split.h5")
    shardtrain(binary, ["prepare", "--tokenizer", tok_dir, "--input", jsonl, "--output", split, "--val-fraction", "0.25",
                        "--seq-len", str(SEQ)])
    val_data, trained = os.path.join(out, "split.val.h5"), os.path.join(out, "run-val", "model")
    lines = dpo_train(binary, base, split, os.path.join(out, "run-val"),
                      extra=["--val-data", val_data, "--val-every", "2", "--save-model", trained], pairs=2)
    val = [m for m in lines if "val_rewards/accuracies" in m]
    check(len(val) >= 2 and all(0 <= m["val_rewards/accuracies"] <= 1 for m in val)
          and all(k in val[0] for k in ["val_loss"] + ["val_" + k for k in METRICS]),
          f"validation on held-out pairs reports val_loss and TRL's metrics ({len(val)} validations)")
    check(abs(val[0]["val_loss"] - 0.6931472) > 1e-4, "validation at step 2 sees a moved policy")
    ref_logps = os.path.join(out, "ref-val-logps.h5")
    shardtrain(binary, ["eval", "--weights", base, "--data", val_data, "--save-logps", ref_logps])
    want = dpo_metrics(answer_logps(load(trained), val_data), answer_logps(load(base), val_data))
    got = check_eval("eval, full", binary, ["--weights", trained, "--data", val_data, "--reference-logps", ref_logps],
                     want, also=val[-1])
    check(got["pairs"] == 2 and abs(got["loss"] - 0.6931472) > 1e-4, "eval counts the held-out pairs and sees the trained policy")
    rc, text = run_rc(binary, ["eval", "--weights", trained, "--data", val_data])
    check(rc == 2 and "--objective dpo" in text, "eval of a preference file without --objective dpo exits 2 naming it")
    rc, text = run_rc(binary, ["eval", "--weights", trained, "--data", val_data, "--objective", "dpo"])
    check(rc == 2 and "--reference-logps" in text, "eval --objective dpo of a full model without a reference exits 2")
    # Resumed with other DPO settings: each change said in one line, as --lr's; against another
    # reference (other starting weights): refused before anything trains.
    resume = ["train", "--data", data, "--objective", "dpo", "--steps", str(STEPS), "--batch-size", str(PAIRS),
              "--checkpoint-dir", ck, "--resume", "auto"]
    for extra, says in ((["--dpo-beta", "0.5"], "--dpo-beta is 0.5 in this run but was 0.1"),
                        (["--dpo-beta", str(BETA), "--dpo-loss", "ipo"], "--dpo-loss is ipo in this run but was sigmoid")):
        rc, text = run_rc(binary, [*resume, "--weights", base, *extra])
        check(rc == 0 and says in text, f"a resume with {' '.join(extra)} says '{says}'")
    rc, text = run_rc(binary, [*resume, "--weights", trained])
    check(rc == 2 and "was trained by DPO against --weights " + os.path.abspath(base) in text
          and "this run's reference is --weights " + os.path.abspath(trained) in text,
          "a resume against other starting weights (another reference) exits 2 naming both")


def main(binary, chat_ref, out):
    from transformers import AutoTokenizer
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    tok_dir = os.path.join(chat_ref, "llama3")
    tokenizer = AutoTokenizer.from_pretrained(tok_dir)
    base = build_model(len(tokenizer), os.path.join(out, "base"))
    shutil.copy(os.path.join(tok_dir, "tokenizer.json"), base)
    shutil.copy(os.path.join(tok_dir, "tokenizer_config.json"), base)
    for form, pairs in (("strings", string_pairs()), ("conversational", chat_pairs())):
        jsonl, data = os.path.join(out, f"{form}.jsonl"), os.path.join(out, f"{form}.h5")
        with open(jsonl, "w") as f:
            f.writelines(json.dumps(p) + "\n" for p in pairs)
        report = shardtrain(binary, ["prepare", "--tokenizer", tok_dir, "--input", jsonl, "--output", data,
                                     "--format", "preference", "--seq-len", str(SEQ)])
        check(f"{PAIRS} pairs -> {2 * PAIRS} rows" in report, f"{form}: prepare reports pairs: {report.splitlines()[-1]}")
        check("dialogues cut" not in report, f"{form}: no dialogue-cut count for pairs (an answer is one turn)")
        # The conversational rows are TRL's; training on rows is the strings' case below.
        trl_losses, trl_logs, dataset = trl_run(load(base), tokenizer, pairs, os.path.join(out, f"trl-{form}"),
                                                train=form == "strings")
        check_rows(form, data, dataset)
        if form != "strings":
            continue
        ours = dpo_train(binary, base, data, os.path.join(out, f"run-{form}"))
        compare(f"{form}, full, 1 rank", ours, trl_losses, trl_logs)
        check_resume_and_validation(binary, tok_dir, base, out, ours)
        ours = dpo_train(binary, base, data, os.path.join(out, "run-np2"), ranks=2, accum=2)
        compare("strings, full, 2 ranks x 2 micro-batches", ours, trl_losses, trl_logs)
        for strategy in (["shard_grad_op"], ["no_shard"]):  # hybrid_shard: the 4-rank layout below
            ours = dpo_train(binary, base, data, os.path.join(out, f"run-{strategy[0]}"), ranks=2,
                             extra=["--sharding", *strategy])
            compare(f"strings, full, 2 ranks, {' '.join(strategy)}", ours, trl_losses, trl_logs)
        # A real hybrid layout: shard groups of 2 on 2 simulated nodes, replicas across, 2 micro-batches.
        ours = dpo_train(binary, base, data, os.path.join(out, "run-hsdp-np4"), ranks=4, accum=2,
                         extra=["--sharding", "hybrid_shard", "--ranks-per-node", "2"])
        compare("strings, full, 4 ranks hybrid_shard (2 x 2) x 2 micro-batches", ours, trl_losses, trl_logs)
        # The CLI's --fused-layers (merged q k v and gate up, fused RMSNorm) with the unchunked head
        # (every other run chunks it), and --cpu-offload (the masters, moments and gradients on the
        # host, AdamW there) under accumulation.
        ours = dpo_train(binary, base, data, os.path.join(out, "run-fused"), extra=["--fused-layers", "--loss-chunk", "off"])
        compare("strings, full, --fused-layers, unfused head (--loss-chunk off)", ours, trl_losses, trl_logs)
        ours = dpo_train(binary, base, data, os.path.join(out, "run-offload"), ranks=2, accum=2,
                         extra=["--cpu-offload"])
        compare("strings, full, 2 ranks x 2 micro-batches, --cpu-offload", ours, trl_losses, trl_logs)
        # Context parallelism: each row's answer log-probability summed over its group of 2 ranks;
        # 2 groups with 2 micro-batches each (one group alone: the LoRA run below).
        ours = dpo_train(binary, base, data, os.path.join(out, "run-cp2-np4"), ranks=4, accum=2, cp=2)
        compare("strings, full, --context-parallel 2 at 4 ranks x 2 micro-batches", ours, trl_losses, trl_logs)
        logps = os.path.join(out, "ref-logps.h5")
        r = subprocess.run([binary, "eval", "--weights", base, "--data", data, "--save-logps", logps, "--threads", "1"],
                           capture_output=True, text=True)
        first = json.loads(r.stdout.splitlines()[0]) if r.returncode == 0 and r.stdout else None
        check(isinstance(first, dict) and first.get("rows") == 2 * PAIRS and "INFO" not in r.stdout,
              f"eval --save-logps: stdout's first line is its JSON result ({r.stdout.splitlines()[:1]}), the logs on stderr")
        check_bad_input(binary, tok_dir, base, data, out)
        ipo_losses, ipo_logs, _ = trl_run(load(base), tokenizer, pairs, os.path.join(out, "trl-ipo"), "ipo")
        ours = dpo_train(binary, base, data, os.path.join(out, "run-ipo"), extra=["--dpo-loss", "ipo", "--reference-logps", logps])
        compare("strings, full, ipo, --reference-logps", ours, ipo_losses, ipo_logs)
        for trained in (False, True):
            kind = "trained adapter" if trained else "fresh adapter"
            adapter = os.path.join(out, f"adapter-{int(trained)}")
            peft_model = lora_adapter(base, adapter, trained)
            lora_losses, lora_logs, _ = trl_run(peft_model, tokenizer, pairs, os.path.join(out, "trl-lora"))
            # 2 ranks: data-parallel for the trained adapter (a frozen copy as the reference), a
            # context group of 2 for the fresh one (the base with the adapters off).
            for ranks in (1, 2):
                cp = 2 if ranks == 2 and not trained else 1
                log = os.path.join(out, f"run-lora{int(trained)}-np{ranks}")
                save = ["--save-model", os.path.join(log, "adapter")] if ranks == 1 and not trained else []
                ours = dpo_train(binary, base, data, log, ranks=ranks, cp=cp, extra=["--lora-init", adapter, *save])
                compare(f"strings, LoRA ({kind}), {ranks} rank(s){', --context-parallel 2' if cp > 1 else ''}",
                        ours, lora_losses, lora_logs)
                if save:
                    from peft import PeftModel
                    policy = PeftModel.from_pretrained(load(base), save[1]).merge_and_unload()
                    want = dpo_metrics(answer_logps(policy, data), answer_logps(load(base), data))
                    check_eval("eval, LoRA (the base as the reference)", binary,
                               ["--weights", base, "--lora", save[1], "--data", data], want)


if __name__ == "__main__":
    main(*sys.argv[1:4])
