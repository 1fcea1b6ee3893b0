#!/usr/bin/env python3
"""Checks that PEFT loads a LoRA adapter (e.g. one the engine exported) onto a bitsandbytes 4-bit base.

  python tests/reference/check_qlora_adapter.py ADAPTER_DIR BASE_DIR [--against REFERENCE] [--after-adamw]
                                                [--tol 1e-5] [--quantize]

BASE_DIR is a folder saved by transformers with a bitsandbytes 4-bit quantization_config (e.g.
tests/engine/golden/qlora/bnb), or, with --quantize, an unquantised folder that is quantised at load
with BitsAndBytesConfig(load_in_4bit, nf4, double quant, compute dtype fp32) (e.g. golden qlora/base).
The script loads it on the CPU (compute in fp32), applies PeftModel.from_pretrained(base, ADAPTER_DIR),
runs the `inputs` of REFERENCE (default tests/engine/golden/qlora/reference.safetensors) and prints:
  - the max |logits difference| against REFERENCE's `logits`; with --after-adamw, against the logits of
    the golden adapter (tests/engine/golden/qlora/peft) with REFERENCE's `adamw.*` values loaded into it
    (for an adapter the engine exports after its 3 AdamW steps);
  - the adapter's tensor names, shapes and dtypes against the golden adapter's;
  - PEFT's loading warnings and missing/unexpected adapter keys; the r, alpha and scaling PEFT read.
Exits 1 when the difference is above --tol, the keys differ, or loading warns or reports missing or
unexpected keys; 0 otherwise. Run in the reference venv (tests/reference/make-venv).
"""

import argparse
import os
import sys

import torch
from peft import PeftModel
from peft.tuners.lora import LoraLayer
from peft.utils import load_peft_weights, set_peft_model_state_dict
from safetensors import safe_open

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_lora_goldens as lora_goldens  # noqa: E402
import make_qlora_goldens as q  # noqa: E402

GOLDEN = os.path.join(q.REPO, "tests", "engine", "golden", "qlora")


def load_base(base_dir, quantize):
    if not quantize:
        return q.load_bnb(base_dir)
    model, info = q.AutoModelForCausalLM.from_pretrained(base_dir, quantization_config=q.bnb_config(torch.float32),
                                                         dtype=torch.float32, attn_implementation="eager",
                                                         device_map="cpu", output_loading_info=True)
    for m in q.quantised_modules(model).values():
        m.support_avx512bf16_for_cpu = False  # fp32 compute (see make_qlora_goldens.load_bnb)
    model.eval()
    return model


def peft_on(base_dir, adapter_dir, quantize):
    lines = []
    with lora_goldens.captured(lines):
        model = PeftModel.from_pretrained(load_base(base_dir, quantize), adapter_dir)
        result = set_peft_model_state_dict(model, load_peft_weights(adapter_dir))
    model.eval()
    missing = [k for k in result.missing_keys if ".lora_" in k]
    return model, lines, missing, list(result.unexpected_keys)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("adapter_dir")
    ap.add_argument("base_dir")
    ap.add_argument("--against", default=os.path.join(GOLDEN, "reference.safetensors"))
    ap.add_argument("--after-adamw", action="store_true")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--quantize", action="store_true", help="BASE_DIR is unquantised: quantise it at load")
    args = ap.parse_args()
    q.set_determinism()

    with safe_open(args.against, "pt") as st:
        inputs = st.get_tensor("inputs").long()
        want = st.get_tensor("logits")
        adamw = {k[len("adamw."):]: st.get_tensor(k) for k in st.keys() if k.startswith("adamw.base_model.")}
    if args.after_adamw:  # the golden adapter with the AdamW values loaded, run on the same base
        ref_model, _, _, _ = peft_on(args.base_dir, os.path.join(GOLDEN, "peft"), args.quantize)
        params = lora_goldens.lora_params(ref_model)
        with torch.no_grad():
            for n, v in adamw.items():
                params[n].copy_(v)
            want = ref_model(input_ids=inputs).logits.float()

    ok = True
    model, lines, missing, unexpected = peft_on(args.base_dir, args.adapter_dir, args.quantize)
    n4 = len(q.quantised_modules(model))
    print(f"base {args.base_dir}: {n4} bitsandbytes 4-bit layers")
    if n4 == 0:
        print("FAIL: the base has no 4-bit layer")
        ok = False
    layers = [m for m in model.modules() if isinstance(m, LoraLayer)]
    if layers:
        m = layers[0]
        print(f"PEFT read r {m.r['default']}, lora_alpha {m.lora_alpha['default']}, scaling {m.scaling['default']}, "
              f"{len(layers)} LoRA layers")
    with torch.no_grad():
        got = model(input_ids=inputs).logits.float()
    diff = (got - want).abs().max().item()
    print(f"logits: max |difference| {diff:.3e} against {'the AdamW-stepped golden adapter' if args.after_adamw else args.against}"
          f" (tol {args.tol:g})")
    if not diff <= args.tol:
        ok = False

    golden = lora_goldens.stored_names(os.path.join(GOLDEN, "peft", "adapter_model.safetensors"))
    mine = lora_goldens.stored_names(os.path.join(args.adapter_dir, "adapter_model.safetensors"))
    print(f"adapter tensors: {len(mine)}, dtypes {sorted({d for d, _ in mine.values()})}")
    if not lora_goldens.print_keys("names and shapes as the golden adapter's", mine, golden):
        ok = False
    for s in lines:
        print("loading:", s)
    if lora_goldens.serious(lines) or missing or unexpected:
        print(f"FAIL: loading warnings {len(lora_goldens.serious(lines))}, missing {missing}, unexpected {unexpected}")
        ok = False
    print("OK" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
