#!/usr/bin/env bash
# One-off diagnosis (issue 33, 2026-11-26): the SIGILL on the GPU machine's CPU, cuDNN's
# weight-space order, and the CUDA tests with the CPU kernels held to AVX2.
set -u
cp .gpu-prebuilt/_C.abi3.so .gpu-prebuilt/_build_info.py torch_lstm_grad/
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ lscpu; grep -m1 flags /proc/cpuinfo; uname -a
  python3 -c "import torch; print('cap', torch.backends.cpu.get_cpu_capability()); print('amx', torch._C._cpu._is_amx_tile_supported(), torch._C._cpu._init_amx()); import torch_lstm_grad._C"
} > $OUT/cpu.txt 2>&1
timeout 60 python3 .gpu-prebuilt/layout_probe.py > $OUT/layout_probe.txt 2>&1
LD_PRELOAD=$PWD/.gpu-prebuilt/sigill_probe.so timeout 120 python3 -m pytest -v -p no:cacheprovider -p no:faulthandler "tests/test_cuda.py::test_block_lstm_inference_matches_cpu" > $OUT/sigill.txt 2>&1
echo "rc=$?" >> $OUT/sigill.txt
ATEN_CPU_CAPABILITY=avx2 timeout 200 python3 -m pytest -q -rfs --tb=short -p no:cacheprovider -m cuda --timeout 60 tests/test_cuda.py tests/test_cuda_modules.py tests/test_cudnn_rnn.py tests/test_opcheck.py > $OUT/tests_avx2.log 2>&1
echo "rc=$?" >> $OUT/tests_avx2.log
tail -3 $OUT/tests_avx2.log; grep SIGILL_PROBE $OUT/sigill.txt; grep -c . $OUT/layout_probe.txt
