#!/usr/bin/env python3
"""Reference chat tokenizations from transformers' apply_chat_template, for `prepare --format chat`.

Builds the tokenizers offline: Llama-3- and Qwen2-shaped tokenizer.json ones (tokenizer_json_reference's
`train`, `make_llama3`, `make_qwen2`) and a Llama-2-style SentencePiece model (tokenizer_reference's
`train`) used twice, for Llama-2 and for Mistral. Each model directory gets a tokenizer_config.json
holding the family's chat_template as the Hub's model repositories have it:

  llama2   meta-llama/Llama-2-7b-chat-hf
  llama3   meta-llama/Meta-Llama-3-8B-Instruct (Llama-3.0: no "Cutting Knowledge Date" lines)
  mistral  mistralai/Mistral-7B-Instruct-v0.1 and v0.2 (the current one: system before the first user turn)
  chatml   Qwen/Qwen2-7B-Instruct (default system "You are a helpful assistant.")
  qwen3    Qwen/Qwen3-8B (reasoning in <think> blocks)
  gemma    google/gemma-3-1b-it (a Gemma-shaped SentencePiece: no "▁" prefix, the turn tokens as pieces)
  phi3     microsoft/Phi-3-mini-4k-instruct (Llama-2's SentencePiece, role tokens with rstrip, legacy false)
  phi4     microsoft/Phi-4-mini-instruct (an o200k-shaped tokenizer.json with its role tokens)
  tulu     allenai/OLMo-2-1124-7B-Instruct (a cl100k-shaped tokenizer.json; the role markers are plain text)

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
QWEN3_TEMPLATE = (  # Qwen/Qwen3-8B
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with "
    "function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and "
    "not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n"
    "{%- endfor %}\n{%- for message in messages %}\n    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n    {%- else %}\n        {%- set content = '' %}\n    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n            {%- endif %}\n        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + "
    "'\\n</think>\\n\\n' + content.lstrip('\\n') }}\n            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n            {%- endif %}\n        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n                    {{- '\\n' }}\n"
    "                {%- endif %}\n                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n            {%- endfor %}\n        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n        {{- content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n    {%- endif %}\n{%- endif %}")
GEMMA3_TEMPLATE = (  # google/gemma-3-1b-it
    "{{ bos_token }}\n{%- if messages[0]['role'] == 'system' -%}\n    {%- if messages[0]['content'] is string -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}\n    {%- else -%}\n"
    "        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}\n    {%- endif -%}\n"
    "    {%- set loop_messages = messages[1:] -%}\n{%- else -%}\n    {%- set first_user_prefix = \"\" -%}\n"
    "    {%- set loop_messages = messages -%}\n{%- endif -%}\n{%- for message in loop_messages -%}\n"
    "    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}\n"
    "        {{ raise_exception(\"Conversation roles must alternate user/assistant/user/assistant/...\") }}\n    {%- endif -%}\n"
    "    {%- if (message['role'] == 'assistant') -%}\n        {%- set role = \"model\" -%}\n    {%- else -%}\n"
    "        {%- set role = message['role'] -%}\n    {%- endif -%}\n"
    "    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else \"\") }}\n"
    "    {%- if message['content'] is string -%}\n        {{ message['content'] | trim }}\n"
    "    {%- elif message['content'] is iterable -%}\n        {%- for item in message['content'] -%}\n"
    "            {%- if item['type'] == 'image' -%}\n                {{ '<start_of_image>' }}\n"
    "            {%- elif item['type'] == 'text' -%}\n                {{ item['text'] | trim }}\n            {%- endif -%}\n"
    "        {%- endfor -%}\n    {%- else -%}\n        {{ raise_exception(\"Invalid content type\") }}\n    {%- endif -%}\n"
    "    {{ '<end_of_turn>\\n' }}\n{%- endfor -%}\n{%- if add_generation_prompt -%}\n    {{'<start_of_turn>model\\n'}}\n"
    "{%- endif -%}\n")
PHI3_TEMPLATE = (  # microsoft/Phi-3-mini-4k-instruct
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}")
PHI4_TEMPLATE = (  # microsoft/Phi-4-mini-instruct
    "{% for message in messages %}{% if message['role'] == 'system' and 'tools' in message and message['tools'] is not none %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|tool|>' + message['tools'] + '<|/tool|>' + '<|end|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% else %}{{ eos_token }}{% endif %}")
OLMO2_TEMPLATE = (  # allenai/OLMo-2-1124-7B-Instruct (Tülu 3's turns)
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}"
    "{{ '<|system|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'user' %}"
    "{{ '<|user|>\\n' + message['content'] + '\\n' }}{% elif message['role'] == 'assistant' %}{% if not loop.last %}"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token + '\\n' }}{% else %}"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}{% endif %}{% endif %}"
    "{% if loop.last and add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}{% endfor %}")
TEMPLATES = {"llama2": LLAMA2_TEMPLATE, "llama3": LLAMA3_TEMPLATE, "mistral": MISTRAL_TEMPLATE, "chatml": QWEN2_TEMPLATE,
             "qwen3": QWEN3_TEMPLATE, "gemma": GEMMA3_TEMPLATE, "phi3": PHI3_TEMPLATE,
             "phi4": PHI4_TEMPLATE, "tulu": OLMO2_TEMPLATE}
END_TOKEN = {"llama2": "</s>", "llama3": "<|eot_id|>", "mistral": "</s>", "chatml": "<|im_end|>", "qwen3": "<|im_end|>",
             "gemma": "<end_of_turn>", "phi3": "<|end|>", "phi4": "<|end|>",
             "tulu": "<|endoftext|>"}


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
        # Qwen3 keeps the reasoning of the turns after the last user turn only, and an empty block on the last
        ("thinking", [m(u, "What is 6 * 7?"), m(a, "<think>\nSix sevens.\n</think>\n\n42."), m(u, "Plus one?"),
                      m(a, "<think>\n42 + 1\n</think>\n\n43.")]),
        ("thinking_last_plain", [m(s, "Be brief."), m(u, "Hi"), m(a, "Hello!")]),
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
    made = {"llama3": tjr.make_llama3(out, base)}
    for family in ("chatml", "qwen3"):  # Qwen2-shaped tokenizer.json files
        os.rename(tjr.make_qwen2(out), os.path.join(out, family))
        made[family] = os.path.join(out, family)
    made["phi4"] = tjr.make_gpt2_class(out, "phi4", tjr.O200K_REGEX, tjr.PHI4_SPECIALS, {  # Phi-4-mini's shape
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>"})
    made["tulu"] = tjr.make_gpt2_class(out, "olmo2", tjr.LLAMA3_REGEX, ["<|endoftext|>", "<|pad|>"], {  # OLMo 2's
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>", "unk_token": "<|endoftext|>"})
    eos = {"llama3": "<|eot_id|>", "chatml": "<|im_end|>", "qwen3": "<|im_end|>", "phi4": "<|endoftext|>",
           "tulu": "<|endoftext|>"}
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


def added_entry(content, rstrip=False):
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": rstrip, "single_word": False, "special": True}


def sentencepiece_dirs(out):
    """Gemma 3's and Phi-3's directories as the Hub ships them: tokenizer.model beside the tokenizer.json transformers
    writes from it, and their tokenizer_config.json. Gemma's SentencePiece puts no "▁" before a text and holds its turn
    tokens as pieces; Phi-3's is Llama-2's with role tokens added after it that take the whitespace to their right
    (rstrip), read with legacy false (no "▁" after a special token)."""
    from transformers import AutoTokenizer, GemmaTokenizer, LlamaTokenizer
    from tokenizers import AddedToken
    made, hfs = {}, {}
    gemma = os.path.join(out, "gemma")
    os.makedirs(gemma)
    tr.train(os.path.join(gemma, "tokenizer.model"), add_dummy_prefix=False, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
             bos_piece="<bos>", eos_piece="<eos>", user_defined_symbols=["<mask>", "<start_of_turn>", "<end_of_turn>"])
    GemmaTokenizer.from_pretrained(gemma).save_pretrained(gemma)
    config = {"add_bos_token": True, "add_eos_token": False, "bos_token": "<bos>", "eos_token": "<eos>",
              "pad_token": "<pad>", "unk_token": "<unk>", "mask_token": "<mask>", "tokenizer_class": "GemmaTokenizer",
              "added_tokens_decoder": {str(i): added_entry(t) for i, t in enumerate(
                  ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"])},
              "chat_template": TEMPLATES["gemma"]}
    phi3 = os.path.join(out, "phi3")
    os.makedirs(phi3)
    tr.train(os.path.join(phi3, "tokenizer.model"))
    hf = LlamaTokenizer.from_pretrained(phi3, legacy=False)
    roles = ["<|assistant|>", "<|system|>", "<|end|>", "<|user|>"]
    hf.add_special_tokens({"additional_special_tokens": [AddedToken("<|endoftext|>", special=True, normalized=False)] +
                           [AddedToken(t, special=True, rstrip=True, normalized=False) for t in roles]})
    hf.save_pretrained(phi3)
    decoder = {"0": added_entry("<unk>"), "1": added_entry("<s>"), "2": added_entry("</s>")}
    for t in ["<|endoftext|>"] + roles:
        decoder[str(hf.convert_tokens_to_ids(t))] = added_entry(t, rstrip=t in roles)
    phi3_config = {"add_bos_token": False, "add_eos_token": False, "added_tokens_decoder": decoder, "bos_token": "<s>",
                   "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "legacy": False,
                   "model_max_length": 4096, "pad_token": "<|endoftext|>", "padding_side": "left", "sp_model_kwargs": {},
                   "tokenizer_class": "LlamaTokenizer", "unk_token": "<unk>", "use_default_system_prompt": False,
                   "chat_template": TEMPLATES["phi3"]}
    for family, d, cfg, model_type in (("gemma", gemma, config, "gemma3_text"), ("phi3", phi3, phi3_config, "phi3")):
        os.remove(os.path.join(d, "tokenizer_config.json"))
        for name, content in (("tokenizer_config.json", cfg), ("config.json", {"model_type": model_type})):
            with open(os.path.join(d, name), "w", encoding="utf-8") as f:
                json.dump(content, f, ensure_ascii=False, indent=2)
        made[family], hfs[family] = d, AutoTokenizer.from_pretrained(d)
        assert hfs[family].chat_template == TEMPLATES[family]
    return made, hfs


def main():
    out = os.path.abspath(sys.argv[1])
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "inputs"))
    dirs, hfs = llama_dirs(out)
    for more in (json_dirs(out), sentencepiece_dirs(out)):
        dirs.update(more[0])
        hfs.update(more[1])
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
        if family == "qwen3":  # generation prompts (a preference record's prompt), with and without thinking
            result["families"][family]["prompts"] = [
                {"messages": msgs[:-1], "enable_thinking": think,
                 "ids": list(hf.apply_chat_template(msgs[:-1], tokenize=True, add_generation_prompt=True,
                                                    enable_thinking=think, return_dict=False))}
                for name, msgs in convs if msgs[-1]["role"] == "assistant" for think in (True, False)]
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
            # Qwen3 renders a last assistant turn with its <think> block and earlier ones without: a dialogue cut
            # there renders otherwise, so only the turns that render alike are places to cut.
            # Phi-3's template closes a conversation with EOS: only the whole one ends there.
            if family in ("qwen3", "phi3", "phi4") and ids[:len(head)] != head:
                continue
            assert ids[:len(head)] == head, (family, i)
            ends.append(len(head))
    return ends


if __name__ == "__main__":
    main()
