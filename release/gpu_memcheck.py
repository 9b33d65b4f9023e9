"""Every CUDA kernel of the extension once, float32, small shapes: the program that
release/gpu_check.sh runs under `compute-sanitizer --tool memcheck` with
PYTORCH_NO_CUDA_MEMORY_CACHING=1 (so each tensor is its own allocation and a read or write past
one is seen; under the caching allocator it would land in a pooled neighbour).

Forward and backward of: BlockLSTM / BlockLSTMV2 / LSTMBlockCell (peepholes, clip, a
seq_len_max below T), the same and keras_gru under TORCH_LSTM_GRAD_CUDA_RECURRENT=persistent
(the persistent recurrences, csrc/cuda/*_persistent.cuh), block_lstm_ex in each variant with
and without a projection, block_lstm_inference with and without sequence_length and w_proj,
GRUBlockCell, keras_gru (reset_after both ways, each variant), CudnnRNNV3 in every mode
(bidirectional, projection, zero-length and padded rows, batch-major, dropout) with the copying
and the consuming backward, and cudnn_rnn_inference. Prints one line per case; exits 1 when a
case raises, 2 without a GPU.

    python release/gpu_memcheck.py
"""

from __future__ import annotations

import os
import sys
import traceback

import torch

import torch_lstm_grad
from torch_lstm_grad import ops
from torch_lstm_grad import raw_ops as R

T, B, I, H, P = 4, 3, 5, 6, 3  # noqa: E741
VARIANTS = [("sigmoid", "tanh", "straight_through"), ("hard_sigmoid_keras2", "relu", "zero"),
            ("hard_sigmoid_keras3", "linear", "zero")]  # fmt: skip


def g(*shape, grad=True):
    return (torch.randn(*shape, device="cuda") * 0.5).requires_grad_(grad)


def backward(*outs):
    leaves = [t for o in outs for t in [o] if t.requires_grad]
    torch.autograd.backward(leaves, [torch.randn_like(t) for t in leaves])
    torch.cuda.synchronize()


def lstm_block(op):
    kw = {"use_peephole": True, "cell_clip": 0.5}
    if op == "LSTMBlockCell":
        out = R.LSTMBlockCell(g(B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H), g(H),
                              g(4 * H), **kw)  # fmt: skip
    else:
        out = getattr(R, op)(T - 1, g(T, B, I), g(B, H), g(B, H), g(I + H, 4 * H), g(H), g(H),
                             g(H), g(4 * H), **kw)  # fmt: skip
    backward(out.cs, out.h)


def persistent(fn):
    """fn() with the persistent recurrence asked for (read at each call)."""
    os.environ["TORCH_LSTM_GRAD_CUDA_RECURRENT"] = "persistent"
    try:
        fn()
    finally:
        del os.environ["TORCH_LSTM_GRAD_CUDA_RECURRENT"]


def block_lstm_ex(variant, proj):
    gate, act, clip = variant
    n = P if proj else H
    out = ops.block_lstm_ex(g(T, B, I), g(B, H), g(B, n), g(I + n, 4 * H), g(4 * H),
                            seq_len_max=T - 1, wci=g(H), wcf=g(H), wco=g(H),
                            w_proj=g(H, P) if proj else None, cell_clip=0.4, proj_clip=0.3,
                            use_peephole=True, gate_activation=gate, activation=act,
                            clip_gradient=clip)  # fmt: skip
    backward(out.cs, out.h)


def block_lstm_inference(lengths, proj):
    n = P if proj else H
    seq = None if lengths is None else torch.tensor(lengths, device="cuda")
    ops.block_lstm_inference(g(T, B, I, grad=False), g(B, H, grad=False), g(B, n, grad=False),
                             g(I + n, 4 * H, grad=False), g(4 * H, grad=False),
                             w_proj=g(H, P, grad=False) if proj else None, sequence_length=seq,
                             cell_clip=0.5, proj_clip=0.4)  # fmt: skip
    torch.cuda.synchronize()


def gru_block_cell():
    out = R.GRUBlockCell(g(B, I), g(B, H), g(I + H, 2 * H), g(I + H, H), g(2 * H), g(H))
    backward(out.h)


def keras_gru(reset_after, variant):
    bias = g(2, 3 * H) if reset_after else g(3 * H)
    out = ops.keras_gru(g(T, B, I), g(B, H), g(I, 3 * H), g(H, 3 * H), bias, seq_len_max=T - 1,
                        reset_after=reset_after, gate_activation=variant[0],
                        activation=variant[1])  # fmt: skip
    backward(out.h)


def cudnn(mode, L, D, proj, lengths, time_major, dropout, retain):
    direction = "bidirectional" if D == 2 else "unidirectional"
    size = int(R.CudnnRNNParamsSize(num_layers=L, num_units=H, input_size=I, T=torch.float32,
                                    S=torch.int64, rnn_mode=mode, direction=direction,
                                    num_proj=proj)[0])  # fmt: skip
    n = proj or H
    x = g(T, B, I) if time_major else g(B, T, I)
    h0 = g(L * D, B, n) if time_major else g(B, L * D, n)
    c0 = torch.zeros((), device="cuda")
    if mode == "lstm":
        c0 = g(L * D, B, H) if time_major else g(B, L * D, H)
    seq = torch.tensor(lengths, dtype=torch.int32)
    out = R.CudnnRNNV3(x, h0, c0, g(size), seq, rnn_mode=mode, direction=direction,
                       dropout=dropout, seed=1, seed2=2, num_proj=proj,
                       time_major=time_major)  # fmt: skip
    outs = [out.output, out.output_h] + ([out.output_c] if mode == "lstm" else [])
    loss = sum((o * torch.randn_like(o)).sum() for o in outs)
    loss.backward(retain_graph=retain)  # retain: the copying backward; else the consuming one
    torch.ops.torch_lstm_grad.cudnn_rnn_inference(
        x.detach(), h0.detach(), c0.detach(), g(size, grad=False), seq, [], [], mode,
        "linear_input", direction, proj, time_major)  # fmt: skip
    torch.cuda.synchronize()


def cases():
    for op in ("BlockLSTM", "BlockLSTMV2", "LSTMBlockCell"):
        yield op, lambda op=op: lstm_block(op)
    for op in ("BlockLSTM", "BlockLSTMV2"):
        yield f"{op} persistent", lambda op=op: persistent(lambda: lstm_block(op))
    yield ("block_lstm_inference persistent",
           lambda: persistent(lambda: block_lstm_inference(None, False)))  # fmt: skip
    yield "keras_gru persistent", lambda: persistent(lambda: keras_gru(True, VARIANTS[0]))
    for v in VARIANTS:
        for proj in (False, True):
            yield f"block_lstm_ex {v[0]} proj={proj}", lambda v=v, p=proj: block_lstm_ex(v, p)
    for lengths in (None, [4, 2, 0]):
        for proj in (False, True):
            yield (f"block_lstm_inference lengths={lengths} proj={proj}",
                   lambda lg=lengths, p=proj: block_lstm_inference(lg, p))
    yield "GRUBlockCell", gru_block_cell
    for reset_after in (True, False):
        for v in VARIANTS:
            yield (f"keras_gru reset_after={reset_after} {v[0]}",
                   lambda r=reset_after, v=v: keras_gru(r, v))
    for mode, L, D, proj, lengths, tm, dropout, retain in (
        ("lstm", 1, 1, 0, [4, 4, 4], True, 0.0, False),
        ("lstm", 2, 2, 0, [4, 0, 2], True, 0.0, True),
        ("lstm", 2, 1, P, [1, 4, 3], False, 0.5, False),
        ("gru", 2, 2, 0, [4, 3, 0], False, 0.0, False),
        ("rnn_tanh", 2, 1, 0, [2, 4, 1], True, 0.0, True),
        ("rnn_relu", 1, 2, 0, [4, 1, 4], True, 0.0, False),
    ):
        yield (f"CudnnRNNV3 {mode} L={L} D={D} proj={proj} lengths={lengths} time_major={tm} "
               f"dropout={dropout} retain_graph={retain}",
               lambda a=(mode, L, D, proj, lengths, tm, dropout, retain): cudnn(*a))  # fmt: skip


def main() -> int:
    if not torch.cuda.is_available() or not torch_lstm_grad.built_with_cuda():
        print("gpu_memcheck: needs a CUDA device and a CUDA build of the extension",
              file=sys.stderr)  # fmt: skip
        return 2
    torch.manual_seed(0)
    failed = 0
    for name, fn in cases():
        try:
            fn()
            print(f"ok      {name}", flush=True)
        except Exception:  # noqa: BLE001 (report every case, then fail)
            failed += 1
            print(f"FAILED  {name}\n{traceback.format_exc()}", flush=True)
    print(f"gpu_memcheck: {failed} cases failed" if failed else "gpu_memcheck: every case ran")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
