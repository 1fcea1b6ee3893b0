#!/usr/bin/env python3
"""Golden files for the evaluation tasks (engine/eval, tests/engine/test_eval_golden.cpp).

Writes tests/engine/golden/eval/:
  gpt2/ llama/ qwen3/  small random models (context 64) saved by transformers in fp32 with their
                    tokenizer's files beside the weights, so `eval --model DIR` finds it: a byte-level
                    BPE (384 ids) trained with `tokenizers` on resources/eval/, GPT-2 style (no BOS;
                    <|endoftext|> ends documents) for gpt2 and qwen3, the same merges with a Llama 3
                    style post-processor (<|begin_of_text|> first) for llama
  expected.json     what transformers computes on them:
    - multiple choice on resources/eval/arc-mini.jsonl, 0-shot and 2-shot from arc-mini-dev.jsonl:
      each choice's request exactly as lm-evaluation-harness builds it (HFLM._encode_pair and
      loglikelihood: trailing space moved into the continuation, the pair tokenized whole with
      tokenizer.encode's defaults, an empty context as BOS/EOS, cut from the left to max_length + 1),
      its summed log-probability (log_softmax in float64) and greedy flag; acc and acc_norm
      (argmax of ll / len(choice)) as lm-evaluation-harness's process_results computes them;
    - perplexity of resources/eval/wiki-mini.txt by transformers' documented sliding window
      (https://huggingface.co/docs/transformers/perplexity) at strides 32 and 13: its nll sum, the
      number of tokens scored and exp(mean); and the page's own figure (doc_perplexity), whose token
      count is one short for every window after the first (see perplexity());
    - generation: the first 8 questions of resources/eval/gsm-mini.jsonl as the generate task
      prompts them, and transformers' greedy generate() (16 tokens, stopping at the end tokens).
Random weights are drawn with a wide initializer so choices are far from ties (the script prints the
smallest relative gap between the best and second-best choice).

Run by hand in the reference venv (tests/reference/make-venv):
  python tests/reference/make_eval_goldens.py [--out DIR]
  python tests/reference/make_eval_goldens.py --lm-eval   # also compare acc/acc_norm with lm_eval itself
"""

import argparse
import json
import math
import os
import shutil
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (AutoModelForCausalLM, AutoTokenizer, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                          LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RES = os.path.join(REPO, "resources", "eval")
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "eval")
VOCAB, CTX = 384, 64
STRIDES = (32, 13)
FEWSHOT = 2


def train_tokenizers(out):
    files = [os.path.join(RES, f) for f in ("arc-mini.jsonl", "arc-mini-dev.jsonl", "gsm-mini.jsonl", "wiki-mini.txt")]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB - 3, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[], show_progress=False)
    tok.train(files, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|begin_of_text|>", "<|end_of_text|>"])
    assert tok.get_vocab_size() == VOCAB, tok.get_vocab_size()
    dirs = {}
    for style in ("gpt2", "llama"):
        d = os.path.join(out, "tokenizer-" + style)
        os.makedirs(d, exist_ok=True)
        t = Tokenizer.from_str(tok.to_str())
        if style == "llama":
            bos = t.token_to_id("<|begin_of_text|>")
            t.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                             special_tokens=[("<|begin_of_text|>", bos)])
            config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
                      "eos_token": "<|end_of_text|>", "model_max_length": CTX}
        else:
            t.post_processor = processors.ByteLevel(trim_offsets=False)
            config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>",
                      "eos_token": "<|endoftext|>", "model_max_length": CTX}
        t.save(os.path.join(d, "tokenizer.json"))
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(config, f, indent=1)
        dirs[style] = d
    return dirs


def make_models(out, tok_dirs):
    common = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=CTX, hidden_act="silu", initializer_range=0.3)
    specs = {
        "gpt2": (GPT2LMHeadModel, GPT2Config(vocab_size=VOCAB, n_positions=CTX, n_embd=32, n_layer=2, n_head=4,
                                             bos_token_id=VOCAB - 3, eos_token_id=VOCAB - 3, initializer_range=0.3),
                 "gpt2", 11),
        "llama": (LlamaForCausalLM, LlamaConfig(**common, head_dim=8, rms_norm_eps=1e-5, tie_word_embeddings=False,
                                                bos_token_id=VOCAB - 2, eos_token_id=VOCAB - 1), "llama", 12),
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(**common, head_dim=16, rms_norm_eps=1e-6, tie_word_embeddings=True,
                                                bos_token_id=None, eos_token_id=VOCAB - 3), "gpt2", 13),
    }
    dirs = {}
    for name, (cls, cfg, tok_style, seed) in specs.items():
        torch.manual_seed(seed)
        m = cls(cfg).eval()
        d = os.path.join(out, name)
        if os.path.isdir(d):
            shutil.rmtree(d)
        m.save_pretrained(d, safe_serialization=True)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok_dirs[tok_style], f), os.path.join(d, f))
        for f in ("generation_config.json",):
            if os.path.exists(os.path.join(d, f)):
                os.remove(os.path.join(d, f))
        dirs[name] = d
    return dirs


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# lm-evaluation-harness, lm_eval/models/huggingface.py and lm_eval/api/model.py, with HFLM's defaults.
def encode_pair(tok, context, continuation):
    if context == "":
        cont = tok.encode(continuation, add_special_tokens=False)
        prefix = tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id
        return ([prefix], cont) if prefix != cont[0] else (cont[:1], cont[1:])
    n_spaces = len(context) - len(context.rstrip())
    if n_spaces > 0:
        continuation = context[-n_spaces:] + continuation
        context = context[:-n_spaces]
    whole = tok.encode(context + continuation)
    ctx = tok.encode(context)
    return ctx, whole[len(ctx):]


def loglikelihood(model, ctx, cont, max_length):
    ids = (ctx + cont)[-(max_length + 1):]
    inp = torch.tensor([ids[:-1]])
    with torch.no_grad():
        logits = model(inp).logits[0].double()
    logp = F.log_softmax(logits, dim=-1)
    n = len(cont)
    sel = logp[-n:]
    target = torch.tensor(ids[-n:])
    ll = sel.gather(1, target[:, None]).sum().item()
    greedy = bool((sel.argmax(dim=-1) == target).all())
    return ids, len(ids) - n, ll, greedy


def multiple_choice(model, tok, fewshot):
    docs = read_jsonl(os.path.join(RES, "arc-mini.jsonl"))
    prefix = ""
    if fewshot:
        dev = read_jsonl(os.path.join(RES, "arc-mini-dev.jsonl"))[:fewshot]
        prefix = "".join(d["context"] + " " + d["choices"][d["answer"]] + "\n\n" for d in dev)
    out, accs, norms, gaps = [], [], [], []
    for doc in docs:
        rows = []
        for choice in doc["choices"]:
            ctx, cont = encode_pair(tok, prefix + doc["context"], " " + choice)
            ids, first, ll, greedy = loglikelihood(model, ctx, cont, CTX)
            rows.append({"ids": ids, "first": first, "ll": ll, "greedy": greedy})
        lls = np.array([r["ll"] for r in rows])
        completion_len = np.array([float(len(c)) for c in doc["choices"]])
        pred, pred_norm = int(np.argmax(lls)), int(np.argmax(lls / completion_len))
        accs.append(1.0 if pred == doc["answer"] else 0.0)
        norms.append(1.0 if pred_norm == doc["answer"] else 0.0)
        for v in (lls, lls / completion_len):
            s = np.sort(v)[::-1]
            gaps.append((s[0] - s[1]) / abs(s[0]))
        out.append(rows)

    def stderr(a):
        mu = sum(a) / len(a)
        return math.sqrt(sum((x - mu) ** 2 for x in a) / (len(a) - 1)) / math.sqrt(len(a))

    return {"choices": out, "acc": sum(accs) / len(accs), "acc_norm": sum(norms) / len(norms),
            "acc_stderr": stderr(accs), "acc_norm_stderr": stderr(norms), "n": len(accs)}, min(gaps)


# transformers' documented sliding-window perplexity, line for line.
def perplexity(model, tok, stride):
    with open(os.path.join(RES, "wiki-mini.txt"), encoding="utf-8") as f:
        text = f.read()
    encodings = tok(text, return_tensors="pt")
    max_length = CTX
    seq_len = encodings.input_ids.size(1)
    nll_sum, n_tokens, prev_end_loc, windows = 0.0, 0, 0, 0
    doc_nll_sum, doc_tokens = 0.0, 0
    for begin_loc in range(0, seq_len, stride):
        end_loc = min(begin_loc + max_length, seq_len)
        trg_len = end_loc - prev_end_loc
        input_ids = encodings.input_ids[:, begin_loc:end_loc]
        target_ids = input_ids.clone()
        target_ids[:, :-trg_len] = -100
        with torch.no_grad():
            outputs = model(input_ids, labels=target_ids)
            neg_log_likelihood = outputs.loss
        num_valid_tokens = (target_ids != -100).sum().item()
        batch_size = target_ids.size(0)
        num_loss_tokens = num_valid_tokens - batch_size  # the page's count (see below)
        doc_nll_sum += neg_log_likelihood.double().item() * num_loss_tokens
        doc_tokens += num_loss_tokens
        # The tokens outputs.loss averages over: the labels after the model's shift. The page's
        # count subtracts the shift from every window, but only the first loses a token to it (a
        # later window's first target has the window's earlier tokens before it), so its avg_nll
        # weighs each later window by one token less than it scored. Kept as "doc_perplexity".
        scored = (target_ids[:, 1:] != -100).sum().item()
        nll_sum += neg_log_likelihood.double().item() * scored
        n_tokens += scored
        windows += 1
        prev_end_loc = end_loc
        if end_loc == seq_len:
            break
    return {"nll_sum": nll_sum, "tokens": n_tokens, "windows": windows, "perplexity": math.exp(nll_sum / n_tokens),
            "text_tokens": seq_len, "doc_perplexity": math.exp(doc_nll_sum / doc_tokens)}


# Generation: the task's prompt ("Question: ...\nAnswer:" as tokenizer(text), cut from the left to
# leave room for the answer as engine/eval does: its last max(CTX / 2, CTX - GEN_TOKENS) tokens) and
# transformers' greedy continuation, ending at the end tokens the engine stops at (EOS, end of text).
GEN_TOKENS, GEN_QUESTIONS = 16, 8


def generations(model, tok, stop_ids):
    docs = read_jsonl(os.path.join(RES, "gsm-mini.jsonl"))[:GEN_QUESTIONS]
    keep = max(CTX // 2, CTX - GEN_TOKENS)
    out = []
    for d in docs:
        prompt = tok("Question: " + d["question"] + "\nAnswer:")["input_ids"][-keep:]
        with torch.no_grad():
            g = model.generate(torch.tensor([prompt]), do_sample=False, max_new_tokens=GEN_TOKENS,
                               eos_token_id=stop_ids, pad_token_id=stop_ids[0])
        out.append({"prompt": prompt, "output": g[0, len(prompt):].tolist()})
    return out


def run_lm_eval(model_dir, fewshot, max_length=CTX):
    """acc / acc_norm from lm_eval itself, on a task YAML pointing at the local files."""
    import lm_eval
    from lm_eval.tasks import TaskManager
    d = tempfile.mkdtemp()
    with open(os.path.join(d, "arc_mini.yaml"), "w") as f:
        f.write("task: arc_mini\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
                f"    test: {os.path.join(RES, 'arc-mini.jsonl')}\n    validation: {os.path.join(RES, 'arc-mini-dev.jsonl')}\n"
                "test_split: test\nfewshot_split: validation\nfewshot_config:\n  sampler: first_n\n"
                "output_type: multiple_choice\ndoc_to_text: \"{{context}}\"\ndoc_to_choice: \"{{choices}}\"\n"
                "doc_to_target: answer\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n")
    res = lm_eval.simple_evaluate(model="hf", model_args=f"pretrained={model_dir},dtype=float32,max_length={max_length}",
                                  tasks=["arc_mini"], num_fewshot=fewshot, batch_size=1, device="cpu",
                                  task_manager=TaskManager(include_path=d))
    r = res["results"]["arc_mini"]
    return {k.split(",")[0]: v for k, v in r.items() if k.split(",")[0] in ("acc", "acc_norm", "acc_stderr", "acc_norm_stderr")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--lm-eval", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    tok_dirs = train_tokenizers(tempfile.mkdtemp())
    model_dirs = make_models(a.out, tok_dirs)
    expected = {"ctx": CTX, "fewshot": FEWSHOT, "strides": list(STRIDES), "gen_tokens": GEN_TOKENS, "models": {}}
    for name, d in model_dirs.items():
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        tok = AutoTokenizer.from_pretrained(d)
        e = {}
        for shots in (0, FEWSHOT):
            e[f"mc_{shots}shot"], gap = multiple_choice(model, tok, shots)
            print(f"{name} {shots}-shot: acc {e[f'mc_{shots}shot']['acc']:.3f} acc_norm "
                  f"{e[f'mc_{shots}shot']['acc_norm']:.3f}, smallest relative gap to a tie {gap:.2e}")
            if a.lm_eval:
                ref = run_lm_eval(d, shots)
                mine = {k: e[f"mc_{shots}shot"][k] for k in ref}
                print(f"  lm_eval: {ref}\n  here:    {mine}")
                assert all(abs(ref[k] - mine[k]) < 1e-12 for k in ref), "lm_eval disagrees"
        stop_ids = [tok.convert_tokens_to_ids(t) for t in ("<|end_of_text|>", "<|endoftext|>")
                    if name == "llama" or t == "<|endoftext|>"]
        e["gen"] = generations(model, tok, stop_ids)
        e["gen_stop_ids"] = stop_ids
        for s in STRIDES:
            e[f"ppl_{s}"] = perplexity(model, tok, s)
            print(f"{name} stride {s}: perplexity {e[f'ppl_{s}']['perplexity']:.4f} over {e[f'ppl_{s}']['tokens']} tokens")
        expected["models"][name] = e
    with open(os.path.join(a.out, "expected.json"), "w") as f:
        json.dump(expected, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    sys.exit(main())
