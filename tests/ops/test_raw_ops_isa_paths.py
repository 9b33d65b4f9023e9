"""Every instruction set's CPU kernels, on this machine: each level ATen can run here (the
baseline, AVX2 and, on an AVX-512 CPU, AVX-512; lowered with ATEN_CPU_CAPABILITY, as a user on
that CPU gets them) computes the ops' float32 outputs and gradients in a subprocess of its own,
and each must be within float32's rounding of the same ops in float64 (the truth: the kernels'
float64 path, checked against the reference at 1e-12 elsewhere). Only one level runs in the
rest of the suite, so a defect in another level's kernels (the AVX2 panels or register-tile
transposes, on an AVX-512 CI machine) would otherwise pass every test.

The shapes reach each kernel's edges: batches of 1 to 64 rows (the small-batch gate panels, in
chunks of 6 rows on AVX2 and 12 on AVX-512), hidden sizes that are not a multiple of the panels'
16 units or the transposes' 8 or 16 tiles, [x, h]ᵀ products whose L·B is ragged too, time
loops split by rows (4 steps or more, 2^18 multiply-adds a step, 8 rows or more on two
threads), and the cells' dot products of rows at 1 to 8 rows.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

_SCRIPT = r"""
import json, sys, torch
from torch_lstm_grad import raw_ops

torch.manual_seed(0)
errors = {"isa": torch.ops.torch_lstm_grad._cpu_isa()}


def rel(a, b):
    return ((a.double() - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def both(fn, leaves):
    # fn on float32 leaves and on float64 ones: the outputs and every leaf's gradient.
    res = []
    for dtype in (torch.float32, torch.float64):
        xs = [t.detach().to(dtype).requires_grad_() for t in leaves]
        outs = fn(*xs)
        loss = sum((o * (1 + torch.arange(o.numel(), dtype=dtype).reshape(o.shape) % 7)).sum()
                   for o in outs)
        grads = torch.autograd.grad(loss, xs, allow_unused=True)  # a GRU's c0 is unused
        res.append([o.detach() for o in outs] + [g for g in grads if g is not None])
    return max(rel(a, b) for a, b in zip(*res))


for T, B, I, H in [(3, 1, 19, 20), (4, 5, 16, 48), (3, 7, 33, 24), (2, 13, 8, 40),
                   (3, 32, 24, 64), (2, 64, 17, 32), (2, 65, 9, 16),
                   (4, 21, 11, 56)]:
    s = H ** -0.5
    u = lambda *shape: (torch.rand(*shape) * 2 - 1) * s
    x, cs, h, w = torch.randn(T, B, I), u(B, H), u(B, H), u(I + H, 4 * H)
    wci, wcf, wco, b = u(H), u(H), u(H), u(4 * H)
    seq = torch.tensor(T)

    def block(x, cs, h, w, wci, wcf, wco, b):
        o = raw_ops.BlockLSTM(seq, x, cs, h, w, wci, wcf, wco, b, cell_clip=0.9,
                              use_peephole=True)
        return [o.cs, o.h, o.i, o.f, o.o, o.ci, o.co]

    errors[f"BlockLSTM {T},{B},{I},{H}"] = both(block, [x, cs, h, w, wci, wcf, wco, b])

    for mode, G in (("lstm", 4), ("gru", 3)):
        n = int(raw_ops.CudnnRNNParamsSize(num_layers=1, num_units=H, input_size=I,
                                           T=torch.float32, S=torch.int64, rnn_mode=mode)[0])
        params = u(n)
        lengths = torch.full((B,), T, dtype=torch.int32)
        lengths[0] = max(1, T - 1)

        def cudnn(x, h0, c0, params, mode=mode, lengths=lengths):
            o = raw_ops.CudnnRNNV3(x, h0, c0, params, lengths, rnn_mode=mode)
            return [o.output, o.output_h] + ([o.output_c] if mode == "lstm" else [])

        errors[f"CudnnRNNV3 {mode} {T},{B},{I},{H}"] = both(
            cudnn, [x, h[None], cs[None], params])

# The one-step cells at 1 to 8 rows, where the backward's products d·wᵀ are dot products of
# rows (csrc/cpu/dot_rows.cpp) from 2^18 multiply-adds: N = 4H, 2H, H not a multiple of 8 or
# 16 (the masked last vector), K = I + H = 299 not a multiple of any block of w's rows, and 5
# and 7 rows for the groups of four rows and their remainders.
I, H = 68, 231
for B in (1, 4, 5, 7, 8):
    s = H ** -0.5
    u = lambda *shape: (torch.rand(*shape) * 2 - 1) * s
    x, cs, h = torch.randn(B, I), u(B, H), u(B, H)
    w, wci, wcf, wco, b = u(I + H, 4 * H), u(H), u(H), u(H), u(4 * H)

    def cell(x, cs, h, w, wci, wcf, wco, b):
        o = raw_ops.LSTMBlockCell(x, cs, h, w, wci, wcf, wco, b, use_peephole=True)
        return [o.cs, o.h]

    errors[f"LSTMBlockCell {B},{I},{H}"] = both(cell, [x, cs, h, w, wci, wcf, wco, b])
    # x constant: h_prev's block of w alone.
    errors[f"LSTMBlockCell x constant {B},{I},{H}"] = both(
        lambda *a, x=x: cell(x.to(a[0].dtype), *a), [cs, h, w, wci, wcf, wco, b])
    wru, wc, bru, bc = u(I + H, 2 * H), u(I + H, H), u(2 * H), u(H)

    def gru(x, h, wru, wc, bru, bc):
        return [raw_ops.GRUBlockCell(x, h, wru, wc, bru, bc).h]

    errors[f"GRUBlockCell {B},{I},{H}"] = both(gru, [x, h, wru, wc, bru, bc])

print(json.dumps(errors))
"""


def _levels() -> list[str]:
    here = torch.backends.cpu.get_cpu_capability()
    levels = ["default"]
    if here in ("AVX2", "AVX512"):
        levels.append("avx2")
    if here == "AVX512":
        levels.append("avx512")
    return levels


@pytest.mark.parametrize("level", ["default", "avx2", "avx512"])
def test_every_isa_level_matches_float64(level):
    if level not in _levels():
        pytest.skip(f"this CPU runs {torch.backends.cpu.get_cpu_capability()}: no {level} here")
    env = dict(os.environ, ATEN_CPU_CAPABILITY=level, OMP_NUM_THREADS="2")
    run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    errors = json.loads(run.stdout.strip().splitlines()[-1])
    assert errors.pop("isa") == level
    # float32 against float64 over these short sums: ~1e-7 relative; a wrong element of a
    # transposed tile or a panel's row is of the values' own size.
    bad = {k: v for k, v in errors.items() if not v < 2e-5}
    assert not bad, bad
