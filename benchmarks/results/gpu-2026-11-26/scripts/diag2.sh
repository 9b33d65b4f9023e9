#!/usr/bin/env bash
set -u
cp .gpu-prebuilt/_C.abi3.so .gpu-prebuilt/_build_info.py torch_lstm_grad/
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
R=.gpu-prebuilt/repro.py
L=$OUT/sigill2.txt
run() { echo "=== $*" >> $L; timeout 60 env "$@" >> $L 2>&1; echo "rc=$?" >> $L; }
run CUDA_VISIBLE_DEVICES= python3 $R
run CUDA_VISIBLE_DEVICES= ATEN_CPU_CAPABILITY=avx2 python3 $R
run CUDA_VISIBLE_DEVICES= ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 python3 $R
run CUDA_VISIBLE_DEVICES= ONEDNN_VERBOSE=all python3 $R
run CUDA_VISIBLE_DEVICES= python3 -c "import torch; print('init_amx', torch._C._cpu._init_amx())"
grep -i "x86_Thread\|x86_Guest\|AMX" /proc/self/status >> $L 2>&1
echo "=== cuda-gdb" >> $L
CUDA_VISIBLE_DEVICES= timeout 150 cuda-gdb -q -batch -ex 'set pagination off' -ex 'handle SIGILL stop print' -ex run -ex 'x/6i $pc' -ex 'info symbol $pc' -ex 'bt 20' -ex 'info registers rip' --args python3 $R >> $L 2>&1
echo "rc=$?" >> $L
timeout 120 python3 -m pytest -q -rf --tb=short -p no:cacheprovider -m cuda --timeout 60 --deselect "tests/test_cuda.py::test_block_lstm_inference_matches_cpu" tests/test_cuda.py tests/test_cuda_modules.py tests/test_cudnn_rnn.py tests/test_opcheck.py > $OUT/tests3.log 2>&1
echo "rc=$?" >> $OUT/tests3.log
tail -3 $OUT/tests3.log; grep -a "rc=\|SIGILL\|=>" $L | head -30
