import os, sys, torch
print("caps", {k: v for k, v in torch._C._cpu._get_cpu_capability().items() if "amx" in k or "bf16" in k or "fp16" in k}, flush=True)
import torch_lstm_grad
from torch_lstm_grad import ops
torch.manual_seed(0)
T, B, I, H, P = 5, 3, 4, 6, 3
g = lambda *s: (torch.randn(*s) * 0.5).to(torch.bfloat16)
x, cs, h, w, b, wci, wcf, wco = g(T, B, I), g(B, H), g(B, P), g(I + P, 4 * H), g(4 * H), g(H), g(H), g(H)
w_proj = g(H, P)
which = sys.argv[1] if len(sys.argv) > 1 else "inference"
print("running", which, flush=True)
if which == "inference":
    out = ops.block_lstm_inference(x, cs, h, w, b, wci=wci, wcf=wcf, wco=wco, w_proj=w_proj,
                                   cell_clip=0.5, proj_clip=0.4, use_peephole=True)
elif which == "matmul":
    out = torch.mm(g(64, 64), g(64, 64))
print("ok", flush=True)
