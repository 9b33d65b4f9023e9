#!/usr/bin/env bash
# The twenty-fifth session's one call: gpu_check.sh at this tree (csrc unchanged since the
# prebuilt of 8c85e25; its sources hash is checked), with tests/test_cuda_ports.py new among
# the tests: tf_keras files converted, run on the GPU, against tf_keras' stored numbers.
set -uo pipefail
bash benchmarks/gpu_check.sh "${OUT:-gpu-out}"
