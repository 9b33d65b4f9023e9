#!/usr/bin/env bash
# The second call: gpu_check.sh again, now with the published frozen TF1 graph (cutkum's three
# GRUCells) on the GPU against TF's stored run of it (tests/test_cuda_ports.py).
set -uo pipefail
bash benchmarks/gpu_check.sh "${OUT:-gpu-out}"
