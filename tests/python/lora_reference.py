#!/usr/bin/env python3
"""LoRA reference tensors from Hugging Face PEFT for the C++ parity tests (tests/cpp/test_lora_mpi.cpp).

The random GQA Llama of make_reference.py (fp32, CPU) wrapped by peft.get_peft_model with a
LoraConfig on all seven projections, dropout 0. PEFT initialises B to zero, which would make
the adapters invisible in the logits and A's gradient zero, so B is then set to small random
values; the adapters are saved with save_pretrained (what shardtrain starts from). Recorded on
fixed tokens: logits, loss, every adapter's gradient, and 3 steps of torch.optim.AdamW with
global-norm clipping over the adapters: the losses and the final adapters.

Two variants on the same tokens, loss and adapter gradients each:
- fp8.<mode>.*: the base projections' GEMMs in float8 (tensorwise and rowwise), the adapters
  not, emulated as torchao's float8 training recipe does it (fp8_linear below);
- qv.*: adapters on q_proj and v_proj only (adapter_init_qv/), for the fused layers, where q, k
  and v are one merged GEMM.

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


E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}


def quantize(x, dtype, rowwise):
    """x [rows, k] in float8 with torchao's dynamic scale (max / amax, amax floored at 1e-12):
    one for the tensor, or one per row (scaled along k). Returns the float8 values as fp32 and
    the factor that undoes the scale."""
    x = x.float()
    amax = x.abs().amax(dim=1, keepdim=True) if rowwise else x.abs().amax()
    # torchao's amax_to_scale: max / amax in float64, rounded to fp32 (Python's `max / tensor` is
    # reciprocal(tensor) * max, an ulp off at times, which can tip a value across a rounding tie)
    scale = (FP8_MAX[dtype] / amax.clamp_min(1e-12).double()).float()
    q = (x * scale).clamp(-FP8_MAX[dtype], FP8_MAX[dtype]).to(dtype)
    return q.float(), scale.reciprocal()


def fp8_mm(a, b, rowwise):
    """a [m, k] @ b [n, k]^T from the two operands' float8 values: exact products, fp32 sums,
    scaled back per tensor or per row of each."""
    (qa, ia), (qb, ib) = a, b
    return (qa @ qb.t()) * ia * (ib.reshape(1, -1) if rowwise else ib)


class Fp8Linear(torch.autograd.Function):
    """y = x @ w^T with weights and activations in e4m3, gradients in e5m2 (torchao's recipe):
    dx from e5m2(dy) and e4m3(w) scaled along out, dw from e5m2(dy)^T and e4m3(x)^T along the
    tokens."""

    @staticmethod
    def forward(ctx, x, w, rowwise):
        x2 = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(x2, w)
        ctx.rowwise = rowwise
        y = fp8_mm(quantize(x2, E4M3, rowwise), quantize(w, E4M3, rowwise), rowwise)
        return y.reshape(*x.shape[:-1], w.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x2, w = ctx.saved_tensors
        rw = ctx.rowwise
        dy2 = dy.reshape(-1, dy.shape[-1])
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = fp8_mm(quantize(dy2, E5M2, rw), quantize(w.t(), E4M3, rw), rw).reshape(
                *dy.shape[:-1], w.shape[1]).to(dy.dtype)
        if ctx.needs_input_grad[1]:
            dw = fp8_mm(quantize(dy2.t(), E5M2, rw), quantize(x2.t(), E4M3, rw), rw).to(w.dtype)
        return dx, dw, None


def loss_and_grads(model, trainable, tokens, labels, prefix, ref):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=tokens, labels=labels).loss
    loss.backward()
    ref[prefix + "loss"] = loss.detach().reshape(1)
    for n, p in trainable:
        ref[prefix + "grad." + key(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)


def fp8_variant(model, trainable, tokens, labels, ref):
    """The base layers under each LoRA wrapper (every projection here) through Fp8Linear."""
    bases = [m.base_layer for m in model.modules() if hasattr(m, "base_layer") and hasattr(m, "lora_A")]
    assert len(bases) == 7 * model.config.num_hidden_layers, len(bases)
    for mode, rowwise in (("tensorwise", False), ("rowwise", True)):
        for b in bases:
            assert b.bias is None
            b.forward = (lambda lin: lambda x: Fp8Linear.apply(x, lin.weight, rowwise))(b)
        loss_and_grads(model, trainable, tokens, labels, f"fp8.{mode}.", ref)
    for b in bases:
        del b.forward  # back to nn.Linear's


def lora_model(base, targets, seed, adapter_dir):
    """PEFT over base on targets, B drawn small and random from seed (PEFT's zero B would hide
    the adapters), saved with save_pretrained to adapter_dir; returns it and its trainable list."""
    model = get_peft_model(base, LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=targets,
                                            bias="none", task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    model.save_pretrained(adapter_dir)
    return model, [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def qv_variant(out, tokens, labels, ref):
    model, trainable = lora_model(build_model(), ["q_proj", "v_proj"], 5, os.path.join(out, "adapter_init_qv"))
    assert len(trainable) == 4 * model.config.num_hidden_layers
    loss_and_grads(model, trainable, tokens, labels, "qv.", ref)


def main(out):
    os.makedirs(out, exist_ok=True)
    base = build_model()
    base.save_pretrained(os.path.join(out, "model"), safe_serialization=True)
    model, trainable = lora_model(base, TARGETS, 4, os.path.join(out, "adapter_init"))
    tokens, labels = batch()
    res = model(input_ids=tokens, labels=labels)
    res.loss.backward()
    ref = {"tokens": tokens, "labels": labels, "logits": res.logits.detach().contiguous(), "loss": res.loss.detach().reshape(1)}
    for n, p in trainable:
        ref["grad." + key(n)] = p.grad.detach().clone()
    model.zero_grad(set_to_none=True)
    fp8_variant(model, trainable, tokens, labels, ref)
    qv_variant(out, tokens, labels, ref)
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
