#!/usr/bin/env python3
"""Golden files for the engine's tokenizer.json support and chat rendering (issue 15).

Trains four small byte-level BPE tokenizers with the `tokenizers` library on the corpus in
tokenizer_corpus.py, configured like GPT-2, Llama 3, Qwen 2/3 and SmolLM2 (their real
pre-tokenizer regexes, normalizers, post-processors and special tokens), writes each as a folder
(tokenizer.json + tokenizer_config.json with a chat template written here) and records, for the
golden texts, the ids that `tokenizers` and `transformers` give, the decoded text, and the
rendering, ids and assistant mask of `apply_chat_template` for hand-written conversations.

Run by hand in the reference venv (tests/reference/make-venv):
    ~/.cache/flotilla/ref-venv/bin/python tests/reference/make_tokenizer_goldens.py
Writes tests/engine/golden/tokenizers/{gpt2,llama3,qwen,smollm2}/ and golden.json.
"""

import json
import os
import sys

import tokenizers
import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers
from transformers import AutoTokenizer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_corpus as tc  # noqa: E402

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "engine", "golden", "tokenizers")

# Pre-tokenizer patterns: facts of the formats (GPT-2's is built into ByteLevel).
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Chat templates written for Flotilla's documented formats (docs/data.md "Chat formats"), with
# {% generation %} around the tokens the loss is taken on, so transformers reports the mask.
LLAMA3_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] | trim + '<|eot_id|>' -}}{%- endgeneration -%}"
    "{%- else -%}{{- message['content'] | trim + '<|eot_id|>' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"
)
CHATML_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- generation -%}{{- message['content'] + '<|im_end|>' -}}{%- endgeneration -%}"
    "{%- else -%}{{- message['content'] + '<|im_end|>' -}}{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
QWEN3_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for message in messages -%}{%- if message['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
    "{%- endif -%}{%- endfor -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'assistant' -%}"
    "{%- set content = message['content'] -%}{%- set reasoning = '' -%}"
    "{%- if message['reasoning_content'] is string -%}{%- set reasoning = message['reasoning_content'] -%}"
    "{%- elif '</think>' in content -%}"
    "{%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- generation -%}"
    "{%- if loop.index0 > ns.last_user and (loop.last or reasoning) -%}"
    "{{- '<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') -}}"
    "{%- else -%}{{- content -}}{%- endif -%}"
    "{{- '<|im_end|>' -}}"
    "{%- endgeneration -%}"
    "{{- '\\n' -}}"
    "{%- else -%}{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
TEMPLATES = {"llama3": LLAMA3_TEMPLATE, "chatml": CHATML_TEMPLATE, "qwen3": QWEN3_TEMPLATE}

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "The capital of France is Paris."}],
    [{"role": "system", "content": "You are a concise assistant."},
     {"role": "user", "content": "Name three primes."},
     {"role": "assistant", "content": "2, 3 and 5."},
     {"role": "user", "content": "And the next one?"},
     {"role": "assistant", "content": "7."}],
    [{"role": "user", "content": "  Padded question with spaces and a newline\n"},
     {"role": "assistant", "content": "\n\nAn answer that starts with blank lines.\n"}],
    [{"role": "user", "content": "Translate: 今天天气很好"},
     {"role": "assistant", "content": "The weather is nice today. 😀"}],
    [{"role": "user", "content": "Write code"},
     {"role": "assistant", "content": "def f(x):\n\treturn x * 2\r\n"}],
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\n4"}],
    [{"role": "user", "content": "First?"},
     {"role": "assistant", "content": "<think>old reasoning</think>One."},
     {"role": "user", "content": "Second?"},
     {"role": "assistant", "content": "Two.", "reasoning_content": "\nThink again.\n"}],
    [{"role": "system", "content": "Système: réponds en français."},
     {"role": "user", "content": "Cafe\u0301 ou the\u0301 ?"},
     {"role": "assistant", "content": "Un café, merci."}],
    [{"role": "user", "content": "Say <|im_end|> or <|eot_id|> literally"},
     {"role": "assistant", "content": "ok"}],
    [{"role": "user", "content": "Empty answer please"},
     {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "Two answers?"},
     {"role": "assistant", "content": "<think>\nfirst thoughts\n\n</think>\n\nOne."},
     {"role": "assistant", "content": "<think></think>Two."}],
]

PROMPT_COMPLETIONS = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    {"prompt": "Q: 2+2=\nA:", "completion": " 4\n"},
    {"prompt": "Translate to Russian: ship\n", "completion": "корабль"},
    {"prompt": "", "completion": "Only a completion."},
    {"prompt": "def add(a, b):\n", "completion": "    return a + b\n"},
]


def train(name, pre_tokenizer, vocab_size, normalizer=None, leading_specials=()):
    tok = Tokenizer(models.BPE())
    if normalizer is not None:
        tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[AddedToken(t, special=True, normalized=False)
                                                  for t in leading_specials])
    tok.train_from_iterator(tc.corpus(), trainer)
    print(f"{name}: trained {tok.get_vocab_size()} tokens", file=sys.stderr)
    return tok


def edit_json(tok, fn):
    data = json.loads(tok.to_str())
    fn(data)
    return Tokenizer.from_str(json.dumps(data, ensure_ascii=False))


def build():
    toks = {}

    # GPT-2 style: ByteLevel with its built-in regex; merges rewritten in the legacy "a b" form;
    # extra added tokens exercising lstrip, rstrip, single_word and non-special tokens.
    t = train("gpt2", pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), 700)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    t.add_special_tokens([AddedToken("<|mask|>", special=True, lstrip=True, normalized=False)])
    t.add_tokens([AddedToken("<|sep|>", special=False, rstrip=True, normalized=False),
                  AddedToken("[CODE]", special=False, single_word=True, normalized=True)])
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    toks["gpt2"] = (t, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
                        "eos_token": "<|endoftext|>", "add_bos_token": True})

    # Llama 3 style: Split with Llama 3's regex, ByteLevel without regex, ignore_merges, BOS template.
    t = train("llama3", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)]), 900)
    t = edit_json(t, add_unreachable_words)
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
                "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>"]
    t.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    toks["llama3"] = (t, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                          "eos_token": "<|eot_id|>", "chat_template": LLAMA3_TEMPLATE})

    # Qwen 2/3 style: NFC, Split with Qwen's regex (single digits), ChatML specials, <think> tags as
    # non-special added tokens, and one normalized added token (matched after NFC).
    t = train("qwen", pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)]), 800,
        normalizer=normalizers.NFC())
    t.add_special_tokens([AddedToken(s, special=True, normalized=False)
                          for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    t.add_tokens([AddedToken("<think>", special=False, normalized=False),
                  AddedToken("</think>", special=False, normalized=False),
                  AddedToken("Angstro\u0308m", special=False, normalized=True)])
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    toks["qwen"] = (t, {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|im_end|>",
                        "pad_token": "<|endoftext|>", "chat_template": QWEN3_TEMPLATE})

    # SmolLM2 style: individual digits, then ByteLevel with its regex; specials first (ids 0-2).
    t = train("smollm2", pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]), 600,
        leading_specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    toks["smollm2"] = (t, {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|im_start|>",
                           "eos_token": "<|im_end|>", "chat_template": CHATML_TEMPLATE})
    return toks


# Whole words added to the Llama-style vocabulary with no merges leading to them (as tiktoken-
# converted vocabularies have): only ignore_merges can produce them.
UNREACHABLE_WORDS = [" flotilla", " harbourmaster", " привет", "Splendid", " 😀😀", "\t\t\t"]


def add_unreachable_words(d):
    d["model"]["ignore_merges"] = True
    to_char = {b: c for c, b in decoders_byte_map().items()}
    assert not d["added_tokens"]
    next_id = 1 + max(d["model"]["vocab"].values())
    for w in UNREACHABLE_WORDS:
        d["model"]["vocab"]["".join(to_char[b] for b in w.encode("utf-8"))] = next_id
        next_id += 1


def ignore_merges_words(tok):
    """Vocabulary tokens that are one pre-token but that merging alone would split: ignore_merges
    decides them."""
    plain = edit_json(tok, lambda d: d["model"].__setitem__("ignore_merges", False))
    byte_map = decoders_byte_map()
    words = []
    for token, _ in sorted(tok.get_vocab().items(), key=lambda kv: kv[1]):
        if not all(c in byte_map for c in token):
            continue
        try:
            s = bytes(byte_map[c] for c in token).decode("utf-8")
        except UnicodeDecodeError:
            continue
        if "\n" in s or len(tok.pre_tokenizer.pre_tokenize_str(s)) != 1:
            continue
        if len(plain.encode(s, add_special_tokens=False).ids) > 1:
            words.append(s)
    return words


_BYTE_MAP = None


def decoders_byte_map():
    global _BYTE_MAP
    if _BYTE_MAP is None:
        bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
        cs = bs[:]
        n = 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        _BYTE_MAP = {chr(c): b for b, c in zip(bs, cs)}
    return _BYTE_MAP


def offsets_mask(enc, spans):
    """transformers' rule: a token is a target when its character range overlaps a target span."""
    mask = []
    for (s, e) in enc.offsets:
        mask.append(int(any(s < b and e > a for (a, b) in spans)))
    return mask


# Edits of the golden tokenizer.json files for options the four families leave at one value; the
# C++ test applies the same edit to the same file.
VARIANTS = [
    ("gpt2", "add_prefix_space", lambda d: d["pre_tokenizer"].__setitem__("add_prefix_space", True)),
    ("llama3", "merged_with_next", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__(
        "behavior", "MergedWithNext")),
    ("smollm2", "contiguous_digits", lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__(
        "individual_digits", False)),
]


def variants(texts):
    out = []
    subset = [i for i, (n, _) in enumerate(texts) if not n.startswith("repeat_")][:90]
    for base, edit, fn in VARIANTS:
        with open(os.path.join(OUT, base, "tokenizer.json"), encoding="utf-8") as f:
            data = json.load(f)
        fn(data)
        tok = Tokenizer.from_str(json.dumps(data, ensure_ascii=False))
        out.append({"tokenizer": base, "edit": edit, "texts": subset,
                    "ids": [tok.encode(texts[i][1], add_special_tokens=False).ids for i in subset]})
    return out


def regex_cases():
    """Pieces of the library's Split pre-tokenizer, for the regex dialect and the behaviours."""
    out = []
    for pattern, subjects in tc.REGEX_CASES:
        for behavior in ["isolated", "removed"]:
            split = pre_tokenizers.Split(Regex(pattern), behavior, invert=False)
            for subject in subjects:
                out.append({"pattern": pattern, "kind": "Regex", "behavior": behavior, "invert": False,
                            "subject": subject, "pieces": [p for p, _ in split.pre_tokenize_str(subject)]})
    names = {"removed": "Removed", "isolated": "Isolated", "merged_with_previous": "MergedWithPrevious",
             "merged_with_next": "MergedWithNext", "contiguous": "Contiguous"}
    for kind, pattern in [("String", "-"), ("Regex", "-+")]:
        for behavior in names:
            for invert in [False, True]:
                pat = Regex(pattern) if kind == "Regex" else pattern
                split = pre_tokenizers.Split(pat, behavior, invert=invert)
                for subject in tc.BEHAVIOR_SUBJECTS:
                    out.append({"pattern": pattern, "kind": kind, "behavior": names[behavior], "invert": invert,
                                "subject": subject, "pieces": [p for p, _ in split.pre_tokenize_str(subject)]})
    for r in out:
        r["behavior"] = names.get(r["behavior"], r["behavior"])
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    toks = build()
    texts = list(tc.GOLDEN)
    golden = {"generator": "tests/reference/make_tokenizer_goldens.py",
              "versions": {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__},
              "texts": [], "tokenizers": {}, "chat": [], "completions": []}
    llama_words = ignore_merges_words(toks["llama3"][0])
    texts.append(("ignore_merges_words", "\n".join(llama_words[:40])))
    texts += tc.fuzz_texts()
    golden["texts"] = [{"name": n, "text": s} for n, s in texts]

    for name, (tok, config) in toks.items():
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"), pretty=False)
        if name == "gpt2":  # the legacy merges form, "a b" strings (the library writes pairs now)
            with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
                data = json.load(f)
            data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
            with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False, separators=(",", ":"))
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({**config, "clean_up_tokenization_spaces": False, "model_max_length": 4096}, f,
                      ensure_ascii=False, indent=1)
        # Reload both ways from the written files: the goldens are what the files give.
        lib = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        hf = AutoTokenizer.from_pretrained(d)
        split = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        split.encode_special_tokens = True
        # ids for every text; model_ids (transformers' tokenizer(text)) and split_special_ids (special
        # tokens as text) only where they differ from ids, to keep the file small.
        entry = {"ids": [], "model_ids": {}, "split_special_ids": {}, "decoded": {}}
        for n, s in texts:
            ids = lib.encode(s, add_special_tokens=False).ids
            model_ids = hf(s)["input_ids"]
            assert hf(s, add_special_tokens=False)["input_ids"] == ids, (name, n)
            assert lib.encode(s).ids == model_ids, (name, n)
            entry["ids"].append(ids)
            if model_ids != ids:
                entry["model_ids"][n] = model_ids
            split_ids = split.encode(s, add_special_tokens=False).ids
            if split_ids != ids:
                entry["split_special_ids"][n] = split_ids
            back = lib.decode(ids, skip_special_tokens=False)
            if back != s:
                entry["decoded"][n] = back
        if name == "llama3":
            plain = edit_json(lib, lambda j: j["model"].__setitem__("ignore_merges", False))
            i = [n for n, _ in texts].index("ignore_merges_words")
            differ = plain.encode(texts[i][1], add_special_tokens=False).ids != entry["ids"][i]
            print(f"llama3: {len(llama_words)} ignore_merges words; encoding differs without it: {differ}",
                  file=sys.stderr)
            assert differ
        entry["vocab_size"] = lib.get_vocab_size()
        entry["bos"], entry["eos"], entry["pad"] = hf.bos_token_id, hf.eos_token_id, hf.pad_token_id
        golden["tokenizers"][name] = entry
        print(f"{name}: {lib.get_vocab_size()} ids, {sum(len(x) for x in entry['ids'])} golden tokens, "
              f"{len(entry['decoded'])} texts decode differently", file=sys.stderr)

        formats = {"llama3": ["llama3"], "qwen": ["chatml", "qwen3"], "smollm2": ["chatml"], "gpt2": []}[name]
        for fmt in formats:
            for ci, conv in enumerate(CONVERSATIONS):
                text = hf.apply_chat_template(conv, chat_template=TEMPLATES[fmt], tokenize=False)
                out = hf.apply_chat_template(conv, chat_template=TEMPLATES[fmt], tokenize=True, return_dict=True,
                                             return_assistant_tokens_mask=True)
                golden["chat"].append({"tokenizer": name, "format": fmt, "conversation": ci, "text": text,
                                       "ids": out["input_ids"], "targets": out["assistant_masks"]})
        # Prompt/completion ("plain"): tokenizer(prompt + completion) then EOS (unless already last);
        # the loss is on the tokens overlapping the completion, and on EOS.
        for pi, rec in enumerate(PROMPT_COMPLETIONS):
            full = rec["prompt"] + rec["completion"]
            enc = hf(full, return_offsets_mapping=True)
            mask = [int(e > len(rec["prompt"])) for (s, e) in enc["offset_mapping"]]
            specials = set(hf.all_special_ids)
            mask = [0 if i in specials and e == s else m for m, i, (s, e) in
                    zip(mask, enc["input_ids"], enc["offset_mapping"])]
            ids = enc["input_ids"]
            if not ids or ids[-1] != hf.eos_token_id:  # EOS last, once
                ids, mask = ids + [hf.eos_token_id], mask + [0]
            golden["completions"].append({"tokenizer": name, "record": pi, "ids": ids, "targets": mask[:-1] + [1]})
    golden["regex"] = regex_cases()
    golden["variants"] = variants(texts)
    golden["conversations"] = CONVERSATIONS
    golden["prompt_completions"] = PROMPT_COMPLETIONS
    path = os.path.join(OUT, "golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, separators=(",", ":"))
    print(f"wrote {path}: {len(texts)} texts, {len(golden['chat'])} chat renderings, "
          f"{os.path.getsize(path)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
