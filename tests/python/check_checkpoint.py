#!/usr/bin/env python3
"""Reads a shardtrain checkpoint with h5py, as any tool would, and checks it against the model
the same run exported as safetensors, and each dataset's crc32 attribute against zlib.

Usage: check_checkpoint.py CHECKPOINT.h5 SAFETENSORS_DIR
"""
import json
import sys
import zlib

import h5py
import numpy as np
from safetensors.numpy import load_file


def main(ckpt, model_dir):
    exported = load_file(f"{model_dir}/model.safetensors")
    with h5py.File(ckpt, "r") as f:
        assert f.attrs["format_version"] == 1
        assert json.loads(f.attrs["model_config"])["num_hidden_layers"] >= 1
        names = list(f["model"].keys())
        assert sorted(names) == sorted(exported.keys()), (len(names), len(exported))
        for group in ("model", "exp_avg", "exp_avg_sq"):
            for name in names:
                d = f[group][name]
                data = d[...]
                assert data.dtype == np.float32, (group, name, data.dtype)
                want = zlib.crc32(np.ascontiguousarray(data, dtype="<f4").tobytes())
                assert int(d.attrs["crc32"]) == want, f"{group}/{name}: crc32 {d.attrs['crc32']} != zlib {want}"
                if group == "model":
                    assert np.array_equal(data, exported[name]), f"{name} differs from the exported safetensors"
        print(f"{ckpt}: {len(names)} tensors x 3 groups match the safetensors export and zlib's crc32; "
              f"step {f.attrs['step']}, world size {f.attrs['world_size']}, {f.attrs['sharding']}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
