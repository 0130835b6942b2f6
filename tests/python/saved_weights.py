"""Every tensor of a directory's safetensors files (a save_pretrained or --save-model export, one file or
shards), by name."""
import os

from safetensors.torch import load_file


def saved_weights(export):
    out = {}
    for f in sorted(os.listdir(export)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(export, f)))
    return out
