#!/usr/bin/env python3
"""Reference logits from transformers' own forward with position_ids far from 0, for the C++ RoPE
position test (tests/cpp/model/test_rope_positions.cpp).

RoPE is relative: shifting every position of a document by a constant changes its attention only
by float rounding, so positions near 0 cannot tell a correct position from one that is off by one.
fp32's rounding of the angle p * inv_freq grows with p, so at positions in the thousands a wrong
position shows. Each case is one row of T = 8192 tokens through a tiny random one-layer Llama (save_pretrained,
fp32, sdpa), with packed rows (several documents, positions restarting at 0, which transformers
reads as its packed-sequence mask) and the rope_scaling kinds shardtrain implements:
- default_packed, llama3_packed, linear_packed: documents of 600, 2400 and 5192 tokens (llama3's
  original_max_position_embeddings 1024, so the documents run past it, its three bands all in use);
- dynamic_beyond: one document of 8192 positions past max_position_embeddings 4096, where dynamic
  NTK grows the base from the longest position (the single-document case).
Written per case: model/ (config.json + model.safetensors), tokens, positions, logits (fp32), and
fp64_gap: the largest |logit| difference between transformers in fp32 and the same model run in fp64
with fp64 angles (from the same fp32 inv_freq): what fp32 itself costs at these positions.

Usage: rope_reference.py OUT_DIR
"""
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama
from transformers.modeling_rope_utils import dynamic_rope_update

T = 8192
PACKED = (600, 2400, 5192)
LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=1024)
CASES = {
    "default_packed": (dict(), PACKED),
    "llama3_packed": (dict(rope_theta=500000.0, rope_scaling=LLAMA3), PACKED),
    "linear_packed": (dict(rope_scaling=dict(rope_type="linear", factor=2.0)), PACKED),
    "dynamic_beyond": (dict(max_position_embeddings=4096, rope_scaling=dict(rope_type="dynamic", factor=2.0)), None),
}


@torch.no_grad()
@dynamic_rope_update
def fp64_rotary(self, x, position_ids):
    """LlamaRotaryEmbedding.forward with the angles and their cos/sin in fp64."""
    freqs = position_ids[..., None].double() * self.inv_freq.to(device=x.device, dtype=torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


def build(extra):
    torch.manual_seed(0)
    cfg = dict(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=1, num_attention_heads=2,
               num_key_value_heads=1, max_position_embeddings=T, rms_norm_eps=1e-5, rope_theta=10000.0,
               tie_word_embeddings=False, initializer_range=0.1, attn_implementation="sdpa")
    return LlamaForCausalLM(LlamaConfig(**{**cfg, **extra})).float().eval()


def positions_of(docs):
    if docs is None:
        return torch.arange(T)[None]
    assert sum(docs) == T
    return torch.cat([torch.arange(n) for n in docs])[None]


def main(out):
    torch.set_num_threads(1)  # the fixture runs beside other tests
    for i, (name, (extra, docs)) in enumerate(CASES.items()):
        d = os.path.join(out, name)
        model = build(extra)
        model.save_pretrained(os.path.join(d, "model"), safe_serialization=True)
        tokens = torch.randint(3, 96, (1, T), generator=torch.Generator().manual_seed(10 + i))
        positions = positions_of(docs)
        with torch.no_grad():
            logits = model(input_ids=tokens, position_ids=positions, use_cache=False).logits
            original = modeling_llama.LlamaRotaryEmbedding.forward
            modeling_llama.LlamaRotaryEmbedding.forward = fp64_rotary
            try:
                exact = model.double()(input_ids=tokens, position_ids=positions, use_cache=False).logits
            finally:
                modeling_llama.LlamaRotaryEmbedding.forward = original
        gap = (logits.double() - exact).abs().max()
        save_file({"tokens": tokens, "positions": positions, "logits": logits.contiguous(), "fp64_gap": gap.reshape(1)},
                  os.path.join(d, "reference.safetensors"))
        print(f"{name}: max position {positions.max().item()}, transformers fp32 vs fp64 {gap.item():.2e}")


if __name__ == "__main__":
    main(sys.argv[1])
