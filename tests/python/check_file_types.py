#!/usr/bin/env python3
"""Token files and checkpoints of the wrong dtype or shape, written with h5py as other tools write
them: each is refused before step 1 with exit 2 and one line naming the file, the dataset, its
dtype and shape and the expected ones; integer widths that fit and h5py's bool mask are accepted
and train as the int32 file does. Also the loss share: a file with no loss token is refused, one
under 1% warns once, a normal one does not.

Usage: check_file_types.py SHARDTRAIN MPIEXEC DEMO_TOKEN_FILE TMPDIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

BIN, MPIEXEC, DEMO, TMP = sys.argv[1:5]
TRAIN = ["train", "--model", "tiny", "--threads", "1", "--batch-size", "4", "--steps", "2"]
ROWS = 256


def run(args, ranks=1):
    # Under mpirun even at 1 rank where asked for 2: the agreement on the first failure is what is tested.
    cmd = ([MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", str(ranks)] if ranks > 1 else []) + [BIN] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout + r.stderr


def token_file(name, tokens=None, mask=None, extra=None, attrs=None):
    """The demo file's first ROWS rows as h5py writes them, with datasets or attributes replaced."""
    path = os.path.join(TMP, name + ".h5")
    with h5py.File(DEMO) as src, h5py.File(path, "w") as f:
        f["tokens"] = src["tokens"][:ROWS] if tokens is None else tokens
        f["loss_mask"] = src["loss_mask"][:ROWS] if mask is None else mask
        for k, v in (extra or {}).items():
            f[k] = v
        for k, v in src.attrs.items():
            f.attrs[k] = v
        f.attrs["rows"] = ROWS
        for k, v in (attrs or {}).items():
            f.attrs[k] = v
    return path


def expect_refused(args, needle, ranks=1):
    code, out = run(args, ranks)
    errors = [line for line in out.splitlines() if "shardtrain: error: " in line]
    if code != 2 or len(errors) != 1 or needle not in errors[0] or "HDF5-DIAG" in out or "step 1/" in out:
        sys.exit(f"{' '.join(args)} at {ranks} ranks: wanted exit 2 and one error line with {needle!r}, got exit {code}:\n{out}")
    print(f"exit 2 at {ranks} rank(s): {errors[0].strip()}")


def final_loss(args, metrics):
    if os.path.exists(metrics):
        os.remove(metrics)
    code, out = run(args + ["--metrics-file", metrics])
    if code != 0:
        sys.exit(f"{' '.join(args)}: exit {code}\n{out}")
    with open(metrics) as f:
        return [json.loads(line)["loss"] for line in f][-1], out


def main():
    shutil.rmtree(TMP, ignore_errors=True)
    os.makedirs(TMP)
    with h5py.File(DEMO) as src:
        toks, mask = src["tokens"][:ROWS], src["loss_mask"][:ROWS]
    shape = f"[{ROWS}, {toks.shape[1]}]"
    fix = "write it with 'shardtrain prepare'"

    # Token files: float tokens (numpy's default), a float mask, 1-D tokens, a mask of another
    # shape, float position ids, an attribute of the wrong type.
    t = token_file("float_tokens", tokens=toks.astype(np.float32))
    for ranks in (1, 2):
        expect_refused(TRAIN + ["--data", t], f"dataset /tokens of {t} is float32 {shape}, expected an integer type of "
                                              f"shape [rows, seq_len]; {fix}", ranks)
    t = token_file("float_mask", mask=mask.astype(np.float64))
    expect_refused(TRAIN + ["--data", t], f"dataset /loss_mask of {t} is float64 {shape}, expected an integer or bool "
                                          f"type of shape {shape} (that of /tokens)")
    t = token_file("flat_tokens", tokens=toks.reshape(-1))
    expect_refused(TRAIN + ["--data", t], f"dataset /tokens of {t} is int32 [{toks.size}], expected an integer type of "
                                          "shape [rows, seq_len]")
    t = token_file("short_mask", mask=mask[:, :-1])
    expect_refused(TRAIN + ["--data", t], f"dataset /loss_mask of {t} is uint8 [{ROWS}, {toks.shape[1] - 1}], expected "
                                          f"an integer or bool type of shape {shape} (that of /tokens)")
    t = token_file("float_positions", extra={"position_ids": np.zeros(toks.shape, np.float32)})
    expect_refused(TRAIN + ["--data", t], f"dataset /position_ids of {t} is float32 {shape}, expected an integer type")
    t = token_file("string_tokens", tokens=np.array([[b"a"] * toks.shape[1]] * ROWS))
    expect_refused(TRAIN + ["--data", t], f"dataset /tokens of {t} is string {shape}")
    t = token_file("float_attr", attrs={"seq_len": float(toks.shape[1])})
    expect_refused(TRAIN + ["--data", t], f"{t}: attribute seq_len is float64, expected an integer")
    # An int64 id past int32: reported as stored, not clamped or wrapped into the vocabulary.
    wide = toks.astype(np.int64)
    wide[7, 3] = 2**32 + 5
    t = token_file("wide_id", tokens=wide)
    expect_refused(TRAIN + ["--data", t], f"row 7 holds token id {2**32 + 5} at position 3")

    # Accepted: int64 tokens with h5py's bool mask (an HDF5 enum of int8) train exactly as the
    # int32/uint8 file does.
    base, base_out = final_loss(TRAIN + ["--data", token_file("int32", tokens=toks)], os.path.join(TMP, "int32.jsonl"))
    t = token_file("int64_bool", tokens=toks.astype(np.int64), mask=mask.astype(bool))
    with h5py.File(t) as f:
        assert f["loss_mask"].id.get_type().get_class() == h5py.h5t.ENUM, "h5py writes bool as an enum"
        assert f["tokens"].dtype == np.int64
    loss, _ = final_loss(TRAIN + ["--data", t], os.path.join(TMP, "int64_bool.jsonl"))
    if loss != base:
        sys.exit(f"int64 tokens, bool mask: loss {loss} != the int32 file's {base}")
    print(f"int64 tokens, bool mask: accepted, loss {loss} equal to the int32 file's")

    # The loss share, counted by the open-time scan: none refused, 0.5% warned once, the demo's 10% quiet.
    t = token_file("no_loss", mask=np.zeros_like(mask))
    for ranks in (1, 2):
        expect_refused(TRAIN + ["--data", t], f"--data {t} holds no token in the loss", ranks)
    few = np.zeros_like(mask).reshape(-1)
    few[::200] = 1  # 0.5% of the tokens, spread over both ranks' halves
    t = token_file("few_loss", mask=few.reshape(mask.shape))
    code, out = run(TRAIN + ["--data", t], 2)
    want = f"--data {t}: only 0.50% of its tokens ({int(few.sum())} of {few.size}) are in the loss"
    if code != 0 or out.count(want) != 1 or "--train-on all" not in out:
        sys.exit(f"0.5% loss tokens: wanted exit 0 and one warning {want!r}, got exit {code}:\n{out}")
    print("0.5% in the loss: " + next(line for line in out.splitlines() if want in line).strip())
    if "are in the loss" in base_out:
        sys.exit(f"the demo rows (10% in the loss) warned:\n{base_out}")

    # A checkpoint from a real run, one tensor rewritten as float64, then in another shape.
    ckdir = os.path.join(TMP, "ckpt")
    code, out = run(TRAIN[:-1] + ["1", "--data", DEMO, "--checkpoint-dir", ckdir])
    if code != 0:
        sys.exit(f"checkpoint run: exit {code}\n{out}")
    ck = os.path.join(ckdir, "step-00000001.h5")
    name = "/model/model.embed_tokens.weight"
    for label, rewrite, needle in [
            ("f64", lambda w: w.astype(np.float64), "is float64 [512, 64], expected float32 of shape [512, 64]"),
            ("shape", lambda w: w[:, :32], "is float32 [512, 32], expected float32 of shape [512, 64]")]:
        bad = os.path.join(TMP, f"ckpt_{label}.h5")
        shutil.copy(ck, bad)
        with h5py.File(bad, "a") as f:
            w, crc = f[name][:], f[name].attrs["crc32"]
            del f[name]
            f[name] = rewrite(w)
            f[name].attrs["crc32"] = crc
        expect_refused(TRAIN + ["--data", DEMO, "--resume", bad], f"dataset {name} of {bad} {needle}; the checkpoint was "
                                                                 "not written by shardtrain or is damaged", 2 if label == "f64" else 1)
    # A checksum attribute of the wrong type: named, not converted by HDF5.
    bad = os.path.join(TMP, "ckpt_crc.h5")
    shutil.copy(ck, bad)
    with h5py.File(bad, "a") as f:
        f[name].attrs["crc32"] = str(f[name].attrs["crc32"])
    expect_refused(TRAIN + ["--data", DEMO, "--resume", bad], f"{bad}: attribute crc32 is string, expected an integer")
    # A root attribute of the wrong type (a float step): the damaged file is named, exit 2.
    bad = os.path.join(TMP, "ckpt_step.h5")
    shutil.copy(ck, bad)
    with h5py.File(bad, "a") as f:
        f.attrs["step"] = float(f.attrs["step"])
    expect_refused(TRAIN + ["--data", DEMO, "--resume", bad], f"{bad}: attribute step of state \"train_step\" is not an integer; "
                                                             "the checkpoint is damaged")
    # inspect names the type of a tensor that is not float32 rather than failing its checksum only.
    shutil.copy(ck, bad)
    with h5py.File(bad, "a") as f:
        w = f[name][:]
        del f[name]
        f[name] = w.astype(np.float64)
    code, out = run(["inspect", bad])
    if code != 1 or "NOT float32 but float64" not in out:
        sys.exit(f"inspect of a float64 tensor: wanted exit 1 and 'NOT float32 but float64', got {code}:\n{out}")
    print("inspect: NOT float32 but float64")
    print("file types: OK")


main()
