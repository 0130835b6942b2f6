"""Rows of a shardtrain token file as transformers takes them: input_ids, labels (-100 outside the
loss) and, for packed files, position_ids, which make transformers attend within each packed
sample only (its packed-sequence mask; it needs use_cache=False), as shardtrain does."""
import numpy as np
import torch


def read(f, rows):
    """tokens, labels, positions (None for padded files) of `rows` (a slice or increasing indices) of the open h5py file f."""
    tokens = torch.from_numpy(f["tokens"][rows].astype(np.int64))
    mask = torch.from_numpy(f["loss_mask"][rows].astype(bool))
    positions = torch.from_numpy(f["position_ids"][rows].astype(np.int64)) if "position_ids" in f else None
    if positions is not None:  # as DataCollatorWithFlattening: a packed sample's first token is no target
        mask &= positions != 0
    return tokens, torch.where(mask, tokens, torch.full_like(tokens, -100)), positions


def forward(model, tokens, positions, **kwargs):
    """model's output on tokens at their positions."""
    return model(input_ids=tokens, position_ids=positions, use_cache=False, **kwargs)
