#!/usr/bin/env python3
"""Reference tensors from Hugging Face transformers for the C++ parity test (llm.c's test_gpt2 idea).

Builds a tiny random LlamaForCausalLM (fp32, CPU, grouped-query attention), saves it with
save_pretrained (safetensors + config.json), and records on fixed tokens: the logits, the loss,
every parameter's gradient, and the loss trajectory of 10 torch.optim.AdamW steps. Also greedy
generate() ids and TopPLogitsWarper's kept-token masks, for the decoding code.

Usage: make_reference.py OUT_DIR
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.logits_process import TopPLogitsWarper

ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
CLIP = 1.0
STEPS = 10


def build_model():
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
        initializer_range=0.1, attn_implementation="eager")
    model = LlamaForCausalLM(cfg).float()
    with torch.no_grad():  # norms away from 1 so their gradients are exercised too
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def batch():
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(3, 96, (2, 16), generator=g)
    labels = tokens.clone()
    labels[0, :5] = -100  # a masked prompt
    labels[1, 10:] = -100  # masked padding
    return tokens, labels


def fused_optimizer_case(ref):
    """torch.optim.AdamW(fused=True) alone: three parameters (one without weight decay), five
    steps of recorded gradients, and the final parameters and moments."""
    gen = torch.Generator().manual_seed(11)
    shapes = [(7, 5), (33,), (4, 3, 2)]
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in shapes]
    for i, p in enumerate(params):
        ref[f"fused.init.{i}"] = p.detach().clone()
    opt = torch.optim.AdamW([{"params": [params[0], params[2]]}, {"params": [params[1]], "weight_decay": 0.0}],
                            lr=2e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=True)
    for step in range(5):
        for i, p in enumerate(params):
            p.grad = torch.randn(p.shape, generator=gen) * (0.1 + step)
            ref[f"fused.grad.{step}.{i}"] = p.grad.clone()
        opt.step()
    for i, p in enumerate(params):
        ref[f"fused.final.{i}"] = p.detach().clone()
        ref[f"fused.exp_avg.{i}"] = opt.state[p]["exp_avg"].clone()
        ref[f"fused.exp_avg_sq.{i}"] = opt.state[p]["exp_avg_sq"].clone()


def main(out):
    os.makedirs(out, exist_ok=True)
    model = build_model()
    model.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    tokens, labels = batch()
    res = model(input_ids=tokens, labels=labels)
    res.loss.backward()
    ref = {"tokens": tokens, "labels": labels, "logits": res.logits.detach().contiguous(),
           "loss": res.loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        ref["grad." + name] = p.grad.detach().clone()

    model.zero_grad(set_to_none=True)
    prompt = tokens[:1, :6]
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=2, pad_token_id=0)
    ref["generate.prompt"] = prompt.clone()
    ref["generate.greedy"] = gen[:, prompt.shape[1]:].contiguous()
    logits = torch.randn(1, 96, generator=torch.Generator().manual_seed(2)) * 2
    ref["topp.logits"] = logits[0].contiguous()
    for p in (0.3, 0.8, 0.95):
        kept = TopPLogitsWarper(top_p=p)(None, logits.clone())[0].isfinite()
        ref[f"topp.keep_{p}"] = kept.to(torch.uint8).contiguous()

    decay = [p for n, p in model.named_parameters() if "norm" not in n]
    no_decay = [p for n, p in model.named_parameters() if "norm" in n]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                            foreach=False, **ADAMW)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = model(input_ids=tokens, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    ref["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)
    fused_optimizer_case(ref)
    save_file(ref, os.path.join(out, "reference.safetensors"))
    print(f"reference written to {out}: loss {res.loss.item():.6f}, adamw losses {losses[0]:.6f} -> {losses[-1]:.6f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/reference")
