#!/usr/bin/env python3
"""Golden files for the engine's QLoRA (NF4 base) tests: bitsandbytes 0.50.2 on the CPU, and PEFT.

Writes tests/engine/golden/qlora/ (tests/reference/README.md, "QLoRA goldens", describes every file):

  quant/<case>.safetensors   bitsandbytes.functional.quantize_4bit(x, blocksize=64, quant_type="nf4",
                             compress_statistics=True and False) of random and real-shaped tensors:
                             the packed bytes, absmax, the double-quantised statistics, dequantize_4bit
  quant/maps.safetensors     the NF4 code table and create_dynamic_map(signed=True), as bitsandbytes has them
  base/                      a tiny Llama (hidden 64, intermediate 128, 2 layers, vocab 128) in bf16: every
                             projection's in-width is a multiple of 64, as NF4 blocks need
  bnb/                       the same model loaded with BitsAndBytesConfig(load_in_4bit, nf4, double quant)
                             and saved by transformers (packed weights + quant-state tensors)
  bnb_bf16/                  the same with dtype bfloat16 (compute dtype bf16): bf16 embedding/norms/head,
                             quant state dtype "bfloat16"; bad folders (fp4, 8-bit, missing quant state) are
                             not written: the C++ test makes them from bnb/ in a temp dir
  peft/                      a LoRA adapter (r 4, alpha 8, all seven projections) over bnb/ in PEFT's format
  reference.safetensors      logits, loss, every adapter gradient and three AdamW steps of PEFT over the
                             bitsandbytes 4-bit base (compute dtype fp32)

Run by hand in the reference venv (tests/reference/make-venv), from anywhere:
  python tests/reference/make_qlora_goldens.py [--out DIR] [--only quant|model]
"""

import argparse
import json
import os
import shutil
import sys

import bitsandbytes
import bitsandbytes.functional as bnbf
import numpy as np
import peft
import safetensors
import safetensors.torch
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM, BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_goldens as base_goldens  # noqa: E402
import make_lora_goldens as lora_goldens  # noqa: E402
from make_model_goldens import masked_loss  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "qlora")
BLOCK = 64


def save_canonical(tensors, path, metadata):
    """make_model_goldens.save_canonical (safetensors with sorted metadata keys), checked by reading
    the file back bit for bit (its own check uses torch.equal, which a NaN never passes)."""
    blob = safetensors.torch.save(tensors, metadata=metadata)
    n = int.from_bytes(blob[:8], "little")
    header = blob[8:8 + n].decode("ascii")
    text = header.rstrip(" ")
    parsed = json.loads(text)
    assert json.dumps(parsed, separators=(",", ":")) == text, "header not in the expected compact form"
    parsed["__metadata__"] = dict(sorted(parsed["__metadata__"].items()))
    canonical = json.dumps(parsed, separators=(",", ":"))
    assert len(canonical) == len(text)
    with open(path, "wb") as f:
        f.write(blob[:8] + (canonical + header[len(text):]).encode("ascii") + blob[8 + n:])
    back = safetensors.torch.load_file(path)
    assert set(back) == set(tensors) and all(
        back[k].dtype == tensors[k].dtype and tbytes(back[k]) == tbytes(tensors[k]) for k in tensors)


def set_determinism():
    lora_goldens.set_determinism()  # one torch thread (absmax.mean() is a summation: one order), fp32
    transformers.utils.logging.set_verbosity_error()


def versions():
    return {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__,
            "bitsandbytes": bitsandbytes.__version__, "safetensors": safetensors.__version__}


# ---------------------------------------------------------------------------------------------
# Inputs made by a generator the C++ test repeats exactly (no stored input for the large cases).
# splitmix64 per element; four 16-bit parts summed (an Irwin-Hall approximation of a normal), scaled
# by powers of two only, so every value is exact in fp32 and in double: no rounding to agree on.

MASK64 = (1 << 64) - 1


def splitmix64(seed, n):
    """The n outputs of splitmix64 started at `seed` (uint64 numpy array; arithmetic wraps mod 2^64)."""
    with np.errstate(over="ignore"):
        state = (np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15))
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def generated(seed, rows, cols):
    """[rows, cols] fp32: a weight-like tensor. Element i (row-major) from splitmix64 output i:
    s = the sum of its four 16-bit parts; x = (s - 131070) * 2^-21 (sd about 0.018, like a trained
    projection); one element in 256 (top byte 0) times 16, an outlier; row r times 2^((r % 7) - 3),
    so blocks' absmaxes spread over 64x and the double quantisation sees small and large ones."""
    n = rows * cols
    r = splitmix64(seed, n)
    s = sum(((r >> np.uint64(16 * k)) & np.uint64(0xFFFF)).astype(np.int64) for k in range(4))
    x = (s - 131070).astype(np.float64) * 2.0 ** -21
    x = np.where((r >> np.uint64(56)) == 0, x * 16.0, x)
    row_scale = 2.0 ** ((np.arange(rows) % 7) - 3)
    x = x.reshape(rows, cols) * row_scale[:, None]
    out = x.astype(np.float32)
    assert np.array_equal(out.astype(np.float64), x), "generator values must be exact in fp32"
    return torch.from_numpy(out)


def crc32c(data):
    """CRC-32C (Castagnoli) of bytes, as engine/core/checksum.h computes it."""
    table = crc32c.table
    if table is None:
        table = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            table.append(c)
        crc32c.table = table
    crc = 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = None


def tbytes(t):
    return t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.uint8 else t.numpy().tobytes()


# ---------------------------------------------------------------------------------------------
# Quantisation goldens


def edge_input():
    """[9 * 64 + 10] fp32, one block per edge case (see README)."""
    code = bnbf.get_4bit_type("nf4", device="cpu")
    mids = (code[:-1] + code[1:]) / 2
    g = torch.Generator().manual_seed(3801)
    blocks = []
    # 0: every NF4 midpoint exactly (absmax 1), and one float either side of each
    b = torch.cat([torch.tensor([1.0, -1.0]), mids, torch.nextafter(mids, torch.tensor(2.0)),
                   torch.nextafter(mids, torch.tensor(-2.0)), code, torch.tensor([0.5])])
    assert b.numel() == 64
    blocks.append(b)
    # 1: all zeros
    blocks.append(torch.zeros(64))
    # 2: one outlier 1000x the rest
    b = torch.randn(64, generator=g) * 0.01
    b[17] = 10.0
    blocks.append(b)
    # 3: the largest magnitude is negative
    b = torch.randn(64, generator=g) * 0.02
    b[5] = -0.3
    blocks.append(b)
    # 4: a single non-zero value
    b = torch.zeros(64)
    b[40] = 0.125
    blocks.append(b)
    # 5: every code value times absmax 0.75 (exact products), four times over
    blocks.append((code * 0.75).repeat(4))
    # 6: tiny values (1e-30)
    blocks.append(torch.randn(64, generator=g) * 1e-30)
    # 7: midpoints times an absmax that is not a power of two (the reciprocal rounds)
    b = torch.cat([torch.tensor([0.3]), mids * 0.3, -mids * 0.3, mids[:15] * 0.3 * (1 + 2 ** -22),
                   torch.randn(18, generator=g) * 0.1])
    assert b.numel() == 64
    blocks.append(b)
    # 8: a block of equal values
    blocks.append(torch.full((64,), -0.0123))
    # short last block of 10 zeros: bitsandbytes clamps its absmax to 1e-38
    blocks.append(torch.zeros(10))
    return torch.cat(blocks)


def quant_cases():
    """name -> (input tensor, description). Large 'gen:' cases store digests instead of every byte."""
    g = torch.Generator().manual_seed(3800)
    cases = {}
    cases["small_f32"] = (torch.randn(3, 100, generator=g) * 0.5, "[3, 100] fp32 N(0, 0.5^2): 4 full blocks + 44")
    cases["odd_f32"] = (torch.randn(7, 13, generator=g), "[7, 13] fp32: 91 elements, odd (padded with code 7)")
    cases["edge_f32"] = (edge_input(), "[586] fp32: midpoints, zeros, outliers, a short all-zero block")
    x = torch.randn(37, 960, generator=g) * 0.02
    x *= 2.0 ** (torch.arange(37) % 9 - 4).float()[:, None]  # absmaxes over 256x
    x[3, 7] = 0.9
    x[20, 100:164] = 0.0  # a whole block of zeros inside
    cases["groups_f32"] = (x, "[37, 960] fp32: 555 blocks (2 groups of 256 + 43), rows scaled 2^-4..2^4, zeros")
    x = (torch.randn(48, 200, generator=g) * 0.05).to(torch.bfloat16)
    cases["bf16"] = (x, "[48, 200] bf16: 150 blocks")
    x = (torch.randn(40, 193, generator=g) * 0.05).to(torch.float16)
    cases["f16"] = (x, "[40, 193] fp16: 7720 elements, 121 blocks (the last short)")
    x = torch.randn(5 * 64 + 3, generator=g) * 0.1
    x[3], x[64 + 5], x[128 + 7], x[5 * 64 + 1] = float("nan"), float("inf"), -float("inf"), float("nan")
    cases["nonfinite_f32"] = (x, "[323] fp32: NaN in blocks 0 and 5 (short), +inf in 1, -inf in 2")
    cases["real_576x576"] = (("gen", 576001, 576, 576), "[576, 576] generated (SmolLM2-135M q_proj): 5184 blocks")
    cases["real_1536x576"] = (("gen", 1536576, 1536, 576), "[1536, 576] generated (SmolLM2 up_proj): digests")
    cases["large_4096x4096"] = (("gen", 40964096, 4096, 4096), "[4096, 4096] generated: 262144 blocks, digests")
    return cases


def dequant_fp32(packed, state):
    """dequantize_4bit's fp32 output for this state (a bf16/fp16 state is dequantised as fp32 too)."""
    s = bnbf.QuantState(absmax=state.absmax, shape=state.shape, code=state.code, blocksize=state.blocksize,
                        quant_type=state.quant_type, dtype=torch.float32, offset=state.offset, state2=state.state2)
    return bnbf.dequantize_4bit(packed, s)


def same(a, b):
    """Equal values, NaN equal to NaN (torch.equal says False for NaN)."""
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan())).all())


def quantize_both(x):
    q1, s1 = bnbf.quantize_4bit(x, blocksize=BLOCK, quant_type="nf4", compress_statistics=True)
    q0, s0 = bnbf.quantize_4bit(x, blocksize=BLOCK, quant_type="nf4", compress_statistics=False)
    assert torch.equal(q0, q1), "the packed codes do not depend on double quantisation"
    return q1.reshape(-1), s1, s0


def build_quant(out_root, log):
    folder = os.path.join(out_root, "quant")
    if os.path.isdir(folder):
        shutil.rmtree(folder)
    os.makedirs(folder)
    code = bnbf.get_4bit_type("nf4", device="cpu")
    dmap = bnbf.create_dynamic_map(signed=True)
    meta = {"format": "pt", "bitsandbytes": bitsandbytes.__version__, "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    save_canonical({"nf4_code": code.contiguous(), "dynamic_map": dmap.contiguous()},
                   os.path.join(folder, "maps.safetensors"), meta)

    for name, (x, desc) in quant_cases().items():
        digest_only = big = False
        m = dict(meta, description=desc)
        if isinstance(x, tuple):
            _, seed, rows, cols = x
            x = generated(seed, rows, cols)
            m["generator"] = f"splitmix64 seed={seed} rows={rows} cols={cols}"
            digest_only = rows * cols > 400000  # every statistic as a CRC-32C; absmax2 and offset in full
            big = True  # the dequantised values as a CRC-32C
        packed, s1, s0 = quantize_both(x)
        # bitsandbytes widens bf16/fp16 exactly before quantising: the same bytes as the fp32 values
        if x.dtype != torch.float32:
            p32, t1, t0 = quantize_both(x.float())
            assert torch.equal(p32, packed) and same(t0.absmax, s0.absmax)
            assert torch.equal(t1.absmax, s1.absmax) and same(t1.state2.absmax, s1.state2.absmax)
            assert same(t1.offset, s1.offset)
        # the nested state's code is the dynamic map, unchanged
        assert torch.equal(s1.state2.code, dmap) and s1.state2.blocksize == 256
        dq1, dq0 = dequant_fp32(packed, s1).reshape(-1), dequant_fp32(packed, s0).reshape(-1)
        # our reading of dequantisation: code * absmax, the absmax from two separate fp32 operations
        am1 = (dmap[s1.absmax.long()] * s1.state2.absmax.repeat_interleave(256)[: s1.absmax.numel()]) + s1.offset
        nib = torch.stack([packed >> 4, packed & 15], 1).reshape(-1)[: x.numel()].long()
        blk = torch.arange(x.numel()) // BLOCK
        assert same(code[nib] * am1[blk], dq1) and same(code[nib] * s0.absmax[blk], dq0)
        exact_mean = np.float32(s0.absmax.double().sum().item() / s0.absmax.numel())
        t = {"packed": packed, "absmax": s0.absmax, "absmax_q": s1.absmax, "absmax2": s1.state2.absmax,
             "offset": s1.offset.reshape(1).float()}
        if not big:
            t["dequant_dq"] = dq1
            t["dequant_nodq"] = dq0
            t["input"] = x.contiguous()
            if x.dtype != torch.float32:  # dequantize_4bit in the tensor's own dtype, as a bf16/fp16 model gets it
                t["dequant_dq_native"] = bnbf.dequantize_4bit(packed, s1).reshape(-1)
        else:
            m["crc32c.dequant_dq"] = "%08x" % crc32c(tbytes(dq1))
            m["crc32c.dequant_nodq"] = "%08x" % crc32c(tbytes(dq0))
        if digest_only:
            for k in ("packed", "absmax", "absmax_q"):
                m["crc32c." + k] = "%08x" % crc32c(tbytes(t.pop(k)))
        m["numel"] = str(x.numel())
        m["dtype"] = str(x.dtype).replace("torch.", "")
        m["shape"] = json.dumps(list(x.shape))
        save_canonical({k: v.contiguous() for k, v in t.items()}, os.path.join(folder, name + ".safetensors"), m)
        log(f"quant/{name}: {x.numel()} elements, {s0.absmax.numel()} blocks, offset {s1.offset.item():.9g} "
            f"(exact mean rounded {'equal' if exact_mean == s1.offset.item() else 'DIFFERS'}), "
            f"{os.path.getsize(os.path.join(folder, name + '.safetensors'))} bytes")


# ---------------------------------------------------------------------------------------------
# The tiny base, its bitsandbytes 4-bit folders, and the PEFT + bitsandbytes QLoRA references

GOLDEN_REL = "tests/engine/golden/qlora"  # relative to REPO; what adapter_config.json names as the base
ALL_PROJ = lora_goldens.ALL_PROJ
LORA = dict(r=4, lora_alpha=8, target_modules=ALL_PROJ, use_rslora=False)
LORA_SEED = 3803
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 3
BASE_CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=16, bos_token_id=1, eos_token_id=2,
                   hidden_act="silu", rms_norm_eps=1e-5, rope_parameters=base_goldens.LLAMA3_ROPE,
                   max_position_embeddings=131072, tie_word_embeddings=False)


def bnb_config(compute_dtype):
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=compute_dtype)


def load_bnb(folder, dtype=torch.float32):
    """A 4-bit folder (or a plain one quantised at load when quant is given) on the CPU, eager attention."""
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="eager",
                                                       device_map="cpu", output_loading_info=True)
    assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
    # On a CPU with AVX512-BF16, bitsandbytes switches an eval-mode 4-bit layer whose input needs no
    # gradient to a bf16 kernel (repacking its weight, no autograd): the references are fp32 compute.
    for m in quantised_modules(model).values():
        m.support_avx512bf16_for_cpu = False
    model.eval()
    return model


def quantised_modules(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, bitsandbytes.nn.Linear4bit)}


def dequantised_weights(model):
    """Module name -> its 4-bit weight dequantised by bitsandbytes in fp32."""
    out = {}
    for n, m in quantised_modules(model).items():
        out[n.replace("base_model.model.", "").replace(".base_layer", "")] = dequant_fp32(m.weight.data,
                                                                                          m.weight.quant_state)
    return out


def build_model(out_root, log):
    base_dir, bnb_dir, bnb16_dir, peft_dir = (os.path.join(out_root, d) for d in ("base", "bnb", "bnb_bf16", "peft"))
    for d in (base_dir, bnb_dir, bnb16_dir, peft_dir):
        if os.path.isdir(d):
            shutil.rmtree(d)

    # The base: random like the hf goldens, stored in bf16.
    cfg = LlamaConfig(**BASE_CONFIG)
    torch.manual_seed(3802)
    model = LlamaForCausalLM(cfg)
    base_goldens.randomize(model, torch.Generator().manual_seed(3802))
    model.to(torch.bfloat16).save_pretrained(base_dir)
    for name, d in ((bnb_dir, torch.float32), (bnb16_dir, torch.bfloat16)):
        q, info = AutoModelForCausalLM.from_pretrained(base_dir, quantization_config=bnb_config(d), dtype=d,
                                                       device_map="cpu", output_loading_info=True)
        assert not any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), info
        assert len(quantised_modules(q)) == 7 * cfg.num_hidden_layers
        q.save_pretrained(name)
    for d in (base_dir, bnb_dir, bnb16_dir):
        log(f"{os.path.relpath(d, out_root)}/: " + ", ".join(f"{f} {os.path.getsize(os.path.join(d, f))}"
                                                           for f in sorted(os.listdir(d))))

    # The saved 4-bit bytes are those of quantize_4bit on the bf16 weights (what the C++ test checks too).
    with safe_open(os.path.join(base_dir, "model.safetensors"), "pt") as b, \
            safe_open(os.path.join(bnb_dir, "model.safetensors"), "pt") as q:
        for k in b.keys():
            if any(p in k for p in ALL_PROJ):
                packed, st = bnbf.quantize_4bit(b.get_tensor(k), blocksize=BLOCK, quant_type="nf4",
                                                compress_statistics=True)
                assert torch.equal(packed, q.get_tensor(k)) and torch.equal(st.absmax, q.get_tensor(k + ".absmax"))
                assert torch.equal(st.state2.absmax, q.get_tensor(k + ".nested_absmax"))

    # The batch of the hf goldens' shape: 2 x 16 tokens, the first 5 targets of row 0 masked.
    _, inputs, targets, _, _ = base_goldens.make_batch(torch.Generator().manual_seed(3804))
    ids = inputs

    # The adapter: PEFT's lora_A init, lora_B random (PEFT would start it at 0).
    torch.manual_seed(LORA_SEED)
    model = get_peft_model(load_bnb(bnb_dir), LoraConfig(**LORA, lora_dropout=0.0, bias="none",
                                                         task_type="CAUSAL_LM"))
    gen = torch.Generator().manual_seed(LORA_SEED + 1)
    with torch.no_grad():
        for n, p in lora_goldens.lora_params(model).items():
            if ".lora_B." in n:
                p.copy_(lora_goldens.LORA_B_STD * torch.randn(p.shape, generator=gen))
    model.name_or_path = GOLDEN_REL + "/bnb"
    model.base_model.model.name_or_path = GOLDEN_REL + "/bnb"
    model.peft_config["default"].base_model_name_or_path = GOLDEN_REL + "/bnb"
    lora_goldens.save_adapter(model, peft_dir)

    # References from the saved adapter reloaded onto the saved 4-bit folder.
    def reload(folder=bnb_dir, trainable=True):
        lines = []
        with lora_goldens.captured(lines):
            m = PeftModel.from_pretrained(load_bnb(folder), peft_dir, is_trainable=trainable)
        assert not lora_goldens.serious(lines), lines
        m.eval()
        return m

    model = reload()
    params = lora_goldens.lora_params(model)
    assert len(params) == 2 * 7 * cfg.num_hidden_layers
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, p in model.named_parameters() if ".lora_" in n}
    out = {"inputs": inputs.int(), "targets": targets.int()}
    with torch.no_grad(), model.disable_adapter():
        out["base.logits"] = model(input_ids=ids).logits.float()
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
    d_adapter = (out["logits"] - out["base.logits"]).abs().max().item()
    assert d_adapter >= 0.1, "the adapter barely changes the logits"

    # What these references mean: a plain fp32 Llama whose projections are bitsandbytes' dequantised
    # weights, with the same adapter, gives the same logits and gradients (1e-5).
    dq = dequantised_weights(model)
    plain = base_goldens.load_fp32(base_dir)[0]
    with torch.no_grad():
        for n, w in dq.items():
            plain.get_submodule(n).weight.copy_(w)
    lines = []
    with lora_goldens.captured(lines):
        plain = PeftModel.from_pretrained(plain, peft_dir, is_trainable=True)
    plain.eval()
    p_logits = plain(input_ids=ids).logits
    masked_loss(p_logits, targets).backward()
    p_params = lora_goldens.lora_params(plain)
    d_logits = (p_logits.detach() - out["logits"]).abs().max().item()
    d_grad = max(((p_params[n].grad - out["grad." + n]).abs().max() /
                  out["grad." + n].abs().max()).item() for n in params)
    log(f"QLoRA: loss {loss.item():.7f}; adapter moves logits by {d_adapter:.3f}; plain fp32 model with the "
        f"dequantised weights: logits {d_logits:.1e}, gradients {d_grad:.1e} (relative)")
    assert d_logits <= 1e-5 and d_grad <= 1e-5
    for n, w in dq.items():
        out["dequant." + n + ".weight"] = w.contiguous()

    # AdamW over the LoRA tensors only, one group, all decayed; the same batch each step.
    model = reload()
    params = lora_goldens.lora_params(model)
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

    # The bf16 folder loads too (compute in bf16): its logits are close to the fp32 ones.
    m16 = reload(bnb16_dir, trainable=False)
    with torch.no_grad():
        d16 = (m16(input_ids=ids).logits.float() - out["logits"]).abs().max().item()
    log(f"  bnb_bf16/ + adapter (bf16 compute) vs fp32 compute: logits {d16:.2e}")

    for k, v in out.items():
        assert v.dtype in (torch.float32, torch.int32), (k, v.dtype)
    meta = {"format": "pt", "base": GOLDEN_REL + "/bnb", "r": str(LORA["r"]), "lora_alpha": str(LORA["lora_alpha"]),
            "target_modules": ",".join(ALL_PROJ), "scaling": repr(LORA["lora_alpha"] / LORA["r"]),
            "adamw": json.dumps({**ADAMW, "steps": ADAMW_STEPS, "params": "lora only, one group"}),
            "generated_by": "tests/reference/make_qlora_goldens.py", **versions()}
    save_canonical({k: v.contiguous() for k, v in out.items()}, os.path.join(out_root, "reference.safetensors"),
                   meta)
    log(f"reference.safetensors {os.path.getsize(os.path.join(out_root, 'reference.safetensors'))} bytes; "
        f"peft/ " + ", ".join(f"{f} {os.path.getsize(os.path.join(peft_dir, f))}" for f in sorted(os.listdir(peft_dir))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", choices=["quant", "model"])
    args = ap.parse_args()
    set_determinism()
    os.makedirs(args.out, exist_ok=True)
    if args.only in (None, "quant"):
        build_quant(args.out, print)
    if args.only in (None, "model"):
        build_model(args.out, print)


if __name__ == "__main__":
    main()
