"""Which cuBLAS kernels the backward's per-step product dh = dgates · Whᵀ gets at B = 128, with
Whᵀ as a transposed view of the stored [H, 4H] weight (what the kernels pass: op 't') or as
a contiguous copy (op 'n'): does either layout avoid split-K's separate reduction launch?
Run on the GPU machine (torch.mm calls the same cuBLAS entry points as the extension)."""

import torch
from torch.profiler import ProfilerActivity, profile

torch.backends.cuda.matmul.allow_tf32 = False
for dtype, H in [(torch.float32, 256), (torch.float32, 512), (torch.float32, 1024),
                 (torch.bfloat16, 1024), (torch.bfloat16, 512)]:
    B = 128
    wh = torch.randn(H, 4 * H, device="cuda", dtype=dtype)
    dg = torch.randn(B, 4 * H, device="cuda", dtype=dtype)
    out = torch.empty(B, H, device="cuda", dtype=torch.float32)
    for name, b in (("view 't'", wh.t()), ("copy 'n'", wh.t().contiguous())):
        def run(b=b):
            if dtype == torch.bfloat16:
                torch.mm(dg, b, out_dtype=torch.float32, out=out)
            else:
                torch.mm(dg, b, out=out)
        for _ in range(3):
            run()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                run()
            torch.cuda.synchronize()
        kern = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                k = kern.setdefault(e.name[:70], [0, 0.0])
                k[0] += 1
                k[1] += e.device_time_total
        print(dtype, H, name, {k: (v[0] // 10, round(v[1] / 10, 1)) for k, v in kern.items()},
              flush=True)
