#!/usr/bin/env python3
"""`prepare --format chat` against chat_reference.py's transformers references:

- every family (llama2, llama3, mistral, chatml, qwen3, gemma, phi3, phi4, tulu), from JSONL and from a JSON array, with the template
  named and with --chat-template auto: h5py reads back rows whose ids equal apply_chat_template's and
  whose loss mask is the assistant turns (content and end-of-turn token); --format auto picks chat;
- --train-on all puts every token in the loss;
- a dialogue longer than --seq-len is cut after its last assistant turn that fits (counted, with the
  turns dropped), or truncated when not even the first fits;
- auto refuses templates it does not implement, a missing chat_template, and unknown ones (exit 2);
  a template token the tokenizer lacks exits 2;
- bad records exit 2 naming the file and line: roles out of order, empty messages, an unknown role,
  a content that is not a string; a record with no assistant turn is skipped and counted.

Usage: check_chat_prepare.py SHARDTRAIN REFDIR TMPDIR
"""
import json
import os
import shutil
import subprocess
import sys

import h5py
import numpy as np

SEQ = 320


def run(cmd, expect=0):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != expect:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}, expected {expect}\n{r.stdout}\n{r.stderr}")
    return r


def prepare(binary, tok, inp, out, *extra, expect=0):
    return run([binary, "prepare", "--tokenizer", tok, "--input", inp, "--output", out, "--mode", "padding", *extra],
               expect=expect)


def rows(path):
    with h5py.File(path, "r") as f:
        return f["tokens"][:], f["loss_mask"][:]


def check_rows(path, cases, all_loss=False, label=""):
    tokens, mask = rows(path)
    assert tokens.shape[0] == len(cases), (label, tokens.shape, len(cases))
    with h5py.File(path, "r") as f:  # the rows' real tokens: a last EOS equal to the pad id counts
        real = int(f.attrs["tokens"])
    assert real == sum(len(c["ids"]) for c in cases), (label, real, sum(len(c["ids"]) for c in cases))
    for t, m, c in zip(tokens, mask, cases):
        n = len(c["ids"])
        want_mask = [1] * n if all_loss else list(c["mask"])
        want_mask[0] = 0  # a sample's first token is no target: nothing of its own comes before it
        assert t[:n].tolist() == c["ids"], f"{label} {c['name']}: ids\n got  {t[:n].tolist()}\n want {c['ids']}"
        assert m[:n].tolist() == want_mask, f"{label} {c['name']}: mask\n got  {m[:n].tolist()}\n want {want_mask}"
        assert not m[n:].any(), f"{label} {c['name']}: padding in the loss"


def write_jsonl(path, records):
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n")
    return path


def with_template(src, dst, template):
    """A copy of a model directory whose tokenizer_config.json has another chat_template (None: none)."""
    shutil.copytree(src, dst)
    path = os.path.join(dst, "tokenizer_config.json")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    config.pop("chat_template", None)
    if template is not None:
        config["chat_template"] = template
    with open(path, "w", encoding="utf-8") as f:
        json.dump(config, f)
    return dst


def main(binary, ref, tmp):
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with open(os.path.join(ref, "chat_cases.json"), encoding="utf-8") as f:
        cases = json.load(f)
    fams = cases["families"]

    # One launch reads both layouts (--input and --val-input take the same reader); the other swaps them.
    for family, v in fams.items():
        for tmpl, fmt, first, second in ((family, "chat", "jsonl", "array"), ("auto", "auto", "array", "jsonl")):
            out = os.path.join(tmp, f"{family}_{first}_{tmpl}.h5")
            r = prepare(binary, v["dir"], cases[first], out, "--val-input", cases[second], "--seq-len", str(SEQ),
                        "--format", fmt, "--chat-template", tmpl)
            head = r.stdout.splitlines()[0]
            assert head.startswith("format chat") and f"chat template {family}" in head, r.stdout
            assert (fmt == "auto") == ("detected from the first record" in head), head
            check_rows(out, v["cases"], label=f"{family} {first} {tmpl}")
            check_rows(out[:-3] + ".val.h5", v["cases"], label=f"{family} {second} (validation) {tmpl}")
        print(f"{family}: {len(v['cases'])} conversations equal transformers' ids and assistant masks "
              "(JSONL and JSON array, named and auto)")

    # The loss mask's --train-on all branch is the same for every family: one SentencePiece and one tokenizer.json.
    for family in ("llama2", "chatml"):
        v = fams[family]
        out = os.path.join(tmp, f"{family}_all.h5")
        r = prepare(binary, v["dir"], cases["jsonl"], out, "--seq-len", str(SEQ), "--format", "chat", "--train-on", "all")
        assert "loss on every token" in r.stdout, r.stdout
        check_rows(out, v["cases"], all_loss=True, label=f"{family} --train-on all")
    print("--train-on all: every token of every conversation in the loss")

    # Cut at a turn boundary: multi_system has three assistant turns.
    one = write_jsonl(os.path.join(tmp, "multi.jsonl"),
                      [json.loads(l) for l in open(cases["jsonl"], encoding="utf-8") if '"multi_system"' in l])
    for family, v in fams.items():
        if family in ("qwen3", "phi3", "phi4"):
            continue  # no place to cut but the end: Qwen3's earlier turns lose their <think>, Phi-3/4 end with EOS
        c = next(c for c in v["cases"] if c["name"] == "multi_system")
        ends = c["turn_ends"]
        assert len(ends) == 3 and ends[-1] == len(c["ids"]) or family in ("chatml", "gemma"), (family, ends, len(c["ids"]))
        seq = ends[1] + 1  # the first two turns fit, the third does not
        out = os.path.join(tmp, f"{family}_cut.h5")
        r = prepare(binary, v["dir"], one, out, "--seq-len", str(seq), "--format", "chat")
        assert "dialogues cut at a turn boundary: 1 (1 assistant turn dropped)" in r.stdout, r.stdout
        assert f"truncated to {seq}: 0" in r.stdout, r.stdout
        t, m = rows(out)
        k = ends[1]
        assert t[0, :k].tolist() == c["ids"][:k] and m[0, :k].tolist() == c["mask"][:k] and not m[0, k:].any(), family
        if family not in ("llama2", "chatml"):
            continue  # the fallback to plain truncation is the same for every family: one of each tokenizer kind
        seq = ends[0] - 1  # not even the first turn fits: truncated as any sample
        r = prepare(binary, v["dir"], one, out, "--seq-len", str(seq), "--format", "chat")
        assert f"truncated to {seq}: 1" in r.stdout and "cut at a turn boundary: 0" in r.stdout, r.stdout
        t, m = rows(out)
        assert t[0].tolist() == c["ids"][:seq] and m[0].tolist() == c["mask"][:seq], family
    print("longer than --seq-len: cut after the last assistant turn that fits and counted, else truncated")

    # --chat-template auto refuses what it cannot render as the model does.
    llama3 = fams["llama3"]["dir"]
    refusals = {
        "llama31": ("{{ bos_token }}<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023<|eot_id|>",
                    "Cutting Knowledge Date"),
        "qwen25": ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>", "Qwen2.5"),
        "unknown": ("{% for m in messages %}{{ m['content'] }}{% endfor %}", "not one of"),
        "none": (None, "has no chat_template"),
    }
    for name, (template, why) in refusals.items():
        d = with_template(llama3, os.path.join(tmp, "tok_" + name), template)
        r = prepare(binary, d, cases["jsonl"], os.path.join(tmp, "x.h5"), "--format", "chat", expect=2)
        assert why in r.stderr and "--chat-template" in r.stderr and "tokenizer_config.json" in r.stderr, r.stderr
        assert not os.path.exists(os.path.join(tmp, "x.h5"))
    d = os.path.join(tmp, "tok_none")
    out = os.path.join(tmp, "named.h5")
    prepare(binary, d, cases["jsonl"], out, "--seq-len", str(SEQ), "--format", "chat", "--chat-template", "llama3")
    check_rows(out, fams["llama3"]["cases"], label="llama3 named, no chat_template")
    r = prepare(binary, fams["llama2"]["dir"], cases["jsonl"], os.path.join(tmp, "x.h5"), "--format", "chat",
                "--chat-template", "llama3", expect=2)
    assert "<|start_header_id|>" in r.stderr and "is not one token" in r.stderr, r.stderr
    r = prepare(binary, llama3, cases["jsonl"], os.path.join(tmp, "x.h5"), "--chat-template", "vicuna", expect=2)
    assert "--chat-template must be" in r.stderr, r.stderr
    print("auto refuses Llama-3.1's, Qwen2.5's, unknown and missing templates; a foreign template token exits 2")

    # Bad records: exit 2 naming the file and the line, with or without --strict.
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    U = lambda c: {"role": "user", "content": c}
    A = lambda c: {"role": "assistant", "content": c}
    S = lambda c: {"role": "system", "content": c}
    bad = {
        "two users": ({"messages": [U("a"), U("b"), A("c")]}, "roles out of order", "message 2 is user after user"),
        "assistant first": ({"messages": [A("a"), U("b")]}, "roles out of order", "message 1 is assistant first"),
        "system late": ({"messages": [U("a"), S("b"), A("c")]}, "roles out of order", "message 2 is system after user"),
        "empty": ({"messages": []}, "empty messages", '"messages" is []'),
        "unknown role": ({"messages": [U("a"), {"role": "bot", "content": "b"}]}, "unknown role", 'role "bot"'),
        "sharegpt role": ({"conversations": [{"from": "human", "value": "a"}, {"from": "model", "value": "b"}]},
                          "unknown role", 'from "model"'),
        "null content": ({"messages": [U("a"), {"role": "assistant", "content": None}]}, "content not a string",
                         "message 2's \"content\" is null"),
        "list content": ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]}, A("b")]},
                         "content not a string", "is array"),
    }
    for i, (name, (rec, reason, detail)) in enumerate(bad.items()):
        f = write_jsonl(os.path.join(tmp, "bad.jsonl"), [good, "", rec, good])
        extra = ["--strict"] if i % 2 else []  # every other kind with --strict: both modes, 4 kinds each
        r = prepare(binary, llama3, f, os.path.join(tmp, "x.h5"), *extra, expect=2)
        want = f"{f}:3: {reason}"
        assert want in r.stderr and detail in r.stderr, (name, want, detail, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not os.path.exists(os.path.join(tmp, "x.h5"))
    arr = os.path.join(tmp, "bad.json")
    with open(arr, "w", encoding="utf-8") as fh:
        json.dump([good, bad["two users"][0]], fh, indent=2)
    r = prepare(binary, llama3, arr, os.path.join(tmp, "x.h5"), expect=2)
    assert f"{arr}:" in r.stderr and "roles out of order" in r.stderr, r.stderr
    line = int(r.stderr.split(f"{arr}:")[1].split(":")[0])
    assert open(arr).read().splitlines()[line - 1].strip() == "{", (line, r.stderr)
    f = write_jsonl(os.path.join(tmp, "noanswer.jsonl"), [good, {"messages": [S("s"), U("u")]}, {"messages": [U("u")]}, good])
    r = prepare(binary, llama3, f, os.path.join(tmp, "x.h5"), "--format", "chat")
    assert "read 4 | skipped 2 (no assistant turn 2)" in r.stdout and f"{f}:2: no assistant turn" in r.stdout, r.stdout
    r = prepare(binary, llama3, f, os.path.join(tmp, "y.h5"), "--format", "chat", "--strict", expect=2)
    assert f"{f}:2: no assistant turn" in r.stderr, r.stderr
    print(f"{len(bad)} kinds of bad record exit 2 naming file:line (JSONL and JSON array); "
          "records with no assistant turn are skipped and counted")


if __name__ == "__main__":
    main(*sys.argv[1:4])
