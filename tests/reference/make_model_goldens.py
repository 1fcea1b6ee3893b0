#!/usr/bin/env python3
"""Golden files for the engine's Llama-family import tests (model.arch = "llama").

Writes tests/engine/golden/hf/<name>/ for three small random models built with transformers:

  llama  LlamaForCausalLM, llama3 RoPE scaling, untied head, saved fp32 in 3 shards + index
  qwen2  Qwen2ForCausalLM, q/k/v biases, tied head (no lm_head.weight stored), saved bf16
  qwen3  Qwen3ForCausalLM, q/k norms, head_dim 16 != hidden/heads, tied head, saved fp16

Each folder holds what save_pretrained writes (config.json, generation_config.json, weights) and a
reference.safetensors (F32/I32 only) with inputs, logits, losses, layer-0 gradients, three AdamW
steps and a packed-documents forward. The one non-obvious decision: every reference is computed
from the *saved* folder reloaded in fp32, not from the model in memory, so the references are what
a reader of the stored (bf16/fp16-rounded) weights must reproduce. tests/reference/README.md
describes the layout.

Run by hand in the reference venv (tests/reference/make-venv), from anywhere:
  python tests/reference/make_model_goldens.py [--out DIR]
  python tests/reference/make_model_goldens.py --check-export DIR --against tests/engine/golden/hf/llama
"""

import argparse
import json
import math
import os
import shutil
import struct
import sys

import safetensors
import torch
import torch.nn.functional as F
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save
from transformers import (AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "hf")

VOCAB, BATCH, SEQ = 128, 2, 16
PACKED_DOC_LENGTHS = (5, 7, 4)  # sums to SEQ
MASKED_PROMPT = 5  # targets[0, :MASKED_PROMPT] = -100
IGNORE = -100
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
ADAMW_DECAY, ADAMW_STEPS = 0.1, 3

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, bos_token_id=1, eos_token_id=2, hidden_act="silu")

# name -> (model class, config, dtype the weights are stored in, max_shard_size or None, seed)
MODELS = {
    "llama": (LlamaForCausalLM,
              LlamaConfig(**COMMON, head_dim=8, rms_norm_eps=1e-5, rope_parameters=LLAMA3_ROPE,
                          max_position_embeddings=131072, tie_word_embeddings=False),
              torch.float32, "48KB", 1001),
    "qwen2": (Qwen2ForCausalLM,
              Qwen2Config(**COMMON, rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                          max_position_embeddings=32768, tie_word_embeddings=True),
              torch.bfloat16, None, 1002),
    "qwen3": (Qwen3ForCausalLM,
              Qwen3Config(**COMMON, head_dim=16, rms_norm_eps=1e-6, attention_bias=False,
                          rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                          max_position_embeddings=40960, tie_word_embeddings=True),
              torch.float16, None, 1003),
}


def set_determinism():
    transformers.utils.logging.disable_progress_bar()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # one summation order for every reduction, whatever the machine
    torch.set_default_dtype(torch.float32)


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "safetensors": safetensors.__version__}


def llama3_branches(config):
    """Which branch of the llama3 inv_freq rule (models.md 1.4) each frequency of the config takes."""
    p = config.rope_parameters
    d = config.head_dim
    inv_freq = 1.0 / (p["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    high = p["original_max_position_embeddings"] / p["high_freq_factor"]
    low = p["original_max_position_embeddings"] / p["low_freq_factor"]
    out = []
    for i, f in enumerate(inv_freq.tolist()):
        wavelen = 2 * math.pi / f
        branch = "unchanged" if wavelen < high else ("divided" if wavelen > low else "smoothed")
        out.append((i, f, wavelen, branch))
    return out, high, low


def randomize(model, gen):
    """Every parameter random, so a wrong norm, bias or transpose changes the outputs."""
    with torch.no_grad():
        for name, p in model.named_parameters():  # a tied head is the embedding, visited once
            noise = torch.randn(p.shape, generator=gen)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * noise)
            elif name.endswith(".bias"):
                p.copy_(0.2 * noise)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(0.3 * noise)
            else:
                p.copy_(0.2 * noise)


def stored_tensor_names(folder):
    """Tensor name -> (dtype, shape) over every .safetensors weight file of a model folder."""
    names = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors") and f != "reference.safetensors":
            with safe_open(os.path.join(folder, f), "pt") as st:
                for k in st.keys():
                    sl = st.get_slice(k)
                    names[k] = (sl.get_dtype(), tuple(sl.get_shape()))
    return names


def load_fp32(folder):
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    model.eval()  # dropout is 0 anyway; eval for clarity
    return model, info


def head_dim(config):
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def restated_inv_freq(config):
    """RoPE inverse frequencies in fp64, restated from models.md 1.4 (default rule, then llama3 rescaling)."""
    p, d = config.rope_parameters, head_dim(config)
    inv = 1.0 / p["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    if p["rope_type"] == "llama3":
        orig, factor = p["original_max_position_embeddings"], p["factor"]
        lo, hi = p["low_freq_factor"], p["high_freq_factor"]
        wavelen = 2 * math.pi / inv
        s = (orig / wavelen - lo) / (hi - lo)
        smoothed = (1 - s) * inv / factor + s * inv
        inv = torch.where(wavelen < orig / hi, inv, torch.where(wavelen > orig / lo, inv / factor, smoothed))
    else:
        assert p["rope_type"] == "default", p
    return inv


def restated_forward(model, input_ids, positions, doc_ids):
    """The forward restated from models.md 1.1-1.5 in fp64 on the model's weights, for one packed row
    per batch entry: positions given per token, attention causal and inside one document. Checks that
    the goldens mean what the engine implements (and so packed.logits too). Returns [B, T, V] fp64."""
    cfg = model.config
    w = {k: v.detach().double() for k, v in model.state_dict().items()}
    n_head, n_kv, d = cfg.num_attention_heads, cfg.num_key_value_heads, head_dim(cfg)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])  # tied: the embedding
    inv_freq = restated_inv_freq(cfg)

    def rms(x, g):  # over the last dim
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps) * g

    def rope(x, pos):  # x [T, heads, d]; rotate-half: element j pairs with j + d/2
        ang = pos.double()[:, None] * inv_freq[None, :]  # [T, d/2]
        cos, sin = torch.cat([ang.cos()] * 2, -1)[:, None, :], torch.cat([ang.sin()] * 2, -1)[:, None, :]
        return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin

    def lin(name, x):  # nn.Linear: weight [out, in]
        y = x @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    kv_of_head = [h // (n_head // n_kv) for h in range(n_head)]
    out = []
    for b in range(input_ids.shape[0]):
        ids, pos, doc = input_ids[b].long(), positions[b], doc_ids[b]
        t = ids.shape[0]
        allowed = (torch.arange(t)[None, :] <= torch.arange(t)[:, None]) & (doc[None, :] == doc[:, None])  # [T, T]
        x = w["model.embed_tokens.weight"][ids]  # [T, C]
        for i in range(cfg.num_hidden_layers):
            a = f"model.layers.{i}.self_attn."
            h = rms(x, w[f"model.layers.{i}.input_layernorm.weight"])
            q = lin(a + "q_proj", h).view(t, n_head, d)
            k = lin(a + "k_proj", h).view(t, n_kv, d)
            v = lin(a + "v_proj", h).view(t, n_kv, d)
            if a + "q_norm.weight" in w:  # Qwen3: per-head RMSNorm over d, before RoPE
                q, k = rms(q, w[a + "q_norm.weight"]), rms(k, w[a + "k_norm.weight"])
            q, k = rope(q, pos), rope(k, pos)
            k, v = k[:, kv_of_head], v[:, kv_of_head]  # [T, H, d]
            scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(d)
            probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)  # [H, T, T]
            x = x + lin(a + "o_proj", torch.einsum("hts,shd->thd", probs, v).reshape(t, n_head * d))
            m = f"model.layers.{i}.mlp."
            h = rms(x, w[f"model.layers.{i}.post_attention_layernorm.weight"])
            x = x + lin(m + "down_proj", F.silu(lin(m + "gate_proj", h)) * lin(m + "up_proj", h))
        out.append(rms(x, w["model.norm.weight"]) @ head.T)
    return torch.stack(out)


def masked_loss(logits, targets):
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1).long(),
                           ignore_index=IGNORE)


def golden_tensor_names(model):
    """Layer 0 tensors, the embedding, the final norm and (untied only) the head, in HF names."""
    names = [n for n, _ in model.named_parameters()]  # tied lm_head is not listed separately
    keep = [n for n in names if n.startswith("model.layers.0.")]
    keep += ["model.embed_tokens.weight", "model.norm.weight"]
    if not model.config.tie_word_embeddings:
        keep.append("lm_head.weight")
    return keep


def make_batch(gen):
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=gen, dtype=torch.int64)
    inputs = tokens[:, :SEQ].clone()
    targets = tokens[:, 1:].clone()
    targets_all = targets.clone()
    targets[0, :MASKED_PROMPT] = IGNORE
    docs = [torch.randint(0, VOCAB, (n,), generator=gen, dtype=torch.int64) for n in PACKED_DOC_LENGTHS]
    return tokens, inputs, targets, targets_all, docs


def references(folder, seed, log):
    """Everything in reference.safetensors, computed from the saved folder reloaded in fp32."""
    gen = torch.Generator().manual_seed(seed + 7)
    tokens, inputs, targets, targets_all, docs = make_batch(gen)
    out = {"tokens": tokens.int(), "inputs": inputs.int(), "targets": targets.int()}

    model, info = load_fp32(folder)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight, "tied head is not the embedding"
    names = golden_tensor_names(model)
    params = dict(model.named_parameters())

    # Forward, losses, gradients.
    logits = model(input_ids=inputs).logits
    loss = masked_loss(logits, targets)
    loss_all = masked_loss(logits, targets_all)
    model.zero_grad(set_to_none=True)
    loss.backward()
    out["logits"] = logits.detach().float()
    out["loss"] = loss.detach().reshape(1)
    out["loss_all"] = loss_all.detach().reshape(1)
    for n in names:
        out["grad." + n] = params[n].grad.detach().clone()

    # HF's own loss shifts labels inside: run it on the 17 tokens with labels = tokens (prompt masked),
    # whose first 16 logits are the ones above (causal), and compare.
    with torch.no_grad():
        labels = tokens.clone()
        labels[0, 1:1 + MASKED_PROMPT] = IGNORE
        hf = model(input_ids=tokens, labels=labels)
        hf_shift = model(input_ids=inputs, labels=targets, shift_labels=targets)  # shift_labels: no shift
    log(f"  loss {loss.item():.7f}  loss_all {loss_all.item():.7f}  |loss - HF(labels on 17 tokens)| "
        f"{abs(hf.loss.item() - loss.item()):.2e}  |loss - HF(shift_labels=targets)| "
        f"{abs(hf_shift.loss.item() - loss.item()):.2e}")

    # Packed documents: each run alone from position 0, then concatenated.
    with torch.no_grad():
        out["packed.inputs"] = torch.cat(docs).reshape(1, SEQ).int()
        out["packed.positions"] = torch.cat([torch.arange(n) for n in PACKED_DOC_LENGTHS]).reshape(1, SEQ).int()
        out["packed.logits"] = torch.cat([model(input_ids=d.reshape(1, -1)).logits[0] for d in docs]).reshape(
            1, SEQ, VOCAB).float()

        # The same from the restated forward in fp64: one pass over all 16 tokens for packed.
        inv_diff = (model.model.rotary_emb.inv_freq.double() - restated_inv_freq(model.config)).abs().max().item()
        pos = torch.arange(SEQ).expand(BATCH, SEQ)
        d_logits = (restated_forward(model, inputs, pos, torch.zeros(BATCH, SEQ)) - out["logits"]).abs().max().item()
        doc_ids = torch.cat([torch.full((n,), j) for j, n in enumerate(PACKED_DOC_LENGTHS)]).reshape(1, SEQ)
        d_packed = (restated_forward(model, out["packed.inputs"], out["packed.positions"], doc_ids) -
                    out["packed.logits"]).abs().max().item()
    log(f"  restated fp64 forward vs transformers: inv_freq {inv_diff:.1e}, logits {d_logits:.1e}, "
        f"packed.logits {d_packed:.1e}")
    assert max(inv_diff / 1e-6, d_logits / 1e-4, d_packed / 1e-4) < 1, "transformers differs from models.md"

    # AdamW from the reloaded weights: two groups, decay on 2-D tensors only; same batch each step.
    model, _ = load_fp32(folder)
    decay = [p for p in model.parameters() if p.ndim == 2]
    no_decay = [p for p in model.parameters() if p.ndim != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ADAMW_DECAY},
                             {"params": no_decay, "weight_decay": 0.0}], foreach=False, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        opt.zero_grad(set_to_none=True)
        step_loss = masked_loss(model(input_ids=inputs).logits, targets)
        step_loss.backward()
        losses.append(step_loss.item())
        opt.step()
    out["adamw.losses"] = torch.tensor(losses, dtype=torch.float32)
    params = dict(model.named_parameters())
    for n in names:
        out["adamw." + n] = params[n].detach().clone()
    log("  adamw losses " + " ".join(f"{x:.7f}" for x in losses))

    for k, v in out.items():
        assert v.dtype in (torch.float32, torch.int32), (k, v.dtype)
    return {k: v.contiguous() for k, v in out.items()}, model.config


def build(name, out_root, log):
    cls, config, dtype, shard, seed = MODELS[name]
    folder = os.path.join(out_root, name)
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)

    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = cls(config)
    randomize(model, torch.Generator().manual_seed(seed))
    model.to(dtype)
    kwargs = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(folder, **kwargs)

    stored = stored_tensor_names(folder)
    dtypes = sorted({d for d, _ in stored.values()})
    files = sorted(f for f in os.listdir(folder) if f.endswith(".safetensors"))
    log(f"{name}: {cls.__name__}, {len(stored)} tensors stored as {','.join(dtypes)} in {len(files)} file(s)")
    if config.tie_word_embeddings:
        assert "lm_head.weight" not in stored, "tied model stored lm_head.weight"
    if shard:
        assert len(files) >= 2 and os.path.exists(os.path.join(folder, "model.safetensors.index.json")), files
    if name == "llama":
        rows, high, low = llama3_branches(config)
        log(f"  llama3 rope (head_dim {config.head_dim}): high-freq wavelen {high:g}, low-freq wavelen {low:g}")
        for i, f, w, b in rows:
            log(f"    inv_freq[{i}] = {f:.6e}  wavelen {w:12.2f}  -> {b}")
        assert {b for *_, b in rows} == {"unchanged", "smoothed", "divided"}, "not all llama3 branches hit"

    ref, cfg = references(folder, seed, log)
    meta = {"format": "pt", "model": name, "architecture": cls.__name__, "stored_dtype": str(dtype).split(".")[-1],
            "masked_prompt": str(MASKED_PROMPT), "packed_doc_lengths": ",".join(map(str, PACKED_DOC_LENGTHS)),
            "adamw": json.dumps({**ADAMW, "weight_decay_2d": ADAMW_DECAY, "steps": ADAMW_STEPS}),
            "generated_by": "tests/reference/make_model_goldens.py", **versions()}
    if name == "llama":
        meta["llama3_branches"] = ",".join(b for *_, b in llama3_branches(cfg)[0])
    save_canonical(ref, os.path.join(folder, "reference.safetensors"), meta)


def save_canonical(tensors, path, metadata):
    """safetensors.torch.save with the __metadata__ keys sorted. The library writes them in hash-map
    order, different in each process (safetensors issue #584), so two runs would not be byte-identical.
    Only the order of keys inside the header changes: same length, same offsets, same data."""
    blob = save(tensors, metadata=metadata)
    n = struct.unpack("<Q", blob[:8])[0]
    header = blob[8:8 + n].decode("ascii")
    text = header.rstrip(" ")  # the library pads the header with spaces to 8 bytes
    parsed = json.loads(text)
    assert json.dumps(parsed, separators=(",", ":")) == text, "header not in the expected compact form"
    parsed["__metadata__"] = dict(sorted(parsed["__metadata__"].items()))
    canonical = json.dumps(parsed, separators=(",", ":"))
    assert len(canonical) == len(text)
    with open(path, "wb") as f:
        f.write(blob[:8] + (canonical + header[len(text):]).encode("ascii") + blob[8 + n:])
    back = load_file(path)
    assert set(back) == set(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)


def folder_size(folder):
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))


def check_export(export_dir, against, tol):
    """Loads an exported folder in fp32 and compares its logits with the golden ones; 0 when all is well."""
    with safe_open(os.path.join(against, "reference.safetensors"), "pt") as st:
        inputs = st.get_tensor("inputs").long()
        want = st.get_tensor("logits")
    model, info = load_fp32(export_dir)
    with torch.no_grad():
        got = model(input_ids=inputs).logits.float()
    diff = (got - want).abs().max().item()

    exported, source = stored_tensor_names(export_dir), stored_tensor_names(against)
    dtypes = sorted({d for d, _ in exported.values()})
    missing = sorted(set(source) - set(exported))
    extra = sorted(set(exported) - set(source))
    shapes = sorted(k for k in set(source) & set(exported) if source[k][1] != exported[k][1])
    keys_ok = not (missing or extra or shapes)
    load_ok = not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys"))

    print(f"export {export_dir} ({','.join(dtypes)}) against {against}")
    print(f"  max |logits difference| {diff:.3e} (tol {tol:g}; |logits| up to {want.abs().max().item():.2f})")
    # A lower-precision export cannot match the reference; it can match the source weights rounded to
    # its dtype exactly, when they are unchanged and rounded to nearest even (as torch does). Informative.
    if dtypes in (["BF16"], ["F16"]) and {d for d, _ in source.values()} != set(dtypes):
        dtype = torch.bfloat16 if dtypes == ["BF16"] else torch.float16
        rounded, _ = load_fp32(against)
        with torch.no_grad():
            for p in rounded.parameters():  # parameters only: buffers (RoPE inv_freq) stay as computed
                p.copy_(p.to(dtype).to(torch.float32))
            d_rounded = (rounded(input_ids=inputs).logits - got).abs().max().item()
        print(f"  max |logits difference| against the source weights rounded to {dtypes[0]}: {d_rounded:.3e} "
              "(0 for unchanged weights rounded to nearest even)")
    print(f"  stored keys match the source folder: {'yes' if keys_ok else 'NO'} ({len(exported)} vs {len(source)})")
    for label, names in (("missing", missing), ("extra", extra), ("shape differs", shapes)):
        if names:
            print(f"    {label}: {', '.join(names)}")
    if not load_ok:
        print(f"  transformers loading info: {info}")
    ok = diff <= tol and keys_ok and load_ok
    print("  OK" if ok else "  FAIL")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="root of the golden folders (default %(default)s)")
    ap.add_argument("--only", choices=sorted(MODELS), action="append", help="build only these models")
    ap.add_argument("--check-export", metavar="DIR", help="check an exported HF folder instead of building goldens")
    ap.add_argument("--against", metavar="GOLDEN", help="golden folder the export came from (with --check-export)")
    ap.add_argument("--tol", type=float, default=1e-5,
                    help="max |logits difference| allowed (default %(default)g, for fp32 exports; bf16 exports of "
                         "these goldens need 1e-1: their rounding alone moves logits by up to 7.6e-2)")
    args = ap.parse_args()
    set_determinism()

    if args.check_export:
        if not args.against:
            ap.error("--check-export needs --against tests/engine/golden/hf/<name>")
        needed = (os.path.join(args.check_export, "config.json"), os.path.join(args.against, "reference.safetensors"))
        for path in needed:
            if not os.path.isfile(path):
                ap.error(f"{path} not found: --check-export takes an exported HF folder, --against a golden folder")
        return check_export(args.check_export, args.against, args.tol)

    print(f"versions: {versions()}")
    total = 0
    for name in args.only or MODELS:
        build(name, args.out, print)
        folder = os.path.join(args.out, name)
        for f in sorted(os.listdir(folder)):
            print(f"  {f:40s} {os.path.getsize(os.path.join(folder, f)):8d} bytes")
        total += folder_size(folder)
    print(f"total {total} bytes ({total / 1024:.1f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
