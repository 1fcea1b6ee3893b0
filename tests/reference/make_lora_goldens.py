#!/usr/bin/env python3
"""Golden files for the engine's LoRA (PEFT) tests.

Writes tests/engine/golden/lora/<name>/ for the three golden base models of
tests/engine/golden/hf/{llama,qwen2,qwen3}/ (made by make_model_goldens.py, read here, never changed):

  llama  r 4, alpha 8,  q/k/v/o/gate/up/down_proj (all seven)  scaling alpha/r        = 2
  qwen2  r 2, alpha 4,  q_proj, v_proj                        rsLoRA: alpha/sqrt(r) = 2.8284...
  qwen3  r 4, alpha 16, k_proj, o_proj, up_proj, down_proj    scaling alpha/r        = 4

Each folder holds adapter/ (what PeftModel.save_pretrained writes: adapter_config.json and an fp32
adapter_model.safetensors) and reference.safetensors (F32/I32 only): the hf golden's inputs and
targets, the logits of base + adapter (unmerged), the masked loss, the gradient of every LoRA tensor,
three AdamW steps over the LoRA tensors only, and the logits of the merged model. lora_A is PEFT's
own kaiming-uniform init; every lora_B is set to random non-zero values (PEFT would start it at 0),
so every LoRA tensor takes a gradient and the adapter moves the logits by O(1). As in
make_model_goldens.py every reference is computed from the *saved* adapter reloaded onto the base
reloaded in fp32. tests/reference/README.md describes the layout.

Run by hand in the reference venv (tests/reference/make-venv), from anywhere:
  python tests/reference/make_lora_goldens.py [--out DIR] [--only NAME]
  python tests/reference/make_lora_goldens.py --check-peft ADAPTER_DIR --against tests/engine/golden/lora/llama
  python tests/reference/make_lora_goldens.py --check-merged HF_DIR --against tests/engine/golden/lora/llama
"""

import argparse
import contextlib
import io
import json
import logging
import os
import shutil
import sys
import warnings

import peft
import safetensors
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from peft.tuners.lora import LoraLayer
from peft.utils import load_peft_weights, set_peft_model_state_dict
from safetensors import safe_open
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_goldens as base_goldens  # noqa: E402 - the base goldens' helpers, shared
from make_model_goldens import masked_loss, save_canonical  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HF_GOLDEN = "tests/engine/golden/hf"  # relative to REPO; also what adapter_config.json names as the base
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "lora")

IGNORE = -100
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 3
LORA_B_STD = 0.07  # lora_B ~ N(0, 0.1^2): the adapter moves the logits by O(1) without swamping the base
GENERATE_PROMPT, GENERATE_NEW = 4, 8
ALL_PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# name -> LoraConfig arguments that differ per model, and the seed (lora_A from torch.manual_seed(seed),
# lora_B from a generator seeded seed + 1)
MODELS = {
    "llama": (dict(r=4, lora_alpha=8, target_modules=ALL_PROJ, use_rslora=False), 2001),
    "qwen2": (dict(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], use_rslora=True), 2002),
    "qwen3": (dict(r=4, lora_alpha=16, target_modules=["k_proj", "o_proj", "up_proj", "down_proj"], use_rslora=False),
              2003),
}


def set_determinism():
    base_goldens.set_determinism()
    quiet_known_warnings()


def quiet_known_warnings():
    # printed by transformers 5.24 whenever PEFT wraps a model; not ours to fix
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "safetensors": safetensors.__version__}


def lora_config(name):
    args, _ = MODELS[name]
    return LoraConfig(**args, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM")


def load_base(folder, name_or_path=None):
    """The base model in fp32, eager attention. name_or_path: what PEFT records as the base (the default
    would be the absolute path of this machine)."""
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    if name_or_path is not None:
        model.name_or_path = name_or_path
        model.config.name_or_path = name_or_path
    model.eval()  # dropout is 0 anyway
    return model


def serious(lines):
    """The captured lines that count as a failure: all but FutureWarning/DeprecationWarning (e.g.
    transformers' `is_gradient_checkpointing` deprecation when PEFT makes an adapter trainable)."""
    return [s for s in lines if not s.startswith(("FutureWarning:", "DeprecationWarning:"))]


@contextlib.contextmanager
def captured(lines):
    """Collects Python warnings and transformers/peft log records (warnings and above) into lines."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setLevel(logging.WARNING)
    loggers = [logging.getLogger("transformers"), logging.getLogger("peft")]
    for lg in loggers:
        lg.addHandler(handler)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_known_warnings()
        try:
            yield
        finally:
            for lg in loggers:
                lg.removeHandler(handler)
            lines += [f"{w.category.__name__}: {w.message}" for w in caught]
            lines += [s for s in stream.getvalue().splitlines() if s.strip()]


def load_peft(base_dir, adapter_dir, trainable=False, name_or_path=None):
    """Base reloaded in fp32 + the adapter folder. Returns (model, warning lines, load result). The load
    result (missing and unexpected adapter keys) comes from loading the same weights once more, since
    PeftModel.from_pretrained warns about missing keys only."""
    lines = []
    with captured(lines):
        model = PeftModel.from_pretrained(load_base(base_dir, name_or_path), adapter_dir, is_trainable=trainable)
        result = set_peft_model_state_dict(model, load_peft_weights(adapter_dir))
    model.eval()
    # missing_keys also lists every base weight (not in an adapter file): keep the LoRA ones, as PEFT does
    missing = [k for k in result.missing_keys if ".lora_" in k]
    return model, lines, result._replace(missing_keys=missing)


def stored_names(path):
    """Tensor name -> (dtype, shape) of one .safetensors file."""
    with safe_open(path, "pt") as st:
        return {k: (st.get_slice(k).get_dtype(), tuple(st.get_slice(k).get_shape())) for k in st.keys()}


def stored_names_folder(folder):
    """The same over every .safetensors file of a model folder but reference.safetensors."""
    names = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors") and f != "reference.safetensors":
            names.update(stored_names(os.path.join(folder, f)))
    return names


def lora_params(model):
    """PEFT file name -> the parameter, for every LoRA tensor (the file name drops the adapter name)."""
    out = {}
    for n, p in model.named_parameters():
        if ".lora_" in n:
            assert ".default." in n, n
            out[n.replace(".default.", ".")] = p
    return out


def save_adapter(model, adapter_dir):
    """PeftModel.save_pretrained, made byte-stable. PEFT keeps target_modules as a set and writes
    list(set): its order follows Python's string hashing, different in each process. We sort that list
    (the rest of adapter_config.json is already written with sorted keys, indent 2). save_pretrained
    also writes a boilerplate README.md model card, which no loader reads; we drop it."""
    model.save_pretrained(adapter_dir)
    path = os.path.join(adapter_dir, "adapter_config.json")
    with open(path) as f:
        cfg = json.load(f)
    cfg["target_modules"] = sorted(cfg["target_modules"])
    with open(path, "w") as f:
        f.write(json.dumps(cfg, indent=2, sort_keys=True))  # as peft's PeftConfigMixin.save_pretrained
    os.remove(os.path.join(adapter_dir, "README.md"))
    assert sorted(os.listdir(adapter_dir)) == ["adapter_config.json", "adapter_model.safetensors"], \
        os.listdir(adapter_dir)


def build(name, out_root, log):
    args, seed = MODELS[name]
    folder = os.path.join(out_root, name)
    adapter_dir = os.path.join(folder, "adapter")
    base_rel = f"{HF_GOLDEN}/{name}"
    base_dir = os.path.join(REPO, base_rel)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)

    with safe_open(os.path.join(base_dir, "reference.safetensors"), "pt") as st:
        inputs, targets, base_ref_logits = (st.get_tensor(k) for k in ("inputs", "targets", "logits"))
    ids = inputs.long()

    # Build: lora_A as PEFT initialises it (kaiming-uniform, from the global RNG), lora_B random.
    torch.manual_seed(seed)
    model = get_peft_model(load_base(base_dir, base_rel), lora_config(name))
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for n, p in lora_params(model).items():
            if ".lora_B." in n:
                p.copy_(LORA_B_STD * torch.randn(p.shape, generator=gen))
    with torch.no_grad():
        built_logits = model(input_ids=ids).logits
    save_adapter(model, adapter_dir)
    scalings = {m.scaling["default"] for m in model.modules() if isinstance(m, LoraLayer)}
    assert len(scalings) == 1, scalings
    scaling = scalings.pop()

    stored = stored_names(os.path.join(adapter_dir, "adapter_model.safetensors"))
    n_layers = model.config.num_hidden_layers
    assert len(stored) == 2 * n_layers * len(args["target_modules"]), len(stored)
    assert {d for d, _ in stored.values()} == {"F32"}, stored
    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    assert cfg["base_model_name_or_path"] == base_rel, cfg["base_model_name_or_path"]
    want_scaling = args["lora_alpha"] / (args["r"] ** 0.5 if args["use_rslora"] else args["r"])
    assert abs(scaling - want_scaling) < 1e-12, (scaling, want_scaling)
    log(f"{name}: r {args['r']}, alpha {args['lora_alpha']}, rslora {args['use_rslora']}, scaling {scaling!r}, "
        f"{len(stored)} LoRA tensors, targets {','.join(args['target_modules'])}")

    # References, from the saved adapter reloaded onto the base reloaded in fp32.
    model, lines, result = load_peft(base_dir, adapter_dir, trainable=True)
    assert not serious(lines) and not result.missing_keys and not result.unexpected_keys, (lines, result)
    params = lora_params(model)
    assert set(params) == set(stored), sorted(set(params) ^ set(stored))
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert len(trainable) == len(params) and all(p.requires_grad for p in params.values()), "base not frozen"

    out = {"inputs": inputs.int(), "targets": targets.int()}
    with torch.no_grad(), model.disable_adapter():
        base_logits = model(input_ids=ids).logits
    logits = model(input_ids=ids).logits
    loss = masked_loss(logits, targets)
    model.zero_grad(set_to_none=True)
    loss.backward()
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().reshape(1)
    for n in sorted(params):
        g = params[n].grad
        assert g is not None and g.abs().max().item() > 0, f"no gradient for {n}"
        out["grad." + n] = g.detach().clone()

    d_reload = (built_logits - out["logits"]).abs().max().item()
    d_base = (base_logits - base_ref_logits).abs().max().item()
    delta = out["logits"] - base_logits
    d_adapter = delta.abs().max().item()
    rel = (delta.std() / base_logits.std()).item()
    log(f"  loss {loss.item():.7f}; adapter moves logits by max {d_adapter:.3f} (std ratio adapter/base {rel:.3f}; "
        f"|base logits| up to {base_logits.abs().max().item():.2f}); adapter off vs hf golden logits {d_base:.1e}; "
        f"reloaded vs in-memory {d_reload:.1e}")
    assert d_adapter >= 0.1, "the adapter barely changes the logits"
    assert rel < 1.0, "the adapter swamps the base model"
    assert d_base <= 1e-5 and d_reload == 0.0  # d_base: float rounding of this CPU vs the one that made hf/

    # AdamW over the LoRA tensors only, from the reloaded adapter: one group, all decayed; same batch each step.
    model, _, _ = load_peft(base_dir, adapter_dir, trainable=True)
    params = lora_params(model)
    opt = torch.optim.AdamW([{"params": [params[n] for n in sorted(params)]}], foreach=False, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = masked_loss(model(input_ids=ids).logits, targets)
        step_loss.backward()
        losses.append(step_loss.item())
        opt.step()
    out["adamw.losses"] = torch.tensor(losses, dtype=torch.float32)
    for n in sorted(params):
        out["adamw." + n] = params[n].detach().clone()
    assert losses[0] == loss.item()
    log("  adamw losses " + " ".join(f"{x:.7f}" for x in losses))

    # Merged: the original adapter folded into the base weights, W' = W + scaling * B @ A.
    model, _, _ = load_peft(base_dir, adapter_dir)
    params = lora_params(model)
    base_w = {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith(".base_layer.weight")}
    merged = model.merge_and_unload()
    merged_w = dict(merged.named_parameters())
    d_merge_w = 0.0
    for n, w in base_w.items():
        stem = n[len("base_model.model."):-len(".base_layer.weight")]
        a = params[f"base_model.model.{stem}.lora_A.weight"].detach()
        b = params[f"base_model.model.{stem}.lora_B.weight"].detach()
        d_merge_w = max(d_merge_w, (merged_w[stem + ".weight"] - (w + scaling * (b @ a))).abs().max().item())
    with torch.no_grad():
        out["merged.logits"] = merged(input_ids=ids).logits.float()
    d_merged = (out["merged.logits"] - out["logits"]).abs().max().item()
    log(f"  merged vs unmerged logits {d_merged:.2e}; merged weights vs W + scaling*B@A {d_merge_w:.1e}")
    assert d_merged <= 1e-5 and d_merge_w <= 1e-6
    assert not any("lora" in n or "base_layer" in n for n in merged.state_dict())

    for k, v in out.items():
        assert v.dtype in (torch.float32, torch.int32), (k, v.dtype)
    meta = {"format": "pt", "model": name, "base": base_rel, "r": str(args["r"]),
            "lora_alpha": str(args["lora_alpha"]), "use_rslora": str(args["use_rslora"]).lower(),
            "target_modules": ",".join(args["target_modules"]), "scaling": repr(scaling),
            "adamw": json.dumps({**ADAMW, "steps": ADAMW_STEPS, "params": "lora only, one group"}),
            "generated_by": "tests/reference/make_lora_goldens.py", **versions()}
    save_canonical({k: v.contiguous() for k, v in out.items()}, os.path.join(folder, "reference.safetensors"), meta)


def golden_info(against):
    """(metadata, inputs, logits, merged.logits, adamw tensors, base folder) of a LoRA golden folder."""
    path = os.path.join(against, "reference.safetensors")
    with safe_open(path, "pt") as st:
        meta = st.metadata()
        inputs, logits, merged = (st.get_tensor(k) for k in ("inputs", "logits", "merged.logits"))
        adamw = {k[len("adamw."):]: st.get_tensor(k) for k in st.keys() if k.startswith("adamw.base_model.")}
    return meta, inputs.long(), logits, merged, adamw, os.path.join(REPO, meta["base"])


def generate(model, inputs):
    """Greedy, GENERATE_NEW new tokens after the first GENERATE_PROMPT input tokens of row 0; EOS does
    not stop it, so the count is fixed. Returns the new ids."""
    prompt = inputs[:1, :GENERATE_PROMPT]
    with torch.no_grad():
        ids = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=GENERATE_NEW,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return ids[0, GENERATE_PROMPT:].tolist()


def print_keys(label, got, want):
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    shapes = sorted(k for k in set(want) & set(got) if want[k][1] != got[k][1])
    ok = not (missing or extra or shapes)
    print(f"  {label}: {'yes' if ok else 'NO'} ({len(got)} vs {len(want)})")
    for what, names in (("missing", missing), ("extra", extra), ("shape differs", shapes)):
        for k in names:
            print(f"    {what}: {k}" + (f" {got[k][1]} (golden {want[k][1]})" if what == "shape differs" else ""))
    return ok


def check_peft(adapter_dir, against, tol, after_adamw):
    """Loads an adapter folder onto the golden's base (fp32) and compares logits; 0 when all is well."""
    meta, inputs, want, _, adamw, base_dir = golden_info(against)
    print(f"adapter {adapter_dir} against {against} (base {meta['base']})")
    if after_adamw:  # the golden adapter with the golden's AdamW tensors loaded into it
        ref, _, _ = load_peft(base_dir, os.path.join(against, "adapter"))
        r = set_peft_model_state_dict(ref, adamw)
        assert not [k for k in r.missing_keys if ".lora_" in k] and not r.unexpected_keys, r
        with torch.no_grad():
            want = ref(input_ids=inputs).logits
        print(f"  reference: the golden adapter with its {len(adamw)} adamw.* tensors loaded, logits recomputed")
    try:
        model, lines, result = load_peft(base_dir, adapter_dir)
    except Exception as e:  # noqa: BLE001 - report it with the rest, e.g. a transposed tensor
        model, lines, result = None, [], None
        print(f"  PeftModel.from_pretrained failed: {type(e).__name__}: {str(e).strip()}")
    diff = float("inf")
    if model is not None:
        with torch.no_grad():
            got = model(input_ids=inputs).logits
        diff = (got - want).abs().max().item()
        print(f"  max |logits difference| {diff:.3e} (tol {tol:g}; |logits| up to {want.abs().max().item():.2f})")

    exported = stored_names(os.path.join(adapter_dir, "adapter_model.safetensors"))
    golden = stored_names(os.path.join(against, "adapter", "adapter_model.safetensors"))
    keys_ok = print_keys("tensor names and shapes match the golden adapter", exported, golden)
    dtypes = sorted({d for d, _ in exported.values()})
    print(f"  stored dtypes: {','.join(dtypes)}")

    with open(os.path.join(adapter_dir, "adapter_config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(against, "adapter", "adapter_config.json")) as f:
        golden_cfg = json.load(f)
    differ = sorted(k for k in set(cfg) | set(golden_cfg) if cfg.get(k, "<absent>") != golden_cfg.get(k, "<absent>"))
    for k in differ:  # for information: names, shapes and logits decide
        print(f"  adapter_config.json {k}: {json.dumps(cfg.get(k, '<absent>'))} "
              f"(golden {json.dumps(golden_cfg.get(k, '<absent>'))})")
    if model is None:
        print("  FAIL")
        return 1
    pc = model.peft_config["default"]
    scaling = pc.lora_alpha / (pc.r ** 0.5 if pc.use_rslora else pc.r)
    print(f"  PEFT reads r {pc.r}, lora_alpha {pc.lora_alpha}, use_rslora {pc.use_rslora}: scaling {scaling!r} "
          f"(golden {meta['scaling']})")

    load_ok = not serious(lines) and not result.missing_keys and not result.unexpected_keys
    for line in lines:
        print(f"  loading warning: {line}")
    for k in result.missing_keys:
        print(f"  loading: missing adapter key {k}")
    for k in result.unexpected_keys:
        print(f"  loading: unexpected key {k}")

    ok_gen = True
    try:
        print(f"  greedy generate from {inputs[0, :GENERATE_PROMPT].tolist()}: {generate(model, inputs)}")
    except Exception as e:  # noqa: BLE001 - report any failure
        print(f"  generate failed: {type(e).__name__}: {e}")
        ok_gen = False
    ok = diff <= tol and keys_ok and load_ok and ok_gen
    print("  OK" if ok else "  FAIL")
    return 0 if ok else 1


def check_merged(hf_dir, against, tol):
    """Loads a merged export with transformers alone and compares logits; 0 when all is well. The pass
    test is against merged.logits (PEFT's own merge, in fp32): `logits` (unmerged) differs from it by
    float rounding alone, up to 6.4e-6 for these goldens, which leaves little room under 1e-5."""
    meta, inputs, unmerged, want, _, base_dir = golden_info(against)
    print(f"merged export {hf_dir} against {against} (base {meta['base']})")
    if os.path.exists(os.path.join(hf_dir, "adapter_config.json")):
        print("  it holds adapter_config.json: a PEFT adapter folder, not a merged model\n  FAIL")
        return 1
    lines = []
    with captured(lines):
        model, info = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32, attn_implementation="eager",
                                                           output_loading_info=True)
    model.eval()
    with torch.no_grad():
        got = model(input_ids=inputs).logits
    diff = (got - want).abs().max().item()
    print(f"  max |logits difference| against merged.logits {diff:.3e} (tol {tol:g}; |logits| up to "
          f"{want.abs().max().item():.2f}); against the unmerged logits {(got - unmerged).abs().max().item():.3e} "
          f"(for information)")

    exported, source = stored_names_folder(hf_dir), stored_names_folder(base_dir)
    keys_ok = print_keys(f"tensor names and shapes match the base {meta['base']}", exported, source)
    print(f"  stored dtypes: {','.join(sorted({d for d, _ in exported.values()}))}")
    load_ok = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")) and not serious(lines)
    if any(info.values()):
        print(f"  transformers loading info: {info}")
    for line in lines:
        print(f"  loading warning: {line}")

    ok_gen = True
    try:
        print(f"  greedy generate from {inputs[0, :GENERATE_PROMPT].tolist()}: {generate(model, inputs)}")
    except Exception as e:  # noqa: BLE001 - report any failure
        print(f"  generate failed: {type(e).__name__}: {e}")
        ok_gen = False
    ok = diff <= tol and keys_ok and load_ok and ok_gen
    print("  OK" if ok else "  FAIL")
    return 0 if ok else 1


def check_trained(adapter_dir, merged_dir, base_dir, tol, engine_ids):
    """An adapter the engine trained (so no golden logits exist) and the merged folder it exported from
    the same checkpoint: PEFT loads the adapter on the base, transformers loads the merged folder
    without PEFT, their logits on random ids agree within tol, both generate the same greedy
    continuation, and, with --engine-ids, so did the engine's own greedy `sample`. 0 when all is well."""
    print(f"trained adapter {adapter_dir} on {base_dir}, merged export {merged_dir}")
    ok = True
    try:
        peft_model, lines, result = load_peft(base_dir, adapter_dir)
    except Exception as e:  # noqa: BLE001 - report any failure
        print(f"  PeftModel.from_pretrained failed: {type(e).__name__}: {str(e).strip()}\n  FAIL")
        return 1
    for line in lines:
        print(f"  loading warning: {line}")
    if serious(lines) or result.missing_keys or result.unexpected_keys:
        print(f"  adapter keys missing {result.missing_keys} unexpected {result.unexpected_keys}")
        ok = False
    if os.path.exists(os.path.join(merged_dir, "adapter_config.json")):
        print("  the merged folder holds adapter_config.json: not a merged model")
        ok = False
    mlines = []
    with captured(mlines):
        merged, info = AutoModelForCausalLM.from_pretrained(merged_dir, dtype=torch.float32,
                                                            attn_implementation="eager", output_loading_info=True)
    merged.eval()
    if any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")) or serious(mlines):
        print(f"  merged loading info: {info} {mlines}")
        ok = False
    vocab = merged.config.vocab_size
    g = torch.Generator().manual_seed(5)
    inputs = torch.randint(0, vocab, (2, 16), generator=g)
    base = load_base(base_dir)
    with torch.no_grad():
        a, b, c = peft_model(input_ids=inputs).logits, merged(input_ids=inputs).logits, base(input_ids=inputs).logits
    diff, moved = (a - b).abs().max().item(), (a - c).abs().max().item()
    print(f"  PEFT(base + adapter) vs merged: max |logits difference| {diff:.3e} (tol {tol:g}); "
          f"the adapter moves the base's logits by up to {moved:.3f}")
    ok = ok and diff <= tol and moved > 1e-3
    prompt = engine_ids[:GENERATE_PROMPT] if engine_ids else inputs[0, :GENERATE_PROMPT].tolist()
    t = torch.tensor([prompt])
    ga = generate(peft_model, t)
    gb = generate(merged, t)
    print(f"  greedy from {prompt}: PEFT {ga}, merged {gb}")
    ok = ok and ga == gb
    if engine_ids:
        mine = engine_ids[GENERATE_PROMPT:GENERATE_PROMPT + GENERATE_NEW]
        print(f"  the engine's greedy sample: {mine}")
        ok = ok and mine == ga[:len(mine)]
    print("  OK" if ok else "  FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="root of the golden folders (default %(default)s)")
    ap.add_argument("--only", choices=sorted(MODELS), action="append", help="build only these models")
    ap.add_argument("--check-peft", metavar="ADAPTER_DIR", help="check an exported PEFT adapter folder")
    ap.add_argument("--check-merged", metavar="HF_DIR", help="check an exported merged HF model folder")
    ap.add_argument("--against", metavar="GOLDEN", help="LoRA golden folder, tests/engine/golden/lora/<name>")
    ap.add_argument("--after-adamw", action="store_true",
                    help="with --check-peft: compare with the golden adapter after its 3 AdamW steps (adamw.*)")
    ap.add_argument("--tol", type=float, default=1e-5, help="max |logits difference| allowed (default %(default)g)")
    ap.add_argument("--check-trained", nargs=2, metavar=("ADAPTER_DIR", "MERGED_DIR"),
                    help="an engine-trained adapter and its merged export, against each other (needs --base)")
    ap.add_argument("--base", metavar="HF_DIR", help="with --check-trained: the base model folder")
    ap.add_argument("--engine-ids", metavar="IDS",
                    help="with --check-trained: the engine's greedy sample, prompt then new ids, space-separated")
    args = ap.parse_args()
    set_determinism()

    if args.check_trained:
        if not args.base:
            ap.error("--check-trained needs --base HF_DIR")
        ids = [int(x) for x in args.engine_ids.split()] if args.engine_ids else None
        return check_trained(args.check_trained[0], args.check_trained[1], args.base, args.tol, ids)

    if args.check_peft or args.check_merged:
        if args.check_peft and args.check_merged:
            ap.error("give --check-peft or --check-merged, not both")
        if not args.against or not os.path.isfile(os.path.join(args.against, "reference.safetensors")):
            ap.error("--check-peft/--check-merged need --against tests/engine/golden/lora/<name>")
        if args.check_peft:
            for f in ("adapter_config.json", "adapter_model.safetensors"):
                if not os.path.isfile(os.path.join(args.check_peft, f)):
                    ap.error(f"{args.check_peft} has no {f}: --check-peft takes a PEFT adapter folder")
            return check_peft(args.check_peft, args.against, args.tol, args.after_adamw)
        if args.after_adamw:
            ap.error("--after-adamw goes with --check-peft")
        if not any(os.path.isfile(os.path.join(args.check_merged, f)) for f in ("config.json", "adapter_config.json")):
            ap.error(f"{args.check_merged} has no config.json: --check-merged takes an HF model folder")
        return check_merged(args.check_merged, args.against, args.tol)

    print(f"versions: {versions()}")
    total = 0
    for name in args.only or MODELS:
        build(name, args.out, print)
        folder = os.path.join(args.out, name)
        for sub in ("adapter", "."):
            for f in sorted(os.listdir(os.path.join(folder, sub))):
                path = os.path.join(folder, sub, f)
                if os.path.isfile(path):
                    size = os.path.getsize(path)
                    total += size
                    print(f"  {os.path.normpath(os.path.join(sub, f)):40s} {size:8d} bytes")
    print(f"total {total} bytes ({total / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
