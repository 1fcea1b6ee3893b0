#!/usr/bin/env python3
"""Greedy-generation goldens from transformers' generate() for the engine's KV-cache tests.

Reads the small random models in tests/engine/golden/hf/{llama,qwen2,qwen3} (make_model_goldens.py
writes them; this script never does) and writes tests/engine/golden/generate/goldens.json: for each
model, fixed prompt ids and the ids transformers' `generate` continues them with, greedy
(do_sample=False), once with the KV cache (use_cache=True) and once without (use_cache=False) -- the
script checks both agree before writing -- and once more greedy with repetition_penalty (the rule
infer::choose_token implements). End-of-text never stops a row (eos_token_id=None), so every row
has max_new_tokens ids. Each prompt is generated alone (batch 1: no padding question on
transformers' side; the engine's test batches them, which must not change a row).

The non-obvious decision: the models are loaded in fp32 from the *saved* folders, as the engine
reads them, and for each greedy step the script records the margin between the chosen logit and
the runner-up; a golden is only as robust as its smallest margin against fp32 rounding differences,
so the script prints it (and refuses a prompt whose margin falls under 1e-4).

Run by hand in the reference venv (tests/reference/make-venv):
  python tests/reference/make_generate_goldens.py [--out FILE]
"""

import argparse
import json
import os

import torch
import transformers
from transformers import AutoModelForCausalLM

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HF = os.path.join(REPO, "tests", "engine", "golden", "hf")
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "generate", "goldens.json")

MODELS = ("llama", "qwen2", "qwen3")
MAX_NEW = 24
REPETITION_PENALTY = 1.3
MIN_MARGIN = 1e-4


def prompts_for(vocab, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, vocab, (n,), generator=g).tolist() for n in (1, 5, 12)]


def greedy(model, ids, use_cache, repetition_penalty=1.0):
    inp = torch.tensor([ids])
    out = model.generate(inp, attention_mask=torch.ones_like(inp), do_sample=False, max_new_tokens=MAX_NEW,
                         min_new_tokens=MAX_NEW, use_cache=use_cache, eos_token_id=None, pad_token_id=0,
                         repetition_penalty=repetition_penalty, output_scores=True,
                         return_dict_in_generate=True)
    new = out.sequences[0, len(ids):].tolist()
    margin = float("inf")
    for s in out.scores:  # the processed scores greedy chose from
        top = torch.topk(s[0].float(), 2).values
        margin = min(margin, float(top[0] - top[1]))
    return new, margin


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=DEFAULT_OUT)
    args = ap.parse_args()
    torch.manual_seed(0)
    result = {"versions": {"torch": torch.__version__, "transformers": transformers.__version__},
              "max_new_tokens": MAX_NEW, "repetition_penalty": REPETITION_PENALTY, "models": {}}
    for seed, name in enumerate(MODELS):
        folder = os.path.join(HF, name)
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        model.eval()
        prompts = prompts_for(model.config.vocab_size, 100 + seed)
        entry = {"prompts": prompts, "greedy": [], "greedy_repetition_penalty": []}
        worst = float("inf")
        with torch.no_grad():
            for p in prompts:
                cached, m1 = greedy(model, p, True)
                recomputed, m2 = greedy(model, p, False)
                if cached != recomputed:
                    raise SystemExit(f"{name}: transformers' cached and recomputed greedy differ for {p}")
                penalised, m3 = greedy(model, p, True, REPETITION_PENALTY)
                if penalised != greedy(model, p, False, REPETITION_PENALTY)[0]:
                    raise SystemExit(f"{name}: cached and recomputed penalised greedy differ for {p}")
                margin = min(m1, m2, m3)
                if margin < MIN_MARGIN:
                    raise SystemExit(f"{name}: prompt {p} has a greedy margin of {margin:g}; pick other prompts")
                worst = min(worst, margin)
                entry["greedy"].append(cached)
                entry["greedy_repetition_penalty"].append(penalised)
        entry["smallest_margin"] = worst
        result["models"][name] = entry
        print(f"{name}: {len(prompts)} prompts x {MAX_NEW} tokens, smallest top-1/top-2 logit margin {worst:.3g}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
