"""cuDNN's weight space as PyTorch lays it out (GPU only): for nn.LSTM/GRU/RNN(5, 6) of 1-3
layers, both directions, with and without projection, each parameter's element offset in the
flat buffer flatten_parameters() made, one model a line. tests/data/cudnn_weight_order_h200.txt
is this script's output on an H200 (cuDNN 9.19, torch 2.11.0+cu130, 2026-11-26), the oracle
tests/ops/test_raw_ops_cudnn_rnn.py holds the params layout to on machines without a GPU.

    python release/cudnn_weight_order.py > cudnn_weight_order.txt
"""

import torch


def main() -> None:
    for mode, cls in (("lstm", torch.nn.LSTM), ("gru", torch.nn.GRU), ("rnn_tanh", torch.nn.RNN)):
        for layers in (1, 2, 3):
            for bidirectional in (False, True):
                for proj in (0, 3) if mode == "lstm" else (0,):
                    kw = {"proj_size": proj} if proj else {}
                    m = cls(5, 6, num_layers=layers, bidirectional=bidirectional, **kw).cuda()
                    m.flatten_parameters()
                    named = list(zip(m._flat_weights_names, m._flat_weights, strict=True))
                    base = min(w.data_ptr() for _, w in named)
                    size = named[0][1].element_size()
                    at = sorted(((w.data_ptr() - base) // size, n, w.numel()) for n, w in named)
                    print(mode, layers, "bi" if bidirectional else "uni", "proj", proj,
                          " ".join(f"{n}@{o}+{k}" for o, n, k in at))  # fmt: skip


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("cudnn_weight_order: needs a CUDA device (torch sees none)")
    main()
