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
  bnb_fp4/, bnb_8bit/, ...   not written: the C++ test makes its bad folders from bnb/ in a temp dir
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
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_model_goldens import save_canonical  # noqa: E402

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "tests", "engine", "golden", "qlora")
BLOCK = 64


def set_determinism():
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # absmax.mean() is a summation: one order, whatever the machine's cores
    torch.set_default_dtype(torch.float32)


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
    cases["real_576x576"] = (("gen", 576001, 576, 576), "[576, 576] generated (SmolLM2-135M q_proj): 5184 blocks")
    cases["real_1536x576"] = (("gen", 1536576, 1536, 576), "[1536, 576] generated (SmolLM2 up_proj): digests")
    cases["large_4096x4096"] = (("gen", 40964096, 4096, 4096), "[4096, 4096] generated: 262144 blocks, digests")
    return cases


def dequant_fp32(packed, state):
    """dequantize_4bit's fp32 output for this state (a bf16/fp16 state is dequantised as fp32 too)."""
    s = bnbf.QuantState(absmax=state.absmax, shape=state.shape, code=state.code, blocksize=state.blocksize,
                        quant_type=state.quant_type, dtype=torch.float32, offset=state.offset, state2=state.state2)
    return bnbf.dequantize_4bit(packed, s)


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
            assert torch.equal(p32, packed) and torch.equal(t0.absmax, s0.absmax)
            assert torch.equal(t1.absmax, s1.absmax) and torch.equal(t1.state2.absmax, s1.state2.absmax)
            assert torch.equal(t1.offset, s1.offset)
        # the nested state's code is the dynamic map, unchanged
        assert torch.equal(s1.state2.code, dmap) and s1.state2.blocksize == 256
        dq1, dq0 = dequant_fp32(packed, s1).reshape(-1), dequant_fp32(packed, s0).reshape(-1)
        # our reading of dequantisation: code * absmax, the absmax from two separate fp32 operations
        am1 = (dmap[s1.absmax.long()] * s1.state2.absmax.repeat_interleave(256)[: s1.absmax.numel()]) + s1.offset
        nib = torch.stack([packed >> 4, packed & 15], 1).reshape(-1)[: x.numel()].long()
        blk = torch.arange(x.numel()) // BLOCK
        assert torch.equal(code[nib] * am1[blk], dq1) and torch.equal(code[nib] * s0.absmax[blk], dq0)
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT)
    ap.add_argument("--only", choices=["quant", "model"])
    args = ap.parse_args()
    set_determinism()
    os.makedirs(args.out, exist_ok=True)
    if args.only in (None, "quant"):
        build_quant(args.out, print)


if __name__ == "__main__":
    main()
