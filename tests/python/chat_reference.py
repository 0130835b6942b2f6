#!/usr/bin/env python3
"""Reference chat tokenizations from transformers' apply_chat_template, for `prepare --format chat`.

Builds four tokenizers offline: Llama-3- and Qwen2-shaped tokenizer.json ones (tokenizer_json_reference's
`train`, `make_llama3`, `make_qwen2`) and a Llama-2-style SentencePiece model (tokenizer_reference's
`train`) used twice, for Llama-2 and for Mistral. Each model directory gets a tokenizer_config.json
holding the family's chat_template as the Hub's model repositories have it:

  llama2   meta-llama/Llama-2-7b-chat-hf
  llama3   meta-llama/Meta-Llama-3-8B-Instruct (Llama-3.0: no "Cutting Knowledge Date" lines)
  mistral  mistralai/Mistral-7B-Instruct-v0.1 and v0.2 (the current one: system before the first user turn)
  chatml   Qwen/Qwen2-7B-Instruct (default system "You are a helpful assistant.")

For conversations in both input layouts (messages; ShareGPT conversations) it writes the rendered
text, transformers' ids and the assistant mask. The mask is computed by rendering prefixes: an
assistant turn starts after the ids of the conversation before it rendered with
add_generation_prompt=True, and ends with the family's end-of-turn token (<|eot_id|>, <|im_end|>,
</s>). The SentencePiece families use transformers' LlamaTokenizer with legacy=True (Metaspace
prepend_scheme "always"), the way Llama-2's and Mistral v0.1's Hub tokenizers add "▁" after every
special token, as Meta's reference code (sentencepiece per turn) does.

Usage: chat_reference.py OUTDIR      (writes OUTDIR/chat_cases.json, OUTDIR/<family>/, OUTDIR/inputs/)
"""
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import tokenizer_json_reference as tjr  # noqa: E402
import tokenizer_reference as tr  # noqa: E402

# The chat_template strings of the models' tokenizer_config.json on the Hugging Face Hub.
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}"
    "{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
    "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
MISTRAL_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}\n"
    "        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}\n"
    "    {%- endif %}\n    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n        {%- else %}\n"
    "            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n    {%- else %}\n"
    "        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}\n"
    "    {%- endif %}\n{%- endfor %}\n")
QWEN2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
TEMPLATES = {"llama2": LLAMA2_TEMPLATE, "llama3": LLAMA3_TEMPLATE, "mistral": MISTRAL_TEMPLATE, "chatml": QWEN2_TEMPLATE}
END_TOKEN = {"llama2": "</s>", "llama3": "<|eot_id|>", "mistral": "</s>", "chatml": "<|im_end|>"}


def conversations():
    """(name, messages) in the role/content layout; some are written out in ShareGPT's layout."""
    u, a, s = "user", "assistant", "system"
    m = lambda role, content: {"role": role, "content": content}
    return [
        ("single", [m(u, "What is 2 + 3?"), m(a, "5.")]),
        ("single_system", [m(s, "You answer in one word."), m(u, "Capital of France?"), m(a, "Paris")]),
        ("multi_system", [m(s, "You are a careful calculator."), m(u, "Add 12 and 30."), m(a, "12 + 30 = 42."),
                          m(u, "Now double it."), m(a, "42 * 2 = 84."), m(u, "And halve that?"), m(a, "84 / 2 = 42.")]),
        ("multi", [m(u, "Sort 3 1 2."), m(a, "1 2 3"), m(u, "Reverse it."), m(a, "3 2 1")]),
        ("unicode", [m(u, "Grüße aus Köln! 日本語のテキスト 👍🏽 and naïve café?"), m(a, "Привет, мир! 中文 🚀 Ёлка ᚠᛇᚻ.")]),
        ("whitespace", [m(u, "\u3000 padded question \n\u00a0"), m(a, "answer with\ttabs and trailing space \u2003"),
                        m(u, "ok")]),  # Unicode spaces: llama2 and llama3 strip them as Python's str.strip()
        ("code", [m(s, "Write Python."), m(u, "Square x."), m(a, "def f(x):\n    return x ** 2\n\nprint(f(3))")]),
        ("trailing_user", [m(u, "Hello there"), m(a, "Hi! How can I help?"), m(u, "Tell me a joke.")]),
    ]


SHAREGPT_ROLE = {"system": "system", "user": "human", "assistant": "gpt"}
SHAREGPT = {"multi_system", "unicode", "trailing_user"}  # written as {"conversations": [{"from", "value"}]}


def record(name, msgs):
    if name in SHAREGPT:
        return {"id": name, "conversations": [{"from": SHAREGPT_ROLE[x["role"]], "value": x["content"]} for x in msgs]}
    return {"id": name, "messages": msgs}


def ids_of(hf, msgs, gen=False):
    out = hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=gen)
    if hasattr(out, "keys"):  # transformers may answer a BatchEncoding
        out = out["input_ids"]
    return list(out)


def expected_mask(family, hf, msgs, ids):
    end_id = hf.convert_tokens_to_ids(END_TOKEN[family])
    mask = [0] * len(ids)
    for i, msg in enumerate(msgs):
        if msg["role"] != "assistant":
            continue
        head = ids_of(hf, msgs[:i], gen=True)
        if ids[:len(head)] != head:
            sys.exit(f"{family}: the ids of the turns before assistant turn {i} are not a prefix of the whole")
        end = ids.index(end_id, len(head)) + 1
        for k in range(len(head), end):
            mask[k] = 1
    return mask


def llama_dirs(out):
    from transformers import LlamaTokenizer
    from transformers.tokenization_utils_base import generate_merges
    import sentencepiece as spm
    model = os.path.join(out, "spm.model")
    tr.train(model)
    sp = spm.SentencePieceProcessor(model_file=model)
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    dirs, hfs = {}, {}
    for family in ("llama2", "mistral"):
        d = os.path.join(out, family)
        os.makedirs(d, exist_ok=True)
        shutil.copy(model, os.path.join(d, "tokenizer.model"))
        config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<s>", "eos_token": "</s>",
                  "unk_token": "<unk>", "legacy": True, "tokenizer_class": "LlamaTokenizer",
                  "chat_template": TEMPLATES[family]}
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
        hf = LlamaTokenizer(vocab=vocab, merges=generate_merges(vocab), legacy=True, add_bos_token=True)
        hf.chat_template = TEMPLATES[family]
        dirs[family], hfs[family] = d, hf
    return dirs, hfs


def json_dirs(out):
    from transformers import AutoTokenizer
    base = tjr.train(tjr.LLAMA3_REGEX, nfc=False, ignore_merges=True, vocab=1500)
    made = {"llama3": tjr.make_llama3(out, base), "chatml": tjr.make_qwen2(out)}
    os.rename(made["chatml"], os.path.join(out, "chatml"))
    made["chatml"] = os.path.join(out, "chatml")
    eos = {"llama3": "<|eot_id|>", "chatml": "<|im_end|>"}  # the Instruct models' eos_token
    hfs = {}
    for family, d in made.items():
        path = os.path.join(d, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        config["chat_template"], config["eos_token"] = TEMPLATES[family], eos[family]
        with open(path, "w", encoding="utf-8") as f:
            json.dump(config, f, ensure_ascii=False, indent=2)
        hfs[family] = AutoTokenizer.from_pretrained(d)
        assert hfs[family].chat_template == TEMPLATES[family]
    return made, hfs


def main():
    out = os.path.abspath(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "inputs"))
    dirs, hfs = llama_dirs(out)
    d2, h2 = json_dirs(out)
    dirs.update(d2)
    hfs.update(h2)
    convs = conversations()
    jsonl = os.path.join(out, "inputs", "chat.jsonl")
    with open(jsonl, "w", encoding="utf-8") as f:
        for name, msgs in convs:
            f.write(json.dumps(record(name, msgs), ensure_ascii=False) + "\n")
    array = os.path.join(out, "inputs", "chat_array.json")
    with open(array, "w", encoding="utf-8") as f:
        json.dump([record(name, msgs) for name, msgs in convs], f, ensure_ascii=False, indent=2)
    result = {"jsonl": jsonl, "array": array, "families": {}}
    for family in TEMPLATES:
        hf, cases = hfs[family], []
        for name, msgs in convs:
            ids = ids_of(hf, msgs)
            text = hf.apply_chat_template(msgs, tokenize=False)
            if hf(text, add_special_tokens=False)["input_ids"] != ids:
                sys.exit(f"{family} {name}: apply_chat_template's ids are not its text's")
            cases.append({"name": name, "text": text, "ids": ids, "mask": expected_mask(family, hf, msgs, ids),
                          "turn_ends": turn_ends(family, hf, msgs, ids)})
        result["families"][family] = {"dir": dirs[family], "cases": cases}
        n = sum(len(c["ids"]) for c in cases)
        print(f"{family}: {len(cases)} conversations, {n} ids, {sum(sum(c['mask']) for c in cases)} in the loss")
    with open(os.path.join(out, "chat_cases.json"), "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False, indent=1)


def turn_ends(family, hf, msgs, ids):
    """Token counts after each assistant message's rendering: where a long dialogue may be cut."""
    ends = []
    for i, msg in enumerate(msgs):
        if msg["role"] == "assistant":
            head = ids_of(hf, msgs[:i + 1])
            assert ids[:len(head)] == head, (family, i)
            ends.append(len(head))
    return ends


if __name__ == "__main__":
    main()
