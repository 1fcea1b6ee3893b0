#!/usr/bin/env python3
"""Checks a QLoRA run's exports against bitsandbytes + PEFT + transformers (run by hand, reference venv).

Given the unquantised base folder a QLoRA run (lora.base_quant = "nf4") trained over, the run's PEFT
export (`export --format peft`) and its merged export (`export --format hf --dtype fp32`):

  1. PEFT loads the adapter on the base loaded in 4-bit by bitsandbytes (BitsAndBytesConfig(
     load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=..., compute fp32)):
     no missing or unexpected adapter keys. adapter_config.json holds no quantisation key.
  2. transformers loads the merged folder alone.
  3. The merged folder's projections equal bitsandbytes' dequantize_4bit of the base's 4-bit weights
     plus s * B @ A (PEFT's delta from the adapter file), each within fp32 rounding of the product
     (the engine sums B @ A in another order), and every other tensor equals the base's.
  4. The logits of PEFT over the 4-bit base dequantised in fp32 (unmerged; transformers' dequantize())
     and of the merged folder agree within --tol (relative to max |logit|), and the merged folder is
     far further from PEFT over the UNQUANTISED base: the merge is onto the quantised base, as the
     export says. PEFT over bitsandbytes' own Linear4bit is printed too: its CPU matmul rounds.
  5. With --engine-ids: PEFT over the 4-bit base generates the engine's greedy `sample` continuation.

  python tests/reference/check_qlora_export.py --base BASE --adapter PEFT_DIR --merged MERGED_DIR \\
      [--no-double-quant] [--engine-ids "1 5 9 ..."] [--prompt-len 3]
Exit status 0 when every check holds.
"""

import argparse
import json
import os
import sys
import warnings

import bitsandbytes.functional as bnbf
import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import AutoModelForCausalLM, BitsAndBytesConfig

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def load_folder_tensors(folder):
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), "pt") as f:
                for k in f.keys():
                    out[k] = f.get_tensor(k)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--merged", required=True)
    ap.add_argument("--no-double-quant", action="store_true")
    ap.add_argument("--engine-ids")
    ap.add_argument("--prompt-len", type=int, default=3)
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    ok = True

    acfg = json.load(open(os.path.join(args.adapter, "adapter_config.json")))
    quant_keys = [k for k in acfg if "quant" in k.lower() and acfg[k] not in (None, False, {}, 16)]
    print(f"adapter_config.json: r {acfg['r']}, lora_alpha {acfg['lora_alpha']}, base "
          f"{acfg['base_model_name_or_path']}; keys about quantisation with non-default values: {quant_keys or 'none'}")
    ok &= not quant_keys

    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                             bnb_4bit_use_double_quant=not args.no_double_quant,
                             bnb_4bit_compute_dtype=torch.float32)
    q = AutoModelForCausalLM.from_pretrained(args.base, quantization_config=bnb, dtype=torch.float32,
                                             attn_implementation="eager")
    peft4 = PeftModel.from_pretrained(q, args.adapter)
    peft4.eval()
    # The same 4-bit base dequantised in fp32 (transformers' dequantize(): every Linear4bit becomes an
    # nn.Linear holding bitsandbytes' dequantize_4bit): QLoRA's arithmetic without bitsandbytes' CPU
    # matmul, which rounds (about 4e-3 of the output here, like a bf16 product).
    qd = AutoModelForCausalLM.from_pretrained(args.base, quantization_config=bnb, dtype=torch.float32,
                                              attn_implementation="eager")
    qd.dequantize()
    peftdq = PeftModel.from_pretrained(qd, args.adapter)
    peftdq.eval()
    full = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32, attn_implementation="eager")
    peft32 = PeftModel.from_pretrained(full, args.adapter)
    peft32.eval()
    merged, info = AutoModelForCausalLM.from_pretrained(args.merged, dtype=torch.float32,
                                                        attn_implementation="eager", output_loading_info=True)
    merged.eval()
    bad = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    print(f"merged folder loads with transformers alone: {'yes' if not bad else bad}")
    ok &= not bad

    # 3. Weights: dequantised 4-bit base + s B A.
    scale = acfg["lora_alpha"] / (acfg["r"] ** 0.5 if acfg.get("use_rslora") else acfg["r"])
    adapter = load_folder_tensors(args.adapter)
    base = load_folder_tensors(args.base)
    got = load_folder_tensors(args.merged)
    worst_proj, worst_rel, worst_other, n_proj = 0.0, 0.0, 0.0, 0
    qmods = dict(q.named_modules())
    for name, w in got.items():
        mod = name[: -len(".weight")] if name.endswith(".weight") else None
        leaf = mod.split(".")[-1] if mod else None
        if leaf in PROJ:
            layer = qmods[mod]
            deq = bnbf.dequantize_4bit(layer.weight.data, layer.weight.quant_state).float()
            a = adapter.get(f"base_model.model.{mod}.lora_A.weight")
            b = adapter.get(f"base_model.model.{mod}.lora_B.weight")
            want = deq + (scale * (b.double() @ a.double())).float() if a is not None else deq
            d = (w.float() - want).abs().max().item()
            worst_proj = max(worst_proj, d)
            worst_rel = max(worst_rel, d / max(want.abs().max().item(), 1e-30))
            n_proj += 1
        else:
            ref = base.get(name)
            if ref is None and name == "lm_head.weight":
                ref = base.get("model.embed_tokens.weight")
            d = (w.float() - ref.float()).abs().max().item() if ref is not None else float("inf")
            worst_other = max(worst_other, d)
    print(f"merged weights: {n_proj} projections vs bitsandbytes dequantize_4bit + s B A: max |diff| "
          f"{worst_proj:.3e} ({worst_rel:.3e} of the largest weight); other tensors vs the base: {worst_other:.3e}")
    ok &= worst_rel <= 1e-6 and worst_other == 0.0

    # 4. Logits.
    vocab = merged.config.vocab_size
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, vocab, (2, 16), generator=g)
    with torch.no_grad():
        l4 = peft4(input_ids=inputs).logits
        ldq = peftdq(input_ids=inputs).logits
        l32 = peft32(input_ids=inputs).logits
        lm = merged(input_ids=inputs).logits
    top = ldq.abs().max().item()
    ddq = (lm - ldq).abs().max().item()
    d4 = (lm - l4).abs().max().item()
    d32 = (lm - l32).abs().max().item()
    print(f"logits (max |logit| {top:.3f}): merged vs PEFT over the dequantised 4-bit base {ddq:.3e} (tol "
          f"{args.tol:g} relative); vs PEFT over bitsandbytes' Linear4bit on the CPU {d4:.3e} (its matmul "
          f"rounds); vs PEFT over the unquantised base {d32:.3e}")
    ok &= ddq <= args.tol * top and d32 > 10 * ddq

    # 5. Greedy continuation.
    if args.engine_ids:
        ids = [int(x) for x in args.engine_ids.split()]
        prompt, new = ids[: args.prompt_len], len(ids) - args.prompt_len
        with torch.no_grad():
            out = peft4.generate(torch.tensor([prompt]), max_new_tokens=new, do_sample=False,
                                 pad_token_id=0)[0].tolist()
        same = out == ids
        print(f"greedy: PEFT over the 4-bit base {out}, the engine's sample {ids}: {'same' if same else 'DIFFERENT'}")
        ok &= same
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
