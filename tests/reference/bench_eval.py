#!/usr/bin/env python3
"""Eval throughput: `flotilla-worker eval` against lm-evaluation-harness on the same model, threads
and task, in one run (figures for docs/eval.md and the closing note of issue 35).

Builds a random Llama (hidden 512, 8 layers, GQA 8/4 heads, context 512; the goldens' BPE tokenizer
from tests/engine/golden/eval/llama) in a temporary folder, then times resources/eval/arc-mini.jsonl
(20 examples, 80 choices; 0-shot and 2-shot) with both, each on --threads threads, and checks they
agree on acc / acc_norm. Prints examples/s and the ratio.

Run by hand in the reference venv with lm_eval installed (tests/reference/requirements.txt):
  python tests/reference/bench_eval.py --worker build/bin/flotilla-worker [--threads 1]
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RES = os.path.join(REPO, "resources", "eval")
TOK = os.path.join(REPO, "tests", "engine", "golden", "eval", "llama")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    d = tempfile.mkdtemp()
    cfg = LlamaConfig(vocab_size=384, hidden_size=512, intermediate_size=1376, num_hidden_layers=8,
                      num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=512,
                      bos_token_id=382, eos_token_id=383, tie_word_embeddings=False, initializer_range=0.05)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOK, f), d)
    print(f"CPU {cpu_model()}, {a.threads} thread(s); model: random Llama 512x8 (GQA 8/4), "
          f"{sum(p.numel() for p in LlamaForCausalLM(cfg).parameters()) / 1e6:.1f}M parameters")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_eval_goldens as g
    from transformers import AutoModelForCausalLM, AutoTokenizer
    g.CTX = 512
    hf = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    hf_tok = AutoTokenizer.from_pretrained(d)
    for shots in (0, 2):
        cmd = [a.worker, "eval", "--model", d, "--task", os.path.join(RES, "arc-mini.jsonl"), "--json"]
        if shots:
            cmd += ["--dev", os.path.join(RES, "arc-mini-dev.jsonl"), "--fewshot", str(shots)]
        env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
        t0 = time.time()
        out = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout)
        ours_wall = time.time() - t0
        t0 = time.time()
        ref = g.run_lm_eval(d, shots, max_length=512)
        ref_wall = time.time() - t0
        same = out["acc"] == ref["acc"] and out["acc_norm"] == ref["acc_norm"]
        print(f"{shots}-shot: flotilla {out['examples_per_s']:.1f} examples/s (eval loop; {20 / ours_wall:.1f} "
              f"with loading, {ours_wall:.2f} s), lm_eval {20 / ref_wall:.2f} examples/s with loading "
              f"({ref_wall:.2f} s): {ref_wall / ours_wall:.1f}x; acc {out['acc']} / {ref['acc']}, "
              f"acc_norm {out['acc_norm']} / {ref['acc_norm']}{'' if same else '  DIFFERENT'}")
        # The compute alone: the same 80 requests through transformers, one forward per choice (what
        # lm_eval --batch_size 1 runs), against flotilla's eval loop (one forward per example).
        t0 = time.time()
        g.multiple_choice(hf, hf_tok, shots)
        tf = 20 / (time.time() - t0)
        print(f"{shots}-shot compute only: flotilla {out['examples_per_s']:.1f} examples/s, transformers "
              f"{tf:.1f} examples/s: {out['examples_per_s'] / tf:.1f}x")
    shutil.rmtree(d)


if __name__ == "__main__":
    sys.exit(main())
