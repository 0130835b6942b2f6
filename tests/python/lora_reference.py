#!/usr/bin/env python3
"""LoRA reference tensors from Hugging Face PEFT for the C++ parity tests (tests/cpp/test_lora_mpi.cpp).

The random GQA Llama of make_reference.py (fp32, CPU) wrapped by peft.get_peft_model with a
LoraConfig on all seven projections, dropout 0. PEFT initialises B to zero, which would make
the adapters invisible in the logits and A's gradient zero, so B is then set to small random
values; the adapters are saved with save_pretrained (what shardtrain starts from). Recorded on
fixed tokens: logits, loss, every adapter's gradient, and 3 steps of torch.optim.AdamW with
global-norm clipping over the adapters: the losses and the final adapters.

Usage: lora_reference.py OUT_DIR
"""
import os
import sys

import torch
from peft import LoraConfig, get_peft_model
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_reference import build_model  # noqa: E402

RANK, ALPHA = 4, 8
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
CLIP, STEPS = 1.0, 3


def batch():
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(3, 96, (8, 16), generator=g)
    labels = tokens.clone()
    labels[:, :4] = -100  # masked prompts
    labels[5, 11:] = -100  # masked padding
    return tokens, labels


def key(name):  # PEFT's in-memory name -> its file key (adapter name dropped)
    return name.replace(".default", "")


def main(out):
    os.makedirs(out, exist_ok=True)
    base = build_model()
    base.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    model = get_peft_model(base, LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=TARGETS,
                                            bias="none", task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    model.save_pretrained(os.path.join(out, "adapter_init"))
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    tokens, labels = batch()
    res = model(input_ids=tokens, labels=labels)
    res.loss.backward()
    ref = {"tokens": tokens, "labels": labels, "logits": res.logits.detach().contiguous(), "loss": res.loss.detach().reshape(1)}
    for n, p in trainable:
        ref["grad." + key(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    opt = torch.optim.AdamW([p for _, p in trainable], foreach=False, **ADAMW)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_([p for _, p in trainable], CLIP)
        opt.step()
        losses.append(loss.item())
    ref["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)
    for n, p in trainable:
        ref["final." + key(n)] = p.detach().clone()
    save_file(ref, os.path.join(out, "reference.safetensors"))
    print(f"LoRA reference written to {out}: {len(trainable)} adapter tensors, loss {res.loss.item():.6f}, "
          f"adamw losses {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/reference/lora")
